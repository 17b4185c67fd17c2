//! Conformance of Muster's responders with real client peers (qstat, gamedig, opengsq): each
//! peer queries a responder served on loopback and must read exactly the configured state.
//! Peer discovery and the skip-or-fail rule are `muster_testkit`'s.

#[path = "../integration/counted.rs"]
mod counted;
mod support;

mod gameagent;
mod gamespy1;
mod teeworlds;
mod unreal2;
