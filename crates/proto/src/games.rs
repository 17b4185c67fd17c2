//! Game keys and their display names: one key per game, the same in the master's API, its
//! web page and the command line's results and filters.
//!
//! The key is what a master files a server under: the GameSpy `gamename` (`ut`,
//! `serioussamse`, `ut2004`, …), the GameAgent `product`, `teeworlds` for servers on the
//! Teeworlds UDP masters, `ddnet` for servers registered over DDNet's HTTP register and
//! `bomberman` for games on the management server. [`key_of_answer`] gives the same key for
//! a query's answer, from what the answer says about its game, so that a server a client
//! queries and the same server a master lists carry one key. [`display_name`] is the human
//! name shown beside the key.
//!
//! No I/O. Unknown keys are allowed everywhere (a GameSpy master takes any game of its key
//! table); they have no display name and are shown as they are.

use crate::model::{Protocol, RawValue, ServerInfo};

/// Longest game key [`key_of_answer`] takes from an answer, in bytes.
pub const MAX_KEY_LEN: usize = 32;

/// One known game.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Game {
    /// The key, lower case ASCII.
    pub key: &'static str,
    /// The name people know the game by.
    pub name: &'static str,
}

const fn game(key: &'static str, name: &'static str) -> Game {
    Game { key, name }
}

/// Every game with a display name, by key.
pub const GAMES: &[Game] = &[
    game("unreal", "Unreal"),
    game("ut", "Unreal Tournament"),
    game("ut2", "Unreal Tournament 2003"),
    game("ut2d", "Unreal Tournament 2003 (demo)"),
    game("ut2004", "Unreal Tournament 2004"),
    game("ut2004d", "Unreal Tournament 2004 (demo)"),
    game("serioussam", "Serious Sam: The First Encounter"),
    game("serioussamse", "Serious Sam: The Second Encounter"),
    game("serioussamsed", "Serious Sam: The Second Encounter (demo)"),
    game("333networks", "333networks master"),
    game("teeworlds", "Teeworlds"),
    game("ddnet", "DDNet"),
    game("bomberman", "Bomberman"),
    // Quake III family: the `gamename` servers send. `infoResponse` carries the engine's
    // game name (`Quake3Arena`, `Xonotic`); an ioquake3 `statusResponse` carries the game
    // module's (`baseq3`, OpenArena's `baseoa`); `quake3.md` §5.
    game("quake3arena", "Quake III Arena"),
    game("baseq3", "Quake III Arena"),
    game("baseoa", "OpenArena"),
    game("xonotic", "Xonotic"),
    game("nexuiz", "Nexuiz"),
    game("warsow", "Warsow"),
    game("tremulous", "Tremulous"),
    game("q3urt42", "Urban Terror 4.2"),
    game("q3urt43", "Urban Terror 4.3"),
    game("worldofpadman", "World of Padman"),
    game("et", "Wolfenstein: Enemy Territory"),
    game("wolfmp", "Return to Castle Wolfenstein"),
];

/// The key of Teeworlds servers that do not speak DDNet's extended info.
pub const TEEWORLDS: &str = "teeworlds";
/// The key of DDNet servers.
pub const DDNET: &str = "ddnet";
/// The key of the management server's games.
pub const BOMBERMAN: &str = "bomberman";

/// The display name of `key` (ASCII case-insensitive), if the game is known.
#[must_use]
pub fn display_name(key: &str) -> Option<&'static str> {
    GAMES
        .iter()
        .find(|g| g.key.eq_ignore_ascii_case(key))
        .map(|g| g.name)
}

/// The display name of `key`, or `key` itself when the game is not known.
#[must_use]
pub fn name_or_key(key: &str) -> &str {
    display_name(key).unwrap_or(key)
}

/// A game key as an answer spells it: trimmed, lower-cased, printable ASCII, at most
/// [`MAX_KEY_LEN`] bytes; `None` otherwise.
#[must_use]
pub fn normalize(text: &str) -> Option<String> {
    let t = text.trim();
    let ok = !t.is_empty() && t.len() <= MAX_KEY_LEN && t.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| t.to_ascii_lowercase())
}

fn raw_text<'a>(info: &'a ServerInfo, key: &str) -> Option<&'a str> {
    match info.raw_field(key)? {
        RawValue::Text(t) => Some(&t.text),
        _ => None,
    }
}

fn rule_text<'a>(info: &'a ServerInfo, key: &str) -> Option<&'a str> {
    info.rules
        .iter()
        .find(|r| r.key.text.eq_ignore_ascii_case(key))
        .map(|r| r.value.text.as_str())
}

