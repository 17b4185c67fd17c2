//! Keeping a game server listed on a dpmaster-style master (spec §3.1, §3.2, §6):
//!
//! ```text
//! server (game socket)                       master (UDP 27950)
//!   heartbeat <tag> 0a              ----->     at start, then every HEARTBEAT_INTERVAL
//!                                   <-----     getinfo <challenge>
//!   infoResponse \challenge\<c>…    ----->     (answered by the responder)
//! ```
//!
//! The registrar only heartbeats: the master's `getinfo` is answered by the server's
//! [`super::respond::Quake3Responder`] like any client's, with the challenge echoed. The
//! registrar sees that `getinfo` first (it comes from the master's address), notes that the
//! master took the heartbeat, and leaves the datagram to the responder. A change of state
//! that the master's filters see (the server became empty, non-empty, full or not full)
//! sends a heartbeat at once, at most one per [`MIN_HEARTBEAT_GAP`], as DarkPlaces does so
//! that lists filtered on `empty` / `full` stay right. Nothing is sent on shutdown (the master
//! expires the server).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::Word;
use super::packet::Packet;
use super::respond::Style;
use crate::query::Transmit;
use crate::respond::{Registrar, RegistrarEvent, ServerState};

/// Time between periodic heartbeats (dpmaster keeps a server 15 minutes; ioquake3 beats every
/// 5 minutes).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(300);

/// Least time between two heartbeats sent for state changes.
pub const MIN_HEARTBEAT_GAP: Duration = Duration::from_secs(10);

/// The occupancy a master's filters see: empty, some, full.
fn occupancy(state: &ServerState) -> u8 {
    let n = state.players.len();
    let max = usize::try_from(state.max_players).unwrap_or(usize::MAX);
    if n == 0 {
        0
    } else if n >= max {
        2
    } else {
        1
    }
}

/// Heartbeats one master for one server; see the module docs.
#[derive(Debug)]
pub struct Quake3Registrar {
    master: SocketAddr,
    master_name: String,
    tag: Word,
    interval: Duration,
    next: Option<Instant>,
    last_sent: Option<Instant>,
    due: bool,
    occupancy: u8,
    registered: bool,
    stopped: bool,
    events: VecDeque<RegistrarEvent>,
}

impl Quake3Registrar {
    /// A registrar for a server of `style` (its heartbeat tag) on `master`; the first
    /// heartbeat is the first datagram [`Registrar::poll_transmit`] returns.
    #[must_use]
    pub fn new(master: SocketAddr, style: Style, state: &ServerState) -> Self {
        // The tags are fixed words.
        let tag = Word::new(style.heartbeat_tag().as_bytes().to_vec())
            .unwrap_or_else(|_| Word(b"QuakeArena-1".to_vec()));
        Self {
            master,
            master_name: master.to_string(),
            tag,
            interval: HEARTBEAT_INTERVAL,
            next: None,
            last_sent: None,
            due: true,
            occupancy: occupancy(state),
            registered: false,
            stopped: false,
            events: VecDeque::new(),
        }
    }

    /// Heartbeat every `interval` instead of [`HEARTBEAT_INTERVAL`].
    #[must_use]
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
}

