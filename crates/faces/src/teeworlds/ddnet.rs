//! DDNet's HTTP master face: `POST /ddnet/15/register` and `GET /ddnet/15/servers.json`
//! (`teeworlds-master.md` §3), answering every request as DDNet's own master (`mastersrv`)
//! does: same checks in the same order, same status, same JSON body (with its trailing
//! newline).
//!
//! ```text
//! POST /ddnet/15/register, checked in this order (the first failing check answers):
//!   no Content-Length                  411 A content-length header is required
//!   Content-Length > body limit        413 The request payload is too large
//!   Action other than "delete"         400 Unknown Action header value …
//!   Action: delete   Address, Secret   400 invalid / missing header …
//!                    unknown address   400 could not find registered server
//!                    else              200 success (once stored; else 503: `delete()`)
//!   Address, Secret, Connless-Token, Challenge-Secret, Challenge-Token, Community-Token,
//!   Info-Serial (request.rs)           400 invalid header … / missing required header …
//!   body without a JSON Content-Type   415 The request's Content-Type is not supported
//!   body not JSON                      400 Request body deserialize error: <serde_json>
//!   tw-0.7+udp without Connless-Token  400, bad hex in it 400
//!   Community-Token malformed          400
//!   no valid Challenge-Token           200 need_challenge            + UDP chal
//!   info not an object                 400 register info must be an object
//!   no info at this serial             200 need_info                 (+ chal if token stale)
//!   else                               200 success (once stored)     (+ chal if token stale)
//! GET /ddnet/15/servers.json  {"servers":[{"addresses":[…],"info":{…}}]}\n  (gzip when asked)
//! ```
//!
//! The registry keeps what a server registered ([`muster_core::registry::DdnetData`]): its `Secret`,
//! the info of the highest `Info-Serial` seen, shared by all its addresses (§3.6; so a
//! body-less POST from a second stream is `success`, quirk 7), and the streams with their last
//! POST. The info is kept as the reference master keeps it: parsed and written back compact,
//! key order kept. A success is answered only once it is in the store, except for a refresh that
//! moves only times of a stored record (stored with the next periodic flush, a second at most);
//! a retry of a registration whose write failed or timed out (answered 503) is no such refresh:
//! it waits for a successful write like the first attempt ([`MasterHandle::unstored`]). The listed address is
//! the HTTP peer's IP with the port of `Address`; an IPv4-mapped peer becomes IPv4.
//!
//! `servers.json` is built from the view off the reactor, one build at a time, sorted as the
//! reference master sorts it (by address list; an address by IP, port, protocol); its gzip
//! form is made once per document, on the first request that accepts gzip. Both are kept in
//! unnamed files in the data directory, else memory files ([`muster_core::memfile`]):
//! their pages sit in the page cache, and a plain `GET` is answered before the router
//! with `sendfile` ([`router_and_files`], [`crate::runtime::http::FileRoute`]), the way
//! nginx serves the reference master's file; a conditional or cross-origin one goes through
//! the router, which reads the document into memory once for such requests. A document shows
//! a snapshot's content (its content version: heartbeats and unchanged refreshes keep it
//! current). One that is cheap to build ([`FRESH_BUILD`]) follows every change of content (a
//! request waits for the rebuild); a costly one is rebuilt at most once per four times its
//! cost (while the rebuild runs, requests get the previous document), so a busy master spends
//! at most a quarter of a core on it whatever its churn, as the reference master writes its
//! file once a second.
//!
//! Abuse limits beyond the reference master's (they answer only past normal use): per-source
//! buckets on POSTs (429 with `Retry-After`), on UDP challenges (not sent) and on `servers.json`
//! (429), each growing with the servers the source registered (a hosting box's servers share
//! its address: [`muster_proto::limit`]); a global egress budget for
//! challenges; the registry's caps (per source, addresses per server: 429); an info that
//! grows past [`MAX_DDNET_INFO`] when re-written (413). A challenge goes only to the IP that
//! opened the TCP connection (behind a trusted reverse proxy: the client's IP it names).
//!
//! An entry gets a `location` when the daemon has a locations table (config
//! `ddnet.locations`, [`muster_core::locations`]): that of its first address that has one, in
//! the sorted order, as the reference master does.
//!
//! Does not: ban, or keep communities. The HTTP server must put the client's address in each
//! request ([`crate::runtime::http::serve`] does: the peer's, or behind a trusted reverse proxy
//! the one its header names, `limits.connecting_ip_header`).

mod info;
mod request;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, ByteBudget, SourceKey, SourceLimiter};
use muster_proto::teeworlds_master::packet::Challenge;
use muster_proto::teeworlds_master::{
    Framing, MAX_REGISTER_BODY, Message, Packet, RegisterInfo, RegisterResponse, Token,
};
use serde_json::{Value, json};
use tokio::net::UdpSocket;

use self::info::OrderedJson;
use self::request::{DeleteHeaders, RegisterHeaders, StreamProtocol};
use super::LISTED_BY_07;
use super::tokens::{ChallengeCheck, Tokens};
use crate::runtime::http::{FileAnswer, FileResponse, FileRoute};
use muster_core::MasterHandle;
use muster_core::drops::DropReason;
use muster_core::memfile::MemFile;
use muster_core::metrics::Metrics;
use muster_core::registry::{
    DdnetInfo, DdnetOutcome, DdnetRegister, DdnetSecret, Face, GameAddr, MAX_DDNET_INFO, PollInfo,
    Registration, ServerKey, TEEWORLDS_GAMES, Timestamp,
};
use muster_core::views::Snapshot;

