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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
