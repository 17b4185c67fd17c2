#![no_main]
//! The Quake III / DarkPlaces machines fed arbitrary datagrams and clock steps: the status query
//! and the master list query (the `QueryMachine` contract: one event, then no transmit and no
//! timer; `abort` always ends them; bounded by their named limits), the responder (a reply is
//! always a datagram that decodes to the answer asked for, within `MAX_STATUS_REPLY`) and the
//! registrar (never takes a datagram from the responder).
//!
//! Input: byte 0 picks the machine; then operations: `0x00..=0x9f` a datagram (next byte =
//! length) from the peer (even op) or a stranger (odd op); `0xa0..=0xef` advance the clock by
//! `(op - 0xa0) * 53 ms`; `0xf0..` abort (queries) or shut down (registrar).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use muster_proto::quake3::packet::Packet;
use muster_proto::quake3::query::{ListQuery, ListRequest, Request, ServerQuery};
use muster_proto::quake3::register::Quake3Registrar;
use muster_proto::quake3::respond::{MAX_STATUS_REPLY, Quake3Responder, Style};
use muster_proto::quake3::{Word, generate_challenge};
use muster_proto::query::{QueryConfig, QueryMachine};
use muster_proto::respond::{PlayerState, Registrar, Responder, ServerState};

enum Op<'a> {
    Datagram(bool, &'a [u8]),
    Advance(Duration),
    Stop,
}

fn ops(mut data: &[u8]) -> Vec<Op<'_>> {
    let mut out = Vec::new();
    while let Some((&op, rest)) = data.split_first() {
        data = rest;
        out.push(match op {
            0x00..=0x9f => {
                let (len, rest) = match data.split_first() {
                    Some((&l, r)) => (usize::from(l), r),
                    None => (0, data),
                };
                let (d, rest) = rest.split_at(len.min(rest.len()));
                data = rest;
                Op::Datagram(op % 2 == 0, d)
            }
            0xa0..=0xef => Op::Advance(Duration::from_millis(u64::from(op - 0xa0) * 53)),
            _ => Op::Stop,
        });
    }
    out
}

fn drive<M: QueryMachine>(mut m: M, peer: SocketAddr, ops: &[Op<'_>]) {
    let stranger: SocketAddr = "192.0.2.99:4242".parse().unwrap();
    let mut now = Instant::now();
    let mut done = false;
    let mut buf = Vec::new();
    let mut pump = |m: &mut M, now: Instant, done: &mut bool| {
        buf.clear();
        while m.poll_transmit(now, &mut buf).is_some() {
            assert!(!*done, "transmit after the event");
            assert!(Packet::decode(&buf).is_ok(), "a request that does not decode");
            buf.clear();
        }
        if m.poll_event().is_some() {
            assert!(!*done, "second event");
            *done = true;
        }
        if *done {
            assert!(m.poll_timeout().is_none(), "timer after the event");
        }
    };
    pump(&mut m, now, &mut done);
    for op in ops {
        match op {
            Op::Datagram(from_peer, d) => {
                m.handle_datagram(now, if *from_peer { peer } else { stranger }, d)
            }
            Op::Advance(by) => {
                now += *by;
                if m.poll_timeout().is_some_and(|t| t <= now) {
                    m.handle_timeout(now);
                }
            }
            Op::Stop => m.abort(now),
        }
        pump(&mut m, now, &mut done);
        if done {
            return;
        }
    }
    for _ in 0..64 {
        let Some(t) = m.poll_timeout() else { break };
        now = now.max(t);
        m.handle_timeout(now);
        pump(&mut m, now, &mut done);
        if done {
            return;
        }
    }
    m.abort(now);
    pump(&mut m, now, &mut done);
    assert!(done, "abort produced no event");
}

fn state(seed: u8) -> ServerState {
    ServerState {
        name: "^1F\u{fc}zz \\ \"srv\"".to_owned(),
        map: "q3dm17".to_owned(),
        max_players: u32::from(seed % 20),
        players: (0..seed % 40)
            .map(|i| PlayerState {
                name: format!("p\"{i}\n\u{e9}"),
                score: i64::from(i) - 5,
                ping_ms: u32::from(i) * 7,
                bot: i % 3 == 0,
                ..PlayerState::default()
            })
            .collect(),
        ..ServerState::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let ops = ops(rest);
    let peer: SocketAddr = "127.0.0.1:27960".parse().unwrap();
    let cfg = QueryConfig {
        attempt_timeout: Duration::from_millis(300),
        retries: u32::from((selector >> 4) % 4),
    };
    let style = if selector & 0x08 == 0 {
        Style::Ioquake3
    } else {
        Style::DarkPlaces
    };
    match selector % 4 {
        0 => {
            let challenge = generate_challenge([selector; 13]);
            drive(ServerQuery::new(peer, Request::Status, challenge, cfg), peer, &ops);
        }
        1 => {
            let game = (selector & 0x40 != 0).then(|| Word::new(&b"Quake3Arena"[..]).unwrap());
            drive(ListQuery::new(peer, ListRequest::everything(game, 68), cfg), peer, &ops);
        }
        2 => {
            let mut r = Quake3Responder::new(style);
            let s = state(selector);
            let mut out = Vec::new();
            for op in &ops {
                if let Op::Datagram(_, d) = op {
                    out.clear();
                    let answered = r.handle_datagram(Instant::now(), peer, d, &s, &mut out);
                    assert_eq!(answered, !out.is_empty());
                    for reply in &out {
                        assert!(reply.bytes.len() <= MAX_STATUS_REPLY);
                        let want_status = matches!(Packet::decode(d), Ok(Packet::GetStatus { .. }));
                        match Packet::decode(&reply.bytes) {
                            Ok(Packet::StatusResponse { .. }) => assert!(want_status),
                            Ok(Packet::InfoResponse { .. }) => assert!(!want_status),
                            other => panic!("reply does not decode: {other:?}"),
                        }
                    }
                }
            }
        }
        _ => {
            let s = state(selector);
            let mut r = Quake3Registrar::new(peer, style, &s);
            let mut now = Instant::now();
            let mut buf = Vec::new();
            for op in &ops {
                match op {
                    Op::Datagram(from_peer, d) => {
                        let from = if *from_peer { peer } else { "192.0.2.1:1".parse().unwrap() };
                        assert!(!r.handle_datagram(now, from, d, &s), "the responder's datagram");
                    }
                    Op::Advance(by) => {
                        now += *by;
                        if r.poll_timeout().is_some_and(|t| t <= now) {
                            r.handle_timeout(now, &s);
                        }
                        r.handle_state_change(now, &state(selector.wrapping_add(1)));
                    }
                    Op::Stop => r.shutdown(now),
                }
                buf.clear();
                while r.poll_transmit(now, &mut buf).is_some() {
                    assert!(matches!(Packet::decode(&buf), Ok(Packet::Heartbeat { .. })));
                    buf.clear();
                }
                while r.poll_event().is_some() {}
            }
        }
    }
});
