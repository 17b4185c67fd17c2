//! `GET /badge/{address}.svg`: a small SVG picture of one listed server for community sites —
//! its name on the left, `players/slots` (green) or `down` (red) on the right.
//!
//! The name is cut to [`MAX_BADGE_NAME`] characters (an ellipsis marks the cut), control
//! characters become spaces and `& < > " '` are escaped, so any name a server sends makes a
//! well-formed document. An address with no listed server answers `404` with a grey
//! "unknown" badge: an `<img>` still shows something, and a checker sees the status. Answers
//! may be cached [`BADGE_MAX_AGE`] (`Cache-Control`); the daemon's ETag layer tags the `200`s.
//! `?game=` picks one game where several are listed at one address (the first otherwise).

use std::fmt::Write as _;

use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::history::{HistoryApi, error, params};
use muster_core::registry::GameAddr;

/// Longest name a badge shows, in characters.
pub const MAX_BADGE_NAME: usize = 32;
/// How long a badge may be cached, seconds.
pub const BADGE_MAX_AGE: u32 = 60;
/// The query parameters of the badge route.
pub const BADGE_PARAMS: &[&str] = &["game"];

/// Colours of the right-hand part.
const UP: &str = "#3c9a3c";
const DOWN: &str = "#c43c3c";
const UNKNOWN: &str = "#8a8a8a";
/// Width the badge gives a character (11 px sans-serif), and the padding of each part.
const CHAR_PX: usize = 7;
const PAD_PX: usize = 10;

/// What a badge shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadgeState {
    /// Answering: players and slots.
    Up {
        /// Players on it.
        players: u32,
        /// Slots.
        slots: u32,
    },
    /// Listed, but its polls fail (or it has not answered yet).
    Down,
    /// No listed server there.
    Unknown,
}

/// `name` made safe for the badge: control characters become spaces, at most
/// [`MAX_BADGE_NAME`] characters (the last an ellipsis when cut), trimmed.
#[must_use]
pub fn badge_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    if clean.chars().count() <= MAX_BADGE_NAME {
        return clean.to_owned();
    }
    let mut cut: String = clean.chars().take(MAX_BADGE_NAME - 1).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// `s` escaped for XML text and attribute values.
#[must_use]
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The SVG of a badge for `name` (shown as given, after [`badge_name`]) in `state`.
#[must_use]
pub fn render(name: &str, state: &BadgeState) -> String {
    let name = badge_name(name);
    let (right, colour) = match state {
        BadgeState::Up { players, slots } => (format!("{players}/{slots}"), UP),
        BadgeState::Down => ("down".to_owned(), DOWN),
        BadgeState::Unknown => ("unknown".to_owned(), UNKNOWN),
    };
    let lw = name.chars().count() * CHAR_PX + 2 * PAD_PX;
    let rw = right.chars().count() * CHAR_PX + 2 * PAD_PX;
    let w = lw + rw;
    let title = xml_escape(&format!("{name}: {right}"));
    let name = xml_escape(&name);
    let mut s = String::with_capacity(768);
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"20\" role=\"img\" \
         aria-label=\"{title}\"><title>{title}</title>\
         <rect width=\"{lw}\" height=\"20\" fill=\"#444\"/>\
         <rect x=\"{lw}\" width=\"{rw}\" height=\"20\" fill=\"{colour}\"/>\
         <g fill=\"#fff\" font-family=\"DejaVu Sans,Verdana,Geneva,sans-serif\" font-size=\"11\">\
         <text x=\"{PAD_PX}\" y=\"14\">{name}</text>\
         <text x=\"{}\" y=\"14\">{right}</text></g></svg>",
        lw + PAD_PX
    );
    s
}

fn svg(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                "image/svg+xml; charset=utf-8".to_owned(),
            ),
            (
                header::CACHE_CONTROL,
                format!("public, max-age={BADGE_MAX_AGE}"),
            ),
        ],
        body,
    )
        .into_response()
}

/// `GET /badge/{address}.svg`.
#[utoipa::path(get, path = "/badge/{file}",
    params(
        ("file" = String, Path, description = "The server's address (as the list shows it) followed by `.svg`"),
        ("game" = Option<String>, Query, description = "The game, when several are listed at one address")
    ),
    responses(
        (status = 200, description = "The badge (image/svg+xml)", body = String),
        (status = 400, description = "Not `address.svg`, or an unknown parameter", body = crate::api::dto::ErrorDto),
        (status = 404, description = "No listed server there: a grey \"unknown\" badge (image/svg+xml)", body = String)
    ))]
pub async fn badge(
    State(st): State<HistoryApi>,
    Path(file): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let game = match params(raw.as_deref(), BADGE_PARAMS) {
        Ok(p) => p.game.filter(|g| !g.is_empty()),
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let Some(addr) = file.strip_suffix(".svg").and_then(GameAddr::parse) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the badge of host:port is /badge/host:port.svg",
        );
    };
    // The snapshot's address index is built once per snapshot, over every record: off the
    // reactor.
    let view = st.handle.snapshot();
    let wanted = addr.clone();
    let found = muster_core::bulk::spawn(move || {
        view.find_by_addr(&wanted)
            .into_iter()
            .find(|r| {
                game.as_deref()
                    .is_none_or(|g| g.eq_ignore_ascii_case(&r.key.game))
            })
            .cloned()
    })
    .await
    .ok()
    .flatten();
    let Some(r) = found else {
        return svg(
            StatusCode::NOT_FOUND,
            render(&addr.to_string(), &BadgeState::Unknown),
        );
    };
    let (name, state) = match r.info.as_deref() {
        Some(i) if r.poll_failures() == 0 => (
            i.name().to_owned(),
            BadgeState::Up {
                players: i.num_players,
                slots: i.max_players,
            },
        ),
        Some(i) => (i.name().to_owned(), BadgeState::Down),
        None => (String::new(), BadgeState::Down),
    };
    let name = if name.trim().is_empty() {
        addr.to_string()
    } else {
        name
    };
    svg(StatusCode::OK, render(&name, &state))
}
