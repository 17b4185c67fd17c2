//! Conformance of the teeworlds faces with real peers: teeworlds-server 0.7.5 registering with
//! the 0.7 UDP face (fixed master ports 8283/8284, `masters.cfg` on loopback), DDNet-Server
//! 16.4 registering over HTTP (`sv_register_url` on loopback) and qstat `-teem` reading the
//! 0.6 list face. Servers only ever register with 127.0.0.1.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_master::config::Config;
use muster_master::faces::teeworlds as tw;
use muster_master::faces::teeworlds::ddnet::{self, DdnetSettings};
use muster_master::registry::{Face, Timestamp};
use muster_master::table::{FaceStart, Socket};
use muster_master::{Master, MasterHandle};
use muster_proto::teeworlds_master::{MASTER_PORT_07, MasterListQuery, Token};
use muster_query::{Job, Options};
use muster_testkit::{DdnetServer, Qstat, TeeworldsServer};
use tokio::net::UdpSocket;

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("muster-conf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(dir: &Dir) -> MasterHandle {
    let c = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    Master::open(c, Timestamp::now()).unwrap().handle()
}

fn listed(h: &MasterHandle, face: Face) -> Vec<SocketAddr> {
    h.publish()
        .listed()
        .iter()
        .filter(|r| r.face == face)
        .filter_map(|r| r.query_addr())
        .collect()
}

