//! The GameSpy master face (`gamespy-master.md`) and the UT2003 text list (`ut2003-list.md`).
//!
//! ```text
//! UDP 27900  \heartbeat\<qport>\gamename\<g>  -> registry add (pending)
//!            Unreal family:  -> \secure\ABCDEF to the source;  \validate\V back -> verified,
//!                               then one \status\ to (ip, qport) for hostport and info
//!            Serious Sam:    -> \status\ to (ip, qport); a reply naming the same game group -> verified
//!            \basic\ \info\ \rules\ \status\ \secure\ about the master itself: one small datagram
//! TCP 28900  \basic\\secure\ABCDEF  <- auth + \list\<""|cmp>\gamename\<g>\final\  -> list, close
//! HTTP       GET/HEAD /serverlist/{full-all,demo-all,<gamename>}.txt -> IP TAB game port TAB query port
//! ```
//!
//! Identity is (source IP, heartbeat port); only verified servers are listed (§13 decision 5).
//! Abuse limits, all on by default: a per-source bucket on heartbeats that need a challenge or a
//! `\status\` (refreshes of verified servers cost nothing and send nothing), on own-face queries
//! and on list connections; pending challenges capped per IP and in total; one `\status\` per
//! destination at a time, capped in total; a global egress byte budget per UDP socket set;
//! connection caps, an idle timeout and a total time limit on TCP.
//!
//! Does not: sync with other masters (`\sync\` requests are closed without a reply), enctype 2
//! lists (closed, §14), the Perl-style UDP list, `\echo\` (never answered), poll servers
//! periodically (the poller's job; this face only re-verifies on heartbeats). A
//! `\statechanged` heartbeat of a listed server is handed to the poller
//! ([`MasterHandle::mark_changed`]), which polls it at once and de-lists it if it does not
//! answer; without a poller this face sends that `\status\` itself.

pub mod verify;

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hasher as _};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_proto::Protocol;
use muster_proto::gamespy_master::{
    Challenge, Enctype, Greeting, Heartbeat, Key, ListReply, MAX_DATAGRAM, MasterQuery, QueryReply,
    RequestAction, RequestParser, Secure, Token, ValidateAnswer, ValidateCheck, check_validate,
    validate_string,
};
use muster_proto::gamespy1::query::StatusConfig;
use muster_proto::limit::{BucketConfig, ByteBudget, SourceKey, SourceLimiter};
use muster_proto::query::QueryConfig;
use muster_proto::ut2003_list::{Entry, ListFile};
use muster_proto::wire::DecodeError;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

use crate::MasterHandle;
use crate::config::LimitsConfig;
use crate::registry::{
    DelistOutcome, Face, GameAddr, Outcome, PollInfo, Registration, ServerKey, Timestamp,
    UT2003_LIST_GAMES, Verification, VerifyOutcome, View,
};
use crate::tcp::{CappedListener, CappedStream, ConnLimits};
use verify::{Answer, ChallengeLimits, Challenges, Finished, Game, Method, Purpose, StatusChecks};

/// Largest datagram read; `\status\` replies may be large, master messages are checked
/// against [`MAX_DATAGRAM`].
const RECV_BUF: usize = 65_536;
/// Largest read of one list connection at a time (the parser caps the whole request).
const TCP_READ_CHUNK: usize = 1024;
/// Key of the master's own `\secure\` answers (the 333networks mesh, §4.5).
const MESH_GAMENAME: &str = "333networks";

