//! Page mode of `muster browse` (`--web`): the page `muster serve` shows, served on a local
//! listener and fed by this browser's own model, so it lists what the player's machine asked
//! the masters and measured itself (the ping column), with the profile's favourites.
//!
//! ```text
//! GET  /                                    the page (muster-http's, unchanged)
//! GET  /api/v1/info                         what the page needs to know: browse mode, masters
//! GET  /api/v1/servers                      every server, ?page= &per_page= (1–500) &q=
//! GET  /api/v1/servers/{address}            one server, with players, rules and its join link
//! GET  /api/v1/servers/{address}/history    [] (the browser keeps no history)
//! POST /api/v1/favourites/{protocol}/{address}    make it a favourite (saved in the profile)
//! DELETE …                                  no longer a favourite
//! ```
//!
//! The list is the subset of `muster serve`'s JSON API the page reads, with two more fields per
//! server: `ping_ms` (measured here) and `favourite`. There is no event stream: the page, told
//! so by a 404, reads the list again every `refresh_ms` (from `/api/v1/info`), with ETags.
//!
//! Safety: it binds loopback by default. Every request must name a loopback `Host` when the
//! listener is on loopback (a DNS-rebinding page cannot read it), and the routes that change
//! the profile need the random token of the printed URL (the page gets it as a `SameSite=Strict`
//! cookie, a script as `X-Muster-Token`) and, when an `Origin` is sent, this listener's own, so
//! another site the player visits cannot change their favourites.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::engine::Update;
use super::join;
use super::model::{Key, MasterState, Model, Row, ping_ms};
use super::profile::{self, Profile};

/// Largest page of the list (the API's own limit).
const MAX_PER_PAGE: usize = 500;
/// Longest search text accepted, in bytes.
const MAX_SEARCH: usize = 256;
/// Servers re-queried every refresh besides the favourites and the ones opened lately: the
/// most populated ones, which the page shows first.
const REFRESH_TOP: usize = 200;
/// How long a server whose details were read keeps being re-queried every refresh.
const DETAIL_KEEP: Duration = Duration::from_secs(60);
/// Engine updates applied under one lock.
const UPDATES_PER_LOCK: usize = 4096;

/// What the handlers share.
pub(crate) struct Web {
    inner: Mutex<Inner>,
    /// The token of the printed URL, needed by the routes that change the profile.
    token: String,
    /// The cookie the page keeps the token in (one per port: cookies ignore ports).
    cookie: String,
    /// Only loopback `Host`s are answered (the listener is on loopback).
    loopback_only: bool,
    refresh: Duration,
}

struct Inner {
    model: Model,
    profile: Profile,
    dir: Option<PathBuf>,
    /// Servers whose details the page read, and when.
    opened: HashMap<Key, Instant>,
    /// What the profile directory said, if anything went wrong.
    note: String,
}

