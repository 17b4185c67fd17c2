//! Teeworlds UDP masters (0.5 / 0.6 / 0.7 faces) and DDNet's HTTP register with its
//! `servers.json` list.
//!
//! Spec: `docs/protocols/teeworlds-master.md`; reference implementations teeworlds/teeworlds
//! `src/mastersrv/mastersrv.cpp`, `src/engine/server/register.cpp` and ddnet/ddnet
//! `src/mastersrv/src/main.rs`, `src/engine/server/register.cpp`,
//! `src/engine/client/serverbrowser_http.cpp`.
//!
//! ```text
//! 0.6 face:   <6-byte header: ff ff ff ff ff ff (qstat: 20 00 00 00 00 00)> <payload>
//! 0.7 face:   21 <token the receiver issued:4> <sender's own token:4> <payload>
//! 0.7 token:  04 00 00 <receiver's token or ff ff ff ff:4> 05 <own token:4> [00 x 508]
//!
//! payload:    ff ff ff ff <4 ASCII> [body]
//!   bea2 / beat   port:u16 BE                      server -> master (heartbeat)
//!   cou2 / coun   -                                any -> master (count request)
//!   siz2 / size   count:u16 BE                     master -> requester (count reply)
//!   req2 / reqt   -                                browser -> master (list request)
//!   lis2          n x (ip:16 (v4 as ::ffff:a.b.c.d), port:u16 BE)  n <= 75 sent, 77 accepted
//!   list          n x (ipv4:4, port:u16 LE)   (0.5)   n <= 75 sent, 231 accepted
//!   fw?? fw!! fwok fwer                            firewall check / answer / ok / failed
//!   chal          challenge-secret NUL token NUL   DDNet HTTP master -> server (UDP)
//! ```
//!
//! Files: [`packet`] (every UDP datagram, both directions), [`query`] (the list query
//! machine), [`register`] (the 0.7 game-server registration machine), [`registrar`] (the
//! game server's [`crate::respond::Registrar`]s: 0.7 UDP and DDNet HTTP), [`http`] (DDNet HTTP
//! register headers, body and responses), [`servers_json`] (the DDNet list document). The
//! connless framings are [`crate::teeworlds::header`]'s, shared with the server-info protocol.
//!
//! This module deliberately does **not**: resolve master host names (the driver resolves and
//! passes addresses), speak HTTP (it takes and produces header lists and bodies), keep a
//! master's registry or rate limits (that is `muster-master`), generate tokens or secrets
//! (callers pass randomness in), or read the clock.

pub mod http;
pub mod packet;
pub mod query;
pub mod register;
pub mod registrar;
pub mod servers_json;

pub use http::{
    Action, AddressScheme, ChallengeSecret, RegisterInfo, RegisterRequest, RegisterResponse,
    ServerAddress,
};
pub use packet::{Framing, LegacyListEntry, ListEntry, Message, Packet, Token};
pub use query::MasterListQuery;
pub use register::{RegisterClient, RegisterEvent};
pub use registrar::{DdnetHttpRegistrar, DdnetRegisterConfig, Stream, TeeworldsUdpRegistrar};
pub use servers_json::ServersJson;

/// The largest UDP datagram a Teeworlds peer sends or accepts (`NET_MAX_PACKETSIZE`).
pub const MAX_DATAGRAM: usize = 1400;

/// Servers per `lis2` / `list` datagram in the reference master (`MAX_SERVERS_PER_PACKET`);
/// [`packet::ListReply::split`] fills datagrams to this.
pub const MAX_LIST_ENTRIES: usize = 75;

/// The most `lis2` entries one datagram is accepted with: what fits in [`MAX_DATAGRAM`] after
/// the 6-byte header and the magic. Some 0.6 master versions sent 77 per datagram.
pub const MAX_LIS2_ENTRIES_ACCEPTED: usize = (MAX_DATAGRAM - 6 - 8) / 18;

/// The most 0.5 `list` entries one datagram is accepted with (the 0.5 master sent up to 128).
pub const MAX_LEGACY_LIST_ENTRIES_ACCEPTED: usize = (MAX_DATAGRAM - 6 - 8) / 6;

/// Datagrams per list answer in the reference master (`MAX_PACKETS`): 75 x 16 = 1200 servers.
pub const MAX_LIST_DATAGRAMS: usize = 16;

/// The most servers one list answer can carry; the list query stops storing beyond this.
pub const MAX_LIST_SERVERS: usize = MAX_LIST_ENTRIES * MAX_LIST_DATAGRAMS;

/// Longest challenge secret or challenge token accepted in a `chal` datagram, in bytes
/// (the real ones are about 47 and 24 bytes).
pub const MAX_CHALLENGE_FIELD: usize = 256;

/// Smallest 0.7 token request a peer answers (512 bytes of control data plus the 7-byte
/// header): anything shorter could be used for amplification.
pub const MIN_TOKEN_REQUEST_LEN: usize = 519;

/// Largest register request body accepted (the current DDNet master allows 32 KiB).
pub const MAX_REGISTER_BODY: usize = 32 * 1024;

/// Largest header value accepted by [`RegisterRequest::from_headers`].
pub const MAX_HEADER_VALUE: usize = 1024;

/// Largest `servers.json` document accepted (the real one is a few MiB).
pub const MAX_SERVERS_JSON: usize = 32 * 1024 * 1024;

/// The default UDP port of the 0.6 master (its checker listens on the next port).
pub const MASTER_PORT_06: u16 = 8300;

/// The default UDP port of the 0.7 master (its checker listens on the next port).
pub const MASTER_PORT_07: u16 = 8283;

// The strings here (register bodies, `servers.json`) are the server-info strings of the
// info protocol, so they decode by its one rule (spec teeworlds.md §4.1 and quirk 8). The
// DDNet 16.4 client's refusal of control characters in a server's name, map, game type and
// version (teeworlds-master.md §3.7) is a validity rule, not a display rule: it is
// `http::RegisterInfo::check_client_rules`.
pub use crate::teeworlds::decode_text;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_text_is_the_info_protocols() {
        // DDNet's client rule (teeworlds.md quirk 8): control characters become spaces,
        // leading whitespace is dropped, the rest is kept.
        let t = decode_text("  Ünï\u{1}★ ".as_bytes());
        assert_eq!(t.text, "  Ünï\u{1}★ ");
        assert_eq!(t.plain, "Ünï ★ ");
        assert!(!t.lossy);
        let t = decode_text(&[b'a', 0xff]);
        assert_eq!(t.text, "a\u{fffd}");
        assert_eq!(t.raw, [b'a', 0xff]);
        assert!(t.lossy);
    }
}
