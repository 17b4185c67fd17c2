//! The protocol-neutral model every query result maps into.
//!
//! A [`ServerInfo`] is what the query engine hands out, what the master stores and what the
//! web page shows, whatever protocol produced it. Strings are [`Text`]: the raw bytes from the
//! wire, the text decoded by the protocol's own rule, and a normalized view with colour codes
//! and decorations removed. Anything a protocol says that has no neutral field is kept in
//! [`ServerInfo::raw`] / [`Player::raw`] under the protocol's own key name.
//!
//! This module does no decoding itself; each protocol fills these types in its `query.rs`.

use std::net::SocketAddr;
use std::time::Duration;

/// The query protocol families Muster speaks to game servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// Serious Sam GameAgent (UDP, game port + 1).
    GameAgent,
    /// GameSpy v1 `\status\` queries.
    GameSpy1,
    /// Unreal Engine 2 native query.
    Unreal2,
    /// Teeworlds / DDNet server info (0.6, DDNet extended, 0.7).
    Teeworlds,
    /// Quake III / DarkPlaces `getstatus` / `getinfo` on the game port.
    Quake3,
    /// Valve's A2S (Source and GoldSrc engines, Xash3D) on the query port (usually the game
    /// port).
    A2s,
}

impl Protocol {
    /// The lower-case name used on the command line and in JSON output.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::GameAgent => "gameagent",
            Self::GameSpy1 => "gamespy1",
            Self::Unreal2 => "unreal2",
            Self::Teeworlds => "teeworlds",
            Self::Quake3 => "quake3",
            Self::A2s => "a2s",
        }
    }
}

/// A string from the wire: raw bytes, decoded text and a normalized view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Text {
    /// The exact bytes the server sent (for UTF-16 strings, the UTF-16LE code units).
    pub raw: Vec<u8>,
    /// The bytes decoded with the protocol's character set; decorations and colour codes kept.
    pub text: String,
    /// The text with colour codes, decorations and control characters removed: what a
    /// player reads. Equal to `text` when there was nothing to remove.
    pub plain: String,
    /// True when `raw` was not valid in the protocol's character set and `text` has
    /// replacement characters (output should then show `raw` as hex).
    pub lossy: bool,
}

impl Text {
    /// A text whose raw bytes, decoded and plain forms are all the same ASCII/UTF-8 string.
    #[must_use]
    pub fn from_utf8_str(s: &str) -> Self {
        Self {
            raw: s.as_bytes().to_vec(),
            text: s.to_owned(),
            plain: s.to_owned(),
            lossy: false,
        }
    }

    /// True when the raw string is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// A protocol-specific value kept in `raw`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawValue {
    /// A number as the protocol sent it.
    Int(i64),
    /// A boolean flag.
    Bool(bool),
    /// A string.
    Text(Text),
    /// Bytes with no text meaning (tokens, hashes).
    Bytes(Vec<u8>),
}

/// One player, bot or spectator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Player {
    /// The player's name.
    pub name: Text,
    /// Score or frags, when the protocol reports one.
    pub score: Option<i64>,
    /// Ping in milliseconds, when the protocol reports one.
    pub ping_ms: Option<u32>,
    /// Team number (0 = red / first team, 1 = blue / second team), when known.
    pub team: Option<i32>,
    /// True for spectators, when the protocol tells players and spectators apart.
    pub spectator: Option<bool>,
    /// Clan tag (Teeworlds).
    pub clan: Option<Text>,
    /// Country code (Teeworlds: ISO 3166-1 numeric, -1 = none).
    pub country: Option<i32>,
    /// Protocol-specific fields under the protocol's own key names.
    pub raw: Vec<(String, RawValue)>,
}

/// One server rule (key/value pair). Keys may repeat (UE2 `Mutator`), so rules are a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    /// The key as sent.
    pub key: Text,
    /// The value as sent.
    pub value: Text,
}

/// Why a result is partial: some fragments or parts never arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// A short lower-case reason, e.g. `"player list fragment 2 of 3 missing"`.
    pub reason: String,
}

/// Everything one query learned about one game server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Which protocol answered.
    pub protocol: Protocol,
    /// Server name.
    pub name: Text,
    /// Current map or level.
    pub map: Text,
    /// Game type or mode.
    pub game_type: Text,
    /// Game or server version string.
    pub version: Text,
    /// Whether a password is needed to join, when known.
    pub password: Option<bool>,
    /// Players currently connected, as the server counts them.
    pub num_players: u32,
    /// Player slots.
    pub max_players: u32,
    /// Players listed (may be fewer than `num_players`: some protocols cap the list).
    pub players: Vec<Player>,
    /// Server rules in the order they were sent.
    pub rules: Vec<Rule>,
    /// Round-trip time of the first exchange.
    pub ping: Option<Duration>,
    /// Set when some fragments or parts never came.
    pub partial: Option<Partial>,
    /// Protocol-specific fields under the protocol's own key names.
    pub raw: Vec<(String, RawValue)>,
}

impl ServerInfo {
    /// An empty result for `protocol`, to be filled in by a decoder.
    #[must_use]
    pub fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            name: Text::default(),
            map: Text::default(),
            game_type: Text::default(),
            version: Text::default(),
            password: None,
            num_players: 0,
            max_players: 0,
            players: Vec::new(),
            rules: Vec::new(),
            ping: None,
            partial: None,
            raw: Vec::new(),
        }
    }

    /// The first raw field named `key`.
    #[must_use]
    pub fn raw_field(&self, key: &str) -> Option<&RawValue> {
        self.raw.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// One entry of a master server's list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedServer {
    /// The game address: what a player connects to.
    pub address: SocketAddr,
    /// The query address when the master says it (GameSpy lists give the query port);
    /// `None` when the protocol's convention derives it from the game address.
    pub query_address: Option<SocketAddr>,
}

/// A master server's list, possibly incomplete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerList {
    /// The servers in the order the master sent them, duplicates removed.
    pub servers: Vec<ListedServer>,
    /// Set when the list is known or suspected to be incomplete.
    pub partial: Option<Partial>,
}
