//! The master's HTTP API and web page, above the faces: JSON routes over the published
//! snapshots, the event stream rendered from the core's event log, `/metrics`, the history
//! and the browser page. Served by the faces' HTTP runner ([`muster_faces::runtime::http`]);
//! the daemon's composition root mounts these routes beside the faces' own (DDNet's
//! register, the UT2003 lists).
//!
//! * [`routes`]: the router, health, metrics, lists and details, the OpenAPI document.
//! * [`params`]: which query parameters each route takes.
//! * [`api`]: the JSON types, the event stream and its wire form.
//! * [`web`]: the page, ETags and the player-count history.
//! * [`limit`]: per-source token buckets on the read routes.
//! * [`metrics`]: the `/metrics` exposition, assembled in one place.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod api;
pub mod limit;
pub mod metrics;
pub mod params;
pub mod routes;
pub mod web;

use serde::{Deserialize, Serialize};

pub use muster_core::metrics::DEFAULT_SERVER_METRICS_MAX;

/// HTTP face options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Origins whose pages may read the API (`Access-Control-Allow-Origin`); `["*"]` allows
    /// any. Empty (the default): no CORS headers, only same-origin pages.
    pub cors_origins: Vec<String>,
    /// Compress API responses (gzip, brotli) for clients that accept it.
    pub compression: bool,
    /// Most per-server series (`muster_server_players`, `muster_server_up`, one each per
    /// listed server) `/metrics` shows; the rest are left out (0: none).
    pub server_metrics_max: usize,
    /// Networks whose clients may use `/probe` (a query of any game server they name, see
    /// the exporter's documentation), as addresses or CIDR prefixes. Loopback only by default:
    /// an open probe would let anyone make the master query addresses of their choice. Empty:
    /// no `/probe` route at all.
    pub probe_from: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            cors_origins: Vec::new(),
            compression: true,
            server_metrics_max: DEFAULT_SERVER_METRICS_MAX,
            probe_from: vec!["127.0.0.0/8".to_owned(), "::1/128".to_owned()],
        }
    }
}
