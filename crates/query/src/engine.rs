//! The engine: many query machines over one UDP socket per address family.
//!
//! One task owns every machine, the sockets, a timer heap and the send budget. Datagrams are
//! routed to machines by source address (every address a machine has sent to is registered
//! for it). The engine never interprets bytes: retries, reassembly and completion are the
//! machines' business. What it adds is what needs a view of all queries at once:
//!
//! * a cap on queries in flight (`max_in_flight`, lowered to what the socket's receive buffer
//!   holds: its size / 4 KiB) and a global send rate (token bucket, packets per second);
//! * no self-inflicted loss: while a read stops at its batch limit (replies still queued in
//!   our own buffer), nothing is re-sent and nothing new starts until they are read, so a
//!   reply that is merely late is never taken for a lost one;
//! * an overall deadline, after which every machine is aborted and reports what it has;
//! * adaptive retransmission: the round-trip times it observes (first burst to first reply,
//!   never across a retransmission, as in Karn's algorithm) give a smoothed RTT, and every
//!   machine's per-attempt timeout follows it, clamped to `[min_attempt_timeout,
//!   attempt_timeout]`, and doubles after each expiry of that machine's timer (exponential
//!   backoff, up to `attempt_timeout`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use muster_proto::query::{Event, QueryConfig, QueryError, QueryMachine};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::error::Failure;

/// The largest datagram the engine receives; longer ones are truncated by the kernel and
/// then rejected by the machines' decoders.
const MAX_DATAGRAM: usize = 65_535;
/// Socket buffer size asked of the kernel, so that bursts of replies from thousands of
/// servers are not dropped before the engine reads them.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// Datagrams read per readiness event before timers and sends get a turn.
const RECV_BATCH: usize = 256;
/// Receive-buffer bytes the kernel charges for one query's reply: one or two datagrams of up to
/// ~1.4 KB, each charged about 2 KB (its buffer overhead included). Queries in flight are
/// capped at the socket's buffer divided by this, so that all their replies fit at once.
const REPLY_BUFFER_BYTES: usize = 4096;
/// The fewest queries in flight the buffer cap may leave.
const MIN_WINDOW: usize = 32;

/// How the engine paces and bounds a batch of queries.
#[derive(Debug, Clone)]
pub struct Options {
    /// The longest a single attempt waits before the machine retransmits. With `adaptive` on,
    /// the measured round-trip time lowers it.
    pub attempt_timeout: Duration,
    /// The shortest per-attempt timeout adaptive retransmission may choose.
    pub min_attempt_timeout: Duration,
    /// Retransmissions after the first attempt (0 = send once).
    pub retries: u32,
    /// Overall deadline for the whole batch, from the start; `None` = none.
    pub deadline: Option<Duration>,
    /// Global send budget in packets per second; `None` = unlimited.
    pub rate: Option<u32>,
    /// Queries in flight at once.
    pub max_in_flight: usize,
    /// Follow the measured round-trip time for retransmissions.
    pub adaptive: bool,
    /// Local IPv4 address to bind (port 0 picks one).
    pub bind_v4: SocketAddr,
    /// Local IPv6 address to bind (port 0 picks one).
    pub bind_v6: SocketAddr,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_millis(1500),
            min_attempt_timeout: Duration::from_millis(100),
            retries: 2,
            deadline: None,
            rate: None,
            max_in_flight: 4096,
            adaptive: true,
            bind_v4: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            bind_v6: SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        }
    }
}

/// One query to run: a caller's tag and a function that builds the machine from the timing the
/// engine chooses.
#[derive(Debug)]
pub struct Job<T, F> {
    /// Returned with the result, so the caller knows which query it was.
    pub tag: T,
    /// Builds the machine. Called when the query starts (not when it is queued).
    pub build: F,
}

/// A finished query.
#[derive(Debug)]
pub struct Completed<T, O> {
    /// The job's tag.
    pub tag: T,
    /// The machine's result, or why there is none.
    pub outcome: Result<O, Failure>,
    /// From the query's first transmission to its end.
    pub elapsed: Duration,
}

