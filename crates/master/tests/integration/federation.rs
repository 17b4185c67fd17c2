//! Federation over loopback: one Muster (A) serves its faces; another (B) learns from it over
//! every upstream kind, verifying each server with its own query before listing it. Fake game
//! servers answer with the proto responders; a fake GameSpy master lies. Two masters that pull
//! from each other converge and stop.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_master::MasterHandle;
use muster_master::config::Config;
use muster_master::registry::{
    Face, GameAddr, Outcome, PollFields, PollInfo, Registration, ServerKey, Timestamp,
};
use muster_master::upstream::settings::{GameSpyMode, UpstreamConfig, UpstreamKind};
use muster_master::upstream::{PullReport, Upstream};
use muster_proto::Protocol;
use muster_proto::gameagent::respond::{GameAgentResponder, ResponderConfig as GaConfig};
use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::limit::SourceKey;
use muster_proto::respond::{Reply, Responder, ServerState};
use muster_proto::teeworlds::respond::{ResponderConfig as TwConfig, TeeworldsResponder};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

use crate::{Daemon, TempDir, config, get_json, loopback};

/// A fake game server on loopback answering with `responder`; `mute` silences it.
pub(crate) struct Fake {
    pub(crate) addr: SocketAddr,
    mute: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    pub(crate) fn mute(&self, on: bool) {
        self.mute.store(on, Ordering::Relaxed);
    }
}

pub(crate) async fn fake(
    mut responder: impl Responder + Send + 'static,
    state: ServerState,
) -> Fake {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let mute = Arc::new(AtomicBool::new(false));
    let m = Arc::clone(&mute);
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        let mut out: Vec<Reply> = Vec::new();
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            if m.load(Ordering::Relaxed) {
                continue;
            }
            out.clear();
            let _ = responder.handle_datagram(Instant::now(), from, &buf[..n], &state, &mut out);
            for reply in &out {
                let _ = sock.send_to(&reply.bytes, reply.to).await;
            }
        }
    });
    Fake { addr, mute, task }
}

pub(crate) fn state(name: &str, game: &str, game_port: u16) -> ServerState {
    ServerState {
        name: name.to_owned(),
        map: "DM-Deck16".to_owned(),
        game_type: "DeathMatch".to_owned(),
        game: game.to_owned(),
        game_port,
        max_players: 8,
        ..ServerState::default()
    }
}

pub(crate) fn gamespy_server(
    profile: Profile,
    name: &str,
    game: &str,
) -> impl Future<Output = Fake> {
    fake(
        GameSpyResponder::with_profile(profile),
        state(name, game, 7777),
    )
}

pub(crate) async fn teeworlds_server(name: &str) -> Fake {
    let cfg = TwConfig {
        hostname: name.to_owned(),
        ..TwConfig::default()
    };
    fake(
        TeeworldsResponder::new(cfg, rand::random()),
        state(name, "", 0),
    )
    .await
}

/// Lists a record in `h` as its face would after proof.
pub(crate) fn direct(
    h: &MasterHandle,
    game: &str,
    face: Face,
    protocol: Option<Protocol>,
    key_addr: SocketAddr,
    query: Option<SocketAddr>,
    game_port: Option<u16>,
) -> ServerKey {
    let key = ServerKey::new(game, GameAddr::Ip(key_addr));
    let reg = Registration {
        key: key.clone(),
        face,
        game_port,
        query_addr: query,
        query_protocol: protocol,
        source: SourceKey::of(key_addr.ip()),
    };
    assert_eq!(h.register(reg, Timestamp::now()), Outcome::Added);
    key
}

/// A master serving every face on loopback, no poller, syncing with any loopback peer.
pub(crate) fn serving_master(dir: &TempDir) -> Daemon {
    let mut c = config(dir);
    c.poller.enabled = false;
    c.listen.gamespy_udp = loopback();
    c.listen.gamespy_tcp = loopback();
    c.listen.gameagent = loopback();
    c.listen.teeworlds06 = loopback();
    c.listen.teeworlds07 = loopback();
    c.federation.sync_peers = vec!["127.0.0.0/8".to_owned()];
    Daemon::start(c)
}

