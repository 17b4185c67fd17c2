//! [`Store`] in PostgreSQL, shared by several `muster serve` instances.
//!
//! ```text
//!  persister ─ write(puts, deletes) ─> one transaction: advisory write lock, upserts and
//!                                      tombstones stamped with the next `seq` and this
//!                                      instance's node id, pg_notify('muster_changes')
//!  cluster   ─ catch_up(after seq)  ─> rows with seq > after, in seq order (other instances'
//!                                      changes) ─> Registry::apply_remote / remove_remote
//! ```
//!
//! * **One change sequence.** Every write stamps its rows with `nextval('servers_seq')` while
//!   holding one transaction-scoped advisory lock, so rows commit in `seq` order and a reader
//!   that saw every row up to `seq` N never misses a later commit with a smaller number. A
//!   deletion is a tombstone (`deleted = true`, new `seq`), purged after
//!   [`TOMBSTONE_RETENTION`]; an instance that fell behind the purge reloads everything.
//! * **Merging.** Two instances may write one record (a server heartbeating both): the row
//!   keeps the later heartbeat and proof times, the earlier first-seen time, and the poll
//!   result with the later successful poll; the rest is the last writer's.
//! * **Management records** are keyed by their connection id, which is only unique inside one
//!   process: in the database the owning instance's node id fills the key's upper 32 bits
//!   ([`shared_instance`]), so records of two instances never collide, and an instance whose
//!   heartbeat stops has its management records removed by the others.
//! * **Schema**: versioned migrations in `store/migrations/postgres/`, applied at start under
//!   an advisory lock (two instances starting together migrate once), recorded in
//!   `muster_schema`; a database of a newer version than this build knows is refused.
//!
//! All database work runs on a small runtime of its own (one worker thread), so the blocking
//! [`Store`] methods can be called from anywhere, the daemon's runtime threads included, and
//! the cluster tasks ([`crate::cluster`]) keep running while the daemon's runtime is busy.
//!
//! TLS: only when the URL asks for it (`sslmode=require`, `verify-ca` or `verify-full`), with
//! rustls; the server certificate is always verified, against the Mozilla roots or the CA file
//! given as `sslrootcert=PATH`.
//!
//! Does not: decide anything about records (the registry does), create the database itself
//! (the URL names an existing one), or keep history (the history store of `muster-http` keeps
//! its own tables in the same database, through [`PgShared::client`]).

use std::future::Future;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
/// The client library, for other crates' tables in the same database (the history).
pub use tokio_postgres;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row as PgRow};

use crate::sqlite::Row;
use muster_core::registry::{GameAddr, Record, ServerKey, Timestamp};
use muster_core::store::{Loaded, Store, StoreError};

/// The channel writers notify after each committed batch (payload: the writer's node id).
pub const NOTIFY_CHANNEL: &str = "muster_changes";
/// The schema version this build writes and reads.
pub const PG_SCHEMA_VERSION: i32 = 3;
/// Tombstones (deleted rows) are kept this long, so that instances catch up on deletions.
pub const TOMBSTONE_RETENTION: Duration = Duration::from_secs(3600);
/// One database operation (a batch, a catch-up page) fails after this long.
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Rows per statement when writing.
const WRITE_CHUNK: usize = 2000;
/// Rows read per catch-up page.
pub const CATCH_UP_PAGE: i64 = 5000;
/// Reasons kept in [`Loaded::skipped_reasons`] at most.
const MAX_REASONS: usize = 100;

/// The origin of the janitor's deletions: not a node id, so that every instance applies them.
const JANITOR_ORIGIN: i64 = 0;
/// Advisory lock keys ("mstr" + a number): every write batch, and the migrations.
const WRITE_LOCK: i64 = 0x6d73_7472_0000_0001;
const MIGRATE_LOCK: i64 = 0x6d73_7472_0000_0002;

/// Migrations in order: (version, name, SQL).
const MIGRATIONS: [(i32, &str, &str); 3] = [
    (
        1,
        "servers",
        include_str!("migrations/postgres/0001_servers.sql"),
    ),
    (
        2,
        "cluster",
        include_str!("migrations/postgres/0002_cluster.sql"),
    ),
    (
        3,
        "sources",
        include_str!("migrations/postgres/0003_sources.sql"),
    ),
];

const COLUMNS: &str = "game, addr_kind, addr_host, addr_port, instance, face, game_port,
    query_addr, query_protocol, state, first_seen, last_heartbeat, first_verified,
    last_poll_ok, poll_failures, source, info, face_data, last_proof, ddnet, sources";

/// Keep the stored poll result when it is from a later poll than the incoming one.
const KEEP_POLL: &str = "(NOT s.deleted AND s.last_poll_ok IS NOT NULL
    AND (excluded.last_poll_ok IS NULL OR s.last_poll_ok > excluded.last_poll_ok))";

