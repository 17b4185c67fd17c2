//! `GET /api/v1/events` over real sockets: a management server registers, updates its stats and
//! unregisters through its face; the stream carries `server_added`, `server_changed` and
//! `server_removed` within 2 s of each. The stream outlives the TCP idle timeout, resumes after
//! `Last-Event-ID`, and the subscriber caps answer 429 (per address or network) or 503 (in total). `/metrics` carries per-server gauges.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_master::config::HumanDuration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::flood::mgmt_frame;
use crate::{Daemon, TempDir, config, get, get_json, loopback};

/// One event of a stream.
#[derive(Debug, Clone)]
struct Sse {
    id: Option<u64>,
    event: String,
    data: serde_json::Value,
}

/// A Server-Sent Events client on a raw socket (HTTP/1.0, so the body is not chunked).
struct Stream {
    sock: TcpStream,
    buf: Vec<u8>,
    comments: usize,
}

impl Stream {
    async fn open(
        http: SocketAddr,
        path: &str,
        last_id: Option<u64>,
    ) -> Result<Self, (u16, String)> {
        let mut sock = TcpStream::connect(http).await.unwrap();
        let resume = last_id.map_or_else(String::new, |n| format!("Last-Event-ID: {n}\r\n"));
        let req = format!("GET {path} HTTP/1.0\r\nHost: muster\r\n{resume}\r\n");
        sock.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut chunk))
                .await
                .expect("response head within 5 s")
                .unwrap();
            assert!(n > 0, "closed before the head");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        let rest = buf.split_off(head_end + 4);
        if status != 200 {
            let mut body = rest;
            let _ = sock.read_to_end(&mut body).await;
            return Err((status, String::from_utf8_lossy(&body).into_owned()));
        }
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/event-stream"),
            "{head}"
        );
        Ok(Self {
            sock,
            buf: rest,
            comments: 0,
        })
    }

    /// The next event within `within`, or `None`.
    async fn next(&mut self, within: Duration) -> Option<Sse> {
        let end = Instant::now() + within;
        loop {
            while let Some(i) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8(self.buf.drain(..i + 2).collect()).unwrap();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if line.starts_with(':') {
                        self.comments += 1;
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if !event.is_empty() {
                    let data = serde_json::from_str(&data).unwrap();
                    return Some(Sse { id, event, data });
                }
            }
            let left = end.checked_duration_since(Instant::now())?;
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout(left, self.sock.read(&mut chunk)).await {
                Ok(Ok(0)) | Err(_) => return None,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => panic!("stream failed: {e}"),
            }
        }
    }
}

const WITHIN: Duration = Duration::from_secs(2);

fn start(dir: &TempDir, idle: Duration, keep_alive: Duration) -> Daemon {
    let mut c = config(dir);
    c.listen.mgmt = loopback();
    c.poller.enabled = false;
    c.limits.tcp_idle_timeout = HumanDuration(idle);
    c.events.keep_alive = HumanDuration(keep_alive);
    c.events.max_streams_per_source = 3;
    Daemon::start(c)
}

