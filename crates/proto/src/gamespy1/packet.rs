//! GameSpy v1 messages: requests (`\status\`, `\basic\\info\`, …) and reply datagrams
//! (`\key\value…\queryid\X.Y\final\`).
//!
//! Both directions decode and encode. Reply values are kept as raw bytes; text decoding
//! happens only in [`super::decode_text`].

use super::tokenizer::tokenize;
use super::{BACKSLASH, MAX_DATAGRAM_LEN, MAX_REQUEST_LEN};
use crate::wire::{DecodeError, put_decimal};

/// Why a value could not be built for encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A key or request type was empty.
    #[error("empty {0}")]
    Empty(&'static str),
    /// A key, type or request value contained `\`, NUL or another control byte.
    #[error("forbidden byte in {0}")]
    ForbiddenByte(&'static str),
}

/// The key of the pair that carries the reply id `X.Y`.
pub const KEY_QUERYID: &[u8] = b"queryid";
/// The key of the pair that marks the last datagram of a reply.
pub const KEY_FINAL: &[u8] = b"final";

/// Trailing bytes some senders append to a datagram; stripped before decoding.
const NUL: u8 = 0x00;

/// True for bytes a key or value of ours may not contain: `\` and bytes below 0x20.
fn forbidden(b: u8) -> bool {
    b == BACKSLASH || b < 0x20
}

/// One `\key\value` pair of a reply.
///
/// Decoded pairs keep the bytes as sent (values may contain a recovered `\`). Pairs built with
/// [`Pair::new`] are clean, so encoding them cannot break the framing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pair {
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Pair {
    /// A pair to send. The key must be non-empty and free of `\` and control bytes (else an
    /// error). The value is cleaned instead, as Muster's responder does for every style
    /// (spec §10, §13): `\` and bytes below 0x20 are removed.
    pub fn new(key: impl Into<Vec<u8>>, value: impl AsRef<[u8]>) -> Result<Self, BuildError> {
        let key = key.into();
        if key.is_empty() {
            return Err(BuildError::Empty("key"));
        }
        if key.iter().any(|&b| forbidden(b)) {
            return Err(BuildError::ForbiddenByte("key"));
        }
        let value = value
            .as_ref()
            .iter()
            .copied()
            .filter(|&b| !forbidden(b))
            .collect();
        Ok(Self { key, value })
    }

    /// A pair exactly as decoded from the wire (no checks: used by decoders).
    pub(crate) fn raw(key: &[u8], value: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            value: value.to_vec(),
        }
    }

    /// The key as sent (compare with [`Self::key_is`] for case-insensitive matching).
    #[must_use]
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value as sent.
    #[must_use]
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// True when the key equals `name`, ignoring ASCII case (keys are case-insensitive, §2).
    #[must_use]
    pub fn key_is(&self, name: &[u8]) -> bool {
        self.key.eq_ignore_ascii_case(name)
    }

    /// Append `\key\value`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(BACKSLASH);
        out.extend_from_slice(&self.key);
        out.push(BACKSLASH);
        out.extend_from_slice(&self.value);
    }

    /// The length of [`Self::encode`]'s output.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        2 + self.key.len() + self.value.len()
    }
}

/// A parsed `queryid` value `X.Y`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryId {
    /// The reply id (per request datagram; 1..100 on Unreal servers, constants on Serious Sam).
    pub x: u32,
    /// The 1-based datagram number within the reply (0 on Unreal 227's empty `\players\`).
    pub y: u32,
}

impl QueryId {
    /// Parse `X`, `X.` or `X.Y` (ASCII digits). A missing or empty `Y` counts as 1 (spec §7.2).
    pub fn parse(value: &[u8]) -> Result<Self, DecodeError> {
        const CTX: &str = "queryid";
        let (x, y) = match value.iter().position(|&b| b == b'.') {
            Some(dot) => {
                let (x, rest) = value.split_at(dot);
                (x, rest.get(1..).unwrap_or_default())
            }
            None => (value, &[][..]),
        };
        let x = parse_u32(x).ok_or(DecodeError::BadNumber(CTX))?;
        let y = if y.is_empty() {
            1
        } else {
            parse_u32(y).ok_or(DecodeError::BadNumber(CTX))?
        };
        Ok(Self { x, y })
    }

