//! Every datagram of the Valve master family, decoded and encoded (see the module docs).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{
    HEADER, IPV4_ENTRY_LEN, IPV6_ENTRY_LEN, MAX_DATAGRAM, MAX_FILTER_LEN, MAX_INFO_LEN,
    MAX_INFO_PAIRS, MAX_LAST_ADDR_LEN,
};
use crate::wire::{DecodeError, Reader, parse_decimal, put_decimal};

/// The region byte of a list request (and the `region` a heartbeat names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region(pub u8);

impl Default for Region {
    /// [`Region::WORLD`]: what a heartbeat without `\region\` means.
    fn default() -> Self {
        Self::WORLD
    }
}

impl Region {
    /// US east coast.
    pub const US_EAST: Self = Self(0x00);
    /// US west coast.
    pub const US_WEST: Self = Self(0x01);
    /// South America.
    pub const SOUTH_AMERICA: Self = Self(0x02);
    /// Europe.
    pub const EUROPE: Self = Self(0x03);
    /// Asia.
    pub const ASIA: Self = Self(0x04);
    /// Australia.
    pub const AUSTRALIA: Self = Self(0x05);
    /// Middle East.
    pub const MIDDLE_EAST: Self = Self(0x06);
    /// Africa.
    pub const AFRICA: Self = Self(0x07);
    /// Everywhere ("rest of the world"), what clients send to get every server.
    pub const WORLD: Self = Self(0xFF);

    /// Its name, when it is one of the documented regions.
    #[must_use]
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x00 => "us-east",
            0x01 => "us-west",
            0x02 => "south-america",
            0x03 => "europe",
            0x04 => "asia",
            0x05 => "australia",
            0x06 => "middle-east",
            0x07 => "africa",
            0xFF => "world",
            _ => return None,
        })
    }
}

/// The address every list starts from and every complete list ends with.
pub const SEED: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Client to master: one page of the list, after `last`, of the servers `filter` selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// The region asked for.
    pub region: Region,
    /// The last address of the previous page ([`SEED`] for the first page).
    pub last: SocketAddr,
    /// The filter string, raw (`\gamedir\valve\empty\1`); see [`super::Filter`].
    pub filter: Vec<u8>,
}

impl ListRequest {
    /// The first byte of a list request.
    pub const TAG: u8 = b'1';

    /// The first page of the servers `filter` selects, everywhere.
    #[must_use]
    pub fn first(filter: &[u8]) -> Self {
        Self {
            region: Region::WORLD,
            last: SEED,
            filter: filter.to_vec(),
        }
    }

    /// Decodes a request. The filter's closing NUL may be missing (the Xash3D engine leaves
    /// it out); nothing may follow it.
    pub fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        if data.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("list request"));
        }
        let mut r = Reader::new(data);
        if r.u8("list request tag")? != Self::TAG {
            return Err(DecodeError::BadMagic("list request"));
        }
        let region = Region(r.u8("region")?);
        let last = r.cstr("last address")?;
        if last.len() > MAX_LAST_ADDR_LEN {
            return Err(DecodeError::TooLarge("last address"));
        }
        let last = parse_addr(last).ok_or(DecodeError::Invalid("last address"))?;
        let rest = r.rest();
        let filter = match rest.iter().position(|&b| b == 0) {
            Some(end) if end + 1 == rest.len() => rest.get(..end).unwrap_or_default(),
            Some(end) => return Err(DecodeError::TrailingBytes(rest.len() - end - 1, "filter")),
            None => rest,
        };
        if filter.len() > MAX_FILTER_LEN {
            return Err(DecodeError::TooLarge("filter"));
        }
        Ok(Self {
            region,
            last,
            filter: filter.to_vec(),
        })
    }

    /// The datagram.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let last = self.last.to_string();
        let mut out = Vec::with_capacity(3 + last.len() + self.filter.len() + 1);
        out.push(Self::TAG);
        out.push(self.region.0);
        out.extend_from_slice(last.as_bytes());
        out.push(0);
        out.extend(self.filter.iter().copied().filter(|&b| b != 0));
        out.push(0);
        out
    }
}

/// `a.b.c.d:port` or `[v6]:port`.
fn parse_addr(text: &[u8]) -> Option<SocketAddr> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Master to client: one page of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListReply {
    /// The key the request's filter carried (`\key\`, Xash3D), echoed before the entries.
    pub key: Option<u32>,
    /// The servers of this page, in order.
    pub servers: Vec<SocketAddr>,
    /// Whether the page ends with the all-zero address: the list is complete.
    pub complete: bool,
}