/// The knobs of the GameSpy face that do not depend on where it listens. Defaults are the
/// spec's (`gamespy-master.md` §13–14) and the shared `[limits]` defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct GameSpySettings {
    /// Heartbeats that need a challenge or a `\status\`, per source (IPv4 / IPv6 /64).
    pub heartbeat_bucket: BucketConfig,
    /// Own-face queries (`\basic\`, `\info\`, …) per source: burst 2, one every 5 s (§13.8).
    pub query_bucket: BucketConfig,
    /// List connections per source.
    pub list_bucket: BucketConfig,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Global egress cap of the UDP face, bytes per second (§13.8: 1 MiB/s).
    pub egress_bytes_per_sec: u64,
    /// Pending challenges: lifetime, per-IP and total caps, re-challenge interval (§14).
    pub challenges: ChallengeLimits,
    /// A `\status\` check: two tries 2.5 s apart, so no answer within 5 s fails it (§14).
    pub status: StatusConfig,
    /// `\status\` checks in flight at most.
    pub max_status_checks: usize,
    /// A listed server is re-verified on a heartbeat once this long after its last proof.
    pub reverify_interval: Duration,
    /// Re-verifications without an answer in a row that de-list a server.
    pub reverify_failures: u32,
    /// Close a list connection without a list when the client's `\validate\` is wrong
    /// (`gamespy.require_client_validate`, §13.6; default false: counted only).
    pub require_client_validate: bool,
    /// Connection caps and idle timeout of the list server.
    pub conn: ConnLimits,
    /// A list connection is closed after this long in total.
    pub tcp_total_timeout: Duration,
    /// The `hostport` the own query face reports (the list server's port).
    pub list_port: u16,
}

impl Default for GameSpySettings {
    fn default() -> Self {
        Self::from_limits(&LimitsConfig::default())
    }
}

impl GameSpySettings {
    /// The spec defaults with the shared `[limits]` section applied.
    #[must_use]
    pub fn from_limits(l: &LimitsConfig) -> Self {
        Self {
            heartbeat_bucket: BucketConfig::one_every(l.heartbeat_burst, l.heartbeat_refill.0),
            query_bucket: BucketConfig::one_every(2, Duration::from_secs(5)),
            list_bucket: BucketConfig::one_every(l.list_burst, l.list_refill.0),
            max_tracked_sources: l.max_tracked_sources,
            egress_bytes_per_sec: l.egress_bytes_per_sec,
            challenges: ChallengeLimits::default(),
            status: StatusConfig {
                retry: QueryConfig {
                    attempt_timeout: Duration::from_millis(2500),
                    retries: 1,
                },
                ..StatusConfig::default()
            },
            max_status_checks: 1000,
            reverify_interval: Duration::from_secs(600),
            reverify_failures: 3,
            require_client_validate: false,
            conn: ConnLimits {
                max_connections: l.tcp_max_connections,
                max_per_source: l.tcp_max_per_source.min(4),
                idle_timeout: l.tcp_idle_timeout.0,
            },
            tcp_total_timeout: l.tcp_total_timeout.0,
            list_port: crate::config::ports::GAMESPY_TCP,
        }
    }
}

/// Six challenge bytes from a keyed PRF: SipHash keyed with the OS randomness std draws for
/// `RandomState`, over a process-wide counter. Unpredictable without the key, which never
/// leaves the process.
fn random6() -> [u8; 6] {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let b = h.finish().to_le_bytes();
    [b[0], b[1], b[2], b[3], b[4], b[5]]
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn key_of(game: &Game, server: SocketAddr) -> ServerKey {
    ServerKey::new(game.name, GameAddr::Ip(server))
}

/// The first key of a `\key\value…` message, if it has one.
fn first_key(data: &[u8]) -> Option<&[u8]> {
    let body = data.strip_prefix(b"\\")?;
    body.split(|&b| b == b'\\').next()
}

fn drop_reason(e: &DecodeError) -> &'static str {
    match e {
        DecodeError::TooLarge(_) => "too_large",
        _ => "malformed",
    }
}

