//! Integration tests of the mgmt face over loopback.
