//! The JSON shapes of the HTTP API (`/api/v1`). With the store's rows, the only types of the
//! crate that derive `Serialize`: the registry's types can change without changing the API,
//! and nothing internal leaks into it by accident. Each also derives its OpenAPI schema
//! (`GET /api/v1/openapi.json`).
//!
//! Times are unix seconds. Addresses are strings in the form `GameAddr` displays
//! (`1.2.3.4:7777`, `[2001:db8::1]:8303`, `host.example:2000`).
//!
//! # One address model
//! `address` is always what a player connects to (the game address) when it is known; the
//! address the server was registered under (for GameSpy, its heartbeat's query address) is
//! `registered_address`, and `query_address` is where it is polled. Players and rules have the
//! shape of the command line's JSON (`muster query -f json`): players are objects with `name`,
//! `score`, `ping_ms` and `team`; rules are one object, a repeated key mapping to a list.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use muster_core::registry::{Origin, PollInfo, Record, ShortText};
use muster_core::views::Snapshot;

/// The state of a management-server game (the seed's lobby and gameplay fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LobbyDto {
    /// Whether the lobby accepts players (`isLobbyOpen`).
    pub open: bool,
    /// The gameplay mode: `Standard A` or `Standard A+B`.
    #[schema(value_type = String)]
    pub mode: ShortText,
}

impl LobbyDto {
    /// The lobby state of a management record, read from its info.
    #[must_use]
    pub fn of(info: &PollInfo) -> Option<Self> {
        let open = match info.rule("isLobbyOpen")? {
            "true" => true,
            "false" => false,
            _ => return None,
        };
        Some(Self {
            open,
            mode: info.game_type().into(),
        })
    }
}

/// Where a record came from, and when that source last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SourceDto {
    /// `direct`: the server registered with this master (a face proved it); `upstream`:
    /// learned from the configured master named in `upstream`, and listed after this master
    /// queried it successfully itself.
    pub origin: &'static str,
    /// The upstream's name, for `upstream`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// When this source last saw it: the last proof or heartbeat, or the last pull of the
    /// upstream that listed it.
    pub last_seen: u64,
}

impl SourceDto {
    /// The sources of `r`, direct first.
    #[must_use]
    pub fn of(r: &Record) -> Vec<Self> {
        if r.sources().is_empty() {
            return vec![Self {
                origin: "direct",
                upstream: None,
                last_seen: r.last_heartbeat.as_secs(),
            }];
        }
        r.sources()
            .iter()
            .map(|s| Self {
                origin: match s.origin {
                    Origin::Direct => "direct",
                    Origin::Upstream(_) => "upstream",
                },
                upstream: s.origin.upstream().map(str::to_owned),
                last_seen: s.last_seen.as_secs(),
            })
            .collect()
    }
}

/// One server in a list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ServerSummary {
    /// Where players connect (the game address) when the game port is known, else the address
    /// it was registered under.
    pub address: String,
    /// Whether `address` is the game address (false while a GameSpy server's game port is
    /// not known yet).
    pub address_is_game: bool,
    /// The address it was registered under, exactly as the server gave it (a management
    /// server's host name is kept as registered, never resolved here).
    pub registered_address: String,
    /// Where it is queried, if it can be.
    pub query_address: Option<String>,
    /// The game key, lower case: the key the master files the server under (`ut`,
    /// `serioussamse`, `ddnet`, `teeworlds`, `bomberman`, …; the list is in
    /// `docs/browser.md`). The `game` filter and `?game=` match it.
    #[schema(value_type = String)]
    pub game: ShortText,
    /// The game's display name (`Unreal Tournament`, `Serious Sam: The Second Encounter`);
    /// the key itself for a game without one.
    #[schema(value_type = String)]
    pub game_name: ShortText,
    /// The face that registered it (`gameagent`, `gamespy`, `teeworlds07`, `teeworlds06`,
    /// `ddnet`, `mgmt`).
    pub protocol: &'static str,
    /// The face's protocol family (`gameagent`, `gamespy`, `teeworlds`, `mgmt`).
    pub family: &'static str,
    /// How it is queried (`gameagent`, `gamespy1`, `unreal2`, `teeworlds`).
    pub query_protocol: Option<&'static str>,
    /// Server name (empty until the first poll).
    #[schema(value_type = String)]
    pub name: ShortText,
    /// Map.
    #[schema(value_type = String)]
    pub map: ShortText,
    /// Game type.
    #[schema(value_type = String)]
    pub game_type: ShortText,
    /// Players.
    pub num_players: u32,
    /// Slots.
    pub max_players: u32,
    /// Password needed, when known.
    pub password: Option<bool>,
    /// A management server's lobby state.
    pub lobby: Option<LobbyDto>,
    /// Where it is, when the daemon has a locations table (config `ddnet.locations`) and it
    /// lists the server's IP: a continent code (`eu`, `na`, `sa`, `as`, `af`, `oc`, `an`),
    /// optionally `:` and an ISO 3166-1 country code (`eu:de`), lower case. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// First registered.
    pub first_seen: u64,
    /// Last valid heartbeat.
    pub last_heartbeat: u64,
    /// Last successful poll.
    pub last_poll: Option<u64>,
    /// Failed polls in a row.
    pub poll_failures: u32,
    /// Where it came from: a direct registration, configured upstream masters, or both.
    pub sources: Vec<SourceDto>,
}

