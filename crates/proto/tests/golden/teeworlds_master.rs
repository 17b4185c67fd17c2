//! Golden tests for teeworlds_master: every capture under `fixtures/teeworlds_master/` decodes
//! to the right values and re-encodes byte for byte, the stand-in master's whole log replays,
//! and the quirks of spec §4 each have a test named after them.

use std::net::SocketAddr;

use muster_proto::DecodeError;
use muster_proto::teeworlds_master::http::{AddressScheme, RegisterInfo};
use muster_proto::teeworlds_master::packet::{Challenge, ListEntry, ListReply};
use muster_proto::teeworlds_master::{
    Action, Framing, Message, Packet, RegisterRequest, RegisterResponse, ServersJson, Token,
};

use crate::util::{fixture, unhex};

const UDP_REGISTER: &str = "teeworlds_master/tw-0.7.5-udp-register";
const QSTAT: &str = "teeworlds_master/qstat-teem-udp-list";
const HTTP: &str = "teeworlds_master/ddnet-16.4-http-register";

const MSTR: Token = Token(*b"MSTR");
const SERVER: Token = Token([0xea, 0xc3, 0x12, 0x4c]);

/// Decode a fixture and check that it re-encodes to the same bytes.
fn round_trip(rel: &str) -> Packet {
    let bytes = fixture(rel);
    let packet = Packet::decode(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut out = Vec::new();
    packet.encode(&mut out);
    assert_eq!(hex::encode(&out), hex::encode(&bytes), "{rel} re-encodes");
    assert_eq!(packet.encoded_len(), bytes.len());
    packet
}

fn to_master(message: Message) -> Packet {
    Packet::Connless {
        framing: Framing::V07 {
            token: MSTR,
            response_token: SERVER,
        },
        message,
    }
}

fn to_server(message: Message) -> Packet {
    Packet::Connless {
        framing: Framing::V07 {
            token: SERVER,
            response_token: MSTR,
        },
        message,
    }
}

#[test]
fn udp_register_capture_decodes_and_re_encodes() {
    let expect = [
        (
            "01-server-to-master1-token-request.bin",
            Packet::token_request(SERVER),
        ),
        (
            "02-fakemaster-token-reply.bin",
            Packet::token_reply(SERVER, MSTR),
        ),
        (
            "03-server-cou2-count-request.bin",
            to_master(Message::CountRequest),
        ),
        (
            "04-fakemaster-siz2-count0.bin",
            to_server(Message::CountReply { count: 0 }),
        ),
        (
            "04b-fakemaster2-siz2-count7.bin",
            Packet::Connless {
                framing: Framing::V07 {
                    token: Token([0x8d, 0xce, 0xaf, 0x1c]),
                    response_token: MSTR,
                },
                message: Message::CountReply { count: 7 },
            },
        ),
        (
            "05-server-token-request-again.bin",
            Packet::token_request(SERVER),
        ),
        (
            "06-fakemaster-token-reply.bin",
            Packet::token_reply(SERVER, MSTR),
        ),
        (
            "07-server-bea2-heartbeat.bin",
            to_master(Message::Heartbeat { port: 18303 }),
        ),
        (
            "08-fakechecker-fwcheck-from-8284.bin",
            to_server(Message::FirewallCheck),
        ),
        (
            "09-server-fw-response.bin",
            to_master(Message::FirewallResponse),
        ),
        ("10-fakechecker-fwok.bin", to_server(Message::FirewallOk)),
        ("11-fakemaster-fwok.bin", to_server(Message::FirewallOk)),
        (
            "12-server-bea2-heartbeat-15s-later-no-token-request.bin",
            to_master(Message::Heartbeat { port: 18303 }),
        ),
    ];
    let mut decoded = Vec::new();
    for (file, want) in expect {
        let got = round_trip(&format!("{UDP_REGISTER}/{file}"));
        assert_eq!(got, want, "{file}");
        decoded.push((file, got));
    }
    insta::assert_debug_snapshot!("udp_register_capture", decoded);
}

#[test]
fn qstat_list_capture_decodes_and_re_encodes() {
    let qstat_header = Framing::V06([0x20, 0, 0, 0, 0, 0]);
    assert_eq!(
        round_trip(&format!("{QSTAT}/01-qstat-reqt-legacy-list-request.bin")),
        Packet::Connless {
            framing: qstat_header,
            message: Message::ListRequestLegacy
        }
    );
    assert_eq!(
        round_trip(&format!("{QSTAT}/02-qstat-req2-list-request.bin")),
        Packet::Connless {
            framing: qstat_header,
            message: Message::ListRequest
        }
    );
    let lis2 = round_trip(&format!("{QSTAT}/03-fakemaster-lis2-two-servers.bin"));
    let Packet::Connless {
        framing,
        message: Message::List(list),
    } = &lis2
    else {
        panic!("not lis2: {lis2:?}");
    };
    assert_eq!(*framing, Framing::STANDARD_06);
    let addrs: Vec<SocketAddr> = list.entries().iter().map(ListEntry::socket_addr).collect();
    assert_eq!(
        addrs,
        ["127.0.0.1:18304", "127.0.0.1:18303"].map(|s| s.parse::<SocketAddr>().expect("addr"))
    );
    insta::assert_debug_snapshot!("qstat_lis2_two_servers", (lis2, addrs));
}

/// The `lis2` example of spec §2.3, built from addresses with the splitting encoder.
#[test]
fn spec_vector_lis2_two_servers() {
    let spec = unhex(
        "ff ff ff ff ff ff  ff ff ff ff 6c 69 73 32
         00 00 00 00 00 00 00 00 00 00 ff ff 7f 00 00 01  47 80
         00 00 00 00 00 00 00 00 00 00 ff ff 7f 00 00 01  47 7f",
    );
    let entries = ["127.0.0.1:18304", "127.0.0.1:18303"]
        .map(|s| ListEntry::from_socket_addr(s.parse().expect("addr")));
    let parts = ListReply::split(&entries);
    assert_eq!(parts.len(), 1);
    let mut out = Vec::new();
    for part in parts {
        Packet::Connless {
            framing: Framing::STANDARD_06,
            message: Message::List(part),
        }
        .encode(&mut out);
    }
    assert_eq!(out, spec);
}

#[test]
fn udp_challenges_decode_and_re_encode() {
    let p6 = round_trip(&format!("{HTTP}/udp-challenge-tw0.6.bin"));
    let want6 = Challenge::new(
        b"414cfc17-9b63-4e41-b33b-e4adb20b299c:tw0.6/ipv4",
        b"S+DbJ6PIWbtuz0DuGXm1Gw==",
    )
    .expect("valid");
    assert_eq!(
        p6,
        Packet::Connless {
            framing: Framing::STANDARD_06,
            message: Message::Challenge(want6)
        }
    );
    let p7 = round_trip(&format!("{HTTP}/udp-challenge-tw0.7.bin"));
    let want7 = Challenge::new(
        b"414cfc17-9b63-4e41-b33b-e4adb20b299c:tw0.7/ipv4",
        b"vZsDOSXNu8+0PMuK7FQ0Gg==",
    )
    .expect("valid");
    // The 0.7 form: Connless-Token in the token field, no response token.
    assert_eq!(
        p7,
        Packet::Connless {
            framing: Framing::V07 {
                token: Token::from_hex("ff0e2331").expect("hex"),
                response_token: Token::NONE,
            },
            message: Message::Challenge(want7)
        }
    );
    // Spec §3.3 prefixes.
    let b6 = fixture(&format!("{HTTP}/udp-challenge-tw0.6.bin"));
    assert!(b6.starts_with(&unhex(
        "ff ff ff ff ff ff ff ff ff ff 63 68 61 6c 34 31 34 63"
    )));
    let b7 = fixture(&format!("{HTTP}/udp-challenge-tw0.7.bin"));
    assert!(b7.starts_with(&unhex("21 ff 0e 23 31 ff ff ff ff ff ff ff ff 63 68 61 6c")));
    insta::assert_debug_snapshot!("udp_challenges", (p6, p7));
}

/// One captured HTTP request: its headers and body.
fn http_request(n: u32) -> (Vec<(String, String)>, Option<Vec<u8>>) {
    let json = fixture(&format!("{HTTP}/{n:02}-http-request.json"));
    let v: serde_json::Value = serde_json::from_slice(&json).expect("json");
    assert_eq!(v["method"], "POST");
    assert_eq!(v["path"], "/ddnet/15/register");
    let headers = v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| {
            (
                h[0].as_str().expect("name").to_owned(),
                h[1].as_str().expect("value").to_owned(),
            )
        })
        .collect();
    let body = v["body_file"]
        .as_str()
        .map(|f| fixture(&format!("{HTTP}/{f}")));
    (headers, body)
}

