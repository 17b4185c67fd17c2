//! Integration tests of the teeworlds faces over loopback: the 0.7 UDP master with its checker,
//! the 0.6 list face and DDNet's HTTP register / `servers.json`.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use muster_master::config::Config;
use muster_master::faces::teeworlds::ddnet::{self, DdnetSettings};
use muster_master::faces::teeworlds::{self as tw, TeeworldsSettings};
use muster_master::registry::{Face, Timestamp};
use muster_master::runtime::udp::Budgets;
use muster_master::table::{FaceStart, Socket};
use muster_master::{Master, MasterHandle};
use muster_proto::teeworlds_master::{MasterListQuery, Message, Packet, Token};
use muster_query::{Job, Options};
use serde_json::Value;
use tokio::net::UdpSocket;

use crate::TempDir;

const FIX: &str = "teeworlds_master/tw-0.7.5-udp-register";
const DD: &str = "teeworlds_master/ddnet-16.4-http-register";
const SERVER_TOKEN: [u8; 4] = [0xea, 0xc3, 0x12, 0x4c];

fn open(dir: &TempDir) -> MasterHandle {
    let c = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    Master::open(c, Timestamp::now()).unwrap().handle()
}

async fn udp() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

/// A UDP socket on `[::1]:0`, or `None` when the host has no IPv6 loopback.
async fn udp6() -> Option<UdpSocket> {
    UdpSocket::bind("[::1]:0").await.ok()
}

async fn recv(s: &UdpSocket, ms: u64) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = vec![0u8; 2048];
    let r = tokio::time::timeout(Duration::from_millis(ms), s.recv_from(&mut buf)).await;
    let (n, from) = r.ok()?.unwrap();
    buf.truncate(n);
    Some((buf, from))
}

struct Udp07 {
    master: SocketAddr,
    checker: SocketAddr,
    _stop: muster_master::CancellationToken,
}

async fn start07(handle: &MasterHandle, settings: TeeworldsSettings) -> Udp07 {
    start07_on(handle, settings, udp().await, udp().await)
}

fn start07_on(
    handle: &MasterHandle,
    settings: TeeworldsSettings,
    master: UdpSocket,
    checker: UdpSocket,
) -> Udp07 {
    start07_with(handle, settings, master, checker, Budgets::default())
}

fn start07_with(
    handle: &MasterHandle,
    settings: TeeworldsSettings,
    master: UdpSocket,
    checker: UdpSocket,
    budgets: Budgets,
) -> Udp07 {
    let (ma, ca) = (master.local_addr().unwrap(), checker.local_addr().unwrap());
    let tx = muster_master::CancellationToken::new();
    let rx = tx.clone();
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    let mut start = FaceStart::new(handle.clone(), rx);
    start.settings.set(settings);
    start.settings.set(budgets);
    tokio::spawn(start.serve(&tw::FACE07, vec![Socket::Udp(master), Socket::Udp(checker)]));
    Udp07 {
        master: ma,
        checker: ca,
        _stop: tx,
    }
}

async fn start06(
    handle: &MasterHandle,
    settings: TeeworldsSettings,
) -> (SocketAddr, muster_master::CancellationToken) {
    let s = udp().await;
    let a = s.local_addr().unwrap();
    let tx = muster_master::CancellationToken::new();
    let rx = tx.clone();
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    let mut start = FaceStart::new(handle.clone(), rx);
    start.settings.set(settings);
    tokio::spawn(start.serve(&tw::FACE06, vec![Socket::Udp(s)]));
    (a, tx)
}

/// The captured token request (server token `ea c3 12 4c`); returns the master's token.
async fn handshake(s: &UdpSocket, master: SocketAddr) -> [u8; 4] {
    let req = muster_testkit::fixture(&format!("{FIX}/01-server-to-master1-token-request.bin"));
    s.send_to(&req, master).await.unwrap();
    let (reply, from) = recv(s, 2000).await.expect("token reply");
    assert_eq!(from, master);
    assert_eq!(reply.len(), 12, "12-byte reply to a 520-byte request");
    assert_eq!(&reply[..8], &[0x04, 0, 0, 0xea, 0xc3, 0x12, 0x4c, 0x05]);
    reply[8..12].try_into().unwrap()
}

