//! The Quake III / DarkPlaces family against real peers, all on loopback:
//!
//! - qstat (`-q3s`), gamedig (`q3a`, its quake3 protocol) and opengsq (`quake3`) read
//!   `muster emulate -p quake3` (name, map, players with scores, bots);
//! - dpmaster 2.2 (built by `scripts/install-peers.sh`) takes the heartbeats of Muster's
//!   emulated servers, verifies them with its challenge, and `muster list -p quake3` reads its
//!   list with `getservers` and `getserversExt`, on 127.0.0.1 and ::1;
//! - Debian's openarena-server (ioquake3 with OpenArena's data) with bots is read by
//!   `muster query -p quake3` and, heartbeating to dpmaster, listed by `muster list`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use muster_testkit::process::{ChildGuard, ScratchDir};
use muster_testkit::{Gamedig, Missing, Opengsq, Qstat, free_udp_port, peers_dir, require};
use serde_json::Value;

use crate::common::muster;

/// Longest a server may take to show up in a list or to fill with bots.
const WAIT_LIMIT: Duration = Duration::from_secs(45);

/// A `muster emulate` killed when dropped.
struct Emulated(Child);

impl Drop for Emulated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `muster emulate -p quake3 --port 0 <args>` and the address it listens on.
fn emulate(args: &[&str]) -> (Emulated, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["emulate", "-p", "quake3", "--port", "0"])
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
    let addr = line.rsplit(' ').next().unwrap().parse().expect("address");
    (Emulated(child), addr)
}

/// The emulated server every client test reads.
fn lab_server() -> (Emulated, SocketAddr) {
    emulate(&[
        "--name",
        "^1Red ^7Fox",
        "--map",
        "q3dm17",
        "--players",
        "3",
        "--bots",
        "1",
        "--max-players",
        "12",
    ])
}

#[test]
fn quake3_qstat_reads_the_emulated_server() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let (_server, addr) = lab_server();
    let v = qstat.query("q3s", addr);
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["name"], "Red Fox", "{v}");
    assert_eq!(v["map"], "q3dm17", "{v}");
    assert_eq!(v["numplayers"], 3, "{v}");
    assert_eq!(v["maxplayers"], 12, "{v}");
    let players: Vec<(String, i64, i64)> = v["players"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["score"].as_i64().unwrap(),
                p["ping"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        players,
        [
            ("Player 1".to_owned(), 1, 21),
            ("Player 2".to_owned(), 2, 22),
            ("Bot 1".to_owned(), 3, 0)
        ]
    );
    assert_eq!(v["rules"]["gamename"], "Quake3Arena", "{v}");
}

#[test]
fn quake3_gamedig_reads_the_emulated_server() {
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let (_server, addr) = lab_server();
    let v = gamedig.query("q3a", addr);
    assert_eq!(v["name"], "Red Fox", "{v}");
    assert_eq!(v["map"], "q3dm17", "{v}");
    assert_eq!(v["numplayers"], 3, "{v}");
    // gamedig puts ping-0 lines among its bots.
    let names = |key: &str| -> Vec<(String, i64)> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["raw"]["frags"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        names("players"),
        [("Player 1".to_owned(), 1), ("Player 2".to_owned(), 2)]
    );
    assert_eq!(names("bots"), [("Bot 1".to_owned(), 3)]);
    assert_eq!(v["raw"]["sv_hostname"], "Red Fox", "{v}");
}