/// The game name DDNet HTTP registrations are listed under.
pub const GAME_DDNET: &str = "ddnet";
/// The register path.
pub const REGISTER_PATH: &str = "/ddnet/15/register";
/// The list path.
pub const SERVERS_JSON_PATH: &str = "/ddnet/15/servers.json";
/// A `servers.json` build at most this costly follows every snapshot; a costlier one is
/// refreshed in the background at most once per four times its cost.
pub const FRESH_BUILD: Duration = Duration::from_millis(50);

/// Knobs of the DDNet HTTP face, with the spec defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DdnetSettings {
    /// Register POSTs per source: burst (a server POSTs once per stream per 15 s, up to four
    /// streams, and many servers may share one IP).
    pub register_burst: u32,
    /// One more POST per source every this long.
    pub register_refill: Duration,
    /// UDP challenges per source: burst.
    pub challenge_burst: u32,
    /// One more challenge per source every this long.
    pub challenge_refill: Duration,
    /// `servers.json` requests per source: burst.
    pub servers_json_burst: u32,
    /// One more `servers.json` request per source every this long.
    pub servers_json_refill: Duration,
    /// Every bucket of a source grows by one budget per server the source has registered,
    /// counting this many at most (0: never; see [`muster_proto::limit`]).
    pub proven_servers_max: u32,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Egress budget of the challenge socket, bytes per second.
    pub egress_bytes_per_sec: u64,
    /// Largest register body (§3.6: 16 KiB in the 16.4 era, 32 KiB now).
    pub body_limit: usize,
    /// Where `servers.json` and its gzip form are kept, as unnamed files (the data directory):
    /// the page cache holds them, as it holds the file nginx serves for mastersrv. `None`, or
    /// a directory that cannot take one: anonymous memory files ([`MemFile::written_in`]).
    pub body_dir: Option<std::path::PathBuf>,
}

impl Default for DdnetSettings {
    fn default() -> Self {
        Self {
            register_burst: 64,
            register_refill: Duration::from_millis(100),
            challenge_burst: 16,
            challenge_refill: Duration::from_secs(1),
            servers_json_burst: 16,
            servers_json_refill: Duration::from_secs(1),
            proven_servers_max: 1024,
            max_tracked_sources: 100_000,
            egress_bytes_per_sec: 1 << 20,
            body_limit: MAX_REGISTER_BODY,
            body_dir: None,
        }
    }
}

#[derive(Debug)]
struct Limits {
    register: SourceLimiter,
    challenge: SourceLimiter,
    servers_json: SourceLimiter,
    budget: ByteBudget,
}

/// One built `servers.json`: the snapshot content version it shows, when it was built and
/// what the build cost; its gzip form once a request asked for it.
#[derive(Debug)]
struct Doc {
    /// Unique per build in this process (for the ETag).
    id: u64,
    version: u64,
    built: Instant,
    cost: Duration,
    plain: MemFile,
    gz: tokio::sync::OnceCell<MemFile>,
    /// The plain and gzip bytes in memory, read once for the router's answers (conditional,
    /// cross-origin and HEAD requests, HTTP/1.0) if any come.
    heap_plain: tokio::sync::OnceCell<Bytes>,
    heap_gz: tokio::sync::OnceCell<Bytes>,
}

impl Doc {
    /// The ETag of the plain or gzip form: names this build, so that the middleware that
    /// hashes other bodies skips this one.
    fn tag(&self, gzip: bool) -> String {
        format!(
            "\"sj-{:x}-{:x}{}\"",
            process_nonce() ^ self.id,
            self.plain.len(),
            if gzip { "-gz" } else { "" }
        )
    }

    /// The headers of the plain or gzip form, whether sent from the file or by the router.
    /// `Content-Encoding` only for the gzip form, as nginx sends a file (the router's answer
    /// is marked [`crate::runtime::http::Precompressed`], so the HTTP layer does not compress it again).
    fn headers(&self, gzip: bool) -> Vec<(header::HeaderName, String)> {
        let mut h = vec![
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::VARY, "accept-encoding".to_owned()),
            (header::ETAG, self.tag(gzip)),
            (header::CACHE_CONTROL, "no-cache".to_owned()),
        ];
        if gzip {
            h.push((header::CONTENT_ENCODING, "gzip".to_owned()));
        }
        h
    }
}

/// The current document and whether a rebuild runs.
#[derive(Debug, Default)]
struct Docs {
    doc: Option<Arc<Doc>>,
    building: bool,
}

/// The shared state behind the routes.
#[derive(Debug)]
struct DdnetFace {
    handle: MasterHandle,
    settings: DdnetSettings,
    sockets: Vec<Arc<UdpSocket>>,
    tokens: Tokens,
    limits: Mutex<Limits>,
    docs: Mutex<Docs>,
    /// Woken when a rebuild ends.
    built: tokio::sync::Notify,
    /// Deletes answered 503 (see [`delete`]): per secret and stream URL, the registry version
    /// the store must reach. At most [`MAX_PENDING_DELETES`].
    pending_deletes: Mutex<std::collections::HashMap<PendingDelete, u64>>,
}

