//! Wire clients of the master's UDP and TCP faces: GameAgent registrations and `e` lists,
//! Teeworlds 0.6 and 0.7 lists, GameSpy TCP lists.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use muster_proto::gameagent::packet::{
    CHALLENGE, Challenge, Heartbeat, HeartbeatFields, JOIN, LIST_REQUEST, ListReply,
};
use muster_proto::gamespy_master::{self as gsm, Enctype, Greeting, ListForm};
use muster_proto::teeworlds_master::{Framing, Message, Packet, Token};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::{TcpSocket, UdpSocket};

use super::stats::{Client, Request};

/// How long one UDP reply may take before the request counts as failed.
pub(crate) const UDP_TIMEOUT: Duration = Duration::from_secs(2);
/// Receive buffer of list clients: a GameAgent `e` of 100k servers is 600 KB sent at once.
const LIST_RCVBUF: usize = 4 << 20;
/// Attempts of one registration (a lost `q` or challenge is retried after 500 ms).
const ATTEMPTS: u32 = 3;

/// A loopback source address for client `i`: 127.1.0.1, 127.1.0.2, …, never 127.0.0.1.
pub(crate) fn source_ip(i: usize) -> Ipv4Addr {
    let i = u32::try_from(i % 4_000_000).unwrap_or(0);
    Ipv4Addr::new(
        127,
        1 + (i / 62_500) as u8,
        ((i / 250) % 250) as u8,
        (i % 250) as u8 + 1,
    )
}

/// A UDP socket on `ip` with a large receive buffer.
pub(crate) fn list_socket(ip: Ipv4Addr) -> anyhow::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // Capped by net.core.rmem_max (4 MiB here); the bench says so when lists time out.
    let _ = s.set_recv_buffer_size(LIST_RCVBUF);
    s.set_nonblocking(true)?;
    s.bind(&SocketAddr::new(IpAddr::V4(ip), 0).into())?;
    Ok(UdpSocket::from_std(s.into())?)
}

/// What one GameAgent registration observed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registered {
    /// From the first `q` to the challenge (retries included), as the registering task saw
    /// it: its own wake-up after the challenge arrived is included.
    pub rtt: Duration,
    /// The same round trip ending when the kernel queued the challenge on the socket
    /// (`SO_TIMESTAMPNS`), so the registering thread's wait for a core is not counted: on
    /// loopback the master's send queues it, so this is the master's own latency. `None`
    /// when the kernel gave no timestamp.
    pub kernel_rtt: Option<Duration>,
    /// `q`s sent again after 500 ms without an answer.
    pub retries: u32,
}

/// First port of the emulated GameAgent servers on one source address: the server at index
/// `k` of its address uses `SERVER_PORT_BASE + k`, so no two registrations of a run share a key
/// (a port the kernel picks could be picked again for a later registration).
pub(crate) const SERVER_PORT_BASE: u16 = 20_000;

/// One GameAgent registration from `ip`, port [`SERVER_PORT_BASE`] + `k`: `q`, the challenge,
/// the heartbeat echoing it.
pub(crate) async fn register_gameagent(
    ip: Ipv4Addr,
    k: u16,
    master: SocketAddr,
) -> anyhow::Result<Registered> {
    let sock = UdpSocket::bind((ip, SERVER_PORT_BASE.saturating_add(k))).await?;
    // Without timestamps only `rtt` is measured.
    let _ = setsockopt(&sock, sockopt::ReceiveTimestampns, &true);
    let mut buf = [0u8; 512];
    let start = Instant::now();
    let sent_at = SystemTime::now();
    for attempt in 0..ATTEMPTS {
        sock.send_to(&[JOIN], master).await?;
        let Ok(got) =
            tokio::time::timeout(Duration::from_millis(500), recv_stamped(&sock, &mut buf)).await
        else {
            continue;
        };
        let (n, queued_at) = got?;
        let rtt = start.elapsed();
        // Both ends are CLOCK_REALTIME; a clock step could make it negative or longer than
        // the task's own measure, which bounds it.
        let kernel_rtt = queued_at
            .and_then(|t| t.duration_since(sent_at).ok())
            .map(|d| d.min(rtt));
        let Some(bytes) = buf.get(..n) else { continue };
        if bytes.first() != Some(&CHALLENGE) {
            continue;
        }
        let Ok(challenge) = Challenge::decode(bytes) else {
            continue;
        };
        let hb = Heartbeat::stock(&HeartbeatFields {
            challenge: challenge.0,
            players: 3,
            max_players: 16,
            level: b"Yodeller".to_vec(),
            gametype: b"Fragmatch".to_vec(),
            version: b"1.10".to_vec(),
            product: b"serioussamse".to_vec(),
        });
        let mut out = Vec::new();
        hb.encode(&mut out);
        sock.send_to(&out, master).await?;
        return Ok(Registered {
            rtt,
            kernel_rtt,
            retries: attempt,
        });
    }
    bail!("no challenge from the master for {ip}")
}

