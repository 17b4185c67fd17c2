//! gsmsalg: the `\secure\` → `\validate\` algorithm (spec §4) and the game key table (§4.6).
//!
//! An RC4 key schedule over the game's key, an RC4-like mixing pass whose index advances by
//! the challenge byte + 1, optional enctype post-processing, then base64 without `=` padding.
//!
//! Deviations seen in the wild (§4.4) and what this implementation does about them:
//! * the 333networks Qt5 loop runs over the key length, the Serious Engine copy until a NUL:
//!   identical for the 6-byte challenges every master sends, so we mix exactly the challenge
//!   bytes given;
//! * Qt5 refuses keys or challenges outside 6..15 bytes, Perl outside 1..8; we compute for any
//!   non-empty key and any challenge length, and messages only carry [`Challenge`]s of exactly
//!   6 printable characters;
//! * the Serious Engine's enctype 2 XOR stops at the first zero mixed byte; we XOR every byte
//!   as §4.2 says (it only matters for enctype 2, which no game of the spec uses).
//!
//! [`Challenge`]: super::Challenge

use crate::wire::DecodeError;

/// Challenges are exactly 6 characters (§4.1).
pub const CHALLENGE_LEN: usize = 6;

/// A master challenge: exactly 6 printable ASCII characters other than `\` (spec §4.4: UE2,
/// Serious Sam and UBrowser read exactly 6). `Debug` shows `Challenge(b"ABCDEF")`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Challenge([u8; CHALLENGE_LEN]);

impl Challenge {
    /// A challenge from its bytes; [`DecodeError::Invalid`] unless exactly 6 bytes in
    /// `0x21..=0x7e` without `\`.
    pub fn new(bytes: &[u8]) -> Result<Self, DecodeError> {
        let arr: [u8; CHALLENGE_LEN] = bytes
            .try_into()
            .map_err(|_| DecodeError::Invalid("challenge length"))?;
        if arr
            .iter()
            .any(|&b| !(0x21..=0x7e).contains(&b) || b == b'\\')
        {
            return Err(DecodeError::Invalid("challenge character"));
        }
        Ok(Self(arr))
    }

    /// A challenge of 6 letters `A`–`Z` (what the 333networks masters send) made from 6 random
    /// bytes the caller drew from a CSPRNG (each byte is reduced mod 26; the small bias is
    /// irrelevant for a challenge that lives 30 s).
    #[must_use]
    pub fn from_random(random: [u8; CHALLENGE_LEN]) -> Self {
        Self(random.map(|b| b'A' + b % 26))
    }

    /// The 6 characters.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; CHALLENGE_LEN] {
        &self.0
    }
}

impl std::fmt::Debug for Challenge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Challenge(b\"{}\")", self.0.escape_ascii())
    }
}

/// The post-processing step of gsmsalg, as the `\enctype\` value names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Enctype {
    /// 0: no post-processing (every game in the spec).
    Zero,
    /// 1: a fixed substitution table; not implemented by Muster ([`gsmsalg`] returns `None`).
    One,
    /// 2: XOR with the key (and, for lists, the enctype 2 stream cipher Muster lacks).
    Two,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for Enctype {
    fn from(n: u8) -> Self {
        match n {
            0 => Self::Zero,
            1 => Self::One,
            2 => Self::Two,
            n => Self::Unknown(n),
        }
    }
}

impl From<Enctype> for u8 {
    fn from(e: Enctype) -> Self {
        match e {
            Enctype::Zero => 0,
            Enctype::One => 1,
            Enctype::Two => 2,
            Enctype::Unknown(n) => n,
        }
    }
}

impl Enctype {
    /// Parse the decimal value of an `\enctype\` field (`0`, `1`, `2`, …).
    pub fn parse(value: &[u8]) -> Result<Self, DecodeError> {
        let n = crate::wire::parse_decimal(value, "enctype")?;
        u8::try_from(n)
            .map(Self::from)
            .map_err(|_| DecodeError::BadNumber("enctype"))
    }
}

