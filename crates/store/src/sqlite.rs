//! [`Store`] in one SQLite file, `muster.sqlite3` in the data directory.
//!
//! WAL mode with `synchronous=NORMAL`: a committed transaction survives the process being
//! killed (it is in the WAL, which the next open replays); only a power loss can lose the last
//! transactions. One row per record in the `records` table: the key and the record each as one
//! compact blob (the `blob` module), the DDNet registration as a JSON column written from its
//! serde row ([`super::rows`]). A write prepares its statements once per batch and encodes
//! every row into two buffers the store reuses.
//!
//! At open, `PRAGMA quick_check` runs: a damaged file is refused with [`StoreError::Corrupt`]
//! naming it, and [`repair`] copies what can still be read into a fresh file. A `meta` row
//! counts the rows (each write adds the rows it inserted and takes away those it deleted, in
//! its own transaction), so a repair can say how many were lost.
//!
//! The schema carries a `user_version` of [`SCHEMA_VERSION`]; versions 1 to 4 (one text
//! column per field in the `servers` table, the poll info and sources as JSON) are migrated
//! in place: the columns added since are added, then every row is copied into `records`. A
//! row of an older version this build cannot read stays in `servers` and is reported at
//! every load, as before. A version this build does not know is refused rather than guessed
//! at.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_proto::limit::SourceKey;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _, params};

use muster_core::registry::{
    Face, GameAddr, Record, Registration, ServerKey, Timestamp, Verification, protocol_from_name,
};
use muster_core::store::rows::{DdnetRow, FaceDataV2, InfoRow, SourceRow, sources_from_rows};
use muster_core::store::{Loaded, Store, StoreError};

use crate::blob;

/// The database file inside the data directory.
pub const DB_FILE: &str = "muster.sqlite3";
/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 5;
/// The page cache of the store's connection, KiB (SQLite's default is 2,000 KiB): the writes
/// touch the few pages at the end of the key order and the ones of the records that changed;
/// the file itself stays in the system's page cache. 512 KiB was 52 bytes of resident set per
/// server at 10,000 servers; writing 10,000 records in batches of 500 took as long with 128
/// (57–67 ms against 62). With 128 the cache filled while the first thousand servers
/// registered, ~150 bytes a server at that size; with 32 the same write took 37–42 ms
/// against 35–39 ms with 128.
pub const STORE_CACHE_KIB: i64 = 32;
/// Reasons kept in [`Loaded::skipped_reasons`] at most.
const MAX_REASONS: usize = 100;

/// [`Store`] in one SQLite file. See the module docs.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// The key blob of the row being written (reused).
    key: Vec<u8>,
    /// The record blob of the row being written (reused).
    rec: Vec<u8>,
}

/// Schema 5: one row per record, its key and its fields as blobs; the row counter.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS records (
    key BLOB PRIMARY KEY,
    rec BLOB NOT NULL,
    ddnet TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('rows', (SELECT COUNT(*) FROM records));
";

/// A record not stored yet (nothing changes when it is: the row count then stays).
const INSERT: &str = "INSERT INTO records (key, rec, ddnet) VALUES (?1, ?2, ?3)
    ON CONFLICT (key) DO NOTHING";
/// A record stored already: replaced in place.
const UPDATE: &str = "UPDATE records SET rec = ?2, ddnet = ?3 WHERE key = ?1";
const DELETE: &str = "DELETE FROM records WHERE key = ?1";
const ADD_ROWS: &str = "UPDATE meta SET v = v + ?1 WHERE k = 'rows'";

/// Schema 4's table, one column per field (versions 1 to 3 are it with fewer columns; tests
/// build old files from it).
#[cfg(test)]
pub(crate) const SCHEMA_V4: &str = "
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

/// The row counter and the triggers that kept it in versions 3 and 4 (tests build old files
/// from it).
#[cfg(test)]
pub(crate) const META_V4: &str = "
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('rows', (SELECT COUNT(*) FROM servers));
CREATE TRIGGER IF NOT EXISTS servers_count_insert AFTER INSERT ON servers
    BEGIN UPDATE meta SET v = v + 1 WHERE k = 'rows'; END;
CREATE TRIGGER IF NOT EXISTS servers_count_delete AFTER DELETE ON servers
    BEGIN UPDATE meta SET v = v - 1 WHERE k = 'rows'; END;
