//! The management server's side of one TCP connection, sans IO.
//!
//! A [`ServerSession`] takes the bytes the socket read and the current time, and hands out
//! [`SessionEvent`]s in order: what to do to **this connection's** registry entry, which
//! queries to answer, what to log, and when to close. It enforces the per-connection rules of
//! §7 and §10.5: at most one game server per connection (a new registration replaces the old
//! one and resets its state), updates only after a registration, unregister only of the own
//! entry, framing errors close, bad messages are only discarded, and a connection without a
//! registration is closed after the idle timeout.
//!
//! It does not know about sockets, other connections, connection caps or the output buffer:
//! the driver (in `muster-master`) owns those.
//!
//! ```text
//! loop {
//!     while let Some(ev) = s.poll_event() { apply(ev) }   // Closed => drop the socket
//!     select! {
//!         n = sock.read(&mut buf) => if n == 0 { s.handle_eof(now) } else { s.handle_input(now, &buf[..n]) },
//!         () = sleep_until(s.poll_timeout()?) => s.handle_timeout(now),
//!     }
//! }
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::DEFAULT_IDLE_TIMEOUT;
use super::messages::{Command, GameServer, Message, MessageError, Stats};
use super::packet::FrameDecoder;
use crate::wire::DecodeError;

/// Per-connection settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// How long a connection **without** a registered game server may go without a complete
    /// message before it is closed (§7.1 (9)).
    pub idle_timeout: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// Set this connection's registry entry to `server` with [`Stats::default`], replacing
    /// any earlier entry of the connection. Log a warning when
    /// [`super::GamePort::is_well_known`].
    Register(GameServer),
    /// Replace the stats of this connection's entry (which exists).
    UpdateStats(Stats),
    /// Remove this connection's entry (which exists).
    Unregister,
    /// Send this connection an `msRQueryGameServers` with the current registry
    /// (answers go out in request order, so answer before handling the next event).
    Query,
    /// A message was dropped; log it (rate-limited). The connection stays open.
    Discarded(Discard),
    /// Close the connection and remove its entry, if it has one. The last event.
    Closed(CloseReason),
}

/// Why a message was discarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discard {
    /// The frame's JSON was not a valid message.
    Invalid(MessageError),
    /// `msUpdateGameServerStats` before any registration on this connection.
    NotRegistered,
    /// A message only the management server sends (`msRQueryGameServers`); treated as an
    /// unknown command (§7.1 (8)).
    NotACommand(Command),
}

/// Why the session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// A framing error; the stream cannot be resynchronised (§7.1 (6)).
    Framing(DecodeError),
    /// No complete message for the idle timeout, and nothing registered.
    IdleTimeout,
    /// The peer closed its side; a partial frame is dropped unprocessed.
    PeerClosed,
    /// The driver ended the session ([`ServerSession::abort`]).
    Aborted,
}

/// One connection to the management server.
#[derive(Debug, Clone)]
pub struct ServerSession {
    config: SessionConfig,
    decoder: FrameDecoder,
    registered: Option<GameServer>,
    last_message: Instant,
    events: VecDeque<SessionEvent>,
    closed: bool,
}

impl ServerSession {
    /// A session for a connection accepted at `now`.
    #[must_use]
    pub fn new(now: Instant, config: SessionConfig) -> Self {
        Self {
            config,
            decoder: FrameDecoder::new(),
            registered: None,
            last_message: now,
            events: VecDeque::new(),
            closed: false,
        }
    }

    /// Bytes read from the socket at `now`. Every complete frame is processed in order;
    /// a framing error queues [`SessionEvent::Closed`] and the rest is ignored.
    pub fn handle_input(&mut self, now: Instant, mut input: &[u8]) {
        while !self.closed {
            match self.decoder.feed(&mut input) {
                Ok(Some(frame)) => {
                    self.last_message = now;
                    let msg = Message::from_frame(&frame);
                    self.handle_message(msg);
                }
                Ok(None) => break,
                Err(e) => self.close(CloseReason::Framing(e)),
            }
        }
    }

    /// The peer closed the connection (read returned 0).
    pub fn handle_eof(&mut self, _now: Instant) {
        self.close(CloseReason::PeerClosed);
    }

