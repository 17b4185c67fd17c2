//! One UDP socket per address family, with batched I/O: `sendmmsg` and `recvmmsg` move up to
//! [`BATCH`] datagrams per system call, and ICMP errors are read from the socket's error queue
//! (`IP_RECVERR` / `IPV6_RECVERR`), which names the destination that refused.
//!
//! Buffers are allocated once per socket; nothing is allocated per datagram (nix's message
//! headers are built once per batch).
//!
//! # Arrival times
//!
//! Each datagram is handed on with the instant it reached the socket, not the instant the
//! engine got round to reading it: with thousands of queries in flight, a reply may wait in
//! the receive buffer while the engine sends, fires timers or reads other replies, and that
//! wait is not part of the server's round trip. The kernel stamps every datagram on arrival
//! (`SO_TIMESTAMPNS`, read from the `SCM_TIMESTAMPNS` control message of `recvmmsg`). The
//! stamp is on the wall clock, so it becomes an instant by its age: the wall clock and the
//! monotonic clock are read once per `recvmmsg` call, and the arrival is that monotonic
//! instant minus how long ago the stamp was on the wall clock (see [`arrival`]). Where there
//! is no stamp (the option is refused, the control message is missing or truncated) or the
//! stamp is implausible (in the future, or older than [`MAX_STAMP_AGE`]: the wall clock was
//! set meanwhile), the arrival is the instant the batch was read. (Linux turns stamping on a
//! moment after the first socket of the machine asks for it; until then its stamps are the
//! time of the read, which is the same fallback.)

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd as _;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, recvmsg, sendmmsg,
    setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::clock;

/// Datagrams per `sendmmsg` / `recvmmsg` call.
pub(crate) const BATCH: usize = 32;
/// The largest datagram received; longer ones are truncated by the kernel and then rejected by
/// the machines' decoders.
pub(crate) const MAX_DATAGRAM: usize = 65_535;
/// Socket buffer size asked of the kernel, so that bursts of replies from thousands of
/// servers are not dropped before the engine reads them.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// Receive-buffer bytes the kernel charges for one query's reply: one or two datagrams of up to
/// ~1.4 KB, each charged about 2 KB (its buffer overhead included). Queries in flight are
/// capped at the socket's buffer divided by this, so that all their replies fit at once.
const REPLY_BUFFER_BYTES: usize = 4096;
/// The fewest queries in flight the buffer cap may leave.
const MIN_WINDOW: usize = 32;
/// `ECONNREFUSED` as the error queue reports it (ICMP port unreachable).
const ECONNREFUSED: u32 = nix::libc::ECONNREFUSED as u32;
/// The oldest a kernel arrival stamp may be when read. Older, the wall clock was most likely
/// set forward since the datagram came, and the read time is used instead (a reply the engine
/// left unread this long is late whichever time is used).
pub(crate) const MAX_STAMP_AGE: Duration = Duration::from_secs(5);

/// The wall-clock time of an `SCM_TIMESTAMPNS` control message among `cmsgs`, if any.
pub(crate) fn stamp_of(cmsgs: impl IntoIterator<Item = ControlMessageOwned>) -> Option<SystemTime> {
    cmsgs.into_iter().find_map(|c| match c {
        ControlMessageOwned::ScmTimestampns(ts) => wall_time(ts),
        _ => None,
    })
}

/// A kernel timestamp as a wall-clock time (`None` before 1970 or out of range).
fn wall_time(ts: TimeSpec) -> Option<SystemTime> {
    let secs = u64::try_from(ts.tv_sec()).ok()?;
    let nanos = u32::try_from(ts.tv_nsec())
        .ok()
        .filter(|n| *n < 1_000_000_000)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// When a datagram reached the socket, on the monotonic clock: `read` (monotonic) and `wall`
/// are the two clocks read together right after the datagram was read, `stamp` the kernel's
/// arrival stamp. `None` without a plausible stamp (the caller then uses `read`).
pub(crate) fn arrival(
    stamp: Option<SystemTime>,
    read: Instant,
    wall: SystemTime,
) -> Option<Instant> {
    let age = wall.duration_since(stamp?).ok()?;
    if age > MAX_STAMP_AGE {
        return None;
    }
    read.checked_sub(age)
}

/// Datagrams waiting to be sent on one socket: their bytes back to back in one buffer.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    bytes: Vec<u8>,
    /// (destination, end offset in `bytes`)
    entries: Vec<(SocketAddr, usize)>,
    /// Entries already sent.
    sent: usize,
}

