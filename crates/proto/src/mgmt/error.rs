//! Why a well-framed management message is discarded.

/// Why a well-framed message was discarded.
///
/// None of these closes the connection (§7.1 (5), (7)). Contexts name the JSON key, dotted for
/// nested ones (`"players.max"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The JSON text is not valid UTF-8.
    #[error("invalid utf-8 in {0}")]
    Utf8(&'static str),
    /// Not one valid JSON value (also: empty text, byte-order mark, data after the value).
    #[error("invalid json in {0}")]
    Syntax(&'static str),
    /// An object repeats a key.
    #[error("duplicate key in {0}")]
    DuplicateKey(&'static str),
    /// A value that must be an object is not one (the root, `content`, `players`).
    #[error("{0} is not an object")]
    NotAnObject(&'static str),
    /// A required key is missing (or `content` is `null` on a command with data).
    #[error("missing {0}")]
    Missing(&'static str),
    /// A value has the wrong JSON type (a fraction or exponent where an Integer is needed,
    /// a string that is not 1 to 10 digits, a non-boolean for a Boolean).
    #[error("{0} has the wrong type")]
    WrongType(&'static str),
    /// An Integer outside the field's range.
    #[error("{0} is out of range")]
    OutOfRange(&'static str),
    /// `command` names no command of §4 (letter case matters).
    #[error("unknown command")]
    UnknownCommand,
    /// A command without data carries a `content` other than missing, `null` or `{}`.
    #[error("unexpected content on {0}")]
    UnexpectedContent(&'static str),
    /// A string that must not be empty is empty.
    #[error("empty {0}")]
    Empty(&'static str),
    /// `serverAddress` / `address` is not a valid game-server address.
    #[error("invalid server address")]
    Address(#[source] AddressError),
    /// The message would not fit one frame ([`super::MAX_JSON_LEN`] bytes of JSON).
    #[error("{0} exceeds its limit")]
    TooLarge(&'static str),
}

/// Why a `serverAddress` was rejected (§7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// The empty string.
    #[error("empty")]
    Empty,
    /// Only digits and dots, but not a dotted quad of 0–255 without leading zeros.
    #[error("bad ipv4 address")]
    Ipv4,
    /// Contains `:` but is not an IPv6 address (brackets and zone indexes are not allowed).
    #[error("bad ipv6 address")]
    Ipv6,
    /// Neither IP form, and not an RFC 1123 host name.
    #[error("bad host name")]
    Hostname,
    /// `0.0.0.0` or `::`.
    #[error("unspecified address")]
    Unspecified,
    /// An IPv4 or IPv6 multicast address.
    #[error("multicast address")]
    Multicast,
    /// `255.255.255.255`.
    #[error("broadcast address")]
    Broadcast,
}
