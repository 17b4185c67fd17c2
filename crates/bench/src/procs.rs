//! Child processes with a time limit, and where the peers live.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// How a bounded child ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Wall time from spawn to exit (or to the kill).
    pub wall: Duration,
    /// Exit status; `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
}

/// Runs `cmd` with stdout and stderr going to files in `dir`, killing it after `limit`.
pub(crate) fn run_bounded(
    mut cmd: Command,
    dir: &Path,
    tag: &str,
    limit: Duration,
) -> anyhow::Result<Finished> {
    let out_path = dir.join(format!("{tag}.stdout"));
    let err_path = dir.join(format!("{tag}.stderr"));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out_path)?)
        .stderr(File::create(&err_path)?);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {tag} ({cmd:?})"))?;
    let status = wait_bounded(&mut child, limit)?;
    let wall = start.elapsed();
    Ok(Finished {
        wall,
        status,
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    })
}

/// Waits for `child` at most `limit`, polling every few milliseconds; kills it at the limit.
pub(crate) fn wait_bounded(
    child: &mut Child,
    limit: Duration,
) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Kills a child when dropped (the farm must not outlive the bench).
#[derive(Debug)]
pub(crate) struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The directory holding the running executable (`target/release`).
pub(crate) fn exe_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    exe.parent()
        .map(Path::to_path_buf)
        .context("the bench binary has no parent directory")
}

/// The workspace root: `target/<profile>/..`, else the current directory.
pub(crate) fn workspace_root() -> PathBuf {
    exe_dir()
        .ok()
        .and_then(|d| d.parent().and_then(Path::parent).map(Path::to_path_buf))
        .filter(|root| root.join("Cargo.toml").exists())
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `name` found on `PATH`, if any.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
