//! The typed commands and answer of the management server (§4), parsed strictly (§7.2) and
//! encoded byte-exact (§8).
//!
//! Parse, don't validate: every type here can only hold what the spec allows (a [`GamePort`]
//! is never 0 or 51963, a [`GameServer`] never has an empty name, an invalid-looking address
//! never becomes a [`ServerAddress`]), so a decoded [`Message`] is valid and
//! [`Message::encode`] cannot fail.
//!
//! Output form: compact JSON, `"command"` first, then `"content"` (only when there is data),
//! fields in the order of §4, integers as JSON integers, non-ASCII as UTF-8.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use super::MAX_JSON_LEN;
use super::json::{self, Json};
use super::packet::{Frame, encode_json_frame};

pub use super::error::{AddressError, MessageError};

/// What kind of address a [`ServerAddress`] is, decided by its characters (§7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressKind {
    /// A dotted-quad IPv4 address.
    Ipv4(Ipv4Addr),
    /// An IPv6 address (any textual form Rust's parser accepts, e.g. IPv4-mapped).
    Ipv6(Ipv6Addr),
    /// A host name; the management server does not resolve it.
    Hostname,
}

/// A game server's address, stored exactly as received (case, trailing dot and IPv6 spelling
/// are kept), known to be valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerAddress {
    text: String,
    kind: AddressKind,
}

/// The longest host name, without its optional trailing dot (RFC 1123).
pub const MAX_HOSTNAME_LEN: usize = 253;
/// The longest label of a host name.
pub const MAX_LABEL_LEN: usize = 63;

impl ServerAddress {
    /// Classify and check `s`: with a `:` it must be IPv6; only digits and dots, IPv4; anything
    /// else a host name (ASCII letters, digits, `-`, `_`; labels of 1–63 not starting or
    /// ending with `-`; at most 253 characters plus one trailing dot). Unspecified, multicast
    /// and broadcast addresses are rejected.
    pub fn parse(s: &str) -> Result<Self, AddressError> {
        if s.is_empty() {
            return Err(AddressError::Empty);
        }
        let kind = if s.contains(':') {
            let ip: Ipv6Addr = s.parse().map_err(|_| AddressError::Ipv6)?;
            if ip.is_unspecified() {
                return Err(AddressError::Unspecified);
            }
            if ip.is_multicast() {
                return Err(AddressError::Multicast);
            }
            AddressKind::Ipv6(ip)
        } else if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            // Rust's parser wants exactly four parts and rejects leading zeros.
            let ip: Ipv4Addr = s.parse().map_err(|_| AddressError::Ipv4)?;
            if ip.is_unspecified() {
                return Err(AddressError::Unspecified);
            }
            if ip.is_multicast() {
                return Err(AddressError::Multicast);
            }
            if ip.is_broadcast() {
                return Err(AddressError::Broadcast);
            }
            AddressKind::Ipv4(ip)
        } else {
            check_hostname(s)?;
            AddressKind::Hostname
        };
        Ok(Self {
            text: s.to_owned(),
            kind,
        })
    }

    /// The address exactly as received.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Which kind of address it is.
    #[must_use]
    pub fn kind(&self) -> AddressKind {
        self.kind
    }
}

fn check_hostname(s: &str) -> Result<(), AddressError> {
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() || name.len() > MAX_HOSTNAME_LEN {
        return Err(AddressError::Hostname);
    }
    let label_ok = |l: &str| {
        (1..=MAX_LABEL_LEN).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(AddressError::Hostname)
    }
}

/// A game server's TCP port: 1–65535 except [`super::PORT`] (51963).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GamePort(u16);

impl GamePort {
    /// `port` if it is allowed; 0 and 51963 are `OutOfRange("serverPort")`.
    pub fn new(port: u16) -> Result<Self, MessageError> {
        if port == 0 || port == super::PORT {
            return Err(MessageError::OutOfRange(CTX_PORT));
        }
        Ok(Self(port))
    }

    /// The port number.
    #[must_use]
    pub fn get(self) -> u16 {
        self.0
    }

