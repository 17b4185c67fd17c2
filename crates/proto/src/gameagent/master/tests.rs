//! One virtual-clock test (or more) per rule of spec §8.3.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::*;

const C1: i32 = 0x1234_5678;

/// A face whose challenges are C1, C1 + 1, C1 + 2, …
fn master() -> GameAgentMaster {
    master_with(MasterConfig::default())
}

fn master_with(config: MasterConfig) -> GameAgentMaster {
    let mut next = C1 as u32;
    GameAgentMaster::new(config, move || {
        let v = next;
        next += 1;
        v
    })
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn v4(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn sent(m: &mut GameAgentMaster) -> Vec<(SocketAddr, Vec<u8>)> {
    std::iter::from_fn(|| m.poll_transmit())
        .map(|t| (t.to, t.bytes))
        .collect()
}

fn events(m: &mut GameAgentMaster) -> Vec<MasterEvent> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

fn challenge(c: i32) -> Vec<u8> {
    let mut v = vec![0x01];
    v.extend_from_slice(&c.to_le_bytes());
    v
}

fn hb(echo: i64) -> Vec<u8> {
    format!(
        "0;challenge;{echo};players;3;maxplayers;8;level;Yodeller;gametype;Cooperative;version;1.10;product;serioussamse"
    )
    .into_bytes()
}

/// Echo-0 heartbeats from `from` every 150 s in `(start, end]`, as a live server sends them.
fn keep_alive(m: &mut GameAgentMaster, from: &str, start: Instant, end: Instant) {
    let mut t = start + secs(150);
    while t <= end {
        m.handle_datagram(t, addr(from), &hb(0));
        t += secs(150);
    }
}

fn listed(m: &GameAgentMaster) -> Vec<SocketAddrV4> {
    m.servers().map(|s| s.game).collect()
}

/// Join and verify `from`, returning the challenge it got.
fn register(m: &mut GameAgentMaster, now: Instant, from: &str) -> i32 {
    m.handle_datagram(now, addr(from), b"q");
    let out = sent(m);
    let (to, bytes) = out.last().expect("a challenge").clone();
    assert_eq!(to, addr(from));
    let c = i32::from_le_bytes(bytes[1..5].try_into().unwrap());
    m.handle_datagram(now, addr(from), &hb(c.into()));
    c
}

#[test]
fn rule_1_join_creates_pending_record_and_sends_challenge() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    assert_eq!(sent(&mut m), vec![(addr("10.0.0.1:25601"), challenge(C1))]);
    assert_eq!(m.pending_len(), 1);
    assert!(listed(&m).is_empty());
    // A second `q` resets the record with a new challenge; the old one no longer verifies.
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    assert_eq!(
        sent(&mut m),
        vec![(addr("10.0.0.1:25601"), challenge(C1 + 1))]
    );
    assert_eq!(m.pending_len(), 1);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(C1.into()));
    assert!(listed(&m).is_empty());
    assert_eq!(m.counters().bad_echoes, 1);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb((C1 + 1).into()));
    assert_eq!(listed(&m), vec![v4("10.0.0.1:25600")]);
}

#[test]
fn rule_2_matching_echo_verifies_little_endian_and_big_endian() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    m.handle_datagram(t0, addr("10.0.0.2:25601"), b"q");
    sent(&mut m);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(C1.into()));
    // A big-endian server build reads the four bytes the other way round.
    let be = (C1 + 1).swap_bytes();
    m.handle_datagram(t0, addr("10.0.0.2:25601"), &hb(be.into()));
    assert_eq!(
        events(&mut m),
        vec![
            MasterEvent::Verified {
                game: v4("10.0.0.1:25600"),
                query: v4("10.0.0.1:25601")
            },
            MasterEvent::Verified {
                game: v4("10.0.0.2:25600"),
                query: v4("10.0.0.2:25601")
            },
        ]
    );
    let s: Vec<_> = m.servers().collect();
    assert_eq!(s[0].heartbeat.players, 3);
    assert_eq!(s[0].heartbeat.max_players, 8);
    assert_eq!(s[0].heartbeat.level, b"Yodeller");
    assert_eq!(s[0].heartbeat.product, b"serioussamse");
    assert_eq!(s[0].heartbeat.challenge, C1);
    assert_eq!(m.pending_len(), 0);
    assert!(sent(&mut m).is_empty());
}