/// Serves the UDP face (heartbeats, verification, own queries) on `sockets` until `shutdown`
/// turns true. Each socket (IPv4 or IPv6) runs its own verification state; the egress budget
/// is shared. Socket errors are logged, never fatal.
pub async fn run_udp(
    handle: MasterHandle,
    sockets: Vec<UdpSocket>,
    settings: GameSpySettings,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let budget = Arc::new(Mutex::new(ByteBudget::new(settings.egress_bytes_per_sec)));
    let mut tasks = tokio::task::JoinSet::new();
    for sock in sockets {
        let face = UdpFace::new(handle.clone(), sock, settings.clone(), Arc::clone(&budget));
        tasks.spawn(face.run(shutdown.clone()));
    }
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => tracing::error!(error = %e, "gamespy udp task panicked"),
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct Proof {
    at: Instant,
    failures: u32,
}

struct UdpFace {
    handle: MasterHandle,
    settings: GameSpySettings,
    sock: UdpSocket,
    budget: Arc<Mutex<ByteBudget>>,
    challenges: Challenges,
    checks: StatusChecks,
    heartbeats: SourceLimiter,
    queries: SourceLimiter,
    proofs: HashMap<ServerKey, Proof>,
    counts: (usize, usize),
    query_id: u32,
    out: Vec<u8>,
}

/// How often expired challenges, idle buckets and stale proofs are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

impl UdpFace {
    fn new(
        handle: MasterHandle,
        sock: UdpSocket,
        settings: GameSpySettings,
        budget: Arc<Mutex<ByteBudget>>,
    ) -> Self {
        Self {
            challenges: Challenges::new(settings.challenges),
            checks: StatusChecks::new(settings.status, settings.max_status_checks),
            heartbeats: SourceLimiter::new(settings.heartbeat_bucket, settings.max_tracked_sources),
            queries: SourceLimiter::new(settings.query_bucket, settings.max_tracked_sources),
            handle,
            settings,
            sock,
            budget,
            proofs: HashMap::new(),
            counts: (0, 0),
            query_id: 0,
            out: Vec::new(),
        }
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>) -> io::Result<()> {
        let mut buf = vec![0u8; RECV_BUF];
        let mut next_sweep = now();
        loop {
            self.send_checks().await;
            let t = now();
            if t >= next_sweep {
                self.sweep(t);
                next_sweep = t + SWEEP_INTERVAL;
            }
            let wake = self
                .checks
                .poll_timeout()
                .map_or(next_sweep, |c| c.min(next_sweep));
            tokio::select! {
                () = stopped(&mut stop) => return Ok(()),
                r = self.sock.recv_from(&mut buf) => match r {
                    Ok((n, src)) => {
                        let data = buf.get(..n).unwrap_or_default();
                        self.on_datagram(now(), src, data).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "gamespy recv failed"),
                },
                () = tokio::time::sleep_until(wake.into()) => {
                    for f in self.checks.handle_timeout(now()) {
                        self.on_finished(f);
                    }
                }
            }
        }
    }

    async fn send_to(&mut self, to: SocketAddr, t: Instant) {
        let ok = self
            .budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spend(self.out.len(), t);
        if !ok {
            self.handle.metrics().count_drop("egress_budget");
            return;
        }
        if let Err(e) = self.sock.send_to(&self.out, to).await {
            tracing::debug!(error = %e, %to, "gamespy send failed");
        }
    }

    async fn send_checks(&mut self) {
        loop {
            let t = now();
            self.out.clear();
            let mut buf = std::mem::take(&mut self.out);
            let tx = self.checks.poll_transmit(t, &mut buf);
            self.out = buf;
            let Some(tx) = tx else { break };
            self.send_to(tx.destination, t).await;
        }
    }

    fn sweep(&mut self, t: Instant) {
        for p in self.challenges.expire(t) {
            if p.reverify {
                let key = key_of(p.game, p.server);
                self.reverify_failed(&key, false);
            }
        }
        self.heartbeats.prune(t);
        self.queries.prune(t);
        let (proofs, counts) = self.handle.with_registry(|r| {
            let mut keep = std::mem::take(&mut self.proofs);
            keep.retain(|k, _| {
                r.get(k)
                    .is_some_and(|rec| rec.state != Verification::Pending)
            });
            let listed = r.listed_per_face();
            let direct = listed.get(&Face::GameSpy).copied().unwrap_or(0);
            (keep, (direct, listed.values().sum()))
        });
        self.proofs = proofs;
        self.counts = counts;
    }

    async fn on_datagram(&mut self, t: Instant, src: SocketAddr, data: &[u8]) {
        let Some(first) = first_key(data) else {
            self.handle.metrics().count_drop("malformed");
            return;
        };
        if first.eq_ignore_ascii_case(b"heartbeat") {
            self.on_heartbeat(t, src, data).await;
        } else if first.eq_ignore_ascii_case(b"validate") {
            self.on_validate(t, src, data);
        } else if self.checks.expects(src) {
            if let Some(f) = self.checks.handle_datagram(t, src, data) {
                self.on_finished(f);
            }
        } else {
            self.on_query(t, src, data).await;
        }
    }

    async fn on_heartbeat(&mut self, t: Instant, src: SocketAddr, data: &[u8]) {
        let metrics = self.handle.metrics();
        let hb = match Heartbeat::decode(data) {
            Ok(hb) => hb,
            Err(e) => return metrics.count_drop(drop_reason(&e)),
        };
        if !src.is_ipv4() {
            // Lists carry IPv4 only (§13.9).
            return metrics.count_drop("ipv6_heartbeat");
        }
        let Some(game) = verify::game(hb.gamename.as_bytes()) else {
            return metrics.count_drop("unknown_game");
        };
        let port = match (hb.query_port, game.default_port) {
            (0, Some(p)) => p,
            (0, None) => return metrics.count_drop("port_zero"),
            (p, _) => p,
        };
        let server = SocketAddr::new(src.ip(), port);
        let key = key_of(game, server);
        let reg = Registration {
            key: key.clone(),
            face: Face::GameSpy,
            game_port: None,
            query_addr: Some(server),
            query_protocol: Some(Protocol::GameSpy1),
            source: SourceKey::of(src.ip()),
        };
        let ts = Timestamp::now();
        let state = self.handle.with_registry(|r| r.get(&key).map(|r| r.state));
        if state == Some(Verification::Verified) {
            if let Err(e) = self.handle.heartbeat(reg, ts) {
                tracing::warn!(error = %e, "heartbeat refresh failed");
            }
            let proof = *self
                .proofs
                .entry(key.clone())
                .or_insert(Proof { at: t, failures: 0 });
            let due = t.saturating_duration_since(proof.at) >= self.settings.reverify_interval;
            if hb.state_changed() {
                // §14: an immediate `\status\` poll; no answer de-lists. The poller does it
                // (one poll per destination, at most once per 10 s per record); without a
                // poller (or with its queue full) this face checks a `\status\` game itself.
                if self.heartbeats.allow(src.ip(), t, 1.0)
                    && !self.handle.mark_changed(&key)
                    && game.method == Method::Status
                {
                    self.checks.start(server, Purpose::Recheck(game, true));
                }
            } else if due && self.heartbeats.allow(src.ip(), t, 1.0) {
                match game.method {
                    Method::Secure => self.challenge(t, src, game, server, true).await,
                    Method::Status => {
                        self.checks.start(server, Purpose::Recheck(game, false));
                    }
                }
            }
            return;
        }
        if !self.heartbeats.allow(src.ip(), t, 1.0) {
            return metrics.count_rate_limited(src.ip());
        }
        match self.handle.add(reg, ts) {
            Ok(Outcome::Rejected(_)) => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "gamespy registration not stored");
                return metrics.count_drop("store_error");
            }
        }
        match game.method {
            Method::Secure => self.challenge(t, src, game, server, false).await,
            Method::Status => {
                if !self.checks.start(server, Purpose::Verify(game)) {
                    metrics.count_drop("status_busy");
                }
            }
        }
    }

    async fn challenge(
        &mut self,
        t: Instant,
        src: SocketAddr,
        game: &'static Game,
        server: SocketAddr,
        reverify: bool,
    ) {
        let c = Challenge::from_random(random6());
        match self.challenges.offer(t, src, (game, server, reverify), c) {
            Ok(c) => {
                self.out.clear();
                Secure { challenge: c }.encode(&mut self.out);
                self.send_to(src, t).await;
            }
            Err(r) => self.handle.metrics().count_drop(r.name()),
        }
    }

    fn on_validate(&mut self, t: Instant, src: SocketAddr, data: &[u8]) {
        let metrics = self.handle.metrics();
        if data.len() > MAX_DATAGRAM {
            return metrics.count_drop("too_large");
        }
        let answer = match ValidateAnswer::decode(data) {
            Ok(a) => a,
            Err(e) => return metrics.count_drop(drop_reason(&e)),
        };
        match self.challenges.answer(t, src, &answer) {
            Answer::Unexpected => metrics.count_drop("unexpected_validate"),
            Answer::Match(p) => {
                let key = key_of(p.game, p.server);
                match self.handle.verify(&key, Timestamp::now()) {
                    Ok(VerifyOutcome::Verified | VerifyOutcome::AlreadyVerified) => {
                        self.proofs
                            .insert(key.clone(), Proof { at: t, failures: 0 });
                        let port_known = self
                            .handle
                            .with_registry(|r| r.get(&key).and_then(|r| r.game_port).is_some());
                        if !port_known {
                            self.checks.start(p.server, Purpose::Info(p.game));
                        }
                    }
                    Ok(VerifyOutcome::Unknown) => metrics.count_drop("unknown_server"),
                    Err(e) => tracing::warn!(error = %e, "verification not stored"),
                }
            }
            Answer::Mismatch(p, expected) => {
                tracing::debug!(%src, game = p.game.name, expected, "wrong validate");
                metrics.count_verification_failed();
                if p.reverify {
                    self.reverify_failed(&key_of(p.game, p.server), true);
                }
            }
        }
    }

    /// A re-verification failed: de-list at once when `hard`, else after
    /// [`GameSpySettings::reverify_failures`] in a row.
    fn reverify_failed(&mut self, key: &ServerKey, hard: bool) {
        self.handle.metrics().count_verification_failed();
        let failures = self.proofs.get_mut(key).map_or(u32::MAX, |p| {
            p.failures = p.failures.saturating_add(1);
            p.failures
        });
        if hard || failures >= self.settings.reverify_failures {
            self.proofs.remove(key);
            match self.handle.delist(key) {
                Ok(DelistOutcome::Delisted) => tracing::debug!(?key, "de-listed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "de-listing not stored"),
            }
        }
    }

    fn on_finished(&mut self, f: Finished) {
        let ts = Timestamp::now();
        let t = now();
        let metrics = self.handle.metrics();
        let (game, purpose) = match f.purpose {
            Purpose::Verify(g) | Purpose::Info(g) | Purpose::Recheck(g, _) => (g, f.purpose),
        };
        let key = key_of(game, f.server);
        match (purpose, f.result) {
            (Purpose::Verify(g), Ok(info)) => {
                let named = info
                    .rules
                    .iter()
                    .find(|r| r.key.plain.eq_ignore_ascii_case("gamename"))
                    .is_some_and(|r| verify::matches_group(g, &r.value.plain));
                if !named {
                    metrics.count_verification_failed();
                    return metrics.count_drop("status_gamename");
                }
                match self.handle.verify(&key, ts) {
                    Ok(VerifyOutcome::Unknown) => return metrics.count_drop("unknown_server"),
                    Ok(_) => {}
                    Err(e) => return tracing::warn!(error = %e, "verification not stored"),
                }
                self.proofs
                    .insert(key.clone(), Proof { at: t, failures: 0 });
                self.handle
                    .update_poll(&key, Some(PollInfo::from_server_info(&info)), ts);
            }
            (Purpose::Verify(_), Err(_)) => metrics.count_verification_failed(),
            (Purpose::Info(_) | Purpose::Recheck(..), Ok(info)) => {
                self.handle
                    .update_poll(&key, Some(PollInfo::from_server_info(&info)), ts);
                if let Some(p) = self.proofs.get_mut(&key) {
                    *p = Proof { at: t, failures: 0 };
                }
            }
            (Purpose::Info(_), Err(_)) => {}
            (Purpose::Recheck(_, hard), Err(_)) => self.reverify_failed(&key, hard),
        }
    }

    async fn on_query(&mut self, t: Instant, src: SocketAddr, data: &[u8]) {
        let metrics = self.handle.metrics();
        let q = match MasterQuery::decode(data) {
            Ok(q) => q,
            Err(e) => return metrics.count_drop(drop_reason(&e)),
        };
        let sections = match &q {
            MasterQuery::Echo(_) => return metrics.count_drop("echo"),
            MasterQuery::Unknown(_) => return metrics.count_drop("unknown_query"),
            MasterQuery::Basic => vec![self.basic()],
            MasterQuery::Info => vec![self.info()],
            MasterQuery::Rules => vec![rules()],
            MasterQuery::Status => vec![self.basic(), self.info(), rules()],
            MasterQuery::Secure(c) => {
                let v = validate_string(c, b"333NWX", Enctype::Zero).unwrap_or_default();
                vec![pairs(&[("validate", &v)])]
            }
        };
        if !self.queries.allow(src.ip(), t, 1.0) {
            return metrics.count_rate_limited(src.ip());
        }
        self.query_id = self.query_id % 99 + 1;
        self.out.clear();
        QueryReply {
            query_id: self.query_id,
            sections,
        }
        .encode(&mut self.out);
        self.send_to(src, t).await;
    }

    fn basic(&self) -> Vec<(Key, Token)> {
        let ver = concat!("muster-", env!("CARGO_PKG_VERSION"));
        pairs(&[
            ("gamename", MESH_GAMENAME),
            ("gamever", ver),
            ("location", "0"),
        ])
    }

    fn info(&self) -> Vec<(Key, Token)> {
        let (direct, all) = self.counts;
        pairs(&[
            ("hostname", "Muster master"),
            ("hostport", &self.settings.list_port.to_string()),
            ("gametype", "Masterserver"),
            ("mapname", "muster"),
            ("numplayers", &direct.to_string()),
            ("maxplayers", &all.to_string()),
            ("gamemode", "openplaying"),
        ])
    }
}

