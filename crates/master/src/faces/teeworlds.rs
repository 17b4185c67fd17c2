//! The Teeworlds faces: the 0.7 UDP master (8283) with its firewall checker (8284), the 0.6
//! UDP list face (8300) and, in [`ddnet`], DDNet's HTTP register with `servers.json`.
//!
//! Spec: `shared/specs/teeworlds-master.md` (§2 UDP, §3 HTTP, §5 decisions). Codecs:
//! `muster_proto::teeworlds_master`.
//!
//! ```text
//! 0.7 master socket (8283)                    checker socket (8284)
//!   04 00 00 .. 05 <tok> [pad to 520] -> 12-byte token reply (token bound to the source IP)
//!   21 <ours> <theirs> bea2 <port>    -> registry: pending (ip, port); check starts
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
//! address. The 0.6 face has no such proof, so its list replies are rate-limited per source in
//! **reply datagrams** (a list costs as many tokens as it has datagrams) and every face sends
//! through a global byte budget. Malformed, unexpected, unauthenticated and rate-limited input is
//! counted with `count_drop(reason)` and dropped; nothing from the wire can stop a face.
//!
//! Which records each list shows ([`View::Teeworlds`] narrowed by face): the 0.7 face lists
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
use std::hash::RandomState;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use muster_proto::Protocol;
use muster_proto::limit::{BucketConfig, ByteBudget, SourceKey, SourceLimiter};
use muster_proto::teeworlds_master::packet::ListReply;
use muster_proto::teeworlds_master::{
    Framing, ListEntry, MAX_DATAGRAM, MAX_LIST_SERVERS, Message, Packet, Token,
};
use tokio::net::UdpSocket;
use tokio::sync::watch;

use crate::MasterHandle;
use crate::registry::{
    Face, GameAddr, Outcome, Registration, ServerKey, Timestamp, Verification, View,
};
use checker::{Action, Checks, Start};
use tokens::{CONNLESS_SEED_PERIOD, Tokens};

/// The game name records of the Teeworlds UDP faces are registered under.
pub const GAME_TEEWORLDS: &str = "teeworlds";

/// Knobs of the Teeworlds UDP faces (0.7 and 0.6), with the spec defaults. Listen addresses are
/// not here: the sockets are passed in.
#[derive(Debug, Clone, PartialEq)]
pub struct TeeworldsSettings {
    /// List replies per source (IPv4 / IPv6 /64), counted in **datagrams**: burst. The
    /// default (32) is two full 1200-server lists, enough for qstat's `reqt` + `req2`.
    pub list_burst: u32,
    /// One more list datagram per source every this long.
    pub list_refill: Duration,
    /// Heartbeats (`bea2`) per source: burst. Hosts run many servers on one IP (the
    /// registry allows 64 per source), each heartbeating every 15 s, so the default is
    /// generous; 0.7 heartbeats cannot be spoofed (they carry the master's token).
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
    /// Global egress cap of the face, bytes per second.
    pub egress_bytes_per_sec: u64,
    /// Firewall checks running at once per socket pair.
    pub max_checks: usize,
}

impl Default for TeeworldsSettings {
    fn default() -> Self {
        Self {
            list_burst: 32,
            list_refill: Duration::from_secs(1),
            heartbeat_burst: 64,
            heartbeat_refill: Duration::from_millis(200),
            token_burst: 64,
            token_refill: Duration::from_millis(100),
            max_tracked_sources: 100_000,
            egress_bytes_per_sec: 1 << 20,
            max_checks: 4096,
        }
    }
}

/// The sockets of one address family of the 0.7 face.
#[derive(Debug)]
pub struct SocketPair07 {
    /// The master socket (8283).
    pub master: UdpSocket,
    /// The checker socket that sends `fw??` (8284 by convention: master port + 1).
    pub checker: UdpSocket,
}

#[derive(Debug)]
struct Limits {
    list: SourceLimiter,
    heartbeat: SourceLimiter,
    token: SourceLimiter,
    budget: ByteBudget,
}

