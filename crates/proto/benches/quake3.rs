//! Quake III decode throughput: the `infoResponse` a master reads from every server it
//! verifies (an ioquake3 server's 18 pairs, 333 bytes), whole and its info string alone.
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_proto::quake3::{InfoString, Packet};

fn bench(c: &mut Criterion) {
    let mut info = InfoString::new();
    for (k, v) in [
        ("challenge", "Xk3v9QpLw2RrT8mZ"),
        (
            "version",
            "ioq3 1.36_GIT_7e3b5cc-2024-01-17 linux-x86_64 Jan 17 2024",
        ),
        ("protocol", "71"),
        ("hostname", "^1Frag^7Fest ^3| ^7Instagib CTF ^1EU"),
        ("mapname", "oasago2"),
        ("clients", "9"),
        ("g_humanplayers", "6"),
        ("sv_maxclients", "16"),
        ("gametype", "4"),
        ("pure", "1"),
        ("g_needpass", "0"),
        ("gamename", "baseoa"),
        ("game", "baseoa"),
        ("minPing", "0"),
        ("maxPing", "0"),
        ("voip", "opus"),
        ("g_instagib", "1"),
        ("sv_allowAnonymous", "0"),
    ] {
        info.push(k, v).expect("a valid pair");
    }
    let mut datagram = Vec::new();
    Packet::InfoResponse { info: info.clone() }.encode(&mut datagram);
    let mut raw = Vec::new();
    info.encode(&mut raw);
    assert_eq!(raw.len(), 333);

    c.bench_function("quake3/decode_info_response_18_pairs", |b| {
        b.iter(|| Packet::decode(black_box(&datagram)))
    });
    c.bench_function("quake3/decode_info_string_18_pairs", |b| {
        b.iter(|| InfoString::decode(black_box(&raw)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
