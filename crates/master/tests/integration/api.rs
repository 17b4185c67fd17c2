//! The HTTP API's contract: its OpenAPI document, JSON errors, compression, CORS, the lobby
//! filter and the one address model.

use std::net::SocketAddr;

use muster_master::registry::{
    Face, GameAddr, PollFields, PollInfo, Registration, ServerKey, Timestamp,
};
use muster_proto::limit::SourceKey;

use crate::{Daemon, TempDir, config, exchange, get, get_json};

/// A GET with extra header lines (each ended by `\n`); the head, lowercased, and the body.
async fn raw_get(addr: SocketAddr, path: &str, headers: &str) -> (String, Vec<u8>) {
    let head = format!("GET {path} HTTP/1.1\nHost: m\nConnection: close\n{headers}\n");
    let r = exchange(addr, &head, b"").await;
    (r.head, r.body)
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
    let (head, body) = raw_get(d.http(), "/api/v1/openapi.json", "Accept-Encoding: gzip\n").await;
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut plain = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain)
        .unwrap();
    assert!(plain.contains("\"openapi\""));
    let (head, _) = raw_get(
        d.http(),
        "/api/v1/servers",
        "Origin: https://browser.example\n",
    )
    .await;
    assert!(
        head.contains("access-control-allow-origin: https://browser.example"),
        "{head}"
    );
    let (head, _) = raw_get(
        d.http(),
        "/api/v1/servers",
        "Origin: https://evil.example\n",
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
    let info = PollInfo::from(PollFields {
        name: format!("Bomber {port}").into(),
        game_type: "Standard A+B".into(),
        num_players: 1,
        max_players: 4,
        rules: muster_master::registry::Rules::new([
            ("isLobbyOpen", lobby_open.to_string().as_str()),
            ("gameplayMode", "1"),
        ]),
        ..PollFields::default()
    });
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
    let info = PollInfo::from(PollFields {
        game_port: Some(7777),
        ..PollFields::default()
    });
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

/// Registers `key` through `face` with `info`, not pollable (no query address).
fn record(d: &Daemon, key: &ServerKey, face: Face, game_port: u16, info: PollInfo) {
    let reg = Registration {
        key: key.clone(),
        face,
        game_port: Some(game_port),
        query_addr: None,
        query_protocol: None,
        source: SourceKey::of(key.addr.ip().unwrap()),
    };
    d.handle.write(|r| {
        r.register(reg, Timestamp::now());
        r.set_info(key, info);
    });
}

fn ip_key(game: &str, addr: &str) -> ServerKey {
    ServerKey::new(game, GameAddr::Ip(addr.parse().unwrap()))
}

/// `ddnet.locations` (a CSV of networks): every server object gets its `location`, the list
/// filters by `region` (a continent or a country), `servers.json` entries carry it as DDNet's
/// master writes it, and `/api/v1/info` counts the networks.
#[tokio::test]
async fn locations_give_location_region_filter_and_servers_json_location() {
    let dir = TempDir::new("api-locations");
    let mut c = config(&dir);
    c.poller.enabled = false;
    c.ddnet.locations = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/locations.csv"
    )
    .into();
    let d = Daemon::start(c);
    let info = |name: &str| {
        PollInfo::from(PollFields {
            name: name.into(),
            map: "dm1".into(),
            num_players: 1,
            max_players: 8,
            ..PollFields::default()
        })
    };
    record(
        &d,
        &ip_key("ut", "198.51.100.5:7778"),
        Face::GameSpy,
        7777,
        info("de"),
    );
    record(
        &d,
        &ip_key("ut", "198.51.100.200:7778"),
        Face::GameSpy,
        7777,
        info("fr"),
    );
    let tw = ip_key("teeworlds", "203.0.113.9:8303");
    record(&d, &tw, Face::Teeworlds06, 8303, info("us"));
    record(
        &d,
        &ip_key("ut", "[2001:db8:77::1]:7778"),
        Face::GameSpy,
        7777,
        info("jp"),
    );
    record(
        &d,
        &ip_key("ut", "192.0.2.44:7778"),
        Face::GameSpy,
        7777,
        info("nowhere"),
    );
    d.handle.publish();

    let all = get_json(d.http(), "/api/v1/servers?sort=name", 200).await;
    let where_: Vec<(String, Option<String>)> = all["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let loc = s
                .get("location")
                .and_then(|l| l.as_str())
                .map(str::to_owned);
            (s["name"].as_str().unwrap().to_owned(), loc)
        })
        .collect();
    let want = [
        ("de", Some("eu:de")),
        ("fr", Some("eu:fr")),
        ("jp", Some("as:jp")),
        ("nowhere", None),
        ("us", Some("na:us")),
    ];
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(n, l)| ((*n).to_owned(), l.map(str::to_owned)))
        .collect();
    assert_eq!(
        where_, want,
        "a server outside the table has no `location` key"
    );
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let eu = get_json(d.http(), "/api/v1/servers?region=eu&sort=name", 200).await;
    assert_eq!(names(&eu), ["de", "fr"]);
    let de = get_json(d.http(), "/api/v1/servers?region=EU:DE", 200).await;
    assert_eq!(names(&de), ["de"]);
    let none = get_json(d.http(), "/api/v1/servers?region=oc", 200).await;
    assert_eq!(none["total"], 0);
    let bad = get_json(d.http(), "/api/v1/servers?region=eu/west", 400).await;
    assert_eq!(
        bad["error"],
        "region must be a location such as eu or eu:de"
    );
    let one = get_json(d.http(), "/api/v1/servers/203.0.113.9:8303", 200).await;
    assert_eq!(one["location"], "na:us");

    let (status, doc) = get(d.http(), "/ddnet/15/servers.json").await;
    assert_eq!(status, 200);
    assert!(
        doc.contains(
            r#"{"addresses":["tw-0.6+udp://203.0.113.9:8303"],"location":"na:us","info":{"#
        ),
        "{doc}"
    );
    let info = get_json(d.http(), "/api/v1/info", 200).await;
    assert_eq!(info["locations"], 4);
    d.stop().await;
}

