//! The engine drives machines over real loopback sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use muster_proto::query::QueryError;
use muster_query::{Failure, Job, Options, spawn};

use crate::echo::Echo;
use tokio::net::UdpSocket;

/// A loopback echo server; `drop_first` ignores the first request for each `n`, `silent`
/// answers nothing.
async fn server(bind: &str, drop_first: bool, silent: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind(bind).await.expect("bind server");
    let addr = socket.local_addr().expect("addr");
    let received = Arc::new(AtomicUsize::new(0));
    let count = received.clone();
    tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut buf = [0u8; 64];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            count.fetch_add(1, Ordering::Relaxed);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let Some(num) = req.strip_prefix("ping ") else {
                continue;
            };
            if silent || (drop_first && seen.insert(num.to_owned())) {
                continue;
            }
            let _ = socket.send_to(format!("pong {num}").as_bytes(), from).await;
        }
    });
    (addr, received)
}

fn options(retries: u32) -> Options {
    Options {
        attempt_timeout: Duration::from_millis(200),
        min_attempt_timeout: Duration::from_millis(20),
        retries,
        ..Options::default()
    }
}

async fn run(target: SocketAddr, count: u32, options: Options) -> Vec<(u32, Result<u32, Failure>)> {
    let jobs = (0..count).map(move |n| Job {
        tag: n,
        build: move |cfg| Echo::new(target, n, cfg),
    });
    let mut rx = spawn(jobs, options);
    let mut out = Vec::new();
    while let Some(done) = rx.recv().await {
        out.push((done.tag, done.outcome));
    }
    out.sort_by_key(|(n, _)| *n);
    out
}

#[tokio::test]
async fn many_queries_all_answered() {
    let (addr, _) = server("127.0.0.1:0", false, false).await;
    let results = run(addr, 500, options(2)).await;
    assert_eq!(results.len(), 500);
    for (n, r) in results {
        assert_eq!(r, Ok(n));
    }
}

#[tokio::test]
async fn lost_first_request_is_retried() {
    let (addr, received) = server("127.0.0.1:0", true, false).await;
    let results = run(addr, 50, options(1)).await;
    assert!(results.iter().all(|(n, r)| r == &Ok(*n)), "{results:?}");
    assert_eq!(received.load(Ordering::Relaxed), 100);
}

#[tokio::test]
async fn retries_zero_sends_once() {
    let (addr, received) = server("127.0.0.1:0", true, false).await;
    let results = run(addr, 20, options(0)).await;
    assert!(
        results
            .iter()
            .all(|(_, r)| r == &Err(Failure::Query(QueryError::Timeout)))
    );
    assert_eq!(received.load(Ordering::Relaxed), 20);
}

#[tokio::test]
async fn deadline_ends_every_query_including_unstarted_ones() {
    let (addr, _) = server("127.0.0.1:0", false, true).await;
    let opts = Options {
        deadline: Some(Duration::from_millis(150)),
        max_in_flight: 5,
        attempt_timeout: Duration::from_secs(10),
        ..options(5)
    };
    let results = run(addr, 30, opts).await;
    assert_eq!(results.len(), 30);
    // The five sent got no reply; the rest were never sent.
    let timeouts = results
        .iter()
        .filter(|(_, r)| r == &Err(Failure::Query(QueryError::Timeout)))
        .count();
    let unsent = results
        .iter()
        .filter(|(_, r)| r == &Err(Failure::Unsent))
        .count();
    assert_eq!((timeouts, unsent), (5, 25), "{results:?}");
}

#[tokio::test]
async fn ipv6_loopback() {
    let Ok(probe) = std::net::UdpSocket::bind("[::1]:0") else {
        panic!("::1 is not available on this machine; IPv6 loopback is required for this test");
    };
    drop(probe);
    let (addr, _) = server("[::1]:0", false, false).await;
    let results = run(addr, 20, options(1)).await;
    assert!(results.iter().all(|(n, r)| r == &Ok(*n)), "{results:?}");
}

#[tokio::test]
async fn rate_budget_still_completes_everything() {
    let (addr, received) = server("127.0.0.1:0", false, false).await;
    let opts = Options {
        rate: Some(2000),
        ..options(1)
    };
    let results = run(addr, 100, opts).await;
    assert!(results.iter().all(|(n, r)| r == &Ok(*n)));
    assert_eq!(received.load(Ordering::Relaxed), 100);
}
