//! Hosting boxes at the daemon's **default** limits: 200 game servers behind one address
//! (127.0.0.1, 200 game ports) register on each registering face (DDNet HTTP, Teeworlds 0.7
//! UDP, GameAgent, GameSpy, management), while a player's browser on the same address pages
//! `/api/v1/servers` every 0.5 s. Every server must be listed once each has made its second
//! registration, and still be listed after its sixth, and the reader must never be refused.
//!
//! The limits are the defaults (checked: the test never changes `[limits]`). To keep the run
//! short, the registration period is [`PERIOD`] and the faces' record lifetimes are shortened
//! to [`LIFETIME`] (`[lifetimes]`, a setting the daemon has): the servers register more often
//! than real ones do (DDNet every 15 s, Teeworlds 15 s, GameAgent 150 s), which asks more of the
//! per-source buckets, not less. Progress is counted in rounds each server has finished, never
//! in wall-clock speed: a slow machine only lets the buckets refill more between rounds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use muster_master::config::{HumanDuration, LimitsConfig};
use muster_master::registry::Face;
use muster_proto::gamespy_master::{Enctype, Secure, validate_string};
use muster_proto::teeworlds_master::{Message, Packet};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{Daemon, TempDir, config, loopback};

/// Game servers behind the one address.
const SERVERS: usize = 200;
/// Rounds of registration each server makes.
const ROUNDS: usize = 6;
/// Time between a server's registrations.
const PERIOD: Duration = Duration::from_secs(3);
/// The shortened lifetime of the faces' records (more than three periods).
const LIFETIME: Duration = Duration::from_secs(10);
/// No wait in this file is longer (a failsafe; nothing is asserted on it but progress).
const FAILSAFE: Duration = Duration::from_secs(90);

const DD_BODY: &str = "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin";
const TW_FIX: &str = "teeworlds_master/tw-0.7.5-udp-register";
/// The GameSpy game whose servers prove themselves with `\secure\` / `\validate\`, and its key.
const GS_GAME: &str = "ut2";
const GS_KEY: &[u8] = b"Lw7x0R";

/// The daemon with the HTTP face and `face` on loopback, at the default limits.
fn start(dir: &TempDir, face: Face) -> Daemon {
    let mut c = config(dir);
    let l = &mut c.listen;
    match face {
        Face::DdnetHttp => {}
        Face::Teeworlds07 => l.teeworlds07 = loopback(),
        Face::GameAgent => l.gameagent = loopback(),
        Face::GameSpy => l.gamespy_udp = loopback(),
        Face::Mgmt => l.mgmt = loopback(),
        other => panic!("not a face of this test: {other:?}"),
    }
    c.poller.enabled = false;
    c.history.enabled = false;
    let life = HumanDuration(LIFETIME);
    let lt = &mut c.lifetimes;
    (lt.ddnet, lt.teeworlds, lt.gameagent, lt.gamespy) = (life, life, life, life);
    assert_eq!(c.limits, LimitsConfig::default(), "default limits");
    Daemon::start(c)
}

fn listed(d: &Daemon, face: Face) -> usize {
    d.handle
        .with_registry(|r| r.iter().filter(|x| x.is_listed() && x.face == face).count())
}

/// Rounds finished, per round.
type Done = Arc<Vec<AtomicUsize>>;

fn done() -> Done {
    Arc::new((0..ROUNDS).map(|_| AtomicUsize::new(0)).collect())
}

