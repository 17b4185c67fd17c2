//! The configuration of federation: `[[upstream]]` entries (masters to learn from) and the
//! `[federation]` section (who may sync our list, what is shared, how long learned records
//! live).
//!
//! ```toml
//! [[upstream]]
//! kind = "gamespy"                   # gamespy | gameagent | teeworlds06 | teeworlds07 | ddnet
//! address = "master.example:28900"   #   | ut2003-text | muster | quake3 | valve
//! games = ["ut", "unreal"]           # GameSpy: the games to pull (default: the whole table)
//! interval = "5m"                    # pulled at start, then every interval (with jitter)
//!
//! [federation]
//! sync_peers = ["192.0.2.7", "198.51.100.0/24"]
//! ```
//!
//! Pure parsing and validation; [`super`] runs what it describes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config_error::ConfigError;
use muster_core::config::HumanDuration;

/// Default of [`UpstreamConfig::interval`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
/// Default of [`UpstreamConfig::max_unverified`].
pub const DEFAULT_MAX_UNVERIFIED: usize = 4096;
/// Default of [`UpstreamConfig::verify_per_second`].
pub const DEFAULT_VERIFY_PER_SECOND: u32 = 20;
/// Shortest interval accepted (a pull is a TCP or HTTP conversation, not a heartbeat).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Longest upstream name accepted, in bytes (it is a metrics label and a stored source).
pub const MAX_NAME_LEN: usize = 64;
/// Most upstreams one daemon pulls from (each is a metrics label: cardinality stays bounded).
pub const MAX_UPSTREAMS: usize = 64;

/// What kind of master an upstream is, and so how it is pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum UpstreamKind {
    /// A GameSpy master's TCP list server: `\sync\` (333networks masters) or a `\list\` per
    /// game ("applet" mode).
    #[serde(rename = "gamespy")]
    Gamespy,
    /// A Serious Sam GameAgent master (UDP).
    #[serde(rename = "gameagent")]
    GameAgent,
    /// A Teeworlds 0.6 master (UDP).
    #[serde(rename = "teeworlds06")]
    Teeworlds06,
    /// A Teeworlds 0.7 master (UDP).
    #[serde(rename = "teeworlds07")]
    Teeworlds07,
    /// DDNet's HTTP master document (`servers.json`), by URL.
    #[serde(rename = "ddnet")]
    Ddnet,
    /// A UT2003 plain-text list, by URL.
    #[serde(rename = "ut2003-text")]
    Ut2003Text,
    /// Another Muster: its `/api/v1/servers`, by base URL.
    #[serde(rename = "muster")]
    Muster,
    /// A Quake III / DarkPlaces master (dpmaster, or Muster's face), UDP: `getserversExt` per
    /// configured game (`GAME` or `GAME:PROTOCOL`), or `getservers 68` (Quake III Arena).
    #[serde(rename = "quake3")]
    Quake3,
    /// A Half-Life / Xash3D master (xash3d-master, or Muster's face), UDP: the Valve master
    /// query, paged, one filter `\gamedir\GAME` per configured game (none: every server).
    #[serde(rename = "valve")]
    Valve,
}

impl UpstreamKind {
    /// Every kind.
    pub const ALL: [Self; 9] = [
        Self::Gamespy,
        Self::GameAgent,
        Self::Teeworlds06,
        Self::Teeworlds07,
        Self::Ddnet,
        Self::Ut2003Text,
        Self::Muster,
        Self::Quake3,
        Self::Valve,
    ];

    /// The name as the configuration and `--upstream` spell it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Gamespy => "gamespy",
            Self::GameAgent => "gameagent",
            Self::Teeworlds06 => "teeworlds06",
            Self::Teeworlds07 => "teeworlds07",
            Self::Ddnet => "ddnet",
            Self::Ut2003Text => "ut2003-text",
            Self::Muster => "muster",
            Self::Quake3 => "quake3",
            Self::Valve => "valve",
        }
    }

    /// The kind called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the address is a URL (else `host:port`).
    #[must_use]
    pub const fn takes_url(self) -> bool {
        matches!(self, Self::Ddnet | Self::Ut2003Text | Self::Muster)
    }
}

/// How a GameSpy upstream is pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GameSpyMode {
    /// `\sync\` for every game at once; a master that does not answer it with a sync reply
    /// is asked game by game with `\list\` in the same pull.
    #[default]
    Auto,
    /// `\sync\` only (a 333networks master).
    Sync,
    /// A `\list\` per game only, as a game's browser asks (the 333networks "applet" mode,
    /// for masters that do not sync).
    List,
}

