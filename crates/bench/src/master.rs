//! `muster-bench master`: the master in-process, measured over its real sockets.
//!
//! * Heartbeat ingestion: full GameAgent registrations over UDP (`q` → `01` challenge →
//!   heartbeat echoing it), from many client sockets spread over `127.x.y.z` sources, timed
//!   until the registry lists every server. This is the wire path: the face's machine, the
//!   registry and the store.
//! * List requests per second with the registry holding `--servers` GameAgent servers (from the
//!   phase above) and as many DDNet records (inserted through [`MasterHandle`] with a poll
//!   result, since a DDNet HTTP register needs a UDP-answering game server per record; the
//!   `servers.json` face lists polled records with an info built from the poll): GameAgent `e` (UDP, the whole
//!   list per request), `GET /ddnet/15/servers.json` (the whole list) and `GET /api/v1/servers`
//!   (one default page), each from a few concurrent clients for a fixed time. HTTP requests use
//!   one connection each (`Connection: close`), from rotating loopback sources.
//! * Memory: resident set (`VmRSS` in `/proc/self/status`) before and after each insertion,
//!   divided by the servers added. It includes the SQLite page cache and the face's state.
//!
//! The abuse limits are raised for the run (per-source buckets, per-source caps, egress budget);
//! with the defaults a single client is held to a few list requests per second by design.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use muster_master::config::{Config, HumanDuration, Listen, ListenConfig};
use muster_master::registry::{
    Face, GameAddr, PollInfo, PollPlayer, Registration, ServerKey, Timestamp,
};
use muster_master::{Listeners, Master, MasterHandle};
use muster_proto::Protocol;
use muster_proto::gameagent::packet::{
    CHALLENGE, Challenge, Heartbeat, HeartbeatFields, JOIN, LIST_REQUEST, ListReply,
};
use muster_proto::limit::SourceKey;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, UdpSocket};

use crate::table;

/// Flags of `muster-bench master`.
#[derive(Debug, clap::Args)]
pub(crate) struct MasterArgs {
    /// Servers to register (GameAgent over the wire, and as many DDNet records).
    #[arg(long, default_value_t = 10_000)]
    servers: usize,
    /// Concurrent clients per list benchmark.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// How long each list benchmark runs.
    #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
    duration: Duration,
    /// Registrations in flight at once.
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
}

/// How long one UDP reply or HTTP exchange may take.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts of one registration cycle.
const ATTEMPTS: u32 = 3;

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A loopback source address for client `i`: 127.1.0.1, 127.1.0.2, …, never 127.0.0.1.
fn source_ip(i: usize) -> Ipv4Addr {
    let i = u32::try_from(i % 4_000_000).unwrap_or(0);
    Ipv4Addr::new(
        127,
        1 + (i / 62_500) as u8,
        ((i / 250) % 250) as u8,
        (i % 250) as u8 + 1,
    )
}

fn config(dir: &std::path::Path, servers: usize) -> Config {
    let mut c = Config {
        data_dir: dir.to_path_buf(),
        listen: ListenConfig::off(),
        ..Config::default()
    };
    let lo = SocketAddr::from(([127, 0, 0, 1], 0));
    c.listen.gameagent = Listen(vec![lo]);
    c.listen.http = Listen(vec![lo]);
    c.poller.enabled = false;
    let l = &mut c.limits;
    l.list_bytes_burst = 1 << 40;
    l.list_bytes_per_sec = 1 << 40;
    l.heartbeat_burst = 1_000_000;
    l.heartbeat_refill = HumanDuration(Duration::from_micros(1));
    l.challenge_burst = 1_000_000;
    l.challenge_refill = HumanDuration(Duration::from_micros(1));
    l.servers_per_source = servers.max(64);
    l.pending_per_ip = 1 << 20;
    l.pending_per_prefix = 1 << 20;
    l.pending_per_face = servers.max(16_384) * 2;
    l.egress_bytes_per_sec = 1 << 40;
    l.tcp_max_per_source = 256;
    l.http_list_burst = 1_000_000;
    l.http_list_refill = HumanDuration(Duration::from_micros(1));
    c
}