/// Waits until every server has finished round `r` (0-based).
async fn finished(done: &Done, r: usize) {
    let t = Instant::now();
    while done[r].load(Ordering::Relaxed) < SERVERS {
        assert!(
            t.elapsed() < FAILSAFE,
            "round {r}: {} servers done",
            done[r].load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One GET over a fresh connection from 127.0.0.1: the status, or what went wrong (a refused
/// or reset connection included).
async fn try_get(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: muster\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf);
        text.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {} bytes", buf.len()))
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

/// A player's browser on the box's address: pages the API every 0.5 s until stopped; returns
/// how many reads it made and every read that was not a 200.
fn reader(http: SocketAddr) -> (Arc<tokio::sync::Notify>, JoinHandle<(usize, Vec<String>)>) {
    let stop = Arc::new(tokio::sync::Notify::new());
    let s = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        let (mut reads, mut bad) = (0, Vec::new());
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                () = s.notified() => return (reads, bad),
                _ = tick.tick() => {}
            }
            let path = format!("/api/v1/servers?page={}&per_page=100", reads % 3 + 1);
            reads += 1;
            match try_get(http, &path).await {
                Ok(200) => {}
                other => bad.push(format!("{path}: {other:?}")),
            }
        }
    });
    (stop, task)
}

/// Runs `round` for each of [`SERVERS`] servers, [`ROUNDS`] times each, round `r` starting
/// `r` periods after the start (or when the server's previous round ended, if later). Each
/// task ends with its server, which lives (holding its sockets) until the task is awaited.
fn drive<S, F, Fut>(servers: Vec<S>, round: F) -> (Done, Vec<JoinHandle<S>>)
where
    S: Send + 'static,
    F: Fn(S) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = S> + Send,
{
    let d = done();
    let t0 = Instant::now();
    let tasks = servers
        .into_iter()
        .map(|s| {
            let (d, round) = (Arc::clone(&d), round.clone());
            tokio::spawn(async move {
                let mut s = s;
                for (r, n) in d.iter().enumerate() {
                    tokio::time::sleep_until(t0 + PERIOD * u32::try_from(r).unwrap()).await;
                    s = round(s).await;
                    n.fetch_add(1, Ordering::Relaxed);
                }
                s
            })
        })
        .collect();
    (d, tasks)
}

/// The scenario every face shares: the servers' rounds and the reader, then the checks.
async fn scenario<S>(d: Daemon, face: Face, done: Done, tasks: Vec<JoinHandle<S>>) {
    let (stop, read) = reader(d.http());
    finished(&done, 1).await;
    assert_eq!(
        listed(&d, face),
        SERVERS,
        "every server listed after its second registration"
    );
    finished(&done, ROUNDS - 1).await;
    assert_eq!(
        listed(&d, face),
        SERVERS,
        "every server still listed after its sixth registration"
    );
    stop.notify_one();
    let (reads, bad) = read.await.unwrap();
    assert!(reads >= 10, "the reader read {reads} times");
    assert!(bad.is_empty(), "reads refused: {bad:?}");
    let m = d.handle.metrics();
    for reason in [
        "tcp_source_cap",
        "tcp_prefix_cap",
        "tcp_reserve",
        "tcp_conn_cap",
    ] {
        assert_eq!(m.drops(reason), 0, "{reason}");
    }
    assert_eq!(m.limited("http_list"), 0, "no list read refused");
    let mut servers = Vec::new();
    for t in tasks {
        servers.push(t.await.unwrap());
    }
    d.stop().await;
    drop(servers);
}

async fn box_udp() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

/// The next datagram on `s` within `ms`.
async fn recv(s: &UdpSocket, ms: u64) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = vec![0u8; 2048];
    match tokio::time::timeout(Duration::from_millis(ms), s.recv_from(&mut buf)).await {
        Ok(Ok((n, from))) => Some((buf[..n].to_vec(), from)),
        _ => None,
    }
}

// ---- DDNet HTTP ----

/// An HTTP/1.1 client on one keep-alive connection (as a DDNet server's), reconnecting when
/// the master closed it.
struct KeepAlive {
    addr: SocketAddr,
    conn: Option<TcpStream>,
}

