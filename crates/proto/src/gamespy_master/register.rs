//! [`GameSpyRegistrar`]: keeps one game server listed on one GameSpy master (spec §2, §3).
//!
//! ```text
//! server -> master :27900   \heartbeat\<query port>\gamename\<game>          every 60 s (150 s SS)
//! server -> master :27900   \heartbeat\…\gamename\<game>\statechanged        on a state change (SS)
//! master -> server          \secure\ABCDEF                                   verification challenge
//! server -> master          \validate\<gsmsalg>\final\\queryid\X.1           (Unreal family)
//! master -> server          \status\                                         (Serious Sam: the responder answers)
//! ```
//!
//! Everything leaves from the server's query socket, so the master sees the query port as the
//! source (as stock Serious Sam does; the Unreal uplinks use query port + 1, which masters
//! accept because they list the heartbeat's port, never the source port).
//!
//! Not here: the socket, the clock (`now` is an argument), and the `\status\` answer a Serious
//! Sam master verifies with (the [`crate::gamespy1::respond::GameSpyResponder`]'s job: the
//! registrar only watches for it and lets it through).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{Heartbeat, Key, Secure, Token, Trailer, ValidateAnswer};
use super::{Enctype, validate_string};
use crate::gamespy1::reply::QueryIdCounter;
use crate::gamespy1::respond::Profile;
use crate::query::Transmit;
use crate::respond::{Registrar, RegistrarEvent, ServerState};

/// The master's heartbeat port (spec §1).
pub const MASTER_HEARTBEAT_PORT: u16 = 27900;

/// `\statechanged` heartbeats are sent at most this often; changes in between are folded into
/// one heartbeat at the end of the gap (masters process a heartbeat at most once per 10 s per
/// server, spec §14).
pub const STATE_CHANGE_MIN_GAP: Duration = Duration::from_secs(10);

/// How long after a heartbeat an unverified server waits for the master's challenge (or
/// `\status\` poll) before reporting [`RegistrarEvent::Failed`] (masters keep a pending
/// challenge 15–30 s, spec §3.1, §8).
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(30);

/// How a [`GameSpyRegistrar`] registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GameSpyRegistrarConfig {
    /// The master's heartbeat address (normally port [`MASTER_HEARTBEAT_PORT`]).
    pub master: SocketAddr,
    /// The gamename the heartbeats carry.
    pub gamename: Key,
    /// The query port the heartbeats announce (the port of the socket they leave from).
    pub query_port: u16,
    /// The key `\secure\` challenges are answered with (enctype 0).
    pub game_key: Vec<u8>,
    /// Time between heartbeats.
    pub interval: Duration,
    /// Answer the master's `\secure\` (Unreal family). `false` for Serious Sam, whose stock
    /// servers never answer it; its master verifies with `\status\` instead (spec §3.4).
    pub answer_secure: bool,
    /// Send `\statechanged` heartbeats on state changes and at shutdown (Serious Sam).
    pub state_changed: bool,
}

impl GameSpyRegistrarConfig {
    /// The stock behaviour of `profile`'s game towards `master`, announcing `query_port`:
    /// its gamename and key, 60 s heartbeats (Serious Sam: 150 s, `\statechanged`, no
    /// `\secure\` answers).
    #[must_use]
    pub fn new(master: SocketAddr, profile: Profile, query_port: u16) -> Self {
        let serious_sam = profile == Profile::SeriousSam;
        Self {
            master,
            gamename: Key::constant(profile.gamename()),
            query_port,
            game_key: profile.game_key().as_bytes().to_vec(),
            interval: Duration::from_secs(profile.heartbeat_interval_secs()),
            answer_secure: !serious_sam,
            state_changed: serious_sam,
        }
    }
}

/// A sans-IO GameSpy heartbeat client for one master; implements [`Registrar`].
///
/// The first heartbeat is due at creation. Events: [`RegistrarEvent::Registered`] when the
/// master's challenge was answered (or, for Serious Sam, when the master's `\status\` poll came),
/// [`RegistrarEvent::Failed`] when no verification came within [`VERIFY_TIMEOUT`] of a
/// heartbeat while unverified, [`RegistrarEvent::Unregistered`] once the shutdown heartbeat
/// (Serious Sam) went out, or at once for games that send none.
#[derive(Debug)]
pub struct GameSpyRegistrar {
    config: GameSpyRegistrarConfig,
    master_name: String,
    next_heartbeat: Instant,
    /// When a folded `\statechanged` heartbeat is due.
    state_change_due: Option<Instant>,
    last_state_change: Option<Instant>,
    verify_deadline: Option<Instant>,
    verified: bool,
    shut_down: bool,
    goodbye_pending: bool,
    counter: QueryIdCounter,
    queue: VecDeque<(Vec<u8>, SocketAddr)>,
    events: VecDeque<RegistrarEvent>,
}

