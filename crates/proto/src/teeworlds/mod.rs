//! teeworlds: not yet implemented.
