//! The history's size and read speed at a year of hourly rollups: fills a fresh SQLite file
//! with `SERVERS` × `HOURS` per-server rows (hour by hour, every server each hour, as the
//! daemon writes them) and `GAMES` × `HOURS` per-game rows, prints the file's size and the
//! bytes per row, then times the 1-year reads `/api/v1/servers/{address}/history?range=1y` and
//! `/api/v1/games/{game}/history?range=1y` make (the store's read, the DTOs, the JSON).
//!
//! `cargo bench -p muster-http --bench history`; sizes from the environment:
//! `MUSTER_HISTORY_BENCH_SERVERS` (1,000), `MUSTER_HISTORY_BENCH_HOURS` (8,760),
//! `MUSTER_HISTORY_BENCH_GAMES` (10), `MUSTER_HISTORY_BENCH_VACUUM=1` to also print the size
//! after `VACUUM`. Results are in docs/history.md.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use muster_core::registry::Timestamp;
use muster_http::api::history::{GamePointDto, ServerPointDto};
use muster_http::web::History;
use muster_http::web::history::{Resolution, SqliteHistory};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn addr(s: u64) -> String {
    format!("192.0.2.{}:{}", s % 250 + 1, 20_000 + s)
}

/// A player count that moves with the hour of the day and differs per server.
fn players(s: u64, h: u64) -> u32 {
    u32::try_from((s * 7 + (h % 24) * 3 + h / 24) % 33).unwrap_or(0)
}

fn file_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn main() {
    let servers = env("MUSTER_HISTORY_BENCH_SERVERS", 1_000);
    let hours = env("MUSTER_HISTORY_BENCH_HOURS", 8_760);
    let games = env("MUSTER_HISTORY_BENCH_GAMES", 10).max(1);
    let dir = std::env::temp_dir().join(format!("muster-history-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut store = SqliteHistory::open(&dir).expect("open");
    // The hours end now (so a 1-year read finds them).
    let now = Timestamp::now();
    let last_hour = now.0 / 3_600_000;
    let first = last_hour + 1 - hours;
    let game = |s: u64| format!("game{}", s % games);

    let t = Instant::now();
    // A transaction per 30 days of hours: one WAL of a month at most.
    let mut rows = 0;
    for chunk in (0..hours).step_by(720) {
        let end = (chunk + 720).min(hours);
        let it = (chunk..end).flat_map(|h| {
            (0..servers).map(move |s| {
                (
                    format!("game{}", s % games),
                    addr(s),
                    i64::try_from(first + h).unwrap_or(0),
                    players(s, h),
                )
            })
        });
        rows += store.fill_hours(it).expect("fill");
    }
    let game_rows = store
        .fill_game_hours((0..hours).flat_map(|h| {
            (0..games).map(move |g| {
                let on = (g..servers).step_by(usize::try_from(games).unwrap_or(1));
                let up = u32::try_from(on.clone().count()).unwrap_or(0);
                let p: u32 = on.map(|s| players(s, h)).sum();
                (
                    format!("game{g}"),
                    i64::try_from(first + h).unwrap_or(0),
                    up,
                    p,
                )
            })
        }))
        .expect("fill games");
    let fill = t.elapsed();
    drop(store);
    // Opening again checkpoints nothing by itself: close, reopen, checkpoint, measure.
    let conn = rusqlite::Connection::open(dir.join(muster_store::DB_FILE)).expect("reopen");
    conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")
        .expect("checkpoint");
    drop(conn);
    let bytes = file_size(&dir);
    println!(
        "filled {rows} server rows ({servers} servers x {hours} hours) and {game_rows} game rows in {:.1} s ({:.0} rows/s)",
        fill.as_secs_f64(),
        rows as f64 / fill.as_secs_f64()
    );
    println!(
        "file: {:.1} MiB, {:.1} bytes per server row (game rows included)",
        bytes as f64 / 1_048_576.0,
        bytes as f64 / rows as f64
    );
    if env("MUSTER_HISTORY_BENCH_VACUUM", 0) == 1 {
        let conn = rusqlite::Connection::open(dir.join(muster_store::DB_FILE)).expect("reopen");
        conn.execute_batch("VACUUM").expect("vacuum");
        drop(conn);
        let bytes = file_size(&dir);
        println!(
            "after VACUUM: {:.1} MiB, {:.1} bytes per server row",
            bytes as f64 / 1_048_576.0,
            bytes as f64 / rows as f64
        );
    }

    let history = History::new(
        Box::new(SqliteHistory::open(&dir).expect("open")),
        Duration::from_secs(24 * 3600),
    );
    let year = Duration::from_secs(365 * 24 * 3600);
    let runs = 25;
    let mut server_times = Vec::new();
    let mut points = 0;
    for i in 0..runs {
        let s = (i * 37) % servers;
        let t = Instant::now();
        let pts = history
            .series(&addr(s), Some(&game(s)), Resolution::Hour, year, now)
            .expect("series");
        points = pts.len();
        let dtos: Vec<ServerPointDto> = pts.into_iter().map(Into::into).collect();
        let json = serde_json::to_vec(&dtos).expect("json");
        server_times.push(t.elapsed());
        std::hint::black_box(json);
    }
    let mut game_times = Vec::new();
    let mut game_points = 0;
    for i in 0..runs {
        let t = Instant::now();
        let pts = history
            .game_series(&game(i % games), Resolution::Hour, year, now)
            .expect("game series");
        game_points = pts.len();
        let dtos: Vec<GamePointDto> = pts.into_iter().map(Into::into).collect();
        let json = serde_json::to_vec(&dtos).expect("json");
        game_times.push(t.elapsed());
        std::hint::black_box(json);
    }
    println!(
        "1-year read of one server ({points} points, JSON included): median {:.2} ms, max {:.2} ms over {runs}",
        median(server_times.clone()).as_secs_f64() * 1e3,
        server_times
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );
    println!(
        "1-year read of one game ({game_points} points, JSON included): median {:.2} ms, max {:.2} ms over {runs}",
        median(game_times.clone()).as_secs_f64() * 1e3,
        game_times
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
}
