//! [`SqliteHistory`]: the history's tables in the daemon's SQLite file. All its SQL is here.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};

use muster_core::poll::PollSample;
use muster_core::registry::Timestamp;
use muster_store::{DB_FILE, StoreError};

use super::fold::{Batch, LiveSet};
use super::{
    GamePoint, HistoryStore, LIVE_FOR, MAX_RANGE_ROWS, MINUTE_MS, Resolution, ServerPoint, fold,
    whole,
};

/// A history database error, as a store error.
fn db(e: rusqlite::Error) -> StoreError {
    StoreError::History(e.into())
}

/// [`HistoryStore`] in the daemon's SQLite file.
#[derive(Debug)]
pub struct SqliteHistory {
    pub(super) conn: Connection,
    /// Each server's last sample by server id, forgotten [`LIVE_FOR`] after it; rebuilt from
    /// each server's last minute point when the store opens.
    live: LiveSet,
    /// The last minute whose game aggregates were written.
    closed: Option<i64>,
}

/// The page cache of the history's connection, KiB (SQLite's default is 2,000 KiB): appends
/// touch the last leaf of each server's rows in two tables; a range query reads one server's
/// rows, a few dozen pages. The operating system's cache holds the rest. At 10,000 servers
/// the cache is a resident cost a master pays whatever it lists (256 KiB took 26 bytes per
/// server); a 1-year read of one server (8,760 points, ~250 KB of rows) took 5.6 ms with
/// 256 KiB, 7.6 ms with 64 once, and 4.9 ms with both 128 and 32 in a later pair of runs.
/// With 128 the cache filled while the first thousand servers registered, ~150 bytes a
/// server at that size.
pub const HISTORY_CACHE_KIB: i64 = 32;

