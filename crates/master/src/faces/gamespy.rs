//! The gamespy face (to be written).
