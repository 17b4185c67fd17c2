//! Player-count history: every poll result the poller reports ([`PollSample`]) is folded into
//! per-server **minute points** (kept [`MINUTE_RETENTION`], or the configured
//! `history.retention` when longer) and **hourly rollups** (kept [`HOUR_RETENTION`]), and every
//! closed minute adds one **per-game aggregate** (servers listed and up, players) per minute and
//! per hour, so the web page, `/api/v1/servers/{address}/history?range=` and
//! `/api/v1/games/{game}/history` read a few thousand rows at most. `docs/history.md` describes
//! the tables, the limits and the sizes measured.
//!
//! A minute point or an hourly rollup is one row keyed by (server, minute or hour number):
//! samples seen, samples answered, and the fewest, most and summed players of the answered
//! ones (the mean is the sum over the answered), the last slots. Both are written as each
//! sample arrives (an upsert), so an hour's rollup is complete when its last sample is.
//! A game's aggregate needs every server's state at a minute, and the poller reaches a server
//! only every few minutes: the writer keeps each server's last sample in memory (forgotten
//! [`LIVE_FOR`] after it), and when a minute closes ([`HistoryStore::close_minutes`]) counts,
//! per game, the servers with a sample that recent, those whose last sample answered, and
//! their players.
//!
//! Servers the poller does not poll (management servers, which tell their state themselves;
//! every server while the poller is off) get their samples from what the registry knows:
//! [`feed_unpolled`] looks at each new snapshot and writes a sample for such a server when its
//! player count or slots changed, and at least once per poll interval ([`Unpolled`]).
//!
//! [`HistoryStore`] is the boundary (like [`muster_core::store::Store`] for records);
//! [`SqliteHistory`] keeps the rows in the daemon's SQLite file on a connection of its own (WAL
//! lets it write beside the record store), and folds the raw samples of the table earlier
//! versions wrote (`poll_history`) into minute points and rollups when it opens. [`run`] is the
//! task that receives samples, writes them in batches at least once a second, closes minutes
//! and prunes rows past their retention every minute.
//!
//! Does not: keep history of a server across a change of address; rebuild the per-game state
//! after a restart (game aggregates restart with the first poll of each server).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use tokio::sync::mpsc;

use muster_core::poll::PollSample;
use muster_core::registry::{Record, Timestamp};
use muster_store::{DB_FILE, StoreError};

/// A history database error, as a store error.
fn db(e: rusqlite::Error) -> StoreError {
    StoreError::History(e.into())
}

/// Default window of the history route without `range` (config `history.retention`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Minute points are kept this long at least (longer when `history.retention` is longer).
pub const MINUTE_RETENTION: Duration = Duration::from_secs(48 * 3600);
/// Hourly rollups (per server and per game) are kept this long.
pub const HOUR_RETENTION: Duration = Duration::from_secs(400 * 24 * 3600);
/// A server counts in its game's aggregate while its last sample is at most this old (two
/// default poll intervals and some).
pub const LIVE_FOR: Duration = Duration::from_secs(12 * 60);
/// A minute is closed this long after it ends, so that a sample of its last second still
/// being written counts in it.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Most rows one range call returns (the newest): 400 days of hours (9,600) and 48 hours of
/// minutes (2,880) fit.
pub const MAX_RANGE_ROWS: usize = 10_000;
/// Samples are written at least this often.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(1);
/// Old rows are pruned at least this often.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Samples buffered before a write is forced (bounds memory between writes).
pub const MAX_BUFFERED: usize = 4096;
/// While writes keep failing, a failure is logged at most this often (with the samples dropped
/// since the last line).
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

/// The minute number of `t` (minutes since the unix epoch).
#[must_use]
pub fn minute_of(t: Timestamp) -> i64 {
    i64::try_from(t.0 / MINUTE_MS).unwrap_or(i64::MAX)
}

/// The hour number of `t` (hours since the unix epoch).
#[must_use]
pub fn hour_of(t: Timestamp) -> i64 {
    i64::try_from(t.0 / HOUR_MS).unwrap_or(i64::MAX)
}

fn whole(d: Duration, unit_ms: u64) -> i64 {
    i64::try_from(u64::try_from(d.as_millis()).unwrap_or(u64::MAX) / unit_ms).unwrap_or(i64::MAX)
}

