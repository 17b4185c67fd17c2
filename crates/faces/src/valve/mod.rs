//! The Half-Life / Xash3D master face, compatible with FWGS's xash3d-master: a game server
//! asks `q ff [number]` and gets a challenge; a heartbeat (`0\n\k\v…`) that carries that
//! challenge, values of the right types and a version the face accepts registers (or
//! refreshes) the server under its game directory; clients ask with the Valve master query
//! (`1` region last-address filter) and get the servers of that region the filter selects.
//!
//! A pure [`UdpMachine`]. Challenges are stateless, as xash3d-master's are: a keyed hash of the
//! sender's address and the current time window, so nothing is kept per server before it
//! proves its address; a heartbeat carrying the challenge of this window or the last one is
//! good. What is kept is bounded: the per-source bucket, and the heartbeat facts of registered
//! servers (region, flags, type, version: what the filters see and A2S polls do not give),
//! pruned with the registry.
//!
//! Lists: a request whose filter names the client's version (`\clver\`, every Xash3D client)
//! gets every page at once, each closed by the zero address, as xash3d-master answers; any
//! other request gets the one page after its last address (Valve's paging). Both go through the
//! list byte budget every UDP list face shares (applied by the runner), as one reply.
//!
//! `docs/protocols/valve-master.md` §6 says where the face differs from xash3d-master.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, SourceKey, SourceLimiter};
use muster_proto::valve_master::filter::{Condition, Filter, Semantics, ServerFacts};
use muster_proto::valve_master::packet::{
    ChallengeReply, ListRequest, Region, ServerPacket, put_entry,
};
use muster_proto::valve_master::serve::{
    Announcement, MAX_GAMEDIR_LEN, Version, every_page, list_order, page_after,
};
use muster_proto::valve_master::{MAX_DATAGRAM, decode_text};
use muster_proto::wire::DecodeError;
use rand::rngs::SmallRng;
use rand::{RngCore as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

use crate::face::shrink;
use crate::runtime::udp::{Cx, Datagrams, Reply, ReplyKind, UdpMachine};
use muster_core::config::{HumanDuration, LimitsConfig};
use muster_core::drops::DropReason;
use muster_core::registry::{
    Face, GameAddr, PollFields, PollInfo, Record, Registration, Rules, ServerKey, short,
};
use muster_core::views::Snapshot;

/// How often the face prunes its buckets and the facts of servers that left the registry.
const SWEEP: Duration = Duration::from_secs(30);

/// The `[valve]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValveConfig {
    /// Accept servers on loopback addresses (refused unless told: a loopback address listed
    /// to the world reaches no one).
    pub allow_loopback: bool,
    /// Heartbeats of servers older than this version are ignored (xash3d-master's
    /// `min-version`; `"0"` takes every server, Half-Life's own included).
    pub min_version: String,
    /// A challenge is good for this long, and the one before it for as long again
    /// (xash3d-master's `challenge-window`).
    pub challenge_window: HumanDuration,
}

impl Default for ValveConfig {
    fn default() -> Self {
        Self {
            allow_loopback: false,
            min_version: "0.21".to_owned(),
            challenge_window: HumanDuration(Duration::from_secs(60)),
        }
    }
}

impl ValveConfig {
    /// `min_version` read, or `None` when it is not a version.
    #[must_use]
    pub fn min_version(&self) -> Option<Version> {
        Version::parse(self.min_version.as_bytes())
    }
}

/// The knobs of the face.
#[derive(Debug, Clone, PartialEq)]
pub struct ValveSettings {
    /// Challenge requests and heartbeats per source address (burst and refill).
    pub heartbeats: BucketConfig,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Buckets grow by one budget per server the source registered, up to this many.
    pub proven_servers_max: u32,
    /// See [`ValveConfig::allow_loopback`].
    pub allow_loopback: bool,
    /// See [`ValveConfig::min_version`].
    pub min_version: Version,
    /// See [`ValveConfig::challenge_window`] (at least one second).
    pub challenge_window: Duration,
}

impl Default for ValveSettings {
    fn default() -> Self {
        Self::new(&ValveConfig::default(), &LimitsConfig::default())
    }
}