impl Registrar for Quake3Registrar {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        _state: &ServerState,
    ) -> bool {
        if self.stopped || from != self.master {
            return false;
        }
        if matches!(
            Packet::decode(datagram),
            Ok(Packet::GetInfo { challenge: Some(_) })
        ) && !self.registered
        {
            self.registered = true;
            self.events.push_back(RegistrarEvent::Registered {
                master: self.master_name.clone(),
            });
        }
        // Always the responder's to answer.
        false
    }

    fn handle_timeout(&mut self, now: Instant, _state: &ServerState) {
        if self.stopped {
            return;
        }
        if self.next.is_some_and(|t| t <= now) {
            if !self.registered {
                self.events.push_back(RegistrarEvent::Failed {
                    master: self.master_name.clone(),
                    reason: "no getinfo from master",
                });
            }
            self.due = true;
        }
    }

    fn handle_state_change(&mut self, now: Instant, state: &ServerState) {
        let o = occupancy(state);
        if o == self.occupancy || self.stopped {
            return;
        }
        self.occupancy = o;
        match self.last_sent {
            Some(t) if now.saturating_duration_since(t) < MIN_HEARTBEAT_GAP => {
                self.next = Some(t + MIN_HEARTBEAT_GAP);
            }
            _ => self.due = true,
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.stopped || !self.due {
            return None;
        }
        self.due = false;
        self.last_sent = Some(now);
        self.next = now.checked_add(self.interval);
        Packet::Heartbeat {
            tag: self.tag.clone(),
        }
        .encode(buf);
        Some(Transmit {
            destination: self.master,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped { None } else { self.next }
    }

    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        self.events.pop_front()
    }

    fn shutdown(&mut self, _now: Instant) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.next = None;
        self.events.push_back(RegistrarEvent::Unregistered {
            master: self.master_name.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::respond::PlayerState;

    fn send(r: &mut Quake3Registrar, now: Instant) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        r.poll_transmit(now, &mut buf).map(|t| {
            assert_eq!(t.destination, "127.0.0.1:27950".parse().unwrap());
            buf
        })
    }

    #[test]
    fn quake3_registrar_heartbeats_at_start_and_every_interval() {
        let t0 = Instant::now();
        let master = "127.0.0.1:27950".parse().unwrap();
        let state = ServerState::default();
        let mut r = Quake3Registrar::new(master, Style::DarkPlaces, &state);
        assert_eq!(
            send(&mut r, t0).unwrap(),
            b"\xff\xff\xff\xffheartbeat DarkPlaces\n"
        );
        assert_eq!(send(&mut r, t0), None);
        assert_eq!(r.poll_timeout(), Some(t0 + HEARTBEAT_INTERVAL));
        // The master's getinfo: noted, left to the responder.
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(!r.handle_datagram(t0, other, b"\xff\xff\xff\xffgetinfo abcdefghij", &state));
        assert_eq!(r.poll_event(), None);
        assert!(!r.handle_datagram(t0, master, b"\xff\xff\xff\xffgetinfo abcdefghij", &state));
        assert_eq!(
            r.poll_event(),
            Some(RegistrarEvent::Registered {
                master: "127.0.0.1:27950".into()
            })
        );
        r.handle_timeout(t0 + HEARTBEAT_INTERVAL, &state);
        assert_eq!(
            send(&mut r, t0 + HEARTBEAT_INTERVAL).unwrap(),
            b"\xff\xff\xff\xffheartbeat DarkPlaces\n"
        );
        r.shutdown(t0 + HEARTBEAT_INTERVAL);
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(send(&mut r, t0 + HEARTBEAT_INTERVAL * 2), None);
    }

    #[test]
    fn quake3_registrar_beats_when_the_server_becomes_non_empty_rate_limited() {
        let t0 = Instant::now();
        let master = "127.0.0.1:27950".parse().unwrap();
        let mut state = ServerState::default();
        let mut r = Quake3Registrar::new(master, Style::Ioquake3, &state);
        assert_eq!(
            send(&mut r, t0).unwrap(),
            b"\xff\xff\xff\xffheartbeat QuakeArena-1\n"
        );
        r.handle_timeout(t0 + HEARTBEAT_INTERVAL / 2, &state);
        assert_eq!(r.poll_event(), None);
        state.players.push(PlayerState::default());
        // Too soon after the last one: deferred to the gap.
        r.handle_state_change(t0 + Duration::from_secs(1), &state);
        assert_eq!(send(&mut r, t0 + Duration::from_secs(1)), None);
        assert_eq!(r.poll_timeout(), Some(t0 + MIN_HEARTBEAT_GAP));
        r.handle_timeout(t0 + MIN_HEARTBEAT_GAP, &state);
        assert!(send(&mut r, t0 + MIN_HEARTBEAT_GAP).is_some());
        // No getinfo by then: a failure is reported.
        assert!(matches!(
            r.poll_event(),
            Some(RegistrarEvent::Failed { .. })
        ));
        // Same occupancy: nothing.
        state.players.push(PlayerState::default());
        r.handle_state_change(t0 + Duration::from_secs(60), &state);
        assert_eq!(send(&mut r, t0 + Duration::from_secs(60)), None);
        state.players.clear();
        r.handle_state_change(t0 + Duration::from_secs(61), &state);
        assert!(send(&mut r, t0 + Duration::from_secs(61)).is_some());
    }
}
