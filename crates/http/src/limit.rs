//! Per-source token buckets on the HTTP face's read routes: the list routes
//! (`/api/v1/servers…`, the UT2003 `/serverlist/…` files: `limits.http_list_*`) and
//! `/metrics` (`limits.metrics_*`: its document grows with the servers listed). DDNet's
//! register and `servers.json` keep their own buckets ([`muster_faces::teeworlds::ddnet`]), so
//! a reader is never refused because the same address registers servers. `/`, `/healthz` and
//! the web page's assets take no token; the connection caps bound them
//! ([`muster_faces::runtime::tcp`]).
//!
//! The list defaults (`limits.http_list_burst` 60, one more every `limits.http_list_refill`
//! 50 ms) let a browser page fetch every page of a 10 000-server list every few seconds, and
//! stop one source from keeping the daemon busy building lists. A source that has registered
//! servers gets one more budget per server (`limits.proven_servers_max`,
//! [`muster_proto::limit`]): the players of a hosting box or behind a carrier-grade NAT share
//! its address. A refused request is answered `429 Too Many Requests` with `Retry-After`,
//! counted as rate-limited, as the drop `rate_limited` and under its limit's name
//! (`muster_limited_total{limit="http_list"}`, `"metrics"`), and logged once per source and
//! minute. A list request the route answers `400 Bad Request` (a malformed query) is counted
//! as the drop `malformed`, as every face counts its malformed input.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use muster_proto::limit::{BucketConfig, SourceLimiter};

use muster_core::MasterHandle;

/// Path prefixes whose requests take a list token.
pub const LIMITED_PREFIXES: [&str; 2] = ["/api/v1/servers", "/serverlist/"];
/// The path whose requests take a `/metrics` token.
pub const METRICS_PATH: &str = "/metrics";

/// The shared bucket tables; give them to [`limit`] with `axum::middleware::from_fn_with_state`.
#[derive(Debug)]
pub struct HttpListLimit {
    handle: MasterHandle,
    limiter: Mutex<SourceLimiter>,
    refill: Duration,
    metrics: Mutex<SourceLimiter>,
    metrics_refill: Duration,
}

impl HttpListLimit {
    /// Tables of `lists` and `metrics` buckets (`burst`, one more every `refill`) for at
    /// most `max_sources` sources each; list budgets grow by up to `proven_servers_max`
    /// registered servers.
    #[must_use]
    pub fn new(
        handle: MasterHandle,
        lists: (u32, Duration),
        metrics: (u32, Duration),
        max_sources: usize,
        proven_servers_max: u32,
    ) -> Arc<Self> {
        let bucket = |(burst, refill)| {
            SourceLimiter::new(BucketConfig::one_every(burst, refill), max_sources)
        };
        Arc::new(Self {
            handle,
            limiter: Mutex::new(bucket(lists).with_growth(proven_servers_max)),
            refill: lists.1,
            metrics: Mutex::new(bucket(metrics)),
            metrics_refill: metrics.1,
        })
    }
}

/// `Retry-After` for a bucket refilling one token every `refill`: whole seconds, at least 1.
fn retry_after(refill: Duration) -> String {
    refill.as_secs_f64().ceil().max(1.0).to_string()
}

/// The middleware: takes a token for list routes from the peer's source (needs the server to
/// run with `into_make_service_with_connect_info::<SocketAddr>()`; without a peer address the
/// request passes).
pub async fn limit(State(l): State<Arc<HttpListLimit>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let (limiter, refill, name) = if LIMITED_PREFIXES.iter().any(|p| path.starts_with(p)) {
        (&l.limiter, l.refill, "http_list")
    } else if path == METRICS_PATH {
        (&l.metrics, l.metrics_refill, "metrics")
    } else {
        return next.run(req).await;
    };
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
        let ip = peer.ip();
        let allowed = limiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allow_proven(ip, Instant::now(), 1.0, |k| l.handle.proven_servers(k));
        if !allowed {
            l.handle.metrics().count_bucket_refusal(name, ip);
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, retry_after(refill))],
                "rate limited\n",
            )
                .into_response();
        }
    }
    let res = next.run(req).await;
    if res.status() == StatusCode::BAD_REQUEST {
        l.handle
            .metrics()
            .count_drop(muster_core::drops::DropReason::Malformed);
    }
    res
}
