//! Running a farm: one UDP socket and one task per emulated server.

use std::net::SocketAddr;
use std::sync::Arc;

use muster_proto::respond::Responder;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::farm::{FarmProtocol, FarmServer};
use crate::udp::{BoxedRegistrar, Limits, Stats, serve_registered};

/// A responder the farm owns.
pub type BoxedResponder = Box<dyn Responder + Send>;

/// What a farm needs per server: its responder, its registrars and its query port.
pub struct Endpoint {
    /// Answers queries.
    pub responder: BoxedResponder,
    /// Keep it registered with masters.
    pub registrars: Vec<BoxedRegistrar>,
    /// The port the responder listens on (query port).
    pub port: u16,
    /// Management servers to stay registered with (over TCP).
    pub mgmt: Vec<crate::mgmt::MgmtTarget>,
    /// Further sockets of the same server, answering from the same state (a UE2 server's
    /// GameSpy v1 port).
    pub extra: Vec<ExtraSocket>,
}

/// Another socket of one server: its own protocol, port, responder and registrars.
pub struct ExtraSocket {
    /// The protocol it answers.
    pub protocol: FarmProtocol,
    /// Its port.
    pub port: u16,
    /// Answers queries.
    pub responder: BoxedResponder,
    /// Registrars whose masters talk to this socket.
    pub registrars: Vec<BoxedRegistrar>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("registrars", &self.registrars.len())
            .field("port", &self.port)
            .field("extra", &self.extra)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ExtraSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraSocket")
            .field("protocol", &self.protocol)
            .field("port", &self.port)
            .field("registrars", &self.registrars.len())
            .finish_non_exhaustive()
    }
}

/// Why a farm could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FarmRunError {
    /// A socket could not be bound.
    #[error("cannot listen on {addr} for {protocol}{hint}")]
    Bind {
        /// The protocol of the server.
        protocol: &'static str,
        /// The address.
        addr: SocketAddr,
        /// A hint for the common causes.
        hint: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The server's description could not be turned into an endpoint.
    #[error("server on port {port}: {reason}")]
    Endpoint {
        /// Its game port.
        port: u16,
        /// Why.
        reason: String,
    },
}

/// One socket a running farm listens on.
#[derive(Debug, Clone, Copy)]
pub struct Listening {
    /// The protocol.
    pub protocol: FarmProtocol,
    /// The bound address (the real port when 0 was asked).
    pub addr: SocketAddr,
}

/// A running farm; dropping it (or [`RunningFarm::stop`]) stops every server.
#[derive(Debug)]
pub struct RunningFarm {
    /// Every socket, in the order of the description (a server's extra sockets right after
    /// its first).
    pub listening: Vec<Listening>,
    /// Counters per server, in the order of the description (a server's sockets share them).
    pub stats: Vec<Arc<Stats>>,
    /// Change a server's state (same order).
    pub states: Vec<watch::Sender<Arc<muster_proto::respond::ServerState>>>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<std::io::Result<()>>,
}

impl RunningFarm {
    /// Stop every server and wait for their goodbyes (registrars get two seconds).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }

    /// Wait until every server has stopped (they stop when the farm is told to, or on error).
    pub async fn wait(&mut self) -> std::io::Result<()> {
        while let Some(r) = self.tasks.join_next().await {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
        Ok(())
    }

    /// A sender that stops the farm when `true` is sent.
    #[must_use]
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }
}

async fn bind(protocol: FarmProtocol, addr: SocketAddr) -> Result<UdpSocket, FarmRunError> {
    UdpSocket::bind(addr)
        .await
        .map_err(|source| FarmRunError::Bind {
            protocol: protocol.name(),
            addr,
            hint: match source.raw_os_error() {
                Some(24) => " (too many open files: raise `ulimit -n`)",
                Some(98) => " (address in use)",
                _ => "",
            },
            source,
        })
}

/// Bind every server's socket first (so a port conflict fails before anything runs), then
/// start them all. `endpoint` builds each server's responder and registrars; `limits` applies
/// to every socket; registrar events go to `events`.
pub async fn start<F>(
    servers: Vec<FarmServer>,
    limits: Limits,
    events: Option<mpsc::UnboundedSender<muster_proto::respond::RegistrarEvent>>,
    mut endpoint: F,
) -> Result<RunningFarm, FarmRunError>
where
    F: FnMut(&FarmServer) -> Result<Endpoint, String>,
{
    let mut bound = Vec::with_capacity(servers.len());
    for server in &servers {
        let mut ep = endpoint(server).map_err(|reason| FarmRunError::Endpoint {
            port: server.state.game_port,
            reason,
        })?;
        let socket = bind(server.protocol, SocketAddr::new(server.bind, ep.port)).await?;
        let mut extra = Vec::with_capacity(ep.extra.len());
        for x in std::mem::take(&mut ep.extra) {
            let s = bind(x.protocol, SocketAddr::new(server.bind, x.port)).await?;
            extra.push((s, x));
        }
        bound.push((socket, ep, extra));
    }
    let (stop, stop_rx) = watch::channel(false);
    let mut listening = Vec::with_capacity(bound.len());
    let mut stats = Vec::with_capacity(bound.len());
    let mut states = Vec::with_capacity(bound.len());
    let mut tasks = JoinSet::new();
    for ((socket, ep, extra), server) in bound.into_iter().zip(servers) {
        let addr = socket
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(server.bind, ep.port));
        listening.push(Listening {
            protocol: server.protocol,
            addr,
        });
        let s = Arc::new(Stats::default());
        stats.push(s.clone());
        let (state_tx, state_rx) = watch::channel(Arc::new(server.state.clone()));
        states.push(state_tx);
        for target in ep.mgmt {
            tasks.spawn(crate::mgmt::keep_registered(
                target,
                state_rx.clone(),
                stop_rx.clone(),
                events.clone(),
            ));
        }
        for (x_socket, x) in extra {
            let addr = x_socket
                .local_addr()
                .unwrap_or_else(|_| SocketAddr::new(server.bind, x.port));
            listening.push(Listening {
                protocol: x.protocol,
                addr,
            });
            tasks.spawn(serve_registered(
                x_socket,
                x.responder,
                x.registrars,
                state_rx.clone(),
                limits,
                server.impairment,
                s.clone(),
                events.clone(),
                stop_rx.clone(),
            ));
        }
        tasks.spawn(serve_registered(
            socket,
            ep.responder,
            ep.registrars,
            state_rx,
            limits,
            server.impairment,
            s,
            events.clone(),
            stop_rx.clone(),
        ));
    }
    Ok(RunningFarm {
        listening,
        stats,
        states,
        stop,
        tasks,
    })
}
