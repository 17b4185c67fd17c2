//! Serving one [`Responder`] on one UDP socket.
//!
//! The driver reads datagrams, asks the responder for replies, and sends them subject to the
//! limits every Muster UDP face shares: a per-source token bucket on requests (IPv4 address or
//! IPv6 /64) and a global byte budget on replies, so a spoofed request stream cannot turn the
//! server into an amplifier. For test farms it can also impair its own traffic: drop requests,
//! reverse the order of multi-datagram replies, delay replies.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muster_proto::limit::{BucketConfig, ByteBudget, SourceLimiter};
use muster_proto::respond::{
    HttpRequest, Registrar, RegistrarEvent, Reply, Responder, ServerState,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

/// The largest request read; anything longer is truncated by the kernel and then rejected by
/// the responder (no query protocol Muster answers has requests near this size).
const MAX_REQUEST: usize = 2048;
/// Sources tracked by the per-source limiter.
const MAX_TRACKED_SOURCES: usize = 65_536;

/// Limits applied to everything one socket answers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests per source: burst and refill.
    pub per_source: BucketConfig,
    /// Reply bytes per second for the whole socket.
    pub bytes_per_second: u64,
}

impl Default for Limits {
    /// Burst 8, two requests per second per source; 1 MiB/s of replies (gamespy1.md §13).
    fn default() -> Self {
        Self {
            per_source: BucketConfig {
                burst: 8.0,
                per_second: 2.0,
            },
            bytes_per_second: 1 << 20,
        }
    }
}

impl Limits {
    /// No limits at all (for benchmark farms on loopback).
    #[must_use]
    pub fn unlimited() -> Self {
        Self {
            per_source: BucketConfig {
                burst: f64::INFINITY,
                per_second: f64::INFINITY,
            },
            bytes_per_second: u64::MAX,
        }
    }
}

/// Deliberate faults, for testing clients against bad networks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Impairment {
    /// Probability (0..=1) that a request is ignored.
    pub loss: f64,
    /// Probability (0..=1) that a multi-datagram reply is sent in reverse order.
    pub reorder: f64,
    /// Delay before replies are sent, from the request's arrival (to within a fraction of a
    /// millisecond: see the delay line).
    pub delay: Duration,
    /// Seed of the random choices, so a farm is reproducible.
    pub seed: u64,
}

/// Counters of one served socket, readable while it runs.
#[derive(Debug, Default)]
pub struct Stats {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Requests that produced replies.
    pub answered: AtomicU64,
    /// Datagrams the responder rejected (malformed, unknown).
    pub bad: AtomicU64,
    /// Requests dropped by the per-source limit.
    pub rate_limited: AtomicU64,
    /// Replies dropped by the global byte budget.
    pub over_budget: AtomicU64,
    /// Requests dropped on purpose by the impairment settings.
    pub impaired: AtomicU64,
    /// Datagrams sent.
    pub sent: AtomicU64,
}

impl Stats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Answer queries on `socket` with `responder` about the state in `state` until `shutdown`
/// becomes true (or its sender is dropped).
pub async fn serve<R: Responder + Send>(
    socket: UdpSocket,
    responder: R,
    state: watch::Receiver<Arc<ServerState>>,
    limits: Limits,
    impairment: Impairment,
    stats: Arc<Stats>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    serve_registered(
        socket,
        responder,
        Vec::new(),
        state,
        limits,
        impairment,
        stats,
        None,
        shutdown,
    )
    .await
}

/// A registrar the driver owns.
pub type BoxedRegistrar = Box<dyn Registrar + Send>;

/// An HTTP answer for registrar `.0`: status and body, or why there was none; and what was
/// sent, for the log.
type HttpAnswer = (usize, Result<(u16, Vec<u8>), String>, String);

/// Bytes of a master's answer quoted in a failure message.
const BODY_EXCERPT: usize = 200;

