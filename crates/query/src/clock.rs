//! The driver's one reading of the monotonic clock: tokio's, so that a paused test clock is the
//! one the engine and the list readers see. (The sans-IO scheduler takes time as an argument.)

use std::time::Instant;

/// Now, on tokio's clock.
#[must_use]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
