//! The frame codec: `<decimal length><json text><LF>`, the length counting the JSON bytes plus
//! the newline (§2, §7.2).
//!
//! Errors and what they mean for the connection (§7.1 (6)): every `Err` except
//! [`DecodeError::Incomplete`] is a framing error, which cannot resynchronise, so the
//! connection must be closed.
//!
//! | input | error |
//! |---|---|
//! | first byte not a digit (no prefix, space, sign) | `BadNumber("length prefix")` |
//! | first digit `0` (leading zero, length 0) | `BadNumber("length prefix")` |
//! | prefix value above [`MAX_FRAME_LEN`] (incl. a sixth digit) | `TooLarge("frame length")` |
//! | last byte of the frame not `0x0A` | `Invalid("frame terminator")` |
//! | not all bytes there yet | `Incomplete("frame")` |

use super::{MAX_FRAME_LEN, MAX_JSON_LEN};
use crate::wire::{DecodeError, Reader, put_decimal};

const CTX_PREFIX: &str = "length prefix";
const CTX_LEN: &str = "frame length";
const CTX_FRAME: &str = "frame";
const CTX_END: &str = "frame terminator";
const CTX_BODY: &str = "frame body";

/// The length prefix once it is complete.
#[derive(Debug, Clone, Copy)]
struct Prefix {
    /// How many digit bytes it took.
    digits: usize,
    /// Its value: JSON bytes plus the newline.
    len: usize,
}

impl Prefix {
    /// Bytes of the whole frame on the wire.
    fn total(self) -> usize {
        self.digits + self.len
    }
}

/// Read the length prefix at the start of `buf`.
///
/// `Ok(None)` while only digits have arrived. Each digit is checked as it comes, so a value
/// above the limit fails at the digit that crosses it, before anything else is buffered.
fn prefix(buf: &[u8]) -> Result<Option<Prefix>, DecodeError> {
    let mut len: usize = 0;
    for (i, &b) in buf.iter().enumerate() {
        if !b.is_ascii_digit() {
            if i == 0 {
                return Err(DecodeError::BadNumber(CTX_PREFIX));
            }
            return Ok(Some(Prefix { digits: i, len }));
        }
        if i == 0 && b == b'0' {
            return Err(DecodeError::BadNumber(CTX_PREFIX));
        }
        // len <= MAX_FRAME_LEN here, so this cannot overflow.
        len = len * 10 + usize::from(b - b'0');
        if len > MAX_FRAME_LEN {
            return Err(DecodeError::TooLarge(CTX_LEN));
        }
    }
    Ok(None)
}

/// Whether `buf` starts with a whole frame; `Ok(n)` gives its length on the wire.
///
/// Cheap: it looks at the prefix and at one byte, never at the JSON. `Err(Incomplete)` means
/// "read more"; every other error is a framing error that must close the connection. A
/// declared length above [`MAX_FRAME_LEN`] is reported as soon as the offending digit is in
/// `buf`, so a caller never has to buffer the body of a frame it will reject.
pub fn check(buf: &[u8]) -> Result<usize, DecodeError> {
    let p = prefix(buf)?.ok_or(DecodeError::Incomplete(CTX_FRAME))?;
    let frame = buf
        .get(..p.total())
        .ok_or(DecodeError::Incomplete(CTX_FRAME))?;
    match frame.last() {
        Some(&FRAME_END) => Ok(p.total()),
        _ => Err(DecodeError::Invalid(CTX_END)),
    }
}

/// One frame: the JSON text between the length prefix and the final newline.
///
/// The text is kept as bytes: whether it is UTF-8 and JSON is the message layer's business
/// (a frame with bad content is still a good frame and does not close the connection).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    json: Vec<u8>,
}

impl Frame {
    /// A frame carrying `json`; fails when it is longer than [`MAX_JSON_LEN`] bytes
    /// (`TooLarge("frame body")`) or starts with an ASCII digit (`Invalid("frame body")`: a
    /// reader would take that digit for part of the length prefix, so such a text cannot be
    /// framed; JSON objects start with `{` or whitespace).
    ///
    /// Any other bytes are accepted (including newlines: the length says where the frame ends).
    pub fn new(json: Vec<u8>) -> Result<Self, DecodeError> {
        if json.len() > MAX_JSON_LEN {
            return Err(DecodeError::TooLarge(CTX_BODY));
        }
        if json.first().is_some_and(u8::is_ascii_digit) {
            return Err(DecodeError::Invalid(CTX_BODY));
        }
        Ok(Self { json })
    }

