//! Query robustness against misbehaving servers (loss, duplicates, reordering, truncation, floods, IPv6).
//!
//! Each test runs the real `muster` binary against a fake server on loopback: a thread owning a UDP
//! socket that answers with real protocol replies (Muster's responders or the captured fixtures under
//! `crates/proto/tests/fixtures/`) and misbehaves on purpose. Every `muster` run is bounded by
//! [`RUN_LIMIT`]: a run that does not exit in time is killed and the test fails ("hang").

use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::respond::{PlayerState, Responder, ServerState};
use muster_proto::teeworlds::{ResponderConfig, TeeworldsResponder};
use serde_json::Value;

/// Longest one `muster` run may take before it counts as hung.
const RUN_LIMIT: Duration = Duration::from_secs(10);

/// Longest a fake server lives, whatever the test does.
const FAKE_LIFETIME: Duration = Duration::from_secs(30);

/// What a fake server does about one request.
enum Answer {
    /// Send these datagrams back, in this order.
    Send(Vec<Vec<u8>>),
    /// From now on send this datagram to the requester without end (until the fake is dropped).
    Flood(Vec<u8>),
}

/// A fake game server on one loopback UDP socket; stopped and joined on drop.
struct Fake {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Fake {
    /// Binds `bind` and answers every datagram with `on_request(index, from, datagram)`.
    fn start(
        bind: &str,
        on_request: impl FnMut(usize, SocketAddr, &[u8]) -> Answer + Send + 'static,
    ) -> Self {
        Self::on(UdpSocket::bind(bind).expect("bind fake server"), on_request)
    }

    /// Like [`Fake::start`] on an already bound socket.
    fn on(
        socket: UdpSocket,
        mut on_request: impl FnMut(usize, SocketAddr, &[u8]) -> Answer + Send + 'static,
    ) -> Self {
        let addr = socket.local_addr().expect("local addr");
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, halt) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            socket
                .set_read_timeout(Some(Duration::from_millis(10)))
                .expect("read timeout");
            let end = Instant::now() + FAKE_LIFETIME;
            let mut buf = vec![0u8; 65_536];
            let mut flood: Option<(SocketAddr, Vec<u8>)> = None;
            while !halt.load(Ordering::Relaxed) && Instant::now() < end {
                if let Some((to, datagram)) = &flood {
                    for _ in 0..8 {
                        let _ = socket.send_to(datagram, to);
                    }
                }
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let i = count.fetch_add(1, Ordering::SeqCst);
                match on_request(i, from, &buf[..n]) {
                    Answer::Send(datagrams) => {
                        for d in datagrams {
                            let _ = socket.send_to(&d, from);
                        }
                    }
                    Answer::Flood(datagram) => {
                        socket
                            .set_read_timeout(Some(Duration::from_millis(1)))
                            .expect("read timeout");
                        flood = Some((from, datagram));
                    }
                }
            }
        });
        Self {
            addr,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// How many datagrams arrived.
    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One finished `muster` run.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    /// The one result of `-f json` output.
    fn result(&self) -> Value {
        let v: Value = serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        });
        let a = v.as_array().expect("a JSON array");
        assert_eq!(a.len(), 1, "one result: {v}");
        a[0].clone()
    }
}

/// Runs `muster args…`; fails the test when it does not exit within [`RUN_LIMIT`].
fn muster(args: &[&str]) -> Run {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start muster");
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("stdout")));
    let err = reader(Box::new(child.stderr.take().expect("stderr")));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait muster") {
            break Some(status);
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let status = status
        .unwrap_or_else(|| panic!("muster {args:?} hung: killed after {RUN_LIMIT:?}\n{stderr}"));
    Run {
        code: status.code(),
        stdout,
        stderr,
        elapsed,
    }
}

/// `muster query -p <protocol> --given-port-only -f json --timeout <timeout> --retries <retries>
/// [extra…] <addr>`.
fn query(protocol: &str, addr: &str, timeout: &str, retries: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "query",
        "-p",
        protocol,
        "--given-port-only",
        "-f",
        "json",
        "--timeout",
        timeout,
        "--retries",
        retries,
    ];
    args.extend_from_slice(extra);
    args.push(addr);
    muster(&args)
}

