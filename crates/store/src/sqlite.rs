//! [`Store`] in one SQLite file, `muster.sqlite3` in the data directory.
//!
//! WAL mode with `synchronous=NORMAL`: a committed transaction survives the process being
//! killed (it is in the WAL, which the next open replays); only a power loss can lose the last
//! transactions. One row per record; the poll result and the DDNet registration are JSON
//! columns written from serde rows ([`super::rows`]).
//!
//! At open, `PRAGMA quick_check` runs: a damaged file is refused with [`StoreError::Corrupt`]
//! naming it, and [`repair`] copies what can still be read into a fresh file. A `meta` table
//! kept by triggers counts the rows, so a repair can say how many were lost.
//!
//! The schema carries a `user_version` of [`SCHEMA_VERSION`]; versions 1 to 3 are migrated in
//! place (version 4 adds the `sources` column: where a record came from), a version this build
//! does not know is refused rather than guessed at.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_proto::limit::SourceKey;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _, params};

use muster_core::registry::{
    Face, GameAddr, Record, Registration, ServerKey, Timestamp, Verification, protocol_from_name,
};
use muster_core::store::rows::{
    DdnetRow, FaceDataV2, InfoRow, SourceRow, sources_column, sources_from_rows,
};
use muster_core::store::{Loaded, Store, StoreError};

/// The database file inside the data directory.
pub const DB_FILE: &str = "muster.sqlite3";
/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 4;
/// Reasons kept in [`Loaded::skipped_reasons`] at most.
const MAX_REASONS: usize = 100;

/// [`Store`] in one SQLite file. See the module docs.
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
    last_proof INTEGER,
    ddnet TEXT,
    sources TEXT,
    PRIMARY KEY (game, addr_kind, addr_host, addr_port, instance)
) WITHOUT ROWID;
";

/// The row counter and the triggers that keep it (version 3).
const META: &str = "
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('rows', (SELECT COUNT(*) FROM servers));
CREATE TRIGGER IF NOT EXISTS servers_count_insert AFTER INSERT ON servers
    BEGIN UPDATE meta SET v = v + 1 WHERE k = 'rows'; END;
CREATE TRIGGER IF NOT EXISTS servers_count_delete AFTER DELETE ON servers
    BEGIN UPDATE meta SET v = v - 1 WHERE k = 'rows'; END;
";

const UPSERT: &str = "INSERT INTO servers (game, addr_kind, addr_host, addr_port, instance,
    face, game_port, query_addr, query_protocol, state, first_seen, last_heartbeat,
    first_verified, last_poll_ok, poll_failures, source, info, face_data, last_proof, ddnet,
    sources)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, NULL,
    ?18, ?19, ?20)
    ON CONFLICT (game, addr_kind, addr_host, addr_port, instance) DO UPDATE SET
    face = excluded.face, game_port = excluded.game_port, query_addr = excluded.query_addr,
    query_protocol = excluded.query_protocol, state = excluded.state,
    first_seen = excluded.first_seen, last_heartbeat = excluded.last_heartbeat,
    first_verified = excluded.first_verified, last_poll_ok = excluded.last_poll_ok,
    poll_failures = excluded.poll_failures, source = excluded.source, info = excluded.info,
    face_data = NULL, last_proof = excluded.last_proof, ddnet = excluded.ddnet,
    sources = excluded.sources";
/// Version 1 had no `face_data` column.
const MIGRATE_1_TO_2: &str = "ALTER TABLE servers ADD COLUMN face_data TEXT;";
/// Version 3 adds the proof time and the typed DDNet column.
const MIGRATE_2_TO_3: &str = "ALTER TABLE servers ADD COLUMN last_proof INTEGER;
ALTER TABLE servers ADD COLUMN ddnet TEXT;";
/// Version 4 adds where a record came from (NULL: a direct registration).
const MIGRATE_3_TO_4: &str = "ALTER TABLE servers ADD COLUMN sources TEXT;";
const DELETE: &str = "DELETE FROM servers WHERE game = ?1 AND addr_kind = ?2 AND addr_host = ?3
    AND addr_port = ?4 AND instance = ?5";
const COLUMNS: &str = "game, addr_kind, addr_host, addr_port, instance, face, game_port,
    query_addr, query_protocol, state, first_seen, last_heartbeat, first_verified,
    last_poll_ok, poll_failures, source, info, face_data, last_proof, ddnet, sources";
const ORDER: &str = "game, addr_kind, addr_host, addr_port, instance";

fn addr_cols(addr: &GameAddr) -> (&'static str, String, u16) {
    match addr {
        GameAddr::Ip(a) => ("ip", a.ip().to_string(), a.port()),
        GameAddr::Host { host, port } => ("host", host.to_string(), *port),
    }
}

