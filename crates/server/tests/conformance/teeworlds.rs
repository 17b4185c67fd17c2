//! Conformance of the teeworlds responder with real client peers.
//!
//! qstat 2.17 `-tees` speaks only the 0.6 vanilla family (`gie3` → `inf3`), so it sees DDNet's
//! 16-client shaping (spec §5.3). Known qstat manglings (`docs/protocols/peers.md` §3.4),
//! asserted as they are:
//! * `-json` drops every non-ASCII character of the server name; `-raw` keeps it byte-exact,
//!   so the exact name is checked there.
//! * The player list is mis-parsed: qstat lists `numplayers` entries whose names are other
//!   fields of the records (clan, country, score…), walking the records from the wrong end.
//!   It also clears the high bit of non-ASCII bytes in player names (`Jürgen` → `JC<rgen`).
//!   The tests pin this wrong output so a change in our bytes shows.
//!
//! gamedig and opengsq do not support Teeworlds (spec §14). The browse-token −1 probe (spec
//! §13.3) runs here too, from a raw socket, followed by a normal query that must still answer.
//!
//! A live DDNet-Server 16.4 with the lab configuration and our responder configured with the
//! same state get the same requests (every family, and every answered probe of spec §11);
//! the replies must be equal byte for byte (0.7: after the header, whose tokens differ).
//! The same holds for a live teeworlds-server 0.7.5 and the 0.7 flow.

use std::net::SocketAddr;
use std::time::Duration;

use muster_proto::respond::{PlayerState, ServerState};
use muster_proto::teeworlds::{
    Datagram, Header, Message, ResponderConfig, TeeworldsResponder, TokenMessage,
};
use muster_testkit::net::{client_socket, request_reply};
use muster_testkit::servers::{TOKEN_07, info_request_07, server_token_07, token_request_07};
use muster_testkit::{DdnetServer, Qstat, TeeworldsServer, fixture, free_udp_port};
use serde_json::json;
use tokio::net::UdpSocket;

use crate::support::serve_loopback;

const SERVER_NAME: &str = "Muster Lab Ünïcödé ★ | a;b 名前";

fn lab_state(players: usize, max_players: u32) -> ServerState {
    let names = ["alice", "bob", "Jürgen", "名前", "carol", "dave", "eve"];
    ServerState {
        name: SERVER_NAME.into(),
        map: "ctf5".into(),
        game_type: "CTF".into(),
        version: "0.6.4".into(),
        max_players,
        players: (0..players)
            .map(|i| PlayerState {
                name: names
                    .get(i)
                    .map_or_else(|| format!("p{i}"), |n| (*n).to_owned()),
                clan: if i == 1 { "LAB".into() } else { String::new() },
                country: if i == 1 { 276 } else { -1 },
                score: i64::try_from(i).unwrap() * 10,
                spectator: i == 6,
                ..PlayerState::default()
            })
            .collect(),
        ..ServerState::default()
    }
}

fn responder() -> TeeworldsResponder {
    TeeworldsResponder::new(ResponderConfig::default(), *b"conformance seed")
}

/// `quakestat -raw , -P -retry 1 -tees <addr>`: the server line's fields and the player lines.
async fn qstat_raw(qstat: Qstat, addr: SocketAddr) -> (Vec<String>, Vec<String>) {
    let target = addr.to_string();
    let out = tokio::task::spawn_blocking(move || {
        qstat.run(&["-raw", ",", "-P", "-retry", "1", "-tees", &target])
    })
    .await
    .unwrap();
    let text = out.stdout_text();
    let mut lines = text.lines().filter(|l| !l.is_empty());
    let server = lines
        .next()
        .unwrap_or_else(|| panic!("no output\n{out}"))
        .split(',')
        .map(str::to_owned)
        .collect();
    (server, lines.map(str::to_owned).collect())
}

#[tokio::test]
async fn qstat_tees_json_reads_the_responder() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let served = serve_loopback(responder(), lab_state(7, 16), 0).await;
    let addr = served.addr;
    let v = tokio::task::spawn_blocking(move || qstat.query("tees", addr))
        .await
        .unwrap();
    assert_eq!(v["status"], "online");
    // qstat's -json drops the non-ASCII characters: "Ünïcödé ★" → "ncd ", "名前" → "".
    assert_eq!(v["name"], "Muster Lab ncd  | a;b ");
    assert_eq!(v["map"], "ctf5");
    assert_eq!(v["gametype"], "CTF");
    assert_eq!(v["numplayers"], 6, "num_players: 7 clients, one spectator");
    assert_eq!(v["maxplayers"], 16);
    // Only the `gie3` of qstat's three datagrams is answerable (as with DDNet 16.4).
    assert_eq!(v["retries"], 2);
    // qstat's player parsing is wrong (see the module docs); this pins its output for the
    // records alice|""|-1|0|1, bob|LAB|276|10|1, Jürgen|""|-1|20|1, … .
    assert_eq!(
        v["players"],
        json!([
            {"name": "JC<rgen", "score": 0},
            {"name": "10", "score": 1},
            {"name": "LAB", "score": 276},
            {"name": "1", "score": 0},
            {"name": "-1", "score": 0},
            {"name": "alice", "score": 0},
        ])
    );
}

