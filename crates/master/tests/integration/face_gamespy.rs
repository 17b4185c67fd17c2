//! Integration tests of the gamespy face over loopback: the UDP face, the TCP list server and
//! the UT2003 router run on `127.0.0.1:0` with a `MasterHandle` from `Master::open`; fake game
//! servers heartbeat, answer `\secure\` and `\status\` with the proto encoders.

use std::collections::BTreeMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muster_master::config::Config;
use muster_master::faces::gamespy::{self, GameSpySettings};
use muster_master::registry::{GameAddr, ServerKey, Timestamp, Verification};
use muster_master::runtime::udp::Budgets;
use muster_master::runtime::{bind_tcp, bind_udp};
use muster_master::table::{FaceStart, Socket};
use muster_master::{Master, MasterHandle};
use muster_proto::gamespy_master::packet::GREETING_LEN;
use muster_proto::gamespy_master::{
    Challenge, Enctype, Greeting, Key, ListClientConfig, ListForm, ListReply, QueryReply, Secure,
    validate_string,
};
use muster_proto::gamespy1::packet::Pair;
use muster_proto::gamespy1::reply::{ReplyStyle, encode_reply};
use muster_proto::limit::BucketConfig;
use muster_proto::query::QueryConfig;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};

use crate::{TempDir, get};

const WAIT: Duration = Duration::from_secs(5);

/// The face under test with generous buckets (tests that check limits set their own).
pub(crate) struct Face {
    pub(crate) handle: MasterHandle,
    pub(crate) udp: SocketAddr,
    pub(crate) tcp: SocketAddr,
    pub(crate) http: SocketAddr,
    stop: muster_master::CancellationToken,
    _dir: TempDir,
}

impl Drop for Face {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub(crate) fn relaxed() -> GameSpySettings {
    let lots = BucketConfig::one_every(10_000, Duration::from_millis(1));
    let mut s = GameSpySettings {
        heartbeat_bucket: lots,
        list_bucket: lots,
        poller: false,
        ..GameSpySettings::default()
    };
    s.status.retry = QueryConfig {
        attempt_timeout: Duration::from_millis(300),
        retries: 1,
    };
    s.conn.max_per_source = 64;
    s
}

pub(crate) async fn start(settings: GameSpySettings) -> Face {
    start_on("127.0.0.1:0".parse().unwrap(), settings).await
}

pub(crate) async fn start_on(bind: SocketAddr, settings: GameSpySettings) -> Face {
    start_with(bind, settings, Budgets::default()).await
}

pub(crate) async fn start_with(
    bind: SocketAddr,
    settings: GameSpySettings,
    budgets: Budgets,
) -> Face {
    let dir = TempDir::new("gamespy");
    let config = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    let master = Master::open(config, Timestamp::now()).unwrap();
    let handle = master.handle();
    let udp = bind_udp(bind).unwrap();
    let tcp = bind_tcp(bind).unwrap();
    let http = bind_tcp(bind).unwrap();
    let addrs = (
        udp.local_addr().unwrap(),
        tcp.local_addr().unwrap(),
        http.local_addr().unwrap(),
    );
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    let mut faces = FaceStart::new(handle.clone(), rx);
    faces.settings.set(settings);
    faces.settings.set(budgets);
    tokio::spawn(faces.serve(&gamespy::UDP_FACE, vec![Socket::Udp(udp)]));
    tokio::spawn(faces.serve(&gamespy::TCP_FACE, vec![Socket::Tcp(tcp)]));
    let app = gamespy::router(handle.clone());
    tokio::spawn(async move { axum::serve(http, app).await });
    Face {
        handle,
        udp: addrs.0,
        tcp: addrs.1,
        http: addrs.2,
        stop,
        _dir: dir,
    }
}

/// Polls `cond` every 10 ms for at most [`WAIT`].
pub(crate) async fn until(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + WAIT;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

pub(crate) fn state(h: &MasterHandle, game: &str, addr: SocketAddr) -> Option<Verification> {
    let key = ServerKey::new(game, GameAddr::Ip(addr));
    h.with_registry(|r| r.get(&key).map(|r| r.state))
}

fn counter(h: &MasterHandle, line: &str) -> u64 {
    let text = muster_http::metrics::render(h.metrics(), &BTreeMap::new());
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or(0)
}

async fn recv(sock: &UdpSocket, within: Duration) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = vec![0u8; 65_536];
    match tokio::time::timeout(within, sock.recv_from(&mut buf)).await {
        Ok(Ok((n, from))) => Some((buf[..n].to_vec(), from)),
        _ => None,
    }
}

/// A fake game server's `\status\` responder: answers every datagram with `gamename`,
/// `hostport` and `hostname` in `style`, counting requests; stops answering when `mute` is set.
pub(crate) struct Responder {
    pub(crate) addr: SocketAddr,
    pub(crate) requests: Arc<AtomicUsize>,
    pub(crate) mute: Arc<AtomicBool>,
    pub(crate) sock: Arc<UdpSocket>,
}

pub(crate) async fn responder(
    gamename: &'static str,
    hostport: u16,
    style: ReplyStyle,
) -> Responder {
    let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let r = Responder {
        addr: sock.local_addr().unwrap(),
        requests: Arc::new(AtomicUsize::new(0)),
        mute: Arc::new(AtomicBool::new(false)),
        sock: Arc::clone(&sock),
    };
    let (requests, mute) = (Arc::clone(&r.requests), Arc::clone(&r.mute));
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            if &buf[..n] != b"\\status\\" {
                continue;
            }
            requests.fetch_add(1, Ordering::Relaxed);
            if mute.load(Ordering::Relaxed) {
                continue;
            }
            let section = vec![
                Pair::new("gamename", gamename).unwrap(),
                Pair::new("hostname", "Lab server").unwrap(),
                Pair::new("hostport", hostport.to_string()).unwrap(),
                Pair::new("mapname", "DM-Lab").unwrap(),
            ];
            for d in encode_reply(style, 7, &[section]) {
                let _ = sock.send_to(&d, from).await;
            }
        }
    });
    r
}

