//! `servers.json` sent with `sendfile` before the router, over real sockets: the same bytes
//! and headers as the router's answer, keep-alive and pipelined requests, the hand-over to the
//! router on the same connection, conditional requests, and the header deadline.

use std::io::Read as _;
use std::time::Duration;

use muster_master::config::HumanDuration;
use muster_master::registry::{
    Face, GameAddr, PollFields, PollInfo, Registration, ServerKey, Timestamp,
};
use muster_proto::limit::SourceKey;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::{Daemon, Response, TempDir, config, exchange};

const PATH: &str = "/ddnet/15/servers.json";

/// A daemon with `n` Teeworlds 0.6 servers (each gets a `servers.json` entry).
fn daemon(tag: &str, n: u16, header_timeout: Duration) -> (TempDir, Daemon) {
    let dir = TempDir::new(tag);
    let mut c = config(&dir);
    c.limits.http_header_timeout = HumanDuration(header_timeout);
    let d = Daemon::start(c);
    for i in 0..n {
        let key = ServerKey::new(
            "teeworlds",
            GameAddr::Ip(
                format!("203.0.113.{}:{}", 1 + i % 200, 8303 + i / 200)
                    .parse()
                    .unwrap(),
            ),
        );
        let reg = Registration {
            key: key.clone(),
            face: Face::Teeworlds06,
            game_port: Some(8303),
            query_addr: None,
            query_protocol: None,
            source: SourceKey::of(key.addr.ip().unwrap()),
        };
        let info = PollInfo::from(PollFields {
            name: format!("server {i} {}", "x".repeat(200)).into(),
            map: "dm1".into(),
            num_players: 1,
            max_players: 16,
            ..PollFields::default()
        });
        d.handle.write(|r| {
            r.register(reg, Timestamp::now());
            r.set_info(&key, info);
        });
    }
    d.handle.publish();
    (dir, d)
}

/// Reads one response with a `Content-Length` from `s`, `buf` holding what was read past the
/// previous one.
async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> Response {
    let fut = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while buf.len() < end + 4 + len {
                    let n = s.read_buf(buf).await.unwrap();
                    assert!(n > 0, "connection closed mid-body");
                }
                let body = buf[end + 4..end + 4 + len].to_vec();
                buf.drain(..end + 4 + len);
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                return Response { status, head, body };
            }
            let n = s.read_buf(buf).await.unwrap();
            assert!(n > 0, "connection closed before a response");
        }
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap()
}

/// Sends `GET target` with the `extra` header lines (each ending in CRLF) on `s` and reads
/// its response.
async fn get(s: &mut TcpStream, buf: &mut Vec<u8>, target: &str, extra: &str) -> Response {
    let head = format!("GET {target} HTTP/1.1\r\nHost: m\r\n{extra}\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    read_response(s, buf).await
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The router's answer (the file route answers its exact path only, the router ignores the
/// query string).
async fn via_router(d: &Daemon, extra: &str) -> Response {
    let head = format!("GET {PATH}?via=router HTTP/1.1\nHost: m\n{extra}Connection: close\n\n");
    exchange(d.http(), &head, b"").await
}

/// Headers both answers must agree on.
fn same_headers(a: &Response, b: &Response) {
    for h in [
        "content-type",
        "content-encoding",
        "vary",
        "etag",
        "cache-control",
        "content-length",
    ] {
        assert_eq!(a.header(h), b.header(h), "{h}\n{}\n---\n{}", a.head, b.head);
    }
}

#[tokio::test]
async fn plain_gets_come_from_the_file_then_the_router_takes_over() {
    let (_dir, d) = daemon("sj-file", 300, Duration::from_secs(5));
    let plain = via_router(&d, "").await;
    assert_eq!(plain.status, 200);
    assert!(plain.body.len() > 60_000, "{}", plain.body.len());
    let gz = via_router(&d, "Accept-Encoding: gzip\n").await;
    assert_eq!(gz.header("content-encoding"), Some("gzip"));

    let mut s = TcpStream::connect(d.http()).await.unwrap();
    let mut buf = Vec::new();
    // Two plain GETs and a gzip one on one keep-alive connection.
    for extra in ["", "", "Accept-Encoding: br, gzip\r\n"] {
        let r = get(&mut s, &mut buf, PATH, extra).await;
        assert_eq!(r.status, 200);
        assert!(r.header("date").is_some(), "{}", r.head);
        if extra.is_empty() {
            same_headers(&r, &plain);
            assert!(r.body == plain.body, "the same document");
        } else {
            same_headers(&r, &gz);
            assert_eq!(gunzip(&r.body), plain.body);
        }
    }
    // Pipelined: two documents and a health check in one write; the third goes to the router,
    // and so does every request after it on this connection.
    let mut three = format!("GET {PATH} HTTP/1.1\r\nHost: m\r\n\r\n").repeat(2);
    three.push_str("GET /healthz HTTP/1.1\r\nHost: m\r\n\r\n");
    s.write_all(three.as_bytes()).await.unwrap();
    for _ in 0..2 {
        let r = read_response(&mut s, &mut buf).await;
        assert!(r.status == 200 && r.body == plain.body);
    }
    let health = read_response(&mut s, &mut buf).await;
    assert_eq!(health.status, 200);
    assert!(String::from_utf8_lossy(&health.body).contains("\"ok\""));
    let r = get(&mut s, &mut buf, PATH, "").await;
    assert!(
        r.status == 200 && r.body == plain.body,
        "the router's answer"
    );
    same_headers(&r, &plain);
    d.stop().await;
}

#[tokio::test]
async fn conditional_and_unusual_requests_go_to_the_router() {
    let (_dir, d) = daemon("sj-cond", 20, Duration::from_secs(5));
    let mut s = TcpStream::connect(d.http()).await.unwrap();
    let mut buf = Vec::new();
    let first = get(&mut s, &mut buf, PATH, "").await;
    let tag = first.header("etag").unwrap().to_owned();
    // The tag the file route gave is the router's: a conditional GET is answered 304.
    let again = get(&mut s, &mut buf, PATH, &format!("If-None-Match: {tag}\r\n")).await;
    assert_eq!(again.status, 304, "{}", again.head);
    // HEAD and a request with a query string are the router's too.
    let head = exchange(
        d.http(),
        &format!("HEAD {PATH} HTTP/1.1\nHost: m\nConnection: close\n\n"),
        b"",
    )
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        first.header("content-length")
    );
    let mut s = TcpStream::connect(d.http()).await.unwrap();
    let mut buf = Vec::new();
    let q = get(&mut s, &mut buf, &format!("{PATH}?x=1"), "").await;
    assert!(q.status == 200 && q.body == first.body);
    // `Connection: close` is answered from the file, and the connection closed after it.
    let closed = exchange(
        d.http(),
        &format!("GET {PATH} HTTP/1.1\nHost: m\nConnection: close\n\n"),
        b"",
    )
    .await;
    assert_eq!(closed.header("connection"), Some("close"));
    assert!(closed.status == 200 && closed.body == first.body);
    d.stop().await;
}

#[tokio::test]
async fn a_trickled_head_meets_the_header_deadline() {
    let (_dir, d) = daemon("sj-slow", 1, Duration::from_millis(400));
    let mut s = TcpStream::connect(d.http()).await.unwrap();
    s.write_all(b"GET /ddnet/15/serv").await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "closed after the deadline: {closed:?}"
    );
    // A complete request on a fresh connection is still answered.
    let mut s = TcpStream::connect(d.http()).await.unwrap();
    let mut buf = Vec::new();
    assert_eq!(get(&mut s, &mut buf, PATH, "").await.status, 200);
    d.stop().await;
}

