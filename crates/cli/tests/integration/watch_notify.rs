//! `muster watch --notify` through the real binary, against fake game servers and fake chat
//! services on loopback. Each fake service checks the request format its real counterpart
//! documents (Discord's webhook execute and edit routes, Slack's incoming webhook,
//! Telegram's sendMessage / editMessageText, ntfy's JSON publish) and answers as it would.
//!
//! The tests wait (bounded by [`WAIT_LIMIT`]) for what they expect; the only durations
//! asserted are lower bounds a service asked for (a 429's wait).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_testkit::process::ScratchDir;
use serde_json::{Value, json};

use super::watch::{
    FAST, WAIT_LIMIT, assert_help_names, gameagent, player, read_http_request, state, wait_for,
};

/// A running `muster watch -f ndjson`; killed on drop.
struct Watch {
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Watch {
    fn start(args: &[&str]) -> Self {
        let mut all = args.to_vec();
        all.extend(["-f", "ndjson"]);
        all.extend(FAST);
        let (child, lines, stderr) = super::watch::Watch::spawn(&all);
        Self {
            child,
            lines,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// `muster watch` of the GameAgent server at `address` alone, with `extra` flags.
    fn gameagent(address: &str, extra: &[&str]) -> Self {
        let mut args = vec![address, "-p", "gameagent", "--given-port-only"];
        args.extend(extra);
        Self::start(&args)
    }

    /// The next `n` events, which must be of the kinds `want` (in any order within).
    fn expect(&self, want: &[&str]) -> Vec<Value> {
        let deadline = Instant::now() + WAIT_LIMIT;
        let mut got = Vec::new();
        while got.len() < want.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "waited for {want:?}, got {got:?}\nstderr:\n{}",
                    self.stderr()
                )
            });
            let v: Value = serde_json::from_str(&line).unwrap();
            got.push(v);
        }
        let mut kinds: Vec<&str> = got.iter().map(|v| v["event"].as_str().unwrap()).collect();
        let mut wanted = want.to_vec();
        kinds.sort_unstable();
        wanted.sort_unstable();
        assert_eq!(kinds, wanted, "{got:?}");
        got
    }

    /// SIGTERM, and wait for the exit (status 0).
    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert_eq!(s.code(), Some(0), "{}", self.stderr());
                return;
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request a fake service received.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    /// Path and query.
    target: String,
    content_type: String,
    body: Value,
    at: Instant,
}

/// How a fake service answers.
enum Reply {
    Answer(u16, Vec<(&'static str, String)>, String),
    /// Read the request and never answer.
    Hang,
}

/// A fake chat service on loopback: records every request and answers it with `reply`
/// (given the request and how many came before it). Each connection is answered once and
/// closed.
struct Service {
    base: String,
    requests: Arc<Mutex<Vec<Req>>>,
}

impl Service {
    fn start(reply: impl Fn(&Req, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind service");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (log, reply) = (requests.clone(), Arc::new(reply));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (log, reply) = (log.clone(), reply.clone());
                std::thread::spawn(move || {
                    let Some(req) = read_request(&mut stream) else {
                        return;
                    };
                    let answer = {
                        let mut log = log.lock().unwrap();
                        let answer = reply(&req, log.len());
                        log.push(req);
                        answer
                    };
                    match answer {
                        Reply::Answer(status, headers, body) => {
                            let mut head = format!(
                                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                                body.len()
                            );
                            for (k, v) in headers {
                                head.push_str(&format!("{k}: {v}\r\n"));
                            }
                            let _ = write!(stream, "{head}\r\n{body}");
                        }
                        Reply::Hang => {
                            // Hold the connection open, unanswered, until the client leaves.
                            let mut buf = [0u8; 64];
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
                            while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                        }
                    }
                });
            }
        });
        Self { base, requests }
    }

    fn requests(&self) -> Vec<Req> {
        self.requests.lock().unwrap().clone()
    }
}

fn json_reply(status: u16, body: Value) -> Reply {
    Reply::Answer(
        status,
        vec![("Content-Type", "application/json".into())],
        body.to_string(),
    )
}

