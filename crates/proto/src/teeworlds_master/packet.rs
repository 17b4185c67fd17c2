//! Every UDP datagram of the Teeworlds masters, both directions, and DDNet's UDP `chal`.
//!
//! [`Packet`] is a whole datagram (framing plus message); [`Message`] is the payload after the
//! connless header. Decoders insist on the exact length of each message, as the reference
//! masters do (spec §2.2, quirk 2); encoders write what stock peers write.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::{
    MAX_CHALLENGE_FIELD, MAX_LEGACY_LIST_ENTRIES_ACCEPTED, MAX_LIS2_ENTRIES_ACCEPTED,
    MAX_LIST_DATAGRAMS, MAX_LIST_ENTRIES, MIN_TOKEN_REQUEST_LEN,
};
use crate::teeworlds::header::{
    CONNLESS_FLAG, CONTROL_PREFIX, Header, LEGACY_HEADER, LEGACY_HEADER_LEN, NO_TOKEN,
    SIXUP_HEADER_LEN, TOKEN_MESSAGE_LEN, TOKEN_REQUEST_LEN, TokenMessage,
};
use crate::wire::{DecodeError, Reader};

/// A 0.7 connless token: four opaque bytes, compared as bytes (`ff ff ff ff` = none).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Token(pub [u8; 4]);

impl Token {
    /// "No token yet" (`ff ff ff ff`).
    pub const NONE: Self = Self(NO_TOKEN);

    /// Parse the 8 hex digits DDNet writes in `Connless-Token` (`ff0e2331` is `ff 0e 23 31`).
    pub fn from_hex(s: &str) -> Result<Self, DecodeError> {
        const CTX: &str = "connless token";
        let b = s.as_bytes();
        if b.len() != 8 || !b.iter().all(u8::is_ascii_hexdigit) {
            return Err(DecodeError::Invalid(CTX));
        }
        let mut out = [0u8; 4];
        for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
            let text = std::str::from_utf8(pair).map_err(|_| DecodeError::Invalid(CTX))?;
            *o = u8::from_str_radix(text, 16).map_err(|_| DecodeError::Invalid(CTX))?;
        }
        Ok(Self(out))
    }

    /// The 8 lower-case hex digits of the token.
    #[must_use]
    pub fn to_hex(self) -> String {
        crate::wire::to_hex(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.to_hex())
    }
}

/// The connless header in front of a master message: a view of
/// [`crate::teeworlds::header::Header`] that keeps the 6-byte 0.6 header raw (an `"xe"` header
/// means nothing to a master) and types the 0.7 tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// The 6-byte 0.6 header, kept as sent. Real peers write `ff`×6, qstat `20 00 00 00 00 00`;
    /// only byte 0 means anything (its `0x20` connless bit set, low bits not `01`).
    V06([u8; 6]),
    /// The 9-byte 0.7 header `21 <token> <response_token>`.
    V07 {
        /// The token the *receiver* issued to the sender ([`Token::NONE`] when it has none).
        token: Token,
        /// The sender's own token; whoever answers puts it in `token`.
        response_token: Token,
    },
}

impl Framing {
    /// The header real 0.6 peers write.
    pub const STANDARD_06: Self = Self::V06(LEGACY_HEADER);

    /// The header length in bytes.
    #[must_use]
    pub const fn len(&self) -> usize {
        match self {
            Self::V06(_) => LEGACY_HEADER_LEN,
            Self::V07 { .. } => SIXUP_HEADER_LEN,
        }
    }

    /// Always false: a header is never empty (present to pair with [`Self::len`]).
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// The header that answers a message that came with `self`: 0.6 answers use the standard
    /// header whatever the request had; 0.7 answers swap the tokens, using `own` as the new
    /// response token.
    #[must_use]
    pub const fn reply(&self, own: Token) -> Self {
        match *self {
            Self::V06(_) => Self::STANDARD_06,
            Self::V07 { response_token, .. } => Self::V07 {
                token: response_token,
                response_token: own,
            },
        }
    }

    fn header(&self) -> Header {
        match *self {
            Self::V06(raw) => Header::Legacy(raw),
            Self::V07 {
                token,
                response_token,
            } => Header::Sixup {
                token: token.0,
                response_token: response_token.0,
            },
        }
    }

