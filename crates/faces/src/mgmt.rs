//! The management server face (`management-server.md`): length-prefixed JSON over TCP 51963.
//!
//! One task per connection drives a sans-IO [`ServerSession`] (framing, validation, the
//! one-server-per-connection rule, the idle timeout of unregistered connections) and mirrors
//! its events into the registry: a registration is a [`Face::Mgmt`] record keyed by the
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
//! accept ─ caps (total, per source IP) ─ keep-alive ─ task: read → session → events
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
//! the protocol has no error reply and answers must keep request order.
//!
//! Does not: resolve host names, verify that a game server is reachable (the protocol gives
//! no way to; registration over an established TCP connection is the proof the registry
//! accepts), or persist anything beyond what [`MasterHandle`] writes (management records are
//! connection-bound and dropped at the next start).
//!
//! [`ServerListAnswer::fitting`]: muster_proto::mgmt::ServerListAnswer::fitting
//! [`ServerKey::with_instance`]: muster_core::registry::ServerKey::with_instance

mod entry;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use muster_proto::limit::{BucketConfig, ByteBudget, SourceLimiter};
use muster_proto::mgmt::{
    CloseReason, Discard, GameServer, MAX_WIRE_FRAME_LEN, Message, ServerSession, SessionConfig,
    SessionEvent, Stats,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::runtime::tcp::{
    CappedListener, CappedStream, ConnLimits, MetricsSink, PrefixCaps, SharedCaps,
};
use muster_core::MasterHandle;
use muster_core::drops::DropReason as Reason;
use muster_core::registry::{Face, Outcome, ServerKey, Timestamp};

/// Largest unsent output of one connection before it is closed (§7.2: 1 MiB).
pub const DEFAULT_MAX_UNSENT: usize = 1 << 20;
/// Unsent output of the whole face before slow readers are closed.
pub const DEFAULT_MAX_UNSENT_TOTAL: usize = 64 << 20;
/// The kernel send buffer of each connection (`SO_SNDBUF`; Linux keeps twice this). Small, so
/// that a client that does not read soon shows as unsent output here and is paused (see
/// [`Conn::pause_at`]) instead of having answers made, each spending the shared egress
/// budget, for as long as the kernel takes them (it grows a send buffer to megabytes).
/// An answer of a full frame still goes out in a few round trips.
const SEND_BUFFER: usize = 16 * 1024;
/// Bytes read from a socket at once.
const READ_CHUNK: usize = 16 * 1024;
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

/// Connection ids are process-wide so two faces on one handle never share a key.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Serves the management protocol on `listeners` until `shutdown` is cancelled; then stops
/// accepting, closes every connection, removes its game server and returns.
///
/// The listeners may be IPv4 or IPv6; the caps count connections over all of them (per source:
/// an IPv4 address or an IPv6 /64).
pub async fn run(
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
    let shared = Arc::new(Shared::new(handle, settings));
    let mut accepts = JoinSet::new();
    for l in listeners {
        if let Ok(addr) = l.local_addr() {
            tracing::debug!(%addr, "mgmt listening");
        }
        let l = CappedListener::shared(l, Arc::clone(&caps))
            .with_metrics(Arc::new(shared.handle.clone()) as Arc<dyn MetricsSink>);
        accepts.spawn(accept_loop(l, Arc::clone(&shared), shutdown.clone()));
    }
    while let Some(res) = accepts.join_next().await {
        if let Err(e) = res {
            tracing::error!(error = %e, "mgmt accept loop panicked");
        }
    }
}

/// State shared by every connection of the face.
#[derive(Debug)]
struct Shared {
    handle: MasterHandle,
    settings: MgmtSettings,
    limits: Mutex<Limits>,
    log: Mutex<LogGate>,
    unsent_total: AtomicUsize,
    /// Answers made so far: where the sources' turns start in the next one.
    answers: AtomicU64,
    /// The queue of answers waiting for the egress budget.
    egress_turns: tokio::sync::Mutex<()>,
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

use muster_core::clock::now;

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
            egress_turns: tokio::sync::Mutex::new(()),
            log: Mutex::new(LogGate {
                bucket: SourceLimiter::new(BucketConfig::one_every(LOG_BURST, LOG_REFILL), 1),
                suppressed: 0,
            }),
        }
    }

    /// Whether a log line about bad input may be written now (and how many were held back).
    fn may_log(&self) -> Option<u64> {
        let mut g = lock(&self.log);
        if g.bucket.allow(IpAddr::from([0, 0, 0, 0]), now(), 1.0) {
            Some(std::mem::take(&mut g.suppressed))
        } else {
            g.suppressed += 1;
            None
        }
    }

    fn try_query(&self, ip: IpAddr) -> bool {
        lock(&self.limits)
            .queries
            .allow_proven(ip, now(), 1.0, |k| self.handle.proven_servers(k))
    }

    fn try_state(&self, ip: IpAddr) -> bool {
        lock(&self.limits)
            .state
            .allow_proven(ip, now(), 1.0, |k| self.handle.proven_servers(k))
    }

    fn try_egress(&self, bytes: usize) -> bool {
        lock(&self.limits).egress.spend(bytes, now())
    }
}

