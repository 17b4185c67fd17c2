//! Several masters on one PostgreSQL registry, against a real server.
//!
//! `scripts/test.sh` starts a throwaway cluster (`scripts/pg/cluster.sh`) and sets
//! `MUSTER_TEST_PG_URL` (a URL whose user may create databases) and `MUSTER_TEST_PG_DIR` (the
//! cluster, for the restart test). Without them the tests say they are skipped, unless
//! `MUSTER_REQUIRE_PEERS=1` (CI), where they fail. Each test gets a database of its own; the
//! restart test takes the cluster for itself ([`CLUSTER`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use muster_master::cluster::{ClusterSettings, PgLeases};
use muster_master::config::Config;
use muster_master::poller::{PollLeases as _, PollSample};
use muster_master::registry::{Face, GameAddr, Outcome, Registration, ServerKey, Timestamp};
use muster_master::store::PgShared;
use muster_master::{Bound, Listeners, Master, MasterError, MasterHandle};
use muster_proto::Protocol;
use muster_proto::gamespy_master::Key;
use muster_proto::limit::SourceKey;
use muster_query::{Document, MasterSource, Options, list_one};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{RwLock, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::{TempDir, config, get, get_json, loopback};

/// Normal tests share the cluster (read); the restart test has it alone (write).
static CLUSTER: RwLock<()> = RwLock::const_new(());

/// The admin URL, or `None` (the test says it skipped) when no test database was set up;
/// a failure under `MUSTER_REQUIRE_PEERS=1`.
fn admin_url() -> Option<String> {
    env_or_skip("MUSTER_TEST_PG_URL")
}

fn env_or_skip(var: &'static str) -> Option<String> {
    let found = match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(muster_testkit::Missing {
            peer: "postgresql",
            detail: format!("{var} is not set (scripts/test.sh starts a cluster and sets it)"),
        }),
    };
    muster_testkit::require(found)
}

/// A fresh database for one test.
async fn database(admin: &str, tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let name = format!("muster_it_{tag}_{}_{n}", std::process::id());
    muster_master::store::postgres::create_database(admin, &name)
        .await
        .unwrap()
}

/// Short cluster timings, so that liveness and catch-up take test time, not production time.
fn fast() -> ClusterSettings {
    ClusterSettings {
        heartbeat: Duration::from_millis(200),
        liveness: Duration::from_secs(2),
        catch_up: Duration::from_millis(200),
        janitor: Duration::from_millis(300),
    }
}

/// One instance on the shared database: every face on loopback, no poller unless asked.
fn instance_config(dir: &TempDir, url: &str) -> Config {
    let mut c = config(dir);
    c.store.url = Some(url.to_owned());
    c.poller.enabled = false;
    c.history.enabled = false;
    let l = &mut c.listen;
    l.gameagent = loopback();
    l.gamespy_udp = loopback();
    l.gamespy_tcp = loopback();
    l.teeworlds07 = loopback();
    l.teeworlds06 = loopback();
    l.mgmt = loopback();
    c
}

/// A master on the shared database, run on a spawned task.
struct Instance {
    handle: MasterHandle,
    pg: Arc<PgShared>,
    bound: Vec<Bound>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), MasterError>>,
}

impl Instance {
    fn start(c: Config) -> Self {
        Self::start_with(c, None)
    }

    fn start_with(c: Config, samples: Option<mpsc::UnboundedSender<PollSample>>) -> Self {
        let listeners = Listeners::bind(&c).unwrap();
        let bound = listeners.bound().unwrap();
        let mut master = Master::open(c, Timestamp::now())
            .unwrap()
            .with_cluster_settings(fast());
        if let Some(tx) = samples {
            master = master.with_poll_samples(tx);
        }
        let handle = master.handle();
        let pg = Arc::clone(master.shared_store().expect("a PostgreSQL store"));
        let (stop, rx) = oneshot::channel();
        let task = tokio::spawn(master.run(listeners, async {
            let _ = rx.await;
        }));
        Self {
            handle,
            pg,
            bound,
            stop,
            task,
        }
    }

