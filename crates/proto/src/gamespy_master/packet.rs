//! Every GameSpy master message, both directions: `decode(&[u8])` and infallible
//! `encode(&self, &mut Vec<u8>)`. Byte tests are at the bottom.
//!
//! Values are kept as raw bytes in [`Token`]s (no `\`, so any token can be written back);
//! [`super::decode_text`] turns them into text for display.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::gsmsalg::Enctype;
pub use super::gsmsalg::{CHALLENGE_LEN, Challenge};
use super::{FINAL, MAX_LIST_PREALLOC, key_is, pairs, put_pair};
use crate::model::{ListedServer, ServerList};
use crate::wire::{DecodeError, Reader, put_decimal};

/// A value of a `\key\value` pair: any bytes except `\` (which would end it). May be empty.
///
/// `Debug` shows the bytes as an escaped byte string: `Token(b"ut")`.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(b\"{}\")", self.0.escape_ascii())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key(b\"{}\")", self.as_bytes().escape_ascii())
    }
}

impl Token {
    /// A token from bytes; [`DecodeError::Invalid`] if they contain `\`.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, DecodeError> {
        let bytes = bytes.into();
        if bytes.contains(&b'\\') {
            return Err(DecodeError::Invalid("token contains a backslash"));
        }
        Ok(Self(bytes))
    }

    /// The raw bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes decoded for display ([`super::decode_text`]).
    #[must_use]
    pub fn to_text(&self) -> crate::model::Text {
        super::decode_text(&self.0)
    }

    /// `0`, the location UBrowser and most clients send.
    pub(super) fn default_location() -> Self {
        Self(b"0".to_vec())
    }

    /// A token from bytes already split on `\` (the tokenizer guarantees there is none).
    fn from_split(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }
}

/// A key of a `\key\value` pair: a non-empty [`Token`]. `Debug` shows `Key(b"gamename")`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Token);

impl Key {
    /// A key from bytes; [`DecodeError::Invalid`] if empty or containing `\`.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, DecodeError> {
        let token = Token::new(bytes)?;
        if token.0.is_empty() {
            return Err(DecodeError::Invalid("empty key"));
        }
        Ok(Self(token))
    }

    /// The raw bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// True when the key equals `name` after ASCII lower-casing (how masters compare
    /// gamenames and keys).
    #[must_use]
    pub fn is(&self, name: &str) -> bool {
        key_is(self.as_bytes(), name)
    }

    /// A key from split bytes, or `ctx` as [`DecodeError::Invalid`] when empty.
    fn from_split(bytes: &[u8], ctx: &'static str) -> Result<Self, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Invalid(ctx));
        }
        Ok(Self(Token::from_split(bytes)))
    }

    /// A key from a known-good constant.
    pub(crate) fn constant(name: &'static str) -> Self {
        Self(Token(name.as_bytes().to_vec()))
    }
}

// ---------------------------------------------------------------------------------------
// UDP: heartbeats, challenges, answers, the master's own query face
// ---------------------------------------------------------------------------------------

/// `\heartbeat\<query port>\gamename\<game>[\key\value…]`, server → master, UDP 27900 (§2).
///
/// `extra` keeps every further pair in order, including `\statechanged` (a key with no value,
/// Serious Sam) and `\gamever\469` (UT99 to Epic). The port is the **query** port, not the
/// datagram's source port; 0 is kept (masters substitute a per-game default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The query port the server announces.
    pub query_port: u16,
    /// The gamename as sent (compare with [`Key::is`], masters lower-case it).
    pub gamename: Key,
    /// Further pairs in order. When the last one has an empty value it is written as `\key`
    /// with no trailing `\`, as Serious Sam writes `\statechanged`.
    pub extra: Vec<(Key, Token)>,
}

impl Heartbeat {
    /// A plain heartbeat with no extra keys.
    #[must_use]
    pub fn new(query_port: u16, gamename: Key) -> Self {
        Self {
            query_port,
            gamename,
            extra: Vec::new(),
        }
    }

    /// The same heartbeat with `\statechanged` appended (Serious Sam: a player joined, or the
    /// server is stopping; the two cannot be told apart).
    #[must_use]
    pub fn with_state_changed(mut self) -> Self {
        self.extra
            .push((Key::constant("statechanged"), Token::default()));
        self
    }

    /// True when the heartbeat carries a `statechanged` key (with any value).
    #[must_use]
    pub fn state_changed(&self) -> bool {
        self.extra.iter().any(|(k, _)| k.is("statechanged"))
    }

    /// Decode one heartbeat datagram. The first pair must be `heartbeat` (else
    /// [`DecodeError::BadMagic`], which also covers empty and non-`\` datagrams); a
    /// `gamename` must follow somewhere.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        if datagram.len() > super::MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("heartbeat"));
        }
        let p = pairs(datagram, "heartbeat")?;
        let mut it = p.into_iter();
        let port = match it.next() {
            Some((k, v)) if key_is(k, "heartbeat") => parse_port(v, "heartbeat port")?,
            _ => return Err(DecodeError::BadMagic("heartbeat")),
        };
        let mut gamename = None;
        let mut extra = Vec::new();
        for (k, v) in it {
            if gamename.is_none() && key_is(k, "gamename") {
                gamename = Some(Key::from_split(v, "heartbeat gamename")?);
            } else if !k.is_empty() {
                extra.push((Key::from_split(k, "heartbeat key")?, Token::from_split(v)));
            } else if !v.is_empty() {
                return Err(DecodeError::Invalid("heartbeat key"));
            }
        }
        let gamename = gamename.ok_or(DecodeError::Invalid("heartbeat without gamename"))?;
        Ok(Self {
            query_port: port,
            gamename,
            extra,
        })
    }

    /// Append the datagram.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\\heartbeat\\");
        put_decimal(out, i64::from(self.query_port));
        put_pair(out, b"gamename", self.gamename.as_bytes());
        let n = self.extra.len();
        for (i, (k, v)) in self.extra.iter().enumerate() {
            if i + 1 == n && v.as_bytes().is_empty() {
                out.push(b'\\');
                out.extend_from_slice(k.as_bytes());
            } else {
                put_pair(out, k.as_bytes(), v.as_bytes());
            }
        }
    }
}

/// `\secure\<challenge>`, master → game server (UDP) to verify a heartbeat (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secure {
    /// The challenge the server must hash with its game key.
    pub challenge: Challenge,
}

impl Secure {
    /// Decode exactly `\secure\XXXXXX`.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        match pairs(datagram, "secure")?.as_slice() {
            [(k, v)] if key_is(k, "secure") => Ok(Self {
                challenge: Challenge::new(v)?,
            }),
            [(k, _)] if key_is(k, "secure") => Err(DecodeError::Invalid("secure")),
            [(k, _), ..] if key_is(k, "secure") => Err(DecodeError::Invalid("secure trailer")),
            _ => Err(DecodeError::BadMagic("secure")),
        }
    }

    /// Append `\secure\XXXXXX` (14 bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_pair(out, b"secure", self.challenge.as_bytes());
    }
}

/// What follows the validate string in a server's answer (spec §12 quirk 11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trailer {
    /// Nothing: `\validate\V`.
    None,
    /// `\validate\V\final\`.
    Final,
    /// `\validate\V\final\\queryid\<id>` (UT uplinks, the Classics Patch).
    FinalQueryid(Token),
    /// `\validate\V\queryid\<id>\final\` (333networks uplinks).
    QueryidFinal(Token),
}

/// `\validate\<V>` with its trailer, game server → master (UDP), answering [`Secure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateAnswer {
    /// The validate string as sent (8 characters from honest servers).
    pub validate: Token,
    /// The trailer exactly as sent.
    pub trailer: Trailer,
}