/// The game key table of spec §4.6: gamename (lower case) → accepted keys, preferred first.
///
/// `ut2004` accepts both `y5rP9m` (the Qt5 table) and `Lw7x0R` (retail UT2004, per the engine
/// headers), spec §13 decision 3.
pub const GAME_KEYS: &[(&str, &[&str])] = &[
    ("unreal", &["DAncRK"]),
    ("ut", &["Z5Nfb0"]),
    ("ut2", &["Lw7x0R"]),
    ("ut2d", &["y5e8Q3"]),
    ("ut2004", &["y5rP9m", "Lw7x0R"]),
    ("ut2004d", &["y5rP9m"]),
    ("serioussam", &["AKbna4"]),
    ("serioussamse", &["AKbna4"]),
    ("serioussamsed", &["AKbna4"]),
    ("333networks", &["333NWX"]),
    ("gamespy2", &["d4kZca"]),
];

/// The keys for `gamename` (compared after ASCII lower-casing), preferred first; empty when the
/// game is not in [`GAME_KEYS`].
#[must_use]
pub fn game_keys(gamename: &[u8]) -> &'static [&'static str] {
    GAME_KEYS
        .iter()
        .find(|(g, _)| g.as_bytes().eq_ignore_ascii_case(gamename))
        .map_or(&[], |(_, keys)| keys)
}

/// gsmsalg(challenge, key, enctype): the validate string, base64 without padding
/// (4 × ⌈len / 3⌉ characters, 8 for a 6-byte challenge).
///
/// Returns `None` for an empty key and for enctypes other than 0 and 2 (enctype 1 needs a
/// substitution table Muster does not carry). Any challenge length is hashed as given; the
/// wire types only carry 6-byte challenges.
#[must_use]
pub fn gsmsalg(challenge: &[u8], key: &[u8], enctype: Enctype) -> Option<String> {
    if key.is_empty() || !matches!(enctype, Enctype::Zero | Enctype::Two) {
        return None;
    }
    let mut s = key_schedule(key);
    let mut mixed = mix(&mut s, challenge);
    while mixed.len() % 3 != 0 {
        mixed.push(0);
    }
    if enctype == Enctype::Two {
        for (b, k) in mixed.iter_mut().zip(key.iter().cycle()) {
            *b ^= k;
        }
    }
    Some(base64_unpadded(&mixed))
}

/// The validate string for a [`Challenge`] (always 8 characters), or `None` as for [`gsmsalg`].
#[must_use]
pub fn validate_string(challenge: &Challenge, key: &[u8], enctype: Enctype) -> Option<String> {
    gsmsalg(challenge.as_bytes(), key, enctype)
}

/// The outcome of checking a peer's `\validate\` against the key table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidateCheck {
    /// The validate matches one of the game's keys.
    Match,
    /// It matches none; `expected` is the value for the game's preferred key (for logs).
    Mismatch {
        /// What the preferred key gives.
        expected: String,
    },
    /// The game has no key in [`GAME_KEYS`].
    UnknownGame,
    /// The enctype cannot be computed (1 or unknown).
    UnsupportedEnctype,
}

/// Check `validate` for `challenge` against every key of `gamename` (spec §4.5: the gamename
/// is the one the peer authenticated as, not necessarily the game it asks about).
#[must_use]
pub fn check_validate(
    gamename: &[u8],
    challenge: &Challenge,
    enctype: Enctype,
    validate: &[u8],
) -> ValidateCheck {
    let keys = game_keys(gamename);
    let Some(first) = keys.first() else {
        return ValidateCheck::UnknownGame;
    };
    let Some(expected) = validate_string(challenge, first.as_bytes(), enctype) else {
        return ValidateCheck::UnsupportedEnctype;
    };
    let matches = |k: &&str| {
        validate_string(challenge, k.as_bytes(), enctype).is_some_and(|v| v.as_bytes() == validate)
    };
    if keys.iter().any(matches) {
        ValidateCheck::Match
    } else {
        ValidateCheck::Mismatch { expected }
    }
}

/// Step 1: the RC4 key schedule.
fn key_schedule(key: &[u8]) -> [u8; 256] {
    let mut s = [0u8; 256];
    for (slot, i) in s.iter_mut().zip(0u8..=255) {
        *slot = i;
    }
    let mut j: u8 = 0;
    for (i, k) in (0..256usize).zip(key.iter().cycle()) {
        let si = s.get(i).copied().unwrap_or(0);
        j = j.wrapping_add(si).wrapping_add(*k);
        s.swap(i, usize::from(j));
    }
    s
}

