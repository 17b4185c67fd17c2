//! Loopback integration tests of the master daemon: `run` on `127.0.0.1:0`, records added
//! through the handle, read back over HTTP, shut down, started again on the same data dir.

mod limits;
mod restart;

mod face_gameagent;
mod face_gamespy;
mod face_mgmt;
mod face_teeworlds;
mod flood;
mod poller;
mod state_changed;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

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

/// A minimal HTTP/1.1 GET over a fresh connection: (status, body).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: muster\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8(buf).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "the test client reads plain bodies only"
        );
        (status, body.to_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap()
}

/// GET and parse JSON, asserting the status.
pub async fn get_json(addr: SocketAddr, path: &str, status: u16) -> serde_json::Value {
    let (got, body) = get(addr, path).await;
    assert_eq!(got, status, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}
