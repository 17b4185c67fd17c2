//! The one registry behind every master face: a plain struct, no I/O, no clock.
//!
//! Every face (GameAgent, GameSpy, Teeworlds UDP, DDNet HTTP, management server) turns its
//! messages into calls on [`Registry`]; every list (GameAgent `s`, GameSpy lists, the UT2003
//! text list, `servers.json`, `msRQueryGameServers`, the HTTP API) reads from it through a
//! [`View`], whose [`View::can_represent`] says which records that face can show.
//!
//! # Time
//! Time is an argument of type [`Timestamp`]: unix time in **milliseconds**, passed in by the
//! caller (the daemon reads the wall clock once per operation; tests pass literals). Wall-clock
//! time rather than `Instant` because records are persisted and must still expire correctly
//! after a restart. A clock that steps backwards only delays expiry; it never panics.
//!
//! # Keys and addresses
//! A record is keyed by [`ServerKey`]: the game name (ASCII lower-cased), the address the face
//! registered it under, and an `instance` number. The address is the game address for
//! GameAgent (A, P − 1), Teeworlds and DDNet; for GameSpy it is the heartbeat address (source IP,
//! heartbeat query port), because a heartbeat does not carry the game port — that is learned
//! by polling and kept in [`Record::game_port`]. `instance` is 0 except for the management
//! face, which passes its connection id, because two connections may register the same
//! address and both are listed (`management-server.md` §7.2).
//!
//! # States
//! `Pending` (registered, not yet proven), `Verified` (listed), `Delisted` (failed a
//! re-verification: kept so that heartbeats keep it alive, but not listed until verified again).
//! Only verified records appear in any list.
//!
//! # Expiry
//! A pending record expires [`RegistryConfig::pending_lifetime`] after it was added or last
//! re-challenged ([`Registry::add`] refreshes it). A verified or de-listed record expires its
//! lifetime after the later of its last valid heartbeat and its last successful poll. The
//! lifetime is [`RegistryConfig::game_lifetimes`] for the game if set, else the face's entry of
//! [`RegistryConfig::face_lifetimes`]; a face without an entry (the management server by
//! default) never expires by time: its records leave when their connection closes.
//!
//! # What this does not do
//! No challenges, no token buckets, no persistence: faces own verification exchanges,
//! `muster_proto::limit` owns rate limits, [`crate::store`] owns persistence. The per-source
//! cap here counts records (pending and verified together), not requests.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use muster_proto::limit::SourceKey;
use muster_proto::{Protocol, ServerInfo};

/// Default cap on records per source (IPv4 address / IPv6 /64), pending and verified together.
pub const DEFAULT_MAX_PER_SOURCE: usize = 64;
/// Default cap on pending records in total.
pub const DEFAULT_MAX_PENDING: usize = 10_000;
/// Default life of a pending record (`gameagent.md` §8.3.5, `gamespy-master.md` §14).
pub const DEFAULT_PENDING_LIFETIME: Duration = Duration::from_secs(30);
/// Longest game name accepted, in bytes.
pub const MAX_GAME_LEN: usize = 64;
/// Longest host name accepted in a [`GameAddr::Host`] (DNS limit).
pub const MAX_HOST_LEN: usize = 253;
/// Most players kept from one poll.
pub const MAX_POLL_PLAYERS: usize = 256;
/// Most rules kept from one poll.
pub const MAX_POLL_RULES: usize = 256;
/// Longest text kept for a name, map, game type, player name, rule key or value (in chars).
pub const MAX_POLL_TEXT: usize = 256;
/// Most records one [`ListQuery`] page returns.
pub const MAX_PER_PAGE: usize = 500;
/// Records per page when the query does not say.
pub const DEFAULT_PER_PAGE: usize = 100;
/// Largest [`Record::face_data`] kept, in bytes (a DDNet register body is at most 32 KiB).
pub const MAX_FACE_DATA: usize = 64 * 1024;

/// Unix time in milliseconds, passed in by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// `secs` seconds after the unix epoch.
    #[must_use]
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1000))
    }

    /// Whole seconds since the unix epoch.
    #[must_use]
    pub const fn as_secs(self) -> u64 {
        self.0 / 1000
    }

    /// This time plus `d`, saturating.
    #[must_use]
    pub fn plus(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(ms))
    }

    /// The wall clock now. The only clock read of the crate's pure parts' callers; the
    /// registry itself never calls it.
    #[must_use]
    pub fn now() -> Self {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self(ms)
    }
}