/// The bytes after [`HEADER`] that mark a list reply.
pub const LIST_REPLY_TAG: [u8; 2] = [0x66, 0x0A];

/// The marker and length around an echoed key (Xash3D): `7f key:u32 LE 08`.
const KEY_MARK: u8 = 0x7F;
const KEY_LEN: u8 = 8;

impl ListReply {
    /// Decodes a page whose entries are IPv4 (`ipv6` false: 6 bytes each) or IPv6 (18 bytes
    /// each). `with_key`: the request carried a `\key\`, so the page starts with its echo
    /// (without a request key, bytes that look like one are an entry).
    pub fn decode(data: &[u8], ipv6: bool, with_key: bool) -> Result<Self, DecodeError> {
        if data.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("list reply"));
        }
        let mut r = Reader::new(data);
        if r.array::<4>("list reply header")? != HEADER
            || r.array::<2>("list reply tag")? != LIST_REPLY_TAG
        {
            return Err(DecodeError::BadMagic("list reply"));
        }
        let mut key = None;
        if with_key && r.peek() == Some(KEY_MARK) {
            let mut k = r;
            k.skip(1, "key mark")?;
            let value = k.u32_le("key")?;
            if k.u8("key length")? == KEY_LEN {
                key = Some(value);
                r = k;
            }
        }
        let entry = if ipv6 { IPV6_ENTRY_LEN } else { IPV4_ENTRY_LEN };
        let body = r.rest();
        if body.len() % entry != 0 {
            return Err(DecodeError::Invalid("list reply entries"));
        }
        let mut servers = Vec::with_capacity(body.len() / entry);
        let mut complete = false;
        for (i, chunk) in body.chunks_exact(entry).enumerate() {
            let addr = entry_addr(chunk).ok_or(DecodeError::Invalid("list entry"))?;
            if addr.ip().is_unspecified() && addr.port() == 0 {
                // The end mark closes the list; nothing may follow it.
                if (i + 1) * entry != body.len() {
                    return Err(DecodeError::Invalid("entries after the end mark"));
                }
                complete = true;
            } else {
                servers.push(addr);
            }
        }
        Ok(Self {
            key,
            servers,
            complete,
        })
    }

    /// The datagram (IPv4 and IPv6 entries as the addresses are; a page holds one family).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.servers.len() * IPV4_ENTRY_LEN + 18);
        out.extend_from_slice(&HEADER);
        out.extend_from_slice(&LIST_REPLY_TAG);
        if let Some(k) = self.key {
            out.push(KEY_MARK);
            out.extend_from_slice(&k.to_le_bytes());
            out.push(KEY_LEN);
        }
        for a in &self.servers {
            put_entry(&mut out, *a);
        }
        if self.complete {
            let v6 = self.servers.first().is_some_and(SocketAddr::is_ipv6);
            let zeros = if v6 { IPV6_ENTRY_LEN } else { IPV4_ENTRY_LEN };
            out.resize(out.len() + zeros, 0);
        }
        out
    }
}

/// The address of one list entry: [`IPV4_ENTRY_LEN`] bytes for an IPv4 one,
/// [`IPV6_ENTRY_LEN`] for an IPv6 one (address, then port, big-endian); `None` for any other
/// length.
#[must_use]
pub fn entry_addr(chunk: &[u8]) -> Option<SocketAddr> {
    match chunk.len() {
        IPV4_ENTRY_LEN => {
            let (ip, port) = chunk.split_first_chunk::<4>()?;
            let port = u16::from_be_bytes(*port.first_chunk::<2>()?);
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(*ip)), port))
        }
        IPV6_ENTRY_LEN => {
            let (ip, port) = chunk.split_first_chunk::<16>()?;
            let port = u16::from_be_bytes(*port.first_chunk::<2>()?);
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(*ip)), port))
        }
        _ => None,
    }
}

/// Appends `a` to `out` as a list entry (see [`entry_addr`]).
pub fn put_entry(out: &mut Vec<u8>, a: SocketAddr) {
    match a.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&a.port().to_be_bytes());
}

/// Server to master: asks for the challenge its heartbeat must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeRequest {
    /// A number of the server's own the master echoes (Xash3D), so that a forged reply is
    /// told apart.
    pub server_challenge: Option<u32>,
}

