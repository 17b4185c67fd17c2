//! The JSON shapes of the HTTP API (`/api/v1`). The only types of the crate that derive
//! `Serialize`: the registry's types can change without changing the API, and nothing
//! internal leaks into it by accident.
//!
//! Times are unix seconds. Addresses are strings in the form `GameAddr` displays
//! (`1.2.3.4:7777`, `[2001:db8::1]:8303`, `host.example:2000`).

use serde::Serialize;

use crate::registry::Record;
use crate::views::Snapshot;

/// One server in a list.
#[derive(Debug, Clone, Serialize)]
pub struct ServerSummary {
    /// The address it was registered under.
    pub address: String,
    /// The address players connect to, when the game port is known.
    pub game_address: Option<String>,
    /// Game name.
    pub game: String,
    /// The face that registered it (`gameagent`, `gamespy`, `teeworlds07`, `teeworlds06`,
    /// `ddnet`, `mgmt`).
    pub protocol: &'static str,
    /// The face's protocol family (`gameagent`, `gamespy`, `teeworlds`, `mgmt`).
    pub family: &'static str,
    /// Where it is queried, if it can be.
    pub query_address: Option<String>,
    /// How it is queried (`gameagent`, `gamespy1`, `unreal2`, `teeworlds`).
    pub query_protocol: Option<&'static str>,
    /// Server name (empty until the first poll).
    pub name: String,
    /// Map.
    pub map: String,
    /// Game type.
    pub game_type: String,
    /// Players.
    pub num_players: u32,
    /// Slots.
    pub max_players: u32,
    /// Password needed, when known.
    pub password: Option<bool>,
    /// First registered.
    pub first_seen: u64,
    /// Last valid heartbeat.
    pub last_heartbeat: u64,
    /// First verified.
    pub first_verified: Option<u64>,
    /// Last successful poll.
    pub last_poll: Option<u64>,
    /// Failed polls in a row.
    pub poll_failures: u32,
}

impl ServerSummary {
    /// The summary of `r`.
    #[must_use]
    pub fn from_record(r: &Record) -> Self {
        let info = r.info.as_ref();
        Self {
            address: r.key.addr.to_string(),
            game_address: r.game_addr().map(|a| a.to_string()),
            game: r.key.game.clone(),
            protocol: r.face.name(),
            family: r.face.family(),
            query_address: r.query_addr.map(|a| a.to_string()),
            query_protocol: r.query_protocol.map(muster_proto::Protocol::name),
            name: info.map(|i| i.name.clone()).unwrap_or_default(),
            map: info.map(|i| i.map.clone()).unwrap_or_default(),
            game_type: info.map(|i| i.game_type.clone()).unwrap_or_default(),
            num_players: info.map_or(0, |i| i.num_players),
            max_players: info.map_or(0, |i| i.max_players),
            password: info.and_then(|i| i.password),
            first_seen: r.first_seen.as_secs(),
            last_heartbeat: r.last_heartbeat.as_secs(),
            first_verified: Some(r.first_seen.as_secs()),
            last_poll: r.last_poll_ok.map(|t| t.as_secs()),
            poll_failures: r.poll_failures,
        }
    }
}

/// A player.
#[derive(Debug, Clone, Serialize)]
pub struct PlayerDto {
    /// Name.
    pub name: String,
    /// Score, when reported.
    pub score: Option<i64>,
}

/// A rule.
#[derive(Debug, Clone, Serialize)]
pub struct RuleDto {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
}

/// `GET /api/v1/servers/{address}`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: ServerSummary,
    /// Players from the last poll.
    pub players: Vec<PlayerDto>,
    /// Rules from the last poll.
    pub rules: Vec<RuleDto>,
}

impl ServerDetail {
    /// The detail view of `r`.
    #[must_use]
    pub fn from_record(r: &Record) -> Self {
        let info = r.info.as_ref();
        Self {
            summary: ServerSummary::from_record(r),
            players: info
                .map(|i| {
                    i.players
                        .iter()
                        .map(|p| PlayerDto {
                            name: p.name.clone(),
                            score: p.score,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            rules: info
                .map(|i| {
                    i.rules
                        .iter()
                        .map(|(k, v)| RuleDto {
                            key: k.clone(),
                            value: v.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// `GET /api/v1/servers`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerListDto {
    /// Matches over all pages.
    pub total: usize,
    /// This page (from 1).
    pub page: usize,
    /// Page size used.
    pub per_page: usize,
    /// The servers of this page.
    pub servers: Vec<ServerSummary>,
}

/// An error body.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorDto {
    /// What was wrong, e.g. `unknown sort column`.
    pub error: &'static str,
}

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize)]
pub struct HealthDto {
    /// `"ok"`, or `"degraded"` while the store fails (lists are served from memory, changes
    /// are kept and written when it works again).
    pub status: &'static str,
    /// Listed records.
    pub records: usize,
    /// The store's failure, while it lasts.
    pub store_error: Option<String>,
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
        }
    }
}
