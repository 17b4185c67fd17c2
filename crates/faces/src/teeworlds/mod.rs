//! The Teeworlds faces: the 0.7 UDP master (8283) with its firewall checker (8284), the 0.6
//! UDP list face (8300) and, in [`ddnet`], DDNet's HTTP register with `servers.json`.
//!
//! Spec: `docs/protocols/teeworlds-master.md` (§2 UDP, §3 HTTP, §5 decisions). Codecs:
//! `muster_proto::teeworlds_master`.
//!
//! ```text
//! 0.7 master socket (8283)                    checker socket (8284)
//!   04 00 00 .. 05 <tok> [pad to 520] -> 12-byte token reply (token bound to the source IP)
//!   21 <ours> <theirs> bea2 <port>    -> a check starts (bounded; nothing in the registry yet)
//!                                         fw?? ──────────────> server (1/s, 10 tries, alternating
//!                                                               source addr / announced port)
//!                                         <────────────── fw!!  -> verified (listed), fwok from
//!                                                                  both sockets; else fwer
//!   21 <ours> <theirs> cou2           -> siz2 <count>
//!   21 <ours> <theirs> req2           -> lis2 × ⌈n/75⌉ (≤ 16 datagrams, as the reference)
//! 0.6 list socket (8300)
//!   <6-byte header> req2 / cou2 / coun -> lis2 / siz2 / size; reqt -> nothing (no 0.5 servers)
//! ```
//!
//! Every 0.7 message except the token request must carry the token this master issued to the
//! source IP ([`tokens`]), so 0.7 replies only go to sources that proved they receive at their
//! address. The 0.6 face has no such proof, so its list replies spend the source's byte budget
//! (the UDP runner's, shared by every list face) and every face sends through a global byte
//! budget. Both faces are pure machines ([`Face07`], [`Face06`]) driven by the UDP runner.
//! Malformed, unexpected, unauthenticated and rate-limited input is counted under its
//! [`Drop`] reason and dropped; nothing from the wire can stop a face.
//!
//! Which records each list shows (listed `teeworlds`/`ddnet` records with an IP address,
//! narrowed by face): the 0.7 face lists
//! servers registered through the 0.7 face and DDNet's HTTP register; the 0.6 face lists DDNet
//! HTTP servers (and 0.6 registrations, which Muster does not take yet: no `bea2`/`beat` on 8300).
//!
//! Does not: take heartbeats on the 0.6 face (no 8301 checker yet), answer `reqt` with anything
//! (Muster has no 0.5 `beat` registrations, and the reference answers `reqt` only with those),
//! reload a ban list.

pub mod checker;
pub mod ddnet;
pub mod tokens;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, SourceKey, SourceLimiter};
use muster_proto::teeworlds_master::packet::ListReply;
use muster_proto::teeworlds_master::{
    Framing, ListEntry, MAX_LIST_SERVERS, Message, Packet, Token,
};

use crate::runtime::udp::{Cx, ReplyKind, UdpMachine};
use checker::{Action, Checks, Start};
use muster_core::drops::DropReason;
use muster_core::registry::{Face, GameAddr, Registration, ServerKey, TEEWORLDS_GAMES};
use muster_core::views::Snapshot;
use tokens::Tokens;

/// The game name records of the Teeworlds UDP faces are registered under.
pub const GAME_TEEWORLDS: &str = "teeworlds";

