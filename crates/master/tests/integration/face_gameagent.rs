//! Integration tests of the gameagent face over loopback: the face runs on `127.0.0.1:0` (and
//! `[::1]:0`) with a `MasterHandle` from `Master::open`; game servers are
//! `GameAgentRegistrar`s driven by a small loop over their own UDP socket (the query socket,
//! game port + 1), exactly as `muster_server::serve_registered` drives them; lists are read
//! with `MasterListQuery` through `muster_query::spawn`.

use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use muster_master::config::Config;
use muster_master::faces::gameagent::{self, GameAgentSettings};
use muster_master::http;
use muster_master::registry::{GameAddr, ServerKey, Timestamp, Verification};
use muster_master::runtime::udp::{Budgets, Cx, ReplyKind, UdpMachine, run_on_own_thread};
use muster_master::runtime::{bind_tcp, bind_udp};
use muster_master::table::{FaceStart, Placement, Socket};
use muster_master::{Master, MasterHandle};
use muster_proto::gameagent::query::MasterListQuery;
use muster_proto::gameagent::register::{GameAgentRegistrar, RegistrarConfig};
use muster_proto::limit::BucketConfig;
use muster_proto::respond::{Registrar as _, ServerState};
use muster_query::{Job, Options, spawn};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::{TempDir, get, get_json};

const WAIT: Duration = Duration::from_secs(5);

/// Generous buckets and caps, so tests that do not check limits are not limited.
fn relaxed() -> GameAgentSettings {
    let lots = BucketConfig::one_every(10_000, Duration::from_millis(1));
    GameAgentSettings {
        heartbeats: lots,
        challenges: lots,
        ..GameAgentSettings::default()
    }
}

struct Face {
    handle: MasterHandle,
    /// The default listeners, IPv4 first.
    udp: Vec<SocketAddr>,
    /// Per-product listeners.
    scoped: Vec<SocketAddr>,
    http: SocketAddr,
    stop: muster_master::CancellationToken,
    task: JoinHandle<()>,
}

impl Face {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the face stops")
            .unwrap();
        // As the daemon does at shutdown.
        self.handle.flush().unwrap();
    }
}

fn open(dir: &TempDir) -> MasterHandle {
    let config = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    Master::open(config, Timestamp::now()).unwrap().handle()
}

/// The face on `binds` (default listeners) and `products` (one per-product listener each).
async fn start(
    handle: MasterHandle,
    binds: &[&str],
    products: &[(&str, &[&str])],
    settings: GameAgentSettings,
) -> Face {
    start_placed(handle, binds, products, settings, Placement::Current).await
}

/// [`start`], with the face's runner placed as `placement` says (the daemon's:
/// [`Placement::OwnThread`]).
async fn start_placed(
    handle: MasterHandle,
    binds: &[&str],
    products: &[(&str, &[&str])],
    settings: GameAgentSettings,
    placement: Placement,
) -> Face {
    let mut settings = settings;
    let mut sockets = Vec::new();
    let mut udp = Vec::new();
    let mut scoped = Vec::new();
    for b in binds {
        let s = bind_udp(b.parse().unwrap()).unwrap();
        udp.push(s.local_addr().unwrap());
        sockets.push(Socket::Udp(s));
    }
    for (b, p) in products {
        let s = bind_udp(b.parse().unwrap()).unwrap();
        let addr = s.local_addr().unwrap();
        scoped.push(addr);
        settings
            .product_listeners
            .push((addr, p.iter().map(|s| (*s).to_owned()).collect()));
        sockets.push(Socket::Udp(s));
    }
    let http_listener = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let http = http_listener.local_addr().unwrap();
    let app = http::router(handle.clone());
    tokio::spawn(async move { axum::serve(http_listener, app).await });
    let stop = muster_master::CancellationToken::new();
    tokio::spawn(handle.clone().run_publisher(stop.clone()));
    let mut faces = FaceStart::new(handle.clone(), stop.clone());
    faces.settings.set(settings);
    faces.placement = placement;
    let task = tokio::spawn(faces.serve(&gameagent::FACE, sockets));
    Face {
        handle,
        udp,
        scoped,
        http,
        stop,
        task,
    }
}