#[tokio::test]
async fn qstat_tees_raw_keeps_the_exact_utf8_name() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let served = serve_loopback(responder(), lab_state(7, 16), 0).await;
    let (server, players) = qstat_raw(qstat, served.addr).await;
    // TEES, address, name, map, max players, players, ping, retries.
    assert_eq!(
        server.get(..6).unwrap(),
        [
            "TEES",
            &served.addr.to_string(),
            SERVER_NAME,
            "ctf5",
            "16",
            "6"
        ]
    );
    // The same mis-parsed player list as in -json.
    assert_eq!(players, ["JC<rgen", "10", "LAB", "1", "-1", "alice"]);
}

#[tokio::test]
async fn qstat_tees_sees_ddnet_shaping_of_a_64_slot_server() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let mut state = lab_state(64, 64);
    for p in &mut state.players {
        p.spectator = false;
    }
    let served = serve_loopback(responder(), state, 0).await;
    let (server, _) = qstat_raw(qstat, served.addr).await;
    // Capped counts (16/16) and the " [clients/max]" suffix with the real numbers.
    assert_eq!(
        server.get(2..6).unwrap(),
        [&format!("{SERVER_NAME} [64/64]"), "ctf5", "16", "16"]
    );
}

async fn recv(socket: &UdpSocket) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 2048];
    match tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buf)).await {
        Ok(Ok(n)) => {
            buf.truncate(n);
            Some(buf)
        }
        _ => None,
    }
}

/// Spec §13.3: the probe that crashed teeworlds 0.7.5, with our token in offsets 1..4.
#[tokio::test]
async fn browse_token_minus1_probe_then_a_normal_query_still_answers() {
    let served = serve_loopback(responder(), lab_state(7, 16), 0).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(served.addr).await.unwrap();

    let mut request = Vec::new();
    TokenMessage::request([0xc0, 0xff, 0xee, 0x02]).encode(&mut request);
    socket.send(&request).await.unwrap();
    let reply = recv(&socket).await.expect("token reply");
    let Ok(Datagram::Token(token)) = Datagram::decode(&reply) else {
        panic!("not a token reply: {reply:02x?}")
    };
    let server_token = token.own_token;

    let mut probe =
        fixture("teeworlds/probes/probe-tw07-07-connless-browse-token-minus1-request.bin");
    probe.splice(1..5, server_token);
    socket.send(&probe).await.unwrap();
    // Either nothing or a well-formed reply echoing -1; ours answers.
    let reply = recv(&socket).await.expect("reply to browse token -1");
    let Ok(Datagram::Connless(header, Message::Info7(info))) = Datagram::decode(&reply) else {
        panic!("not a 0.7 inf3: {reply:02x?}")
    };
    assert_eq!(
        header,
        Header::Sixup {
            token: [0xc0, 0xff, 0xee, 0x02],
            response_token: server_token
        }
    );
    assert_eq!(info.browse_token, -1);
    let body = info.body.expect("body");
    assert_eq!(body.name.as_bytes(), SERVER_NAME.as_bytes());
    assert_eq!(body.players.len(), 7);

    // The next normal query (browse token 200) is answered.
    let mut normal = probe.clone();
    normal.truncate(17);
    normal.extend_from_slice(&[0x88, 0x03]);
    socket.send(&normal).await.unwrap();
    let reply = recv(&socket).await.expect("reply to the next query");
    let Ok(Datagram::Connless(_, Message::Info7(info))) = Datagram::decode(&reply) else {
        panic!("not a 0.7 inf3: {reply:02x?}")
    };
    assert_eq!(info.browse_token, 200);
}

