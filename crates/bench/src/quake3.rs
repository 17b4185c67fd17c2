//! `muster-bench quake3`: Muster's Quake III master face and dpmaster side by side on loopback.
//!
//! For each `--servers N` (sizes run one after another), each master in a fresh process of its
//! own (Muster as `muster-bench master-child --quake3-only`, the same `Master` and allocator as
//! `muster serve`, with only the Quake III face on `127.0.0.1:0`, loopback servers allowed and
//! every abuse limit raised; dpmaster with `-n N -N 0 --allow-loopback -v 1`):
//!
//! 1. **Registrations**: N emulated servers, `--per-address` per `127.x.y.z` address, each a
//!    UDP socket of its own sending `heartbeat DarkPlaces`, reading the master's
//!    `getinfo <challenge>` and answering an `infoResponse` echoing it (game `BenchGame`,
//!    protocol 3, 4 of 16 players), `--in-flight` (64) at once; timed from the first heartbeat until
//!    `getserversExt BenchGame 3` lists all N (polled every few milliseconds once every server
//!    answered; the time is that of the last change of the count).
//! 2. **Lists**: `getservers BenchGame 3` and `getserversExt BenchGame 3` from `--clients`
//!    concurrent clients for `--duration` each, every list read to its `EOT`: lists per second,
//!    datagrams per list, and the master's CPU per list (`/proc/PID/stat` utime + stime).
//! 3. **Memory per server**: the master's `VmRSS` after registering N minus before, over N. dpmaster
//!    allocates and clears its whole server array (`-n` slots) when it starts, so its
//!    figure is taken against the resident set of an idle dpmaster started with `-n 1`
//!    instead (what N servers cost it, allocated up front); the plain delta is printed beside it.
//!
//! Muster's resident set is read once it settled (store flushed, snapshot published, a few
//! seconds of quiet, as `muster-bench master` does). A missing dpmaster is reported and its
//! column left empty; the bench asserts nothing.

use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use muster_proto::quake3::{InfoString, Packet, Word};
use tokio::net::UdpSocket;

use crate::master::stats::{Client, Phase, Rate, Request, Spent, measure, rss_kib};
use crate::master::wire::{list_socket, source_ip};
use crate::master::{ChildMaster, RAISED, settled_rss};
use crate::procs::{self, KillOnDrop};
use crate::table;

/// The game every emulated server plays and every client asks for.
const GAME: &str = "BenchGame";
/// DarkPlaces' protocol number, sent by the servers and asked for by the clients.
const PROTOCOL: i32 = 3;
/// The heartbeat tag of the DarkPlaces family (the game name then comes in the info).
const TAG: &str = "DarkPlaces";
/// First port of the emulated servers on each address (below the ephemeral range).
const PORT_BASE: u16 = 20_000;
/// How long one registration waits for its `getinfo` before sending the heartbeat again.
const GETINFO_WAIT: Duration = Duration::from_millis(1000);
/// Heartbeats one registration sends at most.
const ATTEMPTS: u32 = 3;
/// How long a list datagram may take before the request counts as failed.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the masters may take to list every server once all answered.
const LISTED_LIMIT: Duration = Duration::from_secs(15);
/// Address index (for [`source_ip`]) of the list clients, far above the servers'.
const CLIENT_SOURCES: usize = 300_000;

/// Flags of `muster-bench quake3`.
#[derive(Debug, clap::Args)]
pub(crate) struct Quake3Args {
    /// Servers registered with each master; several sizes separated by commas run one after
    /// another, each with fresh masters.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    servers: Vec<usize>,
    /// Emulated servers per `127.x.y.z` address (ports 20000 and up).
    #[arg(long, default_value_t = 100)]
    per_address: usize,
    /// Registrations in flight at once. At 256 dpmaster's receive buffer (the kernel's default,
    /// 208 KiB) overflows: heartbeats are dropped and sent again a second later.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Concurrent clients per list benchmark.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// How long each list benchmark runs.
    #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
    duration: Duration,
    /// dpmaster's binary (relative paths from the workspace root); `bash
    /// scripts/install-peers.sh` builds it there.
    #[arg(long, default_value = ".peers/bin/dpmaster")]
    dpmaster: PathBuf,
}

