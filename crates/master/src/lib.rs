//! The Muster master daemon's core: one registry behind every master face, persisted in
//! SQLite, served over an HTTP API with metrics.
//!
//! ```text
//!   faces (UDP/TCP, one task each) ──┐
//!   HTTP face (axum) ────────────────┼──> MasterHandle ──> Registry (pure, time passed in)
//!   housekeeping (1 s tick) ─────────┘         │
//!                                              └────────> Storage (SQLite, WAL)
//! ```
//!
//! * [`registry`]: the plain registry struct: records, caps, expiry, views per face, listing.
//! * [`store`]: the [`store::Storage`] trait and [`store::SqliteStore`].
//! * [`handle`]: [`MasterHandle`], the shared registry + store + metrics (why a mutex: see there).
//! * [`http`] and [`api::dto`]: the HTTP face and its JSON types; [`http_limit`]: the
//!   per-source bucket on its list routes.
//! * [`config`]: the TOML configuration with the spec defaults.
//! * [`tcp`]: dual-stack binding, connection caps and idle timeouts for TCP faces.
//!
//! [`Master::open`] loads the registry; [`Master::run`] serves until `shutdown` resolves,
//! pruning expired records every [`PRUNE_INTERVAL`] and flushing refreshes every
//! [`FLUSH_INTERVAL`]; at shutdown it stops accepting, lets requests in flight finish and
//! flushes. A protocol face is one more task holding a [`MasterHandle`] clone (and a field in
//! [`Listeners`]), spawned in [`Master::run`] next to the HTTP face.
//!
//! * [`web`]: the server browser page at `/`, the player-count history (kept from the
//!   poller's samples in the same SQLite file) and ETags on the API (issue 6).
//!
//! The clock is read only here and in the faces ([`registry::Timestamp::now`]), never in
//! the registry.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod api;
pub mod config;
pub mod faces;
pub mod handle;
pub mod http;
pub mod http_limit;
pub mod metrics;
pub mod poller;
pub mod registry;
pub mod store;
pub mod tcp;
pub mod web;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use handle::{LoadReport, MasterHandle};

use config::Config;
use registry::Timestamp;
use store::{SqliteStore, StoreError};
use tcp::{CappedListener, ConnLimits};

/// Refreshes are written to the store at least this often.
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
    #[error("http server failed")]
    Serve(#[source] io::Error),
}

/// Sockets bound before [`Master::run`], so callers can bind port 0 and learn the real port.
/// The lead adds one field per protocol face.
#[derive(Debug, Default)]
pub struct Listeners {
    /// The HTTP face.
    pub http: Vec<tokio::net::TcpListener>,
    /// The GameAgent master (UDP).
    pub gameagent: Vec<tokio::net::UdpSocket>,
    /// GameSpy heartbeats and the master's own query face (UDP).
    pub gamespy_udp: Vec<tokio::net::UdpSocket>,
    /// GameSpy list connections (TCP).
    pub gamespy_tcp: Vec<tokio::net::TcpListener>,
    /// The management server (TCP).
    pub mgmt: Vec<tokio::net::TcpListener>,
    /// Teeworlds 0.7 master sockets, each with its firewall-check socket (master port + 1).
    pub teeworlds07: Vec<faces::teeworlds::SocketPair07>,
    /// Teeworlds 0.6 list sockets.
    pub teeworlds06: Vec<tokio::net::UdpSocket>,
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
    /// Binds every configured address of the faces this crate serves.
    pub fn bind(config: &Config) -> Result<Self, MasterError> {
        let l = &config.listen;
        Ok(Self {
            http: bind_all("http", &l.http.0, tcp::bind_tcp)?,
            gameagent: bind_all("gameagent", &l.gameagent.0, tcp::bind_udp)?,
            gamespy_udp: bind_all("gamespy-udp", &l.gamespy_udp.0, tcp::bind_udp)?,
            gamespy_tcp: bind_all("gamespy-tcp", &l.gamespy_tcp.0, tcp::bind_tcp)?,
            mgmt: bind_all("mgmt", &l.mgmt.0, tcp::bind_tcp)?,
            teeworlds07: bind_all("teeworlds07", &l.teeworlds07.0, |addr| {
                let master = tcp::bind_udp(addr)?;
                // The checker answers from master port + 1 (8284 for 8283), as teeworlds expects.
                let port = master.local_addr()?.port();
                let checker_port = if addr.port() == 0 {
                    0
                } else {
                    port.saturating_add(1)
                };
                let checker = tcp::bind_udp(SocketAddr::new(addr.ip(), checker_port))?;
                Ok(faces::teeworlds::SocketPair07 { master, checker })
            })?,
            teeworlds06: bind_all("teeworlds06", &l.teeworlds06.0, tcp::bind_udp)?,
            ddnet_challenge: if l.http.0.is_empty() {
                Vec::new()
            } else {
                let any: [SocketAddr; 2] = [
                    SocketAddr::from(([0, 0, 0, 0], 0)),
                    SocketAddr::from(([0u16; 8], 0)),
                ];
                // IPv6 may be missing on a host; IPv4 must work.
                let mut socks = bind_all("ddnet-challenge", &any[..1], tcp::bind_udp)?;
                if let Ok(v6) = tcp::bind_udp(any[1]) {
                    socks.push(v6);
                }
                socks.into_iter().map(Arc::new).collect()
            },
        })
    }

