//! `muster-bench browse`: how fast `muster browse --tui` fills its first screen, how its ping
//! column compares with `muster query`, and its memory with 20,000 servers listed.
//!
//! Set-up, all on loopback: two `muster serve` processes with only their Quake III face on
//! (loopback servers allowed, the poller off, the abuse limits raised so that 1,000 servers
//! heartbeating from 127.0.0.1 at once are taken in one go), and one `muster emulate` farm of
//! ioquake3 servers named `Bench NNNN` (NNNN = their index, so a row on screen names its
//! address), half heartbeating to each master, each replying after a fixed delay of 20, 30,
//! 40, 50 or 60 ms (index mod 5), no loss. The bench waits until `muster list` shows every
//! server on both masters before anything is timed.
//!
//! Speed: each run starts `muster browse --tui` with the two masters in a detached tmux
//! session of a fixed size (its own socket), and reads the screen with `capture-pane` from
//! the moment the session is started, every `--poll`. It records when the first server row
//! appears, when the first row shows a ping, and when the first screen is full: the header
//! counts every server, the status line says every master answered (none asking, none
//! unreachable), and every table row the terminal has room for shows a server with a ping in
//! milliseconds (not `…` or `down`). The instants are those at which `capture-pane` returned.
//!
//! Ping: one more run after the timed ones, whose screen is captured only every
//! `--ping-poll` (a capture is a `tmux` process: every 2 ms they take a good part of the two
//! cores the farm and the browser share while the first round is out, and delay the farm's
//! replies; the timed runs need them, the pings they would measure are the bench's own load).
//! The first `--ping-sample` rows of its full first screen, and the first `--ping-sample` rows
//! of its screen one refresh later (the rows differ where servers tie on players), each
//! against `muster query -p quake3 ADDR -f json` (the median of three runs per server, all
//! three shown), run after the browser quit; the largest difference is given for each screen.
//!
//! Memory: a DDNet `servers.json` file listing dead Teeworlds addresses in `127.77.x.y`
//! (nothing answers there), given with the two masters so that 20,000 servers are listed in
//! all; once the list is in and the first screen is full, the browser's VmRSS is sampled for
//! `--memory-wait` while its first query round goes out, and VmHWM read at the end.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::procs::{self, KillOnDrop};
use crate::table;

/// Longest wait for a child to bind, the masters to list the farm, or a screen to fill.
const SETUP_LIMIT: Duration = Duration::from_secs(120);
/// Longest wait for the browser's first screen.
const SCREEN_LIMIT: Duration = Duration::from_secs(60);
/// Separate `muster query` runs per compared server; their median is the reference.
const QUERY_SAMPLES: usize = 3;
/// The relative ping difference the issue asks for at most.
const PING_GOAL: f64 = 0.10;
/// Name of the tmux session (each bench run has its own tmux server).
const SESSION: &str = "browse";

/// Flags of `muster-bench browse`.
#[derive(Debug, clap::Args)]
pub(crate) struct BrowseArgs {
    /// Emulated servers in all, split evenly over the two masters.
    #[arg(long, default_value_t = 2000)]
    servers: usize,
    /// Timed runs (median and spread are printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Servers listed in all for the memory measurement (the emulated ones plus dead
    /// addresses); 0 skips it.
    #[arg(long, default_value_t = 20_000)]
    memory_servers: usize,
    /// How long the browser's memory is sampled once its list is in.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    memory_wait: Duration,
    /// Rows of the first screen whose ping is compared with `muster query`.
    #[arg(long, default_value_t = 10)]
    ping_sample: usize,
    /// Terminal width.
    #[arg(long, default_value_t = 120)]
    width: u16,
    /// Terminal height.
    #[arg(long, default_value_t = 40)]
    height: u16,
    /// Sleep between two screen captures in the timed runs.
    #[arg(long, default_value = "2ms", value_parser = crate::parse_duration)]
    poll: Duration,
    /// Sleep between two screen captures in the run whose pings are compared (well below the
    /// browser's 5 s refresh, so that its first screen is still the first round's).
    #[arg(long, default_value = "100ms", value_parser = crate::parse_duration)]
    ping_poll: Duration,
    /// First game port of the farm (one port per server, on 127.0.0.1).
    #[arg(long, default_value_t = 28_000)]
    base_port: u16,
    /// The `muster` binary; default: the one beside this bench.
    #[arg(long)]
    muster: Option<PathBuf>,
}

