//! The scheduler on a virtual clock: a simulated network of echo servers with latency, loss,
//! reordering, duplicates and late replies; no sockets, no sleeping. Each test runs the same
//! loop the tokio driver runs and checks what was sent when and what each query reported.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_proto::query::QueryError;
use muster_query::{Failure, Job, Options, Scheduler};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};

use crate::echo::Echo;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How one simulated server treats requests.
#[derive(Debug, Clone)]
struct Server {
    rtt: Duration,
    /// Requests (by their order of arrival) this server ignores.
    ignore: Vec<u32>,
    /// Share of requests lost at random.
    loss: f64,
    silent: bool,
    /// Every reply arrives twice.
    duplicate: bool,
    /// Extra delay of the reply to the first request.
    first_late: Duration,
    /// A random extra delay up to this, per reply (reordering across servers).
    jitter: Duration,
    /// The port is closed: the host answers with ICMP port unreachable.
    closed: bool,
}

impl Server {
    fn answering(rtt: Duration) -> Self {
        Self {
            rtt,
            ignore: Vec::new(),
            loss: 0.0,
            silent: false,
            duplicate: false,
            first_late: Duration::ZERO,
            jitter: Duration::ZERO,
            closed: false,
        }
    }
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], u16::try_from(1000 + i).unwrap()))
}

/// What a run did.
#[derive(Debug)]
struct Run {
    /// (query index, result, when it was reported)
    results: Vec<(u32, Result<u32, Failure>, Duration)>,
    /// Send times of every request, per server.
    sends: Vec<Vec<Duration>>,
    end: Duration,
    stats: muster_query::scheduler::Stats,
}

impl Run {
    fn ok(&self) -> usize {
        self.results.iter().filter(|(_, r, _)| r.is_ok()).count()
    }

    fn result(&self, n: u32) -> &Result<u32, Failure> {
        &self.results.iter().find(|(i, _, _)| *i == n).unwrap().1
    }
}

enum Arrival {
    Datagram(SocketAddr, Vec<u8>),
    Unreachable(SocketAddr),
}

/// Drive a scheduler over `servers` on a virtual clock until every query reported.
fn simulate(servers: &[Server], options: &Options, seed: u64) -> Run {
    simulate_with_pause(servers, options, seed, None)
}

/// As [`simulate`], each query `rounds` exchanges one after the other.
fn simulate_rounds(servers: &[Server], options: &Options, seed: u64, rounds: u32) -> Run {
    simulate_full(servers, options, seed, None, rounds)
}

/// As [`simulate`]; with `pause = (from, to)`, every reply due between those instants (from
/// the start) arrives at `to`: the servers stall.
fn simulate_with_pause(
    servers: &[Server],
    options: &Options,
    seed: u64,
    pause: Option<(Duration, Duration)>,
) -> Run {
    simulate_full(servers, options, seed, pause, 1)
}

