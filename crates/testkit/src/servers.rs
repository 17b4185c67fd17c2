//! The game-server peers: teeworlds-server 0.7.5 and DDNet-Server 16.4, started on 127.0.0.1 only, with
//! registration off, in a scratch folder that is also their `HOME`, and stopped by PID when the guard drops.
//!
//! Readiness is detected by querying the server (a bounded number of tries, each waiting at most
//! [`READY_TRY`]), not by sleeping.

use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::net::{client_socket, loopback, request_reply};
use super::process::{ChildGuard, ScratchDir};
use super::{Missing, dpkg_file, require};

/// How long one readiness query waits for its answer.
pub const READY_TRY: Duration = Duration::from_millis(200);

/// How many readiness queries are sent before a server counts as not starting (≈ 10 s in all).
pub const READY_TRIES: u32 = 50;

/// How many times a server that dies before it answers is started in all before the test fails.
///
/// DDNet-Server 16.4 dies by SIGSEGV inside libcurl in about one start in ten when it registers over
/// HTTP (8 of 85 here): its 0.6 and 0.7 registrations connect at the same moment from two threads, and
/// the crash is always in that connection (seen in core dumps). At that rate five starts in a row die
/// about once in 100,000 runs.
pub const START_ATTEMPTS: u32 = 5;

/// The 0.6 connless header + `gie3` + token byte `5a`: byte for byte
/// `crates/proto/tests/fixtures/teeworlds/serverinfo/ddnet-16.4-vanilla-p0-request.bin` (teeworlds.md §5).
pub const GIE3_06_REQUEST: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie3\x5a";

/// The 0.6 reply prefix: `ff`×6 header, `ff ff ff ff`, `inf3`.
pub const INF3_06_PREFIX: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffinf3";

/// Our 0.7 client token (the one the captured fixtures used).
pub const TOKEN_07: [u8; 4] = [0xc0, 0xff, 0xee, 0x01];

/// Size of a 0.7 token request: servers ignore shorter ones (teeworlds.md, peers.md §4.4).
pub const TOKEN_REQUEST_07_LEN: usize = 520;

/// The 0.7 control TOKEN request carrying [`TOKEN_07`], zero-padded to [`TOKEN_REQUEST_07_LEN`] bytes
/// (`crates/proto/tests/fixtures/teeworlds/serverinfo/tw-0.7.5-p0-token-request.bin`).
pub fn token_request_07() -> Vec<u8> {
    let mut v = vec![0x04, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x05];
    v.extend_from_slice(&TOKEN_07);
    v.resize(TOKEN_REQUEST_07_LEN, 0);
    v
}

/// The server's token from a 0.7 TOKEN reply `04 00 00 <our token> 05 <server token>`.
pub fn server_token_07(reply: &[u8]) -> Option<[u8; 4]> {
    match reply {
        [0x04, 0x00, 0x00, a, b, c, d, 0x05, t0, t1, t2, t3, ..]
            if [*a, *b, *c, *d] == TOKEN_07 =>
        {
            Some([*t0, *t1, *t2, *t3])
        }
        _ => None,
    }
}

/// The 0.7 connless info request: `21` + server token + our token + `ff ff ff ff gie3` + browse token 200
/// (varint `88 03`) (`crates/proto/tests/fixtures/teeworlds/serverinfo/tw-0.7.5-p0-info-request.bin` with
/// the token of this run). Never send browse token −1 to teeworlds 0.7.5: it crashes (peers.md §4.4).
pub fn info_request_07(server_token: [u8; 4]) -> Vec<u8> {
    let mut v = vec![0x21];
    v.extend_from_slice(&server_token);
    v.extend_from_slice(&TOKEN_07);
    v.extend_from_slice(b"\xff\xff\xff\xffgie3\x88\x03");
    v
}

/// Whether `reply` is a 0.7 connless `inf3` addressed to [`TOKEN_07`].
pub fn is_inf3_07(reply: &[u8]) -> bool {
    reply.first() == Some(&0x21)
        && reply.get(1..5) == Some(&TOKEN_07[..])
        && reply.get(9..17) == Some(&b"\xff\xff\xff\xffinf3"[..])
}

/// A running game server; stopped by PID (SIGTERM, then SIGKILL) and its scratch folder removed on drop.
#[derive(Debug)]
pub struct ServerGuard {
    // Field order matters: the child is stopped before its folder is removed.
    child: ChildGuard,
    scratch: ScratchDir,
    addr: SocketAddr,
}

