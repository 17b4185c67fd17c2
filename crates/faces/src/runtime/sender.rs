//! Single datagrams that an HTTP route wants sent (the DDNet register route's UDP `chal`):
//! the route's machine decides what goes where and within which budget; this sender owns the
//! sockets and does the one `send_to`.
//!
//! Does not: budget, retry, or read anything (the sockets are send-only).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::UdpSocket;

/// The sockets a face sends its datagrams from, one per address family at least.
#[derive(Debug, Clone, Default)]
pub struct DatagramSender {
    sockets: Vec<Arc<UdpSocket>>,
}

/// No socket of the destination's address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSocket;

impl DatagramSender {
    /// Sends from `sockets` (bind them to `0.0.0.0:0` and `[::]:0`; the first of the
    /// destination's family is used).
    #[must_use]
    pub fn new(sockets: Vec<Arc<UdpSocket>>) -> Self {
        Self { sockets }
    }

    /// Sends `bytes` to `to` from the first socket of `to`'s family. A failed send is logged,
    /// not returned (a datagram may be lost anyway); `Err` only when no socket can reach `to`.
    pub async fn send_to(&self, to: SocketAddr, bytes: &[u8]) -> Result<(), NoSocket> {
        let socket = self
            .sockets
            .iter()
            .find(|s| s.local_addr().is_ok_and(|a| a.is_ipv4() == to.is_ipv4()))
            .ok_or(NoSocket)?;
        if let Err(e) = socket.send_to(bytes, to).await {
            tracing::debug!(%to, error = %e, "datagram send failed");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sends_from_the_family_of_the_destination() {
        let v4 = Arc::new(crate::runtime::bind_udp("127.0.0.1:0".parse().unwrap()).unwrap());
        let rx = crate::runtime::bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        let s = DatagramSender::new(vec![Arc::clone(&v4)]);
        s.send_to(to, b"chal").await.unwrap();
        let mut b = [0u8; 8];
        let (n, from) = rx.recv_from(&mut b).await.unwrap();
        assert_eq!(&b[..n], b"chal");
        assert_eq!(from, v4.local_addr().unwrap());
        // No IPv6 socket: an IPv6 destination cannot be reached.
        assert_eq!(
            s.send_to("[::1]:9".parse().unwrap(), b"x").await,
            Err(NoSocket)
        );
    }
}
