use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::respond::PlayerState;
use crate::teeworlds_master::register::HEARTBEAT_INTERVAL;

const S: fn(u64) -> Duration = Duration::from_secs;

fn fixture(path: &str) -> Vec<u8> {
    let full = format!(
        "{}/tests/fixtures/teeworlds_master/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

// ----- UDP -----------------------------------------------------------------------------------

const UDP: &str = "tw-0.7.5-udp-register";
const OWN: Token = Token([0xea, 0xc3, 0x12, 0x4c]);

fn m(i: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, i], 8283))
}

fn drain_udp(r: &mut impl Registrar, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = r.poll_transmit(now, &mut buf) {
        out.push((t.destination, std::mem::take(&mut buf)));
    }
    out
}

fn events(r: &mut impl Registrar) -> Vec<RegistrarEvent> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

#[test]
fn udp_registrar_replays_the_captured_0_7_5_registration_byte_exact() {
    let t0 = Instant::now();
    let state = ServerState::default();
    let masters: Vec<SocketAddr> = (1..=4).map(m).collect();
    let mut r = TeeworldsUdpRegistrar::new(&masters, 18303, OWN, t0);
    let token_request = fixture(&format!("{UDP}/01-server-to-master1-token-request.bin"));
    assert_eq!(
        drain_udp(&mut r, t0),
        masters
            .iter()
            .map(|&a| (a, token_request.clone()))
            .collect::<Vec<_>>()
    );
    // Master 1 answers the handshake and the count; the others stay silent.
    assert!(r.handle_datagram(
        t0,
        m(1),
        &fixture(&format!("{UDP}/02-fakemaster-token-reply.bin")),
        &state
    ));
    assert_eq!(
        drain_udp(&mut r, t0),
        vec![(
            m(1),
            fixture(&format!("{UDP}/03-server-cou2-count-request.bin"))
        )]
    );
    assert!(r.handle_datagram(
        t0,
        m(1),
        &fixture(&format!("{UDP}/04-fakemaster-siz2-count0.bin")),
        &state
    ));
    let _ = drain_udp(&mut r, t0);
    let t1 = t0 + S(3);
    assert_eq!(r.poll_timeout(), Some(t0 + S(1)));
    r.handle_timeout(t0 + S(1), &state);
    let _ = drain_udp(&mut r, t0 + S(1));
    r.handle_timeout(t0 + S(2), &state);
    let _ = drain_udp(&mut r, t0 + S(2));
    r.handle_timeout(t1, &state);
    assert_eq!(
        drain_udp(&mut r, t1),
        vec![(
            m(1),
            fixture(&format!("{UDP}/05-server-token-request-again.bin"))
        )]
    );
    assert!(r.handle_datagram(
        t1,
        m(1),
        &fixture(&format!("{UDP}/06-fakemaster-token-reply.bin")),
        &state
    ));
    assert_eq!(
        drain_udp(&mut r, t1),
        vec![(
            m(1),
            fixture(&format!("{UDP}/07-server-bea2-heartbeat.bin"))
        )]
    );
    // The firewall check comes from the checker port 8284 and is answered there.
    let checker = SocketAddr::from(([127, 0, 0, 1], 8284));
    assert!(r.handle_datagram(
        t1,
        checker,
        &fixture(&format!("{UDP}/08-fakechecker-fwcheck-from-8284.bin")),
        &state
    ));
    assert_eq!(
        drain_udp(&mut r, t1),
        vec![(
            checker,
            fixture(&format!("{UDP}/09-server-fw-response.bin"))
        )]
    );
    assert!(r.handle_datagram(
        t1,
        checker,
        &fixture(&format!("{UDP}/10-fakechecker-fwok.bin")),
        &state
    ));
    assert!(r.handle_datagram(
        t1,
        m(1),
        &fixture(&format!("{UDP}/11-fakemaster-fwok.bin")),
        &state
    ));
    assert_eq!(
        events(&mut r),
        vec![RegistrarEvent::Registered {
            master: m(1).to_string()
        }]
    );
    assert!(r.is_registered());
    let t2 = t1 + HEARTBEAT_INTERVAL;
    assert_eq!(r.poll_timeout(), Some(t2));
    r.handle_timeout(t2, &state);
    assert_eq!(
        drain_udp(&mut r, t2),
        vec![(
            m(1),
            fixture(&format!(
                "{UDP}/12-server-bea2-heartbeat-15s-later-no-token-request.bin"
            ))
        )]
    );
}

