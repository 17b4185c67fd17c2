//! Acknowledged means stored: a DDNet `success`, and a management answer after a
//! registration on the same connection, go out only for what the store committed, here with
//! the data directory on a small tmpfs that runs full (the test mounts it, so it runs as
//! root, as CI does).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use muster_proto::teeworlds_master::{Message, Packet};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, UdpSocket};

use muster_master::registry::Timestamp;
use muster_master::{Listeners, Master};

use crate::{Daemon, TempDir, config, get_json, loopback};

/// A tmpfs of a given size mounted on a directory, unmounted when dropped.
pub(crate) struct Tmpfs(PathBuf);

impl Tmpfs {
    pub(crate) fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount runs");
        assert!(
            st.success(),
            "mounting a tmpfs on {} (the test needs root)",
            dir.display()
        );
        Self(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l"])
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system of `path` (a file there grows until a write fails).
pub(crate) fn fill(path: &Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    while f.write_all(&chunk).is_ok() {}
    while f.write_all(&chunk[..512]).is_ok() {}
    let _ = f.sync_all();
}

/// One DDNet game server on its own loopback address: its UDP socket (for the challenge) and
/// its secret.
pub(crate) struct DdnetServer {
    ip: IpAddr,
    udp: UdpSocket,
    secret: String,
}

impl DdnetServer {
    pub(crate) async fn new(n: u8) -> Self {
        let ip = IpAddr::from([127, 0, 2, n]);
        let udp = UdpSocket::bind(SocketAddr::new(ip, 0)).await.unwrap();
        Self {
            ip,
            udp,
            secret: format!("00000000-0000-4000-8000-0000000000{n:02x}"),
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.udp.local_addr().unwrap()
    }

    /// One register POST from this server's address: (status, body).
    pub(crate) async fn post(
        &self,
        http: SocketAddr,
        token: Option<&str>,
        body: &[u8],
    ) -> (u16, String) {
        let token = token.map_or(String::new(), |t| format!("Challenge-Token: {t}\r\n"));
        let head = format!(
            "POST /ddnet/15/register HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Address: tw-0.6+udp://connecting-address.invalid:{}\r\nSecret: {}\r\n\
             Challenge-Secret: {}:tw0.6/ipv4\r\nInfo-Serial: 1\r\n{token}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr().port(),
            self.secret,
            self.secret,
            body.len()
        );
        self.send(http, head, body).await
    }

    /// The `Action: delete` POST of this server's stream: (status, body).
    pub(crate) async fn delete(&self, http: SocketAddr) -> (u16, String) {
        let head = format!(
            "POST /ddnet/15/register HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Action: delete\r\nAddress: tw-0.6+udp://connecting-address.invalid:{}\r\n\
             Secret: {}\r\nContent-Length: 0\r\n\r\n",
            self.addr().port(),
            self.secret,
        );
        self.send(http, head, b"").await
    }

    /// `head` and `body` from this server's IP; (status, body) of the answer.
    async fn send(&self, http: SocketAddr, head: String, body: &[u8]) -> (u16, String) {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(self.ip, 0)).unwrap();
        let exchange = async {
            let mut s = sock.connect(http).await.unwrap();
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(body).await.unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await.unwrap();
            String::from_utf8(buf).unwrap()
        };
        // Longer than the store's confirmation timeout.
        let text = tokio::time::timeout(Duration::from_secs(20), exchange)
            .await
            .expect("an answer");
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, body.to_owned())
    }

    /// The first POST (answered `need_challenge`) and the token of the UDP challenge.
    pub(crate) async fn challenge(&self, http: SocketAddr, body: &[u8]) -> String {
        let (status, first) = self.post(http, None, body).await;
        assert_eq!(
            (status, first.contains("need_challenge")),
            (200, true),
            "{first}"
        );
        let mut buf = vec![0u8; 2048];
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), self.udp.recv_from(&mut buf))
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
        String::from_utf8(c.token().to_vec()).unwrap()
    }
}

pub(crate) const SUCCESS: &str = "{\"status\":\"success\"}\n";

