//! The Quake III / DarkPlaces master face, compatible with dpmaster: game servers send
//! `heartbeat <tag>`, the face answers `getinfo <challenge>`, and only an `infoResponse` that
//! echoes the challenge and carries a usable `sv_maxclients`, `protocol`, `clients` and game name
//! registers (or refreshes) the server; clients ask `getservers` / `getserversExt` and get the
//! listed servers of their game, protocol and gametype, in 1,400-byte datagrams ending with `EOT`.
//!
//! A pure [`UdpMachine`]: the runner brings the datagrams, the time and the registry. What the
//! face keeps is bounded: the challenges in flight (one per server address, for
//! [`Quake3Settings::pending_timeout`], at most [`MAX_PENDING`]) and the per-source buckets.
//!
//! Limits, checked before anything is sent or kept: a source's heartbeats (its budget grows with
//! the servers it registered), servers per address and in total (challenges in flight count, so
//! a server over the cap is never sent a `getinfo`), loopback servers unless allowed, the game
//! policy, list requests per source when flood protection is on, and the list byte budget every
//! UDP list face shares (applied by the runner).

pub mod games;

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, SourceKey, SourceLimiter};
use muster_proto::quake3::info::InfoString;
use muster_proto::quake3::packet::{FilterOption, Packet, ServerList};
use muster_proto::quake3::{
    CHALLENGE_RANDOM_LEN, MASTER_CHALLENGE_MAX_LEN, MASTER_CHALLENGE_MIN_LEN, MAX_DATAGRAM, Word,
    plain_text,
};
use rand::rngs::SmallRng;
use rand::{RngCore as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

use crate::face::shrink;
use crate::runtime::udp::{Cx, Datagrams, Reply, ReplyKind, UdpMachine};
use games::{GamePolicy, GameProperties, Tag, builtin_games, classify};
use muster_core::config::{HumanDuration, LimitsConfig};
use muster_core::drops::DropReason;
use muster_core::registry::{
    Face, GameAddr, PollFields, PollInfo, Record, Registration, Rules, ServerKey, short,
};
use muster_core::views::Snapshot;

/// Challenges in flight at most (a heartbeat over it is dropped as an overload).
pub const MAX_PENDING: usize = 65_536;
/// Longest info key or value a server may send, in bytes (dpmaster refuses 256 and over).
pub const MAX_INFO_FIELD: usize = 255;
/// How often the face looks for challenges that were not answered.
const SWEEP: Duration = Duration::from_millis(500);

/// The `[quake3]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quake3Config {
    /// Accept servers on loopback addresses (dpmaster refuses them unless told: a loopback
    /// address listed to the world reaches no one).
    pub allow_loopback: bool,
    /// Ignore a source's list requests beyond this many in a row (0: no such limit; the list
    /// byte budget of `[limits]` applies either way). dpmaster's `--fp-throttle`.
    pub flood_throttle: u32,
    /// One more list request is allowed every this long. dpmaster's `--fp-decay-time`.
    pub flood_decay: HumanDuration,
    /// Which games are served.
    pub game_policy: GamePolicy,
    /// Changes to the built-in game properties: an entry replaces the built-in game of the
    /// same name, or adds a game.
    pub games: Vec<GameProperties>,
}

impl Default for Quake3Config {
    fn default() -> Self {
        Self {
            allow_loopback: false,
            flood_throttle: 0,
            flood_decay: HumanDuration(Duration::from_secs(3)),
            game_policy: GamePolicy::All,
            games: Vec::new(),
        }
    }
}

/// The knobs of the face.
#[derive(Debug, Clone, PartialEq)]
pub struct Quake3Settings {
    /// Heartbeats per source address (burst and refill); each may cost a `getinfo`.
    pub heartbeats: BucketConfig,
    /// List requests per source, when flood protection is on.
    pub flood: Option<BucketConfig>,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Buckets grow by one budget per server the source registered, up to this many.
    pub proven_servers_max: u32,
    /// Servers per source (IPv4 address, IPv6 /64), challenges in flight included.
    pub max_per_source: usize,
    /// Servers in total, challenges in flight included.
    pub max_servers: usize,
    /// A `getinfo` unanswered for this long is forgotten (dpmaster: 2 s).
    pub pending_timeout: Duration,
    /// See [`Quake3Config::allow_loopback`].
    pub allow_loopback: bool,
    /// Which games are served.
    pub policy: GamePolicy,
    /// The game properties in force.
    pub games: Vec<GameProperties>,
}

