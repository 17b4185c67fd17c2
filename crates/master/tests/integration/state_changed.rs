//! `\statechanged` (GameSpy) and `u` (GameAgent) reach the poller: the whole daemon
//! (`Master::run`) with the poller on and a one-hour poll interval, fake servers that register
//! over the real faces, answer queries with the proto responders and count the poller's
//! queries. A query after the first poll can then only come from the change notice.
//! Also: a GameAgent heartbeat's fields show in the HTTP API before any poll.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muster_master::MasterHandle;
use muster_master::config::HumanDuration;
use muster_master::registry::{GameAddr, ServerKey, Verification};
use muster_proto::gameagent::respond::{GameAgentResponder, ResponderConfig};
use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::respond::{PlayerState, Reply, Responder, ServerState};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::{Daemon, TempDir, config, get_json, loopback};

/// The daemon with the GameAgent, GameSpy UDP and HTTP faces; the poller (if on) polls
/// every hour.
fn start(dir: &TempDir, poller: bool) -> Daemon {
    let mut c = config(dir);
    c.listen.gameagent = loopback();
    c.listen.gamespy_udp = loopback();
    c.poller.enabled = poller;
    c.poller.interval = HumanDuration(Duration::from_secs(3600));
    c.history.enabled = false;
    Daemon::start(c)
}

/// A fake game server on one loopback socket: datagrams from `master` that start with `01`
/// are GameAgent challenges, answered with a heartbeat carrying `players`; everything else is
/// answered by `responder`, and datagrams not from `master` are counted (the poller's).
struct Fake {
    socket: Arc<UdpSocket>,
    addr: SocketAddr,
    polls: Arc<AtomicUsize>,
    players: Arc<AtomicU32>,
    task: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn heartbeat(challenge: i32, players: u32) -> String {
    format!(
        "0;challenge;{challenge};players;{players};maxplayers;16;level;Yodeller;\
         gametype;Cooperative;version;1.10;product;serioussam"
    )
}

async fn fake(master: SocketAddr, mut responder: impl Responder + Send + 'static) -> Fake {
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = socket.local_addr().unwrap();
    let polls = Arc::new(AtomicUsize::new(0));
    let players = Arc::new(AtomicU32::new(3));
    let state = ServerState {
        name: "Changed Lab".into(),
        map: "Sand Canyon".into(),
        game_type: "Cooperative".into(),
        version: "1.10".into(),
        game: "serioussam".into(),
        max_players: 16,
        players: vec![PlayerState {
            name: "Sam".into(),
            score: 1,
            ..PlayerState::default()
        }],
        ..ServerState::default()
    };
    let (s, p, n) = (
        Arc::clone(&socket),
        Arc::clone(&polls),
        Arc::clone(&players),
    );
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        let mut out: Vec<Reply> = Vec::new();
        while let Ok((len, from)) = s.recv_from(&mut buf).await {
            let data = &buf[..len];
            if from == master && data.len() >= 5 && data[0] == 0x01 {
                let c = i32::from_le_bytes([data[1], data[2], data[3], data[4]]);
                let hb = heartbeat(c, n.load(Ordering::Relaxed));
                let _ = s.send_to(hb.as_bytes(), from).await;
                continue;
            }
            if from != master {
                p.fetch_add(1, Ordering::Relaxed);
            }
            out.clear();
            let _ = responder.handle_datagram(Instant::now(), from, data, &state, &mut out);
            for r in &out {
                let _ = s.send_to(&r.bytes, r.to).await;
            }
        }
    });
    Fake {
        socket,
        addr,
        polls,
        players,
        task,
    }
}

