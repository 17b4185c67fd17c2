//! Unreal Engine 2 native query over UDP (UT2003, UT2004, Killing Floor, Unreal 2 XMP).
//!
//! Spec: `docs/protocols/unreal2.md` (Muster's reference; section numbers below point there).
//! The servers answer on game port + 1. Everything is little-endian.
//!
//! ```text
//! request:  <version:u32> <command:u8>                 exactly 5 bytes, any version
//!           command 00 info, 01 rules, 02 players, 03 rules+players, 04 small ping
//! reply:    <version:u32> <type:u8> <payload>           every datagram has the full header
//!
//! INT      i32 LE
//! COMPACT  sign/magnitude varint, 1..=5 bytes:
//!          B0 = sign(1) more(1) bits0-5 | B1..B3 = more(1) 7 bits | B4 = 8 bits
//! FSTRING  COMPACT n; n = 0: ""; n > 0: n single bytes incl. NUL;
//!          n < 0: |n| UTF-16LE code units incl. 00 00
//!
//! 0x00 info    INT server_id, FSTRING ip, INT port, INT query_port, FSTRING name,
//!              FSTRING map, FSTRING game_type, INT current_players, INT max_players,
//!              then one tail (chosen by exact fit, §5.3):
//!                UT2004         INT ping, INT flags, FSTRING skill_level, 00, 00
//!                Killing Floor  INT wave_current, INT wave_total, INT ping, INT flags,
//!                               FSTRING skill_level, 00, 00
//!                UT2003         INT ping [, 00, 00]
//! 0x01 rules   (FSTRING key, FSTRING value)*            to the end of the datagram
//! 0x02 players (INT num, FSTRING name, INT ping, INT score, INT stats_id)*
//!              XMP (version 0x7e): INT num, INT player_id, FSTRING name, INT ping,
//!              INT score, INT stats_id, COMPACT n, n × (FSTRING key, FSTRING value)
//! 0x04 small   50
//! ```
//!
//! Stock servers start a new datagram (same 5-byte header) once the one being built is longer
//! than [`SPLIT_THRESHOLD`] bytes, check before each record, and send **no** `0x02` datagram
//! when the player list is empty ([`packet::encode_rules`], [`packet::encode_players`]).
//!
//! The game-server side is [`respond::Unreal2Responder`]: a stock UT2004 (or UT2003) server's
//! answers to a [`crate::respond::ServerState`], encoded once per state change.
//!
//! This module deliberately does **not**: open sockets or time anything (`query.rs` is a
//! sans-IO machine, the driver lives in `muster-query`); speak Pariah's command set
//! (`0x10`–`0x13`, such replies decode as [`packet::Reply::Unknown`]); merge with GameSpy v1
//! answers (the query engine does that from the two [`crate::model::ServerInfo`]s); or decide
//! rate limits for the responder.
//!
//! Text is decoded in exactly one place: [`decode_text`].
//!
//! References: the spec above; qstat `qstat.c` (`deal_with_ut2003_packet`), gamedig
//! `protocols/unreal2.js`, opengsq `protocols/unreal2.py` (facts only, no code taken).

pub mod packet;
pub mod query;
pub mod respond;
pub mod string;

pub use packet::{
    Command, InfoReply, InfoTail, PlayerRecord, PlayersReply, Reply, Request, RulePair, RulesReply,
    ServerSnapshot, SmallPingReply, Style, XmpExtra, encode_players, encode_rules,
};
pub use query::{Unreal2Config, Unreal2Query, server_info};
pub use respond::{Unreal2Responder, Unreal2Settings};
pub use string::U2String;

use crate::model::Text;

/// A datagram is flushed once it is longer than this many bytes (header included), checked
/// before each record is appended (spec §3).
pub const SPLIT_THRESHOLD: usize = 450;

/// The longest string accepted, in characters or UTF-16 code units including the NUL. No UDP
/// datagram can carry more; a larger length from the wire is [`crate::DecodeError::TooLarge`].
pub const MAX_STRING_UNITS: usize = 65_535;

/// The most key/value pairs accepted in one XMP player record's extras.
pub const MAX_XMP_PAIRS: usize = 256;

/// Never preallocate more than this many records or pairs, whatever the wire claims.
pub const MAX_PREALLOC: usize = 32;

/// The most datagrams of one type the query machine merges; later ones are ignored.
pub const MAX_DATAGRAMS_PER_PART: usize = 64;

/// The receive buffer a driver should use: one record can push a datagram well past 450 bytes
/// (spec §13.19).
pub const RECV_BUFFER: usize = 65_536;