#[test]
fn rule_3_echo_zero_refreshes_verified_record() {
    let t0 = Instant::now();
    let mut m = master();
    register(&mut m, t0, "10.0.0.1:25601");
    let t1 = t0 + secs(150);
    m.handle_datagram(t1, addr("10.0.0.1:25601"), &hb(0));
    let s: Vec<_> = m.servers().collect();
    assert_eq!(s[0].last_heartbeat, t1);
    assert_eq!(s[0].verified_at, t0);
    assert!(sent(&mut m).is_empty());
}

#[test]
fn rule_3_echo_zero_from_pending_resends_challenge_only_after_5_s() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    sent(&mut m);
    m.handle_datagram(t0 + secs(4), addr("10.0.0.1:25601"), &hb(0));
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.counters().pending_heartbeats_ignored, 1);
    m.handle_datagram(t0 + secs(5), addr("10.0.0.1:25601"), &hb(0));
    // The same challenge again.
    assert_eq!(sent(&mut m), vec![(addr("10.0.0.1:25601"), challenge(C1))]);
    assert!(listed(&m).is_empty());
}

#[test]
fn rule_3_echo_zero_from_unknown_source_reregisters_after_master_restart() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(0));
    assert_eq!(sent(&mut m), vec![(addr("10.0.0.1:25601"), challenge(C1))]);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(C1.into()));
    assert_eq!(listed(&m), vec![v4("10.0.0.1:25600")]);
}

#[test]
fn rule_4_port_hop_creates_nothing_and_is_reported_once_per_hour() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    sent(&mut m);
    // The answer to (A, 25601)'s challenge comes from an ephemeral port (spec §7 item 6).
    m.handle_datagram(t0, addr("10.0.0.1:40000"), &hb(C1.into()));
    assert!(sent(&mut m).is_empty());
    assert!(listed(&m).is_empty());
    assert_eq!(m.pending_len(), 1);
    assert_eq!(m.counters().port_hops, 1);
    assert_eq!(
        events(&mut m),
        vec![MasterEvent::PortHop {
            address: Ipv4Addr::new(10, 0, 0, 1),
            challenged_port: 25601,
            answered_from: 40000
        }]
    );
    m.handle_datagram(t0 + secs(1), addr("10.0.0.1:40001"), &hb(C1.into()));
    assert_eq!(m.counters().port_hops, 2);
    assert!(events(&mut m).is_empty());
    // (A, 25601) stays pending and expires.
    m.handle_timeout(t0 + secs(30));
    assert_eq!(m.pending_len(), 0);
    assert_eq!(m.counters().pending_expired, 1);
    // An hour later a new hop is reported again.
    let t1 = t0 + secs(3600);
    m.handle_timeout(t1);
    m.handle_datagram(t1, addr("10.0.0.1:25601"), b"q");
    let c = C1 + 1;
    sent(&mut m);
    m.handle_datagram(t1, addr("10.0.0.1:40002"), &hb(c.into()));
    assert_eq!(events(&mut m).len(), 1);
}

#[test]
fn rule_4_unmatched_nonzero_echo_is_dropped_without_challenge() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(77));
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(-1));
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.pending_len(), 0);
    assert_eq!(m.counters().bad_echoes, 2);
}

#[test]
fn rule_3_source_port_1_is_refused() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:1"), b"q");
    m.handle_datagram(t0, addr("10.0.0.1:1"), &hb(0));
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.counters().port_refused, 2);
}

#[test]
fn rule_5_pending_is_not_listed_and_lives_30_s_after_last_challenge() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    m.handle_datagram(t0, addr("10.0.0.9:5000"), b"e");
    assert_eq!(sent(&mut m).last().unwrap().1, vec![0x73]);
    // A re-sent challenge at 10 s extends the life to 40 s.
    m.handle_datagram(t0 + secs(10), addr("10.0.0.1:25601"), &hb(0));
    m.handle_timeout(t0 + secs(39));
    assert_eq!(m.pending_len(), 1);
    m.handle_timeout(t0 + secs(40));
    assert_eq!(m.pending_len(), 0);
    assert_eq!(m.poll_timeout(), None);
    assert!(events(&mut m).is_empty());
}