#[test]
fn udp_registrar_leaves_browser_traffic_to_the_responder() {
    let t0 = Instant::now();
    let state = ServerState::default();
    let mut r = TeeworldsUdpRegistrar::new(&[m(1)], 18303, OWN, t0);
    let browser = SocketAddr::from(([127, 0, 0, 9], 5000));
    // A browser's token request (token field ff ff ff ff), a 0.6 gie3, a 0.7 gie3 with our
    // token in the header, and a fw?? addressed to another token.
    let mut token_request = vec![4, 0, 0, 0xff, 0xff, 0xff, 0xff, 5, 1, 2, 3, 4];
    token_request.resize(520, 0);
    for d in [
        token_request,
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie3\x01".to_vec(),
        b"\x21\xea\xc3\x12\x4c\x01\x02\x03\x04\xff\xff\xff\xffgie3\x01".to_vec(),
        b"\x21\x01\x02\x03\x04MSTR\xff\xff\xff\xfffw??".to_vec(),
    ] {
        assert!(!r.handle_datagram(t0, browser, &d, &state), "{d:02x?}");
    }
}

#[test]
fn udp_registrar_shutdown_stops_heartbeats() {
    let t0 = Instant::now();
    let mut r = TeeworldsUdpRegistrar::new(&[m(1)], 18303, OWN, t0);
    r.shutdown(t0);
    assert!(drain_udp(&mut r, t0).is_empty());
    assert_eq!(r.poll_timeout(), None);
    assert_eq!(
        events(&mut r),
        vec![RegistrarEvent::Unregistered {
            master: String::new()
        }]
    );
}

#[test]
fn udp_registrar_reports_no_masters() {
    let t0 = Instant::now();
    let state = ServerState::default();
    let mut r = TeeworldsUdpRegistrar::new(&[m(1)], 18303, OWN, t0);
    for s in 1..=3 {
        r.handle_timeout(t0 + S(s), &state);
    }
    assert_eq!(
        events(&mut r),
        vec![RegistrarEvent::Failed {
            master: String::new(),
            reason: "no master servers"
        }]
    );
}

// ----- HTTP ----------------------------------------------------------------------------------

const HTTP: &str = "ddnet-16.4-http-register";
const URL: &str = "http://127.0.0.1:18080/ddnet/15/register";
/// Headers the HTTP client adds itself.
const TRANSPORT_HEADERS: [&str; 5] = [
    "Host",
    "User-Agent",
    "Accept",
    "Accept-Encoding",
    "Content-Length",
];

/// The protocol headers and body of captured request `n`.
fn captured(n: u32) -> (Vec<(String, String)>, Vec<u8>) {
    let json: serde_json::Value =
        serde_json::from_slice(&fixture(&format!("{HTTP}/{n:02}-http-request.json"))).unwrap();
    assert_eq!(json["method"], "POST");
    assert_eq!(json["path"], "/ddnet/15/register");
    let headers = json["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h[0].as_str().unwrap().to_owned(),
                h[1].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(k, _)| !TRANSPORT_HEADERS.contains(&k.as_str()))
        .collect();
    let body = match json["body_file"].as_str() {
        Some(f) => fixture(&format!("{HTTP}/{f}")),
        None => Vec::new(),
    };
    (headers, body)
}

fn lab() -> (DdnetRegisterConfig, ServerState) {
    let info = RegisterInfo::decode(&fixture(&format!("{HTTP}/01-http-request-body.bin"))).unwrap();
    let mut config = DdnetRegisterConfig::ipv4(
        URL,
        18304,
        "4ae14cf1-eb35-4068-89eb-7967b754451e",
        "414cfc17-9b63-4e41-b33b-e4adb20b299c",
        Token::from_hex("ff0e2331").unwrap(),
    );
    config.map_sha256 = info.map.sha256.clone();
    config.map_size = info.map.size;
    let state = ServerState {
        name: info.name.clone(),
        map: info.map.name.clone(),
        game_type: info.game_type.clone(),
        version: info.version.clone(),
        password: info.passworded,
        max_players: u32::try_from(info.max_players).unwrap(),
        game_port: 18304,
        ..ServerState::default()
    };
    (config, state)
}

