//! Merged reply pairs into the protocol-neutral [`ServerInfo`] (spec §7.3).
//!
//! * `hostname`, `mapname`, `gametype`, `gamever`, `password`, `numplayers`, `maxplayers` fill
//!   the neutral fields; the first occurrence wins (`gamever` comes in basic and info).
//! * Per-player keys `<field>_<N>` are grouped by N, in ascending N: `player`/`playername`
//!   is the name, `frags` (or `score` when there are no frags) the score, `ping` the ping,
//!   `team` the team when numeric and not 255; every per-player field is also kept in
//!   [`Player::raw`] under its field name.
//! * Every other pair is a [`Rule`]; the first occurrence of a key wins (`minnetver` comes in
//!   basic and info), except `Mutator`, whose repeats are all kept in order.
//! * Every non-player pair, mapped or not, is kept in [`ServerInfo::raw`] in wire order.
//! * `numplayers` is optional (seed 002 relies on it nowhere): without it the player count is
//!   the number of players decoded. Either way [`NUM_PLAYERS_SOURCE`] in `raw` says where the
//!   count came from ([`SOURCE_NUMPLAYERS`] or [`SOURCE_PLAYER_LIST`]).
//! * The UT2003 demo (`gamename` `ut2d`) sent a broken team value: its players' teams are
//!   reported empty (`team` stays in [`Player::raw`]).
//!
//! Numbers are parsed leniently (spaces and trailing junk ignored, spec §12.10).

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};

use super::packet::Pair;
use super::{MAX_PLAYERS, decode_text, player_key};
use crate::model::{Player, Protocol, RawValue, Rule, ServerInfo, Text};

/// Keys that fill a neutral field of [`ServerInfo`] instead of becoming rules.
const MAPPED_KEYS: [&[u8]; 7] = [
    b"hostname",
    b"mapname",
    b"gametype",
    b"gamever",
    b"password",
    b"numplayers",
    b"maxplayers",
];

/// The raw field that says where [`ServerInfo::num_players`] came from.
pub const NUM_PLAYERS_SOURCE: &str = "num_players_source";
/// [`NUM_PLAYERS_SOURCE`]: the server's `numplayers` key.
pub const SOURCE_NUMPLAYERS: &str = "numplayers";
/// [`NUM_PLAYERS_SOURCE`]: no `numplayers` key; the players decoded were counted.
pub const SOURCE_PLAYER_LIST: &str = "player list";

/// The `gamename` of the UT2003 demo, whose team values are broken (seed 002).
const UT2003_DEMO_GAMENAME: &[u8] = b"ut2d";

/// Keys that legitimately repeat and are all kept as rules (Unreal 227 sends one `Mutator`
/// per mutator).
const REPEATING_KEYS: [&[u8]; 1] = [b"mutator"];

/// A reply key compared and hashed without regard to ASCII case, borrowed from the reply (the
/// first-occurrence check needs no lower-cased copy of every key).
#[derive(Debug, Clone, Copy)]
struct NoCase<'a>(&'a [u8]);

impl PartialEq for NoCase<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(other.0)
    }
}

impl Eq for NoCase<'_> {}

impl Hash for NoCase<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for b in self.0 {
            state.write_u8(b.to_ascii_lowercase());
        }
    }
}

/// Build a [`ServerInfo`] (`Protocol::GameSpy1`, no ping, not partial) from merged data pairs.
#[must_use]
pub fn to_server_info<'a>(pairs: impl IntoIterator<Item = &'a Pair>) -> ServerInfo {
    let mut info = ServerInfo::new(Protocol::GameSpy1);
    let mut players: BTreeMap<u32, Player> = BTreeMap::new();
    let mut set = [false; MAPPED_KEYS.len()];
    let mut rule_keys: HashSet<NoCase<'_>> = HashSet::new();
    let mut ut2003_demo = false;
    for pair in pairs {
        if let Some((field, index)) = player_key(pair.key()) {
            if players.len() >= MAX_PLAYERS && !players.contains_key(&index) {
                continue;
            }
            fill_player(players.entry(index).or_default(), field, pair.value());
            continue;
        }
        let key = String::from_utf8_lossy(pair.key()).into_owned();
        let value = decode_text(pair.value());
        info.raw.push((key, RawValue::Text(value.clone())));
        if pair.key_is(b"gamename") && !rule_keys.contains(&NoCase(b"gamename")) {
            ut2003_demo = pair
                .value()
                .trim_ascii()
                .eq_ignore_ascii_case(UT2003_DEMO_GAMENAME);
        }
        let mapped = MAPPED_KEYS
            .iter()
            .position(|k| pair.key().eq_ignore_ascii_case(k));
        let Some(slot) = mapped else {
            let repeats = REPEATING_KEYS
                .iter()
                .any(|k| pair.key().eq_ignore_ascii_case(k));
            if !rule_keys.insert(NoCase(pair.key())) && !repeats {
                // The first occurrence wins; later ones stay in `raw` (spec §7.3).
                continue;
            }
            info.rules.push(Rule {
                key: decode_text(pair.key()),
                value,
            });
            continue;
        };
        if set.get(slot).copied().unwrap_or(true) {
            continue;
        }
        if let Some(s) = set.get_mut(slot) {
            *s = true;
        }
        match slot {
            0 => info.name = value,
            1 => info.map = value,
            2 => info.game_type = value,
            3 => info.version = value,
            4 => info.password = parse_bool(pair.value()),
            5 => info.num_players = lenient_u32(pair.value()).unwrap_or(0),
            _ => info.max_players = lenient_u32(pair.value()).unwrap_or(0),
        }
    }
    info.players = players.into_values().collect();
    if ut2003_demo {
        for p in &mut info.players {
            p.team = None;
        }
    }
    let has_numplayers = set.get(5).copied().unwrap_or(false);
    let source = if has_numplayers {
        SOURCE_NUMPLAYERS
    } else {
        info.num_players = u32::try_from(info.players.len()).unwrap_or(u32::MAX);
        SOURCE_PLAYER_LIST
    };
    info.raw.push((
        NUM_PLAYERS_SOURCE.to_owned(),
        RawValue::Text(Text::from_utf8_str(source)),
    ));
    info
}

