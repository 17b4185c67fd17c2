//! gameagent: not yet implemented.
