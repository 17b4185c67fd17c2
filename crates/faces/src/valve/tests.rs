use super::*;
use crate::runtime::udp::harness::{Harness, drops, sent};
use muster_proto::valve_master::packet::{ListReply, heartbeat_of};
use muster_proto::valve_master::{ChallengeRequest, Heartbeat};

fn face(f: impl FnOnce(&mut ValveSettings)) -> ValveFace {
    let mut s = ValveSettings::default();
    f(&mut s);
    ValveFace::new(s, 7, Instant::now())
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ask(h: &mut Harness, f: &mut ValveFace, from: SocketAddr) -> Option<u32> {
    let q = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(99),
    });
    let out = h.datagram(f, 0, from, &q.encode());
    let (_, d) = sent(&out).into_iter().next()?;
    let r = ChallengeReply::decode(&d).unwrap();
    assert_eq!(r.server_challenge, Some(99));
    Some(r.challenge)
}

fn beat(h: &mut Harness, f: &mut ValveFace, from: SocketAddr, hb: Heartbeat) -> Vec<&'static str> {
    let out = h.datagram(f, 0, from, &ServerPacket::Heartbeat(hb).encode());
    drops(&out)
}

fn list(h: &mut Harness, f: &mut ValveFace, filter: &str) -> Vec<SocketAddr> {
    let req = ListRequest::first(filter.as_bytes());
    let out = h.datagram(f, 0, addr("192.0.2.200:4000"), &req.encode());
    let mut all = Vec::new();
    for (_, d) in sent(&out) {
        all.extend(ListReply::decode(&d, false, false).unwrap().servers);
    }
    all
}

#[test]
fn the_challenge_holds_for_its_window_and_the_next_one_only() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let from = addr("192.0.2.1:27015");
    let c = ask(&mut h, &mut f, from).unwrap();
    // Another address gets another challenge.
    assert_ne!(ask(&mut h, &mut f, addr("192.0.2.1:27016")), Some(c));
    h.advance(Duration::from_secs(100));
    assert!(
        beat(
            &mut h,
            &mut f,
            from,
            heartbeat_of(c, "valve", "crossfire", 1, 8)
        )
        .is_empty()
    );
    assert_eq!(h.registry.len(), 1);
    // Two windows later it is stale.
    h.advance(Duration::from_secs(60));
    assert_eq!(
        beat(
            &mut h,
            &mut f,
            from,
            heartbeat_of(c, "valve", "crossfire", 1, 8)
        ),
        ["bad_echo"]
    );
}

#[test]
fn heartbeats_are_read_as_xash3d_master_reads_them() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let from = addr("192.0.2.1:27015");
    let c = ask(&mut h, &mut f, from).unwrap();
    let with = |extra: &[(&str, &str)]| {
        let mut pairs = heartbeat_of(c, "cstrike", "de_dust2", 2, 16)
            .pairs()
            .to_vec();
        for (k, v) in extra {
            pairs.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
        Heartbeat::new(pairs)
    };
    assert_eq!(
        beat(&mut h, &mut f, from, with(&[("version", "0.20")])),
        ["wrong_version"]
    );
    assert_eq!(
        beat(&mut h, &mut f, from, with(&[("players", "x")])),
        ["malformed"]
    );
    assert_eq!(
        beat(&mut h, &mut f, from, with(&[("region", "8")])),
        ["malformed"]
    );
    assert_eq!(
        beat(&mut h, &mut f, from, with(&[("gamedir", "")])),
        ["bad_game"]
    );
    let no_challenge = Heartbeat::new(vec![(b"gamedir".to_vec(), b"valve".to_vec())]);
    assert_eq!(beat(&mut h, &mut f, from, no_challenge), ["malformed"]);
    assert_eq!(h.registry.len(), 0);
    assert!(beat(&mut h, &mut f, from, with(&[])).is_empty());
    let r = h.registry.iter_shared().next().unwrap().clone();
    assert_eq!((r.face, r.key.game.as_str()), (Face::Valve, "cstrike"));
    assert_eq!(r.query_protocol, Some(Protocol::A2s));
    let info = r.info.as_ref().unwrap();
    assert_eq!(
        (info.map(), info.num_players, info.max_players),
        ("de_dust2", 2, 16)
    );
    // `min_version = "0"` takes Half-Life's own servers (a build number is no version).
    let mut f = face(|s| s.min_version = Version::default());
    let from = addr("192.0.2.2:27015");
    let c = ask(&mut h, &mut f, from).unwrap();
    let mut pairs = heartbeat_of(c, "valve", "crossfire", 0, 8).pairs().to_vec();
    pairs.push((b"version".to_vec(), b"1.1.2.7/Stdio".to_vec()));
    assert!(beat(&mut h, &mut f, from, Heartbeat::new(pairs)).is_empty());
}