/// Run `jobs` and stream each result as it completes.
///
/// Must be called within a tokio runtime. The returned receiver yields exactly one
/// [`Completed`] per job (jobs never started before the deadline report
/// [`QueryError::Timeout`]) and closes when all are done. Dropping it stops the engine.
pub fn spawn<T, M, F, I>(jobs: I, options: Options) -> mpsc::Receiver<Completed<T, M::Output>>
where
    T: Send + 'static,
    M: QueryMachine + Send + 'static,
    M::Output: Send + 'static,
    F: FnOnce(QueryConfig) -> M + Send + 'static,
    I: IntoIterator<Item = Job<T, F>>,
    I::IntoIter: Send + 'static,
{
    let (tx, rx) = mpsc::channel(1024);
    let jobs = jobs.into_iter();
    tokio::spawn(async move {
        let mut engine = Engine::new(options, tx);
        if let Err(e) = engine.run(jobs).await {
            tracing::warn!(error = %e, "query engine stopped");
        }
    });
    rx
}

/// Smoothed round-trip estimate (RFC 6298 style), shared by all machines of a batch.
#[derive(Debug, Clone, Copy)]
struct RttEstimate {
    srtt: Duration,
    rttvar: Duration,
}

impl RttEstimate {
    fn first(sample: Duration) -> Self {
        Self {
            srtt: sample,
            rttvar: sample / 2,
        }
    }

    fn update(&mut self, sample: Duration) {
        let diff = self.srtt.abs_diff(sample);
        self.rttvar = (self.rttvar * 3 + diff) / 4;
        self.srtt = (self.srtt * 7 + sample) / 8;
    }

    /// The retransmission timeout this estimate suggests.
    fn rto(&self) -> Duration {
        self.srtt + (self.rttvar * 4).max(Duration::from_millis(10))
    }
}

struct Slot<T, M> {
    tag: T,
    machine: M,
    generation: u64,
    started: Instant,
    destinations: Vec<SocketAddr>,
    /// When the first burst of transmissions went out, and whether a later burst followed
    /// (then no RTT sample is taken: it would be ambiguous).
    first_burst: Option<Instant>,
    retransmitted: bool,
    answered: bool,
    timer: Option<Instant>,
    attempt_timeout: Duration,
    /// Timer expiries so far: each doubles the next attempt's timeout.
    timeouts: u32,
}

/// `base` doubled `n` times, at most `max`.
fn backed_off(base: Duration, n: u32, max: Duration) -> Duration {
    base.checked_mul(1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max)
}

struct Outgoing {
    slot: usize,
    destination: SocketAddr,
    bytes: Vec<u8>,
}

