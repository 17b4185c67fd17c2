//! A tiny test protocol: `ping <n>` answered by `pong <n>`.

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
    schedule: RetrySchedule,
    due: bool,
    event: Option<Event<u32>>,
}

impl Echo {
    pub(crate) fn new(target: SocketAddr, n: u32, config: QueryConfig) -> Self {
        Self {
            target,
            n,
            schedule: RetrySchedule::new(config),
            due: true,
            event: None,
        }
    }
}

impl QueryMachine for Echo {
    type Output = u32;

    fn handle_datagram(&mut self, _now: Instant, from: SocketAddr, datagram: &[u8]) {
        if from == self.target && datagram == format!("pong {}", self.n).as_bytes() {
            self.schedule.stop();
            self.event.get_or_insert(Event::Done(self.n));
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
        buf.extend_from_slice(format!("ping {}", self.n).as_bytes());
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
