//! Golden tests for teeworlds_master.
