//! The gameagent face (to be written).
