//! The JSON shape of results: the only types here that derive `Serialize`.
//!
//! The schema is documented in the README ("Result schema"); change both together.

use std::net::SocketAddr;

use muster_proto::model::{Player, Protocol, RawValue, ServerInfo, Text};
use serde::Serialize;
use serde_json::{Map, Value};

/// One server's result as printed by `query` and `scan`.
#[derive(Debug, Serialize)]
pub(crate) struct ServerResult {
    pub address: String,
    pub query_address: String,
    pub protocol: &'static str,
    pub status: Status,
    pub error: Option<String>,
    pub ping_ms: Option<f64>,
    pub name: Option<String>,
    pub map: Option<String>,
    pub game_type: Option<String>,
    pub version: Option<String>,
    pub password: Option<bool>,
    pub num_players: Option<u32>,
    pub max_players: Option<u32>,
    pub players: Vec<PlayerResult>,
    pub rules: Map<String, Value>,
    pub partial: bool,
    pub partial_reason: Option<String>,
    pub raw: Map<String, Value>,
}

/// Whether the query produced a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Timeout,
    Error,
}

/// One player.
#[derive(Debug, Serialize)]
pub(crate) struct PlayerResult {
    pub name: String,
    pub score: Option<i64>,
    pub ping_ms: Option<u32>,
    pub team: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spectator: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clan: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub country: Option<i32>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub raw: Map<String, Value>,
}

/// Show `addr` as users type it (`[v6]:port` for IPv6).
pub(crate) fn show_addr(addr: SocketAddr) -> String {
    addr.to_string()
}

/// The plain (normalized) text, and `<key>_hex` in `raw` when the bytes were not valid text.
fn text(t: Text, key: &str, raw: &mut Map<String, Value>) -> String {
    if t.lossy {
        raw.insert(
            format!("{key}_hex"),
            Value::String(muster_proto::wire::to_hex(&t.raw)),
        );
    }
    if t.text != t.plain {
        raw.insert(format!("{key}_raw"), Value::String(t.text));
    }
    t.plain
}

fn raw_value(v: RawValue) -> Value {
    match v {
        RawValue::Int(i) => Value::from(i),
        RawValue::Bool(b) => Value::Bool(b),
        RawValue::Text(t) if t.lossy => Value::String(muster_proto::wire::to_hex(&t.raw)),
        RawValue::Text(t) => Value::String(t.text),
        RawValue::Bytes(b) => Value::String(muster_proto::wire::to_hex(&b)),
    }
}

fn raw_map(fields: Vec<(String, RawValue)>) -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in fields {
        m.insert(k, raw_value(v));
    }
    m
}

fn player(p: Player) -> PlayerResult {
    let mut raw = raw_map(p.raw);
    let name = text(p.name, "name", &mut raw);
    let clan = p.clan.map(|c| text(c, "clan", &mut raw));
    PlayerResult {
        name,
        score: p.score,
        ping_ms: p.ping_ms,
        team: p.team,
        spectator: p.spectator,
        clan,
        country: p.country,
        raw,
    }
}

/// Whether the answer says how many slots the server has. A GameSpy v1 reply may leave out
/// `maxplayers` (the model then holds 0): that is unknown (`null`), not a server with no room.
fn slots_known(info: &ServerInfo) -> bool {
    info.protocol != Protocol::GameSpy1
        || info
            .raw
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("maxplayers"))
}

impl ServerResult {
    /// A result with no answer yet: `status` says why.
    pub(crate) fn failed(
        address: SocketAddr,
        query_address: SocketAddr,
        protocol: &'static str,
        status: Status,
        error: String,
    ) -> Self {
        Self {
            address: show_addr(address),
            query_address: show_addr(query_address),
            protocol,
            status,
            error: Some(error),
            ping_ms: None,
            name: None,
            map: None,
            game_type: None,
            version: None,
            password: None,
            num_players: None,
            max_players: None,
            players: Vec::new(),
            rules: Map::new(),
            partial: false,
            partial_reason: None,
            raw: Map::new(),
        }
    }

