//! Answers of the three families a query uses, extended reassembly (spec §7.5), and the
//! mapping into the protocol-neutral [`ServerInfo`].

use crate::model::{Player, Protocol, RawValue, ServerInfo};

use super::packet::{Info, Info7Body, InfoExtended, InfoMore, PlayerRecord, prealloc};
use super::reply::{FLAG_PASSWORD, FLAG_TIME_SCORE, PLAYER_FLAG_BOT, PLAYER_FLAG_SPECTATOR};
use super::{MAX_EXTENDED_PACKET_NO, decode_text};

/// A request/reply family (spec §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// 0.6 `gie3` → `inf3`.
    Vanilla,
    /// DDNet `xe` → `iext` / `iex+`.
    Extended,
    /// 0.7 token handshake, `gie3` → `inf3`.
    Sixup,
}

impl Family {
    /// The name used in `raw` fields: `vanilla`, `extended` or `0.7`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Vanilla => "vanilla",
            Self::Extended => "extended",
            Self::Sixup => "0.7",
        }
    }
}

/// Collects one `iext` and its `iex+` packets, in any order (spec §7.5).
///
/// Token checks are the caller's: only feed packets whose token matched. Packet numbers
/// outside 1..63 and duplicates are ignored.
#[derive(Debug, Clone, Default)]
pub struct ExtendedReassembly {
    main: Option<InfoExtended>,
    more: Vec<InfoMore>,
    seen: u64,
}

impl ExtendedReassembly {
    /// Nothing collected yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep the main packet; false when one was already kept (duplicate).
    pub fn insert_main(&mut self, main: InfoExtended) -> bool {
        if self.main.is_some() {
            return false;
        }
        self.main = Some(main);
        true
    }

    /// Keep a continuation packet; false when its number is outside 1..63 or already seen.
    pub fn insert_more(&mut self, more: InfoMore) -> bool {
        if !(1..=MAX_EXTENDED_PACKET_NO).contains(&more.packet_no) {
            return false;
        }
        let bit = 1u64 << more.packet_no;
        if self.seen & bit != 0 {
            return false;
        }
        self.seen |= bit;
        let at = self.more.partition_point(|m| m.packet_no < more.packet_no);
        self.more.insert(at, more);
        true
    }

    /// Player records collected so far (main and continuations).
    #[must_use]
    pub fn records(&self) -> usize {
        self.main.as_ref().map_or(0, |m| m.players.len())
            + self.more.iter().map(|m| m.players.len()).sum::<usize>()
    }

    /// True once the main packet is here and the records reach its num_clients.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.main
            .as_ref()
            .is_some_and(|m| usize::try_from(m.num_clients).is_ok_and(|n| self.records() >= n))
    }

    /// The answer so far; `None` until the main packet arrived.
    #[must_use]
    pub fn answer(&self) -> Option<Answer> {
        let main = self.main.as_ref()?;
        let mut players: Vec<PlayerRecord> = Vec::with_capacity(prealloc(main.num_clients));
        players.extend(main.players.iter().cloned());
        let mut truncated = main.truncated;
        for m in &self.more {
            players.extend(m.players.iter().cloned());
            truncated |= m.truncated;
        }
        Some(Answer::Extended {
            main: Box::new(main.clone()),
            players,
            truncated,
        })
    }
}

/// One family's answer, ready to be ranked and mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A 0.6 `inf3`.
    Vanilla(Info),
    /// A reassembled extended answer.
    Extended {
        /// The main packet (its `players` are the first records).
        main: Box<InfoExtended>,
        /// All records, main packet first, then `iex+` by packet number.
        players: Vec<PlayerRecord>,
        /// Whether any packet ended inside a record.
        truncated: bool,
    },
    /// A 0.7 reply with a body.
    Sixup(Info7Body),
}

/// Richness of an answer, compared as a tuple (spec §13 decision 1): complete first, then
/// more records, then the family: DDNet extended over 0.7 over vanilla. DDNet's 0.7 reply is
/// a translation (its strings cut to 0.7's limits, its version rewritten to `0.7↔…`), so when
/// a server answers both, its own extended answer wins; the 0.7 answer's own fields (host
/// name, skill level) are kept in `raw` by the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Richness {
    /// Records == num_clients.
    pub complete: bool,
    /// Player records collected.
    pub records: usize,
    /// 0 vanilla, 1 0.7 (hostname, skill, flags), 2 extended (DDNet's own, untranslated).
    pub fields: u8,
}

impl Answer {
    /// Which family this answer came from.
    #[must_use]
    pub const fn family(&self) -> Family {
        match self {
            Self::Vanilla(_) => Family::Vanilla,
            Self::Extended { .. } => Family::Extended,
            Self::Sixup(_) => Family::Sixup,
        }
    }

    /// The num_clients the answer claims.
    #[must_use]
    pub fn num_clients(&self) -> i32 {
        match self {
            Self::Vanilla(i) => i.num_clients,
            Self::Extended { main, .. } => main.num_clients,
            Self::Sixup(b) => b.num_clients,
        }
    }

