//! Where `muster watch` events go: stdout (one line each), `--exec` commands and a `--webhook`.
//!
//! Deliveries never hold up polling: each event is put in a bounded queue that, when full,
//! drops its oldest entry (with a warning), and workers take from it. At most
//! [`EXEC_PARALLEL`] commands run at once; webhook posts go one at a time, in order, each
//! retried with backoff. At exit, what is queued or running gets [`SHUTDOWN_GRACE`] to finish.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::machine::Event;
use super::notify::{self, Notifier, StateFile};
use super::when::{self, When};
use crate::output::printable;

/// `--exec` commands running at once.
pub(crate) const EXEC_PARALLEL: usize = 4;
/// Events waiting for a command; beyond this the oldest waiting one is dropped.
pub(crate) const EXEC_QUEUE: usize = 256;
/// A command still running after this long is killed.
pub(crate) const EXEC_TIME_LIMIT: Duration = Duration::from_secs(60);
/// Events waiting for the webhook; beyond this the oldest waiting one is dropped.
pub(crate) const WEBHOOK_QUEUE: usize = 256;
/// Attempts per webhook event (the first and its retries).
pub(crate) const WEBHOOK_ATTEMPTS: u32 = 5;
/// The wait before the first webhook retry; doubled for each further one.
pub(crate) const WEBHOOK_BACKOFF: Duration = Duration::from_millis(500);
/// Longest one webhook request may take.
pub(crate) const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long queued and running deliveries may still take once the command is stopped.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// `-f` of `muster watch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EventFormat {
    /// One JSON object per event and line.
    Ndjson,
    /// One readable line per event.
    Text,
}

/// An event as JSON: the wire form of [`Event`] on stdout, on `--exec` stdin and in webhook
/// bodies.
#[derive(Debug, Serialize)]
struct EventJson<'a> {
    event: &'static str,
    address: &'a str,
    /// RFC 3339, UTC, milliseconds.
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    player: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    players: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_players: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// The event's JSON object, on one line (no newline at the end).
pub(crate) fn to_json(e: &Event) -> String {
    let json = EventJson {
        event: e.kind.name(),
        address: &e.address,
        time: humantime::format_rfc3339_millis(e.time).to_string(),
        player: e.player.as_deref(),
        name: e.name.as_deref(),
        map: e.map.as_deref(),
        previous: e.previous.as_deref(),
        players: e.players,
        max_players: e.max_players,
        error: e.error.as_deref(),
    };
    // A struct of strings and numbers always serialises.
    serde_json::to_string(&json).unwrap_or_default()
}

/// Width of the address column of text lines at least: an IPv4 address with its port
/// (`255.255.255.255:65535`). A longer address widens the column for the lines after it.
pub(crate) const ADDRESS_COLUMN: usize = 21;

/// The event as one readable line (no newline at the end), its address padded to `width`
/// characters so the columns after it line up; control characters in names are replaced so a
/// hostile name cannot drive the terminal.
pub(crate) fn to_text(e: &Event, width: usize) -> String {
    use super::machine::EventKind as K;
    let s = |v: &Option<String>| printable(v.as_deref().unwrap_or(""));
    let count = match (e.players, e.max_players) {
        (Some(n), Some(m)) => format!("{n}/{m} players"),
        (Some(n), None) => format!("{n} players"),
        _ => String::new(),
    };
    let detail = match e.kind {
        K::ServerUp => format!("\"{}\" on {}, {count}", s(&e.name), s(&e.map)),
        K::ServerDown => s(&e.error),
        K::PlayerJoined | K::PlayerLeft | K::FriendOnline | K::FriendOffline => s(&e.player),
        K::MapChanged => format!("{} -> {}", s(&e.previous), s(&e.map)),
        K::NameChanged => format!("\"{}\" -> \"{}\"", s(&e.previous), s(&e.name)),
        K::ServerFull | K::SlotFree => count,
    };
    let line = format!(
        "{}  {:<width$}  {:<14}  {detail}",
        humantime::format_rfc3339_seconds(e.time),
        printable(&e.address),
        e.kind.name(),
    );
    // An event without detail ends in its kind, not in padding.
    line.trim_end().to_owned()
}