/// One `[[upstream]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The name shown in metrics, health, logs and the records' sources (default:
    /// `<kind>:<address>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What kind of master it is.
    pub kind: UpstreamKind,
    /// `host:port` for the UDP and GameSpy masters, a URL (`http(s)://…`) for `ddnet` and
    /// `ut2003-text`, the base URL (`http://host:8080`) for `muster`.
    pub address: String,
    /// Games to learn. GameSpy: the gamenames to pull (each needs its validate key in the
    /// game table; default every game of the table). Other kinds: only these games are
    /// learned (default all).
    #[serde(default)]
    pub games: Vec<String>,
    /// Pulled at start and then once per interval, with up to a tenth of it as random jitter.
    #[serde(default = "default_interval")]
    pub interval: HumanDuration,
    /// GameSpy only: `auto`, `sync` or `list`.
    #[serde(default)]
    pub mode: GameSpyMode,
    /// Servers listed by this upstream but not verified yet, kept at most (the rest waits for
    /// a later pull).
    #[serde(default = "default_max_unverified")]
    pub max_unverified: usize,
    /// Verification queries sent per second at most.
    #[serde(default = "default_verify_per_second")]
    pub verify_per_second: u32,
    /// Also learn what the upstream itself learned from others (`muster` upstreams say so
    /// per record); default false, so that masters pulling from each other do not keep each
    /// other's copies alive.
    #[serde(default)]
    pub learn_learned: bool,
}

fn default_interval() -> HumanDuration {
    HumanDuration(DEFAULT_INTERVAL)
}

fn default_max_unverified() -> usize {
    DEFAULT_MAX_UNVERIFIED
}

fn default_verify_per_second() -> u32 {
    DEFAULT_VERIFY_PER_SECOND
}

impl UpstreamConfig {
    /// An upstream of `kind` at `address` with every other field at its default.
    #[must_use]
    pub fn new(kind: UpstreamKind, address: &str) -> Self {
        Self {
            name: None,
            kind,
            address: address.to_owned(),
            games: Vec::new(),
            interval: default_interval(),
            mode: GameSpyMode::default(),
            max_unverified: DEFAULT_MAX_UNVERIFIED,
            verify_per_second: DEFAULT_VERIFY_PER_SECOND,
            learn_learned: false,
        }
    }

    /// Parses the `--upstream KIND:ADDR` form: `gamespy:host:28900`,
    /// `muster:http://host:8080`, `ddnet:https://host/ddnet/15/servers.json`, …
    pub fn parse_flag(s: &str) -> Result<Self, ConfigError> {
        let (kind, address) = s
            .split_once(':')
            .ok_or(ConfigError::Invalid("upstream (KIND:ADDRESS)"))?;
        let kind = UpstreamKind::from_name(kind).ok_or(ConfigError::Invalid("upstream kind"))?;
        let c = Self::new(kind, address);
        c.validate()?;
        Ok(c)
    }

    /// The name shown for it: [`UpstreamConfig::name`] or `<kind>:<address>`.
    #[must_use]
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.kind.name(), self.address))
    }

    /// Checks what the types cannot: the address form, the interval, the caps, the name.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = self.address.starts_with("http://") || self.address.starts_with("https://");
        if self.kind.takes_url() != url || self.address.is_empty() {
            return Err(ConfigError::Invalid("upstream.address"));
        }
        if !url && host_port(&self.address).is_none() {
            return Err(ConfigError::Invalid("upstream.address"));
        }
        if self.interval.0 < MIN_INTERVAL {
            return Err(ConfigError::Invalid("upstream.interval"));
        }
        if self.max_unverified == 0 {
            return Err(ConfigError::Invalid("upstream.max_unverified"));
        }
        if self.verify_per_second == 0 {
            return Err(ConfigError::Invalid("upstream.verify_per_second"));
        }
        let name = self.display_name();
        if name.is_empty()
            || name.len() > MAX_NAME_LEN
            || !name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(ConfigError::Invalid("upstream.name"));
        }
        if self.mode != GameSpyMode::Auto && self.kind != UpstreamKind::Gamespy {
            return Err(ConfigError::Invalid("upstream.mode"));
        }
        Ok(())
    }
}

/// `host:port` (or `[v6]:port`) split, `None` without a port.
#[must_use]
pub fn host_port(s: &str) -> Option<(&str, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then_some((host, port))
}

pub use muster_core::config::Net;

/// The `[federation]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FederationConfig {
    /// Addresses or networks whose list requests for all games at once (`\sync\`, as the
    /// 333networks masters ask each other) are answered, once they authenticated with the
    /// `333networks` key. The hosts of `gamespy` upstreams are added to it. Empty (the
    /// default) and no `gamespy` upstream: nobody syncs.
    pub sync_peers: Vec<String>,
    /// Share learned records too when answering a sync (default false: only servers that
    /// registered here, as the 333networks Qt5 master does; learned ones are the upstream's
    /// to share).
    pub export_learned: bool,
    /// How long an upstream's word keeps a learned record after the last pull that listed it
    /// (at least three intervals of the slowest upstream are used).
    pub learned_lifetime: HumanDuration,
}

