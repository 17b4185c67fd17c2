//! Conformance of the mgmt face with real peers.
