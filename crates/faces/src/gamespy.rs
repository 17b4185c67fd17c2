//! The GameSpy master face (`gamespy-master.md`) and the UT2003 text list (`ut2003-list.md`).
//!
//! ```text
//! UDP 27900  \heartbeat\<qport>\gamename\<g>  (a pure machine, [`GameSpyFace`])
//!            listed:          registry heartbeat; \statechanged -> the poller polls it now;
//!                             every 600 s a re-verification as below
//!            Unreal family:   -> \secure\ABCDEF to the source (a bounded pending table);
//!                             \validate\V back -> registry register (listed), then the game port
//!            Serious Sam:     -> \status\ to (ip, qport); a reply naming the same game group
//!                             -> registry register with the reply as its info
//!            \basic\ \info\ \rules\ \status\ \secure\ about the master itself: one datagram
//! TCP 28900  \basic\\secure\ABCDEF  <- auth + \list\<""|cmp>\gamename\<g>\final\  -> list, close
//!                                   <- auth as 333networks + \sync\<all|games>[\msid\<id>]
//!                                      -> \<game>\ip:port ip:port \…\final\, close (peers only)
//! HTTP       GET/HEAD /serverlist/{full-all,demo-all,<gamename>}.txt -> IP TAB game port TAB query port
//! ```
//!
//! Identity is (source IP, heartbeat port); only verified servers are listed (§13 decision 5).
//! Nothing about an unproven source reaches the registry: pending `\secure\` challenges and
//! `\status\` checks live in this face's own tables, bounded per IP, per /24 and in total, the
//! oldest making room for a new one, so a flood of forged heartbeats shortens how long a
//! challenge waits (still far longer than a real server takes to answer) but never refuses a
//! real server. Lists are read from the view (cached per snapshot and game).
//!
//! Abuse limits, all on by default: a per-source bucket on heartbeats that need a challenge or a
//! `\status\`; the runner's per-source byte budget on own-face replies (and its egress budget on
//! everything); per-source buckets on list connections, and the TCP caps.
//!
//! Syncing peers (`gamespy-master.md` §7): a `\sync\` is answered only to a source in
//! [`SyncSettings::peers`] that authenticated with the `333networks` key (whatever
//! `require_client_validate` says), with the servers that registered here (learned ones only
//! when [`SyncSettings::export_learned`]); a request carrying this master's own `\msid\`
//! gets just `\final\`. A 333networks master's uplink heartbeat comes from a random port and
//! is answered only at the port it advertises, so its `\secure\` goes there.
//!
//! Does not: enctype 2 lists (closed, §14), the Perl-style UDP list, `\echo\` (never
//! answered), poll servers periodically (the poller's job; this face only re-verifies on
//! heartbeats), pull from other masters (the daemon's federation does).

pub mod verify;

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::num::NonZeroU16;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_proto::Protocol;
use muster_proto::gamespy_master::{
    Challenge, Enctype, Greeting, Heartbeat, Key, ListReply, MAX_DATAGRAM, MasterQuery, QueryReply,
    RequestAction, RequestParser, Secure, SyncGames, SyncReply, SyncRequest, Token, ValidateAnswer,
    ValidateCheck, check_validate, validate_string,
};
use muster_proto::gamespy1::query::StatusConfig;
use muster_proto::limit::{BucketConfig, SourceKey, SourceLimiter};
use muster_proto::query::QueryConfig;
use muster_proto::ut2003_list::{Entry, ListFile};
use muster_proto::wire::DecodeError;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::runtime::tcp::{CappedListener, CappedStream, ConnLimits, MetricsSink};
use crate::runtime::udp::{Cx, ReplyKind, UdpMachine};
use muster_core::MasterHandle;
use muster_core::config::LimitsConfig;
use muster_core::drops::DropReason;
use muster_core::registry::{
    DelistOutcome, Face, GameAddr, HeartbeatOutcome, PollInfo, Registration, ServerKey,
    UT2003_LIST_GAMES,
};
use muster_core::views::Snapshot;
use verify::{Answer, ChallengeLimits, Challenges, Finished, Game, Method, Purpose, StatusChecks};

