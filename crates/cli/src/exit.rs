//! Exit codes, as documented in `--help`.

/// Every server answered.
pub(crate) const OK: u8 = 0;
/// At least one server did not answer (timeout or error); the others were printed.
pub(crate) const SOME_FAILED: u8 = 1;
/// The command line or an input was wrong (clap also uses 2).
pub(crate) const USAGE: u8 = 2;
/// Muster itself failed (cannot bind a socket, cannot write output).
pub(crate) const INTERNAL: u8 = 3;
