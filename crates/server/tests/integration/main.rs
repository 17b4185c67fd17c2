//! Loopback tests of the UDP responder driver.

mod udp;
