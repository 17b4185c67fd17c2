//! The UDP runner: one driver for every UDP face machine.
//!
//! ```text
//!  socket readers (one task per socket) ──bounded queue──> runner task
//!     runner: batch of datagrams ──> machine.on_datagram(cx) under one registry lock
//!             timer             ──> machine.on_timeout(cx)
//!             outbox: replies ──> per-source list budget ─> face egress budget ─> send_to
//!                     drops, registrations, poll-soon marks ──> metrics / poller
//! ```
//!
//! A face is a [`UdpMachine`]: it gets `(now, view, registry, bytes)` and writes what it wants
//! done into an [`Outbox`]; it never touches a socket, a clock or a lock. The runner owns the
//! budgets every UDP face shares (`gameagent.md` §8.3.10, `gamespy-master.md` §13.8): a byte
//! budget per source (IPv4 address, IPv6 /64) on list replies, and a global egress byte budget
//! per face on everything it sends. A reply that does not fit is dropped whole and counted.

use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use muster_proto::limit::{BucketConfig, ByteBudget, SourceLimiter};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::MasterHandle;
use crate::drops::DropReason;
use crate::registry::{Outcome, Registry, ServerKey, Timestamp};
use crate::views::Snapshot;

/// Datagrams waiting for the machine at most; more are dropped (`overload`).
pub const QUEUE: usize = 4096;
/// Datagrams handled under one lock of the registry at most.
const BATCH: usize = 64;
/// Largest datagram read; a longer one arrives truncated and the machine's decoder refuses it.
pub const RECV_BUF: usize = 65_536;

/// What every UDP face's replies are limited by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budgets {
    /// Bytes per second for everything the face sends.
    pub egress_bytes_per_sec: u64,
    /// List replies per source, in bytes (burst and refill).
    pub list_bytes: BucketConfig,
    /// Sources tracked at most.
    pub max_tracked_sources: usize,
}

impl Default for Budgets {
    /// The shared defaults: 1 MiB/s egress, lists burst 256 KiB and 16 KiB/s per source.
    fn default() -> Self {
        Self {
            egress_bytes_per_sec: 1 << 20,
            list_bytes: BucketConfig {
                burst: 256.0 * 1024.0,
                per_second: 16.0 * 1024.0,
            },
            max_tracked_sources: 100_000,
        }
    }
}

/// Which budgets a reply spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// A list (or any reply much larger than its request): the source's list budget and the
    /// face's egress budget.
    List,
    /// A small control message (challenge, token, check): the face's egress budget only (the
    /// machine applies its own per-source limits).
    Control,
}

/// The datagrams of one reply.
#[derive(Debug, Clone)]
pub enum Datagrams {
    /// One datagram.
    One(Bytes),
    /// Several, shared (a cached list).
    Many(Arc<[Bytes]>),
}

impl Datagrams {
    fn bytes(&self) -> usize {
        match self {
            Self::One(b) => b.len(),
            Self::Many(v) => v.iter().map(Bytes::len).sum(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Bytes> {
        let (one, many): (Option<&Bytes>, &[Bytes]) = match self {
            Self::One(b) => (Some(b), &[]),
            Self::Many(v) => (None, v),
        };
        one.into_iter().chain(many)
    }
}

/// One reply: sent whole or not at all.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Index of the socket to send from (the face's socket list, in the order given to
    /// [`run`]).
    pub via: usize,
    /// Destination.
    pub to: SocketAddr,
    /// What to send.
    pub datagrams: Datagrams,
    /// Which budgets it spends.
    pub kind: ReplyKind,
}

/// What a machine asks its runner to do after a datagram or a timeout.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Replies to send.
    pub replies: Vec<Reply>,
    /// Inputs dropped, with the source when a per-source limit refused it.
    pub drops: Vec<(DropReason, Option<IpAddr>)>,
    /// Records the poller should poll soon.
    pub poll_soon: Vec<ServerKey>,
    /// New records.
    pub registrations: u64,
    /// Failed proof exchanges.
    pub verifications_failed: u64,
    /// Lists served.
    pub lists: u64,
}

impl Outbox {
    /// Queue one datagram.
    pub fn send(&mut self, via: usize, to: SocketAddr, bytes: impl Into<Bytes>, kind: ReplyKind) {
        self.replies.push(Reply {
            via,
            to,
            datagrams: Datagrams::One(bytes.into()),
            kind,
        });
    }