fn heartbeat(port: u16, game: &str) -> Vec<u8> {
    format!("\\heartbeat\\{port}\\gamename\\{game}").into_bytes()
}

/// A UE-family server: heartbeats from an uplink socket, answers `\secure\` with `key`
/// (or a wrong value), and a `\status\` responder on its query port. Returns the query address.
async fn secure_server(
    face: &Face,
    game: &str,
    key: &[u8],
    honest: bool,
) -> (SocketAddr, Responder) {
    let query = responder("ut2", 7777, ReplyStyle::Packed).await;
    let uplink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    beat_and_answer(face, &uplink, query.addr.port(), game, key, honest).await;
    (query.addr, query)
}

/// Heartbeats from `uplink`, answers the `\secure\` that comes back (rightly or not), and
/// returns once the face has processed the answer.
async fn beat_and_answer(
    face: &Face,
    uplink: &UdpSocket,
    qport: u16,
    game: &str,
    key: &[u8],
    honest: bool,
) {
    uplink
        .send_to(&heartbeat(qport, game), face.udp)
        .await
        .unwrap();
    let (d, from) = recv(uplink, WAIT).await.expect("a \\secure\\ challenge");
    assert_eq!(from, face.udp);
    let secure = Secure::decode(&d).unwrap();
    assert_eq!(d.len(), 14);
    let v = if honest {
        validate_string(&secure.challenge, key, Enctype::Zero).unwrap()
    } else {
        "AAAAAAAA".to_owned()
    };
    let answer = format!("\\validate\\{v}\\final\\\\queryid\\1.1");
    uplink.send_to(answer.as_bytes(), face.udp).await.unwrap();
    // The face handles one socket's datagrams in order: once `\basic\` is answered, the
    // validate before it has been processed.
    uplink.send_to(b"\\basic\\", face.udp).await.unwrap();
    let (d, _) = recv(uplink, WAIT).await.expect("basic reply");
    QueryReply::decode(&d).unwrap();
}

/// Reads a list over raw TCP: returns the greeting and what followed, sending `request`
/// (built from the greeting's challenge) first.
pub(crate) async fn raw_list(
    tcp: SocketAddr,
    request: impl FnOnce(&Challenge) -> Vec<u8>,
) -> (Greeting, Vec<u8>) {
    let fut = async {
        let mut s = TcpStream::connect(tcp).await.unwrap();
        let mut g = [0u8; GREETING_LEN];
        s.read_exact(&mut g).await.unwrap();
        let greeting = Greeting::decode(&g).unwrap();
        s.write_all(&request(&greeting.challenge)).await.unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        (greeting, rest)
    };
    tokio::time::timeout(WAIT, fut).await.unwrap()
}