/// Master to server: the challenge to put in the heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeReply {
    /// The number the heartbeat's `\challenge\` must carry.
    pub challenge: u32,
    /// The request's own number, echoed.
    pub server_challenge: Option<u32>,
}

/// The bytes after [`HEADER`] that mark a challenge reply.
pub const CHALLENGE_REPLY_TAG: [u8; 2] = [0x73, 0x0A];

impl ChallengeReply {
    /// Decodes a reply.
    pub fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(data);
        if r.array::<4>("challenge header")? != HEADER
            || r.array::<2>("challenge tag")? != CHALLENGE_REPLY_TAG
        {
            return Err(DecodeError::BadMagic("challenge reply"));
        }
        let challenge = r.u32_le("challenge")?;
        let server_challenge = if r.is_empty() {
            None
        } else {
            Some(r.u32_le("server challenge")?)
        };
        r.finish("challenge reply")?;
        Ok(Self {
            challenge,
            server_challenge,
        })
    }

    /// The datagram.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(14);
        out.extend_from_slice(&HEADER);
        out.extend_from_slice(&CHALLENGE_REPLY_TAG);
        out.extend_from_slice(&self.challenge.to_le_bytes());
        if let Some(s) = self.server_challenge {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }
}

/// Server to master: its state, as `\key\value` pairs (raw bytes, in order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Heartbeat {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Heartbeat {
    /// A heartbeat of `pairs` (keys and values must hold no `\`, NUL or newline; such bytes
    /// are left out when encoding).
    #[must_use]
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        Self { pairs }
    }

    /// Every pair, in order.
    #[must_use]
    pub fn pairs(&self) -> &[(Vec<u8>, Vec<u8>)] {
        &self.pairs
    }

    /// The first value of `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.pairs
            .iter()
            .find(|(k, _)| k.as_slice() == key.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    fn number(&self, key: &'static str) -> Option<i64> {
        parse_decimal(self.get(key)?, key).ok()
    }

    fn flag(&self, key: &'static str) -> bool {
        self.number(key).is_some_and(|n| n != 0)
    }

    /// The master's challenge, echoed.
    #[must_use]
    pub fn challenge(&self) -> Option<u32> {
        u32::try_from(self.number("challenge")?).ok()
    }

    /// The network protocol version (48 for Half-Life, 49 for current Xash3D).
    #[must_use]
    pub fn protocol(&self) -> Option<u8> {
        u8::try_from(self.number("protocol")?).ok()
    }

    /// Players on the server.
    #[must_use]
    pub fn players(&self) -> Option<u32> {
        u32::try_from(self.number("players")?).ok()
    }

    /// Its slots.
    #[must_use]
    pub fn max_players(&self) -> Option<u32> {
        u32::try_from(self.number("max")?).ok()
    }

    /// Bots among the players.
    #[must_use]
    pub fn bots(&self) -> Option<u32> {
        u32::try_from(self.number("bots")?).ok()
    }

    /// The game directory (`valve` for Half-Life, `cstrike`, …).
    #[must_use]
    pub fn gamedir(&self) -> Option<&[u8]> {
        self.get("gamedir")
    }

    /// The map.
    #[must_use]
    pub fn map(&self) -> Option<&[u8]> {
        self.get("map")
    }

    /// `d` dedicated, `l` listen, `p` proxy (SourceTV/HLTV).
    #[must_use]
    pub fn server_type(&self) -> Option<u8> {
        self.get("type").and_then(|v| v.first().copied())
    }

    /// `l` Linux, `w` Windows, `m` macOS.
    #[must_use]
    pub fn os(&self) -> Option<u8> {
        self.get("os").and_then(|v| v.first().copied())
    }

    /// The region it says it is in.
    #[must_use]
    pub fn region(&self) -> Option<Region> {
        u8::try_from(self.number("region")?).ok().map(Region)
    }

    /// Whether it asks a password.
    #[must_use]
    pub fn password(&self) -> bool {
        self.flag("password")
    }

    /// Whether it runs an anti-cheat.
    #[must_use]
    pub fn secure(&self) -> bool {
        self.flag("secure")
    }

    /// Whether it is a LAN server.
    #[must_use]
    pub fn lan(&self) -> bool {
        self.flag("lan")
    }

    /// Whether it is behind NAT (Xash3D).
    #[must_use]
    pub fn nat(&self) -> bool {
        self.flag("nat")
    }

    /// Decodes the info string after `0\n` (up to an optional closing newline).
    fn decode_info(info: &[u8]) -> Result<Self, DecodeError> {
        if info.len() > MAX_INFO_LEN {
            return Err(DecodeError::TooLarge("heartbeat info"));
        }
        if info.contains(&0) {
            return Err(DecodeError::Invalid("heartbeat info"));
        }
        let body = match info.strip_prefix(b"\\") {
            Some(b) => b,
            None if info.is_empty() => info,
            None => return Err(DecodeError::Invalid("heartbeat info")),
        };
        let mut pairs = Vec::new();
        if body.is_empty() {
            return Ok(Self { pairs });
        }
        let mut parts = body.split(|&b| b == b'\\');
        while let Some(key) = parts.next() {
            let value = parts.next().ok_or(DecodeError::Invalid("heartbeat pair"))?;
            if pairs.len() >= MAX_INFO_PAIRS {
                return Err(DecodeError::TooLarge("heartbeat pairs"));
            }
            pairs.push((key.to_vec(), value.to_vec()));
        }
        Ok(Self { pairs })
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let clean = |b: &u8| !matches!(b, b'\\' | 0 | b'\n');
        for (k, v) in &self.pairs {
            out.push(b'\\');
            out.extend(k.iter().copied().filter(clean));
            out.push(b'\\');
            out.extend(v.iter().copied().filter(clean));
        }
    }
}

