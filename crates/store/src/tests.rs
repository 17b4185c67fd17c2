//! Store tests: write, drop, reopen; crash without close; migration; damage and repair.

use super::*;
use muster_core::registry::{DdnetData, DdnetStream, PollFields, PollInfo, PollPlayer, Rules};
use std::net::Ipv4Addr;

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) use muster_core::testdir::TempDir;

fn sample(i: u16, face: Face) -> Record {
    let addr = SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, (i % 250) as u8)),
        7000 + i,
    );
    let key = ServerKey::new("ut2", GameAddr::Ip(addr));
    let mut r = Record::new(
        0,
        Registration {
            key,
            face,
            game_port: Some(addr.port()),
            query_addr: Some(addr),
            query_protocol: Some(muster_proto::Protocol::GameSpy1),
            source: SourceKey::of(addr.ip()),
        },
        Timestamp(2_000 + u64::from(i)),
    );
    r.last_heartbeat = Timestamp(3_000);
    r.last_proof = Timestamp(2_500);
    r
}

fn sorted(mut v: Vec<Record>) -> Vec<Record> {
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v
}

fn put(s: &mut SqliteStore, recs: &[&Record]) {
    let recs: Vec<Arc<Record>> = recs.iter().map(|r| Arc::new((*r).clone())).collect();
    s.write(&recs, &[]).unwrap();
}

fn load(s: &mut SqliteStore) -> Vec<Record> {
    let l = s.load().unwrap();
    assert_eq!(l.skipped, 0, "{:?}", l.skipped_reasons);
    l.records
}

#[test]
fn write_drop_reopen_same_contents() {
    let dir = TempDir::new("store-reopen");
    let mut a = sample(1, Face::GameSpy);
    a.info = Some(Arc::new(PollInfo::from(PollFields {
        name: "Ünïcode \"quoted\"".into(),
        map: "DM-Rankin".into(),
        game_type: "xDeathMatch".into(),
        num_players: 2,
        max_players: 16,
        password: Some(false),
        players: vec![
            PollPlayer::new("p1").with_score(Some(-3)),
            PollPlayer::new("p2"),
        ]
        .into(),
        rules: Rules::new([("hostport", "7777")]),
        game_port: Some(7777),
    })));
    a.set_poll_failures(2);
    a.set_last_poll_ok(Some(Timestamp(2_500)));
    let mut b = sample(2, Face::Mgmt);
    b.key = ServerKey::new(
        "bomberman",
        GameAddr::Host {
            host: "1.2.3.4".into(),
            port: 2000,
        },
    )
    .with_instance(7);
    b.set_query_addr(None);
    b.query_protocol = None;
    let mut c = sample(3, Face::DdnetHttp);
    c.state = Verification::Delisted;
    c.set_ddnet(Some(Arc::new(DdnetData {
        secret: muster_core::registry::DdnetSecret::from("s3cret"),
        serial: 4,
        info: bytes::Bytes::from_static(br#"{"name":"x","b":1,"a":[]}"#).into(),
        streams: Box::new([DdnetStream::new(
            "tw-0.6+udp://192.0.2.3:7003",
            &c.key.addr,
            Timestamp(2_900),
        )]),
    })));
    {
        let mut s = SqliteStore::open(&dir.0).unwrap();
        put(&mut s, &[&a]);
        put(&mut s, &[&b, &c]);
        assert_eq!(s.count().unwrap(), 3);
        assert_eq!(s.counted_rows().unwrap(), 3);
        put(&mut s, &[&a]);
        assert_eq!(
            s.counted_rows().unwrap(),
            3,
            "a replaced row is counted once"
        );
    }
    let mut s = SqliteStore::open(&dir.0).unwrap();
    let got = sorted(load(&mut s));
    assert_eq!(got, sorted(vec![a.clone(), b.clone(), c.clone()]));
    // The host-name address stays a host name even though it looks like an IP.
    assert!(
        got.iter()
            .any(|r| matches!(&r.key.addr, GameAddr::Host { host, .. } if &**host == "1.2.3.4"))
    );
    s.write(&[], &[b.key.clone(), c.key.clone(), c.key.clone()])
        .unwrap();
    assert_eq!(s.counted_rows().unwrap(), 1);
    drop(s);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    assert_eq!(load(&mut s), vec![a]);
}

#[test]
fn the_page_cache_is_the_named_size() {
    let dir = TempDir::new("store-cache");
    let s = SqliteStore::open(&dir.0).unwrap();
    let kib: i64 = s
        .conn
        .pragma_query_value(None, "cache_size", |r| r.get(0))
        .unwrap();
    assert_eq!(kib, -STORE_CACHE_KIB);
}

#[test]
fn crash_keeps_what_was_written() {
    let dir = TempDir::new("store-crash");
    let a = sample(1, Face::GameSpy);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    put(&mut s, &[&a]);
    // Simulated crash: the first connection is never closed (no checkpoint, no close); a
    // second one, as a restarted process would, reads the WAL.
    std::mem::forget(s);
    let mut second = SqliteStore::open(&dir.0).unwrap();
    assert_eq!(load(&mut second), vec![a]);
}

#[test]
fn rows_this_build_cannot_read_are_reported_not_hidden() {
    let dir = TempDir::new("store-bad-row");
    let mut s = SqliteStore::open(&dir.0).unwrap();
    put(
        &mut s,
        &[&sample(1, Face::GameSpy), &sample(2, Face::GameSpy)],
    );
    // Sample 2's record blob with its face ("gamespy", after the format byte and the
    // length) replaced by one this build does not know.
    let mut key = Vec::new();
    blob::put_key(&mut key, &sample(2, Face::GameSpy).key);
    let n = s
        .conn
        .execute(
            "UPDATE records SET rec = CAST(x'0107' || 'martian' || substr(rec, 10) AS BLOB)
             WHERE key = ?1",
            [&key],
        )
        .unwrap();
    assert_eq!(n, 1);
    let l = s.load().unwrap();
    assert_eq!(l.records.len(), 1);
    assert_eq!(l.skipped, 1);
    assert_eq!(l.skipped_reasons, ["bad record: unknown face \"martian\""]);
    // A value of the wrong type is a row reported, not a failed load.
    s.conn
        .execute("UPDATE records SET rec = 5 WHERE key = ?1", [&key])
        .unwrap();
    let l = s.load().unwrap();
    assert_eq!(l.skipped_reasons, ["bad record: truncated at format"]);
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
        Err(StoreError::Schema(_, 99))
    ));
}

