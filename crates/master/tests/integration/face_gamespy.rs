//! Integration tests of the gamespy face over loopback.