    /// Every bound socket with its real address.
    pub fn bound(&self) -> Result<Vec<Bound>, MasterError> {
        let mut out = Vec::new();
        let mut tcp =
            |face: &'static str, ls: &[tokio::net::TcpListener]| -> Result<(), MasterError> {
                for l in ls {
                    out.push(Bound {
                        face,
                        transport: "tcp",
                        addr: l.local_addr().map_err(MasterError::LocalAddr)?,
                    });
                }
                Ok(())
            };
        tcp("http", &self.http)?;
        tcp("gamespy-tcp", &self.gamespy_tcp)?;
        tcp("mgmt", &self.mgmt)?;
        let mut udp = |face: &'static str, s: &tokio::net::UdpSocket| -> Result<(), MasterError> {
            out.push(Bound {
                face,
                transport: "udp",
                addr: s.local_addr().map_err(MasterError::LocalAddr)?,
            });
            Ok(())
        };
        for s in &self.gameagent {
            udp("gameagent", s)?;
        }
        for s in &self.gamespy_udp {
            udp("gamespy-udp", s)?;
        }
        for p in &self.teeworlds07 {
            udp("teeworlds07", &p.master)?;
            udp("teeworlds07-checker", &p.checker)?;
        }
        for s in &self.teeworlds06 {
            udp("teeworlds06", s)?;
        }
        Ok(out)
    }
}

/// A loaded master, ready to [`Master::run`].
#[derive(Debug)]
pub struct Master {
    config: Config,
    handle: MasterHandle,
    report: LoadReport,
    samples: Option<tokio::sync::mpsc::UnboundedSender<poller::PollSample>>,
}