/// The face a record was registered through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Face {
    /// Serious Sam GameAgent master, UDP 9005.
    GameAgent,
    /// GameSpy master heartbeats, UDP 27900.
    GameSpy,
    /// Teeworlds 0.7 UDP master, 8283.
    Teeworlds07,
    /// Teeworlds 0.6 UDP master, 8300.
    Teeworlds06,
    /// DDNet HTTP register.
    DdnetHttp,
    /// Management server, TCP 51963.
    Mgmt,
}

impl Face {
    /// Every face, in a fixed order (for metrics).
    pub const ALL: [Self; 6] = [
        Self::GameAgent,
        Self::GameSpy,
        Self::Teeworlds07,
        Self::Teeworlds06,
        Self::DdnetHttp,
        Self::Mgmt,
    ];

    /// The stable name used in the store, config, metrics and the HTTP API.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::GameAgent => "gameagent",
            Self::GameSpy => "gamespy",
            Self::Teeworlds07 => "teeworlds07",
            Self::Teeworlds06 => "teeworlds06",
            Self::DdnetHttp => "ddnet",
            Self::Mgmt => "mgmt",
        }
    }

    /// The protocol family: `gameagent`, `gamespy`, `teeworlds` or `mgmt`.
    #[must_use]
    pub const fn family(self) -> &'static str {
        match self {
            Self::GameAgent => "gameagent",
            Self::GameSpy => "gamespy",
            Self::Teeworlds07 | Self::Teeworlds06 | Self::DdnetHttp => "teeworlds",
            Self::Mgmt => "mgmt",
        }
    }

    /// The face called `name` (as [`Face::name`] spells it).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Name of a query protocol, as stored (`muster_proto::Protocol::name`).
#[must_use]
pub fn protocol_from_name(name: &str) -> Option<Protocol> {
    [
        Protocol::GameAgent,
        Protocol::GameSpy1,
        Protocol::Unreal2,
        Protocol::Teeworlds,
    ]
    .into_iter()
    .find(|p| p.name() == name)
}

/// The address a record is registered under: an IP socket address, or a host name as a
/// management client sent it (stored exactly as received, never resolved).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GameAddr {
    /// An IP address and port.
    Ip(SocketAddr),
    /// A host name (or an address spelled in a form kept verbatim) and port.
    Host {
        /// The name as received.
        host: String,
        /// The port.
        port: u16,
    },
}

impl GameAddr {
    /// The IP address, if this is one.
    #[must_use]
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Self::Ip(a) => Some(a.ip()),
            Self::Host { .. } => None,
        }
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        match self {
            Self::Ip(a) => a.port(),
            Self::Host { port, .. } => *port,
        }
    }

    /// Parses `ip:port`, `[v6]:port` or `host:port` (the form [`fmt::Display`] writes).
    /// `None` when there is no port or the host is empty or too long.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Some(Self::Ip(a));
        }
        let (host, port) = s.rsplit_once(':')?;
        let port = port.parse().ok()?;
        if host.is_empty() || host.len() > MAX_HOST_LEN || host.contains(':') {
            return None;
        }
        Some(Self::Host {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for GameAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(a) => a.fmt(f),
            Self::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// What identifies a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerKey {
    /// Game name, ASCII lower-cased by [`ServerKey::new`].
    pub game: String,
    /// The address the face registered.
    pub addr: GameAddr,
    /// 0, or the management face's connection id.
    pub instance: u64,
}

impl ServerKey {
    /// A key with instance 0; the game name is ASCII lower-cased.
    #[must_use]
    pub fn new(game: &str, addr: GameAddr) -> Self {
        Self {
            game: game.to_ascii_lowercase(),
            addr,
            instance: 0,
        }
    }

    /// The same key with `instance` set.
    #[must_use]
    pub fn with_instance(mut self, instance: u64) -> Self {
        self.instance = instance;
        self
    }
}

/// Verification state of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verification {
    /// Registered, not proven yet: never listed.
    Pending,
    /// Proven and listed.
    Verified,
    /// Failed a re-verification: not listed, still alive while heartbeats come.
    Delisted,
}

impl Verification {
    /// The stable name used in the store and the API.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Verified => "verified",
            Self::Delisted => "delisted",
        }
    }

    /// The state called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "pending" => Some(Self::Pending),
            "verified" => Some(Self::Verified),
            "delisted" => Some(Self::Delisted),
            _ => None,
        }
    }
}

/// One player from a poll.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollPlayer {
    /// Name, plain text.
    pub name: String,
    /// Score, when the protocol reports one.
    pub score: Option<i64>,
}