    /// Append `X.Y`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_decimal(out, i64::from(self.x));
        out.push(b'.');
        put_decimal(out, i64::from(self.y));
    }
}

/// Digits only (no sign, no spaces), fitting a `u32`.
fn parse_u32(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// One reply datagram: every pair in wire order, `queryid` and `final` included.
///
/// Keeping the control pairs in place makes the type lossless for all three styles (`final`
/// before or after `queryid`, several `queryid` pairs in one datagram); [`Self::query_ids`],
/// [`Self::is_final`] and [`Self::data`] give the parsed views.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyDatagram {
    /// The pairs in the order they were sent.
    pub pairs: Vec<Pair>,
}

impl ReplyDatagram {
    /// Decode one datagram: strip trailing NULs, then tokenize (spec §8.2).
    ///
    /// Errors: [`DecodeError::TooLarge`] above [`MAX_DATAGRAM_LEN`], [`DecodeError::Truncated`]
    /// when nothing is left after the NULs, [`DecodeError::BadMagic`] when it does not start
    /// with `\` (zero-filled datagrams, other protocols).
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        const CTX: &str = "gamespy1 reply";
        if datagram.len() > MAX_DATAGRAM_LEN {
            return Err(DecodeError::TooLarge(CTX));
        }
        let body = strip_trailing_nuls(datagram);
        if body.is_empty() {
            return Err(DecodeError::Truncated(CTX));
        }
        if body.first() != Some(&BACKSLASH) {
            return Err(DecodeError::BadMagic(CTX));
        }
        let pairs = tokenize(body)?
            .into_iter()
            .map(|(k, v)| Pair::raw(k, v))
            .collect();
        Ok(Self { pairs })
    }

    /// Append the datagram: `\key\value` per pair. A datagram without pairs encodes as a lone
    /// `\`, which decodes back to no pairs.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.pairs.is_empty() {
            out.push(BACKSLASH);
        }
        for pair in &self.pairs {
            pair.encode(out);
        }
    }

    /// Every `queryid` value, parsed, in order. An unparsable one is an error.
    pub fn query_ids(&self) -> Result<Vec<QueryId>, DecodeError> {
        self.pairs
            .iter()
            .filter(|p| p.key_is(KEY_QUERYID))
            .map(|p| QueryId::parse(p.value()))
            .collect()
    }

    /// True when the datagram carries a `final` pair (its value is ignored).
    #[must_use]
    pub fn is_final(&self) -> bool {
        self.pairs.iter().any(|p| p.key_is(KEY_FINAL))
    }

    /// The data pairs: everything except `queryid` and `final`.
    pub fn data(&self) -> impl Iterator<Item = &Pair> {
        self.pairs
            .iter()
            .filter(|p| !p.key_is(KEY_QUERYID) && !p.key_is(KEY_FINAL))
    }
}

/// `bytes` without its trailing NULs.
pub(crate) fn strip_trailing_nuls(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != NUL).map_or(0, |p| p + 1);
    bytes.get(..end).unwrap_or_default()
}

/// The type of one request item (`\type\`). Matched case-sensitively, as sent by clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// `\basic\`: game name and version.
    Basic,
    /// `\info\`: host name, map, game type, player counts.
    Info,
    /// `\rules\`: game rules and admin contact.
    Rules,
    /// `\players\`: one record per player.
    Players,
    /// `\status\`: basic + info + rules + players.
    Status,
    /// `\echo\X`: echo request (Muster's responder never answers it).
    Echo,
    /// `\secure\C`: master challenge, answered with `\validate\`.
    Secure,
    /// `\teams\`: team scores (UT v469).
    Teams,
    /// `\level_property\P`.
    LevelProperty,
    /// `\game_property\P`.
    GameProperty,
    /// `\player_property\P`.
    PlayerProperty,
    /// Any other type, bytes as sent.
    Unknown(Vec<u8>),
}

/// Wire names of the known request types.
const REQUEST_NAMES: [(&[u8], RequestKind); 11] = [
    (b"basic", RequestKind::Basic),
    (b"info", RequestKind::Info),
    (b"rules", RequestKind::Rules),
    (b"players", RequestKind::Players),
    (b"status", RequestKind::Status),
    (b"echo", RequestKind::Echo),
    (b"secure", RequestKind::Secure),
    (b"teams", RequestKind::Teams),
    (b"level_property", RequestKind::LevelProperty),
    (b"game_property", RequestKind::GameProperty),
    (b"player_property", RequestKind::PlayerProperty),
];

