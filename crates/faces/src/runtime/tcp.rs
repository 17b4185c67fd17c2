//! The TCP runner's accept side, shared by every TCP face and the HTTP face: connection caps
//! and an idle timeout on each accepted stream.
//!
//! The caps, checked in this order at accept ([`ConnLimits`]):
//! * in total (`tcp_conn_cap`);
//! * per source, an IPv4 address or an IPv6 /64 (`tcp_source_cap`): sized for a hosting box
//!   of a few hundred game servers and its players behind one address;
//! * per IPv6 /56 and per /48 (`tcp_prefix_cap`), so that one customer's prefix cannot take the
//!   face by spreading connections over its 256 or 65 536 /64s;
//! * the reserve (`tcp_reserve`): the last [`PrefixCaps::reserved`] connections of the total
//!   only go to sources holding fewer than [`PrefixCaps::fair_share`] connections (and whose
//!   /56 and /48 hold fewer than 2 and 4 times that), so that a server registering for the
//!   first time and a player's reader still get in while a few sources hold the rest; and to
//!   sources with registered servers, two more per server ([`MetricsSink::proven`], asked
//!   only then), so that a hosting box's servers can still reconnect to register.
//!
//! A connection over a cap is closed right after accept, without any data
//! (`management-server.md` §7.1.10), and counted as a drop. The idle timeout fails the next
//! read or write with `TimedOut` once the stream has made no progress for the configured time,
//! which makes hyper (or a face's own loop) close it.
//!
//! Does not: read or write protocol bytes, or enforce a total connection lifetime (faces that
//! need one, such as the GameSpy list, wrap their handler in `tokio::time::timeout`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use muster_proto::limit::SourceKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

pub use muster_core::conns::{
    ConnLimits, Counts, DEFAULT_FAIR_SHARE, DEFAULT_MAX_PER_48, DEFAULT_MAX_PER_56,
    DEFAULT_RESERVED, PerSource, PrefixCaps, Slot,
};
use muster_core::drops::DropReason;

/// The caps one face shares over all its listeners (IPv4 and IPv6).
#[derive(Debug)]
pub struct SharedCaps {
    limits: ConnLimits,
    total: Arc<Semaphore>,
    per_source: Arc<PerSource>,
    keepalive: Option<Duration>,
    send_buffer: Option<usize>,
}

impl SharedCaps {
    /// Caps of `limits`; `keepalive`: TCP keep-alive idle time on accepted sockets, so that
    /// vanished hosts are noticed.
    #[must_use]
    pub fn new(limits: ConnLimits, keepalive: Option<Duration>) -> Arc<Self> {
        Self::with_send_buffer(limits, keepalive, None)
    }

    /// As [`SharedCaps::new`], and each accepted socket's kernel send buffer set to
    /// `send_buffer` bytes (`SO_SNDBUF`, which Linux doubles for its bookkeeping and then no
    /// longer grows). A face whose answers each cost a shared budget sets it small: the
    /// kernel then takes little output of a client that does not read, the face sees the
    /// rest as unsent and stops making answers for it (its own back-pressure). `None`: the
    /// system's default, grown by the kernel as needed.
    #[must_use]
    pub fn with_send_buffer(
        limits: ConnLimits,
        keepalive: Option<Duration>,
        send_buffer: Option<usize>,
    ) -> Arc<Self> {
        Arc::new(Self {
            limits,
            total: Arc::new(Semaphore::new(limits.max_connections)),
            per_source: Arc::new(PerSource::default()),
            keepalive,
            send_buffer,
        })
    }
}

/// A listener that enforces [`ConnLimits`]; implements [`axum::serve::Listener`], and
/// [`CappedListener::accept_capped`] serves faces with their own accept loop.
#[derive(Debug)]
pub struct CappedListener {
    inner: TcpListener,
    caps: Arc<SharedCaps>,
    metrics: Option<Arc<dyn MetricsSink>>,
}

/// Where a listener counts refused connections.
pub trait MetricsSink: Send + Sync + std::fmt::Debug {
    /// A connection was refused for `reason`.
    fn refused(&self, reason: DropReason);

    /// A connection from `source` was refused by the cap `reason` (counted as
    /// [`MetricsSink::refused`], and by limit name where the sink keeps those).
    fn refused_source(&self, reason: DropReason, source: std::net::IpAddr) {
        let _ = source;
        self.refused(reason);
    }

    /// Servers `source` has registered: the reserve lets such a source in (asked only when
    /// the face is in its reserve, never under this listener's lock). 0 by default.
    fn proven(&self, source: SourceKey) -> usize {
        let _ = source;
        0
    }
}

