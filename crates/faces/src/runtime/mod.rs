//! The only code of the daemon that touches sockets: binding ([`bind_tcp`], [`bind_udp`]), the
//! UDP runner ([`udp`]) that drives every UDP face machine, the TCP driver ([`conversation`])
//! that drives every TCP face conversation, the TCP accept side with its caps ([`tcp`]), the
//! HTTP server ([`http`]) and the sender of single datagrams for HTTP routes ([`sender`]).
//! Faces are pure machines handed to a runner; shutdown is one [`CancellationToken`] cloned
//! into every task. Work over the whole registry runs on the lower-priority
//! [`muster_core::bulk`] pool, behind the threads that answer faces.

pub mod conversation;
pub mod http;

pub mod sender;
pub mod tcp;
#[cfg(test)]
pub(crate) mod testing;
pub mod udp;

use std::io;
use std::net::SocketAddr;

pub use tokio::net::{TcpListener, UdpSocket};
pub use tokio_util::sync::CancellationToken;

/// Pending connections the kernel queues per listener.
pub const LISTEN_BACKLOG: i32 = 1024;

/// Binds a TCP listener; an IPv6 address is bound IPv6-only, so `0.0.0.0:P` and `[::]:P`
/// can both be bound (every face listens on both by default).
pub fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(LISTEN_BACKLOG)?;
    TcpListener::from_std(sock.into())
}

/// Receive buffer asked of the kernel for each UDP face (it caps the request at
/// `net.core.rmem_max`): a burst of registrations, such as a farm of servers starting at once,
/// must not be dropped before the face reads it. Stock servers send their first GameAgent `q`
/// once; a dropped one would leave the server unlisted.
pub const UDP_RECV_BUFFER: usize = 4 << 20;

/// Binds a UDP socket the same way (IPv6-only for IPv6 addresses), for the UDP faces.
pub fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    // Best effort: a smaller buffer only means more drops under a burst (counted by the kernel).
    let _ = sock.set_recv_buffer_size(UDP_RECV_BUFFER);
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    UdpSocket::from_std(sock.into())
}
