//! What several of these tests share: `muster` started as a child that is killed when dropped,
//! its `listening` lines read, and the `muster serve` flags that choose which faces bind.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Lines};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Output, Stdio};

/// A child process killed when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `muster <args>`, its stderr dropped: the process and the lines of its stdout.
pub(crate) fn spawn(args: &[&str]) -> (Proc, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster");
    let stdout = child.stdout.take().expect("stdout");
    (Proc(child), BufReader::new(stdout).lines())
}

/// Start `muster <args>` and read `count` `listening <face> <udp|tcp> <addr>` lines, in the
/// order printed, as (face, address).
pub(crate) fn start_lines(args: &[&str], count: usize) -> (Proc, Vec<(String, SocketAddr)>) {
    let (p, mut lines) = spawn(args);
    let mut out = Vec::new();
    for _ in 0..count {
        let line = lines.next().expect("a listening line").expect("utf-8");
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 4, "{line}");
        assert_eq!(parts[0], "listening", "{line}");
        out.push((parts[1].to_owned(), parts[3].parse().expect("address")));
    }
    (p, out)
}

/// [`start_lines`], the lines as face → address.
pub(crate) fn start(args: &[&str], count: usize) -> (Proc, HashMap<String, SocketAddr>) {
    let (p, lines) = start_lines(args, count);
    (p, lines.into_iter().collect())
}

/// Run `muster <args>` to its end, `RUST_LOG` unset so that no log lines mix with what it says.
pub(crate) fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run muster")
}

/// Output bytes as text.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `muster <args> -f json`, require success and parse what it printed.
pub(crate) fn muster_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .args(["-f", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "muster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every face `muster serve` binds unless told `off`, by its flag.
const FACE_FLAGS: [&str; 9] = [
    "--gameagent",
    "--gamespy-udp",
    "--gamespy-tcp",
    "--teeworlds07",
    "--teeworlds06",
    "--quake3",
    "--valve",
    "--http",
    "--mgmt",
];

/// A free loopback port, as `muster serve` binds it.
pub(crate) const LOOPBACK: &str = "127.0.0.1:0";

/// The `muster serve` flags for every face: each named one (by its name in the `listening`
/// lines, `http`, `gamespy-udp`...) at its address, every other one `off`.
pub(crate) fn faces_at<'a>(on: &[(&str, &'a str)]) -> Vec<&'a str> {
    for (name, _) in on {
        assert!(
            FACE_FLAGS.iter().any(|f| f[2..] == **name),
            "no face {name}"
        );
    }
    let mut args = Vec::new();
    for flag in FACE_FLAGS {
        let at = on.iter().find(|(name, _)| flag[2..] == **name);
        args.extend([flag, at.map_or("off", |(_, addr)| *addr)]);
    }
    args
}

/// The `muster serve` flags that bind only the named faces, each on a free loopback port.
pub(crate) fn only_faces(names: &[&str]) -> Vec<&'static str> {
    let on: Vec<(&str, &'static str)> = names.iter().map(|n| (*n, LOOPBACK)).collect();
    faces_at(&on)
}