/// Largest read of one list connection at a time (the parser caps the whole request).
const TCP_READ_CHUNK: usize = 1024;
/// Key of the master's own `\secure\` answers (the 333networks mesh, §4.5).
const MESH_GAMENAME: &str = "333networks";
/// A list connection silent this long after sending something has sent its whole request.
const SYNC_IDLE: Duration = Duration::from_secs(1);
/// How often expired challenges and idle buckets are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The knobs of the GameSpy face that do not depend on where it listens. Defaults are the
/// spec's (`gamespy-master.md` §13–14) and the shared `[limits]` defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct GameSpySettings {
    /// Heartbeats that need a challenge or a `\status\`, per source (IPv4 / IPv6 /64).
    pub heartbeat_bucket: BucketConfig,
    /// List connections per source (TCP, whose source the handshake proves: burst 16, then
    /// one per second, §13.8).
    pub list_bucket: BucketConfig,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// The heartbeat bucket grows by one budget per server the source has registered,
    /// counting this many at most (`limits.proven_servers_max`; 0: never).
    pub proven_servers_max: u32,
    /// Pending challenges: lifetime, caps per IP, per prefix and in total, re-challenge
    /// interval (§14).
    pub challenges: ChallengeLimits,
    /// A `\status\` check: two tries 2.5 s apart, so no answer within 5 s fails it (§14).
    pub status: StatusConfig,
    /// `\status\` checks in flight at most (the oldest makes room).
    pub max_status_checks: usize,
    /// A listed server is re-verified on a heartbeat once this long after its last proof.
    pub reverify_interval: Duration,
    /// Re-verifications without an answer in a row that de-list a server.
    pub reverify_failures: u8,
    /// Close a list connection without a list when the client's `\validate\` is wrong
    /// (`gamespy.require_client_validate`, §13.6; default false: counted only).
    pub require_client_validate: bool,
    /// Connection caps and idle timeout of the list server.
    pub conn: ConnLimits,
    /// A list connection is closed after this long in total.
    pub tcp_total_timeout: Duration,
    /// The `hostport` the own query face reports (the list server's port).
    pub list_port: u16,
    /// Whether a poller runs (else the face fetches a new server's game port itself).
    pub poller: bool,
    /// Who may `\sync\`, and what they get.
    pub sync: SyncSettings,
}

/// Answering other masters' `\sync\` (`gamespy-master.md` §7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncSettings {
    /// Sources whose sync is answered (after authenticating with the `333networks` key);
    /// empty: nobody's.
    pub peers: Vec<muster_core::config::Net>,
    /// Include learned records (default: only the ones registered here).
    pub export_learned: bool,
    /// This master's id: a sync carrying it comes from this master itself.
    pub msid: Arc<str>,
}

impl SyncSettings {
    /// Whether `ip` may sync.
    #[must_use]
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.peers.iter().any(|n| n.contains(ip))
    }
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
            list_bucket: BucketConfig::one_every(l.tcp_list_burst, l.tcp_list_refill.0),
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
            challenges: ChallengeLimits {
                per_ip: l.pending_per_ip,
                per_prefix: l.pending_per_prefix,
                total: l.pending_per_face,
                ..ChallengeLimits::default()
            },
            status: StatusConfig {
                retry: QueryConfig {
                    attempt_timeout: Duration::from_millis(2500),
                    retries: 1,
                },
                ..StatusConfig::default()
            },
            max_status_checks: l.pending_per_face,
            reverify_interval: Duration::from_secs(600),
            reverify_failures: 3,
            require_client_validate: false,
            conn: ConnLimits {
                max_per_source: l.tcp_max_per_source.min(4),
                ..l.conn_limits()
            },
            tcp_total_timeout: l.tcp_total_timeout.0,
            list_port: muster_core::config::ports::GAMESPY_TCP,
            poller: true,
            sync: SyncSettings::default(),
        }
    }
}