/// A delete's secret and stream URL.
type PendingDelete = (Box<str>, Box<str>);

/// Most deletes answered 503 that a retry can still find (see `delete()`); past it, a retry of
/// one more is answered as an unknown server (the removal still converges).
pub const MAX_PENDING_DELETES: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The DDNet routes over `handle`. `challenge_sockets` send the UDP `chal` datagrams (bind them
/// to `0.0.0.0:0` and `[::]:0`; one per family is enough, the first of the peer's family is
/// used).
pub fn router(
    handle: MasterHandle,
    challenge_sockets: Vec<Arc<UdpSocket>>,
    settings: DdnetSettings,
) -> Router {
    router_and_files(handle, challenge_sockets, settings).0
}

/// [`router`], and the [`FileRoute`] that sends its `servers.json` from its file; give
/// both to [`crate::runtime::http::serve`].
pub fn router_and_files(
    handle: MasterHandle,
    challenge_sockets: Vec<Arc<UdpSocket>>,
    settings: DdnetSettings,
) -> (Router, Arc<dyn FileRoute>) {
    let n = settings.max_tracked_sources;
    let grow = settings.proven_servers_max;
    let bucket = |burst, refill| SourceLimiter::new(BucketConfig::one_every(burst, refill), n);
    let limits = Limits {
        register: bucket(settings.register_burst, settings.register_refill).with_growth(grow),
        challenge: bucket(settings.challenge_burst, settings.challenge_refill).with_growth(grow),
        servers_json: bucket(settings.servers_json_burst, settings.servers_json_refill)
            .with_growth(grow),
        budget: ByteBudget::new(settings.egress_bytes_per_sec),
    };
    let face = Arc::new(DdnetFace {
        handle,
        settings,
        sockets: challenge_sockets,
        tokens: Tokens::random(super::tokens::CHALLENGE_SEED_PERIOD),
        limits: Mutex::new(limits),
        docs: Mutex::new(Docs::default()),
        built: tokio::sync::Notify::new(),
        pending_deletes: Mutex::default(),
    });
    let router = Router::new()
        .route(
            REGISTER_PATH,
            post(register).fallback(|| async {
                error(StatusCode::METHOD_NOT_ALLOWED, request::METHOD_NOT_ALLOWED)
            }),
        )
        .route(SERVERS_JSON_PATH, get(servers_json))
        .with_state(Arc::clone(&face));
    (router, Arc::new(ServersJsonFile(face)))
}

/// `servers.json` sent from its file (see the module docs).
#[derive(Debug)]
struct ServersJsonFile(Arc<DdnetFace>);

impl FileRoute for ServersJsonFile {
    fn respond(
        &self,
        path: &str,
        headers: &[httparse::Header<'_>],
        peer: SocketAddr,
    ) -> Option<FileAnswer> {
        if path != SERVERS_JSON_PATH {
            return None;
        }

        let gzip = accepts_gzip_in(
            headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"))
                .map(|h| h.value),
        );
        let face = Arc::clone(&self.0);
        Some(Box::pin(async move {
            let doc = current_document(&face).await;
            let body = if gzip {
                gzipped(&face, &doc).await
            } else {
                doc.plain.clone()
            };
            // A body in the heap (no file could be made) goes through the router.
            let MemFile::File { file, len } = body else {
                return None;
            };
            // Refused: the router answers, and refuses it the same way (429).
            if !face.allow_servers_json(peer.ip(), false) {
                return None;
            }
            face.handle.metrics().count_list_request("ddnet");
            let mut head = String::from("HTTP/1.1 200 OK\r\n");
            for (name, value) in doc.headers(gzip) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str(&format!(
                "content-length: {len}\r\ndate: {}\r\n\r\n",
                httpdate::fmt_http_date(std::time::SystemTime::now())
            ));
            Some(FileResponse {
                head: head.into_bytes(),
                file,
                len,
            })
        }))
    }
}

fn now_instant() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// `429 Too Many Requests` with `Retry-After`, as a register answer.
fn too_many(retry_after: Duration) -> Response {
    let mut res = error(StatusCode::TOO_MANY_REQUESTS, "rate limited");
    res.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after.as_secs().max(1)),
    );
    res
}

impl DdnetFace {
    /// Takes a `servers.json` token for `ip`; a refusal is counted when `count`.
    fn allow_servers_json(&self, ip: IpAddr, count: bool) -> bool {
        let ok = lock(&self.limits)
            .servers_json
            .allow_proven(ip, now_instant(), 1.0, |k| self.handle.proven_servers(k));
        if !ok && count {
            self.handle
                .metrics()
                .count_bucket_refusal("servers_json", ip);
        }
        ok
    }
}

/// A register answer: the JSON body and the newline the reference master ends it with.
fn json_response(status: StatusCode, r: &RegisterResponse) -> Response {
    let mut body = Vec::with_capacity(64);
    r.encode(&mut body);
    body.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &RegisterResponse::Error {
            message: message.to_owned(),
        },
    )
}

/// A 400 the reference master gives too, counted as malformed.
fn bad_request(m: &Metrics, message: &str) -> Response {
    m.count_drop(DropReason::Malformed);
    error(StatusCode::BAD_REQUEST, message)
}

