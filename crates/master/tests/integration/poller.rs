//! Integration tests of the poller over loopback.
