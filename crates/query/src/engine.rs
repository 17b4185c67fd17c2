//! The engine: the tokio driver of a [`Scheduler`]. It only moves bytes and time.
//!
//! One task owns the scheduler and one UDP socket per address family (bound on first use).
//! Each turn of its loop: fire due timers, take every datagram the scheduler grants a send
//! slot and send them in batches (`sendmmsg`), report finished queries, then sleep until a
//! socket has datagrams or ICMP errors (`recvmmsg`, the error queue) or the scheduler's next
//! instant. Everything else — pacing, timers, RTO, routing, deadline — is the scheduler's,
//! tested on a virtual clock.
//!
//! What the driver adds is what only it can see: the receive buffer's size (queries in flight
//! are capped by it) and whether a read stopped at its batch limit with more replies waiting
//! (then the scheduler defers timers and new queries; see [`crate::scheduler`]).
//!
//! # Round-trip times
//!
//! The machines measure a server's ping, and the scheduler its RTT samples, from the instants
//! the driver passes: a datagram is granted at the instant passed to `poll_transmit`, and a
//! reply comes at the instant passed to `handle_datagram`. So that neither includes the
//! engine's own queueing when thousands of queries are in flight, the clock is read again for
//! every batch of 32 datagrams (`socket::BATCH`), right before the batch is taken from the
//! scheduler and sent (`sendmmsg` follows at once), and each reply is handed on with the
//! instant it reached the socket (the kernel's arrival stamp; see `socket.rs`), not the later
//! instant it was read. A reply may therefore carry an instant earlier than the scheduler's
//! latest call; the scheduler and the machines take durations with
//! `saturating_duration_since`.
//!
//! What would come between the clock and `sendmmsg` is done before the clock is read: the
//! machines a batch starts are built first (`Scheduler::prime`; building 32 took milliseconds
//! when the machine was busy, a browser drawing its screen on two cores), and the IPv4 socket
//! is bound when the engine starts (binding took up to a millisecond and more). What is still
//! counted: the microseconds between taking a batch and `sendmmsg` (encoding its requests), a
//! batch that waits for room in a full send buffer, and the binding of an IPv6 socket by its
//! first batch. (A new socket's first batch is sent at once, not after the runtime's next
//! turn: see `Family::flush`.)

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::query::{QueryConfig, QueryMachine};
use tokio::sync::mpsc;

// The job, option and completion types are the scheduler's; re-exported so
// `muster_query::engine::{Job, Options, Completed}` keep working.
use crate::clock::now;
use crate::scheduler::Scheduler;
pub use crate::scheduler::{Completed, Job, Options};
use crate::socket::{BATCH, Family, Flushed, Outbox};

/// Datagrams read per readiness event before timers and sends get a turn.
const RECV_BATCH: usize = 256;

/// Run `jobs` and stream each result as it completes.
///
/// Must be called within a tokio runtime. The returned receiver yields exactly one
/// [`Completed`] per job (jobs not sent before the deadline report [`crate::Failure::Unsent`]) and
/// closes when all are done. Dropping it stops the engine.
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
        if let Err(e) = drive(jobs, options, tx).await {
            tracing::warn!(error = %e, "query engine stopped");
        }
    });
    rx
}

/// The socket of one family, bound on first use; a family whose bind failed keeps failing.
#[derive(Debug)]
enum Slot {
    Unbound(SocketAddr),
    Bound(Box<Family>, Outbox),
    Failed(io::ErrorKind),
}

impl Slot {
    fn family(&mut self) -> Option<&mut Family> {
        match self {
            Self::Bound(f, _) => Some(f),
            _ => None,
        }
    }

    fn pending(&self) -> bool {
        matches!(self, Self::Bound(_, out) if !out.is_empty())
    }
}

/// Binds `slot` if it is not yet; the window of a socket bound now.
fn bind(slot: &mut Slot) -> Option<usize> {
    let Slot::Unbound(addr) = *slot else {
        return None;
    };
    match Family::bind(addr) {
        Ok(f) => {
            let window = f.window;
            *slot = Slot::Bound(Box::new(f), Outbox::default());
            Some(window)
        }
        Err(e) => {
            *slot = Slot::Failed(e.kind());
            None
        }
    }
}

async fn readable(slot: &Slot) -> io::Result<bool> {
    match slot {
        Slot::Bound(f, _) => f.readable().await,
        _ => std::future::pending().await,
    }
}

async fn writable(slot: &Slot) -> io::Result<()> {
    match slot {
        Slot::Bound(f, out) if !out.is_empty() => f.writable().await,
        _ => std::future::pending().await,
    }
}

