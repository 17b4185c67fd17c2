//! Several instances on one PostgreSQL registry: remote changes in, instance liveness, poll
//! leases.
//!
//! ```text
//!  other instance's persister ─ commit + NOTIFY muster_changes ─┐
//!                                                               v
//!  listener (LISTEN, own connection) ── wake ──> sync: catch_up(after seq) every wake-up and
//!                                                 every CATCH_UP_INTERVAL
//!                                                   │ rows of other instances, in seq order
//!                                                   v
//!                           MasterHandle::write(Registry::apply_remote / remove_remote)
//!                             (view log: snapshots, lists, events; never dirty, so no echo)
//!  liveness: heartbeat row every HEARTBEAT_INTERVAL; janitor removes instances silent for
//!            LIVENESS with their management records and leases, purges old tombstones
//! ```
//!
//! The in-memory registry stays each instance's fast path (every list is served from it);
//! the database is the shared truth. A change made here reaches the others within the
//! persister's delay (20 ms for a registration, 1 s for a heartbeat) plus one round trip,
//! or at the latest at the next periodic catch-up.
//!
//! **Management records** are bound to a TCP connection held by one instance: that instance
//! writes them (their key's `instance` carries its node id in the database) and every instance
//! lists them. They leave when the owner unregisters them or its connection closes, when the
//! owner shuts down (its row is removed and the others' janitors delete its records at once),
//! or when it dies: once its heartbeat is [`ClusterSettings::liveness`] old.
//!
//! **Database outage**: writes fail and are retried by the persister, catch-ups fail; both
//! report through the handle's store error, so `/healthz` says `degraded` while every face
//! keeps serving the last known lists. When the database is back the persister writes what
//! waited and the catch-up resumes from the last sequence number it read (or reloads
//! everything when it fell behind the tombstone purge). An instance whose heartbeat row was
//! removed meanwhile registers it again and rewrites its management records.
//!
//! Does not: forward rate limits or challenges (they stay local to each instance), or elect a
//! leader (every instance runs the same idempotent housekeeping).

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::postgres::{NOTIFY_CHANNEL, PgShared, RemoteChange, owner_of};
use muster_core::MasterHandle;
use muster_core::poll::{ClaimFuture, LeaseClaim, PollLeases};
use muster_core::registry::{Face, GameAddr, ServerKey};
use muster_core::store::StoreError;

/// How often an instance refreshes its heartbeat row.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// An instance whose heartbeat is this old is dead: its management records are removed.
pub const LIVENESS: Duration = Duration::from_secs(10);
/// Changes are read at least this often, notifications or not.
pub const CATCH_UP_INTERVAL: Duration = Duration::from_secs(1);
/// How often each instance runs the shared housekeeping.
pub const JANITOR_INTERVAL: Duration = Duration::from_secs(5);

/// The cluster's timings (tests shorten them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSettings {
    /// [`HEARTBEAT_INTERVAL`].
    pub heartbeat: Duration,
    /// [`LIVENESS`].
    pub liveness: Duration,
    /// [`CATCH_UP_INTERVAL`].
    pub catch_up: Duration,
    /// [`JANITOR_INTERVAL`].
    pub janitor: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            heartbeat: HEARTBEAT_INTERVAL,
            liveness: LIVENESS,
            catch_up: CATCH_UP_INTERVAL,
            janitor: JANITOR_INTERVAL,
        }
    }
}

/// Starts the cluster tasks of `shared` (on its database runtime) until `stop` is cancelled:
/// the listener, the catch-up and the heartbeat with housekeeping. The returned token is
/// cancelled when all of them ended.
pub fn spawn(
    shared: Arc<PgShared>,
    handle: MasterHandle,
    settings: ClusterSettings,
    stop: CancellationToken,
) -> CancellationToken {
    let done = CancellationToken::new();
    let wake = Arc::new(Notify::new());
    let rt = shared.runtime().clone();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn_on(
        listen(Arc::clone(&shared), Arc::clone(&wake), stop.clone()),
        &rt,
    );
    tasks.spawn_on(
        sync(
            Arc::clone(&shared),
            handle.clone(),
            Arc::clone(&wake),
            settings,
            stop.clone(),
        ),
        &rt,
    );
    tasks.spawn_on(liveness(shared, handle, settings, stop), &rt);
    let d = done.clone();
    rt.spawn(async move {
        while tasks.join_next().await.is_some() {}
        d.cancel();
    });
    done
}

