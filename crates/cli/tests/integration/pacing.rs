//! Pacing and ICMP through the real binary: `--rate` spreads the requests of a scan or query
//! over time without reporting any server that was simply not asked yet, and a closed port
//! fails at once as `error` instead of waiting for every retry.
//!
//! The servers are Muster's own GameSpy v1 responders in this process, on loopback. The paced
//! runs take the time their rate implies (2.5 s and 3 s): that time is what is under test. Only
//! a lower bound is asserted (pacing can make a run slower, never faster); the exact schedule
//! is tested on a virtual clock in muster-query.

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::respond::ServerState;
use muster_server::{Impairment, Limits, Stats, serve};
use serde_json::Value;
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// Stops one served socket when dropped.
struct Served(watch::Sender<bool>);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// `n` GameSpy v1 servers; returns their game addresses (the query port is game + 1).
async fn farm(n: usize) -> (Vec<SocketAddr>, Vec<Served>) {
    let mut games = Vec::new();
    let mut served = Vec::new();
    while games.len() < n {
        let probe = UdpSocket::bind("127.0.0.1:0").await.expect("bind probe");
        let game = probe.local_addr().expect("addr");
        drop(probe);
        let Some(port) = game.port().checked_add(1) else {
            continue;
        };
        let Ok(socket) = UdpSocket::bind(("127.0.0.1", port)).await else {
            continue;
        };
        let state = ServerState {
            name: format!("Pâced {}", games.len()),
            map: "DM-Deck16".into(),
            ..ServerState::default()
        };
        let (_state_tx, state_rx) = watch::channel(Arc::new(state));
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            // The state sender lives as long as the server.
            let _keep = _state_tx;
            serve(
                socket,
                GameSpyResponder::with_profile(Profile::Ut99),
                state_rx,
                Limits::unlimited(),
                Impairment::default(),
                Arc::new(Stats::default()),
                stop_rx,
            )
            .await
        });
        games.push(game);
        served.push(Served(stop));
    }
    (games, served)
}

/// Runs `muster <args>` off the runtime (the servers keep answering meanwhile).
async fn muster(args: Vec<String>) -> (Output, Duration) {
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(&args)
            .output()
            .expect("run muster");
        (out, start.elapsed())
    })
    .await
    .expect("muster ran")
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("ndjson"))
        .collect()
}

fn temp_file(tag: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("muster-pacing-{tag}-{}", std::process::id()));
    std::fs::write(&path, text).expect("write server list");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_at_rate_200_answers_all_500_servers() {
    let (games, _served) = farm(500).await;
    let list: String = games.iter().map(|g| format!("{g}\n")).collect();
    let file = temp_file("scan", &list);
    let (out, took) = muster(vec![
        "scan".into(),
        "-p".into(),
        "gamespy1".into(),
        "--servers".into(),
        file.display().to_string(),
        "--rate".into(),
        "200".into(),
        "-f".into(),
        "ndjson".into(),
    ])
    .await;
    let _ = std::fs::remove_file(&file);
    let results = lines(&out);
    let not_ok: Vec<&Value> = results.iter().filter(|r| r["status"] != "ok").collect();
    assert!(
        not_ok.is_empty(),
        "{} not ok, e.g. {:?}",
        not_ok.len(),
        not_ok.first()
    );
    assert_eq!(results.len(), 500);
    assert_eq!(out.status.code(), Some(0));
    // 10 requests at once (50 ms of budget), then one every 5 ms.
    assert!(took >= Duration::from_millis(2400), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_at_rate_20_with_no_retries_answers_all_60_servers() {
    let (games, _served) = farm(60).await;
    let mut args: Vec<String> = ["query", "-p", "gamespy1", "--rate", "20", "--retries", "0"]
        .map(String::from)
        .into();
    args.extend(["-f".into(), "ndjson".into()]);
    args.extend(games.iter().map(ToString::to_string));
    let (out, took) = muster(args).await;
    let results = lines(&out);
    let not_ok: Vec<&Value> = results.iter().filter(|r| r["status"] != "ok").collect();
    assert!(
        not_ok.is_empty(),
        "{} not ok, e.g. {:?}",
        not_ok.len(),
        not_ok.first()
    );
    assert_eq!(results.len(), 60);
    assert_eq!(out.status.code(), Some(0));
    // One request at once, then one every 50 ms.
    assert!(took >= Duration::from_millis(2900), "{took:?}");
}

#[tokio::test]
async fn closed_port_is_an_error_not_a_timeout() {
    let probe = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let closed = probe.local_addr().expect("addr");
    drop(probe);
    // Without the ICMP error this would wait 30 s and report `timeout`.
    let (out, _) = muster(vec![
        "query".into(),
        "-p".into(),
        "gamespy1".into(),
        "--given-port-only".into(),
        "--timeout".into(),
        "30s".into(),
        "--retries".into(),
        "3".into(),
        "-f".into(),
        "ndjson".into(),
        closed.to_string(),
    ])
    .await;
    let results = lines(&out);
    assert_eq!(results.len(), 1);
    let r = &results[0];
    assert_eq!(r["status"], "error", "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.ends_with("connection refused (ICMP port unreachable)"),
        "{error}"
    );
    assert_eq!(out.status.code(), Some(1));
}
