//! `SqliteStore::write` as the persister calls it: 10,000 Quake III-like records (name, map,
//! game type, three rules, no players, one direct source) in batches of 500, each batch one
//! transaction, into a fresh file in WAL mode, each batch in key order and scattered (as the
//! persister's batches come, out of a hash set). Prints the time per record beside criterion's
//! per-iteration figure. Run: `cargo bench -p muster-store --bench write`.

#![allow(clippy::print_stdout)] // The figure per record is the point of the bench.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use muster_core::registry::{
    Face, GameAddr, PollFields, PollInfo, Record, Registration, Rules, ServerKey, Timestamp,
};
use muster_core::store::Store as _;
use muster_core::testdir::TempDir;
use muster_proto::Protocol;
use muster_proto::limit::SourceKey;
use muster_store::SqliteStore;

/// Records per run.
const RECORDS: u32 = 10_000;
/// Records per transaction (the persister's batches during a registration burst).
const BATCH: usize = 500;

/// The `i`th server: 100 per `127.x.y.z` address, as the Quake III bench registers them.
fn record(i: u32) -> Arc<Record> {
    let ip = IpAddr::V4(Ipv4Addr::from(0x7f01_0000 + i / 100));
    let port = 20_000 + u16::try_from(i % 100).unwrap_or(0);
    let addr = SocketAddr::new(ip, port);
    let t = Timestamp::from_secs(1_700_000_000);
    let mut r = Record::new(
        u64::from(i),
        Registration {
            key: ServerKey::new("benchgame", GameAddr::Ip(addr)),
            face: Face::Quake3,
            game_port: Some(port),
            query_addr: Some(addr),
            query_protocol: Some(Protocol::Quake3),
            source: SourceKey::of(ip),
        },
        t,
    );
    r.info = Some(Arc::new(PollInfo::from(PollFields {
        name: format!("Bench server {i}").into(),
        map: "q3dm17".into(),
        game_type: "0".into(),
        num_players: 0,
        max_players: 16,
        rules: Rules::new([
            ("protocol", "68"),
            ("gametype", "0"),
            ("gamename", "BenchGame"),
        ]),
        ..PollFields::default()
    })));
    Arc::new(r)
}

/// Writes `records` into a fresh store in batches; returns the time the writes took.
fn write_all(records: &[Arc<Record>]) -> Duration {
    let dir = TempDir::new("store-bench-write");
    let mut store = SqliteStore::open(&dir.0).expect("open");
    let start = Instant::now();
    for batch in records.chunks(BATCH) {
        store.write(black_box(batch), &[]).expect("write");
    }
    let took = start.elapsed();
    drop(store);
    took
}

/// `records` with each batch in a scattered order, as the persister gets them: the keys
/// changed since the last flush come out of a hash set (a fixed permutation, 263 being prime
/// to the batch's length).
fn scattered(records: &[Arc<Record>]) -> Vec<Arc<Record>> {
    records
        .chunks(BATCH)
        .flat_map(|batch| {
            let n = batch.len();
            (0..n).filter_map(move |j| batch.get(j * 263 % n).cloned())
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let records: Vec<Arc<Record>> = (0..RECORDS).map(record).collect();
    // Timed passes first, for the figures per record.
    for (order, records) in [
        ("in key order", records.clone()),
        ("scattered", scattered(&records)),
    ] {
        let mut best = Duration::MAX;
        for _ in 0..5 {
            best = best.min(write_all(&records));
        }
        println!(
            "store write: {RECORDS} Quake III-like records in batches of {BATCH}, {order}: \
             best of 5 {:.2} µs per record",
            best.as_secs_f64() * 1e6 / f64::from(RECORDS)
        );
    }
    let mut g = c.benchmark_group("sqlite_write");
    g.sample_size(10);
    g.bench_function("10k_quake3_records_batches_of_500", |b| {
        b.iter_batched(
            || TempDir::new("store-bench-write"),
            |dir| {
                let mut store = SqliteStore::open(&dir.0).expect("open");
                for batch in records.chunks(BATCH) {
                    store.write(black_box(batch), &[]).expect("write");
                }
                drop(store);
                dir
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
