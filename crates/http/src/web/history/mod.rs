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
//! ones (the mean is the sum over the answered), the last slots. A batch of samples is folded
//! into one change per row (the `fold` module, shared by the backends) and upserted: counts and sums
//! add, so an hour's rollup is complete when its last sample is, and two writers on one
//! database (two `muster serve` on one PostgreSQL) merge instead of overwriting each other.
//! A game's aggregate needs every server's state at a minute, and the poller reaches a server
//! only every few minutes: when a minute closes ([`HistoryStore::close_minutes`]) each
//! game's servers with a state at most [`LIVE_FOR`] old are counted, with those up and their
//! players. [`SqliteHistory`] (one writer) keeps each server's last sample in memory, rebuilt
//! from the last minute points when it opens; [`PostgresHistory`] reads them from the minute
//! points at each close, so that it counts the servers every writer sampled, and the first
//! writer to close a minute writes it (once: its hourly rollup counts it once).
//!
//! Servers the poller does not poll (management servers, which tell their state themselves;
//! every server while the poller is off) get their samples from what the registry knows:
//! [`feed_unpolled`] looks at each new snapshot and writes a sample for such a server when its
//! player count or slots changed, and at least once per poll interval ([`Unpolled`]).
//!
//! [`HistoryStore`] is the boundary (like [`muster_core::store::Store`] for records):
//! [`SqliteHistory`] keeps the rows in the daemon's SQLite file on a connection of its own (WAL
//! lets it write beside the record store), and folds the raw samples of the table earlier
//! versions wrote (`poll_history`) into minute points and rollups when it opens;
//! [`PostgresHistory`] keeps the same tables in the database of the daemon's PostgreSQL
//! store, which the daemon then uses ([`ReopeningHistory`]). [`run`] is the task that
//! receives samples, writes them in batches at least once a second, closes minutes and prunes
//! rows past their retention every minute.
//!
//! Does not: keep history of a server across a change of address; write the game aggregates
//! of minutes while no daemon ran (a stop longer than [`LIVE_FOR`] leaves a gap).

mod fold;
mod postgres;
mod sqlite;

pub use postgres::PostgresHistory;
pub use sqlite::{HISTORY_CACHE_KIB, SqliteHistory};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;

use muster_core::poll::PollSample;
use muster_core::registry::{Record, Timestamp};
use muster_store::StoreError;

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
/// Samples buffered before a write is forced. It bounds the memory between writes and that
/// of a write's fold: a minute and an hour change per sample, in sorted maps, some 270 bytes a
/// sample. After a burst of first samples (every server registering at once with the poller
/// off) 4,096 made the fold's maps alone 1.1 MB at once; a write of 1,024 costs one more
/// transaction per thousand samples, a fraction of the rows' own cost.
pub const MAX_BUFFERED: usize = 1024;
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

fn to_u32(v: Option<i64>) -> Option<u32> {
    v.map(|v| u32::try_from(v.max(0)).unwrap_or(u32::MAX))
}

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

fn at_secs(number: i64, unit_ms: u64) -> u64 {
    u64::try_from(number.max(0)).unwrap_or(0) * (unit_ms / 1000)
}

/// A minute point or rollup as both backends read it: (number, n, ok, pmin, pmax, psum,
/// slots).
pub(crate) type ServerRow = (i64, i64, i64, Option<i64>, Option<i64>, i64, Option<i64>);

/// A game minute or hour as both backends read it: (number, listed, up min, up sum, up max,
/// minutes, players min, players sum, players max).
pub(crate) type GameRow = (i64, i64, i64, i64, i64, i64, i64, i64, i64);

impl ServerPoint {
    /// The point of a stored row at `resolution`.
    pub(crate) fn of_row(r: ServerRow, resolution: Resolution) -> Self {
        let (number, n, ok, pmin, pmax, psum, slots) = r;
        let ok = count(ok);
        Self {
            at: at_secs(number, resolution.unit_ms()),
            samples: count(n),
            answered: ok,
            min: to_u32(pmin),
            avg: (ok > 0).then(|| psum as f64 / f64::from(ok)),
            max: to_u32(pmax),
            slots: to_u32(slots),
        }
    }
}

