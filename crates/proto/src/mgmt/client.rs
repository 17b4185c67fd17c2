//! The other ends of the connection: the frames a game server (or a test double) and a client
//! send, and the client's reader for `msRQueryGameServers`.
//!
//! No sockets here either: the encoders append to a caller-owned buffer, and
//! [`ClientConnection`] takes read bytes and hands out [`ClientEvent`]s.

use std::collections::VecDeque;

use super::messages::{GameServer, Message, MessageError, ServerListAnswer, Stats};
use super::packet::FrameDecoder;
use crate::wire::DecodeError;

/// Append the `msRegisterGameServer` frame for `server`.
pub fn encode_register(server: &GameServer, out: &mut Vec<u8>) {
    Message::RegisterGameServer(server.clone()).encode(out);
}

/// Append the `msUpdateGameServerStats` frame for `stats`.
pub fn encode_update(stats: &Stats, out: &mut Vec<u8>) {
    Message::UpdateGameServerStats(*stats).encode(out);
}

/// Append the `msUnregisterGameServer` frame (39 bytes, no `content`).
pub fn encode_unregister(out: &mut Vec<u8>) {
    Message::UnregisterGameServer.encode(out);
}

/// Append the `msQueryGameServers` frame (35 bytes, no `content`).
pub fn encode_query(out: &mut Vec<u8>) {
    Message::QueryGameServers.encode(out);
}

/// What a client's connection produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// An `msRQueryGameServers`; entries that failed validation are left out and counted in
    /// [`ServerListAnswer::skipped`].
    Answer(ServerListAnswer),
    /// A frame that was not a valid answer (bad JSON, no valid `servers` array, or another
    /// command); ignore it and keep reading.
    Discarded(MessageError),
    /// A message that is not an answer (the management server never sends one).
    Unexpected(Message),
    /// A framing error: close the connection. The last event.
    Closed(DecodeError),
}

/// A client's or game server's connection, reading what the management server sends.
#[derive(Debug, Clone, Default)]
pub struct ClientConnection {
    decoder: FrameDecoder,
    events: VecDeque<ClientEvent>,
    closed: bool,
}

impl ClientConnection {
    /// A fresh connection.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes read from the socket; complete frames become events in order.
    pub fn handle_input(&mut self, mut input: &[u8]) {
        while !self.closed {
            match self.decoder.feed(&mut input) {
                Ok(Some(frame)) => {
                    let event = match Message::from_frame(&frame) {
                        Ok(Message::QueryGameServersAnswer(a)) => ClientEvent::Answer(a),
                        Ok(other) => ClientEvent::Unexpected(other),
                        Err(e) => ClientEvent::Discarded(e),
                    };
                    self.events.push_back(event);
                }
                Ok(None) => break,
                Err(e) => {
                    self.closed = true;
                    self.events.push_back(ClientEvent::Closed(e));
                }
            }
        }
    }

    /// The next event; call until `None` after every [`Self::handle_input`].
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// True when no partial frame is buffered.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.decoder.is_idle()
    }
}