fn peer_ip(req: &Request) -> Option<IpAddr> {
    let ConnectInfo(addr) = req.extensions().get::<ConnectInfo<SocketAddr>>()?;
    Some(match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    })
}

/// The URL a stream is listed under (`tw-0.6+udp://1.2.3.4:8303`, IPv6 in brackets), also
/// the subject of its challenge token.
fn stream_url(protocol: StreamProtocol, addr: SocketAddr) -> String {
    format!("{}://{addr}", protocol.as_str())
}

/// The registration of a DDNet server listed at `addr`.
#[must_use]
pub fn ddnet_registration(addr: SocketAddr) -> Registration {
    Registration {
        key: ServerKey::new(GAME_DDNET, GameAddr::Ip(addr)),
        face: Face::DdnetHttp,
        game_port: Some(addr.port()),
        query_addr: Some(addr),
        query_protocol: Some(Protocol::Teeworlds),
        source: SourceKey::of(addr.ip()),
    }
}

/// The info as DDNet's master stores it: `json` (which must be valid JSON) parsed and written
/// back compact, the key order kept (a repeated key: first place, last value). `None` when it
/// is not JSON.
#[must_use]
pub fn normalized_info(json: &[u8]) -> Option<Vec<u8>> {
    serde_json::from_slice::<OrderedJson>(json)
        .ok()
        .map(|v| v.to_compact())
}

/// The registry's view of a registered info (name, map, players, …), when it has the schema
/// DDNet sends.
fn poll_info_of(raw: &[u8]) -> Option<PollInfo> {
    let info: RegisterInfo = serde_json::from_slice(raw).ok()?;
    Some(PollInfo::from_server_info(&info.to_server_info()))
}

async fn register(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    let m = face.handle.metrics();
    let Some(ip) = peer_ip(&req) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no peer address");
    };
    let allowed = lock(&face.limits)
        .register
        .allow_proven(ip, now_instant(), 1.0, |k| face.handle.proven_servers(k));
    if !allowed {
        m.count_bucket_refusal("ddnet_register", ip);
        return too_many(face.settings.register_refill);
    }
    let (parts, body) = req.into_parts();
    // The body limit goes by Content-Length, which must be there (as warp's
    // `content_length_limit` in the reference master), before anything else is looked at.
    let Some(length) = request::content_length(&parts.headers) else {
        m.count_drop(DropReason::Malformed);
        return error(StatusCode::LENGTH_REQUIRED, request::LENGTH_REQUIRED);
    };
    let limit = face.settings.body_limit;
    let too_large = || {
        m.count_drop(DropReason::TooLarge);
        error(StatusCode::PAYLOAD_TOO_LARGE, request::PAYLOAD_TOO_LARGE)
    };
    if usize::try_from(length).map_or(true, |n| n > limit) {
        return too_large();
    }
    let Ok(body) = axum::body::to_bytes(Body::new(body), limit).await else {
        return too_large();
    };
    let headers = &parts.headers;
    match headers.get("Action").map(HeaderValue::as_bytes) {
        None => match request::register_headers(headers) {
            Ok(h) => register_post(&face, ip, &h, headers, &body).await,
            Err(e) => bad_request(m, &e),
        },
        Some(v) if v == request::ACTION_DELETE => match request::delete_headers(headers) {
            Ok(d) => delete(&face, ip, &d).await,
            Err(e) => bad_request(m, &e),
        },
        Some(other) => bad_request(m, &request::unknown_action(other)),
    }
}

/// A registration whose headers passed: the body, the 0.7 token, the community token, the
/// challenge, then the registry; a challenge goes out unless the answer is an error.
async fn register_post(
    face: &DdnetFace,
    ip: IpAddr,
    h: &RegisterHeaders<'_>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let m = face.handle.metrics();
    let info = if body.is_empty() {
        None
    } else if !request::is_json(headers) {
        m.count_drop(DropReason::Malformed);
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            request::UNSUPPORTED_MEDIA_TYPE,
        );
    } else {
        match serde_json::from_slice::<OrderedJson>(body) {
            Ok(v) => Some(v),
            Err(e) => return bad_request(m, &format!("Request body deserialize error: {e}")),
        }
    };
    let token07 = match request::connless_token(h.address.protocol, h.connless_token) {
        Ok(t) => t,
        Err(e) => return bad_request(m, &e),
    };
    let addr = SocketAddr::new(ip, h.address.port);
    let url = stream_url(h.address.protocol, addr);
    let now = Timestamp::now();
    let check = h.challenge_token.map_or(ChallengeCheck::Invalid, |t| {
        face.tokens.check_challenge(&url, t, now)
    });
    if let Some(e) = h.community_token.and_then(request::community_token_error) {
        return bad_request(m, &e);
    }
    let response = if check == ChallengeCheck::Invalid {
        if h.challenge_token.is_some() {
            m.count_verification_failed();
        }
        json_response(StatusCode::OK, &RegisterResponse::NeedChallenge)
    } else {
        if info.as_ref().is_some_and(|v| !v.is_object()) {
            return bad_request(m, request::NOT_AN_OBJECT);
        }
        list(face, h, addr, &url, info.as_ref(), now).await
    };
    if check != ChallengeCheck::Current {
        send_challenge(face, h.challenge_secret, token07, &url, addr, now).await;
    }
    response
}

