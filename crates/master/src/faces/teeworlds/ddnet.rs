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
//!   else              -> listed (registry: game "ddnet", Face::DdnetHttp), {"status":"success"}
//!   bad header / JSON -> 400 {"status":"error","message":…}; body without JSON type -> 415
//!   body > limit      -> 413
//! GET /ddnet/15/servers.json  {"servers":[{"addresses":[…],"info":{…}}]}
//! ```
//!
//! Servers are kept by `Secret` with the info of the highest `Info-Serial` seen (§3.6), so a
//! body-less POST from a second stream is `success` (quirk 7). The listed address is the HTTP
//! peer's IP with the port of `Address`; an IPv4-mapped peer becomes IPv4. An address stays
//! listed while its registry record lives (30 s after its last successful POST by default,
//! §5.3). The stream book lives in memory; each listed address's record also carries, as its
//! [`crate::registry::Record::face_data`], the server's `Secret`, `Info-Serial`, stream URL and
//! info object as registered, so [`router`] rebuilds the book from the restored registry and
//! `servers.json` after a restart is what it was before (same grouping, same raw info).
//! Records without that data (written by an older build) get an info rebuilt from the
//! registry until the server POSTs again (within 15 s).
//!
//! Abuse limits: per-source buckets on POSTs, on UDP challenges and on `servers.json` GETs; a
//! global egress budget for challenges; a cap on servers and on addresses per server; the
//! registry's per-source cap. A challenge goes only to the IP that opened the TCP connection.
//!
//! Does not: read the peer IP from a reverse-proxy header, add `location`, or gzip the list.
//! The HTTP server must be run with `into_make_service_with_connect_info::<SocketAddr>()`
//! (without it every POST is answered 500).

use std::collections::HashMap;
use std::hash::RandomState;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, ByteBudget, SourceKey, SourceLimiter};
use muster_proto::teeworlds_master::packet::Challenge;
use muster_proto::teeworlds_master::servers_json::{ServerEntry, ServersJson};
use muster_proto::teeworlds_master::{
    Action, AddressScheme, Framing, MAX_REGISTER_BODY, Message, Packet, RegisterInfo,
    RegisterRequest, RegisterResponse, ServerAddress, Token,
};
use serde::Deserialize as _;
use serde_json::{Map, Value, json};
use tokio::net::UdpSocket;

use super::tokens::{CHALLENGE_SEED_PERIOD, ChallengeCheck, Tokens};
use crate::MasterHandle;
use crate::registry::{
    Face, GameAddr, Outcome, PollInfo, Registration, ServerKey, Timestamp, View,
};

/// The game name DDNet HTTP registrations are listed under.
pub const GAME_DDNET: &str = "ddnet";
/// The register path.
pub const REGISTER_PATH: &str = "/ddnet/15/register";
/// The list path.
pub const SERVERS_JSON_PATH: &str = "/ddnet/15/servers.json";
/// `servers.json` is rebuilt at most this often (the reference master: once per second),
/// unless this face changed something.
pub const LIST_CACHE_TTL: Duration = Duration::from_secs(1);

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
    /// `servers.json` GETs per source: burst.
    pub list_burst: u32,
    /// One more GET per source every this long.
    pub list_refill: Duration,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// Egress budget of the challenge socket, bytes per second.
    pub egress_bytes_per_sec: u64,
    /// Largest register body (§3.6: 16 KiB in the 16.4 era, 32 KiB now).
    pub body_limit: usize,
    /// Servers (`Secret`s) kept at most.
    pub max_servers: usize,
    /// Addresses (streams) per server at most.
    pub max_addresses_per_server: usize,
    /// An address is dropped from the stream book this long after its last successful POST
    /// (the registry's DDNet lifetime should match: 30 s, §5.3).
    pub address_lifetime: Duration,
}

