//! The Valve master family: the Valve master query a client asks a master for servers with,
//! and the Half-Life (GoldSrc) / Xash3D master protocol a game server registers with.
//!
//! ```text
//! client -> master  "1" region:u8 last-address-as-text 00 filter-string [00]
//! master -> client  ff ff ff ff 66 0a [7f key:u32 LE 08] {ip:4 port:2 BE} [00 00 00 00 00 00]
//!
//! server -> master  "q" ff [server-challenge:u32 LE]          (ask for a challenge)
//! master -> server  ff ff ff ff 73 0a challenge:u32 LE [server-challenge:u32 LE]
//! server -> master  "0" 0a \k\v\k\v… [0a]                     (heartbeat: challenge, gamedir,
//!                                                              players, max, map, …)
//! server -> master  "b" 0a                                     (it shuts down)
//! ```
//!
//! A list comes in pages: the client sends the seed address `0.0.0.0:0`, then the last address
//! of each reply, until a reply ends with the all-zero address. Entries are read by fixed
//! length (an address byte may be anything).
//!
//! Files: [`packet`] (every datagram, decode and encode), [`filter`] (the filter string the
//! list request carries, parsed and evaluated), [`query`] (the client's paging list machine),
//! [`serve`] (the master's side: heartbeats read, list pages cut), [`register`] (a game
//! server's registrar). Deliberately **not** here: sockets, clocks,
//! randomness, the registry. Spec: `docs/protocols/valve-master.md`.

pub mod filter;
pub mod packet;
pub mod query;
pub mod register;
pub mod serve;

pub use filter::{Condition, Filter, Semantics, ServerFacts};
pub use packet::{
    ChallengeReply, ChallengeRequest, Heartbeat, ListReply, ListRequest, Region, ServerPacket,
};

/// The four bytes every master reply starts with.
pub const HEADER: [u8; 4] = [0xFF; 4];

/// The UDP port of the Half-Life and Xash3D masters.
pub const MASTER_PORT: u16 = 27010;

/// Largest datagram the decoders accept.
pub const MAX_DATAGRAM: usize = 65_535;

/// Bytes a list reply datagram holds at most when this crate encodes one (Valve's masters send
/// 1,392-byte pages: a header and 231 entries).
pub const LIST_DATAGRAM_LIMIT: usize = 1392;

/// An IPv4 list entry: 4 address bytes and a big-endian port.
pub const IPV4_ENTRY_LEN: usize = 6;

/// An IPv6 list entry (Xash3D): 16 address bytes and a big-endian port.
pub const IPV6_ENTRY_LEN: usize = 18;

/// Longest filter string accepted, in bytes.
pub const MAX_FILTER_LEN: usize = 1024;

/// Most conditions one filter string may hold.
pub const MAX_CONDITIONS: usize = 64;

/// Longest heartbeat info string accepted, in bytes.
pub const MAX_INFO_LEN: usize = 2048;

/// Most key/value pairs one heartbeat may carry.
pub const MAX_INFO_PAIRS: usize = 64;

/// Longest "last address" text in a list request (`255.255.255.255:65535` is 21 bytes; an
/// IPv6 one in brackets up to 47).
pub const MAX_LAST_ADDR_LEN: usize = 64;

/// The text of a key, value or filter: the family's strings are bytes; they are shown as
/// UTF-8 where valid and as Windows-1252 where not (the engines' native code page).
#[must_use]
pub fn decode_text(raw: &[u8]) -> String {
    match std::str::from_utf8(raw) {
        Ok(s) => s.to_owned(),
        Err(_) => crate::text::decode_windows1252(raw),
    }
}
