//! A per-source token bucket on the HTTP list routes (`/api/v1/servers…`, the UT2003
//! `/serverlist/…` files): every list request of every face has one. DDNet's
//! `servers.json` and register keep their own buckets ([`crate::faces::teeworlds::ddnet`]);
//! `/`, `/healthz` and `/metrics` are not limited.
//!
//! The defaults (`limits.http_list_burst` 60, one more every `limits.http_list_refill` 50 ms)
//! let a browser page fetch every page of a 10 000-server list every few seconds, and stop one
//! source from keeping the daemon busy building lists. A refused request is answered
//! `429 Too Many Requests` with `Retry-After: 1`, counted as rate-limited and as the drop
//! `rate_limited`. A list request the route answers `400 Bad Request` (a malformed query) is
//! counted as the drop `malformed`, as every face counts its malformed input.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use muster_proto::limit::{BucketConfig, SourceLimiter};

use crate::MasterHandle;

/// Path prefixes whose requests take a token.
pub const LIMITED_PREFIXES: [&str; 2] = ["/api/v1/servers", "/serverlist/"];

/// The shared bucket table; give it to [`limit`] with `axum::middleware::from_fn_with_state`.
#[derive(Debug)]
pub struct HttpListLimit {
    handle: MasterHandle,
    limiter: Mutex<SourceLimiter>,
}

impl HttpListLimit {
    /// A table of `bucket`s for at most `max_sources` sources.
    #[must_use]
    pub fn new(handle: MasterHandle, bucket: BucketConfig, max_sources: usize) -> Arc<Self> {
        Arc::new(Self {
            handle,
            limiter: Mutex::new(SourceLimiter::new(bucket, max_sources)),
        })
    }
}

/// The middleware: takes a token for list routes from the peer's source (needs the server to
/// run with `into_make_service_with_connect_info::<SocketAddr>()`; without a peer address the
/// request passes).
pub async fn limit(State(l): State<Arc<HttpListLimit>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if !LIMITED_PREFIXES.iter().any(|p| path.starts_with(p)) {
        return next.run(req).await;
    }
    {
        if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
            let allowed = l
                .limiter
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .allow(peer.ip(), Instant::now(), 1.0);
            if !allowed {
                let m = l.handle.metrics();
                m.count_rate_limited(peer.ip());
                m.count_drop(crate::drops::DropReason::RateLimited);
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, "1")],
                    "rate limited\n",
                )
                    .into_response();
            }
        }
    }
    let res = next.run(req).await;
    if res.status() == StatusCode::BAD_REQUEST {
        l.handle
            .metrics()
            .count_drop(crate::drops::DropReason::Malformed);
    }
    res
}