    fn addr(&self, face: &str) -> SocketAddr {
        self.bound.iter().find(|b| b.face == face).unwrap().addr
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the instance stops")
            .unwrap()
            .unwrap();
    }

    /// Like kill -9: every task and database connection of the instance stops at once.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        self.pg.halt();
    }
}

/// Waits (up to 15 s) until `f` holds.
async fn until(mut f: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..150 {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn reg(game: &str, face: Face, addr: &str, proto: Protocol) -> Registration {
    let a: SocketAddr = addr.parse().unwrap();
    Registration {
        key: ServerKey::new(game, GameAddr::Ip(a)),
        face,
        game_port: Some(a.port()),
        query_addr: Some(a),
        query_protocol: Some(proto),
        source: SourceKey::of(a.ip()),
    }
}

fn opts() -> Options {
    Options {
        attempt_timeout: Duration::from_millis(500),
        retries: 2,
        deadline: Some(Duration::from_secs(5)),
        ..Options::default()
    }
}

async fn listed(source: &MasterSource) -> usize {
    list_one(source, &opts()).await.map_or(0, |l| l.len())
}

/// A management-server registration on a connection kept open (the record lives while the
/// connection does).
async fn mgmt_register(addr: SocketAddr, name: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let json = format!(
        "{{\"command\":\"msRegisterGameServer\",\"content\":{{\"serverName\":\"{name}\",\
         \"serverAddress\":\"127.0.0.9\",\"serverPort\":4000}}}}"
    );
    let frame = format!("{}{json}\n", json.len() + 1);
    s.write_all(frame.as_bytes()).await.unwrap();
    s
}

/// A GameSpy v1 server answering polls on loopback (until the task is dropped).
async fn fake_gamespy() -> (SocketAddr, AbortOnDrop) {
    use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
    use muster_proto::respond::{Reply, Responder as _, ServerState};
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let mut responder = GameSpyResponder::with_profile(Profile::Ut2003);
    let state = ServerState {
        name: "Leased".to_owned(),
        map: "DM-Rankin".to_owned(),
        max_players: 8,
        ..ServerState::default()
    };
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        let mut out: Vec<Reply> = Vec::new();
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            out.clear();
            let now = std::time::Instant::now();
            let _ = responder.handle_datagram(now, from, &buf[..n], &state, &mut out);
            for reply in &out {
                let _ = sock.send_to(&reply.bytes, reply.to).await;
            }
        }
    });
    (addr, AbortOnDrop(task))
}

/// `/healthz`'s status (`ok` is answered with 200, `degraded` with 503).
async fn health(http: SocketAddr) -> String {
    let (_, body) = get(http, "/healthz").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["status"].as_str().unwrap_or_default().to_owned()
}

/// Runs its closure when dropped (a failed assertion included).
struct Restart(Box<dyn Fn()>);

impl Drop for Restart {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_face_of_one_instance_lists_what_the_other_registered() {
    let Some(admin) = admin_url() else {
        return;
    };
    let _shared = CLUSTER.read().await;
    let url = database(&admin, "faces").await;
    let (da, db) = (TempDir::new("pg-faces-a"), TempDir::new("pg-faces-b"));
    let a = Instance::start(instance_config(&da, &url));
    let b = Instance::start(instance_config(&db, &url));

