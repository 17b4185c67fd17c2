//! The Valve family against FWGS's xash3d-master (built by `scripts/install-peers.sh`), on
//! loopback: servers registered with it (the challenge and heartbeat written by
//! `muster_proto::valve_master`) are listed by `muster list -p valve`, with its game directory
//! and map filters.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use muster_proto::valve_master::packet::heartbeat_of;
use muster_proto::valve_master::{ChallengeReply, ChallengeRequest, ServerPacket};
use muster_testkit::XashMaster;

use crate::common::muster;

/// Registers a server from a fresh socket; returns the socket (kept open: the master lists
/// the address it heard from).
fn register(master: SocketAddr, gamedir: &str, map: &str) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let ask = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(7),
    });
    s.send_to(&ask.encode(), master).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = s.recv_from(&mut buf).expect("a challenge reply");
    let reply = ChallengeReply::decode(&buf[..n]).unwrap();
    let hb = ServerPacket::Heartbeat(heartbeat_of(reply.challenge, gamedir, map, 1, 8));
    s.send_to(&hb.encode(), master).unwrap();
    s
}

fn listed(master: SocketAddr, extra: &[&str]) -> Vec<String> {
    let m = master.to_string();
    let mut args = vec!["list", "-p", "valve", m.as_str(), "-f", "json"];
    args.extend_from_slice(extra);
    let run = muster(&args);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    run.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn muster_list_reads_xash3d_masters_lists_with_their_filters() {
    let Some(peer) = XashMaster::require() else {
        return;
    };
    let master = peer.start();
    let addr = master.addr();
    let hl = register(addr, "valve", "crossfire");
    let cs = register(addr, "cstrike", "de_dust2");
    let (hl, cs) = (
        hl.local_addr().unwrap().to_string(),
        cs.local_addr().unwrap().to_string(),
    );
    let end = Instant::now() + Duration::from_secs(10);
    let mut all = Vec::new();
    while Instant::now() < end && !(all.contains(&hl) && all.contains(&cs)) {
        all = listed(addr, &[]);
    }
    assert!(
        all.contains(&hl) && all.contains(&cs),
        "{all:?}\n{}",
        master.log()
    );
    assert_eq!(listed(addr, &["-g", "valve"]), [hl]);
    assert_eq!(listed(addr, &["--master-filter", "\\map\\de_dust2"]), [cs]);
    assert!(listed(addr, &["-g", "valve", "--master-filter", "\\map\\de_dust2"]).is_empty());
    let bad = muster(&[
        "list",
        "-p",
        "valve",
        &addr.to_string(),
        "--master-filter",
        "map\\x",
    ]);
    assert_eq!(
        bad.code,
        Some(2),
        "a filter that does not start with a backslash: {}",
        bad.stderr
    );
}
