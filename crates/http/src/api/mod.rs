//! The HTTP API: its public types, the event stream and its wire form.

pub mod badge;
pub mod dto;
pub mod frames;
pub mod history;
pub mod sse;
