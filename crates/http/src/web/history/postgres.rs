//! [`PostgresHistory`]: the history's tables in the database of the daemon's PostgreSQL store,
//! shared by every `muster serve` on it. All its SQL is here.
//!
//! Several writers: minute points and rollups are upserts that add (the batch's changes are
//! folded first, see the `fold` module), so two instances' samples of one server in one
//! minute make one row counting both. A closed minute's game counts are read from the minute
//! points (every writer's), and written by whichever instance closes the minute first: its
//! game row is inserted only if absent, and only an inserted row is added to the hour. Each
//! write takes one transaction-scoped advisory lock, so writers never wait on each other's
//! rows in a different order (no deadlock) and a close sees the points written before it.

use std::future::Future;
use std::sync::Arc;

use muster_core::poll::PollSample;
use muster_core::registry::Timestamp;
use muster_store::PgShared;
use muster_store::StoreError;
use muster_store::postgres::OP_TIMEOUT;
use muster_store::postgres::tokio_postgres;

use super::fold::{self, Batch, PointRow};
use super::{GamePoint, GameRow, HistoryStore, MAX_RANGE_ROWS, Resolution, ServerPoint, ServerRow};

/// The advisory lock every history write holds ("mstr" + a number the record store does not
/// use).
const HISTORY_LOCK: i64 = 0x6d73_7472_0000_0010;

/// The tables: the SQLite ones with the same columns, plus an index on the time of the
/// minute and hour tables (a close reads every server's last minutes; pruning deletes by
/// time). Created at open under the lock, so two instances starting together create them
/// once.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS history_servers (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    game text NOT NULL,
    addr text NOT NULL,
    UNIQUE (addr, game)
);
CREATE TABLE IF NOT EXISTS history_minute (
    server bigint NOT NULL, minute bigint NOT NULL,
    n bigint NOT NULL, ok bigint NOT NULL,
    pmin bigint, pmax bigint, psum bigint NOT NULL, slots bigint,
    PRIMARY KEY (server, minute)
);
CREATE INDEX IF NOT EXISTS history_minute_by_minute ON history_minute (minute);
CREATE TABLE IF NOT EXISTS history_hour (
    server bigint NOT NULL, hour bigint NOT NULL,
    n bigint NOT NULL, ok bigint NOT NULL,
    pmin bigint, pmax bigint, psum bigint NOT NULL, slots bigint,
    PRIMARY KEY (server, hour)
);
CREATE INDEX IF NOT EXISTS history_hour_by_hour ON history_hour (hour);
CREATE TABLE IF NOT EXISTS history_game_minute (
    game text NOT NULL, minute bigint NOT NULL,
    listed bigint NOT NULL, up bigint NOT NULL, players bigint NOT NULL,
    PRIMARY KEY (game, minute)
);
CREATE TABLE IF NOT EXISTS history_game_hour (
    game text NOT NULL, hour bigint NOT NULL, minutes bigint NOT NULL, listed bigint NOT NULL,
    up_min bigint NOT NULL, up_max bigint NOT NULL, up_sum bigint NOT NULL,
    pl_min bigint NOT NULL, pl_max bigint NOT NULL, pl_sum bigint NOT NULL,
    PRIMARY KEY (game, hour)
);
";

const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";

const ADD_SERVERS: &str = "INSERT INTO history_servers (addr, game)
    SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT (addr, game) DO NOTHING";

const FIND_SERVERS: &str = "SELECT s.id, u.i FROM unnest($1::text[], $2::text[])
    WITH ORDINALITY AS u(addr, game, i)
    JOIN history_servers s ON s.addr = u.addr AND s.game = u.game";

/// The upsert of a batch's changes into a minute or hour table (`{t}`, time column `{k}`),
/// merging as `fold::Delta::merge` does (`LEAST` and `GREATEST` skip nulls).
macro_rules! upsert {
    ($t:literal, $k:literal) => {
        concat!(
            "INSERT INTO ",
            $t,
            " AS h (server, ",
            $k,
            ", n, ok, pmin, pmax, psum, slots)
             SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::int8[], $5::int8[],
                $6::int8[], $7::int8[], $8::int8[])
             ON CONFLICT (server, ",
            $k,
            ") DO UPDATE SET n = h.n + excluded.n, ok = h.ok + excluded.ok,
                pmin = LEAST(h.pmin, excluded.pmin), pmax = GREATEST(h.pmax, excluded.pmax),
                psum = h.psum + excluded.psum, slots = coalesce(excluded.slots, h.slots)"
        )
    };
}

