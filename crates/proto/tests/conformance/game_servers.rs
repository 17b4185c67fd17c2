//! teeworlds-server 0.7.5 and DDNet-Server 16.4 on loopback: the harness can start them (registration off,
//! 127.0.0.1 only, scratch `HOME`), reach them with raw sockets, and stop them by PID.

use std::time::Duration;

use crate::harness::net::client_socket;
use crate::harness::servers::INF3_06_PREFIX;
use crate::harness::{DdnetServer, Qstat, TeeworldsServer, free_udp_port, require};

/// How long a query to a running server may take.
const WAIT: Duration = Duration::from_secs(2);

fn process_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn ddnet_answers_06_gie3_with_inf3_and_stops_by_pid() {
    let Some(ddnet) = DdnetServer::require() else {
        return;
    };
    let mut server = ddnet.start(free_udp_port(), &[]);
    let socket = client_socket();
    let reply = server
        .query_06(&socket, WAIT)
        .unwrap_or_else(|| panic!("no inf3\n{}", server.log()));
    assert!(reply.starts_with(INF3_06_PREFIX), "{}", hex::encode(&reply));
    // token byte 5a echoed as "90", then DDNet's 0.6 version string (teeworlds.md §5)
    assert_eq!(
        reply.get(14..28),
        Some(&b"90\x000.6.4, 16.4"[..]),
        "{}",
        hex::encode(&reply)
    );
    let pid = server.pid();
    let status = server.stop();
    assert!(status.is_some(), "DDNet did not exit");
    assert!(process_gone(pid), "process {pid} still exists");
    assert!(
        server.log().contains("server: interrupted"),
        "no graceful shutdown logged:\n{}",
        server.log()
    );
}

#[test]
fn ddnet_answers_07_token_handshake_and_info() {
    let Some(ddnet) = DdnetServer::require() else {
        return;
    };
    let server = ddnet.start(free_udp_port(), &[]);
    let reply = server
        .query_07(&client_socket(), WAIT)
        .unwrap_or_else(|| panic!("no 0.7 inf3\n{}", server.log()));
    assert!(
        String::from_utf8_lossy(&reply).contains("DDNet Lab"),
        "{}",
        hex::encode(&reply)
    );
}

/// teeworlds 0.7.5 ignores the 0.6 `gie3` (peers.md §4.4) and answers the 0.7 handshake.
#[test]
fn teeworlds_07_ignores_06_gie3_and_answers_07_info() {
    let Some(tw) = TeeworldsServer::require() else {
        return;
    };
    let server = tw.start(free_udp_port(), &[]);
    let socket = client_socket();
    assert_eq!(
        server.query_06(&socket, Duration::from_millis(300)),
        None,
        "0.7.5 answered 0.6 gie3"
    );
    let reply = server
        .query_07(&socket, WAIT)
        .unwrap_or_else(|| panic!("no 0.7 inf3\n{}", server.log()));
    // browse token 200 echoed as varint 88 03, then the version string
    assert_eq!(
        reply.get(17..25),
        Some(&b"\x88\x030.7.5\x00"[..]),
        "{}",
        hex::encode(&reply)
    );
    assert!(
        String::from_utf8_lossy(&reply).contains("TW07 Lab \u{dc}n\u{ef}c\u{f6}d\u{e9} \u{2605}")
    );
}

#[test]
fn server_guard_drop_kills_the_server() {
    let Some(tw) = TeeworldsServer::require() else {
        return;
    };
    let server = tw.start(free_udp_port(), &[]);
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    assert!(!process_gone(pid));
    drop(server);
    assert!(process_gone(pid), "process {pid} survived its guard");
    assert!(
        !dir.exists(),
        "scratch folder {} left behind",
        dir.display()
    );
}

/// Peer against peer: qstat `-tees` reads DDNet's capped 0.6 reply after two unanswered attempts
/// (`gie`, `gie2`), so it reports `retries: 2` (peers.md §3.4).
#[test]
fn qstat_tees_reads_ddnet_06_info() {
    let Some(ddnet) = DdnetServer::require() else {
        return;
    };
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let server = ddnet.start(free_udp_port(), &[]);
    let addr = server.addr().to_string();
    let out = qstat.run(&["-json", "-tees", &addr]);
    let v = out.json();
    let s = v.get(0).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(s["status"], "online", "{out}");
    assert_eq!(s["map"], "Tutorial", "{out}");
    assert_eq!(
        (s["numplayers"].as_u64(), s["maxplayers"].as_u64()),
        (Some(0), Some(16)),
        "{out}"
    );
    assert_eq!(s["retries"], 2, "{out}");
    // -json drops non-ASCII characters (peers.md §3.4)
    assert_eq!(s["name"], "DDNet Lab ncd  | a;b \"q\"  [0/64]", "{out}");
}

/// qstat `-tees` against teeworlds 0.7.5 times out: the server answers only 0.7 requests.
#[test]
fn qstat_tees_times_out_on_teeworlds_07() {
    let Some(tw) = TeeworldsServer::require() else {
        return;
    };
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let server = tw.start(free_udp_port(), &[]);
    let addr = server.addr().to_string();
    let out = qstat.run(&["-json", "-tees", &addr]);
    assert_eq!(out.json()[0]["status"], "timeout", "{out}");
}

/// The lookup helpers agree with the install script's layout (a found peer has an executable file).
#[test]
fn found_game_servers_are_files() {
    for bin in [
        require(TeeworldsServer::find()).map(|t| t.bin),
        require(DdnetServer::find()).map(|d| d.bin),
    ]
    .into_iter()
    .flatten()
    {
        assert!(bin.is_file(), "{}", bin.display());
    }
}
