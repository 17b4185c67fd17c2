//! The HTTP server of the daemon: hyper's HTTP/1.1 connection driver over the capped TCP
//! accept side, serving one axum router.
//!
//! What keeps slow clients from taking the face down (slowloris):
//! * **connection caps**: in total and per source (IPv4 address, IPv6 /64), refused right after
//!   accept ([`super::tcp::CappedListener`]);
//! * **a header-read deadline**: a client must send a request's whole header within
//!   [`HttpLimits::header_timeout`], counted from the connection's start or from the end of its
//!   previous response, however it trickles the bytes (hyper's `header_read_timeout`);
//! * **a whole-request deadline** on every route, body reading included
//!   ([`HttpLimits::request_timeout`], answered 408);
//! * **an idle timeout** on the socket for responses a client does not read; a route that
//!   streams (Server-Sent Events) marks its connection [`super::tcp::LongLived`], so that only
//!   a stalled write times it out.
//!
//! Shutdown: on cancel the listener stops accepting, every connection finishes its request in
//! flight ([`hyper::server::conn::http1::Connection::graceful_shutdown`]) and the server
//! returns once they are closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use super::tcp::{CappedListener, ConnLimits, MetricsSink};
use crate::drops::DropReason;

/// The limits of the HTTP face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body, bytes.
    pub body_limit: usize,
    /// Time to answer one request, body included.
    pub request_timeout: Duration,
    /// Time a client has to send a request's header.
    pub header_timeout: Duration,
    /// Connection caps and the socket idle timeout.
    pub conn: ConnLimits,
}

/// How long shutdown waits for connections to finish their requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `stop` is cancelled. Each request carries the peer's
/// address as [`ConnectInfo<SocketAddr>`] and its connection's [`super::tcp::LongLived`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    sink: Arc<dyn MetricsSink>,
    stop: CancellationToken,
) {
    let mut listener = CappedListener::new(listener, limits.conn).with_metrics(Arc::clone(&sink));
    let tracker = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            c = listener.accept_capped() => c,
        };
        let router = app.clone();
        let long_lived = stream.long_lived();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            req.extensions_mut().insert(long_lived.clone());
            let router = router.clone();
            async move {
                let res = router.oneshot(req.map(axum::body::Body::new)).await;
                Ok::<_, Infallible>(match res {
                    Ok(r) => r,
                    Err(never) => match never {},
                })
            }
        });
        let stop = stop.clone();
        let sink = Arc::clone(&sink);
        let header_timeout = limits.header_timeout;
        tracker.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let res = tokio::select! {
                r = conn.as_mut() => r,
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = res {
                if e.is_timeout() {
                    sink.refused(DropReason::HttpHeaderTimeout);
                }
                tracing::debug!(%peer, error = %e, "http connection ended");
            }
        });
    }
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("http connections still open after the shutdown grace period");
    }
}