/// Log a registrar's event: successes at INFO, failures at WARN with the last HTTP exchange
/// (`exchange`) when the failure followed one.
pub(crate) fn log_event(ev: &RegistrarEvent, exchange: Option<&str>) {
    match ev {
        RegistrarEvent::Registered { master } => tracing::info!("registered with {master}"),
        RegistrarEvent::Failed { master, reason } => match exchange {
            Some(x) => tracing::warn!("registration with {master} failed: {reason}; {x}"),
            None => tracing::warn!("registration with {master} failed: {reason}"),
        },
        RegistrarEvent::Unregistered { master } => tracing::info!("unregistered from {master}"),
        other => tracing::info!("registration: {other:?}"),
    }
}

/// What a registration request was, without secrets: the request line, the URL it went to,
/// the header names (their values hold the server's secrets) and the body's size.
fn describe_request(req: &HttpRequest) -> String {
    let path = req
        .url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("/");
    let names: Vec<&str> = req.headers.iter().map(|(k, _)| k.as_str()).collect();
    format!(
        "sent {} {path} HTTP/1.1 to {} with headers {} (values not shown) and a {}-byte body",
        req.method,
        req.url,
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        },
        req.body.len()
    )
}

/// What came back: the status and the start of the body, or why nothing did.
fn describe_answer(answer: &Result<(u16, Vec<u8>), String>) -> String {
    match answer {
        Ok((status, body)) => {
            let text = String::from_utf8_lossy(body);
            let mut excerpt: String = text
                .chars()
                .take(BODY_EXCERPT)
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            if text.chars().count() > BODY_EXCERPT {
                excerpt.push('…');
            }
            format!("got HTTP {status} {:?}", excerpt.trim())
        }
        Err(e) => format!("got no answer: {e}"),
    }
}

