//! The driver answers, limits per source, impairs on request and shuts down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use muster_proto::limit::BucketConfig;
use muster_proto::respond::{Reply, Responder, ServerState};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// Answers `name?` with the server name, split into one datagram per character when asked
/// `split?`; anything else is bad input.
struct NameResponder;

impl Responder for NameResponder {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        match datagram {
            b"name?" => out.push(Reply {
                to: from,
                bytes: state.name.as_bytes().to_vec(),
            }),
            b"split?" => out.extend(state.name.bytes().map(|b| Reply {
                to: from,
                bytes: vec![b],
            })),
            _ => return false,
        }
        true
    }
}

struct Running {
    addr: SocketAddr,
    stats: Arc<Stats>,
    state: watch::Sender<Arc<ServerState>>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(limits: Limits, impairment: Impairment) -> Running {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let state = ServerState {
        name: "abc".into(),
        ..ServerState::default()
    };
    let (state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    let task = tokio::spawn(serve(
        socket,
        NameResponder,
        state_rx,
        limits,
        impairment,
        stats.clone(),
        stop_rx,
    ));
    Running {
        addr,
        stats,
        state: state_tx,
        stop,
        task,
    }
}

async fn ask(client: &UdpSocket, to: SocketAddr, what: &[u8], expect: usize) -> Vec<Vec<u8>> {
    client.send_to(what, to).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    for _ in 0..expect {
        match tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf)).await {
            Ok(Ok((n, _))) => got.push(buf[..n].to_vec()),
            _ => break,
        }
    }
    got
}