fn upsert_sql() -> String {
    format!(
        "INSERT INTO servers AS s (game, addr_kind, addr_host, addr_port, instance, face,
        game_port, query_addr, query_protocol, state, first_seen, last_heartbeat,
        first_verified, last_poll_ok, poll_failures, source, info, face_data, last_proof,
        ddnet, sources, seq, origin, deleted, changed_at)
    SELECT u.game, u.kind, u.host, u.port, u.instance, u.face, u.game_port, u.query_addr,
        u.query_protocol, u.state, u.first_seen, u.last_heartbeat, u.first_seen,
        u.last_poll_ok, u.poll_failures, u.source, u.info, NULL, u.last_proof, u.ddnet,
        u.sources, nextval('servers_seq'), $19, false, now()
    FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int8[], $6::text[],
        $7::int4[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::int8[],
        $13::int8[], $14::int8[], $15::text[], $16::text[], $17::int8[], $18::text[],
        $20::text[])
        AS u(game, kind, host, port, instance, face, game_port, query_addr, query_protocol,
        state, first_seen, last_heartbeat, last_poll_ok, poll_failures, source, info,
        last_proof, ddnet, sources)
    ON CONFLICT (game, addr_kind, addr_host, addr_port, instance) DO UPDATE SET
        face = excluded.face, game_port = excluded.game_port,
        query_addr = excluded.query_addr, query_protocol = excluded.query_protocol,
        state = excluded.state,
        first_seen = CASE WHEN s.deleted THEN excluded.first_seen
            ELSE LEAST(s.first_seen, excluded.first_seen) END,
        first_verified = CASE WHEN s.deleted THEN excluded.first_seen
            ELSE LEAST(s.first_seen, excluded.first_seen) END,
        last_heartbeat = CASE WHEN s.deleted THEN excluded.last_heartbeat
            ELSE GREATEST(s.last_heartbeat, excluded.last_heartbeat) END,
        last_proof = CASE WHEN s.deleted THEN excluded.last_proof
            ELSE GREATEST(s.last_proof, excluded.last_proof) END,
        last_poll_ok = CASE WHEN {KEEP_POLL} THEN s.last_poll_ok ELSE excluded.last_poll_ok END,
        poll_failures = CASE WHEN {KEEP_POLL} THEN s.poll_failures
            ELSE excluded.poll_failures END,
        info = CASE WHEN {KEEP_POLL} THEN s.info ELSE excluded.info END,
        source = excluded.source, face_data = NULL, ddnet = excluded.ddnet,
        sources = excluded.sources,
        seq = excluded.seq, origin = excluded.origin, deleted = false, changed_at = now()"
    )
}

const DELETE_SQL: &str = "UPDATE servers SET deleted = true, seq = nextval('servers_seq'),
    origin = $6, changed_at = now()
    WHERE (game, addr_kind, addr_host, addr_port, instance) IN
        (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int8[]))
    AND NOT deleted";

/// The key's `instance` as stored: a management connection id (below 2^32) gets `node` in
/// its upper 32 bits; 0 and already-shared values are kept. See the module docs.
#[must_use]
pub fn shared_instance(node: i64, instance: u64) -> i64 {
    if instance == 0 || instance >= 1 << 32 {
        i64::try_from(instance).unwrap_or(i64::MAX)
    } else {
        (node << 32) | i64::try_from(instance).unwrap_or(0)
    }
}

/// The node id of the instance owning a stored management key (`instance >> 32`).
#[must_use]
pub fn owner_of(instance: u64) -> i64 {
    i64::try_from(instance >> 32).unwrap_or(0)
}

/// A PostgreSQL URL with its password replaced by `***`, for messages.
#[must_use]
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "postgres://(unparsable)".to_owned(),
    }
}

/// The database runtime; shut down without waiting when dropped (also from async code) or
/// halted.
#[derive(Debug)]
struct Rt {
    rt: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
}

impl Rt {
    fn halt(&self) {
        let rt = self
            .rt
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(rt) = rt {
            rt.shutdown_background();
        }
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        self.halt();
    }
}

/// How connections are made (plain, or rustls).
#[derive(Clone)]
enum Tls {
    None,
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "plain",
            Self::Rustls(_) => "rustls",
        })
    }
}

/// One row read by [`PgShared::catch_up`].
#[derive(Debug)]
pub enum RemoteChange {
    /// A record another instance wrote.
    Put(Box<Record>),
    /// A record another instance removed.
    Delete(ServerKey),
}

