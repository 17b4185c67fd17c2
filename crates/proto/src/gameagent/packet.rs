//! GameAgent messages: the master face (`e`, `s`, `q`, `01` challenge, `0` heartbeat, `u`) and
//! the query port (requests `01`–`04`, status, players and count replies).
//!
//! Decoders are lenient (spec §7): trailing bytes after one-byte requests are ignored, list
//! datagrams may end in a partial record, player datagrams may lack the header or the trailer.
//! Encoders are byte-exact to stock 1.10 output; constructors reject anything that would not
//! survive the stock framing, so `encode` cannot fail.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use super::{
    MAX_DATAGRAM, MAX_LIST_RECORDS_PER_DATAGRAM, MAX_PAIRS, MAX_PLAYER_RECORDS,
    MAX_PLAYERS_PREALLOC, NAME_MARK_CONTROL_BYTE, NAME_MARK_LINE_BREAK_BYTE, PLAYERS_SPLIT_LIMIT,
};
use crate::wire::{DecodeError, Reader, parse_decimal, put_decimal};

/// Bytes shown as an escaped byte string in `Debug` output, so snapshots stay readable.
struct ByteStr<'a>(&'a [u8]);

impl fmt::Debug for ByteStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

// ---------------------------------------------------------------------------------------------
// Challenge (master -> server, and client -> query port as request 01)
// ---------------------------------------------------------------------------------------------

/// The join challenge: `01` and a 32-bit integer, little-endian on every known deployment.
///
/// The same five bytes sent to a server's query port make it send a heartbeat echoing the value
/// to its master (request `01`, spec §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Challenge(pub i32);

impl Challenge {
    /// Decode `01` + 4 bytes; bytes after the fifth are ignored (spec §7 item 4).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        if r.u8("challenge")? != CHALLENGE {
            return Err(DecodeError::BadMagic("challenge"));
        }
        r.i32_le("challenge value").map(Self)
    }

    /// Append the five bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CHALLENGE);
        out.extend_from_slice(&self.0.to_le_bytes());
    }

    /// True when a heartbeat's echo answers this challenge: the echo equals the value read
    /// little-endian (stock x86) or big-endian (a big-endian server build), spec §8.3.4.
    #[must_use]
    pub fn matches_echo(&self, echo: i32) -> bool {
        echo == self.0 || echo == self.0.swap_bytes()
    }
}

// ---------------------------------------------------------------------------------------------
// List reply `s`
// ---------------------------------------------------------------------------------------------

/// One `s` datagram: IPv4 game addresses, ports little-endian (spec §2.3).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ListReply {
    servers: Vec<SocketAddrV4>,
    partial_record: Vec<u8>,
}

impl fmt::Debug for ListReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListReply")
            .field("servers", &self.servers)
            .field("partial_record", &ByteStr(&self.partial_record))
            .finish()
    }
}

impl ListReply {
    /// A stock datagram of at most [`MAX_LIST_RECORDS_PER_DATAGRAM`] records; `None` when there
    /// are more (use [`encode_list`] to split any number).
    #[must_use]
    pub fn new(servers: Vec<SocketAddrV4>) -> Option<Self> {
        (servers.len() <= MAX_LIST_RECORDS_PER_DATAGRAM).then_some(Self {
            servers,
            partial_record: Vec::new(),
        })
    }

    /// Decode one datagram: `73`, then records while at least six bytes remain; a shorter
    /// tail is kept in [`Self::partial_record`] (spec §7 item 7). Datagrams above
    /// [`MAX_DATAGRAM`] are refused before anything is allocated.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("list reply"));
        }
        let mut r = Reader::new(bytes);
        if r.u8("list reply")? != LIST_REPLY {
            return Err(DecodeError::BadMagic("list reply"));
        }
        let mut servers = Vec::with_capacity(r.remaining() / LIST_RECORD_LEN);
        while r.remaining() >= LIST_RECORD_LEN {
            let ip: [u8; 4] = r.array("list record address")?;
            let port = r.u16_le("list record port")?;
            servers.push(SocketAddrV4::new(Ipv4Addr::from(ip), port));
        }
        Ok(Self {
            servers,
            partial_record: r.rest().to_vec(),
        })
    }

    /// Append the datagram (including any partial tail that was decoded).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(LIST_REPLY);
        for s in &self.servers {
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&s.port().to_le_bytes());
        }
        out.extend_from_slice(&self.partial_record);
    }

    /// The game addresses, in wire order (duplicates and zero ports kept).
    #[must_use]
    pub fn servers(&self) -> &[SocketAddrV4] {
        &self.servers
    }

    /// The bytes of a trailing record shorter than six bytes (empty from stock masters).
    #[must_use]
    pub fn partial_record(&self) -> &[u8] {
        &self.partial_record
    }
}

/// Encode a whole list the way the stock master does (spec §2.3, §8.3.9): `73` first in every
/// datagram, at most 170 records (1021 bytes) each, and an empty list as the single datagram
/// `73`. Returns one buffer per datagram.
#[must_use]
pub fn encode_list(servers: &[SocketAddrV4]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunks = servers.chunks(MAX_LIST_RECORDS_PER_DATAGRAM).peekable();
    if chunks.peek().is_none() {
        return vec![vec![LIST_REPLY]];
    }
    for chunk in chunks {
        let mut dg = Vec::with_capacity(1 + chunk.len() * LIST_RECORD_LEN);
        dg.push(LIST_REPLY);
        for s in chunk {
            dg.extend_from_slice(&s.ip().octets());
            dg.extend_from_slice(&s.port().to_le_bytes());
        }
        out.push(dg);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// `;key;value` pairs (heartbeat and status)
// ---------------------------------------------------------------------------------------------

/// A `;key;value` pair with the raw bytes of both sides.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Pair {
    /// The key bytes.
    pub key: Vec<u8>,
    /// The value bytes.
    pub value: Vec<u8>,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        PairRef(&self.key, &self.value).fmt(f)
    }
}

/// A pair's bytes, shown as `b"key" = b"value"`.
struct PairRef<'a>(&'a [u8], &'a [u8]);

impl fmt::Debug for PairRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} = {:?}", ByteStr(self.0), ByteStr(self.1))
    }
}

impl Pair {
    fn new(key: &[u8], value: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            value: value.to_vec(),
        }
    }
}

/// Remove what would corrupt the stock framing from a status or heartbeat value (spec §8.4.2):
/// every `;` and every byte below 0x20. Values a stock server would send unchanged are returned
/// unchanged.
#[must_use]
pub fn sanitize_value(value: &[u8]) -> Vec<u8> {
    value
        .iter()
        .copied()
        .filter(|&b| b != SEP && b >= 0x20)
        .collect()
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn last_value<'a>(pairs: &'a [Pair], key: &[u8]) -> Option<&'a [u8]> {
    pairs
        .iter()
        .rev()
        .find(|p| p.key == key)
        .map(|p| p.value.as_slice())
}

