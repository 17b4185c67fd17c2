//! Server-info messages of the four families (spec §5 to §8), both directions.
//!
//! Every message type decodes from and encodes to its **payload** (from the 8-byte magic on);
//! [`Datagram`] adds the connless header of [`super::header`] and picks the message from the
//! header and the magic.

use crate::wire::{DecodeError, Reader};

use super::header::{Frame, Header, TokenMessage};
use super::value::{
    TwStr, read_decimal, read_decimal_u32, read_varint, write_decimal, write_varint,
};
use super::{
    MAGIC_DTSF, MAGIC_FSTD, MAGIC_GIE3, MAGIC_IEX_MORE, MAGIC_IEXT, MAGIC_INF3, MAGIC_LEN,
    MAX_PLAYERS_PREALLOC,
};

/// A 0.6-style info request: `gie3` (vanilla or, under an `xe` header, extended) or `fstd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetInfo {
    /// The token byte; the server echoes it (or, for `xe`, extra_token << 8 | token).
    pub token: u8,
}

impl GetInfo {
    fn decode_after_magic(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // DDNet ignores anything after the token byte (probe `ddnet-gie3-token-plus-junk`).
        let token = r.u8("request token")?;
        Ok(Self { token })
    }

    fn encode_after_magic(self, out: &mut Vec<u8>) {
        out.push(self.token);
    }
}

/// A 0.7 info request (`gie3` in 0.7 framing) with its varint browse token (§8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetInfo7 {
    /// The browse token the server echoes. Decoded as sent; `-1` crashes real servers and
    /// is never sent by [`super::query::TeeworldsQuery`].
    pub browse_token: i32,
}

/// One client in a 0.6-style reply (`inf3`, `dtsf`, `iext`, `iex+`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlayerRecord {
    /// Player name (server limit 15 bytes).
    pub name: TwStr,
    /// Clan (server limit 11 bytes).
    pub clan: TwStr,
    /// ISO 3166-1 numeric country, -1 = unset.
    pub country: i32,
    /// Score; DDNet's -9999 means "no time yet".
    pub score: i32,
    /// Non-zero = playing, 0 = spectator.
    pub is_player: i32,
    /// The reserved string of extended records; only `iext`/`iex+` carry it (always empty
    /// when decoded from `inf3`/`dtsf`, and not written there).
    pub reserved: TwStr,
}

/// One client in a 0.7 reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Player7 {
    /// Player name.
    pub name: TwStr,
    /// Clan.
    pub clan: TwStr,
    /// ISO 3166-1 numeric country, -1 = unset.
    pub country: i32,
    /// Score (with the time-score flag, a race time).
    pub score: i32,
    /// Bit 0 spectator, bit 1 bot.
    pub player_flags: i32,
}

/// The 0.6 `inf3` reply (§5.2): integers as decimal strings, at most 16 clients from real
/// servers (not enforced when decoding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Info {
    /// The request's token byte echoed (0..255), or DDNet's 24-bit echo in odd cases.
    pub token: i32,
    /// Version string.
    pub version: TwStr,
    /// Server name (DDNet appends ` [n/m]` when it has more than 16 slots).
    pub name: TwStr,
    /// Map name.
    pub map: TwStr,
    /// Game type.
    pub game_type: TwStr,
    /// Bit 0 = password.
    pub flags: i32,
    /// Clients that are not spectators.
    pub num_players: i32,
    /// Player slots.
    pub max_players: i32,
    /// All connected clients.
    pub num_clients: i32,
    /// Client slots.
    pub max_clients: i32,
    /// The listed clients.
    pub players: Vec<PlayerRecord>,
    /// True when the datagram ended inside a player record, which was dropped (quirk 10).
    /// Not encoded.
    pub truncated: bool,
}

/// DDNet's 64-slot legacy reply `dtsf` (§6): the `inf3` fields with real counts, then the
/// varint index of the first player in this packet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Info64 {
    /// The server fields, as in `inf3`; `info.players` are the clients of this packet.
    pub info: Info,
    /// Index of this packet's first player in the whole list (never negative on the wire).
    pub offset: u16,
}

