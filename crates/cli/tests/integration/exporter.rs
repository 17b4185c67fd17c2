//! `muster exporter` and `muster serve`'s `/probe` with real sockets on loopback: an emulated
//! server of every family probed through HTTP, the text read by a Prometheus text parser; a
//! dead server; a master's list; bad parameters and the concurrency cap.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Proc, only_faces, start, start_lines};

fn exporter(extra: &[&str]) -> (Proc, SocketAddr) {
    let mut args = vec!["exporter", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (p, l) = start_lines(&args, 1);
    assert_eq!(l[0].0, "exporter");
    (p, l[0].1)
}

/// GET `path` (with Prometheus' scrape-timeout header when given): status and body.
fn get(addr: SocketAddr, path: &str, scrape_timeout: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    let header = scrape_timeout
        .map(|t| format!("X-Prometheus-Scrape-Timeout-Seconds: {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{header}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

/// The samples of a probe's text, through a real Prometheus text parser.
fn parse(body: &str) -> Vec<prometheus_parse::Sample> {
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines)
        .expect("Prometheus text")
        .samples
}

fn value(v: &prometheus_parse::Value) -> f64 {
    match v {
        prometheus_parse::Value::Gauge(x)
        | prometheus_parse::Value::Untyped(x)
        | prometheus_parse::Value::Counter(x) => *x,
        other => panic!("not a single value: {other:?}"),
    }
}

/// The value of `metric` whose labels include `labels` (`None`: no such sample).
fn sample(
    samples: &[prometheus_parse::Sample],
    metric: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.metric == metric
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(k).is_some_and(|got| got == *v))
        })
        .map(|s| value(&s.value))
}

fn probe(exporter: SocketAddr, query: &str) -> Vec<prometheus_parse::Sample> {
    let (status, body) = get(exporter, &format!("/probe?{query}"), Some("5"));
    assert_eq!(status, 200, "{query}: {body}");
    parse(&body)
}

/// `n` free consecutive UDP ports on loopback (the first).
fn free_ports(n: u16) -> u16 {
    let socks = muster_testkit::net::udp_consecutive(n);
    socks[0].local_addr().unwrap().port()
}

/// Each family's server: protocol, reply style, players (name, score), bots among them.
struct Emulated {
    protocol: &'static str,
    style: &'static str,
    name: &'static str,
    players: &'static [(&'static str, i64)],
    bots: usize,
}

const FAMILIES: [Emulated; 6] = [
    Emulated {
        protocol: "gameagent",
        style: "",
        name: "Sam Agent",
        players: &[("Alice", 5), ("Bob", 2)],
        bots: 0,
    },
    Emulated {
        protocol: "gamespy1",
        style: "ut99",
        name: "UT99 Spy",
        players: &[("Alice", 5)],
        bots: 0,
    },
    Emulated {
        protocol: "unreal2",
        style: "ut2004",
        name: "UT2004 Native",
        players: &[("Alice", 5), ("Bob", 2), ("Carol", 9)],
        bots: 0,
    },
    Emulated {
        protocol: "teeworlds",
        style: "",
        name: "Tee Server",
        players: &[("Alice", 5), ("Bob", 2)],
        bots: 0,
    },
    Emulated {
        protocol: "quake3",
        style: "",
        name: "Q3 Arena",
        players: &[("Alice", 5), ("Bob", 2), ("Carol", 9), ("Dave", 1)],
        bots: 0,
    },
    Emulated {
        protocol: "a2s",
        style: "",
        name: "Source Box",
        players: &[("Alice", 5), ("Bob", 2), ("Bot 1", 0)],
        bots: 1,
    },
];