fn auth(game: &str, key: &[u8], c: &Challenge) -> String {
    let v = validate_string(c, key, Enctype::Zero).unwrap();
    format!("\\gamename\\{game}\\location\\0\\validate\\{v}\\final\\")
}

fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!(),
    }
}

#[tokio::test]
async fn secure_heartbeat_listed_after_validate_in_text_cmp_and_ut2003() {
    let face = start(relaxed()).await;
    let (q, query) = secure_server(&face, "ut2", b"Lw7x0R", true).await;
    assert_eq!(
        state(&face.handle, "ut2", q),
        Some(Verification::Verified),
        "listed after the right validate"
    );
    // The face then asks the query port for hostport (game port) once.
    let h = face.handle.clone();
    let key = ServerKey::new("ut2", GameAddr::Ip(q));
    // In the published view, which every list reads (the publisher runs every 50 ms).
    assert!(
        until(|| {
            h.snapshot()
                .listed()
                .iter()
                .any(|r| r.key == key && r.game_port == Some(7777))
        })
        .await
    );
    assert_eq!(query.requests.load(Ordering::Relaxed), 1);

    // Text list read by the proto client, as UBrowser would.
    let cfg = ListClientConfig::new(Key::new("ut2").unwrap(), ListForm::Text);
    let list = muster_query::lists::gamespy_list(face.tcp, cfg)
        .await
        .unwrap();
    let got: Vec<SocketAddr> = list.servers.iter().map(|s| s.address).collect();
    assert_eq!(got, vec![q]);

    // cmp list over raw TCP: exact greeting, then 6-byte records + \final\, then close.
    let (g, rest) = raw_list(face.tcp, |c| {
        let mut m = auth("ut2", b"Lw7x0R", c).into_bytes();
        m.extend_from_slice(b"\\list\\cmp\\gamename\\ut2\\final\\");
        m
    })
    .await;
    let mut greeting = Vec::new();
    g.encode(&mut greeting);
    assert!(greeting.starts_with(b"\\basic\\\\secure\\") && greeting.len() == 21);
    assert_eq!(rest.len(), 6 + 7);
    let reply = ListReply::decode(&rest, ListForm::Cmp).unwrap();
    assert_eq!(reply.servers, vec![v4(q)]);

    // Another game's list does not show it.
    let (_, rest) = raw_list(face.tcp, |c| {
        let mut m = auth("ut", b"Z5Nfb0", c).into_bytes();
        m.extend_from_slice(b"\\list\\\\gamename\\ut\\final\\");
        m
    })
    .await;
    assert_eq!(rest, b"\\final\\");

    // The UT2003 text list: IP TAB game port TAB GameSpy port.
    let expect = format!("127.0.0.1\t7777\t{}\n", q.port());
    assert_eq!(
        get(face.http, "/serverlist/ut2.txt").await,
        (200, expect.clone())
    );
    assert_eq!(
        get(face.http, "/serverlist/full-all.txt").await,
        (200, expect)
    );
    assert_eq!(
        get(face.http, "/serverlist/demo-all.txt").await,
        (200, String::new())
    );
    assert_eq!(get(face.http, "/serverlist/ut.txt").await.0, 404);
}

#[tokio::test]
async fn wrong_validate_is_never_listed() {
    let face = start(relaxed()).await;
    let (q, _query) = secure_server(&face, "ut", b"Z5Nfb0", false).await;
    assert_eq!(
        state(&face.handle, "ut", q),
        None,
        "nothing is stored before the proof"
    );
    assert_eq!(
        counter(&face.handle, "muster_verifications_failed_total"),
        1
    );
    let (_, rest) = raw_list(face.tcp, |c| {
        let mut m = auth("ut", b"Z5Nfb0", c).into_bytes();
        m.extend_from_slice(b"\\list\\\\gamename\\ut\\final\\");
        m
    })
    .await;
    assert_eq!(rest, b"\\final\\", "not listed");
}

