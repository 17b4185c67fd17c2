//! The HTTP API: its public types, the event stream and its wire form.

pub mod dto;
pub mod frames;
pub mod sse;