#[derive(Debug)]
struct Shared {
    handle: MasterHandle,
    face: &'static str,
    tokens: Tokens<RandomState>,
    limits: Mutex<Limits>,
    max_checks: usize,
    /// The faces whose records this face lists.
    lists: &'static [Face],
    /// The last list built and when: a flood of list requests (from many spoofed sources,
    /// each with a fresh bucket) must not sort the registry under its lock every time.
    list_cache: Mutex<Option<(Instant, Arc<Vec<SocketAddr>>)>>,
}

/// A list is rebuilt at most this often, unless this face listed a server meanwhile (the
/// reference master rebuilds every 5 s). Servers registered through other faces show up
/// within this time.
pub const LIST_CACHE_TTL: Duration = Duration::from_secs(1);

/// Which per-source bucket a message is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    List,
    Heartbeat,
    Token,
}

impl Shared {
    fn new(
        handle: MasterHandle,
        face: &'static str,
        lists: &'static [Face],
        s: &TeeworldsSettings,
    ) -> Self {
        let n = s.max_tracked_sources;
        Self {
            handle,
            face,
            tokens: Tokens::new(RandomState::new(), CONNLESS_SEED_PERIOD),
            limits: Mutex::new(Limits {
                list: SourceLimiter::new(BucketConfig::one_every(s.list_burst, s.list_refill), n),
                heartbeat: SourceLimiter::new(
                    BucketConfig::one_every(s.heartbeat_burst, s.heartbeat_refill),
                    n,
                ),
                token: SourceLimiter::new(
                    BucketConfig::one_every(s.token_burst, s.token_refill),
                    n,
                ),
                budget: ByteBudget::new(s.egress_bytes_per_sec),
            }),
            max_checks: s.max_checks,
            lists,
            list_cache: Mutex::new(None),
        }
    }

    /// The addresses this face lists (cached for [`LIST_CACHE_TTL`]).
    fn list(&self) -> Arc<Vec<SocketAddr>> {
        let now = now_instant();
        let mut cache = self
            .list_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, list)) = cache.as_ref() {
            if now.saturating_duration_since(*at) < LIST_CACHE_TTL {
                return Arc::clone(list);
            }
        }
        let list = Arc::new(list_addresses(&self.handle, self.lists));
        *cache = Some((now, Arc::clone(&list)));
        list
    }

    fn invalidate_list(&self) {
        *self
            .list_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn limits(&self) -> std::sync::MutexGuard<'_, Limits> {
        self.limits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn drop_input(&self, reason: &'static str) {
        self.handle.metrics().count_drop(reason);
    }

    /// Charges `cost` tokens of `bucket` to `from`; counts a refusal.
    fn allow(&self, bucket: Bucket, from: SocketAddr, cost: u32) -> bool {
        let now = now_instant();
        let mut l = self.limits();
        let lim = match bucket {
            Bucket::List => &mut l.list,
            Bucket::Heartbeat => &mut l.heartbeat,
            Bucket::Token => &mut l.token,
        };
        let ok = lim.allow(from.ip(), now, f64::from(cost.max(1)));
        drop(l);
        if !ok {
            self.handle.metrics().count_rate_limited(from.ip());
            self.drop_input("rate_limited");
        }
        ok
    }

    /// Sends `bytes` if the face's egress budget allows it (whole or not at all).
    async fn send(&self, socket: &UdpSocket, bytes: &[u8], to: SocketAddr) {
        if !self.limits().budget.spend(bytes.len(), now_instant()) {
            self.drop_input("egress_budget");
            return;
        }
        if let Err(e) = socket.send_to(bytes, to).await {
            tracing::debug!(face = self.face, %to, error = %e, "send failed");
        }
    }
}

