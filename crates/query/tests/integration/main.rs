//! Loopback integration tests of the engine with a small echo protocol: real sockets, real
//! timers, a fake server that can drop or ignore requests.

mod arrival;
mod echo;
mod engine;
mod scheduler;
