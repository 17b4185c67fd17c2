//! The Quake III face in the whole daemon (`Master::run`, real sockets on loopback): a server
//! heartbeats, answers the `getinfo` challenge, is listed by `getservers` / `getserversExt`,
//! shows in `/api/v1/servers` with its game's name, survives a restart, and a forged flood
//! draws bounded answers.

use std::net::SocketAddr;
use std::time::Duration;

use muster_master::config::Listen;
use muster_proto::quake3::packet::{Packet, ServerList};
use tokio::net::UdpSocket;

use crate::{Daemon, TempDir, config, get_json, loopback};

const FF: &[u8] = &[0xFF; 4];

fn dgram(text: &str) -> Vec<u8> {
    let mut d = FF.to_vec();
    d.extend_from_slice(text.as_bytes());
    d
}

async fn recv(s: &UdpSocket) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 65_536];
    let n = tokio::time::timeout(Duration::from_secs(2), s.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A game server at `bind` registering with the face at `master`; returns its address.
async fn register(master: SocketAddr, bind: &str, info: &str) -> SocketAddr {
    let s = UdpSocket::bind(bind).await.unwrap();
    s.connect(master).await.unwrap();
    s.send(&dgram("heartbeat DarkPlaces\n")).await.unwrap();
    let got = recv(&s).await.expect("a getinfo");
    let Packet::GetInfo { challenge: Some(c) } = Packet::decode(&got).unwrap() else {
        panic!("not a getinfo: {got:?}");
    };
    let reply =
        format!("infoResponse\n\\challenge\\{c}\\sv_maxclients\\16\\clients\\3\\protocol\\3{info}");
    s.send(&dgram(&reply)).await.unwrap();
    s.local_addr().unwrap()
}

async fn list(master: SocketAddr, bind: &str, request: &str) -> Vec<SocketAddr> {
    let s = UdpSocket::bind(bind).await.unwrap();
    s.connect(master).await.unwrap();
    s.send(&dgram(request)).await.unwrap();
    let mut all = Vec::new();
    while let Some(d) = recv(&s).await {
        let Packet::ServerList(ServerList { servers, eot, .. }) = Packet::decode(&d).unwrap()
        else {
            panic!("not a list")
        };
        all.extend(servers);
        if eot {
            break;
        }
    }
    all
}

/// Waits (up to 5 s) until `n` servers are listed.
async fn listed(d: &Daemon, n: usize) {
    for _ in 0..500 {
        if d.handle.snapshot().listed().len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} listed, not {n}", d.handle.snapshot().listed().len());
}

fn daemon(dir: &TempDir) -> Daemon {
    let mut c = config(dir);
    c.listen.quake3 = Listen::parse("127.0.0.1:0,[::1]:0").unwrap();
    c.quake3.allow_loopback = true;
    c.poller.enabled = false;
    Daemon::start(c)
}

#[tokio::test]
async fn a_darkplaces_server_is_verified_listed_shown_and_kept_across_a_restart() {
    let dir = TempDir::new("face-quake3");
    let d = daemon(&dir);
    let q3 = d
        .bound
        .iter()
        .find(|b| b.face == "quake3" && b.addr.is_ipv4())
        .unwrap()
        .addr;
    let q3v6 = d
        .bound
        .iter()
        .find(|b| b.face == "quake3" && b.addr.is_ipv6())
        .unwrap()
        .addr;
    let v4 = register(
        q3,
        "127.0.0.1:0",
        "\\gamename\\Xonotic\\hostname\\^1Red ^7Base\\mapname\\dance",
    )
    .await;
    let v6 = register(q3v6, "[::1]:0", "\\gamename\\Xonotic\\hostname\\six").await;
    listed(&d, 2).await;
    assert_eq!(
        list(q3, "127.0.0.1:0", "getservers Xonotic 3").await,
        vec![v4]
    );
    let mut both = list(q3v6, "[::1]:0", "getserversExt Xonotic 3").await;
    both.sort();
    let mut want = vec![v4, v6];
    want.sort();
    assert_eq!(both, want);
    assert_eq!(
        list(q3, "127.0.0.1:0", "getserversExt Xonotic 3 ipv6").await,
        vec![v6]
    );
    assert!(
        list(q3, "127.0.0.1:0", "getservers Nexuiz 3")
            .await
            .is_empty()
    );

    let api = get_json(d.http(), "/api/v1/servers?protocol=quake3", 200).await;
    let servers = api["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{api}");
    let red = servers
        .iter()
        .find(|s| s["address"] == v4.to_string())
        .unwrap_or_else(|| panic!("{api}"));
    assert_eq!(red["name"], "Red Base");
    assert_eq!(red["map"], "dance");
    assert_eq!(red["game"], "xonotic");
    assert_eq!(red["game_name"], "Xonotic");

    d.stop().await;
    let d = daemon(&dir);
    listed(&d, 2).await;
    let api = get_json(d.http(), "/api/v1/servers?protocol=quake3", 200).await;
    assert_eq!(api["servers"].as_array().unwrap().len(), 2, "{api}");
    d.stop().await;
}

#[tokio::test]
async fn a_forged_heartbeat_flood_draws_bounded_challenges_and_lists_nothing() {
    let dir = TempDir::new("face-quake3-flood");
    let mut c = config(&dir);
    c.listen.quake3 = loopback();
    c.quake3.allow_loopback = true;
    c.poller.enabled = false;
    let d = Daemon::start(c);
    let q3 = d.addr("quake3");
    let s = UdpSocket::bind("127.0.0.9:0").await.unwrap();
    for _ in 0..2000 {
        s.send_to(&dgram("heartbeat DarkPlaces\n"), q3)
            .await
            .unwrap();
    }
    // Heartbeats from one source and port: one challenge in flight, never re-sent.
    assert!(
        recv(&s).await.is_some(),
        "the first heartbeat is challenged"
    );
    // A wrong echo while it is in flight, and garbage: counted, nothing listed.
    s.send_to(&dgram("infoResponse\n\\challenge\\nope\\sv_maxclients\\8\\clients\\1\\protocol\\3\\gamename\\X"), q3)
        .await
        .unwrap();
    s.send_to(b"\xFF\xFF\xFF\xFFgetserversResponse\\\x01", q3)
        .await
        .unwrap();
    let mut more = 0;
    while recv(&s).await.is_some() {
        more += 1;
    }
    assert_eq!(more, 0, "no second getinfo");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = d.handle.metrics();
    assert!(m.drops("bad_echo") >= 1, "bad_echo");
    assert!(m.drops("malformed") >= 1, "malformed");
    assert_eq!(d.handle.snapshot().listed().len(), 0);
    d.stop().await;
}

/// A DarkPlaces-style game server on `127.0.0.1`: heartbeats `master` once, then answers every
/// `getinfo` / `getstatus` (the master's challenge and later queries alike) as the responder does.
async fn game_server(
    master: SocketAddr,
    players: usize,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use muster_proto::quake3::respond::{Quake3Responder, Style};
    use muster_proto::respond::{PlayerState, Responder as _, ServerState};
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = s.local_addr().unwrap();
    let state = ServerState {
        name: "learned".into(),
        map: "stormkeep".into(),
        game: "Xonotic".into(),
        game_port: addr.port(),
        max_players: 16,
        players: (0..players)
            .map(|i| PlayerState {
                name: format!("p{i}"),
                ..PlayerState::default()
            })
            .collect(),
        ..ServerState::default()
    };
    s.send_to(&dgram("heartbeat DarkPlaces\n"), master)
        .await
        .unwrap();
    let task = tokio::spawn(async move {
        let mut r = Quake3Responder::new(Style::DarkPlaces);
        let mut buf = vec![0u8; 2048];
        let mut out = Vec::new();
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            out.clear();
            r.handle_datagram(std::time::Instant::now(), from, &buf[..n], &state, &mut out);
            for reply in &out {
                let _ = s.send_to(&reply.bytes, reply.to).await;
            }
        }
    });
    (addr, task)
}

