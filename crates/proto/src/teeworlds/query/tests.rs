use std::net::{Ipv4Addr, SocketAddr};

use super::*;
use crate::model::RawValue;

fn fixture(rel: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/teeworlds/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn target() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 18304))
}

fn other() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 9999))
}

const MS: fn(u64) -> Duration = Duration::from_millis;

fn config(retries: u32) -> QueryConfig {
    QueryConfig {
        attempt_timeout: MS(1000),
        retries,
    }
}

/// The tokens used in every capture: xe 12 34 + 56, client c0 ff ee 01, browse 200.
fn capture_tokens() -> Tokens {
    Tokens::new(0x12_3456, 0xc0ff_ee01, 200).unwrap()
}

fn drain(q: &mut TeeworldsQuery, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::new();
        match q.poll_transmit(now, &mut buf) {
            Some(t) => {
                assert_eq!(t.destination, target());
                out.push(buf);
            }
            None => return out,
        }
    }
}

fn done(q: &mut TeeworldsQuery) -> Box<crate::model::ServerInfo> {
    match q.poll_event() {
        Some(Event::Done(info)) => info,
        other => panic!("expected Done, got {other:?}"),
    }
}

#[test]
fn sends_extended_and_token_request_at_once() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(2), capture_tokens());
    let sent = drain(&mut q, t0);
    assert_eq!(
        sent,
        vec![
            fixture("serverinfo/ddnet-16.4-xe-p0-request.bin"),
            fixture("serverinfo/ddnet-16.4-sixup-p0-token-request.bin"),
        ]
    );
    assert_eq!(q.poll_timeout(), Some(t0 + MS(1000)));
    assert_eq!(q.poll_event(), None);
}

#[test]
fn ddnet_p64_reassembles_any_order_and_finishes_when_both_families_answered() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(2), capture_tokens());
    drain(&mut q, t0);
    // The continuation first, twice, plus noise.
    let more = fixture("serverinfo/ddnet-16.4-xe-p64-reply-more1.bin");
    q.handle_datagram(t0 + MS(5), target(), &more);
    q.handle_datagram(t0 + MS(5), target(), &more);
    q.handle_datagram(t0 + MS(6), target(), b"\xff garbage");
    q.handle_datagram(
        t0 + MS(6),
        other(),
        &fixture("serverinfo/ddnet-16.4-xe-p64-reply-main.bin"),
    );
    assert_eq!(q.poll_event(), None);
    // The 0.7 handshake.
    q.handle_datagram(
        t0 + MS(7),
        target(),
        &fixture("serverinfo/ddnet-16.4-sixup-p64-token-reply.bin"),
    );
    let sent = drain(&mut q, t0 + MS(7));
    assert_eq!(
        sent,
        vec![fixture("serverinfo/ddnet-16.4-sixup-p64-info-request.bin")]
    );
    q.handle_datagram(
        t0 + MS(8),
        target(),
        &fixture("serverinfo/ddnet-16.4-xe-p64-reply-main.bin"),
    );
    // Extended complete, 0.7 not yet answered: wait for the grace period.
    assert_eq!(q.poll_event(), None);
    assert_eq!(q.poll_timeout(), Some(t0 + MS(8) + RICHER_ANSWER_GRACE));
    // DDNet's 0.7 reply without body: the family answered, extended stays the best.
    q.handle_datagram(
        t0 + MS(9),
        target(),
        &fixture("serverinfo/ddnet-16.4-sixup-p64-info-reply.bin"),
    );
    let info = done(&mut q);
    assert_eq!(info.players.len(), 64);
    assert_eq!(info.partial, None);
    assert_eq!(info.ping, Some(MS(5)));
    assert_eq!(info.raw_field("map_crc"), Some(&RawValue::Int(0x8d4c_6486)));
    let Some(RawValue::Text(families)) = info.raw_field("families") else {
        panic!()
    };
    assert_eq!(families.text, "extended,0.7");
    assert_eq!(q.poll_timeout(), None);
    assert_eq!(q.poll_event(), None, "the event is returned once");
    assert!(drain(&mut q, t0 + MS(10)).is_empty());
}

#[test]
fn teeworlds_07_only_answer_wins_after_the_grace() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(2), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(
        t0 + MS(1),
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-token-reply.bin"),
    );
    assert_eq!(
        drain(&mut q, t0 + MS(1)),
        vec![fixture("serverinfo/tw-0.7.5-p7-info-request.bin")]
    );
    q.handle_datagram(
        t0 + MS(2),
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-info-reply.bin"),
    );
    q.handle_timeout(t0 + MS(2) + RICHER_ANSWER_GRACE);
    let info = done(&mut q);
    assert_eq!(info.num_players, 6);
    assert_eq!(info.players.len(), 7);
    assert_eq!(
        info.players
            .iter()
            .filter(|p| p.spectator == Some(true))
            .count(),
        1
    );
    assert_eq!(info.raw_field("family"), info.raw_field("families"));
}

