use super::*;
use crate::runtime::udp::harness::{Harness, drops, sent};
use muster_proto::quake3::packet::ServerList as List;

const FF: &[u8] = &[0xFF; 4];

fn face(f: impl FnOnce(&mut Quake3Settings)) -> Quake3Face {
    let mut s = Quake3Settings::new(
        &Quake3Config {
            allow_loopback: true,
            ..Quake3Config::default()
        },
        &LimitsConfig::default(),
    );
    f(&mut s);
    Quake3Face::new(s, 7, Instant::now())
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn dgram(text: &str) -> Vec<u8> {
    let mut d = FF.to_vec();
    d.extend_from_slice(text.as_bytes());
    d
}

/// The challenge of the `getinfo` in `out`, if there is one.
fn challenge_of(out: &crate::runtime::udp::Outbox) -> Option<String> {
    let (_, d) = sent(out).into_iter().next()?;
    let text = String::from_utf8(d.get(4..)?.to_vec()).ok()?;
    Some(text.strip_prefix("getinfo ")?.trim().to_owned())
}

fn info(challenge: &str, extra: &str) -> Vec<u8> {
    dgram(&format!(
        "infoResponse\n\\challenge\\{challenge}\\sv_maxclients\\8\\clients\\2{extra}"
    ))
}

/// Heartbeat, answer, publish: the server's registration as a test sees it.
fn register(
    h: &mut Harness,
    f: &mut Quake3Face,
    from: &str,
    tag: &str,
    extra: &str,
) -> Vec<&'static str> {
    let out = h.datagram(f, 0, addr(from), &dgram(&format!("heartbeat {tag}\n")));
    let Some(c) = challenge_of(&out) else {
        return drops(&out);
    };
    assert!(
        muster_proto::quake3::is_master_challenge(c.as_bytes()),
        "{c}"
    );
    let out = h.datagram(f, 0, addr(from), &info(&c, extra));
    drops(&out)
}

fn list(h: &mut Harness, f: &mut Quake3Face, request: &str) -> Option<Vec<SocketAddr>> {
    let out = h.datagram(f, 0, addr("192.0.2.200:4000"), &dgram(request));
    let datagrams = sent(&out);
    if datagrams.is_empty() {
        return None;
    }
    let mut all = Vec::new();
    for (_, d) in datagrams {
        let Packet::ServerList(List { servers, .. }) = Packet::decode(&d).unwrap() else {
            panic!("not a list");
        };
        all.extend(servers);
    }
    Some(all)
}

#[test]
fn a_verified_darkplaces_server_is_listed_for_its_game_and_protocol() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let d = register(
        &mut h,
        &mut f,
        "192.0.2.1:26000",
        "DarkPlaces",
        "\\gamename\\Xonotic\\protocol\\3\\hostname\\^1Red",
    );
    assert!(d.is_empty(), "{d:?}");
    let r = h.registry.iter_shared().next().unwrap().clone();
    assert_eq!((r.face, r.key.game.as_str()), (Face::Quake3, "xonotic"));
    assert_eq!(r.info.as_ref().unwrap().name(), "Red");
    assert_eq!(
        list(&mut h, &mut f, "getservers Xonotic 3"),
        Some(vec![addr("192.0.2.1:26000")])
    );
    assert_eq!(list(&mut h, &mut f, "getservers Xonotic 4"), Some(vec![]));
    assert_eq!(list(&mut h, &mut f, "getservers Nexuiz 3"), Some(vec![]));
    assert_eq!(
        list(&mut h, &mut f, "getserversExt Xonotic 3 ipv4"),
        Some(vec![addr("192.0.2.1:26000")])
    );
    assert_eq!(
        list(&mut h, &mut f, "getserversExt Xonotic 3 ipv6"),
        Some(vec![])
    );
}

