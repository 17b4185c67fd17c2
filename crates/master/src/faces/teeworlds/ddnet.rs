//! DDNet's HTTP master face: `POST /ddnet/15/register` and `GET /ddnet/15/servers.json`
//! (`teeworlds-master.md` §3).
//!
//! ```text
//! POST /ddnet/15/register   Address: tw-0.6+udp://connecting-address.invalid:<port>
//!                           Secret, Challenge-Secret, [Challenge-Token], Info-Serial,
//!                           [Connless-Token (0.7)], [Action: delete], [JSON body]
//!   no / stale token  -> UDP chal to (peer IP, port) from an ephemeral socket
//!   no valid token    -> 200 {"status":"need_challenge"}
//!   no info at serial -> 200 {"status":"need_info"}
//!   else              -> registry (game "ddnet", Face::DdnetHttp), written, {"status":"success"}
//!   bad header / JSON -> 400 {"status":"error","message":…}; body without JSON type -> 415
//!   body > limit      -> 413
//! GET /ddnet/15/servers.json  {"servers":[{"addresses":[…],"info":{…}}]}   (gzip when asked)
//! ```
//!
//! The registry keeps what a server registered ([`crate::registry::DdnetData`]): its `Secret`,
//! the info of the highest `Info-Serial` seen, shared by all its addresses (§3.6; so a
//! body-less POST from a second stream is `success`, quirk 7), and the streams with their last
//! POST. The info is kept as registered, whitespace removed and key order kept, as DDNet's own
//! master normalises it. A success is answered only once it is in the store. The listed
//! address is the HTTP peer's IP with the port of `Address`; an IPv4-mapped peer becomes IPv4.
//!
//! `servers.json` is built from the view, once per snapshot (a concatenation of the stored
//! infos), and its gzip form at most once per [`GZIP_EVERY`], so serving it costs a copy of
//! shared bytes however many clients ask.
//!
//! Abuse limits: per-source buckets on POSTs and on UDP challenges; a global egress budget
//! for challenges; the registry's caps (per source, addresses per server). A challenge goes
//! only to the IP that opened the TCP connection.
//!
//! Does not: read the peer IP from a reverse-proxy header or add `location`. The HTTP server
//! must put the peer address in each request ([`crate::runtime::http::serve`] does).

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
    Action, AddressScheme, Framing, MAX_REGISTER_BODY, Message, Packet, RegisterInfo,
    RegisterRequest, RegisterResponse, ServerAddress, Token,
};
use serde::Deserialize as _;
use serde_json::{Value, json};
use tokio::net::UdpSocket;

use super::LISTED_BY_07;
use super::tokens::{ChallengeCheck, Tokens};
use crate::MasterHandle;
use crate::drops::DropReason;
use crate::registry::{
    DdnetOutcome, DdnetRegister, Face, GameAddr, MAX_DDNET_INFO, PollInfo, Registration, ServerKey,
    TEEWORLDS_GAMES, Timestamp,
};
use crate::views::Snapshot;

/// The game name DDNet HTTP registrations are listed under.
pub const GAME_DDNET: &str = "ddnet";
/// The register path.
pub const REGISTER_PATH: &str = "/ddnet/15/register";
/// The list path.
pub const SERVERS_JSON_PATH: &str = "/ddnet/15/servers.json";
/// The gzip form of `servers.json` is rebuilt at most this often (the plain one follows every
/// snapshot).
pub const GZIP_EVERY: Duration = Duration::from_secs(1);

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
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Egress budget of the challenge socket, bytes per second.
    pub egress_bytes_per_sec: u64,
    /// Largest register body (§3.6: 16 KiB in the 16.4 era, 32 KiB now).
    pub body_limit: usize,
}

impl Default for DdnetSettings {
    fn default() -> Self {
        Self {
            register_burst: 64,
            register_refill: Duration::from_millis(100),
            challenge_burst: 16,
            challenge_refill: Duration::from_secs(1),
            max_tracked_sources: 100_000,
            egress_bytes_per_sec: 1 << 20,
            body_limit: MAX_REGISTER_BODY,
        }
    }
}