fn ts(t: Timestamp) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn from_ts(v: i64) -> Timestamp {
    Timestamp(u64::try_from(v).unwrap_or(0))
}

fn put_one(conn: &Connection, r: &Record) -> rusqlite::Result<()> {
    let (kind, host, port) = addr_cols(&r.key.addr);
    let info = r
        .info
        .as_deref()
        .map(|i| serde_json::to_string(&InfoRow::from(i)).unwrap_or_default());
    let ddnet = r
        .ddnet()
        .map(AsRef::as_ref)
        .map(|d| muster_core::store::rows::ddnet_column(d, &r.key.addr))
        .transpose()
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let sources = sources_column(r);
    conn.prepare_cached(UPSERT)?.execute(params![
        r.key.game.as_str(),
        kind,
        host,
        port,
        i64::try_from(r.key.instance).unwrap_or(i64::MAX),
        r.face.name(),
        r.game_port,
        r.query_addr().map(|a| a.to_string()),
        r.query_protocol.map(|p| p.name()),
        r.state.name(),
        ts(r.first_seen),
        ts(r.last_heartbeat),
        ts(r.first_seen),
        r.last_poll_ok().map(ts),
        r.poll_failures(),
        r.source.to_ip().to_string(),
        info,
        ts(r.last_proof),
        ddnet,
        sources,
    ])?;
    Ok(())
}

fn delete_one(conn: &Connection, key: &ServerKey) -> rusqlite::Result<()> {
    let (kind, host, port) = addr_cols(&key.addr);
    conn.prepare_cached(DELETE)?.execute(params![
        key.game.as_str(),
        kind,
        host,
        port,
        i64::try_from(key.instance).unwrap_or(i64::MAX)
    ])?;
    Ok(())
}

/// One row as read back.
pub(super) struct Row {
    pub(super) game: String,
    pub(super) kind: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) instance: i64,
    pub(super) face: String,
    pub(super) game_port: Option<u16>,
    pub(super) query_addr: Option<String>,
    pub(super) query_protocol: Option<String>,
    pub(super) state: String,
    pub(super) first_seen: i64,
    pub(super) last_heartbeat: i64,
    pub(super) first_verified: Option<i64>,
    pub(super) last_poll_ok: Option<i64>,
    pub(super) poll_failures: u32,
    pub(super) source: String,
    pub(super) info: Option<String>,
    pub(super) face_data: Option<String>,
    pub(super) last_proof: Option<i64>,
    pub(super) ddnet: Option<String>,
    pub(super) sources: Option<String>,
}

impl Row {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
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
            last_proof: r.get(18)?,
            ddnet: r.get(19)?,
            sources: r.get(20)?,
        })
    }

    /// The record, or why this build cannot use the row.
    pub(super) fn into_record(self) -> Result<Record, String> {
        let addr = match self.kind.as_str() {
            "ip" => GameAddr::Ip(SocketAddr::new(
                self.host
                    .parse()
                    .map_err(|_| format!("bad address {:?}", self.host))?,
                self.port,
            )),
            "host" => GameAddr::Host {
                host: self.host.into(),
                port: self.port,
            },
            k => return Err(format!("unknown address kind {k:?}")),
        };
        let source: IpAddr = self
            .source
            .parse()
            .map_err(|_| format!("bad source {:?}", self.source))?;
        let query_protocol = match self.query_protocol {
            Some(p) => Some(protocol_from_name(&p).ok_or(format!("unknown protocol {p:?}"))?),
            None => None,
        };
        let query_addr = match self.query_addr {
            Some(a) => Some(a.parse().map_err(|_| format!("bad query address {a:?}"))?),
            None => None,
        };
        let face = Face::from_name(&self.face).ok_or(format!("unknown face {:?}", self.face))?;
        // Schema 2 kept unproven registrations as "pending"; they never were listed.
        let state = match self.state.as_str() {
            "pending" => return Err("unverified (pending) registration".to_owned()),
            s => Verification::from_name(s).ok_or(format!("unknown state {s:?}"))?,
        };
        let reg = Registration {
            key: ServerKey {
                game: self.game.into(),
                addr,
                instance: u64::try_from(self.instance).map_err(|_| "bad instance")?,
            },
            face,
            game_port: self.game_port,
            query_addr,
            query_protocol,
            source: SourceKey::of(source),
        };
        // The list order was the first verification time; records now start verified.
        let first = self.first_verified.unwrap_or(self.first_seen);
        let mut rec = Record::new(0, reg, from_ts(first));
        rec.state = state;
        rec.last_heartbeat = from_ts(self.last_heartbeat);
        rec.last_proof = from_ts(self.last_proof.unwrap_or(self.last_heartbeat));
        rec.set_last_poll_ok(self.last_poll_ok.map(from_ts));
        rec.set_poll_failures(self.poll_failures);
        if let Some(i) = self.info {
            let row: InfoRow =
                serde_json::from_str(&i).map_err(|e| format!("bad info column: {e}"))?;
            rec.info = Some(Arc::new(row.into()));
        }
        let ddnet = match (self.ddnet, self.face_data) {
            (Some(d), _) => Some(
                serde_json::from_str::<DdnetRow>(&d)
                    .map_err(|e| format!("bad ddnet column: {e}"))?,
            ),
            (None, Some(fd)) => serde_json::from_str::<FaceDataV2>(&fd)
                .ok()
                .map(|v2| v2.into_row(rec.last_heartbeat)),
            (None, None) => None,
        };
        if let Some(d) = ddnet {
            rec.set_ddnet(Some(Arc::new(d.into_data(&rec.key.addr)?)));
        }
        if let Some(s) = self.sources {
            let rows: Vec<SourceRow> =
                serde_json::from_str(&s).map_err(|e| format!("bad sources column: {e}"))?;
            let sources = sources_from_rows(rows);
            if !sources.is_empty() {
                rec.set_sources(sources);
            }
        }
        Ok(rec)
    }
}

