//! The GameAgent master face (UDP 9005) as a pure state machine: spec §8.3, rules 1–11.
//!
//! ```text
//! 65 "e"                 -> 73 { a.b.c.d port:u16le }*  verified servers, stable order, 170 per datagram
//! 71 "q" from (A, P)     -> 01 c:i32le                  pending record (A, P), fresh challenge
//! "0;challenge;<c>;…"    -> verify / refresh / re-challenge / drop (rule 4)
//! 75 "u"                 -> counted when (A, P) is verified, otherwise dropped
//! ```
//!
//! Records are keyed by the source (A, P) of the server's query socket; the listed game
//! address is (A, P − 1). Feed datagrams to [`GameAgentMaster::handle_datagram`], call
//! [`GameAgentMaster::handle_timeout`] when [`GameAgentMaster::poll_timeout`] passes, and after
//! either drain [`GameAgentMaster::poll_transmit`] (datagrams to send from the master socket)
//! and [`GameAgentMaster::poll_event`] (changes to mirror into the registry).
//!
//! One face serves every GameAgent listener of the daemon (rule 2: registrations from all of
//! them share one table); a per-product listener passes its [`ListScope`] with each datagram.
//!
//! This module does **not** open sockets, read the clock, draw random numbers (challenges come
//! from the closure passed to [`GameAgentMaster::new`]) or log.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::MAX_DATAGRAM;
use super::packet::{Challenge, Heartbeat, HeartbeatFields, MasterPacket, encode_list};
use crate::limit::{BucketConfig, ByteBudget, SourceLimiter};

/// Settings of a [`GameAgentMaster`]; [`Default`] is the spec's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MasterConfig {
    /// A verified server is removed this long after its last valid heartbeat (rule 7).
    pub expiry: Duration,
    /// A pending record lives this long after its last challenge (rule 5).
    pub pending_lifetime: Duration,
    /// An echo-0 heartbeat from a pending record re-sends the challenge once the last one is
    /// this old (rule 3.3).
    pub challenge_resend_after: Duration,
    /// Verified servers are challenged again this often (rule 6).
    pub reverify_interval: Duration,
    /// Wait this long for the answer to a re-verification challenge before re-sending (rule 6).
    pub reverify_timeout: Duration,
    /// Re-verification challenges sent in all before the server is de-listed (rule 6).
    pub reverify_tries: u32,
    /// Expiry and re-verification are swept this often (rule 7: at least every 10 s).
    pub sweep_interval: Duration,
    /// List requests per source (rule 10).
    pub list_requests: BucketConfig,
    /// Challenges per source address (rule 10).
    pub challenges: BucketConfig,
    /// Records (pending and verified) per IPv4 address (rule 10).
    pub max_servers_per_address: usize,
    /// Pending records in total (rule 10).
    pub max_pending: usize,
    /// Bytes per second for everything the face sends (rule 10).
    pub egress_bytes_per_second: u64,
    /// Sources tracked by each per-source bucket table.
    pub max_tracked_sources: usize,
    /// A port hop is reported at most once per address per this interval (rule 4.4).
    pub port_hop_report_interval: Duration,
}

impl Default for MasterConfig {
    fn default() -> Self {
        Self {
            expiry: Duration::from_secs(300),
            pending_lifetime: Duration::from_secs(30),
            challenge_resend_after: Duration::from_secs(5),
            reverify_interval: Duration::from_secs(600),
            reverify_timeout: Duration::from_secs(10),
            reverify_tries: 3,
            sweep_interval: Duration::from_secs(1),
            list_requests: BucketConfig::one_every(2, Duration::from_secs(5)),
            challenges: BucketConfig::one_every(4, Duration::from_secs(10)),
            max_servers_per_address: 64,
            max_pending: 10_000,
            egress_bytes_per_second: 1 << 20,
            max_tracked_sources: 65_536,
            port_hop_report_interval: Duration::from_secs(3600),
        }
    }
}