/// A value that cannot be encoded was rejected when it was built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A string, list or count is longer than the protocol's named limit.
    #[error("{0} is too long")]
    TooLong(&'static str),
    /// Parts of a message disagree (e.g. XMP extras in a non-XMP players reply).
    #[error("inconsistent {0}")]
    Inconsistent(&'static str),
}

/// Turn an Unreal 2 string into [`Text`]: the one place this protocol decodes text.
///
/// - The form was chosen by the sign of the wire length (§4.3, §14 decision 3): single-byte
///   strings decode as Windows-1252 (Latin-1 except `0x80`–`0x9F`; the five undefined bytes
///   become the C1 code point of the same value), UTF-16LE strings as UTF-16 with unpaired
///   surrogates replaced by U+FFFD (then `lossy` is set).
/// - `raw` is the string's bytes without the terminating NUL (UTF-16LE bytes for wide strings),
///   colour codes included; `text` is the decoded string with colour codes kept.
/// - `plain` drops every colour code (ESC plus the next three units, fewer at the end, §4.4) on
///   the units **before** decoding, cuts at an embedded NUL, and removes control characters.
#[must_use]
pub fn decode_text(s: &U2String) -> Text {
    match s.units() {
        string::Units::Narrow(bytes) => {
            let plain_bytes: Vec<u8> = strip_colour_codes(bytes)
                .into_iter()
                .take_while(|&b| b != 0)
                .collect();
            Text {
                raw: bytes.clone(),
                text: crate::text::decode_windows1252(bytes),
                plain: strip_controls(&crate::text::decode_windows1252(&plain_bytes)),
                lossy: false,
            }
        }
        string::Units::Wide(units) => {
            let plain_units: Vec<u16> = strip_colour_codes(units)
                .into_iter()
                .take_while(|&u| u != 0)
                .collect();
            let lossy = char::decode_utf16(units.iter().copied()).any(|c| c.is_err());
            Text {
                raw: units.iter().flat_map(|u| u.to_le_bytes()).collect(),
                text: String::from_utf16_lossy(units),
                plain: strip_controls(&String::from_utf16_lossy(&plain_units)),
                lossy,
            }
        }
    }
}

/// The colour-code escape (U+001B) that starts `ESC R G B` (§4.4).
const COLOUR_ESC: u8 = 0x1b;

/// Drop each ESC and the three units after it.
fn strip_colour_codes<T: Copy + Into<u32>>(units: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(units.len());
    let mut skip = 0u8;
    for &u in units {
        if skip > 0 {
            skip -= 1;
        } else if u.into() == u32::from(COLOUR_ESC) {
            skip = 3;
        } else {
            out.push(u);
        }
    }
    out
}

fn strip_controls(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_text_narrow_strips_colour_only_in_plain() {
        let s = U2String::from_wire_narrow(b"\x1b\xff\x01\x01Red\x1b\x01\x01\xffBlue".to_vec());
        let t = decode_text(&s);
        assert_eq!(t.raw, b"\x1b\xff\x01\x01Red\x1b\x01\x01\xffBlue");
        assert_eq!(
            t.text,
            "\u{1b}\u{ff}\u{1}\u{1}Red\u{1b}\u{1}\u{1}\u{ff}Blue"
        );
        assert_eq!(t.plain, "RedBlue");
        assert!(!t.lossy);
    }

    #[test]
    fn decode_text_windows1252_range() {
        let t = decode_text(&U2String::from_wire_narrow(b"Caf\xe9 \x80".to_vec()));
        assert_eq!(t.text, "Café €");
        assert_eq!(t.plain, "Café €");
    }

    #[test]
    fn decode_text_wide_and_lone_surrogate() {
        let t = decode_text(&U2String::from_wire_wide(vec![0x42, 0x430]));
        assert_eq!(t.text, "Bа");
        assert_eq!(t.raw, vec![0x42, 0, 0x30, 0x04]);
        assert!(!t.lossy);
        let t = decode_text(&U2String::from_wire_wide(vec![0x41, 0xd800]));
        assert_eq!(t.text, "A\u{fffd}");
        assert!(t.lossy);
    }

    #[test]
    fn decode_text_plain_cuts_at_embedded_nul_and_short_code() {
        let t = decode_text(&U2String::from_wire_narrow(b"ab\0cd".to_vec()));
        assert_eq!(t.text, "ab\0cd");
        assert_eq!(t.plain, "ab");
        let t = decode_text(&U2String::from_wire_narrow(b"x\x1b\xff".to_vec()));
        assert_eq!(t.plain, "x");
    }
}