    /// A frame for `json` that the caller knows fits ([`MAX_JSON_LEN`]) and starts with `{`.
    pub(crate) fn from_json_unchecked(json: Vec<u8>) -> Self {
        debug_assert!(json.len() <= MAX_JSON_LEN);
        debug_assert!(json.first() == Some(&b'{'));
        Self { json }
    }

    /// The JSON text, without the prefix and the final newline (a CR before it is kept).
    #[must_use]
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// The JSON text, by value.
    #[must_use]
    pub fn into_json(self) -> Vec<u8> {
        self.json
    }

    /// Decode `buf`, which must hold exactly one frame.
    ///
    /// Besides the errors of [`check`], bytes after the frame are
    /// `TrailingBytes(n, "frame")`. Use [`Frame::decode_from`] on a stream buffer.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let (frame, used) = Self::decode_from(buf)?;
        match buf.len() - used {
            0 => Ok(frame),
            extra => Err(DecodeError::TrailingBytes(extra, CTX_FRAME)),
        }
    }

    /// Decode the frame at the start of `buf`; also returns how many bytes it took.
    pub fn decode_from(buf: &[u8]) -> Result<(Self, usize), DecodeError> {
        let total = check(buf)?;
        let p = prefix(buf)?.ok_or(DecodeError::Incomplete(CTX_FRAME))?;
        let mut r = Reader::new(buf);
        r.skip(p.digits, CTX_PREFIX)?;
        let json = r.take(p.len.saturating_sub(1), CTX_BODY)?;
        Ok((
            Self {
                json: json.to_vec(),
            },
            total,
        ))
    }

    /// Bytes [`Frame::encode`] appends.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        let len = self.json.len() + 1;
        len.to_string().len() + len
    }

    /// Append the frame: the decimal length, the JSON text, one `0x0A`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_json_frame(&self.json, out);
    }
}

/// Append `json` framed. The caller guarantees `json.len() <= MAX_JSON_LEN`.
pub(crate) fn encode_json_frame(json: &[u8], out: &mut Vec<u8>) {
    // Lengths are at most MAX_FRAME_LEN, far inside i64.
    put_decimal(out, i64::try_from(json.len() + 1).unwrap_or(i64::MAX));
    out.extend_from_slice(json);
    out.push(FRAME_END);
}

/// Incremental frame reader for a byte stream: push what the socket gave, take frames out.
///
/// It never holds more than one frame ([`super::MAX_WIRE_FRAME_LEN`] bytes): [`Self::feed`]
/// consumes input only up to the end of the current frame. After a framing error it is
/// poisoned and returns that error forever, since the stream cannot be resynchronised.
#[derive(Debug, Clone, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Bytes of the current frame on the wire, once its prefix is complete.
    total: Option<usize>,
    error: Option<DecodeError>,
}

impl FrameDecoder {
    /// An empty decoder.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume bytes from the front of `input` until one frame is complete or `input` is empty.
    ///
    /// Returns `Ok(Some(frame))` for a frame (call again: `input` may hold more), `Ok(None)`
    /// once `input` is used up without completing a frame, and `Err` for a framing error (close
    /// the connection). On error, `input` is left where the error was found.
    pub fn feed(&mut self, input: &mut &[u8]) -> Result<Option<Frame>, DecodeError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        loop {
            if let Some(total) = self.total {
                let want = total.saturating_sub(self.buf.len());
                let (head, rest) = input.split_at_checked(want).unwrap_or((input, &[]));
                self.buf.extend_from_slice(head);
                *input = rest;
                if self.buf.len() < total {
                    return Ok(None);
                }
                let frame = Frame::decode(&self.buf);
                self.buf.clear();
                self.total = None;
                return frame.map(Some).map_err(|e| self.fail(e));
            }
            // The prefix is read byte by byte: at most six bytes, and it lets the length
            // check fire before the next byte is taken.
            let Some((&b, rest)) = input.split_first() else {
                return Ok(None);
            };
            *input = rest;
            self.buf.push(b);
            match prefix(&self.buf) {
                Ok(None) => {}
                Ok(Some(p)) => self.total = Some(p.total()),
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// True when no partial frame is buffered (a peer closing now loses nothing).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.buf.is_empty() && self.error.is_none()
    }

    /// Bytes of the partial frame buffered so far.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The framing error that poisoned this decoder, if any.
    #[must_use]
    pub fn error(&self) -> Option<&DecodeError> {
        self.error.as_ref()
    }

    fn fail(&mut self, e: DecodeError) -> DecodeError {
        self.buf = Vec::new();
        self.total = None;
        self.error = Some(e.clone());
        e
    }
}

/// The byte every frame ends with, counted in the length (§2).
const FRAME_END: u8 = 0x0A;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const QUERY: &[u8] = b"33{\"command\":\"msQueryGameServers\"}\n";

