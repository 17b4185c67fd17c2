//! What a face of the master is, for the face table: its descriptor ([`FaceDescriptor`]), the
//! sockets it is bound to, and what it is started with ([`FaceStart`]). Each face folder
//! exports one descriptor built from these; `table` lists them.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use muster_core::MasterHandle;

use crate::runtime::udp::{Budgets, UdpMachine};
use crate::runtime::{CancellationToken, TcpListener, UdpSocket};

/// A running face: resolves when its stop token is cancelled and its work is drained.
pub type Serving = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What drives a face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// A [`UdpMachine`] under the UDP runner: datagrams in, replies and registry calls out.
    Datagrams,
    /// A TCP conversation per connection under the runtime's TCP driver.
    Conversations,
}

/// One face of the master.
#[derive(Debug)]
pub struct FaceDescriptor {
    /// Its name: the `muster serve --NAME` flag, the `[listen]` key (with `_` for `-`), the
    /// `listening NAME …` line and the `face` label of its counters.
    pub name: &'static str,
    /// One line for `--help` and the docs.
    pub summary: &'static str,
    /// What drives it.
    pub contract: Contract,
    /// The port it listens on by default (on `0.0.0.0` and `[::]`).
    pub default_port: u16,
    /// Binds one configured address: the sockets it serves there, each with the name its
    /// `listening` line shows (the Teeworlds 0.7 face binds its checker beside its master).
    pub bind: fn(SocketAddr) -> io::Result<Vec<BoundSocket>>,
    /// Serves the sockets bound for it until the start's stop token is cancelled.
    pub serve: fn(&FaceStart, Vec<Socket>) -> Serving,
    /// The start-up line telling how a game server (or a client) uses the face reachable at
    /// this address: the game's own config names.
    pub register_hint: fn(SocketAddr) -> String,
}

/// `""` when `addr` is on the port a game always sends to, else a note saying it is not.
#[must_use]
pub fn fixed_port_note(addr: SocketAddr, port: u16) -> String {
    if addr.port() == port {
        String::new()
    } else {
        format!(
            " (the game always sends to port {port}; this face is on {})",
            addr.port()
        )
    }
}

/// A bound socket of either kind.
#[derive(Debug)]
pub enum Socket {
    /// A datagram socket.
    Udp(UdpSocket),
    /// A stream listener.
    Tcp(TcpListener),
}

impl Socket {
    /// The address it is bound to (the real port when 0 was asked).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Udp(s) => s.local_addr(),
            Self::Tcp(l) => l.local_addr(),
        }
    }

    /// `"udp"` or `"tcp"`.
    #[must_use]
    pub fn transport(&self) -> &'static str {
        match self {
            Self::Udp(_) => "udp",
            Self::Tcp(_) => "tcp",
        }
    }
}

/// A socket as a face's `bind` returned it, with the name its `listening` line shows.
#[derive(Debug)]
pub struct BoundSocket {
    /// The face name, or the name of the socket's role (`teeworlds07-checker`).
    pub label: &'static str,
    /// The socket.
    pub socket: Socket,
}

/// Where the UDP runner of a face runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// On a thread with a runtime of its own (`muster serve`): no datagram waits for a worker
    /// busy with HTTP tasks.
    OwnThread,
    /// On the caller's runtime (tests: a paused clock drives the face).
    #[default]
    Current,
}

/// The settings of every face, one value per type: each face reads its own type
/// ([`FaceSettings::get`]) and gets that type's default when none was set, so a face's
/// settings are defined in its folder and this map names none of them.
#[derive(Clone, Default)]
pub struct FaceSettings {
    map: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for FaceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaceSettings")
            .field("set", &self.map.len())
            .finish_non_exhaustive()
    }
}

impl FaceSettings {
    /// Sets the settings of type `T` (replacing any set before).
    pub fn set<T: Any + Send + Sync>(&mut self, settings: T) {
        self.map.insert(TypeId::of::<T>(), Arc::new(settings));
    }

    /// The settings of type `T`: what was set, else `T::default()`.
    #[must_use]
    pub fn get<T: Any + Send + Sync + Clone + Default>(&self) -> T {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|s| s.downcast_ref::<T>())
            .cloned()
            .unwrap_or_default()
    }
}

