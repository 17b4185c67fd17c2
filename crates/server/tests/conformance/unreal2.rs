//! Conformance of the unreal2 responder with real client peers.
