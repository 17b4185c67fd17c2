//! 333networks' Masterserver-Perl 2.4.3, the unmodified source that `scripts/install-peers.sh`
//! puts in `<peers>/src/333networks-masterserver-perl` (`MUSTER_PERL_MASTER_SRC` overrides), run
//! from a patched copy in a scratch folder on one loopback address, stopped by PID when its guard
//! drops.
//!
//! Its Perl modules are Debian packages (`scripts/install-peers.sh` installs them);
//! `IP::Country::Fast` is not packaged and is stubbed (it only fills a country column). The
//! copy is patched where the source hard-codes what a test must choose, each patch checked to
//! have applied:
//!
//! * the bind addresses (its beacon socket binds `0.0.0.0`, its list server every interface);
//! * the game keys of `data/supportedgames.pl` (shipped empty; the public ones are set);
//! * its timers, shortened: the first sync of other masters (90 s, then every 1800 s), the
//!   first verification of pending servers (120 s) and the uplink round (every 120 s).
//!
//! It refuses sources and synced addresses matching `127.0.d.d` (an unanchored pattern), so
//! its game servers and the masters it talks to sit on other loopback addresses
//! (`127.1.x.y`). Its own outgoing sockets are unbound, so what it sends arrives from
//! `127.0.0.1`: bind it there ([`PerlMasterConfig::on`]) so that a master answering its uplink
//! heartbeat at the source address reaches it. Its log (stdout, colour codes included) is the
//! guard's [`PerlMasterGuard::log`].

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::net::free_udp_port;
use super::process::{ChildGuard, ScratchDir, run_bounded};
use super::{Missing, peers_dir, require, which};

/// How long the master may take to start (load its game table, bind).
pub const START_LIMIT: Duration = Duration::from_secs(20);
/// How often readiness is checked.
const POLL: Duration = Duration::from_millis(50);
/// The Perl modules it loads, one `-M` each.
const MODULES: [&str; 6] = [
    "AnyEvent",
    "AnyEvent::Handle::UDP",
    "DBI",
    "DBD::SQLite",
    "Switch",
    "JSON",
];
/// What its log says once everything is loaded.
const READY_LINE: &str = "Masterserver is now running";

/// The public keys of the games tests use (`docs/protocols/gamespy-master.md` §4.6).
pub const KEYS: [(&str, &str); 5] = [
    ("333networks", "333NWX"),
    ("ut", "Z5Nfb0"),
    ("unreal", "DAncRK"),
    ("ut2", "Lw7x0R"),
    ("serioussamse", "AKbna4"),
];

/// Another master it syncs with (`sync_masters`): `\sync\` over TCP `port`, verified at UDP
/// `beacon`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncMaster {
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its list (TCP) port.
    pub port: u16,
    /// Its beacon (UDP) port.
    pub beacon: u16,
}

/// A master it pulls game lists from with `\list\` ("applet" mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applet {
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its list (TCP) port.
    pub port: u16,
    /// The games pulled.
    pub games: Vec<String>,
}

/// How to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerlMasterConfig {
    /// The loopback address it binds (never `127.0.x.x`, which it refuses).
    pub ip: Ipv4Addr,
    /// Masters to sync with.
    pub sync_masters: Vec<SyncMaster>,
    /// Masters to pull with `\list\`.
    pub applets: Vec<Applet>,
    /// First sync (and applet pull) this long after start, then every `sync_every`.
    pub sync_after: Duration,
    /// See `sync_after`.
    pub sync_every: Duration,
    /// Pending servers are verified from this long after start.
    pub verify_after: Duration,
    /// The uplink round (heartbeats to other 333networks masters) runs this often.
    pub uplink_every: Duration,
}

impl PerlMasterConfig {
    /// On `ip`, no peers, every timer a few seconds.
    pub fn on(ip: Ipv4Addr) -> Self {
        Self {
            ip,
            sync_masters: Vec::new(),
            applets: Vec::new(),
            sync_after: Duration::from_secs(3),
            sync_every: Duration::from_secs(4),
            verify_after: Duration::from_secs(1),
            uplink_every: Duration::from_secs(2),
        }
    }
}

/// The Perl master's source and an interpreter with its modules.
#[derive(Debug, Clone)]
pub struct PerlMaster {
    /// The unmodified source folder.
    pub src: PathBuf,
    /// The `perl` binary.
    pub perl: PathBuf,
    /// The `sqlite3` binary (creates its database).
    pub sqlite3: PathBuf,
}