fn simulate_full(
    servers: &[Server],
    options: &Options,
    seed: u64,
    pause: Option<(Duration, Duration)>,
    rounds: u32,
) -> Run {
    let t0 = Instant::now();
    let jobs = (0..servers.len()).map(|i| {
        let n = u32::try_from(i).unwrap();
        Job {
            tag: n,
            build: move |cfg| Echo::with_rounds(addr(i), n, cfg, rounds),
        }
    });
    let mut sched = Scheduler::new(jobs, options, t0);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut arrivals: BinaryHeap<Reverse<(Instant, u64, usize)>> = BinaryHeap::new();
    let mut payloads: Vec<Option<Arrival>> = Vec::new();
    let mut sends = vec![Vec::new(); servers.len()];
    let mut results = Vec::new();
    let mut now = t0;
    let mut buf = Vec::new();
    for round in 0.. {
        assert!(round < 1_000_000, "no end after a million rounds");
        sched.handle_timeout(now);
        // As the engine does: machines built ahead of the batch.
        sched.prime(now, 32);
        while let Some(t) = sched.poll_transmit(now, &mut buf) {
            let i = usize::from(t.destination.port()) - 1000;
            let server = &servers[i];
            let nth = u32::try_from(sends[i].len()).unwrap();
            sends[i].push(now - t0);
            let mut push = |mut at: Instant, a: Arrival| {
                if let Some((from, to)) = pause {
                    if at >= t0 + from && at < t0 + to {
                        at = t0 + to;
                    }
                }
                payloads.push(Some(a));
                arrivals.push(Reverse((at, payloads.len() as u64, payloads.len() - 1)));
            };
            if server.closed {
                push(now + server.rtt, Arrival::Unreachable(t.destination));
                continue;
            }
            let lost = server.silent
                || server.ignore.contains(&nth)
                || (server.loss > 0.0 && rng.random_bool(server.loss));
            if lost {
                continue;
            }
            let reply = String::from_utf8(buf.clone())
                .unwrap()
                .replace("ping", "pong")
                .into_bytes();
            let mut at = now + server.rtt;
            if nth == 0 {
                at += server.first_late;
            }
            if !server.jitter.is_zero() {
                at += server.jitter.mul_f64(rng.random::<f64>());
            }
            push(at, Arrival::Datagram(t.destination, reply.clone()));
            if server.duplicate {
                push(at, Arrival::Datagram(t.destination, reply));
            }
        }
        while let Some(done) = sched.poll_result() {
            let n = done.tag;
            // A query is never reported lost before its first request went out.
            if let Err(Failure::Query(QueryError::Timeout)) = done.outcome {
                assert!(!sends[n as usize].is_empty(), "query {n} timed out unsent");
            }
            results.push((n, done.outcome, now - t0));
        }
        if sched.is_finished() {
            break;
        }
        let next_arrival = arrivals.peek().map(|Reverse((at, _, _))| *at);
        let wake = match (sched.poll_timeout(), next_arrival) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a
                .or(b)
                .expect("the scheduler waits on nothing but is not finished"),
        };
        now = now.max(wake);
        while let Some(Reverse((at, _, k))) = arrivals.peek().copied() {
            if at > now {
                break;
            }
            arrivals.pop();
            match payloads[k].take() {
                Some(Arrival::Datagram(from, bytes)) => sched.handle_datagram(now, from, &bytes),
                Some(Arrival::Unreachable(dest)) => sched.handle_unreachable(now, dest),
                None => {}
            }
        }
    }
    results.sort_by_key(|r| r.0);
    assert_eq!(results.len(), servers.len(), "one result per query");
    for (k, r) in results.iter().enumerate() {
        assert_eq!(r.0 as usize, k, "each query reported exactly once");
    }
    Run {
        results,
        sends,
        end: now - t0,
        stats: sched.stats(),
    }
}

fn options() -> Options {
    Options {
        attempt_timeout: ms(1500),
        min_attempt_timeout: ms(10),
        retries: 3,
        ..Options::default()
    }
}

#[test]
fn all_answer_at_once() {
    let servers = vec![Server::answering(ms(20)); 300];
    let run = simulate(&servers, &options(), 1);
    assert_eq!(run.ok(), 300);
    assert_eq!(run.stats.sent, 300);
    assert_eq!(run.end, ms(20));
}

/// A lost first request is re-sent after the population's RTO, long before `--timeout`:
/// replies from the other servers measured the round trip meanwhile.
#[test]
fn loss_is_retried_after_the_population_rto() {
    let mut servers = vec![Server::answering(ms(20)); 100];
    servers[7].ignore = vec![0];
    let run = simulate(&servers, &options(), 1);
    assert_eq!(run.ok(), 100);
    let retry = run.sends[7][1];
    // RTO = max(SRTT + max(G, 4·RTTVAR), 3/2 · the largest recent sample): 99 identical
    // 20 ms samples leave RTTVAR near zero, so half again the 20 ms decides.
    assert_eq!(retry, ms(30));
    assert_eq!(run.end, retry + ms(20));
}