impl Outbox {
    pub(crate) fn len(&self) -> usize {
        self.entries.len() - self.sent
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn push(&mut self, dest: SocketAddr, datagram: &[u8]) {
        self.bytes.extend_from_slice(datagram);
        self.entries.push((dest, self.bytes.len()));
    }

    fn clear_if_done(&mut self) {
        if self.is_empty() {
            self.bytes.clear();
            self.entries.clear();
            self.sent = 0;
        }
    }
}

/// How a flush ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Everything was sent.
    All,
    /// The socket's send buffer is full: wait until it is writable.
    Blocked,
}

/// What one read of the socket found.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Read {
    /// Datagrams read.
    pub(crate) datagrams: usize,
    /// Of those, datagrams whose arrival time is the kernel's stamp.
    pub(crate) stamped: usize,
    /// The socket is empty (the read stopped before its limit).
    pub(crate) drained: bool,
}

/// One bound socket of one address family.
#[derive(Debug)]
pub(crate) struct Family {
    socket: UdpSocket,
    recv_buf: Vec<u8>,
    err_buf: Vec<u8>,
    /// The kernel stamps arrivals (`SO_TIMESTAMPNS` was accepted).
    timestamps: bool,
    /// Queries whose replies its receive buffer holds at once.
    pub(crate) window: usize,
}