    fn records(&self) -> usize {
        match self {
            Self::Vanilla(i) => i.players.len(),
            Self::Extended { players, .. } => players.len(),
            Self::Sixup(b) => b.players.len(),
        }
    }

    /// True when the records reach num_clients.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        usize::try_from(self.num_clients()).is_ok_and(|n| self.records() >= n)
    }

    /// How this answer ranks against the others.
    #[must_use]
    pub fn richness(&self) -> Richness {
        Richness {
            complete: self.is_complete(),
            records: self.records(),
            fields: match self {
                Self::Vanilla(_) => 0,
                Self::Sixup(_) => 1,
                Self::Extended { .. } => 2,
            },
        }
    }

    /// Map into the neutral model. `answered` lists every family that replied (kept in
    /// `raw` as `families`); `partial` is not set here, the query decides it.
    #[must_use]
    pub fn to_server_info(&self, answered: &[Family]) -> ServerInfo {
        let mut s = ServerInfo::new(Protocol::Teeworlds);
        let families: Vec<&str> = answered.iter().map(|f| f.name()).collect();
        s.raw.push(("family".into(), text(self.family().name())));
        s.raw.push(("families".into(), text(&families.join(","))));
        let (flags, num_players, max_players, num_clients, max_clients) = match self {
            Self::Vanilla(i) => {
                s.name = decode_text(i.name.as_bytes());
                s.map = decode_text(i.map.as_bytes());
                s.game_type = decode_text(i.game_type.as_bytes());
                s.version = decode_text(i.version.as_bytes());
                s.players = i.players.iter().map(player06).collect();
                (
                    i.flags,
                    i.num_players,
                    i.max_players,
                    i.num_clients,
                    i.max_clients,
                )
            }
            Self::Extended { main, players, .. } => {
                s.name = decode_text(main.name.as_bytes());
                s.map = decode_text(main.map.as_bytes());
                s.game_type = decode_text(main.game_type.as_bytes());
                s.version = decode_text(main.version.as_bytes());
                s.players = players.iter().map(player06).collect();
                s.raw
                    .push(("map_crc".into(), RawValue::Int(main.map_crc.into())));
                s.raw
                    .push(("map_size".into(), RawValue::Int(main.map_size.into())));
                (
                    main.flags,
                    main.num_players,
                    main.max_players,
                    main.num_clients,
                    main.max_clients,
                )
            }
            Self::Sixup(b) => {
                s.name = decode_text(b.name.as_bytes());
                s.map = decode_text(b.map.as_bytes());
                s.game_type = decode_text(b.game_type.as_bytes());
                s.version = decode_text(b.version.as_bytes());
                s.players = b
                    .players
                    .iter()
                    .map(|p| {
                        let mut raw = vec![(
                            "player_flags".to_owned(),
                            RawValue::Int(p.player_flags.into()),
                        )];
                        if p.player_flags & PLAYER_FLAG_BOT != 0 {
                            raw.push(("bot".to_owned(), RawValue::Bool(true)));
                        }
                        Player {
                            name: decode_text(p.name.as_bytes()),
                            score: Some(p.score.into()),
                            spectator: Some(p.player_flags & PLAYER_FLAG_SPECTATOR != 0),
                            clan: Some(decode_text(p.clan.as_bytes())),
                            country: Some(p.country),
                            raw,
                            ..Player::default()
                        }
                    })
                    .collect();
                s.raw.push((
                    "hostname".into(),
                    RawValue::Text(decode_text(b.hostname.as_bytes())),
                ));
                s.raw
                    .push(("skill_level".into(), RawValue::Int(b.skill_level.into())));
                s.raw.push((
                    "time_score".into(),
                    RawValue::Bool(b.flags & FLAG_TIME_SCORE != 0),
                ));
                (
                    b.flags,
                    b.num_players,
                    b.max_players,
                    b.num_clients,
                    b.max_clients,
                )
            }
        };
        s.password = Some(flags & FLAG_PASSWORD != 0);
        s.num_players = u32::try_from(num_players).unwrap_or(0);
        s.max_players = u32::try_from(max_players).unwrap_or(0);
        s.raw.push(("flags".into(), RawValue::Int(flags.into())));
        s.raw
            .push(("num_clients".into(), RawValue::Int(num_clients.into())));
        s.raw
            .push(("max_clients".into(), RawValue::Int(max_clients.into())));
        let records = self.records();
        // Quirk 7: keep the values, flag the record.
        let ordered = num_players <= num_clients
            && num_clients <= max_clients
            && num_players <= max_players
            && usize::try_from(num_clients).is_ok_and(|n| records <= n);
        if !ordered {
            s.raw
                .push(("inconsistent_counts".into(), RawValue::Bool(true)));
        }
        s
    }
}

fn text(s: &str) -> RawValue {
    RawValue::Text(decode_text(s.as_bytes()))
}

fn player06(p: &PlayerRecord) -> Player {
    Player {
        name: decode_text(p.name.as_bytes()),
        score: Some(p.score.into()),
        spectator: Some(p.is_player == 0),
        clan: Some(decode_text(p.clan.as_bytes())),
        country: Some(p.country),
        ..Player::default()
    }
}
