//! Every single-datagram A2S message, both directions (spec §2–§6).
//!
//! A message is `ff ff ff ff`, a type byte and a body. Requests are checked whole; replies are
//! read leniently where real servers are known to misbehave: PLAYER and RULES are read to the
//! end of the reply whatever count they declare, and a last entry cut short is dropped and
//! flagged (`truncated`) instead of failing the whole reply. Strings stay raw bytes here;
//! [`super::decode_text`] turns them into text.

use super::{MAX_DATAGRAM, MAX_MESSAGE, MAX_PLAYERS, MAX_RULES, SIMPLE_HEADER, THE_SHIP_APP_ID};
use crate::wire::{DecodeError, Reader};

/// A2S_INFO request type byte ('T').
pub const A2S_INFO: u8 = 0x54;
/// A2S_PLAYER request type byte ('U').
pub const A2S_PLAYER: u8 = 0x55;
/// A2S_RULES request type byte ('V').
pub const A2S_RULES: u8 = 0x56;
/// S2C_CHALLENGE reply type byte ('A').
pub const S2C_CHALLENGE: u8 = 0x41;
/// Source INFO reply type byte ('I').
pub const S2A_INFO: u8 = 0x49;
/// Obsolete GoldSrc INFO reply type byte ('m').
pub const S2A_INFO_GOLDSRC: u8 = 0x6D;
/// PLAYER reply type byte ('D').
pub const S2A_PLAYER: u8 = 0x44;
/// RULES reply type byte ('E').
pub const S2A_RULES: u8 = 0x45;

/// The payload of an A2S_INFO request, NUL included.
pub const INFO_PAYLOAD: &[u8] = b"Source Engine Query\0";

/// Extra-data flag: the game port follows (`u16`).
pub const EDF_PORT: u8 = 0x80;
/// Extra-data flag: the server's SteamID follows (`u64`).
pub const EDF_STEAM_ID: u8 = 0x10;
/// Extra-data flag: the SourceTV port (`u16`) and name (string) follow.
pub const EDF_SOURCE_TV: u8 = 0x40;
/// Extra-data flag: the keywords string follows.
pub const EDF_KEYWORDS: u8 = 0x20;
/// Extra-data flag: the 64-bit game id follows (its low 24 bits are the full app id).
pub const EDF_GAME_ID: u8 = 0x01;

/// One whole single datagram.
#[derive(Debug, Clone, PartialEq)]
pub enum Packet {
    /// A2S_INFO, with the challenge appended when the server asked for one.
    InfoRequest {
        /// The challenge from a previous S2C_CHALLENGE, or `None` for the plain request.
        challenge: Option<u32>,
    },
    /// A2S_PLAYER with a challenge ([`super::NO_CHALLENGE`] asks for one).
    PlayerRequest {
        /// The challenge, as the server sent it.
        challenge: u32,
    },
    /// A2S_RULES with a challenge ([`super::NO_CHALLENGE`] asks for one).
    RulesRequest {
        /// The challenge, as the server sent it.
        challenge: u32,
    },
    /// S2C_CHALLENGE: repeat the request with this value appended.
    Challenge(u32),
    /// The Source INFO reply (0x49).
    Info(Box<Info>),
    /// The obsolete GoldSrc INFO reply (0x6D).
    GoldSrcInfo(Box<GoldSrcInfo>),
    /// The PLAYER reply.
    Players(Players),
    /// The RULES reply.
    Rules(Rules),
}

/// The Ship's extra INFO fields (only when the app id is [`THE_SHIP_APP_ID`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TheShip {
    /// Game mode (0 hunt, 1 elimination, 2 duel, 3 deathmatch, 4 VIP team, 5 team elimination).
    pub mode: u8,
    /// Witnesses needed to arrest a player.
    pub witnesses: u8,
    /// Seconds before a player is arrested when witnessed.
    pub duration: u8,
}