/// How long the goodbyes of registrars (`u`, `Action: delete`) may take at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long one registration HTTP request may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Like [`serve`], and keep the server registered with masters: every datagram is offered to
/// the registrars first (masters answer on the query socket), their datagrams leave from the
/// same socket, their HTTP requests are made, state changes are passed on, and at shutdown
/// their goodbyes are sent (for at most two seconds). Registrar events go to `events`.
#[allow(clippy::too_many_arguments)]
pub async fn serve_registered<R: Responder + Send>(
    socket: UdpSocket,
    mut responder: R,
    mut registrars: Vec<BoxedRegistrar>,
    mut state: watch::Receiver<Arc<ServerState>>,
    limits: Limits,
    impairment: Impairment,
    stats: Arc<Stats>,
    events: Option<mpsc::UnboundedSender<RegistrarEvent>>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let socket = Arc::new(socket);
    // Best effort: without the kernel's stamps a delay counts from the read.
    muster_query::arrival::stamp_arrivals(&socket);
    let mut limiter = SourceLimiter::new(limits.per_source, MAX_TRACKED_SOURCES);
    let mut budget = ByteBudget::new(limits.bytes_per_second);
    let mut rng = SmallRng::seed_from_u64(impairment.seed);
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut replies: Vec<Reply> = Vec::new();
    let mut last_prune = Instant::now();
    let (http_tx, mut http_rx) = mpsc::unbounded_channel::<HttpAnswer>();
    let mut http: Option<reqwest::Client> = None;
    // Per registrar: its last HTTP exchange, told when a failure follows it.
    let mut exchanges: Vec<Option<String>> = vec![None; registrars.len()];
    let mut state_open = true;
    let mut stopping: Option<Instant> = None;
    loop {
        let now = tokio::time::Instant::now().into_std();
        pump_registrars(
            &mut registrars,
            &socket,
            now,
            &http_tx,
            &mut http,
            &events,
            &mut exchanges,
        )
        .await;
        if let Some(since) = stopping {
            let busy = registrars.iter().any(|r| r.goodbye_pending());
            if !busy || now.duration_since(since) >= SHUTDOWN_GRACE {
                return Ok(());
            }
        }
        let next_timer = registrars.iter().filter_map(|r| r.poll_timeout()).min();
        let wake = match (next_timer, stopping) {
            (Some(t), Some(since)) => Some(t.min(since + SHUTDOWN_GRACE)),
            (Some(t), None) => Some(t),
            (None, Some(since)) => Some(since + SHUTDOWN_GRACE),
            (None, None) => None,
        };
        let sleep = async {
            match wake {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        let (n, from, received) = tokio::select! {
            r = muster_query::arrival::recv_from(&socket, &mut buf) => match r {
                Ok(r) => r,
                // ICMP errors from earlier replies surface as receive errors on Linux.
                Err(e) if is_transient(&e) => continue,
                Err(e) => return Err(e),
            },
            r = shutdown.changed(), if stopping.is_none() => {
                if r.is_err() || *shutdown.borrow() {
                    let now = tokio::time::Instant::now().into_std();
                    for reg in &mut registrars {
                        reg.shutdown(now);
                    }
                    stopping = Some(now);
                }
                continue;
            }
            r = state.changed(), if state_open => {
                // A dropped sender means the state is final.
                state_open = r.is_ok();
                if r.is_ok() {
                    let now = tokio::time::Instant::now().into_std();
                    let current = state.borrow().clone();
                    for reg in &mut registrars {
                        reg.handle_state_change(now, &current);
                    }
                }
                continue;
            }
            Some((i, response, sent)) = http_rx.recv() => {
                let now = tokio::time::Instant::now().into_std();
                if let Some(slot) = exchanges.get_mut(i) {
                    *slot = Some(format!("{sent}; {}", describe_answer(&response)));
                }
                if let Some(reg) = registrars.get_mut(i) {
                    reg.handle_http_response(now, response.as_ref().ok().map(|(s, b)| (*s, b.as_slice())));
                }
                continue;
            }
            () = sleep => {
                let now = tokio::time::Instant::now().into_std();
                let current = state.borrow().clone();
                for reg in &mut registrars {
                    if reg.poll_timeout().is_some_and(|t| t <= now) {
                        reg.handle_timeout(now, &current);
                    }
                }
                continue;
            }
        };
        Stats::bump(&stats.received);
        let now = tokio::time::Instant::now().into_std();
        let datagram = buf.get(..n).unwrap_or_default();
        let current = state.borrow().clone();
        if registrars
            .iter_mut()
            .any(|r| r.handle_datagram(now, from, datagram, &current))
        {
            continue;
        }
        if stopping.is_some() {
            continue;
        }
        if now.duration_since(last_prune) > Duration::from_secs(60) {
            limiter.prune(now);
            last_prune = now;
        }
        if impairment.loss > 0.0 && rng.random_bool(impairment.loss.clamp(0.0, 1.0)) {
            Stats::bump(&stats.impaired);
            continue;
        }
        if !limiter.allow(from.ip(), now, 1.0) {
            Stats::bump(&stats.rate_limited);
            continue;
        }
        replies.clear();
        if !responder.handle_datagram(now, from, datagram, &current, &mut replies) {
            Stats::bump(&stats.bad);
            continue;
        }
        if replies.is_empty() {
            continue;
        }
        let total: usize = replies.iter().map(|r| r.bytes.len()).sum();
        if !budget.spend(total, now) {
            Stats::bump(&stats.over_budget);
            continue;
        }
        Stats::bump(&stats.answered);
        if replies.len() > 1
            && impairment.reorder > 0.0
            && rng.random_bool(impairment.reorder.clamp(0.0, 1.0))
        {
            replies.reverse();
        }
        if impairment.delay.is_zero() {
            send_all(&socket, &replies, &stats).await;
        } else {
            // Due counting from the request's arrival at the socket (not from its read, which
            // in a burst comes after the earlier requests are answered), on the real clock
            // (the line's thread sleeps on it), whatever the runtime's own clock says.
            let due = received + impairment.delay;
            crate::delay::hold(
                due,
                socket.clone(),
                std::mem::take(&mut replies),
                stats.clone(),
            );
        }
    }
}

/// Send what the registrars want sent and start their HTTP requests.
async fn pump_registrars(
    registrars: &mut [BoxedRegistrar],
    socket: &UdpSocket,
    now: Instant,
    http_tx: &mpsc::UnboundedSender<HttpAnswer>,
    http: &mut Option<reqwest::Client>,
    events: &Option<mpsc::UnboundedSender<RegistrarEvent>>,
    exchanges: &mut [Option<String>],
) {
    let mut out = Vec::new();
    for (i, reg) in registrars.iter_mut().enumerate() {
        loop {
            out.clear();
            let Some(t) = reg.poll_transmit(now, &mut out) else {
                break;
            };
            if let Err(e) = socket.send_to(&out, t.destination).await {
                tracing::debug!(to = %t.destination, error = %e, "registration datagram not sent");
            }
        }
        while let Some(request) = reg.poll_http(now) {
            let sent = describe_request(&request);
            tracing::debug!("registration: {sent}");
            let client = match http {
                Some(c) => c.clone(),
                None => match reqwest::Client::builder().timeout(HTTP_TIMEOUT).build() {
                    Ok(c) => {
                        *http = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        let _ = http_tx.send((i, Err(muster_proto::errors::error_chain(&e)), sent));
                        continue;
                    }
                },
            };
            let tx = http_tx.clone();
            tokio::spawn(async move {
                let _ = tx.send((i, http_request(&client, request).await, sent));
            });
        }
        while let Some(ev) = reg.poll_event() {
            let exchange = exchanges.get(i).and_then(Option::as_deref);
            log_event(&ev, exchange);
            if let Some(events) = events {
                let _ = events.send(ev);
            }
        }
    }
}

async fn http_request(
    client: &reqwest::Client,
    req: HttpRequest,
) -> Result<(u16, Vec<u8>), String> {
    let method = reqwest::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| format!("bad method {:?}", req.method))?;
    let mut builder = client.request(method, &req.url);
    for (k, v) in &req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    if req.body.is_empty() {
        // hyper sends no length for an empty body; DDNet's own client sends
        // `Content-Length: 0`, and DDNet's master answers 411 Length Required without it.
        builder = builder.header(reqwest::header::CONTENT_LENGTH, "0");
    }
    let response = builder
        .body(req.body)
        .send()
        .await
        .map_err(|e| muster_proto::errors::error_chain(&e))?;
    let status = response.status().as_u16();
    // Register answers are tiny; anything large is not a master talking.
    let body = response
        .bytes()
        .await
        .map_err(|e| muster_proto::errors::error_chain(&e))?;
    Ok((
        status,
        body.get(..body.len().min(64 << 10))
            .unwrap_or_default()
            .to_vec(),
    ))
}

fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::Interrupted
    )
}

