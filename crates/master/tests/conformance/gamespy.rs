//! Conformance of the gamespy face with real peers: qstat 2.17 `-gsm,<game>` lists the servers
//! registered through the face (spec §15: `quakestat -gsm,serioussamse 127.0.0.1:28900`,
//! `quakestat -json -gsm,serioussamse …`), then queries each listed address as GPS; our fake
//! servers answer that `\status\` too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_master::config::Config;
use muster_master::faces::gamespy;
use muster_master::registry::{GameAddr, ServerKey, Timestamp, Verification};
use muster_master::runtime::{bind_tcp, bind_udp};
use muster_master::table::{FaceStart, Socket};
use muster_master::{Master, MasterHandle};
use muster_proto::gamespy_master::{Enctype, Secure, validate_string};
use muster_proto::gamespy1::packet::Pair;
use muster_proto::gamespy1::reply::{ReplyStyle, encode_reply};
use muster_testkit::Qstat;
use tokio::net::UdpSocket;

const WAIT: Duration = Duration::from_secs(5);

/// A fake server answering every `\status\` (from the master or from qstat).
async fn responder(
    gamename: &'static str,
    name: &'static str,
    style: ReplyStyle,
) -> Arc<UdpSocket> {
    let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let s = Arc::clone(&sock);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            if &buf[..n] != b"\\status\\" {
                continue;
            }
            let port = s.local_addr().unwrap().port();
            let section = vec![
                Pair::new("gamename", gamename).unwrap(),
                Pair::new("hostname", name).unwrap(),
                Pair::new("hostport", (port - 1).to_string()).unwrap(),
                Pair::new("mapname", "Lab").unwrap(),
                Pair::new("numplayers", "0").unwrap(),
                Pair::new("maxplayers", "8").unwrap(),
            ];
            for d in encode_reply(style, 7, &[section]) {
                let _ = s.send_to(&d, from).await;
            }
        }
    });
    sock
}

fn listed(h: &MasterHandle, game: &str, a: SocketAddr) -> bool {
    let key = ServerKey::new(game, GameAddr::Ip(a));
    h.with_registry(|r| r.get(&key).map(|r| r.state)) == Some(Verification::Verified)
}

async fn until(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + WAIT;
    while Instant::now() < end && !cond() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quakestat_gsm_lists_servers_registered_through_the_face() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("muster-conf-gamespy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config {
        data_dir: dir.clone(),
        ..Config::default()
    };
    let master = Master::open(config, Timestamp::now()).unwrap();
    let handle = master.handle();
    let udp = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    let tcp = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let (udp_addr, tcp_addr) = (udp.local_addr().unwrap(), tcp.local_addr().unwrap());
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    let faces = FaceStart::new(handle.clone(), rx);
    tokio::spawn(faces.serve(&gamespy::UDP_FACE, vec![Socket::Udp(udp)]));
    tokio::spawn(faces.serve(&gamespy::TCP_FACE, vec![Socket::Tcp(tcp)]));

    // Two Serious Sam servers (status fallback) and one UT99 server (secure/validate).
    let mut sams = Vec::new();
    for name in ["Sam One", "Sam Two"] {
        let s = responder("serioussam", name, ReplyStyle::SeriousSam).await;
        let a = s.local_addr().unwrap();
        let hb = format!("\\heartbeat\\{}\\gamename\\serioussamse", a.port());
        s.send_to(hb.as_bytes(), udp_addr).await.unwrap();
        sams.push((s, a));
    }
    let ut_query = responder("ut", "UT Lab", ReplyStyle::Packed).await;
    let ut_addr = ut_query.local_addr().unwrap();
    let uplink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let hb = format!("\\heartbeat\\{}\\gamename\\ut", ut_addr.port());
    uplink.send_to(hb.as_bytes(), udp_addr).await.unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(WAIT, uplink.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let secure = Secure::decode(&buf[..n]).unwrap();
    let v = validate_string(&secure.challenge, b"Z5Nfb0", Enctype::Zero).unwrap();
    let answer = format!("\\validate\\{v}\\final\\\\queryid\\1.1");
    uplink.send_to(answer.as_bytes(), udp_addr).await.unwrap();

    let h = handle.clone();
    let sam_addrs: Vec<SocketAddr> = sams.iter().map(|(_, a)| *a).collect();
    assert!(
        until(|| sam_addrs.iter().all(|a| listed(&h, "serioussamse", *a))
            && listed(&h, "ut", ut_addr))
        .await
    );

    handle.publish();
    // The spec's exact invocations (§15), port replaced by the face's.
    let target = tcp_addr.to_string();
    let q = qstat.clone();
    let t = target.clone();
    let out = tokio::task::spawn_blocking(move || q.run(&["-json", "-gsm,serioussamse", &t]))
        .await
        .unwrap();
    let json = out.json();
    let mut got: Vec<String> = json
        .as_array()
        .unwrap_or_else(|| panic!("qstat printed no array\n{out}"))
        .iter()
        .filter(|s| s["protocol"] == "gps")
        .map(|s| s["address"].as_str().unwrap().to_owned())
        .collect();
    got.sort();
    let mut want: Vec<String> = sam_addrs.iter().map(ToString::to_string).collect();
    want.sort();
    assert_eq!(got, want, "{out}");
    let master_entry = json
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["protocol"] == "gsm")
        .unwrap_or_else(|| panic!("no master entry\n{out}"));
    assert_eq!(master_entry["servers"], 2, "{out}");

    let q = qstat.clone();
    let out = tokio::task::spawn_blocking(move || q.run(&["-gsm,ut", &target, "-P"]))
        .await
        .unwrap();
    let text = out.stdout_text();
    assert!(text.contains("1 servers"), "{out}");
    assert!(text.contains(&ut_addr.to_string()), "{out}");
    stop.cancel();
    let _ = std::fs::remove_dir_all(&dir);
}
