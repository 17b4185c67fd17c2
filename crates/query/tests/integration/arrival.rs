//! The engine measures a round trip from the moment a request's batch is taken for sending to
//! the moment the reply reached its socket, not the moment it got round to reading it: a
//! reply that waits while the engine is busy, or a batch that waits for earlier batches to be
//! built, keeps its ping.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_proto::Transmit;
use muster_proto::query::{Event, QueryConfig, QueryError, QueryMachine};
use muster_query::{Job, Options, spawn};
use tokio::sync::Notify;

/// How long the fake server waits before it replies.
const SERVER_DELAY: Duration = Duration::from_millis(20);
/// How long the engine's thread is kept busy while the reply waits in its socket.
const STALL: Duration = Duration::from_millis(300);

/// Sends `time N` once; done on `timed N` with its own round trip (from its send instant to
/// the instant it was handed the reply), as the real machines measure a server's ping.
struct Timed {
    target: SocketAddr,
    n: usize,
    sent: Option<Instant>,
    event: Option<Event<Duration>>,
}

impl QueryMachine for Timed {
    type Output = Duration;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let reply = format!("timed {}", self.n);
        if let (true, true, Some(sent)) =
            (from == self.target, datagram == reply.as_bytes(), self.sent)
        {
            let rtt = now.saturating_duration_since(sent);
            self.event.get_or_insert(Event::Done(rtt));
        }
    }

    fn handle_timeout(&mut self, _now: Instant) {
        self.event.get_or_insert(Event::Failed(QueryError::Timeout));
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.sent.is_some() {
            return None;
        }
        self.sent = Some(now);
        buf.extend_from_slice(format!("time {}", self.n).as_bytes());
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.event.is_some(), self.sent) {
            (false, Some(sent)) => Some(sent + Duration::from_secs(10)),
            _ => None,
        }
    }

    fn poll_event(&mut self) -> Option<Event<Duration>> {
        self.event.take()
    }

    fn abort(&mut self, _now: Instant) {
        self.event.get_or_insert(Event::Failed(QueryError::Timeout));
    }
}

impl Timed {
    fn new(target: SocketAddr, n: usize) -> Self {
        Self {
            target,
            n,
            sent: None,
            event: None,
        }
    }
}

