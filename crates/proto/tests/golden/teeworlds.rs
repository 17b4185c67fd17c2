//! Golden tests for teeworlds.
