//! Every Quake III / DarkPlaces connectionless datagram Muster speaks, both directions.
//!
//! A datagram is `ff ff ff ff`, a command word (ASCII letters, matched case-sensitively) and
//! a body whose shape depends on the command (spec §1–§3). Decoders check the whole datagram;
//! encoders write what ioquake3 and dpmaster write.

use std::borrow::Borrow;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::{
    EOT, HEADER, IPV4_ENTRY_LEN, IPV6_ENTRY_LEN, InfoString, LIST_DATAGRAM_LIMIT, MAX_DATAGRAM,
    MAX_LIST_ENTRIES_PER_DATAGRAM, MAX_NAME_LEN, MAX_OPTIONS, MAX_PLAYERS, MAX_WORD_LEN, Word,
};
use crate::wire::{DecodeError, Reader, parse_decimal, put_decimal};

const GETINFO: &[u8] = b"getinfo";
const GETSTATUS: &[u8] = b"getstatus";
const INFO_RESPONSE: &[u8] = b"infoResponse";
const STATUS_RESPONSE: &[u8] = b"statusResponse";
const HEARTBEAT: &[u8] = b"heartbeat";
const GETSERVERS: &[u8] = b"getservers";
const GETSERVERS_EXT: &[u8] = b"getserversExt";
const GETSERVERS_RESPONSE: &[u8] = b"getserversResponse";
const GETSERVERS_EXT_RESPONSE: &[u8] = b"getserversExtResponse";

const LF: u8 = b'\n';
const QUOTE: u8 = b'"';
const IPV4_SEPARATOR: u8 = b'\\';
const IPV6_SEPARATOR: u8 = b'/';

/// One whole datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// `getinfo [challenge]`: from a client, or from a master verifying a heartbeat (then the
    /// challenge follows dpmaster's rule, [`super::generate_challenge`]).
    GetInfo {
        /// Echoed back as the `challenge` key of the reply.
        challenge: Option<Word>,
    },
    /// `getstatus [challenge]`.
    GetStatus {
        /// Echoed back as the `challenge` key of the reply.
        challenge: Option<Word>,
    },
    /// `infoResponse`: one info string.
    InfoResponse {
        /// The server's info keys.
        info: InfoString,
    },
    /// `statusResponse`: every server-info cvar, then one line per player.
    StatusResponse {
        /// The server's info keys.
        info: InfoString,
        /// Players and bots in the order sent.
        players: Vec<PlayerLine>,
    },
    /// `heartbeat <tag>`: the tag names the master protocol family (`DarkPlaces`,
    /// `QuakeArena-1`, …), not the game.
    Heartbeat {
        /// The tag as sent.
        tag: Word,
    },
    /// `getservers [game] protocol options…` (IPv4 only).
    GetServers {
        /// Absent for the anonymous games (Quake III, RtCW, ET).
        game: Option<Word>,
        /// The protocol number of the asking client (games use negative numbers too).
        protocol: i32,
        /// Filters in the order sent.
        options: Vec<FilterOption>,
    },
    /// `getserversExt game protocol options…` (IPv4 and IPv6).
    GetServersExt {
        /// Always present.
        game: Word,
        /// The protocol number of the asking client (games use negative numbers too).
        protocol: i32,
        /// Filters in the order sent.
        options: Vec<FilterOption>,
    },
    /// One datagram of a `getserversResponse` / `getserversExtResponse` list.
    ServerList(ServerList),
}

/// One option of a `getservers` / `getserversExt` request (spec §3.3, §3.4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FilterOption {
    /// `empty`: list empty servers too.
    Empty,
    /// `full`: list full servers too.
    Full,
    /// `gametype=X`: only servers that declared this gametype.
    Gametype(Word),
    /// `ffa` = `gametype=0`.
    Ffa,
    /// `tourney` = `gametype=1`.
    Tourney,
    /// `team` = `gametype=3`.
    Team,
    /// `ctf` = `gametype=4`.
    Ctf,
    /// `ipv4` (getserversExt): list IPv4 servers.
    Ipv4,
    /// `ipv6` (getserversExt): list IPv6 servers.
    Ipv6,
    /// Anything else: kept so the master can decide; dpmaster ignores it.
    Other(Vec<u8>),
}

