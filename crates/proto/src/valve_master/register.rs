//! Keeping a game server listed on a Half-Life / Xash3D master (`docs/protocols/valve-master.md`
//! §4):
//!
//! ```text
//! server (game socket)                              master (UDP 27010)
//!   q ff <number>                         ----->     at start, then every HEARTBEAT_INTERVAL
//!                                         <-----     ff ff ff ff 73 0a <challenge> <number>
//!   0 0a \protocol\…\challenge\<c>\…  0a  ----->     (no answer)
//!   b 0a                                  ----->     at shutdown
//! ```
//!
//! Each refresh asks a fresh challenge (a master's challenge holds for a time window only),
//! then sends the heartbeat with the server's state of that moment. A challenge reply is taken
//! only from the master's address and only when it echoes this registrar's number. A change
//! the master's filters see (empty, non-empty, full) refreshes at once, at most one per
//! [`MIN_REFRESH_GAP`]. The master sends nothing back for a heartbeat: the registrar reports
//! the server registered once its heartbeat went out in answer to a challenge.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{ChallengeReply, ChallengeRequest, Heartbeat, ServerPacket};
use crate::query::Transmit;
use crate::respond::{Registrar, RegistrarEvent, ServerState};

/// Time between refreshes (xash3d-master forgets a server 300 s after its last heartbeat).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(120);

/// A challenge request unanswered for this long is sent again.
pub const RETRY: Duration = Duration::from_secs(5);

/// Least time between two refreshes made for state changes.
pub const MIN_REFRESH_GAP: Duration = Duration::from_secs(10);

/// The engine version a heartbeat names: the oldest Xash3D masters take by default (a
/// GoldSrc build number such as `1.1.2.7` is no version to them).
pub const ENGINE_VERSION: &str = "0.21";

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

/// The heartbeat of `state` carrying `challenge`.
fn heartbeat(state: &ServerState, challenge: u32, protocol: u8) -> Vec<u8> {
    let clip = |n: usize| n.min(255).to_string();
    let players = state.players.len();
    let bots = state.players.iter().filter(|p| p.bot).count();
    let max = usize::try_from(state.max_players).unwrap_or(255);
    let word = |s: &str| {
        s.bytes()
            .filter(|b| !matches!(b, b'\\' | 0 | b'\n'))
            .collect::<Vec<u8>>()
    };
    let gamedir = if state.game.is_empty() {
        "valve"
    } else {
        &state.game
    };
    let pairs: Vec<(&str, Vec<u8>)> = vec![
        ("protocol", protocol.to_string().into_bytes()),
        ("challenge", challenge.to_string().into_bytes()),
        ("players", clip(players).into_bytes()),
        ("max", clip(max).into_bytes()),
        ("bots", clip(bots).into_bytes()),
        ("gamedir", word(gamedir)),
        ("map", word(&state.map)),
        ("type", b"d".to_vec()),
        ("os", b"l".to_vec()),
        ("version", ENGINE_VERSION.as_bytes().to_vec()),
        ("region", b"255".to_vec()),
        (
            "password",
            if state.password { b"1" } else { b"0" }.to_vec(),
        ),
        ("secure", b"0".to_vec()),
        ("lan", b"0".to_vec()),
        ("nat", b"0".to_vec()),
    ];
    ServerPacket::Heartbeat(Heartbeat::new(
        pairs
            .into_iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v))
            .collect(),
    ))
    .encode()
}

/// Keeps one server listed on one Half-Life / Xash3D master; see the module docs.
#[derive(Debug)]
pub struct ValveRegistrar {
    master: SocketAddr,
    master_name: String,
    protocol: u8,
    number: u32,
    interval: Duration,
    /// When the next challenge request is due (none while one is in flight).
    next_request: Option<Instant>,
    /// The challenge request in flight: when it was sent.
    asked: Option<Instant>,
    /// The heartbeat to send next.
    outgoing: Option<Vec<u8>>,
    last_refresh: Option<Instant>,
    occupancy: u8,
    registered: bool,
    stopping: bool,
    /// The goodbye to send, queued at this time.
    goodbye: Option<Instant>,
    events: VecDeque<RegistrarEvent>,
}