impl KeepAlive {
    /// Status, head (lower-case) and body of the answer to `req`.
    async fn exchange(&mut self, req: &[u8]) -> Option<(u16, String, Vec<u8>)> {
        for _ in 0..2 {
            if self.conn.is_none() {
                self.conn = TcpStream::connect(self.addr).await.ok();
            }
            let Some(c) = self.conn.as_mut() else {
                continue;
            };
            let res = tokio::time::timeout(Duration::from_secs(10), async {
                c.write_all(req).await.ok()?;
                read_response(c).await
            })
            .await
            .ok()
            .flatten();
            match res {
                Some((status, head, body)) => {
                    if head.contains("connection: close") {
                        self.conn = None;
                    }
                    return Some((status, head, body));
                }
                None => self.conn = None,
            }
        }
        None
    }
}

/// One response with a `Content-Length` body: status, head (lower-case), body.
async fn read_response(c: &mut TcpStream) -> Option<(u16, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = c.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))?
        .trim()
        .parse()
        .ok()?;
    let mut body = buf[end..].to_vec();
    while body.len() < len {
        let n = c.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((status, head, body))
}

struct DdnetServer {
    n: usize,
    game: UdpSocket,
    http: KeepAlive,
    token: Option<String>,
    body: Arc<Vec<u8>>,
}

impl DdnetServer {
    fn request(&self) -> Vec<u8> {
        let port = self.game.local_addr().unwrap().port();
        let token = self
            .token
            .as_ref()
            .map(|t| format!("Challenge-Token: {t}\r\n"))
            .unwrap_or_default();
        let mut req = format!(
            "POST /ddnet/15/register HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Address: tw-0.6+udp://connecting-address.invalid:{port}\r\n\
             Secret: 4ae14cf1-eb35-4068-89eb-{n:012x}\r\n\
             Challenge-Secret: 414cfc17-9b63-4e41-b33b-{n:012x}:tw0.6/ipv4\r\n\
             Info-Serial: 0\r\n{token}Content-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            self.body.len(),
            n = self.n,
        )
        .into_bytes();
        req.extend_from_slice(&self.body);
        req
    }