impl PerlMaster {
    /// Looks for the source, `perl` with the modules it needs, and `sqlite3`.
    pub fn find() -> Result<Self, Missing> {
        let missing = |detail: String| Missing {
            peer: "333networks Masterserver-Perl",
            detail,
        };
        let src = std::env::var_os("MUSTER_PERL_MASTER_SRC").map_or_else(
            || peers_dir().join("src/333networks-masterserver-perl"),
            PathBuf::from,
        );
        if !src.join("util/masterserver.pl").is_file() {
            return Err(missing(format!(
                "no source at {} (or set MUSTER_PERL_MASTER_SRC to another folder)",
                src.display()
            )));
        }
        let perl = which("perl").ok_or_else(|| missing("no perl on PATH".into()))?;
        let sqlite3 = which("sqlite3").ok_or_else(|| missing("no sqlite3 on PATH".into()))?;
        let mut cmd = Command::new(&perl);
        for m in MODULES {
            cmd.arg(format!("-M{m}"));
        }
        cmd.args(["-e", "1"]);
        let out = run_bounded(cmd, "perl (module check)".into(), Duration::from_secs(20));
        if !out.success() {
            return Err(missing(format!(
                "perl lacks its modules ({}): {}",
                MODULES.join(", "),
                out.stderr_text().lines().next().unwrap_or_default()
            )));
        }
        Ok(Self { src, perl, sqlite3 })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// Starts it as `config` says, on free ports, and waits until its list server accepts
    /// connections and its log says it runs.
    #[track_caller]
    pub fn start(&self, config: &PerlMasterConfig) -> PerlMasterGuard {
        let scratch = ScratchDir::new("perl-master");
        let root = scratch.path().join("ms");
        for dir in ["lib", "util", "data"] {
            copy_tree(&self.src.join(dir), &root.join(dir));
        }
        let (tcp, beacon) = (free_udp_port(), free_udp_port());
        patch(&root, config);
        write_config(&root, config, tcp, beacon);
        let stub = root.join("stub/IP/Country");
        std::fs::create_dir_all(&stub).expect("stub folder");
        std::fs::write(
            stub.join("Fast.pm"),
            "package IP::Country::Fast;\nsub new { bless {}, shift }\nsub inet_atocc { return \"ZZ\" }\n1;\n",
        )
        .expect("stub");
        std::fs::create_dir_all(root.join("log")).expect("log folder");
        let schema = root.join("data/sql/tables-SQLite.sql");
        let db = root.join("data/masterserver.db");
        let mut create = Command::new(&self.sqlite3);
        create.arg(&db).arg(format!(".read {}", schema.display()));
        let out = run_bounded(create, "sqlite3 (schema)".into(), Duration::from_secs(20));
        assert!(out.success(), "creating its database failed\n{out}");
        let stub_dir = root.join("stub").display().to_string();
        let script = root.join("util/masterserver.pl").display().to_string();
        let log = scratch.path().join("perl-master.log");
        let child = ChildGuard::spawn(
            "masterserver-perl",
            &self.perl,
            &["-I", &stub_dir, &script],
            &root,
            &[],
            log,
        )
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.perl.display()));
        let mut guard = PerlMasterGuard {
            child,
            db,
            sqlite3: self.sqlite3.clone(),
            list: SocketAddr::V4(SocketAddrV4::new(config.ip, tcp)),
            beacon: SocketAddr::V4(SocketAddrV4::new(config.ip, beacon)),
            scratch,
        };
        let start = Instant::now();
        loop {
            if let Some(status) = guard.child.exited() {
                panic!(
                    "the Perl master exited during start-up ({status})\n{}",
                    guard.log()
                );
            }
            let up = TcpStream::connect_timeout(&guard.list, POLL).is_ok();
            if up && guard.log().contains(READY_LINE) {
                return guard;
            }
            if start.elapsed() > START_LIMIT {
                guard.child.stop();
                panic!(
                    "the Perl master on {} not ready within {START_LIMIT:?}\n{}",
                    guard.list,
                    guard.log()
                );
            }
            std::thread::sleep(POLL);
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target)
                .unwrap_or_else(|e| panic!("copying {}: {e}", path.display()));
        }
    }
}

