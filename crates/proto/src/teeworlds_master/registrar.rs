//! The two Teeworlds-family registrars behind [`crate::respond::Registrar`]: the 0.7 UDP
//! master ([`TeeworldsUdpRegistrar`], spec §2.5) and DDNet's HTTP register
//! ([`DdnetHttpRegistrar`], spec §3).
//!
//! ```text
//! UDP 0.7:  04 00 00 ff×4 05 <own>+pad  ->  cou2 … bea2 every 15 s;  fw?? (any port) -> fw!!
//! HTTP:     POST <url>  Address / Secret / [Connless-Token] / Challenge-Secret /
//!                       [Challenge-Token] / Info-Serial  [+ JSON body]
//!           <- need_challenge ; UDP "chal" <uuid:stream> <token> on the game port
//!           POST again with Challenge-Token <- success ; every 15 s ; Action: delete at the end
//! ```
//!
//! Both share the game server's socket: the driver offers each datagram to the registrar
//! first, and only the master's datagrams (token replies to our token, `siz2`, `fw??`,
//! `fwok`, `fwer`, DDNet `chal` with our challenge secret) are taken.
//!
//! Not here: DNS, HTTP itself (the driver runs the [`HttpRequest`]s), randomness (tokens,
//! `Secret` and the challenge UUID come from the caller), the clock.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::MAX_REGISTER_BODY;
use super::http::{
    Action, AddressScheme, ChallengeSecret, ClientInfo, MapInfo, RegisterInfo, RegisterRequest,
    RegisterResponse, ServerAddress,
};
use super::packet::{Framing, Message, Packet, Token};
use super::register::{RegisterClient, RegisterEvent};
use crate::query::Transmit;
use crate::respond::{HttpRequest, Registrar, RegistrarEvent, ServerState};
use crate::teeworlds::respond::DEFAULT_VERSION;

/// Interval between register POSTs of one stream (spec §3.5).
pub const HTTP_REGISTER_INTERVAL: Duration = Duration::from_secs(15);
/// Info changes are announced at once, but at most this often per stream.
pub const HTTP_MIN_CHANGE_INTERVAL: Duration = Duration::from_secs(1);
/// DDNet 16.4's default register URL.
pub const DEFAULT_REGISTER_URL: &str = "https://master1.ddnet.org/ddnet/15/register";
/// The HTTP method of every register request, deletes included.
const METHOD_POST: &str = "POST";
/// The content type of a body.
const CONTENT_TYPE: (&str, &str) = ("Content-Type", "application/json");

// ---------------------------------------------------------------------------------------------
// UDP

/// The 0.7 UDP registration (teeworlds 0.7.5), a [`Registrar`] around [`RegisterClient`].
///
/// Takes token replies addressed to its token and the master messages (`siz2`, `fw??`,
/// `fwok`, `fwer`) in 0.7 framing addressed to it; the firewall check is answered from any
/// port of a master's IP (the checker sends from 8284). teeworlds 0.7.5 does not tell its
/// master when it stops, so [`Registrar::shutdown`] only stops the heartbeats.
#[derive(Debug)]
pub struct TeeworldsUdpRegistrar {
    client: RegisterClient,
    own_token: Token,
    stopped: bool,
    events: VecDeque<RegistrarEvent>,
}

impl TeeworldsUdpRegistrar {
    /// Register game port `port` with `masters` (resolved, port 8283 for the stock ones),
    /// using `own_token` (random, not `ff ff ff ff`) as the 0.7 token; starts at `now`.
    #[must_use]
    pub fn new(masters: &[SocketAddr], port: u16, own_token: Token, now: Instant) -> Self {
        Self {
            client: RegisterClient::new(masters, port, own_token, now),
            own_token,
            stopped: false,
            events: VecDeque::new(),
        }
    }

    /// The wrapped machine (for its finer [`RegisterEvent`]s use [`Self::poll_register_event`]).
    #[must_use]
    pub fn client(&self) -> &RegisterClient {
        &self.client
    }

    /// True once the chosen master answered `fwok` in the current cycle.
    #[must_use]
    pub fn is_registered(&self) -> bool {
        self.client.is_registered()
    }

