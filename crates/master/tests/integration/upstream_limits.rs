//! What an upstream that misbehaves can make this master do, over loopback: fake upstreams
//! serve oversized pages, totals and documents, redirects and endless `429`s; the pull is
//! refused or bounded, and the records held are counted (not the memory).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use muster_master::upstream::api::PER_PAGE;
use muster_master::upstream::download::MAX_DOCUMENT_BYTES;
use muster_master::upstream::fetch::MAX_LISTED;
use muster_master::upstream::settings::{UpstreamConfig, UpstreamKind};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::TempDir;
use crate::federation::{learning_master, upstream_with};

/// An HTTP/1.1 server on loopback: `answer(n, path)` gives the whole response to the `n`th
/// request (from 1); it counts the requests it got.
struct FakeHttp {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for FakeHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHttp {
    async fn start(answer: impl Fn(usize, &str) -> Vec<u8> + Send + Sync + 'static) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&requests);
        let answer = Arc::new(answer);
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (count, answer) = (Arc::clone(&count), Arc::clone(&answer));
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    // One request per connection: the answer closes it.
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&got).into_owned();
                    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let _ = s.write_all(&answer(n, &path)).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        Self {
            addr,
            requests,
            task,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

fn response(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn json(body: &str) -> Vec<u8> {
    response(
        "200 OK",
        "content-type: application/json\r\n",
        body.as_bytes(),
    )
}

/// One record of the Muster API, of a management server (never learned: nothing is queried).
const MGMT_RECORD: &str = r#"{"address":"127.0.0.1:2000","registered_address":"127.0.0.1:2000","query_address":null,"game":"g","protocol":"mgmt","query_protocol":null}"#;

fn page(total: u64, n: usize, record: &str) -> String {
    let servers = vec![record; n].join(",");
    format!(r#"{{"last_event_id":1,"total":{total},"servers":[{servers}]}}"#)
}

fn config(kind: UpstreamKind, address: String) -> UpstreamConfig {
    let mut c = UpstreamConfig::new(kind, &address);
    c.name = Some("up".into());
    c
}

fn records(b: &crate::Daemon) -> usize {
    b.handle.with_registry(|r| r.iter().count())
}

#[tokio::test]
async fn a_muster_upstream_claiming_a_huge_total_is_refused_at_its_first_page() {
    let up = FakeHttp::start(|_, _| json(&page(1_000_000_000, PER_PAGE, MGMT_RECORD))).await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    let mut u = upstream_with(
        &b,
        config(UpstreamKind::Muster, format!("http://{}", up.addr)),
    );
    let e = u.pull_once(&b.handle).await.unwrap_err();
    let text = muster_master::error_chain(&e);
    assert!(text.contains("claimed total"), "{text}");
    assert_eq!(up.requests(), 1, "no page after the first");
    assert_eq!(records(&b), 0);
    b.stop().await;
}

#[tokio::test]
async fn a_muster_page_larger_than_asked_is_refused() {
    let up = FakeHttp::start(|_, _| json(&page(501, PER_PAGE + 1, MGMT_RECORD))).await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    let mut u = upstream_with(
        &b,
        config(UpstreamKind::Muster, format!("http://{}", up.addr)),
    );
    let e = u.pull_once(&b.handle).await.unwrap_err();
    let text = muster_master::error_chain(&e);
    assert!(text.contains("more than 500"), "{text}");
    b.stop().await;
}

#[tokio::test]
async fn a_muster_upstream_paging_slowly_is_read_for_the_pages_its_total_needs() {
    // A total that needs two pages of 500, served one record a page.
    let up = FakeHttp::start(|_, _| json(&page(1000, 1, MGMT_RECORD))).await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    let mut u = upstream_with(
        &b,
        config(UpstreamKind::Muster, format!("http://{}", up.addr)),
    );
    u.pull_once(&b.handle).await.unwrap();
    assert_eq!(up.requests(), 3, "two pages and one for a list that grew");
    b.stop().await;
}

#[tokio::test]
async fn a_muster_upstream_answering_429_forever_is_given_up_on_at_the_pull_timeout() {
    let up =
        FakeHttp::start(|_, _| response("429 Too Many Requests", "retry-after: 1\r\n", b"")).await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    let mut u = upstream_with(
        &b,
        config(UpstreamKind::Muster, format!("http://{}", up.addr)),
    )
    .with_timing(Duration::from_millis(1500), Duration::from_millis(300));
    let e = u.pull_once(&b.handle).await.unwrap_err();
    let text = muster_master::error_chain(&e);
    assert!(text.contains("pull took longer than"), "{text}");
    assert!(up.requests() < 30, "not every retry was waited out");
    b.stop().await;
}

#[tokio::test]
async fn a_ddnet_document_over_the_limits_is_refused() {
    // More servers than a pull may hold, each a few bytes (the whole is a few MiB).
    let many = {
        let one = r#"{"addresses":["tw-0.6+udp://127.0.0.1:8303"]}"#;
        format!(r#"{{"servers":[{}]}}"#, vec![one; MAX_LISTED + 1].join(","))
    };
    assert!(many.len() < MAX_DOCUMENT_BYTES);
    let huge = vec![b' '; MAX_DOCUMENT_BYTES + 1];
    let up = FakeHttp::start(move |_, path| match path {
        "/many.json" => json(&many),
        _ => response("200 OK", "", &huge),
    })
    .await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    for (path, why) in [
        ("many.json", "more than 65536"),
        ("huge.json", "larger than 16777216 bytes"),
    ] {
        let url = format!("http://{}/{path}", up.addr);
        let mut u = upstream_with(&b, config(UpstreamKind::Ddnet, url));
        let e = u.pull_once(&b.handle).await.unwrap_err();
        let text = muster_master::error_chain(&e);
        assert!(text.contains(why), "{path}: {text}");
        assert_eq!(records(&b), 0);
    }
    b.stop().await;
}

#[tokio::test]
async fn a_gamespy_sync_listing_too_many_servers_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                s.write_all(b"\\basic\\\\secure\\ABCDEF").await.unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 512];
                while got.windows(7).filter(|w| *w == b"\\final\\").count() < 2 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let mut out = b"\\ut\\".to_vec();
                for i in 0..=MAX_LISTED {
                    let [a, b] = u16::try_from(i / 250 + 1).unwrap().to_be_bytes();
                    let port = 1 + i % 250;
                    out.extend_from_slice(format!("127.{a}.{b}.1:{port} ").as_bytes());
                }
                out.extend_from_slice(b"\\final\\");
                let _ = s.write_all(&out).await;
            });
        }
    });
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    let mut c = config(UpstreamKind::Gamespy, addr.to_string());
    c.games = vec!["ut".into()];
    let mut u = upstream_with(&b, c);
    let e = u.pull_once(&b.handle).await.unwrap_err();
    let text = muster_master::error_chain(&e);
    assert!(text.contains("more than 65536 servers"), "{text}");
    assert_eq!(records(&b), 0);
    task.abort();
    b.stop().await;
}