/// Players say whether they are bots where the protocol does (absent where it does not); rules
/// keep their keys and get display names where the protocol has them.
#[tokio::test]
async fn detail_tells_bots_and_names_rules() {
    let dir = TempDir::new("api-bots");
    let mut c = config(&dir);
    c.poller.enabled = false;
    let d = Daemon::start(c);
    let key = ip_key("teeworlds", "192.0.2.50:8303");
    let player = |name: &str, bot| muster_master::registry::PollPlayer::new(name).with_bot(bot);
    record(
        &d,
        &key,
        Face::Teeworlds07,
        8303,
        PollInfo::from(PollFields {
            num_players: 2,
            max_players: 8,
            players: vec![
                player("human", Some(false)),
                player("robot", Some(true)),
                player("unknown", None),
            ]
            .into(),
            rules: muster_master::registry::Rules::new([
                ("AdminEMail", "a@example.org"),
                ("mymod", "1"),
            ]),
            ..PollFields::default()
        }),
    );
    d.handle.publish();
    let one = get_json(d.http(), "/api/v1/servers/192.0.2.50:8303", 200).await;
    let p = one["players"].as_array().unwrap();
    assert_eq!(p[0]["bot"], false);
    assert_eq!(p[1]["bot"], true);
    assert!(p[2].get("bot").is_none(), "{}", p[2]);
    assert_eq!(one["rules"]["AdminEMail"], "a@example.org");
    assert_eq!(
        one["rule_names"],
        serde_json::json!({"AdminEMail": "Admin E-Mail"})
    );
    let doc = get_json(d.http(), "/api/v1/openapi.json", 200).await;
    let detail = &doc["components"]["schemas"]["ServerDetail"];
    assert!(
        detail.to_string().contains("rule_names"),
        "documented: {detail}"
    );
    d.stop().await;
}

