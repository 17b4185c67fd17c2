//! The management server face (`management-server.md`): length-prefixed JSON over TCP 51963.
//!
//! Each connection is a [`MgmtConversation`] (a pure machine driven by the runtime's TCP
//! driver, [`crate::runtime::conversation`]) around a sans-IO [`muster_proto::mgmt::ServerSession`] (framing,
//! validation, the one-server-per-connection rule, the idle timeout of unregistered
//! connections); it mirrors the session's events into the registry: a registration is a [`muster_core::registry::Face::Mgmt`] record keyed by the
//! connection id ([`ServerKey::with_instance`]), listed at once with the default state; stats
//! updates replace its info; it is removed on unregister and whenever the connection ends
//! (EOF, error, framing error, idle timeout, output overflow, shutdown). Queries are answered
//! from the view (management records) with [`ServerListAnswer::fitting`]: open lobbies first,
//! the registering sources taking turns, from a start that rotates with every answer (so a
//! few sources with many long-named servers cannot push another's out of a full answer). No
//! answer goes out on a connection after its registration until the registration is stored
//! ([`MasterHandle::unstored`]).
//!
//! ```text
//! accept ─ caps (total, per source IP) ─ keep-alive ─ driver: read → conversation → events
//!   Register/UpdateStats/Unregister → MasterHandle (state bucket per source)
//!   Query → answer (query bucket per source, global egress budget) → output buffer
//!   checked after each answer: output buffer > max_unsent, or face-wide unsent >
//!   max_unsent_total → close; owing a frame (or half the cap): no more answers, no more
//!   input, until the peer reads (back-pressure)
//! ```
//!
//! Abuse limits: connection caps over all listeners of the face (a connection over a cap is
//! closed right after accept, without data), a per-source token bucket on queries and one on
//! state-changing commands, a global egress byte budget, the registry's servers-per-source cap
//! and a cap on unsent output. TCP peers cannot spoof their source, so a limited request is
//! **delayed** (the connection stops being read until a token is free) rather than dropped:
//! the protocol has no error reply and answers must keep request order. Every wait is data:
//! a bucket or the egress budget is tried again at a deadline the machine gives, the store
//! and the lists are waited for by the driver
//! ([`crate::runtime::conversation::Wait`]).
//!
//! Does not: resolve host names, verify that a game server is reachable (the protocol gives
//! no way to; registration over an established TCP connection is the proof the registry
//! accepts), or persist anything beyond what [`MasterHandle`] writes (management records are
//! connection-bound and dropped at the next start).
//!
//! [`ServerListAnswer::fitting`]: muster_proto::mgmt::ServerListAnswer::fitting
//! [`ServerKey::with_instance`]: muster_core::registry::ServerKey::with_instance

mod conn;
mod entry;

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use muster_proto::limit::{BucketConfig, ByteBudget, SourceKey, SourceLimiter};
use muster_proto::mgmt::MAX_WIRE_FRAME_LEN;
use tokio_util::sync::CancellationToken;

pub use self::conn::MgmtConversation;
use crate::runtime::TcpListener;
use crate::runtime::conversation::DriverSettings;
use crate::runtime::tcp::{CappedListener, ConnLimits, MetricsSink, PrefixCaps, SharedCaps};
use muster_core::MasterHandle;

/// Largest unsent output of one connection before it is closed (§7.2: 1 MiB).
pub const DEFAULT_MAX_UNSENT: usize = 1 << 20;
/// Unsent output of the whole face before slow readers are closed.
pub const DEFAULT_MAX_UNSENT_TOTAL: usize = 64 << 20;
/// The kernel send buffer of each connection (`SO_SNDBUF`; Linux keeps twice this). Small, so
/// that a client that does not read soon shows as unsent output here and is paused (see
/// `MgmtConversation::pause_at`) instead of having answers made, each spending the shared egress
/// budget, for as long as the kernel takes them (it grows a send buffer to megabytes).
/// An answer of a full frame still goes out in a few round trips.
const SEND_BUFFER: usize = 16 * 1024;
/// Bytes read from a socket at once.
const READ_CHUNK: usize = 16 * 1024;
/// How long a limited command waits before its bucket is tried again.
const BUCKET_RETRY: Duration = Duration::from_millis(50);
/// How long an answer at the head of the egress queue waits before the budget is tried again.
const EGRESS_RETRY: Duration = Duration::from_millis(20);
/// How long a closing connection may take to flush what it already owes the peer.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);
/// Log lines about discarded input: burst.
const LOG_BURST: u32 = 20;
/// Log lines about discarded input: one more every this long.
const LOG_REFILL: Duration = Duration::from_secs(1);