impl Default for FederationConfig {
    fn default() -> Self {
        Self {
            sync_peers: Vec::new(),
            export_learned: false,
            learned_lifetime: HumanDuration(muster_core::registry::DEFAULT_LEARNED_LIFETIME),
        }
    }
}

impl FederationConfig {
    /// The sync peers, parsed.
    pub fn peers(&self) -> Result<Vec<Net>, ConfigError> {
        self.sync_peers
            .iter()
            .map(|s| Net::parse(s).map_err(ConfigError::from))
            .collect()
    }
}

/// Checks every upstream and the federation section together (names must be unique).
pub fn validate(upstreams: &[UpstreamConfig], f: &FederationConfig) -> Result<(), ConfigError> {
    if upstreams.len() > MAX_UPSTREAMS {
        return Err(ConfigError::Invalid("upstream (too many)"));
    }
    let mut names = std::collections::HashSet::new();
    for u in upstreams {
        u.validate()?;
        if !names.insert(u.display_name()) {
            return Err(ConfigError::Invalid("upstream.name (not unique)"));
        }
    }
    f.peers()?;
    if f.learned_lifetime.0.is_zero() {
        return Err(ConfigError::Invalid("federation.learned_lifetime"));
    }
    Ok(())
}

/// The lifetime of learned records: the configured one, but at least three intervals of the
/// slowest upstream (so that one late pull never drops what it lists).
#[must_use]
pub fn learned_lifetime(upstreams: &[UpstreamConfig], f: &FederationConfig) -> Duration {
    upstreams
        .iter()
        .map(|u| u.interval.0.saturating_mul(3))
        .fold(f.learned_lifetime.0, Duration::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_every_kind() {
        let cases = [
            (
                "muster:http://host:8080",
                UpstreamKind::Muster,
                "http://host:8080",
            ),
            ("gameagent:host:9005", UpstreamKind::GameAgent, "host:9005"),
            (
                "teeworlds06:host:8300",
                UpstreamKind::Teeworlds06,
                "host:8300",
            ),
            (
                "teeworlds07:host:8283",
                UpstreamKind::Teeworlds07,
                "host:8283",
            ),
            (
                "ddnet:https://host/ddnet/15/servers.json",
                UpstreamKind::Ddnet,
                "https://host/ddnet/15/servers.json",
            ),
            (
                "ut2003-text:http://h/serverlist/full-all.txt",
                UpstreamKind::Ut2003Text,
                "http://h/serverlist/full-all.txt",
            ),
            ("gamespy:host:28900", UpstreamKind::Gamespy, "host:28900"),
            ("gamespy:[::1]:28900", UpstreamKind::Gamespy, "[::1]:28900"),
        ];
        for (flag, kind, address) in cases {
            let c = UpstreamConfig::parse_flag(flag).unwrap();
            assert_eq!((c.kind, c.address.as_str()), (kind, address), "{flag}");
            assert_eq!(c.interval.0, DEFAULT_INTERVAL);
            assert_eq!(c.display_name(), flag);
        }
        for bad in [
            "gamespy",
            "nope:host:1",
            "gamespy:host",
            "gamespy:http://x",
            "muster:host:8080",
            "ddnet:",
            "gamespy:host:0",
        ] {
            assert!(UpstreamConfig::parse_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn networks() {
        let n = Net::parse("198.51.100.0/24").unwrap();
        assert!(n.contains("198.51.100.77".parse().unwrap()));
        assert!(n.contains("::ffff:198.51.100.1".parse().unwrap()));
        assert!(!n.contains("198.51.101.1".parse().unwrap()));
        let one = Net::parse("192.0.2.7").unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        assert!(
            Net::parse("0.0.0.0/0")
                .unwrap()
                .contains("203.0.113.1".parse().unwrap())
        );
        assert!(
            Net::parse("2001:db8::/32")
                .unwrap()
                .contains("2001:db8::9".parse().unwrap())
        );
        assert!(Net::parse("1.2.3.4/33").is_err());
        assert!(Net::parse("x").is_err());
    }

    #[test]
    fn names_unique_and_lifetime_covers_three_intervals() {
        let mut a = UpstreamConfig::new(UpstreamKind::Gamespy, "h:1");
        let b = a.clone();
        let f = FederationConfig::default();
        assert!(validate(&[a.clone(), b.clone()], &f).is_err());
        a.name = Some("a".into());
        assert!(validate(&[a.clone(), b.clone()], &f).is_ok());
        assert_eq!(
            learned_lifetime(&[a.clone()], &f),
            Duration::from_secs(1800)
        );
        a.interval = HumanDuration(Duration::from_secs(3600));
        assert_eq!(learned_lifetime(&[a, b], &f), Duration::from_secs(3 * 3600));
    }
}
