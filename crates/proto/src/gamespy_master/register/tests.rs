//! The registrar on a virtual clock: exact heartbeat bytes (spec §2.2, M1, M2), intervals,
//! `\secure\` answers (M3, M4), the Serious Sam `\status\` verification, events and shutdown.

use super::*;

const MASTER: &str = "127.0.0.1:27900";

fn master() -> SocketAddr {
    MASTER.parse().unwrap()
}

fn registrar(profile: Profile, query_port: u16, t0: Instant) -> GameSpyRegistrar {
    GameSpyRegistrar::new(
        GameSpyRegistrarConfig::new(master(), profile, query_port),
        t0,
    )
}

/// Everything the registrar wants sent at `now`, as text with its destination.
fn drain(r: &mut GameSpyRegistrar, now: Instant) -> Vec<(String, SocketAddr)> {
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::new();
        let Some(t) = r.poll_transmit(now, &mut buf) else {
            return out;
        };
        out.push((String::from_utf8(buf).unwrap(), t.destination));
    }
}

fn events(r: &mut GameSpyRegistrar) -> Vec<RegistrarEvent> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

fn state() -> ServerState {
    ServerState::default()
}

#[test]
fn serious_sam_heartbeat_is_the_38_bytes_of_m1_every_150_s() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::SeriousSam, 25601, t0);
    let first = drain(&mut r, t0);
    assert_eq!(
        first,
        [(
            "\\heartbeat\\25601\\gamename\\serioussamse".into(),
            master()
        )]
    );
    assert_eq!(first[0].0.len(), 38);
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(30)));
    r.handle_timeout(t0 + Duration::from_secs(149), &state());
    assert!(drain(&mut r, t0 + Duration::from_secs(149)).is_empty());
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(150)));
    r.handle_timeout(t0 + Duration::from_secs(150), &state());
    assert_eq!(
        drain(&mut r, t0 + Duration::from_secs(150)),
        [(
            "\\heartbeat\\25601\\gamename\\serioussamse".into(),
            master()
        )]
    );
    // Still unverified: the next wake-up is this heartbeat's verification deadline.
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(180)));
}

#[test]
fn unreal_family_heartbeats_every_60_s_with_their_gamenames() {
    let t0 = Instant::now();
    for (profile, text) in [
        (Profile::Ut99, "\\heartbeat\\7778\\gamename\\ut"),
        (Profile::Unreal227, "\\heartbeat\\7778\\gamename\\unreal"),
        (Profile::Ut2003, "\\heartbeat\\7778\\gamename\\ut2"),
    ] {
        let mut r = registrar(profile, 7778, t0);
        assert_eq!(drain(&mut r, t0), [(text.into(), master())]);
        let t1 = t0 + Duration::from_secs(60);
        r.handle_timeout(t1, &state());
        assert_eq!(drain(&mut r, t1), [(text.into(), master())]);
    }
    // §2.2 example: 27 bytes.
    assert_eq!("\\heartbeat\\7778\\gamename\\ut".len(), 27);
}

#[test]
fn ut99_answers_the_masters_secure_like_the_uplink_m4() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::Ut99, 7778, t0);
    let _ = drain(&mut r, t0);
    let t1 = t0 + Duration::from_millis(20);
    let from = master();
    assert!(r.handle_datagram(t1, from, b"\\secure\\ABCDEF", &state()));
    let sent = drain(&mut r, t1);
    assert_eq!(
        sent,
        [("\\validate\\5OOIQ5Ha\\final\\\\queryid\\1.1".into(), from)]
    );
    assert_eq!(sent[0].0.len(), 37);
    assert_eq!(
        events(&mut r),
        [RegistrarEvent::Registered {
            master: MASTER.into()
        }]
    );
    assert!(r.is_verified());
    // The next challenge gets the next queryid; verified servers report no failure.
    assert!(r.handle_datagram(t1, from, b"\\secure\\QWERTY", &state()));
    assert_eq!(
        drain(&mut r, t1),
        [("\\validate\\0KBkX5UX\\final\\\\queryid\\2.1".into(), from)]
    );
    r.handle_timeout(t0 + Duration::from_secs(60), &state());
    assert!(events(&mut r).is_empty());
}

#[test]
fn secure_from_another_master_port_is_answered_to_its_source() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::Unreal227, 7778, t0);
    let from: SocketAddr = "127.0.0.1:27901".parse().unwrap();
    assert!(r.handle_datagram(t0, from, b"\\secure\\ABCDEF", &state()));
    let sent = drain(&mut r, t0);
    assert!(
        sent.contains(&("\\validate\\7qaTlhDT\\final\\\\queryid\\1.1".into(), from)),
        "{sent:?}"
    );
}

#[test]
fn datagrams_not_from_the_master_or_not_secure_go_to_the_responder() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::Ut99, 7778, t0);
    let _ = drain(&mut r, t0);
    let stranger: SocketAddr = "127.0.0.2:27900".parse().unwrap();
    assert!(!r.handle_datagram(t0, stranger, b"\\secure\\ABCDEF", &state()));
    assert!(!r.handle_datagram(t0, master(), b"\\status\\", &state()));
    assert!(!r.handle_datagram(t0, master(), b"\\secure\\AB", &state()));
    assert!(!r.handle_datagram(t0, master(), b"", &state()));
    assert!(drain(&mut r, t0).is_empty());
    assert!(!r.is_verified());
}