/// Which list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// `getservers BenchGame 3`.
    Plain,
    /// `getserversExt BenchGame 3`.
    Ext,
}

impl Ask {
    fn label(self) -> &'static str {
        match self {
            Self::Plain => "getservers",
            Self::Ext => "getserversExt",
        }
    }

    fn datagram(self) -> anyhow::Result<Vec<u8>> {
        let game = Word::new(GAME.as_bytes().to_vec()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let packet = match self {
            Self::Plain => Packet::GetServers {
                game: Some(game),
                protocol: PROTOCOL,
                options: Vec::new(),
            },
            Self::Ext => Packet::GetServersExt {
                game,
                protocol: PROTOCOL,
                options: Vec::new(),
            },
        };
        let mut out = Vec::new();
        packet.encode(&mut out);
        Ok(out)
    }
}

/// One whole list: its entries, datagrams and bytes.
#[derive(Debug, Clone, Copy, Default)]
struct ListRead {
    entries: usize,
    datagrams: usize,
    bytes: u64,
}

/// Sends `request` and reads the list until the datagram carrying `EOT`.
async fn read_list(
    sock: &UdpSocket,
    master: SocketAddr,
    request: &[u8],
) -> anyhow::Result<ListRead> {
    sock.send_to(request, master).await?;
    let mut buf = vec![0u8; 65_536];
    let mut read = ListRead::default();
    loop {
        let (n, from) = tokio::time::timeout(LIST_TIMEOUT, sock.recv_from(&mut buf))
            .await
            .with_context(|| {
                format!(
                    "list timed out after {} entries in {} datagrams",
                    read.entries, read.datagrams
                )
            })??;
        if from != master {
            continue;
        }
        let bytes = buf.get(..n).unwrap_or_default();
        let Ok(Packet::ServerList(list)) = Packet::decode(bytes) else {
            bail!("not a list datagram ({n} bytes)");
        };
        read.entries += list.servers.len();
        read.datagrams += 1;
        read.bytes += n as u64;
        if list.eot {
            return Ok(read);
        }
    }
}

/// A list client for [`measure`]: one request, the whole list read, its size checked.
#[derive(Debug)]
struct ListClient {
    sock: UdpSocket,
    master: SocketAddr,
    request: Vec<u8>,
    expect: usize,
    datagrams: Arc<AtomicU64>,
}

impl ListClient {
    async fn one(&mut self) -> anyhow::Result<u64> {
        let read = read_list(&self.sock, self.master, &self.request).await?;
        if read.entries != self.expect {
            bail!("{} entries, expected {}", read.entries, self.expect);
        }
        self.datagrams
            .fetch_add(read.datagrams as u64, Ordering::Relaxed);
        Ok(read.bytes)
    }
}

impl Client for ListClient {
    fn request(&mut self, _seq: u64) -> Request<'_> {
        Box::pin(self.one())
    }
}

/// The address of emulated server `i`.
fn server_addr(i: usize, per_address: usize) -> SocketAddr {
    let per = per_address.max(1);
    let port = PORT_BASE.saturating_add(u16::try_from(i % per).unwrap_or(u16::MAX));
    SocketAddr::from((source_ip(i / per), port))
}