#[test]
fn sixup_reply_with_wrong_tokens_is_ignored() {
    let t0 = Instant::now();
    let tokens = Tokens::new(0x12_3456, 0xc0ff_ee01, 201).unwrap();
    let mut q = TeeworldsQuery::new(target(), config(0), tokens);
    drain(&mut q, t0);
    q.handle_datagram(
        t0,
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-token-reply.bin"),
    );
    drain(&mut q, t0);
    // Browse token 200 != 201.
    q.handle_datagram(
        t0,
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-info-reply.bin"),
    );
    q.handle_timeout(t0 + MS(1000));
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

#[test]
fn quirk_teeworlds_token_request_in_reply_is_not_a_token_reply() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(0), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(
        t0,
        target(),
        &fixture("probes/probe-tw07-07-connless-resp-token-ffffffff-reply.bin"),
    );
    assert!(drain(&mut q, t0).is_empty());
}

#[test]
fn vanilla_answer_to_xe_is_accepted_with_low_8_bit_token() {
    let t0 = Instant::now();
    // The vanilla captures echo token byte 5a.
    let mut q = TeeworldsQuery::new(target(), config(2), Tokens::new(0x12_345a, 1, 7).unwrap());
    drain(&mut q, t0);
    q.handle_datagram(
        t0 + MS(3),
        target(),
        &fixture("serverinfo/ddnet-16.4-vanilla-p7-reply.bin"),
    );
    assert_eq!(q.poll_event(), None);
    let grace = q.poll_timeout().unwrap();
    assert_eq!(grace, t0 + MS(3) + RICHER_ANSWER_GRACE);
    q.handle_timeout(grace);
    let info = done(&mut q);
    assert_eq!(info.players.len(), 7);
    assert_eq!(info.raw_field("map_crc"), None);
    // A vanilla reply whose token is another byte is dropped.
    let mut q = TeeworldsQuery::new(target(), config(0), Tokens::new(0x12_3456, 1, 7).unwrap());
    drain(&mut q, t0);
    q.handle_datagram(
        t0,
        target(),
        &fixture("serverinfo/ddnet-16.4-vanilla-p7-reply.bin"),
    );
    q.handle_timeout(t0 + MS(1000));
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

#[test]
fn retries_resend_both_families_then_time_out() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(2), capture_tokens());
    assert_eq!(drain(&mut q, t0).len(), 2);
    q.handle_timeout(t0 + MS(500));
    assert!(
        drain(&mut q, t0 + MS(500)).is_empty(),
        "early timeout does nothing"
    );
    q.handle_timeout(t0 + MS(1000));
    assert_eq!(drain(&mut q, t0 + MS(1000)).len(), 2);
    assert_eq!(q.poll_timeout(), Some(t0 + MS(2000)));
    q.handle_timeout(t0 + MS(2000));
    assert_eq!(drain(&mut q, t0 + MS(2000)).len(), 2);
    q.handle_timeout(t0 + MS(3000));
    assert!(drain(&mut q, t0 + MS(3000)).is_empty());
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    assert_eq!(q.poll_timeout(), None);
}

#[test]
fn retries_zero_sends_once() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(0), capture_tokens());
    assert_eq!(drain(&mut q, t0).len(), 2);
    q.handle_timeout(t0 + MS(1000));
    assert!(drain(&mut q, t0 + MS(1000)).is_empty());
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

#[test]
fn retry_after_token_reply_resends_get_info7_not_token_request() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(1), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(
        t0,
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-token-reply.bin"),
    );
    drain(&mut q, t0);
    q.handle_timeout(t0 + MS(1000));
    assert_eq!(
        drain(&mut q, t0 + MS(1000)),
        vec![
            fixture("serverinfo/ddnet-16.4-xe-p0-request.bin"),
            fixture("serverinfo/tw-0.7.5-p7-info-request.bin"),
        ]
    );
}

#[test]
fn missing_continuation_gives_partial_result_after_last_attempt() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(1), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(
        t0 + MS(2),
        target(),
        &fixture("serverinfo/ddnet-16.4-xe-p64-reply-main.bin"),
    );
    q.handle_timeout(t0 + MS(1000));
    // Only the still-missing families are asked again: xe (incomplete) and the token request.
    assert_eq!(drain(&mut q, t0 + MS(1000)).len(), 2);
    q.handle_timeout(t0 + MS(2000));
    let info = done(&mut q);
    assert_eq!(info.players.len(), 31);
    assert_eq!(
        info.partial.as_ref().map(|p| p.reason.as_str()),
        Some("31 of 64 player records arrived")
    );
}

#[test]
fn abort_returns_partial_or_timeout() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(5), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(
        t0,
        target(),
        &fixture("serverinfo/ddnet-16.4-xe-p64-reply-main.bin"),
    );
    q.abort(t0 + MS(10));
    assert!(done(&mut q).partial.is_some());

    let mut q = TeeworldsQuery::new(target(), config(5), capture_tokens());
    drain(&mut q, t0);
    q.abort(t0 + MS(10));
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