/// Removes this instance's row and leases (clean shutdown), waiting at most 2 s.
pub fn deregister(shared: &Arc<PgShared>) {
    let s = Arc::clone(shared);
    let r = shared.block(async move {
        tokio::time::timeout(Duration::from_secs(2), s.deregister())
            .await
            .unwrap_or(Err(StoreError::Timeout))
    });
    if let Ok(Err(e)) | Err(e) = r {
        tracing::warn!(error = %muster_proto::errors::error_chain(&e), "could not remove this instance from the database");
    }
}

/// LISTENs on its own connection and wakes the catch-up for other instances' commits;
/// reconnects with a backoff and wakes the catch-up after each reconnection.
async fn listen(shared: Arc<PgShared>, wake: Arc<Notify>, stop: CancellationToken) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let conn = tokio::select! {
            () = stop.cancelled() => return,
            c = shared.listener() => c,
        };
        let (client, mut rx) = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %muster_proto::errors::error_chain(&e), "listener cannot connect");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = client
            .batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))
            .await
        {
            tracing::debug!(error = %e, "LISTEN failed");
            continue;
        }
        backoff = Duration::from_millis(100);
        // Whatever was committed while the listener was away.
        wake.notify_one();
        let me = shared.node().to_string();
        loop {
            let msg = tokio::select! {
                () = stop.cancelled() => return,
                m = rx.recv() => m,
            };
            match msg {
                Some(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if n.payload() != me {
                        wake.notify_one();
                    }
                }
                Some(_) => {}
                None => break,
            }
        }
        drop(client);
        tracing::debug!("listener connection closed; reconnecting");
    }
}

/// Applies other instances' changes: the live management records first, then every change
/// after the loaded sequence number, at each wake-up and every `settings.catch_up`.
async fn sync(
    shared: Arc<PgShared>,
    handle: MasterHandle,
    wake: Arc<Notify>,
    settings: ClusterSettings,
    stop: CancellationToken,
) {
    let mut after = shared.loaded_seq();
    let mut started = false;
    let mut tick = tokio::time::interval(settings.catch_up);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
            () = wake.notified() => {}
        }
        if !started {
            // Management records of live instances are not restored at load (they are
            // connection-bound); they arrive here.
            match shared.snapshot_all(true).await {
                Ok((records, _)) => {
                    let me = shared.node();
                    let mgmt = records
                        .into_iter()
                        .filter(|r| r.face == Face::Mgmt && owner_of(r.key.instance) != me)
                        .map(|r| RemoteChange::Put(Box::new(r)))
                        .collect();
                    apply(&handle, me, mgmt);
                    started = true;
                }
                Err(e) => {
                    handle.note_store_error(&e);
                    continue;
                }
            }
        }
        loop {
            match shared.catch_up(after).await {
                Ok(page) if page.reload => match reload(&shared, &handle).await {
                    Ok(seq) => after = seq,
                    Err(e) => {
                        handle.note_store_error(&e);
                        break;
                    }
                },
                Ok(page) => {
                    after = page.next;
                    if page.skipped > 0 {
                        tracing::warn!(
                            skipped = page.skipped,
                            reason = shared.take_skip_reason().unwrap_or_default(),
                            "rows from other instances this build cannot read were skipped"
                        );
                    }
                    apply(&handle, shared.node(), page.changes);
                    if !page.more {
                        healthy(&handle);
                        break;
                    }
                }
                Err(e) => {
                    handle.note_store_error(&e);
                    break;
                }
            }
        }
    }
}

/// The database answered: clear a reported failure unless writes still wait (the persister
/// clears it when they succeed).
fn healthy(handle: &MasterHandle) {
    if handle.dirty() == 0 {
        handle.note_store_ok();
    }
}

/// Applies remote changes in one registry write; returns how many changed something. A
/// management record of this instance's own (changed by another instance's janitor) is
/// left alone: its connection is here.
fn apply(handle: &MasterHandle, me: i64, changes: Vec<RemoteChange>) -> usize {
    if changes.is_empty() {
        return 0;
    }
    let mine = |k: &ServerKey| k.instance >= 1 << 32 && owner_of(k.instance) == me;
    handle.write(|r| {
        let mut n = 0;
        for c in changes {
            let changed = match c {
                RemoteChange::Put(rec) if !mine(&rec.key) => r.apply_remote(*rec),
                RemoteChange::Delete(k) if !mine(&k) => r.remove_remote(&k),
                _ => false,
            };
            n += usize::from(changed);
        }
        n
    })
}