/// Every first reply is late (the first burst queued at the servers), every later one quick.
/// A server whose second request is lost is re-sent to once the quick replies have brought
/// the population's RTO down, not after its own RTO (three times its late first sample), nor
/// after the population's RTO at the moment the request went out (half again the late
/// samples): timers armed with a longer estimate are brought forward when it falls.
#[test]
fn a_lost_later_request_waits_the_fallen_population_rto() {
    let mut server = Server::answering(ms(5));
    server.first_late = ms(100);
    let mut servers = vec![server; 300];
    servers[7].ignore = vec![1];
    let run = simulate_rounds(&servers, &options(), 1, 2);
    assert_eq!(run.ok(), 300);
    let sends = &run.sends[7];
    assert_eq!(sends.len(), 3, "{sends:?}");
    assert_eq!(sends[1], ms(105));
    // The others' second replies came at 110 ms; the RTO then is a few milliseconds (at
    // least the 10 ms floor). Without bringing the timer forward: 105 + 157 ms.
    assert!(sends[2] < ms(130), "{sends:?}");
}

#[test]
fn random_loss_everyone_answers_within_retries() {
    let mut server = Server::answering(ms(30));
    server.loss = 0.1;
    server.jitter = ms(10);
    let servers = vec![server; 2000];
    let run = simulate(&servers, &options(), 42);
    // Four attempts at 10 % loss: about 0.2 of 2,000 expected to fail.
    assert!(run.ok() >= 1998, "{}", run.ok());
    // The last to end are the few whose four attempts were all lost: RTO (~60 ms) doubled
    // three times, about 900 ms in all.
    assert!(run.end < ms(1000), "{:?}", run.end);
    // Nothing was re-sent that had been answered: one request per attempt lost.
    let extra = run.stats.sent - 2000;
    assert!(
        extra < 320,
        "{extra} retransmissions for ~222 expected losses"
    );
}

#[test]
fn reordered_replies() {
    let mut server = Server::answering(ms(5));
    server.jitter = ms(50);
    let servers = vec![server; 200];
    let run = simulate(&servers, &options(), 3);
    assert_eq!(run.ok(), 200);
}

#[test]
fn duplicate_replies_are_reported_once() {
    let mut server = Server::answering(ms(10));
    server.duplicate = true;
    let servers = vec![server; 50];
    let run = simulate(&servers, &options(), 1);
    assert_eq!(run.ok(), 50);
    assert_eq!(run.stats.received, 100);
    assert_eq!(run.stats.unrouted, 50, "the second copy finds no query");
}

/// The first reply arrives after the retry went out: the query ends once, and the ambiguous
/// round trip is not sampled (Karn).
#[test]
fn late_reply_after_a_retry() {
    let mut servers = vec![Server::answering(ms(10)); 20];
    servers[0].first_late = ms(3000);
    servers[0].rtt = ms(10);
    let opts = Options {
        max_in_flight: 1,
        ..options()
    };
    // Run the slow one last, when the population knows a 10 ms round trip.
    servers.rotate_left(1);
    let run = simulate(&servers, &opts, 1);
    assert_eq!(run.ok(), 20);
    assert_eq!(run.sends[19].len(), 2, "{:?}", run.sends[19]);
    // 19 clean samples; the re-send, answered within half the wait before it, is a population
    // sample too (the first copy's reply comes long after the query is over).
    assert_eq!(run.stats.samples, 20);
}

/// Servers that answer late (here 35 ms against 20 ms for the first hundred) are waited for,
/// not re-sent to: while nothing sent as late has been answered, first attempts wait twice
/// the population's RTO.
#[test]
fn late_servers_are_waited_for() {
    let mut servers = vec![Server::answering(ms(20)); 600];
    for s in servers.iter_mut().skip(100) {
        // From the 101st on, first replies come 15 ms late: after the population's RTO
        // (30 ms), before twice that.
        s.first_late = ms(15);
    }
    let opts = Options {
        max_in_flight: 100,
        ..options()
    };
    let run = simulate(&servers, &opts, 1);
    assert_eq!(run.ok(), 600);
    assert_eq!(run.stats.sent, 600, "{:?}", run.stats);
}

