//! The HTTP API's public types.

pub mod dto;
