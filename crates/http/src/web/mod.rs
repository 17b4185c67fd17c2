//! The server browser: the web page at `/`, the history API and ETags on the JSON API.
//!
//! ```text
//! GET /                                    the page (one HTML file, vanilla JS/CSS, embedded)
//! GET /api/v1/servers/{address}/history    [{at, num_players, max_players, ok}], last 24 h
//!                                          (the retention), oldest first; ?game= picks one,
//!                                          and is needed where several games are listed (400)
//! ```
//!
//! [`etag`] is a middleware for every `GET` answered `200`: it sends an `ETag` (a hash of the
//! body) and answers `304 Not Modified` without a body when `If-None-Match` carries it, so the
//! page, reading the list now and then while its event stream is refused, transfers only the
//! pages that changed.
//!
//! The page fetches every listed server (all pages of `/api/v1/servers`), then follows the
//! live events of `/api/v1/events` from the list's `last_event_id`, adding, changing and
//! removing rows in place; it reads the whole list again only on `resync`, or now and then
//! (with `If-None-Match`) while the event stream is refused. It filters and sorts in the
//! browser, asks the API for the text search (which also matches player names), and renders
//! only the rows in view, so 10,000 servers stay fast. Filters, sort, search and the open
//! server live in the URL; favourites in the browser's `localStorage`; `/api/v1/info` tells
//! an empty page how servers register. `docs/browser.md` describes it.

pub mod history;

use std::hash::{BuildHasher as _, Hasher as _};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

pub use history::History;

/// The page, embedded in the binary.
pub const INDEX_HTML: &str = include_str!("index.html");

/// Largest response body the [`etag`] middleware hashes; bigger bodies pass without an ETag.
pub const MAX_ETAG_BODY: usize = 64 << 20;

/// One point of `GET /api/v1/servers/{address}/history`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct HistoryPointDto {
    /// When the poll result arrived, unix seconds.
    pub at: u64,
    /// Players (`null` when the server did not answer).
    pub num_players: Option<u32>,
    /// Slots (`null` when the server did not answer).
    pub max_players: Option<u32>,
    /// Whether the server answered.
    pub ok: bool,
}

/// The page and the server history route over `history`; `handle` maps the address the list
/// shows (a game address) to the record the points are kept under.
pub fn router(history: History, handle: muster_core::MasterHandle) -> Router {
    Router::new().route("/", get(index)).route(
        "/api/v1/servers/{address}/history",
        get(crate::api::history::server_history)
            .with_state(crate::api::history::HistoryApi::new(history, handle)),
    )
}

async fn index() -> Response {
    ([(header::CACHE_CONTROL, "no-cache")], Html(INDEX_HTML)).into_response()
}

/// The ETag of `body`: a quoted 64-bit hash and the length. The hash is foldhash's with a fixed
/// seed: the same body gets the same tag from every process (a restart, another instance
/// behind one name), and an API page is hashed at several GB/s, where SipHash (the standard
/// library's) took 6.5 % of the master's CPU while five clients paged through 100k servers.
/// Not a defence against anything: a client that forges a collision only fools its own cache.
#[must_use]
pub fn etag_of(body: &[u8]) -> String {
    const SEED: u64 = 0x6d75_7374_6572_2d65; // "muster-e"
    let mut h = foldhash::fast::FixedState::with_seed(SEED).build_hasher();
    h.write(body);
    format!("\"{:016x}-{:x}\"", h.finish(), body.len())
}

pub use muster_faces::runtime::http::none_match_hits;