/// What the last successful poll (or a face that carries state, such as the management
/// server's stats update) said about a server, as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollInfo {
    /// Server name, plain text.
    pub name: String,
    /// Map.
    pub map: String,
    /// Game type / mode.
    pub game_type: String,
    /// Players on the server.
    pub num_players: u32,
    /// Player slots.
    pub max_players: u32,
    /// Whether a password is needed, when known.
    pub password: Option<bool>,
    /// Players.
    pub players: Vec<PollPlayer>,
    /// Rules as (key, value), plain text.
    pub rules: Vec<(String, String)>,
    /// The game port, when the reply said it (GameSpy `hostport`).
    pub game_port: Option<u16>,
}

fn clip(s: &str) -> String {
    s.chars().take(MAX_POLL_TEXT).collect()
}

impl PollInfo {
    /// The plain-text view of a query result. Text is clipped to [`MAX_POLL_TEXT`] chars,
    /// players and rules to [`MAX_POLL_PLAYERS`] / [`MAX_POLL_RULES`]; the game port is read
    /// from a `hostport` rule when there is one.
    #[must_use]
    pub fn from_server_info(info: &ServerInfo) -> Self {
        let rules: Vec<(String, String)> = info
            .rules
            .iter()
            .map(|r| (r.key.plain.clone(), r.value.plain.clone()))
            .collect();
        let game_port = rules
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("hostport"))
            .and_then(|(_, v)| v.trim().parse().ok());
        Self {
            name: info.name.plain.clone(),
            map: info.map.plain.clone(),
            game_type: info.game_type.plain.clone(),
            num_players: info.num_players,
            max_players: info.max_players,
            password: info.password,
            players: info
                .players
                .iter()
                .map(|p| PollPlayer {
                    name: p.name.plain.clone(),
                    score: p.score,
                })
                .collect(),
            rules,
            game_port,
        }
        .bounded()
    }

    /// This info with every text and list clipped to the named limits.
    #[must_use]
    pub fn bounded(mut self) -> Self {
        self.name = clip(&self.name);
        self.map = clip(&self.map);
        self.game_type = clip(&self.game_type);
        self.players.truncate(MAX_POLL_PLAYERS);
        for p in &mut self.players {
            p.name = clip(&p.name);
        }
        self.rules.truncate(MAX_POLL_RULES);
        for (k, v) in &mut self.rules {
            *k = clip(k);
            *v = clip(v);
        }
        self
    }
}

/// A registration request from a face.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The key.
    pub key: ServerKey,
    /// The face registering it.
    pub face: Face,
    /// The game port, when the face knows it (all but GameSpy heartbeats).
    pub game_port: Option<u16>,
    /// Where the poller queries it, if it can.
    pub query_addr: Option<SocketAddr>,
    /// How the poller queries it.
    pub query_protocol: Option<Protocol>,
    /// Who registered it, for the per-source cap.
    pub source: SourceKey,
}

/// One record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The key.
    pub key: ServerKey,
    /// The face that registered it (the latest registration wins).
    pub face: Face,
    /// The game port, when known.
    pub game_port: Option<u16>,
    /// Where the poller queries it.
    pub query_addr: Option<SocketAddr>,
    /// How the poller queries it.
    pub query_protocol: Option<Protocol>,
    /// Verification state.
    pub state: Verification,
    /// When it was first registered.
    pub first_seen: Timestamp,
    /// Pending: when it was added or re-challenged. Otherwise: the last valid heartbeat.
    pub last_heartbeat: Timestamp,
    /// When it was first verified; the stable list order. Kept across de-listing.
    pub first_verified: Option<Timestamp>,
    /// The last successful poll.
    pub last_poll_ok: Option<Timestamp>,
    /// What the last successful poll said.
    pub info: Option<PollInfo>,
    /// Polls failed in a row since the last success.
    pub poll_failures: u32,
    /// The registering source, for the per-source cap.
    pub source: SourceKey,
    /// What the registering face keeps about the record beyond the registry's fields, as
    /// opaque text (JSON by convention), persisted verbatim so the face can rebuild its own
    /// state after a restart (the DDNet face: secret, info serial, stream URL and the info
    /// object exactly as registered). At most [`MAX_FACE_DATA`] bytes.
    pub face_data: Option<std::sync::Arc<str>>,
    /// Tie-break of the list order among records verified in the same millisecond.
    seq: u64,
}

impl Record {
    /// A fresh pending record for `reg` at `now`.
    #[must_use]
    pub fn new(reg: Registration, now: Timestamp) -> Self {
        Self {
            key: reg.key,
            face: reg.face,
            game_port: reg.game_port,
            query_addr: reg.query_addr,
            query_protocol: reg.query_protocol,
            state: Verification::Pending,
            first_seen: now,
            last_heartbeat: now,
            first_verified: None,
            last_poll_ok: None,
            info: None,
            poll_failures: 0,
            source: reg.source,
            face_data: None,
            seq: 0,
        }
    }