#[test]
fn version_2_files_are_migrated_with_their_ddnet_data() {
    let dir = TempDir::new("store-migrate");
    {
        // A version-2 file: no last_proof / ddnet columns, DDNet data as a face_data blob and
        // a pending row (unproven, never listed).
        std::fs::create_dir_all(&dir.0).unwrap();
        let conn = Connection::open(dir.0.join(DB_FILE)).unwrap();
        let v2 = SCHEMA_V4
            .replace("    last_proof INTEGER,\n", "")
            .replace("    ddnet TEXT,\n", "")
            .replace("    sources TEXT,\n", "");
        conn.execute_batch(&v2).unwrap();
        conn.pragma_update(None, "user_version", 2).unwrap();
        conn.execute(
            "INSERT INTO servers VALUES ('ddnet', 'ip', '192.0.2.1', 8303, 0, 'ddnet', 8303,
             '192.0.2.1:8303', 'teeworlds', 'verified', 1, 5000, 2, NULL, 0, '192.0.2.1', NULL,
             '{\"secret\":\"s\",\"serial\":3,\"urls\":[\"tw-0.6+udp://192.0.2.1:8303\"],\"info\":{\"name\":\"x\"}}')",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO servers VALUES ('ut', 'ip', '192.0.2.2', 7778, 0, 'gamespy', NULL,
             '192.0.2.2:7778', 'gamespy1', 'pending', 1, 2, NULL, NULL, 0, '192.0.2.2', NULL, NULL)",
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
    let l = s.load().unwrap();
    assert_eq!(l.skipped, 1, "the pending row");
    assert_eq!(l.records.len(), 1);
    let d = l.records[0].ddnet().unwrap();
    assert_eq!(d.secret.to_string(), "s");
    assert_eq!(d.serial, 3);
    assert_eq!(&d.info.bytes().unwrap()[..], br#"{"name":"x"}"#);
    assert_eq!(d.streams[0].last, Timestamp(5000));
    assert_eq!(
        l.records[0].first_seen,
        Timestamp(2),
        "first verification kept as order"
    );
    assert_eq!(s.counted_rows().unwrap(), 2);
}

/// Overwrites the middle pages of the database file with garbage.
fn damage(path: &Path) {
    use std::io::{Seek as _, SeekFrom, Write as _};
    let len = std::fs::metadata(path).unwrap().len();
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let page = 4096;
    let pages = len / page;
    assert!(
        pages >= 6,
        "enough pages to damage one in the middle ({pages})"
    );
    f.seek(SeekFrom::Start((pages / 2) * page)).unwrap();
    f.write_all(&vec![0xA5; page as usize]).unwrap();
}

#[test]
fn a_damaged_file_is_refused_and_repaired() {
    let dir = TempDir::new("store-damage");
    let recs: Vec<Record> = (0..2000).map(|i| sample(i, Face::GameSpy)).collect();
    {
        let mut s = SqliteStore::open(&dir.0).unwrap();
        let all: Vec<&Record> = recs.iter().collect();
        put(&mut s, &all);
    }
    let path = dir.0.join(DB_FILE);
    damage(&path);
    let err = SqliteStore::open(&dir.0).unwrap_err();
    assert!(err.is_fatal_at_start());
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("--repair"), "{msg}");
    let report = repair(&dir.0).unwrap();
    assert!(
        report.recovered > 0 && report.recovered < 2000,
        "{report:?}"
    );
    assert_eq!(
        report.lost,
        Some(2000 - report.recovered - report.unreadable)
    );
    assert!(report.moved_to.exists());
    let mut s = SqliteStore::open(&dir.0).expect("the repaired file opens");
    assert_eq!(load(&mut s).len(), report.recovered);
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

/// Writes `r` into a schema 4 `servers` table as the schema 4 writer did (one text column per
/// field, the info and the sources as JSON, addresses as text).
fn put_v4(conn: &Connection, r: &Record) {
    use muster_core::store::rows::{InfoRow, sources_column};
    let (kind, host, port) = match &r.key.addr {
        GameAddr::Ip(a) => ("ip", a.ip().to_string(), a.port()),
        GameAddr::Host { host, port } => ("host", host.to_string(), *port),
    };
    let ts = |t: Timestamp| i64::try_from(t.0).unwrap();
    conn.execute(
        "INSERT INTO servers (game, addr_kind, addr_host, addr_port, instance, face, game_port,
         query_addr, query_protocol, state, first_seen, last_heartbeat, first_verified,
         last_poll_ok, poll_failures, source, info, face_data, last_proof, ddnet, sources)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
         NULL, ?18, ?19, ?20)",
        params![
            r.key.game.as_str(),
            kind,
            host,
            port,
            i64::try_from(r.key.instance).unwrap(),
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
            r.source().to_ip().to_string(),
            r.info
                .as_deref()
                .map(|i| serde_json::to_string(&InfoRow::from(i)).unwrap()),
            ts(r.last_proof),
            r.ddnet()
                .map(AsRef::as_ref)
                .map(|d| muster_core::store::rows::ddnet_column(d, &r.key.addr).unwrap()),
            sources_column(r),
        ],
    )
    .unwrap();
}