impl ValidateAnswer {
    /// Decode a validate answer; any pair other than the trailer forms of [`Trailer`] is
    /// [`DecodeError::Invalid`].
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        let p = pairs(datagram, "validate answer")?;
        let (first, rest) = p
            .split_first()
            .ok_or(DecodeError::BadMagic("validate answer"))?;
        if !key_is(first.0, "validate") {
            return Err(DecodeError::BadMagic("validate answer"));
        }
        let trailer = match rest {
            [] => Trailer::None,
            [(f, b"")] if key_is(f, "final") => Trailer::Final,
            [(f, b""), (q, id)] if key_is(f, "final") && key_is(q, "queryid") => {
                Trailer::FinalQueryid(Token::from_split(id))
            }
            [(q, id), (f, b"")] if key_is(f, "final") && key_is(q, "queryid") => {
                Trailer::QueryidFinal(Token::from_split(id))
            }
            _ => return Err(DecodeError::Invalid("validate answer trailer")),
        };
        Ok(Self {
            validate: Token::from_split(first.1),
            trailer,
        })
    }

    /// Append the answer exactly in its trailer's style.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_pair(out, b"validate", self.validate.as_bytes());
        match &self.trailer {
            Trailer::None => {}
            Trailer::Final => out.extend_from_slice(FINAL),
            Trailer::FinalQueryid(id) => {
                out.extend_from_slice(FINAL);
                put_pair(out, b"queryid", id.as_bytes());
            }
            Trailer::QueryidFinal(id) => {
                put_pair(out, b"queryid", id.as_bytes());
                out.extend_from_slice(FINAL);
            }
        }
    }
}

/// A query sent to a master's own beacon port (§9), or `\secure\` to a peer master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterQuery {
    /// `\basic\`.
    Basic,
    /// `\info\`.
    Info,
    /// `\rules\`.
    Rules,
    /// `\status\`.
    Status,
    /// `\echo\X` (Muster never answers it: a spoofed source could start an echo loop).
    Echo(Token),
    /// `\secure\C`.
    Secure(Challenge),
    /// Any other first key, kept so it can be counted.
    Unknown(Key),
}

impl MasterQuery {
    /// Decode a query datagram by its first key (later pairs are ignored: masters answer the
    /// first request only).
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        if datagram.len() > super::MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("master query"));
        }
        let p = pairs(datagram, "master query")?;
        let Some(&(k, v)) = p.first() else {
            return Err(DecodeError::BadMagic("master query"));
        };
        Ok(if key_is(k, "basic") {
            Self::Basic
        } else if key_is(k, "info") {
            Self::Info
        } else if key_is(k, "rules") {
            Self::Rules
        } else if key_is(k, "status") {
            Self::Status
        } else if key_is(k, "echo") {
            Self::Echo(Token::from_split(v))
        } else if key_is(k, "secure") {
            Self::Secure(Challenge::new(v)?)
        } else {
            Self::Unknown(Key::from_split(k, "master query key")?)
        })
    }

    /// Append the request (`\basic\`, `\echo\X`, `\secure\C`, …).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (k, v): (&[u8], &[u8]) = match self {
            Self::Basic => (b"basic", b""),
            Self::Info => (b"info", b""),
            Self::Rules => (b"rules", b""),
            Self::Status => (b"status", b""),
            Self::Echo(t) => (b"echo", t.as_bytes()),
            Self::Secure(c) => (b"secure", c.as_bytes()),
            Self::Unknown(k) => (k.as_bytes(), b""),
        };
        put_pair(out, k, v);
    }
}

/// A master's reply on its beacon port (§9): sections of pairs, each closed by
/// `\queryid\<query_id>.<n>` (n = 1, 2, … within the reply), then `\final\`, in one datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryReply {
    /// The `N` of `queryid N.k`.
    pub query_id: u32,
    /// The sections in order (each `\queryid\` closes one).
    pub sections: Vec<Vec<(Key, Token)>>,
}

impl QueryReply {
    /// Decode a reply. Pairs after the last `queryid` are a section without an id only if
    /// followed by nothing but `\final\`; a missing `\final\` is [`DecodeError::Incomplete`];
    /// a `queryid` whose `N` differs or whose `k` is out of order is [`DecodeError::Invalid`].
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        let p = pairs(datagram, "query reply")?;
        let Some((last, body)) = p.split_last() else {
            return Err(DecodeError::BadMagic("query reply"));
        };
        if !(key_is(last.0, "final") && last.1.is_empty()) {
            return Err(DecodeError::Incomplete("query reply"));
        }
        let mut query_id = None;
        let mut sections = Vec::new();
        let mut current = Vec::new();
        for &(k, v) in body {
            if key_is(k, "queryid") {
                let (n, part) = parse_query_id(v)?;
                if *query_id.get_or_insert(n) != n
                    || usize::try_from(part).ok() != Some(sections.len() + 1)
                {
                    return Err(DecodeError::Invalid("queryid sequence"));
                }
                sections.push(std::mem::take(&mut current));
            } else {
                current.push((Key::from_split(k, "query reply key")?, Token::from_split(v)));
            }
        }
        if !current.is_empty() {
            return Err(DecodeError::Invalid("section without queryid"));
        }
        let query_id = query_id.ok_or(DecodeError::Invalid("reply without queryid"))?;
        Ok(Self { query_id, sections })
    }

    /// Append the reply: every section with its `\queryid\N.k`, then `\final\`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (i, section) in self.sections.iter().enumerate() {
            for (k, v) in section {
                put_pair(out, k.as_bytes(), v.as_bytes());
            }
            out.extend_from_slice(b"\\queryid\\");
            put_decimal(out, i64::from(self.query_id));
            out.push(b'.');
            put_decimal(out, i64::try_from(i + 1).unwrap_or(i64::MAX));
        }
        out.extend_from_slice(FINAL);
    }
}

// ---------------------------------------------------------------------------------------
// TCP 28900: greeting, client messages, list replies, sync
// ---------------------------------------------------------------------------------------

/// `\basic\\secure\XXXXXX`, the list server's greeting (§5.2), 21 bytes, no `\final\`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Greeting {
    /// The challenge the client hashes with the key of the game it authenticates as.
    pub challenge: Challenge,
}

impl Greeting {
    /// Decode a greeting; a trailing `\final\` (the 333networks Perl master) is accepted and
    /// dropped (§12 quirk 1).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        match pairs(bytes, "greeting")?.as_slice() {
            [(b, b""), (s, c)] | [(b, b""), (s, c), (b"final", b"")]
                if key_is(b, "basic") && key_is(s, "secure") =>
            {
                Ok(Self {
                    challenge: Challenge::new(c)?,
                })
            }
            _ => Err(DecodeError::BadMagic("greeting")),
        }
    }

    /// Append the 21-byte greeting exactly as Qt5, OpenSpy and GameSpy send it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(GREETING_PREFIX);
        out.extend_from_slice(self.challenge.as_bytes());
    }
}

/// A client's authentication message (§5.3/§5.4): the pairs in their order, without the
/// closing `\final\`.
///
/// Real clients order the keys differently (UBrowser: gamename, location, validate; Serious
/// Sam: gamename, enctype, validate; qstat: gamename, gamever, location, validate), so the
/// pairs are kept as sent and the accessors pick fields out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// Every pair in order (`queryid` pairs included, as sent).
    pub fields: Vec<(Key, Token)>,
}

