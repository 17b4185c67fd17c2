//! The UDP runner: one driver for every UDP face machine.
//!
//! ```text
//!  socket readers (one task per socket) ──bounded queue──> runner task
//!     runner: batch of datagrams ──> machine.on_datagram(cx), the registry lock taken per
//!             datagram at its first registry call (a list request takes none)
//!             timer             ──> machine.on_timeout(cx)
//!             outbox: replies ──> per-source list budget ─> face egress budget ─> send
//!                     drops, registrations, poll-soon marks ──> metrics / poller
//! ```
//!
//! A datagram's replies leave before the runner handles the next datagram of its batch: a
//! server waiting for its challenge does not wait behind the registrations and lists that
//! arrived with it (the batch only shares the clock reading and the snapshot).
//!
//! A face is a [`UdpMachine`]: it gets `(now, view, registry, bytes)` and writes what it wants
//! done into an [`Outbox`]; it never touches a socket, a clock or a lock. The runner owns the
//! budgets every UDP face shares (`gameagent.md` §8.3.10, `gamespy-master.md` §13.8): a byte
//! budget per source (IPv4 address, IPv6 /64) on list replies, and a global egress byte budget
//! per face on everything it sends. A reply that does not fit is dropped whole and counted.
//! A source's list budget grows with the servers it has registered (proven), as the other
//! per-source budgets do: a hosting box's address asking for lists as often as its servers'
//! players gets one budget per server; an unproven source keeps the base budget (the egress
//! budget bounds everything).
//!
//! A reply of many datagrams (a list) leaves in segmented sends (UDP GSO, `UDP_SEGMENT`): one
//! system call and one socket buffer charge per run of up to 64 equal-sized datagrams, where
//! one `sendto` each woke the socket's write waiters once per datagram. The receiver still
//! gets the same datagrams. Where the kernel or the route refuses segmentation, the runner
//! falls back to one send per datagram (and stops trying on that socket when the refusal is
//! permanent).

use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use muster_proto::limit::{BucketConfig, ByteBudget, SourceLimiter};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use muster_core::MasterHandle;
use muster_core::drops::DropReason;
use muster_core::handle::RegistryAccess;
use muster_core::registry::{Outcome, ServerKey, Timestamp};
use muster_core::views::Snapshot;

/// Datagrams waiting for the machine at most; more are dropped (`overload`).
pub const QUEUE: usize = 4096;
/// Datagrams handled under one lock of the registry at most.
const BATCH: usize = 64;
/// Largest datagram read; a longer one arrives truncated and the machine's decoder refuses it.
pub const RECV_BUF: usize = 65_536;
/// Datagrams one segmented send carries at most (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;
/// Bytes one segmented send carries at most: the largest UDP payload over IPv4.
const GSO_MAX_BYTES: usize = 65_507;

/// What every UDP face's replies are limited by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budgets {
    /// Bytes per second for everything the face sends.
    pub egress_bytes_per_sec: u64,
    /// List replies per source, in bytes (burst and refill).
    pub list_bytes: BucketConfig,
    /// Sources tracked at most.
    pub max_tracked_sources: usize,
    /// A source's list budget grows by one base budget per server it has registered,
    /// counting this many at most (the daemon's `limits.proven_servers_max`; 0: never).
    pub proven_servers_max: u32,
}

impl Budgets {
    /// The budgets `[limits]` sets for every UDP face.
    #[must_use]
    pub fn from_limits(l: &muster_core::config::LimitsConfig) -> Self {
        // Byte counts far below 2^53: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        let list_bytes = BucketConfig {
            burst: l.list_bytes_burst as f64,
            per_second: l.list_bytes_per_sec as f64,
        };
        Self {
            egress_bytes_per_sec: l.egress_bytes_per_sec,
            list_bytes,
            max_tracked_sources: l.max_tracked_sources,
            proven_servers_max: l.proven_servers_max,
        }
    }
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
            proven_servers_max: 0,
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

    #[cfg(test)]
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
    /// The registry: `lock()` takes the writers' lock (in the daemon, at first use only).
    pub registry: &'a mut dyn RegistryAccess,
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
    /// Whether `data` asks for a list: it is handed [`MasterHandle::fresh_snapshot`], so the
    /// servers registered just before (by the same batch of datagrams too) are in it.
    fn asks_for_list(&self, _data: &[u8]) -> bool {
        false
    }
}