fn player(name: &str, score: i64, team: Option<i32>) -> PlayerState {
    PlayerState {
        name: name.to_owned(),
        score,
        ping_ms: 40,
        team,
        country: -1,
        ..PlayerState::default()
    }
}

/// A UT2003 server whose host and player names need Windows-1252 (Latin-1) on the wire.
fn latin1_state() -> ServerState {
    ServerState {
        name: "Café Jérôme".to_owned(),
        map: "DM-Deck17".to_owned(),
        game_type: "xDeathMatch".to_owned(),
        game_port: 7777,
        max_players: 16,
        players: vec![
            player("Jürgen", 7, Some(0)),
            player("Zoë", 3, Some(1)),
            player("€uro®", -1, Some(0)),
        ],
        ..ServerState::default()
    }
}

/// A GameSpy v1 (UT2003 profile) answerer of [`latin1_state`] that sends nothing to the first
/// `drop_first` requests.
fn gamespy_dropping(drop_first: usize) -> impl FnMut(usize, SocketAddr, &[u8]) -> Answer {
    let mut responder = GameSpyResponder::with_profile(Profile::Ut2003);
    let state = latin1_state();
    move |i, _, d| {
        if i < drop_first {
            Answer::Send(Vec::new())
        } else {
            Answer::Send(responder.answer(d, &state))
        }
    }
}

fn fixture(rel: &str) -> Vec<u8> {
    muster_testkit::fixture(rel)
}

/// The real two-datagram `\status\` reply of a UT2003 demo server (X = 29, 11 players).
fn ut2003_two_datagrams() -> [Vec<u8>; 2] {
    [
        fixture("gamespy1/ut2003demo-1077-status-1.bin"),
        fixture("gamespy1/ut2003demo-1077-status-2.bin"),
    ]
}

/// The host name in [`ut2003_two_datagrams`].
const UT2003_DEMO_NAME: &str = "The Drunk Snipers UT2003 CTF Instagib (DEMO) #2";

fn names(result: &Value) -> Vec<String> {
    result["players"]
        .as_array()
        .expect("players array")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn assert_ok(run: &Run) -> Value {
    let r = run.result();
    assert_eq!(r["status"], "ok", "{r}\n{}", run.stderr);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    r
}

#[test]
fn lost_requests_are_answered_thanks_to_retries() {
    let fake = Fake::start("127.0.0.1:0", gamespy_dropping(2));
    let run = query("gamespy1", &fake.addr.to_string(), "150ms", "2", &[]);
    let r = assert_ok(&run);
    assert_eq!(fake.requests(), 3, "two lost requests and the answered one");
    assert_eq!(r["partial"], false, "{r}");
    assert_eq!(r["name"], "Café Jérôme", "{r}");
    assert_eq!(r["map"], "DM-Deck17", "{r}");
    assert_eq!(r["num_players"], 3, "{r}");
    assert_eq!(r["max_players"], 16, "{r}");
    let mut n = names(&r);
    n.sort();
    assert_eq!(n, ["Jürgen", "Zoë", "€uro®"], "{r}");
}

#[test]
fn lost_teeworlds_requests_are_answered_thanks_to_retries() {
    // Every datagram of the first attempt (DDNet extended request and 0.7 token request) is lost.
    let state = teeworlds_state(4);
    let mut responder = TeeworldsResponder::new(ResponderConfig::default(), [8; 16]);
    let fake = Fake::start("127.0.0.1:0", move |i, from, d| {
        let mut out = Vec::new();
        if i >= 2 {
            responder.handle_datagram(Instant::now(), from, d, &state, &mut out);
        }
        Answer::Send(out.into_iter().map(|r| r.bytes).collect())
    });
    let run = query("teeworlds", &fake.addr.to_string(), "150ms", "2", &[]);
    let r = assert_ok(&run);
    assert!(fake.requests() > 2, "retried: {}", fake.requests());
    assert_eq!(r["partial"], false, "{r}");
    assert_eq!(r["num_players"], 4, "{r}");
    assert_eq!(r["name"], "Tee Ünï ★", "{r}");
}

#[test]
fn zero_retries_means_one_attempt_then_timeout() {
    let fake = Fake::start("127.0.0.1:0", gamespy_dropping(1));
    let addr = fake.addr.to_string();
    let run = query("gamespy1", &addr, "150ms", "0", &[]);
    let r = run.result();
    assert_eq!(r["status"], "timeout", "{r}");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        r["error"].as_str().unwrap_or_default().contains(&addr),
        "{r}"
    );
    assert_eq!(r["players"].as_array().map(Vec::len), Some(0), "{r}");
    assert_eq!(fake.requests(), 1, "exactly one attempt");
}