impl Default for Quake3Settings {
    fn default() -> Self {
        Self::new(&Quake3Config::default(), &LimitsConfig::default())
    }
}

impl Quake3Settings {
    /// The face's settings from its section and the shared limits.
    #[must_use]
    pub fn new(c: &Quake3Config, l: &LimitsConfig) -> Self {
        let mut games = builtin_games();
        for g in &c.games {
            match games.iter_mut().find(|b| b.name == g.name) {
                Some(b) => *b = g.clone(),
                None => games.push(g.clone()),
            }
        }
        Self {
            heartbeats: BucketConfig::one_every(l.heartbeat_burst, l.heartbeat_refill.0),
            flood: (c.flood_throttle > 0).then(|| {
                // dpmaster answers throttle - 1 requests in a row and ignores the next one.
                BucketConfig::one_every(c.flood_throttle.saturating_sub(1), c.flood_decay.0)
            }),
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
            max_per_source: l.servers_per_source,
            max_servers: l.max_records,
            pending_timeout: Duration::from_secs(2),
            allow_loopback: c.allow_loopback,
            policy: c.game_policy.clone(),
            games,
        }
    }
}

/// The bytes a challenge is drawn from: 0x21–0x7E without `\ / ; " %` (dpmaster's rule), in
/// order, as `muster_proto::quake3::generate_challenge` draws them.
// Evaluated when the crate is built: an index out of range fails the build, never a run.
#[allow(clippy::indexing_slicing)]
const CHALLENGE_ALPHABET: [u8; 89] = {
    let mut out = [0u8; 89];
    let mut b = 0x21u8;
    let mut i = 0;
    while b <= 0x7E {
        if !matches!(b, b'\\' | b'/' | b';' | b'"' | b'%') {
            out[i] = b;
            i += 1;
        }
        b += 1;
    }
    assert!(i == 89);
    out
};

/// A challenge sent in a `getinfo`, kept inline: no heap allocation per server in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Challenge {
    len: u8,
    bytes: [u8; MASTER_CHALLENGE_MAX_LEN],
}

