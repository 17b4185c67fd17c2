//! The HTTP face: health, metrics and the JSON API, on axum.
//!
//! ```text
//! GET /healthz                      {"status":"ok"|"degraded","records":N,"listed":N,…}
//! GET /metrics                      Prometheus text format 0.0.4
//! GET /api/v1/servers               ?protocol= &game= &non_empty= &not_full= &password= &q=
//!                                   &sort= &order=asc|desc &page= &per_page= (≤ 500)
//! GET /api/v1/servers/{address}     one listed server; ?game= picks among several
//! ```
//!
//! Every route reads the current [`crate::views::Snapshot`]: no request takes a lock a face
//! writes under, so sorting and serialising never stall a registration.
//!
//! Limits ([`limited`], applied to the whole app with every face's routes): request bodies over
//! `limits.http_body_limit` are refused (413), a request not answered within
//! `limits.http_request_timeout` gets 408. The server ([`crate::runtime::http`]) adds the
//! header-read deadline and the connection caps. Query strings are bounded by hyper's header
//! limits.
//!
//! Does not: serve the DDNet register, `servers.json`, the UT2003 text list or the web page;
//! those are added to [`router`] by their faces. Only `api::dto` types are serialized here.

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use tower_http::timeout::TimeoutLayer;

use crate::MasterHandle;
use crate::api::dto::{ErrorDto, HealthDto, ServerDetail, ServerListDto, ServerSummary};
use crate::api::list::{ListQuery, SortKey};
use crate::registry::GameAddr;
use crate::runtime::http::HttpLimits;

/// Longest `q` (text search) accepted, in bytes.
pub const MAX_SEARCH_LEN: usize = 256;

/// The API routes over `handle`.
pub fn router(handle: MasterHandle) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/servers", get(list_servers))
        .route("/api/v1/servers/{address}", get(server_detail))
        .with_state(handle)
}

/// `app` with the body limit and the whole-request deadline on every route.
pub fn limited(app: Router, limits: HttpLimits) -> Router {
    app.layer(DefaultBodyLimit::max(limits.body_limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
}

fn bad_request(error: &'static str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(ErrorDto { error })).into_response()
}

async fn healthz(State(h): State<MasterHandle>) -> Response {
    let view = h.snapshot();
    let dto = HealthDto::of(&view, h.store_error());
    let status = if dto.status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(dto)).into_response()
}

async fn metrics(State(h): State<MasterHandle>) -> Response {
    let listed = h.snapshot().per_face();
    let body = h.metrics().render(&listed);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// The raw query string of `GET /api/v1/servers`; [`ListParams::to_query`] validates it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListParams {
    protocol: Option<String>,
    game: Option<String>,
    non_empty: Option<String>,
    not_full: Option<String>,
    password: Option<String>,
    q: Option<String>,
    sort: Option<String>,
    order: Option<String>,
    page: Option<String>,
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

fn number(v: Option<&str>, what: &'static str) -> Result<usize, &'static str> {
    match v {
        None | Some("") => Ok(0),
        Some(s) => s.parse().map_err(|_| what),
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
            text: q,
            sort,
            descending,
            page: number(self.page.as_deref(), "page must be a number")?,
            per_page: number(self.per_page.as_deref(), "per_page must be a number")?,
        })
    }
}

async fn list_servers(
    State(h): State<MasterHandle>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    h.metrics().count_list_request("http");
    let Ok(Query(params)) = params else {
        return bad_request("malformed query string");
    };
    let q = match params.to_query() {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };
    let view = h.snapshot();
    let page = crate::api::list::list(&view, &q);
    let dto = ServerListDto {
        total: page.total,
        page: page.page,
        per_page: page.per_page,
        servers: page
            .records
            .iter()
            .map(|r| ServerSummary::from_record(r))
            .collect(),
    };
    axum::Json(dto).into_response()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DetailParams {
    game: Option<String>,
}

async fn server_detail(
    State(h): State<MasterHandle>,
    Path(address): Path<String>,
    params: Result<Query<DetailParams>, QueryRejection>,
) -> Response {
    let Some(addr) = GameAddr::parse(&address) else {
        return bad_request("address must be host:port");
    };
    let Ok(Query(DetailParams { game })) = params else {
        return bad_request("malformed query string");
    };
    let view = h.snapshot();
    let found = view
        .find_by_addr(&addr)
        .into_iter()
        .find(|rec| {
            game.as_deref()
                .is_none_or(|g| g.eq_ignore_ascii_case(&rec.key.game))
        })
        .map(|r| ServerDetail::from_record(r));
    match found {
        Some(d) => axum::Json(d).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorDto {
                error: "no such server",
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
    fn list_params_reject() {
        assert_eq!(params(&[("sort", "bogus")]), Err("unknown sort column"));
        assert_eq!(params(&[("order", "up")]), Err("order must be asc or desc"));
        assert_eq!(params(&[("page", "-1")]), Err("page must be a number"));
        assert_eq!(
            params(&[("non_empty", "maybe")]),
            Err("non_empty must be a boolean")
        );
        let long = "x".repeat(MAX_SEARCH_LEN + 1);
        assert_eq!(params(&[("q", &long)]), Err("search text too long"));
    }
}