";

/// Version 1 had no `face_data` column.
const MIGRATE_1_TO_2: &str = "ALTER TABLE servers ADD COLUMN face_data TEXT;";
/// Version 3 adds the proof time and the typed DDNet column.
const MIGRATE_2_TO_3: &str = "ALTER TABLE servers ADD COLUMN last_proof INTEGER;
ALTER TABLE servers ADD COLUMN ddnet TEXT;";
/// Version 4 adds where a record came from (NULL: a direct registration).
const MIGRATE_3_TO_4: &str = "ALTER TABLE servers ADD COLUMN sources TEXT;";
/// Version 5 keeps records as blobs in `records`: the rows are copied by
/// [`migrate_to_blobs`], the count triggers go.
const MIGRATE_4_TO_5: &str = "DROP TRIGGER IF EXISTS servers_count_insert;
DROP TRIGGER IF EXISTS servers_count_delete;";
const DELETE_V4: &str = "DELETE FROM servers WHERE game = ?1 AND addr_kind = ?2
    AND addr_host = ?3 AND addr_port = ?4 AND instance = ?5";
const COLUMNS: &str = "game, addr_kind, addr_host, addr_port, instance, face, game_port,
    query_addr, query_protocol, state, first_seen, last_heartbeat, first_verified,
    last_poll_ok, poll_failures, source, info, face_data, last_proof, ddnet, sources";
const ORDER: &str = "game, addr_kind, addr_host, addr_port, instance";

fn from_ts(v: i64) -> Timestamp {
    Timestamp(u64::try_from(v).unwrap_or(0))
}

/// The `ddnet` column of `r`: its DDNet data as JSON, or NULL.
fn ddnet_of(r: &Record) -> rusqlite::Result<Option<String>> {
    r.ddnet()
        .map(AsRef::as_ref)
        .map(|d| muster_core::store::rows::ddnet_column(d, &r.key.addr))
        .transpose()
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// `rec` with the DDNet data of its `ddnet` column (schema 3 on) or, from a schema 2 file,
/// its `face_data` column.
fn with_ddnet(
    mut rec: Record,
    ddnet: Option<String>,
    face_data: Option<String>,
) -> Result<Record, String> {
    let ddnet = match (ddnet, face_data) {
        (Some(d), _) => Some(
            serde_json::from_str::<DdnetRow>(&d).map_err(|e| format!("bad ddnet column: {e}"))?,
        ),
        (None, Some(fd)) => serde_json::from_str::<FaceDataV2>(&fd)
            .ok()
            .map(|v2| v2.into_row(rec.last_heartbeat)),
        (None, None) => None,
    };
    if let Some(d) = ddnet {
        rec.set_ddnet(Some(Arc::new(d.into_data(&rec.key.addr)?)));
    }
    Ok(rec)
}

/// One row of `records` as read back.
struct BlobRow {
    key: Vec<u8>,
    rec: Vec<u8>,
    ddnet: Option<String>,
}

impl BlobRow {
    const COLUMNS: &str = "key, rec, ddnet";

    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        // A value of another type (text written by hand) is read as its bytes; one with none
        // (a number) as no bytes, which the decoder refuses with its reason.
        let bytes = |i: usize| -> rusqlite::Result<Vec<u8>> {
            Ok(match r.get_ref(i)? {
                ValueRef::Blob(b) | ValueRef::Text(b) => b.to_vec(),
                _ => Vec::new(),
            })
        };
        Ok(Self {
            key: bytes(0)?,
            rec: bytes(1)?,
            ddnet: r.get(2)?,
        })
    }

    /// The record, or why this build cannot use the row.
    fn into_record(self) -> Result<Record, String> {
        let key = blob::read_key(&self.key).map_err(|e| format!("bad key: {e}"))?;
        let rec = blob::read_record(key, &self.rec).map_err(|e| format!("bad record: {e}"))?;
        with_ddnet(rec, self.ddnet, None)
    }
}

/// Whether the database has a table `name`.
fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .optional()
    .map(|r| r.is_some())
}

