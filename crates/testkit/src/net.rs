//! Loopback sockets owned by the test: picking free non-default ports and capturing what a peer sends.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The only address the harness uses.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Ports are picked in this range: above every default port of the protocols under test (7777, 8283,
/// 8300, 25600, 27900, 28900 are all outside it or skipped) and below Linux's ephemeral range (32768+), so
/// the peers' own source ports never collide with them.
pub const PORT_RANGE: std::ops::Range<u16> = 20_000..32_000;

/// How many candidate ranges are tried before giving up.
const PORT_TRIES: u32 = 500;

/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_536;

/// How long one socket read waits when several sockets are polled in turn.
const POLL_READ: Duration = Duration::from_millis(5);

/// A loopback address on `port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, port))
}

fn candidate(i: u32) -> u16 {
    static SALT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mix = nanos
        .wrapping_add(std::process::id().wrapping_mul(7919))
        .wrapping_add(SALT.fetch_add(1, Ordering::Relaxed).wrapping_mul(104_729))
        .wrapping_add(i.wrapping_mul(31));
    let span = u32::from(PORT_RANGE.end - PORT_RANGE.start);
    PORT_RANGE.start + u16::try_from(mix % span).unwrap_or(0)
}

/// Binds `n` UDP sockets on consecutive loopback ports `p, p+1, …` in [`PORT_RANGE`].
pub fn udp_consecutive(n: u16) -> Vec<UdpSocket> {
    for i in 0..PORT_TRIES {
        let base = candidate(i);
        let sockets: Result<Vec<_>, _> = (0..n)
            .map(|k| UdpSocket::bind(loopback(base.saturating_add(k))))
            .collect();
        if let Ok(sockets) = sockets {
            return sockets;
        }
    }
    panic!("no {n} consecutive free UDP ports on 127.0.0.1 in {PORT_RANGE:?}");
}

/// Two UDP sockets on consecutive loopback ports (game port, game port + 1).
pub fn udp_pair() -> (UdpSocket, UdpSocket) {
    let mut v = udp_consecutive(2);
    let second = v.pop().expect("two sockets");
    let first = v.pop().expect("two sockets");
    (first, second)
}

/// A loopback port that is free for UDP and TCP right now (for a server the test starts; small race accepted).
pub fn free_udp_port() -> u16 {
    for i in 0..PORT_TRIES {
        let port = candidate(i);
        let udp = UdpSocket::bind(loopback(port));
        let tcp = TcpListener::bind(loopback(port));
        if udp.is_ok() && tcp.is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {PORT_RANGE:?}");
}

/// A TCP listener on a free loopback port in [`PORT_RANGE`].
pub fn tcp_listener() -> TcpListener {
    for i in 0..PORT_TRIES {
        if let Ok(l) = TcpListener::bind(loopback(candidate(i))) {
            return l;
        }
    }
    panic!("no free TCP port on 127.0.0.1 in {PORT_RANGE:?}");
}

/// One datagram a [`Capture`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// The local port it arrived at.
    pub port: u16,
    /// The sender.
    pub from: SocketAddr,
    /// The payload.
    pub bytes: Vec<u8>,
    /// When it arrived, from the start of the capture.
    pub at: Duration,
}

/// UDP sockets on consecutive loopback ports that record every datagram a peer sends to them.
#[derive(Debug)]
pub struct Capture {
    sockets: Vec<UdpSocket>,
}

impl Capture {
    /// Binds `n` consecutive ports (index 0 is the port given to the peer, 1 is port + 1, …).
    pub fn consecutive(n: u16) -> Self {
        let sockets = udp_consecutive(n);
        for s in &sockets {
            s.set_read_timeout(Some(POLL_READ))
                .expect("set_read_timeout");
        }
        Self { sockets }
    }

    /// The port of socket `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.sockets
            .get(i)
            .and_then(|s| s.local_addr().ok())
            .map_or(0, |a| a.port())
    }

    /// `127.0.0.1:<port of socket i>` as text, for command lines.
    pub fn addr(&self, i: usize) -> String {
        loopback(self.port(i)).to_string()
    }

    /// Socket `i`, e.g. to answer a request.
    pub fn socket(&self, i: usize) -> &UdpSocket {
        self.sockets.get(i).expect("socket index")
    }

    /// Collects datagrams on all sockets until `want` have arrived or `limit` has passed.
    pub fn collect(&self, want: usize, limit: Duration) -> Vec<Datagram> {
        self.collect_answering(want, limit, |_| None)
    }

    /// Like [`collect`](Self::collect), but `answer` may return datagrams to send back to the sender (from the
    /// socket the request arrived at).
    pub fn collect_answering(
        &self,
        want: usize,
        limit: Duration,
        mut answer: impl FnMut(&Datagram) -> Option<Vec<Vec<u8>>>,
    ) -> Vec<Datagram> {
        let start = Instant::now();
        let mut got = Vec::new();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while got.len() < want && start.elapsed() < limit {
            for socket in &self.sockets {
                let Ok((len, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let d = Datagram {
                    port: socket.local_addr().map_or(0, |a| a.port()),
                    from,
                    bytes: buf.get(..len).unwrap_or_default().to_vec(),
                    at: start.elapsed(),
                };
                for reply in answer(&d).unwrap_or_default() {
                    socket.send_to(&reply, from).expect("send reply");
                }
                got.push(d);
            }
        }
        got
    }
}

/// Sends `request` to `to` from `socket` and waits up to `wait` for a datagram for which `accept` holds.
pub fn request_reply(
    socket: &UdpSocket,
    to: SocketAddr,
    request: &[u8],
    wait: Duration,
    accept: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    socket.send_to(request, to).ok()?;
    let start = Instant::now();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while start.elapsed() < wait {
        let left = wait
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(1));
        socket.set_read_timeout(Some(left)).ok()?;
        if let Ok((len, from)) = socket.recv_from(&mut buf) {
            let bytes = buf.get(..len).unwrap_or_default();
            if from == to && accept(bytes) {
                return Some(bytes.to_vec());
            }
        }
    }
    None
}

/// A client UDP socket on an OS-chosen loopback port.
pub fn client_socket() -> UdpSocket {
    UdpSocket::bind(loopback(0)).expect("bind client socket on 127.0.0.1")
}