impl Challenge {
    /// The challenge `random` gives: byte 0 picks the length (9 to 12), each next byte one
    /// character of [`CHALLENGE_ALPHABET`] by its remainder — the mapping of
    /// `muster_proto::quake3::generate_challenge`, by a table lookup instead of a walk through
    /// the alphabet per character (that walk was 4 % of the master's CPU per registration).
    fn new(random: [u8; CHALLENGE_RANDOM_LEN]) -> Self {
        let [len_byte, chars @ ..] = random;
        let span = MASTER_CHALLENGE_MAX_LEN - MASTER_CHALLENGE_MIN_LEN + 1;
        let len = MASTER_CHALLENGE_MIN_LEN + usize::from(len_byte) % span;
        let mut bytes = [0u8; MASTER_CHALLENGE_MAX_LEN];
        for (out, r) in bytes.iter_mut().zip(chars) {
            let at = usize::from(r) % CHALLENGE_ALPHABET.len();
            *out = CHALLENGE_ALPHABET.get(at).copied().unwrap_or(b'!');
        }
        Self {
            len: u8::try_from(len).unwrap_or(u8::MAX),
            bytes,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.bytes
            .get(..usize::from(self.len))
            .unwrap_or(&self.bytes)
    }

    /// The `getinfo` datagram carrying it, in one allocation of its exact size (the runner
    /// turns it into `Bytes` without copying).
    fn getinfo(&self) -> Box<[u8]> {
        const HEAD: &[u8] = b"\xFF\xFF\xFF\xFFgetinfo ";
        let c = self.as_bytes();
        let mut out = Vec::with_capacity(HEAD.len() + c.len());
        out.extend_from_slice(HEAD);
        out.extend_from_slice(c);
        out.into_boxed_slice()
    }
}

/// A `getinfo` in flight: 32 bytes inline in the map.
#[derive(Debug)]
struct Pending {
    challenge: Challenge,
    tag: Tag,
    until: Instant,
}

/// The Quake III master face. See the module docs.
#[derive(Debug)]
pub struct Quake3Face {
    settings: Quake3Settings,
    rng: SmallRng,
    /// The challenges in flight, each with its own deadline. No queue of deadlines beside
    /// them: one entry per heartbeat, kept until a sweep 2 s later, held a whole burst's worth
    /// (48 bytes per server registered in the last 2 s, and its capacity for good, ~80 bytes
    /// per server after 10,000 registrations); a sweep walks the map instead, which holds
    /// only the challenges not answered yet. Hashed with a fast keyed hash (a random key per
    /// map): it holds at most [`MAX_PENDING`] entries, and SipHash, over these maps and the
    /// registry's, took a tenth of the face thread's time in a burst of registrations.
    pending: HashMap<SocketAddr, Pending, Fast>,
    /// Challenges in flight per source.
    pending_per_source: HashMap<SourceKey, usize, Fast>,
    heartbeats: SourceLimiter,
    flood: Option<SourceLimiter>,
    next_sweep: Instant,
}

/// Why an `infoResponse` does not register its server.
fn check_info(info: &InfoString) -> Result<(), DropReason> {
    for (k, v) in info.iter() {
        if k.len() > MAX_INFO_FIELD || v.len() > MAX_INFO_FIELD {
            return Err(DropReason::TooLarge);
        }
    }
    let int = |key: &[u8]| info.get_int(key);
    match (int(b"sv_maxclients"), int(b"protocol"), int(b"clients")) {
        (Some(max), Some(_), Some(_)) if max > 0 => Ok(()),
        _ => Err(DropReason::Malformed),
    }
}

/// The record info an `infoResponse` gives: name, map, gametype, players; the raw game name,
/// protocol and gametype kept as rules for the lists' filters.
fn info_of(info: &InfoString) -> PollInfo {
    let text = |key: &[u8]| info.get(key).map(plain_text).unwrap_or_default();
    // Borrowed when the bytes are UTF-8 (they nearly always are): no copy of each value
    // before the rules pack them.
    let raw = |key: &[u8]| info.get(key).map(String::from_utf8_lossy);
    let count = |key: &[u8]| {
        info.get_int(key)
            .and_then(|n| u32::try_from(n.max(0)).ok())
            .unwrap_or(0)
    };
    let gametype = raw(b"gametype").unwrap_or(Cow::Borrowed("0"));
    let rules = [
        ("protocol", raw(b"protocol").unwrap_or_default()),
        ("gametype", gametype.clone()),
    ]
    .into_iter()
    .chain(raw(b"gamename").map(|g| ("gamename", g)));
    PollInfo::from(PollFields {
        name: short(&text(b"hostname")),
        map: short(&text(b"mapname")),
        game_type: short(&gametype),
        num_players: count(b"clients"),
        max_players: count(b"sv_maxclients"),
        rules: Rules::new(rules),
        ..PollFields::default()
    })
}

/// A list request as sent.
#[derive(Debug, Clone, Copy)]
struct Query<'a> {
    ext: bool,
    game: Option<&'a Word>,
    protocol: i32,
    options: &'a [FilterOption],
}

/// What a list request asks for, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ListAsk {
    /// The game (lower case, as keys hold it), or `None`: any game of the table's anonymous
    /// games whose server uses the protocol.
    game: Option<String>,
    protocol: i32,
    gametype: Option<String>,
    empty: bool,
    full: bool,
    v4: bool,
    v6: bool,
    ext: bool,
}

impl ListAsk {
    fn cache_key(&self) -> Box<str> {
        format!(
            "{}|{}|{}|{}{}{}{}{}",
            self.game.as_deref().unwrap_or("\0"),
            self.protocol,
            self.gametype.as_deref().unwrap_or("\0"),
            u8::from(self.empty),
            u8::from(self.full),
            u8::from(self.v4),
            u8::from(self.v6),
            u8::from(self.ext)
        )
        .into()
    }