fn rules() -> Vec<(Key, Token)> {
    pairs(&[("mutators", "none"), ("AdminName", "muster")])
}

/// Pairs from constants and numbers (never contain `\`; anything that would is skipped).
fn pairs(kv: &[(&str, &str)]) -> Vec<(Key, Token)> {
    kv.iter()
        .filter_map(|(k, v)| {
            Some((
                Key::new(k.as_bytes().to_vec()).ok()?,
                Token::new(v.as_bytes().to_vec()).ok()?,
            ))
        })
        .collect()
}

/// Serves the TCP list server on `listeners` until `shutdown` turns true: greeting, request,
/// list, close (§5). Connections in flight are left to finish within their time limit.
pub async fn run_tcp(
    handle: MasterHandle,
    listeners: Vec<TcpListener>,
    settings: GameSpySettings,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let limiter = Arc::new(Mutex::new(SourceLimiter::new(
        settings.list_bucket,
        settings.max_tracked_sources,
    )));
    let settings = Arc::new(settings);
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        let mut listener = CappedListener::new(l, settings.conn)
            .with_metrics(Arc::new(handle.clone()) as Arc<dyn crate::tcp::MetricsSink>);
        let (handle, settings, limiter) =
            (handle.clone(), Arc::clone(&settings), Arc::clone(&limiter));
        let mut stop = shutdown.clone();
        tasks.spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    () = stopped(&mut stop) => return,
                    c = listener.accept_capped() => c,
                };
                let allowed = limiter
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .allow(peer.ip(), now(), 1.0);
                if !allowed {
                    handle.metrics().count_rate_limited(peer.ip());
                    continue;
                }
                let (handle, settings) = (handle.clone(), Arc::clone(&settings));
                tokio::spawn(async move {
                    let total = settings.tcp_total_timeout;
                    let served = serve_list(&handle, &settings, stream, peer.ip());
                    match tokio::time::timeout(total, served).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!(error = %e, %peer, "list connection failed"),
                        Err(_) => handle.metrics().count_drop("tcp_total_timeout"),
                    }
                });
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// One list conversation. Every refusal closes the connection without a list.
async fn serve_list(
    handle: &MasterHandle,
    settings: &GameSpySettings,
    mut stream: CappedStream,
    peer: IpAddr,
) -> io::Result<()> {
    let metrics = handle.metrics();
    let challenge = Challenge::from_random(random6());
    let mut out = Vec::with_capacity(64);
    Greeting { challenge }.encode(&mut out);
    stream.write_all(&out).await?;
    let mut parser = RequestParser::new();
    let mut buf = [0u8; TCP_READ_CHUNK];
    let req = loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            metrics.count_drop("list_eof");
            return Ok(());
        }
        match parser.feed(buf.get(..n).unwrap_or_default()) {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                metrics.count_drop(drop_reason(&e));
                return Ok(());
            }
        }
    };
    let RequestAction::List(list) = &req.action else {
        metrics.count_drop("sync_unsupported");
        return Ok(());
    };
    let Ok(enctype) = req.auth.enctype() else {
        metrics.count_drop("malformed");
        return Ok(());
    };
    let auth_game = req.auth.gamename().map(Token::as_bytes).unwrap_or_default();
    let validate = req.auth.validate().map(Token::as_bytes).unwrap_or_default();
    match check_validate(auth_game, &challenge, enctype, validate) {
        ValidateCheck::Match => {}
        ValidateCheck::Mismatch { .. } => {
            metrics.count_verification_failed();
            metrics.count_drop("client_validate");
            tracing::debug!(%peer, "list client sent a wrong validate");
            if settings.require_client_validate {
                return Ok(());
            }
        }
        ValidateCheck::UnknownGame => {
            metrics.count_drop("unknown_game");
            return Ok(());
        }
        ValidateCheck::UnsupportedEnctype => {
            metrics.count_drop("unsupported_enctype");
            return Ok(());
        }
    }
    if enctype == Enctype::Two {
        // The client would expect an enctype 2 list, which Muster cannot write (§14).
        metrics.count_drop("enctype2_list");
        return Ok(());
    }
    let Some(game) = req.list_gamename().and_then(verify::game) else {
        metrics.count_drop("unknown_game");
        return Ok(());
    };
    let servers = handle.with_registry(|r| {
        r.listed(View::GameSpy(game.name))
            .into_iter()
            .filter_map(|rec| match rec.query_addr {
                Some(SocketAddr::V4(a)) => Some(a),
                _ => None,
            })
            .collect()
    });
    out.clear();
    ListReply {
        form: list.mode.reply_form(),
        servers,
    }
    .encode(&mut out);
    metrics.count_list_request("gamespy");
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// The UT2003 text list over HTTP (`ut2003-list.md` §4, §6): `GET`/`HEAD`
/// `/serverlist/full-all.txt` (`ut2` and `ut2004`), `/serverlist/demo-all.txt` (`ut2d` and
/// `ut2004d`, Epic's historical split) and `/serverlist/<gamename>.txt` for each of the four.
pub fn router(handle: MasterHandle) -> axum::Router {
    axum::Router::new()
        .route("/serverlist/{file}", axum::routing::get(ut2003_list))
        .with_state(handle)
}

