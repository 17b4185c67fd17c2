//! The GameSpy face with other masters, over loopback: `\sync\` answers (Perl and Qt5 forms,
//! trusted peers only, direct servers only, the self-sync guard), a 333networks master's
//! uplink heartbeat challenged at its advertised port, and a mesh checker's back-to-back
//! queries all answered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_master::faces::gamespy::{GameSpySettings, SyncSettings};
use muster_master::registry::{Face, GameAddr, Registration, ServerKey, Timestamp};
use muster_master::upstream::settings::Net;
use muster_proto::Protocol;
use muster_proto::gamespy_master::{Enctype, QueryReply, Secure, validate_string};
use muster_proto::limit::SourceKey;
use tokio::net::UdpSocket;

use crate::face_gamespy::{Face as GsFace, raw_list, relaxed, start, state, until};

const MSID: &str = "11111111-2222-4333-8444-555555555555";

fn settings(peers: &[&str], export_learned: bool) -> GameSpySettings {
    GameSpySettings {
        sync: SyncSettings {
            peers: peers.iter().map(|p| Net::parse(p).unwrap()).collect(),
            export_learned,
            msid: Arc::from(MSID),
        },
        ..relaxed()
    }
}

fn reg(game: &str, addr: &str) -> Registration {
    let a: SocketAddr = addr.parse().unwrap();
    Registration {
        key: ServerKey::new(game, GameAddr::Ip(a)),
        face: Face::GameSpy,
        game_port: None,
        query_addr: Some(a),
        query_protocol: Some(Protocol::GameSpy1),
        source: SourceKey::of(a.ip()),
    }
}

/// A direct UT server, a learned UT server and a direct Serious Sam server.
async fn face_with_servers(s: GameSpySettings) -> GsFace {
    let face = start(s).await;
    let now = Timestamp::now();
    face.handle.register(reg("ut", "127.1.0.1:7778"), now);
    face.handle
        .register(reg("serioussamse", "127.1.0.3:25601"), now);
    face.handle
        .write(|r| r.learn(reg("ut", "127.1.0.2:7778"), &Arc::from("peer"), now));
    face.handle.publish();
    face
}

fn mesh_auth(c: &muster_proto::gamespy_master::Challenge) -> String {
    let v = validate_string(c, b"333NWX", Enctype::Zero).unwrap();
    format!("\\gamename\\333networks\\location\\0\\validate\\{v}\\final\\")
}

async fn sync(face: &GsFace, request: &str) -> Vec<u8> {
    let request = request.to_owned();
    raw_list(face.tcp, move |c| {
        let mut m = mesh_auth(c).into_bytes();
        m.extend_from_slice(request.as_bytes());
        m
    })
    .await
    .1
}

#[tokio::test]
async fn sync_is_answered_in_both_forms_to_authenticated_peers_with_direct_servers() {
    let face = face_with_servers(settings(&["127.0.0.0/8"], false)).await;
    // The Perl master's request.
    assert_eq!(
        sync(&face, "\\sync\\all\\final\\").await,
        b"\\ut\\127.1.0.1:7778 \\serioussamse\\127.1.0.3:25601 \\final\\"
    );
    // The Qt5 master's: its own authentication layout, named games, `\msid\` and no
    // `\final\`.
    let rest = raw_list(face.tcp, |c| {
        let v = validate_string(c, b"333NWX", Enctype::Zero).unwrap();
        format!(
            "\\validate\\{v}\\queryid\\1.1\\gamename\\333networks\\gamever\\Qt-0.28\\location\\0\\queryid\\1.2\\final\\\\sync\\ut unreal\\msid\\{}",
            "99999999-2222-4333-8444-555555555555"
        )
        .into_bytes()
    })
    .await
    .1;
    assert_eq!(rest, b"\\ut\\127.1.0.1:7778 \\final\\");
    // This master's own id: nothing.
    assert_eq!(
        sync(&face, &format!("\\sync\\all\\msid\\{MSID}\\final\\")).await,
        b"\\final\\"
    );
    assert_eq!(face.handle.metrics().drops("sync_unsupported"), 0);

    // Authenticated as a game, not as a master: closed without a word.
    let rest = raw_list(face.tcp, |c| {
        let v = validate_string(c, b"Z5Nfb0", Enctype::Zero).unwrap();
        format!("\\gamename\\ut\\location\\0\\validate\\{v}\\final\\\\sync\\all\\final\\")
            .into_bytes()
    })
    .await
    .1;
    assert!(rest.is_empty());
    // A wrong validate: the same.
    let rest = raw_list(face.tcp, |_| {
        b"\\gamename\\333networks\\location\\0\\validate\\AAAAAAAA\\final\\\\sync\\all\\final\\"
            .to_vec()
    })
    .await
    .1;
    assert!(rest.is_empty());
    assert_eq!(face.handle.metrics().drops("client_validate"), 2);
}

