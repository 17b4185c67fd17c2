//! Building the replies a stock server sends, from one description of the server.
//!
//! The responder of a later layer keeps a [`ServerDescription`] and asks it for the reply of
//! each family; the shaping follows DDNet 16.4 (spec §5.3, §6, §7.4) so the output is byte
//! for byte what DDNet sends for the same state. Strings are cut to the server-side limits of
//! §4.1 at code-point boundaries, as DDNet does.
//!
//! Not here: which requests to answer, token checks, rate limits.

use super::packet::{
    Info, Info7, Info7Body, Info64, InfoExtended, InfoMore, Player7, PlayerRecord,
};
use super::value::TwStr;
use super::{
    BuildError, EXTENDED_SPLIT_AT, LEGACY64_CLIENTS_PER_PACKET, MAX_CLIENTS, VANILLA_MAX_CLIENTS,
};

/// Longest version string a server sends (bytes, without NUL).
pub const MAX_VERSION_LEN: usize = 32;
/// Longest server name in `inf3` and `dtsf`.
pub const MAX_NAME_LEN_06: usize = 64;
/// Longest server name in `iext`.
pub const MAX_NAME_LEN_EXTENDED: usize = 256;
/// Longest host name (0.7 only).
pub const MAX_HOSTNAME_LEN: usize = 128;
/// Longest map name.
pub const MAX_MAP_LEN: usize = 32;
/// Longest game type.
pub const MAX_GAME_TYPE_LEN: usize = 16;
/// Longest player name.
pub const MAX_PLAYER_NAME_LEN: usize = 15;
/// Longest clan.
pub const MAX_CLAN_LEN: usize = 11;
/// Largest 0.7 payload: 1400-byte datagram minus the 9-byte header.
pub const MAX_PAYLOAD_07: usize = 1391;
/// Flags bit: a password is required.
pub const FLAG_PASSWORD: i32 = 1;
/// 0.7 flags bit: the score is a race time.
pub const FLAG_TIME_SCORE: i32 = 2;
/// 0.7 player flags bit: spectator.
pub const PLAYER_FLAG_SPECTATOR: i32 = 1;
/// 0.7 player flags bit: bot.
pub const PLAYER_FLAG_BOT: i32 = 2;

/// One connected client, as a responder knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Client {
    /// Player name.
    pub name: TwStr,
    /// Clan.
    pub clan: TwStr,
    /// ISO 3166-1 numeric country, -1 = unset.
    pub country: i32,
    /// Score as the 0.6 families send it.
    pub score: i32,
    /// False for spectators.
    pub is_player: bool,
    /// True for bots (0.7 player flag bit 1 only).
    pub is_bot: bool,
}

