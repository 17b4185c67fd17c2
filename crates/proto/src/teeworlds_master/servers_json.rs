//! DDNet's `servers.json` (spec §3.7): the list document masters serve and browsers fetch.
//!
//! Each entry's `info` is kept as a JSON value and typed on demand
//! ([`ServerEntry::info`]): the DDNet 16.4 client skips a server with invalid info alone, and so
//! does [`ServersJson::to_server_list`], instead of failing the whole document.

use std::collections::HashSet;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::MAX_SERVERS_JSON;
use super::http::{RegisterInfo, ServerAddress};
use crate::model::{ListedServer, ServerInfo, ServerList};
use crate::wire::DecodeError;

/// The whole `servers.json` document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServersJson {
    /// The registered servers.
    pub servers: Vec<ServerEntry>,
    /// Plain `ip:port` strings of servers from a 0.6 UDP master (optional, read by 16.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers_legacy: Option<Vec<String>>,
    /// Top-level fields this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One server of `servers.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEntry {
    /// Address URLs as written (`tw-0.6+udp://192.0.2.10:8303`, IPv6 in brackets).
    pub addresses: Vec<String>,
    /// Continent code (`eu`, `na`, `as:cn`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Exactly the JSON object the server registered.
    pub info: serde_json::Value,
    /// Fields newer masters add (`community`, …).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ServerEntry {
    /// The addresses that parse, in order; malformed ones are skipped.
    #[must_use]
    pub fn parsed_addresses(&self) -> Vec<ServerAddress> {
        self.addresses
            .iter()
            .filter_map(|a| ServerAddress::parse(a).ok())
            .collect()
    }

    /// The typed info.
    pub fn info(&self) -> Result<RegisterInfo, DecodeError> {
        RegisterInfo::deserialize(&self.info).map_err(|_| DecodeError::Invalid("server info json"))
    }

    /// The info as a protocol-neutral [`ServerInfo`] (see [`RegisterInfo::to_server_info`]).
    pub fn server_info(&self) -> Result<ServerInfo, DecodeError> {
        self.info().map(|i| i.to_server_info())
    }
}

impl ServersJson {
    /// Parse a document; more than [`MAX_SERVERS_JSON`] bytes is refused before parsing.
    pub fn decode(doc: &[u8]) -> Result<Self, DecodeError> {
        if doc.len() > MAX_SERVERS_JSON {
            return Err(DecodeError::TooLarge("servers.json"));
        }
        serde_json::from_slice(doc).map_err(|_| DecodeError::Invalid("servers.json"))
    }

    /// Append the compact JSON document.
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Cannot fail: every map key is a string.
        let _ = serde_json::to_writer(out, self);
    }

    /// Every game address in the document as a [`ServerList`], duplicates removed, in
    /// document order: the IP addresses of every entry (all schemes; a 0.6 and a 0.7 address
    /// on the same port appear once) and then `servers_legacy`. Malformed or host-name
    /// addresses are skipped; the list is never marked partial.
    #[must_use]
    pub fn to_server_list(&self) -> ServerList {
        let mut seen = HashSet::new();
        let mut servers = Vec::new();
        let mut add = |address: SocketAddr| {
            if seen.insert(address) {
                servers.push(ListedServer {
                    address,
                    query_address: None,
                });
            }
        };
        for entry in &self.servers {
            for a in entry.parsed_addresses() {
                if let Some(sa) = a.socket_addr() {
                    add(sa);
                }
            }
        }
        for legacy in self.servers_legacy.iter().flatten() {
            if let Ok(sa) = legacy.parse::<SocketAddr>() {
                add(sa);
            }
        }
        ServerList {
            servers,
            partial: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DOC: &str = r#"{"servers":[{"addresses":["tw-0.6+udp://192.0.2.10:8303","tw-0.7+udp://192.0.2.10:8303","tw-0.6+udp://[2001:db8::1]:8303"],"location":"eu","info":{"max_clients":64,"max_players":64,"passworded":false,"game_type":"DDraceNetwork","name":"x","map":{"name":"Tutorial","sha256":"00","size":1},"version":"0.6.4, 16.4","clients":[]},"community":"ddnet"},{"addresses":["bad"],"info":{"name":3}}],"servers_legacy":["192.0.2.11:8303","192.0.2.10:8303"]}"#;

    #[test]
    fn decode_servers_json() {
        let doc = ServersJson::decode(DOC.as_bytes()).expect("valid");
        assert_eq!(doc.servers.len(), 2);
        let first = doc.servers.first().expect("one");
        assert_eq!(first.location.as_deref(), Some("eu"));
        assert_eq!(first.extra.get("community"), Some(&"ddnet".into()));
        assert_eq!(first.info().map(|i| i.max_clients), Ok(64));
        let second = doc.servers.get(1).expect("two");
        assert_eq!(second.info(), Err(DecodeError::Invalid("server info json")));
        let list = doc.to_server_list();
        let addrs: Vec<String> = list.servers.iter().map(|s| s.address.to_string()).collect();
        assert_eq!(
            addrs,
            ["192.0.2.10:8303", "[2001:db8::1]:8303", "192.0.2.11:8303"]
        );
    }

    #[test]
    fn encode_servers_json() {
        let doc = ServersJson::decode(DOC.as_bytes()).expect("valid");
        let mut out = Vec::new();
        doc.encode(&mut out);
        // Known fields keep their order; `info` is a plain JSON value whose keys serde_json
        // sorts, so compare values rather than bytes.
        assert_eq!(ServersJson::decode(&out), Ok(doc));
        let empty = ServersJson::default();
        let mut out = Vec::new();
        empty.encode(&mut out);
        assert_eq!(out, br#"{"servers":[]}"#);
    }

    #[test]
    fn decode_servers_json_rejects_non_array_servers() {
        assert_eq!(
            ServersJson::decode(br#"{"servers":{}}"#),
            Err(DecodeError::Invalid("servers.json"))
        );
    }

    #[test]
    fn a_number_beyond_i64_reads_back_as_it_was_written() {
        // Found by the fuzzer: a 73-digit score becomes an `f64`. Parsed without full
        // precision, the value written back parsed to a different float.
        let doc = br#"{"servers":[{"addresses":[],"info":{"clients":[{"score":4444444444444424444444444444444444444444444444444444444444444444444444440}]}}]}"#;
        let doc = ServersJson::decode(doc).expect("valid");
        let mut out = Vec::new();
        doc.encode(&mut out);
        assert_eq!(ServersJson::decode(&out), Ok(doc));
    }

    proptest! {
        #[test]
        fn servers_json_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(doc) = ServersJson::decode(&bytes) {
                let _ = doc.to_server_list();
                let mut out = Vec::new();
                doc.encode(&mut out);
                prop_assert_eq!(ServersJson::decode(&out), Ok(doc));
            }
        }
    }
}