/// A captured 0.7 datagram with the stand-in's token ("MSTR") replaced by `ours`.
fn with_token(mut d: Vec<u8>, ours: [u8; 4]) -> Vec<u8> {
    assert_eq!(&d[1..5], b"MSTR");
    d[1..5].copy_from_slice(&ours);
    d
}

fn v07(ours: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0x21];
    d.extend_from_slice(&ours);
    d.extend_from_slice(&SERVER_TOKEN);
    d.extend_from_slice(payload);
    d
}

const REQ2: &[u8] = b"\xff\xff\xff\xffreq2";
const COU2: &[u8] = b"\xff\xff\xff\xffcou2";

/// Replays the captured 0.7.5 registration from `server` (its port is the game port).
async fn register07(server: &UdpSocket, m: &Udp07) {
    let port = server.local_addr().unwrap().port();
    let ours = handshake(server, m.master).await;
    // cou2 (fixture 03) -> siz2
    let cou2 = with_token(
        muster_testkit::fixture(&format!("{FIX}/03-server-cou2-count-request.bin")),
        ours,
    );
    server.send_to(&cou2, m.master).await.unwrap();
    let (siz2, _) = recv(server, 2000).await.expect("siz2");
    assert_eq!(&siz2[..17], &v07_reply(ours, b"\xff\xff\xff\xffsiz2")[..17]);
    // bea2 (fixture 07) with our game port
    let mut bea2 = with_token(
        muster_testkit::fixture(&format!("{FIX}/07-server-bea2-heartbeat.bin")),
        ours,
    );
    let n = bea2.len();
    bea2[n - 2..].copy_from_slice(&port.to_be_bytes());
    server.send_to(&bea2, m.master).await.unwrap();
    // fw?? from the checker, addressed with the server's token
    let (fw, from) = recv(server, 3000).await.expect("fw??");
    assert_eq!(from, m.checker, "fw?? comes from the checker socket");
    assert_eq!(fw, v07_reply(ours, b"\xff\xff\xff\xfffw??"));
    let fw_resp = with_token(
        muster_testkit::fixture(&format!("{FIX}/09-server-fw-response.bin")),
        ours,
    );
    server.send_to(&fw_resp, m.checker).await.unwrap();
    let mut oks = Vec::new();
    for _ in 0..2 {
        let (ok, from) = recv(server, 2000).await.expect("fwok");
        assert_eq!(ok, v07_reply(ours, b"\xff\xff\xff\xfffwok"));
        oks.push(from);
    }
    oks.sort();
    let mut want = vec![m.master, m.checker];
    want.sort();
    assert_eq!(oks, want, "fwok from both sockets");
}

/// What the master sends the server: `21 <server token> <master token> payload`.
fn v07_reply(ours: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0x21];
    d.extend_from_slice(&SERVER_TOKEN);
    d.extend_from_slice(&ours);
    d.extend_from_slice(payload);
    d
}

fn lis2_addrs(datagrams: &[Vec<u8>], header: usize) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for d in datagrams {
        let p = Packet::decode(d).unwrap();
        let Packet::Connless {
            message: Message::List(l),
            ..
        } = p
        else {
            panic!("not lis2: {p:?}")
        };
        assert_eq!(d.len(), header + 8 + 18 * l.entries().len());
        out.extend(l.entries().iter().map(|e| e.socket_addr()));
    }
    out
}

async fn recv_all(s: &UdpSocket, ms: u64) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Some((d, _)) = recv(s, ms).await {
        v.push(d);
        if v.len() > 64 {
            break;
        }
    }
    v
}

