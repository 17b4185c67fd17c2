//! The GameAgent face on a virtual clock: bytes in, registry and replies out.

use super::*;
use crate::runtime::udp::harness::{Harness, drops, sent};
use std::net::Ipv4Addr;

fn face(h: &Harness) -> GameAgentFace {
    GameAgentFace::new(
        GameAgentSettings::default(),
        Secrets::with_key([3; 32], Duration::from_secs(60)),
        vec![Scope::All, Scope::Products(vec!["serioussamse".into()])],
        h.now,
    )
}

fn from(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn heartbeat(echo: i32, product: &str) -> Vec<u8> {
    format!(
        "0;challenge;{echo};players;3;maxplayers;16;level;Sierra;gametype;Cooperative;version;1.10;product;{product}"
    )
    .into_bytes()
}

/// The challenge value in a `01 c:i32le` datagram.
fn challenge_of(d: &[u8]) -> i32 {
    assert_eq!(d.len(), 5, "{d:?}");
    assert_eq!(d[0], 0x01);
    i32::from_le_bytes([d[1], d[2], d[3], d[4]])
}

/// `q` then the echo: the server at `addr` (query port) is listed.
fn register(h: &mut Harness, f: &mut GameAgentFace, addr: &str, product: &str) {
    let out = h.datagram(f, 0, from(addr), b"q");
    let s = sent(&out);
    assert_eq!(s.len(), 1, "one challenge: {:?}", drops(&out));
    let c = challenge_of(&s[0].1);
    let out = h.datagram(f, 0, from(addr), &heartbeat(c, product));
    assert_eq!(drops(&out), Vec::<&str>::new());
    assert_eq!(out.registrations, 1);
}

fn e_list(h: &mut Harness, f: &mut GameAgentFace, via: usize) -> Vec<u8> {
    let out = h.datagram(f, via, from("198.51.100.9:5000"), b"e");
    sent(&out).into_iter().flat_map(|(_, d)| d).collect()
}

#[test]
fn join_challenge_echo_lists_the_game_port_and_keeps_nothing_before() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let out = h.datagram(&mut f, 0, from("192.0.2.1:25601"), b"q");
    assert_eq!(sent(&out).len(), 1);
    assert!(h.registry.is_empty(), "a challenge costs no registry slot");
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussamse");
    let key = ServerKey::new("serioussamse", GameAddr::Ip(from("192.0.2.1:25600")));
    let rec = h
        .registry
        .get(&key)
        .expect("listed under its product and game port");
    assert_eq!(rec.query_addr(), Some(from("192.0.2.1:25601")));
    assert_eq!(rec.info.as_ref().unwrap().num_players, 3);
    assert_eq!(e_list(&mut h, &mut f, 0), [0x73, 192, 0, 2, 1, 0x00, 0x64]);
}

#[test]
fn challenges_are_bound_to_the_address_and_port() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let out = h.datagram(&mut f, 0, from("192.0.2.1:25601"), b"q");
    let c = challenge_of(&sent(&out)[0].1);
    // The same echo from another address is worthless.
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.2:25601"),
        &heartbeat(c, "serioussam"),
    );
    assert_eq!(drops(&out), ["bad_echo"]);
    // From another port of the same address it is a port hop: no record, no challenge.
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:40000"),
        &heartbeat(c, "serioussam"),
    );
    assert_eq!(drops(&out), ["port_hop"]);
    assert!(sent(&out).is_empty());
    assert!(h.registry.is_empty());
    // A guess is a bad echo.
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(c ^ 1, "serioussam"),
    );
    assert_eq!(drops(&out), ["bad_echo"]);
    // The echo as a big-endian build reads it is accepted too (§8.3 rule 4).
    let be = i32::from_be_bytes(c.to_le_bytes());
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(be, "serioussam"),
    );
    assert_eq!(out.registrations, 1);
}

#[test]
fn challenges_expire_after_two_epochs() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let out = h.datagram(&mut f, 0, from("192.0.2.1:25601"), b"q");
    let c = challenge_of(&sent(&out)[0].1);
    h.advance(Duration::from_secs(121));
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(c, "serioussam"),
    );
    assert_eq!(drops(&out), ["bad_echo"]);
}

#[test]
fn periodic_heartbeats_refresh_listed_and_challenge_unknown() {
    let mut h = Harness::new();
    let mut f = face(&h);
    // Unknown (a master restart lost it): echo 0 is answered with a challenge (rule 4.3).
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(0, "serioussam"),
    );
    assert_eq!(sent(&out).len(), 1);
    assert!(h.registry.is_empty());
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    h.advance(Duration::from_secs(100));
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(0, "serioussam"),
    );
    assert!(
        sent(&out).is_empty(),
        "a listed server's heartbeat is only a refresh"
    );
    let key = ServerKey::new("serioussam", GameAddr::Ip(from("192.0.2.1:25600")));
    assert_eq!(h.registry.get(&key).unwrap().last_heartbeat, h.wall);
}