/// A master that only learns (HTTP only, no poller): the test drives its upstreams.
pub(crate) fn learning_master(dir: &TempDir) -> Daemon {
    let mut c: Config = config(dir);
    c.poller.enabled = false;
    Daemon::start(c)
}

pub(crate) fn upstream(b: &Daemon, kind: UpstreamKind, address: &str, name: &str) -> Upstream {
    let mut c = UpstreamConfig::new(kind, address);
    c.name = Some(name.to_owned());
    upstream_with(b, c)
}

pub(crate) fn upstream_with(b: &Daemon, c: UpstreamConfig) -> Upstream {
    Upstream::new(
        c,
        Arc::from("00000000-0000-4000-8000-000000000000"),
        &b.handle,
    )
    .unwrap()
    .with_timing(Duration::from_secs(10), Duration::from_millis(300))
}

/// `game@address (source, …)` of every listed record.
pub(crate) fn listing(h: &MasterHandle) -> BTreeSet<String> {
    h.with_registry(|r| {
        r.iter()
            .filter(|rec| rec.is_listed())
            .map(|rec| {
                // A record registered here alone keeps no source list: it reads as direct.
                let mut sources: Vec<String> = rec
                    .sources()
                    .iter()
                    .map(|s| s.origin.upstream().unwrap_or("direct").to_owned())
                    .collect();
                if sources.is_empty() {
                    sources.push("direct".to_owned());
                }
                format!("{}@{} ({})", rec.key.game, rec.key.addr, sources.join(","))
            })
            .collect()
    })
}

fn set(items: &[String]) -> BTreeSet<String> {
    items.iter().cloned().collect()
}

/// What A lists, each answering server with the name it answers.
struct Fixture {
    a: Daemon,
    ut: Fake,
    ut2004: Fake,
    ga: Fake,
    tw06: Fake,
    tw07: Fake,
    silent: UdpSocket,
    _dir: TempDir,
}

async fn fixture() -> Fixture {
    let dir = TempDir::new("fed-a");
    let a = serving_master(&dir);
    let h = a.handle.clone();
    let ut = gamespy_server(Profile::Ut99, "Facing Worlds", "ut").await;
    let ut2004 = gamespy_server(Profile::Ut2003, "Onslaught", "ut2004").await;
    let ga = fake(
        GameAgentResponder::new(GaConfig::default()),
        state("Sam", "", 0),
    )
    .await;
    let tw06 = teeworlds_server("Tee 06").await;
    let tw07 = teeworlds_server("Tee 07").await;
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let s = silent.local_addr().unwrap();
    let gs = Some(Protocol::GameSpy1);
    direct(&h, "ut", Face::GameSpy, gs, ut.addr, Some(ut.addr), None);
    direct(
        &h,
        "ut2004",
        Face::GameSpy,
        gs,
        ut2004.addr,
        Some(ut2004.addr),
        Some(7777),
    );
    // A server A lists that does not answer: no master that pulls from A may list it.
    direct(&h, "ut", Face::GameSpy, gs, s, Some(s), None);
    let ga_game = SocketAddr::new(ga.addr.ip(), ga.addr.port() - 1);
    direct(
        &h,
        "serioussamse",
        Face::GameAgent,
        Some(Protocol::GameAgent),
        ga_game,
        Some(ga.addr),
        Some(ga_game.port()),
    );
    for (f, face) in [(&tw06, Face::Teeworlds06), (&tw07, Face::Teeworlds07)] {
        let k = direct(
            &h,
            "teeworlds",
            face,
            Some(Protocol::Teeworlds),
            f.addr,
            Some(f.addr),
            Some(f.addr.port()),
        );
        // servers.json shows UDP-registered servers with what their polls said.
        let info = PollInfo::from(PollFields {
            name: "tee".into(),
            max_players: 16,
            ..PollFields::default()
        });
        h.update_poll(&k, Some(info), Timestamp::now());
    }
    // A management record is shown but cannot be queried: never learned.
    let mgmt = ServerKey::new("bomberman", GameAddr::Ip("127.0.0.1:2000".parse().unwrap()))
        .with_instance(1);
    h.register(
        Registration {
            key: mgmt,
            face: Face::Mgmt,
            game_port: Some(2000),
            query_addr: None,
            query_protocol: None,
            source: SourceKey::of("127.0.0.1".parse().unwrap()),
        },
        Timestamp::now(),
    );
    h.publish();
    Fixture {
        a,
        ut,
        ut2004,
        ga,
        tw06,
        tw07,
        silent,
        _dir: dir,
    }
}

