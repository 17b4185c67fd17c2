//! Value encodings (spec §4): NUL-terminated strings, decimal integers and 0.7 varints.

use std::fmt;

use crate::wire::{self, DecodeError, Reader};

use super::BuildError;

/// Most bytes a 32-bit varint takes.
pub const MAX_VARINT_LEN: usize = 5;

/// A NUL-free byte string as sent on the wire (UTF-8 in practice, not guaranteed).
///
/// It can only be built without NUL bytes, so encoding it with its terminator cannot fail.
/// Decode it for display with [`super::decode_text`].
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TwStr(Vec<u8>);

impl TwStr {
    /// The empty string.
    #[must_use]
    pub const fn empty() -> Self {
        Self(Vec::new())
    }

    /// Wrap `bytes`; fails with [`BuildError::ContainsNul`] when they contain a NUL.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, BuildError> {
        let bytes = bytes.into();
        if bytes.contains(&0) {
            Err(BuildError::ContainsNul)
        } else {
            Ok(Self(bytes))
        }
    }

    /// The raw bytes, without terminator.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The byte length, without terminator.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A copy cut to at most `limit` bytes, at a UTF-8 code point boundary when the string is
    /// valid UTF-8 (DDNet's rule), else at the byte limit (teeworlds' rule).
    #[must_use]
    pub fn truncated(&self, limit: usize) -> Self {
        if self.0.len() <= limit {
            return self.clone();
        }
        let mut end = limit;
        if std::str::from_utf8(&self.0).is_ok() {
            while end > 0 && self.0.get(end).is_some_and(|&b| b & 0xc0 == 0x80) {
                end -= 1;
            }
        }
        Self(self.0.get(..end).unwrap_or_default().to_vec())
    }

    pub(crate) fn read(r: &mut Reader<'_>, ctx: &'static str) -> Result<Self, DecodeError> {
        r.cstr(ctx).map(|b| Self(b.to_vec()))
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
        out.push(0);
    }
}

impl TryFrom<&str> for TwStr {
    type Error = BuildError;
    fn try_from(s: &str) -> Result<Self, BuildError> {
        Self::new(s.as_bytes())
    }
}

impl fmt::Debug for TwStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) => write!(f, "{s:?}"),
            Err(_) => write!(f, "b\"{}\"", self.0.escape_ascii()),
        }
    }
}

/// Read a NUL-terminated decimal integer that must fit an `i32` (§4.2).
pub(crate) fn read_decimal(r: &mut Reader<'_>, ctx: &'static str) -> Result<i32, DecodeError> {
    let bytes = r.cstr(ctx)?;
    let n = wire::parse_decimal(bytes, ctx)?;
    i32::try_from(n).map_err(|_| DecodeError::BadNumber(ctx))
}

/// Read a NUL-terminated decimal 32-bit value written signed or unsigned, keeping the low 32
/// bits (the `iext` map CRC, quirk 4).
pub(crate) fn read_decimal_u32(r: &mut Reader<'_>, ctx: &'static str) -> Result<u32, DecodeError> {
    let bytes = r.cstr(ctx)?;
    let n = wire::parse_decimal(bytes, ctx)?;
    if (i64::from(i32::MIN)..=i64::from(u32::MAX)).contains(&n) {
        // Keeping the low 32 bits is the point.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(n as u32)
    } else {
        Err(DecodeError::BadNumber(ctx))
    }
}

/// Write an integer as a NUL-terminated decimal string.
pub(crate) fn write_decimal(out: &mut Vec<u8>, n: i64) {
    wire::put_decimal(out, n);
    out.push(0);
}

/// Read a 0.7 varint (§4.3). Like the reference unpacker it reads at most five bytes and
/// keeps only the low 4 bits of the fifth.
pub fn read_varint(r: &mut Reader<'_>, ctx: &'static str) -> Result<i32, DecodeError> {
    let first = r.u8(ctx)?;
    let negative = first & 0x40 != 0;
    let mut magnitude = u32::from(first & 0x3f);
    let mut more = first & 0x80 != 0;
    let mut shift = 6;
    while more {
        let b = r.u8(ctx)?;
        if shift == 27 {
            magnitude |= u32::from(b & 0x0f) << shift;
            break;
        }
        magnitude |= u32::from(b & 0x7f) << shift;
        more = b & 0x80 != 0;
        shift += 7;
    }
    // The magnitude has at most 31 bits, so it fits an i32.
    let m = i32::try_from(magnitude & 0x7fff_ffff).map_err(|_| DecodeError::BadNumber(ctx))?;
    Ok(if negative { !m } else { m })
}

