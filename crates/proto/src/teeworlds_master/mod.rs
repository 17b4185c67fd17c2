//! teeworlds_master: not yet implemented.