use muster_core::clock::now;

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

/// Splits `datagrams` into runs one segmented send can carry: every datagram of a run has the
/// size of the run's first, except the last, which may be shorter (but not empty); at most
/// [`GSO_MAX_SEGMENTS`] datagrams and [`GSO_MAX_BYTES`] bytes. In order, covering all.
fn gso_runs(datagrams: &[Bytes]) -> impl Iterator<Item = &[Bytes]> {
    let mut rest = datagrams;
    std::iter::from_fn(move || {
        let size = rest.first()?.len();
        let mut n = 1;
        let mut total = size;
        while let Some(d) = rest.get(n) {
            if size == 0
                || d.is_empty()
                || d.len() > size
                || n == GSO_MAX_SEGMENTS
                || total + d.len() > GSO_MAX_BYTES
            {
                break;
            }
            total += d.len();
            n += 1;
            if d.len() < size {
                break;
            }
        }
        let (run, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        Some(run)
    })
}

/// Whether a refused segmented send means the socket can never send one (no kernel support,
/// no checksum offload on the way out), rather than this destination or this moment.
fn gso_unsupported(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EIO | Errno::ENOPROTOOPT | Errno::EOPNOTSUPP | Errno::ENOSYS)
    )
}

/// `run` (from [`gso_runs`], two datagrams or more) to `to` in one segmented send.
async fn send_segmented(sock: &UdpSocket, to: SocketAddr, run: &[Bytes]) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrStorage, sendmsg};
    let size = run
        .first()
        .and_then(|d| u16::try_from(d.len()).ok())
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let iov: Vec<IoSlice<'_>> = run.iter().map(|d| IoSlice::new(d)).collect();
    let addr = SockaddrStorage::from(to);
    let fd = sock.as_raw_fd();
    sock.async_io(Interest::WRITABLE, || {
        sendmsg(
            fd,
            &iov,
            &[ControlMessage::UdpGsoSegments(&size)],
            MsgFlags::empty(),
            Some(&addr),
        )
        .map(drop)
        .map_err(io::Error::from)
    })
    .await
}

/// One of a face's sockets, as the runner sends from it.
#[derive(Debug)]
struct OutSocket {
    sock: Arc<UdpSocket>,
    v6: bool,
    /// Segmented sends are still tried (cleared after a permanent refusal).
    gso: bool,
}

impl OutSocket {
    /// Sends `datagrams` to `to`: runs in segmented sends where they can go so, the rest one
    /// by one. Errors are logged, never fatal.
    async fn send(&mut self, to: SocketAddr, datagrams: &Datagrams) {
        let runs: &[Bytes] = match datagrams {
            Datagrams::One(d) => return self.send_one(to, d).await,
            Datagrams::Many(v) => v,
        };
        for run in gso_runs(runs) {
            if self.gso && run.len() > 1 {
                match send_segmented(&self.sock, to, run).await {
                    Ok(()) => continue,
                    Err(e) if gso_unsupported(&e) => {
                        tracing::info!(error = %e, "segmented UDP sends refused; sending datagrams one by one");
                        self.gso = false;
                    }
                    Err(e) => tracing::debug!(error = %e, %to, "segmented send failed; one by one"),
                }
            }
            for d in run {
                self.send_one(to, d).await;
            }
        }
    }

    async fn send_one(&self, to: SocketAddr, d: &[u8]) {
        if let Err(e) = self.sock.send_to(d, to).await {
            tracing::debug!(error = %e, %to, "send failed");
        }
    }
}

