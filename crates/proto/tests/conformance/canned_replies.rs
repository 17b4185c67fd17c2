//! The "peer reads our bytes" half of the harness: the test owns the server socket, answers the peer's request
//! with hand-written (spec) or captured (real server) bytes, and checks what the peer made of them. Once the
//! codecs land, the same shape checks Muster's encoders.

use std::time::Duration;

use crate::harness::net::Datagram;
use crate::harness::net::loopback;
use crate::harness::{Capture, Gamedig, Opengsq, Qstat, fixture};

/// The Serious Sam 1.10 `\status\` reply of gamespy1.md §9.2, no players (374 bytes), up to the trailer.
const SS_STATUS_HEAD: &str = "\\gamename\\serioussamse\\gamever\\1.10\\location\\Heartland\\hostname\\Awesome Server\
\\hostport\\25600\\mapname\\Yodeller\\gametype\\Fragmatch\\activemod\\\\numplayers\\0\\maxplayers\\16\
\\gamemode\\openplaying\\difficulty\\Normal\\friendlyfire\\0\\weaponsstay\\1\\ammosstay\\0\
\\healthandarmorstays\\0\\allowhealth\\1\\allowarmor\\1\\infinitearmor\\0\\respawninplace\\1\\password\\0\
\\vipplayers\\1";
/// The two players of gamespy1.md §9.2.
const SS_STATUS_PLAYERS: &str =
    "\\player_0\\^oSam^r\\frags_0\\3\\ping_0\\40\\player_1\\^oKenny^r\\frags_1\\1\\ping_1\\70";
/// The Serious Sam trailer.
const SS_STATUS_TRAILER: &str = "\\final\\\\queryid\\333.1";

/// The 374-byte no-player reply (gamespy1.md §11 Q3).
fn ss_status_empty() -> Vec<u8> {
    format!("{SS_STATUS_HEAD}{SS_STATUS_TRAILER}").into_bytes()
}

/// The 450-byte two-player reply (gamespy1.md §9.2).
fn ss_status_two_players() -> Vec<u8> {
    let head = SS_STATUS_HEAD.replace("\\numplayers\\0\\", "\\numplayers\\2\\");
    format!("{head}{SS_STATUS_PLAYERS}{SS_STATUS_TRAILER}").into_bytes()
}

#[test]
fn canned_serioussam_status_replies_have_spec_sizes() {
    assert_eq!(ss_status_empty().len(), 374);
    assert_eq!(ss_status_two_players().len(), 450);
}

/// Serves `reply` to every datagram equal to `request` on socket 0 while `peer` runs (the peer's own timeout
/// bounds the run); returns the peer's run and every datagram it sent.
fn serve<T: Send>(
    request: &[u8],
    reply: &[u8],
    peer: impl FnOnce(&Capture) -> T + Send,
) -> (T, Vec<Datagram>) {
    let capture = Capture::consecutive(1);
    std::thread::scope(|s| {
        let run = s.spawn(|| peer(&capture));
        let mut got = Vec::new();
        // Answer until the peer exits: collect one datagram at a time with a short window.
        while !run.is_finished() {
            got.extend(
                capture.collect_answering(1, Duration::from_millis(50), |d| {
                    (d.bytes == request).then(|| vec![reply.to_vec()])
                }),
            );
        }
        (run.join().expect("peer thread"), got)
    })
}

#[test]
fn qstat_gps_reads_canned_serioussam_status() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let limit = Duration::from_secs(8);
    let (out, got) = serve(b"\\status\\", &ss_status_two_players(), |c| {
        qstat.run_for(&["-json", "-P", "-R", "-gps", &c.addr(0)], limit)
    });
    assert!(!got.is_empty(), "qstat sent nothing\n{out}");
    let v = out.json();
    let s = &v[0];
    assert_eq!(s["status"], "online", "{out}");
    assert_eq!(s["name"], "Awesome Server", "{out}");
    assert_eq!(s["map"], "Yodeller", "{out}");
    assert_eq!(
        (s["numplayers"].as_u64(), s["maxplayers"].as_u64()),
        (Some(2), Some(16)),
        "{out}"
    );
    let names: Vec<&str> = s["players"].as_array().map_or_else(Vec::new, |p| {
        p.iter().filter_map(|p| p["name"].as_str()).collect()
    });
    assert_eq!(names.len(), 2, "{out}");
    assert!(
        names.iter().any(|n| n.contains("Sam")) && names.iter().any(|n| n.contains("Kenny")),
        "{out}"
    );
    assert_eq!(s["rules"]["gamename"], "serioussamse", "{out}");
}

