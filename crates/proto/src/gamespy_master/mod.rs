//! The GameSpy master protocol (v0/v1) as community masters run it: UDP 27900 heartbeats, the
//! `\secure\` → `\validate\` algorithm (gsmsalg), the TCP 28900 list conversation and
//! master-to-master sync.
//!
//! ```text
//! heartbeat (UDP, server -> master):  \heartbeat\<query port>\gamename\<game>[\key\value…][\statechanged]
//! challenge (UDP, master -> server):  \secure\<6 chars>
//! answer    (UDP, server -> master):  \validate\<8 chars>\final\\queryid\N.1   (or \queryid\N.1\final\)
//! greeting  (TCP, master -> client):  \basic\\secure\<6 chars>                  (21 bytes, no \final\)
//! auth      (TCP, client -> master):  \gamename\<g>[\gamever\…][\location\…][\enctype\N]\validate\<V>\final\
//! list req  (TCP, client -> master):  [\queryid\1.1]\list\<""|cmp>\gamename\<g>[…]\final\
//! text list (TCP, master -> client):  (\ip\A.B.C.D:PORT)* \final\
//! cmp list  (TCP, master -> client):  (<4 bytes IPv4><2 bytes port, big-endian>)* \final\
//! sync req  (TCP, master -> master):  \sync\<all|g1 g2…>[\msid\<uuid>][\final\]
//! sync list (TCP, master -> master):  (\<game>\(A.B.C.D:PORT )*)* \final\
//! ```
//!
//! Every message is a run of `\key\value` pairs split by plain pairing (the tokenizer of
//! `gamespy1` is for query replies; master messages never carry backslash names, and their keys
//! may start with digits, e.g. `333networks`).
//!
//! What this module deliberately does **not** do: no sockets, no clock, no registry, no policy
//! (which games to accept, whether to enforce client validation: that is the master daemon's
//! job); it does not implement enctype 1 or the enctype 2 list cipher (§6 of the spec), nor
//! OpenSpy's `info2`/`groups` list bodies (their requests decode, as [`ListMode::Unknown`]).
//! Lists carry IPv4 only: the format has no IPv6 form.
//!
//! Files: [`gsmsalg`](mod@gsmsalg) (the validate algorithm and the key table), [`packet`] (every
//! message, both directions), [`conversation`] (the sans-IO TCP client and the server-side
//! request parser), [`register`] (the game server's heartbeat client,
//! [`register::GameSpyRegistrar`]).
//!
//! Reference: `docs/protocols/gamespy-master.md`; 333networks/Masterserver-Qt5,
//! 333networks/Masterserver-Perl, Croteam-official/Serious-Engine `GameAgent.cpp`,
//! Unity-Technologies/qstat `qstat.c` (facts only).

pub mod conversation;
pub mod games;
pub mod gsmsalg;
pub mod packet;
pub mod register;

pub use conversation::{
    ClientRequest, DEFAULT_LIST_TIMEOUT, ListClient, ListClientConfig, RequestAction, RequestParser,
};
pub use gsmsalg::{
    Enctype, GAME_KEYS, ValidateCheck, check_validate, game_keys, gsmsalg, validate_string,
};
pub use packet::{
    Challenge, ClientAuth, ClientMessage, Greeting, Heartbeat, Key, ListForm, ListMode, ListReply,
    ListRequest, MasterQuery, QueryReply, Secure, SyncGames, SyncReply, SyncRequest, Token,
    Trailer, ValidateAnswer,
};

use crate::model::Text;
use crate::text::decode_windows1252;
use crate::wire::DecodeError;

/// Largest UDP datagram the master face decodes (heartbeats are 27–60 bytes; own-face replies
/// a few hundred).
pub const MAX_DATAGRAM: usize = 1400;

/// Largest request a list client may send before the server-side parser gives up (spec §14:
/// requests up to 4 KiB).
pub const MAX_CLIENT_REQUEST: usize = 4096;

/// Largest list reply (text, cmp or sync) a [`ListClient`] accepts in total. About 150 000
/// text entries; the largest community list is a few thousand.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;

/// Never preallocate more list entries than this, whatever a length suggests.
pub const MAX_LIST_PREALLOC: usize = 1024;