fn read_request(stream: &mut TcpStream) -> Option<Req> {
    let (first, content_type, body) = read_http_request(stream)?;
    let mut parts = first.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    Some(Req {
        method,
        target,
        content_type,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    })
}

/// Words the headline of each kind of event has, in every service's format.
fn headline_word(kind: &str) -> &'static str {
    match kind {
        "server_up" => " is up",
        "server_down" => " is down",
        "player_joined" => " joined ",
        "player_left" => " left ",
        "map_changed" => ": map ",
        "name_changed" => " is now ",
        "server_full" => " is full",
        "slot_free" => " has a free slot",
        "friend_online" => " is online on ",
        "friend_offline" => " went offline ",
        other => panic!("unknown kind {other}"),
    }
}

/// Every event kind, to Discord, Slack, Telegram, ntfy and json at once: each gets every
/// event once, in order, in its format; the first request of Discord, Slack and Telegram is
/// answered 429 (each with its own way of saying how long to wait), and the same message
/// comes again no sooner than asked; Discord's empty bucket (`X-RateLimit-Remaining: 0`)
/// holds the next request until its reset.
#[test]
fn every_service_gets_every_event_once_in_order_and_429s_are_honoured() {
    let discord = Service::start(|r, n| {
        assert_eq!(r.method, "POST");
        assert_eq!(r.target, "/api/webhooks/1/tok");
        if n == 0 {
            return Reply::Answer(
                429,
                vec![
                    ("Retry-After", "1".into()),
                    ("Content-Type", "application/json".into()),
                ],
                json!({"message": "You are being rate limited.", "retry_after": 1.0, "global": false}).to_string(),
            );
        }
        if n == 1 {
            // The bucket is empty now, and refills in a second.
            return Reply::Answer(
                204,
                vec![
                    ("X-RateLimit-Remaining", "0".into()),
                    ("X-RateLimit-Reset-After", "1.000".into()),
                ],
                String::new(),
            );
        }
        Reply::Answer(204, vec![], String::new())
    });
    let slack = Service::start(|r, n| {
        assert_eq!(
            (r.method.as_str(), r.target.as_str()),
            ("POST", "/services/T0/B0/X0")
        );
        if n == 0 {
            return Reply::Answer(
                429,
                vec![("Retry-After", "1".into())],
                "rate_limited".into(),
            );
        }
        Reply::Answer(200, vec![], "ok".into())
    });
    let telegram = Service::start(|r, n| {
        assert_eq!(
            (r.method.as_str(), r.target.as_str()),
            ("POST", "/bot123:ABC/sendMessage")
        );
        if n == 0 {
            return json_reply(
                429,
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}),
            );
        }
        json_reply(
            200,
            json!({"ok": true, "result": {"message_id": 100 + n, "chat": {"id": 42}}}),
        )
    });
    let ntfy = Service::start(|r, _| {
        assert_eq!((r.method.as_str(), r.target.as_str()), ("POST", "/"));
        json_reply(200, json!({"id": "x", "event": "message"}))
    });
    let hook = Service::start(|_, _| Reply::Answer(200, vec![], String::new()));

    let server = gameagent(state("<Alpha & Co>", "Map1", 2, &["Bob", "Carl"]));
    let address = server.addr.to_string();
    let specs = [
        format!("discord:{}/api/webhooks/1/tok", discord.base),
        format!("slack:{}/services/T0/B0/X0", slack.base),
        format!("telegram:{}/bot123:ABC?chat_id=42", telegram.base),
        format!("ntfy:{}/alerts", ntfy.base),
        format!("json:{}/hook", hook.base),
    ];
    let mut args = vec!["--friend", "bob"];
    for s in &specs {
        args.extend(["--notify", s]);
    }
    let watch = Watch::gameagent(&address, &args);
    let mut events = watch.expect(&["server_up", "friend_online"]);
    server.change(|s| s.players.retain(|p| p.name != "Carl"));
    events.extend(watch.expect(&["player_left", "slot_free"]));
    server.change(|s| s.players.push(player("Dave")));
    events.extend(watch.expect(&["player_joined", "server_full"]));
    server.change(|s| s.map = "Map2".into());
    events.extend(watch.expect(&["map_changed"]));
    server.change(|s| s.name = "Beta".into());
    events.extend(watch.expect(&["name_changed"]));
    server.change(|s| s.players.retain(|p| p.name != "Bob"));
    events.extend(watch.expect(&["player_left", "friend_offline", "slot_free"]));
    server.answer(false);
    events.extend(watch.expect(&["server_down"]));
    let n = events.len();
    assert_eq!(n, 12);

    let delivered = |s: &Service, extra: usize| {
        wait_for("every event delivered", || s.requests().len() >= n + extra);
        s.requests()
    };
    // json: the very events of stdout, in order.
    let got: Vec<Value> = delivered(&hook, 0).into_iter().map(|r| r.body).collect();
    assert_eq!(got, events);

    // Discord: embeds; after the 429 the same message again, a second later at the earliest.
    let d = delivered(&discord, 1);
    assert_eq!(d.len(), n + 1);
    assert_eq!(d[0].body, d[1].body);
    assert!(
        d[1].at.duration_since(d[0].at) >= Duration::from_millis(950),
        "{:?}",
        d[1].at - d[0].at
    );
    assert!(
        d[2].at.duration_since(d[1].at) >= Duration::from_millis(950),
        "an empty bucket waits for its reset: {:?}",
        d[2].at - d[1].at
    );
    for (r, e) in d[1..].iter().zip(&events) {
        assert_eq!(r.content_type, "application/json");
        let embed = &r.body["embeds"][0];
        assert_eq!(embed["footer"]["text"], e["event"], "{}", r.body);
        assert!(
            embed["title"]
                .as_str()
                .unwrap()
                .contains(headline_word(e["event"].as_str().unwrap()))
        );
        assert_eq!(r.body["allowed_mentions"], json!({"parse": []}));
        assert!(
            embed["color"].is_u64() && embed["timestamp"].is_string(),
            "{}",
            r.body
        );
    }

    // Slack: text and blocks, names with &, < and > escaped.
    let s = delivered(&slack, 1);
    assert_eq!(s.len(), n + 1);
    assert_eq!(s[0].body, s[1].body);
    assert!(s[1].at.duration_since(s[0].at) >= Duration::from_millis(950));
    for (r, e) in s[1..].iter().zip(&events) {
        let text = r.body["text"].as_str().unwrap();
        assert!(
            text.contains(headline_word(e["event"].as_str().unwrap())),
            "{text} for {e}"
        );
        assert_eq!(r.body["blocks"][0]["type"], "section");
        assert_eq!(r.body["blocks"][0]["text"]["type"], "mrkdwn");
    }
    assert!(
        s[1].body["text"]
            .as_str()
            .unwrap()
            .starts_with("&lt;Alpha &amp; Co&gt; is up"),
        "{}",
        s[1].body
    );

    // Telegram: HTML, escaped; the wait came in the JSON body.
    let t = delivered(&telegram, 1);
    assert_eq!(t.len(), n + 1);
    assert_eq!(t[0].body, t[1].body);
    assert!(t[1].at.duration_since(t[0].at) >= Duration::from_millis(950));
    for (r, e) in t[1..].iter().zip(&events) {
        assert_eq!(r.body["chat_id"], 42);
        assert_eq!(r.body["parse_mode"], "HTML");
        let text = r.body["text"].as_str().unwrap();
        assert!(
            text.starts_with("<b>") && text.contains(headline_word(e["event"].as_str().unwrap())),
            "{text}"
        );
    }
    assert!(
        t[1].body["text"]
            .as_str()
            .unwrap()
            .starts_with("<b>&lt;Alpha &amp; Co&gt; is up</b>")
    );

    // ntfy: a JSON publish to the topic, with title, tags and priority.
    let f = delivered(&ntfy, 0);
    assert_eq!(f.len(), n);
    for (r, e) in f.iter().zip(&events) {
        assert_eq!(r.body["topic"], "alerts");
        assert!(
            r.body["title"]
                .as_str()
                .unwrap()
                .contains(headline_word(e["event"].as_str().unwrap()))
        );
        assert!(
            r.body["tags"].is_array() && r.body["priority"].is_u64(),
            "{}",
            r.body
        );
    }
    assert_eq!(f[n - 1].body["priority"], 4, "server_down is urgent");

    let log = watch.stderr();
    assert!(log.contains("rate limited"), "{log}");
    watch.terminate();
    // Nothing delivered twice.
    assert_eq!(hook.requests().len(), n);
    assert_eq!(discord.requests().len(), n + 1);
}

