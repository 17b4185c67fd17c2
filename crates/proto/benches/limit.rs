//! The per-source limiter under a flood of forged sources: every datagram from a new address
//! while the limiter already tracks its most sources (each one evicts another), against a
//! datagram from a source it knows; and the prune a UDP face's runner does after each batch of
//! replies, over a full limiter with nothing to drop.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use muster_proto::limit::{BucketConfig, SourceLimiter};

/// Sources tracked: the daemon's default `limits.max_tracked_sources` (100,000) and a tenth of it.
const TRACKED: [u32; 2] = [10_000, 100_000];

fn addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | i))
}

/// A limiter tracking `n` sources, all touched within the last second (none refilled).
fn full(n: u32, t0: Instant) -> SourceLimiter {
    let cfg = BucketConfig::one_every(5, Duration::from_secs(60));
    let mut l = SourceLimiter::new(cfg, n as usize);
    for i in 0..n {
        l.allow(addr(i), t0, 1.0);
    }
    l
}

fn bench(c: &mut Criterion) {
    let t0 = Instant::now();
    let mut g = c.benchmark_group("limit");
    for n in TRACKED {
        g.bench_with_input(BenchmarkId::new("new_source_when_full", n), &n, |b, &n| {
            let mut l = full(n, t0);
            let mut i = n;
            b.iter(|| {
                i = i.wrapping_add(1);
                black_box(l.allow(addr(i), t0 + Duration::from_millis(1), 1.0))
            });
        });
        g.bench_with_input(BenchmarkId::new("known_source", n), &n, |b, &n| {
            let mut l = full(n, t0);
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % n;
                black_box(l.allow(addr(i), t0 + Duration::from_millis(1), 1.0))
            });
        });
        g.bench_with_input(BenchmarkId::new("prune_nothing_due", n), &n, |b, &n| {
            let mut l = full(n, t0);
            b.iter(|| {
                l.prune(t0 + Duration::from_millis(1));
                black_box(l.len())
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