struct Engine<T, M: QueryMachine> {
    options: Options,
    tx: mpsc::Sender<Completed<T, M::Output>>,
    slots: Vec<Option<Slot<T, M>>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Queries allowed in flight: `max_in_flight`, lowered to what the receive buffers hold.
    window: usize,
    next_generation: u64,
    routes: HashMap<SocketAddr, Vec<usize>>,
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    outgoing: VecDeque<Outgoing>,
    rtt: Option<RttEstimate>,
    tokens: f64,
    tokens_at: Instant,
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    v6_error: Option<io::ErrorKind>,
    v4_error: Option<io::ErrorKind>,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The form addresses take in the route table: IPv4-mapped IPv6 becomes plain IPv4, so a reply
/// is found whichever form the kernel reports.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Best effort: a smaller buffer only means more loss under load.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// Queries whose replies fit in `socket`'s receive buffer at once (at least [`MIN_WINDOW`]).
fn buffer_window(socket: &UdpSocket) -> usize {
    let bytes = socket2::SockRef::from(socket)
        .recv_buffer_size()
        .unwrap_or(SOCKET_BUFFER_BYTES);
    (bytes / REPLY_BUFFER_BYTES).max(MIN_WINDOW)
}

async fn readable(socket: Option<&UdpSocket>) -> io::Result<()> {
    match socket {
        Some(s) => s.readable().await,
        None => std::future::pending().await,
    }
}

impl<T, M> Engine<T, M>
where
    M: QueryMachine,
{
    fn new(options: Options, tx: mpsc::Sender<Completed<T, M::Output>>) -> Self {
        let tokens = options.rate.map_or(0.0, |r| f64::from(r.max(1)).min(64.0));
        let window = options.max_in_flight.max(1);
        Self {
            options,
            tx,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            window,
            next_generation: 0,
            routes: HashMap::new(),
            timers: BinaryHeap::new(),
            outgoing: VecDeque::new(),
            rtt: None,
            tokens,
            tokens_at: now(),
            v4: None,
            v6: None,
            v6_error: None,
            v4_error: None,
        }
    }

    fn attempt_timeout(&self) -> Duration {
        match (self.options.adaptive, self.rtt) {
            (true, Some(rtt)) => rtt.rto().clamp(
                self.options.min_attempt_timeout,
                self.options.attempt_timeout,
            ),
            _ => self.options.attempt_timeout,
        }
    }

    async fn run<F, I>(&mut self, mut jobs: I) -> io::Result<()>
    where
        F: FnOnce(QueryConfig) -> M,
        I: Iterator<Item = Job<T, F>>,
    {
        let start = now();
        let deadline = self.options.deadline.and_then(|d| start.checked_add(d));
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut jobs_left = true;
        // True while the last read stopped at RECV_BATCH: more replies may be waiting in the
        // socket. Then nothing is judged lost and nothing new starts until they are read: a
        // reply queued in our own buffer is late, not lost, and re-sending or starting more
        // queries while behind only adds replies to a full buffer, which the kernel drops
        // (measured: a 10,000-server scan collapsed into thousands of drops and re-sends).
        // The deferral lasts at most one attempt timeout, so that a source flooding faster
        // than we read cannot stop every other query's timers.
        let mut backlog = false;
        let mut backlog_since: Option<Instant> = None;
        loop {
            let t = now();
            if deadline.is_some_and(|d| t >= d) {
                self.abort_all(t).await;
                for job in jobs.by_ref() {
                    self.report(
                        job.tag,
                        Err(Failure::Query(QueryError::Timeout)),
                        Duration::ZERO,
                    )
                    .await;
                }
                return Ok(());
            }
            if backlog {
                let since = *backlog_since.get_or_insert(t);
                if t.saturating_duration_since(since) < self.options.attempt_timeout {
                    backlog = self.drain(true, &mut buf).await | self.drain(false, &mut buf).await;
                    // Let the consumer of the results run between batches.
                    tokio::task::yield_now().await;
                    continue;
                }
            } else {
                backlog_since = None;
            }
            // Start new queries while there is room and the send queue is not backed up
            // (a backed-up queue means the rate budget, not concurrency, is the bottleneck).
            while jobs_left && self.in_flight < self.window && self.outgoing.len() < 64 {
                match jobs.next() {
                    Some(job) => self.start(job, t).await,
                    None => jobs_left = false,
                }
            }
            self.fire_timers(t).await;
            self.flush(t).await;
            if !jobs_left && self.in_flight == 0 && self.outgoing.is_empty() {
                return Ok(());
            }
            if self.tx.is_closed() {
                return Ok(());
            }
            let mut wake = self.timers.peek().map(|Reverse((at, _, _))| *at);
            if let Some(at) = self.next_send_at(t) {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
            if let Some(d) = deadline {
                wake = Some(wake.map_or(d, |w| w.min(d)));
            }
            let sleep_until = wake.unwrap_or_else(|| t + Duration::from_secs(3600));
            tokio::select! {
                r = readable(self.v4.as_ref()) => { r?; backlog = self.drain(true, &mut buf).await; }
                r = readable(self.v6.as_ref()) => { r?; backlog = self.drain(false, &mut buf).await; }
                () = tokio::time::sleep_until(sleep_until.into()) => {}
            }
        }
    }

    async fn start<F>(&mut self, job: Job<T, F>, t: Instant)
    where
        F: FnOnce(QueryConfig) -> M,
    {
        let attempt_timeout = self.attempt_timeout();
        let config = QueryConfig {
            attempt_timeout,
            retries: self.options.retries,
        };
        let machine = (job.build)(config);
        self.next_generation += 1;
        let slot = Slot {
            tag: job.tag,
            machine,
            generation: self.next_generation,
            started: t,
            destinations: Vec::new(),
            first_burst: None,
            retransmitted: false,
            answered: false,
            timer: None,
            attempt_timeout,
            timeouts: 0,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    *s = Some(slot);
                }
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.in_flight += 1;
        self.service(idx, t).await;
    }

    /// Collect a machine's transmits and timer, and finish it if it has an event.
    async fn service(&mut self, idx: usize, t: Instant) {
        let mut finished = None;
        let mut new_routes = Vec::new();
        if let Some(Some(slot)) = self.slots.get_mut(idx) {
            let mut sent_now = false;
            loop {
                let mut bytes = Vec::new();
                let Some(transmit) = slot.machine.poll_transmit(t, &mut bytes) else {
                    break;
                };
                let dest = canonical(transmit.destination);
                if !slot.destinations.contains(&dest) {
                    slot.destinations.push(dest);
                    new_routes.push(dest);
                }
                sent_now = true;
                self.outgoing.push_back(Outgoing {
                    slot: idx,
                    destination: dest,
                    bytes,
                });
            }
            if sent_now {
                match slot.first_burst {
                    None => slot.first_burst = Some(t),
                    Some(first) if first != t => slot.retransmitted = true,
                    Some(_) => {}
                }
            }
            if let Some(event) = slot.machine.poll_event() {
                finished = Some(event);
            } else {
                let timer = slot.machine.poll_timeout();
                if timer != slot.timer {
                    slot.timer = timer;
                    if let Some(at) = timer {
                        self.timers.push(Reverse((at, idx, slot.generation)));
                    }
                }
                if timer.is_none() {
                    // A machine with no timer and no event would wait forever: end it.
                    slot.machine.abort(t);
                    finished = slot
                        .machine
                        .poll_event()
                        .or(Some(Event::Failed(QueryError::Timeout)));
                }
            }
        }
        for dest in new_routes {
            self.routes.entry(dest).or_default().push(idx);
        }
        if let Some(event) = finished {
            let outcome = match event {
                Event::Done(o) => Ok(o),
                Event::Failed(e) => Err(Failure::Query(e)),
            };
            self.finish(idx, outcome, t).await;
        }
    }

    async fn finish(&mut self, idx: usize, outcome: Result<M::Output, Failure>, t: Instant) {
        let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) else {
            return;
        };
        for dest in &slot.destinations {
            if let Some(list) = self.routes.get_mut(dest) {
                list.retain(|&i| i != idx);
                if list.is_empty() {
                    self.routes.remove(dest);
                }
            }
        }
        self.outgoing.retain(|o| o.slot != idx);
        self.free.push(idx);
        self.in_flight -= 1;
        let elapsed = t.saturating_duration_since(slot.started);
        self.report(slot.tag, outcome, elapsed).await;
    }

    async fn report(&mut self, tag: T, outcome: Result<M::Output, Failure>, elapsed: Duration) {
        // A closed receiver means the caller lost interest; the run loop notices and stops.
        let _ = self
            .tx
            .send(Completed {
                tag,
                outcome,
                elapsed,
            })
            .await;
    }

    async fn fire_timers(&mut self, t: Instant) {
        while let Some(Reverse((at, idx, generation))) = self.timers.peek().copied() {
            if at > t {
                break;
            }
            self.timers.pop();
            let live = matches!(
                self.slots.get(idx),
                Some(Some(s)) if s.generation == generation && s.timer == Some(at)
            );
            if !live {
                continue;
            }
            let base = self.attempt_timeout();
            let max = self.options.attempt_timeout.max(base);
            if let Some(Some(slot)) = self.slots.get_mut(idx) {
                slot.timer = None;
                slot.machine.handle_timeout(t);
                // The next attempt waits twice as long as the last (RFC 6298 §5.5), up to the
                // configured timeout: a server that is slow for a moment is not given up on
                // within a few round trips.
                slot.timeouts = slot.timeouts.saturating_add(1);
                let wanted = backed_off(base, slot.timeouts, max);
                if wanted != slot.attempt_timeout {
                    slot.attempt_timeout = wanted;
                    slot.machine.set_attempt_timeout(wanted);
                }
            }
            self.service(idx, t).await;
        }
    }

    fn refill(&mut self, t: Instant) {
        if let Some(rate) = self.options.rate {
            let rate = f64::from(rate.max(1));
            let burst = rate.min(64.0);
            let dt = t.saturating_duration_since(self.tokens_at).as_secs_f64();
            self.tokens = (self.tokens + dt * rate).min(burst);
            self.tokens_at = t;
        }
    }

    fn next_send_at(&self, t: Instant) -> Option<Instant> {
        if self.outgoing.is_empty() {
            return None;
        }
        match self.options.rate {
            None => Some(t),
            Some(rate) => {
                let missing = (1.0 - self.tokens).max(0.0);
                Some(t + Duration::from_secs_f64(missing / f64::from(rate.max(1))))
            }
        }
    }

    async fn flush(&mut self, t: Instant) {
        self.refill(t);
        while let Some(out) = self.outgoing.front() {
            if self.options.rate.is_some() {
                if self.tokens < 1.0 {
                    return;
                }
                self.tokens -= 1.0;
            }
            let (idx, dest) = (out.slot, out.destination);
            let result = self.send(dest, idx).await;
            self.outgoing.pop_front();
            if let Err(kind) = result {
                self.finish(idx, Err(Failure::Send(kind)), t).await;
            }
        }
    }

    /// Binds the socket of one family (IPv4 when `v4`) on first use; the window shrinks to what
    /// its receive buffer holds. A family whose bind failed keeps failing with that error.
    fn ensure_bound(&mut self, v4: bool) -> Result<(), io::ErrorKind> {
        let (slot, error, addr) = if v4 {
            (&mut self.v4, &mut self.v4_error, self.options.bind_v4)
        } else {
            (&mut self.v6, &mut self.v6_error, self.options.bind_v6)
        };
        if slot.is_none() && error.is_none() {
            match bind(addr) {
                Ok(s) => {
                    self.window = self.window.min(buffer_window(&s));
                    *slot = Some(s);
                }
                Err(e) => *error = Some(e.kind()),
            }
        }
        match (slot, error) {
            (Some(_), _) => Ok(()),
            (None, e) => Err(e.unwrap_or(io::ErrorKind::Other)),
        }
    }

    /// The bound socket of one family (IPv4 when `v4`), if any.
    fn socket(&self, v4: bool) -> Option<&UdpSocket> {
        if v4 {
            self.v4.as_ref()
        } else {
            self.v6.as_ref()
        }
    }

    async fn send(&mut self, dest: SocketAddr, idx: usize) -> Result<(), io::ErrorKind> {
        self.ensure_bound(dest.is_ipv4())?;
        let Some(socket) = self.socket(dest.is_ipv4()) else {
            return Err(io::ErrorKind::Other);
        };
        let Some(out) = self.outgoing.front() else {
            return Ok(());
        };
        debug_assert_eq!(out.slot, idx);
        match socket.send_to(&out.bytes, dest).await {
            Ok(_) => Ok(()),
            // ICMP errors from earlier sends surface here on Linux; they say nothing about
            // this datagram, and the machine's retry handles a real loss.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
            Err(e) => Err(e.kind()),
        }
    }

    /// Reads up to [`RECV_BATCH`] datagrams from one socket; true when it stopped at that
    /// limit (more may be waiting).
    async fn drain(&mut self, v4: bool, buf: &mut [u8]) -> bool {
        for _ in 0..RECV_BATCH {
            let Some(socket) = self.socket(v4) else {
                return false;
            };
            let (n, from) = match socket.try_recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // ICMP port unreachable from an earlier send: nothing to read, keep going.
                Err(_) => continue,
            };
            let t = now();
            let from = canonical(from);
            // Usually one query per address: copy its index without allocating. A handler
            // may add routes, so the list is not borrowed across the calls.
            let targets: Vec<usize> = match self.routes.get(&from).map(Vec::as_slice) {
                Some([one]) => {
                    let idx = *one;
                    self.deliver(idx, t, from, buf.get(..n).unwrap_or_default())
                        .await;
                    continue;
                }
                Some(many) => many.to_vec(),
                None => {
                    tracing::trace!(%from, "datagram from an address no query sent to");
                    continue;
                }
            };
            let datagram = buf.get(..n).unwrap_or_default();
            for idx in targets {
                self.deliver(idx, t, from, datagram).await;
            }
        }
        true
    }

