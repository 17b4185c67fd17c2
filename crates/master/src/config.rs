//! The daemon configuration: a TOML file, every key optional, defaults from the specs.
//!
//! ```toml
//! data_dir = "/var/lib/muster"
//!
//! [listen]                      # each: "off", one address, or a list of addresses
//! gameagent   = ["0.0.0.0:9005", "[::]:9005"]
//! gamespy_udp = "off"
//! http        = "127.0.0.1:0"   # port 0: the OS picks one
//!
//! [limits]
//! servers_per_source = 64
//! tcp_idle_timeout = "15s"
//!
//! [lifetimes]
//! gamespy = "300s"
//! games = { serioussamse = "570s" }
//!
//! [poller]
//! interval = "300s"
//!
//! [history]
//! retention = "24h"
//! ```
//!
//! Every face listens on IPv4 and IPv6 (`0.0.0.0:P` and `[::]:P`) unless configured. Durations
//! are humantime strings (`"90s"`, `"10m"`). Unknown keys are errors, so a typo is not silently
//! ignored. An error names the file, the line and column, the key and what was expected
//! ([`Diagnostic`]). [`Config::to_toml`] writes a configuration back out, every key included.
//! This module only parses and validates; binding is [`muster_faces::runtime::bind_tcp`]'s job.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use muster_core::registry::{Face, RegistryConfig};

pub use muster_core::config::ports;

use crate::config_error::locate;
pub use crate::config_error::{ConfigError, Diagnostic};

pub use muster_core::config::HumanDuration;

/// Where a face listens: nowhere (`"off"`) or on these addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen(pub Vec<SocketAddr>);

impl Listen {
    /// `0.0.0.0:port` and `[::]:port`.
    #[must_use]
    pub fn dual(port: u16) -> Self {
        Self(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
        ])
    }

    /// Off.
    #[must_use]
    pub fn off() -> Self {
        Self(Vec::new())
    }

    /// Whether the face is off.
    #[must_use]
    pub fn is_off(&self) -> bool {
        self.0.is_empty()
    }

    /// Parses `off`, one address, or addresses separated by commas (the form a command-line
    /// flag takes).
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        if s.trim() == "off" {
            return Ok(Self::off());
        }
        s.split(',')
            .map(|a| a.trim().parse().map_err(|_| ConfigError::Invalid("listen")))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            Many(Vec<String>),
        }
        let list = match Raw::deserialize(d)? {
            Raw::One(s) => {
                return Self::parse(&s).map_err(|_| serde::de::Error::custom(listen_expected(&s)));
            }
            Raw::Many(v) => v,
        };
        list.iter()
            .map(|a| {
                a.parse()
                    .map_err(|_| serde::de::Error::custom(listen_expected(a)))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }
}

fn listen_expected(found: &str) -> String {
    format!(
        "expected \"off\", an address such as \"0.0.0.0:8080\" or \"[::]:8080\", or a list of \
         them; found {found:?}"
    )
}

impl Serialize for Listen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_off() {
            return s.serialize_str("off");
        }
        let addrs: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        addrs.serialize(s)
    }
}

/// Listen addresses per face.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// GameAgent master, UDP 9005.
    pub gameagent: Listen,
    /// GameSpy heartbeats, UDP 27900.
    pub gamespy_udp: Listen,
    /// GameSpy lists, TCP 28900.
    pub gamespy_tcp: Listen,
    /// Teeworlds 0.7 master, UDP 8283.
    pub teeworlds07: Listen,
    /// Teeworlds 0.6 master, UDP 8300.
    pub teeworlds06: Listen,
    /// HTTP, TCP 8080.
    pub http: Listen,
    /// Management server, TCP 51963.
    pub mgmt: Listen,
    /// Quake III / DarkPlaces master (dpmaster's protocol), UDP 27950.
    pub quake3: Listen,
    /// Half-Life / Xash3D master (xash3d-master's protocol), UDP 27010.
    pub valve: Listen,
}

