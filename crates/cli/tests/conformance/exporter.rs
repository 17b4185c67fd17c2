//! Prometheus itself (Debian's `prometheus`) scrapes `muster exporter` through a
//! blackbox-style job: one `/probe` job, every game server a static target whose protocol
//! becomes the `protocol` parameter by relabelling. A server of every family shows up with
//! its players and ping; a server that dies reads `muster_probe_success 0` from the first
//! scrape after its death.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use muster_testkit::{Missing, require, which};
use serde_json::Value;

/// A child process killed when dropped.
struct Proc(Child);

impl Proc {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Debian's Prometheus server: `prometheus` on PATH.
fn find_prometheus() -> Result<PathBuf, Missing> {
    which("prometheus").ok_or_else(|| Missing {
        peer: "prometheus",
        detail: "no prometheus on PATH; Debian package prometheus".to_owned(),
    })
}

/// Start `muster <args>` and read its first `listening … <addr>` line.
fn muster(args: &[&str]) -> (Proc, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = lines.next().expect("a listening line").expect("utf-8");
    let addr = line
        .rsplit(' ')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("not a listening line: {line}"));
    // The rest of stdout is drained so the child never blocks on it.
    std::thread::spawn(move || lines.for_each(drop));
    (Proc(child), addr)
}

/// Percent-encode everything but letters and digits (enough for PromQL in a query string).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// GET over HTTP/1.0 (no chunking): status and body.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// The result of an instant PromQL query (`data.result`), empty while Prometheus has none.
fn query(prom: SocketAddr, promql: &str) -> Vec<Value> {
    let Some((200, body)) = get(prom, &format!("/api/v1/query?query={}", encode(promql))) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The value of an instant vector's only series (`None`: no such series yet).
fn one(prom: SocketAddr, promql: &str) -> Option<f64> {
    let r = query(prom, promql);
    let [s] = r.as_slice() else { return None };
    s["value"][1].as_str()?.parse().ok()
}

/// Emulated servers, one per family: protocol, players.
const SERVERS: [(&str, u32); 6] = [
    ("gameagent", 2),
    ("gamespy1", 3),
    ("unreal2", 4),
    ("teeworlds", 5),
    ("quake3", 6),
    ("a2s", 7),
];

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

#[test]
fn prometheus_scrapes_every_family_through_the_exporter_and_sees_a_death() {
    let Some(prometheus) = require(find_prometheus()) else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("muster-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();

    let mut servers = Vec::new();
    let mut targets = String::new();
    for (protocol, players) in SERVERS {
        let port = muster_testkit::net::udp_consecutive(2)[0]
            .local_addr()
            .unwrap()
            .port();
        let (p, _) = muster(&[
            "emulate",
            "-p",
            protocol,
            "--port",
            &port.to_string(),
            "--players",
            &players.to_string(),
            "--name",
            &format!("{protocol} box"),
        ]);
        servers.push((protocol, p));
        targets.push_str(&format!(
            "      - targets: ['127.0.0.1:{port}']\n        labels: {{protocol: {protocol}}}\n"
        ));
    }
    let (_exporter, exporter) = muster(&["exporter", "--listen", "127.0.0.1:0"]);

    // The blackbox exporter's pattern: the target becomes the `target` parameter (and label),
    // the protocol label the `protocol` parameter, and the exporter is what is scraped.
    let config = [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "scrape_configs:",
        "  - job_name: muster",
        "    metrics_path: /probe",
        "    static_configs:",
        targets.trim_end(),
        "    relabel_configs:",
        "      - source_labels: [__address__]",
        "        target_label: __param_target",
        "      - source_labels: [__param_target]",
        "        target_label: target",
        "      - source_labels: [protocol]",
        "        target_label: __param_protocol",
        "      - target_label: __address__",
        &format!("        replacement: '{exporter}'"),
    ]
    .join("\n");
    let config_path = scratch.join("prometheus.yml");
    std::fs::write(&config_path, &config).unwrap();
    let web = muster_testkit::net::tcp_listener().local_addr().unwrap();
    let log = std::fs::File::create(scratch.join("prometheus.log")).unwrap();
    let _prometheus = Proc(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                scratch.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let prom_log = || std::fs::read_to_string(scratch.join("prometheus.log")).unwrap_or_default();

    // Every family: the exporter scraped (`up`), the server answered, its players and ping.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (protocol, players) in SERVERS {
        let sel = format!("{{job=\"muster\",protocol=\"{protocol}\"}}");
        loop {
            let up = one(web, &format!("up{sel}"));
            let success = one(web, &format!("muster_probe_success{sel}"));
            let seen = one(web, &format!("muster_server_players{sel}"));
            let ping = one(web, &format!("muster_server_ping_seconds{sel}"));
            if up == Some(1.0) && success == Some(1.0) && seen.is_some() && ping.is_some() {
                assert_eq!(seen, Some(f64::from(players)), "{protocol}");
                assert!(ping.is_some_and(|p| p > 0.0), "{protocol}: {ping:?}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{protocol}: up {up:?}, success {success:?}, players {seen:?}, ping {ping:?}\n{config}\n{}",
                prom_log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let target = &query(web, &format!("muster_server_info{sel}"));
        assert_eq!(target.len(), 1, "{protocol}: {target:?}");
        assert_eq!(target[0]["metric"]["name"], format!("{protocol} box"));
        assert!(
            target[0]["metric"]["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("127.0.0.1:")),
            "{target:?}"
        );
    }

    // One server dies: the first scrape that starts after it is gone says 0, and the
    // scrape itself still succeeds (`up` stays 1: the exporter answered).
    let (dead, mut process) = servers.remove(4);
    assert_eq!(dead, "quake3");
    process.kill();
    let died = unix_now();
    let sel = "{job=\"muster\",protocol=\"quake3\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let r = query(web, &format!("muster_probe_success{sel}[30s]"));
        let samples: Vec<(f64, String)> = r
            .first()
            .and_then(|s| s["values"].as_array())
            .map(|v| {
                v.iter()
                    .filter_map(|p| Some((p[0].as_f64()?, p[1].as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let later: Vec<&(f64, String)> = samples.iter().filter(|(t, _)| *t > died).collect();
        if let Some(first) = later.first() {
            break (*first).clone();
        }
        assert!(
            Instant::now() < deadline,
            "no scrape after the death: {samples:?}\n{}",
            prom_log()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(
        after.1, "0",
        "the first scrape after the death at {died}: {after:?}"
    );
    let ups = query(web, &format!("up{sel}[30s]"));
    let ups: Vec<&Value> = ups[0]["values"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|p| p[0].as_f64().is_some_and(|t| t > died))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !ups.is_empty() && ups.iter().all(|p| p[1] == "1"),
        "{ups:?}"
    );
    // The others are still up.
    assert_eq!(
        one(web, "muster_probe_success{job=\"muster\",protocol=\"a2s\"}"),
        Some(1.0)
    );
    drop(servers);
    let _ = std::fs::remove_dir_all(&scratch);
}
