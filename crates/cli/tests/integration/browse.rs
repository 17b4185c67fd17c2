//! `muster browse --tui` in a real terminal: tmux runs the binary, the test types keys with
//! `send-keys` and reads the screen with `capture-pane`. The masters and servers are the
//! test's own on loopback: a DDNet HTTP master (a `servers.json` served over HTTP) listing
//! Teeworlds servers answered by Muster's responders, a `--servers` file naming a GameAgent
//! server, and a Teeworlds UDP master that is not there. Every wait is bounded by
//! [`WAIT_LIMIT`] and checks what the screen shows, never how long it took.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use muster_proto::gameagent::respond::{GameAgentResponder, ResponderConfig};
use muster_proto::respond::{PlayerState, Responder, ServerState};
use muster_proto::teeworlds::{ResponderConfig as TeeworldsConfig, TeeworldsResponder};
use muster_testkit::Missing;

use crate::common::{Proc, only_faces};
use muster_testkit::process::ScratchDir;
use unicode_width::UnicodeWidthStr as _;

/// The longest the test waits for the screen to show something.
const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// A fake game server answering from a state the test changes or silences. Stopped on drop.
pub(super) struct LiveServer {
    pub(super) addr: SocketAddr,
    state: Arc<Mutex<ServerState>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LiveServer {
    pub(super) fn start(mut responder: Box<dyn Responder + Send>, state: ServerState) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind fake server");
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .expect("read timeout");
        let addr = socket.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, halt) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut replies = Vec::new();
            while !halt.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let snapshot = st.lock().unwrap().clone();
                replies.clear();
                responder.handle_datagram(Instant::now(), from, &buf[..n], &snapshot, &mut replies);
                for r in &replies {
                    let _ = socket.send_to(&r.bytes, r.to);
                }
            }
        });
        Self {
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn change(&self, f: impl FnOnce(&mut ServerState)) {
        f(&mut self.state.lock().unwrap());
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

pub(super) fn state(name: &str, map: &str, max: u32, players: &[&str]) -> ServerState {
    ServerState {
        name: name.to_owned(),
        map: map.to_owned(),
        max_players: max,
        players: players
            .iter()
            .map(|n| PlayerState {
                name: (*n).to_owned(),
                ..PlayerState::default()
            })
            .collect(),
        ..ServerState::default()
    }
}

pub(super) fn teeworlds(s: ServerState) -> LiveServer {
    LiveServer::start(
        Box::new(TeeworldsResponder::new(TeeworldsConfig::default(), [7; 16])),
        s,
    )
}

/// A DDNet HTTP master on loopback: every request gets `body` as JSON. Stops on drop.
pub(super) struct HttpMaster {
    pub(super) addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpMaster {
    pub(super) fn start(body: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind http master");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HttpMaster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A tmux server of the test's own (its own socket name), running one command in a window
/// of a set size. Killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn find() -> Result<PathBuf, Missing> {
        muster_testkit::which("tmux").ok_or(Missing {
            peer: "tmux",
            detail: "not on PATH".into(),
        })
    }

    fn start(command: &str, width: u16, height: u16) -> Self {
        // One tmux server per test: tests run side by side in one process.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let socket = format!("muster-browse-{}-{n}", std::process::id());
        let t = Self { socket };
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "browse",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            command,
        ]);
        t
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm-256color")
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let mut args = vec!["send-keys", "-t", "browse"];
            // Single characters are sent literally (`-l`), names like Enter as keys.
            if k.chars().count() == 1 {
                args.push("-l");
            }
            args.push(k);
            self.run(&args);
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "browse"]).stdout)
            .into_owned()
    }

    fn alive(&self) -> bool {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(["has-session", "-t", "browse"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Waits until the screen satisfies `ok`; panics with the last screen after
    /// [`WAIT_LIMIT`].
    #[track_caller]
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + WAIT_LIMIT;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < until,
                "waited for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// The line showing `name`.
fn line_of<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.contains(name))
}

/// The row index of the line showing `name`.
fn row_of(screen: &str, name: &str) -> usize {
    screen
        .lines()
        .position(|l| l.contains(name))
        .unwrap_or_else(|| panic!("{name} is not on screen:\n{screen}"))
}

/// The display column where `needle` ends in `line`.
fn end_column(line: &str, needle: &str) -> usize {
    let at = line
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in {line:?}"));
    line[..at + needle.len()].width()
}

/// Every row's PLAYERS cell ends in the column where the header's PLAYERS ends, and no line
/// is wider than the terminal.
#[track_caller]
fn assert_aligned(screen: &str, width: usize, rows: &[(&str, &str)]) {
    let header = line_of(screen, "PLAYERS").expect("table header");
    let column = end_column(header, "PLAYERS");
    for (name, players) in rows {
        let line = line_of(screen, name).unwrap_or_else(|| panic!("{name}:\n{screen}"));
        assert_eq!(
            end_column(line, players),
            column,
            "{name}'s players are not under PLAYERS:\n{screen}"
        );
    }
    for l in screen.lines() {
        assert!(l.width() <= width, "wider than {width}: {l:?}");
    }
}

#[test]
fn the_terminal_browser_fills_its_table_and_every_key_acts() {
    let Some(_tmux) = muster_testkit::require(Tmux::find()) else {
        return;
    };
    let scratch = ScratchDir::new("browse-tui");
    let alpha = teeworlds(state("Alpha Tee", "dm1", 16, &["ann"]));
    // A full server with a name of double-width characters.
    let bravo = teeworlds(state(
        "Bravo 日本語のサーバー名前",
        "ctf2",
        2,
        &["xi", "yu"],
    ));
    let charlie = teeworlds(state("Charlie", "dm9", 8, &[]));
    let entries: Vec<serde_json::Value> = [&alpha, &bravo, &charlie]
        .iter()
        .map(|s| serde_json::json!({ "addresses": [format!("tw-0.6+udp://{}", s.addr)], "info": {} }))
        .collect();
    let master = HttpMaster::start(serde_json::json!({ "servers": entries }).to_string());
    let delta = LiveServer::start(
        Box::new(GameAgentResponder::new(ResponderConfig::default())),
        state("Delta Sam", "Map1", 16, &[]),
    );
    let servers = scratch.path().join("servers.txt");
    std::fs::write(
        &servers,
        format!("gameagent 127.0.0.1:{}\n", delta.addr.port() - 1),
    )
    .unwrap();
    let nobody = muster_testkit::free_udp_port();
    let profile = scratch.path().join("profile");

    let command = format!(
        "{} browse --tui --master ddnet:http://{}/servers.json --master teeworlds:127.0.0.1:{nobody} \
         --servers {} --profile {} --friend Zoe --refresh 200ms --timeout 300ms --retries 1 --rate 0",
        env!("CARGO_BIN_EXE_muster"),
        master.addr,
        servers.display(),
        profile.display()
    );
    let tmux = Tmux::start(&command, 100, 30);

    // The table fills from both sources; the missing master is reported, the others work.
    let s = tmux.wait("every server answered", |s| {
        [
            "Alpha Tee",
            "Bravo",
            "Charlie",
            "Delta Sam",
            "2/2",
            "1/16",
            "0/8",
            "0/16",
        ]
        .iter()
        .all(|n| s.contains(n))
            && s.contains("1 unreachable")
    });
    assert!(s.contains("4 servers, 4 shown"), "{s}");
    assert_aligned(
        &s,
        100,
        &[("Alpha Tee", "1/16"), ("Bravo", "2/2"), ("Charlie", "0/8")],
    );
    // Sorted by players, most first.
    assert!(row_of(&s, "Bravo") < row_of(&s, "Alpha Tee"), "{s}");
    assert!(row_of(&s, "Alpha Tee") < row_of(&s, "Charlie"), "{s}");

    // s cycles the sort, r reverses it.
    tmux.keys(&["s"]);
    tmux.wait("sort by ping", |s| s.contains("sort: ping"));
    tmux.keys(&["s"]);
    let s = tmux.wait("sort by name", |s| {
        s.contains("sort: name") && !s.contains("(reversed)")
    });
    assert!(row_of(&s, "Alpha Tee") < row_of(&s, "Delta Sam"), "{s}");
    tmux.keys(&["r"]);
    let s = tmux.wait("reversed", |s| s.contains("sort: name (reversed)"));
    assert!(row_of(&s, "Delta Sam") < row_of(&s, "Alpha Tee"), "{s}");
    tmux.keys(&["r", "s", "s", "s"]);
    tmux.wait("back to players", |s| {
        s.contains("sort: players") && !s.contains("(reversed)")
    });

    // e hides empty servers, u full ones.
    tmux.keys(&["e"]);
    let s = tmux.wait("empty hidden", |s| s.contains("2 shown"));
    assert!(
        !s.contains("Charlie") && !s.contains("Delta Sam") && s.contains("Bravo"),
        "{s}"
    );
    tmux.keys(&["u"]);
    let s = tmux.wait("full hidden too", |s| s.contains("1 shown"));
    assert!(s.contains("Alpha Tee") && !s.contains("Bravo"), "{s}");
    tmux.keys(&["e", "u"]);
    tmux.wait("all again", |s| s.contains("4 shown"));

    // / searches names and players.
    tmux.keys(&["/", "a", "n", "n", "Enter"]);
    let s = tmux.wait("search for a player", |s| {
        s.contains("1 shown") && s.contains("search: ann") && !s.contains("search: ann▏")
    });
    assert!(s.contains("Alpha Tee"), "{s}");
    tmux.keys(&["/", "Escape"]);
    tmux.wait("search cleared", |s| s.contains("4 shown"));

    // g chooses the games shown: Space on the first (DDNet, whose servers are the three
    // Teeworlds ones), Enter back; then every game again.
    tmux.keys(&["g"]);
    tmux.wait("the game list", |s| {
        s.contains("[ ] ddnet") && s.contains("Serious Sam")
    });
    tmux.keys(&[" "]);
    tmux.wait("ddnet chosen", |s| s.contains("[x] ddnet"));
    tmux.keys(&["Enter"]);
    let s = tmux.wait("one game", |s| {
        s.contains("3 shown") && s.contains("games: ddnet")
    });
    assert!(!s.contains("Delta Sam"), "{s}");
    tmux.keys(&["g", "a", "Enter"]);
    tmux.wait("every game", |s| {
        s.contains("4 shown") && !s.contains("games: ")
    });

    // f makes the top row (Bravo) a favourite; F shows favourites only.
    tmux.keys(&["Home", "f"]);
    let s = tmux.wait("favourite", |s| s.contains("is a favourite"));
    assert!(line_of(&s, "Bravo").unwrap().starts_with('*'), "{s}");
    tmux.keys(&["F"]);
    let s = tmux.wait("favourites only", |s| s.contains("1 shown"));
    assert!(s.contains("Bravo") && !s.contains("Alpha Tee"), "{s}");
    tmux.keys(&["F"]);
    tmux.wait("all again", |s| s.contains("4 shown"));

    // c prints the join link of the selected server (the responder answers DDNet's
    // extended info, so it is a DDNet server) with the console command beside it.
    tmux.keys(&["c"]);
    tmux.wait("join link", |s| {
        s.contains(&format!(
            "join: ddnet://{0}  (console: connect {0})",
            bravo.addr
        ))
    });

    // Enter shows the players; p makes the highlighted one a friend.
    tmux.keys(&["Down", "Enter"]);
    let s = tmux.wait("details", |s| s.contains("PLAYERS (p: friend)"));
    assert!(s.contains("ann") && s.contains("Alpha Tee"), "{s}");
    tmux.keys(&["p"]);
    tmux.wait("friend saved", |s| s.contains("ann is a friend now"));
    tmux.keys(&["Escape"]);
    tmux.wait("friend shown in the table", |s| {
        s.contains("ann @ Alpha Tee")
            && s.contains("NAME")
            && line_of(s, "Alpha Tee").is_some_and(|l| l.starts_with(" @"))
    });

    // A friend (--friend) who joins a server is shown there within a refresh.
    charlie.change(|st| {
        st.players.push(PlayerState {
            name: "zoe".into(),
            ..PlayerState::default()
        })
    });
    tmux.wait("Zoe on Charlie", |s| {
        s.contains("Zoe @ Charlie") && line_of(s, "Charlie").is_some_and(|l| l.starts_with(" @"))
    });

    // A server that stops is marked down.
    drop(alpha);
    let s = tmux.wait("Alpha down", |s| {
        line_of(s, "Alpha Tee").is_some_and(|l| l.trim_end().ends_with("down"))
    });
    assert!(!s.contains("ann @ Alpha Tee"), "{s}");

    // 80×24: the columns stay aligned.
    tmux.run(&["resize-window", "-t", "browse", "-x", "80", "-y", "24"]);
    let s = tmux.wait("80 columns", |s| {
        s.lines().all(|l| l.width() <= 80) && s.contains("PLAYERS")
    });
    assert_aligned(
        &s,
        80,
        &[("Bravo", "2/2"), ("Charlie", "1/8"), ("Delta Sam", "0/16")],
    );

    // q quits; the profile keeps the favourite, the friends and the filters.
    tmux.keys(&["e"]);
    tmux.wait("empty hidden", |s| s.contains("no empty"));
    tmux.keys(&["q"]);
    let until = Instant::now() + WAIT_LIMIT;
    while tmux.alive() {
        assert!(Instant::now() < until, "q did not quit:\n{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(50));
    }
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(profile.join("profile.json")).unwrap()).unwrap();
    assert_eq!(
        saved["favourites"],
        serde_json::json!([format!("teeworlds {}", bravo.addr)])
    );
    assert_eq!(saved["friends"], serde_json::json!(["Zoe", "ann"]));
    assert_eq!(
        saved["recent"],
        serde_json::json!([format!("teeworlds {}", bravo.addr)])
    );
    assert_eq!(saved["filters"]["hide_empty"], true);
    drop(tmux);

    // The next run starts with them: empty servers hidden, the favourite marked.
    let tmux = Tmux::start(&command, 100, 30);
    let s = tmux.wait("the last filters", |s| {
        s.contains("no empty") && line_of(s, "Bravo").is_some_and(|l| l.starts_with('*'))
    });
    assert!(!s.contains("Delta Sam"), "{s}");
    tmux.keys(&["q"]);
}

/// Starts `muster <args>` and reads its `listening FACE PROTO ADDR` lines until every face of
/// `want` is named.
fn start_muster(
    args: &[&str],
    want: &[&str],
) -> (Proc, std::collections::HashMap<String, SocketAddr>) {
    use std::io::BufRead as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start muster");
    let stdout = child.stdout.take().expect("stdout");
    let proc = Proc(child);
    let mut faces = std::collections::HashMap::new();
    let mut lines = std::io::BufReader::new(stdout).lines();
    while !want.iter().all(|w| faces.contains_key(*w)) {
        let line = lines.next().expect("a listening line").expect("utf-8");
        let parts: Vec<&str> = line.split(' ').collect();
        if let ["listening", face, _, addr] = parts[..] {
            faces.insert(face.to_owned(), addr.parse().expect("address"));
        }
    }
    // The rest of stdout is read and dropped, so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (proc, faces)
}

/// A free loopback UDP port `p` (below 60000) with `p + gap` free too: a game port and its
/// query port.
fn free_pair(gap: u16) -> u16 {
    for _ in 0..100 {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 60000 && (gap == 0 || UdpSocket::bind(("127.0.0.1", p + gap)).is_ok()) {
            return p;
        }
    }
    panic!("no free ports");
}

/// Every family's master, played by `muster serve` on loopback, with `muster emulate`
/// servers registered to each: the browser lists and queries them all, and names each game.
#[test]
fn the_terminal_browser_lists_every_family_from_its_masters() {
    let Some(_tmux) = muster_testkit::require(Tmux::find()) else {
        return;
    };
    let scratch = ScratchDir::new("browse-families");
    let data = scratch.path().join("data");
    let data = data.to_string_lossy();
    // The Quake III and Valve faces refuse servers on the master's own machine unless told.
    let config = scratch.path().join("muster.toml");
    std::fs::write(
        &config,
        "[quake3]\nallow_loopback = true\n[valve]\nallow_loopback = true\n",
    )
    .unwrap();
    let config = config.to_string_lossy();
    let faces_wanted = [
        "gameagent",
        "gamespy-udp",
        "gamespy-tcp",
        "teeworlds07",
        "http",
        "quake3",
        "valve",
    ];
    let mut args = vec!["serve", "--config", &config, "--data-dir", &data];
    args.extend(only_faces(&faces_wanted));
    let (_serve, faces) = start_muster(&args, &faces_wanted);
    let ut_port = free_pair(1);
    // Name, protocol, style, port, master.
    let servers: Vec<(&str, &str, Option<&str>, u16, String)> = vec![
        (
            "UT Classic",
            "gamespy1",
            Some("ut99"),
            ut_port,
            format!("gamespy:{}", faces["gamespy-udp"]),
        ),
        (
            "Sam Agent",
            "gameagent",
            None,
            free_pair(1),
            format!("gameagent:{}", faces["gameagent"]),
        ),
        (
            "Tee Seven",
            "teeworlds",
            None,
            free_pair(0),
            format!("teeworlds07:{}", faces["teeworlds07"]),
        ),
        (
            "Dd Http",
            "teeworlds",
            None,
            free_pair(0),
            format!("ddnet:http://{}/ddnet/15/register", faces["http"]),
        ),
        (
            "Quake Three",
            "quake3",
            None,
            free_pair(0),
            format!("quake3:{}", faces["quake3"]),
        ),
        (
            "Half Life",
            "a2s",
            Some("goldsrc"),
            free_pair(0),
            format!("valve:{}", faces["valve"]),
        ),
    ];
    let mut running = Vec::new();
    for (name, protocol, style, port, master) in &servers {
        let port = port.to_string();
        let mut all = vec!["emulate", "--name", name, "--players", "1", "-p", protocol];
        if let Some(style) = style {
            all.extend(["--style", style]);
        }
        all.extend(["--port", &port, "--master", master]);
        running.push(start_muster(
            &all,
            &["gamespy1", "gameagent", "teeworlds", "quake3", "a2s"][..0],
        ));
    }
    let profile = scratch.path().join("profile");
    let command = format!(
        "{} browse --tui --game ut --master gamespy:{} --master gameagent:{} --master teeworlds:{} \
         --master ddnet:http://{}/ddnet/15/servers.json --master quake3:{} --master valve:{} \
         --profile {} --relist 2s --refresh 300ms --timeout 300ms --retries 1 --rate 0",
        env!("CARGO_BIN_EXE_muster"),
        faces["gamespy-tcp"],
        faces["gameagent"],
        faces["teeworlds07"],
        faces["http"],
        faces["quake3"],
        faces["valve"],
        profile.display()
    );
    let tmux = Tmux::start(&command, 120, 30);
    let s = tmux.wait("every family listed and answering", |s| {
        servers.iter().all(|(name, ..)| {
            line_of(s, name).is_some_and(|l| l.contains("1/") && !l.trim_end().ends_with('…'))
        })
    });
    assert!(s.contains("masters: 6 ok"), "{s}");
    assert!(!s.contains("unreachable"), "{s}");
    assert!(
        line_of(&s, "UT Classic")
            .unwrap()
            .contains("Unreal Tournament"),
        "{s}"
    );
    assert!(
        line_of(&s, "Quake Three")
            .unwrap()
            .contains("Quake III Arena"),
        "{s}"
    );
    // The GameSpy list gives the UT server's query port; its answer gives the game port,
    // which the join link names.
    tmux.keys(&["/", "U", "T", " ", "C", "Enter"]);
    tmux.wait("UT alone", |s| {
        s.contains("1 shown") && s.contains("search: UT C")
    });
    tmux.keys(&["Home", "c"]);
    tmux.wait("the UT join link", |s| {
        s.contains(&format!(
            "join: unreal://127.0.0.1:{ut_port}  (console: open 127.0.0.1:{ut_port})"
        ))
    });
    tmux.keys(&["q"]);
}

fn browse(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("browse")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run muster browse")
}

/// `--list-games` prints the directory; an unknown game and a missing terminal are the
/// user's to fix (exit 2), said on stderr.
#[test]
fn list_games_prints_the_directory_and_mistakes_exit_2() {
    let out = browse(&["--list-games"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let ddnet = text
        .lines()
        .find(|l| l.starts_with("ddnet "))
        .expect("a ddnet line");
    assert!(
        ddnet.contains("ddnet:https://master1.ddnet.org/ddnet/15/servers.json"),
        "{text}"
    );
    let ut = text
        .lines()
        .find(|l| l.starts_with("ut "))
        .expect("a ut line");
    assert!(
        ut.contains("gamespy:master.333networks.com:28900"),
        "{text}"
    );

    let out = browse(&["--game", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown game \"nope\""));

    let out = browse(&["--tui", "--master", "ddnet:/nonexistent/servers.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a terminal"));
}

/// A master listing 20,000 servers (a DDNet list of loopback addresses nothing answers on)
/// does not hold the interface: the table shows them all while they are being queried, and
/// keys act at once.
#[test]
fn twenty_thousand_listed_servers_leave_the_keys_working() {
    let Some(_tmux) = muster_testkit::require(Tmux::find()) else {
        return;
    };
    let scratch = ScratchDir::new("browse-20k");
    // A port nothing listens on, at 20,000 loopback addresses outside 127.0.0.1.
    let port = muster_testkit::free_udp_port();
    let entries: Vec<serde_json::Value> = (0..20_000u32)
        .map(|i| {
            let addr = format!("127.77.{}.{}:{port}", i / 200, i % 200 + 1);
            serde_json::json!({
                "addresses": [format!("tw-0.6+udp://{addr}")],
                "info": {
                    "name": format!("Far {i}"), "map": { "name": "dm1" }, "game_type": "DM",
                    "version": "0.6.4", "passworded": false, "max_clients": 8,
                    "max_players": 8, "clients": []
                }
            })
        })
        .collect();
    // One live server, listed last.
    let live = teeworlds(state("Aaa Live", "dm1", 16, &["ann"]));
    let mut entries = entries;
    entries.push(serde_json::json!({
        "addresses": [format!("tw-0.6+udp://{}", live.addr)],
        "info": {
            "name": "Aaa Live", "map": { "name": "dm1" }, "game_type": "DM",
            "version": "0.6.4", "passworded": false, "max_clients": 16,
            "max_players": 16, "clients": []
        }
    }));
    let json = scratch.path().join("servers.json");
    std::fs::write(&json, serde_json::json!({ "servers": entries }).to_string()).unwrap();
    let command = format!(
        "{} browse --tui --master ddnet:{} --profile {} --friend Zoe --refresh 300ms --timeout 300ms \
         --retries 1",
        env!("CARGO_BIN_EXE_muster"),
        json.display(),
        scratch.path().join("profile").display()
    );
    let tmux = Tmux::start(&command, 100, 30);
    tmux.wait("20,001 servers", |s| {
        s.contains("20001 servers, 20001 shown")
    });
    // Keys act while the servers are queried (at the default rate that takes a while).
    tmux.keys(&["s"]);
    tmux.wait("sort by ping", |s| s.contains("sort: ping"));
    tmux.keys(&["/", "F", "a", "r", " ", "1", "9", "9", "9", "9", "Enter"]);
    let s = tmux.wait("search", |s| s.contains("20001 servers, 1 shown"));
    assert!(s.contains("Far 19999"), "{s}");
    // By name, the live server is on top: on screen, it is queried ahead of the thousands
    // still waiting, and a friend joining it is seen within a refresh.
    tmux.keys(&["/", "Escape"]);
    // Escape alone: a key right after it would read as Alt and that key.
    tmux.wait("search cleared", |s| s.contains("20001 shown"));
    // The highlight stays on Far 19999 through the sort: Home goes to the top.
    tmux.keys(&["s", "Home"]);
    tmux.wait("the live server answered", |s| {
        s.contains("sort: name") && line_of(s, "Aaa Live").is_some_and(|l| l.contains("1/16"))
    });
    live.change(|st| {
        st.players.push(PlayerState {
            name: "zoe".into(),
            ..PlayerState::default()
        })
    });
    tmux.wait("Zoe on the live server", |s| s.contains("Zoe @ Aaa Live"));
    tmux.keys(&["q"]);
    let until = Instant::now() + WAIT_LIMIT;
    while tmux.alive() {
        assert!(Instant::now() < until, "q did not quit:\n{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `--servers` file alone is browsed alone: no public master is asked.
#[test]
fn a_servers_file_alone_asks_no_master() {
    let Some(_tmux) = muster_testkit::require(Tmux::find()) else {
        return;
    };
    let scratch = ScratchDir::new("browse-file");
    let server = teeworlds(state("Filed Tee", "dm1", 8, &["ann"]));
    let servers = scratch.path().join("servers.txt");
    std::fs::write(&servers, format!("teeworlds {}\n", server.addr)).unwrap();
    let command = format!(
        "{} browse --tui --servers {} --profile {} --timeout 300ms --retries 1",
        env!("CARGO_BIN_EXE_muster"),
        servers.display(),
        scratch.path().join("profile").display()
    );
    let tmux = Tmux::start(&command, 80, 24);
    let s = tmux.wait("the file's server", |s| {
        line_of(s, "Filed Tee").is_some_and(|l| l.contains("1/8"))
    });
    assert!(s.contains("1 servers, 1 shown"), "{s}");
    assert!(
        s.contains("masters: 0 ok") && !s.contains("asking") && !s.contains("unreachable"),
        "{s}"
    );
    tmux.keys(&["q"]);
}
