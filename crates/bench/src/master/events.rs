//! `muster-bench events`: the master's live events (`GET /api/v1/events`) under churn.
//!
//! A master child holds `--servers` GameSpy records; `--subscribers` Server-Sent Events streams
//! are opened from the bench; then the child changes `--rate` records per second for
//! `--duration` (a new poll result each, whose map carries the change's time), and every
//! stream times each `server_changed` event from that time to its arrival. Printed: the
//! master's CPU, events delivered per stream, the change → event latency, streams dropped for
//! lagging, and what the browser page downloads per minute with the stream against today's
//! way (every page of the list refetched every 5 s with ETags: under churn every page
//! changes), plain and gzip.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::child::ChildMaster;
use super::http::Conn;
use super::stats::{Latencies, cpu_secs};
use crate::table;

/// The browser page's refresh period before live events (`REFRESH_MS` of the page).
const PAGE_REFRESH: Duration = Duration::from_secs(5);
/// The page's page size.
const PAGE_SIZE: usize = 500;

/// Flags of `muster-bench events`.
#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    /// Servers listed by the master.
    #[arg(long, default_value_t = 10_000)]
    servers: usize,
    /// Changes per second.
    #[arg(long, default_value_t = 1000)]
    rate: usize,
    /// Event streams open at once.
    #[arg(long, default_value_t = 100)]
    subscribers: usize,
    /// How long the churn runs.
    #[arg(long, default_value = "20s", value_parser = crate::parse_duration)]
    duration: Duration,
    /// Streams without `Accept-Encoding: gzip` (as a client that does not take it).
    #[arg(long)]
    plain: bool,
}

/// What one stream saw.
#[derive(Debug, Default)]
struct Seen {
    events: u64,
    changed: u64,
    dropped: bool,
    latency: Latencies,
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Reads one stream until `until`: counts bytes and events, times `server_changed` events by
/// the `t<unix ns>` map of their data.
async fn follow(
    http: std::net::SocketAddr,
    until: Instant,
    gzip: bool,
    bytes: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(http).await?;
    let accept = if gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    s.write_all(format!("GET /api/v1/events HTTP/1.0\r\nHost: bench\r\n{accept}\r\n").as_bytes())
        .await?;
    // Compressed streams are inflated as they come (each event ends with a sync flush): the
    // 10-byte gzip header, then raw deflate.
    let mut inflate = Inflate::default();
    let mut wire: Vec<u8> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut head_done = false;
    let mut local = Seen::default();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let n = match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(e.into()),
        };
        let at = unix_nanos();
        bytes.fetch_add(n as u64, Ordering::Relaxed);
        let got = chunk.get(..n).unwrap_or_default();
        if !head_done {
            wire.extend_from_slice(got);
            let Some(i) = wire.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            if !wire.starts_with(b"HTTP/1.1 200") && !wire.starts_with(b"HTTP/1.0 200") {
                bail!(
                    "event stream refused: {}",
                    String::from_utf8_lossy(wire.get(..i).unwrap_or_default())
                );
            }
            let body: Vec<u8> = wire.drain(..).skip(i + 4).collect();
            head_done = true;
            if gzip {
                inflate.feed(&body, &mut buf)?;
            } else {
                buf.extend_from_slice(&body);
            }
        } else if gzip {
            inflate.feed(got, &mut buf)?;
        } else {
            buf.extend_from_slice(got);
        }
        while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..i + 2).collect();
            let text = String::from_utf8_lossy(&block);
            if text.contains("event: dropped") {
                local.dropped = true;
            }
            if !text.contains("\nevent: ") && !text.starts_with("event: ") {
                continue;
            }
            local.events += 1;
            if text.contains("event: server_changed") {
                local.changed += 1;
                if let Some(t) = text
                    .split("\"map\":\"t")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .and_then(|d| d.parse::<u128>().ok())
                {
                    let ns = at.saturating_sub(t);
                    local
                        .latency
                        .push(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)));
                }
            }
        }
    }
    let mut g = seen.lock().await;
    g.events += local.events;
    g.changed += local.changed;
    g.dropped |= local.dropped;
    g.latency.extend(&local.latency);
    Ok(())
}

/// Inflates a gzip stream as it arrives.
struct Inflate {
    header_left: usize,
    z: flate2::Decompress,
}

impl Default for Inflate {
    fn default() -> Self {
        Self {
            header_left: 10,
            z: flate2::Decompress::new(false),
        }
    }
}

impl Inflate {
    fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> anyhow::Result<()> {
        let skip = self.header_left.min(data.len());
        self.header_left -= skip;
        data = data.get(skip..).unwrap_or_default();
        while !data.is_empty() {
            out.reserve(data.len() * 8 + 4096);
            let before = self.z.total_in();
            self.z
                .decompress_vec(data, out, flate2::FlushDecompress::Sync)?;
            let used = usize::try_from(self.z.total_in() - before)?;
            data = data.get(used..).unwrap_or_default();
            if used == 0 && out.capacity() > out.len() {
                break;
            }
        }
        Ok(())
    }
}