/// The `infoResponse` of server `i`, echoing `challenge`.
fn info_response(i: usize, challenge: &Word) -> anyhow::Result<Vec<u8>> {
    let mut info = InfoString::new();
    let fields: [(&[u8], Vec<u8>); 9] = [
        (b"gamename", GAME.as_bytes().to_vec()),
        (b"modname", b"data".to_vec()),
        (b"gameversion", b"20000".to_vec()),
        (b"sv_maxclients", b"16".to_vec()),
        (b"clients", b"4".to_vec()),
        (b"bots", b"0".to_vec()),
        (b"mapname", b"stormkeep".to_vec()),
        (b"hostname", format!("Bench server {i}").into_bytes()),
        (b"protocol", PROTOCOL.to_string().into_bytes()),
    ];
    for (k, v) in fields {
        info.push(k.to_vec(), v)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    info.push(b"challenge".to_vec(), challenge.as_bytes().to_vec())
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut out = Vec::new();
    Packet::InfoResponse { info }.encode(&mut out);
    Ok(out)
}

/// One server's registration: heartbeat, `getinfo`, `infoResponse`. Returns the heartbeats sent
/// again.
async fn register(
    i: usize,
    per_address: usize,
    master: SocketAddr,
    heartbeat: &[u8],
) -> anyhow::Result<u32> {
    let sock = UdpSocket::bind(server_addr(i, per_address)).await?;
    let mut buf = [0u8; 2048];
    for attempt in 0..ATTEMPTS {
        sock.send_to(heartbeat, master).await?;
        let deadline = tokio::time::Instant::now() + GETINFO_WAIT;
        while let Ok(got) = tokio::time::timeout_at(deadline, sock.recv_from(&mut buf)).await {
            let (n, from) = got?;
            if from != master {
                continue;
            }
            if let Ok(Packet::GetInfo {
                challenge: Some(challenge),
            }) = Packet::decode(buf.get(..n).unwrap_or_default())
            {
                sock.send_to(&info_response(i, &challenge)?, master).await?;
                return Ok(attempt);
            }
        }
    }
    bail!("no getinfo for server {i}")
}

/// Registers servers `0..n`, `in_flight` at once: (answered, failed, heartbeats resent).
async fn register_all(
    master: SocketAddr,
    n: usize,
    per_address: usize,
    in_flight: usize,
) -> anyhow::Result<(usize, usize, u64)> {
    let mut heartbeat = Vec::new();
    Packet::Heartbeat {
        tag: Word::new(TAG.as_bytes().to_vec()).map_err(|e| anyhow::anyhow!("{e:?}"))?,
    }
    .encode(&mut heartbeat);
    let heartbeat: Arc<[u8]> = Arc::from(heartbeat);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..in_flight.max(1) {
        let (next, heartbeat) = (Arc::clone(&next), Arc::clone(&heartbeat));
        tasks.spawn(async move {
            let (mut ok, mut failed, mut resent) = (0usize, 0usize, 0u64);
            let mut first_error = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                match register(i, per_address, master, &heartbeat).await {
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

/// Polls `getserversExt` until it lists `want` servers (or the count stops at less for
/// [`LISTED_LIMIT`]); returns the count and the seconds since `start` of its last change.
async fn wait_listed(
    master: SocketAddr,
    want: usize,
    start: Instant,
) -> anyhow::Result<(usize, f64)> {
    let sock = list_socket(source_ip(CLIENT_SOURCES + 999))?;
    let request = Ask::Ext.datagram()?;
    let deadline = Instant::now() + LISTED_LIMIT;
    let (mut count, mut at) = (0usize, start.elapsed());
    loop {
        if let Ok(read) = read_list(&sock, master, &request).await
            && read.entries != count
        {
            count = read.entries;
            at = start.elapsed();
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
    /// Seconds until the last server sent its `infoResponse`.
    answered_secs: f64,
    /// Seconds until the list held every server that answered.
    reg_secs: f64,
    /// UDP datagrams the kernel dropped for a full receive buffer while registering.
    reg_drops: u64,
    reg_spent: Spent,
    rss_before_kib: u64,
    rss_after_kib: u64,
    /// The resident set the per-server figure is taken against (dpmaster: an idle `-n 1`).
    rss_base_kib: u64,
    /// The resident set's split at the two readings.
    split_before: Option<MemSplit>,
    split_after: Option<MemSplit>,
    lists: Vec<(Ask, Lists)>,
}

impl Run {
    fn reg_rate(&self) -> f64 {
        self.listed as f64 / self.reg_secs.max(1e-9)
    }

    fn reg_cpu_us(&self) -> f64 {
        1e6 * self.reg_spent.master_cpu / self.answered.max(1) as f64
    }

    fn bytes_per_server(&self, n: usize) -> f64 {
        (self.rss_after_kib.saturating_sub(self.rss_base_kib) * 1024) as f64 / n.max(1) as f64
    }

    fn delta_per_server(&self, n: usize) -> f64 {
        (self.rss_after_kib.saturating_sub(self.rss_before_kib) * 1024) as f64 / n.max(1) as f64
    }

    fn list(&self, ask: Ask) -> Option<&Lists> {
        self.lists.iter().find(|(a, _)| *a == ask).map(|(_, l)| l)
    }
}

/// A process's resident set split by what holds it, in KiB, read from `/proc/PID/smaps` by
/// mapping: an approximation from the mappings' names and shapes, for telling per-server
/// memory from the fixed costs the per-server figure carries at small sizes.
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

    /// `after` minus `self`, per part.
    fn growth(&self, after: &Self) -> String {
        let d = |a: u64, b: u64| b as i64 - a as i64;
        format!(
            "anonymous (Rust heap, stacks) {:+}, C heap (SQLite) {:+}, file pages {:+} KiB",
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
    Dpmaster(KillOnDrop),
}

impl Master {
    fn pid(&self) -> u32 {
        match self {
            Self::Muster(m) => m.pid,
            Self::Dpmaster(d) => d.0.id(),
        }
    }

    /// The resident set, KiB; Muster's once it settled.
    async fn rss(&mut self) -> anyhow::Result<u64> {
        match self {
            Self::Muster(m) => settled_rss(m).await,
            Self::Dpmaster(d) => Ok(rss_kib(d.0.id()).unwrap_or(0)),
        }
    }

    fn stop(self) -> anyhow::Result<()> {
        match self {
            Self::Muster(m) => m.quit(),
            Self::Dpmaster(d) => {
                drop(d);
                Ok(())
            }
        }
    }
}

/// A free loopback UDP port (bound and released).
fn free_udp_port() -> anyhow::Result<u16> {
    Ok(StdUdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts dpmaster on loopback with room for `max` servers and waits until it answers a list.
async fn start_dpmaster(
    bin: &Path,
    max: usize,
    dir: &Path,
    tag: &str,
) -> anyhow::Result<(KillOnDrop, SocketAddr)> {
    // Started as root, dpmaster locks itself into this directory and fails without it.
    let _ = std::fs::create_dir_all("/var/empty");
    let port = free_udp_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let child = Command::new(bin)
        .args(["-l", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg("-n")
        .arg(max.max(1).to_string())
        .args(["-N", "0", "--allow-loopback", "-v", "1"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("{tag}.stdout")))?)
        .stderr(std::fs::File::create(dir.join(format!("{tag}.stderr")))?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut proc = KillOnDrop(child);
    let sock = list_socket(source_ip(CLIENT_SOURCES + 998))?;
    let request = Ask::Ext.datagram()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = proc.0.try_wait()? {
            let err =
                std::fs::read_to_string(dir.join(format!("{tag}.stderr"))).unwrap_or_default();
            let out =
                std::fs::read_to_string(dir.join(format!("{tag}.stdout"))).unwrap_or_default();
            bail!("dpmaster exited ({status}): {}{}", err.trim(), out.trim());
        }
        if tokio::time::timeout(Duration::from_millis(200), read_list(&sock, addr, &request))
            .await
            .is_ok_and(|r| r.is_ok())
        {
            return Ok((proc, addr));
        }
        if Instant::now() >= deadline {
            bail!("dpmaster did not answer on {addr} within 10 s");
        }
    }
}

/// Registers, lists and measures one master.
async fn run_master(
    args: &Quake3Args,
    n: usize,
    mut master: Master,
    addr: SocketAddr,
    base_kib: Option<u64>,
) -> anyhow::Result<Run> {
    let pid = master.pid();
    let before = master.rss().await?;
    let mut run = Run {
        rss_before_kib: before,
        rss_base_kib: base_kib.unwrap_or(before),
        split_before: MemSplit::of(pid),
        ..Run::default()
    };
    eprintln!("  registering {n} servers …");
    let drops = udp_rcvbuf_errors();
    let phase = Phase::start(&[pid]);
    let start = Instant::now();
    (run.answered, run.failed, run.resent) =
        register_all(addr, n, args.per_address, args.in_flight).await?;
    run.answered_secs = start.elapsed().as_secs_f64();
    (run.listed, run.reg_secs) = wait_listed(addr, run.answered, start).await?;
    run.reg_spent = phase.end();
    run.reg_drops = udp_rcvbuf_errors()
        .zip(drops)
        .map_or(0, |(b, a)| b.saturating_sub(a));
    run.rss_after_kib = master.rss().await?;
    run.split_after = MemSplit::of(pid);
    for ask in [Ask::Plain, Ask::Ext] {
        eprintln!("  {} lists …", ask.label());
        let datagrams = Arc::new(AtomicU64::new(0));
        let mut clients: Vec<Box<dyn Client>> = Vec::new();
        for k in 0..args.clients.max(1) {
            clients.push(Box::new(ListClient {
                sock: list_socket(source_ip(CLIENT_SOURCES + k))?,
                master: addr,
                request: ask.datagram()?,
                expect: run.listed,
                datagrams: Arc::clone(&datagrams),
            }));
        }
        let phase = Phase::start(&[pid]);
        let rate = measure(clients, args.duration).await;
        let spent = phase.end();
        run.lists.push((
            ask,
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

/// The resident set of an idle dpmaster started with `-n 1`: its footprint without the server
/// array it allocates up front.
async fn dpmaster_base(bin: &Path, dir: &Path) -> anyhow::Result<u64> {
    let (proc, _) = start_dpmaster(bin, 1, dir, "dpmaster-base").await?;
    let kib = rss_kib(proc.0.id()).unwrap_or(0);
    drop(proc);
    Ok(kib)
}

/// Both masters at one size.
#[derive(Debug, Default)]
struct SizeResult {
    n: usize,
    muster: Option<Run>,
    dpmaster: Option<Run>,
    dpmaster_note: Option<String>,
}

/// Runs the bench and prints its tables.
pub(crate) async fn run(args: &Quake3Args) -> anyhow::Result<()> {
    if args.per_address == 0 || args.per_address > usize::from(u16::MAX - PORT_BASE) {
        bail!(
            "--per-address must be between 1 and {}",
            u16::MAX - PORT_BASE
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "muster-bench quake3: {cores} cores, load average at start {}; the machine is shared, so \
         rates vary between runs",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("Muster: master child, Quake III face only, loopback servers allowed; {RAISED}");
    let root = procs::workspace_root();
    let bin = if args.dpmaster.is_absolute() {
        args.dpmaster.clone()
    } else {
        root.join(&args.dpmaster)
    };
    let dir = std::env::temp_dir().join(format!("muster-bench-quake3-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let have_dpmaster = bin.is_file();
    if have_dpmaster {
        println!(
            "dpmaster: {} -n N -N 0 --allow-loopback -v 1 (room for exactly N servers, no cap per \
             address, errors only on stdout, as a daemon prints nothing)",
            bin.display()
        );
    } else {
        println!(
            "dpmaster: not found at {} (bash scripts/install-peers.sh); its column stays empty",
            bin.display()
        );
    }
    println!(
        "servers: {} per 127.x.y.z address, {} registrations in flight; lists: {} clients × {:?}",
        args.per_address, args.in_flight, args.clients, args.duration
    );
    let result = run_sizes(args, &bin, have_dpmaster, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let sizes = result?;
    println!();
    print_goals(&sizes);
    Ok(())
}

async fn run_sizes(
    args: &Quake3Args,
    bin: &Path,
    have_dpmaster: bool,
    dir: &Path,
) -> anyhow::Result<Vec<SizeResult>> {
    let base = if have_dpmaster {
        match dpmaster_base(bin, dir).await {
            Ok(kib) => Some(kib),
            Err(e) => {
                println!("dpmaster could not be started: {e:#}");
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
        let m = ChildMaster::spawn_quake3(n)?;
        let addr = m.addr("quake3")?;
        r.muster = Some(run_master(args, n, Master::Muster(m), addr, None).await?);
        if let Some(base) = base {
            eprintln!("dpmaster, {n} servers:");
            match start_dpmaster(bin, n, dir, "dpmaster").await {
                Ok((proc, addr)) => {
                    r.dpmaster =
                        Some(run_master(args, n, Master::Dpmaster(proc), addr, Some(base)).await?);
                }
                Err(e) => r.dpmaster_note = Some(format!("{e:#}")),
            }
        }
        print_size(&r, base);
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

fn print_size(r: &SizeResult, base: Option<u64>) {
    let n = r.n;
    let cell =
        |run: Option<&Run>, f: &dyn Fn(&Run) -> String| run.map_or_else(|| "-".to_owned(), f);
    let (m, d) = (r.muster.as_ref(), r.dpmaster.as_ref());
    let num = |run: Option<&Run>, f: &dyn Fn(&Run) -> f64| run.map(f);
    let ratio_of = |f: &dyn Fn(&Run) -> f64| match (num(m, f), num(d, f)) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "-".to_owned(),
    };
    let mut rows = vec![vec![
        "registrations/s (heartbeat → getinfo → infoResponse, until listed)".to_owned(),
        cell(m, &|x| format!("{:.0} /s", x.reg_rate())),
        cell(d, &|x| format!("{:.0} /s", x.reg_rate())),
        ratio_of(&Run::reg_rate),
    ]];
    rows.push(vec![
        "  listed/answered in s; all answered after s; failed; heartbeats resent; kernel drops"
            .to_owned(),
        cell(m, &reg_detail),
        cell(d, &reg_detail),
        String::new(),
    ]);
    rows.push(vec![
        "  master CPU per registration".to_owned(),
        cell(m, &|x| {
            format!(
                "{:.1} µs ({:.0}% of a core)",
                x.reg_cpu_us(),
                x.reg_spent.master_pct
            )
        }),
        cell(d, &|x| {
            format!(
                "{:.1} µs ({:.0}% of a core)",
                x.reg_cpu_us(),
                x.reg_spent.master_pct
            )
        }),
        ratio_of(&Run::reg_cpu_us),
    ]);
    for ask in [Ask::Plain, Ask::Ext] {
        let get = move |x: &Run| x.list(ask).cloned().unwrap_or_default();
        rows.push(vec![
            format!(
                "`{} {GAME} {PROTOCOL}` lists/s (whole list to EOT)",
                ask.label()
            ),
            cell(m, &|x| format!("{:.0} /s", get(x).per_sec())),
            cell(d, &|x| format!("{:.0} /s", get(x).per_sec())),
            ratio_of(&|x| get(x).per_sec()),
        ]);
        rows.push(vec![
            "  datagrams per list; ok / failed".to_owned(),
            cell(m, &|x| {
                let l = get(x);
                format!(
                    "{:.1}; {} / {}",
                    l.datagrams_each(),
                    l.rate.ok,
                    l.rate.failed
                )
            }),
            cell(d, &|x| {
                let l = get(x);
                format!(
                    "{:.1}; {} / {}",
                    l.datagrams_each(),
                    l.rate.ok,
                    l.rate.failed
                )
            }),
            String::new(),
        ]);
        rows.push(vec![
            "  master CPU per list".to_owned(),
            cell(m, &|x| {
                let l = get(x);
                format!(
                    "{:.1} µs ({:.0}% of a core)",
                    l.cpu_us_each(),
                    l.spent.master_pct
                )
            }),
            cell(d, &|x| {
                let l = get(x);
                format!(
                    "{:.1} µs ({:.0}% of a core)",
                    l.cpu_us_each(),
                    l.spent.master_pct
                )
            }),
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
        "memory per server".to_owned(),
        cell(m, &|x| format!("{:.0} B", x.bytes_per_server(n))),
        cell(d, &|x| format!("{:.0} B", x.bytes_per_server(n))),
        ratio_of(&|x| x.bytes_per_server(n)),
    ]);
    rows.push(vec![
        "  VmRSS before → after registering (KiB)".to_owned(),
        cell(m, &|x| {
            format!("{} → {}", x.rss_before_kib, x.rss_after_kib)
        }),
        cell(d, &|x| {
            format!(
                "{} → {} (delta {:.0} B per server; idle with -n 1: {} KiB)",
                x.rss_before_kib,
                x.rss_after_kib,
                x.delta_per_server(n),
                base.unwrap_or(0)
            )
        }),
        String::new(),
    ]);
    rows.push(vec![
        "  growth by mapping (approximate, from smaps)".to_owned(),
        cell(m, &|x| match (&x.split_before, &x.split_after) {
            (Some(a), Some(b)) => a.growth(b),
            _ => "-".to_owned(),
        }),
        String::new(),
        String::new(),
    ]);
    print!(
        "{}",
        table::render(&["", "Muster", "dpmaster", "Muster/dpmaster"], &rows)
    );
    if let Some(note) = &r.dpmaster_note {
        println!("dpmaster did not run: {note}");
    }
}

fn pass(ok: bool) -> String {
    if ok { "pass" } else { "FAIL" }.to_owned()
}

fn print_goals(sizes: &[SizeResult]) {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for s in sizes {
        let n = s.n;
        let (Some(m), Some(d)) = (&s.muster, &s.dpmaster) else {
            rows.push(vec![
                format!("Muster against dpmaster at {n}"),
                "dpmaster did not run".to_owned(),
                "not run".to_owned(),
            ]);
            continue;
        };
        let complete = m.listed == n && d.listed == n;
        rows.push(vec![
            format!("every server listed by both ({n})"),
            format!("Muster {}/{n}, dpmaster {}/{n}", m.listed, d.listed),
            pass(complete),
        ]);
        rows.push(vec![
            format!("registrations/s ≥ dpmaster's ({n})"),
            format!(
                "{:.0} vs {:.0} /s ({})",
                m.reg_rate(),
                d.reg_rate(),
                ratio(m.reg_rate(), d.reg_rate())
            ),
            pass(m.reg_rate() >= d.reg_rate()),
        ]);
        for ask in [Ask::Plain, Ask::Ext] {
            let (a, b) = (
                m.list(ask).map_or(0.0, Lists::per_sec),
                d.list(ask).map_or(0.0, Lists::per_sec),
            );
            rows.push(vec![
                format!("{} lists/s ≥ dpmaster's ({n})", ask.label()),
                format!("{a:.0} vs {b:.0} /s ({})", ratio(a, b)),
                pass(a >= b && a > 0.0),
            ]);
        }
        let (a, b) = (m.bytes_per_server(n), d.bytes_per_server(n));
        rows.push(vec![
            format!("memory per server ≤ dpmaster's ({n})"),
            format!("{a:.0} vs {b:.0} B ({})", ratio(a, b)),
            pass(a <= b),
        ]);
    }
    print!("{}", table::render(&["goal", "figure", "result"], &rows));
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
        assert!(before.growth(&after).starts_with("anonymous"));
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
    fn info_response_echoes_the_challenge() {
        let challenge = Word::new(b"abcdefghij".to_vec()).unwrap();
        let bytes = info_response(7, &challenge).unwrap();
        let Ok(Packet::InfoResponse { info }) = Packet::decode(&bytes) else {
            panic!("not an infoResponse");
        };
        assert_eq!(info.get(b"challenge"), Some(&b"abcdefghij"[..]));
        assert_eq!(info.get(b"gamename"), Some(GAME.as_bytes()));
        assert_eq!(info.get_int(b"protocol"), Some(i64::from(PROTOCOL)));
        assert_eq!(info.get(b"hostname"), Some(&b"Bench server 7"[..]));
    }

    #[test]
    fn list_requests_name_the_game_and_protocol() {
        assert_eq!(
            Ask::Plain.datagram().unwrap(),
            b"\xff\xff\xff\xffgetservers BenchGame 3"
        );
        assert_eq!(
            Ask::Ext.datagram().unwrap(),
            b"\xff\xff\xff\xffgetserversExt BenchGame 3"
        );
    }
}
