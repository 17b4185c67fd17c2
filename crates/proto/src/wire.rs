//! The one panic-free byte reader every decoder uses, the crate's `DecodeError`, and small
//! encode helpers shared by all protocols.
//!
//! Every read is bounds-checked through `split_at_checked`: a short datagram becomes an error
//! value, never a panic. Contexts are `&'static str` naming what was being read, so errors are
//! cheap to build and easy to compare in tests.

use std::fmt::Write as _;

/// Why a datagram, frame or document could not be decoded.
///
/// Every decoder in this crate returns this one type. The `&'static str` names the field or
/// message that was being read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended before the named field was complete.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// Bytes were left over after a message that must consume its whole input.
    #[error("{0} trailing bytes after {1}")]
    TrailingBytes(usize, &'static str),
    /// A magic, header or type byte did not match any known message.
    #[error("unknown or bad magic in {0}")]
    BadMagic(&'static str),
    /// A field held a value the protocol does not allow.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// A count or length from the wire exceeded the named limit.
    #[error("{0} exceeds its limit")]
    TooLarge(&'static str),
    /// A decimal or varint number could not be parsed or overflowed.
    #[error("bad number in {0}")]
    BadNumber(&'static str),
    /// A string was not terminated where the protocol requires a terminator.
    #[error("unterminated string in {0}")]
    Unterminated(&'static str),
    /// The input is well-formed so far but incomplete (stream framings only).
    #[error("incomplete {0}")]
    Incomplete(&'static str),
}

/// A cursor over a borrowed byte slice whose reads never panic.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader positioned at the start of `buf`.
    #[must_use]
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// How many bytes are left.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is left.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next byte without consuming it.
    #[must_use]
    pub fn peek(&self) -> Option<u8> {
        self.buf.first().copied()
    }

    /// The unread bytes without consuming them.
    #[must_use]
    pub fn peek_rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Take exactly `n` bytes.
    pub fn take(&mut self, n: usize, ctx: &'static str) -> Result<&'a [u8], DecodeError> {
        let (head, rest) = self
            .buf
            .split_at_checked(n)
            .ok_or(DecodeError::Truncated(ctx))?;
        self.buf = rest;
        Ok(head)
    }

    /// Take exactly `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, ctx: &'static str) -> Result<[u8; N], DecodeError> {
        let head = self.take(N, ctx)?;
        let mut out = [0u8; N];
        out.copy_from_slice(head);
        Ok(out)
    }

    /// Skip `n` bytes.
    pub fn skip(&mut self, n: usize, ctx: &'static str) -> Result<(), DecodeError> {
        self.take(n, ctx).map(|_| ())
    }

    /// One byte.
    pub fn u8(&mut self, ctx: &'static str) -> Result<u8, DecodeError> {
        let (&b, rest) = self.buf.split_first().ok_or(DecodeError::Truncated(ctx))?;
        self.buf = rest;
        Ok(b)
    }

    /// A little-endian `u16`.
    pub fn u16_le(&mut self, ctx: &'static str) -> Result<u16, DecodeError> {
        self.array(ctx).map(u16::from_le_bytes)
    }

    /// A big-endian `u16`.
    pub fn u16_be(&mut self, ctx: &'static str) -> Result<u16, DecodeError> {
        self.array(ctx).map(u16::from_be_bytes)
    }

    /// A little-endian `u32`.
    pub fn u32_le(&mut self, ctx: &'static str) -> Result<u32, DecodeError> {
        self.array(ctx).map(u32::from_le_bytes)
    }

    /// A big-endian `u32`.
    pub fn u32_be(&mut self, ctx: &'static str) -> Result<u32, DecodeError> {
        self.array(ctx).map(u32::from_be_bytes)
    }

    /// A little-endian `i32`.
    pub fn i32_le(&mut self, ctx: &'static str) -> Result<i32, DecodeError> {
        self.array(ctx).map(i32::from_le_bytes)
    }

    /// Bytes up to (not including) the next NUL; the NUL is consumed.
    pub fn cstr(&mut self, ctx: &'static str) -> Result<&'a [u8], DecodeError> {
        self.until(0, ctx)
    }

    /// Bytes up to (not including) the next `delim`; the delimiter is consumed.
    pub fn until(&mut self, delim: u8, ctx: &'static str) -> Result<&'a [u8], DecodeError> {
        let pos = self
            .buf
            .iter()
            .position(|&b| b == delim)
            .ok_or(DecodeError::Unterminated(ctx))?;
        let head = self.take(pos, ctx)?;
        self.skip(1, ctx)?;
        Ok(head)
    }

    /// A sub-reader over the next `len` bytes, for length-prefixed bodies.
    pub fn sub(&mut self, len: usize, ctx: &'static str) -> Result<Self, DecodeError> {
        self.take(len, ctx).map(Reader::new)
    }

    /// Everything that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Succeed only when the whole input was consumed.
    pub fn finish(self, ctx: &'static str) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.buf.len(), ctx))
        }
    }
}

/// Parse an ASCII decimal integer (optional leading `-`), as servers write counts and scores.
///
/// Leading and trailing ASCII spaces are tolerated; anything else is an error.
pub fn parse_decimal(bytes: &[u8], ctx: &'static str) -> Result<i64, DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::BadNumber(ctx))?;
    text.trim_matches(' ')
        .parse::<i64>()
        .map_err(|_| DecodeError::BadNumber(ctx))
}

/// Append the decimal form of `n`.
pub fn put_decimal(out: &mut Vec<u8>, n: i64) {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = write!(s, "{n}");
    out.extend_from_slice(s.as_bytes());
}

/// Lower-case hex of `bytes`, for the `raw` fields of results.
#[must_use]
pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_reads_in_order_and_finishes() {
        let mut r = Reader::new(&[1, 2, 0, 3, 0, 0, 0, b'h', b'i', 0, 9]);
        assert_eq!(r.u8("a"), Ok(1));
        assert_eq!(r.u16_le("b"), Ok(2));
        assert_eq!(r.u32_be("c"), Ok(0x0300_0000));
        assert_eq!(r.cstr("d"), Ok(&b"hi"[..]));
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.finish("e"), Err(DecodeError::TrailingBytes(1, "e")));
    }

    #[test]
    fn reader_rejects_short_input() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u32_le("x"), Err(DecodeError::Truncated("x")));
        // A failed read consumes nothing.
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.cstr("s"), Err(DecodeError::Unterminated("s")));
    }

    #[test]
    fn decimal_round_trip() {
        for n in [0i64, 7, -3, 65535, i64::from(i32::MIN)] {
            let mut out = Vec::new();
            put_decimal(&mut out, n);
            assert_eq!(parse_decimal(&out, "n"), Ok(n));
        }
        assert_eq!(parse_decimal(b"1x", "n"), Err(DecodeError::BadNumber("n")));
        assert_eq!(parse_decimal(b" 12 ", "n"), Ok(12));
    }
}
