//! [`MasterHandle`]: the one owner of the registry, its published views and its persistence.
//!
//! ```text
//!  writers (faces, poller, housekeeping) ──lock──> Registry ──view log──> publisher ──> ArcSwap<Snapshot>
//!                                                      └──dirty keys──> persister ──> Store
//!  readers (lists, API, metrics, poller's picks) ──────────────────────── load ──┘ (no lock)
//! ```
//!
//! # Who takes which lock
//! * `registry` (a `std::sync::Mutex`): writers only, for one command or one datagram's worth
//!   of commands: hash operations, no I/O, no allocation beyond the record itself, never held
//!   across `.await`. The publisher takes it only to swap its log out; the persister to swap
//!   its dirty keys out and look their records up, on the runtime's blocking pool (never on a
//!   bulk thread, whose lower priority would let the kernel preempt it while faces wait for
//!   the lock).
//! * `publisher`: the publisher task (and tests calling [`MasterHandle::publish`], and a face
//!   thread answering a list while servers registered since the last build:
//!   [`MasterHandle::fresh_snapshot`]); it builds snapshots without the registry lock.
//! * `taken` (changes taken for the store, not written yet): held through a take, which takes
//!   the registry lock inside it (to swap the changed keys out, then per [`TAKE_CHUNK`]
//!   lookups), and under the store lock to empty it. Order: store, taken, registry.
//! * `store`: the persister's writes ([`MasterHandle::flush`]), on a bulk thread; they run
//!   without the registry lock, and in the order of the takes (a write empties everything
//!   taken so far).
//! * Readers take no lock: [`MasterHandle::snapshot`] is an atomic pointer load.
//!
//! # Durability
//! A change is in the store once [`MasterHandle::flush`] ran after it. Faces that acknowledge
//! a registration to the server (DDNet's HTTP answer, the management face's next answer on
//! the registering connection) wait for that with [`MasterHandle::durable`]; structural
//! changes are flushed within [`FLUSH_DELAY`] (grouped), heartbeat and poll refreshes within
//! the daemon's flush interval.
//!
//! A registration whose write was not confirmed stays in memory (listed, retried by the
//! persister), but it is not *stored*: [`MasterHandle::unstored`] keeps its key with the
//! registry version the store must reach, until it does. A face that would acknowledge a
//! refresh of such a key without waiting (its record "already stored") waits for that version
//! instead, so a retry after a failed write is acknowledged only once a write succeeded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::{Notify, mpsc, watch};

use crate::drops::DropReason;
use crate::events::{EventHub, EventLimits};
use crate::metrics::Metrics;
use crate::registry::{
    DdnetOutcome, DdnetRegister, DelistOutcome, HeartbeatOutcome, Outcome, PollInfo, PollOutcome,
    Record, Registration, Registry, RegistryConfig, ServerKey, Timestamp, VerifyOutcome,
};
use crate::store::{Store, StoreError};
use crate::views::{Publisher, Snapshot};

/// A structural change is written at most this long after it was made (changes made meanwhile
/// join the same transaction).
pub const FLUSH_DELAY: Duration = Duration::from_millis(20);
/// Snapshots are published at most this often.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(50);
/// While changes come after a build, the publisher looks this often whether a burst of them
/// stopped: the last changes of a burst are published about this long after it ended (plus
/// the timer's millisecond of rounding), not up to [`PUBLISH_INTERVAL`] later. A look is one
/// lock and a read. At 5 ms a Quake III master's 900 registrations, answered within 20 ms,
/// were listed 13 ms after the last; a step this short also finds the end of a burst whose
/// last servers straggle in under load, where a longer one kept seeing a change or two and
/// waited out the interval. A storm, and a trickle of changes, still get a build at most every
/// [`PUBLISH_INTERVAL`] (see [`BURST_CHANGES`]).
pub const QUIET_STEP: Duration = Duration::from_millis(2);
/// Changes within one [`QUIET_STEP`] that make a burst (2,000 a second), whose end is
/// published without waiting out [`PUBLISH_INTERVAL`]. Fewer are a trickle (a registration
/// every few milliseconds), where a quiet step says nothing and ending the pause early would
/// only multiply the builds (and the sorts the API redoes after each).
pub const BURST_CHANGES: u64 = 4;
/// Builds begin at least this many of the last build's costs apart, unless someone waits
/// to see a change (the publisher's shortest pause, and [`MasterHandle::fresh_snapshot`]).
pub const BUILD_SPACING: u32 = 4;
/// Records the persister looks up per hold of the registry lock.
pub const TAKE_CHUNK: usize = 1024;
/// How long [`MasterHandle::durable`] waits for the store, unless
/// [`MasterHandle::set_durable_timeout`] says otherwise.
pub const DURABLE_TIMEOUT: Duration = Duration::from_secs(5);

/// `d` in whole milliseconds (saturating).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Changes taken out of the registry for the store, not written yet: per key the record as
/// it was when taken (`None`: removed), in take order (a key appears once per take), and the
/// registry version they reach.
#[derive(Debug, Default)]
struct Taken {
    records: Vec<(ServerKey, Option<Arc<Record>>)>,
    takes: usize,
    version: u64,
}

impl Taken {
    /// What to write: the records to put and the keys to delete, each key as its last take
    /// left it. One take holds each key once; several are merged (off the registry lock).
    fn into_writes(self) -> (Vec<Arc<Record>>, Vec<ServerKey>) {
        let last: Vec<(ServerKey, Option<Arc<Record>>)> = if self.takes <= 1 {
            self.records
        } else {
            let mut by_key: HashMap<ServerKey, Option<Arc<Record>>> = HashMap::new();
            for (k, rec) in self.records {
                by_key.insert(k, rec);
            }
            by_key.into_iter().collect()
        };
        let mut puts = Vec::with_capacity(last.len());
        let mut deletes = Vec::new();
        for (k, rec) in last {
            match rec {
                Some(rec) => puts.push(rec),
                None => deletes.push(k),
            }
        }
        (puts, deletes)
    }
}

/// The registry as a face machine reaches it: through [`MasterHandle::lazy_writer`] in the
/// daemon, or a bare [`Registry`] in tests.
pub trait RegistryAccess: std::fmt::Debug {
    /// The registry, under the writers' lock until [`RegistryAccess::release`].
    fn lock(&mut self) -> &mut Registry;
    /// Ends the current hold of the writers' lock, if any.
    fn release(&mut self) {}
}

impl RegistryAccess for Registry {
    fn lock(&mut self) -> &mut Registry {
        self
    }
}

/// See [`MasterHandle::lazy_writer`].
#[derive(Debug)]
pub struct LazyWriter<'h> {
    handle: &'h MasterHandle,
    guard: Option<MutexGuard<'h, Registry>>,
    /// The registry's version when this hold took the lock.
    before: u64,
    changed: bool,
    structural: bool,
}

