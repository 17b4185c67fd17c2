//! The GameAgent master face (`gameagent.md` §2, §5, §8.3), UDP 9005, as a pure machine.
//!
//! ```text
//! 65 "e"                 -> 73 { a.b.c.d port:u16le }*   the view's list (cached per snapshot)
//! 71 "q" from (A, P)     -> 01 c:i32le                    c = MAC(A, P, epoch); nothing stored
//! "0;challenge;<c>;…"    -> c proves (A, P): registry register (game = product, address (A, P − 1))
//! "0;challenge;0;…"      -> listed: registry heartbeat; unknown or de-listed: challenge again
//! 75 "u"                 -> listed: the poller polls it soon
//! timer (1 s)            -> re-verification of listed records (rule 6), state in the registry
//! ```
//!
//! # Stateless challenges
//! A challenge is four bytes: two of HMAC over (A, P′, epoch) and two holding P′ masked with
//! another HMAC of (A, epoch). An echo from (A, P) is checked by unmasking P′ and recomputing
//! the MAC (current and previous epoch, 60 s each): P′ = P verifies (rule 4.2); a valid MAC
//! for another port P′ is a port hop (rule 4.4, counted, logged once per address per hour);
//! anything else is a bad echo. So a `q` costs one 5-byte reply within the source's budget and
//! no memory at all: a forged flood cannot fill anything. An off-path attacker must guess 16
//! bits per attempt, each attempt spending the source's heartbeat budget.
//!
//! Deliberate differences from the rules of §8.3: a `q` from a listed server does not de-list
//! it (a forged `q` could), and challenges per address are budgeted generously (256, then 10
//! per second) so that many servers behind one address register at once.
//!
//! # Re-verification and restarts
//! Every [`GameAgentSettings::reverify_interval`] a listed record is challenged again; an
//! unanswered challenge is re-sent after [`GameAgentSettings::reverify_timeout`], and after
//! [`GameAgentSettings::reverify_tries`] the record is de-listed. The progress is kept in the
//! record itself ([`muster_core::registry::Record::challenges_unanswered`]). After a restart every
//! restored GameAgent record is challenged at once the same way, so what `e` lists was proven
//! by this process or is proven within 30 s.
//!
//! The heartbeat's fields (players, maxplayers, level, gametype, version, product; §2.4) are
//! the record's info until the poller has polled it.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use muster_proto::Protocol;
use muster_proto::gameagent::MAX_DATAGRAM;
use muster_proto::gameagent::packet::{Challenge, Heartbeat, MasterPacket, encode_list};
use muster_proto::gameagent::plain_text;
use muster_proto::limit::{BucketConfig, SourceKey, SourceLimiter};
use muster_proto::text::decode_windows1252;

use crate::runtime::udp::{Cx, Datagrams, Reply, ReplyKind, UdpMachine};
use challenge::Challenges;
use hops::PortHops;
use muster_core::config::LimitsConfig;
use muster_core::drops::DropReason;
use muster_core::registry::{
    Face, GameAddr, HeartbeatOutcome, MAX_GAME_LEN, PollFields, PollInfo, Registration, Rules,
    ServerKey, short,
};
use muster_core::secrets::Secrets;
use muster_core::views::Snapshot;

/// The game name of a record whose `product` is not a usable name (empty, too long, not
/// printable ASCII): stock 1.10 dedicated servers' default.
const FALLBACK_GAME: &str = "serioussam";
/// How often the face looks for records due for re-verification.
const SWEEP: Duration = Duration::from_secs(1);
/// Challenges sent per sweep at most (the rest go out in the next sweeps).
const MAX_CHALLENGES_PER_SWEEP: usize = 2000;
/// Records of the list one sweep looks at, at most.
const SWEEP_CHUNK: usize = 16_384;
/// The per-source rate tables are pruned every this many sweeps.
const PRUNE_EVERY_SWEEPS: u32 = 10;
/// Length of a challenge datagram (`01` + four bytes).
const CHALLENGE_LEN: usize = 5;