#[tokio::test]
async fn answers_and_counts_bad_input() {
    let s = start(Limits::default(), Impairment::default()).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert_eq!(
        ask(&client, s.addr, b"name?", 1).await,
        vec![b"abc".to_vec()]
    );
    client.send_to(b"garbage", s.addr).await.unwrap();
    // The state can change while serving.
    s.state
        .send(Arc::new(ServerState {
            name: "xyz".into(),
            ..ServerState::default()
        }))
        .unwrap();
    assert_eq!(
        ask(&client, s.addr, b"name?", 1).await,
        vec![b"xyz".to_vec()]
    );
    assert_eq!(s.stats.bad.load(Ordering::Relaxed), 1);
    assert_eq!(s.stats.answered.load(Ordering::Relaxed), 2);
    s.stop.send(true).unwrap();
    s.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn per_source_limit_drops_a_flood() {
    let limits = Limits {
        per_source: BucketConfig {
            burst: 3.0,
            per_second: 0.001,
        },
        ..Limits::default()
    };
    let s = start(limits, Impairment::default()).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for _ in 0..20 {
        client.send_to(b"name?", s.addr).await.unwrap();
    }
    // A request that is answered marks the end of the flood's processing.
    let mut buf = [0u8; 16];
    let mut answers = 0;
    while let Ok(Ok(_)) =
        tokio::time::timeout(Duration::from_millis(300), client.recv_from(&mut buf)).await
    {
        answers += 1;
    }
    assert_eq!(answers, 3);
    assert_eq!(s.stats.rate_limited.load(Ordering::Relaxed), 17);
}

#[tokio::test]
async fn impairment_reverses_multi_datagram_replies() {
    let impairment = Impairment {
        reorder: 1.0,
        ..Impairment::default()
    };
    let s = start(Limits::unlimited(), impairment).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let got = ask(&client, s.addr, b"split?", 3).await;
    assert_eq!(got, vec![b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]);
}

#[tokio::test]
async fn impairment_loss_drops_everything_at_one() {
    let impairment = Impairment {
        loss: 1.0,
        ..Impairment::default()
    };
    let s = start(Limits::unlimited(), impairment).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for _ in 0..5 {
        client.send_to(b"name?", s.addr).await.unwrap();
    }
    // Wait (bounded) until the driver has read all five.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.stats.received.load(Ordering::Relaxed) < 5 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(s.stats.received.load(Ordering::Relaxed), 5);
    assert_eq!(s.stats.impaired.load(Ordering::Relaxed), 5);
    assert_eq!(s.stats.answered.load(Ordering::Relaxed), 0);
}

/// Sends `hb:<name>` to the master every 100 ms, takes `ok` datagrams from it, re-sends at
/// once on a state change and says `bye` at shutdown.
struct Scripted {
    master: SocketAddr,
    next: Option<Instant>,
    due: bool,
    acks: u32,
    name: String,
    bye: bool,
}

impl muster_proto::respond::Registrar for Scripted {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        d: &[u8],
        _s: &ServerState,
    ) -> bool {
        if from == self.master && d == b"ok" {
            self.acks += 1;
            return true;
        }
        false
    }
    fn handle_timeout(&mut self, _now: Instant, _state: &ServerState) {
        self.due = true;
    }
    fn handle_state_change(&mut self, _now: Instant, state: &ServerState) {
        self.name.clone_from(&state.name);
        self.due = true;
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<muster_proto::Transmit> {
        if self.bye {
            self.bye = false;
            self.next = None;
            buf.extend_from_slice(b"bye");
            return Some(muster_proto::Transmit {
                destination: self.master,
            });
        }
        if !self.due {
            return None;
        }
        self.due = false;
        self.next = Some(now + Duration::from_millis(100));
        buf.extend_from_slice(format!("hb:{}", self.name).as_bytes());
        Some(muster_proto::Transmit {
            destination: self.master,
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }
    fn shutdown(&mut self, _now: Instant) {
        self.bye = true;
    }
}

#[tokio::test]
async fn registrars_share_the_socket_and_say_goodbye() {
    let master = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let server_addr = socket.local_addr().unwrap();
    let (state_tx, state_rx) = watch::channel(Arc::new(ServerState {
        name: "abc".into(),
        ..ServerState::default()
    }));
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    let registrar = Scripted {
        master: master.local_addr().unwrap(),
        next: None,
        due: true,
        acks: 0,
        name: "abc".into(),
        bye: false,
    };
    let task = tokio::spawn(muster_server::serve_registered(
        socket,
        NameResponder,
        vec![Box::new(registrar)],
        state_rx,
        Limits::default(),
        Impairment::default(),
        stats.clone(),
        None,
        stop_rx,
    ));
    async fn recv_from(master: &UdpSocket) -> (Vec<u8>, SocketAddr) {
        let mut buf = [0u8; 64];
        let (n, from) = tokio::time::timeout(Duration::from_secs(2), master.recv_from(&mut buf))
            .await
            .expect("datagram from the server")
            .unwrap();
        (buf[..n].to_vec(), from)
    }
    let (first, from) = recv_from(&master).await;
    assert_eq!(first, b"hb:abc");
    assert_eq!(from, server_addr, "heartbeats leave from the query socket");
    // The master's answer goes to the registrar, not to the responder.
    master.send_to(b"ok", server_addr).await.unwrap();
    let (second, _) = recv_from(&master).await;
    assert_eq!(
        second, b"hb:abc",
        "heartbeat repeats on the registrar's timer"
    );
    assert_eq!(stats.bad.load(Ordering::Relaxed), 0);
    // A state change reaches the registrar.
    state_tx
        .send(Arc::new(ServerState {
            name: "xyz".into(),
            ..ServerState::default()
        }))
        .unwrap();
    let mut saw_new_name = false;
    for _ in 0..5 {
        if recv_from(&master).await.0 == b"hb:xyz" {
            saw_new_name = true;
            break;
        }
    }
    assert!(saw_new_name);
    // Queries are still answered by the responder on the same socket.
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert_eq!(
        ask(&client, server_addr, b"name?", 1).await,
        vec![b"xyz".to_vec()]
    );
    stop.send(true).unwrap();
    let mut saw_bye = false;
    for _ in 0..5 {
        if recv_from(&master).await.0 == b"bye" {
            saw_bye = true;
            break;
        }
    }
    assert!(saw_bye, "goodbye sent at shutdown");
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("driver stops after the goodbye")
        .unwrap()
        .unwrap();
}
