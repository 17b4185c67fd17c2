//! The A2S side of the Valve family against real clients, on loopback: qstat (`-a2s`),
//! gamedig (`css`, its valve protocol), opengsq (`source`), python-a2s and a2squery read
//! `muster emulate -p a2s`
//! with INFO behind the challenge round and RULES split over several datagrams; and
//! `muster query -p a2s` reads the same server as they do.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use muster_testkit::{A2squery, Gamedig, Opengsq, PythonA2s, Qstat};

use crate::common::muster;

/// A `muster emulate` killed when dropped.
struct Emulated(Child);

impl Drop for Emulated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Source-style server with two players and a bot, INFO behind the challenge, and 150 rules
/// (about 5 KB: RULES comes in parts).
fn lab_server(style: &str) -> (Emulated, SocketAddr) {
    emulated(style, &["--players", "3", "--bots", "1", "--rules", "150"])
}

/// `muster emulate -p a2s` in `style` named "Lab A2S", INFO behind the challenge, with `extra`
/// flags.
fn emulated(style: &str, extra: &[&str]) -> (Emulated, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["emulate", "-p", "a2s", "--port", "0", "--style", style])
        .args([
            "--name",
            "Lab A2S",
            "--map",
            "de_dust2",
            "--max-players",
            "20",
        ])
        .args(extra)
        .arg("--require-challenge")
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
    let addr = line.rsplit(' ').next().unwrap().parse().expect("address");
    (Emulated(child), addr)
}

#[test]
fn a2s_qstat_reads_the_emulated_server_and_its_split_rules() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let (_server, addr) = lab_server("source");
    let v = qstat.query("a2s", addr);
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["name"], "Lab A2S", "{v}");
    assert_eq!(v["map"], "de_dust2", "{v}");
    assert_eq!(v["numplayers"], 3, "{v}");
    assert_eq!(v["maxplayers"], 20, "{v}");
    assert_eq!(v["rules"]["rule_150"], "value-00000000000150", "{v}");
    assert_eq!(v["rules"]["gamedir"], "cstrike", "{v}");
    let mut names: Vec<&str> = v["players"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["Bot 1", "Player 1", "Player 2"]);
}

#[test]
fn a2s_gamedig_reads_the_emulated_server() {
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let (_server, addr) = lab_server("source");
    let v = gamedig.query("css", addr);
    assert_eq!(v["name"], "Lab A2S", "{v}");
    assert_eq!(v["map"], "de_dust2", "{v}");
    assert_eq!(v["numplayers"], 3, "{v}");
    assert_eq!(v["maxplayers"], 20, "{v}");
    assert_eq!(v["raw"]["folder"], "cstrike", "{v}");
    assert_eq!(v["bots"][0]["name"], "Bot 1", "{v}");
    assert_eq!(v["players"].as_array().unwrap().len(), 2, "{v}");
}

#[test]
fn a2s_opengsq_reads_info_and_players_in_every_style() {
    let Some(opengsq) = Opengsq::require() else {
        return;
    };
    for (style, folder, protocol) in [("source", "cstrike", 17), ("goldsrc", "valve", 48)] {
        let (_server, addr) = lab_server(style);
        let info = opengsq
            .query("source", "get_info", addr)
            .unwrap_or_else(|out| panic!("opengsq failed: {out}"));
        assert_eq!(info["name"], "Lab A2S", "{info}");
        assert_eq!(info["folder"], folder, "{info}");
        assert_eq!(info["protocol"], protocol, "{info}");
        assert_eq!(info["bots"], 1, "{info}");
        let players = opengsq
            .query("source", "get_players", addr)
            .unwrap_or_else(|out| panic!("opengsq failed: {out}"));
        let scores: Vec<i64> = players
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["score"].as_i64().unwrap())
            .collect();
        assert_eq!(scores, [1, 2, 3], "{players}");
    }
    // The Ship: its extra INFO fields and the players' deaths and money.
    let (_server, addr) = lab_server("ship");
    let info = opengsq
        .query("source", "get_info", addr)
        .unwrap_or_else(|out| panic!("opengsq failed: {out}"));
    assert_eq!(info["id"], 2400, "{info}");
    assert_eq!(info["witnesses"], 2, "{info}");
}

