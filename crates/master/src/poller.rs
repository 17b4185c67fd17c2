//! The poller: keeps listed servers fresh by querying them (to be written).
