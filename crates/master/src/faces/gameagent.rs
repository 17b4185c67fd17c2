//! The GameAgent master face (`gameagent.md` §2, §5, §8.3), UDP 9005.
//!
//! ```text
//! 65 "e"               -> 73 { a.b.c.d port:u16le }*   from the socket the request came in on
//! 71 "q" from (A, P)   -> 01 c:i32le                    pending, challenged
//! "0;challenge;<c>;…"  -> verified: registry add + verify (game = product, address (A, P − 1))
//! "0;challenge;0;…"    -> refresh of a verified record (registry heartbeat, batched)
//! 75 "u"               -> from a verified record: marked changed for the poller (polled soon)
//! ```
//!
//! The heartbeat's fields (players, maxplayers, level, gametype, version, product; §2.4) are
//! stored as the record's info while the poller has not polled it yet, so the HTTP API shows
//! them at once; the poller's `02` query replaces them and is authoritative after.
//!
//! Every rule of §8.3 lives in the pure [`GameAgentMaster`] of `muster-proto`; this face only
//! moves datagrams between the sockets and that one machine (shared by every listener, rule 2),
//! mirrors its events into the registry and maps its counters onto the master metrics. One task
//! per socket reads datagrams into a bounded queue; one task owns the machine, so no lock is
//! held around protocol state.
//!
//! Limits (all on by default, all in the machine): list requests per source (burst 2, one per
//! 5 s), challenges per address (burst 4, one per 10 s), records per IPv4 address (64), pending
//! records in total (10 000), one egress byte budget for everything the face sends (1 MiB/s; a
//! list that does not fit is dropped whole). A full read queue drops datagrams (`overload`).
//!
//! IPv6: list requests are answered (with the IPv4 list); registrations from IPv6 sources are
//! counted and dropped (§8.1.2). IPv4-mapped sources on a dual-stack socket count as IPv4.
//!
//! # After a restart
//! The machine's challenges die with the process, so records restored from the store must
//! re-verify before `e` can list them. At start the face re-challenges every restored GameAgent
//! record at its query address (a synthetic `q` into the machine: 5 bytes to an address that
//! proved itself before, so no amplification); a live stock server answers at once (it answers
//! `01` from anyone, any time). Restored records stay listed in the registry (the HTTP API) for
//! [`GameAgentSettings::restore_grace`]; those not re-verified by then are de-listed there, so
//! the registry never lists for long what `e` does not. A server whose challenge was lost (or
//! rate-limited) comes back through §8.3 rule 3.3 with its next periodic heartbeat, keeping its
//! list position (the registry keeps the first verification time); one that never comes back
//! expires 300 s after its last stored heartbeat.
//!
//! Does not: poll servers (a `u` only asks the poller, which polls a record at most once per
//! 10 s because it changed, §9.2), overwrite a poll result with a heartbeat's fields, sync with
//! other masters.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_proto::Protocol;
use muster_proto::gameagent::master::{
    GameAgentMaster, ListScope, MasterConfig, MasterCounters, MasterEvent, fields_of,
};
use muster_proto::gameagent::packet::{Heartbeat, HeartbeatFields, JOIN};
use muster_proto::gameagent::{MAX_DATAGRAM, decode_text};
use muster_proto::limit::{BucketConfig, SourceKey};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

use crate::MasterHandle;
use crate::config::LimitsConfig;
use crate::registry::{
    Face, GameAddr, MAX_GAME_LEN, Outcome, PollInfo, Registration, ServerKey, Timestamp,
};

/// Datagrams waiting for the machine at most; more are dropped (`overload`).
const QUEUE: usize = 4096;
/// The game name of a record whose `product` is not a usable name (empty, too long, not
/// printable ASCII): stock 1.10 dedicated servers' default.
const FALLBACK_GAME: &str = "serioussam";
/// Metrics label of this face.
const FACE: &str = "gameagent";

/// An extra listener whose `e` replies list only some products (§8.3 rule 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductListener {
    /// Addresses to bind (IPv4 and/or IPv6).
    pub listen: Vec<SocketAddr>,
    /// Products listed there, compared ignoring ASCII case (`serioussam`, `serioussamse`, …).
    pub products: Vec<String>,
}