/// The tables. Every row table is `WITHOUT ROWID` keyed by (server or game, minute or hour
/// number): one B-tree, the rows of one server stored together, no index beside it.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS history_servers (
    id INTEGER PRIMARY KEY,
    game TEXT NOT NULL,
    addr TEXT NOT NULL,
    UNIQUE (addr, game)
);
CREATE TABLE IF NOT EXISTS history_minute (
    server INTEGER NOT NULL, minute INTEGER NOT NULL,
    n INTEGER NOT NULL, ok INTEGER NOT NULL,
    pmin INTEGER, pmax INTEGER, psum INTEGER NOT NULL, slots INTEGER,
    PRIMARY KEY (server, minute)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_hour (
    server INTEGER NOT NULL, hour INTEGER NOT NULL,
    n INTEGER NOT NULL, ok INTEGER NOT NULL,
    pmin INTEGER, pmax INTEGER, psum INTEGER NOT NULL, slots INTEGER,
    PRIMARY KEY (server, hour)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_game_minute (
    game TEXT NOT NULL, minute INTEGER NOT NULL,
    listed INTEGER NOT NULL, up INTEGER NOT NULL, players INTEGER NOT NULL,
    PRIMARY KEY (game, minute)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_game_hour (
    game TEXT NOT NULL, hour INTEGER NOT NULL, minutes INTEGER NOT NULL, listed INTEGER NOT NULL,
    up_min INTEGER NOT NULL, up_max INTEGER NOT NULL, up_sum INTEGER NOT NULL,
    pl_min INTEGER NOT NULL, pl_max INTEGER NOT NULL, pl_sum INTEGER NOT NULL,
    PRIMARY KEY (game, hour)
) WITHOUT ROWID;
";

/// Folds the raw samples of earlier versions into minute points and rollups, then drops
/// their table (one transaction with the schema: all or nothing).
const MIGRATE_POLL_HISTORY: &str = "
INSERT INTO history_servers (game, addr)
    SELECT DISTINCT game, addr FROM poll_history WHERE true
    ON CONFLICT DO NOTHING;
INSERT INTO history_minute (server, minute, n, ok, pmin, pmax, psum, slots)
    SELECT s.id, p.at / 60000, count(*), sum(p.ok != 0),
        min(CASE WHEN p.ok THEN p.num_players END), max(CASE WHEN p.ok THEN p.num_players END),
        coalesce(sum(CASE WHEN p.ok THEN p.num_players END), 0),
        max(CASE WHEN p.ok THEN p.max_players END)
    FROM poll_history p JOIN history_servers s ON s.addr = p.addr AND s.game = p.game
    WHERE true GROUP BY s.id, p.at / 60000
    ON CONFLICT DO NOTHING;
INSERT INTO history_hour (server, hour, n, ok, pmin, pmax, psum, slots)
    SELECT s.id, p.at / 3600000, count(*), sum(p.ok != 0),
        min(CASE WHEN p.ok THEN p.num_players END), max(CASE WHEN p.ok THEN p.num_players END),
        coalesce(sum(CASE WHEN p.ok THEN p.num_players END), 0),
        max(CASE WHEN p.ok THEN p.max_players END)
    FROM poll_history p JOIN history_servers s ON s.addr = p.addr AND s.game = p.game
    WHERE true GROUP BY s.id, p.at / 3600000
    ON CONFLICT DO NOTHING;
DROP TABLE poll_history;
";

/// The upsert of a batch's change ([`fold::Delta`]) into a minute or hour row (`{t}`: the
/// table, `{k}`: its time column), merging as [`fold::Delta::merge`] does.
macro_rules! upsert {
    ($t:literal, $k:literal) => {
        concat!(
            "INSERT INTO ",
            $t,
            " (server, ",
            $k,
            ", n, ok, pmin, pmax, psum, slots)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (server, ",
            $k,
            ") DO UPDATE SET n = n + excluded.n, ok = ok + excluded.ok,
                pmin = min(coalesce(pmin, excluded.pmin), coalesce(excluded.pmin, pmin)),
                pmax = max(coalesce(pmax, excluded.pmax), coalesce(excluded.pmax, pmax)),
                psum = psum + excluded.psum, slots = coalesce(excluded.slots, slots)"
        )
    };
}

impl SqliteHistory {
    /// Opens (and creates the tables in, migrating `poll_history`) `muster.sqlite3` in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
        let conn = Connection::open(dir.join(DB_FILE)).map_err(db)?;
        Self::with_connection(conn)
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::with_connection(Connection::open_in_memory().map_err(db)?)
    }

    /// A store on `conn` (a file the caller chose: the benchmark's).
    pub fn with_connection(mut conn: Connection) -> Result<Self, StoreError> {
        conn.busy_timeout(Duration::from_secs(5)).map_err(db)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(db)?;
        conn.pragma_update(None, "cache_size", -HISTORY_CACHE_KIB)
            .map_err(db)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        tx.execute_batch(SCHEMA).map_err(db)?;
        let old: bool = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'poll_history'",
                [],
                |r| r.get(0),
            )
            .map_err(db)?;
        if old {
            tx.execute_batch(MIGRATE_POLL_HISTORY).map_err(db)?;
        }
        let closed: Option<i64> = tx
            .query_row("SELECT max(minute) FROM history_game_minute", [], |r| {
                r.get(0)
            })
            .map_err(db)?;
        let live = rebuild_live(&tx)?;
        tx.commit().map_err(db)?;
        Ok(Self { conn, live, closed })
    }

    /// Servers whose last sample is remembered for the game aggregates.
    #[must_use]
    pub fn live_servers(&self) -> usize {
        self.live.len()
    }

    /// Writes hourly rollups directly, one row per (server, hour, players) in one
    /// transaction: the benchmark's fill, as years of polling would leave them.
    pub fn fill_hours(
        &mut self,
        rows: impl Iterator<Item = (String, String, i64, u32)>,
    ) -> Result<usize, StoreError> {
        let tx = (self.conn)
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let mut n = 0;
        {
            let mut id = tx
                .prepare("INSERT INTO history_servers (game, addr) VALUES (?1, ?2) ON CONFLICT (addr, game) DO UPDATE SET game = excluded.game RETURNING id")
                .map_err(db)?;
            let mut hour = tx
                .prepare("INSERT INTO history_hour (server, hour, n, ok, pmin, pmax, psum, slots) VALUES (?1, ?2, 12, 12, ?3, ?3, ?4, 32)")
                .map_err(db)?;
            let mut ids: HashMap<(String, String), i64> = HashMap::new();
            for (game, addr, h, players) in rows {
                let key = (game, addr);
                let sid = match ids.get(&key) {
                    Some(&s) => s,
                    None => {
                        let s: i64 = id
                            .query_row(params![key.0, key.1], |r| r.get(0))
                            .map_err(db)?;
                        ids.insert(key, s);
                        s
                    }
                };
                hour.execute(params![sid, h, players, i64::from(players) * 12])
                    .map_err(db)?;
                n += 1;
            }
        }
        tx.commit().map_err(db)?;
        Ok(n)
    }

    /// Writes game hourly rows directly (the benchmark's fill).
    pub fn fill_game_hours(
        &mut self,
        rows: impl Iterator<Item = (String, i64, u32, u32)>,
    ) -> Result<usize, StoreError> {
        let tx = (self.conn)
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let mut n = 0;
        {
            let mut st = tx
                .prepare("INSERT INTO history_game_hour (game, hour, minutes, listed, up_min, up_max, up_sum, pl_min, pl_max, pl_sum) VALUES (?1, ?2, 60, ?3, ?3, ?3, ?3 * 60, ?4, ?4, ?4 * 60)")
                .map_err(db)?;
            for (game, h, up, players) in rows {
                st.execute(params![game, h, up, players]).map_err(db)?;
                n += 1;
            }
        }
        tx.commit().map_err(db)?;
        Ok(n)
    }

    fn server_ids(&mut self, addr: &str, game: Option<&str>) -> Result<Vec<i64>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id FROM history_servers WHERE addr = ?1 AND (?2 IS NULL OR game = ?2)",
            )
            .map_err(db)?;
        let ids = st
            .query_map(params![addr, game], |r| r.get(0))
            .map_err(db)?
            .collect::<Result<Vec<i64>, _>>()
            .map_err(db)?;
        Ok(ids)
    }
}

