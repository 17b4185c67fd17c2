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
//!
//! **Documents sent from a file.** A [`FileRoute`] (DDNet's `servers.json`) answers plain
//! `GET`s of its path before hyper sees them: the connection's first requests are read here
//! (same header deadline), and while each is such a `GET`, its document goes out with
//! `sendfile` from the file holding it, the way nginx serves a file: no copy of a 10–100 MB
//! body through the process per request. The first request of any other kind, and every
//! request after it, goes to hyper with the bytes already read; so does a `GET` carrying
//! conditions (`If-None-Match`, `Range`), an `Origin` (CORS) or anything unusual.
//!
//! ```text
//! accept ─> read a head (header deadline) ─> plain GET of a file route? ─yes─> head + sendfile ─┐
//!              ^                                │ no                                            │
//!              └────────────────────────────────┼──────────────────────── keep-alive ───────────┘
//!                                               v
//!                     hyper (the bytes read so far first), for the rest of the connection
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
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

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::tcp::{CappedListener, CappedStream, ConnLimits, MetricsSink};
use muster_core::drops::DropReason;

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

impl Default for HttpLimits {
    fn default() -> Self {
        Self::from_limits(&muster_core::config::LimitsConfig::default())
    }
}

impl HttpLimits {
    /// The HTTP face's limits from `[limits]`.
    #[must_use]
    pub fn from_limits(l: &muster_core::config::LimitsConfig) -> Self {
        Self {
            body_limit: l.http_body_limit,
            request_timeout: l.http_request_timeout.0,
            header_timeout: l.http_header_timeout.0,
            conn: l.conn_limits(),
        }
    }
}

/// Where the HTTP face takes a request's client address from: the connection's peer, or,
/// when the peer is a trusted reverse proxy, the header the proxy puts the client's address in
/// (`limits.connecting_ip_header`, as DDNet's mastersrv's `--connecting-ip-header`). The
/// per-source buckets and the DDNet register (which sends its challenge to that address) then
/// see the real client; the connection caps still count the proxy's connections.
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    /// The header's name, lower-case; `None`: always the peer.
    header: Option<String>,
    /// Peers whose header is believed.
    trusted: Vec<muster_core::config::Net>,
}

impl ClientIp {
    /// The header `header` (empty: none) from peers in `trusted`.
    #[must_use]
    pub fn new(header: &str, trusted: Vec<muster_core::config::Net>) -> Self {
        let header = header.trim();
        Self {
            header: (!header.is_empty()).then(|| header.to_ascii_lowercase()),
            trusted,
        }
    }

    /// The client of a request from `peer` whose headers are `headers` (name, value): the
    /// header's address when `peer` is trusted and the header holds one (of a list, the last
    /// entry: the one the trusted proxy added), else `peer`.
    pub fn client<'a>(
        &self,
        peer: SocketAddr,
        mut headers: impl Iterator<Item = (&'a str, &'a [u8])>,
    ) -> SocketAddr {
        let Some(name) = &self.header else {
            return peer;
        };
        if !self.trusted.iter().any(|n| n.contains(peer.ip())) {
            return peer;
        }
        headers
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse::<std::net::IpAddr>().ok())
            .map_or(peer, |ip| SocketAddr::new(ip, peer.port()))
    }
}

/// How long shutdown waits for connections to finish their requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A response whose body is a file sent with `sendfile`.
#[derive(Debug)]
pub struct FileResponse {
    /// Status line and headers, up to and including the empty line; `Content-Length` must be
    /// `len`.
    pub head: Vec<u8>,
    /// The body's file (read from offset 0, never written again while shared).
    pub file: Arc<std::fs::File>,
    /// The body's length.
    pub len: u64,
}

/// When a request arrived, as the HTTP runner read the clock for it (inserted into every
/// request's extensions and handed to [`FileRoute::respond`]): routes read no clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTime {
    /// The runtime's clock (a paused test clock is everyone's).
    pub now: std::time::Instant,
    /// Wall time.
    pub wall: muster_core::registry::Timestamp,
}

impl RequestTime {
    /// The clock now.
    #[must_use]
    pub fn read() -> Self {
        Self {
            now: muster_core::clock::now(),
            wall: muster_core::registry::Timestamp::now(),
        }
    }

    /// The wall time as an HTTP `Date` value.
    #[must_use]
    pub fn http_date(&self) -> String {
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_millis(self.wall.0))
    }
}

/// The answer of a [`FileRoute`], made off the connection (it may wait for a document build).
pub type FileAnswer = Pin<Box<dyn Future<Output = Option<FileResponse>> + Send>>;