    /// Hand one datagram to the machine in slot `idx`, sampling the round trip on its first
    /// answer, and service it.
    async fn deliver(&mut self, idx: usize, t: Instant, from: SocketAddr, datagram: &[u8]) {
        let mut sample = None;
        if let Some(Some(slot)) = self.slots.get_mut(idx) {
            if !slot.answered {
                slot.answered = true;
                if !slot.retransmitted {
                    sample = slot.first_burst.map(|f| t.saturating_duration_since(f));
                }
            }
            slot.machine.handle_datagram(t, from, datagram);
        }
        if let Some(s) = sample {
            match &mut self.rtt {
                Some(r) => r.update(s),
                None => self.rtt = Some(RttEstimate::first(s)),
            }
        }
        self.service(idx, t).await;
    }

    async fn abort_all(&mut self, t: Instant) {
        for idx in 0..self.slots.len() {
            let event = match self.slots.get_mut(idx) {
                Some(Some(slot)) => {
                    slot.machine.abort(t);
                    slot.machine
                        .poll_event()
                        .unwrap_or(Event::Failed(QueryError::Timeout))
                }
                _ => continue,
            };
            let outcome = match event {
                Event::Done(o) => Ok(o),
                Event::Failed(e) => Err(Failure::Query(e)),
            };
            self.finish(idx, outcome, t).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_estimate_follows_samples() {
        let ms = Duration::from_millis;
        let mut r = RttEstimate::first(ms(100));
        assert_eq!(r.rto(), ms(100) + ms(200));
        for _ in 0..50 {
            r.update(ms(10));
        }
        assert!(r.rto() < ms(40), "{:?}", r.rto());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let ms = Duration::from_millis;
        assert_eq!(backed_off(ms(10), 0, ms(100)), ms(10));
        assert_eq!(backed_off(ms(10), 1, ms(100)), ms(20));
        assert_eq!(backed_off(ms(10), 3, ms(100)), ms(80));
        assert_eq!(backed_off(ms(10), 4, ms(100)), ms(100));
        assert_eq!(backed_off(ms(10), u32::MAX, ms(100)), ms(100));
        assert_eq!(backed_off(Duration::MAX, 2, ms(100)), ms(100));
    }

    #[test]
    fn canonical_unmaps_v4_mapped() {
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5".parse().unwrap();
        assert_eq!(canonical(mapped), "127.0.0.1:5".parse().unwrap());
        let v6: SocketAddr = "[::1]:5".parse().unwrap();
        assert_eq!(canonical(v6), v6);
    }
}