#[tokio::test]
async fn captured_075_registration_is_listed_by_req2_and_counted() {
    let dir = TempDir::new("tw07");
    let h = open(&dir);
    let m = start07(&h, TeeworldsSettings::default()).await;
    let server = udp().await;
    register07(&server, &m).await;
    h.publish();
    let game = server.local_addr().unwrap();
    let listed = h
        .publish()
        .listed()
        .iter()
        .map(|r| (r.key.addr.to_string(), r.face))
        .collect::<Vec<_>>();
    assert_eq!(listed, vec![(game.to_string(), Face::Teeworlds07)]);

    // A browser: handshake, cou2, req2.
    let browser = udp().await;
    let ours = handshake(&browser, m.master).await;
    browser.send_to(&v07(ours, COU2), m.master).await.unwrap();
    let (siz2, _) = recv(&browser, 2000).await.unwrap();
    assert_eq!(siz2, v07_reply(ours, b"\xff\xff\xff\xffsiz2\x00\x01"));
    browser.send_to(&v07(ours, REQ2), m.master).await.unwrap();
    let lists = recv_all(&browser, 300).await;
    assert_eq!(lis2_addrs(&lists, 9), vec![game]);

    // The same through muster-query's list machine.
    let addr = m.master;
    let mut rx = muster_query::spawn(
        vec![Job {
            tag: (),
            build: move |cfg| MasterListQuery::new_07(addr, cfg, Token([9, 8, 7, 6])),
        }],
        Options::default(),
    );
    let done = rx.recv().await.unwrap();
    let list = done.outcome.unwrap();
    let got: Vec<SocketAddr> = list.servers.iter().map(|s| s.address).collect();
    assert_eq!(got, vec![game]);
}

#[tokio::test]
async fn unanswered_check_sends_fwer_and_is_not_listed() {
    tokio::time::pause();
    let dir = TempDir::new("tw07fail");
    let h = open(&dir);
    let m = start07(&h, TeeworldsSettings::default()).await;
    let server = udp().await;
    let ours = handshake(&server, m.master).await;
    let mut bea2 = v07(ours, b"\xff\xff\xff\xffbea2");
    bea2.extend_from_slice(&server.local_addr().unwrap().port().to_be_bytes());
    server.send_to(&bea2, m.master).await.unwrap();
    let mut checks = 0;
    let mut fwer = false;
    for _ in 0..20 {
        tokio::time::advance(Duration::from_millis(1100)).await;
        while let Some((d, _)) = recv(&server, 50).await {
            if d.ends_with(b"fw??") {
                checks += 1;
            }
            if d.ends_with(b"fwer") {
                fwer = true;
            }
        }
        if fwer {
            break;
        }
    }
    assert_eq!(checks, 10, "ten fw?? before giving up");
    assert!(fwer);
    assert!(h.with_registry(|r| r.is_empty()), "nothing was stored");
}

#[tokio::test]
async fn garbage_and_bad_tokens_are_counted_and_others_still_served() {
    let dir = TempDir::new("tw07junk");
    let h = open(&dir);
    let m = start07(&h, TeeworldsSettings::default()).await;
    let (l06, _stop06) = start06(&h, TeeworldsSettings::default()).await;
    let junk = udp().await;
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x21],
        vec![0xff; 3],
        b"\x04\x00\x00\xff\xff\xff\xff\x05\x01\x02\x03\x04".to_vec(), // unpadded token request
        vec![0x04; 600],
        v07([1, 2, 3, 4], REQ2), // a token we never issued
        v07([1, 2, 3, 4], b"\xff\xff\xff\xffbea2\x20\x6f"),
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffreq2extra".to_vec(),
        vec![0x00; 1400],
    ];
    for g in &garbage {
        junk.send_to(g, m.master).await.unwrap();
        junk.send_to(g, m.checker).await.unwrap();
        junk.send_to(g, l06).await.unwrap();
    }
    assert!(recv(&junk, 300).await.is_none(), "garbage gets no answer");
    // Still serving: a registration and a list.
    let server = udp().await;
    register07(&server, &m).await;
    h.publish();
    let browser = udp().await;
    let ours = handshake(&browser, m.master).await;
    browser.send_to(&v07(ours, REQ2), m.master).await.unwrap();
    assert_eq!(lis2_addrs(&recv_all(&browser, 300).await, 9).len(), 1);
    let metrics = h.metrics();
    assert!(
        metrics.drops("malformed") >= 6,
        "{}",
        metrics.drops("malformed")
    );
    assert!(metrics.drops("bad_token") >= 2);
    assert!(metrics.drops("unexpected") >= 1);
}

fn fill(h: &MasterHandle, n: u32) -> Vec<SocketAddr> {
    let now = Timestamp::now();
    (0..n)
        .map(|i| {
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + i);
            let a = SocketAddr::new(IpAddr::V4(ip), 8303);
            let reg = ddnet::ddnet_registration(a);
            h.register(reg, now);
            a
        })
        .collect::<Vec<_>>()
        .tap(|_| {
            h.publish();
        })
}