/// The knobs of the GameAgent face.
#[derive(Debug, Clone, PartialEq)]
pub struct GameAgentSettings {
    /// Challenges per source address, in challenges (burst and refill).
    pub challenges: BucketConfig,
    /// Heartbeats that need work (a challenge, a MAC check) per source address.
    pub heartbeats: BucketConfig,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Both buckets grow by one budget per server the source has registered, counting this
    /// many at most (`limits.proven_servers_max`; 0: never).
    pub proven_servers_max: u32,
    /// Listed records are challenged again this often (rule 6).
    pub reverify_interval: Duration,
    /// An unanswered re-verification challenge is re-sent after this long.
    pub reverify_timeout: Duration,
    /// Challenges sent in all before a record is de-listed.
    pub reverify_tries: u8,
    /// A port hop is logged at most once per address per this long.
    pub port_hop_report_interval: Duration,
    /// How long a challenge stays valid (an epoch; the previous epoch is accepted too).
    pub challenge_epoch: Duration,
    /// Per-product listeners (rule 2): the bound address of a socket whose `e` replies list
    /// only these products. Every other socket lists every product.
    pub product_listeners: Vec<(SocketAddr, Vec<String>)>,
}

impl Default for GameAgentSettings {
    fn default() -> Self {
        Self::from_limits(&LimitsConfig::default())
    }
}

impl GameAgentSettings {
    /// The defaults with the shared `[limits]` section applied.
    #[must_use]
    pub fn from_limits(l: &LimitsConfig) -> Self {
        Self {
            challenges: BucketConfig::one_every(l.challenge_burst, l.challenge_refill.0),
            heartbeats: BucketConfig::one_every(l.heartbeat_burst, l.heartbeat_refill.0),
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
            reverify_interval: Duration::from_secs(600),
            reverify_timeout: Duration::from_secs(10),
            reverify_tries: 3,
            port_hop_report_interval: Duration::from_secs(3600),
            challenge_epoch: Duration::from_secs(60),
            product_listeners: Vec::new(),
        }
    }
}

/// What one socket's `e` replies list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every product (the default listener, rule 1).
    All,
    /// Only these products, lower-case (a per-product listener, rule 2).
    Products(Vec<String>),
}

/// The GameAgent face. See the module docs.
#[derive(Debug)]
pub struct GameAgentFace {
    settings: GameAgentSettings,
    /// The stateless challenges it issues and checks.
    issuer: Challenges,
    /// Per socket (`via`): what its lists show.
    scopes: Vec<Scope>,
    /// Where the face's own challenges (re-verification) leave from.
    challenge_via: usize,
    challenges: SourceLimiter,
    heartbeats: SourceLimiter,
    port_hops: PortHops,
    next_sweep: Instant,
    /// Challenge every restored record in the first pass of sweeps.
    restart_sweep: bool,
    /// Where the next sweep starts in the view's list.
    sweep_pos: usize,
    /// Sweeps since the rate tables were last pruned.
    sweeps: u32,
}

/// A challenge datagram.
fn challenge_bytes(c: Challenge) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(CHALLENGE_LEN);
    MasterPacket::Challenge(c).encode(&mut bytes);
    bytes
}

/// The IPv4 (A, P) of a registration datagram, or why it is refused.
fn registration_source(from: SocketAddr) -> Result<SocketAddrV4, DropReason> {
    let ip = match from.ip() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().ok_or(DropReason::Ipv6Heartbeat)?,
    };
    if from.port() <= 1 {
        return Err(DropReason::PortZero);
    }
    Ok(SocketAddrV4::new(ip, from.port()))
}

/// The registry's game name for a heartbeat's raw `product`.
fn game_name(product: &[u8]) -> String {
    let usable = !product.is_empty()
        && product.len() <= MAX_GAME_LEN
        && product.iter().all(u8::is_ascii_graphic);
    if usable {
        String::from_utf8_lossy(product).to_ascii_lowercase()
    } else {
        FALLBACK_GAME.to_owned()
    }
}

/// What a heartbeat says about the server, as record info (no name: heartbeats carry none).
/// Read from the datagram's pairs in place: a heartbeat arrives every few minutes from every
/// server, and each text is made once.
fn heartbeat_info(h: &Heartbeat) -> PollInfo {
    let raw = |key: &str| h.get(key).unwrap_or_default();
    PollInfo::from(PollFields {
        map: short(&plain_text(raw("level"))),
        game_type: short(&plain_text(raw("gametype"))),
        num_players: h.count("players"),
        max_players: h.count("maxplayers"),
        rules: Rules::new([
            ("version", plain_text(raw("version"))),
            ("product", decode_windows1252(raw("product"))),
        ]),
        ..PollFields::default()
    })
}

