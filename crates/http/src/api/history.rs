//! The history routes over [`History`]: one server's player counts at a chosen range, the games
//! listed now, and one game's servers and players over time.
//!
//! ```text
//! GET /api/v1/servers/{address}/history              the last 24 h (the retention) of minute
//!                                                    points, as the page has always read them
//! GET /api/v1/servers/{address}/history?range=48h    minute points      ┐ {range, step, points:
//!                                            =30d    hourly rollups     │  [{at, samples, answered,
//!                                            =1y     hourly rollups     ┘  min, avg, max, slots}]}
//! GET /api/v1/games                                  [{game, name, servers, up, players}]
//! GET /api/v1/games/{game}/history?range=48h|30d|1y  {game, name, range, step, points: [{at,
//!                                                    servers, up_min, up_avg, up_max,
//!                                                    players_min, players_avg, players_max}]}
//! GET /games, /games/{game}                          the per-game overview page
//! ```
//!
//! A range other than these three is refused `400`, naming them. [`router`] serves the game
//! routes and the badge ([`super::badge`]); [`server_history`] is the handler of the server's
//! route, which the page's router mounts.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use crate::web::History;
use crate::web::history::{GamePoint, Resolution, ServerPoint};
use muster_core::registry::{GameAddr, MAX_GAME_LEN, Timestamp};

/// The query parameters of `/api/v1/servers/{address}/history`.
pub const SERVER_HISTORY_PARAMS: &[&str] = &["game", "range"];
/// The query parameters of `/api/v1/games/{game}/history`.
pub const GAME_HISTORY_PARAMS: &[&str] = &["range"];
/// The ranges a history route takes, as a `400` names them.
pub const RANGES: &str = "48h, 30d, 1y";

/// A history route's `range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryRange {
    /// The last 48 hours, minute points.
    Hours48,
    /// The last 30 days, hourly rollups.
    Days30,
    /// The last 365 days, hourly rollups.
    Year,
}

impl HistoryRange {
    /// The range `s` names, if any.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "48h" => Some(Self::Hours48),
            "30d" => Some(Self::Days30),
            "1y" => Some(Self::Year),
            _ => None,
        }
    }

    /// Its name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Hours48 => "48h",
            Self::Days30 => "30d",
            Self::Year => "1y",
        }
    }

    /// How long it reaches back.
    #[must_use]
    pub const fn span(self) -> Duration {
        match self {
            Self::Hours48 => Duration::from_secs(48 * 3600),
            Self::Days30 => Duration::from_secs(30 * 24 * 3600),
            Self::Year => Duration::from_secs(365 * 24 * 3600),
        }
    }

    /// The points it reads.
    #[must_use]
    pub const fn resolution(self) -> Resolution {
        match self {
            Self::Hours48 => Resolution::Minute,
            Self::Days30 | Self::Year => Resolution::Hour,
        }
    }

    /// Seconds between points.
    #[must_use]
    pub const fn step(self) -> u32 {
        match self.resolution() {
            Resolution::Minute => 60,
            Resolution::Hour => 3600,
        }
    }
}

/// One minute point or hourly rollup of one server.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ServerPointDto {
    /// The start of the minute or hour, unix seconds.
    pub at: u64,
    /// Polls in it.
    pub samples: u32,
    /// Polls the server answered (`answered / samples`: the share of time up).
    pub answered: u32,
    /// Fewest players (`null`: it never answered).
    pub min: Option<u32>,
    /// Mean players over the answered polls.
    pub avg: Option<f64>,
    /// Most players.
    pub max: Option<u32>,
    /// Slots.
    pub slots: Option<u32>,
}

impl From<ServerPoint> for ServerPointDto {
    fn from(p: ServerPoint) -> Self {
        Self {
            at: p.at,
            samples: p.samples,
            answered: p.answered,
            min: p.min,
            avg: p.avg.map(round2),
            max: p.max,
            slots: p.slots,
        }
    }
}

