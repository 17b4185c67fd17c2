//! Live events: what changed in the list, as the API shows it, for `GET /api/v1/events`
//! (Server-Sent Events).
//!
//! ```text
//!  publish (views::Publisher::apply → Delta per record)
//!      │ EventHub::emit: number, append to the backlog, broadcast (the first stream to
//!      │ read an event serialises it, and compresses it for gzip streams, once for all)
//!      v
//!  backlog (last `events.backlog`)      broadcast channel (bounded)
//!      │ replay after Last-Event-ID          │ live
//!      └──────────────> one Subscription per stream <──┘
//! ```
//!
//! An event is made once per publish and per record, coalescing whatever happened to the
//! record since the previous publish: `server_added` (now listed, was not), `server_removed`
//! (was listed, is not) or `server_changed` (listed before and after, and something the API
//! shows changed; a heartbeat that only refreshes times is no event). Its data is one JSON
//! object: for added and changed, the server as `GET /api/v1/servers/{address}` returns it;
//! for removed, its `address`, `registered_address`, `game` and `protocol`.
//!
//! Event ids count up over the daemon's life, from the start time in seconds times 2^20, so
//! that an id from an earlier run is never mistaken for one of this run. A subscriber that
//! gives the id of the last event it saw gets every later event still in the backlog first; if
//! some are gone (or the id is not of this run), it gets a `resync` event first (refetch the
//! list). Subscribers are capped in total, per source, per IPv6 /56 and /48, and the last
//! streams of the total are kept for sources holding few (the TCP faces' caps,
//! [`crate::conns`], sized for streams), so that many /64s of one network cannot take
//! every stream and an honest reader still gets one. The
//! registry never waits for a subscriber: a subscriber more than the channel's capacity behind
//! is dropped with a final `dropped` event.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use muster_proto::limit::SourceKey;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::conns::{ConnLimits, Counts, PrefixCaps};
use crate::drops::DropReason;
use crate::registry::Record;

/// Default events kept for `Last-Event-ID` resumption.
pub const DEFAULT_BACKLOG: usize = 4096;
/// Default events one subscriber may fall behind before it is dropped.
pub const DEFAULT_LAG: usize = 4096;
/// Default subscribers in total.
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 1024;
/// Default subscribers per source (an IPv4 address, an IPv6 /64).
pub const DEFAULT_MAX_PER_SOURCE: usize = 8;
/// Default subscribers per IPv6 /56 (two sources' worth).
pub const DEFAULT_MAX_PER_56: usize = 16;
/// Default subscribers per IPv6 /48 (four sources' worth).
pub const DEFAULT_MAX_PER_48: usize = 32;
/// Default subscribers kept for sources holding few (a quarter of the total).
pub const DEFAULT_RESERVED: usize = 256;
/// Default subscribers a source may hold and still get a kept one.
pub const DEFAULT_FAIR_SHARE: usize = 2;
/// Default time between keep-alive comments.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What happened to a listed server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// It is listed now and was not at the previous publish.
    Added,
    /// It was listed and still is, and something the API shows changed.
    Changed,
    /// It was listed and is not any more.
    Removed,
}

impl EventKind {
    /// The SSE event name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Added => "server_added",
            Self::Changed => "server_changed",
            Self::Removed => "server_removed",
        }
    }
}

/// One change of one record between two publishes (made by the view publisher).
#[derive(Debug, Clone)]
pub struct Delta {
    /// What happened.
    pub kind: EventKind,
    /// The record as it is now (as it was last listed, for a removal).
    pub record: Arc<Record>,
}

