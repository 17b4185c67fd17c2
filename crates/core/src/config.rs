//! The settings the components below the daemon take: default ports, durations as people
//! write them, the `[limits]` section, and networks. The daemon's configuration file
//! (`muster-master`) is made of these and maps each part to the component that uses it.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A setting whose value cannot be used; names the setting (`limits.trusted_proxies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for {0}")]
pub struct InvalidSetting(pub &'static str);

/// Default ports of the faces.
pub mod ports {
    /// GameAgent master, UDP.
    pub const GAMEAGENT: u16 = 9005;
    /// GameSpy heartbeats, UDP.
    pub const GAMESPY_UDP: u16 = 27900;
    /// GameSpy lists, TCP.
    pub const GAMESPY_TCP: u16 = 28900;
    /// Teeworlds 0.7 master, UDP (checker on +1).
    pub const TEEWORLDS07: u16 = 8283;
    /// Teeworlds 0.6 master, UDP (checker on +1).
    pub const TEEWORLDS06: u16 = 8300;
    /// Quake III / DarkPlaces master, UDP (dpmaster's port).
    pub const QUAKE3: u16 = 27950;
    /// Half-Life / Xash3D master, UDP (xash3d-master's port).
    pub const VALVE: u16 = 27010;
    /// HTTP (API, DDNet register, text lists, metrics).
    pub const HTTP: u16 = 8080;
    /// Management server, TCP.
    pub const MGMT: u16 = 51963;
}

/// A duration written as a humantime string (`"30s"`, `"10m"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map(Self).map_err(|e| {
            serde::de::Error::custom(format!(
                "expected a duration such as \"30s\", \"10m\" or \"1h 30m\", found {s:?} ({e})"
            ))
        })
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

/// Abuse limits. Defaults from `gameagent.md` §8.3.10, `gamespy-master.md` §13–14 and
/// `management-server.md` §7.2.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// UDP list replies per source (IPv4 / IPv6 /64), in bytes: burst. Every UDP face that
    /// answers with more than it was sent (lists, own-query answers) spends it.
    pub list_bytes_burst: u64,
    /// UDP list replies per source: bytes per second refilled.
    pub list_bytes_per_sec: u64,
    /// TCP list connections per source (GameSpy lists): burst.
    pub tcp_list_burst: u32,
    /// TCP list connections per source: one more every this long.
    pub tcp_list_refill: HumanDuration,
    /// Heartbeats per source: burst.
    pub heartbeat_burst: u32,
    /// Heartbeats per source: one more token every this long.
    pub heartbeat_refill: HumanDuration,
    /// Challenges to one address: burst.
    pub challenge_burst: u32,
    /// Challenges to one address: one more every this long.
    pub challenge_refill: HumanDuration,
    /// Source buckets tracked at most (memory bound).
    pub max_tracked_sources: usize,
    /// A source's registration and read budgets grow by one source's budget per server it
    /// has proven (registered with a proof of ownership), counting this many servers at most;
    /// 0: budgets never grow. See `docs/deploy.md`, "Hosting boxes and shared addresses".
    pub proven_servers_max: u32,
    /// Records per source (IPv4 address, IPv6 /64): sized for a hosting box.
    pub servers_per_source: usize,
    /// Records in total (a memory bound).
    pub max_records: usize,
    /// Proof exchanges (challenges, checks) waiting per face, in total; the oldest makes room
    /// for a new one.
    pub pending_per_face: usize,
    /// Proof exchanges waiting per source IP address, per face.
    pub pending_per_ip: usize,
    /// Proof exchanges waiting per IPv4 /24 or IPv6 /64, per face.
    pub pending_per_prefix: usize,
    /// Global egress cap of each UDP face, bytes per second.
    pub egress_bytes_per_sec: u64,
    /// Concurrent connections per TCP face.
    pub tcp_max_connections: usize,
    /// Concurrent connections per source (IPv4 address, IPv6 /64) per TCP face: sized for a
    /// hosting box of a few hundred servers and its players.
    pub tcp_max_per_source: usize,
    /// Concurrent connections per IPv6 /56 per TCP face.
    pub tcp_max_per_56: usize,
    /// Concurrent connections per IPv6 /48 per TCP face.
    pub tcp_max_per_48: usize,
    /// The last this many connections of `tcp_max_connections` (at most a quarter of it) go
    /// only to sources holding fewer than `tcp_fair_share` connections.
    pub tcp_reserved: usize,
    /// Connections a source may hold and still get one of the reserved ones.
    pub tcp_fair_share: usize,
    /// A TCP connection (list, HTTP) is closed after this long without input.
    pub tcp_idle_timeout: HumanDuration,
    /// A GameSpy list connection is closed after this long in total.
    pub tcp_total_timeout: HumanDuration,
    /// A management connection without a registered server is closed after this long idle.
    pub mgmt_idle_timeout: HumanDuration,
    /// Largest HTTP request body, bytes (DDNet register).
    pub http_body_limit: usize,
    /// An HTTP request must be answered within this long.
    pub http_request_timeout: HumanDuration,
    /// An HTTP client must send a request's header within this long (from the connection's
    /// start, or from its previous response).
    pub http_header_timeout: HumanDuration,
    /// HTTP list requests (`/api/v1/servers…`, `/serverlist/…`) per source: burst.
    pub http_list_burst: u32,
    /// HTTP list requests per source: one more token every this long.
    pub http_list_refill: HumanDuration,
    /// DDNet `servers.json` requests per source: burst.
    pub servers_json_burst: u32,
    /// DDNet `servers.json` requests per source: one more every this long.
    pub servers_json_refill: HumanDuration,
    /// `/metrics` requests per source: burst.
    pub metrics_burst: u32,
    /// `/metrics` requests per source: one more every this long.
    pub metrics_refill: HumanDuration,
    /// Behind a reverse proxy: the request header holding the client's address
    /// (`X-Real-IP`, `CF-Connecting-IP`; of a list such as `X-Forwarded-For`, the last entry),
    /// believed from `trusted_proxies` only. Empty (the default): the connection's peer.
    pub connecting_ip_header: String,
    /// Addresses or networks (`127.0.0.1`, `10.0.0.0/8`) whose `connecting_ip_header` is
    /// believed.
    pub trusted_proxies: Vec<String>,
    /// DDNet register POSTs per source: burst.
    pub ddnet_register_burst: u32,
    /// DDNet register POSTs per source: one more token every this long.
    pub ddnet_register_refill: HumanDuration,
    /// DDNet UDP challenges per source: burst.
    pub ddnet_challenge_burst: u32,
    /// DDNet UDP challenges per source: one more every this long.
    pub ddnet_challenge_refill: HumanDuration,
}

