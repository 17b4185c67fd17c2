//! The GameSpy master face (`gamespy-master.md`) and the UT2003 text list (`ut2003-list.md`).
//!
//! ```text
//! UDP 27900  \heartbeat\<qport>\gamename\<g>  (a pure machine, [`GameSpyFace`])
//!            listed:          registry heartbeat; \statechanged -> the poller polls it now;
//!                             every 600 s a re-verification as below
//!            Unreal family:   -> \secure\ABCDEF to the source (a bounded pending table);
//!                             \validate\V back -> registry register (listed), then the game port
//!            Serious Sam:     -> \status\ to (ip, qport); a reply naming the same game group
//!                             -> registry register with the reply as its info
//!            \basic\ \info\ \rules\ \status\ \secure\ about the master itself: one datagram
//! TCP 28900  \basic\\secure\ABCDEF  <- auth + \list\<""|cmp>\gamename\<g>\final\  -> list, close
//!                                   <- auth as 333networks + \sync\<all|games>[\msid\<id>]
//!                                      -> \<game>\ip:port ip:port \…\final\, close (peers only)
//! HTTP       GET/HEAD /serverlist/{full-all,demo-all,<gamename>}.txt -> IP TAB game port TAB query port
//! ```
//!
//! Identity is (source IP, heartbeat port); only verified servers are listed (§13 decision 5).
//! Nothing about an unproven source reaches the registry: pending `\secure\` challenges and
//! `\status\` checks live in this face's own tables, bounded per IP, per /24 and in total, the
//! oldest making room for a new one, so a flood of forged heartbeats shortens how long a
//! challenge waits (still far longer than a real server takes to answer) but never refuses a
//! real server. Lists are read from the view (cached per snapshot and game).
//!
//! Abuse limits, all on by default: a per-source bucket on heartbeats that need a challenge or a
//! `\status\`; the runner's per-source byte budget on own-face replies (and its egress budget on
//! everything); per-source buckets on list connections, and the TCP caps.
//!
//! Syncing peers (`gamespy-master.md` §7): a `\sync\` is answered only to a source in
//! [`SyncSettings::peers`] that authenticated with the `333networks` key (whatever
//! `require_client_validate` says), with the servers that registered here (learned ones only
//! when [`SyncSettings::export_learned`]); a request carrying this master's own `\msid\`
//! gets just `\final\`. A 333networks master's uplink heartbeat comes from a random port and
//! is answered only at the port it advertises, so its `\secure\` goes there.
//!
//! Does not: enctype 2 lists (closed, §14), the Perl-style UDP list, `\echo\` (never
//! answered), poll servers periodically (the poller's job; this face only re-verifies on
//! heartbeats), pull from other masters (the daemon's federation does).
//!
//! ```text
//! mod.rs       settings, the lists read from the view, UDP_FACE / TCP_FACE (the face-table
//!              entries that hand the machines to the runtime's UDP runner and TCP driver)
//! udp.rs       the UDP machine (GameSpyFace)
//! list.rs      the TCP list / sync conversation (ListConversation)
//! route.rs     the UT2003 text list route
//! verify.rs    the pending challenges and status checks, the game table
//! ```

pub mod verify;

mod list;
mod route;
mod udp;

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use muster_proto::Protocol;
use muster_proto::gamespy1::query::StatusConfig;
use muster_proto::limit::{BucketConfig, SourceLimiter};
use muster_proto::query::QueryConfig;
use muster_proto::wire::DecodeError;
use tokio_util::sync::CancellationToken;

pub use self::list::ListConversation;
pub use self::route::router;
pub use self::udp::GameSpyFace;
use crate::runtime::TcpListener;
use crate::runtime::conversation::DriverSettings;
use crate::runtime::tcp::{CappedListener, ConnLimits, MetricsSink, SharedCaps};
use muster_core::MasterHandle;
use muster_core::config::LimitsConfig;
use muster_core::drops::DropReason;
use muster_core::views::Snapshot;
use verify::ChallengeLimits;

/// Largest read of one list connection at a time (the parser caps the whole request).
const TCP_READ_CHUNK: usize = 1024;
/// Key of the master's own `\secure\` answers (the 333networks mesh, §4.5).
const MESH_GAMENAME: &str = "333networks";

