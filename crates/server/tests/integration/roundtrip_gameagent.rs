//! Round trip: muster-query reads the gameagent responder served by muster-server.
//!
//! `ServerQuery` takes the **game** address and queries game port + 1, so the responder is bound
//! first and the game address is its port − 1.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::gameagent::query::{ServerQuery, game_address};
use muster_proto::gameagent::respond::{GameAgentResponder, NameMarks, ResponderConfig};
use muster_proto::model::ServerInfo;
use muster_proto::respond::{PlayerState, ServerState};
use muster_query::{Job, Options, spawn};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;

struct Served {
    game: SocketAddr,
    stats: Arc<Stats>,
    _stop: watch::Sender<bool>,
    _state: watch::Sender<Arc<ServerState>>,
}

async fn start(
    responder: GameAgentResponder,
    state: ServerState,
    impairment: Impairment,
) -> Served {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let query = socket.local_addr().unwrap();
    let game = game_address(query).unwrap();
    let (state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    tokio::spawn(serve(
        socket,
        responder,
        state_rx,
        Limits::unlimited(),
        impairment,
        stats.clone(),
        stop_rx,
    ));
    Served {
        game,
        stats,
        _stop: stop,
        _state: state_tx,
    }
}

async fn query(game: SocketAddr) -> ServerInfo {
    let options = Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        ..Options::default()
    };
    let jobs = [Job {
        tag: (),
        build: move |cfg| ServerQuery::new(game, cfg),
    }];
    let mut rx = spawn(jobs, options);
    let done = rx.recv().await.expect("one result");
    *done.outcome.expect("query succeeds")
}

fn player(name: &str, score: i64, ping_ms: u32) -> PlayerState {
    PlayerState {
        name: name.into(),
        score,
        ping_ms,
        ..PlayerState::default()
    }
}

fn unsigned_char() -> GameAgentResponder {
    GameAgentResponder::new(ResponderConfig {
        name_marks: NameMarks::UnsignedChar,
        ..ResponderConfig::default()
    })
}

fn assert_matches(info: &ServerInfo, state: &ServerState) {
    assert_eq!(info.name.text, state.name);
    assert_eq!(info.map.text, state.map);
    assert_eq!(info.game_type.text, state.game_type);
    assert_eq!(info.version.text, state.version);
    assert_eq!(info.num_players as usize, state.players.len());
    assert_eq!(info.max_players, state.max_players);
    assert!(info.partial.is_none(), "{:?}", info.partial);
    let got: Vec<(&str, Option<i64>, Option<u32>)> = info
        .players
        .iter()
        .map(|p| (p.name.plain.as_str(), p.score, p.ping_ms))
        .collect();
    let want: Vec<(&str, Option<i64>, Option<u32>)> = state
        .players
        .iter()
        .map(|p| (p.name.as_str(), Some(p.score), Some(p.ping_ms)))
        .collect();
    assert_eq!(got, want);
}

fn small_state() -> ServerState {
    ServerState {
        name: "Muster Café".into(),
        map: "Yodeller".into(),
        game_type: "Fragmatch".into(),
        version: "1.10".into(),
        game: "serioussamse".into(),
        max_players: 16,
        players: vec![
            player("Jérôme", 12, 48),
            player("Sam", -3, 0),
            player("Ünïcödé Øle", 0, 1023),
        ],
        ..ServerState::default()
    }
}

#[tokio::test]
async fn roundtrip_latin1_names_on_unsigned_char_build() {
    let state = small_state();
    let s = start(unsigned_char(), state.clone(), Impairment::default()).await;
    let info = query(s.game).await;
    assert_matches(&info, &state);
    // The wire name is wrapped as stock does; the raw bytes are Windows-1252.
    assert_eq!(info.players[0].name.raw, b"^oJ\xe9r\xf4me^r");
    assert_eq!(info.players[0].name.text, "^oJérôme^r");
}

#[tokio::test]
async fn roundtrip_x86_marks_non_ascii_names_as_12() {
    // Stock x86 servers cannot send a non-ASCII name: it becomes the one-byte mark `12`
    // (spec §3.3), which the query reads as an empty plain name with the raw byte kept.
    let state = small_state();
    let x86 = GameAgentResponder::new(ResponderConfig {
        name_marks: NameMarks::X86,
        ..ResponderConfig::default()
    });
    let s = start(x86, state.clone(), Impairment::default()).await;
    let info = query(s.game).await;
    assert_eq!(info.name.text, "Muster Café");
    let names: Vec<(&[u8], &str)> = info
        .players
        .iter()
        .map(|p| (p.name.raw.as_slice(), p.name.plain.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            (&[0x12][..], ""),
            (&b"^oSam^r"[..], "Sam"),
            (&[0x12][..], "")
        ]
    );
}

