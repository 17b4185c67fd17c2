//! The protocol faces of the master: each turns one wire protocol into registry calls.
//!
//! A face is a task holding a [`crate::MasterHandle`] clone; `Master::run` spawns one per
//! configured listener. Protocol logic that needs no socket lives in `muster-proto`; a face
//! only moves bytes, applies the shared limits and mirrors what the protocol decided into the
//! registry.

pub mod gameagent;
pub mod gamespy;
pub mod mgmt;
pub mod teeworlds;
