//! The master under test, in its own process (`muster-bench master-child`), so that its CPU
//! time and resident set are its own and the bench clients do not share its runtime.
//!
//! The child binds loopback port 0 on every face the bench uses, prints one JSON line
//! `{"ready":{face:address,…},"pid":N}`, then answers one JSON line per command read from
//! stdin:
//!
//! ```text
//! count              {"listed":{face:n,…},"total":n,"records":n}
//! ddnet FIRST N      N DDNet records through MasterHandle::ddnet_register   {"secs":s,"ok":n}
//! gamespy FIRST N    N GameSpy records through MasterHandle::register       {"secs":s,"ok":n}
//! flush              publish and write the store                             {"ok":true}
//! heap               bytes the Rust code holds (counted from the start), and the most held
//!                    since the last `heap` when MUSTER_BENCH_PEAK=1      {"live":n,"peak":n|null}
//! durable            wait until the master's own persister has stored every change so far
//!                                                                            {"ok":true}
//! churn N RATE SECS  in the background, RATE poll results per second for SECS seconds on the
//!                    GameSpy records 0..N, each with a new map `t<unix ns>` (the change's
//!                    time, for the events bench's latency) and player count {"ok":true}
//! quit               stop the master, flush, exit                            {"bye":true}
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use muster_master::config::{Config, HumanDuration, Listen, ListenConfig};
use muster_master::faces::teeworlds::ddnet::ddnet_registration;
use muster_master::registry::{
    DdnetOutcome, DdnetRegister, Face, GameAddr, PollFields, PollInfo, PollPlayer, Registration,
    ServerKey, Timestamp,
};
use muster_master::{Listeners, Master, MasterHandle};
use muster_proto::Protocol;
use muster_proto::limit::SourceKey;
use serde_json::{Value, json};

use super::ddnet;

/// Flags of the hidden `muster-bench master-child`.
#[derive(Debug, clap::Args)]
pub(crate) struct ChildArgs {
    /// Where the store lives.
    #[arg(long)]
    data_dir: PathBuf,
    /// Servers the run registers per face (raises the per-source caps to fit).
    #[arg(long)]
    servers: usize,
    /// Only the HTTP face (DDNet register and servers.json), default lifetimes: the side by
    /// side run against mastersrv.
    #[arg(long)]
    ddnet_only: bool,
    /// The store URL (`[store] url`): a PostgreSQL database shared with another child.
    #[arg(long)]
    store: Option<String>,
    /// Only this UDP master face (`quake3`), loopback servers allowed: the side-by-side
    /// benches (`muster-bench quake3`).
    #[arg(long, conflicts_with = "ddnet_only")]
    only: Option<String>,
}

/// The GameSpy game the bench lists (Unreal Tournament).
pub(crate) const GAMESPY_GAME: &str = "ut";

/// The bench's config: loopback port 0, poller off, abuse limits raised so that a few
/// clients may ask as fast as they can, lifetimes long enough for the run (except in the
/// side-by-side run, which keeps DDNet's 30 s like mastersrv and refreshes every 15 s).
pub(crate) fn config(dir: &Path, servers: usize, ddnet_only: bool) -> Config {
    let mut c = Config {
        data_dir: dir.to_path_buf(),
        listen: ListenConfig::off(),
        ..Config::default()
    };
    let lo = Listen(vec![SocketAddr::from(([127, 0, 0, 1], 0))]);
    c.listen.http = lo.clone();
    if !ddnet_only {
        c.listen.gameagent = lo.clone();
        c.listen.gamespy_tcp = lo.clone();
        c.listen.teeworlds06 = lo.clone();
        c.listen.teeworlds07 = lo;
        let day = HumanDuration(Duration::from_secs(24 * 3600));
        c.lifetimes.gameagent = day;
        c.lifetimes.gamespy = day;
        c.lifetimes.teeworlds = day;
        c.lifetimes.ddnet = day;
        c.lifetimes.games.clear();
    }
    c.poller.enabled = false;
    // The events bench opens its streams from one address.
    c.events.max_streams_per_source = 4096;
    c.events.max_streams = 4096;
    let fast = HumanDuration(Duration::from_micros(1));
    let l = &mut c.limits;
    l.list_bytes_burst = 1 << 40;
    l.list_bytes_per_sec = 1 << 40;
    l.egress_bytes_per_sec = 1 << 40;
    l.heartbeat_burst = 1_000_000;
    l.heartbeat_refill = fast;
    l.challenge_burst = 1_000_000;
    l.challenge_refill = fast;
    l.tcp_list_burst = 1_000_000;
    l.tcp_list_refill = fast;
    l.http_list_burst = 1_000_000;
    l.http_list_refill = fast;
    l.ddnet_register_burst = 1_000_000;
    l.ddnet_register_refill = fast;
    l.ddnet_challenge_burst = 1_000_000;
    l.ddnet_challenge_refill = fast;
    l.servers_json_burst = 1_000_000;
    l.servers_json_refill = fast;
    l.servers_per_source = servers.max(ddnet::SERVERS_PER_IP).max(64);
    l.max_records = (servers * 4).max(l.max_records);
    l.max_tracked_sources = (servers * 2).max(l.max_tracked_sources);
    l.pending_per_ip = 1 << 20;
    l.pending_per_prefix = 1 << 20;
    l.pending_per_face = servers.max(16_384) * 2;
    l.tcp_max_connections = 16_384;
    l.tcp_max_per_source = 1024;
    c
}

