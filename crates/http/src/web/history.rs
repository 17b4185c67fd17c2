//! Player-count history: every poll result the poller reports ([`PollSample`]) is kept for a
//! while (24 h by default, config `history.retention`) so the web page can draw how busy a
//! server was.
//!
//! Servers the poller does not poll (management servers, which tell their state themselves;
//! every server while the poller is off) get their samples from what the registry knows:
//! [`feed_unpolled`] looks at each new snapshot and writes a sample for such a server when its
//! player count or slots changed, and at least once per poll interval ([`Unpolled`]).
//!
//! [`HistoryStore`] is the boundary (like [`muster_core::store::Store`] for records);
//! [`SqliteHistory`] keeps the samples in the daemon's SQLite file, in the `poll_history`
//! table, on a connection of its own (WAL lets it write beside the record store). [`run`] is the
//! task that receives samples, writes them in batches at least once a second and prunes rows
//! older than the retention every minute.
//!
//! Does not: downsample (at the default 300 s poll interval a day is 288 rows per server), or
//! keep history of a server across a change of address.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use muster_core::poll::PollSample;
use muster_core::registry::{Record, Timestamp};
use muster_store::{DB_FILE, StoreError};

/// A history database error, as a store error.
fn db(e: rusqlite::Error) -> StoreError {
    StoreError::History(e.into())
}

/// Default time samples are kept.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Most samples returned by one [`HistoryStore::range`] call (a day at a 10 s interval fits).
pub const MAX_RANGE_ROWS: usize = 10_000;
/// Samples are written at least this often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(1);
/// Old samples are pruned at least this often.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Samples buffered before a write is forced (bounds memory between writes).
pub const MAX_BUFFERED: usize = 4096;
/// While writes keep failing, a failure is logged at most this often (with the samples dropped
/// since the last line).
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// One stored sample of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPoint {
    /// When the poll result arrived.
    pub at: Timestamp,
    /// Whether the server answered.
    pub ok: bool,
    /// Players, when it answered.
    pub num_players: Option<u32>,
    /// Slots, when it answered.
    pub max_players: Option<u32>,
}

/// Where samples are kept. Methods are blocking and must be quick.
pub trait HistoryStore: Send + fmt::Debug {
    /// Writes samples in one transaction.
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError>;
    /// Deletes samples older than `before`; returns how many went.
    fn prune(&mut self, before: Timestamp) -> Result<usize, StoreError>;
    /// Samples of the server registered at `addr` (as `GameAddr` displays it), optionally of
    /// one game, at or after `since`, oldest first, at most [`MAX_RANGE_ROWS`] (the newest).
    fn range(
        &mut self,
        addr: &str,
        game: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError>;
}

/// [`HistoryStore`] in the daemon's SQLite file.
#[derive(Debug)]
pub struct SqliteHistory {
    conn: Connection,
    /// The address text of the sample being written (reused: no allocation per sample).
    addr: String,
}

/// The page cache of the history's connection, KiB (SQLite's default is 2,000 KiB): appends
/// touch the last pages of the table and its two indexes; a range query reads one server's
/// rows through the address index.
pub const HISTORY_CACHE_KIB: i64 = 256;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS poll_history (
    addr TEXT NOT NULL,
    game TEXT NOT NULL,
    instance INTEGER NOT NULL,
    at INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    num_players INTEGER,
    max_players INTEGER
);
CREATE INDEX IF NOT EXISTS poll_history_addr_at ON poll_history (addr, at);
CREATE INDEX IF NOT EXISTS poll_history_at ON poll_history (at);
";

fn ts(t: Timestamp) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

impl SqliteHistory {
    /// Opens (and creates the table in) `muster.sqlite3` in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
        let conn = Connection::open(dir.join(DB_FILE)).map_err(db)?;
        Self::with_connection(conn)
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::with_connection(Connection::open_in_memory().map_err(db)?)
    }

    fn with_connection(conn: Connection) -> Result<Self, StoreError> {
        conn.busy_timeout(Duration::from_secs(5)).map_err(db)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(db)?;
        conn.pragma_update(None, "cache_size", -HISTORY_CACHE_KIB)
            .map_err(db)?;
        conn.execute_batch(SCHEMA).map_err(db)?;
        Ok(Self {
            conn,
            addr: String::new(),
        })
    }
}

