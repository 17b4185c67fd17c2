//! Connless framings shared by the Teeworlds server-info and master protocols (spec §2).
//!
//! ```text
//! 0.6 connless:       ff ff ff ff ff ff  | payload        (any first byte with 0x20 set, low bits != 01)
//! DDNet extended:     78 65 <extra:u16be> <reserved:2>  | payload
//! 0.7 connless:       21 <token:4> <response_token:4> | payload
//! 0.7 control TOKEN:  04 00 00 <token:4> 05 <own_token:4> <zero padding>
//! ```
//!
//! The framing is decided from byte 0 alone (§2.4): bit `0x20` clear is connection traffic
//! (rejected here, except the 0.7 control TOKEN message, which [`Frame::split`] recognises by
//! its exact `04 00 00` prefix); bit `0x20` set with low bits `01` is 0.7; anything else is a
//! 6-byte 0.6 header, which is the extended request header when it starts with `"xe"`.
//!
//! These types know nothing about the payload: the server-info messages are in
//! [`super::packet`], the master messages in `teeworlds_master`. Nothing here checks that a
//! token is the right one; that is the caller's business.

use crate::wire::{DecodeError, Reader};

/// Byte 0 bit that marks a connectionless packet.
pub const CONNLESS_FLAG: u8 = 0x20;
/// Byte 0 low bits that carry the 0.7 protocol version.
pub const SIXUP_VERSION_MASK: u8 = 0x03;
/// The 0.7 protocol version in byte 0.
pub const SIXUP_VERSION: u8 = 0x01;
/// Byte 0 that 0.7 peers write on connless packets (flag plus version 1).
pub const SIXUP_CONNLESS_BYTE: u8 = 0x21;
/// The 0.6 connless header that real clients and servers write.
pub const LEGACY_HEADER: [u8; 6] = [0xff; 6];
/// Length of the 0.6 and extended headers.
pub const LEGACY_HEADER_LEN: usize = 6;
/// Length of the 0.7 connless header.
pub const SIXUP_HEADER_LEN: usize = 9;
/// First two bytes of DDNet's extended request header ("xe").
pub const EXTENDED_MAGIC: [u8; 2] = *b"xe";
/// The 0.7 token that means "no token yet".
pub const NO_TOKEN: [u8; 4] = [0xff; 4];
/// The 0.7 control header prefix: control flag, ack 0, chunk count 0.
pub const CONTROL_PREFIX: [u8; 3] = [0x04, 0x00, 0x00];
/// The 0.7 control message number of TOKEN.
pub const CONTROL_TOKEN: u8 = 0x05;
/// Length of a TOKEN control message without padding (header, message, token).
pub const TOKEN_MESSAGE_LEN: usize = 12;
/// Servers answer a TOKEN request only from this datagram size on (§8.1, anti-amplification).
pub const MIN_TOKEN_REQUEST_LEN: usize = 519;
/// The size of the TOKEN request the real 0.7 client sends.
pub const TOKEN_REQUEST_LEN: usize = 520;
/// Largest datagram either side sends or reads (§10).
pub const MAX_DATAGRAM: usize = 1400;

/// The connless header in front of every server-info and master message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    /// A 6-byte 0.6 header, kept as sent: real peers write `ff`×6, qstat writes
    /// `20 00 00 00 00 00`, and DDNet checks nothing but byte 0.
    Legacy([u8; 6]),
    /// DDNet's extended request header (`78 65`, extra token, reserved).
    Extended {
        /// The high 16 bits of the 24-bit request token.
        extra_token: u16,
        /// Two reserved bytes; senders write `00 00`, receivers ignore them.
        reserved: [u8; 2],
    },
    /// The 9-byte 0.7 connless header. Byte 0 is always written as `21`.
    Sixup {
        /// The token the receiver issued to the sender ([`NO_TOKEN`] = none).
        token: [u8; 4],
        /// The sender's own token; whoever answers puts it in `token`.
        response_token: [u8; 4],
    },
}

impl Header {
    /// The plain 0.6 header (`ff`×6) every reply of the 0.6-style families carries.
    pub const LEGACY: Self = Self::Legacy(LEGACY_HEADER);

    /// An extended request header with zero reserved bytes.
    #[must_use]
    pub const fn extended(extra_token: u16) -> Self {
        Self::Extended {
            extra_token,
            reserved: [0, 0],
        }
    }