    /// True for ports below 1024 (21, 80, 443, …): accepted, but the spec asks for a warning
    /// in the log (§7.2).
    #[must_use]
    pub fn is_well_known(self) -> bool {
        self.0 < 1024
    }
}

/// What `msRegisterGameServer` says: a game server's name, address and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GameServer {
    name: String,
    address: ServerAddress,
    port: GamePort,
}

impl GameServer {
    /// A registration; fails for an empty name (`Empty("serverName")`) or when the
    /// registration frame would exceed [`MAX_JSON_LEN`] (`TooLarge("msRegisterGameServer")`).
    ///
    /// The name is kept exactly as given (no trimming, any characters).
    pub fn new(
        name: impl Into<String>,
        address: ServerAddress,
        port: GamePort,
    ) -> Result<Self, MessageError> {
        let name = name.into();
        if name.is_empty() {
            return Err(MessageError::Empty(CTX_NAME));
        }
        let server = Self {
            name,
            address,
            port,
        };
        let mut json = Vec::new();
        write_json(&mut json, &register_wire(&server));
        if json.len() > MAX_JSON_LEN {
            return Err(MessageError::TooLarge(Command::RegisterGameServer.name()));
        }
        Ok(server)
    }

    /// The name shown to players, exactly as registered.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as a [`crate::model::Text`], through the protocol's one text function
    /// ([`super::text`]).
    #[must_use]
    pub fn name_text(&self) -> crate::model::Text {
        super::text(&self.name)
    }

    /// The address, exactly as registered.
    #[must_use]
    pub fn address(&self) -> &ServerAddress {
        &self.address
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> GamePort {
        self.port
    }
}

/// `players.current`: 0 to 2147483647; may exceed `players.max` (a queue, §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PlayerCount(u32);

/// The largest `players.current` accepted (§7.2).
pub const MAX_PLAYER_COUNT: u32 = 2_147_483_647;

impl PlayerCount {
    /// `n` if it is at most [`MAX_PLAYER_COUNT`].
    pub fn new(n: u32) -> Result<Self, MessageError> {
        if n > MAX_PLAYER_COUNT {
            return Err(MessageError::OutOfRange(CTX_CURRENT));
        }
        Ok(Self(n))
    }

    /// The count.
    #[must_use]
    pub fn get(self) -> u32 {
        self.0
    }
}

/// `players.max`: 2, 3 or 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MaxPlayers(u8);

impl MaxPlayers {
    /// `n` if it is 2, 3 or 4.
    pub fn new(n: u8) -> Result<Self, MessageError> {
        if !(2..=4).contains(&n) {
            return Err(MessageError::OutOfRange(CTX_MAX));
        }
        Ok(Self(n))
    }

    /// The maximum.
    #[must_use]
    pub fn get(self) -> u8 {
        self.0
    }
}

/// `gameplayMode`.
///
/// No `Unknown(n)` arm on purpose: the spec discards a message with any other code (§10.4
/// U11, U12), so an unknown mode never gets past decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GameplayMode {
    /// 1: "Standard A".
    StandardA,
    /// 2: "Standard A+B".
    StandardAB,
}

impl GameplayMode {
    /// The mode for a wire code, if it is 1 or 2.
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::StandardA),
            2 => Some(Self::StandardAB),
            _ => None,
        }
    }

    /// The wire code.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Self::StandardA => 1,
            Self::StandardAB => 2,
        }
    }
}

/// What `msUpdateGameServerStats` says: the lobby state of a game server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stats {
    /// Players logged in.
    pub current: PlayerCount,
    /// Players admitted to a round.
    pub max: MaxPlayers,
    /// Whether new players can join.
    pub lobby_open: bool,
    /// The active gameplay mode.
    pub mode: GameplayMode,
}

impl Default for Stats {
    /// The state of a server that registered but sent no update yet (§7.1 (3)):
    /// 0 of 4 players, lobby open, "Standard A".
    fn default() -> Self {
        Self {
            current: PlayerCount(0),
            max: MaxPlayers(4),
            lobby_open: true,
            mode: GameplayMode::StandardA,
        }
    }
}

