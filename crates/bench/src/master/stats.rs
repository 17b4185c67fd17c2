//! Measuring: latency samples, request rates, and what a process spent (`/proc`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Latency samples in microseconds.
#[derive(Debug, Default, Clone)]
pub(crate) struct Latencies(Vec<u32>);

impl Latencies {
    pub(crate) fn push(&mut self, d: Duration) {
        self.0
            .push(u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
    }

    pub(crate) fn extend(&mut self, other: &Self) {
        self.0.extend_from_slice(&other.0);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0..=1) in milliseconds; `None` without samples.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        let rank = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(rank.min(v.len() - 1))
            .map(|us| f64::from(*us) / 1000.0)
    }

    pub(crate) fn max_ms(&self) -> Option<f64> {
        self.0.iter().max().map(|us| f64::from(*us) / 1000.0)
    }

    /// `p50 / p99 / max` in milliseconds, for a table cell.
    pub(crate) fn summary(&self) -> String {
        match (self.quantile_ms(0.5), self.quantile_ms(0.99), self.max_ms()) {
            (Some(a), Some(b), Some(c)) => {
                format!(
                    "p50 {a:.2} / p99 {b:.2} / max {c:.2} ms ({} samples)",
                    self.len()
                )
            }
            _ => "no samples".to_owned(),
        }
    }
}

/// What `clients` concurrent loops achieved in `secs`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Rate {
    pub ok: usize,
    pub failed: usize,
    pub secs: f64,
    /// Bytes received in successful requests, in total.
    pub bytes: u64,
    pub latency: Latencies,
}

impl Rate {
    pub(crate) fn per_sec(&self) -> f64 {
        self.ok as f64 / self.secs.max(1e-9)
    }

    pub(crate) fn bytes_each(&self) -> u64 {
        if self.ok == 0 {
            0
        } else {
            self.bytes / self.ok as u64
        }
    }
}

/// One request's outcome: success with the bytes received.
pub(crate) type Outcome = anyhow::Result<u64>;

/// A boxed future of one request.
pub(crate) type Request<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// A client that makes one request at a time.
pub(crate) trait Client: Send + 'static {
    /// One request; `seq` is unique across clients (for random choices).
    fn request(&mut self, seq: u64) -> Request<'_>;
}

/// Runs every client in a loop for `duration`; each call is one request.
pub(crate) async fn measure(clients: Vec<Box<dyn Client>>, duration: Duration) -> Rate {
    let start = Instant::now();
    let end = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut client) in clients.into_iter().enumerate() {
        tasks.spawn(async move {
            let mut r = Rate::default();
            let mut seq = (c as u64) << 32;
            while Instant::now() < end {
                seq += 1;
                let t = Instant::now();
                match client.request(seq).await {
                    Ok(bytes) => {
                        r.ok += 1;
                        r.bytes += bytes;
                        r.latency.push(t.elapsed());
                    }
                    Err(e) => {
                        if r.failed == 0 {
                            eprintln!("  request failed: {e:#}");
                        }
                        r.failed += 1;
                    }
                }
            }
            r
        });
    }
    let mut total = Rate::default();
    while let Some(Ok(r)) = tasks.join_next().await {
        total.ok += r.ok;
        total.failed += r.failed;
        total.bytes += r.bytes;
        total.latency.extend(&r.latency);
    }
    total.secs = start.elapsed().as_secs_f64();
    total
}

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// CPU time and resident set of a set of processes at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProcSample {
    /// User + system CPU seconds.
    pub cpu_secs: f64,
    /// Resident set, KiB.
    pub rss_kib: u64,
    pub at: Option<Instant>,
}

impl ProcSample {
    /// The sum over `pids` (missing processes count zero).
    pub(crate) fn of(pids: &[u32]) -> Self {
        let mut s = Self {
            at: Some(Instant::now()),
            ..Self::default()
        };
        for &pid in pids {
            s.cpu_secs += cpu_secs(pid).unwrap_or(0.0);
            s.rss_kib += rss_kib(pid).unwrap_or(0);
        }
        s
    }

    /// CPU seconds spent since `before`.
    pub(crate) fn cpu_since(&self, before: &Self) -> f64 {
        (self.cpu_secs - before.cpu_secs).max(0.0)
    }

    /// CPU use since `before`, in percent of one core.
    pub(crate) fn cpu_pct_since(&self, before: &Self) -> f64 {
        let wall = match (self.at, before.at) {
            (Some(a), Some(b)) => a.saturating_duration_since(b).as_secs_f64(),
            _ => 0.0,
        };
        100.0 * self.cpu_since(before) / wall.max(1e-9)
    }
}

/// User + system CPU seconds of `pid` (its threads included).
pub(crate) fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after it are space-separated.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 (index 0 here); utime 14 and stime 15 (index 11, 12).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SEC)
}

/// `VmRSS` of `pid`, KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// KiB in the files `pid` holds open unnamed: memory files (`memfd_create`) and unnamed files
/// (`O_TMPFILE`, shown as deleted), where Muster keeps `servers.json` and its gzip form (to
/// send them with `sendfile`) and the DDNet infos it holds. Their pages are not in `VmRSS`, as
/// a file nginx serves sits in the page cache.
pub(crate) fn body_files_kib(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| {
                let t = t.to_string_lossy();
                t.starts_with("/memfd:") || (t.starts_with('/') && t.ends_with(" (deleted)"))
            })
        })
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len() / 1024)
        .sum()
}