#[test]
fn rule_6_reverification_every_600_s_with_three_tries_then_delisted() {
    let t0 = Instant::now();
    let mut m = master();
    register(&mut m, t0, "10.0.0.1:25601");
    events(&mut m);
    let q = addr("10.0.0.1:25601");
    keep_alive(&mut m, "10.0.0.1:25601", t0, t0 + secs(599));
    m.handle_timeout(t0 + secs(599));
    assert!(sent(&mut m).is_empty());
    let t1 = t0 + secs(600);
    m.handle_timeout(t1);
    assert_eq!(sent(&mut m), vec![(q, challenge(C1 + 1))]);
    // Spoofed keep-alives with echo 0 keep refreshing the record…
    m.handle_datagram(t1 + secs(5), q, &hb(0));
    m.handle_timeout(t1 + secs(10));
    assert_eq!(sent(&mut m), vec![(q, challenge(C1 + 1))]);
    m.handle_datagram(t1 + secs(15), q, &hb(0));
    m.handle_timeout(t1 + secs(20));
    assert_eq!(sent(&mut m), vec![(q, challenge(C1 + 1))]);
    assert_eq!(listed(&m).len(), 1);
    // …but cannot keep it listed past the third miss.
    m.handle_timeout(t1 + secs(30));
    assert!(sent(&mut m).is_empty());
    assert!(listed(&m).is_empty());
    assert_eq!(
        events(&mut m),
        vec![MasterEvent::Delisted {
            game: v4("10.0.0.1:25600"),
            query: v4("10.0.0.1:25601")
        }]
    );
    assert_eq!(m.pending_len(), 1);
    assert_eq!(m.counters().delisted, 1);
}

#[test]
fn rule_6_answered_reverification_keeps_listing_and_restarts_period() {
    let t0 = Instant::now();
    let mut m = master();
    register(&mut m, t0, "10.0.0.1:25601");
    let q = addr("10.0.0.1:25601");
    keep_alive(&mut m, "10.0.0.1:25601", t0, t0 + secs(599));
    let t1 = t0 + secs(600);
    m.handle_timeout(t1);
    sent(&mut m);
    m.handle_datagram(t1 + secs(12), q, &hb((C1 + 1).into()));
    m.handle_timeout(t1 + secs(40));
    assert!(sent(&mut m).is_empty());
    assert_eq!(listed(&m).len(), 1);
    // The next round starts 600 s after the answer.
    keep_alive(&mut m, "10.0.0.1:25601", t1 + secs(12), t1 + secs(611));
    m.handle_timeout(t1 + secs(611));
    assert!(sent(&mut m).is_empty());
    m.handle_timeout(t1 + secs(612));
    assert_eq!(sent(&mut m), vec![(q, challenge(C1 + 2))]);
}

#[test]
fn rule_6_delisted_server_that_answers_is_listed_again() {
    let t0 = Instant::now();
    let mut m = master();
    register(&mut m, t0, "10.0.0.1:25601");
    register(&mut m, t0, "10.0.0.2:25601");
    let q = addr("10.0.0.1:25601");
    keep_alive(&mut m, "10.0.0.1:25601", t0, t0 + secs(599));
    keep_alive(&mut m, "10.0.0.2:25601", t0, t0 + secs(599));
    let mut missed = None;
    for s in [600, 610, 620, 630] {
        m.handle_timeout(t0 + secs(s));
        // 10.0.0.2 keeps answering its re-verification; 10.0.0.1 misses three times.
        for (to, bytes) in sent(&mut m) {
            let c = i32::from_le_bytes(bytes[1..5].try_into().unwrap());
            if to == q {
                missed = Some(c);
            } else {
                m.handle_datagram(t0 + secs(s), to, &hb(c.into()));
            }
        }
    }
    assert_eq!(listed(&m), vec![v4("10.0.0.2:25600")]);
    m.handle_datagram(t0 + secs(635), q, &hb(missed.unwrap().into()));
    // Listed again, now after the other server (stable order by verification).
    assert_eq!(listed(&m), vec![v4("10.0.0.2:25600"), v4("10.0.0.1:25600")]);
}