/// One entry of `msRQueryGameServers`: a registered game server and its state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedGameServer {
    /// Name, address and port as registered.
    pub server: GameServer,
    /// The last reported state, or [`Stats::default`].
    pub stats: Stats,
}

/// The content of `msRQueryGameServers`: the registered game servers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerListAnswer {
    servers: Vec<ListedGameServer>,
    skipped: usize,
}

impl ServerListAnswer {
    /// An answer listing `servers`; `TooLarge("msRQueryGameServers")` when it would not fit
    /// one frame (use [`Self::fitting`] to send as many as fit).
    pub fn new(servers: Vec<ListedGameServer>) -> Result<Self, MessageError> {
        let answer = Self {
            servers,
            skipped: 0,
        };
        let mut json = Vec::new();
        write_json(&mut json, &answer_wire(&answer.servers));
        if json.len() > MAX_JSON_LEN {
            return Err(MessageError::TooLarge(
                Command::QueryGameServersAnswer.name(),
            ));
        }
        Ok(answer)
    }

    /// An answer with the servers of `servers`, in order, as long as they fit one frame;
    /// also returns how many were left out. The caller chooses the order (e.g. open lobbies
    /// first, §12).
    pub fn fitting(servers: impl IntoIterator<Item = ListedGameServer>) -> (Self, usize) {
        let mut len = EMPTY_ANSWER_JSON_LEN;
        let mut kept = Vec::new();
        let mut dropped = 0;
        let mut scratch = Vec::new();
        for s in servers {
            scratch.clear();
            write_json(&mut scratch, &entry_wire(&s));
            let comma = usize::from(!kept.is_empty());
            if len + comma + scratch.len() <= MAX_JSON_LEN {
                len += comma + scratch.len();
                kept.push(s);
            } else {
                dropped += 1;
            }
        }
        (
            Self {
                servers: kept,
                skipped: 0,
            },
            dropped,
        )
    }

    /// The listed servers, in the order received (the order has no meaning, §4.5).
    #[must_use]
    pub fn servers(&self) -> &[ListedGameServer] {
        &self.servers
    }

    /// The listed servers, by value.
    #[must_use]
    pub fn into_servers(self) -> Vec<ListedGameServer> {
        self.servers
    }

    /// Entries of a decoded answer that failed validation and were left out (§7.2, client
    /// side). Always 0 for an answer built here; not encoded.
    #[must_use]
    pub fn skipped(&self) -> usize {
        self.skipped
    }
}

/// The command names of §4 (`"command"` values).
///
/// An unknown name is a [`MessageError::UnknownCommand`] rather than an `Unknown` arm: the spec
/// discards such messages (§7.1 (8)) and nothing needs to re-encode them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `msRegisterGameServer`.
    RegisterGameServer,
    /// `msUpdateGameServerStats`.
    UpdateGameServerStats,
    /// `msUnregisterGameServer`.
    UnregisterGameServer,
    /// `msQueryGameServers`.
    QueryGameServers,
    /// `msRQueryGameServers` (the answer).
    QueryGameServersAnswer,
}

impl Command {
    /// The command for an exact (case-sensitive) name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "msRegisterGameServer" => Self::RegisterGameServer,
            "msUpdateGameServerStats" => Self::UpdateGameServerStats,
            "msUnregisterGameServer" => Self::UnregisterGameServer,
            "msQueryGameServers" => Self::QueryGameServers,
            "msRQueryGameServers" => Self::QueryGameServersAnswer,
            _ => return None,
        })
    }

    /// The name on the wire.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::RegisterGameServer => "msRegisterGameServer",
            Self::UpdateGameServerStats => "msUpdateGameServerStats",
            Self::UnregisterGameServer => "msUnregisterGameServer",
            Self::QueryGameServers => "msQueryGameServers",
            Self::QueryGameServersAnswer => "msRQueryGameServers",
        }
    }

    /// True for the answer, which only the management server sends.
    #[must_use]
    pub fn is_answer(self) -> bool {
        self == Self::QueryGameServersAnswer
    }
}

