//! The headers of a register POST read as DDNet's master (`mastersrv`) reads them, in its
//! order and with its words (`teeworlds-master.md` §3.2), so that every request gets the
//! answer the reference master gives.
//!
//! ```text
//! Address           required   a URL (the `url` crate's parser, as mastersrv's), scheme
//!                              tw-0.5+udp | tw-0.6+udp | tw-0.7+udp, host connecting-address.invalid,
//!                              port 1..=65535
//! Secret            required   at most 64 bytes
//! Connless-Token    optional   at most 64 bytes (8 hex digits required for tw-0.7+udp, later)
//! Challenge-Secret  required   at most 64 bytes
//! Challenge-Token   optional   at most 64 bytes
//! Community-Token   optional   at most 64 bytes (its format is checked later)
//! Info-Serial       required   an i64
//! ```
//!
//! A value that is not visible ASCII is `invalid header <name>: failed to convert header to a
//! str`; a value too long is `invalid header <name>: insufficient capacity` (the words of the
//! master's fixed-capacity strings).

use axum::http::{HeaderMap, header};

use muster_core::registry::DDNET_STREAM_SCHEMES;

/// The `Action` value that deletes.
pub(crate) const ACTION_DELETE: &[u8] = b"delete";
/// warp's words for a request without `Content-Length` (411).
pub(crate) const LENGTH_REQUIRED: &str = "A content-length header is required";
/// warp's words for a `Content-Length` over the limit (413).
pub(crate) const PAYLOAD_TOO_LARGE: &str = "The request payload is too large";
/// A body whose `Content-Type` is not `application/json` (415).
pub(crate) const UNSUPPORTED_MEDIA_TYPE: &str = "The request's Content-Type is not supported";
/// A body that is JSON but not an object (checked only once the challenge is answered).
pub(crate) const NOT_AN_OBJECT: &str = "register info must be an object";
/// A delete of an address that is not registered with that secret.
pub(crate) const NOT_FOUND: &str = "could not find registered server";
/// warp's words for another method on the register path (405).
pub(crate) const METHOD_NOT_ALLOWED: &str = "HTTP method not allowed";
/// 0.7 streams must say which token the challenge carries.
pub(crate) const NEED_CONNLESS_TOKEN: &str =
    "registering with tw-0.7+udp:// requires header Connless-Token";

/// Longest value of the string headers (the master's `ArrayString<[u8; 64]>`).
pub(crate) const MAX_SHORT_HEADER: usize = 64;
/// The host every register `Address` carries.
pub(crate) const CONNECTING_HOST: &str = "connecting-address.invalid";

/// The protocol of a stream, ordered as the master orders addresses (after IP and port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum StreamProtocol {
    /// `tw-0.5+udp`
    V5,
    /// `tw-0.6+udp`
    V6,
    /// `tw-0.7+udp`
    V7,
}

impl StreamProtocol {
    const ALL: [Self; 3] = [Self::V5, Self::V6, Self::V7];

    /// The URL scheme.
    pub(crate) const fn as_str(self) -> &'static str {
        let [v5, v6, v7] = DDNET_STREAM_SCHEMES;
        match self {
            Self::V5 => v5,
            Self::V6 => v6,
            Self::V7 => v7,
        }
    }

    /// The protocol of a scheme, exactly as written (the URL parser has lower-cased it).
    pub(crate) fn from_scheme(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// A register `Address`: the game port and the stream's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RegisterAddr {
    pub(crate) protocol: StreamProtocol,
    pub(crate) port: u16,
}

/// The headers of a registration, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegisterHeaders<'a> {
    pub(crate) address: RegisterAddr,
    pub(crate) secret: &'a str,
    pub(crate) connless_token: Option<&'a str>,
    pub(crate) challenge_secret: &'a str,
    pub(crate) challenge_token: Option<&'a str>,
    pub(crate) community_token: Option<&'a str>,
    pub(crate) info_serial: i64,
}

/// The headers of a delete, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeleteHeaders<'a> {
    pub(crate) address: RegisterAddr,
    pub(crate) secret: &'a str,
}

fn invalid(name: &str, e: impl std::fmt::Display) -> String {
    format!("invalid header {name}: {e}")
}

