//! Persistence of the registry: the [`Storage`] trait and its SQLite implementation.
//!
//! The registry is the truth while the daemon runs; storage is a copy that survives a restart,
//! including `kill -9`. [`crate::MasterHandle`] decides *when* to write: structural changes
//! (add, verify, de-list, remove) go through [`Storage::put`] / [`Storage::delete`] before the
//! face acknowledges them; heartbeat refreshes and poll results are collected and written with
//! [`Storage::put_batch`] at least once a second. So a crash loses at most the last second of
//! refreshes, never a registration.
//!
//! # SQLite
//! One file, `muster.sqlite3` in the data directory, in WAL mode with `synchronous=NORMAL`: a
//! committed transaction survives the process being killed (it is in the WAL, which the next
//! open replays); only a power loss can lose the last transactions. One row per record; the
//! poll result is a JSON column written and read by hand, because only `api::dto` types derive
//! `Serialize`.
//!
//! # What this does not do
//! No expiry (the registry decides; [`crate::run`] prunes after loading). The schema carries a
//! `user_version` of [`SCHEMA_VERSION`]; version 1 (no `face_data` column) is migrated in
//! place, a version this build does not know is refused rather than guessed at.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use muster_proto::limit::SourceKey;
use rusqlite::{Connection, OptionalExtension as _, params};
use serde_json::{Value, json};

use crate::registry::{
    Face, GameAddr, PollInfo, PollPlayer, Record, Registration, ServerKey, Timestamp, Verification,
    protocol_from_name,
};

/// The database file inside the data directory.
pub const DB_FILE: &str = "muster.sqlite3";
/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 2;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("failed to create data directory {0}")]
    DataDir(PathBuf, #[source] std::io::Error),
    /// The database reported an error.
    #[error("database error")]
    Db(#[from] rusqlite::Error),
    /// The file has a schema version this build does not know.
    #[error("unsupported schema version {0}")]
    Schema(i64),
}

/// Where records are kept between runs. Implemented by [`SqliteStore`]; a networked database
/// can implement it later. Methods are blocking and called with the registry locked, so an
/// implementation must be quick (or buffer internally).
pub trait Storage: Send + fmt::Debug {
    /// Every stored record. Rows that cannot be read back (a face or state this build does
    /// not know) are skipped.
    fn load(&mut self) -> Result<Vec<Record>, StoreError>;
    /// Writes one record durably (insert or replace).
    fn put(&mut self, rec: &Record) -> Result<(), StoreError>;
    /// Writes many records in one transaction.
    fn put_batch(&mut self, recs: &[&Record]) -> Result<(), StoreError>;
    /// Deletes one record durably; deleting a missing key is not an error.
    fn delete(&mut self, key: &ServerKey) -> Result<(), StoreError>;
    /// Deletes many records in one transaction.
    fn delete_batch(&mut self, keys: &[ServerKey]) -> Result<(), StoreError>;
}

/// [`Storage`] in one SQLite file. See the module docs.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS servers (
    game TEXT NOT NULL,
    addr_kind TEXT NOT NULL,
    addr_host TEXT NOT NULL,
    addr_port INTEGER NOT NULL,
    instance INTEGER NOT NULL,
    face TEXT NOT NULL,
    game_port INTEGER,
    query_addr TEXT,
    query_protocol TEXT,
    state TEXT NOT NULL,
    first_seen INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL,
    first_verified INTEGER,
    last_poll_ok INTEGER,
    poll_failures INTEGER NOT NULL,
    source TEXT NOT NULL,
    info TEXT,
    face_data TEXT,
    PRIMARY KEY (game, addr_kind, addr_host, addr_port, instance)
) WITHOUT ROWID;
";

const UPSERT: &str = "INSERT OR REPLACE INTO servers VALUES
    (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)";
/// Version 1 had no `face_data` column.
const MIGRATE_1_TO_2: &str = "ALTER TABLE servers ADD COLUMN face_data TEXT;";
const DELETE: &str = "DELETE FROM servers WHERE game = ?1 AND addr_kind = ?2 AND addr_host = ?3
    AND addr_port = ?4 AND instance = ?5";

