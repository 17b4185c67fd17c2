//! Who a record is: its game and address ([`ServerKey`]), the face that registered it, and
//! time as the registry counts it.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use muster_proto::Protocol;

pub use super::game_name::GameName;

/// Short text kept inline: a game name, a map, a player's name or a rule of up to 24 bytes
/// takes no allocation of its own (most of them are that short), which is most of a record's
/// memory and allocations after the record itself.
pub use compact_str::CompactString as ShortText;

/// Longest game name accepted, in bytes.
pub const MAX_GAME_LEN: usize = 64;
/// Longest host name accepted in a [`GameAddr::Host`] (DNS limit).
pub const MAX_HOST_LEN: usize = 253;

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
    /// Quake III / DarkPlaces master (dpmaster's protocol), UDP 27950.
    Quake3,
    /// Half-Life / Xash3D master (xash3d-master's protocol), UDP 27010.
    Valve,
}

impl Face {
    /// Every face, in a fixed order (for metrics).
    pub const ALL: [Self; 8] = [
        Self::GameAgent,
        Self::GameSpy,
        Self::Teeworlds07,
        Self::Teeworlds06,
        Self::DdnetHttp,
        Self::Mgmt,
        Self::Quake3,
        Self::Valve,
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
            Self::Quake3 => "quake3",
            Self::Valve => "valve",
        }
    }

    /// The protocol family: `gameagent`, `gamespy`, `teeworlds`, `mgmt`, `quake3` or `valve`.
    #[must_use]
    pub const fn family(self) -> &'static str {
        match self {
            Self::GameAgent => "gameagent",
            Self::GameSpy => "gamespy",
            Self::Teeworlds07 | Self::Teeworlds06 | Self::DdnetHttp => "teeworlds",
            Self::Mgmt => "mgmt",
            Self::Quake3 => "quake3",
            Self::Valve => "valve",
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
        Protocol::Quake3,
        Protocol::A2s,
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
    /// Game name, ASCII lower-cased by [`ServerKey::new`]; one shared copy per name.
    pub game: GameName,
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
            game: if game.bytes().any(|b| b.is_ascii_uppercase()) {
                let mut g = ShortText::from(game);
                g.as_mut_str().make_ascii_lowercase();
                GameName::new(&g)
            } else {
                GameName::new(game)
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
