use super::*;
use crate::a2s::packet::{PlayerEntry, TheShip};
use crate::a2s::split::{Layout, encode_parts};
use proptest::prelude::*;

const ME: Protocol = Protocol::Quake3;

fn target() -> SocketAddr {
    "127.0.0.1:27015".parse().unwrap()
}

fn config() -> QueryConfig {
    QueryConfig {
        attempt_timeout: Duration::from_millis(100),
        retries: 2,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn bytes(p: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    p.encode(&mut out);
    out
}

/// Everything the machine wants to send now.
fn sent(q: &mut ServerQuery, now: Instant) -> Vec<Packet> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = q.poll_transmit(now, &mut buf) {
        assert_eq!(t.destination, target());
        out.push(Packet::decode(&buf).unwrap());
        buf.clear();
    }
    out
}

fn info(app_id: u16) -> Info {
    Info {
        protocol: 17,
        name: "Ünï server".as_bytes().to_vec(),
        map: b"cp_badlands".to_vec(),
        folder: b"tf".to_vec(),
        game: b"Team Fortress".to_vec(),
        app_id,
        players: 3,
        max_players: 24,
        bots: 1,
        server_type: b'd',
        environment: b'l',
        visibility: 1,
        vac: 1,
        the_ship: (u32::from(app_id) == crate::a2s::THE_SHIP_APP_ID).then_some(TheShip {
            mode: 1,
            witnesses: 2,
            duration: 3,
        }),
        version: b"8622567".to_vec(),
        edf: Some(0xA0),
        port: Some(27015),
        keywords: Some(b"alltalk,cp".to_vec()),
        ..Info::default()
    }
}

fn players(n: usize) -> Players {
    Players {
        declared: u8::try_from(n % 256).unwrap(),
        players: (0..n)
            .map(|k| PlayerEntry {
                index: 0,
                name: format!("p{k}").into_bytes(),
                score: i32::try_from(k).unwrap(),
                duration: 2.5,
                ship: None,
            })
            .collect(),
        truncated: false,
    }
}

fn rules(n: usize) -> Rules {
    Rules {
        declared: 0,
        rules: (0..n)
            .map(|k| (format!("rule{k:04}").into_bytes(), b"1".to_vec()))
            .collect(),
        truncated: false,
    }
}

#[test]
fn a2s_query_goes_through_every_challenge_and_a_split_reply() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    // INFO, and PLAYER with -1 to learn the challenge, in one round.
    assert_eq!(
        sent(&mut q, t0),
        [
            Packet::InfoRequest { challenge: None },
            Packet::PlayerRequest {
                challenge: NO_CHALLENGE
            }
        ]
    );
    // The server wants a challenge for INFO; both requests get the same one.
    q.handle_datagram(
        t0 + ms(5),
        target(),
        &bytes(&Packet::Challenge(0xAABB_CCDD)),
    );
    assert_eq!(
        sent(&mut q, t0 + ms(5)),
        [
            Packet::InfoRequest {
                challenge: Some(0xAABB_CCDD)
            },
            Packet::PlayerRequest {
                challenge: 0xAABB_CCDD
            },
            Packet::RulesRequest {
                challenge: 0xAABB_CCDD
            }
        ]
    );
    q.handle_datagram(
        t0 + ms(5),
        target(),
        &bytes(&Packet::Challenge(0xAABB_CCDD)),
    );
    assert!(sent(&mut q, t0 + ms(5)).is_empty());
    q.handle_datagram(
        t0 + ms(25),
        target(),
        &bytes(&Packet::Info(Box::new(info(440)))),
    );
    assert!(sent(&mut q, t0 + ms(25)).is_empty());
    // The server replaces the challenge: PLAYER and RULES again with the new one.
    q.handle_datagram(t0 + ms(30), target(), &bytes(&Packet::Challenge(7)));
    assert_eq!(
        sent(&mut q, t0 + ms(30)),
        [
            Packet::PlayerRequest { challenge: 7 },
            Packet::RulesRequest { challenge: 7 }
        ]
    );
    // 300 players in a split reply, parts reversed.
    let reply = bytes(&Packet::Players(players(300)));
    let mut parts = encode_parts(Layout::Source { size_field: true }, 77, &reply, 1248);
    assert!(parts.len() >= 3);
    parts.reverse();
    for p in &parts {
        assert!(q.poll_event().is_none());
        q.handle_datagram(t0 + ms(40), target(), p);
    }
    assert!(sent(&mut q, t0 + ms(40)).is_empty());
    q.handle_datagram(t0 + ms(50), target(), &bytes(&Packet::Rules(rules(5))));
    assert!(sent(&mut q, t0 + ms(50)).is_empty());
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert_eq!(q.poll_event(), None);
    assert_eq!(q.poll_timeout(), None);
    assert_eq!(s.protocol, ME);
    assert_eq!(s.name.text, "Ünï server");
    assert_eq!(s.map.text, "cp_badlands");
    assert_eq!(s.game_type.text, "Team Fortress");
    assert_eq!(s.version.text, "8622567");
    assert_eq!(s.password, Some(true));
    assert_eq!((s.num_players, s.max_players), (3, 24));
    assert_eq!(s.players.len(), 300);
    assert_eq!(s.players[299].name.text, "p299");
    assert_eq!(s.players[299].score, Some(299));
    assert!(
        s.players[0]
            .raw
            .contains(&("duration_ms".to_owned(), RawValue::Int(2500)))
    );
    assert_eq!(s.rules.len(), 5);
    assert_eq!(s.rules[4].key.text, "rule0004");
    assert_eq!(s.ping, Some(ms(20)));
    assert_eq!(s.partial, None);
    assert_eq!(s.raw_field("app_id"), Some(&RawValue::Int(440)));
    assert_eq!(s.raw_field("port"), Some(&RawValue::Int(27015)));
    assert_eq!(
        s.raw_field("keywords"),
        Some(&RawValue::Text(decode_text(b"alltalk,cp")))
    );
}