    fn feed_all(dec: &mut FrameDecoder, mut input: &[u8]) -> Result<Vec<Frame>, DecodeError> {
        let mut out = Vec::new();
        while let Some(f) = dec.feed(&mut input)? {
            out.push(f);
        }
        assert!(input.is_empty());
        Ok(out)
    }

    #[test]
    fn decode_frame() {
        let f = Frame::decode(b"17{\"Hallo\":\"Welt\"}\n").unwrap();
        assert_eq!(f.json(), b"{\"Hallo\":\"Welt\"}");
        let f = Frame::decode("31{\"universität\":\"TU Chemnitz\"}\n".as_bytes()).unwrap();
        assert_eq!(f.json(), "{\"universität\":\"TU Chemnitz\"}".as_bytes());
    }

    #[test]
    fn decode_frame_empty_json() {
        assert_eq!(Frame::decode(b"1\n").unwrap().json(), b"");
    }

    #[test]
    fn encode_frame() {
        let mut out = vec![0xa5];
        Frame::new(b"{\"Hallo\":\"Welt\"}".to_vec())
            .unwrap()
            .encode(&mut out);
        assert_eq!(out, b"\xa517{\"Hallo\":\"Welt\"}\n");
        let f = Frame::new("{\"universität\":\"TU Chemnitz\"}".into()).unwrap();
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(
            hex::encode(&out),
            "33317b22756e69766572736974c3a474223a225455204368656d\
             6e69747a227d0a"
        );
        assert_eq!(f.encoded_len(), out.len());
    }

