//! The filter string of a list request: `\key\value` conditions, all of which a server must
//! meet, with `\nand\N` and `\nor\N` taking the next N conditions as a group that must not all
//! (nand) or must not any (nor) hold.
//!
//! Two readings of the occupancy flags exist (see `docs/protocols/valve.md`, "Decisions"):
//! Valve's documentation says `\empty\1` selects servers that are *not* empty and `\full\1`
//! servers that are *not* full; the Xash3D master selects empty servers with `\empty\1` and
//! full ones with `\full\1`. [`Semantics`] chooses.

use std::net::{IpAddr, SocketAddr};

use super::{MAX_CONDITIONS, MAX_FILTER_LEN};
use crate::wire::{DecodeError, parse_decimal};

/// One condition of a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `\dedicated\`: a dedicated server (or not).
    Dedicated(bool),
    /// `\secure\`: runs an anti-cheat (or not).
    Secure(bool),
    /// `\password\`: asks a password (`0`: does not).
    Password(bool),
    /// `\type\`: `d` dedicated, `l` listen, `p` spectator proxy.
    Type(u8),
    /// `\linux\`: runs on Linux (or not).
    Linux(bool),
    /// `\empty\`: see [`Semantics`].
    Empty(bool),
    /// `\full\`: see [`Semantics`].
    Full(bool),
    /// `\noplayers\1`: nobody plays on it.
    NoPlayers(bool),
    /// `\proxy\`: a spectator proxy (or not).
    Proxy(bool),
    /// `\nat\`: behind NAT (Xash3D).
    Nat(bool),
    /// `\lan\`: a LAN server (Xash3D).
    Lan(bool),
    /// `\bots\`: has bots (Xash3D).
    Bots(bool),
    /// `\gamedir\`: this game directory (case-insensitive).
    Gamedir(Vec<u8>),
    /// `\map\`: this map (case-insensitive).
    Map(Vec<u8>),
    /// `\protocol\`: this network protocol.
    Protocol(u32),
    /// `\appid\`: this Steam app.
    AppId(u32),
    /// `\napp\`: not this Steam app.
    NotAppId(u32),
    /// `\name_match\`: the name matches, `*` standing for any run of bytes (case-insensitive).
    NameMatch(Vec<u8>),
    /// `\version_match\`: the version matches (same wildcard).
    VersionMatch(Vec<u8>),
    /// `\gameaddr\`: this address, or any port on it when no port is given.
    GameAddr(IpAddr, Option<u16>),
    /// `\nand\N`: not all of these.
    Nand(Vec<Self>),
    /// `\nor\N`: none of these.
    Nor(Vec<Self>),
    /// Any other key: kept, and met by every server.
    Other(Vec<u8>, Vec<u8>),
}

/// A parsed filter string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filter {
    /// Every top-level condition; a server must meet them all.
    pub conditions: Vec<Condition>,
    /// `\key\` (hex, Xash3D): a number the reply echoes.
    pub key: Option<u32>,
}

/// How `\empty\` and `\full\` read (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Semantics {
    /// Valve's documentation: `\empty\1` not empty, `\full\1` not full.
    #[default]
    Valve,
    /// The Xash3D master: `\empty\1` empty, `\full\1` full.
    Xash,
}

/// What a filter looks at in a server, borrowed from wherever the master keeps it (a list
/// builds one per server and request, so it allocates nothing of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerFacts<'a> {
    /// Its address.
    pub addr: Option<SocketAddr>,
    /// A dedicated server.
    pub dedicated: bool,
    /// Runs an anti-cheat.
    pub secure: bool,
    /// Asks a password.
    pub password: bool,
    /// Runs on Linux.
    pub linux: bool,
    /// A spectator proxy.
    pub proxy: bool,
    /// Behind NAT.
    pub nat: bool,
    /// A LAN server.
    pub lan: bool,
    /// Players on it (bots included).
    pub players: u32,
    /// Its slots.
    pub max_players: u32,
    /// Bots among the players.
    pub bots: u32,
    /// Its game directory.
    pub gamedir: &'a [u8],
    /// Its map.
    pub map: &'a [u8],
    /// Its network protocol.
    pub protocol: Option<u32>,
    /// Its Steam app.
    pub app_id: Option<u32>,
    /// Its name.
    pub name: &'a [u8],
    /// Its version.
    pub version: &'a [u8],
}