impl FilterOption {
    /// The gametype this option filters on, shortcuts resolved (`ctf` → `4`).
    #[must_use]
    pub fn gametype(&self) -> Option<&[u8]> {
        match self {
            Self::Gametype(g) => Some(g.as_bytes()),
            Self::Ffa => Some(b"0"),
            Self::Tourney => Some(b"1"),
            Self::Team => Some(b"3"),
            Self::Ctf => Some(b"4"),
            _ => None,
        }
    }

    fn parse(token: &[u8]) -> Self {
        match token {
            b"empty" => Self::Empty,
            b"full" => Self::Full,
            b"ffa" => Self::Ffa,
            b"tourney" => Self::Tourney,
            b"team" => Self::Team,
            b"ctf" => Self::Ctf,
            b"ipv4" => Self::Ipv4,
            b"ipv6" => Self::Ipv6,
            _ => match token.strip_prefix(b"gametype=").map(Word::new) {
                Some(Ok(g)) => Self::Gametype(g),
                _ => Self::Other(token.to_vec()),
            },
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let word: &[u8] = match self {
            Self::Empty => b"empty",
            Self::Full => b"full",
            Self::Ffa => b"ffa",
            Self::Tourney => b"tourney",
            Self::Team => b"team",
            Self::Ctf => b"ctf",
            Self::Ipv4 => b"ipv4",
            Self::Ipv6 => b"ipv6",
            Self::Gametype(g) => {
                out.extend_from_slice(b"gametype=");
                g.as_bytes()
            }
            Self::Other(raw) => raw,
        };
        out.extend_from_slice(word);
    }
}

/// One player line of a status reply: `score ping "name"[extra]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayerLine {
    /// Score (frags).
    pub score: i32,
    /// Ping in milliseconds; 0 for bots.
    pub ping: i32,
    name: Vec<u8>,
    extra: Vec<u8>,
}

impl PlayerLine {
    /// A line with no extra fields. The name may hold any byte except `"`, a line feed and
    /// NUL, up to [`MAX_NAME_LEN`] bytes.
    pub fn new(score: i32, ping: i32, name: impl Into<Vec<u8>>) -> Result<Self, DecodeError> {
        Self::with_extra(score, ping, name, Vec::new())
    }

    /// A line with bytes after the closing quote, kept as sent (some DarkPlaces games append
    /// a team number: ` 1`). `extra` may not hold a line feed or NUL.
    pub fn with_extra(
        score: i32,
        ping: i32,
        name: impl Into<Vec<u8>>,
        extra: impl Into<Vec<u8>>,
    ) -> Result<Self, DecodeError> {
        let (name, extra) = (name.into(), extra.into());
        if name.len() > MAX_NAME_LEN {
            return Err(DecodeError::TooLarge("player name"));
        }
        if name.iter().any(|&b| matches!(b, QUOTE | LF | 0)) {
            return Err(DecodeError::Invalid("player name byte"));
        }
        if extra.len() > MAX_NAME_LEN {
            return Err(DecodeError::TooLarge("player line"));
        }
        if extra.iter().any(|&b| matches!(b, LF | 0)) {
            return Err(DecodeError::Invalid("player line byte"));
        }
        Ok(Self {
            score,
            ping,
            name,
            extra,
        })
    }

    /// The name as raw bytes (see [`super::decode_text`]).
    #[must_use]
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Bytes after the closing quote, as sent (usually empty).
    #[must_use]
    pub fn extra(&self) -> &[u8] {
        &self.extra
    }

    fn decode(line: &[u8]) -> Result<Self, DecodeError> {
        const CTX: &str = "player line";
        let mut r = Reader::new(line);
        let score = int(r.until(b' ', CTX)?, "player score")?;
        let ping = int(r.until(b' ', CTX)?, "player ping")?;
        if r.u8(CTX)? != QUOTE {
            return Err(DecodeError::Invalid("player name quote"));
        }
        let name = r.until(QUOTE, "player name")?;
        Self::with_extra(score, ping, name, r.rest())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_decimal(out, i64::from(self.score));
        out.push(b' ');
        put_decimal(out, i64::from(self.ping));
        out.extend_from_slice(b" \"");
        out.extend_from_slice(&self.name);
        out.push(QUOTE);
        out.extend_from_slice(&self.extra);
        out.push(LF);
    }
}

