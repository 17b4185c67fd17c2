//! Server addresses as users type them, and their resolution.
//!
//! Accepted forms: `1.2.3.4:7777`, `[::1]:7777`, `host.example:7777`, and the same without a
//! port when the caller has a default (`1.2.3.4`, `::1`, `[::1]`, `host.example`).

use std::net::{IpAddr, SocketAddr};

/// A host (name or literal) and an optional port, as parsed from user input.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// A host name or an IP literal (IPv6 without brackets).
    pub host: String,
    /// The port, when one was given.
    pub port: Option<u16>,
}

/// Why a host:port string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// Nothing was given.
    #[error("empty address")]
    Empty,
    /// The port is not a number from 1 to 65535.
    #[error("bad port in {0:?}")]
    BadPort(String),
    /// A `[` without its `]`, or other unparseable form.
    #[error("malformed address {0:?}")]
    Malformed(String),
    /// No port was given and none could be assumed.
    #[error("no port in {0:?}")]
    NoPort(String),
    /// An IPv6 address without brackets whose last group could also be a port (`::1:8303`).
    #[error(
        "ambiguous address {input:?}: write [{host}]:{port} for port {port}, or [{input}] for \
         the address alone"
    )]
    AmbiguousIpv6 {
        /// The input.
        input: String,
        /// The address before the last colon.
        host: String,
        /// The last group, read as a port.
        port: u16,
    },
}

fn port(s: &str, whole: &str) -> Result<u16, AddressError> {
    match s.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(AddressError::BadPort(whole.to_owned())),
    }
}

impl HostPort {
    /// Parse user input.
    pub fn parse(input: &str) -> Result<Self, AddressError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(AddressError::Empty);
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (host, after) = rest
                .split_once(']')
                .ok_or_else(|| AddressError::Malformed(s.to_owned()))?;
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(AddressError::Malformed(s.to_owned()));
            }
            let port = match after {
                "" => None,
                p => Some(port(
                    p.strip_prefix(':')
                        .ok_or_else(|| AddressError::Malformed(s.to_owned()))?,
                    s,
                )?),
            };
            return Ok(Self {
                host: host.to_owned(),
                port,
            });
        }
        // Several colons and no brackets: an IPv6 address, perhaps followed by `:port`. Only
        // one reading may fit: `fe80::1` (no port), `1:2:3:4:5:6:7:8:80` (a port). When both
        // fit (`::1:8303`), the user must say which with brackets.
        if s.matches(':').count() > 1 {
            let whole = s.parse::<std::net::Ipv6Addr>().is_ok();
            let split = s.rsplit_once(':').and_then(|(h, p)| {
                let p = p.parse::<u16>().ok().filter(|p| *p != 0)?;
                h.parse::<std::net::Ipv6Addr>().ok().map(|_| (h, p))
            });
            return match (whole, split) {
                (true, None) => Ok(Self {
                    host: s.to_owned(),
                    port: None,
                }),
                (false, Some((host, port))) => Ok(Self {
                    host: host.to_owned(),
                    port: Some(port),
                }),
                (true, Some((host, port))) => Err(AddressError::AmbiguousIpv6 {
                    input: s.to_owned(),
                    host: host.to_owned(),
                    port,
                }),
                (false, None) => Err(AddressError::Malformed(s.to_owned())),
            };
        }
        match s.rsplit_once(':') {
            Some((host, p)) if !host.is_empty() => Ok(Self {
                host: host.to_owned(),
                port: Some(port(p, s)?),
            }),
            Some(_) => Err(AddressError::Malformed(s.to_owned())),
            None => Ok(Self {
                host: s.to_owned(),
                port: None,
            }),
        }
    }

    /// The port given, or `default`.
    pub fn port_or(&self, default: Option<u16>) -> Result<u16, AddressError> {
        self.port
            .or(default)
            .ok_or_else(|| AddressError::NoPort(self.host.clone()))
    }

    /// The address when the host is an IP literal (no resolution needed).
    #[must_use]
    pub fn literal(&self, port: u16) -> Option<SocketAddr> {
        self.host
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, port))
    }

    /// Resolve through the system resolver (IP literals skip it). IPv4 addresses come first.
    pub async fn resolve(&self, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        if let Some(addr) = self.literal(port) {
            return Ok(vec![addr]);
        }
        let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), port))
            .await?
            .collect();
        addrs.sort_by_key(|a| a.is_ipv6());
        addrs.dedup();
        Ok(addrs)
    }
}