impl ServerSummary {
    /// The summary of `r`.
    #[must_use]
    pub fn from_record(r: &Record) -> Self {
        let info = r.info.as_deref();
        let [name, map, game_type] = info.map(PollInfo::texts).unwrap_or_default();
        let game = r.game_addr();
        let key_game = ShortText::from(r.key.game.as_str());
        Self {
            address: r.shown_addr(),
            address_is_game: game.is_some(),
            registered_address: r.key.addr.to_string(),
            query_address: r
                .query_addr()
                .as_ref()
                .map(muster_core::registry::addr_text),
            game_name: muster_proto::games::display_name(&r.key.game)
                .map_or_else(|| key_game.clone(), ShortText::from),
            game: key_game,
            protocol: r.face.name(),
            family: r.face.family(),
            query_protocol: r.query_protocol.map(muster_proto::Protocol::name),
            name: name.into(),
            map: map.into(),
            game_type: game_type.into(),
            num_players: info.map_or(0, |i| i.num_players),
            max_players: info.map_or(0, |i| i.max_players),
            password: info.and_then(|i| i.password),
            lobby: info
                .filter(|_| r.face == muster_core::registry::Face::Mgmt)
                .and_then(LobbyDto::of),
            location: muster_core::locations::of_addr(&r.key.addr).map(|l| l.to_string()),
            first_seen: r.first_seen.as_secs(),
            last_heartbeat: r.last_heartbeat.as_secs(),
            last_poll: r.last_poll_ok().map(|t| t.as_secs()),
            poll_failures: r.poll_failures(),
            sources: SourceDto::of(r),
        }
    }
}

/// A player, in the shape of the command line's JSON.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlayerDto {
    /// Name (colour codes removed).
    #[schema(value_type = String)]
    pub name: ShortText,
    /// Score, when reported.
    pub score: Option<i64>,
    /// Ping in milliseconds, when reported.
    pub ping_ms: Option<u32>,
    /// Team, when reported.
    pub team: Option<i32>,
    /// Whether the player only watches, when the protocol says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spectator: Option<bool>,
    /// Whether the player is a bot, when the protocol says (Teeworlds 0.7); absent when it
    /// does not tell bots from humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot: Option<bool>,
}

/// A rule's value: a string, or a list of strings for a key sent several times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum RuleValue {
    /// One value.
    One(String),
    /// Every value of a repeated key, in wire order.
    Many(Vec<String>),
}

/// `GET /api/v1/servers/{address}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ServerDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: ServerSummary,
    /// Players from the last poll.
    pub players: Vec<PlayerDto>,
    /// Rules from the last poll: key → value (a repeated key → its values).
    pub rules: BTreeMap<String, RuleValue>,
    /// English display names of the rule keys that have one (`adminemail` → `Admin E-Mail`,
    /// `friendlyfire` → `Friendly Fire`): the GameSpy v1 vocabulary, the UE2 native rules
    /// and the GameAgent status keys. A key without an entry is shown as sent. Display only:
    /// `rules` keeps the keys as sent.
    pub rule_names: BTreeMap<String, &'static str>,
}

