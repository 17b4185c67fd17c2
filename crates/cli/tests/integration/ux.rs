//! What a person sees: error messages and exit codes, the daemon's first lines, summaries,
//! addresses as registered, and no terminal escapes in pipes.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{LOOPBACK, Proc, faces_at, run as muster, text};

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("muster-ux-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `muster serve` with only HTTP and (when `mgmt`) the management face, on free loopback
/// ports; its `listening` lines, then its notes up to the last registration hint.
fn serve(dir: &std::path::Path, mgmt: bool) -> (Proc, Vec<String>) {
    let mut args = vec!["serve", "--data-dir", dir.to_str().unwrap()];
    let mgmt_at = if mgmt { LOOPBACK } else { "off" };
    args.extend(faces_at(&[("http", LOOPBACK), ("mgmt", mgmt_at)]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(&args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The `listening` lines on stdout, then the notes for people on stderr.
    let mut out: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .take(if mgmt { 2 } else { 1 })
        .map(Result::unwrap)
        .collect();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let last = line
            .trim_start()
            .starts_with(if mgmt { "mgmt " } else { "http " });
        out.push(line);
        if last {
            break;
        }
    }
    (Proc(child), out)
}

fn face(lines: &[String], name: &str) -> SocketAddr {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("listening {name} tcp ")))
        .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
        .parse()
        .unwrap()
}

#[test]
fn serve_says_where_the_browser_is_and_how_game_servers_register() {
    let dir = fresh_dir("notes");
    let (_serve, lines) = serve(&dir, true);
    let http = face(&lines, "http");
    let mgmt = face(&lines, "mgmt");
    let all = lines.join("\n");
    assert!(all.contains(&format!("browser: http://{http}/\n")), "{all}");
    assert!(
        all.contains(&format!(
            "DDNet: sv_register_url \"http://{http}/ddnet/15/register\""
        )),
        "{all}"
    );
    assert!(
        all.contains(&format!("game servers connect to {mgmt} ")),
        "{all}"
    );
    // Only the faces that are on.
    assert!(!all.contains("ga_strServer"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_errors_name_the_file_line_and_key_and_exit_2() {
    let dir = fresh_dir("config");
    let file = dir.join("muster.toml");
    std::fs::write(
        &file,
        "[poller]\ninterval = \"2m\"\n\n[limits]\nservers_per_sorce = 9\n",
    )
    .unwrap();
    let o = muster(&["serve", "--config", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.starts_with(&format!(
            "muster: {}:5:1: limits.servers_per_sorce: unknown field `servers_per_sorce`, expected one of",
            file.display()
        )),
        "{e}"
    );
    assert!(
        e.contains("`servers_per_source`"),
        "lists the valid keys: {e}"
    );

    std::fs::write(&file, "[limits]\n servers_per_source = 0\n").unwrap();
    let o = muster(&["serve", "--config", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr).trim_end(),
        format!(
            "muster: {}:2:2: limits.servers_per_source: 0 is out of range: expected at least 1",
            file.display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn print_config_shows_defaults_file_and_flags_and_reads_back() {
    let dir = fresh_dir("print");
    let file = dir.join("muster.toml");
    std::fs::write(
        &file,
        "[poller]\ninterval = \"2m\"\n[listen]\nmgmt = \"off\"\n",
    )
    .unwrap();
    let o = muster(&[
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--http",
        "127.0.0.1:18080",
        "--print-config",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let printed = text(&o.stdout);
    for line in [
        "interval = \"2m\"",                             // the file
        "mgmt = \"off\"",                                // the file
        "http = [\"127.0.0.1:18080\"]",                  // the flag
        "gameagent = [\"0.0.0.0:9005\", \"[::]:9005\"]", // a default
        "servers_per_source = 1024",                     // a default
    ] {
        assert!(
            printed.lines().any(|l| l == line),
            "lacks {line}:\n{printed}"
        );
    }
    // What it prints is a config file that gives the same configuration.
    let again = dir.join("printed.toml");
    std::fs::write(&again, &printed).unwrap();
    let o = muster(&[
        "serve",
        "--config",
        again.to_str().unwrap(),
        "--print-config",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), printed);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_or_empty_servers_file_is_exit_2_naming_it() {
    let dir = fresh_dir("servers");
    let missing = dir.join("missing.txt");
    let o = muster(&["scan", "--servers", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains(&missing.display().to_string()), "{e}");

    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "# nothing yet\n\n").unwrap();
    let o = muster(&["scan", "--servers", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains(&empty.display().to_string()) && e.contains("lists no servers"),
        "{e}"
    );
    assert!(o.stdout.is_empty(), "no empty table");

    let doc = dir.join("missing.json");
    let o = muster(&["list", "-p", "ddnet", doc.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(&doc.display().to_string()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ipv6_needs_brackets_when_a_port_could_be_read_two_ways() {
    let o = muster(&["query", "-p", "teeworlds", "::1:8303"]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains("write [::1]:8303 for port 8303"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");

    // The bracketed form queries that port of ::1 (a socket that never answers).
    let silent = std::net::UdpSocket::bind("[::1]:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    assert!(addr.starts_with("[::1]:"), "{addr}");
    let o = muster(&[
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "50ms",
        "--retries",
        "0",
        "-f",
        "json",
        &addr,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["address"], addr.as_str());
    assert_eq!(v[0]["query_address"], addr.as_str());
}

#[test]
fn table_runs_end_with_a_summary_and_pipes_get_no_escapes() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let args = [
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "50ms",
        "--retries",
        "0",
        &addr,
    ];
    let o = muster(&args);
    assert_eq!(o.status.code(), Some(1));
    let e = text(&o.stderr);
    assert!(e.contains("querying 1 server (teeworlds)"), "{e}");
    let last = e.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("1 server: 0 answered, 1 failed, in "),
        "{e}"
    );
    assert!(
        !e.contains('\u{1b}') && !text(&o.stdout).contains('\u{1b}'),
        "{e:?}"
    );

    // -v adds every crate's INFO, still without escapes; -q leaves only the table.
    let mut verbose = vec!["-v"];
    verbose.extend(args);
    let o = muster(&verbose);
    assert!(!text(&o.stderr).contains('\u{1b}'), "{:?}", text(&o.stderr));
    let mut quiet = vec!["-q"];
    quiet.extend(args);
    let o = muster(&quiet);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stderr), "", "quiet");
    assert!(text(&o.stdout).starts_with("ADDRESS"));
}

/// One management-server frame: the length (with the newline), the JSON, a newline.
fn frame(json: &str) -> Vec<u8> {
    format!("{}{json}\n", json.len() + 1).into_bytes()
}

/// A game server registered with the management server at `mgmt`, for as long as it lives.
fn register(mgmt: SocketAddr, name: &str, host: &str, port: u16, open: bool) -> TcpStream {
    let mut s = TcpStream::connect(mgmt).unwrap();
    s.write_all(&frame(&format!(
        r#"{{"command":"msRegisterGameServer","content":{{"serverName":"{name}","serverAddress":"{host}","serverPort":{port}}}}}"#
    )))
    .unwrap();
    s.write_all(&frame(&format!(
        r#"{{"command":"msUpdateGameServerStats","content":{{"players":{{"current":3,"max":4}},"isLobbyOpen":{open},"gameplayMode":2}}}}"#
    )))
    .unwrap();
    s
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = muster(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn management_servers_keep_their_host_names_and_show_their_lobby() {
    let dir = fresh_dir("mgmt");
    let (_serve, lines) = serve(&dir, true);
    let mgmt = face(&lines, "mgmt").to_string();
    let _named = register(face(&lines, "mgmt"), "轰炸机人", "localhost", 40000, false);
    let _ip = register(face(&lines, "mgmt"), "Feuerland", "127.0.0.1", 20000, true);
    let deadline = Instant::now() + Duration::from_secs(10);
    let list = loop {
        let list = json(&["list", "-p", "mgmt", "-f", "json", &mgmt]);
        if list.as_array().unwrap().len() == 2 {
            break list;
        }
        assert!(Instant::now() < deadline, "{list}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let named = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "轰炸机人")
        .unwrap();
    assert_eq!(named["address"], "localhost:40000", "as registered: {list}");
    let resolved = named["resolved_address"].as_str().unwrap();
    assert!(
        resolved == "127.0.0.1:40000" || resolved == "[::1]:40000",
        "{list}"
    );
    assert_eq!(named["query_address"], serde_json::Value::Null);
    assert_eq!(
        named["lobby"],
        serde_json::json!({"open": false, "mode": "Standard A+B"})
    );
    assert_eq!(named["num_players"], 3);

    let open = json(&[
        "list",
        "-p",
        "mgmt",
        "-f",
        "json",
        "--filter",
        "lobby=open",
        &mgmt,
    ]);
    assert_eq!(open.as_array().unwrap().len(), 1, "{open}");
    assert_eq!(open[0]["address"], "127.0.0.1:20000");
    assert_eq!(open[0]["resolved_address"], "127.0.0.1:20000");

    let o = muster(&["list", "-p", "mgmt", &mgmt]);
    let table = text(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("localhost:40000"))
        .unwrap();
    assert!(
        row.contains(resolved) && row.contains("closed") && row.contains("Standard A+B"),
        "{table}"
    );
    assert!(
        text(&o.stderr).contains("2 servers listed, in "),
        "{}",
        text(&o.stderr)
    );

    let scan = json(&[
        "scan",
        "--master",
        &format!("mgmt:{mgmt}"),
        "-f",
        "json",
        "--filter",
        "lobby=closed",
    ]);
    assert_eq!(scan.as_array().unwrap().len(), 1, "{scan}");
    assert_eq!(scan[0]["address"], "localhost:40000");
    assert_eq!(scan[0]["lobby"]["open"], false);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Lines of `child`'s stderr, as they come.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line of `rx` containing `needle`, within ten seconds.
fn wait_for(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {needle:?} in:\n{}", seen.join("\n")),
        }
    }
}

#[test]
fn a_wrong_ddnet_register_url_is_reported_with_what_was_sent_and_what_came_back() {
    let dir = fresh_dir("ddnet");
    let (_serve, lines) = serve(&dir, false);
    let http = face(&lines, "http");
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://{http}/ddnet/15/regster");
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["emulate", "-p", "teeworlds", "--port", &port.to_string()])
        .args(["--master", &format!("ddnet:{url}")])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let line = wait_for(&rx, "failed");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains(" WARN "),
        "a warning, shown by default: {line}"
    );
    assert!(
        line.contains(&format!("registration with {url} tw0.")),
        "which master: {line}"
    );
    assert!(
        line.contains("sent POST /ddnet/15/regster HTTP/1.1") && line.contains("Secret"),
        "what was sent: {line}"
    );
    assert!(line.contains("got HTTP 404 \""), "what came back: {line}");
    assert!(!line.contains("Failed {"), "no debug struct: {line}");

    // Nobody listening: the connect error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["emulate", "-p", "teeworlds", "--port", &port.to_string()])
        .args([
            "--master",
            &format!("ddnet:http://{closed}/ddnet/15/register"),
        ])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let line = wait_for(&rx, "failed");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("got no answer: ") && line.contains("onnection refused"),
        "{line}"
    );

    // Not a URL at all: refused at start, exit 2.
    let o = muster(&[
        "emulate",
        "-p",
        "teeworlds",
        "--port",
        &port.to_string(),
        "--master",
        "ddnet:127.0.0.1:8080",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("is not an http:// or https:// URL"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_definitions() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = muster(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let script = text(&o.stdout);
        for word in ["scan", "print-config", "given-port-only"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let o = muster(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );

    let o = muster(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    let page = text(&o.stdout);
    assert!(page.contains(".TH muster 1"), "{page}");
    assert!(
        page.contains("Exit codes"),
        "the exit codes are in the page"
    );
    let dir = fresh_dir("man");
    let o = muster(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for page in [
        "muster.1",
        "muster-query.1",
        "muster-serve.1",
        "muster-scan.1",
    ] {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(roff.starts_with(".ie"), "{page}: {roff}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every command's exit codes, as README.md's table gives them.
#[test]
fn exit_codes_of_every_command_match_the_readme() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp = silent.local_addr().unwrap().to_string();
    let fast = ["--timeout", "50ms", "--retries", "0"];
    let mgmt_master = format!("mgmt:{closed}");
    let cases: Vec<(Vec<&str>, i32)> = vec![
        // list: a master that does not answer is 1; wrong input is 2.
        (
            [&["list", "-p", "teeworlds"][..], &fast, &[udp.as_str()]].concat(),
            1,
        ),
        (
            [&["list", "-p", "mgmt"][..], &fast, &[closed.as_str()]].concat(),
            1,
        ),
        (vec!["list", "-p", "gamespy", "127.0.0.1:28900"], 2),
        (vec!["list", "-p", "teeworlds", "::1:8300"], 2),
        // scan: nothing to scan, or a bad --master, is 2; a master that fails is 1.
        (vec!["scan"], 2),
        (vec!["scan", "--master", "quake:127.0.0.1:1"], 2),
        (
            vec![
                "scan",
                "--filter",
                "lobby=ajar",
                "--master",
                "mgmt:127.0.0.1:1",
            ],
            2,
        ),
        (
            [&["scan", "--master"][..], &[mgmt_master.as_str()], &fast].concat(),
            1,
        ),
        // emulate: a bad description or a missing farm file is 2; a port in use is 3.
        (vec!["emulate", "--config", "/nonexistent/farm.toml"], 2),
        (vec!["emulate", "-p", "teeworlds"], 2),
        (
            vec![
                "emulate",
                "-p",
                "teeworlds",
                "--port",
                udp.rsplit(':').next().unwrap(),
            ],
            3,
        ),
        // serve: a bad flag is 2.
        (vec!["serve", "--http", "localhost"], 2),
        (vec!["serve", "--config", "/nonexistent/muster.toml"], 2),
        // completions and man.
        (vec!["completions", "bash"], 0),
        (vec!["man"], 0),
        (vec!["--version"], 0),
        (vec!["frobnicate"], 2),
    ];
    for (args, want) in cases {
        let o = muster(&args);
        assert_eq!(
            o.status.code(),
            Some(want),
            "muster {args:?}: {}",
            text(&o.stderr)
        );
        if want != 0 {
            let e = text(&o.stderr);
            assert!(!e.trim().is_empty(), "muster {args:?} says why");
        }
    }
}