/// The addresses `servers.json` lists, sorted.
pub(crate) async fn listed_addresses(http: SocketAddr) -> Vec<String> {
    let json: Value = get_json(http, "/ddnet/15/servers.json", 200).await;
    let mut out: Vec<String> = json["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["addresses"].as_array().unwrap().clone())
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

/// How long the daemons here wait for the store before answering 503: shorter than the
/// default, long enough for a write on a busy machine.
const DURABLE: Duration = Duration::from_secs(2);

/// Registers new servers (127.0.2.1, .2, …) until one is refused with 503, as a store with
/// no room left refuses it: the acknowledged addresses, and the refused server with its token.
pub(crate) async fn register_until_refused(
    http: SocketAddr,
    body: &[u8],
) -> (Vec<SocketAddr>, (DdnetServer, String)) {
    let mut acked = Vec::new();
    for n in 1..=60 {
        let s = DdnetServer::new(n).await;
        let token = s.challenge(http, body).await;
        let (status, answer) = s.post(http, Some(&token), body).await;
        if answer == SUCCESS {
            acked.push(s.addr());
        } else {
            assert_eq!(status, 503, "{answer}");
            return (acked, (s, token));
        }
    }
    panic!("the full disk refuses no write: {acked:?}");
}

/// A new server registered (challenge and POST) and acknowledged.
async fn register(http: SocketAddr, body: &[u8], n: u8) -> DdnetServer {
    let s = DdnetServer::new(n).await;
    let token = s.challenge(http, body).await;
    let (status, answer) = s.post(http, Some(&token), body).await;
    assert_eq!((status, answer.as_str()), (200, SUCCESS));
    s
}

async fn metrics(http: SocketAddr) -> String {
    crate::exchange(
        http,
        "GET /metrics HTTP/1.1\nHost: x\nConnection: close\n\n",
        b"",
    )
    .await
    .text()
}

/// Asks `check` every 100 ms until it holds, for at most 30 s.
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn drops(metrics: &str, reason: &str) -> u64 {
    let prefix = format!("muster_drops_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Frames one management command.
fn mgmt_frame(json: &str) -> Vec<u8> {
    format!("{}{json}\n", json.len() + 1).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_only_stored_registrations_are_acknowledged() {
    let dir = TempDir::new("acked-full");
    let mount = Tmpfs::mount(&dir.0, "2m");
    let start = |dir: &TempDir| {
        let mut c = config(dir);
        c.poller.enabled = false;
        c.listen.mgmt = loopback();
        Daemon::start(c)
    };
    let d = start(&dir);
    d.handle.set_durable_timeout(DURABLE);
    let http = d.http();
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    // Serving (its files in the data directory made) before the disk fills.
    assert!(listed_addresses(http).await.is_empty());
    let filler = dir.0.join("filler");
    fill(&filler);

    let (mut acked, (s, token)) = register_until_refused(http, &body).await;
    // The retry finds the record in memory; it is still not stored, so no `success`.
    let (status, answer) = s.post(http, Some(&token), &body).await;
    assert_eq!(status, 503, "a retry of an unstored registration: {answer}");

    // A management server registers and queries on one connection: no answer while its
    // registration is not stored.
    let mut m = tokio::net::TcpStream::connect(d.addr("mgmt"))
        .await
        .unwrap();
    let register = "{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\":\
                    \"Feuerland\",\"serverAddress\":\"127.0.0.9\",\"serverPort\":20000}}";
    m.write_all(&mgmt_frame(register)).await.unwrap();
    m.write_all(&mgmt_frame("{\"command\":\"msQueryGameServers\"}"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let early = tokio::time::timeout(Duration::from_secs(1), m.read(&mut buf)).await;
    assert!(early.is_err(), "answered before stored: {early:?}");

    // Room again: the retry is acknowledged (once written), and the management answer goes.
    std::fs::remove_file(&filler).unwrap();
    let (status, answer) = s.post(http, Some(&token), &body).await;
    assert_eq!((status, answer.as_str()), (200, SUCCESS));
    acked.push(s.addr());
    let n = tokio::time::timeout(Duration::from_secs(15), m.read(&mut buf))
        .await
        .expect("answered once stored")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.contains("Feuerland"), "{answer}");

    let metrics = metrics(http).await;
    assert!(drops(&metrics, "not_stored") >= 2, "{metrics}");

    // kill -9: every acknowledged registration is there after the restart.
    d.kill().await;
    let d = start(&dir);
    let listed = listed_addresses(d.http()).await;
    for a in &acked {
        let url = format!("tw-0.6+udp://{a}");
        assert!(listed.contains(&url), "{url} was acknowledged: {listed:?}");
    }
    d.stop().await;
    drop(mount);
}

/// The history, `/healthz` and the API on a disk that fills between loading the registry and
/// serving (the history's table is made then): the daemon serves, history samples are
/// dropped and counted, registrations are refused until stored, and with room again both
/// registrations and history are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_does_not_stop_the_daemon() {
    let dir = TempDir::new("acked-full-start");
    let mount = Tmpfs::mount(&dir.0, "2m");
    let mut c = config(&dir);
    c.poller.enabled = false;
    assert!(c.history.enabled, "history is on by default");
    let listeners = Listeners::bind(&c).unwrap();
    let http = listeners
        .bound()
        .unwrap()
        .into_iter()
        .find(|b| b.face == "http")
        .unwrap()
        .addr;
    let master = Master::open(c, Timestamp::now()).unwrap();
    master.handle().set_durable_timeout(DURABLE);
    let filler = dir.0.join("filler");
    fill(&filler);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(master.run(listeners, async {
        let _ = stopped.await;
    }));

    let health = crate::exchange(
        http,
        "GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n",
        b"",
    )
    .await;
    assert!(matches!(health.status, 200 | 503), "{health:?}");
    assert!(listed_addresses(http).await.is_empty());
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    let (_, (s, token)) = register_until_refused(http, &body).await;
    // The listed servers' samples cannot be written: dropped and counted, the daemon goes on.
    eventually("history samples counted as not stored", || async {
        drops(&metrics(http).await, "history_not_stored") > 0
    })
    .await;
    let _: Value = get_json(http, "/api/v1/servers", 200).await;
    assert!(!task.is_finished(), "the daemon stopped: {:?}", task.await);

    // Room again: the refused registration is stored and acknowledged, and a new server's
    // samples reach the history.
    std::fs::remove_file(&filler).unwrap();
    let (status, answer) = s.post(http, Some(&token), &body).await;
    assert_eq!((status, answer.as_str()), (200, SUCCESS));
    let fresh = register(http, &body, 100).await;
    let path = format!("/api/v1/servers/{}/history", fresh.addr());
    eventually("the new server's history is written", || async {
        let points: Value = get_json(http, &path, 200).await;
        !points.as_array().unwrap().is_empty()
    })
    .await;
    let health = crate::exchange(
        http,
        "GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n",
        b"",
    )
    .await;
    assert_eq!(health.status, 200, "{health:?}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the daemon stops")
        .unwrap()
        .unwrap();
    drop(mount);
}

/// A DDNet delete is `success` only once the store has the removal; while it has not, 503,
/// the stream stays out of the lists, and a retry of the delete is answered as the store
/// stands (not "could not find registered server").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddnet_delete_is_acknowledged_once_stored() {
    let dir = TempDir::new("acked-delete");
    let mount = Tmpfs::mount(&dir.0, "2m");
    let start = |dir: &TempDir| {
        let mut c = config(dir);
        c.poller.enabled = false;
        let d = Daemon::start(c);
        d.handle.set_durable_timeout(DURABLE);
        d
    };
    let d = start(&dir);
    let http = d.http();
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    let leaving = register(http, &body, 200).await;
    let url = format!("tw-0.6+udp://{}", leaving.addr());
    assert_eq!(listed_addresses(http).await, std::slice::from_ref(&url));
    let filler = dir.0.join("filler");
    fill(&filler);
    let (_, (s, _)) = register_until_refused(http, &body).await;

    let (status, answer) = leaving.delete(http).await;
    assert_eq!(status, 503, "a delete the store has not: {answer}");
    assert!(
        !listed_addresses(http).await.contains(&url),
        "gone from the lists"
    );
    // Its retry is answered as the store stands: still not stored (503), or stored by a
    // later write that found room in the log the failed one left (a delete adds no rows) —
    // never "could not find registered server".
    let (status, answer) = leaving.delete(http).await;
    assert!(
        status == 503 || (status, answer.as_str()) == (200, SUCCESS),
        "its retry: {status} {answer}"
    );

    let stored_by_the_retry = status == 200;

    std::fs::remove_file(&filler).unwrap();
    let (status, answer) = leaving.delete(http).await;
    if stored_by_the_retry {
        // Stored and acknowledged: asked again, it is a stream this master does not have.
        assert_eq!(status, 400, "deleted already: {answer}");
    } else {
        assert_eq!((status, answer.as_str()), (200, SUCCESS), "stored now");
    }
    // A delete of a stream never registered stays what the reference master answers.
    let (status, answer) = s.delete(http).await;
    assert_eq!(
        status, 200,
        "the refused registration was stored meanwhile: {answer}"
    );
    let (status, answer) = s.delete(http).await;
    assert_eq!(status, 400, "{answer}");

    // kill -9: the acknowledged delete holds after the restart.
    d.kill().await;
    let d = start(&dir);
    let listed = listed_addresses(d.http()).await;
    assert!(!listed.contains(&url), "{url} was deleted: {listed:?}");
    d.stop().await;
    drop(mount);
}
