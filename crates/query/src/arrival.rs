//! One datagram at a time, with the instant it reached the socket: the kernel's arrival stamp
//! (`SO_TIMESTAMPNS`) on a tokio UDP socket, for servers that answer one request per read
//! (the query engine reads in batches of its own; both convert a stamp the same way, see
//! `socket.rs`).
//!
//! A responder that holds a reply back for a set delay counts the delay from here: a burst of
//! requests read one after another then leaves after the delay, not after the delay plus the
//! time the earlier requests of the burst took to read and answer.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd as _;
use std::time::{Instant, SystemTime};

use nix::sys::socket::{MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt};
use nix::sys::time::TimeSpec;
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::socket::{arrival, stamp_of, to_std};

/// Asks the kernel to stamp arrivals on `socket`; false when it refuses (reads then give the
/// instant of the read).
pub fn stamp_arrivals(socket: &UdpSocket) -> bool {
    setsockopt(socket, sockopt::ReceiveTimestampns, &true)
        .inspect_err(|e| tracing::debug!(error = %e, "no arrival stamps on the socket"))
        .is_ok()
}

/// Receives one datagram into `buf`: its length, sender and arrival instant (the kernel's
/// stamp when [`stamp_arrivals`] was set and the stamp is plausible, else the instant of the
/// read). Cancel-safe like [`UdpSocket::recv_from`].
///
/// # Errors
/// Those of the read.
pub async fn recv_from(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Instant)> {
    let fd = socket.as_raw_fd();
    loop {
        socket.readable().await?;
        let result = socket.try_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(&mut *buf)];
            let mut cmsg = nix::cmsg_space!(TimeSpec);
            let msg = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut cmsg), MsgFlags::empty())
                .map_err(io::Error::from)?;
            let clocks = (Instant::now(), SystemTime::now());
            let stamp = msg.cmsgs().ok().and_then(stamp_of);
            let from = msg.address.as_ref().and_then(to_std);
            Ok((msg.bytes, from, stamp, clocks))
        });
        match result {
            Ok((n, Some(from), stamp, (read, wall))) => {
                return Ok((n, from, arrival(stamp, read, wall).unwrap_or(read)));
            }
            // No sender address (not a UDP datagram as the kernel hands them): nobody to
            // answer, so read on.
            Ok((_, None, _, _)) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_datagram_left_unread_keeps_its_arrival_instant() {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert!(stamp_arrivals(&socket));
        let to = socket.local_addr().unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let stall = Duration::from_millis(100);
        let mut buf = [0u8; 64];
        // Stamping may come on a moment after the first socket of the machine asks for it:
        // until then a stamp is the read's time, so try a few times.
        for _ in 0..20 {
            let sent = Instant::now();
            peer.send_to(b"hello", to).unwrap();
            std::thread::sleep(stall);
            let reading = Instant::now();
            let (n, from, arrived) = recv_from(&socket, &mut buf).await.unwrap();
            assert_eq!(
                (&buf[..n], from),
                (&b"hello"[..], peer.local_addr().unwrap())
            );
            assert!(
                arrived + Duration::from_millis(5) >= sent,
                "{arrived:?} {sent:?}"
            );
            if reading.saturating_duration_since(arrived) >= stall / 2 {
                return;
            }
        }
        panic!("no read gave the arrival instant of a datagram left unread for {stall:?}");
    }
}