/// One point of one server for the old history route: a minute, its mean players.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPoint {
    /// The start of the minute.
    pub at: Timestamp,
    /// Whether the server answered a poll in that minute.
    pub ok: bool,
    /// Players (the mean of the minute, rounded), when it answered.
    pub num_players: Option<u32>,
    /// Slots, when it answered.
    pub max_players: Option<u32>,
}

/// How fine a series is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Minute points.
    Minute,
    /// Hourly rollups.
    Hour,
}

impl Resolution {
    fn unit_ms(self) -> u64 {
        match self {
            Self::Minute => MINUTE_MS,
            Self::Hour => HOUR_MS,
        }
    }

    fn number(self, t: Timestamp) -> i64 {
        match self {
            Self::Minute => minute_of(t),
            Self::Hour => hour_of(t),
        }
    }
}

/// One minute point or hourly rollup of one server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerPoint {
    /// The start of the minute or hour, unix seconds.
    pub at: u64,
    /// Samples in it.
    pub samples: u32,
    /// Samples where the server answered.
    pub answered: u32,
    /// Fewest players answered (`None`: never answered).
    pub min: Option<u32>,
    /// Mean players over the answered samples.
    pub avg: Option<f64>,
    /// Most players answered.
    pub max: Option<u32>,
    /// Slots, last answered.
    pub slots: Option<u32>,
}

/// One minute or hour of one game.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GamePoint {
    /// The start of the minute or hour, unix seconds.
    pub at: u64,
    /// Servers with a recent sample (an hour: the most of its minutes).
    pub servers: u32,
    /// Servers up: fewest, mean and most over the minutes (a minute: all three the same).
    pub up: (u32, f64, u32),
    /// Players on them: fewest, mean and most over the minutes.
    pub players: (u32, f64, u32),
}