/// [`config`] with only the UDP master face `face` listening (loopback servers allowed, as
/// dpmaster's `--allow-loopback`), its lifetime a day, every limit raised as for the other faces.
pub(crate) fn face_config(dir: &Path, servers: usize, face: &str) -> anyhow::Result<Config> {
    let mut c = config(dir, servers, false);
    c.listen = ListenConfig::off();
    let lo = Listen(vec![SocketAddr::from(([127, 0, 0, 1], 0))]);
    let day = HumanDuration(Duration::from_secs(24 * 3600));
    match face {
        "quake3" => {
            c.listen.quake3 = lo;
            c.quake3.allow_loopback = true;
            c.lifetimes.quake3 = day;
        }
        "valve" => {
            c.listen.valve = lo;
            c.valve.allow_loopback = true;
            c.lifetimes.valve = day;
        }
        other => anyhow::bail!("no side-by-side bench for the face {other:?}"),
    }
    Ok(c)
}

/// What the bench changes from the defaults, for the output.
pub(crate) const RAISED: &str = "per-source buckets (heartbeats, challenges, TCP/HTTP lists, \
DDNet POSTs, challenges and servers.json) 1e6 burst, 1 µs refill; list byte budgets and egress 1 TiB/s; \
servers per source = N; pending proofs 1M; TCP caps 16384 / 1024 per source; poller off; \
lifetimes 24 h (side-by-side run: defaults, DDNet 30 s like mastersrv)";

/// The address of emulated GameSpy server `i` (query port 7778).
fn gamespy_addr(i: usize) -> SocketAddr {
    let group = i / 100;
    let ip = Ipv4Addr::new(
        127,
        50 + (group / 62_500) as u8,
        ((group / 250) % 250) as u8,
        (group % 250) as u8 + 1,
    );
    SocketAddr::new(IpAddr::V4(ip), 7778 + 10 * (i % 100) as u16)
}

/// What the poller leaves on GameSpy server `i` (names and maps for the API's sorts), with
/// `players` players.
fn gamespy_info(i: usize, map: String, players: usize, addr: SocketAddr) -> PollInfo {
    PollInfo::from(PollFields {
        name: format!("UT bench server {i}").into(),
        map: map.into(),
        game_type: "DeathMatchPlus".into(),
        num_players: players as u32,
        max_players: 16,
        password: Some(false),
        players: (0..players)
            .map(|p| PollPlayer::new(format!("Player{p}")).with_score(Some(p as i32)))
            .collect(),
        rules: muster_master::registry::Rules::default(),
        game_port: Some(addr.port() - 1),
    })
}