/// One numbered event. Its text (and the text compressed) is made from the record on first
/// read and then shared by every stream (the HTTP layer renders it): a daemon nobody follows never
/// serialises or compresses an event, and the backlog holds records (mostly shared with the
/// registry), not their JSON.
#[derive(Debug)]
pub struct ServerEvent {
    /// Its number (from 1, never reused while the daemon runs).
    pub id: u64,
    /// What happened.
    pub kind: EventKind,
    /// The record as the publisher saw it (as it was last listed, for a removal).
    record: Arc<Record>,
    /// Its texts, in a box made when a stream first reads it: the backlog's events of a
    /// daemon nobody follows hold one pointer for them, not two empty memo slots.
    memo: OnceLock<Box<Memo>>,
}

/// An event's texts, each made on first read.
#[derive(Debug, Default)]
struct Memo {
    text: OnceLock<bytes::Bytes>,
    deflated: OnceLock<bytes::Bytes>,
}

// An event and its `Arc` counts fill one 64-byte allocator size class (with both memo slots
// inline, 128); the backlog and the stream channel hold thousands.
const _: () = assert!(size_of::<ServerEvent>() <= 48);

impl PartialEq for ServerEvent {
    /// Ids are never reused in a run: the same id is the same event.
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.kind) == (other.id, other.kind)
    }
}

impl Eq for ServerEvent {}

impl ServerEvent {
    /// The record as the publisher saw it (as it was last listed, for a removal).
    #[must_use]
    pub fn record(&self) -> &Arc<Record> {
        &self.record
    }

    /// Its wire text: made by `render` on the first call, then shared by every stream (the
    /// HTTP layer renders; this log holds records, not their JSON).
    pub fn text_with(&self, render: impl FnOnce(&Self) -> bytes::Bytes) -> &bytes::Bytes {
        self.memo().text.get_or_init(|| render(self))
    }

    /// Its compressed text: made by `compress` on the first call, then shared.
    pub fn compressed_with(&self, compress: impl FnOnce() -> bytes::Bytes) -> &bytes::Bytes {
        self.memo().deflated.get_or_init(compress)
    }

    fn memo(&self) -> &Memo {
        self.memo.get_or_init(Box::default)
    }
}

/// The hub's limits (config `[events]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLimits {
    /// Events kept for resumption.
    pub backlog: usize,
    /// Events a subscriber may fall behind.
    pub lag: usize,
    /// Subscribers in total.
    pub max_subscribers: usize,
    /// Subscribers per source.
    pub max_per_source: usize,
    /// Subscribers per IPv6 /56 and /48, and the reserve for sources holding few (as the TCP
    /// faces count connections). The reserve is at most a quarter of `max_subscribers`, and
    /// never so large that a lone source could not reach `max_per_source`.
    pub prefix: PrefixCaps,
    /// Time between keep-alive comments on a stream.
    pub keep_alive: Duration,
}

impl Default for EventLimits {
    fn default() -> Self {
        Self {
            backlog: DEFAULT_BACKLOG,
            lag: DEFAULT_LAG,
            max_subscribers: DEFAULT_MAX_SUBSCRIBERS,
            max_per_source: DEFAULT_MAX_PER_SOURCE,
            prefix: PrefixCaps {
                max_per_56: DEFAULT_MAX_PER_56,
                max_per_48: DEFAULT_MAX_PER_48,
                reserved: DEFAULT_RESERVED,
                fair_share: DEFAULT_FAIR_SHARE,
            },
            keep_alive: DEFAULT_KEEP_ALIVE,
        }
    }
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// `max_subscribers` streams are open.
    #[error("too many event streams are open")]
    Total,
    /// The source has `max_per_source` streams open.
    #[error("too many event streams from this address")]
    PerSource,
    /// The source's IPv6 /56 or /48 has `max_per_56` or `max_per_48` streams open.
    #[error("too many event streams from this network")]
    Prefix,
    /// Only the reserve is left, and the source (or its network) holds its fair share.
    #[error("the last event streams are kept for addresses holding few")]
    Reserve,
}

