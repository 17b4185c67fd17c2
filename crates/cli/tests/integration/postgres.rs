//! Two `muster serve` processes on one PostgreSQL database (`--store postgres://…`): a
//! server registered with one is listed by the other; `kill -9` of one loses nothing and the
//! other goes on serving; the killed one restarts and lists the same.
//!
//! Needs `MUSTER_TEST_PG_URL` (set by `scripts/test.sh`, which starts a throwaway cluster);
//! without it the test says it skipped, or fails under `MUSTER_REQUIRE_PEERS=1`.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{faces_at, start};

/// The body of `GET path`, or nothing when the daemon is not there (killed on purpose).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// The listed servers' names, sorted.
fn names(http: SocketAddr) -> Vec<String> {
    let body = http_get(http, "/api/v1/servers?per_page=100");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    let mut n: Vec<String> = v["servers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    n.sort();
    n
}

/// Waits (at most 20 s) until `http` lists exactly `want`.
fn wait_names(http: SocketAddr, want: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = names(http);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{http} lists {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn serve_args<'a>(url: &'a str, data: &'a str, http: &'a str, gamespy: &'a str) -> Vec<&'a str> {
    let mut args = vec!["serve", "--store", url, "--data-dir", data];
    args.extend(faces_at(&[("gamespy-udp", gamespy), ("http", http)]));
    args
}

/// A fresh database named `{prefix}_{pid}` on the cluster `MUSTER_TEST_PG_URL` names, as a
/// URL; `None` when the variable is not set (the test then says it skipped, or fails under
/// `MUSTER_REQUIRE_PEERS=1`).
pub(crate) fn test_database(prefix: &str) -> Option<String> {
    let found = match std::env::var("MUSTER_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Ok(u),
        _ => Err(muster_testkit::Missing {
            peer: "postgresql",
            detail: "MUSTER_TEST_PG_URL is not set (scripts/test.sh starts a cluster and sets it)"
                .to_owned(),
        }),
    };
    let admin = muster_testkit::require(found)?;
    let name = format!("{prefix}_{}", std::process::id());
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(muster_master::store::postgres::create_database(
            &admin, &name,
        ))
        .unwrap();
    Some(url)
}

pub(crate) fn free_udp_port() -> String {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port().to_string()
}

#[test]
fn two_serve_processes_share_one_registry_through_kill_9() {
    let Some(url) = test_database("muster_cli") else {
        return;
    };
    let tmp = std::env::temp_dir();
    let (da, db) = (
        tmp.join(format!("muster-pg-a-{}", std::process::id())),
        tmp.join(format!("muster-pg-b-{}", std::process::id())),
    );
    let (da_s, db_s) = (da.display().to_string(), db.display().to_string());

    // A takes GameSpy heartbeats; B has only its HTTP face.
    let a_args = serve_args(&url, &da_s, "127.0.0.1:0", "127.0.0.1:0");
    let (a, a_faces) = start(&a_args, 2);
    let b_args = serve_args(&url, &db_s, "127.0.0.1:0", "off");
    let (_b, b_faces) = start(&b_args, 1);
    let master = format!("gamespy:{}", a_faces["gamespy-udp"]);
    let mut emulators = Vec::new();
    let mut want = Vec::new();
    for i in 0..3 {
        let name = format!("Shared {i}");
        let port = free_udp_port();
        emulators.push(start(
            &[
                "emulate", "-p", "gamespy1", "--port", &port, "--style", "ut99", "--name", &name,
                "--master", &master,
            ],
            1,
        ));
        want.push(name);
    }
    want.sort();
    // Registered with A, polled (names) by one of them, listed by both.
    wait_names(a_faces["http"], &want);
    wait_names(b_faces["http"], &want);

    // kill -9 A: B goes on serving every server.
    let mut a = a;
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    drop(a);
    assert_eq!(names(b_faces["http"]), want, "B after A's kill -9");
    let health = http_get(b_faces["http"], "/healthz");
    assert!(health.contains("\"status\":\"ok\""), "{health}");

    // A restarts on the same database and lists the same servers.
    let a2_args = serve_args(&url, &da_s, "127.0.0.1:0", "127.0.0.1:0");
    let (_a2, a2_faces) = start(&a2_args, 2);
    wait_names(a2_faces["http"], &want);
    drop(emulators);
    let _ = std::fs::remove_dir_all(&da);
    let _ = std::fs::remove_dir_all(&db);
}
