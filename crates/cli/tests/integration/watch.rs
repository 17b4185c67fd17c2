//! `muster watch` against fake game servers on loopback whose players, map and name the test
//! changes between polls, through the real binary: every event kind on stdout, `--exec`
//! deliveries, webhook deliveries (with a failure retried), masters listed again at each
//! interval, and exit code 0 on SIGTERM.
//!
//! The fake servers answer with Muster's own responders from a state the test edits. After
//! each change the test waits (bounded by [`WAIT_LIMIT`]) for the events it expects and
//! requires that nothing else came; it never asserts how long anything took.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use muster_proto::gameagent::respond::{GameAgentResponder, ResponderConfig};
use muster_proto::respond::{PlayerState, Responder, ServerState};
use muster_proto::teeworlds::{ResponderConfig as TeeworldsConfig, TeeworldsResponder};
use muster_proto::unreal2::respond::{Unreal2Responder, Unreal2Settings};
use muster_testkit::process::ScratchDir;
use serde_json::Value;

/// The longest the test waits for anything (events, deliveries, the exit); a run that takes
/// longer has hung.
pub(super) const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// Polling fast enough for a test. Every round starts a fresh engine, so each attempt waits
/// the whole `--timeout`: a silent server is down after three attempts (0.9 s), and a busy
/// machine would have to stall that long to fake a `server_down`.
pub(super) const FAST: [&str; 8] = [
    "--interval",
    "150ms",
    "--timeout",
    "300ms",
    "--retries",
    "2",
    "--rate",
    "0",
];

/// A fake game server: a thread answering on a loopback UDP socket with a real responder,
/// from a state the test may change or silence at any time. Stopped on drop.
pub(super) struct LiveServer {
    pub(super) addr: SocketAddr,
    state: Arc<Mutex<ServerState>>,
    answering: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LiveServer {
    fn start(mut responder: Box<dyn Responder + Send>, state: ServerState) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind fake server");
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .expect("read timeout");
        let addr = socket.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(state));
        let answering = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, on, halt) = (state.clone(), answering.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut replies = Vec::new();
            while !halt.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                if !on.load(Ordering::Relaxed) {
                    continue;
                }
                let now = Instant::now();
                let snapshot = st.lock().unwrap().clone();
                replies.clear();
                responder.handle_datagram(now, from, &buf[..n], &snapshot, &mut replies);
                for r in &replies {
                    let _ = socket.send_to(&r.bytes, r.to);
                }
            }
        });
        Self {
            addr,
            state,
            answering,
            stop,
            thread: Some(thread),
        }
    }

    pub(super) fn change(&self, f: impl FnOnce(&mut ServerState)) {
        f(&mut self.state.lock().unwrap());
    }

    pub(super) fn answer(&self, on: bool) {
        self.answering.store(on, Ordering::Relaxed);
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(super) fn player(name: &str) -> PlayerState {
    PlayerState {
        name: name.to_owned(),
        ..PlayerState::default()
    }
}

pub(super) fn state(name: &str, map: &str, max: u32, players: &[&str]) -> ServerState {
    ServerState {
        name: name.to_owned(),
        map: map.to_owned(),
        max_players: max,
        players: players.iter().map(|n| player(n)).collect(),
        ..ServerState::default()
    }
}

pub(super) fn gameagent(s: ServerState) -> LiveServer {
    LiveServer::start(
        Box::new(GameAgentResponder::new(ResponderConfig::default())),
        s,
    )
}

fn unreal2(s: ServerState) -> LiveServer {
    LiveServer::start(
        Box::new(Unreal2Responder::new(Unreal2Settings::default())),
        s,
    )
}

fn teeworlds(s: ServerState) -> LiveServer {
    LiveServer::start(
        Box::new(TeeworldsResponder::new(TeeworldsConfig::default(), [7; 16])),
        s,
    )
}

/// A running `muster watch`; its stdout lines arrive on a channel. Killed on drop.
pub(super) struct Watch {
    child: Child,
    lines: Receiver<String>,
    /// Every line seen, in order.
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl Watch {
    /// Start `muster watch <args>` with stdin closed: the child, its stdout lines on a channel as
    /// they come, and its stderr gathered as it comes.
    pub(super) fn spawn(args: &[&str]) -> (Child, Receiver<String>, Arc<Mutex<String>>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
            .arg("watch")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start muster watch");
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut pipe, log) = (child.stderr.take().expect("stderr"), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        (child, lines, stderr)
    }

    fn start(args: &[&str]) -> Self {
        let (child, lines, stderr) = Self::spawn(args);
        Self {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait for the lines `want` says (as `event` or `event:player`, any order), and require
    /// that no other line came meanwhile. The events, parsed, in the order they came.
    fn expect(&mut self, want: &[&str]) -> Vec<Value> {
        let mut wanted: BTreeMap<String, usize> = BTreeMap::new();
        for w in want {
            *wanted.entry((*w).to_owned()).or_default() += 1;
        }
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        let mut events = Vec::new();
        let deadline = Instant::now() + WAIT_LIMIT;
        while got != wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "waited for {want:?}, got {got:?}\nstdout so far:\n{}\nstderr:\n{}",
                    self.seen.join("\n"),
                    self.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "muster watch ended early; got {got:?}\nstderr:\n{}",
                    self.stderr()
                ),
            };
            self.seen.push(line.clone());
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            let short = match v["player"].as_str() {
                Some(p) => format!("{}:{p}", v["event"].as_str().unwrap_or("")),
                None => v["event"].as_str().unwrap_or("").to_owned(),
            };
            *got.entry(short.clone()).or_default() += 1;
            assert!(
                got.get(&short) <= wanted.get(&short),
                "unexpected {short} while waiting for {want:?}: {line}"
            );
            events.push(v);
        }
        events
    }

    /// SIGTERM; the exit status, and every stdout line that came after the last `expect`.
    fn terminate(mut self) -> (ExitStatus, Vec<String>) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let deadline = Instant::now() + WAIT_LIMIT;
        let exit = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let rest = self.lines.try_iter().collect();
        (exit, rest)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `ready()` holds (bounded by [`WAIT_LIMIT`]); `what` names it for the failure.
pub(super) fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while !ready() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request the webhook received.
#[derive(Debug, Clone)]
struct Hook {
    content_type: String,
    body: String,
    answered: u16,
}

/// A loopback HTTP server that answers its first request with 500 and every later one with
/// 200, recording each.
struct Webhook {
    url: String,
    requests: Arc<Mutex<Vec<Hook>>>,
}

impl Webhook {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind webhook");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some((content_type, body)) = read_request(&mut stream) else {
                    continue;
                };
                let mut log = log.lock().unwrap();
                let answered = if log.is_empty() { 500 } else { 200 };
                log.push(Hook {
                    content_type,
                    body,
                    answered,
                });
                drop(log);
                let reason = if answered == 200 { "OK" } else { "Oops" };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {answered} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Self { url, requests }
    }

    fn requests(&self) -> Vec<Hook> {
        self.requests.lock().unwrap().clone()
    }
}