#[test]
fn garbage_only_fails_with_the_decode_error() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(0), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(t0, target(), &[0x10, 1, 2]);
    q.handle_timeout(t0 + MS(1000));
    assert_eq!(
        q.poll_event(),
        Some(Event::Failed(QueryError::Decode(DecodeError::Invalid(
            "connless flag"
        ))))
    );
}

#[test]
fn quirk_unsolicited_iext_with_token_minus_one_is_ignored() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(0), capture_tokens());
    drain(&mut q, t0);
    let mut main = match Datagram::decode(&fixture("serverinfo/ddnet-16.4-xe-p0-reply-main.bin")) {
        Ok(Datagram::Connless(_, Message::InfoExtended(m))) => m,
        other => panic!("{other:?}"),
    };
    main.token = -1;
    let mut bytes = Vec::new();
    Datagram::Connless(Header::LEGACY, Message::InfoExtended(main)).encode(&mut bytes);
    q.handle_datagram(t0, target(), &bytes);
    q.handle_timeout(t0 + MS(1000));
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

#[test]
fn tokens_are_validated() {
    assert_eq!(
        Tokens::new(0x100_0000, 1, 1),
        Err(BuildError::ExtendedToken)
    );
    assert_eq!(Tokens::new(1, 0xffff_ffff, 1), Err(BuildError::ClientToken));
    assert_eq!(Tokens::new(1, 1, -1), Err(BuildError::BrowseToken));
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_datagrams_and_timeouts_never_panic(
            steps in proptest::collection::vec(
                (any::<bool>(), 0u64..3000, proptest::collection::vec(any::<u8>(), 0..64)), 0..20)
        ) {
            let t0 = Instant::now();
            let mut q = TeeworldsQuery::new(target(), config(1), capture_tokens());
            let _ = drain(&mut q, t0);
            for (is_timeout, at, bytes) in steps {
                let now = t0 + MS(at);
                if is_timeout { q.handle_timeout(now) } else { q.handle_datagram(now, target(), &bytes) }
                let _ = drain(&mut q, now);
            }
            q.abort(t0 + MS(5000));
            prop_assert!(q.poll_event().is_some());
        }
    }
}

/// DDNet answers both the extended request and the 0.7 one; the extended answer is preferred
/// (0.7 cuts DDNet's strings and rewrites its version), whichever arrives first, and the 0.7
/// answer's own fields (host name, skill level) are kept in `raw`.
#[test]
fn extended_beats_07_when_both_answer() {
    for sixup_first in [false, true] {
        let t0 = Instant::now();
        let mut q = TeeworldsQuery::new(target(), config(2), capture_tokens());
        drain(&mut q, t0);
        q.handle_datagram(
            t0 + MS(1),
            target(),
            &fixture("serverinfo/ddnet-16.4-sixup-p7-token-reply.bin"),
        );
        drain(&mut q, t0 + MS(1));
        let xe = fixture("serverinfo/ddnet-16.4-xe-p7-reply-main.bin");
        let sixup = fixture("serverinfo/ddnet-16.4-sixup-p7-info-reply.bin");
        let (a, b) = if sixup_first {
            (&sixup, &xe)
        } else {
            (&xe, &sixup)
        };
        q.handle_datagram(t0 + MS(2), target(), a);
        q.handle_datagram(t0 + MS(3), target(), b);
        let info = done(&mut q);
        assert_eq!(
            info.raw_field("family"),
            Some(&RawValue::Text(crate::teeworlds::decode_text(b"extended"))),
            "sixup first: {sixup_first}"
        );
        assert_eq!(info.version.text, "0.6.4, 16.4");
        assert_eq!(
            info.raw_field("map_crc"),
            Some(&RawValue::Int(2_370_593_926))
        );
        assert_eq!(
            info.raw_field("hostname"),
            Some(&RawValue::Text(crate::teeworlds::decode_text(
                b"lab.invalid"
            )))
        );
        assert_eq!(info.raw_field("skill_level"), Some(&RawValue::Int(1)));
    }
}

/// A 0.7-only server (teeworlds 0.7.5 ignores `xe`): its complete answer waits the grace for
/// an extended one, then wins.
#[test]
fn complete_07_answer_waits_the_grace_for_an_extended_one() {
    let t0 = Instant::now();
    let mut q = TeeworldsQuery::new(target(), config(2), capture_tokens());
    drain(&mut q, t0);
    q.handle_datagram(
        t0 + MS(1),
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-token-reply.bin"),
    );
    drain(&mut q, t0 + MS(1));
    q.handle_datagram(
        t0 + MS(2),
        target(),
        &fixture("serverinfo/tw-0.7.5-p7-info-reply.bin"),
    );
    assert_eq!(q.poll_event(), None);
    assert_eq!(q.poll_timeout(), Some(t0 + MS(2) + RICHER_ANSWER_GRACE));
    q.handle_timeout(t0 + MS(2) + RICHER_ANSWER_GRACE);
    let info = done(&mut q);
    assert_eq!(
        info.raw_field("family"),
        Some(&RawValue::Text(crate::teeworlds::decode_text(b"0.7")))
    );
}