impl HistoryStore for SqliteHistory {
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError> {
        use std::fmt::Write as _;
        let Self { conn, addr } = self;
        let tx = conn.transaction().map_err(db)?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO poll_history (addr, game, instance, at, ok, num_players, max_players)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            ).map_err(db)?;
            for s in samples {
                addr.clear();
                let _ = write!(addr, "{}", s.key.addr);
                stmt.execute(params![
                    addr.as_str(),
                    s.key.game.as_str(),
                    i64::try_from(s.key.instance).unwrap_or(i64::MAX),
                    ts(s.at),
                    s.ok,
                    s.num_players,
                    s.max_players,
                ])
                .map_err(db)?;
            }
        }
        tx.commit().map_err(db)?;
        Ok(())
    }

    fn prune(&mut self, before: Timestamp) -> Result<usize, StoreError> {
        self.conn
            .execute(
                "DELETE FROM poll_history WHERE at < ?1",
                params![ts(before)],
            )
            .map_err(db)
    }

    fn range(
        &mut self,
        addr: &str,
        game: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        let limit = i64::try_from(MAX_RANGE_ROWS).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT at, ok, num_players, max_players FROM poll_history
             WHERE addr = ?1 AND (?2 IS NULL OR game = ?2) AND at >= ?3
             ORDER BY at DESC LIMIT ?4",
            )
            .map_err(db)?;
        let rows = stmt
            .query_map(params![addr, game, ts(since), limit], |r| {
                let at: i64 = r.get(0)?;
                Ok(HistoryPoint {
                    at: Timestamp(u64::try_from(at).unwrap_or(0)),
                    ok: r.get(1)?,
                    num_players: r.get(2)?,
                    max_players: r.get(3)?,
                })
            })
            .map_err(db)?;
        let mut out = rows.collect::<Result<Vec<_>, _>>().map_err(db)?;
        out.reverse();
        Ok(out)
    }
}

/// [`SqliteHistory`] in a directory, opened at first use: a failed open (a full disk at start)
/// is an error of that call, and the next call tries again, so history starts working when
/// the disk has room again instead of stopping the daemon.
#[derive(Debug)]
pub struct ReopeningHistory {
    dir: std::path::PathBuf,
    open: Option<SqliteHistory>,
}

impl ReopeningHistory {
    /// Opens the history in `dir` now if it can; if not, the error is returned beside the
    /// store, which tries again at each use.
    #[must_use]
    pub fn open(dir: &Path) -> (Self, Option<StoreError>) {
        let mut s = Self {
            dir: dir.to_owned(),
            open: None,
        };
        let err = s.get().err();
        (s, err)
    }

    fn get(&mut self) -> Result<&mut SqliteHistory, StoreError> {
        let s = match self.open.take() {
            Some(s) => s,
            None => SqliteHistory::open(&self.dir)?,
        };
        Ok(self.open.insert(s))
    }
}

impl HistoryStore for ReopeningHistory {
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError> {
        self.get()?.append(samples)
    }

    fn prune(&mut self, before: Timestamp) -> Result<usize, StoreError> {
        self.get()?.prune(before)
    }

    fn range(
        &mut self,
        addr: &str,
        game: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        self.get()?.range(addr, game, since)
    }
}

/// Failed history writes: the first is logged at once, later ones at most every
/// [`FAILURE_LOG_INTERVAL`] with the samples dropped meanwhile; the first success after
/// failures is logged too. Time is passed in.
#[derive(Debug, Default)]
struct FailureLog {
    /// When the last failure line was written (`None`: writes work).
    last_line: Option<std::time::Instant>,
    /// Samples dropped since that line.
    dropped: usize,
}

impl FailureLog {
    /// A write of `n` samples failed with `e` at `now`: whether to log, and how many samples
    /// to report (those since the last line, this batch included).
    fn failed(&mut self, n: usize, now: std::time::Instant) -> Option<usize> {
        self.dropped += n;
        match self.last_line {
            Some(t) if now.duration_since(t) < FAILURE_LOG_INTERVAL => None,
            _ => {
                self.last_line = Some(now);
                Some(std::mem::take(&mut self.dropped))
            }
        }
    }

