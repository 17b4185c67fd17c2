//! End to end with the real binary: `muster serve` on free loopback ports, `muster emulate`
//! servers registering through each face, then found by `muster list`, the HTTP API and
//! `muster scan`; and the registry surviving `kill -9`.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{LOOPBACK, faces_at, muster_json, only_faces, start};

fn muster() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster"))
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect http");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// The listed servers' addresses, sorted.
fn addresses(http: SocketAddr) -> Vec<String> {
    let body = http_get(http, "/api/v1/servers?per_page=100");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    let mut a: Vec<String> = v["servers"]
        .as_array()
        .map(|a| a.iter().map(|s| s["address"].to_string()).collect())
        .unwrap_or_default();
    a.sort();
    a
}

/// Poll the HTTP API until `names` are all listed (bounded: 20 s).
fn wait_listed(http: SocketAddr, names: &[&str]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = http_get(http, "/api/v1/servers?per_page=100");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
        let listed: Vec<String> = v["servers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if names.iter().all(|n| listed.iter().any(|l| l == n)) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "not all of {names:?} listed: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Run `muster list -p <protocol> <master>` until it lists `want` (bounded: 20 s); `what`
/// names the server for the failure.
fn wait_in_list(protocol: &str, master: &str, want: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = muster()
            .args([
                "list",
                "-p",
                protocol,
                "-f",
                "json",
                "--timeout",
                "300ms",
                master,
            ])
            .output()
            .unwrap();
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if list
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["address"] == want)
        {
            return;
        }
        assert!(Instant::now() < deadline, "{what} not listed: {list}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("muster-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn emulated_servers_register_with_every_face_and_are_listed() {
    let data = temp_dir("faces");
    let data_s = data.to_string_lossy().to_string();
    let mut args = vec!["serve", "--data-dir", &data_s];
    args.extend(only_faces(&[
        "gameagent",
        "gamespy-udp",
        "gamespy-tcp",
        "teeworlds07",
        "teeworlds06",
        "http",
        "mgmt",
    ]));
    let (_serve, faces) = start(&args, 8);
    let http = faces["http"];
    let ga = format!("gameagent:{}", faces["gameagent"]);
    let gs = format!("gamespy:{}", faces["gamespy-udp"]);
    let tw07 = format!("teeworlds07:{}", faces["teeworlds07"]);
    let ddnet = format!("ddnet:http://{http}/ddnet/15/register");
    let mgmt = format!("mgmt:{}", faces["mgmt"]);
    let free = |n: u16| -> String {
        // Two free consecutive ports for a game port and its query port.
        for _ in 0..100 {
            let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let p = a.local_addr().unwrap().port();
            if p >= 60000 {
                continue;
            }
            if n == 0 {
                return p.to_string();
            }
            if std::net::UdpSocket::bind(("127.0.0.1", p + n)).is_ok() {
                return p.to_string();
            }
        }
        panic!("no free ports");
    };
    let ut99_port = free(1);
    let _ut99 = start(
        &[
            "emulate",
            "-p",
            "gamespy1",
            "--port",
            &ut99_port,
            "--style",
            "ut99",
            "--name",
            "UT99 Jérôme",
            "--players",
            "2",
            "--master",
            &gs,
        ],
        1,
    );
    // A UT2003 server: GameSpy v1 at game port + 10, where UT2003 moved it (seed 002),
    // heartbeating to the GameSpy face from there.
    let ut2_port = free(10);
    let (_ut2, ut2_faces) = start(
        &[
            "emulate",
            "-p",
            "gamespy1",
            "--port",
            &ut2_port,
            "--style",
            "ut2003",
            "--name",
            "UT2003 Ærø",
            "--players",
            "3",
            "--master",
            &gs,
        ],
        1,
    );
    let sam_port = free(1);
    let _sam = start(
        &[
            "emulate",
            "-p",
            "gamespy1",
            "--port",
            &sam_port,
            "--style",
            "serioussam",
            "--name",
            "Sam Legacy",
            "--master",
            &gs,
        ],
        1,
    );
    let tw_port = free(0);
    let _tw = start(
        &[
            "emulate",
            "-p",
            "teeworlds",
            "--port",
            &tw_port,
            "--name",
            "Tee 0.7 Ünï",
            "--players",
            "3",
            "--master",
            &tw07,
        ],
        1,
    );
    let dd_port = free(0);
    let _dd = start(
        &[
            "emulate",
            "-p",
            "teeworlds",
            "--port",
            &dd_port,
            "--name",
            "DDNet HTTP",
            "--players",
            "5",
            "--master",
            &ddnet,
        ],
        1,
    );
    let sam_ga_port = free(1);
    let _sam_ga = start(
        &[
            "emulate",
            "-p",
            "gameagent",
            "--port",
            &sam_ga_port,
            "--name",
            "Sam GameAgent",
            "--players",
            "1",
            "--master",
            &ga,
        ],
        1,
    );
    let bm_port = free(1);
    let _bm = start(
        &[
            "emulate",
            "-p",
            "unreal2",
            "--port",
            &bm_port,
            "--name",
            "Bomber",
            "--players",
            "2",
            "--max-players",
            "4",
            "--master",
            &mgmt,
        ],
        1,
    );

    // The 0.7 and GameAgent registrations carry no name: the poller fills it in.
    let v = wait_listed(
        http,
        &[
            "UT99 Jérôme",
            "UT2003 Ærø",
            "Sam Legacy",
            "DDNet HTTP",
            "Bomber",
            "Tee 0.7 Ünï",
            "Sam GameAgent",
        ],
    );
    let by_name = |n: &str| {
        v["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("UT99 Jérôme")["game"], "ut");
    assert_eq!(by_name("UT99 Jérôme")["num_players"], 2);
    assert_eq!(by_name("UT2003 Ærø")["game"], "ut2");
    assert_eq!(by_name("UT2003 Ærø")["num_players"], 3);
    assert_eq!(by_name("Sam Legacy")["game"], "serioussamse");
    assert_eq!(by_name("Bomber")["game"], "bomberman");
    assert_eq!(by_name("Tee 0.7 Ünï")["num_players"], 3);
    assert_eq!(by_name("Sam GameAgent")["num_players"], 1);

    // The GameAgent face lists its verified server (by game port) in its `e` list.
    let want = format!("127.0.0.1:{sam_ga_port}");
    let ga_face = faces["gameagent"].to_string();
    wait_in_list("gameagent", &ga_face, &want, "GameAgent server");

    // The GameSpy face lists the UT99 server for `ut`.
    let gamespy_tcp = faces["gamespy-tcp"].to_string();
    let list = muster_json(&["list", "-p", "gamespy", "-g", "ut", &gamespy_tcp]);
    let want = format!("127.0.0.1:{}", ut99_port.parse::<u16>().unwrap() + 1);
    assert_eq!(list[0]["address"], want.as_str(), "{list}");

    // One registry behind every face: the UT2003 server that heartbeated by GameSpy is in the
    // GameSpy list for `ut2` (its query address) and in the UT2003 text list (IP, game port,
    // GameSpy port), read by `muster list` as UT2003 clients read it.
    let list = muster_json(&["list", "-p", "gamespy", "-g", "ut2", &gamespy_tcp]);
    let ut2_game: u16 = ut2_port.parse().unwrap();
    let want = format!("127.0.0.1:{}", ut2_game + 10);
    assert_eq!(
        ut2_faces["gamespy1"].to_string(),
        want,
        "emulate listens at + 10"
    );
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["address"], want.as_str(), "{list}");
    let text = http_get(http, "/serverlist/ut2.txt");
    assert_eq!(text, format!("127.0.0.1\t{ut2_game}\t{}\n", ut2_game + 10));
    let list = muster_json(&[
        "list",
        "-p",
        "ut2003-text",
        &format!("http://{http}/serverlist/ut2.txt"),
    ]);
    assert_eq!(
        list[0]["address"],
        format!("127.0.0.1:{ut2_game}").as_str(),
        "{list}"
    );

    // The 0.7 face lists the 0.7-registered server; the 0.6 face the HTTP-registered one.
    // (teeworlds servers choose a master after 3 s, then pass the firewall check).
    let want = format!("127.0.0.1:{tw_port}");
    let tw07 = faces["teeworlds07"].to_string();
    wait_in_list("teeworlds", &tw07, &want, "0.7 server");

    // servers.json carries the DDNet server; a scan of it queries the server itself.
    let scan = muster_json(&[
        "scan",
        "--master",
        &format!("ddnet:http://{http}/ddnet/15/servers.json"),
        "--timeout",
        "500ms",
    ]);
    let dd = scan
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "DDNet HTTP")
        .unwrap_or_else(|| panic!("DDNet server not scanned: {scan}"));
    assert_eq!(dd["num_players"], 5);
    assert_eq!(dd["players"].as_array().unwrap().len(), 5);

    // The management server lists its registration.
    let list = muster_json(&["list", "-p", "mgmt", &faces["mgmt"].to_string()]);
    assert_eq!(list[0]["name"], "Bomber");
    assert_eq!(list[0]["num_players"], 2);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn registry_survives_kill_9() {
    let data = temp_dir("kill9");
    let data_s = data.to_string_lossy().to_string();
    // GameSpy on a fresh port each time, HTTP at `http`.
    fn args<'a>(data: &'a str, http: &'a str) -> Vec<&'a str> {
        let mut a = vec!["serve", "--data-dir", data];
        a.extend(faces_at(&[("gamespy-udp", LOOPBACK), ("http", http)]));
        a
    }
    let (mut serve, faces) = start(&args(&data_s, LOOPBACK), 2);
    let gs = format!("gamespy:{}", faces["gamespy-udp"]);
    let mut emulators = Vec::new();
    let mut names = Vec::new();
    for i in 0..3 {
        let name = format!("Restart {i}");
        // The emulated server binds its game port and the query port after it: both free.
        let port = {
            let pair = muster_testkit::net::udp_consecutive(2);
            pair[0].local_addr().unwrap().port().to_string()
        };
        emulators.push(start(
            &[
                "emulate", "-p", "gamespy1", "--port", &port, "--style", "ut99", "--name", &name,
                "--master", &gs,
            ],
            1,
        ));
        names.push(name);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_listed(faces["http"], &refs);
    let before = addresses(faces["http"]);
    assert_eq!(before.len(), 3);
    drop(emulators);
    // SIGKILL: no graceful flush. Registrations are written before they are acknowledged;
    // poll data (names) is batched every second and may be lost, which is what this checks
    // is the only loss.
    serve.0.kill().unwrap();
    serve.0.wait().unwrap();
    let http = faces["http"].to_string();
    let (_serve2, faces2) = start(&args(&data_s, &http), 2);
    assert_eq!(
        addresses(faces2["http"]),
        before,
        "the same list after kill -9"
    );
    let _ = std::fs::remove_dir_all(&data);
}

/// DDNet's goodbye: `muster emulate` sends `Action: delete` for both streams on SIGTERM and
/// `muster serve` drops the server at once, from `servers.json` and the API alike (its DDNet
/// registrations would otherwise stay until they expire).
#[test]
fn sigterm_deletes_the_ddnet_registration_and_serve_drops_it_at_once() {
    use muster_testkit::process::{ChildGuard, ScratchDir};
    let data = temp_dir("goodbye");
    let data_s = data.to_string_lossy().to_string();
    let mut args = vec!["serve", "--data-dir", &data_s];
    args.extend(only_faces(&["http"]));
    let (_serve, faces) = start(&args, 1);
    let http = faces["http"];
    let scratch = ScratchDir::new("e2e-goodbye");
    let port = muster_testkit::free_udp_port().to_string();
    let master = format!("ddnet:http://{http}/ddnet/15/register");
    let mut emulated = ChildGuard::spawn(
        "muster emulate",
        std::path::Path::new(env!("CARGO_BIN_EXE_muster")),
        &[
            "emulate",
            "--protocol",
            "teeworlds",
            "--port",
            &port,
            "--name",
            "Goodbye",
            "--master",
            &master,
        ],
        scratch.path(),
        &[],
        scratch.path().join("emulate.log"),
    )
    .expect("start muster emulate");
    wait_listed(http, &["Goodbye"]);
    // Both streams are in servers.json once both registrations succeeded.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !http_get(http, "/ddnet/15/servers.json")
        .contains(&format!("tw-0.7+udp://127.0.0.1:{port}"))
    {
        assert!(Instant::now() < deadline, "0.7 stream never listed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = emulated.stop().expect("exit status");
    assert!(status.success(), "{status}\n{}", emulated.log());
    // No waiting: the deletes were answered before the emulator exited.
    assert!(addresses(http).is_empty(), "{:?}", addresses(http));
    let doc = http_get(http, "/ddnet/15/servers.json");
    assert!(!doc.contains(&format!(":{port}\"")), "{doc}");
    let _ = std::fs::remove_dir_all(&data);
}
