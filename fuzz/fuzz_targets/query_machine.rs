#![no_main]
//! Drives every query state machine with arbitrary datagrams and clock steps, and checks the
//! contract of `QueryMachine` beyond "no panic":
//!
//! * exactly one event per query, and none after it;
//! * once the event is out, no more transmits and no timer;
//! * `abort` always produces the event if it was not out yet;
//! * time only moves forward and every timer the machine asks for is honoured.
//!
//! Input: byte 0 picks the machine; then a stream of operations:
//! `0x00..=0x9f` a datagram (next byte = length, then the bytes) from the address the machine
//! last sent to (even op) or from a stranger (odd op); `0xa0..=0xef` advance the clock by
//! `(op - 0xa0) * 37 ms`; `0xf0..` abort.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use muster_proto::query::{QueryConfig, QueryMachine};

fn config(retries: u8) -> QueryConfig {
    QueryConfig {
        attempt_timeout: Duration::from_millis(300),
        retries: u32::from(retries % 4),
    }
}

fn drive<M: QueryMachine>(mut m: M, mut ops: &[u8]) {
    let stranger: SocketAddr = "192.0.2.99:4242".parse().unwrap();
    let mut now = Instant::now();
    let mut last_dest = stranger;
    let mut done = false;
    let mut buf = Vec::new();
    let mut pump = |m: &mut M, now: Instant, done: &mut bool, last_dest: &mut SocketAddr| {
        loop {
            buf.clear();
            match m.poll_transmit(now, &mut buf) {
                Some(t) => {
                    assert!(!*done, "transmit after the event");
                    *last_dest = t.destination;
                }
                None => break,
            }
        }
        if let Some(_event) = m.poll_event() {
            assert!(!*done, "second event");
            *done = true;
        }
        if *done {
            assert!(m.poll_timeout().is_none(), "timer after the event");
            assert!(m.poll_event().is_none(), "event after the event");
        }
    };
    pump(&mut m, now, &mut done, &mut last_dest);
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        match op {
            0x00..=0x9f => {
                let (len, rest) = match ops.split_first() {
                    Some((&l, r)) => (usize::from(l), r),
                    None => (0, ops),
                };
                let len = len.min(rest.len());
                let (datagram, rest) = rest.split_at(len);
                ops = rest;
                let from = if op % 2 == 0 { last_dest } else { stranger };
                m.handle_datagram(now, from, datagram);
            }
            0xa0..=0xef => {
                now += Duration::from_millis(u64::from(op - 0xa0) * 37);
                if let Some(t) = m.poll_timeout() {
                    if t <= now {
                        m.handle_timeout(now);
                    }
                }
            }
            _ => m.abort(now),
        }
        pump(&mut m, now, &mut done, &mut last_dest);
        if done {
            return;
        }
    }
    // Run the timers out: a machine must end on its own within a bounded number of steps.
    for _ in 0..64 {
        match m.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                m.handle_timeout(now);
                pump(&mut m, now, &mut done, &mut last_dest);
                if done {
                    return;
                }
            }
            None => break,
        }
    }
    m.abort(now);
    pump(&mut m, now, &mut done, &mut last_dest);
    assert!(done, "abort produced no event");
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, ops)) = data.split_first() else {
        return;
    };
    let target: SocketAddr = "127.0.0.1:7777".parse().unwrap();
    let cfg = config(selector >> 4);
    match selector % 7 {
        0 => drive(muster_proto::gameagent::query::ServerQuery::new(target, cfg), ops),
        1 => drive(muster_proto::gameagent::query::MasterListQuery::new(target, cfg), ops),
        2 => {
            let tokens = muster_proto::teeworlds::query::Tokens::new(0x00ab_cdef, 0x1234_5678, 77)
                .expect("valid tokens");
            drive(muster_proto::teeworlds::query::TeeworldsQuery::new(target, cfg, tokens), ops);
        }
        5 => drive(
            muster_proto::gamespy1::query::StatusQuery::new(
                target,
                muster_proto::gamespy1::query::StatusConfig {
                    retry: cfg,
                    ..Default::default()
                },
            ),
            ops,
        ),
        6 => drive(
            muster_proto::unreal2::query::Unreal2Query::new(
                target,
                muster_proto::unreal2::query::Unreal2Config {
                    query: cfg,
                    ..Default::default()
                },
            ),
            ops,
        ),
        3 => drive(
            muster_proto::teeworlds_master::query::MasterListQuery::new_06(target, cfg, selector & 0x20 != 0),
            ops,
        ),
        _ => drive(
            muster_proto::teeworlds_master::query::MasterListQuery::new_07(
                target,
                cfg,
                muster_proto::teeworlds_master::Token([0xde, 0xad, 0xbe, 0xef]),
            ),
            ops,
        ),
    }
});
