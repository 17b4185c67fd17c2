//! Integration tests of the mgmt face over loopback TCP: every example of
//! `management-server.md` (§2 framing, §8 frames, §9 seed conformance) and every malformed
//! or edge input of §10, each checked for exactly the specified answer or close **and** for
//! the face still serving a well-behaved game server registered on another connection.
//! Plus connection caps, idle timeout, output overflow, rate limiting, IPv6 and shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use muster_master::config::Config;
use muster_master::faces::mgmt::{self, MgmtSettings};
use muster_master::registry::{Face, Timestamp};
use muster_master::table::{FaceStart, Socket};
use muster_master::{Master, MasterHandle};
use muster_proto::limit::BucketConfig;
use muster_proto::mgmt::{Message, ServerListAnswer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::TempDir;

/// The management face as the face table serves it, on `l`.
fn serve_mgmt(
    handle: &MasterHandle,
    l: tokio::net::TcpListener,
    settings: MgmtSettings,
    stop: muster_master::CancellationToken,
) -> JoinHandle<()> {
    let mut faces = FaceStart::new(handle.clone(), stop);
    faces.settings.set(settings);
    tokio::spawn(faces.serve(&mgmt::FACE, vec![Socket::Tcp(l)]))
}

const WAIT: Duration = Duration::from_secs(10);

// ---- the seed's examples, exactly as printed (§9) ----

const SEED_REGISTER_1: &str = r#"{
    "command": "msRegisterGameServer",
    "content": {
        "serverName": "Feuerland",
        "serverAddress": "192.168.0.10",
        "serverPort": 20000
    }
}"#;
const SEED_REGISTER_2: &str = r#"{
    "command": "msRegisterGameServer",
    "content": {
        "serverName": "Server von Bösewicht",
        "serverAddress": "fd40:9dc7:b528::1",
        "serverPort": 30000
    }
}"#;
const SEED_REGISTER_3: &str = r#"{
    "command": "msRegisterGameServer",
    "content": {
        "serverName": "轰炸机人",
        "serverAddress": "bombergame.example.org",
        "serverPort": 40000
    }
}"#;
const SEED_UPDATE: &str = r#"{
    "command": "msUpdateGameServerStats",
    "content": {
        "players": { "current": 2, "max": 4 },
        "isLobbyOpen": true,
        "gameplayMode": 2
    }
}"#;
const SEED_UNREGISTER: &str = r#"{
    "command": "msUnregisterGameServer"
}"#;
const SEED_QUERY: &str = r#"{
    "command": "msQueryGameServers"
}"#;
const SEED_ANSWER_1: &str = r#"{
    "command": "msRQueryGameServers",
    "content": {
        "servers": []
    }
}"#;
const SEED_ANSWER_2: &str = r#"{
    "command": "msRQueryGameServers",
    "content": {
        "servers": [
            { "name": "Feuerland", "address": "192.168.0.10", "port": 20000,
              "players": { "current": "1", "max": 4 }, "isLobbyOpen": true,
              "gameplayMode": 1 }
        ]
    }
}"#;
const SEED_ANSWER_3: &str = r#"{
    "command": "msRQueryGameServers",
    "content": {
        "servers": [
            { "name": "轰炸机人", "address": "bombergame.example.org", "port": 40000,
              "players": { "current": "22", "max": 4 }, "isLobbyOpen": false,
              "gameplayMode": 2 },
            { "name": "Server von Bösewicht", "address": "fd40:9dc7:b528::1", "port": 30000,
              "players": { "current": "3", "max": 3 }, "isLobbyOpen": false,
              "gameplayMode": 1 },
            { "name": "Feuerland", "address": "192.168.0.10", "port": 20000,
              "players": { "current": "1", "max": 4 }, "isLobbyOpen": true,
              "gameplayMode": 1 }
        ]
    }
}"#;

// ---- §8 frames ----

const REGISTER_1: &[u8] = b"122{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\":\"Feuerland\",\"serverAddress\":\"192.168.0.10\",\"serverPort\":20000}}\n";
const REGISTER_2: &str = "139{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\":\"Server von Bösewicht\",\"serverAddress\":\"fd40:9dc7:b528::1\",\"serverPort\":30000}}\n";
const REGISTER_3: &str = "135{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\":\"轰炸机人\",\"serverAddress\":\"bombergame.example.org\",\"serverPort\":40000}}\n";
const UPDATE: &[u8] = b"118{\"command\":\"msUpdateGameServerStats\",\"content\":{\"players\":{\"current\":2,\"max\":4},\"isLobbyOpen\":true,\"gameplayMode\":2}}\n";
const UNREGISTER: &[u8] = b"37{\"command\":\"msUnregisterGameServer\"}\n";
const QUERY: &[u8] = b"33{\"command\":\"msQueryGameServers\"}\n";
const ANSWER_EMPTY: &[u8] =
    b"59{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[]}}\n";
const ANSWER_ONE: &[u8] = b"185{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[{\"name\":\"Feuerland\",\"address\":\"192.168.0.10\",\"port\":20000,\"players\":{\"current\":1,\"max\":4},\"isLobbyOpen\":true,\"gameplayMode\":1}]}}\n";

// ---- harness ----

/// One entry of an answer, comparable as a set: name, address, port, current, max, open, mode.
type E = (String, String, u16, u32, u8, bool, u8);

fn e(name: &str, addr: &str, port: u16, cur: u32, max: u8, open: bool, mode: u8) -> E {
    (name.into(), addr.into(), port, cur, max, open, mode)
}

fn feuerland() -> E {
    e("Feuerland", "192.168.0.10", 20000, 0, 4, true, 1)
}

fn entries(a: &ServerListAnswer) -> Vec<E> {
    let mut v: Vec<E> = a
        .servers()
        .iter()
        .map(|s| {
            (
                s.server.name().to_owned(),
                s.server.address().as_str().to_owned(),
                s.server.port().get(),
                s.stats.current.get(),
                s.stats.max.get(),
                s.stats.lobby_open,
                s.stats.mode.code(),
            )
        })
        .collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<E>) -> Vec<E> {
    v.sort();
    v
}

/// `<len><json>\n` for `json`.
fn frame(json: &str) -> Vec<u8> {
    let mut f = format!("{}", json.len() + 1).into_bytes();
    f.extend_from_slice(json.as_bytes());
    f.push(b'\n');
    f
}

/// The length prefix of a frame.
fn prefix(f: &[u8]) -> usize {
    let digits: Vec<u8> = f.iter().copied().take_while(u8::is_ascii_digit).collect();
    String::from_utf8(digits).unwrap().parse().unwrap()
}

fn settings() -> MgmtSettings {
    let many = BucketConfig {
        burst: 100_000.0,
        per_second: 100_000.0,
    };
    MgmtSettings {
        query_bucket: many,
        state_bucket: many,
        egress_bytes_per_sec: 1 << 30,
        ..MgmtSettings::default()
    }
}

struct Running {
    handle: MasterHandle,
    addr: SocketAddr,
    stop: muster_master::CancellationToken,
    task: JoinHandle<()>,
    _dir: TempDir,
}

async fn start_on(s: MgmtSettings, bind: &str) -> Running {
    let dir = TempDir::new("mgmt");
    let c = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    let master = Master::open(c, Timestamp::now()).unwrap();
    let handle = master.handle();
    let l = muster_master::runtime::bind_tcp(bind.parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    // As the daemon runs it: an answer after a registration waits for its write.
    tokio::spawn(
        handle
            .clone()
            .run_persister(muster_master::FLUSH_INTERVAL, rx.clone()),
    );
    let task = serve_mgmt(&handle, l, s, rx);
    Running {
        handle,
        addr,
        stop,
        task,
        _dir: dir,
    }
}

async fn start(s: MgmtSettings) -> Running {
    start_on(s, "127.0.0.1:0").await
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        timeout(WAIT, self.task).await.unwrap().unwrap();
    }

    fn mgmt_records(&self) -> usize {
        self.handle
            .with_registry(|r| r.iter().filter(|r| r.face == Face::Mgmt).count())
    }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Connects from a chosen loopback source address.
async fn connect_from(addr: SocketAddr, src: &str) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{src}:0").parse().unwrap()).unwrap();
    sock.connect(addr).await.unwrap()
}