/// `/api/v1/servers/{address}/history?range=`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ServerSeriesDto {
    /// The range asked for.
    pub range: &'static str,
    /// Seconds between points (60 or 3600).
    pub step: u32,
    /// Points with at least one poll, oldest first.
    pub points: Vec<ServerPointDto>,
}

/// One game listed now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GameDto {
    /// The game's key (as `?game=` takes it).
    pub game: String,
    /// Its name, the key when the name is not known.
    pub name: String,
    /// Servers listed.
    pub servers: u32,
    /// Servers whose last poll answered.
    pub up: u32,
    /// Players on those.
    pub players: u64,
}

/// One minute or hour of one game.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GamePointDto {
    /// The start of the minute or hour, unix seconds.
    pub at: u64,
    /// Servers with a recent poll (an hour: the most of its minutes).
    pub servers: u32,
    /// Servers up: fewest over the minutes.
    pub up_min: u32,
    /// Servers up: mean over the minutes.
    pub up_avg: f64,
    /// Servers up: most over the minutes.
    pub up_max: u32,
    /// Players: fewest over the minutes.
    pub players_min: u32,
    /// Players: mean over the minutes.
    pub players_avg: f64,
    /// Players: most over the minutes.
    pub players_max: u32,
}

impl From<GamePoint> for GamePointDto {
    fn from(p: GamePoint) -> Self {
        Self {
            at: p.at,
            servers: p.servers,
            up_min: p.up.0,
            up_avg: round2(p.up.1),
            up_max: p.up.2,
            players_min: p.players.0,
            players_avg: round2(p.players.1),
            players_max: p.players.2,
        }
    }
}

/// `/api/v1/games/{game}/history`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GameSeriesDto {
    /// The game's key.
    pub game: String,
    /// Its name.
    pub name: String,
    /// The range asked for.
    pub range: &'static str,
    /// Seconds between points (60 or 3600).
    pub step: u32,
    /// Minutes or hours with a server, oldest first.
    pub points: Vec<GamePointDto>,
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// What the history routes read.
#[derive(Debug, Clone)]
pub struct HistoryApi {
    history: History,
    pub(crate) handle: muster_core::MasterHandle,
}

impl HistoryApi {
    /// The routes' state over `history` and the registry behind `handle`.
    #[must_use]
    pub fn new(history: History, handle: muster_core::MasterHandle) -> Self {
        Self { history, handle }
    }
}

/// The per-game overview page (`/games`: every game; `/games/{game}`: its counts, players
/// over time and busiest servers), embedded in the binary.
pub const GAMES_HTML: &str = include_str!("games.html");

/// `/games`, `/games/{game}`, `/api/v1/games`, `/api/v1/games/{game}/history` and
/// `/badge/{address}.svg`.
pub fn router(history: History, handle: muster_core::MasterHandle) -> Router {
    Router::new()
        .route("/games", get(games_page))
        .route("/games/{game}", get(games_page))
        .route("/api/v1/games", get(games))
        .route("/api/v1/games/{game}/history", get(game_history))
        .route("/badge/{file}", get(super::badge::badge))
        .with_state(HistoryApi::new(history, handle))
}

async fn games_page() -> Response {
    (
        [(axum::http::header::CACHE_CONTROL, "no-cache")],
        axum::response::Html(GAMES_HTML),
    )
        .into_response()
}

pub(crate) fn error(
    status: StatusCode,
    error: impl Into<std::borrow::Cow<'static, str>>,
) -> Response {
    let body = crate::api::dto::ErrorDto {
        error: error.into(),
    };
    (status, axum::Json(body)).into_response()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Params {
    pub(crate) game: Option<String>,
    pub(crate) range: Option<String>,
}

/// The known parameters of `raw` (checked against `known` first); `Err` says why not.
pub(crate) fn params(raw: Option<&str>, known: &[&str]) -> Result<Params, String> {
    crate::params::check_params(raw, known)?;
    let uri: axum::http::Uri = format!("/?{}", raw.unwrap_or(""))
        .parse()
        .map_err(|_| "malformed query string".to_owned())?;
    axum::extract::Query::<Params>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|_| "malformed query string".to_owned())
}

