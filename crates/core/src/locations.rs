//! Where servers are: an optional table of IP networks and their locations (config
//! `ddnet.locations`), the CSV DDNet's master took before it moved to a binary database. Its
//! locations are what DDNet's `servers.json` carries in `location` (`teeworlds-master.md`
//! §3.7): a continent code, optionally with an ISO 3166-1 country code.
//!
//! ```text
//! # a comment                       blank lines and lines starting with '#' are skipped
//! network,location                  an optional header (or network,continent_code)
//! 192.0.2.0/24,eu:de                IPv4 or IPv6 network in CIDR form, then the location
//! 2001:db8::/32,na                  a host address without /N is the network of one address
//! ```
//!
//! A lookup takes the longest network that contains the address (an IPv4-mapped IPv6 address
//! is looked up as IPv4). Locations are lower-cased; each is at most [`MAX_LOCATION_LEN`]
//! bytes of `a-z`, `0-9`, `:`, `-` and `_`.
//!
//! The daemon installs its table once, at start ([`install`]); it is process-wide, like a
//! resolver's configuration, because every server object the API writes (the list, the detail,
//! each live event) carries its `location`. A process that runs several masters shares one
//! table; installing another replaces it for all of them.
//!
//! Does not: read DDNet's current libloc database, resolve host names (a management server
//! registered by name has no location), or reload the file while running.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::registry::GameAddr;

/// Largest locations file read, bytes.
pub const MAX_LOCATIONS_FILE: u64 = 256 << 20;
/// Longest location, bytes (DDNet's master keeps 12).
pub const MAX_LOCATION_LEN: usize = 12;

/// Why a locations file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocationsError {
    /// The file could not be read.
    #[error("failed to read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The file is larger than [`MAX_LOCATIONS_FILE`].
    #[error("{} is larger than 256 MiB", .0.display())]
    TooLarge(PathBuf),
    /// A line is not `network,location`.
    #[error("line {line}: {what}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// A line of the file at the path is not `network,location`.
    #[error("{}:{line}: {what}", .path.display())]
    FileLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// A table of networks and locations; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Locations {
    /// Per prefix length: network (masked, as an integer) → location.
    v4: BTreeMap<u8, HashMap<u32, Arc<str>>>,
    v6: BTreeMap<u8, HashMap<u128, Arc<str>>>,
    networks: usize,
}

fn mask4(ip: u32, len: u8) -> u32 {
    match len {
        0 => 0,
        n => ip & (u32::MAX << (32 - u32::from(n.min(32)))),
    }
}

fn mask6(ip: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        n => ip & (u128::MAX << (128 - u32::from(n.min(128)))),
    }
}

fn location_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LOCATION_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b':' || b == b'-' || b == b'_')
}

impl Locations {
    /// Parses the CSV text of a locations file.
    pub fn parse(text: &str) -> Result<Self, LocationsError> {
        let mut t = Self::default();
        let mut interned: HashMap<String, Arc<str>> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let err = |what| LocationsError::Line { line, what };
            let (net, loc) = l.split_once(',').ok_or(err("expected network,location"))?;
            let (net, loc) = (net.trim(), loc.trim().to_ascii_lowercase());
            if t.networks == 0 && net.eq_ignore_ascii_case("network") {
                continue;
            }
            if !location_ok(&loc) {
                return Err(err("location must be 1 to 12 of a-z 0-9 : - _"));
            }
            let (ip, len) = match net.split_once('/') {
                Some((ip, len)) => (ip, Some(len)),
                None => (net, None),
            };
            let ip: IpAddr = ip.parse().map_err(|_| err("not an IP network"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = match len {
                None => max,
                Some(s) => s
                    .parse::<u8>()
                    .ok()
                    .filter(|n| *n <= max)
                    .ok_or(err("bad prefix length"))?,
            };
            let loc = match interned.get(&loc) {
                Some(a) => Arc::clone(a),
                None => {
                    let a: Arc<str> = Arc::from(loc.as_str());
                    interned.insert(loc, Arc::clone(&a));
                    a
                }
            };
            match ip {
                IpAddr::V4(a) => {
                    t.v4.entry(len)
                        .or_default()
                        .insert(mask4(u32::from(a), len), loc);
                }
                IpAddr::V6(a) => {
                    t.v6.entry(len)
                        .or_default()
                        .insert(mask6(u128::from(a), len), loc);
                }
            }
            t.networks += 1;
        }
        Ok(t)
    }

    /// Reads and parses the file at `path` (at most [`MAX_LOCATIONS_FILE`] bytes).
    pub fn read(path: &Path) -> Result<Self, LocationsError> {
        let len = std::fs::metadata(path)
            .map_err(|e| LocationsError::Read(path.to_owned(), e))?
            .len();
        if len > MAX_LOCATIONS_FILE {
            return Err(LocationsError::TooLarge(path.to_owned()));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| LocationsError::Read(path.to_owned(), e))?;
        Self::parse(&text).map_err(|e| match e {
            LocationsError::Line { line, what } => LocationsError::FileLine {
                path: path.to_owned(),
                line,
                what,
            },
            other => other,
        })
    }

    /// Networks in the table.
    #[must_use]
    pub fn len(&self) -> usize {
        self.networks
    }

    /// Whether the table is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.networks == 0
    }

