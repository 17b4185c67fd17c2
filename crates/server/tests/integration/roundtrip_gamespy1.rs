//! Round trip: muster-query reads the gamespy1 responder served by muster-server.
//!
//! Every profile is served on loopback and read with `gamespy1::query::StatusQuery` through
//! `muster_query::spawn`; the result must be the configured state. Multi-datagram replies are
//! also read when the driver sends them in reverse order (`Impairment { reorder: 1.0 }`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::gamespy1::query::{StatusConfig, StatusQuery};
use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::model::ServerInfo;
use muster_proto::respond::{PlayerState, ServerState};
use muster_query::{Job, Options, spawn};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;

const PROFILES: [Profile; 4] = [
    Profile::Ut2003,
    Profile::Ut99,
    Profile::Unreal227,
    Profile::SeriousSam,
];

fn player(name: &str, score: i64, ping_ms: u32, team: Option<i32>) -> PlayerState {
    PlayerState {
        name: name.to_owned(),
        score,
        ping_ms,
        team,
        ..PlayerState::default()
    }
}

fn state(players: Vec<PlayerState>) -> ServerState {
    ServerState {
        name: "Muster Café ½".into(),
        map: "DM-Deck16][".into(),
        game_type: "DeathMatchPlus".into(),
        game_port: 7777,
        max_players: 24,
        players,
        rules: vec![
            ("timelimit".into(), "20".into()),
            ("AdminName".into(), "Zoë".into()),
        ],
        ..ServerState::default()
    }
}

fn few_players() -> Vec<PlayerState> {
    vec![
        player("Jérôme", 12, 35, Some(1)),
        // `\` is removed from every value by Muster's responder (gamespy1.md §13 decision 1).
        player("Kee\\/n", -3, 0, None),
        player("Alpha", 0, 999, Some(0)),
    ]
}

/// Enough players that every style splits its reply over several datagrams.
fn many_players() -> Vec<PlayerState> {
    (0..40)
        .map(|i| {
            player(
                &format!("Plàyer {i:02} with a long name"),
                i64::from(i) * 7 - 20,
                10 + u32::try_from(i).unwrap(),
                Some(i % 2),
            )
        })
        .collect()
}

/// A served responder; stops when dropped (the stop sender goes away).
struct Served {
    addr: SocketAddr,
    stats: Arc<Stats>,
    _state: watch::Sender<Arc<ServerState>>,
    _stop: watch::Sender<bool>,
}

async fn serve_on_loopback(profile: Profile, state: ServerState, impairment: Impairment) -> Served {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let (state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    tokio::spawn(serve(
        socket,
        GameSpyResponder::with_profile(profile),
        state_rx,
        Limits::unlimited(),
        impairment,
        stats.clone(),
        stop_rx,
    ));
    Served {
        addr,
        stats,
        _state: state_tx,
        _stop: stop,
    }
}

async fn query(addr: SocketAddr) -> ServerInfo {
    let options = Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        bind_v4: "127.0.0.1:0".parse().unwrap(),
        ..Options::default()
    };
    let jobs = [Job {
        tag: (),
        build: move |retry| {
            StatusQuery::new(
                addr,
                StatusConfig {
                    retry,
                    ..StatusConfig::default()
                },
            )
        },
    }];
    let mut rx = spawn(jobs, options);
    let done = rx.recv().await.expect("one result");
    *done.outcome.expect("query answered")
}

/// The name a player of `profile` is read back as (`plain`: Serious Sam's `^o…^r` wrapping
/// removed).
fn expected_name(profile: Profile, name: &str) -> String {
    let clean = name.replace('\\', "");
    if profile == Profile::SeriousSam {
        // Serious Sam profiles cut names to 32 bytes (gamespy1.md §10); all test names are
        // single-byte Windows-1252, so bytes = characters.
        clean.chars().take(32).collect()
    } else {
        clean
    }
}