fn sam(product: &str) -> ServerState {
    ServerState {
        name: "Muster Sam".into(),
        map: "Yodeller".into(),
        game_type: "Cooperative".into(),
        version: "1.10".into(),
        game: product.into(),
        max_players: 8,
        ..ServerState::default()
    }
}

/// A game server registering with `master` from a fresh query socket on `bind`; returns its
/// game address (query port − 1) and the task (abort it to stop the server silently, as stock
/// servers stop).
async fn serve(master: SocketAddr, bind: &str, product: &str) -> (SocketAddrV4, JoinHandle<()>) {
    let socket = UdpSocket::bind(bind).await.unwrap();
    let SocketAddr::V4(q) = socket.local_addr().unwrap() else {
        panic!("IPv4 server expected");
    };
    let state = sam(product);
    let mut config = RegistrarConfig::new(master);
    // Answer every challenge (a restarted master re-challenges within a second).
    config.min_challenge_interval = Duration::ZERO;
    let task = tokio::spawn(async move {
        let mut reg = GameAgentRegistrar::new(config, &state);
        let mut buf = vec![0u8; 4096];
        loop {
            let mut out = Vec::new();
            while let Some(t) = reg.poll_transmit(tokio_now(), &mut out) {
                let _ = socket.send_to(&out, t.destination).await;
                out.clear();
            }
            let wake = reg.poll_timeout();
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let (n, from) = r.unwrap();
                    reg.handle_datagram(tokio_now(), from, &buf[..n], &state);
                }
                () = async {
                    match wake {
                        Some(w) => tokio::time::sleep_until(w.into()).await,
                        None => std::future::pending().await,
                    }
                } => reg.handle_timeout(tokio_now(), &state),
            }
        }
    });
    (SocketAddrV4::new(*q.ip(), q.port() - 1), task)
}

fn tokio_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Polls `cond` every 10 ms for at most [`WAIT`].
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

fn state(h: &MasterHandle, game: &str, addr: SocketAddrV4) -> Option<Verification> {
    let key = ServerKey::new(game, GameAddr::Ip(SocketAddr::V4(addr)));
    h.with_registry(|r| r.get(&key).map(|r| r.state))
}

/// The `e` list of `master`, read from a socket bound to `bind`.
async fn e_list(master: SocketAddr, bind: &str) -> Vec<SocketAddr> {
    let bind: SocketAddr = bind.parse().unwrap();
    let mut options = Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        ..Options::default()
    };
    if bind.is_ipv4() {
        options.bind_v4 = bind;
    } else {
        options.bind_v6 = bind;
    }
    let jobs = [Job {
        tag: (),
        build: move |cfg| MasterListQuery::new(master, cfg),
    }];
    let done = spawn(jobs, options).recv().await.unwrap();
    done.outcome
        .unwrap()
        .servers
        .iter()
        .map(|s| s.address)
        .collect()
}

/// The face on 127.0.0.1 with one Serious Sam server registered and verified.
async fn face_with_one_server(dir: &TempDir) -> (Face, SocketAddrV4, JoinHandle<()>) {
    let face = start(open(dir), &["127.0.0.1:0"], &[], relaxed()).await;
    let (game, server) = serve(face.udp[0], "127.0.0.1:0", "serioussamse").await;
    assert!(
        until(|| state(&face.handle, "serioussamse", game) == Some(Verification::Verified)).await,
        "verified through the challenge"
    );
    (face, game, server)
}