/// The runner's budgets and counters, apart from the machine.
#[derive(Debug)]
struct Sender {
    sockets: Vec<OutSocket>,
    gate: Gate,
}

/// The budgets a reply must fit in: the source's list budget (lists only), the face's egress.
#[derive(Debug)]
struct Gate {
    egress: ByteBudget,
    lists: SourceLimiter,
}

impl Gate {
    fn new(budgets: &Budgets) -> Self {
        Self {
            egress: ByteBudget::new(budgets.egress_bytes_per_sec),
            lists: SourceLimiter::new(budgets.list_bytes, budgets.max_tracked_sources)
                .with_growth(budgets.proven_servers_max),
        }
    }

    /// Spends the budgets of a reply of `size` bytes to `to`, or says which refused it;
    /// `proven` counts the servers `to`'s source has registered (asked only when its list
    /// budget is short or due for a recount).
    fn admit(
        &mut self,
        kind: ReplyKind,
        to: IpAddr,
        size: usize,
        t: Instant,
        proven: impl FnOnce(muster_proto::limit::SourceKey) -> usize,
    ) -> Result<(), DropReason> {
        let cost = f64::from(u32::try_from(size).unwrap_or(u32::MAX));
        if kind == ReplyKind::List && !self.lists.allow_proven(to, t, cost, proven) {
            return Err(DropReason::SourceBudget);
        }
        if !self.egress.spend(size, t) {
            return Err(DropReason::EgressBudget);
        }
        Ok(())
    }
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
        // Taken, not read: a batch delivers after each datagram that made a reply.
        for _ in 0..std::mem::take(&mut out.registrations) {
            m.count_registration();
        }
        for _ in 0..std::mem::take(&mut out.verifications_failed) {
            m.count_verification_failed();
        }
        for key in out.poll_soon.drain(..) {
            handle.poll_soon(&key);
        }
        for r in out.replies.drain(..) {
            let size = r.datagrams.bytes();
            // The registry is not locked here (the machine's writer is dropped).
            let proven = |k| handle.proven_servers(k);
            match self.gate.admit(r.kind, r.to.ip(), size, t, proven) {
                Ok(()) => {}
                Err(why) => {
                    m.count_drop(why);
                    if why == DropReason::SourceBudget {
                        m.count_rate_limited(r.to.ip());
                    }
                    continue;
                }
            }
            let Some(out) = self.sockets.get_mut(r.via) else {
                continue;
            };
            let Some(to) = to_family(r.to, out.v6) else {
                continue;
            };
            out.send(to, &r.datagrams).await;
        }
        self.gate.lists.prune(t);
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
        out_sockets.push(OutSocket {
            sock: Arc::clone(&s),
            v6,
            gso: true,
        });
        readers.spawn(read_loop(via, s, tx.clone(), handle.clone(), stop.clone()));
    }
    drop(tx);
    let mut sender = Sender {
        sockets: out_sockets,
        gate: Gate::new(&budgets),
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
                let (t, wall) = (now(), Timestamp::now());
                let mut view = handle.snapshot();
                for m in batch.drain(..) {
                    if machine.asks_for_list(&m.data) {
                        // Servers registered by earlier datagrams, of this batch too, are
                        // listed (each datagram's writer released the lock).
                        view = handle.fresh_snapshot();
                    }
                    {
                        let mut writer = handle.lazy_writer();
                        machine.on_datagram(
                            &mut Cx {
                                now: t,
                                wall,
                                view: &view,
                                registry: &mut writer,
                                out: &mut out,
                            },
                            m.via,
                            m.from,
                            &m.data,
                        );
                    }
                    // A reply leaves before the next datagram is handled: a server waiting
                    // for its challenge does not wait for the rest of the batch.
                    if !out.replies.is_empty() {
                        sender.deliver(&handle, &mut out, t).await;
                    }
                }
            }
            () = sleep_until(wake) => {
                let t = now();
                let view = handle.snapshot();
                let mut writer = handle.lazy_writer();
                machine.on_timeout(&mut Cx {
                    now: t,
                    wall: Timestamp::now(),
                    view: &view,
                    registry: &mut writer,
                    out: &mut out,
                });
                drop(writer);
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

/// [`run`] on a thread of its own, with its own reactor and timer: the daemon's faces run
/// so. On the shared runtime a face's datagrams waited for a worker to poll the reactor, which
/// busy workers (the HTTP server's tasks under an API load) do only between their tasks; here
/// the kernel wakes the face's thread itself. Falls back to [`run`] in place when no runtime
/// can be made; sockets that cannot move are logged and left out.
pub async fn run_on_own_thread<M: UdpMachine>(
    handle: MasterHandle,
    machine: M,
    sockets: Vec<UdpSocket>,
    budgets: Budgets,
    stop: CancellationToken,
) {
    let face = machine.name();
    // The face thread frees what it read and sent; idle, it lets the allocator collect its
    // pages like the daemon's workers do (see `muster_alloc::on_thread_park`).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(muster_alloc::on_thread_park)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(face, error = %e, "no runtime of its own for the face; it shares the daemon's");
            let sockets = sockets.into_iter().map(Arc::new).collect();
            return run(handle, machine, sockets, budgets, stop).await;
        }
    };
    let mut moved = Vec::with_capacity(sockets.len());
    for s in sockets {
        match s.into_std() {
            Ok(s) => moved.push(s),
            Err(e) => {
                tracing::error!(face, error = %e, "a socket of the face cannot move to its thread")
            }
        }
    }
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name(format!("muster-{face}"))
        .spawn(move || {
            rt.block_on(async move {
                let mut sockets = Vec::with_capacity(moved.len());
                for s in moved {
                    match UdpSocket::from_std(s) {
                        Ok(s) => sockets.push(Arc::new(s)),
                        Err(e) => tracing::error!(face, error = %e, "a socket of the face cannot join its thread"),
                    }
                }
                run(handle, machine, sockets, budgets, stop).await;
            });
            drop(done_tx);
        });
    match spawned {
        Ok(_) => {
            let _ = done_rx.await;
        }
        Err(e) => tracing::error!(face, error = %e, "cannot start the face's thread"),
    }
}