/// The state of the lab DDNet server (`DdnetServer::config`), empty.
fn ddnet_lab() -> (ServerState, ResponderConfig) {
    let state = ServerState {
        name: "DDNet Lab Ünïcödé ★ | a;b \"q\" 名前".into(),
        map: "Tutorial".into(),
        game_type: "DDraceNetwork".into(),
        version: "0.6.4, 16.4".into(),
        max_players: 64,
        ..ServerState::default()
    };
    let config = ResponderConfig {
        hostname: "lab.invalid".into(),
        version_07: Some("0.7\u{2194}0.6.4, 16.4".into()),
        // CRC-32 and size of Tutorial.map in ddnet-data 16.4 (spec §7.2).
        map_crc: 0x8d4c_6486,
        map_size: 1_082_711,
        skill_level: 1,
        time_score: true,
        ..ResponderConfig::default()
    };
    (state, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responder_answers_byte_for_byte_like_a_live_ddnet_16_4() {
    let Some(ddnet) = DdnetServer::require() else {
        return;
    };
    let (state, config) = ddnet_lab();
    let ours = serve_loopback(
        TeeworldsResponder::new(config, *b"conformance seed"),
        state,
        0,
    )
    .await;
    let ours_addr = ours.addr;
    tokio::task::spawn_blocking(move || {
        let guard = ddnet.start(free_udp_port(), &[]);
        let socket = client_socket();
        let wait = Duration::from_secs(2);
        let ask =
            |to: SocketAddr, request: &[u8]| request_reply(&socket, to, request, wait, |_| true);
        let mut requests: Vec<(String, Vec<u8>)> = [
            "ddnet-16.4-vanilla-p0-request.bin",
            "ddnet-16.4-xe-p0-request.bin",
            "ddnet-16.4-64legacy-p0-request.bin",
        ]
        .iter()
        .map(|f| {
            (
                (*f).to_owned(),
                fixture(&format!("teeworlds/serverinfo/{f}")),
            )
        })
        .collect();
        for case in [
            "ddnet-gie3-token-plus-junk",
            "ddnet-hdr-0x20-zeros",
            "ddnet-hdr-0xfc-first",
            "ddnet-xe-reserved-nonzero",
            "ddnet-xe-extra-ffff",
            "ddnet-xe-with-fstd",
            "ddnet-oversize-1401",
            "ddnet-size-1400",
        ] {
            let f = format!("teeworlds/probes/probe-{case}-request.bin");
            requests.push((case.to_owned(), fixture(&f)));
        }
        for (what, request) in &requests {
            let real = ask(guard.addr(), request)
                .unwrap_or_else(|| panic!("{what}: DDNet did not answer"));
            let mine =
                ask(ours_addr, request).unwrap_or_else(|| panic!("{what}: we did not answer"));
            assert_eq!(hex(&mine), hex(&real), "{what}");
        }
        // 0.7: handshake with each, then the same info request; compare after the header.
        let info07 = |to: SocketAddr| {
            let reply = ask(to, &token_request_07()).expect("token reply");
            let token = server_token_07(&reply).expect("server token");
            let info = ask(to, &info_request_07(token)).expect("0.7 info");
            assert_eq!(
                info.get(1..5),
                Some(&TOKEN_07[..]),
                "addressed to our token"
            );
            info.get(9..).unwrap_or_default().to_vec()
        };
        assert_eq!(
            hex(&info07(ours_addr)),
            hex(&info07(guard.addr())),
            "0.7 inf3"
        );
    })
    .await
    .unwrap();
    drop(ours);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responder_answers_0_7_byte_for_byte_like_a_live_teeworlds_0_7_5() {
    let Some(teeworlds) = TeeworldsServer::require() else {
        return;
    };
    // The lab configuration of `TeeworldsServer::config`, empty.
    let state = ServerState {
        name: "TW07 Lab Ünïcödé ★ | a;b \"q\" 名前".into(),
        map: "dm1".into(),
        game_type: "DM".into(),
        version: "0.7.5".into(),
        max_players: 8,
        ..ServerState::default()
    };
    let config = ResponderConfig {
        hostname: "lab.invalid".into(),
        skill_level: 1,
        max_clients: Some(16),
        ..ResponderConfig::default()
    };
    let ours = serve_loopback(
        TeeworldsResponder::new(config, *b"conformance seed"),
        state,
        0,
    )
    .await;
    let ours_addr = ours.addr;
    tokio::task::spawn_blocking(move || {
        let guard = teeworlds.start(free_udp_port(), &[]);
        let socket = client_socket();
        let wait = Duration::from_secs(2);
        let ask =
            |to: SocketAddr, request: &[u8]| request_reply(&socket, to, request, wait, |_| true);
        let info07 = |to: SocketAddr| {
            let reply = ask(to, &token_request_07()).expect("token reply");
            assert_eq!(reply.len(), 12, "unpadded token reply");
            let token = server_token_07(&reply).expect("server token");
            let info = ask(to, &info_request_07(token)).expect("0.7 info");
            assert_eq!(
                info.get(1..5),
                Some(&TOKEN_07[..]),
                "addressed to our token"
            );
            info.get(9..).unwrap_or_default().to_vec()
        };
        assert_eq!(
            hex(&info07(ours_addr)),
            hex(&info07(guard.addr())),
            "0.7 inf3"
        );
    })
    .await
    .unwrap();
    drop(ours);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
