//! `muster-bench valve`: Muster's Half-Life / Xash3D master face and xash3d-master side by side
//! on loopback (the method is [`crate::side`]'s).
//!
//! - **Registration**: an emulated server asks for a challenge (`q ff` and a number of its own),
//!   reads the master's reply (the challenge, its own number echoed) and sends its heartbeat
//!   (`0\n` and backslash pairs: protocol 48, the challenge, 4 of 16 players, game directory
//!   `valve`, map `crossfire`, version 0.21, region 255); a challenge request without a reply
//!   within a second is sent again (at most three times). Neither master answers a heartbeat.
//! - **Lists**: `1`, region 255, the seed address `0.0.0.0:0` and the filter
//!   `\gamedir\valve\clver\0.21` (xash3d-master answers a query without `clver` with one
//!   placeholder server), read whole: until every registered server came when the count is
//!   known; a page that does not end with the all-zero address is followed by a request for the
//!   next page after its last address, as a Valve client does.
//! - **xash3d-master**: `-i 127.0.0.1 -p PORT -l error -c CONFIG`, the configuration allowing
//!   `--per-address` servers per address (its default is 14) and keeping a server a day.
//!   It grows as servers come, so its memory per server is taken like Muster's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::bail;
use muster_proto::valve_master::{
    ChallengeReply, ChallengeRequest, Heartbeat, ListReply, ListRequest, Region, ServerPacket,
};
use tokio::net::UdpSocket;

use crate::side::{self, Ask, BoxFuture, Family, ListRead, SideArgs, Started};

/// The game directory every emulated server runs and every client asks for.
const GAMEDIR: &str = "valve";
/// The filter of every list request.
const FILTER: &str = "\\gamedir\\valve\\clver\\0.21";
/// How long one registration waits for its challenge before asking again.
const CHALLENGE_WAIT: Duration = Duration::from_millis(1000);
/// Challenge requests one registration sends at most.
const ATTEMPTS: u32 = 3;
/// How long the first datagram of a list may take before the request counts as failed.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// Flags of `muster-bench valve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ValveArgs {
    #[command(flatten)]
    side: SideArgs,
    /// xash3d-master's binary (relative paths from the workspace root); `bash
    /// scripts/install-peers.sh` builds it there.
    #[arg(long, default_value = ".peers/bin/xash3d-master")]
    xash3d_master: PathBuf,
}

/// The Half-Life / Xash3D family for [`side`].
#[derive(Debug)]
struct Valve;

/// The heartbeat of server `i`, carrying `challenge`.
fn heartbeat(i: usize, challenge: u32) -> Vec<u8> {
    let pairs: [(&str, String); 15] = [
        ("protocol", "48".to_owned()),
        ("challenge", challenge.to_string()),
        ("players", "4".to_owned()),
        ("max", "16".to_owned()),
        ("bots", "0".to_owned()),
        ("gamedir", GAMEDIR.to_owned()),
        ("map", "crossfire".to_owned()),
        ("type", "d".to_owned()),
        ("password", "0".to_owned()),
        ("os", "l".to_owned()),
        ("secure", "0".to_owned()),
        ("lan", "0".to_owned()),
        ("version", "0.21".to_owned()),
        ("region", "255".to_owned()),
        ("product", format!("bench{}", i % 7)),
    ];
    ServerPacket::Heartbeat(Heartbeat::new(
        pairs
            .into_iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.into_bytes()))
            .collect(),
    ))
    .encode()
}

/// One server's registration: challenge request, challenge, heartbeat. Returns the requests
/// sent again.
async fn register(i: usize, sock: &UdpSocket, master: SocketAddr) -> anyhow::Result<u32> {
    let own = u32::try_from(i % (u32::MAX as usize)).unwrap_or(0) ^ 0x5A5A_0000;
    let ask = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(own),
    })
    .encode();
    let got = side::ask_until_answered(sock, master, &ask, ATTEMPTS, CHALLENGE_WAIT, |d| {
        ChallengeReply::decode(d)
            .ok()
            .filter(|reply| reply.server_challenge.is_none_or(|s| s == own))
    })
    .await?;
    let Some((attempt, reply)) = got else {
        bail!("no challenge for server {i}")
    };
    sock.send_to(&heartbeat(i, reply.challenge), master).await?;
    Ok(attempt)
}