#[derive(Debug)]
struct Log {
    limits: EventLimits,
    backlog: VecDeque<Arc<ServerEvent>>,
    /// The id the next event sent carries.
    next_id: u64,
    /// The last id given to an event, sent or not: events are numbered before the snapshot
    /// that shows them is visible and sent after it, so this may run ahead of `next_id - 1`.
    reserved: u64,
    tx: broadcast::Sender<Arc<ServerEvent>>,
}

#[derive(Debug, Default)]
struct Subscribers {
    total: usize,
    /// Per source, /56 and /48, counted as the TCP faces count connections.
    counts: Counts,
}

/// The event hub: owned by the master handle, fed by the publisher, read by streams.
#[derive(Debug)]
pub struct EventHub {
    log: Mutex<Log>,
    subscribers: Arc<Mutex<Subscribers>>,
    /// Off while the registry is loaded from the store (a restart is not a change).
    on: AtomicBool,
    /// Cancelled when the daemon stops: every stream ends.
    closed: CancellationToken,
}

/// A publish's events, numbered and not sent yet (see [`EventHub::number`]).
#[derive(Debug)]
#[must_use = "numbered events are sent with EventHub::send"]
pub struct Numbered {
    events: Vec<Arc<ServerEvent>>,
    /// The last id numbered so far (this publish's last event, or the one before it).
    pub last: u64,
}