/// One message of the protocol, in either direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `msRegisterGameServer`: game server → management server.
    RegisterGameServer(GameServer),
    /// `msUpdateGameServerStats`: game server → management server.
    UpdateGameServerStats(Stats),
    /// `msUnregisterGameServer`: game server → management server.
    UnregisterGameServer,
    /// `msQueryGameServers`: client → management server.
    QueryGameServers,
    /// `msRQueryGameServers`: management server → client.
    QueryGameServersAnswer(ServerListAnswer),
}

impl Message {
    /// Which command this is.
    #[must_use]
    pub fn command(&self) -> Command {
        match self {
            Self::RegisterGameServer(_) => Command::RegisterGameServer,
            Self::UpdateGameServerStats(_) => Command::UpdateGameServerStats,
            Self::UnregisterGameServer => Command::UnregisterGameServer,
            Self::QueryGameServers => Command::QueryGameServers,
            Self::QueryGameServersAnswer(_) => Command::QueryGameServersAnswer,
        }
    }

    /// Decode the JSON text of one frame (use [`Self::from_frame`] for a [`Frame`]).
    ///
    /// Strict RFC 8259 with unique keys; the root must be an object with a string `command`;
    /// unknown keys are ignored. For the answer, entries that fail validation are skipped and
    /// counted ([`ServerListAnswer::skipped`]); a missing or non-array `servers` is an error.
    pub fn decode(json: &[u8]) -> Result<Self, MessageError> {
        let root = json::parse(json)?;
        let Json::Object(root) = root else {
            return Err(MessageError::NotAnObject("root"));
        };
        let Json::Str(name) = field(&root, "command")? else {
            return Err(MessageError::WrongType("command"));
        };
        let command = Command::from_name(name).ok_or(MessageError::UnknownCommand)?;
        let content = root.get("content");
        match command {
            Command::RegisterGameServer => {
                let c = data_content(content)?;
                Ok(Self::RegisterGameServer(decode_register(c)?))
            }
            Command::UpdateGameServerStats => {
                let c = data_content(content)?;
                Ok(Self::UpdateGameServerStats(decode_stats(c)?))
            }
            Command::UnregisterGameServer => {
                no_content(content, command)?;
                Ok(Self::UnregisterGameServer)
            }
            Command::QueryGameServers => {
                no_content(content, command)?;
                Ok(Self::QueryGameServers)
            }
            Command::QueryGameServersAnswer => {
                let c = data_content(content)?;
                Ok(Self::QueryGameServersAnswer(decode_answer(c)?))
            }
        }
    }

    /// Decode the message a frame carries.
    pub fn from_frame(frame: &Frame) -> Result<Self, MessageError> {
        Self::decode(frame.json())
    }

    /// Append the JSON text alone (compact, no newline), exactly as §8 shows it.
    pub fn encode_json(&self, out: &mut Vec<u8>) {
        match self {
            Self::RegisterGameServer(s) => write_json(out, &register_wire(s)),
            Self::UpdateGameServerStats(s) => write_json(out, &update_wire(s)),
            Self::UnregisterGameServer | Self::QueryGameServers => write_json(
                out,
                &Wire::<()> {
                    command: self.command().name(),
                    content: None,
                },
            ),
            Self::QueryGameServersAnswer(a) => write_json(out, &answer_wire(&a.servers)),
        }
    }

    /// Append the whole frame: length prefix, JSON text, newline (byte-exact to §8).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut json = Vec::new();
        self.encode_json(&mut json);
        encode_json_frame(&json, out);
    }

    /// The message as a [`Frame`].
    #[must_use]
    pub fn to_frame(&self) -> Frame {
        let mut json = Vec::new();
        self.encode_json(&mut json);
        // Every constructor keeps messages within MAX_JSON_LEN.
        Frame::from_json_unchecked(json)
    }
}

const CTX_NAME: &str = "serverName";
const CTX_ADDRESS: &str = "serverAddress";
const CTX_PORT: &str = "serverPort";
const CTX_CURRENT: &str = "players.current";
const CTX_MAX: &str = "players.max";
const CTX_LOBBY: &str = "isLobbyOpen";
const CTX_MODE: &str = "gameplayMode";
const CTX_PLAYERS: &str = "players";