impl ListenConfig {
    /// The addresses of the face-table face called `name` (`gamespy-udp` is the
    /// `gamespy_udp` key); a name the table does not have listens nowhere.
    #[must_use]
    pub fn face(&self, name: &str) -> &Listen {
        static NOWHERE: Listen = Listen(Vec::new());
        match name {
            "gameagent" => &self.gameagent,
            "gamespy-udp" => &self.gamespy_udp,
            "gamespy-tcp" => &self.gamespy_tcp,
            "teeworlds07" => &self.teeworlds07,
            "teeworlds06" => &self.teeworlds06,
            "mgmt" => &self.mgmt,
            "quake3" => &self.quake3,
            "valve" => &self.valve,
            _ => &NOWHERE,
        }
    }

    /// Every face off; turn on the ones wanted (tests bind only what they use).
    #[must_use]
    pub fn off() -> Self {
        Self {
            gameagent: Listen(Vec::new()),
            gamespy_udp: Listen(Vec::new()),
            gamespy_tcp: Listen(Vec::new()),
            teeworlds07: Listen(Vec::new()),
            teeworlds06: Listen(Vec::new()),
            http: Listen(Vec::new()),
            mgmt: Listen(Vec::new()),
            quake3: Listen(Vec::new()),
            valve: Listen(Vec::new()),
        }
    }
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            gameagent: Listen::dual(ports::GAMEAGENT),
            gamespy_udp: Listen::dual(ports::GAMESPY_UDP),
            gamespy_tcp: Listen::dual(ports::GAMESPY_TCP),
            teeworlds07: Listen::dual(ports::TEEWORLDS07),
            teeworlds06: Listen::dual(ports::TEEWORLDS06),
            http: Listen::dual(ports::HTTP),
            mgmt: Listen::dual(ports::MGMT),
            quake3: Listen::dual(ports::QUAKE3),
            valve: Listen::dual(ports::VALVE),
        }
    }
}

pub use muster_core::config::LimitsConfig;

/// Lifetimes after the last valid heartbeat or successful poll.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifetimesConfig {
    /// Pending records.
    pub pending: HumanDuration,
    /// GameAgent registrations (`gameagent.md` §8.3.7).
    pub gameagent: HumanDuration,
    /// GameSpy heartbeats (Unreal family, `gamespy-master.md` §14).
    pub gamespy: HumanDuration,
    /// Teeworlds UDP registrations (`teeworlds-master.md` §5.3).
    pub teeworlds: HumanDuration,
    /// DDNet HTTP registrations (`teeworlds-master.md` §5.3).
    pub ddnet: HumanDuration,
    /// Quake III / DarkPlaces registrations (dpmaster keeps a server 15 minutes after its last
    /// valid `infoResponse`).
    pub quake3: HumanDuration,
    /// Half-Life / Xash3D registrations (xash3d-master keeps a server 5 minutes after its
    /// last heartbeat).
    pub valve: HumanDuration,
    /// Per-face, per-game overrides, as `[lifetimes.games.<face>] <game> = "570s"` (face names
    /// as `registry::Face::name` spells them). Default: Serious Sam gamenames heartbeating by
    /// GameSpy (every 150 s) live 570 s.
    #[serde(serialize_with = "sorted")]
    pub games: HashMap<String, HashMap<String, HumanDuration>>,
}

impl Default for LifetimesConfig {
    fn default() -> Self {
        let r = RegistryConfig::default();
        let get = |f: Face| HumanDuration(r.face_lifetimes.get(&f).copied().unwrap_or_default());
        Self {
            pending: HumanDuration(Duration::from_secs(30)),
            gameagent: get(Face::GameAgent),
            gamespy: get(Face::GameSpy),
            teeworlds: get(Face::Teeworlds07),
            ddnet: get(Face::DdnetHttp),
            quake3: get(Face::Quake3),
            valve: get(Face::Valve),
            games: r
                .game_lifetimes
                .into_iter()
                .map(|(f, m)| {
                    let m = m.into_iter().map(|(g, d)| (g, HumanDuration(d))).collect();
                    (f.name().to_owned(), m)
                })
                .collect(),
        }
    }
}

pub use crate::poller::PollerConfig;