/// The minute points a close reads: every server's from a minute on, by minute.
const POINTS: &str = "SELECT m.server, s.game, m.minute, m.ok, m.psum
    FROM history_minute m JOIN history_servers s ON s.id = m.server
    WHERE m.minute >= $1 AND m.minute < $2 ORDER BY m.minute, m.server";

/// A close's game minutes, inserted if absent; those inserted are added to their hour.
const CLOSE: &str = "WITH ins AS (
    INSERT INTO history_game_minute (game, minute, listed, up, players)
        SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[])
        ON CONFLICT DO NOTHING
        RETURNING game, minute, listed, up, players
)
INSERT INTO history_game_hour AS h
    (game, hour, minutes, listed, up_min, up_max, up_sum, pl_min, pl_max, pl_sum)
    SELECT game, minute / 60, count(*), max(listed), min(up), max(up), sum(up)::int8,
        min(players), max(players), sum(players)::int8
    FROM ins GROUP BY game, minute / 60
ON CONFLICT (game, hour) DO UPDATE SET minutes = h.minutes + excluded.minutes,
    listed = GREATEST(h.listed, excluded.listed),
    up_min = LEAST(h.up_min, excluded.up_min), up_max = GREATEST(h.up_max, excluded.up_max),
    up_sum = h.up_sum + excluded.up_sum,
    pl_min = LEAST(h.pl_min, excluded.pl_min), pl_max = GREATEST(h.pl_max, excluded.pl_max),
    pl_sum = h.pl_sum + excluded.pl_sum";

const PRUNE: [&str; 4] = [
    "DELETE FROM history_minute WHERE minute < $1",
    "DELETE FROM history_game_minute WHERE minute < $1",
    "DELETE FROM history_hour WHERE hour < $1",
    "DELETE FROM history_game_hour WHERE hour < $1",
];

const PRUNE_SERVERS: &str = "DELETE FROM history_servers s WHERE
    NOT EXISTS (SELECT 1 FROM history_hour h WHERE h.server = s.id)
    AND NOT EXISTS (SELECT 1 FROM history_minute m WHERE m.server = s.id)";

/// A server's points: minutes, hours.
const SERVER_SERIES: (&str, &str) = (
    "SELECT minute, n, ok, pmin, pmax, psum, slots FROM history_minute
     WHERE server IN (SELECT id FROM history_servers
        WHERE addr = $1 AND ($2::text IS NULL OR game = $2))
     AND minute >= $3 ORDER BY minute DESC LIMIT $4",
    "SELECT hour, n, ok, pmin, pmax, psum, slots FROM history_hour
     WHERE server IN (SELECT id FROM history_servers
        WHERE addr = $1 AND ($2::text IS NULL OR game = $2))
     AND hour >= $3 ORDER BY hour DESC LIMIT $4",
);

/// A game's points: minutes, hours.
const GAME_SERIES: (&str, &str) = (
    "SELECT minute, listed, up, up, up, 1::int8, players, players, players
     FROM history_game_minute WHERE game = $1 AND minute >= $2 ORDER BY minute DESC LIMIT $3",
    "SELECT hour, listed, up_min, up_sum, up_max, minutes, pl_min, pl_sum, pl_max
     FROM history_game_hour WHERE game = $1 AND hour >= $2 ORDER BY hour DESC LIMIT $3",
);

/// A history database error, as a store error.
fn db(e: tokio_postgres::Error) -> StoreError {
    StoreError::History(e.into())
}

/// Column `i` of `r` (an error, not a panic, if it is not a `T`).
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    r: &'a tokio_postgres::Row,
    i: usize,
) -> Result<T, StoreError> {
    r.try_get(i).map_err(db)
}

