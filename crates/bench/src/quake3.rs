//! `muster-bench quake3`: Muster's Quake III master face and dpmaster side by side on loopback
//! (the method is [`crate::side`]'s).
//!
//! - **Registration**: an emulated server sends `heartbeat DarkPlaces`, reads the master's
//!   `getinfo <challenge>` and answers an `infoResponse` echoing it (game `BenchGame`, protocol
//!   3, 4 of 16 players); a heartbeat without a `getinfo` within a second is sent again (at most
//!   three times).
//! - **Lists**: `getserversExt BenchGame 3` (polled while registering) and `getservers
//!   BenchGame 3`, each read to the datagram carrying `EOT`.
//! - **dpmaster**: `-n N -N 0 --allow-loopback -v 1`: room for exactly N servers, no cap per
//!   address, errors only (a daemon prints nothing; at its default verbosity it writes a few
//!   lines per message). It allocates its server array up front, so its memory per server is
//!   taken against an idle dpmaster with `-n 1`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};
use muster_proto::quake3::{InfoString, Packet, Word};
use tokio::net::UdpSocket;

use crate::side::{self, Ask, BoxFuture, Family, ListRead, SideArgs, Started};

/// The game every emulated server plays and every client asks for.
const GAME: &str = "BenchGame";
/// DarkPlaces' protocol number, sent by the servers and asked for by the clients.
const PROTOCOL: i32 = 3;
/// The heartbeat tag of the DarkPlaces family (the game name then comes in the info).
const TAG: &str = "DarkPlaces";
/// How long one registration waits for its `getinfo` before sending the heartbeat again.
const GETINFO_WAIT: Duration = Duration::from_millis(1000);
/// Heartbeats one registration sends at most.
const ATTEMPTS: u32 = 3;
/// How long a list datagram may take before the request counts as failed.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// Flags of `muster-bench quake3`.
#[derive(Debug, clap::Args)]
pub(crate) struct Quake3Args {
    #[command(flatten)]
    side: SideArgs,
    /// dpmaster's binary (relative paths from the workspace root); `bash
    /// scripts/install-peers.sh` builds it there.
    #[arg(long, default_value = ".peers/bin/dpmaster")]
    dpmaster: PathBuf,
}

/// The Quake III family for [`side`].
#[derive(Debug)]
struct Quake3 {
    heartbeat: Vec<u8>,
}

/// Which list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    /// `getservers BenchGame 3`.
    Plain,
    /// `getserversExt BenchGame 3`.
    Ext,
}

