//! The Teeworlds / DDNet responder: one UDP port answering all browser families (spec §13
//! decision 2).
//!
//! ```text
//! ff×6 (or any 0.6 header) "gie3" t      -> ff×6 "inf3"   DDNet's 16-client squeeze (§5.3)
//! 78 65 <extra:2> <res:2>  "gie3" t      -> ff×6 "iext" + ff×6 "iex+"…  token (extra << 8) | t
//! any 0.6 header           "fstd" t      -> ff×6 "dtsf"…  24 clients per packet (§6)
//! 04 00 00 ff×4 05 <client:4> <pad>      -> 04 00 00 <client:4> 05 <server token:4>
//!   (only from 519 bytes on; the server token is a keyed hash of the peer's IP, port ignored)
//! 21 <server token:4> <client:4> "gie3" <browse:varint>
//!                                        -> 21 <client:4> <server token:4> "inf3" <browse> …
//! ```
//!
//! Tokens are stateless: the 0.7 server token is derived from the secret passed to
//! [`TeeworldsResponder::new`], an epoch number that advances every
//! [`ResponderConfig::token_rotation`], and the peer's IP address. Tokens of the current and
//! the previous epoch are accepted, as teeworlds does with its 16-second seed. Nothing is
//! stored per peer, so no request (the browse token −1 included, §13.3) can grow memory.
//!
//! Requests the real servers ignored (§11) get no reply: connection traffic, unknown magics,
//! `gie3` without a token byte, master messages such as `req2`, short token requests, 0.7
//! requests with a missing or wrong token, and 0.7 requests without a response token. Two
//! cases where a real server does answer are left unanswered on purpose: a 0.7-framed `gie3`
//! whose response token is `ff ff ff ff` (DDNet: 0.6 `inf3`; teeworlds: its own token
//! request) and a 0.7-framed `fstd` (DDNet: 0.6 `dtsf`). The token reply is teeworlds'
//! unpadded 12 bytes, also for a requester token of `ff ff ff ff` (DDNet pads to 520).
//!
//! Not here: sockets, per-source rate limits and the byte budget (the driver's, see
//! [`crate::limit`]), random numbers (the secret comes from the caller), registration with
//! masters (`teeworlds_master`).

use std::hash::{DefaultHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::respond::{PlayerState, Reply, Responder, ServerState};

use super::header::{Frame, Header, MAX_DATAGRAM, NO_TOKEN, TokenMessage};
use super::packet::{GetInfo, Info7, Message};
use super::reply::{Client, ServerDescription};
use super::value::TwStr;
use super::{MAX_CLIENTS, MAX_EXTENDED_TOKEN};

/// How often the 0.7 token seed changes (teeworlds: every 16 seconds).
pub const DEFAULT_TOKEN_ROTATION: Duration = Duration::from_secs(16);
/// Complete info replies per second before replies lose their player records (DDNet's
/// `sv_server_info_per_second` default).
pub const DEFAULT_FULL_INFO_PER_SECOND: u32 = 50;
/// The version sent when the [`ServerState`] has none: what a DDNet server sends in 0.6.
pub const DEFAULT_VERSION: &str = "0.6.4";
/// The window of the full-info rate limit.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// What the responder says beyond the [`ServerState`], and its policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Host name in 0.7 replies (empty by default).
    pub hostname: String,
    /// Version in 0.7 replies; `None` sends [`ServerState::version`] as in the 0.6 families.
    pub version_07: Option<String>,
    /// CRC-32 of the map file, sent in `iext`.
    pub map_crc: u32,
    /// Size of the map file in bytes, sent in `iext`.
    pub map_size: u32,
    /// 0.7 skill level (0 casual, 1 normal, 2 competitive).
    pub skill_level: i32,
    /// 0.7 flags bit 1: scores are race times.
    pub time_score: bool,
    /// How long one token seed lives; tokens of the previous seed stay valid for as long.
    pub token_rotation: Duration,
    /// Complete replies per second; after that, replies carry no player records (counts stay
    /// true). 0 means no limit.
    pub full_info_per_second: u32,
    /// Answer DDNet's 64-slot legacy `fstd` request with `dtsf` packets.
    pub answer_legacy64: bool,
    /// Client slots when they exceed [`ServerState::max_players`] (teeworlds'
    /// `sv_max_clients` next to `sv_player_slots`); `None` makes them equal.
    pub max_clients: Option<u32>,
    /// One address-independent 0.7 token accepted from anyone, as DDNet accepts the token it
    /// announces to the HTTP master in `Connless-Token`.
    pub announced_token: Option<[u8; 4]>,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        Self {
            hostname: String::new(),
            version_07: None,
            map_crc: 0,
            map_size: 0,
            skill_level: 1,
            time_score: false,
            token_rotation: DEFAULT_TOKEN_ROTATION,
            full_info_per_second: DEFAULT_FULL_INFO_PER_SECOND,
            answer_legacy64: true,
            max_clients: None,
            announced_token: None,
        }
    }
}