impl Default for DdnetSettings {
    fn default() -> Self {
        Self {
            register_burst: 64,
            register_refill: Duration::from_millis(100),
            challenge_burst: 16,
            challenge_refill: Duration::from_secs(1),
            list_burst: 10,
            list_refill: Duration::from_secs(1),
            max_tracked_sources: 100_000,
            egress_bytes_per_sec: 1 << 20,
            body_limit: MAX_REGISTER_BODY,
            max_servers: 10_000,
            max_addresses_per_server: 8,
            address_lifetime: Duration::from_secs(30),
        }
    }
}

/// One registered address (stream) of a server.
#[derive(Debug, Clone)]
struct Stream {
    addr: SocketAddr,
    last: Timestamp,
}

#[derive(Debug, Clone, Default)]
struct Server {
    /// (Info-Serial, the info object as registered).
    info: Option<(i64, Arc<Value>)>,
    /// Listed URL -> stream.
    streams: HashMap<String, Stream>,
}

/// The stream book: servers by `Secret`. Pure; time is an argument.
#[derive(Debug, Clone, Default)]
struct Book {
    servers: HashMap<String, Server>,
    generation: u64,
    /// When [`Book::expire`] last swept (it sweeps at most once per [`EXPIRE_EVERY`]).
    swept: Option<Timestamp>,
}

/// The stream book is swept for expired addresses at most this often.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// Why the book refused a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Servers,
    Addresses,
}

impl Book {
    fn expire(&mut self, now: Timestamp, life: Duration) {
        if self.swept.is_some_and(|t| t.plus(EXPIRE_EVERY) > now) {
            return;
        }
        self.swept = Some(now);
        let before = self.servers.len();
        let mut changed = false;
        for s in self.servers.values_mut() {
            let n = s.streams.len();
            s.streams.retain(|_, st| st.last.plus(life) > now);
            changed |= n != s.streams.len();
        }
        self.servers.retain(|_, s| !s.streams.is_empty());
        if changed || before != self.servers.len() {
            self.generation += 1;
        }
    }

    /// Whether the server `secret` has info at `serial` or newer.
    fn has_info(&self, secret: &str, serial: i64) -> bool {
        self.servers
            .get(secret)
            .and_then(|s| s.info.as_ref())
            .is_some_and(|(have, _)| *have >= serial)
    }

    /// Stores the server's info if `serial` is not older than what is stored; creates the
    /// server. Returns whether the info changed.
    fn set_info(
        &mut self,
        secret: &str,
        serial: i64,
        info: Value,
        max_servers: usize,
    ) -> Result<bool, Full> {
        if !self.servers.contains_key(secret) && self.servers.len() >= max_servers {
            return Err(Full::Servers);
        }
        let s = self.servers.entry(secret.to_owned()).or_default();
        if s.info.as_ref().is_some_and(|(have, _)| *have > serial) {
            return Ok(false);
        }
        s.info = Some((serial, Arc::new(info)));
        self.generation += 1;
        Ok(true)
    }

    /// Records a successful POST of the stream `url` of the server `secret` (which must
    /// exist: [`Book::set_info`] creates it).
    fn touch(
        &mut self,
        secret: &str,
        url: String,
        addr: SocketAddr,
        now: Timestamp,
        max_addresses: usize,
    ) -> Result<(), Full> {
        let Some(s) = self.servers.get_mut(secret) else {
            return Err(Full::Servers);
        };
        if let Some(st) = s.streams.get_mut(&url) {
            st.last = now;
            return Ok(());
        }
        if s.streams.len() >= max_addresses {
            return Err(Full::Addresses);
        }
        s.streams.insert(url, Stream { addr, last: now });
        self.generation += 1;
        Ok(())
    }

    /// Removes one stream; returns whether another stream of the server still uses `addr`,
    /// or `None` when there was no such stream.
    fn delete(&mut self, secret: &str, url: &str) -> Option<bool> {
        let s = self.servers.get_mut(secret)?;
        let st = s.streams.remove(url)?;
        let still = s.streams.values().any(|o| o.addr == st.addr);
        if s.streams.is_empty() {
            self.servers.remove(secret);
        }
        self.generation += 1;
        Some(still)
    }
}

