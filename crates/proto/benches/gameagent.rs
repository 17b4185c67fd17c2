//! GameAgent decode throughput: a full 170-record list datagram, and a status reply plus a
//! 16-player players reply.
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};

use criterion::{Criterion, criterion_group, criterion_main};
use muster_proto::gameagent::packet::{
    ListReply, PlayerRecord, PlayersDatagram, PlayersReply, StatusFields, StatusReply, encode_list,
};

fn bench(c: &mut Criterion) {
    let servers: Vec<_> = (0..170u16)
        .map(|i| SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 25600 + i))
        .collect();
    let list = encode_list(&servers).remove(0);
    assert_eq!(list.len(), 1021);
    c.bench_function("gameagent/decode_list_170", |b| {
        b.iter(|| ListReply::decode(black_box(&list)))
    });

    let mut status = Vec::new();
    StatusReply::stock(&StatusFields {
        players: 16,
        max_players: 16,
        level: b"Yodeller".to_vec(),
        gametype: b"Fragmatch".to_vec(),
        version: b"1.10".to_vec(),
        gamename: b"serioussamse".to_vec(),
        sessionname: b"Awesome Server".to_vec(),
    })
    .encode(&mut status);
    let players = PlayersReply {
        count: 16,
        records: (0..16u8)
            .map(|i| {
                let name = format!("^c00ff00Player {i:02} the Great");
                PlayerRecord::stock(u32::from(i), name.as_bytes(), i32::from(i) * 7, 120)
            })
            .collect(),
    }
    .encode_datagrams();
    assert_eq!(players.len(), 1);
    c.bench_function("gameagent/decode_status_and_16_players", |b| {
        b.iter(|| {
            let s = StatusReply::decode(black_box(&status));
            let p = PlayersDatagram::decode(black_box(&players[0]));
            (s, p)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
