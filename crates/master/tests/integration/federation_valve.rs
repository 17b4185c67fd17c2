//! `--upstream valve:`: a Muster learns the list of another Muster's Half-Life / Xash3D face
//! (the Valve master query, paged) and lists a learned server only once its own A2S query
//! answered, under the game folder that answer names.

use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::a2s::respond::{A2sResponder, Style};
use muster_proto::respond::{PlayerState, Responder as _, ServerState};
use muster_proto::valve_master::packet::heartbeat_of;
use muster_proto::valve_master::{ChallengeReply, ChallengeRequest, ServerPacket};
use tokio::net::UdpSocket;

use crate::{Daemon, TempDir, config, loopback};

/// Waits (up to 10 s) until `n` servers are listed.
async fn listed(d: &Daemon, n: usize) {
    for _ in 0..1000 {
        if d.handle.snapshot().listed().len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} listed, not {n}", d.handle.snapshot().listed().len());
}

/// A game server on `bind`: registers with the Valve face at `master`, then (when `answers`)
/// answers A2S queries as a Counter-Strike server does.
async fn game_server(
    master: SocketAddr,
    bind: &str,
    answers: bool,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let s = UdpSocket::bind(bind).await.unwrap();
    let addr = s.local_addr().unwrap();
    let q = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(1),
    });
    s.send_to(&q.encode(), master).await.unwrap();
    let mut buf = vec![0u8; 2048];
    let (n, _) = s.recv_from(&mut buf).await.unwrap();
    let c = ChallengeReply::decode(&buf[..n]).unwrap().challenge;
    let hb = ServerPacket::Heartbeat(heartbeat_of(c, "cstrike", "de_dust2", 1, 16));
    s.send_to(&hb.encode(), master).await.unwrap();
    let state = ServerState {
        name: "learned".into(),
        map: "de_dust2".into(),
        game: "cstrike".into(),
        game_port: addr.port(),
        max_players: 16,
        players: vec![PlayerState {
            name: "p".into(),
            ..PlayerState::default()
        }],
        ..ServerState::default()
    };
    let task = tokio::spawn(async move {
        let mut r = A2sResponder::new(Style::Source, false, 7);
        let mut out = Vec::new();
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            if !answers {
                continue;
            }
            out.clear();
            r.handle_datagram(std::time::Instant::now(), from, &buf[..n], &state, &mut out);
            for reply in &out {
                let _ = s.send_to(&reply.bytes, reply.to).await;
            }
        }
    });
    (addr, task)
}

#[tokio::test]
async fn another_muster_learns_a_valve_master_list_and_verifies_it_with_a2s_first() {
    use muster_master::upstream::settings::{UpstreamConfig, UpstreamKind};
    let dir_a = TempDir::new("federation-valve-a");
    let mut c = config(&dir_a);
    c.listen.valve = loopback();
    c.valve.allow_loopback = true;
    c.poller.enabled = false;
    let a = Daemon::start(c);
    let (server, task) = game_server(a.addr("valve"), "127.0.0.1:0", true).await;
    let (_mute, mute_task) = game_server(a.addr("valve"), "127.0.0.1:0", false).await;
    listed(&a, 2).await;

    let dir_b = TempDir::new("federation-valve-b");
    let mut c = config(&dir_b);
    c.upstream.push(UpstreamConfig::new(
        UpstreamKind::Valve,
        &a.addr("valve").to_string(),
    ));
    let b = Daemon::start(c);
    listed(&b, 1).await;
    // The server that does not answer stays out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(b.handle.snapshot().listed().len(), 1);
    let r = b.handle.snapshot().listed()[0].clone();
    assert_eq!(r.key.addr.to_string(), server.to_string());
    // The game is the folder B's own A2S query got; the info is the server's answer.
    assert_eq!(r.key.game.as_str(), "cstrike");
    assert_eq!(r.info.as_ref().unwrap().name(), "learned");
    task.abort();
    mute_task.abort();
    b.stop().await;
    a.stop().await;
}
