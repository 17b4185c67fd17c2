//! The HTTP face: health, metrics and the JSON API, on axum.
//!
//! ```text
//! GET /healthz                      {"status":"ok"|"degraded","records":N,"store_error":…}
//! GET /metrics                      Prometheus text format 0.0.4
//! GET /api/v1/servers               ?protocol= &game= &non_empty= &not_full= &password= &lobby=
//!                                   &region= &q= &sort= &order=asc|desc &page= &per_page= (1–500)
//!                                   (any other parameter: 400 naming it, as on every route
//!                                   with a query: [`check_params`])
//! GET /api/v1/servers/{address}     one listed server (game or registered address); ?game=
//! GET /api/v1/events                what changes, as Server-Sent Events ([`crate::api::sse`])
//! GET /api/v1/info                  the bound faces and what runs ([`info_router`])
//! GET /api/v1/openapi.json          the OpenAPI 3.1 document of these routes
//! GET /api/docs                     a page that shows it
//! GET /favicon.svg, /favicon.ico    the pages' icon (SVG)
//! anything else                     404 {"error": "no such route"}
//! ```
//!
//! Every route reads the current [`muster_core::views::Snapshot`]: no request takes a lock a face
//! writes under, so sorting and serialising never stall a registration.
//!
//! Limits ([`limited`], applied to the whole app with every face's routes): request bodies over
//! `limits.http_body_limit` are refused (413), a request not answered within
//! `limits.http_request_timeout` gets 408. The server ([`muster_faces::runtime::http`]) adds the
//! header-read deadline and the connection caps. Query strings are bounded by hyper's header
//! limits.
//!
//! Does not: serve the DDNet register, `servers.json`, the UT2003 text list or the web page;
//! those are added to [`router`] by their faces. Only `api::dto` types are serialized here.

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use tower_http::timeout::TimeoutLayer;

use crate::api::dto::{ErrorDto, HealthDto, InfoDto, ServerDetail, ServerListDto, ServerSummary};
use muster_core::MasterHandle;
use muster_core::registry::GameAddr;
use muster_core::views::list::{ListQuery, SortKey};
use muster_faces::runtime::http::HttpLimits;

/// Longest `q` (text search) accepted, in bytes.
pub const MAX_SEARCH_LEN: usize = 256;

/// The API routes over `handle`.
pub fn router(handle: MasterHandle) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/servers", get(list_servers))
        .route("/api/v1/servers/{address}", get(server_detail))
        .route("/api/v1/events", get(crate::api::sse::events))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/docs", get(docs))
        .route("/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
        .with_state(handle)
}

/// `GET /api/v1/info` answering `info` (what the daemon bound and runs).
pub fn info_router(info: InfoDto) -> Router {
    Router::new()
        .route("/api/v1/info", get(info_route))
        .with_state(std::sync::Arc::new(info))
}

/// What this daemon serves: its bound faces, the DDNet paths, whether the poller, history and
/// locations are on. The browser page reads it to tell, on an empty list, how game servers
/// register here.
#[utoipa::path(get, path = "/api/v1/info", responses(
    (status = 200, description = "The daemon's faces and features", body = InfoDto)
))]
async fn info_route(State(info): State<std::sync::Arc<InfoDto>>) -> Response {
    axum::Json(&*info).into_response()
}

/// The answer to a path no route serves: 404 with a JSON body.
pub async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(ErrorDto {
            error: "no such route".into(),
        }),
    )
        .into_response()
}

/// The OpenAPI document of the JSON API, generated from the handlers and the DTOs.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    info(
        title = "Muster master API",
        description = "Every server listed by this master, whatever face registered it. \
            `address` is where players connect; see the server object for the others."
    ),
    paths(
        healthz,
        metrics,
        list_servers,
        server_detail,
        crate::api::sse::events,
        crate::api::history::server_history,
        crate::api::history::games,
        crate::api::history::game_history,
        crate::api::badge::badge,
        info_route
    ),
    components(schemas(
        ServerListDto,
        ServerSummary,
        ServerDetail,
        ErrorDto,
        HealthDto,
        crate::api::dto::PlayerDto,
        crate::api::dto::RuleValue,
        crate::api::dto::LobbyDto,
        InfoDto,
        crate::api::dto::FaceDto,
        crate::web::HistoryPointDto,
        crate::api::history::ServerSeriesDto,
        crate::api::history::ServerPointDto,
        crate::api::history::GameDto,
        crate::api::history::GameSeriesDto,
        crate::api::history::GamePointDto
    ))
)]
pub struct ApiDoc;

/// The OpenAPI document as JSON.
#[must_use]
pub fn openapi_json() -> String {
    use utoipa::OpenApi as _;
    ApiDoc::openapi().to_json().unwrap_or_default()
}