    /// A write worked: whether writes had failed before (the recovery is worth a line).
    fn ok(&mut self) -> bool {
        self.dropped = 0;
        self.last_line.take().is_some()
    }
}

/// A shared history store: the writer task and the HTTP handlers hold clones.
#[derive(Debug, Clone)]
pub struct History {
    store: Arc<Mutex<Box<dyn HistoryStore>>>,
    retention: Duration,
}

impl History {
    /// Shares `store`, keeping samples for `retention`.
    #[must_use]
    pub fn new(store: Box<dyn HistoryStore>, retention: Duration) -> Self {
        Self {
            store: Arc::new(Mutex::new(store)),
            retention,
        }
    }

    /// How long samples are kept.
    #[must_use]
    pub fn retention(&self) -> Duration {
        self.retention
    }

    fn with<T>(&self, f: impl FnOnce(&mut dyn HistoryStore) -> T) -> T {
        let mut g = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        f(g.as_mut())
    }

    /// Writes samples.
    pub fn append(&self, samples: &[PollSample]) -> Result<(), StoreError> {
        if samples.is_empty() {
            return Ok(());
        }
        self.with(|s| s.append(samples))
    }

    /// Deletes samples older than the retention before `now`.
    pub fn prune(&self, now: Timestamp) -> Result<usize, StoreError> {
        let ms = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        self.with(|s| s.prune(Timestamp(now.0.saturating_sub(ms))))
    }

    /// The samples of `addr` within the retention before `now`, oldest first.
    pub fn recent(
        &self,
        addr: &str,
        game: Option<&str>,
        now: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        let ms = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        self.with(|s| s.range(addr, game, Timestamp(now.0.saturating_sub(ms))))
    }
}

/// Receives samples until `samples` closes or `stop` is cancelled, forwarding each to `forward`
/// (the embedder's own sink, if any) and writing them to `history` in batches. A batch the
/// store refuses (a full disk) is dropped, each of its samples counted under
/// [`DropReason::HistoryNotStored`] in `counts`' metrics, and logged at most once per
/// [`FAILURE_LOG_INTERVAL`]: history is best effort, never a reason to stop or to hold memory.
///
/// [`DropReason::HistoryNotStored`]: muster_core::drops::DropReason::HistoryNotStored
pub async fn run(
    history: History,
    mut samples: mpsc::UnboundedReceiver<PollSample>,
    forward: Option<mpsc::UnboundedSender<PollSample>>,
    counts: Option<muster_core::MasterHandle>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut write = tokio::time::interval(WRITE_INTERVAL);
    let mut prune = tokio::time::interval(PRUNE_INTERVAL);
    write.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf: Vec<PollSample> = Vec::new();
    let mut failures = FailureLog::default();
    // SQLite runs on the blocking pool: a batch of thousands of rows (every server's first
    // sample) must not hold a reactor thread that serves the faces.
    let mut flush = async |buf: &mut Vec<PollSample>| {
        if buf.is_empty() {
            return;
        }
        let batch = std::mem::take(buf);
        let h = history.clone();
        let n = batch.len();
        let error = match muster_core::bulk::spawn(move || h.append(&batch)).await {
            Ok(Ok(())) => {
                if failures.ok() {
                    tracing::info!("history writes work again");
                }
                return;
            }
            Ok(Err(e)) => muster_proto::errors::error_chain(&e),
            Err(e) => muster_proto::errors::error_chain(&e),
        };
        if let Some(c) = &counts {
            c.metrics().count_drops(
                muster_core::drops::DropReason::HistoryNotStored,
                u64::try_from(n).unwrap_or(u64::MAX),
            );
        }
        if let Some(dropped) = failures.failed(n, std::time::Instant::now()) {
            tracing::warn!(%error, dropped, "history write failed; samples dropped (logged at most once a minute)");
        }
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            s = samples.recv() => match s {
                Some(s) => {
                    if let Some(f) = &forward {
                        let _ = f.send(s.clone());
                    }
                    buf.push(s);
                    if buf.len() >= MAX_BUFFERED {
                        flush(&mut buf).await;
                    }
                }
                None => break,
            },
            _ = write.tick() => flush(&mut buf).await,
            _ = prune.tick() => {
                let h = history.clone();
                match muster_core::bulk::spawn(move || h.prune(Timestamp::now())).await {
                    Ok(Ok(n)) if n > 0 => tracing::debug!(n, "history pruned"),
                    Ok(Ok(_)) => {}
                    // The writes' failure line covers a broken store; a prune fails with them.
                    Ok(Err(e)) => tracing::debug!(error = %e, "history prune failed"),
                    Err(e) => tracing::debug!(error = %e, "history prune failed"),
                }
            }
        }
    }
    flush(&mut buf).await;
}