/// Drives a machine without sockets, on a virtual clock, for the faces' tests.
#[cfg(test)]
pub(crate) mod harness {
    use super::*;
    use muster_core::registry::{Registry, RegistryConfig};
    use muster_core::views::Publisher;
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
    use proptest::prelude::Just;

    #[test]
    fn list_budget_grows_with_proven_servers_and_stays_bounded_for_others() {
        let budgets = Budgets {
            egress_bytes_per_sec: 1 << 30,
            list_bytes: BucketConfig {
                burst: 10_000.0,
                per_second: 0.001,
            },
            max_tracked_sources: 100,
            proven_servers_max: 4,
        };
        let mut g = Gate::new(&budgets);
        let t = Instant::now();
        let (unproven, boxed): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        // 1,000-byte lists: an unproven source gets its 10,000 bytes and no more.
        let sent = |g: &mut Gate, ip, servers| {
            (0..100)
                .take_while(|_| g.admit(ReplyKind::List, ip, 1000, t, |_| servers).is_ok())
                .count()
        };
        assert_eq!(sent(&mut g, unproven, 0), 10);
        assert_eq!(
            g.admit(ReplyKind::List, unproven, 1000, t, |_| 0),
            Err(DropReason::SourceBudget)
        );
        // A source with 3 registered servers: four budgets.
        assert_eq!(sent(&mut g, boxed, 3), 40);
        // Growth is capped at `proven_servers_max` servers (4: five budgets).
        let big: IpAddr = "192.0.2.3".parse().unwrap();
        assert_eq!(sent(&mut g, big, 1000), 50);
        // Control replies spend only the egress budget.
        assert!(
            g.admit(ReplyKind::Control, unproven, 1000, t, |_| 0)
                .is_ok()
        );
        // Without growth configured, registered servers change nothing.
        let mut g = Gate::new(&Budgets {
            proven_servers_max: 0,
            ..budgets
        });
        assert_eq!(sent(&mut g, boxed, 3), 10);
        // And the egress budget still bounds a grown source.
        let mut g = Gate::new(&Budgets {
            egress_bytes_per_sec: 20_000,
            ..budgets
        });
        assert_eq!(sent(&mut g, boxed, 3), 20);
        assert_eq!(
            g.admit(ReplyKind::List, big, 1000, t, |_| 3),
            Err(DropReason::EgressBudget)
        );
    }

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