// ---------------------------------------------------------------------------------------------
// Heartbeat `0`
// ---------------------------------------------------------------------------------------------

/// The fields of a stock heartbeat, in wire order (spec §2.4). Strings are raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatFields {
    /// The challenge echoed (`0` in periodic heartbeats).
    pub challenge: i32,
    /// Active player buffers.
    pub players: u32,
    /// Session maximum.
    pub max_players: u32,
    /// World title.
    pub level: Vec<u8>,
    /// Game type name (may be localized).
    pub gametype: Vec<u8>,
    /// Engine version, `1.10`.
    pub version: Vec<u8>,
    /// `sam_strGameName`: `serioussamse` or `serioussam`.
    pub product: Vec<u8>,
}

/// A server's heartbeat: `0` and `;key;value` pairs (spec §2.4).
///
/// The pairs are kept as one buffer of `;key;value` in wire order, the form they are sent in:
/// a key is word characters and a value has no `;`, so the buffer splits back into the same
/// pairs. Decoding a heartbeat is one allocation, however many pairs it has.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Heartbeat {
    wire: Vec<u8>,
}

impl fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Pairs<'a>(&'a Heartbeat);
        impl fmt::Debug for Pairs<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(self.0.pairs().map(|(k, v)| PairRef(k, v)))
                    .finish()
            }
        }
        f.debug_struct("Heartbeat")
            .field("pairs", &Pairs(self))
            .finish()
    }
}

impl Heartbeat {
    /// The stock heartbeat, keys in the stock order, values sanitized (spec §8.4.2).
    #[must_use]
    pub fn stock(f: &HeartbeatFields) -> Self {
        let mut h = Self::default();
        let mut num = |key: &[u8], n: i64| {
            h.push_key(key);
            put_decimal(&mut h.wire, n);
        };
        num(b"challenge", f.challenge.into());
        num(b"players", f.players.into());
        num(b"maxplayers", f.max_players.into());
        for (key, value) in [
            (&b"level"[..], &f.level),
            (b"gametype", &f.gametype),
            (b"version", &f.version),
            (b"product", &f.product),
        ] {
            h.push(key, &sanitize_value(value));
        }
        h
    }

    /// Arbitrary pairs; `None` when a key is empty or not all word characters
    /// (`[A-Za-z0-9_]`), a value contains `;`, or there are more than [`MAX_PAIRS`], since
    /// the master's rule would then read something else back.
    #[must_use]
    pub fn from_pairs(pairs: Vec<Pair>) -> Option<Self> {
        let ok = pairs.len() <= MAX_PAIRS
            && pairs.iter().all(|p| {
                !p.key.is_empty() && p.key.iter().all(|&b| is_word(b)) && !p.value.contains(&SEP)
            });
        ok.then(|| {
            let mut h = Self::default();
            for p in &pairs {
                h.push(&p.key, &p.value);
            }
            h
        })
    }

    fn push_key(&mut self, key: &[u8]) {
        self.wire.push(SEP);
        self.wire.extend_from_slice(key);
        self.wire.push(SEP);
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.push_key(key);
        self.wire.extend_from_slice(value);
    }

    /// Decode with the reference master's rule: after the leading `0`, every non-overlapping
    /// `;(\w+);([^;]*)` match, left to right, is a pair; anything between matches is skipped.
    /// More than [`MAX_PAIRS`] matches is [`DecodeError::TooLarge`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("heartbeat"));
        }
        let mut r = Reader::new(bytes);
        if r.u8("heartbeat")? != HEARTBEAT {
            return Err(DecodeError::BadMagic("heartbeat"));
        }
        let body = r.rest();
        // The pairs are at most the body: one allocation.
        let mut h = Self {
            wire: Vec::with_capacity(body.len()),
        };
        let mut pairs = 0;
        let mut i = 0;
        while i < body.len() {
            match match_pair(body, i) {
                Some((key, value, next)) => {
                    if pairs == MAX_PAIRS {
                        return Err(DecodeError::TooLarge("heartbeat pairs"));
                    }
                    pairs += 1;
                    h.push(key, value);
                    i = next;
                }
                None => i += 1,
            }
        }
        Ok(h)
    }

    /// Append `0` and `;key;value` for every pair.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(HEARTBEAT);
        out.extend_from_slice(&self.wire);
    }

    /// All pairs in wire order, as (key, value).
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        // `;k1;v1;k2;v2…`: after the first `;`, the parts alternate key, value.
        let mut parts = self
            .wire
            .get(1..)
            .filter(|rest| !rest.is_empty())
            .map(|rest| rest.split(|&b| b == SEP));
        std::iter::from_fn(move || {
            let parts = parts.as_mut()?;
            Some((parts.next()?, parts.next()?))
        })
    }

    /// The value of `key`; with repeated keys the last one wins, as in the master's dictionary.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.pairs()
            .filter(|(k, _)| *k == key.as_bytes())
            .last()
            .map(|(_, v)| v)
    }

    /// The number `key` holds, the way a master reads the heartbeat's counts: a decimal that
    /// fits a `u32`, else (missing, not a number, out of range) 0.
    #[must_use]
    pub fn count(&self, key: &str) -> u32 {
        self.get(key)
            .and_then(|v| parse_decimal(v, "heartbeat number").ok())
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    }

    /// The `challenge` echo as a signed 32-bit decimal (spec §7 item 9); `None` when missing or
    /// not a number in range.
    #[must_use]
    pub fn challenge(&self) -> Option<i32> {
        let v = self.get("challenge")?;
        parse_decimal(v, "challenge")
            .ok()
            .and_then(|n| i32::try_from(n).ok())
    }
}

/// `;(\w+);([^;]*)` anchored at `start`: (key, value, index after the match).
fn match_pair(body: &[u8], start: usize) -> Option<(&[u8], &[u8], usize)> {
    let rest = body.get(start..)?;
    let after_sep = rest.strip_prefix(&[SEP])?;
    let key_len = after_sep.iter().take_while(|&&b| is_word(b)).count();
    if key_len == 0 {
        return None;
    }
    let (key, tail) = after_sep.split_at_checked(key_len)?;
    let tail = tail.strip_prefix(&[SEP])?;
    let value_len = tail.iter().take_while(|&&b| b != SEP).count();
    let value = tail.get(..value_len)?;
    Some((key, value, start + 2 + key_len + value_len))
}

// ---------------------------------------------------------------------------------------------
// Master packets
// ---------------------------------------------------------------------------------------------

/// Any datagram on the master port, dispatched on byte 0 like the reference master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterPacket {
    /// `e`: list request (trailing bytes ignored).
    ListRequest,
    /// `s`: one list datagram.
    ListReply(ListReply),
    /// `q`: a server joins.
    Join,
    /// `01`: the join challenge.
    Challenge(Challenge),
    /// `0`: challenge answer or periodic heartbeat.
    Heartbeat(Heartbeat),
    /// `u`: the server accepted a player.
    StateChanged,
    /// Any other first byte (the rest of the datagram is not kept).
    Unknown(u8),
}