impl ServerDetail {
    /// The detail view of `r`.
    #[must_use]
    pub fn from_record(r: &Record) -> Self {
        let info = r.info.as_deref();
        let mut rules: BTreeMap<String, RuleValue> = BTreeMap::new();
        for (k, v) in info.iter().flat_map(|i| i.rules().iter()) {
            match rules.get_mut(k) {
                None => {
                    rules.insert(k.to_string(), RuleValue::One(v.to_string()));
                }
                Some(RuleValue::One(first)) => {
                    let first = std::mem::take(first);
                    rules.insert(k.to_string(), RuleValue::Many(vec![first, v.to_string()]));
                }
                Some(RuleValue::Many(all)) => all.push(v.to_string()),
            }
        }
        Self {
            summary: ServerSummary::from_record(r),
            players: info
                .map(|i| {
                    i.players()
                        .iter()
                        .map(|p| PlayerDto {
                            name: p.name.clone(),
                            score: p.score().map(i64::from),
                            ping_ms: p.ping_ms().map(u32::from),
                            team: p.team().map(i32::from),
                            spectator: p.spectator(),
                            bot: p.bot(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            rule_names: rules
                .keys()
                .filter_map(|k| {
                    muster_proto::display::known_property_name(k).map(|n| (k.clone(), n))
                })
                .collect(),
            rules,
        }
    }
}

/// `GET /api/v1/servers`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ServerListDto {
    /// The last live event this list shows: `GET /api/v1/events?last_event_id=` this value
    /// streams exactly what changes after it.
    pub last_event_id: u64,
    /// Matches over all pages.
    pub total: usize,
    /// This page (from 1).
    pub page: usize,
    /// Page size used.
    pub per_page: usize,
    /// The servers of this page.
    pub servers: Vec<ServerSummary>,
}

/// `GET /api/v1/info`: what this daemon serves, so that a page or a tool can tell game
/// servers where to register.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InfoDto {
    /// The daemon's version.
    pub version: &'static str,
    /// Every bound socket, in the order the daemon printed them at start.
    pub faces: Vec<FaceDto>,
    /// Where a DDNet server registers on the `http` face (`sv_register_url` is the face's
    /// URL with this path).
    pub ddnet_register_path: &'static str,
    /// `servers.json` on the `http` face.
    pub ddnet_servers_json_path: &'static str,
    /// Whether the poller queries listed servers for names and players.
    pub poller: bool,
    /// Whether player-count history is kept (`/api/v1/servers/{address}/history`).
    pub history: bool,
    /// Networks in the locations table (config `ddnet.locations`; 0: no `location`s).
    pub locations: usize,
}

/// One bound socket of `GET /api/v1/info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FaceDto {
    /// The face as `muster serve`'s flags spell it: `gameagent`, `gamespy-udp`,
    /// `gamespy-tcp`, `teeworlds07`, `teeworlds07-checker`, `teeworlds06`, `http`, `mgmt`.
    pub face: &'static str,
    /// `udp` or `tcp`.
    pub transport: &'static str,
    /// The bound address; an unspecified IP (`0.0.0.0`, `::`) means every address of the host.
    pub address: String,
}

/// An error body.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDto {
    /// What was wrong, e.g. `unknown sort column`.
    #[schema(value_type = String)]
    pub error: std::borrow::Cow<'static, str>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthDto {
    /// `"ok"`, or `"degraded"` while the store fails (lists are served from memory, changes
    /// are kept and written when it works again).
    pub status: &'static str,
    /// Listed records.
    pub records: usize,
    /// The store's failure, while it lasts.
    pub store_error: Option<String>,
    /// Each configured upstream (absent when there is none). An upstream that fails does not
    /// make the master unhealthy: its records stay until their lifetime ends.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamHealthDto>,
}

/// One upstream in `GET /healthz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UpstreamHealthDto {
    /// Its name (`[[upstream]] name`, or `<kind>:<address>`).
    pub name: String,
    /// Its kind.
    pub kind: &'static str,
    /// `ok` after a successful pull, `failing` after a failed one, `starting` before the
    /// first.
    pub status: &'static str,
    /// Unix time of the last successful pull.
    pub last_success: Option<u64>,
    /// Why the last pull failed, while it is the latest outcome.
    pub last_error: Option<String>,
    /// Pulls failed in a row.
    pub failures_in_row: u32,
    /// Servers the last successful pull listed.
    pub listed: usize,
    /// Records it is a source of.
    pub learned: usize,
    /// Servers it listed that answered this master's query and were listed, in total.
    pub verified: u64,
    /// Servers it listed that did not answer, in total.
    pub unanswered: u64,
}

