//! Unreal 2 requests and reply datagrams: decode and byte-exact encode, the 450-byte split of
//! stock servers, and the responder's answer to one request.
//!
//! Every reply type decodes one datagram. For any datagram a decoder accepts, encoding the
//! value gives back the same bytes (the string and compact-index forms are kept), which is what
//! the fuzz target checks.

use super::string::{U2String, read_compact, write_compact};
use super::{BuildError, MAX_PREALLOC, MAX_XMP_PAIRS, SPLIT_THRESHOLD};
use crate::wire::{DecodeError, Reader};

/// The request version a UT2004 client sends; servers accept any value (§2, §14.1).
pub const VERSION_UT2004: u32 = 0x80;
/// The reply version of a UT2003 retail server, used by the UT2003-style responder (§12.3).
pub const VERSION_UT2003: u32 = 0x79;
/// The reply version of Unreal 2 XMP, which selects the XMP player layout (§7).
pub const VERSION_XMP: u32 = 0x7e;
/// The one payload byte of a small-ping reply: `'P'` (§8).
pub const SMALL_PING_PAYLOAD: u8 = 0x50;
/// Length of a request, and of every reply header: 4-byte version + 1-byte type.
pub const HEADER_LEN: usize = 5;
/// StatsID bit for team 0 (red), §7.
pub const TEAM_RED_BIT: u32 = 0x2000_0000;
/// StatsID bit for team 1 (blue), §7.
pub const TEAM_BLUE_BIT: u32 = 0x4000_0000;
/// Flags bit: the server needs a password (UT2004 browser reading, §5.1).
pub const FLAG_PASSWORD: i32 = 0x01;

const CMD_INFO: u8 = 0x00;
const CMD_RULES: u8 = 0x01;
const CMD_PLAYERS: u8 = 0x02;
const CMD_RULES_AND_PLAYERS: u8 = 0x03;
const CMD_SMALL_PING: u8 = 0x04;

/// A request command, and the type byte of a reply (§2, §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `0x00` QI_Ping: the server-info record.
    Info,
    /// `0x01` QI_Rules: key/value pairs.
    Rules,
    /// `0x02` QI_Players: player records.
    Players,
    /// `0x03` QI_RulesAndPlayers: `0x01` datagrams then `0x02` datagrams (request only).
    RulesAndPlayers,
    /// `0x04` QI_SmallPing: a reachability check.
    SmallPing,
    /// Any other byte (Pariah uses `0x10`–`0x13`).
    Unknown(u8),
}

impl From<u8> for Command {
    fn from(b: u8) -> Self {
        match b {
            CMD_INFO => Self::Info,
            CMD_RULES => Self::Rules,
            CMD_PLAYERS => Self::Players,
            CMD_RULES_AND_PLAYERS => Self::RulesAndPlayers,
            CMD_SMALL_PING => Self::SmallPing,
            n => Self::Unknown(n),
        }
    }
}

impl From<Command> for u8 {
    fn from(c: Command) -> Self {
        match c {
            Command::Info => CMD_INFO,
            Command::Rules => CMD_RULES,
            Command::Players => CMD_PLAYERS,
            Command::RulesAndPlayers => CMD_RULES_AND_PLAYERS,
            Command::SmallPing => CMD_SMALL_PING,
            Command::Unknown(n) => n,
        }
    }
}

/// A query request: `<version:u32 LE> <command:u8>`, exactly 5 bytes (§2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The archive version the client claims; servers ignore it.
    pub version: u32,
    /// What is asked for.
    pub command: Command,
}

impl Request {
    /// A request with the version a UT2004 client sends (`80 00 00 00`).
    #[must_use]
    pub const fn new(command: Command) -> Self {
        Self {
            version: VERSION_UT2004,
            command,
        }
    }

    /// Decode a request the way a stock server accepts it (§2, §12.7): exactly 5 bytes, any
    /// version, commands `0x00`–`0x04` only. Anything else is an error, and a responder must
    /// then send nothing.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u32_le("request version")?;
        let command = Command::from(r.u8("request command")?);
        r.finish("request")?;
        if let Command::Unknown(_) = command {
            return Err(DecodeError::Invalid("request command"));
        }
        Ok(Self { version, command })
    }

    /// Append the 5 request bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.version.to_le_bytes());
        out.push(self.command.into());
    }
}

/// One rules pair (§6). Keys repeat (`Mutator`), so rules are kept as a list of these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RulePair {
    /// The key, e.g. `AdminName`.
    pub key: U2String,
    /// The value, e.g. `Bob`.
    pub value: U2String,
}

impl RulePair {
    /// A pair from two texts, in the form a stock server picks (§4.3).
    pub fn from_text(key: &str, value: &str) -> Result<Self, BuildError> {
        Ok(Self {
            key: U2String::from_text(key)?,
            value: U2String::from_text(value)?,
        })
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            key: U2String::read(r)?,
            value: U2String::read(r)?,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        self.value.encode(out);
    }
}

/// The extra fields of an Unreal 2 XMP player record (§7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct XmpExtra {
    /// The INT PlayerID that follows PlayerNum.
    pub player_id: i32,
    /// The key/value pairs after StatsID (e.g. `team`, `class`); at most [`MAX_XMP_PAIRS`]
    /// (checked by [`PlayersReply::new`]).
    pub pairs: Vec<RulePair>,
}

/// One player record of a `0x02` reply (§7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PlayerRecord {
    /// The engine's player number; 0 is an ordinary record (§13.15).
    pub num: i32,
    /// The name; colour codes and UTF-16 possible.
    pub name: U2String,
    /// Milliseconds, in 4 ms steps (§13.14).
    pub ping: i32,
    /// Signed score.
    pub score: i32,
    /// Team bits 29/30 ([`TEAM_RED_BIT`], [`TEAM_BLUE_BIT`]); other bits unused in practice.
    pub stats_id: u32,
    /// The XMP fields; present exactly when the reply's version is [`VERSION_XMP`].
    pub xmp: Option<XmpExtra>,
}