#[test]
fn a2s_query_info_only_without_challenge() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::INFO, config());
    assert_eq!(sent(&mut q, t0).len(), 1);
    // Another address and garbage are ignored.
    let other: SocketAddr = "127.0.0.2:27015".parse().unwrap();
    q.handle_datagram(t0, other, &bytes(&Packet::Info(Box::new(info(440)))));
    q.handle_datagram(t0, target(), b"\xff\xff\xff\xffI");
    assert!(q.poll_event().is_none());
    q.handle_datagram(
        t0 + ms(3),
        target(),
        &bytes(&Packet::Info(Box::new(info(440)))),
    );
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert!(s.players.is_empty() && s.rules.is_empty());
    assert_eq!(s.ping, Some(ms(3)));
}

#[test]
fn a2s_query_refuses_a_server_that_keeps_changing_its_challenge() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let _ = sent(&mut q, t0);
    q.handle_datagram(t0, target(), &bytes(&Packet::Challenge(1)));
    assert_eq!(sent(&mut q, t0).len(), 3);
    // The same challenge again (answer to a re-sent request) changes nothing.
    q.handle_datagram(t0, target(), &bytes(&Packet::Challenge(1)));
    assert!(q.poll_event().is_none());
    assert!(sent(&mut q, t0).is_empty());
    // Two replacements are followed, a third refuses the server.
    for c in [2, 3] {
        q.handle_datagram(t0, target(), &bytes(&Packet::Challenge(c)));
        assert_eq!(
            sent(&mut q, t0)[0],
            Packet::InfoRequest { challenge: Some(c) }
        );
    }
    q.handle_datagram(t0, target(), &bytes(&Packet::Challenge(4)));
    assert_eq!(
        q.poll_event(),
        Some(Event::Failed(QueryError::Rejected(
            "the server kept changing its challenge"
        )))
    );
    assert_eq!(q.poll_timeout(), None);
}