/// Loads every live record and makes the registry match (records this instance has not
/// written yet, and its own connections' records, stay). Returns the sequence number the
/// load is current to.
async fn reload(shared: &PgShared, handle: &MasterHandle) -> Result<i64, StoreError> {
    let (records, seq) = shared.snapshot_all(false).await?;
    tracing::info!(
        n = records.len(),
        "fell behind the purge of deleted rows; reloaded the registry"
    );
    let me = shared.node();
    let keys: HashSet<ServerKey> = records.iter().map(|r| r.key.clone()).collect();
    let changes = records
        .into_iter()
        .map(|r| RemoteChange::Put(Box::new(r)))
        .collect();
    apply(handle, me, changes);
    handle.write(|r| {
        let gone: Vec<ServerKey> = r
            .iter()
            .filter(|rec| {
                let local_conn = rec.key.instance != 0 && rec.key.instance < 1 << 32;
                !local_conn && !keys.contains(&rec.key)
            })
            .map(|rec| rec.key.clone())
            .collect();
        for k in gone {
            r.remove_remote(&k);
        }
    });
    Ok(seq)
}

/// The heartbeat row and the shared housekeeping.
async fn liveness(
    shared: Arc<PgShared>,
    handle: MasterHandle,
    settings: ClusterSettings,
    stop: CancellationToken,
) {
    let mut beat = tokio::time::interval(settings.heartbeat);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut janitor = tokio::time::interval(settings.janitor);
    janitor.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = beat.tick() => match shared.heartbeat().await {
                Ok(true) => healthy(&handle),
                Ok(false) => {
                    // Taken for dead while the database was out of reach: come back under the
                    // same node id and write this instance's management records again.
                    if shared.register_instance(Some(shared.node())).await.is_ok() {
                        let n = handle.write(|r| {
                            let keys: Vec<ServerKey> = r
                                .iter()
                                .filter(|rec| rec.face == Face::Mgmt)
                                .map(|rec| rec.key.clone())
                                .collect();
                            let n = keys.len();
                            r.mark_dirty(keys);
                            n
                        });
                        tracing::warn!(management_records = n, "this instance was taken for dead; registered again");
                    }
                }
                Err(e) => handle.note_store_error(&e),
            },
            _ = janitor.tick() => match shared.janitor(settings.liveness).await {
                Ok(n) if n > 0 => tracing::info!(n, "removed the management records of stopped instances"),
                Ok(_) => {}
                Err(e) => handle.note_store_error(&e),
            },
        }
    }
}

/// The lease key of a record: game, address kind, address and instance.
#[must_use]
pub fn lease_key(key: &ServerKey) -> String {
    let kind = match key.addr {
        GameAddr::Ip(_) => "ip",
        GameAddr::Host { .. } => "host",
    };
    format!("{}|{kind}|{}|{}", key.game, key.addr, key.instance)
}

/// [`PollLeases`] in the shared database.
#[derive(Debug)]
pub struct PgLeases {
    shared: Arc<PgShared>,
}

impl PgLeases {
    /// Leases in `shared`'s database.
    #[must_use]
    pub fn new(shared: Arc<PgShared>) -> Self {
        Self { shared }
    }
}

impl PollLeases for PgLeases {
    fn claim(&self, keys: Vec<ServerKey>, lease: Duration) -> ClaimFuture {
        let shared = Arc::clone(&self.shared);
        let task = self.shared.runtime().spawn(async move {
            let by_skey: HashMap<String, ServerKey> =
                keys.into_iter().map(|k| (lease_key(&k), k)).collect();
            let skeys = by_skey.keys().cloned().collect();
            let (granted, held) = tokio::time::timeout(
                crate::postgres::OP_TIMEOUT,
                shared.claim_leases(skeys, lease),
            )
            .await
            .unwrap_or(Err(StoreError::Timeout))?;
            Ok(LeaseClaim {
                granted: granted
                    .iter()
                    .filter_map(|s| by_skey.get(s).cloned())
                    .collect(),
                held: held
                    .into_iter()
                    .filter_map(|(s, d)| Some((by_skey.get(&s)?.clone(), d)))
                    .collect(),
            })
        });
        Box::pin(async move { task.await.unwrap_or(Err(StoreError::Timeout)) })
    }
}
