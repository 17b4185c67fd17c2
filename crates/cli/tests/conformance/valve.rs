//! The Valve family against FWGS's xash3d-master (built by `scripts/install-peers.sh`), on
//! loopback: servers registered with it (the challenge and heartbeat written by
//! `muster_proto::valve_master`) are listed by `muster list -p valve`, with its game directory
//! and map filters; `muster emulate -p a2s --master valve:` servers register with it and with
//! Muster's own face (`muster serve --valve`), which lists them to `muster list -p valve` and
//! shows them in `/api/v1/servers`.

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use muster_testkit::process::ScratchDir;
use serde_json::Value;

use muster_proto::valve_master::packet::heartbeat_of;
use muster_proto::valve_master::{ChallengeReply, ChallengeRequest, ServerPacket};
use muster_testkit::{XashMaster, XashQuery};

use crate::common::muster;

/// Registers a server from a fresh socket; returns the socket (kept open: the master lists
/// the address it heard from).
fn register(master: SocketAddr, gamedir: &str, map: &str) -> UdpSocket {
    let s = UdpSocket::bind(if master.is_ipv6() {
        "[::1]:0"
    } else {
        "127.0.0.1:0"
    })
    .unwrap();
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

/// Longest an emulated server may take to show up in a list.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// A `muster` child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `muster emulate -p a2s --port 0 <args>` and the address it listens on.
fn emulate(args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["emulate", "-p", "a2s", "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster emulate");
    let line = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .next()
        .expect("a listening line")
        .expect("utf-8");
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    (Proc(child), addr)
}

/// Asks `master` until it lists every one of `want` (servers register a challenge round trip
/// after they start).
fn wait_listed(master: SocketAddr, want: &[&str]) -> Vec<String> {
    let start = Instant::now();
    loop {
        let got = listed(master, &[]);
        if want.iter().all(|w| got.iter().any(|g| g == w)) {
            return got;
        }
        assert!(start.elapsed() < WAIT_LIMIT, "{want:?} not listed: {got:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Two emulated servers registering with `master`: Half-Life (`valve`, crossfire) and
/// Counter-Strike (`cstrike`, de_dust2).
fn two_servers(master: &str) -> [(Proc, String); 2] {
    let m = format!("valve:{master}");
    [
        emulate(&[
            "--style",
            "goldsrc",
            "--map",
            "crossfire",
            "--players",
            "2",
            "--master",
            &m,
        ]),
        emulate(&["--map", "de_dust2", "--master", &m]),
    ]
}

#[test]
fn valve_xash3d_master_lists_muster_emulated_servers() {
    let Some(peer) = XashMaster::require() else {
        return;
    };
    let master = peer.start();
    let addr = master.addr();
    let [(_hl, hl), (_cs, cs)] = two_servers(&addr.to_string());
    let all = wait_listed(addr, &[&hl, &cs]);
    assert_eq!(all.len(), 2, "{all:?}\n{}", master.log());
    assert_eq!(listed(addr, &["-g", "valve"]), [hl]);
    assert_eq!(listed(addr, &["--master-filter", "\\map\\de_dust2"]), [cs]);
}

/// `muster serve` with only its Valve face (loopback servers allowed) and HTTP, on 127.0.0.1
/// ports the kernel picks, and `extra` flags: the process and the two addresses.
fn muster_serve(scratch: &ScratchDir, extra: &[&str]) -> (Proc, SocketAddr, String) {
    muster_serve_at(scratch, "127.0.0.1:0", extra)
}

/// [`muster_serve`] with the valve face on `valve`.
fn muster_serve_at(
    scratch: &ScratchDir,
    valve: &str,
    extra: &[&str],
) -> (Proc, SocketAddr, String) {
    let config = scratch.path().join("muster.toml");
    std::fs::write(&config, "[valve]\nallow_loopback = true\n").unwrap();
    let data = scratch.path().join("data");
    let mut args = vec![
        "serve".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
        "--data-dir".to_owned(),
        data.display().to_string(),
        "--valve".to_owned(),
        valve.to_owned(),
        "--http".to_owned(),
        "127.0.0.1:0".to_owned(),
    ];
    for face in [
        "gameagent",
        "gamespy-udp",
        "gamespy-tcp",
        "teeworlds07",
        "teeworlds06",
        "mgmt",
        "quake3",
    ] {
        args.push(format!("--{face}"));
        args.push("off".to_owned());
    }
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut valve, mut http) = (String::new(), String::new());
    while valve.is_empty() || http.is_empty() {
        let line = lines.next().expect("listening lines").expect("utf-8");
        let addr = line.rsplit(' ').next().unwrap().to_owned();
        if line.starts_with("listening valve ") {
            valve = addr;
        } else if line.starts_with("listening http ") {
            http = addr;
        }
    }
    (Proc(child), valve.parse().unwrap(), http)
}

/// The servers of `/api/v1/servers` on `http`.
fn api_servers(http: &str) -> Vec<Value> {
    get_json(http, "/api/v1/servers")["servers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `GET path` on `http`, as JSON.
fn get_json(http: &str, path: &str) -> Value {
    let mut conn = std::net::TcpStream::connect(http).unwrap();
    let req = format!("GET {path} HTTP/1.0\r\nHost: muster\r\n\r\n");
    std::io::Write::write_all(&mut conn, req.as_bytes()).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut conn, &mut text).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn muster_list_reads_musters_face_over_ipv6() {
    let scratch = ScratchDir::new("valve-face-v6");
    let (_serve, master, _http) = muster_serve_at(&scratch, "[::1]:0", &[]);
    assert!(master.is_ipv6(), "{master}");
    let server = register(master, "valve", "crossfire");
    let addr = server.local_addr().unwrap().to_string();
    assert!(addr.starts_with("[::1]:"), "{addr}");
    // Over IPv6 the pages hold 18-byte entries; read as 6-byte ones they would be garbage.
    assert_eq!(wait_listed(master, &[&addr]), vec![addr]);
}

#[test]
fn valve_muster_face_lists_muster_emulated_servers_and_the_api_shows_them() {
    let scratch = ScratchDir::new("valve-face");
    let (_serve, master, http) = muster_serve(&scratch, &[]);
    let [(_hl, hl), (_cs, cs)] = two_servers(&master.to_string());
    let all = wait_listed(master, &[&hl, &cs]);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(listed(master, &["-g", "valve"]), std::slice::from_ref(&hl));
    assert_eq!(
        listed(master, &["--master-filter", "\\map\\de_dust2"]),
        std::slice::from_ref(&cs)
    );
    // Xash3D's reading of \empty\1: the empty server only.
    assert_eq!(
        listed(master, &["--master-filter", "\\empty\\1"]),
        std::slice::from_ref(&cs)
    );
    // The API: registered by the valve face, under their game directories; the poller's A2S
    // query then brings the name the heartbeat does not carry.
    let start = Instant::now();
    loop {
        let v = get_json(&http, "/api/v1/servers");
        let servers = v["servers"].as_array().cloned().unwrap_or_default();
        let of = |a: &str| servers.iter().find(|s| s["address"] == a).cloned();
        if let (Some(h), Some(c)) = (of(&hl), of(&cs)) {
            assert_eq!(h["game"], "valve", "{v}");
            assert_eq!(c["game"], "cstrike", "{v}");
            assert_eq!(h["map"], "crossfire", "{v}");
            if h["name"] == "Muster emulated server" {
                break;
            }
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "not in the API as polled: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn valve_muster_learns_xash3d_masters_list_and_verifies_it_with_a2s() {
    let Some(peer) = XashMaster::require() else {
        return;
    };
    let xash = peer.start();
    let [(_hl, hl), (_cs, cs)] = two_servers(&xash.addr().to_string());
    wait_listed(xash.addr(), &[&hl, &cs]);
    let scratch = ScratchDir::new("valve-upstream");
    let upstream = format!("valve:{}", xash.addr());
    let (_serve, _, http) = muster_serve(&scratch, &["--upstream", &upstream]);
    let start = Instant::now();
    loop {
        let servers = api_servers(&http);
        let of = |a: &str| servers.iter().find(|s| s["address"] == a).cloned();
        if let (Some(h), Some(c)) = (of(&hl), of(&cs)) {
            // Learned under the folder each one's A2S answer names, with its answer's name.
            assert_eq!(
                (&h["game"], &c["game"]),
                (&Value::from("valve"), &Value::from("cstrike"))
            );
            assert_eq!(h["name"], "Muster emulated server");
            break;
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "not learned: {servers:?}\n{}",
            xash.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn valve_xash3d_query_reads_musters_face_with_its_filters_and_key() {
    let Some(query) = XashQuery::require() else {
        return;
    };
    let scratch = ScratchDir::new("valve-xash3d-query");
    let (_serve, master, _) = muster_serve(&scratch, &[]);
    let [(_hl, hl), (_cs, cs)] = two_servers(&master.to_string());
    wait_listed(master, &[&hl, &cs]);
    let (hl, cs): (SocketAddr, SocketAddr) = (hl.parse().unwrap(), cs.parse().unwrap());
    let mut both = vec![hl, cs];
    both.sort();
    assert_eq!(query.list(master, &[]), both);
    assert_eq!(query.list(master, &["-g", "valve"]), [hl]);
    // With a key (-k): the tool takes only replies that echo it.
    assert_eq!(query.list(master, &["-k", "-m", "de_dust2"]), [cs]);
    assert_eq!(query.list(master, &["-k", "-g", "dod"]), []);
}