async fn send(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes).await.unwrap();
}

/// Reads one whole frame, prefix and newline included.
async fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    timeout(WAIT, async {
        let mut f = Vec::new();
        loop {
            let b = s.read_u8().await.expect("connection closed before a frame");
            f.push(b);
            if !b.is_ascii_digit() {
                break;
            }
        }
        let len = prefix(&f);
        let mut rest = vec![0; len - 1];
        s.read_exact(&mut rest).await.unwrap();
        f.extend(rest);
        f
    })
    .await
    .expect("no frame in time")
}

fn decode_answer(f: &[u8]) -> ServerListAnswer {
    let digits = f.iter().take_while(|b| b.is_ascii_digit()).count();
    assert_eq!(f.last(), Some(&b'\n'));
    match Message::decode(&f[digits..f.len() - 1]).unwrap() {
        Message::QueryGameServersAnswer(a) => a,
        other => panic!("not an answer: {other:?}"),
    }
}

/// Sends a query and returns the answer's entries; also proves the connection is open and
/// that nothing else was sent on it before.
async fn query(s: &mut TcpStream) -> Vec<E> {
    send(s, QUERY).await;
    entries(&decode_answer(&read_frame(s).await))
}

/// The server closes the connection without sending anything.
async fn assert_closed(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 256];
    let r = timeout(WAIT, s.read(&mut buf)).await;
    match r {
        Ok(Ok(0) | Err(_)) => {}
        Ok(Ok(n)) => panic!("{what}: got {n} bytes instead of a close"),
        Err(_) => panic!("{what}: not closed"),
    }
}

/// Nothing arrives for a while and the connection is not closed.
async fn assert_quiet(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 16];
    let r = timeout(Duration::from_millis(300), s.read(&mut buf)).await;
    assert!(r.is_err(), "{what}: expected silence, got {r:?}");
}

/// A face with "Feuerland" (§8 Example 1) registered on a connection of its own.
struct World {
    face: Running,
    base: TcpStream,
}

impl World {
    async fn new() -> Self {
        Self::with(settings()).await
    }

    async fn with(s: MgmtSettings) -> Self {
        let face = start(s).await;
        let mut base = connect(face.addr).await;
        send(&mut base, REGISTER_1).await;
        assert_eq!(query(&mut base).await, vec![feuerland()]);
        Self { face, base }
    }

    async fn conn(&self) -> TcpStream {
        connect(self.face.addr).await
    }

    /// A fresh client still gets the correct list, and the base connection still works.
    async fn assert_serving(&mut self, what: &str) {
        let mut c = self.conn().await;
        assert_eq!(
            query(&mut c).await,
            vec![feuerland()],
            "{what}: list seen by others"
        );
        assert_eq!(
            query(&mut self.base).await,
            vec![feuerland()],
            "{what}: base connection"
        );
    }