    // Registered on A, through its faces (DDNet over HTTP with the UDP challenge, the
    // management server over TCP) and through the handle (what the UDP faces call after their
    // proof: their own tests cover the wire).
    let game = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    crate::restart::ddnet_register(a.addr("http"), &game, "tw-0.6+udp", &body).await;
    let mut mgmt = mgmt_register(a.addr("mgmt"), "Feuerland").await;
    let now = Timestamp::now();
    for r in [
        reg(
            "serioussamse",
            Face::GameAgent,
            "127.0.0.2:25600",
            Protocol::GameAgent,
        ),
        reg("ut2", Face::GameSpy, "127.0.0.3:7778", Protocol::GameSpy1),
        reg(
            "teeworlds",
            Face::Teeworlds07,
            "127.0.0.4:8303",
            Protocol::Teeworlds,
        ),
    ] {
        assert_eq!(a.handle.register(r, now), Outcome::Added);
    }

    // B lists every one of them, on every face.
    let http = b.addr("http");
    assert!(
        until(async || get_json(http, "/api/v1/servers", 200).await["total"] == 5).await,
        "B's API lists the five records: {}",
        get_json(http, "/api/v1/servers", 200).await
    );
    let checks = [
        ("gameagent", MasterSource::GameAgent(b.addr("gameagent"))),
        (
            "gamespy",
            MasterSource::Gamespy(b.addr("gamespy-tcp"), Key::new(b"ut2".to_vec()).unwrap()),
        ),
        ("teeworlds", MasterSource::Teeworlds(b.addr("teeworlds07"))),
        ("mgmt", MasterSource::Mgmt(b.addr("mgmt"))),
        (
            "ddnet servers.json",
            MasterSource::Ddnet(Document::Url(format!(
                "http://{http}/ddnet/15/servers.json"
            ))),
        ),
        (
            "ut2003 text list",
            MasterSource::Ut2003Text(Document::Url(format!(
                "http://{http}/serverlist/full-all.txt"
            ))),
        ),
    ];
    for (what, source) in &checks {
        assert!(
            until(async || listed(source).await >= 1).await,
            "B's {what} list shows A's registration"
        );
    }
    let (status, text) = get(http, "/serverlist/full-all.txt").await;
    assert_eq!(status, 200);
    assert!(text.contains("127.0.0.3"), "{text}");

    // Unregistration: the management connection closes on A, the GameSpy record is removed
    // on A; both leave B's lists.
    mgmt.shutdown().await.unwrap();
    drop(mgmt);
    let gs = ServerKey::new("ut2", GameAddr::Ip("127.0.0.3:7778".parse().unwrap()));
    assert!(a.handle.remove(&gs).is_some());
    assert!(
        until(async || listed(&checks[3].1).await == 0).await,
        "the management record left B"
    );
    assert!(
        until(async || listed(&checks[1].1).await == 0).await,
        "the GameSpy record left B"
    );
    assert_eq!(get_json(http, "/api/v1/servers", 200).await["total"], 3);

    // And the other way round: B's registration reaches A.
    let r = reg(
        "serioussamse",
        Face::GameAgent,
        "127.0.0.5:25600",
        Protocol::GameAgent,
    );
    assert_eq!(b.handle.register(r, Timestamp::now()), Outcome::Added);
    let ga = MasterSource::GameAgent(a.addr("gameagent"));
    assert!(
        until(async || listed(&ga).await == 2).await,
        "A lists B's server"
    );