fn addr_cols(addr: &GameAddr) -> (&'static str, String, u16) {
    match addr {
        GameAddr::Ip(a) => ("ip", a.ip().to_string(), a.port()),
        GameAddr::Host { host, port } => ("host", host.clone(), *port),
    }
}

fn ts(t: Timestamp) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn from_ts(v: i64) -> Timestamp {
    Timestamp(u64::try_from(v).unwrap_or(0))
}

fn info_json(info: &PollInfo) -> String {
    let players: Vec<Value> = info
        .players
        .iter()
        .map(|p| json!([p.name, p.score]))
        .collect();
    let rules: Vec<Value> = info.rules.iter().map(|(k, v)| json!([k, v])).collect();
    json!({
        "name": info.name, "map": info.map, "game_type": info.game_type,
        "num_players": info.num_players, "max_players": info.max_players,
        "password": info.password, "players": players, "rules": rules,
        "game_port": info.game_port,
    })
    .to_string()
}

fn info_from_json(s: &str) -> Option<PollInfo> {
    let v: Value = serde_json::from_str(s).ok()?;
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let num = |k: &str| {
        v.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    };
    let pair = |x: &Value| -> Option<(Value, Value)> {
        let a = x.as_array()?;
        Some((a.first()?.clone(), a.get(1)?.clone()))
    };
    let players = v
        .get("players")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(pair)
                .map(|(n, s)| PollPlayer {
                    name: n.as_str().unwrap_or_default().to_owned(),
                    score: s.as_i64(),
                })
                .collect()
        })
        .unwrap_or_default();
    let rules = v
        .get("rules")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(pair)
                .map(|(k, x)| {
                    (
                        k.as_str().unwrap_or_default().to_owned(),
                        x.as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Some(
        PollInfo {
            name: text("name"),
            map: text("map"),
            game_type: text("game_type"),
            num_players: num("num_players"),
            max_players: num("max_players"),
            password: v.get("password").and_then(Value::as_bool),
            players,
            rules,
            game_port: v
                .get("game_port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok()),
        }
        .bounded(),
    )
}

fn put_one(conn: &Connection, r: &Record) -> Result<(), StoreError> {
    let (kind, host, port) = addr_cols(&r.key.addr);
    conn.prepare_cached(UPSERT)?.execute(params![
        r.key.game,
        kind,
        host,
        port,
        i64::try_from(r.key.instance).unwrap_or(i64::MAX),
        r.face.name(),
        r.game_port,
        r.query_addr.map(|a| a.to_string()),
        r.query_protocol.map(|p| p.name()),
        r.state.name(),
        ts(r.first_seen),
        ts(r.last_heartbeat),
        r.first_verified.map(ts),
        r.last_poll_ok.map(ts),
        r.poll_failures,
        r.source.to_ip().to_string(),
        r.info.as_ref().map(info_json),
        r.face_data.as_deref(),
    ])?;
    Ok(())
}

fn delete_one(conn: &Connection, key: &ServerKey) -> Result<(), StoreError> {
    let (kind, host, port) = addr_cols(&key.addr);
    conn.prepare_cached(DELETE)?.execute(params![
        key.game,
        kind,
        host,
        port,
        i64::try_from(key.instance).unwrap_or(i64::MAX)
    ])?;
    Ok(())
}

/// One row as read back; `None` when a column holds something this build does not know.
struct Row {
    game: String,
    kind: String,
    host: String,
    port: u16,
    instance: i64,
    face: String,
    game_port: Option<u16>,
    query_addr: Option<String>,
    query_protocol: Option<String>,
    state: String,
    first_seen: i64,
    last_heartbeat: i64,
    first_verified: Option<i64>,
    last_poll_ok: Option<i64>,
    poll_failures: u32,
    source: String,
    info: Option<String>,
    face_data: Option<String>,
}

impl Row {
    fn into_record(self) -> Option<Record> {
        let addr = match self.kind.as_str() {
            "ip" => GameAddr::Ip(SocketAddr::new(self.host.parse().ok()?, self.port)),
            "host" => GameAddr::Host {
                host: self.host,
                port: self.port,
            },
            _ => return None,
        };
        let source: IpAddr = self.source.parse().ok()?;
        let query_protocol = match self.query_protocol {
            Some(p) => Some(protocol_from_name(&p)?),
            None => None,
        };
        let query_addr = match self.query_addr {
            Some(a) => Some(a.parse().ok()?),
            None => None,
        };
        let reg = Registration {
            key: ServerKey {
                game: self.game,
                addr,
                instance: u64::try_from(self.instance).ok()?,
            },
            face: Face::from_name(&self.face)?,
            game_port: self.game_port,
            query_addr,
            query_protocol,
            source: SourceKey::of(source),
        };
        let mut rec = Record::new(reg, from_ts(self.first_seen));
        rec.state = Verification::from_name(&self.state)?;
        rec.last_heartbeat = from_ts(self.last_heartbeat);
        rec.first_verified = self.first_verified.map(from_ts);
        rec.last_poll_ok = self.last_poll_ok.map(from_ts);
        rec.poll_failures = self.poll_failures;
        rec.info = self.info.as_deref().and_then(info_from_json);
        rec.face_data = self
            .face_data
            .filter(|d| d.len() <= crate::registry::MAX_FACE_DATA)
            .map(std::sync::Arc::from);
        Some(rec)
    }
}

/// Creates `dir` (and its parents) if missing; a directory created here is private to the
/// daemon's user (0700 on Unix). An existing directory keeps the permissions it has.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Makes the database file readable and writable by its owner only (0600 on Unix).
fn restrict_to_owner(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

impl SqliteStore {
    /// Opens (creating if needed) `dir/muster.sqlite3`, creating `dir` too.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        create_private_dir(dir).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
        let path = dir.join(DB_FILE);
        let conn = Connection::open(&path)?;
        // DDNet registrations keep their secret here: only the daemon's user may read it.
        // (SQLite gives the -wal and -shm files the database file's permissions.)
        restrict_to_owner(&path).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        match version {
            0 => {
                conn.execute_batch(SCHEMA)?;
                conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            }
            1 => {
                let tx = conn.unchecked_transaction()?;
                tx.execute_batch(MIGRATE_1_TO_2)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
                tx.commit()?;
            }
            SCHEMA_VERSION => conn.execute_batch(SCHEMA)?,
            v => return Err(StoreError::Schema(v)),
        }
        Ok(Self { conn, path })
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows in the table (for tests and metrics).
    pub fn count(&self) -> Result<usize, StoreError> {
        let n: Option<i64> = self
            .conn
            .query_row("SELECT COUNT(*) FROM servers", [], |r| r.get(0))
            .optional()?;
        Ok(usize::try_from(n.unwrap_or(0)).unwrap_or(0))
    }
}

impl Storage for SqliteStore {
    fn load(&mut self) -> Result<Vec<Record>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT game, addr_kind, addr_host, addr_port, instance, face, game_port,
             query_addr, query_protocol, state, first_seen, last_heartbeat, first_verified,
             last_poll_ok, poll_failures, source, info, face_data FROM servers",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Row {
                game: r.get(0)?,
                kind: r.get(1)?,
                host: r.get(2)?,
                port: r.get(3)?,
                instance: r.get(4)?,
                face: r.get(5)?,
                game_port: r.get(6)?,
                query_addr: r.get(7)?,
                query_protocol: r.get(8)?,
                state: r.get(9)?,
                first_seen: r.get(10)?,
                last_heartbeat: r.get(11)?,
                first_verified: r.get(12)?,
                last_poll_ok: r.get(13)?,
                poll_failures: r.get(14)?,
                source: r.get(15)?,
                info: r.get(16)?,
                face_data: r.get(17)?,
            })
        })?;
        let mut out = Vec::new();
        for row in rows {
            match row.ok().and_then(Row::into_record) {
                Some(rec) => out.push(rec),
                None => tracing::warn!("skipping a stored record this build cannot read"),
            }
        }
        Ok(out)
    }

    fn put(&mut self, rec: &Record) -> Result<(), StoreError> {
        put_one(&self.conn, rec)
    }

    fn put_batch(&mut self, recs: &[&Record]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for r in recs {
            put_one(&tx, r)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn delete(&mut self, key: &ServerKey) -> Result<(), StoreError> {
        delete_one(&self.conn, key)
    }

    fn delete_batch(&mut self, keys: &[ServerKey]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for k in keys {
            delete_one(&tx, k)?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
