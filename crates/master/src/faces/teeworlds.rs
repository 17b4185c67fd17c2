//! The teeworlds face (to be written).
