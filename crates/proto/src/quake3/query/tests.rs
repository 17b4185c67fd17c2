use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::*;
use crate::quake3::packet::ServerList as ListDatagram;

const SERVER: &str = "10.0.0.5:27960";
const MASTER: &str = "10.0.0.9:27950";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn cfg(retries: u32) -> QueryConfig {
    QueryConfig {
        attempt_timeout: ms(1000),
        retries,
    }
}

fn word(s: &str) -> Word {
    Word::new(s.as_bytes().to_vec()).unwrap()
}

fn drain<M: QueryMachine>(m: &mut M, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::new();
        match m.poll_transmit(now, &mut buf) {
            Some(t) => out.push((t.destination, buf)),
            None => return out,
        }
    }
}

fn done(ev: Option<QueryEvent>) -> Box<ServerInfo> {
    match ev {
        Some(Event::Done(i)) => i,
        other => panic!("expected Done, got {other:?}"),
    }
}

fn status(challenge: Option<&str>, players: &[(i32, i32, &[u8])]) -> Vec<u8> {
    let mut info = InfoString::new();
    if let Some(c) = challenge {
        info.push("challenge", c).unwrap();
    }
    for (k, v) in [
        ("sv_hostname", "^1Red ^xF80Fox"),
        ("mapname", "q3dm17"),
        ("sv_maxclients", "12"),
        ("g_gametype", "0"),
        ("version", "ioq3 1.36"),
        ("gamename", "baseq3"),
        ("protocol", "68"),
        ("g_needpass", "1"),
        ("timelimit", "15"),
    ] {
        info.push(k, v).unwrap();
    }
    let players = players
        .iter()
        .map(|(s, p, n)| PlayerLine::new(*s, *p, n.to_vec()).unwrap())
        .collect();
    let mut out = Vec::new();
    Packet::StatusResponse { info, players }.encode(&mut out);
    out
}

#[test]
fn quake3_status_query_sends_getstatus_with_challenge_and_maps_the_answer() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(addr(SERVER), Request::Status, word("k3Y9x"), cfg(1));
    assert_eq!(
        drain(&mut q, t0),
        vec![(addr(SERVER), b"\xff\xff\xff\xffgetstatus k3Y9x".to_vec())]
    );
    let reply = status(
        Some("k3Y9x"),
        &[(20, 48, b"^2J\xe9r\xf4me"), (-3, 0, b"^xF00Sarge")],
    );
    q.handle_datagram(t0 + ms(35), addr(SERVER), &reply);
    let info = done(q.poll_event());
    assert_eq!(info.protocol, Protocol::Quake3);
    assert_eq!(info.name.raw, b"^1Red ^xF80Fox");
    assert_eq!(info.name.plain, "Red Fox");
    assert_eq!(info.map.text, "q3dm17");
    assert_eq!(info.game_type.text, "0");
    assert_eq!(info.version.text, "ioq3 1.36");
    assert_eq!(info.password, Some(true));
    assert_eq!((info.num_players, info.max_players), (2, 12));
    assert_eq!(info.ping, Some(ms(35)));
    assert_eq!(info.players[0].name.raw, b"^2J\xe9r\xf4me");
    assert_eq!(info.players[0].name.plain, "Jérôme");
    assert_eq!(info.players[0].score, Some(20));
    assert_eq!(info.players[0].ping_ms, Some(48));
    assert!(info.players[0].raw.is_empty());
    assert_eq!(info.players[1].name.plain, "Sarge");
    assert_eq!(info.players[1].score, Some(-3));
    assert_eq!(
        info.players[1].raw,
        vec![("bot".to_owned(), RawValue::Bool(true))]
    );
    assert_eq!(
        info.raw_field("gamename"),
        Some(&RawValue::Text(crate::model::Text::from_utf8_str("baseq3")))
    );
    assert_eq!(info.raw_field("protocol"), Some(&RawValue::Int(68)));
    // Mapped keys are not rules; the others are, in order.
    let keys: Vec<_> = info.rules.iter().map(|r| r.key.text.as_str()).collect();
    assert_eq!(
        keys,
        [
            "sv_maxclients",
            "g_gametype",
            "version",
            "gamename",
            "protocol",
            "g_needpass",
            "timelimit"
        ]
    );
    assert_eq!(q.poll_timeout(), None);
}