fn post(r: &mut DdnetHttpRegistrar, now: Instant) -> HttpRequest {
    r.poll_http(now).expect("a request is due")
}

fn assert_captured(req: &HttpRequest, n: u32) {
    let (headers, body) = captured(n);
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, URL);
    assert_eq!(req.headers, headers, "request {n:02}");
    assert_eq!(
        String::from_utf8_lossy(&req.body),
        String::from_utf8_lossy(&body),
        "request {n:02} body"
    );
}

const SUCCESS: &[u8] = br#"{"status":"success"}"#;
const NEED_CHALLENGE: &[u8] = br#"{"status":"need_challenge"}"#;
const NEED_INFO: &[u8] = br#"{"status":"need_info"}"#;

fn challenge_from() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 40000))
}

#[test]
fn http_registrar_replays_the_captured_ddnet_16_4_registration_byte_exact() {
    let (config, state) = lab();
    let t0 = Instant::now();
    let mut r = DdnetHttpRegistrar::new(config, &state, t0);
    assert_eq!(r.poll_timeout(), Some(t0));

    // 01: tw0.6 with body, no challenge token yet.
    assert_captured(&post(&mut r, t0), 1);
    assert!(r.poll_http(t0).is_none(), "one request at a time");
    r.handle_http_response(t0, Some((200, NEED_CHALLENGE)));
    // 03: tw0.7 with body and Connless-Token.
    assert_captured(&post(&mut r, t0), 3);
    r.handle_http_response(t0, Some((200, NEED_CHALLENGE)));
    assert!(r.poll_http(t0).is_none(), "waiting for the challenges");

    // The 0.6 challenge arrives on the game port: 02, with Challenge-Token and the body.
    let t1 = t0 + Duration::from_millis(2);
    assert!(r.handle_datagram(
        t1,
        challenge_from(),
        &fixture(&format!("{HTTP}/udp-challenge-tw0.6.bin")),
        &state
    ));
    assert_captured(&post(&mut r, t1), 2);
    r.handle_http_response(t1, Some((200, SUCCESS)));
    assert_eq!(
        events(&mut r),
        vec![RegistrarEvent::Registered {
            master: format!("{URL} tw0.6/ipv4")
        }]
    );
    // The 0.7 challenge: 04, without body (Info-Serial 0 already delivered).
    let t2 = t0 + S(1);
    assert!(r.handle_datagram(
        t2,
        challenge_from(),
        &fixture(&format!("{HTTP}/udp-challenge-tw0.7.bin")),
        &state
    ));
    assert_captured(&post(&mut r, t2), 4);
    r.handle_http_response(t2, Some((200, SUCCESS)));
    assert_eq!(events(&mut r).len(), 1);

    // 05..10: every 15 s per stream, no body.
    let mut t = t1;
    let mut t7 = t2;
    for pair in [[5, 6], [7, 8], [9, 10]] {
        t += HTTP_REGISTER_INTERVAL;
        t7 += HTTP_REGISTER_INTERVAL;
        assert_eq!(r.poll_timeout(), Some(t));
        assert!(r.poll_http(t - Duration::from_millis(1)).is_none());
        assert_captured(&post(&mut r, t), pair[0]);
        r.handle_http_response(t, Some((200, SUCCESS)));
        assert_eq!(r.poll_timeout(), Some(t7));
        assert_captured(&post(&mut r, t7), pair[1]);
        r.handle_http_response(t7, Some((200, SUCCESS)));
    }

    // 11, 12: Action: delete per stream on shutdown.
    let t3 = t7 + S(3);
    r.shutdown(t3);
    assert_captured(&post(&mut r, t3), 11);
    r.handle_http_response(t3, Some((200, SUCCESS)));
    assert!(events(&mut r).is_empty());
    assert_captured(&post(&mut r, t3), 12);
    r.handle_http_response(t3, Some((200, SUCCESS)));
    assert_eq!(
        events(&mut r),
        vec![RegistrarEvent::Unregistered {
            master: URL.to_owned()
        }]
    );
    assert!(r.poll_http(t3).is_none());
}

