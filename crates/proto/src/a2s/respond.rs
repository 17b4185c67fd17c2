//! The game server's side: answering A2S_INFO, A2S_PLAYER and A2S_RULES as a Source, GoldSrc
//! or The Ship server does (`docs/protocols/valve.md`).
//!
//! | style | INFO | split layout | players |
//! |---|---|---|---|
//! | `source` (default) | `0x49`, app id 240, extra data: game port and game id | Source, with the size field | index, name, score, duration |
//! | `goldsrc` | `0x49` (as current GoldSrc builds answer), protocol 48, app id 10 | GoldSrc (number and total in one byte) | the same |
//! | `ship` | `0x49` with The Ship's mode, witnesses and duration, app id 2400 | Source | plus deaths and money |
//!
//! PLAYER and RULES always go through the challenge round (`S2C_CHALLENGE`, then the request
//! again with it), as every server has since 2020; INFO does too when the responder is made
//! with `require_challenge`. The challenge is stateless: a keyed hash of the client's address,
//! so a forged source gets only the 9-byte challenge back. A reply longer than
//! [`MAX_SINGLE_REPLY`] is split into parts in the style's layout;
//! [`A2sResponder::with_compression`] makes a Source or Ship responder compress such replies, as
//! 2006-era Source engines did: bzip2, the split id's top bit set, part 0 starting with the
//! decompressed size and its CRC32.

use std::hash::{Hash as _, Hasher as _};
use std::net::SocketAddr;
use std::time::Instant;

use super::NO_CHALLENGE;
use super::packet::{
    EDF_GAME_ID, EDF_PORT, Info, Packet, PlayerEntry, Players, Rules, ShipPlayer, TheShip,
};
use super::split::{COMPRESSED_BIT, Layout, encode_parts};
use crate::respond::{Reply, Responder, ServerState};

/// The longest reply sent in one datagram; longer ones are split (Source servers cut at about
/// 1,248 bytes of payload, GoldSrc at 1,400).
pub const MAX_SINGLE_REPLY: usize = 1400;

/// Payload bytes per split part.
pub const SPLIT_PAYLOAD: usize = 1248;

/// How the emulated server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// A Source engine server (Counter-Strike: Source).
    #[default]
    Source,
    /// A GoldSrc server (Half-Life): Source INFO, GoldSrc split layout.
    GoldSrc,
    /// The Ship: its extra INFO and PLAYER fields.
    Ship,
}

impl Style {
    /// `None` or `source` → Source; `goldsrc`; `ship`; anything else `None`.
    #[must_use]
    pub fn from_name(name: Option<&str>) -> Option<Self> {
        match name {
            None | Some("source") => Some(Self::Source),
            Some("goldsrc") => Some(Self::GoldSrc),
            Some("ship") => Some(Self::Ship),
            Some(_) => None,
        }
    }

    /// The game folder a server of this style names when the state names none.
    #[must_use]
    pub fn default_folder(self) -> &'static str {
        match self {
            Self::Source => "cstrike",
            Self::GoldSrc => "valve",
            Self::Ship => "ship",
        }
    }

    fn app_id(self) -> u16 {
        match self {
            Self::Source => 240,
            Self::GoldSrc => 10,
            // The Ship's app id.
            Self::Ship => 2400,
        }
    }

    fn layout(self) -> Layout {
        match self {
            Self::GoldSrc => Layout::GoldSrc,
            Self::Source | Self::Ship => Layout::Source { size_field: true },
        }
    }
}

/// Answers A2S queries about a [`ServerState`] (see the module docs).
#[derive(Debug, Clone)]
pub struct A2sResponder {
    style: Style,
    require_challenge: bool,
    compress: bool,
    key: u64,
    next_split_id: u32,
}

impl A2sResponder {
    /// A responder of `style`; `key` (random, from the caller) keys its challenges.
    #[must_use]
    pub fn new(style: Style, require_challenge: bool, key: u64) -> Self {
        Self {
            style,
            require_challenge,
            compress: false,
            key,
            next_split_id: 1,
        }
    }