    fn from_header(header: Header) -> Self {
        match header {
            Header::Legacy(raw) => Self::V06(raw),
            Header::Extended { .. } => {
                let mut raw = Vec::with_capacity(LEGACY_HEADER_LEN);
                header.encode(&mut raw);
                let mut bytes = [0u8; LEGACY_HEADER_LEN];
                for (b, r) in bytes.iter_mut().zip(raw) {
                    *b = r;
                }
                Self::V06(bytes)
            }
            Header::Sixup {
                token,
                response_token,
            } => Self::V07 {
                token: Token(token),
                response_token: Token(response_token),
            },
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        self.header().encode(out);
    }
}

/// One whole master datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// A connless message in a 0.6 or 0.7 header.
    Connless {
        /// The header it came in (or goes out in).
        framing: Framing,
        /// The payload.
        message: Message,
    },
    /// The 0.7 control message TOKEN (`04 00 00 <to> 05 <token>`), request and reply alike:
    /// the direction tells them apart, not the bytes.
    Token {
        /// The header token: the token the receiver issued ([`Token::NONE`] in a request,
        /// the requester's token in a reply).
        to: Token,
        /// The sender's own token.
        token: Token,
        /// Padded to 520 bytes: true for requests (peers ignore shorter ones), false for the
        /// 12-byte reply teeworlds sends. Decoding sets it for any datagram of at least
        /// [`MIN_TOKEN_REQUEST_LEN`] bytes.
        padded: bool,
    },
}

impl Packet {
    /// A 0.7 token request as game servers and clients send it (520 bytes).
    #[must_use]
    pub const fn token_request(own: Token) -> Self {
        Self::Token {
            to: Token::NONE,
            token: own,
            padded: true,
        }
    }

    /// The 12-byte token reply to a request that carried `requester`.
    #[must_use]
    pub const fn token_reply(requester: Token, own: Token) -> Self {
        Self::Token {
            to: requester,
            token: own,
            padded: false,
        }
    }

    /// Decode one datagram. Byte 0 selects the framing (`docs/protocols/teeworlds.md` §2.4);
    /// the framings are [`crate::teeworlds::header`]'s.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        let first = *datagram.first().ok_or(DecodeError::Truncated("header"))?;
        if first & CONNLESS_FLAG == 0 {
            if !datagram.starts_with(&CONTROL_PREFIX) {
                return Err(DecodeError::BadMagic("connless header"));
            }
            let m = TokenMessage::decode(datagram)?;
            let padded = match datagram.len() {
                TOKEN_MESSAGE_LEN => false,
                n if n >= MIN_TOKEN_REQUEST_LEN => true,
                _ => return Err(DecodeError::Invalid("token message length")),
            };
            return Ok(Self::Token {
                to: Token(m.token),
                token: Token(m.own_token),
                padded,
            });
        }
        let (header, payload) = Header::split(datagram)?;
        let message = Message::decode(payload)?;
        Ok(Self::Connless {
            framing: Framing::from_header(header),
            message,
        })
    }

    /// Append the datagram to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Connless { framing, message } => {
                framing.encode(out);
                message.encode(out);
            }
            Self::Token { to, token, padded } => {
                let m = if *padded {
                    TokenMessage {
                        token: to.0,
                        ..TokenMessage::request(token.0)
                    }
                } else {
                    TokenMessage::reply(to.0, token.0)
                };
                m.encode(out);
            }
        }
    }

    /// The encoded length in bytes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        match self {
            Self::Connless { framing, message } => framing.len() + message.encoded_len(),
            Self::Token { padded: true, .. } => TOKEN_REQUEST_LEN,
            Self::Token { padded: false, .. } => TOKEN_MESSAGE_LEN,
        }
    }
}

/// A master message: the payload after the connless header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `bea2`: register the game port; the IP is the datagram's source.
    Heartbeat {
        /// The game port to list (big-endian on the wire).
        port: u16,
    },
    /// `beat`: the 0.5 heartbeat (0.6 face only).
    HeartbeatLegacy {
        /// The game port to list (big-endian on the wire).
        port: u16,
    },
    /// `cou2`: how many servers are listed?
    CountRequest,
    /// `coun`: the 0.5 count request.
    CountRequestLegacy,
    /// `siz2`: the count (the reference 0.6 master counts `beat` and `bea2` servers together).
    CountReply {
        /// Listed servers (big-endian on the wire).
        count: u16,
    },
    /// `size`: the 0.5 count reply.
    CountReplyLegacy {
        /// Listed servers (big-endian on the wire).
        count: u16,
    },
    /// `req2`: send me the list.
    ListRequest,
    /// `reqt`: send me the 0.5 list.
    ListRequestLegacy,
    /// `lis2`: one datagram of the list (no count, sequence or end marker).
    List(ListReply),
    /// `list`: one datagram of the 0.5 list.
    ListLegacy(LegacyListReply),
    /// `fw??`: the master's checker asks the server to prove it is reachable.
    FirewallCheck,
    /// `fw!!`: the server's answer to `fw??`.
    FirewallResponse,
    /// `fwok`: the check passed; the server is listed.
    FirewallOk,
    /// `fwer`: the check failed after 10 tries.
    FirewallError,
    /// `chal`: DDNet's HTTP master proving that a server owns its UDP port.
    Challenge(Challenge),
}