impl PlayerRecord {
    /// The team the StatsID bits say: 0 (red), 1 (blue) or `None` (§13.16; red wins if both).
    #[must_use]
    pub const fn team(&self) -> Option<i32> {
        if self.stats_id & TEAM_RED_BIT != 0 {
            Some(0)
        } else if self.stats_id & TEAM_BLUE_BIT != 0 {
            Some(1)
        } else {
            None
        }
    }

    /// The StatsID for a team: [`TEAM_RED_BIT`] for 0, [`TEAM_BLUE_BIT`] for 1, else 0.
    #[must_use]
    pub const fn stats_id_for_team(team: Option<i32>) -> u32 {
        match team {
            Some(0) => TEAM_RED_BIT,
            Some(1) => TEAM_BLUE_BIT,
            _ => 0,
        }
    }

    fn read(r: &mut Reader<'_>, xmp: bool) -> Result<Self, DecodeError> {
        let num = r.i32_le("player number")?;
        let player_id = if xmp {
            Some(r.i32_le("xmp player id")?)
        } else {
            None
        };
        let name = U2String::read(r)?;
        let ping = r.i32_le("player ping")?;
        let score = r.i32_le("player score")?;
        let stats_id = r.u32_le("player stats id")?;
        let xmp = match player_id {
            Some(player_id) => {
                let count = read_compact(r)?;
                let count =
                    usize::try_from(count).map_err(|_| DecodeError::Invalid("xmp pair count"))?;
                if count > MAX_XMP_PAIRS {
                    return Err(DecodeError::TooLarge("xmp pair count"));
                }
                let mut pairs = Vec::with_capacity(count.min(MAX_PREALLOC));
                for _ in 0..count {
                    pairs.push(RulePair::read(r)?);
                }
                Some(XmpExtra { player_id, pairs })
            }
            None => None,
        };
        Ok(Self {
            num,
            name,
            ping,
            score,
            stats_id,
            xmp,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.num.to_le_bytes());
        if let Some(x) = &self.xmp {
            out.extend_from_slice(&x.player_id.to_le_bytes());
        }
        self.name.encode(out);
        out.extend_from_slice(&self.ping.to_le_bytes());
        out.extend_from_slice(&self.score.to_le_bytes());
        out.extend_from_slice(&self.stats_id.to_le_bytes());
        if let Some(x) = &self.xmp {
            // Bounded by MAX_XMP_PAIRS when built or read.
            write_compact(out, i32::try_from(x.pairs.len()).unwrap_or(i32::MAX));
            for p in &x.pairs {
                p.encode(out);
            }
        }
    }
}

/// What follows MaxPlayers in an info reply: the layout that consumed the datagram exactly
/// (§5.3), or the fallback.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InfoTail {
    /// UT2004 (and XMP): Ping, Flags, SkillLevel, then the two empty arrays `00 00`.
    Ut2004 {
        /// Always 0 from a server.
        ping: i32,
        /// Normally 0; bits per §5.1 ([`FLAG_PASSWORD`] = 1).
        flags: i32,
        /// `"0"`, `"1"` or `"2"`, may be empty.
        skill_level: U2String,
    },
    /// Killing Floor: WaveCurrent, WaveTotal, then the UT2004 tail.
    KillingFloor {
        /// The current wave.
        wave_current: i32,
        /// The number of waves.
        wave_total: i32,
        /// Always 0 from a server.
        ping: i32,
        /// Seen as `0x20` in a capture.
        flags: i32,
        /// `"0"`, `"1"` or `"2"`.
        skill_level: U2String,
    },
    /// UT2003 (uncertain, §5.2): Ping, then the two empty arrays unless `arrays` is false.
    Ut2003 {
        /// Always 0 from a server.
        ping: i32,
        /// True when the two `00` array counts follow the ping.
        arrays: bool,
    },
    /// No layout fitted exactly: the UT2004 fields that could be read, then the rest as is.
    Other {
        /// Ping, if four bytes were left.
        ping: Option<i32>,
        /// Flags, if four more bytes were left.
        flags: Option<i32>,
        /// SkillLevel, if a string could be read after them.
        skill_level: Option<U2String>,
        /// Whatever followed, unread (non-empty arrays, unknown fields).
        trailing: Vec<u8>,
    },
}

