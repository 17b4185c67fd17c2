//! `muster-bench master`: the master in a child process, measured over its real sockets.
//!
//! For each `--servers N` (comma-separated sizes run one after another, each with a fresh
//! master):
//!
//! 1. **Registrations**: N GameAgent registrations over UDP (`q` → `01` challenge → heartbeat
//!    echoing it), `--in-flight` at once, 100 servers per `127.x.y.z` source, timed until the
//!    registry lists the last one; the `q` → challenge round trip of each (retries included)
//!    gives the latency. Then N DDNet records through `MasterHandle::ddnet_register` (a ~1 KB
//!    DDNet 16.4 info each, so `servers.json` has real infos) and N GameSpy records through
//!    `MasterHandle::register` (listed by the GameSpy TCP list). Resident set (the child's
//!    `VmRSS`) before and after each, divided by the servers added.
//! 2. **Lists**: requests per second from `--clients` concurrent clients for `--duration` each:
//!    GameAgent `e`, Teeworlds 0.6 and 0.7 `req2`, GameSpy TCP `\list\cmp`, `servers.json`
//!    (plain and gzip, keep-alive and one connection per request), the API's default page and
//!    `?sort=name&page=K` pages. The master's CPU time per request and per byte, and the
//!    machine's (every busy CPU in the phase) per byte.
//! 3. **API under load**: `--api-clients` keep-alive clients page and sort (random column,
//!    order and page) for `--load-duration`, while a probe registers GameAgent servers at
//!    `--probe-rate` per second (open loop) and times `q` → challenge; the same probe alone
//!    first, for the idle figure. The probe runs on a thread and runtime of its own, so the
//!    bench's own HTTP clients do not delay it, and a round trip ends when the kernel queued
//!    the challenge (`SO_TIMESTAMPNS`), not when the probe woke up to read it. The probe's
//!    registrations change the registry, so the publisher makes new snapshots and the API
//!    sorts again all the time.
//!
//! With `--vs-mastersrv`: DDNet's mastersrv (built from source) and Debian's nginx serving the
//! file mastersrv writes, against a master holding only the DDNet face, each given the same
//! `--vs-servers` servers over the DDNet HTTP register protocol (UDP challenge answered from
//! the servers' game ports), each server re-POSTing every 15 s as DDNet servers do; then
//! `servers.json` requests per second, bytes, CPU and resident memory side by side.
//!
//! Every goal of the master's performance issue is printed next to its figure with pass or
//! fail. The machine is shared: figures vary between runs.

mod child;
mod ddnet;
mod events;
mod http;
mod peers;
mod shared;
pub(crate) mod stats;
pub(crate) mod wire;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::Value;

use child::GAMESPY_GAME;
pub(crate) use child::{ChildArgs, run as run_child};
pub(crate) use child::{ChildMaster, PEAK_ENV, RAISED};
use ddnet::SERVERS_JSON_PATH;
pub(crate) use events::{EventsArgs, run as run_events};
use http::Conn;
use stats::{
    Client, Latencies, Phase, Rate, Request, Spent, StopFlag, body_files_kib, measure, rss_kib,
};
use wire::{GameAgentList, GameSpyList, TeeworldsList, register_gameagent, source_ip};

use crate::table;

/// Flags of `muster-bench master`.
#[derive(Debug, clap::Args)]
pub(crate) struct MasterArgs {
    /// Servers per face (GameAgent over the wire, DDNet and GameSpy through the handle);
    /// several sizes separated by commas run one after another (e.g. `10000,100000`).
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    servers: Vec<usize>,
    /// Concurrent clients per list benchmark.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// How long each list benchmark runs.
    #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
    duration: Duration,
    /// GameAgent registrations in flight at once.
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
    /// How long the probe runs idle, and then under the API load.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    load_duration: Duration,
    /// Probe registrations per second.
    #[arg(long, default_value_t = 200)]
    probe_rate: u32,
    /// API clients paging and sorting during the load phase.
    #[arg(long, default_value_t = 5)]
    api_clients: usize,
    /// Also run DDNet's mastersrv + nginx side by side with the master.
    #[arg(long)]
    vs_mastersrv: bool,
    /// Servers registered with both in the side-by-side run.
    #[arg(long, default_value_t = 10_000)]
    vs_servers: usize,
    /// Rounds of the side-by-side servers.json measurements (alternating the two). One 3 s
    /// round's rate moves by up to ±10 % on a shared machine (a sample standard deviation of
    /// 5 % in the ratio of a round pair), and plain keep-alive is within a few per cent of
    /// nginx's, so the comparison takes the mean of eight and prints the ratio's 95 %
    /// confidence interval over the round pairs.
    #[arg(long, default_value_t = 8)]
    vs_rounds: usize,
    /// In the side-by-side `servers.json` rounds, pin the servers (Muster, mastersrv, nginx)
    /// to the first CPU and the bench's clients to the second, and stop (SIGSTOP) the side
    /// not being measured for each round: the side measured has one CPU to itself (its
    /// refresh work included) and the clients reading the documents another (needs 2 CPUs).
    #[arg(long)]
    split_cores: bool,
    /// DDNet mastersrv sources (relative paths from the workspace root); `bash
    /// scripts/install-peers.sh` puts the pinned, unmodified source in the default folder.
    #[arg(long, default_value = ".peers/src/ddnet-mastersrv")]
    mastersrv_src: PathBuf,
    /// Instead of the runs above: two masters sharing this PostgreSQL server
    /// (`postgres://USER:PASS@HOST:PORT/DB`; a fresh database per size is created there)
    /// against one master on SQLite: registrations/s, propagation, list requests/s per instance.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
}

/// One list benchmark's figures.
#[derive(Debug, Clone)]
struct ListResult {
    name: String,
    rate: Rate,
    spent: Spent,
}

impl ListResult {
    fn cpu_us_per_req(&self) -> f64 {
        1e6 * self.spent.master_cpu / (self.rate.ok.max(1) as f64)
    }

    fn cpu_ns_per_byte(&self) -> f64 {
        1e9 * self.spent.master_cpu / (self.rate.bytes.max(1) as f64)
    }

    /// The machine's busy CPU per byte: what moving a list byte costs on this machine,
    /// wherever the kernel charged it (see [`print_goals`]).
    fn machine_ns_per_byte(&self) -> f64 {
        1e9 * self.spent.machine_cpu / (self.rate.bytes.max(1) as f64)
    }
}

/// Everything measured at one size.
#[derive(Debug, Default)]
struct SizeResult {
    n: usize,
    reg_secs: f64,
    reg_ok: usize,
    reg_failed: usize,
    reg_retries: u64,
    reg_latency: Latencies,
    reg_spent: Option<Spent>,
    ddnet_secs: f64,
    gamespy_secs: f64,
    /// (face, listed, expected) after registration, and again at the end.
    listed: Vec<(String, usize, usize)>,
    listed_end: Vec<(String, usize, usize)>,
    /// Bytes of RSS per server: GameAgent, DDNet, GameSpy.
    mem: [Option<f64>; 3],
    rss_after_reg_kib: u64,
    rss_end_kib: u64,
    /// The page-cache files at the end (`servers.json`, its gzip form, the DDNet infos).
    body_files_end_kib: u64,
    ddnet_info_bytes: usize,
    lists: Vec<ListResult>,
    probe_idle: Probed,
    probe_load: Probed,
    probe_failed: usize,
    /// Whether the probe's thread ran above the bench's other threads (both rounds).
    probe_raised: bool,
    api_load: Option<ListResult>,
    api_total: usize,
    drops: Vec<String>,
}