/// A route whose plain `GET`s are answered from a file before hyper sees them (see the module
/// docs).
pub trait FileRoute: Send + Sync + std::fmt::Debug {
    /// The answer to this `GET` (unconditional, no `Origin`, HTTP/1.1, no body) from `peer`
    /// (the connection's, or the trusted proxy's client), or `None` when it is not this
    /// route's or the route wants the router to answer (a refusal); an answer of `None` hands
    /// the request to the router.
    fn respond(
        &self,
        path: &str,
        headers: &[httparse::Header<'_>],
        peer: SocketAddr,
        at: RequestTime,
    ) -> Option<FileAnswer>;
}

/// Longest request head read before hyper (a longer one goes to hyper, which refuses it).
const MAX_FRONT_HEAD: usize = 16 * 1024;
/// The first read of a connection's request head, bytes.
const FRONT_READ: usize = 1024;
/// Headers a request read before hyper may have.
const MAX_FRONT_HEADERS: usize = 64;

/// Bodies longer than this go out corked from a connection's second body on (see `front`):
/// the largest segment the kernel builds, so a shorter body takes one segment at most.
const CORK_MIN: u64 = 64 * 1024;

/// Request headers that send a `GET` to hyper even on a file route: conditions and ranges
/// (hyper's route answers them), CORS, bodies, protocol changes.
const NOT_PLAIN: [&str; 9] = [
    "if-none-match",
    "if-modified-since",
    "range",
    "if-range",
    "origin",
    "transfer-encoding",
    "content-length",
    "expect",
    "upgrade",
];

/// Whether `req` (complete) may be answered by a [`FileRoute`]: `Some(close)`, with whether
/// the client asked to close the connection after the response.
fn plain_get(req: &httparse::Request<'_, '_>) -> Option<bool> {
    if req.method != Some("GET") || req.version != Some(1) {
        return None;
    }
    let mut close = false;
    for h in req.headers.iter() {
        if NOT_PLAIN.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            return None;
        }
        if h.name.eq_ignore_ascii_case("connection") {
            if h.value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if !h.value.eq_ignore_ascii_case(b"keep-alive") {
                return None;
            }
        }
    }
    Some(close)
}

/// How the requests read before hyper ended.
enum Front {
    /// Hand the connection to hyper (the bytes read so far first).
    Hyper,
    /// The connection is over.
    Closed,
}

/// Answers the connection's requests while they are plain `GET`s of `route` (see the module
/// docs). `buf` keeps what was read and not answered.
#[allow(clippy::too_many_arguments)]
async fn front(
    peer: SocketAddr,
    client_ip: &ClientIp,
    stream: &mut CappedStream,
    buf: &mut BytesMut,
    route: &dyn FileRoute,
    limits: &HttpLimits,
    sink: &dyn MetricsSink,
    stop: &CancellationToken,
) -> Front {
    let mut deadline = tokio::time::Instant::now() + limits.header_timeout;
    // Bodies this connection has been sent (see the cork below).
    let mut sent = 0u64;
    loop {
        let answer = {
            let mut headers = [httparse::EMPTY_HEADER; MAX_FRONT_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let Some(close) = plain_get(&req) else {
                        return Front::Hyper;
                    };
                    let client =
                        client_ip.client(peer, req.headers.iter().map(|h| (h.name, h.value)));
                    let at = RequestTime::read();
                    match req
                        .path
                        .and_then(|p| route.respond(p, req.headers, client, at))
                    {
                        Some(answer) => Some((n, close, answer)),
                        None => return Front::Hyper,
                    }
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_FRONT_HEAD => None,
                Ok(httparse::Status::Partial) | Err(_) => return Front::Hyper,
            }
        };
        let Some((n, close, answer)) = answer else {
            let read = tokio::select! {
                () = stop.cancelled() => return Front::Closed,
                r = tokio::time::timeout_at(deadline, stream.read_buf(buf)) => r,
            };
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => return Front::Closed,
                Ok(Ok(_)) => continue,
                Err(_) => {
                    sink.refused(DropReason::HttpHeaderTimeout);
                    return Front::Closed;
                }
            }
        };
        // Past the whole-request deadline, the router answers (408) as for any route.
        let Ok(Some(res)) = tokio::time::timeout(limits.request_timeout, answer).await else {
            return Front::Hyper;
        };
        buf.advance(n);
        let mut head = res.head;
        if close && head.ends_with(b"\r\n\r\n") {
            head.truncate(head.len() - 2);
            head.extend_from_slice(b"connection: close\r\n\r\n");
        }
        // A long body, from a connection's second body on, goes out corked: in full segments
        // only. Such a body takes several writes, and uncorked, on this TCP_NODELAY socket,
        // each acknowledgement that finds the write queue short pushes its partial last
        // segment: a 12 MB servers.json left in segments of 38 KB on average against nginx's
        // 64 KB, and the loopback path's per-segment work made each request cost 10% more.
        // Not a first body: until autotuning grew the buffer past a segment, corked data
        // could wait for room it needs acknowledgements to get (a connection each measured
        // slower corked). The rule is on the body's length alone: it once also asked for a
        // body longer than the send buffer, and as autotuning grew the buffer, whether a 1 MB
        // body went out corked changed from one connection to the next.
        let cork = sent > 0 && res.len > CORK_MIN && stream.set_cork(true).is_ok();
        // Else a head flagged "more" waits for the body: only when there is one.
        let head_sent = if res.len > 0 && !cork {
            stream.write_head(&head).await
        } else {
            stream.write_all(&head).await
        };
        if head_sent.is_err() || stream.send_file(&res.file, 0, res.len).await.is_err() {
            return Front::Closed;
        }
        if cork && stream.set_cork(false).is_err() {
            return Front::Closed;
        }
        sent += 1;
        if close || stop.is_cancelled() {
            let _ = stream.shutdown().await;
            return Front::Closed;
        }
        deadline = tokio::time::Instant::now() + limits.header_timeout;
    }
}