#[test]
fn a_changed_product_replaces_the_record() {
    let mut h = Harness::new();
    let mut f = face(&h);
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussamse");
    let games: Vec<muster_core::registry::GameName> =
        h.registry.iter().map(|r| r.key.game.clone()).collect();
    assert_eq!(games, ["serioussamse"]);
}

#[test]
fn product_listeners_list_only_their_products() {
    let mut h = Harness::new();
    let mut f = face(&h);
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    register(&mut h, &mut f, "192.0.2.2:25601", "serioussamse");
    assert_eq!(e_list(&mut h, &mut f, 0).len(), 1 + 12);
    assert_eq!(e_list(&mut h, &mut f, 1), [0x73, 192, 0, 2, 2, 0x00, 0x64]);
}

#[test]
fn sixty_four_servers_behind_one_address_all_get_challenged_at_once() {
    let mut h = Harness::new();
    let mut f = face(&h);
    for i in 0..64u16 {
        register(
            &mut h,
            &mut f,
            &format!("192.0.2.1:{}", 25601 + 2 * i),
            "serioussam",
        );
    }
    assert_eq!(h.registry.len(), 64);
    assert_eq!(e_list(&mut h, &mut f, 0).len(), 1 + 64 * 6);
}

#[test]
fn forged_joins_cost_a_bounded_reply_and_no_state() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let mut replies = 0;
    for i in 0..5000u32 {
        let ip = Ipv4Addr::from(0x7f00_0000 | i);
        let out = h.datagram(&mut f, 0, SocketAddr::new(IpAddr::V4(ip), 25601), b"q");
        replies += sent(&out).len();
    }
    assert_eq!(
        replies, 5000,
        "one 5-byte challenge each, within each source's budget"
    );
    assert!(h.registry.is_empty());
    // A legitimate server registers during the flood.
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
}

/// After a restart every restored record is challenged once, over several bounded sweeps
/// (each looks at part of the list, under the registry lock), not only the first 2000.
#[test]
fn the_restart_pass_challenges_every_restored_record_in_bounded_sweeps() {
    let mut h = Harness::new();
    let n: u32 = 40_000;
    for i in 0..n {
        let ip = Ipv4Addr::from(0xC000_0000 + i);
        let q = SocketAddr::new(ip.into(), 25601);
        let game = SocketAddr::new(ip.into(), 25600);
        let _ = h.registry.register(
            Registration {
                key: ServerKey::new("serioussam", GameAddr::Ip(game)),
                face: Face::GameAgent,
                game_port: Some(25600),
                query_addr: Some(q),
                query_protocol: Some(Protocol::GameAgent),
                source: SourceKey::of(ip.into()),
            },
            h.wall,
        );
    }
    h.publish();
    let mut f = face(&h);
    let mut challenged = std::collections::HashSet::new();
    let mut sweeps = 0;
    while challenged.len() < n as usize && sweeps < 100 {
        let out = h.timeout(&mut f);
        sweeps += 1;
        let s = sent(&out);
        assert!(s.len() <= MAX_CHALLENGES_PER_SWEEP, "{}", s.len());
        for (to, _) in s {
            assert!(challenged.insert(to), "{to} challenged twice in the pass");
        }
        h.advance(SWEEP);
    }
    assert_eq!(challenged.len(), n as usize, "after {sweeps} sweeps");
    assert!(sweeps >= (n as usize).div_ceil(MAX_CHALLENGES_PER_SWEEP));
}

#[test]
fn reverification_challenges_then_delists_a_silent_server() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let out = h.timeout(&mut f);
    assert!(sent(&out).is_empty(), "nothing restored");
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    let key = ServerKey::new("serioussam", GameAddr::Ip(from("192.0.2.1:25600")));
    h.advance(Duration::from_secs(599));
    assert!(sent(&h.timeout(&mut f)).is_empty());
    let mut challenges = 0;
    for _ in 0..40 {
        h.advance(Duration::from_secs(1));
        challenges += sent(&h.timeout(&mut f)).len();
    }
    assert_eq!(challenges, 3, "three tries, 10 s apart (rule 6)");
    assert!(!h.registry.get(&key).unwrap().is_listed(), "de-listed");
    // Echo-0 heartbeats keep it alive but do not list it; its answer to a challenge does.
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(0, "serioussam"),
    );
    let c = challenge_of(&sent(&out)[0].1);
    assert!(!h.registry.get(&key).unwrap().is_listed());
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(c, "serioussam"),
    );
    assert!(out.drops.is_empty());
    assert!(h.registry.get(&key).unwrap().is_listed());
}