/// A bounded queue that makes room by dropping its oldest entry.
#[derive(Debug)]
pub(crate) struct DropOldest<T> {
    state: Mutex<QueueState<T>>,
    notify: Notify,
    capacity: usize,
}

#[derive(Debug)]
struct QueueState<T> {
    items: VecDeque<T>,
    closed: bool,
}

impl<T> DropOldest<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                closed: false,
            }),
            notify: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add `item`; the entry dropped to make room, if the queue was full.
    pub(crate) fn push(&self, item: T) -> Option<T> {
        let dropped = {
            let mut s = self.lock();
            let dropped = if s.items.len() >= self.capacity {
                s.items.pop_front()
            } else {
                None
            };
            s.items.push_back(item);
            dropped
        };
        self.notify.notify_one();
        dropped
    }

    /// The oldest entry, waiting for one; `None` once closed and empty.
    pub(crate) async fn pop(&self) -> Option<T> {
        loop {
            // Registered before looking, so a push or close in between is not missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if let Some(item) = s.items.pop_front() {
                    return Some(item);
                }
                if s.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// The oldest entry, if one waits.
    pub(crate) fn try_pop(&self) -> Option<T> {
        self.lock().items.pop_front()
    }

    /// No more pushes: `pop` drains what is left, then returns `None`.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Entries waiting.
    pub(crate) fn len(&self) -> usize {
        self.lock().items.len()
    }
}

/// One event on its way to a command or the webhook.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    kind: &'static str,
    address: Arc<str>,
    json: Arc<str>,
}

/// Every destination of events.
#[derive(Debug)]
pub(crate) struct Sinks {
    format: EventFormat,
    /// The address column of text lines: [`ADDRESS_COLUMN`], or the longest address so far.
    address_width: usize,
    exec: Option<Arc<DropOldest<Delivery>>>,
    webhook: Option<Arc<DropOldest<Delivery>>>,
    /// `--notify` queues, and how many events each dropped.
    notify: Vec<NotifyQueue>,
    /// `--when`: the events reported (any may hold; all pass when empty).
    when: Vec<When>,
    workers: JoinSet<()>,
}

/// One `--notify` destination's queue.
#[derive(Debug)]
struct NotifyQueue {
    name: &'static str,
    queue: Arc<DropOldest<Event>>,
    /// `--status-message`: every event, whatever `--when` says (the board stays true).
    status: bool,
    dropped: u64,
}