    /// Split a connless datagram into its header and payload (§2.4).
    ///
    /// Fails with `Invalid("connless flag")` when bit `0x20` of byte 0 is clear (connection
    /// traffic, including 0.7 control packets: use [`Frame::split`] to accept those too).
    pub fn split(datagram: &[u8]) -> Result<(Self, &[u8]), DecodeError> {
        let mut r = Reader::new(datagram);
        let first = r.peek().ok_or(DecodeError::Truncated("connless header"))?;
        if first & CONNLESS_FLAG == 0 {
            return Err(DecodeError::Invalid("connless flag"));
        }
        let header = if first & SIXUP_VERSION_MASK == SIXUP_VERSION {
            r.skip(1, "0.7 connless header")?;
            let token = r.array("0.7 connless header")?;
            let response_token = r.array("0.7 connless header")?;
            Self::Sixup {
                token,
                response_token,
            }
        } else {
            let raw: [u8; 6] = r.array("connless header")?;
            match raw {
                [0x78, 0x65, hi, lo, r0, r1] => Self::Extended {
                    extra_token: u16::from_be_bytes([hi, lo]),
                    reserved: [r0, r1],
                },
                _ => Self::Legacy(raw),
            }
        };
        Ok((header, r.rest()))
    }

    /// Append the header bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Legacy(raw) => out.extend_from_slice(raw),
            Self::Extended {
                extra_token,
                reserved,
            } => {
                out.extend_from_slice(&EXTENDED_MAGIC);
                out.extend_from_slice(&extra_token.to_be_bytes());
                out.extend_from_slice(reserved);
            }
            Self::Sixup {
                token,
                response_token,
            } => {
                out.push(SIXUP_CONNLESS_BYTE);
                out.extend_from_slice(token);
                out.extend_from_slice(response_token);
            }
        }
    }

    /// The encoded length: 6 or 9.
    #[must_use]
    pub const fn encoded_len(&self) -> usize {
        match self {
            Self::Legacy(_) | Self::Extended { .. } => LEGACY_HEADER_LEN,
            Self::Sixup { .. } => SIXUP_HEADER_LEN,
        }
    }

    /// True for the 0.7 framing.
    #[must_use]
    pub const fn is_sixup(&self) -> bool {
        matches!(self, Self::Sixup { .. })
    }
}

/// The 0.7 control TOKEN message of the handshake (§8.1, §8.2), request and reply alike.
///
/// A request has `token` = [`NO_TOKEN`], the sender's token in `own_token` and 508 bytes of
/// padding; a reply has the requester's token in `token` and the server's in `own_token`.
/// The two cannot be told apart from the bytes alone (a requester may use `ff ff ff ff`), so
/// the caller decides from context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenMessage {
    /// The token field of the control header: the token the receiver issued to the sender.
    pub token: [u8; 4],
    /// The sender's own token.
    pub own_token: [u8; 4],
    /// Zero bytes after the message (508 on a real request, 0 or 508 on a reply).
    pub padding: u16,
}

impl TokenMessage {
    /// The 520-byte request a 0.7 client sends first.
    #[must_use]
    pub const fn request(client_token: [u8; 4]) -> Self {
        Self {
            token: NO_TOKEN,
            own_token: client_token,
            // 520 - 12 always fits in u16.
            padding: (TOKEN_REQUEST_LEN - TOKEN_MESSAGE_LEN) as u16,
        }
    }

    /// The unpadded 12-byte reply teeworlds 0.7.5 sends.
    #[must_use]
    pub const fn reply(client_token: [u8; 4], server_token: [u8; 4]) -> Self {
        Self {
            token: client_token,
            own_token: server_token,
            padding: 0,
        }
    }

    /// Decode a whole datagram. Padding must be zero bytes and the datagram at most
    /// [`MAX_DATAGRAM`] long.
    pub fn decode(datagram: &[u8]) -> Result<Self, DecodeError> {
        if datagram.len() > MAX_DATAGRAM {
            return Err(DecodeError::TooLarge("token message"));
        }
        let mut r = Reader::new(datagram);
        let prefix: [u8; 3] = r.array("control header")?;
        if prefix != CONTROL_PREFIX {
            return Err(DecodeError::BadMagic("control header"));
        }
        let token = r.array("control header")?;
        if r.u8("control message")? != CONTROL_TOKEN {
            return Err(DecodeError::BadMagic("control message"));
        }
        let own_token = r.array("token")?;
        let rest = r.rest();
        if rest.iter().any(|&b| b != 0) {
            return Err(DecodeError::Invalid("token padding"));
        }
        let padding =
            u16::try_from(rest.len()).map_err(|_| DecodeError::TooLarge("token padding"))?;
        Ok(Self {
            token,
            own_token,
            padding,
        })
    }

    /// Append the message and its padding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&CONTROL_PREFIX);
        out.extend_from_slice(&self.token);
        out.push(CONTROL_TOKEN);
        out.extend_from_slice(&self.own_token);
        out.resize(out.len() + usize::from(self.padding), 0);
    }

    /// The encoded length, padding included.
    #[must_use]
    pub const fn encoded_len(&self) -> usize {
        TOKEN_MESSAGE_LEN + self.padding as usize
    }

    /// True when a server would answer this as a request: at least
    /// [`MIN_TOKEN_REQUEST_LEN`] bytes.
    #[must_use]
    pub const fn is_answerable_request(&self) -> bool {
        self.encoded_len() >= MIN_TOKEN_REQUEST_LEN
    }
}

