//! Player-count history: every poll result the poller reports ([`PollSample`]) is kept for a
//! while (24 h by default, config `history.retention`) so the web page can draw how busy a
//! server was.
//!
//! [`HistoryStore`] is the boundary (like [`crate::store::Store`] for records);
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

use crate::poller::PollSample;
use crate::registry::Timestamp;
use crate::store::{DB_FILE, StoreError};

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
}

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
        let conn = Connection::open(dir.join(DB_FILE))?;
        Self::with_connection(conn)
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::with_connection(Connection::open_in_memory()?)
    }

    fn with_connection(conn: Connection) -> Result<Self, StoreError> {
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn })
    }
}

impl HistoryStore for SqliteHistory {
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO poll_history (addr, game, instance, at, ok, num_players, max_players)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for s in samples {
                stmt.execute(params![
                    s.key.addr.to_string(),
                    s.key.game,
                    i64::try_from(s.key.instance).unwrap_or(i64::MAX),
                    ts(s.at),
                    s.ok,
                    s.num_players,
                    s.max_players,
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn prune(&mut self, before: Timestamp) -> Result<usize, StoreError> {
        Ok(self.conn.execute(
            "DELETE FROM poll_history WHERE at < ?1",
            params![ts(before)],
        )?)
    }

    fn range(
        &mut self,
        addr: &str,
        game: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        let limit = i64::try_from(MAX_RANGE_ROWS).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(
            "SELECT at, ok, num_players, max_players FROM poll_history
             WHERE addr = ?1 AND (?2 IS NULL OR game = ?2) AND at >= ?3
             ORDER BY at DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(params![addr, game, ts(since), limit], |r| {
            let at: i64 = r.get(0)?;
            Ok(HistoryPoint {
                at: Timestamp(u64::try_from(at).unwrap_or(0)),
                ok: r.get(1)?,
                num_players: r.get(2)?,
                max_players: r.get(3)?,
            })
        })?;
        let mut out = rows.collect::<Result<Vec<_>, _>>()?;
        out.reverse();
        Ok(out)
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
/// (the embedder's own sink, if any) and writing them to `history` in batches. Store errors
/// are logged and the batch dropped: history is best effort, never a reason to stop.
pub async fn run(
    history: History,
    mut samples: mpsc::UnboundedReceiver<PollSample>,
    forward: Option<mpsc::UnboundedSender<PollSample>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut write = tokio::time::interval(WRITE_INTERVAL);
    let mut prune = tokio::time::interval(PRUNE_INTERVAL);
    write.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf: Vec<PollSample> = Vec::new();
    let flush = |buf: &mut Vec<PollSample>| {
        if let Err(e) = history.append(buf) {
            tracing::warn!(error = %e, dropped = buf.len(), "history write failed");
        }
        buf.clear();
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
                        flush(&mut buf);
                    }
                }
                None => break,
            },
            _ = write.tick() => flush(&mut buf),
            _ = prune.tick() => match history.prune(Timestamp::now()) {
                Ok(n) if n > 0 => tracing::debug!(n, "history pruned"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "history prune failed"),
            },
        }
    }
    flush(&mut buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{GameAddr, ServerKey};

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
        run(h.clone(), rx, Some(ftx), stop_rx).await;
        assert_eq!(frx.recv().await.unwrap().num_players, Some(4));
        let got = h.recent("127.0.0.1:1", None, Timestamp(now)).unwrap();
        assert_eq!(got.len(), 1);
    }
}