impl GameSpyRegistrar {
    /// A registrar whose first heartbeat is due at `now`.
    #[must_use]
    pub fn new(config: GameSpyRegistrarConfig, now: Instant) -> Self {
        Self {
            master_name: config.master.to_string(),
            config,
            next_heartbeat: now,
            state_change_due: None,
            last_state_change: None,
            verify_deadline: None,
            verified: false,
            shut_down: false,
            goodbye_pending: false,
            counter: QueryIdCounter::new(),
            queue: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &GameSpyRegistrarConfig {
        &self.config
    }

    /// Whether the master has verified this server (as far as the server can tell).
    #[must_use]
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    fn heartbeat(&self, state_changed: bool) -> Vec<u8> {
        let mut hb = Heartbeat::new(self.config.query_port, self.config.gamename.clone());
        if state_changed {
            hb = hb.with_state_changed();
        }
        let mut out = Vec::new();
        hb.encode(&mut out);
        out
    }

    fn send_heartbeat(&mut self, now: Instant, state_changed: bool) {
        let bytes = self.heartbeat(state_changed);
        self.queue.push_back((bytes, self.config.master));
        if !self.verified && self.verify_deadline.is_none() {
            self.verify_deadline = Some(now + VERIFY_TIMEOUT);
        }
    }

    /// Move every timer that is due at `now` into the send queue or the events.
    fn run_timers(&mut self, now: Instant) {
        if self.shut_down {
            return;
        }
        if now >= self.next_heartbeat {
            self.send_heartbeat(now, false);
            self.next_heartbeat = now + self.config.interval;
        }
        if self.state_change_due.is_some_and(|t| now >= t) {
            self.state_change_due = None;
            self.last_state_change = Some(now);
            self.send_heartbeat(now, true);
        }
        if self.verify_deadline.is_some_and(|t| now >= t) {
            self.verify_deadline = None;
            if !self.verified {
                let reason = if self.config.answer_secure {
                    "no challenge from master"
                } else {
                    "no status poll from master"
                };
                self.events.push_back(RegistrarEvent::Failed {
                    master: self.master_name.clone(),
                    reason,
                });
            }
        }
    }

    fn mark_verified(&mut self) {
        self.verify_deadline = None;
        if !self.verified {
            self.verified = true;
            self.events.push_back(RegistrarEvent::Registered {
                master: self.master_name.clone(),
            });
        }
    }
}

impl Registrar for GameSpyRegistrar {
    /// Takes the master's `\secure\` (from the master's IP, any port: masters may challenge
    /// from another socket) when [`GameSpyRegistrarConfig::answer_secure`] is set, and answers
    /// it to its source. Everything else goes to the responder; a `\status\` from the master's
    /// IP counts as the Serious Sam verification poll.
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        _state: &ServerState,
    ) -> bool {
        if from.ip() != self.config.master.ip() || self.shut_down {
            return false;
        }
        if !self.config.answer_secure {
            if datagram
                .windows(STATUS_REQUEST.len())
                .any(|w| w == STATUS_REQUEST)
            {
                self.mark_verified();
            }
            return false;
        }
        let Ok(secure) = Secure::decode(datagram) else {
            return false;
        };
        let Some(v) = validate_string(&secure.challenge, &self.config.game_key, Enctype::Zero)
        else {
            return false;
        };
        let mut id = Vec::new();
        crate::gamespy1::packet::QueryId {
            x: self.counter.next_id(),
            y: 1,
        }
        .encode(&mut id);
        let (Ok(validate), Ok(id)) = (Token::new(v), Token::new(id)) else {
            return false;
        };
        // The UT uplink's form (spec M4): `\validate\V\final\\queryid\X.1`.
        let answer = ValidateAnswer {
            validate,
            trailer: Trailer::FinalQueryid(id),
        };
        let mut out = Vec::new();
        answer.encode(&mut out);
        self.queue.push_back((out, from));
        self.mark_verified();
        true
    }

    fn handle_timeout(&mut self, now: Instant, _state: &ServerState) {
        self.run_timers(now);
    }

    /// With [`GameSpyRegistrarConfig::state_changed`], queue `\statechanged`, at most once per
    /// [`STATE_CHANGE_MIN_GAP`] (later changes are folded into one heartbeat at the gap's end).
    fn handle_state_change(&mut self, now: Instant, _state: &ServerState) {
        if !self.config.state_changed || self.shut_down || self.state_change_due.is_some() {
            return;
        }
        let due = self
            .last_state_change
            .map_or(now, |last| (last + STATE_CHANGE_MIN_GAP).max(now));
        self.state_change_due = Some(due);
        self.run_timers(now);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.run_timers(now);
        let Some((bytes, destination)) = self.queue.pop_front() else {
            if self.goodbye_pending {
                self.goodbye_pending = false;
                self.events.push_back(RegistrarEvent::Unregistered {
                    master: self.master_name.clone(),
                });
            }
            return None;
        };
        buf.extend_from_slice(&bytes);
        Some(Transmit { destination })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.shut_down {
            return None;
        }
        [
            Some(self.next_heartbeat),
            self.state_change_due,
            self.verify_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        self.events.pop_front()
    }

    /// Serious Sam sends one more `\statechanged` heartbeat when it stops; the Unreal family
    /// sends nothing. No heartbeat follows either way.
    fn shutdown(&mut self, _now: Instant) {
        if self.shut_down {
            return;
        }
        self.shut_down = true;
        self.state_change_due = None;
        self.verify_deadline = None;
        if self.config.state_changed {
            let bytes = self.heartbeat(true);
            self.queue.push_back((bytes, self.config.master));
        }
        // Reported once the queue (the goodbye, or nothing) has drained.
        self.goodbye_pending = true;
    }
}

/// What a Serious Sam master's verification poll contains (`gamespy-master.md` §13 decision 4).
const STATUS_REQUEST: &[u8] = b"\\status\\";

#[cfg(test)]
mod tests;
