//! `GET /api/v1/events`: the live events of [`muster_core::events`] as Server-Sent Events.
//!
//! ```text
//! GET /api/v1/events[?last_event_id=N]      (or the header Last-Event-ID: N)
//! 200 text/event-stream
//!   : muster events                         first, a comment
//!   id: N+1
//!   event: server_added | server_changed | server_removed
//!   data: {"address": …, …}                 one JSON object per event
//!   : keep-alive                            every `events.keep_alive` (15 s)
//!   event: resync                           events after N are gone: fetch the list again
//!   event: dropped                          the last event of a subscriber that fell behind
//! 429 {"error": …}                           too many streams from the source or its IPv6 /56
//!                                           or /48, or only the reserve is left
//! 503 {"error": …}                           too many streams in total
//! ```
//!
//! The stream stays open for as long as the client reads it: its connection is marked
//! [`LongLived`], so the idle timeout applies only to writes the client does not take. A
//! client that accepts gzip gets the stream gzip-compressed (`Content-Encoding: gzip`), each
//! event compressed once for every stream ([`crate::api::frames::Frame`]).
//! `GET /api/v1/servers` returns `last_event_id`: subscribing after it gives exactly what
//! changed since that list.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use bytes::Bytes;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_proto::limit::SourceKey;
use serde::Deserialize;

use crate::api::dto::ErrorDto;
use crate::api::frames::{Frame, deflated, text};
use muster_core::MasterHandle;
use muster_core::drops::DropReason;
use muster_core::events::{Next, Refused, ServerEvent, Subscription};
use muster_faces::runtime::tcp::LongLived;

/// The data of the `resync` event.
const RESYNC: &str =
    r#"{"reason":"events since the given id are no longer kept; fetch the list again"}"#;
/// The data of the `dropped` event.
const DROPPED: &str =
    r#"{"reason":"this stream fell too far behind and is closed; reconnect with Last-Event-ID"}"#;

/// The query string of `GET /api/v1/events`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default)]
#[into_params(parameter_in = Query)]
pub struct EventParams {
    /// Resume after this event (as the `Last-Event-ID` header does; the header wins). Take it
    /// from `last_event_id` of `GET /api/v1/servers` to follow that list.
    #[param(value_type = Option<u64>)]
    last_event_id: Option<String>,
}

fn refuse(status: StatusCode, error: impl Into<std::borrow::Cow<'static, str>>) -> Response {
    (
        status,
        [(header::RETRY_AFTER, "5")],
        axum::Json(ErrorDto {
            error: error.into(),
        }),
    )
        .into_response()
}

/// Live changes of the list as Server-Sent Events (see the module docs).
#[utoipa::path(get, path = "/api/v1/events", params(EventParams), responses(
    (status = 200, description = "An endless event stream: `server_added`, `server_changed` \
        (data: the server as `/api/v1/servers/{address}` returns it), `server_removed` (data: \
        `address`, `registered_address`, `game`, `protocol`), `resync`, `dropped`",
        content_type = "text/event-stream"),
    (status = 400, description = "The event id is not a number", body = ErrorDto),
    (status = 429, description = "Too many event streams from this address or network", body = ErrorDto),
    (status = 503, description = "Too many event streams in total", body = ErrorDto)
))]
pub async fn events(State(h): State<MasterHandle>, req: Parts) -> Response {
    if let Err(e) = crate::params::check_params(req.uri.query(), &["last_event_id"]) {
        h.metrics().count_drop(DropReason::Malformed);
        return refuse(StatusCode::BAD_REQUEST, e);
    }
    let Ok(Query(params)) = Query::<EventParams>::try_from_uri(&req.uri) else {
        h.metrics().count_drop(DropReason::Malformed);
        return refuse(StatusCode::BAD_REQUEST, "malformed query string");
    };
    let given = req
        .headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("?").to_owned())
        .or(params.last_event_id);
    let after = match given.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                h.metrics().count_drop(DropReason::Malformed);
                return refuse(StatusCode::BAD_REQUEST, "last event id must be a number");
            }
        },
    };
    let ip = req
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |c| c.0.ip());
    let sub = match h.events().subscribe(SourceKey::of(ip), after) {
        Ok(s) => s,
        Err(e) => {
            h.metrics().count_drop(DropReason::EventStreamCap);
            // The total is the daemon's capacity (503); the others limit what one address or
            // network may hold (429), and are counted by name like every per-source limit.
            let (status, limit, why) = match e {
                Refused::Total => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "event_streams_total",
                    "too many event streams are open",
                ),
                Refused::PerSource => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "event_streams_per_source",
                    "too many event streams from this address",
                ),
                Refused::Prefix => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "event_streams_per_prefix",
                    "too many event streams from this network",
                ),
                Refused::Reserve => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "event_streams_reserve",
                    "the last event streams are kept for addresses holding few",
                ),
            };
            h.metrics().count_limited(limit, ip);
            return refuse(status, why);
        }
    };
    if let Some(l) = req.extensions.get::<LongLived>() {
        l.set();
    }
    let gzip = accepts_gzip(&req.headers);
    let state = Stream {
        sub: Some(sub),
        h: h.clone(),
        keep_alive: h.events().keep_alive(),
        gzip,
        crc: flate2::Crc::new(),
        started: false,
    };
    let body = futures_util::stream::unfold(state, |mut st| async move {
        let chunk = st.next().await?;
        Some((Ok::<_, Infallible>(chunk), st))
    });
    let mut res = Response::new(axum::body::Body::from_stream(body));
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        header::VARY,
        header::HeaderValue::from_static("accept-encoding"),
    );
    if gzip {
        headers.insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static("gzip"),
        );
    }
    res
}