/// Where samples are kept. Methods are blocking and must be quick.
pub trait HistoryStore: Send + fmt::Debug {
    /// Writes samples in one transaction.
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError>;
    /// Writes the game aggregates of every minute ended [`CLOSE_GRACE`] before `now` and not
    /// yet written; returns how many minutes were closed.
    fn close_minutes(&mut self, now: Timestamp) -> Result<usize, StoreError>;
    /// Deletes minute rows before minute `minute` and hourly rows before hour `hour`; returns
    /// how many rows went.
    fn prune(&mut self, minute: i64, hour: i64) -> Result<usize, StoreError>;
    /// Minute points of the server registered at `addr` (as `GameAddr` displays it),
    /// optionally of one game, at or after `since`, oldest first, at most [`MAX_RANGE_ROWS`]
    /// (the newest).
    fn range(
        &mut self,
        addr: &str,
        game: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        Ok(self
            .series(addr, game, Resolution::Minute, since)?
            .into_iter()
            .map(|p| HistoryPoint {
                at: Timestamp::from_secs(p.at),
                ok: p.answered > 0,
                num_players: p.avg.map(|a| a.round() as u32),
                max_players: if p.answered > 0 { p.slots } else { None },
            })
            .collect())
    }
    /// Points of a server at `resolution` from `since`, oldest first, at most
    /// [`MAX_RANGE_ROWS`] (the newest).
    fn series(
        &mut self,
        addr: &str,
        game: Option<&str>,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<ServerPoint>, StoreError>;
    /// Points of a game at `resolution` from `since`, oldest first, at most
    /// [`MAX_RANGE_ROWS`] (the newest).
    fn game_series(
        &mut self,
        game: &str,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<GamePoint>, StoreError>;
}

/// A server's last sample, for the game aggregates.
#[derive(Debug, Clone)]
struct Live {
    game: Arc<str>,
    at: Timestamp,
    ok: bool,
    players: u32,
}

/// [`HistoryStore`] in the daemon's SQLite file.
#[derive(Debug)]
pub struct SqliteHistory {
    conn: Connection,
    /// The address text of the sample being written (reused: no allocation per sample).
    addr: String,
    /// Each server's last sample by server id, forgotten [`LIVE_FOR`] after it.
    live: HashMap<i64, Live>,
    /// The last minute whose game aggregates were written.
    closed: Option<i64>,
}

/// The page cache of the history's connection, KiB (SQLite's default is 2,000 KiB): appends
/// touch the last leaf of each server's rows in two tables; a range query reads one server's
/// rows, a few dozen pages. The operating system's cache holds the rest.
pub const HISTORY_CACHE_KIB: i64 = 256;

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

/// The upsert of one sample into a minute or hour row (`{t}`: the table, `{k}`: its time column).
macro_rules! upsert {
    ($t:literal, $k:literal) => {
        concat!(
            "INSERT INTO ",
            $t,
            " (server, ",
            $k,
            ", n, ok, pmin, pmax, psum, slots)
             VALUES (?1, ?2, 1, ?3, ?4, ?4, ?5, ?6)
             ON CONFLICT (server, ",
            $k,
            ") DO UPDATE SET n = n + 1, ok = ok + excluded.ok,
                pmin = min(coalesce(pmin, excluded.pmin), coalesce(excluded.pmin, pmin)),
                pmax = max(coalesce(pmax, excluded.pmax), coalesce(excluded.pmax, pmax)),
                psum = psum + excluded.psum, slots = coalesce(excluded.slots, slots)"
        )
    };
}

fn to_u32(v: Option<i64>) -> Option<u32> {
    v.map(|v| u32::try_from(v.max(0)).unwrap_or(u32::MAX))
}

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

fn at_secs(number: i64, unit_ms: u64) -> u64 {
    u64::try_from(number.max(0)).unwrap_or(0) * (unit_ms / 1000)
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
        tx.commit().map_err(db)?;
        Ok(Self {
            conn,
            addr: String::new(),
            live: HashMap::new(),
            closed,
        })
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
        use std::fmt::Write as _;
        let Self {
            conn, addr, live, ..
        } = self;
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
            let mut minute = tx
                .prepare_cached(upsert!("history_minute", "minute"))
                .map_err(db)?;
            let mut hour = tx
                .prepare_cached(upsert!("history_hour", "hour"))
                .map_err(db)?;
            for s in samples {
                addr.clear();
                let _ = write!(addr, "{}", s.key.addr);
                let game = s.key.game.as_str();
                let id: i64 = match find
                    .query_row(params![addr.as_str(), game], |r| r.get(0))
                    .optional()
                    .map_err(db)?
                {
                    Some(id) => id,
                    None => {
                        add.execute(params![game, addr.as_str()]).map_err(db)?;
                        tx.last_insert_rowid()
                    }
                };
                let players = if s.ok { s.num_players } else { None };
                let slots = if s.ok { s.max_players } else { None };
                let sum = i64::from(players.unwrap_or(0));
                let ok = i64::from(s.ok);
                minute
                    .execute(params![id, minute_of(s.at), ok, players, sum, slots])
                    .map_err(db)?;
                hour.execute(params![id, hour_of(s.at), ok, players, sum, slots])
                    .map_err(db)?;
                let fresher = live.get(&id).is_none_or(|l| l.at <= s.at);
                if fresher {
                    let game = match live.get(&id) {
                        Some(l) if &*l.game == game => Arc::clone(&l.game),
                        _ => Arc::from(game),
                    };
                    live.insert(
                        id,
                        Live {
                            game,
                            at: s.at,
                            ok: s.ok,
                            players: players.unwrap_or(0),
                        },
                    );
                }
            }
        }
        tx.commit().map_err(db)?;
        Ok(())
    }

    fn close_minutes(&mut self, now: Timestamp) -> Result<usize, StoreError> {
        // Minutes before `upto` have ended at least the grace ago.
        let upto = minute_of(Timestamp(
            now.0
                .saturating_sub(u64::try_from(CLOSE_GRACE.as_millis()).unwrap_or(u64::MAX)),
        ));
        // After a stop longer than LIVE_FOR no server is live in the minutes between: they
        // are skipped, not written empty.
        let from = self
            .closed
            .map_or(upto - 1, |c| c + 1)
            .max(upto - whole(LIVE_FOR, MINUTE_MS) - 1);
        if from >= upto {
            return Ok(0);
        }
        let live_ms = u64::try_from(LIVE_FOR.as_millis()).unwrap_or(u64::MAX);
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
            let mut games: HashMap<&str, (i64, i64, i64)> = HashMap::new();
            for m in from..upto {
                let end = u64::try_from(m + 1).unwrap_or(0) * MINUTE_MS;
                games.clear();
                for l in self.live.values() {
                    // Live at the minute's end: sampled within LIVE_FOR before it (or after
                    // it, when minutes are caught up late).
                    if end.saturating_sub(l.at.0) > live_ms {
                        continue;
                    }
                    let g = games.entry(&l.game).or_default();
                    g.0 += 1;
                    if l.ok {
                        g.1 += 1;
                        g.2 += i64::from(l.players);
                    }
                }
                let hour = m / 60;
                for (game, (listed, up, players)) in &games {
                    gm.execute(params![game, m, listed, up, players])
                        .map_err(db)?;
                    gh.execute(params![game, hour, listed, up, players])
                        .map_err(db)?;
                }
            }
        }
        tx.commit().map_err(db)?;
        self.closed = Some(upto - 1);
        self.live
            .retain(|_, l| now.0.saturating_sub(l.at.0) <= live_ms);
        Ok(usize::try_from(upto - from).unwrap_or(0))
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
        let unit = resolution.unit_ms();
        let mut out = Vec::new();
        let mut st = self.conn.prepare_cached(sql).map_err(db)?;
        for id in ids {
            let rows = st
                .query_map(params![id, resolution.number(since), limit], |r| {
                    let ok = count(r.get(2)?);
                    let sum: i64 = r.get(5)?;
                    Ok(ServerPoint {
                        at: at_secs(r.get(0)?, unit),
                        samples: count(r.get(1)?),
                        answered: ok,
                        min: to_u32(r.get(3)?),
                        avg: (ok > 0).then(|| sum as f64 / f64::from(ok)),
                        max: to_u32(r.get(4)?),
                        slots: to_u32(r.get(6)?),
                    })
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
        let unit = resolution.unit_ms();
        let mut st = self.conn.prepare_cached(sql).map_err(db)?;
        let rows = st
            .query_map(params![game, resolution.number(since), limit], |r| {
                let minutes = f64::from(count(r.get(5)?).max(1));
                let up_sum: i64 = r.get(3)?;
                let pl_sum: i64 = r.get(7)?;
                Ok(GamePoint {
                    at: at_secs(r.get(0)?, unit),
                    servers: count(r.get(1)?),
                    up: (count(r.get(2)?), up_sum as f64 / minutes, count(r.get(4)?)),
                    players: (count(r.get(6)?), pl_sum as f64 / minutes, count(r.get(8)?)),
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

    fn close_minutes(&mut self, now: Timestamp) -> Result<usize, StoreError> {
        self.get()?.close_minutes(now)
    }

    fn prune(&mut self, minute: i64, hour: i64) -> Result<usize, StoreError> {
        self.get()?.prune(minute, hour)
    }

    fn series(
        &mut self,
        addr: &str,
        game: Option<&str>,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<ServerPoint>, StoreError> {
        self.get()?.series(addr, game, resolution, since)
    }

    fn game_series(
        &mut self,
        game: &str,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<GamePoint>, StoreError> {
        self.get()?.game_series(game, resolution, since)
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

    /// How long minute points are kept: [`MINUTE_RETENTION`], or the retention when longer.
    #[must_use]
    pub fn minute_retention(&self) -> Duration {
        self.retention.max(MINUTE_RETENTION)
    }

    /// Writes the game aggregates of the minutes closed by `now`.
    pub fn close_minutes(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.with(|s| s.close_minutes(now))
    }

    /// Deletes minute points older than [`Self::minute_retention`] and hourly rollups older
    /// than [`HOUR_RETENTION`] before `now`.
    pub fn prune(&self, now: Timestamp) -> Result<usize, StoreError> {
        let minute = minute_of(now) - whole(self.minute_retention(), MINUTE_MS);
        let hour = hour_of(now) - whole(HOUR_RETENTION, HOUR_MS);
        self.with(|s| s.prune(minute, hour))
    }

    /// The minute points of `addr` within the retention before `now`, oldest first (the
    /// history route without `range`).
    pub fn recent(
        &self,
        addr: &str,
        game: Option<&str>,
        now: Timestamp,
    ) -> Result<Vec<HistoryPoint>, StoreError> {
        let ms = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        self.with(|s| s.range(addr, game, Timestamp(now.0.saturating_sub(ms))))
    }

    /// Points of `addr` at `resolution` for `span` before `now`, oldest first.
    pub fn series(
        &self,
        addr: &str,
        game: Option<&str>,
        resolution: Resolution,
        span: Duration,
        now: Timestamp,
    ) -> Result<Vec<ServerPoint>, StoreError> {
        let ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        self.with(|s| s.series(addr, game, resolution, Timestamp(now.0.saturating_sub(ms))))
    }

    /// Points of `game` at `resolution` for `span` before `now`, oldest first.
    pub fn game_series(
        &self,
        game: &str,
        resolution: Resolution,
        span: Duration,
        now: Timestamp,
    ) -> Result<Vec<GamePoint>, StoreError> {
        let ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        self.with(|s| s.game_series(game, resolution, Timestamp(now.0.saturating_sub(ms))))
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
            _ = write.tick() => {
                flush(&mut buf).await;
                let h = history.clone();
                match muster_core::bulk::spawn(move || h.close_minutes(Timestamp::now())).await {
                    Ok(Ok(_)) => {}
                    // The writes' failure line covers a broken store.
                    Ok(Err(e)) => tracing::debug!(error = %e, "history minute close failed"),
                    Err(e) => tracing::debug!(error = %e, "history minute close failed"),
                }
            }
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
    last: HashMap<u64, Last>,
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
            last: HashMap::new(),
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

    const MIN: u64 = 60_000;
    const HOUR: u64 = 3_600_000;
    /// A virtual clock's start: a whole day, so minutes and hours start at round numbers.
    const T0: u64 = 20_000 * 24 * HOUR;

    fn failed(addr: &str, at: u64) -> PollSample {
        PollSample {
            ok: false,
            num_players: None,
            max_players: None,
            ..sample(addr, at, 0)
        }
    }

    fn mem(retention: Duration) -> History {
        History::new(Box::new(SqliteHistory::in_memory().unwrap()), retention)
    }

    #[test]
    fn samples_fold_into_minute_points_the_old_route_reads() {
        let h = mem(Duration::from_secs(600));
        h.append(&[
            sample("127.0.0.1:7777", T0 + 1_000, 1),
            sample("127.0.0.1:7777", T0 + 30_000, 4),
            sample("127.0.0.1:7778", T0 + 5_000, 9),
            failed("127.0.0.1:7777", T0 + MIN + 1),
            sample("127.0.0.1:7777", T0 + 2 * MIN, 3),
        ])
        .unwrap();
        let got = h
            .recent("127.0.0.1:7777", None, Timestamp(T0 + 3 * MIN))
            .unwrap();
        let n: Vec<_> = got.iter().map(|p| (p.at.0, p.ok, p.num_players)).collect();
        // The first minute's mean of 1 and 4 is 2.5, rounded.
        assert_eq!(
            n,
            [
                (T0, true, Some(3)),
                (T0 + MIN, false, None),
                (T0 + 2 * MIN, true, Some(3))
            ]
        );
        assert_eq!(got[0].max_players, Some(16));
        let pts = h
            .series(
                "127.0.0.1:7777",
                Some("ut2"),
                Resolution::Minute,
                Duration::from_secs(3600),
                Timestamp(T0 + 3 * MIN),
            )
            .unwrap();
        assert_eq!(
            (pts[0].samples, pts[0].answered, pts[0].min, pts[0].max),
            (2, 2, Some(1), Some(4))
        );
        assert_eq!(pts[0].avg, Some(2.5));
        assert!(
            h.recent("127.0.0.1:7777", Some("other"), Timestamp(T0 + 3 * MIN))
                .unwrap()
                .is_empty()
        );
        // The old route's window is the retention: 10 minutes.
        assert!(
            h.recent("127.0.0.1:7777", None, Timestamp(T0 + 13 * MIN))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn hourly_rollups_keep_min_mean_max_and_the_up_share() {
        let h = mem(DEFAULT_RETENTION);
        let a = "127.0.0.1:7777";
        h.append(&[
            sample(a, T0, 2),
            sample(a, T0 + 20 * MIN, 10),
            failed(a, T0 + 40 * MIN),
            sample(a, T0 + 59 * MIN, 6),
            sample(a, T0 + HOUR, 1),
        ])
        .unwrap();
        let pts = h
            .series(
                a,
                None,
                Resolution::Hour,
                Duration::from_secs(30 * 24 * 3600),
                Timestamp(T0 + 2 * HOUR),
            )
            .unwrap();
        assert_eq!(pts.len(), 2);
        let p = pts[0];
        assert_eq!(p.at, T0 / 1000);
        assert_eq!((p.samples, p.answered), (4, 3), "up share 3/4");
        assert_eq!((p.min, p.max), (Some(2), Some(10)));
        assert_eq!(p.avg, Some(6.0));
        assert_eq!(pts[1].avg, Some(1.0));
    }

    #[test]
    fn closed_minutes_count_each_games_live_servers() {
        let h = mem(DEFAULT_RETENTION);
        let mut s2 = sample("127.0.0.2:1", T0 + 10_000, 5);
        s2.key = ServerKey::new("q3", GameAddr::parse("127.0.0.2:1").unwrap());
        h.append(&[
            sample("127.0.0.1:1", T0 + 1_000, 3),
            sample("127.0.0.1:2", T0 + 2_000, 4),
            failed("127.0.0.1:3", T0 + 3_000),
            s2,
        ])
        .unwrap();
        // The first close starts at the minute before now's.
        assert_eq!(h.close_minutes(Timestamp(T0 + MIN + 5_000)).unwrap(), 1);
        // Not again, and not within the grace of the next minute's end.
        assert_eq!(h.close_minutes(Timestamp(T0 + 2 * MIN + 4_000)).unwrap(), 0);
        // Five minutes later, with no new sample: the servers are still live (a poll every
        // few minutes), and each minute is written.
        assert_eq!(h.close_minutes(Timestamp(T0 + 6 * MIN + 5_000)).unwrap(), 5);
        let span = Duration::from_secs(3600);
        let pts = h
            .game_series("ut2", Resolution::Minute, span, Timestamp(T0 + 7 * MIN))
            .unwrap();
        assert_eq!(pts.len(), 6);
        for p in &pts {
            assert_eq!((p.servers, p.up.2, p.players.2), (3, 2, 7), "{p:?}");
        }
        let q3 = h
            .game_series("q3", Resolution::Minute, span, Timestamp(T0 + 7 * MIN))
            .unwrap();
        assert_eq!(q3[0].players.0, 5);
        // One server leaves the game's count when its last sample is LIVE_FOR old.
        h.append(&[sample("127.0.0.1:1", T0 + 10 * MIN, 10)])
            .unwrap();
        h.close_minutes(Timestamp(T0 + 14 * MIN + 5_000)).unwrap();
        let pts = h
            .game_series("ut2", Resolution::Minute, span, Timestamp(T0 + 15 * MIN))
            .unwrap();
        let last = pts.last().unwrap();
        assert_eq!(last.at, (T0 + 13 * MIN) / 1000);
        assert_eq!((last.servers, last.players.2), (1, 10));
        // The hour: fewest, mean and most players over the 14 minutes written.
        let hour = h
            .game_series("ut2", Resolution::Hour, span, Timestamp(T0 + 15 * MIN))
            .unwrap();
        assert_eq!(hour.len(), 1);
        assert_eq!((hour[0].players.0, hour[0].players.2), (7, 14));
        assert_eq!(hour[0].servers, 3);
    }

    #[test]
    fn a_long_stop_is_not_written_as_empty_minutes() {
        let h = mem(DEFAULT_RETENTION);
        h.append(&[sample("127.0.0.1:1", T0, 3)]).unwrap();
        h.close_minutes(Timestamp(T0 + MIN + 5_000)).unwrap();
        // A day later: at most LIVE_FOR of minutes are looked at, and nothing is live.
        let n = h.close_minutes(Timestamp(T0 + 24 * HOUR + 5_000)).unwrap();
        assert!(
            n <= usize::try_from(LIVE_FOR.as_secs() / 60 + 1).unwrap(),
            "{n}"
        );
        let pts = h
            .game_series(
                "ut2",
                Resolution::Minute,
                Duration::from_secs(48 * 3600),
                Timestamp(T0 + 25 * HOUR),
            )
            .unwrap();
        assert_eq!(pts.len(), 1);
    }

    #[test]
    fn prune_keeps_minutes_48_hours_and_hours_400_days() {
        let h = mem(DEFAULT_RETENTION);
        let a = "127.0.0.1:1";
        h.append(&[sample(a, T0, 1), sample(a, T0 + 47 * HOUR, 2)])
            .unwrap();
        let now = Timestamp(T0 + 48 * HOUR + MIN);
        // The first minute (and nothing else) is past 48 hours.
        assert_eq!(h.prune(now).unwrap(), 1);
        let year = Duration::from_secs(400 * 24 * 3600);
        let minutes = h.series(a, None, Resolution::Minute, year, now).unwrap();
        assert_eq!(minutes.len(), 1);
        assert_eq!(
            h.series(a, None, Resolution::Hour, year, now)
                .unwrap()
                .len(),
            2
        );
        // 400 days after the first hour, it goes; the server stays while a row is left.
        let later = Timestamp(T0 + 400 * 24 * HOUR + HOUR);
        h.prune(later).unwrap();
        assert_eq!(
            h.series(a, None, Resolution::Hour, year, later)
                .unwrap()
                .len(),
            1
        );
        let much_later = Timestamp(T0 + 402 * 24 * HOUR);
        h.prune(much_later).unwrap();
        assert!(
            h.series(a, None, Resolution::Hour, year, much_later)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_longer_retention_keeps_minutes_longer() {
        let h = mem(Duration::from_secs(72 * 3600));
        assert_eq!(h.minute_retention(), Duration::from_secs(72 * 3600));
        assert_eq!(mem(DEFAULT_RETENTION).minute_retention(), MINUTE_RETENTION);
    }

    #[test]
    fn the_old_sample_table_is_folded_in_when_opened() {
        let dir =
            std::env::temp_dir().join(format!("muster-history-migrate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let c = Connection::open(dir.join(DB_FILE)).unwrap();
            c.execute_batch(
                "CREATE TABLE poll_history (addr TEXT NOT NULL, game TEXT NOT NULL,
                    instance INTEGER NOT NULL, at INTEGER NOT NULL, ok INTEGER NOT NULL,
                    num_players INTEGER, max_players INTEGER);
                 CREATE INDEX poll_history_addr_at ON poll_history (addr, at);",
            )
            .unwrap();
            let mut st = c
                .prepare("INSERT INTO poll_history VALUES (?1, 'ut2', 0, ?2, ?3, ?4, ?5)")
                .unwrap();
            for (addr, at, ok, n) in [
                ("127.0.0.1:1", T0, true, Some(2)),
                ("127.0.0.1:1", T0 + 10_000, true, Some(6)),
                ("127.0.0.1:1", T0 + MIN, false, None),
                ("127.0.0.1:2", T0 + HOUR, true, Some(1)),
            ] {
                let slots = n.map(|_| 8);
                st.execute(params![addr, i64::try_from(at).unwrap(), ok, n, slots])
                    .unwrap();
            }
        }
        let mut s = SqliteHistory::open(&dir).unwrap();
        let old: i64 = s
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'poll_history'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(old, 0, "the old table is dropped");
        let since = Timestamp(T0);
        let m = s
            .series("127.0.0.1:1", None, Resolution::Minute, since)
            .unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].min, m[0].max, m[0].avg),
            (Some(2), Some(6), Some(4.0))
        );
        assert_eq!((m[1].samples, m[1].answered), (1, 0));
        let hr = s
            .series("127.0.0.1:1", None, Resolution::Hour, since)
            .unwrap();
        assert_eq!((hr.len(), hr[0].samples, hr[0].slots), (1, 3, Some(8)));
        let other = s
            .series("127.0.0.1:2", Some("ut2"), Resolution::Hour, since)
            .unwrap();
        assert_eq!(other.len(), 1);
        drop(s);
        // Opening again finds nothing to migrate and keeps the rows.
        let mut s = SqliteHistory::open(&dir).unwrap();
        assert_eq!(
            s.series("127.0.0.1:1", None, Resolution::Minute, since)
                .unwrap()
                .len(),
            2
        );
        std::fs::remove_dir_all(&dir).unwrap();
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