/// Six fresh challenge letters.
fn random6() -> [u8; 6] {
    rand::random()
}

fn key_of(game: &Game, server: SocketAddr) -> ServerKey {
    ServerKey::new(game.name, GameAddr::Ip(server))
}

/// The first key of a `\key\value…` message, if it has one.
fn first_key(data: &[u8]) -> Option<&[u8]> {
    let body = data.strip_prefix(b"\\")?;
    body.split(|&b| b == b'\\').next()
}

/// Where a heartbeat's `\secure\` goes: to its source (game servers answer on their uplink
/// socket, §3.1), except for a 333networks master, whose uplink comes from a random port and
/// which answers only at the beacon port it advertises (`server`).
fn challenge_to(game: &Game, src: SocketAddr, server: SocketAddr) -> SocketAddr {
    if game.name == MESH_GAMENAME {
        server
    } else {
        src
    }
}

fn drop_reason(e: &DecodeError) -> DropReason {
    match e {
        DecodeError::TooLarge(_) => DropReason::TooLarge,
        _ => DropReason::Malformed,
    }
}

fn registration(key: &ServerKey, server: SocketAddr) -> Registration {
    Registration {
        key: key.clone(),
        face: Face::GameSpy,
        game_port: None,
        query_addr: Some(server),
        query_protocol: Some(Protocol::GameSpy1),
        source: SourceKey::of(server.ip()),
    }
}

/// The GameSpy UDP face: heartbeats, their verification, the master's own query answers. See
/// the module docs.
#[derive(Debug)]
pub struct GameSpyFace {
    settings: GameSpySettings,
    challenges: Challenges,
    checks: StatusChecks,
    heartbeats: SourceLimiter,
    query_id: u32,
    next_sweep: Instant,
}