/// One datagram and, when the socket has `SO_TIMESTAMPNS` on, when the kernel queued it.
async fn recv_stamped(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
    loop {
        sock.readable().await?;
        let got = sock.try_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(buf)];
            let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
            let msg = recvmsg::<SockaddrStorage>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            )
            .map_err(io::Error::from)?;
            let stamp = msg
                .cmsgs()
                .ok()
                .into_iter()
                .flatten()
                .find_map(|c| match c {
                    ControlMessageOwned::ScmTimestampns(ts) => {
                        let secs = u64::try_from(ts.tv_sec()).ok()?;
                        let nanos = u32::try_from(ts.tv_nsec()).ok()?;
                        UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
                    }
                    _ => None,
                });
            Ok((msg.bytes, stamp))
        });
        match got {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => return other,
        }
    }
}

/// GameAgent `e`: the whole list, in many datagrams.
#[derive(Debug)]
pub(crate) struct GameAgentList {
    sock: UdpSocket,
    master: SocketAddr,
    expect: usize,
    buf: Vec<u8>,
}

impl GameAgentList {
    pub(crate) fn new(ip: Ipv4Addr, master: SocketAddr, expect: usize) -> anyhow::Result<Self> {
        Ok(Self {
            sock: list_socket(ip)?,
            master,
            expect,
            buf: vec![0; 65_536],
        })
    }

    async fn one(&mut self) -> anyhow::Result<u64> {
        self.sock.send_to(&[LIST_REQUEST], self.master).await?;
        let mut records = 0;
        let mut bytes = 0u64;
        while records < self.expect {
            let (n, _) = tokio::time::timeout(UDP_TIMEOUT, self.sock.recv_from(&mut self.buf))
                .await
                .with_context(|| {
                    format!("`e` timed out after {records}/{} records", self.expect)
                })??;
            let reply = ListReply::decode(self.buf.get(..n).unwrap_or_default())
                .map_err(|e| anyhow::anyhow!("bad list datagram: {e:?}"))?;
            records += reply.servers().len();
            bytes += n as u64;
        }
        Ok(bytes)
    }
}

impl Client for GameAgentList {
    fn request(&mut self, _seq: u64) -> Request<'_> {
        Box::pin(self.one())
    }
}

/// Teeworlds `req2` over 0.6 framing, or over 0.7 after the token handshake.
#[derive(Debug)]
pub(crate) struct TeeworldsList {
    sock: UdpSocket,
    master: SocketAddr,
    expect: usize,
    /// 0.7: our token and the master's.
    tokens: Option<(Token, Token)>,
    buf: Vec<u8>,
}

fn encode(p: &Packet) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.encoded_len());
    p.encode(&mut out);
    out
}

impl TeeworldsList {
    pub(crate) fn v06(ip: Ipv4Addr, master: SocketAddr, expect: usize) -> anyhow::Result<Self> {
        Ok(Self {
            sock: list_socket(ip)?,
            master,
            expect,
            tokens: None,
            buf: vec![0; 4096],
        })
    }

    /// A 0.7 client: asks the master for its token first.
    pub(crate) async fn v07(
        ip: Ipv4Addr,
        master: SocketAddr,
        expect: usize,
    ) -> anyhow::Result<Self> {
        let sock = list_socket(ip)?;
        let own = Token(rand::random());
        sock.send_to(&encode(&Packet::token_request(own)), master)
            .await?;
        let mut buf = vec![0; 4096];
        let (n, _) = tokio::time::timeout(UDP_TIMEOUT, sock.recv_from(&mut buf))
            .await
            .context("no 0.7 token reply")??;
        let Ok(Packet::Token { token: theirs, .. }) =
            Packet::decode(buf.get(..n).unwrap_or_default())
        else {
            bail!("not a 0.7 token reply");
        };
        Ok(Self {
            sock,
            master,
            expect,
            tokens: Some((own, theirs)),
            buf,
        })
    }

