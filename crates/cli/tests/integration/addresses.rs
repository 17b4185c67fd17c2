//! Which address each output shows: the one a player connects to (the game address), with the
//! query address beside it, and a host name as it was given.

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Proc, only_faces, run as muster, text};

fn json(args: &[&str]) -> serde_json::Value {
    let o = muster(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

/// Start `muster <args>` and read its first `count` `listening <face> <udp|tcp> <addr>` lines.
fn start(args: &[&str], count: usize) -> (Proc, Vec<(String, SocketAddr)>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster");
    let lines: Vec<String> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .take(count)
        .map(|l| l.expect("utf-8"))
        .collect();
    let faces = lines
        .iter()
        .map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            assert_eq!(parts.first(), Some(&"listening"), "{l}");
            (parts[1].to_owned(), parts[3].parse().expect("address"))
        })
        .collect();
    (Proc(child), faces)
}

/// A free loopback UDP port whose next port is free too (game port and query port).
fn free_pair() -> u16 {
    for _ in 0..100 {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 60000 && UdpSocket::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two free consecutive ports");
}

/// A UT99 server (GameSpy v1 at game port + 1, `hostport` in its reply) heartbeats to the
/// master, whose GameSpy list gives its query address only: `scan` shows the game port the
/// server reports, as the master's page and API do, with the query port beside it.
#[test]
fn a_gamespy_scan_shows_the_game_port_the_server_reports() {
    let dir = std::env::temp_dir().join(format!("muster-addr-gs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = vec!["serve", "--data-dir", dir.to_str().unwrap()];
    args.extend(only_faces(&["gamespy-udp", "gamespy-tcp"]));
    let (_serve, faces) = start(&args, 2);
    let face = |name: &str| {
        faces
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, a)| a.to_string())
            .unwrap_or_else(|| panic!("no {name} in {faces:?}"))
    };
    let (udp, tcp) = (face("gamespy-udp"), face("gamespy-tcp"));
    let game = free_pair();
    let port = game.to_string();
    let master = format!("gamespy:{udp}");
    let _ut99 = start(
        &[
            "emulate", "-p", "gamespy1", "--port", &port, "--style", "ut99", "--name", "Deck",
            "--master", &master,
        ],
        1,
    );
    let want_game = format!("127.0.0.1:{game}");
    let want_query = format!("127.0.0.1:{}", game + 1);

    // Listed once the master has checked it; the list has the query address only.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = json(&["list", "-p", "gamespy", "-g", "ut", "-f", "json", &tcp]);
        if list.as_array().is_some_and(|l| !l.is_empty()) {
            assert_eq!(list[0]["query_address"], want_query.as_str(), "{list}");
            // The list was asked for game `ut`: its entries carry that key and its name,
            // and the game filter matches by it.
            assert_eq!(list[0]["game"], "ut", "{list}");
            assert_eq!(list[0]["game_name"], "Unreal Tournament", "{list}");
            for (filter, want) in [("game=ut", 1), ("game=ddnet", 0)] {
                let filtered = json(&[
                    "list", "-p", "gamespy", "-g", "ut", "--filter", filter, "-f", "json", &tcp,
                ]);
                assert_eq!(filtered.as_array().map(Vec::len), Some(want), "{filter}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "never listed");
        std::thread::sleep(Duration::from_millis(200));
    }

    let scan_master = format!("gamespy:{tcp}");
    let scan = json(&[
        "scan",
        "--master",
        &scan_master,
        "-g",
        "ut",
        "-f",
        "json",
        "--timeout",
        "500ms",
    ]);
    assert_eq!(scan.as_array().map(Vec::len), Some(1), "{scan}");
    assert_eq!(scan[0]["status"], "ok", "{scan}");
    assert_eq!(scan[0]["name"], "Deck", "{scan}");
    assert_eq!(scan[0]["address"], want_game.as_str(), "{scan}");
    assert_eq!(scan[0]["query_address"], want_query.as_str(), "{scan}");

    // The table: the game address first, the query address beside it.
    let o = muster(&[
        "scan",
        "--master",
        &scan_master,
        "-g",
        "ut",
        "--timeout",
        "500ms",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let table = text(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.contains("Deck"))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..2],
        [want_game.as_str(), want_query.as_str()],
        "{table}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--given-port-only` takes the port given as the query port, for `query` and for `scan`'s
/// `--servers` file (which its help recommends for UT2003/UT2004): the game port is read from
/// the answer.
#[test]
fn given_query_ports_show_the_game_port_from_the_answer() {
    let game = free_pair();
    let port = game.to_string();
    let _ut99 = start(
        &[
            "emulate", "-p", "gamespy1", "--port", &port, "--style", "ut99", "--name", "Given",
        ],
        1,
    );
    let query = format!("127.0.0.1:{}", game + 1);
    let want_game = format!("127.0.0.1:{game}");
    let fast = ["--timeout", "500ms", "-f", "json"];

    let q = json(
        &[
            &["query", "-p", "gamespy1", "--given-port-only", &query][..],
            &fast,
        ]
        .concat(),
    );
    assert_eq!(q[0]["status"], "ok", "{q}");
    assert_eq!(q[0]["address"], want_game.as_str(), "{q}");
    assert_eq!(q[0]["query_address"], query.as_str(), "{q}");

    let dir = std::env::temp_dir().join(format!("muster-addr-given-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("servers.txt");
    std::fs::write(&file, format!("gamespy1 {query}\n")).unwrap();
    let s = json(
        &[
            &[
                "scan",
                "--given-port-only",
                "--servers",
                file.to_str().unwrap(),
            ][..],
            &fast,
        ]
        .concat(),
    );
    assert_eq!(s[0]["status"], "ok", "{s}");
    assert_eq!(s[0]["address"], want_game.as_str(), "{s}");
    assert_eq!(s[0]["query_address"], query.as_str(), "{s}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `query` probes every protocol without `-p`, as `scan` and `watch` do, and a server given by
/// host name keeps its name, with the address it resolved to beside it.
#[test]
fn query_defaults_to_auto_and_keeps_the_host_name_given() {
    let port = free_pair();
    let p = port.to_string();
    let _tw = start(
        &[
            "emulate",
            "-p",
            "teeworlds",
            "--port",
            &p,
            "--name",
            "Named",
        ],
        1,
    );
    let given = format!("localhost:{port}");
    let want = format!("127.0.0.1:{port}");
    let v = json(&["query", "--timeout", "500ms", "-f", "json", &given]);
    assert_eq!(v[0]["status"], "ok", "{v}");
    assert_eq!(v[0]["protocol"], "teeworlds", "{v}");
    assert_eq!(v[0]["name"], "Named", "{v}");
    assert_eq!(v[0]["address"], given.as_str(), "{v}");
    assert_eq!(v[0]["resolved_address"], want.as_str(), "{v}");
    assert_eq!(v[0]["query_address"], want.as_str(), "{v}");

    // An IP address needs no resolving: nothing beside it.
    let v = json(&[
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "500ms",
        "-f",
        "json",
        &want,
    ]);
    assert_eq!(v[0]["address"], want.as_str(), "{v}");
    assert!(v[0].get("resolved_address").is_none(), "{v}");
}

/// A failure's message is printed whole in a table, however long, also into a pipe.
#[test]
fn table_errors_are_not_cut() {
    // A closed UDP port: the query ends with ICMP port unreachable.
    let closed = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let addr = closed.to_string();
    let o = muster(&[
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "300ms",
        "--retries",
        "0",
        &addr,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let table = text(&o.stdout);
    let row = table.lines().nth(1).unwrap_or_else(|| panic!("{table}"));
    assert!(!row.contains('…'), "cut: {row}");
    let json = json_failure(&addr);
    assert!(row.ends_with(&json), "the whole error {json:?} in {row:?}");
}

/// The error of a failed query as JSON gives it.
fn json_failure(addr: &str) -> String {
    let o = muster(&[
        "query",
        "-p",
        "teeworlds",
        "--timeout",
        "300ms",
        "--retries",
        "0",
        "-f",
        "json",
        addr,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = v[0]["error"].as_str().unwrap().to_owned();
    assert!(e.len() > 40, "a long message: {e}");
    e
}