#[tokio::test]
async fn redirects_from_url_upstreams_are_refused_not_followed() {
    let target = FakeHttp::start(|_, _| json(r#"{"servers":[]}"#)).await;
    let to = format!(
        "location: http://{}/admin/delete-everything?confirm=1\r\n",
        target.addr
    );
    let up = FakeHttp::start(move |_, _| response("302 Found", &to, b"")).await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    for (kind, address) in [
        (
            UpstreamKind::Ddnet,
            format!("http://{}/ddnet/15/servers.json", up.addr),
        ),
        (
            UpstreamKind::Ut2003Text,
            format!("http://{}/serverlist/full-all.txt", up.addr),
        ),
        (UpstreamKind::Muster, format!("http://{}", up.addr)),
    ] {
        let mut u = upstream_with(&b, config(kind, address));
        let e = u.pull_once(&b.handle).await.unwrap_err();
        let text = muster_master::error_chain(&e);
        assert!(text.contains("302"), "{}: {text}", kind.name());
    }
    assert_eq!(up.requests(), 3);
    assert_eq!(target.requests(), 0, "the redirect was never followed");
    b.stop().await;
}

#[tokio::test]
async fn local_servers_are_learned_by_the_address_connected_to_not_a_separate_lookup() {
    // The upstream's host name resolves nowhere for the system resolver; the fetch connects
    // to loopback (pinned). Listing loopback servers is allowed because the list came from
    // loopback; a lookup of the name apart from the fetch would have said otherwise.
    let listed = r#"{"servers":[{"addresses":["tw-0.6+udp://127.0.0.1:9"]}]}"#;
    let up = FakeHttp::start(move |_, _| json(listed)).await;
    let dir = TempDir::new("limits");
    let b = learning_master(&dir);
    let url = format!("http://upstream.invalid:{}/servers.json", up.addr.port());
    let mut u = upstream_with(&b, config(UpstreamKind::Ddnet, url))
        .with_pin("upstream.invalid", up.addr)
        .unwrap();
    let r = u.pull_once(&b.handle).await.unwrap();
    assert_eq!((r.local, r.listed, r.queried), (0, 1, 1), "{r:?}");
    b.stop().await;
}