/// A farm of one server per family on free loopback ports (13 apart: an
/// unreal2 probe also tries GameSpy at + 10 and + 12): the process and
/// each server's game address.
fn farm(dir: &std::path::Path) -> (Proc, Vec<SocketAddr>) {
    let base = free_ports(13 * FAMILIES.len() as u16);
    let mut toml = String::from("bind = \"127.0.0.1\"\n");
    let mut addrs = Vec::new();
    for (i, f) in FAMILIES.iter().enumerate() {
        let port = base + 13 * i as u16;
        addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
        toml.push_str(&format!(
            "[[server]]\nprotocol = \"{}\"\nport = {port}\nname = \"{}\"\nmap = \"map{i}\"\nmax_players = 20\n",
            f.protocol, f.name
        ));
        if !f.style.is_empty() {
            toml.push_str(&format!("style = \"{}\"\n", f.style));
        }
        let humans = f.players.len() - f.bots;
        let players: Vec<String> = f
            .players
            .iter()
            .enumerate()
            .map(|(k, (n, s))| {
                format!(
                    "{{ name = \"{n}\", score = {s}, ping = {}, bot = {} }}",
                    if k >= humans { 0 } else { 30 },
                    k >= humans
                )
            })
            .collect();
        toml.push_str(&format!("players = [{}]\n", players.join(", ")));
    }
    let path = dir.join("farm.toml");
    std::fs::write(&path, toml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["emulate", "--config", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster emulate");
    // Its `listening` lines are drained; readiness is seen by probing until a server is up.
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || for _ in BufReader::new(stdout).lines() {});
    (Proc(child), addrs)
}

/// A test's own directory, removed when dropped (declared before the processes that use it,
/// so dropped after them).
struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("muster-exporter-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// Probe until `muster_probe_success` is 1 (the farm starting up), bounded.
fn probe_until_up(exporter: SocketAddr, query: &str) -> Vec<prometheus_parse::Sample> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = probe(exporter, query);
        if sample(&s, "muster_probe_success", &[]) == Some(1.0) {
            return s;
        }
        assert!(Instant::now() < deadline, "{query}: never up: {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_exporter_reports_a_server_of_every_family() {
    let dir = temp_dir("families");
    let (_farm, addrs) = farm(&dir);
    let (_exporter, at) = exporter(&[]);
    for (f, addr) in FAMILIES.iter().zip(&addrs) {
        let query = format!("target={addr}&protocol={}", f.protocol);
        let s = probe_until_up(at, &query);
        let players = f.players.len() as f64;
        assert_eq!(
            sample(&s, "muster_server_players", &[]),
            Some(players),
            "{query}"
        );
        assert_eq!(
            sample(&s, "muster_server_max_players", &[]),
            Some(20.0),
            "{query}"
        );
        let ping = sample(&s, "muster_server_ping_seconds", &[]).expect("a ping");
        assert!(ping > 0.0 && ping < 5.0, "{query}: ping {ping}");
        let took = sample(&s, "muster_probe_duration_seconds", &[]).expect("a duration");
        assert!(took >= ping, "{query}: {took} < {ping}");
        assert_eq!(
            sample(
                &s,
                "muster_server_info",
                &[("name", f.name), ("protocol", f.protocol)]
            ),
            Some(1.0),
            "{query}: {s:?}"
        );
        for (name, score) in f.players.iter().take(f.players.len() - f.bots) {
            assert_eq!(
                sample(&s, "muster_player_score", &[("player", name)]),
                Some(*score as f64),
                "{query}: {name}: {s:?}"
            );
        }
        if f.bots > 0 {
            assert_eq!(
                sample(&s, "muster_server_bots", &[]),
                Some(f.bots as f64),
                "{query}"
            );
        }
    }
}

#[test]
fn a_dead_server_is_success_0_within_the_scrape_timeout() {
    let (_exporter, at) = exporter(&[]);
    // Nothing listens: the host says so (ICMP port unreachable).
    let closed = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // Someone listens and never answers: only the deadline ends the probe.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    for (addr, protocol) in [(closed, "quake3"), (silent_addr, "a2s")] {
        let (status, body) = get(
            at,
            &format!("/probe?target={addr}&protocol={protocol}"),
            Some("2"),
        );
        assert_eq!(status, 200, "{body}");
        let s = parse(&body);
        assert_eq!(sample(&s, "muster_probe_success", &[]), Some(0.0), "{body}");
        assert_eq!(sample(&s, "muster_server_players", &[]), None, "{body}");
        // Answered within what Prometheus waits (2 s), by the exporter's own account.
        let took = sample(&s, "muster_probe_duration_seconds", &[]).expect("a duration");
        assert!(took < 2.0, "{addr}: {took}");
    }
    drop(silent);
}

#[test]
fn bad_parameters_are_400_with_the_reason() {
    let (_exporter, at) = exporter(&[]);
    for (query, says) in [
        ("", "missing parameter"),
        (
            "target=127.0.0.1:1&protocol=doom",
            "unknown protocol \"doom\"",
        ),
        ("target=127.0.0.1", "no port"),
        (
            "target=127.0.0.1:1&master=gameagent:127.0.0.1:1",
            "not both",
        ),
        (
            "target=127.0.0.1:1&module=x",
            "unknown parameter \"module\"",
        ),
        ("master=gamespy:127.0.0.1:1", "game=NAME"),
        ("master=ddnet:/etc/passwd", "http(s) URL"),
    ] {
        let (status, body) = get(at, &format!("/probe?{query}"), None);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
    }
    let (status, _) = get(at, "/metrics", None);
    assert_eq!(status, 404);
}

#[test]
fn probes_beyond_the_cap_are_503_until_one_ends() {
    let (_exporter, at) = exporter(&["--max-concurrent", "1"]);
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = silent.local_addr().unwrap();
    // Two probes at once of a server that never answers, each waiting up to 4.5 s: the
    // second to arrive finds the one permit taken.
    let both: Vec<_> = ["quake3", "a2s"]
        .into_iter()
        .map(|protocol| {
            let path = format!("/probe?target={target}&protocol={protocol}");
            std::thread::spawn(move || get(at, &path, Some("5")))
        })
        .collect();
    let mut answers: Vec<(u16, String)> = both.into_iter().map(|t| t.join().unwrap()).collect();
    answers.sort();
    assert_eq!(answers[0].0, 200, "{answers:?}");
    assert_eq!(answers[1].0, 503, "{answers:?}");
    assert!(answers[1].1.contains("too many probes"), "{answers:?}");
    // The permit is back once the first probe ended.
    let (status, body) = get(
        at,
        &format!("/probe?target={target}&protocol=a2s"),
        Some("1"),
    );
    assert_eq!(status, 200, "{body}");
    drop(silent);
}

#[test]
fn serve_probes_a_masters_list_and_every_listed_server() {
    let dir = temp_dir("master");
    let data = dir.to_string_lossy().to_string();
    let mut args = vec!["serve", "--data-dir", &data];
    args.extend(only_faces(&["gameagent", "http"]));
    let (_serve, faces) = start(&args, 2);
    let (http, ga) = (faces["http"], faces["gameagent"]);
    let master = format!("gameagent:{ga}");
    let mut servers = Vec::new();
    let mut games = Vec::new();
    for (i, players) in [2u32, 5].into_iter().enumerate() {
        let port = free_ports(2);
        let (p, _) = start(
            &[
                "emulate",
                "-p",
                "gameagent",
                "--port",
                &port.to_string(),
                "--name",
                &format!("Listed {i}"),
                "--players",
                &players.to_string(),
                "--master",
                &master,
            ],
            1,
        );
        servers.push(p);
        games.push((SocketAddr::from(([127, 0, 0, 1], port)), players));
    }
    let query = format!("master={master}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let s = loop {
        let s = probe(http, &query);
        let all_up = games.iter().all(|(a, _)| {
            sample(&s, "muster_probe_success", &[("server", &a.to_string())]) == Some(1.0)
        });
        if sample(&s, "muster_master_servers", &[]) == Some(2.0) && all_up {
            break s;
        }
        assert!(Instant::now() < deadline, "not listed and up: {s:?}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(sample(&s, "muster_master_success", &[]), Some(1.0));
    assert_eq!(sample(&s, "muster_master_servers_omitted", &[]), Some(0.0));
    for (addr, players) in &games {
        let server = addr.to_string();
        assert_eq!(
            sample(&s, "muster_server_players", &[("server", &server)]),
            Some(f64::from(*players)),
            "{server}: {s:?}"
        );
    }
    // A master that does not answer: the list failed, no server series.
    let dead = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = probe(http, &format!("master=gameagent:{dead}"));
    assert_eq!(sample(&s, "muster_master_success", &[]), Some(0.0));
    assert_eq!(sample(&s, "muster_probe_success", &[]), None);
}

/// `muster serve` answers `/probe` only to the networks of `[http] probe_from`: a client outside
/// them gets 403 and no query is sent; `[]` removes the route; a bad network is refused with
/// its key when the file is read.
#[test]
fn serve_answers_probes_only_to_the_networks_of_probe_from() {
    let dir = temp_dir("probe-from");
    let data = dir.to_string_lossy().to_string();
    let serve = |probe_from: &str| {
        let config = dir.join("muster.toml");
        std::fs::write(&config, format!("[http]\nprobe_from = {probe_from}\n")).unwrap();
        let config = config.to_string_lossy().to_string();
        let mut args = vec!["serve", "--config", &config, "--data-dir", &data];
        args.extend(only_faces(&["http"]));
        let (p, bound) = start_lines(&args, 1);
        (p, bound[0].1)
    };
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = silent.local_addr().unwrap();
    let path = format!("/probe?target={target}&protocol=gameagent");
    {
        let (_p, http) = serve(r#"["10.0.0.0/8"]"#);
        let (status, body) = get(http, &path, Some("2"));
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("probe_from"), "{body}");
    }
    {
        let (_p, http) = serve("[]");
        let (status, _) = get(http, &path, Some("2"));
        assert_eq!(status, 404);
    }
    silent.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    assert!(
        silent.recv_from(&mut buf).is_err(),
        "a refused probe sent a query"
    );
    {
        let (_p, http) = serve(r#"["127.0.0.1"]"#);
        let (status, body) = get(http, &path, Some("2"));
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            sample(&parse(&body), "muster_probe_success", &[]),
            Some(0.0)
        );
    }
    let config = dir.join("bad.toml");
    std::fs::write(&config, "[http]\nprobe_from = [\"not a net\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["serve", "--print-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("http.probe_from"), "{err}");
}

#[test]
fn exporter_exit_codes_bad_flags_2_address_in_use_3() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run muster")
    };
    let o = run(&[
        "exporter",
        "--listen",
        "127.0.0.1:0",
        "--max-concurrent",
        "0",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-concurrent"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = run(&["exporter", "--listen", &addr]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains(&addr));
}

/// One management-server frame: the length (with the newline), the JSON, a newline.
fn mgmt_frame(json: &str) -> Vec<u8> {
    format!("{}{json}\n", json.len() + 1).into_bytes()
}

#[test]
fn a_management_servers_list_is_exported_as_listed() {
    let dir = temp_dir("mgmt");
    let data = dir.to_string_lossy().to_string();
    let mut args = vec!["serve", "--data-dir", &data];
    args.extend(only_faces(&["mgmt", "http"]));
    let (_serve, faces) = start(&args, 2);
    let (http, mgmt) = (faces["http"], faces["mgmt"]);
    // A game server registered under a host name, for as long as its connection lives.
    let mut game = TcpStream::connect(mgmt).unwrap();
    game.write_all(&mgmt_frame(
        r#"{"command":"msRegisterGameServer","content":{"serverName":"Feuerland","serverAddress":"localhost","serverPort":40000}}"#,
    ))
    .unwrap();
    game.write_all(&mgmt_frame(
        r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":3,"max":4},"isLobbyOpen":true,"gameplayMode":2}}"#,
    ))
    .unwrap();
    let query = format!("master=mgmt:{mgmt}");
    let server = [("server", "localhost:40000")];
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = probe(http, &query);
        if sample(&s, "muster_server_players", &server).is_some() {
            break s;
        }
        assert!(Instant::now() < deadline, "not listed: {s:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(sample(&s, "muster_master_servers", &[]), Some(1.0), "{s:?}");
    assert_eq!(
        sample(&s, "muster_probe_success", &server),
        Some(1.0),
        "{s:?}"
    );
    assert_eq!(
        sample(&s, "muster_server_players", &server),
        Some(3.0),
        "{s:?}"
    );
    assert_eq!(
        sample(&s, "muster_server_max_players", &server),
        Some(4.0),
        "{s:?}"
    );
    let named = [("server", "localhost:40000"), ("name", "Feuerland")];
    assert_eq!(sample(&s, "muster_server_info", &named), Some(1.0), "{s:?}");
    drop(game);
}