impl Message {
    /// Decode a payload (after the connless header). The length must be exact.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let magic: [u8; 8] = r.array("master magic")?;
        let msg = match &magic {
            m if m == &MAGIC_HEARTBEAT => Self::Heartbeat {
                port: r.u16_be("bea2 port")?,
            },
            m if m == &MAGIC_HEARTBEAT_LEGACY => Self::HeartbeatLegacy {
                port: r.u16_be("beat port")?,
            },
            m if m == &MAGIC_COUNT_REQUEST => Self::CountRequest,
            m if m == &MAGIC_COUNT_REQUEST_LEGACY => Self::CountRequestLegacy,
            m if m == &MAGIC_COUNT_REPLY => Self::CountReply {
                count: r.u16_be("siz2 count")?,
            },
            m if m == &MAGIC_COUNT_REPLY_LEGACY => Self::CountReplyLegacy {
                count: r.u16_be("size count")?,
            },
            m if m == &MAGIC_LIST_REQUEST => Self::ListRequest,
            m if m == &MAGIC_LIST_REQUEST_LEGACY => Self::ListRequestLegacy,
            m if m == &MAGIC_LIST => Self::List(ListReply::decode_entries(&mut r)?),
            m if m == &MAGIC_LIST_LEGACY => {
                Self::ListLegacy(LegacyListReply::decode_entries(&mut r)?)
            }
            m if m == &MAGIC_FW_CHECK => Self::FirewallCheck,
            m if m == &MAGIC_FW_RESPONSE => Self::FirewallResponse,
            m if m == &MAGIC_FW_OK => Self::FirewallOk,
            m if m == &MAGIC_FW_ERROR => Self::FirewallError,
            m if m == &MAGIC_CHALLENGE => Self::Challenge(Challenge::decode_body(&mut r)?),
            _ => return Err(DecodeError::BadMagic("master message")),
        };
        r.finish("master message")?;
        Ok(msg)
    }

    /// Append the payload to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.magic());
        match self {
            Self::Heartbeat { port } | Self::HeartbeatLegacy { port } => {
                out.extend_from_slice(&port.to_be_bytes());
            }
            Self::CountReply { count } | Self::CountReplyLegacy { count } => {
                out.extend_from_slice(&count.to_be_bytes());
            }
            Self::List(list) => {
                for e in &list.entries {
                    out.extend_from_slice(&e.ip.octets());
                    out.extend_from_slice(&e.port.to_be_bytes());
                }
            }
            Self::ListLegacy(list) => {
                for e in &list.entries {
                    out.extend_from_slice(&e.ip.octets());
                    out.extend_from_slice(&e.port.to_le_bytes());
                }
            }
            Self::Challenge(c) => {
                out.extend_from_slice(&c.secret);
                out.push(0);
                out.extend_from_slice(&c.token);
                out.push(0);
            }
            Self::CountRequest
            | Self::CountRequestLegacy
            | Self::ListRequest
            | Self::ListRequestLegacy
            | Self::FirewallCheck
            | Self::FirewallResponse
            | Self::FirewallOk
            | Self::FirewallError => {}
        }
    }

    /// The encoded payload length in bytes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        MAGIC_LEN
            + match self {
                Self::Heartbeat { .. }
                | Self::HeartbeatLegacy { .. }
                | Self::CountReply { .. }
                | Self::CountReplyLegacy { .. } => 2,
                Self::List(l) => l.entries.len() * LIST_ENTRY_LEN,
                Self::ListLegacy(l) => l.entries.len() * LEGACY_LIST_ENTRY_LEN,
                Self::Challenge(c) => c.secret.len() + c.token.len() + 2,
                _ => 0,
            }
    }

    fn magic(&self) -> &'static [u8; 8] {
        match self {
            Self::Heartbeat { .. } => &MAGIC_HEARTBEAT,
            Self::HeartbeatLegacy { .. } => &MAGIC_HEARTBEAT_LEGACY,
            Self::CountRequest => &MAGIC_COUNT_REQUEST,
            Self::CountRequestLegacy => &MAGIC_COUNT_REQUEST_LEGACY,
            Self::CountReply { .. } => &MAGIC_COUNT_REPLY,
            Self::CountReplyLegacy { .. } => &MAGIC_COUNT_REPLY_LEGACY,
            Self::ListRequest => &MAGIC_LIST_REQUEST,
            Self::ListRequestLegacy => &MAGIC_LIST_REQUEST_LEGACY,
            Self::List(_) => &MAGIC_LIST,
            Self::ListLegacy(_) => &MAGIC_LIST_LEGACY,
            Self::FirewallCheck => &MAGIC_FW_CHECK,
            Self::FirewallResponse => &MAGIC_FW_RESPONSE,
            Self::FirewallOk => &MAGIC_FW_OK,
            Self::FirewallError => &MAGIC_FW_ERROR,
            Self::Challenge(_) => &MAGIC_CHALLENGE,
        }
    }
}