/// Figures of the side-by-side run.
#[derive(Debug, Default)]
struct VsResult {
    n: usize,
    muster_reg: ddnet::Registration,
    mastersrv_reg: ddnet::Registration,
    muster_reg_spent: Option<Spent>,
    mastersrv_reg_spent: Option<Spent>,
    muster_listed: usize,
    nginx_listed: usize,
    /// (what, muster, nginx) per round.
    rows: Vec<(String, Vec<ListResult>, Vec<ListResult>)>,
    muster_rss_kib: u64,
    muster_body_kib: u64,
    mastersrv_rss_kib: u64,
    nginx_rss_kib: u64,
    refresh: Vec<(usize, usize)>,
    mastersrv_cpu_pct: f64,
    /// The servers.json rounds ran with the servers on one CPU and the clients on another.
    split_cores: bool,
    /// CPU per refresh POST while nothing else runs: (Muster, mastersrv).
    refresh_alone: Option<(RefreshCost, RefreshCost)>,
    /// The same after both were stopped as long (the refreshes queued meanwhile in a burst).
    refresh_burst: Option<(RefreshCost, RefreshCost)>,
}

/// What the refresh POSTs cost one master while nothing else ran.
#[derive(Debug, Default, Clone, Copy)]
struct RefreshCost {
    /// Refreshes answered `success` in the phase.
    ok: usize,
    /// Refreshes that failed in the phase.
    failed: usize,
    spent: Spent,
}

impl RefreshCost {
    fn cpu_us_each(&self) -> f64 {
        1e6 * self.spent.master_cpu / (self.ok.max(1) as f64)
    }

    fn describe(&self) -> String {
        format!(
            "{:.1} µs ({} ok, {} failed in {:.1} s, {:.1}% of a core)",
            self.cpu_us_each(),
            self.ok,
            self.failed,
            self.spent.wall,
            self.spent.master_pct
        )
    }
}

/// Measures each master's CPU over `wall` while only the refreshes run; `paused` (masters
/// stopped meanwhile) are continued once the measurement started.
async fn refresh_alone(
    refresher: &ddnet::Refresher,
    muster: u32,
    mastersrv: u32,
    wall: Duration,
    paused: Option<stats::Paused>,
) -> (RefreshCost, RefreshCost) {
    let before = refresher.counts();
    let (pm, ps) = (Phase::start(&[muster]), Phase::start(&[mastersrv]));
    drop(paused);
    tokio::time::sleep(wall).await;
    let (sm, ss) = (pm.end(), ps.end());
    refresh_costs(&before, &refresher.counts(), sm, ss)
}

/// Stops both masters for `wall` while the refreshes go on, continues them, and measures
/// each one's CPU over `wall` again: the refreshes queued while stopped arrive in a burst.
async fn refresh_burst(
    refresher: &ddnet::Refresher,
    muster: u32,
    mastersrv: u32,
    wall: Duration,
) -> anyhow::Result<(RefreshCost, RefreshCost)> {
    let paused = stats::Paused::new(&[muster, mastersrv])?;
    tokio::time::sleep(wall).await;
    Ok(refresh_alone(refresher, muster, mastersrv, wall, Some(paused)).await)
}

fn refresh_costs(
    before: &[(usize, usize)],
    after: &[(usize, usize)],
    muster: Spent,
    mastersrv: Spent,
) -> (RefreshCost, RefreshCost) {
    let cost = |i: usize, spent: Spent| {
        let (a, b) = (
            before.get(i).copied().unwrap_or_default(),
            after.get(i).copied().unwrap_or_default(),
        );
        RefreshCost {
            ok: b.0.saturating_sub(a.0),
            failed: b.1.saturating_sub(a.1),
            spent,
        }
    };
    (cost(0, muster), cost(1, mastersrv))
}

/// Runs the master bench and prints its tables.
pub(crate) async fn run(args: &MasterArgs) -> anyhow::Result<()> {
    if let Some(store) = &args.store {
        return shared::run(args, store).await;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "muster-bench master: {cores} cores, load average at start {}; the machine is shared \
         (other agents compile and test on the same cores), so rates vary between runs",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("limits raised for the run: {RAISED}");
    println!(
        "lists: {} clients × {:?} each; API load: {} clients × {:?}; probe {} registrations/s",
        args.clients, args.duration, args.api_clients, args.load_duration, args.probe_rate
    );
    let mut sizes = Vec::new();
    for &n in &args.servers {
        println!();
        println!("== {n} servers per face ==");
        let r = run_size(args, n).await?;
        print_size(&r, args);
        sizes.push(r);
    }
    let vs = if args.vs_mastersrv {
        println!();
        println!(
            "== side by side with DDNet mastersrv + nginx, {} servers ==",
            args.vs_servers
        );
        let v = run_vs(args).await?;
        print_vs(&v);
        Some(v)
    } else {
        None
    };
    println!();
    print_goals(&sizes, vs.as_ref());
    Ok(())
}

/// How long the master is left quiet before its resident set is read: long enough for the
/// allocator's upkeep to hand back what the phase freed (mimalloc gives pages freed a second
/// ago back to the system, and the upkeep asks it to once a second).
pub(crate) const SETTLE: Duration = Duration::from_millis(2500);
const _: () = assert!(SETTLE.as_millis() > 2 * muster_alloc::UPKEEP_INTERVAL.as_millis());

/// The child's `VmRSS` (KiB) once it settled: store flushed and snapshot published, then
/// [`SETTLE`] of quiet, then one more flush (the allocator purges what it freed long enough
/// ago when it next works), as a monitoring system sees a running master between bursts.
pub(crate) async fn settled_rss(m: &mut ChildMaster) -> anyhow::Result<u64> {
    m.call("flush")?;
    tokio::time::sleep(SETTLE).await;
    m.call("flush")?;
    Ok(rss_kib(m.pid).unwrap_or(0))
}

fn kib_per(a: u64, b: u64, count: usize) -> Option<f64> {
    (count > 0).then(|| (b.saturating_sub(a) * 1024) as f64 / count as f64)
}

/// Waits until the child lists `want` records of `face`; returns seconds since `start` at the
/// last change of the count (a lost heartbeat, never retried by a real server either, does not
/// count as time).
async fn wait_listed(
    m: &mut ChildMaster,
    face: &str,
    want: usize,
    start: Instant,
) -> anyhow::Result<(f64, usize)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut count = m.listed(face)?;
    let mut last_change = start.elapsed();
    while count < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = m.listed(face)?;
        if now != count {
            count = now;
            last_change = start.elapsed();
        }
    }
    Ok((last_change.as_secs_f64(), count))
}