trait Tap: Sized {
    fn tap(self, f: impl FnOnce(&Self)) -> Self {
        f(&self);
        self
    }
}
impl<T> Tap for T {}

#[tokio::test]
async fn list_06_splits_like_the_reference_and_counts() {
    let dir = TempDir::new("tw06");
    let h = open(&dir);
    let want = fill(&h, 160);
    let (l06, _stop) = start06(&h, TeeworldsSettings::default()).await;
    let qstat_like = udp().await;
    // qstat's lenient header (fixture 02) and the legacy reqt (fixture 01).
    let req2 = muster_testkit::fixture(
        "teeworlds_master/qstat-teem-udp-list/02-qstat-req2-list-request.bin",
    );
    let reqt = muster_testkit::fixture(
        "teeworlds_master/qstat-teem-udp-list/01-qstat-reqt-legacy-list-request.bin",
    );
    qstat_like.send_to(&reqt, l06).await.unwrap();
    qstat_like.send_to(&req2, l06).await.unwrap();
    let lists = recv_all(&qstat_like, 300).await;
    let sizes: Vec<usize> = lists.iter().map(Vec::len).collect();
    assert_eq!(
        sizes,
        vec![6 + 8 + 75 * 18, 6 + 8 + 75 * 18, 6 + 8 + 10 * 18]
    );
    assert!(
        lists.iter().all(|d| d[..6] == [0xff; 6]),
        "standard 0.6 header"
    );
    assert_eq!(lis2_addrs(&lists, 6), want);
    qstat_like
        .send_to(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffcou2", l06)
        .await
        .unwrap();
    let (siz2, _) = recv(&qstat_like, 1000).await.unwrap();
    assert_eq!(&siz2[6..], b"\xff\xff\xff\xffsiz2\x00\xa0");
}

#[tokio::test]
async fn list_06_amplification_per_source_is_bounded() {
    let dir = TempDir::new("tw06amp");
    let h = open(&dir);
    fill(&h, 1200);
    let settings = TeeworldsSettings::default();
    let (l06, _stop) = start06(&h, settings.clone()).await;
    let started = std::time::Instant::now();
    let attacker = udp().await;
    let req2 = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffreq2";
    let requests = 200usize;
    let mut sent = 0usize;
    let mut received = 0usize;
    let mut datagrams = 0usize;
    let reader = async {
        while let Some((d, _)) = recv(&attacker, 500).await {
            received += d.len();
            datagrams += 1;
        }
    };
    let writer = async {
        for _ in 0..requests {
            attacker.send_to(req2, l06).await.unwrap();
            sent += req2.len();
        }
    };
    tokio::join!(writer, reader);
    // The source's byte budget: 256 KiB at once, then 16 KiB/s; a list is sent whole or not.
    let secs = started.elapsed().as_secs_f64();
    let budget = 256.0 * 1024.0 + 16.0 * 1024.0 * secs;
    assert!((received as f64) <= budget, "{received} B in {secs:.1} s");
    assert!(h.metrics().drops("source_budget") > 0);
    let ratio = received as f64 / sent as f64;
    // Written to the stderr handle directly so that it shows without --nocapture.
    let _ = writeln!(
        std::io::stderr(),
        "teeworlds 0.6 list face, one source: {requests} req2 ({sent} B) -> {datagrams} datagrams \
         ({received} B): amplification {ratio:.1}x (byte budget 256 KiB, then 16 KiB/s)"
    );
    // Well-behaved other source still gets its list.
    let other = UdpSocket::bind("127.0.0.2:0").await;
    if let Ok(other) = other {
        other.send_to(req2, l06).await.unwrap();
        assert_eq!(recv_all(&other, 300).await.len(), 16);
    }
}

#[tokio::test]
async fn per_source_list_budget_on_the_07_face() {
    let dir = TempDir::new("tw07lim");
    let h = open(&dir);
    fill(&h, 3);
    let budgets = Budgets {
        list_bytes: muster_proto::limit::BucketConfig {
            burst: 200.0,
            per_second: 0.001,
        },
        ..Budgets::default()
    };
    let m = start07_with(
        &h,
        TeeworldsSettings::default(),
        udp().await,
        udp().await,
        budgets,
    );
    let browser = udp().await;
    let ours = handshake(&browser, m.master).await;
    for _ in 0..3 {
        browser.send_to(&v07(ours, REQ2), m.master).await.unwrap();
    }
    let got = recv_all(&browser, 300).await;
    let bytes: usize = got.iter().map(Vec::len).sum();
    assert!(!got.is_empty() && got.len() < 3, "{} lists", got.len());
    assert!(bytes <= 200);
    assert_eq!(h.metrics().drops("source_budget"), 3 - got.len() as u64);
}

// ---- DDNet HTTP ----

struct Http {
    addr: SocketAddr,
}

async fn start_http(h: &MasterHandle) -> Http {
    start_http_on(h, "127.0.0.1:0").await
}

async fn start_http_on(h: &MasterHandle, at: &str) -> Http {
    let mut chal = vec![Arc::new(udp().await)];
    if let Some(s) = udp6().await {
        chal.push(Arc::new(s));
    }
    let app = ddnet::router(h.clone(), chal, DdnetSettings::default());
    let stop = muster_master::CancellationToken::new();
    tokio::spawn(h.clone().run_publisher(stop.clone()));
    tokio::spawn(
        h.clone()
            .run_persister(Duration::from_secs(1), stop.clone()),
    );
    let l = tokio::net::TcpListener::bind(at).await.unwrap();
    let addr = l.local_addr().unwrap();
    // The daemon's HTTP runner: it stamps each request's peer and arrival time.
    tokio::spawn(muster_master::runtime::http::serve(
        l,
        app,
        None,
        Default::default(),
        Default::default(),
        Arc::new(h.clone()),
        stop,
    ));
    Http { addr }
}

async fn request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let r = crate::exchange(addr, head, body).await;
    (r.status, r.text())
}