#[tokio::test]
async fn serious_sam_verified_by_status_and_listed_as_cmp() {
    let face = start(relaxed()).await;
    // Stock 1.10: heartbeats from its query socket as `serioussamse`, answers as `serioussam`.
    let sam = responder("serioussam", 25600, ReplyStyle::SeriousSam).await;
    sam.sock
        .send_to(&heartbeat(sam.addr.port(), "serioussamse"), face.udp)
        .await
        .unwrap();
    let h = face.handle.clone();
    assert!(until(|| state(&h, "serioussamse", sam.addr) == Some(Verification::Verified)).await);
    assert_eq!(sam.requests.load(Ordering::Relaxed), 1);

    // The Serious Sam client's one buffer (spec §5.3): two \final\ tokens, cmp, read to close.
    let (_, rest) = raw_list(face.tcp, |c| {
        let v = validate_string(c, b"AKbna4", Enctype::Zero).unwrap();
        format!(
            "\\gamename\\serioussamse\\enctype\\0\\validate\\{v}\\final\\\\queryid\\1.1\\list\\cmp\\gamename\\serioussamse\\gamever\\1.05\\final\\"
        )
        .into_bytes()
    })
    .await;
    let reply = ListReply::decode(&rest, ListForm::Cmp).unwrap();
    assert_eq!(reply.servers, vec![v4(sam.addr)]);
    // Game port from the status reply's hostport.
    let key = ServerKey::new("serioussamse", GameAddr::Ip(sam.addr));
    let port = face
        .handle
        .with_registry(|r| r.get(&key).unwrap().game_port);
    assert_eq!(port, Some(25600));

    // A server answering with another game's name is not verified.
    let liar = responder("ut", 7777, ReplyStyle::SeriousSam).await;
    liar.sock
        .send_to(&heartbeat(liar.addr.port(), "serioussamse"), face.udp)
        .await
        .unwrap();
    let l = Arc::clone(&liar.requests);
    assert!(until(|| l.load(Ordering::Relaxed) == 1).await);
    let h = face.handle.clone();
    assert!(until(|| h.metrics().drops("status_gamename") == 1).await);
    assert_eq!(state(&face.handle, "serioussamse", liar.addr), None);

    // `\statechanged` triggers a re-check; no answer de-lists.
    sam.mute.store(true, Ordering::Relaxed);
    let mut hb = heartbeat(sam.addr.port(), "serioussamse");
    hb.extend_from_slice(b"\\statechanged");
    sam.sock.send_to(&hb, face.udp).await.unwrap();
    let h = face.handle.clone();
    assert!(until(|| state(&h, "serioussamse", sam.addr) == Some(Verification::Delisted)).await);
    assert_eq!(sam.requests.load(Ordering::Relaxed), 3, "two tries");
}

#[tokio::test]
async fn reverification_delists_on_a_wrong_validate_and_relists_on_a_right_one() {
    let mut settings = relaxed();
    settings.reverify_interval = Duration::ZERO;
    settings.challenges.min_interval = Duration::ZERO;
    let face = start(settings).await;
    let query = responder("ut", 7777, ReplyStyle::Packed).await;
    let uplink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = query.addr;
    beat_and_answer(&face, &uplink, q.port(), "ut", b"Z5Nfb0", true).await;
    assert_eq!(state(&face.handle, "ut", q), Some(Verification::Verified));
    // Due for re-verification at once: the next heartbeat is challenged again.
    beat_and_answer(&face, &uplink, q.port(), "ut", b"Z5Nfb0", false).await;
    assert_eq!(state(&face.handle, "ut", q), Some(Verification::Delisted));
    beat_and_answer(&face, &uplink, q.port(), "ut", b"Z5Nfb0", true).await;
    assert_eq!(state(&face.handle, "ut", q), Some(Verification::Verified));
}

