//! A small HTTP/1.1 client for the bench: one connection, requests one after another,
//! `Content-Length` and chunked bodies, keep-alive or one connection per request.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

/// How long one HTTP exchange may take.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body read (a servers.json of 100k servers with 1 KB infos is ~110 MB).
const MAX_BODY: usize = 512 << 20;

/// One response.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Body bytes (decoded from chunks, still compressed when it was sent so).
    pub body_len: u64,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A connection to `server` from `source`, reconnecting when the server closes it.
#[derive(Debug)]
pub(crate) struct Conn {
    source: Ipv4Addr,
    server: SocketAddr,
    keep_alive: bool,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    /// Keep bodies (else only count them: rate loops need no copy of a 10 MB document).
    pub keep_body: bool,
    scratch: Vec<u8>,
}

async fn connect(source: Ipv4Addr, server: SocketAddr) -> anyhow::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
    let stream = sock.connect(server).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Conn {
    pub(crate) fn new(source: Ipv4Addr, server: SocketAddr, keep_alive: bool) -> Self {
        Self {
            source,
            server,
            keep_alive,
            stream: None,
            buf: Vec::with_capacity(64 * 1024),
            keep_body: true,
            scratch: vec![0; 256 * 1024],
        }
    }

    /// `GET path` with `extra` header lines (each ending in `\r\n`).
    pub(crate) async fn get(&mut self, path: &str, extra: &str) -> anyhow::Result<Response> {
        let conn = if self.keep_alive {
            "keep-alive"
        } else {
            "close"
        };
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: {conn}\r\n{extra}\r\n",
            self.server
        );
        self.exchange(head.as_bytes(), &[]).await
    }

    /// `POST path` with header lines `extra` and `body`.
    pub(crate) async fn post(
        &mut self,
        path: &str,
        extra: &str,
        body: &[u8],
    ) -> anyhow::Result<Response> {
        let conn = if self.keep_alive {
            "keep-alive"
        } else {
            "close"
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nConnection: {conn}\r\n{extra}Content-Length: {}\r\n\r\n",
            self.server,
            body.len()
        );
        self.exchange(head.as_bytes(), body).await
    }

    async fn exchange(&mut self, head: &[u8], body: &[u8]) -> anyhow::Result<Response> {
        // A kept connection the server closed meanwhile fails on first use: retry once on a
        // new one.
        let reused = self.stream.is_some();
        match tokio::time::timeout(IO_TIMEOUT, self.try_exchange(head, body)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) if reused => {
                self.stream = None;
                let _ = e;
                tokio::time::timeout(IO_TIMEOUT, self.try_exchange(head, body))
                    .await
                    .context("HTTP exchange timed out")?
            }
            Ok(Err(e)) => {
                self.stream = None;
                Err(e)
            }
            Err(_) => {
                self.stream = None;
                bail!("HTTP exchange timed out")
            }
        }
    }

    async fn try_exchange(&mut self, head: &[u8], body: &[u8]) -> anyhow::Result<Response> {
        if self.stream.is_none() {
            self.stream = Some(connect(self.source, self.server).await?);
            self.buf.clear();
        }
        let stream = self.stream.as_mut().context("no connection")?;
        if body.is_empty() {
            stream.write_all(head).await?;
        } else {
            let mut req = Vec::with_capacity(head.len() + body.len());
            req.extend_from_slice(head);
            req.extend_from_slice(body);
            stream.write_all(&req).await?;
        }
        let resp = read_response(stream, &mut self.buf, &mut self.scratch, self.keep_body).await?;
        let close = resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if close || !self.keep_alive {
            self.stream = None;
        }
        Ok(resp)
    }
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<()> {
    if buf.capacity() - buf.len() < 64 * 1024 {
        buf.reserve(256 * 1024);
    }
    // Reads into the spare capacity (no zeroing).
    let n = stream.read_buf(buf).await?;
    if n == 0 {
        bail!("connection closed mid-response");
    }
    Ok(())
}

/// Where a body goes: counted, and kept when asked.
struct Sink {
    keep: bool,
    data: Vec<u8>,
    len: u64,
}

impl Sink {
    fn take(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.keep {
            self.data.extend_from_slice(bytes);
        }
    }
}

/// Reads one response; bytes after it stay in `buf` (none, as requests are not pipelined).
async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    scratch: &mut [u8],
    keep: bool,
) -> anyhow::Result<Response> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            bail!("HTTP header too long");
        }
        fill(stream, buf).await?;
    };
    let head = std::str::from_utf8(buf.get(..head_end).unwrap_or_default())
        .context("HTTP header is not UTF-8")?
        .to_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .context("no HTTP status")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    buf.drain(..head_end + 4);
    let mut sink = Sink {
        keep,
        data: Vec::new(),
        len: 0,
    };
    let chunked = get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if status == 304 || status == 204 {
    } else if chunked {
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                fill(stream, buf).await?;
            };
            let size_text = std::str::from_utf8(buf.get(..line_end).unwrap_or_default())?;
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .context("bad chunk size")?;
            if size > MAX_BODY {
                bail!("chunk too large");
            }
            while buf.len() < line_end + 2 + size + 2 {
                fill(stream, buf).await?;
            }
            sink.take(
                buf.get(line_end + 2..line_end + 2 + size)
                    .unwrap_or_default(),
            );
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break;
            }
        }
    } else if let Some(len) = get("content-length") {
        let len: usize = len.parse().context("bad Content-Length")?;
        if len > MAX_BODY {
            bail!("body too large");
        }
        let have = len.min(buf.len());
        sink.take(buf.get(..have).unwrap_or_default());
        buf.drain(..have);
        let mut left = len - have;
        while left > 0 {
            let want = left.min(scratch.len());
            let n = stream
                .read(scratch.get_mut(..want).unwrap_or_default())
                .await?;
            if n == 0 {
                bail!("connection closed mid-body");
            }
            sink.take(scratch.get(..n).unwrap_or_default());
            left -= n;
        }
    } else {
        // Until the server closes.
        sink.take(buf);
        buf.clear();
        loop {
            let n = stream.read(scratch).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            sink.take(scratch.get(..n).unwrap_or_default());
        }
    }
    Ok(Response {
        status,
        headers,
        body: sink.data,
        body_len: sink.len,
    })
}
