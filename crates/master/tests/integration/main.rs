//! Loopback integration tests of the master daemon: `run` on `127.0.0.1:0`, records added
//! through the handle, read back over HTTP, shut down, started again on the same data dir.

mod acked;
mod api;
mod limits;
mod restart;
mod servers_json_file;

mod events;
mod face_gameagent;
mod face_gamespy;
mod face_mgmt;
mod face_quake3;
mod face_teeworlds;
mod face_valve;
mod federation;
mod federation_gamespy;
mod federation_valve;
mod flood;
mod hosting_box;
mod poller;
mod postgres;
mod redesign;
mod state_changed;
mod upstream_limits;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use muster_master::config::{Config, Listen, ListenConfig};
use muster_master::registry::Timestamp;
use muster_master::{Bound, Listeners, Master, MasterError, MasterHandle};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A fresh directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("muster-it-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `127.0.0.1:0`: a face on loopback, on a port the kernel picks.
pub fn loopback() -> Listen {
    Listen::parse("127.0.0.1:0").unwrap()
}

/// A daemon's config on `dir` with only the HTTP face, on [`loopback`] (the defaults would
/// bind the well-known ports); tests turn on more faces and change the rest.
pub fn config(dir: &TempDir) -> Config {
    let mut c = Config {
        data_dir: dir.0.clone(),
        listen: ListenConfig::off(),
        ..Config::default()
    };
    c.listen.http = loopback();
    c
}

/// The whole daemon (`Master::run`) on a spawned task, stopped through its shutdown future.
#[derive(Debug)]
pub struct Daemon {
    pub handle: MasterHandle,
    /// What the faces bound, with the real ports.
    pub bound: Vec<Bound>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), MasterError>>,
}

impl Daemon {
    /// Binds the faces of `c`, opens the master on its data dir and runs it.
    pub fn start(c: Config) -> Self {
        let listeners = Listeners::bind(&c).unwrap();
        let bound = listeners.bound().unwrap();
        let master = Master::open(c, Timestamp::now()).unwrap();
        let handle = master.handle();
        let (stop, rx) = oneshot::channel();
        let task = tokio::spawn(master.run(listeners, async {
            let _ = rx.await;
        }));
        Self {
            handle,
            bound,
            stop,
            task,
        }
    }

    /// Where `face` ("http", "gamespy-udp", …) is bound.
    pub fn addr(&self, face: &str) -> SocketAddr {
        self.bound
            .iter()
            .find(|b| b.face == face)
            .unwrap_or_else(|| panic!("{face} bound"))
            .addr
    }

    pub fn http(&self) -> SocketAddr {
        self.addr("http")
    }

    /// Shuts down cleanly (final flush); fails if that takes over 20 s or errs.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the daemon stops")
            .unwrap()
            .unwrap();
    }

    /// Like kill -9: the task is aborted, nothing more is flushed and no shutdown runs.
    pub async fn kill(self) {
        let Self {
            handle,
            bound: _,
            stop,
            task,
        } = self;
        task.abort();
        let _ = task.await;
        drop((handle, stop));
    }
}

/// A response read by [`exchange`].
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The head (status line and headers), lowercased.
    pub head: String,
    /// The body as sent, or its payload when it was chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    }

    /// The body as UTF-8 text.
    pub fn text(self) -> String {
        String::from_utf8(self.body).unwrap()
    }
}

/// One HTTP/1.1 exchange over a fresh connection, within 10 s: sends `head` (lines ended by
/// `\n`, sent as `\r\n`; it should ask for `Connection: close`) and then `body`, and reads the
/// response to the end.
pub async fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> Response {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut req = head.replace('\n', "\r\n").into_bytes();
        req.extend_from_slice(body);
        s.write_all(&req).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        buf
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap();
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = buf[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Response { status, head, body }
}

/// The payload of a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[line + 2..line + 2 + size]);
        b = &b[line + 2 + size + 2..];
    }
}

/// A minimal HTTP/1.1 GET over a fresh connection: (status, body).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let head = format!("GET {path} HTTP/1.1\nHost: muster\nConnection: close\n\n");
    let r = exchange(addr, &head, b"").await;
    (r.status, r.text())
}

/// GET and parse JSON, asserting the status.
pub async fn get_json(addr: SocketAddr, path: &str, status: u16) -> serde_json::Value {
    let (got, body) = get(addr, path).await;
    assert_eq!(got, status, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}