#[tokio::test]
async fn verified_servers_expire_after_their_lifetime() {
    let face = start(relaxed()).await;
    let (q, _query) = secure_server(&face, "ut", b"Z5Nfb0", true).await;
    let sam = responder("serioussam", 25600, ReplyStyle::SeriousSam).await;
    sam.sock
        .send_to(&heartbeat(sam.addr.port(), "serioussamse"), face.udp)
        .await
        .unwrap();
    let h = face.handle.clone();
    assert!(until(|| state(&h, "serioussamse", sam.addr) == Some(Verification::Verified)).await);
    assert_eq!(state(&face.handle, "ut", q), Some(Verification::Verified));
    let now = Timestamp::now();
    face.handle.prune(now.plus(Duration::from_secs(299)));
    assert_eq!(state(&face.handle, "ut", q), Some(Verification::Verified));
    face.handle.prune(now.plus(Duration::from_secs(301)));
    assert_eq!(state(&face.handle, "ut", q), None, "Unreal family: 300 s");
    assert!(state(&face.handle, "serioussamse", sam.addr).is_some());
    face.handle.prune(now.plus(Duration::from_secs(571)));
    assert_eq!(
        state(&face.handle, "serioussamse", sam.addr),
        None,
        "Serious Sam: 570 s"
    );
}

#[tokio::test]
async fn garbage_is_counted_and_others_still_served() {
    let face = start(relaxed()).await;
    let junk = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let big = vec![b'\\'; 2000];
    let datagrams: [&[u8]; 10] = [
        b"",
        b"hello",
        b"\\heartbeat\\notaport\\gamename\\ut",
        b"\\heartbeat\\7778\\gamename\\quake3",
        b"\\heartbeat\\0\\gamename\\ut2",
        b"\\validate\\AAAAAAAA\\final\\",
        b"\\echo\\loop",
        b"\\secure\\AB",
        b"\\whatever\\",
        &big,
    ];
    for d in datagrams {
        junk.send_to(d, face.udp).await.unwrap();
    }
    // TCP garbage: an endless request, and a list before authentication.
    let mut s = TcpStream::connect(face.tcp).await.unwrap();
    let _ = s.write_all(&[b'x'; 4200]).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut rest)).await;
    assert_eq!(rest.len(), 21, "greeting only");
    let (_, rest) = raw_list(face.tcp, |_| b"\\list\\\\gamename\\ut\\final\\".to_vec()).await;
    assert!(rest.is_empty());

    // A well-behaved server and client are still served.
    let (q, _query) = secure_server(&face, "ut", b"Z5Nfb0", true).await;
    assert_eq!(state(&face.handle, "ut", q), Some(Verification::Verified));
    let m = face.handle.metrics();
    assert_eq!(
        m.drops("malformed"),
        4 + 1,
        "empty, text, bad port, short challenge; list before auth"
    );
    assert_eq!(m.drops("unknown_game"), 1);
    assert_eq!(m.drops("port_zero"), 1);
    assert_eq!(m.drops("unexpected_validate"), 1);
    assert_eq!(m.drops("echo"), 1);
    assert_eq!(m.drops("unknown_query"), 1);
    assert_eq!(m.drops("too_large"), 2, "udp and tcp");
}

#[tokio::test]
async fn client_validate_counted_and_enforced_only_when_configured() {
    // qstat's fixed dummy validate as `gamespy2` (spec §5.3).
    let qstat = |_: &Challenge| {
        b"\\gamename\\gamespy2\\gamever\\020109017\\location\\5\\validate\\12345678\\final\\\\list\\\\gamename\\ut\\final\\".to_vec()
    };
    let face = start(relaxed()).await;
    let (_, rest) = raw_list(face.tcp, qstat).await;
    assert_eq!(rest, b"\\final\\", "served by default");
    assert_eq!(face.handle.metrics().drops("client_validate"), 1);

    let strict = start(GameSpySettings {
        require_client_validate: true,
        ..relaxed()
    })
    .await;
    let (_, rest) = raw_list(strict.tcp, qstat).await;
    assert!(rest.is_empty(), "closed without a list");
    let (_, rest) = raw_list(strict.tcp, |c| {
        let mut m = auth("gamespy2", b"d4kZca", c).into_bytes();
        m.extend_from_slice(b"\\list\\\\gamename\\ut\\final\\");
        m
    })
    .await;
    assert_eq!(rest, b"\\final\\", "a right validate as gamespy2 is served");
    // Unknown list games and enctype 2 are refused either way.
    let (_, rest) = raw_list(face.tcp, |c| {
        let mut m = auth("ut", b"Z5Nfb0", c).into_bytes();
        m.extend_from_slice(b"\\list\\\\gamename\\quake3\\final\\");
        m
    })
    .await;
    assert!(rest.is_empty());
    let (_, rest) = raw_list(face.tcp, |c| {
        let v = validate_string(c, b"Z5Nfb0", Enctype::Two).unwrap();
        format!("\\gamename\\ut\\enctype\\2\\validate\\{v}\\final\\\\list\\\\gamename\\ut\\final\\")
            .into_bytes()
    })
    .await;
    assert!(rest.is_empty());
}

