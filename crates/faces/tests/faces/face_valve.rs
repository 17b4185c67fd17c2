//! The Half-Life / Xash3D face (`valve`) on real sockets on 127.0.0.0/8 and ::1: game servers
//! ask a challenge and heartbeat with it, a wrong challenge is refused, lists follow the
//! filters (and show a server that registered just before), page past what one reply holds, stay within the per-source byte budget, and a
//! server expires 5 minutes after its last heartbeat (the registry pruned at chosen times).

use std::net::SocketAddr;
use std::time::Duration;

use muster_core::MasterHandle;
use muster_core::config::LimitsConfig;
use muster_core::registry::{Face, RegistryConfig, Timestamp};
use muster_core::store::NullStore;
use muster_faces::CancellationToken;
use muster_faces::face::{FaceStart, Socket};
use muster_faces::runtime::udp::Budgets;
use muster_faces::valve::{FACE, ValveConfig, ValveSettings};
use muster_proto::limit::BucketConfig;
use muster_proto::valve_master::packet::{ListReply, SEED, heartbeat_of};
use muster_proto::valve_master::{
    ChallengeReply, ChallengeRequest, Heartbeat, ListRequest, Region, ServerPacket,
};
use tokio::net::UdpSocket;

/// The face on 127.0.0.1 and ::1 (port 0 each), with loopback servers allowed.
struct Master {
    handle: MasterHandle,
    v4: SocketAddr,
    v6: SocketAddr,
    stop: CancellationToken,
}