/// How often [`feed_unpolled`] looks for changes.
pub const UNPOLLED_SCAN: Duration = Duration::from_secs(2);

/// What [`feed_unpolled`] last wrote per unpolled server, deciding the next samples. Time is
/// passed in.
#[derive(Debug)]
pub struct Unpolled {
    /// The poller runs: records it can poll get their samples from it.
    poller: bool,
    /// A sample at least this often while nothing changes.
    every: Duration,
    /// Per record id ([`Record::id`]: stable while the record lives, and 8 bytes where a key
    /// would be a clone of the game and address): what was last written.
    last: std::collections::HashMap<u64, Last>,
    scans: u64,
    /// The first scan's time: [`Last`] counts seconds from it.
    start: Option<Timestamp>,
    /// The earliest time a sample is due without a change.
    next_due: Option<Timestamp>,
}

/// What [`Unpolled`] last wrote for one record, in 8 bytes (a map entry of 16 with its id,
/// where the plain numbers and times took 32): its players and slots, clamped to `u16` (a
/// change beyond that is not one any game makes), and the second since the first scan it was
/// written, shifted left by one with the parity of the scan that last saw the record in the
/// low bit (a record a scan did not see has the other parity, and is forgotten).
#[derive(Debug, Clone, Copy)]
struct Last {
    players: u16,
    slots: u16,
    seen: u32,
}

const _: () = assert!(size_of::<Last>() == 8);

impl Last {
    /// The second it was written (since the first scan).
    const fn written(self) -> u32 {
        self.seen >> 1
    }
}

/// `n` clamped to `u16`.
fn narrow(n: u32) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

impl Unpolled {
    /// Samples for the records the poller leaves out (all of them when `poller` is false),
    /// at every change and at least every `every`.
    #[must_use]
    pub fn new(poller: bool, every: Duration) -> Self {
        Self {
            poller,
            every,
            last: std::collections::HashMap::new(),
            scans: 0,
            start: None,
            next_due: None,
        }
    }

    /// Whether the poller polls `r` (it has a query protocol and address).
    fn polled(&self, r: &Record) -> bool {
        self.poller && r.query_protocol.is_some() && r.query_addr().is_some()
    }

    /// Whether a scan at `now` could write anything when nothing changed.
    #[must_use]
    pub fn due(&self, now: Timestamp) -> bool {
        self.next_due.is_some_and(|t| now >= t)
    }

    /// The samples due at `now` for `records` (every listed record): an unpolled record with
    /// info gets one when it is new, its players or slots changed, or its last is `every`
    /// old. Records no longer listed are forgotten.
    pub fn scan<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a Record>,
        now: Timestamp,
    ) -> Vec<PollSample> {
        self.scans += 1;
        let parity = u32::from(self.scans % 2 == 1);
        let start = *self.start.get_or_insert(now);
        // Seconds since the first scan, in 31 bits (68 years of uptime).
        let secs = u32::try_from(now.since(start).as_secs())
            .unwrap_or(u32::MAX)
            .min(u32::MAX >> 1);
        let every = u32::try_from(self.every.as_secs()).unwrap_or(u32::MAX);
        let mut out = Vec::new();
        for r in records {
            if self.polled(r) {
                continue;
            }
            let Some(info) = r.info.as_deref() else {
                continue;
            };
            let (n, max) = (info.num_players, info.max_players);
            let due = match self.last.get_mut(&r.id) {
                Some(e) => {
                    e.seen = e.written() << 1 | parity;
                    (e.players, e.slots) != (narrow(n), narrow(max))
                        || secs.saturating_sub(e.written()) >= every
                }
                None => true,
            };
            if due {
                let last = Last {
                    players: narrow(n),
                    slots: narrow(max),
                    seen: secs << 1 | parity,
                };
                self.last.insert(r.id, last);
                out.push(PollSample {
                    key: r.key.clone(),
                    at: now,
                    ok: true,
                    num_players: Some(n),
                    max_players: Some(max),
                    ping: None,
                });
            }
        }
        self.last.retain(|_, e| e.seen & 1 == parity);
        self.next_due = self.last.values().map(|e| e.written()).min().map(|w| {
            start
                .plus(Duration::from_secs(u64::from(w)))
                .plus(self.every)
        });
        out
    }
}

