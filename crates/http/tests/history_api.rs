//! The history routes and the badge over a real loopback socket: a registry with a few
//! servers, a history in memory with rows written through the store's own calls.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use muster_core::MasterHandle;
use muster_core::poll::PollSample;
use muster_core::registry::{
    Face, GameAddr, PollFields, PollInfo, Registration, RegistryConfig, ServerKey, Timestamp,
};
use muster_core::store::NullStore;
use muster_http::api::history::{HistoryApi, router, server_history};
use muster_http::web::History;
use muster_http::web::history::SqliteHistory;
use muster_proto::limit::SourceKey;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn key(game: &str, addr: &str) -> ServerKey {
    ServerKey::new(game, GameAddr::parse(addr).unwrap())
}

/// Lists `addr` under `game`; with `players`, as answering under `name`.
fn list(h: &MasterHandle, game: &str, addr: &str, answer: Option<(&str, u32)>, now: Timestamp) {
    let sa: SocketAddr = addr.parse().unwrap();
    let k = key(game, addr);
    h.register(
        Registration {
            key: k.clone(),
            face: Face::GameSpy,
            game_port: Some(sa.port()),
            query_addr: Some(sa),
            query_protocol: Some(muster_proto::Protocol::GameSpy1),
            source: SourceKey::of(sa.ip()),
        },
        now,
    );
    let info = answer.map(|(name, n)| {
        PollInfo::from(PollFields {
            name: name.into(),
            num_players: n,
            max_players: 16,
            ..PollFields::default()
        })
    });
    h.update_poll(&k, info, now);
}

fn sample(game: &str, addr: &str, at: Timestamp, n: Option<u32>) -> PollSample {
    PollSample {
        key: key(game, addr),
        at,
        ok: n.is_some(),
        num_players: n,
        max_players: n.map(|_| 16),
        ping: None,
    }
}

struct Served {
    addr: SocketAddr,
    history: History,
    handle: MasterHandle,
    now: Timestamp,
}