impl ClientAuth {
    /// UBrowser's form: `\gamename\<g>\location\<l>\validate\<V>\final\`.
    #[must_use]
    pub fn ubrowser(gamename: Key, location: Token, validate: Token) -> Self {
        Self {
            fields: vec![
                (Key::constant("gamename"), gamename.0),
                (Key::constant("location"), location),
                (Key::constant("validate"), validate),
            ],
        }
    }

    /// Serious Sam 1.10's form: `\gamename\<g>\enctype\0\validate\<V>\final\`.
    #[must_use]
    pub fn serious_sam(gamename: Key, validate: Token) -> Self {
        Self {
            fields: vec![
                (Key::constant("gamename"), gamename.0),
                (Key::constant("enctype"), Token(b"0".to_vec())),
                (Key::constant("validate"), validate),
            ],
        }
    }

    /// The first value of `key` (ASCII case-insensitive).
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Token> {
        self.fields.iter().find(|(k, _)| k.is(key)).map(|(_, v)| v)
    }

    /// The gamename the client authenticates as (the key for its validate).
    #[must_use]
    pub fn gamename(&self) -> Option<&Token> {
        self.get("gamename")
    }

    /// The validate string.
    #[must_use]
    pub fn validate(&self) -> Option<&Token> {
        self.get("validate")
    }

    /// The enctype, 0 when absent; [`DecodeError::BadNumber`] when not a number below 256.
    pub fn enctype(&self) -> Result<Enctype, DecodeError> {
        self.get("enctype")
            .map_or(Ok(Enctype::Zero), |v| Enctype::parse(v.as_bytes()))
    }

    /// Decode one message ending in `\final\` (without a `\final\` it is
    /// [`DecodeError::Incomplete`]); it must name `gamename` first or carry a `validate`.
    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        match ClientMessage::decode(msg)? {
            ClientMessage::Auth(a) => Ok(a),
            _ => Err(DecodeError::Invalid("not an authentication message")),
        }
    }

    /// Append the pairs and `\final\`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (k, v) in &self.fields {
            put_pair(out, k.as_bytes(), v.as_bytes());
        }
        out.extend_from_slice(FINAL);
    }
}

/// The list mode of `\list\<mode>` (§5.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListMode {
    /// `\list\\`: the text form.
    Text,
    /// `\list\cmp`: 6-byte records.
    Cmp,
    /// Anything else (OpenSpy's `info2`, `groups`), answered with text (§12 quirk 6).
    Unknown(Token),
}

impl ListMode {
    /// The reply form a master uses for this mode.
    #[must_use]
    pub fn reply_form(&self) -> ListForm {
        match self {
            Self::Cmp => ListForm::Cmp,
            Self::Text | Self::Unknown(_) => ListForm::Text,
        }
    }

    fn from_value(v: &[u8]) -> Self {
        if v.is_empty() {
            Self::Text
        } else if v == b"cmp" {
            Self::Cmp
        } else {
            Self::Unknown(Token::from_split(v))
        }
    }

    fn value(&self) -> &[u8] {
        match self {
            Self::Text => b"",
            Self::Cmp => b"cmp",
            Self::Unknown(t) => t.as_bytes(),
        }
    }
}

/// `[\queryid\X]\list\<mode>[\gamename\<g>][\key\value…]\final\`, the client's list request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// A leading `\queryid\X` (Serious Sam sends `1.1` after its first `\final\`).
    pub queryid: Option<Token>,
    /// Text, cmp or other.
    pub mode: ListMode,
    /// The game whose list is wanted; `None` means the authenticated gamename.
    pub gamename: Option<Key>,
    /// Further pairs in order (Serious Sam's `\gamever\1.05`, OpenSpy's `\where\…`).
    pub extra: Vec<(Key, Token)>,
}

impl ListRequest {
    /// A plain request: `\list\<mode>\gamename\<g>\final\` (UBrowser and qstat for text).
    #[must_use]
    pub fn new(mode: ListMode, gamename: Key) -> Self {
        Self {
            queryid: None,
            mode,
            gamename: Some(gamename),
            extra: Vec::new(),
        }
    }

    /// Decode one message ending in `\final\`.
    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        match ClientMessage::decode(msg)? {
            ClientMessage::List(l) => Ok(l),
            _ => Err(DecodeError::Invalid("not a list request")),
        }
    }

    /// Append the request and `\final\`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(q) = &self.queryid {
            put_pair(out, b"queryid", q.as_bytes());
        }
        put_pair(out, b"list", self.mode.value());
        if let Some(g) = &self.gamename {
            put_pair(out, b"gamename", g.as_bytes());
        }
        for (k, v) in &self.extra {
            put_pair(out, k.as_bytes(), v.as_bytes());
        }
        out.extend_from_slice(FINAL);
    }
}

/// Which games a sync asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncGames {
    /// `all`.
    All,
    /// Space-separated gamenames (none may contain a space).
    Games(Vec<Key>),
}

/// `\sync\<games>[\msid\<uuid>][\final\]`, master → master after authenticating (§7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    /// The games wanted.
    pub games: SyncGames,
    /// The requester's identity (Qt5), for the self-sync guard.
    pub msid: Option<Token>,
    /// Whether `\final\` is written (Perl and Muster: yes; Qt5: no).
    pub terminated: bool,
}

impl SyncRequest {
    /// A sync for `games`; [`DecodeError::Invalid`] if a gamename contains a space.
    pub fn new(
        games: SyncGames,
        msid: Option<Token>,
        terminated: bool,
    ) -> Result<Self, DecodeError> {
        if let SyncGames::Games(g) = &games
            && (g.is_empty() || g.iter().any(|k| k.as_bytes().contains(&b' ')))
        {
            return Err(DecodeError::Invalid("sync gamename"));
        }
        Ok(Self {
            games,
            msid,
            terminated,
        })
    }

    /// Decode a sync request, with or without `\final\` (§12 quirk 14).
    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        match ClientMessage::decode_unterminated(msg)? {
            ClientMessage::Sync(s) => Ok(s),
            _ => Err(DecodeError::Invalid("not a sync request")),
        }
    }

    /// Append the request.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\\sync\\");
        match &self.games {
            SyncGames::All => out.extend_from_slice(b"all"),
            SyncGames::Games(g) => {
                for (i, k) in g.iter().enumerate() {
                    if i > 0 {
                        out.push(b' ');
                    }
                    out.extend_from_slice(k.as_bytes());
                }
            }
        }
        if let Some(m) = &self.msid {
            put_pair(out, b"msid", m.as_bytes());
        }
        if self.terminated {
            out.extend_from_slice(FINAL);
        }
    }

    fn from_pairs(p: &[(&[u8], &[u8])], terminated: bool) -> Result<Self, DecodeError> {
        let mut games = None;
        let mut msid = None;
        for &(k, v) in p {
            if key_is(k, "sync") && games.is_none() {
                games = Some(if v == b"all" {
                    SyncGames::All
                } else {
                    let g = v
                        .split(|&b| b == b' ')
                        .filter(|g| !g.is_empty())
                        .map(|g| Key::from_split(g, "sync gamename"))
                        .collect::<Result<Vec<_>, _>>()?;
                    SyncGames::Games(g)
                });
            } else if key_is(k, "msid") && msid.is_none() {
                msid = Some(Token::from_split(v));
            }
        }
        let games = games.ok_or(DecodeError::Invalid("sync request"))?;
        Self::new(games, msid, terminated)
    }
}

/// One message a list client (or a syncing master) sends, classified per §5.4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// First key `gamename`, or any `validate`.
    Auth(ClientAuth),
    /// First key `list` (after a leading `queryid`).
    List(ListRequest),
    /// First key `sync`.
    Sync(SyncRequest),
    /// Anything else (pairs kept, without `\final\`); masters ignore it.
    Other(Vec<(Key, Token)>),
}