impl List {
    fn ask(self) -> anyhow::Result<Ask> {
        let game = Word::new(GAME.as_bytes().to_vec()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let (label, packet) = match self {
            Self::Plain => (
                "getservers",
                Packet::GetServers {
                    game: Some(game),
                    protocol: PROTOCOL,
                    options: Vec::new(),
                },
            ),
            Self::Ext => (
                "getserversExt",
                Packet::GetServersExt {
                    game,
                    protocol: PROTOCOL,
                    options: Vec::new(),
                },
            ),
        };
        let mut datagram = Vec::new();
        packet.encode(&mut datagram);
        Ok(Ask {
            label: format!("{label} {GAME} {PROTOCOL}"),
            datagram,
        })
    }
}

/// Sends `request` and reads the list until the datagram carrying `EOT`.
async fn read_list(
    sock: &UdpSocket,
    master: SocketAddr,
    request: &[u8],
) -> anyhow::Result<ListRead> {
    sock.send_to(request, master).await?;
    let mut buf = vec![0u8; 65_536];
    let mut read = ListRead::default();
    loop {
        let (n, from) = tokio::time::timeout(LIST_TIMEOUT, sock.recv_from(&mut buf))
            .await
            .with_context(|| {
                format!(
                    "list timed out after {} entries in {} datagrams",
                    read.entries, read.datagrams
                )
            })??;
        if from != master {
            continue;
        }
        let bytes = buf.get(..n).unwrap_or_default();
        let Ok(Packet::ServerList(list)) = Packet::decode(bytes) else {
            bail!("not a list datagram ({n} bytes)");
        };
        read.entries += list.servers.len();
        read.first.get_or_insert_with(std::time::Instant::now);
        read.datagrams += 1;
        read.bytes += n as u64;
        if list.eot {
            return Ok(read);
        }
    }
}

/// The `infoResponse` of server `i`, echoing `challenge`.
fn info_response(i: usize, challenge: &Word) -> anyhow::Result<Vec<u8>> {
    let mut info = InfoString::new();
    let fields: [(&[u8], Vec<u8>); 9] = [
        (b"gamename", GAME.as_bytes().to_vec()),
        (b"modname", b"data".to_vec()),
        (b"gameversion", b"20000".to_vec()),
        (b"sv_maxclients", b"16".to_vec()),
        (b"clients", b"4".to_vec()),
        (b"bots", b"0".to_vec()),
        (b"mapname", b"stormkeep".to_vec()),
        (b"hostname", format!("Bench server {i}").into_bytes()),
        (b"protocol", PROTOCOL.to_string().into_bytes()),
    ];
    for (k, v) in fields {
        info.push(k.to_vec(), v)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    info.push(b"challenge".to_vec(), challenge.as_bytes().to_vec())
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut out = Vec::new();
    Packet::InfoResponse { info }.encode(&mut out);
    Ok(out)
}

/// One server's registration: heartbeat, `getinfo`, `infoResponse`. Returns the heartbeats sent
/// again.
async fn register(
    i: usize,
    sock: &UdpSocket,
    master: SocketAddr,
    heartbeat: &[u8],
) -> anyhow::Result<u32> {
    let got = side::ask_until_answered(sock, master, heartbeat, ATTEMPTS, GETINFO_WAIT, |d| {
        match Packet::decode(d) {
            Ok(Packet::GetInfo {
                challenge: Some(challenge),
            }) => Some(challenge),
            _ => None,
        }
    })
    .await?;
    let Some((attempt, challenge)) = got else {
        bail!("no getinfo for server {i}")
    };
    sock.send_to(&info_response(i, &challenge)?, master).await?;
    Ok(attempt)
}

/// Starts dpmaster on loopback with room for `max` servers and waits until it answers a list.
async fn start_dpmaster(
    family: &Quake3,
    bin: &Path,
    max: usize,
    dir: &Path,
    tag: &str,
) -> anyhow::Result<Started> {
    // Started as root, dpmaster locks itself into this directory and fails without it.
    let _ = std::fs::create_dir_all("/var/empty");
    let port = side::free_udp_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut cmd = Command::new(bin);
    cmd.args(["-l", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg("-n")
        .arg(max.max(1).to_string())
        .args(["-N", "0", "--allow-loopback", "-v", "1"]);
    side::spawn_peer(family, cmd, addr, dir, tag).await
}

impl Family for Quake3 {
    fn face(&self) -> &'static str {
        "quake3"
    }

    fn peer(&self) -> &'static str {
        "dpmaster"
    }

    fn peer_command(&self) -> String {
        "-n N -N 0 --allow-loopback -v 1 (room for exactly N servers, no cap per address, errors \
         only on stdout, as a daemon prints nothing)"
            .to_owned()
    }

    fn servers_describe(&self) -> String {
        format!(
            "heartbeat {TAG} → getinfo → infoResponse (gamename {GAME}, protocol {PROTOCOL}, 4 of \
             16 players)"
        )
    }

    fn asks(&self) -> anyhow::Result<Vec<Ask>> {
        Ok(vec![List::Ext.ask()?, List::Plain.ask()?])
    }

    fn preallocates(&self) -> bool {
        true
    }

    fn register<'a>(
        &'a self,
        i: usize,
        sock: &'a UdpSocket,
        master: SocketAddr,
    ) -> BoxFuture<'a, anyhow::Result<u32>> {
        Box::pin(register(i, sock, master, &self.heartbeat))
    }

    fn read_list<'a>(
        &'a self,
        sock: &'a UdpSocket,
        master: SocketAddr,
        ask: &'a Ask,
        _expect: Option<usize>,
        _quiet: Duration,
    ) -> BoxFuture<'a, anyhow::Result<ListRead>> {
        Box::pin(read_list(sock, master, &ask.datagram))
    }

    fn start_peer<'a>(
        &'a self,
        bin: &'a Path,
        max: usize,
        _per_address: usize,
        dir: &'a Path,
        tag: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Started>> {
        Box::pin(start_dpmaster(self, bin, max, dir, tag))
    }
}

/// Runs the bench and prints its tables.
pub(crate) async fn run(args: &Quake3Args) -> anyhow::Result<()> {
    let mut heartbeat = Vec::new();
    Packet::Heartbeat {
        tag: Word::new(TAG.as_bytes().to_vec()).map_err(|e| anyhow::anyhow!("{e:?}"))?,
    }
    .encode(&mut heartbeat);
    side::run(Quake3 { heartbeat }, &args.side, &args.dpmaster).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_response_echoes_the_challenge() {
        let challenge = Word::new(b"abcdefghij".to_vec()).unwrap();
        let bytes = info_response(7, &challenge).unwrap();
        let Ok(Packet::InfoResponse { info }) = Packet::decode(&bytes) else {
            panic!("not an infoResponse");
        };
        assert_eq!(info.get(b"challenge"), Some(&b"abcdefghij"[..]));
        assert_eq!(info.get(b"gamename"), Some(GAME.as_bytes()));
        assert_eq!(info.get_int(b"protocol"), Some(i64::from(PROTOCOL)));
        assert_eq!(info.get(b"hostname"), Some(&b"Bench server 7"[..]));
    }

    #[test]
    fn list_requests_name_the_game_and_protocol() {
        assert_eq!(
            List::Plain.ask().unwrap().datagram,
            b"\xff\xff\xff\xffgetservers BenchGame 3"
        );
        let ext = List::Ext.ask().unwrap();
        assert_eq!(ext.datagram, b"\xff\xff\xff\xffgetserversExt BenchGame 3");
        assert_eq!(ext.label, "getserversExt BenchGame 3");
    }
}