#[test]
fn only_a_valid_answer_registers() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let from = addr("192.0.2.1:27960");
    // No heartbeat first: unknown.
    let out = h.datagram(&mut f, 0, from, &info("abcdefghij", "\\protocol\\68"));
    assert_eq!(drops(&out), ["unknown_server"]);
    let out = h.datagram(&mut f, 0, from, &dgram("heartbeat QuakeArena-1\n"));
    let c = challenge_of(&out).unwrap();
    // A wrong echo is refused and the challenge stays.
    let out = h.datagram(&mut f, 0, from, &info("wrongwrong", "\\protocol\\68"));
    assert_eq!(drops(&out), ["bad_echo"]);
    // No protocol: refused, and the challenge is used up.
    let out = h.datagram(&mut f, 0, from, &info(&c, ""));
    assert_eq!(drops(&out), ["malformed"]);
    let out = h.datagram(&mut f, 0, from, &info(&c, "\\protocol\\68"));
    assert_eq!(drops(&out), ["unknown_server"]);
    assert_eq!(h.registry.len(), 0);
    // A 256-byte value is refused, as dpmaster refuses it.
    let long = "x".repeat(256);
    let d = register(
        &mut h,
        &mut f,
        "192.0.2.1:27960",
        "QuakeArena-1",
        &format!("\\protocol\\68\\hostname\\{long}"),
    );
    assert_eq!(d, ["too_large"]);
    // sv_maxclients 0 is refused.
    let out = h.datagram(&mut f, 0, from, &dgram("heartbeat QuakeArena-1\n"));
    let c = challenge_of(&out).unwrap();
    let bad = dgram(&format!(
        "infoResponse\n\\challenge\\{c}\\sv_maxclients\\0\\clients\\0\\protocol\\68"
    ));
    assert_eq!(drops(&h.datagram(&mut f, 0, from, &bad)), ["malformed"]);
    // The anonymous Quake III server takes its game from its tag.
    let d = register(
        &mut h,
        &mut f,
        "192.0.2.1:27960",
        "QuakeArena-1",
        "\\protocol\\68",
    );
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(
        h.registry.iter_shared().next().unwrap().key.game.as_str(),
        "quake3arena"
    );
}

#[test]
fn names_that_a_tag_forbids_or_that_hold_spaces_are_refused() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    // A DarkPlaces server must name its game; with a space it is not a name.
    let d = register(&mut h, &mut f, "192.0.2.1:1", "DarkPlaces", "\\protocol\\3");
    assert_eq!(d, ["bad_game"]);
    let d = register(
        &mut h,
        &mut f,
        "192.0.2.1:2",
        "DarkPlaces",
        "\\protocol\\3\\gamename\\Dpmaster Test",
    );
    assert_eq!(d, ["bad_game"]);
    // A tag bound to a game refuses another game name.
    let d = register(
        &mut h,
        &mut f,
        "192.0.2.1:3",
        "EnemyTerritory-1",
        "\\protocol\\84\\gamename\\Other",
    );
    assert_eq!(d, ["bad_game"]);
    // Unknown tags get no getinfo; flatlines are ignored quietly.
    let out = h.datagram(&mut f, 0, addr("192.0.2.1:4"), &dgram("heartbeat Warsow\n"));
    assert!(sent(&out).is_empty());
    assert_eq!(drops(&out), ["unknown_game"]);
    let out = h.datagram(
        &mut f,
        0,
        addr("192.0.2.1:5"),
        &dgram("heartbeat ETFlatline-1\n"),
    );
    assert!(sent(&out).is_empty() && drops(&out).is_empty());
    assert_eq!(h.registry.len(), 0);
}

#[test]
fn gameless_requests_find_the_game_by_protocol() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    register(
        &mut h,
        &mut f,
        "192.0.2.1:27960",
        "QuakeArena-1",
        "\\protocol\\68",
    );
    register(
        &mut h,
        &mut f,
        "192.0.2.2:27960",
        "QuakeArena-1",
        "\\protocol\\2",
    );
    register(
        &mut h,
        &mut f,
        "192.0.2.3:26000",
        "DarkPlaces",
        "\\protocol\\2\\gamename\\Game1",
    );
    register(
        &mut h,
        &mut f,
        "192.0.2.4:27960",
        "EnemyTerritory-1",
        "\\protocol\\84\\gamename\\et",
    );
    assert_eq!(h.registry.len(), 4);
    assert_eq!(
        list(&mut h, &mut f, "getservers 68"),
        Some(vec![addr("192.0.2.1:27960")])
    );
    // Protocol 2 is no table game's: the anonymous games' servers using it, not Game1's.
    assert_eq!(
        list(&mut h, &mut f, "getservers 2"),
        Some(vec![addr("192.0.2.2:27960")])
    );
    assert_eq!(
        list(&mut h, &mut f, "getservers 84"),
        Some(vec![addr("192.0.2.4:27960")])
    );
}

