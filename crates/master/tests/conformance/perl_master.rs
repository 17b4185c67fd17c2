//! Conformance with 333networks' Masterserver-Perl 2.4.3 (the real program, run by
//! `muster_testkit::PerlMaster`), both directions of the mesh (`gamespy-master.md` §7):
//!
//! * it verifies Muster as a 333networks master (`\secure\` and `\status\` back to back),
//!   syncs Muster's list with `\sync\all\final\`, verifies the servers it got and lists them;
//!   its uplink heartbeat, from a random port, is verified by Muster at the advertised port;
//! * Muster pulls from it with `\sync\` and with `\list\` per game, and lists a server only
//!   after querying it itself.
//!
//! Game servers are fake UT servers (the proto responder) on `127.1.x.y`: the Perl master
//! refuses `127.0.x.x` addresses.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_master::config::{Config, Listen, ListenConfig};
use muster_master::registry::{Face, GameAddr, Registration, ServerKey, Timestamp};
use muster_master::upstream::Upstream;
use muster_master::upstream::settings::{GameSpyMode, UpstreamConfig, UpstreamKind};
use muster_master::{Listeners, Master, MasterHandle};
use muster_proto::Protocol;
use muster_proto::gamespy_master::{Key, ListClientConfig, ListForm};
use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::limit::SourceKey;
use muster_proto::respond::{Reply, Responder, ServerState};
use muster_testkit::perl_master::{PerlMaster, PerlMasterConfig, SyncMaster};
use tokio::net::UdpSocket;
use tokio::sync::oneshot;

/// How long the Perl master may take for what it does on its (shortened) timers.
const PEER_LIMIT: Duration = Duration::from_secs(60);

/// A fake UT server on `ip`: its query socket answers `\secure\` (key `Z5Nfb0`) and
/// `\status\` like a stock UT99 server.
async fn ut_server(ip: Ipv4Addr, name: &str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let sock = UdpSocket::bind((ip, 0)).await.unwrap();
    let addr = sock.local_addr().unwrap();
    let state = ServerState {
        name: name.to_owned(),
        map: "CTF-Face".to_owned(),
        game_type: "CTFGame".to_owned(),
        game_port: addr.port() - 1,
        max_players: 12,
        ..ServerState::default()
    };
    let task = tokio::spawn(async move {
        let mut r = GameSpyResponder::with_profile(Profile::Ut99);
        let mut buf = vec![0u8; 2048];
        let mut out: Vec<Reply> = Vec::new();
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            out.clear();
            let _ = r.handle_datagram(Instant::now(), from, &buf[..n], &state, &mut out);
            for reply in &out {
                let _ = sock.send_to(&reply.bytes, reply.to).await;
            }
        }
    });
    (addr, task)
}

