//! Conformance of the teeworlds face with real peers.