/// The knobs of the GameAgent face that do not depend on where the default listener is.
#[derive(Debug, Clone, PartialEq)]
pub struct GameAgentSettings {
    /// The §8.3 rules: expiry, re-verification, buckets, caps, egress budget.
    pub master: MasterConfig,
    /// Extra per-product listeners (none by default).
    pub product_listeners: Vec<ProductListener>,
    /// Restored records not re-verified this long after start are de-listed (see the module
    /// docs); default: the pending lifetime, 30 s.
    pub restore_grace: Duration,
}

impl Default for GameAgentSettings {
    fn default() -> Self {
        Self::from_limits(&LimitsConfig::default())
    }
}

impl GameAgentSettings {
    /// The spec defaults with the shared `[limits]` section applied.
    #[must_use]
    pub fn from_limits(l: &LimitsConfig) -> Self {
        let master = MasterConfig {
            list_requests: BucketConfig::one_every(l.list_burst, l.list_refill.0),
            challenges: BucketConfig::one_every(l.challenge_burst, l.challenge_refill.0),
            max_servers_per_address: l.servers_per_source,
            max_pending: l.max_pending,
            egress_bytes_per_second: l.egress_bytes_per_sec,
            max_tracked_sources: l.max_tracked_sources,
            ..MasterConfig::default()
        };
        Self {
            restore_grace: master.pending_lifetime,
            master,
            product_listeners: Vec::new(),
        }
    }
}

/// One bound socket of the face and what its `e` replies list.
#[derive(Debug)]
pub struct GameAgentListener {
    /// The socket (IPv4 or IPv6).
    pub socket: UdpSocket,
    /// `None`: the default listener, every product (and the one challenges leave from);
    /// `Some`: a per-product listener.
    pub products: Option<Vec<String>>,
}

impl GameAgentListener {
    /// A default listener (9005): lists every product.
    #[must_use]
    pub fn all(socket: UdpSocket) -> Self {
        Self {
            socket,
            products: None,
        }
    }
}

/// Serves the face on `sockets` (the default listeners, normally `0.0.0.0:9005` and
/// `[::]:9005`) and on the per-product listeners of `settings` (bound here), until `shutdown`
/// turns true. Socket errors are logged, never fatal; binding a product listener can fail.
pub async fn run(
    handle: MasterHandle,
    sockets: Vec<UdpSocket>,
    settings: GameAgentSettings,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut listeners: Vec<GameAgentListener> =
        sockets.into_iter().map(GameAgentListener::all).collect();
    for p in &settings.product_listeners {
        for &addr in &p.listen {
            listeners.push(GameAgentListener {
                socket: crate::tcp::bind_udp(addr)?,
                products: Some(p.products.clone()),
            });
        }
    }
    run_listeners(handle, listeners, settings, shutdown).await
}

/// [`run`] with every listener already bound (tests, or a caller binding product listeners
/// itself); [`GameAgentSettings::product_listeners`] is ignored.
pub async fn run_listeners(
    handle: MasterHandle,
    listeners: Vec<GameAgentListener>,
    settings: GameAgentSettings,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<Inbound>(QUEUE);
    let mut sockets = Vec::with_capacity(listeners.len());
    let mut scopes = Vec::with_capacity(listeners.len());
    let mut readers = tokio::task::JoinSet::new();
    for (index, l) in listeners.into_iter().enumerate() {
        let socket = Arc::new(l.socket);
        let v6 = socket.local_addr()?.is_ipv6();
        sockets.push(Out {
            socket: Arc::clone(&socket),
            v6,
        });
        scopes.push(
            l.products
                .map(|p| p.into_iter().map(String::into_bytes).collect::<Vec<_>>()),
        );
        readers.spawn(read_loop(
            index,
            socket,
            tx.clone(),
            handle.clone(),
            shutdown.clone(),
        ));
    }
    drop(tx);
    let challenge_socket = scopes
        .iter()
        .zip(&sockets)
        .position(|(s, o)| s.is_none() && !o.v6)
        .or_else(|| scopes.iter().position(Option::is_none))
        .unwrap_or(0);
    let machine = GameAgentMaster::new(settings.master, rand::random::<u32>);
    let mut face = MachineFace {
        handle,
        machine,
        sockets,
        scopes,
        challenge_socket,
        keys: HashMap::new(),
        seen: MasterCounters::default(),
        restored: HashMap::new(),
        restore_deadline: None,
    };
    face.restore(now(), settings.restore_grace).await;
    let mut stop = shutdown;
    loop {
        let wake = [face.machine.poll_timeout(), face.restore_deadline]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            () = stopped(&mut stop) => break,
            msg = rx.recv() => match msg {
                Some(m) => face.on_datagram(m).await,
                None => break,
            },
            () = sleep_until(wake) => face.on_timeout(now()).await,
        }
    }
    readers.shutdown().await;
    Ok(())
}