fn int(bytes: &[u8], ctx: &'static str) -> Result<i32, DecodeError> {
    if bytes.is_empty() || bytes.contains(&b' ') {
        return Err(DecodeError::BadNumber(ctx));
    }
    i32::try_from(parse_decimal(bytes, ctx)?).map_err(|_| DecodeError::BadNumber(ctx))
}

/// One datagram of a server list (spec §3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerList {
    /// `getserversExtResponse` (IPv4 and IPv6 entries) rather than `getserversResponse`.
    pub ext: bool,
    /// The entries in order. A plain `getserversResponse` carries only IPv4 addresses;
    /// [`Packet::encode`] leaves IPv6 ones out of it.
    pub servers: Vec<SocketAddr>,
    /// Whether the datagram ends with the `EOT` entry (the last datagram of a list).
    pub eot: bool,
}

impl ServerList {
    /// Split `servers` into whole datagrams of at most [`LIST_DATAGRAM_LIMIT`] bytes, with the
    /// `EOT` entry on the last one only; an empty list is one datagram holding only `EOT`.
    /// Without `ext`, IPv6 addresses are left out (`getserversResponse` cannot carry them).
    ///
    /// `servers` may be any iterator of addresses, so that a master encodes its list straight
    /// from its records, with no vector of addresses (32 bytes each) beside the datagrams.
    #[must_use]
    pub fn encode_datagrams<I>(ext: bool, servers: I) -> Vec<Vec<u8>>
    where
        I: IntoIterator,
        I::Item: Borrow<SocketAddr>,
    {
        let start = |ext: bool| {
            let mut d = Vec::with_capacity(LIST_DATAGRAM_LIMIT);
            d.extend_from_slice(&HEADER);
            d.extend_from_slice(list_command(ext));
            d
        };
        let mut datagrams = Vec::new();
        let mut current = start(ext);
        for addr in servers {
            let addr: &SocketAddr = addr.borrow();
            if !ext && !addr.is_ipv4() {
                continue;
            }
            if current.len() + entry_len(addr) > LIST_DATAGRAM_LIMIT {
                datagrams.push(std::mem::replace(&mut current, start(ext)));
            }
            put_entry(&mut current, addr);
        }
        if current.len() + IPV4_ENTRY_LEN > LIST_DATAGRAM_LIMIT {
            datagrams.push(std::mem::replace(&mut current, start(ext)));
        }
        current.push(IPV4_SEPARATOR);
        current.extend_from_slice(&EOT);
        datagrams.push(current);
        datagrams
    }

    fn decode_body(ext: bool, body: &[u8]) -> Result<Self, DecodeError> {
        const CTX: &str = "server list entry";
        let mut r = Reader::new(body);
        let capacity = (body.len() / IPV4_ENTRY_LEN).min(MAX_LIST_ENTRIES_PER_DATAGRAM);
        let mut servers = Vec::with_capacity(capacity);
        let mut eot = false;
        while !r.is_empty() {
            if eot {
                return Err(DecodeError::Invalid(
                    "EOT before the end of the list datagram",
                ));
            }
            match r.u8(CTX)? {
                IPV4_SEPARATOR => {
                    let entry: [u8; 6] = r.array(CTX)?;
                    if entry == EOT {
                        eot = true;
                        continue;
                    }
                    let [a, b, c, d, p0, p1] = entry;
                    let ip = Ipv4Addr::new(a, b, c, d);
                    let port = u16::from_be_bytes([p0, p1]);
                    servers.push(SocketAddr::V4(SocketAddrV4::new(ip, port)));
                }
                IPV6_SEPARATOR if ext => {
                    let ip: [u8; 16] = r.array(CTX)?;
                    let port = r.u16_be(CTX)?;
                    let ip = Ipv6Addr::from(ip);
                    servers.push(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0)));
                }
                _ => return Err(DecodeError::Invalid("server list separator")),
            }
        }
        Ok(Self { ext, servers, eot })
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        for addr in self.servers.iter().filter(|a| self.ext || a.is_ipv4()) {
            put_entry(out, addr);
        }
        if self.eot {
            out.push(IPV4_SEPARATOR);
            out.extend_from_slice(&EOT);
        }
    }
}

fn list_command(ext: bool) -> &'static [u8] {
    if ext {
        GETSERVERS_EXT_RESPONSE
    } else {
        GETSERVERS_RESPONSE
    }
}

