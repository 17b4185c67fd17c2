//! Integration tests of the teeworlds face over loopback.
