//! Muster's conformance harness, shared by every crate's conformance tests: finding the peers, running them with a bounded timeout, owning loopback sockets,
//! and starting game servers that die with their guard.
//!
//! # Skip or fail
//!
//! Every peer is looked up with a `find()` that returns `Err(Missing)` naming the peer, where it was looked for
//! and how to install it. Tests call [`require`] (or a peer's `require()` shortcut) on that result:
//!
//! * `MUSTER_REQUIRE_PEERS=1` (set by `.ci/run`): a missing peer **fails** the test (panic with the message). CI
//!   installs the peers with `scripts/install-peers.sh` first, so a missing peer there is a broken install.
//! * otherwise: the test prints `SKIP <test>: <message>` on stderr (visible even under libtest's output
//!   capture) and returns early (it passes). Run
//!   `scripts/install-peers.sh` to get the peers locally.
//!
//! A peer that IS found but misbehaves (does not start, does not answer in time) is always a failure.
//!
//! # Where peers are looked for
//!
//! | peer | location |
//! |---|---|
//! | qstat | `quakestat` on `PATH` (Debian names the binary so) |
//! | teeworlds-server 0.7.5 | `dpkg -L teeworlds-server`, the file ending in `/teeworlds-server` |
//! | DDNet-Server 16.4 | `dpkg -L ddnet-server`, the file ending in `/DDNet-Server` |
//! | gamedig 5.x | `<repo>/.peers/node/node_modules/.bin/gamedig` |
//! | opengsq | `<repo>/.peers/venv/bin/opengsq` |
//! | DDNet mastersrv | `<repo>/.peers/bin/mastersrv` (built by `install-peers.sh`) |
//! | 333networks Masterserver-Perl | `<repo>/.peers/src/333networks-masterserver-perl` (put there by `install-peers.sh`; `MUSTER_PERL_MASTER_SRC` overrides), `perl` with its Debian modules, `sqlite3` |
//!
//! `<repo>` is the workspace root; `MUSTER_PEERS_DIR` overrides `<repo>/.peers`.

pub mod clients;
pub mod mastersrv;
pub mod net;
pub mod perl_master;
pub mod process;
pub mod servers;
pub mod xash;

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

pub use clients::{A2squery, Gamedig, Opengsq, PythonA2s, Qstat};
pub use mastersrv::{HttpResponse, Mastersrv, MastersrvGuard, http_post};
pub use net::{Capture, free_udp_port};
pub use perl_master::{PerlMaster, PerlMasterConfig, PerlMasterGuard};
pub use process::Output;
pub use servers::{DdnetServer, TeeworldsServer};
pub use xash::{XashMaster, XashMasterGuard, XashQuery};

/// Environment variable that turns a missing peer into a test failure.
pub const REQUIRE_PEERS_ENV: &str = "MUSTER_REQUIRE_PEERS";

/// A peer that could not be found: what, where it was looked for, how to get it.
#[derive(Debug, Clone)]
pub struct Missing {
    /// The peer's name, e.g. `quakestat`.
    pub peer: &'static str,
    /// Where it was looked for and what went wrong.
    pub detail: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "peer {} not found ({}); install the peers with `bash scripts/install-peers.sh`",
            self.peer, self.detail
        )
    }
}

/// Whether missing peers fail the tests (`MUSTER_REQUIRE_PEERS=1`) instead of skipping them.
pub fn peers_required() -> bool {
    std::env::var(REQUIRE_PEERS_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Applies the skip-or-fail rule to a peer lookup: `Some(peer)` when found; when missing, panics under
/// `MUSTER_REQUIRE_PEERS=1`, otherwise prints a `SKIP` line naming the current test and returns `None`.
#[track_caller]
pub fn require<T>(found: Result<T, Missing>) -> Option<T> {
    match found {
        Ok(peer) => Some(peer),
        Err(missing) if peers_required() => {
            panic!("{missing} [{REQUIRE_PEERS_ENV} is set, so a missing peer is a failure]")
        }
        Err(missing) => {
            let test = std::thread::current()
                .name()
                .unwrap_or("conformance")
                .to_owned();
            // Written to the stderr handle directly, not with eprintln!, so that libtest's output capture
            // does not swallow it: the SKIP line shows in a normal `cargo test` run.
            let _ = writeln!(
                std::io::stderr(),
                "SKIP {test}: {missing} [set {REQUIRE_PEERS_ENV}=1 to make this a failure]"
            );
            None
        }
    }
}

/// The workspace root (two levels above `crates/testkit`).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// Where `scripts/install-peers.sh` puts gamedig, opengsq, mastersrv and the peer sources (`<repo>/.peers`, or
/// `MUSTER_PEERS_DIR`).
pub fn peers_dir() -> PathBuf {
    std::env::var_os("MUSTER_PEERS_DIR").map_or_else(|| repo_root().join(".peers"), PathBuf::from)
}

/// `<peers>/bin/NAME`, a peer `scripts/install-peers.sh` builds from `source`; `peer` names it
/// when it is missing.
pub(crate) fn built_peer(peer: &'static str, name: &str, source: &str) -> Result<PathBuf, Missing> {
    let bin = peers_dir().join("bin").join(name);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(Missing {
            peer,
            detail: format!(
                "no {}; install-peers.sh builds it from the {source} source",
                bin.display()
            ),
        })
    }
}

/// The path of a fixture under `crates/proto/tests/fixtures/`.
pub fn fixture_path(rel: &str) -> PathBuf {
    repo_root().join("crates/proto/tests/fixtures").join(rel)
}

/// The bytes of a fixture under `crates/proto/tests/fixtures/`.
pub fn fixture(rel: &str) -> Vec<u8> {
    let path = fixture_path(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Environment variable that makes [`check_capture_fixture`] (re)write the capture fixtures.
pub const UPDATE_FIXTURES_ENV: &str = "MUSTER_UPDATE_PEER_FIXTURES";

/// Compares a captured datagram with the committed fixture `peers/<name>`; with
/// `MUSTER_UPDATE_PEER_FIXTURES=1` writes the capture there first (to record a new peer version).
#[track_caller]
pub fn check_capture_fixture(name: &str, captured: &[u8]) {
    let rel = format!("peers/{name}");
    let path = fixture_path(&rel);
    if std::env::var_os(UPDATE_FIXTURES_ENV).is_some() {
        std::fs::write(&path, captured)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
    assert_eq!(
        fixture(&rel),
        captured,
        "capture differs from fixture {rel} (set {UPDATE_FIXTURES_ENV}=1 to re-record)"
    );
}

/// Looks `name` up in the directories of `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Finds the file of Debian package `package` whose path ends in `/<file>` (via `dpkg -L`).
pub fn dpkg_file(peer: &'static str, package: &str, file: &str) -> Result<PathBuf, Missing> {
    let missing = |detail: String| Missing { peer, detail };
    let out = std::process::Command::new("dpkg")
        .args(["-L", package])
        .output()
        .map_err(|e| missing(format!("cannot run dpkg -L {package}: {e}")))?;
    if !out.status.success() {
        return Err(missing(format!(
            "Debian package {package} is not installed"
        )));
    }
    let suffix = format!("/{file}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|line| line.ends_with(&suffix))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .ok_or_else(|| missing(format!("package {package} has no file named {file}")))
}
