//! DDNet servers as the bench emulates them: a ~1 KB info (DDNet 16.4's register body with
//! clients added), and the HTTP register protocol with its UDP challenge, as a game server
//! speaks it to Muster or to DDNet's own mastersrv.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use muster_proto::teeworlds_master::http::ClientInfo;
use muster_proto::teeworlds_master::{Message, Packet, RegisterInfo};
use serde_json::{Map, Value, json};
use tokio::net::UdpSocket;

use super::http::Conn;
use super::stats::{Latencies, StopFlag};

/// DDNet 16.4's register body, captured from a real server.
const FIXTURE: &[u8] = include_bytes!(
    "../../../proto/tests/fixtures/teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin"
);
/// The register route (Muster and mastersrv alike).
pub(crate) const REGISTER_PATH: &str = "/ddnet/15/register";
/// The list route.
pub(crate) const SERVERS_JSON_PATH: &str = "/ddnet/15/servers.json";
/// A DDNet server POSTs every 15 s per stream.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(15);
/// Servers per source address (hosts run many servers on one IP).
pub(crate) const SERVERS_PER_IP: usize = 100;
/// First game port of the emulated servers (below the ephemeral range).
const FIRST_PORT: u16 = 20_000;

/// The info of emulated server `i`: the captured body, named after `i`, with five clients
/// (names, clans, scores and skins as DDNet 16.4+ servers send them). About 1 KB.
pub(crate) fn info(i: usize) -> anyhow::Result<RegisterInfo> {
    let mut info = RegisterInfo::decode(FIXTURE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    info.name = format!("{} #{i}", info.name);
    info.map.name = ["Tutorial", "Gold Mine", "Multeasymap", "Baby Aim 1.0"]
        .get(i % 4)
        .copied()
        .unwrap_or("Tutorial")
        .to_owned();
    info.clients = (0..5)
        .map(|p| {
            let mut extra = Map::new();
            extra.insert("afk".into(), json!(p % 3 == 0));
            extra.insert("team".into(), json!(p % 2));
            let skin = ["default", "santa_bluekitty", "greyfox"]
                .get(p % 3)
                .copied()
                .unwrap_or("default");
            extra.insert(
                "skin".into(),
                json!({"name": skin, "color_body": 65408 + p, "color_feet": 65280 - p}),
            );
            ClientInfo {
                name: format!("tee{i}-{p}"),
                clan: if p % 2 == 0 {
                    "DDNet".into()
                } else {
                    String::new()
                },
                country: i64::try_from((i * 7 + p * 31) % 900).unwrap_or(-1),
                score: if p % 4 == 0 {
                    -9999
                } else {
                    i64::try_from(i % 5000 + p).unwrap_or(0)
                },
                is_player: p < 4,
                extra,
            }
        })
        .collect();
    Ok(info)
}

/// The compact JSON body of [`info`].
pub(crate) fn info_body(i: usize) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(1200);
    info(i)?.encode(&mut out);
    Ok(out)
}

/// Emulated server `i`: its address (127.100+.x.y, port) and register secrets.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub i: usize,
    pub addr: SocketAddr,
    secret: String,
    challenge_secret: String,
    /// The challenge token per master (index), once registered.
    tokens: Vec<Option<String>>,
}

impl Server {
    pub(crate) fn new(i: usize, masters: usize) -> Self {
        let group = i / SERVERS_PER_IP;
        let ip = Ipv4Addr::new(
            127,
            100 + (group / 62_500) as u8,
            ((group / 250) % 250) as u8,
            (group % 250) as u8 + 1,
        );
        let port = FIRST_PORT + (i % SERVERS_PER_IP) as u16;
        let uuid = |salt: u64| {
            let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
            format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                x >> 32,
                (x >> 16) & 0xffff,
                x & 0xfff,
                (x >> 20) & 0xfff,
                x.rotate_left(17) & 0xffff_ffff_ffff
            )
        };
        Self {
            i,
            addr: SocketAddr::new(IpAddr::V4(ip), port),
            secret: uuid(0x5EC2),
            challenge_secret: format!("{}:tw0.6/ipv4", uuid(0xC4A1)),
            tokens: vec![None; masters],
        }
    }

    /// The server's `Secret`.
    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    fn ip(&self) -> Ipv4Addr {
        match self.addr.ip() {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(_) => Ipv4Addr::LOCALHOST,
        }
    }

    fn headers(&self, token: Option<&str>, with_body: bool) -> String {
        let mut h = format!(
            "Address: tw-0.6+udp://connecting-address.invalid:{}\r\nSecret: {}\r\nChallenge-Secret: {}\r\nInfo-Serial: 0\r\nUser-Agent: DDNet 16.4 (linux; amd64)\r\n",
            self.addr.port(),
            self.secret,
            self.challenge_secret
        );
        if let Some(t) = token {
            h.push_str("Challenge-Token: ");
            h.push_str(t);
            h.push_str("\r\n");
        }
        if with_body {
            h.push_str("Content-Type: application/json\r\n");
        }
        h
    }
}