impl MetricsSink for muster_core::MasterHandle {
    fn refused(&self, reason: DropReason) {
        self.metrics().count_drop(reason);
    }

    fn refused_source(&self, reason: DropReason, source: std::net::IpAddr) {
        let m = self.metrics();
        m.count_drop(reason);
        m.count_limited(reason.name(), source);
    }

    fn proven(&self, source: SourceKey) -> usize {
        self.proven_servers(source)
    }
}

impl CappedListener {
    /// Wraps a bound listener with caps of its own.
    #[must_use]
    pub fn new(inner: TcpListener, limits: ConnLimits) -> Self {
        Self::shared(inner, SharedCaps::new(limits, None))
    }

    /// Wraps a bound listener with caps shared with the face's other listeners.
    #[must_use]
    pub fn shared(inner: TcpListener, caps: Arc<SharedCaps>) -> Self {
        Self {
            inner,
            caps,
            metrics: None,
        }
    }

    /// Counts refused connections in `sink` (`tcp_conn_cap`, `tcp_source_cap`).
    #[must_use]
    pub fn with_metrics(mut self, sink: Arc<dyn MetricsSink>) -> Self {
        self.metrics = Some(sink);
        self
    }

    fn refuse(&self, reason: DropReason, peer: SocketAddr) {
        tracing::debug!(%peer, reason = reason.name(), "connection refused");
        if let Some(m) = &self.metrics {
            if reason == DropReason::TcpConnCap {
                m.refused(reason);
            } else {
                m.refused_source(reason, peer.ip());
            }
        }
    }

    /// The next connection within the caps. Accept errors (such as running out of file
    /// descriptors) are logged and retried after a short pause; connections over a cap are
    /// closed at once.
    pub async fn accept_capped(&mut self) -> (CappedStream, SocketAddr) {
        loop {
            let (stream, peer) = match self.inner.accept().await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let caps = &self.caps;
            let Ok(permit) = Arc::clone(&caps.total).try_acquire_owned() else {
                self.refuse(DropReason::TcpConnCap, peer);
                continue;
            };
            let slot = Slot::of(peer.ip());
            // This connection holds a permit already.
            let in_use = caps
                .limits
                .max_connections
                .saturating_sub(caps.total.available_permits() + 1);
            let mut took = caps.per_source.try_take(slot, &caps.limits, in_use, 0);
            if took == Err(DropReason::TcpReserve)
                && let Some(m) = &self.metrics
            {
                let proven = m.proven(slot.source);
                if proven > 0 {
                    took = caps.per_source.try_take(slot, &caps.limits, in_use, proven);
                }
            }
            if let Err(reason) = took {
                self.refuse(reason, peer);
                continue;
            }
            let _ = stream.set_nodelay(true);
            if let Some(time) = caps.keepalive {
                let ka = socket2::TcpKeepalive::new().with_time(time);
                if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&ka) {
                    tracing::debug!(%peer, error = %e, "keep-alive not set");
                }
            }
            if let Some(size) = caps.send_buffer
                && let Err(e) = socket2::SockRef::from(&stream).set_send_buffer_size(size)
            {
                tracing::debug!(%peer, error = %e, "send buffer not set");
            }
            let idle = caps.limits.idle_timeout;
            let s = CappedStream {
                inner: stream,
                idle,
                long_lived: LongLived::default(),
                write_stalled: false,
                deadline: Box::pin(tokio::time::sleep(if idle.is_zero() {
                    Duration::from_secs(86_400 * 365)
                } else {
                    idle
                })),
                unread: bytes::Bytes::new(),
                _guard: Guard {
                    _permit: permit,
                    per_source: Arc::clone(&caps.per_source),
                    slot,
                },
            };
            return (s, peer);
        }
    }
}