/// The most digits of an Integer sent as a string (§7.2).
const MAX_INT_STRING_DIGITS: usize = 10;

/// Length of `{"command":"msRQueryGameServers","content":{"servers":[]}}`.
const EMPTY_ANSWER_JSON_LEN: usize = 58;

type Object = BTreeMap<String, Json>;

fn field<'j>(obj: &'j Object, key: &'static str) -> Result<&'j Json, MessageError> {
    obj.get(key).ok_or(MessageError::Missing(key))
}

/// `content` of a command with data: must be an object.
fn data_content(content: Option<&Json>) -> Result<&Object, MessageError> {
    match content {
        None | Some(Json::Null) => Err(MessageError::Missing("content")),
        Some(Json::Object(o)) => Ok(o),
        Some(_) => Err(MessageError::NotAnObject("content")),
    }
}

/// `content` of a command without data: missing, `null` or `{}` (§7.1 (2)).
fn no_content(content: Option<&Json>, command: Command) -> Result<(), MessageError> {
    match content {
        None | Some(Json::Null) => Ok(()),
        Some(Json::Object(o)) if o.is_empty() => Ok(()),
        Some(_) => Err(MessageError::UnexpectedContent(command.name())),
    }
}

/// An Integer: a JSON integer, or a string of 1–10 ASCII digits.
fn integer(v: &Json, ctx: &'static str) -> Result<i128, MessageError> {
    match v {
        Json::UInt(n) => Ok(i128::from(*n)),
        Json::Int(n) => Ok(i128::from(*n)),
        Json::Str(s)
            if (1..=MAX_INT_STRING_DIGITS).contains(&s.len())
                && s.bytes().all(|b| b.is_ascii_digit()) =>
        {
            s.parse().map_err(|_| MessageError::WrongType(ctx))
        }
        _ => Err(MessageError::WrongType(ctx)),
    }
}

fn int_field<T: TryFrom<i128>>(obj: &Object, key: &'static str) -> Result<T, MessageError> {
    T::try_from(integer(field(obj, key)?, key)?).map_err(|_| MessageError::OutOfRange(key))
}

fn string_field<'j>(obj: &'j Object, key: &'static str) -> Result<&'j str, MessageError> {
    match field(obj, key)? {
        Json::Str(s) => Ok(s),
        _ => Err(MessageError::WrongType(key)),
    }
}

fn bool_field(obj: &Object, key: &'static str) -> Result<bool, MessageError> {
    match field(obj, key)? {
        Json::Bool(b) => Ok(*b),
        _ => Err(MessageError::WrongType(key)),
    }
}

fn server_fields(
    c: &Object,
    name_key: &'static str,
    address_key: &'static str,
    port_key: &'static str,
) -> Result<GameServer, MessageError> {
    let name = string_field(c, name_key)?;
    if name.is_empty() {
        return Err(MessageError::Empty(name_key));
    }
    let address =
        ServerAddress::parse(string_field(c, address_key)?).map_err(MessageError::Address)?;
    let port = GamePort::new(int_field::<u16>(c, port_key)?)?;
    GameServer::new(name, address, port)
}

fn decode_register(c: &Object) -> Result<GameServer, MessageError> {
    server_fields(c, CTX_NAME, CTX_ADDRESS, CTX_PORT)
}

fn decode_stats(c: &Object) -> Result<Stats, MessageError> {
    let Json::Object(players) = field(c, CTX_PLAYERS)? else {
        return Err(MessageError::NotAnObject(CTX_PLAYERS));
    };
    let current = players
        .get("current")
        .ok_or(MessageError::Missing(CTX_CURRENT))?;
    let current = u32::try_from(integer(current, CTX_CURRENT)?)
        .map_err(|_| MessageError::OutOfRange(CTX_CURRENT))?;
    let max = players.get("max").ok_or(MessageError::Missing(CTX_MAX))?;
    let max =
        u8::try_from(integer(max, CTX_MAX)?).map_err(|_| MessageError::OutOfRange(CTX_MAX))?;
    let lobby_open = bool_field(c, CTX_LOBBY)?;
    let mode = u8::try_from(int_field::<i128>(c, CTX_MODE)?)
        .ok()
        .and_then(GameplayMode::from_code)
        .ok_or(MessageError::OutOfRange(CTX_MODE))?;
    Ok(Stats {
        current: PlayerCount::new(current)?,
        max: MaxPlayers::new(max)?,
        lobby_open,
        mode,
    })
}