/// A 429 whose `Retry-After` is an HTTP date (its other form) is a wait until that date, not
/// a failure retried after the backoff: the same message comes again no sooner than asked.
#[test]
fn a_retry_after_date_is_honoured() {
    // Two seconds on, in whole seconds (the date's precision): at least a second from now.
    let until = std::time::SystemTime::now() + Duration::from_secs(2);
    let slack = Service::start(move |_, n| {
        if n == 0 {
            return Reply::Answer(
                429,
                vec![("Retry-After", httpdate::fmt_http_date(until))],
                "rate_limited".into(),
            );
        }
        Reply::Answer(200, vec![], "ok".into())
    });
    let server = gameagent(state("Alpha", "Map1", 8, &[]));
    let address = server.addr.to_string();
    let spec = format!("slack:{}/services/T0/B0/X0", slack.base);
    let watch = Watch::gameagent(&address, &["--notify", spec.as_str()]);
    watch.expect(&["server_up"]);
    wait_for("the message sent again", || slack.requests().len() >= 2);
    let r = slack.requests();
    assert_eq!(r[0].body, r[1].body);
    assert!(
        r[1].at.duration_since(r[0].at) >= Duration::from_millis(950),
        "{:?}",
        r[1].at - r[0].at
    );
    let log = watch.stderr();
    assert!(log.contains("rate limited"), "{log}");
    watch.terminate();
    assert_eq!(slack.requests().len(), 2, "delivered once");
}

