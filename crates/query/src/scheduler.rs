//! The sans-IO scheduler: many query machines, one clock passed in, no sockets.
//!
//! [`Scheduler`] decides what the engine does; the tokio driver in [`crate::engine`] only
//! moves bytes and time. It is fed events and polled for actions, like the machines it drives:
//!
//! | event (in)                                    | action (out)                                   |
//! |-----------------------------------------------|------------------------------------------------|
//! | [`Scheduler::handle_datagram`]: a datagram came | [`Scheduler::poll_transmit`]: a send slot is granted; the datagram to send in it |
//! | [`Scheduler::handle_timeout`]: the time of [`Scheduler::poll_timeout`] came | [`Scheduler::poll_timeout`]: when to wake next |
//! | [`Scheduler::handle_unreachable`]: ICMP port unreachable | [`Scheduler::poll_result`]: a finished query |
//! | [`Scheduler::handle_send_error`], [`Scheduler::set_backlog`], [`Scheduler::set_window`] | [`Scheduler::is_finished`] |
//!
//! ```text
//! loop {
//!     s.handle_timeout(now);
//!     while let Some(t) = s.poll_transmit(now, &mut buf) { send(&buf, t.destination) }
//!     while let Some(done) = s.poll_result() { report(done) }
//!     if s.is_finished() { break }
//!     select! { datagram => s.handle_datagram(now, from, &dg), sleep_until(s.poll_timeout()) => {} }
//! }
//! ```
//!
//! # Pacing
//!
//! A machine is asked for its datagrams only when it is granted a send slot, so its attempt
//! timer starts when its request is really sent. Under a rate budget (a token bucket), a query
//! waits unstarted, and a retransmission waits with its timer stopped, until a token is free;
//! a query therefore never times out for a request that was never sent. Every datagram a
//! machine writes in one grant is sent together (the bucket may go into debt by the rest of
//! one burst), so its timer covers all of them. Machines that got a datagram or whose timer
//! fired come before new queries.
//!
//! # Timing
//!
//! With `adaptive` on, each attempt's timeout is an RTO (see [`crate::rto`]): the server's own
//! estimate once it has answered, otherwise the population's, which also applies to attempts
//! already on their way (those of servers not heard from wait in send order in one queue, so
//! a new estimate applies at once). A server's own estimate gives way to a shorter population
//! estimate: its first sample may have been taken while the first burst queued. Each retransmission doubles it;
//! `attempt_timeout` caps it and is used until anything is known.
//!
//! # Backlog
//!
//! While the driver reports that its reads stop at their batch limit (replies wait unread in
//! our own receive buffer), no timer fires and no query starts, for at most one
//! `attempt_timeout`: a reply that is merely unread is late, not lost, and re-sending or
//! starting more then only adds replies to a full buffer.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use muster_proto::query::{Event, QueryConfig, QueryError, QueryMachine, Transmit};

use crate::error::Failure;
use crate::rto::{Population, RttEstimate, backed_off};

/// Timers are brought forward at most this often when the round-trip estimate falls (a pass
/// over every query in flight).
pub const REARM_SPACING: Duration = Duration::from_millis(5);

/// How the scheduler paces and bounds a batch of queries.
#[derive(Debug, Clone)]
pub struct Options {
    /// The longest a single attempt waits before the machine retransmits: the cap of every
    /// attempt timeout, and the first attempt's timeout until any round trip is measured.
    pub attempt_timeout: Duration,
    /// The shortest attempt timeout the RTO estimate may choose.
    pub min_attempt_timeout: Duration,
    /// Retransmissions after the first attempt (0 = send once).
    pub retries: u32,
    /// Overall deadline for the whole batch, from the start; `None` = none.
    pub deadline: Option<Duration>,
    /// Global send budget in packets per second; `None` = unlimited.
    pub rate: Option<u32>,
    /// Queries in flight at once (lowered to what the receive buffer holds).
    pub max_in_flight: usize,
    /// Set attempt timeouts from measured round trips (RFC 6298 RTO: per server once it
    /// answered, from all servers' replies before), with exponential backoff. Off: every
    /// attempt waits `attempt_timeout`.
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
            retries: 3,
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
    /// Builds the machine. Called when the query is granted its first send slot.
    pub build: F,
}

