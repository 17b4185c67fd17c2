//! mgmt: not yet implemented.
