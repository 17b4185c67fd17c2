//! The contract every per-protocol query state machine follows, and the retry schedule they
//! share.
//!
//! A machine is created for one target and driven by the caller:
//!
//! 1. call [`QueryMachine::poll_transmit`] until it returns `None`, sending each datagram;
//! 2. call [`QueryMachine::poll_event`]; once it returns `Some`, the query is over;
//! 3. otherwise wait for a datagram (feed it to [`QueryMachine::handle_datagram`]) or for the
//!    instant of [`QueryMachine::poll_timeout`] (then call [`QueryMachine::handle_timeout`]),
//!    and go back to 1.
//!
//! ```text
//! loop {
//!     while let Some(t) = q.poll_transmit(&mut buf) { send(&buf, t.destination); buf.clear() }
//!     if let Some(ev) = q.poll_event() { break ev }
//!     select! { datagram => q.handle_datagram(now, from, &dg), sleep_until(q.poll_timeout()?) => q.handle_timeout(now) }
//! }
//! ```
//!
//! Machines never read a clock and never do I/O: `now` is always an argument, so tests drive
//! them on a virtual clock. Randomness (tokens) is passed in when a machine is built.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::model::{ServerInfo, ServerList};
use crate::wire::DecodeError;

/// Where to send the datagram that `poll_transmit` wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The destination address.
    pub destination: SocketAddr,
}

/// Why a query produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// No usable answer before the last attempt timed out.
    #[error("no reply")]
    Timeout,
    /// Replies came, but none could be decoded; the last decode error is attached.
    #[error("bad reply")]
    Decode(#[source] DecodeError),
    /// The server answered in a way that means "no" (wrong protocol, refused, banned).
    #[error("rejected: {0}")]
    Rejected(&'static str),
}

/// The outcome of a query, returned once by `poll_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<T> {
    /// The query finished with a result (possibly marked partial).
    Done(T),
    /// The query finished without a result.
    Failed(QueryError),
}

/// The outcome of a game-server query.
pub type QueryEvent = Event<Box<ServerInfo>>;

/// The outcome of a master-list query.
pub type ListEvent = Event<ServerList>;

/// Timing of one query: how long one attempt waits and how many times it is repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryConfig {
    /// How long to wait for an answer to one attempt before re-sending.
    pub attempt_timeout: Duration,
    /// How many times to re-send after the first attempt (0 = send once).
    pub retries: u32,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_millis(1500),
            retries: 2,
        }
    }
}

/// A sans-IO query for one game server (`Output = Box<ServerInfo>`) or one master list
/// (`Output = ServerList`). See the module docs for the driving loop.
pub trait QueryMachine {
    /// What a successful query yields.
    type Output;

    /// Feed a datagram that arrived from `from`. Datagrams from addresses the machine did not
    /// send to, duplicates and garbage are ignored (and never panic).
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]);

    /// Call when the instant returned by [`Self::poll_timeout`] has passed.
    fn handle_timeout(&mut self, now: Instant);

    /// Write the next datagram to send into `buf` (which the caller has cleared) and say where
    /// it goes. Call until it returns `None` after every `handle_*` call and after creation.
    #[must_use]
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit>;

    /// The instant at which [`Self::handle_timeout`] must be called, or `None` once the query
    /// is over.
    #[must_use]
    fn poll_timeout(&self) -> Option<Instant>;

    /// The final outcome, returned exactly once.
    #[must_use]
    fn poll_event(&mut self) -> Option<Event<Self::Output>>;

    /// The driver measured the round-trip time and wants retransmissions to follow it: use
    /// `timeout` for attempts from now on. Machines that retransmit should honour it (the
    /// default ignores it).
    fn set_attempt_timeout(&mut self, timeout: Duration) {
        let _ = timeout;
    }

    /// Stop now (the caller's overall deadline passed): the machine finishes with what it has,
    /// a partial result if anything useful arrived, otherwise [`QueryError::Timeout`].
    fn abort(&mut self, now: Instant);
}

