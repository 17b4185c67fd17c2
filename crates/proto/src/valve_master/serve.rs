//! The master's side of the family: what a heartbeat must hold for the master to list its
//! server ([`Announcement`]), the versions it compares ([`Version`]), and the list pages it
//! sends ([`page_after`], [`every_page`]). See `docs/protocols/valve-master.md` §4 and §6.
//!
//! No sockets, clocks or registry here: the master face decides what to do with them.

use std::cmp::Ordering;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::packet::{Heartbeat, LIST_REPLY_TAG, Region};
use super::{HEADER, IPV4_ENTRY_LEN, IPV6_ENTRY_LEN, LIST_DATAGRAM_LIMIT};

/// Longest game directory a master keeps, in bytes (the Xash3D master's limit).
pub const MAX_GAMEDIR_LEN: usize = 31;

/// A `major.minor.patch` version, as Xash3D servers and clients name theirs (`0.21`,
/// `0.19.2`). Missing parts are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    /// Major.
    pub major: u8,
    /// Minor.
    pub minor: u8,
    /// Patch.
    pub patch: u8,
}

impl Version {
    /// `major.minor`.
    #[must_use]
    pub const fn new(major: u8, minor: u8) -> Self {
        Self {
            major,
            minor,
            patch: 0,
        }
    }

    /// Parses `a`, `a.b` or `a.b.c` (each a number 0–255); anything else is `None`.
    #[must_use]
    pub fn parse(raw: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?;
        let mut parts = text.splitn(3, '.');
        let num = |p: Option<&str>| match p {
            None => Some(0),
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok(),
            Some(_) => None,
        };
        Some(Self {
            major: num(parts.next())?,
            minor: num(parts.next())?,
            patch: num(parts.next())?,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        if self.patch > 0 {
            write!(f, ".{}", self.patch)?;
        }
        Ok(())
    }
}

/// Why a heartbeat cannot be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    /// It carries no `\challenge\`.
    #[error("no challenge")]
    NoChallenge,
    /// A known key's value does not read (the key is named).
    #[error("bad value for {0}")]
    BadValue(&'static str),
}

/// What a valid heartbeat says about its server, read as the Xash3D master reads it: every
/// known key must hold a value of its type (numbers 0–255, flags `0` or `1`, a region of the
/// table), a later pair replaces an earlier one of the same key, unknown keys are ignored, and
/// `\challenge\` must be there. A `version` that does not read is `0.0`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Announcement {
    /// The master's challenge, echoed.
    pub challenge: u32,
    /// The network protocol.
    pub protocol: u8,
    /// Players on it.
    pub players: u8,
    /// Its slots.
    pub max: u8,
    /// Bots among the players.
    pub bots: u8,
    /// Its game directory (may be empty).
    pub gamedir: Vec<u8>,
    /// Its map.
    pub map: Vec<u8>,
    /// `d` dedicated, `l` listen, `p` proxy, 0 unknown.
    pub server_type: u8,
    /// `l` Linux, `w` Windows, `m` macOS, 0 unknown.
    pub os: u8,
    /// Its version.
    pub version: Version,
    /// The region it says it is in ([`Region::WORLD`] when it does not say).
    pub region: Region,
    /// Asks a password.
    pub password: bool,
    /// Runs an anti-cheat.
    pub secure: bool,
    /// A LAN server.
    pub lan: bool,
    /// Behind NAT.
    pub nat: bool,
}

fn byte(v: &[u8], key: &'static str) -> Result<u8, AnnounceError> {
    std::str::from_utf8(v)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or(AnnounceError::BadValue(key))
}

fn flag(v: &[u8], key: &'static str) -> Result<bool, AnnounceError> {
    match v {
        b"0" => Ok(false),
        b"1" => Ok(true),
        _ => Err(AnnounceError::BadValue(key)),
    }
}

/// One byte of a one-character value (`d`, `l`, …), 0 otherwise.
fn letter(v: &[u8]) -> u8 {
    match v {
        [c] => *c,
        _ => 0,
    }
}

impl Announcement {
    /// Reads `hb` (see the type docs).
    pub fn read(hb: &Heartbeat) -> Result<Self, AnnounceError> {
        let mut a = Self::default();
        let mut challenge = None;
        for (k, v) in hb.pairs() {
            match k.as_slice() {
                b"challenge" => {
                    let n = std::str::from_utf8(v)
                        .ok()
                        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|t| t.parse::<u32>().ok())
                        .ok_or(AnnounceError::BadValue("challenge"))?;
                    challenge = Some(n);
                }
                b"protocol" => a.protocol = byte(v, "protocol")?,
                b"players" => a.players = byte(v, "players")?,
                b"max" => a.max = byte(v, "max")?,
                b"bots" => a.bots = byte(v, "bots")?,
                b"gamedir" => a.gamedir.clone_from(v),
                b"map" => a.map.clone_from(v),
                b"type" => a.server_type = letter(v),
                b"os" => a.os = letter(v),
                b"version" => a.version = Version::parse(v).unwrap_or_default(),
                b"region" => {
                    let r = Region(byte(v, "region")?);
                    if r.name().is_none() {
                        return Err(AnnounceError::BadValue("region"));
                    }
                    a.region = r;
                }
                b"password" => a.password = flag(v, "password")?,
                b"secure" => a.secure = flag(v, "secure")?,
                b"lan" => a.lan = flag(v, "lan")?,
                b"nat" => a.nat = flag(v, "nat")?,
                _ => {}
            }
        }
        a.challenge = challenge.ok_or(AnnounceError::NoChallenge)?;
        Ok(a)
    }
}