impl axum::serve::Listener for CappedListener {
    type Io = CappedStream;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl Future<Output = (Self::Io, Self::Addr)> + Send {
        self.accept_capped()
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

#[derive(Debug)]
struct Guard {
    _permit: OwnedSemaphorePermit,
    per_source: Arc<PerSource>,
    slot: Slot,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.per_source.give_back(self.slot);
    }
}

/// Marks a connection as a long-lived stream (Server-Sent Events): from then on the idle
/// timeout no longer applies to reading (the client of a stream has nothing to send), only to
/// writing: a write that cannot make progress for [`ConnLimits::idle_timeout`] (the client
/// stopped reading) fails the connection.
#[derive(Debug, Clone, Default)]
pub struct LongLived(Arc<std::sync::atomic::AtomicBool>);

impl LongLived {
    /// Marks the connection.
    pub fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// An accepted stream that holds its cap slots until dropped and fails with `TimedOut` after
/// [`ConnLimits::idle_timeout`] without progress (for a [`LongLived`] one: without progress of
/// a write it has to make).
#[derive(Debug)]
pub struct CappedStream {
    inner: TcpStream,
    idle: Duration,
    long_lived: LongLived,
    /// A write is pending (long-lived streams time that, from when it started).
    write_stalled: bool,
    deadline: Pin<Box<Sleep>>,
    /// Bytes given back with [`CappedStream::unread`], returned before the socket's.
    unread: bytes::Bytes,
    _guard: Guard,
}

impl CappedStream {
    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Gives back `bytes` read from this stream: the next reads return them first (the HTTP
    /// server hands hyper the request heads it read itself).
    pub fn unread(&mut self, bytes: bytes::Bytes) {
        self.unread = bytes;
    }

    /// The handle that marks this connection long-lived.
    #[must_use]
    pub fn long_lived(&self) -> LongLived {
        self.long_lived.clone()
    }

    fn progress(&mut self) {
        if self.idle.is_zero() {
            return;
        }
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    fn check_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.idle.is_zero() {
            return Poll::Pending;
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            let part = self.unread.split_to(n);
            buf.put_slice(&part);
            if self.unread.is_empty() {
                // Let the buffer go: an empty view of it would keep it for the connection's life.
                self.unread = bytes::Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.progress();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.long_lived.is_set() => Poll::Pending,
            Poll::Pending => self.check_idle(cx).map(Err),
        }
    }
}

impl CappedStream {
    /// What a write of the inner stream returned, with the idle and stall timers kept.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                self.write_stalled = false;
                if n > 0 {
                    self.progress();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if self.long_lived.is_set() && !self.write_stalled {
                    // The stall is timed from now, not from the last write.
                    self.write_stalled = true;
                    self.progress();
                }
                self.check_idle(cx).map(Err)
            }
        }
    }
}

impl CappedStream {
    /// Sets or clears `TCP_CORK`: while set, the kernel sends only full segments, whatever
    /// `TCP_NODELAY` says; clearing it sends what is left at once.
    pub fn set_cork(&self, on: bool) -> io::Result<()> {
        rustix::net::sockopt::set_tcp_cork(&self.inner, on).map_err(io::Error::from)
    }

    /// Sends `len` bytes of `file` from `offset` with `sendfile(2)`: the kernel moves them
    /// from the file's pages into the socket, with no copy through this process. Within the
    /// idle timeout, as every write; fails with `UnexpectedEof` when the file is shorter.
    pub async fn send_file(
        &mut self,
        file: &std::fs::File,
        mut offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let end = offset.saturating_add(len);
        while offset < end {
            let count = usize::try_from(end - offset).unwrap_or(usize::MAX);
            let n = std::future::poll_fn(|cx| self.poll_send_file(cx, file, &mut offset, count))
                .await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// Writes `head` flagged `MSG_MORE`: the kernel keeps it to leave in one segment with
    /// what is sent next (a file's first bytes), where a plain write on this `TCP_NODELAY`
    /// socket pushes it as a small segment of its own. Within the idle timeout, as every
    /// write.
    pub async fn write_head(&mut self, head: &[u8]) -> io::Result<()> {
        let mut rest = head;
        while !rest.is_empty() {
            let n = std::future::poll_fn(|cx| self.poll_send_more(cx, rest)).await?;
            rest = match rest.get(n..) {
                Some(r) if n > 0 => r,
                _ => return Err(io::ErrorKind::WriteZero.into()),
            };
        }
        Ok(())
    }

    fn poll_send_more(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |sock| {
            rustix::net::send(sock, buf, rustix::net::SendFlags::MORE)
        })
    }

    fn poll_send_file(
        &mut self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: &mut u64,
        count: usize,
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |sock| {
            rustix::fs::sendfile(sock, file, Some(&mut *offset), count)
        })
    }