fn game_of(query: SocketAddrV4) -> SocketAddrV4 {
    SocketAddrV4::new(*query.ip(), query.port().saturating_sub(1))
}

fn key_of(game: &str, query: SocketAddrV4) -> ServerKey {
    ServerKey::new(game, GameAddr::Ip(SocketAddr::V4(game_of(query))))
}

fn registration(key: &ServerKey, query: SocketAddrV4) -> Registration {
    Registration {
        key: key.clone(),
        face: Face::GameAgent,
        game_port: Some(key.addr.port()),
        query_addr: Some(SocketAddr::V4(query)),
        query_protocol: Some(Protocol::GameAgent),
        source: SourceKey::of(IpAddr::V4(*query.ip())),
    }
}

/// The `e` datagrams of `scope` in `view` (encoded once per snapshot and scope).
#[must_use]
pub fn list_datagrams(view: &Snapshot, scope: &Scope) -> Arc<[Bytes]> {
    let key = match scope {
        Scope::All => String::new(),
        Scope::Products(p) => p.join(","),
    };
    let list = view.cached(("gameagent", key.into()), |s| {
        let games: Vec<SocketAddrV4> = s
            .listed()
            .iter()
            .filter(|r| r.face == Face::GameAgent)
            .filter(|r| match scope {
                Scope::All => true,
                Scope::Products(p) => p.iter().any(|g| *g == r.key.game),
            })
            .filter_map(|r| match (r.key.addr.ip(), r.game_port) {
                (Some(IpAddr::V4(ip)), Some(port)) => Some(SocketAddrV4::new(ip, port)),
                _ => None,
            })
            .collect();
        encode_list(&games)
            .into_iter()
            .map(Bytes::from)
            .collect::<Vec<_>>()
    });
    Arc::from(list.as_slice())
}

