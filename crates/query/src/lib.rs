//! Muster's query engine: the tokio driver for the sans-IO query machines of `muster-proto`.
//!
//! The machines decide what to send, when to retry and when a query is done; this crate only
//! moves their bytes over one UDP socket per address family, keeps thousands of them in flight,
//! paces sends to a global budget, enforces an overall deadline and streams results as they
//! complete. It never parses a protocol.
//!
//! Most callers want [`query_one`] or [`query_many`] ([`client`]): a [`Target`] is a game
//! address and a [`QueryProtocol`], and the answer is the protocol-neutral
//! [`muster_proto::ServerInfo`]. [`list_one`] and [`list_many`] ([`lists`]) fetch master
//! lists. Below them, [`spawn`] runs any [`muster_proto::QueryMachine`] through the sans-IO
//! [`Scheduler`] ([`scheduler`], with the RTO estimates of [`rto`]):
//!
//! ```no_run
//! # async fn demo() {
//! use muster_query::{spawn, Job, Options};
//! # fn make(_: muster_proto::QueryConfig) -> Fake { Fake }
//! # struct Fake;
//! # impl muster_proto::QueryMachine for Fake { type Output = ();
//! #   fn handle_datagram(&mut self, _: std::time::Instant, _: std::net::SocketAddr, _: &[u8]) {}
//! #   fn handle_timeout(&mut self, _: std::time::Instant) {}
//! #   fn poll_transmit(&mut self, _: std::time::Instant, _: &mut Vec<u8>) -> Option<muster_proto::Transmit> { None }
//! #   fn poll_timeout(&self) -> Option<std::time::Instant> { None }
//! #   fn poll_event(&mut self) -> Option<muster_proto::Event<()>> { None }
//! #   fn abort(&mut self, _: std::time::Instant) {} }
//! let jobs = (0..3).map(|i| Job { tag: i, build: make });
//! let mut results = spawn(jobs, Options::default());
//! while let Some(done) = results.recv().await {
//!     println!("{}: {:?}", done.tag, done.outcome.is_ok());
//! }
//! # }
//! ```
#![warn(missing_docs)]

pub mod arrival;
pub mod client;
mod clock;
pub mod engine;
pub mod error;
pub mod lists;
pub mod machines;
pub mod rto;
pub mod scheduler;
mod socket;
pub mod target;

pub use client::{Answer, Outcome, QueryProtocol, Target, query_many, query_one};
pub use engine::spawn;
pub use error::Failure;
pub use lists::{Document, ListedAddress, Lobby, MasterEntry, MasterSource, list_many, list_one};
pub use scheduler::{Completed, Job, Options, Scheduler};
pub use target::{AddressError, HostPort, ResolveError, resolve_input, resolve_inputs};
