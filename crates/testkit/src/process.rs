//! Running peer programs: bounded runs with captured output, and long-running children killed by PID on drop.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How often a bounded run checks whether its child has exited.
const POLL: Duration = Duration::from_millis(10);

/// How long a stopped child gets after SIGTERM before it is killed with SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(3);

/// What a bounded peer run produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// The command line, for messages.
    pub command: String,
    /// The exit status; `None` when the run hit its timeout (or was cancelled) and was killed.
    pub status: Option<ExitStatus>,
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// How long the run took.
    pub elapsed: Duration,
}

impl Output {
    /// Whether the program exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Whether the run was killed at its timeout.
    pub fn timed_out(&self) -> bool {
        self.status.is_none()
    }

    /// stdout as (lossy) text.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as (lossy) text.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// stdout parsed as one JSON value; panics with the whole output when it is not JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| panic!("{}: stdout is not JSON ({e})\n{self}", self.command))
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "$ {}\nstatus: {}\n--- stdout\n{}--- stderr\n{}",
            self.command,
            self.status.map_or_else(
                || format!("killed after timeout ({:?})", self.elapsed),
                |s| s.to_string()
            ),
            self.stdout_text(),
            self.stderr_text()
        )
    }
}

/// Renders a command line for messages.
pub fn describe(program: &Path, args: &[&str]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error only truncates the captured output.
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` (stdin closed, stdout and stderr captured) and kills it by PID once `timeout` has passed.
/// Panics only when the program cannot be started at all.
#[track_caller]
pub fn run_bounded(cmd: Command, description: String, timeout: Duration) -> Output {
    run_cancellable(cmd, description, timeout, &AtomicBool::new(false))
}

/// Like [`run_bounded`], but also kills the program as soon as `stop` becomes true (e.g. once a capture has
/// seen what it waited for), so generous timeouts cost nothing in the normal case.
#[track_caller]
pub fn run_cancellable(
    mut cmd: Command,
    description: String,
    timeout: Duration,
    stop: &AtomicBool,
) -> Output {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {description}: {e}"));
    let out_reader = child.stdout.take().map(drain);
    let err_reader = child.stderr.take().map(drain);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() < timeout && !stop.load(Ordering::Relaxed) => {
                thread::sleep(POLL)
            }
            Ok(None) | Err(_) => {
                // Killed by the PID we spawned; SIGKILL because a bounded client run has nothing to flush.
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let elapsed = start.elapsed();
    Output {
        command: description,
        status,
        stdout: out_reader.and_then(|h| h.join().ok()).unwrap_or_default(),
        stderr: err_reader.and_then(|h| h.join().ok()).unwrap_or_default(),
        elapsed,
    }
}

/// A fresh scratch folder under the test target's temp dir, removed on drop (with the shared
/// `muster-conformance` folder above it when that is left empty).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates `<tmp>/muster-conformance/<label>-<pid>-<n>` (emptied if it existed), under the
    /// system's temporary folder.
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir()
            .join("muster-conformance")
            .join(format!("{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        // Another test's drop may remove the shared parent between its creation and this
        // folder's: a second try creates it again.
        let made = std::fs::create_dir_all(&path).or_else(|_| std::fs::create_dir_all(&path));
        made.unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        Self { path }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::env::var_os("MUSTER_KEEP_SCRATCH").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
            // The shared parent too, once the last scratch folder in it is gone (a folder
            // still in use by another test keeps it: removing a non-empty one fails).
            if let Some(parent) = self.path.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

/// A long-running child process (a game server) that is stopped by its PID when dropped: SIGTERM first (so
/// servers log their shutdown), SIGKILL after [`TERM_GRACE`]. Where `setpriv` exists the child is also started
/// with `--pdeathsig KILL`, so it dies even if the test process is killed before the guard drops.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    name: String,
    log: PathBuf,
}

impl ChildGuard {
    /// Starts `program args…` in `dir` with the given environment, stdout and stderr appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[&str],
        dir: &Path,
        env: &[(&str, &Path)],
        log: PathBuf,
    ) -> std::io::Result<Self> {
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let mut cmd = match super::which("setpriv") {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn()?;
        Ok(Self {
            child,
            name: name.to_owned(),
            log,
        })
    }

    /// The PID of the child (setpriv execs the server, so it is the server's PID).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` when the child has already exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The child's log so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The child's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the child by PID: SIGTERM, then SIGKILL after a grace period. Returns its exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.exited() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let start = Instant::now();
        while start.elapsed() < TERM_GRACE {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            thread::sleep(POLL);
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}