#[tokio::test]
async fn the_documents_are_unnamed_files_in_the_data_directory() {
    let (dir, d) = daemon("sj-unnamed", 50, Duration::from_secs(5));
    let plain = via_router(&d, "").await;
    let gz = via_router(&d, "Accept-Encoding: gzip\n").await;
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    // Open in this process (the daemon runs in it), under the data directory, never linked.
    let data_dir = std::fs::canonicalize(&dir.0).unwrap();
    let mut sizes: Vec<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| {
                t.starts_with(&data_dir) && t.to_string_lossy().ends_with("(deleted)")
            })
        })
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .map(|m| m.len())
        .collect();
    sizes.sort_unstable();
    // The registry's DDNet info file is empty: these servers registered over UDP.
    let mut want = vec![0, plain.body.len() as u64, gz.body.len() as u64];
    want.sort_unstable();
    assert_eq!(sizes, want, "the info file, servers.json and its gzip form");
    let names: Vec<String> = std::fs::read_dir(&data_dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains("servers")), "{names:?}");
}

#[tokio::test]
async fn the_plain_document_names_no_encoding_and_is_never_compressed_again() {
    let (_dir, d) = daemon("sj-encoding", 50, Duration::from_secs(5));
    // Through the router (a query string), asking for brotli only: the compression layer would
    // take an unmarked JSON body; this one goes out as built.
    let br = via_router(&d, "Accept-Encoding: br\n").await;
    assert_eq!(br.status, 200);
    assert_eq!(br.header("content-encoding"), None, "{}", br.head);
    assert!(br.body.starts_with(b"{\"servers\":["));
    // The file route: no Content-Encoding for the plain form either, gzip named for gzip.
    let mut s = TcpStream::connect(d.http()).await.unwrap();
    let mut buf = Vec::new();
    for (extra, encoding) in [("", None), ("Accept-Encoding: gzip\r\n", Some("gzip"))] {
        let r = get(&mut s, &mut buf, PATH, extra).await;
        assert_eq!(r.header("content-encoding"), encoding, "{}", r.head);
    }
}

#[tokio::test]
async fn long_documents_arrive_whole_on_one_connection() {
    // Long bodies (past every send buffer too): from the second on they go out corked.
    let (_dir, d) = daemon("sj-long", 20_000, Duration::from_secs(5));
    let plain = via_router(&d, "").await;
    assert!(plain.body.len() > 4 << 20, "{}", plain.body.len());
    let mut s = TcpStream::connect(d.http()).await.unwrap();
    let mut buf = Vec::new();
    for _ in 0..3 {
        let r = get(&mut s, &mut buf, PATH, "").await;
        assert_eq!(r.status, 200);
        same_headers(&r, &plain);
        assert!(r.body == plain.body, "the same document, whole");
    }
    // The connection still answers small requests at once after a corked body.
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: m\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.status, 200);
    d.stop().await;
}