/// A registration with a valid challenge token: into the registry, and acknowledged once
/// stored.
async fn list(
    face: &DdnetFace,
    h: &RegisterHeaders<'_>,
    addr: SocketAddr,
    url: &str,
    info: Option<&OrderedJson>,
    now: Timestamp,
) -> Response {
    let m = face.handle.metrics();
    let raw = info.map(|v| Bytes::from(v.to_compact()));
    if raw.as_ref().is_some_and(|r| r.len() > MAX_DDNET_INFO) {
        m.count_drop(DropReason::TooLarge);
        return error(StatusCode::PAYLOAD_TOO_LARGE, "info too large");
    }
    let d = DdnetRegister {
        addr,
        secret: DdnetSecret::from(h.secret),
        serial: h.info_serial,
        poll_info: raw.as_deref().and_then(poll_info_of),
        info: raw,
        url: Arc::from(url),
    };
    let reg = ddnet_registration(addr);
    let key = reg.key.clone();
    let out = face.handle.ddnet_register(d, reg, now);
    match out {
        DdnetOutcome::NeedInfo => json_response(StatusCode::OK, &RegisterResponse::NeedInfo),
        DdnetOutcome::Rejected(why) => error(StatusCode::TOO_MANY_REQUESTS, why.name()),
        DdnetOutcome::Refreshed | DdnetOutcome::Success => {
            // Acknowledged only once stored. A refresh of a stored record moves only times
            // (a crash loses at most those, until the next periodic flush) and is answered at
            // once; but a record whose registration the store has not confirmed (an earlier
            // attempt answered 503, or one still waiting) is not stored, and its refresh waits
            // for the same write as a new registration.
            if let Some(version) = face.handle.unstored(&key) {
                if let Err(e) = face.handle.durable(version).await {
                    m.count_drop(DropReason::NotStored);
                    tracing::warn!(error = %muster_proto::errors::error_chain(&e), "ddnet registration not stored");
                    return error(StatusCode::SERVICE_UNAVAILABLE, "storage failed");
                }
            }
            if out == DdnetOutcome::Success {
                // Once the lists show it, too.
                face.handle.visible(face.handle.version()).await;
            }
            json_response(StatusCode::OK, &RegisterResponse::Success)
        }
    }
}

/// Sends the UDP `chal` for `url` to `to` (0.7 framing with the request's token), within the
/// per-source bucket and the egress budget.
async fn send_challenge(
    face: &DdnetFace,
    challenge_secret: &str,
    token07: Option<[u8; 4]>,
    url: &str,
    to: SocketAddr,
    now: Timestamp,
) {
    let m = face.handle.metrics();
    let token = face.tokens.challenge(url, now);
    let Ok(chal) = Challenge::new(challenge_secret.as_bytes(), token.as_bytes()) else {
        // Cannot happen: both are short visible ASCII.
        m.count_drop(DropReason::Malformed);
        return;
    };
    let framing = match token07 {
        Some(t) => Framing::V07 {
            token: Token(t),
            response_token: Token::NONE,
        },
        None => Framing::STANDARD_06,
    };
    let p = Packet::Connless {
        framing,
        message: Message::Challenge(chal),
    };
    let mut bytes = Vec::with_capacity(p.encoded_len());
    p.encode(&mut bytes);
    let ok = {
        let mut l = lock(&face.limits);
        let t = now_instant();
        l.challenge
            .allow_proven(to.ip(), t, 1.0, |k| face.handle.proven_servers(k))
            && l.budget.spend(bytes.len(), t)
    };
    if !ok {
        m.count_bucket_refusal("ddnet_challenge", to.ip());
        return;
    }
    let Some(socket) = face
        .sockets
        .iter()
        .find(|s| s.local_addr().is_ok_and(|a| a.is_ipv4() == to.is_ipv4()))
    else {
        m.count_drop(DropReason::NoChallengeSocket);
        return;
    };
    if let Err(e) = socket.send_to(&bytes, to).await {
        tracing::debug!(%to, error = %e, "challenge send failed");
    }
}