    /// The location of the longest network containing `ip`.
    #[must_use]
    pub fn lookup(&self, ip: IpAddr) -> Option<&Arc<str>> {
        let ip = ip.to_canonical();
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .rev()
                    .find_map(|(len, m)| m.get(&mask4(a, *len)))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .rev()
                    .find_map(|(len, m)| m.get(&mask6(a, *len)))
            }
        }
    }
}

/// The table the daemon installed, if any.
static INSTALLED: ArcSwapOption<Locations> = ArcSwapOption::const_empty();

/// Makes `table` the process's table (see the module docs).
pub fn install(table: Locations) {
    INSTALLED.store(Some(Arc::new(table)));
}

/// The location of `ip` in the installed table.
#[must_use]
pub fn of_ip(ip: IpAddr) -> Option<Arc<str>> {
    INSTALLED.load().as_ref()?.lookup(ip).cloned()
}

/// The location of a registered address: its IP's, none for a host name.
#[must_use]
pub fn of_addr(addr: &GameAddr) -> Option<Arc<str>> {
    of_ip(addr.ip()?)
}

/// Whether `location` is in `region`: the same, or a country (`eu:de`) of a continent
/// (`eu`). `region` is compared ASCII case-insensitively.
#[must_use]
pub fn in_region(location: &str, region: &str) -> bool {
    let n = region.len();
    location.len() >= n
        && location
            .get(..n)
            .is_some_and(|p| p.eq_ignore_ascii_case(region))
        && (location.len() == n || location.as_bytes().get(n) == Some(&b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "\
# test fixture
network,location
192.0.2.0/24,EU:DE
192.0.2.128/25,eu:fr
198.51.100.7,na:us
2001:db8::/32,as
2001:db8:1::/48,as:jp
";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_network_wins() {
        let t = Locations::parse(CSV).unwrap();
        assert_eq!(t.len(), 5);
        let at = |s| t.lookup(ip(s)).map(|l| l.to_string());
        assert_eq!(at("192.0.2.1").as_deref(), Some("eu:de"));
        assert_eq!(at("192.0.2.200").as_deref(), Some("eu:fr"));
        assert_eq!(at("::ffff:192.0.2.200").as_deref(), Some("eu:fr"));
        assert_eq!(at("198.51.100.7").as_deref(), Some("na:us"));
        assert_eq!(at("198.51.100.8"), None);
        assert_eq!(at("2001:db8:1::5").as_deref(), Some("as:jp"));
        assert_eq!(at("2001:db8:2::5").as_deref(), Some("as"));
        assert_eq!(at("2001:db9::1"), None);
        assert_eq!(at("203.0.113.1"), None);
    }

    #[test]
    fn bad_lines_are_named() {
        let line = |text: &str| match Locations::parse(text) {
            Err(LocationsError::Line { line, what }) => (line, what),
            other => panic!("{other:?}"),
        };
        assert_eq!(line("1.2.3.0/24 eu").0, 1);
        assert_eq!(line("# x\n1.2.3.0/33,eu"), (2, "bad prefix length"));
        assert_eq!(line("x.y,eu").1, "not an IP network");
        assert_eq!(
            line("1.2.3.4,europe:germany").1,
            "location must be 1 to 12 of a-z 0-9 : - _"
        );
        assert_eq!(
            line("1.2.3.4,").1,
            "location must be 1 to 12 of a-z 0-9 : - _"
        );
        assert!(Locations::parse("").unwrap().is_empty());
        // "network" is a header only on the first row.
        assert_eq!(line("1.2.3.4,eu\nnetwork,location").0, 2);
    }

    #[test]
    fn file_errors_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("muster-locations-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.csv");
        std::fs::write(&path, "192.0.2.0/24,eu\n192.0.2.0/99,eu\n").unwrap();
        let e = Locations::read(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}:2: bad prefix length", path.display())
        );
        let missing = Locations::read(&dir.join("missing.csv")).unwrap_err();
        assert!(matches!(missing, LocationsError::Read(..)), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn regions_match_continents_and_countries() {
        assert!(in_region("eu:de", "eu"));
        assert!(in_region("eu:de", "EU:DE"));
        assert!(in_region("eu", "eu"));
        assert!(!in_region("eu", "eu:de"));
        assert!(!in_region("eux:de", "eu"));
        assert!(!in_region("na:us", "eu"));
    }
}