impl InfoTail {
    /// The layout's name for `raw` fields: `ut2004`, `killing_floor`, `ut2003` or `unknown`.
    #[must_use]
    pub const fn layout_name(&self) -> &'static str {
        match self {
            Self::Ut2004 { .. } => "ut2004",
            Self::KillingFloor { .. } => "killing_floor",
            Self::Ut2003 { .. } => "ut2003",
            Self::Other { .. } => "unknown",
        }
    }

    /// Pick the layout that consumes `rest` exactly, trying UT2004, Killing Floor, UT2003.
    fn decode(rest: &[u8]) -> Self {
        fn empty_arrays(r: &mut Reader<'_>) -> Option<()> {
            (read_compact(r).ok()? == 0 && read_compact(r).ok()? == 0).then_some(())
        }
        let ut2004 = |r: &mut Reader<'_>| -> Option<(i32, i32, U2String)> {
            let ping = r.i32_le("ping").ok()?;
            let flags = r.i32_le("flags").ok()?;
            let skill = U2String::read(r).ok()?;
            empty_arrays(r)?;
            Some((ping, flags, skill))
        };
        let exact = |r: &mut Reader<'_>| ut2004(r).filter(|_| r.is_empty());
        if let Some((ping, flags, skill_level)) = exact(&mut Reader::new(rest)) {
            return Self::Ut2004 {
                ping,
                flags,
                skill_level,
            };
        }
        let mut r = Reader::new(rest);
        if let (Ok(wave_current), Ok(wave_total)) = (r.i32_le("wave"), r.i32_le("wave")) {
            if let Some((ping, flags, skill_level)) = exact(&mut r) {
                return Self::KillingFloor {
                    wave_current,
                    wave_total,
                    ping,
                    flags,
                    skill_level,
                };
            }
        }
        let mut r = Reader::new(rest);
        if let Ok(ping) = r.i32_le("ping") {
            if r.is_empty() {
                return Self::Ut2003 {
                    ping,
                    arrays: false,
                };
            }
            if empty_arrays(&mut r).is_some() && r.is_empty() {
                return Self::Ut2003 { ping, arrays: true };
            }
        }
        let mut r = Reader::new(rest);
        let ping = r.i32_le("ping").ok();
        let flags = ping.and_then(|_| r.i32_le("flags").ok());
        let skill_level = if flags.is_some() {
            let mut probe = r;
            U2String::read(&mut probe).ok().inspect(|_| r = probe)
        } else {
            None
        };
        Self::Other {
            ping,
            flags,
            skill_level,
            trailing: r.rest().to_vec(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        const EMPTY_ARRAYS: [u8; 2] = [0, 0];
        match self {
            Self::Ut2004 {
                ping,
                flags,
                skill_level,
            } => {
                out.extend_from_slice(&ping.to_le_bytes());
                out.extend_from_slice(&flags.to_le_bytes());
                skill_level.encode(out);
                out.extend_from_slice(&EMPTY_ARRAYS);
            }
            Self::KillingFloor {
                wave_current,
                wave_total,
                ping,
                flags,
                skill_level,
            } => {
                out.extend_from_slice(&wave_current.to_le_bytes());
                out.extend_from_slice(&wave_total.to_le_bytes());
                out.extend_from_slice(&ping.to_le_bytes());
                out.extend_from_slice(&flags.to_le_bytes());
                skill_level.encode(out);
                out.extend_from_slice(&EMPTY_ARRAYS);
            }
            Self::Ut2003 { ping, arrays } => {
                out.extend_from_slice(&ping.to_le_bytes());
                if *arrays {
                    out.extend_from_slice(&EMPTY_ARRAYS);
                }
            }
            Self::Other {
                ping,
                flags,
                skill_level,
                trailing,
            } => {
                if let Some(p) = ping {
                    out.extend_from_slice(&p.to_le_bytes());
                }
                if let Some(f) = flags {
                    out.extend_from_slice(&f.to_le_bytes());
                }
                if let Some(s) = skill_level {
                    s.encode(out);
                }
                out.extend_from_slice(trailing);
            }
        }
    }

    /// Flags, when the layout has them.
    #[must_use]
    pub const fn flags(&self) -> Option<i32> {
        match self {
            Self::Ut2004 { flags, .. } | Self::KillingFloor { flags, .. } => Some(*flags),
            Self::Other { flags, .. } => *flags,
            Self::Ut2003 { .. } => None,
        }
    }

    /// SkillLevel, when the layout has it.
    #[must_use]
    pub const fn skill_level(&self) -> Option<&U2String> {
        match self {
            Self::Ut2004 { skill_level, .. } | Self::KillingFloor { skill_level, .. } => {
                Some(skill_level)
            }
            Self::Other { skill_level, .. } => skill_level.as_ref(),
            Self::Ut2003 { .. } => None,
        }
    }

    /// The Ping field, when present.
    #[must_use]
    pub const fn ping(&self) -> Option<i32> {
        match self {
            Self::Ut2004 { ping, .. }
            | Self::KillingFloor { ping, .. }
            | Self::Ut2003 { ping, .. } => Some(*ping),
            Self::Other { ping, .. } => *ping,
        }
    }
}

/// Which replies a responder writes (§14 decision 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Style {
    /// Version `0x80`, info with Flags and SkillLevel (the default).
    #[default]
    Ut2004,
    /// Version `0x79`, info without Flags and SkillLevel (§12.3).
    Ut2003,
}

impl Style {
    /// The reply version this style writes.
    #[must_use]
    pub const fn version(self) -> u32 {
        match self {
            Self::Ut2004 => VERSION_UT2004,
            Self::Ut2003 => VERSION_UT2003,
        }
    }
}

/// A `0x00` server-info reply (§5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InfoReply {
    /// The reply's version field (a hint only, §13.1).
    pub version: u32,
    /// 0 from game servers.
    pub server_id: i32,
    /// `""` from real servers, decoded whatever it holds (§13.8).
    pub ip: U2String,
    /// The game port.
    pub port: i32,
    /// 0 from real servers: use the reply's source port (§13.9).
    pub query_port: i32,
    /// Server name; colour codes and UTF-16 possible.
    pub name: U2String,
    /// Map file name without extension.
    pub map: U2String,
    /// Game class name, e.g. `xDeathMatch`.
    pub game_type: U2String,
    /// Humans playing: spectators and bots are not counted.
    pub current_players: i32,
    /// Player slots.
    pub max_players: i32,
    /// The game-specific rest.
    pub tail: InfoTail,
}

impl InfoReply {
    /// What a stock server of `style` sends: ServerID 0, IP `""`, QueryPort 0, Ping 0 and, for
    /// UT2004, Flags 0 and SkillLevel `"1"` (§14 decision 4). Change fields (e.g. `tail`)
    /// afterwards for anything else.
    #[must_use]
    pub fn stock(
        style: Style,
        port: i32,
        name: U2String,
        map: U2String,
        game_type: U2String,
        current_players: i32,
        max_players: i32,
    ) -> Self {
        let tail = match style {
            Style::Ut2004 => InfoTail::Ut2004 {
                ping: 0,
                flags: 0,
                skill_level: U2String::narrow(b"1".to_vec()).unwrap_or_default(),
            },
            Style::Ut2003 => InfoTail::Ut2003 {
                ping: 0,
                arrays: true,
            },
        };
        Self {
            version: style.version(),
            server_id: 0,
            ip: U2String::empty(),
            port,
            query_port: 0,
            name,
            map,
            game_type,
            current_players,
            max_players,
            tail,
        }
    }