/// One GameAgent registration from `ip`: `q`, the challenge, the heartbeat echoing it.
async fn register_one(ip: Ipv4Addr, master: SocketAddr) -> anyhow::Result<()> {
    let sock = UdpSocket::bind((ip, 0)).await?;
    let mut buf = vec![0u8; 2048];
    for _ in 0..ATTEMPTS {
        sock.send_to(&[JOIN], master).await?;
        let Ok(got) =
            tokio::time::timeout(Duration::from_millis(500), sock.recv_from(&mut buf)).await
        else {
            continue;
        };
        let (n, _) = got?;
        let Some(bytes) = buf.get(..n) else { continue };
        if bytes.first() != Some(&CHALLENGE) {
            continue;
        }
        let Ok(challenge) = Challenge::decode(bytes) else {
            continue;
        };
        let hb = Heartbeat::stock(&HeartbeatFields {
            challenge: challenge.0,
            players: 3,
            max_players: 16,
            level: b"Yodeller".to_vec(),
            gametype: b"Fragmatch".to_vec(),
            version: b"1.10".to_vec(),
            product: b"serioussamse".to_vec(),
        });
        let mut out = Vec::new();
        hb.encode(&mut out);
        sock.send_to(&out, master).await?;
        return Ok(());
    }
    bail!("no challenge from the master for {ip}")
}

fn listed(handle: &MasterHandle, face: Face) -> usize {
    handle.snapshot().count(face)
}

/// Registers `n` GameAgent servers over UDP; returns the seconds until all are listed.
async fn ingest(
    handle: &MasterHandle,
    master: SocketAddr,
    args: &MasterArgs,
) -> anyhow::Result<(f64, usize)> {
    let n = args.servers;
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.in_flight.max(1) {
        let next = Arc::clone(&next);
        let failed = Arc::clone(&failed);
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                // 100 servers per source address.
                if register_one(source_ip(i / 100), master).await.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    // Wait for the face to finish (bounded); the time is that of the last server listed, so
    // a lost heartbeat (no retry: the client cannot see it was lost) does not count as time.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut count = listed(handle, Face::GameAgent);
    let mut last_change = start.elapsed();
    while count < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = listed(handle, Face::GameAgent);
        if now != count {
            count = now;
            last_change = start.elapsed();
        }
    }
    let secs = last_change.as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        eprintln!("{failed} registrations got no challenge");
    }
    Ok((secs, count))
}

/// Inserts `n` DDNet records through the handle (add + verify, as the face does, then a poll
/// result, as the poller does).
fn insert_ddnet(handle: &MasterHandle, n: usize) -> anyhow::Result<f64> {
    let start = Instant::now();
    for i in 0..n {
        let ip = Ipv4Addr::new(
            10,
            (i / 62_500) as u8 + 1,
            ((i / 250) % 250) as u8,
            (i % 250) as u8 + 1,
        );
        let addr = SocketAddr::new(IpAddr::V4(ip), 8303);
        let key = ServerKey::new("ddnet", GameAddr::Ip(addr));
        let reg = Registration {
            key: key.clone(),
            face: Face::DdnetHttp,
            game_port: Some(8303),
            query_addr: Some(addr),
            query_protocol: Some(Protocol::Teeworlds),
            source: SourceKey::of(IpAddr::V4(ip)),
        };
        let now = Timestamp::now();
        if !handle.register(reg, now).is_listed() {
            bail!("the registry refused a DDNet record");
        }
        // What the poller leaves on a record; `servers.json` lists records it has an info for.
        let info = PollInfo {
            name: format!("DDNet bench server {i}"),
            map: "Gold Mine".to_owned(),
            game_type: "DDraceNetwork".to_owned(),
            num_players: 4,
            max_players: 64,
            password: Some(false),
            players: (0..4)
                .map(|p| PollPlayer {
                    name: format!("tee {p}"),
                    score: Some(-9999),
                    ..PollPlayer::default()
                })
                .collect(),
            rules: Vec::new(),
            game_port: Some(8303),
        };
        handle.update_poll(&key, Some(info), now);
    }
    Ok(start.elapsed().as_secs_f64())
}