#[tokio::test]
async fn registered_server_is_listed_by_e_and_by_the_http_api() {
    let dir = TempDir::new("gameagent");
    let (face, game, _server) = face_with_one_server(&dir).await;
    assert_eq!(
        e_list(face.udp[0], "127.0.0.1:0").await,
        vec![SocketAddr::V4(game)]
    );

    let list = get_json(face.http, "/api/v1/servers", 200).await;
    let servers = list["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{list}");
    assert_eq!(servers[0]["address"], game.to_string());
    assert_eq!(servers[0]["game"], "serioussamse");
    assert_eq!(servers[0]["protocol"], "gameagent");
    assert_eq!(servers[0]["query_protocol"], "gameagent");
    let query = SocketAddrV4::new(*game.ip(), game.port() + 1);
    assert_eq!(servers[0]["query_address"], query.to_string());
    let (status, metrics) = get(face.http, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("muster_list_requests_total{face=\"gameagent\"} 1"));
    assert!(
        metrics.contains("muster_registrations_total 1"),
        "{metrics}"
    );
    face.stop().await;
}

/// A list request takes no registry lock: with a writer holding it (a long registry change
/// elsewhere), `e` is still answered from the published view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_is_answered_while_a_writer_holds_the_registry() {
    let dir = TempDir::new("gameagent-lock");
    // As the daemon runs it: the face on a thread of its own, so that whatever it waits for
    // never stops the test's runtime (and its timeout).
    let face = start_placed(
        open(&dir),
        &["127.0.0.1:0"],
        &[],
        relaxed(),
        Placement::OwnThread,
    )
    .await;
    let (game, _server) = serve(face.udp[0], "127.0.0.1:0", "serioussamse").await;
    assert!(
        until(|| state(&face.handle, "serioussamse", game) == Some(Verification::Verified)).await,
        "verified through the challenge"
    );
    assert!(
        until(|| face.handle.snapshot().listed().len() == 1).await,
        "published"
    );
    // The face's first sweep pass challenges what is listed (the pass that re-verifies
    // records restored at start); it looks at the registry under its hold. Once that pass
    // is over, a listed and freshly proven server takes no hold until it is due again.
    settle(Duration::from_millis(1500)).await;
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let h = face.handle.clone();
    let holder = std::thread::spawn(move || {
        h.write(|_| {
            held_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(10));
        });
    });
    held_rx.recv().unwrap();
    let list = tokio::time::timeout(Duration::from_secs(3), e_list(face.udp[0], "127.0.0.1:0"))
        .await
        .map_err(|_| "the list waited for the writer");
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(list, Ok(vec![SocketAddr::V4(game)]));
    face.stop().await;
}

/// A heartbeat answering a challenge from another port than the one challenged (§8.3 rule
/// 4.4): nothing is listed, nothing is challenged, the hop is counted.
#[tokio::test]
async fn port_hop_is_counted_and_lists_nothing() {
    let dir = TempDir::new("gameagent");
    let face = start(open(&dir), &["127.0.0.1:0"], &[], relaxed()).await;
    let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    a.send_to(b"q", face.udp[0]).await.unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(WAIT, a.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((n, buf[0]), (5, 0x01), "a challenge");
    let c = i32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let hb = format!(
        "0;challenge;{c};players;0;maxplayers;8;level;Yodeller;gametype;Coop;version;1.10;product;serioussam"
    );
    b.send_to(hb.as_bytes(), face.udp[0]).await.unwrap();
    let metrics = face.handle.metrics();
    assert!(until(|| metrics.drops("port_hop") == 1).await);
    assert!(e_list(face.udp[0], "127.0.0.1:0").await.is_empty());
    assert!(face.handle.with_registry(|r| r.is_empty()));
    // No challenge went to the hopping port.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), b.recv_from(&mut buf))
            .await
            .is_err()
    );
    face.stop().await;
}

