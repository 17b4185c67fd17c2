//! One flood of the whole daemon (`Master::run`, every face on `127.0.0.1:0`): flooding sources
//! on 127.0.0.3–5 send garbage and list requests at full speed, open TCP connections that send
//! junk or stay idle, and send HTTP junk, bounded in count and time; meanwhile a well-behaved
//! client on 127.0.0.2 gets its full list from every face. The drop counters must have risen;
//! the amplification ratio (bytes out / bytes in) of the flooding source is printed per UDP
//! face. Nothing here is timed: the speed of the flood only changes how much is dropped.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muster_master::MasterHandle;
use muster_master::faces::teeworlds::ddnet;
use muster_master::registry::{
    Face, GameAddr, Outcome, PollFields, PollInfo, Registration, ServerKey, Timestamp,
};
use muster_proto::Protocol;
use muster_proto::gamespy_master::packet::GREETING_LEN;
use muster_proto::gamespy_master::{Enctype, Greeting, validate_string};
use muster_proto::limit::SourceKey;
use muster_proto::teeworlds_master::{Message, Packet};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};

use crate::{Daemon, TempDir, config, loopback};

/// Datagrams each flooding socket sends at most.
const FLOOD_DATAGRAMS: usize = 3000;
/// TCP connections per flooded TCP face (junk and idle together).
const FLOOD_CONNECTIONS: usize = 60;
/// HTTP junk requests.
const FLOOD_HTTP: usize = 150;
/// No flood task runs longer than this.
const FLOOD_TIME: Duration = Duration::from_secs(8);
const WAIT: Duration = Duration::from_secs(10);

const GOOD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const UDP_FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const TCP_FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);
const HTTP_FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 5);

/// The 0.7 token request of a 0.7.5 server (and its token, `SERVER_TOKEN`).
const TW07_TOKEN_REQUEST: &str =
    "teeworlds_master/tw-0.7.5-udp-register/01-server-to-master1-token-request.bin";
const SERVER_TOKEN: [u8; 4] = [0xea, 0xc3, 0x12, 0x4c];
const REQ2_06: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffreq2";

/// The daemon with every face on loopback.
fn start(dir: &TempDir) -> Daemon {
    let mut c = config(dir);
    let l = &mut c.listen;
    (l.gameagent, l.gamespy_udp, l.gamespy_tcp) = (loopback(), loopback(), loopback());
    (l.teeworlds07, l.teeworlds06, l.mgmt) = (loopback(), loopback(), loopback());
    // Records here live at documentation addresses nobody answers from.
    c.poller.enabled = false;
    c.history.enabled = false;
    Daemon::start(c)
}

fn listed(h: &MasterHandle, reg: Registration) {
    let key = reg.key.clone();
    let now = Timestamp::now();
    assert_eq!(h.register(reg, now), Outcome::Added);
    h.publish();
    let _ = key;
}

/// A GameAgent server registering from 127.0.0.1 with the raw exchange (q, 01, heartbeat).
pub(crate) async fn gameagent_server(master: SocketAddr) -> (SocketAddr, JoinHandle<()>) {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = s.local_addr().unwrap();
    s.send_to(b"q", master).await.unwrap();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            if from == master && n >= 5 && buf[0] == 0x01 {
                let c = i32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
                let hb = format!(
                    "0;challenge;{c};players;0;maxplayers;8;level;Yodeller;gametype;Coop;\
                     version;1.10;product;serioussam"
                );
                let _ = s.send_to(hb.as_bytes(), master).await;
            }
        }
    });
    (SocketAddr::new(q.ip(), q.port() - 1), task)
}

/// A management frame: decimal length (JSON and newline), JSON, newline.
pub(crate) fn mgmt_frame(json: &str) -> Vec<u8> {
    format!("{}{json}\n", json.len() + 1).into_bytes()
}

pub(crate) async fn mgmt_server(mgmt: SocketAddr, name: &str, port: u16) -> TcpStream {
    let mut s = TcpStream::connect(mgmt).await.unwrap();
    let json = format!(
        r#"{{"command":"msRegisterGameServer","content":{{"serverName":"{name}","serverAddress":"192.0.2.50","serverPort":{port}}}}}"#
    );
    s.write_all(&mgmt_frame(&json)).await.unwrap();
    s
}

