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
//! grows past [`muster_core::registry::MAX_DDNET_INFO`] when re-written (413). A challenge goes only to the IP that
//! opened the TCP connection (behind a trusted reverse proxy: the client's IP it names).
//!
//! An entry gets a `location` when the daemon has a locations table (config
//! `ddnet.locations`, [`muster_core::locations`]): that of its first address that has one, in
//! the sorted order, as the reference master does.
//!
//! Does not: ban, or keep communities. The HTTP server must put the client's address in each
//! request ([`crate::runtime::http::serve`] does: the peer's, or behind a trusted reverse proxy
//! the one its header names, `limits.connecting_ip_header`).
//!
//! ```text
//! ddnet.rs         settings, the shared state, the router
//! register.rs      the register machine: request in, registry command + answer + chal out
//! routes.rs        the axum handlers (they run the command, wait for the store, send the chal)
//! servers_json.rs  the document: build, gzip, memory or unnamed file
//! request.rs       the register headers; info.rs  the info as the reference master keeps it
//! ```

mod info;
mod register;
mod request;
mod routes;
mod servers_json;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, SourceKey, SourceLimiter};
use muster_proto::teeworlds_master::MAX_REGISTER_BODY;
use tokio::net::UdpSocket;

use self::info::OrderedJson;
use self::register::RegisterMachine;
use self::request::StreamProtocol;
use self::servers_json::ServersJson;
pub use self::servers_json::document;
use crate::runtime::http::FileRoute;
use crate::runtime::sender::DatagramSender;
use muster_core::MasterHandle;
use muster_core::registry::{Face, GameAddr, Registration, ServerKey};

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
    /// a directory that cannot take one: anonymous memory files ([`muster_core::memfile::MemFile::written_in`]).
    pub body_dir: Option<std::path::PathBuf>,
}

impl DdnetSettings {
    /// The DDNet face's settings from `[limits]`, its bodies kept in unnamed files in
    /// `body_dir`.
    #[must_use]
    pub fn from_limits(
        l: &muster_core::config::LimitsConfig,
        body_dir: Option<std::path::PathBuf>,
    ) -> Self {
        Self {
            max_tracked_sources: l.max_tracked_sources,
            egress_bytes_per_sec: l.egress_bytes_per_sec,
            body_limit: l.http_body_limit,
            register_burst: l.ddnet_register_burst,
            register_refill: l.ddnet_register_refill.0,
            challenge_burst: l.ddnet_challenge_burst,
            challenge_refill: l.ddnet_challenge_refill.0,
            servers_json_burst: l.servers_json_burst,
            servers_json_refill: l.servers_json_refill.0,
            proven_servers_max: l.proven_servers_max,
            body_dir,
        }
    }
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

/// The shared state behind the routes.
#[derive(Debug)]
struct DdnetFace {
    handle: MasterHandle,
    settings: DdnetSettings,
    /// Sends the register machine's UDP challenges.
    challenges: DatagramSender,
    machine: Mutex<RegisterMachine>,
    servers_json_bucket: Mutex<SourceLimiter>,
    documents: Arc<ServersJson>,
    /// Deletes answered 503 (see `routes::delete`): per secret and stream URL, the registry
    /// version the store must reach. At most [`MAX_PENDING_DELETES`].
    pending_deletes: Mutex<std::collections::HashMap<PendingDelete, u64>>,
}

/// A delete's secret and stream URL.
type PendingDelete = (Box<str>, Box<str>);

/// Most deletes answered 503 that a retry can still find (see `routes::delete`); past it, a
/// retry of one more is answered as an unknown server (the removal still converges).
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
    let servers_json_bucket = SourceLimiter::new(
        BucketConfig::one_every(settings.servers_json_burst, settings.servers_json_refill),
        settings.max_tracked_sources,
    )
    .with_growth(settings.proven_servers_max);
    let face = Arc::new(DdnetFace {
        documents: ServersJson::new(handle.clone(), settings.body_dir.clone()),
        handle,
        machine: Mutex::new(RegisterMachine::new(&settings)),
        settings,
        challenges: DatagramSender::new(challenge_sockets),
        servers_json_bucket: Mutex::new(servers_json_bucket),
        pending_deletes: Mutex::default(),
    });
    let router = Router::new()
        .route(
            REGISTER_PATH,
            post(routes::register).fallback(|| async {
                routes::error(StatusCode::METHOD_NOT_ALLOWED, request::METHOD_NOT_ALLOWED)
            }),
        )
        .route(SERVERS_JSON_PATH, get(routes::servers_json))
        .with_state(Arc::clone(&face));
    (router, Arc::new(routes::ServersJsonFile(face)))
}

impl DdnetFace {
    /// Takes a `servers.json` token for `ip`; a refusal is counted when `count`.
    fn allow_servers_json(&self, ip: IpAddr, count: bool, now: std::time::Instant) -> bool {
        let ok = lock(&self.servers_json_bucket)
            .allow_proven(ip, now, 1.0, |k| self.handle.proven_servers(k));
        if !ok && count {
            self.handle
                .metrics()
                .count_bucket_refusal("servers_json", ip);
        }
        ok
    }
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
