//! Quake III / DarkPlaces connectionless messages: server queries (`getinfo`, `getstatus`) and
//! the dpmaster master protocol (`heartbeat`, `getservers`, `getserversExt` and their lists).
//!
//! ```text
//! every datagram:  ff ff ff ff <command: ASCII letters> <body>
//!
//! getinfo [" " challenge]              client/master -> server
//! getstatus [" " challenge]            client -> server
//! infoResponse 0a \k\v\k\v…            server -> client/master
//! statusResponse 0a \k\v… 0a {score " " ping " \"" name "\"" [extra] 0a}
//! heartbeat " " tag 0a                 server -> master
//! getservers [" " game] " " protocol {" " option}
//! getserversExt " " game " " protocol {" " option}
//! getserversResponse    {"\" ip:4 port:2 BE} ["\" "EOT" 00 00 00]
//! getserversExtResponse {"\" ip:4 port:2 | "/" ip:16 port:2} ["\" "EOT" 00 00 00]
//! ```
//!
//! Files: [`packet`] (every datagram, decode and encode, and the splitting of a server list
//! into datagrams), [`info`] (the `\key\value` info string). This module holds the named
//! limits, the one text-decoding rule ([`decode_text`], with [`strip_colours`]), the
//! whitespace-free [`Word`] used for challenges, tags and game names, and the dpmaster
//! challenge rule ([`generate_challenge`], [`is_master_challenge`]).
//!
//! [`query`] holds the client's machines (a server's status, a master's list), [`respond`] the
//! game server's answers and [`register`] its heartbeats to masters.
//!
//! Deliberately **not** here: sockets, clocks, randomness (callers pass random bytes in), the
//! master's registry and policy. Spec: `docs/protocols/quake3.md`.

pub mod info;
pub mod packet;
pub mod query;
pub mod register;
pub mod respond;

use std::fmt;

pub use info::InfoString;
pub use packet::{FilterOption, Packet, PlayerLine, ServerList};

use crate::model::Text;
use crate::wire::DecodeError;

/// The four bytes every connectionless datagram starts with.
pub const HEADER: [u8; 4] = [0xFF; 4];

/// Largest datagram the decoders accept (a UDP datagram never exceeds 64 KiB); a status reply
/// normally stays under [`LIST_DATAGRAM_LIMIT`] but decoders do not rely on it.
pub const MAX_DATAGRAM: usize = 65_535;

/// dpmaster fills each list datagram up to this many bytes; [`ServerList::encode_datagrams`]
/// never exceeds it.
pub const LIST_DATAGRAM_LIMIT: usize = 1400;

/// Longest info string accepted, in bytes (the engines' big info string is 8,192 bytes).
pub const MAX_INFO_STRING_LEN: usize = 8192;

/// Most key/value pairs one info string may hold.
pub const MAX_INFO_PAIRS: usize = 512;

/// Most player lines one status reply may hold.
pub const MAX_PLAYERS: usize = 256;

/// Longest player name accepted in a status line, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// Longest [`Word`] (challenge, heartbeat tag, game name, option) accepted, in bytes.
pub const MAX_WORD_LEN: usize = 64;

/// Most options one `getservers` / `getserversExt` request may carry.
pub const MAX_OPTIONS: usize = 32;

/// Most list entries one datagram can hold: every entry is at least 7 bytes.
pub const MAX_LIST_ENTRIES_PER_DATAGRAM: usize = MAX_DATAGRAM / IPV4_ENTRY_LEN;

/// An IPv4 list entry: `\` + 4 address bytes + 2 port bytes.
pub const IPV4_ENTRY_LEN: usize = 7;

/// An IPv6 list entry: `/` + 16 address bytes + 2 port bytes.
pub const IPV6_ENTRY_LEN: usize = 19;

/// The fake entry that ends a list (after its `\` separator).
pub const EOT: [u8; 6] = *b"EOT\0\0\0";

/// The default UDP port of dpmaster (and of Quake III's own master).
pub const MASTER_PORT: u16 = 27950;

/// Shortest challenge dpmaster sends with `getinfo`.
pub const MASTER_CHALLENGE_MIN_LEN: usize = 9;

/// Longest challenge dpmaster sends with `getinfo`.
pub const MASTER_CHALLENGE_MAX_LEN: usize = 12;

/// Random bytes [`generate_challenge`] takes: one for the length, one per character.
pub const CHALLENGE_RANDOM_LEN: usize = 1 + MASTER_CHALLENGE_MAX_LEN;

/// Bytes dpmaster never puts in a challenge although they are printable.
const CHALLENGE_EXCLUDED: [u8; 5] = [b'\\', b'/', b';', b'"', b'%'];