#[tokio::test]
async fn every_kind_of_upstream_is_learned_after_verification_only() {
    let f = fixture().await;
    let http = f.a.http();
    let silent = f.silent.local_addr().unwrap();
    let ga_game = SocketAddr::new(f.ga.addr.ip(), f.ga.addr.port() - 1);
    let ut = format!("ut@{}", f.ut.addr);
    let ut2004 = format!("ut2004@{}", f.ut2004.addr);
    let ga = format!("serioussamse@{ga_game}");
    let tw06 = format!("teeworlds@{}", f.tw06.addr);
    let tw07 = format!("teeworlds@{}", f.tw07.addr);
    let gamespy = f.a.addr("gamespy-tcp").to_string();
    let mut list_mode = UpstreamConfig::new(UpstreamKind::Gamespy, &gamespy);
    list_mode.mode = GameSpyMode::List;
    list_mode.games = vec!["ut".into(), "ut2004".into()];
    list_mode.name = Some("up".into());
    let cases: Vec<(UpstreamConfig, Vec<&String>, usize)> = vec![
        (
            UpstreamConfig::new(UpstreamKind::Gamespy, &gamespy),
            vec![&ut, &ut2004],
            1,
        ),
        (list_mode, vec![&ut, &ut2004], 1),
        (
            UpstreamConfig::new(UpstreamKind::GameAgent, &f.a.addr("gameagent").to_string()),
            vec![&ga],
            0,
        ),
        (
            UpstreamConfig::new(
                UpstreamKind::Teeworlds06,
                &f.a.addr("teeworlds06").to_string(),
            ),
            vec![&tw06],
            0,
        ),
        (
            UpstreamConfig::new(
                UpstreamKind::Teeworlds07,
                &f.a.addr("teeworlds07").to_string(),
            ),
            vec![&tw07],
            0,
        ),
        (
            UpstreamConfig::new(
                UpstreamKind::Ddnet,
                &format!("http://{http}/ddnet/15/servers.json"),
            ),
            vec![&tw06, &tw07],
            0,
        ),
        (
            UpstreamConfig::new(
                UpstreamKind::Ut2003Text,
                &format!("http://{http}/serverlist/ut2004.txt"),
            ),
            vec![&ut2004],
            0,
        ),
        (
            UpstreamConfig::new(UpstreamKind::Muster, &format!("http://{http}")),
            vec![&ut, &ut2004, &ga, &tw06, &tw07],
            1,
        ),
    ];
    for (mut c, want, silent_listed) in cases {
        let kind = c.kind.name();
        c.name = Some("up".into());
        let dir = TempDir::new("fed-b");
        let b = learning_master(&dir);
        let mut up = upstream_with(&b, c);
        let r: PullReport = up
            .pull_once(&b.handle)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let expected: BTreeSet<String> = want.iter().map(|w| format!("{w} (up)")).collect();
        assert_eq!(listing(&b.handle), expected, "{kind}: {r:?}");
        assert_eq!(r.verified, want.len(), "{kind}");
        assert_eq!(
            r.unanswered, silent_listed,
            "{kind}: the silent server was asked, not listed"
        );
        assert!(
            !listing(&b.handle)
                .iter()
                .any(|l| l.contains(&silent.to_string())),
            "{kind}: never listed"
        );
        // What a learned record looks like in the API, and what the next pull does.
        b.handle.publish();
        let list = get_json(b.http(), "/api/v1/servers", 200).await;
        let first = &list["servers"][0];
        assert_eq!(first["sources"][0]["origin"], "upstream", "{kind}: {first}");
        assert_eq!(first["sources"][0]["upstream"], "up");
        let again = up.pull_once(&b.handle).await.unwrap();
        assert_eq!(again.known, want.len(), "{kind}: {again:?}");
        assert_eq!(
            (again.queried, again.verified),
            (0, 0),
            "{kind}: known servers are not asked again"
        );
        let row = b.handle.metrics().upstreams().get("up").unwrap();
        assert_eq!(
            (row.pulls_ok, row.learned, row.verified),
            (2, want.len(), want.len() as u64),
            "{kind}"
        );
        b.stop().await;
    }
}