/// Full-speed garbage and `e` floods from one source are counted and dropped; a client from
/// another address still gets the whole list; the flooding source gets at most its byte
/// budget back (burst 256 KiB, 16 KiB/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // the issue asks for the ratio to be printed
async fn flood_is_counted_and_a_good_client_still_gets_its_list() {
    const SERVERS: usize = 50;
    const FLOOD: usize = 2000;
    let dir = TempDir::new("gameagent");
    let face = start(open(&dir), &["127.0.0.1:0"], &[], relaxed()).await;
    let master = face.udp[0];
    let mut games = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..SERVERS {
        let (g, t) = serve(master, "127.0.0.1:0", "serioussam").await;
        games.push(SocketAddr::V4(g));
        servers.push(t);
    }
    let listed = || {
        face.handle
            .with_registry(|r| r.iter().filter(|r| r.is_listed()).count())
    };
    assert!(until(|| listed() == SERVERS).await, "all verified");
    assert!(
        until(|| face.handle.snapshot().len() == SERVERS).await,
        "all published"
    );
    let started = Instant::now();

    // The attacker, from 127.0.0.3: `e` as fast as the socket goes, then garbage.
    let attacker = UdpSocket::bind("127.0.0.3:0").await.unwrap();
    let mut sent = 0usize;
    for _ in 0..FLOOD {
        if attacker.send_to(b"e", master).await.is_ok() {
            sent += 1;
        }
    }
    let garbage: [&[u8]; 5] = [
        b"",
        b"\xff\xfe",
        b"s\x7f\0\0\x01\0\x64",
        b"0;players;1",
        &[b'e'; 3000],
    ];
    for i in 0..FLOOD {
        let _ = attacker.send_to(garbage[i % garbage.len()], master).await;
    }
    let metrics = face.handle.metrics();
    // What the face read of the flood is counted (what the kernel dropped is never seen).
    assert!(until(|| metrics.drops("malformed") > 0).await);
    assert!(metrics.drops("malformed") <= FLOOD as u64);

    // A well-behaved client elsewhere still gets the whole list.
    let mut got = e_list(master, "127.0.0.2:0").await;
    got.sort();
    games.sort();
    assert_eq!(got, games);

    // What came back to the attacker: at most its byte budget (burst + refill over the time).
    let mut received = 0usize;
    let mut buf = [0u8; 2048];
    while let Ok(Ok((n, _))) =
        tokio::time::timeout(Duration::from_millis(200), attacker.recv_from(&mut buf)).await
    {
        received += n;
    }
    let list_bytes = 1 + 6 * SERVERS;
    let secs = started.elapsed().as_secs_f64();
    let budget = 256.0 * 1024.0 + 16.0 * 1024.0 * secs + list_bytes as f64;
    assert!(
        (received as f64) <= budget,
        "{received} bytes back in {secs:.1} s"
    );
    let ratio = received as f64 / sent as f64;
    println!(
        "gameagent amplification for one source: {sent} `e` (1 byte each) sent at full speed, \
         {received} bytes back in {secs:.1} s, payload ratio {ratio:.3} (stock master: \
         {list_bytes} per `e`)"
    );
    let (_, text) = get(face.http, "/metrics").await;
    let limited: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("muster_rate_limited_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(limited > 0, "{text}");
    for t in servers {
        t.abort();
    }
    face.stop().await;
}

/// A server that stops sending is removed 300 s after its last heartbeat (swept by the
/// registry's expiry, §8.3 rule 7), from the list and from the registry.
#[tokio::test]
async fn silent_server_expires() {
    let dir = TempDir::new("gameagent");
    let face = start(open(&dir), &["127.0.0.1:0"], &[], relaxed()).await;
    let (game, server) = serve(face.udp[0], "127.0.0.1:0", "serioussam").await;
    assert!(
        until(|| state(&face.handle, "serioussam", game) == Some(Verification::Verified)).await
    );
    server.abort();
    let last = face
        .handle
        .with_registry(|r| r.iter().map(|r| r.last_heartbeat).max().unwrap());
    assert!(
        face.handle
            .prune(last.plus(Duration::from_secs(299)))
            .is_empty(),
        "within 300 s"
    );
    assert_eq!(
        face.handle.prune(last.plus(Duration::from_secs(300))).len(),
        1
    );
    assert_eq!(state(&face.handle, "serioussam", game), None, "expired");
    assert_eq!(face.handle.metrics().drops("expired"), 1);
    assert!(until(|| face.handle.snapshot().is_empty()).await);
    assert!(e_list(face.udp[0], "127.0.0.1:0").await.is_empty());
    face.stop().await;
}

/// IPv6: an `e` over IPv6 gets the IPv4 list; a registration from an IPv6 source is counted
/// and dropped (§8.1.2).
#[tokio::test]
async fn ipv6_list_requests_are_answered_and_registrations_refused() {
    let dir = TempDir::new("gameagent");
    let face = start(open(&dir), &["127.0.0.1:0", "[::1]:0"], &[], relaxed()).await;
    let (game, _server) = serve(face.udp[0], "127.0.0.1:0", "serioussam").await;
    assert!(
        until(|| state(&face.handle, "serioussam", game) == Some(Verification::Verified)).await
    );
    assert_eq!(
        e_list(face.udp[1], "[::1]:0").await,
        vec![SocketAddr::V4(game)]
    );
    let v6 = UdpSocket::bind("[::1]:0").await.unwrap();
    v6.send_to(b"q", face.udp[1]).await.unwrap();
    let metrics = face.handle.metrics();
    assert!(until(|| metrics.drops("ipv6_heartbeat") == 1).await);
    let mut buf = [0u8; 16];
    assert!(
        tokio::time::timeout(Duration::from_millis(100), v6.recv_from(&mut buf))
            .await
            .is_err(),
        "no challenge to IPv6"
    );
    face.stop().await;
}

/// A per-product listener lists only its products; registrations on it count for all.
#[tokio::test]
async fn product_listener_lists_its_products_only() {
    let dir = TempDir::new("gameagent");
    let face = start(
        open(&dir),
        &["127.0.0.1:0"],
        &[("127.0.0.1:0", &["SeriousSamSE"])],
        relaxed(),
    )
    .await;
    let (fe, _a) = serve(face.udp[0], "127.0.0.1:0", "serioussam").await;
    let (se, _b) = serve(face.scoped[0], "127.0.0.1:0", "serioussamse").await;
    let both = || {
        state(&face.handle, "serioussam", fe) == Some(Verification::Verified)
            && state(&face.handle, "serioussamse", se) == Some(Verification::Verified)
    };
    assert!(until(both).await);
    let mut all = e_list(face.udp[0], "127.0.0.1:0").await;
    all.sort();
    let mut want = vec![SocketAddr::V4(fe), SocketAddr::V4(se)];
    want.sort();
    assert_eq!(all, want);
    assert_eq!(
        e_list(face.scoped[0], "127.0.0.1:0").await,
        vec![SocketAddr::V4(se)]
    );
    face.stop().await;
}

/// After a restart the registry still lists what it had; the face re-challenges the restored
/// records at once, so a live server is re-proven within a round trip, and one that is gone
/// is de-listed once its challenges go unanswered.
#[tokio::test]
async fn restart_rechallenges_restored_servers() {
    let dir = TempDir::new("gameagent");
    let face = start(open(&dir), &["127.0.0.1:0"], &[], relaxed()).await;
    let addr = face.udp[0];
    let (live, _live_task) = serve(addr, "127.0.0.1:0", "serioussam").await;
    let (dead, dead_task) = serve(addr, "127.0.0.1:0", "serioussamse").await;
    let both = || {
        state(&face.handle, "serioussam", live) == Some(Verification::Verified)
            && state(&face.handle, "serioussamse", dead) == Some(Verification::Verified)
    };
    assert!(until(both).await);
    dead_task.abort();
    let handle = face.handle.clone();
    face.stop().await;
    drop(handle);

    let handle = open(&dir);
    assert_eq!(
        state(&handle, "serioussam", live),
        Some(Verification::Verified),
        "restored listed"
    );
    let mut settings = relaxed();
    settings.reverify_timeout = Duration::from_millis(200);
    let face = start(handle, &[&addr.to_string()], &[], settings).await;
    assert!(
        until(|| state(&face.handle, "serioussamse", dead) == Some(Verification::Delisted)).await,
        "the silent restored server is de-listed after its challenges"
    );
    assert!(until(|| face.handle.snapshot().len() == 1).await);
    assert_eq!(
        e_list(face.udp[0], "127.0.0.1:0").await,
        vec![SocketAddr::V4(live)],
        "the live one re-verified without waiting for its 150 s heartbeat"
    );
    assert_eq!(
        state(&face.handle, "serioussam", live),
        Some(Verification::Verified)
    );
    face.stop().await;
}

/// Lets the face run for `d` of virtual time (the clock is paused).
async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Spoofed keep-alives (echo 0 from the server's address after it died) keep refreshing the
/// record, but the periodic re-verification (600 s, three challenges 10 s apart) de-lists it
/// (§8.3 rule 6), in the registry as well as in `e`.
#[tokio::test]
async fn spoofed_keepalives_cannot_outlive_reverification() {
    let dir = TempDir::new("gameagent");
    let face = start(open(&dir), &["127.0.0.1:0"], &[], relaxed()).await;
    let (game, server) = serve(face.udp[0], "127.0.0.1:0", "serioussam").await;
    assert!(
        until(|| state(&face.handle, "serioussam", game) == Some(Verification::Verified)).await
    );
    server.abort();
    let _ = server.await;
    let query = SocketAddrV4::new(*game.ip(), game.port() + 1);
    let spoof = UdpSocket::bind(SocketAddr::V4(query)).await.unwrap();
    let hb: &[u8] = b"0;challenge;0;players;0;maxplayers;8;level;L;gametype;Coop;version;1.10;product;serioussam";
    tokio::time::pause();
    for _ in 0..6 {
        spoof.send_to(hb, face.udp[0]).await.unwrap();
        settle(Duration::from_millis(10)).await;
        tokio::time::advance(Duration::from_secs(100)).await;
    }
    settle(Duration::from_secs(2)).await;
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(Duration::from_secs(1), spoof.recv_from(&mut buf))
        .await
        .expect("a re-verification challenge")
        .unwrap();
    assert_eq!((n, buf[0]), (5, 0x01));
    assert_eq!(
        state(&face.handle, "serioussam", game),
        Some(Verification::Verified),
        "listed while the challenge is outstanding"
    );
    // Keep-alives every 10 s go on; three unanswered challenges 10 s apart de-list the record
    // all the same. (The face machine's own tests time this exactly; here a loaded machine may
    // deliver a datagram after the virtual clock moved on, so a few more rounds are allowed.)
    let mut rounds = 0;
    while state(&face.handle, "serioussam", game) != Some(Verification::Delisted) {
        rounds += 1;
        assert!(rounds <= 10, "still listed after 100 s of keep-alives");
        spoof.send_to(hb, face.udp[0]).await.unwrap();
        settle(Duration::from_millis(10)).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        settle(Duration::from_secs(2)).await;
    }
    assert!(
        rounds >= 3,
        "de-listed after {rounds} rounds, before its three challenges"
    );
    tokio::time::resume();
    // Lists follow the registry at the next publish.
    assert!(until(|| face.handle.snapshot().listed().is_empty()).await);
    assert!(e_list(face.udp[0], "127.0.0.1:0").await.is_empty());
    assert!(face.handle.metrics().drops("expired") == 0);
    face.stop().await;
}

/// A machine that answers every datagram with the name of the thread it runs on.
struct ThreadName;

impl UdpMachine for ThreadName {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, _data: &[u8]) {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        cx.out
            .send(via, from, name.into_bytes(), ReplyKind::Control);
    }
    fn on_timeout(&mut self, _cx: &mut Cx<'_>) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// The daemon runs each UDP face on a thread of its own (its own reactor: no datagram waits
/// for a worker busy with HTTP tasks), and the face stops with the daemon's token.
#[tokio::test]
async fn a_face_on_its_own_thread_answers_and_stops_with_the_token() {
    let dir = TempDir::new("own-thread");
    let handle = open(&dir);
    let sock = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sock.local_addr().unwrap();
    let stop = muster_master::CancellationToken::new();
    let task = tokio::spawn(run_on_own_thread(
        handle,
        ThreadName,
        vec![sock],
        Budgets::default(),
        stop.clone(),
    ));
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(b"?", addr).await.unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(WAIT, client.recv_from(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(&buf[..n], b"muster-echo");
    stop.cancel();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the face stops")
        .unwrap();
}