/// Why user input gave no address to query.
#[derive(Debug)]
#[non_exhaustive]
pub enum ResolveError {
    /// The input is not a usable host:port.
    Address(AddressError),
    /// The system resolver failed.
    Lookup(std::io::Error),
    /// The name resolved to no address.
    NoAddress,
}

/// Parse `input`, apply `default_port` when it names none, and resolve it to its first
/// address (IPv4 first; IP literals skip the resolver).
pub async fn resolve_input(
    input: &str,
    default_port: Option<u16>,
) -> Result<SocketAddr, ResolveError> {
    let hp = HostPort::parse(input).map_err(ResolveError::Address)?;
    let port = hp.port_or(default_port).map_err(ResolveError::Address)?;
    let addrs = hp.resolve(port).await.map_err(ResolveError::Lookup)?;
    addrs.first().copied().ok_or(ResolveError::NoAddress)
}

/// Host names looked up at once by [`resolve_inputs`].
const CONCURRENT_LOOKUPS: usize = 32;

/// [`resolve_input`] for many inputs, in their order: literal addresses at once, host names
/// looked up 32 (`CONCURRENT_LOOKUPS`) at a time (the system resolver blocks a thread per lookup,
/// so a long list of names one after another would take its sum of round trips).
pub async fn resolve_inputs(
    inputs: &[(String, Option<u16>)],
) -> Vec<Result<SocketAddr, ResolveError>> {
    let mut out: Vec<Option<Result<SocketAddr, ResolveError>>> = Vec::with_capacity(inputs.len());
    let mut lookups = tokio::task::JoinSet::new();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(CONCURRENT_LOOKUPS));
    for (i, (input, default_port)) in inputs.iter().enumerate() {
        let parsed = HostPort::parse(input)
            .and_then(|hp| hp.port_or(*default_port).map(|port| (hp, port)))
            .map_err(ResolveError::Address);
        match parsed {
            Err(e) => out.push(Some(Err(e))),
            Ok((hp, port)) => match hp.literal(port) {
                Some(addr) => out.push(Some(Ok(addr))),
                None => {
                    out.push(None);
                    let permits = permits.clone();
                    lookups.spawn(async move {
                        let _permit = permits.acquire_owned().await;
                        let r = match hp.resolve(port).await {
                            Ok(addrs) => addrs.first().copied().ok_or(ResolveError::NoAddress),
                            Err(e) => Err(ResolveError::Lookup(e)),
                        };
                        (i, r)
                    });
                }
            },
        }
    }
    while let Some(done) = lookups.join_next().await {
        if let Ok((i, r)) = done {
            if let Some(slot) = out.get_mut(i) {
                *slot = Some(r);
            }
        }
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(ResolveError::Lookup(std::io::Error::other(
                    "lookup task failed",
                )))
            })
        })
        .collect()
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bracket = self.host.contains(':');
        match (bracket, self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(host: &str, port: Option<u16>) -> HostPort {
        HostPort {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn parses_every_accepted_form() {
        let cases = [
            ("1.2.3.4:7777", hp("1.2.3.4", Some(7777))),
            ("[::1]:7777", hp("::1", Some(7777))),
            ("[::1]", hp("::1", None)),
            ("::1", hp("::1", None)),
            ("fe80::1", hp("fe80::1", None)),
            ("localhost:28900", hp("localhost", Some(28900))),
            ("host.example", hp("host.example", None)),
            ("  10.0.0.1:1 ", hp("10.0.0.1", Some(1))),
        ];
        for (input, want) in cases {
            assert_eq!(HostPort::parse(input), Ok(want.clone()), "{input}");
            assert_eq!(HostPort::parse(&want.to_string()), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_bad_forms() {
        assert_eq!(HostPort::parse(""), Err(AddressError::Empty));
        assert!(matches!(
            HostPort::parse("a:0"),
            Err(AddressError::BadPort(_))
        ));
        assert!(matches!(
            HostPort::parse("a:70000"),
            Err(AddressError::BadPort(_))
        ));
        assert!(matches!(
            HostPort::parse("a:x"),
            Err(AddressError::BadPort(_))
        ));
        assert!(matches!(
            HostPort::parse("[::1"),
            Err(AddressError::Malformed(_))
        ));
        assert!(matches!(
            HostPort::parse("[::1]x"),
            Err(AddressError::Malformed(_))
        ));
        assert!(matches!(
            HostPort::parse(":80"),
            Err(AddressError::Malformed(_))
        ));
        assert!(matches!(
            HostPort::parse("1:2:zz"),
            Err(AddressError::Malformed(_))
        ));
    }

    #[test]
    fn ipv6_without_brackets_is_read_only_when_one_reading_fits() {
        // Both `[::1]:8303` and the address `::1:8303` fit: refused, naming both spellings.
        let e = HostPort::parse("::1:8303").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ambiguous address \"::1:8303\": write [::1]:8303 for port 8303, or [::1:8303] for \
             the address alone"
        );
        assert!(matches!(
            HostPort::parse("fe80::1:2"),
            Err(AddressError::AmbiguousIpv6 { port: 2, .. })
        ));
        // A last group that is no decimal port, or a prefix that is no address: one reading.
        assert_eq!(
            HostPort::parse("fe80::1:abcd"),
            Ok(hp("fe80::1:abcd", None))
        );
        assert_eq!(HostPort::parse("2001:db8::"), Ok(hp("2001:db8::", None)));
        // Nine groups are no address; eight of them and a port are.
        assert_eq!(
            HostPort::parse("1:2:3:4:5:6:7:8:8303"),
            Ok(hp("1:2:3:4:5:6:7:8", Some(8303)))
        );
        assert_eq!(
            HostPort::parse("::ffff:127.0.0.1:80"),
            Ok(hp("::ffff:127.0.0.1", Some(80)))
        );
    }

    #[tokio::test]
    async fn resolve_input_applies_the_default_port_and_reports_why() {
        assert_eq!(
            resolve_input("127.0.0.1", Some(7)).await.unwrap(),
            "127.0.0.1:7".parse().unwrap()
        );
        assert!(matches!(
            resolve_input("127.0.0.1", None).await,
            Err(ResolveError::Address(AddressError::NoPort(_)))
        ));
        assert!(matches!(
            resolve_input("[::1", Some(7)).await,
            Err(ResolveError::Address(AddressError::Malformed(_)))
        ));
    }

    #[tokio::test]
    async fn literal_resolves_without_dns() {
        let h = HostPort::parse("[::1]:5").unwrap();
        assert_eq!(
            h.resolve(5).await.unwrap(),
            vec!["[::1]:5".parse().unwrap()]
        );
    }

    #[tokio::test]
    async fn many_inputs_resolve_in_their_order() {
        let inputs: Vec<(String, Option<u16>)> = vec![
            ("localhost:7".into(), None),
            ("127.0.0.1:8".into(), None),
            ("no port".into(), None),
            ("[::1]".into(), Some(9)),
            ("localhost".into(), Some(10)),
        ];
        let out = resolve_inputs(&inputs).await;
        assert_eq!(out.len(), 5);
        assert_eq!(out[0].as_ref().unwrap().port(), 7);
        assert!(out[0].as_ref().unwrap().ip().is_loopback());
        assert_eq!(*out[1].as_ref().unwrap(), "127.0.0.1:8".parse().unwrap());
        assert!(matches!(out[2], Err(ResolveError::Address(_))));
        assert_eq!(*out[3].as_ref().unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(out[4].as_ref().unwrap().port(), 10);
    }
}