    /// Send replies that need splitting bzip2-compressed (Source layout only: the GoldSrc
    /// layout has no compressed form, so a `goldsrc` responder ignores this).
    #[must_use]
    pub fn with_compression(mut self, compress: bool) -> Self {
        self.compress = compress;
        self
    }

    /// The challenge `from` must send back.
    #[must_use]
    pub fn challenge_for(&self, from: SocketAddr) -> u32 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.key.hash(&mut h);
        from.hash(&mut h);
        // Truncation intended: any 32 bits of the hash; -1 means "no challenge".
        #[allow(clippy::cast_possible_truncation)]
        let c = h.finish() as u32;
        if c == NO_CHALLENGE { 0 } else { c }
    }

    fn info(&self, state: &ServerState) -> Info {
        let count = |n: usize| u8::try_from(n).unwrap_or(u8::MAX);
        let folder = if state.game.is_empty() {
            self.style.default_folder()
        } else {
            state.game.as_str()
        };
        let app_id = self.style.app_id();
        Info {
            protocol: if self.style == Style::GoldSrc { 48 } else { 17 },
            name: state.name.as_bytes().to_vec(),
            map: state.map.as_bytes().to_vec(),
            folder: folder.as_bytes().to_vec(),
            game: if state.game_type.is_empty() {
                folder.as_bytes().to_vec()
            } else {
                state.game_type.as_bytes().to_vec()
            },
            app_id,
            players: count(state.players.iter().filter(|p| !p.spectator).count()),
            max_players: count(usize::try_from(state.max_players).unwrap_or(usize::MAX)),
            bots: count(state.players.iter().filter(|p| p.bot).count()),
            server_type: b'd',
            environment: b'l',
            visibility: u8::from(state.password),
            vac: 0,
            the_ship: (self.style == Style::Ship).then_some(TheShip {
                mode: 0,
                witnesses: 2,
                duration: 3,
            }),
            version: if state.version.is_empty() {
                b"1.0.0.0".to_vec()
            } else {
                state.version.as_bytes().to_vec()
            },
            // A server that does not know its port (bound to port 0) leaves the field out.
            edf: Some(if state.game_port == 0 {
                EDF_GAME_ID
            } else {
                EDF_PORT | EDF_GAME_ID
            }),
            port: (state.game_port != 0).then_some(state.game_port),
            game_id: Some(u64::from(app_id)),
            ..Info::default()
        }
    }

    fn players(&self, state: &ServerState) -> Players {
        let players: Vec<PlayerEntry> = state
            .players
            .iter()
            .filter(|p| !p.spectator)
            .enumerate()
            .map(|(i, p)| PlayerEntry {
                index: 0,
                name: p.name.as_bytes().to_vec(),
                score: i32::try_from(p.score).unwrap_or(0),
                // Seconds connected: the state keeps none; a minute per place in the list.
                #[allow(clippy::cast_precision_loss)]
                duration: 60.0 * (i as f32 + 1.0),
                ship: (self.style == Style::Ship).then_some(ShipPlayer {
                    deaths: 1,
                    money: 500,
                }),
            })
            .collect();
        Players {
            declared: u8::try_from(players.len()).unwrap_or(u8::MAX),
            players,
            truncated: false,
        }
    }

    fn rules(state: &ServerState) -> Rules {
        let rules: Vec<(Vec<u8>, Vec<u8>)> = state
            .rules
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        Rules {
            declared: u16::try_from(rules.len()).unwrap_or(u16::MAX),
            rules,
            truncated: false,
        }
    }

    fn send(&mut self, to: SocketAddr, packet: &Packet, out: &mut Vec<Reply>) {
        let mut bytes = Vec::new();
        packet.encode(&mut bytes);
        if bytes.len() <= MAX_SINGLE_REPLY {
            out.push(Reply { to, bytes });
            return;
        }
        let id = self.next_split_id & !COMPRESSED_BIT;
        self.next_split_id = self.next_split_id.wrapping_add(1);
        let layout = self.style.layout();
        let compressed = (self.compress && matches!(layout, Layout::Source { .. }))
            .then(|| compressed_body(&bytes))
            .flatten();
        let (id, body) = match &compressed {
            Some(body) => (id | COMPRESSED_BIT, body.as_slice()),
            None => (id, bytes.as_slice()),
        };
        for part in encode_parts(layout, id, body, SPLIT_PAYLOAD) {
            out.push(Reply { to, bytes: part });
        }
    }
}

