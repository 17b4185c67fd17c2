//! The two Unreal 2 primitives that are not plain integers: the compact index (§4.2) and the
//! length-prefixed `FString` (§4.3).

use super::{BuildError, MAX_STRING_UNITS};
use crate::wire::{DecodeError, Reader};

/// Bits of the first compact-index byte.
const COMPACT_SIGN: u8 = 0x80;
const COMPACT_MORE_FIRST: u8 = 0x40;
const COMPACT_FIRST_BITS: u8 = 0x3f;
/// Bits of the middle bytes (B1..B3).
const COMPACT_MORE: u8 = 0x80;
const COMPACT_MIDDLE_BITS: u8 = 0x7f;
/// How many middle bytes there can be before the final 8-bit byte.
const COMPACT_MIDDLE_BYTES: u32 = 3;

/// Read a compact index (1 to 5 bytes, sign and magnitude).
///
/// The magnitude can be up to 35 bits, hence `i64`. Non-minimal spellings (a last byte with no
/// magnitude bits, or "minus zero") are rejected as [`DecodeError::Invalid`]: no engine writes
/// them, and rejecting them keeps `encode(decode(bytes)) == bytes` for every accepted input.
pub fn read_compact(r: &mut Reader<'_>) -> Result<i64, DecodeError> {
    const CTX: &str = "compact index";
    let b0 = r.u8(CTX)?;
    let negative = b0 & COMPACT_SIGN != 0;
    let mut magnitude = i64::from(b0 & COMPACT_FIRST_BITS);
    let mut more = b0 & COMPACT_MORE_FIRST != 0;
    let mut shift = 6u32;
    let mut last = b0 & COMPACT_FIRST_BITS;
    let mut middle = 0u32;
    while more {
        let b = r.u8(CTX)?;
        if middle < COMPACT_MIDDLE_BYTES {
            magnitude |= i64::from(b & COMPACT_MIDDLE_BITS) << shift;
            more = b & COMPACT_MORE != 0;
            last = b & COMPACT_MIDDLE_BITS;
            shift += 7;
            middle += 1;
        } else {
            magnitude |= i64::from(b) << shift;
            more = false;
            last = b;
        }
    }
    if last == 0 && (shift > 6 || negative) {
        return Err(DecodeError::Invalid("non-minimal compact index"));
    }
    Ok(if negative { -magnitude } else { magnitude })
}

/// Append the compact-index form of `value` (always the shortest spelling).
pub fn write_compact(out: &mut Vec<u8>, value: i32) {
    let negative = value < 0;
    let mut v = value.unsigned_abs();
    let mut b0 = (v & u32::from(COMPACT_FIRST_BITS)) as u8;
    if negative {
        b0 |= COMPACT_SIGN;
    }
    v >>= 6;
    if v != 0 {
        b0 |= COMPACT_MORE_FIRST;
    }
    out.push(b0);
    let mut middle = 0;
    while v != 0 {
        if middle < COMPACT_MIDDLE_BYTES {
            let mut b = (v & u32::from(COMPACT_MIDDLE_BITS)) as u8;
            v >>= 7;
            if v != 0 {
                b |= COMPACT_MORE;
            }
            out.push(b);
            middle += 1;
        } else {
            // At most 4 bits are left of a u32 after 27 bits.
            out.push((v & 0xff) as u8);
            v = 0;
        }
    }
}

/// The characters of a [`U2String`], in the form the wire used.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Units {
    /// Single bytes, U+0000–U+00FF (positive length).
    Narrow(Vec<u8>),
    /// UTF-16LE code units (negative length).
    Wide(Vec<u16>),
}

/// An Unreal 2 `FString` exactly as on the wire: the characters without the terminating NUL,
/// their form (single-byte or UTF-16), and whether a NUL terminated them.
///
/// Keeping the form and the terminator makes re-encoding byte-exact for every string
/// [`U2String::read`] accepts, including the tolerated spellings "`01 00` is empty" and "no
/// NUL at all". Built values always have at most [`MAX_STRING_UNITS`] units including the NUL,
/// so [`U2String::encode`] cannot fail. Turn one into text with [`super::decode_text`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct U2String {
    units: Units,
    nul: bool,
}