/// One whitespace-free token: a challenge, heartbeat tag, game name or gametype value.
///
/// 1 to [`MAX_WORD_LEN`] bytes, each printable ASCII (0x21–0x7E) and never `\` (a word may end
/// up as an info-string value, where a backslash would split it).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Word(Vec<u8>);

impl Word {
    /// Check `bytes` against the word rule.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, DecodeError> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(DecodeError::Invalid("empty word"));
        }
        if bytes.len() > MAX_WORD_LEN {
            return Err(DecodeError::TooLarge("word"));
        }
        if !bytes.iter().all(|&b| is_word_byte(b)) {
            return Err(DecodeError::Invalid("word byte"));
        }
        Ok(Self(bytes))
    }

    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The word as text (always ASCII).
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Every byte is printable ASCII, so this never falls back.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Word({:?})", self.as_str())
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_word_byte(b: u8) -> bool {
    (0x21..=0x7E).contains(&b) && b != b'\\'
}

/// The characters a dpmaster challenge is made of: 0x21–0x7E without `\ / ; " %` (89 bytes).
fn challenge_alphabet() -> impl Iterator<Item = u8> + Clone {
    (0x21u8..=0x7E).filter(|b| !CHALLENGE_EXCLUDED.contains(b))
}

/// Build a master challenge from caller-supplied random bytes (spec §3.2): byte 0 picks the
/// length (9 to 12), the next bytes pick one character each from the allowed alphabet.
///
/// Pure: the same bytes always give the same challenge, so tests can pin it. The mapping is a
/// remainder, slightly favouring the first characters of the alphabet; a challenge only has
/// to be unguessable by an off-path sender, not uniform.
#[must_use]
pub fn generate_challenge(random: [u8; CHALLENGE_RANDOM_LEN]) -> Word {
    let [len_byte, chars @ ..] = random;
    let span = MASTER_CHALLENGE_MAX_LEN - MASTER_CHALLENGE_MIN_LEN + 1;
    let len = MASTER_CHALLENGE_MIN_LEN + usize::from(len_byte) % span;
    let alphabet = challenge_alphabet();
    let size = alphabet.clone().count();
    let bytes: Vec<u8> = chars
        .iter()
        .take(len)
        .filter_map(|&r| alphabet.clone().nth(usize::from(r) % size))
        .collect();
    // Every byte comes from the alphabet, a subset of the word bytes, and 9..=12 fit.
    Word(bytes)
}

/// True when `bytes` follows dpmaster's challenge rule: 9 to 12 bytes from 0x21–0x7E, none of
/// `\ / ; " %`.
#[must_use]
pub fn is_master_challenge(bytes: &[u8]) -> bool {
    (MASTER_CHALLENGE_MIN_LEN..=MASTER_CHALLENGE_MAX_LEN).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| (0x21..=0x7E).contains(b) && !CHALLENGE_EXCLUDED.contains(b))
}

/// The caret that starts every colour code.
const CARET: u8 = b'^';

/// Remove colour codes from `raw`, keeping every other byte (spec §2.3, decision in §4):
///
/// * `^x` followed by three hex digits (DarkPlaces' any-colour code) is removed whole;
/// * `^` followed by an ASCII letter or digit (ioquake3's rule; `^0`–`^7` are the base colours)
///   is removed with that character;
/// * any other caret stays, including the first of `^^` and a caret at the end.
#[must_use]
pub fn strip_colours(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    while let Some((&b, tail)) = rest.split_first() {
        if b == CARET {
            if let [b'x', r, g, bl, after @ ..] = tail
                && [r, g, bl].iter().all(|c| c.is_ascii_hexdigit())
            {
                rest = after;
                continue;
            }
            if let [c, after @ ..] = tail
                && c.is_ascii_alphanumeric()
            {
                rest = after;
                continue;
            }
        }
        out.push(b);
        rest = tail;
    }
    out
}

/// Decode a Quake III / DarkPlaces string (name, info value) into [`Text`].
///
/// The bytes carry no declared charset (spec §2.3). The rule (a decision, spec §4): bytes that
/// are valid UTF-8 are read as UTF-8 (DarkPlaces games send UTF-8); anything else is read as
/// Windows-1252, a superset of the Latin-1 ioquake3 players type. Neither path is lossy.
/// `plain` drops colour codes ([`strip_colours`]) and control characters.
#[must_use]
pub fn decode_text(raw: &[u8]) -> Text {
    Text {
        raw: raw.to_vec(),
        text: decode_bytes(raw),
        plain: plain_text(raw).into_owned(),
        lossy: false,
    }
}