async fn accept_loop(
    mut listener: CappedListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let mut conns = JoinSet::new();
    loop {
        // Connections over a cap are closed inside `accept_capped`, without data.
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            c = listener.accept_capped() => c,
        };
        let conn = Conn::new(Arc::clone(&shared), peer);
        conns.spawn(conn.serve(stream, shutdown.clone()));
    }
    drop(listener);
    // Every connection sees the same shutdown signal, closes and removes its server.
    while conns.join_next().await.is_some() {}
}

/// The registry entry of one connection; removed when the connection ends, however it ends.
#[derive(Debug)]
struct Entry {
    handle: MasterHandle,
    current: Option<(ServerKey, GameServer)>,
}

impl Entry {
    fn clear(&mut self) {
        if let Some((key, _)) = self.current.take() {
            self.handle.remove(&key);
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Why the connection loop stopped.
enum Stop {
    Done,
    Shutdown,
}

struct Conn {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    session: ServerSession,
    entry: Entry,
    out: Vec<u8>,
    sent: usize,
    /// This connection's share of [`Shared::unsent_total`].
    accounted: usize,
    /// Stop without answering what is queued: a write failed, or the idle timeout struck
    /// while the connection was paused.
    halted: bool,
    /// Set while the session counts a registration the registry refused (cap, store error,
    /// name too long): the session then runs no idle timer, so the driver runs it, from the
    /// last complete message.
    orphan_since: Option<std::time::Instant>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.shared
            .unsent_total
            .fetch_sub(self.accounted, Ordering::Relaxed);
    }
}

impl Conn {
    fn new(shared: Arc<Shared>, peer: SocketAddr) -> Self {
        let config = SessionConfig {
            idle_timeout: shared.settings.idle_timeout,
        };
        let entry = Entry {
            handle: shared.handle.clone(),
            current: None,
        };
        Self {
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            peer,
            session: ServerSession::new(now(), config),
            entry,
            out: Vec::new(),
            sent: 0,
            accounted: 0,
            halted: false,
            orphan_since: None,
            shared,
        }
    }

    fn unsent(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Brings this connection's share of the face-wide unsent total up to date; returns
    /// whether the connection is over either output cap.
    fn account(&mut self) -> bool {
        let now_unsent = self.unsent();
        let total = &self.shared.unsent_total;
        if now_unsent >= self.accounted {
            total.fetch_add(now_unsent - self.accounted, Ordering::Relaxed);
        } else {
            total.fetch_sub(self.accounted - now_unsent, Ordering::Relaxed);
        }
        self.accounted = now_unsent;
        let s = &self.shared.settings;
        now_unsent > s.max_unsent
            || (now_unsent > 0 && total.load(Ordering::Relaxed) > s.max_unsent_total)
    }

    async fn serve(mut self, stream: CappedStream, shutdown: CancellationToken) {
        let mut buf = vec![0u8; READ_CHUNK];
        let (mut rd, mut wr) = tokio::io::split(stream);
        let stop = loop {
            if self.halted || shutdown.is_cancelled() {
                // Commands still queued behind a pause are not answered.
                break Stop::Shutdown;
            }
            if let Some(stop) = self.apply_events(&shutdown).await {
                break stop;
            }
            if self.account() {
                self.overflow();
                break Stop::Shutdown;
            }
            let idle = self.shared.settings.idle_timeout;
            let deadline = self
                .session
                .poll_timeout()
                .or_else(|| self.orphan_since.map(|t| t + idle));
            // Commands left waiting (the connection owes enough): only writing goes on.
            let may_read = !self.session.has_event();
            let pending = self.out.get(self.sent..).unwrap_or_default();
            tokio::select! {
                () = shutdown.cancelled() => self.session.abort(now()),
                r = rd.read(&mut buf), if may_read => match r {
                    Ok(0) => self.session.handle_eof(now()),
                    Ok(n) => self.session.handle_input(now(), buf.get(..n).unwrap_or_default()),
                    Err(e) => {
                        tracing::debug!(peer = %self.peer, error = %e, "mgmt read failed");
                        self.session.abort(now());
                    }
                },
                w = wr.write(pending), if !pending.is_empty() => match w {
                    Ok(n) => self.advance(n),
                    Err(e) => self.write_failed(&e),
                },
                () = sleep_until(deadline), if deadline.is_some() => {
                    if self.session.poll_timeout().is_some() {
                        self.session.handle_timeout(now());
                        if self.session.is_closed() && self.unsent() >= self.pause_at() {
                            // Paused: the close would wait behind the queued commands.
                            self.shared.handle.metrics().count_drop(Reason::MgmtIdleTimeout);
                            self.halted = true;
                        }
                    } else {
                        self.shared.handle.metrics().count_drop(Reason::MgmtIdleTimeout);
                        tracing::debug!(peer = %self.peer, "mgmt idle timeout (refused registration)");
                        self.session.abort(now());
                    }
                }
            }
        };
        self.entry.clear();
        if matches!(stop, Stop::Done) && self.unsent() > 0 {
            // Best effort: answers already owed go out before the close.
            let pending = self.out.get(self.sent..).unwrap_or_default();
            let _ = tokio::time::timeout(CLOSE_FLUSH, wr.write_all(pending)).await;
        }
        let _ = tokio::time::timeout(CLOSE_FLUSH, wr.shutdown()).await;
    }

    /// Back-pressure: no answer is made for a connection that owes this much output (one
    /// frame, or half its cap if that is less) until the peer reads, and no input is read
    /// while commands wait. A client that pipelines queries and does not read holds at most
    /// that plus one answer here (and what the kernel buffers), and spends no more of the
    /// face's egress budget.
    fn pause_at(&self) -> usize {
        MAX_WIRE_FRAME_LEN
            .min(self.shared.settings.max_unsent / 2)
            .max(1)
    }

    fn overflow(&self) {
        self.shared
            .handle
            .metrics()
            .count_drop(Reason::MgmtOutputOverflow);
        self.log_bad("output overflow, closing");
    }

    fn write_failed(&mut self, e: &std::io::Error) {
        tracing::debug!(peer = %self.peer, error = %e, "mgmt write failed");
        self.out.clear();
        self.sent = 0;
        self.halted = true;
    }

    fn advance(&mut self, n: usize) {
        self.sent += n;
        if self.sent >= self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent > self.out.len() / 2 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
    }

    /// Applies queued session events while the connection owes less than
    /// [`Conn::pause_at`]; `Some` once the session is closed.
    async fn apply_events(&mut self, shutdown: &CancellationToken) -> Option<Stop> {
        let pause_at = self.pause_at();
        while self.unsent() < pause_at {
            let Some(ev) = self.session.poll_event() else {
                break;
            };
            if self.orphan_since.is_some() {
                self.orphan_since = Some(now());
            }
            match ev {
                SessionEvent::Register(server) => {
                    if !self.wait(shutdown, Shared::try_state).await {
                        self.session.abort(now());
                        continue;
                    }
                    self.register(server);
                    self.orphan_since = self.entry.current.is_none().then(now);
                }
                SessionEvent::UpdateStats(stats) => {
                    if !self.wait(shutdown, Shared::try_state).await {
                        self.session.abort(now());
                        continue;
                    }
                    self.update(&stats);
                }
                SessionEvent::Unregister => {
                    self.entry.clear();
                    self.orphan_since = None;
                }
                SessionEvent::Query => {
                    if !self.wait(shutdown, Shared::try_query).await {
                        self.session.abort(now());
                        continue;
                    }
                    if !self.answer(shutdown).await {
                        self.session.abort(now());
                    }
                    // Checked as each answer is made, not after the whole queue.
                    if self.account() {
                        self.overflow();
                        return Some(Stop::Shutdown);
                    }
                }
                SessionEvent::Discarded(d) => {
                    let reason = match &d {
                        Discard::Invalid(_) => Reason::MgmtInvalid,
                        Discard::NotRegistered => Reason::MgmtNotRegistered,
                        Discard::NotACommand(_) => Reason::MgmtNotACommand,
                    };
                    self.shared.handle.metrics().count_drop(reason);
                    self.log_discard(&d);
                }
                SessionEvent::Closed(reason) => {
                    let stop = match reason {
                        CloseReason::Framing(e) => {
                            self.shared.handle.metrics().count_drop(Reason::MgmtFraming);
                            self.log_bad(&format!("framing error, closing: {e}"));
                            Stop::Done
                        }
                        CloseReason::IdleTimeout => {
                            self.shared
                                .handle
                                .metrics()
                                .count_drop(Reason::MgmtIdleTimeout);
                            tracing::debug!(peer = %self.peer, "mgmt idle timeout");
                            Stop::Done
                        }
                        CloseReason::PeerClosed => Stop::Done,
                        CloseReason::Aborted => Stop::Shutdown,
                    };
                    return Some(stop);
                }
            }
        }
        None
    }

    /// Waits for a token of the source's bucket; false when shut down meanwhile.
    async fn wait(&self, shutdown: &CancellationToken, take: fn(&Shared, IpAddr) -> bool) -> bool {
        let ip = self.peer.ip();
        let mut counted = false;
        loop {
            if shutdown.is_cancelled() {
                return false;
            }
            if take(&self.shared, ip) {
                return true;
            }
            if !counted {
                self.shared.handle.metrics().count_rate_limited(ip);
                counted = true;
            }
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    fn register(&mut self, server: GameServer) {
        if !entry::name_fits(&server) {
            self.shared
                .handle
                .metrics()
                .count_drop(Reason::MgmtNameTooLong);
            self.log_bad("registration discarded: name too long");
            return;
        }
        if server.port().is_well_known() && self.shared.may_log().is_some() {
            {
                tracing::warn!(peer = %self.peer, port = server.port().get(), "mgmt registration on a well-known port");
            }
        }
        let reg = entry::registration(&server, self.id, self.peer.ip());
        let key = reg.key.clone();
        if self.entry.current.as_ref().is_some_and(|(k, _)| *k != key) {
            self.entry.clear();
        }
        let t = Timestamp::now();
        let handle = &self.shared.handle;
        // The TCP handshake proved the peer; the record is listed at once, with the default
        // state until the first stats update.
        let info = entry::info(&server, &Stats::default());
        let (out, version) = handle.write(|r| {
            let out = r.register(reg, t);
            if out.is_listed() {
                r.set_info(&key, info);
            }
            (out, r.version())
        });
        if out.is_listed() {
            // The next answer on this connection waits until the store has it.
            handle.note_unstored(key.clone(), version);
        }
        match out {
            Outcome::Added => handle.metrics().count_registration(),
            Outcome::Refreshed | Outcome::Relisted => {}
            Outcome::Rejected(r) => {
                handle.metrics().count_drop(r.into());
                // The old entry (if any) is already gone.
                self.entry.current = None;
                self.log_bad(&format!("registration refused: {}", r.name()));
                return;
            }
        }
        self.entry.current = Some((key.clone(), server.clone()));
        tracing::debug!(peer = %self.peer, conn = self.id, %key.addr, "mgmt registered");
    }

    fn update(&mut self, stats: &Stats) {
        let Some((key, server)) = &self.entry.current else {
            // The registration was refused by the registry; the session does not know.
            self.shared
                .handle
                .metrics()
                .count_drop(Reason::MgmtNotRegistered);
            return;
        };
        let info = entry::info(server, stats);
        let t = Timestamp::now();
        self.shared.handle.write(|r| {
            r.set_info(key, info);
            r.heartbeat(key, t);
        });
    }

    /// Waits until this connection's registration, if any, is in the store (retrying while
    /// the store fails); false when shut down meanwhile. An answer is the only thing the
    /// protocol sends back, so it is what acknowledges the registration: none goes out on
    /// this connection before its registration is stored.
    async fn stored(&self, shutdown: &CancellationToken) -> bool {
        let Some((key, _)) = &self.entry.current else {
            return true;
        };
        let handle = &self.shared.handle;
        while let Some(version) = handle.unstored(key) {
            tokio::select! {
                () = shutdown.cancelled() => return false,
                r = handle.durable(version) => if r.is_err() {
                    handle.metrics().count_drop(Reason::NotStored);
                    self.log_bad("registration not stored yet; the answer waits");
                },
            }
        }
        true
    }

    /// Appends the answer to a query; false when shut down while waiting for the store or
    /// the budget.
    async fn answer(&mut self, shutdown: &CancellationToken) -> bool {
        if !self.stored(shutdown).await {
            return false;
        }
        let handle = &self.shared.handle;
        handle.metrics().count_list_request(Face::Mgmt.name());
        // Answers are linearizable: a query sees every change made before it (a client that
        // registers and then queries sees its own server); it waits for the publish that
        // shows them (at most one publish interval), never publishes on the reactor.
        handle.visible(handle.version()).await;
        let entries: Vec<_> = handle
            .snapshot()
            .listed()
            .iter()
            .filter_map(|r| entry::listed(r).map(|e| (r.source, e)))
            .collect();
        let turn = self.shared.answers.fetch_add(1, Ordering::Relaxed);
        let (answer, left_out) = entry::answer(entries, turn);
        if left_out > 0 {
            handle.metrics().count_drop(Reason::MgmtAnswerTruncated);
            if self.shared.may_log().is_some() {
                tracing::warn!(left_out, "mgmt answer exceeds one frame; entries left out");
            }
        }
        let start = self.out.len();
        Message::QueryGameServersAnswer(answer).encode(&mut self.out);
        let len = self.out.len() - start;
        // Answers waiting for the egress budget take it in turn (the queue is first come,
        // first served; a paused connection has at most one answer in it), rather than
        // whichever polls first after a refill.
        let _turn = tokio::select! {
            () = shutdown.cancelled() => return false,
            turn = self.shared.egress_turns.lock() => turn,
        };
        loop {
            if self.shared.try_egress(len) {
                return true;
            }
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }

    fn log_discard(&self, d: &Discard) {
        if let Some(held) = self.shared.may_log() {
            tracing::info!(peer = %self.peer, conn = self.id, reason = ?d, held_back = held, "mgmt message discarded");
        }
    }

    fn log_bad(&self, what: &str) {
        if let Some(held) = self.shared.may_log() {
            tracing::info!(peer = %self.peer, conn = self.id, held_back = held, "mgmt: {what}");
        }
    }
}

async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
