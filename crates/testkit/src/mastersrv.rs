//! DDNet's own master server (`mastersrv`, the unmodified Rust program from ddnet/ddnet), built by
//! `scripts/install-peers.sh` into `<peers>/bin/mastersrv`, run on 127.0.0.1 in a scratch folder, and
//! stopped by PID when its guard drops.
//!
//! It serves `POST /ddnet/15/register` on its TCP port and writes `servers.json` into its folder once a
//! second; without `--connecting-ip-header` it takes the registering peer's address as the server's. Its
//! challenges leave from a UDP socket of its own (any port). [`http_post`] sends raw register requests
//! (any headers, any body, with or without `Content-Length`), so a test can put the same request to it and
//! to Muster's DDNet face and compare the answers.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::net::{free_udp_port, loopback};
use super::process::{ChildGuard, ScratchDir};
use super::{Missing, built_peer, require};

/// How long one HTTP exchange with the master may take.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the master may take to start (bind its port and write its first `servers.json`).
pub const START_LIMIT: Duration = Duration::from_secs(15);

/// How often readiness and [`MastersrvGuard::wait_for`] look again (the master writes
/// `servers.json` once a second).
const POLL: Duration = Duration::from_millis(50);

/// The register path of DDNet's master.
pub const REGISTER_PATH: &str = "/ddnet/15/register";

/// An HTTP answer: status, headers (names lower-cased, in order), body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The body as JSON; panics with the response when it is not JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one `POST <path>` to `addr` over a fresh connection, with exactly `headers` (plus `Host` and
/// `Connection: close`) and `body`; nothing else is added, not even `Content-Length`. Returns the answer,
/// or the error that ended the exchange.
pub fn http_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    let mut request = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes)?;
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut body = Vec::new();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    match length {
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body)?;
        }
        // `Connection: close`: the body runs to the end (chunked answers are not expected here).
        None => {
            reader.read_to_end(&mut body)?;
        }
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// DDNet's mastersrv, built by `scripts/install-peers.sh`.
#[derive(Debug, Clone)]
pub struct Mastersrv {
    /// Path of the binary.
    pub bin: PathBuf,
}

impl Mastersrv {
    /// Looks for `<peers>/bin/mastersrv`.
    pub fn find() -> Result<Self, Missing> {
        built_peer("mastersrv (DDNet)", "mastersrv", "ddnet-mastersrv").map(|bin| Self { bin })
    }

    /// [`find`](Self::find) with the skip-or-fail rule applied.
    #[track_caller]
    pub fn require() -> Option<Self> {
        require(Self::find())
    }

    /// Starts the master on 127.0.0.1 (a free port) with its `servers.json` in a scratch folder, plus
    /// `extra` command-line options, and waits until it answers HTTP and has written `servers.json`.
    pub fn start(&self, extra: &[&str]) -> MastersrvGuard {
        let scratch = ScratchDir::new("mastersrv");
        let port = free_udp_port();
        let addr = loopback(port);
        let listen = addr.to_string();
        let out = scratch.path().join("servers.json");
        let out_arg = out.display().to_string();
        let mut args = vec!["--listen", listen.as_str(), "--out", out_arg.as_str()];
        args.extend_from_slice(extra);
        let log = scratch.path().join("mastersrv.log");
        // Its log says what it did with each request (env_logger reads RUST_LOG).
        let env = [("RUST_LOG", std::path::Path::new("mastersrv=debug"))];
        let child = ChildGuard::spawn("mastersrv", &self.bin, &args, scratch.path(), &env, log)
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let mut guard = MastersrvGuard {
            child,
            scratch,
            addr,
            out,
        };
        let start = Instant::now();
        loop {
            if let Some(status) = guard.child.exited() {
                panic!(
                    "mastersrv exited during start-up ({status})\n{}",
                    guard.log()
                );
            }
            let answers = TcpStream::connect_timeout(&addr, POLL).is_ok();
            if answers && guard.servers_json().is_some() {
                return guard;
            }
            if start.elapsed() > START_LIMIT {
                guard.child.stop();
                panic!(
                    "mastersrv on {addr} not ready within {START_LIMIT:?}\n{}",
                    guard.log()
                );
            }
            std::thread::sleep(POLL);
        }
    }
}

/// A running mastersrv; stopped by PID (SIGTERM, then SIGKILL) and its folder removed on drop.
#[derive(Debug)]
pub struct MastersrvGuard {
    // Field order matters: the child is stopped before its folder is removed.
    child: ChildGuard,
    scratch: ScratchDir,
    addr: SocketAddr,
    out: PathBuf,
}

impl MastersrvGuard {
    /// The HTTP address (127.0.0.1:port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The register URL game servers are given (`sv_register_url`, `ddnet:<url>`).
    pub fn register_url(&self) -> String {
        format!("http://{}{REGISTER_PATH}", self.addr)
    }

    /// The master's log so far.
    pub fn log(&self) -> String {
        self.child.log()
    }

    /// The scratch folder.
    pub fn dir(&self) -> &std::path::Path {
        self.scratch.path()
    }

    /// The `servers.json` it wrote last, parsed; `None` before the first write (or mid-rename).
    pub fn servers_json(&self) -> Option<serde_json::Value> {
        let bytes = std::fs::read(&self.out).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The `addresses` of every listed server, in document order.
    pub fn listed_addresses(&self) -> Vec<Vec<String>> {
        let Some(doc) = self.servers_json() else {
            return Vec::new();
        };
        doc["servers"]
            .as_array()
            .map(|servers| {
                servers
                    .iter()
                    .map(|s| {
                        s["addresses"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| x.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Re-reads `servers.json` (written once a second) until `done` holds for it or `limit` has
    /// passed; returns the last document seen and whether `done` held.
    pub fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> (serde_json::Value, bool) {
        let start = Instant::now();
        let mut last = serde_json::Value::Null;
        loop {
            if let Some(doc) = self.servers_json() {
                if done(&doc) {
                    return (doc, true);
                }
                last = doc;
            }
            if start.elapsed() > limit {
                return (last, false);
            }
            std::thread::sleep(POLL);
        }
    }

    /// `POST /ddnet/15/register` with exactly `headers` and `body` (see [`http_post`]).
    pub fn post(&self, headers: &[(&str, &str)], body: &[u8]) -> std::io::Result<HttpResponse> {
        http_post(self.addr, REGISTER_PATH, headers, body)
    }

    /// Stops the master now (the guard's drop does the same).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.child.stop()
    }
}