    /// Whether any list shows it.
    #[must_use]
    pub fn is_listed(&self) -> bool {
        self.state == Verification::Verified
    }

    /// The game address when the game port is known: the key's host with [`Record::game_port`].
    #[must_use]
    pub fn game_addr(&self) -> Option<GameAddr> {
        let port = self.game_port?;
        Some(match &self.key.addr {
            GameAddr::Ip(a) => GameAddr::Ip(SocketAddr::new(a.ip(), port)),
            GameAddr::Host { host, .. } => GameAddr::Host {
                host: host.clone(),
                port,
            },
        })
    }

    fn players(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.num_players)
    }

    fn max_players(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.max_players)
    }

    fn order_key(&self) -> (Timestamp, u64) {
        (self.first_verified.unwrap_or(Timestamp(u64::MAX)), self.seq)
    }
}

/// Why a registration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// The source already has [`RegistryConfig::max_per_source`] records.
    SourceCap,
    /// [`RegistryConfig::max_pending`] records are pending.
    PendingCap,
    /// The game name is empty, longer than [`MAX_GAME_LEN`] or not printable ASCII.
    BadGame,
    /// A host name address is empty or longer than [`MAX_HOST_LEN`].
    BadAddress,
}

impl Reject {
    /// The stable name used in metrics.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::SourceCap => "source_cap",
            Self::PendingCap => "pending_cap",
            Self::BadGame => "bad_game",
            Self::BadAddress => "bad_address",
        }
    }
}

/// Result of [`Registry::add`] and [`Registry::heartbeat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A new pending record was created.
    Added,
    /// A known record was refreshed.
    Refreshed,
    /// A heartbeat for a record that is pending or de-listed: nothing refreshed; the face
    /// decides whether to (re-)challenge.
    NotVerified,
    /// Refused; nothing changed.
    Rejected(Reject),
}

/// Result of [`Registry::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyOutcome {
    /// Pending or de-listed before, listed now.
    Verified,
    /// Already listed; refreshed.
    AlreadyVerified,
    /// No such record.
    Unknown,
}

/// Result of [`Registry::delist`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelistOutcome {
    /// Was listed, is not any more.
    Delisted,
    /// Was not listed.
    NotListed,
    /// No such record.
    Unknown,
}

/// Result of [`Registry::update_poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollOutcome {
    /// Stored; the failure count is 0 again.
    Updated,
    /// Counted; the number of failures in a row.
    Failed(u32),
    /// No such record.
    Unknown,
}

/// Limits and lifetimes of the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryConfig {
    /// Records per source, pending and verified together.
    pub max_per_source: usize,
    /// Pending records in total.
    pub max_pending: usize,
    /// Life of a pending record after [`Registry::add`].
    pub pending_lifetime: Duration,
    /// Lifetime after the last valid heartbeat or successful poll, per face. A face without
    /// an entry never expires by time.
    pub face_lifetimes: HashMap<Face, Duration>,
    /// Per-game overrides of a face's lifetime: face → lower-case game name → lifetime. Per
    /// face because one game may heartbeat at different rates through different faces (a
    /// Serious Sam server: 150 s GameSpy heartbeats, GameAgent's own 300 s expiry).
    pub game_lifetimes: HashMap<Face, HashMap<String, Duration>>,
}

impl Default for RegistryConfig {
    /// The spec defaults: GameAgent 300 s (`gameagent.md` §8.3.7), GameSpy 300 s (Unreal family,
    /// `gamespy-master.md` §14; Serious Sam gamenames heartbeating by GameSpy 570 s), Teeworlds UDP 90 s, DDNet HTTP 30 s
    /// (`teeworlds-master.md` §5.3), management: connection-bound.
    fn default() -> Self {
        let face_lifetimes = HashMap::from([
            (Face::GameAgent, Duration::from_secs(300)),
            (Face::GameSpy, Duration::from_secs(300)),
            (Face::Teeworlds07, Duration::from_secs(90)),
            (Face::Teeworlds06, Duration::from_secs(90)),
            (Face::DdnetHttp, Duration::from_secs(30)),
        ]);
        let sam = SERIOUS_SAM_GAMES
            .into_iter()
            .map(|g| (g.to_owned(), Duration::from_secs(570)))
            .collect();
        let game_lifetimes = HashMap::from([(Face::GameSpy, sam)]);
        Self {
            max_per_source: DEFAULT_MAX_PER_SOURCE,
            max_pending: DEFAULT_MAX_PENDING,
            pending_lifetime: DEFAULT_PENDING_LIFETIME,
            face_lifetimes,
            game_lifetimes,
        }
    }
}