impl ClientMessage {
    /// Decode one message that ends in `\final\` ([`DecodeError::Incomplete`] otherwise).
    /// Leading stray `\basic\` pairs are dropped (OpenSpy tolerates one, §5.4).
    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        if !msg.ends_with(FINAL) {
            return Err(DecodeError::Incomplete("client message"));
        }
        Self::decode_unterminated(msg)
    }

    /// Decode a message with or without its closing `\final\` (Qt5 sync requests have none).
    pub fn decode_unterminated(msg: &[u8]) -> Result<Self, DecodeError> {
        if msg.len() > super::MAX_CLIENT_REQUEST {
            return Err(DecodeError::TooLarge("client message"));
        }
        let mut p = pairs(msg, "client message")?;
        let terminated = matches!(p.last(), Some((k, b"")) if key_is(k, "final"));
        if terminated {
            p.pop();
        }
        let strays = p
            .iter()
            .take_while(|(k, v)| key_is(k, "basic") && v.is_empty())
            .count();
        p.drain(..strays);
        let lead_queryid = match p.first() {
            Some((k, v)) if key_is(k, "queryid") => Some(Token::from_split(v)),
            _ => None,
        };
        let body = p
            .get(usize::from(lead_queryid.is_some())..)
            .unwrap_or_default();
        let first = body.first().map(|(k, _)| *k).unwrap_or_default();
        if key_is(first, "list") {
            let mut gamename = None;
            let mut extra = Vec::new();
            let mode = ListMode::from_value(body.first().map(|(_, v)| *v).unwrap_or_default());
            for &(k, v) in body.get(1..).unwrap_or_default() {
                if gamename.is_none() && key_is(k, "gamename") {
                    gamename = Some(Key::from_split(v, "list gamename")?);
                } else {
                    extra.push((
                        Key::from_split(k, "list request key")?,
                        Token::from_split(v),
                    ));
                }
            }
            return Ok(Self::List(ListRequest {
                queryid: lead_queryid,
                mode,
                gamename,
                extra,
            }));
        }
        if key_is(first, "sync") {
            return SyncRequest::from_pairs(body, terminated).map(Self::Sync);
        }
        let fields = p
            .iter()
            .map(|&(k, v)| {
                Ok((
                    Key::from_split(k, "client message key")?,
                    Token::from_split(v),
                ))
            })
            .collect::<Result<Vec<_>, DecodeError>>()?;
        if key_is(first, "gamename") || p.iter().any(|(k, _)| key_is(k, "validate")) {
            Ok(Self::Auth(ClientAuth { fields }))
        } else {
            Ok(Self::Other(fields))
        }
    }

    /// Append the message (sync requests as their `terminated` flag says, all others with
    /// `\final\`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Auth(a) => a.encode(out),
            Self::List(l) => l.encode(out),
            Self::Sync(s) => s.encode(out),
            Self::Other(fields) => {
                for (k, v) in fields {
                    put_pair(out, k.as_bytes(), v.as_bytes());
                }
                out.extend_from_slice(FINAL);
            }
        }
    }
}

/// The two list reply forms (§5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListForm {
    /// `\ip\A.B.C.D:PORT` entries.
    Text,
    /// 6-byte records: IPv4 in network order, port big-endian.
    Cmp,
}

/// A list reply: the listed servers' query addresses, in the master's order, then `\final\`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListReply {
    /// The form it is (or will be) written in.
    pub form: ListForm,
    /// Query addresses (the heartbeat ports), as sent; duplicates kept.
    pub servers: Vec<SocketAddrV4>,
}

impl ListReply {
    /// Decode a complete reply of the given form; the form cannot be told from the bytes.
    ///
    /// Text: the value of every `ip` key is split at its last `:`; other keys are ignored; the
    /// last pair must be `\final\` ([`DecodeError::Incomplete`] otherwise). Cmp: the data
    /// must end with `\final\` and the rest be whole 6-byte records, counted from the total
    /// length, so a record whose bytes spell `\final\` is read correctly (§12 quirk 12).
    pub fn decode(bytes: &[u8], form: ListForm) -> Result<Self, DecodeError> {
        if bytes.len() > super::MAX_LIST_BYTES {
            return Err(DecodeError::TooLarge("list reply"));
        }
        let servers = match form {
            ListForm::Text => {
                let (servers, terminated) = parse_text_list(bytes)?;
                if !terminated {
                    return Err(DecodeError::Incomplete("text list"));
                }
                servers
            }
            ListForm::Cmp => {
                let body = bytes
                    .strip_suffix(FINAL)
                    .ok_or(DecodeError::Incomplete("cmp list"))?;
                if body.len() % CMP_RECORD_LEN != 0 {
                    return Err(DecodeError::Invalid("cmp list length"));
                }
                parse_cmp_records(body)
            }
        };
        Ok(Self { form, servers })
    }

    /// Append the reply exactly as §5.5 gives it, `\final\` included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self.form {
            ListForm::Text => {
                for s in &self.servers {
                    out.extend_from_slice(b"\\ip\\");
                    put_addr(out, *s);
                }
            }
            ListForm::Cmp => {
                for s in &self.servers {
                    out.extend_from_slice(&s.ip().octets());
                    out.extend_from_slice(&s.port().to_be_bytes());
                }
            }
        }
        out.extend_from_slice(FINAL);
    }

    /// The reply as a [`ServerList`], duplicates removed. GameSpy lists carry only the query
    /// port, so `address` and `query_address` are both the listed address.
    #[must_use]
    pub fn to_server_list(&self) -> ServerList {
        to_server_list(&self.servers)
    }
}

/// `\<game>\A.B.C.D:PORT A.B.C.D:PORT \<game>\…\final\`, a sync reply (§7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReply {
    /// Per game, the query addresses in order (a game may have none: Qt5 lists empty games).
    pub games: Vec<(Key, Vec<SocketAddrV4>)>,
}

impl SyncReply {
    /// Decode a complete reply (ending in `\final\`, [`DecodeError::Incomplete`] otherwise).
    /// Entries are separated by runs of spaces; trailing spaces are fine (§12 quirk 14).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > super::MAX_LIST_BYTES {
            return Err(DecodeError::TooLarge("sync reply"));
        }
        let p = pairs_unbounded(bytes, "sync reply")?;
        let Some((last, body)) = p.split_last() else {
            return Err(DecodeError::BadMagic("sync reply"));
        };
        if !(key_is(last.0, "final") && last.1.is_empty()) {
            return Err(DecodeError::Incomplete("sync reply"));
        }
        let mut games = Vec::new();
        for &(k, v) in body {
            let addrs = v
                .split(|&b| b == b' ')
                .filter(|a| !a.is_empty())
                .map(|a| parse_addr(a, "sync entry"))
                .collect::<Result<Vec<_>, _>>()?;
            games.push((Key::from_split(k, "sync gamename")?, addrs));
        }
        Ok(Self { games })
    }

    /// Append the reply as Qt5 writes it: every address followed by one space.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (g, addrs) in &self.games {
            out.push(b'\\');
            out.extend_from_slice(g.as_bytes());
            out.push(b'\\');
            for a in addrs {
                put_addr(out, *a);
                out.push(b' ');
            }
        }
        out.extend_from_slice(FINAL);
    }
}

/// Parse a text list: the `ip` entries and whether the last pair is `\final\`.
pub(super) fn parse_text_list(bytes: &[u8]) -> Result<(Vec<SocketAddrV4>, bool), DecodeError> {
    let p = pairs_unbounded(bytes, "text list")?;
    let terminated = matches!(p.last(), Some((k, b"")) if key_is(k, "final"));
    let mut servers = Vec::with_capacity(p.len().min(MAX_LIST_PREALLOC));
    for (k, v) in p {
        if key_is(k, "ip") {
            servers.push(parse_addr(v, "text list entry")?);
        }
    }
    Ok((servers, terminated))
}