/// One datagram read by a socket task.
#[derive(Debug)]
struct Inbound {
    listener: usize,
    from: SocketAddr,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Out {
    socket: Arc<UdpSocket>,
    v6: bool,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

async fn read_loop(
    listener: usize,
    socket: Arc<UdpSocket>,
    tx: mpsc::Sender<Inbound>,
    handle: MasterHandle,
    mut stop: watch::Receiver<bool>,
) {
    // One byte more than the largest accepted datagram, so an oversized one is seen as such.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    loop {
        tokio::select! {
            () = stopped(&mut stop) => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    let data = buf.get(..n).unwrap_or_default().to_vec();
                    match tx.try_send(Inbound { listener, from, data }) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            handle.metrics().count_drop("overload");
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                Err(e) => tracing::debug!(error = %e, "gameagent recv failed"),
            },
        }
    }
}

/// The IPv4 (A, P) a registration datagram from `from` is keyed by, as the machine sees it.
fn v4_source(from: SocketAddr) -> Option<SocketAddrV4> {
    match from {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(a) => a
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, a.port())),
    }
}

/// The registry's game name for a heartbeat's raw `product`.
fn game_name(product: &[u8]) -> String {
    let usable = !product.is_empty()
        && product.len() <= MAX_GAME_LEN
        && product.iter().all(u8::is_ascii_graphic);
    if usable {
        String::from_utf8_lossy(product).to_ascii_lowercase()
    } else {
        FALLBACK_GAME.to_owned()
    }
}

/// What a heartbeat says about the server, as record info (no name: heartbeats carry none).
fn heartbeat_info(f: &HeartbeatFields) -> PollInfo {
    let text = |raw: &[u8]| decode_text(raw).plain;
    PollInfo {
        map: text(&f.level),
        game_type: text(&f.gametype),
        num_players: f.players,
        max_players: f.max_players,
        rules: vec![
            ("version".to_owned(), text(&f.version)),
            ("product".to_owned(), decode_text(&f.product).text),
        ],
        ..PollInfo::default()
    }
    .bounded()
}

/// The fields of a heartbeat datagram, read as the machine reads them; `None` when it is
/// not a heartbeat.
fn heartbeat_fields(datagram: &[u8]) -> Option<HeartbeatFields> {
    let h = Heartbeat::decode(datagram).ok()?;
    Some(fields_of(&h, h.challenge().unwrap_or(0)))
}

fn registration(key: &ServerKey, query: SocketAddrV4) -> Registration {
    Registration {
        key: key.clone(),
        face: Face::GameAgent,
        game_port: Some(key.addr.port()),
        query_addr: Some(SocketAddr::V4(query)),
        query_protocol: Some(Protocol::GameAgent),
        source: SourceKey::of(IpAddr::V4(*query.ip())),
    }
}

struct MachineFace {
    handle: MasterHandle,
    machine: GameAgentMaster,
    sockets: Vec<Out>,
    /// Per listener: `None` for every product, else the products listed.
    scopes: Vec<Option<Vec<Vec<u8>>>>,
    /// Where challenges the machine sends on its own (re-verification) leave from.
    challenge_socket: usize,
    /// Verified records: query address (A, P) → registry key and the listener it verified
    /// through (its re-verification challenges leave from there).
    keys: HashMap<SocketAddrV4, (ServerKey, usize)>,
    /// The machine's counters as last mirrored into the metrics.
    seen: MasterCounters,
    /// Restored records still to re-verify: query address → registry key.
    restored: HashMap<SocketAddrV4, ServerKey>,
    restore_deadline: Option<Instant>,
}

