//! The backslash-safe `\key\value` tokenizer for query replies (spec §8.2).
//!
//! Splitting on `\` and pairing the pieces breaks on values that contain `\` (player names
//! such as `Kee\/n`, Serious Sam session names). This tokenizer re-joins a piece to the value
//! before it when the piece cannot be a key:
//!
//! * (a) it starts with a byte that is not an ASCII letter (`Kee\/n`, `My\1st Server`);
//! * (b) the value belongs to a player-name key and the piece is not a known key (`Ke\y`);
//! * (c) the value belongs to a player-name key, the piece is empty (`\\` in the name) and
//!   the piece after it is not a known key (`a\\b`).
//!
//! It does not recover a `\` followed by a letter inside a non-player value (`Bob\s Server`),
//! a trailing `\` in a name, or a name that continues with a known key (`A\frags_0`): those
//! cannot be told from real data (spec §8.5).

use super::{BACKSLASH, is_known_key, is_player_name_key};
use crate::wire::DecodeError;

/// One `(key, value)` pair borrowed from a datagram.
pub type RawPair<'a> = (&'a [u8], &'a [u8]);

/// Split `datagram` into `(key, value)` pairs, borrowing from it.
///
/// The datagram must start with `\` (else [`DecodeError::BadMagic`]); trailing NULs must have
/// been stripped by the caller. Empty keys (after `\\`) are skipped, an odd trailing key gets
/// an empty value. Values are contiguous slices of the input, so a recovered `\` is kept.
pub fn tokenize(datagram: &[u8]) -> Result<Vec<RawPair<'_>>, DecodeError> {
    // Each token as (start, end) offsets into `datagram`, so merged values stay one slice.
    let separators = datagram.iter().filter(|&&b| b == BACKSLASH).count();
    let mut tokens: Vec<(usize, usize)> = Vec::with_capacity(separators + 1);
    let mut start = 0usize;
    for (pos, &b) in datagram.iter().enumerate() {
        if b == BACKSLASH {
            tokens.push((start, pos));
            start = pos + 1;
        }
    }
    tokens.push((start, datagram.len()));
    let token = |n: usize| -> Option<&[u8]> {
        let &(s, e) = tokens.get(n)?;
        datagram.get(s..e)
    };
    match (token(0), tokens.len()) {
        (Some(first), len) if first.is_empty() && len > 1 => {}
        _ => return Err(DecodeError::BadMagic("gamespy1 text")),
    }
    let mut pairs = Vec::with_capacity(separators / 2 + 1);
    let mut i = 1usize;
    while let Some(key) = token(i) {
        if key.is_empty() {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while let Some(piece) = token(j) {
            if !merge(key, piece, token(j + 1)) {
                break;
            }
            j += 1;
        }
        // The value runs from the start of token i+1 to the end of token j-1.
        let value = match (tokens.get(i + 1), tokens.get(j - 1)) {
            (Some(&(s, _)), Some(&(_, e))) => datagram.get(s..e).unwrap_or_default(),
            _ => &[][..],
        };
        pairs.push((key, value));
        i = j;
    }
    Ok(pairs)
}

/// Whether the token `piece` (followed by `next`) belongs to the value of `key` (spec §8.2).
fn merge(key: &[u8], piece: &[u8], next: Option<&[u8]>) -> bool {
    if let Some(first) = piece.first()
        && !first.is_ascii_alphabetic()
    {
        return true;
    }
    if !is_player_name_key(key) {
        return false;
    }
    if piece.is_empty() {
        next.is_some_and(|n| !is_known_key(n))
    } else {
        !is_known_key(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &[u8], expect: &[(&str, &str)]) {
        let got = tokenize(input).unwrap();
        let got: Vec<(String, String)> = got
            .iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        let expect: Vec<(String, String)> = expect
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, expect, "input {}", String::from_utf8_lossy(input));
    }

    #[test]
    fn tokenize_rejects_missing_leading_backslash() {
        assert_eq!(
            tokenize(b"hostname\\x"),
            Err(DecodeError::BadMagic("gamespy1 text"))
        );
        assert_eq!(tokenize(b""), Err(DecodeError::BadMagic("gamespy1 text")));
    }

    #[test]
    fn tokenize_plain_pairs() {
        check(b"\\a\\1\\b\\2", &[("a", "1"), ("b", "2")]);
        check(b"\\", &[]);
        check(b"\\\\\\", &[]);
    }

    #[test]
    fn tokenize_value_slices_borrow_input() {
        let input = b"\\player_0\\Kee\\/n\\frags_0\\5";
        let pairs = tokenize(input).unwrap();
        assert_eq!(pairs[0].1, b"Kee\\/n");
    }
}
