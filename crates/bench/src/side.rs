//! Side by side on loopback: one of Muster's UDP master faces against the master program of the
//! same family (`muster-bench quake3` against dpmaster, `muster-bench valve` against
//! xash3d-master). The family ([`Family`]) supplies the protocol: how one emulated server
//! registers, the list requests and how a whole list is read, and how its peer is started;
//! everything else (phases, figures, tables, goals) is here and the same for every family.
//!
//! For each `--servers N` (sizes run one after another), each master in a fresh process of its
//! own (Muster as `muster-bench master-child --only FACE`: the same `Master`, runtime and
//! allocator as `muster serve`, with only that face on `127.0.0.1:0`, loopback servers allowed
//! and every abuse limit raised):
//!
//! 1. **Registrations**: N emulated servers, `--per-address` per `127.x.y.z` address, each a UDP
//!    socket of its own, `--in-flight` at once, in two rounds: the first tenth (the warm-up),
//!    then the rest. Each round is timed from its first datagram until a list holds every
//!    server that registered so far (polled every few milliseconds; the time is that of the
//!    last change of the count, taken when the first datagram of the list that showed it
//!    came: a list shorter than expected is read until a quiet wait ends, which is the
//!    reader's time, not the master's); registrations per second are the main round's servers over
//!    its time (both rounds' times are printed), the master's CPU both rounds' over all servers.
//! 2. **Lists**: each of the family's list requests from `--clients` concurrent clients for
//!    `--duration`, every list read whole and its size checked: lists per second, datagrams per
//!    list, and the master's CPU per list (`/proc/PID/stat` utime + stime).
//! 3. **Memory per server**: what one more server costs, from the resident set (`VmRSS`) read
//!    before registering, after the warm-up and after all N. For a master that grows as servers
//!    come (Muster, xash3d-master) it is the growth from the warm-up's reading to the last over
//!    the servers registered in between: the warm-up has already paid the one-time costs (code
//!    run for the first time, the allocator's first pages per size class, caches filling), which
//!    are not per server; they are printed beside it as the warm-up's growth. dpmaster
//!    allocates its whole server array (`-n` slots) when it starts, so its figure is that
//!    array: its resident set after registering N minus that of an idle dpmaster started with
//!    `-n 1`, over N. The plain growth from before to after, over N, is printed for every master.
//!
//! Muster's resident set is read once it settled (store flushed, snapshot published, a few
//! seconds of quiet, as `muster-bench master` does). Beside it, the Rust data Muster holds
//! then, counted by its allocator, and the most it held at once during the main round (read
//! every millisecond by the child): a resident set well above the data held after the round
//! and near the most held during it is what the round's passing copies left in pages the
//! allocator could not give back. A missing peer is reported and its column left empty; the
//! bench asserts nothing.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::net::UdpSocket;

use crate::master::stats::{Client, Phase, Rate, Request, Spent, measure, rss_kib};
use crate::master::wire::{list_socket, source_ip};
use crate::master::{ChildMaster, RAISED, settled_rss};
use crate::procs::{self, KillOnDrop};
use crate::table;

/// First port of the emulated servers on each address (below the ephemeral range).
pub(crate) const PORT_BASE: u16 = 20_000;
/// How long the masters may take to list every server once all answered.
const LISTED_LIMIT: Duration = Duration::from_secs(15);
/// Address index (for [`source_ip`]) of the list clients, far above the servers'.
pub(crate) const CLIENT_SOURCES: usize = 300_000;
/// Once a list of a family without an end marker has begun, how long without a datagram
/// ends it when it is shorter than expected: in the list benchmarks, where a short list is a
/// failure and a datagram delayed by the scheduler must not make one.
pub(crate) const LIST_QUIET: Duration = Duration::from_millis(30);
/// The same while waiting for every server to be listed, where a list still short is the
/// usual case and is asked for again at once: a longer wait would poll the master less often
/// than the one whose first list is complete.
const POLL_QUIET: Duration = Duration::from_millis(3);
/// The warm-up round registers this share of the servers (one in ten).
const WARM_UP_DIVISOR: usize = 10;

/// A boxed future, for the family's protocol steps.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Flags shared by the side-by-side benches.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SideArgs {
    /// Servers registered with each master; several sizes separated by commas run one after
    /// another, each with fresh masters.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub servers: Vec<usize>,
    /// Emulated servers per `127.x.y.z` address (ports 20000 and up).
    #[arg(long, default_value_t = 100)]
    pub per_address: usize,
    /// Registrations in flight at once. At 256 dpmaster's receive buffer (the kernel's default,
    /// 208 KiB) overflows: heartbeats are dropped and sent again a second later.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// Concurrent clients per list benchmark.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// How long each list benchmark runs.
    #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
    pub duration: Duration,
}

/// One list request of a family.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    /// What it is called in the tables (`getservers`).
    pub label: String,
    /// The request as sent.
    pub datagram: Vec<u8>,
}