#[test]
fn rule_7_expiry_300_s_after_last_valid_heartbeat_swept_without_list_request() {
    let t0 = Instant::now();
    let mut m = master();
    register(&mut m, t0, "10.0.0.1:25601");
    events(&mut m);
    let t1 = t0 + secs(100);
    m.handle_datagram(t1, addr("10.0.0.1:25601"), &hb(0));
    // A non-matching echo is not a valid heartbeat.
    m.handle_datagram(t1 + secs(100), addr("10.0.0.1:25601"), &hb(5));
    assert!(m.poll_timeout().unwrap() <= t0 + secs(1));
    m.handle_timeout(t1 + secs(299));
    assert_eq!(listed(&m).len(), 1);
    m.handle_timeout(t1 + secs(300));
    assert!(listed(&m).is_empty());
    assert_eq!(
        events(&mut m),
        vec![MasterEvent::Expired {
            game: v4("10.0.0.1:25600"),
            query: v4("10.0.0.1:25601")
        }]
    );
    assert_eq!(m.pending_len(), 0);
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn rule_7_sweep_interval_is_at_most_10_s() {
    let t0 = Instant::now();
    let mut m = master();
    assert_eq!(m.poll_timeout(), None);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    let next = m.poll_timeout().unwrap();
    assert!(next > t0 && next <= t0 + secs(10));
    m.handle_timeout(next);
    assert!(m.poll_timeout().unwrap() <= next + secs(10));
}

#[test]
fn rule_8_u_never_creates_or_verifies_and_is_counted_when_verified() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"u");
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.pending_len(), 0);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    sent(&mut m);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"u");
    assert!(listed(&m).is_empty());
    assert_eq!(m.counters().state_changes_ignored, 2);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &hb(C1.into()));
    events(&mut m);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"u");
    assert_eq!(m.counters().state_changes, 1);
    assert_eq!(
        events(&mut m),
        vec![MasterEvent::StateChanged {
            game: v4("10.0.0.1:25600"),
            query: v4("10.0.0.1:25601")
        }]
    );
}

#[test]
fn rule_9_list_is_stock_stable_order_and_split_at_170() {
    let t0 = Instant::now();
    let mut m = master_with(MasterConfig {
        max_servers_per_address: 1000,
        challenges: BucketConfig::one_every(1000, secs(1)),
        ..MasterConfig::default()
    });
    // G4: two servers on 127.0.0.1, verified in this order.
    register(&mut m, t0, "127.0.0.1:25611");
    register(&mut m, t0, "127.0.0.1:25601");
    m.handle_datagram(t0, addr("127.0.0.1:5000"), b"eXYZ");
    assert_eq!(
        sent(&mut m),
        vec![(
            addr("127.0.0.1:5000"),
            vec![0x73, 0x7f, 0, 0, 1, 0x0a, 0x64, 0x7f, 0, 0, 1, 0x00, 0x64]
        )]
    );
    for p in 0..169u16 {
        register(&mut m, t0, &format!("127.0.0.1:{}", 30001 + p * 2));
    }
    m.handle_datagram(t0, addr("[::1]:5000"), b"e");
    let lists = sent(&mut m);
    let lens: Vec<usize> = lists.iter().map(|(_, b)| b.len()).collect();
    assert_eq!(lens, vec![1021, 7]);
    assert!(
        lists
            .iter()
            .all(|(to, b)| *to == addr("[::1]:5000") && b[0] == 0x73)
    );
    // The last one verified is last on the wire.
    let last = (30001 + 168 * 2 - 1u16).to_le_bytes();
    assert_eq!(lists[1].1, vec![0x73, 0x7f, 0, 0, 1, last[0], last[1]]);
}

#[test]
fn rule_9_empty_list_is_single_byte() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.9:5000"), b"e");
    assert_eq!(sent(&mut m), vec![(addr("10.0.0.9:5000"), vec![0x73])]);
}

#[test]
fn rule_2_product_listener_lists_only_its_products_but_registers_all() {
    let t0 = Instant::now();
    let mut m = master();
    let se: &[&[u8]] = &[b"SeriousSamSE"];
    let scope = ListScope::Products(se);
    // A Second Encounter server registers through the product listener…
    let a = addr("10.0.0.1:25601");
    m.handle_datagram_scoped(t0, a, b"q", scope);
    let c = sent(&mut m)[0].1[1..5].try_into().unwrap();
    m.handle_datagram_scoped(t0, a, &hb(i32::from_le_bytes(c).into()), scope);
    // …a First Encounter dedicated server (`serioussam`) through the default one.
    m.handle_datagram(t0, addr("10.0.0.2:25601"), b"q");
    let c = sent(&mut m)[0].1[1..5].try_into().unwrap();
    let fe = format!("0;challenge;{};product;serioussam", i32::from_le_bytes(c));
    m.handle_datagram(t0, addr("10.0.0.2:25601"), fe.as_bytes());
    m.handle_datagram_scoped(t0, addr("10.0.0.9:5000"), b"e", scope);
    assert_eq!(
        sent(&mut m),
        vec![(addr("10.0.0.9:5000"), vec![0x73, 10, 0, 0, 1, 0x00, 0x64])]
    );
    m.handle_datagram(t0, addr("10.0.0.8:5000"), b"e");
    assert_eq!(sent(&mut m)[0].1.len(), 13);
}