/// A finished query.
#[derive(Debug)]
pub struct Completed<T, O> {
    /// The job's tag.
    pub tag: T,
    /// The machine's result, or why there is none.
    pub outcome: Result<O, Failure>,
    /// From the query's first transmission to its end (zero if it was never sent).
    pub elapsed: Duration,
}

/// The most tokens the send budget holds: 50 ms of the rate, between 1 and 64.
fn burst(rate: u32) -> f64 {
    (f64::from(rate) / 20.0).clamp(1.0, 64.0)
}

/// Datagrams from addresses no query waits on (late or duplicate replies) after which the
/// population stops taking samples from retransmissions: a few may be strays.
const SPURIOUS_EVIDENCE: u64 = 8;

/// Rounding slack of the token bucket's arithmetic.
const TOKEN_EPSILON: f64 = 1e-6;

/// The form addresses take in the route table: IPv4-mapped IPv6 becomes plain IPv4, so a reply
/// is found whichever form the kernel reports.
#[must_use]
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// Token bucket of the global send rate.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    cap: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u32, now: Instant) -> Self {
        let rate = rate.max(1);
        Self {
            rate: f64::from(rate),
            cap: burst(rate),
            tokens: burst(rate),
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.cap);
        self.at = now;
    }

    /// A whole token is there (up to rounding: a wake-up computed by [`Self::next_token`]
    /// must find it, or the driver would wake again and again at the same instant).
    fn ready(&self) -> bool {
        self.tokens >= 1.0 - TOKEN_EPSILON
    }

    /// When the next whole token is there: at least a microsecond ahead while one is missing.
    fn next_token(&self) -> Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        if missing <= TOKEN_EPSILON {
            return self.at;
        }
        self.at + Duration::from_secs_f64(missing / self.rate).max(Duration::from_micros(1))
    }
}

/// Whether replies wait unread in the driver's receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backlog {
    None,
    /// Since then: timers and new queries wait, for at most one `attempt_timeout`.
    Since(Instant),
    /// Still behind after that: timers fire again.
    Expired,
}

/// Which queries wait for an address's replies: nearly always one.
#[derive(Debug)]
enum Route {
    One(usize),
    Many(Vec<usize>),
}

/// One destination of a query and whether it answered with ICMP port unreachable.
#[derive(Debug, Clone, Copy)]
struct Dest {
    addr: SocketAddr,
    refused: bool,
}

#[derive(Debug)]
struct Slot<T, M> {
    tag: T,
    machine: M,
    generation: u64,
    /// The first transmission (elapsed time counts from it).
    first_sent: Option<Instant>,
    dests: Vec<Dest>,
    /// The machine's timer as armed in the heap (none while waiting for a send slot).
    timer: Option<Instant>,
    /// In the ready queue, waiting for a send slot.
    queued: bool,
    /// A timer fired since the last burst: the next burst is a retransmission.
    fired: bool,
    /// When the last burst went out, whether it was a first attempt or follow-up (not a
    /// retransmission) and whether a reply to it was sampled already.
    burst_at: Option<Instant>,
    /// The burst before it (for population samples of retransmissions).
    prev_burst_at: Option<Instant>,
    burst_clean: bool,
    sampled: bool,
    /// Retransmissions since the last valid sample: each doubles the timeout.
    backoff: u32,
    /// This server's own estimate, once it answered an attempt sent once.
    own: Option<RttEstimate>,
    /// Something came from this server.
    heard: bool,
    /// Datagrams this query sent and the part of them a grant is sending now.
    burst_len: u32,
}

/// What the scheduler needs of [`Options`], with the deadline made absolute.
#[derive(Debug, Clone)]
struct Timing {
    max: Duration,
    min: Duration,
    retries: u32,
    adaptive: bool,
    deadline: Option<Instant>,
}