fn now_instant() -> Instant {
    tokio::time::Instant::now().into_std()
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

/// The game addresses a face lists: listed records of [`View::Teeworlds`] registered through
/// one of `faces`, in the stable list order, each address once.
#[must_use]
pub fn list_addresses(handle: &MasterHandle, faces: &[Face]) -> Vec<SocketAddr> {
    handle.with_registry(|r| {
        let mut seen = HashSet::new();
        r.listed(View::Teeworlds)
            .into_iter()
            .filter(|rec| faces.contains(&rec.face))
            .filter_map(|rec| match rec.key.addr {
                GameAddr::Ip(a) => Some(a),
                GameAddr::Host { .. } => None,
            })
            .filter(|a| seen.insert(*a))
            .collect()
    })
}

/// The faces whose records the 0.7 list shows.
pub const LISTED_BY_07: [Face; 2] = [Face::Teeworlds07, Face::DdnetHttp];
/// The faces whose records the 0.6 list shows.
pub const LISTED_BY_06: [Face; 2] = [Face::Teeworlds06, Face::DdnetHttp];

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

/// Serves the 0.7 master on every pair of `sockets` until `shutdown` turns true. One task per
/// pair; limits and the egress budget are shared by all pairs. Returns when every pair has
/// stopped; socket errors are logged, never fatal.
pub async fn run07(
    handle: MasterHandle,
    sockets: Vec<SocketPair07>,
    settings: TeeworldsSettings,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let shared = Arc::new(Shared::new(
        handle,
        Face::Teeworlds07.name(),
        &LISTED_BY_07,
        &settings,
    ));
    let mut tasks = tokio::task::JoinSet::new();
    for pair in sockets {
        tasks.spawn(serve07(Arc::clone(&shared), pair, shutdown.clone()));
    }
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r {
            tracing::error!(error = %e, "teeworlds07 task failed");
        }
    }
    Ok(())
}

/// Which socket of a pair a datagram came in on or goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Master,
    Checker,
}

async fn serve07(shared: Arc<Shared>, pair: SocketPair07, mut shutdown: watch::Receiver<bool>) {
    let mut checks = Checks::new(shared.max_checks);
    let mut buf_m = vec![0u8; MAX_DATAGRAM + 1];
    let mut buf_c = vec![0u8; MAX_DATAGRAM + 1];
    let mut out: Vec<(Via, SocketAddr, Vec<u8>)> = Vec::new();
    let mut actions = Vec::new();
    loop {
        let deadline = checks.next_deadline();
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = pair.master.recv_from(&mut buf_m) => match r {
                Ok((n, from)) => {
                    let data = buf_m.get(..n).unwrap_or_default();
                    on_datagram07(&shared, &mut checks, Via::Master, from, data, &mut out);
                }
                Err(e) => tracing::debug!(error = %e, "teeworlds07 recv failed"),
            },
            r = pair.checker.recv_from(&mut buf_c) => match r {
                Ok((n, from)) => {
                    let data = buf_c.get(..n).unwrap_or_default();
                    on_datagram07(&shared, &mut checks, Via::Checker, from, data, &mut out);
                }
                Err(e) => tracing::debug!(error = %e, "teeworlds07 checker recv failed"),
            },
            () = sleep => {}
        }
        actions.clear();
        checks.poll(now_instant(), &mut actions);
        for a in actions.drain(..) {
            on_action07(&shared, a, &mut out);
        }
        for (via, to, bytes) in out.drain(..) {
            let socket = match via {
                Via::Master => &pair.master,
                Via::Checker => &pair.checker,
            };
            shared.send(socket, &bytes, to).await;
        }
    }
}

fn on_action07(shared: &Shared, action: Action, out: &mut Vec<(Via, SocketAddr, Vec<u8>)>) {
    let now = Timestamp::now();
    match action {
        Action::Check { to, token } => {
            let framing = Framing::V07 {
                token,
                response_token: shared.tokens.connless(to.ip(), now),
            };
            out.push((Via::Checker, to, encode(framing, Message::FirewallCheck)));
        }
        Action::Failed { key, to, token } => {
            shared.handle.metrics().count_verification_failed();
            let k = udp_registration(key, Face::Teeworlds07).key;
            let pending = shared.handle.with_registry(|r| {
                r.get(&k)
                    .is_some_and(|rec| rec.state == Verification::Pending)
            });
            if pending {
                if let Err(e) = shared.handle.remove(&k) {
                    tracing::warn!(error = %e, "store failed");
                }
            }
            for addr in to {
                let framing = Framing::V07 {
                    token,
                    response_token: shared.tokens.connless(addr.ip(), now),
                };
                out.push((Via::Checker, addr, encode(framing, Message::FirewallError)));
            }
        }
    }
}