    /// The next detailed event of the wrapped machine; the [`RegistrarEvent`]s of
    /// [`Registrar::poll_event`] are derived from these, so use one or the other.
    pub fn poll_register_event(&mut self) -> Option<RegisterEvent> {
        self.client.poll_event()
    }

    fn is_ours(&self, datagram: &[u8]) -> bool {
        match Packet::decode(datagram) {
            Ok(Packet::Token { to, .. }) => to == self.own_token,
            Ok(Packet::Connless {
                framing: Framing::V07 { token, .. },
                message:
                    Message::CountReply { .. }
                    | Message::FirewallCheck
                    | Message::FirewallOk
                    | Message::FirewallError,
            }) => token == self.own_token,
            _ => false,
        }
    }

    fn pump_events(&mut self) {
        while let Some(e) = self.client.poll_event() {
            let mapped = match e {
                RegisterEvent::Registered { master } => RegistrarEvent::Registered {
                    master: master.to_string(),
                },
                RegisterEvent::MasterNotResponding { master } => RegistrarEvent::Failed {
                    master: master.to_string(),
                    reason: "master not responding",
                },
                RegisterEvent::FirewallFailed { master } => RegistrarEvent::Failed {
                    master: master.to_string(),
                    reason: "firewall check failed",
                },
                RegisterEvent::NoMasters => RegistrarEvent::Failed {
                    master: String::new(),
                    reason: "no master servers",
                },
                _ => continue,
            };
            self.events.push_back(mapped);
        }
    }
}

impl Registrar for TeeworldsUdpRegistrar {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        _state: &ServerState,
    ) -> bool {
        if !self.is_ours(datagram) {
            return false;
        }
        if !self.stopped {
            self.client.handle_datagram(now, from, datagram);
            self.pump_events();
        }
        true
    }

    fn handle_timeout(&mut self, now: Instant, _state: &ServerState) {
        if !self.stopped {
            self.client.handle_timeout(now);
            self.pump_events();
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.stopped {
            return None;
        }
        self.client.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            None
        } else {
            self.client.poll_timeout()
        }
    }

    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        self.events.pop_front()
    }

    fn shutdown(&mut self, _now: Instant) {
        if !self.stopped {
            self.stopped = true;
            self.events.push_back(RegistrarEvent::Unregistered {
                master: String::new(),
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// One registration stream of a DDNet server: protocol and address family (spec §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// `tw0.6/ipv4`
    Tw06Ipv4,
    /// `tw0.6/ipv6`
    Tw06Ipv6,
    /// `tw0.7/ipv4`
    Tw07Ipv4,
    /// `tw0.7/ipv6`
    Tw07Ipv6,
}

impl Stream {
    /// The name after the colon of `Challenge-Secret`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tw06Ipv4 => "tw0.6/ipv4",
            Self::Tw06Ipv6 => "tw0.6/ipv6",
            Self::Tw07Ipv4 => "tw0.7/ipv4",
            Self::Tw07Ipv6 => "tw0.7/ipv6",
        }
    }

    /// True for the 0.7 streams (they carry `Connless-Token`).
    #[must_use]
    pub const fn is_sixup(self) -> bool {
        matches!(self, Self::Tw07Ipv4 | Self::Tw07Ipv6)
    }

    fn scheme(self) -> AddressScheme {
        if self.is_sixup() {
            AddressScheme::Tw07
        } else {
            AddressScheme::Tw06
        }
    }
}

/// What a [`DdnetHttpRegistrar`] announces beyond the [`ServerState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdnetRegisterConfig {
    /// The register URL (DDNet: `sv_register_url`).
    pub url: String,
    /// The game port announced in `Address`.
    pub port: u16,
    /// `Secret`: a random UUID per server process.
    pub secret: String,
    /// The random UUID of `Challenge-Secret` (the stream name is appended).
    pub challenge_uuid: String,
    /// The streams to run, in order (DDNet with `sv_register ipv4`: 0.6 then 0.7).
    pub streams: Vec<Stream>,
    /// The 0.7 token announced in `Connless-Token`; the master addresses the 0.7 challenge
    /// with it.
    pub connless_token: Token,
    /// `map.sha256`, lower-case hex.
    pub map_sha256: Option<String>,
    /// `map.size` in bytes.
    pub map_size: Option<i64>,
    /// Client slots when above [`ServerState::max_players`].
    pub max_clients: Option<u32>,
}