/// The sweep decides on the registry's record, not on the view's copy: a view published
/// before the challenges went out (a challenge is no change any list shows) must not make it
/// challenge forever and never de-list.
#[test]
fn reverification_counts_challenges_the_view_has_not_seen() {
    let mut h = Harness::new();
    let mut f = face(&h);
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    let key = ServerKey::new("serioussam", GameAddr::Ip(from("192.0.2.1:25600")));
    h.advance(Duration::from_secs(599));
    let mut challenges = 0;
    for _ in 0..40 {
        h.advance(Duration::from_secs(1));
        challenges += sent(&h.timeout_unpublished(&mut f)).len();
    }
    assert_eq!(challenges, 3, "three tries, 10 s apart, with a stale view");
    assert!(!h.registry.get(&key).unwrap().is_listed(), "de-listed");
}

#[test]
fn an_answered_reverification_keeps_the_server_listed() {
    let mut h = Harness::new();
    let mut f = face(&h);
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    h.advance(Duration::from_secs(601));
    let out = h.timeout(&mut f);
    let c = challenge_of(&sent(&out)[0].1);
    let out = h.datagram(
        &mut f,
        0,
        from("192.0.2.1:25601"),
        &heartbeat(c, "serioussam"),
    );
    assert!(out.drops.is_empty());
    let key = ServerKey::new("serioussam", GameAddr::Ip(from("192.0.2.1:25600")));
    let rec = h.registry.get(&key).unwrap();
    assert!(rec.is_listed());
    assert_eq!(rec.challenges_unanswered(), 0);
    for _ in 0..60 {
        h.advance(Duration::from_secs(1));
        assert!(sent(&h.timeout(&mut f)).is_empty());
    }
}

#[test]
fn state_changes_of_listed_servers_ask_for_a_poll() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let out = h.datagram(&mut f, 0, from("192.0.2.1:25601"), b"u");
    assert_eq!(drops(&out), ["unexpected_state_change"]);
    register(&mut h, &mut f, "192.0.2.1:25601", "serioussam");
    let out = h.datagram(&mut f, 0, from("192.0.2.1:25601"), b"u");
    assert_eq!(out.poll_soon.len(), 1);
}

#[test]
fn bad_input_is_counted() {
    let mut h = Harness::new();
    let mut f = face(&h);
    let cases: [(&[u8], &str); 4] = [
        (b"", "malformed"),
        (b"z", "malformed"),
        (&[b'e'; 3000], "too_large"),
        (b"0;players;3", "malformed"),
    ];
    for (d, why) in cases {
        let out = h.datagram(&mut f, 0, from("192.0.2.1:25601"), d);
        assert_eq!(drops(&out), [why], "{d:?}");
    }
    let out = h.datagram(&mut f, 0, from("[2001:db8::1]:25601"), b"q");
    assert_eq!(drops(&out), ["ipv6_heartbeat"]);
    let out = h.datagram(&mut f, 0, from("192.0.2.1:1"), b"q");
    assert_eq!(drops(&out), ["port_zero"]);
}

#[test]
fn game_name_from_product() {
    assert_eq!(game_name(b"serioussamse"), "serioussamse");
    assert_eq!(game_name(b"SeriousSam"), "serioussam");
    assert_eq!(game_name(b""), FALLBACK_GAME);
    assert_eq!(game_name(b"sam with space"), FALLBACK_GAME);
    assert_eq!(game_name(&[0xE9; 4]), FALLBACK_GAME);
    assert_eq!(game_name(&[b'a'; MAX_GAME_LEN + 1]), FALLBACK_GAME);
}

proptest::proptest! {
    #[test]
    fn any_datagram_is_handled(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        let mut h = Harness::new();
        let mut f = face(&h);
        let _ = h.datagram(&mut f, 0, from("192.0.2.1:25601"), &data);
    }
}

#[test]
fn a_list_request_is_told_apart_before_decoding() {
    let h = Harness::new();
    let f = face(&h);
    assert!(f.asks_for_list(&[0x65]));
    assert!(
        f.asks_for_list(b"eXYZ"),
        "the request's tail is ignored, as decoding does"
    );
    assert!(!f.asks_for_list(&heartbeat(1, "serioussamse")));
    assert!(!f.asks_for_list(&[]));
}