/// What the face counted; read them for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterCounters {
    /// Datagrams handled.
    pub datagrams: u64,
    /// Empty, oversized, undecodable or unknown datagrams, and heartbeats without a parsable
    /// `challenge` (rule 10).
    pub malformed: u64,
    /// Registration datagrams (`q`, `0`, `u`) from IPv6 sources (§8.1.2).
    pub ipv6_refused: u64,
    /// Datagrams from source port 1 (game port 0) or 0 (rule 3).
    pub port_refused: u64,
    /// List requests answered.
    pub lists_sent: u64,
    /// List requests dropped by the per-source bucket.
    pub lists_rate_limited: u64,
    /// Datagrams (lists or challenges) dropped whole by the egress byte cap.
    pub over_budget: u64,
    /// `q` datagrams.
    pub joins: u64,
    /// Challenges sent (join, re-send, re-verification).
    pub challenges_sent: u64,
    /// Challenges not sent because the address's challenge bucket was empty.
    pub challenges_rate_limited: u64,
    /// New records refused by the per-address cap.
    pub address_cap_refused: u64,
    /// New records refused by the pending cap.
    pub pending_cap_refused: u64,
    /// Records that became verified (including re-verified after a de-listing).
    pub verified: u64,
    /// Valid heartbeats from verified records (echo 0 or the current challenge).
    pub heartbeats: u64,
    /// Echo-0 heartbeats from pending records that changed nothing.
    pub pending_heartbeats_ignored: u64,
    /// Non-zero echoes matching no challenge of the address (rule 4.4, second case).
    pub bad_echoes: u64,
    /// Answers from a port other than the one challenged (rule 4.4, first case).
    pub port_hops: u64,
    /// `u` from verified records.
    pub state_changes: u64,
    /// `u` from pending or unknown records (rule 8).
    pub state_changes_ignored: u64,
    /// Verified records de-listed after failed re-verification.
    pub delisted: u64,
    /// Verified records removed by expiry.
    pub expired: u64,
    /// Pending records removed 30 s after their last challenge.
    pub pending_expired: u64,
}

/// A change to mirror into the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterEvent {
    /// The server answered its challenge and is listed.
    Verified {
        /// Listed address (A, P − 1).
        game: SocketAddrV4,
        /// Query and registration address (A, P).
        query: SocketAddrV4,
    },
    /// Re-verification failed (or the server sent `q` again): no longer listed; the record is
    /// pending again.
    Delisted {
        /// Listed address (A, P − 1).
        game: SocketAddrV4,
        /// Query and registration address (A, P).
        query: SocketAddrV4,
    },
    /// No valid heartbeat for [`MasterConfig::expiry`]: removed.
    Expired {
        /// Listed address (A, P − 1).
        game: SocketAddrV4,
        /// Query and registration address (A, P).
        query: SocketAddrV4,
    },
    /// A verified server sent `u` (a player was accepted); the daemon may poll it (§9.2.1).
    StateChanged {
        /// Listed address (A, P − 1).
        game: SocketAddrV4,
        /// Query and registration address (A, P).
        query: SocketAddrV4,
    },
    /// A server answered a challenge from a port it was not challenged on (rule 4.4); reported
    /// at most once per address per [`MasterConfig::port_hop_report_interval`], for the log.
    PortHop {
        /// The address.
        address: Ipv4Addr,
        /// The port the challenge went to.
        challenged_port: u16,
        /// The port the answer came from.
        answered_from: u16,
    },
}

/// Which servers a list request is answered with (rule 1 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListScope<'a> {
    /// Every verified server, whatever its `product` (the default listener, rule 1).
    #[default]
    All,
    /// Only servers whose `product` equals one of these, ignoring ASCII case (an extra
    /// per-product listener, rule 2).
    Products(&'a [&'a [u8]]),
}

impl ListScope<'_> {
    fn includes(&self, product: &[u8]) -> bool {
        match self {
            Self::All => true,
            Self::Products(set) => set.iter().any(|p| p.eq_ignore_ascii_case(product)),
        }
    }
}

/// One datagram the face wants sent from its socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterTransmit {
    /// Destination.
    pub to: SocketAddr,
    /// The datagram.
    pub bytes: Vec<u8>,
}