impl ValveRegistrar {
    /// A registrar for a server announcing network `protocol` (48 for Half-Life) on `master`;
    /// `number` is echoed by the master in its challenge replies. The first challenge request
    /// is the first datagram [`Registrar::poll_transmit`] returns.
    #[must_use]
    pub fn new(master: SocketAddr, protocol: u8, number: u32, state: &ServerState) -> Self {
        Self {
            master,
            master_name: master.to_string(),
            protocol,
            number,
            interval: HEARTBEAT_INTERVAL,
            next_request: None,
            asked: None,
            outgoing: None,
            last_refresh: None,
            occupancy: occupancy(state),
            registered: false,
            stopping: false,
            goodbye: None,
            events: VecDeque::new(),
        }
    }

    /// Refresh every `interval` instead of [`HEARTBEAT_INTERVAL`].
    #[must_use]
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    fn request_due(&self, now: Instant) -> bool {
        match (self.asked, self.next_request) {
            (Some(_), _) => false,
            (None, None) => self.last_refresh.is_none(),
            (None, Some(t)) => t <= now,
        }
    }
}

impl Registrar for ValveRegistrar {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
    ) -> bool {
        if self.stopping || from != self.master {
            return false;
        }
        let Ok(reply) = ChallengeReply::decode(datagram) else {
            return false;
        };
        if reply.server_challenge.is_some_and(|n| n != self.number) {
            // Not an answer to this registrar: taken, never used.
            return true;
        }
        if self.asked.take().is_some() {
            self.outgoing = Some(heartbeat(state, reply.challenge, self.protocol));
            self.last_refresh = Some(now);
            self.next_request = now.checked_add(self.interval);
        }
        true
    }

    fn handle_timeout(&mut self, now: Instant, _state: &ServerState) {
        if self.stopping {
            return;
        }
        if let Some(at) = self.asked
            && now.saturating_duration_since(at) >= RETRY
        {
            self.asked = None;
            self.next_request = Some(now);
            self.events.push_back(RegistrarEvent::Failed {
                master: self.master_name.clone(),
                reason: "no challenge from master",
            });
        }
    }

    fn handle_state_change(&mut self, now: Instant, state: &ServerState) {
        let o = occupancy(state);
        if o == self.occupancy || self.stopping {
            return;
        }
        self.occupancy = o;
        if self.asked.is_some() {
            return;
        }
        let soonest = self
            .last_refresh
            .and_then(|t| t.checked_add(MIN_REFRESH_GAP))
            .unwrap_or(now);
        let at = soonest.max(now);
        if self.next_request.is_none_or(|t| t > at) {
            self.next_request = Some(at);
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.goodbye.take().is_some() {
            buf.extend_from_slice(&ServerPacket::Remove.encode());
            return Some(Transmit {
                destination: self.master,
            });
        }
        if self.stopping {
            return None;
        }
        if let Some(hb) = self.outgoing.take() {
            buf.extend_from_slice(&hb);
            if !self.registered {
                self.registered = true;
                self.events.push_back(RegistrarEvent::Registered {
                    master: self.master_name.clone(),
                });
            }
            return Some(Transmit {
                destination: self.master,
            });
        }
        if self.request_due(now) {
            self.asked = Some(now);
            self.next_request = None;
            let q = ServerPacket::Challenge(ChallengeRequest {
                server_challenge: Some(self.number),
            });
            buf.extend_from_slice(&q.encode());
            return Some(Transmit {
                destination: self.master,
            });
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if let Some(at) = self.goodbye {
            return Some(at);
        }
        if self.stopping {
            return None;
        }
        match self.asked {
            Some(at) => at.checked_add(RETRY),
            None => self.next_request,
        }
    }

    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        self.events.pop_front()
    }

    fn shutdown(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.goodbye = self.registered.then_some(now);
        self.asked = None;
        self.outgoing = None;
        self.next_request = None;
        self.events.push_back(RegistrarEvent::Unregistered {
            master: self.master_name.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::serve::Announcement;
    use super::*;
    use crate::respond::PlayerState;

    const MASTER: &str = "127.0.0.1:27010";

    fn send(r: &mut ValveRegistrar, now: Instant) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        r.poll_transmit(now, &mut buf).map(|t| {
            assert_eq!(t.destination, MASTER.parse().unwrap());
            buf
        })
    }

    fn reply(challenge: u32, number: u32) -> Vec<u8> {
        ChallengeReply {
            challenge,
            server_challenge: Some(number),
        }
        .encode()
    }

    fn state() -> ServerState {
        ServerState {
            game: "cstrike".into(),
            map: "de_dust2".into(),
            max_players: 2,
            ..ServerState::default()
        }
    }

    #[test]
    fn asks_a_challenge_then_heartbeats_with_it_and_refreshes() {
        let t0 = Instant::now();
        let master: SocketAddr = MASTER.parse().unwrap();
        let s = state();
        let mut r = ValveRegistrar::new(master, 48, 0xAABB, &s);
        assert_eq!(send(&mut r, t0).unwrap(), b"q\xff\xbb\xaa\x00\x00");
        assert_eq!(send(&mut r, t0), None);
        assert_eq!(r.poll_timeout(), Some(t0 + RETRY));
        // Another sender, another number: not used.
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(!r.handle_datagram(t0, other, &reply(5, 0xAABB), &s));
        assert!(r.handle_datagram(t0, master, &reply(5, 0xCCDD), &s));
        assert_eq!(send(&mut r, t0), None);
        assert!(r.handle_datagram(t0, master, &reply(777, 0xAABB), &s));
        let hb = send(&mut r, t0).unwrap();
        let ServerPacket::Heartbeat(h) = ServerPacket::decode(&hb).unwrap() else {
            panic!("not a heartbeat");
        };
        let a = Announcement::read(&h).unwrap();
        assert_eq!((a.challenge, a.protocol, a.players, a.max), (777, 48, 0, 2));
        assert_eq!(
            (a.gamedir.as_slice(), a.map.as_slice()),
            (&b"cstrike"[..], &b"de_dust2"[..])
        );
        assert_eq!(a.version.to_string(), ENGINE_VERSION);
        assert_eq!(
            r.poll_event(),
            Some(RegistrarEvent::Registered {
                master: MASTER.into()
            })
        );
        assert_eq!(r.poll_timeout(), Some(t0 + HEARTBEAT_INTERVAL));
        let t1 = t0 + HEARTBEAT_INTERVAL;
        r.handle_timeout(t1, &s);
        assert_eq!(send(&mut r, t1).unwrap(), b"q\xff\xbb\xaa\x00\x00");
        // No answer: reported, asked again.
        r.handle_timeout(t1 + RETRY, &s);
        assert!(matches!(
            r.poll_event(),
            Some(RegistrarEvent::Failed { .. })
        ));
        assert!(send(&mut r, t1 + RETRY).is_some());
        // Shutdown says goodbye once.
        r.shutdown(t1 + RETRY);
        assert_eq!(send(&mut r, t1 + RETRY).unwrap(), b"b\n");
        assert_eq!(send(&mut r, t1 + RETRY), None);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn a_change_of_occupancy_refreshes_at_most_once_per_gap() {
        let t0 = Instant::now();
        let master: SocketAddr = MASTER.parse().unwrap();
        let mut s = state();
        let mut r = ValveRegistrar::new(master, 48, 1, &s);
        send(&mut r, t0).unwrap();
        assert!(r.handle_datagram(t0, master, &reply(9, 1), &s));
        send(&mut r, t0).unwrap();
        s.players.push(PlayerState::default());
        r.handle_state_change(t0 + Duration::from_secs(1), &s);
        assert_eq!(send(&mut r, t0 + Duration::from_secs(1)), None);
        assert_eq!(r.poll_timeout(), Some(t0 + MIN_REFRESH_GAP));
        assert!(send(&mut r, t0 + MIN_REFRESH_GAP).is_some());
        // Same occupancy: nothing more.
        r.handle_datagram(t0 + MIN_REFRESH_GAP, master, &reply(9, 1), &s);
        send(&mut r, t0 + MIN_REFRESH_GAP).unwrap();
        r.handle_state_change(t0 + Duration::from_secs(30), &s);
        assert_eq!(
            r.poll_timeout(),
            Some(t0 + MIN_REFRESH_GAP + HEARTBEAT_INTERVAL)
        );
    }
}