fn registered(state: &ServerState, t0: Instant) -> DdnetHttpRegistrar {
    let (config, _) = lab();
    let mut r = DdnetHttpRegistrar::new(config, state, t0);
    for _ in 0..2 {
        let _ = post(&mut r, t0);
        r.handle_http_response(t0, Some((200, SUCCESS)));
    }
    let _ = events(&mut r);
    r
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn http_registrar_bumps_info_serial_on_state_change_at_most_once_per_second() {
    let (_, mut state) = lab();
    let t0 = Instant::now();
    let mut r = registered(&state, t0);
    // The same state again changes nothing.
    r.handle_state_change(t0, &state);
    assert_eq!(r.info_serial(), 0);
    assert!(r.poll_http(t0).is_none());

    state.players.push(PlayerState {
        name: "Jürgen".into(),
        score: -9999,
        country: -1,
        ..PlayerState::default()
    });
    let t1 = t0 + Duration::from_millis(300);
    r.handle_state_change(t1, &state);
    assert_eq!(r.info_serial(), 1);
    assert!(r.poll_http(t1).is_none(), "at most one POST per second");
    assert_eq!(r.poll_timeout(), Some(t0 + S(1)));
    let req = post(&mut r, t0 + S(1));
    assert_eq!(header(&req, "Info-Serial"), Some("1"));
    assert_eq!(header(&req, "Content-Type"), Some("application/json"));
    let info = RegisterInfo::decode(&req.body).unwrap();
    assert_eq!(info.clients.len(), 1);
    assert_eq!(info.clients[0].name, "Jürgen");
    r.handle_http_response(t0 + S(1), Some((200, SUCCESS)));
    // The other stream posts too; the master already has serial 1, so no body.
    let req = post(&mut r, t0 + S(1));
    assert_eq!(header(&req, "Info-Serial"), Some("1"));
    assert!(req.body.is_empty());
}

#[test]
fn http_registrar_resends_the_body_after_need_info() {
    let (_, state) = lab();
    let t0 = Instant::now();
    let mut r = registered(&state, t0);
    let t1 = t0 + HTTP_REGISTER_INTERVAL;
    let req = post(&mut r, t1);
    assert!(req.body.is_empty());
    r.handle_http_response(t1, Some((200, NEED_INFO)));
    let req = post(&mut r, t1);
    assert!(!req.body.is_empty());
    assert_eq!(
        header(&req, "Address"),
        Some("tw-0.6+udp://connecting-address.invalid:18304")
    );
}

#[test]
fn http_registrar_uses_a_challenge_that_overtook_need_challenge() {
    let (config, state) = lab();
    let t0 = Instant::now();
    let mut r = DdnetHttpRegistrar::new(config, &state, t0);
    let _ = post(&mut r, t0);
    assert!(r.handle_datagram(
        t0,
        challenge_from(),
        &fixture(&format!("{HTTP}/udp-challenge-tw0.6.bin")),
        &state
    ));
    r.handle_http_response(t0, Some((200, NEED_CHALLENGE)));
    let req = post(&mut r, t0);
    assert_eq!(
        header(&req, "Challenge-Token"),
        Some("S+DbJ6PIWbtuz0DuGXm1Gw==")
    );
}

#[test]
fn http_registrar_ignores_challenges_for_other_servers() {
    let (mut config, state) = lab();
    config.challenge_uuid = "00000000-0000-0000-0000-000000000000".into();
    let t0 = Instant::now();
    let mut r = DdnetHttpRegistrar::new(config, &state, t0);
    for f in ["udp-challenge-tw0.6.bin", "udp-challenge-tw0.7.bin"] {
        assert!(!r.handle_datagram(
            t0,
            challenge_from(),
            &fixture(&format!("{HTTP}/{f}")),
            &state
        ));
    }
    // Nor a browser query.
    assert!(!r.handle_datagram(
        t0,
        challenge_from(),
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffgie3\x01",
        &state
    ));
}

#[test]
fn http_registrar_reports_failures_and_retries_on_schedule() {
    let (config, state) = lab();
    let t0 = Instant::now();
    let mut r = DdnetHttpRegistrar::new(config, &state, t0);
    let _ = post(&mut r, t0);
    r.handle_http_response(t0, None);
    let _ = post(&mut r, t0);
    r.handle_http_response(t0, Some((400, br#"{"status":"error","message":"x"}"#)));
    assert_eq!(
        events(&mut r),
        vec![
            RegistrarEvent::Failed {
                master: format!("{URL} tw0.6/ipv4"),
                reason: "request failed"
            },
            RegistrarEvent::Failed {
                master: format!("{URL} tw0.7/ipv4"),
                reason: "http error"
            },
        ]
    );
    assert_eq!(r.poll_timeout(), Some(t0 + HTTP_REGISTER_INTERVAL));
}

#[test]
fn http_register_body_is_byte_exact_with_ddnet() {
    let (config, state) = lab();
    let mut body = Vec::new();
    register_info(&state, &config).encode(&mut body);
    assert_eq!(body, fixture(&format!("{HTTP}/01-http-request-body.bin")));
}

/// A server with more clients than a register body may carry (a master refuses bodies over
/// 32 KiB) lists as many as fit; `max_clients` still counts them all.
#[test]
fn http_register_body_with_very_many_clients_stays_within_the_body_limit() {
    let (config, mut state) = lab();
    state.players = (0..1000)
        .map(|i| PlayerState {
            name: format!("Player ★ {i:04}"),
            clan: "Clän★Lab".into(),
            country: 276,
            score: i,
            ..PlayerState::default()
        })
        .collect();
    state.max_players = 1000;
    let info = register_info(&state, &config);
    let mut body = Vec::new();
    info.encode(&mut body);
    assert!(body.len() <= MAX_REGISTER_BODY);
    assert!(info.clients.len() > 64 && info.clients.len() < 1000);
    assert_eq!(info.max_clients, 1000);
    // One more client would not fit.
    let mut more = info.clone();
    more.clients.push(info.clients[0].clone());
    body.clear();
    more.encode(&mut body);
    assert!(body.len() > MAX_REGISTER_BODY);
    // A small server is unchanged.
    state.players.truncate(100);
    assert_eq!(register_info(&state, &config).clients.len(), 100);
}

/// On shutdown DDNet deletes exactly the streams its master last answered `success`
/// (`SendDeleteIfRegistered`); the driver keeps going while a goodbye is pending.
#[test]
fn http_registrar_deletes_only_registered_streams_and_says_when_done() {
    let (config, state) = lab();
    let t0 = Instant::now();
    // Nothing registered: no goodbye at all.
    let mut r = DdnetHttpRegistrar::new(config.clone(), &state, t0);
    r.shutdown(t0);
    assert!(r.poll_http(t0).is_none());
    assert!(!r.goodbye_pending());
    // 0.6 registered, 0.7 refused: one delete, for 0.6.
    let mut r = DdnetHttpRegistrar::new(config.clone(), &state, t0);
    let _ = post(&mut r, t0);
    r.handle_http_response(t0, Some((200, SUCCESS)));
    let _ = post(&mut r, t0);
    r.handle_http_response(t0, Some((400, br#"{"status":"error"}"#)));
    r.shutdown(t0);
    assert!(r.goodbye_pending());
    let delete = post(&mut r, t0);
    assert_eq!(header(&delete, "Action"), Some("delete"));
    assert!(
        header(&delete, "Address")
            .unwrap()
            .starts_with("tw-0.6+udp://")
    );
    assert!(delete.body.is_empty());
    assert!(r.goodbye_pending(), "its answer is awaited");
    r.handle_http_response(t0, Some((200, SUCCESS)));
    assert!(r.poll_http(t0).is_none());
    assert!(!r.goodbye_pending());
    // A register in flight at shutdown that succeeds is deleted too.
    let mut r = DdnetHttpRegistrar::new(config, &state, t0);
    let _ = post(&mut r, t0);
    r.shutdown(t0);
    assert!(r.goodbye_pending());
    r.handle_http_response(t0, Some((200, SUCCESS)));
    let delete = post(&mut r, t0);
    assert_eq!(header(&delete, "Action"), Some("delete"));
    r.handle_http_response(t0, None);
    assert!(!r.goodbye_pending(), "a failed delete is not retried");
}