async fn good_udp() -> UdpSocket {
    UdpSocket::bind(SocketAddr::new(IpAddr::V4(GOOD), 0))
        .await
        .unwrap()
}

async fn good_tcp(to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(IpAddr::V4(GOOD), 0)).unwrap();
    s.connect(to).await.unwrap()
}

/// Datagrams arriving on `s` until it is quiet for `quiet`.
async fn datagrams(s: &UdpSocket, quiet: Duration) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    while let Ok(Ok((n, _))) = tokio::time::timeout(quiet, s.recv_from(&mut buf)).await {
        out.push(buf[..n].to_vec());
        if out.len() > 256 {
            break;
        }
    }
    out
}

/// Asks again (at most `tries` times, 1 s apart) until `get` returns `want` entries; datagrams
/// of a well-behaved client can still be dropped by a queue full of flood.
async fn until_full<F, Fut>(what: &str, want: usize, tries: usize, mut get: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    let mut got = 0;
    for i in 0..tries {
        got = get().await;
        if got == want {
            return i + 1;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{what}: {got} of {want} entries");
}

pub(crate) async fn gameagent_list(master: SocketAddr) -> usize {
    let s = good_udp().await;
    s.send_to(b"e", master).await.unwrap();
    datagrams(&s, Duration::from_millis(500))
        .await
        .iter()
        .filter(|d| d.first() == Some(&b's'))
        .map(|d| (d.len() - 1) / 6)
        .sum()
}

fn lis2_entries(ds: &[Vec<u8>]) -> usize {
    ds.iter()
        .filter_map(|d| match Packet::decode(d) {
            Ok(Packet::Connless {
                message: Message::List(l),
                ..
            }) => Some(l.entries().len()),
            _ => None,
        })
        .sum()
}

async fn teeworlds06_list(master: SocketAddr) -> usize {
    let s = good_udp().await;
    s.send_to(REQ2_06, master).await.unwrap();
    lis2_entries(&datagrams(&s, Duration::from_millis(500)).await)
}

async fn teeworlds07_list(master: SocketAddr) -> usize {
    let s = good_udp().await;
    let req = muster_testkit::fixture(TW07_TOKEN_REQUEST);
    s.send_to(&req, master).await.unwrap();
    let reply = datagrams(&s, Duration::from_millis(500)).await;
    let Some(token) = reply
        .iter()
        .find(|d| d.len() == 12)
        .map(|d| [d[8], d[9], d[10], d[11]])
    else {
        return 0;
    };
    let mut list = vec![0x21];
    list.extend_from_slice(&token);
    list.extend_from_slice(&SERVER_TOKEN);
    list.extend_from_slice(b"\xff\xff\xff\xffreq2");
    s.send_to(&list, master).await.unwrap();
    lis2_entries(&datagrams(&s, Duration::from_millis(500)).await)
}

/// A GameSpy list (`ut`, text form) over TCP: the number of `\ip\` entries.
async fn gamespy_list(tcp: SocketAddr) -> usize {
    let fut = async {
        let mut s = good_tcp(tcp).await;
        let mut g = [0u8; GREETING_LEN];
        s.read_exact(&mut g).await.ok()?;
        let greeting = Greeting::decode(&g).ok()?;
        let v = validate_string(&greeting.challenge, b"Z5Nfb0", Enctype::Zero)?;
        let req = format!(
            "\\gamename\\ut\\location\\0\\validate\\{v}\\final\\\\list\\\\gamename\\ut\\final\\"
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        Some(String::from_utf8_lossy(&rest).matches("\\ip\\").count())
    };
    tokio::time::timeout(WAIT, fut)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

pub(crate) async fn mgmt_list(mgmt: SocketAddr) -> usize {
    let fut = async {
        let mut s = good_tcp(mgmt).await;
        s.write_all(&mgmt_frame(r#"{"command":"msQueryGameServers"}"#))
            .await
            .ok()?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.ends_with(b"\n") {
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8(buf).ok()?;
        let json = text.trim_start_matches(|c: char| c.is_ascii_digit());
        let v: serde_json::Value = serde_json::from_str(json.trim_end()).ok()?;
        Some(v["content"]["servers"].as_array()?.len())
    };
    tokio::time::timeout(WAIT, fut)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// A GET from the well-behaved source: (status, body).
pub(crate) async fn http_get(http: SocketAddr, path: &str) -> Option<(u16, String)> {
    let fut = async {
        let mut s = good_tcp(http).await;
        let req = format!("GET {path} HTTP/1.1\r\nHost: muster\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8(buf).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        Some((head.split(' ').nth(1)?.parse().ok()?, body.to_owned()))
    };
    tokio::time::timeout(WAIT, fut).await.ok().flatten()
}

async fn http_json_len(http: SocketAddr, path: &str, field: &str) -> usize {
    match http_get(http, path).await {
        Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v[field].as_array().map(Vec::len))
            .unwrap_or(0),
        _ => 0,
    }
}

/// Bytes a flooding UDP socket sent and received.
#[derive(Debug, Default)]
struct Traffic {
    sent: AtomicUsize,
    received: AtomicUsize,
}

/// Sends `payloads` round-robin from a fresh socket on the UDP flooder's address, at full
/// speed, at most [`FLOOD_DATAGRAMS`] datagrams and [`FLOOD_TIME`]; counts what comes back
/// until 500 ms after the last datagram.
async fn udp_flood(to: SocketAddr, payloads: Vec<Vec<u8>>, traffic: Arc<Traffic>) {
    let s = Arc::new(
        UdpSocket::bind(SocketAddr::new(IpAddr::V4(UDP_FLOODER), 0))
            .await
            .unwrap(),
    );
    let (r, t) = (Arc::clone(&s), Arc::clone(&traffic));
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, _)) = r.recv_from(&mut buf).await {
            t.received.fetch_add(n, Ordering::Relaxed);
        }
    });
    let start = Instant::now();
    for i in 0..FLOOD_DATAGRAMS {
        if start.elapsed() > FLOOD_TIME {
            break;
        }
        let p = &payloads[i % payloads.len()];
        if s.send_to(p, to).await.is_ok() {
            traffic.sent.fetch_add(p.len(), Ordering::Relaxed);
        }
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    reader.abort();
}

/// Opens connections from the TCP flooder's address: every third one stays idle (held until
/// `hold` resolves), the others send `junk` and read until closed (at most 2 s each).
async fn tcp_flood(to: SocketAddr, junk: &'static [u8], hold: tokio::sync::watch::Receiver<bool>) {
    let mut idle = Vec::new();
    let start = Instant::now();
    for i in 0..FLOOD_CONNECTIONS {
        if start.elapsed() > FLOOD_TIME {
            break;
        }
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(IpAddr::V4(TCP_FLOODER), 0)).unwrap();
        let Ok(Ok(mut c)) = tokio::time::timeout(Duration::from_secs(2), s.connect(to)).await
        else {
            continue;
        };
        if i % 3 == 0 {
            idle.push(c);
            continue;
        }
        let _ = c.write_all(junk).await;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), c.read_to_end(&mut sink)).await;
    }
    let mut hold = hold;
    let _ = tokio::time::timeout(FLOOD_TIME, hold.wait_for(|h| !*h)).await;
    drop(idle);
}

/// HTTP junk and list requests from the HTTP flooder's address.
async fn http_flood(http: SocketAddr) {
    let junk: [&[u8]; 5] = [
        b"GARBAGE\r\n\r\n",
        b"GET /api/v1/servers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /ddnet/15/servers.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"POST /ddnet/15/register HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\n{}{}",
        b"GET /\xff\xfe HTTP/1.1\r\n\r\n",
    ];
    let start = Instant::now();
    for i in 0..FLOOD_HTTP {
        if start.elapsed() > FLOOD_TIME {
            break;
        }
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(IpAddr::V4(HTTP_FLOODER), 0))
            .unwrap();
        let Ok(mut c) = s.connect(http).await else {
            continue;
        };
        let _ = c.write_all(junk[i % junk.len()]).await;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), c.read_to_end(&mut sink)).await;
    }
}

