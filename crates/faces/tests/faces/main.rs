//! The faces on real sockets on loopback, each started through the face table as the daemon
//! starts it (on the test's runtime).

mod face_valve;