/// A register POST with the captured headers for `scheme` on `port`.
async fn post(
    http: SocketAddr,
    scheme: &str,
    port: u16,
    extra: &str,
    body: Option<(&str, &[u8])>,
) -> (u16, Value) {
    let stream = if scheme == "tw-0.7+udp" {
        "tw0.7/ipv4"
    } else {
        "tw0.6/ipv4"
    };
    let (ctype, body) = body.unwrap_or(("", b""));
    let ctype = if ctype.is_empty() {
        String::new()
    } else {
        format!("Content-Type: {ctype}\n")
    };
    let head = format!(
        "POST /ddnet/15/register HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n\
         Address: {scheme}://connecting-address.invalid:{port}\n\
         Secret: 4ae14cf1-eb35-4068-89eb-7967b754451e\n\
         Challenge-Secret: 414cfc17-9b63-4e41-b33b-e4adb20b299c:{stream}\n\
         Info-Serial: 0\n{extra}{ctype}Content-Length: {}\n\n",
        body.len()
    );
    let (status, text) = request(http, &head, body).await;
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

fn status(v: &Value) -> &str {
    v["status"].as_str().unwrap_or("?")
}

#[tokio::test]
async fn ddnet_register_flow_with_challenge_delete_and_servers_json() {
    let dir = TempDir::new("ddnet");
    let h = open(&dir);
    let http = start_http(&h).await.addr;
    let (l06, _stop) = start06(&h, TeeworldsSettings::default()).await;
    let game = udp().await;
    let port = game.local_addr().unwrap().port();
    let body = muster_testkit::fixture(&format!("{DD}/01-http-request-body.bin"));
    let json = Some(("application/json", body.as_slice()));

    // tw0.6: no token -> need_challenge + chal datagram.
    let (s, v) = post(http, "tw-0.6+udp", port, "", json).await;
    assert_eq!((s, status(&v)), (200, "need_challenge"));
    let (chal, _) = recv(&game, 2000).await.expect("chal");
    assert_eq!(&chal[..14], b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffchal");
    let Packet::Connless {
        message: Message::Challenge(c),
        ..
    } = Packet::decode(&chal).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        c.secret(),
        b"414cfc17-9b63-4e41-b33b-e4adb20b299c:tw0.6/ipv4"
    );
    let token06 = String::from_utf8(c.token().to_vec()).unwrap();
    assert!(
        h.with_registry(|r| r.is_empty()),
        "nothing listed before the challenge"
    );

    // A wrong token is not accepted.
    let (s, v) = post(http, "tw-0.6+udp", port, "Challenge-Token: nope\n", json).await;
    assert_eq!((s, status(&v)), (200, "need_challenge"));
    let _ = recv(&game, 1000).await.expect("a new chal");

    let (s, v) = post(
        http,
        "tw-0.6+udp",
        port,
        &format!("Challenge-Token: {token06}\n"),
        json,
    )
    .await;
    assert_eq!((s, status(&v)), (200, "success"), "{v}");
    assert!(
        recv(&game, 200).await.is_none(),
        "no challenge with a current token"
    );

    // tw0.7: Connless-Token, no body (the info is the Secret's) -> need_challenge, 0.7 chal.
    let ct = "Connless-Token: ff0e2331\n";
    let (s, v) = post(http, "tw-0.7+udp", port, ct, None).await;
    assert_eq!((s, status(&v)), (200, "need_challenge"));
    let (chal7, _) = recv(&game, 2000).await.expect("0.7 chal");
    assert_eq!(
        &chal7[..17],
        b"\x21\xff\x0e\x23\x31\xff\xff\xff\xff\xff\xff\xff\xffchal"
    );
    let Packet::Connless {
        message: Message::Challenge(c7),
        ..
    } = Packet::decode(&chal7).unwrap()
    else {
        panic!()
    };
    let token07 = String::from_utf8(c7.token().to_vec()).unwrap();
    let (s, v) = post(
        http,
        "tw-0.7+udp",
        port,
        &format!("{ct}Challenge-Token: {token07}\n"),
        None,
    )
    .await;
    assert_eq!((s, status(&v)), (200, "success"), "{v}");

    // servers.json: one server, both addresses, the info exactly as registered.
    let doc = crate::get_json(http, "/ddnet/15/servers.json", 200).await;
    let servers = doc["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{doc}");
    let mut addrs: Vec<&str> = servers[0]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    addrs.sort_unstable();
    assert_eq!(
        addrs,
        vec![
            format!("tw-0.6+udp://127.0.0.1:{port}"),
            format!("tw-0.7+udp://127.0.0.1:{port}")
        ]
    );
    let registered: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(servers[0]["info"], registered);
    // The info sits once in the registry's info file (the master's data directory), not in
    // the heap, and only its bytes are there.
    let (stats, kept) = h.with_registry(|r| {
        let info = r
            .iter()
            .find_map(|rec| rec.ddnet().cloned())
            .unwrap()
            .info
            .clone();
        (r.info_file().unwrap().stats(), info)
    });
    assert!(kept.is_kept() && stats.in_file, "{stats:?}");
    let compact = serde_json::to_vec(&registered).unwrap();
    assert_eq!((stats.infos, stats.live), (1, compact.len() as u64));
    // The registry knows name and map (for the HTTP API), and the 0.6 face lists it.
    let name = h.publish().listed()[0]
        .info
        .as_ref()
        .unwrap()
        .name()
        .to_owned();
    assert_eq!(name, registered["name"].as_str().unwrap());
    let browser = udp().await;
    browser
        .send_to(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffreq2", l06)
        .await
        .unwrap();
    assert_eq!(
        lis2_addrs(&recv_all(&browser, 300).await, 6),
        vec![game.local_addr().unwrap()]
    );

    // Delete both streams; a second delete is an error.
    let del = "Action: delete\n";
    for scheme in ["tw-0.6+udp", "tw-0.7+udp"] {
        let head = format!(
            "POST /ddnet/15/register HTTP/1.1\nHost: x\nConnection: close\nAction: delete\n\
             Address: {scheme}://connecting-address.invalid:{port}\n\
             Secret: 4ae14cf1-eb35-4068-89eb-7967b754451e\nContent-Length: 0\n\n"
        );
        let (s, text) = request(http, &head, b"").await;
        assert_eq!((s, text.as_str()), (200, "{\"status\":\"success\"}\n"));
    }
    let (s, v) = post(http, "tw-0.6+udp", port, del, None).await;
    assert_eq!(s, 400);
    assert_eq!(
        v,
        serde_json::json!({"status":"error","message":"could not find registered server"})
    );
    let doc = crate::get_json(http, "/ddnet/15/servers.json", 200).await;
    assert_eq!(doc["servers"], serde_json::json!([]));
    assert!(h.with_registry(|r| r.is_empty()));
}

#[tokio::test]
async fn ddnet_register_errors_and_need_info() {
    let dir = TempDir::new("ddnet-err");
    let h = open(&dir);
    let http = start_http(&h).await.addr;
    let game = udp().await;
    let port = game.local_addr().unwrap().port();
    let body = muster_testkit::fixture(&format!("{DD}/01-http-request-body.bin"));

    // Body without a JSON content type -> 415; invalid JSON -> 400; missing header -> 400.
    let (s, _) = post(http, "tw-0.6+udp", port, "", Some(("text/plain", &body))).await;
    assert_eq!(s, 415);
    let (s, v) = post(
        http,
        "tw-0.6+udp",
        port,
        "",
        Some(("application/json", b"{nope")),
    )
    .await;
    assert_eq!((s, status(&v)), (400, "error"));
    let (s, v) = post(http, "tw-0.7+udp", port, "", None).await;
    assert_eq!(
        (s, status(&v)),
        (400, "error"),
        "0.7 without Connless-Token"
    );
    let head = "POST /ddnet/15/register HTTP/1.1\nHost: x\nConnection: close\n\
                Address: tw-0.6+udp://1.2.3.4:8303\nSecret: s\nChallenge-Secret: c:tw0.6/ipv4\n\
                Info-Serial: 0\nContent-Length: 0\n\n";
    let (s, _) = request(http, head, b"").await;
    assert_eq!(s, 400, "a host other than connecting-address.invalid");
    // Body over the limit -> 413.
    let big = vec![b' '; 40 * 1024];
    let (s, _) = post(
        http,
        "tw-0.6+udp",
        port,
        "",
        Some(("application/json", &big)),
    )
    .await;
    assert_eq!(s, 413);

    // A valid token but no info ever sent for this Secret -> need_info.
    let (_, v) = post(http, "tw-0.6+udp", port, "", None).await;
    assert_eq!(status(&v), "need_challenge");
    let (chal, _) = recv(&game, 2000).await.unwrap();
    let Packet::Connless {
        message: Message::Challenge(c),
        ..
    } = Packet::decode(&chal).unwrap()
    else {
        panic!()
    };
    let tok = String::from_utf8(c.token().to_vec()).unwrap();
    let (s, v) = post(
        http,
        "tw-0.6+udp",
        port,
        &format!("Challenge-Token: {tok}\n"),
        None,
    )
    .await;
    assert_eq!((s, status(&v)), (200, "need_info"));
    assert!(h.with_registry(|r| r.is_empty()));
    assert!(h.metrics().drops("malformed") >= 4);
}

#[tokio::test]
async fn ipv6_registration_list_and_http() {
    let (Some(master), Some(checker), Some(server), Some(browser)) =
        (udp6().await, udp6().await, udp6().await, udp6().await)
    else {
        return; // no IPv6 loopback on this host
    };
    let dir = TempDir::new("tw6");
    let h = open(&dir);
    let m = start07_on(&h, TeeworldsSettings::default(), master, checker);
    register07(&server, &m).await;
    h.publish();
    let game = server.local_addr().unwrap();
    let ours = handshake(&browser, m.master).await;
    browser.send_to(&v07(ours, REQ2), m.master).await.unwrap();
    assert_eq!(lis2_addrs(&recv_all(&browser, 300).await, 9), vec![game]);

    // DDNet over IPv6: the challenge goes to [::1], the URL is bracketed.
    let http = start_http_on(&h, "[::1]:0").await.addr;
    let dd = udp6().await.unwrap();
    let port = dd.local_addr().unwrap().port();
    let body = muster_testkit::fixture(&format!("{DD}/01-http-request-body.bin"));
    let json = Some(("application/json", body.as_slice()));
    let (_, v) = post(http, "tw-0.6+udp", port, "", json).await;
    assert_eq!(status(&v), "need_challenge");
    let (chal, _) = recv(&dd, 2000).await.expect("chal over IPv6");
    let Packet::Connless {
        message: Message::Challenge(c),
        ..
    } = Packet::decode(&chal).unwrap()
    else {
        panic!()
    };
    let tok = String::from_utf8(c.token().to_vec()).unwrap();
    let (_, v) = post(
        http,
        "tw-0.6+udp",
        port,
        &format!("Challenge-Token: {tok}\n"),
        json,
    )
    .await;
    assert_eq!(status(&v), "success");
    let doc = crate::get_json(http, "/ddnet/15/servers.json", 200).await;
    let addrs: Vec<&Value> = doc["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["addresses"].as_array().unwrap())
        .collect();
    assert!(
        addrs.contains(&&Value::from(format!("tw-0.6+udp://[::1]:{port}"))),
        "{doc}"
    );
}

#[tokio::test]
async fn servers_json_rebuilds_info_for_restored_and_07_records() {
    let dir = TempDir::new("ddnet-restored");
    let h = open(&dir);
    let now = Timestamp::now();
    let a: SocketAddr = "192.0.2.7:8303".parse().unwrap();
    let reg = ddnet::ddnet_registration(a);
    let key = reg.key.clone();
    h.register(reg, now);
    let info = muster_master::registry::PollInfo::from(muster_master::registry::PollFields {
        name: "restored".into(),
        map: "dm1".into(),
        game_type: "DM".into(),
        max_players: 8,
        password: Some(false),
        ..Default::default()
    });
    h.update_poll(&key, Some(info), now);
    // A 0.7 record without info is not in servers.json (browsers would drop it).
    let b: SocketAddr = "192.0.2.8:8303".parse().unwrap();
    let reg = tw::udp_registration(b, Face::Teeworlds07);
    let _kb = reg.key.clone();
    h.register(reg, now);
    let http = start_http(&h).await.addr;
    h.publish();
    let doc = crate::get_json(http, "/ddnet/15/servers.json", 200).await;
    assert_eq!(
        doc,
        serde_json::json!({"servers": [{
            "addresses": ["tw-0.6+udp://192.0.2.7:8303"],
            "info": {"max_clients": 8, "max_players": 8, "passworded": false, "game_type": "DM",
                     "name": "restored", "map": {"name": "dm1"}, "version": "", "clients": []}
        }]})
    );
}

/// The ETag of `GET /ddnet/15/servers.json` (it names one build of the document) and the body.
async fn servers_json_tag(http: SocketAddr, gzip: bool) -> (String, usize) {
    let accept = if gzip { "Accept-Encoding: gzip\n" } else { "" };
    let head =
        format!("GET /ddnet/15/servers.json HTTP/1.1\nHost: x\nConnection: close\n{accept}\n");
    let r = crate::exchange(http, &head, b"").await;
    let tag = r.header("etag").expect("an etag").to_owned();
    (tag, r.body.len())
}

#[tokio::test]
async fn servers_json_is_not_rebuilt_by_refreshes_that_change_nothing_listed() {
    let dir = TempDir::new("ddnet-doc");
    let h = open(&dir);
    let http = start_http(&h).await.addr;
    let body = muster_testkit::fixture(&format!("{DD}/01-http-request-body.bin"));
    let info =
        bytes::Bytes::from(ddnet::normalized_info(&body).expect("the captured info is JSON"));
    let register = |port: u16, secret: &str| {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = muster_master::registry::DdnetRegister {
            addr,
            secret: muster_master::registry::DdnetSecret::from(secret),
            serial: 0,
            info: Some(info.clone()),
            poll_info: None,
            url: Arc::from(format!("tw-0.6+udp://{addr}").as_str()),
        };
        h.ddnet_register(d, ddnet::ddnet_registration(addr), Timestamp::now())
    };
    register(8303, "secret-a");
    h.publish();
    let (plain, n) = servers_json_tag(http, false).await;
    let (gz, _) = servers_json_tag(http, true).await;
    assert!(n > 100, "the document lists the server");

    // Refreshes that change nothing listed: new snapshots, the same document and gzip form.
    for _ in 0..3 {
        register(8303, "secret-a");
        let before = h.snapshot().version();
        assert!(h.publish().version() > before, "a refresh publishes");
        assert_eq!(servers_json_tag(http, false).await.0, plain);
        assert_eq!(servers_json_tag(http, true).await.0, gz);
    }

    // A new server is new content: a new document.
    register(8304, "secret-b");
    h.publish();
    let (plain2, n2) = servers_json_tag(http, false).await;
    assert_ne!(plain2, plain);
    assert!(n2 > n);
}