/// Waits (at most 10 s) until `f` holds; returns how long it took.
async fn until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if f() {
            return t.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A fake GameAgent server that registers with the face at `face` (`q`, challenge,
/// heartbeat), once it is listed: the fake, its game address (query port − 1) and its key.
async fn gameagent_listed(face: SocketAddr, h: &MasterHandle) -> (Fake, SocketAddr, ServerKey) {
    let ga = fake(face, GameAgentResponder::new(ResponderConfig::default())).await;
    ga.socket.send_to(b"q", face).await.unwrap();
    let game = SocketAddr::new(ga.addr.ip(), ga.addr.port() - 1);
    let key = ServerKey::new("serioussam", GameAddr::Ip(game));
    until("gameagent server listed", || listed(h, &key)).await;
    (ga, game, key)
}

fn polled(h: &MasterHandle, key: &ServerKey) -> bool {
    h.with_registry(|r| r.get(key).is_some_and(|r| r.last_poll_ok().is_some()))
}

fn listed(h: &MasterHandle, key: &ServerKey) -> bool {
    h.with_registry(|r| {
        r.get(key)
            .is_some_and(|r| r.state == Verification::Verified)
    })
}

#[tokio::test]
async fn statechanged_and_u_are_polled_long_before_the_interval() {
    let dir = TempDir::new("changed");
    let m = start(&dir, true);
    let h = m.handle.clone();
    let (gameagent, gamespy) = (m.addr("gameagent"), m.addr("gamespy-udp"));

    // GameAgent: q, challenge, heartbeat -> listed; the first poll comes at once (never
    // polled); after it, the next regular poll is an hour away.
    let (ga, _, ga_key) = gameagent_listed(gameagent, &h).await;
    until("gameagent first poll", || polled(&h, &ga_key)).await;

    // GameSpy (Serious Sam): heartbeat, verified by the face's own `\status\` (which counts as
    // the first poll), then a `\statechanged` heartbeat.
    let gs = fake(gamespy, GameSpyResponder::with_profile(Profile::SeriousSam)).await;
    let hb = format!("\\heartbeat\\{}\\gamename\\serioussamse", gs.addr.port());
    gs.socket.send_to(hb.as_bytes(), gamespy).await.unwrap();
    let gs_key = ServerKey::new("serioussamse", GameAddr::Ip(gs.addr));
    until("gamespy server listed", || listed(&h, &gs_key)).await;
    until("gamespy server info", || polled(&h, &gs_key)).await;

    // Let polls in flight finish, then take the counts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (ga_before, gs_before) = (
        ga.polls.load(Ordering::Relaxed),
        gs.polls.load(Ordering::Relaxed),
    );
    let gs_poll_before = h.with_registry(|r| r.get(&gs_key).unwrap().last_poll_ok());

    ga.socket.send_to(b"u", gameagent).await.unwrap();
    let ga_took = until("a poll after `u`", || {
        ga.polls.load(Ordering::Relaxed) > ga_before
    })
    .await;
    let sc = format!("{hb}\\statechanged");
    gs.socket.send_to(sc.as_bytes(), gamespy).await.unwrap();
    let gs_took = until("a poll after \\statechanged", || {
        gs.polls.load(Ordering::Relaxed) > gs_before
    })
    .await;
    until("the statechanged poll stored", || {
        h.with_registry(|r| r.get(&gs_key).unwrap().last_poll_ok()) > gs_poll_before
    })
    .await;
    let _ = writeln!(
        std::io::stderr(),
        "re-polled after `u` in {ga_took:?}, after \\statechanged in {gs_took:?} (interval 1 h)"
    );
    assert!(listed(&h, &ga_key) && listed(&h, &gs_key));

    // A second `u` within the 10 s gap does not poll again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ga_after = ga.polls.load(Ordering::Relaxed);
    ga.socket.send_to(b"u", gameagent).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        ga.polls.load(Ordering::Relaxed),
        ga_after,
        "at most one poll per 10 s because of changes"
    );
    m.stop().await;
}

#[tokio::test]
async fn gameagent_heartbeat_fields_show_before_any_poll() {
    let dir = TempDir::new("ga-heartbeat");
    let m = start(&dir, false);
    let h = m.handle.clone();
    let gameagent = m.addr("gameagent");
    let (ga, game, key) = gameagent_listed(gameagent, &h).await;

    let path = format!("/api/v1/servers/{game}");
    let d = get_json(m.http(), &path, 200).await;
    assert_eq!(d["map"], "Yodeller", "{d}");
    assert_eq!(d["game_type"], "Cooperative");
    assert_eq!(
        (d["num_players"].as_u64(), d["max_players"].as_u64()),
        (Some(3), Some(16))
    );
    assert_eq!(d["last_poll"], serde_json::Value::Null, "not a poll");
    assert_eq!(
        d["rules"],
        serde_json::json!({"product": "serioussam", "version": "1.10"}),
        "rules have the command line's shape"
    );

    // A periodic heartbeat (echo 0) updates the fields.
    ga.players.store(5, Ordering::Relaxed);
    ga.socket
        .send_to(heartbeat(0, 5).as_bytes(), gameagent)
        .await
        .unwrap();
    until("the refreshed player count", || {
        h.with_registry(|r| r.get(&key).unwrap().info.as_ref().unwrap().num_players == 5)
    })
    .await;
    m.stop().await;

    // The fields are stored with the record.
    let m = start(&dir, false);
    let d = get_json(m.http(), &path, 200).await;
    assert_eq!(
        (d["map"].as_str(), d["num_players"].as_u64()),
        (Some("Yodeller"), Some(5))
    );
    m.stop().await;
}
