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
//!
//! ```
//! use std::time::{Duration, Instant};
//! use muster_proto::gamespy1::query::{StatusConfig, StatusQuery};
//! use muster_proto::{Event, QueryMachine};
//!
//! let server = "192.0.2.1:7778".parse().unwrap();
//! let mut q = StatusQuery::new(server, StatusConfig::default());
//! let t0 = Instant::now();
//! let mut buf = Vec::new();
//! let t = q.poll_transmit(t0, &mut buf).unwrap();
//! assert_eq!((t.destination, &buf[..]), (server, &b"\\status\\"[..]));
//! q.handle_datagram(t0 + Duration::from_millis(30), server, b"\\hostname\\X\\queryid\\7.1\\final\\");
//! let Some(Event::Done(info)) = q.poll_event() else { unreachable!() };
//! assert_eq!(info.name.text, "X");
//! assert_eq!(info.ping, Some(Duration::from_millis(30)));
//! ```

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
        let mut info = to_server_info(self.reassembler.merged());
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

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.config.retry.attempt_timeout = timeout;
        self.schedule.set_attempt_timeout(timeout);
    }

    fn abort(&mut self, _now: Instant) {
        if !self.done {
            self.give_up(PartialReason::Aborted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ServerInfo;

    const R1_A: &[u8] = b"\\gamename\\ut\\gamever\\451\\hostname\\A\\numplayers\\1\\queryid\\41.1";
    const R1_B: &[u8] = b"\\player_0\\Bob\\frags_0\\3\\ping_0\\ 50\\queryid\\41.2\\final\\";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn target() -> SocketAddr {
        "192.0.2.7:7778".parse().unwrap()
    }

    fn config(retries: u32) -> StatusConfig {
        StatusConfig {
            retry: QueryConfig {
                attempt_timeout: ms(500),
                retries,
            },
            reply_deadline: ms(3000),
            idle_timeout: ms(1000),
        }
    }

    /// Drain transmits, asserting each is the plain `\status\` to the target.
    fn sends(q: &mut StatusQuery, now: Instant) -> usize {
        let mut n = 0;
        let mut buf = Vec::new();
        while let Some(t) = q.poll_transmit(now, &mut buf) {
            assert_eq!(t.destination, target());
            assert_eq!(buf, b"\\status\\");
            buf.clear();
            n += 1;
        }
        n
    }

    fn done(q: &mut StatusQuery) -> Box<ServerInfo> {
        match q.poll_event() {
            Some(Event::Done(info)) => info,
            other => panic!("expected Done, got {other:?}"),
        }
    }

    #[test]
    fn complete_reply_in_order() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        assert_eq!(sends(&mut q, t0), 1);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(500)));
        q.handle_datagram(t0 + ms(40), target(), R1_A);
        assert!(q.poll_event().is_none());
        // Retry timer stopped; reply timers took over: idle at 40 + 1000 ms.
        assert_eq!(q.poll_timeout(), Some(t0 + ms(1040)));
        q.handle_datagram(t0 + ms(45), target(), R1_B);
        let info = done(&mut q);
        assert_eq!(info.ping, Some(ms(40)));
        assert_eq!(info.partial, None);
        assert_eq!(info.name.text, "A");
        assert_eq!(info.players.len(), 1);
        assert_eq!(info.players[0].ping_ms, Some(50));
        assert_eq!(q.poll_timeout(), None);
        assert!(q.poll_event().is_none(), "the event comes exactly once");
    }

    #[test]
    fn reassembles_in_any_order_with_duplicates_and_garbage() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        q.handle_datagram(t0 + ms(10), target(), &[0; 100]);
        q.handle_datagram(t0 + ms(11), target(), R1_B);
        q.handle_datagram(t0 + ms(12), target(), R1_B);
        q.handle_datagram(t0 + ms(13), target(), b"\xff\xff\xff\xff");
        assert!(q.poll_event().is_none());
        q.handle_datagram(t0 + ms(14), target(), R1_A);
        let info = done(&mut q);
        assert_eq!(info.name.text, "A");
        assert_eq!(info.ping, Some(ms(11)));
        assert_eq!(q.reassembler().malformed(), 2);
    }

    #[test]
    fn ignores_other_sources() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(0));
        let _ = sends(&mut q, t0);
        let other: SocketAddr = "192.0.2.7:7779".parse().unwrap();
        q.handle_datagram(t0 + ms(5), other, R1_A);
        q.handle_datagram(t0 + ms(5), other, R1_B);
        assert!(q.poll_event().is_none());
        assert_eq!(q.reassembler().datagrams(), 0);
    }

    #[test]
    fn ignores_datagrams_before_the_request() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(0));
        q.handle_datagram(t0, target(), R1_A);
        assert_eq!(q.reassembler().datagrams(), 0);
    }

    #[test]
    fn retries_when_nothing_arrived_then_times_out() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        assert_eq!(sends(&mut q, t0), 1);
        q.handle_timeout(t0 + ms(499));
        assert_eq!(sends(&mut q, t0 + ms(499)), 0);
        q.handle_timeout(t0 + ms(500));
        assert_eq!(sends(&mut q, t0 + ms(500)), 1);
        assert_eq!(q.poll_timeout(), Some(t0 + ms(1000)));
        q.handle_timeout(t0 + ms(1000));
        assert_eq!(sends(&mut q, t0 + ms(1000)), 1);
        q.handle_timeout(t0 + ms(1500));
        assert_eq!(sends(&mut q, t0 + ms(1500)), 0);
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn retries_zero_sends_once() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(0));
        assert_eq!(sends(&mut q, t0), 1);
        q.handle_timeout(t0 + ms(500));
        assert_eq!(sends(&mut q, t0 + ms(500)), 0);
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    #[test]
    fn only_garbage_fails_with_decode_error() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(0));
        let _ = sends(&mut q, t0);
        q.handle_datagram(t0 + ms(5), target(), b"");
        q.handle_timeout(t0 + ms(500));
        assert_eq!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Truncated(
                "gamespy1 reply"
            ))))
        );
    }

    #[test]
    fn ping_is_measured_from_the_last_attempt() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(1));
        let _ = sends(&mut q, t0);
        q.handle_timeout(t0 + ms(500));
        let _ = sends(&mut q, t0 + ms(500));
        q.handle_datagram(t0 + ms(530), target(), R1_A);
        q.handle_datagram(t0 + ms(531), target(), R1_B);
        assert_eq!(done(&mut q).ping, Some(ms(30)));
    }

    #[test]
    fn partial_at_idle_timer() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        q.handle_datagram(t0 + ms(20), target(), R1_A);
        // No re-send once something arrived, even past the attempt timeout.
        q.handle_timeout(t0 + ms(600));
        assert_eq!(sends(&mut q, t0 + ms(600)), 0);
        assert!(q.poll_event().is_none());
        q.handle_timeout(t0 + ms(1020));
        let info = done(&mut q);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some(PartialReason::Idle.describe().to_owned())
        );
        assert_eq!(info.name.text, "A");
        assert!(info.players.is_empty());
    }

    #[test]
    fn partial_at_deadline_when_trickling() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        // Datagrams of a reply that never completes keep the idle timer alive.
        for (n, at) in [(1u32, 900u64), (2, 1800), (3, 2700)] {
            let d = format!("\\k{n}\\v\\queryid\\9.{n}");
            q.handle_datagram(t0 + ms(at), target(), d.as_bytes());
        }
        assert_eq!(q.poll_timeout(), Some(t0 + ms(3000)));
        q.handle_timeout(t0 + ms(3000));
        let info = done(&mut q);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some(PartialReason::Deadline.describe().to_owned())
        );
        assert_eq!(info.rules.len(), 3);
    }

    #[test]
    fn abort_with_data_is_partial() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        q.handle_datagram(t0 + ms(20), target(), R1_B);
        q.abort(t0 + ms(50));
        let info = done(&mut q);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some(PartialReason::Aborted.describe().to_owned())
        );
        assert_eq!(info.players.len(), 1);
        q.abort(t0 + ms(60));
        assert!(q.poll_event().is_none());
    }

    #[test]
    fn abort_without_data_times_out() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        q.abort(t0 + ms(10));
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert_eq!(sends(&mut q, t0 + ms(10)), 0);
    }

    #[test]
    fn zero_flood_ends_at_datagram_cap_as_decode_failure() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        for _ in 0..100 {
            q.handle_datagram(t0 + ms(1), target(), &[0; 512]);
        }
        assert!(matches!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Decode(_)))
        ));
        assert_eq!(q.reassembler().datagrams(), 64);
    }

    #[test]
    fn serious_sam_tail_first_waits_for_head() {
        let t0 = Instant::now();
        let mut q = StatusQuery::new(target(), config(2));
        let _ = sends(&mut q, t0);
        q.handle_datagram(
            t0 + ms(3),
            target(),
            b"\\player_1\\^oKenny^r\\frags_1\\1\\ping_1\\70\\final\\\\queryid\\333.1",
        );
        assert!(q.poll_event().is_none());
        q.handle_datagram(
            t0 + ms(4),
            target(),
            b"\\gamename\\serioussamse\\hostname\\S\\player_0\\^oSam^r\\frags_0\\3\\ping_0\\40",
        );
        let info = done(&mut q);
        assert_eq!(info.players.len(), 2);
        assert_eq!(info.players[1].name.plain, "Kenny");
        assert_eq!(info.ping, Some(ms(3)));
    }
}
