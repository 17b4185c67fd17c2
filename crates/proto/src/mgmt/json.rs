//! A strict JSON tree for message decoding: RFC 8259 through `serde_json`, plus the one rule
//! `serde_json` does not enforce on its own, that an object must not repeat a key (§7.2).
//!
//! Integers and non-integers are kept apart (`20000` vs `20000.0` / `2e4`), since the
//! protocol's Integer fields accept only the former.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::error::MessageError;

/// One parsed JSON value.
#[derive(Debug)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// A number without fraction or exponent that fits `u64`.
    UInt(u64),
    /// A negative number without fraction or exponent that fits `i64`.
    Int(i64),
    /// Any other number (fraction, exponent, or out of the 64-bit range).
    Float,
    Str(String),
    Array(Vec<Self>),
    /// Keys are unique: a repeated key fails the parse.
    Object(BTreeMap<String, Self>),
}

/// The message the duplicate-key error carries, to tell it apart from serde's own data errors.
const DUPLICATE_KEY: &str = "duplicate key";

/// Parse `bytes` as one strict JSON document.
///
/// UTF-8 is checked first (so invalid bytes report as [`MessageError::Utf8`] wherever they
/// sit); a byte-order mark, trailing non-whitespace or an empty text is a syntax error.
pub(crate) fn parse(bytes: &[u8]) -> Result<Json, MessageError> {
    let text = std::str::from_utf8(bytes).map_err(|_| MessageError::Utf8("json text"))?;
    serde_json::from_str::<Json>(text).map_err(|e| {
        if e.is_data() && e.to_string().starts_with(DUPLICATE_KEY) {
            MessageError::DuplicateKey("json object")
        } else {
            MessageError::Syntax("json text")
        }
    })
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::UInt(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(u64::try_from(v).map_or(Json::Int(v), Json::UInt))
    }

    fn visit_f64<E>(self, _v: f64) -> Result<Json, E> {
        Ok(Json::Float)
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut obj = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value()?;
            if obj.insert(key, value).is_some() {
                return Err(de::Error::custom(DUPLICATE_KEY));
            }
        }
        Ok(Json::Object(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_integer_apart() {
        assert!(matches!(parse(b"20000"), Ok(Json::UInt(20000))));
        assert!(matches!(parse(b"-1"), Ok(Json::Int(-1))));
        assert!(matches!(parse(b"20000.0"), Ok(Json::Float)));
        assert!(matches!(parse(b"2e4"), Ok(Json::Float)));
        assert!(matches!(parse(b"99999999999999999999999"), Ok(Json::Float)));
    }

    #[test]
    fn rejects_duplicates_anywhere() {
        assert_eq!(
            parse(br#"{"a":{"b":1,"b":2}}"#).err(),
            Some(MessageError::DuplicateKey("json object"))
        );
        // Escaped spellings of the same key are the same key.
        assert_eq!(
            parse(br#"{"a":1,"\u0061":2}"#).err(),
            Some(MessageError::DuplicateKey("json object"))
        );
    }

    #[test]
    fn rejects_bom_trailing_and_empty() {
        for bad in [
            &b"\xef\xbb\xbf{}"[..],
            b"{} x",
            b"",
            b"   ",
            b"{",
            b"{\"a\":1,}",
        ] {
            assert_eq!(parse(bad).err(), Some(MessageError::Syntax("json text")));
        }
        assert_eq!(
            parse(b"\"\xff\"").err(),
            Some(MessageError::Utf8("json text"))
        );
        assert!(parse(b" {}\r\n").is_ok());
    }
}