#[test]
fn rule_10_list_requests_burst_2_then_one_per_5_s() {
    let t0 = Instant::now();
    let mut m = master();
    let c = addr("10.0.0.9:5000");
    for _ in 0..3 {
        m.handle_datagram(t0, c, b"e");
    }
    assert_eq!(sent(&mut m).len(), 2);
    assert_eq!(m.counters().lists_rate_limited, 1);
    // Another source port of the same address shares the bucket.
    m.handle_datagram(t0 + secs(4), addr("10.0.0.9:5001"), b"e");
    assert!(sent(&mut m).is_empty());
    m.handle_datagram(t0 + secs(5), c, b"e");
    assert_eq!(sent(&mut m).len(), 1);
}

#[test]
fn rule_10_egress_cap_drops_a_list_whole() {
    let t0 = Instant::now();
    let mut m = master_with(MasterConfig {
        egress_bytes_per_second: 100,
        max_servers_per_address: 1000,
        challenges: BucketConfig::one_every(1000, secs(1)),
        ..MasterConfig::default()
    });
    for p in 0..20u16 {
        register(&mut m, t0, &format!("10.0.0.1:{}", 30001 + p));
    }
    let t1 = t0 + secs(10);
    // 121 bytes do not fit the 100-byte budget: nothing at all is sent.
    m.handle_datagram(t1, addr("10.0.0.9:5000"), b"e");
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.counters().over_budget, 1);
}

#[test]
fn rule_10_at_most_64_servers_per_address() {
    let t0 = Instant::now();
    let mut m = master_with(MasterConfig {
        challenges: BucketConfig::one_every(1000, secs(1)),
        ..MasterConfig::default()
    });
    for p in 0..64u16 {
        register(&mut m, t0, &format!("10.0.0.1:{}", 30001 + p));
    }
    m.handle_datagram(t0, addr("10.0.0.1:40001"), b"q");
    m.handle_datagram(t0, addr("10.0.0.1:40003"), &hb(0));
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.counters().address_cap_refused, 2);
    // Known records are still served, other addresses unaffected.
    m.handle_datagram(t0, addr("10.0.0.1:30001"), b"q");
    m.handle_datagram(t0, addr("10.0.0.2:30001"), b"q");
    assert_eq!(sent(&mut m).len(), 2);
}

#[test]
fn rule_10_challenges_per_address_burst_4_then_one_per_10_s() {
    let t0 = Instant::now();
    let mut m = master();
    for p in 0..6u16 {
        m.handle_datagram(t0, addr(&format!("10.0.0.1:{}", 30001 + p)), b"q");
    }
    assert_eq!(sent(&mut m).len(), 4);
    assert_eq!(m.counters().challenges_rate_limited, 2);
    assert_eq!(m.pending_len(), 4);
    m.handle_datagram(t0 + secs(10), addr("10.0.0.1:30100"), b"q");
    assert_eq!(sent(&mut m).len(), 1);
}

#[test]
fn rule_10_at_most_10000_pending_records() {
    let t0 = Instant::now();
    let mut m = master();
    for i in 0..10_001u32 {
        let ip = Ipv4Addr::from(0x0a00_0000 + i);
        m.handle_datagram(t0, SocketAddr::new(ip.into(), 25601), b"q");
    }
    assert_eq!(m.pending_len(), 10_000);
    assert_eq!(m.counters().pending_cap_refused, 1);
    assert_eq!(sent(&mut m).len(), 10_000);
}

#[test]
fn rule_10_malformed_datagrams_are_counted_and_dropped() {
    let t0 = Instant::now();
    let mut m = master();
    let from = addr("10.0.0.1:25601");
    let mut big = b"0;challenge;0;".to_vec();
    big.resize(2049, b'x');
    for d in [
        &b""[..],
        b"Z",
        b"\x01\x00",
        b"s\x7f\x00\x00\x01\x00\x64",
        b"0;players;1",
        b"0;challenge;abc",
        b"0;challenge;99999999999",
        &big,
    ] {
        m.handle_datagram(t0, from, d);
    }
    assert_eq!(m.counters().malformed, 8);
    assert!(sent(&mut m).is_empty());
    assert_eq!(m.pending_len(), 0);
}