/// Serves `app` on `listener` until `stop` is cancelled; `files` answers its plain `GET`s
/// before the router (see the module docs). Each request carries the peer's address as
/// [`ConnectInfo<SocketAddr>`] and its connection's [`super::tcp::LongLived`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    files: Option<Arc<dyn FileRoute>>,
    limits: HttpLimits,
    client_ip: Arc<ClientIp>,
    sink: Arc<dyn MetricsSink>,
    stop: CancellationToken,
) {
    let mut listener = CappedListener::new(listener, limits.conn).with_metrics(Arc::clone(&sink));
    let tracker = TaskTracker::new();
    loop {
        let (mut stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            c = listener.accept_capped() => c,
        };
        let files = files.clone();
        let router = app.clone();
        let long_lived = stream.long_lived();
        let ips = Arc::clone(&client_ip);
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let client = ips.client(
                peer,
                req.headers()
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_bytes())),
            );
            req.extensions_mut()
                .insert(ConnectInfo::<SocketAddr>(client));
            req.extensions_mut().insert(RequestTime::read());
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
        let client_ip = Arc::clone(&client_ip);
        let header_timeout = limits.header_timeout;
        tracker.spawn(async move {
            // Room for a usual request head in one read.
            let mut read = BytesMut::with_capacity(FRONT_READ);
            if let Some(files) = files {
                let end = front(
                    peer,
                    &client_ip,
                    &mut stream,
                    &mut read,
                    &*files,
                    &limits,
                    &*sink,
                    &stop,
                )
                .await;
                if matches!(end, Front::Closed) {
                    return;
                }
            }
            stream.unread(read.freeze());
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

/// A response extension: this body is already in its final encoding (DDNet's
/// `servers.json`, compressed once per document), so the compression layer leaves it alone.
/// Such a response names `Content-Encoding` only when it is encoded, as a file server does.
#[derive(Debug, Clone, Copy)]
pub struct Precompressed;

/// Whether an `If-None-Match` value names `tag` (or is `*`). Weak tags compare by value.
#[must_use]
pub fn none_match_hits(if_none_match: &str, tag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|t| {
        let t = t.strip_prefix("W/").unwrap_or(t);
        t == "*" || t == tag
    })
}

#[cfg(test)]
mod tests {
    use super::ClientIp;
    use muster_core::config::Net;
    use std::net::SocketAddr;

    fn client(c: &ClientIp, peer: &str, headers: &[(&str, &str)]) -> SocketAddr {
        c.client(
            peer.parse().unwrap(),
            headers.iter().map(|(n, v)| (*n, v.as_bytes())),
        )
    }

    #[test]
    fn the_client_header_is_believed_from_trusted_proxies_only() {
        let c = ClientIp::new("X-Real-IP", vec![Net::parse("10.0.0.0/8").unwrap()]);
        let via_proxy = [("x-real-ip", "198.51.100.7")];
        assert_eq!(
            client(&c, "10.1.2.3:5000", &via_proxy),
            "198.51.100.7:5000".parse().unwrap()
        );
        // Anyone else sets the header in vain.
        assert_eq!(
            client(&c, "192.0.2.1:5000", &via_proxy),
            "192.0.2.1:5000".parse().unwrap()
        );
        // A list: the last entry, the one the proxy added; junk: the peer.
        let list = [("X-Real-IP", "203.0.113.9, 2001:db8::5")];
        assert_eq!(
            client(&c, "10.0.0.1:1", &list).ip(),
            "2001:db8::5".parse::<std::net::IpAddr>().unwrap()
        );
        let junk = [("x-real-ip", "not an address")];
        assert_eq!(
            client(&c, "10.0.0.1:1", &junk),
            "10.0.0.1:1".parse().unwrap()
        );
        // Off by default.
        let off = ClientIp::default();
        assert_eq!(
            client(&off, "10.0.0.1:1", &via_proxy),
            "10.0.0.1:1".parse().unwrap()
        );
    }
}