    /// Count a drop.
    pub fn drop(&mut self, why: DropReason) {
        self.drops.push((why, None));
    }

    /// Count a drop by a per-source limit of `source`.
    pub fn limited(&mut self, why: DropReason, source: IpAddr) {
        self.drops.push((why, Some(source)));
    }

    /// Count what a registration did.
    pub fn registered(&mut self, out: Outcome) {
        match out {
            Outcome::Added => self.registrations += 1,
            Outcome::Rejected(r) => self.drop(r.into()),
            Outcome::Refreshed | Outcome::Relisted => {}
        }
    }

    fn clear(&mut self) {
        self.replies.clear();
        self.drops.clear();
        self.poll_soon.clear();
        self.registrations = 0;
        self.verifications_failed = 0;
        self.lists = 0;
    }
}

/// What a machine sees of the world for one datagram or timeout.
#[derive(Debug)]
pub struct Cx<'a> {
    /// Monotonic time (from tokio's clock, so paused-clock tests control it).
    pub now: Instant,
    /// Wall-clock time for the registry.
    pub wall: Timestamp,
    /// The current view (lists).
    pub view: &'a Snapshot,
    /// The registry, locked for this call.
    pub registry: &'a mut Registry,
    /// Where the machine puts what it wants done.
    pub out: &'a mut Outbox,
}

/// A UDP face: bytes and time in, registry calls and replies out. No I/O, no clock, no locks.
pub trait UdpMachine: Send + 'static {
    /// The face's name in logs and metrics (`"gameagent"`, …).
    fn name(&self) -> &'static str;
    /// A datagram arrived on socket `via` from `from`.
    fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]);
    /// [`UdpMachine::poll_timeout`] passed.
    fn on_timeout(&mut self, cx: &mut Cx<'_>);
    /// When [`UdpMachine::on_timeout`] should run next.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// Now, on tokio's clock.
#[must_use]
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[derive(Debug)]
struct Inbound {
    via: usize,
    from: SocketAddr,
    data: Vec<u8>,
}

/// The address to send to from a socket of the other family: IPv4 from an IPv6 socket as
/// IPv4-mapped, IPv4-mapped from an IPv4 socket as IPv4; `None` when it cannot be reached.
fn to_family(to: SocketAddr, v6_socket: bool) -> Option<SocketAddr> {
    match (v6_socket, to) {
        (true, SocketAddr::V4(a)) => Some(SocketAddr::V6(SocketAddrV6::new(
            a.ip().to_ipv6_mapped(),
            a.port(),
            0,
            0,
        ))),
        (false, SocketAddr::V6(a)) => a
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddr::new(IpAddr::V4(ip), a.port())),
        (_, to) => Some(to),
    }
}

/// The runner's budgets and counters, apart from the machine.
#[derive(Debug)]
struct Sender {
    sockets: Vec<(Arc<UdpSocket>, bool)>,
    egress: ByteBudget,
    lists: SourceLimiter,
}