async fn openapi() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let body = DOC.get_or_init(openapi_json).clone();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The page that renders the OpenAPI document.
pub const DOCS_HTML: &str = include_str!("web/api-docs.html");

/// The icon of the browser page and the API page.
pub const FAVICON_SVG: &str = include_str!("web/favicon.svg");

async fn favicon() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        FAVICON_SVG,
    )
        .into_response()
}

async fn docs() -> Response {
    (
        [(header::CACHE_CONTROL, "no-cache")],
        axum::response::Html(DOCS_HTML),
    )
        .into_response()
}

pub use muster_faces::runtime::http::Precompressed;

fn not_precompressed(
    _: StatusCode,
    _: axum::http::Version,
    _: &axum::http::HeaderMap,
    extensions: &axum::http::Extensions,
) -> bool {
    extensions.get::<Precompressed>().is_none()
}

/// `app` with response compression and CORS as `config` asks.
pub fn shared_layers(app: Router, config: &crate::HttpConfig) -> Router {
    use tower_http::compression::predicate::{DefaultPredicate, Predicate as _};
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    let app = if config.compression {
        app.layer(
            tower_http::compression::CompressionLayer::new()
                .gzip(true)
                .br(true)
                .compress_when(DefaultPredicate::new().and(not_precompressed)),
        )
    } else {
        app
    };
    if config.cors_origins.is_empty() {
        return app;
    }
    let origin = if config.cors_origins.iter().any(|o| o == "*") {
        AllowOrigin::from(Any)
    } else {
        AllowOrigin::list(
            config
                .cors_origins
                .iter()
                .filter_map(|o| axum::http::HeaderValue::from_str(o).ok()),
        )
    };
    app.layer(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([axum::http::Method::GET, axum::http::Method::HEAD]),
    )
}

/// `app` with the body limit and the whole-request deadline on every route.
pub fn limited(app: Router, limits: HttpLimits) -> Router {
    app.layer(DefaultBodyLimit::max(limits.body_limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
}

fn bad_request(error: impl Into<std::borrow::Cow<'static, str>>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(ErrorDto {
            error: error.into(),
        }),
    )
        .into_response()
}

pub use crate::params::{LIST_PARAMS, SERVER_PARAMS, check_params};

/// Health: `ok`, or `degraded` (503) while the store fails.
#[utoipa::path(get, path = "/healthz", responses(
    (status = 200, description = "Serving, the store works", body = HealthDto),
    (status = 503, description = "Serving from memory; the store fails", body = HealthDto)
))]
async fn healthz(State(h): State<MasterHandle>) -> Response {
    let view = h.snapshot();
    let dto = HealthDto::of(&view, h.store_error()).with_upstreams(h.metrics().upstreams());
    let status = if dto.status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(dto)).into_response()
}

/// Counters and gauges in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", responses(
    (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain")
))]
async fn metrics(State(h): State<MasterHandle>) -> Response {
    let body = crate::metrics::exposition(&h);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// The query string of `GET /api/v1/servers`, as sent; [`ListParams::to_query`] validates
/// it, so a bad value is answered 400 with what was wrong.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// Only servers of this face (`gameagent`, `gamespy`, `teeworlds07`, `teeworlds06`,
    /// `ddnet`, `mgmt`), family (`teeworlds`) or query protocol (`gamespy1`, `unreal2`).
    protocol: Option<String>,
    /// Only this game: its key as `game` spells it (`ut`, `serioussamse`, `ddnet`,
    /// `teeworlds`, `bomberman`, …), case-insensitive.
    game: Option<String>,
    /// Only servers with players (`true`/`false`, `1`/`0`). The web page's URL spells it
    /// the same way.
    #[param(value_type = Option<bool>)]
    non_empty: Option<String>,
    /// Only servers with a free slot.
    #[param(value_type = Option<bool>)]
    not_full: Option<String>,
    /// Only servers that do (or do not) need a password.
    #[param(value_type = Option<bool>)]
    password: Option<String>,
    /// Only management servers whose lobby is `open` or `closed`.
    lobby: Option<String>,
    /// Only servers in this region: a continent code (`eu`) or a continent and country
    /// (`eu:de`), as `location` spells it. Needs a locations table (config
    /// `ddnet.locations`); a server without a `location` never matches.
    region: Option<String>,
    /// A case-insensitive substring of the server name or a player name (at most 256 bytes).
    q: Option<String>,
    /// Sort column: `order` (first registration, the default), `name`, `map`, `game`,
    /// `game_type`, `players`, `max_players`, `address`, `protocol`, `last_seen`.
    sort: Option<String>,
    /// `asc` (default) or `desc`.
    order: Option<String>,
    /// Page, from 1.
    #[param(value_type = Option<u32>, minimum = 1)]
    page: Option<String>,
    /// Servers per page, 1 to 500 (default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    per_page: Option<String>,
}