fn decode_entry(v: &Json) -> Result<ListedGameServer, MessageError> {
    let Json::Object(e) = v else {
        return Err(MessageError::NotAnObject("servers entry"));
    };
    Ok(ListedGameServer {
        server: server_fields(e, "name", "address", "port")?,
        stats: decode_stats(e)?,
    })
}

fn decode_answer(c: &Object) -> Result<ServerListAnswer, MessageError> {
    let Json::Array(entries) = field(c, "servers")? else {
        return Err(MessageError::WrongType("servers"));
    };
    let mut servers = Vec::new();
    let mut skipped = 0;
    for e in entries {
        match decode_entry(e) {
            Ok(s) => servers.push(s),
            Err(_) => skipped += 1,
        }
    }
    let mut answer = ServerListAnswer::new(servers)?;
    answer.skipped = skipped;
    Ok(answer)
}

// ---- encoding: borrowed wire structs whose field order is the key order of §8 ----

#[derive(Serialize)]
struct Wire<C> {
    command: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<C>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RegisterWire<'a> {
    server_name: &'a str,
    server_address: &'a str,
    server_port: u16,
}

#[derive(Serialize)]
struct PlayersWire {
    current: u32,
    max: u8,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatsWire {
    players: PlayersWire,
    is_lobby_open: bool,
    gameplay_mode: u8,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryWire<'a> {
    name: &'a str,
    address: &'a str,
    port: u16,
    players: PlayersWire,
    is_lobby_open: bool,
    gameplay_mode: u8,
}

#[derive(Serialize)]
struct AnswerWire<'a> {
    servers: Entries<'a>,
}

struct Entries<'a>(&'a [ListedGameServer]);

impl Serialize for Entries<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(entry_wire))
    }
}

fn register_wire(s: &GameServer) -> Wire<RegisterWire<'_>> {
    Wire {
        command: Command::RegisterGameServer.name(),
        content: Some(RegisterWire {
            server_name: &s.name,
            server_address: s.address.as_str(),
            server_port: s.port.get(),
        }),
    }
}

fn stats_wire(s: &Stats) -> StatsWire {
    StatsWire {
        players: PlayersWire {
            current: s.current.get(),
            max: s.max.get(),
        },
        is_lobby_open: s.lobby_open,
        gameplay_mode: s.mode.code(),
    }
}

fn update_wire(s: &Stats) -> Wire<StatsWire> {
    Wire {
        command: Command::UpdateGameServerStats.name(),
        content: Some(stats_wire(s)),
    }
}

fn entry_wire(e: &ListedGameServer) -> EntryWire<'_> {
    let stats = stats_wire(&e.stats);
    EntryWire {
        name: &e.server.name,
        address: e.server.address.as_str(),
        port: e.server.port.get(),
        players: stats.players,
        is_lobby_open: stats.is_lobby_open,
        gameplay_mode: stats.gameplay_mode,
    }
}

fn answer_wire(servers: &[ListedGameServer]) -> Wire<AnswerWire<'_>> {
    Wire {
        command: Command::QueryGameServersAnswer.name(),
        content: Some(AnswerWire {
            servers: Entries(servers),
        }),
    }
}

/// Compact JSON of `v` appended to `out`.
fn write_json<T: Serialize>(out: &mut Vec<u8>, v: &T) {
    // Serializing strings, integers and booleans into a Vec cannot fail (no maps with
    // non-string keys, no I/O), so the result carries no information.
    let _ = serde_json::to_writer(out, v);
}

#[cfg(test)]
mod tests;