/// Registers `n` GameAgent servers over UDP from `in_flight` concurrent loops.
async fn ingest(ga: SocketAddr, n: usize, in_flight: usize) -> (Latencies, usize, usize, u64) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..in_flight.max(1) {
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let (mut lat, mut ok, mut failed, mut retries) = (Latencies::default(), 0, 0, 0u64);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                // 100 servers per source address.
                match register_gameagent(source_ip(i / 100), (i % 100) as u16, ga).await {
                    Ok(r) => {
                        ok += 1;
                        retries += u64::from(r.retries);
                        lat.push(r.rtt);
                    }
                    Err(_) => failed += 1,
                }
            }
            (lat, ok, failed, retries)
        });
    }
    let mut all = (Latencies::default(), 0, 0, 0);
    while let Some(Ok((lat, ok, failed, retries))) = tasks.join_next().await {
        all.0.extend(&lat);
        all.1 += ok;
        all.2 += failed;
        all.3 += retries;
    }
    all
}

/// How much the probe's thread raises its priority (`nice` steps), when allowed (root, or
/// `CAP_SYS_NICE`): the bench's own API clients share the machine's cores with the master,
/// and a probe waiting for a core behind them would time the bench, not the master.
const PROBE_PRIORITY: i32 = 10;

/// [`probe`] on a thread and runtime of its own: the bench's HTTP clients (reading and
/// parsing API pages on the bench's runtime) cannot delay the probe reading its challenge,
/// so the round trip is the master's. The thread runs [`PROBE_PRIORITY`] steps above the
/// rest of the bench when it may; the third value says whether it did.
async fn probe_alone(
    ga: SocketAddr,
    rate: u32,
    duration: Duration,
    base: usize,
) -> anyhow::Result<(Probed, usize, bool)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("probe".to_owned())
        .spawn(move || {
            let raised = muster_master::bulk::renice_current_thread(-PROBE_PRIORITY);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let _ = tx.send(rt.map(|rt| {
                let (lat, failed) = rt.block_on(probe(ga, rate, duration, base));
                (lat, failed, raised)
            }));
        })?;
    Ok(rx.await??)
}

/// The probe's `q` → challenge round trips, measured two ways.
#[derive(Debug, Default)]
struct Probed {
    /// Ending when the kernel queued the challenge: the master's latency. This is the figure
    /// the stall goal reads.
    master: Latencies,
    /// Ending when the probe's task read the challenge: its own wake-up included.
    task: Latencies,
    /// Round trips the kernel gave no timestamp for; `master` holds their `task` time.
    unstamped: usize,
}

impl Probed {
    fn len(&self) -> usize {
        self.task.len()
    }

    fn push(&mut self, r: &wire::Registered) {
        self.task.push(r.rtt);
        match r.kernel_rtt {
            Some(k) => self.master.push(k),
            None => {
                self.master.push(r.rtt);
                self.unstamped += 1;
            }
        }
    }

    fn summary(&self) -> String {
        let mut s = self.master.summary();
        if self.unstamped > 0 {
            let _ = write!(s, " ({} without a kernel timestamp)", self.unstamped);
        }
        s
    }
}

/// Registrations at `rate` per second for `duration`, each started on time whatever the
/// others do (open loop), from sources starting at `base`. Returns the `q` → challenge
/// round trips and the failures.
async fn probe(ga: SocketAddr, rate: u32, duration: Duration, base: usize) -> (Probed, usize) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + duration;
    let mut tasks = tokio::task::JoinSet::new();
    let mut k = 0usize;
    while Instant::now() < end {
        tick.tick().await;
        let (src, port) = (source_ip(base + k / 50), (k % 50) as u16);
        k += 1;
        tasks.spawn(async move { register_gameagent(src, port, ga).await });
    }
    let mut lat = Probed::default();
    let mut failed = 0;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Ok(r)) => lat.push(&r),
            _ => failed += 1,
        }
    }
    (lat, failed)
}

/// Which path an HTTP client asks for.
#[derive(Debug, Clone)]
enum Path {
    Fixed(String),
    /// `?sort=name&page=K`, K random.
    SortedByName {
        pages: usize,
    },
    /// Random column, order and page.
    Random {
        pages: usize,
    },
}

/// The API's sort columns.
const SORT_COLUMNS: [&str; 10] = [
    "name",
    "map",
    "game",
    "game_type",
    "players",
    "max_players",
    "address",
    "protocol",
    "last_seen",
    "order",
];

/// One HTTP client: keep-alive, or a new connection per request (rotating sources).
#[derive(Debug)]
struct HttpGet {
    server: SocketAddr,
    source: usize,
    keep_alive: bool,
    conn: Conn,
    path: Path,
    gzip: bool,
    rng: SmallRng,
}

impl HttpGet {
    fn new(server: SocketAddr, source: usize, keep_alive: bool, path: Path, gzip: bool) -> Self {
        let mut conn = Conn::new(source_ip(source), server, keep_alive);
        conn.keep_body = false;
        Self {
            server,
            source,
            keep_alive,
            conn,
            path,
            gzip,
            rng: SmallRng::seed_from_u64(source as u64),
        }
    }

    async fn one(&mut self, seq: u64) -> anyhow::Result<u64> {
        let path = match &self.path {
            Path::Fixed(p) => p.clone(),
            Path::SortedByName { pages } => {
                format!(
                    "/api/v1/servers?sort=name&page={}",
                    self.rng.random_range(1..=*pages)
                )
            }
            Path::Random { pages } => {
                let col = SORT_COLUMNS
                    .get(self.rng.random_range(0..SORT_COLUMNS.len()))
                    .copied()
                    .unwrap_or("name");
                let order = if self.rng.random_bool(0.5) {
                    "asc"
                } else {
                    "desc"
                };
                format!(
                    "/api/v1/servers?sort={col}&order={order}&page={}",
                    self.rng.random_range(1..=*pages)
                )
            }
        };
        if !self.keep_alive {
            // One connection per request; sources rotate so that none runs out of ports.
            let src = source_ip(self.source + (seq % 64) as usize);
            self.conn = Conn::new(src, self.server, false);
            self.conn.keep_body = false;
        }
        let extra = if self.gzip {
            "Accept-Encoding: gzip\r\n"
        } else {
            ""
        };
        let r = self.conn.get(&path, extra).await?;
        if r.status != 200 {
            bail!("HTTP {} for {path}", r.status);
        }
        if self.gzip && r.header("content-encoding") != Some("gzip") {
            bail!("asked for gzip, got {:?}", r.header("content-encoding"));
        }
        Ok(r.body_len)
    }
}

impl Client for HttpGet {
    fn request(&mut self, seq: u64) -> Request<'_> {
        Box::pin(self.one(seq))
    }
}

/// One GET with the body kept, for checking what a list holds.
async fn fetch(server: SocketAddr, path: &str, gzip: bool) -> anyhow::Result<http::Response> {
    let mut c = Conn::new(source_ip(299_999), server, false);
    let extra = if gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    c.get(path, extra).await
}

fn occurrences(body: &[u8], needle: &[u8]) -> usize {
    body.windows(needle.len()).filter(|w| *w == needle).count()
}

async fn bench_list(
    name: &str,
    pids: &[u32],
    duration: Duration,
    clients: Vec<Box<dyn Client>>,
) -> ListResult {
    eprintln!("  {name} …");
    let phase = Phase::start(pids);
    let rate = measure(clients, duration).await;
    let spent = phase.end();
    ListResult {
        name: name.to_owned(),
        rate,
        spent,
    }
}

