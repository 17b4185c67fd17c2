//! Registering a game server with a GameAgent master, as a stock 1.10 server does in
//! GameAgent mode (spec §2.4, §9.1).
//!
//! ```text
//! server (query socket)                      master (UDP 9005)
//!   71 "q"                          ----->     at start
//!                                   <-----     01 c0 c1 c2 c3
//!   "0;challenge;<c>;players;…"     ----->     at once, echoing c
//!   "0;challenge;0;players;…"       ----->     every 150 s
//!   75 "u"                          ----->     once per player accepted
//!   (shutdown)                                 nothing
//! ```
//!
//! A master that forgot the server (restart, expiry) answers the next periodic heartbeat with
//! a fresh challenge (reference master: any unknown address; Muster: §8.3 rule 3.3); answering
//! every challenge from the master is how the server re-registers, with no extra `q`.
//!
//! Unlike stock, challenges are taken only from the master's address, only when at least five
//! bytes long, and at most one per [`RegistrarConfig::min_challenge_interval`] (spec §9.1.2).
//! Sockets, name resolution and the clock are the driver's.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{CHALLENGE, Challenge, JOIN, STATE_CHANGED};
use super::respond::GameAgentResponder;
use crate::query::Transmit;
use crate::respond::{Registrar, RegistrarEvent, ServerState};

/// The stock heartbeat period (spec §2.4 item 5).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(150);

/// Most `u` datagrams queued for one state change (a session has at most 16 players).
pub const MAX_STATE_CHANGED_BURST: u32 = 16;

/// Settings of a [`GameAgentRegistrar`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrarConfig {
    /// The master's resolved address (UDP port [`super::MASTER_PORT`] for stock masters).
    pub master: SocketAddr,
    /// Time between periodic heartbeats.
    pub heartbeat_interval: Duration,
    /// Least time between two answered challenges.
    pub min_challenge_interval: Duration,
}

impl RegistrarConfig {
    /// Stock timing for `master`: heartbeat every 150 s, at most one challenge answer a second.
    #[must_use]
    pub fn new(master: SocketAddr) -> Self {
        Self {
            master,
            heartbeat_interval: HEARTBEAT_INTERVAL,
            min_challenge_interval: Duration::from_secs(1),
        }
    }
}

/// Keeps one server registered with one GameAgent master; see the module docs.
#[derive(Debug)]
pub struct GameAgentRegistrar {
    config: RegistrarConfig,
    master_name: String,
    queue: VecDeque<Vec<u8>>,
    next_heartbeat: Option<Instant>,
    last_answer: Option<Instant>,
    players: u32,
    answered_once: bool,
    stopped: bool,
    events: VecDeque<RegistrarEvent>,
}

impl GameAgentRegistrar {
    /// A registrar for the server described by `state`; the `q` join is the first datagram
    /// [`Registrar::poll_transmit`] returns.
    #[must_use]
    pub fn new(config: RegistrarConfig, state: &ServerState) -> Self {
        let master_name = config.master.to_string();
        Self {
            config,
            master_name,
            queue: VecDeque::from([vec![JOIN]]),
            next_heartbeat: None,
            last_answer: None,
            players: active_count(state),
            answered_once: false,
            stopped: false,
            events: VecDeque::new(),
        }
    }

    fn queue_heartbeat(&mut self, now: Instant, state: &ServerState, challenge: i32) {
        self.queue
            .push_back(GameAgentResponder::heartbeat(state, challenge));
        self.next_heartbeat = Some(now + self.config.heartbeat_interval);
    }
}

