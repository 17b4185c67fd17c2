//! Persistence of the registry: the [`Store`] trait, its rows, and the SQLite implementation.
//!
//! The registry is the truth while the daemon runs; the store is a copy that survives a
//! restart, including `kill -9`. The store never decides anything: the persister
//! ([`crate::handle`]) hands it batches of records that changed and keys that were removed,
//! written in one transaction each, outside the registry's lock.
//!
//! Rows are serde-derived structs ([`rows`]); a row this build cannot read is counted and
//! reported at load with its reason, never skipped silently, and a damaged file stops the
//! daemon at start (see [`sqlite::SqliteStore::open`]) with the way to recover
//! ([`sqlite::repair`]).

pub mod postgres;
pub mod rows;
pub mod sqlite;

use std::fmt;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::registry::{Record, ServerKey};

pub use postgres::{PgShared, PgStore};
pub use sqlite::{DB_FILE, RepairReport, SCHEMA_VERSION, SqliteStore, repair};

/// Storage failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("failed to create data directory {0}")]
    DataDir(PathBuf, #[source] std::io::Error),
    /// The database reported an error.
    #[error("database error in {0}")]
    Db(PathBuf, #[source] rusqlite::Error),
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
    History(#[from] rusqlite::Error),
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
        source: tokio_postgres::Error,
    },
    /// No connection to PostgreSQL could be had.
    #[error("no connection to the database at {at}")]
    PostgresPool {
        /// The database (its URL without the password).
        at: String,
        /// The cause.
        #[source]
        source: deadpool_postgres::PoolError,
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

/// Where the registry is stored: `sqlite:PATH` (a database file; the default is
/// `sqlite:<data-dir>/muster.sqlite3`) or `postgres://USER:PASS@HOST:PORT/DB` (a database
/// several instances may share, see [`postgres`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// One SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (the URL as given, password included).
    Postgres(String),
}

impl StoreUrl {
    /// Parses `sqlite:PATH`, `postgres://…` or `postgresql://…`.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        let s = s.trim();
        if let Some(path) = s.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(StoreError::Url {
                    url: s.to_owned(),
                    why: "sqlite: needs a file path",
                });
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(Self::Postgres(s.to_owned()));
        }
        Err(StoreError::Url {
            url: postgres::redact(s),
            why: "expected sqlite:PATH or postgres://USER:PASS@HOST:PORT/DB",
        })
    }

    /// The default: `sqlite:<data_dir>/muster.sqlite3`.
    #[must_use]
    pub fn default_for(data_dir: &Path) -> Self {
        Self::Sqlite(data_dir.join(DB_FILE))
    }

    /// The URL for messages (a PostgreSQL password replaced by `***`).
    #[must_use]
    pub fn redacted(&self) -> String {
        match self {
            Self::Sqlite(p) => format!("sqlite:{}", p.display()),
            Self::Postgres(u) => postgres::redact(u),
        }
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

/// Where records are kept between runs. Implemented by [`SqliteStore`]; a networked database
/// can implement it too. Methods block; they are called by the persister, never with the
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

/// The lock file inside the data directory.
pub const LOCK_FILE: &str = "muster.lock";

/// An exclusive lock on a data directory, held while the daemon runs (released when dropped,
/// or by the OS when the process dies, `kill -9` included).
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl DataDirLock {
    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Locks `dir` (creating it) for this process, so two daemons never share one store by
/// accident; the lock file holds the owner's PID, which the error names.
// `File::try_lock` is std since 1.89, newer than the declared MSRV; the MSRV is raised with
// the workspace-wide lint pass that the newer toolchain asks for.
#[allow(clippy::incompatible_msrv)]
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock, StoreError> {
    sqlite::create_private_dir(dir).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
    let path = dir.join(LOCK_FILE);
    let io = |e| StoreError::DataDir(dir.to_owned(), e);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {
            file.set_len(0).map_err(io)?;
            writeln!(file, "{}", std::process::id()).map_err(io)?;
            Ok(DataDirLock { _file: file, path })
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(StoreError::Locked {
                path,
                pid: pid.trim().to_owned(),
            })
        }
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}