/// The Content-Type and body of one HTTP/1.1 request.
fn read_request(stream: &mut std::net::TcpStream) -> Option<(String, String)> {
    let (_, content_type, body) = read_http_request(stream)?;
    Some((content_type, String::from_utf8(body).ok()?))
}

/// One HTTP/1.1 request: its request line, Content-Type and body.
pub(super) fn read_http_request(
    stream: &mut std::net::TcpStream,
) -> Option<(String, String, Vec<u8>)> {
    stream.set_read_timeout(Some(WAIT_LIMIT)).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let mut content_type = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-type" => content_type = v.trim().to_owned(),
                "content-length" => length = v.trim().parse().ok()?,
                _ => {}
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some((first, content_type, body))
}

/// One gameagent server driven through every event kind, with `--exec` and `--webhook`.
#[test]
fn every_event_kind_reaches_stdout_exec_and_webhook() {
    let scratch = ScratchDir::new("watch-events");
    let exec_log = scratch.path().join("exec.log");
    // One write per event: lines of parallel commands do not interleave.
    let exec = format!(
        "printf '%s|%s|%s\\n' \"$MUSTER_EVENT\" \"$MUSTER_ADDRESS\" \"$(cat)\" >> '{}'",
        exec_log.display()
    );
    let hook = Webhook::start();
    // Bob wears Serious Sam colour codes; he is a friend all the same.
    let server = gameagent(state("Alpha", "Map1", 2, &["^cff0000Bob", "Carl"]));
    let address = server.addr.to_string();
    let mut args = vec![&address[..], "-p", "gameagent", "--given-port-only"];
    args.extend(["--friend", "BOB", "--friend", "nobody", "-f", "ndjson"]);
    args.extend(["--exec", &exec, "--webhook", &hook.url]);
    args.extend(FAST);
    let mut watch = Watch::start(&args);

    // Full at the first answer: no server_full; Carl was there: no player_joined.
    let first = watch.expect(&["server_up", "friend_online:Bob"]);
    assert_eq!(first[0]["address"], address.as_str());
    assert_eq!(first[0]["name"], "Alpha");
    assert_eq!(first[0]["map"], "Map1");
    assert!(
        first[0]["time"].as_str().unwrap().ends_with('Z'),
        "{}",
        first[0]
    );

    server.change(|s| s.players.retain(|p| p.name != "Carl"));
    watch.expect(&["player_left:Carl", "slot_free"]);

    server.change(|s| s.players.push(player("Dave")));
    watch.expect(&["player_joined:Dave", "server_full"]);

    server.change(|s| s.map = "Map2".into());
    let map = watch.expect(&["map_changed"]);
    assert_eq!(map[0]["map"], "Map2");
    assert_eq!(map[0]["previous"], "Map1");

    server.change(|s| s.name = "Beta".into());
    let name = watch.expect(&["name_changed"]);
    assert_eq!(name[0]["name"], "Beta");
    assert_eq!(name[0]["previous"], "Alpha");

    server.change(|s| s.players.retain(|p| p.name != "^cff0000Bob"));
    watch.expect(&["player_left:Bob", "friend_offline:Bob", "slot_free"]);

    server.answer(false);
    let down = watch.expect(&["server_down"]);
    assert!(down[0]["error"].as_str().is_some(), "{}", down[0]);

    // Back, with Bob: a first answer again.
    server.change(|s| s.players.push(player("bob")));
    server.answer(true);
    watch.expect(&["server_up", "friend_online:bob"]);

    let events: Vec<Value> = watch
        .seen
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 14);
    for e in &events {
        assert_eq!(e["address"], address.as_str(), "{e}");
    }

    // Every event ran the command once, with its JSON on stdin and the environment set.
    wait_for("one command per event", || {
        std::fs::read_to_string(&exec_log).is_ok_and(|t| t.lines().count() >= events.len())
    });
    let mut ran: Vec<(String, String, Value)> = std::fs::read_to_string(&exec_log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut parts = l.splitn(3, '|');
            let kind = parts.next().unwrap().to_owned();
            let addr = parts.next().unwrap().to_owned();
            let json: Value = serde_json::from_str(parts.next().unwrap()).unwrap();
            (kind, addr, json)
        })
        .collect();
    let mut expected: Vec<(String, String, Value)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_owned(),
                address.clone(),
                e.clone(),
            )
        })
        .collect();
    // Up to four run at once: compare without order.
    let key = |x: &(String, String, Value)| format!("{}|{}|{}", x.0, x.1, x.2);
    ran.sort_by_key(key);
    expected.sort_by_key(key);
    assert_eq!(ran, expected);

    // The webhook got every event in order; the first attempt failed and was retried.
    wait_for("every event posted", || {
        hook.requests().iter().filter(|h| h.answered == 200).count() >= events.len()
    });
    let requests = hook.requests();
    assert_eq!(requests.len(), events.len() + 1, "{requests:?}");
    assert_eq!(requests[0].answered, 500);
    assert_eq!(requests[0].body, requests[1].body, "the same event again");
    let posted: Vec<Value> = requests[1..]
        .iter()
        .map(|h| {
            assert_eq!(h.content_type, "application/json");
            serde_json::from_str(&h.body).unwrap()
        })
        .collect();
    assert_eq!(posted, events);

    let (status, rest) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(rest.is_empty(), "no events after the last change: {rest:?}");
}