fn entry_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => IPV4_ENTRY_LEN,
        SocketAddr::V6(_) => IPV6_ENTRY_LEN,
    }
}

fn put_entry(out: &mut Vec<u8>, addr: &SocketAddr) {
    match addr {
        SocketAddr::V4(a) => {
            out.push(IPV4_SEPARATOR);
            out.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            out.push(IPV6_SEPARATOR);
            out.extend_from_slice(&a.ip().octets());
        }
    }
    out.extend_from_slice(&addr.port().to_be_bytes());
}

/// The command that begins `rest` (what follows the header): its leading ASCII letters.
fn command_word(rest: &[u8]) -> &[u8] {
    let len = rest
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    rest.get(..len).unwrap_or_default()
}

impl Packet {
    /// Whether `datagram` is a `getservers` or `getserversExt` request, by its header and
    /// command alone (what [`Packet::decode`] would decode as [`Packet::GetServers`] or
    /// [`Packet::GetServersExt`], if the rest is well formed): a master tells list requests
    /// apart before decoding anything.
    #[must_use]
    pub fn asks_for_list(datagram: &[u8]) -> bool {
        datagram
            .strip_prefix(&HEADER)
            .map(command_word)
            .is_some_and(|c| c == GETSERVERS || c == GETSERVERS_EXT)
    }

    /// Decode one datagram.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        if datagram.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("quake3 datagram"));
        }
        let mut r = Reader::new(datagram);
        if r.array::<4>("quake3 header")? != HEADER {
            return Err(DecodeError::BadMagic("quake3 header"));
        }
        let command = r.take(command_word(r.peek_rest()).len(), "quake3 command")?;
        let body = r.rest();
        match command {
            GETINFO => Ok(Self::GetInfo {
                challenge: challenge(body)?,
            }),
            GETSTATUS => Ok(Self::GetStatus {
                challenge: challenge(body)?,
            }),
            INFO_RESPONSE => decode_info_response(body),
            STATUS_RESPONSE => decode_status_response(body),
            HEARTBEAT => decode_heartbeat(body),
            GETSERVERS => decode_getservers(false, body),
            GETSERVERS_EXT => decode_getservers(true, body),
            GETSERVERS_RESPONSE => ServerList::decode_body(false, body).map(Self::ServerList),
            GETSERVERS_EXT_RESPONSE => ServerList::decode_body(true, body).map(Self::ServerList),
            _ => Err(DecodeError::BadMagic("quake3 command")),
        }
    }

    /// Append the datagram to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&HEADER);
        match self {
            Self::GetInfo { challenge } => encode_query(out, GETINFO, challenge.as_ref()),
            Self::GetStatus { challenge } => encode_query(out, GETSTATUS, challenge.as_ref()),
            Self::InfoResponse { info } => {
                out.extend_from_slice(INFO_RESPONSE);
                out.push(LF);
                info.encode(out);
            }
            Self::StatusResponse { info, players } => {
                out.extend_from_slice(STATUS_RESPONSE);
                out.push(LF);
                info.encode(out);
                out.push(LF);
                for p in players {
                    p.encode(out);
                }
            }
            Self::Heartbeat { tag } => {
                out.extend_from_slice(HEARTBEAT);
                out.push(b' ');
                out.extend_from_slice(tag.as_bytes());
                out.push(LF);
            }
            Self::GetServers {
                game,
                protocol,
                options,
            } => {
                out.extend_from_slice(GETSERVERS);
                if let Some(g) = game {
                    out.push(b' ');
                    out.extend_from_slice(g.as_bytes());
                }
                encode_query_tail(out, *protocol, options);
            }
            Self::GetServersExt {
                game,
                protocol,
                options,
            } => {
                out.extend_from_slice(GETSERVERS_EXT);
                out.push(b' ');
                out.extend_from_slice(game.as_bytes());
                encode_query_tail(out, *protocol, options);
            }
            Self::ServerList(list) => {
                out.extend_from_slice(list_command(list.ext));
                list.encode_body(out);
            }
        }
    }
}

fn encode_query(out: &mut Vec<u8>, command: &[u8], challenge: Option<&Word>) {
    out.extend_from_slice(command);
    if let Some(c) = challenge {
        out.push(b' ');
        out.extend_from_slice(c.as_bytes());
    }
}