fn status_of(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("status")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(80).collect())
}

/// Registers `server` with the master at `http` (index `m` in the server's token list):
/// POST with the info, the `chal` datagram on the game port, POST with the token.
async fn register_one(
    conn: &mut Conn,
    server: &mut Server,
    m: usize,
    body: &[u8],
) -> anyhow::Result<()> {
    let udp = UdpSocket::bind(server.addr)
        .await
        .with_context(|| format!("binding the game port {}", server.addr))?;
    let first = conn
        .post(REGISTER_PATH, &server.headers(None, true), body)
        .await?;
    let status = status_of(&first.body);
    if status != "need_challenge" {
        bail!("first POST: {} {status}", first.status);
    }
    let mut buf = [0u8; 1500];
    let token = loop {
        let (n, _) = tokio::time::timeout(Duration::from_secs(3), udp.recv_from(&mut buf))
            .await
            .context("no chal datagram within 3 s")??;
        if let Ok(Packet::Connless {
            message: Message::Challenge(c),
            ..
        }) = Packet::decode(buf.get(..n).unwrap_or_default())
        {
            if c.secret() == server.challenge_secret.as_bytes() {
                break String::from_utf8_lossy(c.token()).into_owned();
            }
        }
    };
    let second = conn
        .post(REGISTER_PATH, &server.headers(Some(&token), true), body)
        .await?;
    let status = status_of(&second.body);
    if status != "success" {
        bail!("second POST: {} {status}", second.status);
    }
    if let Some(t) = server.tokens.get_mut(m) {
        *t = Some(token);
    }
    Ok(())
}

/// A refresh POST (token, no body), as a registered server sends every 15 s.
async fn refresh_one(conn: &mut Conn, server: &Server, m: usize) -> anyhow::Result<()> {
    let token = server.tokens.get(m).cloned().flatten();
    let r = conn
        .post(REGISTER_PATH, &server.headers(token.as_deref(), false), &[])
        .await?;
    let status = status_of(&r.body);
    if status != "success" {
        bail!("refresh: {} {status}", r.status);
    }
    Ok(())
}

/// The emulated servers, grouped by source address (one keep-alive connection each).
#[derive(Debug)]
pub(crate) struct Farm {
    pub groups: Vec<Vec<Server>>,
}

/// What registering the farm with one master gave.
#[derive(Debug, Default)]
pub(crate) struct Registration {
    pub ok: usize,
    pub failed: usize,
    pub secs: f64,
    /// First POST to `success`, per server.
    pub latency: Latencies,
}

impl Farm {
    pub(crate) fn new(n: usize, masters: usize) -> Self {
        let mut groups: Vec<Vec<Server>> = Vec::new();
        for i in 0..n {
            let g = i / SERVERS_PER_IP;
            if groups.len() <= g {
                groups.push(Vec::new());
            }
            if let Some(v) = groups.get_mut(g) {
                v.push(Server::new(i, masters));
            }
        }
        Self { groups }
    }