#[test]
fn quake3_wrong_challenge_is_ignored_and_missing_one_accepted() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(addr(SERVER), Request::Status, word("abc"), cfg(0));
    let _ = drain(&mut q, t0);
    q.handle_datagram(t0 + ms(1), addr(SERVER), &status(Some("zzz"), &[]));
    assert_eq!(q.poll_event(), None);
    // From another address: ignored.
    q.handle_datagram(
        t0 + ms(1),
        addr("10.0.0.6:27960"),
        &status(Some("abc"), &[]),
    );
    assert_eq!(q.poll_event(), None);
    q.handle_datagram(t0 + ms(2), addr(SERVER), &status(None, &[]));
    assert_eq!(done(q.poll_event()).num_players, 0);

    let mut q = ServerQuery::new(addr(SERVER), Request::Status, word("abc"), cfg(0));
    let _ = drain(&mut q, t0);
    q.handle_datagram(t0 + ms(1), addr(SERVER), &status(Some("zzz"), &[]));
    q.handle_timeout(t0 + ms(1000));
    assert_eq!(
        q.poll_event(),
        Some(Event::Failed(QueryError::Decode(DecodeError::Invalid(
            "challenge not echoed"
        ))))
    );
}

#[test]
fn quake3_info_query_uses_getinfo_and_the_clients_count() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(addr(SERVER), Request::Info, word("c1"), cfg(0));
    assert_eq!(
        drain(&mut q, t0)[0].1,
        b"\xff\xff\xff\xffgetinfo c1".to_vec()
    );
    let reply = b"\xff\xff\xff\xffinfoResponse\n\\gamename\\Xonotic\\modname\\data\\gameversion\\20000\\sv_maxclients\\24\\clients\\5\\bots\\2\\mapname\\stormkeep\\hostname\\^x0F0DP\\protocol\\3\\qcstatus\\ctf:0.8.6:P0:S19:F5:MXonotic::score!!\\challenge\\c1";
    q.handle_datagram(t0 + ms(3), addr(SERVER), reply);
    let info = done(q.poll_event());
    assert_eq!(info.name.plain, "DP");
    assert_eq!((info.num_players, info.max_players), (5, 24));
    assert!(info.players.is_empty());
    assert_eq!(info.game_type.text, "ctf");
    assert_eq!(info.version.text, "20000");
    assert_eq!(info.raw_field("bots"), Some(&RawValue::Int(2)));
    assert!(
        matches!(info.raw_field("qcstatus"), Some(RawValue::Text(t)) if t.text.starts_with("ctf:0.8.6"))
    );
    assert_eq!(
        crate::games::key_of_answer(&info).as_deref(),
        Some("xonotic")
    );
}

#[test]
fn quake3_query_retries_then_times_out() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(addr(SERVER), Request::Status, word("x"), cfg(1));
    assert_eq!(drain(&mut q, t0).len(), 1);
    assert!(drain(&mut q, t0).is_empty());
    q.handle_timeout(t0 + ms(999));
    assert!(drain(&mut q, t0 + ms(999)).is_empty());
    q.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut q, t0 + ms(1000)).len(), 1);
    q.handle_datagram(t0 + ms(1000), addr(SERVER), b"\xff\xff\xff\xffjunk");
    q.handle_timeout(t0 + ms(2000));
    assert_eq!(
        q.poll_event(),
        Some(Event::Failed(QueryError::Decode(DecodeError::BadMagic(
            "quake3 command"
        ))))
    );
    let mut q = ServerQuery::new(addr(SERVER), Request::Status, word("x"), cfg(3));
    let _ = drain(&mut q, t0);
    q.abort(t0);
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

fn v4(i: u32) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::from(0x0a00_0000 + i), 27960))
}