    proptest::proptest! {
        #[test]
        fn gso_runs_cover_the_datagrams_in_kernel_shape(
            sizes in proptest::collection::vec(
                proptest::prop_oneof![Just(1027usize), Just(300usize), 0usize..3000],
                0..300,
            ),
        ) {
            let datagrams: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Bytes::from(vec![u8::try_from(i % 251).unwrap(); n]))
                .collect();
            let runs: Vec<&[Bytes]> = gso_runs(&datagrams).collect();
            let joined: Vec<Bytes> = runs.iter().flat_map(|r| r.iter().cloned()).collect();
            proptest::prop_assert_eq!(&joined, &datagrams);
            for run in runs {
                let size = run[0].len();
                proptest::prop_assert!(!run.is_empty() && run.len() <= GSO_MAX_SEGMENTS);
                if run.len() > 1 {
                    proptest::prop_assert!(size > 0);
                    let total: usize = run.iter().map(Bytes::len).sum();
                    proptest::prop_assert!(total <= GSO_MAX_BYTES);
                    let (last, body) = run.split_last().unwrap();
                    proptest::prop_assert!(body.iter().all(|d| d.len() == size));
                    proptest::prop_assert!(!last.is_empty() && last.len() <= size);
                }
            }
        }
    }

    #[test]
    fn equal_datagrams_go_in_runs_of_64() {
        let list: Vec<Bytes> = (0..150).map(|_| Bytes::from(vec![7u8; 1000])).collect();
        let lens: Vec<usize> = gso_runs(&list).map(<[Bytes]>::len).collect();
        assert_eq!(lens, [64, 64, 22]);
        let big: Vec<Bytes> = (0..10).map(|_| Bytes::from(vec![7u8; 20_000])).collect();
        let lens: Vec<usize> = gso_runs(&big).map(<[Bytes]>::len).collect();
        assert_eq!(lens, [3, 3, 3, 1], "65,507 bytes per send at most");
    }

    /// Answers every datagram with its own bytes and counts it as a registration and as a
    /// failed proof.
    #[derive(Debug)]
    struct Echo;

    impl UdpMachine for Echo {
        fn name(&self) -> &'static str {
            "echo"
        }
        fn on_datagram(&mut self, cx: &mut Cx<'_>, via: usize, from: SocketAddr, data: &[u8]) {
            cx.out.registrations += 1;
            cx.out.verifications_failed += 1;
            cx.out.send(via, from, data.to_vec(), ReplyKind::Control);
        }
        fn on_timeout(&mut self, _: &mut Cx<'_>) {}
        fn poll_timeout(&self) -> Option<Instant> {
            None
        }
    }

    /// Real sockets: datagrams queued together are handled as one batch, each answered
    /// before the next is handled, and each counted once.
    #[tokio::test]
    async fn a_batch_answers_each_datagram_and_counts_it_once() {
        let handle = crate::runtime::testing::handle();
        let face = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let at = face.local_addr().unwrap();
        let stop = CancellationToken::new();
        let runner = tokio::spawn(run(
            handle.clone(),
            Echo,
            vec![face],
            Budgets::default(),
            stop.clone(),
        ));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        for i in 0..20u8 {
            client.send_to(&[i], at).await.unwrap();
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < 20 {
            let (n, _) = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                client.recv_from(&mut buf),
            )
            .await
            .expect("a reply is missing")
            .unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        got.sort_unstable();
        assert_eq!(got, (0..20u8).collect::<Vec<_>>());
        stop.cancel();
        runner.await.unwrap();
        assert_eq!(handle.metrics().registrations(), 20);
        assert_eq!(handle.metrics().verifications_failed(), 20);
    }

    /// Real sockets: a list of many datagrams arrives as the same datagrams, in order, and the
    /// loopback route takes segmented sends (the runner did not fall back).
    #[tokio::test]
    async fn a_segmented_list_arrives_datagram_by_datagram() {
        // Room for the whole list (the kernel caps the request at net.core.rmem_max, doubled):
        // the receiver reads only after the last send.
        let rx = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        let _ = rx.set_recv_buffer_size(1 << 20);
        rx.set_nonblocking(true).unwrap();
        rx.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let rx = UdpSocket::from_std(rx.into()).unwrap();
        let to = rx.local_addr().unwrap();
        let mut out = OutSocket {
            sock: Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap()),
            v6: false,
            gso: true,
        };
        let mut sent: Vec<Bytes> = Vec::new();
        for i in 0..100u32 {
            let len = match i {
                70 => 400,
                99 => 10,
                _ => 1027,
            };
            let mut d = vec![0u8; len];
            d[..4].copy_from_slice(&i.to_le_bytes());
            sent.push(Bytes::from(d));
        }
        out.send(to, &Datagrams::Many(Arc::from(sent.clone())))
            .await;
        assert!(out.gso, "loopback refused segmented sends");
        let mut buf = vec![0u8; RECV_BUF];
        for want in &sent {
            let (n, from) =
                tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv_from(&mut buf))
                    .await
                    .expect("datagram lost")
                    .unwrap();
            assert_eq!(from, out.sock.local_addr().unwrap());
            assert_eq!(&buf[..n], &want[..]);
        }
    }

    /// The kernel takes a run in one segmented send on loopback (the path the list test uses
    /// is not the fallback).
    #[tokio::test]
    async fn loopback_takes_one_segmented_send() {
        // IPv4, IPv6, and IPv4 sent from an IPv6 socket (as an IPv4-mapped address).
        for (from, to) in [
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("[::1]:0", "[::1]:0"),
            ("[::]:0", "127.0.0.1:0"),
        ] {
            let rx = UdpSocket::bind(to).await.unwrap();
            let addr: SocketAddr = from.parse().unwrap();
            let tx = socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::DGRAM,
                None,
            )
            .unwrap();
            if addr.is_ipv6() {
                tx.set_only_v6(false).unwrap();
            }
            tx.set_nonblocking(true).unwrap();
            tx.bind(&addr.into()).unwrap();
            let tx = UdpSocket::from_std(tx.into()).unwrap();
            let v6 = tx.local_addr().unwrap().is_ipv6();
            let dest = to_family(rx.local_addr().unwrap(), v6).unwrap();
            let run: Vec<Bytes> = (0..5u8)
                .map(|i| Bytes::from(vec![i; 1000 - usize::from(i / 4) * 500]))
                .collect();
            send_segmented(&tx, dest, &run).await.unwrap();
            let mut buf = vec![0u8; RECV_BUF];
            for want in &run {
                let (n, _) = rx.recv_from(&mut buf).await.unwrap();
                assert_eq!(&buf[..n], &want[..], "{from} -> {to}");
            }
        }
    }

    #[test]
    fn permanent_gso_refusals_are_told_apart() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert!(gso_unsupported(&e(nix::libc::EIO)));
        assert!(gso_unsupported(&e(nix::libc::ENOPROTOOPT)));
        assert!(!gso_unsupported(&e(nix::libc::EINVAL)));
        assert!(!gso_unsupported(&e(nix::libc::EAGAIN)));
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