fn range_of(p: &Params) -> Result<Option<HistoryRange>, String> {
    match p.range.as_deref() {
        None | Some("") => Ok(None),
        Some(r) => HistoryRange::parse(r)
            .map(Some)
            .ok_or_else(|| format!("range must be one of {RANGES}")),
    }
}

/// Where the rows of `wanted` are kept: the registered address of the listed record at that
/// address (of `game`, when given). `Err` with the games when no game is given and several
/// games are listed there, since their rows would be merged.
pub(crate) fn history_record(
    view: &muster_core::views::Snapshot,
    wanted: &GameAddr,
    game: Option<&str>,
) -> Result<Option<String>, Vec<String>> {
    let found = view.find_by_addr(wanted);
    let mut hits = found
        .iter()
        .filter(|r| game.is_none_or(|g| g.eq_ignore_ascii_case(&r.key.game)));
    let Some(first) = hits.next() else {
        return Ok(None);
    };
    if game.is_none() {
        let mut games: Vec<String> = found.iter().map(|r| r.key.game.to_string()).collect();
        games.sort();
        games.dedup();
        if games.len() > 1 {
            return Err(games);
        }
    }
    Ok(Some(first.key.addr.to_string()))
}

fn unavailable<E: std::fmt::Display>(e: E) -> Response {
    tracing::warn!(error = %e, "history read failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, "history unavailable")
}

/// One server's player counts: without `range`, the minute points of the retention (24 h by
/// default) in the page's form; with it, minute points (48h) or hourly rollups (30d, 1y).
#[utoipa::path(get, path = "/api/v1/servers/{address}/history",
    params(
        ("address" = String, Path, description = "The address the list shows (game address) or the registered address"),
        ("game" = Option<String>, Query, description = "The game, when several are listed at one address"),
        ("range" = Option<String>, Query, description = "48h (minute points), 30d or 1y (hourly rollups); without it, the retention's minute points as a plain array")
    ),
    responses(
        (status = 200, description = "Without range: minute points, oldest first ([HistoryPointDto]); with range: a ServerSeriesDto", body = ServerSeriesDto),
        (status = 400, description = "Not an address, an unknown parameter or range, or several games listed at the address and no `game`", body = crate::api::dto::ErrorDto)
    ))]
pub async fn server_history(
    State(st): State<HistoryApi>,
    Path(address): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let p = match params(raw.as_deref(), SERVER_HISTORY_PARAMS) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let Some(addr) = GameAddr::parse(&address) else {
        return error(StatusCode::BAD_REQUEST, "address must be host:port");
    };
    let range = match range_of(&p) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let game = p
        .game
        .filter(|g| !g.is_empty())
        .map(|g| g.to_ascii_lowercase());
    // Rows are kept under the registered address; the list shows the game address. The
    // snapshot's address index is built once per snapshot, over every record: off the reactor.
    let view = st.handle.snapshot();
    let (wanted, g) = (addr.clone(), game.clone());
    let registered = muster_core::bulk::spawn(move || history_record(&view, &wanted, g.as_deref()))
        .await
        .unwrap_or(Ok(None));
    let registered = match registered {
        Ok(r) => r,
        Err(games) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "several games are listed at this address: add ?game= with one of {}",
                    games.join(", ")
                ),
            );
        }
    };
    let addr = registered.unwrap_or_else(|| addr.to_string());
    let history = st.history;
    let now = Timestamp::now();
    let Some(range) = range else {
        let res =
            muster_core::bulk::spawn(move || history.recent(&addr, game.as_deref(), now)).await;
        return match res {
            Ok(Ok(points)) => axum::Json(
                points
                    .into_iter()
                    .map(|p| crate::web::HistoryPointDto {
                        at: p.at.as_secs(),
                        num_players: p.num_players,
                        max_players: p.max_players,
                        ok: p.ok,
                    })
                    .collect::<Vec<_>>(),
            )
            .into_response(),
            Ok(Err(e)) => unavailable(e),
            Err(e) => unavailable(e),
        };
    };
    let res = muster_core::bulk::spawn(move || {
        history.series(
            &addr,
            game.as_deref(),
            range.resolution(),
            range.span(),
            now,
        )
    })
    .await;
    match res {
        Ok(Ok(points)) => axum::Json(ServerSeriesDto {
            range: range.name(),
            step: range.step(),
            points: points.into_iter().map(Into::into).collect(),
        })
        .into_response(),
        Ok(Err(e)) => unavailable(e),
        Err(e) => unavailable(e),
    }
}