/// Bytes of every page of the list, as the page fetched it (`sort=`, 500 per page), plain and
/// with `Accept-Encoding: gzip`.
async fn full_list_bytes(http: std::net::SocketAddr, servers: usize) -> anyhow::Result<(u64, u64)> {
    let mut conn = Conn::new(std::net::Ipv4Addr::LOCALHOST, http, true);
    conn.keep_body = false;
    let pages = servers.div_ceil(PAGE_SIZE).max(1);
    let (mut plain, mut gz) = (0, 0);
    for p in 1..=pages {
        let path = format!("/api/v1/servers?sort=&per_page={PAGE_SIZE}&page={p}");
        let r = conn.get(&path, "").await?;
        plain += r.body_len;
        let r = conn.get(&path, "Accept-Encoding: gzip\r\n").await?;
        gz += r.body_len;
    }
    Ok((plain, gz))
}

/// Runs the bench.
pub(crate) async fn run(args: &EventsArgs) -> anyhow::Result<()> {
    println!(
        "muster-bench events: {} servers, {} changes/s for {:?}, {} event streams; the machine is \
         shared, so rates vary between runs",
        args.servers, args.rate, args.duration, args.subscribers
    );
    let mut child = ChildMaster::spawn(args.servers, false)?;
    let http = child.addr("http")?;
    child.call(&format!("gamespy 0 {}", args.servers))?;
    child.call("flush")?;
    let (list_plain, list_gz) = full_list_bytes(http, args.servers).await?;

    let until = Instant::now() + args.duration + Duration::from_secs(3);
    let bytes = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..args.subscribers {
        streams.spawn(follow(
            http,
            until,
            !args.plain,
            Arc::clone(&bytes),
            Arc::clone(&seen),
        ));
    }
    // Let every stream connect before the churn.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bytes_before = bytes.load(Ordering::Relaxed);
    let cpu_before = cpu_secs(child.pid).context("reading the master's CPU time")?;
    let t = Instant::now();
    child.call(&format!(
        "churn {} {} {}",
        args.servers,
        args.rate,
        args.duration.as_secs().max(1)
    ))?;
    let mut failed = 0;
    while let Some(r) = streams.join_next().await {
        if !matches!(r, Ok(Ok(()))) {
            failed += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_secs(child.pid).unwrap_or(cpu_before) - cpu_before;
    let streamed = bytes.load(Ordering::Relaxed) - bytes_before;
    let seen = seen.lock().await;
    let metrics = {
        let mut c = Conn::new(std::net::Ipv4Addr::LOCALHOST, http, false);
        let r = c.get("/metrics", "").await?;
        String::from_utf8_lossy(&r.body).into_owned()
    };
    let lagged = metrics
        .lines()
        .find(|l| l.starts_with("muster_drops_total{reason=\"event_stream_lagged\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("0")
        .to_owned();
    child.quit()?;

    let subs = args.subscribers.max(1) as f64;
    let changes = args.rate as f64 * args.duration.as_secs_f64();
    let per_stream = seen.changed as f64 / subs;
    let per_min = |b: f64| b / secs * 60.0;
    let sse_min = per_min(streamed as f64 / subs);
    let refetches = 60.0 / PAGE_REFRESH.as_secs_f64();
    let rows = vec![
        vec![
            "master CPU during the churn".to_owned(),
            format!("{:.0}% of a core", 100.0 * cpu / secs),
            format!("{:.1} s CPU in {secs:.1} s", cpu),
        ],
        vec![
            "server_changed events per stream".to_owned(),
            format!("{per_stream:.0}"),
            format!(
                "of {changes:.0} changes ({:.1}%; coalesced per publish when one server changes twice within one)",
                100.0 * per_stream / changes.max(1.0)
            ),
        ],
        vec![
            "change → event latency".to_owned(),
            seen.latency
                .quantile_ms(0.99)
                .map_or("-".to_owned(), |v| format!("p99 {v:.1} ms")),
            seen.latency.summary(),
        ],
        vec![
            "streams dropped for lagging / failed".to_owned(),
            format!("{lagged} / {failed}"),
            format!("{} streams", args.subscribers),
        ],
        vec![
            "browser download per minute, live events".to_owned(),
            format!("{:.1} MB", sse_min / 1e6),
            if args.plain {
                "the event stream, per page open (not compressed)".to_owned()
            } else {
                "the event stream, per page open (gzip, as browsers take it)".to_owned()
            },
        ],
        vec![
            "browser download per minute, refetching".to_owned(),
            format!("{:.1} MB", list_plain as f64 * refetches / 1e6),
            format!(
                "every page every {}s ({:.1} MB each), all changed under churn; gzip: {:.1} MB/min",
                PAGE_REFRESH.as_secs(),
                list_plain as f64 / 1e6,
                list_gz as f64 * refetches / 1e6
            ),
        ],
    ];
    print!("{}", table::render(&["measure", "figure", "detail"], &rows));
    Ok(())
}