impl GamePoint {
    /// The point of a stored row at `resolution`.
    pub(crate) fn of_row(r: GameRow, resolution: Resolution) -> Self {
        let (number, listed, up_min, up_sum, up_max, minutes, pl_min, pl_sum, pl_max) = r;
        let minutes = f64::from(count(minutes).max(1));
        Self {
            at: at_secs(number, resolution.unit_ms()),
            servers: count(listed),
            up: (count(up_min), up_sum as f64 / minutes, count(up_max)),
            players: (count(pl_min), pl_sum as f64 / minutes, count(pl_max)),
        }
    }
}

/// Where a [`ReopeningHistory`] opens its store.
#[derive(Debug)]
enum Backend {
    /// `muster.sqlite3` in this directory.
    Sqlite(PathBuf),
    /// The daemon's PostgreSQL store's database.
    Postgres(Arc<muster_store::PgShared>),
}

/// A history store opened at first use: a failed open (a full disk, a database down at
/// start) is an error of that call, and the next call tries again, so history starts working
/// when the disk has room or the database is back instead of stopping the daemon.
#[derive(Debug)]
pub struct ReopeningHistory {
    backend: Backend,
    open: Option<Box<dyn HistoryStore>>,
}

impl ReopeningHistory {
    /// [`SqliteHistory`] in `dir`, opened now if it can be; if not, the error is returned
    /// beside the store, which tries again at each use.
    #[must_use]
    pub fn open(dir: &Path) -> (Self, Option<StoreError>) {
        Self::start(Backend::Sqlite(dir.to_owned()))
    }

    /// [`PostgresHistory`] in the database of `pg` (the daemon's record store), likewise.
    #[must_use]
    pub fn postgres(pg: Arc<muster_store::PgShared>) -> (Self, Option<StoreError>) {
        Self::start(Backend::Postgres(pg))
    }

    fn start(backend: Backend) -> (Self, Option<StoreError>) {
        let mut s = Self {
            backend,
            open: None,
        };
        let err = s.get().err();
        (s, err)
    }