impl ServerGuard {
    /// The server's UDP address (127.0.0.1:port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.child.log()
    }

    /// The scratch folder (also the server's `HOME` parent).
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// `Some(status)` when the server process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.exited()
    }

    /// Stops the server now (the guard's drop does the same).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.child.stop()
    }

    /// Sends 0.6 `gie3` and returns the `inf3` reply, if one arrives within `wait`.
    pub fn query_06(&self, socket: &UdpSocket, wait: Duration) -> Option<Vec<u8>> {
        request_reply(socket, self.addr, GIE3_06_REQUEST, wait, |r| {
            r.starts_with(INF3_06_PREFIX)
        })
    }

    /// Runs the 0.7 token handshake and info request; returns the 0.7 `inf3` reply.
    pub fn query_07(&self, socket: &UdpSocket, wait: Duration) -> Option<Vec<u8>> {
        let token_reply = request_reply(socket, self.addr, &token_request_07(), wait, |r| {
            server_token_07(r).is_some()
        })?;
        let server_token = server_token_07(&token_reply)?;
        request_reply(
            socket,
            self.addr,
            &info_request_07(server_token),
            wait,
            is_inf3_07,
        )
    }
}

fn home_env(home: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("HOME", home.to_path_buf()),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("XDG_CONFIG_HOME", home.join(".config")),
    ]
}

/// Starts `program` and polls it with `ready` until it answers; panics (after stopping it) when it exits or
/// stays silent for [`READY_TRIES`] tries.
fn start_and_wait(
    name: &str,
    program: &Path,
    args: &[&str],
    scratch: ScratchDir,
    port: u16,
    ready: impl Fn(&ServerGuard, &UdpSocket) -> bool,
) -> ServerGuard {
    let home = scratch.path().join("home");
    std::fs::create_dir_all(home.join(".local/share")).expect("create HOME");
    let env = home_env(&home);
    let env_refs: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
    let log = scratch.path().join(format!("{name}.log"));
    let child = ChildGuard::spawn(name, program, args, scratch.path(), &env_refs, log.clone())
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    let mut guard = ServerGuard {
        child,
        scratch,
        addr: loopback(port),
    };
    let socket = client_socket();
    let start = Instant::now();
    let mut starts = 1;
    for _ in 0..READY_TRIES {
        if let Some(status) = guard.exited() {
            // A peer that dies before it is up is not what a test checks, but it must not pass
            // silently: each death is reported on stderr, and after START_ATTEMPTS starts it fails
            // the test.
            if starts >= START_ATTEMPTS {
                panic!(
                    "{name} exited during start-up {starts} times (last: {status})\n--- log\n{}",
                    guard.log()
                );
            }
            starts += 1;
            let _ = writeln!(
                std::io::stderr(),
                "WARNING: {name} exited during start-up ({status}); start {starts} of {START_ATTEMPTS}\n--- log\n{}",
                guard.log()
            );
            guard.child = ChildGuard::spawn(
                name,
                program,
                args,
                guard.scratch.path(),
                &env_refs,
                log.clone(),
            )
            .unwrap_or_else(|e| panic!("cannot restart {}: {e}", program.display()));
            continue;
        }
        if ready(&guard, &socket) {
            return guard;
        }
    }
    guard.stop();
    panic!(
        "{name} on {} did not answer within {:?}\n--- log\n{}",
        guard.addr,
        start.elapsed(),
        guard.log()
    );
}

/// teeworlds-server 0.7.5 (Debian package `teeworlds-server`).
#[derive(Debug, Clone)]
pub struct TeeworldsServer {
    /// Path of the binary.
    pub bin: PathBuf,
}