#[test]
fn loopback_port_zero_and_floods_are_refused() {
    let mut h = Harness::new();
    let mut f = face(|s| s.heartbeats = BucketConfig::one_every(2, Duration::from_secs(60)));
    assert_eq!(ask(&mut h, &mut f, addr("127.0.0.1:27015")), None);
    let out = h.datagram(&mut f, 0, addr("192.0.2.1:0"), b"q\xff");
    assert_eq!(drops(&out), ["port_zero"]);
    let from = addr("192.0.2.1:27015");
    assert!(ask(&mut h, &mut f, from).is_some());
    assert!(ask(&mut h, &mut f, from).is_some());
    let out = h.datagram(&mut f, 0, from, b"q\xff");
    assert_eq!(drops(&out), ["rate_limited"]);
    let out = h.datagram(&mut f, 0, from, b"zzz");
    assert_eq!(drops(&out), ["malformed"]);
}

#[test]
fn lists_follow_region_filter_and_old_clients() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let reg = |h: &mut Harness, f: &mut ValveFace, a: &str, extra: &[(&str, &str)]| {
        let from = addr(a);
        let c = ask(h, f, from).unwrap();
        let mut pairs = heartbeat_of(c, "valve", "crossfire", 1, 8).pairs().to_vec();
        for (k, v) in extra {
            pairs.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
        assert!(beat(h, f, from, Heartbeat::new(pairs)).is_empty());
        from
    };
    let hl = reg(&mut h, &mut f, "192.0.2.1:27015", &[]);
    let eu = reg(&mut h, &mut f, "192.0.2.2:27015", &[("region", "3")]);
    let x49 = reg(
        &mut h,
        &mut f,
        "192.0.2.3:27015",
        &[("protocol", "49"), ("nat", "1")],
    );
    assert_eq!(list(&mut h, &mut f, ""), [hl, x49]);
    assert_eq!(list(&mut h, &mut f, "\\nat\\1"), [x49]);
    assert_eq!(list(&mut h, &mut f, "\\clver\\0.19"), [hl]);
    assert_eq!(list(&mut h, &mut f, "\\clver\\0.21\\protocol\\49"), [x49]);
    let req = ListRequest {
        region: Region::EUROPE,
        ..ListRequest::first(b"")
    };
    let out = h.datagram(&mut f, 0, addr("192.0.2.200:4000"), &req.encode());
    let (_, d) = sent(&out).remove(0);
    assert_eq!(ListReply::decode(&d, false, false).unwrap().servers, [eu]);
    let out = h.datagram(
        &mut f,
        0,
        addr("192.0.2.200:4000"),
        b"1\xff0.0.0.0:0\0\\clver\\x\0",
    );
    assert_eq!(drops(&out), ["malformed"]);
}

#[test]
fn facts_of_servers_that_left_the_registry_are_pruned() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let from = addr("192.0.2.1:27015");
    let c = ask(&mut h, &mut f, from).unwrap();
    assert!(
        beat(
            &mut h,
            &mut f,
            from,
            heartbeat_of(c, "valve", "crossfire", 1, 8)
        )
        .is_empty()
    );
    assert_eq!(f.facts.len(), 1);
    let key = h.registry.iter_shared().next().unwrap().key.clone();
    h.registry.remove(&key);
    h.advance(SWEEP);
    h.timeout(&mut f);
    assert!(f.facts.is_empty());
}