impl From<&[u8]> for RequestKind {
    fn from(name: &[u8]) -> Self {
        REQUEST_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or_else(|| Self::Unknown(name.to_vec()), |(_, k)| k.clone())
    }
}

impl RequestKind {
    /// The type as sent on the wire.
    #[must_use]
    pub fn name(&self) -> &[u8] {
        if let Self::Unknown(n) = self {
            return n;
        }
        REQUEST_NAMES
            .iter()
            .find(|(_, k)| k == self)
            .map_or(&[][..], |(n, _)| n)
    }
}

/// One `\type\` or `\type\value` item of a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestItem {
    kind: RequestKind,
    value: Option<Vec<u8>>,
}

impl RequestItem {
    /// An item to send. The type name must be non-empty; it and the value (if any, and
    /// non-empty) may not contain `\` or control bytes. An empty value is stored as `None`.
    pub fn new(kind: RequestKind, value: Option<&[u8]>) -> Result<Self, BuildError> {
        let name = kind.name();
        if name.is_empty() {
            return Err(BuildError::Empty("request type"));
        }
        if name.iter().any(|&b| forbidden(b)) {
            return Err(BuildError::ForbiddenByte("request type"));
        }
        let value = value.filter(|v| !v.is_empty());
        if value.is_some_and(|v| v.iter().any(|&b| forbidden(b))) {
            return Err(BuildError::ForbiddenByte("request value"));
        }
        Ok(Self {
            kind,
            value: value.map(<[u8]>::to_vec),
        })
    }

    /// The item's type.
    #[must_use]
    pub fn kind(&self) -> &RequestKind {
        &self.kind
    }

    /// The item's value (`xserverquery`, the echo text, the `\secure\` challenge).
    #[must_use]
    pub fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }
}

/// A request datagram: one or more items, parsed left to right as Unreal servers do (§3.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Request {
    items: Vec<RequestItem>,
}

impl Request {
    /// A request of the given items (at least one).
    pub fn new(items: Vec<RequestItem>) -> Result<Self, BuildError> {
        if items.is_empty() {
            return Err(BuildError::Empty("request"));
        }
        Ok(Self { items })
    }

    /// The plain `\status\` request (8 bytes) Muster's query sends.
    #[must_use]
    pub fn status() -> Self {
        Self {
            items: vec![RequestItem {
                kind: RequestKind::Status,
                value: None,
            }],
        }
    }

    /// The items in order; only the last one is "final" (its reply carries `\final\`).
    #[must_use]
    pub fn items(&self) -> &[RequestItem] {
        &self.items
    }