#[derive(Debug)]
struct Limits {
    register: SourceLimiter,
    challenge: SourceLimiter,
    budget: ByteBudget,
}

/// The gzip form of a `servers.json` document, and when it was made.
#[derive(Debug)]
struct Gzipped {
    at: Instant,
    plain: Bytes,
    gz: Bytes,
}

/// The shared state behind the routes.
#[derive(Debug)]
struct DdnetFace {
    handle: MasterHandle,
    settings: DdnetSettings,
    sockets: Vec<Arc<UdpSocket>>,
    tokens: Tokens,
    limits: Mutex<Limits>,
    gzipped: Mutex<Option<Arc<Gzipped>>>,
}

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
    let n = settings.max_tracked_sources;
    let limits = Limits {
        register: SourceLimiter::new(
            BucketConfig::one_every(settings.register_burst, settings.register_refill),
            n,
        ),
        challenge: SourceLimiter::new(
            BucketConfig::one_every(settings.challenge_burst, settings.challenge_refill),
            n,
        ),
        budget: ByteBudget::new(settings.egress_bytes_per_sec),
    };
    let face = Arc::new(DdnetFace {
        handle,
        settings,
        sockets: challenge_sockets,
        tokens: Tokens::random(super::tokens::CHALLENGE_SEED_PERIOD),
        limits: Mutex::new(limits),
        gzipped: Mutex::new(None),
    });
    Router::new()
        .route(REGISTER_PATH, post(register))
        .route(SERVERS_JSON_PATH, get(servers_json))
        .with_state(face)
}