/// The player-count history kept for the web page.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Record poll results at all.
    pub enabled: bool,
    /// Samples older than this are pruned (and not served).
    pub retention: HumanDuration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            retention: HumanDuration(Duration::from_secs(24 * 3600)),
        }
    }
}

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the database lives (and, as unnamed files, `servers.json`, its gzip form and the
    /// registered DDNet infos).
    pub data_dir: PathBuf,
    /// Listen addresses.
    pub listen: ListenConfig,
    /// Abuse limits.
    pub limits: LimitsConfig,
    /// Record lifetimes.
    pub lifetimes: LifetimesConfig,
    /// The poller.
    pub poller: PollerConfig,
    /// GameSpy face options.
    pub gamespy: GameSpyConfig,
    /// Quake III / DarkPlaces face options (loopback, flood protection, game policy and
    /// properties).
    pub quake3: muster_faces::quake3::Quake3Config,
    /// Half-Life / Xash3D face options (loopback, minimal server version, challenge window).
    pub valve: muster_faces::valve::ValveConfig,
    /// Player-count history.
    pub history: HistoryConfig,
    /// The HTTP face's options.
    pub http: HttpConfig,
    /// Live events (`GET /api/v1/events`).
    pub events: EventsConfig,
    /// Masters to learn servers from (`[[upstream]]`, see [`crate::upstream::settings`]).
    pub upstream: Vec<crate::upstream::settings::UpstreamConfig>,
    /// Sharing the list with peers, and learned records' lifetime.
    pub federation: crate::upstream::settings::FederationConfig,
    /// DDNet face options.
    pub ddnet: DdnetConfig,
    /// Where the registry is stored.
    pub store: StoreConfig,
}

/// DDNet face options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DdnetConfig {
    /// A CSV file of IP networks and locations (`192.0.2.0/24,eu:de`), as DDNet's master took
    /// ([`muster_core::locations`]): `servers.json` entries and the API's server objects get a
    /// `location`. Empty (the default): none.
    pub locations: PathBuf,
}

/// Where the registry is stored (`[store]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite:PATH` or `postgres://USER:PASS@HOST:PORT/DB` (see [`muster_store::StoreUrl`]);
    /// unset: `sqlite:<data_dir>/muster.sqlite3`. Instances given one PostgreSQL database
    /// share one registry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Live events: `GET /api/v1/events` (Server-Sent Events).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Events kept so that a stream can resume after `Last-Event-ID`.
    pub backlog: usize,
    /// Events one stream may fall behind before it is dropped.
    pub max_lag: usize,
    /// Streams open at once, in total.
    pub max_streams: usize,
    /// Streams open at once from one source (an IPv4 address, an IPv6 /64).
    pub max_streams_per_source: usize,
    /// Streams open at once from one IPv6 /56.
    pub max_streams_per_56: usize,
    /// Streams open at once from one IPv6 /48.
    pub max_streams_per_48: usize,
    /// The last this many streams of `max_streams` (at most a quarter of it) go only to
    /// sources holding fewer than `stream_fair_share` streams.
    pub reserved_streams: usize,
    /// Streams a source may hold and still get one of the reserved ones.
    pub stream_fair_share: usize,
    /// Time between keep-alive comments on a stream.
    pub keep_alive: HumanDuration,
}

impl Default for EventsConfig {
    fn default() -> Self {
        let d = muster_core::events::EventLimits::default();
        Self {
            backlog: d.backlog,
            max_lag: d.lag,
            max_streams: d.max_subscribers,
            max_streams_per_source: d.max_per_source,
            max_streams_per_56: d.prefix.max_per_56,
            max_streams_per_48: d.prefix.max_per_48,
            reserved_streams: d.prefix.reserved,
            stream_fair_share: d.prefix.fair_share,
            keep_alive: HumanDuration(d.keep_alive),
        }
    }
}

impl EventsConfig {
    /// The hub's limits.
    #[must_use]
    pub fn limits(&self) -> muster_core::events::EventLimits {
        muster_core::events::EventLimits {
            backlog: self.backlog,
            lag: self.max_lag,
            max_subscribers: self.max_streams,
            max_per_source: self.max_streams_per_source,
            prefix: muster_faces::runtime::tcp::PrefixCaps {
                max_per_56: self.max_streams_per_56,
                max_per_48: self.max_streams_per_48,
                reserved: self.reserved_streams,
                fair_share: self.stream_fair_share,
            },
            keep_alive: self.keep_alive.0,
        }
    }
}

pub use muster_core::metrics::DEFAULT_SERVER_METRICS_MAX;

pub use muster_http::HttpConfig;