/// Unreal 2 numbers its players: a rename is no event. Duplicate names count; UT colour
/// codes are not part of a friend's name; text output is one readable line per event.
#[test]
fn renames_duplicates_and_colour_codes_on_unreal2_in_text() {
    let server = unreal2(state("UT", "DM-Rankin", 8, &["Ann", "Ben"]));
    let address = server.addr.to_string();
    let mut args = vec![&address[..], "-p", "unreal2", "--given-port-only"];
    args.extend(["--friend", "cleo", "-f", "text"]);
    args.extend(FAST);
    let watch = Watch::start(&args);
    let next = |want: &str| -> String {
        let deadline = Instant::now() + WAIT_LIMIT;
        let line = watch
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no line for {want}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.get(1), Some(&&address[..]), "{line}");
        assert_eq!(fields.get(2), Some(&want), "{line}");
        line
    };
    let up = next("server_up");
    assert!(up.ends_with("\"UT\" on DM-Rankin, 2/8 players"), "{up}");

    // Ann keeps her player number: renamed, not gone.
    server.change(|s| s.players[0].name = "Anna".into());
    // A second Ben, then Cleo in red (ESC R G B before the name).
    server.change(|s| {
        s.players.push(player("Ben"));
        s.players.push(player("\u{1b}\u{ff}\u{1}\u{1}Cleo"));
    });
    let lines = [
        next("player_joined"),
        next("player_joined"),
        next("friend_online"),
    ];
    assert!(lines[0].ends_with("player_joined   Ben"), "{lines:?}");
    assert!(lines[1].ends_with("player_joined   Cleo"), "{lines:?}");
    assert!(lines[2].ends_with("friend_online   Cleo"), "{lines:?}");

    // One of the two Bens leaves.
    server.change(|s| {
        let i = s.players.iter().position(|p| p.name == "Ben").unwrap();
        s.players.remove(i);
    });
    assert!(next("player_left").ends_with("player_left     Ben"));
    server.change(|s| s.map = "DM-Antalus".into());
    assert!(next("map_changed").ends_with("DM-Rankin -> DM-Antalus"));

    let (status, rest) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(rest.is_empty(), "nothing else: {rest:?}");
}

