//! A register body as DDNet's master keeps it (`teeworlds-master.md` §3.2): parsed by
//! serde_json into a value whose objects keep their keys in the order written (a repeated key
//! keeps its first place and takes its last value, as serde_json's order-keeping map does),
//! then written back compact by serde_json. Numbers go through serde_json's `u64`/`i64`/`f64`
//! as in the master, so `1e3` comes back as `1000.0` and `-0` as `-0.0`; strings come back with
//! serde_json's escapes (`\u00e9` as `é`, `\/` as `/`).
//!
//! Depth is bounded by serde_json's recursion limit while parsing; nothing here recurses
//! deeper than what was parsed.

use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};

/// One JSON value with the key order of its objects kept.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OrderedJson {
    Null,
    Bool(bool),
    PosInt(u64),
    NegInt(i64),
    Float(f64),
    String(String),
    Array(Vec<Self>),
    Object(IndexMap<String, Self>),
}

impl OrderedJson {
    /// Whether this is a JSON object.
    pub(crate) const fn is_object(&self) -> bool {
        matches!(self, Self::Object(_))
    }

    /// The compact JSON text, as the master re-serialises an info, in an allocation of its
    /// own size: the writer's buffer grows by doubling, and a registry that kept it would hold
    /// ~2 KiB for every 1.1 KB info.
    pub(crate) fn to_compact(&self) -> Vec<u8> {
        // Cannot fail: every key is a string and the writer is a Vec.
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.shrink_to_fit();
        v
    }
}

impl Serialize for OrderedJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Null => s.serialize_unit(),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::PosInt(n) => s.serialize_u64(*n),
            Self::NegInt(n) => s.serialize_i64(*n),
            Self::Float(f) => s.serialize_f64(*f),
            Self::String(t) => s.serialize_str(t),
            Self::Array(a) => s.collect_seq(a),
            Self::Object(o) => s.collect_map(o),
        }
    }
}

struct OrderedVisitor;

impl<'de> Visitor<'de> for OrderedVisitor {
    type Value = OrderedJson;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<OrderedJson, E> {
        Ok(u64::try_from(v).map_or(OrderedJson::NegInt(v), OrderedJson::PosInt))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<OrderedJson, E> {
        Ok(OrderedJson::PosInt(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<OrderedJson, E> {
        // serde_json's own value turns a non-finite float into null.
        Ok(if v.is_finite() {
            OrderedJson::Float(v)
        } else {
            OrderedJson::Null
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<OrderedJson, E> {
        Ok(OrderedJson::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<OrderedJson, E> {
        Ok(OrderedJson::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<OrderedJson, D::Error> {
        OrderedJson::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OrderedJson, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(OrderedJson::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedJson, A::Error> {
        let mut out = IndexMap::new();
        while let Some((k, v)) = map.next_entry::<String, OrderedJson>()? {
            // A repeated key keeps its first place and takes the last value.
            out.insert(k, v);
        }
        Ok(OrderedJson::Object(out))
    }
}

impl<'de> Deserialize<'de> for OrderedJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OrderedVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(s: &str) -> String {
        let v: OrderedJson = serde_json::from_str(s).unwrap();
        String::from_utf8(v.to_compact()).unwrap()
    }

    #[test]
    fn keeps_key_order_and_strips_whitespace() {
        assert_eq!(
            normalized(r#" { "b" : 1 , "a" : [ "x y" , "q\" z" ] , "c":{ } } "#),
            r#"{"b":1,"a":["x y","q\" z"],"c":{}}"#
        );
    }

    #[test]
    fn repeated_key_keeps_first_place_and_last_value() {
        assert_eq!(normalized(r#"{"a":1,"b":2,"a":3}"#), r#"{"a":3,"b":2}"#);
    }

    #[test]
    fn numbers_and_strings_as_serde_json_writes_them() {
        assert_eq!(
            normalized(r#"[1e3,-0,0.1,18446744073709551615,-9223372036854775808,1.50]"#),
            "[1000.0,-0.0,0.1,18446744073709551615,-9223372036854775808,1.5]"
        );
        assert_eq!(
            normalized(r#"["\u00e9\/\u001f\t"]"#),
            "[\"\u{e9}/\\u001f\\t\"]"
        );
    }

    #[test]
    fn not_json_is_an_error_with_serde_json_words() {
        let e = serde_json::from_str::<OrderedJson>("{nope").unwrap_err();
        let plain = serde_json::from_str::<serde_json::Value>("{nope").unwrap_err();
        assert_eq!(e.to_string(), plain.to_string());
        assert!(serde_json::from_str::<OrderedJson>("[1] x").is_err());
    }
}
