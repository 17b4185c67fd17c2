//! What each upstream did lately, for `/metrics` and `/healthz`.
//!
//! One row per configured upstream (upstreams come from the configuration only, so the number
//! of label values is bounded by it). The upstream tasks write their row after each pull;
//! readers copy the rows under a short lock.

use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use crate::registry::Timestamp;

/// Longest error text kept per upstream.
const MAX_ERROR_LEN: usize = 256;

/// One upstream's state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpstreamStatus {
    /// Its name (`[[upstream]] name`, or `<kind>:<address>`).
    pub name: String,
    /// Its kind (`gamespy`, `muster`, …).
    pub kind: &'static str,
    /// When the last pull started.
    pub last_attempt: Option<Timestamp>,
    /// When a pull last succeeded.
    pub last_success: Option<Timestamp>,
    /// Why the last pull failed, while it is the latest outcome.
    pub last_error: Option<String>,
    /// Pulls failed in a row (0 after a success).
    pub failures_in_row: u32,
    /// Successful pulls.
    pub pulls_ok: u64,
    /// Failed pulls.
    pub pulls_failed: u64,
    /// Servers the last successful pull listed.
    pub listed: usize,
    /// Records this upstream is a source of (after the last pull).
    pub learned: usize,
    /// Servers it listed that answered this master's query (and were listed), in total.
    pub verified: u64,
    /// Servers it listed that did not answer (or answered as another game), in total.
    pub unanswered: u64,
    /// Servers waiting for verification after the last pull (at most `max_unverified`).
    pub unverified: usize,
    /// Servers left for a later pull because `max_unverified` was reached, in total.
    pub over_cap: u64,
}

/// The rows of every upstream. Cheap to share (lives in [`crate::metrics::Metrics`]).
#[derive(Debug, Default)]
pub struct Board {
    rows: Mutex<Vec<UpstreamStatus>>,
}

impl Board {
    /// Adds the row of an upstream (or keeps the one already there); returns its index.
    pub fn register(&self, name: &str, kind: &'static str) -> usize {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = rows.iter().position(|r| r.name == name) {
            return i;
        }
        rows.push(UpstreamStatus {
            name: name.to_owned(),
            kind,
            ..UpstreamStatus::default()
        });
        rows.len() - 1
    }

    /// Changes row `i`.
    pub fn update(&self, i: usize, f: impl FnOnce(&mut UpstreamStatus)) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = rows.get_mut(i) {
            f(r);
            if let Some(e) = &mut r.last_error {
                if let Some((cut, _)) = e.char_indices().nth(MAX_ERROR_LEN) {
                    e.truncate(cut);
                }
            }
        }
    }

    /// A copy of every row.
    #[must_use]
    pub fn rows(&self) -> Vec<UpstreamStatus> {
        self.rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The row of the upstream called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<UpstreamStatus> {
        self.rows().into_iter().find(|r| r.name == name)
    }

    /// The Prometheus text of every row (nothing when no upstream is configured).
    #[must_use]
    pub fn render(&self) -> String {
        let rows = self.rows();
        let mut s = String::new();
        if rows.is_empty() {
            return s;
        }
        type Get = fn(&UpstreamStatus) -> u64;
        let series: [(&str, &str, &str, Get); 9] = [
            (
                "muster_upstream_last_success_seconds",
                "gauge",
                "Unix time of the upstream's last successful pull (0: never).",
                |r| r.last_success.map_or(0, Timestamp::as_secs),
            ),
            (
                "muster_upstream_failures_in_row",
                "gauge",
                "Pulls of the upstream failed in a row.",
                |r| u64::from(r.failures_in_row),
            ),
            (
                "muster_upstream_pulls_total",
                "counter",
                "Successful pulls of the upstream.",
                |r| r.pulls_ok,
            ),
            (
                "muster_upstream_pull_failures_total",
                "counter",
                "Failed pulls of the upstream.",
                |r| r.pulls_failed,
            ),
            (
                "muster_upstream_listed",
                "gauge",
                "Servers the upstream's last successful pull listed.",
                |r| r.listed as u64,
            ),
            (
                "muster_upstream_learned",
                "gauge",
                "Records the upstream is a source of.",
                |r| r.learned as u64,
            ),
            (
                "muster_upstream_verified_total",
                "counter",
                "Servers the upstream listed that answered this master's query and were listed.",
                |r| r.verified,
            ),
            (
                "muster_upstream_unanswered_total",
                "counter",
                "Servers the upstream listed that did not answer this master's query.",
                |r| r.unanswered,
            ),
            (
                "muster_upstream_unverified",
                "gauge",
                "Servers of the upstream waiting for verification.",
                |r| r.unverified as u64,
            ),
        ];
        for (name, kind, help, get) in series {
            let _ = write!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
            for r in &rows {
                let _ = writeln!(
                    s,
                    "{name}{{upstream=\"{}\",kind=\"{}\"}} {}",
                    label(&r.name),
                    r.kind,
                    get(r)
                );
            }
        }
        s
    }
}

/// A label value in the text format: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_render_one_series_per_upstream() {
        let b = Board::default();
        assert_eq!(b.render(), "");
        let i = b.register("a\"b", "gamespy");
        assert_eq!(b.register("a\"b", "gamespy"), i);
        let j = b.register("m", "muster");
        b.update(j, |r| {
            r.last_success = Some(Timestamp::from_secs(1_700_000_000));
            r.verified = 3;
            r.last_error = Some("x".repeat(1000));
        });
        let text = b.render();
        assert!(text.contains(
            "muster_upstream_last_success_seconds{upstream=\"m\",kind=\"muster\"} 1700000000"
        ));
        assert!(
            text.contains("muster_upstream_verified_total{upstream=\"a\\\"b\",kind=\"gamespy\"} 0")
        );
        assert_eq!(b.get("m").unwrap().last_error.unwrap().len(), MAX_ERROR_LEN);
        assert_eq!(text.matches("upstream=\"m\"").count(), 9);
    }
}