#[test]
fn a2s_muster_reads_what_the_clients_read() {
    let (_server, addr) = lab_server("goldsrc");
    let run = muster(&["query", "-p", "a2s", &addr.to_string(), "-f", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let v = &run.json()[0];
    assert_eq!(v["name"], "Lab A2S", "{v}");
    assert_eq!(v["game"], "valve", "{v}");
    assert_eq!(v["num_players"], 3, "{v}");
    assert_eq!(v["rules"]["rule_150"], "value-00000000000150", "{v}");
}

#[test]
fn a2s_python_a2s_reads_info_players_and_split_rules() {
    let Some(client) = PythonA2s::require() else {
        return;
    };
    // The goldsrc style is left out: python-a2s 1.4.2 refuses its RULES, split in the GoldSrc
    // layout (qstat reads them), and no capture of a real GoldSrc server settles who is right.
    for (style, folder, protocol) in [("source", "cstrike", 17), ("ship", "ship", 17)] {
        let (_server, addr) = lab_server(style);
        let v = client
            .query(addr)
            .unwrap_or_else(|out| panic!("python-a2s failed: {out}"));
        assert_eq!(v["name"], "Lab A2S", "{v}");
        assert_eq!(v["map"], "de_dust2", "{v}");
        assert_eq!(v["folder"], folder, "{v}");
        assert_eq!(v["protocol"], protocol, "{v}");
        assert_eq!(v["players"], 3, "{v}");
        assert_eq!(v["max_players"], 20, "{v}");
        assert_eq!(v["bots"], 1, "{v}");
        let scores: Vec<i64> = v["player_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["score"].as_i64().unwrap())
            .collect();
        assert_eq!(scores, [1, 2, 3], "{v}");
        assert_eq!(v["rules"].as_object().unwrap().len(), 150, "{v}");
        assert_eq!(v["rules"]["rule_150"], "value-00000000000150", "{v}");
    }
}

#[test]
fn a2s_a2squery_reads_every_style_through_the_challenge() {
    let Some(client) = A2squery::require() else {
        return;
    };
    for (style, folder, protocol, app_id) in [
        ("source", "cstrike", 17, 240),
        ("goldsrc", "valve", 48, 10),
        ("ship", "ship", 17, 2400),
    ] {
        let (_server, addr) = lab_server(style);
        let v = client
            .query(addr)
            .unwrap_or_else(|out| panic!("a2squery failed on {style}: {out}"));
        assert_eq!(v["name"], "Lab A2S", "{style}: {v}");
        assert_eq!(v["map"], "de_dust2", "{style}: {v}");
        assert_eq!(v["folder"], folder, "{style}: {v}");
        assert_eq!(v["protocol"], protocol, "{style}: {v}");
        assert_eq!(v["app_id"], app_id, "{style}: {v}");
        assert_eq!(v["players"], 3, "{style}: {v}");
        assert_eq!(v["max_players"], 20, "{style}: {v}");
        assert_eq!(v["bots"], 1, "{style}: {v}");
        let list = v["player_list"].as_array().unwrap();
        let names: Vec<&str> = list.iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Player 1", "Player 2", "Bot 1"], "{style}: {v}");
        // The Ship's players carry deaths and money; the others none.
        let ship = style == "ship";
        assert_eq!(list[0]["money"].is_null(), !ship, "{style}: {v}");
        if ship {
            assert_eq!(v["witnesses"], 2, "{v}");
            assert_eq!(list[0]["money"], 500, "{v}");
        }
        // RULES split over several datagrams (GoldSrc layout for goldsrc), all 150 read.
        assert_eq!(v["rules"].as_object().unwrap().len(), 150, "{style}: {v}");
        assert_eq!(
            v["rules"]["rule_150"], "value-00000000000150",
            "{style}: {v}"
        );
    }
}

/// Sends `request` to `addr` from `socket` and returns the first datagram back.
fn exchange(socket: &std::net::UdpSocket, addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    socket.send_to(request, addr).expect("send");
    let mut buf = vec![0u8; 65_536];
    let (n, _) = socket.recv_from(&mut buf).expect("a reply");
    buf.truncate(n);
    buf
}

#[test]
fn a2s_muster_reads_bzip2_compressed_split_replies() {
    // 120 players and 150 rules: PLAYER and RULES both exceed one datagram.
    let (_server, addr) = emulated(
        "source",
        &["--players", "120", "--rules", "150", "--compress"],
    );
    // On the wire: RULES comes as split parts whose id has the compressed bit, part 0
    // carrying the decompressed size, the CRC32 and the bzip2 stream.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let challenge = exchange(&socket, addr, b"\xff\xff\xff\xffV\xff\xff\xff\xff");
    assert_eq!(challenge[..5], *b"\xff\xff\xff\xffA", "{challenge:?}");
    let mut rules = b"\xff\xff\xff\xffV".to_vec();
    rules.extend_from_slice(&challenge[5..9]);
    let part = exchange(&socket, addr, &rules);
    assert_eq!(part[..4], [0xFE, 0xFF, 0xFF, 0xFF]);
    assert_ne!(part[7] & 0x80, 0, "compressed bit");
    assert_eq!(part[9], 0, "part 0 first");
    assert_eq!(&part[20..23], b"BZh");
    // Muster reads both lists whole.
    let run = muster(&["query", "-p", "a2s", &addr.to_string(), "-f", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let v = &run.json()[0];
    assert_eq!(v["name"], "Lab A2S", "{v}");
    assert_eq!(v["players"].as_array().unwrap().len(), 120, "{v}");
    assert_eq!(v["rules"].as_object().unwrap().len(), 150, "{v}");
    assert_eq!(v["rules"]["rule_150"], "value-00000000000150", "{v}");
    assert_eq!(v["partial"], false, "{v}");
}