/// [`HistoryStore`] in the database of a PostgreSQL record store ([`PgShared`]), on its
/// connection pool and runtime. Keeps no server state in memory: a close reads it from the
/// minute points, so a restart (or another instance's samples) loses nothing.
#[derive(Debug)]
pub struct PostgresHistory {
    pg: Arc<PgShared>,
    /// The last minute this instance closed (another instance may have closed later ones:
    /// writing them again changes nothing).
    closed: Option<i64>,
}

impl PostgresHistory {
    /// Creates the tables if needed; reads the last closed minute. Blocks.
    pub fn open(pg: Arc<PgShared>) -> Result<Self, StoreError> {
        let mut s = Self { pg, closed: None };
        s.closed = s.run(|pg: Arc<PgShared>| async move {
            let mut c = pg.client().await?;
            let tx = c.transaction().await.map_err(db)?;
            tx.execute(LOCK, &[&HISTORY_LOCK]).await.map_err(db)?;
            tx.batch_execute(SCHEMA).await.map_err(db)?;
            let closed: Option<i64> = tx
                .query_one("SELECT max(minute) FROM history_game_minute", &[])
                .await
                .map_err(db)?
                .try_get(0)
                .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(closed)
        })?;
        Ok(s)
    }

    /// Runs `f` on the database's runtime, within [`OP_TIMEOUT`], and waits for it.
    fn run<T, F>(&self, f: impl FnOnce(Arc<PgShared>) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        let fut = f(Arc::clone(&self.pg));
        self.pg.block(async move {
            tokio::time::timeout(OP_TIMEOUT, fut)
                .await
                .unwrap_or(Err(StoreError::Timeout))
        })?
    }
}

/// A table's rows as the upsert's column arrays, sorted by (server id, time).
fn columns(
    ids: &[i64],
    rows: &std::collections::BTreeMap<(usize, i64), fold::Delta>,
) -> [Vec<Option<i64>>; 8] {
    let mut sorted: Vec<(i64, i64, fold::Delta)> = rows
        .iter()
        .map(|(&(i, t), d)| (ids.get(i).copied().unwrap_or_default(), t, *d))
        .collect();
    sorted.sort_by_key(|r| (r.0, r.1));
    let mut c: [Vec<Option<i64>>; 8] = Default::default();
    for (id, t, d) in sorted {
        for (col, v) in c.iter_mut().zip([
            Some(id),
            Some(t),
            Some(d.n),
            Some(d.ok),
            d.pmin,
            d.pmax,
            Some(d.psum),
            d.slots,
        ]) {
            col.push(v);
        }
    }
    c
}