/// One whole list: its entries, datagrams and bytes, and when its first datagram came.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ListRead {
    pub entries: usize,
    pub datagrams: usize,
    pub bytes: u64,
    /// When the first datagram came: the master had answered, so what it lists it listed by
    /// then (the reader's wait for more datagrams after the last is not the master's time).
    pub first: Option<Instant>,
}

/// A started peer: its process and address.
pub(crate) type Started = (KillOnDrop, SocketAddr);

/// A family's protocol, as the bench drives it.
pub(crate) trait Family: Send + Sync + 'static {
    /// The command and the face (`quake3`): the master child's `--only` value.
    fn face(&self) -> &'static str;
    /// The peer's name (`dpmaster`).
    fn peer(&self) -> &'static str;
    /// The peer's command line, for the output.
    fn peer_command(&self) -> String;
    /// What an emulated server sends, for the output.
    fn servers_describe(&self) -> String;
    /// The list requests measured, in order; the first is the one polled while registering.
    fn asks(&self) -> anyhow::Result<Vec<Ask>>;
    /// Whether the peer allocates its room for `max` servers when it starts (the per-server
    /// figure is then taken against an idle peer with room for one).
    fn preallocates(&self) -> bool;
    /// Registers emulated server `i` from `sock` with `master`; returns the requests sent again.
    fn register<'a>(
        &'a self,
        i: usize,
        sock: &'a UdpSocket,
        master: SocketAddr,
    ) -> BoxFuture<'a, anyhow::Result<u32>>;
    /// Sends `ask` and reads the whole list (`expect` entries, when known, for a family whose
    /// lists have no end marker of their own; a list shorter than that ends once no datagram
    /// came for `quiet`).
    fn read_list<'a>(
        &'a self,
        sock: &'a UdpSocket,
        master: SocketAddr,
        ask: &'a Ask,
        expect: Option<usize>,
        quiet: Duration,
    ) -> BoxFuture<'a, anyhow::Result<ListRead>>;
    /// Starts the peer on loopback with room for `max` servers (`per_address` from one
    /// address) and waits until it answers; `dir` holds its files.
    fn start_peer<'a>(
        &'a self,
        bin: &'a Path,
        max: usize,
        per_address: usize,
        dir: &'a Path,
        tag: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Started>>;
}

/// The address of emulated server `i`.
pub(crate) fn server_addr(i: usize, per_address: usize) -> SocketAddr {
    let per = per_address.max(1);
    let port = PORT_BASE.saturating_add(u16::try_from(i % per).unwrap_or(u16::MAX));
    SocketAddr::from((source_ip(i / per), port))
}

/// A free loopback UDP port (bound and released).
pub(crate) fn free_udp_port() -> anyhow::Result<u16> {
    Ok(StdUdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Sends `ask` to `master` at most `attempts` times, each time waiting up to `wait` for a
/// datagram from `master` that `answer` accepts (others are passed over). Returns the attempt
/// that got it (0 for the first) with what `answer` made of it; `None` when none did.
pub(crate) async fn ask_until_answered<T>(
    sock: &UdpSocket,
    master: SocketAddr,
    ask: &[u8],
    attempts: u32,
    wait: Duration,
    mut answer: impl FnMut(&[u8]) -> Option<T>,
) -> anyhow::Result<Option<(u32, T)>> {
    let mut buf = [0u8; 2048];
    for attempt in 0..attempts {
        sock.send_to(ask, master).await?;
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(got) = tokio::time::timeout_at(deadline, sock.recv_from(&mut buf)).await {
            let (n, from) = got?;
            if from == master
                && let Some(value) = answer(buf.get(..n).unwrap_or_default())
            {
                return Ok(Some((attempt, value)));
            }
        }
    }
    Ok(None)
}

/// Polls the family's first list until it answers (the peer is up), `limit` at most; `proc`
/// exiting first is an error naming its output in `dir`.
pub(crate) async fn wait_answering<F: Family + ?Sized>(
    family: &F,
    proc: &mut KillOnDrop,
    addr: SocketAddr,
    dir: &Path,
    tag: &str,
) -> anyhow::Result<()> {
    let sock = list_socket(source_ip(CLIENT_SOURCES + 998))?;
    let asks = family.asks()?;
    let Some(ask) = asks.first() else {
        bail!("no list request");
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = proc.0.try_wait()? {
            let err =
                std::fs::read_to_string(dir.join(format!("{tag}.stderr"))).unwrap_or_default();
            let out =
                std::fs::read_to_string(dir.join(format!("{tag}.stdout"))).unwrap_or_default();
            bail!(
                "{} exited ({status}): {}{}",
                family.peer(),
                err.trim(),
                out.trim()
            );
        }
        if tokio::time::timeout(
            Duration::from_millis(200),
            family.read_list(&sock, addr, ask, Some(0), LIST_QUIET),
        )
        .await
        .is_ok_and(|r| r.is_ok())
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{} did not answer on {addr} within 10 s", family.peer());
        }
    }
}

/// Starts the peer as `cmd` (its program and arguments set), its output into `dir` as
/// `TAG.stdout` and `TAG.stderr`, and waits until it answers on `addr`.
pub(crate) async fn spawn_peer<F: Family + ?Sized>(
    family: &F,
    mut cmd: std::process::Command,
    addr: SocketAddr,
    dir: &Path,
    tag: &str,
) -> anyhow::Result<Started> {
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("{tag}.stdout")))?)
        .stderr(std::fs::File::create(dir.join(format!("{tag}.stderr")))?)
        .spawn()
        .with_context(|| format!("starting {}", cmd.get_program().to_string_lossy()))?;
    let mut proc = KillOnDrop(child);
    wait_answering(family, &mut proc, addr, dir, tag).await?;
    Ok((proc, addr))
}

