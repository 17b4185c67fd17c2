//! Counters every face bumps, rendered in the Prometheus text format by `GET /metrics`.
//!
//! Counters live outside the registry lock (atomics, and small maps keyed by `&'static str`
//! under their own lock), so counting a dropped datagram never waits for a list to be built.
//! Label values are `&'static str` only: a wire value can never become a label, so the number
//! of series is bounded by the code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::registry::Face;

/// The daemon's counters. Cheap to bump from any task.
#[derive(Debug, Default)]
pub struct Metrics {
    registrations: AtomicU64,
    verifications_failed: AtomicU64,
    rate_limited: AtomicU64,
    list_requests: Mutex<BTreeMap<&'static str, u64>>,
    drops: Mutex<BTreeMap<&'static str, u64>>,
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

    /// A request was refused by a per-source token bucket.
    pub fn count_rate_limited(&self) {
        self.rate_limited.fetch_add(1, Ordering::Relaxed);
    }

    /// A list was requested from `face` (`"gameagent"`, `"gamespy"`, `"http"`, …).
    pub fn count_list_request(&self, face: &'static str) {
        bump(&self.list_requests, face);
    }

    /// An input was dropped for `reason` (`"malformed"`, `"too_large"`, `"source_cap"`, …).
    pub fn count_drop(&self, reason: &'static str) {
        bump(&self.drops, reason);
    }

    /// Registrations so far.
    #[must_use]
    pub fn registrations(&self) -> u64 {
        self.registrations.load(Ordering::Relaxed)
    }

    /// Drops for `reason` so far.
    #[must_use]
    pub fn drops(&self, reason: &str) -> u64 {
        snapshot(&self.drops).get(reason).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition (format 0.0.4), with `listed` as the per-face gauge.
    #[must_use]
    pub fn render(&self, listed: &BTreeMap<Face, usize>) -> String {
        let mut s = String::new();
        let counter = |s: &mut String, name: &str, help: &str, v: u64| {
            let _ = write!(
                s,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
            );
        };
        counter(
            &mut s,
            "muster_registrations_total",
            "Game servers newly registered.",
            self.registrations(),
        );
        counter(
            &mut s,
            "muster_verifications_failed_total",
            "Verification exchanges that failed.",
            self.verifications_failed.load(Ordering::Relaxed),
        );
        counter(
            &mut s,
            "muster_rate_limited_total",
            "Requests refused by a per-source token bucket.",
            self.rate_limited.load(Ordering::Relaxed),
        );
        let labelled =
            |s: &mut String, name: &str, help: &str, label: &str, m: BTreeMap<&str, u64>| {
                let _ = write!(s, "# HELP {name} {help}\n# TYPE {name} counter\n");
                for (k, v) in m {
                    let _ = writeln!(s, "{name}{{{label}=\"{k}\"}} {v}");
                }
            };
        labelled(
            &mut s,
            "muster_list_requests_total",
            "List requests served, per face.",
            "face",
            snapshot(&self.list_requests),
        );
        labelled(
            &mut s,
            "muster_drops_total",
            "Inputs dropped, per reason.",
            "reason",
            snapshot(&self.drops),
        );
        let _ = write!(
            s,
            "# HELP muster_servers Listed game servers, per registering face.\n# TYPE muster_servers gauge\n"
        );
        for (face, n) in listed {
            let _ = writeln!(s, "muster_servers{{protocol=\"{}\"}} {n}", face.name());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.count_registration();
        m.count_registration();
        m.count_drop("malformed");
        m.count_list_request("http");
        m.count_rate_limited();
        m.count_verification_failed();
        let listed = BTreeMap::from([(Face::GameSpy, 3), (Face::Mgmt, 0)]);
        let text = m.render(&listed);
        let expect = "\
# HELP muster_registrations_total Game servers newly registered.
# TYPE muster_registrations_total counter
muster_registrations_total 2
# HELP muster_verifications_failed_total Verification exchanges that failed.
# TYPE muster_verifications_failed_total counter
muster_verifications_failed_total 1
# HELP muster_rate_limited_total Requests refused by a per-source token bucket.
# TYPE muster_rate_limited_total counter
muster_rate_limited_total 1
# HELP muster_list_requests_total List requests served, per face.
# TYPE muster_list_requests_total counter
muster_list_requests_total{face=\"http\"} 1
# HELP muster_drops_total Inputs dropped, per reason.
# TYPE muster_drops_total counter
muster_drops_total{reason=\"malformed\"} 1
# HELP muster_servers Listed game servers, per registering face.
# TYPE muster_servers gauge
muster_servers{protocol=\"gamespy\"} 3
muster_servers{protocol=\"mgmt\"} 0
";
        assert_eq!(text, expect);
        assert_eq!(m.drops("malformed"), 1);
    }
}