/// A listed server, as [`GameAgentMaster::servers`] yields it.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedServer<'a> {
    /// Listed address (A, P − 1).
    pub game: SocketAddrV4,
    /// Query and registration address (A, P).
    pub query: SocketAddrV4,
    /// The fields of the last valid heartbeat (`challenge` is its echo); strings are raw
    /// Windows-1252 bytes, decode them with [`super::decode_text`].
    pub heartbeat: &'a HeartbeatFields,
    /// When the record was (last) verified.
    pub verified_at: Instant,
    /// When the last valid heartbeat arrived.
    pub last_heartbeat: Instant,
}

#[derive(Debug)]
struct Record {
    verified: bool,
    challenge: Challenge,
    challenge_at: Instant,
    answered: bool,
    last_heartbeat: Instant,
    fields: HeartbeatFields,
    order: u64,
    verified_at: Instant,
    reverify_tries: Option<u32>,
    next_reverify: Instant,
}

/// The GameAgent master face; see the module docs.
pub struct GameAgentMaster {
    config: MasterConfig,
    challenges: Box<dyn FnMut() -> u32 + Send>,
    records: HashMap<SocketAddrV4, Record>,
    ports: HashMap<Ipv4Addr, BTreeSet<u16>>,
    order: BTreeMap<u64, SocketAddrV4>,
    next_order: u64,
    pending: usize,
    list_limiter: SourceLimiter,
    challenge_limiter: SourceLimiter,
    egress: ByteBudget,
    port_hop_reported: HashMap<Ipv4Addr, Instant>,
    next_sweep: Option<Instant>,
    transmits: VecDeque<MasterTransmit>,
    events: VecDeque<MasterEvent>,
    counters: MasterCounters,
}

