//! The JSON shape of results: the only types here that derive `Serialize`.
//!
//! The schema is documented in the README ("Result schema"); change both together.

use std::net::SocketAddr;

use muster_proto::games;
use muster_proto::model::{Player, Protocol, RawValue, ServerInfo, Text};
use serde::Serialize;
use serde::ser::{SerializeMap as _, Serializer};

/// One server's result as printed by `query` and `scan`.
#[derive(Debug, Serialize)]
pub(crate) struct ServerResult {
    /// The game address, what a player connects to; a host name as given or registered.
    pub address: String,
    /// Where it was queried; `null` for a management server's game, which is not queried.
    pub query_address: Option<String>,
    /// Where a host name (given, or registered with a management server) resolved to;
    /// absent for IP addresses.
    #[serde(skip_serializing_if = "Resolved::is_not_applicable")]
    pub resolved_address: Resolved,
    pub protocol: &'static str,
    /// The game key, as a master files the server (`ut`, `serioussamse`, `ddnet`, …; see
    /// `muster_proto::games`); `null` when the answer does not tell.
    pub game: Option<String>,
    /// The game's display name; the key itself for a game without one.
    pub game_name: Option<String>,
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
    pub rules: Fields,
    pub partial: bool,
    pub partial_reason: Option<String>,
    /// A management server's lobby state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lobby: Option<LobbyResult>,
    pub raw: Fields,
}

/// The lobby state of a management server's game, as the master's API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LobbyResult {
    /// Whether new players can join (`isLobbyOpen`).
    pub open: bool,
    /// `Standard A` or `Standard A+B` (`gameplayMode` 1 or 2).
    pub mode: &'static str,
}

impl LobbyResult {
    pub(crate) fn of(lobby: muster_query::Lobby) -> Self {
        use muster_proto::mgmt::messages::GameplayMode;
        Self {
            open: lobby.open,
            mode: match lobby.mode {
                GameplayMode::StandardA => "Standard A",
                GameplayMode::StandardAB => "Standard A+B",
            },
        }
    }

    /// `open` or `closed`, for tables.
    pub(crate) fn state(&self) -> &'static str {
        if self.open { "open" } else { "closed" }
    }
}

/// Whether a registered host name was resolved: absent for addresses that need no resolving,
/// `null` when the name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Not a management server's game.
    NotApplicable,
    /// Resolved (an IP address registered resolves to itself).
    To(SocketAddr),
    /// The name has no address (the reason is logged).
    Failed,
}

impl Resolved {
    pub(crate) fn is_not_applicable(&self) -> bool {
        *self == Self::NotApplicable
    }

    /// The address as a table shows it.
    pub(crate) fn show(&self) -> String {
        match self {
            Self::NotApplicable => String::new(),
            Self::To(a) => show_addr(*a),
            Self::Failed => "(does not resolve)".to_owned(),
        }
    }
}

impl Serialize for Resolved {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::To(a) => s.serialize_str(&show_addr(*a)),
            Self::NotApplicable | Self::Failed => s.serialize_none(),
        }
    }
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
    #[serde(skip_serializing_if = "Fields::is_empty")]
    pub raw: Fields,
}

/// One value of [`Fields`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    Int(i64),
    Bool(bool),
    Str(String),
    /// A key that repeated (a rule such as UE2 `Mutator`): its values in wire order.
    List(Vec<String>),
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Int(i) => write!(f, "{i}"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Str(s) => f.write_str(s),
            Self::List(l) => f.write_str(&l.join(",")),
        }
    }
}

impl Serialize for Field {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Int(i) => s.serialize_i64(*i),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::Str(v) => s.serialize_str(v),
            Self::List(l) => l.serialize(s),
        }
    }
}

/// A JSON object of protocol fields, kept as a sorted vector instead of a map of JSON values:
/// a scan builds thousands of these, and a vector costs one allocation where a tree of
/// `serde_json::Value`s costs many. Written in key order, each key once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fields(Vec<(String, Field)>);

impl Fields {
    /// `entries` in key order; of equal keys the last one wins, as inserting into a map does.
    fn last_wins(mut entries: Vec<(String, Field)>) -> Self {
        entries.sort_by(|a, b| a.0.cmp(&b.0)); // stable: equal keys keep their order
        // `later` is dropped; its value moves into the entry kept before it.
        entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        Self(entries)
    }

    /// `entries` in key order; the values of a repeated key become one [`Field::List`], in
    /// their order.
    fn repeats_listed(mut entries: Vec<(String, String)>) -> Self {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, Field)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            match out.last_mut() {
                Some((last, field)) if *last == k => match field {
                    Field::List(list) => list.push(v),
                    Field::Str(first) => {
                        let first = std::mem::take(first);
                        *field = Field::List(vec![first, v]);
                    }
                    // Rules are built as strings only.
                    Field::Int(_) | Field::Bool(_) => {}
                },
                _ => out.push((k, Field::Str(v))),
            }
        }
        Self(out)
    }

    /// Adds or replaces `key`, keeping key order.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, key: String, value: Field) {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&key)) {
            Ok(i) => {
                if let Some(slot) = self.0.get_mut(i) {
                    slot.1 = value;
                }
            }
            Err(i) => self.0.insert(i, (key, value)),
        }
    }

    /// The value of `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&Field> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, v)| v)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Key and value pairs in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Field)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Show `addr` as users type it (`[v6]:port` for IPv6).
pub(crate) fn show_addr(addr: SocketAddr) -> String {
    addr.to_string()
}