/// A server on its own thread: on `time N`, it wakes `got`, waits `delay`, replies `timed N`.
fn server(got: Arc<Notify>, delay: Duration) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind server");
    let addr = socket.local_addr().expect("server address");
    std::thread::spawn(move || {
        let mut buf = [0u8; 32];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let Some(n) = buf.get(..n).and_then(|b| b.strip_prefix(b"time ")) else {
                continue;
            };
            let reply = [b"timed ", n].concat();
            got.notify_one();
            std::thread::sleep(delay);
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

/// A socket that asks the kernel for arrival stamps, kept open for the whole test, once
/// stamps are seen to be taken on arrival: the kernel turns stamping on a moment after the
/// first socket asks for it and off when the last one closes (other tests' engines come and
/// go), and until then a stamp is the time of the read.
fn stamps_on() -> std::net::UdpSocket {
    use nix::sys::socket::{
        ControlMessageOwned, MsgFlags, SockaddrIn, recvmsg, setsockopt, sockopt,
    };
    use nix::sys::time::TimeSpec;
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd as _;
    use std::time::SystemTime;

    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind keeper");
    setsockopt(&socket, sockopt::ReceiveTimestampns, &true).expect("SO_TIMESTAMPNS");
    let me = socket.local_addr().expect("keeper address");
    for _ in 0..50 {
        socket.send_to(b"x", me).expect("send to self");
        std::thread::sleep(Duration::from_millis(30));
        let mut buf = [0u8; 8];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut cmsg = nix::cmsg_space!(TimeSpec);
        let msg = recvmsg::<SockaddrIn>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::empty(),
        )
        .expect("recvmsg");
        let stamp = msg
            .cmsgs()
            .ok()
            .into_iter()
            .flatten()
            .find_map(|c| match c {
                ControlMessageOwned::ScmTimestampns(ts) => Some(
                    SystemTime::UNIX_EPOCH
                        + Duration::new(
                            u64::try_from(ts.tv_sec()).unwrap_or(0),
                            u32::try_from(ts.tv_nsec()).unwrap_or(0),
                        ),
                ),
                _ => None,
            });
        let age = stamp.and_then(|s| SystemTime::now().duration_since(s).ok());
        if age.is_some_and(|a| a >= Duration::from_millis(20)) {
            return socket;
        }
    }
    panic!("the kernel never stamped a datagram on arrival");
}

/// The engine and a task that blocks the runtime's one thread for [`STALL`] as soon as the
/// request reached the server, so the reply comes while the engine cannot read it.
#[tokio::test(flavor = "current_thread")]
async fn ping_excludes_the_time_a_reply_waits_unread() {
    let _stamps = stamps_on();
    let got = Arc::new(Notify::new());
    let target = server(got.clone(), SERVER_DELAY);
    let stall = tokio::spawn(async move {
        got.notified().await;
        // Blocking on purpose: the engine shares this thread and cannot run meanwhile.
        std::thread::sleep(STALL);
    });
    let options = Options {
        retries: 0,
        attempt_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    let jobs = [Job {
        tag: (),
        build: move |_: QueryConfig| Timed::new(target, 0),
    }];
    let started = Instant::now();
    let mut results = spawn(jobs, options);
    let done = results.recv().await.expect("one result");
    let took = started.elapsed();
    stall.await.expect("the stall ran");
    let ping = done.outcome.expect("answered");
    // The stall did happen while the query was out…
    assert!(
        took >= STALL,
        "the query ended after {took:?}, before the stall ended"
    );
    // …and neither the machine's ping nor the engine's elapsed time counts it.
    assert!(
        ping >= SERVER_DELAY,
        "ping {ping:?} is shorter than the server's delay"
    );
    assert!(
        ping < Duration::from_millis(150),
        "ping {ping:?} counts the stall"
    );
    assert!(
        done.elapsed < Duration::from_millis(150),
        "elapsed {:?} counts the stall",
        done.elapsed
    );
}

/// Many queries started in one turn of the engine: one batch takes long to build (its first
/// machine stalls the thread), and the batch after it is stamped when it is taken, after the
/// stall, not when the turn began.
#[tokio::test(flavor = "current_thread")]
async fn each_batch_is_stamped_when_it_is_taken() {
    const QUERIES: usize = 96;
    // The second batch's first machine stalls: by then the socket is bound and writable, so
    // the batch after it goes out in the same turn whether or not the first batch had to
    // wait for the new socket to be writable.
    const SLOW: usize = 32;
    let got = Arc::new(Notify::new());
    // Replies at once (one thread: a delay would add up over the queries).
    let target = server(got, Duration::ZERO);
    let options = Options {
        retries: 0,
        attempt_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    let jobs = (0..QUERIES).map(move |i| Job {
        tag: i,
        build: move |_: QueryConfig| {
            if i == SLOW {
                // Blocking on purpose: the engine is busy before this batch is sent.
                std::thread::sleep(STALL);
            }
            Timed::new(target, i)
        },
    });
    let mut results = spawn(jobs, options);
    let mut pings = Vec::new();
    while let Some(done) = results.recv().await {
        pings.push((done.tag, done.outcome.expect("answered")));
    }
    pings.sort();
    assert_eq!(pings.len(), QUERIES);
    // The engine sends 32 datagrams per batch; the slow machine's batch was taken before the
    // stall (its pings may count it: the batch was built meanwhile), the next one after it.
    let later: Vec<_> = pings.iter().filter(|(i, _)| *i >= SLOW + 32).collect();
    assert_eq!(later.len(), QUERIES - SLOW - 32);
    for (i, ping) in later {
        assert!(
            *ping < Duration::from_millis(150),
            "query {i}: ping {ping:?} counts the stall"
        );
    }
}

/// A new socket's first batch goes out when it is taken, not a turn of the runtime later:
/// another task that keeps the thread busy right after the engine's first turn does not add
/// to the first queries' pings.
#[tokio::test(flavor = "current_thread")]
async fn a_new_socket_s_first_batch_is_sent_at_once() {
    const QUERIES: usize = 8;
    let _stamps = stamps_on();
    let got = Arc::new(Notify::new());
    let target = server(got, Duration::ZERO);
    let options = Options {
        retries: 0,
        attempt_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    let jobs = (0..QUERIES).map(move |i| Job {
        tag: i,
        build: move |_: QueryConfig| Timed::new(target, i),
    });
    let mut results = spawn(jobs, options);
    // Spawned after the engine, so polled after the engine's first turn.
    let stall = tokio::spawn(async {
        // Blocking on purpose: the engine shares this thread and cannot run meanwhile.
        std::thread::sleep(STALL);
    });
    let mut pings = Vec::new();
    while let Some(done) = results.recv().await {
        pings.push((done.tag, done.outcome.expect("answered")));
    }
    stall.await.expect("the stall ran");
    assert_eq!(pings.len(), QUERIES);
    for (i, ping) in pings {
        assert!(
            ping < Duration::from_millis(150),
            "query {i}: ping {ping:?} counts the stall"
        );
    }
}