fn on_datagram07(
    shared: &Shared,
    checks: &mut Checks,
    via: Via,
    from: SocketAddr,
    data: &[u8],
    out: &mut Vec<(Via, SocketAddr, Vec<u8>)>,
) {
    let now = Timestamp::now();
    let Ok(packet) = Packet::decode(data) else {
        return shared.drop_input("malformed");
    };
    let (token, response_token, message) = match packet {
        Packet::Token {
            token: theirs,
            padded: true,
            ..
        } => {
            if via != Via::Master || !shared.allow(Bucket::Token, from, 1) {
                return;
            }
            let reply = Packet::token_reply(theirs, shared.tokens.connless(from.ip(), now));
            let mut bytes = Vec::with_capacity(reply.encoded_len());
            reply.encode(&mut bytes);
            out.push((Via::Master, from, bytes));
            return;
        }
        Packet::Token { padded: false, .. } => return shared.drop_input("unexpected"),
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
        } => return shared.drop_input("wrong_version"),
    };
    if !shared.tokens.connless_valid(from.ip(), token, now) {
        return shared.drop_input("bad_token");
    }
    let ours = shared.tokens.connless(from.ip(), now);
    let reply = Framing::V07 {
        token: response_token,
        response_token: ours,
    };
    match (via, message) {
        (Via::Master, Message::Heartbeat { port }) => {
            if !shared.allow(Bucket::Heartbeat, from, 1) {
                return;
            }
            on_heartbeat07(shared, checks, from, port, response_token, now);
        }
        (Via::Master, Message::CountRequest) => {
            if !shared.allow(Bucket::Token, from, 1) {
                return;
            }
            let n = shared.list().len();
            let msg = Message::CountReply { count: count_of(n) };
            out.push((Via::Master, from, encode(reply, msg)));
        }
        (Via::Master, Message::ListRequest) => {
            shared.handle.metrics().count_list_request(shared.face);
            let addrs = shared.list();
            let msgs = list_messages(&addrs);
            let cost = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
            if !shared.allow(Bucket::List, from, cost) {
                return;
            }
            for m in msgs {
                out.push((Via::Master, from, encode(reply, m)));
            }
        }
        (_, Message::FirewallResponse) => {
            let Some((passed, _)) = checks.answer(from) else {
                return shared.drop_input("unexpected");
            };
            on_passed07(shared, passed, now);
            // The fwok goes out from both sockets, as the reference master sends it.
            let bytes = encode(reply, Message::FirewallOk);
            out.push((Via::Checker, from, bytes.clone()));
            out.push((Via::Master, from, bytes));
        }
        _ => shared.drop_input("unexpected"),
    }
}

fn on_heartbeat07(
    shared: &Shared,
    checks: &mut Checks,
    from: SocketAddr,
    port: u16,
    theirs: Token,
    now: Timestamp,
) {
    if port == 0 {
        return shared.drop_input("malformed");
    }
    let reg = udp_registration(SocketAddr::new(from.ip(), port), Face::Teeworlds07);
    let known = shared.handle.with_registry(|r| r.get(&reg.key).is_some());
    if !known {
        match shared.handle.add(reg, now) {
            Ok(Outcome::Rejected(_)) => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "store failed");
                return;
            }
        }
    }
    if checks.start(from, port, theirs, now_instant()) == Start::Full {
        shared.drop_input("check_cap");
    }
}

