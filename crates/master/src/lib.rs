//! The Muster master daemon's core: one registry behind every master face, persisted in
//! SQLite, published as immutable views, served over an HTTP API with metrics.
//!
//! ```text
//!  socket ─bytes─> runner (runtime::udp / runtime::tcp / runtime::http) ─> face machine (pure)
//!                                                                            │ registry calls
//!  poller ──poll results──┐                                                  v
//!  housekeeping (prune) ──┴──────────────────────────────> MasterHandle: Registry (one owner)
//!                                                            │ view log        │ dirty keys
//!                                                            v                 v
//!                                     publisher ─> Arc<Snapshot>     persister ─> Store (SQLite)
//!                                                    │
//!  faces' lists, HTTP API, metrics, poller's picks <─┘ (a pointer load, no lock)
//! ```
//!
//! * [`registry`]: the plain registry struct (records, verification, lifetimes, caps, DDNet
//!   data), the only place a record changes.
//! * [`views`]: snapshots of the listed records and what faces derive from them.
//! * [`handle`]: [`MasterHandle`], the owner: the registry lock (writers only), the publisher,
//!   the persister.
//! * [`store`]: the [`store::Store`] trait, serde rows, SQLite with integrity check and repair,
//!   PostgreSQL for several instances sharing one registry.
//! * [`cluster`]: with PostgreSQL, other instances' changes in (LISTEN/NOTIFY and catch-up),
//!   instance liveness, poll leases.
//! * [`runtime`]: the only code touching sockets: binding, the UDP runner, the TCP accept side
//!   with caps, the HTTP server with its deadlines.
//! * [`table`]: the face table, one descriptor per socket face; [`Listeners::bind`] and
//!   [`Master::run`] bind and serve every face through it.
//! * [`faces`]: one pure machine per wire protocol (GameAgent, GameSpy, Teeworlds 0.7/0.6,
//!   Quake III) or
//!   routes (DDNet HTTP, UT2003 list), and the management server's sessions.
//! * [`http`], [`api::dto`], [`web`]: the JSON API, its types, the browser page and history.
//! * [`poller`]: keeps listed servers fresh with the query engine.
//! * [`upstream`]: federation: learns servers from other masters, verified before listing.
//! * [`config`], [`metrics`], [`drops`], [`secrets`]: configuration, counters, typed drop
//!   reasons, stateless challenge keys.
//!
//! [`Master::open`] loads the registry; [`Master::run`] serves until `shutdown` resolves; at
//! shutdown every task stops through one [`CancellationToken`], requests in flight finish and
//! the store is flushed.
//!
//! The clock is read only by the runners, the publisher, the persister and housekeeping,
//! never by the registry or a face machine.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod config;
pub mod config_error;
pub mod poller;
pub mod probe;
pub mod upstream;

pub use muster_core::{
    board, bulk, clock, conns, drops, events, handle, locations, memfile, metrics, poll, registry,
    secrets, views,
};
pub use muster_faces::{runtime, table};
pub use muster_http::{api, limit as http_limit, routes as http, web};
pub use muster_proto::errors::error_chain;
pub use muster_store::cluster;

/// The protocol faces (crate `muster-faces`).
pub mod faces {
    pub use muster_faces::{gameagent, gamespy, mgmt, quake3, teeworlds, valve};
}

/// The registry's stores: the contract from the core, the implementations from `muster-store`.
pub mod store {
    pub use muster_store::*;
}

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use handle::{LoadReport, MasterHandle};
pub use runtime::CancellationToken;

use config::Config;
use registry::Timestamp;
use runtime::{bind_tcp, bind_udp};
use store::{PgShared, PgStore, SqliteStore, Store, StoreError, StoreUrl};
use table::FaceDescriptor;

/// Refreshes (heartbeats, polls) are written to the store at least this often; structural
/// changes within [`handle::FLUSH_DELAY`].
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Expired records are swept at least this often (`gameagent.md` §8.3.7 asks for 10 s).
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(5);