fn http_clients(
    server: SocketAddr,
    base: usize,
    n: usize,
    keep_alive: bool,
    path: &Path,
    gzip: bool,
) -> Vec<Box<dyn Client>> {
    (0..n.max(1))
        .map(|c| {
            Box::new(HttpGet::new(
                server,
                base + c * 64,
                keep_alive,
                path.clone(),
                gzip,
            )) as Box<dyn Client>
        })
        .collect()
}

fn listed_all(
    m: &mut ChildMaster,
    want: &[(&str, usize)],
) -> anyhow::Result<Vec<(String, usize, usize)>> {
    let v = m.call("count")?;
    Ok(want
        .iter()
        .map(|(face, n)| {
            let got = v
                .get("listed")
                .and_then(|l| l.get(*face))
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize;
            ((*face).to_owned(), got, *n)
        })
        .collect())
}

async fn run_size(args: &MasterArgs, n: usize) -> anyhow::Result<SizeResult> {
    let mut m = ChildMaster::spawn(n, false)?;
    let pids = [m.pid];
    let ga = m.addr("gameagent")?;
    let http = m.addr("http")?;
    let gs = m.addr("gamespy-tcp")?;
    let tw6 = m.addr("teeworlds06")?;
    let tw7 = m.addr("teeworlds07")?;
    let mut r = SizeResult {
        n,
        ddnet_info_bytes: ddnet::info_body(0)?.len(),
        ..SizeResult::default()
    };
    let rss0 = settled_rss(&mut m).await?;

    eprintln!("  registering {n} GameAgent servers over UDP …");
    let phase = Phase::start(&pids);
    let start = Instant::now();
    let (lat, ok, failed, retries) = ingest(ga, n, args.in_flight).await;
    let (secs, _) = wait_listed(&mut m, "gameagent", ok, start).await?;
    // The CPU a registration costs includes storing it: the phase ends when the master's
    // persister has written them all (it writes once a second, so ending at "listed" would
    // count a run-dependent share of the writes, and none of the last second's).
    m.call("durable")?;
    r.reg_spent = Some(phase.end());
    (
        r.reg_secs,
        r.reg_ok,
        r.reg_failed,
        r.reg_retries,
        r.reg_latency,
    ) = (secs, ok, failed, retries, lat);
    let rss1 = settled_rss(&mut m).await?;

    eprintln!("  inserting {n} DDNet and {n} GameSpy records through the handle …");
    let v = m.call(&format!("ddnet 0 {n}"))?;
    r.ddnet_secs = v.get("secs").and_then(Value::as_f64).unwrap_or(0.0);
    let rss2 = settled_rss(&mut m).await?;
    let v = m.call(&format!("gamespy 0 {n}"))?;
    r.gamespy_secs = v.get("secs").and_then(Value::as_f64).unwrap_or(0.0);
    let rss3 = settled_rss(&mut m).await?;
    r.mem = [
        kib_per(rss0, rss1, r.reg_ok),
        kib_per(rss1, rss2, n),
        kib_per(rss2, rss3, n),
    ];
    r.rss_after_reg_kib = rss3;
    let want = [("gameagent", n), ("ddnet", n), ("gamespy", n)];
    r.listed = listed_all(&mut m, &want)?;

    // Lists.
    let tw_expect = n.min(1200);
    let d = args.duration;
    let c = args.clients;
    // The list holds what the master lists, which is what `e` sends: a GameAgent heartbeat
    // is not acknowledged, so one lost on a loaded loopback leaves a registration the client
    // counted as done unlisted (shown in the listed rows above).
    let ga_listed = r
        .listed
        .iter()
        .find(|(face, ..)| face == "gameagent")
        .map_or(r.reg_ok, |&(_, got, _)| got);
    let mut clients: Vec<Box<dyn Client>> = Vec::new();
    for k in 0..c {
        clients.push(Box::new(GameAgentList::new(
            source_ip(200_000 + k),
            ga,
            ga_listed,
        )?));
    }
    r.lists
        .push(bench_list("GameAgent `e` (UDP, whole list)", &pids, d, clients).await);
    let mut clients: Vec<Box<dyn Client>> = Vec::new();
    for k in 0..c {
        clients.push(Box::new(TeeworldsList::v06(
            source_ip(200_100 + k),
            tw6,
            tw_expect,
        )?));
    }
    r.lists.push(
        bench_list(
            "Teeworlds 0.6 `req2` (UDP, ≤ 1200 servers)",
            &pids,
            d,
            clients,
        )
        .await,
    );
    let mut clients: Vec<Box<dyn Client>> = Vec::new();
    for k in 0..c {
        clients.push(Box::new(
            TeeworldsList::v07(source_ip(200_200 + k), tw7, tw_expect).await?,
        ));
    }
    r.lists
        .push(bench_list("Teeworlds 0.7 `req2` (UDP, token first)", &pids, d, clients).await);
    let mut clients: Vec<Box<dyn Client>> = Vec::new();
    for k in 0..c {
        clients.push(Box::new(GameSpyList::new(
            gs,
            GAMESPY_GAME,
            n,
            201_000 + k * 64,
        )?));
    }
    r.lists.push(
        bench_list(
            "GameSpy TCP `\\list\\cmp` (a connection each)",
            &pids,
            d,
            clients,
        )
        .await,
    );

    // servers.json: check what it holds first.
    let doc = fetch(http, SERVERS_JSON_PATH, false).await?;
    let entries = occurrences(&doc.body, b"\"addresses\"");
    if entries != n {
        eprintln!("  servers.json lists {entries} of {n} DDNet servers");
    }
    let sj = Path::Fixed(SERVERS_JSON_PATH.to_owned());
    for (gzip, keep, label) in [
        (false, true, "servers.json plain, keep-alive"),
        (true, true, "servers.json gzip, keep-alive"),
        (false, false, "servers.json plain, a connection each"),
        (true, false, "servers.json gzip, a connection each"),
    ] {
        let clients = http_clients(http, 210_000, c, keep, &sj, gzip);
        r.lists
            .push(bench_list(&format!("{label} ({entries} servers)"), &pids, d, clients).await);
    }
    let api = fetch(http, "/api/v1/servers", false).await?;
    let total = serde_json::from_slice::<Value>(&api.body)
        .ok()
        .and_then(|v| v.get("total")?.as_u64())
        .unwrap_or(0) as usize;
    r.api_total = total;
    let pages = total.div_ceil(100).max(1);
    let default_page = Path::Fixed("/api/v1/servers".to_owned());
    for (keep, label) in [(true, "keep-alive"), (false, "a connection each")] {
        let clients = http_clients(http, 220_000, c, keep, &default_page, false);
        r.lists.push(
            bench_list(
                &format!("API default page (100 of {total}), {label}"),
                &pids,
                d,
                clients,
            )
            .await,
        );
    }
    let sorted = Path::SortedByName { pages };
    let clients = http_clients(http, 230_000, c, true, &sorted, false);
    r.lists.push(
        bench_list(
            &format!("API ?sort=name&page=K (K random of {pages}), keep-alive"),
            &pids,
            d,
            clients,
        )
        .await,
    );

    // The probe alone, then with the API load.
    eprintln!("  probe idle …");
    let (lat, failed, raised) =
        probe_alone(ga, args.probe_rate, args.load_duration, 500_000).await?;
    r.probe_idle = lat;
    r.probe_failed += failed;
    r.probe_raised = raised;
    eprintln!(
        "  probe with {} API clients sorting and paging …",
        args.api_clients
    );
    let random = Path::Random { pages };
    let clients = http_clients(http, 240_000, args.api_clients, true, &random, false);
    let phase = Phase::start(&pids);
    let load_for = args.load_duration;
    let load = tokio::spawn(async move { measure(clients, load_for).await });
    let (lat, failed, raised) =
        probe_alone(ga, args.probe_rate, args.load_duration, 510_000).await?;
    r.probe_raised &= raised;
    let api_rate = load.await?;
    r.api_load = Some(ListResult {
        name: format!(
            "API, {} clients, random column/order/page of {pages}",
            args.api_clients
        ),
        rate: api_rate,
        spent: phase.end(),
    });
    r.probe_load = lat;
    r.probe_failed += failed;

    r.rss_end_kib = settled_rss(&mut m).await?;
    r.body_files_end_kib = body_files_kib(m.pid);
    let probes = r.probe_idle.len() + r.probe_load.len();
    r.listed_end = listed_all(
        &mut m,
        &[
            ("gameagent", r.reg_ok + probes),
            ("ddnet", n),
            ("gamespy", n),
        ],
    )?;
    if let Ok(metrics) = fetch(http, "/metrics", false).await {
        let text = String::from_utf8_lossy(&metrics.body).into_owned();
        r.drops = text
            .lines()
            .filter(|l| {
                l.starts_with("muster_drops_total{") || l.starts_with("muster_rate_limited_total")
            })
            .filter(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"))
            .map(str::to_owned)
            .collect();
    }
    m.quit()?;
    Ok(r)
}

fn fmt_mem(b: Option<f64>) -> String {
    b.map_or_else(|| "-".to_owned(), |b| format!("{b:.0} B"))
}

fn rate_row(l: &ListResult) -> Vec<String> {
    vec![
        l.name.clone(),
        format!("{:.0} /s", l.rate.per_sec()),
        format!("{}", l.rate.bytes_each()),
        format!("{:.1} µs", l.cpu_us_per_req()),
        format!("{:.2} ns", l.cpu_ns_per_byte()),
        l.rate
            .latency
            .quantile_ms(0.99)
            .map_or("-".into(), |v| format!("{v:.2} ms")),
        format!(
            "{} ok, {} failed; {}",
            l.rate.ok,
            l.rate.failed,
            l.spent.describe()
        ),
    ]
}

fn print_size(r: &SizeResult, args: &MasterArgs) {
    let n = r.n;
    let spent = r.reg_spent.unwrap_or_default();
    let reg_rate = r.reg_ok as f64 / r.reg_secs.max(1e-9);
    let mut rows = vec![
        vec![
            "GameAgent registrations (UDP q→challenge→heartbeat)".to_owned(),
            format!("{reg_rate:.0} /s"),
            format!(
                "{}/{n} listed after {:.2} s; {} in flight, 100 servers per 127.x.y.z source; \
                 {} failed, {} q resent",
                r.reg_ok, r.reg_secs, args.in_flight, r.reg_failed, r.reg_retries
            ),
        ],
        vec![
            "  q→challenge round trip".to_owned(),
            r.reg_latency
                .quantile_ms(0.99)
                .map_or("-".into(), |v| format!("p99 {v:.2} ms")),
            r.reg_latency.summary(),
        ],
        vec![
            "  master CPU per registration (listed and stored)".to_owned(),
            format!("{:.1} µs", 1e6 * spent.master_cpu / r.reg_ok.max(1) as f64),
            format!("{}; limited by {}", spent.describe(), spent.limit()),
        ],
        vec![
            "DDNet records via MasterHandle::ddnet_register".to_owned(),
            format!("{:.0} /s", n as f64 / r.ddnet_secs.max(1e-9)),
            format!(
                "{n} in {:.2} s, info {} B each (one thread, no wire)",
                r.ddnet_secs, r.ddnet_info_bytes
            ),
        ],
        vec![
            "GameSpy records via MasterHandle::register".to_owned(),
            format!("{:.0} /s", n as f64 / r.gamespy_secs.max(1e-9)),
            format!("{n} in {:.2} s, with a poll info each", r.gamespy_secs),
        ],
    ];
    for (face, got, want) in &r.listed {
        rows.push(vec![
            format!("listed {face}"),
            format!("{got}/{want}"),
            "after registration".to_owned(),
        ]);
    }
    for (face, got, want) in &r.listed_end {
        rows.push(vec![
            format!("listed {face}"),
            format!("{got}/{want}"),
            "at the end (probe servers included)".to_owned(),
        ]);
    }
    rows.push(vec![
        "memory per GameAgent server (wire)".to_owned(),
        fmt_mem(r.mem[0]),
        format!(
            "child VmRSS delta / servers, store flushed, snapshot published, {:.1} s quiet",
            SETTLE.as_secs_f64()
        ),
    ]);
    rows.push(vec![
        "memory per DDNet server (handle)".to_owned(),
        fmt_mem(r.mem[1]),
        format!(
            "its {} B info is in the master's DDNet info file (page cache), not counted here",
            r.ddnet_info_bytes
        ),
    ]);
    rows.push(vec![
        "memory per GameSpy server (handle)".to_owned(),
        fmt_mem(r.mem[2]),
        "with a poll info (name, map, players)".to_owned(),
    ]);
    let records = (r.reg_ok + 2 * n).max(1);
    rows.push(vec![
        "RSS after registration / at the end".to_owned(),
        format!(
            "{} / {} MiB",
            r.rss_after_reg_kib / 1024,
            r.rss_end_kib / 1024
        ),
        format!(
            "{:.0} B per record at the end, list caches (sort orders) included; servers.json, \
             its gzip form and the DDNet infos in unnamed files (page cache) besides: {} MiB",
            (r.rss_end_kib * 1024) as f64 / records as f64,
            r.body_files_end_kib / 1024
        ),
    ]);
    println!(
        "{}",
        table::render(&["registration and memory", "figure", "detail"], &rows)
    );
    let list_rows: Vec<Vec<String>> = r.lists.iter().map(rate_row).collect();
    println!(
        "{}",
        table::render(
            &[
                "list requests",
                "rate",
                "bytes each",
                "master CPU/req",
                "CPU/byte",
                "p99",
                "detail"
            ],
            &list_rows
        )
    );
    let mut rows = Vec::new();
    if let Some(a) = &r.api_load {
        rows.push(rate_row(a));
    }
    println!(
        "{}",
        table::render(
            &[
                "API under load",
                "rate",
                "bytes each",
                "master CPU/req",
                "CPU/byte",
                "p99",
                "detail"
            ],
            &rows
        )
    );
    let rows = vec![
        vec![
            "probe q→challenge, idle (until the kernel queued it)".to_owned(),
            r.probe_idle.summary(),
        ],
        vec![
            format!(
                "probe q→challenge, {} API clients sorting (until the kernel queued it)",
                args.api_clients
            ),
            r.probe_load.summary(),
        ],
        vec![
            "  … idle, until the probe's task read it".to_owned(),
            r.probe_idle.task.summary(),
        ],
        vec![
            "  … API clients sorting, until the probe's task read it".to_owned(),
            r.probe_load.task.summary(),
        ],
        vec![
            "probe failures (no challenge after 3 tries)".to_owned(),
            r.probe_failed.to_string(),
        ],
        vec![
            "probe thread priority".to_owned(),
            if r.probe_raised {
                format!("{PROBE_PRIORITY} nice steps above the bench's clients")
            } else {
                "as the bench's clients (raising it was not permitted)".to_owned()
            },
        ],
    ];
    println!(
        "{}",
        table::render(&["registration latency", "figure"], &rows)
    );
    if r.drops.is_empty() {
        println!("master drop counters: all zero");
    } else {
        println!("master drop counters (non-zero): {}", r.drops.join("; "));
    }
}

async fn run_vs(args: &MasterArgs) -> anyhow::Result<VsResult> {
    let n = args.vs_servers;
    let src = if args.mastersrv_src.is_relative() {
        crate::procs::workspace_root().join(&args.mastersrv_src)
    } else {
        args.mastersrv_src.clone()
    };
    let bin = tokio::task::block_in_place(|| peers::build_mastersrv(&src))?;
    let nginx_bin = peers::nginx_binary()?;
    let dir = std::env::temp_dir().join(format!("muster-bench-vs-{}", std::process::id()));
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("ddnet/15"))?;
    let out = www.join("ddnet/15/servers.json");
    let result = vs_in(args, n, &bin, &nginx_bin, &dir, &www, &out).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[allow(clippy::too_many_arguments)]
async fn vs_in(
    args: &MasterArgs,
    n: usize,
    bin: &std::path::Path,
    nginx_bin: &std::path::Path,
    dir: &std::path::Path,
    www: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<VsResult> {
    let mut v = VsResult {
        n,
        ..VsResult::default()
    };
    let muster = ChildMaster::spawn(n, true)?;
    let muster_http = muster.addr("http")?;
    let mastersrv = peers::run_mastersrv(bin, out, dir)?;
    let nginx = peers::run_nginx(nginx_bin, dir, www)?;
    let nginx_pids: Vec<u32> = {
        let mut p = vec![nginx.pid()];
        p.extend(stats::children_of(nginx.pid()));
        p
    };
    let mut farm = ddnet::Farm::new(n, 2);
    eprintln!("  registering {n} DDNet servers with Muster over HTTP …");
    let phase = Phase::start(&[muster.pid]);
    v.muster_reg = farm.register(0, muster_http).await;
    v.muster_reg_spent = Some(phase.end());
    eprintln!("  registering {n} DDNet servers with mastersrv over HTTP …");
    let phase = Phase::start(&[mastersrv.pid()]);
    v.mastersrv_reg = farm.register(1, mastersrv.addr).await;
    v.mastersrv_reg_spent = Some(phase.end());
    let stop = StopFlag::default();
    let refresher = farm.refresh(vec![(0, muster_http), (1, mastersrv.addr)], stop.clone());
    // mastersrv writes its file once a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let doc = fetch(nginx.addr, SERVERS_JSON_PATH, false).await;
        v.nginx_listed = doc
            .map(|d| occurrences(&d.body, b"\"addresses\""))
            .unwrap_or(0);
        if v.nginx_listed >= v.mastersrv_reg.ok || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let doc = fetch(muster_http, SERVERS_JSON_PATH, false).await?;
    v.muster_listed = occurrences(&doc.body, b"\"addresses\"");
    let sj = Path::Fixed(SERVERS_JSON_PATH.to_owned());
    let their_side: Vec<u32> = std::iter::once(mastersrv.pid())
        .chain(nginx_pids.iter().copied())
        .collect();
    if args.split_cores {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        anyhow::ensure!(
            cpus >= 2,
            "--split-cores needs 2 CPUs, this machine offers {cpus}"
        );
        for &pid in std::iter::once(&muster.pid).chain(&their_side) {
            stats::pin_threads(pid, 0)?;
        }
        let own = stats::pin_threads(std::process::id(), 1)?;
        eprintln!("  servers pinned to CPU 0, the bench's {own} threads to CPU 1");
        v.split_cores = true;
    }
    let wall = args.duration.max(Duration::from_secs(3));
    eprintln!(
        "  refresh POSTs alone for {:.0} s (CPU per refresh) …",
        wall.as_secs_f64()
    );
    v.refresh_alone =
        Some(refresh_alone(&refresher, muster.pid, mastersrv.pid(), wall, None).await);
    eprintln!("  refresh POSTs in a burst after both masters were stopped …");
    v.refresh_burst = Some(refresh_burst(&refresher, muster.pid, mastersrv.pid(), wall).await?);
    let ms_phase = Phase::start(&[mastersrv.pid()]);
    let c = args.clients;
    for (gzip, keep, label) in [
        (false, true, "plain, keep-alive"),
        (true, true, "gzip, keep-alive"),
        (false, false, "plain, a connection each"),
        (true, false, "gzip, a connection each"),
    ] {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for round in 0..args.vs_rounds.max(1) {
            let name = format!("servers.json {label}, round {}", round + 1);
            let cl = http_clients(muster_http, 250_000, c, keep, &sj, gzip);
            let paused = pause_if(args.split_cores, &their_side)?;
            ours.push(
                bench_list(&format!("Muster {name}"), &[muster.pid], args.duration, cl).await,
            );
            drop(paused);
            let cl = http_clients(nginx.addr, 260_000, c, keep, &sj, gzip);
            let paused = pause_if(args.split_cores, &[muster.pid])?;
            theirs.push(bench_list(&format!("nginx {name}"), &nginx_pids, args.duration, cl).await);
            drop(paused);
        }
        v.rows.push((label.to_owned(), ours, theirs));
    }
    v.mastersrv_cpu_pct = ms_phase.end().master_pct;
    v.muster_rss_kib = rss_kib(muster.pid).unwrap_or(0);
    v.muster_body_kib = body_files_kib(muster.pid);
    v.mastersrv_rss_kib = rss_kib(mastersrv.pid()).unwrap_or(0);
    v.nginx_rss_kib = nginx_pids.iter().filter_map(|p| rss_kib(*p)).sum();
    stop.raise();
    v.refresh = refresher.finish(Duration::from_secs(20)).await;
    nginx.stop();
    mastersrv.stop();
    muster.quit()?;
    Ok(v)
}

/// With `--split-cores`, the side not being measured is stopped for the round, so that the
/// side measured has the servers' CPU to itself, its own refresh work included.
fn pause_if(split: bool, pids: &[u32]) -> anyhow::Result<Option<stats::Paused>> {
    split.then(|| stats::Paused::new(pids)).transpose()
}

fn mean_rate(v: &[ListResult]) -> f64 {
    v.iter().map(|l| l.rate.per_sec()).sum::<f64>() / (v.len().max(1) as f64)
}

/// The mean of the per-round ratios `ours[i] / theirs[i]` (rounds run one after the other,
/// so a pair shares the machine's state) and its 95 % confidence interval (Student's t);
/// `None` with fewer than two pairs.
fn paired_ratio(ours: &[f64], theirs: &[f64]) -> Option<(f64, f64, f64)> {
    let r: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| a / b.max(1e-9))
        .collect();
    let n = r.len();
    if n < 2 {
        return None;
    }
    let mean = r.iter().sum::<f64>() / n as f64;
    let var = r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    // Two-sided 95 % quantiles of Student's t for 1–10 degrees of freedom, then the normal's.
    const T95: [f64; 10] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23];
    let t = T95.get(n - 2).copied().unwrap_or(1.96);
    let half = t * (var / n as f64).sqrt();
    Some((mean, mean - half, mean + half))
}