/// Knobs of the Teeworlds UDP faces (0.7 and 0.6), with the spec defaults. Listen addresses are
/// not here: the sockets are passed in.
#[derive(Debug, Clone, PartialEq)]
pub struct TeeworldsSettings {
    /// Heartbeats (`bea2`) per source: burst. Hosts run many servers on one IP, each
    /// heartbeating every 15 s: the bucket grows with the servers the source has listed
    /// (`proven_servers_max`); 0.7 heartbeats cannot be spoofed (they carry the master's token).
    pub heartbeat_burst: u32,
    /// One more heartbeat per source every this long.
    pub heartbeat_refill: Duration,
    /// 0.7 token requests (and count requests) per source: burst. A token reply (12 bytes)
    /// is smaller than its request (520), so this only bounds work.
    pub token_burst: u32,
    /// One more token request per source every this long.
    pub token_refill: Duration,
    /// Sources tracked per bucket at most (memory bound).
    pub max_tracked_sources: usize,
    /// Firewall checks running at once.
    pub max_checks: usize,
    /// Both buckets grow by one budget per server the source has registered, counting this
    /// many at most (0: never; see [`muster_proto::limit`]).
    pub proven_servers_max: u32,
}

impl TeeworldsSettings {
    /// The defaults with the shared `[limits]` section applied.
    #[must_use]
    pub fn from_limits(l: &muster_core::config::LimitsConfig) -> Self {
        Self {
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
            ..Self::default()
        }
    }
}

impl Default for TeeworldsSettings {
    fn default() -> Self {
        Self {
            heartbeat_burst: 64,
            heartbeat_refill: Duration::from_millis(200),
            token_burst: 64,
            token_refill: Duration::from_millis(100),
            max_tracked_sources: 100_000,
            max_checks: 4096,
            proven_servers_max: 1024,
        }
    }
}

fn encode(framing: Framing, message: Message) -> Vec<u8> {
    let p = Packet::Connless { framing, message };
    let mut out = Vec::with_capacity(p.encoded_len());
    p.encode(&mut out);
    out
}

/// The registration of a server listed by a Teeworlds UDP face at `addr`.
#[must_use]
pub fn udp_registration(addr: SocketAddr, face: Face) -> Registration {
    Registration {
        key: ServerKey::new(GAME_TEEWORLDS, GameAddr::Ip(addr)),
        face,
        game_port: Some(addr.port()),
        query_addr: Some(addr),
        query_protocol: Some(Protocol::Teeworlds),
        source: SourceKey::of(addr.ip()),
    }
}

/// The faces whose records the 0.7 list shows.
pub const LISTED_BY_07: [Face; 2] = [Face::Teeworlds07, Face::DdnetHttp];
/// The faces whose records the 0.6 list shows.
pub const LISTED_BY_06: [Face; 2] = [Face::Teeworlds06, Face::DdnetHttp];

/// The game addresses listed through one of `faces`, in the stable list order, each address
/// once (cached per snapshot).
#[must_use]
pub fn list_addresses(view: &Snapshot, faces: &'static [Face]) -> Arc<Vec<SocketAddr>> {
    let name = faces.iter().map(|f| f.name()).collect::<Vec<_>>().join(",");
    view.cached(("teeworlds", name.into()), |s| {
        let mut seen = HashSet::new();
        s.listed()
            .iter()
            .filter(|r| faces.contains(&r.face) && TEEWORLDS_GAMES.contains(&r.key.game.as_str()))
            .filter_map(|r| match r.key.addr {
                GameAddr::Ip(a) => Some(a),
                GameAddr::Host { .. } => None,
            })
            .filter(|a| seen.insert(*a))
            .collect()
    })
}

/// The `lis2` payloads for `addrs`, split as the reference master splits them.
fn list_messages(addrs: &[SocketAddr]) -> Vec<Message> {
    let entries: Vec<ListEntry> = addrs
        .iter()
        .take(MAX_LIST_SERVERS)
        .map(|a| ListEntry::from_socket_addr(*a))
        .collect();
    ListReply::split(&entries)
        .into_iter()
        .map(Message::List)
        .collect()
}

fn count_of(addrs: usize) -> u16 {
    u16::try_from(addrs).unwrap_or(u16::MAX)
}

/// The 0.7 master face as a pure machine. Its sockets, in the runner's order, are pairs: for
/// each address family the master socket (`via` even) and its checker socket (`via` + 1).
#[derive(Debug)]
pub struct Face07 {
    tokens: Tokens,
    checks: Checks,
    heartbeats: SourceLimiter,
    token_requests: SourceLimiter,
    /// Per pair: whether it is IPv6.
    families: Vec<bool>,
}