/// `--status-message`: one message per server, posted once and edited after (Discord's
/// PATCH on the message, Telegram's editMessageText); a restart with the same --state-file
/// edits the same messages.
#[test]
fn status_messages_are_edited_in_place_and_across_restarts() {
    let discord = Service::start(|r, _| {
        if r.method == "POST" {
            assert_eq!(r.target, "/api/webhooks/1/tok?wait=true");
            json_reply(200, json!({"id": "900", "channel_id": "5"}))
        } else {
            assert_eq!(
                (r.method.as_str(), r.target.as_str()),
                ("PATCH", "/api/webhooks/1/tok/messages/900")
            );
            json_reply(200, json!({"id": "900", "channel_id": "5"}))
        }
    });
    let telegram = Service::start(|r, _| {
        if r.target.ends_with("/sendMessage") {
            json_reply(200, json!({"ok": true, "result": {"message_id": 77}}))
        } else {
            assert_eq!(r.target, "/bot1:T/editMessageText");
            assert_eq!(r.body["message_id"], 77);
            json_reply(200, json!({"ok": true, "result": {"message_id": 77}}))
        }
    });
    let scratch = ScratchDir::new("watch-status");
    let state_file = scratch.path().join("status.json");
    let state_arg = state_file.display().to_string();
    let server = gameagent(state("Alpha", "Map1", 8, &["Ann"]));
    let address = server.addr.to_string();
    let d = format!("discord:{}/api/webhooks/1/tok", discord.base);
    let t = format!("telegram:{}/bot1:T?chat_id=42", telegram.base);
    let args = [
        "--notify",
        d.as_str(),
        "--notify",
        t.as_str(),
        "--status-message",
        "--state-file",
        state_arg.as_str(),
    ];
    let watch = Watch::gameagent(&address, &args);
    watch.expect(&["server_up"]);
    server.change(|s| s.map = "Map2".into());
    watch.expect(&["map_changed"]);
    server.change(|s| s.players.push(player("Ben")));
    watch.expect(&["player_joined"]);
    // Changes that wait together (Telegram: one message a second per chat) make one edit:
    // wait for the board showing both changes.
    let shows_all = |s: &Service| {
        s.requests().last().is_some_and(|r| {
            let body = r.body.to_string();
            body.contains("Map2") && body.contains("2/8")
        })
    };
    wait_for("both boards up to date", || {
        shows_all(&discord) && shows_all(&telegram)
    });
    // Posted once, then edited.
    let methods: Vec<String> = discord
        .requests()
        .iter()
        .map(|r| r.method.clone())
        .collect();
    assert!(methods.len() >= 2, "{methods:?}");
    assert_eq!(methods[0], "POST");
    assert!(methods[1..].iter().all(|m| m == "PATCH"), "{methods:?}");
    let last = discord.requests().pop().unwrap();
    let fields = last.body["embeds"][0]["fields"].as_array().unwrap().clone();
    assert!(
        fields.contains(&json!({"name": "Map", "value": "Map2", "inline": true})),
        "{fields:?}"
    );
    assert!(
        fields.contains(&json!({"name": "Players", "value": "2/8", "inline": true})),
        "{fields:?}"
    );
    let paths: Vec<String> = telegram
        .requests()
        .iter()
        .map(|r| r.target.clone())
        .collect();
    assert!(paths.len() >= 2, "{paths:?}");
    assert_eq!(paths[0], "/bot1:T/sendMessage");
    assert!(
        paths[1..].iter().all(|p| p == "/bot1:T/editMessageText"),
        "{paths:?}"
    );
    let text = telegram.requests().pop().unwrap().body["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("<b>Alpha</b>") && text.contains("Map: Map2"),
        "{text}"
    );
    watch.terminate();

    // Again, with the ids kept: the first update is an edit.
    let (d_before, t_before) = (discord.requests().len(), telegram.requests().len());
    let watch = Watch::gameagent(&address, &args);
    watch.expect(&["server_up"]);
    wait_for("the restart's update", || {
        discord.requests().len() > d_before && telegram.requests().len() > t_before
    });
    assert_eq!(discord.requests()[d_before].method, "PATCH");
    assert_eq!(
        telegram.requests()[t_before].target,
        "/bot1:T/editMessageText"
    );
    watch.terminate();
    let kept = std::fs::read_to_string(&state_file).unwrap();
    assert!(
        !kept.contains("tok") && !kept.contains("bot1"),
        "no secrets in {kept}"
    );
}