impl Registrar for GameAgentRegistrar {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
    ) -> bool {
        if self.stopped || from != self.config.master || datagram.first() != Some(&CHALLENGE) {
            return false;
        }
        // From here on the datagram is the master's challenge: taken even when ignored, so the
        // responder never turns it into a second heartbeat.
        let Ok(challenge) = Challenge::decode(datagram) else {
            return true;
        };
        if self
            .last_answer
            .is_some_and(|t| now.saturating_duration_since(t) < self.config.min_challenge_interval)
        {
            return true;
        }
        self.last_answer = Some(now);
        self.queue_heartbeat(now, state, challenge.0);
        if !self.answered_once {
            self.answered_once = true;
            self.events.push_back(RegistrarEvent::Registered {
                master: self.master_name.clone(),
            });
        }
        true
    }

    fn handle_timeout(&mut self, now: Instant, state: &ServerState) {
        if self.stopped {
            return;
        }
        if self.next_heartbeat.is_some_and(|t| t <= now) {
            if !self.answered_once {
                // No challenge came in a whole heartbeat period: the master is unreachable or
                // ignores us. The heartbeat below makes a master that forgot us challenge again.
                self.events.push_back(RegistrarEvent::Failed {
                    master: self.master_name.clone(),
                    reason: "no challenge from master",
                });
            }
            self.queue_heartbeat(now, state, 0);
        }
    }

    /// Queues one `u` per player accepted since the last state seen (never for players
    /// leaving, as stock).
    fn handle_state_change(&mut self, _now: Instant, state: &ServerState) {
        let count = active_count(state);
        if !self.stopped && count > self.players {
            let joined = (count - self.players).min(MAX_STATE_CHANGED_BURST);
            self.queue.extend((0..joined).map(|_| vec![STATE_CHANGED]));
        }
        self.players = count;
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.stopped {
            return None;
        }
        let bytes = self.queue.pop_front()?;
        if self.next_heartbeat.is_none() {
            // The join went out: the heartbeat clock starts now.
            self.next_heartbeat = Some(now + self.config.heartbeat_interval);
        }
        buf.extend_from_slice(&bytes);
        Some(Transmit {
            destination: self.config.master,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        self.next_heartbeat
    }

    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        self.events.pop_front()
    }

    /// Stock servers send nothing on shutdown (spec §2.4 item 8): queued datagrams are dropped
    /// and [`RegistrarEvent::Unregistered`] is reported at once; the master expires the record.
    fn shutdown(&mut self, _now: Instant) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.queue.clear();
        self.next_heartbeat = None;
        self.events.push_back(RegistrarEvent::Unregistered {
            master: self.master_name.clone(),
        });
    }
}