impl MachineFace {
    /// Re-challenges every GameAgent record restored from the store (see the module docs).
    async fn restore(&mut self, t: Instant, grace: Duration) {
        self.restored = self.handle.with_registry(|r| {
            r.iter()
                .filter(|rec| rec.face == Face::GameAgent)
                .filter_map(|rec| match rec.query_addr {
                    Some(SocketAddr::V4(q)) => Some((q, rec.key.clone())),
                    _ => None,
                })
                .collect()
        });
        if self.restored.is_empty() {
            return;
        }
        tracing::info!(
            n = self.restored.len(),
            "re-challenging restored gameagent servers"
        );
        let mut queries: Vec<SocketAddrV4> = self.restored.keys().copied().collect();
        queries.sort_unstable();
        for q in queries {
            self.machine.handle_datagram(t, SocketAddr::V4(q), &[JOIN]);
        }
        self.restore_deadline = Some(t + grace);
        self.drain(None).await;
        self.mirror(None, &HashSet::new(), &[], None);
    }

    async fn on_datagram(&mut self, m: Inbound) {
        let t = now();
        let products: Option<Vec<&[u8]>> = self
            .scopes
            .get(m.listener)
            .and_then(Option::as_ref)
            .map(|p| p.iter().map(Vec::as_slice).collect());
        let scope = products
            .as_deref()
            .map_or(ListScope::All, ListScope::Products);
        self.machine
            .handle_datagram_scoped(t, m.from, &m.data, scope);
        self.drain(Some(m.listener)).await;
        let verified = self.events(Some(m.listener));
        self.mirror(v4_source(m.from), &verified, &m.data, Some(m.from.ip()));
    }

    async fn on_timeout(&mut self, t: Instant) {
        self.machine.handle_timeout(t);
        if self.restore_deadline.is_some_and(|d| t >= d) {
            self.restore_deadline = None;
            for (q, key) in std::mem::take(&mut self.restored) {
                tracing::debug!(%q, "restored gameagent server did not re-verify");
                if let Err(e) = self.handle.delist(&key) {
                    tracing::warn!(error = %e, "de-listing not stored");
                }
            }
        }
        self.drain(None).await;
        self.events(None);
        self.mirror(None, &HashSet::new(), &[], None);
    }

    /// Sends what the machine queued: replies to a datagram from the listener it came in on
    /// (stock servers and clients match the master's address); challenges of the machine's own
    /// (re-verification) from the listener the server verified through, else from the
    /// challenge socket (the first default IPv4 listener).
    async fn drain(&mut self, origin: Option<usize>) {
        while let Some(tx) = self.machine.poll_transmit() {
            let index = origin
                .or_else(|| {
                    v4_source(tx.to)
                        .and_then(|q| self.keys.get(&q))
                        .map(|(_, i)| *i)
                })
                .unwrap_or(self.challenge_socket);
            let Some(out) = self.sockets.get(index) else {
                continue;
            };
            let to = match (out.v6, tx.to) {
                (true, SocketAddr::V4(a)) => {
                    SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
                }
                (false, SocketAddr::V6(a)) => match v4_source(SocketAddr::V6(a)) {
                    Some(v4) => SocketAddr::V4(v4),
                    None => continue,
                },
                (_, to) => to,
            };
            if let Err(e) = out.socket.send_to(&tx.bytes, to).await {
                tracing::debug!(error = %e, %to, "gameagent send failed");
            }
        }
    }