/// DDNet's extended main reply `iext` (§7.2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoExtended {
    /// The 24-bit token echo, or -1 when the info was not requested.
    pub token: i32,
    /// Version string.
    pub version: TwStr,
    /// Server name (up to 256 bytes).
    pub name: TwStr,
    /// Map name.
    pub map: TwStr,
    /// CRC-32 of the map file (sent as a signed decimal).
    pub map_crc: u32,
    /// Size of the map file in bytes.
    pub map_size: u32,
    /// Game type.
    pub game_type: TwStr,
    /// Bit 0 = password.
    pub flags: i32,
    /// Clients that are not spectators.
    pub num_players: i32,
    /// Player slots.
    pub max_players: i32,
    /// All connected clients (the reassembly target).
    pub num_clients: i32,
    /// Client slots.
    pub max_clients: i32,
    /// Reserved string after the counts; senders write it empty.
    pub reserved: TwStr,
    /// The clients in this packet.
    pub players: Vec<PlayerRecord>,
    /// True when the datagram ended inside a player record, which was dropped. Not encoded.
    pub truncated: bool,
}

/// DDNet's extended continuation `iex+` (§7.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoMore {
    /// The same token as the main packet.
    pub token: i32,
    /// Packet number, 1..63 from real servers (not checked when decoding).
    pub packet_no: i32,
    /// Reserved string; senders write it empty.
    pub reserved: TwStr,
    /// The clients in this packet.
    pub players: Vec<PlayerRecord>,
    /// True when the datagram ended inside a player record, which was dropped. Not encoded.
    pub truncated: bool,
}

/// The server part of a 0.7 `inf3` reply (§8.4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Info7Body {
    /// Version string.
    pub version: TwStr,
    /// Server name.
    pub name: TwStr,
    /// Host name.
    pub hostname: TwStr,
    /// Map name.
    pub map: TwStr,
    /// Game type.
    pub game_type: TwStr,
    /// Bit 0 = password, bit 1 = time score.
    pub flags: i32,
    /// 0 casual, 1 normal, 2 competitive.
    pub skill_level: i32,
    /// Clients that are not spectators.
    pub num_players: i32,
    /// Player slots.
    pub max_players: i32,
    /// All connected clients.
    pub num_clients: i32,
    /// Client slots.
    pub max_clients: i32,
    /// The listed clients.
    pub players: Vec<Player7>,
    /// True when the datagram ended inside a player record, which was dropped. Not encoded.
    pub truncated: bool,
}

/// The 0.7 `inf3` reply: browse token echo, then the body unless the server dropped it
/// (DDNet with many players, quirk 11).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Info7 {
    /// The request's browse token, echoed.
    pub browse_token: i32,
    /// The info; `None` when the reply ends right after the browse token.
    pub body: Option<Info7Body>,
}

/// Any server-info message, by magic and framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `gie3` in 0.6 or `xe` framing.
    GetInfo(GetInfo),
    /// `fstd` (any framing).
    GetInfo64(GetInfo),
    /// `gie3` in 0.7 framing.
    GetInfo7(GetInfo7),
    /// `inf3` in 0.6 framing.
    Info(Info),
    /// `dtsf`.
    Info64(Info64),
    /// `iext`.
    InfoExtended(InfoExtended),
    /// `iex+`.
    InfoMore(InfoMore),
    /// `inf3` in 0.7 framing.
    Info7(Info7),
}

/// A whole datagram of the server-info protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datagram {
    /// A connless message and its header.
    Connless(Header, Message),
    /// A 0.7 TOKEN handshake message.
    Token(TokenMessage),
}

fn read_magic(r: &mut Reader<'_>) -> Result<[u8; MAGIC_LEN], DecodeError> {
    let magic: [u8; MAGIC_LEN] = r.array("magic")?;
    Ok(magic)
}