    /// The instant of [`Self::poll_timeout`] has passed: close an idle unregistered connection.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_some_and(|deadline| now >= deadline) {
            self.close(CloseReason::IdleTimeout);
        }
    }

    /// End the session from the driver's side (shutdown, output buffer overflow, …).
    pub fn abort(&mut self, _now: Instant) {
        self.close(CloseReason::Aborted);
    }

    /// When to call [`Self::handle_timeout`]: `None` while a game server is registered
    /// (registrations never time out) or once closed.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed || self.registered.is_some() {
            return None;
        }
        Some(self.last_message + self.config.idle_timeout)
    }

    /// The next thing to do; call until `None` after every `handle_*`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// Whether an event waits for [`ServerSession::poll_event`] (a driver that reads no input
    /// while events wait gives the peer back-pressure).
    #[must_use]
    pub fn has_event(&self) -> bool {
        !self.events.is_empty()
    }

    /// The game server registered on this connection, if any.
    #[must_use]
    pub fn registration(&self) -> Option<&GameServer> {
        self.registered.as_ref()
    }

    /// True once [`SessionEvent::Closed`] has been queued.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn handle_message(&mut self, msg: Result<Message, MessageError>) {
        let event = match msg {
            Err(e) => SessionEvent::Discarded(Discard::Invalid(e)),
            Ok(Message::RegisterGameServer(server)) => {
                self.registered = Some(server.clone());
                SessionEvent::Register(server)
            }
            Ok(Message::UpdateGameServerStats(stats)) => {
                if self.registered.is_none() {
                    SessionEvent::Discarded(Discard::NotRegistered)
                } else {
                    SessionEvent::UpdateStats(stats)
                }
            }
            Ok(Message::UnregisterGameServer) => {
                if self.registered.take().is_none() {
                    // Nothing registered: nothing happens (§10.5 N1).
                    return;
                }
                SessionEvent::Unregister
            }
            Ok(Message::QueryGameServers) => SessionEvent::Query,
            Ok(m @ Message::QueryGameServersAnswer(_)) => {
                SessionEvent::Discarded(Discard::NotACommand(m.command()))
            }
        };
        self.events.push_back(event);
    }

    fn close(&mut self, reason: CloseReason) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.registered = None;
        self.events.push_back(SessionEvent::Closed(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const QUERY: &[u8] = b"33{\"command\":\"msQueryGameServers\"}\n";

    fn drain(s: &mut ServerSession) -> Vec<SessionEvent> {
        std::iter::from_fn(|| s.poll_event()).collect()
    }

    #[test]
    fn abort_closes_once_and_stops_processing() {
        let t0 = Instant::now();
        let mut s = ServerSession::new(t0, SessionConfig::default());
        s.handle_input(t0, QUERY);
        s.abort(t0);
        s.handle_eof(t0);
        s.handle_input(t0, QUERY);
        assert_eq!(
            drain(&mut s),
            vec![
                SessionEvent::Query,
                SessionEvent::Closed(CloseReason::Aborted)
            ]
        );
        assert!(s.is_closed());
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn idle_timeout_is_configurable() {
        let t0 = Instant::now();
        let config = SessionConfig {
            idle_timeout: Duration::from_secs(5),
        };
        let mut s = ServerSession::new(t0, config);
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(5)));
        s.handle_timeout(t0 + Duration::from_secs(5));
        assert_eq!(
            drain(&mut s),
            vec![SessionEvent::Closed(CloseReason::IdleTimeout)]
        );
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics_and_closed_comes_last(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
            seconds in proptest::collection::vec(0u64..1_000, 8),
        ) {
            let t0 = Instant::now();
            let mut s = ServerSession::new(t0, SessionConfig::default());
            let mut events = Vec::new();
            for (chunk, secs) in chunks.iter().zip(&seconds) {
                let now = t0 + Duration::from_secs(*secs);
                s.handle_input(now, chunk);
                s.handle_timeout(now);
                events.extend(drain(&mut s));
            }
            s.handle_eof(t0);
            events.extend(drain(&mut s));
            let closes = events.iter().filter(|e| matches!(e, SessionEvent::Closed(_))).count();
            prop_assert_eq!(closes, 1);
            prop_assert!(matches!(events.last(), Some(SessionEvent::Closed(_))));
        }
    }
}
