//! Conformance of the gamespy1 responder with real client peers.