impl EventHub {
    /// An empty hub with `limits`, numbering from the current time (see the module docs).
    #[must_use]
    pub fn new(limits: EventLimits) -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self::numbered_from(limits, (secs << 20).max(1))
    }

    /// An empty hub whose first event is `first_id` (at least 1).
    #[must_use]
    pub fn numbered_from(limits: EventLimits, first_id: u64) -> Self {
        let (tx, _) = broadcast::channel(limits.lag.max(1));
        Self {
            log: Mutex::new(Log {
                limits,
                backlog: VecDeque::new(),
                next_id: first_id.max(1),
                reserved: first_id.max(1) - 1,
                tx,
            }),
            subscribers: Arc::new(Mutex::new(Subscribers::default())),
            on: AtomicBool::new(false),
            closed: CancellationToken::new(),
        }
    }

    /// Sets the limits (before any subscriber: the daemon configures the hub it opened with
    /// the defaults).
    pub fn configure(&self, limits: EventLimits) {
        let mut log = self.lock_log();
        log.limits = limits;
        log.tx = broadcast::channel(limits.lag.max(1)).0;
        while log.backlog.len() > limits.backlog {
            log.backlog.pop_front();
        }
    }

    /// Time between keep-alive comments on a stream.
    #[must_use]
    pub fn keep_alive(&self) -> Duration {
        self.lock_log().limits.keep_alive
    }

    /// Ends every subscription (the daemon stops); later ones end at once.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Starts emitting (after the registry was loaded).
    pub fn start(&self) {
        self.on.store(true, Ordering::Release);
    }

    /// The id of the last event numbered (one less than the first before any).
    #[must_use]
    pub fn last_id(&self) -> u64 {
        self.lock_log().reserved
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers and sends the events of `deltas` at once; returns the last id. Never waits for
    /// a subscriber.
    pub fn emit(&self, deltas: &[Delta]) -> u64 {
        let numbered = self.number(deltas);
        let last = numbered.last;
        self.send(numbered);
        last
    }

    /// Numbers the events of `deltas` without sending them: the publisher numbers a publish's
    /// events, makes the snapshot that shows them visible, and only then [`send`](Self::send)s
    /// them, so whoever reads an event finds its server in the list. Only the publisher
    /// numbers and sends, one publish at a time. The text is made by the first stream that
    /// reads an event.
    pub fn number(&self, deltas: &[Delta]) -> Numbered {
        let mut log = self.lock_log();
        if deltas.is_empty() || !self.on.load(Ordering::Acquire) {
            return Numbered {
                events: Vec::new(),
                last: log.reserved,
            };
        }
        let first = log.reserved + 1;
        let events: Vec<Arc<ServerEvent>> = deltas
            .iter()
            .zip(first..)
            .map(|(d, id)| {
                Arc::new(ServerEvent {
                    id,
                    kind: d.kind,
                    record: Arc::clone(&d.record),
                    memo: OnceLock::new(),
                })
            })
            .collect();
        log.reserved = first + events.len() as u64 - 1;
        Numbered {
            events,
            last: log.reserved,
        }
    }

    /// Sends events [`number`](Self::number) made: into the backlog and to every stream.
    pub fn send(&self, numbered: Numbered) {
        let mut log = self.lock_log();
        for e in numbered.events {
            log.next_id = e.id + 1;
            if log.backlog.len() >= log.limits.backlog {
                log.backlog.pop_front();
            }
            if log.limits.backlog > 0 {
                log.backlog.push_back(Arc::clone(&e));
            }
            // No receiver is not an error here.
            let _ = log.tx.send(e);
        }
    }

    /// Opens a subscription for `source`, resuming after event `after` when given.
    pub fn subscribe(
        &self,
        source: SourceKey,
        after: Option<u64>,
    ) -> Result<Subscription, Refused> {
        let log = self.lock_log();
        let slot = Slot::take(&self.subscribers, source, log.limits)?;
        let rx = log.tx.subscribe();
        let mut last = log.next_id - 1;
        let (replay, gap) = match after {
            None => (Vec::new(), false),
            // Not an id of this run.
            Some(after) if after > log.reserved => (Vec::new(), true),
            // A list showing events numbered but not sent yet: they come through `rx`, and
            // those up to `after` are skipped.
            Some(after) if after >= last => {
                last = after;
                (Vec::new(), false)
            }
            Some(after) => {
                let oldest = log.backlog.front().map_or(log.next_id, |e| e.id);
                let replay: Vec<_> = log
                    .backlog
                    .iter()
                    .filter(|e| e.id > after)
                    .cloned()
                    .collect();
                (replay, after.saturating_add(1) < oldest)
            }
        };
        drop(log);
        Ok(Subscription {
            replay: replay.into(),
            gap,
            rx,
            last_id: last,
            closed: self.closed.clone(),
            _slot: slot,
        })
    }

    /// Open subscriptions.
    #[must_use]
    pub fn subscribers(&self) -> usize {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

/// A subscriber's place in the caps, given back when its stream ends.
#[derive(Debug)]
struct Slot {
    subscribers: Arc<Mutex<Subscribers>>,
    at: crate::conns::Slot,
}

impl Slot {
    fn take(
        subscribers: &Arc<Mutex<Subscribers>>,
        source: SourceKey,
        limits: EventLimits,
    ) -> Result<Self, Refused> {
        let mut s = subscribers.lock().unwrap_or_else(PoisonError::into_inner);
        if s.total >= limits.max_subscribers {
            return Err(Refused::Total);
        }
        // A lone source still reaches its own cap: the reserve leaves it room.
        let reserved = limits
            .prefix
            .reserved
            .min(limits.max_subscribers.saturating_sub(limits.max_per_source));
        let caps = ConnLimits {
            max_connections: limits.max_subscribers,
            max_per_source: limits.max_per_source,
            idle_timeout: Duration::ZERO,
            prefix: PrefixCaps {
                reserved,
                ..limits.prefix
            },
        };
        // The source's address: an IPv6 /64 keeps the bits of its /56 and /48.
        let at = crate::conns::Slot::of(source.to_ip());
        let total = s.total;
        s.counts
            .try_take(at, &caps, total, 0)
            .map_err(|reason| match reason {
                DropReason::TcpSourceCap => Refused::PerSource,
                DropReason::TcpPrefixCap => Refused::Prefix,
                _ => Refused::Reserve,
            })?;
        s.total += 1;
        Ok(Self {
            subscribers: Arc::clone(subscribers),
            at,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        s.total = s.total.saturating_sub(1);
        s.counts.give_back(self.at);
    }
}

/// What a subscriber receives next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Events it missed are gone from the backlog: refetch the list.
    Resync,
    /// An event.
    Event(Arc<ServerEvent>),
    /// It fell too far behind and is dropped; this is its last item.
    Dropped,
    /// The hub is gone (the daemon stops).
    Closed,
}

/// One subscriber's stream of events. See the module docs.
#[derive(Debug)]
pub struct Subscription {
    replay: VecDeque<Arc<ServerEvent>>,
    gap: bool,
    rx: broadcast::Receiver<Arc<ServerEvent>>,
    /// Events up to this id were replayed or are older than the subscription.
    last_id: u64,
    closed: CancellationToken,
    _slot: Slot,
}

impl Subscription {
    /// The next item; waits for one.
    pub async fn next(&mut self) -> Next {
        if std::mem::take(&mut self.gap) {
            return Next::Resync;
        }
        if let Some(e) = self.replay.pop_front() {
            return Next::Event(e);
        }
        loop {
            let got = tokio::select! {
                () = self.closed.cancelled() => return Next::Closed,
                got = self.rx.recv() => got,
            };
            match got {
                Ok(e) if e.id <= self.last_id => {}
                Ok(e) => return Next::Event(e),
                Err(broadcast::error::RecvError::Lagged(_)) => return Next::Dropped,
                Err(broadcast::error::RecvError::Closed) => return Next::Closed,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{
        Face, GameAddr, Registration, Registry, RegistryConfig, ServerKey, Timestamp,
    };

    fn record(port: u16) -> Arc<Record> {
        let addr: std::net::SocketAddr = format!("192.0.2.1:{port}").parse().unwrap();
        let mut r = Registry::new(RegistryConfig::default());
        r.register(
            Registration {
                key: ServerKey::new("ut", GameAddr::Ip(addr)),
                face: Face::GameSpy,
                game_port: None,
                query_addr: Some(addr),
                query_protocol: Some(muster_proto::Protocol::GameSpy1),
                source: SourceKey::of(addr.ip()),
            },
            Timestamp::from_secs(1_700_000_000),
        );
        r.iter_shared().next().cloned().unwrap()
    }

    fn hub(limits: EventLimits) -> EventHub {
        let h = EventHub::numbered_from(limits, 1);
        h.start();
        h
    }

    fn delta(kind: EventKind, port: u16) -> Delta {
        Delta {
            kind,
            record: record(port),
        }
    }

    fn src(last: u8) -> SourceKey {
        SourceKey::of(std::net::IpAddr::from([198, 51, 100, last]))
    }

    async fn ids(s: &mut Subscription, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        for _ in 0..n {
            match s.next().await {
                Next::Event(e) => out.push(e.id),
                other => panic!("{other:?}"),
            }
        }
        out
    }

    #[tokio::test]
    async fn nothing_is_emitted_before_start() {
        let h = EventHub::numbered_from(EventLimits::default(), 1);
        assert_eq!(h.emit(&[delta(EventKind::Added, 1)]), 0);
        h.start();
        assert_eq!(h.emit(&[delta(EventKind::Added, 1)]), 1);
    }

    #[tokio::test]
    async fn resume_replays_the_backlog_then_continues_live() {
        let h = hub(EventLimits {
            backlog: 3,
            ..EventLimits::default()
        });
        for p in 1..=5 {
            h.emit(&[delta(EventKind::Added, p)]);
        }
        // Backlog holds 3, 4, 5. After 3: 4, 5, then live.
        let mut s = h.subscribe(src(1), Some(3)).unwrap();
        h.emit(&[delta(EventKind::Changed, 1)]);
        assert_eq!(ids(&mut s, 3).await, [4, 5, 6]);
        // After 1: 2 is gone, so resync first, then 3…
        let mut s = h.subscribe(src(1), Some(1)).unwrap();
        assert_eq!(s.next().await, Next::Resync);
        assert_eq!(ids(&mut s, 1).await, [4]);
        // After 3, with 4, 5, 6 kept: nothing is missing.
        let mut s = h.subscribe(src(1), Some(3)).unwrap();
        assert_eq!(ids(&mut s, 3).await, [4, 5, 6]);
        // An id this run never gave (an earlier run's): resync, then live.
        let mut s = h.subscribe(src(1), Some(99)).unwrap();
        h.emit(&[delta(EventKind::Changed, 2)]);
        assert_eq!(s.next().await, Next::Resync);
        assert_eq!(ids(&mut s, 1).await, [7]);
        // The last id: nothing to replay.
        let mut s = h.subscribe(src(1), Some(7)).unwrap();
        h.emit(&[delta(EventKind::Changed, 3)]);
        assert_eq!(ids(&mut s, 1).await, [8]);
    }

    /// The publisher numbers a publish's events, shows the snapshot, then sends them: a stream
    /// sees nothing before the send, and a list fetched in between (showing the numbered ids)
    /// resumes after them without a resync and without seeing them twice.
    #[tokio::test]
    async fn numbered_events_wait_for_their_send_and_a_list_in_between_resumes_cleanly() {
        let h = hub(EventLimits::default());
        let mut early = h.subscribe(src(1), None).unwrap();
        let numbered = h.number(&[delta(EventKind::Added, 1), delta(EventKind::Added, 2)]);
        assert_eq!(numbered.last, 2);
        assert_eq!(h.last_id(), 2, "a snapshot built now shows both");
        let quiet = tokio::time::timeout(Duration::from_millis(50), early.next()).await;
        assert!(quiet.is_err(), "nothing reaches a stream before the send");
        // A reader listed the snapshot (last_event_id 2) and follows from there.
        let mut resumed = h.subscribe(src(2), Some(2)).unwrap();
        // One from before the list: the numbered events arrive live after the send.
        let mut before = h.subscribe(src(3), Some(1)).unwrap();
        // An id past anything numbered is still another run's.
        let mut other_run = h.subscribe(src(4), Some(3)).unwrap();
        h.send(numbered);
        h.emit(&[delta(EventKind::Changed, 1)]);
        assert_eq!(ids(&mut early, 3).await, [1, 2, 3]);
        assert_eq!(ids(&mut resumed, 1).await, [3], "no resync, nothing twice");
        assert_eq!(ids(&mut before, 2).await, [2, 3]);
        assert_eq!(other_run.next().await, Next::Resync);
    }

    #[tokio::test]
    async fn a_lagging_subscriber_is_dropped_and_others_keep_going() {
        let h = hub(EventLimits {
            lag: 4,
            ..EventLimits::default()
        });
        let mut slow = h.subscribe(src(1), None).unwrap();
        let mut fast = h.subscribe(src(2), None).unwrap();
        for p in 1..=3 {
            h.emit(&[delta(EventKind::Added, p)]);
            assert_eq!(ids(&mut fast, 1).await, [u64::from(p)]);
        }
        for p in 4..=10 {
            h.emit(&[delta(EventKind::Added, p)]);
            assert_eq!(ids(&mut fast, 1).await, [u64::from(p)]);
        }
        assert_eq!(slow.next().await, Next::Dropped);
    }

    #[tokio::test]
    async fn closing_ends_every_subscription() {
        let h = hub(EventLimits::default());
        let mut s = h.subscribe(src(1), None).unwrap();
        h.close();
        assert_eq!(s.next().await, Next::Closed);
    }

    #[test]
    fn ids_of_a_later_run_are_larger() {
        let a = EventHub::new(EventLimits::default());
        assert!(a.last_id() > 1 << 40, "{}", a.last_id());
    }

    #[test]
    fn subscribers_are_capped_per_source_and_in_total() {
        let h = hub(EventLimits {
            max_subscribers: 3,
            max_per_source: 2,
            ..EventLimits::default()
        });
        let a = h.subscribe(src(1), None).unwrap();
        let _b = h.subscribe(src(1), None).unwrap();
        assert_eq!(h.subscribe(src(1), None).unwrap_err(), Refused::PerSource);
        let _c = h.subscribe(src(2), None).unwrap();
        assert_eq!(h.subscribe(src(3), None).unwrap_err(), Refused::Total);
        drop(a);
        assert_eq!(h.subscribers(), 2);
        assert!(h.subscribe(src(1), None).is_ok());
    }

    /// Subscribes from `addrs` (cycling) `n` times; keeps what opened, returns what refused.
    fn fill(
        h: &EventHub,
        held: &mut Vec<Subscription>,
        addrs: &[String],
        n: usize,
    ) -> Vec<Refused> {
        let mut refused = Vec::new();
        for i in 0..n {
            let ip: std::net::IpAddr = addrs[i % addrs.len()].parse().unwrap();
            match h.subscribe(SourceKey::of(ip), None) {
                Ok(s) => held.push(s),
                Err(r) => refused.push(r),
            }
        }
        refused
    }

    #[test]
    fn many_v6_64s_of_one_network_cannot_take_every_stream() {
        let h = hub(EventLimits::default());
        let mut held = Vec::new();
        // 128 /64s of one /56, as many streams as each may hold: the /56 stops at its cap.
        let one_56: Vec<String> = (0..128).map(|i| format!("2001:db8:1:{i:x}::1")).collect();
        let refused = fill(&h, &mut held, &one_56, 128 * DEFAULT_MAX_PER_SOURCE);
        assert_eq!(held.len(), DEFAULT_MAX_PER_56);
        assert!(refused.iter().all(|r| *r == Refused::Prefix), "{refused:?}");
        // 128 /56s of one /48: the /48 stops at its cap.
        let one_48: Vec<String> = (0..128)
            .map(|i| format!("2001:db8:2:{:x}::1", i << 8))
            .collect();
        let refused = fill(&h, &mut held, &one_48, 128 * DEFAULT_MAX_PER_SOURCE);
        assert_eq!(held.len(), DEFAULT_MAX_PER_56 + DEFAULT_MAX_PER_48);
        assert!(refused.iter().all(|r| *r == Refused::Prefix));
        // 128 /64s in as many /48s fill the streams up to the reserve and no further…
        let spread: Vec<String> = (0..128)
            .map(|i| format!("2001:db8:{:x}::1", 0x100 + i))
            .collect();
        let refused = fill(&h, &mut held, &spread, 128 * DEFAULT_MAX_PER_SOURCE);
        assert_eq!(held.len(), DEFAULT_MAX_SUBSCRIBERS - DEFAULT_RESERVED);
        assert!(!refused.is_empty());
        assert!(refused.iter().all(|r| *r == Refused::Reserve));
        // …and an honest reader, IPv4 or IPv6, still gets one.
        assert!(h.subscribe(src(1), None).is_ok());
        let reader: std::net::IpAddr = "2001:db8:ffff::1".parse().unwrap();
        assert!(h.subscribe(SourceKey::of(reader), None).is_ok());
        // Closed streams give their places back.
        drop(held);
        assert_eq!(h.subscribers(), 0);
    }

    #[test]
    fn a_lone_source_still_reaches_its_cap() {
        // The events bench: one source may hold every stream.
        let h = hub(EventLimits {
            max_subscribers: 64,
            max_per_source: 64,
            ..EventLimits::default()
        });
        let mut held = Vec::new();
        let refused = fill(&h, &mut held, &["127.0.0.1".to_owned()], 65);
        assert_eq!((held.len(), refused), (64, vec![Refused::Total]));
    }
}
