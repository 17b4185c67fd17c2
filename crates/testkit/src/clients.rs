//! The client peers: qstat (`quakestat`), gamedig and opengsq, each run with a bounded timeout.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::process::{Output, describe, run_bounded, run_cancellable};
use super::{Missing, peers_dir, require, which};

/// Default bound of one client run. Long enough for one query with the options the helpers pass, short enough
/// to keep the whole conformance target well under two minutes.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(6);

/// qstat 2.17, Debian binary `quakestat`.
#[derive(Debug, Clone)]
pub struct Qstat {
    /// Path of the binary.
    pub bin: PathBuf,
}

impl Qstat {
    /// Looks for `quakestat` on `PATH`.
    pub fn find() -> Result<Self, Missing> {
        which("quakestat")
            .map(|bin| Self { bin })
            .ok_or_else(|| Missing {
                peer: "quakestat (qstat)",
                detail: "no quakestat on PATH; Debian package qstat".to_owned(),
            })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// Runs `quakestat args…`, killed after [`CLIENT_TIMEOUT`].
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_for(args, CLIENT_TIMEOUT)
    }

    /// Runs `quakestat args…`, killed after `timeout`.
    pub fn run_for(&self, args: &[&str], timeout: Duration) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_bounded(cmd, describe(&self.bin, args), timeout)
    }

    /// Runs `quakestat args…`, killed after `timeout` or as soon as `stop` is set.
    pub fn run_until(&self, args: &[&str], timeout: Duration, stop: &AtomicBool) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_cancellable(cmd, describe(&self.bin, args), timeout, stop)
    }

    /// `quakestat -json -P -R -retry 1 -noportoffset -<type> <addr>`: one server, its JSON object
    /// (`status`, `name`, `map`, `numplayers`, `players`, `rules`, …).
    #[track_caller]
    pub fn query(&self, qstat_type: &str, addr: SocketAddr) -> serde_json::Value {
        let flag = format!("-{qstat_type}");
        let target = addr.to_string();
        let out = self.run(&[
            "-json",
            "-P",
            "-R",
            "-retry",
            "1",
            "-noportoffset",
            &flag,
            &target,
        ]);
        let v = out.json();
        v.get(0)
            .cloned()
            .unwrap_or_else(|| panic!("qstat printed no server object\n{out}"))
    }
}

/// gamedig 5.x from `<repo>/.peers/node/`.
#[derive(Debug, Clone)]
pub struct Gamedig {
    /// Path of the `gamedig` command (a node script).
    pub bin: PathBuf,
}

impl Gamedig {
    /// Looks for `.peers/node/node_modules/.bin/gamedig`.
    pub fn find() -> Result<Self, Missing> {
        let bin = peers_dir().join("node/node_modules/.bin/gamedig");
        if bin.is_file() && which("node").is_some() {
            Ok(Self { bin })
        } else {
            Err(Missing {
                peer: "gamedig",
                detail: format!("no {} (or no node on PATH)", bin.display()),
            })
        }
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// Runs `gamedig args…`, killed after [`CLIENT_TIMEOUT`].
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_for(args, CLIENT_TIMEOUT)
    }

    /// Runs `gamedig args…`, killed after `timeout`.
    pub fn run_for(&self, args: &[&str], timeout: Duration) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_bounded(cmd, describe(&self.bin, args), timeout)
    }

    /// Runs `gamedig args…`, killed after `timeout` or as soon as `stop` is set.
    pub fn run_until(&self, args: &[&str], timeout: Duration, stop: &AtomicBool) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_cancellable(cmd, describe(&self.bin, args), timeout, stop)
    }

    /// `gamedig --type <game> --givenPortOnly --socketTimeout 1000 <addr>`: its JSON object (on failure
    /// `{"error": …}`). `addr` is the query port itself.
    #[track_caller]
    pub fn query(&self, game: &str, addr: SocketAddr) -> serde_json::Value {
        let target = addr.to_string();
        self.run(&[
            "--type",
            game,
            "--givenPortOnly",
            "--socketTimeout",
            "1000",
            &target,
        ])
        .json()
    }
}

/// opengsq (Python) from `<repo>/.peers/venv/`.
#[derive(Debug, Clone)]
pub struct Opengsq {
    /// Path of the `opengsq` command.
    pub bin: PathBuf,
}

impl Opengsq {
    /// Looks for `.peers/venv/bin/opengsq`.
    pub fn find() -> Result<Self, Missing> {
        let bin = peers_dir().join("venv/bin/opengsq");
        if bin.is_file() {
            Ok(Self { bin })
        } else {
            Err(Missing {
                peer: "opengsq",
                detail: format!("no {}", bin.display()),
            })
        }
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// Runs `opengsq args…`, killed after [`CLIENT_TIMEOUT`].
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_for(args, CLIENT_TIMEOUT)
    }

