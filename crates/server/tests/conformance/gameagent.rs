//! Conformance of the gameagent responder with real client peers.