/// A server's reply delay in the farm, ms.
fn delay_ms(i: usize) -> u64 {
    20 + 10 * (i % 5) as u64
}

/// Players of server `i` (so the default sort, most players first, has a stable top).
fn players_of(i: usize) -> usize {
    i % 9
}

/// The index in a `Bench NNNN` name.
fn bench_index(name: &str) -> Option<usize> {
    name.trim().strip_prefix("Bench ")?.parse().ok()
}

// ---------------------------------------------------------------------------------------
// Reading the screen

/// What a row's ping cell shows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ping {
    /// A ping in milliseconds (the browser shows tenths below 10 ms, whole ms above).
    Ms(f64),
    /// `…`: not answered yet.
    Waiting,
    /// `down`.
    Down,
    /// Anything else (an answer without a ping).
    Other,
}

/// One table row on screen.
#[derive(Debug, Clone, PartialEq)]
struct ScreenRow {
    name: String,
    ping: Ping,
}

/// What one `capture-pane` of the table shows.
#[derive(Debug, Clone, Default, PartialEq)]
struct Screen {
    /// `muster browse: N servers, M shown`.
    total: Option<usize>,
    /// `masters: N ok`.
    masters_ok: Option<usize>,
    /// `N asking`.
    asking: usize,
    /// `N unreachable`.
    unreachable: usize,
    /// The table rows, top first.
    rows: Vec<ScreenRow>,
    /// Rows the table has room for (between its header and the status line).
    room: usize,
}

/// The number right before `word` in `text` (`"3 asking"` → 3).
fn number_before(text: &str, word: &str) -> Option<usize> {
    let at = text.find(word)?;
    text.get(..at)?.trim_end().rsplit(' ').next()?.parse().ok()
}

impl Screen {
    /// Reads a captured screen of `muster browse --tui` showing its table: the header line
    /// (`muster browse: …`), the table header (`NAME … PING`), the rows, the status line
    /// (`masters: …`) and the keys. Anything else (an empty or half-drawn screen) reads as
    /// an empty screen.
    fn parse(text: &str) -> Self {
        let lines: Vec<&str> = text.lines().collect();
        let mut s = Self::default();
        if let Some(h) = lines.iter().find_map(|l| l.strip_prefix("muster browse: ")) {
            s.total = h.split(' ').next().and_then(|n| n.parse().ok());
        }
        let status = lines.iter().rposition(|l| l.starts_with("masters: "));
        if let Some(l) = status.and_then(|i| lines.get(i)) {
            s.masters_ok = number_before(l, " ok");
            s.asking = number_before(l, " asking").unwrap_or(0);
            s.unreachable = number_before(l, " unreachable").unwrap_or(0);
        }
        let head = lines
            .iter()
            .position(|l| l.contains(" NAME ") && l.trim_end().ends_with("PING"));
        let (Some(head), Some(status)) = (head, status) else {
            return s;
        };
        if status <= head {
            return s;
        }
        s.room = status - head - 1;
        // The name cell runs from NAME to GAME (the columns are padded by display width,
        // and the header is ASCII).
        let header: Vec<char> = lines.get(head).copied().unwrap_or("").chars().collect();
        let find = |word: &str| {
            let w: Vec<char> = word.chars().collect();
            header.windows(w.len()).position(|x| x == w.as_slice())
        };
        let (Some(name_at), Some(game_at)) = (find("NAME"), find("GAME")) else {
            return s;
        };
        for line in lines.get(head + 1..status).unwrap_or_default() {
            if line.trim().is_empty() {
                continue;
            }
            let chars: Vec<char> = line.chars().collect();
            let name: String = chars
                .get(name_at..game_at.min(chars.len()))
                .unwrap_or_default()
                .iter()
                .collect();
            let ping = match line.split_whitespace().last() {
                Some("…") => Ping::Waiting,
                Some("down") => Ping::Down,
                Some(t) => t
                    .parse::<f64>()
                    .ok()
                    .filter(|ms| ms.is_finite() && *ms >= 0.0)
                    .map_or(Ping::Other, Ping::Ms),
                None => Ping::Other,
            };
            s.rows.push(ScreenRow {
                name: name.trim().to_owned(),
                ping,
            });
        }
        s
    }