fn active_count(state: &ServerState) -> u32 {
    u32::try_from(state.active_players().count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::respond::PlayerState;

    fn master() -> SocketAddr {
        "127.0.0.1:9005".parse().unwrap()
    }

    fn state(players: usize) -> ServerState {
        ServerState {
            map: "Yodeller".into(),
            game_type: "Cooperative".into(),
            max_players: 8,
            players: (0..players)
                .map(|i| PlayerState {
                    name: format!("p{i}"),
                    ..PlayerState::default()
                })
                .collect(),
            ..ServerState::default()
        }
    }

    fn drain(r: &mut GameAgentRegistrar, now: Instant) -> Vec<Vec<u8>> {
        let mut out = vec![];
        loop {
            let mut buf = vec![];
            match r.poll_transmit(now, &mut buf) {
                Some(t) => {
                    assert_eq!(t.destination, master());
                    out.push(buf);
                }
                None => return out,
            }
        }
    }

    fn hb(challenge: &str, players: usize) -> Vec<u8> {
        format!(
            "0;challenge;{challenge};players;{players};maxplayers;8;level;Yodeller;gametype;Cooperative;version;1.10;product;serioussamse"
        )
        .into_bytes()
    }

    #[test]
    fn join_then_challenge_answer_echoes_g8() {
        let t0 = Instant::now();
        let s = state(1);
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &s);
        assert_eq!(drain(&mut r, t0), vec![vec![0x71]]);
        assert_eq!(r.poll_timeout(), Some(t0 + HEARTBEAT_INTERVAL));
        // G8 from the master: the heartbeat of G11, at once.
        assert!(r.handle_datagram(t0, master(), &[0x01, 0x78, 0x56, 0x34, 0x12], &s));
        assert_eq!(drain(&mut r, t0), vec![hb("305419896", 1)]);
        assert_eq!(
            r.poll_event(),
            Some(RegistrarEvent::Registered {
                master: "127.0.0.1:9005".into()
            })
        );
        assert_eq!(r.poll_event(), None);
    }

    #[test]
    fn periodic_heartbeat_every_150_s_with_challenge_0() {
        let t0 = Instant::now();
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &state(0));
        drain(&mut r, t0);
        let t1 = t0 + Duration::from_secs(149);
        r.handle_timeout(t1, &state(0));
        assert!(drain(&mut r, t1).is_empty());
        let t2 = t0 + HEARTBEAT_INTERVAL;
        r.handle_timeout(t2, &state(2));
        assert_eq!(drain(&mut r, t2), vec![hb("0", 2)]);
        assert_eq!(r.poll_timeout(), Some(t2 + HEARTBEAT_INTERVAL));
        // A challenge answer restarts the period.
        let t3 = t2 + Duration::from_secs(100);
        assert!(r.handle_datagram(t3, master(), &[0x01, 1, 0, 0, 0], &state(2)));
        assert_eq!(drain(&mut r, t3), vec![hb("1", 2)]);
        assert_eq!(r.poll_timeout(), Some(t3 + HEARTBEAT_INTERVAL));
    }

    #[test]
    fn no_challenge_within_a_period_reports_failed_and_keeps_trying() {
        let t0 = Instant::now();
        let s = state(0);
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &s);
        drain(&mut r, t0);
        let t1 = t0 + HEARTBEAT_INTERVAL;
        r.handle_timeout(t1, &s);
        assert_eq!(
            r.poll_event(),
            Some(RegistrarEvent::Failed {
                master: "127.0.0.1:9005".into(),
                reason: "no challenge from master"
            })
        );
        assert_eq!(drain(&mut r, t1), vec![hb("0", 0)]);
        assert!(r.handle_datagram(t1, master(), &[0x01, 7, 0, 0, 0], &s));
        assert!(matches!(
            r.poll_event(),
            Some(RegistrarEvent::Registered { .. })
        ));
        let t2 = t1 + HEARTBEAT_INTERVAL;
        r.handle_timeout(t2, &s);
        assert_eq!(r.poll_event(), None);
    }

    #[test]
    fn reregisters_when_master_forgets() {
        // A scripted master restarts and forgets the server: the next periodic heartbeat (echo
        // 0) draws a fresh challenge (§8.3 rule 3.3), which the server answers at once.
        let t0 = Instant::now();
        let s = state(3);
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &s);
        drain(&mut r, t0);
        assert!(r.handle_datagram(t0, master(), &[0x01, 9, 0, 0, 0], &s));
        assert_eq!(drain(&mut r, t0), vec![hb("9", 3)]);
        let t1 = t0 + HEARTBEAT_INTERVAL;
        r.handle_timeout(t1, &s);
        assert_eq!(drain(&mut r, t1), vec![hb("0", 3)]);
        let fresh = [0x01, 0xdc, 0xde, 0x45, 0x6f]; // G9
        assert!(r.handle_datagram(t1, master(), &fresh, &s));
        assert_eq!(drain(&mut r, t1), vec![hb("1866850012", 3)]);
    }

    #[test]
    fn quirk_negative_challenge_echoed_signed() {
        let t0 = Instant::now();
        let s = state(0);
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &s);
        drain(&mut r, t0);
        assert!(r.handle_datagram(t0, master(), &[0x01, 0xff, 0xff, 0xff, 0xff, 0x00], &s));
        assert_eq!(drain(&mut r, t0), vec![hb("-1", 0)]);
    }

    #[test]
    fn challenges_only_from_master_long_enough_and_one_per_second() {
        let t0 = Instant::now();
        let s = state(0);
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &s);
        drain(&mut r, t0);
        let other: SocketAddr = "127.0.0.1:9006".parse().unwrap();
        assert!(!r.handle_datagram(t0, other, &[0x01, 1, 0, 0, 0], &s));
        // Short: taken (it is the master's) but not answered.
        assert!(r.handle_datagram(t0, master(), &[0x01, 1, 0], &s));
        // Not a challenge: left to the responder.
        assert!(!r.handle_datagram(t0, master(), &[0x02], &s));
        assert!(drain(&mut r, t0).is_empty());
        assert!(r.handle_datagram(t0, master(), &[0x01, 1, 0, 0, 0], &s));
        let half = t0 + Duration::from_millis(500);
        assert!(r.handle_datagram(half, master(), &[0x01, 2, 0, 0, 0], &s));
        assert_eq!(drain(&mut r, half), vec![hb("1", 0)]);
        let later = t0 + Duration::from_secs(1);
        assert!(r.handle_datagram(later, master(), &[0x01, 3, 0, 0, 0], &s));
        assert_eq!(drain(&mut r, later), vec![hb("3", 0)]);
    }

    #[test]
    fn u_once_per_player_accepted_never_on_leave() {
        let t0 = Instant::now();
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &state(1));
        drain(&mut r, t0);
        r.handle_state_change(t0, &state(3));
        assert_eq!(drain(&mut r, t0), vec![vec![0x75], vec![0x75]]);
        r.handle_state_change(t0, &state(1));
        assert!(drain(&mut r, t0).is_empty());
        r.handle_state_change(t0, &state(2));
        assert_eq!(drain(&mut r, t0), vec![vec![0x75]]);
        // A map change with the same players sends nothing.
        let mut moved = state(2);
        moved.map = "Tal Adar".into();
        r.handle_state_change(t0, &moved);
        assert!(drain(&mut r, t0).is_empty());
    }

    #[test]
    fn shutdown_sends_nothing_and_reports_unregistered() {
        let t0 = Instant::now();
        let s = state(1);
        let mut r = GameAgentRegistrar::new(RegistrarConfig::new(master()), &s);
        drain(&mut r, t0);
        r.handle_state_change(t0, &state(2));
        r.shutdown(t0);
        assert!(drain(&mut r, t0).is_empty());
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(
            r.poll_event(),
            Some(RegistrarEvent::Unregistered {
                master: "127.0.0.1:9005".into()
            })
        );
        let later = t0 + HEARTBEAT_INTERVAL * 2;
        r.handle_timeout(later, &s);
        assert!(!r.handle_datagram(later, master(), &[0x01, 1, 0, 0, 0], &s));
        assert!(drain(&mut r, later).is_empty());
    }
}