/// The management face's knobs (listen addresses are the caller's business).
#[derive(Debug, Clone, PartialEq)]
pub struct MgmtSettings {
    /// A connection without a registered game server is closed after this long without a
    /// complete message (§7.1 (9); the daemon's default is `limits.mgmt_idle_timeout`, 30 s).
    /// Registered connections never time out.
    pub idle_timeout: Duration,
    /// Concurrent connections over all listeners of the face (the daemon's default is
    /// `limits.tcp_max_connections`, 4096).
    pub max_connections: usize,
    /// Concurrent connections per source IP address (§7.2: 16; the daemon sizes it for a
    /// hosting box, `limits.tcp_max_per_source`).
    pub max_per_source: usize,
    /// Caps per IPv6 /56 and /48, and the reserve (`limits.tcp_*`).
    pub prefix: PrefixCaps,
    /// The buckets grow by one budget per server the source has registered, counting this
    /// many at most (`limits.proven_servers_max`; 0: never).
    pub proven_servers_max: u32,
    /// A connection whose unsent output exceeds this many bytes is closed (§7.2: 1 MiB).
    pub max_unsent: usize,
    /// Unsent output of all connections together; while it is above this, a connection
    /// with unsent output is closed at its next step (bounds memory to this plus one answer
    /// per connection, whatever the number of slow readers).
    pub max_unsent_total: usize,
    /// TCP keep-alive idle time on accepted sockets, so vanished hosts are noticed (§7.2);
    /// `None` leaves the OS default (off).
    pub keepalive: Option<Duration>,
    /// `msQueryGameServers` per source (IPv4 address / IPv6 /64).
    pub query_bucket: BucketConfig,
    /// `msRegisterGameServer` and `msUpdateGameServerStats` per source.
    pub state_bucket: BucketConfig,
    /// Sources the two buckets track at most.
    pub max_tracked_sources: usize,
    /// Global egress of the face, bytes per second (raised to one full frame if lower).
    pub egress_bytes_per_sec: u64,
}

impl MgmtSettings {
    /// The defaults with the shared `[limits]` section applied.
    #[must_use]
    pub fn from_limits(l: &muster_core::config::LimitsConfig) -> Self {
        Self {
            idle_timeout: l.mgmt_idle_timeout.0,
            max_connections: l.tcp_max_connections,
            max_per_source: l.tcp_max_per_source,
            prefix: l.conn_limits().prefix,
            proven_servers_max: l.proven_servers_max,
            max_tracked_sources: l.max_tracked_sources,
            egress_bytes_per_sec: l.egress_bytes_per_sec,
            ..Self::default()
        }
    }
}

impl Default for MgmtSettings {
    fn default() -> Self {
        Self {
            idle_timeout: muster_proto::mgmt::DEFAULT_IDLE_TIMEOUT,
            max_connections: 1024,
            max_per_source: 16,
            prefix: PrefixCaps::default(),
            proven_servers_max: 0,
            max_unsent: DEFAULT_MAX_UNSENT,
            max_unsent_total: DEFAULT_MAX_UNSENT_TOTAL,
            keepalive: Some(Duration::from_secs(60)),
            query_bucket: BucketConfig::one_every(8, Duration::from_secs(1)),
            state_bucket: BucketConfig::one_every(32, Duration::from_millis(250)),
            max_tracked_sources: 100_000,
            egress_bytes_per_sec: 1 << 20,
        }
    }
}

/// The management server's entry in the face table.
pub const FACE: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "mgmt",
    summary: "management server (TCP)",
    contract: crate::face::Contract::Conversations,
    default_port: muster_core::config::ports::MGMT,
    bind: |addr| crate::face::bind_one_tcp(FACE.name, addr),
    serve: |start, sockets| {
        Box::pin(run(
            start.handle.clone(),
            crate::face::tcp_listeners(FACE.name, sockets),
            start.settings.get::<MgmtSettings>(),
            start.stop.clone(),
        ))
    },
    register_hint: |a| {
        format!("management server: game servers connect to {a} and send msRegisterGameServer")
    },
};

