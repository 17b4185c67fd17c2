//! The registry's value types: keys, addresses, records and what polls said.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Short text kept inline: a game name, a map, a player's name or a rule of up to 24 bytes
/// takes no allocation of its own (most of them are that short), which is most of a record's
/// memory and allocations after the record itself.
pub use compact_str::CompactString as ShortText;
use muster_proto::limit::SourceKey;
use muster_proto::{Protocol, ServerInfo};

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
/// Largest DDNet info object kept per server, in bytes: DDNet's own master refuses register
/// bodies over 32 KiB (`teeworlds-master.md` §3.6), so no real server sends more.
pub const MAX_DDNET_INFO: usize = 32 * 1024;
/// Most addresses (streams) one DDNet server may register.
pub const MAX_DDNET_STREAMS: usize = 8;

/// Unix time in milliseconds, passed in by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// A time that never comes (the last millisecond `u64` holds).
    pub const NEVER: Self = Self(u64::MAX);

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

    /// How long after `earlier` this is (zero when it is not after).
    #[must_use]
    pub fn since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// The wall clock now. Read by the daemon's drivers, never by the registry or a face.
    ///
    /// The system clock is read once per process; after that the time advances with tokio's
    /// monotonic clock, so a clock that steps (NTP) cannot make records expire early or
    /// late, and tests that pause tokio's clock control this one too.
    #[must_use]
    pub fn now() -> Self {
        static BASE: std::sync::OnceLock<(u64, std::time::Instant)> = std::sync::OnceLock::new();
        let (wall, mono) = *BASE.get_or_init(|| {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            (ms, std::time::Instant::now())
        });
        let now = tokio::time::Instant::now().into_std();
        let elapsed = u64::try_from(now.saturating_duration_since(mono).as_millis()).unwrap_or(0);
        Self(wall.saturating_add(elapsed))
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

    /// Position in [`Face::ALL`].
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize
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
    /// A host name (or an address spelled in a form kept verbatim) and port. The name is a
    /// boxed `str`, not a `String`, so that an address takes 32 bytes, not 40.
    Host {
        /// The name as received.
        host: Box<str>,
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
            host: host.into(),
            port,
        })
    }
}

impl fmt::Display for GameAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(a) => addr_fmt(a, f),
            Self::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// `a` as its [`fmt::Display`] writes it, by the same path as a [`GameAddr`]'s, e.g. for
/// the API's rows.
#[must_use]
pub fn addr_text(a: &SocketAddr) -> String {
    struct Shown<'a>(&'a SocketAddr);
    impl fmt::Display for Shown<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            addr_fmt(self.0, f)
        }
    }
    Shown(a).to_string()
}

/// [`SocketAddr`]'s `Display`, with IPv4 written digit by digit when no width or precision is
/// asked for: the formatting machinery per octet was 6 % of the master's CPU while clients
/// paged through the API (three addresses per row).
fn addr_fmt(a: &SocketAddr, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match a {
        SocketAddr::V4(v4) if f.width().is_none() && f.precision().is_none() => write_v4(f, v4),
        _ => fmt::Display::fmt(a, f),
    }
}

/// Writes `a.b.c.d:port`.
fn write_v4(out: &mut impl fmt::Write, a: &std::net::SocketAddrV4) -> fmt::Result {
    let mut digits = itoa::Buffer::new();
    for (i, octet) in a.ip().octets().into_iter().enumerate() {
        if i > 0 {
            out.write_char('.')?;
        }
        out.write_str(digits.format(octet))?;
    }
    out.write_char(':')?;
    out.write_str(digits.format(a.port()))
}

/// What identifies a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerKey {
    /// Game name, ASCII lower-cased by [`ServerKey::new`].
    pub game: ShortText,
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
            game: {
                let mut g = ShortText::from(game);
                g.as_mut_str().make_ascii_lowercase();
                g
            },
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
    /// Proven and listed.
    Verified,
    /// Failed a re-verification or too many polls: not listed, still alive while heartbeats
    /// come, listed again by a new proof.
    Delisted,
}

impl Verification {
    /// The stable name used in the store and the API.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Delisted => "delisted",
        }
    }

    /// The state called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "verified" => Some(Self::Verified),
            "delisted" => Some(Self::Delisted),
            _ => None,
        }
    }
}

