//! GameSpy v1: a 2-datagram `\status\` reply (the real UT2003 demo reply with 11 players,
//! including `Kee\/n`) reassembled out of order and mapped to `ServerInfo`; plus the tokenizer
//! alone and the style B encoder.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_proto::gamespy1::map::to_server_info;
use muster_proto::gamespy1::packet::{Pair, RequestKind};
use muster_proto::gamespy1::reassembly::{Outcome, Push, Reassembler};
use muster_proto::gamespy1::reply::{PlayerRecord, ReplyContent, ReplyStyle, encode_reply};
use muster_proto::gamespy1::tokenizer::tokenize;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/gamespy1/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn bench(c: &mut Criterion) {
    let d1 = fixture("ut2003demo-1077-status-1.bin");
    let d2 = fixture("ut2003demo-1077-status-2.bin");

    c.bench_function("gamespy1/reassemble_and_map_2_datagrams", |b| {
        b.iter(|| {
            let mut r = Reassembler::new(&RequestKind::Status);
            let _ = r.push(black_box(&d2));
            let done = r.push(black_box(&d1));
            assert_eq!(done, Push::Finished(Outcome::Complete));
            to_server_info(&r.pairs())
        });
    });

    c.bench_function("gamespy1/tokenize_769_bytes", |b| {
        b.iter(|| tokenize(black_box(&d1)).map(|p| p.len()));
    });

    let pair = |k: &str, v: &str| Pair::new(k, v).expect("clean key");
    let content = ReplyContent {
        basic: vec![pair("gamename", "ut"), pair("gamever", "451")],
        info: vec![
            pair("hostname", "Bench Server"),
            pair("mapname", "DM-Deck16"),
        ],
        rules: vec![pair("timelimit", "20"), pair("fraglimit", "30")],
        status_head: None,
        players: (0..16)
            .map(|i| PlayerRecord {
                name: format!("Player{i}").into_bytes(),
                frags: i,
                ping: 50,
                team: Some(b"0".to_vec()),
                extra: Vec::new(),
            })
            .collect(),
    };
    c.bench_function("gamespy1/encode_status_style_b_16_players", |b| {
        b.iter(|| {
            let sections = content
                .sections(&RequestKind::Status, ReplyStyle::Packed)
                .unwrap_or_default();
            encode_reply(ReplyStyle::Packed, black_box(41), &sections)
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