#[test]
fn duplicated_replies_are_counted_once() {
    let [a, b] = ut2003_two_datagrams();
    let fake = Fake::start("127.0.0.1:0", move |_, _, _| {
        Answer::Send(vec![a.clone(), a.clone(), b.clone(), b.clone(), a.clone()])
    });
    let run = query("gamespy1", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["partial"], false, "{r}");
    let n = names(&r);
    assert_eq!(n.len(), 11, "{r}");
    assert!(n.iter().any(|p| p == "Kee\\/n"), "{n:?}");
}

#[test]
fn duplicated_teeworlds_replies_are_counted_once() {
    let fake = teeworlds_fake("127.0.0.1:0", 5, 9, |replies| {
        replies.into_iter().flat_map(|r| [r.clone(), r]).collect()
    });
    let run = query("teeworlds", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["num_players"], 5, "{r}");
    assert_eq!(names(&r).len(), 5, "{r}");
}

#[test]
fn gamespy_two_datagram_reply_in_reverse_order() {
    let [a, b] = ut2003_two_datagrams();
    let fake = Fake::start("127.0.0.1:0", move |_, _, _| {
        Answer::Send(vec![b.clone(), a.clone()])
    });
    let run = query("gamespy1", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["partial"], false, "{r}");
    assert_eq!(r["name"], UT2003_DEMO_NAME, "{r}");
    let n = names(&r);
    assert_eq!(n.len(), 11, "{r}");
    assert_eq!(r["num_players"], 11, "{r}");
}