/// One `lis2` entry: 16 address bytes (IPv4 as `::ffff:a.b.c.d`) and a big-endian port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListEntry {
    /// The address bytes exactly as sent.
    pub ip: Ipv6Addr,
    /// The game port.
    pub port: u16,
}

impl ListEntry {
    /// The entry for `addr`: IPv4 becomes IPv4-mapped, as the reference master writes it.
    #[must_use]
    pub fn from_socket_addr(addr: SocketAddr) -> Self {
        let ip = match addr {
            SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
            SocketAddr::V6(a) => *a.ip(),
        };
        Self {
            ip,
            port: addr.port(),
        }
    }

    /// The game address; IPv4-mapped entries become plain IPv4.
    #[must_use]
    pub fn socket_addr(&self) -> SocketAddr {
        match self.ip.to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, self.port)),
            None => SocketAddr::V6(SocketAddrV6::new(self.ip, self.port, 0, 0)),
        }
    }
}

/// One 0.5 `list` entry: IPv4 and a **little-endian** port (0.5 wrote host byte order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LegacyListEntry {
    /// The IPv4 address.
    pub ip: Ipv4Addr,
    /// The game port.
    pub port: u16,
}

impl LegacyListEntry {
    /// The game address.
    #[must_use]
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ip, self.port))
    }
}

/// The entries of one `lis2` datagram: at most [`MAX_LIS2_ENTRIES_ACCEPTED`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListReply {
    entries: Vec<ListEntry>,
}

impl ListReply {
    /// A datagram's worth of entries; more than [`MAX_LIS2_ENTRIES_ACCEPTED`] is refused.
    /// Masters should build replies with [`Self::split`], which uses the reference 75.
    pub fn new(entries: Vec<ListEntry>) -> Result<Self, DecodeError> {
        if entries.len() > MAX_LIS2_ENTRIES_ACCEPTED {
            return Err(DecodeError::TooLarge("lis2 entries"));
        }
        Ok(Self { entries })
    }

    /// Split a whole list into datagrams exactly as the reference master does: 75 entries per
    /// datagram in list order, the last one shorter, at most [`MAX_LIST_DATAGRAMS`] datagrams
    /// (entries beyond 1200 are not sent, as the reference master cannot hold them). An empty
    /// list gives no datagram: the reference master sends nothing when it has no servers.
    #[must_use]
    pub fn split(entries: &[ListEntry]) -> Vec<Self> {
        entries
            .chunks(MAX_LIST_ENTRIES)
            .take(MAX_LIST_DATAGRAMS)
            .map(|c| Self {
                entries: c.to_vec(),
            })
            .collect()
    }

    /// The entries in wire order.
    #[must_use]
    pub fn entries(&self) -> &[ListEntry] {
        &self.entries
    }

    fn decode_entries(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let body = r.rest();
        if body.len() % LIST_ENTRY_LEN != 0 {
            return Err(DecodeError::Invalid("lis2 length"));
        }
        let n = body.len() / LIST_ENTRY_LEN;
        if n > MAX_LIS2_ENTRIES_ACCEPTED {
            return Err(DecodeError::TooLarge("lis2 entries"));
        }
        let mut entries = Vec::with_capacity(n);
        let mut er = Reader::new(body);
        while !er.is_empty() {
            let ip: [u8; 16] = er.array("lis2 address")?;
            let port = er.u16_be("lis2 port")?;
            entries.push(ListEntry {
                ip: Ipv6Addr::from(ip),
                port,
            });
        }
        Ok(Self { entries })
    }
}

/// The entries of one 0.5 `list` datagram: at most [`MAX_LEGACY_LIST_ENTRIES_ACCEPTED`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LegacyListReply {
    entries: Vec<LegacyListEntry>,
}

impl LegacyListReply {
    /// A datagram's worth of entries; more than [`MAX_LEGACY_LIST_ENTRIES_ACCEPTED`] is
    /// refused. Masters should build replies with [`Self::split`].
    pub fn new(entries: Vec<LegacyListEntry>) -> Result<Self, DecodeError> {
        if entries.len() > MAX_LEGACY_LIST_ENTRIES_ACCEPTED {
            return Err(DecodeError::TooLarge("list entries"));
        }
        Ok(Self { entries })
    }

    /// Split a whole list into datagrams like [`ListReply::split`].
    #[must_use]
    pub fn split(entries: &[LegacyListEntry]) -> Vec<Self> {
        entries
            .chunks(MAX_LIST_ENTRIES)
            .take(MAX_LIST_DATAGRAMS)
            .map(|c| Self {
                entries: c.to_vec(),
            })
            .collect()
    }

    /// The entries in wire order.
    #[must_use]
    pub fn entries(&self) -> &[LegacyListEntry] {
        &self.entries
    }