#[test]
fn empty_full_and_gametype_filters() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let dp = |players: u32, gametype: &str| {
        format!("\\protocol\\3\\gamename\\G\\gametype\\{gametype}\\clients\\{players}")
    };
    // `clients` given twice: the lookup takes the first, so build the info by hand.
    let reg = |h: &mut Harness, f: &mut Quake3Face, from: &str, players: u32, gt: &str| {
        let out = h.datagram(f, 0, addr(from), &dgram("heartbeat DarkPlaces\n"));
        let c = challenge_of(&out).unwrap();
        let d = dgram(&format!(
            "infoResponse\n\\challenge\\{c}\\sv_maxclients\\8{}",
            dp(players, gt)
        ));
        assert!(drops(&h.datagram(f, 0, addr(from), &d)).is_empty());
    };
    reg(&mut h, &mut f, "192.0.2.1:1", 0, "ctf");
    reg(&mut h, &mut f, "192.0.2.2:1", 3, "ctf");
    reg(&mut h, &mut f, "192.0.2.3:1", 8, "dm");
    assert_eq!(list(&mut h, &mut f, "getservers G 3").unwrap().len(), 1);
    assert_eq!(
        list(&mut h, &mut f, "getservers G 3 empty full")
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        list(&mut h, &mut f, "getservers G 3 empty gametype=ctf"),
        Some(vec![addr("192.0.2.1:1"), addr("192.0.2.2:1")])
    );
}

/// Once the poller has read an ioquake3 server's `statusResponse`, its rules are that
/// reply's: `com_protocol` and `g_gametype`, no `protocol`. It stays listed for its protocol.
#[test]
fn a_polled_ioquake3_server_stays_listed_for_its_protocol() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let from = "192.0.2.9:27960";
    let extra = "\\protocol\\71\\gametype\\0";
    assert!(register(&mut h, &mut f, from, "QuakeArena-1", extra).is_empty());
    assert_eq!(
        list(&mut h, &mut f, "getservers 71"),
        Some(vec![addr(from)])
    );
    let key = (h.view.listed().iter())
        .find(|r| r.key.addr == GameAddr::Ip(addr(from)))
        .unwrap()
        .key
        .clone();
    let status = PollInfo::from(PollFields {
        name: "OA".into(),
        num_players: 2,
        max_players: 8,
        rules: Rules::new([
            ("com_protocol", Cow::Borrowed("71")),
            ("g_gametype", Cow::Borrowed("0")),
            ("gamename", Cow::Borrowed("baseoa")),
        ]),
        ..PollFields::default()
    });
    let wall = h.wall;
    h.registry.update_poll(&key, Some(status), wall);
    h.publish();
    assert_eq!(
        list(&mut h, &mut f, "getservers 71"),
        Some(vec![addr(from)])
    );
    assert_eq!(
        list(&mut h, &mut f, "getservers 71 gametype=0"),
        Some(vec![addr(from)])
    );
    assert_eq!(list(&mut h, &mut f, "getservers 68"), Some(vec![]));
}