/// One player from a poll, in 32 bytes: the name, then the numbers in one 8-byte word with a
/// sentinel for "the protocol did not say" — the score in an `i32` (`i32::MIN` is none), the
/// ping in a `u16` (`u16::MAX` is none), and a `u16` holding the team in 12 bits (two's
/// complement, −2048 is none) with the spectator and bot flags in 2 bits each (none, false,
/// true). So a value at a sentinel or beyond its width is clamped: a score to
/// `i32::MIN + 1..=i32::MAX`, a ping to at most 65,534 ms and a team to −2047..=2047 (no game
/// sends teams beyond that). A full server's player list takes two thirds of what the plain
/// `Option` fields took.
#[derive(Clone, PartialEq, Eq)]
pub struct PollPlayer {
    /// Name, plain text.
    pub name: ShortText,
    /// Score; [`Self::NO_SCORE`] when the protocol reports none.
    score: i32,
    /// Ping in milliseconds; [`Self::NO_PING`] when the protocol reports none.
    ping: u16,
    /// Team in the low 12 bits ([`Self::NO_TEAM`] when none), then the spectator and the bot
    /// flag in 2 bits each (see [`Self::flag_bits`]).
    bits: u16,
}

const _: () = assert!(size_of::<PollPlayer>() == 32);

impl Default for PollPlayer {
    fn default() -> Self {
        Self::new(ShortText::default())
    }
}

impl fmt::Debug for PollPlayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollPlayer")
            .field("name", &self.name)
            .field("score", &self.score())
            .field("ping_ms", &self.ping_ms())
            .field("team", &self.team())
            .field("spectator", &self.spectator())
            .field("bot", &self.bot())
            .finish()
    }
}

impl PollPlayer {
    /// The kept score meaning "none".
    const NO_SCORE: i32 = i32::MIN;
    /// The kept ping meaning "none".
    const NO_PING: u16 = u16::MAX;
    /// The 12 team bits of [`Self::bits`].
    const TEAM_MASK: u16 = 0x0fff;
    /// The team bits meaning "none" (−2048 in 12-bit two's complement).
    const NO_TEAM: u16 = 0x0800;
    /// Lowest team kept.
    const MIN_TEAM: i16 = -2047;
    /// Highest team kept.
    const MAX_TEAM: i16 = 2047;
    /// Where the spectator flag's 2 bits start in [`Self::bits`].
    const SPECTATOR_SHIFT: u32 = 12;
    /// Where the bot flag's 2 bits start in [`Self::bits`].
    const BOT_SHIFT: u32 = 14;

    /// A player called `name` of whom nothing else is known.
    #[must_use]
    pub fn new(name: impl Into<ShortText>) -> Self {
        Self {
            name: name.into(),
            score: Self::NO_SCORE,
            ping: Self::NO_PING,
            bits: Self::NO_TEAM,
        }
    }

    /// `v` as a kept score (clamped to `i32::MIN + 1..=i32::MAX`; `i32::MIN` means none).
    #[must_use]
    pub fn score_of(v: i64) -> i32 {
        i32::try_from(v.max(i64::from(Self::NO_SCORE) + 1)).unwrap_or(i32::MAX)
    }

    /// `v` as a kept ping (at most 65,534 ms; 65,535 means none).
    #[must_use]
    pub fn ping_of(v: u32) -> u16 {
        u16::try_from(v.min(u32::from(Self::NO_PING) - 1)).unwrap_or(Self::NO_PING - 1)
    }

    /// `v` as a kept team number (clamped to −2047..=2047).
    #[must_use]
    pub fn team_of(v: i32) -> i16 {
        let clamped = v.clamp(i32::from(Self::MIN_TEAM), i32::from(Self::MAX_TEAM));
        i16::try_from(clamped).unwrap_or(if v < 0 {
            Self::MIN_TEAM
        } else {
            Self::MAX_TEAM
        })
    }

    /// Score, when the protocol reports one.
    #[must_use]
    pub fn score(&self) -> Option<i32> {
        (self.score != Self::NO_SCORE).then_some(self.score)
    }

    /// Ping in milliseconds, when the protocol reports one.
    #[must_use]
    pub fn ping_ms(&self) -> Option<u16> {
        (self.ping != Self::NO_PING).then_some(self.ping)
    }

    /// Team number, when the protocol reports one.
    #[must_use]
    pub fn team(&self) -> Option<i16> {
        let raw = self.bits & Self::TEAM_MASK;
        // Sign-extends the 12 bits: shifted to the top of an `i16`, then back arithmetically.
        (raw != Self::NO_TEAM).then(|| i16::from_ne_bytes((raw << 4).to_ne_bytes()) >> 4)
    }

    /// Whether the player only watches, when the protocol tells.
    #[must_use]
    pub fn spectator(&self) -> Option<bool> {
        Self::flag_of(self.bits >> Self::SPECTATOR_SHIFT)
    }

    /// Whether the player is a bot, when the protocol tells (Teeworlds 0.7's player flags,
    /// `teeworlds.md` §8.4).
    #[must_use]
    pub fn bot(&self) -> Option<bool> {
        Self::flag_of(self.bits >> Self::BOT_SHIFT)
    }

    /// Sets the score (clamped, see [`Self::score_of`]).
    pub fn set_score(&mut self, score: Option<i32>) {
        self.score = score.map_or(Self::NO_SCORE, |s| Self::score_of(i64::from(s)));
    }