/// The servers stall for 40 ms in a scan whose round trips are 20 ms (RTO 30 ms): nothing is
/// lost, so nothing may be re-sent. A first attempt sent after the last answered one waits
/// twice the RTO.
#[test]
fn a_stall_at_the_servers_is_not_taken_for_loss() {
    let servers = vec![Server::answering(ms(20)); 2000];
    let opts = Options {
        max_in_flight: 200,
        ..options()
    };
    let run = simulate_with_pause(&servers, &opts, 1, Some((ms(100), ms(140))));
    assert_eq!(run.ok(), 2000);
    assert_eq!(run.stats.retransmissions, 0, "{:?}", run.stats);
}

#[test]
fn rate_paces_every_send_and_times_nothing_out() {
    // `scan --rate 200` over 500 servers that answer at once.
    let servers = vec![Server::answering(ms(1)); 500];
    let opts = Options {
        rate: Some(200),
        ..options()
    };
    let run = simulate(&servers, &opts, 1);
    assert_eq!(run.ok(), 500);
    assert_eq!(run.stats.sent, 500);
    // 10 at once (50 ms of budget), then one every 5 ms.
    assert!(run.end >= ms(2440) && run.end <= ms(2460), "{:?}", run.end);
    let mut all: Vec<Duration> = run.sends.iter().flatten().copied().collect();
    all.sort();
    // Never more than the burst (10) plus the rate's 10 in any 50 ms.
    for w in all.windows(21) {
        assert!(w[20] - w[0] >= ms(50), "more than 20 sends in 50 ms: {w:?}");
    }
}

#[test]
fn rate_20_retries_0_over_60_servers() {
    let servers = vec![Server::answering(ms(2)); 60];
    let opts = Options {
        rate: Some(20),
        retries: 0,
        ..options()
    };
    let run = simulate(&servers, &opts, 1);
    assert_eq!(run.ok(), 60);
    assert!(run.end >= ms(2950) && run.end <= ms(3000), "{:?}", run.end);
}

#[test]
fn deadline_ends_sent_and_unsent_queries() {
    let mut silent = Server::answering(ms(1));
    silent.silent = true;
    let servers = vec![silent; 100];
    let opts = Options {
        rate: Some(10),
        deadline: Some(ms(1000)),
        ..options()
    };
    let run = simulate(&servers, &opts, 1);
    assert_eq!(run.end, ms(1000));
    for (n, r, at) in &run.results {
        assert_eq!(*at, ms(1000));
        let sent = !run.sends[*n as usize].is_empty();
        match r {
            Err(Failure::Query(QueryError::Timeout)) => assert!(sent),
            Err(Failure::Unsent) => assert!(!sent),
            other => panic!("{other:?}"),
        }
    }
    let sent = run.sends.iter().filter(|s| !s.is_empty()).count();
    // One token at the start, then ten a second (retransmissions compete for them).
    assert!((5..=11).contains(&sent), "{sent}");
}

/// Once a server is known, every retransmission doubles the timeout, up to `--timeout`.
#[test]
fn retransmissions_back_off_exponentially() {
    let mut servers = vec![Server::answering(ms(40)); 10];
    servers[9].silent = true;
    let opts = Options {
        max_in_flight: 9,
        retries: 6,
        attempt_timeout: ms(1000),
        ..options()
    };
    let run = simulate(&servers, &opts, 1);
    assert_eq!(
        run.result(9),
        &Err(Failure::Query(QueryError::Timeout)),
        "{:?}",
        run.sends[9]
    );
    let s = &run.sends[9];
    assert_eq!(s.len(), 7);
    let gaps: Vec<Duration> = s.windows(2).map(|w| w[1] - w[0]).collect();
    // It started after the others were answered, so nothing sent as late was: its first
    // attempt waits twice the RTO (60 ms, 3/2 of the 40 ms round trips). Then each re-send
    // doubles the wait, up to --timeout.
    assert_eq!(gaps[0], ms(120), "{gaps:?}");
    assert_eq!(gaps[1], ms(120), "{gaps:?}");
    for w in gaps[1..].windows(2) {
        assert!(w[1] == w[0] * 2 || w[1] == ms(1000), "{gaps:?}");
    }
    assert_eq!(*gaps.last().unwrap(), ms(1000), "{gaps:?}");
}