pub(crate) fn to_std(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    addr.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

impl Family {
    /// Bind `addr` with large buffers, ICMP errors queued and arrivals stamped by the kernel
    /// (must run in a tokio runtime).
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, true)
    }

    /// As [`Self::bind`]; `timestamps: false` leaves the kernel's arrival stamps off (tests
    /// of the fallback).
    pub(crate) fn bind_with(addr: SocketAddr, timestamps: bool) -> io::Result<Self> {
        use socket2::{Domain, Protocol, Socket, Type};
        let domain = if addr.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        // Best effort: without the error queue a closed port is only slower to report.
        let recverr = if addr.is_ipv6() {
            socket.set_only_v6(true)?;
            setsockopt(&socket, sockopt::Ipv6RecvErr, &true)
        } else {
            setsockopt(&socket, sockopt::Ipv4RecvErr, &true)
        };
        if let Err(e) = recverr {
            tracing::debug!(error = %e, "no ICMP error queue on the query socket");
        }
        // Best effort: without stamps, arrival times are those of the read.
        let timestamps = timestamps
            && setsockopt(&socket, sockopt::ReceiveTimestampns, &true)
                .inspect_err(
                    |e| tracing::debug!(error = %e, "no arrival stamps on the query socket"),
                )
                .is_ok();
        // Best effort: a smaller buffer only means fewer queries in flight.
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        let window = (socket.recv_buffer_size().unwrap_or(SOCKET_BUFFER_BYTES)
            / REPLY_BUFFER_BYTES)
            .max(MIN_WINDOW);
        Ok(Self {
            socket: UdpSocket::from_std(socket.into())?,
            recv_buf: vec![0; BATCH * MAX_DATAGRAM],
            err_buf: vec![0; 512],
            timestamps,
            window,
        })
    }

    /// Wait until the socket has datagrams or queued errors; true when errors are queued.
    pub(crate) async fn readable(&self) -> io::Result<bool> {
        let ready = self
            .socket
            .ready(Interest::READABLE | Interest::ERROR)
            .await?;
        Ok(ready.is_error())
    }

    /// Wait until the socket can take datagrams.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.socket.writable().await
    }

    /// Send what `out` holds, `BATCH` datagrams per call. A datagram that cannot be sent is
    /// reported to `failed` and dropped; the rest go on.
    pub(crate) fn flush(
        &self,
        out: &mut Outbox,
        failed: &mut dyn FnMut(SocketAddr, io::ErrorKind),
    ) -> Flushed {
        let fd = self.socket.as_raw_fd();
        let mut refused_retries = 0;
        while !out.is_empty() {
            let first = out.sent;
            let n = out.len().min(BATCH);
            let result = {
                let mut iovs: [[IoSlice<'_>; 1]; BATCH] =
                    std::array::from_fn(|_| [IoSlice::new(&[])]);
                let mut addrs: [Option<SockaddrStorage>; BATCH] = [None; BATCH];
                let mut start = if first == 0 {
                    0
                } else {
                    out.entries.get(first - 1).map_or(0, |e| e.1)
                };
                for (k, &(dest, end)) in out.entries.iter().skip(first).take(n).enumerate() {
                    let bytes = out.bytes.get(start..end).unwrap_or_default();
                    start = end;
                    if let (Some(iov), Some(addr)) = (iovs.get_mut(k), addrs.get_mut(k)) {
                        *iov = [IoSlice::new(bytes)];
                        *addr = Some(SockaddrStorage::from(dest));
                    }
                }
                let send = || {
                    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(n, None);
                    sendmmsg(
                        fd,
                        &mut headers,
                        iovs.iter().take(n),
                        addrs.get(..n).unwrap_or_default(),
                        [],
                        MsgFlags::empty(),
                    )
                    .map(Iterator::count)
                    .map_err(io::Error::from)
                };
                // Sent at once, not through tokio's readiness first: a new socket is writable,
                // but tokio learns so only at its next turn, and the batch's pings would count
                // the wait. When the buffer is full, `try_io` sends again or clears tokio's
                // readiness, so that `writable` waits for room.
                match send() {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.socket.try_io(Interest::WRITABLE, send)
                    }
                    other => other,
                }
            };
            match result {
                Ok(sent) => out.sent += sent,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flushed::Blocked,
                // An ICMP error of an earlier datagram surfaced here (its details are in the
                // error queue); this datagram was not sent, so send it again.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && refused_retries < 8 => {
                    refused_retries += 1;
                }
                Err(e) => {
                    if let Some(&(dest, _)) = out.entries.get(first) {
                        failed(dest, e.kind());
                    }
                    out.sent += 1;
                }
            }
        }
        out.clear_if_done();
        Flushed::All
    }

    /// Read up to `limit` datagrams (in batches of [`BATCH`]), handing each to `deliver` with
    /// its arrival instant (see the module's notes).
    pub(crate) fn read(
        &mut self,
        limit: usize,
        deliver: &mut dyn FnMut(SocketAddr, &[u8], Instant),
    ) -> io::Result<Read> {
        let fd = self.socket.as_raw_fd();
        let timestamps = self.timestamps;
        let mut read = Read::default();
        let mut refused_retries = 0;
        while read.datagrams < limit {
            let mut meta: [(Option<SocketAddr>, usize, Option<SystemTime>); BATCH] =
                [(None, 0, None); BATCH];
            let buf = &mut self.recv_buf;
            let result = self.socket.try_io(Interest::READABLE, || {
                let mut chunks = buf.chunks_mut(MAX_DATAGRAM);
                let mut iovs: [[IoSliceMut<'_>; 1]; BATCH] =
                    std::array::from_fn(|_| [IoSliceMut::new(chunks.next().unwrap_or_default())]);
                let cmsg = timestamps.then(|| nix::cmsg_space!(TimeSpec));
                let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, cmsg);
                let msgs = recvmmsg(fd, &mut headers, iovs.iter_mut(), MsgFlags::empty(), None)
                    .map_err(io::Error::from)?;
                // The two clocks, read together as soon as the batch is in.
                let clocks = (clock::now(), SystemTime::now());
                let mut got = 0usize;
                for (m, msg) in meta.iter_mut().zip(msgs) {
                    // A truncated or missing control message: no stamp.
                    let stamp = msg.cmsgs().ok().and_then(stamp_of);
                    *m = (msg.address.as_ref().and_then(to_std), msg.bytes, stamp);
                    got += 1;
                }
                Ok((got, clocks))
            });
            let (got, (read_at, wall)) = match result {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    read.drained = true;
                    return Ok(read);
                }
                // ICMP errors are read from the error queue; this only clears the socket error.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && refused_retries < 8 => {
                    refused_retries += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for (k, &(from, len, stamp)) in meta.iter().take(got).enumerate() {
                let start = k * MAX_DATAGRAM;
                let bytes = self
                    .recv_buf
                    .get(start..start + len.min(MAX_DATAGRAM))
                    .unwrap_or_default();
                let stamped = arrival(stamp, read_at, wall);
                read.stamped += usize::from(stamped.is_some());
                let at = stamped.unwrap_or(read_at);
                if let Some(from) = from {
                    deliver(from, bytes, at);
                }
            }
            read.datagrams += got;
            if got < BATCH {
                read.drained = true;
                return Ok(read);
            }
        }
        Ok(read)
    }

    /// Read the error queue: every destination that answered with ICMP port unreachable goes
    /// to `refused`. Other queued errors are dropped.
    pub(crate) fn read_errors(&mut self, refused: &mut dyn FnMut(SocketAddr)) -> io::Result<()> {
        let fd = self.socket.as_raw_fd();
        loop {
            let mut payload = [0u8; 64];
            let cmsg = &mut self.err_buf;
            let result = self.socket.try_io(Interest::ERROR, || {
                let mut iov = [IoSliceMut::new(&mut payload)];
                let msg = recvmsg::<SockaddrStorage>(
                    fd,
                    &mut iov,
                    Some(cmsg.as_mut_slice()),
                    MsgFlags::MSG_ERRQUEUE,
                )
                .map_err(io::Error::from)?;
                let dest = msg.address.as_ref().and_then(to_std);
                let mut port_unreachable = false;
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        match c {
                            ControlMessageOwned::Ipv4RecvErr(err, _)
                            | ControlMessageOwned::Ipv6RecvErr(err, _) => {
                                port_unreachable |= err.ee_errno == ECONNREFUSED;
                            }
                            _ => {}
                        }
                    }
                }
                Ok(dest.filter(|_| port_unreachable))
            });
            match result {
                Ok(Some(dest)) => refused(dest),
                Ok(None) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::time::TimeVal;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn stamp_of_reads_the_nanosecond_stamp() {
        let ts = TimeSpec::new(1_700_000_000, 123_456_789);
        assert_eq!(
            stamp_of([ControlMessageOwned::ScmTimestampns(ts)]),
            Some(at(1_700_000_000, 123_456_789))
        );
        // Other control messages come first: the stamp is still found.
        let other = ControlMessageOwned::ScmTimestamp(TimeVal::new(5, 0));
        assert_eq!(
            stamp_of([other, ControlMessageOwned::ScmTimestampns(ts)]),
            Some(at(1_700_000_000, 123_456_789))
        );
    }

    #[test]
    fn stamp_of_without_a_nanosecond_stamp_is_none() {
        assert_eq!(stamp_of([]), None);
        let other = ControlMessageOwned::ScmTimestamp(TimeVal::new(5, 0));
        assert_eq!(stamp_of([other]), None);
        // Before 1970: not a stamp this engine can use.
        let before = ControlMessageOwned::ScmTimestampns(TimeSpec::new(-1, 0));
        assert_eq!(stamp_of([before]), None);
    }

    #[test]
    fn arrival_is_the_read_instant_minus_the_stamps_age() {
        let read = Instant::now();
        let wall = at(1_700_000_000, 500_000_000);
        let stamp = wall - Duration::from_millis(30);
        assert_eq!(
            arrival(Some(stamp), read, wall),
            Some(read - Duration::from_millis(30))
        );
        assert_eq!(arrival(Some(wall), read, wall), Some(read));
        assert_eq!(
            arrival(Some(wall - MAX_STAMP_AGE), read, wall),
            read.checked_sub(MAX_STAMP_AGE)
        );
    }

    #[test]
    fn arrival_without_a_plausible_stamp_is_none() {
        let read = Instant::now();
        let wall = at(1_700_000_000, 0);
        assert_eq!(arrival(None, read, wall), None);
        // In the future: the wall clock was set back since.
        assert_eq!(
            arrival(Some(wall + Duration::from_millis(1)), read, wall),
            None
        );
        // Too old: the wall clock was most likely set forward since.
        let old = wall - MAX_STAMP_AGE - Duration::from_millis(1);
        assert_eq!(arrival(Some(old), read, wall), None);
    }

    /// Sends one datagram to `family`, waits `stall` before reading it, and returns when it
    /// was sent, when the read began, the arrival instant read gave and the read's counts.
    async fn stalled_read(
        family: &mut Family,
        stall: Duration,
    ) -> (Instant, Instant, Instant, Read) {
        let to = family.socket.local_addr().expect("local address");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer");
        let sent = clock::now();
        peer.send_to(b"hello", to).expect("send");
        // The engine is busy elsewhere: the datagram waits in the receive buffer.
        std::thread::sleep(stall);
        family.readable().await.expect("readable");
        let reading = clock::now();
        let mut arrived = None;
        let read = family
            .read(BATCH, &mut |from, bytes, at| {
                assert_eq!(from, peer.local_addr().unwrap());
                assert_eq!(bytes, b"hello");
                arrived = Some(at);
            })
            .expect("read");
        (sent, reading, arrived.expect("the datagram was read"), read)
    }

    #[tokio::test]
    async fn arrival_is_when_the_datagram_came_not_when_it_was_read() {
        let mut family = Family::bind_with("127.0.0.1:0".parse().unwrap(), true).expect("bind");
        let stall = Duration::from_millis(100);
        // The kernel turns arrival stamping on a moment after the first socket asks for it
        // (until then a stamp is the time of the read): the first datagrams may come too soon.
        for _ in 0..20 {
            let (sent, reading, arrived, read) = stalled_read(&mut family, stall).await;
            assert_eq!((read.datagrams, read.stamped), (1, 1));
            // Never before the send (give or take the two clocks' reading).
            assert!(
                arrived + Duration::from_millis(5) >= sent,
                "{arrived:?} {sent:?}"
            );
            if reading.saturating_duration_since(arrived) >= stall / 2 {
                return;
            }
        }
        panic!("every arrival was stamped at its read, not when it came");
    }

    #[tokio::test]
    async fn without_stamps_arrival_is_the_read_instant() {
        let mut family = Family::bind_with("127.0.0.1:0".parse().unwrap(), false).expect("bind");
        let stall = Duration::from_millis(50);
        let (_, reading, arrived, read) = stalled_read(&mut family, stall).await;
        assert_eq!((read.datagrams, read.stamped), (1, 0));
        assert!(arrived >= reading, "{arrived:?} {reading:?}");
    }
}
