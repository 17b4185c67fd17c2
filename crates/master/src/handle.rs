//! [`MasterHandle`]: the registry, its store and the metrics, shared by every face.
//!
//! # Why a mutex and not an actor
//! A heartbeat is a hash lookup and a timestamp store: microseconds under a
//! `std::sync::Mutex`. An actor would add a channel send, a task switch and a reply channel
//! to each of the thousands of heartbeats per second, and every list would have to be copied
//! out of the actor instead of being built in place under the lock. The lock is never held
//! across an `.await`, so it cannot deadlock the runtime, and every critical section is short:
//! refreshes only mark the key dirty; structural changes (add, verify, de-list, remove, prune)
//! are one small SQLite transaction (WAL, `synchronous=NORMAL`: no fsync on commit). Faces are
//! one more task each holding a clone of the handle.
//!
//! # Durability contract
//! When a structural method returns `Ok`, the change is in the store, so the face may
//! acknowledge it. Refreshes (heartbeats, polls) are written by [`MasterHandle::flush`], which
//! [`crate::run`] calls every second and at shutdown.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::registry::{
    DelistOutcome, Outcome, PollInfo, PollOutcome, Record, Registration, Registry, RegistryConfig,
    ServerKey, Timestamp, VerifyOutcome,
};
use crate::store::{Storage, StoreError};

#[derive(Debug)]
struct State {
    registry: Registry,
    store: Box<dyn Storage>,
    dirty: HashSet<ServerKey>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    metrics: Metrics,
    /// Where faces mark records changed for the poller (set once, by [`crate::Master::run`]
    /// when the poller runs).
    changed: OnceLock<mpsc::Sender<ServerKey>>,
}

/// A cheap, cloneable handle on the shared registry. See the module docs.
#[derive(Debug, Clone)]
pub struct MasterHandle {
    inner: Arc<Inner>,
}

/// What [`MasterHandle::open`] found in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadReport {
    /// Records restored.
    pub restored: usize,
    /// Records that expired while the daemon was down.
    pub expired: usize,
    /// Connection-bound records (management face) dropped because their connection is gone.
    pub orphaned: usize,
}