impl Face07 {
    /// A face over pairs of the given families (`true`: IPv6), in the runner's order.
    #[must_use]
    pub fn new(settings: &TeeworldsSettings, tokens: Tokens, families: Vec<bool>) -> Self {
        let n = settings.max_tracked_sources;
        Self {
            tokens,
            checks: Checks::new(settings.max_checks),
            heartbeats: SourceLimiter::new(
                BucketConfig::one_every(settings.heartbeat_burst, settings.heartbeat_refill),
                n,
            )
            .with_growth(settings.proven_servers_max),
            token_requests: SourceLimiter::new(
                BucketConfig::one_every(settings.token_burst, settings.token_refill),
                n,
            )
            .with_growth(settings.proven_servers_max),
            families,
        }
    }

    /// The checker socket for `to`'s family (the first pair of that family).
    fn checker_for(&self, to: SocketAddr) -> usize {
        let want_v6 =
            to.is_ipv6() && !matches!(to, SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some());
        let pair = self
            .families
            .iter()
            .position(|v6| *v6 == want_v6)
            .unwrap_or(0);
        pair * 2 + 1
    }

    fn allow(limiter: &mut SourceLimiter, cx: &mut Cx<'_>, from: SocketAddr) -> bool {
        let registry = &mut *cx.registry;
        let ok = limiter.allow_proven(from.ip(), cx.now, 1.0, |k| {
            registry.lock().count_of_source(k)
        });
        if !ok {
            cx.out.limited(DropReason::RateLimited, from.ip());
        }
        ok
    }

    fn on_action(&mut self, cx: &mut Cx<'_>, action: Action) {
        match action {
            Action::Check { to, token } => {
                let framing = Framing::V07 {
                    token,
                    response_token: self.tokens.connless(to.ip(), cx.wall),
                };
                let via = self.checker_for(to);
                cx.out.send(
                    via,
                    to,
                    encode(framing, Message::FirewallCheck),
                    ReplyKind::Control,
                );
            }
            Action::Failed { to, token, .. } => {
                cx.out.verifications_failed += 1;
                for addr in to {
                    let framing = Framing::V07 {
                        token,
                        response_token: self.tokens.connless(addr.ip(), cx.wall),
                    };
                    let via = self.checker_for(addr);
                    let bytes = encode(framing, Message::FirewallError);
                    cx.out.send(via, addr, bytes, ReplyKind::Control);
                }
            }
        }
    }

    fn poll_checks(&mut self, cx: &mut Cx<'_>) {
        let mut actions = Vec::new();
        self.checks.poll(cx.now, &mut actions);
        for a in actions {
            self.on_action(cx, a);
        }
    }
}