#[test]
fn a2s_query_retries_on_the_shared_schedule_then_times_out() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let mut sends = sent(&mut q, t0).len();
    let mut now = t0;
    while let Some(t) = q.poll_timeout() {
        now = t;
        q.handle_timeout(now);
        sends += sent(&mut q, now).len();
    }
    // Three rounds of INFO and PLAYER with -1, as for a single request.
    assert_eq!(sends, 6);
    assert_eq!(now, t0 + ms(300));
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

#[test]
fn a2s_query_missing_players_and_split_parts_leave_a_partial_result() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let _ = sent(&mut q, t0);
    q.handle_datagram(t0, target(), &bytes(&Packet::Info(Box::new(info(440)))));
    assert!(sent(&mut q, t0).is_empty());
    q.handle_datagram(t0, target(), &bytes(&Packet::Challenge(9)));
    assert_eq!(sent(&mut q, t0).len(), 2);
    // Only the first part of a split PLAYER reply ever comes.
    let reply = bytes(&Packet::Players(players(200)));
    let parts = encode_parts(Layout::Source { size_field: true }, 5, &reply, 1248);
    q.handle_datagram(t0 + ms(10), target(), &parts[0]);
    let mut rules_asked = false;
    while let Some(now) = q.poll_timeout() {
        q.handle_timeout(now);
        for p in sent(&mut q, now) {
            if matches!(p, Packet::RulesRequest { .. }) && !rules_asked {
                rules_asked = true;
                q.handle_datagram(now, target(), &bytes(&Packet::Rules(rules(2))));
            }
        }
        assert!(now < t0 + Duration::from_secs(5));
    }
    assert!(rules_asked);
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert!(s.players.is_empty());
    assert_eq!(s.rules.len(), 2);
    let reason = s.partial.unwrap().reason;
    assert!(reason.contains("no PLAYER reply"), "{reason}");
    assert!(reason.contains("1 of 3 parts"), "{reason}");
}

#[test]
fn a2s_query_of_the_ship_reads_deaths_and_money() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(
        target(),
        ME,
        Request {
            players: true,
            rules: false,
        },
        config(),
    );
    let _ = sent(&mut q, t0);
    q.handle_datagram(t0, target(), &bytes(&Packet::Info(Box::new(info(2400)))));
    let _ = sent(&mut q, t0);
    let mut p = players(2);
    for (k, e) in p.players.iter_mut().enumerate() {
        e.ship = Some(crate::a2s::packet::ShipPlayer {
            deaths: i32::try_from(k).unwrap(),
            money: 100,
        });
    }
    q.handle_datagram(t0, target(), &bytes(&Packet::Players(p)));
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert_eq!(s.players.len(), 2);
    assert!(
        s.players[1]
            .raw
            .contains(&("deaths".to_owned(), RawValue::Int(1)))
    );
    assert!(
        s.players[1]
            .raw
            .contains(&("money".to_owned(), RawValue::Int(100)))
    );
    assert_eq!(s.raw_field("ship_mode"), Some(&RawValue::Int(1)));
}

#[test]
fn a2s_query_goldsrc_info_and_abort() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let _ = sent(&mut q, t0);
    let g = GoldSrcInfo {
        address: b"127.0.0.1:27015".to_vec(),
        name: b"HL".to_vec(),
        map: b"crossfire".to_vec(),
        folder: b"valve".to_vec(),
        game: b"Half-Life".to_vec(),
        players: 2,
        max_players: 8,
        protocol: 47,
        server_type: b'D',
        environment: b'W',
        visibility: 0,
        mod_info: None,
        vac: 0,
        bots: 0,
    };
    q.handle_datagram(t0, target(), &bytes(&Packet::GoldSrcInfo(Box::new(g))));
    // PLAYER with -1 went out with INFO: nothing new to send until its challenge comes.
    assert!(sent(&mut q, t0).is_empty());
    q.abort(t0 + ms(50));
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert_eq!(s.map.text, "crossfire");
    assert_eq!(s.password, Some(false));
    assert_eq!(
        s.raw_field("address"),
        Some(&RawValue::Text(decode_text(b"127.0.0.1:27015")))
    );
    assert_eq!(
        s.partial.unwrap().reason,
        "aborted before the PLAYER and RULES replies"
    );
    // Aborting before INFO fails.
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let _ = sent(&mut q, t0);
    q.abort(t0);
    assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
}