/// `Action: delete`: the stream goes if it is registered at the peer's IP under this secret.
///
/// The stream leaves the registry (and the lists) at once; `success` is answered only once the
/// store has the removal. When the store does not confirm it within the durable timeout (a
/// full disk) the answer is 503: the removal stands in memory and the persister keeps writing
/// it until the store takes it, but a restart before then would load the stream again (to
/// expire by its lifetime). A retry of that delete no longer finds the stream, so the face
/// keeps the version it waits for ([`MAX_PENDING_DELETES`]): the retry is answered `success`
/// once the store has it, 503 while not.
async fn delete(face: &DdnetFace, ip: IpAddr, d: &DeleteHeaders<'_>) -> Response {
    let url = stream_url(d.address.protocol, SocketAddr::new(ip, d.address.port));
    let m = face.handle.metrics();
    let pending_key: PendingDelete = (Box::from(d.secret), Box::from(url.as_str()));
    let removed = face
        .handle
        .write(|r| r.ddnet_delete(d.secret, &url).map(|_| r.version()));
    let version = match removed {
        Some(v) => v,
        None => match lock(&face.pending_deletes).get(&pending_key).copied() {
            Some(v) => v,
            None => {
                m.count_drop(DropReason::UnknownServer);
                return error(StatusCode::BAD_REQUEST, request::NOT_FOUND);
            }
        },
    };
    if let Err(e) = face.handle.durable(version).await {
        m.count_drop(DropReason::NotStored);
        tracing::warn!(error = %muster_proto::errors::error_chain(&e), "ddnet deletion not stored");
        let persisted = face.handle.persisted();
        let mut pending = lock(&face.pending_deletes);
        pending.retain(|_, v| *v > persisted);
        if pending.len() < MAX_PENDING_DELETES || pending.contains_key(&pending_key) {
            pending.insert(pending_key, version);
        }
        return error(StatusCode::SERVICE_UNAVAILABLE, "storage failed");
    }
    lock(&face.pending_deletes).remove(&pending_key);
    // Read-your-writes: once the goodbye is answered, no list shows the stream.
    face.handle.visible(version).await;
    json_response(StatusCode::OK, &RegisterResponse::Success)
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    accepts_gzip_in(
        headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .map(HeaderValue::as_bytes),
    )
}

/// Whether these `Accept-Encoding` values accept gzip.
fn accepts_gzip_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut it = e.split(';');
            let name = it.next().unwrap_or_default().trim();
            let q0 = it.any(|p| p.trim().replace(' ', "") == "q=0");
            name.eq_ignore_ascii_case("gzip") && !q0
        })
}

async fn servers_json(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    if let Some(ip) = peer_ip(&req)
        && !face.allow_servers_json(ip, true)
    {
        return too_many(face.settings.servers_json_refill);
    }
    face.handle.metrics().count_list_request("ddnet");
    let doc = current_document(&face).await;
    let gzip = accepts_gzip(req.headers());
    let tag = doc.tag(gzip);
    let not_modified = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| crate::runtime::http::none_match_hits(v, &tag));
    if not_modified {
        let mut res = Response::new(Body::empty());
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        if let Ok(v) = HeaderValue::from_str(&tag) {
            res.headers_mut().insert(header::ETAG, v);
        }
        return res;
    }
    let file = if gzip {
        gzipped(&face, &doc).await
    } else {
        doc.plain.clone()
    };
    // Read back from its file once per document: few requests come here, plain GETs
    // are sent from the file.
    let heap = if gzip { &doc.heap_gz } else { &doc.heap_plain };
    let body = heap
        .get_or_try_init(|| async move {
            match muster_core::bulk::spawn(move || file.bytes()).await {
                Ok(Ok(b)) => Ok(b),
                _ => Err(()),
            }
        })
        .await;
    let Ok(body) = body.cloned() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "servers.json could not be read",
        );
    };
    let mut res = Response::new(Body::from(body));
    res.extensions_mut()
        .insert(crate::runtime::http::Precompressed);
    let h = res.headers_mut();
    for (name, value) in doc.headers(gzip) {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    res
}

/// The document to serve now (see the module docs): the current one when it shows the latest
/// snapshot, or when it is costly and was built less than four of its costs ago, or while a
/// background rebuild of a costly one runs; else the one a rebuild makes (one at a time).
async fn current_document(face: &Arc<DdnetFace>) -> Arc<Doc> {
    loop {
        let view = face.handle.snapshot();
        // Registered before looking, so that a rebuild ending in between is not missed.
        let built = face.built.notified();
        tokio::pin!(built);
        built.as_mut().enable();
        let next = {
            let mut docs = lock(&face.docs);
            let costly = docs.doc.as_ref().is_some_and(|d| d.cost > FRESH_BUILD);
            let fresh = docs.doc.as_ref().is_some_and(|d| {
                d.version == view.content_version()
                    || (costly
                        && now_instant().saturating_duration_since(d.built)
                            < d.cost.saturating_mul(4))
            });
            match docs.doc.clone() {
                Some(d) if fresh || (costly && docs.building) => Next::Serve(d),
                _ if docs.building => Next::Wait,
                stale => {
                    docs.building = true;
                    let f = Arc::clone(face);
                    let job = tokio::spawn(async move { rebuild(&f, view).await });
                    match stale.filter(|_| costly) {
                        Some(d) => Next::Serve(d),
                        None => Next::Join(job),
                    }
                }
            }
        };
        match next {
            Next::Serve(d) => return d,
            Next::Join(job) => match job.await {
                Ok(d) => return d,
                Err(_) => {
                    // The rebuild task died: let the next request try again.
                    lock(&face.docs).building = false;
                    face.built.notify_waiters();
                }
            },
            Next::Wait => built.await,
        }
    }
}

/// What a request does about the document.
enum Next {
    Serve(Arc<Doc>),
    Join(tokio::task::JoinHandle<Arc<Doc>>),
    Wait,
}