#[tokio::test]
async fn an_upstream_that_drops_a_server_or_whose_server_goes_silent() {
    let f = fixture().await;
    let dir = TempDir::new("fed-b");
    let b = learning_master(&dir);
    let mut up = upstream(
        &b,
        UpstreamKind::Muster,
        &format!("http://{}", f.a.http()),
        "a",
    );
    up.pull_once(&b.handle).await.unwrap();
    assert_eq!(listing(&b.handle).len(), 5);
    // A drops the UT server: B's next pull drops it too (its only source).
    let key = ServerKey::new("ut", GameAddr::Ip(f.ut.addr));
    f.a.handle.remove(&key);
    f.a.handle.publish();
    let r = up.pull_once(&b.handle).await.unwrap();
    assert_eq!((r.dropped, r.removed), (1, 1), "{r:?}");
    assert!(b.handle.with_registry(|r| r.get(&key).is_none()));
    // A server that stops answering B's polls leaves B like one that registered there would
    // be de-listed; a learned one is removed.
    f.tw06.mute(true);
    let tw = ServerKey::new("teeworlds", GameAddr::Ip(f.tw06.addr));
    assert_eq!(
        b.handle.delist(&tw),
        muster_master::registry::DelistOutcome::Delisted
    );
    assert!(b.handle.with_registry(|r| r.get(&tw).is_none()));
    // A offers it again: not listed while silent, listed once it answers.
    let r = up.pull_once(&b.handle).await.unwrap();
    assert_eq!((r.queried, r.verified, r.unanswered), (1, 0, 1), "{r:?}");
    assert!(b.handle.with_registry(|r| r.get(&tw).is_none()));
    drop(f.ut2004);
    b.stop().await;
}