/// The knobs of the GameSpy face that do not depend on where it listens. Defaults are the
/// spec's (`gamespy-master.md` §13–14) and the shared `[limits]` defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct GameSpySettings {
    /// Heartbeats that need a challenge or a `\status\`, per source (IPv4 / IPv6 /64).
    pub heartbeat_bucket: BucketConfig,
    /// List connections per source (TCP, whose source the handshake proves: burst 16, then
    /// one per second, §13.8).
    pub list_bucket: BucketConfig,
    /// Sources tracked per bucket at most.
    pub max_tracked_sources: usize,
    /// The heartbeat bucket grows by one budget per server the source has registered,
    /// counting this many at most (`limits.proven_servers_max`; 0: never).
    pub proven_servers_max: u32,
    /// Pending challenges: lifetime, caps per IP, per prefix and in total, re-challenge
    /// interval (§14).
    pub challenges: ChallengeLimits,
    /// A `\status\` check: two tries 2.5 s apart, so no answer within 5 s fails it (§14).
    pub status: StatusConfig,
    /// `\status\` checks in flight at most (the oldest makes room).
    pub max_status_checks: usize,
    /// A listed server is re-verified on a heartbeat once this long after its last proof.
    pub reverify_interval: Duration,
    /// Re-verifications without an answer in a row that de-list a server.
    pub reverify_failures: u8,
    /// Close a list connection without a list when the client's `\validate\` is wrong
    /// (`gamespy.require_client_validate`, §13.6; default false: counted only).
    pub require_client_validate: bool,
    /// Connection caps and idle timeout of the list server.
    pub conn: ConnLimits,
    /// A list connection is closed after this long in total.
    pub tcp_total_timeout: Duration,
    /// The `hostport` the own query face reports (the list server's port).
    pub list_port: u16,
    /// Whether a poller runs (else the face fetches a new server's game port itself).
    pub poller: bool,
    /// Who may `\sync\`, and what they get.
    pub sync: SyncSettings,
}

/// Answering other masters' `\sync\` (`gamespy-master.md` §7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncSettings {
    /// Sources whose sync is answered (after authenticating with the `333networks` key);
    /// empty: nobody's.
    pub peers: Vec<muster_core::config::Net>,
    /// Include learned records (default: only the ones registered here).
    pub export_learned: bool,
    /// This master's id: a sync carrying it comes from this master itself.
    pub msid: Arc<str>,
}

impl SyncSettings {
    /// Whether `ip` may sync.
    #[must_use]
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.peers.iter().any(|n| n.contains(ip))
    }
}

impl Default for GameSpySettings {
    fn default() -> Self {
        Self::from_limits(&LimitsConfig::default())
    }
}

impl GameSpySettings {
    /// The spec defaults with the shared `[limits]` section applied.
    #[must_use]
    pub fn from_limits(l: &LimitsConfig) -> Self {
        Self {
            heartbeat_bucket: BucketConfig::one_every(l.heartbeat_burst, l.heartbeat_refill.0),
            list_bucket: BucketConfig::one_every(l.tcp_list_burst, l.tcp_list_refill.0),
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
            challenges: ChallengeLimits {
                per_ip: l.pending_per_ip,
                per_prefix: l.pending_per_prefix,
                total: l.pending_per_face,
                ..ChallengeLimits::default()
            },
            status: StatusConfig {
                retry: QueryConfig {
                    attempt_timeout: Duration::from_millis(2500),
                    retries: 1,
                },
                ..StatusConfig::default()
            },
            max_status_checks: l.pending_per_face,
            reverify_interval: Duration::from_secs(600),
            reverify_failures: 3,
            require_client_validate: false,
            conn: ConnLimits {
                max_per_source: l.tcp_max_per_source.min(4),
                ..l.conn_limits()
            },
            tcp_total_timeout: l.tcp_total_timeout.0,
            list_port: muster_core::config::ports::GAMESPY_TCP,
            poller: true,
            sync: SyncSettings::default(),
        }
    }
}

/// Six fresh challenge letters.
fn random6() -> [u8; 6] {
    rand::random()
}

fn drop_reason(e: &DecodeError) -> DropReason {
    match e {
        DecodeError::TooLarge(_) => DropReason::TooLarge,
        _ => DropReason::Malformed,
    }
}

/// The GameSpy heartbeat face's entry in the face table (UDP: heartbeats, `\\secure\\`
/// answers and the master's own status query).
pub const UDP_FACE: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "gamespy-udp",
    summary: "GameSpy heartbeats and the master's own query (UDP)",
    contract: crate::face::Contract::Datagrams,
    default_port: muster_core::config::ports::GAMESPY_UDP,
    bind: |addr| crate::face::bind_one_udp(UDP_FACE.name, addr),
    serve: |start, sockets| {
        let face = GameSpyFace::new(
            start.settings.get::<GameSpySettings>(),
            muster_core::clock::now(),
        );
        start.run_udp(face, crate::face::udp_sockets(UDP_FACE.name, sockets))
    },
    register_hint: |a| {
        format!(
            "UT99/Unreal: [IpServer.UdpServerUplink] DoUplink=True MasterServerAddress={} \
             MasterServerPort={}; Serious Sam: ga_strMSLegacy = \"{}\";",
            a.ip(),
            a.port(),
            a.ip()
        )
    },
};