    /// A successful result (takes `info` apart: its strings move into the result).
    pub(crate) fn ok(address: SocketAddr, query_address: SocketAddr, info: ServerInfo) -> Self {
        let max_players = slots_known(&info).then_some(info.max_players);
        let mut raw = raw_map(info.raw);
        let name = text(info.name, "name", &mut raw);
        let map = text(info.map, "map", &mut raw);
        let game_type = text(info.game_type, "game_type", &mut raw);
        let version = text(info.version, "version", &mut raw);
        let mut rules = Map::new();
        for rule in info.rules {
            let key = rule.key.text;
            let value = Value::String(rule.value.text);
            match rules.get_mut(&key) {
                // Keys may repeat (UE2 `Mutator`): the values become a list, in order.
                Some(Value::Array(list)) => list.push(value),
                Some(first) => {
                    let first = first.take();
                    rules.insert(key, Value::Array(vec![first, value]));
                }
                None => {
                    rules.insert(key, value);
                }
            }
        }
        Self {
            address: show_addr(address),
            query_address: show_addr(query_address),
            protocol: info.protocol.name(),
            status: Status::Ok,
            error: None,
            ping_ms: info
                .ping
                .map(|d| (d.as_secs_f64() * 10_000.0).round() / 10.0),
            name: Some(name),
            map: Some(map),
            game_type: Some(game_type),
            version: Some(version),
            password: info.password,
            num_players: Some(info.num_players),
            max_players,
            players: info.players.into_iter().map(player).collect(),
            rules,
            partial: info.partial.is_some(),
            partial_reason: info.partial.map(|p| p.reason),
            raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::model::Rule;

    #[test]
    fn gamespy_without_maxplayers_has_unknown_slots() {
        let addr: SocketAddr = "127.0.0.1:7778".parse().unwrap();
        let mut info = ServerInfo::new(Protocol::GameSpy1);
        info.num_players = 3;
        let json = serde_json::to_value(ServerResult::ok(addr, addr, info.clone())).unwrap();
        assert_eq!(json["max_players"], Value::Null);
        assert_eq!(json["num_players"], 3);
        info.max_players = 16;
        info.raw.push((
            "maxplayers".into(),
            RawValue::Text(Text::from_utf8_str("16")),
        ));
        let json = serde_json::to_value(ServerResult::ok(addr, addr, info)).unwrap();
        assert_eq!(json["max_players"], 16);
    }

    #[test]
    fn repeated_rule_keys_become_a_list() {
        let mut info = ServerInfo::new(Protocol::Unreal2);
        for v in ["A", "B", "C"] {
            info.rules.push(Rule {
                key: Text::from_utf8_str("Mutator"),
                value: Text::from_utf8_str(v),
            });
        }
        info.rules.push(Rule {
            key: Text::from_utf8_str("TimeLimit"),
            value: Text::from_utf8_str("20"),
        });
        let addr: SocketAddr = "127.0.0.1:7777".parse().unwrap();
        let r = ServerResult::ok(addr, addr, info);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["rules"]["Mutator"], serde_json::json!(["A", "B", "C"]));
        assert_eq!(json["rules"]["TimeLimit"], "20");
        assert_eq!(json["status"], "ok");
    }

    #[test]
    fn invalid_text_keeps_hex_in_raw() {
        let mut info = ServerInfo::new(Protocol::Teeworlds);
        info.name = Text {
            raw: vec![0x66, 0xff],
            text: "f\u{fffd}".into(),
            plain: "f\u{fffd}".into(),
            lossy: true,
        };
        let addr: SocketAddr = "[::1]:8303".parse().unwrap();
        let json = serde_json::to_value(ServerResult::ok(addr, addr, info)).unwrap();
        assert_eq!(json["raw"]["name_hex"], "66ff");
        assert_eq!(json["address"], "[::1]:8303");
    }
}