proptest! {
    #[test]
    fn a2s_query_survives_any_datagrams(datagrams in proptest::collection::vec(
            (prop_oneof![Just(vec![0xFFu8; 4]), Just(vec![0xFE, 0xFF, 0xFF, 0xFF])],
             proptest::collection::vec(any::<u8>(), 0..64)), 0..20)) {
        let t0 = Instant::now();
        let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
        let _ = sent(&mut q, t0);
        for (head, tail) in datagrams {
            let mut d = head;
            d.extend_from_slice(&tail);
            q.handle_datagram(t0, target(), &d);
            let _ = sent(&mut q, t0);
        }
        // Whatever came, the machine ends on its timers.
        let mut steps = 0;
        while let Some(t) = q.poll_timeout() {
            q.handle_timeout(t);
            let _ = sent(&mut q, t);
            steps += 1;
            prop_assert!(steps < 100);
        }
        prop_assert!(q.poll_event().is_some());
    }
}

#[test]
fn a2s_query_reassembles_a_goldsrc_split_info_and_a_bzip2_player_list() {
    use std::io::Write as _;
    let t0 = Instant::now();
    let mut q = ServerQuery::new(
        target(),
        ME,
        Request {
            players: true,
            rules: false,
        },
        config(),
    );
    let _ = sent(&mut q, t0);
    let mut big = info(70);
    big.name = vec![b'n'; 1800];
    let reply = bytes(&Packet::Info(Box::new(big)));
    let parts = encode_parts(Layout::GoldSrc, 3, &reply, 1000);
    assert_eq!(parts.len(), 2);
    q.handle_datagram(t0 + ms(4), target(), &parts[1]);
    q.handle_datagram(t0 + ms(5), target(), &parts[0]);
    assert!(sent(&mut q, t0 + ms(5)).is_empty());
    // An old server answers PLAYER with -1 with its list, no challenge asked.
    let list = bytes(&Packet::Players(players(150)));
    let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
    e.write_all(&list).unwrap();
    let mut body = u32::try_from(list.len()).unwrap().to_le_bytes().to_vec();
    body.extend_from_slice(&crc32fast::hash(&list).to_le_bytes());
    body.extend_from_slice(&e.finish().unwrap());
    let parts = encode_parts(
        Layout::Source { size_field: false },
        crate::a2s::split::COMPRESSED_BIT | 4,
        &body,
        200,
    );
    assert!(parts.len() >= 2);
    for p in parts.iter().rev() {
        q.handle_datagram(t0 + ms(9), target(), p);
    }
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert_eq!(s.name.text.len(), 1800);
    assert_eq!(s.ping, Some(ms(5)));
    assert_eq!(s.players.len(), 150);
    assert_eq!(s.partial, None);
}