fn insert_gamespy(handle: &MasterHandle, first: usize, n: usize) -> Value {
    let start = Instant::now();
    let mut ok = 0;
    for i in first..first + n {
        let addr = gamespy_addr(i);
        let key = ServerKey::new(GAMESPY_GAME, GameAddr::Ip(addr));
        let reg = Registration {
            key: key.clone(),
            face: Face::GameSpy,
            game_port: Some(addr.port() - 1),
            query_addr: Some(addr),
            query_protocol: Some(Protocol::GameSpy1),
            source: SourceKey::of(addr.ip()),
        };
        let now = Timestamp::now();
        let mut listed = handle.register(reg, now).is_listed();
        if !listed {
            handle.verify(&key, now);
            listed = handle.with_registry(|r| r.get(&key).is_some_and(|rec| rec.is_listed()));
        }
        let map = ["DM-Deck16][", "CTF-Face", "DM-Morpheus", "AS-Frigate"][i % 4].to_owned();
        handle.update_poll(&key, Some(gamespy_info(i, map, i % 9, addr)), now);
        ok += usize::from(listed);
    }
    json!({"secs": start.elapsed().as_secs_f64(), "ok": ok})
}

fn insert_ddnet(handle: &MasterHandle, first: usize, n: usize) -> anyhow::Result<Value> {
    let start = Instant::now();
    let mut ok = 0;
    for i in first..first + n {
        let server = ddnet::Server::new(i, 1);
        let info = ddnet::info(i)?;
        let mut body = Vec::with_capacity(1200);
        info.encode(&mut body);
        let d = DdnetRegister {
            addr: server.addr,
            secret: muster_master::registry::DdnetSecret::from(server.secret()),
            serial: 0,
            info: Some(bytes::Bytes::from(body)),
            poll_info: Some(PollInfo::from_server_info(&info.to_server_info())),
            url: Arc::from(format!("tw-0.6+udp://{}", server.addr).as_str()),
        };
        let out = handle.ddnet_register(d, ddnet_registration(server.addr), Timestamp::now());
        ok += usize::from(matches!(
            out,
            DdnetOutcome::Success | DdnetOutcome::Refreshed
        ));
    }
    Ok(json!({"secs": start.elapsed().as_secs_f64(), "ok": ok}))
}

/// `churn`: `rate` poll results per second on the GameSpy records `0..n` for `secs` seconds,
/// in 10 ms steps, each changing the map to `t<unix ns>` and the player count.
fn churn(handle: &MasterHandle, n: usize, rate: usize, secs: usize) {
    if n == 0 {
        return;
    }
    let step = Duration::from_millis(10);
    let start = Instant::now();
    let mut done = 0usize;
    let mut i = 0usize;
    while start.elapsed() < Duration::from_secs(secs as u64) {
        let due = (start.elapsed().as_secs_f64() * rate as f64) as usize;
        while done < due {
            let addr = gamespy_addr(i % n);
            let key = ServerKey::new(GAMESPY_GAME, GameAddr::Ip(addr));
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let info = gamespy_info(i % n, format!("t{nanos}"), done % 9, addr);
            handle.update_poll(&key, Some(info), Timestamp::now());
            done += 1;
            i = i.wrapping_add(7919);
        }
        std::thread::sleep(step);
    }
}

fn count(handle: &MasterHandle) -> Value {
    let view = handle.snapshot();
    let listed: BTreeMap<&str, usize> = view
        .per_face()
        .into_iter()
        .map(|(f, n)| (f.name(), n))
        .collect();
    let records = handle.with_registry(|r| r.len());
    json!({"listed": listed, "total": view.len(), "records": records})
}

/// The most live Rust data [`watch_peak`] saw since the last `heap` command.
static PEAK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// How often [`watch_peak`] reads the live count.
const PEAK_EVERY: Duration = Duration::from_millis(1);

/// Set to `1`, the child samples its peak live data ([`watch_peak`]); unset, it does not.
pub(crate) const PEAK_ENV: &str = "MUSTER_BENCH_PEAK";

/// Whether [`watch_peak`] runs (read once).
fn peak_watched() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(PEAK_ENV).is_ok_and(|v| v == "1"))
}

