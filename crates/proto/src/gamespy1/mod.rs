//! GameSpy v1 `\status\` queries: the text protocol Unreal, UT99, UT2003/UT2004 and Serious Sam
//! answer on their query port.
//!
//! ```text
//! request:  \status\            \basic\\info\          \status\xserverquery   \secure\ABCDEF
//! reply:    \key\value\key\value…\queryid\X.Y[\final\]   (one or more UDP datagrams)
//!
//! style A (Unreal 227):   one section per datagram   …\final\\queryid\12.4
//! style B (UT99/UT2003/4): sections packed ≤ 1000     …\queryid\41.1\final\
//! style C (Serious Sam):  one text, split at 2048,   …\final\\queryid\333.1
//!                         continuations carry no queryid
//! ```
//!
//! * [`tokenizer`]: the backslash-safe `\key\value` tokenizer (spec §8.2) with the known-key
//!   lists of §8.3; names such as `Kee\/n` survive.
//! * [`packet`]: requests ([`packet::Request`]) and reply datagrams ([`packet::ReplyDatagram`]),
//!   decode and encode.
//! * [`reply`]: the responder side: packs sections into datagrams exactly as each stock style
//!   does (§5, §9, §10).
//! * [`reassembly`]: order-independent reassembly of a multi-datagram reply (§7).
//! * [`map`]: merged pairs into the protocol-neutral [`crate::model::ServerInfo`].
//! * [`query`]: [`query::StatusQuery`], the sans-IO state machine for one `\status\` query.
//! * [`respond`]: [`respond::GameSpyResponder`], the game-server side: per-game profiles
//!   (key sets, style, `\secure\` key) over [`reply`].
//!
//! Deliberately **not** here: sockets, clocks and rate limiting live in the query and server
//! crates; gsmsalg and heartbeats live in `gamespy_master`. Master-server conversations use plain
//! pairing, not this tokenizer, because their keys may start with digits.
//!
//! Reference: `docs/protocols/gamespy1.md` (and `unreal2.md` §11 for how UT2003/UT2004 ports
//! relate to the native query).

pub mod map;
pub mod packet;
pub mod query;
pub mod reassembly;
pub mod reply;
pub mod respond;
pub mod tokenizer;

use crate::model::Text;
use crate::text::decode_windows1252;

/// Most datagrams one reply may consist of before reassembly gives up (spec §7.4).
pub const MAX_REPLY_DATAGRAMS: usize = 64;

/// Most bytes (sum of datagram lengths) one reply may consist of (spec §7.4).
pub const MAX_REPLY_BYTES: usize = 65_536;

/// Largest datagram a client must accept: the UDP maximum over IPv4 (spec §5.4).
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// Requests longer than this are not GameSpy v1 queries; the decoder rejects them (spec §13).
pub const MAX_REQUEST_LEN: usize = 2048;

/// A responder answers at most this many items of one request datagram (spec §10, §13).
pub const MAX_REQUEST_ITEMS: usize = 8;

/// Most distinct player indexes a reply is mapped into; further ones are dropped.
pub const MAX_PLAYERS: usize = 256;

/// Style B (UT99, UT2003, UT2004) flushes its buffer before it would exceed this many bytes.
pub const STYLE_B_PACKET_LIMIT: usize = 1000;

/// Style C (Serious Sam) flushes its text before a player record would take it past this.
pub const STYLE_C_PACKET_LIMIT: usize = 2048;

/// The `queryid` counter of Unreal-family servers wraps from this value back to 1 (spec §4).
pub const QUERY_ID_WRAP: u32 = 100;

/// The one separator byte of the protocol.
pub(crate) const BACKSLASH: u8 = 0x5C;

/// Decode a GameSpy v1 string (key or value) into [`Text`].
///
/// GameSpy v1 text is 8-bit: `text` is the bytes decoded as **Windows-1252** (total: the five
/// undefined bytes become the C1 code points of the same value, so `lossy` is always false).
///
/// `plain` is what a player reads: UT colour codes (`1b RR GG BB`, cut short at the end of the
/// string) are removed from the raw bytes first, then Serious Engine `^` decorations (`^o`,
/// `^r`, `^cRRGGBB`, `^aAA`, `^fd`, `^b` …; `^^` stays as a literal `^`), then control
/// characters. `text` keeps all of them.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    let text = decode_windows1252(raw);
    // Most names have nothing to remove: then the plain view is the text itself.
    let plain = if raw.iter().all(|&b| !removed_by_plain(b)) {
        text.clone()
    } else {
        plain_view(raw)
    };
    Text {
        raw: raw.to_vec(),
        text,
        plain,
        lossy: false,
    }
}