/// What [`PgShared::catch_up`] read.
#[derive(Debug, Default)]
pub struct CatchUp {
    /// Changes by other instances, in sequence order.
    pub changes: Vec<RemoteChange>,
    /// The sequence number to read after next time.
    pub next: i64,
    /// Rows that could not be read (skipped).
    pub skipped: usize,
    /// Whether the page was full (more may follow at once).
    pub more: bool,
    /// Whether the reader fell behind the tombstone purge and must reload everything.
    pub reload: bool,
}

/// The connection to one database, shared by the store, the cluster tasks and the poll
/// leases of one instance.
#[derive(Debug)]
pub struct PgShared {
    rt: Rt,
    pool: Pool,
    config: tokio_postgres::Config,
    tls: Tls,
    node: AtomicI64,
    name: String,
    location: String,
    /// The sequence number the load read up to.
    loaded_seq: AtomicI64,
    /// Records whose rows could not be read during catch-up (for logs).
    last_skip: Mutex<Option<String>>,
}

fn pg_err(at: &str) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
    move |source| StoreError::Postgres {
        at: at.to_owned(),
        source: source.into(),
    }
}

impl PgShared {
    /// Connects to `url` (checking it, making the schema current) and registers this instance
    /// (`name` is shown in the `instances` table). Blocks until done.
    pub fn connect(url: &str, name: &str) -> Result<Arc<Self>, StoreError> {
        let location = redact(url);
        let bad = |why: &'static str| StoreError::Url {
            url: location.clone(),
            why,
        };
        let (config, tls) = parse_url(url).map_err(bad)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("muster-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::DataDir(std::path::PathBuf::from(&location), e))?;
        let manager = match &tls {
            Tls::None => Manager::from_config(config.clone(), NoTls, manager_config()),
            Tls::Rustls(t) => Manager::from_config(config.clone(), t.clone(), manager_config()),
        };
        let pool = {
            let _guard = rt.enter();
            Pool::builder(manager)
                .max_size(8)
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(Duration::from_secs(5)))
                .create_timeout(Some(Duration::from_secs(5)))
                .recycle_timeout(Some(Duration::from_secs(5)))
                .build()
                .map_err(|_| bad("the connection pool could not be built"))?
        };
        let handle = rt.handle().clone();
        let shared = Arc::new(Self {
            rt: Rt {
                rt: Mutex::new(Some(rt)),
                handle,
            },
            pool,
            config,
            tls,
            node: AtomicI64::new(0),
            name: name.to_owned(),
            location,
            loaded_seq: AtomicI64::new(0),
            last_skip: Mutex::new(None),
        });
        let s = Arc::clone(&shared);
        shared.block(async move { s.migrate().await })??;
        let s = Arc::clone(&shared);
        let node = shared.block(async move { s.register_instance(None).await })??;
        shared.node.store(node, Ordering::Relaxed);
        Ok(shared)
    }

    /// This instance's node id (new at every start).
    #[must_use]
    pub fn node(&self) -> i64 {
        self.node.load(Ordering::Relaxed)
    }

    /// Where the database is (the URL without its password).
    #[must_use]
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The sequence number the last [`Store::load`] read up to.
    #[must_use]
    pub fn loaded_seq(&self) -> i64 {
        self.loaded_seq.load(Ordering::Relaxed)
    }

    /// The runtime the database work runs on (the cluster tasks are spawned here). After
    /// [`PgShared::halt`], tasks spawned on it are dropped at once.
    #[must_use]
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.rt.handle
    }

    /// Stops every database task and connection of this instance at once, without a last
    /// write or a goodbye: what `kill -9` does to the process (for tests that run several
    /// instances in one process). Every later store call fails.
    pub fn halt(&self) {
        self.rt.halt();
    }

    /// Runs `fut` on the database runtime and waits for it (from any thread).
    pub fn block<F, T>(&self, fut: F) -> Result<T, StoreError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime().spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| StoreError::Timeout)
    }

    fn err(&self) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
        pg_err(&self.location)
    }

    /// A pooled connection.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|source| StoreError::PostgresPool {
                at: self.location.clone(),
                source: source.into(),
            })
    }

    /// A connection of its own (not pooled) whose notifications arrive on the receiver; the
    /// receiver ends when the connection does.
    pub async fn listener(
        &self,
    ) -> Result<(Client, tokio::sync::mpsc::UnboundedReceiver<AsyncMessage>), StoreError> {
        match &self.tls {
            Tls::None => listen_on(&self.config, NoTls, &self.location).await,
            Tls::Rustls(t) => listen_on(&self.config, t.clone(), &self.location).await,
        }
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        let e = self.err();
        let tx = c.transaction().await.map_err(&e)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
            .await
            .map_err(&e)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS muster_schema (version INTEGER PRIMARY KEY,
             name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        )
        .await
        .map_err(&e)?;
        let have: i32 = tx
            .query_one("SELECT coalesce(max(version), 0) FROM muster_schema", &[])
            .await
            .map_err(&e)?
            .get(0);
        if have > PG_SCHEMA_VERSION {
            return Err(StoreError::Schema(
                std::path::PathBuf::from(&self.location),
                i64::from(have),
            ));
        }
        for (version, name, sql) in MIGRATIONS {
            if version <= have {
                continue;
            }
            tx.batch_execute(sql).await.map_err(&e)?;
            tx.execute(
                "INSERT INTO muster_schema (version, name) VALUES ($1, $2)",
                &[&version, &name],
            )
            .await
            .map_err(&e)?;
            tracing::info!(version, name, "database migrated");
        }
        tx.commit().await.map_err(&e)
    }

    /// Inserts this instance's row (with `node` when given: a row the others removed while
    /// this instance could not reach the database) and returns its node id.
    pub async fn register_instance(&self, node: Option<i64>) -> Result<i64, StoreError> {
        let c = self.client().await?;
        let e = self.err();
        let row = match node {
            Some(n) => c
                .query_one(
                    "INSERT INTO instances (node, name) VALUES ($1, $2)
                     ON CONFLICT (node) DO UPDATE SET heartbeat_at = now() RETURNING node",
                    &[&n, &self.name],
                )
                .await
                .map_err(&e)?,
            None => c
                .query_one(
                    "INSERT INTO instances (name) VALUES ($1) RETURNING node",
                    &[&self.name],
                )
                .await
                .map_err(&e)?,
        };
        Ok(row.get(0))
    }

    /// Refreshes this instance's heartbeat; `false` when its row is gone (the others took it
    /// for dead: re-register and write the management records again).
    pub async fn heartbeat(&self) -> Result<bool, StoreError> {
        let c = self.client().await?;
        let n = c
            .execute(
                "UPDATE instances SET heartbeat_at = now() WHERE node = $1",
                &[&self.node()],
            )
            .await
            .map_err(self.err())?;
        Ok(n == 1)
    }

    /// Removes this instance's row (clean shutdown: the others drop its management records
    /// and leases at once instead of after the liveness timeout).
    pub async fn deregister(&self) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.execute("DELETE FROM poll_leases WHERE holder = $1", &[&self.node()])
            .await
            .map_err(self.err())?;
        c.execute("DELETE FROM instances WHERE node = $1", &[&self.node()])
            .await
            .map_err(self.err())?;
        Ok(())
    }

    /// Housekeeping any instance may do: instances silent for `liveness` are removed with
    /// their management records and leases, and tombstones older than
    /// [`TOMBSTONE_RETENTION`] are purged. Returns the management records removed.
    pub async fn janitor(&self, liveness: Duration) -> Result<u64, StoreError> {
        let mut c = self.client().await?;
        let e = self.err();
        let secs = liveness.as_secs_f64();
        let tx = c.transaction().await.map_err(&e)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
            .await
            .map_err(&e)?;
        tx.execute(
            "DELETE FROM instances WHERE heartbeat_at < now() - make_interval(secs => $1)",
            &[&secs],
        )
        .await
        .map_err(&e)?;
        let removed = tx
            .execute(
                "UPDATE servers SET deleted = true, seq = nextval('servers_seq'), origin = $1,
                 changed_at = now()
                 WHERE face = 'mgmt' AND NOT deleted
                 AND (instance >> 32) NOT IN (SELECT node FROM instances)",
                // No instance's origin: every instance, this one included, applies these.
                &[&JANITOR_ORIGIN],
            )
            .await
            .map_err(&e)?;
        tx.execute(
            "DELETE FROM poll_leases WHERE holder NOT IN (SELECT node FROM instances)",
            &[],
        )
        .await
        .map_err(&e)?;
        let retention = TOMBSTONE_RETENTION.as_secs_f64();
        let purged: Option<i64> = tx
            .query_one(
                "WITH gone AS (DELETE FROM servers WHERE deleted
                     AND changed_at < now() - make_interval(secs => $1) RETURNING seq)
                 SELECT max(seq) FROM gone",
                &[&retention],
            )
            .await
            .map_err(&e)?
            .get(0);
        if let Some(p) = purged {
            tx.execute(
                "UPDATE meta SET v = GREATEST(v, $1) WHERE k = 'purged_through'",
                &[&p],
            )
            .await
            .map_err(&e)?;
        }
        if removed > 0 {
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&NOTIFY_CHANNEL, &self.node().to_string()],
            )
            .await
            .map_err(&e)?;
        }
        tx.commit().await.map_err(&e)?;
        Ok(removed)
    }

    /// Changes written by other instances after sequence number `after` (at most
    /// [`CATCH_UP_PAGE`] rows).
    pub async fn catch_up(&self, after: i64) -> Result<CatchUp, StoreError> {
        let c = self.client().await?;
        let e = self.err();
        let purged: i64 = c
            .query_one("SELECT v FROM meta WHERE k = 'purged_through'", &[])
            .await
            .map_err(&e)?
            .get(0);
        if after < purged {
            return Ok(CatchUp {
                next: after,
                reload: true,
                ..CatchUp::default()
            });
        }
        let sql = format!(
            "SELECT {COLUMNS}, seq, origin, deleted FROM servers WHERE seq > $1
             ORDER BY seq LIMIT $2"
        );
        let rows = c.query(&sql, &[&after, &CATCH_UP_PAGE]).await.map_err(&e)?;
        let mut out = CatchUp {
            next: after,
            more: rows.len() as i64 >= CATCH_UP_PAGE,
            ..CatchUp::default()
        };
        let me = self.node();
        for r in &rows {
            let seq: i64 = r.get("seq");
            out.next = out.next.max(seq);
            let origin: i64 = r.get("origin");
            if origin == me {
                continue;
            }
            let deleted: bool = r.get("deleted");
            match read_row(r).and_then(|row| {
                if deleted {
                    row_key(&row).map(RemoteChange::Delete)
                } else {
                    row.into_record()
                        .map(|rec| RemoteChange::Put(Box::new(rec)))
                }
            }) {
                Ok(ch) => out.changes.push(ch),
                Err(why) => {
                    out.skipped += 1;
                    *self
                        .last_skip
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(why);
                }
            }
        }
        Ok(out)
    }

    /// Every live record (management records of live instances included; with `mgmt_only`
    /// only those) and the sequence number they are current to: the management records at
    /// start, everything for an instance that fell behind the tombstone purge.
    pub async fn snapshot_all(&self, mgmt_only: bool) -> Result<(Vec<Record>, i64), StoreError> {
        let live_mgmt = "face = 'mgmt' AND (instance >> 32) IN (SELECT node FROM instances)";
        let filter = if mgmt_only {
            live_mgmt.to_owned()
        } else {
            format!("(face <> 'mgmt' OR ({live_mgmt}))")
        };
        let (rows, seq) = self.consistent_rows(&filter).await?;
        let mut recs = Vec::with_capacity(rows.len());
        let (mut skipped, mut reason) = (0_usize, None);
        for r in &rows {
            match read_row(r).and_then(Row::into_record) {
                Ok(rec) => recs.push(rec),
                Err(why) => {
                    skipped += 1;
                    reason.get_or_insert(why);
                }
            }
        }
        // Said once per read, as a catch-up's unreadable rows are: never dropped silently.
        if let Some(reason) = reason {
            tracing::warn!(
                skipped,
                reason,
                "shared records this build cannot read were skipped"
            );
        }
        Ok((recs, seq))
    }

    /// The live rows matching `filter` (SQL over the `servers` columns) and the sequence
    /// number they are current to, read in one repeatable-read transaction.
    async fn consistent_rows(&self, filter: &str) -> Result<(Vec<PgRow>, i64), StoreError> {
        let mut c = self.client().await?;
        let e = self.err();
        let tx = c
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(&e)?;
        let seq: i64 = tx
            .query_one("SELECT coalesce(max(seq), 0) FROM servers", &[])
            .await
            .map_err(&e)?
            .get(0);
        let sql = format!("SELECT {COLUMNS} FROM servers WHERE NOT deleted AND {filter}");
        let rows = tx.query(&sql, &[]).await.map_err(&e)?;
        tx.commit().await.map_err(&e)?;
        Ok((rows, seq))
    }

    /// The last reason a row could not be read during catch-up, once.
    pub fn take_skip_reason(&self) -> Option<String> {
        self.last_skip
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    async fn load_rows(&self) -> Result<(Loaded, i64), StoreError> {
        // Management records are connection-bound: the live instances' ones arrive through
        // the cluster's first catch-up, not as records to restore.
        let (rows, seq) = self.consistent_rows("face <> 'mgmt'").await?;
        let mut out = Loaded::default();
        for r in &rows {
            match read_row(r).and_then(Row::into_record) {
                Ok(rec) => out.records.push(rec),
                Err(why) => {
                    out.skipped += 1;
                    if out.skipped_reasons.len() < MAX_REASONS {
                        out.skipped_reasons.push(why);
                    }
                }
            }
        }
        Ok((out, seq))
    }

    async fn write_rows(
        &self,
        puts: Vec<Arc<Record>>,
        deletes: Vec<ServerKey>,
    ) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        let e = self.err();
        let node = self.node();
        let tx = c.transaction().await.map_err(&e)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
            .await
            .map_err(&e)?;
        let upsert = tx.prepare_cached(&upsert_sql()).await.map_err(&e)?;
        for chunk in puts.chunks(WRITE_CHUNK) {
            let cols = PutColumns::of(chunk, node)?;
            tx.execute(
                &upsert,
                &[
                    &cols.game,
                    &cols.kind,
                    &cols.host,
                    &cols.port,
                    &cols.instance,
                    &cols.face,
                    &cols.game_port,
                    &cols.query_addr,
                    &cols.query_protocol,
                    &cols.state,
                    &cols.first_seen,
                    &cols.last_heartbeat,
                    &cols.last_poll_ok,
                    &cols.poll_failures,
                    &cols.source,
                    &cols.info,
                    &cols.last_proof,
                    &cols.ddnet,
                    &node,
                    &cols.sources,
                ],
            )
            .await
            .map_err(&e)?;
        }
        for chunk in deletes.chunks(WRITE_CHUNK) {
            let mut game = Vec::with_capacity(chunk.len());
            let mut kind = Vec::with_capacity(chunk.len());
            let mut host = Vec::with_capacity(chunk.len());
            let mut port = Vec::with_capacity(chunk.len());
            let mut instance = Vec::with_capacity(chunk.len());
            for k in chunk {
                let (kd, h, p) = addr_cols(&k.addr);
                game.push(k.game.as_str());
                kind.push(kd);
                host.push(h);
                port.push(i32::from(p));
                instance.push(shared_instance(node, k.instance));
            }
            tx.execute(DELETE_SQL, &[&game, &kind, &host, &port, &instance, &node])
                .await
                .map_err(&e)?;
        }
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&NOTIFY_CHANNEL, &node.to_string()],
        )
        .await
        .map_err(&e)?;
        tx.commit().await.map_err(&e)
    }

    /// Claims the poll leases of `skeys` for `lease`: granted when free, expired or already
    /// this instance's. Returns the granted keys and, for the others, how long their holder
    /// still has them.
    pub async fn claim_leases(
        &self,
        skeys: Vec<String>,
        lease: Duration,
    ) -> Result<(Vec<String>, Vec<(String, Duration)>), StoreError> {
        let c = self.client().await?;
        let e = self.err();
        let secs = lease.as_secs_f64();
        let rows = c
            .query(
                "WITH want AS (SELECT unnest($1::text[]) AS skey),
                 won AS (
                     INSERT INTO poll_leases (skey, holder, until)
                     SELECT skey, $2, now() + make_interval(secs => $3) FROM want
                     ON CONFLICT (skey) DO UPDATE SET holder = excluded.holder,
                         until = excluded.until
                     WHERE poll_leases.until < now() OR poll_leases.holder = excluded.holder
                     RETURNING skey)
                 SELECT w.skey, (won.skey IS NOT NULL) AS granted,
                     coalesce(extract(epoch FROM (l.until - now()))::float8, 0) AS left_secs
                 FROM want w LEFT JOIN won ON won.skey = w.skey
                 LEFT JOIN poll_leases l ON l.skey = w.skey",
                &[&skeys, &self.node(), &secs],
            )
            .await
            .map_err(&e)?;
        let mut granted = Vec::new();
        let mut held = Vec::new();
        for r in rows {
            let skey: String = r.get(0);
            if r.get::<_, bool>(1) {
                granted.push(skey);
            } else {
                let left: f64 = r.get(2);
                held.push((skey, Duration::from_secs_f64(left.clamp(0.0, 1e9))));
            }
        }
        Ok((granted, held))
    }
}

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    }
}