/// Read player records until the input ends. A record cut short by the end of the datagram
/// is dropped and reported through the returned flag; a malformed number is an error.
fn read_records<T>(
    r: &mut Reader<'_>,
    mut one: impl FnMut(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<(Vec<T>, bool), DecodeError> {
    let mut players = Vec::new();
    while !r.is_empty() {
        let mut attempt = *r;
        match one(&mut attempt) {
            Ok(p) => {
                players.push(p);
                *r = attempt;
            }
            Err(DecodeError::Truncated(_) | DecodeError::Unterminated(_)) => {
                r.rest();
                return Ok((players, true));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((players, false))
}

fn read_record06(r: &mut Reader<'_>, extended: bool) -> Result<PlayerRecord, DecodeError> {
    Ok(PlayerRecord {
        name: TwStr::read(r, "player name")?,
        clan: TwStr::read(r, "player clan")?,
        country: read_decimal(r, "player country")?,
        score: read_decimal(r, "player score")?,
        is_player: read_decimal(r, "player is_player")?,
        reserved: if extended {
            TwStr::read(r, "player reserved")?
        } else {
            TwStr::empty()
        },
    })
}

fn write_record06(p: &PlayerRecord, out: &mut Vec<u8>, extended: bool) {
    p.name.write(out);
    p.clan.write(out);
    write_decimal(out, p.country.into());
    write_decimal(out, p.score.into());
    write_decimal(out, p.is_player.into());
    if extended {
        p.reserved.write(out);
    }
}

impl PlayerRecord {
    /// The encoded length in an `iext`/`iex+` (`extended`) or `inf3`/`dtsf` packet.
    #[must_use]
    pub fn encoded_len(&self, extended: bool) -> usize {
        let mut out = Vec::with_capacity(64);
        write_record06(self, &mut out, extended);
        out.len()
    }
}

impl Info {
    /// Decode an `inf3` payload in 0.6 format, magic included.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if read_magic(&mut r)? != MAGIC_INF3 {
            return Err(DecodeError::BadMagic("inf3"));
        }
        Self::decode_fields(&mut r, false)
    }

    /// The ten server fields (and, unless `has_offset`, the records).
    fn decode_fields(r: &mut Reader<'_>, dtsf: bool) -> Result<Self, DecodeError> {
        let mut info = Self {
            token: read_decimal(r, "token")?,
            version: TwStr::read(r, "version")?,
            name: TwStr::read(r, "name")?,
            map: TwStr::read(r, "map")?,
            game_type: TwStr::read(r, "game type")?,
            flags: read_decimal(r, "flags")?,
            num_players: read_decimal(r, "num_players")?,
            max_players: read_decimal(r, "max_players")?,
            num_clients: read_decimal(r, "num_clients")?,
            max_clients: read_decimal(r, "max_clients")?,
            ..Self::default()
        };
        if !dtsf {
            let (players, truncated) = read_records(r, |r| read_record06(r, false))?;
            info.players = players;
            info.truncated = truncated;
        }
        Ok(info)
    }

    /// Append the payload, magic included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC_INF3);
        self.encode_fields(out);
        self.encode_records(out);
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        write_decimal(out, self.token.into());
        self.version.write(out);
        self.name.write(out);
        self.map.write(out);
        self.game_type.write(out);
        for n in [
            self.flags,
            self.num_players,
            self.max_players,
            self.num_clients,
            self.max_clients,
        ] {
            write_decimal(out, n.into());
        }
    }

    fn encode_records(&self, out: &mut Vec<u8>) {
        for p in &self.players {
            write_record06(p, out, false);
        }
    }
}

impl Info64 {
    /// Decode a `dtsf` payload, magic included. A negative offset is `Invalid`.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if read_magic(&mut r)? != MAGIC_DTSF {
            return Err(DecodeError::BadMagic("dtsf"));
        }
        let mut info = Info::decode_fields(&mut r, true)?;
        let offset = read_varint(&mut r, "dtsf player offset")?;
        if offset < 0 {
            return Err(DecodeError::Invalid("dtsf player offset"));
        }
        let offset =
            u16::try_from(offset).map_err(|_| DecodeError::TooLarge("dtsf player offset"))?;
        let (players, truncated) = read_records(&mut r, |r| read_record06(r, false))?;
        info.players = players;
        info.truncated = truncated;
        Ok(Self { info, offset })
    }

    /// Append the payload, magic included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC_DTSF);
        self.info.encode_fields(out);
        write_varint(out, self.offset.into());
        self.info.encode_records(out);
    }
}

