//! The HTTP API's public types and its listing over snapshots.

pub mod dto;
pub mod list;
pub mod locations;
pub mod sse;