impl MasterPacket {
    /// Dispatch on byte 0. An empty datagram is [`DecodeError::Truncated`] (the reference master
    /// crashes on it, spec §2.5).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let first = Reader::new(bytes).u8("master packet")?;
        Ok(match first {
            LIST_REQUEST => Self::ListRequest,
            LIST_REPLY => Self::ListReply(ListReply::decode(bytes)?),
            JOIN => Self::Join,
            CHALLENGE => Self::Challenge(Challenge::decode(bytes)?),
            HEARTBEAT => Self::Heartbeat(Heartbeat::decode(bytes)?),
            STATE_CHANGED => Self::StateChanged,
            other => Self::Unknown(other),
        })
    }

    /// Append the stock bytes of the message (`Unknown(n)` is the single byte `n`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::ListRequest => out.push(LIST_REQUEST),
            Self::ListReply(l) => l.encode(out),
            Self::Join => out.push(JOIN),
            Self::Challenge(c) => c.encode(out),
            Self::Heartbeat(h) => h.encode(out),
            Self::StateChanged => out.push(STATE_CHANGED),
            Self::Unknown(n) => out.push(*n),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Query-port requests
// ---------------------------------------------------------------------------------------------

/// A request to a server's query port (spec §3.1). Bytes after byte 0 are ignored for `02`–`04`
/// and after byte 4 for `01`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRequest {
    /// `01` + 4 bytes: send a heartbeat carrying this challenge to the master.
    Heartbeat(Challenge),
    /// `02`: status string.
    Status,
    /// `03`: player list.
    Players,
    /// `04`: player count.
    Count,
    /// Any other first byte: stock servers send nothing.
    Unknown(u8),
}

impl ServerRequest {
    /// Dispatch on byte 0; empty input and an `01` shorter than five bytes are
    /// [`DecodeError::Truncated`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let first = Reader::new(bytes).u8("server request")?;
        Ok(match first {
            CHALLENGE => Self::Heartbeat(Challenge::decode(bytes)?),
            REQ_STATUS => Self::Status,
            REQ_PLAYERS => Self::Players,
            REQ_COUNT => Self::Count,
            other => Self::Unknown(other),
        })
    }

    /// Append the request bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Heartbeat(c) => c.encode(out),
            Self::Status => out.push(REQ_STATUS),
            Self::Players => out.push(REQ_PLAYERS),
            Self::Count => out.push(REQ_COUNT),
            Self::Unknown(n) => out.push(*n),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Status reply (request 02)
// ---------------------------------------------------------------------------------------------

/// The fields of a stock status reply, in wire order (spec §3.2). Strings are raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusFields {
    /// Active player buffers.
    pub players: u32,
    /// Session maximum.
    pub max_players: u32,
    /// World title.
    pub level: Vec<u8>,
    /// Game type (may be localized, may be empty).
    pub gametype: Vec<u8>,
    /// Engine version, `1.10`.
    pub version: Vec<u8>,
    /// `sam_strGameName`.
    pub gamename: Vec<u8>,
    /// Session name; always sent last.
    pub sessionname: Vec<u8>,
}

/// A status reply: `0`, `;key;value` pairs, and `;sessionname;` with the rest of the datagram.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StatusReply {
    pairs: Vec<Pair>,
    sessionname: Option<Vec<u8>>,
    trailing_nul: bool,
}

impl fmt::Debug for StatusReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusReply")
            .field("pairs", &self.pairs)
            .field("sessionname", &self.sessionname.as_deref().map(ByteStr))
            .field("trailing_nul", &self.trailing_nul)
            .finish()
    }
}

impl StatusReply {
    /// The stock reply, keys in the stock order, `sessionname` last, values sanitized
    /// (spec §8.4.2: `;` and bytes below 0x20 removed).
    #[must_use]
    pub fn stock(f: &StatusFields) -> Self {
        let num = |n: u32| {
            let mut v = Vec::new();
            put_decimal(&mut v, n.into());
            v
        };
        let pairs = vec![
            Pair::new(b"players", &num(f.players)),
            Pair::new(b"maxplayers", &num(f.max_players)),
            Pair::new(b"level", &sanitize_value(&f.level)),
            Pair::new(b"gametype", &sanitize_value(&f.gametype)),
            Pair::new(b"version", &sanitize_value(&f.version)),
            Pair::new(b"gamename", &sanitize_value(&f.gamename)),
        ];
        Self {
            pairs,
            sessionname: Some(sanitize_value(&f.sessionname)),
            trailing_nul: false,
        }
    }

    /// Arbitrary pairs before an optional session name; `None` when a key or value (other
    /// than the session name) contains `;` or NUL, is `sessionname`, or there are more than
    /// [`MAX_PAIRS`] pairs, since the reply would then read back differently.
    #[must_use]
    pub fn from_pairs(pairs: Vec<Pair>, sessionname: Option<Vec<u8>>) -> Option<Self> {
        let clean = |b: &[u8]| !b.contains(&SEP) && !b.contains(&0) && b != SESSIONNAME;
        let ok = pairs.len() <= MAX_PAIRS
            && pairs.iter().all(|p| clean(&p.key) && clean(&p.value))
            && !sessionname.as_deref().is_some_and(|s| s.ends_with(&[0]));
        ok.then_some(Self {
            pairs,
            sessionname,
            trailing_nul: false,
        })
    }