/// GameSpy face options (`gamespy-master.md` §13).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GameSpyConfig {
    /// Close list connections whose `\validate\` is wrong (default: count them and serve the
    /// list, as qstat sends a fixed dummy value).
    pub require_client_validate: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("muster-data"),
            listen: ListenConfig::default(),
            limits: LimitsConfig::default(),
            lifetimes: LifetimesConfig::default(),
            poller: PollerConfig::default(),
            gamespy: GameSpyConfig::default(),
            quake3: muster_faces::quake3::Quake3Config::default(),
            valve: muster_faces::valve::ValveConfig::default(),
            history: HistoryConfig::default(),
            http: HttpConfig::default(),
            events: EventsConfig::default(),
            upstream: Vec::new(),
            federation: crate::upstream::settings::FederationConfig::default(),
            ddnet: DdnetConfig::default(),
            store: StoreConfig::default(),
        }
    }
}

/// Writes a map of maps in key order, so that printed configurations compare line by line.
fn sorted<S: serde::Serializer>(
    map: &HashMap<String, HashMap<String, HumanDuration>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let sorted: std::collections::BTreeMap<&String, std::collections::BTreeMap<&String, _>> =
        map.iter().map(|(k, v)| (k, v.iter().collect())).collect();
    sorted.serialize(s)
}

/// Largest config file read, bytes.
pub const MAX_CONFIG_LEN: u64 = 1 << 20;

impl Config {
    /// Parses TOML text and validates it. Errors carry the line, column and key
    /// ([`ConfigError::diagnostic`]).
    pub fn from_toml(s: &str) -> Result<Self, ConfigError> {
        let c: Self = toml::from_str(s).map_err(|e| ConfigError::parse(s, &e))?;
        c.validate().map_err(|e| match e {
            ConfigError::OutOfRange(mut d) => {
                d.at = d.key.as_deref().and_then(|k| locate(s, k));
                ConfigError::OutOfRange(d)
            }
            e => e,
        })?;
        Ok(c)
    }