/// A whole Muster on `ip` (GameSpy UDP and TCP, HTTP), answering `\sync\` from loopback.
struct Muster {
    handle: MasterHandle,
    udp: SocketAddr,
    tcp: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: Dir,
}

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Muster {
    fn start(ip: Ipv4Addr, tag: &str) -> Self {
        let dir = Dir(std::env::temp_dir().join(format!(
            "muster-perl-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        )));
        let on = Listen(vec![SocketAddr::from((ip, 0))]);
        let mut c = Config {
            data_dir: dir.0.clone(),
            listen: ListenConfig::off(),
            ..Config::default()
        };
        c.listen.gamespy_udp = on.clone();
        c.listen.gamespy_tcp = on.clone();
        c.listen.http = on;
        c.poller.enabled = false;
        c.federation.sync_peers = vec!["127.0.0.0/8".to_owned()];
        let listeners = Listeners::bind(&c).unwrap();
        let bound = listeners.bound().unwrap();
        let addr = |face: &str| bound.iter().find(|b| b.face == face).unwrap().addr;
        let (udp, tcp) = (addr("gamespy-udp"), addr("gamespy-tcp"));
        let master = Master::open(c, Timestamp::now()).unwrap();
        let handle = master.handle();
        let (stop, rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            master
                .run(listeners, async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Self {
            handle,
            udp,
            tcp,
            stop: Some(stop),
            task,
            _dir: dir,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), &mut self.task).await;
    }
}

/// Waits until `cond` holds (checked every 200 ms, at most [`PEER_LIMIT`]).
async fn until(mut cond: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + PEER_LIMIT;
    while Instant::now() < end {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cond().await
}

/// What the master at `list` lists for `ut`, asked as UBrowser would.
async fn ut_list(list: SocketAddr) -> Vec<SocketAddr> {
    let mut cfg = ListClientConfig::new(Key::new("ut").unwrap(), ListForm::Text);
    cfg.timeout = Duration::from_secs(5);
    muster_query::lists::gamespy_list(list, cfg)
        .await
        .map(|l| l.servers.into_iter().map(|s| s.address).collect())
        .unwrap_or_default()
}

async fn start_perl(pm: PerlMaster, config: PerlMasterConfig) -> muster_testkit::PerlMasterGuard {
    tokio::task::spawn_blocking(move || pm.start(&config))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_perl_master_syncs_from_muster_and_each_verifies_the_other() {
    let Some(pm) = PerlMaster::require() else {
        return;
    };
    let ip = Ipv4Addr::new(127, 1, 1, 1);
    let muster = Muster::start(ip, "a");
    let (server, _task) = ut_server(Ipv4Addr::new(127, 1, 1, 2), "Muster's own").await;
    let key = ServerKey::new("ut", GameAddr::Ip(server));
    muster.handle.register(
        Registration {
            key: key.clone(),
            face: Face::GameSpy,
            game_port: None,
            query_addr: Some(server),
            query_protocol: Some(Protocol::GameSpy1),
            source: SourceKey::of(server.ip()),
        },
        Timestamp::now(),
    );
    muster.handle.publish();
    let mut config = PerlMasterConfig::on(Ipv4Addr::LOCALHOST);
    config.sync_masters.push(SyncMaster {
        ip,
        port: muster.tcp.port(),
        beacon: muster.udp.port(),
    });
    let perl = start_perl(pm, config).await;

    // It verified Muster (its checker's `\secure\` + `\status\`), synced, verified the server
    // it got and lists it.
    let listed = until(async || ut_list(perl.list_addr()).await.contains(&server)).await;
    assert!(
        listed,
        "the Perl master lists Muster's server\n--- its servers\n{}\n--- its log\n{}",
        perl.servers(),
        perl.log()
    );
    let mesh_row = format!("333networks|{ip}|{}", muster.udp.port());
    let meshed = until(async || perl.servers().contains(&mesh_row)).await;
    assert!(
        meshed,
        "Muster is one of its 333networks masters:\n{}\n--- its log\n{}",
        perl.servers(),
        perl.log()
    );
    let named = until(async || perl.log().contains("(333nwm)")).await;
    assert!(named, "{}", perl.log());
    let metrics = muster_http::metrics::render(muster.handle.metrics(), &Default::default());
    assert!(
        metrics.contains("muster_list_requests_total{face=\"gamespy-sync\"}"),
        "{metrics}"
    );

    // Its uplink heartbeat comes from a random port; Muster's challenge goes to the beacon
    // port it advertises, where it answers: Muster lists it as a 333networks master.
    let beacon = perl.beacon_addr();
    let mesh = ServerKey::new("333networks", GameAddr::Ip(beacon));
    let h = muster.handle.clone();
    let verified =
        until(async || h.with_registry(|r| r.get(&mesh).is_some_and(|r| r.is_listed()))).await;
    assert!(
        verified,
        "Muster verified the Perl master's uplink\n{}",
        perl.log()
    );
    muster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn muster_learns_from_the_perl_master_by_sync_and_by_list() {
    let Some(pm) = PerlMaster::require() else {
        return;
    };
    let perl = start_perl(pm, PerlMasterConfig::on(Ipv4Addr::LOCALHOST)).await;
    // A UT server heartbeats the Perl master from its uplink socket; the master verifies it.
    let sip = Ipv4Addr::new(127, 1, 2, 2);
    let (server, _task) = ut_server(sip, "Perl's own").await;
    let uplink = UdpSocket::bind((sip, 0)).await.unwrap();
    let beat = format!("\\heartbeat\\{}\\gamename\\ut", server.port());
    let listed = until(async || {
        let _ = uplink.send_to(beat.as_bytes(), perl.beacon_addr()).await;
        ut_list(perl.list_addr()).await.contains(&server)
    })
    .await;
    assert!(listed, "the Perl master lists its server\n{}", perl.log());

    for mode in [GameSpyMode::Auto, GameSpyMode::List] {
        let learner = Muster::start(Ipv4Addr::new(127, 1, 2, 1), "b");
        let mut c = UpstreamConfig::new(UpstreamKind::Gamespy, &perl.list_addr().to_string());
        c.name = Some("perl".into());
        c.mode = mode;
        if mode == GameSpyMode::List {
            c.games = vec!["ut".into()];
        }
        let mut up = Upstream::new(
            c,
            Arc::from("12345678-1234-4234-8234-123456789abc"),
            &learner.handle,
        )
        .unwrap()
        .with_timing(Duration::from_secs(15), Duration::from_millis(500));
        let r = up.pull_once(&learner.handle).await.unwrap();
        assert_eq!(
            (r.listed, r.verified),
            (1, 1),
            "{mode:?}: {r:?}\n{}",
            perl.log()
        );
        let key = ServerKey::new("ut", GameAddr::Ip(server));
        let rec = learner
            .handle
            .with_registry(|r| r.get(&key).cloned())
            .unwrap();
        assert!(rec.is_listed() && !rec.is_direct() && rec.seen_by("perl").is_some());
        assert_eq!(rec.info.as_ref().map(|i| i.name()), Some("Perl's own"));
        if mode == GameSpyMode::Auto {
            // It was a sync, not the fallback to lists.
            assert!(perl.log().contains("synchronized all"), "{}", perl.log());
        }
        learner.stop().await;
    }
}