/// The Source INFO reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Info {
    /// Protocol version the server speaks.
    pub protocol: u8,
    /// Server name.
    pub name: Vec<u8>,
    /// Current map.
    pub map: Vec<u8>,
    /// Game directory (`cstrike`, `tf`).
    pub folder: Vec<u8>,
    /// Game description.
    pub game: Vec<u8>,
    /// Low 16 bits of the Steam app id.
    pub app_id: u16,
    /// Players on the server (bots included).
    pub players: u8,
    /// Player slots.
    pub max_players: u8,
    /// Bots on the server.
    pub bots: u8,
    /// `d` dedicated, `l` listen, `p` SourceTV relay.
    pub server_type: u8,
    /// `l` Linux, `w` Windows, `m` or `o` macOS.
    pub environment: u8,
    /// 0 public, 1 password needed.
    pub visibility: u8,
    /// 0 unsecured, 1 VAC-secured.
    pub vac: u8,
    /// The Ship's fields; present exactly when `app_id` is The Ship's.
    pub the_ship: Option<TheShip>,
    /// Game version string.
    pub version: Vec<u8>,
    /// The extra-data flag byte, when sent. Fields below are present exactly for its bits.
    pub edf: Option<u8>,
    /// Game port ([`EDF_PORT`]).
    pub port: Option<u16>,
    /// Server SteamID ([`EDF_STEAM_ID`]).
    pub steam_id: Option<u64>,
    /// SourceTV port and name ([`EDF_SOURCE_TV`]).
    pub source_tv: Option<(u16, Vec<u8>)>,
    /// Keywords, usually comma-separated tags ([`EDF_KEYWORDS`]).
    pub keywords: Option<Vec<u8>>,
    /// 64-bit game id ([`EDF_GAME_ID`]).
    pub game_id: Option<u64>,
}

impl Info {
    /// The full app id: from the game id when sent (its low 24 bits), else the 16-bit field.
    #[must_use]
    pub fn full_app_id(&self) -> u32 {
        self.game_id.map_or(u32::from(self.app_id), |g| {
            u32::try_from(g & 0x00FF_FFFF).unwrap_or(0)
        })
    }
}

/// A GoldSrc mod's fields in the obsolete INFO reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModInfo {
    /// The mod's web site.
    pub link: Vec<u8>,
    /// Where to download the mod.
    pub download: Vec<u8>,
    /// Mod version.
    pub version: u32,
    /// Mod size in bytes.
    pub size: u32,
    /// 0 single and multiplayer, 1 multiplayer only.
    pub kind: u8,
    /// 0 Half-Life's DLL, 1 its own.
    pub dll: u8,
}

/// The obsolete GoldSrc INFO reply (0x6D).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GoldSrcInfo {
    /// `ip:port` of the server as text.
    pub address: Vec<u8>,
    /// Server name.
    pub name: Vec<u8>,
    /// Current map.
    pub map: Vec<u8>,
    /// Game directory.
    pub folder: Vec<u8>,
    /// Game description.
    pub game: Vec<u8>,
    /// Players on the server.
    pub players: u8,
    /// Player slots.
    pub max_players: u8,
    /// Protocol version.
    pub protocol: u8,
    /// `D` dedicated, `L` listen, `P` HLTV.
    pub server_type: u8,
    /// `L` Linux, `W` Windows.
    pub environment: u8,
    /// 0 public, 1 password needed.
    pub visibility: u8,
    /// The mod's fields when the mod byte is not 0.
    pub mod_info: Option<ModInfo>,
    /// 0 unsecured, 1 VAC-secured.
    pub vac: u8,
    /// Bots on the server.
    pub bots: u8,
}

/// The Ship's per-player fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShipPlayer {
    /// Deaths.
    pub deaths: i32,
    /// Money.
    pub money: i32,
}

/// One PLAYER entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlayerEntry {
    /// Index (servers send 0 for everyone nowadays).
    pub index: u8,
    /// Name.
    pub name: Vec<u8>,
    /// Score.
    pub score: i32,
    /// Seconds connected.
    pub duration: f32,
    /// The Ship's deaths and money, when the reply is The Ship's and carries them.
    pub ship: Option<ShipPlayer>,
}

/// The PLAYER reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Players {
    /// The count byte as sent (wraps on servers with 256 or more players).
    pub declared: u8,
    /// Every entry the reply holds.
    pub players: Vec<PlayerEntry>,
    /// True when the reply ended inside an entry (that entry is dropped).
    pub truncated: bool,
}

/// The RULES reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rules {
    /// The count as sent (may disagree with the pairs that follow).
    pub declared: u16,
    /// Every name/value pair the reply holds, in wire order.
    pub rules: Vec<(Vec<u8>, Vec<u8>)>,
    /// True when the reply ended inside a pair (that pair is dropped).
    pub truncated: bool,
}