fn assert_matches(profile: Profile, info: &ServerInfo, state: &ServerState) {
    assert!(info.partial.is_none(), "{profile:?}: {:?}", info.partial);
    assert_eq!(info.name.text, state.name, "{profile:?}");
    assert_eq!(info.map.text, state.map, "{profile:?}");
    assert_eq!(info.game_type.text, state.game_type, "{profile:?}");
    assert_eq!(info.version.text, profile.gamever(), "{profile:?}");
    assert_eq!(
        info.num_players as usize,
        state.players.len(),
        "{profile:?}"
    );
    assert_eq!(info.max_players, state.max_players, "{profile:?}");
    assert_eq!(info.players.len(), state.players.len(), "{profile:?}");
    for (got, want) in info.players.iter().zip(&state.players) {
        assert_eq!(
            got.name.plain,
            expected_name(profile, &want.name),
            "{profile:?}"
        );
        assert_eq!(got.score, Some(want.score), "{profile:?}");
        assert_eq!(got.ping_ms, Some(want.ping_ms), "{profile:?}");
        // Serious Sam sends no team (gamespy1.md §9.2); the Unreal profiles send 255 for none.
        let team = if profile == Profile::SeriousSam {
            None
        } else {
            want.team
        };
        assert_eq!(got.team, team, "{profile:?}");
    }
    let rules: Vec<(String, String)> = info
        .rules
        .iter()
        .map(|r| (r.key.text.clone(), r.value.text.clone()))
        .collect();
    if profile == Profile::SeriousSam {
        // No `\rules\` in Serious Sam: its fixed status keys show up as rules instead.
        assert!(rules.contains(&("difficulty".into(), "Normal".into())));
        assert_eq!(info.password, Some(false));
    } else {
        for rule in &state.rules {
            assert!(
                rules.contains(rule),
                "{profile:?}: {rule:?} not in {rules:?}"
            );
        }
    }
}

#[tokio::test]
async fn every_profile_round_trips_a_small_server() {
    for profile in PROFILES {
        let state = state(few_players());
        let served = serve_on_loopback(profile, state.clone(), Impairment::default()).await;
        let info = query(served.addr).await;
        assert_matches(profile, &info, &state);
    }
}

#[tokio::test]
async fn every_profile_round_trips_an_empty_server() {
    for profile in PROFILES {
        let state = state(Vec::new());
        let served = serve_on_loopback(profile, state.clone(), Impairment::default()).await;
        let info = query(served.addr).await;
        assert_matches(profile, &info, &state);
    }
}

#[tokio::test]
async fn multi_datagram_replies_round_trip_in_order() {
    for profile in PROFILES {
        let state = state(many_players());
        let served = serve_on_loopback(profile, state.clone(), Impairment::default()).await;
        let info = query(served.addr).await;
        assert_matches(profile, &info, &state);
        let sent = crate::counted::settled(&served.stats.sent, 2).await;
        assert!(sent >= 2, "{profile:?} sent {sent} datagram(s)");
    }
}

#[tokio::test]
async fn multi_datagram_replies_round_trip_in_reverse_order() {
    for profile in PROFILES {
        let state = state(many_players());
        let impairment = Impairment {
            reorder: 1.0,
            ..Impairment::default()
        };
        let served = serve_on_loopback(profile, state.clone(), impairment).await;
        let info = query(served.addr).await;
        assert_matches(profile, &info, &state);
    }
}

// ---------------------------------------------------------------------------------------
// Registration over loopback: a tiny driver shares one socket between GameSpyRegistrar and
// GameSpyResponder (as the lead's multiplexing will), a test socket plays the master.
// ---------------------------------------------------------------------------------------

mod registration {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use muster_proto::gamespy_master::register::{GameSpyRegistrar, GameSpyRegistrarConfig};
    use muster_proto::gamespy_master::{Challenge, Enctype, ValidateAnswer, ValidateCheck};
    use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
    use muster_proto::respond::{Registrar, RegistrarEvent, Reply, Responder, ServerState};
    use tokio::net::UdpSocket;
    use tokio::sync::mpsc;