    /// Decode a whole `0x00` datagram, header included.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, kind, payload) = split_header(bytes)?;
        if kind != Command::Info {
            return Err(DecodeError::BadMagic("info reply type"));
        }
        Self::decode_payload(version, payload)
    }

    fn decode_payload(version: u32, payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let server_id = r.i32_le("server id")?;
        let ip = U2String::read(&mut r)?;
        let port = r.i32_le("port")?;
        let query_port = r.i32_le("query port")?;
        let name = U2String::read(&mut r)?;
        let map = U2String::read(&mut r)?;
        let game_type = U2String::read(&mut r)?;
        let current_players = r.i32_le("current players")?;
        let max_players = r.i32_le("max players")?;
        let tail = InfoTail::decode(r.rest());
        Ok(Self {
            version,
            server_id,
            ip,
            port,
            query_port,
            name,
            map,
            game_type,
            current_players,
            max_players,
            tail,
        })
    }

    /// Append the whole datagram.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_header(out, self.version, Command::Info);
        out.extend_from_slice(&self.server_id.to_le_bytes());
        self.ip.encode(out);
        out.extend_from_slice(&self.port.to_le_bytes());
        out.extend_from_slice(&self.query_port.to_le_bytes());
        self.name.encode(out);
        self.map.encode(out);
        self.game_type.encode(out);
        out.extend_from_slice(&self.current_players.to_le_bytes());
        out.extend_from_slice(&self.max_players.to_le_bytes());
        self.tail.encode(out);
    }
}

/// One `0x01` datagram: the pairs it carried (§6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RulesReply {
    /// The reply's version field.
    pub version: u32,
    /// The pairs, in order; keys may repeat.
    pub pairs: Vec<RulePair>,
    /// Bytes after the last complete pair that did not form one (a truncated or foreign
    /// datagram, §13.5). Non-empty means the datagram was cut. Set it only from a decode:
    /// re-encoding appends it unchanged.
    pub trailing: Vec<u8>,
}

impl RulesReply {
    /// Decode a whole `0x01` datagram. A pair that does not fit stops decoding: the complete
    /// pairs are kept and the rest lands in [`Self::trailing`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, kind, payload) = split_header(bytes)?;
        if kind != Command::Rules {
            return Err(DecodeError::BadMagic("rules reply type"));
        }
        Ok(Self::decode_payload(version, payload))
    }

    fn decode_payload(version: u32, payload: &[u8]) -> Self {
        let mut r = Reader::new(payload);
        let mut pairs = Vec::new();
        while !r.is_empty() {
            let mut probe = r;
            match RulePair::read(&mut probe) {
                Ok(p) => {
                    pairs.push(p);
                    r = probe;
                }
                Err(_) => break,
            }
        }
        Self {
            version,
            pairs,
            trailing: r.rest().to_vec(),
        }
    }

    /// Append the whole datagram, whatever its size (see [`encode_rules`] for the split).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_header(out, self.version, Command::Rules);
        for p in &self.pairs {
            p.encode(out);
        }
        out.extend_from_slice(&self.trailing);
    }
}

/// One `0x02` datagram: the player records it carried (§7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PlayersReply {
    version: u32,
    players: Vec<PlayerRecord>,
    trailing: Vec<u8>,
}

impl PlayersReply {
    /// A datagram of `players`. Fails when the records' XMP extras do not match the version
    /// (present exactly for [`VERSION_XMP`]) or an XMP record has more than
    /// [`MAX_XMP_PAIRS`] pairs.
    pub fn new(version: u32, players: Vec<PlayerRecord>) -> Result<Self, BuildError> {
        check_players(version, &players)?;
        Ok(Self {
            version,
            players,
            trailing: Vec::new(),
        })
    }

    /// The reply's version field; [`VERSION_XMP`] selects the XMP record layout.
    #[must_use]
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// The records, in order.
    #[must_use]
    pub fn players(&self) -> &[PlayerRecord] {
        &self.players
    }

    /// Take the records out.
    #[must_use]
    pub fn into_players(self) -> Vec<PlayerRecord> {
        self.players
    }

    /// Bytes after the last complete record (a cut datagram, §13.5); empty normally.
    #[must_use]
    pub fn trailing(&self) -> &[u8] {
        &self.trailing
    }

    /// Decode a whole `0x02` datagram. A record that does not fit stops decoding: the
    /// complete records are kept and the rest is [`Self::trailing`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, kind, payload) = split_header(bytes)?;
        if kind != Command::Players {
            return Err(DecodeError::BadMagic("players reply type"));
        }
        Ok(Self::decode_payload(version, payload))
    }

    fn decode_payload(version: u32, payload: &[u8]) -> Self {
        let xmp = version == VERSION_XMP;
        let mut r = Reader::new(payload);
        let mut players = Vec::new();
        while !r.is_empty() {
            let mut probe = r;
            match PlayerRecord::read(&mut probe, xmp) {
                Ok(p) => {
                    players.push(p);
                    r = probe;
                }
                Err(_) => break,
            }
        }
        Self {
            version,
            players,
            trailing: r.rest().to_vec(),
        }
    }

    /// Append the whole datagram, whatever its size (see [`encode_players`] for the split).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_header(out, self.version, Command::Players);
        for p in &self.players {
            p.encode(out);
        }
        out.extend_from_slice(&self.trailing);
    }
}

