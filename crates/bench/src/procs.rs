//! Child processes with a time limit, and where the peers live.

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
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

/// Spawns `cmd` (named `what` in errors) with its stdout piped and read line by line on a
/// thread until it closes, so the child never blocks on a full pipe. `ready` sees each line
/// until it returns a value. Returns the child (killed when dropped) with that value, or
/// `None`, the child killed, when its stdout closed or `limit` passed first.
pub(crate) fn spawn_until_ready<T: Send + 'static>(
    mut cmd: Command,
    what: &str,
    limit: Duration,
    mut ready: impl FnMut(&str) -> Option<T> + Send + 'static,
) -> anyhow::Result<Option<(KillOnDrop, T)>> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let stdout = child
        .stdout
        .take()
        .with_context(|| format!("no stdout from {what}"))?;
    let guard = KillOnDrop(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(value) = ready(&line) {
                let _ = tx.send(value);
                sent = true;
            }
        }
    });
    Ok(rx.recv_timeout(limit).ok().map(|value| (guard, value)))
}

/// Starts `muster emulate --config config` (its stderr to `stderr`) and waits at most `limit`
/// until it reported every one of `servers` servers listening; `None` (the farm stopped) when
/// it exited or the time ran out first.
pub(crate) fn start_farm(
    muster: &Path,
    config: &Path,
    servers: usize,
    stderr: Stdio,
    limit: Duration,
) -> anyhow::Result<Option<KillOnDrop>> {
    let mut cmd = Command::new(muster);
    cmd.arg("emulate")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stderr(stderr);
    let mut bound = 0usize;
    let started = spawn_until_ready(cmd, "muster emulate", limit, move |line| {
        if !line.starts_with("listening ") {
            return None;
        }
        bound += 1;
        (bound == servers).then_some(())
    })?;
    Ok(started.map(|(farm, ())| farm))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh -c script`, its stderr dropped.
    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).stderr(Stdio::null());
        cmd
    }

    #[test]
    fn ready_takes_the_first_matching_line_and_the_rest_is_drained() {
        // 1 MiB after the ready line: the child ends only when the pipe keeps being read.
        let script = "echo starting; echo 'port 4242'; echo 'port 5353'; \
                      head -c 1048576 /dev/zero | tr '\\0' 'x'; echo";
        let (mut child, port) = spawn_until_ready(sh(script), "sh", Duration::from_secs(60), |l| {
            l.strip_prefix("port ")?.parse::<u16>().ok()
        })
        .unwrap()
        .expect("the port line came");
        assert_eq!(port, 4242);
        let status = wait_bounded(&mut child.0, Duration::from_secs(60)).unwrap();
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }

    #[test]
    fn a_child_that_ended_or_ran_out_of_time_before_it_was_ready_gives_none() {
        // (script, limit, ready at any line)
        let cases = [
            // Ended without a ready line.
            ("echo listening 1", Duration::from_secs(60), false),
            // Still up, but not a line before the time ran out.
            ("sleep 30", Duration::from_millis(50), true),
        ];
        for (script, limit, any) in cases {
            let got =
                spawn_until_ready(sh(script), "sh", limit, move |_| any.then_some(())).unwrap();
            assert!(got.is_none(), "{script}");
        }
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let cmd = Command::new("/nonexistent/muster-bench-test-program");
        let err = spawn_until_ready(cmd, "the missing one", Duration::from_secs(1), |_| Some(()))
            .unwrap_err();
        assert!(
            err.to_string().contains("starting the missing one"),
            "{err}"
        );
    }

    /// A stand-in for `muster` in `dir`: a script printing `lines`, then staying up.
    fn fake_muster(dir: &Path, lines: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("muster");
        std::fs::write(
            &path,
            format!("#!/bin/sh\nprintf '{lines}'\nexec sleep 30\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// `start_farm` with the fake, tried again while another test's fork still holds the
    /// just-written script open (`ETXTBSY`).
    fn start_fake_farm(muster: &Path, servers: usize, limit: Duration) -> Option<KillOnDrop> {
        for _ in 0..50 {
            match start_farm(
                muster,
                Path::new("farm.toml"),
                servers,
                Stdio::null(),
                limit,
            ) {
                Ok(farm) => return farm,
                Err(e)
                    if e.root_cause()
                        .downcast_ref::<std::io::Error>()
                        .and_then(std::io::Error::raw_os_error)
                        == Some(nix::errno::Errno::ETXTBSY as i32) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{e:#}"),
            }
        }
        panic!("the fake muster stayed busy");
    }

    #[test]
    fn the_farm_is_up_once_every_server_reported_listening() {
        let dir = std::env::temp_dir().join(format!("muster-bench-farm-{}", std::process::id()));
        let lines = "listening quake3 127.0.0.1:1\\nregistered\\nlistening quake3 127.0.0.1:2\\n\
                     listening quake3 127.0.0.1:3\\n";
        let muster = fake_muster(&dir, lines);
        assert!(start_fake_farm(&muster, 3, Duration::from_secs(60)).is_some());
        // A fourth server never reports: the farm does not count as started.
        assert!(start_fake_farm(&muster, 4, Duration::from_millis(300)).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
