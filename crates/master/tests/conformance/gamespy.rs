//! Conformance of the gamespy face with real peers.