    /// Sets the ping (clamped, see [`Self::ping_of`]).
    pub fn set_ping_ms(&mut self, ping_ms: Option<u16>) {
        self.ping = ping_ms.map_or(Self::NO_PING, |p| Self::ping_of(u32::from(p)));
    }

    /// Sets the team (clamped, see [`Self::team_of`]).
    pub fn set_team(&mut self, team: Option<i16>) {
        let raw = team.map_or(Self::NO_TEAM, |t| {
            u16::from_ne_bytes(Self::team_of(i32::from(t)).to_ne_bytes()) & Self::TEAM_MASK
        });
        self.bits = (self.bits & !Self::TEAM_MASK) | raw;
    }

    /// Sets whether the player only watches.
    pub fn set_spectator(&mut self, spectator: Option<bool>) {
        self.set_flag(Self::SPECTATOR_SHIFT, spectator);
    }

    /// Sets whether the player is a bot.
    pub fn set_bot(&mut self, bot: Option<bool>) {
        self.set_flag(Self::BOT_SHIFT, bot);
    }

    /// This player with `score` (clamped, see [`Self::score_of`]).
    #[must_use]
    pub fn with_score(mut self, score: Option<i32>) -> Self {
        self.set_score(score);
        self
    }

    /// This player with `ping_ms` (clamped, see [`Self::ping_of`]).
    #[must_use]
    pub fn with_ping_ms(mut self, ping_ms: Option<u16>) -> Self {
        self.set_ping_ms(ping_ms);
        self
    }

    /// This player with `team` (clamped, see [`Self::team_of`]).
    #[must_use]
    pub fn with_team(mut self, team: Option<i16>) -> Self {
        self.set_team(team);
        self
    }

    /// This player with `spectator`.
    #[must_use]
    pub fn with_spectator(mut self, spectator: Option<bool>) -> Self {
        self.set_spectator(spectator);
        self
    }

    /// This player with `bot`.
    #[must_use]
    pub fn with_bot(mut self, bot: Option<bool>) -> Self {
        self.set_bot(bot);
        self
    }

    /// The 2 bits of a flag: 0 none, 1 false, 2 true.
    const fn flag_bits(v: Option<bool>) -> u16 {
        match v {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        }
    }

    /// The flag in the low 2 bits of `bits` (3 is never written; read as none).
    const fn flag_of(bits: u16) -> Option<bool> {
        match bits & 0b11 {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }

    /// Writes a flag's 2 bits at `shift`.
    fn set_flag(&mut self, shift: u32, v: Option<bool>) {
        self.bits = (self.bits & !(0b11 << shift)) | (Self::flag_bits(v) << shift);
    }
}

/// A poll's players, packed in one allocation of their own size: per player the score
/// (`i32`), ping and team/flag bits (`u16` each) as [`PollPlayer`] keeps them, little-endian,
/// then the name's length in bytes (one byte below 128, else two: the low 7 bits with the top
/// bit set, then the rest) and the name. At most [`MAX_POLL_PLAYERS`] players with names
/// clipped to [`MAX_POLL_TEXT`] chars. Five DDNet players with 10-byte names take 95 bytes
/// so, where a vector of [`PollPlayer`]s took 160 and the vector itself 8 more in every poll
/// info; a 64-player server takes about 1.2 KB where it took 2 KB.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PollPlayers(Box<[u8]>);

/// Bytes of a packed player before its name's length.
const PACKED_PLAYER_HEAD: usize = 8;

impl PollPlayers {
    /// The first [`MAX_POLL_PLAYERS`] of `players`, names clipped to [`MAX_POLL_TEXT`] chars.
    pub fn new(players: impl IntoIterator<Item = PollPlayer>) -> Self {
        let mut packed = Vec::new();
        for p in players.into_iter().take(MAX_POLL_PLAYERS) {
            let name = p.name.get(..clip_end(&p.name)).unwrap_or_default();
            packed.extend_from_slice(&p.score.to_le_bytes());
            packed.extend_from_slice(&p.ping.to_le_bytes());
            packed.extend_from_slice(&p.bits.to_le_bytes());
            // A clipped name is at most 4 × MAX_POLL_TEXT = 1,024 bytes: 14 bits.
            let len = name.len();
            match u8::try_from(len) {
                Ok(b) if b < 0x80 => packed.push(b),
                _ => {
                    packed.push(u8::try_from(len & 0x7f).unwrap_or(0) | 0x80);
                    packed.push(u8::try_from(len >> 7).unwrap_or(u8::MAX));
                }
            }
            packed.extend_from_slice(name.as_bytes());
        }
        Self(packed.into_boxed_slice())
    }

    /// The players, in their order.
    pub fn iter(&self) -> impl Iterator<Item = PollPlayer> + '_ {
        self.packed().map(|(name, score, ping, bits)| PollPlayer {
            name: ShortText::from(name),
            score,
            ping,
            bits,
        })
    }