impl Packet {
    /// Decode a single datagram (or a reassembled split reply). PLAYER replies are read without
    /// The Ship's fields; use [`Self::decode_for_app`] when the app id is known.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        Self::decode_for_app(datagram, None)
    }

    /// Decode knowing the server's app id (from its INFO reply): a PLAYER reply of The Ship is
    /// then read with its deaths and money.
    pub fn decode_for_app(datagram: &[u8], app_id: Option<u32>) -> Result<Self, DecodeError> {
        if datagram.len() > MAX_DATAGRAM.max(MAX_MESSAGE) {
            return Err(DecodeError::TooLarge("a2s message"));
        }
        let mut r = Reader::new(datagram);
        if r.array::<4>("a2s header")? != SIMPLE_HEADER {
            return Err(DecodeError::BadMagic("a2s header"));
        }
        match r.u8("a2s type")? {
            A2S_INFO => {
                if r.take(INFO_PAYLOAD.len(), "A2S_INFO payload")? != INFO_PAYLOAD {
                    return Err(DecodeError::Invalid("A2S_INFO payload"));
                }
                let challenge = if r.is_empty() {
                    None
                } else {
                    Some(r.u32_le("A2S_INFO challenge")?)
                };
                r.finish("A2S_INFO")?;
                Ok(Self::InfoRequest { challenge })
            }
            A2S_PLAYER => {
                let challenge = r.u32_le("A2S_PLAYER challenge")?;
                r.finish("A2S_PLAYER")?;
                Ok(Self::PlayerRequest { challenge })
            }
            A2S_RULES => {
                let challenge = r.u32_le("A2S_RULES challenge")?;
                r.finish("A2S_RULES")?;
                Ok(Self::RulesRequest { challenge })
            }
            S2C_CHALLENGE => {
                let c = r.u32_le("S2C_CHALLENGE")?;
                // Some servers pad the challenge reply; the four bytes are what counts.
                Ok(Self::Challenge(c))
            }
            S2A_INFO => decode_info(&mut r).map(|i| Self::Info(Box::new(i))),
            S2A_INFO_GOLDSRC => decode_goldsrc(&mut r).map(|i| Self::GoldSrcInfo(Box::new(i))),
            S2A_PLAYER => {
                let ship = app_id == Some(THE_SHIP_APP_ID);
                decode_players(&mut r, ship).map(Self::Players)
            }
            S2A_RULES => decode_rules(&mut r).map(Self::Rules),
            _ => Err(DecodeError::BadMagic("a2s type")),
        }
    }

    /// Append the datagram. Strings must not contain NUL (decoded ones never do).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&SIMPLE_HEADER);
        match self {
            Self::InfoRequest { challenge } => {
                out.push(A2S_INFO);
                out.extend_from_slice(INFO_PAYLOAD);
                if let Some(c) = challenge {
                    out.extend_from_slice(&c.to_le_bytes());
                }
            }
            Self::PlayerRequest { challenge } => {
                out.push(A2S_PLAYER);
                out.extend_from_slice(&challenge.to_le_bytes());
            }
            Self::RulesRequest { challenge } => {
                out.push(A2S_RULES);
                out.extend_from_slice(&challenge.to_le_bytes());
            }
            Self::Challenge(c) => {
                out.push(S2C_CHALLENGE);
                out.extend_from_slice(&c.to_le_bytes());
            }
            Self::Info(i) => encode_info(i, out),
            Self::GoldSrcInfo(i) => encode_goldsrc(i, out),
            Self::Players(p) => encode_players(p, out),
            Self::Rules(rules) => {
                out.push(S2A_RULES);
                out.extend_from_slice(&rules.declared.to_le_bytes());
                for (k, v) in &rules.rules {
                    put_cstr(out, k);
                    put_cstr(out, v);
                }
            }
        }
    }
}

fn put_cstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
    out.push(0);
}

fn cstr(r: &mut Reader<'_>, ctx: &'static str) -> Result<Vec<u8>, DecodeError> {
    // A string can never be longer than the message holding it, bounded by MAX_MESSAGE.
    r.cstr(ctx).map(<[u8]>::to_vec)
}

