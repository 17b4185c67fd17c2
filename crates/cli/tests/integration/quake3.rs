//! The Quake III / DarkPlaces family end to end on loopback: `muster emulate -p quake3` queried
//! by `muster query`, a master played by the test (a UDP socket) listed by `muster list` and
//! `muster scan`, and the emulated server's heartbeat and challenge answer seen by that master.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

use muster_proto::quake3::packet::{Packet, ServerList};

use crate::common::{Proc, muster_json as json, spawn};

fn muster() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster"))
}

/// `muster emulate -p quake3 --port 0 <args>`: the process and the address it listens on.
fn emulate(args: &[&str]) -> (Proc, SocketAddr) {
    let mut all = vec!["emulate", "-p", "quake3", "--port", "0"];
    all.extend(args);
    let (p, mut lines) = spawn(&all);
    let line = lines.next().expect("a listening line").expect("utf-8");
    let parts: Vec<&str> = line.split(' ').collect();
    assert_eq!(parts[..3], ["listening", "quake3", "udp"], "{line}");
    (p, parts[3].parse().expect("address"))
}

/// A master played by the test: a socket on `bind`.
fn master_socket(bind: &str) -> UdpSocket {
    let s = UdpSocket::bind(bind).expect("bind the test master");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn recv(s: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; 65_535];
    let (n, from) = s
        .recv_from(&mut buf)
        .expect("a datagram for the test master");
    buf.truncate(n);
    (buf, from)
}

#[test]
fn quake3_query_reads_an_emulated_server_with_colours_and_bots() {
    let (_server, addr) = emulate(&[
        "--name",
        "^1Red ^xF80Fox",
        "--map",
        "q3dm17",
        "--players",
        "3",
        "--bots",
        "1",
        "--max-players",
        "12",
    ]);
    let v = json(&["query", "-p", "quake3", &addr.to_string()]);
    let s = &v[0];
    assert_eq!(s["status"], "ok", "{s}");
    assert_eq!(s["protocol"], "quake3");
    assert_eq!(s["name"], "Red Fox");
    assert_eq!(s["raw"]["name_raw"], "^1Red ^xF80Fox");
    assert_eq!(s["map"], "q3dm17");
    assert_eq!(s["num_players"], 3);
    assert_eq!(s["max_players"], 12);
    assert_eq!(s["game"], "quake3arena");
    assert_eq!(s["game_name"], "Quake III Arena");
    let players = s["players"].as_array().unwrap();
    let names: Vec<_> = players
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Player 1", "Player 2", "Bot 1"]);
    assert_eq!(players[1]["score"], 2);
    assert_eq!(players[1]["ping_ms"], 22);
    assert_eq!(players[2]["ping_ms"], 0);
    assert_eq!(players[2]["raw"]["bot"], true);
    assert_eq!(s["rules"]["protocol"], "68");
}

#[test]
fn quake3_darkplaces_style_reads_as_xonotic_and_auto_finds_it() {
    let (_server, addr) = emulate(&[
        "--style",
        "darkplaces",
        "--name",
        "Jérôme ^x0F0DP",
        "--players",
        "2",
        "--bots",
        "2",
    ]);
    let v = json(&["query", "-p", "quake3", &addr.to_string()]);
    let s = &v[0];
    assert_eq!(s["name"], "Jérôme DP", "{s}");
    assert_eq!(s["game"], "xonotic");
    assert_eq!(s["raw"]["bots"], 2);
    assert!(
        s["raw"]["qcstatus"].as_str().unwrap().starts_with("dm:"),
        "{s}"
    );
    // Auto detection tries quake3 on the game port.
    let v = json(&["query", &addr.to_string()]);
    assert_eq!(v[0]["protocol"], "quake3", "{}", v[0]);
    assert_eq!(v[0]["name"], "Jérôme DP");
}

/// The test master answers one request with `servers`, split into datagrams, the first sent
/// twice; returns the request it got.
fn serve_list(master: &UdpSocket, ext: bool, servers: &[SocketAddr]) -> Vec<u8> {
    let (request, from) = recv(master);
    let datagrams = ServerList::encode_datagrams(ext, servers);
    for d in datagrams.iter().chain(datagrams.first()) {
        master.send_to(d, from).unwrap();
    }
    request
}

#[test]
fn quake3_list_reads_every_datagram_once_ipv4() {
    let master = master_socket("127.0.0.1:0");
    let addr = master.local_addr().unwrap();
    let servers: Vec<SocketAddr> = (0..500u16)
        .map(|i| SocketAddr::from((Ipv4Addr::new(127, 0, 1, (i % 250) as u8), 27960 + i)))
        .collect();
    let handle = {
        let servers = servers.clone();
        std::thread::spawn(move || serve_list(&master, false, &servers))
    };
    let v = json(&["list", "-p", "quake3", &addr.to_string()]);
    let request = handle.join().unwrap();
    assert_eq!(request, b"\xff\xff\xff\xffgetservers 68 empty full");
    let mut got: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["address"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got.len(), 500, "duplicates removed, every datagram read");
    got.sort();
    let mut want: Vec<String> = servers.iter().map(ToString::to_string).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(v[0]["master_protocol"], "quake3");
    assert_eq!(v[0]["query_address"], v[0]["address"]);
}