#[test]
fn rule_11_datagrams_up_to_2048_bytes_parse_with_reference_pair_rule() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    sent(&mut m);
    // Junk between pairs is skipped, as the reference master's regex does.
    let mut d = format!("0;challenge;{C1};;;level;Long").into_bytes();
    d.resize(2048, b'x');
    m.handle_datagram(t0, addr("10.0.0.1:25601"), &d);
    let s: Vec<_> = m.servers().collect();
    assert_eq!(s.len(), 1);
    assert_eq!(
        s[0].heartbeat.level.len(),
        2048 - d.iter().position(|&b| b == b'L').unwrap()
    );
}

#[test]
fn ipv6_registrations_are_refused_but_mapped_ipv4_is_ipv4() {
    let t0 = Instant::now();
    let mut m = master();
    m.handle_datagram(t0, addr("[2001:db8::1]:25601"), b"q");
    m.handle_datagram(t0, addr("[2001:db8::1]:25601"), &hb(0));
    assert_eq!(m.counters().ipv6_refused, 2);
    assert!(sent(&mut m).is_empty());
    m.handle_datagram(t0, addr("[::ffff:10.0.0.1]:25601"), b"q");
    assert_eq!(sent(&mut m), vec![(addr("10.0.0.1:25601"), challenge(C1))]);
}

#[test]
fn quirk_zero_challenge_draw_is_never_sent() {
    let t0 = Instant::now();
    let mut m = GameAgentMaster::new(MasterConfig::default(), || 0x8000_0000);
    m.handle_datagram(t0, addr("10.0.0.1:25601"), b"q");
    assert_eq!(sent(&mut m), vec![(addr("10.0.0.1:25601"), challenge(1))]);
}

#[test]
fn registrar_registers_with_master_face() {
    use crate::gameagent::register::{GameAgentRegistrar, RegistrarConfig};
    use crate::respond::{Registrar, ServerState};
    let t0 = Instant::now();
    let master_addr = addr("127.0.0.1:9005");
    let server_addr = addr("127.0.0.1:25601");
    let state = ServerState {
        map: "Yodeller".into(),
        game: "serioussam".into(),
        ..ServerState::default()
    };
    let mut m = master();
    let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master_addr), &state);
    let pump = |m: &mut GameAgentMaster, r: &mut GameAgentRegistrar, now: Instant| {
        for _ in 0..4 {
            let mut buf = vec![];
            while r.poll_transmit(now, &mut buf).is_some() {
                m.handle_datagram(now, server_addr, &buf);
                buf.clear();
            }
            for (to, bytes) in sent(m) {
                assert_eq!(to, server_addr);
                assert!(r.handle_datagram(now, master_addr, &bytes, &state));
            }
        }
    };
    pump(&mut m, &mut r, t0);
    assert_eq!(listed(&m), vec![v4("127.0.0.1:25600")]);
    assert_eq!(m.servers().next().unwrap().heartbeat.product, b"serioussam");
    // The master restarts; the next periodic heartbeat re-registers the server.
    let mut m = master();
    let t1 = t0 + secs(150);
    r.handle_timeout(t1, &state);
    pump(&mut m, &mut r, t1 + secs(2));
    assert_eq!(listed(&m), vec![v4("127.0.0.1:25600")]);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn datagram() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            Just(b"q".to_vec()),
            Just(b"e".to_vec()),
            Just(b"u".to_vec()),
            (any::<i32>()).prop_map(|c| hb(c.into())),
            Just(hb(C1.into())),
            Just(hb(0)),
        ]
    }

    proptest! {
        /// Any sequence of datagrams and timeouts from a few sources: no panic, the counts stay
        /// consistent, and only verified records are listed.
        #[test]
        fn master_face_never_panics_and_stays_consistent(
            steps in proptest::collection::vec(
                (0u64..2000, 0u8..4, 0u16..4, datagram()), 1..80)
        ) {
            let t0 = Instant::now();
            let mut m = master();
            let mut now = t0;
            for (dt, host, port, d) in steps {
                now += Duration::from_millis(dt * 500);
                let from = SocketAddr::new(Ipv4Addr::new(10, 0, 0, host).into(), 25600 + port);
                m.handle_datagram(now, from, &d);
                m.handle_timeout(now);
                while m.poll_transmit().is_some() {}
                while m.poll_event().is_some() {}
                let listed = m.servers().count();
                prop_assert_eq!(listed + m.pending_len(), m.records.len());
                prop_assert!(m.records.len() <= 16);
                for dg in m.list_datagrams(ListScope::All) {
                    prop_assert!(dg.len() <= 1021);
                }
            }
        }
    }
}