    #[test]
    fn check_table() {
        use DecodeError::*;
        let cases: &[(&[u8], Result<usize, DecodeError>)] = &[
            (b"", Err(Incomplete("frame"))),
            (b"3", Err(Incomplete("frame"))),
            (b"33", Err(Incomplete("frame"))),
            (b"33{", Err(Incomplete("frame"))),
            (QUERY, Ok(35)),
            (b"1\nxyz", Ok(2)),
            (b"{", Err(BadNumber("length prefix"))),
            (b" 33", Err(BadNumber("length prefix"))),
            (b"+33", Err(BadNumber("length prefix"))),
            (b"0", Err(BadNumber("length prefix"))),
            (b"033", Err(BadNumber("length prefix"))),
            (b"65537", Err(Incomplete("frame"))),
            (b"65538", Err(TooLarge("frame length"))),
            (b"99999", Err(TooLarge("frame length"))),
            (b"100000", Err(TooLarge("frame length"))),
            (b"2ab", Err(Invalid("frame terminator"))),
        ];
        for (input, want) in cases {
            assert_eq!(&check(input), want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn decode_frame_rejects_trailing_bytes() {
        assert_eq!(
            Frame::decode(b"1\n1"),
            Err(DecodeError::TrailingBytes(1, "frame"))
        );
    }

    #[test]
    fn decode_frame_rejects_bad_terminator() {
        assert_eq!(
            Frame::decode(b"33{\"command\":\"msQueryGameServers\"}\r\n"),
            Err(DecodeError::Invalid("frame terminator"))
        );
    }

    #[test]
    fn decode_frame_rejects_length_over_limit() {
        assert_eq!(
            Frame::decode(b"65538{"),
            Err(DecodeError::TooLarge("frame length"))
        );
    }

    #[test]
    fn frame_new_rejects_over_limit() {
        assert!(Frame::new(vec![b' '; MAX_JSON_LEN]).is_ok());
        assert_eq!(
            Frame::new(vec![b' '; MAX_JSON_LEN + 1]),
            Err(DecodeError::TooLarge("frame body"))
        );
    }

    #[test]
    fn quirk_json_starting_with_digit_is_unframeable() {
        // "20\n" is a frame of length 20 that has not arrived yet, not "0" with length 2.
        assert_eq!(
            Frame::new(b"0".to_vec()),
            Err(DecodeError::Invalid("frame body"))
        );
        assert_eq!(check(b"20\n"), Err(DecodeError::Incomplete("frame")));
        assert!(Frame::new(b" 0".to_vec()).is_ok());
    }

    #[test]
    fn decoder_splits_two_frames_in_one_read() {
        let mut dec = FrameDecoder::new();
        let input = [QUERY, b"37{\"command\":\"msUnregisterGameServer\"}\n"].concat();
        let frames = feed_all(&mut dec, &input).unwrap();
        assert_eq!(frames.len(), 2);
        assert!(dec.is_idle());
    }

    #[test]
    fn decoder_byte_by_byte() {
        let mut dec = FrameDecoder::new();
        let mut frames = Vec::new();
        for b in QUERY {
            frames.extend(feed_all(&mut dec, std::slice::from_ref(b)).unwrap());
            if frames.is_empty() {
                assert!(dec.buffered() > 0);
            }
        }
        assert_eq!(frames, vec![Frame::decode(QUERY).unwrap()]);
    }

    #[test]
    fn decoder_rejects_huge_length_without_reading_on() {
        let mut dec = FrameDecoder::new();
        let mut input: &[u8] = b"65538{\"command\"";
        assert_eq!(
            dec.feed(&mut input),
            Err(DecodeError::TooLarge("frame length"))
        );
        // Stopped at the digit that crossed the limit.
        assert_eq!(input, b"{\"command\"");
        // Poisoned.
        assert_eq!(
            dec.feed(&mut &QUERY[..]),
            Err(DecodeError::TooLarge("frame length"))
        );
        assert_eq!(dec.error(), Some(&DecodeError::TooLarge("frame length")));
    }

    #[test]
    fn decoder_waits_for_the_rest() {
        let mut dec = FrameDecoder::new();
        assert_eq!(
            feed_all(&mut dec, b"34{\"command\":\"msQueryGameServers\"}\n"),
            Ok(vec![])
        );
        assert_eq!(
            feed_all(&mut dec, b"3"),
            Err(DecodeError::Invalid("frame terminator"))
        );
    }

    proptest! {
        #[test]
        fn check_and_decode_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = check(&data);
            let _ = Frame::decode(&data);
            let mut dec = FrameDecoder::new();
            let mut input = &data[..];
            while let Ok(Some(_)) = dec.feed(&mut input) {}
            prop_assert!(dec.buffered() <= super::super::MAX_WIRE_FRAME_LEN);
        }

        #[test]
        fn frame_round_trip(json in proptest::collection::vec(any::<u8>(), 0..300)) {
            let Ok(f) = Frame::new(json.clone()) else {
                prop_assert!(json.first().is_some_and(u8::is_ascii_digit));
                return Ok(());
            };
            let mut out = Vec::new();
            f.encode(&mut out);
            prop_assert_eq!(out.len(), f.encoded_len());
            prop_assert_eq!(check(&out), Ok(out.len()));
            prop_assert_eq!(Frame::decode(&out), Ok(f.clone()));
            // Any split of the bytes gives the same frame back.
            let mut dec = FrameDecoder::new();
            let (a, b) = out.split_at(out.len() / 2);
            let mut got = feed_all(&mut dec, a).unwrap();
            got.extend(feed_all(&mut dec, b).unwrap());
            prop_assert_eq!(got, vec![f]);
        }

        #[test]
        fn check_agrees_with_decoder(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut dec = FrameDecoder::new();
            let mut input = &data[..];
            let fed = dec.feed(&mut input);
            match check(&data) {
                Ok(n) => prop_assert_eq!(fed, Ok(Some(Frame::decode(&data[..n]).unwrap()))),
                Err(DecodeError::Incomplete(_)) => prop_assert_eq!(fed, Ok(None)),
                Err(e) => prop_assert_eq!(fed, Err(e)),
            }
        }
    }
}