/// Replaces `old` by `new` in `root/rel`; panics when `old` is not there (the source changed
/// and the harness must follow).
fn replace(root: &Path, rel: &str, old: &str, new: &str) {
    let path = root.join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        text.contains(old),
        "{rel} no longer contains {old:?}: the Perl master harness needs updating"
    );
    std::fs::write(&path, text.replacen(old, new, 1))
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn patch(root: &Path, c: &PerlMasterConfig) {
    let ip = c.ip;
    replace(
        root,
        "lib/MasterServer/UDP/BeaconCatcher.pm",
        "bind => ['0.0.0.0', $self->{beacon_port}]",
        &format!("bind => ['{ip}', $self->{{beacon_port}}]"),
    );
    replace(
        root,
        "lib/MasterServer/TCP/BrowserHost.pm",
        "tcp_server undef, $self->{listen_port}",
        &format!("tcp_server '{ip}', $self->{{listen_port}}"),
    );
    let secs = |d: Duration| d.as_secs().max(1);
    let sched = "lib/MasterServer/Core/Schedulers.pm";
    replace(
        root,
        sched,
        "after     =>   90,",
        &format!("after     =>   {},", secs(c.sync_after)),
    );
    replace(
        root,
        sched,
        "interval  => 1800,",
        &format!("interval  => {},", secs(c.sync_every)),
    );
    replace(root, sched, "after     => 5,", "after     => 1,");
    replace(
        root,
        sched,
        "interval  => 120,",
        &format!("interval  => {},", secs(c.uplink_every)),
    );
    replace(
        root,
        "lib/MasterServer/UDP/UDPTicker.pm",
        "after     => 120,",
        &format!("after     => {},", secs(c.verify_after)),
    );
    for (game, key) in KEYS {
        let padded = format!("{:<21}=> {{key => \"\"", format!("\"{game}\""));
        replace(
            root,
            "data/supportedgames.pl",
            &padded,
            &format!("{:<21}=> {{key => \"{key}\"", format!("\"{game}\"")),
        );
    }
}

fn write_config(root: &Path, c: &PerlMasterConfig, tcp: u16, beacon: u16) {
    let sync: String = c
        .sync_masters
        .iter()
        .map(|m| {
            format!(
                "    {{ address => \"{}\", port => {}, beacon => {} }},\n",
                m.ip, m.port, m.beacon
            )
        })
        .collect();
    let applets: String = c
        .applets
        .iter()
        .map(|a| {
            format!(
                "    {{ address => \"{}\", port => {}, games => [qw|{}|] }},\n",
                a.ip,
                a.port,
                a.games.join(" ")
            )
        })
        .collect();
    let text = format!(
        r#"package MasterServer;
our (%S, $ROOT);
require "$ROOT/data/supportedgames.pl";
our %S = (
  %S, root => $ROOT,
  masterserver_hostname => "muster conformance peer",
  masterserver_name     => 'muster',
  masterserver_contact  => 'muster@example.invalid',
  dblogin => ["dbi:SQLite:dbname=$ROOT/data/masterserver.db",'',''],
  dump_db => "none",
  log_dir => "$ROOT/log/",
  log_rotate => "none",
  printlog  => 1,
  suppress => "none",
  listen_port   => {tcp},
  beacon_port   => {beacon},
  timeout_time => 5,
  require_secure_beacons => 1,
  ignore_beacon_key   => "deusex wot rune",
  ignore_browser_key  => "deusex",
  secure_unsupported  => "tribesv",
  sync_enabled  => 1,
  sync_masters  => [
{sync}  ],
  sync_games => [0],
  beacon_checker_enabled  => 1,
  master_applet_enabled => {applet_on},
  master_applet => [
{applets}  ],
  kfstats_enabled  => 0,
  kfstats_file =>  "/nonexistent",
);
1;
"#,
        applet_on = u8::from(!c.applets.is_empty()),
    );
    std::fs::write(root.join("data/masterserver-config.pl"), text).expect("writing its config");
}

/// A running Perl master; stopped by PID (SIGTERM, then SIGKILL) and its folder removed on
/// drop.
#[derive(Debug)]
pub struct PerlMasterGuard {
    // Field order matters: the child is stopped before its folder is removed.
    child: ChildGuard,
    db: PathBuf,
    sqlite3: PathBuf,
    list: SocketAddr,
    beacon: SocketAddr,
    scratch: ScratchDir,
}

impl PerlMasterGuard {
    /// Its list server (TCP).
    pub fn list_addr(&self) -> SocketAddr {
        self.list
    }

    /// Its beacon socket (UDP: heartbeats, `\secure\`, own queries).
    pub fn beacon_addr(&self) -> SocketAddr {
        self.beacon
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.child.log()
    }

    /// The scratch folder.
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// Its server table as text (`gamename|ip|port|hostport` per line), read with `sqlite3`,
    /// for messages.
    pub fn servers(&self) -> String {
        let mut cmd = Command::new(&self.sqlite3);
        // The master writes while we read: wait for its lock instead of printing nothing.
        cmd.arg("-cmd")
            .arg(".timeout 5000")
            .arg(&self.db)
            .arg("SELECT gamename, ip, port, hostport FROM serverlist ORDER BY id;");
        run_bounded(cmd, "sqlite3 (servers)".into(), Duration::from_secs(10)).stdout_text()
    }

    /// Stops it now (the guard's drop does the same).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.child.stop()
    }
}