impl Filter {
    /// Parses a filter string. A key without a value, a number that is not one, more than
    /// [`MAX_CONDITIONS`] conditions or a group longer than what follows it are errors.
    pub fn parse(raw: &[u8]) -> Result<Self, DecodeError> {
        if raw.len() > MAX_FILTER_LEN {
            return Err(DecodeError::TooLarge("filter"));
        }
        let body = match raw.strip_prefix(b"\\") {
            Some(b) => b,
            None if raw.is_empty() => raw,
            None => return Err(DecodeError::Invalid("filter")),
        };
        let mut pairs = Vec::new();
        if !body.is_empty() {
            let mut parts = body.split(|&b| b == b'\\');
            while let Some(key) = parts.next() {
                let value = parts.next().ok_or(DecodeError::Invalid("filter pair"))?;
                if pairs.len() >= MAX_CONDITIONS {
                    return Err(DecodeError::TooLarge("filter conditions"));
                }
                pairs.push((key, value));
            }
        }
        let mut key = None;
        let mut conditions = Vec::new();
        let mut rest = pairs.as_slice();
        while let Some(c) = take_condition(&mut rest, &mut key)? {
            conditions.push(c);
        }
        Ok(Self { conditions, key })
    }

    /// Whether a condition looks at players, slots, map or name ([`Condition::reads_play`]).
    #[must_use]
    pub fn reads_play(&self) -> bool {
        self.conditions.iter().any(Condition::reads_play)
    }

    /// Whether `server` meets every condition.
    #[must_use]
    pub fn matches(&self, server: &ServerFacts<'_>, semantics: Semantics) -> bool {
        self.conditions.iter().all(|c| c.holds(server, semantics))
    }
}

/// The next condition of `rest` (a `\key\` is taken into `key` and skipped).
fn take_condition(
    rest: &mut &[(&[u8], &[u8])],
    key: &mut Option<u32>,
) -> Result<Option<Condition>, DecodeError> {
    loop {
        let Some(((k, v), tail)) = rest.split_first() else {
            return Ok(None);
        };
        *rest = tail;
        let lower = k.to_ascii_lowercase();
        let flag = || parse_decimal(v, "filter flag").map(|n| n != 0);
        let number = || {
            parse_decimal(v, "filter number")
                .ok()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(DecodeError::BadNumber("filter number"))
        };
        let c = match lower.as_slice() {
            b"key" => {
                let text = std::str::from_utf8(v).map_err(|_| DecodeError::BadNumber("key"))?;
                *key =
                    Some(u32::from_str_radix(text, 16).map_err(|_| DecodeError::BadNumber("key"))?);
                continue;
            }
            b"dedicated" => Condition::Dedicated(flag()?),
            b"secure" => Condition::Secure(flag()?),
            b"password" => Condition::Password(flag()?),
            b"linux" => Condition::Linux(flag()?),
            b"type" => match v {
                [t @ (b'd' | b'l' | b'p')] => Condition::Type(*t),
                _ => return Err(DecodeError::Invalid("filter type")),
            },
            b"empty" => Condition::Empty(flag()?),
            b"full" => Condition::Full(flag()?),
            b"noplayers" => Condition::NoPlayers(flag()?),
            b"proxy" => Condition::Proxy(flag()?),
            b"nat" => Condition::Nat(flag()?),
            b"lan" => Condition::Lan(flag()?),
            b"bots" => Condition::Bots(flag()?),
            b"gamedir" => Condition::Gamedir(v.to_vec()),
            b"map" => Condition::Map(v.to_vec()),
            b"protocol" => Condition::Protocol(number()?),
            b"appid" => Condition::AppId(number()?),
            b"napp" => Condition::NotAppId(number()?),
            b"name_match" => Condition::NameMatch(v.to_vec()),
            b"version_match" => Condition::VersionMatch(v.to_vec()),
            b"gameaddr" => {
                let text = std::str::from_utf8(v).map_err(|_| DecodeError::Invalid("gameaddr"))?;
                match (text.parse::<SocketAddr>(), text.parse::<IpAddr>()) {
                    (Ok(a), _) => Condition::GameAddr(a.ip(), Some(a.port())),
                    (_, Ok(ip)) => Condition::GameAddr(ip, None),
                    _ => return Err(DecodeError::Invalid("gameaddr")),
                }
            }
            b"nand" | b"nor" => {
                let n = usize::try_from(number()?).unwrap_or(usize::MAX);
                if n > rest.len() {
                    return Err(DecodeError::Invalid("filter group longer than the filter"));
                }
                let mut group = Vec::with_capacity(n);
                for _ in 0..n {
                    match take_condition(rest, key)? {
                        Some(c) => group.push(c),
                        None => return Err(DecodeError::Invalid("filter group")),
                    }
                }
                if lower.as_slice() == b"nand" {
                    Condition::Nand(group)
                } else {
                    Condition::Nor(group)
                }
            }
            _ => Condition::Other(k.to_vec(), v.to_vec()),
        };
        return Ok(Some(c));
    }
}