/// The games of the Serious Sam family (GameAgent lists only these).
pub const SERIOUS_SAM_GAMES: [&str; 3] = ["serioussam", "serioussamse", "serioussamsed"];
/// The GameSpy gamenames the UT2003 text list publishes (`ut2003-list.md` §6).
pub const UT2003_LIST_GAMES: [&str; 4] = ["ut2", "ut2d", "ut2004", "ut2004d"];
/// The games the Teeworlds faces list.
pub const TEEWORLDS_GAMES: [&str; 2] = ["teeworlds", "ddnet"];

/// Which list a face is building; decides which records it can represent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View<'a> {
    /// GameAgent `s`: IPv4 Serious Sam family servers with a known game port.
    GameAgent,
    /// GameSpy list for one gamename: IPv4 servers of that game with a GameSpy query address.
    GameSpy(&'a str),
    /// UT2003 text list: IPv4 `ut2`/`ut2d`/`ut2004`/`ut2004d` servers with known game port and
    /// GameSpy query port.
    Ut2003Text,
    /// Teeworlds UDP lists and `servers.json`: teeworlds/ddnet servers with an IP address.
    Teeworlds,
    /// `msRQueryGameServers`: servers registered through the management face.
    Mgmt,
    /// The HTTP API: everything listed.
    Http,
}

impl View<'_> {
    /// Whether this face can show `r` (independently of its verification state).
    #[must_use]
    pub fn can_represent(&self, r: &Record) -> bool {
        let ipv4 = matches!(r.key.addr.ip(), Some(IpAddr::V4(_)));
        let game = r.key.game.as_str();
        match self {
            Self::GameAgent => ipv4 && r.game_port.is_some() && SERIOUS_SAM_GAMES.contains(&game),
            Self::GameSpy(g) => {
                ipv4 && g.eq_ignore_ascii_case(game)
                    && r.query_protocol == Some(Protocol::GameSpy1)
                    && matches!(r.query_addr, Some(SocketAddr::V4(_)))
            }
            Self::Ut2003Text => {
                ipv4 && UT2003_LIST_GAMES.contains(&game)
                    && r.game_port.is_some()
                    && r.query_protocol == Some(Protocol::GameSpy1)
                    && matches!(r.query_addr, Some(SocketAddr::V4(_)))
            }
            Self::Teeworlds => r.key.addr.ip().is_some() && TEEWORLDS_GAMES.contains(&game),
            Self::Mgmt => r.face == Face::Mgmt,
            Self::Http => true,
        }
    }
}

/// Column to sort a listing by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// First verification time (the stable list order).
    #[default]
    Order,
    /// Server name (case-insensitive).
    Name,
    /// Map (case-insensitive).
    Map,
    /// Game name.
    Game,
    /// Game type.
    GameType,
    /// Players on the server.
    Players,
    /// Player slots.
    MaxPlayers,
    /// Address.
    Address,
    /// Face / protocol.
    Protocol,
    /// Last valid heartbeat.
    LastSeen,
}

impl SortKey {
    /// Parses a column name as the HTTP API spells it.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "order" | "first_verified" => Self::Order,
            "name" => Self::Name,
            "map" => Self::Map,
            "game" => Self::Game,
            "game_type" | "gametype" => Self::GameType,
            "players" | "num_players" => Self::Players,
            "max_players" => Self::MaxPlayers,
            "address" => Self::Address,
            "protocol" | "face" => Self::Protocol,
            "last_seen" | "last_heartbeat" => Self::LastSeen,
            _ => return None,
        })
    }
}

/// Filters, order and page of a listing. `Default` lists everything in stable order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListQuery {
    /// Only this game (compared ASCII case-insensitively).
    pub game: Option<String>,
    /// Only records whose face name, face family or query protocol name is this.
    pub protocol: Option<String>,
    /// Only servers with at least one player.
    pub non_empty: bool,
    /// Only servers with a free slot (or unknown slots).
    pub not_full: bool,
    /// Only servers whose password flag is this (unknown never matches).
    pub password: Option<bool>,
    /// Case-insensitive substring of the server name or a player name.
    pub text: Option<String>,
    /// Sort column.
    pub sort: SortKey,
    /// Descending instead of ascending.
    pub descending: bool,
    /// Page, from 1 (0 is taken as 1).
    pub page: usize,
    /// Records per page, capped at [`MAX_PER_PAGE`]; 0 means [`DEFAULT_PER_PAGE`].
    pub per_page: usize,
}