impl fmt::Debug for GameAgentMaster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GameAgentMaster")
            .field("config", &self.config)
            .field("records", &self.records.len())
            .field("pending", &self.pending)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl GameAgentMaster {
    /// A face with `config`; `challenges` returns fresh random numbers (only the low 31 bits
    /// are used, as the reference master draws from 0..2^31 − 1; a zero draw becomes 1,
    /// since echo 0 means "periodic heartbeat").
    #[must_use]
    pub fn new(config: MasterConfig, challenges: impl FnMut() -> u32 + Send + 'static) -> Self {
        Self {
            config,
            challenges: Box::new(challenges),
            records: HashMap::new(),
            ports: HashMap::new(),
            order: BTreeMap::new(),
            next_order: 0,
            pending: 0,
            list_limiter: SourceLimiter::new(config.list_requests, config.max_tracked_sources),
            challenge_limiter: SourceLimiter::new(config.challenges, config.max_tracked_sources),
            egress: ByteBudget::new(config.egress_bytes_per_second),
            port_hop_reported: HashMap::new(),
            next_sweep: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: MasterCounters::default(),
        }
    }

    /// Handle one datagram received from `from` at `now` on the default listener. Never
    /// panics; bad input is counted.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.handle_datagram_scoped(now, from, datagram, ListScope::All);
    }

    /// [`Self::handle_datagram`] for a listener whose list replies are limited to `scope`;
    /// registrations are handled the same on every listener.
    pub fn handle_datagram_scoped(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        scope: ListScope<'_>,
    ) {
        self.counters.datagrams += 1;
        if datagram.len() > MAX_DATAGRAM {
            self.counters.malformed += 1;
            return;
        }
        let Ok(packet) = MasterPacket::decode(datagram) else {
            self.counters.malformed += 1;
            return;
        };
        match packet {
            MasterPacket::ListRequest => self.list(now, from, scope),
            MasterPacket::Join => {
                if let Some(a) = self.registration_source(from) {
                    self.counters.joins += 1;
                    self.join(now, a);
                }
            }
            MasterPacket::Heartbeat(h) => {
                let Some(echo) = h.challenge() else {
                    self.counters.malformed += 1;
                    return;
                };
                if let Some(a) = self.registration_source(from) {
                    self.heartbeat(now, a, echo, &h);
                }
            }
            MasterPacket::StateChanged => {
                if let Some(a) = self.registration_source(from) {
                    match self.records.get(&a) {
                        Some(r) if r.verified => {
                            self.counters.state_changes += 1;
                            self.events.push_back(MasterEvent::StateChanged {
                                game: game_of(a),
                                query: a,
                            });
                        }
                        _ => self.counters.state_changes_ignored += 1,
                    }
                }
            }
            MasterPacket::ListReply(_) | MasterPacket::Challenge(_) | MasterPacket::Unknown(_) => {
                self.counters.malformed += 1;
            }
        }
    }

    /// Expire, re-verify and forget what is due at `now`. Call when
    /// [`Self::poll_timeout`] has passed (calling it earlier is harmless).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut expired = Vec::new();
        let mut delisted = Vec::new();
        let mut challenge = Vec::new();
        for (&a, r) in &mut self.records {
            if r.verified {
                if now.saturating_duration_since(r.last_heartbeat) >= self.config.expiry {
                    expired.push(a);
                    continue;
                }
                match r.reverify_tries {
                    None if now >= r.next_reverify => {
                        r.challenge = Challenge(draw(&mut self.challenges));
                        r.answered = false;
                        r.reverify_tries = Some(1);
                        r.challenge_at = now;
                        challenge.push((a, r.challenge));
                    }
                    Some(k)
                        if now.saturating_duration_since(r.challenge_at)
                            >= self.config.reverify_timeout =>
                    {
                        if k < self.config.reverify_tries {
                            r.reverify_tries = Some(k + 1);
                            r.challenge_at = now;
                            challenge.push((a, r.challenge));
                        } else {
                            delisted.push(a);
                        }
                    }
                    _ => {}
                }
            } else if now.saturating_duration_since(r.challenge_at) >= self.config.pending_lifetime
            {
                expired.push(a);
            }
        }
        for a in expired {
            if let Some(r) = self.remove(a) {
                if r.verified {
                    self.counters.expired += 1;
                    self.events.push_back(MasterEvent::Expired {
                        game: game_of(a),
                        query: a,
                    });
                } else {
                    self.counters.pending_expired += 1;
                }
            }
        }
        for a in delisted {
            self.counters.delisted += 1;
            self.delist(a);
        }
        for (a, c) in challenge {
            // Re-verification is the master's own initiative, bounded by the verified
            // records, so it bypasses the per-address challenge bucket.
            self.send_challenge(now, a, c);
        }
        let keep = self.config.port_hop_report_interval;
        self.port_hop_reported
            .retain(|_, at| now.saturating_duration_since(*at) < keep);
        self.list_limiter.prune(now);
        self.challenge_limiter.prune(now);
        self.next_sweep = (!self.records.is_empty()).then(|| now + self.config.sweep_interval);
    }

    /// When [`Self::handle_timeout`] must next be called; `None` while no record exists.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_sweep
    }

    /// The next datagram to send. Drain after every `handle_*` call.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<MasterTransmit> {
        self.transmits.pop_front()
    }

    /// The next change to mirror into the registry. Drain after every `handle_*` call.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<MasterEvent> {
        self.events.pop_front()
    }

    /// The counters so far.
    #[must_use]
    pub fn counters(&self) -> &MasterCounters {
        &self.counters
    }

    /// Pending records (not listed) right now.
    #[must_use]
    pub fn pending_len(&self) -> usize {
        self.pending
    }

    /// The listed servers, in list order (first verification first).
    pub fn servers(&self) -> impl Iterator<Item = VerifiedServer<'_>> {
        self.order.values().filter_map(|a| {
            let r = self.records.get(a)?;
            Some(VerifiedServer {
                game: game_of(*a),
                query: *a,
                heartbeat: &r.fields,
                verified_at: r.verified_at,
                last_heartbeat: r.last_heartbeat,
            })
        })
    }

    /// The `s` datagrams a list request within `scope` gets right now (rule 9).
    #[must_use]
    pub fn list_datagrams(&self, scope: ListScope<'_>) -> Vec<Vec<u8>> {
        let games: Vec<SocketAddrV4> = self
            .servers()
            .filter(|s| scope.includes(&s.heartbeat.product))
            .map(|s| s.game)
            .collect();
        encode_list(&games)
    }

    fn list(&mut self, now: Instant, from: SocketAddr, scope: ListScope<'_>) {
        if !self.list_limiter.allow(from.ip(), now, 1.0) {
            self.counters.lists_rate_limited += 1;
            return;
        }
        let datagrams = self.list_datagrams(scope);
        let total = datagrams.iter().map(Vec::len).sum();
        if !self.egress.spend(total, now) {
            self.counters.over_budget += 1;
            return;
        }
        self.counters.lists_sent += 1;
        self.transmits.extend(
            datagrams
                .into_iter()
                .map(|bytes| MasterTransmit { to: from, bytes }),
        );
    }

    /// The IPv4 (A, P) of a registration datagram, or `None` (counted) for IPv6 and port 0/1.
    fn registration_source(&mut self, from: SocketAddr) -> Option<SocketAddrV4> {
        let ip = match from.ip() {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(v6) => {
                if let Some(v4) = v6.to_ipv4_mapped() {
                    v4
                } else {
                    self.counters.ipv6_refused += 1;
                    return None;
                }
            }
        };
        if from.port() <= 1 {
            self.counters.port_refused += 1;
            return None;
        }
        Some(SocketAddrV4::new(ip, from.port()))
    }

    /// Rule 3.1 (and 3.3 for an unknown source): create or reset a pending record and
    /// challenge it.
    fn join(&mut self, now: Instant, a: SocketAddrV4) {
        let known = self.records.contains_key(&a);
        if !known && !self.room_for(a) {
            return;
        }
        if !self.challenge_limiter.allow(IpAddr::V4(*a.ip()), now, 1.0) {
            self.counters.challenges_rate_limited += 1;
            return;
        }
        if known {
            self.delist(a);
        } else {
            self.insert_pending(now, a);
        }
        let c = Challenge(draw(&mut self.challenges));
        if let Some(r) = self.records.get_mut(&a) {
            r.challenge = c;
            r.answered = false;
            r.challenge_at = now;
        }
        self.send_challenge(now, a, c);
    }

    fn heartbeat(&mut self, now: Instant, a: SocketAddrV4, echo: i32, h: &Heartbeat) {
        let Some(r) = self.records.get_mut(&a) else {
            if echo == 0 {
                self.join(now, a);
            } else {
                self.foreign_echo(now, a, echo);
            }
            return;
        };
        if echo != 0 && r.challenge.matches_echo(echo) {
            // Rule 4.2: verified (or re-verified), and a valid heartbeat (rule 7).
            r.answered = true;
            r.last_heartbeat = now;
            r.fields = fields_of(h, echo);
            r.reverify_tries = None;
            r.next_reverify = now + self.config.reverify_interval;
            self.counters.heartbeats += 1;
            if !r.verified {
                r.verified = true;
                r.verified_at = now;
                r.order = self.next_order;
                self.order.insert(self.next_order, a);
                self.next_order += 1;
                self.pending -= 1;
                self.counters.verified += 1;
                self.events.push_back(MasterEvent::Verified {
                    game: game_of(a),
                    query: a,
                });
            }
        } else if echo == 0 {
            if r.verified {
                r.last_heartbeat = now;
                r.fields = fields_of(h, 0);
                self.counters.heartbeats += 1;
            } else if now.saturating_duration_since(r.challenge_at)
                >= self.config.challenge_resend_after
            {
                let c = r.challenge;
                if self.challenge_limiter.allow(IpAddr::V4(*a.ip()), now, 1.0) {
                    if let Some(r) = self.records.get_mut(&a) {
                        r.challenge_at = now;
                    }
                    self.send_challenge(now, a, c);
                } else {
                    self.counters.challenges_rate_limited += 1;
                }
            } else {
                self.counters.pending_heartbeats_ignored += 1;
            }
        } else {
            self.foreign_echo(now, a, echo);
        }
    }

    /// Rule 4.4: a non-zero echo that does not answer (A, P)'s challenge.
    fn foreign_echo(&mut self, now: Instant, a: SocketAddrV4, echo: i32) {
        let hopped_from = self.ports.get(a.ip()).and_then(|ports| {
            ports.iter().copied().find(|&p| {
                p != a.port()
                    && self
                        .records
                        .get(&SocketAddrV4::new(*a.ip(), p))
                        .is_some_and(|r| !r.answered && r.challenge.matches_echo(echo))
            })
        });
        let Some(challenged_port) = hopped_from else {
            self.counters.bad_echoes += 1;
            return;
        };
        self.counters.port_hops += 1;
        let report = self.port_hop_reported.get(a.ip()).is_none_or(|at| {
            now.saturating_duration_since(*at) >= self.config.port_hop_report_interval
        });
        if report {
            self.port_hop_reported.insert(*a.ip(), now);
            self.events.push_back(MasterEvent::PortHop {
                address: *a.ip(),
                challenged_port,
                answered_from: a.port(),
            });
        }
    }

    fn room_for(&mut self, a: SocketAddrV4) -> bool {
        let per_address = self.ports.get(a.ip()).map_or(0, BTreeSet::len);
        if per_address >= self.config.max_servers_per_address {
            self.counters.address_cap_refused += 1;
            return false;
        }
        if self.pending >= self.config.max_pending {
            self.counters.pending_cap_refused += 1;
            return false;
        }
        true
    }

    fn insert_pending(&mut self, now: Instant, a: SocketAddrV4) {
        self.records.insert(
            a,
            Record {
                verified: false,
                challenge: Challenge(0),
                challenge_at: now,
                answered: false,
                last_heartbeat: now,
                fields: HeartbeatFields::default(),
                order: 0,
                verified_at: now,
                reverify_tries: None,
                next_reverify: now,
            },
        );
        self.ports.entry(*a.ip()).or_default().insert(a.port());
        self.pending += 1;
        if self.next_sweep.is_none() {
            self.next_sweep = Some(now + self.config.sweep_interval);
        }
    }

    /// Back to pending, with a `Delisted` event if it was listed.
    fn delist(&mut self, a: SocketAddrV4) {
        let Some(r) = self.records.get_mut(&a) else {
            return;
        };
        if !r.verified {
            return;
        }
        r.verified = false;
        r.reverify_tries = None;
        self.order.remove(&r.order);
        self.pending += 1;
        self.events.push_back(MasterEvent::Delisted {
            game: game_of(a),
            query: a,
        });
    }

    fn remove(&mut self, a: SocketAddrV4) -> Option<Record> {
        let r = self.records.remove(&a)?;
        if r.verified {
            self.order.remove(&r.order);
        } else {
            self.pending -= 1;
        }
        if let Some(ports) = self.ports.get_mut(a.ip()) {
            ports.remove(&a.port());
            if ports.is_empty() {
                self.ports.remove(a.ip());
            }
        }
        Some(r)
    }

    fn send_challenge(&mut self, now: Instant, a: SocketAddrV4, c: Challenge) {
        let mut bytes = Vec::with_capacity(5);
        c.encode(&mut bytes);
        if !self.egress.spend(bytes.len(), now) {
            self.counters.over_budget += 1;
            return;
        }
        self.counters.challenges_sent += 1;
        self.transmits.push_back(MasterTransmit {
            to: SocketAddr::V4(a),
            bytes,
        });
    }
}

/// A fresh challenge in 1..2^31 − 1.
fn draw(rng: &mut Box<dyn FnMut() -> u32 + Send>) -> i32 {
    let v = i32::try_from(rng() & 0x7FFF_FFFF).unwrap_or(1);
    if v == 0 { 1 } else { v }
}

/// (A, P − 1); P ≥ 2 is guaranteed by `registration_source`.
fn game_of(a: SocketAddrV4) -> SocketAddrV4 {
    SocketAddrV4::new(*a.ip(), a.port().saturating_sub(1))
}

/// A heartbeat's fields as the machine stores them, with `echo` as the challenge; numbers
/// read as [`Heartbeat::count`] does.
#[must_use]
pub fn fields_of(h: &Heartbeat, echo: i32) -> HeartbeatFields {
    let text = |key: &str| h.get(key).unwrap_or_default().to_vec();
    HeartbeatFields {
        challenge: echo,
        players: h.count("players"),
        max_players: h.count("maxplayers"),
        level: text("level"),
        gametype: text("gametype"),
        version: text("version"),
        product: text("product"),
    }
}

#[cfg(test)]
mod tests;
