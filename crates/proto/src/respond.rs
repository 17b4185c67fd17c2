//! The game-server side: what a server is ([`ServerState`]) and the contract of the per-protocol
//! responders that answer queries about it ([`Responder`]).
//!
//! A responder is sans-IO like the query machines: the driver hands it each datagram that
//! arrived on the server's query socket together with the current state, and sends whatever
//! replies it appends. Rate limiting per source and the global byte budget are the driver's job
//! ([`crate::limit`]), applied to the replies a responder produced, so every protocol gets the
//! same protection.
//!
//! Strings in [`ServerState`] are Unicode; each protocol's responder encodes them the way its
//! stock servers do (Windows-1252 for GameAgent and GameSpy v1, Windows-1252 or UTF-16LE for
//! Unreal 2, UTF-8 for Teeworlds), replacing what its character set cannot carry.

use std::net::SocketAddr;
use std::time::Instant;

/// One player as a server knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlayerState {
    /// Display name.
    pub name: String,
    /// Score or frags.
    pub score: i64,
    /// Ping in milliseconds.
    pub ping_ms: u32,
    /// Team number (0 red / first, 1 blue / second), or `None` outside team games.
    pub team: Option<i32>,
    /// Clan tag (Teeworlds).
    pub clan: String,
    /// Country code (Teeworlds: ISO 3166-1 numeric; -1 = none).
    pub country: i32,
    /// A spectator rather than a player.
    pub spectator: bool,
    /// A bot (not listed by protocols that leave bots out).
    pub bot: bool,
}

/// Everything a game server tells the world about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    /// Server name.
    pub name: String,
    /// Current map or level.
    pub map: String,
    /// Game type or mode (`Fragmatch`, `xDeathMatch`, `DM`, …).
    pub game_type: String,
    /// Game version string (`1.10`, `3369`, `0.7.5`, …).
    pub version: String,
    /// The game's protocol name where one is sent (`serioussamse`, `ut2`, …).
    pub game: String,
    /// The game port, the one players connect to.
    pub game_port: u16,
    /// Whether joining needs a password.
    pub password: bool,
    /// Player slots.
    pub max_players: u32,
    /// Connected players, spectators and bots.
    pub players: Vec<PlayerState>,
    /// Further key/value rules, in order (keys may repeat).
    pub rules: Vec<(String, String)>,
}

impl Default for ServerState {
    fn default() -> Self {
        Self {
            name: "Muster server".to_owned(),
            map: String::new(),
            game_type: String::new(),
            version: String::new(),
            game: String::new(),
            game_port: 0,
            password: false,
            max_players: 16,
            players: Vec::new(),
            rules: Vec::new(),
        }
    }
}

impl ServerState {
    /// Players that count as connected humans (not bots, not spectators).
    pub fn active_players(&self) -> impl Iterator<Item = &PlayerState> {
        self.players.iter().filter(|p| !p.bot && !p.spectator)
    }
}

/// One datagram a responder wants sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Where it goes (normally the request's source).
    pub to: SocketAddr,
    /// The datagram.
    pub bytes: Vec<u8>,
}

/// A sans-IO answerer of one protocol's queries on one socket.
pub trait Responder {
    /// Answer `datagram` from `from` about `state`, appending zero or more replies to `out`.
    /// Bad input appends nothing and returns `false`, so the driver can count it; it never
    /// panics.
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool;
}

/// A boxed responder is a responder, so a farm can mix protocols.
impl<R: Responder + ?Sized> Responder for Box<R> {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        (**self).handle_datagram(now, from, datagram, state, out)
    }
}

/// An HTTP request a registrar wants made (DDNet's HTTP register). The driver owns the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `POST` or `DELETE`… as the protocol needs.
    pub method: &'static str,
    /// The full URL.
    pub url: String,
    /// Headers in the order to send them.
    pub headers: Vec<(String, String)>,
    /// The body (may be empty).
    pub body: Vec<u8>,
}

/// What a registrar reports, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrarEvent {
    /// The master accepted the server (challenge answered, heartbeat acknowledged, listed).
    Registered {
        /// Which master.
        master: String,
    },
    /// A registration attempt failed; the registrar retries on its own schedule.
    Failed {
        /// Which master.
        master: String,
        /// Why, in a few lower-case words.
        reason: &'static str,
    },
    /// The registrar finished its shutdown messages (`u`, `Action: delete`, …).
    Unregistered {
        /// Which master.
        master: String,
    },
}

/// A sans-IO registration client: keeps one game server listed on one master.
///
/// Registrars share the server's query socket with the [`Responder`], because masters check
/// the source port (GameAgent and GameSpy heartbeats, the Teeworlds firewall check, DDNet's UDP
/// challenge). The driver offers every datagram to the registrar first; what it does not take
/// goes to the responder. Datagrams it wants sent leave from the same socket.
pub trait Registrar {
    /// Offer a datagram that arrived on the server's socket; `true` when it was for the
    /// registrar (then the responder does not see it).
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
    ) -> bool;

    /// Call when [`Self::poll_timeout`] has passed.
    fn handle_timeout(&mut self, now: Instant, state: &ServerState);

    /// The server's state changed (players joined, map changed): registrars that announce
    /// changes (`\statechanged\`, DDNet `Info-Serial`) act on it.
    fn handle_state_change(&mut self, now: Instant, state: &ServerState) {
        let _ = (now, state);
    }

    /// The next datagram to send from the server's socket, written into `buf`.
    #[must_use]
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<crate::query::Transmit>;

    /// The next HTTP request to make (only HTTP-based registrars return any).
    #[must_use]
    fn poll_http(&mut self, now: Instant) -> Option<HttpRequest> {
        let _ = now;
        None
    }

    /// The answer to the last request from [`Self::poll_http`]: its status and body, or
    /// `None` when the request failed at the transport level.
    fn handle_http_response(&mut self, now: Instant, response: Option<(u16, &[u8])>) {
        let _ = (now, response);
    }

    /// When [`Self::handle_timeout`] must be called.
    #[must_use]
    fn poll_timeout(&self) -> Option<Instant>;

    /// Events for logs and tests.
    #[must_use]
    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        None
    }

    /// The server is shutting down: queue the goodbye (`u`, `Action: delete`) if the protocol
    /// has one. The driver keeps polling for a short while so it goes out.
    fn shutdown(&mut self, now: Instant) {
        let _ = now;
    }

    /// After [`Self::shutdown`]: whether goodbyes are still to be sent or answered. The driver
    /// keeps serving the registrar (for a bounded grace) until this is false. By default, as
    /// long as [`Self::poll_timeout`] is set; registrars whose goodbye is an HTTP exchange
    /// (which sets no timer) say so here.
    #[must_use]
    fn goodbye_pending(&self) -> bool {
        self.poll_timeout().is_some()
    }
}