#[test]
fn caps_count_challenges_in_flight_and_a_known_server_may_refresh() {
    let mut h = Harness::new();
    let mut f = face(|s| s.max_per_source = 2);
    assert!(
        register(
            &mut h,
            &mut f,
            "192.0.2.1:1",
            "QuakeArena-1",
            "\\protocol\\68"
        )
        .is_empty()
    );
    // The second one's challenge is in flight: a third gets no getinfo.
    let out = h.datagram(
        &mut f,
        0,
        addr("192.0.2.1:2"),
        &dgram("heartbeat QuakeArena-1\n"),
    );
    assert!(challenge_of(&out).is_some());
    let out = h.datagram(
        &mut f,
        0,
        addr("192.0.2.1:3"),
        &dgram("heartbeat QuakeArena-1\n"),
    );
    assert_eq!(drops(&out), ["source_cap"]);
    assert!(sent(&out).is_empty());
    // The listed one may refresh.
    assert!(
        register(
            &mut h,
            &mut f,
            "192.0.2.1:1",
            "QuakeArena-1",
            "\\protocol\\68"
        )
        .is_empty()
    );
    // After the timeout the unanswered challenge no longer counts.
    h.advance(Duration::from_secs(3));
    h.timeout(&mut f);
    assert!(
        register(
            &mut h,
            &mut f,
            "192.0.2.1:3",
            "QuakeArena-1",
            "\\protocol\\68"
        )
        .is_empty()
    );
    assert_eq!(h.registry.len(), 2);
}

#[test]
fn loopback_servers_are_refused_unless_allowed() {
    let mut h = Harness::new();
    let mut f = face(|s| s.allow_loopback = false);
    let out = h.datagram(
        &mut f,
        0,
        addr("127.0.0.1:27960"),
        &dgram("heartbeat QuakeArena-1\n"),
    );
    assert_eq!(drops(&out), ["bad_address"]);
    let out = h.datagram(
        &mut f,
        0,
        addr("[::ffff:127.0.0.1]:27960"),
        &dgram("heartbeat QuakeArena-1\n"),
    );
    assert_eq!(drops(&out), ["bad_address"]);
    assert!(sent(&out).is_empty());
}

#[test]
fn policy_and_flood_protection_leave_requests_unanswered() {
    let mut h = Harness::new();
    let mut f = face(|s| {
        s.policy = GamePolicy::Accept(vec!["Xonotic".into()]);
        s.flood = Some(BucketConfig::one_every(3, Duration::from_secs(3)));
    });
    let d = register(
        &mut h,
        &mut f,
        "192.0.2.1:1",
        "DarkPlaces",
        "\\protocol\\3\\gamename\\Nexuiz",
    );
    assert_eq!(d, ["unknown_game"]);
    assert_eq!(list(&mut h, &mut f, "getservers Nexuiz 3"), None);
    // Throttle 4: three answered in a row, the fourth ignored, one more after the decay.
    let mut h = Harness::new();
    let mut f = face(|s| s.flood = Some(BucketConfig::one_every(3, Duration::from_secs(3))));
    for _ in 0..3 {
        assert!(list(&mut h, &mut f, "getservers Xonotic 3").is_some());
    }
    assert_eq!(list(&mut h, &mut f, "getservers Xonotic 3"), None);
    h.advance(Duration::from_secs(3));
    assert!(list(&mut h, &mut f, "getservers Xonotic 3").is_some());
}

#[test]
fn a_forged_flood_costs_bounded_replies_and_no_records() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let mut getinfos = 0;
    for i in 0..5000u32 {
        let from = SocketAddr::new(IpAddr::from([198, 51, 100, 7]), 1000 + (i % 60000) as u16);
        let out = h.datagram(&mut f, 0, from, &dgram("heartbeat DarkPlaces\n"));
        getinfos += sent(&out).len();
    }
    // One source: its heartbeat bucket bounds the getinfos, and nothing is registered.
    let burst = LimitsConfig::default().heartbeat_burst as usize;
    assert!(getinfos <= burst + 1, "{getinfos}");
    assert_eq!(h.registry.len(), 0);
    // Garbage and truncated lists are dropped as malformed.
    let out = h.datagram(
        &mut f,
        0,
        addr("192.0.2.9:1"),
        &dgram("getserversResponse\\\x01\x02"),
    );
    assert_eq!(drops(&out), ["malformed"]);
    let out = h.datagram(
        &mut f,
        0,
        addr("192.0.2.9:1"),
        b"\xFF\xFF\xFF\xFFgetservers",
    );
    assert_eq!(drops(&out), ["malformed"]);
}