impl Sender {
    async fn deliver(&mut self, handle: &MasterHandle, out: &mut Outbox, t: Instant) {
        let m = handle.metrics();
        for (why, source) in out.drops.drain(..) {
            m.count_drop(why);
            if let Some(ip) = source {
                m.count_rate_limited(ip);
            }
        }
        for _ in 0..out.registrations {
            m.count_registration();
        }
        for _ in 0..out.verifications_failed {
            m.count_verification_failed();
        }
        for key in out.poll_soon.drain(..) {
            handle.poll_soon(&key);
        }
        for r in out.replies.drain(..) {
            let size = r.datagrams.bytes();
            if r.kind == ReplyKind::List
                && !self.lists.allow(
                    r.to.ip(),
                    t,
                    f64::from(u32::try_from(size).unwrap_or(u32::MAX)),
                )
            {
                m.count_drop(DropReason::SourceBudget);
                m.count_rate_limited(r.to.ip());
                continue;
            }
            if !self.egress.spend(size, t) {
                m.count_drop(DropReason::EgressBudget);
                continue;
            }
            let Some((sock, v6)) = self.sockets.get(r.via) else {
                continue;
            };
            let Some(to) = to_family(r.to, *v6) else {
                continue;
            };
            for d in r.datagrams.iter() {
                if let Err(e) = sock.send_to(d, to).await {
                    tracing::debug!(error = %e, %to, "send failed");
                }
            }
        }
        self.lists.prune(t);
    }
}

async fn read_loop(
    via: usize,
    socket: Arc<UdpSocket>,
    tx: mpsc::Sender<Inbound>,
    handle: MasterHandle,
    stop: CancellationToken,
) {
    let mut buf = vec![0u8; RECV_BUF];
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    let data = buf.get(..n).unwrap_or_default().to_vec();
                    match tx.try_send(Inbound { via, from, data }) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            handle.metrics().count_drop(DropReason::Overload);
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                Err(e) => tracing::debug!(error = %e, "recv failed"),
            },
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Drives `machine` on `sockets` until `stop` is cancelled. Socket errors are logged, never
/// fatal.
pub async fn run<M: UdpMachine>(
    handle: MasterHandle,
    mut machine: M,
    sockets: Vec<Arc<UdpSocket>>,
    budgets: Budgets,
    stop: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel::<Inbound>(QUEUE);
    let mut readers = tokio::task::JoinSet::new();
    let mut out_sockets = Vec::with_capacity(sockets.len());
    for (via, s) in sockets.into_iter().enumerate() {
        let v6 = s.local_addr().is_ok_and(|a| a.is_ipv6());
        out_sockets.push((Arc::clone(&s), v6));
        readers.spawn(read_loop(via, s, tx.clone(), handle.clone(), stop.clone()));
    }
    drop(tx);
    let mut sender = Sender {
        sockets: out_sockets,
        egress: ByteBudget::new(budgets.egress_bytes_per_sec),
        lists: SourceLimiter::new(budgets.list_bytes, budgets.max_tracked_sources),
    };
    let mut out = Outbox::default();
    let mut batch: Vec<Inbound> = Vec::with_capacity(BATCH);
    loop {
        let wake = machine.poll_timeout();
        tokio::select! {
            () = stop.cancelled() => break,
            m = rx.recv() => {
                let Some(m) = m else { break };
                batch.push(m);
                while batch.len() < BATCH {
                    match rx.try_recv() {
                        Ok(m) => batch.push(m),
                        Err(_) => break,
                    }
                }
                let t = now();
                let view = handle.snapshot();
                handle.write(|registry| {
                    let mut cx = Cx {
                        now: t,
                        wall: Timestamp::now(),
                        view: &view,
                        registry,
                        out: &mut out,
                    };
                    for m in batch.drain(..) {
                        machine.on_datagram(&mut cx, m.via, m.from, &m.data);
                    }
                });
            }
            () = sleep_until(wake) => {
                let t = now();
                let view = handle.snapshot();
                handle.write(|registry| {
                    let mut cx = Cx {
                        now: t,
                        wall: Timestamp::now(),
                        view: &view,
                        registry,
                        out: &mut out,
                    };
                    machine.on_timeout(&mut cx);
                });
            }
        }
        let m = handle.metrics();
        for _ in 0..out.lists {
            m.count_list_request(machine.name());
        }
        out.lists = 0;
        sender.deliver(&handle, &mut out, now()).await;
        out.clear();
    }
    readers.shutdown().await;
}

