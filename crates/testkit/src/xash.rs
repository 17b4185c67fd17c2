//! FWGS's `xash3d-master` (the Half-Life / Xash3D master, unmodified), built by
//! `scripts/install-peers.sh` into `<peers>/bin/xash3d-master`, run on 127.0.0.1 and stopped by PID
//! when its guard drops.
//!
//! It is ready once it answers a challenge request (`q ff` + four bytes) with its challenge reply.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::net::{free_udp_port, loopback};
use super::process::{ChildGuard, ScratchDir};
use super::{Missing, built_peer, require};

/// How long the master may take to start answering.
pub const START_LIMIT: Duration = Duration::from_secs(15);

/// The built master.
#[derive(Debug, Clone)]
pub struct XashMaster {
    /// The binary.
    pub bin: PathBuf,
}

impl XashMaster {
    /// Looks for `<peers>/bin/xash3d-master`.
    pub fn find() -> Result<Self, Missing> {
        built_peer("xash3d-master", "xash3d-master", "xash3d-master").map(|bin| Self { bin })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// Starts the master on 127.0.0.1 (a free UDP port), logging at `trace` (it says why it
    /// refused a datagram), and waits until it answers a challenge request.
    pub fn start(&self) -> XashMasterGuard {
        let scratch = ScratchDir::new("xash3d-master");
        let port = free_udp_port();
        let addr = loopback(port);
        let port_arg = port.to_string();
        let args = ["-i", "127.0.0.1", "-p", port_arg.as_str(), "-l", "trace"];
        let log = scratch.path().join("xash3d-master.log");
        let child = ChildGuard::spawn("xash3d-master", &self.bin, &args, scratch.path(), &[], log)
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let mut guard = XashMasterGuard {
            child,
            scratch,
            addr,
        };
        let probe = UdpSocket::bind("127.0.0.1:0").expect("a probe socket");
        probe
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("a read timeout");
        let start = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            if let Some(status) = guard.child.exited() {
                panic!(
                    "xash3d-master exited during start-up ({status})\n{}",
                    guard.log()
                );
            }
            let _ = probe.send_to(b"q\xff\x01\x02\x03\x04", addr);
            if let Ok((n, from)) = probe.recv_from(&mut buf)
                && from == addr
                && buf.get(..6) == Some(b"\xff\xff\xff\xffs\n".as_slice())
                && n >= 10
            {
                return guard;
            }
            if start.elapsed() > START_LIMIT {
                guard.child.stop();
                panic!(
                    "xash3d-master on {addr} not ready within {START_LIMIT:?}\n{}",
                    guard.log()
                );
            }
        }
    }
}

/// A running xash3d-master; stopped by PID (SIGTERM, then SIGKILL) and its folder removed on
/// drop.
#[derive(Debug)]
pub struct XashMasterGuard {
    // Field order matters: the child is stopped before its folder is removed.
    child: ChildGuard,
    scratch: ScratchDir,
    addr: SocketAddr,
}

impl XashMasterGuard {
    /// Its UDP address (127.0.0.1:port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The master's log so far.
    pub fn log(&self) -> String {
        self.child.log()
    }

    /// The scratch folder.
    pub fn dir(&self) -> &std::path::Path {
        self.scratch.path()
    }
}

/// FWGS's `xash3d-query` (the list and query tool of the xash3d-master repository, unmodified),
/// built by `scripts/install-peers.sh` into `<peers>/bin/xash3d-query`.
#[derive(Debug, Clone)]
pub struct XashQuery {
    /// The binary.
    pub bin: PathBuf,
}

impl XashQuery {
    /// Looks for `<peers>/bin/xash3d-query`.
    pub fn find() -> Result<Self, Missing> {
        built_peer("xash3d-query", "xash3d-query", "xash3d-master").map(|bin| Self { bin })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// `xash3d-query -M <master> -T 1 -j <args> list`: the servers it read from the master
    /// (its own filter, `\clver\0.21\buildnum\4000`, unless `args` change it).
    pub fn list(&self, master: SocketAddr, args: &[&str]) -> Vec<SocketAddr> {
        let m = master.to_string();
        let out = std::process::Command::new(&self.bin)
            .args(["-M", m.as_str(), "-T", "1", "-j"])
            .args(args)
            .arg("list")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        assert!(
            out.status.success(),
            "xash3d-query failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "xash3d-query printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        v["servers"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()?.parse().ok()).collect())
            .unwrap_or_default()
    }
}
