//! Bounded JSON lists: a `Vec` field that refuses its `N+1`th element while it is parsed, so a
//! document cannot make this master hold more than the limit (the body's byte limit alone
//! allows hundreds of thousands of small entries).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _, SeqAccess, Visitor};

/// Elements allocated ahead at most, whatever the document claims.
const PREALLOC: usize = 1024;

/// For `#[serde(deserialize_with = "at_most::<_, _, N>")]`: a list of at most `N` elements.
pub fn at_most<'de, D, T, const N: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Bounded<T, const N: usize>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for Bounded<T, N> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a list of at most {N} elements")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(N).min(PREALLOC));
            while let Some(x) = seq.next_element()? {
                if out.len() >= N {
                    return Err(A::Error::custom(format_args!(
                        "more than {N} elements in a list"
                    )));
                }
                out.push(x);
            }
            Ok(out)
        }
    }

    d.deserialize_seq(Bounded::<T, N>(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        #[serde(deserialize_with = "at_most::<_, _, 3>")]
        items: Vec<u8>,
    }

    #[test]
    fn the_element_past_the_limit_fails_the_document() {
        let ok: Doc = serde_json::from_str(r#"{"items":[1,2,3]}"#).unwrap();
        assert_eq!(ok.items, [1, 2, 3]);
        let e = serde_json::from_str::<Doc>(r#"{"items":[1,2,3,4]}"#).unwrap_err();
        assert!(e.to_string().contains("more than 3 elements"), "{e}");
        assert!(serde_json::from_str::<Doc>(r#"{"items":{}}"#).is_err());
    }
}