/// Reads a whole list from `master`: pages until `expect` entries came (when known), a page
/// not ending the list followed by the next page's request, the end when nothing more comes.
async fn read_list(
    sock: &UdpSocket,
    master: SocketAddr,
    request: &[u8],
    expect: Option<usize>,
    quiet: Duration,
) -> anyhow::Result<ListRead> {
    sock.send_to(request, master).await?;
    let mut buf = vec![0u8; 65_536];
    let mut read = ListRead::default();
    loop {
        let wait = if read.datagrams == 0 {
            LIST_TIMEOUT
        } else {
            quiet
        };
        let Ok(got) = tokio::time::timeout(wait, sock.recv_from(&mut buf)).await else {
            if read.datagrams == 0 {
                bail!("no list within {LIST_TIMEOUT:?}");
            }
            return Ok(read);
        };
        let (n, from) = got?;
        if from != master {
            continue;
        }
        let page = ListReply::decode(buf.get(..n).unwrap_or_default(), false, false)
            .map_err(|e| anyhow::anyhow!("not a list datagram ({n} bytes): {e:?}"))?;
        read.entries += page.servers.len();
        read.first.get_or_insert_with(std::time::Instant::now);
        read.datagrams += 1;
        read.bytes += n as u64;
        if expect.is_some_and(|want| read.entries >= want) {
            return Ok(read);
        }
        if !page.complete
            && let Some(&last) = page.servers.last()
        {
            let next = ListRequest {
                region: Region::WORLD,
                last,
                filter: FILTER.as_bytes().to_vec(),
            };
            sock.send_to(&next.encode(), master).await?;
        }
    }
}

/// Starts xash3d-master on loopback and waits until it answers a list.
async fn start_xash(
    family: &Valve,
    bin: &Path,
    per_address: usize,
    dir: &Path,
    tag: &str,
) -> anyhow::Result<Started> {
    let port = side::free_udp_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let config = dir.join(format!("{tag}.toml"));
    std::fs::write(
        &config,
        format!(
            "[server]\nmax-servers-per-ip = {}\n\n[server.timeout]\nserver = 86400\n",
            per_address.clamp(1, usize::from(u16::MAX))
        ),
    )?;
    let mut cmd = Command::new(bin);
    cmd.args(["-i", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-l", "error", "-c"])
        .arg(&config);
    side::spawn_peer(family, cmd, addr, dir, tag).await
}

impl Family for Valve {
    fn face(&self) -> &'static str {
        "valve"
    }

    fn peer(&self) -> &'static str {
        "xash3d-master"
    }

    fn peer_command(&self) -> String {
        "-i 127.0.0.1 -p PORT -l error -c CONFIG (max-servers-per-ip = --per-address, servers \
         kept a day)"
            .to_owned()
    }

    fn servers_describe(&self) -> String {
        format!(
            "challenge request → challenge → heartbeat (gamedir {GAMEDIR}, protocol 48, 4 of 16 \
             players, version 0.21)"
        )
    }

    fn asks(&self) -> anyhow::Result<Vec<Ask>> {
        Ok(vec![Ask {
            label: format!("1 ff 0.0.0.0:0 {FILTER}"),
            datagram: ListRequest::first(FILTER.as_bytes()).encode(),
        }])
    }

    fn preallocates(&self) -> bool {
        false
    }

    fn register<'a>(
        &'a self,
        i: usize,
        sock: &'a UdpSocket,
        master: SocketAddr,
    ) -> BoxFuture<'a, anyhow::Result<u32>> {
        Box::pin(register(i, sock, master))
    }

    fn read_list<'a>(
        &'a self,
        sock: &'a UdpSocket,
        master: SocketAddr,
        ask: &'a Ask,
        expect: Option<usize>,
        quiet: Duration,
    ) -> BoxFuture<'a, anyhow::Result<ListRead>> {
        Box::pin(read_list(sock, master, &ask.datagram, expect, quiet))
    }

    fn start_peer<'a>(
        &'a self,
        bin: &'a Path,
        _max: usize,
        per_address: usize,
        dir: &'a Path,
        tag: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Started>> {
        Box::pin(start_xash(self, bin, per_address, dir, tag))
    }
}

/// Runs the bench and prints its tables.
pub(crate) async fn run(args: &ValveArgs) -> anyhow::Result<()> {
    side::run(Valve, &args.side, &args.xash3d_master).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_carries_the_challenge_and_what_xash3d_master_requires() {
        let bytes = heartbeat(3, 123_456);
        let Ok(ServerPacket::Heartbeat(h)) = ServerPacket::decode(&bytes) else {
            panic!("not a heartbeat");
        };
        assert_eq!(h.challenge(), Some(123_456));
        assert_eq!(h.gamedir(), Some(GAMEDIR.as_bytes()));
        assert_eq!(h.get("version"), Some(&b"0.21"[..]));
        assert_eq!(h.region(), Some(Region::WORLD));
        assert_eq!((h.players(), h.max_players()), (Some(4), Some(16)));
    }

    #[test]
    fn the_list_request_asks_everywhere_from_the_seed_with_the_client_version() {
        let ask = &Valve.asks().unwrap()[0];
        let req = ListRequest::decode(&ask.datagram).unwrap();
        assert_eq!(req.region, Region::WORLD);
        assert_eq!(req.last, SocketAddr::from(([0, 0, 0, 0], 0)));
        assert_eq!(req.filter, FILTER.as_bytes());
    }
}
