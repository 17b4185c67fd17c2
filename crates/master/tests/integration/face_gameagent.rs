//! Integration tests of the gameagent face over loopback.