/// Daemon failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MasterError {
    /// The store could not be opened, loaded or written.
    #[error("storage failed")]
    Store(#[from] StoreError),
    /// A listener could not be bound.
    #[error("failed to bind {face} on {addr}")]
    Bind {
        /// The face.
        face: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A listener's address could not be read.
    #[error("failed to read a listener address")]
    LocalAddr(#[source] io::Error),
    /// A server task failed.
    #[error("a face failed")]
    Serve(#[source] io::Error),
    /// The locations file (config `ddnet.locations`) could not be used.
    #[error("locations file")]
    Locations(#[from] locations::LocationsError),
}

/// Sockets bound before [`Master::run`], so callers can bind port 0 and learn the real port.
#[derive(Debug, Default)]
pub struct Listeners {
    /// The HTTP face.
    pub http: Vec<tokio::net::TcpListener>,
    /// The socket faces of the face table, each with what its `bind` returned for every
    /// configured address.
    pub faces: Vec<FaceSockets>,
    /// Sockets the DDNet HTTP face sends its UDP challenges from (one per address family).
    pub ddnet_challenge: Vec<Arc<tokio::net::UdpSocket>>,
}

fn bind_all<T>(
    face: &'static str,
    addrs: &[SocketAddr],
    bind: impl Fn(SocketAddr) -> io::Result<T>,
) -> Result<Vec<T>, MasterError> {
    addrs
        .iter()
        .map(|&addr| bind(addr).map_err(|source| MasterError::Bind { face, addr, source }))
        .collect()
}

/// The sockets bound for one face of the table.
#[derive(Debug)]
pub struct FaceSockets {
    /// The face.
    pub face: &'static FaceDescriptor,
    /// Its sockets, in the order its `bind` returned them.
    pub sockets: Vec<table::BoundSocket>,
}

/// One bound socket, for the `listening <face> <udp|tcp> <address>` start-up lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The face name as the CLI flag spells it.
    pub face: &'static str,
    /// `"udp"` or `"tcp"`.
    pub transport: &'static str,
    /// The real address (the port the OS chose when 0 was asked).
    pub addr: SocketAddr,
}

impl Listeners {
    /// Binds every configured address of the HTTP face and of each face in the table.
    pub fn bind(config: &Config) -> Result<Self, MasterError> {
        let l = &config.listen;
        let mut faces = Vec::new();
        for &face in table::FACES {
            let sockets: Vec<_> = bind_all(face.name, &l.face(face.name).0, face.bind)?
                .into_iter()
                .flatten()
                .collect();
            if !sockets.is_empty() {
                faces.push(FaceSockets { face, sockets });
            }
        }
        Ok(Self {
            http: bind_all("http", &l.http.0, bind_tcp)?,
            faces,
            ddnet_challenge: if l.http.0.is_empty() {
                Vec::new()
            } else {
                let any: [SocketAddr; 2] = [
                    SocketAddr::from(([0, 0, 0, 0], 0)),
                    SocketAddr::from(([0u16; 8], 0)),
                ];
                // IPv6 may be missing on a host; IPv4 must work.
                let mut socks = bind_all("ddnet-challenge", &any[..1], bind_udp)?;
                if let Ok(v6) = bind_udp(any[1]) {
                    socks.push(v6);
                }
                socks.into_iter().map(Arc::new).collect()
            },
        })
    }

    /// Every bound socket with its real address: HTTP first, then the faces in table order.
    pub fn bound(&self) -> Result<Vec<Bound>, MasterError> {
        let mut out = Vec::new();
        for l in &self.http {
            out.push(Bound {
                face: "http",
                transport: "tcp",
                addr: l.local_addr().map_err(MasterError::LocalAddr)?,
            });
        }
        for f in &self.faces {
            for b in &f.sockets {
                out.push(Bound {
                    face: b.label,
                    transport: b.socket.transport(),
                    addr: b.socket.local_addr().map_err(MasterError::LocalAddr)?,
                });
            }
        }
        Ok(out)
    }

    /// The port of the first socket bound for the face called `name`.
    #[must_use]
    pub fn port_of(&self, name: &str) -> Option<u16> {
        self.faces
            .iter()
            .find(|f| f.face.name == name)
            .and_then(|f| f.sockets.first())
            .and_then(|b| b.socket.local_addr().ok())
            .map(|a| a.port())
    }
}

/// A loaded master, ready to [`Master::run`].
#[derive(Debug)]
pub struct Master {
    config: Config,
    handle: MasterHandle,
    report: LoadReport,
    samples: Option<tokio::sync::mpsc::UnboundedSender<poller::PollSample>>,
    /// Networks in the locations table installed at open (0: none).
    locations: usize,
    /// The shared database, when the store is PostgreSQL.
    pg: Option<Arc<PgShared>>,
    cluster: cluster::ClusterSettings,
}

/// The store `config` names: `[store] url`, or SQLite in the data directory.
pub fn store_url(config: &Config) -> Result<StoreUrl, StoreError> {
    match &config.store.url {
        Some(u) => StoreUrl::parse(u),
        None => Ok(StoreUrl::default_for(&config.data_dir)),
    }
}

/// This instance's name in the shared database's `instances` table: host and process id.
fn instance_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

impl Master {
    /// Opens the store in `config.data_dir` (checking its integrity) and loads the registry,
    /// pruning what expired by `now` while the daemon was down.
    pub fn open(config: Config, now: Timestamp) -> Result<Self, MasterError> {
        // The locations table is process-wide (see `api::locations`): installed only when
        // configured, read before the store so that a bad file stops the start early.
        let mut locations = 0;
        if !config.ddnet.locations.as_os_str().is_empty() {
            let table = locations::Locations::read(&config.ddnet.locations)?;
            locations = table.len();
            tracing::info!(networks = locations, "locations loaded");
            locations::install(table);
        }
        let url = store_url(&config)?;
        let (store, pg): (Box<dyn Store>, _) = match &url {
            StoreUrl::Sqlite(path) => (Box::new(SqliteStore::open_file(path)?), None),
            StoreUrl::Postgres(u) => {
                let shared = PgShared::connect(u, &instance_name())?;
                tracing::info!(store = %url.redacted(), node = shared.node(), "shared registry");
                (Box::new(PgStore::new(Arc::clone(&shared))), Some(shared))
            }
        };
        let (handle, report) = MasterHandle::open(config.registry_config(), store, now)?;
        handle.events().configure(config.events.limits());
        handle
            .metrics()
            .set_server_series_max(config.http.server_metrics_max);
        tracing::info!(
            restored = report.restored,
            expired = report.expired,
            orphaned = report.orphaned,
            "registry loaded"
        );
        if report.skipped > 0 {
            tracing::warn!(
                skipped = report.skipped,
                reasons = ?report.skipped_reasons,
                "stored records this build cannot read were dropped"
            );
        }
        Ok(Self {
            config,
            handle,
            report,
            samples: None,
            locations,
            pg,
            cluster: cluster::ClusterSettings::default(),
        })
    }

    /// The cluster's timings (with a PostgreSQL store; tests shorten them).
    #[must_use]
    pub fn with_cluster_settings(mut self, settings: cluster::ClusterSettings) -> Self {
        self.cluster = settings;
        self
    }

    /// The shared database, when the store is PostgreSQL.
    #[must_use]
    pub fn shared_store(&self) -> Option<&Arc<PgShared>> {
        self.pg.as_ref()
    }

    /// The shared handle (for faces and tests).
    #[must_use]
    pub fn handle(&self) -> MasterHandle {
        self.handle.clone()
    }

    /// Send every poll result to `samples` (for history).
    #[must_use]
    pub fn with_poll_samples(
        mut self,
        samples: tokio::sync::mpsc::UnboundedSender<poller::PollSample>,
    ) -> Self {
        self.samples = Some(samples);
        self
    }

    /// What loading found.
    #[must_use]
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// Serves `listeners` until `shutdown` resolves, then stops the faces, waits for requests
    /// in flight and flushes the store. A failed flush at shutdown is returned as an error.
    pub async fn run(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), MasterError> {
        let stop = CancellationToken::new();
        let info = api::dto::InfoDto {
            version: env!("CARGO_PKG_VERSION"),
            faces: listeners
                .bound()?
                .into_iter()
                .map(|b| api::dto::FaceDto {
                    face: b.face,
                    transport: b.transport,
                    address: b.addr.to_string(),
                })
                .collect(),
            ddnet_register_path: faces::teeworlds::ddnet::REGISTER_PATH,
            ddnet_servers_json_path: faces::teeworlds::ddnet::SERVERS_JSON_PATH,
            poller: self.config.poller.enabled,
            history: self.config.history.enabled,
            locations: self.locations,
        };
        let limits = &self.config.limits;
        let handle = self.handle.clone();
        let mut tasks = tokio::task::JoinSet::new();
        let sink: Arc<dyn runtime::tcp::MetricsSink> = Arc::new(handle.clone());
        tasks.spawn(handle.clone().run_publisher(stop.clone()));
        tasks.spawn(handle.clone().run_persister(FLUSH_INTERVAL, stop.clone()));
        tasks.spawn(housekeeping(handle.clone(), stop.clone()));
        let cluster_done = self
            .pg
            .as_ref()
            .map(|pg| cluster::spawn(Arc::clone(pg), handle.clone(), self.cluster, stop.clone()));
        // Faces ask the poller to poll records soon (GameSpy `\statechanged`, GameAgent `u`,
        // new GameSpy servers). Connected before any face starts.
        let changed = if self.config.poller.enabled {
            let (tx, rx) = poller::changed_channel();
            if !handle.set_changed_sender(tx) {
                tracing::warn!("a poller was already connected to this handle");
            }
            Some(rx)
        } else {
            None
        };
        let mut settings = table::settings(limits, &self.config.quake3, &self.config.valve);
        let mut gamespy = settings.get::<faces::gamespy::GameSpySettings>();
        gamespy.require_client_validate = self.config.gamespy.require_client_validate;
        gamespy.challenges.lifetime = self.config.lifetimes.pending.0;
        gamespy.poller = self.config.poller.enabled;
        // This master's id for `\sync\` (its own requests come back as `\final\`).
        let msid: Arc<str> = Arc::from(upstream::sync::new_msid());
        gamespy.sync = faces::gamespy::SyncSettings {
            peers: sync_peers(&self.config).await,
            export_learned: self.config.federation.export_learned,
            msid: Arc::clone(&msid),
        };
        if let Some(port) = listeners.port_of(faces::gamespy::TCP_FACE.name) {
            gamespy.list_port = port;
        }
        settings.set(gamespy);
        let faces = table::FaceStart {
            handle: handle.clone(),
            settings,
            placement: table::Placement::OwnThread,
            stop: stop.clone(),
        };
        for f in listeners.faces {
            let sockets = f.sockets.into_iter().map(|b| b.socket).collect();
            tasks.spawn(faces.serve(f.face, sockets));
        }
        let ddnet = faces::teeworlds::ddnet::DdnetSettings::from_limits(
            limits,
            Some(self.config.data_dir.clone()),
        );
        let mut samples = self.samples.clone();
        let mut history = None;
        if self.config.history.enabled {
            // A history that cannot be opened now (a full disk, the database down) is opened
            // at its next use: history is best effort and never stops the daemon. With a
            // PostgreSQL store it is kept in that database, shared by every instance on it.
            let (store, err) = match &self.pg {
                Some(pg) => web::history::ReopeningHistory::postgres(Arc::clone(pg)),
                None => web::history::ReopeningHistory::open(&self.config.data_dir),
            };
            if let Some(e) = err {
                tracing::warn!(error = %error_chain(&e), "player-count history unavailable; tried again at each write");
            }
            let h = web::History::new(Box::new(store), self.config.history.retention.0);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let (batches, batches_rx) = tokio::sync::mpsc::channel(web::history::UNPOLLED_CHANNEL);
            tasks.spawn(web::history::run(
                h.clone(),
                web::history::Samples {
                    polled: rx,
                    unpolled: batches_rx,
                },
                samples.take(),
                Some(handle.clone()),
                stop.clone(),
            ));
            // Servers the poller does not poll (management servers; all while it is off).
            tasks.spawn(web::history::feed_unpolled(
                handle.clone(),
                batches,
                web::history::Unpolled::new(
                    self.config.poller.enabled,
                    self.config.poller.interval.0,
                ),
                stop.clone(),
            ));
            samples = Some(tx);
            history = Some(h);
        }
        let history = match history {
            Some(h) => h,
            // Nothing is recorded; the route answers from an empty in-memory table.
            None => web::History::new(
                Box::new(web::history::SqliteHistory::in_memory()?),
                self.config.history.retention.0,
            ),
        };
        let list_limit = http_limit::HttpListLimit::new(
            handle.clone(),
            (limits.http_list_burst, limits.http_list_refill.0),
            (limits.metrics_burst, limits.metrics_refill.0),
            limits.max_tracked_sources,
            limits.proven_servers_max,
        );
        let http_limits = runtime::http::HttpLimits::from_limits(limits);
        let client_ip = Arc::new(runtime::http::ClientIp::new(
            &limits.connecting_ip_header,
            limits.trusted_proxy_nets().unwrap_or_default(),
        ));
        // `/probe` only for the networks `[http] probe_from` names (checked when the file was
        // read), and not at all when it names none.
        let probe_from: Vec<_> = (self.config.http.probe_from.iter())
            .filter_map(|n| muster_core::config::Net::parse(n).ok())
            .collect();
        let probe_router = if probe_from.is_empty() {
            axum::Router::new()
        } else {
            probe::router(probe::ProbeSettings {
                allowed: Some(probe_from),
                ..probe::ProbeSettings::within(http_limits.request_timeout)
            })
        };
        for l in listeners.http {
            let (ddnet_routes, ddnet_files) = faces::teeworlds::ddnet::router_and_files(
                handle.clone(),
                listeners.ddnet_challenge.clone(),
                ddnet.clone(),
            );
            let app = http::router(handle.clone())
                .merge(http::info_router(info.clone()))
                .merge(web::router(history.clone(), handle.clone()))
                .merge(api::history::router(history.clone(), handle.clone()))
                .merge(faces::gamespy::router(handle.clone()))
                .merge(ddnet_routes)
                .merge(probe_router.clone())
                .layer(axum::middleware::from_fn_with_state(
                    Arc::clone(&list_limit),
                    http_limit::limit,
                ))
                .fallback(http::not_found)
                .layer(axum::middleware::from_fn(web::etag));
            let app = http::limited(app, http_limits);
            let app = http::shared_layers(app, &self.config.http);
            tasks.spawn(runtime::http::serve(
                l,
                app,
                Some(ddnet_files),
                http_limits,
                Arc::clone(&client_ip),
                Arc::clone(&sink),
                stop.clone(),
            ));
        }
        if !self.config.upstream.is_empty() {
            tasks.spawn(upstream::run(
                handle.clone(),
                self.config.upstream.clone(),
                Arc::clone(&msid),
                stop.clone(),
            ));
        }
        if self.config.poller.enabled {
            let settings = poller::PollerSettings {
                samples,
                changed,
                leases: self.pg.as_ref().map(|pg| {
                    Arc::new(cluster::PgLeases::new(Arc::clone(pg))) as Arc<dyn poller::PollLeases>
                }),
                ..poller::PollerSettings::from_config(&self.config.poller)
            };
            let (h, s) = (handle.clone(), stop.clone());
            tasks.spawn(async move {
                if let Err(e) = poller::run(h, settings, s).await {
                    tracing::error!(error = %error_chain(&e), "the poller could not start");
                }
            });
        }

        shutdown.await;
        tracing::info!("shutting down");
        // Event streams end first, so that their connections close with the rest.
        handle.events().close();
        stop.cancel();
        while let Some(res) = tasks.join_next().await {
            if let Err(e) = res {
                tracing::error!(error = %e, "task panicked");
            }
        }
        if let Some(done) = cluster_done {
            done.cancelled().await;
        }
        handle.publish();
        let flushed = handle.flush();
        if let Some(pg) = &self.pg {
            // After the last write: the others drop this instance's records and leases now.
            cluster::deregister(pg);
        }
        flushed?;
        Ok(())
    }
}

/// The sources whose `\sync\` the GameSpy face answers: `[federation] sync_peers` and the
/// hosts of the `gamespy` upstreams (resolved now; one that does not resolve is left out and
/// logged).
async fn sync_peers(config: &Config) -> Vec<upstream::settings::Net> {
    // validate() parsed them already.
    let mut peers = config.federation.peers().unwrap_or_default();
    for u in &config.upstream {
        if u.kind != upstream::settings::UpstreamKind::Gamespy {
            continue;
        }
        match tokio::net::lookup_host(u.address.as_str()).await {
            Ok(addrs) => {
                for a in addrs {
                    if let Ok(n) = upstream::settings::Net::parse(&a.ip().to_string()) {
                        peers.push(n);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(upstream = %u.display_name(), error = %e, "cannot resolve a gamespy upstream: it may not sync from here")
            }
        }
    }
    peers
}

/// Prunes expired records every [`PRUNE_INTERVAL`] until stopped.
async fn housekeeping(handle: MasterHandle, stop: CancellationToken) {
    let mut prune = tokio::time::interval(PRUNE_INTERVAL);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = prune.tick() => {
                let dead = handle.prune(Timestamp::now());
                if !dead.is_empty() {
                    tracing::debug!(n = dead.len(), "expired");
                }
            }
        }
    }
}

/// Opens the store in `config.data_dir`, loads the registry and serves `listeners` until
/// `shutdown` resolves (see [`Master::run`]).
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), MasterError> {
    Master::open(config, Timestamp::now())?
        .run(listeners, shutdown)
        .await
}
