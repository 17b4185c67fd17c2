//! The Bomberman management server ("Verwaltungsserver"): length-prefixed JSON over TCP 51963.
//!
//! Game servers connect, register themselves (`msRegisterGameServer`), report their lobby state
//! (`msUpdateGameServerStats`) and unregister (`msUnregisterGameServer`); clients ask for the list
//! (`msQueryGameServers`) and get `msRQueryGameServers`. A registration belongs to its TCP
//! connection: it ends when the connection closes.
//!
//! ```text
//! frame:   <length:1-5 ASCII digits, no leading 0, <= 65537><json text><0x0A>
//!          length = bytes of the JSON text (UTF-8) + 1 for the final newline
//! example: 33{"command":"msQueryGameServers"}\n
//!          33 33 7b 22 63 6f 6d 6d 61 6e 64 22 3a ... 73 22 7d 0a
//! root:    {"command":"ms<Name>"[, "content":{...}]}   ("content" only when there is data)
//! ```
//!
//! Layers, cheapest first:
//!
//! - [`packet`]: the frame codec. [`packet::check`] tells whether a whole frame is buffered and
//!   rejects a too-large length as soon as the prefix is read; [`packet::FrameDecoder`] is the
//!   incremental form a tokio codec wraps (never buffers more than one frame).
//! - [`messages`]: the typed commands and answer, parsed strictly (RFC 8259, duplicate keys
//!   rejected, integers as JSON integers or decimal strings) and encoded byte-exact (compact,
//!   `"command"` first, fields in the spec's order, UTF-8 not `\u` escapes).
//! - [`session`]: the sans-IO per-connection state of the management server: it turns bytes
//!   into registry actions and enforces the one-server-per-connection, framing-closes and
//!   idle-timeout rules.
//! - [`client`]: the frames a game server or client sends, and the client-side answer reader.
//!
//! This module deliberately does **not**: open sockets, read the clock, keep the registry of
//! all connections (that is `muster-master`'s job; the session only says what to do to the
//! entry of its own connection), enforce connection caps or output-buffer limits, resolve
//! hostnames, or log (discards come out as events for the caller to log).
//!
//! References: `docs/protocols/management-server.md` (framing §2, commands §4, decisions
//! §7, byte-exact frames §8, conformance §9, malformed inputs §10), the German seed
//! `004_management-server.de.md` (group5productions/bomberman-protocol, `management-server.md`).

pub mod client;
mod error;
mod json;
pub mod messages;
pub mod packet;
pub mod session;

use std::time::Duration;

use crate::model::Text;

pub use client::{ClientConnection, ClientEvent};
pub use messages::{
    AddressError, AddressKind, Command, GamePort, GameServer, GameplayMode, ListedGameServer,
    MaxPlayers, Message, MessageError, PlayerCount, ServerAddress, ServerListAnswer, Stats,
};
pub use packet::{Frame, FrameDecoder, check};
pub use session::{CloseReason, Discard, ServerSession, SessionConfig, SessionEvent};

/// The TCP port the management server always listens on.
pub const PORT: u16 = 51963;

/// The largest length prefix accepted: 64 KiB of JSON plus the final newline.
///
/// Checked while the prefix is read, before any of the body is buffered.
pub const MAX_FRAME_LEN: usize = 65_537;

/// The largest JSON text one frame can carry (`MAX_FRAME_LEN` minus the newline).
pub const MAX_JSON_LEN: usize = MAX_FRAME_LEN - 1;

/// The most digits a valid length prefix can have (`65537` has five).
pub const MAX_PREFIX_DIGITS: usize = 5;

/// The most bytes one frame occupies on the wire, prefix included; the most a
/// [`FrameDecoder`] ever buffers.
pub const MAX_WIRE_FRAME_LEN: usize = MAX_PREFIX_DIGITS + MAX_FRAME_LEN;

/// How long a connection without a registered game server may stay silent (§7.1 (9)).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The normalized text view of a string from this protocol.
///
/// JSON strings are already decoded (and validated as UTF-8) by the JSON parser, so `raw` holds
/// their UTF-8 bytes, `text` the string as received and `lossy` is always false. `plain` is
/// what a player should read: control characters (C0, DEL, C1) removed and surrounding
/// whitespace trimmed. This is the one place the protocol's strings become [`Text`]; the
/// stored names and addresses themselves are never altered (§7.2: "exactly as received").
#[must_use]
pub fn text(s: &str) -> Text {
    let plain: String = s.chars().filter(|c| !c.is_control()).collect();
    let plain = plain.trim().to_owned();
    Text {
        raw: s.as_bytes().to_vec(),
        text: s.to_owned(),
        plain,
        lossy: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_raw_and_cleans_plain() {
        let t = text(" Feuer\u{1}land\n");
        assert_eq!(t.raw, b" Feuer\x01land\n");
        assert_eq!(t.text, " Feuer\u{1}land\n");
        assert_eq!(t.plain, "Feuerland");
        assert!(!t.lossy);
        assert_eq!(text("轰炸机人").plain, "轰炸机人");
    }

    #[test]
    fn limits_agree() {
        assert_eq!(MAX_FRAME_LEN.to_string().len(), MAX_PREFIX_DIGITS);
        assert_eq!(MAX_JSON_LEN, 64 * 1024);
    }
}