/// Reads the live count every [`PEAK_EVERY`] for the rest of the process and keeps the most
/// in [`PEAK`]: a sampled peak (a spike shorter than the period can be missed), enough to
/// tell the data a burst held at once from what stays after it. Only with [`PEAK_ENV`]: the
/// thread wakes a thousand times a second, and its time (13 % of the child's samples in a
/// Quake III run at 10,000 servers) counted as the master's and took a core's turns from the
/// face thread.
fn watch_peak() {
    if !peak_watched() {
        return;
    }
    std::thread::Builder::new()
        .name("muster-peak".to_owned())
        .spawn(|| {
            loop {
                PEAK.fetch_max(
                    muster_alloc::Counting::live(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                std::thread::sleep(PEAK_EVERY);
            }
        })
        .ok();
}

/// The live count now and the sampled peak since the last call, which starts a new peak
/// (`null` when the peak is not sampled).
fn heap() -> Value {
    let live = muster_alloc::Counting::live();
    let peak = PEAK
        .swap(live, std::sync::atomic::Ordering::Relaxed)
        .max(live);
    json!({"live": live, "peak": peak_watched().then_some(peak)})
}

/// `muster-bench master-child`: serves until `quit` (or stdin closes).
pub(crate) fn run(args: &ChildArgs) -> anyhow::Result<()> {
    muster_alloc::Counting::start();
    watch_peak();
    // As `muster serve` sets its allocator and builds its runtime.
    muster_alloc::return_freed_promptly();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_park(muster_alloc::on_thread_park)
        .enable_all()
        .build()?;
    rt.block_on(serve(args))
}

async fn serve(args: &ChildArgs) -> anyhow::Result<()> {
    let mut config = if let Some(face) = &args.only {
        face_config(&args.data_dir, args.servers, face)?
    } else {
        config(&args.data_dir, args.servers, args.ddnet_only)
    };
    config.store.url.clone_from(&args.store);
    let listeners = Listeners::bind(&config)?;
    let bound: BTreeMap<String, String> = listeners
        .bound()?
        .into_iter()
        .map(|b| (b.face.to_owned(), b.addr.to_string()))
        .collect();
    let master = Master::open(config, Timestamp::now())?;
    let handle = master.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // As `muster serve` does.
    let _upkeep = muster_alloc::Upkeep::start();
    let server = tokio::spawn(master.run(listeners, async move {
        let _ = stop_rx.await;
    }));
    let say = |v: Value| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    };
    say(json!({"ready": bound, "pid": std::process::id()}));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |k: usize| {
            words
                .get(k)
                .and_then(|w| w.parse::<usize>().ok())
                .unwrap_or(0)
        };
        let h = handle.clone();
        let reply = match words.first().copied() {
            Some("count") => count(&handle),
            Some("heap") => heap(),
            Some("ddnet") => {
                let (first, n) = (num(1), num(2));
                tokio::task::spawn_blocking(move || insert_ddnet(&h, first, n)).await??
            }
            Some("gamespy") => {
                let (first, n) = (num(1), num(2));
                tokio::task::spawn_blocking(move || insert_gamespy(&h, first, n)).await?
            }
            Some("flush") => {
                tokio::task::spawn_blocking(move || {
                    h.publish();
                    h.flush().map(|n| json!({"ok": true, "written": n}))
                })
                .await??
            }
            Some("durable") => {
                let v = handle.version();
                handle
                    .durable(v)
                    .await
                    .map(|()| json!({"ok": true}))
                    .unwrap_or_else(|e| json!({"error": format!("not stored: {e}")}))
            }
            Some("churn") => {
                let (n, rate, secs) = (num(1), num(2), num(3));
                std::thread::spawn(move || churn(&h, n, rate, secs));
                json!({"ok": true})
            }
            Some("quit") => break,
            _ => json!({"error": format!("unknown command {line:?}")}),
        };
        say(reply);
    }
    let _ = stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(20), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => bail!("master stopped with an error: {e}"),
        Ok(Err(e)) => bail!("master task failed: {e}"),
        Err(_) => bail!("master did not stop within 20 s"),
    }
    say(json!({"bye": true}));
    Ok(())
}

/// The parent's side: the child process and its command pipe.
#[derive(Debug)]
pub(crate) struct ChildMaster {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
    pub addrs: BTreeMap<String, SocketAddr>,
    dir: PathBuf,
}

impl ChildMaster {
    /// Starts `muster-bench master-child` and waits for its addresses.
    pub(crate) fn spawn(servers: usize, ddnet_only: bool) -> anyhow::Result<Self> {
        Self::spawn_with(servers, ddnet_only, None)
    }