impl UdpMachine for Face07 {
    fn name(&self) -> &'static str {
        "teeworlds07"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
        let master_via = via - via % 2;
        let on_master = via % 2 == 0;
        let Ok(packet) = Packet::decode(data) else {
            return cx.out.drop(DropReason::Malformed);
        };
        let (token, response_token, message) = match packet {
            Packet::Token {
                token: theirs,
                padded: true,
                ..
            } => {
                if !on_master || !Self::allow(&mut self.token_requests, cx, from) {
                    return;
                }
                let reply = Packet::token_reply(theirs, self.tokens.connless(from.ip(), cx.wall));
                let mut bytes = Vec::with_capacity(reply.encoded_len());
                reply.encode(&mut bytes);
                cx.out.send(master_via, from, bytes, ReplyKind::Control);
                return;
            }
            Packet::Token { padded: false, .. } => return cx.out.drop(DropReason::Unexpected),
            Packet::Connless {
                framing:
                    Framing::V07 {
                        token,
                        response_token,
                    },
                message,
            } => (token, response_token, message),
            Packet::Connless {
                framing: Framing::V06(_),
                ..
            } => return cx.out.drop(DropReason::WrongVersion),
        };
        if !self.tokens.connless_valid(from.ip(), token, cx.wall) {
            return cx.out.drop(DropReason::BadToken);
        }
        let ours = self.tokens.connless(from.ip(), cx.wall);
        let reply = Framing::V07 {
            token: response_token,
            response_token: ours,
        };
        match (on_master, message) {
            (true, Message::Heartbeat { port }) => {
                if !Self::allow(&mut self.heartbeats, cx, from) {
                    return;
                }
                if port == 0 {
                    return cx.out.drop(DropReason::PortZero);
                }
                if self.checks.start(from, port, response_token, cx.now) == Start::Full {
                    cx.out.drop(DropReason::CheckCap);
                }
                self.poll_checks(cx);
            }
            (true, Message::CountRequest) => {
                if !Self::allow(&mut self.token_requests, cx, from) {
                    return;
                }
                let n = list_addresses(cx.view, &LISTED_BY_07).len();
                let msg = Message::CountReply { count: count_of(n) };
                cx.out
                    .send(master_via, from, encode(reply, msg), ReplyKind::Control);
            }
            (true, Message::ListRequest) => {
                cx.out.lists += 1;
                let addrs = list_addresses(cx.view, &LISTED_BY_07);
                let datagrams: Vec<bytes::Bytes> = list_messages(&addrs)
                    .into_iter()
                    .map(|m| bytes::Bytes::from(encode(reply, m)))
                    .collect();
                cx.out.replies.push(crate::runtime::udp::Reply {
                    via: master_via,
                    to: from,
                    datagrams: crate::runtime::udp::Datagrams::Many(Arc::from(datagrams)),
                    kind: ReplyKind::List,
                });
            }
            (_, Message::FirewallResponse) => {
                let Some((passed, _)) = self.checks.answer(from) else {
                    return cx.out.drop(DropReason::Unexpected);
                };
                // Listed under the fw!! source, as the reference master lists it.
                let reg = udp_registration(passed.listed, Face::Teeworlds07);
                let out = cx.registry.lock().register(reg, cx.wall);
                cx.out.registered(out);
                // The fwok goes out from both sockets, as the reference master sends it.
                let bytes = encode(reply, Message::FirewallOk);
                cx.out
                    .send(master_via + 1, from, bytes.clone(), ReplyKind::Control);
                cx.out.send(master_via, from, bytes, ReplyKind::Control);
            }
            _ => cx.out.drop(DropReason::Unexpected),
        }
    }

    fn on_timeout(&mut self, cx: &mut Cx<'_>) {
        self.poll_checks(cx);
        self.heartbeats.prune(cx.now);
        self.token_requests.prune(cx.now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.checks.next_deadline()
    }
}

/// The 0.6 list face as a pure machine: `req2` → `lis2`, `cou2` / `coun` → `siz2` / `size`,
/// `reqt` counted and left unanswered (no 0.5 servers). Heartbeats are dropped
/// (`unsupported`).
#[derive(Debug, Default)]
pub struct Face06;