#[derive(Debug)]
struct Limits {
    register: SourceLimiter,
    challenge: SourceLimiter,
    list: SourceLimiter,
    budget: ByteBudget,
}

/// The shared state behind the routes.
#[derive(Debug)]
struct DdnetFace {
    handle: MasterHandle,
    settings: DdnetSettings,
    sockets: Vec<Arc<UdpSocket>>,
    tokens: Tokens<RandomState>,
    book: Mutex<Book>,
    limits: Mutex<Limits>,
    cache: Mutex<Option<(Instant, u64, Bytes)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The DDNet routes over `handle`. `challenge_sockets` send the UDP `chal` datagrams (bind them
/// to `0.0.0.0:0` and `[::]:0`; one per family is enough, the first of the peer's family is
/// used). Merge the router into the HTTP face served with connect info (see the module docs).
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
        list: SourceLimiter::new(
            BucketConfig::one_every(settings.list_burst, settings.list_refill),
            n,
        ),
        budget: ByteBudget::new(settings.egress_bytes_per_sec),
    };
    let book = restore_book(&handle, &settings);
    let face = Arc::new(DdnetFace {
        handle,
        settings,
        sockets: challenge_sockets,
        tokens: Tokens::new(RandomState::new(), CHALLENGE_SEED_PERIOD),
        book: Mutex::new(book),
        limits: Mutex::new(limits),
        cache: Mutex::new(None),
    });
    Router::new()
        .route(REGISTER_PATH, post(register))
        .route(SERVERS_JSON_PATH, get(servers_json))
        .with_state(face)
}

/// What a DDNet record keeps for a restart ([`crate::registry::Record::face_data`]): the
/// server's secret and info, and the URLs of its streams listed at the record's address
/// (0.6 and 0.7 streams of one server share an address, so one record).
fn face_data(secret: &str, serial: i64, urls: &[&String], info: &Value) -> Arc<str> {
    json!({ "secret": secret, "serial": serial, "urls": urls, "info": info })
        .to_string()
        .into()
}

