//! DDNet HTTP (todo)