impl UpstreamHealthDto {
    /// The health view of a status row.
    #[must_use]
    pub fn of(r: &muster_core::board::UpstreamStatus) -> Self {
        let status = match (r.last_attempt, r.failures_in_row) {
            (None, _) => "starting",
            (Some(_), 0) if r.last_success.is_some() => "ok",
            (Some(_), 0) => "starting",
            _ => "failing",
        };
        Self {
            name: r.name.clone(),
            kind: r.kind,
            status,
            last_success: r
                .last_success
                .map(muster_core::registry::Timestamp::as_secs),
            last_error: r.last_error.clone(),
            failures_in_row: r.failures_in_row,
            listed: r.listed,
            learned: r.learned,
            verified: r.verified,
            unanswered: r.unanswered,
        }
    }
}

impl HealthDto {
    /// Health from the current view and the store's state.
    #[must_use]
    pub fn of(view: &Snapshot, store_error: Option<String>) -> Self {
        Self {
            status: if store_error.is_some() {
                "degraded"
            } else {
                "ok"
            },
            records: view.len(),
            store_error,
            upstreams: Vec::new(),
        }
    }

    /// With the status of every upstream on `board`.
    #[must_use]
    pub fn with_upstreams(mut self, board: &muster_core::board::Board) -> Self {
        self.upstreams = board.rows().iter().map(UpstreamHealthDto::of).collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::{
        Face, GameAddr, PollFields, Registration, Rules, ServerKey, Timestamp,
    };
    use muster_proto::limit::SourceKey;
    use muster_proto::teeworlds::info::{Answer, Family};
    use muster_proto::teeworlds::{Info7Body, Player7, TwStr};

    fn record(info: PollInfo) -> Record {
        let addr: std::net::SocketAddr = "192.0.2.1:8303".parse().unwrap();
        let mut r = Record::new(
            1,
            Registration {
                key: ServerKey::new("teeworlds", GameAddr::Ip(addr)),
                face: Face::Teeworlds07,
                game_port: Some(8303),
                query_addr: Some(addr),
                query_protocol: Some(muster_proto::Protocol::Teeworlds),
                source: SourceKey::of(addr.ip()),
            },
            Timestamp(0),
        );
        r.info = Some(std::sync::Arc::new(info));
        r
    }

    /// A Teeworlds 0.7 answer flags bots (`teeworlds.md` §8.4): the flag reaches the API's
    /// players; a 0.6 answer does not tell, so there is no `bot` at all.
    #[test]
    fn bots_of_a_07_answer_reach_the_api() {
        let p = |name: &str, player_flags| Player7 {
            name: TwStr::new(name).unwrap(),
            player_flags,
            ..Player7::default()
        };
        let body = Info7Body {
            num_players: 2,
            max_players: 8,
            num_clients: 3,
            max_clients: 8,
            players: vec![p("human", 0), p("robot", 2), p("watcher", 1)],
            ..Info7Body::default()
        };
        let info = Answer::Sixup(body).to_server_info(&[Family::Sixup]);
        let d = ServerDetail::from_record(&record(PollInfo::from_server_info(&info)));
        let bots: Vec<(&str, Option<bool>)> =
            d.players.iter().map(|p| (p.name.as_str(), p.bot)).collect();
        assert_eq!(
            bots,
            [
                ("human", Some(false)),
                ("robot", Some(true)),
                ("watcher", Some(false))
            ]
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["players"][1]["bot"], true);

        let mut plain = muster_proto::ServerInfo::new(muster_proto::Protocol::GameSpy1);
        plain.players.push(muster_proto::model::Player::default());
        let d = ServerDetail::from_record(&record(PollInfo::from_server_info(&plain)));
        assert_eq!(d.players[0].bot, None);
        let json = serde_json::to_value(&d).unwrap();
        assert!(json["players"][0].get("bot").is_none(), "{json}");
    }

    #[test]
    fn rule_names_cover_known_keys_only() {
        let d = ServerDetail::from_record(&record(PollInfo::from(PollFields {
            rules: Rules::new([
                ("friendlyfire", "0"),
                ("Mutator", "a"),
                ("Mutator", "b"),
                ("sv_custom", "1"),
            ]),
            ..PollFields::default()
        })));
        assert_eq!(
            d.rule_names,
            BTreeMap::from([
                ("Mutator".to_owned(), "Mutator"),
                ("friendlyfire".to_owned(), "Friendly Fire"),
            ])
        );
        assert_eq!(
            d.rules.get("Mutator"),
            Some(&RuleValue::Many(vec!["a".into(), "b".into()]))
        );
    }
}
