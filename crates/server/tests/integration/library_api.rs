//! The small library API of muster-query (`query_one`, `query_many`) against Muster's own
//! responders on loopback: game addresses in, conventional ports derived, results streamed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::query::QueryError;
use muster_proto::respond::{PlayerState, Responder, ServerState};
use muster_proto::teeworlds::{ResponderConfig, TeeworldsResponder};
use muster_query::{Failure, Options, QueryProtocol, Target, query_many, query_one};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;

fn state(name: &str, players: usize) -> ServerState {
    ServerState {
        name: name.into(),
        map: "dm1".into(),
        game_type: "DM".into(),
        version: "1.0".into(),
        max_players: 16,
        players: (0..players)
            .map(|i| PlayerState {
                name: format!("Jürgen {i}"),
                ..PlayerState::default()
            })
            .collect(),
        ..ServerState::default()
    }
}

/// Serves `responder` on `socket` until the returned sender is dropped.
fn start<R>(socket: UdpSocket, responder: R, state: ServerState) -> Guard
where
    R: Responder + Send + 'static,
{
    let (state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(serve(
        socket,
        responder,
        state_rx,
        Limits::unlimited(),
        Impairment::default(),
        Arc::new(Stats::default()),
        stop_rx,
    ));
    Guard(state_tx, stop)
}

struct Guard(
    #[allow(dead_code)] watch::Sender<Arc<ServerState>>,
    watch::Sender<bool>,
);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.1.send(true);
    }
}

/// A GameSpy v1 responder at game port + 1 of the returned game address.
async fn gamespy_server(name: &str) -> (SocketAddr, Guard) {
    loop {
        let probe = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let game = probe.local_addr().unwrap();
        drop(probe);
        let Some(port) = game.port().checked_add(1) else {
            continue;
        };
        if let Ok(socket) = UdpSocket::bind(("127.0.0.1", port)).await {
            let guard = start(
                socket,
                GameSpyResponder::with_profile(Profile::Ut99),
                state(name, 3),
            );
            return (game, guard);
        }
    }
}

fn options() -> Options {
    Options {
        attempt_timeout: Duration::from_millis(300),
        retries: 1,
        bind_v4: "127.0.0.1:0".parse().unwrap(),
        ..Options::default()
    }
}

#[tokio::test]
async fn query_one_reads_a_teeworlds_server_on_its_game_port() {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let _served = start(
        socket,
        TeeworldsResponder::new(ResponderConfig::default(), *b"library-api test"),
        state("Tee Ünïcödé", 2),
    );
    let answer = query_one(Target::new(addr, QueryProtocol::Teeworlds), options())
        .await
        .expect("answered");
    assert_eq!(answer.info.name.text, "Tee Ünïcödé");
    assert_eq!(answer.info.num_players, 2);
    assert_eq!(answer.query_address, addr);
}

#[tokio::test]
async fn query_one_derives_the_gamespy_port_from_the_game_port() {
    let (game, _served) = gamespy_server("GameSpy one").await;
    let target = Target::new(game, QueryProtocol::Gamespy1);
    assert_eq!(target.query_address().port(), game.port() + 1);
    let answer = query_one(target, options()).await.expect("answered");
    assert_eq!(answer.info.name.text, "GameSpy one");
    assert_eq!(answer.info.players.len(), 3);
    assert_eq!(answer.query_address.port(), game.port() + 1);
}

#[tokio::test]
async fn auto_reports_which_port_answered() {
    let (game, _served) = gamespy_server("Found by auto").await;
    let answer = query_one(Target::new(game, QueryProtocol::Auto), options())
        .await
        .expect("answered");
    assert_eq!(answer.info.name.text, "Found by auto");
    assert_eq!(answer.query_address.port(), game.port() + 1);
}

#[tokio::test]
async fn query_one_of_a_silent_port_times_out() {
    // Bound and never read: datagrams vanish, nothing answers.
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let target = Target::new(silent.local_addr().unwrap(), QueryProtocol::Teeworlds);
    let err = query_one(target, options()).await.unwrap_err();
    assert_eq!(err, Failure::Query(QueryError::Timeout));
}

