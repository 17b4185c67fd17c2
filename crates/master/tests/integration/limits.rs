//! The HTTP face's connection caps, idle timeout and request bounds, over a real socket.

use std::time::Duration;

use muster_master::config::HumanDuration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::{Daemon, TempDir, config, get, get_json};

#[tokio::test]
async fn caps_and_idle_timeout() {
    let dir = TempDir::new("limits");
    let mut c = config(&dir);
    c.limits.tcp_max_per_source = 1;
    c.limits.tcp_idle_timeout = HumanDuration(Duration::from_millis(300));
    let d = Daemon::start(c);
    let (addr, handle) = (d.http(), &d.handle);

    // One idle connection holds the source's only slot…
    // (the kernel's accept queue is FIFO, so it is accepted first).
    let mut idle = TcpStream::connect(addr).await.unwrap();
    // …so a second one is closed without a byte.
    let mut second = TcpStream::connect(addr).await.unwrap();
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .ok();
    let mut buf = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), second.read_to_end(&mut buf)).await;
    assert!(matches!(n, Ok(Ok(0) | Err(_))), "refused without data");
    assert!(handle.metrics().drops("tcp_source_cap") >= 1);

    // The idle one is closed by the idle timeout (a real 300 ms timer: the one wait in this
    // binary; tcp.rs tests the same on a paused clock), which frees the slot.
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut buf)).await;
    assert!(matches!(n, Ok(Ok(0) | Err(_))), "idle connection closed");
    get_json(addr, "/healthz", 200).await;

    // Oversized and malformed queries are answered, not fatal.
    let long = "x".repeat(300);
    get_json(addr, &format!("/api/v1/servers?q={long}"), 400).await;
    get_json(addr, "/api/v1/servers?page=%FF", 400).await;
    let (status, _) = get(addr, "/api/v1/servers?password=2").await;
    assert_eq!(status, 400);
    assert_eq!(handle.metrics().drops("malformed"), 3, "each counted");

    d.stop().await;
}

/// HTTP list routes take a token per request from the source's bucket; another source and
/// the unlimited routes are still served.
#[tokio::test]
async fn http_list_requests_are_rate_limited_per_source() {
    let dir = TempDir::new("http-list-limit");
    let mut c = config(&dir);
    c.limits.http_list_burst = 3;
    c.limits.http_list_refill = HumanDuration(Duration::from_secs(3600));
    let d = Daemon::start(c);
    let (addr, handle) = (d.http(), &d.handle);

    let paths = [
        "/api/v1/servers",
        "/serverlist/ut2004.txt",
        "/api/v1/servers/192.0.2.1:7777",
        "/api/v1/servers",
    ];
    let mut statuses = Vec::new();
    for p in paths {
        statuses.push(get(addr, p).await.0);
    }
    assert_eq!(
        statuses,
        [200, 200, 404, 429],
        "the fourth list request is refused"
    );
    assert_eq!(handle.metrics().drops("rate_limited"), 1);
    get_json(addr, "/healthz", 200).await;
    assert_eq!(get(addr, "/metrics").await.0, 200);

    // Another source has its own bucket.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    if other.bind("127.0.0.2:0".parse().unwrap()).is_ok() {
        let mut s = other.connect(addr).await.unwrap();
        s.write_all(b"GET /api/v1/servers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            buf.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf)
        );
    }
    d.stop().await;
}