/// Creates `dir` (and its parents) if missing; a directory created here is private to the
/// daemon's user (0700 on Unix). An existing directory keeps the permissions it has.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
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

/// The first problem `PRAGMA quick_check` reports, or `None` when the file is sound.
fn quick_check(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let mut rows = stmt.query([])?;
    let first: Option<String> = match rows.next()? {
        Some(r) => r.get(0)?,
        None => None,
    };
    Ok(first.filter(|s| s != "ok"))
}

impl SqliteStore {
    /// Opens (creating if needed) `dir/muster.sqlite3`, creating `dir` too; checks the file's
    /// integrity and migrates an older schema.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_file(&dir.join(DB_FILE))
    }

    /// Opens (creating if needed) the database file `path`, creating its directory too (the
    /// `sqlite:PATH` form of a store URL); checks and migrates as [`SqliteStore::open`] does.
    pub fn open_file(path: &Path) -> Result<Self, StoreError> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        create_private_dir(dir).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
        let path = path.to_owned();
        let db = |e: rusqlite::Error| StoreError::Db(path.clone(), e.into());
        let conn = Connection::open(&path).map_err(db)?;
        // DDNet registrations keep their secret here: only the daemon's user may read it.
        // (SQLite gives the -wal and -shm files the database file's permissions.)
        restrict_to_owner(&path).map_err(|e| StoreError::DataDir(dir.to_owned(), e))?;
        let corrupt = |detail: String| StoreError::Corrupt {
            path: path.clone(),
            detail,
        };
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db)?;
        // A file that is not a database at all fails here already.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| corrupt(e.to_string()))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(db)?;
        match quick_check(&conn) {
            Ok(None) => {}
            Ok(Some(problem)) => return Err(corrupt(problem)),
            Err(e) => return Err(corrupt(e.to_string())),
        }
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(db)?;
        let migrate = |steps: &[&str]| -> rusqlite::Result<()> {
            let tx = conn.unchecked_transaction()?;
            for s in steps {
                tx.execute_batch(s)?;
            }
            tx.execute_batch(META)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            tx.commit()
        };
        match version {
            0 => migrate(&[SCHEMA]).map_err(db)?,
            1 => migrate(&[MIGRATE_1_TO_2, MIGRATE_2_TO_3, MIGRATE_3_TO_4]).map_err(db)?,
            2 => migrate(&[MIGRATE_2_TO_3, MIGRATE_3_TO_4]).map_err(db)?,
            3 => migrate(&[MIGRATE_3_TO_4]).map_err(db)?,
            SCHEMA_VERSION => conn.execute_batch(&format!("{SCHEMA}{META}")).map_err(db)?,
            v => return Err(StoreError::Schema(path, v)),
        }
        Ok(Self { conn, path })
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Db(self.path.clone(), e.into())
    }

    /// Rows in the table (for tests and metrics).
    pub fn count(&self) -> Result<usize, StoreError> {
        let n: Option<i64> = self
            .conn
            .query_row("SELECT COUNT(*) FROM servers", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.db(e))?;
        Ok(usize::try_from(n.unwrap_or(0)).unwrap_or(0))
    }

    /// The row count the triggers keep.
    pub fn counted_rows(&self) -> Result<usize, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT v FROM meta WHERE k = 'rows'", [], |r| r.get(0))
            .map_err(|e| self.db(e))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