fn parse_request(headers: &[(String, String)]) -> RegisterRequest {
    let borrowed: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    RegisterRequest::from_headers(&borrowed).expect("valid register request")
}

#[test]
fn http_register_requests_decode_and_re_emit() {
    let ours = [
        "Action",
        "Address",
        "Secret",
        "Connless-Token",
        "Challenge-Secret",
        "Challenge-Token",
        "Info-Serial",
    ];
    let mut decoded = Vec::new();
    for n in 1..=12 {
        let (headers, body) = http_request(n);
        let req = parse_request(&headers);
        let want: Vec<(String, String)> = headers
            .iter()
            .filter(|(k, _)| ours.contains(&k.as_str()))
            .cloned()
            .collect();
        assert_eq!(req.to_headers(), want, "request {n:02} re-emits in order");
        assert_eq!(req.secret, "4ae14cf1-eb35-4068-89eb-7967b754451e");
        assert_eq!(req.address.port, 18304);
        let info = body.map(|b| {
            let info = RegisterInfo::decode(&b).expect("body");
            let mut out = Vec::new();
            info.encode(&mut out);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&b),
                "body {n:02} re-encodes byte for byte"
            );
            info
        });
        decoded.push((n, req, info.is_some()));
    }
    insta::assert_debug_snapshot!("http_register_requests", decoded);
}

