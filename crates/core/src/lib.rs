//! The master's core: everything the daemon knows, and nothing about how it talks.
//!
//! ```text
//!  faces (crate muster-faces) ──registry calls──> MasterHandle: Registry (one owner)
//!                                                   │ view log          │ dirty keys
//!                                                   v                   v
//!                               publisher ─> Arc<Snapshot> + Deltas   persister ─> dyn Store
//!                                              │            │
//!                      faces' lists, API <─────┘            └──> EventHub (numbered events)
//! ```
//!
//! * [`registry`]: the plain registry (records, verification, lifetimes, caps, DDNet data),
//!   the only place a record changes.
//! * [`views`]: snapshots of the listed records, their orders and the API's list query.
//! * [`events`]: numbered deltas, the backlog and the subscriptions, as data (rendering is the
//!   HTTP layer's).
//! * [`handle`]: [`MasterHandle`], the owner: the registry lock (writers only), the publisher,
//!   the persister.
//! * [`store`]: the [`store::Store`] contract and its rows; the implementations live in
//!   `muster-store`.
//! * [`conns`], [`drops`], [`metrics`], [`secrets`], [`locations`], [`board`], [`poll`]:
//!   connection caps as data, typed drop reasons, counters, stateless challenge keys, the
//!   location table, the federation status board, what the poller shares.
//!
//! This crate depends on no socket, HTTP or web crate; a CI step keeps it so. The clock is
//! read only through [`clock::now`] and [`registry::Timestamp::now`], by the handle's
//! publisher, persister and housekeeping, never by the registry.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod board;
pub mod bulk;
pub mod clock;
pub mod config;
pub mod conns;
pub mod drops;
pub mod events;
pub mod handle;
pub mod locations;
pub mod memfile;
pub mod metrics;
pub mod poll;
pub mod registry;
pub mod secrets;
pub mod store;
pub mod views;

#[doc(hidden)]
pub mod testdir;

pub use handle::{LoadReport, MasterHandle};

pub use muster_proto::errors::error_chain;