impl Drop for Master {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn start(budgets: Budgets) -> Master {
    let (handle, _) = MasterHandle::open(
        RegistryConfig::default(),
        Box::new(NullStore),
        Timestamp::now(),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let mut start = FaceStart::new(handle.clone(), stop.clone());
    let config = ValveConfig {
        allow_loopback: true,
        ..ValveConfig::default()
    };
    start
        .settings
        .set(ValveSettings::new(&config, &LimitsConfig::default()));
    start.settings.set(budgets);
    let mut sockets: Vec<Socket> = Vec::new();
    let mut addrs = Vec::new();
    for a in ["127.0.0.1:0", "[::1]:0"] {
        for b in (FACE.bind)(a.parse().unwrap()).unwrap() {
            addrs.push(b.socket.local_addr().unwrap());
            sockets.push(b.socket);
        }
    }
    tokio::spawn(start.serve(&FACE, sockets));
    Master {
        handle,
        v4: addrs[0],
        v6: addrs[1],
        stop,
    }
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

/// A game server at `bind`: its socket (kept: the face lists the address it heard) and the
/// challenge the face gave it.
async fn ask(master: SocketAddr, bind: &str) -> (UdpSocket, u32) {
    let s = UdpSocket::bind(bind).await.unwrap();
    s.connect(master).await.unwrap();
    let q = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(0x1234_5678),
    });
    s.send(&q.encode()).await.unwrap();
    let got = recv(&s).await.expect("a challenge reply");
    let r = ChallengeReply::decode(&got).unwrap();
    assert_eq!(r.server_challenge, Some(0x1234_5678));
    (s, r.challenge)
}

fn beat(challenge: u32, gamedir: &str, map: &str, players: u32, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut pairs = heartbeat_of(challenge, gamedir, map, players, 8)
        .pairs()
        .to_vec();
    for (k, v) in extra {
        pairs.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
    }
    ServerPacket::Heartbeat(Heartbeat::new(pairs)).encode()
}

/// Registers a server at `bind`; returns its socket.
async fn register(
    master: SocketAddr,
    bind: &str,
    gamedir: &str,
    map: &str,
    players: u32,
) -> UdpSocket {
    let (s, c) = ask(master, bind).await;
    s.send(&beat(c, gamedir, map, players, &[])).await.unwrap();
    s
}

/// Waits (up to 5 s) until `n` records are held, then publishes them for the lists.
async fn held(m: &Master, n: usize) {
    for _ in 0..500 {
        if m.handle.with_registry(|r| r.len()) == n {
            m.handle.publish();
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} held, not {n}", m.handle.with_registry(|r| r.len()));
}

/// Every datagram one list request draws (until 300 ms pass without one).
async fn ask_list(master: SocketAddr, bind: &str, req: &ListRequest) -> Vec<Vec<u8>> {
    let s = UdpSocket::bind(bind).await.unwrap();
    s.connect(master).await.unwrap();
    s.send(&req.encode()).await.unwrap();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let mut wait = Duration::from_secs(2);
    while let Ok(Ok(n)) = tokio::time::timeout(wait, s.recv(&mut buf)).await {
        all.push(buf[..n].to_vec());
        wait = Duration::from_millis(300);
    }
    all
}

/// The servers of a list, read from every page of one request.
async fn list(master: SocketAddr, filter: &str) -> Vec<SocketAddr> {
    let pages = ask_list(
        master,
        "127.0.0.1:0",
        &ListRequest::first(filter.as_bytes()),
    )
    .await;
    assert!(!pages.is_empty(), "no answer to {filter:?}");
    let mut all = Vec::new();
    for p in pages {
        all.extend(ListReply::decode(&p, false, false).unwrap().servers);
    }
    all.sort();
    all
}

fn addr_of(s: &UdpSocket) -> SocketAddr {
    s.local_addr().unwrap()
}

#[tokio::test]
async fn a_server_with_the_right_challenge_registers_and_a_wrong_one_does_not() {
    let m = start(Budgets::default());
    let hl = register(m.v4, "127.0.0.2:0", "valve", "crossfire", 3).await;
    held(&m, 1).await;
    let r = m
        .handle
        .with_registry(|r| r.iter_shared().next().unwrap().clone());
    assert_eq!(r.face, Face::Valve);
    assert_eq!(r.key.game.as_str(), "valve");
    assert_eq!(r.query_addr(), Some(addr_of(&hl)));
    let info = r.info.as_ref().unwrap();
    assert_eq!(
        (info.map(), info.num_players, info.max_players),
        ("crossfire", 3, 8)
    );
    assert_eq!(list(m.v4, "").await, [addr_of(&hl)]);

    // The challenge of another address, and a made-up one, are refused.
    let (forger, c) = ask(m.v4, "127.0.0.3:0").await;
    let other = UdpSocket::bind("127.0.0.3:0").await.unwrap();
    other
        .send_to(&beat(c, "valve", "x", 1, &[]), m.v4)
        .await
        .unwrap();
    forger
        .send(&beat(c.wrapping_add(1), "valve", "x", 1, &[]))
        .await
        .unwrap();
    for _ in 0..500 {
        if m.handle.metrics().drops("bad_echo") == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(m.handle.metrics().drops("bad_echo"), 2);
    assert_eq!(m.handle.with_registry(|r| r.len()), 1);
    // Garbage is counted, never answered.
    forger.send(b"0\nnot-pairs").await.unwrap();
    forger.send(b"q\xff\x01").await.unwrap();
    assert!(recv(&forger).await.is_none());
    assert_eq!(m.handle.metrics().drops("malformed"), 2);
}

#[tokio::test]
async fn a_list_asked_right_after_a_heartbeat_shows_the_server() {
    // No publisher runs here: only the list's own view brings the server in.
    let m = start(Budgets::default());
    for (k, bind) in ["127.0.0.4:0", "127.0.0.5:0"].into_iter().enumerate() {
        let (s, c) = ask(m.v4, bind).await;
        s.send(&beat(c, "valve", "crossfire", 1, &[]))
            .await
            .unwrap();
        // Sent after the heartbeat, to the same socket: read after it, maybe in its batch.
        let listed = list(m.v4, "").await;
        assert_eq!(listed.len(), k + 1, "{listed:?}");
        assert!(listed.contains(&addr_of(&s)));
    }
}

#[tokio::test]
async fn lists_follow_xash3d_masters_filters_on_both_families() {
    let m = start(Budgets::default());
    let hl = register(m.v4, "127.0.0.2:0", "valve", "crossfire", 0).await;
    let cs = register(m.v4, "127.0.0.3:0", "cstrike", "de_dust2", 8).await;
    let (bot, c) = ask(m.v4, "127.0.0.4:0").await;
    bot.send(&beat(
        c,
        "valve",
        "stalkyard",
        2,
        &[("bots", "2"), ("password", "1")],
    ))
    .await
    .unwrap();
    let v6 = register(m.v6, "[::1]:0", "valve", "crossfire", 1).await;
    held(&m, 4).await;
    let (hl, cs, bot) = (addr_of(&hl), addr_of(&cs), addr_of(&bot));
    let mut v4 = vec![hl, cs, bot];
    v4.sort();
    assert_eq!(list(m.v4, "").await, v4);
    assert_eq!(list(m.v4, "\\gamedir\\valve").await, [hl, bot]);
    assert_eq!(list(m.v4, "\\map\\de_dust2").await, [cs]);
    // Xash3D's reading: \empty\1 empty servers, \full\1 full ones.
    assert_eq!(list(m.v4, "\\empty\\1").await, [hl]);
    assert_eq!(list(m.v4, "\\full\\1").await, [cs]);
    assert_eq!(list(m.v4, "\\bots\\1").await, [bot]);
    assert_eq!(list(m.v4, "\\password\\0\\gamedir\\valve").await, [hl]);
    assert_eq!(
        list(m.v4, "\\gamedir\\valve\\nor\\1\\map\\crossfire").await,
        [bot]
    );
    // Another region: none (every server said none, so it is in "the rest of the world").
    let eu = ListRequest {
        region: Region::EUROPE,
        ..ListRequest::first(b"")
    };
    let pages = ask_list(m.v4, "127.0.0.1:0", &eu).await;
    assert_eq!(
        ListReply::decode(&pages[0], false, false).unwrap().servers,
        []
    );
    // The key is echoed.
    let pages = ask_list(
        m.v4,
        "127.0.0.1:0",
        &ListRequest::first(b"\\key\\beef\\map\\de_dust2"),
    )
    .await;
    let page = ListReply::decode(&pages[0], false, true).unwrap();
    assert_eq!(
        (page.key, page.servers, page.complete),
        (Some(0xBEEF), vec![cs], true)
    );
    // IPv6 clients get the IPv6 servers, in 18-byte entries.
    let pages = ask_list(m.v6, "[::1]:0", &ListRequest::first(b"")).await;
    let page = ListReply::decode(&pages[0], true, false).unwrap();
    assert_eq!((page.servers, page.complete), (vec![addr_of(&v6)], true));
}

/// 300 servers on 127.0.0.2–127.0.0.31 (ten each).
async fn many(m: &Master) -> (Vec<UdpSocket>, Vec<SocketAddr>) {
    let mut socks = Vec::new();
    for i in 0..300 {
        let bind = format!("127.0.0.{}:0", 2 + i / 10);
        socks.push(register(m.v4, &bind, "valve", "crossfire", 1).await);
    }
    held(m, 300).await;
    let mut addrs: Vec<SocketAddr> = socks.iter().map(addr_of).collect();
    addrs.sort();
    (socks, addrs)
}

#[tokio::test]
async fn a_list_longer_than_a_reply_is_paged_after_the_clients_last_address() {
    let m = start(Budgets::default());
    let (_socks, addrs) = many(&m).await;
    // Valve's paging: one page per request, the next after the last address seen.
    let mut got = Vec::new();
    let mut last = SEED;
    let mut requests = 0;
    loop {
        let req = ListRequest {
            last,
            ..ListRequest::first(b"\\gamedir\\valve")
        };
        let pages = ask_list(m.v4, "127.0.0.1:0", &req).await;
        requests += 1;
        assert_eq!(pages.len(), 1, "one page per request");
        assert!(pages[0].len() <= 1392);
        let page = ListReply::decode(&pages[0], false, false).unwrap();
        got.extend(page.servers.iter().copied());
        if page.complete {
            break;
        }
        last = *page.servers.last().unwrap();
    }
    assert_eq!(requests, 2);
    got.sort();
    assert_eq!(got, addrs);
    // A Xash3D client (it names its version) gets every page at once, each closed.
    let pages = ask_list(m.v4, "127.0.0.1:0", &ListRequest::first(b"\\clver\\0.21")).await;
    assert_eq!(pages.len(), 2);
    let mut all = Vec::new();
    for p in &pages {
        let page = ListReply::decode(p, false, false).unwrap();
        assert!(page.complete);
        all.extend(page.servers);
    }
    all.sort();
    assert_eq!(all, addrs);
}

#[tokio::test]
async fn list_replies_stay_within_the_per_source_byte_budget() {
    let budgets = Budgets {
        list_bytes: BucketConfig {
            burst: 2500.0,
            per_second: 0.001,
        },
        ..Budgets::default()
    };
    let m = start(budgets);
    let (_socks, _) = many(&m).await;
    // Each request draws 2 pages (1,824 bytes): the first fits the 2,500-byte budget, the
    // next ones do not.
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.connect(m.v4).await.unwrap();
    let req = ListRequest::first(b"\\clver\\0.21").encode();
    for _ in 0..10 {
        s.send(&req).await.unwrap();
    }
    let mut received = 0;
    while let Some(d) = recv(&s).await {
        received += d.len();
    }
    assert_eq!(received, 2 * 6 + 300 * 6 + 2 * 6);
    assert_eq!(m.handle.metrics().drops("source_budget"), 9);
    // Another source has its own budget.
    let pages = ask_list(m.v4, "127.0.0.99:0", &ListRequest::first(b"\\clver\\0.21")).await;
    assert_eq!(pages.len(), 2);
}

#[tokio::test]
async fn a_server_expires_five_minutes_after_its_last_heartbeat() {
    let m = start(Budgets::default());
    let hl = register(m.v4, "127.0.0.2:0", "valve", "crossfire", 1).await;
    held(&m, 1).await;
    let beat_at = m
        .handle
        .with_registry(|r| r.iter_shared().next().unwrap().last_heartbeat);
    assert!(
        m.handle
            .prune(beat_at.plus(Duration::from_secs(299)))
            .is_empty()
    );
    assert_eq!(list(m.v4, "").await, [addr_of(&hl)]);
    let gone = m.handle.prune(beat_at.plus(Duration::from_secs(300)));
    assert_eq!(gone.len(), 1);
    m.handle.publish();
    assert_eq!(list(m.v4, "").await, []);
}