#[test]
fn a2s_query_of_a_server_without_info_challenge_takes_two_round_trips() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    assert_eq!(sent(&mut q, t0).len(), 2);
    q.handle_datagram(
        t0 + ms(2),
        target(),
        &bytes(&Packet::Info(Box::new(info(240)))),
    );
    q.handle_datagram(t0 + ms(2), target(), &bytes(&Packet::Challenge(5)));
    assert_eq!(
        sent(&mut q, t0 + ms(2)),
        [
            Packet::PlayerRequest { challenge: 5 },
            Packet::RulesRequest { challenge: 5 }
        ]
    );
    // RULES, then PLAYER: either order completes the query.
    q.handle_datagram(t0 + ms(4), target(), &bytes(&Packet::Rules(rules(3))));
    assert!(q.poll_event().is_none());
    q.handle_datagram(t0 + ms(4), target(), &bytes(&Packet::Players(players(2))));
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert_eq!((s.players.len(), s.rules.len()), (2, 3));
    assert_eq!(s.ping, Some(ms(2)));
    assert_eq!(s.partial, None);
}

#[test]
fn a2s_query_keeps_asking_while_the_server_answers_something() {
    // retries = 2: a request alone is sent three times; here PLAYER is lost three times in a
    // row, but RULES came back meanwhile, so PLAYER gets its fourth send and the list.
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let _ = sent(&mut q, t0);
    q.handle_datagram(t0, target(), &bytes(&Packet::Info(Box::new(info(240)))));
    q.handle_datagram(t0, target(), &bytes(&Packet::Challenge(5)));
    assert_eq!(sent(&mut q, t0).len(), 2);
    let mut player_sends = 1;
    let mut now = t0;
    let event = loop {
        if let Some(ev) = q.poll_event() {
            break ev;
        }
        now = q.poll_timeout().expect("a timer while the query runs");
        q.handle_timeout(now);
        for p in sent(&mut q, now) {
            match p {
                Packet::RulesRequest { challenge: 5 } => {
                    q.handle_datagram(now, target(), &bytes(&Packet::Rules(rules(1))));
                }
                Packet::PlayerRequest { challenge: 5 } => {
                    player_sends += 1;
                    if player_sends == 4 {
                        q.handle_datagram(now, target(), &bytes(&Packet::Players(players(4))));
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(now < t0 + Duration::from_secs(5));
    };
    assert_eq!(player_sends, 4);
    assert_eq!(now, t0 + ms(300));
    let Event::Done(s) = event else {
        panic!("not done");
    };
    assert_eq!((s.players.len(), s.rules.len()), (4, 1));
    assert_eq!(s.partial, None);
}

#[test]
fn a2s_query_resends_at_once_a_request_whose_successor_was_answered() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(target(), ME, Request::ALL, config());
    let _ = sent(&mut q, t0);
    q.handle_datagram(t0 + ms(1), target(), &bytes(&Packet::Challenge(5)));
    assert_eq!(sent(&mut q, t0 + ms(1)).len(), 3);
    let deadline = q.poll_timeout();
    // RULES came back, INFO and PLAYER (asked before it) did not: both are lost, and go
    // again now rather than a timeout later; the round's timer keeps running.
    q.handle_datagram(t0 + ms(3), target(), &bytes(&Packet::Rules(rules(2))));
    assert_eq!(
        sent(&mut q, t0 + ms(3)),
        [
            Packet::InfoRequest { challenge: Some(5) },
            Packet::PlayerRequest { challenge: 5 }
        ]
    );
    assert_eq!(q.poll_timeout(), deadline);
    // Once per round: PLAYER answered, INFO still missing, nothing more goes early.
    q.handle_datagram(t0 + ms(4), target(), &bytes(&Packet::Players(players(1))));
    assert!(sent(&mut q, t0 + ms(4)).is_empty());
    // The timer re-sends what is still missing.
    let at = q.poll_timeout().unwrap();
    q.handle_timeout(at);
    assert_eq!(
        sent(&mut q, at),
        [Packet::InfoRequest { challenge: Some(5) }]
    );
    q.handle_datagram(at, target(), &bytes(&Packet::Info(Box::new(info(240)))));
    let Some(Event::Done(s)) = q.poll_event() else {
        panic!("not done");
    };
    assert_eq!((s.players.len(), s.rules.len()), (1, 2));
    assert_eq!(s.ping, Some(Duration::ZERO));
}