async fn drive<T, M, F, I>(
    jobs: I,
    options: Options,
    tx: mpsc::Sender<Completed<T, M::Output>>,
) -> io::Result<()>
where
    M: QueryMachine,
    F: FnOnce(QueryConfig) -> M,
    I: Iterator<Item = Job<T, F>>,
{
    let started = now();
    let mut sched = Scheduler::new(jobs, &options, started);
    let mut v4 = Slot::Unbound(options.bind_v4);
    let mut v6 = Slot::Unbound(options.bind_v6);
    // The IPv4 socket is bound before the first batch's clock is read: binding (the socket, its
    // buffers, its registration with the runtime) took from a quarter to more than a
    // millisecond on a busy machine, and every ping of that batch counted it. An engine
    // almost always has IPv4 queries; the IPv6 socket is bound when the first IPv6 query
    // comes (its first batch then carries the binding).
    if let Some(window) = bind(&mut v4) {
        sched.set_window(window);
    }
    let mut scratch = Vec::with_capacity(2048);
    let mut stamped = 0usize;
    loop {
        sched.handle_timeout(now());
        // Take what the scheduler grants, a batch at a time, while the sockets take it. Each
        // batch is granted at the instant it is sent: the ping counts from there.
        loop {
            // The batch's new machines are built first, so that its instant is read after.
            sched.prime(now(), BATCH);
            let t = now();
            let mut queued = 0;
            while queued < BATCH {
                let Some(transmit) = sched.poll_transmit(t, &mut scratch) else {
                    break;
                };
                let dest = transmit.destination;
                let slot = if dest.is_ipv4() { &mut v4 } else { &mut v6 };
                if let Some(window) = bind(slot) {
                    sched.set_window(window);
                }
                match slot {
                    Slot::Bound(_, out) => {
                        out.push(dest, &scratch);
                        queued += 1;
                    }
                    Slot::Failed(kind) => sched.handle_send_error(t, dest, *kind),
                    Slot::Unbound(_) => {}
                }
            }
            let mut blocked = false;
            for slot in [&mut v4, &mut v6] {
                if let Slot::Bound(f, out) = slot {
                    let flushed = f.flush(out, &mut |dest, kind| {
                        sched.handle_send_error(now(), dest, kind);
                    });
                    blocked |= flushed == Flushed::Blocked;
                }
            }
            if queued < BATCH || blocked {
                break;
            }
        }
        while let Some(done) = sched.poll_result() {
            if tx.send(done).await.is_err() {
                // The caller lost interest.
                return Ok(());
            }
        }
        if sched.is_finished() && !v4.pending() && !v6.pending() {
            let stats = sched.stats();
            tracing::debug!(
                sent = stats.sent,
                received = stats.received,
                unrouted = stats.unrouted,
                retransmissions = stats.retransmissions,
                samples = stats.samples,
                stamped,
                rtt_p50 = ?sched.population().quantile(0.5),
                rtt_p99 = ?sched.population().quantile(0.99),
                srtt = ?sched.population().smoothed(),
                seconds = now().saturating_duration_since(started).as_secs_f64(),
                "query engine finished"
            );
            return Ok(());
        }
        let wake = sched
            .poll_timeout()
            .unwrap_or_else(|| now() + Duration::from_secs(3600));
        tokio::select! {
            r = readable(&v4) => stamped += service(&mut v4, &mut sched, r?)?,
            r = readable(&v6) => stamped += service(&mut v6, &mut sched, r?)?,
            r = writable(&v4) => r?,
            r = writable(&v6) => r?,
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

/// Read the socket that became ready: its error queue, then up to [`RECV_BATCH`] datagrams,
/// each handed to the scheduler with its arrival instant. Returns how many carried the
/// kernel's arrival stamp.
fn service<T, M, F, I>(
    slot: &mut Slot,
    sched: &mut Scheduler<T, M, I>,
    errors: bool,
) -> io::Result<usize>
where
    M: QueryMachine,
    F: FnOnce(QueryConfig) -> M,
    I: Iterator<Item = Job<T, F>>,
{
    let Some(family) = slot.family() else {
        return Ok(0);
    };
    let t = now();
    if errors {
        if let Err(e) = family.read_errors(&mut |dest| sched.handle_unreachable(t, dest)) {
            tracing::debug!(error = %e, "reading the socket's error queue failed");
        }
    }
    let read = family.read(RECV_BATCH, &mut |from, datagram, arrived| {
        sched.handle_datagram(arrived, from, datagram);
    })?;
    sched.set_backlog(t, !read.drained);
    Ok(read.stamped)
}