#[test]
fn quake3_opengsq_reads_the_emulated_server() {
    let Some(opengsq) = Opengsq::require() else {
        return;
    };
    let (_server, addr) = lab_server();
    let v = opengsq
        .query("quake3", "get_status", addr)
        .unwrap_or_else(|out| panic!("opengsq failed: {out}"));
    assert_eq!(v["info"]["sv_hostname"], "Red Fox", "{v}");
    assert_eq!(v["info"]["mapname"], "q3dm17", "{v}");
    let players: Vec<(String, i64)> = v["players"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["frags"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        players,
        [
            ("Player 1".to_owned(), 1),
            ("Player 2".to_owned(), 2),
            ("Bot 1".to_owned(), 3)
        ]
    );
    let info = opengsq
        .query("quake3", "get_info", addr)
        .unwrap_or_else(|out| panic!("opengsq failed: {out}"));
    assert_eq!(info["hostname"], "Red Fox", "{info}");
    assert_eq!(info["clients"], "3", "{info}");
}

/// dpmaster, built by `scripts/install-peers.sh` into `<peers>/bin/dpmaster`.
fn find_dpmaster() -> Result<PathBuf, Missing> {
    let bin = peers_dir().join("bin/dpmaster");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(Missing {
            peer: "dpmaster",
            detail: format!("no {}", bin.display()),
        })
    }
}

/// dpmaster on `port` of 127.0.0.1 and ::1, taking loopback servers. As root it confines
/// itself to a jail folder: a scratch one here.
struct Dpmaster {
    guard: ChildGuard,
    port: u16,
    _scratch: ScratchDir,
}

impl Dpmaster {
    fn start(bin: &std::path::Path) -> Self {
        let scratch = ScratchDir::new("dpmaster");
        let jail = scratch.path().join("jail");
        std::fs::create_dir_all(&jail).unwrap();
        let port = free_udp_port();
        let port_arg = port.to_string();
        let jail_arg = jail.display().to_string();
        let args = [
            "-p",
            &port_arg,
            "--allow-loopback",
            "-l",
            "127.0.0.1",
            "-l",
            "::1",
            "-j",
            &jail_arg,
            "-v",
            "4",
        ];
        let guard = ChildGuard::spawn(
            "dpmaster",
            bin,
            &args,
            scratch.path(),
            &[],
            scratch.path().join("dpmaster.log"),
        )
        .expect("start dpmaster");
        // It binds at once; give it a moment to do so before servers heartbeat.
        std::thread::sleep(Duration::from_millis(300));
        Self {
            guard,
            port,
            _scratch: scratch,
        }
    }