impl GameSpyFace {
    /// A face started at `now`.
    #[must_use]
    pub fn new(settings: GameSpySettings, now: Instant) -> Self {
        Self {
            challenges: Challenges::new(settings.challenges),
            checks: StatusChecks::new(
                settings.status,
                settings.max_status_checks,
                settings.challenges.per_ip,
            ),
            heartbeats: SourceLimiter::new(settings.heartbeat_bucket, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            settings,
            query_id: 0,
            next_sweep: now + SWEEP_INTERVAL,
        }
    }

    fn start_check(&mut self, cx: &mut Cx<'_>, server: SocketAddr, purpose: Purpose) {
        match self.checks.start(server, purpose) {
            Some(evicted) => {
                for _ in 0..evicted {
                    cx.out.drop(DropReason::PendingEvicted);
                }
                self.send_checks(cx);
            }
            None => cx.out.drop(DropReason::StatusBusy),
        }
    }

    fn send_checks(&mut self, cx: &mut Cx<'_>) {
        loop {
            let mut buf = Vec::new();
            let Some(tx) = self.checks.poll_transmit(cx.now, &mut buf) else {
                break;
            };
            cx.out.send(0, tx.destination, buf, ReplyKind::Control);
        }
    }

    fn on_heartbeat(&mut self, cx: &mut Cx<'_>, src: SocketAddr, data: &[u8]) {
        let hb = match Heartbeat::decode(data) {
            Ok(hb) => hb,
            Err(e) => return cx.out.drop(drop_reason(&e)),
        };
        if !src.is_ipv4() {
            // Lists carry IPv4 only (§13.9).
            return cx.out.drop(DropReason::Ipv6Heartbeat);
        }
        let Some(game) = verify::game(hb.gamename.as_bytes()) else {
            return cx.out.drop(DropReason::UnknownGame);
        };
        let port = match (hb.query_port, game.default_port) {
            (0, Some(p)) => p,
            (0, None) => return cx.out.drop(DropReason::PortZero),
            (p, _) => p,
        };
        let server = SocketAddr::new(src.ip(), port);
        let key = key_of(game, server);
        if cx.registry.lock().heartbeat(&key, cx.wall) == HeartbeatOutcome::Refreshed {
            let (last_proof, unanswered) = cx
                .registry
                .lock()
                .get(&key)
                .map_or((cx.wall, 0), |r| (r.last_proof, r.challenges_unanswered));
            if hb.state_changed() {
                // §14: an immediate `\status\` poll; no answer de-lists. The poller does it;
                // without one, this face checks a `\status\` game itself.
                if !self.heartbeats.allow(src.ip(), cx.now, 1.0) {
                    return;
                }
                if self.settings.poller {
                    cx.out.poll_soon.push(key);
                } else if game.method == Method::Status {
                    self.start_check(cx, server, Purpose::Recheck(game, true));
                }
            } else if cx.wall >= last_proof.plus(self.settings.reverify_interval)
                && unanswered < self.settings.reverify_failures
                && self.heartbeats.allow(src.ip(), cx.now, 1.0)
            {
                match game.method {
                    Method::Secure => {
                        self.challenge(cx, challenge_to(game, src, server), game, server, true);
                    }
                    Method::Status => self.start_check(cx, server, Purpose::Recheck(game, false)),
                }
            }
            return;
        }
        let registry = &mut *cx.registry;
        let allowed = self.heartbeats.allow_proven(src.ip(), cx.now, 1.0, |k| {
            registry.lock().count_of_source(k)
        });
        if !allowed {
            return cx.out.limited(DropReason::RateLimited, src.ip());
        }
        match game.method {
            Method::Secure => {
                self.challenge(cx, challenge_to(game, src, server), game, server, false)
            }
            Method::Status => self.start_check(cx, server, Purpose::Verify(game)),
        }
    }

    fn challenge(
        &mut self,
        cx: &mut Cx<'_>,
        src: SocketAddr,
        game: &'static Game,
        server: SocketAddr,
        reverify: bool,
    ) {
        let c = Challenge::from_random(random6());
        match self
            .challenges
            .offer(cx.now, src, (game, server, reverify), c)
        {
            Ok((c, evicted)) => {
                for _ in 0..evicted {
                    cx.out.drop(DropReason::PendingEvicted);
                }
                let mut out = Vec::new();
                Secure { challenge: c }.encode(&mut out);
                cx.out.send(0, src, out, ReplyKind::Control);
            }
            Err(r) => cx.out.limited(r.drop(), src.ip()),
        }
    }

    fn on_validate(&mut self, cx: &mut Cx<'_>, src: SocketAddr, data: &[u8]) {
        if data.len() > MAX_DATAGRAM {
            return cx.out.drop(DropReason::TooLarge);
        }
        let answer = match ValidateAnswer::decode(data) {
            Ok(a) => a,
            Err(e) => return cx.out.drop(drop_reason(&e)),
        };
        match self.challenges.answer(cx.now, src, &answer) {
            Answer::Unexpected => cx.out.drop(DropReason::UnexpectedValidate),
            Answer::Match(p) => {
                let key = key_of(p.game, p.server);
                let out = cx
                    .registry
                    .lock()
                    .register(registration(&key, p.server), cx.wall);
                cx.out.registered(out);
                if !out.is_listed() {
                    return;
                }
                let port_known = cx
                    .registry
                    .lock()
                    .get(&key)
                    .and_then(|r| r.game_port)
                    .is_some();
                if !port_known {
                    if self.settings.poller {
                        cx.out.poll_soon.push(key);
                    } else {
                        self.start_check(cx, p.server, Purpose::Info(p.game));
                    }
                }
            }
            Answer::Mismatch(p, expected) => {
                tracing::debug!(%src, game = p.game.name, expected, "wrong validate");
                cx.out.verifications_failed += 1;
                if p.reverify {
                    self.reverify_failed(cx, &key_of(p.game, p.server), true);
                }
            }
        }
    }

    /// A re-verification failed: de-list at once when `hard`, else after
    /// [`GameSpySettings::reverify_failures`] in a row (counted in the record).
    fn reverify_failed(&mut self, cx: &mut Cx<'_>, key: &ServerKey, hard: bool) {
        cx.out.verifications_failed += 1;
        let failures = cx
            .registry
            .lock()
            .challenge_sent(key, cx.wall)
            .unwrap_or(u8::MAX);
        if (hard || failures >= self.settings.reverify_failures)
            && cx.registry.lock().delist(key) == DelistOutcome::Delisted
        {
            tracing::debug!(?key, "de-listed");
        }
    }

    fn on_finished(&mut self, cx: &mut Cx<'_>, f: Finished) {
        let (Purpose::Verify(game) | Purpose::Info(game) | Purpose::Recheck(game, _)) = f.purpose;
        let key = key_of(game, f.server);
        match (f.purpose, f.result) {
            (Purpose::Verify(g), Ok(info)) => {
                let named = info
                    .rules
                    .iter()
                    .find(|r| r.key.plain.eq_ignore_ascii_case("gamename"))
                    .is_some_and(|r| verify::matches_group(g, &r.value.plain));
                if !named {
                    cx.out.verifications_failed += 1;
                    return cx.out.drop(DropReason::StatusGamename);
                }
                let out = cx
                    .registry
                    .lock()
                    .register(registration(&key, f.server), cx.wall);
                cx.out.registered(out);
                if out.is_listed() {
                    cx.registry.lock().update_poll(
                        &key,
                        Some(PollInfo::from_server_info(&info)),
                        cx.wall,
                    );
                }
            }
            (Purpose::Verify(_), Err(_)) => cx.out.verifications_failed += 1,
            (Purpose::Info(_) | Purpose::Recheck(..), Ok(info)) => {
                cx.registry.lock().update_poll(
                    &key,
                    Some(PollInfo::from_server_info(&info)),
                    cx.wall,
                );
                if matches!(f.purpose, Purpose::Recheck(..)) {
                    cx.registry.lock().verify(&key, cx.wall);
                }
            }
            (Purpose::Info(_), Err(_)) => {}
            (Purpose::Recheck(_, hard), Err(_)) => self.reverify_failed(cx, &key, hard),
        }
    }

    fn on_query(&mut self, cx: &mut Cx<'_>, src: SocketAddr, data: &[u8]) {
        let q = match MasterQuery::decode(data) {
            Ok(q) => q,
            Err(e) => return cx.out.drop(drop_reason(&e)),
        };
        let sections = match &q {
            MasterQuery::Echo(_) => return cx.out.drop(DropReason::Echo),
            MasterQuery::Unknown(_) => return cx.out.drop(DropReason::UnknownQuery),
            MasterQuery::Basic => vec![basic()],
            MasterQuery::Info => vec![self.info(cx.view)],
            MasterQuery::Rules => vec![rules()],
            MasterQuery::Status => vec![basic(), self.info(cx.view), rules()],
            MasterQuery::Secure(c) => {
                let v = validate_string(c, b"333NWX", Enctype::Zero).unwrap_or_default();
                vec![pairs(&[("validate", &v)])]
            }
        };
        self.query_id = self.query_id % 99 + 1;
        let mut out = Vec::new();
        QueryReply {
            query_id: self.query_id,
            sections,
        }
        .encode(&mut out);
        // Larger than the request: spends the source's reply budget like a list.
        cx.out.send(0, src, out, ReplyKind::List);
    }

    fn info(&self, view: &Snapshot) -> Vec<(Key, Token)> {
        let direct = view.count(Face::GameSpy);
        let all = view.len();
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

impl UdpMachine for GameSpyFace {
    fn name(&self) -> &'static str {
        "gamespy"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, _via: usize, src: SocketAddr, data: &[u8]) {
        let Some(first) = first_key(data) else {
            return cx.out.drop(DropReason::Malformed);
        };
        if first.eq_ignore_ascii_case(b"heartbeat") {
            self.on_heartbeat(cx, src, data);
        } else if first.eq_ignore_ascii_case(b"validate") {
            self.on_validate(cx, src, data);
        } else if self.checks.expects(src) {
            if let Some(f) = self.checks.handle_datagram(cx.now, src, data) {
                self.on_finished(cx, f);
            }
        } else {
            self.on_query(cx, src, data);
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        for f in self.checks.handle_timeout(cx.now) {
            self.on_finished(cx, f);
        }
        self.send_checks(cx);
        if cx.now >= self.next_sweep {
            for p in self.challenges.expire(cx.now) {
                if p.reverify {
                    self.reverify_failed(cx, &key_of(p.game, p.server), false);
                }
            }
            self.heartbeats.prune(cx.now);
            self.next_sweep = cx.now + SWEEP_INTERVAL;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(
            self.checks
                .poll_timeout()
                .map_or(self.next_sweep, |c| c.min(self.next_sweep)),
        )
    }
}

fn basic() -> Vec<(Key, Token)> {
    let ver = concat!("muster-", env!("CARGO_PKG_VERSION"));
    pairs(&[
        ("gamename", MESH_GAMENAME),
        ("gamever", ver),
        ("location", "0"),
    ])
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

/// Serves the UDP face on `sockets` with the UDP runner until `stop` is cancelled.
pub async fn run_udp(
    handle: MasterHandle,
    sockets: Vec<tokio::net::UdpSocket>,
    settings: GameSpySettings,
    budgets: crate::runtime::udp::Budgets,
    stop: CancellationToken,
) {
    let face = GameSpyFace::new(settings, muster_core::clock::now());
    let sockets = sockets.into_iter().map(Arc::new).collect();
    crate::runtime::udp::run(handle, face, sockets, budgets, stop).await;
}

/// The query addresses the GameSpy list of `game` shows in `view` (cached per snapshot).
#[must_use]
pub fn list_of(view: &Snapshot, game: &str) -> Arc<Vec<SocketAddrV4>> {
    view.cached(("gamespy", game.into()), |s| {
        s.listed()
            .iter()
            .filter(|r| {
                r.key.game == game
                    && matches!(r.key.addr.ip(), Some(IpAddr::V4(_)))
                    && r.query_protocol == Some(Protocol::GameSpy1)
            })
            .filter_map(|r| match r.query_addr {
                Some(SocketAddr::V4(a)) => Some(a),
                _ => None,
            })
            .collect()
    })
}

/// Serves the TCP list server on `listeners` until `stop` is cancelled: greeting, request,
/// list, close (§5). Connections in flight are left to finish within their time limit.
pub async fn run_tcp(
    handle: MasterHandle,
    listeners: Vec<TcpListener>,
    settings: GameSpySettings,
    stop: CancellationToken,
) {
    let limiter = Arc::new(Mutex::new(SourceLimiter::new(
        settings.list_bucket,
        settings.max_tracked_sources,
    )));
    let settings = Arc::new(settings);
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        let mut listener = CappedListener::new(l, settings.conn)
            .with_metrics(Arc::new(handle.clone()) as Arc<dyn MetricsSink>);
        let (handle, settings, limiter) =
            (handle.clone(), Arc::clone(&settings), Arc::clone(&limiter));
        let stop = stop.clone();
        tasks.spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    () = stop.cancelled() => return,
                    c = listener.accept_capped() => c,
                };
                let allowed = limiter
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .allow(peer.ip(), muster_core::clock::now(), 1.0);
                if !allowed {
                    handle.metrics().count_rate_limited(peer.ip());
                    handle.metrics().count_drop(DropReason::RateLimited);
                    continue;
                }
                let (handle, settings) = (handle.clone(), Arc::clone(&settings));
                tokio::spawn(async move {
                    let total = settings.tcp_total_timeout;
                    let served = serve_list(&handle, &settings, stream, peer.ip());
                    match tokio::time::timeout(total, served).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!(error = %e, %peer, "list connection failed"),
                        Err(_) => handle.metrics().count_drop(DropReason::TcpTotalTimeout),
                    }
                });
            }
        });
    }
    while tasks.join_next().await.is_some() {}
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
    // Everything received (the parser caps it at its request limit), to tell a sync.
    let mut seen: Vec<u8> = Vec::new();
    let req = loop {
        // A Qt5 master's `\sync\` may come without `\final\` (and without `\msid\`): after
        // a second of silence a buffered sync is taken as the whole request (§14).
        let fed = match tokio::time::timeout(SYNC_IDLE, stream.read(&mut buf)).await {
            Ok(read) => {
                let n = read?;
                if n == 0 {
                    metrics.count_drop(DropReason::ListEof);
                    return Ok(());
                }
                let bytes = buf.get(..n).unwrap_or_default();
                if seen.len() < muster_proto::gamespy_master::MAX_CLIENT_REQUEST {
                    seen.extend_from_slice(bytes);
                }
                parser.feed(bytes)
            }
            Err(_) if seen.windows(6).any(|w| w == b"\\sync\\") => parser.flush(),
            Err(_) => Ok(None),
        };
        match fed {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                metrics.count_drop(drop_reason(&e));
                return Ok(());
            }
        }
    };
    let list = match &req.action {
        RequestAction::List(list) => list,
        RequestAction::Sync(sync) => {
            return serve_sync(handle, settings, stream, peer, &challenge, &req.auth, sync).await;
        }
    };
    let Ok(enctype) = req.auth.enctype() else {
        metrics.count_drop(DropReason::Malformed);
        return Ok(());
    };
    let auth_game = req.auth.gamename().map(Token::as_bytes).unwrap_or_default();
    let validate = req.auth.validate().map(Token::as_bytes).unwrap_or_default();
    match check_validate(auth_game, &challenge, enctype, validate) {
        ValidateCheck::Match => {}
        ValidateCheck::Mismatch { .. } => {
            metrics.count_verification_failed();
            metrics.count_drop(DropReason::ClientValidate);
            tracing::debug!(%peer, "list client sent a wrong validate");
            if settings.require_client_validate {
                return Ok(());
            }
        }
        ValidateCheck::UnknownGame => {
            metrics.count_drop(DropReason::UnknownGame);
            return Ok(());
        }
        ValidateCheck::UnsupportedEnctype => {
            metrics.count_drop(DropReason::UnsupportedEnctype);
            return Ok(());
        }
    }
    if enctype == Enctype::Two {
        // The client would expect an enctype 2 list, which Muster cannot write (§14).
        metrics.count_drop(DropReason::Enctype2List);
        return Ok(());
    }
    let Some(game) = req.list_gamename().and_then(verify::game) else {
        metrics.count_drop(DropReason::UnknownGame);
        return Ok(());
    };
    let servers = list_of(&handle.snapshot(), game.name);
    out.clear();
    ListReply {
        form: list.mode.reply_form(),
        servers: servers.to_vec(),
    }
    .encode(&mut out);
    metrics.count_list_request("gamespy");
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// A peer's `\sync\`: refused (closed) unless the peer is allowed and authenticated as
/// `333networks`; answered with `\final\` alone when it carries this master's own id.
async fn serve_sync(
    handle: &MasterHandle,
    settings: &GameSpySettings,
    mut stream: CappedStream,
    peer: IpAddr,
    challenge: &Challenge,
    auth: &muster_proto::gamespy_master::ClientAuth,
    sync: &SyncRequest,
) -> io::Result<()> {
    let metrics = handle.metrics();
    if !settings.sync.allows(peer) {
        metrics.count_drop(DropReason::SyncUnsupported);
        tracing::debug!(%peer, "sync from a source that is no sync peer");
        return Ok(());
    }
    let auth_game = auth.gamename().map(Token::as_bytes).unwrap_or_default();
    let validate = auth.validate().map(Token::as_bytes).unwrap_or_default();
    let enctype = auth.enctype().unwrap_or(Enctype::Zero);
    let mesh = auth_game.eq_ignore_ascii_case(MESH_GAMENAME.as_bytes());
    if !mesh || check_validate(auth_game, challenge, enctype, validate) != ValidateCheck::Match {
        metrics.count_verification_failed();
        metrics.count_drop(DropReason::ClientValidate);
        tracing::debug!(%peer, "sync peer failed the 333networks validate");
        return Ok(());
    }
    let mut out = Vec::new();
    let own = sync
        .msid
        .as_ref()
        .is_some_and(|m| m.as_bytes() == settings.sync.msid.as_bytes());
    if own {
        out.extend_from_slice(b"\\final\\");
    } else {
        let lists = sync_lists(&handle.snapshot(), settings.sync.export_learned);
        let games = lists
            .iter()
            .filter(|(g, _)| match &sync.games {
                SyncGames::All => true,
                SyncGames::Games(want) => want
                    .iter()
                    .any(|k| k.as_bytes().eq_ignore_ascii_case(g.as_bytes())),
            })
            .filter_map(|(g, addrs)| Some((Key::new(g.as_str()).ok()?, addrs.clone())))
            .collect();
        SyncReply { games }.encode(&mut out);
    }
    metrics.count_list_request("gamespy-sync");
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// Every game's query addresses for a sync answer, games with at least one server, in game
/// table order (cached per snapshot): the records registered here, and with `learned` the
/// learned ones too.
#[must_use]
pub fn sync_lists(view: &Snapshot, learned: bool) -> Arc<Vec<(String, Vec<SocketAddrV4>)>> {
    let which = if learned { "all" } else { "direct" };
    view.cached(("gamespy-sync", which.into()), |s| {
        verify::GAMES
            .iter()
            .map(|g| {
                let addrs: Vec<SocketAddrV4> = s
                    .listed()
                    .iter()
                    .filter(|r| {
                        r.key.game == g.name
                            && (learned || r.is_direct())
                            && r.query_protocol == Some(Protocol::GameSpy1)
                            && matches!(r.key.addr.ip(), Some(IpAddr::V4(_)))
                    })
                    .filter_map(|r| match r.query_addr {
                        Some(SocketAddr::V4(a)) => Some(a),
                        _ => None,
                    })
                    .collect();
                (g.name.to_owned(), addrs)
            })
            .filter(|(_, a)| !a.is_empty())
            .collect()
    })
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
    let body = handle
        .snapshot()
        .cached(("ut2003", file.as_str().into()), |s| {
            let entries: Vec<Entry> = s
                .listed()
                .iter()
                .filter(|rec| {
                    games.contains(&rec.key.game.as_str())
                        && rec.query_protocol == Some(Protocol::GameSpy1)
                })
                .filter_map(|rec| {
                    let IpAddr::V4(ip) = rec.key.addr.ip()? else {
                        return None;
                    };
                    let SocketAddr::V4(q) = rec.query_addr? else {
                        return None;
                    };
                    Some(Entry {
                        ip,
                        game_port: NonZeroU16::new(rec.game_port?)?,
                        query_port: NonZeroU16::new(q.port())?,
                    })
                })
                .collect();
            let mut body = Vec::new();
            ListFile::from_entries(entries).encode(&mut body);
            bytes::Bytes::from(body)
        });
    let body = (*body).clone();
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