impl ListQuery {
    fn matches(&self, r: &Record, text_lower: Option<&str>) -> bool {
        if self
            .game
            .as_ref()
            .is_some_and(|g| !g.eq_ignore_ascii_case(&r.key.game))
        {
            return false;
        }
        if let Some(p) = &self.protocol {
            let p = p.as_str();
            let by_query = r.query_protocol.is_some_and(|q| q.name() == p);
            if r.face.name() != p && r.face.family() != p && !by_query {
                return false;
            }
        }
        if self.non_empty && r.players() == 0 {
            return false;
        }
        if self.not_full && r.max_players() != 0 && r.players() >= r.max_players() {
            return false;
        }
        if self
            .password
            .is_some_and(|want| r.info.as_ref().and_then(|i| i.password) != Some(want))
        {
            return false;
        }
        if let Some(t) = text_lower {
            let Some(info) = &r.info else { return false };
            let hit = info.name.to_lowercase().contains(t)
                || info
                    .players
                    .iter()
                    .any(|p| p.name.to_lowercase().contains(t));
            if !hit {
                return false;
            }
        }
        true
    }

    fn compare(&self, a: &Record, b: &Record) -> Ordering {
        fn text(r: &Record, f: fn(&PollInfo) -> &str) -> String {
            r.info.as_ref().map(f).unwrap_or_default().to_lowercase()
        }
        let primary = match self.sort {
            SortKey::Order => Ordering::Equal,
            SortKey::Name => text(a, |i| &i.name).cmp(&text(b, |i| &i.name)),
            SortKey::Map => text(a, |i| &i.map).cmp(&text(b, |i| &i.map)),
            SortKey::GameType => text(a, |i| &i.game_type).cmp(&text(b, |i| &i.game_type)),
            SortKey::Game => a.key.game.cmp(&b.key.game),
            SortKey::Players => a.players().cmp(&b.players()),
            SortKey::MaxPlayers => a.max_players().cmp(&b.max_players()),
            SortKey::Address => a.key.addr.cmp(&b.key.addr),
            SortKey::Protocol => a.face.name().cmp(b.face.name()),
            SortKey::LastSeen => a.last_heartbeat.cmp(&b.last_heartbeat),
        };
        let ord = primary.then_with(|| a.order_key().cmp(&b.order_key()));
        if self.descending { ord.reverse() } else { ord }
    }

