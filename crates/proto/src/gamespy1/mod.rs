//! gamespy1: not yet implemented.
