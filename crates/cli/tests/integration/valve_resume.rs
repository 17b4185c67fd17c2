//! `muster list -p valve --resume FILE`: a paged Valve master query cut short (by
//! `--max-pages`, or by a master that stops answering) is continued by the next run with the
//! same FILE, which asks from the last address the first run received instead of the zero
//! seed. The master is played by the test: a UDP socket on 127.0.0.1 that answers each
//! request with the three servers after the request's seed and records every seed. Each page
//! after the first comes at the masters' pace (2 s): the runs take that long.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_proto::valve_master::packet::SEED;
use muster_proto::valve_master::{ListReply, ListRequest};
use muster_testkit::process::ScratchDir;
use serde_json::Value;

/// The whole list: nine servers, three a page.
fn all() -> Vec<SocketAddr> {
    (1..=9u8)
        .map(|i| SocketAddr::from(([127, 0, 4, i], 27015)))
        .collect()
}

const PAGE: usize = 3;

/// A master answering at most `budget` requests (then silent); the seeds it was asked with.
fn fake_master(budget: usize) -> (SocketAddr, Arc<Mutex<Vec<SocketAddr>>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let seeds = Arc::new(Mutex::new(Vec::new()));
    let record = seeds.clone();
    std::thread::spawn(move || {
        let list = all();
        let mut answered = 0;
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let Ok(request) = ListRequest::decode(&buf[..n]) else {
                continue;
            };
            record.lock().unwrap().push(request.last);
            if answered >= budget {
                continue;
            }
            answered += 1;
            let start = if request.last == SEED {
                0
            } else {
                list.iter().position(|a| *a == request.last).unwrap() + 1
            };
            let end = (start + PAGE).min(list.len());
            let page = ListReply {
                key: None,
                servers: list[start..end].to_vec(),
                complete: end == list.len(),
            };
            socket.send_to(&page.encode(), from).unwrap();
        }
    });
    (addr, seeds)
}

fn muster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .output()
        .unwrap()
}

/// The addresses a `-f json` run printed.
fn addresses(out: &Output) -> Vec<SocketAddr> {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["address"].as_str().unwrap().parse().unwrap())
        .collect()
}

fn state(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn valve_list_capped_by_max_pages_resumes_from_its_last_address() {
    let dir = ScratchDir::new("valve-resume-cap");
    let file = dir.path().join("valve.resume");
    let f = file.to_str().unwrap();
    let (master, seeds) = fake_master(usize::MAX);
    let m = master.to_string();
    let list = all();

    let one = muster(&[
        "list",
        "-p",
        "valve",
        &m,
        "--resume",
        f,
        "--max-pages",
        "2",
        "-f",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&one.stderr);
    assert_eq!(one.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopped after 2 pages"), "{stderr}");
    assert_eq!(addresses(&one), list[..6]);
    assert_eq!(*seeds.lock().unwrap(), [SEED, list[2]]);
    let s = state(&file);
    assert_eq!(s["last"], list[5].to_string());
    assert_eq!(s["pages"], 2);
    assert_eq!(s["complete"], false);
    assert_eq!(s["filter"], "\\clver\\0.21");

    let two = muster(&["list", "-p", "valve", &m, "--resume", f, "-f", "json"]);
    let stderr = String::from_utf8_lossy(&two.stderr);
    assert_eq!(two.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("resuming the list after {}", list[5])),
        "{stderr}"
    );
    assert_eq!(
        *seeds.lock().unwrap(),
        [SEED, list[2], list[5]],
        "run 2 asks from run 1's last address"
    );
    let rest = addresses(&two);
    assert_eq!(rest, list[6..], "the rest, nothing run 1 printed");
    let s = state(&file);
    assert_eq!(s["complete"], true);
    assert_eq!(s["pages"], 3);
    assert_eq!(s["last"], list[8].to_string());
    // No temporary file is left beside the state.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // A complete list is asked again from the start.
    let three = muster(&[
        "list",
        "-p",
        "valve",
        &m,
        "--resume",
        f,
        "--max-pages",
        "1",
        "-f",
        "json",
    ]);
    assert_eq!(three.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&three.stderr).contains("was complete"));
    assert_eq!(seeds.lock().unwrap().last(), Some(&SEED));
    assert_eq!(addresses(&three), list[..3]);
}

#[test]
fn valve_list_cut_by_a_silent_master_resumes_at_another_and_checks_the_query() {
    let dir = ScratchDir::new("valve-resume-silent");
    let file = dir.path().join("valve.resume");
    let f = file.to_str().unwrap();
    let list = all();
    // This master answers the first page only.
    let (first, _) = fake_master(1);
    let timing = ["--timeout", "200ms", "--retries", "1"];
    let mut args = vec!["list", "-p", "valve"];
    let m1 = first.to_string();
    args.extend([m1.as_str(), "--resume", f, "-f", "json"]);
    args.extend(timing);
    let one = muster(&args);
    let stderr = String::from_utf8_lossy(&one.stderr);
    assert_eq!(
        one.status.code(),
        Some(1),
        "the list is not whole: {stderr}"
    );
    assert!(stderr.contains(&format!("holds {}", list[2])), "{stderr}");
    assert_eq!(addresses(&one), list[..3], "what came is printed");
    assert_eq!(state(&file)["last"], list[2].to_string());

    // Another query must not use this file.
    let other = muster(&["list", "-p", "valve", &m1, "-g", "cstrike", "--resume", f]);
    assert_eq!(other.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&other.stderr).contains("another query"));

    let (second, seeds) = fake_master(usize::MAX);
    let m2 = second.to_string();
    let two = muster(&["list", "-p", "valve", &m2, "--resume", f, "-f", "json"]);
    let stderr = String::from_utf8_lossy(&two.stderr);
    assert_eq!(two.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("going on at"), "{stderr}");
    assert_eq!(seeds.lock().unwrap()[0], list[2]);
    let mut every = addresses(&one);
    every.extend(addresses(&two));
    assert_eq!(every, list, "each server once over both runs");
}

#[test]
fn valve_list_interrupted_by_ctrl_c_prints_what_came_and_keeps_its_place() {
    let dir = ScratchDir::new("valve-resume-interrupt");
    let file = dir.path().join("valve.resume");
    let list = all();
    // One page, then silence: the run waits for page 2 (long retries) until interrupted.
    let (master, _) = fake_master(1);
    let child = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["list", "-p", "valve", &master.to_string(), "-f", "json"])
        .args(["--timeout", "30s", "--resume", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !file.exists() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(file.exists(), "the state is written after page 1");
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted after 1 page"), "{stderr}");
    assert_eq!(addresses(&out), list[..3], "page 1 is printed");
    assert_eq!(state(&file)["last"], list[2].to_string());
}