#[tokio::test]
async fn per_source_limits() {
    let mut settings = relaxed();
    settings.heartbeat_bucket = BucketConfig::one_every(4, Duration::from_secs(10));
    settings.list_bucket = BucketConfig::one_every(2, Duration::from_secs(5));
    // Own-face replies spend the source's byte budget: about two `\basic\` answers here.
    let budgets = Budgets {
        list_bytes: BucketConfig {
            burst: 220.0,
            per_second: 0.001,
        },
        ..Budgets::default()
    };
    let face = start_with("127.0.0.1:0".parse().unwrap(), settings, budgets).await;

    // Heartbeats of 10 new servers from one IP: 4 challenges (the burst), 6 refused.
    let mut uplinks = Vec::new();
    for i in 0..10u16 {
        let u = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        u.send_to(&heartbeat(20_000 + i, "ut"), face.udp)
            .await
            .unwrap();
        uplinks.push(u);
    }
    let mut challenged = 0;
    for u in &uplinks {
        if recv(u, Duration::from_millis(300)).await.is_some() {
            challenged += 1;
        }
    }
    assert_eq!(challenged, 4);
    assert_eq!(counter(&face.handle, "muster_rate_limited_total"), 6);

    // Own-face queries: as many as the byte budget holds.
    let q = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for _ in 0..5 {
        q.send_to(b"\\basic\\", face.udp).await.unwrap();
    }
    let mut replies = Vec::new();
    while let Some((d, _)) = recv(&q, Duration::from_millis(300)).await {
        replies.push(d.len());
    }
    assert!(!replies.is_empty() && replies.len() < 5, "{replies:?}");
    assert!(replies.iter().sum::<usize>() <= 220);
    assert_eq!(
        face.handle.metrics().drops("source_budget"),
        5 - replies.len() as u64
    );

    // List connections: burst 2, the third is closed at once without a greeting.
    for want in [21usize, 21, 0] {
        let mut s = TcpStream::connect(face.tcp).await.unwrap();
        let mut b = Vec::new();
        s.write_all(b"\\gamename\\ut\\validate\\x\\final\\\\list\\\\gamename\\ut\\final\\")
            .await
            .unwrap_or(());
        let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut b)).await;
        assert_eq!(b.len().min(21), want);
    }

    // Servers per source: the registry cap (sized for a hosting box) bounds the listed records.
    let cap = face.handle.with_registry(|r| r.config().max_per_source);
    assert_eq!(cap, muster_master::registry::DEFAULT_MAX_PER_SOURCE);
}

/// One source sends every kind of datagram at full speed, as a spoofer could with a forged
/// source address; everything the face sends back is counted. Prints the ratio. Challenges are
/// smaller than the heartbeats that cause them; everything larger spends the source's byte
/// budget (256 KiB, then 16 KiB/s), so what one source can draw is bounded by it.
#[tokio::test]
#[allow(clippy::print_stderr)] // the measured ratio is this test's output
async fn amplification_of_one_spoofing_source_is_bounded_by_its_budget() {
    let face = start(GameSpySettings::default()).await;
    let src = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let mut sent = 0usize;
    for i in 0..500u16 {
        let d: Vec<u8> = match i % 5 {
            0 => heartbeat(30_000 + i, "ut"),
            1 => heartbeat(30_000 + i, "serioussamse"),
            2 => b"\\status\\".to_vec(),
            3 => b"\\basic\\".to_vec(),
            _ => b"\\secure\\ABCDEF".to_vec(),
        };
        sent += d.len();
        src.send_to(&d, face.udp).await.unwrap();
    }
    let mut received = 0usize;
    let mut challenges = 0usize;
    let mut n = 0;
    while let Some((d, _)) = recv(&src, Duration::from_millis(500)).await {
        if d.starts_with(b"\\secure\\") {
            challenges += d.len();
        }
        received += d.len();
        n += 1;
    }
    #[allow(clippy::cast_precision_loss)]
    let ratio = received as f64 / sent as f64;
    eprintln!(
        "gamespy udp, one source: {sent} bytes in (500 datagrams), {received} bytes out ({n} \
         datagrams, {challenges} of them challenges), ratio {ratio:.3}"
    );
    assert!(
        challenges <= 100 * 30,
        "one challenge per heartbeat, smaller than it"
    );
    let secs = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let budget = 256.0 * 1024.0 + 16.0 * 1024.0 * secs + challenges as f64;
    #[allow(clippy::cast_precision_loss)]
    let got = received as f64;
    assert!(got <= budget, "{received} bytes out in {secs:.1} s");
}