/// `/api/v1/info` lists every bound face with its real address, for the page's empty state.
#[tokio::test]
async fn info_lists_the_bound_faces() {
    let dir = TempDir::new("api-info");
    let mut c = config(&dir);
    c.listen.mgmt = crate::loopback();
    c.listen.gamespy_udp = crate::loopback();
    c.poller.enabled = false;
    let d = Daemon::start(c);
    let info = get_json(d.http(), "/api/v1/info", 200).await;
    let faces: Vec<(String, String, String)> = info["faces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["face"].as_str().unwrap().to_owned(),
                f["transport"].as_str().unwrap().to_owned(),
                f["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let bound: Vec<(String, String, String)> = d
        .bound
        .iter()
        .map(|b| {
            (
                b.face.to_owned(),
                b.transport.to_owned(),
                b.addr.to_string(),
            )
        })
        .collect();
    assert_eq!(faces, bound);
    assert!(faces.iter().any(|f| f.0 == "mgmt"));
    assert_eq!(info["ddnet_register_path"], "/ddnet/15/register");
    assert_eq!(info["poller"], false);
    assert_eq!(info["history"], true);
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    let doc = get_json(d.http(), "/api/v1/openapi.json", 200).await;
    assert!(doc["paths"]["/api/v1/info"].is_object());
    d.stop().await;
}

/// The history at `path` once it has a sample: the feeder scans every 2 s and the writer
/// flushes every second.
async fn first_history(http: SocketAddr, path: &str) -> serde_json::Value {
    let t = std::time::Instant::now();
    loop {
        let h = get_json(http, path, 200).await;
        if !h.as_array().unwrap().is_empty() {
            return h;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(15),
            "no sample at {path}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Servers the poller does not poll (here: all of them, it is off; a management server would
/// be so with it on) get history samples from what they report, and the history route finds
/// a server by the address the list shows as well as by the registered one.
#[tokio::test]
async fn history_of_unpolled_servers_by_either_address() {
    let dir = TempDir::new("api-history");
    let mut c = config(&dir);
    c.poller.enabled = false;
    let d = Daemon::start(c);
    let key = ip_key("ut", "192.0.2.60:7778");
    record(
        &d,
        &key,
        Face::GameSpy,
        7777,
        PollInfo::from(PollFields {
            num_players: 3,
            max_players: 16,
            ..PollFields::default()
        }),
    );
    mgmt_record(&d, 2060, true);
    d.handle.publish();
    let s = &get_json(d.http(), "/api/v1/servers?protocol=gamespy", 200).await["servers"][0];
    assert_eq!(s["address"], "192.0.2.60:7777");
    let history = first_history(d.http(), "/api/v1/servers/192.0.2.60:7777/history").await;
    assert_eq!(history[0]["num_players"], 3);
    assert_eq!(history[0]["max_players"], 16);
    assert_eq!(history[0]["ok"], true);
    let by_registered = get_json(d.http(), "/api/v1/servers/192.0.2.60:7778/history", 200).await;
    assert_eq!(by_registered, history);
    let by_game = get_json(
        d.http(),
        "/api/v1/servers/192.0.2.60:7777/history?game=ut",
        200,
    )
    .await;
    assert_eq!(by_game, history);
    // Its first sample may come from a later scan than the GameSpy server's.
    let mgmt = first_history(d.http(), "/api/v1/servers/192.0.2.9:2060/history").await;
    assert_eq!(mgmt[0]["num_players"], 1);
    assert_eq!(mgmt[0]["max_players"], 4);
    d.stop().await;
}

/// A misspelt parameter is refused, naming it, on every route that takes a query: the
/// page's old `nonempty` filtered nothing and nobody noticed.
#[tokio::test]
async fn unknown_query_parameters_are_refused_by_name() {
    let dir = TempDir::new("api-unknown-params");
    let mut c = config(&dir);
    c.poller.enabled = false;
    let d = Daemon::start(c);
    mgmt_record(&d, 2100, true);
    d.handle.publish();
    let bad = get_json(d.http(), "/api/v1/servers?nonempty=1", 400).await;
    let e = bad["error"].as_str().unwrap();
    assert!(e.contains("\"nonempty\"") && e.contains("non_empty"), "{e}");
    let two = get_json(d.http(), "/api/v1/servers?game=x&sortt=name&pg=2", 400).await;
    let e = two["error"].as_str().unwrap();
    assert!(e.contains("\"sortt\", \"pg\""), "{e}");
    let ok = get_json(d.http(), "/api/v1/servers?non_empty=1&not_full=1", 200).await;
    assert_eq!(ok["total"], 1);
    let addr = "192.0.2.9:2100";
    for path in [
        format!("/api/v1/servers/{addr}?gmae=bomberman"),
        format!("/api/v1/servers/{addr}/history?from=0"),
        "/api/v1/events?last_id=3".to_owned(),
    ] {
        let v = get_json(d.http(), &path, 400).await;
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("unknown query parameter"),
            "{path}: {v}"
        );
    }
    let one = get_json(
        d.http(),
        &format!("/api/v1/servers/{addr}?game=bomberman"),
        200,
    )
    .await;
    assert_eq!(one["address"], addr);
    let history = get_json(
        d.http(),
        &format!("/api/v1/servers/{addr}/history?game=bomberman"),
        200,
    )
    .await;
    assert!(history.is_array());
    d.stop().await;
}

/// Two games listed at one address keep their samples apart: the history of the address
/// alone would merge them, so it asks for `?game=`.
#[tokio::test]
async fn history_of_an_ambiguous_address_asks_for_the_game() {
    let dir = TempDir::new("api-history-ambiguous");
    let mut c = config(&dir);
    c.poller.enabled = false;
    let d = Daemon::start(c);
    for (game, players) in [("ut", 3), ("unreal", 5)] {
        record(
            &d,
            &ip_key(game, "192.0.2.61:7778"),
            Face::GameSpy,
            7777,
            PollInfo::from(PollFields {
                num_players: players,
                max_players: 16,
                ..PollFields::default()
            }),
        );
    }
    d.handle.publish();
    let ut = first_history(d.http(), "/api/v1/servers/192.0.2.61:7777/history?game=ut").await;
    let unreal = first_history(
        d.http(),
        "/api/v1/servers/192.0.2.61:7777/history?game=UNREAL",
    )
    .await;
    assert!(ut.as_array().unwrap().iter().all(|p| p["num_players"] == 3));
    assert!(
        unreal
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["num_players"] == 5)
    );
    for a in ["192.0.2.61:7777", "192.0.2.61:7778"] {
        let v = get_json(d.http(), &format!("/api/v1/servers/{a}/history"), 400).await;
        let e = v["error"].as_str().unwrap();
        assert!(e.contains("?game=") && e.contains("unreal, ut"), "{e}");
    }
    d.stop().await;
}

/// Every server object has its game key and, beside it, the game's display name; the
/// `game` filter takes the key.
#[tokio::test]
async fn game_key_and_display_name() {
    let dir = TempDir::new("api-game-name");
    let mut c = config(&dir);
    c.poller.enabled = false;
    let d = Daemon::start(c);
    let games = [
        ("ddnet", Face::DdnetHttp, "192.0.2.70:8303", "DDNet"),
        (
            "serioussamse",
            Face::GameAgent,
            "192.0.2.71:25600",
            "Serious Sam: The Second Encounter",
        ),
        ("ut", Face::GameSpy, "192.0.2.72:7778", "Unreal Tournament"),
        ("somegame", Face::GameSpy, "192.0.2.73:7778", "somegame"),
    ];
    for (game, face, addr, _) in games {
        let key = ip_key(game, addr);
        record(
            &d,
            &key,
            face,
            key.addr.port(),
            PollInfo::from(PollFields::default()),
        );
    }
    mgmt_record(&d, 2101, true);
    d.handle.publish();
    for (game, _, addr, name) in games {
        let v = get_json(d.http(), &format!("/api/v1/servers?game={game}"), 200).await;
        assert_eq!(v["total"], 1, "{game}: {v}");
        assert_eq!(v["servers"][0]["registered_address"], addr);
        assert_eq!(v["servers"][0]["game"], game);
        assert_eq!(v["servers"][0]["game_name"], name);
        let one = get_json(d.http(), &format!("/api/v1/servers/{addr}"), 200).await;
        assert_eq!(one["game_name"], name);
    }
    let bomber = get_json(d.http(), "/api/v1/servers?game=BOMBERMAN", 200).await;
    assert_eq!(bomber["servers"][0]["game_name"], "Bomberman");
    let doc = get_json(d.http(), "/api/v1/openapi.json", 200).await;
    assert!(doc["components"]["schemas"]["ServerSummary"]["properties"]["game_name"].is_object());
    d.stop().await;
}

/// The pages name their icon, and the icon is served: no 404 on every load.
#[tokio::test]
async fn the_icon_is_served() {
    let dir = TempDir::new("api-favicon");
    let d = Daemon::start(config(&dir));
    for path in ["/favicon.svg", "/favicon.ico"] {
        let (head, body) = raw_get(d.http(), path, "").await;
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(head.contains("content-type: image/svg+xml"), "{head}");
        assert!(String::from_utf8_lossy(&body).starts_with("<svg"), "{path}");
    }
    let (_, docs) = get(d.http(), "/api/docs").await;
    assert!(docs.contains("rel=\"icon\" href=\"/favicon.svg\""));
    d.stop().await;
}