async fn listen_on<T>(
    config: &tokio_postgres::Config,
    tls: T,
    location: &str,
) -> Result<(Client, tokio::sync::mpsc::UnboundedReceiver<AsyncMessage>), StoreError>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Send + 'static,
    T::Stream: Send + 'static,
{
    let (client, mut conn) = config.connect(tls).await.map_err(pg_err(location))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if tx.send(m).is_err() {
                return;
            }
        }
    });
    Ok((client, rx))
}

/// The tokio-postgres config and TLS of `url`. `sslrootcert` is read here (tokio-postgres
/// does not know it); `verify-ca` and `verify-full` are `require` with verification, which
/// Muster always does.
fn parse_url(url: &str) -> Result<(tokio_postgres::Config, Tls), &'static str> {
    let mut u = url::Url::parse(url).map_err(|_| "not a URL")?;
    if !matches!(u.scheme(), "postgres" | "postgresql") {
        return Err("the scheme must be postgres://");
    }
    let mut root_file = None;
    let mut tls_wanted = false;
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .filter_map(|(k, v)| match &*k {
            "sslrootcert" => {
                root_file = Some(v.into_owned());
                None
            }
            "sslmode" => {
                tls_wanted = matches!(&*v, "require" | "verify-ca" | "verify-full");
                let v = if tls_wanted { "require" } else { "disable" };
                Some((k.into_owned(), v.to_owned()))
            }
            _ => Some((k.into_owned(), v.into_owned())),
        })
        .collect();
    if pairs.is_empty() {
        u.set_query(None);
    } else {
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    let mut config =
        tokio_postgres::Config::from_str(u.as_str()).map_err(|_| "not a PostgreSQL URL")?;
    if !tls_wanted {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    config
        .connect_timeout(Duration::from_secs(5))
        .keepalives_idle(Duration::from_secs(30))
        .application_name("muster");
    if !tls_wanted {
        return Ok((config, Tls::None));
    }
    let mut roots = rustls::RootCertStore::empty();
    match root_file {
        Some(path) => {
            use rustls::pki_types::pem::PemObject as _;
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(&path)
                .map_err(|_| "sslrootcert cannot be read")?;
            for c in certs {
                roots
                    .add(c.map_err(|_| "sslrootcert holds a bad certificate")?)
                    .map_err(|_| "sslrootcert holds a bad certificate")?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| "no TLS version in common")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((
        config,
        Tls::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(tls)),
    ))
}

fn addr_cols(addr: &GameAddr) -> (String, String, u16) {
    match addr {
        GameAddr::Ip(a) => ("ip".to_owned(), a.ip().to_string(), a.port()),
        GameAddr::Host { host, port } => ("host".to_owned(), host.to_string(), *port),
    }
}

fn ts(t: Timestamp) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

/// One chunk of records as column arrays (for `unnest`).
#[derive(Default)]
struct PutColumns {
    game: Vec<String>,
    kind: Vec<String>,
    host: Vec<String>,
    port: Vec<i32>,
    instance: Vec<i64>,
    face: Vec<String>,
    game_port: Vec<Option<i32>>,
    query_addr: Vec<Option<String>>,
    query_protocol: Vec<Option<String>>,
    state: Vec<String>,
    first_seen: Vec<i64>,
    last_heartbeat: Vec<i64>,
    last_poll_ok: Vec<Option<i64>>,
    poll_failures: Vec<i64>,
    source: Vec<String>,
    info: Vec<Option<String>>,
    last_proof: Vec<i64>,
    ddnet: Vec<Option<String>>,
    sources: Vec<Option<String>>,
}

impl PutColumns {
    fn of(records: &[Arc<Record>], node: i64) -> Result<Self, StoreError> {
        let mut c = Self::default();
        for r in records {
            let (kind, host, port) = addr_cols(&r.key.addr);
            c.game.push(r.key.game.to_string());
            c.kind.push(kind);
            c.host.push(host);
            c.port.push(i32::from(port));
            c.instance.push(shared_instance(node, r.key.instance));
            c.face.push(r.face.name().to_owned());
            c.game_port.push(r.game_port.map(i32::from));
            c.query_addr.push(r.query_addr().map(|a| a.to_string()));
            c.query_protocol
                .push(r.query_protocol.map(|p| p.name().to_owned()));
            c.state.push(r.state.name().to_owned());
            c.first_seen.push(ts(r.first_seen));
            c.last_heartbeat.push(ts(r.last_heartbeat));
            c.last_poll_ok.push(r.last_poll_ok().map(ts));
            c.poll_failures.push(i64::from(r.poll_failures()));
            c.source.push(r.source().to_ip().to_string());
            c.info.push(r.info.as_deref().map(|i| {
                serde_json::to_string(&muster_core::store::rows::InfoRow::from(i))
                    .unwrap_or_default()
            }));
            c.last_proof.push(ts(r.last_proof));
            let ddnet = r
                .ddnet()
                .map(AsRef::as_ref)
                .map(|d| muster_core::store::rows::ddnet_column(d, &r.key.addr));
            c.ddnet
                .push(ddnet.transpose().map_err(StoreError::InfoRead)?);
            c.sources.push(muster_core::store::rows::sources_column(r));
        }
        Ok(c)
    }
}

/// A row of [`COLUMNS`] as the shared row type.
fn read_row(r: &PgRow) -> Result<Row, String> {
    let port: i32 = r.get(3);
    let game_port: Option<i32> = r.get(6);
    let failures: i64 = r.get(14);
    Ok(Row {
        game: r.get(0),
        kind: r.get(1),
        host: r.get(2),
        port: u16::try_from(port).map_err(|_| format!("bad port {port}"))?,
        instance: r.get(4),
        face: r.get(5),
        game_port: match game_port {
            Some(p) => Some(u16::try_from(p).map_err(|_| format!("bad game port {p}"))?),
            None => None,
        },
        query_addr: r.get(7),
        query_protocol: r.get(8),
        state: r.get(9),
        first_seen: r.get(10),
        last_heartbeat: r.get(11),
        first_verified: r.get(12),
        last_poll_ok: r.get(13),
        poll_failures: u32::try_from(failures).unwrap_or(u32::MAX),
        source: r.get(15),
        info: r.get(16),
        face_data: r.get(17),
        last_proof: r.get(18),
        ddnet: r.get(19),
        sources: r.get(20),
    })
}

/// The key of a row (of a tombstone: its other columns need not be readable).
fn row_key(row: &Row) -> Result<ServerKey, String> {
    let addr = match row.kind.as_str() {
        "ip" => GameAddr::Ip(std::net::SocketAddr::new(
            row.host
                .parse()
                .map_err(|_| format!("bad address {:?}", row.host))?,
            row.port,
        )),
        "host" => GameAddr::Host {
            host: row.host.as_str().into(),
            port: row.port,
        },
        k => return Err(format!("unknown address kind {k:?}")),
    };
    Ok(ServerKey {
        game: row.game.as_str().into(),
        addr,
        instance: u64::try_from(row.instance).map_err(|_| "bad instance".to_owned())?,
    })
}

/// [`Store`] in PostgreSQL. See the module docs.
#[derive(Debug)]
pub struct PgStore {
    shared: Arc<PgShared>,
}

impl PgStore {
    /// The store of `shared`'s database.
    #[must_use]
    pub fn new(shared: Arc<PgShared>) -> Self {
        Self { shared }
    }
}

impl Store for PgStore {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        let s = Arc::clone(&self.shared);
        let (loaded, seq) = self.shared.block(async move {
            tokio::time::timeout(OP_TIMEOUT * 6, s.load_rows())
                .await
                .unwrap_or(Err(StoreError::Timeout))
        })??;
        self.shared.loaded_seq.store(seq, Ordering::Relaxed);
        Ok(loaded)
    }

    fn write(&mut self, puts: &[Arc<Record>], deletes: &[ServerKey]) -> Result<(), StoreError> {
        if puts.is_empty() && deletes.is_empty() {
            return Ok(());
        }
        let s = Arc::clone(&self.shared);
        let (puts, deletes) = (puts.to_vec(), deletes.to_vec());
        self.shared.block(async move {
            tokio::time::timeout(OP_TIMEOUT, s.write_rows(puts, deletes))
                .await
                .unwrap_or(Err(StoreError::Timeout))
        })?
    }

    fn location(&self) -> String {
        self.shared.location.clone()
    }
}

/// Creates the database `name` on the server of `admin_url` (a URL whose user may create
/// databases) and returns the URL of the new one. For tests and benches; plain connections
/// only.
pub async fn create_database(admin_url: &str, name: &str) -> Result<String, StoreError> {
    let at = redact(admin_url);
    let bad = |why| StoreError::Url {
        url: at.clone(),
        why,
    };
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(bad("database names here are letters, digits and _"));
    }
    let config = tokio_postgres::Config::from_str(admin_url).map_err(|_| bad("not a URL"))?;
    let (client, conn) = config.connect(NoTls).await.map_err(pg_err(&at))?;
    let driver = tokio::spawn(conn);
    // One statement each: several in one string would run as one transaction block.
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        client.batch_execute(&sql).await.map_err(pg_err(&at))?;
    }
    drop(client);
    let _ = driver.await;
    let mut u = url::Url::parse(admin_url).map_err(|_| bad("not a URL"))?;
    u.set_path(&format!("/{name}"));
    Ok(u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn management_keys_carry_their_owner() {
        assert_eq!(shared_instance(7, 0), 0);
        let s = shared_instance(7, 3);
        assert_eq!(s, (7 << 32) | 3);
        assert_eq!(owner_of(u64::try_from(s).unwrap()), 7);
        assert_eq!(shared_instance(9, u64::try_from(s).unwrap()), s, "kept");
    }

    #[test]
    fn urls_are_redacted_and_checked() {
        assert_eq!(
            redact("postgres://u:secret@127.0.0.1:5432/db"),
            "postgres://u:***@127.0.0.1:5432/db"
        );
        assert!(parse_url("mysql://x@y/z").is_err());
        let (c, tls) = parse_url("postgres://u:p@127.0.0.1:5433/db").unwrap();
        assert!(matches!(tls, Tls::None));
        assert_eq!(c.get_dbname(), Some("db"));
        let (_, tls) = parse_url("postgres://u@db.example/x?sslmode=verify-full").unwrap();
        assert!(matches!(tls, Tls::Rustls(_)));
        assert!(
            parse_url("postgres://u@h/x?sslmode=require&sslrootcert=/nonexistent.pem").is_err()
        );
    }

    #[test]
    fn migrations_are_in_order() {
        for (i, (v, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(usize::try_from(*v).unwrap(), i + 1);
        }
        assert_eq!(MIGRATIONS.last().unwrap().0, PG_SCHEMA_VERSION);
    }
}
