//! Golden tests for unreal2.
