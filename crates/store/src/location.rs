//! Where the registry is stored (`--store`), and the lock that keeps two daemons off one data
//! directory.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use muster_core::store::StoreError;

use crate::postgres;
use crate::sqlite::{self, DB_FILE};

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