impl TeeworldsServer {
    /// Finds the binary with `dpkg -L teeworlds-server`.
    pub fn find() -> Result<Self, Missing> {
        dpkg_file("teeworlds-server", "teeworlds-server", "teeworlds-server")
            .map(|bin| Self { bin })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// The lab configuration the teeworlds captures were made with (`docs/protocols/peers.md` §4.1) on
    /// `port` (`sv_register 0`, `bindaddr 127.0.0.1`).
    pub fn config(port: u16) -> String {
        format!(
            "bindaddr 127.0.0.1\nsv_port {port}\nsv_register 0\n\
             sv_name \"TW07 Lab \u{dc}n\u{ef}c\u{f6}d\u{e9} \u{2605} | a;b \\\"q\\\" \u{540d}\u{524d}\"\n\
             sv_hostname \"lab.invalid\"\nsv_map dm1\nsv_gametype dm\nsv_max_clients 16\nsv_player_slots 8\n\
             sv_skill_level 1\nsv_max_clients_per_ip 16\nconsole_output_level 2\nsv_motd \"lab\"\n"
        )
    }

    /// Starts the server on 127.0.0.1:`port` with [`config`](Self::config) plus `extra` console commands and
    /// waits until it answers the 0.7 token handshake.
    pub fn start(&self, port: u16, extra: &[&str]) -> ServerGuard {
        let scratch = ScratchDir::new("tw07");
        std::fs::write(scratch.path().join("lab.cfg"), Self::config(port)).expect("write lab.cfg");
        // Loopback masters only, in case registration is ever switched on (peers.md §4.3).
        let masters = scratch.path().join("home/.local/share/teeworlds");
        std::fs::create_dir_all(&masters).expect("create teeworlds save folder");
        std::fs::write(
            masters.join("masters.cfg"),
            "127.0.0.1 127.0.0.1\n127.0.0.2 127.0.0.2\n127.0.0.3 127.0.0.3\n127.0.0.4 127.0.0.4\n",
        )
        .expect("write masters.cfg");
        // `-f` takes a path relative to the current folder (peers.md §4.2).
        let mut args = vec!["-f", "lab.cfg"];
        args.extend_from_slice(extra);
        start_and_wait(
            "teeworlds-server",
            &self.bin,
            &args,
            scratch,
            port,
            |g, s| {
                let reply = request_reply(s, g.addr, &token_request_07(), READY_TRY, |r| {
                    server_token_07(r).is_some()
                });
                reply.is_some()
            },
        )
    }
}

/// DDNet-Server 16.4 (Debian package `ddnet-server`).
#[derive(Debug, Clone)]
pub struct DdnetServer {
    /// Path of the binary.
    pub bin: PathBuf,
}

impl DdnetServer {
    /// Finds the binary with `dpkg -L ddnet-server`.
    pub fn find() -> Result<Self, Missing> {
        dpkg_file("DDNet-Server", "ddnet-server", "DDNet-Server").map(|bin| Self { bin })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// The lab configuration the DDNet captures were made with (`docs/protocols/peers.md` §5.1) on `port`, plus
    /// `bindaddr 127.0.0.1` with `sv_ipv4only 1`: with both DDNet 16.4 binds only 127.0.0.1 (measured; peers.md
    /// §5.1 only tried `bindaddr` alone, which fails on the IPv6 socket), so no namespace is needed.
    pub fn config(port: u16) -> String {
        format!(
            "sv_ipv4only 1\nbindaddr 127.0.0.1\nsv_port {port}\nsv_register 0\n\
             sv_register_url \"http://127.0.0.1:18080/ddnet/15/register\"\n\
             sv_name \"DDNet Lab \u{dc}n\u{ef}c\u{f6}d\u{e9} \u{2605} | a;b \\\"q\\\" \u{540d}\u{524d}\"\n\
             sv_hostname \"lab.invalid\"\nsv_map \"Tutorial\"\nsv_test_cmds 0\nsv_max_clients 64\n\
             sv_max_clients_per_ip 64\nsv_spectator_slots 0\nsv_reserved_slots 0\nsv_sixup 1\n\
             sv_rcon_password \"labrcon\"\nloglevel 2\nlogfile \"\"\n"
        )
    }

    /// Starts the server on 127.0.0.1:`port` with [`config`](Self::config) plus `extra` console commands and
    /// waits until it answers 0.6 `gie3`.
    pub fn start(&self, port: u16, extra: &[&str]) -> ServerGuard {
        let scratch = ScratchDir::new("ddnet");
        std::fs::write(scratch.path().join("lab.cfg"), Self::config(port)).expect("write lab.cfg");
        let mut args = vec!["exec lab.cfg"];
        args.extend_from_slice(extra);
        start_and_wait("DDNet-Server", &self.bin, &args, scratch, port, |g, s| {
            g.query_06(s, READY_TRY).is_some()
        })
    }
}