impl Store for SqliteStore {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM servers");
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map([], Row::read)
            .map_err(|e| StoreError::Db(self.path.clone(), e.into()))?;
        let mut out = Loaded::default();
        for row in rows {
            // A read error is damage the quick check missed: never skip it silently.
            let row = row.map_err(|e| StoreError::Db(self.path.clone(), e.into()))?;
            match row.into_record() {
                Ok(rec) => out.records.push(rec),
                Err(why) => {
                    out.skipped += 1;
                    if out.skipped_reasons.len() < MAX_REASONS {
                        out.skipped_reasons.push(why);
                    }
                }
            }
        }
        Ok(out)
    }

    fn write(&mut self, puts: &[Arc<Record>], deletes: &[ServerKey]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let db = |e: rusqlite::Error| StoreError::Db(path.clone(), e.into());
        let tx = self.conn.transaction().map_err(db)?;
        for r in puts {
            put_one(&tx, r).map_err(db)?;
        }
        for k in deletes {
            delete_one(&tx, k).map_err(db)?;
        }
        tx.commit().map_err(db)
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// Records copied into the new file.
    pub recovered: usize,
    /// Rows that could not be read, when the damaged file still said how many it had.
    pub lost: Option<usize>,
    /// Rows that were read but hold values this build does not know (dropped too).
    pub unreadable: usize,
    /// Where the damaged file was moved.
    pub moved_to: PathBuf,
    /// The new database.
    pub path: PathBuf,
}

/// Rows readable from `conn` in primary-key order (`desc`: from the end), until the first
/// read error.
fn scan(conn: &Connection, desc: bool, out: &mut Vec<Row>) -> bool {
    let dir = if desc { "DESC" } else { "ASC" };
    let order = ORDER
        .split(", ")
        .map(|c| format!("{c} {dir}"))
        .collect::<Vec<_>>()
        .join(", ");
    // A damaged file of version 3 has no `sources` column yet (its records are direct).
    let older = COLUMNS.replace(", sources", ", NULL");
    let sql = |cols: &str| format!("SELECT {cols} FROM servers ORDER BY {order}");
    let Ok(mut stmt) = conn
        .prepare(&sql(COLUMNS))
        .or_else(|_| conn.prepare(&sql(&older)))
    else {
        return false;
    };
    let Ok(rows) = stmt.query_map([], Row::read) else {
        return false;
    };
    for r in rows {
        match r {
            Ok(r) => out.push(r),
            Err(_) => return false,
        }
    }
    true
}

/// Copies every readable record of the damaged `dir/muster.sqlite3` into a new file, moves the
/// damaged one (with its WAL) aside as `muster.sqlite3.damaged-<unix seconds>` and puts the new
/// one in its place. Reads the table from both ends, so rows on both sides of a damaged page
/// are kept. The daemon must not be running.
pub fn repair(dir: &Path) -> Result<RepairReport, StoreError> {
    let path = dir.join(DB_FILE);
    let db = |e: rusqlite::Error| StoreError::Db(path.clone(), e.into());
    let damaged = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db)?;
    let said: Option<usize> = damaged
        .query_row("SELECT v FROM meta WHERE k = 'rows'", [], |r| {
            r.get::<_, i64>(0)
        })
        .ok()
        .and_then(|n| usize::try_from(n).ok());
    let mut rows = Vec::new();
    let complete = scan(&damaged, false, &mut rows);
    if !complete {
        scan(&damaged, true, &mut rows);
    }
    drop(damaged);
    let mut seen = std::collections::HashSet::new();
    let mut records = Vec::new();
    let mut unreadable = 0;
    let mut read = 0;
    for r in rows {
        let id = (
            r.game.clone(),
            r.kind.clone(),
            r.host.clone(),
            r.port,
            r.instance,
        );
        if !seen.insert(id) {
            continue;
        }
        read += 1;
        match r.into_record() {
            Ok(rec) => records.push(Arc::new(rec)),
            Err(_) => unreadable += 1,
        }
    }
    let fresh_dir = dir.join(".repair");
    let _ = std::fs::remove_dir_all(&fresh_dir);
    let mut fresh = SqliteStore::open(&fresh_dir)?;
    fresh.write(&records, &[])?;
    drop(fresh);
    let stamp = Timestamp::now().as_secs();
    let moved_to = dir.join(format!("{DB_FILE}.damaged-{stamp}"));
    let io = |e| StoreError::DataDir(dir.to_owned(), e);
    std::fs::rename(&path, &moved_to).map_err(io)?;
    for ext in ["-wal", "-shm"] {
        let side = dir.join(format!("{DB_FILE}{ext}"));
        if side.exists() {
            std::fs::rename(&side, dir.join(format!("{DB_FILE}.damaged-{stamp}{ext}")))
                .map_err(io)?;
        }
    }
    std::fs::rename(fresh_dir.join(DB_FILE), &path).map_err(io)?;
    let _ = std::fs::remove_dir_all(&fresh_dir);
    Ok(RepairReport {
        recovered: records.len(),
        lost: said.map(|n| n.saturating_sub(read)),
        unreadable,
        moved_to,
        path,
    })
}

#[cfg(test)]
#[path = "tests.rs"]
pub(crate) mod tests;