impl ValveSettings {
    /// The face's settings from its section and the shared limits (a `min_version` that does
    /// not read is 0.21; the daemon's config check refuses it first).
    #[must_use]
    pub fn new(c: &ValveConfig, l: &LimitsConfig) -> Self {
        Self {
            heartbeats: BucketConfig::one_every(l.heartbeat_burst, l.heartbeat_refill.0),
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
            allow_loopback: c.allow_loopback,
            min_version: c.min_version().unwrap_or(Version::new(0, 21)),
            challenge_window: c.challenge_window.0.max(Duration::from_secs(1)),
        }
    }
}

/// What a heartbeat said that the filters look at and an A2S poll does not replace, in
/// 9 bytes (the four flags in one byte): kept for every registered server, and copied into
/// every list entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Facts {
    region: Region,
    protocol: u8,
    server_type: u8,
    os: u8,
    bots: u8,
    /// [`Facts::PASSWORD`], [`Facts::SECURE`], [`Facts::LAN`], [`Facts::NAT`].
    flags: u8,
    version: Version,
}

const _: () = assert!(size_of::<Facts>() == 9);

impl Facts {
    const PASSWORD: u8 = 1;
    const SECURE: u8 = 2;
    const LAN: u8 = 4;
    const NAT: u8 = 8;

    /// What the lists assume of a server whose heartbeat the face did not see (restored after
    /// a restart, learned from another master): the region everywhere, no flags, the protocol
    /// its info names.
    fn unknown(info: Option<&PollInfo>) -> Self {
        let protocol = info
            .and_then(|i| {
                i.rules()
                    .get("protocol")
                    .map(str::trim)
                    .map(str::parse::<u8>)
            })
            .and_then(Result::ok)
            .unwrap_or(0);
        Self {
            region: Region::WORLD,
            protocol,
            server_type: 0,
            os: 0,
            bots: 0,
            flags: 0,
            version: Version::default(),
        }
    }

    fn of(a: &Announcement) -> Self {
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        Self {
            region: a.region,
            protocol: a.protocol,
            server_type: a.server_type,
            os: a.os,
            bots: a.bots,
            flags: flag(a.password, Self::PASSWORD)
                | flag(a.secure, Self::SECURE)
                | flag(a.lan, Self::LAN)
                | flag(a.nat, Self::NAT),
            version: a.version,
        }
    }