/// Counters of one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Datagrams handed out by [`Scheduler::poll_transmit`].
    pub sent: u64,
    /// Datagrams fed to [`Scheduler::handle_datagram`].
    pub received: u64,
    /// Of those, datagrams from an address no query waited on (late or duplicate replies).
    pub unrouted: u64,
    /// Timer-driven retransmission bursts.
    pub retransmissions: u64,
    /// Round-trip samples taken.
    pub samples: u64,
}

/// Many query machines scheduled together: pacing, timers, RTO, deadline, routing.
///
/// `I` yields the [`Job`]s; a job's machine is built when it is granted its first send slot,
/// or just before by [`Scheduler::prime`].
#[derive(Debug)]
pub struct Scheduler<T, M: QueryMachine, I> {
    jobs: std::iter::Fuse<I>,
    jobs_left: bool,
    /// Machines built ahead of their first send slot, in job order (see [`Self::prime`]).
    primed: VecDeque<(T, M)>,
    timing: Timing,
    window: usize,
    slots: Vec<Option<Slot<T, M>>>,
    free: Vec<usize>,
    in_flight: usize,
    next_generation: u64,
    routes: HashMap<SocketAddr, Route>,
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// First attempts of servers not heard from, in send order: (sent at, slot, generation).
    unheard: VecDeque<(Instant, usize, u64)>,
    /// Machines that may want to send, waiting for a send slot.
    ready: VecDeque<(usize, u64)>,
    /// The machine whose burst is being sent.
    draining: Option<usize>,
    results: VecDeque<Completed<T, M::Output>>,
    population: Population,
    /// The highest population RTO since timers were last brought forward, and when that was
    /// (see [`Self::bring_timers_forward`]).
    rto_high: Duration,
    brought_forward: Option<Instant>,
    /// When timers are next brought forward (the estimate fell).
    bring_forward_at: Option<Instant>,
    /// The latest send instant of a burst that was answered (a sample was taken from it): the
    /// path worked for what was sent until then.
    answered_through: Option<Instant>,
    bucket: Option<Bucket>,
    backlog: Backlog,
    scratch: Vec<usize>,
    stats: Stats,
}