    fn v4(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn v6(&self) -> String {
        format!("[::1]:{}", self.port)
    }
}

/// The addresses `muster list -p quake3 <args> MASTER` prints, sorted.
fn listed(master: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec!["list", "-p", "quake3", "-f", "json", "--timeout", "1s"];
    all.extend(args);
    all.push(master);
    let run = muster(&all);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let mut out: Vec<String> = run
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["address"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

/// Asks until `listed` returns `want` (servers register a heartbeat round trip after they
/// start), failing after [`WAIT_LIMIT`] with what the master said.
fn wait_listed(dp: &Dpmaster, master: &str, args: &[&str], want: &[String]) {
    let start = Instant::now();
    loop {
        let got = listed(master, args);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "{master} {args:?}: listed {got:?}, want {want:?}\ndpmaster log:\n{}",
            dp.guard.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn quake3_dpmaster_lists_muster_emulated_servers_over_ipv4_and_ipv6() {
    let Some(bin) = require(find_dpmaster()) else {
        return;
    };
    let dp = Dpmaster::start(&bin);
    let (v4m, v6m) = (format!("quake3:{}", dp.v4()), format!("quake3:{}", dp.v6()));
    let (_a, a) = emulate(&["--name", "Four", "--master", &v4m]);
    let (_b, b) = emulate(&["--bind", "::1", "--name", "Six", "--master", &v6m]);
    let (_c, c) = emulate(&[
        "--style",
        "darkplaces",
        "--name",
        "Dark",
        "--players",
        "1",
        "--master",
        &v4m,
    ]);
    let mut q3 = vec![a.to_string(), b.to_string()];
    q3.sort();
    // getserversExt: both families, from either of the master's addresses.
    wait_listed(&dp, &dp.v6(), &["--game", "Quake3Arena"], &q3);
    assert_eq!(listed(&dp.v4(), &["--game", "Quake3Arena"]), q3);
    // getservers: IPv4 only, the anonymous game by its protocol number.
    assert_eq!(listed(&dp.v4(), &[]), [a.to_string()]);
    // A DarkPlaces game by its name and protocol.
    wait_listed(
        &dp,
        &dp.v4(),
        &["--game", "Xonotic", "--protocol-version", "3"],
        &[c.to_string()],
    );
    // And scanned: what dpmaster lists, queried.
    let run = muster(&[
        "scan",
        "--master",
        &format!("quake3:{}", dp.v4()),
        "--game",
        "Xonotic",
        "--protocol-version",
        "3",
        "-f",
        "json",
    ]);
    let v = run.json();
    assert_eq!(v[0]["name"], "Dark", "{v}");
    assert_eq!(v[0]["game"], "xonotic", "{v}");
}

/// Debian's openarena-server start script.
fn find_openarena() -> Result<PathBuf, Missing> {
    muster_testkit::dpkg_file(
        "openarena-server",
        "openarena-server",
        "games/openarena-server",
    )
}

/// Debian's openarena-server on `127.0.0.1` (a free port), heartbeating `master` only, with
/// three bots on `oa_dm1`; the guard and the port.
fn openarena(oa: &std::path::Path, master: &str, scratch: &ScratchDir) -> (ChildGuard, u16) {
    let port = free_udp_port();
    let port_arg = port.to_string();
    // Loopback only: IPv4 alone, on 127.0.0.1, and no master but ours.
    let sets = [
        ("net_enabled", "1"),
        ("net_ip", "127.0.0.1"),
        ("net_port", &port_arg),
        ("dedicated", "2"),
        ("sv_master1", master),
        ("sv_master2", ""),
        ("sv_master3", ""),
        ("sv_master4", ""),
        ("sv_master5", ""),
        ("sv_hostname", "^3Muster ^7OA lab"),
        ("bot_enable", "1"),
        ("bot_minplayers", "3"),
        ("sv_maxclients", "8"),
    ];
    let mut args: Vec<&str> = sets.iter().flat_map(|(k, v)| ["+set", k, v]).collect();
    args.extend(["+map", "oa_dm1"]);
    let server = ChildGuard::spawn(
        "openarena-server",
        oa,
        &args,
        scratch.path(),
        &[("HOME", scratch.path())],
        scratch.path().join("openarena.log"),
    )
    .expect("start openarena-server");
    (server, port)
}

/// `muster serve` with only its Quake III face (loopback servers allowed) and HTTP, on
/// `127.0.0.1` ports the kernel picks: the process and the two addresses.
fn muster_serve(scratch: &ScratchDir) -> (Emulated, String, String) {
    let config = scratch.path().join("muster.toml");
    std::fs::write(&config, "[quake3]\nallow_loopback = true\n").unwrap();
    let data = scratch.path().join("data");
    let mut args = vec![
        "serve".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
        "--data-dir".to_owned(),
        data.display().to_string(),
        "--quake3".to_owned(),
        "127.0.0.1:0".to_owned(),
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
        "valve",
    ] {
        args.push(format!("--{face}"));
        args.push("off".to_owned());
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut quake3, mut http) = (String::new(), String::new());
    while quake3.is_empty() || http.is_empty() {
        let line = lines.next().expect("listening lines").expect("utf-8");
        let addr = line.rsplit(' ').next().unwrap().to_owned();
        if line.starts_with("listening quake3 ") {
            quake3 = addr;
        } else if line.starts_with("listening http ") {
            http = addr;
        }
    }
    (Emulated(child), quake3, http)
}

#[test]
fn quake3_openarena_server_registers_with_muster_and_is_listed() {
    let Some(oa) = require(find_openarena()) else {
        return;
    };
    let scratch = ScratchDir::new("openarena-muster");
    let (_serve, master, http) = muster_serve(&scratch);
    let (mut server, port) = openarena(&oa, &master, &scratch);
    let addr = format!("127.0.0.1:{port}");
    // It heartbeats QuakeArena-1 and answers getinfo with protocol 71 and no game name:
    // registered as Quake III Arena, listed for getservers 71 and getserversExt Quake3Arena 71.
    let start = Instant::now();
    while listed(&master, &["--protocol-version", "71"]) != [addr.clone()] {
        assert!(
            server.exited().is_none(),
            "openarena-server exited:\n{}",
            server.log()
        );
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "not listed by Muster:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        listed(
            &master,
            &["--game", "Quake3Arena", "--protocol-version", "71"]
        ),
        std::slice::from_ref(&addr)
    );
    assert!(listed(&master, &["--protocol-version", "68"]).is_empty());
    // The API shows it as the server describes itself, colours removed.
    let mut conn = std::net::TcpStream::connect(&http).unwrap();
    std::io::Write::write_all(
        &mut conn,
        b"GET /api/v1/servers?protocol=quake3 HTTP/1.0\r\nHost: muster\r\n\r\n",
    )
    .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut conn, &mut text).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
    let s = &v["servers"][0];
    assert_eq!(s["address"], addr.as_str(), "{v}");
    assert_eq!(s["name"], "Muster OA lab", "{v}");
    assert_eq!(s["game"], "quake3arena", "{v}");
    // Once the poller has read its statusResponse (whose rules say `com_protocol`, not
    // `protocol`), it is still listed for protocol 71.
    let start = Instant::now();
    loop {
        let mut conn = std::net::TcpStream::connect(&http).unwrap();
        std::io::Write::write_all(
            &mut conn,
            b"GET /api/v1/servers?protocol=quake3 HTTP/1.0\r\nHost: muster\r\n\r\n",
        )
        .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut conn, &mut text).unwrap();
        if text.contains("\"last_poll\":1") || text.contains("\"last_poll\":2") {
            break;
        }
        assert!(start.elapsed() < WAIT_LIMIT, "never polled: {text}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        listed(&master, &["--protocol-version", "71"]),
        std::slice::from_ref(&addr)
    );
    server.stop();
}

#[test]
fn quake3_openarena_server_with_bots_is_queried_and_listed_by_dpmaster() {
    let Some(oa) = require(find_openarena()) else {
        return;
    };
    let Some(bin) = require(find_dpmaster()) else {
        return;
    };
    let dp = Dpmaster::start(&bin);
    let scratch = ScratchDir::new("openarena");
    let (mut server, port) = openarena(&oa, &dp.v4(), &scratch);
    let addr = format!("127.0.0.1:{port}");
    // Bots join one after another after the map loads.
    let start = Instant::now();
    let answer: Value = loop {
        assert!(
            server.exited().is_none(),
            "openarena-server exited:\n{}",
            server.log()
        );
        let run = muster(&[
            "query",
            "-p",
            "quake3",
            "-f",
            "json",
            "--timeout",
            "500ms",
            &addr,
        ]);
        if run.code == Some(0) {
            let v = run.json()[0].clone();
            if v["num_players"].as_u64().unwrap_or(0) >= 2 {
                break v;
            }
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "no bots on {addr} in time:\n{}\n{}",
            run.stdout,
            server.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(answer["name"], "Muster OA lab", "{answer}");
    assert_eq!(answer["raw"]["name_raw"], "^3Muster ^7OA lab", "{answer}");
    assert_eq!(answer["map"], "oa_dm1", "{answer}");
    assert_eq!(answer["max_players"], 8, "{answer}");
    // The status reply's gamename is the game module's: OpenArena's.
    assert_eq!(answer["game"], "baseoa", "{answer}");
    assert_eq!(answer["game_name"], "OpenArena", "{answer}");
    let players = answer["players"].as_array().unwrap();
    assert!(players.len() >= 2, "{answer}");
    for p in players {
        assert_eq!(p["ping_ms"], 0, "bots answer with ping 0: {p}");
        assert_eq!(p["raw"]["bot"], true, "{p}");
        assert!(!p["name"].as_str().unwrap().is_empty(), "{p}");
        assert!(p["score"].is_i64(), "{p}");
    }
    // It heartbeats QuakeArena-1 with protocol 71: listed for getservers 71 and for
    // getserversExt Quake3Arena 71.
    wait_listed(
        &dp,
        &dp.v4(),
        &["--protocol-version", "71"],
        std::slice::from_ref(&addr),
    );
    assert_eq!(
        listed(
            &dp.v4(),
            &["--game", "Quake3Arena", "--protocol-version", "71"]
        ),
        [addr]
    );
    server.stop();
}

/// `(address, name, players)` of every server a scan's JSON holds, sorted.
fn servers_of(v: &Value, name_key: &str, players_key: &str) -> Vec<(String, String, u64)> {
    let mut out: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["address"].as_str().unwrap().to_owned(),
                s[name_key].as_str().unwrap_or_default().to_owned(),
                s[players_key].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn quake3_muster_scan_and_qstat_q3m_agree_on_dpmaster() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let Some(bin) = require(find_dpmaster()) else {
        return;
    };
    let dp = Dpmaster::start(&bin);
    let master = format!("quake3:{}", dp.v4());
    let (_a, a) = emulate(&["--name", "Alpha", "--players", "2", "--master", &master]);
    let (_b, b) = emulate(&["--name", "Bravo", "--master", &master]);
    let mut both = vec![a.to_string(), b.to_string()];
    both.sort();
    wait_listed(&dp, &dp.v4(), &[], &both);
    let run = muster(&["scan", "--master", &master, "-f", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let ours = servers_of(&run.json(), "name", "num_players");
    // qstat lists the master (protocol q3m) and queries each server it lists (q3s).
    let out = qstat.run(&["-json", "-retry", "1", "-q3m", &dp.v4()]);
    let theirs: Vec<Value> = out
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["protocol"] == "q3s")
        .cloned()
        .collect();
    let theirs = servers_of(&Value::Array(theirs), "name", "numplayers");
    assert_eq!(ours, theirs);
    let mut want = vec![
        (a.to_string(), "Alpha".to_owned(), 2),
        (b.to_string(), "Bravo".to_owned(), 0),
    ];
    want.sort();
    assert_eq!(ours, want);
}

/// The DarkPlaces style as Xonotic clients' tools read it: qstat's `-xonotics` and gamedig's
/// `xonotic`. Both leave the three hex digits of DarkPlaces' `^xRGB` colour in the name, which
/// Muster removes (`quake3.md` §7).
#[test]
fn quake3_darkplaces_style_reads_in_qstat_xonotics_and_gamedig_xonotic() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let (_server, addr) = emulate(&[
        "--style",
        "darkplaces",
        "--name",
        "^x0F0Dark ^7Side",
        "--map",
        "stormkeep",
        "--players",
        "3",
        "--bots",
        "1",
    ]);
    let q = qstat.query("xonotics", addr);
    assert_eq!(q["map"], "stormkeep", "{q}");
    assert_eq!(q["numplayers"], 3, "{q}");
    assert_eq!(q["name"], "0F0Dark Side", "{q}");
    let scores: Vec<i64> = q["players"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["score"].as_i64().unwrap())
        .collect();
    assert_eq!(scores, [1, 2, 3], "{q}");
    let g = gamedig.query("xonotic", addr);
    assert_eq!(g["map"], "stormkeep", "{g}");
    assert_eq!(g["raw"]["gamename"], "Xonotic", "{g}");
    assert_eq!(g["raw"]["bots"], "1", "{g}");
    assert_eq!(g["bots"][0]["name"], "Bot 1", "{g}");
    assert_eq!(g["name"], "0F0Dark Side", "{g}");
    let run = muster(&["query", "-p", "quake3", "-f", "json", &addr.to_string()]);
    let m = run.json();
    assert_eq!(m[0]["name"], "Dark Side", "{m}");
    assert_eq!(m[0]["game"], "xonotic", "{m}");
}