/// The stream book as the restored registry's DDNet records describe it.
fn restore_book(handle: &MasterHandle, settings: &DdnetSettings) -> Book {
    let saved: Vec<(SocketAddr, Timestamp, Arc<str>)> = handle.with_registry(|r| {
        r.iter()
            .filter(|rec| rec.face == Face::DdnetHttp && rec.is_listed())
            .filter_map(|rec| match (&rec.key.addr, &rec.face_data) {
                (GameAddr::Ip(a), Some(d)) => Some((*a, rec.last_heartbeat, Arc::clone(d))),
                _ => None,
            })
            .collect()
    });
    let mut book = Book::default();
    for (addr, last, data) in saved {
        let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        let (Some(Value::String(secret)), Some(serial), Some(Value::Array(urls))) = (
            m.remove("secret"),
            m.get("serial").and_then(Value::as_i64),
            m.remove("urls"),
        ) else {
            continue;
        };
        let Some(info @ Value::Object(_)) = m.remove("info") else {
            continue;
        };
        if book
            .set_info(&secret, serial, info, settings.max_servers)
            .is_err()
        {
            continue;
        }
        for url in urls {
            if let Value::String(url) = url {
                let _ = book.touch(&secret, url, addr, last, settings.max_addresses_per_server);
            }
        }
    }
    book
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

async fn register(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    let m = face.handle.metrics();
    let Some(ip) = peer_ip(&req) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no peer address");
    };
    if !lock(&face.limits).register.allow(ip, now_instant(), 1.0) {
        m.count_rate_limited(ip);
        m.count_drop("rate_limited");
        return error(StatusCode::TOO_MANY_REQUESTS, "rate limited");
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(Body::new(body), face.settings.body_limit).await else {
        m.count_drop("too_large");
        return error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    };
    let mut headers = Vec::with_capacity(parts.headers.len());
    for (k, v) in &parts.headers {
        let Ok(v) = v.to_str() else {
            m.count_drop("malformed");
            return error(StatusCode::BAD_REQUEST, "header value is not ASCII");
        };
        headers.push((k.as_str(), v));
    }
    let request = match RegisterRequest::from_headers(&headers) {
        Ok(r) => r,
        Err(e) => {
            m.count_drop("malformed");
            return error(StatusCode::BAD_REQUEST, &e.to_string());
        }
    };
    if request.address.host != ServerAddress::CONNECTING_HOST {
        m.count_drop("malformed");
        return error(
            StatusCode::BAD_REQUEST,
            "address must use the host connecting-address.invalid",
        );
    }
    let listed = request.address.with_ip(ip);
    let url = listed.to_string();
    let addr = SocketAddr::new(ip, request.address.port);
    match &request.action {
        Action::Delete => return delete(&face, &request.secret, &url),
        Action::Unknown(_) => {
            m.count_drop("malformed");
            return error(StatusCode::BAD_REQUEST, "unknown action");
        }
        Action::Register => {}
    }
    if matches!(request.address.scheme, AddressScheme::Unknown(_)) {
        m.count_drop("malformed");
        return error(StatusCode::BAD_REQUEST, "unknown address scheme");
    }
    let info = if body.is_empty() {
        None
    } else if !is_json(&parts.headers) {
        m.count_drop("malformed");
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json",
        );
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => {
                m.count_drop("malformed");
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
    let serial = request.info_serial.unwrap_or(0);
    let mut poll = info.as_ref().and_then(poll_info_of);
    let saved;
    let settings = &face.settings;
    {
        let mut book = lock(&face.book);
        book.expire(now, settings.address_lifetime);
        if let Some(v) = info {
            if book
                .set_info(&request.secret, serial, v, settings.max_servers)
                .is_err()
            {
                m.count_drop("server_cap");
                return error(StatusCode::SERVICE_UNAVAILABLE, "too many servers");
            }
        } else if !book.has_info(&request.secret, serial) {
            return json_response(StatusCode::OK, &RegisterResponse::NeedInfo);
        }
        let touched = book.touch(
            &request.secret,
            url.clone(),
            addr,
            now,
            settings.max_addresses_per_server,
        );
        if touched.is_err() {
            m.count_drop("server_cap");
            return error(StatusCode::SERVICE_UNAVAILABLE, "too many addresses");
        }
        let server = book.servers.get(&request.secret);
        let stored = server.and_then(|s| s.info.clone());
        if poll.is_none() {
            // Re-created records (after expiry or a restart) get the stored info again.
            poll = stored.as_ref().and_then(|(_, v)| poll_info_of(v));
        }
        let mut urls: Vec<&String> = server
            .map(|s| {
                s.streams
                    .iter()
                    .filter(|(_, st)| st.addr == addr)
                    .map(|(u, _)| u)
                    .collect()
            })
            .unwrap_or_default();
        urls.sort();
        saved = stored.map(|(serial, v)| face_data(&request.secret, serial, &urls, &v));
    }
    let reg = ddnet_registration(addr);
    let key = reg.key.clone();
    let listed = match face.handle.add(reg, now) {
        Ok(Outcome::Rejected(r)) => Err(error(StatusCode::TOO_MANY_REQUESTS, r.name())),
        Ok(_) => face.handle.verify(&key, now).map_err(|e| {
            tracing::warn!(error = %e, "store failed");
            error(StatusCode::SERVICE_UNAVAILABLE, "storage failed")
        }),
        Err(e) => {
            tracing::warn!(error = %e, "store failed");
            Err(error(StatusCode::SERVICE_UNAVAILABLE, "storage failed"))
        }
    };
    if let Err(r) = listed {
        lock(&face.book).delete(&request.secret, &url);
        return r;
    }
    if let Some(p) = poll {
        face.handle.update_poll(&key, Some(p), now);
    }
    // Written with the next flush, so the next start rebuilds servers.json as it is now.
    face.handle.set_face_data(&key, saved);
    json_response(StatusCode::OK, &RegisterResponse::Success)
}

/// The registry's view of a registered info (name, map, players, …), when it has the
/// schema DDNet 16.4 sends; the raw object is what `servers.json` serves either way.
fn poll_info_of(v: &Value) -> Option<PollInfo> {
    let info = RegisterInfo::deserialize(v).ok()?;
    Some(PollInfo::from_server_info(&info.to_server_info()))
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
        m.count_drop("malformed");
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
        m.count_drop("rate_limited");
        return Ok(());
    }
    let Some(socket) = face
        .sockets
        .iter()
        .find(|s| s.local_addr().is_ok_and(|a| a.is_ipv4() == to.is_ipv4()))
    else {
        m.count_drop("no_challenge_socket");
        return Ok(());
    };
    if let Err(e) = socket.send_to(&bytes, to).await {
        tracing::debug!(%to, error = %e, "challenge send failed");
    }
    Ok(())
}

fn delete(face: &DdnetFace, secret: &str, url: &str) -> Response {
    let Some(still) = lock(&face.book).delete(secret, url) else {
        face.handle.metrics().count_drop("unknown_server");
        return error(StatusCode::BAD_REQUEST, "could not find registered server");
    };
    if !still {
        if let Ok(a) = ServerAddress::parse(url) {
            if let Some(addr) = a.socket_addr() {
                let key = ddnet_registration(addr).key;
                if let Err(e) = face.handle.remove(&key) {
                    tracing::warn!(error = %e, "store failed");
                }
            }
        }
    }
    json_response(StatusCode::OK, &RegisterResponse::Success)
}

async fn servers_json(State(face): State<Arc<DdnetFace>>, req: Request) -> Response {
    let m = face.handle.metrics();
    if let Some(ip) = peer_ip(&req) {
        if !lock(&face.limits).list.allow(ip, now_instant(), 1.0) {
            m.count_rate_limited(ip);
            m.count_drop("rate_limited");
            return (StatusCode::TOO_MANY_REQUESTS, "rate limited\n").into_response();
        }
    }
    m.count_list_request("ddnet");
    let body = list_document(&face);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn list_document(face: &DdnetFace) -> Bytes {
    let now = Timestamp::now();
    let t = now_instant();
    let generation = {
        let mut book = lock(&face.book);
        book.expire(now, face.settings.address_lifetime);
        book.generation
    };
    if let Some((at, g, bytes)) = lock(&face.cache).as_ref() {
        if *g == generation && t.saturating_duration_since(*at) < LIST_CACHE_TTL {
            return bytes.clone();
        }
    }
    let doc = build_document(face);
    let mut out = Vec::new();
    doc.encode(&mut out);
    let bytes = Bytes::from(out);
    *lock(&face.cache) = Some((t, generation, bytes.clone()));
    bytes
}

/// One listed record, copied out of the registry.
struct Listed {
    addr: SocketAddr,
    face: Face,
    info: Option<PollInfo>,
}

fn build_document(face: &DdnetFace) -> ServersJson {
    let listed: Vec<Listed> = face.handle.with_registry(|r| {
        r.listed(View::Teeworlds)
            .into_iter()
            .filter_map(|rec| match rec.key.addr {
                GameAddr::Ip(addr) => Some(Listed {
                    addr,
                    face: rec.face,
                    info: rec.info.clone(),
                }),
                GameAddr::Host { .. } => None,
            })
            .collect()
    });
    let mut order: HashMap<SocketAddr, usize> = HashMap::new();
    for (i, l) in listed.iter().enumerate() {
        if l.face == Face::DdnetHttp {
            order.entry(l.addr).or_insert(i);
        }
    }
    let mut entries: Vec<(usize, ServerEntry)> = Vec::new();
    let mut covered = std::collections::HashSet::new();
    {
        let book = lock(&face.book);
        for s in book.servers.values() {
            let Some((_, info)) = &s.info else { continue };
            let mut addrs: Vec<(&String, &Stream)> = s
                .streams
                .iter()
                .filter(|(_, st)| order.contains_key(&st.addr))
                .collect();
            if addrs.is_empty() {
                continue;
            }
            addrs.sort_by(|a, b| a.0.cmp(b.0));
            let first = addrs
                .iter()
                .filter_map(|(_, st)| order.get(&st.addr))
                .min()
                .copied()
                .unwrap_or(usize::MAX);
            for (_, st) in &addrs {
                covered.insert(st.addr);
            }
            entries.push((
                first,
                ServerEntry {
                    addresses: addrs.into_iter().map(|(u, _)| u.clone()).collect(),
                    location: None,
                    info: (**info).clone(),
                    extra: Map::new(),
                },
            ));
        }
    }
    for (i, l) in listed.iter().enumerate() {
        if covered.contains(&l.addr) {
            continue;
        }
        let Some(info) = &l.info else { continue };
        let scheme = if l.face == Face::Teeworlds07 {
            AddressScheme::Tw07
        } else {
            AddressScheme::Tw06
        };
        let url = ServerAddress {
            scheme,
            host: l.addr.ip().to_string(),
            port: l.addr.port(),
        };
        covered.insert(l.addr);
        entries.push((
            i,
            ServerEntry {
                addresses: vec![url.to_string()],
                location: None,
                info: synthesized_info(info),
                extra: Map::new(),
            },
        ));
    }
    entries.sort_by_key(|(i, _)| *i);
    ServersJson {
        servers: entries.into_iter().map(|(_, e)| e).collect(),
        servers_legacy: None,
        extra: Map::new(),
    }
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

    const T0: Timestamp = Timestamp::from_secs(1_700_000_000);
    const LIFE: Duration = Duration::from_secs(30);

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn info_is_per_secret_and_only_newer_serials_replace_it() {
        let mut b = Book::default();
        assert!(!b.has_info("s", 0));
        assert_eq!(b.set_info("s", 1, json!({"n": 1}), 10), Ok(true));
        assert!(b.has_info("s", 0) && b.has_info("s", 1) && !b.has_info("s", 2));
        assert_eq!(b.set_info("s", 0, json!({"n": 0}), 10), Ok(false));
        assert_eq!(b.set_info("t", 0, json!({}), 1), Err(Full::Servers));
    }

    #[test]
    fn streams_expire_and_delete_tells_whether_the_address_is_still_used() {
        let mut b = Book::default();
        b.set_info("s", 0, json!({}), 10).unwrap();
        let u6 = "tw-0.6+udp://127.0.0.1:8303".to_owned();
        let u7 = "tw-0.7+udp://127.0.0.1:8303".to_owned();
        b.touch("s", u6.clone(), a("127.0.0.1:8303"), T0, 2)
            .unwrap();
        b.touch("s", u7.clone(), a("127.0.0.1:8303"), T0, 2)
            .unwrap();
        assert_eq!(
            b.touch(
                "s",
                "tw-0.5+udp://127.0.0.1:1".into(),
                a("127.0.0.1:1"),
                T0,
                2
            ),
            Err(Full::Addresses)
        );
        assert_eq!(b.delete("s", &u6), Some(true));
        assert_eq!(b.delete("s", &u6), None);
        b.touch("s", u6, a("127.0.0.1:8303"), T0.plus(LIFE), 2)
            .unwrap();
        b.expire(T0.plus(LIFE), LIFE);
        assert_eq!(b.servers["s"].streams.len(), 1, "the 0.7 stream expired");
        b.expire(T0.plus(LIFE * 2), LIFE);
        assert!(b.servers.is_empty());
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
                })
                .collect(),
            ..PollInfo::default()
        };
        let v = synthesized_info(&p);
        let info: RegisterInfo = serde::Deserialize::deserialize(&v).unwrap();
        info.check_client_rules().unwrap();
    }
}
