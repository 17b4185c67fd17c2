//! Player-count history in PostgreSQL: `muster serve --store postgres://…` polls a server, its
//! history is served at `/api/v1/servers/{address}/history`, and it is still there after the
//! daemon restarts with an empty data directory (it is in the database, not beside it).
//!
//! Needs `MUSTER_TEST_PG_URL` (set by `scripts/test.sh`, which starts a throwaway cluster);
//! without it the test says it skipped, or fails under `MUSTER_REQUIRE_PEERS=1`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{Proc, only_faces, start};
use crate::postgres::{free_udp_port, http_get, test_database};

fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    serde_json::from_str(&http_get(addr, path)).unwrap_or(serde_json::Value::Null)
}

/// Waits (at most 30 s) until `f` gives `Some`.
fn wait<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn serve(url: &str, data: &str) -> (Proc, HashMap<String, SocketAddr>) {
    let mut args = vec!["serve", "--store", url, "--data-dir", data];
    args.extend(only_faces(&["gamespy-udp", "http"]));
    start(&args, 2)
}

/// The answered minute points of `address` (the mean players of each).
fn answered(http: SocketAddr, address: &str) -> Vec<f64> {
    let v = get_json(
        http,
        &format!("/api/v1/servers/{address}/history?range=48h"),
    );
    v["points"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter(|p| p["answered"].as_u64().unwrap_or(0) > 0)
                .filter_map(|p| p["avg"].as_f64())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn serve_on_postgres_keeps_history_in_the_database_across_a_restart() {
    let Some(url) = test_database("muster_cli_history") else {
        return;
    };
    let tmp = std::env::temp_dir();
    let (d1, d2) = (
        tmp.join(format!("muster-pg-history-1-{}", std::process::id())),
        tmp.join(format!("muster-pg-history-2-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&d1);
    let _ = std::fs::remove_dir_all(&d2);

    let (daemon, faces) = serve(&url, &d1.display().to_string());
    let port = free_udp_port();
    let master = format!("gamespy:{}", faces["gamespy-udp"]);
    let emulator = start(
        &[
            "emulate",
            "-p",
            "gamespy1",
            "--port",
            &port,
            "--style",
            "ut99",
            "--name",
            "Remembered",
            "--players",
            "5",
            "--master",
            &master,
        ],
        1,
    );
    let http = faces["http"];
    // Registered, polled (its name is known only from a poll), its address as listed.
    let address = wait("the server to be listed and polled", || {
        let v = get_json(http, "/api/v1/servers?per_page=10");
        v["servers"].as_array()?.iter().find_map(|s| {
            (s["name"] == "Remembered").then(|| s["address"].as_str().map(str::to_owned))?
        })
    });
    let before = wait("a history point", || {
        let a = answered(http, &address);
        (!a.is_empty()).then_some(a)
    });
    assert!(before.iter().all(|&p| p == 5.0), "{before:?}");

    // The emulator and the daemon stop; a new daemon on the same database, with a data
    // directory of its own (empty), serves the history written before.
    drop(emulator);
    drop(daemon);
    let (_daemon, faces) = serve(&url, &d2.display().to_string());
    let http = faces["http"];
    let after = answered(http, &address);
    assert!(!after.is_empty(), "history after the restart");
    assert!(after.iter().all(|&p| p == 5.0), "{after:?}");
    let v = get_json(
        http,
        &format!("/api/v1/servers/{address}/history?range=30d"),
    );
    let hours = v["points"].as_array().map_or(0, Vec::len);
    assert!(hours >= 1, "the hourly rollup too: {v}");
    let _ = std::fs::remove_dir_all(&d1);
    let _ = std::fs::remove_dir_all(&d2);
}