    /// Decode leniently (spec §7 item 11, §9.3.4): the session name is everything after the
    /// first `;sessionname;` up to the end of the datagram (`;` included); the part before is
    /// split on `;` into key, value, key, value…; a key without value gets an empty value; one
    /// trailing NUL is dropped and remembered.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("status reply"));
        }
        let mut r = Reader::new(bytes);
        if r.u8("status reply")? != HEARTBEAT {
            return Err(DecodeError::BadMagic("status reply"));
        }
        let mut body = r.rest();
        let trailing_nul = match body.split_last() {
            Some((&0, head)) => {
                body = head;
                true
            }
            _ => false,
        };
        let marker = find(body, SESSIONNAME_MARKER);
        let (head, mut sessionname) = match marker {
            Some(p) => (
                body.get(..p).unwrap_or_default(),
                Some(
                    body.get(p + SESSIONNAME_MARKER.len()..)
                        .unwrap_or_default()
                        .to_vec(),
                ),
            ),
            None => (body, None),
        };
        let mut pairs = Vec::new();
        if let Some(tokens) = head.strip_prefix(&[SEP]) {
            let mut it = tokens.split(|&b| b == SEP);
            while let Some(key) = it.next() {
                let value = it.next();
                if value.is_none() && key == SESSIONNAME && sessionname.is_none() {
                    // `…;sessionname` at the very end: an empty session name.
                    sessionname = Some(Vec::new());
                    break;
                }
                if pairs.len() == MAX_PAIRS {
                    return Err(DecodeError::TooLarge("status pairs"));
                }
                pairs.push(Pair::new(key, value.unwrap_or_default()));
            }
        } else if !head.is_empty() {
            return Err(DecodeError::Invalid("status separator"));
        }
        Ok(Self {
            pairs,
            sessionname,
            trailing_nul,
        })
    }

    /// Append the reply: `0`, `;key;value` per pair, `;sessionname;` + name, and the NUL if one
    /// was decoded.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(HEARTBEAT);
        for p in &self.pairs {
            out.push(SEP);
            out.extend_from_slice(&p.key);
            out.push(SEP);
            out.extend_from_slice(&p.value);
        }
        if let Some(s) = &self.sessionname {
            out.extend_from_slice(SESSIONNAME_MARKER);
            out.extend_from_slice(s);
        }
        if self.trailing_nul {
            out.push(0);
        }
    }

    /// The pairs before `sessionname`, in wire order.
    #[must_use]
    pub fn pairs(&self) -> &[Pair] {
        &self.pairs
    }

    /// The value of `key` (last one wins); `sessionname` is looked up with
    /// [`Self::sessionname`].
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        last_value(&self.pairs, key.as_bytes())
    }

    /// The session name bytes, `None` when the reply had no `sessionname` key.
    #[must_use]
    pub fn sessionname(&self) -> Option<&[u8]> {
        self.sessionname.as_deref()
    }

    /// `players` as the stock client reads it (`atoi`: missing or bad reads as 0).
    #[must_use]
    pub fn players(&self) -> u32 {
        self.get("players").map_or(0, atoi_u32)
    }

    /// `maxplayers` as the stock client reads it.
    #[must_use]
    pub fn max_players(&self) -> u32 {
        self.get("maxplayers").map_or(0, atoi_u32)
    }
}

/// C `atoi` clamped to `u32`: optional spaces, optional sign, leading digits; 0 otherwise.
fn atoi_u32(bytes: &[u8]) -> u32 {
    let trimmed = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .and_then(|p| bytes.get(p..))
        .unwrap_or_default();
    let (neg, digits) = match trimmed.split_first() {
        Some((&b'-', rest)) => (true, rest),
        Some((&b'+', rest)) => (false, rest),
        _ => (false, trimmed),
    };
    let mut n: u64 = 0;
    for &b in digits.iter().take_while(|b| b.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    if neg {
        0
    } else {
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// Players reply (request 03)
// ---------------------------------------------------------------------------------------------

/// One player record: `player_<slot>`, `frags_<slot>`, `ping_<slot>` (spec §3.3).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PlayerRecord {
    slot: u32,
    name: Vec<u8>,
    frags: i32,
    ping: i32,
}

impl fmt::Debug for PlayerRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlayerRecord")
            .field("slot", &self.slot)
            .field("name", &ByteStr(&self.name))
            .field("frags", &self.frags)
            .field("ping", &self.ping)
            .finish()
    }
}

impl PlayerRecord {
    /// A record with the name exactly as it goes on the wire; `None` when the name contains
    /// `03` (it would end the field early).
    #[must_use]
    pub fn new(slot: u32, wire_name: Vec<u8>, frags: i32, ping: i32) -> Option<Self> {
        (!wire_name.contains(&ETX)).then_some(Self {
            slot,
            name: wire_name,
            frags,
            ping,
        })
    }

    /// A record as a stock x86 server builds it from a player's raw name: wrapped as
    /// `^o` name `^r`, then replaced by `11` if a CR or LF comes before any other byte below 32
    /// as a signed `char` (all bytes ≥ 0x80 count), or by `12` for such a byte (spec §3.3,
    /// §8.4.1).
    #[must_use]
    pub fn stock(slot: u32, name: &[u8], frags: i32, ping: i32) -> Self {
        Self {
            slot,
            name: stock_wire_name(name),
            frags,
            ping,
        }
    }

    /// The slot index (`<i>`; 0–15 on stock servers, with gaps).
    #[must_use]
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The name bytes as sent (wrapped, or a one-byte mark).
    #[must_use]
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Frags or score; may be negative.
    #[must_use]
    pub fn frags(&self) -> i32 {
        self.frags
    }

    /// The client-reported ping in ms (0–1023 on stock servers).
    #[must_use]
    pub fn ping(&self) -> i32 {
        self.ping
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let field = |out: &mut Vec<u8>, prefix: &[u8], value: &[u8]| {
            out.extend_from_slice(prefix);
            put_decimal(out, self.slot.into());
            out.push(STX);
            out.extend_from_slice(value);
            out.push(ETX);
        };
        let mut num = Vec::new();
        field(out, PLAYER_KEY, &self.name);
        put_decimal(&mut num, self.frags.into());
        field(out, FRAGS_KEY, &num);
        num.clear();
        put_decimal(&mut num, self.ping.into());
        field(out, PING_KEY, &num);
    }

    fn encoded_len(&self) -> usize {
        let mut v = Vec::new();
        self.encode(&mut v);
        v.len()
    }
}

/// The name a stock x86 server puts on the wire for a player's raw name (spec §3.3).
#[must_use]
pub fn stock_wire_name(name: &[u8]) -> Vec<u8> {
    let mut wrapped = Vec::with_capacity(name.len() + 4);
    wrapped.extend_from_slice(b"^o");
    wrapped.extend_from_slice(name);
    wrapped.extend_from_slice(b"^r");
    for &b in &wrapped {
        if b == b'\r' || b == b'\n' {
            return vec![NAME_MARK_LINE_BREAK_BYTE];
        }
        // x86 `char` is signed: bytes >= 0x80 are negative, hence "below 32".
        if i8::from_ne_bytes([b]) < 32 {
            return vec![NAME_MARK_CONTROL_BYTE];
        }
    }
    wrapped
}

/// The records of one players datagram.
#[derive(Clone, PartialEq, Eq)]
pub enum PlayerRecords {
    /// Stock `key 02 value 03` records.
    Stock(Vec<PlayerRecord>),
    /// GameSpy-style `\player_0\name\frags_0\…` text inside the frame (Classics Patch on
    /// retail builds, spec §7 item 12), kept raw up to the trailer.
    GameSpy(Vec<u8>),
}

impl fmt::Debug for PlayerRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stock(r) => f.debug_tuple("Stock").field(r).finish(),
            Self::GameSpy(raw) => f.debug_tuple("GameSpy").field(&ByteStr(raw)).finish(),
        }
    }
}

/// One datagram of a players reply: optional header, records, optional trailer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayersDatagram {
    /// The header's player count, when this is the first datagram. It may exceed the records
    /// (spec §7 item 1): never use it for completeness.
    pub count: Option<u32>,
    /// The records in this datagram.
    pub records: PlayerRecords,
    /// True when the datagram ends with the `04` trailer (the last datagram).
    pub trailer: bool,
}

