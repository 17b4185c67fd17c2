//! What each upstream did lately, for `/metrics` and `/healthz`.
//!
//! One row per configured upstream (upstreams come from the configuration only, so the number
//! of label values is bounded by it). The upstream tasks write their row after each pull;
//! readers copy the rows under a short lock.

use std::sync::{Mutex, PoisonError};

use crate::registry::Timestamp;

/// Longest error text kept per upstream.
pub const MAX_ERROR_LEN: usize = 256;

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
}
