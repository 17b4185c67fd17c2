//! A tiny test protocol: `ping <n>` answered by `pong <n>`; with several rounds, `ping <n> <r>`
//! answered by `pong <n> <r>`, one round after the other.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_proto::Transmit;
use muster_proto::query::{
    Event, QueryConfig, QueryError, QueryMachine, RetryAction, RetrySchedule,
};

/// Sends `ping <n>`, done on `pong <n>` from the target.
pub(crate) struct Echo {
    target: SocketAddr,
    n: u32,
    config: QueryConfig,
    schedule: RetrySchedule,
    due: bool,
    event: Option<Event<u32>>,
    /// Rounds in all (1: plain `ping <n>`), and the one under way.
    rounds: u32,
    round: u32,
}

impl Echo {
    pub(crate) fn new(target: SocketAddr, n: u32, config: QueryConfig) -> Self {
        Self::with_rounds(target, n, config, 1)
    }

    /// A query of `rounds` exchanges one after the other, as A2S's challenge rounds are.
    pub(crate) fn with_rounds(
        target: SocketAddr,
        n: u32,
        config: QueryConfig,
        rounds: u32,
    ) -> Self {
        Self {
            target,
            n,
            config,
            schedule: RetrySchedule::new(config),
            due: true,
            event: None,
            rounds: rounds.max(1),
            round: 0,
        }
    }

    fn message(&self, word: &str) -> String {
        if self.rounds == 1 {
            format!("{word} {}", self.n)
        } else {
            format!("{word} {} {}", self.n, self.round)
        }
    }
}

impl QueryMachine for Echo {
    type Output = u32;

    fn handle_datagram(&mut self, _now: Instant, from: SocketAddr, datagram: &[u8]) {
        if from == self.target && datagram == self.message("pong").as_bytes() {
            self.schedule.stop();
            if self.round + 1 < self.rounds {
                self.round += 1;
                self.schedule = RetrySchedule::new(self.config);
                self.due = true;
            } else {
                self.event.get_or_insert(Event::Done(self.n));
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.schedule.on_timeout(now) {
            RetryAction::Resend => self.due = true,
            RetryAction::GiveUp => {
                self.event.get_or_insert(Event::Failed(QueryError::Timeout));
            }
            RetryAction::Wait => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.due || self.event.is_some() {
            return None;
        }
        self.due = false;
        self.schedule.on_send(now);
        buf.extend_from_slice(self.message("ping").as_bytes());
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.event.is_some() {
            None
        } else {
            self.schedule.deadline()
        }
    }

    fn poll_event(&mut self) -> Option<Event<u32>> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.schedule.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        self.event.get_or_insert(Event::Failed(QueryError::Timeout));
    }
}
