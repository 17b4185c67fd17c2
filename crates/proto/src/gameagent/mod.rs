//! Serious Sam GameAgent (Serious Engine 1.10): the master protocol on UDP 9005 and the
//! game-server query protocol on the game port + 1.
//!
//! ```text
//! master (UDP 9005), dispatched on byte 0 only:
//!   client -> master  65                               list request "e" (trailing bytes ignored)
//!   master -> client  73 { a.b.c.d:4 port:u16le }*     list reply "s", <= 170 records / 1021 bytes
//!   server -> master  71                               join "q"
//!   master -> server  01 challenge:i32le               join challenge
//!   server -> master  30 { ";" key ";" value }*        heartbeat "0" (challenge echo first)
//!   server -> master  75                               "u": a player was accepted
//!
//! query port (game port + 1):
//!   client -> server  01 c0 c1 c2 c3 | 02 | 03 | 04    heartbeat-to-master / status / players / count
//!   server -> client  30 ";players;8;maxplayers;16;level;..;gametype;..;version;1.10;gamename;..;sessionname;.."
//!   server -> client  [01 "players" 02 count 03]                      header, first datagram only
//!                     { "player_<i>" 02 name 03 "frags_<i>" 02 n 03 "ping_<i>" 02 n 03 }*
//!                     [04]                                            trailer, last datagram only
//!   server -> client  04 decimal-count                                reply to 04
//! ```
//!
//! [`packet`] holds the messages (decoders tolerant of every quirk in §7 of the spec, encoders
//! byte-exact to stock 1.10 output, with the sanitizing of §8.4), [`query`] the two sans-IO
//! machines: [`query::ServerQuery`] (status + players of one server) and
//! [`query::MasterListQuery`] (the `e`/`s` list exchange). The server side: [`respond`] answers
//! queries as a stock server ([`respond::GameAgentResponder`]), [`register`] keeps a server
//! listed on a master ([`register::GameAgentRegistrar`]), and [`master`] is the master face of
//! §8.3 as a pure state machine ([`master::GameAgentMaster`]).
//!
//! This module deliberately does **not**: keep the daemon's registry or its HTTP view (the
//! master face reports [`master::MasterEvent`]s for `muster-master` to mirror); speak the
//! GameSpy v1 side of the same query port (see `gamespy1`); open sockets, read the clock or
//! draw random numbers.
//!
//! Spec: `docs/protocols/gameagent.md`; reference implementation: `Croteam-official/Serious-Engine`
//! (`Sources/Engine/GameAgent/GameAgent.cpp`, `GameAgent/main.py`).

pub mod master;
pub mod packet;
pub mod query;
pub mod register;
pub mod respond;

use crate::model::Text;
use crate::text::decode_windows1252;

/// UDP port of the GameAgent master; a constant in the engine, not a setting.
pub const MASTER_PORT: u16 = 9005;

/// Largest datagram Muster accepts on either face (the stock server's and client's receive
/// buffer; the reference master truncates at 1024).
pub const MAX_DATAGRAM: usize = 2048;

/// Most records the stock master puts in one `s` datagram (1 + 170 × 6 = 1021 bytes).
pub const MAX_LIST_RECORDS_PER_DATAGRAM: usize = 170;

/// The stock server flushes a player datagram before it would grow past this many bytes; the
/// `04` trailer may still be appended afterwards (2049 bytes).
pub const PLAYERS_SPLIT_LIMIT: usize = 2048;

/// Player slots a stock server has (slot indices 0–15); never preallocate more records.
pub const MAX_PLAYERS_PREALLOC: usize = 16;

/// Most `;key;value` pairs kept from one status or heartbeat datagram.
pub const MAX_PAIRS: usize = 64;

/// Most player records kept from one players datagram (a 2049-byte datagram holds at most
/// about 60 minimal records).
pub const MAX_PLAYER_RECORDS: usize = 128;

/// Reason kept in `Player::raw["invalid_name"]` for the `11` mark.
pub const NAME_MARK_LINE_BREAK: &str = "name contains a line break";

/// Reason kept in `Player::raw["invalid_name"]` for the `12` mark.
pub const NAME_MARK_CONTROL: &str = "name contains a control or non-ASCII character";

/// Decode a Serious Sam string: the one text function of this protocol.
///
/// * `raw` keeps the bytes exactly as sent.
/// * `text` is the bytes as **Windows-1252**; the five bytes that code page leaves undefined
///   become the C1 code points of the same value, so this never fails and `lossy` is always
///   false.
/// * `plain` strips `^` decorations with the **renderer's** rule (spec §3.5, §8.2): `^c` eats
///   six more characters, `^a` two, `^f` one (the renderer's rule, not the two of the engine's
///   own undecorate function), `^b ^i ^B ^I ^C ^A ^F ^r ^o` none; `^^` is a literal `^`; any
///   other `^x` is kept as the two characters; a code cut short by the end eats only what is
///   there, and a lone `^` at the very end is kept. Control characters (below U+0020, and
///   U+007F) are removed too.
/// * A player name that is exactly one of the stock invalid-name marks (`11`, `12`; spec §3.3)
///   gets an empty `plain`; [`name_mark_reason`] says why.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    let text = decode_windows1252(raw);
    let plain = if name_mark_reason(raw).is_some() {
        String::new()
    } else {
        strip_decorations(&text)
    };
    Text {
        raw: raw.to_vec(),
        text,
        plain,
        lossy: false,
    }
}