    /// One write by `op` (a system call on the socket) once the socket is writable, within
    /// the idle timeout as every write.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        mut op: impl FnMut(&TcpStream) -> rustix::io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.inner.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.after_write(cx, Poll::Pending),
            }
            let sock = &self.inner;
            let sent = sock.try_io(tokio::io::Interest::WRITABLE, || {
                op(sock).map_err(io::Error::from)
            });
            match sent {
                Ok(n) => return self.after_write(cx, Poll::Ready(Ok(n))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after_write(cx, r)
    }

    /// Passed through, so that HTTP writes headers and a large body (`servers.json`) with one
    /// `writev` from where they are: without it, hyper copies every body into its own buffer
    /// first (a second copy of each response, which was 40 % of the master's CPU when serving
    /// `servers.json`).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{bind_tcp, bind_udp};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn limits(total: usize, per_source: usize, idle_ms: u64) -> ConnLimits {
        ConnLimits {
            max_connections: total,
            max_per_source: per_source,
            idle_timeout: Duration::from_millis(idle_ms),
            prefix: PrefixCaps::default(),
        }
    }

    /// Accepts one connection and returns it, or `None` if the test client saw it closed.
    async fn listener(l: ConnLimits) -> (CappedListener, SocketAddr) {
        let tcp = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = tcp.local_addr().unwrap();
        (CappedListener::new(tcp, l), addr)
    }

    async fn closed_without_data(mut c: TcpStream) -> bool {
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), c.read(&mut b)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn v4_and_v6_wildcards_share_a_port() {
        let v4 = bind_tcp("0.0.0.0:0".parse().unwrap()).unwrap();
        let port = v4.local_addr().unwrap().port();
        let v6 = bind_tcp(SocketAddr::new(
            std::net::Ipv6Addr::UNSPECIFIED.into(),
            port,
        ))
        .unwrap();
        assert_eq!(v6.local_addr().unwrap().port(), port);
        let u4 = bind_udp("0.0.0.0:0".parse().unwrap()).unwrap();
        let uport = u4.local_addr().unwrap().port();
        bind_udp(SocketAddr::new(
            std::net::Ipv6Addr::UNSPECIFIED.into(),
            uport,
        ))
        .unwrap();
    }

    #[tokio::test]
    async fn per_source_cap_closes_extra_connections() {
        let (mut l, addr) = listener(limits(10, 2, 60_000)).await;
        let c1 = TcpStream::connect(addr).await.unwrap();
        let c2 = TcpStream::connect(addr).await.unwrap();
        let c3 = TcpStream::connect(addr).await.unwrap();
        let (s1, _) = l.accept_capped().await;
        let (_s2, _) = l.accept_capped().await;
        // The third is refused (closed) inside accept_capped, which then waits for more.
        let more = tokio::time::timeout(Duration::from_millis(300), l.accept_capped());
        assert!(more.await.is_err());
        assert!(closed_without_data(c3).await);
        // Once one closes, the source may connect again.
        drop(s1);
        drop(c1);
        let mut c4 = TcpStream::connect(addr).await.unwrap();
        let (mut s4, _) = l.accept_capped().await;
        s4.write_all(b"hi").await.unwrap();
        let mut b = [0u8; 2];
        c4.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hi");
        drop(c2);
    }

    #[tokio::test]
    async fn total_cap_closes_extra_connections() {
        let (mut l, addr) = listener(limits(1, 8, 60_000)).await;
        let _c1 = TcpStream::connect(addr).await.unwrap();
        let c2 = TcpStream::connect(addr).await.unwrap();
        let (_s1, _) = l.accept_capped().await;
        let accept_more = tokio::time::timeout(Duration::from_millis(300), l.accept_capped());
        assert!(accept_more.await.is_err(), "nothing else accepted");
        assert!(closed_without_data(c2).await);
    }

    #[tokio::test]
    async fn vectored_writes_reach_the_socket_in_order() {
        let (mut l, addr) = listener(limits(4, 4, 60_000)).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let (mut s, _) = l.accept_capped().await;
        // HTTP writes headers and body with one writev only when the stream says it can.
        assert!(s.is_write_vectored());
        let sent = tokio::spawn(async move {
            let body = vec![7u8; 300_000];
            let mut bufs = [io::IoSlice::new(b"head:"), io::IoSlice::new(&body)];
            let mut bufs = &mut bufs[..];
            while !bufs.is_empty() {
                let n = s.write_vectored(bufs).await.unwrap();
                assert!(n > 0);
                io::IoSlice::advance_slices(&mut bufs, n);
            }
            s.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        sent.await.unwrap();
        assert_eq!(got.len(), 5 + 300_000);
        assert!(got.starts_with(b"head:") && got[5..].iter().all(|&b| b == 7));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_stream_times_out() {
        let (mut l, addr) = listener(limits(4, 4, 15_000)).await;
        let _c = TcpStream::connect(addr).await.unwrap();
        let (mut s, _) = l.accept_capped().await;
        let mut b = [0u8; 1];
        let err = s.read(&mut b).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
