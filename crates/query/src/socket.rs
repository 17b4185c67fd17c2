//! One UDP socket per address family, with batched I/O: `sendmmsg` and `recvmmsg` move up to
//! [`BATCH`] datagrams per system call, and ICMP errors are read from the socket's error queue
//! (`IP_RECVERR` / `IPV6_RECVERR`), which names the destination that refused.
//!
//! Buffers are allocated once per socket; nothing is allocated per datagram (nix's message
//! headers are built once per batch).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd as _;

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, recvmsg, sendmmsg,
    setsockopt, sockopt,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

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
    /// The socket is empty (the read stopped before its limit).
    pub(crate) drained: bool,
}

/// One bound socket of one address family.
#[derive(Debug)]
pub(crate) struct Family {
    socket: UdpSocket,
    recv_buf: Vec<u8>,
    err_buf: Vec<u8>,
    /// Queries whose replies its receive buffer holds at once.
    pub(crate) window: usize,
}

fn to_std(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    addr.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

impl Family {
    /// Bind `addr` with large buffers and ICMP errors queued (must run in a tokio runtime).
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<Self> {
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
                self.socket.try_io(Interest::WRITABLE, || {
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
                })
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

    /// Read up to `limit` datagrams (in batches of [`BATCH`]), handing each to `deliver`.
    pub(crate) fn read(
        &mut self,
        limit: usize,
        deliver: &mut dyn FnMut(SocketAddr, &[u8]),
    ) -> io::Result<Read> {
        let fd = self.socket.as_raw_fd();
        let mut read = Read::default();
        let mut refused_retries = 0;
        while read.datagrams < limit {
            let mut meta: [(Option<SocketAddr>, usize); BATCH] = [(None, 0); BATCH];
            let buf = &mut self.recv_buf;
            let result = self.socket.try_io(Interest::READABLE, || {
                let mut chunks = buf.chunks_mut(MAX_DATAGRAM);
                let mut iovs: [[IoSliceMut<'_>; 1]; BATCH] =
                    std::array::from_fn(|_| [IoSliceMut::new(chunks.next().unwrap_or_default())]);
                let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
                let msgs = recvmmsg(fd, &mut headers, iovs.iter_mut(), MsgFlags::empty(), None)
                    .map_err(io::Error::from)?;
                let mut got = 0usize;
                for (m, msg) in meta.iter_mut().zip(msgs) {
                    *m = (msg.address.as_ref().and_then(to_std), msg.bytes);
                    got += 1;
                }
                Ok(got)
            });
            let got = match result {
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
            for (k, &(from, len)) in meta.iter().take(got).enumerate() {
                let start = k * MAX_DATAGRAM;
                let bytes = self
                    .recv_buf
                    .get(start..start + len.min(MAX_DATAGRAM))
                    .unwrap_or_default();
                if let Some(from) = from {
                    deliver(from, bytes);
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