async fn send(s: &mut TcpStream, json: &str) {
    s.write_all(&mgmt_frame(json)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_changes_arrive_as_events_within_two_seconds() {
    let dir = TempDir::new("events-mgmt");
    let d = start(&dir, Duration::from_secs(15), Duration::from_secs(15));
    let (http, mgmt) = (d.http(), d.addr("mgmt"));
    let list = get_json(http, "/api/v1/servers", 200).await;
    let since = list["last_event_id"].as_u64().unwrap();
    let mut events = Stream::open(http, &format!("/api/v1/events?last_event_id={since}"), None)
        .await
        .unwrap();

    let mut server = TcpStream::connect(mgmt).await.unwrap();
    send(
        &mut server,
        r#"{"command":"msRegisterGameServer","content":{"serverName":"Feuerland","serverAddress":"192.0.2.10","serverPort":20000}}"#,
    )
    .await;
    let added = events.next(WITHIN).await.expect("server_added within 2 s");
    assert_eq!(added.event, "server_added");
    assert_eq!(added.data["address"], "192.0.2.10:20000");
    assert_eq!(added.data["name"], "Feuerland");
    assert_eq!(added.id, Some(since + 1));
    // The data is the detail object of the API.
    let detail = get_json(http, "/api/v1/servers/192.0.2.10:20000", 200).await;
    assert_eq!(added.data, detail);

    send(
        &mut server,
        r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":2,"max":4},"isLobbyOpen":false,"gameplayMode":2}}"#,
    )
    .await;
    let changed = events
        .next(WITHIN)
        .await
        .expect("server_changed within 2 s");
    assert_eq!(changed.event, "server_changed");
    assert_eq!(changed.data["num_players"], 2);
    assert_eq!(changed.data["lobby"]["open"], false);
    assert_eq!(changed.id, Some(since + 2));

    send(&mut server, r#"{"command":"msUnregisterGameServer"}"#).await;
    let removed = events
        .next(WITHIN)
        .await
        .expect("server_removed within 2 s");
    assert_eq!(removed.event, "server_removed");
    assert_eq!(removed.data["address"], "192.0.2.10:20000");
    assert_eq!(removed.data["game"], "bomberman");
    assert_eq!(removed.id, Some(since + 3));

    // Resuming after the first event replays the other two, in order.
    let mut again = Stream::open(http, "/api/v1/events", Some(since + 1))
        .await
        .unwrap();
    let a = again.next(WITHIN).await.unwrap();
    let b = again.next(WITHIN).await.unwrap();
    assert_eq!(
        (a.event.as_str(), a.id, b.event.as_str(), b.id),
        (
            "server_changed",
            Some(since + 2),
            "server_removed",
            Some(since + 3)
        )
    );
    // An id of another run asks for a resync.
    let mut stale = Stream::open(http, "/api/v1/events", Some(1)).await.unwrap();
    assert_eq!(stale.next(WITHIN).await.unwrap().event, "resync");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_idle_timeout_with_keep_alives() {
    let dir = TempDir::new("events-idle");
    let d = start(&dir, Duration::from_millis(500), Duration::from_millis(200));
    let (http, mgmt) = (d.http(), d.addr("mgmt"));
    let mut events = Stream::open(http, "/api/v1/events", None).await.unwrap();
    // Three idle timeouts without an event.
    assert!(events.next(Duration::from_millis(1500)).await.is_none());
    assert!(events.comments >= 3, "keep-alives: {}", events.comments);
    let mut server = TcpStream::connect(mgmt).await.unwrap();
    send(
        &mut server,
        r#"{"command":"msRegisterGameServer","content":{"serverName":"Late","serverAddress":"192.0.2.11","serverPort":20000}}"#,
    )
    .await;
    let e = events.next(WITHIN).await.expect("still open");
    assert_eq!(e.event, "server_added");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_per_source_and_bad_ids_refused() {
    let dir = TempDir::new("events-caps");
    let d = start(&dir, Duration::from_secs(15), Duration::from_secs(15));
    let http = d.http();
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(Stream::open(http, "/api/v1/events", None).await.unwrap());
    }
    let Err((status, body)) = Stream::open(http, "/api/v1/events", None).await else {
        panic!("a fourth stream from one source was accepted");
    };
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("too many event streams"), "{body}");
    assert_eq!(d.handle.metrics().drops("event_stream_cap"), 1);
    assert_eq!(d.handle.metrics().limited("event_streams_per_source"), 1);
    drop(open.pop());
    // The slot is given back when the connection goes.
    let t = Instant::now();
    while d.handle.events().subscribers() > 2 {
        assert!(t.elapsed() < WITHIN, "slot given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    open.push(Stream::open(http, "/api/v1/events", None).await.unwrap());
    let Err((status, _)) = Stream::open(http, "/api/v1/events?last_event_id=x", None).await else {
        panic!("a bad id was accepted");
    };
    assert_eq!(status, 400);
    let (_, metrics) = get(http, "/metrics").await;
    assert!(metrics.contains("muster_event_streams 3\n"), "{metrics}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_capped_per_server_gauges() {
    let dir = TempDir::new("events-metrics");
    let mut c = config(&dir);
    c.listen.mgmt = loopback();
    c.poller.enabled = false;
    c.http.server_metrics_max = 2;
    let d = Daemon::start(c);
    let (http, mgmt) = (d.http(), d.addr("mgmt"));
    let mut servers = Vec::new();
    for (i, players) in [3, 0, 1].into_iter().enumerate() {
        let mut s = TcpStream::connect(mgmt).await.unwrap();
        send(
            &mut s,
            &format!(
                r#"{{"command":"msRegisterGameServer","content":{{"serverName":"S{i}","serverAddress":"192.0.2.{}","serverPort":20000}}}}"#,
                20 + i
            ),
        )
        .await;
        send(
            &mut s,
            &format!(
                r#"{{"command":"msUpdateGameServerStats","content":{{"players":{{"current":{players},"max":4}},"isLobbyOpen":true,"gameplayMode":1}}}}"#
            ),
        )
        .await;
        servers.push(s);
        // One after the other, so that the list order is known.
        let t = Instant::now();
        while get_json(http, "/api/v1/servers", 200).await["total"] != i + 1 {
            assert!(t.elapsed() < WITHIN);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, m) = get(http, "/metrics").await;
    assert!(
        m.contains(
            "muster_server_players{address=\"192.0.2.20:20000\",protocol=\"mgmt\",game=\"bomberman\"} 3\n"
        ),
        "{m}"
    );
    assert!(
        m.contains(
            "muster_server_up{address=\"192.0.2.21:20000\",protocol=\"mgmt\",game=\"bomberman\"} 1\n"
        ),
        "{m}"
    );
    assert!(!m.contains("192.0.2.22"), "capped at 2: {m}");
    assert!(m.contains("muster_server_series_omitted 1\n"), "{m}");
    d.stop().await;
}

/// A client that accepts gzip gets the stream compressed: read until the daemon stops (which
/// ends the stream with the gzip trailer) and decode it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_stream_decodes_to_the_same_events() {
    use std::io::Read as _;
    let dir = TempDir::new("events-gzip");
    let d = start(&dir, Duration::from_secs(15), Duration::from_secs(15));
    let (http, mgmt) = (d.http(), d.addr("mgmt"));
    let mut sock = TcpStream::connect(http).await.unwrap();
    sock.write_all(b"GET /api/v1/events HTTP/1.0\r\nHost: m\r\nAccept-Encoding: gzip, br\r\n\r\n")
        .await
        .unwrap();
    // The stream is open once its head arrived (it is sent with the first piece).
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WITHIN, sock.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        raw.extend_from_slice(&chunk[..n]);
    }
    let mut server = TcpStream::connect(mgmt).await.unwrap();
    send(
        &mut server,
        r#"{"command":"msRegisterGameServer","content":{"serverName":"Zipped","serverAddress":"192.0.2.12","serverPort":20000}}"#,
    )
    .await;
    // Give the event time to be sent, then stop the daemon: the stream ends.
    let t = Instant::now();
    while d.handle.snapshot().is_empty() {
        assert!(t.elapsed() < WITHIN);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.stop().await;
    tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut raw))
        .await
        .expect("the stream ends when the daemon stops")
        .unwrap();
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&raw[head_end + 4..])
        .read_to_string(&mut text)
        .expect("a whole gzip stream");
    assert!(text.starts_with(": muster events\n\n"), "{text}");
    assert!(text.contains("event: server_added\ndata: {"), "{text}");
    assert!(text.contains("\"name\":\"Zipped\""), "{text}");
}