/// Builds the document of `view` off the reactor and makes it current.
async fn rebuild(face: &DdnetFace, view: Arc<Snapshot>) -> Arc<Doc> {
    let t = now_instant();
    let version = view.content_version();
    let dir = face.settings.body_dir.clone();
    let plain = muster_core::bulk::spawn(move || {
        MemFile::written_in(dir.as_deref(), "servers.json", |out| {
            write_document(&view, out)
        })
    })
    .await
    .unwrap_or(MemFile::Heap(Bytes::new()));
    let doc = Arc::new(Doc {
        id: next_doc_id(),
        version,
        built: now_instant(),
        cost: now_instant().saturating_duration_since(t),
        plain,
        gz: tokio::sync::OnceCell::new(),
        heap_plain: tokio::sync::OnceCell::new(),
        heap_gz: tokio::sync::OnceCell::new(),
    });
    {
        let mut docs = lock(&face.docs);
        docs.doc = Some(Arc::clone(&doc));
        docs.building = false;
    }
    face.built.notify_waiters();
    doc
}

/// The gzip form of `doc`, made once (off the reactor) by the first request that asks.
async fn gzipped(face: &DdnetFace, doc: &Doc) -> MemFile {
    doc.gz
        .get_or_init(|| async {
            let src = doc.plain.clone();
            let dir = face.settings.body_dir.clone();
            muster_core::bulk::spawn(move || {
                // Streamed from one file into the other: neither form is held whole.
                MemFile::written_in(dir.as_deref(), "servers.json.gz", |out| {
                    let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                    src.write_to(&mut e)?;
                    e.finish().map(drop)
                })
            })
            .await
            .unwrap_or(MemFile::Heap(Bytes::new()))
        })
        .await
        .clone()
}

/// A number for each document built by this process.
fn next_doc_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A random number drawn once per process, so ETags of two processes never collide.
fn process_nonce() -> u64 {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(rand::random)
}

/// Where an address sorts in `servers.json`: IP, port, protocol (as the reference master
/// orders them; a stored scheme it does not know sorts before the known ones), then the URL
/// (borrowed from the snapshot when it keeps one, spelled once when it keeps only a scheme).
type AddrKey<'a> = (
    IpAddr,
    u16,
    Option<StreamProtocol>,
    std::borrow::Cow<'a, str>,
);