/// [`Text::plain`] of [`decode_text`] alone, for a caller that keeps nothing else (a master
/// reading a heartbeat's info). Printable ASCII with no caret, what nearly every server sends,
/// is borrowed as it is; anything else takes [`decode_text`]'s way.
#[must_use]
pub fn plain_text(raw: &[u8]) -> std::borrow::Cow<'_, str> {
    if raw
        .iter()
        .all(|&b| (b' '..=b'~').contains(&b) && b != CARET)
        && let Ok(s) = std::str::from_utf8(raw)
    {
        // Printable ASCII: nothing to strip or drop.
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        decode_bytes(&strip_colours(raw))
            .chars()
            .filter(|c| !c.is_control())
            .collect(),
    )
}

fn decode_bytes(raw: &[u8]) -> String {
    match std::str::from_utf8(raw) {
        Ok(s) => s.to_owned(),
        Err(_) => crate::text::decode_windows1252(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quake3_colour_codes_are_stripped() {
        assert_eq!(strip_colours(b"^1Red^7White"), b"RedWhite");
        assert_eq!(strip_colours(b"^xF80orange^x12"), b"orange12");
        assert_eq!(strip_colours(b"a^^1b^"), b"a^b^");
        assert_eq!(strip_colours(b"^a^Z^9"), b"");
        assert_eq!(strip_colours(b"^ ^.^\xe9"), b"^ ^.^\xe9");
        assert_eq!(strip_colours(b"^xG12"), b"G12");
    }

    proptest::proptest! {
        #[test]
        fn plain_text_is_what_decode_text_strips_to(raw in proptest::collection::vec(
            proptest::prop_oneof![
                4 => 0x20u8..0x7f,
                1 => proptest::sample::select(vec![CARET, b'x', b'7', 0x01, 0x7f, 0xe9, 0xc3, 0xa9]),
                1 => proptest::num::u8::ANY,
            ],
            0..40,
        )) {
            let slow: String = decode_bytes(&strip_colours(&raw))
                .chars()
                .filter(|c| !c.is_control())
                .collect();
            proptest::prop_assert_eq!(plain_text(&raw), slow.as_str());
        }
    }

    #[test]
    fn quake3_text_keeps_raw_and_strips_for_display() {
        let t = decode_text(b"^1B\xe9ll\x01a");
        assert_eq!(t.raw, b"^1B\xe9ll\x01a");
        assert_eq!(t.text, "^1Béll\u{1}a");
        assert_eq!(t.plain, "Bélla");
        assert!(!t.lossy);
        let t = decode_text("^x0F0Ünï".as_bytes());
        assert_eq!(t.text, "^x0F0Ünï");
        assert_eq!(t.plain, "Ünï");
    }

    #[test]
    fn quake3_challenges_follow_the_master_rule() {
        let mut seen_lengths = std::collections::BTreeSet::new();
        for seed in 0u8..=255 {
            let mut random = [0u8; CHALLENGE_RANDOM_LEN];
            for (i, r) in random.iter_mut().enumerate() {
                *r = seed
                    .wrapping_mul(31)
                    .wrapping_add(u8::try_from(i).unwrap().wrapping_mul(97));
            }
            let c = generate_challenge(random);
            assert!(is_master_challenge(c.as_bytes()), "{c:?}");
            assert_eq!(Word::new(c.as_bytes().to_vec()), Ok(c.clone()));
            seen_lengths.insert(c.as_bytes().len());
        }
        assert_eq!(
            seen_lengths.into_iter().collect::<Vec<_>>(),
            [9, 10, 11, 12]
        );
        // Every allowed character is reachable, none of the excluded ones.
        assert_eq!(challenge_alphabet().count(), 89);
        let mut random = [0u8; CHALLENGE_RANDOM_LEN];
        random[0] = 3;
        assert_eq!(generate_challenge(random).as_str(), "!!!!!!!!!!!!");
        assert!(!is_master_challenge(b"abcdefgh"));
        assert!(!is_master_challenge(b"abcdefgh;"));
        assert!(!is_master_challenge(b"abcdefghijklm"));
        assert!(!is_master_challenge(b"abcd efghi"));
    }

    #[test]
    fn quake3_words_are_checked() {
        assert!(Word::new(&b"Quake3Arena"[..]).is_ok());
        assert_eq!(
            Word::new(Vec::new()),
            Err(DecodeError::Invalid("empty word"))
        );
        assert_eq!(
            Word::new(&b"a b"[..]),
            Err(DecodeError::Invalid("word byte"))
        );
        assert_eq!(
            Word::new(&b"a\\b"[..]),
            Err(DecodeError::Invalid("word byte"))
        );
        assert_eq!(
            Word::new(vec![b'a'; 65]),
            Err(DecodeError::TooLarge("word"))
        );
    }
}