/// The GameSpy list face's entry in the face table (TCP: lists and `\\sync\\`).
pub const TCP_FACE: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "gamespy-tcp",
    summary: "GameSpy lists and \\sync\\ (TCP)",
    contract: crate::face::Contract::Conversations,
    default_port: muster_core::config::ports::GAMESPY_TCP,
    bind: |addr| crate::face::bind_one_tcp(TCP_FACE.name, addr),
    serve: |start, sockets| {
        Box::pin(run_tcp(
            start.handle.clone(),
            crate::face::tcp_listeners(TCP_FACE.name, sockets),
            start.settings.get::<GameSpySettings>(),
            start.stop.clone(),
        ))
    },
    register_hint: |a| format!("list for browsers: muster list -p gamespy -g ut {a}"),
};

/// Serves the TCP list server on `listeners` until `stop` is cancelled: greeting, request,
/// list, close (§5), each connection a [`ListConversation`] driven by the runtime's TCP
/// driver. Each listener has its own connection caps; a source over its list-connection
/// bucket is closed at once. At shutdown the connections still open end (what they owe is
/// flushed for a moment) before this returns.
async fn run_tcp(
    handle: MasterHandle,
    listeners: Vec<TcpListener>,
    settings: GameSpySettings,
    stop: CancellationToken,
) {
    let mut limiter = SourceLimiter::new(settings.list_bucket, settings.max_tracked_sources);
    let sink = Arc::new(handle.clone()) as Arc<dyn MetricsSink>;
    let listeners = listeners
        .into_iter()
        .map(|l| {
            CappedListener::shared(l, SharedCaps::new(settings.conn, None))
                .with_metrics(Arc::clone(&sink))
        })
        .collect();
    let settings = Arc::new(settings);
    let driver = DriverSettings {
        read_chunk: TCP_READ_CHUNK,
        ..DriverSettings::default()
    };
    let new_conn = |peer: SocketAddr, now| {
        if !limiter.allow(peer.ip(), now, 1.0) {
            return Err(DropReason::RateLimited);
        }
        Ok(ListConversation::new(Arc::clone(&settings), peer.ip(), now))
    };
    crate::runtime::conversation::serve(handle, listeners, driver, new_conn, stop).await;
}

/// The query addresses the GameSpy list of `game` shows in `view` (cached per snapshot).
#[must_use]
pub fn list_of(view: &Snapshot, game: &str) -> Arc<Vec<SocketAddrV4>> {
    view.cached(("gamespy", game.into()), |s| {
        s.listed()
            .iter()
            .filter(|r| {
                r.key.game == game
                    && matches!(r.key.addr.ip(), Some(IpAddr::V4(_)))
                    && r.query_protocol == Some(Protocol::GameSpy1)
            })
            .filter_map(|r| match r.query_addr() {
                Some(SocketAddr::V4(a)) => Some(a),
                _ => None,
            })
            .collect()
    })
}

/// Every game's query addresses for a sync answer, games with at least one server, in game
/// table order (cached per snapshot): the records registered here, and with `learned` the
/// learned ones too.
#[must_use]
pub fn sync_lists(view: &Snapshot, learned: bool) -> Arc<Vec<(String, Vec<SocketAddrV4>)>> {
    let which = if learned { "all" } else { "direct" };
    view.cached(("gamespy-sync", which.into()), |s| {
        verify::GAMES
            .iter()
            .map(|g| {
                let addrs: Vec<SocketAddrV4> = s
                    .listed()
                    .iter()
                    .filter(|r| {
                        r.key.game == g.name
                            && (learned || r.is_direct())
                            && r.query_protocol == Some(Protocol::GameSpy1)
                            && matches!(r.key.addr.ip(), Some(IpAddr::V4(_)))
                    })
                    .filter_map(|r| match r.query_addr() {
                        Some(SocketAddr::V4(a)) => Some(a),
                        _ => None,
                    })
                    .collect();
                (g.name.to_owned(), addrs)
            })
            .filter(|(_, a)| !a.is_empty())
            .collect()
    })
}