#[test]
fn http_register_body_to_server_info() {
    let body = fixture(&format!("{HTTP}/01-http-request-body.bin"));
    let info = RegisterInfo::decode(&body).expect("body");
    assert_eq!(info.name, "DDNet Lab Ünïcödé ★ | a;b \"q\" 名前");
    assert_eq!(
        info.map.sha256.as_deref(),
        Some("0dafbba301084aebbf439575e36a44bfb65a4f15e606e9eec3814e2e0e28d953")
    );
    assert_eq!(info.map.size, Some(1_082_711));
    let si = info.to_server_info();
    assert_eq!(si.name.text, "DDNet Lab Ünïcödé ★ | a;b \"q\" 名前");
    assert_eq!(si.max_players, 64);
    insta::assert_debug_snapshot!("http_register_body_server_info", (info, si));
}

/// Every datagram and HTTP exchange of the stand-in's log decodes; datagrams re-encode.
#[test]
fn fakemaster_log_replays() {
    let log: serde_json::Value =
        serde_json::from_slice(&fixture("teeworlds_master/fakemaster-log.json")).expect("json");
    let mut summary = Vec::new();
    for e in log.as_array().expect("array") {
        let kind = e["kind"].as_str().expect("kind");
        let n = e["n"].as_u64().expect("n");
        let bytes = e["hex"].as_str().map(|h| hex::decode(h).expect("hex"));
        let line = match (kind, bytes) {
            ("note", _) => continue,
            ("http-rx", _) => {
                let headers: Vec<(String, String)> = e["headers"]
                    .as_array()
                    .expect("headers")
                    .iter()
                    .map(|h| {
                        (
                            h[0].as_str().expect("k").into(),
                            h[1].as_str().expect("v").into(),
                        )
                    })
                    .collect();
                let r = parse_request(&headers);
                format!(
                    "{:?} {} challenge_token={}",
                    r.action,
                    r.address,
                    r.challenge_token.is_some()
                )
            }
            ("http-tx", Some(b)) => {
                format!("{:?}", RegisterResponse::decode(&b).expect("response"))
            }
            ("rx06", Some(b)) if b.is_empty() => "empty datagram".to_owned(),
            (_, Some(mut b)) => {
                // The log keeps only the first 96 bytes of a datagram; the longer ones are
                // the 520-byte token requests, whose tail is zero padding (see file 01).
                let len = usize::try_from(e["len"].as_u64().expect("len")).expect("len");
                if b.len() < len {
                    b.resize(len, 0);
                }
                let p = Packet::decode(&b).unwrap_or_else(|err| panic!("log entry {n}: {err}"));
                let mut out = Vec::new();
                p.encode(&mut out);
                assert_eq!(out, b, "log entry {n} re-encodes");
                match p {
                    Packet::Token { to, token, padded } => {
                        format!("token to={to:?} token={token:?} padded={padded}")
                    }
                    Packet::Connless { framing, message } => {
                        let m = match message {
                            Message::List(l) => format!("List({} entries)", l.entries().len()),
                            Message::Challenge(c) => {
                                format!("Challenge({})", String::from_utf8_lossy(c.secret()))
                            }
                            other => format!("{other:?}"),
                        };
                        format!("{framing:?} {m}")
                    }
                }
            }
            (other, None) => panic!("log entry {n} ({other}) without bytes"),
        };
        summary.push(format!("{n:3} {kind}: {line}"));
    }
    insta::assert_debug_snapshot!("fakemaster_log", summary);
}

// Quirks of spec §4, one test each.