pub(crate) async fn send_all(socket: &UdpSocket, replies: &[Reply], stats: &Stats) {
    for reply in replies {
        match socket.send_to(&reply.bytes, reply.to).await {
            Ok(_) => Stats::bump(&stats.sent),
            Err(e) => tracing::debug!(to = %reply.to, error = %e, "reply not sent"),
        }
    }
}

/// Bind a UDP socket for serving; `addr` with port 0 picks a free port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    UdpSocket::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_described_without_secrets() {
        let req = HttpRequest {
            method: "POST",
            url: "http://127.0.0.1:8080/ddnet/15/regster".into(),
            headers: vec![
                (
                    "Address".into(),
                    "tw-0.6+udp://connecting-address.invalid:8303".into(),
                ),
                (
                    "Secret".into(),
                    "d9a6a2bd-2ad4-4b64-9a6f-0000000000aa".into(),
                ),
            ],
            body: vec![b'{'; 12],
        };
        let d = describe_request(&req);
        assert_eq!(
            d,
            "sent POST /ddnet/15/regster HTTP/1.1 to http://127.0.0.1:8080/ddnet/15/regster \
             with headers Address, Secret (values not shown) and a 12-byte body"
        );
        assert!(!d.contains("d9a6a2bd"));
    }

    #[test]
    fn answers_are_quoted_short_and_printable() {
        let long = format!("not found\n{}", "x".repeat(300));
        let d = describe_answer(&Ok((404, long.into_bytes())));
        assert!(d.starts_with("got HTTP 404 \"not found xxx"), "{d}");
        assert!(d.ends_with("…\""), "{d}");
        assert!(d.chars().count() < 230, "{d}");
        assert_eq!(
            describe_answer(&Err("connection refused".into())),
            "got no answer: connection refused"
        );
    }
}
