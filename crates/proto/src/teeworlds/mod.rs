//! Teeworlds / DDNet server info on the game port (spec `docs/protocols/teeworlds.md`).
//!
//! Four request/reply families share one UDP port:
//!
//! ```text
//! 0.6 vanilla:   ff ff ff ff ff ff | ff ff ff ff "gie3" <token:u8>
//!             -> ff ff ff ff ff ff | ff ff ff ff "inf3" token version name map game_type
//!                                    flags num_players max_players num_clients max_clients
//!                                    {name clan country score is_player}*      (decimal strings, \0-terminated)
//! DDNet 64-slot: ... "fstd" <token:u8>  ->  ... "dtsf" <the ten fields> <offset:varint> {5 strings}* (≤24)
//! DDNet extended: 78 65 <extra:u16be> 00 00 | ff ff ff ff "gie3" <token:u8>
//!             -> ff×6 | ff ff ff ff "iext" token(24-bit) version name map map_crc map_size game_type
//!                        flags num_players max_players num_clients max_clients "" {name clan country score is_player ""}*
//!             -> ff×6 | ff ff ff ff "iex+" token packet_no "" {6 strings}*
//! 0.7:           04 00 00 ff ff ff ff 05 <client_token:4> <508 × 00>            (token request, 520 bytes)
//!             -> 04 00 00 <client_token:4> 05 <server_token:4> [padding]      (token reply)
//!                21 <server_token:4> <client_token:4> | ff ff ff ff "gie3" <browse_token:varint>
//!             -> 21 <client_token:4> <server_token:4> | ff ff ff ff "inf3" <browse_token:varint>
//!                   [version name hostname map game_type flags skill num_players max_players
//!                    num_clients max_clients {name clan country:varint score:varint flags:varint}*]
//! ```
//!
//! Files: [`header`] (the connless framings, reused by `teeworlds_master`), [`value`]
//! (strings, decimals, varints), [`packet`] (messages, both directions), [`reply`] (building
//! stock-server replies from one server description: DDNet's 16-client squeeze, `dtsf`
//! pages, `iext`/`iex+` splitting), [`info`] (mapping to [`crate::model::ServerInfo`]),
//! [`query`] (the sans-IO [`query::TeeworldsQuery`]) and [`respond`] (the sans-IO
//! [`respond::TeeworldsResponder`]: which requests to answer, IP-bound 0.7 tokens, the
//! full-info rate limit).
//!
//! Deliberately **not** here: sockets, clocks and random numbers (tokens and secrets come from
//! the caller); per-source rate limits and byte budgets (the server driver's, see
//! [`crate::limit`]); the master protocol and registration (`teeworlds_master`). Decoders
//! accept what real peers send (lenient 0.6 headers, trailing bytes after a request token,
//! truncated player records) and do not enforce the server-side string limits of §4.1.
//!
//! References: heinrich5991/libtw2 `doc/serverinfo_extended.md`, `doc/int.md`,
//! `doc/packet7.md`; ddnet/ddnet `src/engine/server/server.cpp`,
//! `src/engine/client/serverbrowser.cpp`; teeworlds/teeworlds `src/engine/shared/network.cpp`.

pub mod header;
pub mod info;
pub mod packet;
pub mod query;
pub mod reply;
pub mod respond;
pub mod value;

use crate::model::Text;

pub use header::{Frame, Header, TokenMessage};
pub use packet::{
    Datagram, GetInfo, GetInfo7, Info, Info7, Info7Body, Info64, InfoExtended, InfoMore, Message,
    Player7, PlayerRecord,
};
pub use query::{TeeworldsQuery, Tokens};
pub use respond::{ResponderConfig, TeeworldsResponder};
pub use value::TwStr;

/// A value that the Teeworlds encoders could not represent, refused when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Strings are NUL-terminated on the wire, so they cannot contain NUL.
    #[error("string contains a nul byte")]
    ContainsNul,
    /// More clients than the extended format can carry in its 64 packets.
    #[error("too many clients")]
    TooManyClients,
    /// The 24-bit extended token does not fit 24 bits.
    #[error("extended token wider than 24 bits")]
    ExtendedToken,
    /// A 0.7 browse token must be in 0..2^31-1: -1 crashes teeworlds 0.7.5.
    #[error("negative browse token")]
    BrowseToken,
    /// The client token `ff ff ff ff` means "no token" in 0.7.
    #[error("client token is the no-token value")]
    ClientToken,
}