/// Most `\key\value` pairs decoded from one message; more is refused as
/// [`DecodeError::TooLarge`].
pub const MAX_PAIRS: usize = 256;

/// Decode a GameSpy master string (gamenames, versions, locations, hostnames) for display.
///
/// The protocol has no declared character set; the games behind it are Windows-1252 (spec
/// §13 decision 2). Decoding never fails: every byte maps to a character, so `lossy` is always
/// false. `plain` turns tabs into spaces and drops other control characters, which
/// no gamename contains but a hostile peer may send. Gamenames are compared on their raw
/// bytes after ASCII lower-casing, never through this function.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    let text = decode_windows1252(raw);
    let plain: String = text
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .filter(|c| !c.is_control())
        .collect();
    Text {
        raw: raw.to_vec(),
        text,
        plain,
        lossy: false,
    }
}

/// Split a master message on `\` into `(key, value)` pairs by plain pairing.
///
/// The first byte must be `\` ([`DecodeError::BadMagic`] otherwise, which covers empty
/// datagrams). A last key without a value (`\statechanged`) gets an empty value. Empty keys are
/// kept: `\ut\\unreal\…` in a sync reply is the game `ut` with an empty list.
fn pairs<'a>(msg: &'a [u8], ctx: &'static str) -> Result<Pairs<'a>, DecodeError> {
    pairs_capped(msg, MAX_PAIRS, ctx)
}

/// Borrowed `(key, value)` pairs of one message.
type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;

/// [`pairs`] with a caller-chosen cap on the pair count.
fn pairs_capped<'a>(
    msg: &'a [u8],
    cap: usize,
    ctx: &'static str,
) -> Result<Pairs<'a>, DecodeError> {
    let Some(body) = msg.strip_prefix(b"\\") else {
        return Err(DecodeError::BadMagic(ctx));
    };
    let mut out = Vec::new();
    let mut tokens = body.split(|&b| b == b'\\');
    while let Some(key) = tokens.next() {
        let value = tokens.next().unwrap_or_default();
        if out.len() >= cap {
            return Err(DecodeError::TooLarge(ctx));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// Append `\key\value`.
fn put_pair(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.push(b'\\');
    out.extend_from_slice(key);
    out.push(b'\\');
    out.extend_from_slice(value);
}

/// Where the first `\final\` starts in `buf`.
fn find_final(buf: &[u8]) -> Option<usize> {
    buf.windows(FINAL.len()).position(|w| w == FINAL)
}

/// ASCII case-insensitive key comparison.
fn key_is(key: &[u8], name: &str) -> bool {
    key.eq_ignore_ascii_case(name.as_bytes())
}

/// The terminator of every TCP message and of UDP replies (spec §5).
const FINAL: &[u8] = b"\\final\\";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_plain_pairing() {
        let p = pairs(b"\\basic\\\\secure\\ABCDEF", "t").unwrap();
        assert_eq!(
            p,
            vec![(&b"basic"[..], &b""[..]), (&b"secure"[..], &b"ABCDEF"[..])]
        );
        let p = pairs(b"\\a\\1\\statechanged", "t").unwrap();
        assert_eq!(p[1], (&b"statechanged"[..], &b""[..]));
        let p = pairs(b"\\final\\", "t").unwrap();
        assert_eq!(p, vec![(&b"final"[..], &b""[..])]);
        assert_eq!(pairs(b"", "t"), Err(DecodeError::BadMagic("t")));
        assert_eq!(pairs(b"x\\a", "t"), Err(DecodeError::BadMagic("t")));
    }

    #[test]
    fn pairs_rejects_too_many() {
        let msg = b"\\a\\b".repeat(MAX_PAIRS + 1);
        assert_eq!(pairs(&msg, "t"), Err(DecodeError::TooLarge("t")));
    }

    #[test]
    fn decode_text_windows1252_and_plain() {
        let t = decode_text(b"caf\xe9\x01");
        assert_eq!(t.text, "caf\u{e9}\u{1}");
        assert_eq!(t.plain, "caf\u{e9}");
        assert!(!t.lossy);
    }
}