/// Copies every row of schema 4's `servers` table that this build can read into `records`
/// and deletes it there; the table goes once it is empty (a row left is reported at every
/// load, as before the migration). The row counter then counts both tables.
fn migrate_to_blobs(conn: &Connection) -> rusqlite::Result<()> {
    let rows = {
        let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM servers"))?;
        let rows = stmt.query_map([], Row::read)?;
        rows.collect::<rusqlite::Result<Vec<Row>>>()?
    };
    let (mut key, mut rec) = (Vec::new(), Vec::new());
    let mut insert = conn.prepare(INSERT)?;
    let mut delete = conn.prepare(DELETE_V4)?;
    let mut left = 0usize;
    for row in rows {
        let id = (
            row.game.clone(),
            row.kind.clone(),
            row.host.clone(),
            row.port,
            row.instance,
        );
        let Ok(r) = row.into_record() else {
            left += 1;
            continue;
        };
        key.clear();
        blob::put_key(&mut key, &r.key);
        rec.clear();
        blob::put_record(&mut rec, &r);
        insert.execute(params![&key[..], &rec[..], ddnet_of(&r)?])?;
        delete.execute(params![id.0, id.1, id.2, id.3, id.4])?;
    }
    drop((insert, delete));
    if left == 0 {
        conn.execute_batch("DROP TABLE servers;")?;
    }
    conn.execute(
        "UPDATE meta SET v = (SELECT COUNT(*) FROM records) + ?1 WHERE k = 'rows'",
        [i64::try_from(left).unwrap_or(i64::MAX)],
    )?;
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
        if let Some(s) = self.sources {
            let rows: Vec<SourceRow> =
                serde_json::from_str(&s).map_err(|e| format!("bad sources column: {e}"))?;
            let sources = sources_from_rows(rows);
            if !sources.is_empty() {
                rec.set_sources(sources);
            }
        }
        with_ddnet(rec, self.ddnet, self.face_data)
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
            tx.execute_batch(MIGRATE_4_TO_5)?;
            tx.execute_batch(SCHEMA)?;
            migrate_to_blobs(&tx)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            tx.commit()
        };
        match version {
            0 => {
                let tx = conn.unchecked_transaction().map_err(db)?;
                tx.execute_batch(SCHEMA).map_err(db)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                    .map_err(db)?;
                tx.commit().map_err(db)?;
            }
            1 => migrate(&[MIGRATE_1_TO_2, MIGRATE_2_TO_3, MIGRATE_3_TO_4]).map_err(db)?,
            2 => migrate(&[MIGRATE_2_TO_3, MIGRATE_3_TO_4]).map_err(db)?,
            3 => migrate(&[MIGRATE_3_TO_4]).map_err(db)?,
            4 => migrate(&[]).map_err(db)?,
            SCHEMA_VERSION => conn.execute_batch(SCHEMA).map_err(db)?,
            v => return Err(StoreError::Schema(path, v)),
        }
        // After the migration: a copy of a large file runs with the default cache.
        conn.pragma_update(None, "cache_size", -STORE_CACHE_KIB)
            .map_err(db)?;
        Ok(Self {
            conn,
            path,
            key: Vec::new(),
            rec: Vec::new(),
        })
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
            .query_row("SELECT COUNT(*) FROM records", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.db(e))?;
        Ok(usize::try_from(n.unwrap_or(0)).unwrap_or(0))
    }

    /// The row count the writes keep.
    pub fn counted_rows(&self) -> Result<usize, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT v FROM meta WHERE k = 'rows'", [], |r| r.get(0))
            .map_err(|e| self.db(e))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

/// Adds the record read from a row, or the reason it cannot be, to `out`.
fn push_read(out: &mut Loaded, read: Result<Record, String>) {
    match read {
        Ok(rec) => out.records.push(rec),
        Err(why) => {
            out.skipped += 1;
            if out.skipped_reasons.len() < MAX_REASONS {
                out.skipped_reasons.push(why);
            }
        }
    }
}