impl PlayersDatagram {
    /// Decode one datagram on its own (records never straddle datagrams). Tolerates a missing
    /// header (continuation datagrams), a missing trailer, zero records, gaps in slots and a
    /// trailer-only datagram. Empty input is [`DecodeError::Truncated`]; more than
    /// [`MAX_PLAYER_RECORDS`] records is [`DecodeError::TooLarge`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_DATAGRAM + 1 {
            return Err(DecodeError::TooLarge("players reply"));
        }
        if bytes.is_empty() {
            return Err(DecodeError::Truncated("players reply"));
        }
        let (body, trailer) = match bytes.split_last() {
            Some((&EOT, head)) => (head, true),
            _ => (bytes, false),
        };
        let mut r = Reader::new(body);
        let count = if r.peek() == Some(SOH) {
            r.skip(1, "players header")?;
            if r.until(STX, "players header")? != PLAYERS_KEY {
                return Err(DecodeError::Invalid("players header key"));
            }
            let n = r.until(ETX, "players header count")?;
            let n = parse_decimal(n, "players header count")?;
            Some(u32::try_from(n).map_err(|_| DecodeError::BadNumber("players header count"))?)
        } else {
            None
        };
        if r.peek() == Some(b'\\') {
            return Ok(Self {
                count,
                records: PlayerRecords::GameSpy(r.rest().to_vec()),
                trailer,
            });
        }
        let mut records = Vec::with_capacity(MAX_PLAYERS_PREALLOC.min(r.remaining() / 24));
        while !r.is_empty() {
            if records.len() == MAX_PLAYER_RECORDS {
                return Err(DecodeError::TooLarge("player records"));
            }
            let slot = read_key(&mut r, PLAYER_KEY, None)?;
            let name = r.until(ETX, "player name")?;
            read_key(&mut r, FRAGS_KEY, Some(slot))?;
            let frags = read_i32(&mut r, "player frags")?;
            read_key(&mut r, PING_KEY, Some(slot))?;
            let ping = read_i32(&mut r, "player ping")?;
            records.push(PlayerRecord {
                slot,
                name: name.to_vec(),
                frags,
                ping,
            });
        }
        Ok(Self {
            count,
            records: PlayerRecords::Stock(records),
            trailer,
        })
    }

    /// Append the datagram.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(n) = self.count {
            encode_header(n, out);
        }
        match &self.records {
            PlayerRecords::Stock(recs) => recs.iter().for_each(|r| r.encode(out)),
            PlayerRecords::GameSpy(raw) => out.extend_from_slice(raw),
        }
        if self.trailer {
            out.push(EOT);
        }
    }
}

/// `<prefix><decimal slot> 02`, checking the slot against `expect`.
fn read_key(r: &mut Reader<'_>, prefix: &[u8], expect: Option<u32>) -> Result<u32, DecodeError> {
    let key = r.until(STX, "player key")?;
    let digits = key
        .strip_prefix(prefix)
        .ok_or(DecodeError::Invalid("player key"))?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(DecodeError::BadNumber("player slot"));
    }
    let slot = parse_decimal(digits, "player slot")
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(DecodeError::BadNumber("player slot"))?;
    match expect {
        Some(e) if e != slot => Err(DecodeError::Invalid("player record slot mismatch")),
        _ => Ok(slot),
    }
}

fn read_i32(r: &mut Reader<'_>, ctx: &'static str) -> Result<i32, DecodeError> {
    let v = r.until(ETX, ctx)?;
    parse_decimal(v, ctx).and_then(|n| i32::try_from(n).map_err(|_| DecodeError::BadNumber(ctx)))
}

fn encode_header(count: u32, out: &mut Vec<u8>) {
    out.push(SOH);
    out.extend_from_slice(PLAYERS_KEY);
    out.push(STX);
    put_decimal(out, count.into());
    out.push(ETX);
}

/// A whole players reply as a server builds it: the header count and the records to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayersReply {
    /// The header count: the number of active players (may exceed the records, spec §3.3).
    pub count: u32,
    /// The records, in slot order.
    pub records: Vec<PlayerRecord>,
}

impl PlayersReply {
    /// Encode the way the stock server splits (spec §3.3): the header goes in the first
    /// datagram; before each record, if the datagram would exceed 2048 bytes it is sent and a
    /// new one without header starts; `04` is appended to the last one (which may reach 2049
    /// bytes). Returns one buffer per datagram.
    #[must_use]
    pub fn encode_datagrams(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut cur = Vec::with_capacity(PLAYERS_SPLIT_LIMIT + 1);
        encode_header(self.count, &mut cur);
        for rec in &self.records {
            // Unlike stock, never flush an empty datagram (only a record over 2 KiB could cause one).
            if !cur.is_empty() && cur.len() + rec.encoded_len() > PLAYERS_SPLIT_LIMIT {
                out.push(std::mem::take(&mut cur));
            }
            rec.encode(&mut cur);
        }
        cur.push(EOT);
        out.push(cur);
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Count reply (request 04)
// ---------------------------------------------------------------------------------------------

/// The reply to request `04`: `04` and the decimal player count (spec §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountReply(pub u32);

impl CountReply {
    /// Decode `04` + decimal. The caller must know it sent `04`: a players trailer-only
    /// datagram is the same first byte (spec §7 item 15). One trailing NUL is tolerated.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        if r.u8("count reply")? != EOT {
            return Err(DecodeError::BadMagic("count reply"));
        }
        let digits = r.rest();
        let digits = digits.strip_suffix(&[0]).unwrap_or(digits);
        let n = parse_decimal(digits, "count reply")?;
        u32::try_from(n)
            .map(Self)
            .map_err(|_| DecodeError::BadNumber("count reply"))
    }

    /// Append `04` and the decimal count.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(EOT);
        put_decimal(out, self.0.into());
    }
}

// ---------------------------------------------------------------------------------------------
// Protocol bytes (spec §2.1, §3.1, §3.3)
// ---------------------------------------------------------------------------------------------

/// `e`: list request, client to master.
pub const LIST_REQUEST: u8 = 0x65;
/// `s`: list reply, master to client; first byte of every list datagram.
pub const LIST_REPLY: u8 = 0x73;
/// `q`: join, server to master.
pub const JOIN: u8 = 0x71;
/// `01`: join challenge (master to server) and heartbeat request (to the query port).
pub const CHALLENGE: u8 = 0x01;
/// `0`: heartbeat (server to master) and first byte of a status reply.
pub const HEARTBEAT: u8 = 0x30;
/// `u`: a player was accepted, server to master.
pub const STATE_CHANGED: u8 = 0x75;
/// `02`: status request.
pub const REQ_STATUS: u8 = 0x02;
/// `03`: players request.
pub const REQ_PLAYERS: u8 = 0x03;
/// `04`: player count request.
pub const REQ_COUNT: u8 = 0x04;
/// Bytes per list record: four address bytes and a little-endian port.
pub const LIST_RECORD_LEN: usize = 6;