fn on_passed07(shared: &Shared, passed: checker::Passed, now: Timestamp) {
    let h = &shared.handle;
    let listed = udp_registration(passed.listed, Face::Teeworlds07);
    if passed.listed != passed.key {
        // Listed under the fw!! source (reference master); the announced key goes.
        let k = udp_registration(passed.key, Face::Teeworlds07).key;
        let pending = h.with_registry(|r| {
            r.get(&k)
                .is_some_and(|rec| rec.state == Verification::Pending)
        });
        if pending {
            let _ = h.remove(&k);
        }
    }
    let key = listed.key.clone();
    if h.with_registry(|r| r.get(&key).is_none()) {
        match h.add(listed, now) {
            Ok(Outcome::Rejected(_)) => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "store failed");
                return;
            }
        }
    }
    if let Err(e) = h.verify(&key, now) {
        tracing::warn!(error = %e, "store failed");
    }
    shared.invalidate_list();
}

/// Serves the 0.6 list face on every socket until `shutdown` turns true: `req2` → `lis2`,
/// `cou2` / `coun` → `siz2` / `size`, `reqt` counted and left unanswered (no 0.5 servers).
/// Heartbeats are dropped (`unsupported`). Limits and the egress budget are shared by all
/// sockets.
pub async fn run06(
    handle: MasterHandle,
    sockets: Vec<UdpSocket>,
    settings: TeeworldsSettings,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let shared = Arc::new(Shared::new(
        handle,
        Face::Teeworlds06.name(),
        &LISTED_BY_06,
        &settings,
    ));
    let mut tasks = tokio::task::JoinSet::new();
    for socket in sockets {
        tasks.spawn(serve06(Arc::clone(&shared), socket, shutdown.clone()));
    }
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r {
            tracing::error!(error = %e, "teeworlds06 task failed");
        }
    }
    Ok(())
}

async fn serve06(shared: Arc<Shared>, socket: UdpSocket, mut shutdown: watch::Receiver<bool>) {
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let mut out: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    let data = buf.get(..n).unwrap_or_default();
                    on_datagram06(&shared, from, data, &mut out);
                }
                Err(e) => tracing::debug!(error = %e, "teeworlds06 recv failed"),
            },
        }
        for (to, bytes) in out.drain(..) {
            shared.send(&socket, &bytes, to).await;
        }
    }
}

fn on_datagram06(
    shared: &Shared,
    from: SocketAddr,
    data: &[u8],
    out: &mut Vec<(SocketAddr, Vec<u8>)>,
) {
    let (framing, message) = match Packet::decode(data) {
        Ok(Packet::Connless {
            framing: framing @ Framing::V06(_),
            message,
        }) => (framing, message),
        Ok(_) => return shared.drop_input("wrong_version"),
        Err(_) => return shared.drop_input("malformed"),
    };
    let reply = framing.reply(Token::NONE);
    match message {
        Message::ListRequest => {
            shared.handle.metrics().count_list_request(shared.face);
            let addrs = shared.list();
            let msgs = list_messages(&addrs);
            let cost = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
            if !shared.allow(Bucket::List, from, cost) {
                return;
            }
            for m in msgs {
                out.push((from, encode(reply, m)));
            }
        }
        Message::ListRequestLegacy => {
            // The reference answers `reqt` only with 0.5 (`beat`) servers; Muster has none,
            // so nothing is sent and nothing is charged.
            shared.handle.metrics().count_list_request(shared.face);
        }
        Message::CountRequest | Message::CountRequestLegacy => {
            if !shared.allow(Bucket::List, from, 1) {
                return;
            }
            let count = count_of(shared.list().len());
            let msg = if message == Message::CountRequest {
                Message::CountReply { count }
            } else {
                Message::CountReplyLegacy { count }
            };
            out.push((from, encode(reply, msg)));
        }
        Message::Heartbeat { .. } | Message::HeartbeatLegacy { .. } => {
            shared.drop_input("unsupported");
        }
        _ => shared.drop_input("unexpected"),
    }
}