impl Store for SqliteStore {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        let db = |e: rusqlite::Error| StoreError::Db(self.path.clone(), e.into());
        let mut out = Loaded::default();
        let sql = format!("SELECT {} FROM records", BlobRow::COLUMNS);
        let mut stmt = self.conn.prepare(&sql).map_err(db)?;
        for row in stmt.query_map([], BlobRow::read).map_err(db)? {
            // A read error is damage the quick check missed: never skip it silently.
            push_read(&mut out, row.map_err(db)?.into_record());
        }
        // Rows of an older schema the migration could not read stay where they were.
        if has_table(&self.conn, "servers").map_err(db)? {
            let sql = format!("SELECT {COLUMNS} FROM servers");
            let mut stmt = self.conn.prepare(&sql).map_err(db)?;
            for row in stmt.query_map([], Row::read).map_err(db)? {
                push_read(&mut out, row.map_err(db)?.into_record());
            }
        }
        Ok(out)
    }

    fn write(&mut self, puts: &[Arc<Record>], deletes: &[ServerKey]) -> Result<(), StoreError> {
        let Self {
            conn,
            path,
            key,
            rec,
        } = self;
        let db = |e: rusqlite::Error| StoreError::Db(path.clone(), e.into());
        let tx = conn.transaction().map_err(db)?;
        // Rows added minus rows deleted: the counter moves once per batch.
        let mut added: i64 = 0;
        {
            let mut update = tx.prepare_cached(UPDATE).map_err(db)?;
            let mut insert = tx.prepare_cached(INSERT).map_err(db)?;
            // The rows in key order, so that neighbours land in the pages the last rows
            // touched: a batch comes out of the persister's hash set in no order, and a
            // scattered batch took 2.4 times as long a row (the `write` bench).
            key.clear();
            let mut order: Vec<(usize, usize, &Arc<Record>)> = Vec::with_capacity(puts.len());
            for r in puts {
                let start = key.len();
                blob::put_key(key, &r.key);
                order.push((start, key.len(), r));
            }
            let keys = &key[..];
            let key_of = |&(start, end, _): &(usize, usize, &Arc<Record>)| {
                keys.get(start..end).unwrap_or_default()
            };
            order.sort_unstable_by(|a, b| key_of(a).cmp(key_of(b)));
            for row in &order {
                let r = row.2;
                rec.clear();
                blob::put_record(rec, r);
                let ddnet = ddnet_of(r).map_err(db)?;
                let p = params![key_of(row), &rec[..], ddnet];
                // A burst of registrations (the costly case) inserts; a refresh updates.
                if insert.execute(p).map_err(db)? == 1 {
                    added += 1;
                } else {
                    update.execute(p).map_err(db)?;
                }
            }
            let mut delete = tx.prepare_cached(DELETE).map_err(db)?;
            for k in deletes {
                key.clear();
                blob::put_key(key, k);
                let n = delete.execute([&key[..]]).map_err(db)?;
                added -= i64::try_from(n).unwrap_or(0);
            }
            if added != 0 {
                tx.execute(ADD_ROWS, [added]).map_err(db)?;
            }
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

/// Rows of schema 4's `servers` table readable from `conn` in primary-key order (`desc`: from
/// the end), until the first read error.
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

/// Rows of `records` readable from `conn` in key order (`desc`: from the end), until the
/// first read error.
fn scan_blobs(conn: &Connection, desc: bool, out: &mut Vec<BlobRow>) -> bool {
    let dir = if desc { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT {} FROM records ORDER BY key {dir}",
        BlobRow::COLUMNS
    );
    let Ok(mut stmt) = conn.prepare(&sql) else {
        return false;
    };
    let Ok(rows) = stmt.query_map([], BlobRow::read) else {
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
/// one in its place. Reads the tables (`records`, and `servers` of a file of schema 4 or
/// older, or its rows a migration could not read) from both ends, so rows on both sides of a
/// damaged page are kept. The daemon must not be running.
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
    let mut blobs = Vec::new();
    if !scan_blobs(&damaged, false, &mut blobs) {
        scan_blobs(&damaged, true, &mut blobs);
    }
    let mut rows = Vec::new();
    if !scan(&damaged, false, &mut rows) {
        scan(&damaged, true, &mut rows);
    }
    drop(damaged);
    let mut records = Vec::new();
    let mut unreadable = 0;
    let mut read = 0;
    let mut keep = |r: Result<Record, String>| {
        read += 1;
        match r {
            Ok(rec) => records.push(Arc::new(rec)),
            Err(_) => unreadable += 1,
        }
    };
    let mut seen = std::collections::HashSet::new();
    for r in blobs {
        if seen.insert(r.key.clone()) {
            keep(r.into_record());
        }
    }
    let mut seen = std::collections::HashSet::new();
    for r in rows {
        let id = (
            r.game.clone(),
            r.kind.clone(),
            r.host.clone(),
            r.port,
            r.instance,
        );
        if seen.insert(id) {
            keep(r.into_record());
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
