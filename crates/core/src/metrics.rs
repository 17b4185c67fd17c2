//! Counters every face bumps (the HTTP layer renders them for `GET /metrics`).
//!
//! Counters live outside the registry lock (atomics, and a small map keyed by `&'static str`
//! under its own lock), so counting a dropped datagram never waits for anything. Drops are
//! counted per [`Drop`] reason, an enum: a wire value can never become a label, so the number
//! of series is bounded by the code.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muster_proto::limit::SourceKey;

use crate::drops::DropReason;

/// Default of `http.server_metrics_max`: per-server series at most in `/metrics`.
pub const DEFAULT_SERVER_METRICS_MAX: usize = 10_000;

/// A source refused by a bucket counts in the `muster_rate_limited_sources` gauge this long.
pub const LIMITED_SOURCE_WINDOW: Duration = Duration::from_secs(60);
/// Sources remembered for that gauge at most (it saturates there; memory stays bounded).
pub const MAX_LIMITED_SOURCES: usize = 100_000;

/// Sources refused lately, and when the table was last swept.
#[derive(Debug, Default)]
struct LimitedSources {
    seen: HashMap<SourceKey, Instant>,
    swept: Option<Instant>,
}

impl LimitedSources {
    fn insert(&mut self, key: SourceKey, now: Instant) {
        if self.seen.len() >= MAX_LIMITED_SOURCES && !self.seen.contains_key(&key) {
            // Sweep at most once a second, so a flood from many sources cannot make every
            // refusal walk the whole table.
            if self
                .swept
                .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
            {
                self.swept = Some(now);
                self.seen
                    .retain(|_, t| now.saturating_duration_since(*t) < LIMITED_SOURCE_WINDOW);
            }
            if self.seen.len() >= MAX_LIMITED_SOURCES {
                return;
            }
        }
        self.seen.insert(key, now);
    }

    fn fresh(&self, now: Instant) -> usize {
        self.seen
            .values()
            .filter(|t| now.saturating_duration_since(**t) < LIMITED_SOURCE_WINDOW)
            .count()
    }
}

/// A refusal by a named limit is logged once per source and limit within this long.
pub const LIMIT_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// (limit, source) pairs remembered for that at most; past it, refusals are not logged until
/// the table is swept (memory stays bounded whatever a flood does).
pub const MAX_LOGGED_LIMITS: usize = 10_000;
/// Such log lines per second at most over all sources (a flood from many sources does not
/// flood the log).
pub const LIMIT_LOG_LINES_PER_SEC: u64 = 10;