/// Servers from a master (a DDNet servers.json file, listed again at every interval) and from
/// a servers file, each reported under its address as given or listed; a filter.
#[test]
fn masters_are_listed_again_and_files_keep_their_addresses() {
    let scratch = ScratchDir::new("watch-master");
    let listed = teeworlds(state("Listed", "dm1", 16, &["Zoe"]));
    let later = teeworlds(state("Later", "dm1", 16, &[]));
    let json = scratch.path().join("servers.json");
    let write_list = |servers: &[&LiveServer]| {
        let entries: Vec<Value> = servers
            .iter()
            .map(|s| serde_json::json!({ "addresses": [format!("tw-0.6+udp://{}", s.addr)], "info": {} }))
            .collect();
        let doc = serde_json::json!({ "servers": entries });
        // Written whole, then renamed: a poll never reads half a file.
        let tmp = scratch.path().join("servers.json.tmp");
        std::fs::write(&tmp, doc.to_string()).unwrap();
        std::fs::rename(&tmp, &json).unwrap();
    };
    write_list(&[&listed]);
    // The file names a game address; gameagent answers at game port + 1.
    let filed = gameagent(state("Filed", "Map1", 16, &[]));
    let game = format!("127.0.0.1:{}", filed.addr.port() - 1);
    let servers = scratch.path().join("servers.txt");
    std::fs::write(&servers, format!("# watched\ngameagent {game}\n")).unwrap();
    // Filtered out: its events show only once its map matches.
    let hidden = teeworlds(state("Hidden", "other", 16, &[]));
    let hidden_addr = hidden.addr.to_string();

    let master = format!("ddnet:{}", json.display());
    let servers_arg = servers.display().to_string();
    let mut args = vec![&hidden_addr[..], "-p", "teeworlds"];
    args.extend(["--master", &master, "--servers", &servers_arg]);
    args.extend(["--friend", "zoe", "--filter", "map~m", "-f", "ndjson"]);
    args.extend(FAST);
    let mut watch = Watch::start(&args);

    let first = watch.expect(&["server_up", "server_up", "friend_online:Zoe"]);
    let by_name = |events: &[Value], name: &str| -> Value {
        events
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no event of {name}: {events:?}"))
            .clone()
    };
    assert_eq!(
        by_name(&first, "Listed")["address"],
        listed.addr.to_string()
    );
    assert_eq!(by_name(&first, "Filed")["address"], game.as_str());

    // The master lists a second server: it is watched from the next interval on.
    write_list(&[&listed, &later]);
    let up = watch.expect(&["server_up"]);
    assert_eq!(up[0]["address"], later.addr.to_string());
    // The first is no longer listed: its friend is gone with it, and no server_down.
    write_list(&[&later]);
    let off = watch.expect(&["friend_offline:Zoe"]);
    assert_eq!(off[0]["address"], listed.addr.to_string());

    // The hidden server now matches the filter: the change that made it match shows.
    hidden.change(|s| s.map = "dm2".into());
    let shown = watch.expect(&["map_changed"]);
    assert_eq!(shown[0]["address"], hidden_addr.as_str());
    assert_eq!(shown[0]["previous"], "other");

    // Quiet by default: reading the master's list every interval is no news on stderr.
    let log = watch.stderr();
    assert!(
        !log.contains("for its list") && !log.contains(" listed "),
        "the master's list is read quietly:\n{log}"
    );

    let (status, rest) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(rest.is_empty(), "nothing else: {rest:?}");
}