    /// The players' names, in their order (no copy).
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.packed().map(|(name, ..)| name)
    }

    /// The player at `index`.
    #[must_use]
    pub fn get(&self, index: usize) -> Option<PollPlayer> {
        self.iter().nth(index)
    }

    /// How many players.
    #[must_use]
    pub fn len(&self) -> usize {
        self.packed().count()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes the packed players take.
    #[cfg(test)]
    pub(crate) fn packed_len(&self) -> usize {
        self.0.len()
    }

    /// Each player's name, score, ping and bits, read from the packed bytes (which
    /// [`Self::new`] wrote, so the walk ends only at their end).
    fn packed(&self) -> impl Iterator<Item = (&str, i32, u16, u16)> + '_ {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let (head, after) = rest.split_first_chunk::<PACKED_PLAYER_HEAD>()?;
            let [s0, s1, s2, s3, p0, p1, b0, b1] = *head;
            let (&l0, after) = after.split_first()?;
            let (len, after) = if l0 < 0x80 {
                (usize::from(l0), after)
            } else {
                let (&l1, after) = after.split_first()?;
                (usize::from(l0 & 0x7f) | usize::from(l1) << 7, after)
            };
            let name = after.get(..len)?;
            rest = after.get(len..)?;
            Some((
                std::str::from_utf8(name).ok()?,
                i32::from_le_bytes([s0, s1, s2, s3]),
                u16::from_le_bytes([p0, p1]),
                u16::from_le_bytes([b0, b1]),
            ))
        })
    }
}

impl FromIterator<PollPlayer> for PollPlayers {
    fn from_iter<I: IntoIterator<Item = PollPlayer>>(players: I) -> Self {
        Self::new(players)
    }
}

impl From<Vec<PollPlayer>> for PollPlayers {
    fn from(players: Vec<PollPlayer>) -> Self {
        Self::new(players)
    }
}

impl fmt::Debug for PollPlayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// What the last successful poll (or a face that carries state, such as the management
/// server's stats update) said about a server, as plain data, to build a [`PollInfo`] from
/// (`PollInfo::from(PollFields { .. })`) or to change one ([`PollInfo::to_fields`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollFields {
    /// Server name, plain text.
    pub name: ShortText,
    /// Map.
    pub map: ShortText,
    /// Game type / mode.
    pub game_type: ShortText,
    /// Players on the server.
    pub num_players: u32,
    /// Player slots.
    pub max_players: u32,
    /// Whether a password is needed, when known.
    pub password: Option<bool>,
    /// Players.
    pub players: PollPlayers,
    /// Rules as (key, value), plain text.
    pub rules: Rules,
    /// The game port, when the reply said it (GameSpy `hostport`).
    pub game_port: Option<u16>,
}

/// What the last successful poll (or a face that carries state, such as the management
/// server's stats update) said about a server, as the registry keeps it: every record that
/// was polled or carries a heartbeat's state holds one.
///
/// The texts (name, map, game type, and the rules) are packed in one allocation of their own
/// size, `name NUL map NUL game_type NUL` followed by the rules as [`Rules`] packs them, each
/// text clipped to [`MAX_POLL_TEXT`] chars with any NUL inside it dropped (none of the
/// protocols can carry one). Three inline texts took 72 bytes of the info, which with its
/// `Arc` counts filled a 160-byte allocator size class, and a DDNet server's name (longer than
/// the 24 bytes kept inline) an allocation more; so packed, an info and its counts take
/// 64 bytes and one allocation for all its text.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct PollInfo {
    /// The packed texts: empty when every text is empty and there are no rules.
    texts: Box<str>,
    /// Players.
    pub players: PollPlayers,
    /// Players on the server.
    pub num_players: u32,
    /// Player slots.
    pub max_players: u32,
    /// The game port, when the reply said it (GameSpy `hostport`).
    pub game_port: Option<u16>,
    /// Whether a password is needed, when known.
    pub password: Option<bool>,
}

// An info and its `Arc` counts fill one 64-byte allocator size class.
const _: () = assert!(size_of::<PollInfo>() <= 48);

impl From<PollFields> for PollInfo {
    fn from(f: PollFields) -> Self {
        let texts = if f.name.is_empty()
            && f.map.is_empty()
            && f.game_type.is_empty()
            && f.rules.is_empty()
        {
            Box::default()
        } else {
            let mut packed = String::with_capacity(
                f.name.len() + f.map.len() + f.game_type.len() + 3 + f.rules.0.len(),
            );
            for text in [&f.name, &f.map, &f.game_type] {
                push_packed(&mut packed, text);
            }
            packed.push_str(&f.rules.0);
            packed.into_boxed_str()
        };
        Self {
            texts,
            players: f.players,
            num_players: f.num_players,
            max_players: f.max_players,
            game_port: f.game_port,
            password: f.password,
        }
    }
}