/// The first value of `name` as text.
fn text<'a>(h: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    h.get(name)
        .map(|v| v.to_str().map_err(|e| invalid(name, e)))
        .transpose()
}

fn required<T>(v: Option<T>, name: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("missing required header {name}"))
}

/// A string header of at most [`MAX_SHORT_HEADER`] bytes.
fn short<'a>(h: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    match text(h, name)? {
        Some(v) if v.len() > MAX_SHORT_HEADER => Err(invalid(name, "insufficient capacity")),
        v => Ok(v),
    }
}

/// `Address`, with the master's error words.
fn register_addr(s: &str) -> Result<RegisterAddr, String> {
    let url = url::Url::parse(s).map_err(|e| format!("URL parse error: {e}"))?;
    let protocol = StreamProtocol::from_scheme(url.scheme()).ok_or(
        "protocol parse error: protocol must be one of tw-0.5+udp, tw-0.6+udp or tw-0.7+udp",
    )?;
    if url.host_str() != Some(CONNECTING_HOST) {
        return Err(format!(
            "register address must have domain {CONNECTING_HOST}"
        ));
    }
    let port = url.port().ok_or("register address must specify port")?;
    if port == 0 {
        return Err("register port can't be 0".to_owned());
    }
    Ok(RegisterAddr { protocol, port })
}

fn address(h: &HeaderMap) -> Result<RegisterAddr, String> {
    const NAME: &str = "Address";
    let v = required(text(h, NAME)?, NAME)?;
    register_addr(v).map_err(|e| invalid(NAME, e))
}

/// The headers of a registration, in the master's order; the first problem is the answer.
pub(crate) fn register_headers(h: &HeaderMap) -> Result<RegisterHeaders<'_>, String> {
    let address = address(h)?;
    let secret = required(short(h, "Secret")?, "Secret")?;
    let connless_token = short(h, "Connless-Token")?;
    let challenge_secret = required(short(h, "Challenge-Secret")?, "Challenge-Secret")?;
    let challenge_token = short(h, "Challenge-Token")?;
    let community_token = short(h, "Community-Token")?;
    let info_serial = required(text(h, "Info-Serial")?, "Info-Serial")?
        .parse::<i64>()
        .map_err(|e| invalid("Info-Serial", e))?;
    Ok(RegisterHeaders {
        address,
        secret,
        connless_token,
        challenge_secret,
        challenge_token,
        community_token,
        info_serial,
    })
}

/// The headers of a delete, in the master's order.
pub(crate) fn delete_headers(h: &HeaderMap) -> Result<DeleteHeaders<'_>, String> {
    let address = address(h)?;
    let secret = required(short(h, "Secret")?, "Secret")?;
    Ok(DeleteHeaders { address, secret })
}

/// The answer to an `Action` other than `delete`, quoting it as the master does (its message
/// lacks the closing parenthesis; kept, so clients see the same words).
pub(crate) fn unknown_action(value: &[u8]) -> String {
    format!(
        "Unknown Action header value {:?} (must either not be present or have value \"delete\"",
        String::from_utf8_lossy(value)
    )
}

/// `Content-Length`, when present and a number (what warp's `content_length_limit` reads).
pub(crate) fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Whether the first `Content-Type` parses as a media type whose essence is
/// `application/json` (parameters allowed, case-insensitive).
pub(crate) fn is_json(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<mime::Mime>().ok())
        .is_some_and(|m| m.essence_str() == mime::APPLICATION_JSON.essence_str())
}

/// The 0.7 token the challenge must carry: required for `tw-0.7+udp`, 8 hex digits (the
/// `hex` crate's words, and the master's header name in the message), ignored otherwise.
pub(crate) fn connless_token(
    protocol: StreamProtocol,
    token: Option<&str>,
) -> Result<Option<[u8; 4]>, String> {
    if protocol != StreamProtocol::V7 {
        return Ok(None);
    }
    let t = token.ok_or(NEED_CONNLESS_TOKEN)?;
    let mut out = [0u8; 4];
    hex::decode_to_slice(t.as_bytes(), &mut out)
        .map_err(|e| format!("invalid hex in Connless-Request-Token: {e}"))?;
    Ok(Some(out))
}