    fn matches(&self, r: &Record, anonymous: &[String]) -> bool {
        if r.face != Face::Quake3 || !r.is_listed() {
            return false;
        }
        let game = r.key.game.as_str();
        match &self.game {
            Some(g) if g != game => return false,
            None if !anonymous.iter().any(|a| a == game) => return false,
            _ => {}
        }
        let Some(info) = r.info.as_deref() else {
            return false;
        };
        let rules = info.rules();
        // `protocol` is what `infoResponse` says; once the poller has read `statusResponse`,
        // an ioquake3 server's rules say `com_protocol` instead (as `g_gametype` below).
        let protocol = rules
            .get("protocol")
            .or_else(|| rules.get("com_protocol"))
            .and_then(|p| p.trim().parse::<i64>().ok());
        if protocol != Some(i64::from(self.protocol)) {
            return false;
        }
        if let Some(want) = &self.gametype {
            let has = rules
                .get("gametype")
                .or_else(|| rules.get("g_gametype"))
                .unwrap_or("0");
            if has != want {
                return false;
            }
        }
        if !self.empty && info.num_players == 0 {
            return false;
        }
        if !self.full && info.num_players >= info.max_players {
            return false;
        }
        match r.key.addr {
            GameAddr::Ip(SocketAddr::V4(_)) => self.v4,
            GameAddr::Ip(SocketAddr::V6(_)) => self.v6,
            GameAddr::Host { .. } => false,
        }
    }
}

/// The list datagrams for `ask` in `view` (built once per snapshot and request kind).
fn list_datagrams(view: &Snapshot, ask: &ListAsk, anonymous: &[String]) -> Arc<[Bytes]> {
    let list = view.cached(("quake3", ask.cache_key()), |s| {
        // Straight from the records: a vector of the addresses took 32 bytes a server for a
        // moment (more as it grew), pages the allocator kept after the list was made.
        let addrs = s
            .listed()
            .iter()
            .filter(|r| ask.matches(r, anonymous))
            .filter_map(|r| match r.key.addr {
                GameAddr::Ip(a) => Some(a),
                GameAddr::Host { .. } => None,
            });
        ServerList::encode_datagrams(ask.ext, addrs)
            .into_iter()
            .map(Bytes::from)
            .collect::<Vec<_>>()
    });
    Arc::from(list.as_slice())
}

/// Whether `ip` is a loopback address (IPv4-mapped included).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// `from` with an IPv4-mapped address written as IPv4 (a dual-stack socket's view of an IPv4
/// sender), so a server has one key whichever socket it reached.
fn canonical(from: SocketAddr) -> SocketAddr {
    match from {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => from,
        },
        SocketAddr::V4(_) => from,
    }
}