    let (ha, hb) = (
        get_json(a.addr("http"), "/healthz", 200).await,
        get_json(http, "/healthz", 200).await,
    );
    assert_eq!(
        (ha["status"].as_str(), hb["status"].as_str()),
        (Some("ok"), Some("ok"))
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_loses_nothing_acknowledged_and_its_connections_leave() {
    let Some(admin) = admin_url() else {
        return;
    };
    let _shared = CLUSTER.read().await;
    let url = database(&admin, "kill").await;
    let (da, db) = (TempDir::new("pg-kill-a"), TempDir::new("pg-kill-b"));
    let a = Instance::start(instance_config(&da, &url));
    let b = Instance::start(instance_config(&db, &url));

    // A DDNet registration acknowledged by A (`success` is sent once the row is committed),
    // and a management server connected to A.
    let game = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    crate::restart::ddnet_register(a.addr("http"), &game, "tw-0.6+udp", &body).await;
    let _mgmt = mgmt_register(a.addr("mgmt"), "Feuerland").await;
    let b_mgmt = MasterSource::Mgmt(b.addr("mgmt"));
    assert!(until(async || listed(&b_mgmt).await == 1).await);

    // kill -9 right after the acknowledgement. B follows the shared store on its own
    // schedule, so it may show the registration a moment later, but it must show it.
    a.kill().await;
    let b_json = async || get_json(b.addr("http"), "/ddnet/15/servers.json", 200).await;
    let shown = until(async || b_json().await["servers"].as_array().map(Vec::len) == Some(1)).await;
    assert!(shown, "B still lists it: {}", b_json().await);
    // A's connection died with it: B drops the record once A's heartbeat is too old.
    assert!(
        until(async || listed(&b_mgmt).await == 0).await,
        "the dead instance's management record left B"
    );
    let health = get_json(b.addr("http"), "/healthz", 200).await;
    assert_eq!(health["status"], "ok", "{health}");

    // A comes back (new node) and lists the acknowledged registration from the database.
    let a = Instance::start(instance_config(&da, &url));
    let json = get_json(a.addr("http"), "/ddnet/15/servers.json", 200).await;
    assert_eq!(json["servers"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(
        get_json(a.addr("http"), "/api/v1/servers", 200).await["total"],
        1
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_holds_a_poll_lease_until_it_stops_renewing() {
    let Some(admin) = admin_url() else {
        return;
    };
    let _shared = CLUSTER.read().await;
    let url = database(&admin, "lease").await;
    let a = PgShared::connect(&url, "a").unwrap();
    let b = PgShared::connect(&url, "b").unwrap();
    let (la, lb) = (PgLeases::new(Arc::clone(&a)), PgLeases::new(Arc::clone(&b)));
    let keys: Vec<ServerKey> = (1..=4)
        .map(|i| {
            ServerKey::new(
                "ut2",
                GameAddr::Ip(format!("127.0.0.1:{i}").parse().unwrap()),
            )
        })
        .collect();
    let lease = Duration::from_millis(1500);
    let got_a = la.claim(keys[..2].to_vec(), lease).await.unwrap();
    assert_eq!(got_a.granted.len(), 2);
    // B asks for all four: the two A holds are refused, with the time A has left.
    let got_b = lb.claim(keys.clone(), lease).await.unwrap();
    assert!(got_b.granted.iter().all(|k| keys[2..].contains(k)));
    assert_eq!(got_b.granted.len(), 2);
    assert_eq!(got_b.held.len(), 2);
    assert!(
        got_b
            .held
            .iter()
            .all(|(k, left)| keys[..2].contains(k) && *left <= lease)
    );
    // The holder renews its own lease.
    assert_eq!(
        la.claim(keys[..1].to_vec(), lease)
            .await
            .unwrap()
            .granted
            .len(),
        1
    );
    // A stops (kill -9: no renewal, no goodbye); once its lease ran out, B takes over.
    a.halt();
    let taken = until(async || {
        lb.claim(keys[..2].to_vec(), lease)
            .await
            .unwrap()
            .granted
            .len()
            == 2
    })
    .await;
    assert!(taken, "B holds A's leases after they expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_instances_servers_are_polled_by_another_within_an_interval() {
    let Some(admin) = admin_url() else {
        return;
    };
    let _shared = CLUSTER.read().await;
    let url = database(&admin, "takeover").await;
    let (fake, _answering) = fake_gamespy().await;
    let polling = |dir: &TempDir| {
        let mut c = instance_config(dir, &url);
        c.poller.enabled = true;
        c.poller.interval = muster_master::config::HumanDuration(Duration::from_secs(2));
        c
    };
    let (da, db) = (TempDir::new("pg-poll-a"), TempDir::new("pg-poll-b"));
    let (ta, mut sa) = mpsc::unbounded_channel();
    let a = Instance::start_with(polling(&da), Some(ta));
    let r = Registration {
        game_port: None,
        ..reg("ut2", Face::GameSpy, &fake.to_string(), Protocol::GameSpy1)
    };
    assert_eq!(a.handle.register(r, Timestamp::now()), Outcome::Added);
    // A polls it first (alone), so A holds its lease.
    let first = tokio::time::timeout(Duration::from_secs(10), sa.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(first.ok, "{first:?}");
    let (tb, mut sb) = mpsc::unbounded_channel();
    let b = Instance::start_with(polling(&db), Some(tb));
    // While A lives it keeps the lease: B does not poll the server.
    let a_again = tokio::time::timeout(Duration::from_secs(10), sa.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(a_again.ok);
    assert!(sb.try_recv().is_err(), "B polled a server A holds");
    a.kill().await;
    // Within one interval plus the lease margin (2 s + 1 s) of A's last poll, B polls it.
    let took = tokio::time::timeout(Duration::from_secs(8), sb.recv()).await;
    assert!(
        matches!(took, Ok(Some(ref s)) if s.ok),
        "B took the server over: {took:?}"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_degrades_health_and_the_instances_catch_up() {
    let Some(admin) = admin_url() else {
        return;
    };
    let Some(pg_dir) = env_or_skip("MUSTER_TEST_PG_DIR") else {
        return;
    };
    let _alone = CLUSTER.write().await;
    let url = database(&admin, "restart").await;
    let (da, db) = (TempDir::new("pg-restart-a"), TempDir::new("pg-restart-b"));
    let a = Instance::start(instance_config(&da, &url));
    let b = Instance::start(instance_config(&db, &url));
    let ga_b = MasterSource::GameAgent(b.addr("gameagent"));
    let now = Timestamp::now();
    let first = reg(
        "serioussamse",
        Face::GameAgent,
        "127.0.0.2:25600",
        Protocol::GameAgent,
    );
    assert_eq!(a.handle.register(first, now), Outcome::Added);
    assert!(until(async || listed(&ga_b).await == 1).await);

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg/cluster.sh");
    let pg_dir_again = pg_dir.clone();
    let ctl = |cmd: &str| {
        let st = std::process::Command::new("bash")
            .args([script, cmd, &pg_dir])
            .status()
            .unwrap();
        assert!(st.success(), "cluster.sh {cmd}");
    };
    ctl("stop");
    // Whatever happens below, the cluster is started again for the other tests.
    let _restart = Restart(Box::new(move || {
        let _ = std::process::Command::new("bash")
            .args([script, "start", &pg_dir_again])
            .status();
    }));
    // The database is gone: a registration on A is kept and retried, both instances say
    // degraded and go on serving the last known lists.
    let second = reg(
        "serioussamse",
        Face::GameAgent,
        "127.0.0.3:25600",
        Protocol::GameAgent,
    );
    assert_eq!(a.handle.register(second, Timestamp::now()), Outcome::Added);
    for i in [&a, &b] {
        let http = i.addr("http");
        assert!(
            until(async || health(http).await == "degraded").await,
            "{http} says degraded"
        );
    }
    assert_eq!(listed(&ga_b).await, 1, "B serves what it knew");
    assert_eq!(
        listed(&MasterSource::GameAgent(a.addr("gameagent"))).await,
        2
    );
    ctl("start");
    // Back: A writes what waited, B catches up, both are healthy again.
    assert!(
        until(async || listed(&ga_b).await == 2).await,
        "B caught up"
    );
    for i in [&a, &b] {
        let http = i.addr("http");
        assert!(
            until(async || health(http).await == "ok").await,
            "{http} is healthy again"
        );
    }
    // And a pg_ctl restart (the server goes away and comes back at once) in the middle of
    // traffic: registrations made around it all arrive.
    ctl("restart");
    let third = reg(
        "serioussamse",
        Face::GameAgent,
        "127.0.0.4:25600",
        Protocol::GameAgent,
    );
    assert_eq!(a.handle.register(third, Timestamp::now()), Outcome::Added);
    assert!(
        until(async || listed(&ga_b).await == 3).await,
        "B lists the third"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_database_stopped_nothing_is_acknowledged_until_committed() {
    use crate::acked::{DdnetServer, SUCCESS, listed_addresses};
    use tokio::io::AsyncReadExt as _;
    let Some(admin) = admin_url() else {
        return;
    };
    let Some(pg_dir) = env_or_skip("MUSTER_TEST_PG_DIR") else {
        return;
    };
    let _alone = CLUSTER.write().await;
    let url = database(&admin, "acked").await;
    let dir = TempDir::new("pg-acked");
    let a = Instance::start(instance_config(&dir, &url));
    // 503 after 2 s rather than the default 5 s: the test waits for several of them.
    a.handle.set_durable_timeout(Duration::from_secs(2));
    let http = a.addr("http");
    let body = muster_testkit::fixture(
        "teeworlds_master/ddnet-16.4-http-register/01-http-request-body.bin",
    );
    let first = DdnetServer::new(101).await;
    let token = first.challenge(http, &body).await;
    assert_eq!(first.post(http, Some(&token), &body).await.1, SUCCESS);

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg/cluster.sh");
    let pg_dir_again = pg_dir.clone();
    let ctl = |cmd: &str| {
        let st = std::process::Command::new("bash")
            .args([script, cmd, &pg_dir])
            .status()
            .unwrap();
        assert!(st.success(), "cluster.sh {cmd}");
    };
    ctl("stop");
    let _restart = Restart(Box::new(move || {
        let _ = std::process::Command::new("bash")
            .args([script, "start", &pg_dir_again])
            .status();
    }));

    // The database is gone: the registration is refused, and so is its retry (the record
    // waits in memory, not stored).
    let s = DdnetServer::new(102).await;
    let token = s.challenge(http, &body).await;
    for attempt in ["first", "retry"] {
        let (status, answer) = s.post(http, Some(&token), &body).await;
        assert_eq!(status, 503, "{attempt}: {answer}");
    }
    // A management server's answer after its registration waits for the database.
    let mut m = mgmt_register(a.addr("mgmt"), "Feuerland").await;
    let query = "{\"command\":\"msQueryGameServers\"}";
    m.write_all(format!("{}{query}\n", query.len() + 1).as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let early = tokio::time::timeout(Duration::from_secs(1), m.read(&mut buf)).await;
    assert!(early.is_err(), "answered before stored: {early:?}");

    ctl("start");
    // Back: the retry is acknowledged once the row is committed (503 until the store
    // reconnects), and the management answer goes out.
    let mut acked = false;
    // As long as before the durable timeout was a setting (6 tries of 5 s).
    for _ in 0..15 {
        let (status, answer) = s.post(http, Some(&token), &body).await;
        if answer == SUCCESS {
            acked = true;
            break;
        }
        assert_eq!(status, 503, "{answer}");
    }
    assert!(acked, "acknowledged once the database is back");
    let n = tokio::time::timeout(Duration::from_secs(30), m.read(&mut buf))
        .await
        .expect("answered once stored")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.contains("Feuerland"), "{answer}");

    // kill -9 and a new instance on the database: both acknowledged servers are there.
    a.kill().await;
    let a = Instance::start(instance_config(&dir, &url));
    let listed = listed_addresses(a.addr("http")).await;
    for srv in [&first, &s] {
        let want = format!("tw-0.6+udp://{}", srv.addr());
        assert!(
            listed.contains(&want),
            "{want} was acknowledged: {listed:?}"
        );
    }
    drop(m);
    a.stop().await;
}
