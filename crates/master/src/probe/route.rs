//! `GET /probe`: the route `muster exporter` serves alone and `muster serve` mounts beside its
//! API. Probes run at most [`ProbeSettings::max_concurrent`] at once; one more is answered
//! 503 at once rather than queued, so a flood of scrapes costs no more sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use muster_core::config::Net;
use muster_core::drops::DropReason;
use muster_faces::runtime::http::{ClientIp, HttpLimits};
use muster_faces::runtime::tcp::MetricsSink;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::metrics::CONTENT_TYPE;
use super::{SCRAPE_TIMEOUT_HEADER, parse_query, probe_timeout, run};

/// Probes running at once by default.
pub const DEFAULT_MAX_CONCURRENT_PROBES: usize = 16;

/// The longest a probe may take by default, whatever Prometheus' scrape timeout says.
pub const DEFAULT_MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The path.
pub const PROBE_PATH: &str = "/probe";

/// How the route runs probes.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Probes at once; more are answered 503.
    pub max_concurrent: usize,
    /// The longest one probe may take.
    pub max_timeout: Duration,
    /// The networks whose clients may probe (`None`: anyone, as `muster exporter` on the
    /// address its operator chose); others are answered 403.
    pub allowed: Option<Vec<Net>>,
}

impl ProbeSettings {
    /// The default cap, with probes ending a second before `request_timeout` (the deadline
    /// the HTTP runner gives every request of `muster serve`).
    #[must_use]
    pub fn within(request_timeout: Duration) -> Self {
        Self {
            max_timeout: request_timeout.saturating_sub(Duration::from_secs(1)),
            ..Self::default()
        }
    }
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            max_concurrent: DEFAULT_MAX_CONCURRENT_PROBES,
            max_timeout: DEFAULT_MAX_PROBE_TIMEOUT,
            allowed: None,
        }
    }
}

#[derive(Debug)]
struct ProbeState {
    permits: Semaphore,
    max_timeout: Duration,
    allowed: Option<Vec<Net>>,
}

/// The `/probe` route with its own concurrency cap.
pub fn router(settings: ProbeSettings) -> Router {
    let state = Arc::new(ProbeState {
        permits: Semaphore::new(settings.max_concurrent),
        max_timeout: settings.max_timeout,
        allowed: settings.allowed,
    });
    Router::new()
        .route(PROBE_PATH, get(probe))
        .with_state(state)
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn probe(
    State(state): State<Arc<ProbeState>>,
    extensions: axum::http::Extensions,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Some(allowed) = &state.allowed {
        let ip = (extensions.get::<ConnectInfo<SocketAddr>>()).map(|ConnectInfo(p)| p.ip());
        if !ip.is_some_and(|ip| allowed.iter().any(|n| n.contains(ip))) {
            return text(
                StatusCode::FORBIDDEN,
                "probes are answered only to the networks of [http] probe_from\n".to_owned(),
            );
        }
    }
    let Ok(_permit) = state.permits.try_acquire() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many probes running at once; try again\n".to_owned(),
        );
    };
    let request = match parse_query(query.as_deref()).await {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let header = headers
        .get(SCRAPE_TIMEOUT_HEADER)
        .and_then(|v| v.to_str().ok());
    let timeout = probe_timeout(header, state.max_timeout);
    let probed = run(&request, timeout).await;
    (
        [
            (header::CONTENT_TYPE, CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        probed.encode(),
    )
        .into_response()
}

/// Refused connections of the exporter's listener are not counted anywhere: it has no
/// `/metrics` of its own.
#[derive(Debug)]
struct Uncounted;

impl MetricsSink for Uncounted {
    fn refused(&self, _: DropReason) {}
}

/// Serve `/probe` alone on `listener` (`muster exporter`) until `stop`, through the same
/// HTTP runner as the master's API (header and request deadlines, connection caps). Every
/// other path is 404.
pub async fn serve(
    listener: TcpListener,
    settings: ProbeSettings,
    stop: muster_faces::runtime::CancellationToken,
) {
    let mut limits = HttpLimits::default();
    // A probe may take its whole timeout; the request deadline must not cut it first.
    limits.request_timeout = limits
        .request_timeout
        .max(settings.max_timeout + Duration::from_secs(1));
    let app = router(settings);
    let app = muster_http::routes::limited(app, limits);
    muster_faces::runtime::http::serve(
        listener,
        app,
        None,
        limits,
        Arc::new(ClientIp::default()),
        Arc::new(Uncounted),
        stop,
    )
    .await;
}