/// The routes as the daemon mounts them, on 127.0.0.1.
async fn serve() -> Served {
    let now = Timestamp::now();
    let (handle, _) =
        MasterHandle::open(RegistryConfig::default(), Box::new(NullStore), now).unwrap();
    let history = History::new(
        Box::new(SqliteHistory::in_memory().unwrap()),
        Duration::from_secs(24 * 3600),
    );
    let app = Router::new()
        .route(
            "/api/v1/servers/{address}/history",
            get(server_history).with_state(HistoryApi::new(history.clone(), handle.clone())),
        )
        .merge(router(history.clone(), handle.clone()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    Served {
        addr,
        history,
        handle,
        now,
    }
}

/// Status, lower-cased head and body of `GET path`.
async fn get_raw(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

async fn get_json(addr: SocketAddr, path: &str, want: u16) -> serde_json::Value {
    let (status, _, body) = get_raw(addr, path).await;
    assert_eq!(status, want, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);

fn before(now: Timestamp, d: Duration) -> Timestamp {
    Timestamp(now.0 - u64::try_from(d.as_millis()).unwrap())
}

#[tokio::test]
async fn a_servers_history_at_each_range() {
    let s = serve().await;
    let a = "127.0.0.1:7777";
    list(&s.handle, "ut2", a, Some(("one", 3)), s.now);
    s.handle.publish();
    s.history
        .append(&[
            sample("ut2", a, before(s.now, Duration::from_secs(600)), Some(4)),
            sample("ut2", a, before(s.now, 30 * HOUR), Some(7)),
            sample("ut2", a, before(s.now, 10 * 24 * HOUR), Some(2)),
            sample("ut2", a, before(s.now, 100 * 24 * HOUR), None),
        ])
        .unwrap();
    let path = format!("/api/v1/servers/{a}/history");
    // Without range: the page's array, the retention (24 h) of minute points.
    let old = get_json(s.addr, &path, 200).await;
    let old = old.as_array().unwrap();
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!(
        (
            &old[0]["num_players"],
            &old[0]["max_players"],
            &old[0]["ok"]
        ),
        (&4.into(), &16.into(), &true.into())
    );
    // 48h: minute points, two of them.
    let m = get_json(s.addr, &format!("{path}?range=48h"), 200).await;
    assert_eq!((&m["range"], &m["step"]), (&"48h".into(), &60.into()));
    let pts = m["points"].as_array().unwrap();
    assert_eq!(pts.len(), 2);
    assert_eq!(pts[0]["max"], 7);
    assert_eq!(pts[1]["avg"], 4.0);
    // 30d: hourly rollups, three; 1y: four, the oldest down.
    let d = get_json(s.addr, &format!("{path}?range=30d"), 200).await;
    assert_eq!(d["step"], 3600);
    assert_eq!(d["points"].as_array().unwrap().len(), 3);
    let y = get_json(s.addr, &format!("{path}?range=1y&game=UT2"), 200).await;
    let pts = y["points"].as_array().unwrap();
    assert_eq!(pts.len(), 4);
    assert_eq!(
        (&pts[0]["answered"], &pts[0]["samples"]),
        (&0.into(), &1.into())
    );
    assert!(pts[0]["avg"].is_null());
    assert!(
        pts.windows(2)
            .all(|w| w[0]["at"].as_u64() < w[1]["at"].as_u64())
    );
    // A range it does not know: 400 naming the three.
    let e = get_json(s.addr, &format!("{path}?range=2d"), 400).await;
    assert!(e["error"].as_str().unwrap().contains("48h, 30d, 1y"), "{e}");
    let e = get_json(s.addr, &format!("{path}?rnage=1y"), 400).await;
    assert!(e["error"].as_str().unwrap().contains("rnage"), "{e}");
    get_json(s.addr, "/api/v1/servers/nonsense/history?range=1y", 400).await;
}

#[tokio::test]
async fn games_now_and_over_time() {
    let s = serve().await;
    list(&s.handle, "ut2", "127.0.0.1:1", Some(("a", 3)), s.now);
    list(&s.handle, "ut2", "127.0.0.1:2", Some(("b", 5)), s.now);
    list(&s.handle, "ut2", "127.0.0.1:3", None, s.now);
    list(
        &s.handle,
        "quake3arena",
        "127.0.0.1:4",
        Some(("c", 1)),
        s.now,
    );
    s.handle.publish();
    let g = get_json(s.addr, "/api/v1/games", 200).await;
    let g = g.as_array().unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g[0]["game"], "ut2", "busiest first");
    assert_eq!(
        (&g[0]["servers"], &g[0]["up"], &g[0]["players"]),
        (&3.into(), &2.into(), &8.into())
    );
    assert_eq!(g[1]["name"], "Quake III Arena");
    // Two minutes closed with two ut2 servers live, one down.
    let t = before(s.now, Duration::from_secs(300));
    s.history
        .append(&[
            sample("ut2", "127.0.0.1:1", t, Some(3)),
            sample("ut2", "127.0.0.1:2", t, Some(5)),
            sample("ut2", "127.0.0.1:3", t, None),
        ])
        .unwrap();
    s.history
        .close_minutes(t.plus(Duration::from_secs(65)))
        .unwrap();
    s.history
        .close_minutes(t.plus(Duration::from_secs(125)))
        .unwrap();
    let h = get_json(s.addr, "/api/v1/games/UT2/history", 200).await;
    assert_eq!((&h["range"], &h["step"]), (&"48h".into(), &60.into()));
    let pts = h["points"].as_array().unwrap();
    assert_eq!(pts.len(), 2, "{h}");
    assert_eq!(
        (
            &pts[0]["servers"],
            &pts[0]["up_max"],
            &pts[0]["players_max"]
        ),
        (&3.into(), &2.into(), &8.into())
    );
    let y = get_json(s.addr, "/api/v1/games/ut2/history?range=1y", 200).await;
    let pts = y["points"].as_array().unwrap();
    assert!(!pts.is_empty() && pts.len() <= 2, "one or two hours: {y}");
    assert_eq!(pts.last().unwrap()["players_avg"], 8.0);
    let none = get_json(s.addr, "/api/v1/games/nothing/history?range=30d", 200).await;
    assert!(none["points"].as_array().unwrap().is_empty());
    get_json(s.addr, "/api/v1/games/ut2/history?range=week", 400).await;
    get_json(
        s.addr,
        &format!("/api/v1/games/{}/history", "x".repeat(65)),
        400,
    )
    .await;
}

#[tokio::test]
async fn badges_are_well_formed_svg_with_the_name_escaped() {
    let s = serve().await;
    let name = "<Clan & \"Friends\"> 'CTF' \u{1} a very long name that goes on";
    list(&s.handle, "ut2", "127.0.0.1:5", Some((name, 12)), s.now);
    list(&s.handle, "ut2", "127.0.0.1:6", Some(("gone", 1)), s.now);
    s.handle
        .update_poll(&key("ut2", "127.0.0.1:6"), None, s.now);
    s.handle.publish();
    let (status, head, body) = get_raw(s.addr, "/badge/127.0.0.1:5.svg").await;
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("content-type: image/svg+xml"), "{head}");
    assert!(head.contains("cache-control: public, max-age=60"), "{head}");
    let doc = roxmltree::Document::parse(&body).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert_eq!(texts[1], "12/16");
    assert!(
        texts[0].starts_with("<Clan & \"Friends\"> 'CTF'"),
        "{texts:?}"
    );
    assert!(texts[0].ends_with('…'), "cut: {texts:?}");
    assert_eq!(texts[0].chars().count(), 32);
    assert!(
        body.contains("&lt;Clan &amp; &quot;Friends&quot;&gt;"),
        "{body}"
    );
    // Down: red, "down".
    let (status, _, body) = get_raw(s.addr, "/badge/127.0.0.1:6.svg").await;
    assert_eq!(status, 200);
    let doc = roxmltree::Document::parse(&body).unwrap();
    assert!(doc.descendants().any(|n| n.text() == Some("down")));
    assert!(body.contains("#c43c3c"));
    // Unknown: 404, a grey badge still.
    let (status, head, body) = get_raw(s.addr, "/badge/127.0.0.1:9.svg").await;
    assert_eq!(status, 404);
    assert!(head.contains("image/svg+xml"));
    let doc = roxmltree::Document::parse(&body).unwrap();
    assert!(doc.descendants().any(|n| n.text() == Some("unknown")));
    assert!(body.contains("#8a8a8a"));
    // Not an address, or no .svg: 400.
    assert_eq!(get_raw(s.addr, "/badge/127.0.0.1:5.png").await.0, 400);
    assert_eq!(get_raw(s.addr, "/badge/x.svg").await.0, 400);
}

#[tokio::test]
async fn the_overview_page_is_served_for_every_game_and_one() {
    let s = serve().await;
    for path in ["/games", "/games/ut2004"] {
        let (status, head, body) = get_raw(s.addr, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(head.contains("content-type: text/html"), "{head}");
        assert!(head.contains("cache-control: no-cache"), "{head}");
        // The page reads the routes this crate serves.
        for api in [
            "/api/v1/games",
            "/history?range=",
            "/badge/",
            "sort=players",
        ] {
            assert!(body.contains(api), "{path} uses {api}");
        }
    }
}