/// One `e` request: the whole list, counted in records. Errors when it does not arrive whole.
async fn list_gameagent(
    sock: &UdpSocket,
    master: SocketAddr,
    expect: usize,
) -> anyhow::Result<usize> {
    sock.send_to(&[LIST_REQUEST], master).await?;
    let mut buf = vec![0u8; 65_536];
    let mut records = 0;
    while records < expect {
        let (n, _) = tokio::time::timeout(IO_TIMEOUT, sock.recv_from(&mut buf))
            .await
            .context("list timed out")??;
        let reply = ListReply::decode(buf.get(..n).unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("bad list datagram: {e:?}"))?;
        records += reply.servers().len();
    }
    Ok(n_bytes(records))
}

fn n_bytes(records: usize) -> usize {
    1 + records * 6
}

/// One HTTP GET on a fresh connection from `src`; returns the status and the body.
async fn http_get(src: Ipv4Addr, http: SocketAddr, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(IpAddr::V4(src), 0))?;
    let exchange = async {
        let mut stream = sock.connect(http).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await?;
        anyhow::Ok(body)
    };
    let resp = tokio::time::timeout(IO_TIMEOUT, exchange)
        .await
        .context("HTTP request timed out")??;
    let head_end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of HTTP headers")?;
    let status = resp
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .context("no HTTP status")?;
    let body = resp.get(head_end + 4..).unwrap_or_default().to_vec();
    Ok((status, body))
}

/// Requests served per second by `clients` concurrent loops over `duration`.
#[derive(Debug, Default, Clone, Copy)]
struct Rate {
    ok: usize,
    refused: usize,
    secs: f64,
    bytes: usize,
}

async fn measure<F, Fut>(clients: usize, duration: Duration, f: F) -> Rate
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<(bool, usize)>> + Send,
{
    let f = Arc::new(f);
    let counter = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let end = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients.max(1) {
        let f = Arc::clone(&f);
        let counter = Arc::clone(&counter);
        tasks.spawn(async move {
            let mut r = Rate::default();
            while Instant::now() < end {
                let seq = counter.fetch_add(1, Ordering::Relaxed);
                match f(c, seq).await {
                    Ok((true, bytes)) => {
                        r.ok += 1;
                        r.bytes = bytes;
                    }
                    _ => r.refused += 1,
                }
            }
            r
        });
    }
    let mut total = Rate::default();
    while let Some(Ok(r)) = tasks.join_next().await {
        total.ok += r.ok;
        total.refused += r.refused;
        total.bytes = total.bytes.max(r.bytes);
    }
    total.secs = start.elapsed().as_secs_f64();
    total
}