    /// Decode with the Unreal grammar of §3.1: items `\type\` or `\type\value`; an empty type
    /// (`\\`) stops parsing; after `\type\`, a rest of at most one byte is that item's value
    /// and ends the request. Trailing NULs are stripped first.
    ///
    /// Errors: [`DecodeError::TooLarge`] above [`MAX_REQUEST_LEN`], [`DecodeError::BadMagic`]
    /// when it does not start with `\`, [`DecodeError::Invalid`] when no item was found.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        const CTX: &str = "gamespy1 request";
        if datagram.len() > MAX_REQUEST_LEN {
            return Err(DecodeError::TooLarge(CTX));
        }
        let mut rest = strip_trailing_nuls(datagram);
        if rest.first() != Some(&BACKSLASH) {
            return Err(DecodeError::BadMagic(CTX));
        }
        let mut items = Vec::new();
        while let Some(after) = rest.strip_prefix(&[BACKSLASH]) {
            let (name, after_name) = match after.iter().position(|&b| b == BACKSLASH) {
                Some(p) => {
                    let (n, r) = after.split_at(p);
                    (n, r.get(1..).unwrap_or_default())
                }
                None => (after, &[][..]),
            };
            if name.is_empty() {
                break;
            }
            let kind = RequestKind::from(name);
            if after_name.len() <= 1 {
                let value = Some(after_name).filter(|v| !v.is_empty());
                items.push(RequestItem {
                    kind,
                    value: value.map(<[u8]>::to_vec),
                });
                break;
            }
            if after_name.first() == Some(&BACKSLASH) {
                items.push(RequestItem { kind, value: None });
                rest = after_name;
                continue;
            }
            let end = after_name
                .iter()
                .position(|&b| b == BACKSLASH)
                .unwrap_or(after_name.len());
            let (value, next) = after_name.split_at(end);
            items.push(RequestItem {
                kind,
                value: Some(value.to_vec()),
            });
            rest = next;
        }
        if items.is_empty() {
            return Err(DecodeError::Invalid(CTX));
        }
        Ok(Self { items })
    }

    /// Append `\type\` (or `\type\value`) per item.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for item in &self.items {
            out.push(BACKSLASH);
            out.extend_from_slice(item.kind.name());
            out.push(BACKSLASH);
            if let Some(v) = &item.value {
                out.extend_from_slice(v);
            }
        }
    }

    /// What a Serious Sam server (style C) answers to `datagram`: it does not parse, it
    /// searches the NUL-terminated datagram for `\status\`, `\info\`, `\basic\`, `\players\`
    /// in that order and answers the first found (spec §9.1). `None`: no reply.
    #[must_use]
    pub fn serious_sam_kind(datagram: &[u8]) -> Option<RequestKind> {
        let end = datagram
            .iter()
            .position(|&b| b == NUL)
            .unwrap_or(datagram.len());
        let text = datagram.get(..end).unwrap_or_default();
        let order: [(&[u8], RequestKind); 4] = [
            (b"\\status\\", RequestKind::Status),
            (b"\\info\\", RequestKind::Info),
            (b"\\basic\\", RequestKind::Basic),
            (b"\\players\\", RequestKind::Players),
        ];
        order
            .into_iter()
            .find(|(needle, _)| text.windows(needle.len()).any(|w| w == *needle))
            .map(|(_, kind)| kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pair(k: &str, v: &str) -> Pair {
        Pair::new(k, v).unwrap()
    }

    #[test]
    fn decode_request_status() {
        let r = Request::decode(b"\\status\\").unwrap();
        assert_eq!(r, Request::status());
    }

    #[test]
    fn encode_request_status() {
        let mut out = vec![];
        Request::status().encode(&mut out);
        assert_eq!(out, [0x5c, 0x73, 0x74, 0x61, 0x74, 0x75, 0x73, 0x5c]);
    }

    #[test]
    fn decode_request_xserverquery() {
        let r = Request::decode(b"\\status\\xserverquery").unwrap();
        assert_eq!(r.items().len(), 1);
        assert_eq!(r.items()[0].kind(), &RequestKind::Status);
        assert_eq!(r.items()[0].value(), Some(&b"xserverquery"[..]));
    }

    #[test]
    fn decode_request_combined() {
        let r = Request::decode(b"\\basic\\\\info\\").unwrap();
        let kinds: Vec<_> = r.items().iter().map(|i| i.kind().clone()).collect();
        assert_eq!(kinds, [RequestKind::Basic, RequestKind::Info]);
        assert!(r.items().iter().all(|i| i.value().is_none()));
        let r = Request::decode(b"\\basic\\\\secure\\ABCDEF").unwrap();
        assert_eq!(r.items()[1].kind(), &RequestKind::Secure);
        assert_eq!(r.items()[1].value(), Some(&b"ABCDEF"[..]));
        let r = Request::decode(b"\\echo\\hi\\players\\").unwrap();
        assert_eq!(r.items()[0].value(), Some(&b"hi"[..]));
        assert_eq!(r.items()[1].kind(), &RequestKind::Players);
    }

    #[test]
    fn decode_request_empty_type_stops() {
        let r = Request::decode(b"\\rules\\\\\\players\\").unwrap();
        assert_eq!(r.items().len(), 1);
        assert_eq!(r.items()[0].kind(), &RequestKind::Rules);
    }

    #[test]
    fn decode_request_unknown_kind_kept() {
        let r = Request::decode(b"\\Status\\").unwrap();
        assert_eq!(
            r.items()[0].kind(),
            &RequestKind::Unknown(b"Status".to_vec())
        );
        let mut out = vec![];
        r.encode(&mut out);
        assert_eq!(out, b"\\Status\\");
    }

    #[test]
    fn encode_request_combined() {
        let r = Request::new(vec![
            RequestItem::new(RequestKind::Basic, None).unwrap(),
            RequestItem::new(RequestKind::Secure, Some(b"ABCDEF")).unwrap(),
        ])
        .unwrap();
        let mut out = vec![0xa5];
        r.encode(&mut out);
        assert_eq!(out, b"\xa5\\basic\\\\secure\\ABCDEF");
    }

    #[test]
    fn decode_request_rejects_no_backslash() {
        assert_eq!(
            Request::decode(b"status"),
            Err(DecodeError::BadMagic("gamespy1 request"))
        );
    }

    #[test]
    fn decode_request_rejects_empty_type() {
        assert_eq!(
            Request::decode(b"\\\\status\\"),
            Err(DecodeError::Invalid("gamespy1 request"))
        );
    }

    #[test]
    fn decode_request_rejects_oversize() {
        let mut big = b"\\status\\".to_vec();
        big.resize(MAX_REQUEST_LEN + 1, b'x');
        assert_eq!(
            Request::decode(&big),
            Err(DecodeError::TooLarge("gamespy1 request"))
        );
    }

    #[test]
    fn build_request_item_rejects_backslash() {
        assert_eq!(
            RequestItem::new(RequestKind::Echo, Some(b"a\\b")),
            Err(BuildError::ForbiddenByte("request value"))
        );
        assert_eq!(
            RequestItem::new(RequestKind::Unknown(vec![]), None),
            Err(BuildError::Empty("request type"))
        );
        assert_eq!(Request::new(vec![]), Err(BuildError::Empty("request")));
    }

    #[test]
    fn serious_sam_request_priority() {
        assert_eq!(
            Request::serious_sam_kind(b"\\basic\\\\info\\"),
            Some(RequestKind::Info)
        );
        assert_eq!(
            Request::serious_sam_kind(b"\\status\\xserverquery"),
            Some(RequestKind::Status)
        );
        assert_eq!(Request::serious_sam_kind(b"\\rules\\"), None);
        assert_eq!(Request::serious_sam_kind(b"\0\\status\\"), None);
    }

    #[test]
    fn decode_reply_datagram() {
        let d = ReplyDatagram::decode(b"\\hostname\\X\\queryid\\41.1\\final\\\0\0").unwrap();
        assert_eq!(
            d.pairs,
            [
                pair("hostname", "X"),
                pair("queryid", "41.1"),
                pair("final", "")
            ]
        );
        assert_eq!(d.query_ids().unwrap(), [QueryId { x: 41, y: 1 }]);
        assert!(d.is_final());
        assert_eq!(d.data().collect::<Vec<_>>(), [&pair("hostname", "X")]);
    }

    #[test]
    fn encode_reply_datagram() {
        let d = ReplyDatagram {
            pairs: vec![pair("final", ""), pair("queryid", "12.0")],
        };
        let mut out = vec![0xa5];
        d.encode(&mut out);
        assert_eq!(out, b"\xa5\\final\\\\queryid\\12.0");
        let mut out = vec![];
        ReplyDatagram::default().encode(&mut out);
        assert_eq!(out, b"\\");
        assert_eq!(ReplyDatagram::decode(&out), Ok(ReplyDatagram::default()));
    }

    #[test]
    fn decode_reply_datagram_rejects_zeros() {
        assert_eq!(
            ReplyDatagram::decode(&[0; 512]),
            Err(DecodeError::Truncated("gamespy1 reply"))
        );
        assert_eq!(
            ReplyDatagram::decode(b""),
            Err(DecodeError::Truncated("gamespy1 reply"))
        );
    }

    #[test]
    fn decode_reply_datagram_rejects_non_backslash() {
        assert_eq!(
            ReplyDatagram::decode(b"\x00\\hostname\\x"),
            Err(DecodeError::BadMagic("gamespy1 reply"))
        );
    }

    #[test]
    fn decode_reply_datagram_rejects_oversize() {
        let big = vec![b'\\'; MAX_DATAGRAM_LEN + 1];
        assert_eq!(
            ReplyDatagram::decode(&big),
            Err(DecodeError::TooLarge("gamespy1 reply"))
        );
    }

    #[test]
    fn query_id_forms() {
        assert_eq!(QueryId::parse(b"41.1"), Ok(QueryId { x: 41, y: 1 }));
        assert_eq!(QueryId::parse(b"12"), Ok(QueryId { x: 12, y: 1 }));
        assert_eq!(QueryId::parse(b"12."), Ok(QueryId { x: 12, y: 1 }));
        assert_eq!(QueryId::parse(b"12.0"), Ok(QueryId { x: 12, y: 0 }));
        assert_eq!(
            QueryId::parse(b"x.1"),
            Err(DecodeError::BadNumber("queryid"))
        );
        assert_eq!(QueryId::parse(b""), Err(DecodeError::BadNumber("queryid")));
        assert_eq!(
            QueryId::parse(b"1.99999999999"),
            Err(DecodeError::BadNumber("queryid"))
        );
        let mut out = vec![];
        QueryId { x: 333, y: 1 }.encode(&mut out);
        assert_eq!(out, b"333.1");
    }

    #[test]
    fn pair_new_cleans_value_and_rejects_bad_key() {
        let p = Pair::new("player_0", b"Kee\\/n\x01").unwrap();
        assert_eq!(p.value(), b"Kee/n");
        assert_eq!(p.encoded_len(), 2 + 8 + 5);
        assert_eq!(Pair::new("", "x"), Err(BuildError::Empty("key")));
        assert_eq!(
            Pair::new("a\\b", "x"),
            Err(BuildError::ForbiddenByte("key"))
        );
    }

    /// Keys the tokenizer cannot mistake for value continuations: known keys and per-player
    /// keys (an unknown key after a player name is, by design, read as part of the name).
    fn key_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "hostname",
                "mapname",
                "numplayers",
                "gamever",
                "queryid",
                "final",
                "AdminEMail",
                "Mutator"
            ])
            .prop_map(str::to_owned),
            (
                prop::sample::select(vec!["player", "frags", "ping", "team", "mesh"]),
                0u32..40
            )
                .prop_map(|(f, i)| format!("{f}_{i}")),
        ]
    }

    fn datagram_strategy() -> impl Strategy<Value = ReplyDatagram> {
        prop::collection::vec(
            (
                key_strategy(),
                prop::collection::vec(any::<u8>().prop_filter("clean", |b| !forbidden(*b)), 0..12),
            ),
            0..12,
        )
        .prop_map(|pairs| ReplyDatagram {
            pairs: pairs
                .into_iter()
                .map(|(k, v)| Pair::new(k, v).unwrap())
                .collect(),
        })
    }

    fn request_strategy() -> impl Strategy<Value = Request> {
        let kind = prop_oneof![
            Just(RequestKind::Basic),
            Just(RequestKind::Info),
            Just(RequestKind::Rules),
            Just(RequestKind::Players),
            Just(RequestKind::Status),
            Just(RequestKind::Echo),
            Just(RequestKind::Secure),
            Just(RequestKind::Teams),
            "[a-z_]{1,12}".prop_map(|s| RequestKind::from(s.as_bytes())),
        ];
        let value = prop::option::of("[A-Za-z0-9]{0,10}");
        prop::collection::vec((kind, value), 1..8).prop_map(|items| {
            Request::new(
                items
                    .into_iter()
                    .map(|(k, v)| RequestItem::new(k, v.as_deref().map(str::as_bytes)).unwrap())
                    .collect(),
            )
            .unwrap()
        })
    }

    proptest! {
        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = ReplyDatagram::decode(&bytes);
            let _ = Request::decode(&bytes);
            let _ = Request::serious_sam_kind(&bytes);
            let _ = tokenize(&bytes);
        }

        #[test]
        fn decode_backslash_heavy_bytes_never_panics(bytes in prop::collection::vec(prop::sample::select(vec![b'\\', b'a', b'_', b'0', b'/', 0u8]), 0..64)) {
            if let Ok(d) = ReplyDatagram::decode(&bytes) {
                let _ = d.query_ids();
            }
            let _ = Request::decode(&bytes);
        }

        #[test]
        fn reply_datagram_round_trip(d in datagram_strategy()) {
            let mut out = Vec::new();
            d.encode(&mut out);
            prop_assert_eq!(out.len(), d.pairs.iter().map(Pair::encoded_len).sum::<usize>().max(1));
            prop_assert_eq!(ReplyDatagram::decode(&out), Ok(d));
        }

        #[test]
        fn request_round_trip(r in request_strategy()) {
            let mut out = Vec::new();
            r.encode(&mut out);
            prop_assert_eq!(Request::decode(&out), Ok(r));
        }
    }
}