/// When each (limit, source) refusal was last logged.
#[derive(Debug, Default)]
struct LimitLog {
    logged: HashMap<(&'static str, SourceKey), Instant>,
    swept: Option<Instant>,
    /// Lines written lately, over all sources (made at first use).
    lines: Option<muster_proto::limit::ByteBudget>,
}

impl LimitLog {
    /// Whether a refusal of `source` by `limit` at `now` should be logged.
    fn should_log(&mut self, limit: &'static str, source: SourceKey, now: Instant) -> bool {
        let key = (limit, source);
        if let Some(t) = self.logged.get(&key)
            && now.saturating_duration_since(*t) < LIMIT_LOG_INTERVAL
        {
            return false;
        }
        if self.logged.len() >= MAX_LOGGED_LIMITS && !self.logged.contains_key(&key) {
            if self
                .swept
                .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
            {
                self.swept = Some(now);
                self.logged
                    .retain(|_, t| now.saturating_duration_since(*t) < LIMIT_LOG_INTERVAL);
            }
            if self.logged.len() >= MAX_LOGGED_LIMITS {
                return false;
            }
        }
        self.logged.insert(key, now);
        self.lines
            .get_or_insert_with(|| muster_proto::limit::ByteBudget::new(LIMIT_LOG_LINES_PER_SEC))
            .spend(1, now)
    }
}

/// The daemon's counters. Cheap to bump from any task.
#[derive(Debug, Default)]
pub struct Metrics {
    registrations: AtomicU64,
    verifications_failed: AtomicU64,
    rate_limited: AtomicU64,
    limited_sources: Mutex<LimitedSources>,
    limited: Mutex<BTreeMap<&'static str, u64>>,
    limit_log: Mutex<LimitLog>,
    list_requests: Mutex<BTreeMap<&'static str, u64>>,
    drops: Drops,
    server_series_max: SeriesMax,
    upstreams: crate::board::Board,
}

/// `http.server_metrics_max`, settable after the handle exists.
#[derive(Debug)]
struct SeriesMax(std::sync::atomic::AtomicUsize);

impl Default for SeriesMax {
    fn default() -> Self {
        Self(std::sync::atomic::AtomicUsize::new(
            DEFAULT_SERVER_METRICS_MAX,
        ))
    }
}

/// One counter per [`Drop`] reason.
#[derive(Debug)]
struct Drops(Vec<AtomicU64>);

impl Default for Drops {
    fn default() -> Self {
        Self(DropReason::ALL.iter().map(|_| AtomicU64::new(0)).collect())
    }
}

fn bump(m: &Mutex<BTreeMap<&'static str, u64>>, key: &'static str) {
    let mut g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *g.entry(key).or_insert(0) += 1;
}

fn snapshot(m: &Mutex<BTreeMap<&'static str, u64>>) -> BTreeMap<&'static str, u64> {
    m.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

impl Metrics {
    /// A new record was registered (counted by [`crate::MasterHandle`]).
    pub fn count_registration(&self) {
        self.registrations.fetch_add(1, Ordering::Relaxed);
    }

    /// A verification exchange failed (wrong `\validate\`, no `fw!!`, bad token, …).
    pub fn count_verification_failed(&self) {
        self.verifications_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A request from `source` was refused by a per-source token bucket (for a bucket on what
    /// is sent to an address, such as challenges: the destination).
    pub fn count_rate_limited(&self, source: IpAddr) {
        self.rate_limited.fetch_add(1, Ordering::Relaxed);
        self.limited_sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(SourceKey::of(source), Instant::now());
    }

    /// A request or connection from `source` was refused by the limit named `limit` (a
    /// config key such as `ddnet_register` or a drop reason such as `tcp_source_cap`): counted
    /// in `muster_limited_total{limit}`, and logged once per source and limit within
    /// [`LIMIT_LOG_INTERVAL`], so an operator sees which limit a busy address meets.
    pub fn count_limited(&self, limit: &'static str, source: IpAddr) {
        bump(&self.limited, limit);
        let key = SourceKey::of(source);
        let log = self
            .limit_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .should_log(limit, key, Instant::now());
        if log {
            tracing::info!(
                limit,
                source = %key.to_ip(),
                "refused by a per-source limit (logged once a minute per source and limit)"
            );
        }
    }

    /// A request from `source` refused by the per-source token bucket named `limit`: counted
    /// as rate-limited, under the limit's name ([`Metrics::count_limited`]) and as the drop
    /// `rate_limited`.
    pub fn count_bucket_refusal(&self, limit: &'static str, source: IpAddr) {
        self.count_rate_limited(source);
        self.count_limited(limit, source);
        self.count_drop(DropReason::RateLimited);
    }

    /// Refusals by the limit named `limit` so far.
    #[must_use]
    pub fn limited(&self, limit: &str) -> u64 {
        self.limited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(limit)
            .copied()
            .unwrap_or(0)
    }

    /// Sources (IPv4 addresses, IPv6 /64s) refused by a bucket within the last
    /// [`LIMITED_SOURCE_WINDOW`], at most [`MAX_LIMITED_SOURCES`].
    #[must_use]
    pub fn rate_limited_sources(&self) -> usize {
        self.limited_sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fresh(Instant::now())
    }

    /// A list was requested from `face` (`"gameagent"`, `"gamespy"`, `"http"`, …).
    pub fn count_list_request(&self, face: &'static str) {
        bump(&self.list_requests, face);
    }

    /// An input was dropped for `reason`.
    pub fn count_drop(&self, reason: DropReason) {
        self.count_drops(reason, 1);
    }

    /// `n` inputs were dropped for `reason`.
    pub fn count_drops(&self, reason: DropReason, n: u64) {
        if let Some(c) = self.drops.0.get(reason.index()) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Registrations so far.
    #[must_use]
    pub fn registrations(&self) -> u64 {
        self.registrations.load(Ordering::Relaxed)
    }

    /// Drops for the reason named `reason` so far (0 for a name that is no reason).
    #[must_use]
    pub fn drops(&self, reason: &str) -> u64 {
        DropReason::from_name(reason)
            .and_then(|d| self.drops.0.get(d.index()))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Dropped inputs, per reason.
    #[must_use]
    pub fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
        DropReason::ALL
            .iter()
            .zip(&self.drops.0)
            .map(|(d, c)| (d.name(), c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// What each upstream did lately (federation).
    #[must_use]
    pub fn upstreams(&self) -> &crate::board::Board {
        &self.upstreams
    }

    /// Sets how many servers get per-server series (`http.server_metrics_max`).
    pub fn set_server_series_max(&self, max: usize) {
        self.server_series_max.0.store(max, Ordering::Relaxed);
    }

    /// How many servers get per-server series.
    #[must_use]
    pub fn server_series_max(&self) -> usize {
        self.server_series_max.0.load(Ordering::Relaxed)
    }

    /// Verification exchanges that failed.
    #[must_use]
    pub fn verifications_failed(&self) -> u64 {
        self.verifications_failed.load(Ordering::Relaxed)
    }

    /// Requests refused by a per-source token bucket.
    #[must_use]
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited.load(Ordering::Relaxed)
    }

    /// List requests served, per face.
    #[must_use]
    pub fn list_requests(&self) -> BTreeMap<&'static str, u64> {
        snapshot(&self.list_requests)
    }

    /// Refusals by a per-source limit, per limit name.
    #[must_use]
    pub fn limited_counts(&self) -> BTreeMap<&'static str, u64> {
        snapshot(&self.limited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_logged_once_per_source_and_interval() {
        let mut log = LimitLog::default();
        let t0 = Instant::now();
        let a = SourceKey::of("192.0.2.1".parse().unwrap());
        let b = SourceKey::of("192.0.2.2".parse().unwrap());
        assert!(log.should_log("http_list", a, t0));
        assert!(!log.should_log("http_list", a, t0 + Duration::from_secs(59)));
        assert!(log.should_log("ddnet_register", a, t0), "another limit");
        assert!(log.should_log("http_list", b, t0), "another source");
        assert!(log.should_log("http_list", a, t0 + LIMIT_LOG_INTERVAL));
        // Bounded: past the table's size, new pairs are not logged until it can be swept…
        let t1 = t0 + Duration::from_secs(1);
        let mut lines = 0;
        for i in 0..(MAX_LOGGED_LIMITS as u32 * 2) {
            lines += u64::from(log.should_log("flood", SourceKey::V4(i), t1));
        }
        assert!(log.logged.len() <= MAX_LOGGED_LIMITS);
        // …and many sources make a few lines a second, not one each.
        assert!(lines <= LIMIT_LOG_LINES_PER_SEC, "{lines}");
    }

    #[test]
    fn limited_sources_are_bounded_and_forgotten() {
        let mut l = LimitedSources::default();
        let t0 = Instant::now();
        for i in 0..MAX_LIMITED_SOURCES + 10 {
            let ip = IpAddr::from(u32::try_from(i).unwrap().to_be_bytes());
            l.insert(SourceKey::of(ip), t0);
        }
        assert_eq!(l.fresh(t0), MAX_LIMITED_SOURCES, "saturates");
        let later = t0 + LIMITED_SOURCE_WINDOW;
        assert_eq!(l.fresh(later), 0, "forgotten after the window");
        l.insert(SourceKey::of("198.51.100.1".parse().unwrap()), later);
        assert_eq!(l.seen.len(), 1, "swept when full");
    }
}