/// Runs the master bench and prints its table.
pub(crate) async fn run(args: &MasterArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("muster-bench-master-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run_in(args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_in(args: &MasterArgs, dir: &std::path::Path) -> anyhow::Result<()> {
    let n = args.servers;
    let config = config(dir, n);
    let listeners = Listeners::bind(&config)?;
    let bound = listeners.bound()?;
    let find = |face: &str| {
        bound
            .iter()
            .find(|b| b.face == face)
            .map(|b| b.addr)
            .with_context(|| format!("no {face} listener"))
    };
    let ga = find("gameagent")?;
    let http = find("http")?;
    let master = Master::open(config, Timestamp::now())?;
    let handle = master.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(master.run(listeners, async move {
        let _ = stop_rx.await;
    }));

    let rss0 = rss_kib();
    let (ingest_secs, registered) = ingest(&handle, ga, args).await?;
    let rss1 = rss_kib();
    let ddnet_secs = insert_ddnet(&handle, n)?;
    let rss2 = rss_kib();
    let ddnet_listed = listed(&handle, Face::DdnetHttp);
    eprintln!(
        "registered {registered}/{n} GameAgent servers over UDP, {ddnet_listed}/{n} DDNet records"
    );

    let e_rate = {
        let expect = registered;
        let socks: Vec<Arc<UdpSocket>> = {
            let mut v = Vec::new();
            for c in 0..args.clients.max(1) {
                v.push(Arc::new(
                    UdpSocket::bind((source_ip(200_000 + c), 0)).await?,
                ));
            }
            v
        };
        let socks = Arc::new(socks);
        measure(args.clients, args.duration, move |c, _| {
            let socks = Arc::clone(&socks);
            async move {
                let sock = socks.get(c).context("no socket")?;
                let bytes = list_gameagent(sock, ga, expect).await?;
                Ok((true, bytes))
            }
        })
        .await
    };
    let http_rate = |path: &'static str| {
        measure(args.clients, args.duration, move |_, seq| async move {
            let (status, body) = http_get(source_ip(300_000 + seq), http, path).await?;
            Ok((status == 200, body.len()))
        })
    };
    let entries =
        |body: &[u8], field: &[u8]| body.windows(field.len()).filter(|w| *w == field).count();
    let (_, json_body) = http_get(source_ip(299_998), http, "/ddnet/15/servers.json").await?;
    let json_entries = entries(&json_body, b"\"addresses\"");
    let (_, api_body) = http_get(source_ip(299_999), http, "/api/v1/servers").await?;
    let api_entries = entries(&api_body, b"\"address\"");
    let json_rate = http_rate("/ddnet/15/servers.json").await;
    let api_rate = http_rate("/api/v1/servers").await;

    let _ = stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(10), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("master stopped with an error: {e}"),
        Ok(Err(e)) => eprintln!("master task failed: {e}"),
        Err(_) => eprintln!("master did not stop within 10 s"),
    }

    let per = |a: Option<u64>, b: Option<u64>, count: usize| match (a, b) {
        (Some(a), Some(b)) if count > 0 => format!(
            "{:.0} B",
            (b.saturating_sub(a) * 1024) as f64 / count as f64
        ),
        _ => "-".to_owned(),
    };
    let rate_row = |what: &str, r: Rate| {
        vec![
            what.to_owned(),
            format!("{:.0} /s", r.ok as f64 / r.secs.max(1e-9)),
            format!(
                "{} ok, {} failed/refused in {:.1} s, {} bytes each",
                r.ok, r.refused, r.secs, r.bytes
            ),
        ]
    };
    let rows = vec![
        vec![
            "GameAgent registrations (q→challenge→heartbeat, UDP)".to_owned(),
            format!("{:.0} /s", registered as f64 / ingest_secs.max(1e-9)),
            format!(
                "{registered}/{n} listed in {ingest_secs:.2} s, {} in flight, 100 per source IP",
                args.in_flight
            ),
        ],
        vec![
            "DDNet records via MasterHandle (add+verify+poll)".to_owned(),
            format!("{:.0} /s", n as f64 / ddnet_secs.max(1e-9)),
            format!("{ddnet_listed}/{n} listed in {ddnet_secs:.2} s"),
        ],
        rate_row("GameAgent `e` (whole list)", e_rate),
        rate_row(
            &format!("GET /ddnet/15/servers.json ({json_entries} servers)"),
            json_rate,
        ),
        rate_row(
            &format!("GET /api/v1/servers (default page, {api_entries} servers)"),
            api_rate,
        ),
        vec![
            "memory per GameAgent server (wire)".to_owned(),
            per(rss0, rss1, registered),
            format!("VmRSS {} → {} KiB", rss0.unwrap_or(0), rss1.unwrap_or(0)),
        ],
        vec![
            "memory per DDNet record (handle)".to_owned(),
            per(rss1, rss2, n),
            format!("VmRSS {} → {} KiB", rss1.unwrap_or(0), rss2.unwrap_or(0)),
        ],
    ];
    println!(
        "master: {n} GameAgent + {n} DDNet servers, {} clients per list bench, limits raised",
        args.clients
    );
    print!("{}", table::render(&["measure", "rate", "detail"], &rows));
    Ok(())
}