#[test]
fn quirk_lenient_06_header_classified_by_byte0() {
    for first in [0xff, 0x20, 0xfc] {
        let mut bytes = vec![first, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(b"\xff\xff\xff\xffreq2");
        assert!(
            matches!(
                Packet::decode(&bytes),
                Ok(Packet::Connless {
                    framing: Framing::V06(_),
                    message: Message::ListRequest
                })
            ),
            "{first:02x}"
        );
    }
    // Connless bit clear: not a connless packet at all.
    let bytes = unhex("10 ff ff ff ff ff ff ff ff ff 72 65 71 32");
    assert_eq!(
        Packet::decode(&bytes),
        Err(DecodeError::BadMagic("connless header"))
    );
}

#[test]
fn quirk_exact_lengths() {
    let mut bytes = fixture(&format!("{UDP_REGISTER}/03-server-cou2-count-request.bin"));
    bytes.push(0);
    assert_eq!(
        Packet::decode(&bytes),
        Err(DecodeError::TrailingBytes(1, "master message"))
    );
    let mut bytes = fixture(&format!("{UDP_REGISTER}/07-server-bea2-heartbeat.bin"));
    bytes.pop();
    assert_eq!(
        Packet::decode(&bytes),
        Err(DecodeError::Truncated("bea2 port"))
    );
}

#[test]
fn quirk_port_byte_order_differs() {
    // bea2 and lis2: big-endian; 0.5 list: little-endian. 18303 = 0x477f.
    let bea2 = fixture(&format!("{UDP_REGISTER}/07-server-bea2-heartbeat.bin"));
    assert!(bea2.ends_with(&[0x47, 0x7f]));
    let legacy = unhex("ff ff ff ff ff ff ff ff ff ff 6c 69 73 74 7f 00 00 01 7f 47");
    let Ok(Packet::Connless {
        message: Message::ListLegacy(list),
        ..
    }) = Packet::decode(&legacy)
    else {
        panic!("not a 0.5 list");
    };
    assert_eq!(
        list.entries().first().map(|e| e.socket_addr()),
        Some("127.0.0.1:18303".parse().expect("addr"))
    );
}

#[test]
fn quirk_rotating_07_tokens() {
    // Later heartbeats carry a new server token; the answer must use the latest one.
    let later = unhex("21 4d535452 5b033e45 ffffffff 62656132 477f");
    let Ok(Packet::Connless { framing, .. }) = Packet::decode(&later) else {
        panic!("heartbeat");
    };
    let reply = Packet::Connless {
        framing: framing.reply(MSTR),
        message: Message::FirewallCheck,
    };
    let mut out = Vec::new();
    reply.encode(&mut out);
    assert_eq!(out, unhex("21 5b033e45 4d535452 ffffffff 66773f3f"));
}

#[test]
fn quirk_post_without_body_still_parses() {
    // Request 04: the 0.7 stream's first post after the challenge, without body.
    let (headers, body) = http_request(4);
    assert!(body.is_none());
    let req = parse_request(&headers);
    assert_eq!(req.info_serial, Some(0));
    assert_eq!(req.address.scheme, AddressScheme::Tw07);
}

#[test]
fn quirk_challenge_before_token() {
    // The first post of each stream (01 for tw0.6, 03 for tw0.7) has no Challenge-Token.
    for n in [1, 3] {
        assert_eq!(parse_request(&http_request(n).0).challenge_token, None);
    }
    for n in [2, 4] {
        assert!(parse_request(&http_request(n).0).challenge_token.is_some());
    }
}

#[test]
fn quirk_several_addresses_per_server() {
    let a = parse_request(&http_request(1).0);
    let b = parse_request(&http_request(3).0);
    assert_eq!(a.secret, b.secret);
    assert_ne!(a.address, b.address);
    let streams: Vec<_> = [a, b]
        .iter()
        .map(|r| {
            r.challenge_secret
                .as_ref()
                .and_then(|c| c.stream())
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        streams,
        [Some("tw0.6/ipv4".to_owned()), Some("tw0.7/ipv4".to_owned())]
    );
    let deletes = [11, 12].map(|n| parse_request(&http_request(n).0));
    assert!(deletes.iter().all(|d| d.action == Action::Delete));
}

/// A `servers.json` in the schema of spec §3.7, built from the captured body.
#[test]
fn servers_json_from_captured_info_round_trips() {
    let body =
        String::from_utf8(fixture(&format!("{HTTP}/01-http-request-body.bin"))).expect("utf8");
    let doc = format!(
        r#"{{"servers":[{{"addresses":["tw-0.6+udp://192.0.2.10:8303","tw-0.7+udp://192.0.2.10:8303"],"location":"eu","info":{body}}}],"servers_legacy":["192.0.2.11:8303"]}}"#
    );
    let parsed = ServersJson::decode(doc.as_bytes()).expect("valid");
    let mut out = Vec::new();
    parsed.encode(&mut out);
    assert_eq!(ServersJson::decode(&out), Ok(parsed.clone()));
    let entry = parsed.servers.first().expect("one");
    assert_eq!(
        entry.info().expect("info"),
        RegisterInfo::decode(body.as_bytes()).expect("body")
    );
    insta::assert_debug_snapshot!("servers_json_list", parsed.to_server_list());
}