impl Quake3Face {
    /// A face with `settings`, its challenges drawn from a generator seeded with `seed`, started
    /// at `now`.
    #[must_use]
    pub fn new(settings: Quake3Settings, seed: u64, now: Instant) -> Self {
        Self {
            heartbeats: SourceLimiter::new(settings.heartbeats, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            flood: settings
                .flood
                .map(|b| SourceLimiter::new(b, settings.max_tracked_sources)),
            settings,
            rng: SmallRng::seed_from_u64(seed),
            pending: HashMap::default(),
            pending_per_source: HashMap::default(),
            next_sweep: now + SWEEP,
        }
    }

    /// The games whose clients may leave the game name out (those with a heartbeat tag).
    fn anonymous(&self) -> Vec<String> {
        self.settings
            .games
            .iter()
            .filter(|g| g.heartbeat.is_some())
            .map(|g| g.name.to_ascii_lowercase())
            .collect()
    }

    fn forget(&mut self, addr: SocketAddr) -> Option<Pending> {
        let p = self.pending.remove(&addr)?;
        let source = SourceKey::of(addr.ip());
        if let Some(n) = self.pending_per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending_per_source.remove(&source);
            }
        }
        Some(p)
    }

    fn heartbeat(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, tag: &Word) {
        let tag = classify(&self.settings.games, tag.as_str());
        match tag {
            Tag::Flatline => return,
            Tag::Unknown => return cx.out.drop(DropReason::UnknownGame),
            Tag::Named | Tag::Game(_) => {}
        }
        if from.port() == 0 {
            return cx.out.drop(DropReason::PortZero);
        }
        if !self.settings.allow_loopback && is_loopback(from.ip()) {
            return cx.out.drop(DropReason::BadAddress);
        }
        if self.pending.contains_key(&from) {
            // Its challenge is in flight: a later heartbeat neither re-sends nor extends it.
            return;
        }
        let registry = &mut *cx.registry;
        if !self.heartbeats.allow_proven(from.ip(), cx.now, 1.0, |k| {
            registry.lock().count_of_source(k)
        }) {
            return cx.out.limited(DropReason::RateLimited, from.ip());
        }
        let source = SourceKey::of(from.ip());
        let (known, at_source, total) = {
            let reg = cx.registry.lock();
            let addr = GameAddr::Ip(from);
            let known = reg.at_addr(&addr).any(|r| r.face == Face::Quake3);
            (known, reg.count_of_source(source), reg.len())
        };
        if !known {
            let waiting = self.pending_per_source.get(&source).copied().unwrap_or(0);
            if at_source + waiting >= self.settings.max_per_source {
                return cx.out.drop(DropReason::SourceCap);
            }
            if total + self.pending.len() >= self.settings.max_servers {
                return cx.out.drop(DropReason::RecordCap);
            }
        }
        if self.pending.len() >= MAX_PENDING {
            return cx.out.drop(DropReason::Overload);
        }
        let mut random = [0u8; CHALLENGE_RANDOM_LEN];
        self.rng.fill_bytes(&mut random);
        let challenge = Challenge::new(random);
        cx.out.send(
            via,
            from,
            Bytes::from(challenge.getinfo()),
            ReplyKind::Control,
        );
        let until = cx.now + self.settings.pending_timeout;
        self.pending.insert(
            from,
            Pending {
                challenge,
                tag,
                until,
            },
        );
        *self.pending_per_source.entry(source).or_insert(0) += 1;
    }

    fn info_response(&mut self, cx: &mut Cx<'_>, from: SocketAddr, info: &InfoString) {
        let echoed = info.get(b"challenge");
        let Some(p) = self.pending.get(&from) else {
            return cx.out.drop(DropReason::UnknownServer);
        };
        if echoed != Some(p.challenge.as_bytes()) {
            cx.out.verifications_failed += 1;
            return cx.out.drop(DropReason::BadEcho);
        }
        let Some(p) = self.forget(from) else {
            return;
        };
        if let Err(why) = check_info(info) {
            cx.out.verifications_failed += 1;
            return cx.out.drop(why);
        }
        let game = match (info.get(b"gamename"), &p.tag) {
            (Some(g), tag) => {
                let usable = !g.is_empty()
                    && g.len() <= muster_core::registry::MAX_GAME_LEN
                    && g.iter().all(u8::is_ascii_graphic);
                let g = String::from_utf8_lossy(g).into_owned();
                match tag {
                    Tag::Game(bound) if *bound != g => None,
                    _ if usable => Some(g),
                    _ => None,
                }
            }
            (None, Tag::Game(bound)) => Some(bound.clone()),
            (None, _) => None,
        };
        let Some(game) = game else {
            cx.out.verifications_failed += 1;
            return cx.out.drop(DropReason::BadGame);
        };
        if !self.settings.policy.accepts(&game) {
            return cx.out.drop(DropReason::UnknownGame);
        }
        // One server is one record: the same address under another game is replaced.
        let out = cx.registry.lock().register_replacing_with_info(
            Registration {
                key: ServerKey::new(&game, GameAddr::Ip(from)),
                face: Face::Quake3,
                game_port: Some(from.port()),
                query_addr: Some(from),
                query_protocol: Some(Protocol::Quake3),
                source: SourceKey::of(from.ip()),
            },
            cx.wall,
            info_of(info),
        );
        cx.out.registered(out);
    }

    fn list(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, q: &Query<'_>) {
        let Query {
            ext,
            game,
            protocol,
            options,
        } = *q;
        if let Some(flood) = &mut self.flood
            && !flood.allow(from.ip(), cx.now, 1.0)
        {
            return cx.out.limited(DropReason::RateLimited, from.ip());
        }
        let props = match game {
            Some(g) => self.settings.games.iter().find(|p| p.name == g.as_str()),
            None => self
                .settings
                .games
                .iter()
                .find(|p| p.protocols.contains(&protocol)),
        };
        let game_name = game
            .map(|g| g.as_str().to_owned())
            .or_else(|| props.map(|p| p.name.clone()));
        if let Some(name) = &game_name
            && !self.settings.policy.accepts(name)
        {
            return cx.out.drop(DropReason::UnknownGame);
        }
        let has = |o: &FilterOption| options.contains(o);
        let (v4, v6) = match (ext, has(&FilterOption::Ipv4), has(&FilterOption::Ipv6)) {
            (false, _, _) => (true, false),
            (true, false, false) => (true, true),
            (true, a, b) => (a, b),
        };
        let ask = ListAsk {
            game: game_name.map(|g| g.to_ascii_lowercase()),
            protocol,
            gametype: options
                .iter()
                .find_map(FilterOption::gametype)
                .map(|g| String::from_utf8_lossy(g).into_owned()),
            empty: has(&FilterOption::Empty) || props.is_some_and(|p| p.send_empty),
            full: has(&FilterOption::Full) || props.is_some_and(|p| p.send_full),
            v4,
            v6,
            ext,
        };
        let datagrams = list_datagrams(cx.view, &ask, &self.anonymous());
        cx.out.lists += 1;
        cx.out.replies.push(Reply {
            via,
            to: from,
            datagrams: Datagrams::Many(datagrams),
            kind: ReplyKind::List,
        });
    }

    fn sweep(&mut self, now: Instant) {
        let per_source = &mut self.pending_per_source;
        self.pending.retain(|addr, p| {
            if p.until > now {
                return true;
            }
            let source = SourceKey::of(addr.ip());
            if let Some(n) = per_source.get_mut(&source) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    per_source.remove(&source);
                }
            }
            false
        });
        // A burst's room goes back once it is over.
        shrink(&mut self.pending);
        shrink(&mut self.pending_per_source);
        self.heartbeats.prune(now);
        if let Some(f) = &mut self.flood {
            f.prune(now);
        }
        self.next_sweep = now + SWEEP;
    }
}

