//! Store tests: write, drop, reopen; crash without flush; a second connection.

use super::*;
use crate::registry::{Registry, RegistryConfig};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("muster-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sample(i: u8, face: Face) -> Record {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)), 7000 + u16::from(i));
    let key = ServerKey::new("ut2", GameAddr::Ip(addr));
    let mut r = Record::new(
        Registration {
            key,
            face,
            game_port: Some(addr.port()),
            query_addr: Some(addr),
            query_protocol: Some(muster_proto::Protocol::GameSpy1),
            source: SourceKey::of(addr.ip()),
        },
        Timestamp(1_000 + u64::from(i)),
    );
    r.state = Verification::Verified;
    r.first_verified = Some(Timestamp(2_000 + u64::from(i)));
    r.last_heartbeat = Timestamp(3_000);
    r
}

fn sorted(mut v: Vec<Record>) -> Vec<Record> {
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v
}

#[test]
fn write_drop_reopen_same_contents() {
    let dir = TempDir::new("store-reopen");
    let mut a = sample(1, Face::GameSpy);
    a.info = Some(PollInfo {
        name: "Ünïcode \"quoted\"".into(),
        map: "DM-Rankin".into(),
        game_type: "xDeathMatch".into(),
        num_players: 2,
        max_players: 16,
        password: Some(false),
        players: vec![
            PollPlayer {
                name: "p1".into(),
                score: Some(-3),
            },
            PollPlayer {
                name: "p2".into(),
                score: None,
            },
        ],
        rules: vec![("hostport".into(), "7777".into())],
        game_port: Some(7777),
    });
    a.poll_failures = 2;
    a.last_poll_ok = Some(Timestamp(2_500));
    let mut b = sample(2, Face::Mgmt);
    b.key = ServerKey::new(
        "bomberman",
        GameAddr::Host {
            host: "1.2.3.4".into(),
            port: 2000,
        },
    )
    .with_instance(7);
    b.query_addr = None;
    b.query_protocol = None;
    let mut c = sample(3, Face::GameAgent);
    c.state = Verification::Pending;
    c.first_verified = None;
    {
        let mut s = SqliteStore::open(&dir.0).unwrap();
        s.put(&a).unwrap();
        s.put_batch(&[&b, &c]).unwrap();
        assert_eq!(s.count().unwrap(), 3);
    }
    let mut s = SqliteStore::open(&dir.0).unwrap();
    let got = sorted(s.load().unwrap());
    assert_eq!(got, sorted(vec![a.clone(), b.clone(), c.clone()]));
    // The host-name address stays a host name even though it looks like an IP.
    assert!(
        got.iter()
            .any(|r| matches!(&r.key.addr, GameAddr::Host { host, .. } if host == "1.2.3.4"))
    );
    s.delete(&b.key).unwrap();
    s.delete_batch(&[c.key.clone(), c.key.clone()]).unwrap();
    drop(s);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    assert_eq!(s.load().unwrap(), vec![a]);
}

#[test]
fn crash_keeps_what_was_written_through() {
    let dir = TempDir::new("store-crash");
    let a = sample(1, Face::GameSpy);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    s.put(&a).unwrap();
    // Simulated crash: the first connection is never closed (no checkpoint, no close); a
    // second one, as a restarted process would, reads the WAL.
    std::mem::forget(s);
    let mut second = SqliteStore::open(&dir.0).unwrap();
    assert_eq!(second.load().unwrap(), vec![a]);
}

#[test]
fn loaded_records_restore_a_registry() {
    let dir = TempDir::new("store-registry");
    let mut s = SqliteStore::open(&dir.0).unwrap();
    for i in 1..=3 {
        s.put(&sample(i, Face::GameSpy)).unwrap();
    }
    let mut reg = Registry::new(RegistryConfig::default());
    let mut recs = s.load().unwrap();
    recs.sort_by_key(|r| r.first_verified);
    for r in recs {
        reg.restore(r);
    }
    let order: Vec<String> = reg
        .listed(crate::registry::View::Http)
        .iter()
        .map(|r| r.key.addr.to_string())
        .collect();
    assert_eq!(
        order,
        ["192.0.2.1:7001", "192.0.2.2:7002", "192.0.2.3:7003"]
    );
}

#[test]
fn unreadable_rows_are_skipped() {
    let dir = TempDir::new("store-bad-row");
    let mut s = SqliteStore::open(&dir.0).unwrap();
    s.put(&sample(1, Face::GameSpy)).unwrap();
    s.put(&sample(2, Face::GameSpy)).unwrap();
    s.conn
        .execute(
            "UPDATE servers SET face = 'martian' WHERE addr_port = 7002",
            [],
        )
        .unwrap();
    assert_eq!(s.load().unwrap().len(), 1);
}

#[test]
fn unknown_schema_version_is_refused() {
    let dir = TempDir::new("store-schema");
    {
        let s = SqliteStore::open(&dir.0).unwrap();
        s.conn.pragma_update(None, "user_version", 99).unwrap();
    }
    assert!(matches!(
        SqliteStore::open(&dir.0),
        Err(StoreError::Schema(99))
    ));
}

#[test]
fn bad_info_json_reads_as_none() {
    assert_eq!(info_from_json("not json"), None);
    assert_eq!(info_from_json("{}"), Some(PollInfo::default()));
}

#[test]
fn face_data_survives_and_version_1_files_are_migrated() {
    let dir = TempDir::new("store-migrate");
    {
        // A version-1 file: the table without `face_data`, one row in it.
        std::fs::create_dir_all(&dir.0).unwrap();
        let conn = Connection::open(dir.0.join(DB_FILE)).unwrap();
        conn.execute_batch(&SCHEMA.replace("    face_data TEXT,\n", ""))
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO servers VALUES ('ut2', 'ip', '192.0.2.1', 7777, 0, 'gamespy', 7777,
             '192.0.2.1:7777', 'gamespy1', 'verified', 1, 2, 2, NULL, 0, '192.0.2.1', NULL)",
            [],
        )
        .unwrap();
    }
    let mut s = SqliteStore::open(&dir.0).unwrap();
    let v: i64 = s
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let old = s.load().unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].face_data, None);
    let mut a = sample(3, Face::DdnetHttp);
    a.face_data = Some(r#"{"serial":3,"info":{"name":"x"}}"#.into());
    s.put(&a).unwrap();
    drop(s);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    let back = s.load().unwrap();
    assert!(back.contains(&a), "{back:?}");
}

#[cfg(unix)]
#[test]
fn the_data_directory_and_database_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new("store-private");
    let data = dir.0.join("data");
    let store = SqliteStore::open(&data).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "a data directory Muster creates");
    assert_eq!(
        mode(store.path()),
        0o600,
        "the database holds DDNet secrets"
    );
}
