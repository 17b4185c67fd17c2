//! The mgmt face (to be written).