    /// Waits (bounded) until the list seen by a fresh client is `want`.
    async fn eventually(&self, want: Vec<E>) {
        let want = sorted(want);
        let mut c = self.conn().await;
        for _ in 0..200 {
            if query(&mut c).await == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("list never became {want:?}");
    }
}

// ---- §8: byte-exact frames ----

#[tokio::test]
async fn empty_answer_is_byte_exact() {
    let face = start(settings()).await;
    let mut c = connect(face.addr).await;
    send(&mut c, QUERY).await;
    assert_eq!(read_frame(&mut c).await, ANSWER_EMPTY);
    face.stop().await;
}

#[tokio::test]
async fn one_server_answer_is_byte_exact() {
    let face = start(settings()).await;
    let mut g = connect(face.addr).await;
    send(&mut g, REGISTER_1).await;
    // §8 shows Feuerland with one player: 1 of 4, open, mode 1.
    send(
        &mut g,
        &frame(r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":1,"max":4},"isLobbyOpen":true,"gameplayMode":1}}"#),
    )
    .await;
    send(&mut g, QUERY).await;
    assert_eq!(read_frame(&mut g).await, ANSWER_ONE);
    // The §8 update (2 of 4, open, A+B) replaces all four values.
    send(&mut g, UPDATE).await;
    let mut c = connect(face.addr).await;
    send(&mut c, QUERY).await;
    let want = String::from_utf8(ANSWER_ONE.to_vec())
        .unwrap()
        .replace("\"current\":1", "\"current\":2")
        .replace("\"gameplayMode\":1", "\"gameplayMode\":2");
    assert_eq!(read_frame(&mut c).await, want.as_bytes());
    face.stop().await;
}

#[tokio::test]
async fn three_server_answer_matches_section_8() {
    let face = start(settings()).await;
    let mut a = connect(face.addr).await;
    let mut b = connect(face.addr).await;
    let mut c = connect(face.addr).await;
    send(&mut c, REGISTER_3.as_bytes()).await;
    send(
        &mut c,
        &frame(r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":22,"max":4},"isLobbyOpen":false,"gameplayMode":2}}"#),
    )
    .await;
    send(&mut b, REGISTER_2.as_bytes()).await;
    send(
        &mut b,
        &frame(r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":3,"max":3},"isLobbyOpen":false,"gameplayMode":1}}"#),
    )
    .await;
    send(&mut a, REGISTER_1).await;
    send(
        &mut a,
        &frame(r#"{"command":"msUpdateGameServerStats","content":{"players":{"current":1,"max":4},"isLobbyOpen":true,"gameplayMode":1}}"#),
    )
    .await;
    for s in [&mut a, &mut b, &mut c] {
        query(s).await; // each connection's commands are applied
    }
    let mut q = connect(face.addr).await;
    send(&mut q, QUERY).await;
    let f = read_frame(&mut q).await;
    // 475 bytes, length 472, as in §8; the order differs (open lobbies first, §12).
    assert_eq!((f.len(), prefix(&f)), (475, 472));
    assert!(f.starts_with(b"472{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[{\"name\":\"Feuerland\""));
    assert_eq!(
        entries(&decode_answer(&f)),
        sorted(vec![
            e("轰炸机人", "bombergame.example.org", 40000, 22, 4, false, 2),
            e(
                "Server von Bösewicht",
                "fd40:9dc7:b528::1",
                30000,
                3,
                3,
                false,
                1
            ),
            e("Feuerland", "192.168.0.10", 20000, 1, 4, true, 1),
        ])
    );
    face.stop().await;
}

#[tokio::test]
async fn section_8_command_frames_are_accepted() {
    let mut w = World::new().await;
    let mut g = w.conn().await;
    for f in [
        REGISTER_2.as_bytes(),
        UPDATE,
        UNREGISTER,
        REGISTER_3.as_bytes(),
    ] {
        send(&mut g, f).await;
    }
    assert_eq!(
        query(&mut g).await,
        sorted(vec![
            feuerland(),
            e("轰炸机人", "bombergame.example.org", 40000, 0, 4, true, 1)
        ])
    );
    drop(g);
    w.eventually(vec![feuerland()]).await;
    w.assert_serving("§8 frames").await;
    w.face.stop().await;
}

// ---- §2: framing examples ----

#[tokio::test]
async fn general_page_framing_examples_are_frames_without_a_command() {
    let mut w = World::new().await;
    let mut c = w.conn().await;
    let hallo = b"17{\"Hallo\":\"Welt\"}\n";
    let uni = "31{\"universität\":\"TU Chemnitz\"}\n".as_bytes();
    assert_eq!((hallo.len(), uni.len()), (19, 33));
    assert_eq!(&uni[..16], b"31{\"universit\xc3\xa4t");
    for f in [&hallo[..], uni] {
        send(&mut c, f).await;
        // Well framed, no `command`: discarded, no reply, still open.
        assert_eq!(query(&mut c).await, vec![feuerland()]);
    }
    assert_eq!(w.face.handle.metrics().drops("mgmt_invalid"), 2);
    w.assert_serving("§2").await;
    w.face.stop().await;
}

// ---- §9: seed conformance ----

#[tokio::test]
async fn seed_examples_have_the_documented_lengths() {
    let table = [
        (SEED_REGISTER_1, 169),
        (SEED_REGISTER_2, 186),
        (SEED_REGISTER_3, 182),
        (SEED_UPDATE, 170),
        (SEED_UNREGISTER, 43),
        (SEED_QUERY, 39),
        (SEED_ANSWER_1, 86),
        (SEED_ANSWER_2, 282),
        (SEED_ANSWER_3, 691),
    ];
    for (json, len) in table {
        assert_eq!(json.len(), len, "{json}");
        assert_eq!(prefix(&frame(json)), len + 1);
        assert!(json.contains("\n    \""), "pretty-printed as in the seed");
    }
}

#[tokio::test]
async fn seed_round_trip() {
    let face = start(settings()).await;
    let mut c1 = connect(face.addr).await;
    let mut c2 = connect(face.addr).await;
    let mut c3 = connect(face.addr).await;
    send(&mut c1, &frame(SEED_REGISTER_1)).await;
    send(&mut c2, &frame(SEED_REGISTER_2)).await;
    send(&mut c3, &frame(SEED_REGISTER_3)).await;
    send(&mut c1, &frame(SEED_UPDATE)).await;
    for s in [&mut c2, &mut c3] {
        query(s).await;
    }
    // The seed's own (pretty-printed) query.
    send(&mut c1, &frame(SEED_QUERY)).await;
    let a = decode_answer(&read_frame(&mut c1).await);
    assert_eq!(
        entries(&a),
        sorted(vec![
            e("Feuerland", "192.168.0.10", 20000, 2, 4, true, 2),
            e(
                "Server von Bösewicht",
                "fd40:9dc7:b528::1",
                30000,
                0,
                4,
                true,
                1
            ),
            e("轰炸机人", "bombergame.example.org", 40000, 0, 4, true, 1),
        ])
    );
    // The seed's unregister removes only the own registration.
    send(&mut c2, &frame(SEED_UNREGISTER)).await;
    assert_eq!(
        query(&mut c2).await,
        sorted(vec![
            e("Feuerland", "192.168.0.10", 20000, 2, 4, true, 2),
            e("轰炸机人", "bombergame.example.org", 40000, 0, 4, true, 1),
        ])
    );
    assert_eq!(face.mgmt_records(), 2);
    face.stop().await;
}

#[tokio::test]
async fn seed_update_without_registration_is_discarded() {
    let mut w = World::new().await;
    let mut c = w.conn().await;
    send(&mut c, &frame(SEED_UPDATE)).await;
    assert_eq!(query(&mut c).await, vec![feuerland()]);
    assert_eq!(w.face.handle.metrics().drops("mgmt_not_registered"), 1);
    w.assert_serving("update unregistered").await;
    w.face.stop().await;
}

#[tokio::test]
async fn seed_answers_are_read_by_the_client_and_discarded_by_the_server() {
    // Client side: the seed's answers, with string counts, read as specified.
    let read = |json: &str| match Message::decode(json.as_bytes()).unwrap() {
        Message::QueryGameServersAnswer(a) => a,
        other => panic!("{other:?}"),
    };
    assert!(read(SEED_ANSWER_1).servers().is_empty());
    assert_eq!(
        entries(&read(SEED_ANSWER_2)),
        vec![e("Feuerland", "192.168.0.10", 20000, 1, 4, true, 1)]
    );
    assert_eq!(
        entries(&read(SEED_ANSWER_3)),
        sorted(vec![
            e("轰炸机人", "bombergame.example.org", 40000, 22, 4, false, 2),
            e(
                "Server von Bösewicht",
                "fd40:9dc7:b528::1",
                30000,
                3,
                3,
                false,
                1
            ),
            e("Feuerland", "192.168.0.10", 20000, 1, 4, true, 1),
        ])
    );
    // Server side: an answer sent to the management server is not a command (M10).
    let mut w = World::new().await;
    let mut c = w.conn().await;
    for json in [SEED_ANSWER_1, SEED_ANSWER_2, SEED_ANSWER_3] {
        send(&mut c, &frame(json)).await;
        assert_eq!(query(&mut c).await, vec![feuerland()]);
    }
    assert_eq!(w.face.handle.metrics().drops("mgmt_not_a_command"), 3);
    w.assert_serving("seed answers").await;
    w.face.stop().await;
}

// ---- §10.1 framing ----

#[tokio::test]
async fn framing_errors_close_the_connection() {
    let cases: [(&str, &[u8]); 10] = [
        ("F1", b"{\"command\":\"msQueryGameServers\"}\n"),
        ("F2", b" 33{\"command\":\"msQueryGameServers\"}\n"),
        ("F3", b"+33{\"command\":\"msQueryGameServers\"}\n"),
        ("F4", b"033{\"command\":\"msQueryGameServers\"}\n"),
        ("F5", b"0\n"),
        ("F6", b"65538{"),
        ("F7", b"100000"),
        ("F8", b"32{\"command\":\"msQueryGameServers\"}\n"),
        ("F9", b"34{\"command\":\"msQueryGameServers\"}\n3"),
        ("F10", b"33{\"command\":\"msQueryGameServers\"}\r\n"),
    ];
    let mut w = World::new().await;
    for (id, bytes) in cases {
        let mut c = w.conn().await;
        send(&mut c, bytes).await;
        assert_closed(&mut c, id).await;
        w.assert_serving(id).await;
    }
    assert_eq!(w.face.handle.metrics().drops("mgmt_framing"), 10);
    w.face.stop().await;
}

#[tokio::test]
async fn f9_without_the_extra_byte_keeps_waiting() {
    let mut w = World::new().await;
    let mut c = w.conn().await;
    send(&mut c, b"34{\"command\":\"msQueryGameServers\"}\n").await;
    assert_quiet(&mut c, "F9 incomplete").await;
    send(&mut c, b"3").await;
    assert_closed(&mut c, "F9 completed").await;
    w.assert_serving("F9").await;
    w.face.stop().await;
}

#[tokio::test]
async fn registered_connection_closed_by_a_framing_error_loses_its_server() {
    let mut w = World::new().await;
    let mut g = w.conn().await;
    send(&mut g, REGISTER_3.as_bytes()).await;
    assert_eq!(query(&mut g).await.len(), 2);
    send(&mut g, b"+1").await;
    assert_closed(&mut g, "framing").await;
    w.eventually(vec![feuerland()]).await;
    w.assert_serving("framing close").await;
    w.face.stop().await;
}

#[tokio::test]
async fn a1_counted_cr_is_whitespace() {
    let mut w = World::new().await;
    let mut c = w.conn().await;
    send(&mut c, b"34{\"command\":\"msQueryGameServers\"}\r\n").await;
    assert_eq!(
        entries(&decode_answer(&read_frame(&mut c).await)),
        vec![feuerland()]
    );
    w.assert_serving("A1").await;
    w.face.stop().await;
}

#[tokio::test]
async fn a2_two_frames_in_one_segment_are_processed_in_order() {
    let mut w = World::new().await;
    let mut g = w.conn().await;
    send(&mut g, REGISTER_3.as_bytes()).await;
    let mut both = QUERY.to_vec();
    both.extend_from_slice(UNREGISTER);
    send(&mut g, &both).await;
    // The query is answered before the unregister is applied.
    assert_eq!(
        entries(&decode_answer(&read_frame(&mut g).await)),
        sorted(vec![
            feuerland(),
            e("轰炸机人", "bombergame.example.org", 40000, 0, 4, true, 1)
        ])
    );
    assert_eq!(query(&mut g).await, vec![feuerland()]);
    w.assert_serving("A2").await;
    w.face.stop().await;
}

#[tokio::test]
async fn a3_one_byte_per_segment() {
    let mut w = World::new().await;
    let mut g = w.conn().await;
    let mut all = REGISTER_2.as_bytes().to_vec();
    all.extend_from_slice(QUERY);
    for b in &all {
        send(&mut g, std::slice::from_ref(b)).await;
        g.flush().await.unwrap();
    }
    assert_eq!(
        entries(&decode_answer(&read_frame(&mut g).await)),
        sorted(vec![
            feuerland(),
            e(
                "Server von Bösewicht",
                "fd40:9dc7:b528::1",
                30000,
                0,
                4,
                true,
                1
            )
        ])
    );
    drop(g);
    w.eventually(vec![feuerland()]).await;
    w.assert_serving("A3").await;
    w.face.stop().await;
}

fn padded_query(xs: usize) -> Vec<u8> {
    let json = format!(
        "{{\"command\":\"msQueryGameServers\",\"pad\":\"{}\"}}",
        "x".repeat(xs)
    );
    frame(&json)
}

#[tokio::test]
async fn a4_largest_frame_is_answered_a5_one_more_closes() {
    let mut w = World::new().await;
    let a4 = padded_query(65495);
    assert_eq!((a4.len(), prefix(&a4)), (65542, 65537));
    let mut c = w.conn().await;
    send(&mut c, &a4).await;
    assert_eq!(
        entries(&decode_answer(&read_frame(&mut c).await)),
        vec![feuerland()]
    );
    let a5 = padded_query(65496);
    assert_eq!(prefix(&a5), 65538);
    let mut c = w.conn().await;
    // The face closes at the prefix; the rest of the write may hit a reset.
    let _ = c.write_all(&a5).await;
    assert_closed(&mut c, "A5").await;
    w.assert_serving("A4/A5").await;
    w.face.stop().await;
}

#[tokio::test]
async fn a6_peer_closes_mid_frame_nothing_registered() {
    let mut w = World::new().await;
    let mut c = w.conn().await;
    send(
        &mut c,
        b"122{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\"",
    )
    .await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(50)).await;
    w.assert_serving("A6").await;
    assert_eq!(w.face.mgmt_records(), 1);
    w.face.stop().await;
}

// ---- §10.2 message level ----

#[tokio::test]
async fn malformed_messages_are_discarded_and_the_connection_stays_open() {
    let cases: [(&str, &[u8]); 14] = [
        ("M1", b"1\n"),
        (
            "M2",
            b"41{\"command\":\"msQueryGameServers\",\"x\":\"\xff\"}\n",
        ),
        ("M3", b"32{\"command\":\"msQueryGameServers\"\n"),
        (
            "M4",
            b"36\xef\xbb\xbf{\"command\":\"msQueryGameServers\"}\n",
        ),
        ("M5", b"23[\"msQueryGameServers\"]\n"),
        ("M6", b"15{\"content\":{}}\n"),
        ("M7", b"15{\"command\":42}\n"),
        ("M8", b"22{\"command\":\"msHello\"}\n"),
        ("M9", b"33{\"command\":\"msquerygameservers\"}\n"),
        (
            "M10",
            b"59{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[]}}\n",
        ),
        (
            "M11",
            b"68{\"command\":\"msQueryGameServers\",\"command\":\"msUnregisterGameServer\"}\n",
        ),
        ("M12", b"35{\"command\":\"msQueryGameServers\"} x\n"),
        (
            "M13",
            b"56{\"command\":\"msQueryGameServers\",\"content\":{\"filter\":1}}\n",
        ),
        (
            "M14",
            b"46{\"command\":\"msQueryGameServers\",\"content\":[]}\n",
        ),
    ];
    let mut w = World::new().await;
    let mut c = w.conn().await;
    for (id, bytes) in cases {
        let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        assert_eq!(prefix(bytes), bytes.len() - digits, "{id}: well framed");
        send(&mut c, bytes).await;
        // No reply to the bad message: the next frame is the answer to this query.
        assert_eq!(query(&mut c).await, vec![feuerland()], "{id}");
        w.assert_serving(id).await;
    }
    let m = w.face.handle.metrics();
    assert_eq!(m.drops("mgmt_invalid") + m.drops("mgmt_not_a_command"), 14);
    assert_eq!(m.drops("mgmt_framing"), 0);
    w.face.stop().await;
}

#[tokio::test]
async fn accepted_query_spellings_are_answered() {
    let cases: [(&str, &[u8]); 3] = [
        (
            "OK1",
            b"46{\"command\":\"msQueryGameServers\",\"content\":{}}\n",
        ),
        (
            "OK2",
            b"48{\"command\":\"msQueryGameServers\",\"content\":null}\n",
        ),
        (
            "OK3",
            b"45{\"command\":\"msQueryGameServers\",\"version\":2}\n",
        ),
    ];
    let mut w = World::new().await;
    let mut c = w.conn().await;
    for (id, bytes) in cases {
        send(&mut c, bytes).await;
        assert_eq!(
            entries(&decode_answer(&read_frame(&mut c).await)),
            vec![feuerland()],
            "{id}"
        );
    }
    w.assert_serving("OK").await;
    w.face.stop().await;
}

// ---- §10.3 msRegisterGameServer ----

fn register_frame(content: &str) -> Vec<u8> {
    frame(&format!(
        "{{\"command\":\"msRegisterGameServer\",\"content\":{content}}}"
    ))
}

fn reg_content(name: &str, addr: &str, port: &str) -> String {
    format!("{{\"serverName\":\"{name}\",\"serverAddress\":\"{addr}\",\"serverPort\":{port}}}")
}

#[tokio::test]
async fn invalid_registrations_are_discarded() {
    let f = |addr: &str, port: &str| reg_content("Feuerland", addr, port);
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("R1", frame("{\"command\":\"msRegisterGameServer\"}"), 35),
        ("R2", register_frame("null"), 50),
        (
            "R3",
            register_frame(&reg_content("", "192.168.0.10", "20000")),
            113,
        ),
        ("R4", register_frame(&f("192.168.0.256", "20000")), 123),
        ("R5", register_frame(&f("1.2.3", "20000")), 115),
        ("R6", register_frame(&f("192.168.000.010", "20000")), 125),
        ("R7", register_frame(&f("fd40::9dc7::1", "20000")), 123),
        (
            "R8",
            register_frame(&f("[fd40:9dc7:b528::1]", "20000")),
            129,
        ),
        ("R9", register_frame(&f("fe80::1%eth0", "20000")), 122),
        ("R10", register_frame(&f("0.0.0.0", "20000")), 117),
        ("R11", register_frame(&f("224.0.0.1", "20000")), 119),
        ("R12", register_frame(&f("12345", "20000")), 115),
        ("R13", register_frame(&f("bomber game", "20000")), 121),
        ("R14", register_frame(&f("", "20000")), 110),
        ("R15", register_frame(&f("192.168.0.10", "0")), 118),
        ("R16", register_frame(&f("192.168.0.10", "51963")), 122),
        ("R17", register_frame(&f("192.168.0.10", "65536")), 122),
        ("R18", register_frame(&f("192.168.0.10", "-1")), 119),
        ("R19", register_frame(&f("192.168.0.10", "20000.5")), 124),
        ("R20", register_frame(&f("192.168.0.10", "\"2e4\"")), 122),
        ("R21", register_frame(&f("192.168.0.10", "true")), 121),
    ];
    let mut w = World::new().await;
    let mut c = w.conn().await;
    for (id, bytes, want_prefix) in cases {
        assert_eq!(prefix(&bytes), want_prefix, "{id}: prefix as in the table");
        send(&mut c, &bytes).await;
        assert_eq!(query(&mut c).await, vec![feuerland()], "{id}");
        w.assert_serving(id).await;
    }
    assert_eq!(w.face.handle.metrics().drops("mgmt_invalid"), 21);
    assert_eq!(w.face.mgmt_records(), 1);
    w.face.stop().await;
}

#[tokio::test]
async fn valid_registration_spellings_are_listed_as_given() {
    let cases: Vec<(&str, String, usize, E)> = vec![
        (
            "R22",
            reg_content("Feuerland", "192.168.0.10", "\"20000\""),
            124,
            e("Feuerland", "192.168.0.10", 20000, 0, 4, true, 1),
        ),
        (
            "R23",
            reg_content("Feuerland", "192.168.0.10", "80"),
            119,
            e("Feuerland", "192.168.0.10", 80, 0, 4, true, 1),
        ),
        (
            "R24",
            reg_content("Feuerland", "Bombergame.Example.ORG.", "20000"),
            133,
            e("Feuerland", "Bombergame.Example.ORG.", 20000, 0, 4, true, 1),
        ),
        (
            "R25",
            reg_content("Feuerland", "::ffff:192.168.0.10", "20000"),
            129,
            e("Feuerland", "::ffff:192.168.0.10", 20000, 0, 4, true, 1),
        ),
        (
            "R26",
            reg_content("Feuerland", "1e100.example", "20000"),
            123,
            e("Feuerland", "1e100.example", 20000, 0, 4, true, 1),
        ),
    ];
    let mut w = World::new().await;
    for (id, content, want_prefix, want) in cases {
        let bytes = register_frame(&content);
        assert_eq!(prefix(&bytes), want_prefix, "{id}: prefix as in the table");
        let mut g = w.conn().await;
        send(&mut g, &bytes).await;
        assert_eq!(query(&mut g).await, sorted(vec![feuerland(), want]), "{id}");
        send(&mut g, UNREGISTER).await;
        assert_eq!(query(&mut g).await, vec![feuerland()], "{id}");
        w.assert_serving(id).await;
    }
    // R22: the decimal string goes back as an integer.
    let mut g = w.conn().await;
    send(
        &mut g,
        &register_frame(&reg_content("X", "192.0.2.1", "\"20000\"")),
    )
    .await;
    send(&mut g, QUERY).await;
    let f = String::from_utf8(read_frame(&mut g).await).unwrap();
    assert!(f.contains("\"port\":20000"), "{f}");
    w.face.stop().await;
}

#[tokio::test]
async fn mgmt_records_are_in_the_shared_registry() {
    let w = World::new().await;
    let recs = w
        .face
        .handle
        .publish()
        .listed()
        .iter()
        .map(|r| {
            (
                r.key.game.clone(),
                r.key.addr.to_string(),
                r.key.instance,
                r.face,
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(recs.len(), 1);
    let (game, addr, instance, face) = &recs[0];
    assert_eq!(
        (game.as_str(), addr.as_str(), *face),
        ("bomberman", "192.168.0.10:20000", Face::Mgmt)
    );
    assert_ne!(*instance, 0, "keyed by connection");
    w.face.stop().await;
}

// ---- §10.4 msUpdateGameServerStats ----

/// current, max, open, mode.
type State = (u32, u8, bool, u8);

#[tokio::test]
async fn stats_updates_are_validated() {
    let up = |content: &str| {
        frame(&format!(
            "{{\"command\":\"msUpdateGameServerStats\",\"content\":{content}}}"
        ))
    };
    // (id, content, prefix, resulting state or None when discarded)
    let cases: [(&str, &str, usize, Option<State>); 13] = [
        (
            "U2",
            r#"{"players":{"current":2,"max":5},"isLobbyOpen":true,"gameplayMode":2}"#,
            118,
            None,
        ),
        (
            "U3",
            r#"{"players":{"current":2,"max":1},"isLobbyOpen":true,"gameplayMode":2}"#,
            118,
            None,
        ),
        (
            "U4",
            r#"{"players":{"current":2,"max":"4"},"isLobbyOpen":true,"gameplayMode":2}"#,
            120,
            Some((2, 4, true, 2)),
        ),
        (
            "U5",
            r#"{"players":{"current":"1","max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
            120,
            Some((1, 4, true, 2)),
        ),
        (
            "U6",
            r#"{"players":{"current":-1,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
            119,
            None,
        ),
        (
            "U7",
            r#"{"players":{"current":22,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
            119,
            Some((22, 4, true, 2)),
        ),
        (
            "U8",
            r#"{"players":{"current":2.0,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
            120,
            None,
        ),
        (
            "U9",
            r#"{"players":{"current":2,"max":4},"isLobbyOpen":"true","gameplayMode":2}"#,
            120,
            None,
        ),
        (
            "U10",
            r#"{"players":{"current":2,"max":4},"isLobbyOpen":1,"gameplayMode":2}"#,
            115,
            None,
        ),
        (
            "U11",
            r#"{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":3}"#,
            118,
            None,
        ),
        (
            "U12",
            r#"{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":0}"#,
            118,
            None,
        ),
        (
            "U13",
            r#"{"players":{"current":2,"max":4},"isLobbyOpen":true}"#,
            101,
            None,
        ),
        (
            "U14",
            r#"{"players":[2,4],"isLobbyOpen":true,"gameplayMode":2}"#,
            102,
            None,
        ),
    ];
    let mut w = World::new().await;
    let mine = |s: State| e("Feuerland", "192.168.0.10", 20001, s.0, s.1, s.2, s.3);
    // A state that differs from the default, so a discarded update visibly keeps it.
    let before = (3, 3, false, 1);
    let set_before =
        up(r#"{"players":{"current":3,"max":3},"isLobbyOpen":false,"gameplayMode":1}"#);
    for (id, content, want_prefix, result) in cases {
        let bytes = up(content);
        assert_eq!(prefix(&bytes), want_prefix, "{id}: prefix as in the table");
        let mut g = w.conn().await;
        send(
            &mut g,
            &register_frame(&reg_content("Feuerland", "192.168.0.10", "20001")),
        )
        .await;
        send(&mut g, &set_before).await;
        send(&mut g, &bytes).await;
        let want = mine(result.unwrap_or(before));
        assert_eq!(query(&mut g).await, sorted(vec![feuerland(), want]), "{id}");
        send(&mut g, UNREGISTER).await;
        assert_eq!(query(&mut g).await, vec![feuerland()], "{id}");
        w.assert_serving(id).await;
    }
    assert_eq!(w.face.handle.metrics().drops("mgmt_invalid"), 10);
    // U1: no registration on the connection.
    let u1 = up(r#"{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#);
    assert_eq!(prefix(&u1), 118);
    let mut c = w.conn().await;
    send(&mut c, &u1).await;
    assert_eq!(query(&mut c).await, vec![feuerland()], "U1");
    assert_eq!(w.face.handle.metrics().drops("mgmt_not_registered"), 1);
    w.assert_serving("U1").await;
    w.face.stop().await;
}

// ---- §10.5 unregister, query and connection life ----

#[tokio::test]
async fn unregister_cases() {
    let mut w = World::new().await;
    // N1: nothing registered: nothing happens, the connection stays open.
    let mut c = w.conn().await;
    send(&mut c, UNREGISTER).await;
    assert_eq!(query(&mut c).await, vec![feuerland()], "N1");
    let cases: [(&str, &[u8], bool); 3] = [
        (
            "N2",
            b"50{\"command\":\"msUnregisterGameServer\",\"content\":{}}\n",
            true,
        ),
        (
            "N3",
            b"52{\"command\":\"msUnregisterGameServer\",\"content\":null}\n",
            true,
        ),
        (
            "N4",
            b"66{\"command\":\"msUnregisterGameServer\",\"content\":{\"serverName\":\"x\"}}\n",
            false,
        ),
    ];
    for (id, bytes, removed) in cases {
        let mut g = w.conn().await;
        send(&mut g, REGISTER_3.as_bytes()).await;
        send(&mut g, bytes).await;
        let mut want = vec![feuerland()];
        if !removed {
            want.push(e(
                "轰炸机人",
                "bombergame.example.org",
                40000,
                0,
                4,
                true,
                1,
            ));
        }
        assert_eq!(query(&mut g).await, sorted(want), "{id}");
        send(&mut g, UNREGISTER).await;
        query(&mut g).await;
        w.assert_serving(id).await;
    }
    w.face.stop().await;
}

#[tokio::test]
async fn l1_close_removes_the_registration() {
    let face = start(settings()).await;
    let mut g = connect(face.addr).await;
    send(&mut g, REGISTER_1).await;
    assert_eq!(query(&mut g).await, vec![feuerland()]);
    drop(g);
    let mut c = connect(face.addr).await;
    let mut empty = false;
    for _ in 0..200 {
        if query(&mut c).await.is_empty() {
            empty = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(empty, "L1: the list is empty after the close");
    assert_eq!(face.mgmt_records(), 0);
    face.stop().await;
}

#[tokio::test]
async fn l2_re_registration_replaces_and_resets() {
    let mut w = World::new().await;
    let mut g = w.conn().await;
    send(&mut g, REGISTER_3.as_bytes()).await;
    send(&mut g, UPDATE).await;
    send(
        &mut g,
        &register_frame(&reg_content("Feuerland 2", "192.168.0.10", "20001")),
    )
    .await;
    assert_eq!(
        query(&mut g).await,
        sorted(vec![
            feuerland(),
            e("Feuerland 2", "192.168.0.10", 20001, 0, 4, true, 1)
        ])
    );
    // Same address and port again: still one entry, state reset.
    send(&mut g, UPDATE).await;
    send(
        &mut g,
        &register_frame(&reg_content("Feuerland 3", "192.168.0.10", "20001")),
    )
    .await;
    assert_eq!(
        query(&mut g).await,
        sorted(vec![
            feuerland(),
            e("Feuerland 3", "192.168.0.10", 20001, 0, 4, true, 1)
        ])
    );
    assert_eq!(w.face.mgmt_records(), 2);
    drop(g);
    w.eventually(vec![feuerland()]).await;
    w.assert_serving("L2").await;
    w.face.stop().await;
}

#[tokio::test]
async fn l3_l4_l5_defaults_duplicates_and_ownership() {
    let mut w = World::new().await;
    // L3: registered, no update: the defaults.
    let mut c = w.conn().await;
    send(&mut c, QUERY).await;
    let f = String::from_utf8(read_frame(&mut c).await).unwrap();
    assert!(
        f.contains("\"players\":{\"current\":0,\"max\":4},\"isLobbyOpen\":true,\"gameplayMode\":1"),
        "L3: {f}"
    );
    // L4: a second connection registers the same address and port: two entries.
    let mut g = w.conn().await;
    send(&mut g, REGISTER_1).await;
    assert_eq!(query(&mut g).await, vec![feuerland(), feuerland()], "L4");
    assert_eq!(w.face.mgmt_records(), 2);
    // L5: another connection cannot unregister them.
    send(&mut c, UNREGISTER).await;
    assert_eq!(query(&mut c).await, vec![feuerland(), feuerland()], "L5");
    drop(g);
    w.eventually(vec![feuerland()]).await;
    w.assert_serving("L3-L5").await;
    w.face.stop().await;
}

#[tokio::test]
async fn l6_l7_idle_timeout_only_for_unregistered_connections() {
    let s = MgmtSettings {
        idle_timeout: Duration::from_millis(300),
        ..settings()
    };
    let mut w = World::with(s).await;
    let t0 = tokio::time::Instant::now();
    let mut idle = w.conn().await;
    assert_closed(&mut idle, "L6").await;
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "not before the timeout"
    );
    // A connection that keeps sending complete messages is not idle.
    let mut busy = w.conn().await;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(query(&mut busy).await, vec![feuerland()]);
    }
    // L7: the base connection registered long ago and sent nothing since its last query.
    tokio::time::sleep(Duration::from_millis(400)).await;
    w.assert_serving("L7").await;
    // Once quiet, the unregistered busy connection times out as well.
    assert_closed(&mut busy, "L6 after activity").await;
    assert_eq!(w.face.handle.metrics().drops("mgmt_idle_timeout"), 2);
    w.face.stop().await;
}

#[tokio::test]
async fn l8_per_source_cap_closes_the_extra_connection() {
    let s = MgmtSettings {
        max_per_source: 3,
        ..settings()
    };
    let mut w = World::with(s).await; // the base connection is one of the three
    let mut a = w.conn().await;
    let mut b = w.conn().await;
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    assert_eq!(query(&mut b).await, vec![feuerland()]);
    let mut extra = w.conn().await;
    assert_closed(&mut extra, "L8").await;
    assert_eq!(w.face.handle.metrics().drops("tcp_source_cap"), 1);
    // Another source address is not affected.
    let mut other = connect_from(w.face.addr, "127.0.0.2").await;
    assert_eq!(query(&mut other).await, vec![feuerland()]);
    // A slot freed by a close can be used again.
    drop(a);
    let mut again = None;
    for _ in 0..100 {
        let mut c = w.conn().await;
        send(&mut c, QUERY).await;
        let mut first = [0u8; 1];
        if let Ok(Ok(1)) = timeout(WAIT, c.read(&mut first)).await {
            again = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "a freed slot is reused");
    query(&mut b).await;
    drop(again);
    drop(b);
    w.eventually(vec![feuerland()]).await;
    let mut c = connect_from(w.face.addr, "127.0.0.3").await;
    assert_eq!(query(&mut c).await, vec![feuerland()]);
    query(&mut w.base).await;
    w.face.stop().await;
}

#[tokio::test]
async fn total_connection_cap_closes_the_extra_connection() {
    let s = MgmtSettings {
        max_connections: 2,
        ..settings()
    };
    let mut w = World::with(s).await;
    let mut a = connect_from(w.face.addr, "127.0.0.2").await;
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    let mut extra = connect_from(w.face.addr, "127.0.0.3").await;
    assert_closed(&mut extra, "total cap").await;
    assert_eq!(w.face.handle.metrics().drops("tcp_conn_cap"), 1);
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    assert_eq!(query(&mut w.base).await, vec![feuerland()]);
    w.face.stop().await;
}

// ---- abuse limits ----

/// A client that sends 1,000 queries and never reads, where one answer alone passes a cap:
/// it is closed at its first answer, and the registered server stays.
async fn slow_reader_is_closed(s: MgmtSettings) {
    let face = start(s).await;
    let mut base = connect(face.addr).await;
    send(&mut base, REGISTER_1).await;
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut c = sock.connect(face.addr).await.unwrap();
    let _ = timeout(WAIT, c.write_all(&QUERY.repeat(1000))).await;
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    let closed = timeout(WAIT, async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "connection closed");
    assert_eq!(got, 0, "nothing was sent");
    assert_eq!(face.handle.metrics().drops("mgmt_output_overflow"), 1);
    assert_eq!(
        face.mgmt_records(),
        1,
        "the other connection's server stays"
    );
    face.stop().await;
}

// The caps are checked as each answer is made, so an answer larger than a cap closes at once;
// with caps of a frame or more, a client that does not read is paused before it owes that
// much (`a_client_that_does_not_read_is_paused_not_served_ahead`).

#[tokio::test]
async fn unread_output_over_the_connection_cap_closes_the_connection() {
    slow_reader_is_closed(MgmtSettings {
        max_unsent: 100,
        ..settings()
    })
    .await;
}

#[tokio::test]
async fn unread_output_over_the_face_wide_cap_closes_the_connection() {
    slow_reader_is_closed(MgmtSettings {
        max_unsent_total: 100,
        ..settings()
    })
    .await;
}

#[tokio::test]
async fn answers_owed_before_a_half_close_are_sent() {
    let mut w = World::new().await;
    let mut c = w.conn().await;
    send(&mut c, QUERY).await;
    c.shutdown().await.unwrap();
    assert_eq!(
        entries(&decode_answer(&read_frame(&mut c).await)),
        vec![feuerland()]
    );
    assert_closed(&mut c, "after the answer").await;
    w.assert_serving("half close").await;
    w.face.stop().await;
}

#[tokio::test]
async fn rate_limited_queries_are_delayed_not_dropped() {
    let s = MgmtSettings {
        query_bucket: BucketConfig {
            burst: 1.0,
            per_second: 20.0,
        },
        ..settings()
    };
    let w = World::with(s).await; // World::with used the one token
    let mut c = w.conn().await;
    let t0 = tokio::time::Instant::now();
    send(&mut c, &QUERY.repeat(4)).await;
    for _ in 0..4 {
        assert_eq!(
            entries(&decode_answer(&read_frame(&mut c).await)),
            vec![feuerland()]
        );
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(120),
        "{:?}",
        t0.elapsed()
    );
    let listed = std::collections::BTreeMap::new();
    let text = muster_http::metrics::render(w.face.handle.metrics(), &listed);
    assert!(
        !text.contains("muster_rate_limited_total 0"),
        "rate limiting counted: {text}"
    );
    w.face.stop().await;
}

#[tokio::test]
#[allow(clippy::print_stdout)] // the issue asks for the ratio to be printed
async fn amplification_is_bounded_by_the_frame_limit() {
    // 64 servers with long names: the answer to a 35-byte query is one frame at most.
    let s = MgmtSettings {
        max_per_source: 100,
        ..settings()
    };
    let face = start(s).await;
    let mut conns = Vec::new();
    for i in 0..64u16 {
        let mut g = connect(face.addr).await;
        let name = format!("{i:03}{}", "n".repeat(250));
        send(
            &mut g,
            &register_frame(&reg_content(
                &name,
                "bombergame.example.org",
                &(1000 + i).to_string(),
            )),
        )
        .await;
        conns.push(g);
    }
    for g in &mut conns {
        query(g).await;
    }
    let mut c = connect(face.addr).await;
    send(&mut c, QUERY).await;
    let f = read_frame(&mut c).await;
    let n = decode_answer(&f).servers().len();
    println!(
        "mgmt amplification: {} bytes answer / {} bytes query = {:.0}x ({n} of 64 servers)",
        f.len(),
        QUERY.len(),
        f.len() as f64 / QUERY.len() as f64
    );
    assert_eq!(n, 64);
    assert!(f.len() <= 5 + 65_537);
    face.stop().await;
}

// ---- IPv6, shutdown ----

#[tokio::test]
async fn works_over_ipv6() {
    let face = start_on(settings(), "[::1]:0").await;
    assert!(face.addr.is_ipv6());
    let mut g = connect(face.addr).await;
    send(&mut g, REGISTER_2.as_bytes()).await;
    let mut c = connect(face.addr).await;
    for _ in 0..100 {
        if !query(&mut c).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        query(&mut c).await,
        vec![e(
            "Server von Bösewicht",
            "fd40:9dc7:b528::1",
            30000,
            0,
            4,
            true,
            1
        )]
    );
    face.stop().await;
}

#[tokio::test]
async fn shutdown_closes_connections_and_removes_their_servers() {
    let face = start(settings()).await;
    let mut a = connect(face.addr).await;
    let mut b = connect(face.addr).await;
    send(&mut a, REGISTER_1).await;
    send(&mut b, REGISTER_3.as_bytes()).await;
    query(&mut a).await;
    assert_eq!(query(&mut b).await.len(), 2);
    let handle = face.handle.clone();
    face.stop().await;
    assert_eq!(
        handle.with_registry(|r| r.iter().filter(|r| r.face == Face::Mgmt).count()),
        0
    );
    assert_closed(&mut a, "shutdown a").await;
    assert_closed(&mut b, "shutdown b").await;
}

/// Shutdown drains a session held up by its query bucket: the session's held query is not
/// answered, `run` returns only once the connection has ended (closed, its server removed).
#[tokio::test]
async fn shutdown_drains_a_session_waiting_for_its_bucket() {
    let s = MgmtSettings {
        // One query, then one an hour: the second waits far longer than the test.
        query_bucket: BucketConfig {
            burst: 1.0,
            per_second: 1.0 / 3600.0,
        },
        ..settings()
    };
    let face = start(s).await;
    let mut a = connect(face.addr).await;
    send(&mut a, REGISTER_1).await;
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    // Held: no token for this one.
    send(&mut a, QUERY).await;
    assert_quiet(&mut a, "held query").await;
    let handle = face.handle.clone();
    face.stop().await;
    assert_eq!(
        handle.with_registry(|r| r.iter().filter(|r| r.face == Face::Mgmt).count()),
        0
    );
    assert_closed(&mut a, "held session closed by the shutdown").await;
}

#[tokio::test]
async fn registry_source_cap_refuses_registrations_but_keeps_the_connection() {
    let dir = TempDir::new("mgmt-cap");
    let mut c = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    c.limits.servers_per_source = 1;
    let handle = Master::open(c, Timestamp::now()).unwrap().handle();
    let l = muster_master::runtime::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    // As the daemon runs it: an answer after a registration waits for its write.
    tokio::spawn(
        handle
            .clone()
            .run_persister(muster_master::FLUSH_INTERVAL, rx.clone()),
    );
    let task = serve_mgmt(&handle, l, settings(), rx);
    let mut a = connect(addr).await;
    send(&mut a, REGISTER_1).await;
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    let mut b = connect(addr).await;
    send(&mut b, REGISTER_3.as_bytes()).await;
    send(&mut b, UPDATE).await;
    // Refused by the registry's cap (one server per source here); the update has nothing to
    // update; the connection stays open and the first server is still listed.
    assert_eq!(query(&mut b).await, vec![feuerland()]);
    assert_eq!(handle.metrics().drops("source_cap"), 1);
    assert_eq!(handle.metrics().drops("mgmt_not_registered"), 1);
    // Once the first one unregisters, the second connection may register.
    send(&mut a, UNREGISTER).await;
    query(&mut a).await;
    send(&mut b, REGISTER_3.as_bytes()).await;
    assert_eq!(
        query(&mut b).await,
        vec![e(
            "轰炸机人",
            "bombergame.example.org",
            40000,
            0,
            4,
            true,
            1
        )]
    );
    stop.cancel();
    timeout(WAIT, task).await.unwrap().unwrap();
}

#[tokio::test]
async fn connection_reset_removes_the_registration() {
    let mut w = World::new().await;
    let mut g = w.conn().await;
    send(&mut g, REGISTER_2.as_bytes()).await;
    assert_eq!(query(&mut g).await.len(), 2);
    // Linger 0: the close is a reset, which the face sees as a read error.
    socket2::SockRef::from(&g)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(g);
    w.eventually(vec![feuerland()]).await;
    w.assert_serving("reset").await;
    w.face.stop().await;
}

#[tokio::test]
async fn refused_registration_does_not_escape_the_idle_timeout() {
    let dir = TempDir::new("mgmt-cap-idle");
    let mut c = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    c.limits.servers_per_source = 1;
    let handle = Master::open(c, Timestamp::now()).unwrap().handle();
    let l = muster_master::runtime::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = muster_master::CancellationToken::new();
    let rx = stop.clone();
    let s = MgmtSettings {
        idle_timeout: Duration::from_millis(300),
        ..settings()
    };
    tokio::spawn(handle.clone().run_publisher(rx.clone()));
    // As the daemon runs it: an answer after a registration waits for its write.
    tokio::spawn(
        handle
            .clone()
            .run_persister(muster_master::FLUSH_INTERVAL, rx.clone()),
    );
    let task = serve_mgmt(&handle, l, s, rx);
    let mut a = connect(addr).await;
    send(&mut a, REGISTER_1).await;
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    let mut b = connect(addr).await;
    send(&mut b, REGISTER_3.as_bytes()).await;
    assert_eq!(query(&mut b).await, vec![feuerland()], "refused by the cap");
    // `b` has no server in the registry, so it is idle-closed; `a` is registered and stays.
    assert_closed(&mut b, "refused registration idles out").await;
    assert_eq!(handle.metrics().drops("mgmt_idle_timeout"), 1);
    assert_eq!(query(&mut a).await, vec![feuerland()]);
    stop.cancel();
    timeout(WAIT, task).await.unwrap().unwrap();
}

// ---- fairness, back-pressure and names ----

/// Queries the face answered so far.
fn answers_made(h: &MasterHandle) -> u64 {
    let text = muster_http::metrics::render(h.metrics(), &std::collections::BTreeMap::new());
    text.lines()
        .find_map(|l| l.strip_prefix("muster_list_requests_total{face=\"mgmt\"} "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Twelve sources with sixteen connections each register servers with 256-character names
/// (192 servers: more than one answer holds); the connections are returned.
async fn register_long_names(face: &Running, net: u8) -> Vec<TcpStream> {
    let long = "x".repeat(256);
    let mut held = Vec::new();
    for src in 1..=12u16 {
        for i in 0..16u16 {
            let mut c = connect_from(face.addr, &format!("127.{net}.3.{src}")).await;
            let port = (src * 100 + i + 1).to_string();
            send(
                &mut c,
                &register_frame(&reg_content(&long, "192.0.2.1", &port)),
            )
            .await;
            held.push(c);
        }
    }
    held
}

#[tokio::test]
async fn a_client_that_does_not_read_is_paused_not_served_ahead() {
    // Answers of a full frame each; a client sends 200 queries (12.8 MB of answers) and
    // does not read. The face answers only while the connection owes less than a frame:
    // what the kernel buffers, and then nothing more until the client reads; it is not
    // closed, and then gets every answer in order.
    let face = start(settings()).await;
    let held = register_long_names(&face, 10).await;
    for _ in 0..200 {
        if face.mgmt_records() == 192 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = answers_made(&face.handle);
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut c = sock.connect(face.addr).await.unwrap();
    send(&mut c, &QUERY.repeat(200)).await;
    // Until the face stops making answers (bounded).
    let mut made = 0;
    let mut still = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = answers_made(&face.handle) - before;
        still = if now == made { still + 1 } else { 0 };
        made = now;
        if still == 10 {
            break;
        }
    }
    assert!(
        made < 200,
        "paused: {made} answers made for a client that reads none"
    );
    assert_eq!(face.handle.metrics().drops("mgmt_output_overflow"), 0);
    for i in 0..200 {
        let a = decode_answer(&read_frame(&mut c).await);
        assert!(a.servers().len() > 100, "answer {i}");
    }
    assert_eq!(answers_made(&face.handle) - before, 200);
    drop(held);
    face.stop().await;
}

#[tokio::test]
async fn many_long_named_servers_from_few_sources_do_not_push_another_out() {
    // Twelve addresses with sixteen connections each register servers with the longest
    // names; a server registered afterwards from a thirteenth address is in every answer,
    // although the answer is full (open lobbies first, then by registration time, it was
    // the one left out).
    let face = start(settings()).await;
    let held = register_long_names(&face, 0).await;
    // As long a name as theirs: it cannot slip into the space the others leave.
    let honest_name = format!("H{}", "y".repeat(255));
    let mut honest = connect_from(face.addr, "127.0.3.200").await;
    send(
        &mut honest,
        &register_frame(&reg_content(&honest_name, "192.0.2.1", "20000")),
    )
    .await;
    let mut client = connect_from(face.addr, "127.0.3.201").await;
    for _ in 0..200 {
        if face.mgmt_records() == 193 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(face.mgmt_records(), 193);
    for round in 0..20 {
        send(&mut client, QUERY).await;
        let got = entries(&decode_answer(&read_frame(&mut client).await));
        assert!(got.len() < 193, "the answer is full: {}", got.len());
        assert!(
            got.iter().any(|e| e.0 == honest_name),
            "round {round}: the honest server is listed"
        );
    }
    assert!(face.handle.metrics().drops("mgmt_answer_truncated") >= 20);
    drop(held);
    face.stop().await;
}

#[tokio::test]
async fn names_up_to_256_characters_are_kept_and_the_rest_counted() {
    let mut w = World::new().await;
    // 256 characters of three bytes each: 768 bytes, kept exactly.
    let long = "轰".repeat(256);
    let mut a = w.conn().await;
    send(
        &mut a,
        &register_frame(&reg_content(&long, "192.168.0.20", "20001")),
    )
    .await;
    w.eventually(vec![
        feuerland(),
        e(&long, "192.168.0.20", 20001, 0, 4, true, 1),
    ])
    .await;
    // One character more, or a NUL the registry cannot keep: not listed, counted.
    let mut b = w.conn().await;
    let longer = "x".repeat(257);
    send(
        &mut b,
        &register_frame(&reg_content(&longer, "192.168.0.21", "20002")),
    )
    .await;
    let mut c = w.conn().await;
    send(
        &mut c,
        &register_frame(&reg_content("Feuer\\u0000land", "192.168.0.22", "20003")),
    )
    .await;
    for _ in 0..200 {
        if w.face.handle.metrics().drops("mgmt_name_too_long") >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.face.handle.metrics().drops("mgmt_name_too_long"), 2);
    assert_eq!(query(&mut b).await.len(), 2, "neither is listed");
    drop((a, b, c));
    w.assert_serving("after long names").await;
    w.face.stop().await;
}

#[tokio::test]
async fn a_paused_connection_still_times_out_when_unregistered() {
    let face = start(MgmtSettings {
        idle_timeout: Duration::from_millis(500),
        ..settings()
    })
    .await;
    let held = register_long_names(&face, 11).await;
    for _ in 0..200 {
        if face.mgmt_records() == 192 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut c = sock.connect(face.addr).await.unwrap();
    send(&mut c, &QUERY.repeat(200)).await;
    // Not read until the face closes it (its answers wait behind a pause).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut buf = vec![0u8; 64 * 1024];
    let closed = timeout(WAIT, async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "closed by the idle timeout");
    assert_eq!(face.handle.metrics().drops("mgmt_idle_timeout"), 1);
    assert_eq!(face.mgmt_records(), 192, "registered connections stay");
    drop(held);
    face.stop().await;
}

/// Answers made since `before` once the face stops making them (bounded wait).
async fn answers_until_paused(face: &Running, before: u64) -> u64 {
    let mut made = 0;
    let mut still = 0;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = answers_made(&face.handle) - before;
        still = if now == made { still + 1 } else { 0 };
        made = now;
        if still == 10 {
            break;
        }
    }
    made
}

#[tokio::test]
async fn a_client_that_does_not_read_costs_a_few_answers_whatever_the_kernel_buffers() {
    // As the previous test, but the client keeps the system's receive buffer and the face's
    // send buffer is what the face sets: what the kernels absorb for a client that reads
    // nothing (and so the egress budget it spends) is a few answers, not megabytes.
    let face = start(settings()).await;
    let held = register_long_names(&face, 11).await;
    for _ in 0..200 {
        if face.mgmt_records() == 192 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = answers_made(&face.handle);
    // A common default receive buffer (set, so that the host's settings do not matter).
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(128 * 1024).unwrap();
    let mut c = sock.connect(face.addr).await.unwrap();
    send(&mut c, &QUERY.repeat(200)).await;
    let made = answers_until_paused(&face, before).await;
    assert!(
        made <= 8,
        "{made} answers of a frame each made for a client that reads none"
    );
    for i in 0..200 {
        let a = decode_answer(&read_frame(&mut c).await);
        assert!(a.servers().len() > 100, "answer {i}");
    }
    assert_eq!(answers_made(&face.handle) - before, 200);
    drop(held);
    face.stop().await;
}
