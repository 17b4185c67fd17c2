//! Start, fill, read over HTTP, stop, start again: same list.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use muster_master::registry::{
    Face, GameAddr, HeartbeatOutcome, Outcome, PollFields, PollInfo, PollPlayer, Registration,
    ServerKey, Timestamp,
};
use muster_master::{Master, MasterHandle};
use muster_proto::Protocol;
use muster_proto::limit::SourceKey;
use serde_json::Value;

use crate::{Daemon, TempDir, config, get, get_json};

fn start(dir: &TempDir) -> Daemon {
    // Records here live at documentation addresses: a poll would only count failures.
    let mut c = config(dir);
    c.poller.enabled = false;
    let d = Daemon::start(c);
    assert_eq!(d.bound.len(), 1);
    let b = &d.bound[0];
    assert_eq!((b.face, b.transport), ("http", "tcp"));
    assert_ne!(b.addr.port(), 0, "the real port is reported");
    d
}

fn reg(game: &str, a: u8, port: u16, face: Face, qp: Option<Protocol>) -> Registration {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, a)), port);
    Registration {
        key: ServerKey::new(game, GameAddr::Ip(addr)),
        face,
        game_port: Some(port),
        query_addr: Some(addr),
        query_protocol: qp,
        source: SourceKey::of(addr.ip()),
    }
}

fn fill(h: &MasterHandle) {
    let now = Timestamp::now();
    let servers = [
        reg("ut2", 1, 7777, Face::GameSpy, Some(Protocol::GameSpy1)),
        reg(
            "teeworlds",
            2,
            8303,
            Face::Teeworlds07,
            Some(Protocol::Teeworlds),
        ),
        reg(
            "serioussamse",
            3,
            25600,
            Face::GameAgent,
            Some(Protocol::GameAgent),
        ),
    ];
    for (i, r) in servers.into_iter().enumerate() {
        let t = Timestamp(now.0 + i as u64);
        assert_eq!(h.register(r, t), Outcome::Added);
    }
    let tee = ServerKey::new("teeworlds", GameAddr::Ip("192.0.2.2:8303".parse().unwrap()));
    h.update_poll(
        &tee,
        Some(PollInfo::from(PollFields {
            name: "Tee Town".into(),
            map: "dm1".into(),
            game_type: "DM".into(),
            num_players: 1,
            max_players: 8,
            password: Some(false),
            players: vec![PollPlayer::new("nameless tee").with_score(Some(5))].into(),
            rules: muster_master::registry::Rules::default(),
            game_port: None,
        })),
        now,
    );
    // Connection-bound: listed now, gone after a restart.
    let mut m = reg("bomberman", 4, 2000, Face::Mgmt, None);
    m.key = m.key.with_instance(1);
    h.register(m, Timestamp(now.0 + 3));
    // Faces' writes reach the store within the persister's delay; lists, within a publish.
    h.flush().unwrap();
    h.publish();
}