fn mean_cpu_us(v: &[ListResult]) -> f64 {
    v.iter().map(ListResult::cpu_us_per_req).sum::<f64>() / (v.len().max(1) as f64)
}

fn print_vs(v: &VsResult) {
    let reg = |r: &ddnet::Registration, s: Option<Spent>| {
        vec![
            format!("{:.0} /s", r.ok as f64 / r.secs.max(1e-9)),
            format!(
                "{} ok, {} failed in {:.1} s; first POST → success {}; {}",
                r.ok,
                r.failed,
                r.secs,
                r.latency.summary(),
                s.unwrap_or_default().describe()
            ),
        ]
    };
    let mut rows = Vec::new();
    let mut row = vec!["Muster: DDNet HTTP registrations (2 POSTs + UDP chal)".to_owned()];
    row.extend(reg(&v.muster_reg, v.muster_reg_spent));
    rows.push(row);
    let mut row = vec!["mastersrv: DDNet HTTP registrations".to_owned()];
    row.extend(reg(&v.mastersrv_reg, v.mastersrv_reg_spent));
    rows.push(row);
    rows.push(vec![
        "listed in servers.json (Muster / nginx)".to_owned(),
        format!("{} / {}", v.muster_listed, v.nginx_listed),
        format!(
            "refresh POSTs every 15 s per server while measuring: Muster {:?}, mastersrv {:?} (ok, failed)",
            v.refresh.first(),
            v.refresh.get(1)
        ),
    ]);
    println!(
        "{}",
        table::render(&["registration", "rate", "detail"], &rows)
    );
    let mut rows = Vec::new();
    for (label, ours, theirs) in &v.rows {
        let (a, b) = (mean_rate(ours), mean_rate(theirs));
        let rates = |x: &[ListResult]| {
            x.iter()
                .map(|l| {
                    format!(
                        "{:.0} at {:.0}% CPU, {:.0} µs each (bench {:.0}%, rest {:.0}%)",
                        l.rate.per_sec(),
                        l.spent.master_pct,
                        l.cpu_us_per_req(),
                        l.spent.bench_pct,
                        l.spent.others_pct
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        rows.push(vec![
            format!("servers.json {label}"),
            format!("{a:.0} /s"),
            format!("{b:.0} /s"),
            format!("{:.2}×", a / b.max(1e-9)),
            format!(
                "{} / {}",
                ours.first().map_or(0, |l| l.rate.bytes_each()),
                theirs.first().map_or(0, |l| l.rate.bytes_each())
            ),
            format!("{:.0} / {:.0} µs", mean_cpu_us(ours), mean_cpu_us(theirs)),
            format!(
                "rounds: Muster [{}], nginx [{}]",
                rates(ours),
                rates(theirs)
            ),
        ]);
    }
    println!(
        "{}",
        table::render(
            &[
                "servers.json",
                "Muster",
                "nginx",
                "ratio",
                "bytes each (M / n)",
                "server CPU/req (M / n)",
                "detail"
            ],
            &rows
        )
    );
    let theirs = v.mastersrv_rss_kib + v.nginx_rss_kib;
    let rows = vec![vec![
        "resident memory".to_owned(),
        format!("{} MiB", v.muster_rss_kib / 1024),
        format!(
            "{} MiB (mastersrv {} + nginx {})",
            theirs / 1024,
            v.mastersrv_rss_kib / 1024,
            v.nginx_rss_kib / 1024
        ),
        format!("{:.2}×", v.muster_rss_kib as f64 / theirs.max(1) as f64),
        format!(
            "VmRSS after the runs; nginx = master + workers; the file nginx serves sits in the page \
             cache, and so do Muster's servers.json, its gzip form and its DDNet infos, in unnamed \
             files ({} MiB); none of these files is counted here; mastersrv used {:.0}% CPU \
             meanwhile (writing the file each second)",
            v.muster_body_kib / 1024,
            v.mastersrv_cpu_pct
        ),
    ]];
    println!(
        "{}",
        table::render(
            &["memory", "Muster", "mastersrv + nginx", "ratio", "detail"],
            &rows
        )
    );
    println!("nginx: {}", peers::NGINX_GZIP);
    if v.split_cores {
        println!(
            "servers.json rounds with --split-cores: Muster, mastersrv and nginx on CPU 0, the \
             bench's clients on CPU 1; the side not measured stopped (SIGSTOP) for each round"
        );
    }
    if let Some((m, s)) = &v.refresh_alone {
        println!(
            "CPU per refresh POST, both sides refreshed ({:.0}/s each) and nothing else running: \
             Muster {}, mastersrv {} (its file written each second included): {:.2}×",
            v.n as f64 / ddnet::REFRESH_EVERY.as_secs_f64(),
            m.describe(),
            s.describe(),
            m.cpu_us_each() / s.cpu_us_each().max(1e-9)
        );
    }
    if let Some((m, s)) = &v.refresh_burst {
        println!(
            "CPU per refresh POST after both were stopped as long (the refreshes queued \
             meanwhile arrive in a burst): Muster {}, mastersrv {}: {:.2}×",
            m.describe(),
            s.describe(),
            m.cpu_us_each() / s.cpu_us_each().max(1e-9)
        );
    }
}

/// A list's name without its parenthesised counts (which differ between sizes).
fn without_counts(name: &str) -> String {
    match name.find(" (") {
        Some(a) => {
            let rest = name.get(a..).unwrap_or_default();
            let after = rest
                .find(')')
                .map_or("", |b| rest.get(b + 1..).unwrap_or_default());
            format!("{}{after}", name.get(..a).unwrap_or_default())
        }
        None => name.to_owned(),
    }
}

fn pass(ok: bool) -> String {
    if ok { "pass" } else { "FAIL" }.to_owned()
}

/// A goal row for `listed` (face, servers listed, servers wanted): passed when every face
/// listed all it should.
fn listed_row(goal: String, listed: &[(String, usize, usize)]) -> Vec<String> {
    vec![
        goal,
        listed
            .iter()
            .map(|(f, g, w)| format!("{f} {g}/{w}"))
            .collect::<Vec<_>>()
            .join(", "),
        pass(listed.iter().all(|(_, g, w)| g >= w)),
    ]
}

fn print_goals(sizes: &[SizeResult], vs: Option<&VsResult>) {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let big = sizes.iter().max_by_key(|s| s.n);
    let small = sizes.iter().min_by_key(|s| s.n);
    if let Some(b) = big {
        let at = format!("at {}", b.n);
        rows.push(listed_row(
            format!("every server listed after registration ({at})"),
            &b.listed,
        ));
        rows.push(listed_row(
            format!("  … and at the end, probe servers included ({at})"),
            &b.listed_end,
        ));
        let reg = b.reg_ok as f64 / b.reg_secs.max(1e-9);
        rows.push(vec![
            format!("registrations ≥ 20,000/s ({at})"),
            format!("{reg:.0} /s"),
            pass(reg >= 20_000.0),
        ]);
        if let Some(a) = &b.api_load {
            rows.push(vec![
                format!("API ≥ 2,000 pages/s while sorting ({at})"),
                format!(
                    "{:.0} /s, p99 {:.2} ms",
                    a.rate.per_sec(),
                    a.rate.latency.quantile_ms(0.99).unwrap_or(0.0)
                ),
                pass(a.rate.per_sec() >= 2000.0),
            ]);
        }
        let p99 = b
            .probe_load
            .master
            .quantile_ms(0.99)
            .unwrap_or(f64::INFINITY);
        let max = b.probe_load.master.max_ms().unwrap_or(f64::INFINITY);
        rows.push(vec![
            format!("no face stall > 5 ms while the API sorts: q→challenge p99 ({at})"),
            format!(
                "{p99:.2} ms (idle {:.2} ms)",
                b.probe_idle.master.quantile_ms(0.99).unwrap_or(0.0)
            ),
            pass(p99 <= 5.0),
        ]);
        rows.push(vec![
            format!("  … and its max ({at})"),
            format!(
                "{max:.2} ms (idle {:.2} ms; {:.2} ms until the probe's task read it)",
                b.probe_idle.master.max_ms().unwrap_or(0.0),
                b.probe_load.task.max_ms().unwrap_or(0.0)
            ),
            pass(max <= 5.0),
        ]);
        for (i, what) in ["GameAgent", "DDNet (1 KB info)", "GameSpy"]
            .iter()
            .enumerate()
        {
            let m = b.mem.get(i).copied().flatten();
            rows.push(vec![
                format!("≤ 1 KiB per server, {what} ({at})"),
                fmt_mem(m),
                pass(m.is_some_and(|m| m <= 1024.0)),
            ]);
        }
    }
    if let (Some(s), Some(b)) = (small, big) {
        if b.n > s.n {
            let per_reg = |r: &SizeResult| {
                1e6 * r.reg_spent.unwrap_or_default().master_cpu / r.reg_ok.max(1) as f64
            };
            let (a, z) = (per_reg(s), per_reg(b));
            rows.push(vec![
                format!("CPU per registration flat {}→{} (≤ 1.5×)", s.n, b.n),
                format!("{a:.1} → {z:.1} µs ({:.2}×)", z / a.max(1e-9)),
                pass(z <= 1.5 * a),
            ]);
            // Judged on the machine's busy CPU per byte, the master's share printed beside it.
            // On loopback the kernel does both ends' TCP work in whichever process drives the
            // exchange at the moment: the reader's ACKs push the sender's queued data in the
            // reader's time, and how much goes which way moves with the body's size (a
            // servers.json of 12 MB against one of 119 MB with a connection each: the master's
            // share of the busy CPU ~22 % → ~41 %, the total per byte flat). The total is what
            // a byte costs.
            for (ls, lb) in s.lists.iter().zip(&b.lists) {
                let (a, z) = (ls.machine_ns_per_byte(), lb.machine_ns_per_byte());
                let (ma, mz) = (ls.cpu_ns_per_byte(), lb.cpu_ns_per_byte());
                let name = without_counts(&lb.name);
                rows.push(vec![
                    format!("CPU per list byte flat, {name} (≤ 1.5×)"),
                    format!(
                        "{a:.2} → {z:.2} ns ({:.2}×); master alone {ma:.2} → {mz:.2} ns ({:.2}×)",
                        z / a.max(1e-9),
                        mz / ma.max(1e-9)
                    ),
                    pass(z <= 1.5 * a),
                ]);
            }
        } else {
            rows.push(vec![
                "cost per registration and per list byte flat 10k→100k".to_owned(),
                "needs two sizes (--servers 10000,100000)".to_owned(),
                "not run".to_owned(),
            ]);
        }
    }
    if let Some(v) = vs {
        for (label, ours, theirs) in &v.rows {
            if label.ends_with("keep-alive") || label.ends_with("each") {
                let (a, b) = (mean_rate(ours), mean_rate(theirs));
                let rates =
                    |x: &[ListResult]| x.iter().map(|l| l.rate.per_sec()).collect::<Vec<_>>();
                let paired = paired_ratio(&rates(ours), &rates(theirs))
                    .map_or_else(String::new, |(m, lo, hi)| {
                        format!(" (round pairs {m:.3}×, 95 % CI {lo:.3}–{hi:.3})")
                    });
                rows.push(vec![
                    format!("servers.json {label} ≥ nginx ({})", v.n),
                    format!("{a:.0} vs {b:.0} /s{paired}"),
                    pass(a >= b),
                ]);
            }
        }
        let theirs = v.mastersrv_rss_kib + v.nginx_rss_kib;
        rows.push(vec![
            format!("memory ≤ mastersrv + nginx ({})", v.n),
            format!("{} vs {} MiB", v.muster_rss_kib / 1024, theirs / 1024),
            pass(v.muster_rss_kib <= theirs),
        ]);
    } else {
        rows.push(vec![
            "servers.json ≥ nginx, memory ≤ mastersrv + nginx".to_owned(),
            "needs --vs-mastersrv".to_owned(),
            "not run".to_owned(),
        ]);
    }
    if big.is_some_and(|b| b.n < 100_000) {
        rows.push(vec![
            "the goals above are set for 100,000 servers".to_owned(),
            format!("largest size run: {}", big.map_or(0, |b| b.n)),
            "not run".to_owned(),
        ]);
    }
    let mut s = String::new();
    let _ = write!(s, "{}", table::render(&["goal", "figure", "result"], &rows));
    print!("{s}");
}

#[cfg(test)]
mod tests {
    use super::{listed_row, paired_ratio};

    #[test]
    fn paired_ratio_and_its_interval() {
        assert_eq!(paired_ratio(&[300.0], &[290.0]), None);
        // Ratios 1.1 and 0.9: mean 1, sample sd 0.1414, t(1) 12.71 → ±1.27.
        let (m, lo, hi) = paired_ratio(&[110.0, 90.0], &[100.0, 100.0]).unwrap();
        assert!((m - 1.0).abs() < 1e-9);
        assert!(
            (hi - 2.271).abs() < 1e-3 && (lo + 0.271).abs() < 1e-3,
            "{lo} {hi}"
        );
        // Equal ratios: no spread.
        let (m, lo, hi) = paired_ratio(&[210.0, 105.0, 315.0], &[200.0, 100.0, 300.0]).unwrap();
        assert!((m - 1.05).abs() < 1e-9 && (hi - lo).abs() < 1e-9);
    }

    #[test]
    fn a_listed_row_passes_only_when_every_face_listed_all() {
        let all = [("quake3".to_owned(), 10, 10), ("valve".to_owned(), 12, 10)];
        assert_eq!(
            listed_row("goal".to_owned(), &all),
            ["goal", "quake3 10/10, valve 12/10", "pass"]
        );
        let short = [("quake3".to_owned(), 10, 10), ("valve".to_owned(), 9, 10)];
        assert_eq!(listed_row("goal".to_owned(), &short)[2], "FAIL");
    }
}