    fn get(&mut self) -> Result<&mut dyn HistoryStore, StoreError> {
        let s: Box<dyn HistoryStore> = match self.open.take() {
            Some(s) => s,
            None => match &self.backend {
                Backend::Sqlite(dir) => Box::new(SqliteHistory::open(dir)?),
                Backend::Postgres(pg) => Box::new(PostgresHistory::open(Arc::clone(pg))?),
            },
        };
        Ok(self.open.insert(s).as_mut())
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

/// What [`run`] writes: the poller's samples one by one, and [`feed_unpolled`]'s in batches.
#[derive(Debug)]
pub struct Samples {
    /// The poller's results.
    pub polled: mpsc::UnboundedReceiver<PollSample>,
    /// [`feed_unpolled`]'s batches.
    pub unpolled: mpsc::Receiver<Vec<PollSample>>,
}

/// Runs `f` on `lane`, or on the shared bulk pool without one; a job that did not finish is
/// its error chain.
async fn off_reactor<R: Send + 'static>(
    lane: &Option<muster_core::bulk::Lane>,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, String> {
    match lane {
        Some(lane) => lane
            .run(f)
            .await
            .map_err(|e| muster_proto::errors::error_chain(&e)),
        None => muster_core::bulk::spawn(f)
            .await
            .map_err(|e| muster_proto::errors::error_chain(&e)),
    }
}

/// Receives samples until both of `samples`' channels close or `stop` is cancelled, forwarding each
/// to `forward` (the embedder's own sink, if any) and writing them to `history` in batches. A batch
/// the store refuses (a full disk) is dropped, each of its samples counted under
/// [`DropReason::HistoryNotStored`] in `counts`' metrics, and logged at most once per
/// [`FAILURE_LOG_INTERVAL`]: history is best effort, never a reason to stop or to hold memory.
///
/// [`DropReason::HistoryNotStored`]: muster_core::drops::DropReason::HistoryNotStored
pub async fn run(
    history: History,
    samples: Samples,
    forward: Option<mpsc::UnboundedSender<PollSample>>,
    counts: Option<muster_core::MasterHandle>,
    stop: tokio_util::sync::CancellationToken,
) {
    let Samples {
        polled: mut samples,
        mut unpolled,
    } = samples;
    // Each input is read until it closes; the task ends when both did.
    let (mut polled_open, mut unpolled_open) = (true, true);
    let mut write = tokio::time::interval(WRITE_INTERVAL);
    let mut prune = tokio::time::interval(PRUNE_INTERVAL);
    write.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf: Vec<PollSample> = Vec::new();
    let mut failures = FailureLog::default();
    // SQLite runs off the reactor: a batch of thousands of rows (every server's first sample)
    // must not hold a thread that serves the faces. It runs on a bulk thread of the history's
    // own (see `Lane`), or on the shared pool when no thread can be made.
    let lane = muster_core::bulk::Lane::new("muster-history")
        .inspect_err(|e| tracing::warn!(error = %e, "no history thread; writing on the bulk pool"))
        .ok();
    let lane = &lane;
    let mut flush = async |buf: &mut Vec<PollSample>| {
        if buf.is_empty() {
            return;
        }
        let batch = std::mem::take(buf);
        let h = history.clone();
        let n = batch.len();
        let error = match off_reactor(lane, move || h.append(&batch)).await {
            Ok(Ok(())) => {
                if failures.ok() {
                    tracing::info!("history writes work again");
                }
                return;
            }
            Ok(Err(e)) => muster_proto::errors::error_chain(&e),
            Err(e) => e,
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
            s = samples.recv(), if polled_open => match s {
                Some(s) => {
                    if let Some(f) = &forward {
                        let _ = f.send(s.clone());
                    }
                    buf.push(s);
                    if buf.len() >= MAX_BUFFERED {
                        flush(&mut buf).await;
                    }
                }
                None => {
                    polled_open = false;
                    if !unpolled_open {
                        break;
                    }
                }
            },
            batch = unpolled.recv(), if unpolled_open => match batch {
                Some(mut batch) => {
                    if let Some(f) = &forward {
                        for s in &batch {
                            let _ = f.send(s.clone());
                        }
                    }
                    // In order: what the poller said first.
                    flush(&mut buf).await;
                    flush(&mut batch).await;
                }
                None => {
                    unpolled_open = false;
                    if !polled_open {
                        break;
                    }
                }
            },
            _ = write.tick() => {
                flush(&mut buf).await;
                let h = history.clone();
                match off_reactor(lane, move || h.close_minutes(Timestamp::now())).await {
                    Ok(Ok(_)) => {}
                    // The writes' failure line covers a broken store.
                    Ok(Err(e)) => tracing::debug!(error = %e, "history minute close failed"),
                    Err(e) => tracing::debug!(error = %e, "history minute close failed"),
                }
            }
            _ = prune.tick() => {
                let h = history.clone();
                match off_reactor(lane, move || h.prune(Timestamp::now())).await {
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
    /// would be a clone of the game and address): what was last written. Sorted by id, one
    /// entry per record the last scan saw, in exactly the room they take (16 bytes a record,
    /// where a hash map's entries and free buckets took ~28 at 10,000 records); each scan
    /// makes it anew.
    last: Vec<(u64, Last)>,
    /// The first scan's time: [`Last`] counts seconds from it.
    start: Option<Timestamp>,
    /// The earliest time a sample is due without a change.
    next_due: Option<Timestamp>,
}

/// What [`Unpolled`] last wrote for one record, in 8 bytes (16 with its id, where the plain
/// numbers and times took 32): its players and slots, clamped to `u16` (a change beyond that
/// is not one any game makes), and the second since the first scan it was written.
#[derive(Debug, Clone, Copy)]
struct Last {
    players: u16,
    slots: u16,
    written: u32,
}

const _: () = assert!(size_of::<Last>() == 8);

/// A sample [`Unpolled::scan_due`] found due: the record's position in the records scanned,
/// and its players and slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    at: u32,
    players: u32,
    slots: u32,
}

impl Due {
    /// The sample, taken `now`, for the record at its position in `records` (the records
    /// scanned; `None` if it is not there).
    #[must_use]
    pub fn sample(
        self,
        records: &[impl std::ops::Deref<Target = Record>],
        now: Timestamp,
    ) -> Option<PollSample> {
        let r = records.get(usize::try_from(self.at).ok()?)?;
        Some(PollSample {
            key: r.key.clone(),
            at: now,
            ok: true,
            num_players: Some(self.players),
            max_players: Some(self.slots),
            ping: None,
        })
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
            last: Vec::new(),
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

    /// [`Unpolled::scan_due`]'s samples, made at once (the tests read them whole).
    #[cfg(test)]
    fn scan<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a Record>,
        now: Timestamp,
    ) -> Vec<PollSample> {
        let records: Vec<&Record> = records.into_iter().collect();
        self.scan_due(records.iter().copied(), now)
            .into_iter()
            .filter_map(|d| d.sample(&records, now))
            .collect()
    }

    /// The samples due at `now` for `records` (every listed record): an unpolled record with
    /// info gets one when it is new, its players or slots changed, or its last is `every`
    /// old. Records no longer listed are forgotten. Each due sample takes 12 bytes here, its
    /// record's position in `records` with its numbers, and is made into a [`PollSample`] (a
    /// key's clone, ~100 bytes) only when it is sent ([`Due::sample`]). Every server's first
    /// sample comes in one scan; 10,000 samples made at once held about a megabyte, and twice
    /// that while they waited in the writer's channel.
    pub fn scan_due<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a Record>,
        now: Timestamp,
    ) -> Vec<Due> {
        let start = *self.start.get_or_insert(now);
        let secs = u32::try_from(now.since(start).as_secs()).unwrap_or(u32::MAX);
        let every = u32::try_from(self.every.as_secs()).unwrap_or(u32::MAX);
        let mut out = Vec::new();
        // The records this scan sees, with what is written for them now; the ones it does not
        // see are forgotten.
        let mut next: Vec<(u64, Last)> = Vec::with_capacity(self.last.len());
        for (at, r) in records.into_iter().enumerate() {
            let Ok(at) = u32::try_from(at) else {
                break;
            };
            if self.polled(r) {
                continue;
            }
            let Some(info) = r.info.as_deref() else {
                continue;
            };
            let (n, max) = (info.num_players, info.max_players);
            let known = self
                .last
                .binary_search_by_key(&r.id, |&(id, _)| id)
                .ok()
                .and_then(|i| self.last.get(i))
                .map(|&(_, e)| e);
            let due = known.is_none_or(|e| {
                (e.players, e.slots) != (narrow(n), narrow(max))
                    || secs.saturating_sub(e.written) >= every
            });
            let kept = match known {
                Some(e) if !due => e,
                _ => Last {
                    players: narrow(n),
                    slots: narrow(max),
                    written: secs,
                },
            };
            next.push((r.id, kept));
            if due {
                out.push(Due {
                    at,
                    players: n,
                    slots: max,
                });
            }
        }
        // The list order is nearly the id order (both follow registration): a short sort.
        next.sort_unstable_by_key(|&(id, _)| id);
        next.dedup_by_key(|&mut (id, _)| id);
        next.shrink_to_fit();
        self.last = next;
        self.next_due = self.last.iter().map(|(_, e)| e.written).min().map(|w| {
            start
                .plus(Duration::from_secs(u64::from(w)))
                .plus(self.every)
        });
        out
    }
}

/// Sends [`Unpolled`]'s samples to `samples` (the history writer's) until `stop` is
/// cancelled: a scan every [`UNPOLLED_SCAN`] when the snapshot shows a change (its last event
/// id moved) or a sample is due by age. The samples go in batches of at most
/// [`MAX_BUFFERED`], each made when the writer has taken the one before (make the channel
/// [`UNPOLLED_CHANNEL`] long): after every server registered at once, a few batches are held
/// at a time, not every server's sample.
pub async fn feed_unpolled(
    handle: muster_core::MasterHandle,
    samples: mpsc::Sender<Vec<PollSample>>,
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
        let Ok((back, due, view)) = muster_core::bulk::spawn(move || {
            let due = unpolled.scan_due(view.listed().iter().map(|r| &**r), now);
            (unpolled, due, view)
        })
        .await
        else {
            return;
        };
        unpolled = back;
        for part in due.chunks(MAX_BUFFERED) {
            let batch: Vec<PollSample> = part
                .iter()
                .filter_map(|d| d.sample(view.listed(), now))
                .collect();
            tokio::select! {
                () = stop.cancelled() => return,
                sent = samples.send(batch) => if sent.is_err() {
                    return;
                },
            }
        }
    }
}

/// The length of [`feed_unpolled`]'s channel to [`run`], in batches: one waits while the
/// writer writes another.
pub const UNPOLLED_CHANNEL: usize = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::{Face, GameAddr, PollFields, PollInfo, Registration, ServerKey};
    use muster_proto::limit::SourceKey;
    use muster_store::{DB_FILE, PgShared};
    use rusqlite::{Connection, params};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh PostgreSQL database (its record store's schema made), or `None` (the test
    /// says the PostgreSQL half is skipped) without `MUSTER_TEST_PG_URL`; a failure under
    /// `MUSTER_REQUIRE_PEERS=1`.
    fn pg_database(tag: &str) -> Option<Arc<PgShared>> {
        pg_url(tag).map(|url| PgShared::connect(&url, "history-test").unwrap())
    }

    /// The URL of a fresh database, as [`pg_database`].
    fn pg_url(tag: &str) -> Option<String> {
        let found = match std::env::var("MUSTER_TEST_PG_URL") {
            Ok(u) if !u.is_empty() => Ok(u),
            _ => Err(muster_testkit::Missing {
                peer: "postgresql",
                detail:
                    "MUSTER_TEST_PG_URL is not set (scripts/test.sh starts a cluster and sets it)"
                        .to_owned(),
            }),
        };
        let admin = muster_testkit::require(found)?;
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "muster_hist_{tag}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let url = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(muster_store::postgres::create_database(&admin, &name))
            .unwrap();
        Some(url)
    }

    /// Runs `f` on a history in memory (SQLite), then on one in a fresh PostgreSQL database
    /// when there is one ([`pg_database`]).
    fn on_each_backend(retention: Duration, f: impl Fn(&History)) {
        f(&History::new(
            Box::new(SqliteHistory::in_memory().unwrap()),
            retention,
        ));
        if let Some(pg) = pg_database("each") {
            f(&History::new(
                Box::new(PostgresHistory::open(pg).unwrap()),
                retention,
            ));
        }
    }

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
        on_each_backend(Duration::from_secs(600), |h| {
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
        });
    }

    #[test]
    fn hourly_rollups_keep_min_mean_max_and_the_up_share() {
        on_each_backend(DEFAULT_RETENTION, |h| {
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
        });
    }

    #[test]
    fn closed_minutes_count_each_games_live_servers() {
        on_each_backend(DEFAULT_RETENTION, |h| {
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
        });
    }

    #[test]
    fn a_long_stop_is_not_written_as_empty_minutes() {
        on_each_backend(DEFAULT_RETENTION, |h| {
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
        });
    }

    /// Samples written, the writer dropped before any minute closed, a new writer on the
    /// same store: its first closed minute counts the servers sampled before the restart.
    fn game_counts_survive(open: &dyn Fn() -> Box<dyn HistoryStore>) {
        let mut q3 = sample("127.0.0.2:1", T0 + 3_000, 5);
        q3.key = ServerKey::new("q3", GameAddr::parse("127.0.0.2:1").unwrap());
        {
            let mut h = open();
            h.append(&[
                sample("127.0.0.1:1", T0 + 1_000, 3),
                sample("127.0.0.1:2", T0 + 2_000, 4),
                failed("127.0.0.1:3", T0 + 2_500),
                q3,
            ])
            .unwrap();
        }
        let mut h = open();
        assert_eq!(h.close_minutes(Timestamp(T0 + MIN + 5_000)).unwrap(), 1);
        let pts = h
            .game_series("ut2", Resolution::Minute, Timestamp(T0))
            .unwrap();
        assert_eq!(pts.len(), 1, "{pts:?}");
        assert_eq!((pts[0].servers, pts[0].up.0, pts[0].players.0), (3, 2, 7));
        drop(h);
        // Restarted again, five minutes on without a sample: still counted, each minute.
        let mut h = open();
        assert_eq!(h.close_minutes(Timestamp(T0 + 6 * MIN + 5_000)).unwrap(), 5);
        let pts = h
            .game_series("ut2", Resolution::Minute, Timestamp(T0))
            .unwrap();
        assert_eq!(pts.len(), 6);
        assert!(
            pts.iter().all(|p| p.servers == 3 && p.players.2 == 7),
            "{pts:?}"
        );
        let q3 = h
            .game_series("q3", Resolution::Minute, Timestamp(T0))
            .unwrap();
        assert_eq!((q3.len(), q3[5].players.0), (6, 5));
        // The hour counts each minute once.
        let hour = h
            .game_series("ut2", Resolution::Hour, Timestamp(T0))
            .unwrap();
        assert_eq!((hour.len(), hour[0].players.1), (1, 7.0));
    }

    #[test]
    fn game_counts_are_rebuilt_after_a_restart_sqlite() {
        let dir =
            std::env::temp_dir().join(format!("muster-history-restart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        game_counts_survive(&|| Box::new(SqliteHistory::open(&dir).unwrap()));
        let s = SqliteHistory::open(&dir).unwrap();
        assert_eq!(s.live_servers(), 4, "rebuilt from the minute points");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn game_counts_are_rebuilt_after_a_restart_postgres() {
        let Some(pg) = pg_database("restart") else {
            return;
        };
        game_counts_survive(&|| Box::new(PostgresHistory::open(Arc::clone(&pg)).unwrap()));
    }

    #[test]
    fn two_postgres_writers_merge_their_rows_and_close_each_minute_once() {
        let Some(url) = pg_url("two") else {
            return;
        };
        // Two instances on the same database, each with its own connections.
        let a = PgShared::connect(&url, "history-a").unwrap();
        let b = PgShared::connect(&url, "history-b").unwrap();
        let mut ha = PostgresHistory::open(Arc::clone(&a)).unwrap();
        let mut hb = PostgresHistory::open(Arc::clone(&b)).unwrap();
        let s1 = "127.0.0.1:1";
        ha.append(&[
            sample(s1, T0 + 1_000, 2),
            sample("127.0.0.1:2", T0 + 2_000, 1),
        ])
        .unwrap();
        hb.append(&[
            sample(s1, T0 + 30_000, 6),
            sample("127.0.0.1:3", T0 + 4_000, 3),
        ])
        .unwrap();
        // One row for the server both sampled in that minute.
        let p = ha
            .series(s1, None, Resolution::Minute, Timestamp(T0))
            .unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].samples, p[0].min, p[0].max, p[0].avg),
            (2, Some(2), Some(6), Some(4.0))
        );
        // A closes the minute: it counts B's servers too (mean players of server 1: 4).
        assert_eq!(ha.close_minutes(Timestamp(T0 + MIN + 5_000)).unwrap(), 1);
        let g = hb
            .game_series("ut2", Resolution::Minute, Timestamp(T0))
            .unwrap();
        assert_eq!((g.len(), g[0].servers, g[0].players.0), (1, 3, 8));
        // Minute 1: B samples server 2 busier; A closes it, then B (which has closed nothing
        // yet) closes it too: written once, the hour's mean is over two minutes.
        hb.append(&[sample("127.0.0.1:2", T0 + MIN + 1_000, 11)])
            .unwrap();
        assert_eq!(
            ha.close_minutes(Timestamp(T0 + 2 * MIN + 5_000)).unwrap(),
            1
        );
        assert_eq!(
            hb.close_minutes(Timestamp(T0 + 2 * MIN + 5_000)).unwrap(),
            1
        );
        let g = ha
            .game_series("ut2", Resolution::Minute, Timestamp(T0))
            .unwrap();
        assert_eq!(g.iter().map(|p| p.players.0).collect::<Vec<_>>(), [8, 18]);
        let hour = ha
            .game_series("ut2", Resolution::Hour, Timestamp(T0))
            .unwrap();
        assert_eq!(hour.len(), 1);
        assert_eq!(hour[0].players, (8, 13.0, 18), "each minute once");
        // Both writing the same rows at once: no sample lost, no deadlock.
        let writer = |mut h: PostgresHistory, port: u16| {
            std::thread::spawn(move || {
                for i in 0..20_u64 {
                    h.append(&[
                        sample(s1, T0 + 10 * MIN + i, 1),
                        sample(&format!("127.0.0.1:{port}"), T0 + 10 * MIN + i, 1),
                        sample("127.0.0.1:9", T0 + 10 * MIN + HOUR + i, 1),
                    ])
                    .unwrap();
                }
            })
        };
        let (ta, tb) = (writer(ha, 20), writer(hb, 21));
        ta.join().unwrap();
        tb.join().unwrap();
        let mut h = PostgresHistory::open(Arc::clone(&a)).unwrap();
        let p = h
            .series(s1, None, Resolution::Minute, Timestamp(T0 + 10 * MIN))
            .unwrap();
        assert_eq!(p[0].samples, 40);
        let p = h
            .series("127.0.0.1:9", None, Resolution::Hour, Timestamp(T0))
            .unwrap();
        assert_eq!(p[0].samples, 40);
        b.halt();
    }

    #[test]
    fn prune_keeps_minutes_48_hours_and_hours_400_days() {
        on_each_backend(DEFAULT_RETENTION, |h| {
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
        });
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
        // Many records, listed in an order other than their ids': each is remembered, and
        // only the one that changed is written again.
        let mut many = Unpolled::new(false, every);
        let rs: Vec<Record> = (0..50u16)
            .map(|i| record(3000 + (i * 7) % 50, Face::Mgmt, Some(1)))
            .collect();
        assert_eq!(many.scan(rs.iter(), t0).len(), 50);
        assert!(many.scan(rs.iter(), t1).is_empty());
        let mut changed = rs.clone();
        changed[17] = record(rs[17].key.addr.port(), Face::Mgmt, Some(9));
        let got = many.scan(changed.iter(), t1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].key, rs[17].key);
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
        let (btx, brx) = mpsc::channel(UNPOLLED_CHANNEL);
        tx.send(sample("127.0.0.1:1", now, 4)).unwrap();
        drop(tx);
        btx.send(vec![
            sample("127.0.0.1:2", now, 5),
            sample("127.0.0.1:3", now, 6),
        ])
        .await
        .unwrap();
        drop(btx);
        let samples = Samples {
            polled: rx,
            unpolled: brx,
        };
        run(h.clone(), samples, Some(ftx), None, stop_rx).await;
        let forwarded: Vec<_> = std::iter::from_fn(|| frx.try_recv().ok())
            .map(|s| s.num_players)
            .collect();
        assert_eq!(forwarded.len(), 3);
        assert!(forwarded.contains(&Some(4)) && forwarded.contains(&Some(6)));
        for (addr, n) in [("127.0.0.1:1", 4), ("127.0.0.1:2", 5), ("127.0.0.1:3", 6)] {
            let got = h.recent(addr, None, Timestamp(now)).unwrap();
            assert_eq!(got.len(), 1, "{addr}");
            assert_eq!(got[0].num_players, Some(n), "{addr}");
        }
    }
}
