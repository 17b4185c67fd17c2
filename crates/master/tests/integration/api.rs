//! The HTTP API's contract: its OpenAPI document, JSON errors, compression, CORS, the lobby
//! filter and the one address model.

use std::net::SocketAddr;

use muster_master::registry::{Face, GameAddr, PollInfo, Registration, ServerKey, Timestamp};
use muster_proto::limit::SourceKey;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::{Daemon, TempDir, config, get, get_json};

/// A GET with extra header lines; the raw response head and body.
async fn raw_get(addr: SocketAddr, path: &str, headers: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let mut body = buf[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (head, body)
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

#[tokio::test]
async fn openapi_document_and_docs_page() {
    let dir = TempDir::new("api-doc");
    let d = Daemon::start(config(&dir));
    let doc = get_json(d.http(), "/api/v1/openapi.json", 200).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/api/v1/servers",
        "/api/v1/servers/{address}",
        "/api/v1/servers/{address}/history",
        "/healthz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} documented");
    }
    let params = doc["paths"]["/api/v1/servers"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for p in ["protocol", "lobby", "sort", "page", "per_page", "q"] {
        assert!(names.contains(&p), "{p} in {names:?}");
    }
    assert!(doc["components"]["schemas"]["ServerSummary"]["properties"]["address"].is_object());
    let (status, page) = get(d.http(), "/api/docs").await;
    assert_eq!(status, 200);
    assert!(page.contains("/api/v1/openapi.json"));
    d.stop().await;
}

#[tokio::test]
async fn responses_are_compressed_and_cors_follows_the_config() {
    let dir = TempDir::new("api-gzip");
    let mut c = config(&dir);
    c.http.cors_origins = vec!["https://browser.example".to_owned()];
    let d = Daemon::start(c);
    let (head, body) = raw_get(
        d.http(),
        "/api/v1/openapi.json",
        "Accept-Encoding: gzip\r\n",
    )
    .await;
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut plain = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain)
        .unwrap();
    assert!(plain.contains("\"openapi\""));
    let (head, _) = raw_get(
        d.http(),
        "/api/v1/servers",
        "Origin: https://browser.example\r\n",
    )
    .await;
    assert!(
        head.contains("access-control-allow-origin: https://browser.example"),
        "{head}"
    );
    let (head, _) = raw_get(
        d.http(),
        "/api/v1/servers",
        "Origin: https://evil.example\r\n",
    )
    .await;
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    d.stop().await;
}

fn mgmt_record(d: &Daemon, port: u16, lobby_open: bool) {
    let addr: SocketAddr = format!("192.0.2.9:{port}").parse().unwrap();
    let key = ServerKey::new("bomberman", GameAddr::Ip(addr)).with_instance(u64::from(port));
    let reg = Registration {
        key: key.clone(),
        face: Face::Mgmt,
        game_port: Some(port),
        query_addr: None,
        query_protocol: None,
        source: SourceKey::of(addr.ip()),
    };
    let info = PollInfo {
        name: format!("Bomber {port}"),
        game_type: "Standard A+B".into(),
        num_players: 1,
        max_players: 4,
        rules: vec![
            ("isLobbyOpen".into(), lobby_open.to_string()),
            ("gameplayMode".into(), "1".into()),
        ],
        ..PollInfo::default()
    };
    d.handle.write(|r| {
        r.register(reg, Timestamp::now());
        r.set_info(&key, info);
    });
}

#[tokio::test]
async fn lobby_state_is_shown_and_filterable() {
    let dir = TempDir::new("api-lobby");
    let d = Daemon::start(config(&dir));
    mgmt_record(&d, 2000, true);
    mgmt_record(&d, 2001, false);
    d.handle.publish();
    let all = get_json(d.http(), "/api/v1/servers", 200).await;
    assert_eq!(all["servers"][0]["lobby"]["open"], true);
    assert_eq!(all["servers"][0]["lobby"]["mode"], "Standard A+B");
    let open = get_json(d.http(), "/api/v1/servers?lobby=open", 200).await;
    assert_eq!(open["total"], 1);
    assert_eq!(open["servers"][0]["address"], "192.0.2.9:2000");
    let closed = get_json(d.http(), "/api/v1/servers?lobby=closed", 200).await;
    assert_eq!(closed["servers"][0]["address"], "192.0.2.9:2001");
    let bad = get_json(d.http(), "/api/v1/servers?lobby=maybe", 400).await;
    assert_eq!(bad["error"], "lobby must be open or closed");
    d.stop().await;
}

/// A GameSpy server is registered under its query address; once its game port is known the
/// API shows the game address as `address`, the others beside it, and finds it by either.
#[tokio::test]
async fn address_is_the_game_address_for_every_protocol() {
    let dir = TempDir::new("api-address");
    let d = Daemon::start(config(&dir));
    let q: SocketAddr = "192.0.2.7:7778".parse().unwrap();
    let key = ServerKey::new("ut", GameAddr::Ip(q));
    d.handle.write(|r| {
        r.register(
            Registration {
                key: key.clone(),
                face: Face::GameSpy,
                game_port: None,
                query_addr: Some(q),
                query_protocol: Some(muster_proto::Protocol::GameSpy1),
                source: SourceKey::of(q.ip()),
            },
            Timestamp::now(),
        );
    });
    d.handle.publish();
    let s = &get_json(d.http(), "/api/v1/servers", 200).await["servers"][0];
    assert_eq!(s["address"], "192.0.2.7:7778");
    assert_eq!(s["address_is_game"], false, "game port not known yet");
    let info = PollInfo {
        game_port: Some(7777),
        ..PollInfo::default()
    };
    d.handle.update_poll(&key, Some(info), Timestamp::now());
    d.handle.publish();
    let s = &get_json(d.http(), "/api/v1/servers", 200).await["servers"][0];
    assert_eq!(s["address"], "192.0.2.7:7777");
    assert_eq!(s["address_is_game"], true);
    assert_eq!(s["registered_address"], "192.0.2.7:7778");
    assert_eq!(s["query_address"], "192.0.2.7:7778");
    for a in ["192.0.2.7:7777", "192.0.2.7:7778"] {
        let one = get_json(d.http(), &format!("/api/v1/servers/{a}"), 200).await;
        assert_eq!(one["address"], "192.0.2.7:7777");
    }
    d.stop().await;
}