fn now_instant() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn json_response(status: StatusCode, r: &RegisterResponse) -> Response {
    let mut body = Vec::new();
    r.encode(&mut body);
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

fn peer_ip(req: &Request) -> Option<IpAddr> {
    let ConnectInfo(addr) = req.extensions().get::<ConnectInfo<SocketAddr>>()?;
    Some(match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
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

/// `json` (which must be valid JSON) without the whitespace outside strings: DDNet's master
/// stores infos normalised this way, keeping the key order.
#[must_use]
pub fn compact_json(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for &b in json {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.push(b);
        }
    }
    out
}

/// The registry's view of a registered info (name, map, players, …), when it has the schema
/// DDNet sends.
fn poll_info_of(v: &Value) -> Option<PollInfo> {
    let info = RegisterInfo::deserialize(v).ok()?;
    Some(PollInfo::from_server_info(&info.to_server_info()))
}

async fn register(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    let m = face.handle.metrics();
    let Some(ip) = peer_ip(&req) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no peer address");
    };
    if !lock(&face.limits).register.allow(ip, now_instant(), 1.0) {
        m.count_rate_limited(ip);
        m.count_drop(DropReason::RateLimited);
        return error(StatusCode::TOO_MANY_REQUESTS, "rate limited");
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(Body::new(body), face.settings.body_limit).await else {
        m.count_drop(DropReason::TooLarge);
        return error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    };
    let mut headers = Vec::with_capacity(parts.headers.len());
    for (k, v) in &parts.headers {
        let Ok(v) = v.to_str() else {
            m.count_drop(DropReason::Malformed);
            return error(StatusCode::BAD_REQUEST, "header value is not ASCII");
        };
        headers.push((k.as_str(), v));
    }
    let request = match RegisterRequest::from_headers(&headers) {
        Ok(r) => r,
        Err(e) => {
            m.count_drop(DropReason::Malformed);
            return error(StatusCode::BAD_REQUEST, &e.to_string());
        }
    };
    if request.address.host != ServerAddress::CONNECTING_HOST {
        m.count_drop(DropReason::Malformed);
        return error(
            StatusCode::BAD_REQUEST,
            "address must use the host connecting-address.invalid",
        );
    }
    let listed = request.address.with_ip(ip);
    let url = listed.to_string();
    match &request.action {
        Action::Delete => return delete(&face, &request.secret, &url).await,
        Action::Unknown(_) => {
            m.count_drop(DropReason::Malformed);
            return error(StatusCode::BAD_REQUEST, "unknown action");
        }
        Action::Register => {}
    }
    if matches!(request.address.scheme, AddressScheme::Unknown(_)) {
        m.count_drop(DropReason::Malformed);
        return error(StatusCode::BAD_REQUEST, "unknown address scheme");
    }
    if request.address.port == 0 {
        m.count_drop(DropReason::PortZero);
        return error(
            StatusCode::BAD_REQUEST,
            "the port of Address must be between 1 and 65535",
        );
    }
    let addr = SocketAddr::new(ip, request.address.port);
    let info = if body.is_empty() {
        None
    } else if !is_json(&parts.headers) {
        m.count_drop(DropReason::Malformed);
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json",
        );
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => {
                m.count_drop(DropReason::Malformed);
                return error(StatusCode::BAD_REQUEST, "body is not a JSON object");
            }
        }
    };
    let now = Timestamp::now();
    let check = request
        .challenge_token
        .as_deref()
        .map_or(ChallengeCheck::Invalid, |t| {
            face.tokens.check_challenge(&url, t, now)
        });
    if check != ChallengeCheck::Current {
        if let Err(r) = send_challenge(&face, &request, &url, addr, now).await {
            return r;
        }
    }
    if check == ChallengeCheck::Invalid {
        if request.challenge_token.is_some() {
            m.count_verification_failed();
        }
        return json_response(StatusCode::OK, &RegisterResponse::NeedChallenge);
    }
    let raw = info.as_ref().map(|_| Bytes::from(compact_json(&body)));
    if raw.as_ref().is_some_and(|r| r.len() > MAX_DDNET_INFO) {
        m.count_drop(DropReason::TooLarge);
        return error(StatusCode::PAYLOAD_TOO_LARGE, "info too large");
    }
    let d = DdnetRegister {
        addr,
        secret: Arc::from(request.secret.as_str()),
        serial: request.info_serial.unwrap_or(0),
        poll_info: info.as_ref().and_then(poll_info_of),
        info: raw,
        url: Arc::from(url.as_str()),
    };
    let out = face.handle.ddnet_register(d, ddnet_registration(addr), now);
    match out {
        DdnetOutcome::NeedInfo => json_response(StatusCode::OK, &RegisterResponse::NeedInfo),
        DdnetOutcome::Rejected(why) => error(StatusCode::TOO_MANY_REQUESTS, why.name()),
        DdnetOutcome::Success => {
            // Acknowledged only once it survives a crash.
            if let Err(e) = face.handle.durable(face.handle.version()).await {
                tracing::warn!(error = %crate::error_chain(&e), "ddnet registration not stored");
                return error(StatusCode::SERVICE_UNAVAILABLE, "storage failed");
            }
            json_response(StatusCode::OK, &RegisterResponse::Success)
        }
    }
}

async fn send_challenge(
    face: &DdnetFace,
    request: &RegisterRequest,
    url: &str,
    to: SocketAddr,
    now: Timestamp,
) -> Result<(), Response> {
    let m = face.handle.metrics();
    let secret = request
        .challenge_secret
        .as_ref()
        .map(|s| s.0.as_bytes())
        .unwrap_or_default();
    let token = face.tokens.challenge(url, now);
    let Ok(chal) = Challenge::new(secret, token.as_bytes()) else {
        m.count_drop(DropReason::Malformed);
        return Err(error(StatusCode::BAD_REQUEST, "invalid Challenge-Secret"));
    };
    let framing = match (&request.address.scheme, request.connless_token) {
        (AddressScheme::Tw07, Some(t)) => Framing::V07 {
            token: t,
            response_token: Token::NONE,
        },
        _ => Framing::STANDARD_06,
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
        l.challenge.allow(to.ip(), t, 1.0) && l.budget.spend(bytes.len(), t)
    };
    if !ok {
        m.count_rate_limited(to.ip());
        m.count_drop(DropReason::RateLimited);
        return Ok(());
    }
    let Some(socket) = face
        .sockets
        .iter()
        .find(|s| s.local_addr().is_ok_and(|a| a.is_ipv4() == to.is_ipv4()))
    else {
        m.count_drop(DropReason::NoChallengeSocket);
        return Ok(());
    };
    if let Err(e) = socket.send_to(&bytes, to).await {
        tracing::debug!(%to, error = %e, "challenge send failed");
    }
    Ok(())
}