#[tokio::test]
async fn query_many_streams_one_result_per_target() {
    let mut guards = Vec::new();
    let mut targets = Vec::new();
    for i in 0..20 {
        let (game, g) = gamespy_server(&format!("server {i}")).await;
        guards.push(g);
        targets.push(Target::new(game, QueryProtocol::Gamespy1));
    }
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dead = silent.local_addr().unwrap();
    targets.push(Target::new(dead, QueryProtocol::Teeworlds).given_port_only());

    let mut results = HashMap::new();
    let mut stream = query_many(targets.clone(), options());
    while let Some(done) = stream.next().await {
        assert!(
            results.insert(done.tag.address, done.outcome).is_none(),
            "one result per target"
        );
    }
    assert_eq!(results.len(), targets.len());
    for (i, t) in targets.iter().take(20).enumerate() {
        let answer = results[&t.address].as_ref().expect("answered");
        assert_eq!(answer.info.name.text, format!("server {i}"));
    }
    assert_eq!(
        results[&dead].as_ref().unwrap_err(),
        &Failure::Query(QueryError::Timeout)
    );
}

/// A free game port whose + 1 and + `offset` are free too (small race accepted).
fn free_game_port(offset: u16) -> u16 {
    loop {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let Some(plus) = port.checked_add(offset) else {
            continue;
        };
        let free = |p| std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok();
        if free(port + 1) && free(plus) {
            return port;
        }
    }
}

/// An emulated UT2003 server (native at + 1, GameSpy at + `offset`), running until stopped.
async fn ut2003_server(offset: u16) -> (u16, muster_server::run::RunningFarm) {
    use muster_server::farm::FarmSpec;
    use muster_server::{endpoints, run};
    let port = free_game_port(offset);
    let farm = FarmSpec::from_toml(&format!(
        "[[server]]\nprotocol = \"unreal2\"\nstyle = \"ut2003\"\nport = {port}\nname = \"Plus Ten\"\n\
         map = \"DM-Antalus\"\nplayers = [{{ name = \"Kee\\\\n\", score = 5, ping = 40 }}]\n\
         gamespy_offset = {offset}\n"
    ))
    .unwrap();
    let running = run::start(
        farm.expand().unwrap(),
        Limits::unlimited(),
        None,
        endpoints::endpoint,
    )
    .await
    .unwrap();
    (port, running)
}

/// Seed 002: UT2003 moved GameSpy to game port + 10 and put its native query at + 1. An
/// emulated `unreal2` server with `gamespy_offset = 10` answers both from one state, and the
/// UE2 query (which tries + 10, + 12 and + 1 for GameSpy) merges the two answers.
#[tokio::test]
async fn emulated_ut2003_server_answers_gamespy_at_plus_10_and_native_at_plus_1() {
    let (port, running) = ut2003_server(10).await;
    let ports: Vec<(&str, u16)> = running
        .listening
        .iter()
        .map(|l| (l.protocol.name(), l.addr.port()))
        .collect();
    assert_eq!(ports, [("unreal2", port + 1), ("gamespy1", port + 10)]);
    let game: SocketAddr = ([127, 0, 0, 1], port).into();
    let answer = query_one(Target::new(game, QueryProtocol::Unreal2), options())
        .await
        .expect("answered");
    assert_eq!(answer.info.protocol, muster_proto::Protocol::Unreal2);
    assert_eq!(answer.info.name.text, "Plus Ten");
    assert_eq!(answer.info.players.len(), 1);
    assert_eq!(
        answer
            .info
            .raw_field(muster_proto::probe::GAMESPY_QUERY_ADDRESS_FIELD),
        Some(&muster_proto::RawValue::Text(
            muster_proto::Text::from_utf8_str(&format!("127.0.0.1:{}", port + 10))
        )),
        "GameSpy answered at + 10 and was merged"
    );
    // GameSpy alone, at + 10.
    let gs: SocketAddr = ([127, 0, 0, 1], port + 10).into();
    let answer = query_one(
        Target::new(gs, QueryProtocol::Gamespy1).given_port_only(),
        options(),
    )
    .await
    .expect("GameSpy answered");
    assert_eq!(answer.info.name.text, "Plus Ten");
    running.stop().await;
}

/// Seed 002 counted 9.8 % of UT2003 servers with GameSpy at game port + 12: the UE2 query
/// finds it there too.
#[tokio::test]
async fn emulated_ut2003_server_with_gamespy_at_plus_12_is_merged() {
    let (port, running) = ut2003_server(12).await;
    let game: SocketAddr = ([127, 0, 0, 1], port).into();
    let answer = query_one(Target::new(game, QueryProtocol::Unreal2), options())
        .await
        .expect("answered");
    assert_eq!(
        answer
            .info
            .raw_field(muster_proto::probe::GAMESPY_QUERY_ADDRESS_FIELD),
        Some(&muster_proto::RawValue::Text(
            muster_proto::Text::from_utf8_str(&format!("127.0.0.1:{}", port + 12))
        ))
    );
    running.stop().await;
}
