//! The loopback limit: datagrams per second that one UDP socket exchanges with an echo socket
//! on this machine, both moving batches of 32 with `sendmmsg`/`recvmmsg`. It is the ceiling of
//! any scanner here (requests out and replies in on one socket), so the scan bench reports
//! Muster's rate as a share of it.

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg};

const BATCH: usize = 32;
/// Bytes per datagram: about a status request.
const SIZE: usize = 64;
/// Datagrams in flight at most: well inside the default socket buffers.
const WINDOW: usize = 256;

fn send_batch(
    socket: &UdpSocket,
    to: &[SockaddrStorage],
    payload: &[u8],
    flags: MsgFlags,
) -> usize {
    let n = to.len().min(BATCH);
    if n == 0 {
        return 0;
    }
    let iovs: Vec<[IoSlice<'_>; 1]> = (0..n).map(|_| [IoSlice::new(payload)]).collect();
    let addrs: Vec<Option<SockaddrStorage>> = to.iter().take(n).copied().map(Some).collect();
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(n, None);
    sendmmsg(socket.as_raw_fd(), &mut headers, &iovs, &addrs, [], flags).map_or(0, Iterator::count)
}

/// Receive up to a batch; the sources go into `from`.
fn recv_batch(
    socket: &UdpSocket,
    buf: &mut [u8],
    from: &mut Vec<SockaddrStorage>,
    flags: MsgFlags,
) -> usize {
    from.clear();
    let mut iovs: Vec<[IoSliceMut<'_>; 1]> = buf
        .chunks_mut(SIZE * 2)
        .take(BATCH)
        .map(|c| [IoSliceMut::new(c)])
        .collect();
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    match recvmmsg(socket.as_raw_fd(), &mut headers, &mut iovs, flags, None) {
        Ok(msgs) => {
            for m in msgs {
                if let Some(a) = m.address {
                    from.push(a);
                }
            }
            from.len()
        }
        Err(_) => 0,
    }
}

/// Datagrams per second (sent + received by one socket) over `duration`.
pub(crate) fn measure(duration: Duration) -> anyhow::Result<f64> {
    let echo = UdpSocket::bind("127.0.0.1:0").context("binding the echo socket")?;
    let client = UdpSocket::bind("127.0.0.1:0").context("binding the client socket")?;
    echo.set_read_timeout(Some(Duration::from_millis(50)))?;
    client.set_read_timeout(Some(Duration::from_millis(50)))?;
    let echo_addr: SocketAddr = echo.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_echo = stop.clone();
    let server = std::thread::spawn(move || {
        let mut buf = vec![0u8; BATCH * SIZE * 2];
        let mut from = Vec::with_capacity(BATCH);
        let payload = [0x5a; SIZE];
        while !stop_echo.load(Ordering::Relaxed) {
            if recv_batch(&echo, &mut buf, &mut from, MsgFlags::MSG_WAITFORONE) > 0 {
                send_batch(&echo, &from, &payload, MsgFlags::empty());
            }
        }
    });
    let to = vec![SockaddrStorage::from(echo_addr); BATCH];
    let payload = [0xa5; SIZE];
    let mut buf = vec![0u8; BATCH * SIZE * 2];
    let mut from = Vec::with_capacity(BATCH);
    let (mut sent, mut received, mut outstanding) = (0u64, 0u64, 0usize);
    let start = Instant::now();
    while start.elapsed() < duration {
        let room = WINDOW.saturating_sub(outstanding).min(BATCH);
        if room > 0 {
            let n = send_batch(
                &client,
                to.get(..room).unwrap_or_default(),
                &payload,
                MsgFlags::empty(),
            );
            sent += n as u64;
            outstanding += n;
        }
        let flags = if outstanding >= WINDOW {
            MsgFlags::MSG_WAITFORONE
        } else {
            MsgFlags::MSG_DONTWAIT
        };
        let got = recv_batch(&client, &mut buf, &mut from, flags);
        if got == 0 && flags == MsgFlags::MSG_WAITFORONE {
            // Nothing for 50 ms: what is still out was lost.
            outstanding = 0;
        }
        received += got as u64;
        outstanding = outstanding.saturating_sub(got);
    }
    let seconds = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    Ok((sent + received) as f64 / seconds)
}