/// Step 2: the challenge mixing.
fn mix(s: &mut [u8; 256], challenge: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(challenge.len() + 2);
    let (mut a, mut b) = (0u8, 0u8);
    for &c in challenge {
        a = a.wrapping_add(c).wrapping_add(1);
        let x = at(s, a);
        b = b.wrapping_add(x);
        let y = at(s, b);
        s.swap(usize::from(a), usize::from(b));
        out.push(c ^ at(s, x.wrapping_add(y)));
    }
    out
}

/// `s[i]` for a `u8` index, which is always in bounds of 256 entries.
fn at(s: &[u8; 256], i: u8) -> u8 {
    s.get(usize::from(i)).copied().unwrap_or(0)
}

/// Standard base64 without `=` padding; `bytes.len()` is a multiple of 3 here.
fn base64_unpadded(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() / 3 * 4 + 4);
    for chunk in bytes.chunks(3) {
        let b0 = chunk.first().copied().unwrap_or(0);
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let n = u32::from(b0) << 16 | u32::from(b1) << 8 | u32::from(b2);
        for shift in [18, 12, 6, 0] {
            let idx = usize::try_from((n >> shift) & 0x3f).unwrap_or(0);
            out.push(char::from(BASE64.get(idx).copied().unwrap_or(b'A')));
        }
    }
    out
}

