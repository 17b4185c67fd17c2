//! Valve's A2S server queries (Source and GoldSrc engines), codec layer.
//!
//! ```text
//! single datagram:  ff ff ff ff <type byte> <body>
//! split datagram:   fe ff ff ff <id: u32 LE> <part header> <slice of the whole reply>
//!
//! A2S_INFO    54 "Source Engine Query" 00 [challenge: 4]     client -> server
//! A2S_PLAYER  55 challenge: 4 (ff ff ff ff asks for one)      client -> server
//! A2S_RULES   56 challenge: 4 (ff ff ff ff asks for one)      client -> server
//! S2C_CHALLENGE 41 challenge: 4                               server -> client
//! INFO (Source)  49 protocol name map folder game appid:u16 players max bots type env vis vac
//!                [The Ship: mode witnesses duration] version [EDF {fields}]
//! INFO (GoldSrc) 6d address name map folder game players max protocol type env vis mod
//!                [mod fields] vac bots
//! PLAYER      44 count { index name score:i32 duration:f32 } [The Ship: {deaths money}]
//! RULES       45 count:u16 { name value }
//! ```
//!
//! Files: [`packet`] (every single datagram, both directions), [`split`] (reassembly of
//! multi-datagram replies, bzip2 included), [`query`] (the client's query machine). This module
//! holds the named limits and the one text-decoding rule ([`decode_text`]).
//!
//! Deliberately **not** here: sockets, clocks, the master server protocol. Spec:
//! `docs/protocols/valve.md`.

pub mod packet;
pub mod query;
pub mod respond;
pub mod split;

pub use packet::{GoldSrcInfo, Info, ModInfo, Packet, PlayerEntry, Players, Rules, TheShip};
pub use split::Reassembler;

use crate::model::Text;

/// The four bytes a single-datagram message starts with (-1 as a little-endian `i32`).
pub const SIMPLE_HEADER: [u8; 4] = [0xFF; 4];

/// The four bytes every part of a split reply starts with (-2 as a little-endian `i32`).
pub const SPLIT_HEADER: [u8; 4] = [0xFE, 0xFF, 0xFF, 0xFF];

/// The challenge value that asks the server for a challenge (-1).
pub const NO_CHALLENGE: u32 = 0xFFFF_FFFF;

/// The Steam app id of The Ship, whose INFO and PLAYER replies carry extra fields.
pub const THE_SHIP_APP_ID: u32 = 2400;

/// Largest datagram the decoders accept (a UDP datagram never exceeds 64 KiB).
pub const MAX_DATAGRAM: usize = 65_535;

/// Largest reassembled (and, for bzip2 replies, decompressed) reply accepted, in bytes. Real
/// replies stay far below (a full 255-part split of 1,248-byte parts is about 311 KB, and no
/// server sends that many); the limit keeps one reply from taking more memory than this.
pub const MAX_MESSAGE: usize = 256 * 1024;

/// Most parts one split reply may announce; a total of 0 or above this is refused.
pub const MAX_SPLIT_PARTS: usize = 128;

/// Most split replies reassembled at once; parts of further ids are refused until one
/// completes or expires.
pub const MAX_IN_FLIGHT: usize = 8;

/// Most player entries one PLAYER reply may hold (the count byte wraps past 255 players, so
/// entries are read to the end of the reply, never trusted from the count).
pub const MAX_PLAYERS: usize = 4096;

/// Most rules one RULES reply may hold (the declared count is not trusted either).
pub const MAX_RULES: usize = 16_384;

/// Decode an A2S string (server name, map, player name, rule key or value) into [`Text`].
///
/// The protocol's strings are NUL-terminated bytes in UTF-8 (Source servers send UTF-8; old
/// GoldSrc servers send Latin-1 names rarely enough that a lossy fallback is the rule, a
/// decision in the spec). Invalid sequences become U+FFFD and `lossy` is set, so callers can
/// show `raw` as hex. `plain` drops control characters; A2S has no colour codes.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    let (text, lossy) = match std::str::from_utf8(raw) {
        Ok(s) => (s.to_owned(), false),
        Err(_) => (crate::text::decode_utf8_lossy(raw), true),
    };
    let plain: String = text.chars().filter(|c| !c.is_control()).collect();
    Text {
        raw: raw.to_vec(),
        text,
        plain,
        lossy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2s_text_is_utf8_with_lossy_fallback() {
        let t = decode_text("Ünï\u{1}x".as_bytes());
        assert_eq!(t.text, "Ünï\u{1}x");
        assert_eq!(t.plain, "Ünïx");
        assert!(!t.lossy);
        let t = decode_text(b"B\xe9ll");
        assert_eq!(t.raw, b"B\xe9ll");
        assert_eq!(t.text, "B\u{fffd}ll");
        assert!(t.lossy);
    }
}