    /// Reads and parses a file (at most [`MAX_CONFIG_LEN`] bytes); errors name it.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let len = std::fs::metadata(path)
            .map_err(|e| ConfigError::Read(path.to_owned(), e))?
            .len();
        if len > MAX_CONFIG_LEN {
            return Err(ConfigError::OutOfRange(Box::new(Diagnostic {
                file: Some(path.to_owned()),
                at: None,
                key: None,
                message: format!("the file has {len} bytes; expected at most {MAX_CONFIG_LEN}"),
            })));
        }
        let s = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.to_owned(), e))?;
        Self::from_toml(&s).map_err(|e| e.in_file(path))
    }

    /// The configuration as a TOML file that [`Config::from_toml`] reads back to the same
    /// value: every key, defaults included (`muster serve --print-config`).
    #[must_use]
    pub fn to_toml(&self) -> String {
        // Every field is a string, number, bool, list or table of those: nothing to refuse.
        toml::to_string(self).unwrap_or_default()
    }

    /// Checks values the types cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        let e = &self.events;
        let at_least_1 = "at least 1";
        let positive = "a duration longer than 0s";
        let checks: [(bool, &'static str, &'static str, String); 26] = [
            (
                l.tcp_max_per_56 >= 1,
                "limits.tcp_max_per_56",
                at_least_1,
                l.tcp_max_per_56.to_string(),
            ),
            (
                l.tcp_max_per_48 >= 1,
                "limits.tcp_max_per_48",
                at_least_1,
                l.tcp_max_per_48.to_string(),
            ),
            (
                l.tcp_fair_share >= 1,
                "limits.tcp_fair_share",
                at_least_1,
                l.tcp_fair_share.to_string(),
            ),
            (
                l.servers_json_burst >= 1,
                "limits.servers_json_burst",
                at_least_1,
                l.servers_json_burst.to_string(),
            ),
            (
                l.metrics_burst >= 1,
                "limits.metrics_burst",
                at_least_1,
                l.metrics_burst.to_string(),
            ),
            (
                l.list_bytes_burst >= 1,
                "limits.list_bytes_burst",
                at_least_1,
                l.list_bytes_burst.to_string(),
            ),
            (
                l.tcp_list_burst >= 1,
                "limits.tcp_list_burst",
                at_least_1,
                l.tcp_list_burst.to_string(),
            ),
            (
                l.challenge_burst >= 1,
                "limits.challenge_burst",
                at_least_1,
                l.challenge_burst.to_string(),
            ),
            (
                l.pending_per_face >= 1,
                "limits.pending_per_face",
                at_least_1,
                l.pending_per_face.to_string(),
            ),
            (
                l.heartbeat_burst >= 1,
                "limits.heartbeat_burst",
                at_least_1,
                l.heartbeat_burst.to_string(),
            ),
            (
                l.http_list_burst >= 1,
                "limits.http_list_burst",
                at_least_1,
                l.http_list_burst.to_string(),
            ),
            (
                l.ddnet_register_burst >= 1,
                "limits.ddnet_register_burst",
                at_least_1,
                l.ddnet_register_burst.to_string(),
            ),
            (
                l.ddnet_challenge_burst >= 1,
                "limits.ddnet_challenge_burst",
                at_least_1,
                l.ddnet_challenge_burst.to_string(),
            ),
            (
                l.servers_per_source >= 1,
                "limits.servers_per_source",
                at_least_1,
                l.servers_per_source.to_string(),
            ),
            (
                l.tcp_max_connections >= 1,
                "limits.tcp_max_connections",
                at_least_1,
                l.tcp_max_connections.to_string(),
            ),
            (
                l.tcp_max_per_source >= 1,
                "limits.tcp_max_per_source",
                at_least_1,
                l.tcp_max_per_source.to_string(),
            ),
            (
                l.http_body_limit >= 1,
                "limits.http_body_limit",
                at_least_1,
                l.http_body_limit.to_string(),
            ),
            (
                !self.poller.interval.0.is_zero(),
                "poller.interval",
                positive,
                "0s".into(),
            ),
            (
                !self.history.retention.0.is_zero(),
                "history.retention",
                positive,
                "0s".into(),
            ),
            (
                !l.tcp_idle_timeout.0.is_zero(),
                "limits.tcp_idle_timeout",
                positive,
                "0s".into(),
            ),
            (
                !l.http_header_timeout.0.is_zero(),
                "limits.http_header_timeout",
                positive,
                "0s".into(),
            ),
            (
                e.max_streams_per_56 >= 1,
                "events.max_streams_per_56",
                at_least_1,
                e.max_streams_per_56.to_string(),
            ),
            (
                e.max_streams_per_48 >= 1,
                "events.max_streams_per_48",
                at_least_1,
                e.max_streams_per_48.to_string(),
            ),
            (
                e.stream_fair_share >= 1,
                "events.stream_fair_share",
                at_least_1,
                e.stream_fair_share.to_string(),
            ),
            (
                e.max_lag >= 1,
                "events.max_lag",
                at_least_1,
                e.max_lag.to_string(),
            ),
            (
                !e.keep_alive.0.is_zero(),
                "events.keep_alive",
                positive,
                "0s".into(),
            ),
        ];
        let out_of_range = |key: String, message: String| {
            ConfigError::OutOfRange(Box::new(Diagnostic {
                file: None,
                at: None,
                key: Some(key),
                message,
            }))
        };
        let mut faces: Vec<&String> = self.lifetimes.games.keys().collect();
        faces.sort();
        if let Some(bad) = faces.into_iter().find(|f| Face::from_name(f).is_none()) {
            let names: Vec<&str> = Face::ALL.iter().map(|f| f.name()).collect();
            return Err(out_of_range(
                format!("lifetimes.games.{bad}"),
                format!(
                    "unknown face `{bad}`, expected one of `{}`",
                    names.join("`, `")
                ),
            ));
        }
        if self.valve.min_version().is_none() {
            return Err(out_of_range(
                "valve.min_version".to_owned(),
                format!(
                    "`{}` is not a version such as \"0.21\"",
                    self.valve.min_version
                ),
            ));
        }
        crate::upstream::settings::validate(&self.upstream, &self.federation)?;
        if let Some(bad) = l
            .trusted_proxies
            .iter()
            .find(|n| crate::upstream::settings::Net::parse(n).is_err())
        {
            return Err(out_of_range(
                "limits.trusted_proxies".to_owned(),
                format!("`{bad}` is not an address or a network such as 10.0.0.0/8"),
            ));
        }
        if let Some(bad) = (self.http.probe_from.iter())
            .find(|n| crate::upstream::settings::Net::parse(n).is_err())
        {
            return Err(out_of_range(
                "http.probe_from".to_owned(),
                format!("`{bad}` is not an address or a network such as 10.0.0.0/8"),
            ));
        }
        let header = l.connecting_ip_header.trim();
        if !header.is_empty() && axum::http::HeaderName::from_bytes(header.as_bytes()).is_err() {
            return Err(out_of_range(
                "limits.connecting_ip_header".to_owned(),
                format!("`{header}` is not a header name"),
            ));
        }
        match checks.into_iter().find(|(ok, ..)| !ok) {
            Some((_, key, expected, found)) => Err(out_of_range(
                key.to_owned(),
                format!("{found} is out of range: expected {expected}"),
            )),
            None => Ok(()),
        }
    }

    /// The registry limits and lifetimes this config asks for.
    #[must_use]
    pub fn registry_config(&self) -> RegistryConfig {
        let lt = &self.lifetimes;
        let mut game_lifetimes: HashMap<Face, HashMap<String, Duration>> = HashMap::new();
        for (face, games) in &lt.games {
            // validate() rejects unknown face names, so nothing is dropped here.
            if let Some(f) = Face::from_name(face) {
                let m = game_lifetimes.entry(f).or_default();
                m.extend(games.iter().map(|(g, d)| (g.to_ascii_lowercase(), d.0)));
            }
        }
        RegistryConfig {
            max_per_source: self.limits.servers_per_source,
            max_records: self.limits.max_records,
            face_lifetimes: HashMap::from([
                (Face::GameAgent, lt.gameagent.0),
                (Face::GameSpy, lt.gamespy.0),
                (Face::Teeworlds07, lt.teeworlds.0),
                (Face::Teeworlds06, lt.teeworlds.0),
                (Face::DdnetHttp, lt.ddnet.0),
                (Face::Quake3, lt.quake3.0),
                (Face::Valve, lt.valve.0),
            ]),
            game_lifetimes,
            learned_lifetime: crate::upstream::settings::learned_lifetime(
                &self.upstream,
                &self.federation,
            ),
            info_dir: Some(self.data_dir.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_face_in_the_table_has_a_listen_key_with_its_default_port() {
        let defaults = ListenConfig::default();
        for face in muster_faces::table::FACES {
            assert_eq!(
                defaults.face(face.name),
                &Listen::dual(face.default_port),
                "{}",
                face.name
            );
        }
        assert!(defaults.face("http-not-a-face").0.is_empty());
    }

    #[test]
    fn empty_file_gives_spec_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.listen.gameagent, Listen::dual(9005));
        assert_eq!(
            c.listen.http.0,
            vec![
                "0.0.0.0:8080".parse().unwrap(),
                "[::]:8080".parse().unwrap()
            ]
        );
        assert_eq!(c.listen.mgmt, Listen::dual(51963));
        assert_eq!(c.listen.gamespy_tcp, Listen::dual(28900));
        assert_eq!(
            c.registry_config(),
            RegistryConfig {
                info_dir: Some(PathBuf::from("muster-data")),
                ..RegistryConfig::default()
            }
        );
        assert_eq!(c.limits.list_bytes_burst, 256 * 1024);
        assert_eq!(c.limits.egress_bytes_per_sec, 1_048_576);
        let ddnet = muster_faces::teeworlds::ddnet::DdnetSettings::default();
        assert_eq!(
            (
                c.limits.ddnet_register_burst,
                c.limits.ddnet_register_refill.0
            ),
            (ddnet.register_burst, ddnet.register_refill),
            "the DDNet face's own defaults"
        );
        assert_eq!(
            (
                c.limits.ddnet_challenge_burst,
                c.limits.ddnet_challenge_refill.0
            ),
            (ddnet.challenge_burst, ddnet.challenge_refill)
        );
    }

    #[test]
    fn full_file() {
        let c = Config::from_toml(
            r#"
            data_dir = "/tmp/x"
            [listen]
            gameagent = "off"
            http = "127.0.0.1:0"
            mgmt = ["127.0.0.1:0", "[::1]:0"]
            [limits]
            servers_per_source = 8
            tcp_idle_timeout = "1m"
            [lifetimes]
            ddnet = "45s"
            games = { gamespy = { SeriousSam = "10m" } }
            [poller]
            interval = "2m"
            "#,
        )
        .unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert!(c.listen.gameagent.is_off());
        assert_eq!(c.listen.http.0, vec!["127.0.0.1:0".parse().unwrap()]);
        assert_eq!(c.listen.mgmt.0.len(), 2);
        assert_eq!(
            c.listen.teeworlds06,
            Listen::dual(8300),
            "others keep defaults"
        );
        assert_eq!(c.limits.tcp_idle_timeout.0, Duration::from_secs(60));
        let r = c.registry_config();
        assert_eq!(r.max_per_source, 8);
        assert_eq!(
            r.face_lifetimes.get(&Face::DdnetHttp),
            Some(&Duration::from_secs(45))
        );
        assert_eq!(
            r.game_lifetimes
                .get(&Face::GameSpy)
                .and_then(|m| m.get("serioussam")),
            Some(&Duration::from_secs(600))
        );
        assert_eq!(c.poller.interval.0, Duration::from_secs(120));
    }

    #[test]
    fn rejects_typos_and_bad_values() {
        assert!(matches!(
            Config::from_toml("dta_dir = 'x'"),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            Config::from_toml("[listen]\nhttp = 'localhost'"),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            Config::from_toml("[limits]\ntcp_idle_timeout = 'soon'"),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            Config::from_toml("[lifetimes.games.martian]\nx = '1s'"),
            Err(ConfigError::OutOfRange(_))
        ));
        assert!(matches!(
            Config::from_toml("[limits]\nservers_per_source = 0"),
            Err(ConfigError::OutOfRange(_))
        ));
        for bad in [
            "[limits]\ntrusted_proxies = ['10.0.0.0/99']",
            "[limits]\nconnecting_ip_header = 'X Real IP'",
            "[limits]\ntcp_max_per_56 = 0",
        ] {
            assert!(
                matches!(Config::from_toml(bad), Err(ConfigError::OutOfRange(_))),
                "{bad}"
            );
        }
        let proxied = Config::from_toml(
            "[limits]\nconnecting_ip_header = 'X-Real-IP'\ntrusted_proxies = ['127.0.0.1', '10.0.0.0/8']",
        )
        .unwrap();
        assert_eq!(proxied.limits.trusted_proxy_nets().unwrap().len(), 2);
    }

    /// The message of `from_toml(text)`'s error, file name left out.
    fn error(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_line_column_key_and_what_was_expected() {
        // An unknown key: where, which, and the keys there are.
        let e = error("data_dir = 'x'\n[limits]\nservers_per_sourc = 3\n");
        assert!(
            e.starts_with("line 3, column 1: limits.servers_per_sourc: unknown field `servers_per_sourc`, expected one of `list_bytes_burst`"),
            "{e}"
        );
        assert!(e.contains("`servers_per_source`"), "{e}");
        // A wrong type.
        let e = error("[poller]\n  interval = 30\n");
        assert!(
            e.starts_with(
                "line 2, column 14: poller.interval: invalid type: integer `30`, expected a string"
            ),
            "{e}"
        );
        // A bad duration and a bad address say what a good one looks like.
        let e = error("[limits]\ntcp_idle_timeout = 'soon'");
        assert!(
            e.starts_with(
                "line 2, column 20: limits.tcp_idle_timeout: expected a duration such as \"30s\""
            ),
            "{e}"
        );
        let e = error("[listen]\nhttp = ['127.0.0.1:80', 'localhost']");
        assert!(
            e.starts_with("line 2, column 8: listen.http: expected \"off\", an address such as"),
            "{e}"
        );
        assert!(e.contains("found \"localhost\""), "{e}");
        // Out of range: the key, the value, the allowed range, where it is.
        let e = error("[poller]\nenabled = true\n\n[limits]\n  servers_per_source = 0 # none\n");
        assert_eq!(
            e,
            "line 5, column 3: limits.servers_per_source: 0 is out of range: expected at least 1"
        );
        let e = error("[history]\nretention = '0s'");
        assert_eq!(
            e,
            "line 2, column 1: history.retention: 0s is out of range: expected a duration longer than 0s"
        );
        let e = error("[lifetimes.games.martian]\nx = '1s'");
        assert!(e.starts_with("line 1, column 1: lifetimes.games.martian: unknown face `martian`, expected one of `gameagent`"), "{e}");
        // Malformed TOML.
        let e = error("[limits\n");
        assert!(e.starts_with("line 1, column "), "{e}");
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("muster-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[limits]\nheartbeat_burst = 0\n").unwrap();
        let e = Config::from_file(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:2:1: limits.heartbeat_burst: 0 is out of range: expected at least 1",
                path.display()
            )
        );
        let d = e.diagnostic().unwrap();
        assert_eq!(
            (d.at, d.key.as_deref()),
            (Some((2, 1)), Some("limits.heartbeat_burst"))
        );
        let missing = dir.join("missing.toml");
        let e = Config::from_file(&missing).unwrap_err();
        assert_eq!(e.to_string(), format!("cannot read {}", missing.display()));
        assert!(
            muster_proto::errors::error_chain(&e).contains("No such file"),
            "the cause follows"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn printed_config_reads_back_to_the_same_value() {
        let defaults = Config::default().to_toml();
        assert_eq!(Config::from_toml(&defaults).unwrap(), Config::default());
        assert!(defaults.contains("[limits]"), "{defaults}");
        assert!(defaults.contains("interval = \"5m\""), "{defaults}");
        let c = Config::from_toml(
            "data_dir = '/srv/m'\n[listen]\ngameagent = 'off'\nhttp = '127.0.0.1:0'\n\
             [lifetimes.games.gamespy]\nb = '1m'\na = '2m'\n",
        )
        .unwrap();
        let text = c.to_toml();
        assert_eq!(Config::from_toml(&text).unwrap(), c, "{text}");
        assert!(text.contains("gameagent = \"off\""), "{text}");
        assert!(text.contains("http = [\"127.0.0.1:0\"]"), "{text}");
        assert_eq!(text, c.to_toml(), "the same text every time (keys sorted)");
    }

    /// The field names of a struct that derives `Deserialize`: a deserializer that records
    /// what `deserialize_struct` is asked for and stops there.
    fn fields_of<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl serde::de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Self
            }
        }
        struct Capture(Vec<&'static str>);
        impl<'de> serde::Deserializer<'de> for &mut Capture {
            type Error = Stop;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0.extend_from_slice(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut c = Capture(Vec::new());
        let _ = T::deserialize(&mut c);
        assert!(
            !c.0.is_empty(),
            "{} is not a struct",
            std::any::type_name::<T>()
        );
        c.0
    }

    /// `examples/muster.toml` is read by the real loader, equals the defaults, and spells out
    /// every key of every section, so it cannot rot when a key is added or a default changes.
    #[test]
    fn the_example_config_shows_every_key_with_its_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/muster.toml");
        let c = Config::from_file(&path).unwrap();
        assert_eq!(c, Config::default(), "the example shows the defaults");
        let text = std::fs::read_to_string(&path).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        let sections: [(&str, Vec<&str>); 7] = [
            ("listen", fields_of::<ListenConfig>()),
            ("limits", fields_of::<LimitsConfig>()),
            ("lifetimes", fields_of::<LifetimesConfig>()),
            ("poller", fields_of::<PollerConfig>()),
            ("gamespy", fields_of::<GameSpyConfig>()),
            ("history", fields_of::<HistoryConfig>()),
            (
                "federation",
                fields_of::<crate::upstream::settings::FederationConfig>(),
            ),
        ];
        for key in fields_of::<Config>() {
            assert!(table.contains_key(key), "the example lacks `{key}`");
        }
        for (name, keys) in sections {
            let section = table[name].as_table().unwrap();
            for key in keys {
                assert!(
                    section.contains_key(key),
                    "the example lacks `{name}.{key}`"
                );
            }
        }
    }

    #[test]
    fn listen_flag_forms() {
        assert!(Listen::parse("off").unwrap().is_off());
        assert_eq!(
            Listen::parse("127.0.0.1:0, [::1]:9").unwrap().0,
            vec!["127.0.0.1:0".parse().unwrap(), "[::1]:9".parse().unwrap()]
        );
        assert!(Listen::parse("nope").is_err());
    }
}