    /// A server row is on screen.
    fn has_row(&self) -> bool {
        !self.rows.is_empty()
    }

    /// A row shows a ping.
    fn has_ping(&self) -> bool {
        self.rows.iter().any(|r| matches!(r.ping, Ping::Ms(_)))
    }

    /// The full first screen: `servers` counted, all `masters` answered, and every row the
    /// table has room for shows a server with a ping.
    fn full(&self, masters: usize, servers: usize) -> bool {
        self.total == Some(servers)
            && self.masters_ok == Some(masters)
            && self.asking == 0
            && self.unreachable == 0
            && self.room > 0
            && self.rows.len() == self.room.min(servers)
            && self.rows.iter().all(|r| matches!(r.ping, Ping::Ms(_)))
    }

    /// The ping shown for `name`.
    fn ping_of(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| match r.ping {
                Ping::Ms(p) => Some(p),
                _ => None,
            })
    }
}

// ---------------------------------------------------------------------------------------
// tmux

/// A tmux server of the bench's own, running one command in a session of a fixed size.
/// Killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(run: usize, command: &str, width: u16, height: u16) -> anyhow::Result<Self> {
        let t = Self {
            socket: format!("musterbench-{}-{run}", std::process::id()),
        };
        let (w, h) = (width.to_string(), height.to_string());
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            SESSION,
            "-x",
            &w,
            "-y",
            &h,
            command,
        ])?;
        Ok(t)
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::null())
            .output()
            .context("running tmux")?;
        if !out.status.success() {
            bail!(
                "tmux {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn capture(&self) -> anyhow::Result<String> {
        self.run(&["capture-pane", "-p", "-t", SESSION])
    }

    /// The process in the pane (the browser: the command is `exec`ed).
    fn pane_pid(&self) -> anyhow::Result<u32> {
        let out = self.run(&["list-panes", "-t", SESSION, "-F", "#{pane_pid}"])?;
        out.trim().parse().context("tmux pane pid")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// VmRSS and VmHWM of `pid`, bytes.
fn memory_of(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let l = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

// ---------------------------------------------------------------------------------------
// Set-up

/// Starts `muster serve` with only a Quake III face on 127.0.0.1 and returns its address.
fn start_master(muster: &Path, dir: &Path, tag: &str) -> anyhow::Result<(KillOnDrop, SocketAddr)> {
    let data = dir.join(tag);
    std::fs::create_dir_all(&data)?;
    let config = data.join("muster.toml");
    std::fs::write(
        &config,
        "[listen]\ngameagent = \"off\"\ngamespy_udp = \"off\"\ngamespy_tcp = \"off\"\n\
         teeworlds07 = \"off\"\nteeworlds06 = \"off\"\nhttp = \"off\"\nmgmt = \"off\"\n\
         valve = \"off\"\nquake3 = \"127.0.0.1:0\"\n\n\
         [limits]\nheartbeat_burst = 100000\nchallenge_burst = 100000\n\
         pending_per_ip = 16384\npending_per_prefix = 16384\n\
         egress_bytes_per_sec = 1073741824\nservers_per_source = 100000\n\n\
         [poller]\nenabled = false\n\n[quake3]\nallow_loopback = true\n",
    )?;
    let mut cmd = Command::new(muster);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(&data)
        .arg("-q")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(data.join("stderr"))?);
    procs::spawn_until_ready(cmd, "muster serve", SETUP_LIMIT, |line| {
        line.strip_prefix("listening quake3 udp ")
            .and_then(|a| a.trim().parse::<SocketAddr>().ok())
    })?
    .with_context(|| {
        format!(
            "muster serve ({tag}) did not report its Quake III face (see {})",
            data.join("stderr").display()
        )
    })
}

/// The farm: `servers` ioquake3 servers, even ones registering with `a`, odd ones with `b`.
fn farm_toml(servers: usize, base_port: u16, a: SocketAddr, b: SocketAddr) -> String {
    let mut out = String::from("seed = 1\nbind = \"127.0.0.1\"\n");
    for i in 0..servers {
        let master = if i % 2 == 0 { a } else { b };
        let _ = write!(
            out,
            "\n[[server]]\nprotocol = \"quake3\"\nport = {}\nname = \"Bench {i:04}\"\n\
             map = \"q3dm{}\"\nmax_players = 16\nmasters = [\"quake3:{master}\"]\n\
             delay = \"{}ms\"\nplayers = [",
            usize::from(base_port) + i,
            i % 19 + 1,
            delay_ms(i)
        );
        for p in 0..players_of(i) {
            let sep = if p == 0 { "" } else { ", " };
            let _ = write!(
                out,
                "{sep}{{ name = \"Player{p}\", score = {p}, ping = 30 }}"
            );
        }
        out.push_str("]\n");
    }
    out
}

/// Starts `muster emulate` and waits until every server is bound.
fn start_farm(muster: &Path, config: &Path, servers: usize) -> anyhow::Result<KillOnDrop> {
    // One log line per registration: kept in a file beside the farm.
    let log = config.with_extension("stderr");
    let stderr = std::fs::File::create(&log)?;
    procs::start_farm(muster, config, servers, stderr.into(), SETUP_LIMIT)?.with_context(|| {
        format!(
            "muster emulate did not bind every server (see {})",
            log.display()
        )
    })
}

/// Servers `muster list` reads from the Quake III master at `addr`.
fn listed(muster: &Path, addr: SocketAddr) -> anyhow::Result<usize> {
    let out = Command::new(muster)
        .args(["list", "-p", "quake3", "-q", "-f", "ndjson"])
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("running muster list")?;
    Ok(out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count())
}

/// Waits until the master at `addr` lists `want` servers.
fn wait_listed(muster: &Path, addr: SocketAddr, want: usize) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let n = listed(muster, addr)?;
        if n >= want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > SETUP_LIMIT {
            bail!("the master at {addr} lists {n} of {want} servers");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

// ---------------------------------------------------------------------------------------
// Runs

/// One timed run.
#[derive(Debug)]
struct Run {
    first_frame: Duration,
    first_row: Duration,
    first_ping: Duration,
    full: Duration,
    /// The full first screen.
    screen: Screen,
    /// The same table one refresh later.
    settled: Option<Screen>,
    /// The browser's VmRSS at the full screen.
    rss: Option<u64>,
    /// Captures taken and their median period.
    captures: usize,
    period: Duration,
}

/// What [`watch`] saw.
#[derive(Debug)]
struct Watched {
    /// The browser's first frame: its header line.
    first_frame: Option<Duration>,
    first_row: Option<Duration>,
    first_ping: Option<Duration>,
    done: Duration,
    screen: Screen,
    /// When each capture returned.
    stamps: Vec<Duration>,
}

/// Polls the screen until `done`, noting when the first row and the first ping appeared.
fn watch(
    tmux: &Tmux,
    start: Instant,
    poll: Duration,
    done: impl Fn(&Screen) -> bool,
) -> anyhow::Result<Watched> {
    let (mut first_frame, mut first_row, mut first_ping) = (None, None, None);
    let mut stamps = Vec::new();
    loop {
        let text = tmux.capture()?;
        let at = start.elapsed();
        stamps.push(at);
        let s = Screen::parse(&text);
        if first_frame.is_none() && s.total.is_some() {
            first_frame = Some(at);
        }
        if first_row.is_none() && s.has_row() {
            first_row = Some(at);
        }
        if first_ping.is_none() && s.has_ping() {
            first_ping = Some(at);
        }
        if done(&s) {
            return Ok(Watched {
                first_frame,
                first_row,
                first_ping,
                done: at,
                screen: s,
                stamps,
            });
        }
        if at > SCREEN_LIMIT {
            bail!(
                "no full first screen within {} s; the screen:\n{text}",
                SCREEN_LIMIT.as_secs()
            );
        }
        std::thread::sleep(poll);
    }
}

fn median_period(stamps: &[Duration]) -> Duration {
    let mut gaps: Vec<Duration> = stamps
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    gaps.sort();
    gaps.get(gaps.len() / 2).copied().unwrap_or_default()
}

fn browse_command(muster: &Path, masters: &[String], profile: &Path) -> String {
    let mut c = format!("exec {} browse --tui", muster.display());
    for m in masters {
        let _ = write!(c, " --master {m}");
    }
    let _ = write!(c, " --profile {}", profile.display());
    c
}

fn timed_run(
    args: &BrowseArgs,
    n: usize,
    muster: &Path,
    masters: &[String],
    dir: &Path,
    poll: Duration,
    settle: bool,
) -> anyhow::Result<Run> {
    let profile = dir.join(format!("profile-{n}"));
    let command = browse_command(muster, masters, &profile);
    let start = Instant::now();
    let tmux = Tmux::start(n, &command, args.width, args.height)?;
    let pid = tmux.pane_pid()?;
    let w = watch(&tmux, start, poll, |s| s.full(masters.len(), args.servers))?;
    let rss = memory_of(pid).map(|(rss, _)| rss);
    let settled = if settle {
        // The browser queries the rows on screen again every 5 s (its default --refresh).
        std::thread::sleep(Duration::from_secs(6));
        Some(Screen::parse(&tmux.capture()?))
    } else {
        None
    };
    drop(tmux);
    Ok(Run {
        first_frame: w.first_frame.unwrap_or(w.done),
        first_row: w.first_row.unwrap_or(w.done),
        first_ping: w.first_ping.unwrap_or(w.done),
        full: w.done,
        period: median_period(&w.stamps),
        captures: w.stamps.len(),
        screen: w.screen,
        settled,
        rss,
    })
}

/// `muster query -p quake3 ADDR -f json`'s ping, ms.
fn query_ping(muster: &Path, addr: &str) -> anyhow::Result<Option<f64>> {
    let out = Command::new(muster)
        .args(["query", "-p", "quake3", "-q", "-f", "json", addr])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("running muster query")?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("muster query's JSON")?;
    let first = match &v {
        serde_json::Value::Array(a) => a.first().cloned().unwrap_or_default(),
        other => other.clone(),
    };
    Ok(first.get("ping_ms").and_then(serde_json::Value::as_f64))
}

/// Median, min and max of durations, as `median (min–max)` ms.
fn spread(mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    match (v.first(), v.get(v.len() / 2), v.last()) {
        (Some(lo), Some(mid), Some(hi)) => {
            format!("{:.0} ms ({:.0}–{:.0})", ms(*mid), ms(*lo), ms(*hi))
        }
        _ => "-".into(),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// The DDNet list of `count` dead Teeworlds addresses (nothing listens on `port`).
fn dead_list(count: usize, port: u16) -> String {
    let entries: Vec<serde_json::Value> = (0..count)
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
    serde_json::json!({ "servers": entries }).to_string()
}

/// Memory of the browser with `total` servers listed.
struct Memory {
    total: usize,
    list_in: Duration,
    rss_list_in: u64,
    rss_end: u64,
    hwm: u64,
}

fn memory_run(
    args: &BrowseArgs,
    muster: &Path,
    masters: &[String],
    dir: &Path,
) -> anyhow::Result<Memory> {
    let dead = args.memory_servers.saturating_sub(args.servers);
    let json = dir.join("dead-servers.json");
    let port = crate::side::free_udp_port()?;
    std::fs::write(&json, dead_list(dead, port))?;
    let mut all = masters.to_vec();
    all.push(format!("ddnet:{}", json.display()));
    let command = browse_command(muster, &all, &dir.join("profile-memory"));
    let total = args.servers + dead;
    let start = Instant::now();
    let tmux = Tmux::start(args.runs + 1, &command, args.width, args.height)?;
    let pid = tmux.pane_pid()?;
    // The list is in: every server counted and every master answered (the dead servers
    // soon show `down`, so the screen is never "full" here).
    let list_in = watch(&tmux, start, Duration::from_millis(50), |s| {
        s.total == Some(total) && s.masters_ok == Some(all.len()) && s.asking == 0
    })?
    .done;
    let (rss_list_in, _) = memory_of(pid).context("the browser's /proc status")?;
    let until = Instant::now() + args.memory_wait;
    let mut last = (rss_list_in, rss_list_in);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
        last = memory_of(pid).context("the browser exited")?;
    }
    drop(tmux);
    Ok(Memory {
        total,
        list_in,
        rss_list_in,
        rss_end: last.0,
        hwm: last.1,
    })
}

pub(crate) fn run(args: &BrowseArgs) -> anyhow::Result<()> {
    let muster = match &args.muster {
        Some(m) => m.clone(),
        None => procs::exe_dir()?.join("muster"),
    };
    if !muster.is_file() {
        bail!(
            "{} not found: build it with `cargo build --release -p muster -p muster-bench`",
            muster.display()
        );
    }
    if procs::which("tmux").is_none() {
        println!("tmux is not on PATH: the browse bench needs it; skipped.");
        return Ok(());
    }
    if args.servers < 2 || args.runs == 0 {
        bail!("--servers must be at least 2 and --runs at least 1");
    }
    let dir = std::env::temp_dir().join(format!("muster-bench-browse-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run_in(args, &muster, &dir);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("the children's messages are kept in {}", dir.display());
    }
    result
}

fn run_in(args: &BrowseArgs, muster: &Path, dir: &Path) -> anyhow::Result<()> {
    let (_ma, a) = start_master(muster, dir, "master-a")?;
    let (_mb, b) = start_master(muster, dir, "master-b")?;
    let farm = dir.join("farm.toml");
    std::fs::write(&farm, farm_toml(args.servers, args.base_port, a, b))?;
    let _farm = start_farm(muster, &farm, args.servers)?;
    let half_a = args.servers.div_ceil(2);
    let took_a = wait_listed(muster, a, half_a)?;
    let took_b = wait_listed(muster, b, args.servers - half_a)?;
    println!(
        "muster-bench browse: {} ioquake3 servers (reply delay 20–60 ms, no loss), two `muster serve` \
         Quake III masters at {a} and {b} (listed all after {:.1} s / {:.1} s more)",
        args.servers,
        took_a.as_secs_f64(),
        took_b.as_secs_f64()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before: {}", load.trim());
    let masters = vec![format!("quake3:{a}"), format!("quake3:{b}")];

    let mut runs = Vec::new();
    for n in 0..args.runs {
        let r = timed_run(args, n, muster, &masters, dir, args.poll, false)?;
        println!(
            "run {}: first frame {:.0} ms, first row {:.0} ms, first ping {:.0} ms, full first screen {:.0} ms \
             ({} rows; {} captures, one every {:.1} ms)",
            n + 1,
            r.first_frame.as_secs_f64() * 1000.0,
            r.first_row.as_secs_f64() * 1000.0,
            r.first_ping.as_secs_f64() * 1000.0,
            r.full.as_secs_f64() * 1000.0,
            r.screen.rows.len(),
            r.captures,
            r.period.as_secs_f64() * 1000.0
        );
        runs.push(r);
    }
    println!();
    println!(
        "{}",
        table::render(
            &["browse, {servers} servers, two masters", "median (min–max)"],
            &[
                vec![
                    "first frame (header line)".into(),
                    spread(runs.iter().map(|r| r.first_frame).collect())
                ],
                vec![
                    "first server row".into(),
                    spread(runs.iter().map(|r| r.first_row).collect())
                ],
                vec![
                    "first ping shown".into(),
                    spread(runs.iter().map(|r| r.first_ping).collect())
                ],
                vec![
                    format!(
                        "full first screen ({} rows at {}x{})",
                        runs.first().map_or(0, |r| r.screen.room),
                        args.width,
                        args.height
                    ),
                    spread(runs.iter().map(|r| r.full).collect())
                ],
            ]
        )
        .replace("{servers}", &args.servers.to_string())
    );

    // Ping: a run captured gently, its first screen and its screen one refresh later, each
    // against `muster query`. The rows of the two screens differ where servers tie on players
    // and more answered meanwhile, so each screen's own first rows are compared.
    let ping_run = timed_run(args, args.runs, muster, &masters, dir, args.ping_poll, true)?;
    println!(
        "ping run (captures every {:.0} ms): full first screen {:.0} ms",
        args.ping_poll.as_secs_f64() * 1000.0,
        ping_run.full.as_secs_f64() * 1000.0
    );
    let last = &ping_run;
    let settled = last.settled.as_ref();
    let mut names: Vec<&str> = Vec::new();
    let firsts = last.screen.rows.iter().take(args.ping_sample);
    let laters = settled
        .map(|s| s.rows.iter().take(args.ping_sample))
        .into_iter()
        .flatten();
    for r in firsts.chain(laters) {
        if !names.contains(&r.name.as_str()) {
            names.push(&r.name);
        }
    }
    let in_sample = |screen: Option<&Screen>, name: &str| {
        screen.and_then(|s| {
            s.rows
                .iter()
                .take(args.ping_sample)
                .any(|r| r.name == name)
                .then(|| s.ping_of(name))
                .flatten()
        })
    };
    let mut rows = Vec::new();
    // (largest difference, comparisons) on the first screen and after the refresh.
    let mut first = (0.0_f64, 0);
    let mut later_worst = (0.0_f64, 0);
    for name in names {
        let Some(i) = bench_index(name) else {
            continue;
        };
        let addr = format!("127.0.0.1:{}", usize::from(args.base_port) + i);
        let shown = in_sample(Some(&last.screen), name);
        let later = in_sample(settled, name);
        // The reference is the median of a few separate queries: one `muster query` now and
        // then reads a server 10–15 ms slow on this shared machine, which would be the
        // reference's noise, not the browser's.
        let mut qs = Vec::with_capacity(QUERY_SAMPLES);
        for _ in 0..QUERY_SAMPLES {
            if let Some(p) = query_ping(muster, &addr)? {
                qs.push(p);
            }
        }
        qs.sort_by(f64::total_cmp);
        let q = qs.get(qs.len() / 2).copied();
        let diff = |b: Option<f64>| match (b, q) {
            (Some(b), Some(q)) if q > 0.0 => Some((b - q) / q),
            _ => None,
        };
        if let Some(d) = diff(shown) {
            first = (first.0.max(d.abs()), first.1 + 1);
        }
        if let Some(d) = diff(later) {
            later_worst = (later_worst.0.max(d.abs()), later_worst.1 + 1);
        }
        let show = |p: Option<f64>, d: Option<f64>| match (p, d) {
            (Some(p), Some(d)) => format!("{p} ({:+.1} %)", d * 100.0),
            (Some(p), None) => p.to_string(),
            _ => "-".into(),
        };
        rows.push(vec![
            name.to_owned(),
            addr,
            format!("{}", delay_ms(i)),
            show(shown, diff(shown)),
            show(later, diff(later)),
            match (q, qs.first(), qs.last()) {
                (Some(q), Some(lo), Some(hi)) => format!("{q:.1} ({lo:.1}–{hi:.1})"),
                _ => "-".into(),
            },
        ]);
    }
    println!();
    println!(
        "{}",
        table::render(
            &[
                "server",
                "address",
                "delay ms",
                "browse, first screen",
                "browse, after refresh",
                "muster query ping_ms, median (min–max)",
            ],
            &rows
        )
    );
    let verdict = |(worst, compared): (f64, usize)| {
        if compared > 0 && worst <= PING_GOAL {
            "met"
        } else {
            "NOT met"
        }
    };
    for (what, w) in [("first screen", first), ("after refresh", later_worst)] {
        println!(
            "ping, {what}: {} comparisons, largest difference {:.1} % (goal: within {:.0} %): {}",
            w.1,
            w.0 * 100.0,
            PING_GOAL * 100.0,
            verdict(w)
        );
    }
    let rss2k: Vec<u64> = runs.iter().filter_map(|r| r.rss).collect();
    let rss2k = rss2k.iter().copied().max();

    if args.memory_servers > args.servers {
        let m = memory_run(args, muster, &masters, dir)?;
        let per = |b: u64| b as f64 / m.total as f64;
        let mut rows = vec![
            vec![
                format!("list in ({:.1} s after start)", m.list_in.as_secs_f64()),
                mib(m.rss_list_in),
                format!("{:.0}", per(m.rss_list_in)),
            ],
            vec![
                format!("{} s later (VmRSS)", args.memory_wait.as_secs()),
                mib(m.rss_end),
                format!("{:.0}", per(m.rss_end)),
            ],
            vec![
                "peak (VmHWM)".into(),
                mib(m.hwm),
                format!("{:.0}", per(m.hwm)),
            ],
        ];
        if let Some(base) = rss2k {
            let extra = m.total.saturating_sub(args.servers).max(1) as f64;
            rows.push(vec![
                format!("{} servers, at full first screen", args.servers),
                mib(base),
                format!(
                    "{:.0} per added server",
                    (m.rss_end.saturating_sub(base)) as f64 / extra
                ),
            ]);
        }
        println!();
        println!(
            "{}",
            table::render(
                &[
                    &format!("browse memory, {} servers listed", m.total),
                    "MiB",
                    "bytes per listed server",
                ],
                &rows
            )
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average after: {}", load.trim());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 60x10 screen as `capture-pane -p` prints it.
    fn screen(rows: &[&str], status: &str) -> String {
        let mut s = String::from("muster browse: 2000 servers, 2000 shown  |  sort: players\n");
        s.push_str("   NAME                     GAME         MAP              PLAYERS   PING\n");
        for r in rows {
            s.push_str(r);
            s.push('\n');
        }
        for _ in rows.len()..6 {
            s.push('\n');
        }
        s.push_str(status);
        s.push('\n');
        s.push_str("/ search s sort r rev f fav\n");
        s
    }

    #[test]
    fn a_screen_still_filling_is_not_full() {
        let text = screen(
            &[
                "   Bench 0008               Quake III    q3dm9                8/16     21",
                "   Bench 0017               Quake III    q3dm18               8/16      …",
                "   Bench 0026               Quake III    q3dm18               8/16    4.2",
            ],
            "masters: 1 ok  1 asking",
        );
        let s = Screen::parse(&text);
        assert_eq!(s.total, Some(2000));
        assert_eq!(s.masters_ok, Some(1));
        assert_eq!(s.asking, 1);
        assert_eq!(s.room, 6);
        assert_eq!(
            s.rows,
            vec![
                ScreenRow {
                    name: "Bench 0008".into(),
                    ping: Ping::Ms(21.0)
                },
                ScreenRow {
                    name: "Bench 0017".into(),
                    ping: Ping::Waiting
                },
                ScreenRow {
                    name: "Bench 0026".into(),
                    ping: Ping::Ms(4.2)
                },
            ]
        );
        assert!(s.has_row() && s.has_ping());
        assert!(!s.full(2, 2000));
        assert_eq!(s.ping_of("Bench 0008"), Some(21.0));
        assert_eq!(s.ping_of("Bench 0017"), None);
        assert_eq!(s.ping_of("Bench 0026"), Some(4.2));
    }

    #[test]
    fn every_row_pinged_and_every_master_in_is_full() {
        let rows: Vec<String> = (0..6)
            .map(|i| {
                format!(
                    "   Bench {i:04}               Quake III    q3dm1                8/16     3{i}"
                )
            })
            .collect();
        let refs: Vec<&str> = rows.iter().map(String::as_str).collect();
        let s = Screen::parse(&screen(&refs, "masters: 2 ok"));
        assert!(s.full(2, 2000), "{s:?}");
        // One master short, a row down, or a different count is not full.
        assert!(!s.full(3, 2000));
        assert!(!s.full(2, 2001));
        let mut down = refs.clone();
        let d = "   Bench 0009               Quake III    q3dm1                0/16   down";
        down[5] = d;
        let s = Screen::parse(&screen(&down, "masters: 2 ok"));
        assert_eq!(s.rows[5].ping, Ping::Down);
        assert!(!s.full(2, 2000));
        // A master that failed is reported, and the screen is not full.
        let s = Screen::parse(&screen(
            &refs,
            "masters: 1 ok  1 unreachable  (quake3: timed out)",
        ));
        assert_eq!(s.unreachable, 1);
        assert!(!s.full(2, 2000));
    }

    #[test]
    fn an_empty_or_half_drawn_screen_has_no_rows() {
        assert_eq!(Screen::parse(""), Screen::default());
        let s = Screen::parse("muster browse: 0 servers, 0 shown\n\n\n");
        assert_eq!(s.total, Some(0));
        assert!(!s.has_row() && !s.full(2, 0));
        assert_eq!(
            number_before("masters: 12 ok  3 asking", " asking"),
            Some(3)
        );
        assert_eq!(number_before("masters: 12 ok", " asking"), None);
    }

    #[test]
    fn the_farm_names_delays_and_masters_each_server() {
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let toml = farm_toml(4, 30_000, a, b);
        assert!(
            toml.contains("port = 30003\nname = \"Bench 0003\""),
            "{toml}"
        );
        assert_eq!(toml.matches("quake3:127.0.0.1:1000").count(), 2);
        assert_eq!(toml.matches("quake3:127.0.0.1:2000").count(), 2);
        assert!(toml.contains("delay = \"50ms\""), "{toml}");
        let farm = muster_server::farm::FarmSpec::from_toml(&toml).expect("a farm file");
        let servers = farm.expand().expect("expands");
        assert_eq!(servers.len(), 4);
        assert_eq!(servers[3].state.players.len(), players_of(3));
        assert_eq!(servers[3].impairment.delay, Duration::from_millis(50));
        assert_eq!(bench_index("Bench 0003"), Some(3));
        assert_eq!(bench_index("Far 3"), None);
    }
}