/// The game key of a query's answer, as a master would file the server:
///
/// - GameSpy v1 and GameAgent: the `gamename` the server sends (`ut`, `serioussamse`);
/// - Unreal Engine 2: the GameSpy `gamename` of a merged answer, otherwise the game the
///   reply's version names (`0x78` `ut2d`, `0x79` `ut2`, `0x7f` `ut2004d`, `0x80` `ut2004`,
///   except a Killing Floor reply, which has no key here);
/// - Teeworlds: `ddnet` when the server answered DDNet's extended info, else `teeworlds`;
/// - Quake III / DarkPlaces: the `gamename` the server sends;
/// - A2S: the game folder the server sends (`cstrike`, `tf`, `valve`).
///
/// `None` when the answer does not tell.
#[must_use]
pub fn key_of_answer(info: &ServerInfo) -> Option<String> {
    match info.protocol {
        Protocol::Teeworlds => {
            let families = raw_text(info, "families").or_else(|| raw_text(info, "family"));
            let ddnet = families.is_some_and(|f| f.split(',').any(|f| f.trim() == "extended"));
            Some(if ddnet { DDNET } else { TEEWORLDS }.to_owned())
        }
        Protocol::GameSpy1 | Protocol::GameAgent | Protocol::Quake3 => raw_text(info, "gamename")
            .or_else(|| rule_text(info, "gamename"))
            .and_then(normalize),
        Protocol::A2s => raw_text(info, "folder").and_then(normalize),
        Protocol::Unreal2 => {
            if let Some(k) = raw_text(info, "gamespy.gamename").and_then(normalize) {
                return Some(k);
            }
            if raw_text(info, "layout") == Some("killing_floor") {
                return None;
            }
            let key = match info.raw_field("version") {
                Some(RawValue::Int(0x78)) => "ut2d",
                Some(RawValue::Int(0x79)) => "ut2",
                Some(RawValue::Int(0x7f)) => "ut2004d",
                Some(RawValue::Int(0x80)) => "ut2004",
                _ => return None,
            };
            Some(key.to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Text;

    fn with_raw(protocol: Protocol, raw: &[(&str, RawValue)]) -> ServerInfo {
        let mut i = ServerInfo::new(protocol);
        i.raw = raw
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        i
    }

    fn text(s: &str) -> RawValue {
        RawValue::Text(Text::from_utf8_str(s))
    }

    #[test]
    fn every_key_is_lower_case_unique_and_named() {
        for (i, g) in GAMES.iter().enumerate() {
            assert_eq!(normalize(g.key).as_deref(), Some(g.key), "{}", g.key);
            assert!(!g.name.is_empty());
            assert!(GAMES[..i].iter().all(|o| o.key != g.key), "{} twice", g.key);
        }
        assert_eq!(display_name("UT"), Some("Unreal Tournament"));
        assert_eq!(
            display_name("serioussamse"),
            Some("Serious Sam: The Second Encounter")
        );
        assert_eq!(display_name("quake"), None);
        assert_eq!(name_or_key("quake"), "quake");
    }

    #[test]
    fn teeworlds_answers_are_ddnet_when_extended() {
        let ddnet = with_raw(
            Protocol::Teeworlds,
            &[
                ("family", text("extended")),
                ("families", text("vanilla,extended")),
            ],
        );
        assert_eq!(key_of_answer(&ddnet).as_deref(), Some("ddnet"));
        let vanilla = with_raw(
            Protocol::Teeworlds,
            &[("family", text("vanilla")), ("families", text("vanilla"))],
        );
        assert_eq!(key_of_answer(&vanilla).as_deref(), Some("teeworlds"));
        let sixup = with_raw(Protocol::Teeworlds, &[("family", text("0.7"))]);
        assert_eq!(key_of_answer(&sixup).as_deref(), Some("teeworlds"));
    }

    #[test]
    fn gamename_names_the_game() {
        let sam = with_raw(Protocol::GameAgent, &[("gamename", text(" SeriousSamSE "))]);
        assert_eq!(key_of_answer(&sam).as_deref(), Some("serioussamse"));
        let ut = with_raw(Protocol::GameSpy1, &[("gamename", text("ut"))]);
        assert_eq!(key_of_answer(&ut).as_deref(), Some("ut"));
        let none = with_raw(Protocol::GameSpy1, &[("hostname", text("x"))]);
        assert_eq!(key_of_answer(&none), None);
        let odd = with_raw(Protocol::GameSpy1, &[("gamename", text("two words"))]);
        assert_eq!(key_of_answer(&odd), None);
        let long = with_raw(Protocol::GameSpy1, &[("gamename", text(&"x".repeat(33)))]);
        assert_eq!(key_of_answer(&long), None);
        let oa = with_raw(Protocol::Quake3, &[("gamename", text("baseoa"))]);
        assert_eq!(key_of_answer(&oa).as_deref(), Some("baseoa"));
        assert_eq!(display_name("Quake3Arena"), Some("Quake III Arena"));
        assert_eq!(display_name("q3urt43"), Some("Urban Terror 4.3"));
    }

    #[test]
    fn unreal2_prefers_gamespy_then_version() {
        let merged = with_raw(
            Protocol::Unreal2,
            &[
                ("version", RawValue::Int(0x80)),
                ("gamespy.gamename", text("ut2")),
            ],
        );
        assert_eq!(key_of_answer(&merged).as_deref(), Some("ut2"));
        let native = with_raw(Protocol::Unreal2, &[("version", RawValue::Int(0x80))]);
        assert_eq!(key_of_answer(&native).as_deref(), Some("ut2004"));
        let kf = with_raw(
            Protocol::Unreal2,
            &[
                ("version", RawValue::Int(0x80)),
                ("layout", text("killing_floor")),
            ],
        );
        assert_eq!(key_of_answer(&kf), None);
        let odd = with_raw(Protocol::Unreal2, &[("version", RawValue::Int(7))]);
        assert_eq!(key_of_answer(&odd), None);
    }
}