impl Sinks {
    /// Sinks printing `format` to stdout and, if given, running `exec` and posting to
    /// `webhook` (an http or https URL, checked by the caller).
    pub(crate) fn new(
        format: EventFormat,
        exec: Option<String>,
        webhook: Option<reqwest::Url>,
    ) -> anyhow::Result<Self> {
        let mut workers = JoinSet::new();
        let exec = exec.map(|cmd| {
            let queue = Arc::new(DropOldest::new(EXEC_QUEUE));
            let cmd: Arc<str> = cmd.into();
            for _ in 0..EXEC_PARALLEL {
                let (queue, cmd) = (queue.clone(), cmd.clone());
                workers.spawn(async move {
                    while let Some(d) = queue.pop().await {
                        run_command(&cmd, &d, EXEC_TIME_LIMIT).await;
                    }
                });
            }
            queue
        });
        let webhook = match webhook {
            Some(url) => {
                let client = reqwest::Client::builder()
                    .timeout(WEBHOOK_TIMEOUT)
                    .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
                    // The URL given is where events go: a redirect (to another host, say) is
                    // a failure, not a second destination.
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| anyhow::anyhow!("cannot set up the webhook client: {e}"))?;
                let queue = Arc::new(DropOldest::new(WEBHOOK_QUEUE));
                let q = queue.clone();
                workers.spawn(async move {
                    while let Some(d) = q.pop().await {
                        post(&client, &url, &d).await;
                    }
                });
                Some(queue)
            }
            None => None,
        };
        Ok(Self {
            format,
            address_width: ADDRESS_COLUMN,
            exec,
            webhook,
            notify: Vec::new(),
            when: Vec::new(),
            workers,
        })
    }

    /// Report only the events that pass one of `when` (every sink but status messages).
    pub(crate) fn set_when(&mut self, when: Vec<When>) {
        self.when = when;
    }

    /// Also deliver every event to `n` (`--notify`), as a status board when `status`.
    pub(crate) fn add_notifier(
        &mut self,
        n: Notifier,
        status: bool,
        state: Option<Arc<StateFile>>,
    ) -> anyhow::Result<()> {
        let name = n.kind.name();
        let status = status && n.kind.edits();
        let queue = notify::spawn(n, status, state, &mut self.workers)?;
        self.notify.push(NotifyQueue {
            name,
            queue,
            status,
            dropped: 0,
        });
        Ok(())
    }

    /// Print `events` to `out` (flushed) and hand them to the command and the webhook.
    pub(crate) fn emit<W: Write>(&mut self, out: &mut W, events: &[Event]) -> io::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        for e in events {
            let passes = when::any(&self.when, e);
            for n in self.notify.iter_mut().filter(|n| n.status || passes) {
                if let Some(old) = n.queue.push(e.clone()) {
                    n.dropped += 1;
                    tracing::warn!(
                        "--notify {}: queue full, dropped the oldest waiting event ({} at {}; {} dropped so far)",
                        n.name,
                        old.kind.name(),
                        old.address,
                        n.dropped
                    );
                }
            }
            if !passes {
                continue;
            }
            let json: Option<Arc<str>> = (self.format == EventFormat::Ndjson
                || self.exec.is_some()
                || self.webhook.is_some())
            .then(|| to_json(e).into());
            match (self.format, &json) {
                (EventFormat::Ndjson, Some(json)) => writeln!(out, "{json}")?,
                _ => {
                    let len = printable(&e.address).chars().count();
                    self.address_width = self.address_width.max(len);
                    writeln!(out, "{}", to_text(e, self.address_width))?;
                }
            }
            let Some(json) = json else { continue };
            let delivery = Delivery {
                kind: e.kind.name(),
                address: e.address.clone(),
                json,
            };
            for (queue, what) in [(&self.exec, "--exec"), (&self.webhook, "--webhook")] {
                if let Some(q) = queue {
                    if let Some(old) = q.push(delivery.clone()) {
                        tracing::warn!(
                            "{what}: queue full, dropped the oldest waiting event ({} at {})",
                            old.kind,
                            old.address
                        );
                    }
                }
            }
        }
        out.flush()
    }

    /// Stop taking events; let what is queued or running finish for at most
    /// [`SHUTDOWN_GRACE`], then abandon the rest (running commands are killed).
    pub(crate) async fn close(mut self) {
        for q in [&self.exec, &self.webhook].into_iter().flatten() {
            q.close();
        }
        for n in &self.notify {
            n.queue.close();
        }
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while self.workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            let left: usize = [&self.exec, &self.webhook]
                .into_iter()
                .flatten()
                .map(|q| q.len())
                .sum::<usize>()
                + self.notify.iter().map(|n| n.queue.len()).sum::<usize>();
            tracing::warn!("stopping: deliveries still running abandoned, {left} never started");
            self.workers.shutdown().await;
        }
    }
}

/// The process group of one `--exec` command (its `sh` leads it, and everything the command
/// starts belongs to it): killed whole when the command overruns its time or is abandoned at
/// shutdown, so that no pipeline member or child outlives it.
#[derive(Debug)]
struct Group(Option<u32>);

impl Group {
    /// The command ended by itself: whatever it left running on purpose is its business.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            kill_group(pgid);
        }
    }
}

/// SIGKILL to every process of group `pgid`, with `kill(1)` (this crate has no unsafe code
/// and no system-call crate; the utility is on every system that has `sh`).
fn kill_group(pgid: u32) {
    let killed = std::process::Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pgid}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if let Err(e) = killed {
        tracing::warn!("--exec: cannot kill the command's process group {pgid}: {e}");
    }
}