    /// Registers every server with master `m` at `http`: one task per source address, its
    /// servers one after another (each task is one keep-alive connection, as a host whose
    /// servers share a libcurl pool).
    pub(crate) async fn register(&mut self, m: usize, http: SocketAddr) -> Registration {
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (g, mut servers) in std::mem::take(&mut self.groups).into_iter().enumerate() {
            tasks.spawn(async move {
                let mut out = Registration::default();
                let Some(first) = servers.first() else {
                    return (g, servers, out);
                };
                let mut conn = Conn::new(first.ip(), http, true);
                for s in &mut servers {
                    let Ok(body) = info_body(s.i) else {
                        out.failed += 1;
                        continue;
                    };
                    let t = Instant::now();
                    match register_one(&mut conn, s, m, &body).await {
                        Ok(()) => {
                            out.ok += 1;
                            out.latency.push(t.elapsed());
                        }
                        Err(e) => {
                            if out.failed == 0 {
                                eprintln!("  DDNet register of {} failed: {e:#}", s.addr);
                            }
                            out.failed += 1;
                        }
                    }
                }
                (g, servers, out)
            });
        }
        let mut groups = Vec::new();
        let mut total = Registration::default();
        while let Some(Ok((g, servers, r))) = tasks.join_next().await {
            groups.push((g, servers));
            total.ok += r.ok;
            total.failed += r.failed;
            total.latency.extend(&r.latency);
        }
        groups.sort_by_key(|(g, _)| *g);
        self.groups = groups.into_iter().map(|(_, s)| s).collect();
        total.secs = start.elapsed().as_secs_f64();
        total
    }

    /// Keeps every server registered with each master of `masters` (index, HTTP address):
    /// each server POSTs every [`REFRESH_EVERY`], spread evenly, until `stop` is raised.
    /// Counts (refreshes that succeeded, failed) per master as they happen.
    pub(crate) fn refresh(&self, masters: Vec<(usize, SocketAddr)>, stop: StopFlag) -> Refresher {
        let groups: Vec<Vec<Server>> = self.groups.clone();
        let counts: Arc<Vec<(AtomicUsize, AtomicUsize)>> = Arc::new(
            masters
                .iter()
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
        );
        let c2 = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            let n_groups = groups.len().max(1) as u32;
            // One task per source address and master: a master that stalls (the side-by-side
            // bench pauses the side it is not measuring) holds up only its own refreshes.
            for (g, servers) in groups.into_iter().enumerate() {
                let servers = Arc::new(servers);
                for (k, &(m, http)) in masters.iter().enumerate() {
                    let servers = Arc::clone(&servers);
                    let counts = Arc::clone(&c2);
                    let stop = stop.clone();
                    tasks.spawn(async move {
                        let Some(first) = servers.first() else { return };
                        let Some(c) = counts.get(k) else { return };
                        let mut conn = Conn::new(first.ip(), http, true);
                        // Start offsets spread the groups over the period.
                        let step = REFRESH_EVERY / u32::try_from(servers.len().max(1)).unwrap_or(1);
                        tokio::time::sleep(step.mul_f64(g as f64 / f64::from(n_groups))).await;
                        let mut tick = tokio::time::interval(step);
                        // Ticks missed while the master was paused are sent in a burst once it
                        // runs again (tokio's default), so that pauses never stretch the period
                        // past the 30 s lifetime: each side meets the refreshes of its pauses
                        // in its own rounds, both alike.
                        'outer: loop {
                            for s in servers.iter() {
                                tick.tick().await;
                                if stop.raised() {
                                    break 'outer;
                                }
                                match refresh_one(&mut conn, s, m).await {
                                    Ok(()) => c.0.fetch_add(1, Ordering::Relaxed),
                                    Err(_) => c.1.fetch_add(1, Ordering::Relaxed),
                                };
                            }
                        }
                    });
                }
            }
            while tasks.join_next().await.is_some() {}
        });
        Refresher { counts, task }
    }
}

/// Refresh POSTs running in the background (see [`Farm::refresh`]).
#[derive(Debug)]
pub(crate) struct Refresher {
    counts: Arc<Vec<(AtomicUsize, AtomicUsize)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Refresher {
    /// (refreshes that succeeded, failed) so far, per master.
    pub(crate) fn counts(&self) -> Vec<(usize, usize)> {
        self.counts
            .iter()
            .map(|(a, b)| (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)))
            .collect()
    }

    /// Waits (at most `limit`) for the refreshers to see the stop flag; the final counts.
    pub(crate) async fn finish(mut self, limit: Duration) -> Vec<(usize, usize)> {
        // A refresher still blocked on a stalled master is abandoned; its counts stand.
        let _ = tokio::time::timeout(limit, &mut self.task).await;
        self.counts()
    }
}