/// Whether the client takes gzip (`Accept-Encoding`, without `q=0`).
fn accepts_gzip(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut it = e.split(';');
            let name = it.next().unwrap_or_default().trim();
            let q0 = it.any(|p| p.trim().replace(' ', "") == "q=0");
            name.eq_ignore_ascii_case("gzip") && !q0
        })
}

/// The framed pieces every stream shares.
fn frames() -> &'static [Frame; 4] {
    static F: OnceLock<[Frame; 4]> = OnceLock::new();
    F.get_or_init(|| {
        [
            Frame::comment("muster events"),
            Frame::comment("keep-alive"),
            Frame::event(None, "resync", RESYNC),
            Frame::event(None, "dropped", DROPPED),
        ]
    })
}

/// One open stream: what it sends next.
struct Stream {
    sub: Option<Subscription>,
    h: MasterHandle,
    keep_alive: std::time::Duration,
    gzip: bool,
    /// Of the text sent so far, for the gzip trailer.
    crc: flate2::Crc,
    started: bool,
}

/// The gzip header of a stream (no name, no time, unknown OS).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

impl Stream {
    fn piece(&mut self, f: &Frame) -> Bytes {
        self.send(&f.text, || f.deflated.clone())
    }

    /// [`Stream::piece`] of an event: its compressed form is made only for a gzip stream.
    fn event(&mut self, e: &ServerEvent) -> Bytes {
        self.send(text(e), || deflated(e).clone())
    }

    /// What goes on the wire for `text`: itself, or (gzip) `deflated()` with the CRC kept.
    fn send(&mut self, text: &Bytes, deflated: impl FnOnce() -> Bytes) -> Bytes {
        if !self.gzip {
            return text.clone();
        }
        self.crc.update(text);
        deflated()
    }

    /// The end of a gzip stream: an empty final block, the CRC-32 and the length.
    fn trailer(&self) -> Bytes {
        let mut t = Vec::with_capacity(10);
        t.extend_from_slice(&[3, 0]);
        t.extend_from_slice(&self.crc.sum().to_le_bytes());
        t.extend_from_slice(&self.crc.amount().to_le_bytes());
        Bytes::from(t)
    }

    /// The next chunk of the body, or `None` once it ended.
    async fn next(&mut self) -> Option<Bytes> {
        let [hello, keep_alive, resync, dropped] = frames();
        if !self.started {
            self.started = true;
            let hello = self.piece(hello);
            if !self.gzip {
                return Some(hello);
            }
            let mut first = Vec::with_capacity(GZIP_HEADER.len() + hello.len());
            first.extend_from_slice(&GZIP_HEADER);
            first.extend_from_slice(&hello);
            return Some(Bytes::from(first));
        }
        let sub = self.sub.as_mut()?;
        let next = tokio::select! {
            n = sub.next() => Some(n),
            () = tokio::time::sleep(self.keep_alive) => None,
        };
        let end = |me: &mut Self, last: Option<Bytes>| -> Option<Bytes> {
            me.sub = None;
            let mut out = last.map(Vec::from).unwrap_or_default();
            if me.gzip {
                out.extend_from_slice(&me.trailer());
            }
            (!out.is_empty()).then(|| Bytes::from(out))
        };
        match next {
            None => Some(self.piece(keep_alive)),
            Some(Next::Event(e)) => Some(self.event(&e)),
            Some(Next::Resync) => Some(self.piece(resync)),
            Some(Next::Dropped) => {
                self.h.metrics().count_drop(DropReason::EventStreamLagged);
                let last = self.piece(dropped);
                end(self, Some(last))
            }
            Some(Next::Closed) => end(self, None),
        }
    }
}
