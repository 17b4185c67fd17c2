//! Conformance of the gameagent face with real peers.