impl Web {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Saves the favourites into the profile file (the filters stay the terminal's).
    fn save(&self) -> Result<(), String> {
        let mut g = self.lock();
        g.profile.favourites = g.model.favourites().clone();
        let Some(dir) = g.dir.clone() else {
            return Ok(());
        };
        profile::save(&dir, &g.profile)
            .map_err(|e| format!("cannot save the profile in {}: {e}", dir.display()))
    }
}

/// One server as the page reads it: the fields of `muster serve`'s list, and the ping.
#[derive(Debug, Serialize)]
struct ServerDto {
    address: String,
    address_is_game: bool,
    registered_address: String,
    query_address: Option<String>,
    game: String,
    game_name: String,
    protocol: &'static str,
    family: &'static str,
    query_protocol: Option<&'static str>,
    name: String,
    map: String,
    game_type: String,
    num_players: u32,
    max_players: u32,
    password: Option<bool>,
    lobby: Option<()>,
    first_seen: u64,
    last_heartbeat: u64,
    last_poll: Option<u64>,
    poll_failures: u32,
    sources: Vec<()>,
    /// Round trip measured from this machine, ms: tenths below 10 ms, whole above (`null`
    /// until it answers).
    ping_ms: Option<f64>,
    /// No answer for two rounds.
    down: bool,
    /// In the profile's favourites.
    favourite: bool,
    /// The game's join link, where it registers one.
    join_link: Option<String>,
    /// What to type in the game's console.
    join_command: String,
}

#[derive(Debug, Serialize)]
struct PlayerDto {
    name: String,
    score: Option<i64>,
    ping_ms: Option<u32>,
    team: Option<i32>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum RuleValue {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Serialize)]
struct DetailDto {
    #[serde(flatten)]
    summary: ServerDto,
    players: Vec<PlayerDto>,
    rules: BTreeMap<String, RuleValue>,
    rule_names: BTreeMap<String, &'static str>,
}

#[derive(Debug, Serialize)]
struct ListDto {
    last_event_id: u64,
    total: usize,
    page: usize,
    per_page: usize,
    servers: Vec<ServerDto>,
}

#[derive(Debug, Serialize)]
struct MasterDto {
    master: String,
    state: &'static str,
    servers: Option<usize>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct InfoDto {
    version: &'static str,
    faces: Vec<()>,
    ddnet_register_path: &'static str,
    ddnet_servers_json_path: &'static str,
    poller: bool,
    history: bool,
    locations: usize,
    /// This is `muster browse`, not a master.
    browse: bool,
    /// Where favourites are set (`POST`) and unset (`DELETE`): `{favourites}/{protocol}/{address}`.
    favourites: &'static str,
    /// How often the page reads the list again, ms.
    refresh_ms: u64,
    masters: Vec<MasterDto>,
    note: String,
}

#[derive(Debug, Serialize)]
struct ErrorDto {
    error: String,
}

fn error(status: StatusCode, text: impl Into<String>) -> Response {
    (status, axum::Json(ErrorDto { error: text.into() })).into_response()
}

fn game_of(row: &Row) -> String {
    row.game.clone().unwrap_or_else(|| row.key.1.to_owned())
}

fn summary(row: &Row, favourite: bool) -> ServerDto {
    let info = row.info.as_ref();
    let game = game_of(row);
    let joined = join::join(row.key.1, row.game.as_deref(), row.join_address());
    let (num_players, max_players) = row.counts().unwrap_or((0, 0));
    ServerDto {
        address: row.join_address().to_string(),
        address_is_game: true,
        registered_address: row.key.0.to_string(),
        query_address: Some(row.key.0.to_string()),
        game_name: muster_proto::games::display_name(&game)
            .map_or_else(|| game.clone(), str::to_owned),
        game,
        protocol: row.key.1,
        family: row.key.1,
        query_protocol: Some(row.key.1),
        name: row.name(),
        map: info.map(|i| i.map.clone()).unwrap_or_default(),
        game_type: String::new(),
        num_players,
        max_players,
        password: info.and_then(|i| i.password),
        lobby: None,
        first_seen: 0,
        last_heartbeat: 0,
        last_poll: row.last_seen_ms.map(|ms| ms / 1000),
        poll_failures: row.misses,
        sources: Vec::new(),
        ping_ms: info
            .and_then(|i| i.ping_us)
            .filter(|_| !row.down())
            .map(ping_ms),
        down: row.down(),
        favourite,
        join_link: joined.link,
        join_command: joined.command,
    }
}

fn detail(row: &Row, favourite: bool) -> DetailDto {
    let mut rules: BTreeMap<String, RuleValue> = BTreeMap::new();
    let (players, pairs) = row
        .info
        .as_ref()
        .map(|i| (i.players.as_slice(), i.rules.as_slice()))
        .unwrap_or_default();
    for (k, v) in pairs {
        match rules.get_mut(k) {
            None => {
                rules.insert(k.clone(), RuleValue::One(v.clone()));
            }
            Some(RuleValue::One(first)) => {
                let first = std::mem::take(first);
                rules.insert(k.clone(), RuleValue::Many(vec![first, v.clone()]));
            }
            Some(RuleValue::Many(all)) => all.push(v.clone()),
        }
    }
    DetailDto {
        summary: summary(row, favourite),
        players: players
            .iter()
            .map(|p| PlayerDto {
                name: p.name.clone(),
                score: p.score,
                ping_ms: p.ping_ms,
                team: None,
            })
            .collect(),
        rule_names: rules
            .keys()
            .filter_map(|k| muster_proto::display::known_property_name(k).map(|n| (k.clone(), n)))
            .collect(),
        rules,
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListParams {
    page: Option<String>,
    per_page: Option<String>,
    q: Option<String>,
    game: Option<String>,
}

/// A number from `lo` to `hi`, `default` when absent.
fn number(v: Option<&str>, lo: usize, hi: usize, default: usize) -> Option<usize> {
    match v {
        None | Some("") => Some(default),
        Some(s) => s.parse().ok().filter(|n| (lo..=hi).contains(n)),
    }
}

fn matches(row: &Row, needle: &str) -> bool {
    if row.name().to_lowercase().contains(needle) {
        return true;
    }
    row.info.as_ref().is_some_and(|i| {
        i.map.to_lowercase().contains(needle)
            || i.players
                .iter()
                .any(|p| p.name.to_lowercase().contains(needle))
    })
}

async fn list(State(web): State<Arc<Web>>, Query(p): Query<ListParams>) -> Response {
    let Some(page) = number(p.page.as_deref(), 1, usize::MAX, 1) else {
        return error(StatusCode::BAD_REQUEST, "page must be a number from 1");
    };
    let Some(per_page) = number(p.per_page.as_deref(), 1, MAX_PER_PAGE, 100) else {
        return error(
            StatusCode::BAD_REQUEST,
            "per_page must be a number from 1 to 500",
        );
    };
    let needle = p.q.unwrap_or_default().trim().to_lowercase();
    if needle.len() > MAX_SEARCH {
        return error(StatusCode::BAD_REQUEST, "search text too long");
    }
    let game = p.game.filter(|g| !g.is_empty());
    let g = web.lock();
    let rows: Vec<&Row> = g
        .model
        .view()
        .into_iter()
        .filter(|r| needle.is_empty() || matches(r, &needle))
        .filter(|r| {
            game.as_ref()
                .is_none_or(|want| game_of(r).eq_ignore_ascii_case(want))
        })
        .collect();
    let total = rows.len();
    let servers = rows
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .map(|r| summary(r, g.model.is_favourite(&r.key)))
        .collect();
    // Serialised without the lock: the engine's updates wait only for the copy.
    drop(g);
    axum::Json(ListDto {
        last_event_id: 0,
        total,
        page,
        per_page,
        servers,
    })
    .into_response()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DetailParams {
    game: Option<String>,
}

/// The row the page means by `address` (the join or the queried address) and `game`.
fn find<'a>(model: &'a Model, address: &str, game: Option<&str>) -> Option<&'a Row> {
    let addr: SocketAddr = address.parse().ok()?;
    model.view().into_iter().find(|r| {
        (r.key.0 == addr || r.join_address() == addr)
            && game.is_none_or(|g| game_of(r).eq_ignore_ascii_case(g))
    })
}

async fn server(
    State(web): State<Arc<Web>>,
    Path(address): Path<String>,
    Query(p): Query<DetailParams>,
) -> Response {
    let game = p.game.filter(|g| !g.is_empty());
    let mut g = web.lock();
    let Some(row) = find(&g.model, &address, game.as_deref()) else {
        return error(StatusCode::NOT_FOUND, "no such server");
    };
    let body = detail(row, g.model.is_favourite(&row.key));
    let key = row.key;
    g.opened.insert(key, Instant::now());
    drop(g);
    axum::Json(body).into_response()
}

async fn history() -> Response {
    axum::Json(Vec::<()>::new()).into_response()
}

async fn info(State(web): State<Arc<Web>>) -> Response {
    let g = web.lock();
    let masters = g
        .model
        .masters()
        .map(|(label, state)| {
            let (state, servers, error) = match state {
                MasterState::Asking => ("asking", None, None),
                MasterState::Listed(n) => ("listed", Some(*n), None),
                MasterState::Failed(e) => ("failed", None, Some(e.clone())),
            };
            MasterDto {
                master: label.clone(),
                state,
                servers,
                error,
            }
        })
        .collect();
    axum::Json(InfoDto {
        version: env!("CARGO_PKG_VERSION"),
        faces: Vec::new(),
        ddnet_register_path: "",
        ddnet_servers_json_path: "",
        poller: true,
        history: false,
        locations: 0,
        browse: true,
        favourites: "/api/v1/favourites",
        refresh_ms: u64::try_from(web.refresh.as_millis()).unwrap_or(u64::MAX),
        masters,
        note: g.note.clone(),
    })
    .into_response()
}

async fn favourite_set(
    State(web): State<Arc<Web>>,
    Path((protocol, address)): Path<(String, String)>,
) -> Response {
    favourite(&web, &protocol, &address, true)
}

async fn favourite_unset(
    State(web): State<Arc<Web>>,
    Path((protocol, address)): Path<(String, String)>,
) -> Response {
    favourite(&web, &protocol, &address, false)
}

fn favourite(web: &Web, protocol: &str, address: &str, on: bool) -> Response {
    let Ok(addr) = address.parse::<SocketAddr>() else {
        return error(StatusCode::BAD_REQUEST, "address must be ip:port");
    };
    {
        let mut g = web.lock();
        let Some(key) = g
            .model
            .view()
            .into_iter()
            .map(|r| r.key)
            .find(|k| k.0 == addr && k.1 == protocol)
        else {
            return error(StatusCode::NOT_FOUND, "no such server");
        };
        if g.model.is_favourite(&key) != on {
            g.model.toggle_favourite(&key);
        }
    }
    match web.save() {
        Ok(()) => axum::Json(serde_json::json!({ "favourite": on })).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn index(
    State(web): State<Arc<Web>>,
    q: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Response {
    // The page's own state lives in the query too: a query that does not parse still gets
    // the page, only no cookie.
    let q = q.map(|Query(q)| q).unwrap_or_default();
    let mut res = (
        [(header::CACHE_CONTROL, "no-cache")],
        Html(muster_master::web::INDEX_HTML),
    )
        .into_response();
    // The printed URL's token becomes a cookie, so the page's own requests carry it.
    if q.get("token").is_some_and(|t| same(t, &web.token))
        && let Ok(v) = HeaderValue::from_str(&format!(
            "{}={}; Path=/; SameSite=Strict; HttpOnly",
            web.cookie, web.token
        ))
    {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        muster_master::http::FAVICON_SVG,
    )
        .into_response()
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Whether `host` (a `Host` header's value) names this machine's loopback.
fn loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn token_of(headers: &HeaderMap, cookie: &str) -> Option<String> {
    if let Some(t) = headers.get("x-muster-token").and_then(|v| v.to_str().ok()) {
        return Some(t.to_owned());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == cookie)
        .map(|(_, v)| v.to_owned())
}

/// Why a request is refused, if it is: a foreign `Host` on a loopback listener; for a request
/// that changes something, a missing or wrong token or another site's `Origin`.
fn refusal(web: &Web, method: &axum::http::Method, headers: &HeaderMap) -> Option<&'static str> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if web.loopback_only && !host.is_some_and(loopback_host) {
        return Some("this page answers only on loopback addresses");
    }
    if method == axum::http::Method::GET || method == axum::http::Method::HEAD {
        return None;
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = host.map(|h| format!("http://{h}"));
        if origin.to_str().ok() != own.as_deref() {
            return Some("requests from other sites are refused");
        }
    }
    match token_of(headers, &web.cookie) {
        Some(t) if same(&t, &web.token) => None,
        _ => Some("open the address muster browse printed: this needs its token"),
    }
}

async fn guard(State(web): State<Arc<Web>>, req: Request, next: Next) -> Response {
    if let Some(why) = refusal(&web, req.method(), req.headers()) {
        return error(StatusCode::FORBIDDEN, why);
    }
    next.run(req).await
}

fn router(web: Arc<Web>) -> Router {
    let app = Router::new()
        .route("/", get(index))
        .route("/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
        .route("/api/v1/info", get(info))
        .route("/api/v1/servers", get(list))
        .route("/api/v1/servers/{address}", get(server))
        .route("/api/v1/servers/{address}/history", get(history))
        .route(
            "/api/v1/favourites/{protocol}/{address}",
            post(favourite_set).delete(favourite_unset),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route") })
        .layer(axum::middleware::from_fn(muster_master::web::etag))
        .layer(axum::middleware::from_fn_with_state(web.clone(), guard))
        .with_state(web);
    muster_master::http::limited(app, muster_master::runtime::http::HttpLimits::default())
}

/// Applies the engine's updates and tells the engine what to query again: the favourites,
/// the servers opened lately and the most populated ones.
async fn feed(
    web: Arc<Web>,
    mut rx: mpsc::Receiver<Update>,
    on_screen: watch::Sender<Vec<Key>>,
    refresh: Duration,
) {
    let mut tick = tokio::time::interval(refresh);
    let mut batch = Vec::with_capacity(256);
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, UPDATES_PER_LOCK) => {
                if n == 0 {
                    return;
                }
                let mut g = web.lock();
                for u in batch.drain(..) {
                    match u {
                        Update::MasterAsking(label) => g.model.master_asking(&label),
                        Update::MasterDone(label, r) => g.model.master_done(&label, r),
                        Update::Listed(rows) => rows.into_iter().for_each(|l| g.model.listed(l)),
                        Update::Answered(key, s, now) => g.model.answered(key, *s, now),
                        Update::Failed(key) => g.model.failed(key),
                    }
                }
            }
            _ = tick.tick() => {
                let keys = {
                    let mut g = web.lock();
                    let now = Instant::now();
                    g.opened.retain(|_, at| now.duration_since(*at) < DETAIL_KEEP);
                    let view = g.model.view();
                    let mut keys: Vec<Key> = view
                        .iter()
                        .filter(|r| g.model.is_favourite(&r.key))
                        .map(|r| r.key)
                        .collect();
                    keys.extend(g.opened.keys().copied());
                    keys.extend(view.iter().take(REFRESH_TOP).map(|r| r.key));
                    keys
                };
                on_screen.send_replace(keys);
            }
        }
    }
}

/// What page mode needs from the command line.
pub(crate) struct Setup {
    pub model: Model,
    pub profile: Profile,
    pub dir: Option<PathBuf>,
    pub note: String,
    pub listen: SocketAddr,
    pub refresh: Duration,
}

/// Serves the page until Ctrl-C or SIGTERM; the profile is saved on the way out.
/// `rx`: the engine's updates; `on_screen`: what it re-queries every refresh.
pub(crate) async fn run(
    setup: Setup,
    rx: mpsc::Receiver<Update>,
    on_screen: watch::Sender<Vec<Key>>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let listener = tokio::net::TcpListener::bind(setup.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", setup.listen))?;
    let bound = listener.local_addr()?;
    let token = format!("{:032x}", rand::random::<u128>());
    let web = Arc::new(Web {
        inner: Mutex::new(Inner {
            model: setup.model,
            profile: setup.profile,
            dir: setup.dir,
            opened: HashMap::new(),
            note: setup.note,
        }),
        cookie: format!("muster_browse_{}", bound.port()),
        token,
        loopback_only: bound.ip().is_loopback(),
        refresh: setup.refresh,
    });
    {
        let mut out = crate::stdout::stdout();
        writeln!(out, "http://{bound}/?token={}", web.token)?;
        out.flush()?;
    }
    let feeder = tokio::spawn(feed(web.clone(), rx, on_screen, setup.refresh));
    let served = axum::serve(listener, router(web.clone()))
        .with_graceful_shutdown(crate::signal::shutdown())
        .await;
    feeder.abort();
    if let Err(e) = web.save() {
        tracing::warn!("{e}");
    }
    served.map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_pass() {
        for ok in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.9.0.1",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:80",
            "10.0.0.1:80",
            "[2001:db8::1]:80",
            "",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn the_token_is_read_from_the_header_or_this_port_s_cookie() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; muster_browse_80=xyz"),
        );
        assert_eq!(token_of(&h, "muster_browse_80").as_deref(), Some("xyz"));
        assert_eq!(token_of(&h, "muster_browse_81"), None);
        h.insert("x-muster-token", HeaderValue::from_static("abc"));
        assert_eq!(token_of(&h, "muster_browse_81").as_deref(), Some("abc"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }

    #[test]
    fn the_list_gives_the_ping_to_the_tenth_below_10_ms() {
        use crate::browse::model::Summary;
        let mut model = Model::default();
        let (near, far) = (
            (SocketAddr::from(([127, 0, 0, 1], 1)), "quake3"),
            (SocketAddr::from(([127, 0, 0, 1], 2)), "quake3"),
        );
        for (key, us) in [(near, 4_240), (far, 21_700)] {
            let summary = Summary {
                ping_us: Some(us),
                ..Summary::default()
            };
            model.answered(key, summary, 10);
        }
        let json = |key: &Key| {
            let row = model.row(key).expect("row");
            serde_json::to_value(summary(row, false)).expect("json")["ping_ms"].clone()
        };
        assert_eq!(json(&near), serde_json::json!(4.2));
        assert_eq!(json(&far), serde_json::json!(22.0));
    }
}