#[test]
fn latin1_names_of_a_captured_reply() {
    let reply = fixture("gamespy1/ut2004-3369-status-latin1.bin");
    let fake = Fake::start("127.0.0.1:0", move |_, _, _| {
        Answer::Send(vec![reply.clone()])
    });
    let run = query("gamespy1", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(names(&r), ["Jürgen", "€uro®"], "{r}");
    assert!(
        r["name"].as_str().unwrap_or_default().contains("Café"),
        "{r}"
    );
}

/// Replies of the captured DDNet 16.4 64-player extended info (`iext` + one `iex+`), with the
/// token of the capture (1193046) replaced by the one in `request`, a `78 65 <extra:2> <res:2>
/// ff ff ff ff gie3 <t>` request. `None` for anything else.
fn ddnet64_replay(request: &[u8]) -> Option<Vec<Vec<u8>>> {
    if request.len() != 15
        || !request.starts_with(b"xe")
        || &request[6..14] != b"\xff\xff\xff\xffgie3"
    {
        return None;
    }
    let token =
        (u32::from(request[2]) << 16) | (u32::from(request[3]) << 8) | u32::from(request[14]);
    let old = b"1193046\0";
    let patched = |rel: &str| {
        let bytes = fixture(rel);
        // header ff×10 + 4-byte magic, then the token as a NUL-terminated decimal string.
        assert_eq!(&bytes[14..14 + old.len()], old, "fixture {rel} token");
        let mut out = bytes[..14].to_vec();
        out.extend_from_slice(format!("{token}\0").as_bytes());
        out.extend_from_slice(&bytes[14 + old.len()..]);
        out
    };
    Some(vec![
        patched("teeworlds/serverinfo/ddnet-16.4-xe-p64-reply-main.bin"),
        patched("teeworlds/serverinfo/ddnet-16.4-xe-p64-reply-more1.bin"),
    ])
}

fn ddnet64_in_order(reverse: bool) {
    let fake = Fake::start("127.0.0.1:0", move |_, _, d| {
        let mut replies = ddnet64_replay(d).unwrap_or_default();
        if reverse {
            replies.reverse();
        }
        Answer::Send(replies)
    });
    let run = query("teeworlds", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["partial"], false, "{r}");
    assert_eq!(r["num_players"], 64, "{r}");
    assert_eq!(r["max_players"], 64, "{r}");
    assert_eq!(r["map"], "Tutorial", "{r}");
    assert_eq!(
        r["name"], "DDNet Lab \u{dc}n\u{ef}c\u{f6}d\u{e9} \u{2605} | a;b \"q\" \u{540d}\u{524d}",
        "{r}"
    );
    let mut n = names(&r);
    assert_eq!(n.len(), 64, "{r}");
    n.sort();
    n.dedup();
    assert_eq!(n.len(), 64, "64 distinct players: {n:?}");
    assert!(n.iter().any(|p| p == "bot00_long_nam"), "{n:?}");
    assert!(n.iter().any(|p| p == "bot63_long_nam"), "{n:?}");
}

#[test]
fn ddnet_64_players_iext_then_iex_plus() {
    ddnet64_in_order(false);
}

#[test]
fn ddnet_64_players_iex_plus_before_iext() {
    ddnet64_in_order(true);
}

fn teeworlds_state(players: usize) -> ServerState {
    ServerState {
        name: "Tee Ünï ★".to_owned(),
        map: "ctf5".to_owned(),
        game_type: "CTF".to_owned(),
        version: "0.6.4".to_owned(),
        max_players: 64,
        players: (0..players)
            .map(|i| player(&format!("tee{i:02}é"), i as i64, None))
            .collect(),
        ..ServerState::default()
    }
}

/// A server of `players` played by Muster's Teeworlds responder (token secret `seed` in every
/// byte) on `bind`: its replies to each request go through `reshape` before they are sent.
fn teeworlds_fake(
    bind: &str,
    players: usize,
    seed: u8,
    mut reshape: impl FnMut(Vec<Vec<u8>>) -> Vec<Vec<u8>> + Send + 'static,
) -> Fake {
    let state = teeworlds_state(players);
    let mut responder = TeeworldsResponder::new(ResponderConfig::default(), [seed; 16]);
    Fake::start(bind, move |_, from, d| {
        let mut out = Vec::new();
        responder.handle_datagram(Instant::now(), from, d, &state, &mut out);
        Answer::Send(reshape(out.into_iter().map(|r| r.bytes).collect()))
    })
}

#[test]
fn teeworlds_multi_packet_replies_shuffled() {
    // Muster's own responder with 40 players: every reply set sent last-first.
    let fake = teeworlds_fake("127.0.0.1:0", 40, 3, |replies| {
        replies.into_iter().rev().collect()
    });
    let run = query("teeworlds", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["partial"], false, "{r}");
    assert_eq!(r["num_players"], 40, "{r}");
    assert_eq!(r["name"], "Tee Ünï ★", "{r}");
    let n = names(&r);
    assert_eq!(n.len(), 40, "{r}");
    assert!(n.iter().any(|p| p == "tee39é"), "{n:?}");
}

#[test]
fn truncated_gamespy_reply_is_partial_not_a_hang() {
    // Only the first of two datagrams ever comes: `\final\` never arrives.
    let [a, _] = ut2003_two_datagrams();
    let fake = Fake::start("127.0.0.1:0", move |_, _, _| Answer::Send(vec![a.clone()]));
    let run = query(
        "gamespy1",
        &fake.addr.to_string(),
        "300ms",
        "1",
        &["--deadline", "3s"],
    );
    let r = run.result();
    assert!(run.elapsed < Duration::from_secs(6), "{:?}", run.elapsed);
    match r["status"].as_str() {
        Some("ok") => {
            assert_eq!(r["partial"], true, "{r}");
            assert_eq!(r["name"], UT2003_DEMO_NAME, "{r}");
            assert!(r["partial_reason"].is_string(), "{r}");
        }
        Some("error" | "timeout") => assert_eq!(run.code, Some(1), "{r}"),
        other => panic!("unexpected status {other:?}: {r}"),
    }
}

#[test]
fn truncated_teeworlds_replies_are_partial_or_an_error() {
    // Every reply cut in half (the 0.7 token reply too).
    let fake = teeworlds_fake("127.0.0.1:0", 8, 5, |replies| {
        replies
            .into_iter()
            .map(|r| r[..r.len() / 2].to_vec())
            .collect()
    });
    let run = query("teeworlds", &fake.addr.to_string(), "200ms", "1", &[]);
    let r = run.result();
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    match r["status"].as_str() {
        // What survived of the cut `iext`: the header fields and the first records.
        Some("ok") => {
            assert_eq!(r["partial"], true, "{r}");
            assert_eq!(r["num_players"], 8, "{r}");
            assert!(names(&r).len() < 8, "{r}");
            assert!(r["partial_reason"].is_string(), "{r}");
        }
        Some("error" | "timeout") => {
            assert_eq!(run.code, Some(1), "{}", run.stderr);
            assert!(r["error"].is_string(), "{r}");
        }
        other => panic!("unexpected status {other:?}: {r}"),
    }
}

#[test]
fn oversized_junk_datagram_then_the_real_reply() {
    // A 65,000-byte datagram of junk before the real replies: ignored, the query still succeeds.
    let fake = teeworlds_fake("127.0.0.1:0", 3, 6, |replies| {
        let mut out = vec![vec![0xffu8; 65_000]];
        out.extend(replies);
        out
    });
    let run = query("teeworlds", &fake.addr.to_string(), "500ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["num_players"], 3, "{r}");
}

#[test]
fn oversized_gamespy_reply_ends_cleanly() {
    // One 65,000-byte `\status\` reply (a huge host name): either read whole or refused, never a
    // crash or a hang.
    let mut big = b"\\hostname\\".to_vec();
    big.resize(65_000 - 40, b'H');
    big.extend_from_slice(b"\\mapname\\DM-Big\\queryid\\7.1\\final\\");
    let fake = Fake::start("127.0.0.1:0", move |_, _, _| {
        Answer::Send(vec![big.clone()])
    });
    let run = query("gamespy1", &fake.addr.to_string(), "300ms", "0", &[]);
    let r = run.result();
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    match r["status"].as_str() {
        Some("ok") => {
            assert_eq!(run.code, Some(0));
            assert_eq!(r["map"], "DM-Big", "{r}");
            assert!(
                r["name"].as_str().unwrap_or_default().starts_with("HHHH"),
                "{r}"
            );
        }
        Some("error" | "timeout") => assert_eq!(run.code, Some(1), "{r}"),
        other => panic!("unexpected status {other:?}: {r}"),
    }
}

/// The all-zeros server of `gamespy1.md` §6: answers a query with zero-filled datagrams
/// without end.
fn all_zeros(size: usize) -> Fake {
    Fake::start("127.0.0.1:0", move |_, _, _| Answer::Flood(vec![0u8; size]))
}

/// A GameSpy v1 query of an all-zeros server sending `size`-byte datagrams (500 ms attempts, 2
/// retries, a 2 s deadline) ends at a cap, in an error with no players: the server and the
/// result.
fn query_all_zeros_ends_at_a_cap(size: usize) -> (Fake, Value) {
    let fake = all_zeros(size);
    let run = query(
        "gamespy1",
        &fake.addr.to_string(),
        "500ms",
        "2",
        &["--deadline", "2s"],
    );
    let r = run.result();
    // A cap (64 KiB / 64 datagrams) ends it long before the attempt timeout or the deadline.
    assert!(
        run.elapsed < Duration::from_millis(1500),
        "{:?}",
        run.elapsed
    );
    assert_eq!(r["status"], "error", "zeros are no reply: {r}");
    assert_eq!(run.code, Some(1), "{r}");
    assert_eq!(r["players"].as_array().map(Vec::len), Some(0), "{r}");
    (fake, r)
}

#[test]
fn all_zeros_server_1400_byte_datagrams_ends_at_the_byte_cap() {
    let (fake, r) = query_all_zeros_ends_at_a_cap(1400);
    assert!(
        r["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&fake.addr.to_string()),
        "{r}"
    );
}

#[test]
fn all_zeros_server_512_byte_datagrams_ends_at_the_datagram_cap() {
    query_all_zeros_ends_at_a_cap(512);
}

#[test]
fn endless_sender_stops_at_the_overall_deadline() {
    // Teeworlds ignores zero datagrams, so only the overall deadline can end this query: many
    // retries, and a deadline well before they run out.
    let fake = all_zeros(1024);
    let run = query(
        "teeworlds",
        &fake.addr.to_string(),
        "300ms",
        "50",
        &["--deadline", "1s"],
    );
    let r = run.result();
    assert!(
        run.elapsed >= Duration::from_millis(900) && run.elapsed < Duration::from_secs(4),
        "deadline 1 s, took {:?}",
        run.elapsed
    );
    assert!(
        r["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&fake.addr.to_string()),
        "{r}"
    );
    assert!(
        matches!(r["status"].as_str(), Some("timeout" | "error")),
        "{r}"
    );
    assert_eq!(run.code, Some(1), "{r}");
}

#[test]
fn ipv6_loopback() {
    let Ok(socket) = UdpSocket::bind("[::1]:0") else {
        panic!("no IPv6 loopback ([::1]) on this host");
    };
    let fake = Fake::on(socket, gamespy_dropping(0));
    let addr = format!("[::1]:{}", fake.addr.port());
    let run = query("gamespy1", &addr, "300ms", "1", &[]);
    let r = assert_ok(&run);
    // The port given is the query port; the address a player connects to is the game port the
    // server reports (`hostport` 7777).
    assert_eq!(r["query_address"], addr.as_str(), "{r}");
    assert_eq!(r["address"], "[::1]:7777", "{r}");
    assert_eq!(r["name"], "Café Jérôme", "{r}");
    assert_eq!(r["num_players"], 3, "{r}");

    // Teeworlds over IPv6 too (0.6 extended request and 0.7 handshake).
    let tw = teeworlds_fake("[::1]:0", 2, 4, |replies| replies);
    let addr = format!("[::1]:{}", tw.addr.port());
    let r = assert_ok(&query("teeworlds", &addr, "300ms", "1", &[]));
    assert_eq!(r["address"], addr.as_str(), "{r}");
    assert_eq!(r["num_players"], 2, "{r}");
}

#[test]
fn hostname_localhost() {
    // The same server on 127.0.0.1 and, when free, [::1] with the same port: whichever address
    // `localhost` resolves to answers.
    let v4 = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = v4.local_addr().unwrap().port();
    let _v4 = Fake::on(v4, gamespy_dropping(0));
    let _v6 = UdpSocket::bind(("::1", port))
        .ok()
        .map(|s| Fake::on(s, gamespy_dropping(0)));
    let input = format!("localhost:{port}");
    let run = query("gamespy1", &input, "300ms", "1", &[]);
    let r = assert_ok(&run);
    assert_eq!(r["name"], "Café Jérôme", "{r}");
    assert!(
        r["query_address"]
            .as_str()
            .unwrap_or_default()
            .ends_with(&format!(":{port}")),
        "{r}"
    );
}

#[test]
fn endless_repeats_of_a_first_datagram_end_as_partial() {
    // A server that sends the first datagram of its reply over and over and never `\final\`:
    // only the reassembly's idle timer, its caps or the deadline can end the query.
    let [a, _] = ut2003_two_datagrams();
    let fake = Fake::start("127.0.0.1:0", move |_, _, _| Answer::Flood(a.clone()));
    let run = query(
        "gamespy1",
        &fake.addr.to_string(),
        "300ms",
        "1",
        &["--deadline", "2s"],
    );
    let r = run.result();
    assert!(run.elapsed < Duration::from_secs(4), "{:?}", run.elapsed);
    // The duplicates count towards the 64-datagram cap: a partial answer at once.
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["partial"], true, "{r}");
    assert!(r["partial_reason"].is_string(), "{r}");
    assert_eq!(r["name"], UT2003_DEMO_NAME, "{r}");
    assert_eq!(names(&r).len(), 9, "the first datagram's players: {r}");
    assert_eq!(run.code, Some(0), "{r}");
}