fn list_done(ev: Option<ListEvent>) -> ServerList {
    match ev {
        Some(Event::Done(l)) => l,
        other => panic!("expected Done, got {other:?}"),
    }
}

#[test]
fn quake3_list_request_words() {
    let mut out = Vec::new();
    ListRequest::everything(None, 68).packet().encode(&mut out);
    assert_eq!(out, b"\xff\xff\xff\xffgetservers 68 empty full");
    out.clear();
    let mut r = ListRequest::everything(Some(word("Xonotic")), 3);
    r.ipv6 = true;
    r.gametype = Some(word("ctf"));
    r.packet().encode(&mut out);
    assert_eq!(
        out,
        b"\xff\xff\xff\xffgetserversExt Xonotic 3 ipv6 empty full gametype=ctf"
    );
}

#[test]
fn quake3_list_collects_datagrams_until_eot_and_removes_duplicates() {
    let t0 = Instant::now();
    let servers: Vec<SocketAddr> = (1..=400).map(v4).collect();
    let dgs = ListDatagram::encode_datagrams(false, &servers);
    assert!(dgs.len() >= 3);
    let mut q = ListQuery::new(addr(MASTER), ListRequest::everything(None, 68), cfg(2));
    assert_eq!(drain(&mut q, t0).len(), 1);
    // The last (EOT) datagram first, then the others, one of them twice.
    let last = dgs.len() - 1;
    q.handle_datagram(t0 + ms(10), addr(MASTER), &dgs[last]);
    assert_eq!(q.poll_timeout(), Some(t0 + ms(10) + LIST_EOT_GRACE));
    for d in &dgs[..last] {
        q.handle_datagram(t0 + ms(11), addr(MASTER), d);
    }
    q.handle_datagram(t0 + ms(12), addr(MASTER), &dgs[0]);
    // Not from the master: ignored.
    let stray = ListDatagram::encode_datagrams(false, [v4(999)]);
    q.handle_datagram(t0 + ms(12), addr("10.0.0.8:27950"), &stray[0]);
    q.handle_timeout(t0 + ms(12) + LIST_EOT_GRACE - ms(1));
    assert_eq!(q.poll_event(), None);
    q.handle_timeout(t0 + ms(12) + LIST_EOT_GRACE);
    let l = list_done(q.poll_event());
    assert_eq!(l.servers.len(), 400);
    let mut got: Vec<_> = l.servers.iter().map(|s| s.address).collect();
    got.sort();
    assert_eq!(got, servers);
    assert_eq!(l.partial, None);
    // No retry once the list started.
    assert!(drain(&mut q, t0 + ms(5000)).is_empty());
}

#[test]
fn quake3_list_reads_ipv6_and_separator_bytes_by_length() {
    let t0 = Instant::now();
    // Address and port bytes that equal the separators must not split entries.
    let tricky = vec![
        SocketAddr::from((Ipv4Addr::new(92, 47, 92, 47), 0x5c2f)),
        SocketAddr::from((Ipv6Addr::new(0x2f5c, 0, 0, 0, 0, 0, 0, 0x5c2f), 0x2f5c)),
        SocketAddr::from((Ipv4Addr::new(0, 0, 0, 0), 27960)),
        SocketAddr::from((Ipv4Addr::new(1, 2, 3, 4), 0)),
    ];
    let dgs = ListDatagram::encode_datagrams(true, &tricky);
    let mut q = ListQuery::new(
        addr(MASTER),
        ListRequest::everything(Some(word("Quake3Arena")), 68),
        cfg(0),
    );
    let _ = drain(&mut q, t0);
    q.handle_datagram(t0, addr(MASTER), &dgs[0]);
    q.handle_timeout(t0 + LIST_EOT_GRACE);
    let l = list_done(q.poll_event());
    let got: Vec<_> = l.servers.iter().map(|s| s.address).collect();
    assert_eq!(got, tricky[..2]);
}

