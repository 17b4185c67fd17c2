//! Regression tests of the master's design, each for a defect the old shape had: lists that
//! disagreed with the API, forged floods that blocked every face, slow HTTP clients that took
//! every slot, servers behind one address that waited half an hour to be listed. The whole
//! daemon runs on loopback with its real sockets.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use muster_master::registry::{Face, GameAddr, ServerKey};
use muster_proto::gamespy_master::{Enctype, Secure, validate_string};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use crate::flood::{gameagent_list, gameagent_server, mgmt_list, mgmt_server};
use crate::{Daemon, TempDir, config, get_json, loopback};

const WAIT: Duration = Duration::from_secs(10);

fn daemon(dir: &TempDir) -> Daemon {
    let mut c = config(dir);
    let l = &mut c.listen;
    (l.gameagent, l.gamespy_udp, l.gamespy_tcp) = (loopback(), loopback(), loopback());
    (l.teeworlds07, l.teeworlds06, l.mgmt) = (loopback(), loopback(), loopback());
    c.poller.enabled = false;
    c.history.enabled = false;
    Daemon::start(c)
}

async fn until(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + WAIT;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

async fn api_total(http: SocketAddr) -> u64 {
    get_json(http, "/api/v1/servers", 200).await["total"]
        .as_u64()
        .unwrap()
}

/// The GameAgent `e` list and the API read one view: when a server is de-listed (here as the
/// poller de-lists an unreachable one), both stop showing it together, within a publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gameagent_e_agrees_with_the_api_within_a_second_of_a_delisting() {
    let dir = TempDir::new("redesign-agree");
    let d = daemon(&dir);
    let ga = d.addr("gameagent");
    let (game, _server) = gameagent_server(ga).await;
    assert!(until(|| d.handle.snapshot().count(Face::GameAgent) == 1).await);
    assert_eq!(gameagent_list(ga).await, 1);
    assert_eq!(api_total(d.http()).await, 1);

    let key = ServerKey::new("serioussam", GameAddr::Ip(game));
    let t = Instant::now();
    assert_eq!(
        d.handle.delist(&key),
        muster_master::registry::DelistOutcome::Delisted
    );
    let mut both = false;
    while t.elapsed() < Duration::from_secs(1) {
        if gameagent_list(ga).await == 0 && api_total(d.http()).await == 0 {
            both = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(both, "e and the API both dropped it within 1 s");
    // And they never disagree: the same view serves both.
    assert_eq!(gameagent_list(ga).await, 0);
    assert_eq!(api_total(d.http()).await, 0);
    d.stop().await;
}

/// A heartbeat of a GameSpy `ut` server from `src`, announcing `port`.
fn ut_heartbeat(port: u16) -> Vec<u8> {
    format!("\\heartbeat\\{port}\\gamename\\ut").into_bytes()
}

/// 20,000 forged sources (127.x.y.z) heartbeat the GameSpy face as `ut` servers, which makes
/// it challenge each of them. Meanwhile and after, real servers register on every face, the
/// GameSpy face included, as fast as without the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_gamespy_heartbeats_leave_registration_working_on_every_face() {
    const FORGED: u32 = 20_000;
    let dir = TempDir::new("redesign-forged");
    let d = daemon(&dir);
    let gs = d.addr("gamespy-udp");
    let flood = tokio::spawn(async move {
        let mut sent = 0u32;
        for i in 0..FORGED {
            // 127.10.0.1 … 127.10.78.32: many /24s, one heartbeat each.
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 10, 0, 1)) + i);
            let Ok(s) = std::net::UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0)) else {
                continue;
            };
            if s.send_to(&ut_heartbeat(7778), gs).is_ok() {
                sent += 1;
            }
            if i % 1000 == 999 {
                tokio::task::yield_now().await;
            }
        }
        sent
    });

    // Real servers on every face while the flood runs.
    let t = Instant::now();
    let (ga_game, _ga) = gameagent_server(d.addr("gameagent")).await;
    let _mgmt = mgmt_server(d.addr("mgmt"), "Flooded", 20_000).await;
    let sent = flood.await.unwrap();
    assert!(sent >= FORGED * 9 / 10, "the flood went out ({sent})");
    // A real UT server after the flood: its challenge still comes, its answer still counts.
    let uplink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let query = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let qport = query.local_addr().unwrap().port();
    let mut buf = [0u8; 256];
    let mut validated = false;
    for _ in 0..5 {
        uplink.send_to(&ut_heartbeat(qport), gs).await.unwrap();
        let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(1), uplink.recv_from(&mut buf)).await
        else {
            continue;
        };
        let secure = Secure::decode(&buf[..n]).unwrap();
        let v = validate_string(&secure.challenge, b"Z5Nfb0", Enctype::Zero).unwrap();
        let answer = format!("\\validate\\{v}\\final\\\\queryid\\1.1");
        uplink.send_to(answer.as_bytes(), gs).await.unwrap();
        validated = true;
        break;
    }
    assert!(validated, "the real server was challenged");
    let ut_key = ServerKey::new(
        "ut",
        GameAddr::Ip(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), qport)),
    );
    let ga_key = ServerKey::new("serioussam", GameAddr::Ip(ga_game));
    let h = d.handle.clone();
    let listed = |k: &ServerKey| h.with_registry(|r| r.get(k).is_some_and(|x| x.is_listed()));
    assert!(until(|| listed(&ut_key) && listed(&ga_key)).await);
    assert!(until(|| h.snapshot().count(Face::Mgmt) == 1).await);
    assert_eq!(mgmt_list(d.addr("mgmt")).await, 1);
    let took = t.elapsed();
    // Nothing of the forged sources reached the registry.
    assert_eq!(h.with_registry(|r| r.len()), 3);
    assert!(took < Duration::from_secs(20), "{took:?}");
    d.stop().await;
}