/// Whole 6-byte records of `body` (a partial tail record is ignored).
pub(super) fn parse_cmp_records(body: &[u8]) -> Vec<SocketAddrV4> {
    let mut out = Vec::with_capacity((body.len() / CMP_RECORD_LEN).min(MAX_LIST_PREALLOC));
    let mut r = Reader::new(body);
    while let Ok(rec) = r.array::<CMP_RECORD_LEN>("cmp record") {
        let [a, b, c, d, p0, p1] = rec;
        out.push(SocketAddrV4::new(
            Ipv4Addr::new(a, b, c, d),
            u16::from_be_bytes([p0, p1]),
        ));
    }
    out
}

/// The servers as a [`ServerList`], duplicates removed, order kept.
pub(super) fn to_server_list(servers: &[SocketAddrV4]) -> ServerList {
    let mut seen = std::collections::HashSet::new();
    let servers = servers
        .iter()
        .filter(|a| seen.insert(**a))
        .map(|a| ListedServer {
            address: SocketAddr::V4(*a),
            query_address: Some(SocketAddr::V4(*a)),
        })
        .collect();
    ServerList {
        servers,
        partial: None,
    }
}

/// Plain pairing for lists, bounded by [`super::MAX_LIST_BYTES`] rather than
/// [`super::MAX_PAIRS`].
fn pairs_unbounded<'a>(msg: &'a [u8], ctx: &'static str) -> Result<super::Pairs<'a>, DecodeError> {
    super::pairs_capped(msg, usize::MAX, ctx)
}

/// `A.B.C.D:PORT`, split at the last `:`.
fn parse_addr(v: &[u8], ctx: &'static str) -> Result<SocketAddrV4, DecodeError> {
    let colon = v
        .iter()
        .rposition(|&b| b == b':')
        .ok_or(DecodeError::Invalid(ctx))?;
    let (ip, port) = v.split_at(colon);
    let ip: Ipv4Addr = std::str::from_utf8(ip)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(DecodeError::Invalid(ctx))?;
    let port = parse_port(port.get(1..).unwrap_or_default(), ctx)?;
    Ok(SocketAddrV4::new(ip, port))
}

/// A decimal port 0..=65535 (digits only).
fn parse_port(v: &[u8], ctx: &'static str) -> Result<u16, DecodeError> {
    if v.is_empty() || v.len() > 5 || !v.iter().all(u8::is_ascii_digit) {
        return Err(DecodeError::BadNumber(ctx));
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(DecodeError::BadNumber(ctx))
}

/// `N.k` of a `queryid`.
fn parse_query_id(v: &[u8]) -> Result<(u32, u32), DecodeError> {
    let s = std::str::from_utf8(v).map_err(|_| DecodeError::BadNumber("queryid"))?;
    let (n, k) = s.split_once('.').ok_or(DecodeError::BadNumber("queryid"))?;
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) || !digits(k) {
        return Err(DecodeError::BadNumber("queryid"));
    }
    match (n.parse(), k.parse()) {
        (Ok(n), Ok(k)) => Ok((n, k)),
        _ => Err(DecodeError::BadNumber("queryid")),
    }
}

fn put_addr(out: &mut Vec<u8>, a: SocketAddrV4) {
    out.extend_from_slice(a.ip().to_string().as_bytes());
    out.push(b':');
    put_decimal(out, i64::from(a.port()));
}

