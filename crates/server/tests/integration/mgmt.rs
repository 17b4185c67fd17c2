//! The management-server registration client against a master built from the protocol's own
//! session logic: register, update on state change, reconnect after a lost connection,
//! unregister at shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_proto::mgmt::session::{ServerSession, SessionConfig, SessionEvent};
use muster_proto::respond::{PlayerState, ServerState};
use muster_server::mgmt::{MgmtTarget, keep_registered};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Reads from `stream` until `want` session events arrived (or 5 s passed).
async fn events(
    stream: &mut TcpStream,
    session: &mut ServerSession,
    want: usize,
) -> Vec<SessionEvent> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while out.len() < want {
        let n = tokio::time::timeout_at(deadline, stream.read(&mut buf))
            .await
            .expect("events in time")
            .unwrap();
        if n == 0 {
            session.handle_eof(Instant::now());
        } else {
            session.handle_input(Instant::now(), &buf[..n]);
        }
        while let Some(e) = session.poll_event() {
            out.push(e);
        }
        if n == 0 {
            break;
        }
    }
    out
}

fn state(players: usize) -> ServerState {
    ServerState {
        name: "Bomberman Jérôme".into(),
        game_port: 20000,
        max_players: 4,
        players: (0..players)
            .map(|i| PlayerState {
                name: format!("p{i}"),
                ..PlayerState::default()
            })
            .collect(),
        ..ServerState::default()
    }
}

#[tokio::test]
async fn registers_updates_reconnects_and_unregisters() {
    let master = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (state_tx, state_rx) = watch::channel(Arc::new(state(1)));
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(keep_registered(
        MgmtTarget {
            master: master.local_addr().unwrap(),
            address: "127.0.0.1".into(),
        },
        state_rx,
        stop_rx,
        None,
    ));

    // First connection: register and the current stats.
    let (mut conn, _) = master.accept().await.unwrap();
    let mut session = ServerSession::new(Instant::now(), SessionConfig::default());
    let got = events(&mut conn, &mut session, 2).await;
    match &got[..] {
        [SessionEvent::Register(s), SessionEvent::UpdateStats(st)] => {
            assert_eq!(s.name(), "Bomberman Jérôme");
            assert_eq!(s.port().get(), 20000);
            assert_eq!(st.current.get(), 1);
            assert_eq!(st.max.get(), 4);
            assert!(st.lobby_open);
        }
        other => panic!("unexpected {other:?}"),
    }

    // A state change is sent as an update.
    state_tx.send(Arc::new(state(4))).unwrap();
    match &events(&mut conn, &mut session, 1).await[..] {
        [SessionEvent::UpdateStats(st)] => {
            assert_eq!(st.current.get(), 4);
            assert!(!st.lobby_open, "full");
        }
        other => panic!("unexpected {other:?}"),
    }

    // The master drops the connection: the client comes back and registers again.
    drop(conn);
    let (mut conn, _) = tokio::time::timeout(Duration::from_secs(5), master.accept())
        .await
        .expect("reconnect within the first backoff")
        .unwrap();
    let mut session = ServerSession::new(Instant::now(), SessionConfig::default());
    let got = events(&mut conn, &mut session, 2).await;
    assert!(matches!(got[0], SessionEvent::Register(_)), "{got:?}");
    assert!(matches!(got[1], SessionEvent::UpdateStats(st) if st.current.get() == 4));

    // Shutdown: unregister, then the connection closes.
    stop.send(true).unwrap();
    let got = events(&mut conn, &mut session, 2).await;
    assert!(matches!(got[0], SessionEvent::Unregister), "{got:?}");
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
}
