//! Serving a responder on loopback for a peer to query.

use std::net::SocketAddr;
use std::sync::Arc;

use muster_proto::respond::{Responder, ServerState};
use muster_server::{Impairment, Limits, Stats, serve};
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// A responder running on a loopback socket; stops when dropped.
#[allow(dead_code)]
pub(crate) struct Served {
    /// The query address.
    pub(crate) addr: SocketAddr,
    /// Counters.
    pub(crate) stats: Arc<Stats>,
    state: watch::Sender<Arc<ServerState>>,
    stop: watch::Sender<bool>,
}

#[allow(dead_code)]
impl Served {
    /// Replace the served state.
    pub(crate) fn set_state(&self, state: ServerState) {
        let _ = self.state.send(Arc::new(state));
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Serve `responder` about `state` on `127.0.0.1:<port>` (0 picks a free port), without rate
/// limits (peers retry quickly).
#[allow(dead_code)]
pub(crate) async fn serve_loopback<R: Responder + Send + 'static>(
    responder: R,
    state: ServerState,
    port: u16,
) -> Served {
    let socket = UdpSocket::bind(("127.0.0.1", port))
        .await
        .expect("bind loopback responder socket");
    let addr = socket.local_addr().expect("local addr");
    let (state_tx, state_rx) = watch::channel(Arc::new(state));
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    tokio::spawn(serve(
        socket,
        responder,
        state_rx,
        Limits::unlimited(),
        Impairment::default(),
        stats.clone(),
        stop_rx,
    ));
    Served {
        addr,
        stats,
        state: state_tx,
        stop,
    }
}