/// The `plain` form of [`decode_text`] alone, without making the others: for a reader that
/// keeps only the plain text (a master reading a heartbeat). One allocation.
#[must_use]
pub fn plain_text(raw: &[u8]) -> String {
    if name_mark_reason(raw).is_some() {
        return String::new();
    }
    match std::str::from_utf8(raw) {
        // ASCII reads the same in Windows-1252 and UTF-8: no decoded copy first.
        Ok(ascii) if raw.is_ascii() => strip_decorations(ascii),
        _ => strip_decorations(&decode_windows1252(raw)),
    }
}

/// Why a player name from the wire is one of the stock invalid-name marks, or `None` for a
/// real name. `11`: the name had a CR or LF; `12`: a control byte, or (on x86 servers, where
/// `char` is signed) any byte ≥ 0x80.
#[must_use]
pub fn name_mark_reason(raw: &[u8]) -> Option<&'static str> {
    match raw {
        [NAME_MARK_LINE_BREAK_BYTE] => Some(NAME_MARK_LINE_BREAK),
        [NAME_MARK_CONTROL_BYTE] => Some(NAME_MARK_CONTROL),
        _ => None,
    }
}

/// The renderer's decoration rule on decoded text (see [`decode_text`]).
fn strip_decorations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '^' {
            if !c.is_control() {
                out.push(c);
            }
            continue;
        }
        let Some(code) = chars.next() else {
            // A lone `^` at the end is not a code: keep it.
            out.push('^');
            break;
        };
        let args = match code {
            'c' => 6,
            'a' => 2,
            'f' => 1,
            'b' | 'i' | 'B' | 'I' | 'C' | 'A' | 'F' | 'r' | 'o' => 0,
            '^' => {
                out.push('^');
                continue;
            }
            other => {
                out.push('^');
                if !other.is_control() {
                    out.push(other);
                }
                continue;
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

/// The mark a stock server sends instead of a name containing CR or LF (spec §3.3).
pub const NAME_MARK_LINE_BREAK_BYTE: u8 = 0x11;
/// The mark a stock server sends instead of a name containing any other byte below 32 as a
/// signed `char` (spec §3.3).
pub const NAME_MARK_CONTROL_BYTE: u8 = 0x12;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_strips_renderer_codes() {
        let t = decode_text(b"^o^c00ff00Sam^r");
        assert_eq!(t.text, "^o^c00ff00Sam^r");
        assert_eq!(t.plain, "Sam");
        assert_eq!(decode_text(b"^a80x^f5y^bz").plain, "xyz");
        // `^f` takes one digit (renderer), not two (undecorate).
        assert_eq!(decode_text(b"^f12").plain, "2");
        assert_eq!(decode_text(b"a^^b").plain, "a^b");
        assert_eq!(decode_text(b"^xq").plain, "^xq");
        assert_eq!(decode_text(b"end^").plain, "end^");
        assert_eq!(decode_text(b"cut^c00").plain, "cut");
        assert_eq!(decode_text(b"J\xe9r\xf4me").plain, "Jérôme");
        assert_eq!(decode_text(b"a\x07b").plain, "ab");
    }

    #[test]
    fn quirk_invalid_name_marks_have_empty_plain() {
        let t = decode_text(&[0x11]);
        assert_eq!(t.raw, vec![0x11]);
        assert_eq!(t.plain, "");
        assert_eq!(name_mark_reason(&[0x11]), Some(NAME_MARK_LINE_BREAK));
        assert_eq!(decode_text(&[0x12]).plain, "");
        assert_eq!(name_mark_reason(&[0x12]), Some(NAME_MARK_CONTROL));
        assert_eq!(name_mark_reason(b"Sam"), None);
    }

    proptest::proptest! {
        /// `plain_text` is `decode_text(..).plain`, made without the other forms.
        #[test]
        fn plain_text_is_decode_texts_plain(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(plain_text(&raw), decode_text(&raw).plain);
        }
    }

    #[test]
    fn plain_text_agrees_on_marks_and_codes() {
        for raw in [
            &b"^o^c00ff00Sam^r"[..],
            b"J\xe9r\xf4me",
            &[0x11],
            &[0x12],
            b"",
            b"end^",
        ] {
            assert_eq!(plain_text(raw), decode_text(raw).plain, "{raw:?}");
        }
    }
}
