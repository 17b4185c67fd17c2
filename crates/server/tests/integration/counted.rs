//! Reading a responder's sent counter after the client has its replies.
//!
//! The counter is bumped just after the socket took a datagram, so a client on another thread
//! can hold the last reply a moment before the count shows it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The counter once it reaches `at_least`, or what it holds after five seconds.
pub(crate) async fn settled(counter: &AtomicU64, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = counter.load(Ordering::Relaxed);
        if n >= at_least || Instant::now() >= deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