#[tokio::test]
async fn sync_is_refused_to_other_sources_and_learned_servers_only_when_configured() {
    let closed = face_with_servers(settings(&["192.0.2.0/24"], false)).await;
    assert!(sync(&closed, "\\sync\\all\\final\\").await.is_empty());
    assert_eq!(closed.handle.metrics().drops("sync_unsupported"), 1);
    let open = face_with_servers(settings(&["127.0.0.1"], true)).await;
    assert_eq!(
        sync(&open, "\\sync\\ut\\final\\").await,
        b"\\ut\\127.1.0.1:7778 127.1.0.2:7778 \\final\\"
    );
}

#[tokio::test]
async fn a_mesh_masters_uplink_is_challenged_at_its_advertised_port() {
    let face = start(relaxed()).await;
    // The Perl master's uplink: a heartbeat from a random port naming its beacon port, which
    // is the only socket that answers `\secure\`.
    let beacon = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let uplink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = beacon.local_addr().unwrap().port();
    uplink
        .send_to(
            format!("\\heartbeat\\{port}\\gamename\\333networks").as_bytes(),
            face.udp,
        )
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let (n, from) = tokio::time::timeout(Duration::from_secs(5), beacon.recv_from(&mut buf))
        .await
        .expect("a \\secure\\ at the advertised port")
        .unwrap();
    assert_eq!(from, face.udp);
    let secure = Secure::decode(&buf[..n]).unwrap();
    let v = validate_string(&secure.challenge, b"333NWX", Enctype::Zero).unwrap();
    beacon
        .send_to(
            format!("\\validate\\{v}\\queryid\\1.1\\final\\").as_bytes(),
            face.udp,
        )
        .await
        .unwrap();
    let server = beacon.local_addr().unwrap();
    assert!(
        until(|| state(&face.handle, "333networks", server).is_some()).await,
        "the master is listed as a 333networks server"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), uplink.recv_from(&mut buf))
            .await
            .is_err(),
        "nothing went to the uplink's random port"
    );
}

#[tokio::test]
async fn a_mesh_checkers_back_to_back_queries_are_all_answered() {
    let face = start(relaxed()).await;
    // The Perl checker: `\secure\` then `\status\` from one socket at once; it checks again
    // with `\status\` alone.
    let checker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for q in [&b"\\secure\\ABCDEF"[..], b"\\status\\", b"\\status\\"] {
        checker.send_to(q, face.udp).await.unwrap();
    }
    let mut buf = [0u8; 2048];
    let mut replies = Vec::new();
    for _ in 0..3 {
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), checker.recv_from(&mut buf))
            .await
            .expect("every query answered")
            .unwrap();
        replies.push(QueryReply::decode(&buf[..n]).unwrap());
    }
    let text = format!("{replies:?}");
    assert_eq!(text.matches("validate").count(), 1, "{text}");
    assert_eq!(text.matches("hostport").count(), 2, "{text}");
}