#[test]
fn quake3_list_asks_getservers_ext_with_a_game_over_ipv6() {
    let Ok(master) = UdpSocket::bind("[::1]:0") else {
        // A host without IPv6 loopback cannot run this test at all.
        panic!("no IPv6 loopback");
    };
    master
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let addr = master.local_addr().unwrap();
    let servers: Vec<SocketAddr> = vec![
        "[::1]:27960".parse().unwrap(),
        "127.0.0.1:27961".parse().unwrap(),
        // Bytes equal to the separators inside the entry.
        "[2f5c::5c2f]:23644".parse().unwrap(),
    ];
    let handle = {
        let servers = servers.clone();
        std::thread::spawn(move || serve_list(&master, true, &servers))
    };
    let v = json(&[
        "list",
        "-p",
        "quake3",
        "--game",
        "Quake3Arena",
        "--protocol-version",
        "71",
        &addr.to_string(),
    ]);
    let request = handle.join().unwrap();
    assert_eq!(
        request,
        b"\xff\xff\xff\xffgetserversExt Quake3Arena 71 empty full"
    );
    let got: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        got,
        ["[::1]:27960", "127.0.0.1:27961", "[2f5c::5c2f]:23644"]
    );
    assert_eq!(v[0]["game"], "quake3arena");
    assert_eq!(v[0]["game_name"], "Quake III Arena");
}

#[test]
fn quake3_scan_queries_what_the_master_lists() {
    let (_server, server_addr) = emulate(&["--name", "Listed one", "--players", "1"]);
    let master = master_socket("127.0.0.1:0");
    let addr = master.local_addr().unwrap();
    let handle = std::thread::spawn(move || serve_list(&master, false, &[server_addr]));
    let v = json(&["scan", "--master", &format!("quake3:{addr}")]);
    handle.join().unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["address"], server_addr.to_string());
    assert_eq!(v[0]["protocol"], "quake3");
    assert_eq!(v[0]["name"], "Listed one");
    assert_eq!(v[0]["num_players"], 1);
}

/// What a master checks in the answer to its challenge (`quake3.md` §3.2).
fn check_challenge_answer(master: &UdpSocket, server: SocketAddr, game: &str, protocol: &str) {
    master
        .send_to(b"\xff\xff\xff\xffgetinfo Ab3$x!9Qz", server)
        .unwrap();
    let (reply, from) = recv(master);
    assert_eq!(from, server);
    let Ok(Packet::InfoResponse { info }) = Packet::decode(&reply) else {
        panic!("not an infoResponse: {:?}", String::from_utf8_lossy(&reply))
    };
    assert_eq!(info.get(b"challenge"), Some(&b"Ab3$x!9Qz"[..]));
    assert_eq!(info.get(b"gamename"), Some(game.as_bytes()));
    assert_eq!(info.get(b"protocol"), Some(protocol.as_bytes()));
    assert_eq!(info.get(b"sv_maxclients"), Some(&b"16"[..]));
    assert_eq!(info.get(b"clients"), Some(&b"2"[..]));
}

#[test]
fn quake3_emulated_servers_heartbeat_and_answer_the_master_challenge() {
    for (style, tag, game, protocol) in [
        ("ioquake3", "QuakeArena-1", "Quake3Arena", "68"),
        ("darkplaces", "DarkPlaces", "Xonotic", "3"),
    ] {
        let master = master_socket("127.0.0.1:0");
        let addr = master.local_addr().unwrap();
        let (_server, server) = emulate(&[
            "--style",
            style,
            "--players",
            "2",
            "--master",
            &format!("quake3:{addr}"),
        ]);
        let (heartbeat, from) = recv(&master);
        assert_eq!(from, server, "the heartbeat leaves from the game socket");
        let mut want = b"\xff\xff\xff\xff".to_vec();
        want.extend_from_slice(format!("heartbeat {tag}\n").as_bytes());
        assert_eq!(heartbeat, want);
        check_challenge_answer(&master, server, game, protocol);
    }
}

#[test]
fn quake3_help_texts_explain_the_flags() {
    let help = |args: &[&str]| {
        let o = muster().args(args).arg("--help").output().unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let query = help(&["query"]);
    assert!(
        query.contains("quake3") && query.contains("27960"),
        "{query}"
    );
    let list = help(&["list"]);
    for needle in [
        "quake3",
        "--protocol-version",
        "getserversExt",
        "27950",
        "EOT",
    ] {
        assert!(list.contains(needle), "list --help lacks {needle}:\n{list}");
    }
    let emulate = help(&["emulate"]);
    for needle in ["darkplaces", "heartbeat QuakeArena-1", "--bots"] {
        assert!(emulate.contains(needle), "emulate --help lacks {needle}");
    }
    assert!(help(&["scan"]).contains("quake3:HOST:PORT"));
    assert!(help(&["watch"]).contains("quake3:HOST:PORT"));
}

#[test]
fn quake3_default_ports_are_27960_for_servers_and_27950_for_masters() {
    let out = muster()
        .args(["query", "-p", "quake3", "127.0.0.1", "-f", "json"])
        .args(["--timeout", "100ms", "--retries", "0"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["address"], "127.0.0.1:27960", "{v}");
    let out = muster()
        .args(["list", "-p", "quake3", "127.0.0.1", "-f", "json"])
        .args(["--timeout", "100ms", "--retries", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("127.0.0.1:27950"), "{err}");
}