impl GameAgentFace {
    /// A face serving sockets with `scopes` (one per socket, in the runner's order), started
    /// at `now` (its first sweep, which challenges every restored record, is due then).
    #[must_use]
    pub fn new(
        settings: GameAgentSettings,
        secrets: Secrets,
        scopes: Vec<Scope>,
        now: Instant,
    ) -> Self {
        let challenge_via = scopes.iter().position(|s| *s == Scope::All).unwrap_or(0);
        Self {
            challenges: SourceLimiter::new(settings.challenges, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            heartbeats: SourceLimiter::new(settings.heartbeats, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            settings,
            issuer: Challenges::new(secrets),
            scopes,
            challenge_via,
            port_hops: PortHops::default(),
            next_sweep: now,
            restart_sweep: true,
            sweep_pos: 0,
            sweeps: 0,
        }
    }

    fn send_challenge(&mut self, cx: &mut Cx<'_>, via: usize, a: SocketAddrV4, budgeted: bool) {
        let registry = &mut *cx.registry;
        if budgeted
            && !self
                .challenges
                .allow_proven(IpAddr::V4(*a.ip()), cx.now, 1.0, |k| {
                    registry.lock().count_of_source(k)
                })
        {
            cx.out.limited(DropReason::RateLimited, IpAddr::V4(*a.ip()));
            return;
        }
        let c = self.issuer.issue(a, cx.wall);
        cx.out.send(
            via,
            SocketAddr::V4(a),
            challenge_bytes(c),
            ReplyKind::Control,
        );
    }

    fn list(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr) {
        let scope = self.scopes.get(via).cloned().unwrap_or(Scope::All);
        let datagrams = list_datagrams(cx.view, &scope);
        cx.out.lists += 1;
        cx.out.replies.push(Reply {
            via,
            to: from,
            datagrams: Datagrams::Many(datagrams),
            kind: ReplyKind::List,
        });
    }

    /// A heartbeat, in one pass: the registry (a listed server's refresh), the source's
    /// budgets, the MACs, then the registry again through the same hold.
    fn heartbeat(&mut self, cx: &mut Cx<'_>, via: usize, a: SocketAddrV4, h: &Heartbeat) {
        let Some(echo) = h.challenge() else {
            return cx.out.drop(DropReason::Malformed);
        };
        let key = key_of(&game_name(h.get("product").unwrap_or_default()), a);
        let source = IpAddr::V4(*a.ip());
        let (now, wall) = (cx.now, cx.wall);
        let registry = cx.registry.lock();
        // Rule 4.3: a listed server's periodic heartbeat refreshes it; anyone else is
        // challenged.
        if echo == 0 && registry.heartbeat(&key, wall) == HeartbeatOutcome::Refreshed {
            registry.registration_info(&key, heartbeat_info(h));
            return;
        }
        // Work (a challenge, a MAC check) is budgeted per source; a source's budgets grow
        // with the servers it registered.
        let budgeted = self
            .heartbeats
            .allow_proven(source, now, 1.0, |k| registry.count_of_source(k))
            && (echo != 0
                || self
                    .challenges
                    .allow_proven(source, now, 1.0, |k| registry.count_of_source(k)));
        if !budgeted {
            return cx.out.limited(DropReason::RateLimited, source);
        }
        if echo == 0 {
            let c = self.issuer.issue(a, wall);
            return cx.out.send(
                via,
                SocketAddr::V4(a),
                challenge_bytes(c),
                ReplyKind::Control,
            );
        }
        match self.issuer.port_of_echo(*a.ip(), echo, wall) {
            // Rule 4.2: (A, P) answered its challenge: listed (or re-verified) under its
            // product. One server is one record: the same address under another product (it
            // changed, or a record from before a restart) is replaced.
            Some(p) if p == a.port() => {
                let out = registry.register_replacing_with_info(
                    registration(&key, a),
                    wall,
                    heartbeat_info(h),
                );
                cx.out.registered(out);
            }
            Some(challenged) => {
                cx.out.drop(DropReason::PortHop);
                cx.out.verifications_failed += 1;
                let every = self.settings.port_hop_report_interval;
                self.port_hops.report(now, every, a, challenged);
            }
            None => {
                cx.out.drop(DropReason::BadEcho);
                cx.out.verifications_failed += 1;
            }
        }
    }

    fn state_changed(&mut self, cx: &mut Cx<'_>, a: SocketAddrV4) {
        let addr = GameAddr::Ip(SocketAddr::V4(game_of(a)));
        let listed: Vec<ServerKey> = cx
            .registry
            .lock()
            .at_addr(&addr)
            .filter(|r| r.face == Face::GameAgent && r.is_listed())
            .map(|r| r.key.clone())
            .collect();
        if listed.is_empty() {
            return cx.out.drop(DropReason::UnexpectedStateChange);
        }
        cx.out.poll_soon.extend(listed);
    }

    /// Rule 6: challenge listed records whose proof is old, re-send unanswered challenges,
    /// de-list records that did not answer any. A sweep looks at [`SWEEP_CHUNK`] records of
    /// the list from where the last one stopped (it runs under the registry lock), so a pass
    /// over 100,000 servers takes several sweeps, each a few milliseconds at most.
    fn sweep(&mut self, cx: &mut Cx<'_>) {
        let s = &self.settings;
        let listed = cx.view.listed();
        let start = if self.sweep_pos >= listed.len() {
            0
        } else {
            self.sweep_pos
        };
        let restart = self.restart_sweep;
        let mut due: Vec<(ServerKey, SocketAddrV4)> = Vec::new();
        let mut delist: Vec<ServerKey> = Vec::new();
        let mut next = (start + SWEEP_CHUNK).min(listed.len());
        for (i, seen) in listed.iter().enumerate().take(next).skip(start) {
            // Not due by the view's copy: not due by the registry's either (its proof is only
            // newer, and no challenge goes out before the proof is old).
            let fresh = !restart
                && seen.challenges_unanswered() == 0
                && cx.wall < seen.last_proof.plus(s.reverify_interval);
            if seen.face != Face::GameAgent || fresh {
                continue;
            }
            // The view only names the candidates: its copy of a record can be older than the
            // challenges this sweep and the last ones sent (a challenge is not a change any
            // list shows, so it may wait for the next publish). Decide on the registry's.
            let Some(r) = cx.registry.lock().get(&seen.key) else {
                continue;
            };
            if r.face != Face::GameAgent || !r.is_listed() {
                continue;
            }
            let Some(SocketAddr::V4(q)) = r.query_addr() else {
                continue;
            };
            if r.challenges_unanswered() == 0 {
                if restart || cx.wall >= r.last_proof.plus(s.reverify_interval) {
                    due.push((r.key.clone(), q));
                }
            } else if cx.wall >= r.last_challenge().plus(s.reverify_timeout) {
                if r.challenges_unanswered() < s.reverify_tries {
                    due.push((r.key.clone(), q));
                } else {
                    delist.push(r.key.clone());
                }
            }
            if due.len() >= MAX_CHALLENGES_PER_SWEEP {
                next = i + 1;
                break;
            }
        }
        if next >= listed.len() {
            // A pass is complete.
            self.sweep_pos = 0;
            self.restart_sweep = false;
        } else {
            self.sweep_pos = next;
        }
        for k in delist {
            if cx.registry.lock().delist(&k) == muster_core::registry::DelistOutcome::Delisted {
                cx.out.verifications_failed += 1;
                tracing::debug!(key = ?k, "gameagent server did not answer re-verification");
            }
        }
        let via = self.challenge_via;
        for (k, q) in due {
            // The master's own initiative, bounded by the listed records: no source budget.
            if cx.registry.lock().challenge_sent(&k, cx.wall).is_some() {
                self.send_challenge(cx, via, q, false);
            }
        }
        self.sweeps += 1;
        if self.sweeps >= PRUNE_EVERY_SWEEPS {
            self.sweeps = 0;
            self.challenges.prune(cx.now);
            self.heartbeats.prune(cx.now);
        }
    }
}

impl UdpMachine for GameAgentFace {
    fn name(&self) -> &'static str {
        "gameagent"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
        if data.len() > MAX_DATAGRAM {
            return cx.out.drop(DropReason::TooLarge);
        }
        let Ok(packet) = MasterPacket::decode(data) else {
            return cx.out.drop(DropReason::Malformed);
        };
        let source = || registration_source(from);
        match packet {
            MasterPacket::ListRequest => self.list(cx, via, from),
            MasterPacket::Join => match source() {
                Ok(a) => self.send_challenge(cx, via, a, true),
                Err(why) => cx.out.drop(why),
            },
            MasterPacket::Heartbeat(h) => match source() {
                Ok(a) => self.heartbeat(cx, via, a, &h),
                Err(why) => cx.out.drop(why),
            },
            MasterPacket::StateChanged => match source() {
                Ok(a) => self.state_changed(cx, a),
                Err(why) => cx.out.drop(why),
            },
            MasterPacket::ListReply(_) | MasterPacket::Challenge(_) | MasterPacket::Unknown(_) => {
                cx.out.drop(DropReason::Malformed);
            }
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        if cx.now >= self.next_sweep {
            self.sweep(cx);
            self.next_sweep = cx.now + SWEEP;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_sweep)
    }

    fn asks_for_list(&self, data: &[u8]) -> bool {
        data.first() == Some(&muster_proto::gameagent::packet::LIST_REQUEST)
    }
}

/// The GameAgent face's entry in the face table.
pub const FACE: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "gameagent",
    summary: "GameAgent master (Serious Sam)",
    contract: crate::face::Contract::Datagrams,
    default_port: muster_core::config::ports::GAMEAGENT,
    bind: |addr| crate::face::bind_one_udp(FACE.name, addr),
    serve: |start, sockets| {
        let settings = start.settings.get::<GameAgentSettings>();
        let sockets = crate::face::udp_sockets(FACE.name, sockets);
        let scopes = sockets
            .iter()
            .map(|s| scope_of(&settings, s.local_addr().ok()))
            .collect();
        let face = GameAgentFace::new(
            settings,
            Secrets::random(Duration::from_secs(60)),
            scopes,
            muster_core::clock::now(),
        );
        start.run_udp(face, sockets)
    },
    register_hint: |a| {
        format!(
            "Serious Sam: ga_bMSLegacy = 0; ga_strServer = \"{}\";{}",
            a.ip(),
            crate::face::fixed_port_note(a, muster_core::config::ports::GAMEAGENT)
        )
    },
};

/// What the socket bound at `addr` lists: the products `settings` names for it, else all.
fn scope_of(settings: &GameAgentSettings, addr: Option<SocketAddr>) -> Scope {
    settings
        .product_listeners
        .iter()
        .find(|(a, _)| Some(*a) == addr)
        .map_or(Scope::All, |(_, p)| {
            Scope::Products(p.iter().map(|g| g.to_ascii_lowercase()).collect())
        })
}

mod challenge;
mod hops;
#[cfg(test)]
mod tests;