fn decode_info(r: &mut Reader<'_>) -> Result<Info, DecodeError> {
    let mut i = Info {
        protocol: r.u8("INFO protocol")?,
        name: cstr(r, "INFO name")?,
        map: cstr(r, "INFO map")?,
        folder: cstr(r, "INFO folder")?,
        game: cstr(r, "INFO game")?,
        app_id: r.u16_le("INFO app id")?,
        players: r.u8("INFO players")?,
        max_players: r.u8("INFO max players")?,
        bots: r.u8("INFO bots")?,
        server_type: r.u8("INFO server type")?,
        environment: r.u8("INFO environment")?,
        visibility: r.u8("INFO visibility")?,
        vac: r.u8("INFO vac")?,
        ..Info::default()
    };
    if u32::from(i.app_id) == THE_SHIP_APP_ID {
        i.the_ship = Some(TheShip {
            mode: r.u8("INFO ship mode")?,
            witnesses: r.u8("INFO ship witnesses")?,
            duration: r.u8("INFO ship duration")?,
        });
    }
    i.version = cstr(r, "INFO version")?;
    // Older servers end here; the flag byte and its fields are optional.
    let Some(edf) = r.peek() else {
        return Ok(i);
    };
    r.skip(1, "INFO EDF")?;
    i.edf = Some(edf);
    if edf & EDF_PORT != 0 {
        i.port = Some(r.u16_le("INFO EDF port")?);
    }
    if edf & EDF_STEAM_ID != 0 {
        i.steam_id = Some(u64::from_le_bytes(r.array("INFO EDF steam id")?));
    }
    if edf & EDF_SOURCE_TV != 0 {
        let port = r.u16_le("INFO EDF SourceTV port")?;
        i.source_tv = Some((port, cstr(r, "INFO EDF SourceTV name")?));
    }
    if edf & EDF_KEYWORDS != 0 {
        i.keywords = Some(cstr(r, "INFO EDF keywords")?);
    }
    if edf & EDF_GAME_ID != 0 {
        i.game_id = Some(u64::from_le_bytes(r.array("INFO EDF game id")?));
    }
    Ok(i)
}

fn encode_info(i: &Info, out: &mut Vec<u8>) {
    out.push(S2A_INFO);
    out.push(i.protocol);
    for s in [&i.name, &i.map, &i.folder, &i.game] {
        put_cstr(out, s);
    }
    out.extend_from_slice(&i.app_id.to_le_bytes());
    out.extend_from_slice(&[
        i.players,
        i.max_players,
        i.bots,
        i.server_type,
        i.environment,
        i.visibility,
        i.vac,
    ]);
    if let Some(s) = i.the_ship {
        out.extend_from_slice(&[s.mode, s.witnesses, s.duration]);
    }
    put_cstr(out, &i.version);
    let Some(edf) = i.edf else { return };
    out.push(edf);
    if edf & EDF_PORT != 0 {
        out.extend_from_slice(&i.port.unwrap_or_default().to_le_bytes());
    }
    if edf & EDF_STEAM_ID != 0 {
        out.extend_from_slice(&i.steam_id.unwrap_or_default().to_le_bytes());
    }
    if edf & EDF_SOURCE_TV != 0 {
        let (port, name) = i.source_tv.clone().unwrap_or_default();
        out.extend_from_slice(&port.to_le_bytes());
        put_cstr(out, &name);
    }
    if edf & EDF_KEYWORDS != 0 {
        put_cstr(out, i.keywords.as_deref().unwrap_or_default());
    }
    if edf & EDF_GAME_ID != 0 {
        out.extend_from_slice(&i.game_id.unwrap_or_default().to_le_bytes());
    }
}

fn decode_goldsrc(r: &mut Reader<'_>) -> Result<GoldSrcInfo, DecodeError> {
    let mut i = GoldSrcInfo {
        address: cstr(r, "GoldSrc INFO address")?,
        name: cstr(r, "GoldSrc INFO name")?,
        map: cstr(r, "GoldSrc INFO map")?,
        folder: cstr(r, "GoldSrc INFO folder")?,
        game: cstr(r, "GoldSrc INFO game")?,
        players: r.u8("GoldSrc INFO players")?,
        max_players: r.u8("GoldSrc INFO max players")?,
        protocol: r.u8("GoldSrc INFO protocol")?,
        server_type: r.u8("GoldSrc INFO server type")?,
        environment: r.u8("GoldSrc INFO environment")?,
        visibility: r.u8("GoldSrc INFO visibility")?,
        ..GoldSrcInfo::default()
    };
    if r.u8("GoldSrc INFO mod")? != 0 {
        let link = cstr(r, "GoldSrc INFO mod link")?;
        let download = cstr(r, "GoldSrc INFO mod download")?;
        // A byte the wiki documents as always NUL.
        r.skip(1, "GoldSrc INFO mod padding")?;
        i.mod_info = Some(ModInfo {
            link,
            download,
            version: r.u32_le("GoldSrc INFO mod version")?,
            size: r.u32_le("GoldSrc INFO mod size")?,
            kind: r.u8("GoldSrc INFO mod type")?,
            dll: r.u8("GoldSrc INFO mod dll")?,
        });
    }
    i.vac = r.u8("GoldSrc INFO vac")?;
    i.bots = r.u8("GoldSrc INFO bots")?;
    Ok(i)
}