/// The order of a master's list: by address family, address bytes, then port. Pages are cut
/// in this order, so that "after this address" means the same in every snapshot.
#[must_use]
pub fn list_order(a: &SocketAddr, b: &SocketAddr) -> Ordering {
    let key = |s: &SocketAddr| match s.ip() {
        IpAddr::V4(ip) => (0u8, u128::from(ip.to_bits()), s.port()),
        IpAddr::V6(ip) => (1u8, ip.to_bits(), s.port()),
    };
    key(a).cmp(&key(b))
}

fn entry_len(ipv6: bool) -> usize {
    if ipv6 { IPV6_ENTRY_LEN } else { IPV4_ENTRY_LEN }
}

/// Entries one page holds at most, with room for the closing zero address.
#[must_use]
pub fn page_capacity(ipv6: bool, key: Option<u32>) -> usize {
    let head = HEADER.len() + LIST_REPLY_TAG.len() + if key.is_some() { 6 } else { 0 };
    let entry = entry_len(ipv6);
    LIST_DATAGRAM_LIMIT.saturating_sub(head + entry) / entry
}

/// One page: the header, the key when there is one, the `entries` (packed, see
/// [`page_after`]) and, when `close`, the zero address.
fn put_page(entries: &[u8], key: Option<u32>, ipv6: bool, close: bool) -> Vec<u8> {
    let entry = entry_len(ipv6);
    let mut out = Vec::with_capacity(12 + entries.len() + entry);
    out.extend_from_slice(&HEADER);
    out.extend_from_slice(&LIST_REPLY_TAG);
    if let Some(k) = key {
        out.push(0x7F);
        out.extend_from_slice(&k.to_le_bytes());
        out.push(8);
    }
    out.extend_from_slice(entries);
    if close {
        out.resize(out.len() + entry, 0);
    }
    out
}