impl HistoryStore for PostgresHistory {
    fn append(&mut self, samples: &[PollSample]) -> Result<(), StoreError> {
        let batch = Batch::fold(samples);
        if batch.servers.is_empty() {
            return Ok(());
        }
        self.run(move |pg: Arc<PgShared>| async move {
            let (addrs, games): (Vec<&str>, Vec<&str>) = (batch.servers.iter())
                .map(|(a, g)| (a.as_str(), g.as_str()))
                .unzip();
            let mut c = pg.client().await?;
            let tx = c.transaction().await.map_err(db)?;
            tx.execute(LOCK, &[&HISTORY_LOCK]).await.map_err(db)?;
            tx.execute(ADD_SERVERS, &[&addrs, &games])
                .await
                .map_err(db)?;
            let mut ids = vec![0_i64; batch.servers.len()];
            for r in tx
                .query(FIND_SERVERS, &[&addrs, &games])
                .await
                .map_err(db)?
            {
                let i = usize::try_from(get::<i64>(&r, 1)? - 1).unwrap_or(usize::MAX);
                if let Some(slot) = ids.get_mut(i) {
                    *slot = get(&r, 0)?;
                }
            }
            for (sql, rows) in [
                (upsert!("history_minute", "minute"), &batch.minutes),
                (upsert!("history_hour", "hour"), &batch.hours),
            ] {
                let [a, b, c, d, e, f, g, h] = columns(&ids, rows);
                tx.execute(sql, &[&a, &b, &c, &d, &e, &f, &g, &h])
                    .await
                    .map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn close_minutes(&mut self, now: Timestamp) -> Result<usize, StoreError> {
        let minutes = fold::to_close(self.closed, now);
        if minutes.is_empty() {
            return Ok(0);
        }
        let range = minutes.clone();
        self.run(move |pg: Arc<PgShared>| async move {
            let mut c = pg.client().await?;
            let tx = c.transaction().await.map_err(db)?;
            tx.execute(LOCK, &[&HISTORY_LOCK]).await.map_err(db)?;
            let points: Vec<PointRow> = tx
                .query(POINTS, &[&fold::points_from(&range), &range.end])
                .await
                .map_err(db)?
                .iter()
                .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?, get(r, 3)?, get(r, 4)?)))
                .collect::<Result<_, StoreError>>()?;
            let rows = fold::replay(&points, range);
            let games: Vec<&str> = rows.iter().map(|g| &*g.game).collect();
            let mut cols: [Vec<i64>; 4] = Default::default();
            for g in &rows {
                for (c, v) in cols.iter_mut().zip([g.minute, g.listed, g.up, g.players]) {
                    c.push(v);
                }
            }
            let [minute, listed, up, players] = cols;
            tx.execute(CLOSE, &[&games, &minute, &listed, &up, &players])
                .await
                .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })?;
        self.closed = Some(minutes.end - 1);
        Ok(usize::try_from(minutes.end - minutes.start).unwrap_or(0))
    }

    fn prune(&mut self, minute: i64, hour: i64) -> Result<usize, StoreError> {
        self.run(move |pg: Arc<PgShared>| async move {
            let mut c = pg.client().await?;
            let tx = c.transaction().await.map_err(db)?;
            tx.execute(LOCK, &[&HISTORY_LOCK]).await.map_err(db)?;
            let mut n = 0;
            for (sql, before) in PRUNE.iter().zip([minute, minute, hour, hour]) {
                n += tx.execute(*sql, &[&before]).await.map_err(db)?;
            }
            tx.execute(PRUNE_SERVERS, &[]).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn series(
        &mut self,
        addr: &str,
        game: Option<&str>,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<ServerPoint>, StoreError> {
        let (addr, game) = (addr.to_owned(), game.map(str::to_owned));
        let sql = match resolution {
            Resolution::Minute => SERVER_SERIES.0,
            Resolution::Hour => SERVER_SERIES.1,
        };
        let limit = i64::try_from(MAX_RANGE_ROWS).unwrap_or(i64::MAX);
        let from = resolution.number(since);
        self.run(move |pg: Arc<PgShared>| async move {
            let c = pg.client().await?;
            let rows = c
                .query(sql, &[&addr, &game, &from, &limit])
                .await
                .map_err(db)?;
            let mut out = rows
                .iter()
                .map(|r| {
                    let row: ServerRow = (
                        get(r, 0)?,
                        get(r, 1)?,
                        get(r, 2)?,
                        get(r, 3)?,
                        get(r, 4)?,
                        get(r, 5)?,
                        get(r, 6)?,
                    );
                    Ok(ServerPoint::of_row(row, resolution))
                })
                .collect::<Result<Vec<ServerPoint>, StoreError>>()?;
            out.reverse();
            Ok(out)
        })
    }

    fn game_series(
        &mut self,
        game: &str,
        resolution: Resolution,
        since: Timestamp,
    ) -> Result<Vec<GamePoint>, StoreError> {
        let game = game.to_owned();
        let sql = match resolution {
            Resolution::Minute => GAME_SERIES.0,
            Resolution::Hour => GAME_SERIES.1,
        };
        let limit = i64::try_from(MAX_RANGE_ROWS).unwrap_or(i64::MAX);
        let from = resolution.number(since);
        self.run(move |pg: Arc<PgShared>| async move {
            let c = pg.client().await?;
            let rows = c.query(sql, &[&game, &from, &limit]).await.map_err(db)?;
            let mut out = rows
                .iter()
                .map(|r| {
                    let row: GameRow = (
                        get(r, 0)?,
                        get(r, 1)?,
                        get(r, 2)?,
                        get(r, 3)?,
                        get(r, 4)?,
                        get(r, 5)?,
                        get(r, 6)?,
                        get(r, 7)?,
                        get(r, 8)?,
                    );
                    Ok(GamePoint::of_row(row, resolution))
                })
                .collect::<Result<Vec<GamePoint>, StoreError>>()?;
            out.reverse();
            Ok(out)
        })
    }
}