#[test]
fn quake3_list_without_eot_ends_after_idle_and_is_partial() {
    let t0 = Instant::now();
    let mut body = b"\xff\xff\xff\xffgetserversResponse".to_vec();
    body.extend_from_slice(&[b'\\', 10, 0, 0, 1, 0x6d, 0x38]);
    let mut q = ListQuery::new(addr(MASTER), ListRequest::everything(None, 68), cfg(0));
    let _ = drain(&mut q, t0);
    q.handle_datagram(t0 + ms(5), addr(MASTER), &body);
    assert_eq!(q.poll_timeout(), Some(t0 + ms(5) + LIST_IDLE));
    q.handle_timeout(t0 + ms(5) + LIST_IDLE);
    let l = list_done(q.poll_event());
    assert_eq!(l.servers.len(), 1);
    assert_eq!(
        l.partial.map(|p| p.reason).as_deref(),
        Some("the list ended without EOT")
    );
}

#[test]
fn quake3_list_retries_times_out_and_reports_garbage() {
    let t0 = Instant::now();
    let mut q = ListQuery::new(addr(MASTER), ListRequest::everything(None, 68), cfg(1));
    assert_eq!(drain(&mut q, t0).len(), 1);
    q.handle_timeout(t0 + ms(1000));
    assert_eq!(drain(&mut q, t0 + ms(1000)).len(), 1);
    q.handle_datagram(
        t0 + ms(1001),
        addr(MASTER),
        b"\xff\xff\xff\xffgetserversResponse\\1",
    );
    q.handle_timeout(t0 + ms(2000));
    assert!(matches!(
        q.poll_event(),
        Some(Event::Failed(QueryError::Decode(_)))
    ));
}

#[test]
fn quake3_list_is_bounded_by_its_limits() {
    let t0 = Instant::now();
    let mut q = ListQuery::new(addr(MASTER), ListRequest::everything(None, 68), cfg(0));
    let _ = drain(&mut q, t0);
    let per = 190u32;
    let mut sent = 0u32;
    let mut i = 0;
    while sent < u32::try_from(MAX_LIST_SERVERS).unwrap() + per {
        let batch: Vec<_> = (sent..sent + per).map(|n| v4(n + 1)).collect();
        for d in ListDatagram::encode_datagrams(true, &batch) {
            let mut d = d;
            // Drop the EOT so the list keeps going.
            d.truncate(d.len() - 7);
            q.handle_datagram(t0 + ms(i), addr(MASTER), &d);
        }
        sent += per;
        i += 1;
    }
    q.abort(t0 + ms(i));
    let l = list_done(q.poll_event());
    assert_eq!(l.servers.len(), MAX_LIST_SERVERS);
    assert!(l.partial.unwrap().reason.contains("exceeded"));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn quake3_machines_never_panic(steps in proptest::collection::vec(
            (0u64..3000, any::<bool>(), proptest::collection::vec(any::<u8>(), 0..80)), 0..20)) {
            let t0 = Instant::now();
            let mut s = ServerQuery::new(addr(SERVER), Request::Status, word("c"), cfg(1));
            let mut l = ListQuery::new(addr(MASTER), ListRequest::everything(None, 68), cfg(1));
            for (dt, timeout, mut bytes) in steps {
                let now = t0 + ms(dt);
                if timeout {
                    s.handle_timeout(now);
                    l.handle_timeout(now);
                } else {
                    // Half the time, a valid header so the decoders go deeper.
                    if dt % 2 == 0 {
                        let mut b = b"\xff\xff\xff\xffstatusResponse\n".to_vec();
                        if dt % 4 == 0 {
                            b = b"\xff\xff\xff\xffgetserversExtResponse".to_vec();
                        }
                        b.append(&mut bytes);
                        bytes = b;
                    }
                    s.handle_datagram(now, addr(SERVER), &bytes);
                    l.handle_datagram(now, addr(MASTER), &bytes);
                }
                let _ = drain(&mut s, now);
                let _ = drain(&mut l, now);
            }
            s.abort(t0);
            l.abort(t0);
            prop_assert!(s.poll_timeout().is_none());
            prop_assert!(l.poll_timeout().is_none());
        }
    }
}