/// The page of `sorted` that follows `last`: the servers after it, as many as a page holds,
/// closed by the zero address when they are the last ones. `last` need not be listed (a
/// server that left): the page starts after where it would be.
///
/// `sorted` holds one family's addresses in [`list_order`], packed as the pages carry them
/// ([`super::packet::put_entry`]: the address, then the port, big-endian; 6 or 18 bytes), so
/// a master keeps and cuts its list without a vector of addresses of 32 bytes each. Packed so,
/// the byte order of two entries is their list order.
#[must_use]
pub fn page_after(sorted: &[u8], last: SocketAddr, key: Option<u32>, ipv6: bool) -> Vec<u8> {
    let entry = entry_len(ipv6);
    let n = sorted.len() / entry;
    let start = if last.ip().is_unspecified() && last.port() == 0 {
        0
    } else if last.is_ipv6() != ipv6 {
        // IPv4 addresses all come before IPv6 ones.
        if last.is_ipv6() { n } else { 0 }
    } else {
        let mut packed_last = Vec::with_capacity(entry);
        super::packet::put_entry(&mut packed_last, last);
        // The first entry after `last`, by halving.
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = sorted
                .get(mid * entry..(mid + 1) * entry)
                .unwrap_or_default();
            if e > &packed_last[..] {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    let rest = n.saturating_sub(start);
    let take = rest.min(page_capacity(ipv6, key));
    let page = sorted
        .get(start * entry..(start + take) * entry)
        .unwrap_or_default();
    put_page(page, key, ipv6, take == rest)
}

/// Every page of `servers` (one family, packed as [`page_after`] takes them) at once, each
/// closed by the zero address, as the Xash3D master answers its clients (they do not page).
#[must_use]
pub fn every_page(servers: &[u8], key: Option<u32>, ipv6: bool) -> Vec<Vec<u8>> {
    let cap = page_capacity(ipv6, key).max(1);
    let whole = servers.len() - servers.len() % entry_len(ipv6);
    let servers = servers.get(..whole).unwrap_or_default();
    if servers.is_empty() {
        return vec![put_page(&[], key, ipv6, true)];
    }
    servers
        .chunks(cap * entry_len(ipv6))
        .map(|c| put_page(c, key, ipv6, true))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::packet::{ListReply, ServerPacket};
    use super::*;

    fn hb(text: &str) -> Heartbeat {
        match ServerPacket::decode(format!("0\n{text}\n").as_bytes()).unwrap() {
            ServerPacket::Heartbeat(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn versions_read_as_the_xash3d_master_reads_them() {
        assert_eq!(Version::parse(b"0.21"), Some(Version::new(0, 21)));
        assert_eq!(
            Version::parse(b"0.19.2"),
            Some(Version {
                major: 0,
                minor: 19,
                patch: 2
            })
        );
        assert_eq!(Version::parse(b"1"), Some(Version::new(1, 0)));
        assert!(Version::parse(b"1.1.2.7").is_none());
        assert!(Version::parse(b"0.x").is_none());
        assert!(Version::parse(b"256.0").is_none());
        assert!(Version::new(0, 20) < Version::new(0, 21));
        assert_eq!(Version::parse(b"0.19.2").unwrap().to_string(), "0.19.2");
    }

    #[test]
    fn an_announcement_needs_its_challenge_and_values_of_their_type() {
        let a = Announcement::read(&hb(
            "\\protocol\\49\\challenge\\12345\\players\\3\\max\\16\\gamedir\\valve\\map\\crossfire\
             \\type\\d\\os\\l\\version\\0.21\\region\\3\\nat\\1\\product\\valve\\odd\\x",
        ))
        .unwrap();
        assert_eq!(
            (a.challenge, a.protocol, a.players, a.max, a.region),
            (12345, 49, 3, 16, Region::EUROPE)
        );
        assert_eq!(
            (a.server_type, a.os, a.nat, a.lan),
            (b'd', b'l', true, false)
        );
        assert_eq!(a.version, Version::new(0, 21));
        assert_eq!(
            Announcement::read(&hb("\\gamedir\\valve")),
            Err(AnnounceError::NoChallenge)
        );
        for bad in [
            "\\challenge\\1\\players\\300",
            "\\challenge\\1\\max\\-1",
            "\\challenge\\1\\region\\9",
            "\\challenge\\1\\nat\\yes",
            "\\challenge\\x",
        ] {
            assert!(
                matches!(
                    Announcement::read(&hb(bad)),
                    Err(AnnounceError::BadValue(_))
                ),
                "{bad}"
            );
        }
        // A later pair wins; a version that does not read is 0.0.
        let a =
            Announcement::read(&hb("\\challenge\\1\\map\\a\\map\\b\\version\\1.1.2.7")).unwrap();
        assert_eq!(
            (a.map.as_slice(), a.version),
            (&b"b"[..], Version::default())
        );
    }

    fn v4(i: u32) -> SocketAddr {
        SocketAddr::new(IpAddr::V4((0x0A00_0000 + i).into()), 27015)
    }

    fn packed(addrs: &[SocketAddr]) -> Vec<u8> {
        let mut out = Vec::new();
        for &a in addrs {
            super::super::packet::put_entry(&mut out, a);
        }
        out
    }

    fn any_addr(ipv6: bool) -> impl proptest::strategy::Strategy<Value = SocketAddr> {
        use proptest::prelude::*;
        (any::<u128>(), 0u16..4).prop_map(move |(ip, port)| {
            // Few distinct ports and addresses, so that `last` is often listed itself.
            let ip = if ipv6 {
                IpAddr::V6((ip % 8).into())
            } else {
                IpAddr::V4(u32::try_from(ip % 8).unwrap().into())
            };
            SocketAddr::new(ip, port)
        })
    }

    proptest::proptest! {
        #[test]
        fn a_page_after_any_address_is_the_servers_after_it_in_list_order(
            ipv6 in proptest::bool::ANY,
            mut all in proptest::collection::vec(any_addr(false), 0..40),
            mut all6 in proptest::collection::vec(any_addr(true), 0..40),
            last in proptest::prop_oneof![any_addr(false), any_addr(true)],
        ) {
            if ipv6 {
                all = std::mem::take(&mut all6);
            }
            // The zero address closes a list; no server is listed under it.
            all.retain(|a| !(a.ip().is_unspecified() && a.port() == 0));
            all.sort_by(list_order);
            all.dedup();
            let want: Vec<SocketAddr> = all
                .iter()
                .copied()
                // Either family's zero address asks for the list from its start.
                .filter(|a| {
                    (last.ip().is_unspecified() && last.port() == 0)
                        || list_order(a, &last) == Ordering::Greater
                })
                .collect();
            let d = page_after(&packed(&all), last, None, ipv6);
            let page = ListReply::decode(&d, ipv6, false).unwrap();
            proptest::prop_assert_eq!(&page.servers, &want);
            proptest::prop_assert!(page.complete);
        }
    }

    #[test]
    fn pages_follow_the_last_address_and_the_last_one_is_closed() {
        let mut all: Vec<SocketAddr> = (0..500).map(v4).collect();
        all.sort_by(list_order);
        let all_packed = packed(&all);
        let cap = page_capacity(false, None);
        assert_eq!(cap, 230);
        let mut last = super::super::packet::SEED;
        let mut got = Vec::new();
        for _ in 0..3 {
            let d = page_after(&all_packed, last, None, false);
            assert!(d.len() <= LIST_DATAGRAM_LIMIT);
            let page = ListReply::decode(&d, false, false).unwrap();
            got.extend(page.servers.iter().copied());
            if page.complete {
                break;
            }
            last = *page.servers.last().unwrap();
        }
        assert_eq!(got, all);
        // After an address that left: from where it would be.
        let d = page_after(
            &all_packed,
            SocketAddr::new(v4(10).ip(), 27016),
            None,
            false,
        );
        let page = ListReply::decode(&d, false, false).unwrap();
        assert_eq!(page.servers.first(), Some(&v4(11)));
        // Every page at once: each closed, with the key echoed.
        let pages = every_page(&all_packed, Some(0xABCD), false);
        assert_eq!(pages.len(), 3);
        let mut again = Vec::new();
        for p in &pages {
            let r = ListReply::decode(p, false, true).unwrap();
            assert!(r.complete && r.key == Some(0xABCD));
            again.extend(r.servers);
        }
        assert_eq!(again, all);
        let empty = every_page(&[], None, true);
        assert_eq!(
            empty,
            [[0xFF, 0xFF, 0xFF, 0xFF, 0x66, 0x0A]
                .iter()
                .copied()
                .chain([0; 18])
                .collect::<Vec<u8>>()]
        );
    }
}