/// Players frame: header start.
const SOH: u8 = 0x01;
/// Players frame: key/value separator.
const STX: u8 = 0x02;
/// Players frame: end of value.
const ETX: u8 = 0x03;
/// Players frame: trailer, and the first byte of the count reply.
const EOT: u8 = 0x04;
/// Pair separator of status and heartbeat.
const SEP: u8 = b';';
const PLAYERS_KEY: &[u8] = b"players";
const PLAYER_KEY: &[u8] = b"player_";
const FRAGS_KEY: &[u8] = b"frags_";
const PING_KEY: &[u8] = b"ping_";
const SESSIONNAME: &[u8] = b"sessionname";
const SESSIONNAME_MARKER: &[u8] = b";sessionname;";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc<F: Fn(&mut Vec<u8>)>(f: F) -> Vec<u8> {
        // Pre-filled so a skipped or doubled write shows.
        let mut out = vec![0xa5];
        f(&mut out);
        out.remove(0);
        out
    }

    fn addr(a: [u8; 4], port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(a), port)
    }

    #[test]
    fn decode_list_request() {
        assert_eq!(MasterPacket::decode(&[0x65]), Ok(MasterPacket::ListRequest));
        assert_eq!(MasterPacket::decode(b"eXYZ"), Ok(MasterPacket::ListRequest));
    }

    #[test]
    fn encode_list_request() {
        assert_eq!(enc(|o| MasterPacket::ListRequest.encode(o)), [0x65]);
    }

    #[test]
    fn decode_master_packet_rejects_empty() {
        assert_eq!(
            MasterPacket::decode(&[]),
            Err(DecodeError::Truncated("master packet"))
        );
        assert_eq!(MasterPacket::decode(b"z"), Ok(MasterPacket::Unknown(b'z')));
    }

    #[test]
    fn decode_list_reply() {
        let b = [
            0x73, 1, 2, 3, 4, 0x00, 0x64, 192, 168, 0, 10, 0x0a, 0x64, 9, 9,
        ];
        let l = ListReply::decode(&b).unwrap();
        assert_eq!(
            l.servers(),
            [addr([1, 2, 3, 4], 25600), addr([192, 168, 0, 10], 25610)]
        );
        assert_eq!(l.partial_record(), [9, 9]);
    }

    #[test]
    fn encode_list_reply() {
        let l = ListReply::new(vec![addr([127, 0, 0, 1], 25600)]).unwrap();
        assert_eq!(enc(|o| l.encode(o)), [0x73, 127, 0, 0, 1, 0x00, 0x64]);
        assert_eq!(enc(|o| ListReply::default().encode(o)), [0x73]);
        assert!(ListReply::new(vec![addr([1, 1, 1, 1], 1); 171]).is_none());
    }

    #[test]
    fn decode_list_reply_rejects_bad_magic_and_oversize() {
        assert_eq!(
            ListReply::decode(&[0x74]),
            Err(DecodeError::BadMagic("list reply"))
        );
        assert_eq!(
            ListReply::decode(&[0x73; MAX_DATAGRAM + 1]),
            Err(DecodeError::TooLarge("list reply"))
        );
    }

    #[test]
    fn encode_list_splits_at_170() {
        let servers: Vec<_> = (0..341u16).map(|i| addr([10, 0, 0, 1], i)).collect();
        let dgs = encode_list(&servers);
        let lens: Vec<_> = dgs.iter().map(Vec::len).collect();
        assert_eq!(lens, [1021, 1021, 7]);
        assert!(dgs.iter().all(|d| d.first() == Some(&0x73)));
        assert_eq!(encode_list(&[]), vec![vec![0x73]]);
        assert_eq!(encode_list(&servers[..170]).len(), 1);
    }

    #[test]
    fn decode_challenge() {
        assert_eq!(
            MasterPacket::decode(&[1, 0x78, 0x56, 0x34, 0x12]),
            Ok(MasterPacket::Challenge(Challenge(0x1234_5678)))
        );
        assert_eq!(
            Challenge::decode(&[1, 0xff, 0xff, 0xff, 0xff, 7]),
            Ok(Challenge(-1))
        );
    }

    #[test]
    fn encode_challenge() {
        assert_eq!(
            enc(|o| Challenge(1_866_850_012).encode(o)),
            [1, 0xdc, 0xde, 0x45, 0x6f]
        );
    }

    #[test]
    fn decode_challenge_rejects_short() {
        assert_eq!(
            Challenge::decode(&[1, 2, 3]),
            Err(DecodeError::Truncated("challenge value"))
        );
        assert_eq!(
            Challenge::decode(&[2, 2, 3, 4, 5]),
            Err(DecodeError::BadMagic("challenge"))
        );
    }

    #[test]
    fn challenge_matches_either_byte_order() {
        let c = Challenge(0x1234_5678);
        assert!(c.matches_echo(0x1234_5678));
        assert!(c.matches_echo(0x7856_3412));
        assert!(!c.matches_echo(0));
    }

    const HB: &[u8] = b"0;challenge;305419896;players;1;maxplayers;8;level;Yodeller;gametype;Cooperative;version;1.10;product;serioussamse";

    fn hb_fields() -> HeartbeatFields {
        HeartbeatFields {
            challenge: 305_419_896,
            players: 1,
            max_players: 8,
            level: b"Yodeller".to_vec(),
            gametype: b"Cooperative".to_vec(),
            version: b"1.10".to_vec(),
            product: b"serioussamse".to_vec(),
        }
    }

    #[test]
    fn decode_heartbeat() {
        let h = Heartbeat::decode(HB).unwrap();
        assert_eq!(h.pairs().count(), 7);
        assert_eq!(h.challenge(), Some(305_419_896));
        assert_eq!(h.get("level"), Some(&b"Yodeller"[..]));
        assert_eq!(h, Heartbeat::stock(&hb_fields()));
    }

    #[test]
    fn encode_heartbeat() {
        assert_eq!(enc(|o| Heartbeat::stock(&hb_fields()).encode(o)), HB);
        let mut f = hb_fields();
        f.level = b"a;b\ncd".to_vec();
        let out = enc(|o| Heartbeat::stock(&f).encode(o));
        assert!(out.windows(12).any(|w| w == b";level;abcd;"));
    }

    #[test]
    fn decode_heartbeat_reference_master_rule() {
        // Junk between matches is skipped; a key must be word characters; the value runs to
        // the next `;`.
        // Like Python's `re.findall(";(\\w+);([^;]*)")`: `;a-b` fails, then `;1;` matches with
        // an empty value and `;z;v` follows.
        let h = Heartbeat::decode(b"0xx;challenge;-1;;a-b;1;;z;v").unwrap();
        let keys: Vec<_> = h.pairs().map(|(k, _)| k).collect();
        assert_eq!(keys, [&b"challenge"[..], b"1", b"z"]);
        assert_eq!(h.challenge(), Some(-1));
        assert_eq!(h.get("1"), Some(&b""[..]));
        assert_eq!(h.get("z"), Some(&b"v"[..]));
    }

    #[test]
    fn decode_heartbeat_rejects_bad_magic() {
        assert_eq!(
            Heartbeat::decode(b"1;a;b"),
            Err(DecodeError::BadMagic("heartbeat"))
        );
        assert_eq!(
            Heartbeat::decode(b""),
            Err(DecodeError::Truncated("heartbeat"))
        );
    }

    #[test]
    fn decode_join_and_state_changed() {
        assert_eq!(MasterPacket::decode(&[0x71]), Ok(MasterPacket::Join));
        assert_eq!(
            MasterPacket::decode(&[0x75]),
            Ok(MasterPacket::StateChanged)
        );
    }

    #[test]
    fn encode_join_and_state_changed() {
        assert_eq!(enc(|o| MasterPacket::Join.encode(o)), [0x71]);
        assert_eq!(enc(|o| MasterPacket::StateChanged.encode(o)), [0x75]);
    }

    #[test]
    fn decode_server_request() {
        assert_eq!(ServerRequest::decode(&[2]), Ok(ServerRequest::Status));
        assert_eq!(ServerRequest::decode(&[3, 9]), Ok(ServerRequest::Players));
        assert_eq!(ServerRequest::decode(&[4]), Ok(ServerRequest::Count));
        assert_eq!(ServerRequest::decode(&[9]), Ok(ServerRequest::Unknown(9)));
        assert_eq!(
            ServerRequest::decode(&[1, 1, 0, 0, 0]),
            Ok(ServerRequest::Heartbeat(Challenge(1)))
        );
    }

    #[test]
    fn encode_server_request() {
        assert_eq!(enc(|o| ServerRequest::Status.encode(o)), [2]);
        assert_eq!(enc(|o| ServerRequest::Players.encode(o)), [3]);
        assert_eq!(enc(|o| ServerRequest::Count.encode(o)), [4]);
        assert_eq!(
            enc(|o| ServerRequest::Heartbeat(Challenge(-1)).encode(o)),
            [1, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn decode_server_request_rejects_empty_and_short_challenge() {
        assert_eq!(
            ServerRequest::decode(&[]),
            Err(DecodeError::Truncated("server request"))
        );
        assert_eq!(
            ServerRequest::decode(&[1, 0]),
            Err(DecodeError::Truncated("challenge value"))
        );
    }

    const STATUS: &[u8] = b"0;players;8;maxplayers;16;level;Yodeller;gametype;Fragmatch;version;1.10;gamename;serioussamse;sessionname;Awesome Server";

    fn status_fields() -> StatusFields {
        StatusFields {
            players: 8,
            max_players: 16,
            level: b"Yodeller".to_vec(),
            gametype: b"Fragmatch".to_vec(),
            version: b"1.10".to_vec(),
            gamename: b"serioussamse".to_vec(),
            sessionname: b"Awesome Server".to_vec(),
        }
    }

    #[test]
    fn decode_status() {
        let s = StatusReply::decode(STATUS).unwrap();
        assert_eq!(s.players(), 8);
        assert_eq!(s.max_players(), 16);
        assert_eq!(s.get("gamename"), Some(&b"serioussamse"[..]));
        assert_eq!(s.sessionname(), Some(&b"Awesome Server"[..]));
        assert_eq!(s, StatusReply::stock(&status_fields()));
    }

    #[test]
    fn encode_status() {
        assert_eq!(
            enc(|o| StatusReply::stock(&status_fields()).encode(o)),
            STATUS
        );
    }

    #[test]
    fn encode_status_sanitizes() {
        let mut f = status_fields();
        f.sessionname = b"a;b\tc".to_vec();
        f.level = b"x;y".to_vec();
        let out = enc(|o| StatusReply::stock(&f).encode(o));
        assert!(out.ends_with(
            b";level;xy;gametype;Fragmatch;version;1.10;gamename;serioussamse;sessionname;abc"
        ));
    }

    #[test]
    fn decode_status_session_name_keeps_semicolons_and_nul() {
        let s = StatusReply::decode(b"0;players;1;sessionname;a;b\0").unwrap();
        assert_eq!(s.sessionname(), Some(&b"a;b"[..]));
        assert_eq!(enc(|o| s.encode(o)), b"0;players;1;sessionname;a;b\0");
    }

    #[test]
    fn decode_status_rejects_missing_separator() {
        assert_eq!(
            StatusReply::decode(b"0players;1"),
            Err(DecodeError::Invalid("status separator"))
        );
        assert_eq!(
            StatusReply::decode(b";players;1"),
            Err(DecodeError::BadMagic("status reply"))
        );
    }

    const ONE_PLAYER: &[u8] =
        b"\x01players\x021\x03player_0\x02^oSam^r\x03frags_0\x023\x03ping_0\x0242\x03\x04";

    #[test]
    fn decode_players() {
        let d = PlayersDatagram::decode(ONE_PLAYER).unwrap();
        assert_eq!(d.count, Some(1));
        assert!(d.trailer);
        let PlayerRecords::Stock(recs) = &d.records else {
            panic!("stock records expected")
        };
        assert_eq!(recs, &[PlayerRecord::stock(0, b"Sam", 3, 42)]);
        assert_eq!(recs[0].name(), b"^oSam^r");
    }

    #[test]
    fn encode_players() {
        let reply = PlayersReply {
            count: 1,
            records: vec![PlayerRecord::stock(0, b"Sam", 3, 42)],
        };
        assert_eq!(reply.encode_datagrams(), vec![ONE_PLAYER.to_vec()]);
        let d = PlayersDatagram::decode(ONE_PLAYER).unwrap();
        assert_eq!(enc(|o| d.encode(o)), ONE_PLAYER);
    }

    #[test]
    fn decode_players_rejects_slot_mismatch_and_bad_key() {
        assert_eq!(
            PlayersDatagram::decode(b"player_0\x02a\x03frags_1\x020\x03ping_0\x020\x03"),
            Err(DecodeError::Invalid("player record slot mismatch"))
        );
        assert_eq!(
            PlayersDatagram::decode(b"plyr_0\x02a\x03"),
            Err(DecodeError::Invalid("player key"))
        );
        assert_eq!(
            PlayersDatagram::decode(b"player_0\x02a"),
            Err(DecodeError::Unterminated("player name"))
        );
        assert_eq!(
            PlayersDatagram::decode(&[]),
            Err(DecodeError::Truncated("players reply"))
        );
    }

    #[test]
    fn stock_wire_name_marks() {
        assert_eq!(stock_wire_name(b"Sam"), b"^oSam^r");
        assert_eq!(stock_wire_name(b"a\nb"), [0x11]);
        assert_eq!(stock_wire_name(b"a\rb\x01"), [0x11]);
        assert_eq!(stock_wire_name(b"a\x01b\n"), [0x12]);
        assert_eq!(stock_wire_name(b"J\xe9r\xf4me\n"), [0x12]);
        assert_eq!(stock_wire_name(b""), b"^o^r");
    }

    #[test]
    fn decode_count() {
        assert_eq!(CountReply::decode(&[4, 0x38]), Ok(CountReply(8)));
        assert_eq!(CountReply::decode(&[4, 0x31, 0x32]), Ok(CountReply(12)));
    }

    #[test]
    fn encode_count() {
        assert_eq!(enc(|o| CountReply(12).encode(o)), [4, 0x31, 0x32]);
    }

    #[test]
    fn decode_count_rejects_empty_digits() {
        assert_eq!(
            CountReply::decode(&[4]),
            Err(DecodeError::BadNumber("count reply"))
        );
        assert_eq!(
            CountReply::decode(&[5, 0x31]),
            Err(DecodeError::BadMagic("count reply"))
        );
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..max)
    }

    #[test]
    fn heartbeat_edges() {
        let h = Heartbeat::decode(b"0").unwrap();
        assert_eq!(h.pairs().count(), 0);
        assert_eq!(h.get("challenge"), None);
        assert_eq!(enc(|o| h.encode(o)), b"0");
        // Empty values, first and last; a repeated key: the last wins.
        let h = Heartbeat::decode(b"0;a;;b;2;a;3;c;").unwrap();
        let pairs: Vec<_> = h.pairs().collect();
        assert_eq!(
            pairs,
            [
                (&b"a"[..], &b""[..]),
                (b"b", b"2"),
                (b"a", b"3"),
                (b"c", b"")
            ]
        );
        assert_eq!(h.get("a"), Some(&b"3"[..]));
        assert_eq!(h.count("b"), 2);
        assert_eq!(h.count("c"), 0, "empty is 0");
        assert_eq!(h.count("zz"), 0, "missing is 0");
        let p = |k: &[u8], v: &[u8]| Pair::new(k, v);
        let built = Heartbeat::from_pairs(vec![
            p(b"a", b""),
            p(b"b", b"2"),
            p(b"a", b"3"),
            p(b"c", b""),
        ]);
        assert_eq!(built.as_ref(), Some(&h));
        assert_eq!(
            format!("{h:?}"),
            r#"Heartbeat { pairs: [b"a" = b"", b"b" = b"2", b"a" = b"3", b"c" = b""] }"#
        );
    }

    /// The pairs the reference master's rule finds in a heartbeat body, as a plain list.
    fn reference_pairs(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < body.len() {
            match match_pair(body, i) {
                Some((k, v, next)) => {
                    out.push((k.to_vec(), v.to_vec()));
                    i = next;
                }
                None => i += 1,
            }
        }
        out
    }

    proptest! {
        /// A decoded heartbeat holds exactly the pairs the rule finds, in order; more than
        /// `MAX_PAIRS` is refused.
        #[test]
        fn heartbeat_keeps_the_rules_pairs(body in proptest::collection::vec(
            prop_oneof![Just(b';'), Just(b'a'), Just(b'_'), Just(b'-'), Just(b'7'), any::<u8>()],
            0..300,
        )) {
            let want = reference_pairs(&body);
            let mut bytes = vec![HEARTBEAT];
            bytes.extend_from_slice(&body);
            match Heartbeat::decode(&bytes) {
                Ok(h) => {
                    let got: Vec<_> = h.pairs().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
                    prop_assert_eq!(got, want);
                }
                Err(e) => {
                    prop_assert_eq!(e, DecodeError::TooLarge("heartbeat pairs"));
                    prop_assert!(want.len() > MAX_PAIRS);
                }
            }
        }
        #[test]
        fn decode_arbitrary_never_panics(b in bytes(300)) {
            let _ = MasterPacket::decode(&b);
            let _ = ServerRequest::decode(&b);
            let _ = StatusReply::decode(&b);
            let _ = PlayersDatagram::decode(&b);
            let _ = CountReply::decode(&b);
        }

        #[test]
        fn decoded_values_round_trip(b in bytes(200)) {
            let mut out = Vec::new();
            if let Ok(m) = MasterPacket::decode(&b) {
                m.encode(&mut out);
                prop_assert_eq!(MasterPacket::decode(&out), Ok(m));
            }
            out.clear();
            if let Ok(s) = StatusReply::decode(&b) {
                s.encode(&mut out);
                prop_assert_eq!(StatusReply::decode(&out), Ok(s));
            }
            out.clear();
            if let Ok(p) = PlayersDatagram::decode(&b) {
                p.encode(&mut out);
                prop_assert_eq!(PlayersDatagram::decode(&out), Ok(p));
            }
        }

        #[test]
        fn list_round_trip(ips in proptest::collection::vec((any::<[u8; 4]>(), any::<u16>()), 0..400)) {
            let servers: Vec<_> = ips.iter().map(|&(a, p)| addr(a, p)).collect();
            let mut back = Vec::new();
            for dg in encode_list(&servers) {
                prop_assert!(dg.len() <= 1021);
                let l = ListReply::decode(&dg).unwrap();
                prop_assert!(l.partial_record().is_empty());
                back.extend_from_slice(l.servers());
            }
            prop_assert_eq!(back, servers);
        }

        #[test]
        fn status_round_trip(f in (any::<u32>(), any::<u32>(), bytes(40), bytes(40), bytes(8), bytes(20), bytes(60))) {
            let fields = StatusFields {
                players: f.0, max_players: f.1, level: f.2, gametype: f.3,
                version: f.4, gamename: f.5, sessionname: f.6,
            };
            let s = StatusReply::stock(&fields);
            let mut out = Vec::new();
            s.encode(&mut out);
            let back = StatusReply::decode(&out).unwrap();
            prop_assert_eq!(back.players(), fields.players);
            prop_assert_eq!(back.max_players(), fields.max_players);
            prop_assert_eq!(back, s);
        }

        #[test]
        fn heartbeat_round_trip(c in any::<i32>(), lvl in bytes(40), prod in bytes(20)) {
            let h = Heartbeat::stock(&HeartbeatFields { challenge: c, level: lvl, product: prod, ..hb_fields() });
            let mut out = Vec::new();
            h.encode(&mut out);
            let back = Heartbeat::decode(&out).unwrap();
            prop_assert_eq!(back.challenge(), Some(c));
            prop_assert_eq!(back, h);
        }

        #[test]
        fn players_round_trip(recs in proptest::collection::vec((0u32..16, bytes(250), any::<i32>(), 0i32..1024), 0..16)) {
            let records: Vec<_> = recs.iter().map(|(s, n, f, p)| PlayerRecord::stock(*s, n, *f, *p)).collect();
            let reply = PlayersReply { count: 16, records: records.clone() };
            let dgs = reply.encode_datagrams();
            let mut back = Vec::new();
            let n = dgs.len();
            for (i, dg) in dgs.iter().enumerate() {
                prop_assert!(dg.len() <= PLAYERS_SPLIT_LIMIT + 1);
                let d = PlayersDatagram::decode(dg).unwrap();
                prop_assert_eq!(d.count.is_some(), i == 0);
                prop_assert_eq!(d.trailer, i + 1 == n);
                let PlayerRecords::Stock(r) = d.records else { panic!("stock") };
                back.extend(r);
            }
            prop_assert_eq!(back, records);
        }
    }
}
