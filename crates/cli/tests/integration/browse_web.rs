//! `muster browse --web`: the page mode, run as a user would without a terminal. The masters
//! and servers are the test's own on loopback (a DDNet HTTP master listing two Teeworlds
//! servers answered by Muster's responders); the test reads the printed address, fetches the
//! page and its API over plain HTTP, sets and unsets a favourite through the route and reads
//! the profile file, and checks that requests from elsewhere are refused. Every wait is
//! bounded by [`WAIT_LIMIT`] and checks what the API says, never how long it took.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use muster_testkit::process::ScratchDir;

use super::browse::{HttpMaster, state, teeworlds};
use crate::common::Proc;

const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// Starts `muster browse <args>` without a terminal and reads the address it prints:
/// (process, listener address, token).
fn start(args: &[&str]) -> (Proc, SocketAddr, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("browse")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster browse");
    let stdout = child.stdout.take().expect("stdout");
    let proc = Proc(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the address");
    let rest = line
        .trim()
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not a URL: {line:?}"));
    let (addr, query) = rest.split_once("/?token=").expect("a token in the URL");
    assert_eq!(query.len(), 32, "{line}");
    (proc, addr.parse().expect("address"), query.to_owned())
}

/// One HTTP/1.1 request: (status, head, body).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT_LIMIT)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head[9..12].parse().expect("status");
    (status, head.to_owned(), body.to_owned())
}

fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, _, body) = http(addr, "GET", path, &[]);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

