//! The engine drives machines over real loopback sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muster_proto::Transmit;
use muster_proto::query::{
    Event, QueryConfig, QueryError, QueryMachine, RetryAction, RetrySchedule,
};
use muster_query::{Failure, Job, Options, spawn};
use tokio::net::UdpSocket;

/// Sends `ping <n>`, done on `pong <n>` from the target.
struct Echo {
    target: SocketAddr,
    n: u32,
    schedule: RetrySchedule,
    due: bool,
    event: Option<Event<u32>>,
}

impl Echo {
    fn new(target: SocketAddr, n: u32, config: QueryConfig) -> Self {
        Self {
            target,
            n,
            schedule: RetrySchedule::new(config),
            due: true,
            event: None,
        }
    }
}

impl QueryMachine for Echo {
    type Output = u32;

    fn handle_datagram(&mut self, _now: Instant, from: SocketAddr, datagram: &[u8]) {
        if from == self.target && datagram == format!("pong {}", self.n).as_bytes() {
            self.schedule.stop();
            self.event.get_or_insert(Event::Done(self.n));
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.schedule.on_timeout(now) {
            RetryAction::Resend => self.due = true,
            RetryAction::GiveUp => {
                self.event.get_or_insert(Event::Failed(QueryError::Timeout));
            }
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.due || self.event.is_some() {
            return None;
        }
        self.due = false;
        self.schedule.on_send(now);
        buf.extend_from_slice(format!("ping {}", self.n).as_bytes());
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.event.is_some() {
            None
        } else {
            self.schedule.deadline()
        }
    }

    fn poll_event(&mut self) -> Option<Event<u32>> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.schedule.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        self.event.get_or_insert(Event::Failed(QueryError::Timeout));
    }
}

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
    assert!(
        results
            .iter()
            .all(|(_, r)| r == &Err(Failure::Query(QueryError::Timeout)))
    );
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

/// After a round trip is measured, a server that never answers is asked again after the
/// measured timeout, then after twice that, four times … (exponential backoff), never faster.
#[tokio::test]
async fn retransmissions_back_off_exponentially() {
    let (answering, _) = server("127.0.0.1:0", false, false).await;
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let arrivals = tokio::spawn(async move {
        let mut at = Vec::new();
        let mut buf = [0u8; 64];
        while at.len() < 4 {
            if silent.recv_from(&mut buf).await.is_err() {
                break;
            }
            at.push(Instant::now());
        }
        at
    });
    // One at a time: the answered query measures the round trip before the silent one starts.
    let opts = Options {
        attempt_timeout: Duration::from_secs(2),
        min_attempt_timeout: Duration::from_millis(60),
        max_in_flight: 1,
        retries: 3,
        ..Options::default()
    };
    let jobs = [(answering, 0u32), (silent_addr, 1)].map(|(target, n)| Job {
        tag: n,
        build: move |cfg| Echo::new(target, n, cfg),
    });
    let mut rx = spawn(jobs, opts);
    let mut outcomes = Vec::new();
    while let Some(done) = rx.recv().await {
        outcomes.push((done.tag, done.outcome));
    }
    outcomes.sort_by_key(|(n, _)| *n);
    assert_eq!(outcomes[0].1, Ok(0));
    assert_eq!(outcomes[1].1, Err(Failure::Query(QueryError::Timeout)));
    let at = arrivals.await.unwrap();
    assert_eq!(at.len(), 4, "first attempt and three retries");
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // 60 ms, 120 ms, 240 ms: each gap well above the one before (scheduling may only delay).
    assert!(gaps[0] >= Duration::from_millis(55), "{gaps:?}");
    assert!(
        gaps[1] >= gaps[0] * 3 / 2 - Duration::from_millis(20),
        "{gaps:?}"
    );
    assert!(gaps[2] >= Duration::from_millis(220), "{gaps:?}");
}
