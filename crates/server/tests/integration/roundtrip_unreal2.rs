//! Round trip: muster-query reads the unreal2 responder served by muster-server.
//!
//! Each test serves [`Unreal2Responder`] on loopback with `muster_server::serve`, queries it
//! with `muster_query::spawn` driving [`Unreal2Query`], and checks that the result is the
//! configured [`ServerState`] as a stock server would publish it (bots left out, pings in 4 ms
//! steps, `ServerVersion` and `GamePassword` rules first).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::model::{RawValue, ServerInfo};
use muster_proto::respond::{PlayerState, ServerState};
use muster_proto::unreal2::respond::wire_ping;
use muster_proto::unreal2::{
    Style, Unreal2Config, Unreal2Query, Unreal2Responder, Unreal2Settings,
};
use muster_query::{Job, Options, spawn};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;

struct Served {
    addr: SocketAddr,
    stats: Arc<Stats>,
    _stop: watch::Sender<bool>,
}

async fn serve_unreal2(style: Style, state: ServerState, impairment: Impairment) -> Served {
    serve_unreal2_on("127.0.0.1:0", style, state, impairment).await
}

async fn serve_unreal2_on(
    bind: &str,
    style: Style,
    state: ServerState,
    impairment: Impairment,
) -> Served {
    let socket = UdpSocket::bind(bind).await.expect("bind");
    let addr = socket.local_addr().expect("addr");
    let (_state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    tokio::spawn(serve(
        socket,
        Unreal2Responder::new(Unreal2Settings::with_style(style)),
        state_rx,
        Limits::default(),
        impairment,
        stats.clone(),
        stop_rx,
    ));
    Served {
        addr,
        stats,
        _stop: stop,
    }
}

/// One query with Muster's own engine; the result and how long it took.
async fn query(addr: SocketAddr) -> (ServerInfo, Duration) {
    let jobs = [Job {
        tag: (),
        build: move |cfg| {
            Unreal2Query::new(
                addr,
                Unreal2Config {
                    query: cfg,
                    ..Unreal2Config::default()
                },
            )
        },
    }];
    let options = Options {
        attempt_timeout: Duration::from_secs(2),
        retries: 1,
        ..Options::default()
    };
    let mut rx = spawn(jobs, options);
    let done = rx.recv().await.expect("one result");
    (*done.outcome.expect("query succeeded"), done.elapsed)
}

fn player(name: &str, score: i64, ping_ms: u32, team: Option<i32>) -> PlayerState {
    PlayerState {
        name: name.to_owned(),
        score,
        ping_ms,
        team,
        ..PlayerState::default()
    }
}

/// A team game with Latin-1 and UTF-16-only text, a spectator and a bot.
fn busy_state() -> ServerState {
    ServerState {
        name: "Café Зеркало ★ ñ".into(),
        map: "DM-Rankin".into(),
        game_type: "xTeamGame".into(),
        version: "3369".into(),
        game: "ut2".into(),
        game_port: 7777,
        password: true,
        max_players: 24,
        players: vec![
            player("Alpha", 12, 40, Some(0)),
            player("Betа", -3, 61, Some(1)),
            player("Jérôme", 0, 1500, Some(0)),
            PlayerState {
                spectator: true,
                ..player("Watcher", 0, 100, None)
            },
            PlayerState {
                bot: true,
                ..player("Bot Malcolm", 7, 0, Some(1))
            },
            player("名前", 99, 8, Some(1)),
        ],
        rules: vec![
            ("AdminName".into(), "Bob".into()),
            ("Mutator".into(), "MutInstaGib".into()),
            ("Mutator".into(), "MutQuadJump".into()),
            ("GoalScore".into(), "25".into()),
            ("Motd".into(), "Добро пожаловать".into()),
        ],
    }
}

/// A player as compared: name, score, ping, team.
type PlayerView = (String, Option<i64>, Option<u32>, Option<i32>);

fn text_rules(info: &ServerInfo) -> Vec<(String, String)> {
    info.rules
        .iter()
        .map(|r| (r.key.text.clone(), r.value.text.clone()))
        .collect()
}

/// `info` is exactly what a stock server publishes about `state`.
fn assert_published(info: &ServerInfo, state: &ServerState, style: Style) {
    assert_eq!(info.partial, None);
    assert_eq!(info.name.text, state.name);
    assert!(!info.name.lossy);
    assert_eq!(info.map.text, state.map);
    assert_eq!(info.game_type.text, state.game_type);
    assert_eq!(info.version.text, state.version);
    assert_eq!(info.password, Some(state.password));
    assert_eq!(
        usize::try_from(info.num_players).unwrap(),
        state.active_players().count()
    );
    assert_eq!(info.max_players, state.max_players);
    assert_eq!(
        info.raw_field("port"),
        Some(&RawValue::Int(i64::from(state.game_port)))
    );
    assert_eq!(info.raw_field("query_port"), Some(&RawValue::Int(0)));
    let (version, layout) = match style {
        Style::Ut2004 => (0x80, "ut2004"),
        Style::Ut2003 => (0x79, "ut2003"),
    };
    assert_eq!(info.raw_field("version"), Some(&RawValue::Int(version)));
    let Some(RawValue::Text(l)) = info.raw_field("layout") else {
        panic!("no layout: {:?}", info.raw);
    };
    assert_eq!(l.text, layout);

    let mut want_rules = Vec::new();
    if !state.version.is_empty() {
        want_rules.push(("ServerVersion".to_owned(), state.version.clone()));
    }
    if state.password {
        want_rules.push(("GamePassword".to_owned(), "True".to_owned()));
    }
    want_rules.extend(state.rules.iter().cloned());
    assert_eq!(text_rules(info), want_rules);

    let want_players: Vec<PlayerView> = state
        .players
        .iter()
        .filter(|p| !p.bot)
        .map(|p| {
            (
                p.name.clone(),
                Some(p.score),
                Some(wire_ping(p.ping_ms)),
                p.team,
            )
        })
        .collect();
    let got_players: Vec<_> = info
        .players
        .iter()
        .map(|p| (p.name.text.clone(), p.score, p.ping_ms, p.team))
        .collect();
    assert_eq!(got_players, want_players);
}

#[tokio::test]
async fn unreal2_roundtrip_ut2004_busy_server() {
    let state = busy_state();
    let s = serve_unreal2(Style::Ut2004, state.clone(), Impairment::default()).await;
    let (info, _) = query(s.addr).await;
    assert_published(&info, &state, Style::Ut2004);
    // Four humans playing, plus one spectator listed; the bot is neither.
    assert_eq!(info.num_players, 4);
    assert_eq!(info.players.len(), 5);
}

#[tokio::test]
async fn unreal2_roundtrip_ut2003_busy_server() {
    let state = busy_state();
    let s = serve_unreal2(Style::Ut2003, state.clone(), Impairment::default()).await;
    let (info, _) = query(s.addr).await;
    assert_published(&info, &state, Style::Ut2003);
}

#[tokio::test]
async fn unreal2_roundtrip_no_password_has_no_game_password_rule() {
    for style in [Style::Ut2004, Style::Ut2003] {
        let state = ServerState {
            password: false,
            ..busy_state()
        };
        let s = serve_unreal2(style, state.clone(), Impairment::default()).await;
        let (info, _) = query(s.addr).await;
        assert_published(&info, &state, style);
        assert_eq!(info.password, Some(false));
        assert!(
            info.rules
                .iter()
                .all(|r| !r.key.text.eq_ignore_ascii_case("GamePassword"))
        );
    }
}

#[tokio::test]
async fn unreal2_roundtrip_empty_server_sends_no_players_and_completes_early() {
    for style in [Style::Ut2004, Style::Ut2003] {
        let state = ServerState {
            name: "Empty".into(),
            map: "DM-Gael".into(),
            game_type: "xDeathMatch".into(),
            game_port: 7777,
            players: vec![PlayerState {
                bot: true,
                ..player("Lonely bot", 3, 0, None)
            }],
            ..ServerState::default()
        };
        let s = serve_unreal2(style, state.clone(), Impairment::default()).await;
        let (info, elapsed) = query(s.addr).await;
        assert_published(&info, &state, style);
        assert!(info.players.is_empty());
        assert_eq!(info.num_players, 0);
        // Info + rules: the query ends after the rules' idle gap, not a players timeout.
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
        // Three requests answered, one datagram each (info, rules): no players datagram.
        assert_eq!(crate::counted::settled(&s.stats.sent, 2).await, 2);
    }
}

fn full_state() -> ServerState {
    ServerState {
        name: "Thirty-two ▲ slots".into(),
        map: "ONS-Torlan".into(),
        game_type: "ONSOnslaughtGame".into(),
        version: "3369".into(),
        game_port: 7787,
        max_players: 32,
        players: (0..32)
            .map(|i| {
                player(
                    &format!(
                        "Player {i:02} {}",
                        if i % 3 == 0 { "Ωmega" } else { "plain" }
                    ),
                    i64::from(i) * 7 - 50,
                    u32::try_from(i).unwrap() * 13,
                    Some(i % 2),
                )
            })
            .collect(),
        rules: (0..40)
            .map(|i| ("Mutator".to_owned(), format!("Mut{i:02}")))
            .collect(),
        ..ServerState::default()
    }
}

#[tokio::test]
async fn unreal2_roundtrip_32_players_split_datagrams() {
    for style in [Style::Ut2004, Style::Ut2003] {
        let state = full_state();
        let s = serve_unreal2(style, state.clone(), Impairment::default()).await;
        let (info, _) = query(s.addr).await;
        assert_published(&info, &state, style);
        assert_eq!(info.players.len(), 32);
        // info 1 + rules 2 (§12.4) + players > 1.
        assert!(crate::counted::settled(&s.stats.sent, 5).await >= 5);
    }
}

#[tokio::test]
async fn unreal2_roundtrip_reordered_split_replies_lose_nothing() {
    for style in [Style::Ut2004, Style::Ut2003] {
        let state = full_state();
        let impairment = Impairment {
            reorder: 1.0,
            ..Impairment::default()
        };
        let s = serve_unreal2(style, state.clone(), impairment).await;
        let (mut info, _) = query(s.addr).await;
        assert_ne!(
            info.players.first().map(|p| p.name.text.as_str()),
            Some("Player 00 Ωmega"),
            "the last players datagram came first"
        );
        // Datagrams arrive last-first, so records come datagram by datagram in reverse: compare
        // as sets, then check the rest exactly.
        let mut sorted_state = state.clone();
        sorted_state.players.sort_by(|a, b| a.name.cmp(&b.name));
        sorted_state.rules.sort();
        info.players.sort_by(|a, b| a.name.text.cmp(&b.name.text));
        let at = info
            .rules
            .iter()
            .position(|r| r.key.text == "ServerVersion")
            .expect("ServerVersion rule");
        let server_version = info.rules.remove(at);
        info.rules
            .sort_by(|a, b| (&a.key.text, &a.value.text).cmp(&(&b.key.text, &b.value.text)));
        info.rules.insert(0, server_version);
        assert_published(&info, &sorted_state, style);
    }
}

#[tokio::test]
async fn unreal2_roundtrip_ipv6_loopback() {
    let Ok(probe) = std::net::UdpSocket::bind("[::1]:0") else {
        panic!("::1 is not available on this machine; IPv6 loopback is required for this test");
    };
    drop(probe);
    let state = busy_state();
    let s = serve_unreal2_on(
        "[::1]:0",
        Style::Ut2004,
        state.clone(),
        Impairment::default(),
    )
    .await;
    assert!(s.addr.is_ipv6());
    let (info, _) = query(s.addr).await;
    assert_published(&info, &state, Style::Ut2004);
}