/// The plain (normalized) text; `<key>_hex` goes to `raw` when the bytes were not valid text,
/// `<key>_raw` when the text had colour codes or decorations.
fn text(t: Text, key: &str, raw: &mut Vec<(String, Field)>) -> String {
    if t.lossy {
        raw.push((
            format!("{key}_hex"),
            Field::Str(muster_proto::wire::to_hex(&t.raw)),
        ));
    }
    if t.text != t.plain {
        raw.push((format!("{key}_raw"), Field::Str(t.text)));
    }
    t.plain
}

fn raw_value(v: RawValue) -> Field {
    match v {
        RawValue::Int(i) => Field::Int(i),
        RawValue::Bool(b) => Field::Bool(b),
        RawValue::Text(t) if t.lossy => Field::Str(muster_proto::wire::to_hex(&t.raw)),
        RawValue::Text(t) => Field::Str(t.text),
        RawValue::Bytes(b) => Field::Str(muster_proto::wire::to_hex(&b)),
    }
}

/// The protocol's raw fields, with room for the `_hex`/`_raw` entries [`text`] may add.
fn raw_entries(fields: Vec<(String, RawValue)>) -> Vec<(String, Field)> {
    let mut v = Vec::with_capacity(fields.len() + 2);
    v.extend(fields.into_iter().map(|(k, f)| (k, raw_value(f))));
    v
}

fn player(p: Player) -> PlayerResult {
    let mut raw = raw_entries(p.raw);
    let name = text(p.name, "name", &mut raw);
    let clan = p.clan.map(|c| text(c, "clan", &mut raw));
    let raw = Fields::last_wins(raw);
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
            query_address: Some(show_addr(query_address)),
            status,
            error: Some(error),
            ..Self::listed(protocol)
        }
    }

    /// A row for a server a master listed with its state and nothing to query (a
    /// management server's game): the caller fills in what the list says.
    pub(crate) fn listed(protocol: &'static str) -> Self {
        // Only the management server lists servers with their state; its games are one game.
        let game = (protocol == "mgmt").then_some(games::BOMBERMAN);
        Self {
            address: String::new(),
            query_address: None,
            resolved_address: Resolved::NotApplicable,
            protocol,
            game: game.map(str::to_owned),
            game_name: game.map(|g| games::name_or_key(g).to_owned()),
            status: Status::Ok,
            error: None,
            ping_ms: None,
            name: None,
            map: None,
            game_type: None,
            version: None,
            password: None,
            num_players: None,
            max_players: None,
            players: Vec::new(),
            rules: Fields::default(),
            partial: false,
            partial_reason: None,
            lobby: None,
            raw: Fields::default(),
        }
    }

    /// The same result filed under game `key`.
    #[cfg(test)]
    pub(crate) fn with_game(mut self, key: &str) -> Self {
        self.game_name = Some(games::name_or_key(key).to_owned());
        self.game = Some(key.to_owned());
        self
    }

    /// A successful result (takes `info` apart: its strings move into the result).
    pub(crate) fn ok(address: SocketAddr, query_address: SocketAddr, info: ServerInfo) -> Self {
        let max_players = slots_known(&info).then_some(info.max_players);
        let game = games::key_of_answer(&info);
        let mut raw = raw_entries(info.raw);
        let name = text(info.name, "name", &mut raw);
        let map = text(info.map, "map", &mut raw);
        let game_type = text(info.game_type, "game_type", &mut raw);
        let version = text(info.version, "version", &mut raw);
        let raw = Fields::last_wins(raw);
        // Keys may repeat (UE2 `Mutator`): the values become a list, in order.
        let rules = Fields::repeats_listed(
            info.rules
                .into_iter()
                .map(|r| (r.key.text, r.value.text))
                .collect(),
        );
        Self {
            address: show_addr(address),
            query_address: Some(show_addr(query_address)),
            resolved_address: Resolved::NotApplicable,
            protocol: info.protocol.name(),
            game_name: game.as_deref().map(|g| games::name_or_key(g).to_owned()),
            game,
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
            lobby: None,
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
        assert_eq!(json["max_players"], serde_json::Value::Null);
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

    #[test]
    fn fields_are_sorted_and_the_last_of_a_key_wins() {
        let f = Fields::last_wins(vec![
            ("b".into(), Field::Str("1".into())),
            ("a".into(), Field::Int(2)),
            ("b".into(), Field::Str("3".into())),
        ]);
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"a":2,"b":"3"}"#);
        let mut f = f;
        f.insert("ab".into(), Field::Bool(true));
        f.insert("a".into(), Field::Int(5));
        assert_eq!(f.get("a"), Some(&Field::Int(5)));
        let keys: Vec<&str> = f.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "ab", "b"]);
    }

    /// Fields serialise exactly as the `serde_json::Map` they replace did (sorted keys, last
    /// insert wins, repeated rules as arrays).
    #[test]
    fn fields_match_a_json_map() {
        let entries = [("x", "1"), ("m", "2"), ("x", "3"), ("A", "4"), ("m", "5")];
        let mut map = serde_json::Map::new();
        for (k, v) in entries {
            map.insert(k.into(), v.into());
        }
        let fields = Fields::last_wins(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Field::Str((*v).to_owned())))
                .collect(),
        );
        assert_eq!(
            serde_json::to_value(&fields).unwrap(),
            serde_json::Value::Object(map)
        );
        let rules = Fields::repeats_listed(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        assert_eq!(
            serde_json::to_string(&rules).unwrap(),
            r#"{"A":"4","m":["2","5"],"x":["1","3"]}"#
        );
    }
}