impl InfoExtended {
    /// Decode an `iext` payload, magic included.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if read_magic(&mut r)? != MAGIC_IEXT {
            return Err(DecodeError::BadMagic("iext"));
        }
        let r = &mut r;
        let mut info = Self {
            token: read_decimal(r, "token")?,
            version: TwStr::read(r, "version")?,
            name: TwStr::read(r, "name")?,
            map: TwStr::read(r, "map")?,
            map_crc: read_decimal_u32(r, "map crc")?,
            map_size: {
                let n = read_decimal(r, "map size")?;
                u32::try_from(n).map_err(|_| DecodeError::BadNumber("map size"))?
            },
            game_type: TwStr::read(r, "game type")?,
            flags: read_decimal(r, "flags")?,
            num_players: read_decimal(r, "num_players")?,
            max_players: read_decimal(r, "max_players")?,
            num_clients: read_decimal(r, "num_clients")?,
            max_clients: read_decimal(r, "max_clients")?,
            reserved: TwStr::read(r, "reserved")?,
            ..Self::default()
        };
        let (players, truncated) = read_records(r, |r| read_record06(r, true))?;
        info.players = players;
        info.truncated = truncated;
        Ok(info)
    }

    /// Append the payload, magic included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_head(out);
        for p in &self.players {
            write_record06(p, out, true);
        }
    }

    /// Magic and server fields, without player records.
    pub(crate) fn encode_head(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC_IEXT);
        write_decimal(out, self.token.into());
        self.version.write(out);
        self.name.write(out);
        self.map.write(out);
        // DDNet prints the CRC as a signed 32-bit number.
        write_decimal(out, i32::from_ne_bytes(self.map_crc.to_ne_bytes()).into());
        write_decimal(out, self.map_size.into());
        self.game_type.write(out);
        for n in [
            self.flags,
            self.num_players,
            self.max_players,
            self.num_clients,
            self.max_clients,
        ] {
            write_decimal(out, n.into());
        }
        self.reserved.write(out);
    }
}

impl InfoMore {
    /// Decode an `iex+` payload, magic included.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if read_magic(&mut r)? != MAGIC_IEX_MORE {
            return Err(DecodeError::BadMagic("iex+"));
        }
        let token = read_decimal(&mut r, "token")?;
        let packet_no = read_decimal(&mut r, "packet_no")?;
        let reserved = TwStr::read(&mut r, "reserved")?;
        let (players, truncated) = read_records(&mut r, |r| read_record06(r, true))?;
        Ok(Self {
            token,
            packet_no,
            reserved,
            players,
            truncated,
        })
    }

    /// Append the payload, magic included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_head(out);
        for p in &self.players {
            write_record06(p, out, true);
        }
    }

    pub(crate) fn encode_head(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC_IEX_MORE);
        write_decimal(out, self.token.into());
        write_decimal(out, self.packet_no.into());
        self.reserved.write(out);
    }
}

impl Player7 {
    /// Append the record as a 0.7 `inf3` carries it.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        self.name.write(out);
        self.clan.write(out);
        write_varint(out, self.country);
        write_varint(out, self.score);
        write_varint(out, self.player_flags);
    }
}

fn read_player7(r: &mut Reader<'_>) -> Result<Player7, DecodeError> {
    Ok(Player7 {
        name: TwStr::read(r, "player name")?,
        clan: TwStr::read(r, "player clan")?,
        country: read_varint(r, "player country")?,
        score: read_varint(r, "player score")?,
        player_flags: read_varint(r, "player flags")?,
    })
}