/// Append `value` as a 0.7 varint (1 to 5 bytes).
pub fn write_varint(out: &mut Vec<u8>, value: i32) {
    let (sign, mut m) = if value < 0 {
        (0x40u8, (!value).unsigned_abs())
    } else {
        (0, value.unsigned_abs())
    };
    // Each cast keeps only the masked bits.
    #[allow(clippy::cast_possible_truncation)]
    let mut b = sign | (m & 0x3f) as u8;
    m >>= 6;
    while m != 0 {
        out.push(b | 0x80);
        #[allow(clippy::cast_possible_truncation)]
        {
            b = (m & 0x7f) as u8;
        }
        m >>= 7;
    }
    out.push(b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (value, bytes) from spec §4.3, plus the edges.
    const VARINTS: &[(i32, &[u8])] = &[
        (0, &[0x00]),
        (1, &[0x01]),
        (24, &[0x18]),
        (48, &[0x30]),
        (63, &[0x3f]),
        (64, &[0x80, 0x01]),
        (200, &[0x88, 0x03]),
        (276, &[0x94, 0x04]),
        (840, &[0x88, 0x0d]),
        (-1, &[0x40]),
        (-5, &[0x44]),
        (-64, &[0x7f]),
        (-65, &[0xc0, 0x01]),
        (123_456_789, &[0x95, 0xb4, 0xde, 0x75]),
        (i32::MAX, &[0xbf, 0xff, 0xff, 0xff, 0x0f]),
        (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
    ];

    #[test]
    fn varint_table_both_directions() {
        for &(value, bytes) in VARINTS {
            let mut out = Vec::new();
            write_varint(&mut out, value);
            assert_eq!(out, bytes, "encode {value}");
            let mut r = Reader::new(bytes);
            assert_eq!(read_varint(&mut r, "v"), Ok(value), "decode {bytes:02x?}");
            assert!(r.is_empty());
        }
    }

    #[test]
    fn decode_varint_rejects_truncated() {
        let mut r = Reader::new(&[0x88]);
        assert_eq!(read_varint(&mut r, "v"), Err(DecodeError::Truncated("v")));
        let mut r = Reader::new(&[]);
        assert_eq!(read_varint(&mut r, "v"), Err(DecodeError::Truncated("v")));
    }

    #[test]
    fn quirk_varint_fifth_byte_stops_reading() {
        // The fifth byte ends the number even with its continuation bit set.
        let mut r = Reader::new(&[0x80, 0x80, 0x80, 0x80, 0xff, 0x07]);
        assert_eq!(read_varint(&mut r, "v"), Ok(0x0f << 27));
        assert_eq!(r.remaining(), 1);
    }

    #[test]
    fn quirk_signed_and_unsigned_map_crc() {
        let mut r = Reader::new(b"-1924373370\x002370593926\x004294967296\x00");
        assert_eq!(read_decimal_u32(&mut r, "crc"), Ok(0x8d4c_6486));
        assert_eq!(read_decimal_u32(&mut r, "crc"), Ok(0x8d4c_6486));
        assert_eq!(
            read_decimal_u32(&mut r, "crc"),
            Err(DecodeError::BadNumber("crc"))
        );
    }

    #[test]
    fn decimal_table() {
        for (n, s) in [
            (0, &b"0\0"[..]),
            (-1, b"-1\0"),
            (-9999, b"-9999\0"),
            (1_193_046, b"1193046\0"),
        ] {
            let mut out = Vec::new();
            write_decimal(&mut out, n.into());
            assert_eq!(out, s);
            assert_eq!(read_decimal(&mut Reader::new(s), "n"), Ok(n));
        }
        assert_eq!(
            read_decimal(&mut Reader::new(b"2147483648\0"), "n"),
            Err(DecodeError::BadNumber("n"))
        );
        assert_eq!(
            read_decimal(&mut Reader::new(b"12"), "n"),
            Err(DecodeError::Unterminated("n"))
        );
    }

    #[test]
    fn twstr_rejects_nul_and_truncates_at_code_points() {
        assert_eq!(TwStr::new(&b"a\0b"[..]), Err(BuildError::ContainsNul));
        let s = TwStr::try_from("a★b").unwrap();
        assert_eq!(s.truncated(2).as_bytes(), b"a");
        assert_eq!(s.truncated(4).as_bytes(), "a★".as_bytes());
        let raw = TwStr::new(vec![b'a', 0xe2, 0x98, 0xff]).unwrap();
        assert_eq!(raw.truncated(2).as_bytes(), &[b'a', 0xe2]);
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            prop_assert!(out.len() <= MAX_VARINT_LEN);
            let mut r = Reader::new(&out);
            prop_assert_eq!(read_varint(&mut r, "v"), Ok(v));
            prop_assert!(r.is_empty());
        }

        #[test]
        fn varint_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = read_varint(&mut Reader::new(&bytes), "v");
        }
    }
}
