//! `muster list --protocol teeworlds` reads the `lis2` list of a Teeworlds 0.6 UDP master (a fake
//! master on loopback built with `muster_proto::teeworlds_master`'s encoders), and the listed real
//! server answers `muster query`.

use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_proto::teeworlds_master::packet::ListReply;
use muster_proto::teeworlds_master::{Framing, ListEntry, Message, Packet};
use muster_testkit::{DdnetServer, free_udp_port};

use crate::common::muster;

/// A fake 0.6 master answering `cou2` with `siz2` and `req2` with `lis2` datagrams of
/// `entries`; stopped on drop.
struct FakeMaster {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeMaster {
    fn start(entries: Vec<SocketAddr>) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind master");
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .expect("read timeout");
        let addr = socket.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let entries: Vec<ListEntry> = entries
            .into_iter()
            .map(ListEntry::from_socket_addr)
            .collect();
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(30);
            let mut buf = [0u8; 2048];
            while !halt.load(Ordering::Relaxed) && Instant::now() < end {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let Ok(Packet::Connless {
                    framing: framing @ Framing::V06(_),
                    message,
                }) = Packet::decode(&buf[..n])
                else {
                    continue; // 0.7 handshakes and junk: a 0.6-only master ignores them.
                };
                let replies: Vec<Message> = match message {
                    Message::CountRequest => vec![Message::CountReply {
                        count: u16::try_from(entries.len()).unwrap_or(u16::MAX),
                    }],
                    Message::ListRequest => ListReply::split(&entries)
                        .into_iter()
                        .map(Message::List)
                        .collect(),
                    _ => Vec::new(),
                };
                for message in replies {
                    let mut out = Vec::new();
                    Packet::Connless {
                        framing: framing.reply(muster_proto::teeworlds_master::Token::NONE),
                        message,
                    }
                    .encode(&mut out);
                    let _ = socket.send_to(&out, from);
                }
            }
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeMaster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn list(master: SocketAddr) -> Vec<String> {
    let run = muster(&[
        "list",
        "-p",
        "teeworlds",
        "-f",
        "json",
        "--timeout",
        "300ms",
        "--retries",
        "1",
        &master.to_string(),
    ]);
    let v = run.json();
    assert_eq!(run.code, Some(0), "{v}\n{}", run.stderr);
    let mut a: Vec<String> = v
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|s| {
            assert_eq!(s["master_protocol"], "teeworlds", "{s}");
            s["address"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    a.sort();
    a
}

#[test]
fn list_reads_a_multi_datagram_lis2_list() {
    // 160 entries: three `lis2` datagrams (75 + 75 + 10), one of them IPv6.
    let mut servers: Vec<SocketAddr> = (0..159u16)
        .map(|i| SocketAddr::from(([127, 0, 1, (i % 250) as u8], 8303 + i)))
        .collect();
    servers.push(SocketAddr::from((Ipv6Addr::LOCALHOST, 8305)));
    let master = FakeMaster::start(servers.clone());
    let mut want: Vec<String> = servers
        .iter()
        .map(|a| match a {
            SocketAddr::V4(v4) => v4.to_string(),
            SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
        })
        .collect();
    want.sort();
    assert_eq!(list(master.addr), want);
}

#[test]
fn listed_ddnet_server_answers_the_query() {
    let Some(dd) = DdnetServer::require() else {
        return;
    };
    let server = dd.start(free_udp_port(), &[]);
    let master = FakeMaster::start(vec![server.addr()]);
    let listed = list(master.addr);
    assert_eq!(listed, [server.addr().to_string()]);
    let run = muster(&[
        "query",
        "-p",
        "teeworlds",
        "-f",
        "json",
        "--timeout",
        "500ms",
        &listed[0],
    ]);
    let v = run.json();
    assert_eq!(run.code, Some(0), "{v}");
    assert_eq!(v[0]["status"], "ok", "{v}");
    assert_eq!(v[0]["map"], "Tutorial", "{v}");
}
