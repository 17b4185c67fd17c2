//! The game-server side of Muster: drives the sans-IO responders of `muster-proto` over tokio
//! sockets, with the rate limits every Muster face shares.
//!
//! A game server written in Rust embeds this crate to be queryable by every client of its
//! protocol; `muster emulate` uses it to run farms of emulated servers.
#![warn(missing_docs)]

mod delay;
pub mod endpoints;
pub mod farm;
pub mod mgmt;
pub mod run;
pub mod udp;

pub use udp::{BoxedRegistrar, Impairment, Limits, Stats, serve, serve_registered};