/// The games of `view`'s listed servers, busiest first.
fn games_of(view: &muster_core::views::Snapshot) -> Vec<GameDto> {
    let mut by: std::collections::BTreeMap<&str, (u32, u32, u64)> = Default::default();
    for r in view.listed() {
        let e = by.entry(r.key.game.as_str()).or_default();
        e.0 += 1;
        if let Some(info) = r.info.as_deref()
            && r.poll_failures() == 0
        {
            e.1 += 1;
            e.2 += u64::from(info.num_players);
        }
    }
    let mut out: Vec<GameDto> = by
        .into_iter()
        .map(|(g, (servers, up, players))| GameDto {
            game: g.to_owned(),
            name: muster_proto::games::name_or_key(g).to_owned(),
            servers,
            up,
            players,
        })
        .collect();
    out.sort_by(|a, b| b.players.cmp(&a.players).then(b.servers.cmp(&a.servers)));
    out
}

/// Every game listed now: servers listed and up, players, busiest first.
#[utoipa::path(get, path = "/api/v1/games", responses(
    (status = 200, description = "Games listed now, busiest first", body = [GameDto])
))]
pub async fn games(State(st): State<HistoryApi>, RawQuery(raw): RawQuery) -> Response {
    if let Err(e) = crate::params::check_params(raw.as_deref(), &[]) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    let view = st.handle.snapshot();
    // A pass over every listed record: off the reactor.
    match muster_core::bulk::spawn(move || games_of(&view)).await {
        Ok(g) => axum::Json(g).into_response(),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "games unavailable"),
    }
}

/// One game's servers and players over time: minute points (48h, the default) or hourly
/// rollups (30d, 1y).
#[utoipa::path(get, path = "/api/v1/games/{game}/history",
    params(
        ("game" = String, Path, description = "The game's key"),
        ("range" = Option<String>, Query, description = "48h (default, minute points), 30d or 1y (hourly rollups)")
    ),
    responses(
        (status = 200, description = "Points, oldest first", body = GameSeriesDto),
        (status = 400, description = "An unknown parameter or range, or a key too long", body = crate::api::dto::ErrorDto)
    ))]
pub async fn game_history(
    State(st): State<HistoryApi>,
    Path(game): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let p = match params(raw.as_deref(), GAME_HISTORY_PARAMS) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let range = match range_of(&p) {
        Ok(r) => r.unwrap_or(HistoryRange::Hours48),
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if game.is_empty() || game.len() > MAX_GAME_LEN {
        return error(
            StatusCode::BAD_REQUEST,
            format!("a game key is 1 to {MAX_GAME_LEN} bytes"),
        );
    }
    let game = game.to_ascii_lowercase();
    let history = st.history;
    let now = Timestamp::now();
    let g = game.clone();
    let res = muster_core::bulk::spawn(move || {
        history.game_series(&g, range.resolution(), range.span(), now)
    })
    .await;
    match res {
        Ok(Ok(points)) => axum::Json(GameSeriesDto {
            name: muster_proto::games::name_or_key(&game).to_owned(),
            game,
            range: range.name(),
            step: range.step(),
            points: points.into_iter().map(Into::into).collect(),
        })
        .into_response(),
        Ok(Err(e)) => unavailable(e),
        Err(e) => unavailable(e),
    }
}
