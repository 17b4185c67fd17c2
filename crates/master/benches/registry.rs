//! Registry and view hot paths with 10,000 and 100,000 servers: heartbeat ingestion (bare and
//! through the shared handle), a registration, publishing a snapshot, the GameAgent list
//! encoding, and API pages (default, sorted, searched) over a snapshot.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use muster_master::MasterHandle;
use muster_master::faces::gameagent::{Scope, list_datagrams};
use muster_master::registry::{
    Face, GameAddr, PollFields, PollInfo, PollPlayer, Registration, Registry, RegistryConfig,
    ServerKey, Timestamp,
};
use muster_master::store::NullStore;
use muster_master::views::list::{ListQuery, SortKey, list};
use muster_proto::Protocol;
use muster_proto::limit::SourceKey;

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

fn info(i: u32) -> PollInfo {
    PollInfo::from(PollFields {
        name: format!("Server {i}").into(),
        map: "Karnak".into(),
        game_type: "Cooperative".into(),
        num_players: i % 9,
        max_players: 8,
        password: Some(i % 7 == 0),
        players: (0..i % 9)
            .map(|p| {
                PollPlayer::new(format!("player{p}"))
                    .with_score(Some(PollPlayer::score_of(i64::from(p))))
            })
            .collect(),
        rules: muster_master::registry::Rules::default(),
        game_port: None,
    })
}

fn filled(n: u32) -> MasterHandle {
    let (h, _) = MasterHandle::open(RegistryConfig::default(), Box::new(NullStore), T0).unwrap();
    h.write(|r| {
        for i in 0..n {
            let x = reg(i);
            let key = x.key.clone();
            r.register(x, T0);
            r.update_poll(&key, Some(info(i)), T0);
        }
    });
    h.publish();
    h.flush().unwrap();
    h
}

fn bench_n(c: &mut Criterion, n: u32) {
    let regs: Vec<Registration> = (0..n).map(reg).collect();
    let mut r = Registry::new(RegistryConfig::default());
    for x in &regs {
        r.register(x.clone(), T0);
    }
    r.take_changes();
    r.take_dirty();
    let mut i = 0usize;
    c.bench_function(&format!("registry_heartbeat_{n}"), |b| {
        b.iter(|| {
            i = (i + 1) % regs.len();
            black_box(r.heartbeat(&regs[i].key, T0));
            if i == 0 {
                r.take_changes();
            }
        });
    });

    let h = filled(n);
    c.bench_function(&format!("handle_heartbeat_{n}"), |b| {
        b.iter(|| {
            i = (i + 1) % regs.len();
            black_box(h.heartbeat(&regs[i].key, T0))
        });
    });
    h.publish();
    c.bench_function(&format!("handle_register_new_{n}"), |b| {
        b.iter_batched(
            || {
                i += 1;
                let mut x = reg(n + u32::try_from(i).unwrap());
                x.source = SourceKey::of(IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i as u32)));
                x
            },
            |x| black_box(h.register(x, T0)),
            BatchSize::SmallInput,
        );
    });
    c.bench_function(&format!("publish_after_one_change_{n}"), |b| {
        b.iter(|| {
            i = (i + 1) % regs.len();
            h.update_poll(&regs[i].key, Some(info(u32::try_from(i).unwrap() + 1)), T0);
            black_box(h.publish().len())
        });
    });
    let view = h.publish();
    c.bench_function(&format!("gameagent_e_encode_{n}"), |b| {
        b.iter(|| {
            // A key never asked before: this is the encoding, not a cache hit.
            black_box(list_datagrams(&view, &Scope::Products(vec![format!("x{i}")])).len())
        });
    });
    let page = ListQuery::default();
    c.bench_function(&format!("api_default_page_{n}"), |b| {
        b.iter(|| black_box(list(&view, &page).records.len()));
    });
    let sorted = ListQuery {
        sort: SortKey::Name,
        page: 3,
        ..ListQuery::default()
    };
    c.bench_function(&format!("api_sorted_page_cached_{n}"), |b| {
        b.iter(|| black_box(list(&view, &sorted).records.len()));
    });
    let q = ListQuery {
        text: Some("player3".into()),
        sort: SortKey::Players,
        descending: true,
        ..ListQuery::default()
    };
    c.bench_function(&format!("api_search_page_cached_{n}"), |b| {
        b.iter(|| black_box(list(&view, &q).total));
    });
}

fn bench(c: &mut Criterion) {
    bench_n(c, 10_000);
    bench_n(c, 100_000);
}

criterion_group!(benches, bench);
criterion_main!(benches);
