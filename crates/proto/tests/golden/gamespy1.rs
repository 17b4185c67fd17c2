//! Golden tests for gamespy1.
