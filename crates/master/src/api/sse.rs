//! `GET /api/v1/events`: the live events of [`crate::events`] as Server-Sent Events.
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
//! 503 {"error": …}                           too many streams (in total, or from the source)
//! ```
//!
//! The stream stays open for as long as the client reads it: its connection is marked
//! [`LongLived`], so the idle timeout applies only to writes the client does not take.
//! `GET /api/v1/servers` returns `last_event_id`: subscribing after it gives exactly what
//! changed since that list.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, Query, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use muster_proto::limit::SourceKey;
use serde::Deserialize;

use crate::MasterHandle;
use crate::api::dto::ErrorDto;
use crate::drops::DropReason;
use crate::events::{Next, Refused, Subscription};
use crate::runtime::tcp::LongLived;

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

fn refuse(status: StatusCode, error: &'static str) -> Response {
    (
        status,
        [(header::RETRY_AFTER, "5")],
        axum::Json(ErrorDto { error }),
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
    (status = 503, description = "Too many event streams", body = ErrorDto)
))]
pub async fn events(State(h): State<MasterHandle>, req: Parts) -> Response {
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
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                match e {
                    Refused::Total => "too many event streams are open",
                    Refused::PerSource => "too many event streams from this address",
                },
            );
        }
    };
    if let Some(l) = req.extensions.get::<LongLived>() {
        l.set();
    }
    let keep_alive = h.events().keep_alive();
    let hello = Event::default().comment("muster events");
    let first = futures_util::stream::once(async move { Ok::<_, Infallible>(hello) });
    let rest = futures_util::stream::unfold(Some((sub, h)), |state| async move {
        let (mut sub, h): (Subscription, MasterHandle) = state?;
        let event = match sub.next().await {
            Next::Event(e) => Event::default()
                .id(e.id.to_string())
                .event(e.kind.name())
                .data(&*e.data),
            Next::Resync => Event::default().event("resync").data(RESYNC),
            Next::Dropped => {
                h.metrics().count_drop(DropReason::EventStreamLagged);
                return Some((Ok(Event::default().event("dropped").data(DROPPED)), None));
            }
            Next::Closed => return None,
        };
        Some((Ok(event), Some((sub, h))))
    });
    use futures_util::StreamExt as _;
    Sse::new(first.chain(rest))
        .keep_alive(KeepAlive::new().interval(keep_alive).text("keep-alive"))
        .into_response()
}