fn sixteen_long_names() -> ServerState {
    ServerState {
        name: "Big server".into(),
        map: "Sierra de Chiapas".into(),
        game_type: "Cooperative".into(),
        version: "1.10".into(),
        game: "serioussam".into(),
        max_players: 16,
        players: (0..16u32)
            .map(|i| {
                player(
                    &format!("{i:02}-{}", "é".repeat(150)),
                    i64::from(i) * 7 - 20,
                    100 + i,
                )
            })
            .collect(),
        ..ServerState::default()
    }
}

#[tokio::test]
async fn roundtrip_sixteen_long_names_over_several_datagrams() {
    let state = sixteen_long_names();
    let s = start(unsigned_char(), state.clone(), Impairment::default()).await;
    let info = query(s.game).await;
    assert_matches(&info, &state);
    // 16 × ~190-byte records do not fit one 2048-byte datagram.
    assert!(crate::counted::settled(&s.stats.sent, 3).await >= 3);
}

#[tokio::test]
async fn roundtrip_sixteen_long_names_reordered() {
    let state = sixteen_long_names();
    let impairment = Impairment {
        reorder: 1.0,
        ..Impairment::default()
    };
    let s = start(unsigned_char(), state.clone(), impairment).await;
    let info = query(s.game).await;
    assert_matches(&info, &state);
}

/// End to end over loopback: an emulated server (registrar and responder sharing one socket,
/// registrar offered each datagram first) registers with the master face, a client fetches the
/// list with `MasterListQuery` and queries the listed server with `ServerQuery`.
#[tokio::test]
async fn registered_server_is_listed_by_master_face_and_queryable() {
    use muster_proto::gameagent::master::{GameAgentMaster, MasterConfig, MasterEvent};
    use muster_proto::gameagent::query::MasterListQuery;
    use muster_proto::gameagent::register::{GameAgentRegistrar, RegistrarConfig};
    use muster_proto::respond::{Registrar, Responder};
    use std::time::Instant;

    // The master face on its own socket.
    let master_socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let master_addr = master_socket.local_addr().unwrap();
    let (verified_tx, mut verified_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut seed = 0x2545_f491_u32;
        let mut face = GameAgentMaster::new(MasterConfig::default(), move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        });
        let mut buf = vec![0u8; 4096];
        loop {
            let (n, from) = master_socket.recv_from(&mut buf).await.unwrap();
            face.handle_datagram(Instant::now(), from, &buf[..n]);
            while let Some(t) = face.poll_transmit() {
                master_socket.send_to(&t.bytes, t.to).await.unwrap();
            }
            while let Some(e) = face.poll_event() {
                if let MasterEvent::Verified { game, .. } = e {
                    let _ = verified_tx.send(game);
                }
            }
        }
    });

    // The emulated server: one socket at game port + 1.
    let state = ServerState {
        name: "Registered Café".into(),
        map: "Yodeller".into(),
        game_type: "Cooperative".into(),
        version: "1.10".into(),
        game: "serioussam".into(),
        max_players: 8,
        players: vec![player("Sam", 4, 30)],
        ..ServerState::default()
    };
    let server_socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let game = game_address(server_socket.local_addr().unwrap()).unwrap();
    let served_state = state.clone();
    tokio::spawn(async move {
        let mut registrar =
            GameAgentRegistrar::new(RegistrarConfig::new(master_addr), &served_state);
        let mut responder = unsigned_char();
        let mut buf = vec![0u8; 4096];
        loop {
            let mut out = Vec::new();
            while registrar.poll_transmit(Instant::now(), &mut out).is_some() {
                server_socket.send_to(&out, master_addr).await.unwrap();
                out.clear();
            }
            let (n, from) = server_socket.recv_from(&mut buf).await.unwrap();
            let now = Instant::now();
            if !registrar.handle_datagram(now, from, &buf[..n], &served_state) {
                let mut replies = Vec::new();
                responder.handle_datagram(now, from, &buf[..n], &served_state, &mut replies);
                for r in replies {
                    server_socket.send_to(&r.bytes, r.to).await.unwrap();
                }
            }
        }
    });

    let listed = tokio::time::timeout(Duration::from_secs(5), verified_rx.recv())
        .await
        .expect("verified in time")
        .unwrap();
    assert_eq!(SocketAddr::V4(listed), game);

    let options = Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        ..Options::default()
    };
    let jobs = [Job {
        tag: (),
        build: move |cfg| MasterListQuery::new(master_addr, cfg),
    }];
    let list = spawn(jobs, options).recv().await.unwrap().outcome.unwrap();
    let addresses: Vec<SocketAddr> = list.servers.iter().map(|s| s.address).collect();
    assert_eq!(addresses, vec![game]);
    let info = query(game).await;
    assert_matches(&info, &state);
}