/// Whether a byte may start something [`plain_view`] removes or changes: control bytes (the
/// colour escape among them), the `^` of decorations, and the Windows-1252 bytes that decode to
/// C1 control characters. Text without any of them is its own plain view.
fn removed_by_plain(b: u8) -> bool {
    b < 0x20 || matches!(b, b'^' | 0x7f | 0x81 | 0x8d | 0x8f | 0x90 | 0x9d)
}

/// The `plain` view of [`decode_text`].
fn plain_view(raw: &[u8]) -> String {
    const ESC: u8 = 0x1B;
    const COLOUR_CODE_ARGS: usize = 3;
    let mut no_colour = Vec::with_capacity(raw.len());
    let mut skip = 0usize;
    for &b in raw {
        if skip > 0 {
            skip -= 1;
        } else if b == ESC {
            skip = COLOUR_CODE_ARGS;
        } else {
            no_colour.push(b);
        }
    }
    let decoded = decode_windows1252(&no_colour);
    let mut out = String::with_capacity(decoded.len());
    let mut chars = decoded.chars();
    while let Some(c) = chars.next() {
        if c != '^' {
            if !c.is_control() {
                out.push(c);
            }
            continue;
        }
        // Number of characters the code consumes after its letter (gameagent.md §3.5).
        let args = match chars.next() {
            None => 0,
            Some('^') => {
                out.push('^');
                0
            }
            Some('c') => 6,
            Some('a') => 2,
            Some('f') => 1,
            Some('b' | 'i' | 'B' | 'I' | 'C' | 'A' | 'F' | 'r' | 'o') => 0,
            Some(other) => {
                // Not a decoration: keep both characters as sent.
                out.push('^');
                if !other.is_control() {
                    out.push(other);
                }
                0
            }
        };
        for _ in 0..args {
            if chars.next().is_none() {
                break;
            }
        }
    }
    out
}

/// Per-player key fields (`<field>_<digits>`, spec §8.3), lower case.
const PLAYER_FIELDS: [&str; 17] = [
    "player",
    "playername",
    "frags",
    "ping",
    "team",
    "teamname",
    "skin",
    "mesh",
    "face",
    "ngsecret",
    "score",
    "deaths",
    "kills",
    "keyhash",
    "species",
    "race",
    "enemy",
];

/// Control keys (spec §8.3), lower case.
const CONTROL_KEYS: [&str; 18] = [
    "queryid",
    "final",
    "echo",
    "echo_reply",
    "echo_replay",
    "ignoring",
    "secure",
    "validate",
    "enctype",
    "heartbeat",
    "statechanged",
    "basic",
    "info",
    "rules",
    "players",
    "status",
    "teams",
    "list",
];

/// Known vocabulary keys (spec §8.3), lower case.
pub(crate) const VOCABULARY_KEYS: [&str; 49] = [
    "gamename",
    "gamever",
    "gamesubver",
    "gamerevision",
    "minnetver",
    "mingamever",
    "location",
    "hostname",
    "shortname",
    "hostport",
    "maptitle",
    "mapname",
    "gametype",
    "gameclass",
    "numplayers",
    "maxplayers",
    "gamemode",
    "activemod",
    "difficulty",
    "friendlyfire",
    "weaponsstay",
    "ammosstay",
    "ammostays",
    "healthandarmorstays",
    "allowhealth",
    "allowarmor",
    "infinitearmor",
    "infiniteammo",
    "respawninplace",
    "password",
    "vipplayers",
    "timelimit",
    "fraglimit",
    "goalteamscore",
    "minplayers",
    "changelevels",
    "tournament",
    "gamestyle",
    "botskill",
    "mutators",
    "mutator",
    "adminname",
    "adminemail",
    "mapfilename",
    "os",
    "lanserver",
    "servurl",
    "worldlog",
    "wantworldlog",
];

