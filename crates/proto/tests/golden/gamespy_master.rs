//! Golden tests for gamespy_master.