impl Condition {
    /// Whether it looks at what changes with play: players, slots, map or name (a group when
    /// any of its conditions does). A master that keeps those apart from the rest can skip
    /// reading them for a filter without any.
    #[must_use]
    pub fn reads_play(&self) -> bool {
        match self {
            Self::Empty(_)
            | Self::Full(_)
            | Self::NoPlayers(_)
            | Self::Map(_)
            | Self::NameMatch(_) => true,
            Self::Nand(group) | Self::Nor(group) => group.iter().any(Self::reads_play),
            _ => false,
        }
    }

    /// Whether `s` meets this condition.
    #[must_use]
    pub fn holds(&self, s: &ServerFacts<'_>, semantics: Semantics) -> bool {
        let has_players = s.players > 0;
        let has_room = s.players < s.max_players;
        match self {
            Self::Dedicated(v) => s.dedicated == *v,
            Self::Secure(v) => s.secure == *v,
            Self::Password(v) => s.password == *v,
            Self::Linux(v) => s.linux == *v,
            Self::Type(t) => match t {
                b'd' => s.dedicated,
                b'p' => s.proxy,
                _ => !s.dedicated && !s.proxy,
            },
            Self::Proxy(v) => s.proxy == *v,
            Self::Nat(v) => s.nat == *v,
            Self::Lan(v) => s.lan == *v,
            Self::Bots(v) => (s.bots > 0) == *v,
            Self::NoPlayers(v) => has_players != *v,
            Self::Empty(v) => match semantics {
                Semantics::Valve => !*v || has_players,
                Semantics::Xash => has_players != *v,
            },
            Self::Full(v) => match semantics {
                Semantics::Valve => !*v || has_room,
                Semantics::Xash => has_room != *v,
            },
            Self::Gamedir(g) => s.gamedir.eq_ignore_ascii_case(g),
            Self::Map(m) => s.map.eq_ignore_ascii_case(m),
            Self::Protocol(p) => s.protocol == Some(*p),
            Self::AppId(a) => s.app_id == Some(*a),
            Self::NotAppId(a) => s.app_id != Some(*a),
            Self::NameMatch(p) => wildcard(p, s.name),
            Self::VersionMatch(p) => wildcard(p, s.version),
            Self::GameAddr(ip, port) => s.addr.is_some_and(|a| {
                a.ip().to_canonical() == ip.to_canonical() && port.is_none_or(|p| a.port() == p)
            }),
            Self::Nand(group) => !group.iter().all(|c| c.holds(s, semantics)),
            Self::Nor(group) => !group.iter().any(|c| c.holds(s, semantics)),
            Self::Other(..) => true,
        }
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of bytes (ASCII case
/// ignored). Greedy with backtracking to the last star: linear in practice, never recursive.
fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if text.get(t).is_some_and(|x| x.eq_ignore_ascii_case(c)) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|r| r.iter().all(|&c| c == b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ServerFacts<'static> {
        ServerFacts {
            addr: Some("192.0.2.1:27015".parse().unwrap()),
            dedicated: true,
            players: 3,
            max_players: 16,
            gamedir: b"cstrike",
            map: b"de_dust2",
            protocol: Some(48),
            app_id: Some(10),
            name: b"Dust Only 24/7",
            version: b"1.1.2.7",
            ..ServerFacts::default()
        }
    }

    fn holds(f: &str, s: &ServerFacts<'_>) -> bool {
        Filter::parse(f.as_bytes())
            .unwrap()
            .matches(s, Semantics::Valve)
    }

    #[test]
    fn plain_conditions_all_hold() {
        let s = server();
        assert!(holds("", &s));
        assert!(holds("\\gamedir\\CStrike\\map\\de_dust2\\dedicated\\1", &s));
        assert!(!holds("\\gamedir\\valve", &s));
        assert!(holds("\\appid\\10\\napp\\20\\protocol\\48", &s));
        assert!(holds("\\type\\d", &s));
        assert!(!holds("\\type\\l", &s));
        assert!(Filter::parse(b"\\type\\x").is_err());
        assert!(!holds("\\napp\\10", &s));
        assert!(holds("\\name_match\\*dust*", &s));
        assert!(holds("\\name_match\\dust*", &s), "case is ignored");
        assert!(!holds("\\name_match\\only*", &s));
        assert!(holds("\\version_match\\1.1.*", &s));
        assert!(holds("\\gameaddr\\192.0.2.1", &s));
        assert!(holds("\\gameaddr\\192.0.2.1:27015", &s));
        assert!(!holds("\\gameaddr\\192.0.2.1:27016", &s));
        assert!(
            holds("\\whatever\\x", &s),
            "an unknown key is met by every server"
        );
    }

    #[test]
    fn nand_and_nor_take_the_next_n_conditions() {
        let s = server();
        // Not (cstrike and de_dust2): excluded.
        assert!(!holds("\\nand\\2\\gamedir\\cstrike\\map\\de_dust2", &s));
        assert!(holds("\\nand\\2\\gamedir\\cstrike\\map\\de_aztec", &s));
        // None of (valve, de_dust2): excluded because of the map.
        assert!(!holds("\\nor\\2\\gamedir\\valve\\map\\de_dust2", &s));
        assert!(holds(
            "\\nor\\2\\gamedir\\valve\\map\\de_aztec\\dedicated\\1",
            &s
        ));
        let f = Filter::parse(b"\\nor\\1\\map\\a\\gamedir\\cstrike").unwrap();
        assert_eq!(f.conditions.len(), 2, "the group took one condition");
        assert!(
            Filter::parse(b"\\nand\\3\\map\\a").is_err(),
            "group longer than the filter"
        );
        assert!(Filter::parse(b"\\nand\\x").is_err());
    }

    #[test]
    fn empty_and_full_read_as_each_master_reads_them() {
        let mut s = server();
        let f = |t: &str| Filter::parse(t.as_bytes()).unwrap();
        // 3 of 16: not empty, not full.
        assert!(f("\\empty\\1\\full\\1").matches(&s, Semantics::Valve));
        assert!(!f("\\empty\\1").matches(&s, Semantics::Xash));
        assert!(!f("\\full\\1").matches(&s, Semantics::Xash));
        s.players = 0;
        assert!(!f("\\empty\\1").matches(&s, Semantics::Valve));
        assert!(f("\\empty\\1").matches(&s, Semantics::Xash));
        assert!(f("\\noplayers\\1").matches(&s, Semantics::Valve));
        s.players = 16;
        assert!(!f("\\full\\1").matches(&s, Semantics::Valve));
        assert!(f("\\full\\1").matches(&s, Semantics::Xash));
    }

    #[test]
    fn key_is_hex_and_bad_filters_are_errors() {
        let f = Filter::parse(b"\\gamedir\\valve\\key\\deadBEEF").unwrap();
        assert_eq!(f.key, Some(0xDEAD_BEEF));
        assert_eq!(f.conditions, vec![Condition::Gamedir(b"valve".to_vec())]);
        assert!(Filter::parse(b"gamedir\\valve").is_err());
        assert!(Filter::parse(b"\\gamedir").is_err());
        assert!(Filter::parse(b"\\key\\xyz").is_err());
        assert!(Filter::parse(b"\\appid\\-1").is_err());
        let many = "\\a\\b".repeat(MAX_CONDITIONS + 1);
        assert!(Filter::parse(many.as_bytes()).is_err());
    }

    #[test]
    fn reads_play_names_the_filters_that_look_at_players_slots_map_or_name() {
        let reads = |f: &str| Filter::parse(f.as_bytes()).unwrap().reads_play();
        for f in [
            "\\empty\\1",
            "\\full\\0",
            "\\noplayers\\1",
            "\\map\\crossfire",
            "\\name_match\\*x*",
            "\\gamedir\\valve\\nor\\2\\lan\\1\\map\\a",
            "\\nand\\1\\nor\\1\\full\\1",
        ] {
            assert!(reads(f), "{f}");
        }
        for f in [
            "",
            "\\gamedir\\valve\\clver\\0.21",
            "\\nat\\0\\lan\\0\\password\\0\\secure\\1\\bots\\0",
            "\\version_match\\0.2*\\protocol\\48\\gameaddr\\192.0.2.1",
            "\\nand\\2\\dedicated\\1\\linux\\1",
        ] {
            assert!(!reads(f), "{f}");
        }
    }

    #[test]
    fn wildcards() {
        assert!(wildcard(b"*", b""));
        assert!(wildcard(b"a*b*c", b"aXXbYYc"));
        assert!(!wildcard(b"a*b*c", b"aXXbYY"));
        assert!(wildcard(b"**a", b"bba"));
        assert!(!wildcard(b"", b"x"));
    }

    proptest::proptest! {
        #[test]
        fn any_filter_parses_or_errs_and_never_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(f) = Filter::parse(&raw) {
                let _ = f.matches(&server(), Semantics::Valve);
                let _ = f.matches(&server(), Semantics::Xash);
            }
        }

        #[test]
        fn wildcard_never_panics(p in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), t in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            let _ = wildcard(&p, &t);
        }
    }
}
