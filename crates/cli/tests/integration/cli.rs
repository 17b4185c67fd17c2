//! Flags, help, exit codes and errors of the command line.

use std::process::{Command, Output};

use crate::common::only_faces;

fn muster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .output()
        .expect("run muster")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_documents_exit_codes_and_timing_flags() {
    let o = muster(&["query", "--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "Exit codes",
        "--timeout",
        "--retries",
        "--deadline",
        "--rate",
        "--given-port-only",
        "--format",
        "auto",
    ] {
        assert!(text.contains(needle), "help lacks {needle}:\n{text}");
    }
}

#[test]
fn unparseable_address_is_a_usage_error_naming_the_input() {
    let o = muster(&["query", "-p", "teeworlds", "[::1"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("[::1"), "{e}");
    assert_eq!(e.lines().count(), 1, "one line: {e}");
}

#[test]
fn missing_port_without_a_default_is_a_usage_error() {
    let o = muster(&["query", "-p", "gamespy1", "127.0.0.1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("127.0.0.1"));
}

#[test]
fn bad_duration_is_rejected_by_the_parser() {
    let o = muster(&[
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "soon",
        "127.0.0.1:1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("500ms"), "{}", stderr(&o));
}

#[test]
fn silent_server_times_out_with_a_one_line_error_and_exit_1() {
    // A bound socket that never answers: the query must end after its retries.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let o = muster(&[
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "100ms",
        "--retries",
        "1",
        "-f",
        "ndjson",
        &addr,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON object");
    assert_eq!(v["status"], "timeout");
    assert_eq!(v["address"], addr.as_str());
    assert!(v["error"].as_str().unwrap().contains(&addr));
    // Two attempts of the DDNet extended request (and the 0.7 token request) arrived.
    silent.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while silent.recv_from(&mut buf).is_ok() {
        n += 1;
    }
    assert!(n >= 2, "expected at least two datagrams, got {n}");
}

#[test]
fn broken_pipe_is_not_an_error() {
    use std::io::Read;
    use std::process::Stdio;
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args([
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
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("Broken pipe"), "{err}");
    assert!(
        status.code() == Some(0) || status.code() == Some(1),
        "{status:?}"
    );
}

/// `serve` flags that bind nothing but a loopback HTTP port.
fn quiet_serve(dir: &std::path::Path) -> Vec<String> {
    let mut args = vec!["serve".to_owned(), "--data-dir".to_owned()];
    args.push(dir.display().to_string());
    args.extend(only_faces(&["http"]).into_iter().map(str::to_owned));
    args
}

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("muster-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_damaged_store_stops_serve_with_exit_2_and_repair_recovers() {
    let dir = fresh_dir("damaged");
    let db = dir.join("muster.sqlite3");
    std::fs::write(&db, vec![0xA5; 64 * 1024]).unwrap();
    let args = quiet_serve(&dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = muster(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains(&db.display().to_string()), "names the file: {e}");
    assert!(e.contains("--repair"), "says how to recover: {e}");

    let mut repair = args.clone();
    repair.push("--repair");
    let o = muster(&repair);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("0 records kept"), "{out}");
    assert!(
        std::fs::read_dir(&dir).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("damaged")),
        "the damaged file is kept aside"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_daemons_cannot_share_a_data_directory() {
    use std::io::{BufRead as _, BufReader};
    let dir = fresh_dir("locked");
    let args = quiet_serve(&dir);
    let mut first = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(first.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = muster(&refs);
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&first.id().to_string()),
        "names the other PID: {e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run `muster <args>` with its stdout a pipe whose reading end is closed right after the
/// start, as in `muster … | true` once `true` has exited: its writes fail with EPIPE.
fn into_closed_pipe(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run muster");
    drop(child.stdout.take());
    child.wait_with_output().expect("wait for muster")
}

#[test]
fn no_command_panics_on_a_closed_pipe() {
    let dir = fresh_dir("epipe");
    let list = dir.join("ut2.txt");
    std::fs::write(&list, "127.0.0.1\t7777\t7787\n127.0.0.2\t7777\t7787\n").unwrap();
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let fast = ["--timeout", "50ms", "--retries", "0"];
    let cases: Vec<Vec<&str>> = vec![
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["man"],
        vec!["--help"],
        vec![
            "list",
            "-p",
            "ut2003-text",
            "-f",
            "json",
            list.to_str().unwrap(),
        ],
        vec!["list", "-p", "ut2003-text", list.to_str().unwrap()],
        [
            &["query", "-p", "teeworlds", "-f", "json"][..],
            &fast,
            &[addr.as_str()],
        ]
        .concat(),
        [&["query", "-f", "ndjson"][..], &fast, &[addr.as_str()]].concat(),
        vec![
            "serve",
            "--print-config",
            "--data-dir",
            dir.to_str().unwrap(),
        ],
    ];
    for args in cases {
        let o = into_closed_pipe(&args);
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "muster {args:?} panicked: {e}");
        assert!(!e.contains("Broken pipe"), "muster {args:?}: {e}");
        assert_eq!(o.status.code(), Some(0), "muster {args:?}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each command's help gives its own exit codes, and recommends only flags it takes.
#[test]
fn each_command_documents_its_own_exit_codes() {
    let help = |cmd: &str| {
        let o = muster(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let query = help("query");
    assert!(query.contains("0  every server answered"), "{query}");
    assert!(!query.contains("master"), "query asks no master: {query}");
    let list = help("list");
    assert!(list.contains("0  the master answered"), "{list}");
    assert!(
        !list.contains("every server"),
        "list queries no server: {list}"
    );
    assert!(!list.contains("--given-port-only"), "{list}");
    let scan = help("scan");
    assert!(
        scan.contains("0  every master and every server answered"),
        "{scan}"
    );
    // Recommended for UT2003/UT2004 GameSpy ports, so taken.
    assert!(scan.contains("--given-port-only"), "{scan}");
    let dir = fresh_dir("given");
    let file = dir.join("servers.txt");
    std::fs::write(&file, "gamespy1 127.0.0.1:1\n").unwrap();
    let o = muster(&[
        "scan",
        "--given-port-only",
        "--timeout",
        "50ms",
        "--retries",
        "0",
        "--servers",
        file.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "accepted: {}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