#[test]
fn unverified_server_reports_failure_30_s_after_its_heartbeat() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::Ut2003, 7787, t0);
    let _ = drain(&mut r, t0);
    assert_eq!(r.poll_timeout(), Some(t0 + VERIFY_TIMEOUT));
    r.handle_timeout(t0 + VERIFY_TIMEOUT, &state());
    assert_eq!(
        events(&mut r),
        [RegistrarEvent::Failed {
            master: MASTER.into(),
            reason: "no challenge from master"
        }]
    );
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(60)));
}

#[test]
fn serious_sam_ignores_secure_and_counts_the_status_poll_as_verification() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::SeriousSam, 25601, t0);
    let _ = drain(&mut r, t0);
    // Stock Serious Sam never answers `\secure\` (spec §3.4); the responder ignores it too.
    assert!(!r.handle_datagram(t0, master(), b"\\secure\\ABCDEF", &state()));
    assert!(drain(&mut r, t0).is_empty());
    // The master's `\status\` poll is left to the responder but marks the server verified.
    assert!(!r.handle_datagram(t0, master(), b"\\status\\", &state()));
    assert_eq!(
        events(&mut r),
        [RegistrarEvent::Registered {
            master: MASTER.into()
        }]
    );
    r.handle_timeout(t0 + VERIFY_TIMEOUT, &state());
    assert!(events(&mut r).is_empty());
}

#[test]
fn serious_sam_statechanged_is_the_51_bytes_of_m2_at_most_every_10_s() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::SeriousSam, 25601, t0);
    let _ = drain(&mut r, t0);
    let hb = "\\heartbeat\\25601\\gamename\\serioussamse\\statechanged";
    assert_eq!(hb.len(), 51);
    let t1 = t0 + Duration::from_secs(5);
    r.handle_state_change(t1, &state());
    assert_eq!(drain(&mut r, t1), [(hb.into(), master())]);
    // Two more changes within the gap fold into one heartbeat at its end.
    r.handle_state_change(t1 + Duration::from_secs(2), &state());
    r.handle_state_change(t1 + Duration::from_secs(3), &state());
    assert!(drain(&mut r, t1 + Duration::from_secs(3)).is_empty());
    assert_eq!(r.poll_timeout(), Some(t1 + STATE_CHANGE_MIN_GAP));
    r.handle_timeout(t1 + STATE_CHANGE_MIN_GAP, &state());
    assert_eq!(
        drain(&mut r, t1 + STATE_CHANGE_MIN_GAP),
        [(hb.into(), master())]
    );
    assert!(drain(&mut r, t1 + Duration::from_secs(100)).is_empty());
}

#[test]
fn unreal_family_sends_no_statechanged() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::Ut99, 7778, t0);
    let _ = drain(&mut r, t0);
    r.handle_state_change(t0 + Duration::from_secs(1), &state());
    assert!(drain(&mut r, t0 + Duration::from_secs(1)).is_empty());
}

#[test]
fn serious_sam_shutdown_sends_statechanged_then_unregisters() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::SeriousSam, 25601, t0);
    let _ = drain(&mut r, t0);
    let t1 = t0 + Duration::from_secs(7);
    r.shutdown(t1);
    assert_eq!(r.poll_timeout(), None);
    assert_eq!(
        drain(&mut r, t1),
        [(
            "\\heartbeat\\25601\\gamename\\serioussamse\\statechanged".into(),
            master()
        )]
    );
    assert_eq!(
        events(&mut r),
        [RegistrarEvent::Unregistered {
            master: MASTER.into()
        }]
    );
    // Nothing more, ever.
    r.handle_timeout(t0 + Duration::from_secs(1000), &state());
    assert!(drain(&mut r, t0 + Duration::from_secs(1000)).is_empty());
    assert!(!r.handle_datagram(t1, master(), b"\\status\\", &state()));
}

#[test]
fn unreal_shutdown_sends_nothing_and_unregisters() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::Ut2003, 7787, t0);
    let _ = drain(&mut r, t0);
    r.shutdown(t0);
    assert!(drain(&mut r, t0).is_empty());
    assert_eq!(
        events(&mut r),
        [RegistrarEvent::Unregistered {
            master: MASTER.into()
        }]
    );
}

#[test]
fn heartbeats_decode_as_the_codec_reads_them() {
    let t0 = Instant::now();
    let mut r = registrar(Profile::SeriousSam, 25601, t0);
    let (hb, _) = drain(&mut r, t0).remove(0);
    let decoded = Heartbeat::decode(hb.as_bytes()).unwrap();
    assert_eq!(decoded.query_port, 25601);
    assert!(decoded.gamename.is("serioussamse"));
    assert!(!decoded.state_changed());
}

#[test]
fn arbitrary_datagrams_never_panic() {
    use proptest::prelude::*;
    proptest!(|(data in proptest::collection::vec(any::<u8>(), 0..200), ss in any::<bool>())| {
        let t0 = Instant::now();
        let profile = if ss { Profile::SeriousSam } else { Profile::Ut99 };
        let mut r = registrar(profile, 7778, t0);
        let _ = r.handle_datagram(t0, master(), &data, &state());
        let _ = drain(&mut r, t0);
    });
}
