//! Persistence of the registry as a contract: the [`Store`] trait, its errors and its rows. The
//! SQLite and PostgreSQL implementations live in `muster-store`.
//!
//! The registry is the truth while the daemon runs; the store is a copy that survives a
//! restart, including `kill -9`. The store never decides anything: the persister
//! ([`crate::handle`]) hands it batches of records that changed and keys that were removed,
//! written in one transaction each, outside the registry's lock.
//!
//! PostgreSQL's rows (and SQLite's up to its schema 4) are serde-derived structs ([`rows`]);
//! SQLite's schema 5 keeps each record as two compact blobs (`muster-store`'s codec), with the
//! DDNet row as JSON beside them. A row this build cannot read is counted and reported at load
//! with its reason, never skipped silently, and a damaged file stops the daemon at start with
//! the way to recover (`muster serve --repair`).

pub mod rows;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::registry::{Record, ServerKey};

/// A database library's own error, kept as the source of a [`StoreError`].
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("failed to create data directory {0}")]
    DataDir(PathBuf, #[source] std::io::Error),
    /// The database reported an error.
    #[error("database error in {0}")]
    Db(PathBuf, #[source] BackendError),
    /// The file has a schema version this build does not know.
    #[error("{0} has schema version {1}, which this build does not know")]
    Schema(PathBuf, i64),
    /// The integrity check found damage.
    #[error(
        "{path} is damaged ({detail}); stop the daemon and run `muster serve --repair` with the \
         same --data-dir to copy the readable records into a new file"
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What `PRAGMA quick_check` reported first.
        detail: String,
    },
    /// Another process holds the data directory.
    #[error(
        "{path} is in use by another muster process (pid {pid}); stop it or use another --data-dir"
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The other process.
        pid: String,
    },
    /// The player-count history database reported an error.
    #[error("history database error")]
    History(#[source] BackendError),
    /// A change was not written within the time its caller waits.
    #[error("the store did not confirm the write in time")]
    Timeout,
    /// The store URL cannot be used.
    #[error("invalid store URL {url}: {why}")]
    Url {
        /// The URL (without its password).
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A record's DDNet info could not be read from the registry's info file.
    #[error("cannot read a DDNet info from the registry's info file")]
    InfoRead(#[source] std::io::Error),
    /// PostgreSQL reported an error.
    #[error("database error at {at}")]
    Postgres {
        /// The database (its URL without the password).
        at: String,
        /// The cause.
        #[source]
        source: BackendError,
    },
    /// No connection to PostgreSQL could be had.
    #[error("no connection to the database at {at}")]
    PostgresPool {
        /// The database (its URL without the password).
        at: String,
        /// The cause.
        #[source]
        source: BackendError,
    },
}

impl StoreError {
    /// Whether the daemon should refuse to start on this error (bad input, not a transient
    /// failure): the file is damaged, of an unknown version, or in use.
    #[must_use]
    pub fn is_fatal_at_start(&self) -> bool {
        matches!(
            self,
            Self::Corrupt { .. } | Self::Schema(..) | Self::Locked { .. } | Self::Url { .. }
        )
    }
}

/// What [`Store::load`] read.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Records read back.
    pub records: Vec<Record>,
    /// Rows this build cannot read, with the reason of each (at most the first 100 reasons
    /// are kept; `skipped` counts all).
    pub skipped_reasons: Vec<String>,
    /// Rows not read.
    pub skipped: usize,
}

/// A store that keeps nothing: what tests and benchmarks open a handle on when they measure or
/// drive the registry without a database. It loads no records and accepts every write.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullStore;

impl Store for NullStore {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        Ok(Loaded::default())
    }
    fn write(&mut self, _: &[Arc<Record>], _: &[ServerKey]) -> Result<(), StoreError> {
        Ok(())
    }
    fn location(&self) -> String {
        "nowhere (a store that keeps nothing)".into()
    }
}

/// Where records are kept between runs. Implemented in `muster-store` (SQLite, PostgreSQL). Methods block; they are called by the persister, never with the
/// registry locked.
pub trait Store: Send + fmt::Debug {
    /// Every stored record. A row that reads but holds values this build does not know is
    /// skipped and reported in [`Loaded`]; a read error of the database is an error.
    fn load(&mut self) -> Result<Loaded, StoreError>;
    /// Writes `puts` (insert or replace) and deletes `deletes` (a missing key is not an
    /// error) in one transaction.
    fn write(&mut self, puts: &[Arc<Record>], deletes: &[ServerKey]) -> Result<(), StoreError>;
    /// Where the data is (for messages).
    fn location(&self) -> String;
}