/// Everything a server says about itself, in any family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerDescription {
    /// Version string (DDNet: "0.6.4, 16.4").
    pub version: TwStr,
    /// Server name.
    pub name: TwStr,
    /// Host name (0.7 only).
    pub hostname: TwStr,
    /// Map name.
    pub map: TwStr,
    /// CRC-32 of the map file (`iext`).
    pub map_crc: u32,
    /// Map file size in bytes (`iext`).
    pub map_size: u32,
    /// Game type.
    pub game_type: TwStr,
    /// Whether a password is required.
    pub password: bool,
    /// 0.7 skill level.
    pub skill_level: i32,
    /// 0.7 time-score flag.
    pub time_score: bool,
    /// Player slots.
    pub max_players: i32,
    /// Client slots.
    pub max_clients: i32,
    clients: Vec<Client>,
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl ServerDescription {
    /// Set the connected clients, in slot order; at most [`MAX_CLIENTS`].
    pub fn set_clients(&mut self, clients: Vec<Client>) -> Result<(), BuildError> {
        if clients.len() > MAX_CLIENTS {
            return Err(BuildError::TooManyClients);
        }
        self.clients = clients;
        Ok(())
    }

    /// The connected clients.
    #[must_use]
    pub fn clients(&self) -> &[Client] {
        &self.clients
    }

    fn num_players(&self) -> usize {
        self.clients.iter().filter(|c| c.is_player).count()
    }

    fn flags06(&self) -> i32 {
        if self.password { FLAG_PASSWORD } else { 0 }
    }

    /// The 0.6-style record of `c`; the reserved string stays empty, as DDNet writes it.
    fn record(c: &Client) -> PlayerRecord {
        PlayerRecord {
            name: c.name.truncated(MAX_PLAYER_NAME_LEN),
            clan: c.clan.truncated(MAX_CLAN_LEN),
            country: c.country,
            score: c.score,
            is_player: i32::from(c.is_player),
            reserved: TwStr::empty(),
        }
    }

    /// The vanilla `inf3` with DDNet's 16-client squeeze (§5.3): counts capped at 16 (15
    /// clients while not full), the first 16 clients listed, and ` [clients/max]` appended to
    /// the name when there are more than 16 slots.
    #[must_use]
    pub fn vanilla(&self, token: u8) -> Info {
        let real_clients = self.clients.len();
        let real_max = usize::try_from(self.max_clients).unwrap_or(0);
        let mut clients = real_clients;
        if clients >= VANILLA_MAX_CLIENTS {
            clients = if clients < real_max {
                VANILLA_MAX_CLIENTS - 1
            } else {
                VANILLA_MAX_CLIENTS
            };
        }
        let players = self.num_players().min(clients);
        let name = if real_max > VANILLA_MAX_CLIENTS {
            let mut n = self.name.as_bytes().to_vec();
            n.extend_from_slice(format!(" [{real_clients}/{real_max}]").as_bytes());
            TwStr::new(n).unwrap_or_default()
        } else {
            self.name.clone()
        };
        let cap = count(VANILLA_MAX_CLIENTS);
        Info {
            token: token.into(),
            version: self.version.truncated(MAX_VERSION_LEN),
            name: name.truncated(MAX_NAME_LEN_06),
            map: self.map.truncated(MAX_MAP_LEN),
            game_type: self.game_type.truncated(MAX_GAME_TYPE_LEN),
            flags: self.flags06(),
            num_players: count(players),
            max_players: self.max_players.min(cap),
            num_clients: count(clients),
            max_clients: self.max_clients.min(cap),
            players: self
                .clients
                .iter()
                .take(VANILLA_MAX_CLIENTS)
                .map(Self::record)
                .collect(),
            truncated: false,
        }
    }

    /// The `dtsf` packets: real counts, 24 clients per packet, at least one packet.
    #[must_use]
    pub fn legacy64(&self, token: u8) -> Vec<Info64> {
        let base = Info {
            token: token.into(),
            version: self.version.truncated(MAX_VERSION_LEN),
            name: self.name.truncated(MAX_NAME_LEN_06),
            map: self.map.truncated(MAX_MAP_LEN),
            game_type: self.game_type.truncated(MAX_GAME_TYPE_LEN),
            flags: self.flags06(),
            num_players: count(self.num_players()),
            max_players: self.max_players,
            num_clients: count(self.clients.len()),
            max_clients: self.max_clients,
            players: Vec::new(),
            truncated: false,
        };
        let mut out = Vec::new();
        for (i, chunk) in self.clients.chunks(LEGACY64_CLIENTS_PER_PACKET).enumerate() {
            let mut info = base.clone();
            info.players = chunk.iter().map(Self::record).collect();
            out.push(Info64 {
                info,
                offset: u16::try_from(i * LEGACY64_CLIENTS_PER_PACKET).unwrap_or(u16::MAX),
            });
        }
        if out.is_empty() {
            out.push(Info64 {
                info: base,
                offset: 0,
            });
        }
        out
    }

    /// The `iext` main packet and its `iex+` continuations, split as DDNet does (§7.4): a
    /// record that would bring a payload to [`EXTENDED_SPLIT_AT`] bytes opens the next
    /// packet. `token` is the 24-bit echo, or -1 for an unsolicited info.
    #[must_use]
    pub fn extended(&self, token: i32) -> (InfoExtended, Vec<InfoMore>) {
        let mut main = InfoExtended {
            token,
            version: self.version.truncated(MAX_VERSION_LEN),
            name: self.name.truncated(MAX_NAME_LEN_EXTENDED),
            map: self.map.truncated(MAX_MAP_LEN),
            map_crc: self.map_crc,
            map_size: self.map_size,
            game_type: self.game_type.truncated(MAX_GAME_TYPE_LEN),
            flags: self.flags06(),
            num_players: count(self.num_players()),
            max_players: self.max_players,
            num_clients: count(self.clients.len()),
            max_clients: self.max_clients,
            reserved: TwStr::empty(),
            players: Vec::new(),
            truncated: false,
        };
        let mut head = Vec::new();
        main.encode_head(&mut head);
        let mut size = head.len();
        let mut more: Vec<InfoMore> = Vec::new();
        for c in &self.clients {
            let rec = Self::record(c);
            let len = rec.encoded_len(true);
            if size + len >= EXTENDED_SPLIT_AT {
                let next = InfoMore {
                    token,
                    packet_no: count(more.len() + 1),
                    reserved: TwStr::empty(),
                    players: Vec::new(),
                    truncated: false,
                };
                head.clear();
                next.encode_head(&mut head);
                size = head.len();
                more.push(next);
            }
            size += len;
            match more.last_mut() {
                Some(m) => m.players.push(rec),
                None => main.players.push(rec),
            }
        }
        (main, more)
    }

    /// The 0.7 `inf3`: real counts; as many clients as fit one datagram (the counts stay
    /// true, unlike DDNet, which drops the whole body when it overflows).
    #[must_use]
    pub fn sixup(&self, browse_token: i32) -> Info7 {
        let mut flags = self.flags06();
        if self.time_score {
            flags |= FLAG_TIME_SCORE;
        }
        let mut body = Info7Body {
            version: self.version.truncated(MAX_VERSION_LEN),
            name: self.name.truncated(MAX_NAME_LEN_06),
            hostname: self.hostname.truncated(MAX_HOSTNAME_LEN),
            map: self.map.truncated(MAX_MAP_LEN),
            game_type: self.game_type.truncated(MAX_GAME_TYPE_LEN),
            flags,
            skill_level: self.skill_level,
            num_players: count(self.num_players()),
            max_players: self.max_players,
            num_clients: count(self.clients.len()),
            max_clients: self.max_clients.max(count(self.clients.len())),
            players: Vec::new(),
            truncated: false,
        };
        // The size so far, then each record's own size: one encode of the head, not one of
        // the whole reply per client.
        let mut buf = Vec::new();
        Info7 {
            browse_token,
            body: Some(body.clone()),
        }
        .encode(&mut buf);
        let mut size = buf.len();
        for c in &self.clients {
            let mut player_flags = 0;
            if !c.is_player {
                player_flags |= PLAYER_FLAG_SPECTATOR;
            }
            if c.is_bot {
                player_flags |= PLAYER_FLAG_BOT;
            }
            let player = Player7 {
                name: c.name.truncated(MAX_PLAYER_NAME_LEN),
                clan: c.clan.truncated(MAX_CLAN_LEN),
                country: c.country,
                score: c.score,
                player_flags,
            };
            buf.clear();
            player.encode(&mut buf);
            if size + buf.len() > MAX_PAYLOAD_07 {
                break;
            }
            size += buf.len();
            body.players.push(player);
        }
        Info7 {
            browse_token,
            body: Some(body),
        }
    }
}