/// Run `sh -c cmd` for one event, in a process group of its own: its JSON on stdin,
/// `MUSTER_EVENT` and `MUSTER_ADDRESS` set, its stdout sent to our stderr (stdout carries the
/// events). Failures are logged; after `limit`, or when this future is dropped (shutdown),
/// the whole group is killed.
async fn run_command(cmd: &str, d: &Delivery, limit: Duration) {
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(cmd)
        .env("MUSTER_EVENT", d.kind)
        .env("MUSTER_ADDRESS", &*d.address)
        .stdin(std::process::Stdio::piped())
        .stdout(stdout_for_commands())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(
                "--exec: cannot start sh for {} at {}: {e}",
                d.kind,
                d.address
            );
            return;
        }
    };
    // The group's id is its leader's pid, `sh`'s.
    let mut group = Group(child.id());
    let run = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input is no failure.
            let _ = stdin.write_all(d.json.as_bytes()).await;
            let _ = stdin.write_all(b"\n").await;
        }
        child.wait().await
    };
    let outcome = tokio::time::timeout(limit, run).await;
    if outcome.is_ok() {
        group.disarm();
    }
    match outcome {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => {
            tracing::warn!(
                "--exec: command for {} at {} failed: {status}",
                d.kind,
                d.address
            );
        }
        Ok(Err(e)) => tracing::warn!("--exec: waiting for the command failed: {e}"),
        Err(_) => {
            // Dropping `group` kills every process of the command.
            tracing::warn!(
                "--exec: command for {} at {} still running after {}s: killed",
                d.kind,
                d.address,
                limit.as_secs()
            );
        }
    }
}

/// Our stderr, for a command's stdout.
fn stdout_for_commands() -> std::process::Stdio {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd as _;
        if let Ok(fd) = io::stderr().as_fd().try_clone_to_owned() {
            return fd.into();
        }
    }
    std::process::Stdio::null()
}