impl DdnetRegisterConfig {
    /// The streams DDNet runs with `sv_register ipv4`: 0.6 and 0.7 over IPv4.
    #[must_use]
    pub fn ipv4(url: &str, port: u16, secret: &str, challenge_uuid: &str, token: Token) -> Self {
        Self {
            url: url.to_owned(),
            port,
            secret: secret.to_owned(),
            challenge_uuid: challenge_uuid.to_owned(),
            streams: vec![Stream::Tw06Ipv4, Stream::Tw07Ipv4],
            connless_token: token,
            map_sha256: None,
            map_size: None,
            max_clients: None,
        }
    }
}

#[derive(Debug, Clone)]
struct StreamState {
    stream: Stream,
    /// The token of the last challenge for this stream.
    challenge_token: Option<String>,
    /// The last answer was `need_challenge` and no newer challenge has come yet.
    awaiting_challenge: bool,
    next_post: Instant,
    last_post: Option<Instant>,
    registered: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InFlight {
    stream: usize,
    serial: i64,
    delete: bool,
    challenge_token_sent: bool,
}

/// DDNet's HTTP registration (spec §3), one [`Registrar`] for all streams of one server.
///
/// Requests go out one at a time ([`Registrar::handle_http_response`] answers the last one),
/// the most overdue stream first. A stream posts at once, then every
/// [`HTTP_REGISTER_INTERVAL`]; at once (at most every [`HTTP_MIN_CHANGE_INTERVAL`]) when the
/// info changes; at once after a challenge that follows `need_challenge`, and after
/// `need_info`. The JSON body goes with a request while no request at the current
/// `Info-Serial` has succeeded (any stream: the master keeps the info per `Secret`).
#[derive(Debug)]
pub struct DdnetHttpRegistrar {
    config: DdnetRegisterConfig,
    streams: Vec<StreamState>,
    info: RegisterInfo,
    serial: i64,
    /// The highest serial a successful request carried or the master already had.
    latest_success: Option<i64>,
    in_flight: Option<InFlight>,
    shutting_down: bool,
    unregistered_sent: bool,
    events: VecDeque<RegistrarEvent>,
}

impl DdnetHttpRegistrar {
    /// Start registering `state` at `now` (the first POST is due at once).
    #[must_use]
    pub fn new(config: DdnetRegisterConfig, state: &ServerState, now: Instant) -> Self {
        let info = register_info(state, &config);
        let streams = config
            .streams
            .iter()
            .map(|&stream| StreamState {
                stream,
                challenge_token: None,
                awaiting_challenge: false,
                next_post: now,
                last_post: None,
                registered: false,
            })
            .collect();
        Self {
            config,
            streams,
            info,
            serial: 0,
            latest_success: None,
            in_flight: None,
            shutting_down: false,
            unregistered_sent: false,
            events: VecDeque::new(),
        }
    }

    /// The current `Info-Serial`.
    #[must_use]
    pub fn info_serial(&self) -> i64 {
        self.serial
    }

    /// The info the next body carries.
    #[must_use]
    pub fn info(&self) -> &RegisterInfo {
        &self.info
    }

    fn master_name(&self, stream: Stream) -> String {
        format!("{} {}", self.config.url, stream.name())
    }

    fn address(&self, stream: Stream) -> ServerAddress {
        ServerAddress {
            scheme: stream.scheme(),
            host: ServerAddress::CONNECTING_HOST.to_owned(),
            port: self.config.port,
        }
    }

    fn request(&self, s: &StreamState, delete: bool) -> (RegisterRequest, bool) {
        let stream = s.stream;
        if delete {
            let r = RegisterRequest {
                action: Action::Delete,
                address: self.address(stream),
                secret: self.config.secret.clone(),
                connless_token: None,
                challenge_secret: None,
                challenge_token: None,
                info_serial: None,
            };
            return (r, false);
        }
        let r = RegisterRequest {
            action: Action::Register,
            address: self.address(stream),
            secret: self.config.secret.clone(),
            connless_token: stream.is_sixup().then_some(self.config.connless_token),
            challenge_secret: Some(ChallengeSecret(format!(
                "{}:{}",
                self.config.challenge_uuid,
                stream.name()
            ))),
            challenge_token: s.challenge_token.clone(),
            info_serial: Some(self.serial),
        };
        let body = self.latest_success.is_none_or(|n| n < self.serial);
        (r, body)
    }