impl Master {
    /// Opens the store in `config.data_dir` and loads the registry, pruning what expired by
    /// `now` while the daemon was down.
    pub fn open(config: Config, now: Timestamp) -> Result<Self, MasterError> {
        let store = SqliteStore::open(&config.data_dir)?;
        let (handle, report) = MasterHandle::open(config.registry_config(), Box::new(store), now)?;
        tracing::info!(
            restored = report.restored,
            expired = report.expired,
            orphaned = report.orphaned,
            "registry loaded"
        );
        Ok(Self {
            config,
            handle,
            report,
            samples: None,
        })
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
    pub fn load_report(&self) -> LoadReport {
        self.report
    }

    /// Serves `listeners` until `shutdown` resolves, then stops the faces, waits for requests
    /// in flight and flushes the store. A failed flush at shutdown is returned as an error.
    pub async fn run(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), MasterError> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let limits = &self.config.limits;
        let conn = ConnLimits {
            max_connections: limits.tcp_max_connections,
            max_per_source: limits.tcp_max_per_source,
            idle_timeout: limits.tcp_idle_timeout.0,
        };
        let http_limits = http::HttpLimits {
            body_limit: limits.http_body_limit,
            request_timeout: limits.http_request_timeout.0,
        };
        let mut tasks = tokio::task::JoinSet::new();
        let sink: Arc<dyn tcp::MetricsSink> = Arc::new(self.handle.clone());
        // Faces mark records changed (GameSpy `\statechanged`, GameAgent `u`) through the
        // handle; the poller polls them first. Connected before any face starts.
        let changed = if self.config.poller.enabled {
            let (tx, rx) = poller::changed_channel();
            if !self.handle.set_changed_sender(tx) {
                tracing::warn!("a poller was already connected to this handle");
            }
            Some(rx)
        } else {
            None
        };
        let mut gamespy = faces::gamespy::GameSpySettings::from_limits(limits);
        gamespy.require_client_validate = self.config.gamespy.require_client_validate;
        if let Some(port) = listeners
            .gamespy_tcp
            .first()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port())
        {
            gamespy.list_port = port;
        }
        if !listeners.gamespy_udp.is_empty() {
            tasks.spawn(serve_face(faces::gamespy::run_udp(
                self.handle.clone(),
                listeners.gamespy_udp,
                gamespy.clone(),
                stop_rx.clone(),
            )));
        }
        if !listeners.gamespy_tcp.is_empty() {
            tasks.spawn(serve_face(faces::gamespy::run_tcp(
                self.handle.clone(),
                listeners.gamespy_tcp,
                gamespy,
                stop_rx.clone(),
            )));
        }
        if !listeners.mgmt.is_empty() {
            let mgmt = faces::mgmt::MgmtSettings {
                idle_timeout: limits.mgmt_idle_timeout.0,
                max_connections: limits.tcp_max_connections,
                max_per_source: limits.tcp_max_per_source,
                max_tracked_sources: limits.max_tracked_sources,
                egress_bytes_per_sec: limits.egress_bytes_per_sec,
                ..faces::mgmt::MgmtSettings::default()
            };
            tasks.spawn(serve_face(faces::mgmt::run(
                self.handle.clone(),
                listeners.mgmt,
                mgmt,
                stop_rx.clone(),
            )));
        }
        if !listeners.gameagent.is_empty() {
            let mut gameagent = faces::gameagent::GameAgentSettings::from_limits(limits);
            // The face and the registry expire a silent server at the same moment.
            gameagent.master.expiry = self.config.lifetimes.gameagent.0;
            tasks.spawn(serve_face(faces::gameagent::run(
                self.handle.clone(),
                listeners.gameagent,
                gameagent,
                stop_rx.clone(),
            )));
        }
        let teeworlds = faces::teeworlds::TeeworldsSettings {
            max_tracked_sources: limits.max_tracked_sources,
            egress_bytes_per_sec: limits.egress_bytes_per_sec,
            ..faces::teeworlds::TeeworldsSettings::default()
        };
        if !listeners.teeworlds07.is_empty() {
            tasks.spawn(serve_face(faces::teeworlds::run07(
                self.handle.clone(),
                listeners.teeworlds07,
                teeworlds.clone(),
                stop_rx.clone(),
            )));
        }
        if !listeners.teeworlds06.is_empty() {
            tasks.spawn(serve_face(faces::teeworlds::run06(
                self.handle.clone(),
                listeners.teeworlds06,
                teeworlds,
                stop_rx.clone(),
            )));
        }
        let ddnet = faces::teeworlds::ddnet::DdnetSettings {
            max_tracked_sources: limits.max_tracked_sources,
            egress_bytes_per_sec: limits.egress_bytes_per_sec,
            body_limit: limits.http_body_limit,
            address_lifetime: self.config.lifetimes.ddnet.0,
            register_burst: limits.ddnet_register_burst,
            register_refill: limits.ddnet_register_refill.0,
            challenge_burst: limits.ddnet_challenge_burst,
            challenge_refill: limits.ddnet_challenge_refill.0,
            ..faces::teeworlds::ddnet::DdnetSettings::default()
        };
        let mut samples = self.samples.clone();
        let mut history = None;
        if self.config.poller.enabled && self.config.history.enabled {
            let h = web::History::new(
                Box::new(web::history::SqliteHistory::open(&self.config.data_dir)?),
                self.config.history.retention.0,
            );
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tasks.spawn(serve_face(web::history::run(
                h.clone(),
                rx,
                samples.take(),
                stop_rx.clone(),
            )));
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
            self.handle.clone(),
            muster_proto::limit::BucketConfig::one_every(
                limits.http_list_burst,
                limits.http_list_refill.0,
            ),
            limits.max_tracked_sources,
        );
        for l in listeners.http {
            let app = http::router(self.handle.clone(), http_limits)
                .merge(web::router(history.clone()))
                .merge(faces::gamespy::router(self.handle.clone()))
                .merge(faces::teeworlds::ddnet::router(
                    self.handle.clone(),
                    listeners.ddnet_challenge.clone(),
                    ddnet.clone(),
                ))
                .layer(axum::middleware::from_fn_with_state(
                    Arc::clone(&list_limit),
                    http_limit::limit,
                ))
                .layer(axum::middleware::from_fn(web::etag));
            // `tap_io` (a no-op here) makes axum's connect-info impl apply to our listener.
            let listener = axum::serve::ListenerExt::tap_io(
                CappedListener::new(l, conn).with_metrics(Arc::clone(&sink)),
                |_| {},
            );
            let mut stop = stop_rx.clone();
            tasks.spawn(async move {
                // The DDNet register needs the peer address (it challenges it over UDP).
                axum::serve(
                    listener,
                    app.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
                .map_err(MasterError::Serve)
            });
        }
        tasks.spawn(housekeeping(self.handle.clone(), stop_rx.clone()));
        if self.config.poller.enabled {
            let settings = poller::PollerSettings {
                samples,
                changed,
                ..poller::PollerSettings::from_config(&self.config.poller)
            };
            tasks.spawn(serve_face(poller::run(
                self.handle.clone(),
                settings,
                stop_rx.clone(),
            )));
        }

        shutdown.await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
        let mut first_err = None;
        while let Some(res) = tasks.join_next().await {
            match res {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "task failed");
                    first_err.get_or_insert(e);
                }
                Err(e) => tracing::error!(error = %e, "task panicked"),
            }
        }
        self.handle.flush()?;
        first_err.map_or(Ok(()), Err)
    }
}

/// A face's I/O error becomes the daemon's.
async fn serve_face(face: impl Future<Output = io::Result<()>> + Send) -> Result<(), MasterError> {
    face.await.map_err(MasterError::Serve)
}

/// Flushes refreshes every [`FLUSH_INTERVAL`] and prunes every [`PRUNE_INTERVAL`] until
/// stopped. Store errors are logged and retried on the next tick, not fatal.
async fn housekeeping(
    handle: MasterHandle,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), MasterError> {
    let mut flush = tokio::time::interval(FLUSH_INTERVAL);
    let mut prune = tokio::time::interval(PRUNE_INTERVAL);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return Ok(()),
            _ = flush.tick() => {
                if let Err(e) = handle.flush() {
                    tracing::warn!(error = %e, "flush failed");
                }
            }
            _ = prune.tick() => match handle.prune(Timestamp::now()) {
                Ok(dead) if !dead.is_empty() => tracing::debug!(n = dead.len(), "expired"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "prune failed"),
            },
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
