//! Muster's protocol layer: byte-exact codecs for every game-server discovery protocol Muster
//! speaks, and one sans-IO state machine per query protocol.
//!
//! This crate **never** opens a socket, spawns a task or reads the clock. Decoders take byte
//! slices and return values or a [`DecodeError`]; encoders append to a caller-owned
//! `Vec<u8>` and cannot fail; query machines ([`query::QueryMachine`]) take `now` as an
//! argument and hand datagrams back through `poll_transmit`. The tokio driver lives in
//! `muster-query`, the daemon in `muster-master`.
//!
//! Modules are named after protocols, not games:
//!
//! | module | protocol |
//! |---|---|
//! | [`a2s`] | Valve A2S server queries (Source and GoldSrc), split and bzip2 replies |
//! | [`gameagent`] | Serious Sam GameAgent master (UDP 9005) and server queries 0x01–0x04 |
//! | [`gamespy1`] | GameSpy v1 `\status\` queries, tokenizer and reassembly |
//! | [`unreal2`] | Unreal Engine 2 native query (UT2003/UT2004) |
//! | [`teeworlds`] | Teeworlds 0.6 / DDNet extended / 0.7 server info |
//! | [`gamespy_master`] | GameSpy master: heartbeats, gsmsalg, TCP lists, sync |
//! | [`teeworlds_master`] | Teeworlds UDP masters and DDNet HTTP register / `servers.json` |
//! | [`ut2003_list`] | UT2003 plain-text master list |
//! | [`quake3`] | Quake III / DarkPlaces queries and the dpmaster master protocol |
//! | [`mgmt`] | the Bomberman management server: length-prefixed JSON over TCP |
//!
//! Every query maps into the protocol-neutral [`model::ServerInfo`]; [`display`] gives its rule
//! keys English names for tables.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::indexing_slicing, clippy::unwrap_used))]

pub mod display;
pub mod errors;
pub mod games;
pub mod limit;
pub mod model;
pub mod probe;
pub mod query;
pub mod respond;
pub mod text;
pub mod wire;

pub mod a2s;
pub mod gameagent;
pub mod gamespy1;
pub mod gamespy_master;
pub mod mgmt;
pub mod quake3;
pub mod teeworlds;
pub mod teeworlds_master;
pub mod unreal2;
pub mod ut2003_list;
pub mod valve_master;

pub use model::{ListedServer, Player, Protocol, RawValue, Rule, ServerInfo, ServerList, Text};
pub use query::{Event, ListEvent, QueryConfig, QueryError, QueryEvent, QueryMachine, Transmit};
pub use wire::DecodeError;