    /// Runs `opengsq args…`, killed after `timeout`.
    pub fn run_for(&self, args: &[&str], timeout: Duration) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_bounded(cmd, describe(&self.bin, args), timeout)
    }

    /// Runs `opengsq args…`, killed after `timeout` or as soon as `stop` is set.
    pub fn run_until(&self, args: &[&str], timeout: Duration, stop: &AtomicBool) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_cancellable(cmd, describe(&self.bin, args), timeout, stop)
    }

    /// `opengsq <protocol> --host <ip> --port <port> --function <function> --timeout 2`: the JSON result, or
    /// the whole run when it failed (opengsq prints `opengsq: error: timed out` and exits non-zero).
    pub fn query(
        &self,
        protocol: &str,
        function: &str,
        addr: SocketAddr,
    ) -> Result<serde_json::Value, Output> {
        let host = addr.ip().to_string();
        let port = addr.port().to_string();
        let out = self.run(&[
            protocol,
            "--host",
            &host,
            "--port",
            &port,
            "--function",
            function,
            "--timeout",
            "2",
        ]);
        if !out.success() {
            return Err(out);
        }
        serde_json::from_slice(&out.stdout).map_err(|_| out)
    }
}

/// python-a2s (the `a2s` module, PyPI `python-a2s`) in `<repo>/.peers/venv/`.
#[derive(Debug, Clone)]
pub struct PythonA2s {
    /// The venv's Python.
    pub python: PathBuf,
}

/// The peers venv's Python (`.peers/venv/bin/python`), once it imports `module`; `peer` names
/// what is missing otherwise.
fn venv_python_with(peer: &'static str, module: &str) -> Result<PathBuf, Missing> {
    let python = peers_dir().join("venv/bin/python");
    if !python.is_file() {
        return Err(Missing {
            peer,
            detail: format!("no {}", python.display()),
        });
    }
    let mut cmd = Command::new(&python);
    cmd.args(["-c", &format!("import {module}")]);
    let out = run_bounded(cmd, format!("python -c 'import {module}'"), CLIENT_TIMEOUT);
    if out.success() {
        Ok(python)
    } else {
        Err(Missing {
            peer,
            detail: format!("{} cannot import {module}", python.display()),
        })
    }
}

/// Runs `script` with `addr`'s host and port as its arguments: the JSON it prints, or the
/// whole run when it failed (`label` names it in a timeout).
fn run_json_script(
    python: &Path,
    script: &str,
    addr: SocketAddr,
    label: &str,
) -> Result<serde_json::Value, Output> {
    let host = addr.ip().to_string();
    let port = addr.port().to_string();
    let mut cmd = Command::new(python);
    cmd.args(["-c", script, &host, &port]);
    let out = run_bounded(cmd, label.into(), CLIENT_TIMEOUT);
    if !out.success() {
        return Err(out);
    }
    serde_json::from_slice(&out.stdout).map_err(|_| out)
}

/// What the query script prints: INFO, PLAYER and RULES as one JSON object.
const PYTHON_A2S_SCRIPT: &str = r#"
import json, sys
import a2s
addr = (sys.argv[1], int(sys.argv[2]))
info = a2s.info(addr, timeout=2)
players = a2s.players(addr, timeout=2)
rules = a2s.rules(addr, timeout=2)
print(json.dumps({
    "name": info.server_name, "map": info.map_name, "folder": info.folder,
    "protocol": info.protocol, "players": info.player_count, "max_players": info.max_players,
    "bots": info.bot_count, "app_id": info.app_id,
    "player_list": [{"name": p.name, "score": p.score} for p in players],
    "rules": rules,
}))
"#;

impl PythonA2s {
    /// Looks for `.peers/venv/bin/python` with the `a2s` module.
    pub fn find() -> Result<Self, Missing> {
        venv_python_with("python-a2s", "a2s").map(|python| Self { python })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// `a2s.info`, `a2s.players` and `a2s.rules` of `addr` (2 s each): the JSON the script
    /// prints, or the whole run when it failed.
    pub fn query(&self, addr: SocketAddr) -> Result<serde_json::Value, Output> {
        run_json_script(&self.python, PYTHON_A2S_SCRIPT, addr, "python-a2s query")
    }
}

/// a2squery (PyPI `a2squery`) in `<repo>/.peers/venv/`.
#[derive(Debug, Clone)]
pub struct A2squery {
    /// The venv's Python.
    pub python: PathBuf,
}

/// What the a2squery script prints: INFO, PLAYER and RULES as one JSON object.
const A2SQUERY_SCRIPT: &str = r#"
import json, sys
from a2squery import A2SQuery
with A2SQuery(sys.argv[1], int(sys.argv[2]), timeout=2) as q:
    info = q.info()
    players = q.players()
    rules = q.rules()
print(json.dumps({
    "name": info.name, "map": info.map, "folder": info.folder, "protocol": info.protocol,
    "players": info.players, "max_players": info.max_players, "bots": info.bots,
    "app_id": getattr(info, "app_id", None), "witnesses": getattr(info, "witnesses", None),
    "player_list": [{"name": p.name, "score": p.score, "deaths": p.deaths, "money": p.money}
                    for p in players],
    "rules": rules,
}))
"#;

impl A2squery {
    /// Looks for `.peers/venv/bin/python` with the `a2squery` module.
    pub fn find() -> Result<Self, Missing> {
        venv_python_with("a2squery", "a2squery").map(|python| Self { python })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// `info()`, `players()` and `rules()` of `addr` (2 s timeout each): the JSON the script
    /// prints, or the whole run when it failed.
    pub fn query(&self, addr: SocketAddr) -> Result<serde_json::Value, Output> {
        run_json_script(&self.python, A2SQUERY_SCRIPT, addr, "a2squery query")
    }
}