/// Serves the management protocol on `listeners` until `shutdown` is cancelled; then stops
/// accepting, closes every connection, removes its game server and returns.
///
/// The listeners may be IPv4 or IPv6; the caps count connections over all of them (per source:
/// an IPv4 address or an IPv6 /64).
async fn run(
    handle: MasterHandle,
    listeners: Vec<TcpListener>,
    settings: MgmtSettings,
    shutdown: CancellationToken,
) {
    let caps = SharedCaps::with_send_buffer(
        ConnLimits {
            max_connections: settings.max_connections,
            max_per_source: settings.max_per_source,
            // Registered connections never idle out; the session times out the others.
            idle_timeout: Duration::ZERO,
            prefix: settings.prefix,
        },
        settings.keepalive,
        Some(SEND_BUFFER),
    );
    let sink = Arc::new(handle.clone()) as Arc<dyn MetricsSink>;
    let listeners = listeners
        .into_iter()
        .map(|l| {
            if let Ok(addr) = l.local_addr() {
                tracing::debug!(%addr, "mgmt listening");
            }
            CappedListener::shared(l, Arc::clone(&caps)).with_metrics(Arc::clone(&sink))
        })
        .collect();
    let shared = Arc::new(Shared::new(handle.clone(), settings));
    let driver = DriverSettings {
        read_chunk: READ_CHUNK,
        close_flush: CLOSE_FLUSH,
    };
    let new_conn = |peer, now| Ok(MgmtConversation::new(Arc::clone(&shared), peer, now));
    crate::runtime::conversation::serve(handle, listeners, driver, new_conn, shutdown).await;
}

/// State shared by every connection of the face.
#[derive(Debug)]
pub(crate) struct Shared {
    handle: MasterHandle,
    settings: MgmtSettings,
    limits: Mutex<Limits>,
    log: Mutex<LogGate>,
    unsent_total: AtomicUsize,
    /// Answers made so far: where the sources' turns start in the next one.
    answers: AtomicU64,
    /// Answers waiting for the egress budget, first come first served: the head spends
    /// first. Tickets of [`Shared::next_ticket`].
    egress_queue: Mutex<VecDeque<u64>>,
    next_ticket: AtomicU64,
}

#[derive(Debug)]
struct Limits {
    queries: SourceLimiter,
    state: SourceLimiter,
    egress: ByteBudget,
}

/// A token bucket for log lines about bad input, so garbage cannot flood the log.
#[derive(Debug)]
struct LogGate {
    bucket: SourceLimiter,
    suppressed: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which per-source bucket a command takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    /// `msQueryGameServers`.
    Query,
    /// `msRegisterGameServer`, `msUpdateGameServerStats`.
    State,
}

impl Shared {
    fn new(handle: MasterHandle, settings: MgmtSettings) -> Self {
        let frame = u64::try_from(MAX_WIRE_FRAME_LEN).unwrap_or(u64::MAX);
        let limits = Limits {
            queries: SourceLimiter::new(settings.query_bucket, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            state: SourceLimiter::new(settings.state_bucket, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            egress: ByteBudget::new(settings.egress_bytes_per_sec.max(frame)),
        };
        Self {
            handle,
            settings,
            limits: Mutex::new(limits),
            unsent_total: AtomicUsize::new(0),
            answers: AtomicU64::new(0),
            egress_queue: Mutex::new(VecDeque::new()),
            next_ticket: AtomicU64::new(0),
            log: Mutex::new(LogGate {
                bucket: SourceLimiter::new(BucketConfig::one_every(LOG_BURST, LOG_REFILL), 1),
                suppressed: 0,
            }),
        }
    }

    /// Whether a log line about bad input may be written at `now` (and how many were held
    /// back).
    fn may_log(&self, now: Instant) -> Option<u64> {
        let mut g = lock(&self.log);
        if g.bucket.allow(IpAddr::from([0, 0, 0, 0]), now, 1.0) {
            Some(std::mem::take(&mut g.suppressed))
        } else {
            g.suppressed += 1;
            None
        }
    }

    /// Takes a token of `bucket` for `ip` at `now`; `proven` counts the servers of a source.
    fn try_take(
        &self,
        bucket: Bucket,
        ip: IpAddr,
        now: Instant,
        proven: impl FnOnce(SourceKey) -> usize,
    ) -> bool {
        let mut l = lock(&self.limits);
        let b = match bucket {
            Bucket::Query => &mut l.queries,
            Bucket::State => &mut l.state,
        };
        b.allow_proven(ip, now, 1.0, proven)
    }

    /// A place in the egress queue.
    fn queue_for_egress(&self) -> u64 {
        let t = self
            .next_ticket
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.egress_queue).push_back(t);
        t
    }

    /// Spends `bytes` of the egress budget at `now` for `ticket` if it heads the queue and
    /// the budget has them; the ticket then leaves the queue.
    fn try_egress(&self, ticket: u64, bytes: usize, now: Instant) -> bool {
        let mut q = lock(&self.egress_queue);
        if q.front() != Some(&ticket) || !lock(&self.limits).egress.spend(bytes, now) {
            return false;
        }
        q.pop_front();
        true
    }

    /// `ticket` leaves the queue unserved (its connection ended).
    fn leave_egress(&self, ticket: u64) {
        lock(&self.egress_queue).retain(|t| *t != ticket);
    }
}