impl RegistryAccess for LazyWriter<'_> {
    fn lock(&mut self) -> &mut Registry {
        let guard = match self.guard.take() {
            Some(held) => held,
            None => {
                let taken = self.handle.lock();
                self.before = taken.version();
                taken
            }
        };
        self.guard.insert(guard)
    }

    fn release(&mut self) {
        if let Some(r) = self.guard.take() {
            self.changed |= r.version() != self.before;
            self.structural |= r.has_structural_dirty();
        }
    }
}

impl Drop for LazyWriter<'_> {
    fn drop(&mut self) {
        self.release();
        if self.changed {
            self.handle.inner.changed.notify_one();
            if self.structural {
                self.handle.inner.flush_wanted.notify_one();
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    /// The registry's DDNet info file, for its gauges without the registry lock.
    info_file: Option<Arc<crate::registry::InfoFile>>,
    registry: Mutex<Registry>,
    publisher: Mutex<Publisher>,
    view: ArcSwap<Snapshot>,
    store: Mutex<Box<dyn Store>>,
    /// Changes taken from the registry for the store and not written yet.
    taken: Mutex<Taken>,
    /// Registry versions up to this one are in the store.
    persisted: watch::Sender<u64>,
    /// The last store failure, kept until a write succeeds (health and logs).
    store_error: Mutex<Option<String>>,
    /// Per key, the registry version of a registration a face acknowledges only once stored,
    /// while the store has not reached it ([`MasterHandle::unstored`]). Emptied of what the
    /// store reached after each successful write; at most one entry per record.
    unstored: Mutex<HashMap<ServerKey, u64>>,
    /// How long [`MasterHandle::durable`] waits, in milliseconds.
    durable_timeout_ms: std::sync::atomic::AtomicU64,
    /// Wakes the publisher.
    changed: Notify,
    /// Wakes the persister for a structural change or a waiting acknowledgement.
    flush_wanted: Notify,
    metrics: Metrics,
    /// Where faces mark records changed for the poller (set once, by [`crate::Master::run`]
    /// when the poller runs).
    poll_soon: OnceLock<mpsc::Sender<ServerKey>>,
    /// The last publish: when it began and how long it took (builds are spaced by a
    /// multiple of its cost).
    last_build: Mutex<LastBuild>,
    /// Live events of the list (`GET /api/v1/events`).
    events: EventHub,
    /// The version of the latest published snapshot.
    published: watch::Sender<u64>,
    /// Whether a publisher task runs (else [`MasterHandle::visible`] publishes itself).
    publisher_running: std::sync::atomic::AtomicBool,
    /// Someone waits to see the latest changes ([`MasterHandle::visible`]): the next publish
    /// builds even if only times moved.
    wanted_now: std::sync::atomic::AtomicBool,
}

/// `m`'s guard if nobody holds it now (a poisoned lock is taken as the others take it).
fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The last snapshot build: when it began and how long it took.
#[derive(Debug, Clone, Copy, Default)]
struct LastBuild {
    began: Option<Instant>,
    cost: Duration,
}

/// A cheap, cloneable handle on the registry and its views. See the module docs.
#[derive(Debug, Clone)]
pub struct MasterHandle {
    inner: Arc<Inner>,
}

/// What [`MasterHandle::open`] found in the store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadReport {
    /// Records restored.
    pub restored: usize,
    /// Records that expired while the daemon was down.
    pub expired: usize,
    /// Connection-bound records (management face) dropped because their connection is gone.
    pub orphaned: usize,
    /// Rows this build could not read (dropped, with the first reasons).
    pub skipped: usize,
    /// Why, for the first of them.
    pub skipped_reasons: Vec<String>,
}

impl MasterHandle {
    /// Loads the registry from `store`: connection-bound records (faces without a lifetime,
    /// i.e. the management server's) are deleted, since their connections died with the last
    /// run; the rest are restored in their list order and whatever expired by `now` is pruned
    /// from both registry and store (when the store refuses that write, the persister retries
    /// it; only a failed load is an error).
    pub fn open(
        config: RegistryConfig,
        mut store: Box<dyn Store>,
        now: Timestamp,
    ) -> Result<(Self, LoadReport), StoreError> {
        let ddnet_life = config
            .face_lifetimes
            .get(&crate::registry::Face::DdnetHttp)
            .copied()
            .unwrap_or(Duration::from_secs(30));
        let mut registry = Registry::new(config);
        let loaded = store.load()?;
        let (mut kept, orphans): (Vec<Record>, Vec<Record>) = loaded
            .records
            .into_iter()
            .partition(|r| registry.config().face_lifetimes.contains_key(&r.face));
        let orphan_keys: Vec<ServerKey> = orphans.into_iter().map(|r| r.key).collect();
        kept.sort_by(|a, b| (a.first_seen, &a.key).cmp(&(b.first_seen, &b.key)));
        let loaded_n = kept.len();
        for r in kept {
            registry.restore(r);
        }
        let expired = registry.prune_before(now);
        let mut gone = orphan_keys.clone();
        gone.extend(registry.take_dirty());
        // A store that cannot take the removals now (a full disk) does not stop the start:
        // the keys wait for the persister like any failed write, and `/healthz` says so.
        let write_error = store.write(&[], &gone).err();
        registry.take_changes();
        if write_error.is_some() {
            registry.mark_dirty(gone);
        }
        let report = LoadReport {
            restored: loaded_n - expired.len(),
            expired: expired.len(),
            orphaned: orphan_keys.len(),
            skipped: loaded.skipped,
            skipped_reasons: loaded.skipped_reasons,
        };
        let mut publisher = Publisher::new(ddnet_life);
        let changes = registry
            .iter_shared()
            .map(|r| crate::registry::Change {
                id: r.id,
                order: r.order_key(),
                record: Some(Arc::clone(r)),
                structural: true,
            })
            .collect();
        // Restored records are the starting state, not events.
        let _ = publisher.apply(changes, registry.version());
        let events = EventHub::new(EventLimits::default());
        let first = publisher.build(now).with_last_event_id(events.last_id());
        events.start();
        let version = registry.version();
        let info_file = registry.info_file().cloned();
        let handle = Self {
            inner: Arc::new(Inner {
                info_file,
                registry: Mutex::new(registry),
                publisher: Mutex::new(publisher),
                view: ArcSwap::from_pointee(first),
                store: Mutex::new(store),
                taken: Mutex::default(),
                persisted: watch::Sender::new(version),
                store_error: Mutex::new(None),
                unstored: Mutex::default(),
                durable_timeout_ms: std::sync::atomic::AtomicU64::new(millis(DURABLE_TIMEOUT)),
                changed: Notify::new(),
                flush_wanted: Notify::new(),
                metrics: Metrics::default(),
                poll_soon: OnceLock::new(),
                last_build: Mutex::new(LastBuild::default()),
                events,
                published: watch::Sender::new(version),
                publisher_running: std::sync::atomic::AtomicBool::new(false),
                wanted_now: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        if let Some(e) = write_error {
            handle.note_store_error(&e);
        }
        Ok((handle, report))
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The counters.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The file the registry keeps its DDNet infos in (`None`: they stay in memory).
    #[must_use]
    pub fn info_file(&self) -> Option<&Arc<crate::registry::InfoFile>> {
        self.inner.info_file.as_ref()
    }

    /// The live events of the list.
    #[must_use]
    pub fn events(&self) -> &EventHub {
        &self.inner.events
    }

    /// The current view: every list and the API read this. Never blocks.
    #[must_use]
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.view.load_full()
    }

    /// Runs `f` on the registry under the writers' lock: one command, or the commands of one
    /// datagram. Keep `f` short and free of I/O (the signature makes `.await` impossible).
    /// Wakes the publisher (and the persister, for structural changes) when `f` changed
    /// anything.
    pub fn write<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        let (out, changed, structural) = {
            let mut r = self.lock();
            let before = r.version();
            let out = f(&mut r);
            (out, r.version() != before, r.has_structural_dirty())
        };
        if changed {
            self.inner.changed.notify_one();
            if structural {
                self.inner.flush_wanted.notify_one();
            }
        }
        out
    }

    /// The writers' lock for a run of machine calls, taken at the first
    /// [`RegistryAccess::lock`] only: a datagram that changes nothing (a list request) runs
    /// without it. [`RegistryAccess::release`] after each datagram lets other writers in;
    /// the publisher and persister are woken once, when the writer is dropped.
    #[must_use]
    pub fn lazy_writer(&self) -> LazyWriter<'_> {
        LazyWriter {
            handle: self,
            guard: None,
            before: 0,
            changed: false,
            structural: false,
        }
    }

    /// Reads the registry itself under the writers' lock. For start-up, tests and one-off
    /// inspection; lists and the API read [`MasterHandle::snapshot`] instead.
    pub fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        f(&self.lock())
    }

    /// Servers `source` has registered, each with a proof: per-source budgets grow with them
    /// (`SourceLimiter::allow_proven`). Takes the registry lock for one lookup.
    #[must_use]
    pub fn proven_servers(&self, source: muster_proto::limit::SourceKey) -> usize {
        self.lock().count_of_source(source)
    }

    /// The registry's version now (pass it to [`MasterHandle::durable`]).
    #[must_use]
    pub fn version(&self) -> u64 {
        self.lock().version()
    }

    /// Connects the faces to a poller: [`MasterHandle::poll_soon`] sends to `tx` from now
    /// on (the sender of [`crate::poll::changed_channel`], whose receiver goes to
    /// the poller). Only the first call takes effect; returns
    /// whether this one did.
    pub fn set_changed_sender(&self, tx: mpsc::Sender<ServerKey>) -> bool {
        self.inner.poll_soon.set(tx).is_ok()
    }

    /// Asks the poller to poll `key` soon, because the server said its state changed
    /// (GameSpy `\statechanged`, GameAgent `u`) or was just listed. Never waits: returns
    /// `false` when no poller is connected or its queue is full (counted as the drop
    /// `changed_queue_full`; the record is still polled at its regular time).
    pub fn poll_soon(&self, key: &ServerKey) -> bool {
        let Some(tx) = self.inner.poll_soon.get() else {
            return false;
        };
        match tx.try_send(key.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.inner.metrics.count_drop(DropReason::ChangedQueueFull);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    fn counted(&self, out: Outcome) -> Outcome {
        match out {
            Outcome::Added => self.inner.metrics.count_registration(),
            Outcome::Rejected(r) => self.inner.metrics.count_drop(r.into()),
            Outcome::Refreshed | Outcome::Relisted => {}
        }
        out
    }

    /// [`Registry::register`]; rejections are counted as drops by reason.
    pub fn register(&self, reg: Registration, now: Timestamp) -> Outcome {
        let out = self.write(|r| r.register(reg, now));
        self.counted(out)
    }

    /// [`Registry::heartbeat`].
    pub fn heartbeat(&self, key: &ServerKey, now: Timestamp) -> HeartbeatOutcome {
        self.write(|r| r.heartbeat(key, now))
    }

    /// [`Registry::verify`].
    pub fn verify(&self, key: &ServerKey, now: Timestamp) -> VerifyOutcome {
        self.write(|r| r.verify(key, now))
    }

    /// [`Registry::delist`].
    pub fn delist(&self, key: &ServerKey) -> DelistOutcome {
        self.write(|r| r.delist(key))
    }

    /// [`Registry::remove`]. Returns the removed record.
    pub fn remove(&self, key: &ServerKey) -> Option<Arc<Record>> {
        self.write(|r| r.remove(key))
    }

    /// [`Registry::update_poll`].
    pub fn update_poll(
        &self,
        key: &ServerKey,
        info: Option<PollInfo>,
        now: Timestamp,
    ) -> PollOutcome {
        self.write(|r| r.update_poll(key, info, now))
    }

    /// [`Registry::registration_info`].
    pub fn registration_info(&self, key: &ServerKey, info: PollInfo) -> bool {
        self.write(|r| r.registration_info(key, info))
    }

    /// Notes that `key`'s registration at registry version `version` is acknowledged only once
    /// the store reaches that version (see [`MasterHandle::unstored`]).
    pub fn note_unstored(&self, key: ServerKey, version: u64) {
        if *self.inner.persisted.borrow() >= version {
            return;
        }
        let mut u = self
            .inner
            .unstored
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let v = u.entry(key).or_insert(version);
        *v = (*v).max(version);
    }

    /// The registry version the store must reach before a registration of `key` may be
    /// acknowledged: `Some` while a registration of it (noted with
    /// [`MasterHandle::note_unstored`]) is not confirmed stored, e.g. after its write failed
    /// or timed out; `None` once it is (or if none was noted). Pass it to
    /// [`MasterHandle::durable`].
    #[must_use]
    pub fn unstored(&self, key: &ServerKey) -> Option<u64> {
        let persisted = *self.inner.persisted.borrow();
        let mut u = self
            .inner
            .unstored
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match u.get(key) {
            Some(&v) if v > persisted => Some(v),
            Some(_) => {
                u.remove(key);
                None
            }
            None => None,
        }
    }

    /// [`Registry::ddnet_register`]; a new record is counted as a registration and a
    /// rejection as a drop. A [`DdnetOutcome::Success`] is noted as not stored yet
    /// ([`MasterHandle::unstored`]) until the store reaches it.
    pub fn ddnet_register(
        &self,
        d: DdnetRegister,
        reg: Registration,
        now: Timestamp,
    ) -> DdnetOutcome {
        let key = reg.key.clone();
        let (out, added, version) = self.write(|r| {
            let before = r.len();
            let out = r.ddnet_register(d, reg, now);
            (out, r.len() > before, r.version())
        });
        if added {
            self.inner.metrics.count_registration();
        }
        if out == DdnetOutcome::Success {
            self.note_unstored(key, version);
        }
        if let DdnetOutcome::Rejected(why) = out {
            self.inner.metrics.count_drop(why.into());
        }
        out
    }

    /// [`Registry::prune_before`], one [`Registry::prune_part`] per lock; each removal is
    /// counted as a drop with reason `expired`. Returns the removed keys (sorted).
    pub fn prune(&self, now: Timestamp) -> Vec<ServerKey> {
        // A part at a time, so that no face waits for the lock through a whole scan.
        let mut dead = Vec::new();
        for part in 0..crate::registry::PRUNE_PARTS {
            dead.extend(self.write(|r| r.prune_part(part, now)));
        }
        dead.sort();
        self.inner
            .metrics
            .count_drops(DropReason::Expired, dead.len() as u64);
        dead
    }

    /// The current view if it includes registry version `version`, else a snapshot published
    /// now: read-your-writes for a face that lists right after its own change (a management
    /// client that registers and then queries on one connection).
    pub fn snapshot_since(&self, version: u64) -> Arc<Snapshot> {
        let s = self.snapshot();
        if s.version() >= version {
            return s;
        }
        self.publish()
    }

    /// Builds and publishes a snapshot from the changes since the last one (the publisher
    /// task calls this; tests call it to see their writes at once). Returns it.
    pub fn publish(&self) -> Arc<Snapshot> {
        match self.publish_unless_early(false) {
            Ok(snap) => snap,
            Err(_) => self.snapshot(),
        }
    }

    /// As [`MasterHandle::publish`], for the publisher task: changes that moved only times are
    /// left pending while [`Publisher::wait_before_build`] says they may wait (and nobody
    /// waits to see them); then the wait left is the error.
    fn publish_when_due(&self) -> Result<Arc<Snapshot>, Duration> {
        let wanted = self
            .inner
            .wanted_now
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        self.publish_unless_early(!wanted)
    }

    /// The view for a list request: [`MasterHandle::snapshot`], unless it misses a server
    /// that registered or left since and the last build began at least
    /// [`BUILD_SPACING`] of its costs ago; then the pending changes are published first, on
    /// the caller's thread. So a server told it is registered is in the next list, as with a
    /// master that lists straight from its table, while a storm of registrations and lists
    /// together still spends at most a fraction of the time building.
    ///
    /// Never waits for a lock: while a writer holds the registry, or the publisher task is
    /// building, the list is answered from the current snapshot (the build under way, or the
    /// publisher woken by the writer, brings the changes in soon after).
    pub fn fresh_snapshot(&self) -> Arc<Snapshot> {
        let snap = self.snapshot();
        let behind = match try_lock(&self.inner.registry) {
            Some(r) => r.version() > snap.version(),
            None => false,
        };
        if !behind {
            return snap;
        }
        let last = *self
            .inner
            .last_build
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last
            .began
            .is_some_and(|b| b.elapsed() < last.cost.saturating_mul(BUILD_SPACING))
        {
            return snap;
        }
        self.publish_if_free().unwrap_or(snap)
    }

    /// [`MasterHandle::publish_unless_early`] with times allowed to wait, for
    /// [`MasterHandle::fresh_snapshot`]: `None` when the publisher's lock or the registry's is
    /// held (nothing is taken then).
    fn publish_if_free(&self) -> Option<Arc<Snapshot>> {
        let p = try_lock(&self.inner.publisher)?;
        let r = try_lock(&self.inner.registry)?;
        self.publish_locked(p, Some(r), true).ok()
    }

    fn publish_unless_early(&self, may_wait: bool) -> Result<Arc<Snapshot>, Duration> {
        let p = self
            .inner
            .publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.publish_locked(p, None, may_wait)
    }

    /// The publish itself, under the publisher's lock `p`; `r`, when given, is the registry's
    /// lock already taken (after the publisher's, as everywhere), else it is taken here.
    fn publish_locked(
        &self,
        mut p: MutexGuard<'_, Publisher>,
        r: Option<MutexGuard<'_, Registry>>,
        may_wait: bool,
    ) -> Result<Arc<Snapshot>, Duration> {
        let (changes, version) = {
            let mut r = r.unwrap_or_else(|| self.lock());
            (r.take_changes(), r.version())
        };
        let deltas = p.apply(changes, version);
        if !p.is_dirty() {
            return Ok(self.snapshot());
        }
        if may_wait && deltas.is_empty() {
            let wait = p.wait_before_build(Instant::now());
            if !wait.is_zero() {
                return Err(wait);
            }
        }
        let t = Instant::now();
        // Under the publisher's lock: the events are numbered first, so a snapshot shows
        // exactly the events up to its `last_event_id` and a reader of the list can subscribe
        // after it without a gap; they are sent once the snapshot is visible, so a stream's
        // reader who then asks the API for the server finds it.
        let numbered = self.inner.events.number(&deltas);
        let snap = Arc::new(p.build(Timestamp::now()).with_last_event_id(numbered.last));
        self.inner.view.store(Arc::clone(&snap));
        self.inner.events.send(numbered);
        let v = snap.version();
        self.inner.published.send_if_modified(|p| {
            let newer = *p < v;
            *p = (*p).max(v);
            newer
        });
        *self
            .inner
            .last_build
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = LastBuild {
            began: Some(t),
            cost: t.elapsed(),
        };
        Ok(snap)
    }

    /// Writes every change since the last flush in one transaction; returns how many records
    /// it wrote or deleted. On error the changes stay marked and the next flush tries again.
    pub fn flush(&self) -> Result<usize, StoreError> {
        let mut store = self
            .inner
            .store
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.take_for_store();
        self.write_taken(&mut **store)
    }

    /// Moves the registry's changed keys, with their records as they are now, into the
    /// changes waiting for the store. The registry lock is held to swap the changed keys out,
    /// then for [`TAKE_CHUNK`] lookups at a time: a take of a second's registrations in a
    /// storm (tens of thousands of keys) held it for up to 40 ms in one piece. A record looked
    /// up after the swap is as new or newer than at the swap, and a change after the swap
    /// marks its key again. The taken changes' lock is held for the whole take, so takes do
    /// not interleave (a later take of a key replaces an earlier one when they are written).
    fn take_for_store(&self) {
        let mut taken = self
            .inner
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (dirty, version) = {
            let mut r = self.lock();
            (r.take_dirty(), r.version())
        };
        taken.records.reserve(dirty.len());
        let mut keys = dirty.into_iter().peekable();
        while keys.peek().is_some() {
            let r = self.lock();
            for k in keys.by_ref().take(TAKE_CHUNK) {
                let rec = r.get_shared(&k).map(Arc::clone);
                taken.records.push((k, rec));
            }
        }
        taken.takes += 1;
        taken.version = taken.version.max(version);
    }

    /// Writes every change taken so far in one transaction (the caller holds the store lock,
    /// so writes follow takes in order); returns how many records it wrote or deleted. On
    /// error the keys are marked changed again and the next flush tries again.
    fn write_taken(&self, store: &mut dyn Store) -> Result<usize, StoreError> {
        let taken = std::mem::take(
            &mut *self
                .inner
                .taken
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let version = taken.version;
        let (puts, deletes) = taken.into_writes();
        let n = puts.len() + deletes.len();
        if n > 0 {
            if let Err(e) = store.write(&puts, &deletes) {
                let keys = puts.iter().map(|r| r.key.clone()).chain(deletes);
                self.lock().mark_dirty(keys);
                self.note_store_error(&e);
                return Err(e);
            }
            // Only a write proves the store works (a flush with nothing to write did not
            // touch it: a shared store's failure seen by the cluster stays reported).
            self.note_store_ok();
        }
        self.inner.persisted.send_if_modified(|v| {
            let newer = *v < version;
            *v = (*v).max(version);
            newer
        });
        let reached = *self.inner.persisted.borrow();
        self.inner
            .unstored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, v| *v > reached);
        Ok(n)
    }

    /// Records a store failure (for `/healthz`, logged once per cause); the cluster reports
    /// its catch-up and heartbeat failures here too.
    pub fn note_store_error(&self, e: &StoreError) {
        let text = muster_proto::errors::error_chain(e);
        let mut last = self
            .inner
            .store_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // One log line per cause, not one per retry.
        if last.as_deref() != Some(text.as_str()) {
            tracing::error!(error = %text, "storage failed; changes are kept and retried");
        }
        self.inner.metrics.count_drop(DropReason::StoreError);
        *last = Some(text);
    }

    /// The store works again: clears the failure.
    pub fn note_store_ok(&self) {
        let mut last = self
            .inner
            .store_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.take().is_some() {
            tracing::info!("storage works again; pending changes are written");
        }
    }

    /// The last store failure, while it lasts (for `/healthz`).
    #[must_use]
    pub fn store_error(&self) -> Option<String> {
        self.inner
            .store_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How long [`MasterHandle::durable`] waits for the store before its caller answers that
    /// the change is not stored ([`DURABLE_TIMEOUT`] unless set; tests shorten it).
    pub fn set_durable_timeout(&self, timeout: Duration) {
        self.inner
            .durable_timeout_ms
            .store(millis(timeout), std::sync::atomic::Ordering::Relaxed);
    }

    /// The registry version the store has reached.
    #[must_use]
    pub fn persisted(&self) -> u64 {
        *self.inner.persisted.borrow()
    }

    /// Waits until every change up to registry version `version` is in the store (asking the
    /// persister to write now); an error when that takes over the durable timeout
    /// ([`DURABLE_TIMEOUT`], see [`MasterHandle::set_durable_timeout`]).
    pub async fn durable(&self, version: u64) -> Result<(), StoreError> {
        let mut rx = self.inner.persisted.subscribe();
        if *rx.borrow() >= version {
            return Ok(());
        }
        self.inner.flush_wanted.notify_one();
        let timeout = Duration::from_millis(
            self.inner
                .durable_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        match tokio::time::timeout(timeout, rx.wait_for(|v| *v >= version)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(StoreError::Timeout),
        }
    }

    /// Waits until the published snapshot shows every change up to registry version `version`
    /// (read-your-writes for an answer that says "listed"), without forcing a publish while
    /// the publisher runs: at most one publish interval. Without a publisher task (or if it
    /// does not publish within a second), publishes itself.
    pub async fn visible(&self, version: u64) {
        if self.snapshot().version() >= version {
            return;
        }
        if self
            .inner
            .publisher_running
            .load(std::sync::atomic::Ordering::Acquire)
        {
            let mut rx = self.inner.published.subscribe();
            self.inner
                .wanted_now
                .store(true, std::sync::atomic::Ordering::Release);
            self.inner.changed.notify_one();
            let wait = rx.wait_for(|v| *v >= version);
            if tokio::time::timeout(Duration::from_secs(1), wait)
                .await
                .is_ok()
            {
                return;
            }
        }
        let h = self.clone();
        let _ = crate::bulk::spawn(move || h.snapshot_since(version)).await;
    }

    /// Records waiting for the next flush.
    #[must_use]
    pub fn dirty(&self) -> usize {
        // One lock after the other: a take holds the taken changes' lock while it takes the
        // registry's.
        let taken = self
            .inner
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .len();
        self.lock().dirty_len() + taken
    }

    /// The publisher: publishes a snapshot as soon as something changed, then at most every
    /// [`PUBLISH_INTERVAL`] (or [`BUILD_SPACING`] times the last build's cost, if that is longer) while
    /// changes keep coming, until `stop` is cancelled. Changes that moved only times are
    /// published within [`crate::views::TIMES_INTERVAL`] (at once when someone waits for them).
    pub async fn run_publisher(self, stop: tokio_util::sync::CancellationToken) {
        self.inner
            .publisher_running
            .store(true, std::sync::atomic::Ordering::Release);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.inner.changed.notified() => {}
            }
            let h = self.clone();
            // Building is CPU work; keep it off the reactor threads.
            let published = crate::bulk::spawn(move || h.publish_when_due()).await;
            match published {
                Ok(Err(wait)) => {
                    // Only times moved: look again when they are due (or sooner, spaced as
                    // builds are, if something else changes meanwhile).
                    self.inner.changed.notify_one();
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(wait.min(PUBLISH_INTERVAL)) => {}
                    }
                }
                _ => {
                    let cost = self
                        .inner
                        .last_build
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .cost;
                    let shortest = QUIET_STEP.max(cost.saturating_mul(BUILD_SPACING));
                    let longest = PUBLISH_INTERVAL.max(shortest);
                    if !self.sleep_while_busy(shortest, longest, &stop).await {
                        return;
                    }
                }
            }
        }
    }

    /// The publisher's pause after a build: `longest`, unless a burst came meanwhile (a
    /// [`QUIET_STEP`] with at least [`BURST_CHANGES`] changes) and then a step passed without
    /// any: then it ends there, though never before `shortest` (the builds' own cost bound).
    /// Returns false when `stop` was cancelled.
    async fn sleep_while_busy(
        &self,
        shortest: Duration,
        longest: Duration,
        stop: &tokio_util::sync::CancellationToken,
    ) -> bool {
        let start = tokio::time::Instant::now();
        let mut seen = self.version();
        let mut burst = false;
        loop {
            let elapsed = start.elapsed();
            if elapsed >= longest {
                return true;
            }
            let step = if elapsed < shortest {
                (shortest - elapsed).max(QUIET_STEP)
            } else {
                QUIET_STEP
            };
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(step.min(longest - elapsed)) => {}
            }
            let now = self.version();
            let changes = now.wrapping_sub(seen);
            burst |= changes >= BURST_CHANGES;
            if burst && changes == 0 && start.elapsed() >= shortest {
                return true;
            }
            seen = now;
        }
    }

    /// The persister: flushes structural changes within [`FLUSH_DELAY`] and everything at least
    /// every `interval`, until `stop` is cancelled (then once more). Failures are logged once
    /// per cause and retried.
    pub async fn run_persister(
        self,
        interval: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Duration::ZERO;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
                () = self.inner.flush_wanted.notified() => {
                    tokio::time::sleep(FLUSH_DELAY.max(backoff)).await;
                }
            }
            // The take (registry lock) runs on the runtime's blocking pool, at the faces'
            // priority: a bulk thread runs lower, and one preempted while holding the lock
            // would keep every face waiting for it; a take in a storm looks tens of thousands
            // of records up, which would hold a worker as long. The write runs on a bulk thread.
            let h = self.clone();
            let _ = tokio::task::spawn_blocking(move || h.take_for_store()).await;
            let h = self.clone();
            let ok = crate::bulk::spawn(move || {
                let mut store = h.inner.store.lock().unwrap_or_else(PoisonError::into_inner);
                h.write_taken(&mut **store).is_ok()
            })
            .await
            .unwrap_or(false);
            // A failing store is retried at each tick anyway: the backoff only spaces the
            // writes that waiters ask for, and never beyond the interval, so that a write asked
            // for just after the store recovers is not held past a waiter's durable timeout.
            let cap = interval.max(Duration::from_millis(100));
            backoff = if ok {
                Duration::ZERO
            } else {
                (backoff * 2).clamp(Duration::from_millis(100), cap)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Face, GameAddr};
    use crate::store::Loaded;
    use muster_proto::limit::SourceKey;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A store that records calls and can be told to fail.
    #[derive(Debug, Default)]
    struct Fake {
        rows: Arc<Mutex<std::collections::BTreeMap<ServerKey, Record>>>,
        fail: Arc<AtomicBool>,
    }

    impl Store for Fake {
        fn load(&mut self) -> Result<Loaded, StoreError> {
            Ok(Loaded {
                records: self.rows.lock().unwrap().values().cloned().collect(),
                ..Loaded::default()
            })
        }
        fn write(&mut self, puts: &[Arc<Record>], deletes: &[ServerKey]) -> Result<(), StoreError> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(StoreError::Timeout);
            }
            let mut rows = self.rows.lock().unwrap();
            for r in puts {
                rows.insert(r.key.clone(), (**r).clone());
            }
            for k in deletes {
                rows.remove(k);
            }
            Ok(())
        }
        fn location(&self) -> String {
            "fake".into()
        }
    }

    const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

    fn reg(port: u16) -> Registration {
        let addr: std::net::SocketAddr = format!("192.0.2.1:{port}").parse().unwrap();
        Registration {
            key: ServerKey::new("ut2", GameAddr::Ip(addr)),
            face: Face::GameSpy,
            game_port: None,
            query_addr: Some(addr),
            query_protocol: Some(muster_proto::Protocol::GameSpy1),
            source: SourceKey::of(addr.ip()),
        }
    }

    type Rows = Arc<Mutex<std::collections::BTreeMap<ServerKey, Record>>>;

    fn open() -> (MasterHandle, Rows, Arc<AtomicBool>) {
        let fake = Fake::default();
        let rows = Arc::clone(&fake.rows);
        let fail = Arc::clone(&fake.fail);
        let (h, _) = MasterHandle::open(RegistryConfig::default(), Box::new(fake), T0).unwrap();
        (h, rows, fail)
    }

    #[test]
    fn a_lazy_writer_locks_at_first_use_and_releases_per_datagram() {
        let (h, rows, _) = open();
        let locked = |h: &MasterHandle| h.inner.registry.try_lock().is_err();
        {
            let mut w = h.lazy_writer();
            assert!(!locked(&h), "no lock before the first use");
            assert_eq!(w.lock().register(reg(1), T0), Outcome::Added);
            assert!(locked(&h), "held from the first use");
            w.release();
            assert!(!locked(&h), "released after the datagram");
            assert!(w.lock().get(&reg(1).key).is_some(), "taken again");
            w.release();
            w.release();
        }
        assert_eq!(h.publish().len(), 1, "the change is published");
        assert_eq!(h.flush().unwrap(), 1);
        assert_eq!(rows.lock().unwrap().len(), 1);
    }

    #[test]
    fn writes_reach_the_store_at_the_flush_and_the_view_at_the_publish() {
        let (h, rows, _) = open();
        let r = reg(1);
        assert_eq!(h.register(r.clone(), T0), Outcome::Added);
        assert!(h.snapshot().is_empty(), "not published yet");
        assert!(rows.lock().unwrap().is_empty(), "not flushed yet");
        assert_eq!(h.publish().len(), 1);
        assert_eq!(h.flush().unwrap(), 1);
        assert_eq!(rows.lock().unwrap().len(), 1);
        assert_eq!(h.flush().unwrap(), 0);
        let later = Timestamp::from_secs(1_700_000_050);
        assert_eq!(h.heartbeat(&r.key, later), HeartbeatOutcome::Refreshed);
        assert_eq!(h.flush().unwrap(), 1);
        assert_eq!(rows.lock().unwrap()[&r.key].last_heartbeat, later);
        assert!(h.remove(&r.key).is_some());
        h.flush().unwrap();
        assert!(rows.lock().unwrap().is_empty());
        assert_eq!(h.metrics().registrations(), 1);
    }

    #[test]
    fn a_list_sees_the_servers_registered_before_it_unless_a_build_just_ran_or_a_lock_is_held() {
        let (h, _, _) = open();
        let first = h.snapshot();
        assert!(
            Arc::ptr_eq(&h.fresh_snapshot(), &first),
            "nothing pending: the same view"
        );
        h.register(reg(1), T0);
        assert!(h.snapshot().is_empty(), "not published yet");
        assert_eq!(h.fresh_snapshot().len(), 1, "published for the list");
        // A build that took long and just began: the next ones wait four of its costs.
        *h.inner.last_build.lock().unwrap() = LastBuild {
            began: Some(Instant::now()),
            cost: Duration::from_secs(60),
        };
        h.register(reg(2), T0);
        assert_eq!(h.fresh_snapshot().len(), 1, "too soon after a build");
        *h.inner.last_build.lock().unwrap() = LastBuild::default();
        {
            // Never waits for a lock (here held by this thread: waiting would never end).
            let _writer = h.inner.registry.lock().unwrap();
            assert_eq!(h.fresh_snapshot().len(), 1, "a writer holds the registry");
        }
        {
            let _building = h.inner.publisher.lock().unwrap();
            assert_eq!(h.fresh_snapshot().len(), 1, "the publisher is building");
        }
        assert_eq!(h.fresh_snapshot().len(), 2, "then published");
        let later = Timestamp::from_secs(1_700_000_005);
        let before = h.snapshot();
        assert_eq!(h.heartbeat(&reg(1).key, later), HeartbeatOutcome::Refreshed);
        assert!(
            Arc::ptr_eq(&h.fresh_snapshot(), &before),
            "a heartbeat that moved only a time does not force a build"
        );
    }

    #[test]
    fn the_publisher_holds_times_back_unless_someone_waits_to_see_them() {
        let (h, _, _) = open();
        h.register(reg(1), T0);
        assert!(
            h.publish_when_due().is_ok(),
            "a registration is published at once"
        );
        let later = Timestamp::from_secs(1_700_000_005);
        assert_eq!(h.heartbeat(&reg(1).key, later), HeartbeatOutcome::Refreshed);
        let wait = h.publish_when_due().unwrap_err();
        assert!(wait > Duration::ZERO && wait <= crate::views::TIMES_INTERVAL);
        assert!(h.snapshot().version() < h.version(), "not published yet");
        // What `visible` marks before it waits.
        h.inner.wanted_now.store(true, Ordering::Release);
        let s = h.publish_when_due().unwrap();
        assert_eq!(s.version(), h.version());
        assert_eq!(s.listed()[0].last_heartbeat, later);
        // A direct publish never holds back.
        h.heartbeat(&reg(1).key, Timestamp::from_secs(1_700_000_006));
        assert_eq!(h.publish().version(), h.version());
    }

    #[test]
    fn a_failed_flush_keeps_the_changes_and_says_so() {
        let (h, rows, fail) = open();
        h.register(reg(1), T0);
        fail.store(true, Ordering::Relaxed);
        assert!(h.flush().is_err());
        assert!(h.store_error().is_some());
        assert_eq!(h.dirty(), 1, "kept for the next flush");
        assert_eq!(h.metrics().drops("store_error"), 1);
        fail.store(false, Ordering::Relaxed);
        assert_eq!(h.flush().unwrap(), 1);
        assert!(h.store_error().is_none());
        assert_eq!(rows.lock().unwrap().len(), 1);
    }

    #[test]
    fn writes_follow_the_takes_and_the_last_take_of_a_key_wins() {
        let (h, rows, _) = open();
        let (a, b) = (reg(1), reg(2));
        h.register(a.clone(), T0);
        h.register(b.clone(), T0);
        // The persister's first half: taken, not written.
        h.take_for_store();
        assert!(rows.lock().unwrap().is_empty(), "a take writes nothing");
        assert_eq!(h.dirty(), 2, "taken changes still wait for the store");
        // Changed again before the write: a later take replaces the earlier one.
        let later = Timestamp::from_secs(1_700_000_050);
        h.heartbeat(&a.key, later);
        assert!(h.remove(&b.key).is_some());
        h.take_for_store();
        h.register(b.clone(), later);
        let version = h.version();
        // Any write empties everything taken so far, and what is still in the registry.
        assert_eq!(h.flush().unwrap(), 2);
        assert_eq!(h.dirty(), 0);
        let stored = rows.lock().unwrap();
        assert_eq!(stored[&a.key].last_heartbeat, later, "the last take of a");
        assert!(
            stored.contains_key(&b.key),
            "removed, then registered again: kept"
        );
        drop(stored);
        assert!(*h.inner.persisted.borrow() >= version);
        // A write with nothing taken (the persister's, after a flush took its part) writes
        // nothing and keeps the version reached.
        let mut store = h.inner.store.lock().unwrap();
        assert_eq!(h.write_taken(&mut **store).unwrap(), 0);
        drop(store);
        assert!(*h.inner.persisted.borrow() >= version);
    }

    #[test]
    fn a_take_of_more_than_a_chunk_looks_every_record_up() {
        let (h, rows, _) = open();
        let n = TAKE_CHUNK * 2 + 7;
        // Each from its own address (a source may register only so many).
        let regs: Vec<Registration> = (0..n)
            .map(|i| {
                let addr: std::net::SocketAddr = format!("10.0.{}.{}:7777", i / 250, i % 250 + 1)
                    .parse()
                    .unwrap();
                Registration {
                    key: ServerKey::new("ut2", GameAddr::Ip(addr)),
                    query_addr: Some(addr),
                    source: SourceKey::of(addr.ip()),
                    ..reg(1)
                }
            })
            .collect();
        for r in &regs {
            assert_eq!(h.register(r.clone(), T0), Outcome::Added);
        }
        // One of them removed after it was marked: a deletion within the take.
        assert!(h.remove(&regs[0].key).is_some());
        h.take_for_store();
        assert_eq!(h.dirty(), n, "every changed key taken once");
        assert_eq!(h.flush().unwrap(), n);
        assert_eq!(rows.lock().unwrap().len(), n - 1);
    }

    #[test]
    fn a_failed_write_of_taken_changes_marks_them_again() {
        let (h, rows, fail) = open();
        let a = reg(1);
        h.register(a.clone(), T0);
        h.take_for_store();
        fail.store(true, Ordering::Relaxed);
        let mut store = h.inner.store.lock().unwrap();
        assert!(h.write_taken(&mut **store).is_err());
        drop(store);
        assert_eq!(h.dirty(), 1, "back in the registry's changed keys");
        fail.store(false, Ordering::Relaxed);
        assert!(h.remove(&a.key).is_some());
        h.register(reg(2), T0);
        assert_eq!(h.flush().unwrap(), 2, "the removal of a and the new record");
        assert_eq!(
            rows.lock().unwrap().keys().cloned().collect::<Vec<_>>(),
            [reg(2).key]
        );
    }

    #[tokio::test]
    async fn durable_waits_for_the_flush() {
        let (h, _, fail) = open();
        h.register(reg(1), T0);
        let v = h.version();
        let h2 = h.clone();
        let waiter = tokio::spawn(async move { h2.durable(v).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        h.flush().unwrap();
        waiter.await.unwrap().unwrap();
        h.register(reg(2), T0);
        fail.store(true, Ordering::Relaxed);
        let v = h.version();
        tokio::time::pause();
        assert!(
            h.durable(v).await.is_err(),
            "times out while the store fails"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_durable_timeout_is_a_setting() {
        let (h, _, fail) = open();
        fail.store(true, Ordering::Relaxed);
        h.register(reg(1), T0);
        let v = h.version();
        h.set_durable_timeout(Duration::from_millis(200));
        let h2 = h.clone();
        let waiter = tokio::spawn(async move { h2.durable(v).await });
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_millis(150)).await;
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "still within the timeout");
        tokio::time::advance(Duration::from_millis(100)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            waiter.is_finished(),
            "timed out at the set 200 ms, not at 5 s"
        );
        let res = waiter.await.unwrap();
        assert!(matches!(res, Err(StoreError::Timeout)), "{res:?}");
    }

    #[test]
    fn a_ddnet_registration_stays_unstored_until_a_write_succeeds() {
        let (h, rows, fail) = open();
        let addr: std::net::SocketAddr = "192.0.2.7:8303".parse().unwrap();
        let key = ServerKey::new("ddnet", GameAddr::Ip(addr));
        let reg = Registration {
            key: key.clone(),
            face: Face::DdnetHttp,
            ..reg(8303)
        };
        let d = || DdnetRegister {
            addr,
            secret: crate::registry::DdnetSecret::from("s"),
            serial: 1,
            info: Some(bytes::Bytes::from_static(b"{}")),
            poll_info: None,
            url: Arc::from("tw-0.6+udp://192.0.2.7:8303"),
        };
        fail.store(true, Ordering::Relaxed);
        assert_eq!(
            h.ddnet_register(d(), reg.clone(), T0),
            DdnetOutcome::Success
        );
        let v = h.unstored(&key).expect("not stored yet");
        assert!(h.flush().is_err());
        // The retry only moves times, but the record was never stored.
        let later = Timestamp::from_secs(1_700_000_001);
        assert_eq!(
            h.ddnet_register(d(), reg.clone(), later),
            DdnetOutcome::Refreshed
        );
        assert_eq!(h.unstored(&key), Some(v), "still waits for the first write");
        fail.store(false, Ordering::Relaxed);
        h.flush().unwrap();
        assert!(rows.lock().unwrap().contains_key(&key));
        assert_eq!(h.unstored(&key), None, "stored");
        assert_eq!(h.ddnet_register(d(), reg, later), DdnetOutcome::Refreshed);
        assert_eq!(h.unstored(&key), None, "a refresh of a stored record");
        assert!(h.inner.unstored.lock().unwrap().is_empty());
    }

    #[test]
    fn rejections_are_counted_by_reason() {
        let (h, _, _) = open();
        let mut r = reg(1);
        r.key.game = crate::registry::GameName::default();
        assert_eq!(
            h.register(r, T0),
            Outcome::Rejected(crate::registry::Reject::BadGame)
        );
        assert_eq!(h.metrics().drops("bad_game"), 1);
    }

    #[test]
    fn a_store_that_refuses_the_removals_at_open_gets_them_from_the_persister() {
        let fake = Fake::default();
        let mut live = Record::new(0, reg(1), T0);
        live.last_heartbeat = T0;
        let old = Record::new(0, reg(2), Timestamp::from_secs(1));
        for r in [&live, &old] {
            fake.rows.lock().unwrap().insert(r.key.clone(), r.clone());
        }
        let rows = Arc::clone(&fake.rows);
        let fail = Arc::clone(&fake.fail);
        fail.store(true, Ordering::Relaxed);
        let (h, report) = MasterHandle::open(RegistryConfig::default(), Box::new(fake), T0)
            .expect("a full disk does not stop the start");
        assert_eq!((report.restored, report.expired), (1, 1));
        assert!(h.store_error().is_some(), "told in /healthz");
        assert_eq!(
            rows.lock().unwrap().len(),
            2,
            "the expired row is still stored"
        );
        assert!(h.flush().is_err());
        fail.store(false, Ordering::Relaxed);
        h.flush().unwrap();
        assert!(h.store_error().is_none());
        let left: Vec<ServerKey> = rows.lock().unwrap().keys().cloned().collect();
        assert_eq!(left, [live.key]);
    }

    #[test]
    fn open_drops_orphans_and_expired() {
        let fake = Fake::default();
        let mut live = Record::new(0, reg(1), T0);
        live.last_heartbeat = T0;
        let old = Record::new(0, reg(2), Timestamp::from_secs(1));
        let mut orphan = Record::new(0, reg(3), T0);
        orphan.face = Face::Mgmt;
        for r in [&live, &old, &orphan] {
            fake.rows.lock().unwrap().insert(r.key.clone(), r.clone());
        }
        let rows = Arc::clone(&fake.rows);
        let (h, report) =
            MasterHandle::open(RegistryConfig::default(), Box::new(fake), T0).unwrap();
        assert_eq!(
            (report.restored, report.expired, report.orphaned),
            (1, 1, 1)
        );
        assert_eq!(rows.lock().unwrap().len(), 1);
        assert_eq!(h.snapshot().len(), 1, "restored records are listed at once");
    }

    /// Registers `per_ms` servers from port `from` every millisecond, `ms` times, in a task.
    fn writer(h: &MasterHandle, from: u16, per_ms: u16, ms: u16) -> tokio::task::JoinHandle<()> {
        let h = h.clone();
        tokio::spawn(async move {
            for m in 0..ms {
                for k in 0..per_ms {
                    h.register(reg(from + m * per_ms + k), T0);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }

    /// How long the publisher's pause after a build lasts (paused clock).
    async fn pause(h: &MasterHandle, shortest: Duration) -> Duration {
        let stop = tokio_util::sync::CancellationToken::new();
        let t = tokio::time::Instant::now();
        assert!(h.sleep_while_busy(shortest, PUBLISH_INTERVAL, &stop).await);
        t.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn the_pause_after_a_build_ends_a_quiet_step_after_a_burst() {
        let (h, _, _) = open();
        // 60 registrations within the first step, then nothing: the step after it is quiet.
        let w = writer(&h, 1, 30, 2);
        assert_eq!(pause(&h, QUIET_STEP).await, 2 * QUIET_STEP);
        w.await.unwrap();
        // A burst straggling out (fewer changes each step, but a burst's worth at first) still
        // ends at its first quiet step.
        let w = writer(&h, 300, 4, 4);
        assert_eq!(pause(&h, QUIET_STEP).await, 3 * QUIET_STEP);
        w.await.unwrap();
        // Never before the builds' cost bound.
        let w = writer(&h, 100, 30, 2);
        let cost_bound = Duration::from_millis(30);
        assert_eq!(pause(&h, cost_bound).await, cost_bound + QUIET_STEP);
        w.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_pause_after_a_build_lasts_the_interval_otherwise() {
        let (h, _, _) = open();
        // Nothing changes.
        assert_eq!(pause(&h, QUIET_STEP).await, PUBLISH_INTERVAL);
        // A trickle: one change every 3 ms, quiet steps in between.
        let h2 = h.clone();
        let trickle = tokio::spawn(async move {
            for port in 1..=40u16 {
                h2.register(reg(port), T0);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        });
        assert_eq!(pause(&h, QUIET_STEP).await, PUBLISH_INTERVAL);
        trickle.abort();
        // A storm: many changes every millisecond, never a quiet step (below the source cap).
        let w = writer(&h, 1000, 10, 200);
        assert_eq!(pause(&h, QUIET_STEP).await, PUBLISH_INTERVAL);
        w.abort();
        // Cancelled: says so.
        let stop = tokio_util::sync::CancellationToken::new();
        stop.cancel();
        assert!(
            !h.sleep_while_busy(QUIET_STEP, PUBLISH_INTERVAL, &stop)
                .await
        );
    }
}