/// The gamenames a list file name covers.
fn ut2003_games(file: &str) -> Option<&'static [&'static str]> {
    const FULL: &[&str] = &["ut2", "ut2004"];
    const DEMO: &[&str] = &["ut2d", "ut2004d"];
    match file {
        "full-all.txt" => Some(FULL),
        "demo-all.txt" => Some(DEMO),
        _ => {
            let name = file.strip_suffix(".txt")?;
            let i = UT2003_LIST_GAMES.iter().position(|g| *g == name)?;
            UT2003_LIST_GAMES.get(i..=i)
        }
    }
}

async fn ut2003_list(State(handle): State<MasterHandle>, Path(file): Path<String>) -> Response {
    let Some(games) = ut2003_games(&file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    handle.metrics().count_list_request("ut2003");
    let entries: Vec<Entry> = handle.with_registry(|r| {
        r.listed(View::Ut2003Text)
            .into_iter()
            .filter(|rec| games.contains(&rec.key.game.as_str()))
            .filter_map(|rec| {
                let IpAddr::V4(ip) = rec.key.addr.ip()? else {
                    return None;
                };
                Some(Entry {
                    ip,
                    game_port: NonZeroU16::new(rec.game_port?)?,
                    query_port: NonZeroU16::new(rec.query_addr?.port())?,
                })
            })
            .collect()
    });
    let mut body = Vec::new();
    ListFile::from_entries(entries).encode(&mut body);
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=us-ascii"),
            (header::CACHE_CONTROL, "max-age=20"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ut2003_file_names() {
        assert_eq!(ut2003_games("full-all.txt"), Some(&["ut2", "ut2004"][..]));
        assert_eq!(ut2003_games("demo-all.txt"), Some(&["ut2d", "ut2004d"][..]));
        assert_eq!(ut2003_games("ut2004d.txt"), Some(&["ut2004d"][..]));
        assert_eq!(ut2003_games("ut.txt"), None);
        assert_eq!(ut2003_games("ut2"), None);
    }

    #[test]
    fn first_key_and_challenges() {
        assert_eq!(first_key(b"\\heartbeat\\1"), Some(&b"heartbeat"[..]));
        assert_eq!(first_key(b"x"), None);
        assert_eq!(first_key(b""), None);
        let a = Challenge::from_random(random6());
        let b = Challenge::from_random(random6());
        assert_ne!(a, b, "fresh challenges");
        assert!(a.as_bytes().iter().all(u8::is_ascii_uppercase));
    }
}