/// Split a per-player key `<field>_<digits>` into its lower-case field and its index.
///
/// Returns `None` for every other key, and for indexes that do not fit a `u32`.
#[must_use]
pub fn player_key(key: &[u8]) -> Option<(&'static str, u32)> {
    let pos = key.iter().rposition(|&b| b == b'_')?;
    let (field, rest) = key.split_at(pos);
    let digits = rest.get(1..)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let field = PLAYER_FIELDS
        .iter()
        .find(|f| f.as_bytes().eq_ignore_ascii_case(field))?;
    let index = std::str::from_utf8(digits).ok()?.parse::<u32>().ok()?;
    Some((field, index))
}

/// True for `player_<digits>` and `playername_<digits>` (the keys whose values may contain `\`).
fn is_player_name_key(key: &[u8]) -> bool {
    matches!(player_key(key), Some(("player" | "playername", _)))
}

/// True when `key` is a per-player key with digits after the underscore (even if they overflow).
pub(crate) fn is_per_player_key(key: &[u8]) -> bool {
    let Some(pos) = key.iter().rposition(|&b| b == b'_') else {
        return false;
    };
    let (field, rest) = key.split_at(pos);
    let digits = rest.get(1..).unwrap_or_default();
    !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && PLAYER_FIELDS
            .iter()
            .any(|f| f.as_bytes().eq_ignore_ascii_case(field))
}

/// True when `key` is in one of the known-key lists of spec §8.3 (case-insensitive).
#[must_use]
pub fn is_known_key(key: &[u8]) -> bool {
    is_per_player_key(key)
        || CONTROL_KEYS
            .iter()
            .chain(VOCABULARY_KEYS.iter())
            .any(|k| k.as_bytes().eq_ignore_ascii_case(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The shortcut for text with nothing to remove gives what the full plain view gives.
        #[test]
        fn plain_shortcut_agrees_with_the_full_view(
            raw in proptest::collection::vec(prop_oneof![9 => 0x20u8..=0xff, 1 => any::<u8>()], 0..48)
        ) {
            prop_assert_eq!(decode_text(&raw).plain, plain_view(&raw));
        }
    }

    #[test]
    fn decode_text_windows1252() {
        let t = decode_text(b"Andr\xe9 \x80");
        assert_eq!(t.text, "André €");
        assert_eq!(t.plain, "André €");
        assert!(!t.lossy);
    }

    #[test]
    fn decode_text_strips_decorations_only_in_plain() {
        let t = decode_text(b"^o^c00ff00Sam^r");
        assert_eq!(t.text, "^o^c00ff00Sam^r");
        assert_eq!(t.plain, "Sam");
        assert_eq!(decode_text(b"a^^b^").plain, "a^b");
        assert_eq!(decode_text(b"^fx1^a80y^qz").plain, "1y^qz");
    }

    #[test]
    fn decode_text_strips_colour_codes_only_in_plain() {
        let t = decode_text(b"\x1b\xff\x01\x01Red\x1b\x01\x01\xffBlue\x1b\x01");
        assert_eq!(t.plain, "RedBlue");
        assert_eq!(t.raw, b"\x1b\xff\x01\x01Red\x1b\x01\x01\xffBlue\x1b\x01");
        assert!(t.text.starts_with('\u{1b}'));
    }

    #[test]
    fn player_keys() {
        assert_eq!(player_key(b"player_0"), Some(("player", 0)));
        assert_eq!(player_key(b"Frags_12"), Some(("frags", 12)));
        assert_eq!(player_key(b"playername_3"), Some(("playername", 3)));
        assert_eq!(player_key(b"player_"), None);
        assert_eq!(player_key(b"player_x"), None);
        assert_eq!(player_key(b"echo_reply"), None);
        assert_eq!(player_key(b"hostname"), None);
        assert!(is_known_key(b"AdminEMail"));
        assert!(is_known_key(b"queryid"));
        assert!(is_known_key(b"ping_99999999999"));
        assert!(!is_known_key(b"y"));
    }
}