fn check_players(version: u32, players: &[PlayerRecord]) -> Result<(), BuildError> {
    let xmp = version == VERSION_XMP;
    for p in players {
        match &p.xmp {
            Some(_) if !xmp => {
                return Err(BuildError::Inconsistent("xmp extras in a non-xmp reply"));
            }
            None if xmp => return Err(BuildError::Inconsistent("xmp record without extras")),
            Some(x) if x.pairs.len() > MAX_XMP_PAIRS => {
                return Err(BuildError::TooLong("xmp pairs"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A `0x04` small-ping reply: `<version> 04 50` (§8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmallPingReply {
    /// The reply's version field.
    pub version: u32,
}

impl SmallPingReply {
    /// Decode a whole `0x04` datagram (exactly 6 bytes ending in `50`).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, kind, payload) = split_header(bytes)?;
        if kind != Command::SmallPing {
            return Err(DecodeError::BadMagic("small ping reply type"));
        }
        Self::decode_payload(version, payload)
    }

    fn decode_payload(version: u32, payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.u8("small ping payload")? != SMALL_PING_PAYLOAD {
            return Err(DecodeError::Invalid("small ping payload"));
        }
        r.finish("small ping reply")?;
        Ok(Self { version })
    }

    /// Append the 6 bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_header(out, self.version, Command::SmallPing);
        out.push(SMALL_PING_PAYLOAD);
    }
}

/// Any reply datagram, by its type byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reply {
    /// `0x00` (boxed: it is much larger than the other variants).
    Info(Box<InfoReply>),
    /// `0x01`.
    Rules(RulesReply),
    /// `0x02`.
    Players(PlayersReply),
    /// `0x04`.
    SmallPing(SmallPingReply),
    /// Any other type byte (`0x03`, Pariah's `0x10`–`0x13`, …), kept undecoded (§13.18).
    /// Decoding never yields this for the types above.
    Unknown {
        /// The version field.
        version: u32,
        /// The type byte.
        kind: u8,
        /// Everything after the header.
        payload: Vec<u8>,
    },
}

impl Reply {
    /// Decode one reply datagram. Fewer than 5 bytes is [`DecodeError::Truncated`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, kind, payload) = split_header(bytes)?;
        Ok(match kind {
            Command::Info => Self::Info(Box::new(InfoReply::decode_payload(version, payload)?)),
            Command::Rules => Self::Rules(RulesReply::decode_payload(version, payload)),
            Command::Players => Self::Players(PlayersReply::decode_payload(version, payload)),
            Command::SmallPing => {
                Self::SmallPing(SmallPingReply::decode_payload(version, payload)?)
            }
            other @ (Command::RulesAndPlayers | Command::Unknown(_)) => Self::Unknown {
                version,
                kind: other.into(),
                payload: payload.to_vec(),
            },
        })
    }

    /// Append the whole datagram.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Info(m) => m.encode(out),
            Self::Rules(m) => m.encode(out),
            Self::Players(m) => m.encode(out),
            Self::SmallPing(m) => m.encode(out),
            Self::Unknown {
                version,
                kind,
                payload,
            } => {
                put_header(out, *version, Command::from(*kind));
                out.extend_from_slice(payload);
            }
        }
    }
}

fn split_header(bytes: &[u8]) -> Result<(u32, Command, &[u8]), DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.u32_le("reply header")?;
    let kind = Command::from(r.u8("reply header")?);
    Ok((version, kind, r.rest()))
}

fn put_header(out: &mut Vec<u8>, version: u32, kind: Command) {
    out.extend_from_slice(&version.to_le_bytes());
    out.push(kind.into());
}

/// Write `records` the way a stock server does (§3): each datagram starts with the 5-byte
/// header, and before each record a datagram longer than [`SPLIT_THRESHOLD`] is closed.
/// With no records, one datagram is written if `always_one`, else none.
fn encode_split<T>(
    version: u32,
    kind: Command,
    records: &[T],
    always_one: bool,
    write: impl Fn(&T, &mut Vec<u8>),
    out: &mut Vec<Vec<u8>>,
) {
    if records.is_empty() {
        if always_one {
            let mut d = Vec::with_capacity(HEADER_LEN);
            put_header(&mut d, version, kind);
            out.push(d);
        }
        return;
    }
    let mut cur = Vec::with_capacity(SPLIT_THRESHOLD + 64);
    put_header(&mut cur, version, kind);
    for rec in records {
        if cur.len() > SPLIT_THRESHOLD {
            out.push(std::mem::take(&mut cur));
            put_header(&mut cur, version, kind);
        }
        write(rec, &mut cur);
    }
    out.push(cur);
}

/// The `0x01` datagrams a stock server sends for `pairs`, split per §3, appended to `out`.
/// An empty rule list still gets one header-only datagram (the command always answers).
pub fn encode_rules(version: u32, pairs: &[RulePair], out: &mut Vec<Vec<u8>>) {
    encode_split(version, Command::Rules, pairs, true, RulePair::encode, out);
}

/// The `0x02` datagrams a stock server sends for `players`, split per §3, appended to `out`:
/// **none** for an empty list (§7, §13.12). XMP extras are written as the records carry them;
/// build records consistent with `version` (see [`PlayersReply::new`]).
pub fn encode_players(version: u32, players: &[PlayerRecord], out: &mut Vec<Vec<u8>>) {
    encode_split(
        version,
        Command::Players,
        players,
        false,
        PlayerRecord::encode,
        out,
    );
}

/// What a game-server responder knows: one cached snapshot answered to every request (§10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSnapshot {
    /// The info record; its `version` is used for every reply.
    pub info: InfoReply,
    /// The rules, in order (`GamePassword` = `True` only when a password is needed).
    pub rules: Vec<RulePair>,
    /// Listed players (spectators included, bots not).
    pub players: Vec<PlayerRecord>,
}