/// The sum of the samples whose line starts with `prefix` (all labels of a family).
fn metric(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

/// Registers 3 GameAgent servers (through the face), 3 GameSpy `ut`, 3 DDNet (with an info,
/// so that `servers.json` shows them) and 2 management servers: 11 in all. Returns the
/// tasks that keep the servers alive.
async fn populate(d: &Daemon) -> Vec<JoinHandle<()>> {
    let h = d.handle.clone();
    let (ga, mgmt) = (d.addr("gameagent"), d.addr("mgmt"));
    let mut alive = Vec::new();
    for _ in 0..3 {
        alive.push(gameagent_server(ga).await.1);
    }
    for i in 0..3u8 {
        let a = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10 + i)), 7778);
        listed(
            &h,
            Registration {
                key: ServerKey::new("ut", GameAddr::Ip(a)),
                face: Face::GameSpy,
                game_port: Some(7777),
                query_addr: Some(a),
                query_protocol: Some(Protocol::GameSpy1),
                source: SourceKey::of(a.ip()),
            },
        );
        let t = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1 + i)), 8303);
        let reg = ddnet::ddnet_registration(t);
        let key = reg.key.clone();
        listed(&h, reg);
        // servers.json shows only servers with an info.
        let info = PollInfo::from(PollFields {
            name: format!("Tee {i}").into(),
            map: "dm1".into(),
            max_players: 8,
            ..PollFields::default()
        });
        h.update_poll(&key, Some(info), Timestamp::now());
    }
    // The management servers stay registered while their connections are open.
    for (name, port) in [("Flood A", 20_000), ("Flood B", 20_001)] {
        let s = mgmt_server(mgmt, name, port).await;
        alive.push(tokio::spawn(async move {
            let _keep = s;
            std::future::pending::<()>().await;
        }));
    }
    let count = |face: Face| {
        h.with_registry(|r| r.iter().filter(|x| x.is_listed() && x.face == face).count())
    };
    let t = Instant::now();
    while (count(Face::GameAgent), count(Face::Mgmt)) != (3, 2) {
        assert!(
            t.elapsed() < WAIT,
            "servers registered: {:?}",
            (count(Face::GameAgent), count(Face::Mgmt))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = h.with_registry(|r| r.iter().filter(|x| x.is_listed()).count());
    assert_eq!(total, 11);
    alive
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
async fn the_daemon_keeps_serving_through_a_flood_of_every_face() {
    if std::net::UdpSocket::bind((GOOD, 0)).is_err() {
        let _ = writeln!(std::io::stderr(), "skipped: no 127.0.0.2 on this host");
        return;
    }
    let dir = TempDir::new("flood");
    let d = start(&dir);
    let h = d.handle.clone();
    let ga_servers = populate(&d).await;
    let (ga, gs_tcp, gs_udp) = (
        d.addr("gameagent"),
        d.addr("gamespy-tcp"),
        d.addr("gamespy-udp"),
    );
    let (tw07, tw06) = (d.addr("teeworlds07"), d.addr("teeworlds06"));
    let (http, mgmt) = (d.addr("http"), d.addr("mgmt"));

    let metrics_before = muster_http::metrics::render(h.metrics(), &Default::default());

    // The flood.
    let tw07_token_request = muster_testkit::fixture(TW07_TOKEN_REQUEST);
    let mut bad_token_req2 = vec![0x21, 1, 2, 3, 4];
    bad_token_req2.extend_from_slice(&SERVER_TOKEN);
    bad_token_req2.extend_from_slice(b"\xff\xff\xff\xffreq2");
    let udp_faces: Vec<(&str, SocketAddr, Vec<Vec<u8>>)> = vec![
        (
            "gameagent",
            ga,
            vec![
                b"e".to_vec(),
                b"eXYZ".to_vec(),
                vec![],
                b"\xff\xfe".to_vec(),
                vec![b'0'; 3000],
            ],
        ),
        (
            "gamespy-udp",
            gs_udp,
            vec![
                b"\\basic\\".to_vec(),
                b"\\status\\".to_vec(),
                b"\\heartbeat\\0\\gamename\\nosuchgame".to_vec(),
                b"\\validate\\AAAAAAAA\\final\\".to_vec(),
                b"junk".to_vec(),
                vec![],
            ],
        ),
        (
            "teeworlds07",
            tw07,
            vec![
                tw07_token_request,
                bad_token_req2,
                b"\x21junk".to_vec(),
                vec![0xff; 40],
            ],
        ),
        (
            "teeworlds06",
            tw06,
            vec![
                REQ2_06.to_vec(),
                b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffcou2".to_vec(),
                b"\xff\xff\xff\xffjunk".to_vec(),
                vec![0; 3],
            ],
        ),
    ];
    let (hold_tx, hold_rx) = tokio::sync::watch::channel(true);
    let flood_started = Instant::now();
    let mut flood = JoinSet::new();
    let mut traffic = Vec::new();
    for (name, to, payloads) in udp_faces {
        let t = Arc::new(Traffic::default());
        traffic.push((name, Arc::clone(&t)));
        flood.spawn(udp_flood(to, payloads, t));
    }
    flood.spawn(tcp_flood(
        gs_tcp,
        b"\\list\\\\gamename\\ut\\final\\junk",
        hold_rx.clone(),
    ));
    flood.spawn(tcp_flood(mgmt, b"99999999999{not json\n", hold_rx.clone()));
    flood.spawn(tcp_flood(http, b"NOT HTTP AT ALL\r\n\r\n", hold_rx));
    flood.spawn(http_flood(http));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Meanwhile, the well-behaved client gets every list in full.
    let tries = [
        (
            "gameagent e",
            until_full("gameagent e", 3, 8, || gameagent_list(ga)).await,
        ),
        (
            "teeworlds 0.6",
            until_full("teeworlds 0.6", 3, 8, || teeworlds06_list(tw06)).await,
        ),
        (
            "teeworlds 0.7",
            until_full("teeworlds 0.7", 3, 8, || teeworlds07_list(tw07)).await,
        ),
        (
            "gamespy tcp",
            until_full("gamespy tcp", 3, 8, || gamespy_list(gs_tcp)).await,
        ),
        ("mgmt", until_full("mgmt", 2, 8, || mgmt_list(mgmt)).await),
        (
            "/api/v1/servers",
            until_full("api", 11, 8, || {
                http_json_len(http, "/api/v1/servers?per_page=500", "servers")
            })
            .await,
        ),
        (
            "servers.json",
            until_full("servers.json", 3, 8, || {
                http_json_len(http, "/ddnet/15/servers.json", "servers")
            })
            .await,
        ),
    ];
    let _ = hold_tx.send(false);
    while flood.join_next().await.is_some() {}

    // Still serving after the flood, and the flood was counted.
    until_full("gameagent e after the flood", 3, 8, || gameagent_list(ga)).await;
    let (status, _) = http_get(http, "/healthz").await.expect("healthz");
    assert_eq!(status, 200);
    let metrics = muster_http::metrics::render(h.metrics(), &Default::default());
    let rose = |prefix: &str| metric(&metrics, prefix) > metric(&metrics_before, prefix);
    assert!(
        rose("muster_drops_total{reason=\"malformed\"}"),
        "{metrics}"
    );
    assert!(rose("muster_rate_limited_total"), "{metrics}");
    assert!(
        rose("muster_drops_total{reason=\"tcp_source_cap\"}"),
        "idle connections of one source hit the per-source cap: {metrics}"
    );
    assert!(rose("muster_drops_total"), "{metrics}");
    // The UDP flooder's small lists fit its byte budget (256 KiB); its 0.7 token requests
    // and the HTTP flooder's requests do not fit their buckets.
    assert!(
        h.metrics().rate_limited_sources() >= 1,
        "the flooders are rate-limited sources: {metrics}"
    );

    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "well-behaved client, requests until a full list: {tries:?}"
    );
    for (name, t) in &traffic {
        let (sent, received) = (
            t.sent.load(Ordering::Relaxed),
            t.received.load(Ordering::Relaxed),
        );
        #[allow(clippy::cast_precision_loss)]
        let ratio = received as f64 / sent.max(1) as f64;
        let _ = writeln!(
            err,
            "flood amplification {name}: {sent} bytes in, {received} bytes out, ratio {ratio:.4}"
        );
        // What one source can draw is its byte budget (256 KiB, then 16 KiB/s) plus control
        // replies no larger than their requests.
        let secs = flood_started.elapsed().as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let bound = 256.0 * 1024.0 + 16.0 * 1024.0 * secs + sent as f64;
        #[allow(clippy::cast_precision_loss)]
        let got = received as f64;
        assert!(got <= bound, "{name} drew {received} bytes in {secs:.1} s");
    }
    let drops: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("muster_drops_total") || l.starts_with("muster_rate_limited"))
        .collect();
    let _ = writeln!(err, "counters after the flood: {drops:?}");
    drop(err);
    for t in ga_servers {
        t.abort();
    }
    d.stop().await;
}