impl LimitsConfig {
    /// `trusted_proxies` parsed.
    pub fn trusted_proxy_nets(&self) -> Result<Vec<Net>, InvalidSetting> {
        self.trusted_proxies
            .iter()
            .map(|n| Net::parse(n).map_err(|_| InvalidSetting("limits.trusted_proxies")))
            .collect()
    }

    /// The connection caps of a TCP face (the HTTP face's; others narrow them).
    #[must_use]
    pub fn conn_limits(&self) -> crate::conns::ConnLimits {
        crate::conns::ConnLimits {
            max_connections: self.tcp_max_connections,
            max_per_source: self.tcp_max_per_source,
            idle_timeout: self.tcp_idle_timeout.0,
            prefix: crate::conns::PrefixCaps {
                max_per_56: self.tcp_max_per_56,
                max_per_48: self.tcp_max_per_48,
                reserved: self.tcp_reserved,
                fair_share: self.tcp_fair_share,
            },
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            list_bytes_burst: 256 * 1024,
            list_bytes_per_sec: 16 * 1024,
            tcp_list_burst: 16,
            tcp_list_refill: HumanDuration(Duration::from_secs(1)),
            heartbeat_burst: 256,
            heartbeat_refill: HumanDuration(Duration::from_millis(100)),
            challenge_burst: 256,
            challenge_refill: HumanDuration(Duration::from_millis(100)),
            max_tracked_sources: 100_000,
            proven_servers_max: 1024,
            servers_per_source: crate::registry::DEFAULT_MAX_PER_SOURCE,
            max_records: crate::registry::DEFAULT_MAX_RECORDS,
            pending_per_face: 16_384,
            pending_per_ip: 256,
            pending_per_prefix: 1024,
            egress_bytes_per_sec: 1 << 20,
            tcp_max_connections: 4096,
            tcp_max_per_source: 512,
            tcp_max_per_56: crate::conns::DEFAULT_MAX_PER_56,
            tcp_max_per_48: crate::conns::DEFAULT_MAX_PER_48,
            tcp_reserved: crate::conns::DEFAULT_RESERVED,
            tcp_fair_share: crate::conns::DEFAULT_FAIR_SHARE,
            tcp_idle_timeout: HumanDuration(Duration::from_secs(15)),
            tcp_total_timeout: HumanDuration(Duration::from_secs(30)),
            mgmt_idle_timeout: HumanDuration(Duration::from_secs(30)),
            http_body_limit: 32 * 1024,
            http_request_timeout: HumanDuration(Duration::from_secs(10)),
            http_header_timeout: HumanDuration(Duration::from_secs(5)),
            http_list_burst: 60,
            http_list_refill: HumanDuration(Duration::from_millis(50)),
            servers_json_burst: 16,
            servers_json_refill: HumanDuration(Duration::from_secs(1)),
            metrics_burst: 8,
            metrics_refill: HumanDuration(Duration::from_secs(2)),
            connecting_ip_header: String::new(),
            trusted_proxies: Vec::new(),
            ddnet_register_burst: 64,
            ddnet_register_refill: HumanDuration(Duration::from_millis(100)),
            ddnet_challenge_burst: 16,
            ddnet_challenge_refill: HumanDuration(Duration::from_secs(1)),
        }
    }
}

/// An address or a network (`192.0.2.7`, `198.51.100.0/24`, `2001:db8::/32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// Parses `ip` or `ip/prefix`.
    pub fn parse(s: &str) -> Result<Self, InvalidSetting> {
        let bad = || InvalidSetting("federation.sync_peers");
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p.parse::<u8>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let addr: IpAddr = ip.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }

    /// Whether `ip` is in this network (IPv4-mapped IPv6 addresses count as IPv4).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}