    /// Mirrors the machine's events into the registry; returns the query addresses verified.
    /// `origin`: the listener of the datagram that caused them.
    fn events(&mut self, origin: Option<usize>) -> HashSet<SocketAddrV4> {
        let mut verified = HashSet::new();
        while let Some(ev) = self.machine.poll_event() {
            match ev {
                MasterEvent::Verified { game, query } => {
                    self.on_verified(game, query, origin);
                    verified.insert(query);
                }
                MasterEvent::Delisted { query, .. } => {
                    // Pending again in the machine, which forgets it silently 30 s later
                    // unless it answers: the registry's lifetime removes the de-listed record
                    // then, and a new verification maps it again.
                    if let Some((key, _)) = self.keys.remove(&query) {
                        if let Err(e) = self.handle.delist(&key) {
                            tracing::warn!(error = %e, "de-listing not stored");
                        }
                    }
                }
                MasterEvent::Expired { query, .. } => {
                    if let Some((key, _)) = self.keys.remove(&query) {
                        match self.handle.remove(&key) {
                            Ok(Some(_)) => self.handle.metrics().count_drop("expired"),
                            Ok(None) => {}
                            Err(e) => tracing::warn!(error = %e, "removal not stored"),
                        }
                    }
                }
                MasterEvent::StateChanged { game, query } => {
                    // §9.2: the poller refreshes it soon (at most once per 10 s).
                    let marked = self
                        .keys
                        .get(&query)
                        .is_some_and(|(key, _)| self.handle.mark_changed(key));
                    tracing::debug!(%game, marked, "gameagent server state changed");
                }
                MasterEvent::PortHop {
                    address,
                    challenged_port,
                    answered_from,
                } => {
                    tracing::info!(
                        %address,
                        challenged_port,
                        answered_from,
                        "gameagent server answered its challenge from another port"
                    );
                }
            }
        }
        verified
    }