/// The standard base64 alphabet (RFC 4648 §4), which gsmsalg uses.
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec §4.7, every row: (key, challenge, enctype 0, enctype 2).
    const VECTORS: &[(&str, &str, &str, &str)] = &[
        ("Z5Nfb0", "ABCDEF", "5OOIQ5Ha", "vtbGJfPq"),
        ("Z5Nfb0", "QWERTY", "0KBkX5UX", "ipUqOfcn"),
        ("Z5Nfb0", "XYZZYA", "3PlanLCV", "hswU+tKl"),
        ("Lw7x0R", "ABCDEF", "nDhJM2/V", "0E9+S1+H"),
        ("Lw7x0R", "QWERTY", "S8Tuna7C", "B7PZ5Z6Q"),
        ("Lw7x0R", "XYZZYA", "PM6QWZ21", "cLmnIa3n"),
        ("y5e8Q3", "ABCDEF", "uKRLsBm9", "wZEuiEiO"),
        ("y5e8Q3", "QWERTY", "2INx0SSo", "obYU6XWb"),
        ("y5rP9m", "ABCDEF", "tI4y+ND6", "zbtAqOmX"),
        ("y5rP9m", "QWERTY", "B0onfEFr", "fn9VLHgG"),
        ("y5rP9m", "XYZZYA", "wMx/GSyp", "ufkNSRXE"),
        ("AKbna4", "ABCDEF", "zbGgINC8", "jPrCTrGI"),
        ("AKbna4", "QWERTY", "H2at5Cu9", "Xi3PikqJ"),
        ("AKbna4", "XXXXXX", "/AqJ0xqb", "vUHrvXuv"),
        ("AKbna4", "abcdef", "FnXEYYF9", "Vz6mD+BJ"),
        ("AKbna4", "123456", "51cjMmFl", "phxBXABR"),
        ("AKbna4", "XYZZYA", "/Gw8rQn5", "vSdew2jN"),
        ("DAncRK", "ABCDEF", "7qaTlhDT", "quf99UKY"),
        ("333NWX", "ABCDEF", "TcGdY/3Q", "fvKuLaqI"),
        ("333NWX", "QWERTY", "N+TzGpob", "BNfAVM1D"),
        ("d4kZca", "ABCDEF", "/+SZGk4P", "m9DyQC1u"),
        ("d4kZca", "QWERTY", "1xH2rv11", "syWd9J4U"),
    ];

    #[test]
    fn gsmsalg_spec_vectors() {
        for &(key, challenge, e0, e2) in VECTORS {
            let c = Challenge::new(challenge.as_bytes()).unwrap();
            assert_eq!(
                validate_string(&c, key.as_bytes(), Enctype::Zero).as_deref(),
                Some(e0),
                "{key} {challenge} enctype 0"
            );
            assert_eq!(
                validate_string(&c, key.as_bytes(), Enctype::Two).as_deref(),
                Some(e2),
                "{key} {challenge} enctype 2"
            );
        }
    }

    #[test]
    fn gsmsalg_worked_example_serioussam() {
        let s = key_schedule(b"AKbna4");
        assert_eq!(
            s[..16],
            [
                0x1f, 0x8d, 0xf1, 0x08, 0xc7, 0x56, 0x47, 0x58, 0xfc, 0x73, 0x75, 0x0d, 0x71, 0x3b,
                0x6e, 0x5c
            ]
        );
        let mut s = s;
        let mixed = mix(&mut s, b"ABCDEF");
        assert_eq!(mixed, [0xcd, 0xb1, 0xa0, 0x20, 0xd0, 0xbc]);
        assert_eq!(base64_unpadded(&mixed), "zbGgINC8");
        let xored: Vec<u8> = mixed.iter().zip(b"AKbna4").map(|(m, k)| m ^ k).collect();
        assert_eq!(xored, [0x8c, 0xfa, 0xc2, 0x4e, 0xb1, 0x88]);
        assert_eq!(base64_unpadded(&xored), "jPrCTrGI");
    }

    #[test]
    fn gsmsalg_worked_example_ut() {
        let mut s = key_schedule(b"Z5Nfb0");
        assert_eq!(
            s[..16],
            [
                0x37, 0x90, 0x5d, 0x51, 0xaf, 0x00, 0x44, 0x26, 0xd6, 0x45, 0x1b, 0x9a, 0x39, 0x08,
                0xf0, 0x99
            ]
        );
        let mixed = mix(&mut s, b"ABCDEF");
        assert_eq!(mixed, [0xe4, 0xe3, 0x88, 0x43, 0x91, 0xda]);
        assert_eq!(base64_unpadded(&mixed), "5OOIQ5Ha");
    }

    #[test]
    fn gsmsalg_refuses_enctype1_and_empty_key() {
        assert_eq!(gsmsalg(b"ABCDEF", b"AKbna4", Enctype::One), None);
        assert_eq!(gsmsalg(b"ABCDEF", b"AKbna4", Enctype::Unknown(7)), None);
        assert_eq!(gsmsalg(b"ABCDEF", b"", Enctype::Zero), None);
    }

    #[test]
    fn gsmsalg_pads_other_lengths() {
        // 4 bytes pad to 6 and give 8 characters; 7 pad to 9 and give 12.
        assert_eq!(gsmsalg(b"ABCD", b"AKbna4", Enctype::Zero).unwrap().len(), 8);
        assert_eq!(
            gsmsalg(b"ABCDEFG", b"AKbna4", Enctype::Zero).unwrap().len(),
            12
        );
        // A 6-byte prefix hashes the same whatever follows it in a longer challenge's first
        // six output bytes (RC4-style streams are prefix-stable).
        let six = gsmsalg(b"ABCDEF", b"AKbna4", Enctype::Zero).unwrap();
        let nine = gsmsalg(b"ABCDEFGHI", b"AKbna4", Enctype::Zero).unwrap();
        assert_eq!(six, nine[..8]);
    }

    #[test]
    fn check_validate_table() {
        let c = Challenge::new(b"ABCDEF").unwrap();
        assert_eq!(
            check_validate(b"UT", &c, Enctype::Zero, b"5OOIQ5Ha"),
            ValidateCheck::Match
        );
        // ut2004 accepts the retail key too (decision 3).
        assert_eq!(
            check_validate(b"ut2004", &c, Enctype::Zero, b"nDhJM2/V"),
            ValidateCheck::Match
        );
        assert_eq!(
            check_validate(b"ut2004", &c, Enctype::Zero, b"tI4y+ND6"),
            ValidateCheck::Match
        );
        // qstat's fixed dummy validate.
        assert_eq!(
            check_validate(b"gamespy2", &c, Enctype::Zero, b"12345678"),
            ValidateCheck::Mismatch {
                expected: "/+SZGk4P".to_owned()
            }
        );
        assert_eq!(
            check_validate(b"nosuchgame", &c, Enctype::Zero, b"x"),
            ValidateCheck::UnknownGame
        );
        assert_eq!(
            check_validate(b"ut", &c, Enctype::One, b"x"),
            ValidateCheck::UnsupportedEnctype
        );
    }

    #[test]
    fn enctype_codes_round_trip() {
        for n in 0..=255u8 {
            assert_eq!(u8::from(Enctype::from(n)), n);
        }
        assert_eq!(Enctype::parse(b"2"), Ok(Enctype::Two));
        assert_eq!(Enctype::parse(b"x"), Err(DecodeError::BadNumber("enctype")));
        assert_eq!(
            Enctype::parse(b"300"),
            Err(DecodeError::BadNumber("enctype"))
        );
    }
}
