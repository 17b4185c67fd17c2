//! Golden tests for gameagent.