/// A TCP connection from `ip` that starts a request's header (the caller trickles the rest,
/// never finishing it).
async fn slowloris(ip: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let s = TcpSocket::new_v4().ok()?;
    s.bind(SocketAddr::new(IpAddr::V4(ip), 0)).ok()?;
    let mut c = s.connect(to).await.ok()?;
    c.write_all(b"G").await.ok()?;
    Some(c)
}

/// 1,100 connections trickle header bytes from 70 addresses. The API still answers within
/// 2 s, a DDNet server still registers, and the trickling connections are closed by the
/// header deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_leaves_the_api_and_ddnet_registration_alive() {
    const CONNS: usize = 1_100;
    let dir = TempDir::new("redesign-slowloris");
    let mut c = config(&dir);
    c.poller.enabled = false;
    c.history.enabled = false;
    c.limits.http_header_timeout = muster_master::config::HumanDuration(Duration::from_secs(3));
    let d = Daemon::start(c);
    let http = d.http();
    let every = Duration::from_millis(500);
    let mut conns = Vec::with_capacity(CONNS);
    for i in 0..CONNS {
        let ip = Ipv4Addr::new(127, 20, (i / 16) as u8, 1);
        if let Some(c) = slowloris(ip, http).await {
            conns.push(c);
        }
    }
    assert!(conns.len() >= CONNS * 9 / 10, "{} connections", conns.len());
    // Keep trickling while the real clients come.
    let trickle = tokio::spawn(async move {
        let mut open = conns;
        for _ in 0..20 {
            tokio::time::sleep(every).await;
            let mut still = Vec::with_capacity(open.len());
            for mut c in open {
                if c.write_all(b"E").await.is_ok() {
                    still.push(c);
                }
            }
            open = still;
        }
        open.len()
    });

    let t = Instant::now();
    let list = get_json(http, "/api/v1/servers", 200).await;
    let took = t.elapsed();
    assert_eq!(list["total"], 0);
    assert!(took < Duration::from_secs(2), "the API took {took:?}");

    let game = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    crate::restart::ddnet_register(http, &game, "tw-0.6+udp", &body).await;
    assert!(until(|| d.handle.snapshot().count(Face::DdnetHttp) == 1).await);

    // The header deadline (3 s here) closed every trickling connection.
    let still_open = trickle.await.unwrap();
    assert_eq!(
        still_open, 0,
        "trickling connections outlived the header deadline"
    );
    assert!(d.handle.metrics().drops("http_header_timeout") > 0);
    d.stop().await;
}

/// 64 stock GameAgent servers behind one address start at once: each sends `q` and answers
/// its challenge. All are listed at once, not one challenge per 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_gameagent_servers_on_one_ip_are_listed_together() {
    let dir = TempDir::new("redesign-64");
    let d = daemon(&dir);
    let ga = d.addr("gameagent");
    let mut servers = Vec::new();
    let t = Instant::now();
    for _ in 0..64 {
        servers.push(gameagent_server(ga).await);
    }
    assert!(until(|| d.handle.snapshot().count(Face::GameAgent) == 64).await);
    let took = t.elapsed();
    // A heartbeat period is 150 s; this is well inside one.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(gameagent_list(ga).await, 64);
    d.stop().await;
}

/// DDNet's register refuses impossible values with a clear error instead of listing them.
#[tokio::test]
async fn ddnet_register_refuses_port_zero() {
    let dir = TempDir::new("redesign-port0");
    let d = Daemon::start(config(&dir));
    let body = crate::restart::ddnet_post(d.http(), "tw-0.6+udp", 0, "", b"").await;
    assert!(body.contains("\"status\":\"error\""), "{body}");
    assert!(body.contains("port"), "{body}");
    assert!(d.handle.with_registry(|r| r.is_empty()));
    d.stop().await;
}