    /// Offers each datagram to the registrar first, then to the responder; sends what both
    /// want from the one query socket; reports registrar events.
    async fn drive(
        socket: UdpSocket,
        mut registrar: GameSpyRegistrar,
        mut responder: GameSpyResponder,
        state: ServerState,
        events: mpsc::UnboundedSender<RegistrarEvent>,
    ) {
        let mut rx = vec![0u8; 4096];
        loop {
            let mut buf = Vec::new();
            while let Some(t) = registrar.poll_transmit(Instant::now(), &mut buf) {
                socket.send_to(&buf, t.destination).await.unwrap();
                buf.clear();
            }
            while let Some(e) = registrar.poll_event() {
                let _ = events.send(e);
            }
            let deadline = registrar
                .poll_timeout()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                r = socket.recv_from(&mut rx) => {
                    let (n, from) = r.unwrap();
                    let now = Instant::now();
                    let datagram = &rx[..n];
                    if !registrar.handle_datagram(now, from, datagram, &state) {
                        let mut out: Vec<Reply> = Vec::new();
                        responder.handle_datagram(now, from, datagram, &state, &mut out);
                        for reply in out {
                            socket.send_to(&reply.bytes, reply.to).await.unwrap();
                        }
                    }
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    registrar.handle_timeout(Instant::now(), &state);
                }
            }
        }
    }

    async fn recv(master: &UdpSocket) -> (Vec<u8>, SocketAddr) {
        let mut buf = vec![0u8; 4096];
        let (n, from) = tokio::time::timeout(Duration::from_secs(5), master.recv_from(&mut buf))
            .await
            .expect("datagram at the master")
            .unwrap();
        buf.truncate(n);
        (buf, from)
    }

    async fn start(
        profile: Profile,
    ) -> (
        UdpSocket,
        SocketAddr,
        mpsc::UnboundedReceiver<RegistrarEvent>,
        tokio::task::JoinHandle<()>,
    ) {
        let master = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let query = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let query_addr = query.local_addr().unwrap();
        let config =
            GameSpyRegistrarConfig::new(master.local_addr().unwrap(), profile, query_addr.port());
        let registrar = GameSpyRegistrar::new(config, Instant::now());
        let state = ServerState {
            name: "Registered".into(),
            game_port: 7777,
            ..ServerState::default()
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(drive(
            query,
            registrar,
            GameSpyResponder::with_profile(profile),
            state,
            tx,
        ));
        (master, query_addr, rx, task)
    }

    #[tokio::test]
    async fn ut99_heartbeat_secure_validate_and_status_over_one_socket() {
        let (master, query_addr, mut events, task) = start(Profile::Ut99).await;
        let (hb, from) = recv(&master).await;
        assert_eq!(from, query_addr, "heartbeats leave from the query socket");
        assert_eq!(
            hb,
            format!("\\heartbeat\\{}\\gamename\\ut", query_addr.port()).as_bytes()
        );
        master.send_to(b"\\secure\\XYZZYA", from).await.unwrap();
        let (answer, _) = recv(&master).await;
        let answer = ValidateAnswer::decode(&answer).unwrap();
        let challenge = Challenge::new(b"XYZZYA").unwrap();
        assert_eq!(
            muster_proto::gamespy_master::check_validate(
                b"ut",
                &challenge,
                Enctype::Zero,
                answer.validate.as_bytes()
            ),
            ValidateCheck::Match
        );
        assert_eq!(answer.validate.as_bytes(), b"3PlanLCV");
        assert_eq!(
            events.recv().await,
            Some(RegistrarEvent::Registered {
                master: master.local_addr().unwrap().to_string()
            })
        );
        // A poll of the query port (same socket) is the responder's.
        master.send_to(b"\\info\\", query_addr).await.unwrap();
        let (info, _) = recv(&master).await;
        assert!(info.starts_with(b"\\hostname\\Registered\\hostport\\7777\\"));
        task.abort();
    }

    #[tokio::test]
    async fn serious_sam_heartbeat_then_status_verification() {
        let (master, query_addr, mut events, task) = start(Profile::SeriousSam).await;
        let (hb, from) = recv(&master).await;
        assert_eq!(from, query_addr);
        assert_eq!(
            hb,
            format!("\\heartbeat\\{}\\gamename\\serioussamse", query_addr.port()).as_bytes()
        );
        // gamespy-master.md §13 decision 4: the master polls (source IP, heartbeat port).
        master.send_to(b"\\status\\", query_addr).await.unwrap();
        let (status, _) = recv(&master).await;
        assert!(status.starts_with(b"\\gamename\\serioussamse\\gamever\\1.10\\"));
        assert!(status.ends_with(b"\\final\\\\queryid\\333.1"));
        assert_eq!(
            events.recv().await,
            Some(RegistrarEvent::Registered {
                master: master.local_addr().unwrap().to_string()
            })
        );
        task.abort();
    }
}