/// One datagram on a Teeworlds port, classified by its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A connless packet: header and the payload after it.
    Connless(Header, &'a [u8]),
    /// A 0.7 control TOKEN message.
    Token(TokenMessage),
}

impl<'a> Frame<'a> {
    /// Classify `datagram`: the exact `04 00 00` control prefix is a TOKEN message, anything
    /// else goes through [`Header::split`].
    pub fn split(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        if datagram.starts_with(&CONTROL_PREFIX) {
            TokenMessage::decode(datagram).map(Self::Token)
        } else {
            Header::split(datagram).map(|(h, p)| Self::Connless(h, p))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_header_legacy() {
        let (h, p) = Header::split(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2]).unwrap();
        assert_eq!(h, Header::LEGACY);
        assert_eq!(p, &[1, 2]);
    }

    #[test]
    fn decode_header_qstat_zeros_is_legacy() {
        let (h, p) = Header::split(&[0x20, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(h, Header::Legacy([0x20, 0, 0, 0, 0, 0]));
        assert!(p.is_empty());
    }

    #[test]
    fn decode_header_extended() {
        let (h, _) = Header::split(&[0x78, 0x65, 0x12, 0x34, 0xab, 0xcd]).unwrap();
        assert_eq!(
            h,
            Header::Extended {
                extra_token: 0x1234,
                reserved: [0xab, 0xcd]
            }
        );
    }

    #[test]
    fn decode_header_sixup() {
        let bytes = [0x21, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let (h, p) = Header::split(&bytes).unwrap();
        assert_eq!(
            h,
            Header::Sixup {
                token: [1, 2, 3, 4],
                response_token: [5, 6, 7, 8]
            }
        );
        assert_eq!(p, &[9]);
    }

    #[test]
    fn encode_headers() {
        let mut out = vec![];
        Header::extended(0x1234).encode(&mut out);
        Header::LEGACY.encode(&mut out);
        Header::Sixup {
            token: [1, 2, 3, 4],
            response_token: [5, 6, 7, 8],
        }
        .encode(&mut out);
        assert_eq!(
            out,
            [
                0x78, 0x65, 0x12, 0x34, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x21, 1, 2, 3, 4,
                5, 6, 7, 8
            ]
        );
    }

    #[test]
    fn decode_header_rejects_no_connless_bit() {
        assert_eq!(
            Header::split(&[0x10, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::Invalid("connless flag"))
        );
    }

    #[test]
    fn decode_header_rejects_short() {
        assert_eq!(
            Header::split(&[]),
            Err(DecodeError::Truncated("connless header"))
        );
        assert_eq!(
            Header::split(&[0xff, 0xff]),
            Err(DecodeError::Truncated("connless header"))
        );
        assert_eq!(
            Header::split(&[0x21, 0xff]),
            Err(DecodeError::Truncated("0.7 connless header"))
        );
    }

    #[test]
    fn encode_token_request() {
        let mut out = vec![0xa5];
        TokenMessage::request([0xc0, 0xff, 0xee, 0x01]).encode(&mut out);
        assert_eq!(out.len(), 1 + TOKEN_REQUEST_LEN);
        assert_eq!(
            out.get(..13).unwrap(),
            &[
                0xa5, 4, 0, 0, 0xff, 0xff, 0xff, 0xff, 5, 0xc0, 0xff, 0xee, 0x01
            ]
        );
        assert!(out.iter().skip(13).all(|&b| b == 0));
    }

    #[test]
    fn decode_token_reply() {
        let m = TokenMessage::decode(&[4, 0, 0, 0xc0, 0xff, 0xee, 1, 5, 0x7b, 0x7b, 0xf1, 0x40])
            .unwrap();
        assert_eq!(
            m,
            TokenMessage::reply([0xc0, 0xff, 0xee, 1], [0x7b, 0x7b, 0xf1, 0x40])
        );
        assert!(!m.is_answerable_request());
    }

    #[test]
    fn decode_token_rejects_nonzero_padding() {
        let bytes = [4, 0, 0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 0, 7];
        assert_eq!(
            TokenMessage::decode(&bytes),
            Err(DecodeError::Invalid("token padding"))
        );
    }

    #[test]
    fn decode_token_rejects_other_control_message() {
        let bytes = [4, 0, 0, 1, 2, 3, 4, 4, 1, 2, 3, 4];
        assert_eq!(
            TokenMessage::decode(&bytes),
            Err(DecodeError::BadMagic("control message"))
        );
    }
}