#[test]
fn qstat_gps_raw_reads_canned_serioussam_status() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let limit = Duration::from_secs(8);
    let (out, _) = serve(b"\\status\\", &ss_status_empty(), |c| {
        qstat.run_for(&["-raw", ",", "-gps", &c.addr(0)], limit)
    });
    let line = out.stdout_text();
    let fields: Vec<&str> = line.trim_end().split(',').collect();
    assert_eq!(fields.get(2), Some(&"Awesome Server"), "{out}");
    assert!(line.contains("Yodeller"), "{out}");
}

#[test]
fn gamedig_serioussam_reads_canned_status() {
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let limit = Duration::from_secs(8);
    let (out, _) = serve(b"\\status\\xserverquery", &ss_status_two_players(), |c| {
        gamedig.run_for(
            &[
                "--type",
                "serioussam",
                "--givenPortOnly",
                "--socketTimeout",
                "1000",
                &c.addr(0),
            ],
            limit,
        )
    });
    let v = out.json();
    assert_eq!(v["name"], "Awesome Server", "{out}");
    assert_eq!(v["map"], "Yodeller", "{out}");
    assert_eq!(v["maxplayers"], 16, "{out}");
    assert_eq!(v["players"].as_array().map(Vec::len), Some(2), "{out}");
}

#[test]
fn opengsq_ssc_reads_canned_status() {
    let Some(opengsq) = Opengsq::require() else {
        return;
    };
    let limit = Duration::from_secs(8);
    let (out, _) = serve(b"\\status\\", &ss_status_two_players(), |c| {
        let port = c.port(0).to_string();
        opengsq.run_for(
            &[
                "ssc",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--function",
                "get_status",
                "--timeout",
                "2",
            ],
            limit,
        )
    });
    assert!(out.success(), "{out}");
    let text = out.stdout_text();
    assert!(
        text.contains("Awesome Server") && text.contains("Yodeller"),
        "{out}"
    );
}

/// qstat `-tees` reads a real DDNet 16.4 0.6 reply (`fixtures/peers/ddnet-16.4-vanilla-p0-reply.bin`) served
/// by the test, answering only the `gie3` datagram as a real server does.
#[test]
fn qstat_tees_reads_captured_ddnet_reply() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let reply = fixture("peers/ddnet-16.4-vanilla-p0-reply.bin");
    let gie3 = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie3\x00";
    let limit = Duration::from_secs(8);
    let (out, _) = serve(gie3, &reply, |c| {
        qstat.run_for(&["-json", "-tees", &c.addr(0)], limit)
    });
    let v = out.json();
    let s = &v[0];
    assert_eq!(s["status"], "online", "{out}");
    assert_eq!(s["name"], "DDNet Lab ncd  | a;b \"q\"  [0/64]", "{out}");
    assert_eq!(s["map"], "Tutorial", "{out}");
    assert_eq!(
        (s["numplayers"].as_u64(), s["maxplayers"].as_u64()),
        (Some(0), Some(16)),
        "{out}"
    );
}

/// The one-call helpers the codec-level tests will use: `Qstat::query` (`-sms` with `-noportoffset`).
#[test]
fn qstat_query_helper_reads_canned_sms_status() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let (v, _) = serve(b"\\status\\", &ss_status_two_players(), |c| {
        qstat.query("sms", loopback(c.port(0)))
    });
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["name"], "Awesome Server", "{v}");
    assert_eq!(v["numplayers"], 2, "{v}");
}

/// `Gamedig::query` (`sstse`, `--givenPortOnly`).
#[test]
fn gamedig_query_helper_reads_canned_sstse_status() {
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let (v, _) = serve(b"\\status\\xserverquery", &ss_status_empty(), |c| {
        gamedig.query("sstse", loopback(c.port(0)))
    });
    assert_eq!(v["name"], "Awesome Server", "{v}");
    assert_eq!(v["map"], "Yodeller", "{v}");
    assert_eq!(v["players"].as_array().map(Vec::len), Some(0), "{v}");
}

/// `Opengsq::query` (`gamespy1`, which sends `\status\xserverquery`).
#[test]
fn opengsq_query_helper_reads_canned_gamespy1_status() {
    let Some(opengsq) = Opengsq::require() else {
        return;
    };
    let (v, _) = serve(b"\\status\\xserverquery", &ss_status_two_players(), |c| {
        opengsq.query("gamespy1", "get_status", loopback(c.port(0)))
    });
    let v = v.unwrap_or_else(|out| panic!("opengsq failed\n{out}"));
    let text = v.to_string();
    assert!(
        text.contains("Awesome Server") && text.contains("Yodeller"),
        "{v}"
    );
}