impl Info7 {
    /// Decode a 0.7 `inf3` payload, magic included.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if read_magic(&mut r)? != MAGIC_INF3 {
            return Err(DecodeError::BadMagic("inf3"));
        }
        let browse_token = read_varint(&mut r, "browse token")?;
        if r.is_empty() {
            return Ok(Self {
                browse_token,
                body: None,
            });
        }
        let r = &mut r;
        let mut body = Info7Body {
            version: TwStr::read(r, "version")?,
            name: TwStr::read(r, "name")?,
            hostname: TwStr::read(r, "hostname")?,
            map: TwStr::read(r, "map")?,
            game_type: TwStr::read(r, "game type")?,
            flags: read_varint(r, "flags")?,
            skill_level: read_varint(r, "skill level")?,
            num_players: read_varint(r, "num_players")?,
            max_players: read_varint(r, "max_players")?,
            num_clients: read_varint(r, "num_clients")?,
            max_clients: read_varint(r, "max_clients")?,
            ..Info7Body::default()
        };
        let (players, truncated) = read_records(r, read_player7)?;
        body.players = players;
        body.truncated = truncated;
        Ok(Self {
            browse_token,
            body: Some(body),
        })
    }

    /// Append the payload, magic included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC_INF3);
        write_varint(out, self.browse_token);
        let Some(b) = &self.body else { return };
        b.version.write(out);
        b.name.write(out);
        b.hostname.write(out);
        b.map.write(out);
        b.game_type.write(out);
        for n in [
            b.flags,
            b.skill_level,
            b.num_players,
            b.max_players,
            b.num_clients,
            b.max_clients,
        ] {
            write_varint(out, n);
        }
        for p in &b.players {
            p.encode(out);
        }
    }
}

impl Message {
    /// Decode a payload (from the magic on); `sixup` says whether it came in 0.7 framing,
    /// which changes the meaning of `gie3` and `inf3`.
    pub fn decode(payload: &[u8], sixup: bool) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let magic = read_magic(&mut r)?;
        Ok(match magic {
            MAGIC_GIE3 if sixup => Self::GetInfo7(GetInfo7 {
                browse_token: read_varint(&mut r, "browse token")?,
            }),
            MAGIC_GIE3 => Self::GetInfo(GetInfo::decode_after_magic(&mut r)?),
            MAGIC_FSTD => Self::GetInfo64(GetInfo::decode_after_magic(&mut r)?),
            MAGIC_INF3 if sixup => Self::Info7(Info7::decode(payload)?),
            MAGIC_INF3 => Self::Info(Info::decode(payload)?),
            MAGIC_DTSF => Self::Info64(Info64::decode(payload)?),
            MAGIC_IEXT => Self::InfoExtended(InfoExtended::decode(payload)?),
            MAGIC_IEX_MORE => Self::InfoMore(InfoMore::decode(payload)?),
            _ => return Err(DecodeError::BadMagic("teeworlds magic")),
        })
    }

    /// Append the payload, magic included.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::GetInfo(m) => {
                out.extend_from_slice(&MAGIC_GIE3);
                m.encode_after_magic(out);
            }
            Self::GetInfo64(m) => {
                out.extend_from_slice(&MAGIC_FSTD);
                m.encode_after_magic(out);
            }
            Self::GetInfo7(m) => {
                out.extend_from_slice(&MAGIC_GIE3);
                write_varint(out, m.browse_token);
            }
            Self::Info(m) => m.encode(out),
            Self::Info64(m) => m.encode(out),
            Self::InfoExtended(m) => m.encode(out),
            Self::InfoMore(m) => m.encode(out),
            Self::Info7(m) => m.encode(out),
        }
    }
}

impl Datagram {
    /// Decode a whole UDP payload.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        match Frame::split(datagram)? {
            Frame::Token(t) => Ok(Self::Token(t)),
            Frame::Connless(h, payload) => {
                Message::decode(payload, h.is_sixup()).map(|m| Self::Connless(h, m))
            }
        }
    }

    /// Append the whole UDP payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Token(t) => t.encode(out),
            Self::Connless(h, m) => {
                h.encode(out);
                m.encode(out);
            }
        }
    }
}

/// How many records to preallocate for a reply claiming `n` clients.
pub(crate) fn prealloc(n: i32) -> usize {
    usize::try_from(n).unwrap_or(0).min(MAX_PLAYERS_PREALLOC)
}

#[cfg(test)]
mod tests;