/// A few players behind one address (CGNAT): four list requests within 5 s from one IP, at the
/// default limits, all get the whole list on every list face, each at the first ask. What
/// bounds a source is its byte budget, not a burst of requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_players_behind_one_address_get_every_list() {
    if std::net::UdpSocket::bind((GOOD, 0)).is_err() {
        let _ = writeln!(std::io::stderr(), "skipped: no 127.0.0.2 on this host");
        return;
    }
    let dir = TempDir::new("cgnat");
    let d = start(&dir);
    let alive = populate(&d).await;
    // And one UT2004 server for the plain-text list.
    let a = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 40)), 7778);
    listed(
        &d.handle,
        Registration {
            key: ServerKey::new("ut2004", GameAddr::Ip(a)),
            face: Face::GameSpy,
            game_port: Some(7777),
            query_addr: Some(a),
            query_protocol: Some(Protocol::GameSpy1),
            source: SourceKey::of(a.ip()),
        },
    );
    let (ga, gs_tcp) = (d.addr("gameagent"), d.addr("gamespy-tcp"));
    let (tw07, tw06) = (d.addr("teeworlds07"), d.addr("teeworlds06"));
    let (http, mgmt) = (d.addr("http"), d.addr("mgmt"));
    let player = move |player: usize| async move {
        let ut2003 = match http_get(http, "/serverlist/ut2004.txt").await {
            Some((200, body)) => body.lines().filter(|l| !l.trim().is_empty()).count(),
            _ => 0,
        };
        let api = http_json_len(http, "/api/v1/servers?per_page=500", "servers").await;
        let json = http_json_len(http, "/ddnet/15/servers.json", "servers").await;
        vec![
            (player, "gameagent e", gameagent_list(ga).await, 3),
            (player, "teeworlds 0.6", teeworlds06_list(tw06).await, 3),
            (player, "teeworlds 0.7", teeworlds07_list(tw07).await, 3),
            (player, "gamespy tcp", gamespy_list(gs_tcp).await, 3),
            (player, "mgmt", mgmt_list(mgmt).await, 2),
            (player, "/api/v1/servers", api, 12),
            (player, "servers.json", json, 3),
            (player, "ut2003 text list", ut2003, 1),
        ]
    };

    // The four players ask at once, each from its own port of the one address.
    let t = Instant::now();
    let mut players = JoinSet::new();
    for p in 0..4 {
        players.spawn(player(p));
    }
    let mut got = Vec::new();
    while let Some(lists) = players.join_next().await {
        got.extend(lists.unwrap());
    }
    let took = t.elapsed();
    let short: Vec<_> = got.iter().filter(|(_, _, n, want)| n != want).collect();
    assert!(short.is_empty(), "lists short of their servers: {short:?}");
    let _ = writeln!(
        std::io::stderr(),
        "32 list requests from one address in {took:?}"
    );
    assert_eq!(d.handle.metrics().rate_limited_sources(), 0);
    for t in alive {
        t.abort();
    }
    d.stop().await;
}
