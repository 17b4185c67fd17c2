//! Unreal 2 decode speed: a 32-player reply (split as a stock server splits it), the §12.1
//! info reply, the Killing Floor info capture, and the ServerInfo mapping of a full answer.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_proto::unreal2::packet::{
    InfoReply, PlayerRecord, PlayersReply, Reply, RulePair, Style, TEAM_BLUE_BIT, TEAM_RED_BIT,
    encode_players,
};
use muster_proto::unreal2::{U2String, server_info};

fn players(n: usize) -> Vec<PlayerRecord> {
    (0..n)
        .map(|i| PlayerRecord {
            num: i32::try_from(i).unwrap_or(0),
            name: U2String::narrow(format!("\x1b\u{1}\u{1}\u{1}Player {i:02}").into_bytes())
                .expect("short"),
            ping: 48,
            score: 20 - i32::try_from(i).unwrap_or(0),
            stats_id: if i % 2 == 0 {
                TEAM_RED_BIT
            } else {
                TEAM_BLUE_BIT
            },
            xmp: None,
        })
        .collect()
}

fn info() -> InfoReply {
    InfoReply::stock(
        Style::Ut2004,
        7777,
        U2String::from_text("My Srv").expect("short"),
        U2String::from_text("DM-Rankin").expect("short"),
        U2String::from_text("xDeathMatch").expect("short"),
        32,
        32,
    )
}

fn bench(c: &mut Criterion) {
    let mut datagrams = Vec::new();
    encode_players(0x80, &players(32), &mut datagrams);
    let mut info_bytes = Vec::new();
    info().encode(&mut info_bytes);
    let kf_info = include_bytes!("../tests/fixtures/unreal2/kf-info.bin");

    c.bench_function("unreal2/decode_players_32", |b| {
        b.iter(|| {
            for d in &datagrams {
                black_box(PlayersReply::decode(black_box(d)).expect("valid"));
            }
        });
    });
    c.bench_function("unreal2/decode_info_ut2004", |b| {
        b.iter(|| black_box(Reply::decode(black_box(&info_bytes)).expect("valid")));
    });
    c.bench_function("unreal2/decode_info_killing_floor", |b| {
        b.iter(|| black_box(InfoReply::decode(black_box(kf_info)).expect("valid")));
    });

    let rules: Vec<RulePair> = (0..20)
        .map(|i| RulePair::from_text("Mutator", &format!("Mut{i}")).expect("short"))
        .collect();
    let decoded_info = info();
    let decoded_players = players(32);
    c.bench_function("unreal2/server_info_32_players_20_rules", |b| {
        b.iter(|| {
            black_box(server_info(
                Some(black_box(&decoded_info)),
                Some(&rules),
                &decoded_players,
            ))
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