    /// The page size after defaults and the cap.
    #[must_use]
    pub fn page_size(&self) -> usize {
        match self.per_page {
            0 => DEFAULT_PER_PAGE,
            n => n.min(MAX_PER_PAGE),
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage<'a> {
    /// Records matching the filters, over all pages.
    pub total: usize,
    /// The page actually returned (from 1).
    pub page: usize,
    /// The page size actually used.
    pub per_page: usize,
    /// The records of this page.
    pub records: Vec<&'a Record>,
}

/// The registry. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    config: RegistryConfig,
    records: HashMap<ServerKey, Record>,
    per_source: HashMap<SourceKey, usize>,
    pending: usize,
    next_seq: u64,
}

fn game_ok(game: &str) -> bool {
    !game.is_empty() && game.len() <= MAX_GAME_LEN && game.bytes().all(|b| b.is_ascii_graphic())
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub fn new(config: RegistryConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// Records in total.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Pending records.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Records of one source.
    #[must_use]
    pub fn count_of_source(&self, source: SourceKey) -> usize {
        self.per_source.get(&source).copied().unwrap_or(0)
    }

    /// The record under `key`.
    #[must_use]
    pub fn get(&self, key: &ServerKey) -> Option<&Record> {
        self.records.get(key)
    }

    /// Every record, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.records.values()
    }

    fn game_and_addr_ok(key: &ServerKey) -> Result<(), Reject> {
        if !game_ok(&key.game) {
            return Err(Reject::BadGame);
        }
        if matches!(&key.addr, GameAddr::Host { host, .. } if host.is_empty() || host.len() > MAX_HOST_LEN)
        {
            return Err(Reject::BadAddress);
        }
        Ok(())
    }

    fn insert_new(&mut self, reg: Registration, now: Timestamp) -> Outcome {
        if let Err(r) = Self::game_and_addr_ok(&reg.key) {
            return Outcome::Rejected(r);
        }
        if self.count_of_source(reg.source) >= self.config.max_per_source {
            return Outcome::Rejected(Reject::SourceCap);
        }
        if self.pending >= self.config.max_pending {
            return Outcome::Rejected(Reject::PendingCap);
        }
        *self.per_source.entry(reg.source).or_insert(0) += 1;
        self.pending += 1;
        let rec = Record::new(reg, now);
        self.records.insert(rec.key.clone(), rec);
        Outcome::Added
    }

    /// A registration (GameAgent `q`, GameSpy heartbeat, `bea2`, DDNet POST, mgmt register).
    /// Unknown key: a new pending record (`Added`), subject to the caps. Known key: face,
    /// game port, query address and protocol are taken from `reg` (the source stays the
    /// first one); a pending record's life starts again, a verified one's heartbeat is
    /// refreshed (`Refreshed`); a de-listed one is left as it is (`NotVerified`).
    pub fn add(&mut self, reg: Registration, now: Timestamp) -> Outcome {
        let Some(rec) = self.records.get_mut(&reg.key) else {
            return self.insert_new(reg, now);
        };
        rec.face = reg.face;
        if reg.game_port.is_some() {
            rec.game_port = reg.game_port;
        }
        rec.query_addr = reg.query_addr;
        rec.query_protocol = reg.query_protocol;
        match rec.state {
            Verification::Pending | Verification::Verified => {
                rec.last_heartbeat = rec.last_heartbeat.max(now);
                Outcome::Refreshed
            }
            Verification::Delisted => Outcome::NotVerified,
        }
    }

    /// A keep-alive (GameAgent `0` with echo 0, GameSpy heartbeat from a verified source).
    /// Unknown key: a new pending record as [`Registry::add`] makes (this is how servers
    /// re-register after a master restart). Verified: last heartbeat refreshed. Pending or
    /// de-listed: nothing changes (`NotVerified`), so spoofed keep-alives cannot keep an
    /// unproven record alive. Never touches the store: the caller batches refreshes.
    pub fn heartbeat(&mut self, reg: Registration, now: Timestamp) -> Outcome {
        match self.records.get_mut(&reg.key) {
            None => self.insert_new(reg, now),
            Some(rec) if rec.state == Verification::Verified => {
                rec.last_heartbeat = rec.last_heartbeat.max(now);
                Outcome::Refreshed
            }
            Some(_) => Outcome::NotVerified,
        }
    }

    /// Proof of ownership arrived (echo matched, `fw!!`, `\validate\`, `chal` token, or a
    /// management registration). Lists the record; its first verification time is kept from
    /// an earlier listing if it had one; counts as a valid heartbeat.
    pub fn verify(&mut self, key: &ServerKey, now: Timestamp) -> VerifyOutcome {
        let Some(rec) = self.records.get_mut(key) else {
            return VerifyOutcome::Unknown;
        };
        rec.last_heartbeat = rec.last_heartbeat.max(now);
        match rec.state {
            Verification::Verified => VerifyOutcome::AlreadyVerified,
            old => {
                if old == Verification::Pending {
                    self.pending = self.pending.saturating_sub(1);
                }
                rec.state = Verification::Verified;
                if rec.first_verified.is_none() {
                    rec.first_verified = Some(now);
                    rec.seq = self.next_seq;
                    self.next_seq = self.next_seq.wrapping_add(1);
                }
                VerifyOutcome::Verified
            }
        }
    }

    /// A re-verification failed: stop listing the record until it is verified again.
    pub fn delist(&mut self, key: &ServerKey) -> DelistOutcome {
        match self.records.get_mut(key) {
            None => DelistOutcome::Unknown,
            Some(rec) if rec.state == Verification::Verified => {
                rec.state = Verification::Delisted;
                DelistOutcome::Delisted
            }
            Some(_) => DelistOutcome::NotListed,
        }
    }

    /// Removes a record (DDNet delete, management unregister or connection close). Returns it.
    pub fn remove(&mut self, key: &ServerKey) -> Option<Record> {
        let rec = self.records.remove(key)?;
        if rec.state == Verification::Pending {
            self.pending = self.pending.saturating_sub(1);
        }
        if let Some(n) = self.per_source.get_mut(&rec.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&rec.source);
            }
        }
        Some(rec)
    }

    /// The result of a poll. Success stores `info` (clipped to the named limits), takes the game
    /// port from it when it has one, resets the failure count and keeps the record alive;
    /// `None` counts a failure. De-listing after failures is the poller's decision.
    pub fn update_poll(
        &mut self,
        key: &ServerKey,
        info: Option<PollInfo>,
        now: Timestamp,
    ) -> PollOutcome {
        let Some(rec) = self.records.get_mut(key) else {
            return PollOutcome::Unknown;
        };
        match info {
            Some(info) => {
                let info = info.bounded();
                if info.game_port.is_some() {
                    rec.game_port = info.game_port;
                }
                rec.info = Some(info);
                rec.poll_failures = 0;
                rec.last_poll_ok = Some(now);
                PollOutcome::Updated
            }
            None => {
                rec.poll_failures = rec.poll_failures.saturating_add(1);
                PollOutcome::Failed(rec.poll_failures)
            }
        }
    }

    /// What a registration message itself said about the server (GameAgent heartbeat:
    /// players, slots, level, game type, version, product), shown until the poller has
    /// something: stored when the record was never polled successfully, ignored after (the
    /// poll is authoritative). Unlike [`Registry::update_poll`] it neither counts as a poll
    /// nor keeps the record alive. Returns whether it was stored.
    pub fn registration_info(&mut self, key: &ServerKey, info: PollInfo) -> bool {
        match self.records.get_mut(key) {
            Some(rec) if rec.last_poll_ok.is_none() => {
                let info = info.bounded();
                if rec.info.as_ref() == Some(&info) {
                    return false;
                }
                rec.info = Some(info);
                true
            }
            _ => false,
        }
    }

    /// Sets [`Record::face_data`] (`None` clears it). Data over [`MAX_FACE_DATA`] bytes is
    /// not kept (cleared). Returns whether anything changed.
    pub fn set_face_data(&mut self, key: &ServerKey, data: Option<std::sync::Arc<str>>) -> bool {
        let Some(rec) = self.records.get_mut(key) else {
            return false;
        };
        let data = data.filter(|d| d.len() <= MAX_FACE_DATA);
        if rec.face_data == data {
            return false;
        }
        rec.face_data = data;
        true
    }

    /// When `rec` expires, or `None` when it never does by time.
    #[must_use]
    pub fn expires_at(&self, rec: &Record) -> Option<Timestamp> {
        if rec.state == Verification::Pending {
            return Some(rec.last_heartbeat.plus(self.config.pending_lifetime));
        }
        let life = self
            .config
            .game_lifetimes
            .get(&rec.face)
            .and_then(|m| m.get(&rec.key.game))
            .or_else(|| self.config.face_lifetimes.get(&rec.face))?;
        let base = rec
            .last_poll_ok
            .map_or(rec.last_heartbeat, |p| p.max(rec.last_heartbeat));
        Some(base.plus(*life))
    }

    /// Removes every record that expired at or before `now`; returns their keys (sorted).
    pub fn prune_before(&mut self, now: Timestamp) -> Vec<ServerKey> {
        let mut dead: Vec<ServerKey> = self
            .records
            .values()
            .filter(|r| self.expires_at(r).is_some_and(|t| t <= now))
            .map(|r| r.key.clone())
            .collect();
        dead.sort();
        for k in &dead {
            self.remove(k);
        }
        dead
    }

    /// Puts back a record loaded from storage (as it was, state and times included). Replaces
    /// a record with the same key. Caps are not applied: what was accepted stays accepted.
    pub fn restore(&mut self, mut rec: Record) {
        self.remove(&rec.key);
        rec.seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        if rec.state == Verification::Pending {
            self.pending += 1;
        }
        *self.per_source.entry(rec.source).or_insert(0) += 1;
        self.records.insert(rec.key.clone(), rec);
    }

    /// Listed records `view` can represent, in the stable order (first verification).
    #[must_use]
    pub fn listed(&self, view: View<'_>) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .values()
            .filter(|r| r.is_listed() && view.can_represent(r))
            .collect();
        v.sort_by_key(|r| r.order_key());
        v
    }

    /// One page of listed records `view` can represent, filtered and sorted by `q`.
    #[must_use]
    pub fn list(&self, view: View<'_>, q: &ListQuery) -> ListPage<'_> {
        let text = q
            .text
            .as_deref()
            .map(str::to_lowercase)
            .filter(|t| !t.is_empty());
        let mut v: Vec<&Record> = self
            .records
            .values()
            .filter(|r| r.is_listed() && view.can_represent(r) && q.matches(r, text.as_deref()))
            .collect();
        v.sort_by(|a, b| q.compare(a, b));
        let per_page = q.page_size();
        let page = q.page.max(1);
        let total = v.len();
        let records = v
            .into_iter()
            .skip(per_page.saturating_mul(page - 1))
            .take(per_page)
            .collect();
        ListPage {
            total,
            page,
            per_page,
            records,
        }
    }

    /// Listed records registered under `addr` (any game, any instance), in stable order.
    #[must_use]
    pub fn find_by_addr(&self, addr: &GameAddr) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .values()
            .filter(|r| {
                r.is_listed() && (&r.key.addr == addr || r.game_addr().as_ref() == Some(addr))
            })
            .collect();
        v.sort_by_key(|r| r.order_key());
        v
    }

    /// Listed records per face (all faces, zeros included), for the metrics gauge.
    #[must_use]
    pub fn listed_per_face(&self) -> BTreeMap<Face, usize> {
        let mut m: BTreeMap<Face, usize> = Face::ALL.into_iter().map(|f| (f, 0)).collect();
        for r in self.records.values().filter(|r| r.is_listed()) {
            *m.entry(r.face).or_insert(0) += 1;
        }
        m
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