impl<T, M, F, I> Scheduler<T, M, I>
where
    M: QueryMachine,
    F: FnOnce(QueryConfig) -> M,
    I: Iterator<Item = Job<T, F>>,
{
    /// A scheduler for `jobs`, started at `now` (the deadline counts from it).
    pub fn new(jobs: I, options: &Options, now: Instant) -> Self {
        let max = options.attempt_timeout.max(Duration::from_millis(1));
        Self {
            jobs: jobs.fuse(),
            jobs_left: true,
            primed: VecDeque::new(),
            timing: Timing {
                max,
                min: options.min_attempt_timeout.min(max),
                retries: options.retries,
                adaptive: options.adaptive,
                deadline: options.deadline.and_then(|d| now.checked_add(d)),
            },
            window: options.max_in_flight.max(1),
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            next_generation: 0,
            routes: HashMap::new(),
            timers: BinaryHeap::new(),
            unheard: VecDeque::new(),
            ready: VecDeque::new(),
            draining: None,
            results: VecDeque::new(),
            population: Population::default(),
            rto_high: Duration::ZERO,
            brought_forward: None,
            bring_forward_at: None,
            answered_through: None,
            bucket: options.rate.map(|r| Bucket::new(r, now)),
            backlog: Backlog::None,
            scratch: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Lower the number of queries in flight (the driver knows what its receive buffer holds).
    pub fn set_window(&mut self, window: usize) {
        self.window = self.window.min(window.max(1));
    }

    /// Queries in flight now.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The population's round-trip samples so far.
    #[must_use]
    pub fn population(&self) -> &Population {
        &self.population
    }

    /// The driver's last read stopped at its batch limit (`true`: more replies may wait
    /// unread) or emptied the socket (`false`).
    pub fn set_backlog(&mut self, now: Instant, backlog: bool) {
        if !backlog {
            self.backlog = Backlog::None;
        } else if self.backlog == Backlog::None {
            self.backlog = Backlog::Since(now);
        }
    }

    fn deferring(&self, now: Instant) -> bool {
        matches!(self.backlog, Backlog::Since(since) if now < since + self.timing.max)
    }

    /// Every job has reported and nothing is left to send or report.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        !self.jobs_left && self.in_flight == 0 && self.results.is_empty()
    }

    /// The next finished query.
    pub fn poll_result(&mut self) -> Option<Completed<T, M::Output>> {
        self.results.pop_front()
    }

    /// The timeout for the next attempt of `slot` (or of a new query when `None`).
    fn rto_for(&mut self, own: Option<RttEstimate>, backoff: u32) -> Duration {
        let t = &self.timing;
        if !t.adaptive {
            return t.max;
        }
        let population = self.population.rto();
        let base = match (own, population) {
            // A server's first sample is often taken while a scan's first burst queues at the
            // servers, and its RTO (three times that sample) would hold every later attempt of
            // that server long after the queue drained. Once the population's estimate is
            // shorter, it applies: it is at least half again the slowest of the latest
            // replies, so a server as slow as those is not re-sent to early, and one slower
            // still costs a spurious re-send, not its answer.
            (Some(e), Some(p)) => e.rto().min(p),
            (Some(e), None) => e.rto(),
            (None, p) => p.unwrap_or(t.max),
        };
        backed_off(base.clamp(t.min, t.max), backoff, t.max)
    }

    /// After a sample: once the population's RTO has fallen to two thirds of the highest it
    /// was since timers were last brought forward, they are brought forward at the next
    /// [`Self::handle_timeout`] (at most every [`REARM_SPACING`], so replies arriving together
    /// make one pass).
    fn note_estimate(&mut self, now: Instant) {
        if !self.timing.adaptive || self.bring_forward_at.is_some() {
            return;
        }
        let Some(rto) = self.population.rto() else {
            return;
        };
        self.rto_high = self.rto_high.max(rto);
        if rto.saturating_mul(3) <= self.rto_high.saturating_mul(2) {
            let spaced = self.brought_forward.map_or(now, |t| t + REARM_SPACING);
            self.bring_forward_at = Some(now.max(spaced));
        }
    }

    /// The timers of servers heard from, armed with a longer estimate, are armed again with
    /// the current one where that is sooner. (Servers not heard from wait in `unheard`, which
    /// always reads the current estimate.) A scan's first burst queues at the servers and its
    /// replies make the estimate long; without this, a request sent then and lost would wait
    /// that long after the queue drained.
    fn bring_timers_forward(&mut self, now: Instant) {
        self.bring_forward_at = None;
        self.brought_forward = Some(now);
        self.rto_high = self.population.rto().unwrap_or(self.timing.max);
        for idx in 0..self.slots.len() {
            let (own, backoff) = match self.slots.get(idx) {
                Some(Some(s)) if s.heard && !s.queued && s.timer.is_some() => (s.own, s.backoff),
                _ => continue,
            };
            let timeout = self.rto_for(own, backoff);
            let Some(Some(slot)) = self.slots.get_mut(idx) else {
                continue;
            };
            slot.machine.set_attempt_timeout(timeout);
            let Some(at) = slot.machine.poll_timeout() else {
                continue;
            };
            if slot.timer.is_some_and(|t| at < t) {
                slot.timer = Some(at);
                self.timers.push(Reverse((at, idx, slot.generation)));
            }
        }
    }

    /// The population's first-attempt timeout now (clamped), for servers not heard from.
    fn unheard_rto(&mut self) -> Duration {
        self.rto_for(None, 0)
    }

    fn has_token(&mut self, now: Instant) -> bool {
        match &mut self.bucket {
            None => true,
            Some(b) => {
                b.refill(now);
                b.ready()
            }
        }
    }

    fn can_start(&self, now: Instant) -> bool {
        self.jobs_left
            && self.in_flight < self.window
            && !self.deferring(now)
            && self.timing.deadline.is_none_or(|d| now < d)
    }

    /// A send slot is granted: the next datagram to send, written into `buf` (cleared first).
    ///
    /// Call until it returns `None` whenever the socket can take datagrams: after creation and
    /// after every `handle_*` call. The query's attempt timer starts now, so the driver must
    /// send the datagram at once.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        loop {
            if let Some(idx) = self.draining {
                buf.clear();
                let polled = match self.slots.get_mut(idx) {
                    Some(Some(slot)) => slot.machine.poll_transmit(now, buf),
                    _ => None,
                };
                match polled {
                    Some(t) => {
                        let dest = canonical(t.destination);
                        self.note_sent(idx, dest);
                        return Some(Transmit { destination: dest });
                    }
                    None => {
                        self.draining = None;
                        self.end_burst(idx, now);
                        continue;
                    }
                }
            }
            if !self.has_token(now) {
                return None;
            }
            if let Some((idx, generation)) = self.ready.pop_front() {
                if let Some(Some(slot)) = self.slots.get_mut(idx) {
                    if slot.generation == generation && slot.queued {
                        slot.queued = false;
                        slot.burst_len = 0;
                        self.draining = Some(idx);
                    }
                }
                continue;
            }
            if !self.can_start(now) {
                return None;
            }
            let (tag, machine) = match self.primed.pop_front() {
                Some(primed) => primed,
                None => {
                    let Some(job) = self.jobs.next() else {
                        self.jobs_left = false;
                        return None;
                    };
                    (job.tag, self.build(job.build))
                }
            };
            let idx = self.start(tag, machine);
            self.draining = Some(idx);
        }
    }

    /// Builds, ahead of their send slots, the machines of up to `n` jobs that could start at
    /// `now` (within the window and the rate's tokens, not deferring, before the deadline), so
    /// that the driver reads the clock for its next batch after the building: a ping then
    /// counts from an instant right before `sendmmsg`, not before the batch's machines were
    /// built (which, on a busy machine, could take milliseconds). [`Self::poll_transmit`]
    /// sends primed machines first, in job order.
    pub fn prime(&mut self, now: Instant, n: usize) {
        if !self.can_start(now) {
            return;
        }
        let tokens = match &mut self.bucket {
            None => usize::MAX,
            Some(b) => {
                b.refill(now);
                // Whole tokens, as many as the bucket could grant now.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let whole = (b.tokens + TOKEN_EPSILON).max(0.0).floor() as usize;
                whole
            }
        };
        let room = self
            .window
            .saturating_sub(self.in_flight)
            .min(tokens)
            .min(n);
        while self.primed.len() < room {
            let Some(job) = self.jobs.next() else { break };
            let machine = self.build(job.build);
            self.primed.push_back((job.tag, machine));
        }
    }

    fn build(&mut self, build: F) -> M {
        build(QueryConfig {
            attempt_timeout: self.unheard_rto(),
            retries: self.timing.retries,
        })
    }

    fn start(&mut self, tag: T, machine: M) -> usize {
        self.next_generation += 1;
        let slot = Slot {
            tag,
            machine,
            generation: self.next_generation,
            first_sent: None,
            dests: Vec::new(),
            timer: None,
            queued: false,
            fired: false,
            burst_at: None,
            prev_burst_at: None,
            burst_clean: false,
            sampled: false,
            backoff: 0,
            own: None,
            heard: false,
            burst_len: 0,
        };
        self.in_flight += 1;
        match self.free.pop() {
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
        }
    }

    fn note_sent(&mut self, idx: usize, dest: SocketAddr) {
        self.stats.sent += 1;
        if let Some(b) = &mut self.bucket {
            b.tokens -= 1.0;
        }
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        slot.burst_len += 1;
        if !slot.dests.iter().any(|d| d.addr == dest) {
            slot.dests.push(Dest {
                addr: dest,
                refused: false,
            });
            match self.routes.get_mut(&dest) {
                None => {
                    self.routes.insert(dest, Route::One(idx));
                }
                Some(Route::One(other)) => {
                    let other = *other;
                    self.routes.insert(dest, Route::Many(vec![other, idx]));
                }
                Some(Route::Many(list)) => list.push(idx),
            }
        }
    }

    /// The machine has written every datagram of this grant: start its timers.
    fn end_burst(&mut self, idx: usize, now: Instant) {
        let (sent, own, backoff, fired) = match self.slots.get(idx) {
            Some(Some(s)) => (s.burst_len > 0, s.own, s.backoff, s.fired),
            _ => return,
        };
        if sent {
            let backoff = if fired { backoff + 1 } else { backoff };
            let rto = self.rto_for(own, backoff);
            let adaptive = self.timing.adaptive;
            let Some(Some(slot)) = self.slots.get_mut(idx) else {
                return;
            };
            slot.first_sent.get_or_insert(now);
            if fired {
                self.stats.retransmissions += 1;
            }
            slot.backoff = backoff;
            slot.burst_clean = !fired;
            slot.fired = false;
            slot.prev_burst_at = slot.burst_at;
            slot.burst_at = Some(now);
            slot.sampled = false;
            if adaptive {
                // The machine's timer for what it just sent runs from now.
                slot.machine.set_attempt_timeout(rto);
                if !slot.heard {
                    self.unheard.push_back((now, idx, slot.generation));
                }
            }
        }
        self.settle(idx, now);
    }

    /// After the machine was handled and polled: report it if it finished, else arm its timer.
    fn settle(&mut self, idx: usize, now: Instant) {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        if let Some(event) = slot.machine.poll_event() {
            self.finish(idx, outcome(event), now);
            return;
        }
        match slot.machine.poll_timeout() {
            Some(at) => {
                slot.timer = Some(at);
                self.timers.push(Reverse((at, idx, slot.generation)));
            }
            None => {
                // A machine with neither a timer nor an event would wait forever: end it.
                slot.machine.abort(now);
                let event = slot
                    .machine
                    .poll_event()
                    .unwrap_or(Event::Failed(QueryError::Timeout));
                self.finish(idx, outcome(event), now);
            }
        }
    }

    /// Queue the machine for a send slot (its timer stops until then).
    fn enqueue(&mut self, idx: usize) {
        if self.draining == Some(idx) {
            return;
        }
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        slot.timer = None;
        if !slot.queued {
            slot.queued = true;
            self.ready.push_back((idx, slot.generation));
        }
    }

    fn finish(&mut self, idx: usize, outcome: Result<M::Output, Failure>, now: Instant) {
        let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) else {
            return;
        };
        for d in &slot.dests {
            let empty = match self.routes.get_mut(&d.addr) {
                Some(Route::One(i)) => *i == idx,
                Some(Route::Many(list)) => {
                    list.retain(|&i| i != idx);
                    list.is_empty()
                }
                None => false,
            };
            if empty {
                self.routes.remove(&d.addr);
            }
        }
        if self.draining == Some(idx) {
            self.draining = None;
        }
        self.free.push(idx);
        self.in_flight -= 1;
        let elapsed = slot
            .first_sent
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.results.push_back(Completed {
            tag: slot.tag,
            outcome,
            elapsed,
        });
    }

    /// A datagram arrived from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.received += 1;
        let from = canonical(from);
        let mut targets = std::mem::take(&mut self.scratch);
        targets.clear();
        match self.routes.get(&from) {
            Some(Route::One(i)) => targets.push(*i),
            Some(Route::Many(list)) => targets.extend_from_slice(list),
            None => self.stats.unrouted += 1,
        }
        for &idx in &targets {
            self.deliver(idx, now, from, datagram);
        }
        self.scratch = targets;
    }

    fn deliver(&mut self, idx: usize, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        slot.machine.handle_datagram(now, from, datagram);
        slot.heard = true;
        let mut sample = None;
        if !slot.sampled {
            if let Some(at) = slot.burst_at {
                slot.sampled = true;
                let r = now.saturating_duration_since(at);
                if slot.burst_clean {
                    sample = Some(r);
                    match &mut slot.own {
                        Some(e) => e.update(r),
                        None => slot.own = Some(RttEstimate::first(r)),
                    }
                    slot.backoff = 0;
                } else if self.stats.unrouted < SPURIOUS_EVIDENCE
                    && slot
                        .prev_burst_at
                        .is_some_and(|prev| r < at.saturating_duration_since(prev) / 2)
                {
                    // A retransmission answered within half the previous attempt's wait: the
                    // population takes it (see `crate::rto`); the server's own estimate, by
                    // Karn's rule, does not. Not once replies came for queries already over:
                    // those say that retransmissions were spurious, and their quick "answers"
                    // were the first copies' replies.
                    sample = Some(r);
                }
            }
        }
        if let Some(r) = sample {
            self.stats.samples += 1;
            self.population.add(r);
            if let Some(at) = slot.burst_at {
                self.answered_through = Some(self.answered_through.map_or(at, |a| a.max(at)));
            }
        }
        self.after_event(idx, now);
        if sample.is_some() {
            self.note_estimate(now);
        }
    }

    /// After a datagram or timer: finished → report; otherwise the machine may want to send.
    fn after_event(&mut self, idx: usize, now: Instant) {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        if let Some(event) = slot.machine.poll_event() {
            self.finish(idx, outcome(event), now);
            return;
        }
        if self.draining == Some(idx) {
            return;
        }
        self.enqueue(idx);
    }

    /// ICMP port unreachable came for datagrams sent to `dest`. A query whose every
    /// destination refused, and that has heard nothing, fails with [`Failure::Refused`].
    pub fn handle_unreachable(&mut self, now: Instant, dest: SocketAddr) {
        let dest = canonical(dest);
        let mut targets = std::mem::take(&mut self.scratch);
        targets.clear();
        match self.routes.get(&dest) {
            Some(Route::One(i)) => targets.push(*i),
            Some(Route::Many(list)) => targets.extend_from_slice(list),
            None => {}
        }
        for &idx in &targets {
            let Some(Some(slot)) = self.slots.get_mut(idx) else {
                continue;
            };
            for d in &mut slot.dests {
                if d.addr == dest {
                    d.refused = true;
                }
            }
            if !slot.heard && slot.dests.iter().all(|d| d.refused) {
                self.finish(idx, Err(Failure::Refused), now);
            }
        }
        self.scratch = targets;
    }

    /// Sending to `dest` failed (no route, no IPv6, …): every query waiting on it fails.
    pub fn handle_send_error(&mut self, now: Instant, dest: SocketAddr, kind: io::ErrorKind) {
        let dest = canonical(dest);
        let mut targets = std::mem::take(&mut self.scratch);
        targets.clear();
        match self.routes.get(&dest) {
            Some(Route::One(i)) => targets.push(*i),
            Some(Route::Many(list)) => targets.extend_from_slice(list),
            None => {}
        }
        for &idx in &targets {
            self.finish(idx, Err(Failure::Send(kind)), now);
        }
        self.scratch = targets;
    }

    /// When [`Self::handle_timeout`] must be called next (`None`: nothing is waiting on time;
    /// the driver still waits for datagrams).
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let mut wake = self.timing.deadline;
        let mut at = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        let deferring = match self.backlog {
            Backlog::Since(since) => Some(since + self.timing.max),
            Backlog::None | Backlog::Expired => None,
        };
        let may_start = self.jobs_left && self.in_flight < self.window && deferring.is_none();
        if !self.ready.is_empty() || self.draining.is_some() || may_start {
            // Only a missing token can have stopped `poll_transmit`.
            if let Some(b) = self.bucket.as_ref().filter(|b| !b.ready()) {
                at(b.next_token());
            }
        }
        if let Some(end) = deferring {
            // Timers and new queries wait until the backlog is read or the deferral ends.
            at(end);
            return wake;
        }
        if let Some(Reverse((t, _, _))) = self.timers.peek() {
            at(*t);
        }
        if let Some(t) = self.bring_forward_at {
            at(t);
        }
        if let Some(&(sent, _, _)) = self.unheard.front() {
            let rto = self.unheard_rto();
            at(sent + rto);
        }
        wake
    }

    /// Time passed: fire every timer due at `now`, and end everything at the deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timing.deadline.is_some_and(|d| now >= d) {
            self.abort_all(now);
            return;
        }
        if let Backlog::Since(since) = self.backlog {
            if now < since + self.timing.max {
                return;
            }
            // Replies keep coming faster than we read: timers fire again while reading goes on,
            // so a flooding source cannot stop every other query.
            self.backlog = Backlog::Expired;
        }
        if self.bring_forward_at.is_some_and(|t| t <= now) {
            self.bring_timers_forward(now);
        }
        while let Some(Reverse((at, idx, generation))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let live = matches!(
                self.slots.get(idx),
                Some(Some(s)) if s.generation == generation && s.timer == Some(at)
            );
            if live {
                self.fire(idx, now);
            }
        }
        // First attempts of unheard servers, oldest first, against the population's RTO now.
        let rto = self.unheard_rto();
        while let Some(&(sent, idx, generation)) = self.unheard.front() {
            let live = matches!(
                self.slots.get(idx),
                Some(Some(s)) if s.generation == generation && !s.heard && !s.queued
                    && s.burst_at == Some(sent) && s.timer.is_some()
            );
            if !live {
                self.unheard.pop_front();
                continue;
            }
            // Only once something sent as late as this was answered: until then the servers
            // may be pausing, not losing (the machine's own timer still runs, at twice the
            // RTO; see `fire`).
            if sent + rto > now {
                break;
            }
            self.unheard.pop_front();
            self.fire(idx, now);
        }
    }

    /// The slot's timer is due: bring the machine's attempt timeout up to date, and hand it
    /// the timeout if it is still due.
    fn fire(&mut self, idx: usize, now: Instant) {
        let (own, backoff) = match self.slots.get(idx) {
            Some(Some(s)) => (s.own, s.backoff),
            _ => return,
        };
        let mut rto = self.rto_for(own, backoff);
        let adaptive = self.timing.adaptive;
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        if own.is_none()
            && backoff == 0
            && self
                .answered_through
                .is_none_or(|a| slot.burst_at.is_some_and(|b| a < b))
        {
            // A first attempt, and nothing sent since it went out has been answered: a pause
            // at the servers looks the same as a loss, so wait twice as long before re-sending.
            // (Retransmissions back off already.)
            rto = rto.saturating_mul(2).min(self.timing.max);
        }
        slot.timer = None;
        if adaptive {
            slot.machine.set_attempt_timeout(rto);
            if let Some(at) = slot.machine.poll_timeout() {
                if at > now {
                    // The estimate grew since it was armed: not due yet.
                    slot.timer = Some(at);
                    self.timers.push(Reverse((at, idx, slot.generation)));
                    return;
                }
            }
        }
        slot.machine.handle_timeout(now);
        slot.fired = true;
        self.after_event(idx, now);
    }

    fn abort_all(&mut self, now: Instant) {
        self.draining = None;
        for idx in 0..self.slots.len() {
            let event = match self.slots.get_mut(idx) {
                Some(Some(slot)) => {
                    slot.machine.abort(now);
                    slot.machine
                        .poll_event()
                        .unwrap_or(Event::Failed(QueryError::Timeout))
                }
                _ => continue,
            };
            self.finish(idx, outcome(event), now);
        }
        self.ready.clear();
        self.unheard.clear();
        self.timers.clear();
        if self.jobs_left {
            for (tag, _) in self.primed.drain(..) {
                self.results.push_back(Completed {
                    tag,
                    outcome: Err(Failure::Unsent),
                    elapsed: Duration::ZERO,
                });
            }
            for job in self.jobs.by_ref() {
                self.results.push_back(Completed {
                    tag: job.tag,
                    outcome: Err(Failure::Unsent),
                    elapsed: Duration::ZERO,
                });
            }
            self.jobs_left = false;
        }
    }
}

fn outcome<O>(event: Event<O>) -> Result<O, Failure> {
    match event {
        Event::Done(o) => Ok(o),
        Event::Failed(e) => Err(Failure::Query(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_unmaps_v4_mapped() {
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5".parse().unwrap();
        assert_eq!(canonical(mapped), "127.0.0.1:5".parse().unwrap());
        let v6: SocketAddr = "[::1]:5".parse().unwrap();
        assert_eq!(canonical(v6), v6);
    }

    #[test]
    fn burst_is_50_ms_of_the_rate() {
        assert!((burst(20) - 1.0).abs() < f64::EPSILON);
        assert!((burst(200) - 10.0).abs() < f64::EPSILON);
        assert!((burst(100_000) - 64.0).abs() < f64::EPSILON);
    }
}
