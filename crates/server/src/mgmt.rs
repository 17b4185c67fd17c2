//! Keeping a game server registered with a management server (`management-server.md`): one
//! kept-open TCP connection carrying `msRegisterGameServer`, then `msUpdateGameServerStats`
//! whenever the state changes, and `msUnregisterGameServer` at shutdown. A lost connection is
//! re-opened with exponential backoff (the registration dies with the connection on the
//! master's side, so it is sent again on every new connection).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_proto::mgmt::client::{encode_register, encode_unregister, encode_update};
use muster_proto::mgmt::messages::{
    GamePort, GameServer, GameplayMode, MaxPlayers, PlayerCount, ServerAddress, Stats,
};
use muster_proto::respond::{RegistrarEvent, ServerState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// First wait before reconnecting; doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait before reconnecting.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where to register and what address to announce.
#[derive(Debug, Clone)]
pub struct MgmtTarget {
    /// The management server.
    pub master: SocketAddr,
    /// The address players connect to, as announced (IP literal or host name).
    pub address: String,
}

/// The management protocol's view of a server: players are the active ones, slots are clamped
/// to the 2–4 the protocol allows, the lobby is open while there is room.
#[must_use]
pub fn stats_of(state: &ServerState) -> Stats {
    let defaults = Stats::default();
    let active = u32::try_from(state.active_players().count()).unwrap_or(u32::MAX);
    let max = u8::try_from(state.max_players.clamp(2, 4)).unwrap_or(4);
    Stats {
        current: PlayerCount::new(active)
            .or_else(|_| PlayerCount::new(muster_proto::mgmt::messages::MAX_PLAYER_COUNT))
            .unwrap_or(defaults.current),
        max: MaxPlayers::new(max).unwrap_or(defaults.max),
        lobby_open: active < u32::from(max),
        mode: GameplayMode::StandardA,
    }
}

fn registration(target: &MgmtTarget, state: &ServerState) -> Result<GameServer, String> {
    let address = ServerAddress::parse(&target.address).map_err(|e| format!("address: {e}"))?;
    let port = GamePort::new(state.game_port).map_err(|e| format!("port: {e}"))?;
    GameServer::new(state.name.clone(), address, port).map_err(|e| format!("name: {e}"))
}

fn emit(events: &Option<mpsc::UnboundedSender<RegistrarEvent>>, ev: RegistrarEvent) {
    crate::udp::log_event(&ev, None);
    if let Some(tx) = events {
        let _ = tx.send(ev);
    }
}

enum Ended {
    Shutdown,
    Lost,
}

async fn session(
    stream: &mut TcpStream,
    target: &MgmtTarget,
    state: &mut watch::Receiver<Arc<ServerState>>,
    shutdown: &mut watch::Receiver<bool>,
    events: &Option<mpsc::UnboundedSender<RegistrarEvent>>,
) -> std::io::Result<Ended> {
    let current = state.borrow_and_update().clone();
    let server = registration(target, &current).map_err(std::io::Error::other)?;
    let mut frame = Vec::new();
    encode_register(&server, &mut frame);
    let mut last = stats_of(&current);
    encode_update(&last, &mut frame);
    stream.write_all(&frame).await?;
    emit(
        events,
        RegistrarEvent::Registered {
            master: target.master.to_string(),
        },
    );
    let mut buf = [0u8; 1024];
    loop {
        tokio::select! {
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    frame.clear();
                    encode_unregister(&mut frame);
                    stream.write_all(&frame).await?;
                    stream.shutdown().await?;
                    emit(events, RegistrarEvent::Unregistered { master: target.master.to_string() });
                    return Ok(Ended::Shutdown);
                }
            }
            r = state.changed() => {
                if r.is_err() {
                    // The state is final; keep the registration until shutdown.
                    std::future::pending::<()>().await;
                }
                let stats = stats_of(&state.borrow_and_update());
                if stats != last {
                    frame.clear();
                    encode_update(&stats, &mut frame);
                    stream.write_all(&frame).await?;
                    last = stats;
                }
            }
            r = stream.read(&mut buf) => match r {
                // The master never sends to a registered server; EOF or an error is a lost
                // connection, anything else is ignored.
                Ok(0) | Err(_) => return Ok(Ended::Lost),
                Ok(_) => {}
            },
        }
    }
}

/// Keep the server in `state` registered with `target.master` until `shutdown` turns true.
pub async fn keep_registered(
    target: MgmtTarget,
    mut state: watch::Receiver<Arc<ServerState>>,
    mut shutdown: watch::Receiver<bool>,
    events: Option<mpsc::UnboundedSender<RegistrarEvent>>,
) -> std::io::Result<()> {
    let mut backoff = MIN_BACKOFF;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let connected =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target.master)).await;
        let reason = match connected {
            Ok(Ok(mut stream)) => {
                let _ = stream.set_nodelay(true);
                match session(&mut stream, &target, &mut state, &mut shutdown, &events).await {
                    Ok(Ended::Shutdown) => return Ok(()),
                    Ok(Ended::Lost) => {
                        backoff = MIN_BACKOFF;
                        "connection lost"
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Other => {
                        // The registration itself cannot be built: retrying will not help.
                        return Err(e);
                    }
                    Err(_) => "connection failed",
                }
            }
            Ok(Err(_)) => "cannot connect",
            Err(_) => "connect timed out",
        };
        emit(
            &events,
            RegistrarEvent::Failed {
                master: target.master.to_string(),
                reason,
            },
        );
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return Ok(()) },
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
