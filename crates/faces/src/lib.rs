//! The master's faces: one per wire protocol, each turning that protocol into registry calls,
//! and the runners that drive them on sockets.
//!
//! ```text
//!  socket ─bytes─> runner (runtime::udp / runtime::tcp / runtime::http) ─> face (pure machine)
//!                                                                           │ registry calls
//!                                                                           v
//!                                                     muster_core::MasterHandle (one owner)
//! ```
//!
//! A face is a pure machine ([`runtime::udp::UdpMachine`], a TCP conversation) or a set of
//! routes; the [`runtime`] is the only code here that touches sockets. Each socket face exports
//! one descriptor, listed in the [`table`], through which the daemon and the tests bind and
//! serve it. Protocol logic that needs no
//! socket lives in `muster-proto`; a face applies the shared limits and mirrors what the
//! protocol decided into the registry. The HTTP API and the web page sit above this crate,
//! the daemon's composition root above them.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod face;
pub mod gameagent;
pub mod gamespy;
pub mod mgmt;
pub mod quake3;
pub mod runtime;
pub mod table;
pub mod teeworlds;
pub mod valve;

pub use muster_core::MasterHandle;
pub use runtime::CancellationToken;
