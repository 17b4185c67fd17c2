//! `muster emulate` against DDNet's own master server (mastersrv, built by
//! `scripts/install-peers.sh`): an emulated Teeworlds server registers both of its streams
//! (0.6 and 0.7, answering mastersrv's UDP challenges), shows up in mastersrv's `servers.json`
//! with what it reports, and on SIGTERM deletes both addresses, so it leaves the list at once
//! instead of after mastersrv's 30-second expiry.

use std::path::Path;
use std::time::{Duration, Instant};

use muster_testkit::process::{ChildGuard, ScratchDir};
use muster_testkit::{Mastersrv, MastersrvGuard, free_udp_port};
use serde_json::Value;

/// How long registration may take: two POSTs, two challenges, two POSTs, then the next
/// `servers.json` write (once a second); generous for a loaded machine.
const REGISTER_LIMIT: Duration = Duration::from_secs(20);

/// How long the goodbye may take to show in `servers.json`: well below mastersrv's 30 s
/// expiry, so a server that only expired fails.
const DELETE_LIMIT: Duration = Duration::from_secs(10);

/// mastersrv's expiry of a server that stopped refreshing.
const MASTERSRV_EXPIRY: Duration = Duration::from_secs(30);

fn urls(port: u16) -> [String; 2] {
    [
        format!("tw-0.6+udp://127.0.0.1:{port}"),
        format!("tw-0.7+udp://127.0.0.1:{port}"),
    ]
}

/// The listed server whose addresses are exactly both streams of `port`.
fn listed(doc: &Value, port: u16) -> Option<Value> {
    let want = urls(port);
    doc["servers"].as_array()?.iter().find_map(|s| {
        let addrs: Vec<&str> = s["addresses"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        (addrs == want.iter().map(String::as_str).collect::<Vec<_>>()).then(|| s.clone())
    })
}

/// Any listed address of `port`.
fn any_listed(doc: &Value, port: u16) -> bool {
    let want = urls(port);
    doc["servers"].as_array().is_some_and(|servers| {
        servers.iter().any(|s| {
            s["addresses"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| want.iter().any(|w| x == w.as_str())))
        })
    })
}

/// `muster emulate` of one Teeworlds server on `port`, registering with `master`.
fn emulate(scratch: &ScratchDir, port: u16, players: &str, master: &MastersrvGuard) -> ChildGuard {
    let port_arg = port.to_string();
    let master_arg = format!("ddnet:{}", master.register_url());
    let args = [
        "emulate",
        "--protocol",
        "teeworlds",
        "--port",
        &port_arg,
        "--name",
        "Muster ★ emulated",
        "--map",
        "dm1",
        "--players",
        players,
        "--max-players",
        "128",
        "--master",
        &master_arg,
    ];
    ChildGuard::spawn(
        "muster emulate",
        Path::new(env!("CARGO_BIN_EXE_muster")),
        &args,
        scratch.path(),
        &[],
        scratch.path().join("emulate.log"),
    )
    .expect("start muster emulate")
}

#[test]
fn emulated_ddnet_server_registers_with_mastersrv_and_deletes_itself_on_sigterm() {
    let Some(peer) = Mastersrv::require() else {
        return;
    };
    let master = peer.start(&[]);
    let scratch = ScratchDir::new("emulate-mastersrv");
    let port = free_udp_port();
    let mut server = emulate(&scratch, port, "3", &master);

    let (doc, up) = master.wait_for(REGISTER_LIMIT, |d| listed(d, port).is_some());
    assert!(
        up,
        "not listed with both addresses: {:?}\n--- mastersrv\n{}\n--- emulate\n{}",
        master.listed_addresses(),
        master.log(),
        server.log()
    );
    let entry = listed(&doc, port).expect("listed");
    assert_eq!(entry["info"]["name"], "Muster ★ emulated");
    assert_eq!(entry["info"]["map"]["name"], "dm1");
    assert_eq!(entry["info"]["max_clients"], 128);
    assert_eq!(entry["info"]["clients"].as_array().map(Vec::len), Some(3));

    // SIGTERM by PID: the goodbye goes out before the process exits.
    let stopped = Instant::now();
    let status = server.stop().expect("an exit status");
    assert!(
        status.success(),
        "muster emulate did not exit cleanly on SIGTERM ({status})\n{}",
        server.log()
    );
    let (_, gone) = master.wait_for(DELETE_LIMIT, |d| !any_listed(d, port));
    assert!(
        gone && stopped.elapsed() < MASTERSRV_EXPIRY,
        "still listed {:?} after SIGTERM: {:?}\n--- mastersrv\n{}",
        stopped.elapsed(),
        master.listed_addresses(),
        master.log()
    );
    // Deleted, not expired: mastersrv logged both removals.
    let log = master.log();
    for url in urls(port) {
        assert!(
            log.contains(&format!("successfully removed {url}")),
            "no delete of {url}:\n{log}"
        );
    }
}

/// DDNet's extended info has no 64-client limit, and neither has the register body: an
/// emulated server with 100 clients is listed with all of them.
#[test]
fn emulated_ddnet_server_with_100_clients_is_listed_with_all_of_them() {
    let Some(peer) = Mastersrv::require() else {
        return;
    };
    let master = peer.start(&[]);
    let scratch = ScratchDir::new("emulate-mastersrv-100");
    let port = free_udp_port();
    let server = emulate(&scratch, port, "100", &master);
    let clients =
        |d: &Value| listed(d, port).and_then(|s| s["info"]["clients"].as_array().map(Vec::len));
    let (doc, up) = master.wait_for(REGISTER_LIMIT, |d| clients(d) == Some(100));
    assert!(
        up,
        "not listed with 100 clients: {:?} listed, {:?} clients\n--- mastersrv\n{}\n--- emulate\n{}",
        master.listed_addresses(),
        clients(&doc),
        master.log(),
        server.log()
    );
}