fn addresses(list: &Value) -> Vec<String> {
    list["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s["game"].as_str().unwrap(),
                s["address"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn serve_fill_restart_same_list() {
    let dir = TempDir::new("restart");
    let r = start(&dir);
    fill(&r.handle);

    assert_eq!(get_json(r.http(), "/healthz", 200).await["status"], "ok");
    let list = get_json(r.http(), "/api/v1/servers", 200).await;
    assert_eq!(
        addresses(&list),
        [
            "ut2/192.0.2.1:7777",
            "teeworlds/192.0.2.2:8303",
            "serioussamse/192.0.2.3:25600",
            "bomberman/192.0.2.4:2000",
        ]
    );
    assert_eq!(list["total"], 4);

    let f = get_json(r.http(), "/api/v1/servers?non_empty=1&q=NAMELESS", 200).await;
    assert_eq!(addresses(&f), ["teeworlds/192.0.2.2:8303"]);
    assert_eq!(f["servers"][0]["name"], "Tee Town");
    assert_eq!(f["servers"][0]["protocol"], "teeworlds07");
    let f = get_json(r.http(), "/api/v1/servers?protocol=gamespy&game=UT2", 200).await;
    assert_eq!(addresses(&f), ["ut2/192.0.2.1:7777"]);
    let f = get_json(
        r.http(),
        "/api/v1/servers?sort=address&order=desc&per_page=2&page=1",
        200,
    )
    .await;
    assert_eq!(
        addresses(&f),
        ["bomberman/192.0.2.4:2000", "serioussamse/192.0.2.3:25600"]
    );
    assert_eq!(
        (f["page"].as_u64(), f["per_page"].as_u64()),
        (Some(1), Some(2))
    );
    let f = get_json(r.http(), "/api/v1/servers?per_page=100000", 400).await;
    assert_eq!(f["error"], "per_page must be a number from 1 to 500");
    let f = get_json(r.http(), "/api/v1/servers?per_page=0", 400).await;
    assert_eq!(f["error"], "per_page must be a number from 1 to 500");
    let f = get_json(r.http(), "/no/such/route", 404).await;
    assert_eq!(f["error"], "no such route");

    let d = get_json(r.http(), "/api/v1/servers/192.0.2.2:8303", 200).await;
    assert_eq!(d["players"][0]["name"], "nameless tee");
    assert_eq!(d["players"][0]["score"], 5);
    let d = get_json(r.http(), "/api/v1/servers/192.0.2.1:7777?game=ut2", 200).await;
    assert_eq!(d["query_protocol"], "gamespy1");
    get_json(r.http(), "/api/v1/servers/192.0.2.9:7777", 404).await;
    get_json(r.http(), "/api/v1/servers/not-an-address", 400).await;
    let e = get_json(r.http(), "/api/v1/servers?sort=nope", 400).await;
    assert_eq!(e["error"], "unknown sort column");
    let (status, body) = get(r.http(), "/no/such/page").await;
    assert_eq!(
        (status, body.as_str()),
        (404, r#"{"error":"no such route"}"#)
    );

    let (status, metrics) = get(r.http(), "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("muster_registrations_total 4\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("muster_list_requests_total{face=\"http\"} 7\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("muster_servers{protocol=\"gamespy\"} 1\n"),
        "{metrics}"
    );
    let before = get_json(r.http(), "/api/v1/servers?protocol=gamespy1", 200).await;
    r.stop().await;

    // Same data dir: the same list, minus the connection-bound management record.
    let r = start(&dir);
    let list = get_json(r.http(), "/api/v1/servers", 200).await;
    assert_eq!(
        addresses(&list),
        [
            "ut2/192.0.2.1:7777",
            "teeworlds/192.0.2.2:8303",
            "serioussamse/192.0.2.3:25600",
        ]
    );
    let d = get_json(r.http(), "/api/v1/servers/192.0.2.2:8303", 200).await;
    assert_eq!(
        d["players"][0]["name"], "nameless tee",
        "poll results survive"
    );
    let after = get_json(r.http(), "/api/v1/servers?protocol=gamespy1", 200).await;
    assert_eq!(servers_of(before), servers_of(after));
    let h = get_json(r.http(), "/healthz", 200).await;
    assert_eq!(h["records"], 3);
    r.stop().await;
}

#[tokio::test]
async fn crash_without_shutdown_keeps_registrations() {
    let dir = TempDir::new("crash");
    let c = config(&dir);
    let master = Master::open(c.clone(), Timestamp::now()).unwrap();
    let h = master.handle();
    fill(&h);
    // A heartbeat refresh waits for the flush that never comes.
    let now = Timestamp(Timestamp::now().0 + 60_000);
    let ut2 = reg("ut2", 1, 7777, Face::GameSpy, Some(Protocol::GameSpy1));
    assert_eq!(h.heartbeat(&ut2.key, now), HeartbeatOutcome::Refreshed);
    assert_eq!(h.dirty(), 1, "the heartbeat");
    // kill -9: nothing is flushed, nothing is closed.
    std::mem::forget(master);
    std::mem::forget(h);

    let again = Master::open(c, Timestamp::now()).unwrap();
    let report = again.load_report();
    assert_eq!(report.orphaned, 1);
    assert_eq!(report.restored, 3);
    let listed = again
        .handle()
        .snapshot()
        .listed()
        .iter()
        .map(|x| (x.key.addr.to_string(), x.last_heartbeat))
        .collect::<Vec<_>>();
    assert_eq!(listed.len(), 3);
    assert!(
        listed.iter().all(|(_, t)| *t < now),
        "the unflushed refresh is lost, nothing else"
    );
}

#[tokio::test]
async fn records_that_expired_while_down_are_pruned_at_start() {
    let dir = TempDir::new("expired");
    let c = config(&dir);
    let master = Master::open(c.clone(), Timestamp::now()).unwrap();
    fill(&master.handle());
    drop(master);
    let later = Timestamp(Timestamp::now().0 + 3_600_000);
    let again = Master::open(c, later).unwrap();
    let report = again.load_report();
    assert_eq!(
        (report.restored, report.expired, report.orphaned),
        (0, 3, 1)
    );
    assert!(again.handle().with_registry(|r| r.is_empty()));
}

/// One DDNet register POST over a fresh connection: (status, body).
pub(crate) async fn ddnet_post(
    http: SocketAddr,
    scheme: &str,
    port: u16,
    extra: &str,
    body: &[u8],
) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let stream = if scheme == "tw-0.7+udp" {
        "tw0.7"
    } else {
        "tw0.6"
    };
    let ctype = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    let head = format!(
        "POST /ddnet/15/register HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Address: {scheme}://connecting-address.invalid:{port}\r\n\
         Secret: 4ae14cf1-eb35-4068-89eb-7967b754451e\r\n\
         Challenge-Secret: 414cfc17-9b63-4e41-b33b-e4adb20b299c:{stream}/ipv4\r\n\
         Info-Serial: 7\r\n{extra}{ctype}Content-Length: {}\r\n\r\n",
        body.len()
    );
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(body).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        String::from_utf8(buf).unwrap()
    };
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), fut)
        .await
        .unwrap();
    text.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// Registers one stream of the DDNet server whose game socket is `game`: POST, answer the
/// UDP challenge, POST with the token.
pub(crate) async fn ddnet_register(
    http: SocketAddr,
    game: &tokio::net::UdpSocket,
    scheme: &str,
    body: &[u8],
) {
    use muster_proto::teeworlds_master::{Message, Packet};
    let port = game.local_addr().unwrap().port();
    let extra = if scheme == "tw-0.7+udp" {
        "Connless-Token: ff0e2331\r\n"
    } else {
        ""
    };
    let first = ddnet_post(http, scheme, port, extra, body).await;
    assert!(first.contains("need_challenge"), "{first}");
    let mut buf = vec![0u8; 2048];
    let (n, _) = tokio::time::timeout(std::time::Duration::from_secs(5), game.recv_from(&mut buf))
        .await
        .expect("a challenge")
        .unwrap();
    let Ok(Packet::Connless {
        message: Message::Challenge(c),
        ..
    }) = Packet::decode(&buf[..n])
    else {
        panic!("not a challenge: {:?}", &buf[..n]);
    };
    let token = String::from_utf8(c.token().to_vec()).unwrap();
    let extra = format!("{extra}Challenge-Token: {token}\r\n");
    let second = ddnet_post(http, scheme, port, &extra, body).await;
    // The body ends with a newline, as DDNet's master writes it.
    assert_eq!(second, "{\"status\":\"success\"}\n");
}

#[tokio::test]
async fn ddnet_registrations_survive_a_restart_as_they_were_listed() {
    let dir = TempDir::new("restart-ddnet");
    let start_quiet = |dir: &TempDir| {
        // No poller: nothing answers polls here, and polls are not what is tested.
        let mut c = config(dir);
        c.poller.enabled = false;
        Daemon::start(c)
    };
    let r = start_quiet(&dir);
    let game = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    // Two streams of one server (0.6 with the info, 0.7 without a body): one entry.
    ddnet_register(r.http(), &game, "tw-0.6+udp", &body).await;
    ddnet_register(r.http(), &game, "tw-0.7+udp", b"").await;
    r.handle.publish();
    let json_before = get_json(r.http(), "/ddnet/15/servers.json", 200).await;
    let servers = json_before["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{json_before}");
    assert_eq!(servers[0]["addresses"].as_array().unwrap().len(), 2);
    let registered: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(servers[0]["info"], registered);
    let api_before = get_json(r.http(), "/api/v1/servers", 200).await;
    assert_eq!(api_before["total"], 1);
    // kill -9 after the next flush (face data is written with the refreshes).
    tokio::time::sleep(muster_master::FLUSH_INTERVAL * 2).await;
    r.kill().await;

    let r = start_quiet(&dir);
    let json_after = get_json(r.http(), "/ddnet/15/servers.json", 200).await;
    assert_eq!(
        json_after, json_before,
        "servers.json is the same after the restart"
    );
    // The restored info went back into the registry's info file, out of the heap.
    let (stats, in_file) = r.handle.with_registry(|reg| {
        let d = reg.iter().find_map(|rec| rec.ddnet().cloned()).unwrap();
        (reg.info_file().map(|f| f.stats()), d.info.is_kept())
    });
    let stats = stats.expect("the daemon keeps DDNet infos in a file");
    assert!(in_file && stats.in_file, "{stats:?}");
    assert_eq!(stats.infos, 1, "one info for both streams: {stats:?}");
    let compact = serde_json::to_vec(&registered).unwrap();
    let metrics = crate::exchange(
        r.http(),
        "GET /metrics HTTP/1.1\nHost: x\nConnection: close\n\n",
        b"",
    )
    .await
    .text();
    assert!(metrics.contains("\nmuster_ddnet_infos 1\n"), "{metrics}");
    let live = format!(
        "\nmuster_ddnet_info_bytes{{kind=\"live\"}} {}\n",
        compact.len()
    );
    assert!(metrics.contains(&live), "{metrics}");
    let api_after = get_json(r.http(), "/api/v1/servers", 200).await;
    assert_eq!(
        servers_of(api_after),
        servers_of(api_before),
        "the API is the same after the restart"
    );
    r.stop().await;
}

/// A list answer without its `last_event_id` (event ids are of one run).
fn servers_of(mut list: Value) -> Value {
    list.as_object_mut().map(|o| o.remove("last_event_id"));
    list
}