/// Middleware: `ETag` on successful `GET`s, `304` when `If-None-Match` matches. See the
/// module docs.
pub async fn etag(req: Request, next: Next) -> Response {
    let is_get = req.method() == Method::GET;
    let inm = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let res = next.run(req).await;
    let streaming = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !is_get
        || streaming
        || res.status() != StatusCode::OK
        || res.headers().contains_key(header::ETAG)
    {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ETAG_BODY).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "response too large").into_response();
    };
    let tag = etag_of(&bytes);
    if let Ok(v) = HeaderValue::from_str(&tag) {
        parts.headers.insert(header::ETAG, v);
    }
    if !parts.headers.contains_key(header::CACHE_CONTROL) {
        parts
            .headers
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if inm.as_deref().is_some_and(|v| none_match_hits(v, &tag)) {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    }
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_compare() {
        let t = etag_of(b"[]");
        assert_eq!(t, etag_of(b"[]"));
        assert_ne!(t, etag_of(b"[1]"));
        assert!(none_match_hits(&t, &t));
        assert!(none_match_hits(&format!("\"x\", W/{t}"), &t));
        assert!(none_match_hits("*", &t));
        assert!(!none_match_hits("\"x\"", &t));
    }

    /// The empty page's line for the 0.6 face says which servers that list carries: the ones
    /// DDNet's HTTP register took, never the 0.7 face's (it once promised 0.7 servers there).
    #[test]
    fn the_page_says_what_the_06_list_carries() {
        use muster_core::registry::Face;
        use muster_faces::teeworlds::{LISTED_BY_06, LISTED_BY_07};
        assert!(LISTED_BY_06.contains(&Face::DdnetHttp));
        assert!(!LISTED_BY_06.contains(&Face::Teeworlds07));
        assert!(LISTED_BY_07.contains(&Face::Teeworlds07));
        let line = INDEX_HTML
            .lines()
            .find(|l| l.contains("\"Teeworlds 0.6 lists"))
            .unwrap();
        assert!(
            line.contains("registered over DDNet's HTTP register"),
            "{line}"
        );
        assert!(!line.contains("and 0.7 servers"), "{line}");
    }

    /// Keyboard use: headers and rows are focusable, Enter and Space act on them, Escape
    /// closes the detail, the focus is drawn (the browser test presses the keys).
    #[test]
    fn page_is_made_for_the_keyboard() {
        for part in [
            "role=\"columnheader\" tabindex=\"0\"",
            "r.tabIndex = 0",
            "e.key === \"Escape\"",
            "e.key === \"Enter\" || e.key === \" \"",
            ":focus-visible",
            "aria-sort",
            "rel=\"icon\"",
        ] {
            assert!(INDEX_HTML.contains(part), "{part}");
        }
        // The page's URL spells the API's filter names.
        assert!(INDEX_HTML.contains("p.get(\"non_empty\")"));
        assert!(!INDEX_HTML.contains("\"nonempty\""));
    }

    /// `muster browse --web` serves this page: its list carries `ping_ms` and `favourite`.
    /// The ping column is hidden until a server has a ping (this master's list has none) and
    /// sorts; a star on such a list asks the server's favourites route instead of
    /// `localStorage`; the join link the list gives is used.
    #[test]
    fn page_shows_pings_and_server_favourites_only_where_the_list_has_them() {
        for part in [
            "<body class=\"noping\">",
            "data-sort=\"ping\"",
            "body.noping .c-ping { display: none; }",
            "toggle(\"noping\", !all.some((s) => typeof s.ping_ms === \"number\"",
            "ping: (a, b) =>",
            "\"players\", \"ping\", \"password\"",
            "s.favourite !== undefined && info && info.favourites",
            "method: on ? \"POST\" : \"DELETE\"",
            "if (s.join_link) return s.join_link;",
            "info.refresh_ms",
        ] {
            assert!(INDEX_HTML.contains(part), "{part}");
        }
    }

    #[test]
    fn page_has_its_parts() {
        for part in [
            "/api/v1/servers",
            "/api/v1/events",
            "/api/v1/info",
            "EventSource",
            "If-None-Match",
            "/history",
            "localStorage",
            "pushState",
        ] {
            assert!(INDEX_HTML.contains(part), "{part}");
        }
    }
}