    /// [`ChildMaster::spawn`] with a store URL (`None`: SQLite in its data directory).
    pub(crate) fn spawn_with(
        servers: usize,
        ddnet_only: bool,
        store: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut extra = Vec::new();
        if ddnet_only {
            extra.push("--ddnet-only".to_owned());
        }
        if let Some(url) = store {
            extra.push("--store".to_owned());
            extra.push(url.to_owned());
        }
        Self::spawn_args(servers, &extra)
    }

    /// A child with only the UDP master face `face` (see [`face_config`]).
    pub(crate) fn spawn_only(face: &str, servers: usize) -> anyhow::Result<Self> {
        Self::spawn_args(servers, &["--only".to_owned(), face.to_owned()])
    }

    fn spawn_args(servers: usize, extra: &[String]) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "muster-bench-master-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)?;
        let exe = std::env::current_exe()?;
        // A profiler around the child (`MUSTER_BENCH_CHILD_WRAPPER="heaptrack -o FILE"`): its
        // memory and CPU figures are then the wrapper's, the profile is what counts.
        let wrapper = std::env::var("MUSTER_BENCH_CHILD_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut cmd = match words.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(words).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.arg("master-child")
            .arg("--data-dir")
            .arg(&dir)
            .arg("--servers")
            .arg(servers.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .args(extra);
        let mut child = cmd.spawn().context("starting the master child")?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        let pid = child.id();
        let mut me = Self {
            child,
            stdin,
            stdout,
            pid,
            addrs: BTreeMap::new(),
            dir,
        };
        let ready = me.read()?;
        let map = ready
            .get("ready")
            .and_then(Value::as_object)
            .context("the child did not say ready")?;
        for (face, addr) in map {
            if let Some(a) = addr.as_str().and_then(|a| a.parse().ok()) {
                me.addrs.insert(face.clone(), a);
            }
        }
        Ok(me)
    }

    fn read(&mut self) -> anyhow::Result<Value> {
        loop {
            let mut line = String::new();
            let n = tokio::task::block_in_place(|| self.stdout.read_line(&mut line))?;
            if n == 0 {
                bail!("the master child exited");
            }
            // The child answers in JSON objects; a wrapper's own lines are passed over.
            if line.starts_with('{') {
                return Ok(serde_json::from_str(&line)?);
            }
        }
    }

    /// Sends one command and reads its answer.
    pub(crate) fn call(&mut self, cmd: &str) -> anyhow::Result<Value> {
        writeln!(self.stdin, "{cmd}")?;
        self.stdin.flush()?;
        let v = self.read()?;
        if let Some(e) = v.get("error") {
            bail!("child: {e}");
        }
        Ok(v)
    }

    /// The address of `face`.
    pub(crate) fn addr(&self, face: &str) -> anyhow::Result<SocketAddr> {
        self.addrs
            .get(face)
            .copied()
            .with_context(|| format!("no {face} listener"))
    }

    /// Listed records of `face` (its API name) and in total.
    pub(crate) fn listed(&mut self, face: &str) -> anyhow::Result<usize> {
        let v = self.call("count")?;
        Ok(v.get("listed")
            .and_then(|l| l.get(face))
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize)
    }

    /// Stops the child (flushing its store) and removes its data.
    pub(crate) fn quit(mut self) -> anyhow::Result<()> {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.read();
        let status = crate::procs::wait_bounded(&mut self.child, Duration::from_secs(30))?;
        if status.is_none() {
            eprintln!("the master child did not exit within 30 s; killed");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(())
    }
}

impl Drop for ChildMaster {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quake3_child_listens_on_the_quake3_face_alone_and_takes_loopback_servers() {
        let c = face_config(Path::new("/nonexistent"), 10_000, "quake3").unwrap();
        assert_eq!(
            c.listen.quake3.0,
            vec![SocketAddr::from(([127, 0, 0, 1], 0))]
        );
        assert!(c.listen.http.0.is_empty() && c.listen.gameagent.0.is_empty());
        assert!(c.quake3.allow_loopback);
        assert!(c.limits.servers_per_source >= 10_000 && c.limits.max_records >= 10_000);
        assert_eq!(c.lifetimes.quake3.0, Duration::from_secs(24 * 3600));
        // The default child keeps its faces and refuses loopback Quake III servers.
        let d = config(Path::new("/nonexistent"), 10_000, false);
        assert!(d.listen.quake3.0.is_empty() && !d.quake3.allow_loopback);
    }
}