impl fmt::Debug for PollInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [name, map, game_type] = self.texts();
        f.debug_struct("PollInfo")
            .field("name", &name)
            .field("map", &map)
            .field("game_type", &game_type)
            .field("num_players", &self.num_players)
            .field("max_players", &self.max_players)
            .field("password", &self.password)
            .field("players", &self.players)
            .field("rules", &self.rules())
            .field("game_port", &self.game_port)
            .finish()
    }
}

/// Whether `p` is a bot, when its protocol says: Teeworlds 0.7 sends `player_flags` (bit 1 is
/// "bot", `teeworlds.md` §8.4), which the codec keeps in `raw` with a `bot` entry when set.
fn bot_flag(p: &muster_proto::model::Player) -> Option<bool> {
    let flagged = p.raw.iter().any(|(k, _)| k == "player_flags");
    flagged.then(|| {
        p.raw
            .iter()
            .any(|(k, v)| k == "bot" && *v == muster_proto::model::RawValue::Bool(true))
    })
}

/// A server's rules: (key, value) pairs of plain text in their order, at most
/// [`MAX_POLL_RULES`] pairs of texts clipped to [`MAX_POLL_TEXT`] chars, packed in one
/// allocation of their own size as `key NUL value NUL …` (a NUL inside a text is dropped).
/// A GameAgent heartbeat's two rules take 34 bytes so (heaptrack), where a vector of pairs took
/// 96 and the vector itself 24 more in every poll info.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Rules(Box<str>);

impl Rules {
    /// The rules `pairs`, clipped to the limits.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut packed = String::new();
        for (k, v) in pairs.into_iter().take(MAX_POLL_RULES) {
            for text in [k.as_ref(), v.as_ref()] {
                push_packed(&mut packed, text);
            }
        }
        Self(packed.into_boxed_str())
    }

    /// A view of them.
    #[must_use]
    pub fn view(&self) -> RulesView<'_> {
        RulesView(&self.0)
    }

    /// The pairs, in their order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.view().iter()
    }

    /// How many pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of the first rule `key` (ASCII case-insensitive), if there is one.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.view().get(key)
    }
}

/// Appends `text` to a packed string (a [`PollInfo`]'s texts, [`Rules`]): its first
/// [`MAX_POLL_TEXT`] chars without any NUL, then a NUL to end it.
fn push_packed(packed: &mut String, text: &str) {
    packed.extend(text.chars().filter(|&c| c != '\0').take(MAX_POLL_TEXT));
    packed.push('\0');
}

/// Rules as a [`Rules`] or a [`PollInfo`] keeps them, borrowed: `key NUL value NUL …`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RulesView<'a>(&'a str);

impl<'a> RulesView<'a> {
    /// The pairs, in their order.
    pub fn iter(self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut texts = self.0.split('\0');
        std::iter::from_fn(move || Some((texts.next()?, texts.next()?)))
    }

    /// How many pairs.
    #[must_use]
    pub fn len(self) -> usize {
        self.0.bytes().filter(|&b| b == 0).count() / 2
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// The value of the first rule `key` (ASCII case-insensitive), if there is one.
    #[must_use]
    pub fn get(self, key: &str) -> Option<&'a str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    }

    /// Owned.
    #[must_use]
    pub fn to_rules(self) -> Rules {
        Rules(self.0.into())
    }
}

impl fmt::Debug for RulesView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Rules {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        Self::new(pairs)
    }
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Where the first [`MAX_POLL_TEXT`] chars of `s` end.
fn clip_end(s: &str) -> usize {
    s.char_indices()
        .nth(MAX_POLL_TEXT)
        .map_or(s.len(), |(i, _)| i)
}

/// `s` clipped to [`MAX_POLL_TEXT`] chars, as kept text.
#[must_use]
pub fn short(s: &str) -> ShortText {
    ShortText::from(s.get(..clip_end(s)).unwrap_or(s))
}

impl PollInfo {
    /// The plain-text view of a query result. Text is clipped to [`MAX_POLL_TEXT`] chars,
    /// players and rules to [`MAX_POLL_PLAYERS`] / [`MAX_POLL_RULES`]; the game port is read
    /// from a `hostport` rule when there is one.
    #[must_use]
    pub fn from_server_info(info: &ServerInfo) -> Self {
        let rules: Rules = info
            .rules
            .iter()
            .map(|r| (&r.key.plain, &r.value.plain))
            .collect();
        let game_port = rules.get("hostport").and_then(|v| v.trim().parse().ok());
        Self::from(PollFields {
            name: short(&info.name.plain),
            map: short(&info.map.plain),
            game_type: short(&info.game_type.plain),
            num_players: info.num_players,
            max_players: info.max_players,
            password: info.password,
            players: info
                .players
                .iter()
                .take(MAX_POLL_PLAYERS)
                .map(|p| {
                    PollPlayer::new(short(&p.name.plain))
                        .with_score(p.score.map(PollPlayer::score_of))
                        .with_ping_ms(p.ping_ms.map(PollPlayer::ping_of))
                        .with_team(p.team.map(PollPlayer::team_of))
                        .with_spectator(p.spectator)
                        .with_bot(bot_flag(p))
                })
                .collect(),
            rules,
            game_port,
        })
    }

