//! Query robustness against misbehaving servers (loss, duplicates, reordering, truncation, floods, IPv6).