/// Whether a webhook answer is worth another attempt.
fn retryable(status: reqwest::StatusCode) -> bool {
    status.is_server_error()
        || status == reqwest::StatusCode::REQUEST_TIMEOUT
        || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// POST one event, retrying failures (no answer, 5xx, 408, 429) with doubling waits.
async fn post(client: &reqwest::Client, url: &reqwest::Url, d: &Delivery) {
    let mut wait = WEBHOOK_BACKOFF;
    for attempt in 1..=WEBHOOK_ATTEMPTS {
        let sent = client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(d.json.to_string())
            .send()
            .await;
        let why = match sent {
            Ok(r) if r.status().is_success() => return,
            Ok(r) if !retryable(r.status()) => {
                let redirect = if r.status().is_redirection() {
                    " (redirects are not followed)"
                } else {
                    ""
                };
                tracing::warn!(
                    "--webhook: {} for {} at {}: {}{redirect}; not retried",
                    url,
                    d.kind,
                    d.address,
                    r.status()
                );
                return;
            }
            Ok(r) => r.status().to_string(),
            Err(e) => muster_proto::errors::error_chain(&e),
        };
        if attempt == WEBHOOK_ATTEMPTS {
            tracing::warn!(
                "--webhook: {url} for {} at {}: {why}; gave up after {attempt} attempts",
                d.kind,
                d.address
            );
            return;
        }
        tracing::warn!(
            "--webhook: {url} for {} at {}: {why}; retrying in {}ms",
            d.kind,
            d.address,
            wait.as_millis()
        );
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::watch::machine::EventKind;

    fn event(kind: EventKind) -> Event {
        Event {
            kind,
            address: "play.example:7777".into(),
            time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_064_800_250),
            name: Some("My \u{1b}[2JServer".into()),
            map: Some("DM-Antalus".into()),
            players: Some(3),
            max_players: Some(16),
            player: None,
            previous: None,
            error: None,
        }
    }

    #[test]
    fn json_has_kind_address_time_and_the_kinds_fields() {
        let mut e = event(EventKind::MapChanged);
        e.previous = Some("DM-Rankin".into());
        let v: serde_json::Value = serde_json::from_str(&to_json(&e)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "event": "map_changed",
                "address": "play.example:7777",
                "time": "2025-11-25T10:00:00.250Z",
                "name": "My \u{1b}[2JServer",
                "map": "DM-Antalus",
                "previous": "DM-Rankin",
                "players": 3,
                "max_players": 16,
            })
        );
        let mut e = event(EventKind::FriendOnline);
        e.player = Some("Bob".into());
        let v: serde_json::Value = serde_json::from_str(&to_json(&e)).unwrap();
        assert_eq!(v["player"], "Bob");
        assert!(v.get("previous").is_none());
    }

    #[test]
    fn text_lines_are_readable_and_escape_control_characters() {
        let mut up = event(EventKind::ServerUp);
        up.players = Some(3);
        assert_eq!(
            to_text(&up, ADDRESS_COLUMN),
            "2025-11-25T10:00:00Z  play.example:7777      server_up       \"My \u{fffd}[2JServer\" on DM-Antalus, 3/16 players"
        );
        let mut joined = event(EventKind::PlayerJoined);
        joined.player = Some("Bob".into());
        assert!(to_text(&joined, ADDRESS_COLUMN).ends_with("player_joined   Bob"));
        let mut renamed = event(EventKind::NameChanged);
        renamed.previous = Some("Old".into());
        assert!(to_text(&renamed, ADDRESS_COLUMN).ends_with("\"Old\" -> \"My \u{fffd}[2JServer\""));
        let mut full = event(EventKind::ServerFull);
        full.max_players = None;
        assert!(to_text(&full, ADDRESS_COLUMN).ends_with("server_full     3 players"));
    }

    #[test]
    fn every_kind_has_a_text_line() {
        for kind in EventKind::ALL {
            let line = to_text(&event(kind), ADDRESS_COLUMN);
            assert!(line.contains(kind.name()), "{line}");
        }
    }

    #[test]
    fn text_columns_line_up_across_addresses() {
        let mut sinks = Sinks::new(EventFormat::Text, None, None).unwrap();
        let mut events = Vec::new();
        for (address, kind) in [
            ("10.0.0.1:7777", EventKind::ServerUp),
            ("203.0.113.250:27015", EventKind::ServerDown),
            ("[2001:db8::1]:8303", EventKind::SlotFree),
        ] {
            let mut e = event(kind);
            e.address = address.into();
            events.push(e);
        }
        let mut out = Vec::new();
        sinks.emit(&mut out, &events).unwrap();
        let text = String::from_utf8(out).unwrap();
        let columns: Vec<usize> = text
            .lines()
            .map(|l| {
                let kind = EventKind::ALL
                    .iter()
                    .find(|k| l.contains(k.name()))
                    .unwrap();
                l.find(kind.name()).unwrap()
            })
            .collect();
        assert_eq!(columns.len(), 3, "{text}");
        assert!(columns.iter().all(|c| *c == columns[0]), "{text}");
        // A longer address widens the column from its line on.
        let mut long = event(EventKind::ServerUp);
        long.address = "a-rather-long-host-name.example:7777".into();
        let mut out = Vec::new();
        sinks
            .emit(&mut out, &[long, event(EventKind::SlotFree)])
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let at: Vec<usize> = text
            .lines()
            .zip(["server_up", "slot_free"])
            .map(|(l, k)| l.find(k).unwrap())
            .collect();
        assert_eq!(at[0], at[1], "{text}");
    }

    /// Whether process `pid` still runs (a zombie does not).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn an_abandoned_command_is_killed_with_everything_it_started() {
        let scratch = muster_testkit::process::ScratchDir::new("exec-group");
        let pid_file = scratch.path().join("pid");
        // A pipeline whose first member is `sleep` (its pid written first): only killing
        // the whole process group ends it.
        let cmd = format!(
            "sh -c 'echo $$ > \"{}\"; exec sleep 98' | cat",
            pid_file.display()
        );
        let d = Delivery {
            kind: "server_up",
            address: "127.0.0.1:1".into(),
            json: "{}".into(),
        };
        let running = tokio::spawn(async move {
            run_command(&cmd, &d, Duration::from_secs(3600)).await;
        });
        let limit = std::time::Instant::now() + Duration::from_secs(20);
        let pid = loop {
            let written = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Ok(pid) = written.trim().parse::<u32>() {
                break pid;
            }
            assert!(
                std::time::Instant::now() < limit,
                "the command never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(alive(pid));
        // What shutdown does to a command still running after the grace time.
        running.abort();
        let _ = running.await;
        while alive(pid) {
            assert!(
                std::time::Instant::now() < limit,
                "sleep {pid} survived its command"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_its_oldest_entry_and_close_drains() {
        let q = DropOldest::new(2);
        assert_eq!(q.push(1), None);
        assert_eq!(q.push(2), None);
        assert_eq!(q.push(3), Some(1));
        assert_eq!(q.len(), 2);
        q.close();
        assert_eq!(q.pop().await, Some(2));
        assert_eq!(q.pop().await, Some(3));
        assert_eq!(q.pop().await, None);
    }

    #[tokio::test]
    async fn a_waiting_pop_wakes_on_push_and_on_close() {
        let q = Arc::new(DropOldest::new(4));
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { (q.pop().await, q.pop().await) })
        };
        tokio::task::yield_now().await;
        q.push("x");
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(waiter.await.unwrap(), (Some("x"), None));
    }

    #[tokio::test]
    async fn a_full_notifier_queue_drops_its_oldest_and_counts_them() {
        // On this one-thread runtime the worker cannot run while `emit` pushes.
        let mut sinks = Sinks::new(EventFormat::Ndjson, None, None).unwrap();
        let n = Notifier::parse("json:http://127.0.0.1:1/hook").unwrap();
        sinks.add_notifier(n, false, None).unwrap();
        let events: Vec<Event> = (0..300)
            .map(|i| {
                let mut e = event(EventKind::PlayerJoined);
                e.players = Some(i);
                e
            })
            .collect();
        sinks.emit(&mut Vec::new(), &events).unwrap();
        let q = &sinks.notify[0];
        assert_eq!(q.dropped, 300 - notify::QUEUE as u64);
        assert_eq!(q.queue.len(), notify::QUEUE);
        assert_eq!(
            q.queue.try_pop().unwrap().players,
            Some(44),
            "the oldest went"
        );
    }

    #[tokio::test]
    async fn when_filters_every_sink_but_status_boards() {
        let mut sinks = Sinks::new(EventFormat::Ndjson, None, None).unwrap();
        sinks.set_when(vec![When::parse("server_down").unwrap()]);
        let board = Notifier::parse("discord:http://127.0.0.1:1/api/webhooks/1/t").unwrap();
        let plain = Notifier::parse("json:http://127.0.0.1:1/hook").unwrap();
        sinks.add_notifier(board, true, None).unwrap();
        sinks.add_notifier(plain, true, None).unwrap();
        let mut out = Vec::new();
        let events = [event(EventKind::ServerUp), event(EventKind::ServerDown)];
        sinks.emit(&mut out, &events).unwrap();
        let printed = String::from_utf8(out).unwrap();
        assert_eq!(printed.lines().count(), 1, "{printed}");
        assert!(printed.contains("server_down"));
        // Discord keeps a board: both events. json cannot edit: filtered like stdout.
        assert!(sinks.notify[0].status && !sinks.notify[1].status);
        assert_eq!(sinks.notify[0].queue.len(), 2);
        assert_eq!(sinks.notify[1].queue.len(), 1);
    }

    #[test]
    fn retry_only_what_may_succeed_later() {
        use reqwest::StatusCode;
        assert!(retryable(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(retryable(StatusCode::SERVICE_UNAVAILABLE));
        assert!(retryable(StatusCode::TOO_MANY_REQUESTS));
        assert!(!retryable(StatusCode::NOT_FOUND));
        assert!(!retryable(StatusCode::BAD_REQUEST));
    }
}