    /// The packed string in its four parts: name, map, game type, and the rules (each empty
    /// when the string is).
    fn parts(&self) -> std::str::SplitN<'_, char> {
        self.texts.splitn(4, '\0')
    }

    /// Name, map and game type, found in one pass (for a caller that wants more than one).
    #[must_use]
    pub fn texts(&self) -> [&str; 3] {
        let mut parts = self.parts();
        std::array::from_fn(|_| parts.next().unwrap_or_default())
    }

    /// Server name, plain text.
    #[must_use]
    pub fn name(&self) -> &str {
        self.parts().next().unwrap_or_default()
    }

    /// Map.
    #[must_use]
    pub fn map(&self) -> &str {
        self.parts().nth(1).unwrap_or_default()
    }

    /// Game type / mode.
    #[must_use]
    pub fn game_type(&self) -> &str {
        self.parts().nth(2).unwrap_or_default()
    }

    /// Rules as (key, value), plain text.
    #[must_use]
    pub fn rules(&self) -> RulesView<'_> {
        RulesView(self.parts().nth(3).unwrap_or_default())
    }

    /// The value of the rule `key` (ASCII case-insensitive), if there is one.
    #[must_use]
    pub fn rule(&self, key: &str) -> Option<&str> {
        self.rules().get(key)
    }

    /// Its fields, to change and build again.
    #[must_use]
    pub fn to_fields(&self) -> PollFields {
        let [name, map, game_type] = self.texts();
        PollFields {
            name: name.into(),
            map: map.into(),
            game_type: game_type.into(),
            num_players: self.num_players,
            max_players: self.max_players,
            password: self.password,
            players: self.players.clone(),
            rules: self.rules().to_rules(),
            game_port: self.game_port,
        }
    }
}

/// The URL schemes of the streams a DDNet server registers (`teeworlds-master.md` §3.1).
pub const DDNET_STREAM_SCHEMES: [&str; 3] = ["tw-0.5+udp", "tw-0.6+udp", "tw-0.7+udp"];

/// One address (stream) a DDNet server registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdnetStream {
    url: StreamUrl,
    /// Its last successful register POST.
    pub last: Timestamp,
}

/// A stream's URL. The master lists a stream at the address it was registered from, so a URL
/// is nearly always `<scheme>://<the record's address>`: then only the scheme is kept, and
/// the URL is spelled again from the record's address when asked for (an `Arc<str>` of it took
/// ~60 bytes per DDNet server).
#[derive(Debug, Clone, PartialEq, Eq)]
enum StreamUrl {
    /// `<DDNET_STREAM_SCHEMES[i]>://<the record's address>`.
    Own(u8),
    /// Any other URL, as given.
    Other(Arc<str>),
}

const _: () = assert!(size_of::<DdnetStream>() <= 24);

impl DdnetStream {
    /// The stream listed under `url`, of the record at `addr`, last registered at `last`.
    #[must_use]
    pub fn new(url: &str, addr: &GameAddr, last: Timestamp) -> Self {
        let own = url.split_once("://").and_then(|(scheme, rest)| {
            let i = DDNET_STREAM_SCHEMES.iter().position(|s| *s == scheme)?;
            (rest == addr.to_string()).then(|| u8::try_from(i).ok())?
        });
        Self {
            url: own.map_or_else(|| StreamUrl::Other(Arc::from(url)), StreamUrl::Own),
            last,
        }
    }

    /// The URL as listed in `servers.json` (`tw-0.7+udp://1.2.3.4:8303`), for the stream of
    /// the record at `addr`.
    #[must_use]
    pub fn url(&self, addr: &GameAddr) -> std::borrow::Cow<'_, str> {
        match &self.url {
            StreamUrl::Own(i) => {
                let scheme = DDNET_STREAM_SCHEMES
                    .get(usize::from(*i))
                    .copied()
                    .unwrap_or_default();
                std::borrow::Cow::Owned(format!("{scheme}://{addr}"))
            }
            StreamUrl::Other(u) => std::borrow::Cow::Borrowed(u),
        }
    }

    /// Whether this stream of the record at `addr` is listed under `url`.
    #[must_use]
    pub fn is(&self, url: &str, addr: &GameAddr) -> bool {
        match &self.url {
            StreamUrl::Own(_) => self.url(addr) == url,
            StreamUrl::Other(u) => **u == *url,
        }
    }
}

