//! Muster's Valve master codecs against FWGS's xash3d-master: a game server's challenge and
//! heartbeat as `muster_proto::valve_master` encodes them get it listed, and the list pages it
//! sends decode, with the key echo and the filters it applies.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use muster_proto::valve_master::packet::heartbeat_of;
use muster_proto::valve_master::{
    ChallengeReply, ChallengeRequest, ListReply, ListRequest, ServerPacket,
};
use muster_testkit::XashMaster;

/// How long a list is waited for after its last datagram.
const QUIET: Duration = Duration::from_millis(500);

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Every datagram `s` receives from `from` until `quiet` passes without one.
fn datagrams(s: &UdpSocket, from: SocketAddr, quiet: Duration) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    let mut last = Instant::now();
    while last.elapsed() < quiet {
        if let Ok((n, src)) = s.recv_from(&mut buf)
            && src == from
        {
            out.push(buf[..n].to_vec());
            last = Instant::now();
        }
    }
    out
}

/// The servers `filter` lists, from every page the master sends (it closes each datagram with
/// the zero address), with the key each page echoed.
fn list(master: SocketAddr, filter: &str) -> (Vec<SocketAddr>, Vec<Option<u32>>) {
    let client = socket();
    client
        .send_to(&ListRequest::first(filter.as_bytes()).encode(), master)
        .unwrap();
    let with_key = filter.contains("\\key\\");
    let mut servers = Vec::new();
    let mut keys = Vec::new();
    for d in datagrams(&client, master, QUIET) {
        let page = ListReply::decode(&d, false, with_key).unwrap();
        assert!(page.complete, "each page ends with the zero address");
        servers.extend(page.servers);
        keys.push(page.key);
    }
    (servers, keys)
}

#[test]
fn a_server_registered_with_our_codec_is_listed_and_filtered_by_xash3d_master() {
    let Some(peer) = XashMaster::require() else {
        return;
    };
    let master = peer.start();
    let addr = master.addr();

    // The challenge exchange, with the server's own number echoed.
    let server = socket();
    let ask = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(0x5EED_F00D),
    });
    server.send_to(&ask.encode(), addr).unwrap();
    let reply = datagrams(&server, addr, Duration::from_millis(500));
    let reply = ChallengeReply::decode(reply.first().expect("a challenge reply")).unwrap();
    assert_eq!(
        reply.server_challenge,
        Some(0x5EED_F00D),
        "{}",
        master.log()
    );

    // A heartbeat carrying it, from the same socket.
    let hb = ServerPacket::Heartbeat(heartbeat_of(reply.challenge, "valve", "crossfire", 3, 16));
    server.send_to(&hb.encode(), addr).unwrap();

    let me = server.local_addr().unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    let mut listed = Vec::new();
    while Instant::now() < end && !listed.contains(&me) {
        listed = list(addr, "\\gamedir\\valve\\clver\\0.21").0;
    }
    assert!(
        listed.contains(&me),
        "xash3d-master lists the server: {listed:?}\n{}",
        master.log()
    );

    // The key echo, read only because the request sent one.
    let (keyed, keys) = list(addr, "\\gamedir\\valve\\clver\\0.21\\key\\5eedf00d");
    assert_eq!(keyed, listed);
    assert!(
        !keys.is_empty() && keys.iter().all(|k| *k == Some(0x5EED_F00D)),
        "{keys:?}"
    );

    // Its filters: another game directory lists nothing; a map of the server's lists it.
    assert!(list(addr, "\\gamedir\\cstrike\\clver\\0.21").0.is_empty());
    assert!(list(addr, "\\map\\crossfire\\clver\\0.21").0.contains(&me));
    assert!(!list(addr, "\\map\\stalkyard\\clver\\0.21").0.contains(&me));

    // A heartbeat with a wrong challenge is refused: a new socket is never listed.
    let forger = socket();
    let forged = ServerPacket::Heartbeat(heartbeat_of(reply.challenge, "valve", "crossfire", 1, 8));
    forger.send_to(&forged.encode(), addr).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let after = list(addr, "\\gamedir\\valve\\clver\\0.21").0;
    assert!(!after.contains(&forger.local_addr().unwrap()), "{after:?}");
}