fn encode_query_tail(out: &mut Vec<u8>, protocol: i32, options: &[FilterOption]) {
    out.push(b' ');
    put_decimal(out, i64::from(protocol));
    for o in options {
        out.push(b' ');
        o.encode(out);
    }
}

/// The optional challenge after `getinfo` / `getstatus`: one word after a space; trailing
/// whitespace (a line feed some tools add, qstat sends `getinfo` + line feed) is tolerated.
/// The engines read the datagram as a C string, so a NUL ends the request (gamedig and
/// opengsq send `getstatus` + NUL): what follows it is ignored.
fn challenge(body: &[u8]) -> Result<Option<Word>, DecodeError> {
    let body = body.split(|&b| b == 0).next().unwrap_or_default();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let Some(rest) = body.strip_prefix(b" ") else {
        return Err(DecodeError::Invalid("query challenge separator"));
    };
    let word = rest.trim_ascii();
    if word.is_empty() {
        return Ok(None);
    }
    Word::new(word).map(Some)
}

fn decode_info_response(body: &[u8]) -> Result<Packet, DecodeError> {
    let mut r = Reader::new(body);
    if r.u8("infoResponse")? != LF {
        return Err(DecodeError::Invalid("infoResponse line feed"));
    }
    let rest = r.rest();
    let info = rest.strip_suffix(b"\n").unwrap_or(rest);
    Ok(Packet::InfoResponse {
        info: InfoString::decode(info)?,
    })
}

fn decode_status_response(body: &[u8]) -> Result<Packet, DecodeError> {
    let mut r = Reader::new(body);
    if r.u8("statusResponse")? != LF {
        return Err(DecodeError::Invalid("statusResponse line feed"));
    }
    let info = if r.peek_rest().contains(&LF) {
        r.until(LF, "statusResponse info")?
    } else {
        r.rest()
    };
    let info = InfoString::decode(info)?;
    let mut players = Vec::new();
    while !r.is_empty() {
        if players.len() >= MAX_PLAYERS {
            return Err(DecodeError::TooLarge("statusResponse players"));
        }
        let line = r.until(LF, "player line")?;
        players.push(PlayerLine::decode(line)?);
    }
    Ok(Packet::StatusResponse { info, players })
}

fn decode_heartbeat(body: &[u8]) -> Result<Packet, DecodeError> {
    let Some(rest) = body.strip_prefix(b" ") else {
        return Err(DecodeError::Invalid("heartbeat separator"));
    };
    let tag = rest.strip_suffix(b"\n").unwrap_or(rest);
    Ok(Packet::Heartbeat {
        tag: Word::new(tag)?,
    })
}

fn decode_getservers(ext: bool, body: &[u8]) -> Result<Packet, DecodeError> {
    if !body.first().is_some_and(u8::is_ascii_whitespace) {
        return Err(DecodeError::Invalid("getservers separator"));
    }
    let mut tokens = body
        .split(u8::is_ascii_whitespace)
        .filter(|t| !t.is_empty());
    let first = tokens.next().ok_or(DecodeError::Truncated("getservers"))?;
    let (game, protocol) = if !ext && is_number(first) {
        (None, first)
    } else {
        let protocol = tokens
            .next()
            .ok_or(DecodeError::Truncated("getservers protocol"))?;
        (Some(Word::new(first)?), protocol)
    };
    let protocol = protocol_number(protocol)?;
    let mut options = Vec::new();
    for token in tokens {
        if options.len() >= MAX_OPTIONS {
            return Err(DecodeError::TooLarge("getservers options"));
        }
        if token.len() > MAX_WORD_LEN {
            return Err(DecodeError::TooLarge("getservers option"));
        }
        options.push(FilterOption::parse(token));
    }
    Ok(match (ext, game) {
        (true, Some(game)) => Packet::GetServersExt {
            game,
            protocol,
            options,
        },
        (_, game) => Packet::GetServers {
            game,
            protocol,
            options,
        },
    })
}

/// A decimal number, with an optional leading minus sign.
fn is_number(bytes: &[u8]) -> bool {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

fn protocol_number(bytes: &[u8]) -> Result<i32, DecodeError> {
    const CTX: &str = "getservers protocol";
    if !is_number(bytes) {
        return Err(DecodeError::BadNumber(CTX));
    }
    i32::try_from(parse_decimal(bytes, CTX)?).map_err(|_| DecodeError::BadNumber(CTX))
}

#[cfg(test)]
mod tests;