/// A DDNet server's `Secret` (`teeworlds-master.md` §3.1): a random UUID per server process.
/// A UUID in its usual spelling (lower-case hex in 8-4-4-4-12 groups) is kept as its 16 bytes,
/// and spelled again the same way: a string of it took ~56 bytes of heap per DDNet server. Any
/// other text is kept as given.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum DdnetSecret {
    /// A UUID, as its bytes.
    Uuid([u8; 16]),
    /// Any other secret, as given.
    Text(Arc<str>),
}

impl DdnetSecret {
    /// Bytes per hyphen-separated group of a UUID's usual spelling (8-4-4-4-12 hex digits).
    const GROUPS: [usize; 5] = [4, 2, 2, 2, 6];

    /// The bytes of `s` when it is a UUID in its usual spelling.
    fn uuid_of(s: &str) -> Option<[u8; 16]> {
        // Lower case only: upper case would not be spelled back the same.
        if s.bytes().any(|c| c.is_ascii_uppercase()) {
            return None;
        }
        let mut out = [0u8; 16];
        let mut parts = s.split('-');
        let mut at = 0;
        for n in Self::GROUPS {
            hex::decode_to_slice(parts.next()?, out.get_mut(at..at + n)?).ok()?;
            at += n;
        }
        parts.next().is_none().then_some(out)
    }
}

impl From<&str> for DdnetSecret {
    fn from(s: &str) -> Self {
        Self::uuid_of(s).map_or_else(|| Self::Text(Arc::from(s)), Self::Uuid)
    }
}

impl fmt::Display for DdnetSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uuid(b) => {
                let mut rest = &b[..];
                for (i, n) in Self::GROUPS.into_iter().enumerate() {
                    let (group, tail) = rest.split_at(n.min(rest.len()));
                    if i > 0 {
                        f.write_str("-")?;
                    }
                    group.iter().try_for_each(|byte| write!(f, "{byte:02x}"))?;
                    rest = tail;
                }
                Ok(())
            }
            Self::Text(t) => f.write_str(t),
        }
    }
}

impl fmt::Debug for DdnetSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DdnetSecret({self})")
    }
}

/// What a DDNet server registered at a record's address (`teeworlds-master.md` §3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdnetData {
    /// The server's `Secret`; the addresses of one secret are one `servers.json` entry.
    pub secret: DdnetSecret,
    /// The `Info-Serial` of `info`.
    pub serial: i64,
    /// The info object exactly as registered (compact JSON, at most [`MAX_DDNET_INFO`] bytes);
    /// in the registry's info file once the registry holds it.
    pub info: super::infos::DdnetInfo,
    /// The streams registered at this address, sorted by URL (a boxed slice: nearly every
    /// server has one, and a `Vec`'s capacity would take the data into the next allocator
    /// size class).
    pub streams: Box<[DdnetStream]>,
}

// The data and its `Arc` counts fill one 80-byte allocator size class.
const _: () = assert!(size_of::<DdnetData>() <= 64);

/// Most sources one record keeps (a direct registration and one per upstream; upstreams come
/// from the configuration, so real records stay far below it).
pub const MAX_SOURCES: usize = 32;

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// A face proved it here: the server registered with this master (a challenge answered,
    /// a handshake).
    Direct,
    /// Learned from the configured upstream master of this name, and listed only after this
    /// master queried the server successfully itself.
    Upstream(Arc<str>),
}

impl Origin {
    /// The upstream's name, for a learned source.
    #[must_use]
    pub fn upstream(&self) -> Option<&str> {
        match self {
            Self::Direct => None,
            Self::Upstream(name) => Some(name),
        }
    }
}

/// One source of a record, and when it last vouched for the server (for [`Origin::Direct`]:
/// the last proof or heartbeat; for an upstream: the last pull that listed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Who.
    pub origin: Origin,
    /// When it last saw the server.
    pub last_seen: Timestamp,
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
    /// Unique while the process runs (given in creation and load order); the views key by it.
    pub id: u64,
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
    /// When it was first registered (and verified: there is no earlier state); the stable
    /// list order.
    pub first_seen: Timestamp,
    /// The last valid heartbeat (a proof counts as one).
    pub last_heartbeat: Timestamp,
    /// The last proof of ownership (registration or re-verification).
    pub last_proof: Timestamp,
    /// Re-verification challenges sent since the last proof, without an answer.
    pub challenges_unanswered: u8,
    /// When the last of those went out.
    pub last_challenge: Timestamp,
    /// The last successful poll.
    ///
    /// Kept as milliseconds + 1 in a `NonZeroU64`, so that "never" takes no room of its own
    /// (8 bytes where an `Option<Timestamp>` takes 16); read and set it through
    /// [`Record::last_poll_ok`] and [`Record::set_last_poll_ok`].
    last_poll_ok: Option<std::num::NonZeroU64>,
    /// What the last successful poll (or the registration itself) said.
    pub info: Option<Arc<PollInfo>>,
    /// Polls failed in a row since the last success.
    pub poll_failures: u32,
    /// The registering source, for the per-source cap.
    pub source: SourceKey,
    /// What a DDNet server registered at this address.
    pub ddnet: Option<Arc<DdnetData>>,
    /// Where it came from, [`Origin::Direct`] first, then the upstreams by name; at most
    /// [`MAX_SOURCES`]. Empty only for a record built by hand (read as direct). A boxed
    /// slice, not a `Vec`: sources change rarely, and the 8 bytes of a capacity would take
    /// every record into the next allocator size class.
    pub sources: Box<[Source]>,
}