impl MasterHandle {
    /// Loads the registry from `store`: connection-bound records (faces without a lifetime,
    /// i.e. the management server's) are deleted, since their connections died with the last
    /// run; the rest are restored in their list order and whatever expired by `now` is pruned
    /// from both registry and store.
    pub fn open(
        config: RegistryConfig,
        mut store: Box<dyn Storage>,
        now: Timestamp,
    ) -> Result<(Self, LoadReport), StoreError> {
        let mut registry = Registry::new(config);
        let mut recs = store.load()?;
        let (kept, orphans): (Vec<Record>, Vec<Record>) = recs
            .drain(..)
            .partition(|r| registry.config().face_lifetimes.contains_key(&r.face));
        let orphan_keys: Vec<ServerKey> = orphans.into_iter().map(|r| r.key).collect();
        store.delete_batch(&orphan_keys)?;
        let mut kept = kept;
        kept.sort_by(|a, b| {
            (
                a.first_verified.is_none(),
                a.first_verified,
                a.first_seen,
                &a.key,
            )
                .cmp(&(
                    b.first_verified.is_none(),
                    b.first_verified,
                    b.first_seen,
                    &b.key,
                ))
        });
        let loaded = kept.len();
        for r in kept {
            registry.restore(r);
        }
        let expired = registry.prune_before(now);
        store.delete_batch(&expired)?;
        let report = LoadReport {
            restored: loaded - expired.len(),
            expired: expired.len(),
            orphaned: orphan_keys.len(),
        };
        let handle = Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    registry,
                    store,
                    dirty: HashSet::new(),
                }),
                metrics: Metrics::default(),
                changed: OnceLock::new(),
            }),
        };
        Ok((handle, report))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The counters.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Connects the faces to a poller: [`MasterHandle::mark_changed`] sends to `tx` from now
    /// on (the sender of [`crate::poller::changed_channel`], whose receiver goes to
    /// [`crate::poller::PollerSettings::changed`]). Only the first call takes effect; returns
    /// whether this one did.
    pub fn set_changed_sender(&self, tx: mpsc::Sender<ServerKey>) -> bool {
        self.inner.changed.set(tx).is_ok()
    }

    /// Asks the poller to poll `key` soon, because the server said its state changed
    /// (GameSpy `\statechanged`, GameAgent `u`). Never waits: returns `false` when no poller
    /// is connected or its queue is full (counted as the drop `changed_queue_full`; the record
    /// is still polled at its regular time), so the face can fall back on its own check.
    pub fn mark_changed(&self, key: &ServerKey) -> bool {
        let Some(tx) = self.inner.changed.get() else {
            return false;
        };
        match tx.try_send(key.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.inner.metrics.count_drop("changed_queue_full");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Runs `f` on the registry under the lock (for lists). Keep `f` short: it blocks every
    /// face; never `.await` inside (the signature makes that impossible).
    pub fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        f(&self.lock().registry)
    }

    fn write_through(st: &mut State, key: &ServerKey) -> Result<(), StoreError> {
        let State {
            registry,
            store,
            dirty,
        } = st;
        let res = match registry.get(key) {
            Some(rec) => store.put(rec),
            None => store.delete(key),
        };
        match res {
            Ok(()) => {
                dirty.remove(key);
                Ok(())
            }
            Err(e) => {
                dirty.insert(key.clone());
                Err(e)
            }
        }
    }

    fn registered(
        &self,
        st: &mut State,
        key: &ServerKey,
        out: Outcome,
    ) -> Result<Outcome, StoreError> {
        match out {
            Outcome::Added => {
                if let Err(e) = Self::write_through(st, key) {
                    // Not acknowledged, so not kept: the face may retry.
                    st.registry.remove(key);
                    st.dirty.remove(key);
                    return Err(e);
                }
                self.inner.metrics.count_registration();
            }
            Outcome::Refreshed => {
                st.dirty.insert(key.clone());
            }
            Outcome::Rejected(r) => self.inner.metrics.count_drop(r.name()),
            Outcome::NotVerified => {}
        }
        Ok(out)
    }

    /// [`Registry::add`], written through when a record was added; rejections are counted as
    /// drops by reason.
    pub fn add(&self, reg: Registration, now: Timestamp) -> Result<Outcome, StoreError> {
        let mut st = self.lock();
        let key = reg.key.clone();
        let out = st.registry.add(reg, now);
        self.registered(&mut st, &key, out)
    }

    /// [`Registry::heartbeat`]: a refresh is only marked for the next flush (fast path);
    /// a record re-created by it is written through.
    pub fn heartbeat(&self, reg: Registration, now: Timestamp) -> Result<Outcome, StoreError> {
        let mut st = self.lock();
        let key = reg.key.clone();
        let out = st.registry.heartbeat(reg, now);
        self.registered(&mut st, &key, out)
    }

    /// [`Registry::verify`], written through.
    pub fn verify(&self, key: &ServerKey, now: Timestamp) -> Result<VerifyOutcome, StoreError> {
        let mut st = self.lock();
        let out = st.registry.verify(key, now);
        match out {
            VerifyOutcome::Verified => Self::write_through(&mut st, key)?,
            VerifyOutcome::AlreadyVerified => {
                st.dirty.insert(key.clone());
            }
            VerifyOutcome::Unknown => {}
        }
        Ok(out)
    }

    /// [`Registry::delist`], written through.
    pub fn delist(&self, key: &ServerKey) -> Result<DelistOutcome, StoreError> {
        let mut st = self.lock();
        let out = st.registry.delist(key);
        if out == DelistOutcome::Delisted {
            Self::write_through(&mut st, key)?;
        }
        Ok(out)
    }

    /// [`Registry::remove`], written through. Returns the removed record.
    pub fn remove(&self, key: &ServerKey) -> Result<Option<Record>, StoreError> {
        let mut st = self.lock();
        let out = st.registry.remove(key);
        if out.is_some() {
            Self::write_through(&mut st, key)?;
        }
        Ok(out)
    }

    /// [`Registry::update_poll`]; written at the next flush.
    pub fn update_poll(
        &self,
        key: &ServerKey,
        info: Option<PollInfo>,
        now: Timestamp,
    ) -> PollOutcome {
        let mut st = self.lock();
        let out = st.registry.update_poll(key, info, now);
        if out != PollOutcome::Unknown {
            st.dirty.insert(key.clone());
        }
        out
    }

    /// [`Registry::registration_info`]; written at the next flush.
    pub fn registration_info(&self, key: &ServerKey, info: PollInfo) -> bool {
        let mut st = self.lock();
        let stored = st.registry.registration_info(key, info);
        if stored {
            st.dirty.insert(key.clone());
        }
        stored
    }

    /// [`Registry::set_face_data`]; written at the next flush.
    pub fn set_face_data(&self, key: &ServerKey, data: Option<Arc<str>>) -> bool {
        let mut st = self.lock();
        let changed = st.registry.set_face_data(key, data);
        if changed {
            st.dirty.insert(key.clone());
        }
        changed
    }

    /// [`Registry::prune_before`], deletions written through (in one transaction). Each
    /// removal is counted as a drop with reason `expired`.
    pub fn prune(&self, now: Timestamp) -> Result<Vec<ServerKey>, StoreError> {
        let mut st = self.lock();
        let dead = st.registry.prune_before(now);
        if dead.is_empty() {
            return Ok(dead);
        }
        for k in &dead {
            st.dirty.remove(k);
            self.inner.metrics.count_drop("expired");
        }
        if let Err(e) = st.store.delete_batch(&dead) {
            st.dirty.extend(dead.iter().cloned());
            return Err(e);
        }
        Ok(dead)
    }

    /// Writes every refreshed record in one transaction; returns how many. On error they stay
    /// marked and the next flush tries again.
    pub fn flush(&self) -> Result<usize, StoreError> {
        let mut st = self.lock();
        if st.dirty.is_empty() {
            return Ok(0);
        }
        let State {
            registry,
            store,
            dirty,
        } = &mut *st;
        let mut gone = Vec::new();
        let mut recs = Vec::with_capacity(dirty.len());
        for k in dirty.iter() {
            match registry.get(k) {
                Some(r) => recs.push(r),
                None => gone.push(k.clone()),
            }
        }
        store.put_batch(&recs)?;
        store.delete_batch(&gone)?;
        let n = recs.len();
        dirty.clear();
        Ok(n)
    }

    /// Records waiting for the next flush.
    #[must_use]
    pub fn dirty(&self) -> usize {
        self.lock().dirty.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Face, GameAddr};
    use muster_proto::limit::SourceKey;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A store that records calls and can be told to fail.
    #[derive(Debug, Default)]
    struct Fake {
        rows: std::collections::BTreeMap<ServerKey, Record>,
        fail: Arc<AtomicBool>,
        batches: usize,
    }

    impl Fake {
        fn check(&self) -> Result<(), StoreError> {
            if self.fail.load(Ordering::Relaxed) {
                Err(StoreError::Db(rusqlite::Error::InvalidQuery))
            } else {
                Ok(())
            }
        }
    }

    impl Storage for Fake {
        fn load(&mut self) -> Result<Vec<Record>, StoreError> {
            Ok(self.rows.values().cloned().collect())
        }
        fn put(&mut self, rec: &Record) -> Result<(), StoreError> {
            self.check()?;
            self.rows.insert(rec.key.clone(), rec.clone());
            Ok(())
        }
        fn put_batch(&mut self, recs: &[&Record]) -> Result<(), StoreError> {
            self.check()?;
            self.batches += 1;
            for r in recs {
                self.rows.insert(r.key.clone(), (*r).clone());
            }
            Ok(())
        }
        fn delete(&mut self, key: &ServerKey) -> Result<(), StoreError> {
            self.check()?;
            self.rows.remove(key);
            Ok(())
        }
        fn delete_batch(&mut self, keys: &[ServerKey]) -> Result<(), StoreError> {
            self.check()?;
            for k in keys {
                self.rows.remove(k);
            }
            Ok(())
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

    fn open() -> (MasterHandle, Arc<AtomicBool>) {
        let fake = Fake::default();
        let fail = Arc::clone(&fake.fail);
        let (h, _) = MasterHandle::open(RegistryConfig::default(), Box::new(fake), T0).unwrap();
        (h, fail)
    }

    fn stored(h: &MasterHandle) -> Vec<Record> {
        h.lock().store.load().unwrap()
    }

    #[test]
    fn structural_changes_are_written_through_refreshes_batched() {
        let (h, _) = open();
        let r = reg(1);
        let key = r.key.clone();
        assert_eq!(h.add(r.clone(), T0).unwrap(), Outcome::Added);
        assert_eq!(stored(&h).len(), 1, "add written through");
        assert_eq!(h.verify(&key, T0).unwrap(), VerifyOutcome::Verified);
        assert_eq!(stored(&h)[0].state, crate::registry::Verification::Verified);
        assert_eq!(h.dirty(), 0);
        let later = Timestamp::from_secs(1_700_000_050);
        assert_eq!(h.heartbeat(r, later).unwrap(), Outcome::Refreshed);
        assert_eq!(h.dirty(), 1);
        assert_eq!(stored(&h)[0].last_heartbeat, T0, "refresh not written yet");
        assert_eq!(h.flush().unwrap(), 1);
        assert_eq!(stored(&h)[0].last_heartbeat, later);
        assert_eq!(h.flush().unwrap(), 0);
        assert_eq!(h.remove(&key).unwrap().map(|r| r.key), Some(key));
        assert!(stored(&h).is_empty());
        assert_eq!(h.metrics().registrations(), 1);
    }

    #[test]
    fn failed_add_is_not_kept_and_failed_flush_retries() {
        let (h, fail) = open();
        fail.store(true, Ordering::Relaxed);
        assert!(h.add(reg(1), T0).is_err());
        assert!(
            h.with_registry(Registry::is_empty),
            "not acknowledged, not kept"
        );
        fail.store(false, Ordering::Relaxed);
        let r = reg(2);
        h.add(r.clone(), T0).unwrap();
        h.verify(&r.key, T0).unwrap();
        h.heartbeat(r, Timestamp::from_secs(1_700_000_010)).unwrap();
        fail.store(true, Ordering::Relaxed);
        assert!(h.flush().is_err());
        assert_eq!(h.dirty(), 1, "kept for the next flush");
        fail.store(false, Ordering::Relaxed);
        assert_eq!(h.flush().unwrap(), 1);
    }

    #[test]
    fn prune_deletes_and_counts() {
        let (h, _) = open();
        let r = reg(1);
        h.add(r.clone(), T0).unwrap();
        h.update_poll(&r.key, None, T0);
        assert_eq!(
            h.prune(Timestamp::from_secs(1_700_000_030)).unwrap(),
            vec![r.key]
        );
        assert!(stored(&h).is_empty());
        assert_eq!(h.dirty(), 0);
        assert_eq!(h.metrics().drops("expired"), 1);
    }

    #[test]
    fn rejections_are_counted_by_reason() {
        let (h, _) = open();
        let mut r = reg(1);
        r.key.game = String::new();
        assert_eq!(
            h.add(r, T0).unwrap(),
            Outcome::Rejected(crate::registry::Reject::BadGame)
        );
        assert_eq!(h.metrics().drops("bad_game"), 1);
    }

    #[test]
    fn open_drops_orphans_and_expired() {
        let mut fake = Fake::default();
        let mut live = Record::new(reg(1), T0);
        live.state = crate::registry::Verification::Verified;
        live.first_verified = Some(T0);
        let old = Record::new(reg(2), Timestamp::from_secs(1));
        let mut orphan = Record::new(reg(3), T0);
        orphan.face = Face::Mgmt;
        for r in [&live, &old, &orphan] {
            fake.rows.insert(r.key.clone(), r.clone());
        }
        let (h, report) =
            MasterHandle::open(RegistryConfig::default(), Box::new(fake), T0).unwrap();
        assert_eq!(
            report,
            LoadReport {
                restored: 1,
                expired: 1,
                orphaned: 1
            }
        );
        assert_eq!(stored(&h), vec![live]);
    }
}