/// The hasher of the face's own maps.
type Fast = foldhash::fast::RandomState;

impl UdpMachine for Quake3Face {
    fn name(&self) -> &'static str {
        "quake3"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
        if data.len() > MAX_DATAGRAM {
            return cx.out.drop(DropReason::TooLarge);
        }
        let Ok(packet) = Packet::decode(data) else {
            return cx.out.drop(DropReason::Malformed);
        };
        let from = canonical(from);
        match packet {
            Packet::Heartbeat { tag } => self.heartbeat(cx, via, from, &tag),
            Packet::InfoResponse { info } => self.info_response(cx, from, &info),
            Packet::GetServers {
                game,
                protocol,
                options,
            } => {
                let q = Query {
                    ext: false,
                    game: game.as_ref(),
                    protocol,
                    options: &options,
                };
                self.list(cx, via, from, &q);
            }
            Packet::GetServersExt {
                game,
                protocol,
                options,
            } => {
                let q = Query {
                    ext: true,
                    game: Some(&game),
                    protocol,
                    options: &options,
                };
                self.list(cx, via, from, &q);
            }
            Packet::GetInfo { .. }
            | Packet::GetStatus { .. }
            | Packet::StatusResponse { .. }
            | Packet::ServerList(_) => cx.out.drop(DropReason::Unexpected),
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.sweep(cx.now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_sweep)
    }

    fn asks_for_list(&self, data: &[u8]) -> bool {
        Packet::asks_for_list(data)
    }
}

#[cfg(test)]
mod tests;

/// The Quake III face's entry in the face table.
pub const FACE: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "quake3",
    summary: "Quake III / DarkPlaces master (dpmaster's protocol)",
    contract: crate::face::Contract::Datagrams,
    default_port: muster_core::config::ports::QUAKE3,
    bind: |addr| crate::face::bind_one_udp(FACE.name, addr),
    serve: |start, sockets| {
        let face = Quake3Face::new(
            start.settings.get::<Quake3Settings>(),
            rand::random(),
            muster_core::clock::now(),
        );
        start.run_udp(face, crate::face::udp_sockets(FACE.name, sockets))
    },
    register_hint: |a| {
        let local = if a.ip().is_loopback() {
            " (servers on this machine are refused unless [quake3] allow_loopback = true, as \
             dpmaster refuses them)"
        } else {
            ""
        };
        format!(
            "ioquake3/OpenArena: +set sv_master1 \"{a}\"; DarkPlaces/Xonotic: sv_masterextra1 \"{a}\"{local}"
        )
    },
};