/// Pins every thread of `pid` to `cpu` (threads it starts later inherit the pinning from the
/// thread that starts them). Returns how many threads were pinned.
pub(crate) fn pin_threads(pid: u32, cpu: usize) -> anyhow::Result<usize> {
    use nix::sched::{CpuSet, sched_setaffinity};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)?;
    let mut pinned = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = task?
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // A thread that ended since the listing is no error.
        match sched_setaffinity(Pid::from_raw(tid), &set) {
            Ok(()) => pinned += 1,
            Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => anyhow::bail!("pinning thread {tid} of {pid} to CPU {cpu}: {e}"),
        }
    }
    Ok(pinned)
}

/// Processes stopped with `SIGSTOP` for as long as this lives, continued on drop.
pub(crate) struct Paused(Vec<u32>);

impl Paused {
    /// Stops every process in `pids`.
    pub(crate) fn new(pids: &[u32]) -> anyhow::Result<Self> {
        // Filled one by one, so that a failure continues those already stopped.
        let mut paused = Self(Vec::with_capacity(pids.len()));
        for &pid in pids {
            signal_pid(pid, nix::sys::signal::Signal::SIGSTOP)?;
            paused.0.push(pid);
        }
        Ok(paused)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = signal_pid(pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
}

fn signal_pid(pid: u32, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
    let raw = i32::try_from(pid)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal)
        .map_err(|e| anyhow::anyhow!("sending {signal} to {pid}: {e}"))
}

/// Direct children of `pid` (nginx's workers).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// The whole machine's busy and total CPU time (`/proc/stat`), to tell how busy the
/// other tenants of the machine were.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MachineSample {
    busy: f64,
    total: f64,
}

impl MachineSample {
    pub(crate) fn now() -> Self {
        let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
            return Self::default();
        };
        let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
            return Self::default();
        };
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let total: f64 = v.iter().sum();
        // idle + iowait
        let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
        Self {
            busy: (total - idle) / TICKS_PER_SEC,
            total: total / TICKS_PER_SEC,
        }
    }

    /// Busy CPU seconds of the whole machine since `before`, and the cores' total seconds.
    pub(crate) fn since(&self, before: &Self) -> (f64, f64) {
        (
            (self.busy - before.busy).max(0.0),
            (self.total - before.total).max(0.0),
        )
    }
}

/// CPU accounting of one measured phase: the master's processes, this process, the rest of
/// the machine.
#[derive(Debug, Clone)]
pub(crate) struct Phase {
    master: ProcSample,
    me: ProcSample,
    machine: MachineSample,
    pids: Vec<u32>,
}

/// What a phase cost.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spent {
    /// Master CPU seconds.
    pub master_cpu: f64,
    /// Busy CPU seconds of the whole machine (the master, the bench's clients, and the kernel
    /// threads carrying their traffic).
    pub machine_cpu: f64,
    /// Master CPU, percent of one core.
    pub master_pct: f64,
    /// Bench (client) CPU, percent of one core.
    pub bench_pct: f64,
    /// Everything else on the machine, percent of one core.
    pub others_pct: f64,
    /// Cores of the machine (percent = 100 × cores when all are busy).
    pub cores: f64,
    /// Wall seconds of the phase.
    pub wall: f64,
}

impl Phase {
    /// Starts accounting; `pids` are the master's processes (nginx: its master and workers).
    pub(crate) fn start(pids: &[u32]) -> Self {
        Self {
            master: ProcSample::of(pids),
            me: ProcSample::of(&[std::process::id()]),
            machine: MachineSample::now(),
            pids: pids.to_vec(),
        }
    }

    pub(crate) fn end(&self) -> Spent {
        let master = ProcSample::of(&self.pids);
        let me = ProcSample::of(&[std::process::id()]);
        let machine = MachineSample::now();
        let wall = match (master.at, self.master.at) {
            (Some(a), Some(b)) => a.saturating_duration_since(b).as_secs_f64(),
            _ => 0.0,
        }
        .max(1e-9);
        let (busy, total) = machine.since(&self.machine);
        let master_cpu = master.cpu_since(&self.master);
        let bench_cpu = me.cpu_since(&self.me);
        Spent {
            master_cpu,
            machine_cpu: busy,
            master_pct: master.cpu_pct_since(&self.master),
            bench_pct: me.cpu_pct_since(&self.me),
            others_pct: (100.0 * (busy - master_cpu - bench_cpu) / wall).max(0.0),
            cores: total / wall,
            wall,
        }
    }
}

impl Spent {
    /// "master 95%, bench 80%, others 20% of 200%".
    pub(crate) fn describe(&self) -> String {
        format!(
            "CPU: master {:.0}%, bench {:.0}%, rest of machine {:.0}% (of {:.0}%)",
            self.master_pct,
            self.bench_pct,
            self.others_pct,
            self.cores.round() * 100.0
        )
    }

    /// What most likely limited a rate measured in this phase.
    pub(crate) fn limit(&self) -> &'static str {
        let all = self.master_pct + self.bench_pct + self.others_pct;
        let cap = self.cores.round().max(1.0) * 100.0;
        if all >= 0.9 * cap {
            if self.others_pct >= 0.25 * cap {
                "CPU: the cores were full, other tenants took a large share"
            } else if self.master_pct >= self.bench_pct {
                "CPU: the cores were full, the master took most"
            } else {
                "CPU: the cores were full, the bench clients took most"
            }
        } else if self.master_pct >= 90.0 {
            "one master thread at ~100% (a serial path)"
        } else {
            "latency: the clients' requests in flight (cores not full)"
        }
    }
}

/// A flag raised when a background load should stop.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub(crate) fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub(crate) fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