/// What part 0 onwards of a compressed split reply carry: the reply's length and CRC32, then
/// its bzip2 stream. `None` if the reply is too long for its length field or bzip2 fails.
fn compressed_body(reply: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write as _;
    let size = u32::try_from(reply.len()).ok()?;
    let mut body = Vec::with_capacity(reply.len() / 2 + 16);
    body.extend_from_slice(&size.to_le_bytes());
    body.extend_from_slice(&crc32fast::hash(reply).to_le_bytes());
    let mut encoder = bzip2::write::BzEncoder::new(body, bzip2::Compression::best());
    encoder.write_all(reply).ok()?;
    encoder.finish().ok()
}

impl Responder for A2sResponder {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        let expected = self.challenge_for(from);
        let packet = match Packet::decode(datagram) {
            Ok(Packet::InfoRequest { challenge }) => {
                if self.require_challenge && challenge != Some(expected) {
                    Packet::Challenge(expected)
                } else {
                    Packet::Info(Box::new(self.info(state)))
                }
            }
            Ok(Packet::PlayerRequest { challenge }) if challenge == expected => {
                Packet::Players(self.players(state))
            }
            Ok(Packet::RulesRequest { challenge }) if challenge == expected => {
                Packet::Rules(Self::rules(state))
            }
            Ok(Packet::PlayerRequest { .. } | Packet::RulesRequest { .. }) => {
                Packet::Challenge(expected)
            }
            _ => return false,
        };
        self.send(from, &packet, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2s::split::Reassembler;
    use crate::respond::PlayerState;
    use std::time::Duration;

    fn state() -> ServerState {
        ServerState {
            name: "Muster A2S".into(),
            map: "de_dust2".into(),
            game_port: 27015,
            max_players: 24,
            players: vec![
                PlayerState {
                    name: "Gordon".into(),
                    score: 5,
                    ..PlayerState::default()
                },
                PlayerState {
                    name: "Bot 1".into(),
                    bot: true,
                    ..PlayerState::default()
                },
            ],
            rules: (0..200)
                .map(|i| (format!("rule_{i:03}"), "x".repeat(20)))
                .collect(),
            ..ServerState::default()
        }
    }

    fn ask(r: &mut A2sResponder, from: SocketAddr, p: &Packet) -> Vec<Vec<u8>> {
        let mut req = Vec::new();
        p.encode(&mut req);
        let mut out = Vec::new();
        assert!(r.handle_datagram(Instant::now(), from, &req, &state(), &mut out));
        out.into_iter().map(|r| r.bytes).collect()
    }

    #[test]
    fn info_players_and_rules_through_the_challenge_and_a_split() {
        let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mut r = A2sResponder::new(Style::Source, true, 42);
        let c = r.challenge_for(from);
        assert_eq!(
            ask(&mut r, from, &Packet::InfoRequest { challenge: None }),
            [{
                let mut b = Vec::new();
                Packet::Challenge(c).encode(&mut b);
                b
            }]
        );
        let info = ask(&mut r, from, &Packet::InfoRequest { challenge: Some(c) });
        let Ok(Packet::Info(i)) = Packet::decode(&info[0]) else {
            panic!("an INFO reply");
        };
        assert_eq!(i.name, b"Muster A2S");
        assert_eq!((i.players, i.bots, i.max_players), (2, 1, 24));
        assert_eq!(i.port, Some(27015));
        let asked = ask(
            &mut r,
            from,
            &Packet::PlayerRequest {
                challenge: NO_CHALLENGE,
            },
        );
        assert!(matches!(Packet::decode(&asked[0]), Ok(Packet::Challenge(x)) if x == c));
        let players = ask(&mut r, from, &Packet::PlayerRequest { challenge: c });
        let Ok(Packet::Players(p)) = Packet::decode(&players[0]) else {
            panic!("a PLAYER reply");
        };
        assert_eq!(p.players.len(), 2);
        // 200 rules of ~30 bytes: several parts, reassembled to the RULES reply.
        let parts = ask(&mut r, from, &Packet::RulesRequest { challenge: c });
        assert!(parts.len() >= 4, "{}", parts.len());
        let mut re = Reassembler::new(Duration::from_secs(1));
        let mut whole = None;
        for part in parts.iter().rev() {
            if let Some(w) = re.push(Instant::now(), part).unwrap() {
                whole = Some(w);
            }
        }
        let Ok(Packet::Rules(rules)) = Packet::decode(&whole.unwrap()) else {
            panic!("a RULES reply");
        };
        assert_eq!(rules.rules.len(), 200);
    }

    #[test]
    fn another_source_gets_another_challenge_and_garbage_nothing() {
        let r = A2sResponder::new(Style::GoldSrc, false, 7);
        let a = r.challenge_for("127.0.0.1:1".parse().unwrap());
        let b = r.challenge_for("127.0.0.2:1".parse().unwrap());
        assert_ne!(a, b);
        let mut r = r;
        let mut out = Vec::new();
        assert!(!r.handle_datagram(
            Instant::now(),
            "127.0.0.1:1".parse().unwrap(),
            b"junk",
            &state(),
            &mut out
        ));
        assert!(out.is_empty());
        // Without require_challenge, INFO answers at once.
        let info = ask(
            &mut r,
            "127.0.0.1:1".parse().unwrap(),
            &Packet::InfoRequest { challenge: None },
        );
        assert!(matches!(Packet::decode(&info[0]), Ok(Packet::Info(i)) if i.protocol == 48));
    }

    #[test]
    fn compressed_rules_are_bzip2_splits_with_size_and_crc() {
        let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mut plain = A2sResponder::new(Style::Source, false, 42);
        let mut packed = A2sResponder::new(Style::Source, false, 42).with_compression(true);
        let c = plain.challenge_for(from);
        let request = Packet::RulesRequest { challenge: c };
        let plain_parts = ask(&mut plain, from, &request);
        let parts = ask(&mut packed, from, &request);
        // 200 alike rules shrink to one part, flagged compressed, in the Source layout.
        assert!(plain_parts.len() >= 4, "{}", plain_parts.len());
        assert_eq!(parts.len(), 1);
        let id = u32::from_le_bytes(parts[0][4..8].try_into().unwrap());
        assert_ne!(id & COMPRESSED_BIT, 0);
        // total 1, number 0, split size, then the decompressed size, the CRC32 and "BZh".
        assert_eq!(parts[0][8..10], [1, 0]);
        let mut whole = Vec::new();
        for p in &plain_parts {
            whole.extend_from_slice(&p[12..]);
        }
        let size = u32::from_le_bytes(parts[0][12..16].try_into().unwrap());
        let crc = u32::from_le_bytes(parts[0][16..20].try_into().unwrap());
        assert_eq!(size as usize, whole.len());
        assert_eq!(crc, crc32fast::hash(&whole));
        assert_eq!(&parts[0][20..23], b"BZh");
        let mut re = Reassembler::new(Duration::from_secs(1));
        let reply = re.push(Instant::now(), &parts[0]).unwrap().unwrap();
        assert_eq!(reply, whole);
        // GoldSrc has no compressed layout: the same flag changes nothing there.
        let mut goldsrc = A2sResponder::new(Style::GoldSrc, false, 42).with_compression(true);
        let parts = ask(&mut goldsrc, from, &request);
        assert!(parts.len() >= 4);
        assert!(parts.iter().all(|p| p[4..8] != [0; 4] && p[7] & 0x80 == 0));
        // Short replies are never split, so never compressed.
        let info = ask(&mut packed, from, &Packet::InfoRequest { challenge: None });
        assert!(matches!(Packet::decode(&info[0]), Ok(Packet::Info(_))));
    }
}
