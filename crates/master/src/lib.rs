//! x
#![warn(missing_docs)]
pub mod registry;
