//! The info string: `\key\value\key\value…`, the key/value format of `infoResponse`,
//! `statusResponse` and every server-info cvar dump (spec §2.1).
//!
//! Pairs are kept in wire order as raw bytes; lookups compare keys ASCII-case-insensitively and
//! return the first match, as the engines' own lookup does. Keys and values never contain a
//! backslash, a line feed or a NUL: the type refuses them, so encoding cannot fail.

use super::{MAX_INFO_PAIRS, MAX_INFO_STRING_LEN, decode_text};
use crate::model::Text;
use crate::wire::DecodeError;

const SEPARATOR: u8 = b'\\';
const CTX: &str = "info string";

/// An ordered list of key/value pairs as raw bytes.
///
/// Held as two allocations whatever the pair count: every key and value back to back, and
/// where each ends (a master reads one of these per heartbeat).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoString {
    /// Keys and values back to back, in wire order.
    bytes: Vec<u8>,
    /// Per pair, where its key ends and where its value ends in `bytes`; a key starts where
    /// the pair before ended.
    ends: Vec<(u16, u16)>,
}

impl InfoString {
    /// An empty info string.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a pair. Fails when a key or value holds `\`, a line feed or a NUL, or when the
    /// pair count or the encoded length would exceed [`MAX_INFO_PAIRS`] /
    /// [`MAX_INFO_STRING_LEN`].
    pub fn push(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<(), DecodeError> {
        let (key, value) = (key.into(), value.into());
        if !key.iter().chain(&value).all(|&b| allowed(b)) {
            return Err(DecodeError::Invalid("info string byte"));
        }
        if self.ends.len() >= MAX_INFO_PAIRS {
            return Err(DecodeError::TooLarge("info string pairs"));
        }
        if self.encoded_len() + 2 + key.len() + value.len() > MAX_INFO_STRING_LEN {
            return Err(DecodeError::TooLarge(CTX));
        }
        self.put(&key, &value);
        Ok(())
    }

    /// Appends a pair whose bytes and size were checked.
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let key_end = offset(self.bytes.len());
        self.bytes.extend_from_slice(value);
        self.ends.push((key_end, offset(self.bytes.len())));
    }

    /// The value of the first pair whose key equals `key`, ignoring ASCII case.
    #[must_use]
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    }

    /// [`Self::get`] decoded by the protocol's text rule.
    #[must_use]
    pub fn get_text(&self, key: &[u8]) -> Option<Text> {
        self.get(key).map(decode_text)
    }

    /// [`Self::get`] as a decimal integer; `None` when absent or not a number.
    #[must_use]
    pub fn get_int(&self, key: &[u8]) -> Option<i64> {
        self.get(key)
            .and_then(|v| crate::wire::parse_decimal(v, CTX).ok())
    }

    /// The pairs in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0usize;
        self.ends.iter().map(move |&(key_end, value_end)| {
            let (k, v) = (usize::from(key_end), usize::from(value_end));
            let pair = (
                self.bytes.get(start..k).unwrap_or_default(),
                self.bytes.get(k..v).unwrap_or_default(),
            );
            start = v;
            pair
        })
    }

    /// Number of pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there are no pairs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The encoded length in bytes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        2 * self.ends.len() + self.bytes.len()
    }

    /// Append `\key\value` for every pair (nothing for an empty info string).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (k, v) in self.iter() {
            out.push(SEPARATOR);
            out.extend_from_slice(k);
            out.push(SEPARATOR);
            out.extend_from_slice(v);
        }
    }

    /// Decode a whole info string.
    ///
    /// Empty input is an empty info string; otherwise it must start with `\`. A last key with
    /// no value (`\a\1\b`) gets an empty value; one trailing `\` after a value is ignored. The
    /// length and the pair count are checked before anything is allocated.
    ///
    /// Two passes over the bytes (a master decodes one per heartbeat): one counts the
    /// separators and looks for a refused byte, the other cuts the fields.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_INFO_STRING_LEN {
            return Err(DecodeError::TooLarge(CTX));
        }
        let (mut separators, mut refused) = (0usize, false);
        for &b in bytes {
            separators += usize::from(b == SEPARATOR);
            refused |= b != SEPARATOR && !allowed(b);
        }
        if separators > 2 * MAX_INFO_PAIRS {
            return Err(DecodeError::TooLarge("info string pairs"));
        }
        if refused {
            return Err(DecodeError::Invalid("info string byte"));
        }
        let Some((&first, mut rest)) = bytes.split_first() else {
            return Ok(Self::new());
        };
        if first != SEPARATOR {
            return Err(DecodeError::Invalid("info string start"));
        }
        // Every byte but the separators is a key's or a value's.
        let mut info = Self {
            bytes: Vec::with_capacity(bytes.len() - separators),
            ends: Vec::with_capacity(separators.div_ceil(2)),
        };
        loop {
            let (key, after_key) = field(rest);
            let Some(after_key) = after_key else {
                info.put(key, &[]);
                break;
            };
            let (value, after_value) = field(after_key);
            info.put(key, value);
            match after_value {
                Some(next) if !next.is_empty() => rest = next,
                _ => break,
            }
        }
        Ok(info)
    }
}

