//! The Half-Life / Xash3D face in the whole daemon (`Master::run`, real sockets on loopback):
//! a server registered through it is listed by the face and `/api/v1/servers`, and after a
//! restart (the record restored from the store, its heartbeat facts gone with the old process)
//! it is still listed, as a server of the rest of the world, until it heartbeats again.

use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::valve_master::packet::{ListReply, heartbeat_of};
use muster_proto::valve_master::{
    ChallengeReply, ChallengeRequest, ListRequest, Region, ServerPacket,
};
use tokio::net::UdpSocket;

use crate::{Daemon, TempDir, config, get_json, loopback};

fn daemon(dir: &TempDir) -> Daemon {
    let mut c = config(dir);
    c.listen.valve = loopback();
    c.valve.allow_loopback = true;
    c.poller.enabled = false;
    Daemon::start(c)
}

async fn recv(s: &UdpSocket) -> Vec<u8> {
    let mut buf = vec![0u8; 65_536];
    let n = tokio::time::timeout(Duration::from_secs(2), s.recv(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    buf.truncate(n);
    buf
}

/// Asks `region`'s list of the face at `master`.
async fn list(master: SocketAddr, region: Region) -> Vec<SocketAddr> {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.connect(master).await.unwrap();
    let req = ListRequest {
        region,
        ..ListRequest::first(b"")
    };
    s.send(&req.encode()).await.unwrap();
    ListReply::decode(&recv(&s).await, false, false)
        .unwrap()
        .servers
}

/// Waits (up to 5 s) until `n` servers are listed.
async fn listed(d: &Daemon, n: usize) {
    for _ in 0..500 {
        if d.handle.snapshot().listed().len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} listed, not {n}", d.handle.snapshot().listed().len());
}

#[tokio::test]
async fn a_registered_server_is_listed_shown_and_kept_across_a_restart() {
    let dir = TempDir::new("face-valve");
    let d = daemon(&dir);
    let master = d.addr("valve");
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.connect(master).await.unwrap();
    let q = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: None,
    });
    s.send(&q.encode()).await.unwrap();
    let c = ChallengeReply::decode(&recv(&s).await).unwrap().challenge;
    let mut pairs = heartbeat_of(c, "cstrike", "de_dust2", 3, 16)
        .pairs()
        .to_vec();
    pairs.push((b"region".to_vec(), b"3".to_vec()));
    let hb = ServerPacket::Heartbeat(muster_proto::valve_master::Heartbeat::new(pairs));
    s.send(&hb.encode()).await.unwrap();
    let server = s.local_addr().unwrap();
    listed(&d, 1).await;
    d.handle.publish();
    // It said Europe: listed there, not to the rest of the world.
    assert_eq!(list(master, Region::EUROPE).await, [server]);
    assert_eq!(list(master, Region::WORLD).await, []);
    let api = get_json(d.http(), "/api/v1/servers", 200).await;
    let shown = &api["servers"][0];
    assert_eq!(shown["address"], server.to_string(), "{api}");
    assert_eq!(shown["game"], "cstrike", "{api}");
    assert_eq!(shown["map"], "de_dust2", "{api}");
    assert_eq!(shown["num_players"], 3, "{api}");
    d.stop().await;

    let d = daemon(&dir);
    listed(&d, 1).await;
    let master = d.addr("valve");
    assert_eq!(list(master, Region::WORLD).await, [server]);
    d.stop().await;
}
