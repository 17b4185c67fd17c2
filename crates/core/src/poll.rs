//! What the poller shares with the rest of the daemon: the queue of records marked changed,
//! the samples it hands the history, and the poll leases instances of one registry share.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::registry::{ServerKey, Timestamp};
use crate::store::StoreError;

/// Capacity of the queue of changed records ([`changed_channel`]); a face that finds it full
/// drops the mark (the record is still polled at its regular time).
pub const CHANGED_QUEUE: usize = 1024;

/// The result of one poll, for the player-count history. `ok == false`: the server did not answer
/// (the counts are then `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollSample {
    /// The record.
    pub key: ServerKey,
    /// When the result arrived.
    pub at: Timestamp,
    /// Whether the server answered.
    pub ok: bool,
    /// Players on the server, when it answered.
    pub num_players: Option<u32>,
    /// Player slots, when it answered.
    pub max_players: Option<u32>,
    /// Round-trip time of the first exchange, when the protocol measured it.
    pub ping: Option<Duration>,
}

/// What [`PollLeases::claim`] got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseClaim {
    /// Leases this instance holds now: poll these.
    pub granted: Vec<ServerKey>,
    /// Leases another live instance holds, with the time they have left.
    pub held: Vec<(ServerKey, Duration)>,
}

/// The future of [`PollLeases::claim`].
pub type ClaimFuture = Pin<Box<dyn Future<Output = Result<LeaseClaim, StoreError>> + Send>>;

/// Poll leases shared by the instances of one registry: at most one instance holds the lease
/// of a record at a time. Implemented by the cluster over PostgreSQL (the PostgreSQL cluster).
pub trait PollLeases: Send + Sync + std::fmt::Debug {
    /// Claims the leases of `keys` for `lease`: granted when free, expired or already held by
    /// this instance (renewed).
    fn claim(&self, keys: Vec<ServerKey>, lease: Duration) -> ClaimFuture;
}

/// The lease a poll claims: one interval plus a tenth of it (at least 1 s), so the holder
/// renews it at its next round before it ends, and another instance takes the record over
/// within one interval (plus that margin) after the holder stopped.
#[must_use]
pub fn lease_for(interval: Duration) -> Duration {
    interval + (interval / 10).max(Duration::from_secs(1))
}

/// A queue for marking records changed: give the receiver to the poller and
/// the sender to the faces, which call `try_send(key)` (never `send().await`, so a heartbeat
/// never waits for the poller).
#[must_use]
pub fn changed_channel() -> (mpsc::Sender<ServerKey>, mpsc::Receiver<ServerKey>) {
    mpsc::channel(CHANGED_QUEUE)
}