/// Every record of the registry (key, face, state, query address), for a failure message.
fn registry_state(h: &MasterHandle) -> String {
    h.with_registry(|r| {
        r.iter()
            .map(|rec| {
                format!(
                    "{:?} {:?} {:?} query {:?}",
                    rec.key,
                    rec.face,
                    rec.state,
                    rec.query_addr()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// Polls `f` every 200 ms for at most `secs` seconds.
async fn wait_for<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..secs * 5 {
        if let Some(v) = f() {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeworlds_075_registers_with_the_07_face() {
    let Some(peer) = TeeworldsServer::require() else {
        return;
    };
    // teeworlds has the master ports built in (peers.md §4.3).
    let master = UdpSocket::bind(("127.0.0.1", MASTER_PORT_07)).await;
    let checker = UdpSocket::bind(("127.0.0.1", MASTER_PORT_07 + 1)).await;
    let (Ok(master), Ok(checker)) = (master, checker) else {
        let missing = muster_testkit::Missing {
            peer: "UDP ports 127.0.0.1:8283/8284",
            detail: "taken by another process".to_owned(),
        };
        let _ = muster_testkit::require::<()>(Err(missing));
        return;
    };
    let master_addr = master.local_addr().unwrap();
    let dir = Dir::new("tw07");
    let h = open(&dir);
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    let face = tokio::spawn(
        FaceStart::new(h.clone(), rx)
            .serve(&tw::FACE07, vec![Socket::Udp(master), Socket::Udp(checker)]),
    );
    let port = muster_testkit::net::free_udp_port();
    let mut server = tokio::task::spawn_blocking(move || peer.start(port, &["sv_register 1"]))
        .await
        .unwrap();
    let game: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let got = wait_for(30, || {
        listed(&h, Face::Teeworlds07).contains(&game).then_some(())
    })
    .await;
    let log = server.log();
    assert!(
        got.is_some(),
        "{game} not listed within 30 s\n--- registry\n{}\n--- metrics\n{}\n--- server log\n{log}",
        registry_state(&h),
        muster_http::metrics::render(h.metrics(), &std::collections::BTreeMap::new()),
    );
    // Read it back as a 0.7 browser does.
    let mut rx = muster_query::spawn(
        vec![Job {
            tag: (),
            build: move |cfg| MasterListQuery::new_07(master_addr, cfg, Token([1, 2, 3, 4])),
        }],
        Options::default(),
    );
    let list = rx.recv().await.unwrap().outcome.unwrap();
    let addrs: Vec<SocketAddr> = list.servers.iter().map(|s| s.address).collect();
    assert_eq!(addrs, vec![game]);
    // The server logs "server registered" on its register update after the master's `fwok`,
    // one tick after the line before it: the master may list it first.
    let registered = wait_for(10, || {
        server.log().contains("server registered").then_some(())
    })
    .await;
    let log = tokio::task::spawn_blocking(move || {
        let log = server.log();
        server.stop();
        log
    })
    .await
    .unwrap();
    assert!(registered.is_some(), "{log}");
    stop.cancel();
    face.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddnet_164_registers_over_http_and_deletes_on_stop() {
    let Some(peer) = DdnetServer::require() else {
        return;
    };
    let dir = Dir::new("ddnet");
    let h = open(&dir);
    let chal = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let app = ddnet::router(h.clone(), vec![chal], DdnetSettings::default());
    let stop = muster_master::CancellationToken::new();
    let _guard = stop.clone().drop_guard();
    tokio::spawn(h.clone().run_publisher(stop.clone()));
    tokio::spawn(
        h.clone()
            .run_persister(Duration::from_secs(1), stop.clone()),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = l.local_addr().unwrap();
    // The daemon's HTTP runner: it stamps each request's peer and arrival time.
    tokio::spawn(muster_master::runtime::http::serve(
        l,
        app,
        None,
        Default::default(),
        Default::default(),
        Arc::new(h.clone()),
        stop.clone(),
    ));
    let port = muster_testkit::net::free_udp_port();
    let url = format!("sv_register_url \"http://{http}/ddnet/15/register\"");
    let start = move || {
        let (peer, url) = (peer.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            peer.start(port, &[&url, "http_allow_insecure 1", "sv_register ipv4"])
        })
    };
    let mut server = start().await.unwrap();
    let mut starts = 1;
    let json_url = format!("http://{http}/ddnet/15/servers.json");
    let mut doc = serde_json::Value::Null;
    for _ in 0..100 {
        // DDNet 16.4 can die inside libcurl when its two registrations connect at once (see
        // START_ATTEMPTS); the start-up check covers most of it, and a death after the first
        // answer is handled the same way here.
        if let Some(status) = server.exited() {
            assert!(
                starts < muster_testkit::servers::START_ATTEMPTS,
                "DDNet-Server died {starts} times (last: {status})\n--- log\n{}",
                server.log()
            );
            let _ = writeln!(
                std::io::stderr(),
                "WARNING: DDNet-Server died while registering ({status}); starting it again"
            );
            drop(server);
            server = start().await.unwrap();
            starts += 1;
        }
        let body = muster_query::lists::http_get(&json_url, Duration::from_secs(5))
            .await
            .unwrap();
        doc = serde_json::from_slice(&body).unwrap();
        if doc["servers"].as_array().is_some_and(|s| {
            s.first()
                .and_then(|e| e["addresses"].as_array())
                .is_some_and(|a| a.len() == 2)
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let servers = doc["servers"].as_array().cloned().unwrap_or_default();
    assert_eq!(servers.len(), 1, "{doc}\n--- server log\n{}", server.log());
    let mut addrs: Vec<String> = servers[0]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    addrs.sort();
    assert_eq!(
        addrs,
        vec![
            format!("tw-0.6+udp://127.0.0.1:{port}"),
            format!("tw-0.7+udp://127.0.0.1:{port}")
        ]
    );
    let info = &servers[0]["info"];
    assert_eq!(info["map"]["name"], "Tutorial");
    assert_eq!(info["game_type"], "DDraceNetwork");
    assert!(info["name"].as_str().unwrap().starts_with("DDNet Lab"));
    // One registry: the server that registered over HTTP is in the 0.6 UDP list too, as a
    // 0.6 client (qstat -teem) reads it.
    if let Some(qstat) = Qstat::require() {
        h.publish();
        let (got, out) = qstat_teem(&h, &dir, qstat).await;
        assert_eq!(got, vec![format!("tees 127.0.0.1:{port}")], "{out}");
    }
    // SIGTERM: one Action: delete per stream, and the server is gone.
    tokio::task::spawn_blocking(move || server.stop())
        .await
        .unwrap();
    let gone = wait_for(10, || listed(&h, Face::DdnetHttp).is_empty().then_some(())).await;
    assert!(gone.is_some(), "still listed after the server stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qstat_teem_reads_the_06_list() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let dir = Dir::new("teem");
    let h = open(&dir);
    let now = Timestamp::now();
    let mut want = Vec::new();
    for i in 1..=3u8 {
        let a: SocketAddr = format!("127.0.0.{i}:{}", 18_300 + u16::from(i))
            .parse()
            .unwrap();
        h.register(ddnet::ddnet_registration(a), now);
        want.push(format!("tees {a}"));
    }
    h.publish();
    let (got, out) = qstat_teem(&h, &dir, qstat).await;
    assert_eq!(got, want, "{out}");
    assert!(out.contains("3 servers"), "{out}");
}

/// Serves `h`'s 0.6 list face on a loopback port while `qstat -teem` reads it; returns the
/// `tees ADDRESS` lines qstat wrote and its output.
async fn qstat_teem(h: &MasterHandle, dir: &Dir, qstat: Qstat) -> (Vec<String>, String) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    tokio::spawn(FaceStart::new(h.clone(), rx).serve(&tw::FACE06, vec![Socket::Udp(sock)]));
    let out_file = dir.0.with_extension("teem.txt");
    let arg = "-teem,outfile".to_owned();
    let target = format!("{addr},{}", out_file.display());
    let out = tokio::task::spawn_blocking(move || qstat.run(&[&arg, &target]))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    stop.cancel();
    (
        text.lines().map(str::to_owned).collect(),
        format!("{out}\n{}", out.stdout_text()),
    )
}
