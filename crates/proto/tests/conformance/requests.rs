//! What each client peer sends: the exact request bytes and the port it sends them to, captured on loopback
//! sockets the test owns (nothing answers), compared with the bytes the specs document and with the
//! committed captures in `tests/fixtures/peers/` (provenance in that folder's `README.md`).
//!
//! Each test gives the peer port P (socket 0) and also listens on P + 1 (socket 1), so the port offset the
//! peer applies is part of the assertion.

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::harness::net::{Datagram, tcp_listener};
use crate::harness::{Capture, Gamedig, Opengsq, Output, Qstat, check_capture_fixture};

/// `\status\` (gamespy1.md §11 Q1).
const STATUS: &[u8] = b"\\status\\";
/// `\status\xserverquery` (gamespy1.md §11 Q2, sent by gamedig and opengsq's `gamespy1`).
const STATUS_XSERVERQUERY: &[u8] = b"\\status\\xserverquery";
/// qstat's UE2 request: `78 00 00 00 00` (unreal2.md §15, qstat).
const UE2_QSTAT_INFO: &[u8] = &[0x78, 0, 0, 0, 0];
/// gamedig's and opengsq's UE2 requests: `79 00 00 00` + command 0 (details), 1 (rules), 2 (players).
const UE2_DETAILS: &[u8] = &[0x79, 0, 0, 0, 0];
const UE2_RULES: &[u8] = &[0x79, 0, 0, 0, 1];
const UE2_PLAYERS: &[u8] = &[0x79, 0, 0, 0, 2];
/// qstat `-tees`: `ff`×10 + `gie`, `gie2` + `00`, `gie3` + `00` (peers.md §3.4).
const TEES_GIE: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie";
const TEES_GIE2: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie2\x00";
const TEES_GIE3: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie3\x00";
/// qstat `-teem`: header `20 00 00 00 00 00`, then `ff ff ff ff` + `reqt` / `req2` (peers.md §3.4).
const TEEM_REQT: &[u8] = b"\x20\x00\x00\x00\x00\x00\xff\xff\xff\xffreqt";
const TEEM_REQ2: &[u8] = b"\x20\x00\x00\x00\x00\x00\xff\xff\xff\xffreq2";
/// qstat `-gsm,<game>`: gamespy-master.md §5.3.
const GSM_VALIDATE: &[u8] =
    b"\\gamename\\gamespy2\\gamever\\020109017\\location\\5\\validate\\12345678\\final\\";

/// Upper bound of one capture: generous for a loaded machine; a capture normally ends (and kills the peer)
/// as soon as the expected datagrams have arrived, well under a second.
const CAPTURE_LIMIT: Duration = Duration::from_secs(8);

/// Runs `peer(&capture, &stop)` in a thread while collecting `want` datagrams for at most [`CAPTURE_LIMIT`],
/// then sets `stop` so that the peer is killed instead of waiting out its own retries.
fn capture_while(
    want: usize,
    peer: impl FnOnce(&Capture, &AtomicBool) -> Output + Send,
) -> (Capture, Vec<Datagram>, Output) {
    let capture = Capture::consecutive(2);
    let stop = AtomicBool::new(false);
    let (got, out) = std::thread::scope(|s| {
        let run = s.spawn(|| peer(&capture, &stop));
        let got = capture.collect(want, CAPTURE_LIMIT);
        stop.store(true, Ordering::Relaxed);
        (got, run.join().expect("peer thread"))
    });
    (capture, got, out)
}

/// Asserts that the first `expected.len()` datagrams are `expected` (bytes and socket index) and saves each as
/// fixture `<stem>.bin` (one datagram) or `<stem>-<n>.bin`.
#[track_caller]
fn assert_requests(
    capture: &Capture,
    got: &[Datagram],
    out: &Output,
    expected: &[(usize, &[u8])],
    stem: &str,
) {
    assert!(
        got.len() >= expected.len(),
        "expected {} datagrams, got {got:?}\n{out}",
        expected.len()
    );
    for (n, ((index, bytes), d)) in expected.iter().zip(got).enumerate() {
        assert_eq!(
            (d.port, hex::encode(&d.bytes)),
            (capture.port(*index), hex::encode(bytes)),
            "datagram {n} (port {} = P+{index} expected)\nall: {got:?}\n{out}",
            capture.port(*index)
        );
        let name = if expected.len() == 1 {
            format!("{stem}.bin")
        } else {
            format!("{stem}-{}.bin", n + 1)
        };
        check_capture_fixture(&name, &d.bytes);
    }
}

