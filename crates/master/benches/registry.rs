//! Registry hot paths with 10,000 servers: heartbeat ingestion (bare and through the shared
//! handle), the GameAgent view, and one page of the HTTP API list with a text search.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use criterion::{Criterion, criterion_group, criterion_main};
use muster_master::MasterHandle;
use muster_master::registry::{
    Face, GameAddr, ListQuery, PollInfo, PollPlayer, Registration, Registry, RegistryConfig,
    ServerKey, SortKey, Timestamp, View,
};
use muster_master::store::{Storage, StoreError};
use muster_proto::Protocol;
use muster_proto::limit::SourceKey;

const N: u32 = 10_000;
const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

fn reg(i: u32) -> Registration {
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i / 32));
    let port = 25600 + u16::try_from(i % 32).unwrap() * 2;
    let addr = SocketAddr::new(ip, port);
    Registration {
        key: ServerKey::new("serioussamse", GameAddr::Ip(addr)),
        face: Face::GameAgent,
        game_port: Some(port),
        query_addr: Some(SocketAddr::new(ip, port + 1)),
        query_protocol: Some(Protocol::GameAgent),
        source: SourceKey::of(ip),
    }
}

fn filled() -> Registry {
    let mut r = Registry::new(RegistryConfig::default());
    for i in 0..N {
        let x = reg(i);
        let key = x.key.clone();
        r.add(x, T0);
        r.verify(&key, T0);
        let info = PollInfo {
            name: format!("Server {i}"),
            map: "Karnak".into(),
            game_type: "Cooperative".into(),
            num_players: i % 9,
            max_players: 8,
            password: Some(i % 7 == 0),
            players: (0..i % 9)
                .map(|p| PollPlayer {
                    name: format!("player{p}"),
                    score: Some(i64::from(p)),
                })
                .collect(),
            rules: vec![],
            game_port: None,
        };
        r.update_poll(&key, Some(info), T0);
    }
    r
}

/// Storage that keeps nothing, to measure the handle without SQLite.
#[derive(Debug)]
struct Null;

impl Storage for Null {
    fn load(&mut self) -> Result<Vec<muster_master::registry::Record>, StoreError> {
        Ok(Vec::new())
    }
    fn put(&mut self, _: &muster_master::registry::Record) -> Result<(), StoreError> {
        Ok(())
    }
    fn put_batch(&mut self, _: &[&muster_master::registry::Record]) -> Result<(), StoreError> {
        Ok(())
    }
    fn delete(&mut self, _: &ServerKey) -> Result<(), StoreError> {
        Ok(())
    }
    fn delete_batch(&mut self, _: &[ServerKey]) -> Result<(), StoreError> {
        Ok(())
    }
}

fn bench(c: &mut Criterion) {
    let mut r = filled();
    let regs: Vec<Registration> = (0..N).map(reg).collect();
    let mut i = 0usize;
    c.bench_function("registry_heartbeat_10k", |b| {
        b.iter(|| {
            i = (i + 1) % regs.len();
            black_box(r.heartbeat(regs[i].clone(), T0))
        });
    });

    let (h, _) = MasterHandle::open(RegistryConfig::default(), Box::new(Null), T0).unwrap();
    for x in &regs {
        h.add(x.clone(), T0).unwrap();
        h.verify(&x.key, T0).unwrap();
    }
    c.bench_function("handle_heartbeat_10k", |b| {
        b.iter(|| {
            i = (i + 1) % regs.len();
            black_box(h.heartbeat(regs[i].clone(), T0).unwrap())
        });
    });

    c.bench_function("view_gameagent_10k", |b| {
        b.iter(|| black_box(r.listed(View::GameAgent).len()));
    });
    let q = ListQuery {
        text: Some("player3".into()),
        sort: SortKey::Players,
        descending: true,
        ..ListQuery::default()
    };
    c.bench_function("api_page_search_10k", |b| {
        b.iter(|| black_box(r.list(View::Http, &q).total));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