fn encode_goldsrc(i: &GoldSrcInfo, out: &mut Vec<u8>) {
    out.push(S2A_INFO_GOLDSRC);
    for s in [&i.address, &i.name, &i.map, &i.folder, &i.game] {
        put_cstr(out, s);
    }
    out.extend_from_slice(&[
        i.players,
        i.max_players,
        i.protocol,
        i.server_type,
        i.environment,
        i.visibility,
    ]);
    match &i.mod_info {
        None => out.push(0),
        Some(m) => {
            out.push(1);
            put_cstr(out, &m.link);
            put_cstr(out, &m.download);
            out.push(0);
            out.extend_from_slice(&m.version.to_le_bytes());
            out.extend_from_slice(&m.size.to_le_bytes());
            out.extend_from_slice(&[m.kind, m.dll]);
        }
    }
    out.extend_from_slice(&[i.vac, i.bots]);
}

/// One entry, or `None` when the reply ends inside it (the reader is then left as it was).
fn player_entry(r: &mut Reader<'_>) -> Option<PlayerEntry> {
    let mut probe = *r;
    let index = probe.u8("PLAYER index").ok()?;
    let name = cstr(&mut probe, "PLAYER name").ok()?;
    let score = probe.i32_le("PLAYER score").ok()?;
    let duration = f32::from_le_bytes(probe.array("PLAYER duration").ok()?);
    *r = probe;
    Some(PlayerEntry {
        index,
        name,
        score,
        duration,
        ship: None,
    })
}

fn decode_players(r: &mut Reader<'_>, ship: bool) -> Result<Players, DecodeError> {
    let declared = r.u8("PLAYER count")?;
    let mut out = Players {
        declared,
        ..Players::default()
    };
    if ship {
        // The Ship appends deaths and money for every player after the list, so the list is
        // exactly as long as the count says.
        for _ in 0..declared {
            match player_entry(r) {
                Some(p) => out.players.push(p),
                None => {
                    out.truncated = true;
                    return Ok(out);
                }
            }
        }
        for p in &mut out.players {
            let (Ok(deaths), Ok(money)) = (r.i32_le("PLAYER deaths"), r.i32_le("PLAYER money"))
            else {
                out.truncated = true;
                break;
            };
            p.ship = Some(ShipPlayer { deaths, money });
        }
        return Ok(out);
    }
    while !r.is_empty() {
        if out.players.len() >= MAX_PLAYERS {
            return Err(DecodeError::TooLarge("PLAYER entries"));
        }
        match player_entry(r) {
            Some(p) => out.players.push(p),
            None => {
                out.truncated = true;
                break;
            }
        }
    }
    Ok(out)
}

fn encode_players(p: &Players, out: &mut Vec<u8>) {
    out.push(S2A_PLAYER);
    out.push(p.declared);
    for e in &p.players {
        out.push(e.index);
        put_cstr(out, &e.name);
        out.extend_from_slice(&e.score.to_le_bytes());
        out.extend_from_slice(&e.duration.to_le_bytes());
    }
    for s in p.players.iter().filter_map(|e| e.ship) {
        out.extend_from_slice(&s.deaths.to_le_bytes());
        out.extend_from_slice(&s.money.to_le_bytes());
    }
}

fn decode_rules(r: &mut Reader<'_>) -> Result<Rules, DecodeError> {
    let declared = r.u16_le("RULES count")?;
    let mut out = Rules {
        declared,
        ..Rules::default()
    };
    while !r.is_empty() {
        if out.rules.len() >= MAX_RULES {
            return Err(DecodeError::TooLarge("RULES pairs"));
        }
        let mut probe = *r;
        let (Ok(k), Ok(v)) = (probe.cstr("RULES name"), probe.cstr("RULES value")) else {
            out.truncated = true;
            break;
        };
        out.rules.push((k.to_vec(), v.to_vec()));
        *r = probe;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