fn fill_player(player: &mut Player, field: &str, value: &[u8]) {
    let text = decode_text(value);
    match field {
        "player" | "playername" if player.name.is_empty() => player.name = text.clone(),
        "frags" => player.score = lenient_i64(value),
        "score" if player.score.is_none() => player.score = lenient_i64(value),
        "ping" => player.ping_ms = lenient_i64(value).and_then(|p| u32::try_from(p).ok()),
        "team" => {
            // 255 means "no team" on UT99; a team name is kept only in `raw`.
            player.team = lenient_i64(value)
                .filter(|&t| t != 255)
                .and_then(|t| i32::try_from(t).ok());
        }
        _ => {}
    }
    player.raw.push((field.to_owned(), RawValue::Text(text)));
}

/// `0`/`1`/`true`/`false` (any case); anything else is unknown.
fn parse_bool(value: &[u8]) -> Option<bool> {
    let v = value.trim_ascii();
    if v == b"1" || v.eq_ignore_ascii_case(b"true") {
        Some(true)
    } else if v == b"0" || v.eq_ignore_ascii_case(b"false") {
        Some(false)
    } else {
        None
    }
}

/// The leading integer of `value` after spaces (`" 50"`, `"12abc"`, `"-3"`), if any.
pub(crate) fn lenient_i64(value: &[u8]) -> Option<i64> {
    let v = value.trim_ascii_start();
    let (neg, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, v),
    };
    let len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    let digits = digits.get(..len)?;
    if digits.is_empty() {
        return None;
    }
    let n: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { -n } else { n })
}

fn lenient_u32(value: &[u8]) -> Option<u32> {
    lenient_i64(value).and_then(|n| u32::try_from(n).ok())
}

/// The text of the first non-player pair named `key` (case-insensitive), if any.
#[must_use]
pub fn first_value(pairs: &[Pair], key: &[u8]) -> Option<Text> {
    pairs
        .iter()
        .find(|p| p.key_is(key))
        .map(|p| decode_text(p.value()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_numbers() {
        assert_eq!(lenient_i64(b" 50"), Some(50));
        assert_eq!(lenient_i64(b"12abc"), Some(12));
        assert_eq!(lenient_i64(b"-3"), Some(-3));
        assert_eq!(lenient_i64(b"x"), None);
        assert_eq!(lenient_i64(b""), None);
        assert_eq!(lenient_i64(b"99999999999999999999"), None);
    }

    #[test]
    fn map_first_occurrence_wins_and_mutators_repeat() {
        let pairs: Vec<Pair> = [
            ("gamever", "451"),
            ("hostname", "A"),
            ("gamever", "452"),
            ("Mutator", "X"),
            ("Mutator", "Y"),
            ("numplayers", " 2 "),
            ("password", "True"),
        ]
        .iter()
        .map(|(k, v)| Pair::new(*k, v).unwrap())
        .collect();
        let info = to_server_info(&pairs);
        assert_eq!(info.version.text, "451");
        assert_eq!(info.name.text, "A");
        assert_eq!(info.num_players, 2);
        assert_eq!(info.password, Some(true));
        let rules: Vec<_> = info
            .rules
            .iter()
            .map(|r| (r.key.text.as_str(), r.value.text.as_str()))
            .collect();
        assert_eq!(rules, [("Mutator", "X"), ("Mutator", "Y")]);
        // Seven pairs, then where the player count came from.
        assert_eq!(info.raw.len(), 8);
    }
}