/// The master's answer to a `Community-Token` whose format is wrong, or `None` when it is a
/// well-formed community token (`ddtc_…`). Muster keeps no communities: a well-formed token is
/// accepted and ignored, as by a master with none configured.
pub(crate) fn community_token_error(token: &str) -> Option<String> {
    if community::plain_prefix(token).is_some() {
        None
    } else if community::is_verification(token) {
        Some(format!(
            "need real token, not verification token: {token} (should start with ddtc_)"
        ))
    } else {
        Some(format!("invalid community token format: {token}"))
    }
}

/// DDNet's community tokens: `<prefix>_<body><crc>`, where `<crc>` is the CRC-32 (big-endian)
/// of everything before it in unpadded URL-safe base64 (6 characters, no stray bits); only
/// ASCII letters, digits and one underscore. `ddtc_` tokens have a 30-character body,
/// `ddvc_` verification tokens 28 (6 plain characters and a 16-byte hash in base64).
mod community {
    const CRC_CHARS: usize = 6;
    const PLAIN_PREFIX_LEN: usize = 6;
    const TOKEN_LEN: usize = 30;
    const VERIFICATION_LEN: usize = 28;

    fn b64url(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        }))
    }

    /// Unpadded URL-safe base64 of exactly `N` bytes, the unused low bits zero.
    fn decode<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
        if s.len() != (N * 8).div_ceil(6) {
            return None;
        }
        let mut out = [0u8; N];
        let (mut acc, mut bits, mut n) = (0u32, 0u32, 0usize);
        for &c in s {
            acc = (acc << 6) | b64url(c)?;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                *out.get_mut(n)? = u8::try_from((acc >> bits) & 0xff).ok()?;
                n += 1;
                acc &= (1 << bits) - 1;
            }
        }
        (acc == 0 && n == N).then_some(out)
    }

    fn strip_crc32(s: &str) -> Option<&str> {
        let split = s.len().checked_sub(CRC_CHARS)?;
        let (body, crc) = (s.get(..split)?, s.get(split..)?);
        let want: [u8; 4] = decode(crc.as_bytes())?;
        let mut h = flate2::Crc::new();
        h.update(body.as_bytes());
        (h.sum().to_be_bytes() == want).then_some(body)
    }

    /// `(prefix, body)` of a well-formed token.
    fn split(s: &str) -> Option<(&str, &str)> {
        let mut underscore = None;
        for (i, b) in s.bytes().enumerate() {
            match b {
                b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' => {}
                b'_' if underscore.is_none() => underscore = Some(i),
                _ => return None,
            }
        }
        let underscore = underscore?;
        let s = strip_crc32(s)?;
        // The master slices past the end here (and panics) when the underscore is the first
        // character of the CRC; such a token is simply malformed.
        Some((s.get(..underscore)?, s.get(underscore + 1..)?))
    }

    /// The plain prefix of a well-formed `ddtc_` token.
    pub(super) fn plain_prefix(s: &str) -> Option<&str> {
        let (prefix, token) = split(s)?;
        if prefix != "ddtc" || token.len() != TOKEN_LEN {
            return None;
        }
        token.get(..PLAIN_PREFIX_LEN)
    }

    /// Whether `s` is a well-formed `ddvc_` verification token.
    pub(super) fn is_verification(s: &str) -> bool {
        split(s).is_some_and(|(prefix, token)| {
            prefix == "ddvc"
                && token.len() == VERIFICATION_LEN
                && token
                    .get(PLAIN_PREFIX_LEN..)
                    .and_then(|h| decode::<16>(h.as_bytes()))
                    .is_some()
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const OK: [(&str, &str); 4] = [
        ("Address", "tw-0.6+udp://connecting-address.invalid:8303"),
        ("Secret", "s"),
        ("Challenge-Secret", "c:tw0.6/ipv4"),
        ("Info-Serial", "3"),
    ];

    #[test]
    fn register_headers_in_order() {
        let ok = headers(&OK);
        let r = register_headers(&ok).unwrap();
        assert_eq!(
            r.address,
            RegisterAddr {
                protocol: StreamProtocol::V6,
                port: 8303
            }
        );
        assert_eq!((r.secret, r.info_serial), ("s", 3));
        // With everything missing the first check (Address) answers.
        assert_eq!(
            register_headers(&HeaderMap::new()).unwrap_err(),
            "missing required header Address"
        );
        let mut h = headers(&OK[..3]);
        assert_eq!(
            register_headers(&h).unwrap_err(),
            "missing required header Info-Serial"
        );
        h.insert("Info-Serial", HeaderValue::from_static("x"));
        assert_eq!(
            register_headers(&h).unwrap_err(),
            "invalid header Info-Serial: invalid digit found in string"
        );
        let long = "x".repeat(MAX_SHORT_HEADER + 1);
        h.insert("Challenge-Token", HeaderValue::from_str(&long).unwrap());
        assert_eq!(
            register_headers(&h).unwrap_err(),
            "invalid header Challenge-Token: insufficient capacity"
        );
    }

    #[test]
    fn address_errors_in_the_masters_words() {
        for (a, want) in [
            ("x", "URL parse error: relative URL without a base"),
            (
                "tw-0.8+udp://connecting-address.invalid:1",
                "protocol parse error: protocol must be one of tw-0.5+udp, tw-0.6+udp or tw-0.7+udp",
            ),
            (
                "tw-0.6+udp://1.2.3.4:8303",
                "register address must have domain connecting-address.invalid",
            ),
            (
                "tw-0.6+udp://connecting-address.invalid",
                "register address must specify port",
            ),
            (
                "tw-0.6+udp://connecting-address.invalid:0",
                "register port can't be 0",
            ),
            (
                "tw-0.6+udp://connecting-address.invalid:65536",
                "URL parse error: invalid port number",
            ),
        ] {
            assert_eq!(register_addr(a).unwrap_err(), want, "{a}");
        }
        assert_eq!(
            register_addr("TW-0.7+UDP://connecting-address.invalid:08303").unwrap(),
            RegisterAddr {
                protocol: StreamProtocol::V7,
                port: 8303
            }
        );
    }

    #[test]
    fn connless_token_only_for_07() {
        assert_eq!(connless_token(StreamProtocol::V6, Some("zz")), Ok(None));
        assert_eq!(
            connless_token(StreamProtocol::V7, None).unwrap_err(),
            NEED_CONNLESS_TOKEN
        );
        assert_eq!(
            connless_token(StreamProtocol::V7, Some("ff0e2331")),
            Ok(Some([0xff, 0x0e, 0x23, 0x31]))
        );
        for (t, want) in [
            ("abc", "Odd number of digits"),
            ("abcd", "Invalid string length"),
            ("ff0e233g", "Invalid character 'g' at position 7"),
        ] {
            assert_eq!(
                connless_token(StreamProtocol::V7, Some(t)).unwrap_err(),
                format!("invalid hex in Connless-Request-Token: {want}")
            );
        }
    }

    #[test]
    fn community_tokens() {
        // The pair from DDNet's own tests.
        let token = "ddtc_6DnZq5Ix0J2kvDHbkPNtb6bsZxOVQg4ly2jw";
        let verification = "ddvc_6DnZq51fypqX9ldrEFCF9aJdpi6wjgh6YA";
        assert_eq!(community::plain_prefix(token), Some("6DnZq5"));
        assert_eq!(community_token_error(token), None);
        assert!(community::is_verification(verification));
        assert_eq!(
            community_token_error(verification).unwrap(),
            format!(
                "need real token, not verification token: {verification} (should start with ddtc_)"
            )
        );
        for bad in ["", "x", "ddtc_6DnZq5Ix0J2kvDHbkPNtb6bsZxOVQg4ly2jx", "a-b"] {
            assert_eq!(
                community_token_error(bad).unwrap(),
                format!("invalid community token format: {bad}")
            );
        }
    }

    #[test]
    fn content_type_and_action() {
        assert!(is_json(&headers(&[(
            "Content-Type",
            "Application/JSON; charset=utf-8"
        )])));
        assert!(!is_json(&headers(&[("Content-Type", "text/plain")])));
        assert!(!is_json(&headers(&[("Content-Type", "json")])));
        assert!(!is_json(&HeaderMap::new()));
        assert_eq!(
            unknown_action(b"Delete\t"),
            "Unknown Action header value \"Delete\\t\" (must either not be present or have value \"delete\""
        );
    }
}
