//! gamespy_master: not yet implemented.
