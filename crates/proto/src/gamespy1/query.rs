//! [`StatusQuery`]: the sans-IO state machine for one GameSpy v1 `\status\` query.
//!
//! It sends the plain 8-byte `\status\` (spec §13: every Unreal-family and Serious Sam server
//! answers it; no `xserverquery`, never `\echo\`), re-sends while nothing usable has arrived,
//! and reassembles the reply with [`Reassembler`]. Once the first datagram is accepted the
//! retry timer stops and two reply timers take over: the deadline (default 3 s after the
//! last request was sent) and the idle timer (default 1 s after the last accepted datagram).
//!
//! Outcomes:
//! * complete reply → `Done(info)` with `partial: None`;
//! * caps, deadline, idle timer or [`QueryMachine::abort`] after something was accepted →
//!   `Done(info)` with `partial: Some(reason)`;
//! * nothing accepted when attempts run out (or at abort) → `Failed(Timeout)`, or
//!   `Failed(Decode(e))` when only malformed datagrams came.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::map::to_server_info;
use super::packet::{Request, RequestKind};
use super::reassembly::{Outcome, PartialReason, Push, Reassembler};
use crate::model::Partial;
use crate::query::{
    Event, QueryConfig, QueryError, QueryEvent, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

/// Default reply deadline after the request was sent (spec §7.4).
pub const DEFAULT_REPLY_DEADLINE: Duration = Duration::from_secs(3);

/// Default idle time after the last accepted datagram (spec §7.4).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Timing of a [`StatusQuery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusConfig {
    /// Attempt timeout and re-sends while nothing has been accepted.
    pub retry: QueryConfig,
    /// How long after the last request was sent a started reply may take in total.
    pub reply_deadline: Duration,
    /// How long a started reply may go without an accepted datagram.
    pub idle_timeout: Duration,
}

impl Default for StatusConfig {
    fn default() -> Self {
        Self {
            retry: QueryConfig::default(),
            reply_deadline: DEFAULT_REPLY_DEADLINE,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// One `\status\` query to one query address (for UT2003/UT2004 the GameSpy port a master
/// listed, not the game port; see `unreal2.md` §11).
#[derive(Debug)]
pub struct StatusQuery {
    target: SocketAddr,
    config: StatusConfig,
    schedule: RetrySchedule,
    reassembler: Reassembler,
    send_pending: bool,
    ping: Option<Duration>,
    reply_deadline: Option<Instant>,
    idle_deadline: Option<Instant>,
    last_error: Option<DecodeError>,
    event: Option<QueryEvent>,
    done: bool,
}

impl StatusQuery {
    /// A query for `target`; the first `poll_transmit` yields the request.
    #[must_use]
    pub fn new(target: SocketAddr, config: StatusConfig) -> Self {
        Self {
            target,
            config,
            schedule: RetrySchedule::new(config.retry),
            reassembler: Reassembler::new(&RequestKind::Status),
            send_pending: true,
            ping: None,
            reply_deadline: None,
            idle_deadline: None,
            last_error: None,
            event: None,
            done: false,
        }
    }

    /// The reassembly state (counters of datagrams, bytes and malformed datagrams).
    #[must_use]
    pub fn reassembler(&self) -> &Reassembler {
        &self.reassembler
    }

    fn on_accepted(&mut self, now: Instant) {
        if self.ping.is_none() {
            let sent = self.schedule.last_sent().unwrap_or(now);
            self.ping = Some(now.saturating_duration_since(sent));
            self.schedule.stop();
            self.send_pending = false;
            self.reply_deadline = sent.checked_add(self.config.reply_deadline);
        }
        self.idle_deadline = now.checked_add(self.config.idle_timeout);
    }

    fn finish(&mut self, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        if self.reassembler.accepted() == 0 {
            let error = self
                .last_error
                .clone()
                .map_or(QueryError::Timeout, QueryError::Decode);
            self.event = Some(Event::Failed(error));
            return;
        }
        let mut info = to_server_info(&self.reassembler.pairs());
        info.ping = self.ping;
        if let Outcome::Partial(reason) = outcome {
            info.partial = Some(Partial {
                reason: reason.describe().to_owned(),
            });
        }
        self.event = Some(Event::Done(Box::new(info)));
    }

    fn give_up(&mut self, reason: PartialReason) {
        let outcome = self.reassembler.finish(reason);
        self.finish(outcome);
    }
}

impl QueryMachine for StatusQuery {
    type Output = Box<crate::model::ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.done || from != self.target || self.schedule.attempts() == 0 {
            return;
        }
        match self.reassembler.push(datagram) {
            Push::Accepted => self.on_accepted(now),
            Push::Finished(outcome) => {
                if outcome == Outcome::Complete {
                    self.on_accepted(now);
                }
                self.finish(outcome);
            }
            Push::Malformed(e) => self.last_error = Some(e),
            Push::Ignored | Push::AlreadyFinished => {}
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if self.ping.is_some() {
            if self.reply_deadline.is_some_and(|t| now >= t) {
                self.give_up(PartialReason::Deadline);
            } else if self.idle_deadline.is_some_and(|t| now >= t) {
                self.give_up(PartialReason::Idle);
            }
            return;
        }
        match self.schedule.on_timeout(now) {
            RetryAction::Resend => self.send_pending = true,
            RetryAction::GiveUp => self.give_up(PartialReason::Deadline),
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.done || !self.send_pending {
            return None;
        }
        self.send_pending = false;
        Request::status().encode(buf);
        self.schedule.on_send(now);
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        if self.ping.is_some() {
            return match (self.reply_deadline, self.idle_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.schedule.deadline()
    }

    fn poll_event(&mut self) -> Option<QueryEvent> {
        self.event.take()
    }

    fn abort(&mut self, _now: Instant) {
        if !self.done {
            self.give_up(PartialReason::Aborted);
        }
    }
}