/// Records with every kind of field a schema 4 file holds.
fn varied() -> Vec<Record> {
    let mut a = sample(1, Face::GameSpy);
    a.info = Some(Arc::new(PollInfo::from(PollFields {
        name: "Ünïcode \"quoted\"".into(),
        map: "DM-Rankin".into(),
        game_type: "xDeathMatch".into(),
        num_players: 3,
        max_players: 16,
        password: Some(true),
        players: vec![
            PollPlayer::new("p1").with_score(Some(-3)),
            PollPlayer::new("p2"),
            PollPlayer::new("bot")
                .with_score(Some(i32::MAX))
                .with_ping_ms(Some(48))
                .with_team(Some(-1))
                .with_spectator(Some(false))
                .with_bot(Some(true)),
        ]
        .into(),
        rules: Rules::new([("hostport", "7777"), ("", "empty key"), ("mutators", "")]),
        game_port: Some(7777),
    })));
    a.set_poll_failures(2);
    a.set_last_poll_ok(Some(Timestamp(2_500)));
    let mut b = sample(2, Face::Mgmt);
    b.key = ServerKey::new(
        "bomberman",
        GameAddr::Host {
            host: "1.2.3.4".into(),
            port: 2000,
        },
    )
    .with_instance(7);
    b.set_query_addr(None);
    b.query_protocol = None;
    b.game_port = None;
    let mut c = sample(3, Face::DdnetHttp);
    c.state = Verification::Delisted;
    c.set_ddnet(Some(Arc::new(DdnetData {
        secret: muster_core::registry::DdnetSecret::from("s3cret"),
        serial: -4,
        info: bytes::Bytes::from_static(br#"{"name":"x","b":1,"a":[]}"#).into(),
        streams: Box::new([DdnetStream::new(
            "tw-0.6+udp://192.0.2.3:7003",
            &c.key.addr,
            Timestamp(2_900),
        )]),
    })));
    let mut d = sample(4, Face::Quake3);
    let v6: SocketAddr = "[2001:db8::4]:27960".parse().unwrap();
    d.key = ServerKey::new("q3", GameAddr::Ip(v6));
    d.set_query_addr(Some(v6));
    d.query_protocol = Some(muster_proto::Protocol::Quake3);
    d.set_source(SourceKey::of(v6.ip()));
    d.set_sources(vec![
        muster_core::registry::Source {
            origin: muster_core::registry::Origin::Direct,
            last_seen: Timestamp(2_800),
        },
        muster_core::registry::Source {
            origin: muster_core::registry::Origin::Upstream(Arc::from("peer")),
            last_seen: Timestamp(2_700),
        },
    ]);
    d.info = Some(Arc::new(PollInfo::default()));
    let mut e = sample(5, Face::GameAgent);
    e.last_heartbeat = Timestamp(u64::from(u32::MAX) * 1_000);
    e.set_sources(vec![muster_core::registry::Source {
        origin: muster_core::registry::Origin::Upstream(Arc::from("only-upstream")),
        last_seen: Timestamp(9),
    }]);
    vec![a, b, c, d, e]
}

#[test]
fn schema_4_files_are_migrated_with_every_record_equal() {
    let dir = TempDir::new("store-migrate-v4");
    let recs = varied();
    {
        std::fs::create_dir_all(&dir.0).unwrap();
        let conn = Connection::open(dir.0.join(DB_FILE)).unwrap();
        conn.execute_batch(SCHEMA_V4).unwrap();
        conn.execute_batch(META_V4).unwrap();
        conn.pragma_update(None, "user_version", 4).unwrap();
        for r in &recs {
            put_v4(&conn, r);
        }
        // A row no build can read: kept and reported, as schema 4 did.
        let mut alien = sample(9, Face::GameSpy);
        alien.key = ServerKey::new("alien", alien.key.addr.clone());
        put_v4(&conn, &alien);
        conn.execute(
            "UPDATE servers SET face = 'martian' WHERE game = 'alien'",
            [],
        )
        .unwrap();
        let counted: i64 = conn
            .query_row("SELECT v FROM meta WHERE k = 'rows'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(counted, 6, "the schema 4 triggers counted the rows");
    }
    let mut s = SqliteStore::open(&dir.0).unwrap();
    let v: i64 = s
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let l = s.load().unwrap();
    assert_eq!(l.skipped_reasons, ["unknown face \"martian\""]);
    assert_eq!(sorted(l.records), sorted(recs.clone()));
    assert_eq!(s.count().unwrap(), 5, "the readable rows were copied");
    assert_eq!(
        s.counted_rows().unwrap(),
        6,
        "the unreadable row still counts"
    );
    // The copies are gone from the old table, the one it could not read stays.
    let left: i64 = s
        .conn
        .query_row("SELECT COUNT(*) FROM servers", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 1);
    // The counter follows later writes without the old triggers.
    s.write(&[], &[recs[0].key.clone()]).unwrap();
    assert_eq!(s.counted_rows().unwrap(), 5);
    drop(s);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    assert_eq!(s.load().unwrap().records.len(), 4);
}

#[test]
fn a_fully_read_schema_4_file_loses_its_old_table_and_reads_back_after_writes() {
    let dir = TempDir::new("store-migrate-v4-all");
    let recs = varied();
    {
        std::fs::create_dir_all(&dir.0).unwrap();
        let conn = Connection::open(dir.0.join(DB_FILE)).unwrap();
        conn.execute_batch(SCHEMA_V4).unwrap();
        conn.execute_batch(META_V4).unwrap();
        conn.pragma_update(None, "user_version", 4).unwrap();
        for r in &recs {
            put_v4(&conn, r);
        }
    }
    let mut s = SqliteStore::open(&dir.0).unwrap();
    assert!(!has_table(&s.conn, "servers").unwrap());
    assert_eq!(s.counted_rows().unwrap(), 5);
    // Every record written again (as the persister does after a change) and read back.
    let all: Vec<Arc<Record>> = recs.iter().cloned().map(Arc::new).collect();
    s.write(&all, &[]).unwrap();
    assert_eq!(s.counted_rows().unwrap(), 5, "replaced, not added");
    drop(s);
    let mut s = SqliteStore::open(&dir.0).unwrap();
    assert_eq!(sorted(load(&mut s)), sorted(recs));
}
