//! Character-set conversions shared by the protocols.
//!
//! Protocol modules do not call these directly from their packet code: each protocol's
//! `mod.rs` has one documented function that decides how *its* strings are decoded and calls
//! into here. This module only knows character sets, not protocols.

use std::sync::OnceLock;

use encoding_rs::{UTF_16LE, WINDOWS_1252};

/// Decode Windows-1252 (a superset of Latin-1 for display).
///
/// Never fails: the five bytes Windows-1252 leaves undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D)
/// map to the C1 code points of the same value, as the WHATWG index does.
#[must_use]
pub fn decode_windows1252(bytes: &[u8]) -> String {
    // Names and values are short and mostly ASCII: one pass with a table is several times
    // cheaper than setting up a decoder per string (measured on a 2,000-server GameSpy scan).
    if bytes.is_ascii()
        && let Ok(ascii) = std::str::from_utf8(bytes)
    {
        return ascii.to_owned();
    }
    let high = windows1252_high();
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        let c = match b.checked_sub(0x80) {
            None => char::from(b),
            Some(i) => high.get(usize::from(i)).copied().unwrap_or('\u{fffd}'),
        };
        out.push(c);
    }
    out
}

/// The characters of bytes 0x80–0xFF in Windows-1252, taken once from encoding_rs so the two
/// can never disagree.
fn windows1252_high() -> &'static [char; 128] {
    static HIGH: OnceLock<[char; 128]> = OnceLock::new();
    HIGH.get_or_init(|| {
        let mut table = ['\u{fffd}'; 128];
        for (slot, b) in table.iter_mut().zip(0x80u8..=0xFF) {
            let byte = [b];
            let (text, _) = WINDOWS_1252.decode_without_bom_handling(&byte);
            if let Some(c) = text.chars().next() {
                *slot = c;
            }
        }
        table
    })
}

/// Encode text as Windows-1252; characters it cannot represent become `?`.
///
/// Used by responders that must emit single-byte strings from configured Unicode text.
#[must_use]
pub fn encode_windows1252(text: &str) -> Vec<u8> {
    // Responders encode every name of every reply: a table lookup per character, not an
    // encoder per character (the emulated farm spent most of its time there).
    let high = windows1252_high();
    text.chars()
        .map(|c| match u8::try_from(c) {
            Ok(b) if !(0x80..0xA0).contains(&b) => b,
            _ => high
                .iter()
                .position(|&h| h == c)
                .and_then(|i| u8::try_from(i + 0x80).ok())
                .unwrap_or(b'?'),
        })
        .collect()
}

/// True when every character of `text` has a Windows-1252 byte.
#[must_use]
pub fn fits_windows1252(text: &str) -> bool {
    let (_, _, unmappable) = WINDOWS_1252.encode(text);
    !unmappable
}

/// Decode UTF-8, replacing invalid sequences with U+FFFD.
#[must_use]
pub fn decode_utf8_lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Decode UTF-16LE code units, replacing unpaired surrogates with U+FFFD. An odd trailing byte
/// is dropped.
#[must_use]
pub fn decode_utf16le(bytes: &[u8]) -> String {
    let (text, _) = UTF_16LE.decode_without_bom_handling(bytes);
    text.into_owned()
}

/// Encode text as UTF-16LE code units (no BOM, no terminator).
#[must_use]
pub fn encode_utf16le(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows1252_quirk_latin1_and_undefined_bytes() {
        assert_eq!(decode_windows1252(b"J\xe9r\xf4me"), "Jérôme");
        assert_eq!(decode_windows1252(b"\x80"), "€");
        assert_eq!(decode_windows1252(b"plain ascii"), "plain ascii");
        assert_eq!(
            decode_windows1252(b"\x81\x8d\x8f\x90\x9d"),
            "\u{81}\u{8d}\u{8f}\u{90}\u{9d}"
        );
        assert_eq!(encode_windows1252("Jérôme€"), b"J\xe9r\xf4me\x80");
        assert_eq!(encode_windows1252("日本"), b"??");
    }

    #[test]
    fn bytes_that_look_like_a_bom_are_text() {
        // A Latin-1 name may start with "ÿþ" (FF FE) or "ï»¿" (EF BB BF); they are characters,
        // not byte-order marks.
        assert_eq!(decode_windows1252(b"\xff\xfeName"), "ÿþName");
        assert_eq!(decode_windows1252(b"\xef\xbb\xbf"), "ï»¿");
    }

    #[test]
    fn utf16le_round_trip() {
        let s = "Ünïcødé 日本";
        assert_eq!(decode_utf16le(&encode_utf16le(s)), s);
    }
}

#[cfg(test)]
mod table_tests {
    use proptest::prelude::*;

    proptest! {
        /// The table decoder is encoding_rs's Windows-1252 decoder, byte for byte. Without
        /// BOM handling: `decode` would read a leading FF FE as a UTF-16 mark, not as "ÿþ".
        #[test]
        fn windows1252_table_matches_encoding_rs(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let (want, _) = encoding_rs::WINDOWS_1252.decode_without_bom_handling(&bytes);
            prop_assert_eq!(super::decode_windows1252(&bytes), want.into_owned());
        }

        /// The table encoder is encoding_rs's Windows-1252 encoder, with `?` for each
        /// character it cannot map.
        #[test]
        fn windows1252_table_encoder_matches_encoding_rs(text in "\\PC{0,24}", extra in proptest::collection::vec(0x80u32..0x200, 0..8)) {
            let text: String = text.chars().chain(extra.into_iter().filter_map(char::from_u32)).collect();
            let mut want = Vec::new();
            for c in text.chars() {
                let mut buf = [0u8; 4];
                let (bytes, _, unmappable) = encoding_rs::WINDOWS_1252.encode(c.encode_utf8(&mut buf));
                if unmappable { want.push(b'?') } else { want.extend_from_slice(&bytes) }
            }
            prop_assert_eq!(super::encode_windows1252(&text), want);
        }
    }
}