/// An offset into the bytes of an info string, which is never longer than
/// [`MAX_INFO_STRING_LEN`] (checked before anything is stored).
fn offset(n: usize) -> u16 {
    const _: () = assert!(MAX_INFO_STRING_LEN <= u16::MAX as usize);
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// The bytes of `r` up to its first separator, and what follows that separator (`None`: there
/// is none, the field runs to the end).
fn field(r: &[u8]) -> (&[u8], Option<&[u8]>) {
    match r.iter().position(|&b| b == SEPARATOR) {
        Some(i) => (
            r.get(..i).unwrap_or_default(),
            Some(r.get(i + 1..).unwrap_or_default()),
        ),
        None => (r, None),
    }
}

fn allowed(b: u8) -> bool {
    !matches!(b, SEPARATOR | b'\n' | 0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quake3_info_string_decodes_in_order() {
        let info = InfoString::decode(b"\\hostname\\^1My Server\\sv_maxclients\\16\\g_needpass\\")
            .unwrap();
        let pairs: Vec<_> = info.iter().collect();
        assert_eq!(
            pairs,
            [
                (&b"hostname"[..], &b"^1My Server"[..]),
                (b"sv_maxclients", b"16"),
                (b"g_needpass", b""),
            ]
        );
        assert_eq!(info.get(b"SV_MAXCLIENTS"), Some(&b"16"[..]));
        assert_eq!(info.get_int(b"sv_maxclients"), Some(16));
        assert_eq!(info.get_text(b"hostname").unwrap().plain, "My Server");
        assert_eq!(info.get(b"missing"), None);
    }

    #[test]
    fn quake3_info_string_edge_cases() {
        assert_eq!(InfoString::decode(b""), Ok(InfoString::new()));
        // One trailing backslash after a value is ignored.
        let a = InfoString::decode(b"\\a\\1\\").unwrap();
        assert_eq!(a, InfoString::decode(b"\\a\\1").unwrap());
        // First match wins on duplicate keys.
        let d = InfoString::decode(b"\\k\\1\\K\\2").unwrap();
        assert_eq!(d.get(b"k"), Some(&b"1"[..]));
        assert_eq!(d.len(), 2);
        assert_eq!(
            InfoString::decode(b"hostname\\x"),
            Err(DecodeError::Invalid("info string start"))
        );
        assert_eq!(
            InfoString::decode(b"\\a\\b\nc"),
            Err(DecodeError::Invalid("info string byte"))
        );
        assert_eq!(
            InfoString::decode(&vec![b'a'; MAX_INFO_STRING_LEN + 1]),
            Err(DecodeError::TooLarge(CTX))
        );
        assert_eq!(
            InfoString::decode(&vec![b'\\'; 2 * MAX_INFO_PAIRS + 1]),
            Err(DecodeError::TooLarge("info string pairs"))
        );
        let mut i = InfoString::new();
        assert_eq!(
            i.push("a\\b", "c"),
            Err(DecodeError::Invalid("info string byte"))
        );
        assert_eq!(
            i.push("a", "c\0"),
            Err(DecodeError::Invalid("info string byte"))
        );
        assert!(i.is_empty());
        assert_eq!(
            i.push("k", vec![b'v'; MAX_INFO_STRING_LEN]),
            Err(DecodeError::TooLarge(CTX))
        );
    }

    pub(crate) fn info_string() -> impl Strategy<Value = InfoString> {
        let bytes =
            proptest::collection::vec(any::<u8>().prop_filter("allowed", |&b| allowed(b)), 0..12);
        proptest::collection::vec((bytes.clone(), bytes), 0..20).prop_map(|pairs| {
            let mut info = InfoString::new();
            for (k, v) in pairs {
                info.push(k, v).unwrap();
            }
            info
        })
    }

    /// The decoder as it was written first, field by field through a [`Reader`] with a
    /// pass per check: the model the decoder is held to.
    fn model_decode(bytes: &[u8]) -> Result<InfoString, DecodeError> {
        use crate::wire::Reader;
        fn field<'a>(r: &mut Reader<'a>) -> Result<(&'a [u8], bool), DecodeError> {
            match r.peek_rest().iter().position(|&b| b == SEPARATOR) {
                Some(_) => Ok((r.until(SEPARATOR, CTX)?, true)),
                None => Ok((r.rest(), false)),
            }
        }
        if bytes.len() > MAX_INFO_STRING_LEN {
            return Err(DecodeError::TooLarge(CTX));
        }
        let separators = bytes.iter().filter(|&&b| b == SEPARATOR).count();
        if separators > 2 * MAX_INFO_PAIRS {
            return Err(DecodeError::TooLarge("info string pairs"));
        }
        if !bytes.iter().all(|&b| b == SEPARATOR || allowed(b)) {
            return Err(DecodeError::Invalid("info string byte"));
        }
        let mut r = Reader::new(bytes);
        if r.is_empty() {
            return Ok(InfoString::new());
        }
        if r.u8(CTX)? != SEPARATOR {
            return Err(DecodeError::Invalid("info string start"));
        }
        let mut info = InfoString::new();
        loop {
            let (key, more) = field(&mut r)?;
            if !more {
                info.put(key, &[]);
                break;
            }
            let (value, more) = field(&mut r)?;
            info.put(key, value);
            if !more || r.is_empty() {
                break;
            }
        }
        Ok(info)
    }

    /// Bytes rich in separators, line feeds and NULs, for the model comparison.
    fn wire_bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            4 => Just(SEPARATOR),
            1 => Just(b'\n'),
            1 => Just(0u8),
            8 => any::<u8>(),
        ];
        proptest::collection::vec(byte, 0..64)
    }

    proptest! {
        #[test]
        fn quake3_info_string_decodes_as_the_model(bytes in wire_bytes()) {
            prop_assert_eq!(InfoString::decode(&bytes), model_decode(&bytes));
        }

        #[test]
        fn quake3_info_string_round_trips(info in info_string()) {
            let mut out = Vec::new();
            info.encode(&mut out);
            prop_assert_eq!(out.len(), info.encoded_len());
            prop_assert_eq!(InfoString::decode(&out), Ok(info));
        }

        #[test]
        fn quake3_info_string_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(info) = InfoString::decode(&bytes) {
                let mut out = Vec::new();
                info.encode(&mut out);
                prop_assert_eq!(InfoString::decode(&out), Ok(info));
            }
        }
    }
}