async fn delete(face: &DdnetFace, secret: &str, url: &str) -> Response {
    match face.handle.write(|r| r.ddnet_delete(secret, url)) {
        None => {
            face.handle.metrics().count_drop(DropReason::UnknownServer);
            error(StatusCode::BAD_REQUEST, "could not find registered server")
        }
        Some(_) => {
            if let Err(e) = face.handle.durable(face.handle.version()).await {
                tracing::warn!(error = %crate::error_chain(&e), "ddnet deletion not stored");
            }
            json_response(StatusCode::OK, &RegisterResponse::Success)
        }
    }
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
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

async fn servers_json(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    face.handle.metrics().count_list_request("ddnet");
    let view = face.handle.snapshot();
    let plain = document(&view);
    // The ETag names this build of the document (its bytes live as long as any response or
    // cache holds them), so the middleware that hashes other bodies skips this one.
    let gzip = accepts_gzip(req.headers());
    let tag = format!(
        "\"sj-{:x}-{:x}{}\"",
        process_nonce() ^ plain.as_ptr() as u64,
        plain.len(),
        if gzip { "-gz" } else { "" }
    );
    let not_modified = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| crate::web::none_match_hits(v, &tag));
    if not_modified {
        let mut res = Response::new(Body::empty());
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        if let Ok(v) = HeaderValue::from_str(&tag) {
            res.headers_mut().insert(header::ETAG, v);
        }
        return res;
    }
    let body = if gzip {
        gzipped(&face, &plain).await
    } else {
        (*plain).clone()
    };
    let mut res = Response::new(Body::from(body));
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Compressed once per document here; the HTTP layer must not compress it per request.
    let encoding = if gzip { "gzip" } else { "identity" };
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
    res
}

/// A random number drawn once per process, so ETags of two processes never collide.
fn process_nonce() -> u64 {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(rand::random)
}

/// The gzip form of `plain`: the cached one when it is of this document or younger than
/// [`GZIP_EVERY`], else made now (off the reactor).
async fn gzipped(face: &DdnetFace, plain: &Bytes) -> Bytes {
    let t = now_instant();
    if let Some(g) = lock(&face.gzipped).clone() {
        if g.plain.as_ptr() == plain.as_ptr() || t.saturating_duration_since(g.at) < GZIP_EVERY {
            return g.gz.clone();
        }
    }
    let src = plain.clone();
    let gz = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(
            Vec::with_capacity(src.len() / 4),
            flate2::Compression::fast(),
        );
        let _ = e.write_all(&src);
        e.finish().map(Bytes::from).unwrap_or_default()
    })
    .await
    .unwrap_or_default();
    *lock(&face.gzipped) = Some(Arc::new(Gzipped {
        at: t,
        plain: plain.clone(),
        gz: gz.clone(),
    }));
    gz
}