/// The responder; see the module docs.
#[derive(Debug, Clone)]
pub struct TeeworldsResponder {
    config: ResponderConfig,
    secret: [u8; 16],
    /// The instant epoch 0 starts: the first `now` the responder saw.
    start: Option<Instant>,
    window_start: Option<Instant>,
    full_in_window: u32,
}

impl TeeworldsResponder {
    /// A responder whose 0.7 tokens are derived from `secret` (draw it at random; a
    /// predictable secret lets spoofers compute tokens).
    #[must_use]
    pub fn new(config: ResponderConfig, secret: [u8; 16]) -> Self {
        Self {
            config,
            secret,
            start: None,
            window_start: None,
            full_in_window: 0,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ResponderConfig {
        &self.config
    }

    /// The 0.7 token this responder currently issues to `ip` (for tests and for announcing
    /// it to a master).
    #[must_use]
    pub fn token_for(&mut self, now: Instant, ip: IpAddr) -> [u8; 4] {
        let epoch = self.epoch(now);
        self.token(epoch, ip)
    }

    fn epoch(&mut self, now: Instant) -> u64 {
        let start = *self.start.get_or_insert(now);
        let rotation = self.config.token_rotation.as_millis().max(1);
        let elapsed = now.saturating_duration_since(start).as_millis();
        u64::try_from(elapsed / rotation).unwrap_or(u64::MAX)
    }

    fn token(&self, epoch: u64, ip: IpAddr) -> [u8; 4] {
        let mut h = DefaultHasher::new();
        h.write(&self.secret);
        h.write_u64(epoch);
        match ip.to_canonical() {
            IpAddr::V4(v4) => h.write(&v4.octets()),
            IpAddr::V6(v6) => h.write(&v6.octets()),
        }
        h.write(&self.secret);
        let bytes = h.finish().to_be_bytes();
        let mut token = [0u8; 4];
        for (t, b) in token.iter_mut().zip(bytes.iter()) {
            *t = *b;
        }
        if token == NO_TOKEN {
            // `ff ff ff ff` means "no token"; never issue it.
            token = [0xff, 0xff, 0xff, 0xfe];
        }
        token
    }

    fn token_valid(&mut self, now: Instant, ip: IpAddr, token: [u8; 4]) -> bool {
        if token == NO_TOKEN {
            return false;
        }
        if self.config.announced_token == Some(token) {
            return true;
        }
        let epoch = self.epoch(now);
        token == self.token(epoch, ip)
            || (epoch > 0 && token == self.token(epoch.saturating_sub(1), ip))
    }

    /// Count one info reply against the rate limit; true when it may carry player records.
    fn full_reply_allowed(&mut self, now: Instant) -> bool {
        if self.config.full_info_per_second == 0 {
            return true;
        }
        let window_start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(window_start) >= RATE_WINDOW {
            self.window_start = Some(now);
            self.full_in_window = 0;
        }
        self.full_in_window = self.full_in_window.saturating_add(1);
        self.full_in_window <= self.config.full_info_per_second
    }

    fn answer(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        // DDNet reads at most 1400 bytes and ignores the rest (probe `ddnet-oversize-1401`).
        let datagram = datagram.get(..MAX_DATAGRAM).unwrap_or(datagram);
        let Ok(frame) = Frame::split(datagram) else {
            return false;
        };
        let mut buf = Vec::new();
        match frame {
            Frame::Token(request) => {
                // Only requests at least as large as the answer (anti-amplification, §8.1).
                if request.token != NO_TOKEN || !request.is_answerable_request() {
                    return false;
                }
                let own = self.token_for(now, from.ip());
                TokenMessage::reply(request.own_token, own).encode(&mut buf);
                out.push(Reply {
                    to: from,
                    bytes: buf,
                });
            }
            Frame::Connless(
                Header::Sixup {
                    token,
                    response_token,
                },
                payload,
            ) => {
                // DDNet answers a missing response token in 0.6 framing and teeworlds with a
                // token request of its own; we answer nothing (nothing to address it to).
                if response_token == NO_TOKEN || !self.token_valid(now, from.ip(), token) {
                    return false;
                }
                let Ok(Message::GetInfo7(request)) = Message::decode(payload, true) else {
                    return false;
                };
                let full = self.full_reply_allowed(now);
                let description = describe(state, &self.config, true);
                let mut info: Info7 = description.sixup(request.browse_token);
                if !full && let Some(body) = info.body.as_mut() {
                    body.players.clear();
                }
                Header::Sixup {
                    token: response_token,
                    response_token: token,
                }
                .encode(&mut buf);
                info.encode(&mut buf);
                out.push(Reply {
                    to: from,
                    bytes: buf,
                });
            }
            Frame::Connless(header, payload) => {
                let Ok(message) = Message::decode(payload, false) else {
                    return false;
                };
                match (header, message) {
                    (Header::Extended { extra_token, .. }, Message::GetInfo(GetInfo { token })) => {
                        let token24 =
                            (u32::from(extra_token) << 8 | u32::from(token)) & MAX_EXTENDED_TOKEN;
                        let full = self.full_reply_allowed(now);
                        let (mut main, mut more) = describe(state, &self.config, false)
                            .extended(i32::try_from(token24).unwrap_or(-1));
                        if !full {
                            main.players.clear();
                            more.clear();
                        }
                        Header::LEGACY.encode(&mut buf);
                        main.encode(&mut buf);
                        out.push(Reply {
                            to: from,
                            bytes: buf,
                        });
                        for m in more {
                            let mut buf = Vec::new();
                            Header::LEGACY.encode(&mut buf);
                            m.encode(&mut buf);
                            out.push(Reply {
                                to: from,
                                bytes: buf,
                            });
                        }
                    }
                    (Header::Legacy(_), Message::GetInfo(GetInfo { token })) => {
                        let full = self.full_reply_allowed(now);
                        let mut info = describe(state, &self.config, false).vanilla(token);
                        if !full {
                            info.players.clear();
                        }
                        Header::LEGACY.encode(&mut buf);
                        info.encode(&mut buf);
                        out.push(Reply {
                            to: from,
                            bytes: buf,
                        });
                    }
                    (_, Message::GetInfo64(GetInfo { token })) if self.config.answer_legacy64 => {
                        // `xe` + `fstd` is plain legacy: the extra token is ignored (§7.1).
                        let full = self.full_reply_allowed(now);
                        let mut packets = describe(state, &self.config, false).legacy64(token);
                        if !full {
                            packets.truncate(1);
                            for p in &mut packets {
                                p.info.players.clear();
                            }
                        }
                        for p in packets {
                            let mut buf = Vec::new();
                            Header::LEGACY.encode(&mut buf);
                            p.encode(&mut buf);
                            out.push(Reply {
                                to: from,
                                bytes: buf,
                            });
                        }
                    }
                    _ => return false,
                }
            }
        }
        true
    }
}

impl Responder for TeeworldsResponder {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        self.answer(now, from, datagram, state, out)
    }
}

/// A string for the wire: NUL bytes cannot be sent, so they are dropped.
fn tw(s: &str) -> TwStr {
    TwStr::new(s.bytes().filter(|&b| b != 0).collect::<Vec<u8>>()).unwrap_or_default()
}

fn client(p: &PlayerState) -> Client {
    Client {
        name: tw(&p.name),
        clan: tw(&p.clan),
        country: p.country,
        score: i32::try_from(p.score).unwrap_or(if p.score < 0 { i32::MIN } else { i32::MAX }),
        is_player: !p.spectator,
        is_bot: p.bot,
    }
}

/// Map a [`ServerState`] into the description the reply builders take. The first
/// [`MAX_CLIENTS`] players are kept; max_clients is at least the number of clients.
#[must_use]
pub fn describe(state: &ServerState, config: &ResponderConfig, sixup: bool) -> ServerDescription {
    let version = match (&config.version_07, sixup) {
        (Some(v), true) => v.as_str(),
        _ if state.version.is_empty() => DEFAULT_VERSION,
        _ => state.version.as_str(),
    };
    let clients: Vec<Client> = state.players.iter().take(MAX_CLIENTS).map(client).collect();
    let slots = i32::try_from(state.max_players).unwrap_or(i32::MAX);
    let client_slots = config
        .max_clients
        .map_or(slots, |n| i32::try_from(n).unwrap_or(i32::MAX));
    let connected = i32::try_from(clients.len()).unwrap_or(i32::MAX);
    let mut d = ServerDescription::default();
    d.version = tw(version);
    d.name = tw(&state.name);
    d.hostname = tw(&config.hostname);
    d.map = tw(&state.map);
    d.map_crc = config.map_crc;
    d.map_size = config.map_size;
    d.game_type = tw(&state.game_type);
    d.password = state.password;
    d.skill_level = config.skill_level;
    d.time_score = config.time_score;
    d.max_players = slots;
    d.max_clients = client_slots.max(slots).max(connected);
    // At most MAX_CLIENTS by construction, so this cannot fail.
    let _ = d.set_clients(clients);
    d
}

#[cfg(test)]
mod tests;