/// Drives a machine without sockets, on a virtual clock, for the faces' tests.
#[cfg(test)]
pub(crate) mod harness {
    use super::*;
    use crate::registry::RegistryConfig;
    use crate::views::Publisher;
    use std::time::Duration;

    /// A registry, its published view and a virtual clock.
    pub(crate) struct Harness {
        pub(crate) registry: Registry,
        publisher: Publisher,
        pub(crate) view: Arc<Snapshot>,
        pub(crate) now: Instant,
        pub(crate) wall: Timestamp,
    }

    impl Harness {
        pub(crate) fn new() -> Self {
            Self {
                registry: Registry::new(RegistryConfig::default()),
                publisher: Publisher::new(Duration::from_secs(30)),
                view: Arc::new(Snapshot::empty()),
                now: Instant::now(),
                wall: Timestamp::from_secs(1_700_000_000),
            }
        }

        /// Publishes the registry's changes into the view.
        pub(crate) fn publish(&mut self) {
            let v = self.registry.version();
            self.publisher.apply(self.registry.take_changes(), v);
            self.view = Arc::new(self.publisher.build(self.wall));
        }

        pub(crate) fn advance(&mut self, d: Duration) {
            self.now += d;
            self.wall = self.wall.plus(d);
        }

        pub(crate) fn datagram<M: UdpMachine>(
            &mut self,
            m: &mut M,
            via: usize,
            from: SocketAddr,
            data: &[u8],
        ) -> Outbox {
            let mut out = Outbox::default();
            let mut cx = Cx {
                now: self.now,
                wall: self.wall,
                view: &self.view,
                registry: &mut self.registry,
                out: &mut out,
            };
            m.on_datagram(&mut cx, via, from, data);
            self.publish();
            out
        }

        pub(crate) fn timeout<M: UdpMachine>(&mut self, m: &mut M) -> Outbox {
            let out = self.timeout_unpublished(m);
            self.publish();
            out
        }

        /// [`Harness::timeout`] without publishing after it: the view stays as it was, as it
        /// does between two publishes of the daemon.
        pub(crate) fn timeout_unpublished<M: UdpMachine>(&mut self, m: &mut M) -> Outbox {
            let mut out = Outbox::default();
            let mut cx = Cx {
                now: self.now,
                wall: self.wall,
                view: &self.view,
                registry: &mut self.registry,
                out: &mut out,
            };
            m.on_timeout(&mut cx);
            out
        }
    }

    /// Every datagram of every reply, with its destination.
    pub(crate) fn sent(out: &Outbox) -> Vec<(SocketAddr, Vec<u8>)> {
        out.replies
            .iter()
            .flat_map(|r| r.datagrams.iter().map(move |d| (r.to, d.to_vec())))
            .collect()
    }

    /// The drops' names.
    pub(crate) fn drops(out: &Outbox) -> Vec<&'static str> {
        out.drops.iter().map(|(d, _)| d.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_mapped_for_the_socket() {
        let v4: SocketAddr = "192.0.2.1:5".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:5".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:5".parse().unwrap();
        assert_eq!(to_family(v4, true), Some(mapped));
        assert_eq!(to_family(mapped, false), Some(v4));
        assert_eq!(to_family(v6, false), None);
        assert_eq!(to_family(v6, true), Some(v6));
        assert_eq!(to_family(v4, false), Some(v4));
    }

    #[test]
    fn datagrams_count_their_bytes() {
        let one = Datagrams::One(Bytes::from_static(b"abc"));
        let many = Datagrams::Many(Arc::from(vec![
            Bytes::from_static(b"ab"),
            Bytes::from_static(b"cde"),
        ]));
        assert_eq!(one.bytes(), 3);
        assert_eq!(many.bytes(), 5);
        assert_eq!(many.iter().count(), 2);
    }
}