    fn has(self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// The heartbeat facts of registered servers by address. An IPv4 address and port are keyed
/// by their 6 bytes, so an entry takes 15 bytes (a `SocketAddr` key alone took 32); IPv6
/// addresses keep their whole address (scope included) as the registry's key does.
#[derive(Debug, Default)]
struct FactsByAddr {
    v4: HashMap<[u8; 6], Facts, foldhash::fast::RandomState>,
    v6: HashMap<SocketAddrV6, Facts, foldhash::fast::RandomState>,
}

/// The 6 bytes keying an IPv4 address and port.
fn v4_key(a: SocketAddrV4) -> [u8; 6] {
    let [a0, a1, a2, a3] = a.ip().octets();
    let [p0, p1] = a.port().to_be_bytes();
    [a0, a1, a2, a3, p0, p1]
}

/// The address [`v4_key`] keyed.
fn v4_addr(k: [u8; 6]) -> SocketAddr {
    let [a0, a1, a2, a3, p0, p1] = k;
    SocketAddr::from(([a0, a1, a2, a3], u16::from_be_bytes([p0, p1])))
}

impl FactsByAddr {
    fn insert(&mut self, addr: SocketAddr, f: Facts) {
        match addr {
            SocketAddr::V4(a) => self.v4.insert(v4_key(a), f),
            SocketAddr::V6(a) => self.v6.insert(a, f),
        };
    }

    fn get(&self, addr: SocketAddr) -> Option<Facts> {
        match addr {
            SocketAddr::V4(a) => self.v4.get(&v4_key(a)).copied(),
            SocketAddr::V6(a) => self.v6.get(&a).copied(),
        }
    }

    fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the facts of the addresses `keep` says, and gives memory back when most left.
    fn retain(&mut self, mut keep: impl FnMut(SocketAddr) -> bool) {
        self.v4.retain(|k, _| keep(v4_addr(*k)));
        self.v6.retain(|a, _| keep(SocketAddr::V6(*a)));
        shrink(&mut self.v4);
        shrink(&mut self.v6);
    }
}

/// One listed server as the lists see it, in 24 bytes with nothing allocated: where it is in
/// the snapshot's listed records (the snapshots that share a cached value list the same
/// records in the same order), its game among the snapshot's ([`Entries::games`]), its IPv4
/// address and port, and its heartbeat facts. A list reads the record itself only for an
/// IPv6 address or a filter on players, slots, map or name
/// ([`Filter::reads_play`]): the usual list is a pass over these entries alone.
#[derive(Debug, Clone, Copy)]
struct Entry {
    index: u32,
    /// [`Entry::NO_GAME`]: the record's own.
    game: u16,
    /// [`v4_key`] of the address; zero for an IPv6 one (port 0 is never registered).
    addr: [u8; 6],
    facts: Facts,
}

const _: () = assert!(size_of::<Entry>() == 24);

impl Entry {
    /// The game is not in [`Entries::games`] (more games than it holds).
    const NO_GAME: u16 = u16::MAX;

    /// The IPv4 address, when the entry holds it.
    fn v4(&self) -> Option<SocketAddr> {
        (self.addr != [0; 6]).then(|| v4_addr(self.addr))
    }
}

/// The listed servers of one family, in list order, and their games.
#[derive(Debug, Default)]
struct Entries {
    list: Vec<Entry>,
    /// Every game directory of the list, once ([`Entry::game`] indexes it).
    games: Vec<Box<str>>,
}

/// `v` as text, in `buf` (`255.255.255` at most).
fn version_text(v: Version, buf: &mut [u8; 12]) -> &[u8] {
    use std::io::Write as _;
    let room = {
        let mut w: &mut [u8] = &mut buf[..];
        // 11 bytes at most: never fails.
        write!(w, "{v}").ok();
        w.len()
    };
    let end = buf.len() - room;
    buf.get(..end).unwrap_or_default()
}

/// The Half-Life / Xash3D master face. See the module docs.
#[derive(Debug)]
pub struct ValveFace {
    settings: ValveSettings,
    /// The secret the challenges are keyed with.
    salt: [u8; 16],
    /// Time windows count from here.
    epoch: Instant,
    limiter: SourceLimiter,
    facts: FactsByAddr,
    next_sweep: Instant,
}

/// Whether `ip` is a loopback address (IPv4-mapped included).
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// `from` with an IPv4-mapped address written as IPv4, so a server has one key whichever
/// socket it reached.
fn canonical(from: SocketAddr) -> SocketAddr {
    SocketAddr::new(from.ip().to_canonical(), from.port())
}

/// The record info a heartbeat gives, shown until the first A2S poll answers.
fn info_of(a: &Announcement) -> PollInfo {
    let text = |b: &[u8]| decode_text(b);
    let rules = [
        ("protocol", a.protocol.to_string()),
        ("gamedir", text(&a.gamedir)),
        ("version", a.version.to_string()),
    ];
    PollInfo::from(PollFields {
        map: short(&text(&a.map)),
        num_players: u32::from(a.players),
        max_players: u32::from(a.max),
        rules: Rules::new(rules),
        ..PollFields::default()
    })
}

/// The version the client names in `\clver\`, if it names one.
fn client_version(filter: &Filter) -> Option<Option<Version>> {
    let found = filter.conditions.iter().find_map(|c| match c {
        Condition::Other(k, v) if k.eq_ignore_ascii_case(b"clver") => Some(v),
        _ => None,
    })?;
    Some(Version::parse(found))
}

/// The listed servers of the face in `view` of one family, with the facts the filters look
/// at, in list order: built once per snapshot and family.
fn entries(view: &Snapshot, facts: &FactsByAddr, ipv6: bool) -> Arc<Entries> {
    view.cached(("valve", if ipv6 { "v6" } else { "v4" }.into()), |s| {
        let listed = s.listed();
        let addr_of = |r: &Record| match r.key.addr {
            GameAddr::Ip(a) if r.face == Face::Valve && r.is_listed() && a.is_ipv6() == ipv6 => {
                Some(a)
            }
            _ => None,
        };
        let count = listed.iter().filter(|r| addr_of(r).is_some()).count();
        let mut out = Entries {
            list: Vec::with_capacity(count),
            games: Vec::new(),
        };
        let mut game_ids: HashMap<&str, u16> = HashMap::new();
        for (i, r) in listed.iter().enumerate() {
            let (Some(addr), Ok(index)) = (addr_of(r), u32::try_from(i)) else {
                continue;
            };
            let name = r.key.game.as_str();
            let game = match game_ids.get(name) {
                Some(&id) => id,
                None => match u16::try_from(out.games.len()) {
                    Ok(id) if id < Entry::NO_GAME => {
                        game_ids.insert(name, id);
                        out.games.push(name.into());
                        id
                    }
                    _ => Entry::NO_GAME,
                },
            };
            out.list.push(Entry {
                index,
                game,
                addr: match addr {
                    SocketAddr::V4(a) => v4_key(a),
                    SocketAddr::V6(_) => [0; 6],
                },
                facts: facts
                    .get(addr)
                    .unwrap_or_else(|| Facts::unknown(r.info.as_deref())),
            });
        }
        let at = |e: &Entry| listed.get(e.index as usize).and_then(|r| addr_of(r));
        out.list.sort_by(|a, b| match (at(a), at(b)) {
            (Some(a), Some(b)) => list_order(&a, &b),
            (a, b) => a.is_some().cmp(&b.is_some()),
        });
        out
    })
}

/// What a list request asks besides its filter.
#[derive(Debug, Clone, Copy)]
struct Ask {
    region: Region,
    /// A client older than 0.20 (`\clver\`): protocol 48 servers only.
    old_client: bool,
    ipv6: bool,
}

/// The listed servers of `view` that `filter` and `ask` choose, in list order, packed as the
/// pages carry them ([`put_entry`]): 6 bytes a server of IPv4, where a vector of addresses
/// took 32 (and more as it grew), pages the allocator kept after every list.
fn choose(view: &Snapshot, facts: &FactsByAddr, filter: &Filter, ask: Ask) -> Box<[u8]> {
    let all = entries(view, facts, ask.ipv6);
    let listed = view.listed();
    let play = filter.reads_play();
    let mut text = [0u8; 12];
    let mut text_of: Option<(Version, usize)> = None;
    let mut chosen: Vec<u8> = Vec::new();
    for e in &all.list {
        let f = e.facts;
        if f.region != ask.region || (ask.old_client && f.protocol != 48) {
            continue;
        }
        // Not read yet: only the IPv6 addresses, games beyond the table and filters on
        // play need the record itself.
        let rec = listed.get(e.index as usize);
        let addr = match (e.v4(), rec.map(|r| &r.key.addr)) {
            (Some(a), _) => a,
            (None, Some(GameAddr::Ip(a))) => *a,
            _ => continue,
        };
        let gamedir = match all.games.get(usize::from(e.game)) {
            Some(g) => g.as_bytes(),
            None => rec.map_or(&b""[..], |r| r.key.game.as_bytes()),
        };
        let info = if play {
            rec.and_then(|r| r.info.as_deref())
        } else {
            None
        };
        // The version's text, written again only when it differs from the last server's
        // (most servers of a list run the same one).
        let len = match text_of {
            Some((v, len)) if v == f.version => len,
            _ => {
                let len = version_text(f.version, &mut text).len();
                text_of = Some((f.version, len));
                len
            }
        };
        let server = ServerFacts {
            addr: Some(addr),
            dedicated: f.server_type == b'd',
            secure: f.has(Facts::SECURE),
            password: f.has(Facts::PASSWORD),
            linux: f.os == b'l',
            proxy: f.server_type == b'p',
            nat: f.has(Facts::NAT),
            lan: f.has(Facts::LAN),
            players: info.map_or(0, |i| i.num_players),
            max_players: info.map_or(0, |i| i.max_players),
            bots: u32::from(f.bots),
            gamedir,
            map: info.map_or(&b""[..], |i| i.map().as_bytes()),
            protocol: Some(u32::from(f.protocol)),
            app_id: None,
            name: info.map_or(&b""[..], |i| i.name().as_bytes()),
            version: text.get(..len).unwrap_or_default(),
        };
        if filter.matches(&server, Semantics::Xash) {
            put_entry(&mut chosen, addr);
        }
    }
    chosen.into_boxed_slice()
}

/// A list reply's datagrams, shared.
fn pages(pages: Vec<Vec<u8>>) -> Arc<[Bytes]> {
    pages.into_iter().map(Bytes::from).collect()
}

impl ValveFace {
    /// A face with `settings`, its challenge key drawn from a generator seeded with `seed`,
    /// started at `now`.
    #[must_use]
    pub fn new(settings: ValveSettings, seed: u64, now: Instant) -> Self {
        let mut salt = [0u8; 16];
        SmallRng::seed_from_u64(seed).fill_bytes(&mut salt);
        Self {
            limiter: SourceLimiter::new(settings.heartbeats, settings.max_tracked_sources)
                .with_growth(settings.proven_servers_max),
            settings,
            salt,
            epoch: now,
            facts: FactsByAddr::default(),
            next_sweep: now + SWEEP,
        }
    }

    fn window(&self, now: Instant) -> u64 {
        let w = self.settings.challenge_window.as_millis().max(1);
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis() / w).unwrap_or(0)
    }

    /// The challenge of `addr` in time window `window`.
    fn challenge(&self, addr: SocketAddr, window: u64) -> u32 {
        // SipHash with fixed keys, over the secret salt first: a keyed hash whose outputs
        // tell nothing of the salt.
        let mut h =
            std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().build_hasher();
        self.salt.hash(&mut h);
        addr.hash(&mut h);
        window.hash(&mut h);
        let v = h.finish();
        // The low half; truncation intended.
        #[allow(clippy::cast_possible_truncation)]
        let low = v as u32;
        low
    }

    fn challenge_ok(&self, addr: SocketAddr, echoed: u32, now: Instant) -> bool {
        let w = self.window(now);
        self.challenge(addr, w) == echoed
            || w.checked_sub(1)
                .is_some_and(|p| self.challenge(addr, p) == echoed)
    }

    /// The checks every datagram of a game server goes through; `false` when it was dropped.
    fn admit_server(&mut self, cx: &mut Cx<'_>, from: SocketAddr) -> bool {
        if from.port() == 0 {
            cx.out.drop(DropReason::PortZero);
            return false;
        }
        if !self.settings.allow_loopback && is_loopback(from.ip()) {
            cx.out.drop(DropReason::BadAddress);
            return false;
        }
        let registry = &mut *cx.registry;
        if !self.limiter.allow_proven(from.ip(), cx.now, 1.0, |k| {
            registry.lock().count_of_source(k)
        }) {
            cx.out.limited(DropReason::RateLimited, from.ip());
            return false;
        }
        true
    }

    fn challenge_request(
        &mut self,
        cx: &mut Cx<'_>,
        via: usize,
        from: SocketAddr,
        server_challenge: Option<u32>,
    ) {
        if !self.admit_server(cx, from) {
            return;
        }
        let reply = ChallengeReply {
            challenge: self.challenge(from, self.window(cx.now)),
            server_challenge,
        };
        cx.out.send(via, from, reply.encode(), ReplyKind::Control);
    }

    fn heartbeat(
        &mut self,
        cx: &mut Cx<'_>,
        from: SocketAddr,
        hb: &muster_proto::valve_master::Heartbeat,
    ) {
        if !self.admit_server(cx, from) {
            return;
        }
        let Ok(a) = Announcement::read(hb) else {
            return cx.out.drop(DropReason::Malformed);
        };
        if !self.challenge_ok(from, a.challenge, cx.now) {
            cx.out.verifications_failed += 1;
            return cx.out.drop(DropReason::BadEcho);
        }
        if a.version < self.settings.min_version {
            return cx.out.drop(DropReason::WrongVersion);
        }
        let usable = !a.gamedir.is_empty()
            && a.gamedir.len() <= MAX_GAMEDIR_LEN.min(muster_core::registry::MAX_GAME_LEN)
            && a.gamedir.iter().all(u8::is_ascii_graphic);
        if !usable {
            cx.out.verifications_failed += 1;
            return cx.out.drop(DropReason::BadGame);
        }
        let game = String::from_utf8_lossy(&a.gamedir);
        // One server is one record: the same address under another game is replaced.
        let out = cx.registry.lock().register_replacing_with_info(
            Registration {
                key: ServerKey::new(&game, GameAddr::Ip(from)),
                face: Face::Valve,
                game_port: Some(from.port()),
                query_addr: Some(from),
                query_protocol: Some(Protocol::A2s),
                source: SourceKey::of(from.ip()),
            },
            cx.wall,
            info_of(&a),
        );
        cx.out.registered(out);
        if out.is_listed() {
            self.facts.insert(from, Facts::of(&a));
        }
    }

    fn list(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
        let Ok(req) = ListRequest::decode(data) else {
            return cx.out.drop(DropReason::Malformed);
        };
        let Ok(filter) = Filter::parse(&req.filter) else {
            return cx.out.drop(DropReason::Malformed);
        };
        let clver = client_version(&filter);
        if matches!(clver, Some(None)) {
            return cx.out.drop(DropReason::Malformed);
        }
        let old_client = clver.flatten().is_some_and(|v| v < Version::new(0, 20));
        let ipv6 = from.is_ipv6();
        let ask = Ask {
            region: req.region,
            old_client,
            ipv6,
        };
        // A filter that reads only the entries chooses what it chose for the last request
        // like it, as long as the entries last (the snapshot's cache), so the choice is cached
        // under the request's conditions: as the reply's pages when there is no `\key\` to
        // echo, else packed as the wire packs addresses. Either is about as large as a reply,
        // since any request's filter can make an entry (the cache holds a bounded number). A
        // filter on play (players, map, name) reads the records, whose poll info changes
        // without a new cache, so it is chosen anew each time.
        let cache_key = (!filter.reads_play()).then(|| {
            format!(
                "{:?}:{}:{}:{:?}",
                req.region,
                u8::from(old_client),
                u8::from(ipv6),
                filter.conditions
            )
            .into_boxed_str()
        });
        let facts = &self.facts;
        let datagrams: Arc<[Bytes]> = match (&cache_key, clver.is_some(), filter.key) {
            (Some(k), true, None) => {
                let cached = cx.view.cached(("valve-pages", k.clone()), |s| {
                    pages(every_page(&choose(s, facts, &filter, ask), None, ipv6))
                });
                Arc::clone(&cached)
            }
            (_, xash, key) => {
                let chosen = match &cache_key {
                    Some(k) => Arc::clone(&cx.view.cached(("valve-chosen", k.clone()), |s| {
                        choose(s, facts, &filter, ask)
                    })),
                    None => Arc::from(choose(cx.view, facts, &filter, ask)),
                };
                if xash {
                    pages(every_page(&chosen, key, ipv6))
                } else {
                    Arc::from([Bytes::from(page_after(&chosen, req.last, key, ipv6))])
                }
            }
        };
        cx.out.lists += 1;
        cx.out.replies.push(Reply {
            via,
            to: from,
            datagrams: Datagrams::Many(datagrams),
            kind: ReplyKind::List,
        });
    }

    fn sweep(&mut self, cx: &mut Cx<'_>) {
        self.limiter.prune(cx.now);
        if !self.facts.is_empty() {
            let reg = cx.registry.lock();
            self.facts.retain(|addr| {
                reg.at_addr(&GameAddr::Ip(addr))
                    .any(|r| r.face == Face::Valve)
            });
        }
        self.next_sweep = cx.now + SWEEP;
    }
}

impl UdpMachine for ValveFace {
    fn name(&self) -> &'static str {
        "valve"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
        if data.len() > MAX_DATAGRAM {
            return cx.out.drop(DropReason::TooLarge);
        }
        let from = canonical(from);
        if self.asks_for_list(data) {
            return self.list(cx, via, from, data);
        }
        match ServerPacket::decode(data) {
            Ok(ServerPacket::Challenge(c)) => {
                self.challenge_request(cx, via, from, c.server_challenge);
            }
            Ok(ServerPacket::Heartbeat(hb)) => self.heartbeat(cx, from, &hb),
            // Anyone may send it with a server's address: ignored, as xash3d-master ignores
            // it; the server expires.
            Ok(ServerPacket::Remove) => {}
            Err(DecodeError::TooLarge(_)) => cx.out.drop(DropReason::TooLarge),
            Err(_) => cx.out.drop(DropReason::Malformed),
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.sweep(cx);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_sweep)
    }

    fn asks_for_list(&self, data: &[u8]) -> bool {
        data.first() == Some(&ListRequest::TAG)
    }
}

#[cfg(test)]
mod tests;

/// The Half-Life / Xash3D face's entry in the face table.
pub const FACE: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "valve",
    summary: "Half-Life / Xash3D master (xash3d-master's protocol, Valve master query)",
    contract: crate::face::Contract::Datagrams,
    default_port: muster_core::config::ports::VALVE,
    bind: |addr| crate::face::bind_one_udp(FACE.name, addr),
    serve: |start, sockets| {
        let face = ValveFace::new(
            start.settings.get::<ValveSettings>(),
            rand::random(),
            muster_core::clock::now(),
        );
        start.run_udp(face, crate::face::udp_sockets(FACE.name, sockets))
    },
    register_hint: |a| {
        let local = if a.ip().is_loopback() {
            " (servers on this machine are refused unless [valve] allow_loopback = true)"
        } else {
            ""
        };
        format!(
            "Xash3D FWGS: a line `master {a}` in xashcomm.lst of the game directory, servers with \
             public 1 (heartbeats below version 0.21 are ignored unless [valve] min_version \
             says){local}"
        )
    },
};
