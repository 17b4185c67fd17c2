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