/// `muster watch --help` succeeds and names each of `needles`.
pub(super) fn assert_help_names(needles: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["watch", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in needles {
        assert!(text.contains(needle), "help lacks {needle}:\n{text}");
    }
}

#[test]
fn help_explains_the_flags_and_lists_every_event_kind() {
    assert_help_names(&[
        "--interval",
        "--friend",
        "--exec",
        "--webhook",
        "--master",
        "--servers",
        "--filter",
        "--given-port-only",
        "--timeout",
        "--retries",
        "--rate",
        "MUSTER_EVENT",
        "MUSTER_ADDRESS",
        "server_up",
        "server_down",
        "player_joined",
        "player_left",
        "map_changed",
        "name_changed",
        "server_full",
        "slot_free",
        "friend_online",
        "friend_offline",
    ]);
}

#[test]
fn nothing_to_watch_and_gamespy_masters_are_usage_errors() {
    for args in [
        vec!["watch"],
        vec!["watch", "--master", "gamespy:127.0.0.1:28900"],
        vec!["watch", "--interval", "0s", "127.0.0.1:1"],
        vec!["watch", "--webhook", "ftp://127.0.0.1/", "127.0.0.1:1"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(!o.stderr.is_empty(), "{args:?} says why");
    }
}

/// The README's example: `--friend '~nameless'` finds the quick start's `nameless tee`.
#[test]
fn a_friend_given_with_a_tilde_matches_part_of_a_name() {
    let server = teeworlds(state("Quick", "dm1", 16, &["nameless tee"]));
    let address = server.addr.to_string();
    let mut args = vec![&address[..], "-p", "teeworlds", "--given-port-only"];
    args.extend([
        "--friend",
        "~NAMELESS",
        "--friend",
        "nameless",
        "-f",
        "ndjson",
    ]);
    args.extend(FAST);
    let mut watch = Watch::start(&args);
    watch.expect(&["server_up", "friend_online:nameless tee"]);
    let (status, rest) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(rest.is_empty(), "nothing else: {rest:?}");
}

/// Whether process `pid` still runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// A command still running at shutdown is killed with every process it started, not only
/// its `sh` (here a pipeline whose first member writes its pid and becomes `sleep`).
#[cfg(target_os = "linux")]
#[test]
fn exec_commands_are_killed_whole_when_watching_stops() {
    let scratch = ScratchDir::new("watch-exec-group");
    let pid_file = scratch.path().join("pid");
    let exec = format!(
        "sh -c 'echo $$ > \"{}\"; exec sleep 98' | cat",
        pid_file.display()
    );
    let server = gameagent(state("Alpha", "Map1", 8, &["Carl"]));
    let address = server.addr.to_string();
    let mut args = vec![&address[..], "-p", "gameagent", "--given-port-only"];
    args.extend(["-f", "ndjson", "--exec", &exec]);
    args.extend(FAST);
    let mut watch = Watch::start(&args);
    watch.expect(&["server_up"]);
    let mut pid = None;
    wait_for("the command's sleep started", || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        pid.is_some()
    });
    let pid = pid.unwrap();
    assert!(alive(pid));
    let (status, _) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    wait_for("the command's sleep was killed", || !alive(pid));
}

/// An HTTP server on loopback answering every request with `answer`, counting them.
struct Counting {
    addr: SocketAddr,
    requests: Arc<Mutex<usize>>,
}

impl Counting {
    fn start(answer: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(0));
        let count = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                if read_request(&mut stream).is_none() {
                    continue;
                }
                *count.lock().unwrap() += 1;
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Self { addr, requests }
    }

    fn requests(&self) -> usize {
        *self.requests.lock().unwrap()
    }
}