/// A notifier that never answers holds up nothing: a server whose map changes every second
/// is reported at every change while the notifier's first request still hangs.
#[test]
fn a_hanging_notifier_never_delays_polling() {
    let hang = Service::start(|_, _| Reply::Hang);
    let server = gameagent(state("Alpha", "m0", 8, &[]));
    let address = server.addr.to_string();
    let spec = format!("discord:{}/api/webhooks/1/tok", hang.base);
    let watch = Watch::gameagent(&address, &["--notify", spec.as_str()]);
    watch.expect(&["server_up"]);
    wait_for("the notifier's request", || !hang.requests().is_empty());
    let start = Instant::now();
    for i in 1..=5 {
        server.change(|s| s.map = format!("m{i}"));
        let e = watch.expect(&["map_changed"]);
        assert_eq!(e[0]["map"], format!("m{i}"));
        // The next change a second after this one.
        let next = start + Duration::from_secs(i);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    // The request timeout is 10 s: had polling waited on the notifier, the first request
    // would have timed out and been sent again by now.
    assert_eq!(hang.requests().len(), 1, "{}", watch.stderr());
    watch.terminate();
}

/// `--when`: only the events that match are printed and sent; bad expressions and
/// notifiers are usage errors that say where.
#[test]
fn when_filters_what_is_reported_and_bad_flags_say_where() {
    let hook = Service::start(|_, _| Reply::Answer(200, vec![], String::new()));
    let server = gameagent(state("Alpha", "Map1", 8, &["Ann"]));
    let address = server.addr.to_string();
    let spec = format!("json:{}/hook", hook.base);
    let watch = Watch::gameagent(
        &address,
        &[
            "--notify",
            spec.as_str(),
            "--when",
            "players>=3 and player_joined",
            "--when",
            "map_changed or (server_up and players<2)",
        ],
    );
    // server_up with one player matches `players<2`.
    watch.expect(&["server_up"]);
    // Two join at once: each join is reported with the count after it, 3.
    server.change(|s| s.players.extend([player("Ben"), player("Cy")]));
    let e = watch.expect(&["player_joined", "player_joined"]);
    assert!(e.iter().all(|e| e["players"] == 3), "{e:?}");
    // A rename and a leave match nothing: the next line is the map change.
    server.change(|s| s.name = "Beta".into());
    server.change(|s| s.players.retain(|p| p.name != "Cy"));
    std::thread::sleep(Duration::from_millis(500));
    server.change(|s| s.map = "Map2".into());
    watch.expect(&["map_changed"]);
    wait_for("four deliveries", || hook.requests().len() >= 4);
    let kinds: Vec<Value> = hook
        .requests()
        .iter()
        .map(|r| r.body["event"].clone())
        .collect();
    assert_eq!(
        kinds,
        ["server_up", "player_joined", "player_joined", "map_changed"]
    );
    watch.terminate();

    for (flag, value, needle) in [
        ("--when", "players>=", "at column 10"),
        ("--when", "sever_down", "unknown word"),
        ("--notify", "teams:http://127.0.0.1:1/", "unknown notifier"),
        ("--notify", "telegram:http://127.0.0.1:1/bot1:T", "chat_id"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(["watch", "127.0.0.1:1", flag, value])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{flag} {value}: {err}");
    }
}

/// `muster watch --config FILE`: two watches side by side, each with its servers, its
/// conditions and its notifier; a wrong value is a usage error naming line, column and key.
#[test]
fn a_config_file_runs_several_watches_with_their_own_notifiers() {
    let first_hook = Service::start(|_, _| Reply::Answer(200, vec![], String::new()));
    let second_hook = Service::start(|_, _| Reply::Answer(200, vec![], String::new()));
    let first = gameagent(state("First", "Map1", 8, &[]));
    let second = gameagent(state("Second", "Map1", 8, &[]));
    let scratch = ScratchDir::new("watch-config");
    let config = scratch.path().join("watch.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[watch]]
servers = ["{first}"]
protocol = "gameagent"
given_port_only = true
interval = "150ms"
timeout = "300ms"
retries = 2
rate = 0
notify = ["json:{first_hook}/hook"]

[[watch]]
servers = ["{second}"]
protocol = "gameagent"
given_port_only = true
interval = "150ms"
timeout = "300ms"
retries = 2
rate = 0
when = ["not player_joined"]
notify = ["json:{second_hook}/hook"]
format = "ndjson"
"#,
            first = first.addr,
            second = second.addr,
            first_hook = first_hook.base,
            second_hook = second_hook.base,
        ),
    )
    .unwrap();
    let path = config.display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["watch", "--config", &path])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("both watches' server_up", || {
        !first_hook.requests().is_empty() && !second_hook.requests().is_empty()
    });
    first.change(|s| s.map = "Map2".into());
    // The join is filtered out of the second watch; the map change is not.
    second.change(|s| s.players.push(player("Ann")));
    std::thread::sleep(Duration::from_millis(500));
    second.change(|s| s.map = "Map2".into());
    wait_for("both map changes", || {
        first_hook.requests().len() >= 2 && second_hook.requests().len() >= 2
    });
    let kinds = |s: &Service| -> Vec<(Value, Value)> {
        s.requests()
            .iter()
            .map(|r| (r.body["event"].clone(), r.body["address"].clone()))
            .collect()
    };
    let a = json!(first.addr.to_string());
    let b = json!(second.addr.to_string());
    assert_eq!(
        kinds(&first_hook),
        [(json!("server_up"), a.clone()), (json!("map_changed"), a)]
    );
    assert_eq!(
        kinds(&second_hook),
        [(json!("server_up"), b.clone()), (json!("map_changed"), b)]
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));

    std::fs::write(
        &config,
        "[[watch]]\nservers = [\"127.0.0.1:1\"]\nwhen = [\"players >= 8 and\"]\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["watch", "--config", &path])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{path}:3:9: watch[0].when: at column 17: expected"
        )),
        "{err}"
    );
    // --config stands alone.
    let o = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["watch", "--config", &path, "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn help_explains_notifiers_status_messages_conditions_and_config() {
    assert_help_names(&[
        "--notify",
        "discord",
        "slack",
        "telegram",
        "ntfy",
        "chat_id",
        "--status-message",
        "--state-file",
        "--when",
        "--config",
        "players>=8",
    ]);
}