fn flag(v: Option<&str>, what: &'static str) -> Result<Option<bool>, &'static str> {
    match v {
        None | Some("") => Ok(None),
        Some("1" | "true" | "yes") => Ok(Some(true)),
        Some("0" | "false" | "no") => Ok(Some(false)),
        Some(_) => Err(what),
    }
}

/// A number from `lo` to `hi`, or 0 when absent.
fn number(
    v: Option<&str>,
    (lo, hi): (usize, usize),
    what: &'static str,
) -> Result<usize, &'static str> {
    match v {
        None | Some("") => Ok(0),
        Some(s) => match s.parse() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n),
            _ => Err(what),
        },
    }
}

impl ListParams {
    fn to_query(&self) -> Result<ListQuery, &'static str> {
        let q = self.q.clone().filter(|q| !q.is_empty());
        if q.as_ref().is_some_and(|q| q.len() > MAX_SEARCH_LEN) {
            return Err("search text too long");
        }
        let sort = match self.sort.as_deref() {
            None | Some("") => SortKey::Order,
            Some(s) => SortKey::from_name(s).ok_or("unknown sort column")?,
        };
        let descending = match self.order.as_deref() {
            None | Some("" | "asc") => false,
            Some("desc") => true,
            Some(_) => return Err("order must be asc or desc"),
        };
        Ok(ListQuery {
            game: self.game.clone().filter(|g| !g.is_empty()),
            protocol: self.protocol.clone().filter(|p| !p.is_empty()),
            non_empty: flag(self.non_empty.as_deref(), "non_empty must be a boolean")?
                .unwrap_or(false),
            not_full: flag(self.not_full.as_deref(), "not_full must be a boolean")?
                .unwrap_or(false),
            password: flag(self.password.as_deref(), "password must be a boolean")?,
            lobby: match self.lobby.as_deref() {
                None | Some("") => None,
                Some("open") => Some(true),
                Some("closed") => Some(false),
                Some(_) => return Err("lobby must be open or closed"),
            },
            region: match self.region.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(r)
                    if r.len() <= muster_core::locations::MAX_LOCATION_LEN
                        && r.bytes().all(|b| {
                            b.is_ascii_alphanumeric() || b == b':' || b == b'-' || b == b'_'
                        }) =>
                {
                    Some(r.to_ascii_lowercase())
                }
                Some(_) => return Err("region must be a location such as eu or eu:de"),
            },
            text: q,
            sort,
            descending,
            page: number(
                self.page.as_deref(),
                (1, usize::MAX),
                "page must be a number from 1",
            )?,
            per_page: number(
                self.per_page.as_deref(),
                (1, muster_core::views::list::MAX_PER_PAGE),
                "per_page must be a number from 1 to 500",
            )?,
        })
    }
}

/// One page of the listed servers, filtered and sorted.
#[utoipa::path(get, path = "/api/v1/servers", params(ListParams), responses(
    (status = 200, description = "One page", body = ServerListDto),
    (status = 400, description = "A parameter is not valid", body = ErrorDto),
    (status = 429, description = "Too many list requests from this source")
))]
async fn list_servers(
    State(h): State<MasterHandle>,
    RawQuery(raw): RawQuery,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    h.metrics().count_list_request("http");
    if let Err(e) = check_params(raw.as_deref(), LIST_PARAMS) {
        return bad_request(e);
    }
    let Ok(Query(params)) = params else {
        return bad_request("malformed query string");
    };
    let q = match params.to_query() {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };
    let view = h.snapshot();
    // Filtering, a first sort of a column and serialising are CPU work: off the reactor, so
    // that no face waits for a listing.
    let body = muster_core::bulk::spawn(move || {
        let page = muster_core::views::list::list(&view, &q);
        let dto = ServerListDto {
            last_event_id: view.last_event_id(),
            total: page.total,
            page: page.page,
            per_page: page.per_page,
            servers: page
                .records
                .iter()
                .map(|r| ServerSummary::from_record(r))
                .collect(),
        };
        serde_json::to_vec(&dto)
    })
    .await;
    match body {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default)]
#[into_params(parameter_in = Query)]
struct DetailParams {
    /// The game, when several games are listed at one address.
    game: Option<String>,
}

/// One listed server with its players and rules.
#[utoipa::path(get, path = "/api/v1/servers/{address}",
    params(("address" = String, Path, description = "The game address or the registered address, `host:port` (`[v6]:port`)"), DetailParams),
    responses(
        (status = 200, description = "The server", body = ServerDetail),
        (status = 400, description = "Not an address", body = ErrorDto),
        (status = 404, description = "No listed server there", body = ErrorDto)
    ))]