    fn due_stream(&self, now: Instant) -> Option<usize> {
        if self.shutting_down {
            // Deletes go out in stream order, and only for streams the master last answered
            // `success` (DDNet's `SendDeleteIfRegistered`).
            return self.streams.iter().position(|s| s.registered);
        }
        self.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.next_post <= now)
            .min_by_key(|(i, s)| (s.next_post, *i))
            .map(|(i, _)| i)
    }

    fn on_challenge(&mut self, now: Instant, secret: &[u8], token: &[u8], sixup: bool) -> bool {
        let Ok(secret) = std::str::from_utf8(secret) else {
            return false;
        };
        let secret = ChallengeSecret(secret.to_owned());
        if secret.uuid() != self.config.challenge_uuid {
            return false;
        }
        let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| Some(s.stream.name()) == secret.stream())
        else {
            return false;
        };
        if s.stream.is_sixup() != sixup {
            return false;
        }
        s.challenge_token = Some(String::from_utf8_lossy(token).into_owned());
        if s.awaiting_challenge {
            s.awaiting_challenge = false;
            s.next_post = now;
        }
        true
    }
}

/// The register body DDNet would send for `state` (spec §3.1). A master refuses bodies over
/// [`MAX_REGISTER_BODY`] (DDNet's answers 413), so with very many clients only as many as
/// fit are listed (`max_clients` still counts them all).
#[must_use]
pub fn register_info(state: &ServerState, config: &DdnetRegisterConfig) -> RegisterInfo {
    let mut info = full_register_info(state, config);
    let mut body = Vec::new();
    info.encode(&mut body);
    if body.len() <= MAX_REGISTER_BODY {
        return info;
    }
    // The largest client count that fits, by bisection (the body grows with each client).
    let (mut fits, mut too_many) = (0, info.clients.len());
    let all = std::mem::take(&mut info.clients);
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        info.clients = all.get(..mid).unwrap_or_default().to_vec();
        body.clear();
        info.encode(&mut body);
        if body.len() <= MAX_REGISTER_BODY {
            fits = mid;
        } else {
            too_many = mid;
        }
    }
    info.clients = all.get(..fits).unwrap_or_default().to_vec();
    info
}

fn full_register_info(state: &ServerState, config: &DdnetRegisterConfig) -> RegisterInfo {
    let clients: Vec<ClientInfo> = state
        .players
        .iter()
        .map(|p| ClientInfo {
            name: p.name.clone(),
            clan: p.clan.clone(),
            country: p.country.into(),
            score: p.score,
            is_player: !p.spectator,
            extra: serde_json::Map::new(),
        })
        .collect();
    let max_players = i64::from(state.max_players);
    let max_clients = config
        .max_clients
        .map_or(max_players, i64::from)
        .max(max_players)
        .max(i64::try_from(clients.len()).unwrap_or(i64::MAX));
    RegisterInfo {
        max_clients,
        max_players,
        passworded: state.password,
        game_type: state.game_type.clone(),
        name: state.name.clone(),
        map: MapInfo {
            name: state.map.clone(),
            sha256: config.map_sha256.clone(),
            size: config.map_size,
            extra: serde_json::Map::new(),
        },
        // The responder's default too, so browsers and the master see the same version.
        version: if state.version.is_empty() {
            DEFAULT_VERSION.to_owned()
        } else {
            state.version.clone()
        },
        clients,
        extra: serde_json::Map::new(),
    }
}

impl Registrar for DdnetHttpRegistrar {
    fn handle_datagram(
        &mut self,
        now: Instant,
        _from: SocketAddr,
        datagram: &[u8],
        _state: &ServerState,
    ) -> bool {
        // The challenge may come from any address and port (spec §3.3); the secret proves it.
        let Ok(Packet::Connless {
            framing,
            message: Message::Challenge(c),
        }) = Packet::decode(datagram)
        else {
            return false;
        };
        let sixup = match framing {
            Framing::V06(_) => false,
            Framing::V07 { token, .. } if token == self.config.connless_token => true,
            Framing::V07 { .. } => return false,
        };
        self.on_challenge(now, c.secret(), c.token(), sixup)
    }