fn qstat_capture(flag: &str, want: usize) -> Option<(Capture, Vec<Datagram>, Output)> {
    let qstat = Qstat::require()?;
    Some(capture_while(want, |c, stop| {
        let addr = c.addr(0);
        qstat.run_until(&[flag, &addr, "-json"], CAPTURE_LIMIT, stop)
    }))
}

#[test]
fn qstat_sms_sends_status_to_port_plus_one() {
    let Some((c, got, out)) = qstat_capture("-sms", 1) else {
        return;
    };
    assert_requests(&c, &got, &out, &[(1, STATUS)], "qstat-sms-request");
}

#[test]
fn qstat_gps_sends_status_to_given_port() {
    let Some((c, got, out)) = qstat_capture("-gps", 1) else {
        return;
    };
    assert_requests(&c, &got, &out, &[(0, STATUS)], "qstat-gps-request");
}

#[test]
fn qstat_uns_sends_status_to_port_plus_one() {
    let Some((c, got, out)) = qstat_capture("-uns", 1) else {
        return;
    };
    assert_requests(&c, &got, &out, &[(1, STATUS)], "qstat-uns-request");
}

#[test]
fn qstat_ut2s_sends_ue2_info_to_port_plus_one() {
    let Some((c, got, out)) = qstat_capture("-ut2s", 1) else {
        return;
    };
    assert_requests(&c, &got, &out, &[(1, UE2_QSTAT_INFO)], "qstat-ut2s-request");
}

#[test]
fn qstat_ut2004s_sends_ue2_info_to_port_plus_one() {
    let Some((c, got, out)) = qstat_capture("-ut2004s", 1) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(1, UE2_QSTAT_INFO)],
        "qstat-ut2004s-request",
    );
}

/// qstat sends its three `-tees` variants together, in this order (peers.md §3.4); only the `gie3` one is
/// answerable.
#[test]
fn qstat_tees_sends_gie_gie2_gie3_at_once() {
    let Some((c, got, out)) = qstat_capture("-tees", 3) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, TEES_GIE), (0, TEES_GIE2), (0, TEES_GIE3)],
        "qstat-tees-request",
    );
    let gap = got
        .get(2)
        .map(|d| d.at)
        .unwrap_or_default()
        .saturating_sub(got.first().map(|d| d.at).unwrap_or_default());
    assert!(
        gap < Duration::from_millis(200),
        "gie..gie3 took {gap:?}; expected one burst"
    );
}

#[test]
fn qstat_teem_sends_reqt_and_req2_with_0x20_header() {
    let Some((c, got, out)) = qstat_capture("-teem", 2) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, TEEM_REQT), (0, TEEM_REQ2)],
        "qstat-teem-request",
    );
}

/// Reads what a TCP client sends until `done` holds, the client closes, or `limit` passes.
fn read_tcp_until(
    listener: &TcpListener,
    limit: Duration,
    done: impl Fn(&[u8]) -> bool,
) -> Vec<u8> {
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    let start = Instant::now();
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(_) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("no TCP connection within {limit:?}: {e}"),
        }
    };
    stream.set_nonblocking(false).expect("blocking stream");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !done(&got) && start.elapsed() < limit {
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(_) => {}
        }
    }
    got
}

/// `-gsm,<game>` connects over TCP and sends its dummy validate and the list request at once, without waiting
/// for the master's `\secure\` greeting.
#[test]
fn qstat_gsm_sends_dummy_validate_and_list_without_greeting() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let listener = tcp_listener();
    let addr = listener.local_addr().expect("local addr").to_string();
    let stop = AtomicBool::new(false);
    let (got, out) = std::thread::scope(|s| {
        let run =
            s.spawn(|| qstat.run_until(&["-gsm,serioussam", &addr, "-json"], CAPTURE_LIMIT, &stop));
        let got = read_tcp_until(&listener, CAPTURE_LIMIT, |b| {
            b.ends_with(b"\\list\\\\gamename\\serioussam\\final\\")
        });
        stop.store(true, Ordering::Relaxed);
        (got, run.join().expect("qstat thread"))
    });
    let mut expected = GSM_VALIDATE.to_vec();
    expected.extend_from_slice(b"\\list\\\\gamename\\serioussam\\final\\");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected),
        "\n{out}"
    );
    check_capture_fixture("qstat-gsm-serioussam-request.bin", &got);
}