/// One `cmp` record: 4 address bytes and a big-endian port (§5.5).
pub const CMP_RECORD_LEN: usize = 6;
/// The greeting before its challenge: `\basic\\secure\` (15 bytes, §5.2).
pub const GREETING_PREFIX: &[u8] = b"\\basic\\\\secure\\";
/// The whole greeting's length (§5.2).
pub const GREETING_LEN: usize = GREETING_PREFIX.len() + CHALLENGE_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }
    fn tok(s: &str) -> Token {
        Token::new(s).unwrap()
    }
    fn ch(s: &str) -> Challenge {
        Challenge::new(s.as_bytes()).unwrap()
    }
    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }
    /// Encode into a buffer pre-filled with a marker so a skipped or stray byte shows.
    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = vec![0xa5];
        f(&mut out);
        assert_eq!(out.first(), Some(&0xa5));
        out.split_off(1)
    }

    const SS_HEARTBEAT: &[u8] = b"\\heartbeat\\25601\\gamename\\serioussamse";
    const SS_HEARTBEAT_SC: &[u8] = b"\\heartbeat\\25601\\gamename\\serioussamse\\statechanged";

    #[test]
    fn decode_heartbeat() {
        let h = Heartbeat::decode(SS_HEARTBEAT).unwrap();
        assert_eq!(h, Heartbeat::new(25601, key("serioussamse")));
        assert!(!h.state_changed());
        let h = Heartbeat::decode(b"\\heartbeat\\7778\\gamename\\ut\\gamever\\469").unwrap();
        assert_eq!(h.query_port, 7778);
        assert_eq!(h.extra, vec![(key("gamever"), tok("469"))]);
    }

    #[test]
    fn encode_heartbeat() {
        let h = Heartbeat::new(25601, key("serioussamse"));
        assert_eq!(enc(|o| h.encode(o)), SS_HEARTBEAT);
        assert_eq!(SS_HEARTBEAT.len(), 38);
        let h = h.with_state_changed();
        assert_eq!(enc(|o| h.encode(o)), SS_HEARTBEAT_SC);
        assert_eq!(SS_HEARTBEAT_SC.len(), 51);
    }

    #[test]
    fn decode_heartbeat_statechanged() {
        let h = Heartbeat::decode(SS_HEARTBEAT_SC).unwrap();
        assert!(h.state_changed());
        assert_eq!(h.gamename, key("serioussamse"));
    }

    #[test]
    fn decode_heartbeat_rejects_empty_and_non_backslash() {
        assert_eq!(
            Heartbeat::decode(b""),
            Err(DecodeError::BadMagic("heartbeat"))
        );
        assert_eq!(
            Heartbeat::decode(b"heartbeat\\1"),
            Err(DecodeError::BadMagic("heartbeat"))
        );
        assert_eq!(
            Heartbeat::decode(b"\\status\\"),
            Err(DecodeError::BadMagic("heartbeat"))
        );
    }

    #[test]
    fn decode_heartbeat_rejects_bad_port_and_missing_gamename() {
        assert_eq!(
            Heartbeat::decode(b"\\heartbeat\\77x\\gamename\\ut"),
            Err(DecodeError::BadNumber("heartbeat port"))
        );
        assert_eq!(
            Heartbeat::decode(b"\\heartbeat\\65536\\gamename\\ut"),
            Err(DecodeError::BadNumber("heartbeat port"))
        );
        assert_eq!(
            Heartbeat::decode(b"\\heartbeat\\7778"),
            Err(DecodeError::Invalid("heartbeat without gamename"))
        );
        assert_eq!(
            Heartbeat::decode(b"\\heartbeat\\7778\\gamename\\"),
            Err(DecodeError::Invalid("heartbeat gamename"))
        );
    }

    #[test]
    fn decode_heartbeat_rejects_oversized() {
        let mut d = b"\\heartbeat\\7778\\gamename\\ut\\x\\".to_vec();
        d.resize(super::super::MAX_DATAGRAM + 1, b'a');
        assert_eq!(
            Heartbeat::decode(&d),
            Err(DecodeError::TooLarge("heartbeat"))
        );
    }

    #[test]
    fn decode_secure() {
        let s = Secure::decode(b"\\secure\\ABCDEF").unwrap();
        assert_eq!(s.challenge, ch("ABCDEF"));
    }

    #[test]
    fn encode_secure() {
        let s = Secure {
            challenge: ch("ABCDEF"),
        };
        assert_eq!(
            enc(|o| s.encode(o)),
            [
                0x5c, 0x73, 0x65, 0x63, 0x75, 0x72, 0x65, 0x5c, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46
            ]
        );
    }

    #[test]
    fn decode_secure_rejects_bad_challenge() {
        assert_eq!(
            Secure::decode(b"\\secure\\ABCDE"),
            Err(DecodeError::Invalid("challenge length"))
        );
        assert_eq!(
            Secure::decode(b"\\secure\\ABC DE"),
            Err(DecodeError::Invalid("challenge character"))
        );
        assert_eq!(
            Secure::decode(b"\\secure\\ABCDEF\\x\\y"),
            Err(DecodeError::Invalid("secure trailer"))
        );
        assert_eq!(
            Secure::decode(b"\\basic\\"),
            Err(DecodeError::BadMagic("secure"))
        );
    }

    #[test]
    fn challenge_from_random_is_upper_case() {
        let c = Challenge::from_random([0, 25, 26, 255, 100, 51]);
        assert_eq!(c.as_bytes(), b"AZAVWZ");
    }

    #[test]
    fn decode_validate_answer() {
        let a = ValidateAnswer::decode(b"\\validate\\5OOIQ5Ha\\final\\\\queryid\\1.1").unwrap();
        assert_eq!(a.validate, tok("5OOIQ5Ha"));
        assert_eq!(a.trailer, Trailer::FinalQueryid(tok("1.1")));
    }

    #[test]
    fn encode_validate_answer() {
        for (trailer, bytes) in [
            (
                Trailer::FinalQueryid(tok("1.1")),
                &b"\\validate\\5OOIQ5Ha\\final\\\\queryid\\1.1"[..],
            ),
            (
                Trailer::QueryidFinal(tok("7.1")),
                b"\\validate\\5OOIQ5Ha\\queryid\\7.1\\final\\",
            ),
            (Trailer::Final, b"\\validate\\5OOIQ5Ha\\final\\"),
            (Trailer::None, b"\\validate\\5OOIQ5Ha"),
        ] {
            let a = ValidateAnswer {
                validate: tok("5OOIQ5Ha"),
                trailer,
            };
            assert_eq!(enc(|o| a.encode(o)), bytes);
            assert_eq!(ValidateAnswer::decode(bytes), Ok(a));
        }
    }

    #[test]
    fn decode_validate_answer_rejects_other_trailers() {
        assert_eq!(
            ValidateAnswer::decode(b"\\validate\\x\\hostname\\y"),
            Err(DecodeError::Invalid("validate answer trailer"))
        );
        assert_eq!(
            ValidateAnswer::decode(b"\\secure\\ABCDEF"),
            Err(DecodeError::BadMagic("validate answer"))
        );
    }

    #[test]
    fn decode_master_query() {
        for (bytes, q) in [
            (&b"\\basic\\"[..], MasterQuery::Basic),
            (b"\\info\\", MasterQuery::Info),
            (b"\\rules\\", MasterQuery::Rules),
            (b"\\status\\", MasterQuery::Status),
            (b"\\echo\\hello", MasterQuery::Echo(tok("hello"))),
            (b"\\secure\\QWERTY", MasterQuery::Secure(ch("QWERTY"))),
            (b"\\players\\", MasterQuery::Unknown(key("players"))),
        ] {
            assert_eq!(MasterQuery::decode(bytes).as_ref(), Ok(&q));
            assert_eq!(enc(|o| q.encode(o)), bytes);
        }
    }

    #[test]
    fn decode_master_query_rejects_garbage() {
        assert_eq!(
            MasterQuery::decode(b""),
            Err(DecodeError::BadMagic("master query"))
        );
        assert_eq!(
            MasterQuery::decode(b"\\\\x"),
            Err(DecodeError::Invalid("master query key"))
        );
    }

    const OWN_BASIC: &[u8] =
        b"\\gamename\\333networks\\gamever\\Qt-0.28\\location\\0\\queryid\\12.1\\final\\";

    #[test]
    fn encode_query_reply() {
        let r = QueryReply {
            query_id: 12,
            sections: vec![vec![
                (key("gamename"), tok("333networks")),
                (key("gamever"), tok("Qt-0.28")),
                (key("location"), tok("0")),
            ]],
        };
        assert_eq!(enc(|o| r.encode(o)), OWN_BASIC);
    }

    #[test]
    fn decode_query_reply() {
        let r = QueryReply::decode(OWN_BASIC).unwrap();
        assert_eq!(r.query_id, 12);
        assert_eq!(r.sections.len(), 1);
        let two = b"\\a\\1\\queryid\\3.1\\b\\2\\queryid\\3.2\\final\\";
        let r = QueryReply::decode(two).unwrap();
        assert_eq!(
            r.sections,
            vec![vec![(key("a"), tok("1"))], vec![(key("b"), tok("2"))]]
        );
        assert_eq!(enc(|o| r.encode(o)), two);
    }

    #[test]
    fn decode_query_reply_rejects_bad_sequence_and_missing_final() {
        assert_eq!(
            QueryReply::decode(b"\\a\\1\\queryid\\3.2\\final\\"),
            Err(DecodeError::Invalid("queryid sequence"))
        );
        assert_eq!(
            QueryReply::decode(b"\\a\\1\\queryid\\3.1\\b\\2\\queryid\\4.2\\final\\"),
            Err(DecodeError::Invalid("queryid sequence"))
        );
        assert_eq!(
            QueryReply::decode(b"\\a\\1\\queryid\\3.1"),
            Err(DecodeError::Incomplete("query reply"))
        );
        assert_eq!(
            QueryReply::decode(b"\\a\\1\\queryid\\x\\final\\"),
            Err(DecodeError::BadNumber("queryid"))
        );
    }

    const GREETING: &[u8] = &[
        0x5c, 0x62, 0x61, 0x73, 0x69, 0x63, 0x5c, 0x5c, 0x73, 0x65, 0x63, 0x75, 0x72, 0x65, 0x5c,
        0x41, 0x42, 0x43, 0x44, 0x45, 0x46,
    ];

    #[test]
    fn encode_greeting() {
        let g = Greeting {
            challenge: ch("ABCDEF"),
        };
        assert_eq!(enc(|o| g.encode(o)), GREETING);
        assert_eq!(GREETING.len(), GREETING_LEN);
    }

    #[test]
    fn decode_greeting() {
        assert_eq!(Greeting::decode(GREETING).unwrap().challenge, ch("ABCDEF"));
        assert_eq!(
            Greeting::decode(b"\\basic\\\\secure\\XYZABC\\final\\")
                .unwrap()
                .challenge,
            ch("XYZABC")
        );
    }

    #[test]
    fn decode_greeting_rejects_other_messages() {
        assert_eq!(
            Greeting::decode(b"\\secure\\ABCDEF"),
            Err(DecodeError::BadMagic("greeting"))
        );
        assert_eq!(
            Greeting::decode(b"\\basic\\\\secure\\ABCDEFG"),
            Err(DecodeError::Invalid("challenge length"))
        );
    }

    const UBROWSER_AUTH: &[u8] = b"\\gamename\\ut\\location\\0\\validate\\5OOIQ5Ha\\final\\";
    const SS_REQUEST: &[u8] = b"\\gamename\\serioussamse\\enctype\\0\\validate\\zbGgINC8\\final\\\\queryid\\1.1\\list\\cmp\\gamename\\serioussamse\\gamever\\1.05\\final\\";

    #[test]
    fn encode_client_auth() {
        let a = ClientAuth::ubrowser(key("ut"), tok("0"), tok("5OOIQ5Ha"));
        assert_eq!(enc(|o| a.encode(o)), UBROWSER_AUTH);
        let a = ClientAuth::serious_sam(key("serioussamse"), tok("zbGgINC8"));
        assert_eq!(
            enc(|o| a.encode(o)),
            b"\\gamename\\serioussamse\\enctype\\0\\validate\\zbGgINC8\\final\\"
        );
    }

    #[test]
    fn decode_client_auth() {
        let a = ClientAuth::decode(UBROWSER_AUTH).unwrap();
        assert_eq!(a.gamename(), Some(&tok("ut")));
        assert_eq!(a.validate(), Some(&tok("5OOIQ5Ha")));
        assert_eq!(a.enctype(), Ok(Enctype::Zero));
        let a = ClientAuth::decode(b"\\gamename\\ut\\enctype\\2\\validate\\x\\final\\").unwrap();
        assert_eq!(a.enctype(), Ok(Enctype::Two));
    }

    #[test]
    fn decode_client_auth_rejects_unterminated_and_list() {
        assert_eq!(
            ClientAuth::decode(b"\\gamename\\ut\\validate\\x"),
            Err(DecodeError::Incomplete("client message"))
        );
        assert_eq!(
            ClientAuth::decode(b"\\list\\\\gamename\\ut\\final\\"),
            Err(DecodeError::Invalid("not an authentication message"))
        );
    }

    #[test]
    fn encode_list_request() {
        let r = ListRequest::new(ListMode::Text, key("ut"));
        assert_eq!(enc(|o| r.encode(o)), b"\\list\\\\gamename\\ut\\final\\");
        let r = ListRequest {
            queryid: Some(tok("1.1")),
            mode: ListMode::Cmp,
            gamename: Some(key("serioussamse")),
            extra: vec![(key("gamever"), tok("1.05"))],
        };
        let second = SS_REQUEST.get(57..).unwrap();
        assert_eq!(enc(|o| r.encode(o)), second);
        assert_eq!(ListRequest::decode(second), Ok(r));
    }

    #[test]
    fn decode_list_request() {
        let r = ListRequest::decode(b"\\list\\cmp\\gamename\\ut\\final\\").unwrap();
        assert_eq!(r.mode, ListMode::Cmp);
        assert_eq!(r.mode.reply_form(), ListForm::Cmp);
        let r = ListRequest::decode(b"\\list\\info2\\gamename\\ut\\final\\").unwrap();
        assert_eq!(r.mode, ListMode::Unknown(tok("info2")));
        assert_eq!(r.mode.reply_form(), ListForm::Text);
        let r = ListRequest::decode(b"\\basic\\\\list\\\\final\\").unwrap();
        assert_eq!(r.gamename, None);
    }

    #[test]
    fn decode_list_request_rejects_empty_gamename() {
        assert_eq!(
            ListRequest::decode(b"\\list\\\\gamename\\\\final\\"),
            Err(DecodeError::Invalid("list gamename"))
        );
    }

    const TEXT_LIST: &[u8] = b"\\ip\\127.0.0.1:25601\\ip\\127.0.0.1:25631\\final\\";
    const CMP_LIST: &[u8] = &[
        0x01, 0x02, 0x03, 0x04, 0x64, 0x01, 0x05, 0x06, 0x07, 0x08, 0x1e, 0x62, 0x5c, 0x66, 0x69,
        0x6e, 0x61, 0x6c, 0x5c,
    ];

    #[test]
    fn encode_list_reply_text() {
        let r = ListReply {
            form: ListForm::Text,
            servers: vec![addr("127.0.0.1:25601"), addr("127.0.0.1:25631")],
        };
        assert_eq!(enc(|o| r.encode(o)), TEXT_LIST);
    }

    #[test]
    fn decode_list_reply_text() {
        let r = ListReply::decode(TEXT_LIST, ListForm::Text).unwrap();
        assert_eq!(
            r.servers,
            vec![addr("127.0.0.1:25601"), addr("127.0.0.1:25631")]
        );
        let empty = ListReply::decode(b"\\final\\", ListForm::Text).unwrap();
        assert!(empty.servers.is_empty());
    }

    #[test]
    fn decode_list_reply_text_rejects_bad_entry_and_missing_final() {
        assert_eq!(
            ListReply::decode(b"\\ip\\1.2.3:7778\\final\\", ListForm::Text),
            Err(DecodeError::Invalid("text list entry"))
        );
        assert_eq!(
            ListReply::decode(b"\\ip\\1.2.3.4:77a\\final\\", ListForm::Text),
            Err(DecodeError::BadNumber("text list entry"))
        );
        assert_eq!(
            ListReply::decode(b"\\ip\\1.2.3.4:7778", ListForm::Text),
            Err(DecodeError::Incomplete("text list"))
        );
    }

    #[test]
    fn encode_list_reply_cmp() {
        let r = ListReply {
            form: ListForm::Cmp,
            servers: vec![addr("1.2.3.4:25601"), addr("5.6.7.8:7778")],
        };
        assert_eq!(enc(|o| r.encode(o)), CMP_LIST);
    }

    #[test]
    fn decode_list_reply_cmp() {
        let r = ListReply::decode(CMP_LIST, ListForm::Cmp).unwrap();
        assert_eq!(r.servers, vec![addr("1.2.3.4:25601"), addr("5.6.7.8:7778")]);
    }

    #[test]
    fn decode_list_reply_cmp_rejects_ragged_and_unterminated() {
        assert_eq!(
            ListReply::decode(b"\x01\x02\x03\\final\\", ListForm::Cmp),
            Err(DecodeError::Invalid("cmp list length"))
        );
        assert_eq!(
            ListReply::decode(b"\x01\x02\x03\x04\x05\x06", ListForm::Cmp),
            Err(DecodeError::Incomplete("cmp list"))
        );
    }

    #[test]
    fn quirk_cmp_record_spells_final() {
        // 92.102.105.110:24940 is the bytes `\final`; followed by a second record starting
        // with `\` the data contains `\final\` in the middle.
        let r = ListReply {
            form: ListForm::Cmp,
            servers: vec![addr("92.102.105.110:24940"), addr("92.1.2.3:4")],
        };
        let bytes = enc(|o| r.encode(o));
        assert_eq!(bytes.get(..7), Some(FINAL));
        assert_eq!(ListReply::decode(&bytes, ListForm::Cmp), Ok(r));
    }

    #[test]
    fn list_reply_to_server_list_dedups() {
        let r = ListReply {
            form: ListForm::Text,
            servers: vec![
                addr("1.2.3.4:7778"),
                addr("1.2.3.4:7778"),
                addr("1.2.3.4:7788"),
            ],
        };
        let l = r.to_server_list();
        assert_eq!(l.servers.len(), 2);
        assert_eq!(l.servers[0].address, "1.2.3.4:7778".parse().unwrap());
        assert_eq!(
            l.servers[0].query_address,
            Some("1.2.3.4:7778".parse().unwrap())
        );
    }

    const QT5_SYNC: &[u8] = b"\\sync\\all\\msid\\0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
    const SYNC_REPLY: &[u8] = b"\\ut\\1.2.3.4:7778 5.6.7.8:7778 \\unreal\\9.9.9.9:7778 \\final\\";

    #[test]
    fn encode_sync_request() {
        let s = SyncRequest::new(
            SyncGames::All,
            Some(tok("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")),
            false,
        )
        .unwrap();
        assert_eq!(enc(|o| s.encode(o)), QT5_SYNC);
        let s = SyncRequest::new(
            SyncGames::Games(vec![key("ut"), key("unreal"), key("ut2")]),
            None,
            true,
        )
        .unwrap();
        assert_eq!(enc(|o| s.encode(o)), b"\\sync\\ut unreal ut2\\final\\");
    }

    #[test]
    fn decode_sync_request() {
        let s = SyncRequest::decode(QT5_SYNC).unwrap();
        assert_eq!(s.games, SyncGames::All);
        assert!(!s.terminated);
        let s = SyncRequest::decode(b"\\sync\\all\\final\\").unwrap();
        assert!(s.terminated && s.msid.is_none());
    }

    #[test]
    fn decode_sync_request_rejects_bad_games() {
        assert_eq!(
            SyncRequest::new(SyncGames::Games(vec![key("a b")]), None, true),
            Err(DecodeError::Invalid("sync gamename"))
        );
        assert_eq!(
            SyncRequest::decode(b"\\sync\\\\final\\"),
            Err(DecodeError::Invalid("sync gamename"))
        );
    }

    #[test]
    fn encode_sync_reply() {
        let r = SyncReply {
            games: vec![
                (key("ut"), vec![addr("1.2.3.4:7778"), addr("5.6.7.8:7778")]),
                (key("unreal"), vec![addr("9.9.9.9:7778")]),
            ],
        };
        assert_eq!(enc(|o| r.encode(o)), SYNC_REPLY);
    }

    #[test]
    fn decode_sync_reply() {
        let r = SyncReply::decode(SYNC_REPLY).unwrap();
        assert_eq!(r.games.len(), 2);
        let r = SyncReply::decode(b"\\ut\\\\unreal\\9.9.9.9:7778  \\final\\").unwrap();
        assert_eq!(r.games[0], (key("ut"), vec![]));
        assert_eq!(r.games[1].1, vec![addr("9.9.9.9:7778")]);
        assert_eq!(SyncReply::decode(b"\\final\\").unwrap().games, vec![]);
    }

    #[test]
    fn decode_sync_reply_rejects_bad_entry() {
        assert_eq!(
            SyncReply::decode(b"\\ut\\1.2.3.4\\final\\"),
            Err(DecodeError::Invalid("sync entry"))
        );
        assert_eq!(
            SyncReply::decode(b"\\ut\\1.2.3.4:1 "),
            Err(DecodeError::Incomplete("sync reply"))
        );
    }

    #[test]
    fn token_and_key_constructors() {
        assert_eq!(
            Token::new("a\\b"),
            Err(DecodeError::Invalid("token contains a backslash"))
        );
        assert_eq!(Key::new(""), Err(DecodeError::Invalid("empty key")));
        assert!(key("GameName").is("gamename"));
    }

    // ---- property tests ----

    fn word() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9]{0,7}".prop_filter("reserved", |s| {
            !matches!(
                s.as_str(),
                "final" | "queryid" | "basic" | "list" | "sync" | "validate" | "gamename" | "ip"
            )
        })
    }
    fn value() -> impl Strategy<Value = Token> {
        "[ -\\[\\]-~]{0,12}"
            .prop_filter("final", |s| !s.contains("final"))
            .prop_map(|s| tok(&s))
    }
    fn pairs_strategy() -> impl Strategy<Value = Vec<(Key, Token)>> {
        prop::collection::vec((word().prop_map(|w| key(&w)), value()), 0..5)
    }
    fn addrs() -> impl Strategy<Value = Vec<SocketAddrV4>> {
        prop::collection::vec(
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddrV4::new(ip.into(), p)),
            0..20,
        )
    }

    fn heartbeat() -> impl Strategy<Value = Heartbeat> {
        (any::<u16>(), word(), pairs_strategy(), any::<bool>()).prop_map(|(p, g, extra, sc)| {
            let h = Heartbeat {
                query_port: p,
                gamename: key(&g),
                extra,
            };
            if sc { h.with_state_changed() } else { h }
        })
    }

    proptest! {
        #[test]
        fn prop_decoders_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = Heartbeat::decode(&bytes);
            let _ = Secure::decode(&bytes);
            let _ = ValidateAnswer::decode(&bytes);
            let _ = MasterQuery::decode(&bytes);
            let _ = QueryReply::decode(&bytes);
            let _ = Greeting::decode(&bytes);
            let _ = ClientMessage::decode_unterminated(&bytes);
            let _ = ListReply::decode(&bytes, ListForm::Text);
            let _ = ListReply::decode(&bytes, ListForm::Cmp);
            let _ = SyncReply::decode(&bytes);
        }

        #[test]
        fn prop_backslash_soup_never_panics(bytes in prop::collection::vec(prop::sample::select(vec![b'\\', b'a', b'f', b'i', b'n', b'l', b'1', b'.', b':', b' ']), 0..80)) {
            let _ = Heartbeat::decode(&bytes);
            let _ = QueryReply::decode(&bytes);
            let _ = ClientMessage::decode_unterminated(&bytes);
            let _ = ListReply::decode(&bytes, ListForm::Text);
            let _ = SyncReply::decode(&bytes);
        }

        #[test]
        fn prop_heartbeat_round_trip(h in heartbeat()) {
            let mut out = Vec::new();
            h.encode(&mut out);
            prop_assert_eq!(Heartbeat::decode(&out), Ok(h));
        }

        #[test]
        fn prop_list_reply_round_trip(servers in addrs(), cmp in any::<bool>()) {
            let r = ListReply { form: if cmp { ListForm::Cmp } else { ListForm::Text }, servers };
            let mut out = Vec::new();
            r.encode(&mut out);
            prop_assert_eq!(ListReply::decode(&out, r.form), Ok(r));
        }

        #[test]
        fn prop_sync_reply_round_trip(games in prop::collection::vec((word(), addrs()), 0..4)) {
            let r = SyncReply { games: games.into_iter().map(|(g, a)| (key(&g), a)).collect() };
            let mut out = Vec::new();
            r.encode(&mut out);
            prop_assert_eq!(SyncReply::decode(&out), Ok(r));
        }

        #[test]
        fn prop_client_messages_round_trip(g in word(), fields in pairs_strategy(), v in value(), q in prop::option::of(value()), cmp in any::<bool>(), extra in pairs_strategy()) {
            let mut all = vec![(key("gamename"), tok(&g))];
            all.extend(fields);
            all.push((key("validate"), v));
            let auth = ClientMessage::Auth(ClientAuth { fields: all });
            let list = ClientMessage::List(ListRequest {
                queryid: q,
                mode: if cmp { ListMode::Cmp } else { ListMode::Text },
                gamename: Some(key(&g)),
                extra,
            });
            for m in [auth, list] {
                let mut out = Vec::new();
                m.encode(&mut out);
                prop_assert_eq!(ClientMessage::decode(&out), Ok(m));
            }
        }

        #[test]
        fn prop_validate_and_reply_round_trip(v in value(), id in any::<u32>(), sections in prop::collection::vec(pairs_strategy(), 1..3)) {
            for trailer in [Trailer::None, Trailer::Final, Trailer::FinalQueryid(v.clone()), Trailer::QueryidFinal(v.clone())] {
                let a = ValidateAnswer { validate: v.clone(), trailer };
                let mut out = Vec::new();
                a.encode(&mut out);
                prop_assert_eq!(ValidateAnswer::decode(&out), Ok(a));
            }
            let r = QueryReply { query_id: id, sections };
            let mut out = Vec::new();
            r.encode(&mut out);
            prop_assert_eq!(QueryReply::decode(&out), Ok(r));
        }
    }
}