/// A boxed machine is a machine, so drivers can mix protocols in one batch.
impl<M: QueryMachine + ?Sized> QueryMachine for Box<M> {
    type Output = M::Output;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        (**self).handle_datagram(now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        (**self).poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }

    fn poll_event(&mut self) -> Option<Event<Self::Output>> {
        (**self).poll_event()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        (**self).set_attempt_timeout(timeout);
    }

    fn abort(&mut self, now: Instant) {
        (**self).abort(now);
    }
}

/// What a [`RetrySchedule`] says to do when its timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAction {
    /// Send the request again.
    Resend,
    /// All attempts are used up.
    GiveUp,
    /// The timer has not fired yet.
    Wait,
}

/// The attempt counter and timer that each machine uses for its requests.
#[derive(Debug, Clone)]
pub struct RetrySchedule {
    config: QueryConfig,
    sent: u32,
    next: Option<Instant>,
    first_sent: Option<Instant>,
    last_sent: Option<Instant>,
}

impl RetrySchedule {
    /// A schedule with nothing sent yet.
    #[must_use]
    pub fn new(config: QueryConfig) -> Self {
        Self {
            config,
            sent: 0,
            next: None,
            first_sent: None,
            last_sent: None,
        }
    }

    /// Record that an attempt was sent at `now`; the timer is armed for one attempt timeout.
    pub fn on_send(&mut self, now: Instant) {
        self.sent = self.sent.saturating_add(1);
        self.first_sent.get_or_insert(now);
        self.last_sent = Some(now);
        self.next = now.checked_add(self.config.attempt_timeout);
    }

    /// Decide what to do at `now`.
    #[must_use]
    pub fn on_timeout(&mut self, now: Instant) -> RetryAction {
        match self.next {
            Some(t) if now >= t => {
                if self.sent > self.config.retries {
                    self.next = None;
                    RetryAction::GiveUp
                } else {
                    RetryAction::Resend
                }
            }
            Some(_) => RetryAction::Wait,
            None => RetryAction::Wait,
        }
    }

    /// Use `timeout` for attempts from now on; an armed timer is moved to the last send plus
    /// the new timeout.
    pub fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.config.attempt_timeout = timeout;
        if let (Some(_), Some(last)) = (self.next, self.last_sent) {
            self.next = last.checked_add(timeout);
        }
    }

    /// Stop the timer (the answer came).
    pub fn stop(&mut self) {
        self.next = None;
    }

    /// When the timer fires.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.next
    }

    /// How many attempts were sent.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.sent
    }

    /// When the most recent attempt was sent (for measuring ping).
    #[must_use]
    pub fn last_sent(&self) -> Option<Instant> {
        self.last_sent
    }

    /// When the first attempt was sent.
    #[must_use]
    pub fn first_sent(&self) -> Option<Instant> {
        self.first_sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_zero_sends_once_then_gives_up() {
        let t0 = Instant::now();
        let cfg = QueryConfig {
            attempt_timeout: Duration::from_millis(100),
            retries: 0,
        };
        let mut s = RetrySchedule::new(cfg);
        s.on_send(t0);
        assert_eq!(
            s.on_timeout(t0 + Duration::from_millis(50)),
            RetryAction::Wait
        );
        assert_eq!(
            s.on_timeout(t0 + Duration::from_millis(100)),
            RetryAction::GiveUp
        );
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn retries_two_sends_three_times() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = RetrySchedule::new(QueryConfig {
            attempt_timeout: ms(100),
            retries: 2,
        });
        s.on_send(t0);
        assert_eq!(s.on_timeout(t0 + ms(100)), RetryAction::Resend);
        s.on_send(t0 + ms(100));
        assert_eq!(s.on_timeout(t0 + ms(200)), RetryAction::Resend);
        s.on_send(t0 + ms(200));
        assert_eq!(s.on_timeout(t0 + ms(300)), RetryAction::GiveUp);
        assert_eq!(s.attempts(), 3);
    }
}