/// A list client for [`measure`]: one request, the whole list read, its size checked.
struct ListClient<F: Family> {
    family: Arc<F>,
    sock: UdpSocket,
    master: SocketAddr,
    ask: Ask,
    expect: usize,
    datagrams: Arc<AtomicU64>,
}

impl<F: Family> ListClient<F> {
    async fn one(&mut self) -> anyhow::Result<u64> {
        let read = self
            .family
            .read_list(
                &self.sock,
                self.master,
                &self.ask,
                Some(self.expect),
                LIST_QUIET,
            )
            .await?;
        if read.entries != self.expect {
            bail!("{} entries, expected {}", read.entries, self.expect);
        }
        self.datagrams
            .fetch_add(read.datagrams as u64, Ordering::Relaxed);
        Ok(read.bytes)
    }
}

impl<F: Family> Client for ListClient<F> {
    fn request(&mut self, _seq: u64) -> Request<'_> {
        Box::pin(self.one())
    }
}

/// Registers servers `range`, `in_flight` at once: (answered, failed, requests resent).
async fn register_range<F: Family>(
    family: &Arc<F>,
    master: SocketAddr,
    range: std::ops::Range<usize>,
    per_address: usize,
    in_flight: usize,
) -> anyhow::Result<(usize, usize, u64)> {
    let next = Arc::new(AtomicUsize::new(range.start));
    let end = range.end;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..in_flight.max(1) {
        let (next, family) = (Arc::clone(&next), Arc::clone(family));
        tasks.spawn(async move {
            let (mut ok, mut failed, mut resent) = (0usize, 0usize, 0u64);
            let mut first_error = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let outcome = async {
                    let sock = UdpSocket::bind(server_addr(i, per_address)).await?;
                    family.register(i, &sock, master).await
                }
                .await;
                match outcome {
                    Ok(r) => {
                        ok += 1;
                        resent += u64::from(r);
                    }
                    Err(e) => {
                        failed += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (ok, failed, resent, first_error)
        });
    }
    let mut all = (0, 0, 0);
    let mut reported = false;
    while let Some(joined) = tasks.join_next().await {
        let (ok, failed, resent, error) = joined?;
        all.0 += ok;
        all.1 += failed;
        all.2 += resent;
        if let (Some(e), false) = (error, reported) {
            eprintln!("  a registration failed: {e:#}");
            reported = true;
        }
    }
    Ok(all)
}

/// Polls the first list until it holds `want` servers (or the count stops at less for
/// [`LISTED_LIMIT`]); returns the count and the seconds since `start` of its last change (the
/// arrival of the first datagram of the list that showed it).
async fn wait_listed<F: Family>(
    family: &F,
    master: SocketAddr,
    want: usize,
    start: Instant,
) -> anyhow::Result<(usize, f64)> {
    let sock = list_socket(source_ip(CLIENT_SOURCES + 999))?;
    let asks = family.asks()?;
    let Some(ask) = asks.first() else {
        bail!("no list request");
    };
    let deadline = Instant::now() + LISTED_LIMIT;
    let (mut count, mut at) = (0usize, start.elapsed());
    loop {
        if let Ok(read) = family
            .read_list(&sock, master, ask, Some(want), POLL_QUIET)
            .await
            && read.entries != count
        {
            count = read.entries;
            // A short list (fewer than `want`) is read until the reader's quiet wait ends;
            // the master's answer is timed by its first datagram, not by that wait.
            at = read
                .first
                .map_or_else(|| start.elapsed(), |t| t.saturating_duration_since(start));
        }
        if count >= want || Instant::now() >= deadline {
            return Ok((count, at.as_secs_f64()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The machine's count of UDP datagrams dropped because a socket's receive buffer was full
/// (`RcvbufErrors` in `/proc/net/snmp`); every socket of the machine counts.
fn udp_rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|w| w == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// One list benchmark's figures.
#[derive(Debug, Clone, Default)]
struct Lists {
    rate: Rate,
    spent: Spent,
    datagrams: u64,
}

impl Lists {
    fn per_sec(&self) -> f64 {
        self.rate.per_sec()
    }

    fn datagrams_each(&self) -> f64 {
        self.datagrams as f64 / self.rate.ok.max(1) as f64
    }

    fn cpu_us_each(&self) -> f64 {
        1e6 * self.spent.master_cpu / self.rate.ok.max(1) as f64
    }
}

/// Everything measured for one master at one size.
#[derive(Debug, Default)]
struct Run {
    answered: usize,
    failed: usize,
    resent: u64,
    listed: usize,
    /// Seconds until the last server of each round registered, summed over the rounds.
    answered_secs: f64,
    /// Seconds until the list held every server, summed over the rounds.
    reg_secs: f64,
    /// Servers listed after the warm-up round.
    warm_listed: usize,
    /// Seconds of the main round, from its first datagram until every server was listed.
    main_secs: f64,
    /// UDP datagrams the kernel dropped for a full receive buffer while registering.
    reg_drops: u64,
    /// Master CPU seconds over both rounds.
    reg_cpu: f64,
    /// Master CPU, percent of one core, in the main round.
    reg_pct: f64,
    /// Servers registered in the warm-up round.
    warm_n: usize,
    rss_before_kib: u64,
    rss_warm_kib: u64,
    rss_after_kib: u64,
    /// An idle peer's resident set with room for one server (a preallocating peer).
    rss_base_kib: Option<u64>,
    /// Bytes Muster's Rust code held at the warm-up's reading and the last (a peer: none).
    heap_warm: Option<i64>,
    heap_after: Option<i64>,
    /// The most Muster's Rust code held at once between those two readings (sampled every
    /// millisecond by the child; a peer: none).
    heap_peak: Option<i64>,
    /// The resident set's split at the warm-up's reading and the last.
    split_warm: Option<MemSplit>,
    split_after: Option<MemSplit>,
    lists: Vec<(String, Lists)>,
}

impl Run {
    /// Registrations per second in the main round (after the warm-up).
    fn reg_rate(&self) -> f64 {
        self.listed.saturating_sub(self.warm_listed) as f64 / self.main_secs.max(1e-9)
    }

    fn reg_cpu_us(&self) -> f64 {
        1e6 * self.reg_cpu / self.answered.max(1) as f64
    }

    /// What one more server costs (see the module's text).
    fn bytes_per_server(&self, n: usize) -> f64 {
        match self.rss_base_kib {
            Some(base) => (self.rss_after_kib.saturating_sub(base) * 1024) as f64 / n.max(1) as f64,
            None => {
                let grown = self.rss_after_kib.saturating_sub(self.rss_warm_kib) * 1024;
                grown as f64 / n.saturating_sub(self.warm_n).max(1) as f64
            }
        }
    }

    fn delta_per_server(&self, n: usize) -> f64 {
        (self.rss_after_kib.saturating_sub(self.rss_before_kib) * 1024) as f64 / n.max(1) as f64
    }

    fn list(&self, label: &str) -> Option<&Lists> {
        self.lists.iter().find(|(a, _)| a == label).map(|(_, l)| l)
    }
}

/// A process's resident set split by what holds it, in KiB, read from `/proc/PID/smaps` by
/// mapping: an approximation from the mappings' names and shapes, for telling per-server
/// memory from the fixed costs.
#[derive(Debug, Clone, Copy, Default)]
struct MemSplit {
    /// Anonymous mappings that are not glibc's: the Rust heap (mimalloc), stacks.
    anon: u64,
    /// glibc `malloc`'s main heap and its per-thread arenas (64 MiB mappings): SQLite's page
    /// caches and statements (the bundled SQLite allocates with the C library, not mimalloc).
    libc: u64,
    /// File-backed pages: the binary's code and data as far as they were run, the SQLite
    /// files' shared-memory index.
    files: u64,
}

/// Size of one glibc per-thread malloc arena's mapping (`HEAP_MAX_SIZE` on 64-bit), KiB.
const GLIBC_ARENA_KIB: u64 = 64 * 1024;

impl MemSplit {
    /// The split of `pid`'s resident set now (`None`: smaps unreadable).
    fn of(pid: u32) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
        // (size KiB, readable-writable, name, Rss KiB) per mapping, in address order.
        let mut maps: Vec<(u64, bool, String, u64)> = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let Some(first) = words.next() else { continue };
            if let Some((a, b)) = first.split_once('-')
                && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
            {
                let perms = words.next().unwrap_or_default();
                let name = words.nth(3).unwrap_or_default().to_owned();
                maps.push(((b - a) / 1024, perms.starts_with("rw"), name, 0));
            } else if first == "Rss:"
                && let Some(m) = maps.last_mut()
            {
                m.3 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            }
        }
        let mut split = Self::default();
        for (i, (size, rw, name, rss)) in maps.iter().enumerate() {
            let next = maps.get(i + 1);
            // A glibc arena: its used part (read-write), then the rest of the 64 MiB reserved
            // (no access), both anonymous; or all 64 MiB in use.
            let arena = name.is_empty()
                && *rw
                && (*size == GLIBC_ARENA_KIB
                    || next.is_some_and(|(s, nrw, nname, _)| {
                        !nrw && nname.is_empty() && size + s == GLIBC_ARENA_KIB
                    }));
            if name == "[heap]" || arena {
                split.libc += rss;
            } else if name.starts_with('/') {
                split.files += rss;
            } else {
                split.anon += rss;
            }
        }
        Some(split)
    }

    /// `after` minus `self`, per part, per server over `count` servers.
    fn growth(&self, after: &Self, count: usize) -> String {
        let d = |a: u64, b: u64| (b as i64 - a as i64) * 1024 / count.max(1) as i64;
        format!(
            "anonymous (Rust heap, stacks) {:+} B, C heap (SQLite) {:+} B, file pages {:+} B",
            d(self.anon, after.anon),
            d(self.libc, after.libc),
            d(self.files, after.files)
        )
    }
}

/// A master under test.
#[derive(Debug)]
enum Master {
    Muster(ChildMaster),
    Peer(KillOnDrop),
}

impl Master {
    fn pid(&self) -> u32 {
        match self {
            Self::Muster(m) => m.pid,
            Self::Peer(d) => d.0.id(),
        }
    }

    /// The resident set, KiB; Muster's once it settled.
    async fn rss(&mut self) -> anyhow::Result<u64> {
        match self {
            Self::Muster(m) => settled_rss(m).await,
            Self::Peer(d) => Ok(rss_kib(d.0.id()).unwrap_or(0)),
        }
    }

    /// Bytes Muster's Rust code holds (read after [`Master::rss`], so settled), and the most
    /// it held at once since the last call; a peer: none.
    fn heap(&mut self) -> (Option<i64>, Option<i64>) {
        match self {
            Self::Muster(m) => match m.call("heap") {
                Ok(v) => (
                    v.get("live").and_then(serde_json::Value::as_i64),
                    v.get("peak").and_then(serde_json::Value::as_i64),
                ),
                Err(_) => (None, None),
            },
            Self::Peer(_) => (None, None),
        }
    }

    fn stop(self) -> anyhow::Result<()> {
        match self {
            Self::Muster(m) => m.quit(),
            Self::Peer(d) => {
                drop(d);
                Ok(())
            }
        }
    }
}

/// Registers, lists and measures one master.
async fn run_master<F: Family>(
    family: &Arc<F>,
    args: &SideArgs,
    n: usize,
    mut master: Master,
    addr: SocketAddr,
    base_kib: Option<u64>,
) -> anyhow::Result<Run> {
    let pid = master.pid();
    let warm_n = n / WARM_UP_DIVISOR;
    let mut run = Run {
        rss_before_kib: master.rss().await?,
        rss_base_kib: base_kib,
        warm_n,
        ..Run::default()
    };
    let drops = udp_rcvbuf_errors();
    for (round, range) in [(0, 0..warm_n), (1, warm_n..n)] {
        eprintln!("  registering servers {}..{} …", range.start, range.end);
        let phase = Phase::start(&[pid]);
        let start = Instant::now();
        let (answered, failed, resent) =
            register_range(family, addr, range, args.per_address, args.in_flight).await?;
        let answered_secs = start.elapsed().as_secs_f64();
        let (listed, reg_secs) =
            wait_listed(family.as_ref(), addr, run.answered + answered, start).await?;
        let spent = phase.end();
        run.answered += answered;
        run.failed += failed;
        run.resent += resent;
        run.answered_secs += answered_secs;
        run.reg_secs += reg_secs;
        run.listed = listed;
        run.reg_cpu += spent.master_cpu;
        if round == 0 {
            run.warm_listed = listed;
            run.rss_warm_kib = master.rss().await?;
            run.heap_warm = master.heap().0;
            run.split_warm = MemSplit::of(pid);
        } else {
            run.reg_pct = spent.master_pct;
            run.main_secs = reg_secs;
        }
    }
    run.reg_drops = udp_rcvbuf_errors()
        .zip(drops)
        .map_or(0, |(b, a)| b.saturating_sub(a));
    run.rss_after_kib = master.rss().await?;
    (run.heap_after, run.heap_peak) = master.heap();
    run.split_after = MemSplit::of(pid);
    for ask in family.asks()? {
        eprintln!("  {} lists …", ask.label);
        let datagrams = Arc::new(AtomicU64::new(0));
        let mut clients: Vec<Box<dyn Client>> = Vec::new();
        for k in 0..args.clients.max(1) {
            clients.push(Box::new(ListClient {
                family: Arc::clone(family),
                sock: list_socket(source_ip(CLIENT_SOURCES + k))?,
                master: addr,
                ask: ask.clone(),
                expect: run.listed,
                datagrams: Arc::clone(&datagrams),
            }));
        }
        let phase = Phase::start(&[pid]);
        let rate = measure(clients, args.duration).await;
        let spent = phase.end();
        run.lists.push((
            ask.label.clone(),
            Lists {
                rate,
                spent,
                datagrams: datagrams.load(Ordering::Relaxed),
            },
        ));
    }
    master.stop()?;
    Ok(run)
}

/// Both masters at one size.
#[derive(Debug, Default)]
struct SizeResult {
    n: usize,
    muster: Option<Run>,
    peer: Option<Run>,
    muster_note: Option<String>,
    peer_note: Option<String>,
}

/// Runs the bench of `family` against the peer at `peer_bin` and prints its tables.
pub(crate) async fn run<F: Family>(
    family: F,
    args: &SideArgs,
    peer_bin: &Path,
) -> anyhow::Result<()> {
    if args.per_address == 0 || args.per_address > usize::from(u16::MAX - PORT_BASE) {
        bail!(
            "--per-address must be between 1 and {}",
            u16::MAX - PORT_BASE
        );
    }
    let family = Arc::new(family);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "muster-bench {}: {cores} cores, load average at start {}; the machine is shared, so \
         rates vary between runs",
        family.face(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "Muster: master child, the {} face only, loopback servers allowed; {RAISED}",
        family.face()
    );
    let root = procs::workspace_root();
    let bin: PathBuf = if peer_bin.is_absolute() {
        peer_bin.to_path_buf()
    } else {
        root.join(peer_bin)
    };
    let dir = std::env::temp_dir().join(format!(
        "muster-bench-{}-{}",
        family.face(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let have_peer = bin.is_file();
    if have_peer {
        println!(
            "{}: {} {}",
            family.peer(),
            bin.display(),
            family.peer_command()
        );
    } else {
        println!(
            "{}: not found at {} (bash scripts/install-peers.sh); its column stays empty",
            family.peer(),
            bin.display()
        );
    }
    println!(
        "servers: {}; {} per 127.x.y.z address, {} registrations in flight, a warm-up round of \
         one in {WARM_UP_DIVISOR} first; lists: {} clients × {:?}",
        family.servers_describe(),
        args.per_address,
        args.in_flight,
        args.clients,
        args.duration
    );
    let result = run_sizes(&family, args, &bin, have_peer, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let sizes = result?;
    println!();
    print_goals(family.as_ref(), &sizes)?;
    Ok(())
}

async fn run_sizes<F: Family>(
    family: &Arc<F>,
    args: &SideArgs,
    bin: &Path,
    have_peer: bool,
    dir: &Path,
) -> anyhow::Result<Vec<SizeResult>> {
    let base = if have_peer && family.preallocates() {
        match family
            .start_peer(bin, 1, args.per_address, dir, "peer-base")
            .await
        {
            Ok((proc, _)) => {
                let kib = rss_kib(proc.0.id()).unwrap_or(0);
                drop(proc);
                Some(kib)
            }
            Err(e) => {
                println!("{} could not be started: {e:#}", family.peer());
                None
            }
        }
    } else {
        None
    };
    let mut sizes = Vec::new();
    for &n in &args.servers {
        println!();
        println!("== {n} servers ==");
        let mut r = SizeResult {
            n,
            ..SizeResult::default()
        };
        eprintln!("Muster, {n} servers:");
        match ChildMaster::spawn_only(family.face(), n)
            .and_then(|m| m.addr(family.face()).map(|addr| (m, addr)))
        {
            Ok((m, addr)) => {
                r.muster = Some(run_master(family, args, n, Master::Muster(m), addr, None).await?);
            }
            Err(e) => r.muster_note = Some(format!("{e:#}")),
        }
        if have_peer && (base.is_some() || !family.preallocates()) {
            eprintln!("{}, {n} servers:", family.peer());
            match family
                .start_peer(bin, n, args.per_address, dir, "peer")
                .await
            {
                Ok((proc, addr)) => {
                    r.peer =
                        Some(run_master(family, args, n, Master::Peer(proc), addr, base).await?);
                }
                Err(e) => r.peer_note = Some(format!("{e:#}")),
            }
        }
        print_size(family.as_ref(), &r, base)?;
        sizes.push(r);
    }
    Ok(sizes)
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "-".to_owned()
    }
}

fn reg_detail(x: &Run) -> String {
    format!(
        "{}/{} in {:.3} s; {:.3} s; {} failed; {} resent; {} dropped",
        x.listed, x.answered, x.reg_secs, x.answered_secs, x.failed, x.resent, x.reg_drops
    )
}

fn print_size<F: Family>(family: &F, r: &SizeResult, base: Option<u64>) -> anyhow::Result<()> {
    let n = r.n;
    let cell =
        |run: Option<&Run>, f: &dyn Fn(&Run) -> String| run.map_or_else(|| "-".to_owned(), f);
    let (m, d) = (r.muster.as_ref(), r.peer.as_ref());
    let num = |run: Option<&Run>, f: &dyn Fn(&Run) -> f64| run.map(f);
    let ratio_of = |f: &dyn Fn(&Run) -> f64| match (num(m, f), num(d, f)) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "-".to_owned(),
    };
    let mut rows = vec![vec![
        "registrations/s (main round, until listed)".to_owned(),
        cell(m, &|x| format!("{:.0} /s", x.reg_rate())),
        cell(d, &|x| format!("{:.0} /s", x.reg_rate())),
        ratio_of(&Run::reg_rate),
    ]];
    rows.push(vec![
        "  both rounds: listed/answered in s; all answered after s; failed; resent; drops"
            .to_owned(),
        cell(m, &reg_detail),
        cell(d, &reg_detail),
        String::new(),
    ]);
    let cpu = |x: &Run| format!("{:.1} µs ({:.0}% of a core)", x.reg_cpu_us(), x.reg_pct);
    rows.push(vec![
        "  master CPU per registration".to_owned(),
        cell(m, &cpu),
        cell(d, &cpu),
        ratio_of(&Run::reg_cpu_us),
    ]);
    for ask in family.asks()? {
        let label = ask.label.clone();
        let get = move |x: &Run| x.list(&label).cloned().unwrap_or_default();
        let get = &get;
        rows.push(vec![
            format!("`{}` lists/s (whole list)", ask.label),
            cell(m, &|x| format!("{:.0} /s", get(x).per_sec())),
            cell(d, &|x| format!("{:.0} /s", get(x).per_sec())),
            ratio_of(&|x| get(x).per_sec()),
        ]);
        let detail = |x: &Run| {
            let l = get(x);
            format!(
                "{:.1}; {} / {}",
                l.datagrams_each(),
                l.rate.ok,
                l.rate.failed
            )
        };
        rows.push(vec![
            "  datagrams per list; ok / failed".to_owned(),
            cell(m, &detail),
            cell(d, &detail),
            String::new(),
        ]);
        let cpu = |x: &Run| {
            let l = get(x);
            format!(
                "{:.1} µs ({:.0}% of a core)",
                l.cpu_us_each(),
                l.spent.master_pct
            )
        };
        rows.push(vec![
            "  master CPU per list".to_owned(),
            cell(m, &cpu),
            cell(d, &cpu),
            ratio_of(&|x| get(x).cpu_us_each()),
        ]);
        rows.push(vec![
            "  machine during the lists".to_owned(),
            cell(m, &|x| get(x).spent.describe()),
            cell(d, &|x| get(x).spent.describe()),
            String::new(),
        ]);
    }
    rows.push(vec![
        "memory per server (one more server)".to_owned(),
        cell(m, &|x| format!("{:.0} B", x.bytes_per_server(n))),
        cell(d, &|x| format!("{:.0} B", x.bytes_per_server(n))),
        ratio_of(&|x| x.bytes_per_server(n)),
    ]);
    let rss = |x: &Run| match base {
        Some(base) if x.rss_base_kib.is_some() => format!(
            "{} → {} → {} (idle with room for one: {base}; plain growth {:.0} B per server)",
            x.rss_before_kib,
            x.rss_warm_kib,
            x.rss_after_kib,
            x.delta_per_server(n)
        ),
        _ => format!(
            "{} → {} → {} (warm-up {:+} KiB; plain growth {:.0} B per server)",
            x.rss_before_kib,
            x.rss_warm_kib,
            x.rss_after_kib,
            x.rss_warm_kib as i64 - x.rss_before_kib as i64,
            x.delta_per_server(n)
        ),
    };
    rows.push(vec![
        "  VmRSS before → after warm-up → after all (KiB)".to_owned(),
        cell(m, &rss),
        cell(d, &rss),
        String::new(),
    ]);
    let split = |x: &Run| match (&x.split_warm, &x.split_after) {
        (Some(a), Some(b)) => a.growth(b, n.saturating_sub(x.warm_n)),
        _ => "-".to_owned(),
    };
    rows.push(vec![
        "  per server after the warm-up, by mapping (approximate, from smaps)".to_owned(),
        cell(m, &split),
        String::new(),
        String::new(),
    ]);
    // Bytes held at a reading (after the round, or at its most) beyond the warm-up's, per
    // server registered after the warm-up.
    let held = |x: &Run, at: Option<i64>| match (x.heap_warm, at) {
        (Some(a), Some(b)) => format!(
            "{:.0} B",
            (b - a) as f64 / n.saturating_sub(x.warm_n).max(1) as f64
        ),
        _ => "-".to_owned(),
    };
    rows.push(vec![
        "  of which live Rust data (bytes held, counted by the allocator)".to_owned(),
        cell(m, &|x| held(x, x.heap_after)),
        String::new(),
        String::new(),
    ]);
    rows.push(vec![
        format!(
            "  live Rust data at its most during the main round (sampled every ms with {}=1)",
            crate::master::PEAK_ENV
        ),
        cell(m, &|x| {
            if x.heap_peak.is_none() && x.heap_after.is_some() {
                "not sampled".to_owned()
            } else {
                held(x, x.heap_peak)
            }
        }),
        String::new(),
        String::new(),
    ]);
    print!(
        "{}",
        table::render(
            &[
                "",
                "Muster",
                family.peer(),
                &format!("Muster/{}", family.peer())
            ],
            &rows
        )
    );
    if let Some(note) = &r.muster_note {
        println!("Muster did not run: {note}");
    }
    if let Some(note) = &r.peer_note {
        println!("{} did not run: {note}", family.peer());
    }
    Ok(())
}

fn pass(ok: bool) -> String {
    if ok { "pass" } else { "FAIL" }.to_owned()
}

fn print_goals<F: Family>(family: &F, sizes: &[SizeResult]) -> anyhow::Result<()> {
    let peer = family.peer();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for s in sizes {
        let n = s.n;
        let (Some(m), Some(d)) = (&s.muster, &s.peer) else {
            let missing = match (&s.muster, &s.peer) {
                (None, None) => "neither ran".to_owned(),
                (None, _) => "Muster did not run".to_owned(),
                _ => format!("{peer} did not run"),
            };
            rows.push(vec![
                format!("Muster against {peer} at {n}"),
                missing,
                "not run".to_owned(),
            ]);
            continue;
        };
        let complete = m.listed == n && d.listed == n;
        rows.push(vec![
            format!("every server listed by both ({n})"),
            format!("Muster {}/{n}, {peer} {}/{n}", m.listed, d.listed),
            pass(complete),
        ]);
        rows.push(vec![
            format!("registrations/s ≥ {peer}'s ({n})"),
            format!(
                "{:.0} vs {:.0} /s ({})",
                m.reg_rate(),
                d.reg_rate(),
                ratio(m.reg_rate(), d.reg_rate())
            ),
            pass(m.reg_rate() >= d.reg_rate()),
        ]);
        for ask in family.asks()? {
            let (a, b) = (
                m.list(&ask.label).map_or(0.0, Lists::per_sec),
                d.list(&ask.label).map_or(0.0, Lists::per_sec),
            );
            rows.push(vec![
                format!("{} lists/s ≥ {peer}'s ({n})", ask.label),
                format!("{a:.0} vs {b:.0} /s ({})", ratio(a, b)),
                pass(a >= b && a > 0.0),
            ]);
        }
        let (a, b) = (m.bytes_per_server(n), d.bytes_per_server(n));
        rows.push(vec![
            format!("memory per server ≤ {peer}'s ({n})"),
            format!("{a:.0} vs {b:.0} B ({})", ratio(a, b)),
            pass(a <= b),
        ]);
    }
    print!("{}", table::render(&["goal", "figure", "result"], &rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_set_split_accounts_for_a_new_allocation() {
        let pid = std::process::id();
        let before = MemSplit::of(pid).expect("own smaps");
        assert!(before.files > 0, "{before:?}");
        // 64 MiB written through the global allocator lands in the anonymous part.
        let big = vec![1u8; 64 << 20];
        let after = MemSplit::of(pid).expect("own smaps");
        assert!(
            after.anon >= before.anon + (60 << 10),
            "{before:?} → {after:?}"
        );
        assert!(before.growth(&after, 1).starts_with("anonymous"));
        drop(big);
    }

    #[test]
    fn servers_spread_over_addresses_and_ports() {
        assert_eq!(
            server_addr(0, 100),
            SocketAddr::from((source_ip(0), PORT_BASE))
        );
        assert_eq!(
            server_addr(199, 100),
            SocketAddr::from((source_ip(1), PORT_BASE + 99))
        );
        let ip: std::net::Ipv4Addr = source_ip(2);
        assert_eq!(server_addr(250, 100).ip(), std::net::IpAddr::V4(ip));
    }

    #[test]
    fn memory_per_server_is_the_growth_after_the_warm_up_or_the_preallocated_array() {
        let grows = Run {
            warm_n: 100,
            rss_before_kib: 10_000,
            rss_warm_kib: 12_000,
            rss_after_kib: 12_900,
            ..Run::default()
        };
        // 900 KiB over the 900 servers after the warm-up: 1 KiB each.
        assert_eq!(grows.bytes_per_server(1000), 1024.0);
        assert_eq!(grows.delta_per_server(1000), 2900.0 * 1024.0 / 1000.0);
        let preallocated = Run {
            warm_n: 100,
            rss_before_kib: 2_300,
            rss_warm_kib: 2_300,
            rss_after_kib: 2_300,
            rss_base_kib: Some(2_000),
            ..Run::default()
        };
        assert_eq!(preallocated.bytes_per_server(1000), 300.0 * 1024.0 / 1000.0);
    }

    #[tokio::test]
    async fn the_first_accepted_reply_from_the_master_ends_the_asking() {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let master = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = client.local_addr().unwrap();
        let addr = master.local_addr().unwrap();
        let fake = async {
            let mut buf = [0u8; 64];
            let (n, _) = master.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"ask");
            other.send_to(b"yes 1", to).await.unwrap(); // not from the master
            master.send_to(b"no", to).await.unwrap(); // refused
            master.send_to(b"yes 2", to).await.unwrap();
        };
        let asking = ask_until_answered(&client, addr, b"ask", 3, Duration::from_secs(30), |d| {
            d.strip_prefix(b"yes ").map(<[u8]>::to_vec)
        });
        let ((), got) = tokio::join!(fake, asking);
        assert_eq!(got.unwrap(), Some((0, b"2".to_vec())));
    }

    #[tokio::test]
    async fn an_unanswered_ask_is_sent_attempts_times_then_gives_none() {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let master = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = master.local_addr().unwrap();
        let got = ask_until_answered(&client, addr, b"ask", 2, Duration::from_millis(20), |_| {
            Some(())
        })
        .await
        .unwrap();
        assert_eq!(got, None);
        let mut buf = [0u8; 64];
        let mut asks = 0;
        while master.try_recv_from(&mut buf).is_ok() {
            asks += 1;
        }
        assert_eq!(asks, 2);
    }
}