    /// One registration: POST; on `need_challenge`, the UDP challenge's token and POST
    /// again; on `429`, POST again after its `Retry-After`. A few tries per round; what is
    /// left waits for the next round.
    async fn round(&mut self) {
        for _ in 0..5 {
            let req = self.request();
            let Some((status, head, body)) = self.http.exchange(&req).await else {
                return;
            };
            if status == 429 {
                let secs: u64 = head
                    .lines()
                    .find_map(|l| l.strip_prefix("retry-after:"))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("a 429 says when to come back");
                tokio::time::sleep(Duration::from_secs(secs)).await;
                continue;
            }
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            if status != 200 || v["status"] != "need_challenge" {
                return;
            }
            if let Some((d, _)) = recv(&self.game, 1000).await
                && let Ok(Packet::Connless {
                    message: Message::Challenge(c),
                    ..
                }) = Packet::decode(&d)
            {
                self.token = Some(String::from_utf8_lossy(c.token()).into_owned());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddnet_http_hosting_box_at_default_limits() {
    let dir = TempDir::new("box-ddnet");
    let d = start(&dir, Face::DdnetHttp);
    let body = Arc::new(muster_testkit::fixture(DD_BODY));
    let mut servers = Vec::new();
    for n in 0..SERVERS {
        servers.push(DdnetServer {
            n,
            game: box_udp().await,
            http: KeepAlive {
                addr: d.http(),
                conn: None,
            },
            token: None,
            body: Arc::clone(&body),
        });
    }
    let (done, tasks) = drive(servers, |mut s: DdnetServer| async move {
        s.round().await;
        s
    });
    scenario(d, Face::DdnetHttp, done, tasks).await;
}

// ---- Teeworlds 0.7 UDP ----

struct Tw07Server {
    sock: UdpSocket,
    master: SocketAddr,
    checker: SocketAddr,
}

fn with_token(mut d: Vec<u8>, ours: [u8; 4]) -> Vec<u8> {
    // The captures carry the stand-in master's token "MSTR" at bytes 1..5.
    d[1..5].copy_from_slice(&ours);
    d
}

impl Tw07Server {
    /// The captured 0.7.5 exchange: token request, `bea2` with this server's port, `fw!!` to
    /// the checker's `fw??`, until `fwok`. A request left unanswered waits for the next round.
    async fn round(&mut self) {
        let req =
            muster_testkit::fixture(&format!("{TW_FIX}/01-server-to-master1-token-request.bin"));
        let _ = self.sock.send_to(&req, self.master).await;
        let ours = loop {
            match recv(&self.sock, 1500).await {
                Some((d, from)) if from == self.master && d.len() == 12 => {
                    break [d[8], d[9], d[10], d[11]];
                }
                Some(_) => {}
                None => return,
            }
        };
        let port = self.sock.local_addr().unwrap().port();
        let mut bea2 = with_token(
            muster_testkit::fixture(&format!("{TW_FIX}/07-server-bea2-heartbeat.bin")),
            ours,
        );
        let n = bea2.len();
        bea2[n - 2..].copy_from_slice(&port.to_be_bytes());
        let _ = self.sock.send_to(&bea2, self.master).await;
        let fw = with_token(
            muster_testkit::fixture(&format!("{TW_FIX}/09-server-fw-response.bin")),
            ours,
        );
        while let Some((d, from)) = recv(&self.sock, 2500).await {
            if d.ends_with(b"fw??") {
                let _ = self.sock.send_to(&fw, from).await;
            } else if d.ends_with(b"fwok") {
                return;
            }
        }
        let _ = self.checker;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeworlds07_hosting_box_at_default_limits() {
    let dir = TempDir::new("box-tw07");
    let d = start(&dir, Face::Teeworlds07);
    let (master, checker) = (d.addr("teeworlds07"), d.addr("teeworlds07-checker"));
    let mut servers = Vec::new();
    for _ in 0..SERVERS {
        servers.push(Tw07Server {
            sock: box_udp().await,
            master,
            checker,
        });
    }
    let (done, tasks) = drive(servers, |mut s: Tw07Server| async move {
        s.round().await;
        s
    });
    scenario(d, Face::Teeworlds07, done, tasks).await;
}

// ---- GameAgent ----

struct GaServer {
    /// The query socket (game port + 1), which GameAgent servers heartbeat from.
    sock: UdpSocket,
    master: SocketAddr,
}

fn ga_heartbeat(echo: i32) -> Vec<u8> {
    format!(
        "0;challenge;{echo};players;0;maxplayers;8;level;Yodeller;gametype;Coop;\
         version;1.10;product;serioussam"
    )
    .into_bytes()
}

impl GaServer {
    /// The periodic heartbeat (echo 0); a challenge that comes back is answered with its echo.
    async fn round(&mut self) {
        let _ = self.sock.send_to(&ga_heartbeat(0), self.master).await;
        while let Some((d, from)) = recv(&self.sock, 1000).await {
            if from == self.master && d.len() >= 5 && d[0] == 0x01 {
                let c = i32::from_le_bytes([d[1], d[2], d[3], d[4]]);
                let _ = self.sock.send_to(&ga_heartbeat(c), self.master).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gameagent_hosting_box_at_default_limits() {
    let dir = TempDir::new("box-ga");
    let d = start(&dir, Face::GameAgent);
    let master = d.addr("gameagent");
    let mut servers = Vec::new();
    while servers.len() < SERVERS {
        let sock = box_udp().await;
        // Port 1 would announce game port 0.
        if sock.local_addr().unwrap().port() > 1 {
            servers.push(GaServer { sock, master });
        }
    }
    let (done, tasks) = drive(servers, |mut s: GaServer| async move {
        s.round().await;
        s
    });
    scenario(d, Face::GameAgent, done, tasks).await;
}

// ---- GameSpy ----

struct GsServer {
    /// Heartbeats from here; its port is also the announced query port.
    sock: UdpSocket,
    master: SocketAddr,
}

impl GsServer {
    /// `\heartbeat\`; a `\secure\` that comes back is answered with the game's `\validate\`.
    async fn round(&mut self) {
        let port = self.sock.local_addr().unwrap().port();
        let hb = format!("\\heartbeat\\{port}\\gamename\\{GS_GAME}");
        let _ = self.sock.send_to(hb.as_bytes(), self.master).await;
        while let Some((d, from)) = recv(&self.sock, 1000).await {
            if from != self.master {
                continue;
            }
            if let Ok(secure) = Secure::decode(&d) {
                let v = validate_string(&secure.challenge, GS_KEY, Enctype::Zero).unwrap();
                let answer = format!("\\validate\\{v}\\final\\\\queryid\\1.1");
                let _ = self.sock.send_to(answer.as_bytes(), self.master).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gamespy_hosting_box_at_default_limits() {
    let dir = TempDir::new("box-gs");
    let d = start(&dir, Face::GameSpy);
    let master = d.addr("gamespy-udp");
    let mut servers = Vec::new();
    for _ in 0..SERVERS {
        servers.push(GsServer {
            sock: box_udp().await,
            master,
        });
    }
    let (done, tasks) = drive(servers, |mut s: GsServer| async move {
        s.round().await;
        s
    });
    scenario(d, Face::GameSpy, done, tasks).await;
}

// ---- management ----

struct MgmtServer {
    n: usize,
    mgmt: SocketAddr,
    conn: Option<tokio::net::tcp::OwnedWriteHalf>,
    reader: Option<JoinHandle<()>>,
}

impl MgmtServer {
    /// The first round connects and registers (the registration lasts as long as the
    /// connection); every round sends a stats update, as a running server does.
    async fn round(&mut self) {
        if self.conn.is_none() {
            let Ok(s) = TcpStream::connect(self.mgmt).await else {
                return;
            };
            let (mut rd, mut wr) = s.into_split();
            let json = format!(
                r#"{{"command":"msRegisterGameServer","content":{{"serverName":"Box {n}","serverAddress":"127.0.0.1","serverPort":{port}}}}}"#,
                n = self.n,
                port = 20_000 + self.n
            );
            if wr
                .write_all(&crate::flood::mgmt_frame(&json))
                .await
                .is_err()
            {
                return;
            }
            // Answers are read and dropped, as a server that does not care about them.
            self.reader = Some(tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
            }));
            self.conn = Some(wr);
            return;
        }
        let update = r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":2}}"#;
        if let Some(c) = self.conn.as_mut()
            && c.write_all(&crate::flood::mgmt_frame(update))
                .await
                .is_err()
        {
            self.conn = None;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mgmt_hosting_box_at_default_limits() {
    let dir = TempDir::new("box-mgmt");
    let d = start(&dir, Face::Mgmt);
    let mgmt = d.addr("mgmt");
    let servers = (0..SERVERS)
        .map(|n| MgmtServer {
            n,
            mgmt,
            conn: None,
            reader: None,
        })
        .collect();
    let (done, tasks) = drive(servers, |mut s: MgmtServer| async move {
        s.round().await;
        s
    });
    // The servers hold their connections until their tasks end, after the checks.
    scenario(d, Face::Mgmt, done, tasks).await;
}

// ---- reads that are limited ----

/// `servers.json` and `/metrics` have per-source buckets of their own (each refusal a 429
/// with `Retry-After`, counted by limit name), and spending them refuses no list read.
#[tokio::test]
async fn servers_json_and_metrics_are_limited_per_source_apart_from_lists() {
    let dir = TempDir::new("box-reads");
    let d = start(&dir, Face::DdnetHttp);
    let http = d.http();
    let l = LimitsConfig::default();
    for (path, burst, limit) in [
        (
            "/ddnet/15/servers.json",
            l.servers_json_burst,
            "servers_json",
        ),
        ("/metrics", l.metrics_burst, "metrics"),
    ] {
        let mut statuses = Vec::new();
        for _ in 0..burst + 1 {
            statuses.push(
                crate::exchange(
                    http,
                    &format!("GET {path} HTTP/1.1\nHost: x\nConnection: close\n\n"),
                    b"",
                )
                .await,
            );
        }
        let last = statuses.pop().unwrap();
        assert!(
            statuses.iter().all(|r| r.status == 200),
            "{path}: the burst is served"
        );
        assert_eq!(last.status, 429, "{path}: past the burst");
        assert!(last.header("retry-after").is_some(), "{path}: Retry-After");
        assert_eq!(d.handle.metrics().limited(limit), 1, "{path}");
        assert_eq!(try_get(http, "/api/v1/servers").await, Ok(200));
    }
    d.stop().await;
}

// ---- behind a reverse proxy ----

/// One request from `from` (a loopback address) with `extra` header lines: status and body.
async fn request_from(
    from: std::net::Ipv4Addr,
    to: SocketAddr,
    head: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from.into(), 0)).unwrap();
    let mut s = sock.connect(to).await.unwrap();
    let mut req = head.replace('\n', "\r\n").into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).await.unwrap();
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(10), read_response(&mut s))
        .await
        .unwrap()
        .unwrap();
    (status, body)
}

/// With `limits.connecting_ip_header` from a trusted proxy (127.0.0.1), the HTTP buckets count
/// the client the header names, and DDNet's register challenges that client; the same header
/// from a peer that is not trusted (127.0.0.3) changes nothing.
#[tokio::test]
async fn a_trusted_proxy_header_gives_the_client_address() {
    let dir = TempDir::new("box-proxy");
    let mut c = config(&dir);
    c.poller.enabled = false;
    c.history.enabled = false;
    c.limits.connecting_ip_header = "X-Real-IP".into();
    c.limits.trusted_proxies = vec!["127.0.0.1".into()];
    let d = Daemon::start(c);
    let http = d.http();
    let proxy = std::net::Ipv4Addr::LOCALHOST;
    let get = |client: &str| {
        format!("GET /api/v1/servers HTTP/1.1\nHost: x\nConnection: close\nX-Real-IP: {client}\n\n")
    };
    // One client behind the proxy spends its list bucket…
    let mut refused = false;
    for _ in 0..1000 {
        if request_from(proxy, http, &get("198.51.100.7"), b"").await.0 == 429 {
            refused = true;
            break;
        }
    }
    assert!(refused, "the client's bucket ran out");
    // …which is not another client's, nor the proxy's own.
    assert_eq!(
        request_from(proxy, http, &get("198.51.100.8"), b"").await.0,
        200
    );
    assert_eq!(try_get(http, "/api/v1/servers").await, Ok(200));
    // A peer that is not trusted names whom it likes: its own bucket is charged.
    let other = std::net::Ipv4Addr::new(127, 0, 0, 3);
    assert_eq!(
        request_from(other, http, &get("198.51.100.7"), b"").await.0,
        200
    );

    // DDNet's register challenges the client the proxy names, at its address.
    let game = UdpSocket::bind("127.0.0.2:0").await.unwrap();
    let port = game.local_addr().unwrap().port();
    let body = muster_testkit::fixture(DD_BODY);
    let head = format!(
        "POST /ddnet/15/register HTTP/1.1\nHost: x\nConnection: close\nX-Real-IP: 127.0.0.2\n\
         Address: tw-0.6+udp://connecting-address.invalid:{port}\n\
         Secret: 4ae14cf1-eb35-4068-89eb-7967b754451e\n\
         Challenge-Secret: 414cfc17-9b63-4e41-b33b-e4adb20b299c:tw0.6/ipv4\n\
         Info-Serial: 0\nContent-Type: application/json\nContent-Length: {}\n\n",
        body.len()
    );
    let (status, answer) = request_from(proxy, http, &head, &body).await;
    let v: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("need_challenge"))
    );
    let (chal, _) = recv(&game, 5000)
        .await
        .expect("the challenge went to the client");
    assert!(matches!(
        Packet::decode(&chal),
        Ok(Packet::Connless {
            message: Message::Challenge(_),
            ..
        })
    ));
    d.stop().await;
}