fn addr_key(addr: SocketAddr, url: std::borrow::Cow<'_, str>) -> AddrKey<'_> {
    let protocol = url
        .split_once("://")
        .and_then(|(scheme, _)| StreamProtocol::from_scheme(scheme));
    (addr.ip(), addr.port(), protocol, url)
}

/// One `servers.json` entry: its addresses, and the info as registered (with its serial) or
/// as made from a poll.
enum EntryInfo {
    Registered(i64, DdnetInfo),
    Made(Value),
}

/// `servers.json` of `view`: every listed Teeworlds or DDNet server
/// with an IP address. Addresses registered by one DDNet `Secret` are one entry with the info
/// as registered. Servers of the Teeworlds UDP faces (not at an address a DDNet server
/// registered) get an info made from their last poll, one address each; they are sorted in
/// with the others, as the reference master sorts the entries it imports from the old UDP
/// masters with its own. Entries are ordered by their sorted address lists, so with DDNet
/// registrations only the document is the reference master's, byte for byte.
///
/// Not kept in the snapshot's cache: the route's current document is its one owner, so a
/// snapshot that outlives it (a reader still holding it, heartbeat-only successors sharing
/// its cache) does not keep a second copy of the largest thing the master holds.
#[must_use]
pub fn document(s: &Snapshot) -> Bytes {
    let mut out = Vec::new();
    // Writing to memory cannot fail.
    let _ = write_document(s, &mut out);
    Bytes::from(out)
}

/// Writes [`document`] to `out` entry by entry (the route streams it into its file: the
/// document is never held whole in the heap).
fn write_document(s: &Snapshot, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut entries: Vec<(Vec<AddrKey<'_>>, EntryInfo)> = Vec::new();
    let mut by_secret: std::collections::HashMap<&DdnetSecret, usize> =
        std::collections::HashMap::new();
    let mut seen = std::collections::HashSet::new();
    let teeworlds =
        |r: &&Arc<muster_core::registry::Record>| TEEWORLDS_GAMES.contains(&r.key.game.as_str());
    for (i, r) in s.listed().iter().filter(teeworlds).enumerate() {
        muster_core::bulk::pace(i);
        let (GameAddr::Ip(addr), Some(d)) = (&r.key.addr, &r.ddnet) else {
            continue;
        };
        if d.streams.is_empty() {
            continue;
        }
        let addr = *addr;
        seen.insert(addr);
        let keys = d
            .streams
            .iter()
            .map(|st| addr_key(addr, st.url(&r.key.addr)));
        let fresh = || EntryInfo::Registered(d.serial, d.info.clone());
        match by_secret.get(&d.secret).and_then(|&i| entries.get_mut(i)) {
            Some((addrs, info)) => {
                addrs.extend(keys);
                if matches!(info, EntryInfo::Registered(serial, _) if *serial < d.serial) {
                    *info = fresh();
                }
            }
            None => {
                by_secret.insert(&d.secret, entries.len());
                entries.push((keys.collect(), fresh()));
            }
        }
    }
    for r in s.listed().iter().filter(teeworlds) {
        let GameAddr::Ip(addr) = r.key.addr else {
            continue;
        };
        if r.ddnet.is_some() || (!LISTED_BY_07.contains(&r.face) && r.face != Face::Teeworlds06) {
            continue;
        }
        let Some(info) = &r.info else { continue };
        if !seen.insert(addr) {
            continue;
        }
        let protocol = if r.face == Face::Teeworlds07 {
            StreamProtocol::V7
        } else {
            StreamProtocol::V6
        };
        entries.push((
            vec![addr_key(addr, stream_url(protocol, addr).into())],
            EntryInfo::Made(synthesized_info(info)),
        ));
    }
    for (addrs, _) in &mut entries {
        addrs.sort();
        addrs.dedup();
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    out.write_all(b"{\"servers\":[")?;
    let mut written = 0usize;
    // How many infos could not be read, and the first error.
    let mut unreadable: (usize, Option<std::io::Error>) = (0, None);
    for (i, (addrs, info)) in entries.into_iter().enumerate() {
        muster_core::bulk::pace(i);
        // Read before the entry starts: an info that cannot be read leaves its server out.
        let info = match info {
            EntryInfo::Registered(_, i) => match i.bytes() {
                Ok(raw) => Ok(raw),
                Err(e) => {
                    unreadable.0 += 1;
                    unreadable.1.get_or_insert(e);
                    continue;
                }
            },
            EntryInfo::Made(v) => Err(v),
        };
        if written > 0 {
            out.write_all(b",")?;
        }
        written += 1;
        out.write_all(b"{\"addresses\":")?;
        let urls: Vec<&str> = addrs.iter().map(|k| &*k.3).collect();
        serde_json::to_writer(&mut *out, &urls)?;
        if let Some(l) = addrs
            .iter()
            .find_map(|k| muster_core::locations::of_ip(k.0))
        {
            out.write_all(b",\"location\":")?;
            serde_json::to_writer(&mut *out, &*l)?;
        }
        out.write_all(b",\"info\":")?;
        match info {
            Ok(raw) => out.write_all(&raw)?,
            Err(made) => serde_json::to_writer(&mut *out, &made)?,
        }
        out.write_all(b"}")?;
    }
    if let (n, Some(e)) = unreadable {
        tracing::warn!(
            unreadable = n,
            error = %e,
            "servers left out of servers.json: their info could not be read"
        );
    }
    out.write_all(b"]}\n")
}

/// A `servers.json` info object from what the registry knows (restored or polled records),
/// shaped to pass the DDNet 16.4 client's checks.
fn synthesized_info(p: &PollInfo) -> Value {
    let max_players = i64::from(p.max_players);
    let players: Vec<Value> = p
        .players
        .iter()
        .enumerate()
        .map(|(i, pl)| {
            json!({
                "name": pl.name,
                "clan": "",
                "country": -1,
                "score": pl.score().unwrap_or(0),
                "is_player": i64::try_from(i).unwrap_or(i64::MAX) < max_players,
            })
        })
        .collect();
    let max_clients = max_players.max(i64::try_from(players.len()).unwrap_or(i64::MAX));
    let [name, map, game_type] = p.texts();
    json!({
        "max_clients": max_clients,
        "max_players": max_players,
        "passworded": p.password.unwrap_or(false),
        "game_type": game_type,
        "name": name,
        "map": {"name": map},
        "version": "",
        "clients": players,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::PollFields;

    #[test]
    fn normalized_info_is_compact_and_keeps_order() {
        let raw = br#" { "b" : 1 , "a" : [ "x y" , "q\" z" ] , "c":{ } } "#;
        assert_eq!(
            normalized_info(raw).unwrap(),
            br#"{"b":1,"a":["x y","q\" z"],"c":{}}"#.to_vec()
        );
        assert_eq!(normalized_info(b"{nope"), None);
    }

    #[test]
    fn addresses_sort_by_ip_port_protocol() {
        let a: SocketAddr = "10.0.0.2:8303".parse().unwrap();
        let b: SocketAddr = "10.0.0.10:8300".parse().unwrap();
        let mut keys = [
            addr_key(b, stream_url(StreamProtocol::V6, b).into()),
            addr_key(a, stream_url(StreamProtocol::V7, a).into()),
            addr_key(a, stream_url(StreamProtocol::V6, a).into()),
        ];
        keys.sort();
        let urls: Vec<&str> = keys.iter().map(|k| &*k.3).collect();
        // Not the URLs' text order ("10.0.0.10" < "10.0.0.2", "tw-0.6" < "tw-0.7").
        assert_eq!(
            urls,
            [
                "tw-0.6+udp://10.0.0.2:8303",
                "tw-0.7+udp://10.0.0.2:8303",
                "tw-0.6+udp://10.0.0.10:8300"
            ]
        );
    }

    #[test]
    fn gzip_is_offered_when_accepted() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0.8"),
        );
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0, br"),
        );
        assert!(!accepts_gzip(&h));
    }

    #[test]
    fn synthesized_info_passes_the_client_rules() {
        let p = PollInfo::from(PollFields {
            name: "n".into(),
            map: "m".into(),
            game_type: "g".into(),
            num_players: 3,
            max_players: 2,
            players: (0..3)
                .map(|i| {
                    muster_core::registry::PollPlayer::new(format!("p{i}")).with_score(Some(i))
                })
                .collect(),
            ..PollFields::default()
        });
        let v = synthesized_info(&p);
        let info: RegisterInfo = serde::Deserialize::deserialize(&v).unwrap();
        info.check_client_rules().unwrap();
    }
}