/// Shows the wire form compactly: `b"My Srv\0"` for single bytes (non-ASCII escaped),
/// `u"Betа\0"` for UTF-16 (lone surrogates as `\u{d800}`); `\0` marks the terminator.
impl std::fmt::Debug for U2String {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        match &self.units {
            Units::Narrow(bytes) => {
                f.write_str("b\"")?;
                write!(f, "{}", bytes.escape_ascii())?;
            }
            Units::Wide(units) => {
                f.write_str("u\"")?;
                for c in char::decode_utf16(units.iter().copied()) {
                    match c {
                        Ok(c) => write!(f, "{}", c.escape_debug())?,
                        Err(e) => write!(f, "\\u{{{:x}}}", e.unpaired_surrogate())?,
                    }
                }
            }
        }
        if self.nul {
            f.write_str("\\0")?;
        }
        f.write_char('"')
    }
}

impl Default for U2String {
    fn default() -> Self {
        Self::empty()
    }
}

impl U2String {
    /// The empty string, encoded as the single byte `00`.
    #[must_use]
    pub const fn empty() -> Self {
        Self {
            units: Units::Narrow(Vec::new()),
            nul: false,
        }
    }

    /// The string a stock server sends for `text`: single bytes (Latin-1) when every character
    /// is at most U+00FF, else UTF-16LE (§4.3). Non-empty strings get their NUL.
    ///
    /// Fails when `text` needs more than [`MAX_STRING_UNITS`] units including the NUL.
    pub fn from_text(text: &str) -> Result<Self, BuildError> {
        if text.chars().all(|c| u32::from(c) <= 0xff) {
            // Every char is <= U+00FF, so the truncation keeps its value.
            let bytes: Vec<u8> = text.chars().map(|c| u32::from(c) as u8).collect();
            Self::narrow(bytes)
        } else {
            Self::wide(text.encode_utf16().collect())
        }
    }

    /// A single-byte string from raw bytes (colour codes and any byte allowed); a NUL is
    /// appended on the wire unless `bytes` is empty.
    ///
    /// Fails when `bytes` is longer than [`MAX_STRING_UNITS`]` - 1`.
    pub fn narrow(bytes: Vec<u8>) -> Result<Self, BuildError> {
        if bytes.len() >= MAX_STRING_UNITS {
            return Err(BuildError::TooLong("string"));
        }
        let nul = !bytes.is_empty();
        Ok(Self {
            units: Units::Narrow(bytes),
            nul,
        })
    }

    /// A UTF-16 string from code units; it is always sent with its `00 00` terminator (so an
    /// empty one is `81 00 00`).
    ///
    /// Fails when `units` is longer than [`MAX_STRING_UNITS`]` - 1`.
    pub fn wide(units: Vec<u16>) -> Result<Self, BuildError> {
        if units.len() >= MAX_STRING_UNITS {
            return Err(BuildError::TooLong("string"));
        }
        Ok(Self {
            units: Units::Wide(units),
            nul: true,
        })
    }

    /// The characters without the terminator.
    #[must_use]
    pub const fn units(&self) -> &Units {
        &self.units
    }

    /// True when the wire form had (or will have) a terminating NUL.
    #[must_use]
    pub const fn has_nul(&self) -> bool {
        self.nul
    }

    /// True for the UTF-16 form.
    #[must_use]
    pub const fn is_wide(&self) -> bool {
        matches!(self.units, Units::Wide(_))
    }