/// A GameSpy master that lists `listed` to every sync (a `\sync\` reply for game `ut`).
async fn lying_master(listed: Vec<SocketAddr>) -> (SocketAddr, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let listed = listed.clone();
            tokio::spawn(async move {
                s.write_all(b"\\basic\\\\secure\\ABCDEF").await.unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 512];
                while got.windows(7).filter(|w| *w == b"\\final\\").count() < 2 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let mut out = b"\\ut\\".to_vec();
                for a in &listed {
                    out.extend_from_slice(format!("{a} ").as_bytes());
                }
                out.extend_from_slice(b"\\final\\");
                let _ = s.write_all(&out).await;
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_lying_upstream_adds_load_never_entries() {
    let real = gamespy_server(Profile::Ut99, "Real", "ut").await;
    // 40 addresses where nothing answers (sockets held open and never read, so no ICMP
    // refusal either), and one real server.
    let mut holes = Vec::new();
    for _ in 0..40 {
        holes.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    let mut listed: Vec<SocketAddr> = holes.iter().map(|s| s.local_addr().unwrap()).collect();
    listed.push(real.addr);
    let (master, _task) = lying_master(listed).await;
    let dir = TempDir::new("fed-b");
    let b = learning_master(&dir);
    let mut c = UpstreamConfig::new(UpstreamKind::Gamespy, &master.to_string());
    c.name = Some("liar".into());
    c.max_unverified = 16;
    c.verify_per_second = 200;
    let mut up = upstream_with(&b, c);
    let r = up.pull_once(&b.handle).await.unwrap();
    assert_eq!(r.listed, 41);
    assert_eq!(r.queried, 16, "at most max_unverified asked: {r:?}");
    assert_eq!(r.over_cap, 25);
    assert_eq!(
        b.handle.with_registry(|r| r.len()),
        0,
        "nothing from it is listed: {r:?}"
    );
    // Later pulls: the silent ones cool down, the rest are asked, the real one gets in.
    let mut verified = 0;
    for _ in 0..3 {
        let r = up.pull_once(&b.handle).await.unwrap();
        assert!(r.queried <= 16, "{r:?}");
        verified += r.verified;
    }
    assert_eq!(verified, 1);
    assert_eq!(
        listing(&b.handle),
        set(&[format!("ut@{} (liar)", real.addr)])
    );
    let row = b.handle.metrics().upstreams().get("liar").unwrap();
    assert_eq!(row.unanswered, 40);
    assert_eq!(row.learned, 1);
    b.stop().await;
}

#[tokio::test]
async fn two_masters_pulling_from_each_other_converge_and_stop() {
    for kind in [UpstreamKind::Muster, UpstreamKind::Gamespy] {
        let (da, db) = (TempDir::new("fed-a"), TempDir::new("fed-b"));
        let a = serving_master(&da);
        let b = serving_master(&db);
        let s1 = gamespy_server(Profile::Ut99, "One", "ut").await;
        let s2 = gamespy_server(Profile::Unreal227, "Two", "unreal").await;
        let s3 = gamespy_server(Profile::Ut99, "Three", "ut").await;
        let gs = Some(Protocol::GameSpy1);
        direct(
            &a.handle,
            "ut",
            Face::GameSpy,
            gs,
            s1.addr,
            Some(s1.addr),
            None,
        );
        direct(
            &a.handle,
            "unreal",
            Face::GameSpy,
            gs,
            s2.addr,
            Some(s2.addr),
            None,
        );
        let k3 = direct(
            &b.handle,
            "ut",
            Face::GameSpy,
            gs,
            s3.addr,
            Some(s3.addr),
            None,
        );
        a.handle.publish();
        b.handle.publish();
        let address = |d: &Daemon| match kind {
            UpstreamKind::Muster => format!("http://{}", d.http()),
            _ => d.addr("gamespy-tcp").to_string(),
        };
        let mut a_from_b = upstream(&a, kind, &address(&b), "b");
        let mut b_from_a = upstream(&b, kind, &address(&a), "a");
        let want_a = set(&[
            format!("ut@{} (direct)", s1.addr),
            format!("unreal@{} (direct)", s2.addr),
            format!("ut@{} (b)", s3.addr),
        ]);
        let want_b = set(&[
            format!("ut@{} (a)", s1.addr),
            format!("unreal@{} (a)", s2.addr),
            format!("ut@{} (direct)", s3.addr),
        ]);
        let mut versions = Vec::new();
        for round in 0..4 {
            let ra = a_from_b.pull_once(&a.handle).await.unwrap();
            a.handle.publish();
            let rb = b_from_a.pull_once(&b.handle).await.unwrap();
            b.handle.publish();
            assert_eq!(listing(&a.handle), want_a, "{kind:?} round {round}: {ra:?}");
            assert_eq!(listing(&b.handle), want_b, "{kind:?} round {round}: {rb:?}");
            if round > 0 {
                assert_eq!(
                    (ra.queried, rb.queried),
                    (0, 0),
                    "{kind:?}: nothing new to verify"
                );
                assert_eq!((ra.dropped, rb.dropped), (0, 0));
            }
            let structural = |h: &MasterHandle| h.with_registry(|r| r.len());
            versions.push((structural(&a.handle), structural(&b.handle)));
        }
        assert!(
            versions.iter().all(|v| *v == (3, 3)),
            "{kind:?}: no growth: {versions:?}"
        );
        // s3 leaves B: A drops it at its next pull, and B does not learn it back from A.
        b.handle.remove(&k3);
        b.handle.publish();
        let ra = a_from_b.pull_once(&a.handle).await.unwrap();
        a.handle.publish();
        assert_eq!(ra.removed, 1, "{kind:?}: {ra:?}");
        b_from_a.pull_once(&b.handle).await.unwrap();
        assert_eq!(listing(&a.handle).len(), 2, "{kind:?}");
        assert_eq!(
            listing(&b.handle).len(),
            2,
            "{kind:?}: only A's own servers"
        );
        a.stop().await;
        b.stop().await;
    }
}

#[tokio::test]
async fn a_configured_upstream_is_pulled_at_start_and_reported() {
    let f = fixture().await;
    let dir = TempDir::new("fed-b");
    let mut c = config(&dir);
    c.poller.enabled = false;
    let mut u = UpstreamConfig::new(UpstreamKind::Muster, &format!("http://{}", f.a.http()));
    u.name = Some("a".into());
    c.upstream.push(u);
    let mut dead = UpstreamConfig::new(UpstreamKind::Gamespy, "127.0.0.1:1");
    dead.name = Some("dead".into());
    c.upstream.push(dead);
    let b = Daemon::start(c);
    let h = b.handle.clone();
    assert!(
        crate::face_gamespy::until(|| h.with_registry(|r| r.len()) == 5).await,
        "learned at start: {:?}",
        listing(&h)
    );
    let rows = crate::face_gamespy::until(|| {
        let rows = h.metrics().upstreams().rows();
        rows.iter().all(|r| r.last_attempt.is_some()) && rows.iter().any(|r| r.pulls_ok == 1)
    })
    .await;
    assert!(rows);
    let health = get_json(b.http(), "/healthz", 200).await;
    let ups = health["upstreams"].as_array().unwrap();
    assert_eq!(ups.len(), 2, "{health}");
    assert_eq!(
        (ups[0]["name"].as_str(), ups[0]["status"].as_str()),
        (Some("a"), Some("ok"))
    );
    assert_eq!(ups[0]["learned"], 5);
    assert_eq!(
        (ups[1]["name"].as_str(), ups[1]["status"].as_str()),
        (Some("dead"), Some("failing"))
    );
    assert!(
        ups[1]["last_error"].as_str().unwrap().contains("connect"),
        "{health}"
    );
    assert_eq!(
        health["status"], "ok",
        "an upstream's failure is not the master's"
    );
    let (_, metrics) = crate::get(b.http(), "/metrics").await;
    assert!(
        metrics.contains("muster_upstream_verified_total{upstream=\"a\",kind=\"muster\"} 5"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("muster_upstream_pull_failures_total{upstream=\"dead\",kind=\"gamespy\"} 1")
    );
    b.stop().await;
}

#[tokio::test]
async fn the_api_documents_sources_and_upstreams() {
    let dir = TempDir::new("fed-doc");
    let d = learning_master(&dir);
    let doc = get_json(d.http(), "/api/v1/openapi.json", 200).await;
    let schemas = &doc["components"]["schemas"];
    assert!(
        schemas["ServerSummary"]["properties"]["sources"].is_object(),
        "{schemas}"
    );
    assert!(
        schemas["SourceDto"]["properties"]["origin"].is_object(),
        "{schemas}"
    );
    assert!(
        schemas["UpstreamHealthDto"]["properties"]["last_success"].is_object(),
        "{schemas}"
    );
    d.stop().await;
}