#[test]
fn no_adaptive_timing_waits_the_timeout() {
    let mut servers = vec![Server::answering(ms(5)); 10];
    servers[3].ignore = vec![0];
    let opts = Options {
        adaptive: false,
        attempt_timeout: ms(200),
        ..options()
    };
    let run = simulate(&servers, &opts, 1);
    assert_eq!(run.ok(), 10);
    assert_eq!(run.sends[3], vec![ms(0), ms(200)]);
}

#[test]
fn closed_port_fails_within_a_round_trip() {
    let mut servers = vec![Server::answering(ms(5)); 3];
    servers[1].closed = true;
    let run = simulate(&servers, &options(), 1);
    assert_eq!(run.result(1), &Err(Failure::Refused));
    assert_eq!(run.results[1].2, ms(5));
    assert_eq!(run.ok(), 2);
}

#[test]
fn backlog_defers_timers_for_at_most_one_timeout() {
    let t0 = Instant::now();
    let jobs = (0..2u32).map(|n| Job {
        tag: n,
        build: move |cfg| Echo::new(addr(n as usize), n, cfg),
    });
    let opts = Options {
        adaptive: false,
        attempt_timeout: ms(100),
        retries: 1,
        max_in_flight: 1,
        ..options()
    };
    let mut s = Scheduler::new(jobs, &opts, t0);
    let mut buf = Vec::new();
    assert!(s.poll_transmit(t0, &mut buf).is_some());
    assert!(s.poll_transmit(t0, &mut buf).is_none());
    // Reads stop at their limit from 50 ms on: the 100 ms retry waits until 150 ms.
    s.set_backlog(t0 + ms(50), true);
    assert_eq!(s.poll_timeout(), Some(t0 + ms(150)));
    s.handle_timeout(t0 + ms(100));
    assert!(s.poll_transmit(t0 + ms(100), &mut buf).is_none());
    s.handle_timeout(t0 + ms(150));
    assert!(s.poll_transmit(t0 + ms(150), &mut buf).is_some());
    assert!(s.poll_transmit(t0 + ms(150), &mut buf).is_none());
    // Once the backlog is read, everything runs as usual.
    s.set_backlog(t0 + ms(160), false);
    assert_eq!(s.poll_timeout(), Some(t0 + ms(250)));
}

/// Ten jobs whose machines count their building in `built`.
fn counted_jobs(
    built: &std::rc::Rc<std::cell::Cell<u32>>,
) -> impl Iterator<Item = Job<u32, impl FnOnce(muster_proto::query::QueryConfig) -> Echo>> {
    (0..10u32).map(move |n| {
        let built = std::rc::Rc::clone(built);
        Job {
            tag: n,
            build: move |cfg| {
                built.set(built.get() + 1);
                Echo::new(addr(n as usize), n, cfg)
            },
        }
    })
}

#[test]
fn primed_machines_are_built_ahead_and_sent_first_within_the_window_and_rate() {
    let t0 = Instant::now();
    let built = std::rc::Rc::new(std::cell::Cell::new(0u32));
    // A burst of 4 tokens (50 ms of a rate of 80 per second) and 3 in flight.
    let opts = Options {
        max_in_flight: 3,
        rate: Some(80),
        ..options()
    };
    let mut s = Scheduler::new(counted_jobs(&built), &opts, t0);
    let mut buf = Vec::new();
    // Up to the window (3, below the 4 tokens), built and nothing sent.
    s.prime(t0, 32);
    assert_eq!(built.get(), 3);
    assert!(s.poll_timeout().is_none_or(|t| t > t0));
    // Sent in job order, no machine built on the way.
    let sent: Vec<u16> = std::iter::from_fn(|| s.poll_transmit(t0, &mut buf))
        .map(|t| t.destination.port() - 1000)
        .collect();
    assert_eq!(sent, vec![0, 1, 2]);
    assert_eq!(built.get(), 3);
    // Priming again with the window full builds nothing.
    s.prime(t0, 32);
    assert_eq!(built.get(), 3);

    // The rate's tokens bound it too: 2 (50 ms of 40 per second) with room for 8.
    built.set(0);
    let opts = Options {
        max_in_flight: 8,
        rate: Some(40),
        ..options()
    };
    let mut s = Scheduler::new(counted_jobs(&built), &opts, t0);
    s.prime(t0, 32);
    assert_eq!(built.get(), 2);
    let sent = std::iter::from_fn(|| s.poll_transmit(t0, &mut buf)).count();
    assert_eq!(sent, 2);
}