    fn decode_entries(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let body = r.rest();
        if body.len() % LEGACY_LIST_ENTRY_LEN != 0 {
            return Err(DecodeError::Invalid("list length"));
        }
        let n = body.len() / LEGACY_LIST_ENTRY_LEN;
        if n > MAX_LEGACY_LIST_ENTRIES_ACCEPTED {
            return Err(DecodeError::TooLarge("list entries"));
        }
        let mut entries = Vec::with_capacity(n);
        let mut er = Reader::new(body);
        while !er.is_empty() {
            let ip: [u8; 4] = er.array("list address")?;
            let port = er.u16_le("list port")?;
            entries.push(LegacyListEntry {
                ip: Ipv4Addr::from(ip),
                port,
            });
        }
        Ok(Self { entries })
    }
}

/// DDNet's UDP challenge: `chal`, the server's Challenge-Secret, NUL, the token, NUL.
///
/// Both fields are raw bytes without NUL, each at most [`MAX_CHALLENGE_FIELD`] bytes
/// (enforced by [`Self::new`] and the decoder, so encoding cannot fail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    secret: Vec<u8>,
    token: Vec<u8>,
}

impl Challenge {
    /// A challenge carrying `secret` (the request's `Challenge-Secret`, `uuid:stream`) and the
    /// master's `token`. Refuses NUL bytes and fields longer than [`MAX_CHALLENGE_FIELD`].
    pub fn new(secret: &[u8], token: &[u8]) -> Result<Self, DecodeError> {
        for (field, ctx) in [(secret, "challenge secret"), (token, "challenge token")] {
            if field.len() > MAX_CHALLENGE_FIELD {
                return Err(DecodeError::TooLarge(ctx));
            }
            if field.contains(&0) {
                return Err(DecodeError::Invalid(ctx));
            }
        }
        Ok(Self {
            secret: secret.to_vec(),
            token: token.to_vec(),
        })
    }

    /// The Challenge-Secret as sent (`<uuid>:<stream name>`).
    #[must_use]
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// The challenge token the server must echo in `Challenge-Token`.
    #[must_use]
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let secret = r.cstr("challenge secret")?;
        let token = r.cstr("challenge token")?;
        Self::new(secret, token)
    }
}

const MAGIC_LEN: usize = 8;
const LIST_ENTRY_LEN: usize = 18;
const LEGACY_LIST_ENTRY_LEN: usize = 6;