#[tokio::test]
#[allow(clippy::print_stderr)] // says why it skipped
async fn ipv6_socket_answers_queries_and_drops_heartbeats() {
    let Ok(probe) = std::net::UdpSocket::bind("[::1]:0") else {
        eprintln!("skipped: no IPv6 loopback");
        return;
    };
    drop(probe);
    let face = start_on("[::1]:0".parse().unwrap(), relaxed()).await;
    let s = UdpSocket::bind("[::1]:0").await.unwrap();
    s.send_to(&heartbeat(7778, "ut"), face.udp).await.unwrap();
    s.send_to(b"\\basic\\", face.udp).await.unwrap();
    let (d, _) = recv(&s, WAIT).await.expect("basic over IPv6");
    let r = QueryReply::decode(&d).unwrap();
    assert_eq!(r.sections.len(), 1);
    assert_eq!(face.handle.metrics().drops("ipv6_heartbeat"), 1);
    let (_, rest) = raw_list(face.tcp, |c| {
        let mut m = auth("ut", b"Z5Nfb0", c).into_bytes();
        m.extend_from_slice(b"\\list\\\\gamename\\ut\\final\\");
        m
    })
    .await;
    assert_eq!(rest, b"\\final\\", "list over IPv6 TCP");
    assert_eq!(
        get(face.http, "/serverlist/ut2004.txt").await,
        (200, String::new())
    );
}

/// Shutdown waits for the list connections still open: `run_tcp` returns only once an open
/// conversation (greeted, its request not sent) has ended, and the client then sees the
/// connection closed without a list.
#[tokio::test]
async fn shutdown_drains_open_list_connections() {
    let dir = TempDir::new("gamespy-drain");
    let config = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    let master = Master::open(config, Timestamp::now()).unwrap();
    let handle = master.handle();
    let tcp = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = tcp.local_addr().unwrap();
    let settings = GameSpySettings {
        // Far longer than the test: only the shutdown can end the connection.
        tcp_total_timeout: Duration::from_secs(3600),
        ..relaxed()
    };
    let stop = muster_master::CancellationToken::new();
    let ended = Arc::new(AtomicBool::new(false));
    let served = {
        let (handle, stop, ended) = (handle.clone(), stop.clone(), Arc::clone(&ended));
        tokio::spawn(async move {
            let mut faces = FaceStart::new(handle, stop);
            faces.settings.set(settings);
            faces
                .serve(&gamespy::TCP_FACE, vec![Socket::Tcp(tcp)])
                .await;
            ended.store(true, Ordering::SeqCst);
        })
    };
    let mut c = TcpStream::connect(addr).await.unwrap();
    let mut greeting = [0u8; GREETING_LEN];
    c.read_exact(&mut greeting).await.unwrap();
    assert!(!ended.load(Ordering::SeqCst));
    stop.cancel();
    tokio::time::timeout(WAIT, served).await.unwrap().unwrap();
    assert!(ended.load(Ordering::SeqCst));
    // The connection was closed before `run_tcp` returned: the client reads its end (no list)
    // at once, where a detached connection task would keep it open for the total timeout.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(WAIT, c.read_to_end(&mut rest))
        .await
        .expect("closed by the shutdown")
        .unwrap_or(0);
    assert_eq!(n, 0, "no list after the shutdown: {rest:?}");
}