#[test]
fn primed_jobs_past_the_deadline_are_reported_unsent() {
    let t0 = Instant::now();
    let jobs = (0..5u32).map(|n| Job {
        tag: n,
        build: move |cfg| Echo::new(addr(n as usize), n, cfg),
    });
    let opts = Options {
        max_in_flight: 8,
        deadline: Some(ms(50)),
        ..options()
    };
    let mut s = Scheduler::new(jobs, &opts, t0);
    let mut buf = Vec::new();
    s.prime(t0, 2);
    assert!(s.poll_transmit(t0, &mut buf).is_some());
    // One primed job waits; the deadline passes before it is sent.
    s.handle_timeout(t0 + ms(50));
    let mut unsent: Vec<u32> = std::iter::from_fn(|| s.poll_result())
        .filter(|c| matches!(c.outcome, Err(Failure::Unsent)))
        .map(|c| c.tag)
        .collect();
    unsent.sort_unstable();
    assert_eq!(unsent, vec![1, 2, 3, 4]);
    assert!(s.is_finished());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Whatever the rate, timeout, retries, deadline, server count and loss: every query ends
    /// exactly once, none is reported lost without being sent, and the run takes no longer
    /// than its sends at the rate plus every attempt of one query.
    #[test]
    fn every_target_ends_in_the_expected_time(
        servers in 1usize..250,
        rate in prop::option::of(1u32..400),
        timeout_ms in 5u64..2000,
        retries in 0u32..5,
        deadline_ms in prop::option::of(50u64..8000),
        loss in 0.0f64..0.6,
        rtt_ms in 0u64..200,
        silent_every in prop::option::of(2usize..20),
        seed in any::<u64>(),
    ) {
        let timeout = ms(timeout_ms);
        let mut server = Server::answering(ms(rtt_ms));
        server.loss = loss;
        server.jitter = ms(rtt_ms / 2);
        let list: Vec<Server> = (0..servers)
            .map(|i| {
                let mut s = server.clone();
                s.silent = silent_every.is_some_and(|k| i % k == 0);
                s
            })
            .collect();
        let opts = Options {
            attempt_timeout: timeout,
            min_attempt_timeout: ms(10).min(timeout),
            retries,
            rate,
            deadline: deadline_ms.map(ms),
            ..Options::default()
        };
        let run = simulate(&list, &opts, seed);
        let attempts = u64::from(retries) + 1;
        let pacing = rate.map_or(Duration::ZERO, |r| {
            Duration::from_secs_f64((servers as u64 * attempts) as f64 / f64::from(r))
        });
        let bound = pacing + timeout * u32::try_from(attempts).unwrap() + ms(rtt_ms * 3 / 2) + ms(2);
        let bound = deadline_ms.map_or(bound, |d| bound.min(ms(d)));
        prop_assert!(run.end <= bound, "took {:?}, bound {:?}", run.end, bound);
        for (n, r, _) in &run.results {
            let sent = run.sends[*n as usize].len() as u64;
            prop_assert!(sent <= attempts, "query {} sent {} times", n, sent);
            match r {
                Err(Failure::Unsent) => prop_assert!(deadline_ms.is_some() && sent == 0),
                Err(Failure::Query(QueryError::Timeout)) if deadline_ms.is_none() => {
                    prop_assert_eq!(sent, attempts)
                }
                _ => {}
            }
        }
        if loss == 0.0 && silent_every.is_none() && deadline_ms.is_none() {
            prop_assert_eq!(run.ok(), servers);
        }
    }
}