#[tokio::test]
async fn another_muster_learns_a_quake3_master_list_and_verifies_it_first() {
    use muster_master::upstream::settings::{UpstreamConfig, UpstreamKind};
    let dir_a = TempDir::new("face-quake3-a");
    let mut c = config(&dir_a);
    c.listen.quake3 = loopback();
    c.quake3.allow_loopback = true;
    c.poller.enabled = false;
    let a = Daemon::start(c);
    let (server, task) = game_server(a.addr("quake3"), 2).await;
    listed(&a, 1).await;

    let dir_b = TempDir::new("face-quake3-b");
    let mut c = config(&dir_b);
    let mut up = UpstreamConfig::new(UpstreamKind::Quake3, &a.addr("quake3").to_string());
    up.games = vec!["Xonotic:3".into()];
    c.upstream.push(up);
    let b = Daemon::start(c);
    listed(&b, 1).await;
    let r = b.handle.snapshot().listed()[0].clone();
    assert_eq!(r.key.addr.to_string(), server.to_string());
    assert_eq!(r.key.game.as_str(), "xonotic");
    // Listed only after B's own query answered: the info is the server's, not the list's.
    assert_eq!(r.info.as_ref().unwrap().name(), "learned");
    assert_eq!(r.players(), 2);
    task.abort();
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn forged_list_requests_draw_at_most_the_sources_byte_budget() {
    let dir = TempDir::new("face-quake3-budget");
    let mut c = config(&dir);
    c.listen.quake3 = loopback();
    c.quake3.allow_loopback = true;
    c.poller.enabled = false;
    // A small budget: 2,000 bytes at once, 100 bytes a second after that.
    c.limits.list_bytes_burst = 2_000;
    c.limits.list_bytes_per_sec = 100;
    let d = Daemon::start(c);
    let q3 = d.addr("quake3");
    // One address each: a socket's port is free again once it is dropped, and a port given
    // out twice on one address would make two servers one key.
    for i in 0..10 {
        register(q3, &format!("127.0.1.{}:0", i + 1), "\\gamename\\Xonotic").await;
    }
    listed(&d, 10).await;
    // One list is 25 bytes of header and 7 per server plus EOT: 102 bytes. 500 requests from
    // one source would draw 51,000 bytes; the budget lets about 2,000 out.
    let s = UdpSocket::bind("127.0.0.7:0").await.unwrap();
    s.connect(q3).await.unwrap();
    for _ in 0..500 {
        s.send(&dgram("getserversExt Xonotic 3")).await.unwrap();
    }
    let mut bytes = 0;
    let mut buf = vec![0u8; 2048];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), s.recv(&mut buf)).await {
        bytes += n;
    }
    assert!(bytes > 0, "the first lists are answered");
    assert!(bytes <= 2_000 + 200, "{bytes} bytes drawn");
    assert!(d.handle.metrics().drops("source_budget") > 0);
    d.stop().await;
}
