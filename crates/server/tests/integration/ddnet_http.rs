//! An emulated DDNet server's HTTP registration against a recording stand-in master on
//! loopback: the goodbye (`Action: delete` for every registered stream) goes out when the farm
//! stops, and every request without a body says `Content-Length: 0`, as DDNet's own client
//! does (DDNet's real master answers 411 Length Required otherwise). The real master is run
//! in the conformance tests; this stand-in records the exact requests.

use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::respond::RegistrarEvent;
use muster_server::farm::FarmSpec;
use muster_server::{Limits, endpoints, run};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One request as the stand-in master read it: headers lower-cased, in order.
#[derive(Debug, Clone)]
struct Recorded {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads HTTP/1.1 requests from one connection, answers each `{"status":"success"}`, and
/// passes them on; a request without `Content-Length` is answered 411, as DDNet's master does.
async fn serve_connection(stream: TcpStream, seen: mpsc::UnboundedSender<Recorded>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if read.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let mut body = vec![0; length.unwrap_or(0)];
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        let (status, answer) = match length {
            Some(_) => ("200 OK", r#"{"status":"success"}"#),
            None => ("411 Length Required", r#"{"status":"error"}"#),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        let _ = seen.send(Recorded { headers, body });
        if write.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn stand_in_master() -> (SocketAddr, mpsc::UnboundedReceiver<Recorded>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, tx.clone()));
        }
    });
    (addr, rx)
}

/// Upper bound for one step on a loaded machine; the steps end on events, not on this.
const STEP: Duration = Duration::from_secs(20);

async fn next(rx: &mut mpsc::UnboundedReceiver<Recorded>) -> Recorded {
    tokio::time::timeout(STEP, rx.recv())
        .await
        .expect("a request in time")
        .expect("the master runs")
}

#[tokio::test]
async fn ddnet_registration_says_goodbye_on_stop_with_content_length_on_every_request() {
    let (master, mut requests) = stand_in_master().await;
    let url = format!("http://{master}/ddnet/15/register");
    let farm = FarmSpec::from_toml(&format!(
        "[[server]]\nprotocol = \"teeworlds\"\nport = 0\nname = \"Goodbye\"\nmasters = [\"ddnet:{url}\"]\n"
    ))
    .unwrap();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let running = run::start(
        farm.expand().unwrap(),
        Limits::unlimited(),
        Some(events_tx),
        endpoints::endpoint,
    )
    .await
    .unwrap();
    // Both streams (0.6 and 0.7) register.
    let mut registered = 0;
    while registered < 2 {
        match tokio::time::timeout(STEP, events.recv()).await.unwrap() {
            Some(RegistrarEvent::Registered { .. }) => registered += 1,
            Some(RegistrarEvent::Failed { master, reason }) => panic!("{master}: {reason}"),
            Some(_) => {}
            None => panic!("events closed"),
        }
    }
    let mut before = Vec::new();
    while let Ok(r) = requests.try_recv() {
        before.push(r);
    }
    assert!(before.len() >= 2, "{before:?}");
    running.stop().await;
    // The goodbye: one delete per registered stream, in stream order.
    let mut deletes = Vec::new();
    while deletes.len() < 2 {
        let r = next(&mut requests).await;
        if r.header("action") == Some("delete") {
            deletes.push(r);
        }
    }
    let addresses: Vec<&str> = deletes
        .iter()
        .map(|r| r.header("address").unwrap())
        .collect();
    assert!(addresses[0].starts_with("tw-0.6+udp://connecting-address.invalid:"));
    assert!(addresses[1].starts_with("tw-0.7+udp://connecting-address.invalid:"));
    for r in before.iter().chain(&deletes) {
        let expected = r.body.len().to_string();
        assert_eq!(r.header("content-length"), Some(expected.as_str()), "{r:?}");
    }
    assert!(
        before.iter().chain(&deletes).any(|r| r.body.is_empty()),
        "bodiless requests were checked"
    );
    let mut unregistered = false;
    while let Ok(e) = events.try_recv() {
        unregistered |= matches!(e, RegistrarEvent::Unregistered { .. });
    }
    assert!(unregistered, "the registrar reported its goodbye");
}