    fn handle_timeout(&mut self, _now: Instant, _state: &ServerState) {
        // Nothing to do: due streams are picked up by `poll_http`.
    }

    fn handle_state_change(&mut self, now: Instant, state: &ServerState) {
        let info = register_info(state, &self.config);
        if info == self.info {
            return;
        }
        self.info = info;
        self.serial = self.serial.saturating_add(1);
        for s in &mut self.streams {
            let earliest = s.last_post.map_or(now, |t| t + HTTP_MIN_CHANGE_INTERVAL);
            s.next_post = s.next_post.min(earliest.max(now));
        }
    }

    fn poll_transmit(&mut self, _now: Instant, _buf: &mut Vec<u8>) -> Option<Transmit> {
        None
    }

    fn poll_http(&mut self, now: Instant) -> Option<HttpRequest> {
        if self.in_flight.is_some() {
            return None;
        }
        let i = self.due_stream(now)?;
        let s = self.streams.get(i)?;
        let delete = self.shutting_down;
        let (request, body) = self.request(s, delete);
        let mut headers = request.to_headers();
        let mut bytes = Vec::new();
        if body {
            self.info.encode(&mut bytes);
            headers.push((CONTENT_TYPE.0.to_owned(), CONTENT_TYPE.1.to_owned()));
        }
        self.in_flight = Some(InFlight {
            stream: i,
            serial: self.serial,
            delete,
            challenge_token_sent: request.challenge_token.is_some(),
        });
        if let Some(s) = self.streams.get_mut(i) {
            s.last_post = Some(now);
            s.next_post = now + HTTP_REGISTER_INTERVAL;
        }
        Some(HttpRequest {
            method: METHOD_POST,
            url: self.config.url.clone(),
            headers,
            body: bytes,
        })
    }

    fn handle_http_response(&mut self, now: Instant, response: Option<(u16, &[u8])>) {
        let Some(sent) = self.in_flight.take() else {
            return;
        };
        let Some(stream) = self.streams.get(sent.stream).map(|s| s.stream) else {
            return;
        };
        let master = self.master_name(stream);
        if sent.delete {
            if let Some(s) = self.streams.get_mut(sent.stream) {
                s.registered = false;
            }
            if !self.streams.iter().any(|s| s.registered) && !self.unregistered_sent {
                self.unregistered_sent = true;
                self.events.push_back(RegistrarEvent::Unregistered {
                    master: self.config.url.clone(),
                });
            }
            return;
        }
        let parsed = match response {
            None => Err("request failed"),
            Some((200, body)) => RegisterResponse::decode(body).map_err(|_| "bad response"),
            Some(_) => Err("http error"),
        };
        let Some(s) = self.streams.get_mut(sent.stream) else {
            return;
        };
        match parsed {
            Ok(RegisterResponse::Success) => {
                self.latest_success = Some(
                    self.latest_success
                        .map_or(sent.serial, |n| n.max(sent.serial)),
                );
                if !s.registered {
                    s.registered = true;
                    self.events.push_back(RegistrarEvent::Registered { master });
                }
            }
            Ok(RegisterResponse::NeedChallenge) => {
                // A challenge that overtook this answer is used at once.
                if s.challenge_token.is_some() && !sent.challenge_token_sent {
                    s.next_post = now;
                } else {
                    s.awaiting_challenge = true;
                }
            }
            Ok(RegisterResponse::NeedInfo) => {
                self.latest_success = None;
                s.next_post = now;
            }
            Ok(RegisterResponse::Error { .. } | RegisterResponse::Unknown) => {
                s.registered = false;
                self.events.push_back(RegistrarEvent::Failed {
                    master,
                    reason: "refused",
                });
            }
            Err(reason) => {
                s.registered = false;
                self.events
                    .push_back(RegistrarEvent::Failed { master, reason });
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.in_flight.is_some() || self.shutting_down {
            return None;
        }
        self.streams.iter().map(|s| s.next_post).min()
    }

    fn poll_event(&mut self) -> Option<RegistrarEvent> {
        self.events.pop_front()
    }

    fn shutdown(&mut self, _now: Instant) {
        self.shutting_down = true;
    }

    fn goodbye_pending(&self) -> bool {
        self.shutting_down
            && (self.in_flight.is_some() || self.streams.iter().any(|s| s.registered))
    }
}

#[cfg(test)]
mod tests;