    fn on_verified(&mut self, game: SocketAddrV4, query: SocketAddrV4, origin: Option<usize>) {
        let fields = self
            .machine
            .servers()
            .find(|s| s.query == query)
            .map(|s| s.heartbeat.clone());
        let product = fields
            .as_ref()
            .map_or_else(|| FALLBACK_GAME.to_owned(), |f| game_name(&f.product));
        let key = ServerKey::new(&product, GameAddr::Ip(SocketAddr::V4(game)));
        // A record of the same server under another game name (its product changed, or a
        // restored record) is replaced, so one server is one record.
        let listener = origin
            .or_else(|| self.keys.get(&query).map(|(_, i)| *i))
            .unwrap_or(self.challenge_socket);
        let stale = [
            self.keys.get(&query).map(|(k, _)| k),
            self.restored.get(&query),
        ]
        .into_iter()
        .flatten()
        .filter(|k| **k != key)
        .cloned()
        .collect::<Vec<_>>();
        self.restored.remove(&query);
        for k in stale {
            if let Err(e) = self.handle.remove(&k) {
                tracing::warn!(error = %e, "removal not stored");
            }
        }
        let ts = Timestamp::now();
        match self.handle.add(registration(&key, query), ts) {
            Ok(Outcome::Rejected(r)) => {
                // Counted by the handle; the machine lists it in `e` regardless, as the
                // registry caps are shared with the other faces.
                tracing::debug!(%game, reason = r.name(), "registry refused gameagent server");
                self.keys.remove(&query);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "gameagent registration not stored");
                self.handle.metrics().count_drop("store_error");
                self.keys.remove(&query);
                return;
            }
        }
        if let Err(e) = self.handle.verify(&key, ts) {
            tracing::warn!(error = %e, "verification not stored");
        }
        if let Some(f) = &fields {
            self.handle.registration_info(&key, heartbeat_info(f));
        }
        self.keys.insert(query, (key, listener));
    }

    /// Maps the machine's counter deltas onto the metrics, and refreshes the registry record
    /// of `source` when the machine counted a valid heartbeat from it (`datagram`; not one
    /// that verified it just now: that was mirrored as `Verified`). `from`: the datagram's
    /// source, which rate limits counted now are attributed to.
    fn mirror(
        &mut self,
        source: Option<SocketAddrV4>,
        verified: &HashSet<SocketAddrV4>,
        datagram: &[u8],
        from: Option<IpAddr>,
    ) {
        let cur = self.machine.counters().clone();
        let old = std::mem::replace(&mut self.seen, cur.clone());
        let m = self.handle.metrics();
        let d = |new: u64, old: u64| new.saturating_sub(old);
        let drops: [(&'static str, u64); 8] = [
            ("malformed", d(cur.malformed, old.malformed)),
            ("ipv6_heartbeat", d(cur.ipv6_refused, old.ipv6_refused)),
            ("port_zero", d(cur.port_refused, old.port_refused)),
            ("egress_budget", d(cur.over_budget, old.over_budget)),
            (
                "source_cap",
                d(cur.address_cap_refused, old.address_cap_refused),
            ),
            (
                "pending_cap",
                d(cur.pending_cap_refused, old.pending_cap_refused),
            ),
            ("bad_echo", d(cur.bad_echoes, old.bad_echoes)),
            ("port_hop", d(cur.port_hops, old.port_hops)),
        ];
        for (reason, n) in drops {
            for _ in 0..n {
                m.count_drop(reason);
            }
        }
        for _ in 0..d(cur.state_changes_ignored, old.state_changes_ignored) {
            m.count_drop("unexpected_state_change");
        }
        for _ in 0..d(cur.lists_sent, old.lists_sent) {
            m.count_list_request(FACE);
        }
        let limited = d(cur.lists_rate_limited, old.lists_rate_limited)
            + d(cur.challenges_rate_limited, old.challenges_rate_limited);
        for _ in 0..limited {
            match from {
                Some(ip) => m.count_rate_limited(ip),
                None => m.count_rate_limited_unattributed(),
            }
        }
        let failed = d(cur.bad_echoes, old.bad_echoes)
            + d(cur.port_hops, old.port_hops)
            + d(cur.delisted, old.delisted)
            + d(cur.pending_expired, old.pending_expired);
        for _ in 0..failed {
            m.count_verification_failed();
        }
        if cur.heartbeats > old.heartbeats {
            if let Some(q) = source.filter(|q| !verified.contains(q)) {
                self.refresh(q, datagram);
            }
        }
    }

    fn refresh(&mut self, query: SocketAddrV4, datagram: &[u8]) {
        let Some((key, _)) = self.keys.get(&query) else {
            return;
        };
        let ts = Timestamp::now();
        match self.handle.heartbeat(registration(key, query), ts) {
            // The registry lost or de-listed a record the machine lists (pruned while the
            // machine kept it, or a failed store write): the machine's proof stands.
            Ok(Outcome::Added | Outcome::NotVerified) => {
                if let Err(e) = self.handle.verify(key, ts) {
                    tracing::warn!(error = %e, "verification not stored");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "heartbeat refresh failed"),
        }
        if let Some(f) = heartbeat_fields(datagram) {
            self.handle.registration_info(key, heartbeat_info(&f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn game_name_from_product() {
        assert_eq!(game_name(b"serioussamse"), "serioussamse");
        assert_eq!(game_name(b"SeriousSam"), "serioussam");
        assert_eq!(game_name(b""), FALLBACK_GAME);
        assert_eq!(game_name(b"sam with space"), FALLBACK_GAME);
        assert_eq!(game_name(&[0xE9; 4]), FALLBACK_GAME);
        assert_eq!(game_name(&[b'a'; MAX_GAME_LEN + 1]), FALLBACK_GAME);
    }

    #[test]
    fn mapped_sources_are_ipv4() {
        let a: SocketAddr = "[::ffff:192.0.2.1]:25601".parse().unwrap();
        assert_eq!(v4_source(a), Some("192.0.2.1:25601".parse().unwrap()));
        let b: SocketAddr = "[2001:db8::1]:25601".parse().unwrap();
        assert_eq!(v4_source(b), None);
    }

    #[test]
    fn settings_follow_limits() {
        let s = GameAgentSettings::default();
        let spec = MasterConfig::default();
        assert_eq!(s.master.list_requests, spec.list_requests);
        assert_eq!(s.master.challenges, spec.challenges);
        assert_eq!(s.master.expiry, spec.expiry);
        assert_eq!(s.master.egress_bytes_per_second, 1 << 20);
        assert_eq!(s.restore_grace, Duration::from_secs(30));
        assert!(s.product_listeners.is_empty());
    }
}