    /// True when there are no characters (whatever the spelling).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        match &self.units {
            Units::Narrow(b) => b.is_empty(),
            Units::Wide(u) => u.is_empty(),
        }
    }

    /// Read one string (§4.3, quirks §13.2–§13.4): drops exactly one trailing NUL, keeps a
    /// string without NUL as is, keeps embedded NULs.
    ///
    /// A length above [`MAX_STRING_UNITS`] is [`DecodeError::TooLarge`]; one longer than what
    /// is left is [`DecodeError::Truncated`].
    pub fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = read_compact(r)?;
        let count = usize::try_from(n.unsigned_abs())
            .ok()
            .filter(|&c| c <= MAX_STRING_UNITS)
            .ok_or(DecodeError::TooLarge("string length"))?;
        if n >= 0 {
            let mut bytes = r.take(count, "string")?.to_vec();
            let nul = bytes.last() == Some(&0);
            if nul {
                bytes.pop();
            }
            Ok(Self {
                units: Units::Narrow(bytes),
                nul,
            })
        } else {
            let raw = r.take(count.saturating_mul(2), "utf-16 string")?;
            let mut units: Vec<u16> = raw
                .chunks_exact(2)
                .map(|c| {
                    u16::from_le_bytes([
                        c.first().copied().unwrap_or(0),
                        c.last().copied().unwrap_or(0),
                    ])
                })
                .collect();
            let nul = units.last() == Some(&0);
            if nul {
                units.pop();
            }
            Ok(Self {
                units: Units::Wide(units),
                nul,
            })
        }
    }

    /// Decode a buffer that holds exactly one string.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let s = Self::read(&mut r)?;
        r.finish("string")?;
        Ok(s)
    }

    /// Append the wire form: compact length (negative for UTF-16), the units, the NUL if any.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let extra = usize::from(self.nul);
        match &self.units {
            Units::Narrow(bytes) => {
                let n = bytes.len() + extra;
                // Bounded by MAX_STRING_UNITS when built or read.
                write_compact(out, i32::try_from(n).unwrap_or(i32::MAX));
                out.extend_from_slice(bytes);
                if self.nul {
                    out.push(0);
                }
            }
            Units::Wide(units) => {
                let n = units.len() + extra;
                write_compact(out, -i32::try_from(n).unwrap_or(i32::MAX));
                for u in units {
                    out.extend_from_slice(&u.to_le_bytes());
                }
                if self.nul {
                    out.extend_from_slice(&[0, 0]);
                }
            }
        }
    }

    /// The number of bytes [`Self::encode`] appends.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        let mut len = Vec::new();
        let (n, unit) = match &self.units {
            Units::Narrow(b) => (b.len() + usize::from(self.nul), 1),
            Units::Wide(u) => (u.len() + usize::from(self.nul), 2),
        };
        write_compact(&mut len, i32::try_from(n).unwrap_or(i32::MAX));
        len.len() + n * unit
    }

    /// A single-byte string exactly as given, NUL-terminated unless empty (test helper).
    #[cfg(test)]
    pub(crate) fn from_wire_narrow(bytes: Vec<u8>) -> Self {
        Self::narrow(bytes).expect("short test string")
    }

    /// A UTF-16 string exactly as given (test helper).
    #[cfg(test)]
    pub(crate) fn from_wire_wide(units: Vec<u16>) -> Self {
        Self::wide(units).expect("short test string")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (value, bytes) from the spec's table in §4.2.
    const COMPACT_TABLE: &[(i32, &[u8])] = &[
        (0, &[0x00]),
        (1, &[0x01]),
        (63, &[0x3f]),
        (64, &[0x40, 0x01]),
        (70, &[0x46, 0x01]),
        (127, &[0x7f, 0x01]),
        (128, &[0x40, 0x02]),
        (200, &[0x48, 0x03]),
        (8191, &[0x7f, 0x7f]),
        (8192, &[0x40, 0x80, 0x01]),
        (2_147_483_647, &[0x7f, 0xff, 0xff, 0xff, 0x0f]),
        (-1, &[0x81]),
        (-5, &[0x85]),
        (-70, &[0xc6, 0x01]),
    ];

    #[test]
    fn decode_compact_table() {
        for &(value, bytes) in COMPACT_TABLE {
            let mut r = Reader::new(bytes);
            assert_eq!(read_compact(&mut r), Ok(i64::from(value)), "{bytes:02x?}");
            assert!(r.is_empty());
        }
    }

    #[test]
    fn encode_compact_table() {
        for &(value, bytes) in COMPACT_TABLE {
            let mut out = Vec::new();
            write_compact(&mut out, value);
            assert_eq!(out, bytes, "{value}");
        }
    }

    #[test]
    fn encode_compact_i32_min() {
        let mut out = Vec::new();
        write_compact(&mut out, i32::MIN);
        assert_eq!(out, [0xc0, 0x80, 0x80, 0x80, 0x10]);
        assert_eq!(
            read_compact(&mut Reader::new(&out)),
            Ok(i64::from(i32::MIN))
        );
    }

    #[test]
    fn decode_compact_five_bytes_full_magnitude() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            read_compact(&mut Reader::new(&bytes)),
            Ok(-((1i64 << 35) - 1))
        );
    }

    #[test]
    fn decode_compact_rejects_non_minimal() {
        for bytes in [
            &[0x80][..],
            &[0x40, 0x00],
            &[0x41, 0x80, 0x00],
            &[0x40, 0x80, 0x80, 0x80, 0x00],
        ] {
            assert_eq!(
                read_compact(&mut Reader::new(bytes)),
                Err(DecodeError::Invalid("non-minimal compact index")),
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn decode_compact_rejects_truncated() {
        assert_eq!(
            read_compact(&mut Reader::new(&[0x46])),
            Err(DecodeError::Truncated("compact index"))
        );
    }

    #[test]
    fn decode_string_forms() {
        assert_eq!(U2String::decode(&[0x00]), Ok(U2String::empty()));
        let one_nul = U2String::decode(&[0x01, 0x00]).expect("empty");
        assert!(one_nul.is_empty() && one_nul.has_nul());
        let no_nul = U2String::decode(&[0x03, b'a', b'b', b'c']).expect("no nul");
        assert_eq!(no_nul.units(), &Units::Narrow(b"abc".to_vec()));
        assert!(!no_nul.has_nul());
        let two_nul = U2String::decode(&[0x03, b'a', 0, 0]).expect("two nul");
        assert_eq!(two_nul.units(), &Units::Narrow(b"a\0".to_vec()));
    }

    #[test]
    fn encode_string_forms() {
        let cases: &[(U2String, &[u8])] = &[
            (U2String::empty(), &[0x00]),
            (
                U2String::from_text("Café").expect("short"),
                b"\x05Caf\xe9\x00",
            ),
            (
                U2String::from_text("Betа").expect("short"),
                b"\x85B\x00e\x00t\x000\x04\x00\x00",
            ),
            (U2String::wide(Vec::new()).expect("short"), &[0x81, 0, 0]),
        ];
        for (s, bytes) in cases {
            let mut out = vec![0xa5];
            s.encode(&mut out);
            assert_eq!(out.get(1..), Some(*bytes));
            assert_eq!(s.encoded_len(), bytes.len());
            assert_eq!(U2String::decode(bytes).as_ref(), Ok(s));
        }
    }

    #[test]
    fn decode_string_rejects_too_large_and_truncated() {
        // 2^34: far beyond any datagram.
        assert_eq!(
            U2String::decode(&[0x40, 0x80, 0x80, 0x80, 0x80]),
            Err(DecodeError::TooLarge("string length"))
        );
        assert_eq!(
            U2String::decode(&[0x05, b'a']),
            Err(DecodeError::Truncated("string"))
        );
        assert_eq!(
            U2String::decode(&[0x82, b'a', 0, 0]),
            Err(DecodeError::Truncated("utf-16 string"))
        );
    }

    #[test]
    fn debug_shows_wire_form() {
        let narrow = U2String::decode(b"\x05Caf\xe9\x00").expect("valid");
        assert_eq!(format!("{narrow:?}"), r#"b"Caf\xe9\0""#);
        let wide = U2String::decode(&[0x83, 0x41, 0, 0x00, 0xd8, 0, 0]).expect("valid");
        assert_eq!(format!("{wide:?}"), r#"u"A\u{d800}\0""#);
        assert_eq!(format!("{:?}", U2String::empty()), r#"b"""#);
    }

    #[test]
    fn build_rejects_too_long() {
        assert_eq!(
            U2String::narrow(vec![b'a'; MAX_STRING_UNITS]),
            Err(BuildError::TooLong("string"))
        );
        assert!(U2String::narrow(vec![b'a'; MAX_STRING_UNITS - 1]).is_ok());
    }

    proptest! {
        #[test]
        fn compact_round_trip(v in any::<i32>()) {
            let mut out = Vec::new();
            write_compact(&mut out, v);
            let mut r = Reader::new(&out);
            prop_assert_eq!(read_compact(&mut r), Ok(i64::from(v)));
            prop_assert!(r.is_empty());
        }

        #[test]
        fn string_decode_never_panics_and_reencodes_exactly(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut r = Reader::new(&bytes);
            if let Ok(s) = U2String::read(&mut r) {
                let used = bytes.len() - r.remaining();
                let mut out = Vec::new();
                s.encode(&mut out);
                prop_assert_eq!(Some(&out[..]), bytes.get(..used));
                prop_assert_eq!(s.encoded_len(), used);
            }
        }

        #[test]
        fn string_text_round_trip(text in "\\PC{0,80}") {
            let s = U2String::from_text(&text).expect("short");
            let mut out = Vec::new();
            s.encode(&mut out);
            prop_assert_eq!(U2String::decode(&out), Ok(s.clone()));
            // Latin-1 out, Windows-1252 in: only U+0080..U+009F differ (§4.5).
            if !text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)) {
                prop_assert_eq!(super::super::decode_text(&s).text, text);
            }
        }
    }
}