#[test]
fn a_webhook_redirect_is_not_followed() {
    let ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let elsewhere = Counting::start(ok.to_owned());
    let redirect = Counting::start(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{}/other\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        elsewhere.addr
    ));
    let hook = format!("http://{}/hook", redirect.addr);
    let server = gameagent(state("Alpha", "Map1", 8, &["Carl"]));
    let address = server.addr.to_string();
    let mut args = vec![&address[..], "-p", "gameagent", "--given-port-only"];
    args.extend(["-f", "ndjson", "--webhook", &hook]);
    args.extend(FAST);
    let mut watch = Watch::start(&args);
    watch.expect(&["server_up"]);
    wait_for("the webhook's answer was handled", || {
        watch.stderr().contains("redirects are not followed")
    });
    assert_eq!(redirect.requests(), 1, "{}", watch.stderr());
    assert_eq!(
        elsewhere.requests(),
        0,
        "the event was posted once, where it was told"
    );
    let (status, _) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
}

/// A Quake III server watched by address: its players and map changes come through, with the
/// colour codes of names stripped for matching friends.
#[test]
fn quake3_servers_are_watched_with_their_players() {
    let server = LiveServer::start(
        Box::new(muster_proto::quake3::respond::Quake3Responder::default()),
        state("^1Q3 arena", "q3dm17", 8, &["^2Zoe"]),
    );
    let address = server.addr.to_string();
    let mut args = vec![&address[..], "-p", "quake3", "--friend", "zoe"];
    args.extend(["-f", "ndjson"]);
    args.extend(FAST);
    let mut watch = Watch::start(&args);
    let up = watch.expect(&["server_up", "friend_online:Zoe"]);
    assert!(up.iter().any(|e| e["name"] == "Q3 arena"), "{up:?}");
    server.change(|s| s.map = "q3dm6".into());
    let changed = watch.expect(&["map_changed"]);
    assert_eq!(changed[0]["previous"], "q3dm17");
    let (status, rest) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(rest.is_empty(), "nothing else: {rest:?}");
}

/// `muster watch --master quake3:…`: the servers a Quake III master lists are watched, and a
/// server the master starts listing later comes up at the next interval.
#[test]
fn quake3_master_lists_are_watched() {
    use muster_proto::quake3::packet::ServerList;
    let first = LiveServer::start(
        Box::new(muster_proto::quake3::respond::Quake3Responder::default()),
        state("First", "q3dm1", 8, &[]),
    );
    let second = LiveServer::start(
        Box::new(muster_proto::quake3::respond::Quake3Responder::default()),
        state("Second", "q3dm2", 8, &[]),
    );
    let master = UdpSocket::bind("127.0.0.1:0").unwrap();
    master
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let master_addr = master.local_addr().unwrap();
    let listed = Arc::new(Mutex::new(vec![first.addr]));
    let stop = Arc::new(AtomicBool::new(false));
    let (list, halt) = (listed.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut requests = Vec::new();
        while !halt.load(Ordering::Relaxed) {
            let Ok((n, from)) = master.recv_from(&mut buf) else {
                continue;
            };
            requests.push(buf[..n].to_vec());
            let servers = list.lock().unwrap().clone();
            for d in ServerList::encode_datagrams(false, &servers) {
                let _ = master.send_to(&d, from);
            }
        }
        requests
    });
    let spec = format!("quake3:{master_addr}");
    let mut args = vec!["--master", &spec[..], "-f", "ndjson"];
    args.extend(FAST);
    let mut watch = Watch::start(&args);
    let up = watch.expect(&["server_up"]);
    assert_eq!(up[0]["name"], "First");
    assert_eq!(up[0]["address"], first.addr.to_string());
    listed.lock().unwrap().push(second.addr);
    let up = watch.expect(&["server_up"]);
    assert_eq!(up[0]["name"], "Second");
    let (status, _) = watch.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
    stop.store(true, Ordering::Relaxed);
    let requests = thread.join().unwrap();
    assert!(requests.len() >= 2, "listed again at every interval");
    assert!(
        requests
            .iter()
            .all(|r| r == b"\xff\xff\xff\xffgetservers 68 empty full")
    );
}
