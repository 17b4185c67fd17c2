//! Round trip: muster-query reads the teeworlds responder served by muster-server.
//!
//! The query asks every family at once and keeps the richest answer (spec §13.1): with a few
//! players the complete 0.7 answer wins; with 64 players the 0.7 reply (one datagram) cannot
//! list everyone, so the complete extended answer (`iext` + `iex+`) wins.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::model::{RawValue, ServerInfo};
use muster_proto::query::QueryConfig;
use muster_proto::respond::{PlayerState, ServerState};
use muster_proto::teeworlds::{ResponderConfig, TeeworldsQuery, TeeworldsResponder, Tokens};
use muster_query::{Job, Options, spawn};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// Names of at most 15 bytes (the Teeworlds player-name limit), Latin-1 and UTF-8 alike.
const NAMES: [&str; 8] = [
    "Jürgen",
    "Ñoño",
    "Æsir øre",
    "Łukasz",
    "名前",
    "★ star",
    "Zoë ©",
    "snow ☃",
];

/// Names and clans fill their limits (15 and 11 bytes), so 64 of them overflow one 0.7
/// datagram.
fn player(i: usize) -> PlayerState {
    let mut name = format!("{} {i}", NAMES[i % NAMES.len()]);
    while name.len() < 15 {
        name.push('.');
    }
    PlayerState {
        name,
        clan: if i % 3 == 2 {
            String::new()
        } else {
            "Clän★Lab".into()
        },
        country: if i % 2 == 0 { 276 } else { -1 },
        score: i64::try_from(i).unwrap() * 7 - 20,
        spectator: i % 5 == 4,
        ..PlayerState::default()
    }
}

fn state(players: usize) -> ServerState {
    ServerState {
        name: "Muster Lab Ünïcödé ★ 名前".into(),
        map: "ctf5".into(),
        game_type: "CTF".into(),
        version: "0.6.4".into(),
        password: true,
        max_players: 64,
        players: (0..players).map(player).collect(),
        ..ServerState::default()
    }
}

async fn serve_responder(
    state: ServerState,
    impairment: Impairment,
) -> (SocketAddr, watch::Sender<bool>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let (_state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    let responder = TeeworldsResponder::new(ResponderConfig::default(), *b"roundtrip secret");
    tokio::spawn(async move {
        let _keep = _state_tx;
        serve(
            socket,
            responder,
            state_rx,
            Limits::unlimited(),
            impairment,
            Arc::new(Stats::default()),
            stop_rx,
        )
        .await
    });
    (addr, stop)
}

async fn query(addr: SocketAddr) -> ServerInfo {
    let options = Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        ..Options::default()
    };
    let jobs = [Job {
        tag: (),
        build: move |cfg: QueryConfig| {
            TeeworldsQuery::new(
                addr,
                cfg,
                Tokens::new(0x00ab_cdef, 0x1234_5678, 4242).unwrap(),
            )
        },
    }];
    let mut rx = spawn(jobs, options);
    let done = rx.recv().await.expect("one result");
    *done.outcome.expect("answered")
}

fn raw<'a>(info: &'a ServerInfo, key: &str) -> Option<&'a RawValue> {
    info.raw.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn family(info: &ServerInfo) -> String {
    match raw(info, "family") {
        Some(RawValue::Text(t)) => t.text.clone(),
        other => panic!("family: {other:?}"),
    }
}

/// Everything the configured state says, as the query reports it.
fn assert_matches(info: &ServerInfo, state: &ServerState) {
    assert_eq!(info.name.text, state.name);
    assert_eq!(info.map.text, state.map);
    assert_eq!(info.game_type.text, state.game_type);
    assert_eq!(info.password, Some(state.password));
    assert_eq!(info.max_players, state.max_players);
    let playing = state.players.iter().filter(|p| !p.spectator).count();
    assert_eq!(info.num_players, u32::try_from(playing).unwrap());
    assert_eq!(
        raw(info, "num_clients"),
        Some(&RawValue::Int(i64::try_from(state.players.len()).unwrap()))
    );
    assert!(info.partial.is_none(), "{:?}", info.partial);
    assert_eq!(info.players.len(), state.players.len());
    for (got, want) in info.players.iter().zip(&state.players) {
        assert_eq!(got.name.text, want.name);
        assert!(!got.name.lossy);
        assert_eq!(got.score, Some(want.score));
        assert_eq!(
            got.clan.as_ref().map(|c| c.text.as_str()),
            Some(want.clan.as_str())
        );
        assert_eq!(got.country, Some(want.country));
        assert_eq!(got.spectator, Some(want.spectator));
    }
}

#[tokio::test]
async fn teeworlds_few_players_read_back_over_0_7() {
    let state = state(8);
    let (addr, _stop) = serve_responder(state.clone(), Impairment::default()).await;
    let info = query(addr).await;
    assert_eq!(family(&info), "0.7");
    assert_eq!(info.version.text, state.version);
    assert_matches(&info, &state);
}

#[tokio::test]
async fn teeworlds_64_players_read_back_over_extended_multi_packet() {
    let state = state(64);
    let (addr, _stop) = serve_responder(state.clone(), Impairment::default()).await;
    let info = query(addr).await;
    assert_eq!(family(&info), "extended");
    assert_matches(&info, &state);
}

#[tokio::test]
async fn teeworlds_64_players_read_back_with_reordered_packets() {
    let state = state(64);
    let impairment = Impairment {
        reorder: 1.0,
        ..Impairment::default()
    };
    let (addr, _stop) = serve_responder(state.clone(), impairment).await;
    let info = query(addr).await;
    assert_eq!(family(&info), "extended");
    assert_matches(&info, &state);
}

#[tokio::test]
async fn teeworlds_empty_server_reads_back() {
    let state = state(0);
    let (addr, _stop) = serve_responder(state.clone(), Impairment::default()).await;
    let info = query(addr).await;
    assert_matches(&info, &state);
}