    async fn one(&mut self) -> anyhow::Result<u64> {
        let framing = match self.tokens {
            None => Framing::STANDARD_06,
            Some((own, theirs)) => Framing::V07 {
                token: theirs,
                response_token: own,
            },
        };
        let req = encode(&Packet::Connless {
            framing,
            message: Message::ListRequest,
        });
        self.sock.send_to(&req, self.master).await?;
        let mut entries = 0;
        let mut bytes = 0u64;
        while entries < self.expect {
            let (n, _) = tokio::time::timeout(UDP_TIMEOUT, self.sock.recv_from(&mut self.buf))
                .await
                .with_context(|| {
                    format!("req2 timed out after {entries}/{} servers", self.expect)
                })??;
            match Packet::decode(self.buf.get(..n).unwrap_or_default()) {
                Ok(Packet::Connless {
                    message: Message::List(l),
                    ..
                }) => entries += l.entries().len(),
                other => bail!("unexpected reply to req2: {other:?}"),
            }
            bytes += n as u64;
        }
        Ok(bytes)
    }
}

impl Client for TeeworldsList {
    fn request(&mut self, _seq: u64) -> Request<'_> {
        Box::pin(self.one())
    }
}

/// GameSpy TCP list: greeting, `\gamename\…\validate\…\final\\list\cmp\gamename\<g>\final\`,
/// the cmp list, close. One connection per list, as every GameSpy client does.
#[derive(Debug)]
pub(crate) struct GameSpyList {
    master: SocketAddr,
    game: &'static str,
    key: &'static str,
    expect: usize,
    source: usize,
}

impl GameSpyList {
    pub(crate) fn new(
        master: SocketAddr,
        game: &'static str,
        expect: usize,
        source: usize,
    ) -> anyhow::Result<Self> {
        let key = gsm::game_keys(game.as_bytes())
            .first()
            .copied()
            .with_context(|| format!("no GameSpy key for {game}"))?;
        Ok(Self {
            master,
            game,
            key,
            expect,
            source,
        })
    }

    async fn one(&mut self, seq: u64) -> anyhow::Result<u64> {
        // Sources rotate over 64 addresses so that no source runs out of ports.
        let src = source_ip(self.source + (seq % 64) as usize);
        let sock = TcpSocket::new_v4()?;
        sock.bind(SocketAddr::new(IpAddr::V4(src), 0))?;
        let exchange = async {
            let mut s = sock.connect(self.master).await?;
            s.set_nodelay(true)?;
            let mut greeting = Vec::with_capacity(64);
            let mut chunk = [0u8; 256];
            let challenge = loop {
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    bail!("closed before the greeting");
                }
                greeting.extend_from_slice(chunk.get(..n).unwrap_or_default());
                if let Ok(g) = Greeting::decode(&greeting) {
                    break g.challenge;
                }
                if greeting.len() > 64 {
                    bail!("bad greeting");
                }
            };
            let validate = gsm::validate_string(&challenge, self.key.as_bytes(), Enctype::Zero)
                .context("validate")?;
            let g = self.game;
            let req = format!(
                "\\gamename\\{g}\\enctype\\0\\validate\\{validate}\\final\\\\list\\cmp\\gamename\\{g}\\final\\"
            );
            s.write_all(req.as_bytes()).await?;
            let mut list = Vec::with_capacity(self.expect * 6 + 16);
            s.read_to_end(&mut list).await?;
            anyhow::Ok(list)
        };
        let list = tokio::time::timeout(UDP_TIMEOUT * 5, exchange)
            .await
            .context("GameSpy list timed out")??;
        let reply = gsm::ListReply::decode(&list, ListForm::Cmp)
            .map_err(|e| anyhow::anyhow!("bad GameSpy list ({} bytes): {e:?}", list.len()))?;
        if reply.servers.len() < self.expect {
            bail!(
                "GameSpy list had {} of {} servers",
                reply.servers.len(),
                self.expect
            );
        }
        Ok(list.len() as u64)
    }
}

impl Client for GameSpyList {
    fn request(&mut self, seq: u64) -> Request<'_> {
        Box::pin(self.one(seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stamped_receive_reads_the_datagram_and_when_the_kernel_queued_it() {
        let rx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        setsockopt(&rx, sockopt::ReceiveTimestampns, &true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let before = SystemTime::now();
        tx.send_to(b"challenge", rx.local_addr().unwrap())
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let (n, stamp) = recv_stamped(&rx, &mut buf).await.unwrap();
        let after = SystemTime::now();
        assert_eq!(buf.get(..n), Some(&b"challenge"[..]));
        let stamp = stamp.expect("the kernel stamps a datagram when asked to");
        assert!(
            before <= stamp && stamp <= after,
            "{before:?} {stamp:?} {after:?}"
        );
    }

    #[tokio::test]
    async fn without_the_option_a_receive_has_no_stamp() {
        let rx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(recv_stamped(&rx, &mut buf).await.unwrap(), (1, None));
    }
}