impl From<&InfoExtended> for ServerDescription {
    /// The description a DDNet server reveals in its main packet (clients not included:
    /// add them with [`ServerDescription::set_clients`]).
    fn from(i: &InfoExtended) -> Self {
        Self {
            version: i.version.clone(),
            name: i.name.clone(),
            hostname: TwStr::empty(),
            map: i.map.clone(),
            map_crc: i.map_crc,
            map_size: i.map_size,
            game_type: i.game_type.clone(),
            password: i.flags & FLAG_PASSWORD != 0,
            skill_level: 0,
            time_score: false,
            max_players: i.max_players,
            max_clients: i.max_clients,
            clients: Vec::new(),
        }
    }
}

impl From<&PlayerRecord> for Client {
    fn from(p: &PlayerRecord) -> Self {
        Self {
            name: p.name.clone(),
            clan: p.clan.clone(),
            country: p.country,
            score: p.score,
            is_player: p.is_player != 0,
            is_bot: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::teeworlds::{MAX_EXTENDED_PACKET_NO, MAX_PAYLOAD_06};

    /// [`MAX_CLIENTS`] of the longest records (names and clans at their limits, the widest
    /// numbers) fit the extended format's 64 packets, each within one 0.6 payload.
    #[test]
    fn max_clients_of_the_longest_records_fit_the_extended_packets() {
        let mut d = ServerDescription {
            version: TwStr::new(vec![b'v'; MAX_VERSION_LEN]).unwrap(),
            name: TwStr::new(vec![b'n'; MAX_NAME_LEN_EXTENDED]).unwrap(),
            map: TwStr::new(vec![b'm'; MAX_MAP_LEN]).unwrap(),
            game_type: TwStr::new(vec![b'g'; MAX_GAME_TYPE_LEN]).unwrap(),
            map_crc: u32::MAX,
            map_size: u32::MAX,
            max_players: i32::MIN,
            max_clients: i32::MIN,
            ..ServerDescription::default()
        };
        let longest = Client {
            name: TwStr::new(vec![b'N'; MAX_PLAYER_NAME_LEN]).unwrap(),
            clan: TwStr::new(vec![b'C'; MAX_CLAN_LEN]).unwrap(),
            country: i32::MIN,
            score: i32::MIN,
            is_player: true,
            is_bot: false,
        };
        d.set_clients(vec![longest; MAX_CLIENTS]).unwrap();
        assert_eq!(
            d.set_clients(vec![Client::default(); MAX_CLIENTS + 1]),
            Err(BuildError::TooManyClients)
        );
        let (main, more) = d.extended(i32::MIN);
        assert!(more.len() <= usize::try_from(MAX_EXTENDED_PACKET_NO).unwrap());
        let mut records = main.players.len();
        let mut buf = Vec::new();
        main.encode(&mut buf);
        assert!(buf.len() <= MAX_PAYLOAD_06, "main: {}", buf.len());
        for m in &more {
            buf.clear();
            m.encode(&mut buf);
            assert!(
                buf.len() <= MAX_PAYLOAD_06,
                "iex+ {}: {}",
                m.packet_no,
                buf.len()
            );
            records += m.players.len();
        }
        assert_eq!(records, MAX_CLIENTS);
    }
}