#[test]
fn filters_read_each_servers_own_game_map_players_version_and_flags() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let reg = |h: &mut Harness,
               f: &mut ValveFace,
               a: &str,
               (gamedir, map, players): (&str, &str, u32),
               set: &[(&str, &str)]| {
        let from = addr(a);
        let c = ask(h, f, from).unwrap();
        let mut pairs = heartbeat_of(c, gamedir, map, players, 8).pairs().to_vec();
        for (k, v) in set {
            let (k, v) = (k.as_bytes().to_vec(), v.as_bytes().to_vec());
            match pairs.iter_mut().find(|(pk, _)| *pk == k) {
                Some(p) => p.1 = v,
                None => pairs.push((k, v)),
            }
        }
        assert!(beat(h, f, from, Heartbeat::new(pairs)).is_empty());
        from
    };
    let a = reg(
        &mut h,
        &mut f,
        "192.0.2.1:27015",
        ("valve", "crossfire", 0),
        &[("password", "1")],
    );
    let b = reg(
        &mut h,
        &mut f,
        "192.0.2.2:27015",
        ("cstrike", "de_dust2", 8),
        &[
            ("version", "0.22"),
            ("secure", "1"),
            ("lan", "1"),
            ("bots", "2"),
            ("os", "w"),
            ("type", "l"),
        ],
    );
    let c = reg(
        &mut h,
        &mut f,
        "192.0.2.3:27015",
        ("valve", "bounce", 3),
        &[("version", "0.21.1")],
    );
    let mut l = |filter: &str| list(&mut h, &mut f, filter);
    assert_eq!(l("\\gamedir\\valve"), [a, c]);
    assert_eq!(l("\\gamedir\\CSTRIKE"), [b]);
    assert_eq!(l("\\map\\crossfire"), [a]);
    assert_eq!(l("\\map\\bounce"), [c]);
    assert_eq!(l("\\empty\\1"), [a], "the Xash3D reading: empty ones");
    assert_eq!(l("\\full\\1"), [b]);
    assert_eq!(l("\\version_match\\0.21*"), [a, c]);
    assert_eq!(l("\\version_match\\0.21.1"), [c]);
    assert_eq!(l("\\version_match\\0.22"), [b]);
    assert_eq!(l("\\password\\1"), [a]);
    assert_eq!(l("\\secure\\1\\lan\\1\\bots\\1"), [b]);
    assert_eq!(l("\\linux\\0"), [b]);
    assert_eq!(l("\\dedicated\\1"), [a, c]);
    assert_eq!(l("\\gameaddr\\192.0.2.3"), [c]);
    // The server in the middle leaves: every list entry after it moves up one place.
    let key = h
        .registry
        .iter()
        .find(|r| r.key.addr == GameAddr::Ip(b))
        .unwrap()
        .key
        .clone();
    h.registry.remove(&key);
    h.publish();
    assert_eq!(list(&mut h, &mut f, "\\map\\bounce"), [c]);
    assert_eq!(list(&mut h, &mut f, "\\version_match\\0.21.1"), [c]);
    assert_eq!(list(&mut h, &mut f, "\\empty\\0"), [c]);
}

/// Registers a Half-Life server at `a` (game `valve`, map `crossfire`).
fn register(h: &mut Harness, f: &mut ValveFace, a: &str) -> SocketAddr {
    let from = addr(a);
    let c = ask(h, f, from).unwrap();
    assert!(beat(h, f, from, heartbeat_of(c, "valve", "crossfire", 1, 8)).is_empty());
    from
}

/// A list's reply datagrams, as the face shares them.
fn reply_pages(h: &mut Harness, f: &mut ValveFace, filter: &str) -> Arc<[Bytes]> {
    let req = ListRequest::first(filter.as_bytes());
    let out = h.datagram(f, 0, addr("192.0.2.200:4000"), &req.encode());
    match &out.replies.first().expect("a reply").datagrams {
        Datagrams::Many(pages) => Arc::clone(pages),
        other => panic!("{other:?}"),
    }
}

fn servers_of(pages: &[Bytes], with_key: bool) -> Vec<SocketAddr> {
    pages
        .iter()
        .flat_map(|d| ListReply::decode(d, false, with_key).unwrap().servers)
        .collect()
}

#[test]
fn a_repeated_list_is_answered_from_the_cache_until_the_servers_change() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let one = register(&mut h, &mut f, "192.0.2.1:27015");
    let two = register(&mut h, &mut f, "192.0.2.2:27015");
    let xash = "\\gamedir\\valve\\clver\\0.21";
    let first = reply_pages(&mut h, &mut f, xash);
    assert_eq!(servers_of(&first, false), [one, two]);
    // The same request again: the very same pages, not built anew.
    let again = reply_pages(&mut h, &mut f, xash);
    assert!(Arc::ptr_eq(&first, &again));
    // With a key to echo: the same servers, its own pages.
    let keyed = reply_pages(
        &mut h,
        &mut f,
        "\\gamedir\\valve\\clver\\0.21\\key\\1234abcd",
    );
    assert!(!Arc::ptr_eq(&first, &keyed));
    assert_eq!(servers_of(&keyed, true), [one, two]);
    // A filter on play reads the records every time.
    let map = "\\gamedir\\valve\\clver\\0.21\\map\\crossfire";
    assert!(!Arc::ptr_eq(
        &reply_pages(&mut h, &mut f, map),
        &reply_pages(&mut h, &mut f, map)
    ));
    // A new server: the next list shows it.
    let three = register(&mut h, &mut f, "192.0.2.3:27015");
    let after = reply_pages(&mut h, &mut f, xash);
    assert!(!Arc::ptr_eq(&first, &after));
    assert_eq!(servers_of(&after, false), [one, two, three]);
    // Another filter is another entry: none of these servers is on another game.
    assert!(
        servers_of(
            &reply_pages(&mut h, &mut f, "\\gamedir\\cstrike\\clver\\0.21"),
            false
        )
        .is_empty()
    );
}
