//! Round trip: muster-query reads the teeworlds responder served by muster-server.
//!
//! The query asks every family at once and keeps the richest answer (spec §13.1): the
//! responder answers both the extended and the 0.7 request, and the extended answer wins
//! (complete in both with a few players; with 64 or more the 0.7 reply, one datagram, cannot
//! list everyone, while `iext` + `iex+` can).

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
async fn teeworlds_few_players_read_back_over_extended_with_07_fields() {
    let state = state(8);
    let (addr, _stop) = serve_responder(state.clone(), Impairment::default()).await;
    let info = query(addr).await;
    assert_eq!(family(&info), "extended");
    match raw(&info, "families") {
        Some(RawValue::Text(t)) => assert_eq!(t.text, "extended,0.7"),
        other => panic!("families: {other:?}"),
    }
    assert!(raw(&info, "skill_level").is_some(), "0.7's own fields kept");
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

/// DDNet's extended info has no 64-client limit: an emulated server with 200 clients lists
/// them all over `iext` + `iex+`.
#[tokio::test]
async fn teeworlds_200_clients_read_back_over_extended() {
    let mut state = state(200);
    state.max_players = 256;
    let (addr, _stop) = serve_responder(state.clone(), Impairment::default()).await;
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

// ---------------------------------------------------------------------------------------------
// The 0.7 UDP registrar sharing the game socket with the responder, over loopback, with a
// stand-in master (the lead's driver will replace the tiny one below).

mod registrar {
    use super::*;

    use muster_proto::respond::{Registrar, RegistrarEvent, Responder};
    use muster_proto::teeworlds_master::{Framing, Message, Packet, TeeworldsUdpRegistrar, Token};
    use tokio::sync::mpsc;

    const MASTER_TOKEN: Token = Token(*b"MSTR");

    /// Offer each datagram to the registrar first, the rest to the responder (the contract of
    /// `respond::Registrar`).
    async fn drive(
        socket: UdpSocket,
        mut registrar: TeeworldsUdpRegistrar,
        mut responder: TeeworldsResponder,
        state: ServerState,
        events: mpsc::UnboundedSender<RegistrarEvent>,
    ) {
        let now = || tokio::time::Instant::now().into_std();
        let mut buf = Vec::new();
        let mut rx = vec![0u8; 2048];
        loop {
            while let Some(t) = registrar.poll_transmit(now(), &mut buf) {
                let _ = socket.send_to(&buf, t.destination).await;
                buf.clear();
            }
            while let Some(e) = registrar.poll_event() {
                let _ = events.send(e);
            }
            let deadline = registrar
                .poll_timeout()
                .unwrap_or_else(|| now() + Duration::from_secs(3600));
            tokio::select! {
                r = socket.recv_from(&mut rx) => {
                    let Ok((n, from)) = r else { return };
                    let datagram = &rx[..n];
                    if !registrar.handle_datagram(now(), from, datagram, &state) {
                        let mut out = Vec::new();
                        responder.handle_datagram(now(), from, datagram, &state, &mut out);
                        for reply in out {
                            let _ = socket.send_to(&reply.bytes, reply.to).await;
                        }
                    }
                }
                () = tokio::time::sleep_until(deadline.into()) => registrar.handle_timeout(now(), &state),
            }
        }
    }

    /// A 0.7 master on `master` and its checker on `checker`: hands out its token, answers
    /// `cou2` with 0, checks `bea2` with `fw??` from the checker and confirms `fw!!` with `fwok`.
    async fn stand_in_master(master: UdpSocket, checker: UdpSocket) {
        let mut rx = vec![0u8; 2048];
        let mut rx2 = vec![0u8; 2048];
        let send = |p: Packet| {
            let mut out = Vec::new();
            p.encode(&mut out);
            out
        };
        loop {
            tokio::select! {
                r = master.recv_from(&mut rx) => {
                    let Ok((n, from)) = r else { return };
                    match Packet::decode(&rx[..n]) {
                        Ok(Packet::Token { to, token, padded: true }) if to == Token::NONE => {
                            let _ = master.send_to(&send(Packet::token_reply(token, MASTER_TOKEN)), from).await;
                        }
                        Ok(Packet::Connless { framing: Framing::V07 { token, response_token }, message })
                            if token == MASTER_TOKEN =>
                        {
                            let reply = Framing::V07 { token: response_token, response_token: MASTER_TOKEN };
                            match message {
                                Message::CountRequest => {
                                    let p = Packet::Connless { framing: reply, message: Message::CountReply { count: 0 } };
                                    let _ = master.send_to(&send(p), from).await;
                                }
                                Message::Heartbeat { port } => {
                                    let to = SocketAddr::new(from.ip(), port);
                                    let p = Packet::Connless { framing: reply, message: Message::FirewallCheck };
                                    let _ = checker.send_to(&send(p), to).await;
                                }
                                _ => {}
                            }
                        }
                        _ => {}
                    }
                }
                r = checker.recv_from(&mut rx2) => {
                    let Ok((n, from)) = r else { return };
                    if let Ok(Packet::Connless { framing: Framing::V07 { response_token, .. }, message: Message::FirewallResponse }) = Packet::decode(&rx2[..n]) {
                        let p = Packet::Connless {
                            framing: Framing::V07 { token: response_token, response_token: MASTER_TOKEN },
                            message: Message::FirewallOk,
                        };
                        let _ = checker.send_to(&send(p), from).await;
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn udp_registrar_registers_and_the_responder_still_answers_on_the_same_socket() {
        let master = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let checker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let master_addr = master.local_addr().unwrap();
        tokio::spawn(stand_in_master(master, checker));

        let game = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let game_addr = game.local_addr().unwrap();
        let state = state(8);
        let now = tokio::time::Instant::now().into_std();
        let registrar = TeeworldsUdpRegistrar::new(
            &[master_addr],
            game_addr.port(),
            Token([0x12, 0x34, 0x56, 0x78]),
            now,
        );
        let responder = TeeworldsResponder::new(ResponderConfig::default(), *b"registrar secret");
        let (tx, mut events) = mpsc::unbounded_channel();
        let driver = tokio::spawn(drive(game, registrar, responder, state.clone(), tx));

        let first = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("registered in time");
        assert_eq!(
            first,
            Some(RegistrarEvent::Registered {
                master: master_addr.to_string()
            })
        );
        // Browser traffic on the same port goes to the responder.
        let info = query(game_addr).await;
        assert_matches(&info, &state);
        driver.abort();
    }
}
