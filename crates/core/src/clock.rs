//! The one reading of the monotonic clock: tokio's, so that a paused test clock is the one
//! every component sees.

use std::time::Instant;

/// Now, on tokio's clock.
#[must_use]
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