impl UdpMachine for Face06 {
    fn name(&self) -> &'static str {
        "teeworlds06"
    }

    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
        let (framing, message) = match Packet::decode(data) {
            Ok(Packet::Connless {
                framing: framing @ Framing::V06(_),
                message,
            }) => (framing, message),
            Ok(_) => return cx.out.drop(DropReason::WrongVersion),
            Err(_) => return cx.out.drop(DropReason::Malformed),
        };
        let reply = framing.reply(Token::NONE);
        match message {
            Message::ListRequest => {
                cx.out.lists += 1;
                let addrs = list_addresses(cx.view, &LISTED_BY_06);
                let datagrams: Vec<bytes::Bytes> = list_messages(&addrs)
                    .into_iter()
                    .map(|m| bytes::Bytes::from(encode(reply, m)))
                    .collect();
                cx.out.replies.push(crate::runtime::udp::Reply {
                    via,
                    to: from,
                    datagrams: crate::runtime::udp::Datagrams::Many(Arc::from(datagrams)),
                    kind: ReplyKind::List,
                });
            }
            Message::ListRequestLegacy => {
                // The reference answers `reqt` only with 0.5 (`beat`) servers; Muster has none,
                // so nothing is sent.
                cx.out.lists += 1;
            }
            Message::CountRequest | Message::CountRequestLegacy => {
                let count = count_of(list_addresses(cx.view, &LISTED_BY_06).len());
                let msg = if message == Message::CountRequest {
                    Message::CountReply { count }
                } else {
                    Message::CountReplyLegacy { count }
                };
                cx.out.send(via, from, encode(reply, msg), ReplyKind::List);
            }
            Message::Heartbeat { .. } | Message::HeartbeatLegacy { .. } => {
                cx.out.drop(DropReason::Unsupported);
            }
            _ => cx.out.drop(DropReason::Unexpected),
        }
    }

    fn on_timeout(&mut self, _cx: &mut Cx<'_>) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// The Teeworlds 0.7 face's entry in the face table: each address binds the master socket
/// and, on the master port + 1 (as teeworlds expects: 8284 for 8283), the checker socket that
/// sends `fw??`.
pub const FACE07: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "teeworlds07",
    summary: "Teeworlds 0.7 master (UDP; checker on the port + 1)",
    contract: crate::face::Contract::Datagrams,
    default_port: muster_core::config::ports::TEEWORLDS07,
    bind: bind07,
    serve: |start, sockets| {
        // `bind07` returns master, checker; the runner numbers sockets in this order.
        let sockets = crate::face::udp_sockets(FACE07.name, sockets);
        let families = sockets
            .iter()
            .step_by(2)
            .map(|s| s.local_addr().is_ok_and(|a| a.is_ipv6()))
            .collect();
        let face = Face07::new(
            &start.settings.get::<TeeworldsSettings>(),
            Tokens::random(tokens::CONNLESS_SEED_PERIOD),
            families,
        );
        start.run_udp(face, sockets)
    },
    register_hint: |a| {
        format!(
            "Teeworlds 0.7: sv_register 1 and the masters.cfg line \"{0} {0}\"{1}",
            a.ip(),
            crate::face::fixed_port_note(a, muster_core::config::ports::TEEWORLDS07)
        )
    },
};

fn bind07(addr: SocketAddr) -> std::io::Result<Vec<crate::face::BoundSocket>> {
    use crate::face::{BoundSocket, Socket};
    let master = crate::runtime::bind_udp(addr)?;
    let port = master.local_addr()?.port();
    let checker_port = if addr.port() == 0 {
        0
    } else {
        port.saturating_add(1)
    };
    let checker = crate::runtime::bind_udp(SocketAddr::new(addr.ip(), checker_port))?;
    Ok(vec![
        BoundSocket {
            label: FACE07.name,
            socket: Socket::Udp(master),
        },
        BoundSocket {
            label: "teeworlds07-checker",
            socket: Socket::Udp(checker),
        },
    ])
}

/// The Teeworlds 0.6 list face's entry in the face table.
pub const FACE06: crate::face::FaceDescriptor = crate::face::FaceDescriptor {
    name: "teeworlds06",
    summary: "Teeworlds 0.6 list (UDP)",
    contract: crate::face::Contract::Datagrams,
    default_port: muster_core::config::ports::TEEWORLDS06,
    bind: |addr| crate::face::bind_one_udp(FACE06.name, addr),
    serve: |start, sockets| start.run_udp(Face06, crate::face::udp_sockets(FACE06.name, sockets)),
    register_hint: |a| {
        format!(
            "Teeworlds 0.6 clients: the masters.cfg line \"{0} {0}\"{1} lists the DDNet servers \
             registered over HTTP (0.6 servers cannot register here)",
            a.ip(),
            crate::face::fixed_port_note(a, muster_core::config::ports::TEEWORLDS06)
        )
    },
};