/// Sends [`Unpolled`]'s samples to `samples` (the history writer's channel) until `stop` is
/// cancelled: a scan every [`UNPOLLED_SCAN`] when the snapshot shows a change (its last event
/// id moved) or a sample is due by age.
pub async fn feed_unpolled(
    handle: muster_core::MasterHandle,
    samples: mpsc::UnboundedSender<PollSample>,
    mut unpolled: Unpolled,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(UNPOLLED_SCAN);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen: Option<(u64, usize)> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let view = handle.snapshot();
        let now = Timestamp::now();
        // The event id moves with every change the API shows; the length covers a daemon
        // whose events are not on yet (while it loads).
        let mark = (view.last_event_id(), view.len());
        if seen == Some(mark) && !unpolled.due(now) {
            continue;
        }
        seen = Some(mark);
        // A pass over every listed record: off the reactor, as every whole-list pass is.
        let Ok((back, due)) = muster_core::bulk::spawn(move || {
            let due = unpolled.scan(view.listed().iter().map(|r| &**r), now);
            (unpolled, due)
        })
        .await
        else {
            return;
        };
        unpolled = back;
        for s in due {
            if samples.send(s).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::{Face, GameAddr, PollFields, PollInfo, Registration, ServerKey};
    use muster_proto::limit::SourceKey;

    fn sample(addr: &str, at: u64, n: u32) -> PollSample {
        PollSample {
            key: ServerKey::new("ut2", GameAddr::parse(addr).unwrap()),
            at: Timestamp(at),
            ok: true,
            num_players: Some(n),
            max_players: Some(16),
            ping: None,
        }
    }

    #[test]
    fn the_page_cache_is_the_named_size() {
        let h = SqliteHistory::in_memory().unwrap();
        let kib: i64 = h
            .conn
            .pragma_query_value(None, "cache_size", |r| r.get(0))
            .unwrap();
        assert_eq!(kib, -HISTORY_CACHE_KIB);
    }

    #[test]
    fn append_range_prune() {
        let h = History::new(
            Box::new(SqliteHistory::in_memory().unwrap()),
            Duration::from_secs(10),
        );
        h.append(&[
            sample("127.0.0.1:7777", 1_000, 1),
            sample("127.0.0.1:7777", 5_000, 2),
            sample("127.0.0.1:7778", 5_000, 9),
            sample("127.0.0.1:7777", 12_000, 3),
        ])
        .unwrap();
        let got = h.recent("127.0.0.1:7777", None, Timestamp(10_000)).unwrap();
        let n: Vec<_> = got.iter().map(|p| p.num_players).collect();
        assert_eq!(n, [Some(1), Some(2), Some(3)]);
        assert!(
            h.recent("127.0.0.1:7777", Some("other"), Timestamp(12_000))
                .unwrap()
                .is_empty()
        );
        // Retention 10 s at t = 14 s: only samples from 4 s on are kept.
        assert_eq!(h.prune(Timestamp(14_000)).unwrap(), 1);
        let got = h
            .recent("127.0.0.1:7777", Some("ut2"), Timestamp(14_000))
            .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].at, Timestamp(5_000));
    }

    fn record(port: u16, face: Face, players: Option<u32>) -> Record {
        let addr: std::net::SocketAddr = format!("192.0.2.1:{port}").parse().unwrap();
        let polled = face != Face::Mgmt;
        let mut r = Record::new(
            u64::from(port),
            Registration {
                key: ServerKey::new("g", GameAddr::Ip(addr)),
                face,
                game_port: Some(port),
                query_addr: polled.then_some(addr),
                query_protocol: polled.then_some(muster_proto::Protocol::GameSpy1),
                source: SourceKey::of(addr.ip()),
            },
            Timestamp(0),
        );
        r.info = players.map(|n| {
            Arc::new(PollInfo::from(PollFields {
                num_players: n,
                max_players: 4,
                ..PollFields::default()
            }))
        });
        r
    }

    #[test]
    fn unpolled_records_are_sampled_on_change_and_by_age() {
        let every = Duration::from_secs(300);
        let mut u = Unpolled::new(true, every);
        let mgmt = record(2000, Face::Mgmt, Some(1));
        let polled = record(2001, Face::GameSpy, Some(3));
        let silent = record(2002, Face::Mgmt, None);
        let t0 = Timestamp(1_000_000);
        let got = u.scan([&mgmt, &polled, &silent], t0);
        assert_eq!(got.len(), 1, "only the unpolled record with info: {got:?}");
        assert_eq!(
            (
                got[0].key.addr.port(),
                got[0].num_players,
                got[0].max_players
            ),
            (2000, Some(1), Some(4))
        );
        // Nothing changed, nothing due.
        let t1 = t0.plus(Duration::from_secs(10));
        assert!(!u.due(t1));
        assert!(u.scan([&mgmt, &polled], t1).is_empty());
        // A change is written at once.
        let busier = record(2000, Face::Mgmt, Some(2));
        let got = u.scan([&busier], t1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].num_players, Some(2));
        // Unchanged, a sample every `every`.
        let t2 = t1.plus(every);
        assert!(u.due(t2));
        assert_eq!(u.scan([&busier], t2).len(), 1);
        // Gone and back: sampled again at once.
        assert!(u.scan([], t2).is_empty());
        assert!(!u.due(t2.plus(every)), "forgotten");
        assert_eq!(u.scan([&busier], t2).len(), 1);
        // Without the poller every record is sampled.
        let mut all = Unpolled::new(false, every);
        assert_eq!(all.scan([&mgmt, &polled, &silent], t0).len(), 2);
    }

    #[test]
    fn a_history_that_cannot_open_tries_again_at_each_use() {
        let dir =
            std::env::temp_dir().join(format!("muster-history-reopen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A file where the data directory should be: no database can be made there.
        let blocked = dir.join("data");
        std::fs::write(&blocked, b"not a directory").unwrap();
        let (store, err) = ReopeningHistory::open(&blocked);
        assert!(err.is_some());
        let h = History::new(Box::new(store), DEFAULT_RETENTION);
        let s = sample("127.0.0.1:7777", 1_000, 1);
        assert!(h.append(std::slice::from_ref(&s)).is_err());
        std::fs::remove_file(&blocked).unwrap();
        h.append(&[s]).unwrap();
        let got = h.recent("127.0.0.1:7777", None, Timestamp(1_000)).unwrap();
        assert_eq!(got.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failed_writes_are_logged_at_most_once_an_interval() {
        let mut log = FailureLog::default();
        let t0 = std::time::Instant::now();
        assert_eq!(log.failed(3, t0), Some(3), "the first failure at once");
        assert_eq!(log.failed(4, t0 + Duration::from_secs(1)), None);
        assert_eq!(log.failed(5, t0 + Duration::from_secs(59)), None);
        assert_eq!(
            log.failed(1, t0 + FAILURE_LOG_INTERVAL),
            Some(10),
            "one line per interval, with what was dropped since the last"
        );
        assert!(log.ok(), "the recovery is told");
        assert!(!log.ok(), "once");
        assert_eq!(log.failed(2, t0 + FAILURE_LOG_INTERVAL), Some(2));
    }

    #[tokio::test]
    async fn task_writes_and_forwards() {
        let h = History::new(
            Box::new(SqliteHistory::in_memory().unwrap()),
            DEFAULT_RETENTION,
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let (ftx, mut frx) = mpsc::unbounded_channel();
        let stop_rx = tokio_util::sync::CancellationToken::new();
        let now = Timestamp::now().0;
        tx.send(sample("127.0.0.1:1", now, 4)).unwrap();
        drop(tx);
        run(h.clone(), rx, Some(ftx), None, stop_rx).await;
        assert_eq!(frx.recv().await.unwrap().num_players, Some(4));
        let got = h.recent("127.0.0.1:1", None, Timestamp(now)).unwrap();
        assert_eq!(got.len(), 1);
    }
}