impl HistoryStore for SqliteHistory {
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError> {
        let batch = Batch::fold(samples);
        let Self { conn, live, .. } = self;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        {
            let mut find = tx
                .prepare_cached("SELECT id FROM history_servers WHERE addr = ?1 AND game = ?2")
                .map_err(db)?;
            let mut add = tx
                .prepare_cached("INSERT INTO history_servers (game, addr) VALUES (?1, ?2)")
                .map_err(db)?;
            let mut ids = Vec::with_capacity(batch.servers.len());
            for (addr, game) in &batch.servers {
                let id: i64 = match find
                    .query_row(params![addr, game], |r| r.get(0))
                    .optional()
                    .map_err(db)?
                {
                    Some(id) => id,
                    None => {
                        add.execute(params![game, addr]).map_err(db)?;
                        tx.last_insert_rowid()
                    }
                };
                ids.push(id);
            }
            for (sql, rows) in [
                (upsert!("history_minute", "minute"), &batch.minutes),
                (upsert!("history_hour", "hour"), &batch.hours),
            ] {
                let mut st = tx.prepare_cached(sql).map_err(db)?;
                for (&(i, number), d) in rows {
                    let id = ids.get(i).copied().unwrap_or_default();
                    st.execute(params![
                        id, number, d.n, d.ok, d.pmin, d.pmax, d.psum, d.slots
                    ])
                    .map_err(db)?;
                }
            }
            for ((id, (_, game)), last) in ids.iter().zip(&batch.servers).zip(&batch.last) {
                live.note(*id, game, *last);
            }
        }
        tx.commit().map_err(db)?;
        Ok(())
    }