// Message magics: `ff ff ff ff` plus four ASCII bytes (teeworlds `src/mastersrv/mastersrv.h`,
// ddnet `src/engine/masterserver.h`, ddnet `src/mastersrv/src/main.rs` for `chal`).
const MAGIC_HEARTBEAT: [u8; 8] = *b"\xff\xff\xff\xffbea2";
const MAGIC_HEARTBEAT_LEGACY: [u8; 8] = *b"\xff\xff\xff\xffbeat";
const MAGIC_COUNT_REQUEST: [u8; 8] = *b"\xff\xff\xff\xffcou2";
const MAGIC_COUNT_REQUEST_LEGACY: [u8; 8] = *b"\xff\xff\xff\xffcoun";
const MAGIC_COUNT_REPLY: [u8; 8] = *b"\xff\xff\xff\xffsiz2";
const MAGIC_COUNT_REPLY_LEGACY: [u8; 8] = *b"\xff\xff\xff\xffsize";
const MAGIC_LIST_REQUEST: [u8; 8] = *b"\xff\xff\xff\xffreq2";
const MAGIC_LIST_REQUEST_LEGACY: [u8; 8] = *b"\xff\xff\xff\xffreqt";
const MAGIC_LIST: [u8; 8] = *b"\xff\xff\xff\xfflis2";
const MAGIC_LIST_LEGACY: [u8; 8] = *b"\xff\xff\xff\xfflist";
const MAGIC_FW_CHECK: [u8; 8] = *b"\xff\xff\xff\xfffw??";
const MAGIC_FW_RESPONSE: [u8; 8] = *b"\xff\xff\xff\xfffw!!";
const MAGIC_FW_OK: [u8; 8] = *b"\xff\xff\xff\xfffwok";
const MAGIC_FW_ERROR: [u8; 8] = *b"\xff\xff\xff\xfffwer";
const MAGIC_CHALLENGE: [u8; 8] = *b"\xff\xff\xff\xffchal";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).expect("hex")
    }

    const MSTR: Token = Token(*b"MSTR");
    const SRV: Token = Token([0xea, 0xc3, 0x12, 0x4c]);

    fn v7_to_master() -> Framing {
        Framing::V07 {
            token: MSTR,
            response_token: SRV,
        }
    }

    fn v7_to_server() -> Framing {
        Framing::V07 {
            token: SRV,
            response_token: MSTR,
        }
    }

    /// Encode into a buffer pre-filled with `a5` so a skipped prefix shows.
    fn enc(p: &Packet) -> Vec<u8> {
        let mut out = vec![0xa5];
        p.encode(&mut out);
        assert_eq!(out.len() - 1, p.encoded_len());
        assert_eq!(out.first(), Some(&0xa5));
        out.split_off(1)
    }

    fn conn(framing: Framing, message: Message) -> Packet {
        Packet::Connless { framing, message }
    }

    // (packet, bytes) table for every message: decode and encode both checked.
    fn table() -> Vec<(Packet, Vec<u8>)> {
        let std = Framing::STANDARD_06;
        vec![
            (
                conn(v7_to_master(), Message::Heartbeat { port: 18303 }),
                h("21 4d535452 eac3124c ffffffff 62656132 477f"),
            ),
            (
                conn(std, Message::HeartbeatLegacy { port: 8303 }),
                h("ffffffffffff ffffffff 62656174 206f"),
            ),
            (
                conn(v7_to_master(), Message::CountRequest),
                h("21 4d535452 eac3124c ffffffff 636f7532"),
            ),
            (
                conn(std, Message::CountRequestLegacy),
                h("ffffffffffff ffffffff 636f756e"),
            ),
            (
                conn(v7_to_server(), Message::CountReply { count: 7 }),
                h("21 eac3124c 4d535452 ffffffff 73697a32 0007"),
            ),
            (
                conn(std, Message::CountReplyLegacy { count: 258 }),
                h("ffffffffffff ffffffff 73697a65 0102"),
            ),
            (
                conn(Framing::V06([0x20, 0, 0, 0, 0, 0]), Message::ListRequest),
                h("200000000000 ffffffff 72657132"),
            ),
            (
                conn(
                    Framing::V06([0x20, 0, 0, 0, 0, 0]),
                    Message::ListRequestLegacy,
                ),
                h("200000000000 ffffffff 72657174"),
            ),
            (
                conn(v7_to_server(), Message::FirewallCheck),
                h("21 eac3124c 4d535452 ffffffff 66773f3f"),
            ),
            (
                conn(v7_to_master(), Message::FirewallResponse),
                h("21 4d535452 eac3124c ffffffff 66772121"),
            ),
            (
                conn(v7_to_server(), Message::FirewallOk),
                h("21 eac3124c 4d535452 ffffffff 66776f6b"),
            ),
            (
                conn(std, Message::FirewallError),
                h("ffffffffffff ffffffff 66776572"),
            ),
        ]
    }

    #[test]
    fn decode_every_message() {
        for (p, bytes) in table() {
            assert_eq!(Packet::decode(&bytes), Ok(p), "{}", hex::encode(&bytes));
        }
    }

    #[test]
    fn encode_every_message() {
        for (p, bytes) in table() {
            assert_eq!(enc(&p), bytes, "{p:?}");
        }
    }

    #[test]
    fn decode_lis2() {
        let bytes = h("ffffffffffff ffffffff 6c697332
                       00000000000000000000ffff7f000001 4780
                       20010db8000000000000000000000001 206f");
        let Ok(Packet::Connless {
            message: Message::List(list),
            ..
        }) = Packet::decode(&bytes)
        else {
            panic!("not lis2");
        };
        let addrs: Vec<SocketAddr> = list.entries().iter().map(ListEntry::socket_addr).collect();
        assert_eq!(
            addrs,
            vec![
                "127.0.0.1:18304".parse::<SocketAddr>().expect("addr"),
                "[2001:db8::1]:8303".parse().expect("addr"),
            ]
        );
    }

    #[test]
    fn encode_lis2() {
        let entries = ["127.0.0.1:18304", "[2001:db8::1]:8303"]
            .map(|s| ListEntry::from_socket_addr(s.parse().expect("addr")));
        let p = conn(
            Framing::STANDARD_06,
            Message::List(ListReply::new(entries.to_vec()).expect("fits")),
        );
        assert_eq!(
            enc(&p),
            h("ffffffffffff ffffffff 6c697332
               00000000000000000000ffff7f000001 4780
               20010db8000000000000000000000001 206f")
        );
    }

    #[test]
    fn decode_lis2_rejects_partial_entry() {
        let bytes = h("ffffffffffff ffffffff 6c697332 0000");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::Invalid("lis2 length"))
        );
    }

    #[test]
    fn decode_lis2_rejects_more_than_fit_a_datagram() {
        let mut bytes = h("ffffffffffff ffffffff 6c697332");
        bytes.resize(bytes.len() + 78 * 18, 0);
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::TooLarge("lis2 entries"))
        );
    }

    #[test]
    fn decode_lis2_accepts_77_entries_of_older_masters() {
        let mut bytes = h("ffffffffffff ffffffff 6c697332");
        bytes.resize(bytes.len() + 77 * 18, 0);
        assert_eq!(bytes.len(), 1400);
        let Ok(Packet::Connless {
            message: Message::List(list),
            ..
        }) = Packet::decode(&bytes)
        else {
            panic!("not lis2");
        };
        assert_eq!(list.entries().len(), 77);
    }

    #[test]
    fn lis2_split_matches_reference_master() {
        let entries: Vec<ListEntry> = (0..1300u16)
            .map(|i| ListEntry::from_socket_addr(SocketAddr::from(([10, 0, 0, 1], i))))
            .collect();
        let parts = ListReply::split(&entries);
        assert_eq!(parts.len(), MAX_LIST_DATAGRAMS);
        assert!(parts.iter().all(|p| p.entries().len() == MAX_LIST_ENTRIES));
        let first = parts.first().expect("one");
        assert_eq!(first.entries().first(), entries.first());
        let parts = ListReply::split(entries.get(..80).expect("80"));
        let lens: Vec<usize> = parts.iter().map(|p| p.entries().len()).collect();
        assert_eq!(lens, vec![75, 5]);
        let mut out = Vec::new();
        Message::List(parts.first().expect("one").clone()).encode(&mut out);
        assert_eq!(out.len(), 8 + 75 * 18);
        assert!(ListReply::split(&[]).is_empty());
        assert_eq!(
            ListReply::new(entries.clone()),
            Err(DecodeError::TooLarge("lis2 entries"))
        );
    }

    #[test]
    fn decode_legacy_list() {
        let bytes = h("ffffffffffff ffffffff 6c697374 7f000001 6f20");
        let Ok(Packet::Connless {
            message: Message::ListLegacy(list),
            ..
        }) = Packet::decode(&bytes)
        else {
            panic!("not list");
        };
        assert_eq!(
            list.entries().first().map(LegacyListEntry::socket_addr),
            Some("127.0.0.1:8303".parse().expect("addr"))
        );
    }

    #[test]
    fn encode_legacy_list() {
        let e = LegacyListEntry {
            ip: Ipv4Addr::new(127, 0, 0, 1),
            port: 8303,
        };
        let p = conn(
            Framing::STANDARD_06,
            Message::ListLegacy(LegacyListReply::new(vec![e]).expect("fits")),
        );
        assert_eq!(enc(&p), h("ffffffffffff ffffffff 6c697374 7f000001 6f20"));
    }

    #[test]
    fn decode_legacy_list_rejects_partial_entry() {
        let bytes = h("ffffffffffff ffffffff 6c697374 7f0000");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::Invalid("list length"))
        );
    }

    #[test]
    fn decode_token_request() {
        let mut bytes = h("040000 ffffffff 05 eac3124c");
        bytes.resize(520, 0);
        assert_eq!(Packet::decode(&bytes), Ok(Packet::token_request(SRV)));
    }

    #[test]
    fn encode_token_request() {
        let mut want = h("040000 ffffffff 05 eac3124c");
        want.resize(520, 0);
        assert_eq!(enc(&Packet::token_request(SRV)), want);
    }

    #[test]
    fn decode_token_reply() {
        let bytes = h("040000 eac3124c 05 4d535452");
        assert_eq!(Packet::decode(&bytes), Ok(Packet::token_reply(SRV, MSTR)));
    }

    #[test]
    fn encode_token_reply() {
        assert_eq!(
            enc(&Packet::token_reply(SRV, MSTR)),
            h("040000 eac3124c 05 4d535452")
        );
    }

    #[test]
    fn decode_token_request_rejects_short_padding() {
        let mut bytes = h("040000 ffffffff 05 eac3124c");
        bytes.resize(516, 0);
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::Invalid("token message length"))
        );
    }

    #[test]
    fn decode_token_rejects_other_control_message() {
        let bytes = h("040000 ffffffff 01 eac3124c");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::BadMagic("control message"))
        );
    }

    #[test]
    fn decode_challenge() {
        let bytes = h("ffffffffffff ffffffff 6368616c 613a62 00 746f6b 00");
        let want = Challenge::new(b"a:b", b"tok").expect("valid");
        assert_eq!(
            Packet::decode(&bytes),
            Ok(conn(Framing::STANDARD_06, Message::Challenge(want)))
        );
    }

    #[test]
    fn encode_challenge() {
        let c = Challenge::new(b"a:b", b"tok").expect("valid");
        let p = conn(
            Framing::V07 {
                token: Token([0xff, 0x0e, 0x23, 0x31]),
                response_token: Token::NONE,
            },
            Message::Challenge(c),
        );
        assert_eq!(
            enc(&p),
            h("21 ff0e2331 ffffffff ffffffff 6368616c 613a62 00 746f6b 00")
        );
    }

    #[test]
    fn decode_challenge_rejects_missing_token_terminator() {
        let bytes = h("ffffffffffff ffffffff 6368616c 613a62 00 746f6b");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::Unterminated("challenge token"))
        );
        assert_eq!(
            Challenge::new(b"a\0b", b"t"),
            Err(DecodeError::Invalid("challenge secret"))
        );
    }

    #[test]
    fn decode_message_rejects_extra_bytes() {
        let bytes = h("ffffffffffff ffffffff 636f7532 00");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::TrailingBytes(1, "master message"))
        );
    }

    #[test]
    fn decode_message_rejects_short_heartbeat() {
        let bytes = h("ffffffffffff ffffffff 62656132 47");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::Truncated("bea2 port"))
        );
    }

    #[test]
    fn decode_rejects_unknown_magic_and_non_connless() {
        let bytes = h("ffffffffffff ffffffff 67696533");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::BadMagic("master message"))
        );
        let bytes = h("10ffffffffff ffffffff 636f7532");
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::BadMagic("connless header"))
        );
        assert_eq!(Packet::decode(&[]), Err(DecodeError::Truncated("header")));
    }

    #[test]
    fn token_hex_round_trip() {
        let t = Token::from_hex("ff0e2331").expect("hex");
        assert_eq!(t, Token([0xff, 0x0e, 0x23, 0x31]));
        assert_eq!(t.to_hex(), "ff0e2331");
        assert_eq!(
            Token::from_hex("ff0e233"),
            Err(DecodeError::Invalid("connless token"))
        );
        assert_eq!(
            Token::from_hex("+f0e2331"),
            Err(DecodeError::Invalid("connless token"))
        );
    }

    fn arb_token() -> impl Strategy<Value = Token> {
        any::<[u8; 4]>().prop_map(Token)
    }

    fn arb_framing() -> impl Strategy<Value = Framing> {
        prop_oneof![
            // Byte 0 must classify as 0.6 connless: 0x20 set, low bits not 01.
            (any::<[u8; 6]>()).prop_map(|mut h| {
                if let Some(b) = h.first_mut() {
                    *b = (*b | 0x20) & !0x01;
                }
                Framing::V06(h)
            }),
            (arb_token(), arb_token()).prop_map(|(token, response_token)| Framing::V07 {
                token,
                response_token
            }),
        ]
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let field = proptest::collection::vec(1u8..=255, 0..40);
        prop_oneof![
            any::<u16>().prop_map(|port| Message::Heartbeat { port }),
            any::<u16>().prop_map(|port| Message::HeartbeatLegacy { port }),
            Just(Message::CountRequest),
            Just(Message::CountRequestLegacy),
            any::<u16>().prop_map(|count| Message::CountReply { count }),
            any::<u16>().prop_map(|count| Message::CountReplyLegacy { count }),
            Just(Message::ListRequest),
            Just(Message::ListRequestLegacy),
            proptest::collection::vec((any::<[u8; 16]>(), any::<u16>()), 0..=77).prop_map(|v| {
                let e = v
                    .into_iter()
                    .map(|(ip, port)| ListEntry {
                        ip: Ipv6Addr::from(ip),
                        port,
                    })
                    .collect();
                Message::List(ListReply::new(e).expect("fits"))
            }),
            proptest::collection::vec((any::<[u8; 4]>(), any::<u16>()), 0..=231).prop_map(|v| {
                let e = v
                    .into_iter()
                    .map(|(ip, port)| LegacyListEntry {
                        ip: Ipv4Addr::from(ip),
                        port,
                    })
                    .collect();
                Message::ListLegacy(LegacyListReply::new(e).expect("fits"))
            }),
            Just(Message::FirewallCheck),
            Just(Message::FirewallResponse),
            Just(Message::FirewallOk),
            Just(Message::FirewallError),
            (field.clone(), field)
                .prop_map(|(s, t)| Message::Challenge(Challenge::new(&s, &t).expect("no NUL"))),
        ]
    }

    fn arb_packet() -> impl Strategy<Value = Packet> {
        prop_oneof![
            (arb_framing(), arb_message())
                .prop_map(|(framing, message)| Packet::Connless { framing, message }),
            (arb_token(), arb_token(), any::<bool>())
                .prop_map(|(to, token, padded)| Packet::Token { to, token, padded }),
        ]
    }

    proptest! {
        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let _ = Packet::decode(&bytes);
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn decode_mutated_messages_never_panics(p in arb_packet(), flip in any::<(usize, u8)>(), cut in any::<usize>()) {
            let mut bytes = Vec::new();
            p.encode(&mut bytes);
            let len = bytes.len();
            if let Some(b) = bytes.get_mut(flip.0 % len.max(1)) { *b ^= flip.1; }
            bytes.truncate(cut % (len + 1));
            let _ = Packet::decode(&bytes);
        }

        #[test]
        fn packet_round_trip(p in arb_packet()) {
            let mut bytes = Vec::new();
            p.encode(&mut bytes);
            prop_assert_eq!(bytes.len(), p.encoded_len());
            prop_assert_eq!(Packet::decode(&bytes), Ok(p));
        }
    }
}