/// `servers.json` of `view` (built once per snapshot): every listed Teeworlds or DDNet server
/// with an IP address. Addresses registered by one DDNet `Secret` are one entry with the info
/// as registered; servers of the Teeworlds UDP faces get an info made from their last poll.
#[must_use]
pub fn document(view: &Snapshot) -> Arc<Bytes> {
    view.cached(("servers.json", "".into()), |s| {
        // Per entry: its addresses, and the info as registered or as made from a poll.
        type Entry = (Vec<Arc<str>>, Option<Bytes>, Option<Value>);
        let mut groups: Vec<Entry> = Vec::new();
        let mut by_secret: std::collections::HashMap<&str, usize> =
            std::collections::HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for r in s.listed() {
            if !TEEWORLDS_GAMES.contains(&r.key.game.as_str()) {
                continue;
            }
            let GameAddr::Ip(addr) = r.key.addr else {
                continue;
            };
            if let Some(d) = &r.ddnet {
                if d.streams.is_empty() {
                    continue;
                }
                let urls = d.streams.iter().map(|st| Arc::clone(&st.url));
                match by_secret.get(&*d.secret) {
                    Some(&i) => {
                        if let Some(g) = groups.get_mut(i) {
                            g.0.extend(urls);
                        }
                    }
                    None => {
                        by_secret.insert(&d.secret, groups.len());
                        groups.push((urls.collect(), Some(d.info.clone()), None));
                    }
                }
                seen.insert(addr);
                continue;
            }
            if !LISTED_BY_07.contains(&r.face) && r.face != Face::Teeworlds06 {
                continue;
            }
            let Some(info) = &r.info else { continue };
            if !seen.insert(addr) {
                continue;
            }
            let scheme = if r.face == Face::Teeworlds07 {
                AddressScheme::Tw07
            } else {
                AddressScheme::Tw06
            };
            let url = ServerAddress {
                scheme,
                host: addr.ip().to_string(),
                port: addr.port(),
            };
            groups.push((
                vec![Arc::from(url.to_string())],
                None,
                Some(synthesized_info(info)),
            ));
        }
        let mut out = Vec::with_capacity(64 + groups.len() * 512);
        out.extend_from_slice(b"{\"servers\":[");
        for (i, (mut urls, raw, made)) in groups.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            urls.sort();
            urls.dedup();
            out.extend_from_slice(b"{\"addresses\":");
            let urls: Vec<&str> = urls.iter().map(|u| &**u).collect();
            let _ = serde_json::to_writer(&mut out, &urls);
            out.extend_from_slice(b",\"info\":");
            match (raw, made) {
                (Some(raw), _) => out.extend_from_slice(&raw),
                (None, Some(v)) => {
                    let _ = serde_json::to_writer(&mut out, &v);
                }
                (None, None) => out.extend_from_slice(b"{}"),
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        Bytes::from(out)
    })
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
                "score": pl.score.unwrap_or(0),
                "is_player": i64::try_from(i).unwrap_or(i64::MAX) < max_players,
            })
        })
        .collect();
    let max_clients = max_players.max(i64::try_from(players.len()).unwrap_or(i64::MAX));
    json!({
        "max_clients": max_clients,
        "max_players": max_players,
        "passworded": p.password.unwrap_or(false),
        "game_type": p.game_type,
        "name": p.name,
        "map": {"name": p.map},
        "version": "",
        "clients": players,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_json_keeps_strings_and_order() {
        let raw = br#" { "b" : 1 , "a" : [ "x y" , "q\" z" ] , "c":{ } } "#;
        assert_eq!(
            compact_json(raw),
            br#"{"b":1,"a":["x y","q\" z"],"c":{}}"#.to_vec()
        );
        let escaped = br#"{"k":"back\\" , "m" : 2}"#;
        assert_eq!(compact_json(escaped), br#"{"k":"back\\","m":2}"#.to_vec());
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
        let p = PollInfo {
            name: "n".into(),
            map: "m".into(),
            game_type: "g".into(),
            num_players: 3,
            max_players: 2,
            players: (0..3)
                .map(|i| crate::registry::PollPlayer {
                    name: format!("p{i}"),
                    score: Some(i),
                    ..crate::registry::PollPlayer::default()
                })
                .collect(),
            ..PollInfo::default()
        };
        let v = synthesized_info(&p);
        let info: RegisterInfo = serde::Deserialize::deserialize(&v).unwrap();
        info.check_client_rules().unwrap();
    }
}
