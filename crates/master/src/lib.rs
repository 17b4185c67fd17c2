//! x
#![warn(missing_docs)]
pub mod registry;
pub mod store;
pub mod config;