async fn server_detail(
    State(h): State<MasterHandle>,
    Path(address): Path<String>,
    RawQuery(raw): RawQuery,
    params: Result<Query<DetailParams>, QueryRejection>,
) -> Response {
    if let Err(e) = check_params(raw.as_deref(), SERVER_PARAMS) {
        return bad_request(e);
    }
    let Some(addr) = GameAddr::parse(&address) else {
        return bad_request("address must be host:port");
    };
    let Ok(Query(DetailParams { game })) = params else {
        return bad_request("malformed query string");
    };
    let view = h.snapshot();
    // The address index is built once per snapshot: off the reactor.
    let found = muster_core::bulk::spawn(move || {
        view.find_by_addr(&addr)
            .into_iter()
            .find(|rec| {
                game.as_deref()
                    .is_none_or(|g| g.eq_ignore_ascii_case(&rec.key.game))
            })
            .map(|r| ServerDetail::from_record(r))
    })
    .await
    .ok()
    .flatten();
    match found {
        Some(d) => axum::Json(d).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorDto {
                error: "no such server".into(),
            }),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Result<ListQuery, &'static str> {
        let s: String = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let p: ListParams = serde_urlencoded_parse(&s);
        p.to_query()
    }

    fn serde_urlencoded_parse(s: &str) -> ListParams {
        let uri: axum::http::Uri = format!("/x?{s}").parse().unwrap();
        Query::<ListParams>::try_from_uri(&uri).unwrap().0
    }

    #[test]
    fn list_params_parse() {
        let q = params(&[
            ("game", "ut2"),
            ("non_empty", "1"),
            ("password", "false"),
            ("sort", "players"),
            ("order", "desc"),
            ("page", "2"),
            ("per_page", "10"),
            ("q", "abc"),
        ])
        .unwrap();
        assert_eq!(q.game.as_deref(), Some("ut2"));
        assert!(q.non_empty);
        assert!(!q.not_full);
        assert_eq!(q.password, Some(false));
        assert_eq!(q.sort, SortKey::Players);
        assert!(q.descending);
        assert_eq!((q.page, q.per_page), (2, 10));
        assert_eq!(q.text.as_deref(), Some("abc"));
        assert_eq!(params(&[]).unwrap(), ListQuery::default());
    }

    #[test]
    fn unknown_params_are_named() {
        assert_eq!(check_params(None, LIST_PARAMS), Ok(()));
        assert_eq!(check_params(Some(""), LIST_PARAMS), Ok(()));
        assert_eq!(
            check_params(Some("non_empty=1&game=ut&q=a%20b"), LIST_PARAMS),
            Ok(())
        );
        let e = check_params(Some("nonempty=1&game=ut&nonempty=0"), LIST_PARAMS).unwrap_err();
        assert!(
            e.starts_with(
                "unknown query parameter \"nonempty\"; this route takes protocol, game, non_empty,"
            ),
            "{e}"
        );
        let many = "a=1&b=1&c=1&d=1&e=1&f=1&g=1";
        let e = check_params(Some(many), SERVER_PARAMS).unwrap_err();
        assert!(
            e.starts_with("unknown query parameters \"a\", \"b\", \"c\", \"d\", \"e\" and 2 more"),
            "{e}"
        );
        let long = format!("{}=1", "k".repeat(500));
        let e = check_params(Some(&long), SERVER_PARAMS).unwrap_err();
        assert!(e.len() < 200, "{e}");
        // A percent-encoded name is compared decoded.
        assert_eq!(check_params(Some("g%61me=ut"), SERVER_PARAMS), Ok(()));
    }

    #[test]
    fn list_params_reject() {
        assert_eq!(params(&[("sort", "bogus")]), Err("unknown sort column"));
        assert_eq!(params(&[("order", "up")]), Err("order must be asc or desc"));
        assert_eq!(
            params(&[("page", "-1")]),
            Err("page must be a number from 1")
        );
        assert_eq!(
            params(&[("per_page", "0")]),
            Err("per_page must be a number from 1 to 500")
        );
        assert_eq!(
            params(&[("per_page", "501")]),
            Err("per_page must be a number from 1 to 500")
        );
        assert_eq!(
            params(&[("lobby", "ajar")]),
            Err("lobby must be open or closed")
        );
        assert_eq!(params(&[("lobby", "open")]).unwrap().lobby, Some(true));
        assert_eq!(
            params(&[("region", "EU:de")]).unwrap().region.as_deref(),
            Some("eu:de")
        );
        assert_eq!(
            params(&[("region", "europe/west")]),
            Err("region must be a location such as eu or eu:de")
        );
        assert_eq!(
            params(&[("non_empty", "maybe")]),
            Err("non_empty must be a boolean")
        );
        let long = "x".repeat(MAX_SEARCH_LEN + 1);
        assert_eq!(params(&[("q", &long)]), Err("search text too long"));
    }
}