#[test]
fn a_darkplaces_responders_answer_registers() {
    let mut h = Harness::new();
    let mut f = face(|_| {});
    let from = addr("127.0.0.1:40000");
    let out = h.datagram(&mut f, 0, from, &dgram("heartbeat DarkPlaces\n"));
    let c = challenge_of(&out).unwrap();
    let reply = format!(
        "infoResponse\n\\gamename\\Xonotic\\modname\\data\\gameversion\\\\sv_maxclients\\16\\clients\\2\\bots\\0\\mapname\\stormkeep\\hostname\\learned\\protocol\\3\\qcstatus\\dm::P2:S14:F0:MXonotic::score!!\\challenge\\{c}"
    );
    let out = h.datagram(&mut f, 0, from, &dgram(&reply));
    assert_eq!(drops(&out), Vec::<&str>::new());
    assert_eq!(h.registry.len(), 1);
}

#[test]
fn challenges_are_drawn_as_the_protocol_crate_draws_them() {
    let mut rng = SmallRng::seed_from_u64(11);
    for _ in 0..20_000 {
        let mut random = [0u8; CHALLENGE_RANDOM_LEN];
        rng.fill_bytes(&mut random);
        let c = Challenge::new(random);
        let word = muster_proto::quake3::generate_challenge(random);
        assert_eq!(c.as_bytes(), word.as_bytes(), "{random:?}");
        assert!(muster_proto::quake3::is_master_challenge(c.as_bytes()));
        let mut encoded = Vec::new();
        Packet::GetInfo {
            challenge: Some(word),
        }
        .encode(&mut encoded);
        assert_eq!(&*c.getinfo(), encoded.as_slice());
    }
    // Every byte of the alphabet is reachable, and only those.
    let mut seen = [false; 256];
    for r in 0..=255u8 {
        let mut random = [r; CHALLENGE_RANDOM_LEN];
        random[0] = 3;
        for &b in Challenge::new(random).as_bytes() {
            seen[usize::from(b)] = true;
        }
    }
    let allowed: Vec<u8> = (0x21u8..=0x7E)
        .filter(|b| !b"\\/;\"%".contains(b))
        .collect();
    let got: Vec<u8> = (0..=255u8).filter(|&b| seen[usize::from(b)]).collect();
    assert_eq!(got, allowed);
}

#[test]
fn a_burst_of_unanswered_challenges_is_forgotten_and_its_room_given_back() {
    let mut h = Harness::new();
    let mut f = face(|s| {
        s.heartbeats = BucketConfig::one_every(1_000_000, Duration::from_micros(1));
        s.max_per_source = 100_000;
    });
    for i in 0..5000u16 {
        let from = SocketAddr::new(IpAddr::from([192, 0, 2, 1 + (i % 50) as u8]), 1000 + i);
        let out = h.datagram(&mut f, 0, from, &dgram("heartbeat DarkPlaces\n"));
        assert_eq!(sent(&out).len(), 1);
    }
    assert_eq!(f.pending.len(), 5000);
    assert!(f.pending.capacity() >= 5000);
    // Not yet due: every challenge is still in flight.
    h.advance(Duration::from_secs(1));
    h.timeout(&mut f);
    assert_eq!(f.pending.len(), 5000);
    h.advance(Duration::from_secs(2));
    h.timeout(&mut f);
    assert!(f.pending.is_empty());
    assert!(f.pending_per_source.is_empty());
    assert!(f.pending.capacity() <= 64, "{}", f.pending.capacity());
    assert!(f.pending_per_source.capacity() <= 64);
    // A challenge that timed out is not accepted any more.
    let from = addr("192.0.2.1:1000");
    let out = h.datagram(&mut f, 0, from, &info("whatever", "\\protocol\\3"));
    assert_eq!(drops(&out), ["unknown_server"]);
}

#[test]
fn list_requests_are_told_apart_before_decoding() {
    let f = face(|_| {});
    for list in ["getservers 68 empty", "getserversExt Xonotic 3 ipv6"] {
        assert!(f.asks_for_list(&dgram(list)), "{list}");
    }
    for other in [
        "getserversResponse\\",
        "getserversExtResponse\\",
        "heartbeat DarkPlaces\n",
        "getinfo abc",
    ] {
        assert!(!f.asks_for_list(&dgram(other)), "{other}");
    }
    assert!(!f.asks_for_list(b"getservers 68"), "no 0xFF prefix");
}
