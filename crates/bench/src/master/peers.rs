//! DDNet's mastersrv (built from source with cargo) and Debian's nginx serving its
//! `servers.json`, run on loopback for the side-by-side comparison.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::procs::{self, KillOnDrop};

/// How long building mastersrv may take (about a minute on 2 idle cores).
const BUILD_LIMIT: Duration = Duration::from_secs(900);

/// Builds mastersrv from `src` (its Cargo.toml directory) into `target/peers/mastersrv`.
pub(crate) fn build_mastersrv(src: &Path) -> anyhow::Result<PathBuf> {
    let root = procs::workspace_root();
    let target = root.join("target/peers/mastersrv");
    let manifest = src.join("Cargo.toml");
    if !manifest.exists() {
        bail!(
            "no mastersrv sources at {} (run `bash scripts/install-peers.sh`, or give --mastersrv-src)",
            src.display()
        );
    }
    eprintln!("building mastersrv from {} …", src.display());
    let mut cmd = Command::new("cargo");
    cmd.arg("build")
        .arg("--release")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target);
    std::fs::create_dir_all(&target)?;
    let done = procs::run_bounded(cmd, &target, "build", BUILD_LIMIT)?;
    if !done.status.is_some_and(|s| s.success()) {
        bail!(
            "building mastersrv failed: {}",
            String::from_utf8_lossy(&done.stderr)
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let bin = target.join("release/mastersrv");
    if !bin.exists() {
        bail!("no binary at {}", bin.display());
    }
    Ok(bin)
}

/// A free loopback TCP port (bound and released; a race with another process is possible
/// but the start-up check would report it).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{what} did not listen on {addr} within 15 s")
}

/// A running peer.
#[derive(Debug)]
pub(crate) struct Running {
    pub proc: KillOnDrop,
    pub addr: SocketAddr,
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.proc.0.id()
    }
}

/// Runs mastersrv on loopback, writing `out` once a second.
pub(crate) fn run_mastersrv(bin: &Path, out: &Path, dir: &Path) -> anyhow::Result<Running> {
    let port = free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let child = Command::new(bin)
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("mastersrv.stdout"))?)
        .stderr(std::fs::File::create(dir.join("mastersrv.stderr"))?)
        .spawn()
        .context("starting mastersrv")?;
    let proc = KillOnDrop(child);
    wait_listening(addr, "mastersrv")?;
    Ok(Running { proc, addr })
}

/// nginx's binary, installing Debian's package with `scripts/bench/install-nginx.sh` when
/// it is missing.
pub(crate) fn nginx_binary() -> anyhow::Result<PathBuf> {
    let known = PathBuf::from("/usr/sbin/nginx");
    if known.exists() {
        return Ok(known);
    }
    if let Some(p) = procs::which("nginx") {
        return Ok(p);
    }
    let script = procs::workspace_root().join("scripts/bench/install-nginx.sh");
    eprintln!("nginx missing: running {}", script.display());
    let status = Command::new("bash").arg(&script).status()?;
    if !status.success() {
        bail!("{} failed", script.display());
    }
    if known.exists() {
        Ok(known)
    } else {
        procs::which("nginx").context("nginx still missing after the install script")
    }
}

/// The nginx config: what Debian's default `nginx.conf` sets for serving files (sendfile,
/// tcp_nopush, keepalive 65 s, worker_processes auto) plus on-the-fly gzip for JSON, access
/// log off (Muster logs no requests either), everything else in `dir`.
pub(crate) fn nginx_config(dir: &Path, port: u16, root: &Path) -> String {
    let d = dir.display();
    format!(
        "worker_processes auto;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    gzip on;
    gzip_vary on;
    gzip_types application/json;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
",
        root = root.display()
    )
}

/// The gzip settings in [`nginx_config`], for the output.
pub(crate) const NGINX_GZIP: &str = "gzip on, gzip_types application/json, comp level 1 \
(nginx's default; no gzip_static: mastersrv writes no .gz file), sendfile on, \
worker_processes auto, keepalive_requests 1e6, access_log off";

/// Runs nginx with [`nginx_config`] serving `root` (which holds `ddnet/15/servers.json`).
pub(crate) fn run_nginx(bin: &Path, dir: &Path, root: &Path) -> anyhow::Result<Running> {
    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_config(dir, port, root))?;
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("nginx.stdout"))?)
        .stderr(std::fs::File::create(dir.join("nginx.stderr"))?)
        .spawn()
        .context("starting nginx")?;
    let proc = KillOnDrop(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr, "nginx")?;
    Ok(Running { proc, addr })
}

impl Running {
    /// SIGTERM by pid (nginx's master then stops its workers), then waits; killed at 10 s.
    pub(crate) fn stop(mut self) {
        let pid = self.pid();
        let workers = super::stats::children_of(pid);
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let _ = procs::wait_bounded(&mut self.proc.0, Duration::from_secs(10));
        for w in workers {
            if Path::new(&format!("/proc/{w}")).exists() {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(w.to_string())
                    .status();
            }
        }
    }
}