/// Every message starts with these four bytes and then four ASCII characters.
pub const MAGIC_PREFIX: [u8; 4] = [0xff; 4];
/// Length of a message magic.
pub const MAGIC_LEN: usize = 8;
/// Get info (0.6, extended and 0.7).
pub const MAGIC_GIE3: [u8; 8] = *b"\xff\xff\xff\xffgie3";
/// Info reply (0.6 decimals or 0.7 varints).
pub const MAGIC_INF3: [u8; 8] = *b"\xff\xff\xff\xffinf3";
/// DDNet 64-slot legacy request.
pub const MAGIC_FSTD: [u8; 8] = *b"\xff\xff\xff\xfffstd";
/// DDNet 64-slot legacy reply.
pub const MAGIC_DTSF: [u8; 8] = *b"\xff\xff\xff\xffdtsf";
/// DDNet extended reply, main packet.
pub const MAGIC_IEXT: [u8; 8] = *b"\xff\xff\xff\xffiext";
/// DDNet extended reply, continuation packet.
pub const MAGIC_IEX_MORE: [u8; 8] = *b"\xff\xff\xff\xffiex+";

/// Never preallocate more player records than this, whatever count a server claims.
pub const MAX_PLAYERS_PREALLOC: usize = 64;
/// Most clients a [`reply::ServerDescription`] (and so the responder) accepts. DDNet's
/// extended info has no client limit of its own (spec §7.2: "no upper limit for
/// max_clients"); its 64 packets hold about 1,500 of the longest records, so 1024 always fit.
/// The other families cap what they list themselves (0.6: 16, 0.7: one datagram).
pub const MAX_CLIENTS: usize = 1024;
/// Clients a vanilla 0.6 reply lists at most (§5.3).
pub const VANILLA_MAX_CLIENTS: usize = 16;
/// Clients per `dtsf` packet (§6).
pub const LEGACY64_CLIENTS_PER_PACKET: usize = 24;
/// Highest `iex+` packet number (§7.5); packet 0 is the main `iext`.
pub const MAX_EXTENDED_PACKET_NO: i32 = 63;
/// The 0.6 payload limit: 1400-byte datagram minus the 6-byte header.
pub const MAX_PAYLOAD_06: usize = 1394;
/// DDNet starts a new `iex+` when a record would bring the payload (magic included) to this
/// size: [`MAX_PAYLOAD_06`] minus 8 bytes of magic and 10 of the longest token (§7.4).
pub const EXTENDED_SPLIT_AT: usize = MAX_PAYLOAD_06 - 18;
/// The largest token an `xe` request can carry.
pub const MAX_EXTENDED_TOKEN: u32 = 0x00ff_ffff;

/// The one text decoder of the Teeworlds family: turn a Teeworlds string into a [`Text`].
///
/// Strings are UTF-8 in practice (§4.1) but teeworlds 0.7.5 cuts them at byte limits, so a
/// code point may be split: invalid sequences become U+FFFD and `lossy` is set; `raw` keeps
/// the exact bytes. Teeworlds has no colour codes; `plain` follows DDNet's own client: every
/// character below U+0020 becomes a space and leading whitespace is dropped (quirk 8).
///
/// [`crate::teeworlds_master`] uses it too: the strings of a DDNet HTTP register body and of
/// `servers.json` are the same server-info strings (name, map, game type, version, client
/// names and clans) as in a UDP info reply, so a server shows the same `plain` name however
/// its info arrived.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    let (text, lossy) = match std::str::from_utf8(raw) {
        Ok(s) => (s.to_owned(), false),
        Err(_) => (crate::text::decode_utf8_lossy(raw), true),
    };
    let spaced: String = text
        .chars()
        .map(|c| if u32::from(c) < 0x20 { ' ' } else { c })
        .collect();
    let plain = spaced.trim_start().to_owned();
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
    fn decode_text_utf8() {
        let t = decode_text("名前 ★".as_bytes());
        assert_eq!(t.text, "名前 ★");
        assert_eq!(t.plain, "名前 ★");
        assert!(!t.lossy);
    }

    #[test]
    fn quirk_non_utf8_names_are_lossy_with_raw_kept() {
        // teeworlds 0.7.5 cuts at byte limits: "★" (e2 98 85) cut after two bytes.
        let raw = b"ab\xe2\x98";
        let t = decode_text(raw);
        assert_eq!(t.raw, raw);
        assert_eq!(t.text, "ab\u{fffd}");
        assert!(t.lossy);
    }

    #[test]
    fn quirk_control_chars_and_leading_spaces_in_plain() {
        let t = decode_text(b"  a\x01b\tc ");
        assert_eq!(t.text, "  a\x01b\tc ");
        assert_eq!(t.plain, "a b c ");
    }
}