// A record and its `Arc` counts fill one 224-byte allocator size class; 8 bytes more and
// every record takes the next class (256 bytes): 32 bytes per server at any size.
const _: () = assert!(size_of::<Record>() <= 208);

impl Record {
    /// The last successful poll, if any.
    #[must_use]
    pub fn last_poll_ok(&self) -> Option<Timestamp> {
        self.last_poll_ok
            .map(|t| Timestamp(t.get().saturating_sub(1)))
    }

    /// Sets the last successful poll (a time of [`Timestamp::NEVER`] reads back as none).
    pub fn set_last_poll_ok(&mut self, t: Option<Timestamp>) {
        self.last_poll_ok = t.and_then(|t| std::num::NonZeroU64::new(t.0.wrapping_add(1)));
    }

    /// A fresh listed record for `reg` at `now`.
    #[must_use]
    pub fn new(id: u64, reg: Registration, now: Timestamp) -> Self {
        Self {
            id,
            key: reg.key,
            face: reg.face,
            game_port: reg.game_port,
            query_addr: reg.query_addr,
            query_protocol: reg.query_protocol,
            state: Verification::Verified,
            first_seen: now,
            last_heartbeat: now,
            last_proof: now,
            challenges_unanswered: 0,
            last_challenge: Timestamp::default(),
            last_poll_ok: None,
            info: None,
            poll_failures: 0,
            source: reg.source,
            ddnet: None,
            sources: Box::new([Source {
                origin: Origin::Direct,
                last_seen: now,
            }]),
        }
    }

    /// Whether a face registered it here (or it predates sources): the registration's face
    /// rules decide its lifetime, and it is exported as this master's own.
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.sources.is_empty() || self.sources.iter().any(|s| s.origin == Origin::Direct)
    }

    /// When the upstream `name` last listed it, if it is one of its sources.
    #[must_use]
    pub fn seen_by(&self, name: &str) -> Option<Timestamp> {
        self.sources
            .iter()
            .find(|s| s.origin.upstream() == Some(name))
            .map(|s| s.last_seen)
    }

    /// The last time any upstream listed it (`None`: no upstream source).
    #[must_use]
    pub fn last_learned(&self) -> Option<Timestamp> {
        self.sources
            .iter()
            .filter(|s| s.origin != Origin::Direct)
            .map(|s| s.last_seen)
            .max()
    }

    /// Keeps only the sources `keep` accepts.
    pub fn retain_sources(&mut self, keep: impl FnMut(&Source) -> bool) {
        let mut sources = std::mem::take(&mut self.sources).into_vec();
        sources.retain(keep);
        self.sources = sources.into_boxed_slice();
    }

    /// Adds `origin` or moves its time to `now` (never back); returns whether it was added.
    /// A record already at [`MAX_SOURCES`] keeps its sources.
    pub fn see(&mut self, origin: &Origin, now: Timestamp) -> bool {
        if let Some(s) = self.sources.iter_mut().find(|s| s.origin == *origin) {
            s.last_seen = s.last_seen.max(now);
            return false;
        }
        if self.sources.len() >= MAX_SOURCES {
            return false;
        }
        let mut sources = std::mem::take(&mut self.sources).into_vec();
        sources.push(Source {
            origin: origin.clone(),
            last_seen: now,
        });
        sources.sort_by(|a, b| a.origin.cmp(&b.origin));
        self.sources = sources.into_boxed_slice();
        true
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

    /// The address lists and the API show: the game address when known, else the registered
    /// one.
    #[must_use]
    pub fn shown_addr(&self) -> String {
        self.game_addr()
            .map_or_else(|| self.key.addr.to_string(), |a| a.to_string())
    }

    /// Players on the server (0 when unknown).
    #[must_use]
    pub fn players(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.num_players)
    }

    /// Player slots (0 when unknown).
    #[must_use]
    pub fn max_players(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.max_players)
    }

    /// The stable list order: first registration, then id.
    #[must_use]
    pub fn order_key(&self) -> (Timestamp, u64) {
        (self.first_seen, self.id)
    }
}
