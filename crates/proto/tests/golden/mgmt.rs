//! Golden tests for mgmt.