fn gamedig_capture(
    game: &str,
    given_port_only: bool,
    want: usize,
) -> Option<(Capture, Vec<Datagram>, Output)> {
    let gamedig = Gamedig::require()?;
    Some(capture_while(want, |c, stop| {
        let addr = c.addr(0);
        let mut args = vec!["--type", game, "--socketTimeout", "300"];
        if given_port_only {
            args.push("--givenPortOnly");
        }
        args.push(&addr);
        gamedig.run_until(&args, CAPTURE_LIMIT, stop)
    }))
}

#[test]
fn gamedig_serioussam_sends_status_xserverquery() {
    let Some((c, got, out)) = gamedig_capture("serioussam", true, 1) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, STATUS_XSERVERQUERY)],
        "gamedig-serioussam-request",
    );
}

#[test]
fn gamedig_sstse_sends_status_xserverquery() {
    let Some((c, got, out)) = gamedig_capture("sstse", true, 1) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, STATUS_XSERVERQUERY)],
        "gamedig-sstse-request",
    );
}

/// Without `--givenPortOnly` gamedig treats the port as the game port: query port + 1 first, then the port.
#[test]
fn gamedig_sstse_without_given_port_only_tries_port_plus_one_then_port() {
    let Some((c, got, out)) = gamedig_capture("sstse", false, 2) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(1, STATUS_XSERVERQUERY), (0, STATUS_XSERVERQUERY)],
        "gamedig-sstse-gameport-request",
    );
}

#[test]
fn gamedig_unrealtournament2003_sends_ue2_details() {
    let Some((c, got, out)) = gamedig_capture("unrealtournament2003", true, 1) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, UE2_DETAILS)],
        "gamedig-unrealtournament2003-request",
    );
}

#[test]
fn gamedig_unrealtournament2004_sends_ue2_details() {
    let Some((c, got, out)) = gamedig_capture("unrealtournament2004", true, 1) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, UE2_DETAILS)],
        "gamedig-unrealtournament2004-request",
    );
}

#[test]
fn gamedig_unrealtournament2004_without_given_port_only_tries_port_plus_one_then_port() {
    let Some((c, got, out)) = gamedig_capture("unrealtournament2004", false, 2) else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(1, UE2_DETAILS), (0, UE2_DETAILS)],
        "gamedig-unrealtournament2004-gameport-request",
    );
}

fn opengsq_capture(protocol: &str, function: &str) -> Option<(Capture, Vec<Datagram>, Output)> {
    let opengsq = Opengsq::require()?;
    Some(capture_while(1, |c, stop| {
        let port = c.port(0).to_string();
        opengsq.run_until(
            &[
                protocol,
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--function",
                function,
                "--timeout",
                "1",
            ],
            CAPTURE_LIMIT,
            stop,
        )
    }))
}

#[test]
fn opengsq_ssc_sends_plain_status() {
    let Some((c, got, out)) = opengsq_capture("ssc", "get_status") else {
        return;
    };
    assert_requests(&c, &got, &out, &[(0, STATUS)], "opengsq-ssc-request");
}

#[test]
fn opengsq_gamespy1_sends_status_xserverquery() {
    let Some((c, got, out)) = opengsq_capture("gamespy1", "get_status") else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, STATUS_XSERVERQUERY)],
        "opengsq-gamespy1-request",
    );
}

#[test]
fn opengsq_unreal2_get_details_sends_command_0() {
    let Some((c, got, out)) = opengsq_capture("unreal2", "get_details") else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, UE2_DETAILS)],
        "opengsq-unreal2-details-request",
    );
}

#[test]
fn opengsq_unreal2_get_rules_sends_command_1() {
    let Some((c, got, out)) = opengsq_capture("unreal2", "get_rules") else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, UE2_RULES)],
        "opengsq-unreal2-rules-request",
    );
}

#[test]
fn opengsq_unreal2_get_players_sends_command_2() {
    let Some((c, got, out)) = opengsq_capture("unreal2", "get_players") else {
        return;
    };
    assert_requests(
        &c,
        &got,
        &out,
        &[(0, UE2_PLAYERS)],
        "opengsq-unreal2-players-request",
    );
}

/// A timed-out opengsq query reports `opengsq: error: timed out` on stderr and exits non-zero (peers.md §7).
#[test]
fn opengsq_timeout_is_an_error_exit() {
    let Some(opengsq) = Opengsq::require() else {
        return;
    };
    let silent = Capture::consecutive(1);
    let port = silent.port(0).to_string();
    let out = opengsq.run_for(
        &[
            "ssc",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--function",
            "get_status",
            "--timeout",
            "1",
        ],
        CAPTURE_LIMIT,
    );
    assert!(!out.success() && !out.timed_out(), "{out}");
    assert!(
        out.stderr_text().contains("opengsq: error: timed out"),
        "{out}"
    );
}
