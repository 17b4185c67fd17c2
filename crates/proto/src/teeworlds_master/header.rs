//! The connless framings the masters use: the 6-byte 0.6 header, the 9-byte 0.7 header with
//! tokens, and the 0.7 control header of the token handshake.
//!
//! **To be replaced by `teeworlds::header` after merge**: this is the minimal private copy the
//! master codecs need while that module is being written in parallel
//! (`shared/specs/teeworlds.md` §2 and §8.1–8.2).

use std::fmt;

use crate::wire::{DecodeError, Reader};

/// A 0.7 connless token: four opaque bytes, compared as bytes (`ff ff ff ff` = none).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Token(pub [u8; 4]);

impl Token {
    /// "No token yet" (`ff ff ff ff`).
    pub const NONE: Self = Self([0xff; 4]);

    /// Parse the 8 hex digits DDNet writes in `Connless-Token` (`ff0e2331` is `ff 0e 23 31`).
    pub fn from_hex(s: &str) -> Result<Self, DecodeError> {
        const CTX: &str = "connless token";
        let b = s.as_bytes();
        if b.len() != 8 || !b.iter().all(u8::is_ascii_hexdigit) {
            return Err(DecodeError::Invalid(CTX));
        }
        let mut out = [0u8; 4];
        for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
            let text = std::str::from_utf8(pair).map_err(|_| DecodeError::Invalid(CTX))?;
            *o = u8::from_str_radix(text, 16).map_err(|_| DecodeError::Invalid(CTX))?;
        }
        Ok(Self(out))
    }

    /// The 8 lower-case hex digits of the token.
    #[must_use]
    pub fn to_hex(self) -> String {
        crate::wire::to_hex(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.to_hex())
    }
}

/// The connless header in front of a master message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// The 6-byte 0.6 header, kept as sent. Real peers write `ff`×6, qstat `20 00 00 00 00 00`;
    /// only byte 0 means anything (its `0x20` connless bit set, low bits not `01`).
    V06([u8; 6]),
    /// The 9-byte 0.7 header `21 <token> <response_token>`.
    V07 {
        /// The token the *receiver* issued to the sender ([`Token::NONE`] when it has none).
        token: Token,
        /// The sender's own token; whoever answers puts it in `token`.
        response_token: Token,
    },
}

impl Framing {
    /// The header real 0.6 peers write.
    pub const STANDARD_06: Self = Self::V06(HEADER_06_STANDARD);

    /// The header length in bytes.
    #[must_use]
    pub const fn len(&self) -> usize {
        match self {
            Self::V06(_) => 6,
            Self::V07 { .. } => 9,
        }
    }

    /// Always false: a header is never empty (present to pair with [`Self::len`]).
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// The header that answers a message that came with `self`: 0.6 answers use the standard
    /// header whatever the request had; 0.7 answers swap the tokens, using `own` as the new
    /// response token.
    #[must_use]
    pub const fn reply(&self, own: Token) -> Self {
        match *self {
            Self::V06(_) => Self::STANDARD_06,
            Self::V07 { response_token, .. } => Self::V07 {
                token: response_token,
                response_token: own,
            },
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::V06(h) => out.extend_from_slice(h),
            Self::V07 {
                token,
                response_token,
            } => {
                out.push(HEADER_07_CONNLESS);
                out.extend_from_slice(&token.0);
                out.extend_from_slice(&response_token.0);
            }
        }
    }
}

/// What byte 0 of a datagram says it is (`shared/specs/teeworlds.md` §2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Connless with the 6-byte 0.6 header.
    Connless06,
    /// Connless with the 9-byte 0.7 header.
    Connless07,
    /// A 0.7 control packet (token handshake).
    Control07,
}

pub(crate) fn classify(datagram: &[u8]) -> Result<Kind, DecodeError> {
    let b0 = *datagram.first().ok_or(DecodeError::Truncated("header"))?;
    if b0 & FLAG_CONNLESS != 0 {
        if b0 & VERSION_MASK == VERSION_07 {
            Ok(Kind::Connless07)
        } else {
            Ok(Kind::Connless06)
        }
    } else if b0 & FLAG_CONTROL_07 != 0 {
        Ok(Kind::Control07)
    } else {
        Err(DecodeError::BadMagic("connless header"))
    }
}

pub(crate) fn decode_framing(r: &mut Reader<'_>, kind: Kind) -> Result<Framing, DecodeError> {
    match kind {
        Kind::Connless07 => {
            r.skip(1, "0.7 header")?;
            let token = Token(r.array("0.7 header token")?);
            let response_token = Token(r.array("0.7 header response token")?);
            Ok(Framing::V07 {
                token,
                response_token,
            })
        }
        Kind::Connless06 | Kind::Control07 => Ok(Framing::V06(r.array("0.6 header")?)),
    }
}

/// Read the 7-byte control header; returns the token field.
pub(crate) fn decode_control_header(r: &mut Reader<'_>) -> Result<Token, DecodeError> {
    r.skip(3, "control header")?;
    Ok(Token(r.array("control header token")?))
}

pub(crate) fn encode_control_header(out: &mut Vec<u8>, token: Token) {
    out.extend_from_slice(&CONTROL_07_PREFIX);
    out.extend_from_slice(&token.0);
}

/// Byte 0 bit of every connless packet (0.6 and 0.7).
const FLAG_CONNLESS: u8 = 0x20;
/// Byte 0 bit of a 0.7 control packet (`NET_PACKETFLAG_CONTROL << 2`).
const FLAG_CONTROL_07: u8 = 0x04;
/// The low two bits of byte 0 carry the connless version; `01` is 0.7.
const VERSION_MASK: u8 = 0x03;
const VERSION_07: u8 = 0x01;
/// Byte 0 of a 0.7 connless packet: connless flag plus version 1.
const HEADER_07_CONNLESS: u8 = 0x21;
/// The 0.6 connless header real peers write.
const HEADER_06_STANDARD: [u8; 6] = [0xff; 6];
/// 0.7 control header before the token: flags `04`, ack `00`, chunk count `00`.
const CONTROL_07_PREFIX: [u8; 3] = [0x04, 0x00, 0x00];