impl ServerSnapshot {
    /// Append the datagrams a stock server sends for the request `datagram` (§2): nothing for
    /// anything but an exact 5-byte request with a known command.
    pub fn answer(&self, datagram: &[u8], out: &mut Vec<Vec<u8>>) {
        let Ok(request) = Request::decode(datagram) else {
            return;
        };
        let version = self.info.version;
        match request.command {
            Command::Info => {
                let mut d = Vec::new();
                self.info.encode(&mut d);
                out.push(d);
            }
            Command::Rules => encode_rules(version, &self.rules, out),
            Command::Players => encode_players(version, &self.players, out),
            Command::RulesAndPlayers => {
                encode_rules(version, &self.rules, out);
                encode_players(version, &self.players, out);
            }
            Command::SmallPing => {
                let mut d = Vec::new();
                SmallPingReply { version }.encode(&mut d);
                out.push(d);
            }
            Command::Unknown(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(text: &str) -> U2String {
        U2String::from_text(text).expect("short")
    }

    fn hex(s: &str) -> Vec<u8> {
        let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        hex::decode(clean).expect("hex")
    }

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    const INFO_UT2004: &str = "80000000000000000000611e000000000000074d7920537276000a444d2d52616e6b696e000c7844656174684d6174636800020000001000000000000000000000000231000000";

    fn info_ut2004() -> InfoReply {
        InfoReply::stock(
            Style::Ut2004,
            7777,
            s("My Srv"),
            s("DM-Rankin"),
            s("xDeathMatch"),
            2,
            16,
        )
    }

    #[test]
    fn decode_request() {
        assert_eq!(
            Request::decode(&[0x80, 0, 0, 0, 0x00]),
            Ok(Request::new(Command::Info))
        );
        assert_eq!(
            Request::decode(&[0x78, 0, 0, 0, 0x03]),
            Ok(Request {
                version: 0x78,
                command: Command::RulesAndPlayers
            })
        );
        assert_eq!(
            Request::decode(&[0xff, 0xff, 0xff, 0xff, 0x04]),
            Ok(Request {
                version: u32::MAX,
                command: Command::SmallPing
            })
        );
    }

    #[test]
    fn encode_request() {
        for (cmd, b) in [
            (Command::Info, 0u8),
            (Command::Rules, 1),
            (Command::Players, 2),
            (Command::RulesAndPlayers, 3),
            (Command::SmallPing, 4),
        ] {
            let out = enc(|o| Request::new(cmd).encode(o));
            assert_eq!(out, [0x80, 0, 0, 0, b]);
        }
    }

    #[test]
    fn decode_request_rejects_wrong_length_and_command() {
        assert_eq!(
            Request::decode(&[0x80, 0, 0]),
            Err(DecodeError::Truncated("request version"))
        );
        assert_eq!(
            Request::decode(&[0x80, 0, 0, 0]),
            Err(DecodeError::Truncated("request command"))
        );
        assert_eq!(
            Request::decode(&[0x80, 0, 0, 0, 0, 0]),
            Err(DecodeError::TrailingBytes(1, "request"))
        );
        assert_eq!(
            Request::decode(&[0x80, 0, 0, 0, 5]),
            Err(DecodeError::Invalid("request command"))
        );
    }

    #[test]
    fn decode_info() {
        assert_eq!(InfoReply::decode(&hex(INFO_UT2004)), Ok(info_ut2004()));
    }

    #[test]
    fn encode_info() {
        let mut out = vec![0xa5];
        info_ut2004().encode(&mut out);
        assert_eq!(out.get(1..), Some(&hex(INFO_UT2004)[..]));
    }

    #[test]
    fn decode_info_rejects_truncated_and_wrong_type() {
        let bytes = hex(INFO_UT2004);
        // Cut inside MaxPlayers: the strict part fails.
        assert_eq!(
            InfoReply::decode(bytes.get(..55).expect("long")),
            Err(DecodeError::Truncated("max players"))
        );
        assert_eq!(
            InfoReply::decode(&[0x80, 0, 0, 0]),
            Err(DecodeError::Truncated("reply header"))
        );
        assert_eq!(
            InfoReply::decode(&[0x80, 0, 0, 0, 1]),
            Err(DecodeError::BadMagic("info reply type"))
        );
    }

    #[test]
    fn decode_info_tail_fallback_keeps_trailing() {
        // UT2004 tail whose ServerInfo array is not empty: no layout fits.
        let mut bytes = hex(INFO_UT2004);
        bytes.truncate(bytes.len() - 2);
        bytes.extend_from_slice(&[0x01, 0x02, b'k', 0, 0x02, b'v', 0, 0x00]);
        let info = InfoReply::decode(&bytes).expect("decodes");
        assert_eq!(
            info.tail,
            InfoTail::Other {
                ping: Some(0),
                flags: Some(0),
                skill_level: Some(s("1")),
                trailing: vec![0x01, 0x02, b'k', 0, 0x02, b'v', 0, 0x00],
            }
        );
        assert_eq!(enc(|o| info.encode(o)), bytes);
    }

    fn rules_reply() -> RulesReply {
        RulesReply {
            version: VERSION_UT2004,
            pairs: vec![
                RulePair::from_text("AdminName", "Bob").expect("short"),
                RulePair::from_text("Mutator", "MutA").expect("short"),
            ],
            trailing: Vec::new(),
        }
    }

    const RULES: &str = "80000000010a41646d696e4e616d650004426f6200084d757461746f7200054d75744100";

    #[test]
    fn decode_rules() {
        assert_eq!(RulesReply::decode(&hex(RULES)), Ok(rules_reply()));
    }

    #[test]
    fn encode_rules_one_datagram() {
        let mut out = vec![0xa5];
        rules_reply().encode(&mut out);
        assert_eq!(out.get(1..), Some(&hex(RULES)[..]));
        let mut dgs = Vec::new();
        encode_rules(VERSION_UT2004, &rules_reply().pairs, &mut dgs);
        assert_eq!(dgs, vec![hex(RULES)]);
    }

    #[test]
    fn decode_rules_rejects_wrong_type_and_keeps_complete_pairs() {
        assert_eq!(
            RulesReply::decode(&[0x80, 0, 0, 0, 2]),
            Err(DecodeError::BadMagic("rules reply type"))
        );
        let mut bytes = hex(RULES);
        bytes.truncate(bytes.len() - 3);
        let r = RulesReply::decode(&bytes).expect("partial");
        assert_eq!(r.pairs.len(), 1);
        assert_eq!(r.trailing, hex("084d757461746f7200054d75"));
    }

    fn player_alpha() -> PlayerRecord {
        PlayerRecord {
            num: 3,
            name: s("Alpha"),
            ping: 40,
            score: 12,
            stats_id: TEAM_RED_BIT,
            xmp: None,
        }
    }

    const PLAYERS: &str = "80000000020300000006416c70686100280000000c00000000000020";

    #[test]
    fn decode_players() {
        let p = PlayersReply::decode(&hex(PLAYERS)).expect("decodes");
        assert_eq!(p.players(), &[player_alpha()]);
        assert_eq!(p.players().first().and_then(PlayerRecord::team), Some(0));
        assert!(p.trailing().is_empty());
    }

    #[test]
    fn encode_players_one_datagram() {
        let p = PlayersReply::new(VERSION_UT2004, vec![player_alpha()]).expect("valid");
        let mut out = vec![0xa5];
        p.encode(&mut out);
        assert_eq!(out.get(1..), Some(&hex(PLAYERS)[..]));
    }

    #[test]
    fn encode_players_empty_list_writes_nothing() {
        let mut dgs = Vec::new();
        encode_players(VERSION_UT2004, &[], &mut dgs);
        assert!(dgs.is_empty());
    }

    #[test]
    fn decode_players_rejects_wrong_type_and_keeps_complete_records() {
        assert_eq!(
            PlayersReply::decode(&[0x80, 0, 0, 0, 1]),
            Err(DecodeError::BadMagic("players reply type"))
        );
        let mut bytes = hex(PLAYERS);
        let one = bytes.clone();
        bytes.extend_from_slice(one.get(5..20).expect("long"));
        let p = PlayersReply::decode(&bytes).expect("partial");
        assert_eq!(p.players(), &[player_alpha()]);
        assert_eq!(p.trailing(), one.get(5..20).expect("long"));
    }

    fn xmp_player() -> PlayerRecord {
        PlayerRecord {
            num: 1,
            name: s("X"),
            ping: 8,
            score: -2,
            stats_id: TEAM_BLUE_BIT,
            xmp: Some(XmpExtra {
                player_id: 7,
                pairs: vec![RulePair::from_text("team", "1").expect("short")],
            }),
        }
    }

    const XMP_PLAYERS: &str =
        "7e00000002 01000000 07000000 025800 08000000 feffffff 00000040 01 057465616d00 023100";

    #[test]
    fn decode_players_xmp() {
        let p = PlayersReply::decode(&hex(XMP_PLAYERS)).expect("decodes");
        assert_eq!(p.players(), &[xmp_player()]);
        assert_eq!(p.players().first().and_then(PlayerRecord::team), Some(1));
    }

    #[test]
    fn encode_players_xmp() {
        let p = PlayersReply::new(VERSION_XMP, vec![xmp_player()]).expect("valid");
        assert_eq!(enc(|o| p.encode(o)), hex(XMP_PLAYERS));
    }

    #[test]
    fn build_players_rejects_inconsistent_xmp() {
        assert_eq!(
            PlayersReply::new(VERSION_UT2004, vec![xmp_player()]),
            Err(BuildError::Inconsistent("xmp extras in a non-xmp reply"))
        );
        assert_eq!(
            PlayersReply::new(VERSION_XMP, vec![player_alpha()]),
            Err(BuildError::Inconsistent("xmp record without extras"))
        );
    }

    #[test]
    fn decode_players_xmp_rejects_huge_pair_count() {
        // The record is cut at the count, so it lands in trailing, and the error is named.
        let mut r = Reader::new(&[
            1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0x04,
        ]);
        assert_eq!(
            PlayerRecord::read(&mut r, true),
            Err(DecodeError::TooLarge("xmp pair count"))
        );
    }

    #[test]
    fn decode_small_ping() {
        assert_eq!(
            SmallPingReply::decode(&[0x80, 0, 0, 0, 4, 0x50]),
            Ok(SmallPingReply { version: 0x80 })
        );
    }

    #[test]
    fn encode_small_ping() {
        let out = enc(|o| SmallPingReply { version: 0x80 }.encode(o));
        assert_eq!(out, [0x80, 0, 0, 0, 4, 0x50]);
    }

    #[test]
    fn decode_small_ping_rejects_bad_payload() {
        assert_eq!(
            SmallPingReply::decode(&[0x80, 0, 0, 0, 4, 0x51]),
            Err(DecodeError::Invalid("small ping payload"))
        );
        assert_eq!(
            SmallPingReply::decode(&[0x80, 0, 0, 0, 4, 0x50, 0]),
            Err(DecodeError::TrailingBytes(1, "small ping reply"))
        );
        assert_eq!(
            SmallPingReply::decode(&[0x80, 0, 0, 0, 4]),
            Err(DecodeError::Truncated("small ping payload"))
        );
    }

    #[test]
    fn decode_reply_dispatches_and_keeps_unknown() {
        assert!(matches!(
            Reply::decode(&hex(INFO_UT2004)),
            Ok(Reply::Info(_))
        ));
        assert!(matches!(Reply::decode(&hex(RULES)), Ok(Reply::Rules(_))));
        assert!(matches!(
            Reply::decode(&hex(PLAYERS)),
            Ok(Reply::Players(_))
        ));
        let pariah = [0x77, 0, 0, 0, 0x10, 1, 2];
        let r = Reply::decode(&pariah).expect("kept");
        assert_eq!(
            r,
            Reply::Unknown {
                version: 0x77,
                kind: 0x10,
                payload: vec![1, 2]
            }
        );
        assert_eq!(enc(|o| r.encode(o)), pariah);
        assert_eq!(
            Reply::decode(&[0x80, 0]),
            Err(DecodeError::Truncated("reply header"))
        );
    }

    #[test]
    fn responder_answers_commands_and_ignores_malformed() {
        let snap = ServerSnapshot {
            info: info_ut2004(),
            rules: rules_reply().pairs,
            players: vec![player_alpha()],
        };
        let ask = |req: &[u8]| {
            let mut out = Vec::new();
            snap.answer(req, &mut out);
            out
        };
        assert_eq!(ask(&[0x80, 0, 0, 0, 0]), vec![hex(INFO_UT2004)]);
        assert_eq!(ask(&[0x78, 0, 0, 0, 1]), vec![hex(RULES)]);
        assert_eq!(ask(&[0x79, 0, 0, 0, 2]), vec![hex(PLAYERS)]);
        assert_eq!(ask(&[0x80, 0, 0, 0, 3]), vec![hex(RULES), hex(PLAYERS)]);
        assert_eq!(ask(&[0x80, 0, 0, 0, 4]), vec![vec![0x80, 0, 0, 0, 4, 0x50]]);
        assert!(ask(&[0x80, 0, 0, 0, 5]).is_empty());
        assert!(ask(&[0x80, 0, 0, 0, 0, 0]).is_empty());
    }

    fn arb_string() -> impl Strategy<Value = U2String> {
        prop_oneof![
            "\\PC{0,20}".prop_map(|t| U2String::from_text(&t).expect("short")),
            proptest::collection::vec(any::<u8>(), 0..20)
                .prop_map(|b| U2String::narrow(b).expect("short")),
            proptest::collection::vec(any::<u16>(), 0..20)
                .prop_map(|u| U2String::wide(u).expect("short")),
        ]
    }

    fn arb_pair() -> impl Strategy<Value = RulePair> {
        (arb_string(), arb_string()).prop_map(|(key, value)| RulePair { key, value })
    }

    fn arb_player(xmp: bool) -> impl Strategy<Value = PlayerRecord> {
        (
            any::<i32>(),
            arb_string(),
            any::<i32>(),
            any::<i32>(),
            any::<u32>(),
            any::<i32>(),
            proptest::collection::vec(arb_pair(), 0..3),
        )
            .prop_map(
                move |(num, name, ping, score, stats_id, player_id, pairs)| PlayerRecord {
                    num,
                    name,
                    ping,
                    score,
                    stats_id,
                    xmp: xmp.then_some(XmpExtra { player_id, pairs }),
                },
            )
    }

    fn arb_tail() -> impl Strategy<Value = InfoTail> {
        prop_oneof![
            (any::<i32>(), any::<i32>(), arb_string()).prop_map(|(ping, flags, skill_level)| {
                InfoTail::Ut2004 {
                    ping,
                    flags,
                    skill_level,
                }
            }),
            (
                any::<i32>(),
                any::<i32>(),
                any::<i32>(),
                any::<i32>(),
                arb_string()
            )
                .prop_map(|(wave_current, wave_total, ping, flags, skill_level)| {
                    InfoTail::KillingFloor {
                        wave_current,
                        wave_total,
                        ping,
                        flags,
                        skill_level,
                    }
                }),
            (any::<i32>(), any::<bool>())
                .prop_map(|(ping, arrays)| InfoTail::Ut2003 { ping, arrays }),
        ]
    }

    proptest! {
        #[test]
        fn reply_decode_never_panics_and_reencodes_exactly(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(reply) = Reply::decode(&bytes) {
                let mut out = Vec::new();
                reply.encode(&mut out);
                prop_assert_eq!(&out, &bytes);
                prop_assert_eq!(Reply::decode(&out), Ok(reply));
            }
            let _ = Request::decode(&bytes);
        }

        #[test]
        fn reply_decode_of_mutated_info_never_panics(pos in 5usize..71, byte in any::<u8>()) {
            let mut bytes = hex(INFO_UT2004);
            if let Some(b) = bytes.get_mut(pos) { *b = byte; }
            if let Ok(reply) = Reply::decode(&bytes) {
                prop_assert_eq!(enc(|o| reply.encode(o)), bytes);
            }
        }

        #[test]
        fn rules_round_trip(version in any::<u32>(), pairs in proptest::collection::vec(arb_pair(), 0..40)) {
            let mut dgs = Vec::new();
            encode_rules(version, &pairs, &mut dgs);
            let mut back = Vec::new();
            for d in &dgs {
                let r = RulesReply::decode(d).expect("decodes");
                prop_assert!(r.trailing.is_empty());
                prop_assert_eq!(r.version, version);
                back.extend(r.pairs);
            }
            prop_assert_eq!(back, pairs);
        }

        #[test]
        fn players_round_trip(xmp in any::<bool>(), players in proptest::collection::vec(arb_player(false), 0..30), xplayers in proptest::collection::vec(arb_player(true), 0..30)) {
            let (version, players) = if xmp { (VERSION_XMP, xplayers) } else { (VERSION_UT2004, players) };
            let mut dgs = Vec::new();
            encode_players(version, &players, &mut dgs);
            prop_assert_eq!(dgs.is_empty(), players.is_empty());
            let mut back = Vec::new();
            for (i, d) in dgs.iter().enumerate() {
                // Only the last datagram may stay at or under the threshold.
                prop_assert!(i + 1 == dgs.len() || d.len() > SPLIT_THRESHOLD);
                let r = PlayersReply::decode(d).expect("decodes");
                prop_assert!(r.trailing().is_empty());
                back.extend(r.into_players());
            }
            prop_assert_eq!(back, players);
        }

        #[test]
        fn info_round_trip(version in any::<u32>(), name in arb_string(), map in arb_string(), current in any::<i32>(), max in any::<i32>(), port in any::<i32>(), tail in arb_tail()) {
            let info = InfoReply { version, server_id: 0, ip: U2String::empty(), port, query_port: 0, name, map, game_type: U2String::empty(), current_players: current, max_players: max, tail };
            let out = enc(|o| info.encode(o));
            let back = InfoReply::decode(&out).expect("decodes");
            // A constructed Killing Floor tail can, by chance, also read as a UT2004 one; the
            // bytes still match exactly.
            prop_assert_eq!(enc(|o| back.encode(o)), out);
            if !matches!(info.tail, InfoTail::KillingFloor { .. }) {
                prop_assert_eq!(back, info);
            }
        }
    }
}