/// What every face is started with.
#[derive(Debug, Clone)]
pub struct FaceStart {
    /// The registry's owner.
    pub handle: MasterHandle,
    /// Every face's settings (and the UDP runner's [`Budgets`]).
    pub settings: FaceSettings,
    /// Where UDP runners run.
    pub placement: Placement,
    /// Cancelled at shutdown.
    pub stop: CancellationToken,
}

impl FaceStart {
    /// A start with default settings (each face's `Default`), on the caller's runtime.
    #[must_use]
    pub fn new(handle: MasterHandle, stop: CancellationToken) -> Self {
        Self {
            handle,
            settings: FaceSettings::default(),
            placement: Placement::Current,
            stop,
        }
    }

    /// Serves `face` on `sockets` (what its `bind` returned, in order).
    #[must_use]
    pub fn serve(&self, face: &FaceDescriptor, sockets: Vec<Socket>) -> Serving {
        (face.serve)(self, sockets)
    }

    /// Binds `addr` for `face` and serves it; returns the bound addresses (in `bind` order)
    /// and the running face, for tests and tools that start one face.
    pub fn bind_and_serve(
        &self,
        face: &FaceDescriptor,
        addr: SocketAddr,
    ) -> io::Result<(Vec<SocketAddr>, Serving)> {
        let bound = (face.bind)(addr)?;
        let addrs = bound
            .iter()
            .map(|b| b.socket.local_addr())
            .collect::<io::Result<Vec<_>>>()?;
        let sockets = bound.into_iter().map(|b| b.socket).collect();
        Ok((addrs, self.serve(face, sockets)))
    }

    /// Runs `machine` on `sockets` with the UDP runner, placed as [`Self::placement`] says.
    #[must_use]
    pub fn run_udp<M: UdpMachine>(&self, machine: M, sockets: Vec<UdpSocket>) -> Serving {
        let (handle, budgets, stop) = (
            self.handle.clone(),
            self.settings.get::<Budgets>(),
            self.stop.clone(),
        );
        match self.placement {
            Placement::OwnThread => Box::pin(crate::runtime::udp::run_on_own_thread(
                handle, machine, sockets, budgets, stop,
            )),
            Placement::Current => Box::pin(crate::runtime::udp::run(
                handle,
                machine,
                sockets.into_iter().map(Arc::new).collect(),
                budgets,
                stop,
            )),
        }
    }
}

/// Binds one UDP socket (the `bind` of most UDP faces).
pub fn bind_one_udp(label: &'static str, addr: SocketAddr) -> io::Result<Vec<BoundSocket>> {
    Ok(vec![BoundSocket {
        label,
        socket: Socket::Udp(crate::runtime::bind_udp(addr)?),
    }])
}

/// Binds one TCP listener (the `bind` of the TCP faces).
pub fn bind_one_tcp(label: &'static str, addr: SocketAddr) -> io::Result<Vec<BoundSocket>> {
    Ok(vec![BoundSocket {
        label,
        socket: Socket::Tcp(crate::runtime::bind_tcp(addr)?),
    }])
}

/// The datagram sockets among `sockets` (a face's `bind` only makes its own kind; a stray
/// listener is a wiring mistake, logged and left out).
#[must_use]
pub fn udp_sockets(face: &str, sockets: Vec<Socket>) -> Vec<UdpSocket> {
    sockets
        .into_iter()
        .filter_map(|s| match s {
            Socket::Udp(s) => Some(s),
            Socket::Tcp(_) => {
                tracing::error!(face, "a TCP listener was handed to a UDP face; ignored");
                None
            }
        })
        .collect()
}

/// The stream listeners among `sockets` (see [`udp_sockets`]).
#[must_use]
pub fn tcp_listeners(face: &str, sockets: Vec<Socket>) -> Vec<TcpListener> {
    sockets
        .into_iter()
        .filter_map(|s| match s {
            Socket::Tcp(l) => Some(l),
            Socket::Udp(_) => {
                tracing::error!(face, "a UDP socket was handed to a TCP face; ignored");
                None
            }
        })
        .collect()
}

/// Gives back most of a map's room when it holds less than a quarter of it: the faces' own
/// maps (challenges in flight, heartbeat facts) grow with a burst and would keep its size.
pub(crate) fn shrink<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut HashMap<K, V, S>,
) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}
