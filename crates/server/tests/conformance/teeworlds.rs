//! Conformance of the teeworlds responder with real client peers.