fn sigterm(p: &mut Proc) -> Option<i32> {
    let ok = Command::new("kill")
        .args(["-TERM", &p.0.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok);
    let until = Instant::now() + WAIT_LIMIT;
    loop {
        if let Some(st) = p.0.try_wait().expect("wait") {
            return st.code();
        }
        assert!(Instant::now() < until, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_page_mode_serves_the_list_with_pings_and_keeps_favourites_in_the_profile() {
    let scratch = ScratchDir::new("browse-web");
    let alpha = teeworlds(state("Alpha Tee", "dm1", 16, &["ann"]));
    let bravo = teeworlds(state("Bravo Tee", "ctf2", 8, &[]));
    let entries: Vec<serde_json::Value> = [&alpha, &bravo]
        .iter()
        .map(|s| serde_json::json!({ "addresses": [format!("tw-0.6+udp://{}", s.addr)], "info": {} }))
        .collect();
    let master = HttpMaster::start(serde_json::json!({ "servers": entries }).to_string());
    let profile = scratch.path().join("profile");
    let source = format!("ddnet:http://{}/servers.json", master.addr);
    let (mut proc, addr, token) = start(&[
        "--web",
        "--listen",
        "127.0.0.1:0",
        "--master",
        &source,
        "--profile",
        profile.to_str().unwrap(),
        "--refresh",
        "200ms",
        "--timeout",
        "300ms",
        "--retries",
        "1",
        "--rate",
        "0",
    ]);
    assert!(addr.ip().is_loopback());

    // The page is muster serve's, with the ping column; the printed token becomes the
    // page's cookie.
    let cookie_name = format!("muster_browse_{}", addr.port());
    let (status, head, body) = http(addr, "GET", &format!("/?token={token}"), &[]);
    assert_eq!(status, 200);
    assert!(body.contains("data-sort=\"ping\""), "the ping column");
    let set_cookie = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie:\n{head}"));
    assert!(
        set_cookie.contains(&format!("{cookie_name}={token}")),
        "{set_cookie}"
    );
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    // Without the token, no cookie.
    let (_, head, _) = http(addr, "GET", "/?token=wrong", &[]);
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");

    // Both servers appear, answered, with a ping measured from here.
    let until = Instant::now() + WAIT_LIMIT;
    let list = loop {
        let list = json(addr, "/api/v1/servers?per_page=500&page=1");
        let servers = list["servers"].as_array().unwrap();
        let ready = servers.len() == 2
            && servers
                .iter()
                .all(|s| s["ping_ms"].is_number() && !s["name"].as_str().unwrap().is_empty());
        if ready {
            break list;
        }
        assert!(Instant::now() < until, "waited for two pings: {list}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(list["total"], 2);
    let servers = list["servers"].as_array().unwrap();
    // Most players first, as the page asks.
    assert_eq!(servers[0]["name"], "Alpha Tee", "{list}");
    assert_eq!(servers[0]["num_players"], 1);
    assert_eq!(servers[0]["max_players"], 16);
    assert_eq!(servers[0]["address"], alpha.addr.to_string());
    assert_eq!(servers[0]["favourite"], false);
    assert_eq!(servers[1]["name"], "Bravo Tee");
    let protocol = servers[0]["query_protocol"].as_str().unwrap().to_owned();
    let game = servers[0]["game"].as_str().unwrap().to_owned();
    assert_eq!(game, "ddnet");
    // The search and the details, as the page reads them.
    let found = json(addr, "/api/v1/servers?q=ANN&per_page=500&page=1");
    assert_eq!(found["total"], 1, "{found}");
    let detail = json(addr, &format!("/api/v1/servers/{}?game={game}", alpha.addr));
    assert_eq!(detail["players"][0]["name"], "ann", "{detail}");
    assert_eq!(detail["join_link"], format!("ddnet://{}", alpha.addr));
    let info = json(addr, "/api/v1/info");
    assert_eq!(info["browse"], true);
    assert_eq!(info["masters"][0]["state"], "listed", "{info}");

    let route = format!("/api/v1/favourites/{protocol}/{}", alpha.addr);
    let own_origin = format!("http://{addr}");
    let cookie = format!("{cookie_name}={token}");
    let profile_file = profile.join("profile.json");
    let id = format!("{protocol} {}", alpha.addr);
    // Refused: no token, a wrong one, another site's Origin, a foreign Host.
    for (why, headers) in [
        ("no token", vec![("Origin", own_origin.as_str())]),
        ("a wrong token", vec![("X-Muster-Token", "0123")]),
        (
            "another site",
            vec![
                ("Cookie", cookie.as_str()),
                ("Origin", "http://evil.example"),
            ],
        ),
        (
            "a foreign host",
            vec![("Cookie", cookie.as_str()), ("Host", "evil.example")],
        ),
    ] {
        let (status, _, body) = http(addr, "POST", &route, &headers);
        assert_eq!(status, 403, "{why}: {body}");
    }
    assert!(!profile_file.exists(), "nothing was saved");
    let (status, _, _) = http(addr, "GET", "/api/v1/info", &[("Host", "evil.example:80")]);
    assert_eq!(status, 403, "a rebound name cannot read the list either");

    // The page's own request: its cookie and Origin.
    let page = [("Cookie", cookie.as_str()), ("Origin", own_origin.as_str())];
    let (status, _, body) = http(addr, "POST", &route, &page);
    assert_eq!(status, 200, "{body}");
    let saved = std::fs::read_to_string(&profile_file).expect("profile saved");
    let saved: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["favourites"], serde_json::json!([id]), "{saved}");
    let list = json(addr, "/api/v1/servers?per_page=500&page=1");
    let fav = |list: &serde_json::Value, name: &str| {
        list["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()["favourite"]
            .clone()
    };
    assert_eq!(fav(&list, "Alpha Tee"), true);
    assert_eq!(fav(&list, "Bravo Tee"), false);

    // Unset, and set again through the script's header.
    let (status, _, _) = http(addr, "DELETE", &route, &page);
    assert_eq!(status, 200);
    let saved = std::fs::read_to_string(&profile_file).unwrap();
    assert!(!saved.contains(&id), "{saved}");
    let (status, _, _) = http(addr, "POST", &route, &[("X-Muster-Token", token.as_str())]);
    assert_eq!(status, 200);
    let (status, _, _) = http(
        addr,
        "POST",
        "/api/v1/favourites/teeworlds/127.0.0.1:1",
        &[("X-Muster-Token", token.as_str())],
    );
    assert_eq!(status, 404, "a server that is not listed");

    // SIGTERM ends it cleanly, the profile kept.
    assert_eq!(sigterm(&mut proc), Some(0));
    let saved = std::fs::read_to_string(&profile_file).unwrap();
    assert!(saved.contains(&id), "{saved}");
}

/// Without a terminal, page mode is the default; `--tui` there is a mistake (exit 2).
#[test]
fn without_a_terminal_the_page_is_the_default() {
    let scratch = ScratchDir::new("browse-web-default");
    let servers = scratch.path().join("servers.txt");
    std::fs::write(&servers, "teeworlds 127.0.0.1:1\n").unwrap();
    let profile = scratch.path().join("profile");
    let (mut proc, addr, _) = start(&[
        "--servers",
        servers.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
    ]);
    let list = json(addr, "/api/v1/servers");
    assert_eq!(list["total"], 1, "{list}");
    assert_eq!(sigterm(&mut proc), Some(0));

    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["browse", "--tui", "--servers", servers.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .expect("run muster browse");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a terminal"));
}