    fn close_minutes(&mut self, now: Timestamp) -> Result<usize, StoreError> {
        let minutes = fold::to_close(self.closed, now);
        if minutes.is_empty() {
            return Ok(0);
        }
        let tx = (self.conn)
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        {
            let mut gm = tx
                .prepare_cached(
                    "INSERT INTO history_game_minute (game, minute, listed, up, players)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                )
                .map_err(db)?;
            let mut gh = tx
                .prepare_cached(
                    "INSERT INTO history_game_hour
                        (game, hour, minutes, listed, up_min, up_max, up_sum, pl_min, pl_max, pl_sum)
                     VALUES (?1, ?2, 1, ?3, ?4, ?4, ?4, ?5, ?5, ?5)
                     ON CONFLICT (game, hour) DO UPDATE SET minutes = minutes + 1,
                        listed = max(listed, excluded.listed),
                        up_min = min(up_min, excluded.up_min), up_max = max(up_max, excluded.up_max),
                        up_sum = up_sum + excluded.up_sum,
                        pl_min = min(pl_min, excluded.pl_min), pl_max = max(pl_max, excluded.pl_max),
                        pl_sum = pl_sum + excluded.pl_sum",
                )
                .map_err(db)?;
            for m in minutes.clone() {
                for g in self.live.count(m) {
                    let game: &str = &g.game;
                    // A minute already written (by an earlier run) is not counted twice.
                    if gm
                        .execute(params![game, m, g.listed, g.up, g.players])
                        .map_err(db)?
                        > 0
                    {
                        gh.execute(params![game, m / 60, g.listed, g.up, g.players])
                            .map_err(db)?;
                    }
                }
            }
        }
        tx.commit().map_err(db)?;
        self.closed = Some(minutes.end - 1);
        self.live.forget_before(now);
        Ok(usize::try_from(minutes.end - minutes.start).unwrap_or(0))
    }

    fn prune(&mut self, minute: i64, hour: i64) -> Result<usize, StoreError> {
        let tx = (self.conn)
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let mut n = 0;
        n += tx
            .execute("DELETE FROM history_minute WHERE minute < ?1", [minute])
            .map_err(db)?;
        n += tx
            .execute(
                "DELETE FROM history_game_minute WHERE minute < ?1",
                [minute],
            )
            .map_err(db)?;
        n += tx
            .execute("DELETE FROM history_hour WHERE hour < ?1", [hour])
            .map_err(db)?;
        n += tx
            .execute("DELETE FROM history_game_hour WHERE hour < ?1", [hour])
            .map_err(db)?;
        // Servers with no row left (each test is a look-up of the key's first column).
        tx.execute(
            "DELETE FROM history_servers WHERE
                NOT EXISTS (SELECT 1 FROM history_hour h WHERE h.server = history_servers.id)
                AND NOT EXISTS (SELECT 1 FROM history_minute m WHERE m.server = history_servers.id)",
            [],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(n)
    }

    fn series(
        &mut self,
        addr: &str,
        game: Option<&str>,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<ServerPoint>, StoreError> {
        let ids = self.server_ids(addr, game)?;
        let limit = i64::try_from(MAX_RANGE_ROWS).unwrap_or(i64::MAX);
        let sql = match resolution {
            Resolution::Minute => {
                "SELECT minute, n, ok, pmin, pmax, psum, slots FROM history_minute
                 WHERE server = ?1 AND minute >= ?2 ORDER BY minute DESC LIMIT ?3"
            }
            Resolution::Hour => {
                "SELECT hour, n, ok, pmin, pmax, psum, slots FROM history_hour
                 WHERE server = ?1 AND hour >= ?2 ORDER BY hour DESC LIMIT ?3"
            }
        };
        let mut out = Vec::new();
        let mut st = self.conn.prepare_cached(sql).map_err(db)?;
        for id in ids {
            let rows = st
                .query_map(params![id, resolution.number(since), limit], |r| {
                    Ok(ServerPoint::of_row(
                        (
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                            r.get(6)?,
                        ),
                        resolution,
                    ))
                })
                .map_err(db)?;
            for p in rows {
                out.push(p.map_err(db)?);
            }
        }
        // Several games at one address (no game given): one series, by time.
        out.sort_by_key(|p| p.at);
        let skip = out.len().saturating_sub(MAX_RANGE_ROWS);
        out.drain(..skip);
        Ok(out)
    }

    fn game_series(
        &mut self,
        game: &str,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<GamePoint>, StoreError> {
        let limit = i64::try_from(MAX_RANGE_ROWS).unwrap_or(i64::MAX);
        let sql = match resolution {
            Resolution::Minute => {
                "SELECT minute, listed, up, up, up, 1, players, players, players FROM history_game_minute
                 WHERE game = ?1 AND minute >= ?2 ORDER BY minute DESC LIMIT ?3"
            }
            Resolution::Hour => {
                "SELECT hour, listed, up_min, up_sum, up_max, minutes, pl_min, pl_sum, pl_max
                 FROM history_game_hour
                 WHERE game = ?1 AND hour >= ?2 ORDER BY hour DESC LIMIT ?3"
            }
        };
        let mut st = self.conn.prepare_cached(sql).map_err(db)?;
        let rows = st
            .query_map(params![game, resolution.number(since), limit], |r| {
                Ok(GamePoint::of_row(
                    (
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ),
                    resolution,
                ))
            })
            .map_err(db)?;
        let mut out = rows.collect::<Result<Vec<_>, _>>().map_err(db)?;
        out.reverse();
        Ok(out)
    }
}

/// The game counts' state rebuilt from each server's last minute point (a look-up at the end
/// of each server's rows), leaving out those more than [`LIVE_FOR`] older than the newest:
/// after a restart the first closed minute counts the servers sampled before it.
fn rebuild_live(tx: &rusqlite::Transaction<'_>) -> Result<LiveSet, StoreError> {
    let mut st = tx
        .prepare(
            "SELECT s.id, s.game, m.minute, m.ok, m.psum FROM history_servers s
             JOIN history_minute m ON m.server = s.id
                AND m.minute = (SELECT max(minute) FROM history_minute WHERE server = s.id)",
        )
        .map_err(db)?;
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)?;
    let newest = rows.iter().map(|r| r.2).max().unwrap_or(0);
    let mut live = LiveSet::default();
    for (id, game, minute, answered, psum) in rows {
        if newest - minute <= whole(LIVE_FOR, MINUTE_MS) {
            live.note_point(id, &game, minute, answered, psum);
        }
    }
    Ok(live)
}