/// A datagram a game server sends a master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerPacket {
    /// `q`, optionally `ff` and a number: give me a challenge.
    Challenge(ChallengeRequest),
    /// `0\n\k\v…`: my state, with the challenge.
    Heartbeat(Heartbeat),
    /// `b\n`: I am shutting down.
    Remove,
}

impl ServerPacket {
    /// Decodes a server's datagram.
    pub fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        if data.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("server packet"));
        }
        match data {
            [b'q'] => Ok(Self::Challenge(ChallengeRequest {
                server_challenge: None,
            })),
            [b'q', 0xFF, rest @ ..] => {
                let mut r = Reader::new(rest);
                let server_challenge = if r.is_empty() {
                    None
                } else {
                    Some(r.u32_le("server challenge")?)
                };
                r.finish("challenge request")?;
                Ok(Self::Challenge(ChallengeRequest { server_challenge }))
            }
            [b'0', b'\n', info @ ..] => {
                // The closing newline is missing in some engine builds.
                let info = match info.iter().position(|&b| b == b'\n') {
                    Some(end) if end + 1 == info.len() => info.get(..end).unwrap_or_default(),
                    Some(_) => return Err(DecodeError::Invalid("heartbeat")),
                    None => info,
                };
                Heartbeat::decode_info(info).map(Self::Heartbeat)
            }
            [b'b'] | [b'b', b'\n'] => Ok(Self::Remove),
            _ => Err(DecodeError::BadMagic("server packet")),
        }
    }

    /// The datagram.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Challenge(c) => {
                let mut out = vec![b'q', 0xFF];
                if let Some(n) = c.server_challenge {
                    out.extend_from_slice(&n.to_le_bytes());
                }
                out
            }
            Self::Heartbeat(h) => {
                let mut out = b"0\n".to_vec();
                h.encode_into(&mut out);
                out.push(b'\n');
                out
            }
            Self::Remove => b"b\n".to_vec(),
        }
    }
}

/// A heartbeat of the usual keys, for responders and tests.
#[must_use]
pub fn heartbeat_of(challenge: u32, gamedir: &str, map: &str, players: u32, max: u32) -> Heartbeat {
    let mut pairs = Vec::new();
    let mut num = |k: &str, n: i64| {
        let mut v = Vec::new();
        put_decimal(&mut v, n);
        pairs.push((k.as_bytes().to_vec(), v));
    };
    num("protocol", 48);
    num("challenge", i64::from(challenge));
    num("players", i64::from(players));
    num("max", i64::from(max));
    num("bots", 0);
    pairs.push((b"gamedir".to_vec(), gamedir.as_bytes().to_vec()));
    pairs.push((b"map".to_vec(), map.as_bytes().to_vec()));
    pairs.push((b"type".to_vec(), b"d".to_vec()));
    pairs.push((b"os".to_vec(), b"l".to_vec()));
    // Xash3D masters refuse servers older than 0.21 (a Half-Life build number is not one).
    pairs.push((b"version".to_vec(), b"0.21".to_vec()));
    Heartbeat::new(pairs)
}

#[cfg(test)]
mod tests;
