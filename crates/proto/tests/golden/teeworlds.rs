//! Golden tests for teeworlds: every server-info capture and probe decodes to the right
//! fields (insta snapshots), replies re-encode byte for byte, the reply builders reproduce
//! DDNet's own replies from the decoded state, and each quirk of spec §11/§12 has a test.

use muster_proto::DecodeError;
use muster_proto::model::RawValue;
use muster_proto::teeworlds::header::{Header, NO_TOKEN, TokenMessage};
use muster_proto::teeworlds::info::{ExtendedReassembly, Family};
use muster_proto::teeworlds::reply::{Client, ServerDescription};
use muster_proto::teeworlds::{
    BuildError, Datagram, GetInfo, GetInfo7, Info, Info7, InfoExtended, InfoMore, Message, Tokens,
    TwStr, decode_text,
};

use crate::util::{fixture, fixture_path, unhex};

fn decode(rel: &str) -> Result<Datagram, DecodeError> {
    Datagram::decode(&fixture(&format!("teeworlds/{rel}")))
}

fn encode(d: &Datagram) -> Vec<u8> {
    let mut out = Vec::new();
    d.encode(&mut out);
    out
}

fn message(rel: &str) -> Message {
    match decode(rel) {
        Ok(Datagram::Connless(_, m)) => m,
        other => panic!("{rel}: {other:?}"),
    }
}

fn extended_main(rel: &str) -> InfoExtended {
    match message(rel) {
        Message::InfoExtended(m) => m,
        other => panic!("{rel}: {other:?}"),
    }
}

fn extended_more(rel: &str) -> InfoMore {
    match message(rel) {
        Message::InfoMore(m) => m,
        other => panic!("{rel}: {other:?}"),
    }
}

/// Every `.bin` under a fixture folder, sorted.
fn bins(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixture_path(&format!("teeworlds/{dir}")))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".bin"))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    v.sort();
    v
}

/// Requests a real peer padded or followed with junk: they decode, but our encoder writes the
/// canonical (shorter) form.
const NON_CANONICAL: &[&str] = &[
    "probes/probe-ddnet-gie3-token-plus-junk-request.bin",
    "probes/probe-ddnet-oversize-1401-request.bin",
    "probes/probe-ddnet-size-1400-request.bin",
];

#[test]
fn every_capture_decodes_and_snapshots() {
    for rel in bins("serverinfo")
        .into_iter()
        .chain(bins("probes"))
        .chain(bins("qstat"))
    {
        let decoded = decode(&rel);
        let stem = rel.trim_end_matches(".bin").replace('/', "__");
        insta::assert_debug_snapshot!(stem.clone(), decoded);
        if let Ok(d) = &decoded {
            if !NON_CANONICAL.contains(&rel.as_str()) {
                assert_eq!(
                    encode(d),
                    fixture(&format!("teeworlds/{rel}")),
                    "{rel} re-encodes byte for byte"
                );
            }
            // Values round-trip for every decodable capture.
            assert_eq!(Datagram::decode(&encode(d)).as_ref(), Ok(d), "{rel}");
        }
    }
}

#[test]
fn every_reply_capture_decodes() {
    for rel in bins("serverinfo").into_iter().chain(bins("probes")) {
        if rel.contains("reply") {
            assert!(decode(&rel).is_ok(), "{rel}: {:?}", decode(&rel));
        }
    }
}

#[test]
fn golden_spec_vectors_both_directions() {
    let cases: &[(&str, Datagram)] = &[
        (
            "78 65 12 34 00 00 ff ff ff ff 67 69 65 33 56",
            Datagram::Connless(
                Header::extended(0x1234),
                Message::GetInfo(GetInfo { token: 0x56 }),
            ),
        ),
        (
            "ff ff ff ff ff ff ff ff ff ff 67 69 65 33 5a",
            Datagram::Connless(Header::LEGACY, Message::GetInfo(GetInfo { token: 0x5a })),
        ),
        (
            "04 00 00 c0 ff ee 01 05 7b 7b f1 40",
            Datagram::Token(TokenMessage::reply(
                [0xc0, 0xff, 0xee, 0x01],
                [0x7b, 0x7b, 0xf1, 0x40],
            )),
        ),
        (
            "21 7b 7b f1 40 c0 ff ee 01 ff ff ff ff 67 69 65 33 88 03",
            Datagram::Connless(
                Header::Sixup {
                    token: [0x7b, 0x7b, 0xf1, 0x40],
                    response_token: [0xc0, 0xff, 0xee, 0x01],
                },
                Message::GetInfo7(GetInfo7 { browse_token: 200 }),
            ),
        ),
        (
            "21 c0 ff ee 01 c4 3a 9c 8b ff ff ff ff 69 6e 66 33 88 03",
            Datagram::Connless(
                Header::Sixup {
                    token: [0xc0, 0xff, 0xee, 0x01],
                    response_token: [0xc4, 0x3a, 0x9c, 0x8b],
                },
                Message::Info7(Info7 {
                    browse_token: 200,
                    body: None,
                }),
            ),
        ),
    ];
    for (hex, value) in cases {
        let bytes = unhex(hex);
        assert_eq!(Datagram::decode(&bytes).as_ref(), Ok(value), "{hex}");
        assert_eq!(encode(value), bytes, "{hex}");
    }
    let mut req = Vec::new();
    TokenMessage::request([0xc0, 0xff, 0xee, 0x01]).encode(&mut req);
    assert_eq!(
        req,
        fixture("teeworlds/serverinfo/tw-0.7.5-p0-token-request.bin")
    );
}

#[test]
fn golden_mapped_server_info() {
    let ext = ExtendedReassembly::new();
    let mut ext = ext;
    ext.insert_main(extended_main("serverinfo/ddnet-16.4-xe-p7-reply-main.bin"));
    let info = ext.answer().unwrap().to_server_info(&[Family::Extended]);
    insta::assert_debug_snapshot!("mapped__ddnet_xe_p7", info);

    let Message::Info7(tw) = message("serverinfo/tw-0.7.5-p7-info-reply.bin") else {
        panic!()
    };
    let answer = muster_proto::teeworlds::info::Answer::Sixup(tw.body.unwrap());
    let info = answer.to_server_info(&[Family::Sixup]);
    assert_eq!(info.num_players, 6);
    assert_eq!(
        info.players
            .iter()
            .filter(|p| p.spectator == Some(true))
            .count(),
        1
    );
    insta::assert_debug_snapshot!("mapped__tw075_p7", info);
}

// ---- our encoders reproduce DDNet's replies from the decoded state ----

/// The server state DDNet revealed in its extended reply: main packet plus continuations.
fn ddnet_state(case: &str) -> ServerDescription {
    let main = extended_main(&format!("serverinfo/ddnet-16.4-xe-{case}-reply-main.bin"));
    let mut desc = ServerDescription::from(&main);
    let mut players: Vec<Client> = main.players.iter().map(Client::from).collect();
    if case == "p64" {
        let more = extended_more("serverinfo/ddnet-16.4-xe-p64-reply-more1.bin");
        players.extend(more.players.iter().map(Client::from));
    }
    desc.set_clients(players).unwrap();
    desc
}

fn encoded_06(m: Message) -> Vec<u8> {
    encode(&Datagram::Connless(Header::LEGACY, m))
}

#[test]
fn encode_vanilla_reply_matches_ddnet_byte_for_byte() {
    for case in ["p0", "p7", "p64"] {
        let info = ddnet_state(case).vanilla(0x5a);
        assert_eq!(
            encoded_06(Message::Info(info)),
            fixture(&format!(
                "teeworlds/serverinfo/ddnet-16.4-vanilla-{case}-reply.bin"
            )),
            "{case}"
        );
    }
}

#[test]
fn encode_legacy64_reply_matches_ddnet_byte_for_byte() {
    for (case, parts) in [("p0", 1), ("p7", 1), ("p64", 3)] {
        let packets = ddnet_state(case).legacy64(0x77);
        assert_eq!(packets.len(), parts, "{case}");
        for (i, p) in packets.into_iter().enumerate() {
            assert_eq!(
                encoded_06(Message::Info64(p)),
                fixture(&format!(
                    "teeworlds/serverinfo/ddnet-16.4-64legacy-{case}-reply-part{i}.bin"
                )),
                "{case} part {i}"
            );
        }
    }
}

#[test]
fn encode_extended_reply_matches_ddnet_byte_for_byte() {
    for case in ["p0", "p7", "p64"] {
        let (main, more) = ddnet_state(case).extended(1_193_046);
        assert_eq!(
            encoded_06(Message::InfoExtended(main)),
            fixture(&format!(
                "teeworlds/serverinfo/ddnet-16.4-xe-{case}-reply-main.bin"
            )),
            "{case}"
        );
        let expect_more = usize::from(case == "p64");
        assert_eq!(more.len(), expect_more, "{case}");
        for m in more {
            let bytes = encoded_06(Message::InfoMore(m));
            assert!(bytes.len() <= 1400);
            assert_eq!(
                bytes,
                fixture("teeworlds/serverinfo/ddnet-16.4-xe-p64-reply-more1.bin")
            );
        }
    }
}

#[test]
fn encode_sixup_reply_matches_teeworlds_byte_for_byte() {
    let reply = fixture("teeworlds/serverinfo/tw-0.7.5-p7-info-reply.bin");
    let Ok(Datagram::Connless(header, Message::Info7(info))) = Datagram::decode(&reply) else {
        panic!()
    };
    let body = info.body.unwrap();
    let mut desc = ServerDescription::default();
    desc.version = body.version.clone();
    desc.name = body.name.clone();
    desc.hostname = body.hostname.clone();
    desc.map = body.map.clone();
    desc.game_type = body.game_type.clone();
    desc.password = body.flags & 1 != 0;
    desc.time_score = body.flags & 2 != 0;
    desc.skill_level = body.skill_level;
    desc.max_players = body.max_players;
    desc.max_clients = body.max_clients;
    desc.set_clients(
        body.players
            .iter()
            .map(|p| Client {
                name: p.name.clone(),
                clan: p.clan.clone(),
                country: p.country,
                score: p.score,
                is_player: p.player_flags & 1 == 0,
                is_bot: p.player_flags & 2 != 0,
            })
            .collect(),
    )
    .unwrap();
    let built = desc.sixup(200);
    assert_eq!(
        encode(&Datagram::Connless(header, Message::Info7(built))),
        reply
    );
}

#[test]
fn encode_extended_splits_64_max_length_clients_within_1400_bytes() {
    let mut desc = ddnet_state("p0");
    let long = TwStr::try_from("★★★★★★★★★★").unwrap();
    desc.set_clients(
        (0..64)
            .map(|i| Client {
                name: long.clone(),
                clan: long.clone(),
                country: -1,
                score: -1_000_000 - i,
                is_player: true,
                is_bot: false,
            })
            .collect(),
    )
    .unwrap();
    let (main, more) = desc.extended(16_777_215);
    let mut ra = ExtendedReassembly::new();
    let mut all = vec![encoded_06(Message::InfoExtended(main.clone()))];
    all.extend(
        more.iter()
            .cloned()
            .map(|m| encoded_06(Message::InfoMore(m))),
    );
    for b in &all {
        assert!(b.len() <= 1400, "{}", b.len());
    }
    ra.insert_main(main);
    for m in more {
        ra.insert_more(m);
    }
    assert!(ra.is_complete());
    assert_eq!(ra.records(), 64);
    // DDNet's extended info has no 64-client limit; the builder's own limit is MAX_CLIENTS.
    assert_eq!(desc.set_clients(vec![Client::default(); 65]), Ok(()));
    assert_eq!(
        desc.set_clients(vec![
            Client::default();
            muster_proto::teeworlds::MAX_CLIENTS + 1
        ]),
        Err(BuildError::TooManyClients)
    );
}

// ---- quirks ----

#[test]
fn quirk_64_player_iex_plus_reassembly_in_any_order() {
    let main = extended_main("serverinfo/ddnet-16.4-xe-p64-reply-main.bin");
    let more = extended_more("serverinfo/ddnet-16.4-xe-p64-reply-more1.bin");
    let names = |ra: &ExtendedReassembly| match ra.answer().unwrap() {
        muster_proto::teeworlds::info::Answer::Extended { players, .. } => players
            .iter()
            .map(|p| String::from_utf8(p.name.as_bytes().to_vec()).unwrap())
            .collect::<Vec<_>>(),
        _ => unreachable!(),
    };
    let mut in_order = ExtendedReassembly::new();
    assert!(in_order.insert_main(main.clone()));
    assert!(!in_order.is_complete());
    assert!(in_order.insert_more(more.clone()));
    assert!(in_order.is_complete());

    let mut reversed = ExtendedReassembly::new();
    assert!(reversed.insert_more(more.clone()));
    assert!(
        reversed.answer().is_none(),
        "no answer before the main packet"
    );
    assert!(!reversed.insert_more(more.clone()), "duplicate ignored");
    assert!(reversed.insert_main(main.clone()));
    assert!(!reversed.insert_main(main), "duplicate main ignored");
    assert!(reversed.is_complete());
    assert_eq!(reversed.records(), 64);
    assert_eq!(names(&in_order), names(&reversed));
    assert_eq!(names(&reversed).first().unwrap(), "bot00_long_nam");
    assert_eq!(names(&reversed).last().unwrap(), "bot63_long_nam");

    let mut bad = more;
    bad.packet_no = 64;
    assert!(!ExtendedReassembly::new().insert_more(bad.clone()));
    bad.packet_no = 0;
    assert!(!ExtendedReassembly::new().insert_more(bad));
}

#[test]
fn quirk_dtsf_pages_merge_by_offset() {
    let mut parts: Vec<_> = (0..3)
        .rev()
        .map(|i| {
            match message(&format!(
                "serverinfo/ddnet-16.4-64legacy-p64-reply-part{i}.bin"
            )) {
                Message::Info64(m) => m,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    parts.sort_by_key(|p| p.offset);
    assert_eq!(
        parts.iter().map(|p| p.offset).collect::<Vec<_>>(),
        [0, 24, 48]
    );
    assert_eq!(
        parts.iter().map(|p| p.info.players.len()).sum::<usize>(),
        64
    );
    assert!(parts.iter().all(|p| p.info.num_clients == 64));
}

#[test]
fn quirk_browse_token_minus_one() {
    // Never sent: the query refuses to be built with it...
    assert_eq!(Tokens::new(1, 2, -1), Err(BuildError::BrowseToken));
    assert!(Tokens::new(1, 2, 0).is_ok());
    // ...but the probe that crashed teeworlds 0.7.5 decodes (a responder must see it).
    for rel in [
        "probes/probe-tw07-07-connless-browse-token-minus1-request.bin",
        "probes/probe-ddnet-07-connless-browse-token-minus1-request.bin",
    ] {
        assert_eq!(
            message(rel),
            Message::GetInfo7(GetInfo7 { browse_token: -1 })
        );
    }
    let mut out = Vec::new();
    Message::GetInfo7(GetInfo7 { browse_token: -1 }).encode(&mut out);
    assert_eq!(out.last(), Some(&0x40));
}

#[test]
fn quirk_browse_token_echoed_verbatim() {
    for (rel, token) in [
        (
            "probes/probe-ddnet-07-connless-browse-token-neg5-reply.bin",
            -5,
        ),
        (
            "probes/probe-tw07-07-connless-browse-token-neg5-reply.bin",
            -5,
        ),
        (
            "probes/probe-ddnet-07-connless-browse-token-varint-big-reply.bin",
            123_456_789,
        ),
        (
            "probes/probe-tw07-07-connless-browse-token-varint-big-reply.bin",
            123_456_789,
        ),
    ] {
        let Message::Info7(i) = message(rel) else {
            panic!("{rel}")
        };
        assert_eq!(i.browse_token, token, "{rel}");
        assert!(i.body.is_some());
    }
}

#[test]
fn quirk_non_utf8_names() {
    let mut info = match message("serverinfo/ddnet-16.4-vanilla-p7-reply.bin") {
        Message::Info(i) => i,
        other => panic!("{other:?}"),
    };
    // teeworlds cuts at byte limits: "Zoë ☃" cut inside the snowman.
    let cut = TwStr::new(&b"Zo\xc3\xab \xe2\x98"[..]).unwrap();
    info.players.first_mut().unwrap().name = cut.clone();
    let bytes = encoded_06(Message::Info(info));
    let Ok(Datagram::Connless(_, Message::Info(back))) = Datagram::decode(&bytes) else {
        panic!()
    };
    assert_eq!(back.players.first().unwrap().name, cut);
    let mapped = muster_proto::teeworlds::info::Answer::Vanilla(back).to_server_info(&[]);
    let name = &mapped.players.first().unwrap().name;
    assert!(name.lossy);
    assert_eq!(name.raw, cut.as_bytes());
    assert_eq!(name.text, "Zoë \u{fffd}");
    assert!(!decode_text("名前テスト".as_bytes()).lossy);
}

#[test]
fn quirk_lenient_06_headers_are_read_as_vanilla() {
    for (rel, header) in [
        (
            "probes/probe-ddnet-hdr-0x20-zeros-request.bin",
            [0x20, 0, 0, 0, 0, 0],
        ),
        (
            "probes/probe-ddnet-hdr-0xfc-first-request.bin",
            [0xfc, 0xff, 0xff, 0xff, 0xff, 0xff],
        ),
    ] {
        assert_eq!(
            decode(rel),
            Ok(Datagram::Connless(
                Header::Legacy(header),
                Message::GetInfo(GetInfo { token: 0x5a })
            ))
        );
    }
}

#[test]
fn quirk_ignored_requests_do_not_decode() {
    for (rel, err) in [
        (
            "probes/probe-ddnet-1-byte-request.bin",
            DecodeError::Truncated("connless header"),
        ),
        (
            "probes/probe-ddnet-6-bytes-request.bin",
            DecodeError::Truncated("magic"),
        ),
        (
            "probes/probe-ddnet-gie3-no-token-byte-request.bin",
            DecodeError::Truncated("request token"),
        ),
        (
            "probes/probe-ddnet-hdr-no-connless-bit-request.bin",
            DecodeError::Invalid("connless flag"),
        ),
        // 21 means 0.7 framing: the 9-byte header eats the start of the magic.
        (
            "probes/probe-ddnet-hdr-version1-is-sixup-request.bin",
            DecodeError::Truncated("magic"),
        ),
        (
            "probes/probe-ddnet-unknown-magic-request.bin",
            DecodeError::BadMagic("teeworlds magic"),
        ),
        (
            "probes/probe-ddnet-req2-to-gameserver-request.bin",
            DecodeError::BadMagic("teeworlds magic"),
        ),
        (
            "probes/probe-ddnet-07-connless-no-browse-token-request.bin",
            DecodeError::Truncated("browse token"),
        ),
        (
            "probes/probe-tw07-07-connless-no-browse-token-request.bin",
            DecodeError::Truncated("browse token"),
        ),
        // Version bits 00: a 0.6 header whose payload is not a message.
        (
            "probes/probe-tw07-07-connless-version0-request.bin",
            DecodeError::BadMagic("teeworlds magic"),
        ),
        (
            "qstat/qstat-request-rx-00-port18399.bin",
            DecodeError::Truncated("magic"),
        ),
        (
            "qstat/qstat-request-rx-01-port18399.bin",
            DecodeError::BadMagic("teeworlds magic"),
        ),
    ] {
        assert_eq!(decode(rel), Err(err), "{rel}");
    }
}

#[test]
fn quirk_request_bytes_after_token_byte_ignored() {
    for rel in [
        "probes/probe-ddnet-gie3-token-plus-junk-request.bin",
        "probes/probe-ddnet-size-1400-request.bin",
        "probes/probe-ddnet-oversize-1401-request.bin",
        "qstat/qstat-request-rx-02-port18399.bin",
    ] {
        let Message::GetInfo(g) = message(rel) else {
            panic!("{rel}")
        };
        assert!(rel.contains("qstat") || g.token == 0x5a, "{rel}");
    }
}

#[test]
fn quirk_xe_token_echo_is_24_bits() {
    for (req, reply, token) in [
        (
            "probes/probe-ddnet-xe-reserved-nonzero-request.bin",
            "probes/probe-ddnet-xe-reserved-nonzero-reply.bin",
            0x12_3456,
        ),
        (
            "probes/probe-ddnet-xe-extra-ffff-request.bin",
            "probes/probe-ddnet-xe-extra-ffff-reply.bin",
            0xff_ffff,
        ),
    ] {
        let Ok(Datagram::Connless(Header::Extended { extra_token, .. }, Message::GetInfo(g))) =
            decode(req)
        else {
            panic!("{req}")
        };
        assert_eq!((i32::from(extra_token) << 8) | i32::from(g.token), token);
        assert_eq!(extended_main(reply).token, token);
    }
    // xe + fstd is answered as dtsf with the low byte only.
    let Message::Info64(d) = message("probes/probe-ddnet-xe-with-fstd-reply.bin") else {
        panic!()
    };
    assert_eq!(d.info.token, 0x56);
}

#[test]
fn quirk_sixup_framed_06_magics_answered_in_06_framing() {
    let Ok(Datagram::Connless(h, Message::Info(i))) =
        decode("probes/probe-ddnet-07-connless-resp-token-ffffffff-reply.bin")
    else {
        panic!()
    };
    assert_eq!(h, Header::LEGACY);
    assert_eq!(i.token, 136, "the first varint byte of 88 03");
    let Ok(Datagram::Connless(h, Message::Info64(d))) =
        decode("probes/probe-ddnet-07-connless-fstd-reply.bin")
    else {
        panic!()
    };
    assert_eq!(h, Header::LEGACY);
    assert_eq!(d.info.token, 5);
    let Ok(Datagram::Connless(Header::Sixup { .. }, Message::GetInfo64(g))) =
        decode("probes/probe-ddnet-07-connless-fstd-request.bin")
    else {
        panic!()
    };
    assert_eq!(g.token, 5);
}

#[test]
fn quirk_unexpected_handshake_packets() {
    // DDNet pads its token reply to 520 bytes when our token is ff ff ff ff.
    let Ok(Datagram::Token(t)) =
        decode("probes/probe-ddnet-07-token-request-mytoken-ffffffff-reply.bin")
    else {
        panic!()
    };
    assert_eq!((t.token, t.padding), (NO_TOKEN, 508));
    // teeworlds answers an info request whose response token is "none" with its own request.
    let Ok(Datagram::Token(t)) =
        decode("probes/probe-tw07-07-connless-resp-token-ffffffff-reply.bin")
    else {
        panic!()
    };
    assert_eq!(t.token, NO_TOKEN);
    assert!(t.is_answerable_request());
    // Short token requests decode but are below the 519-byte rule.
    for rel in [
        "probes/probe-ddnet-07-token-request-short-request.bin",
        "probes/probe-tw07-07-token-request-short-request.bin",
        "probes/probe-tw07-07-token-request-508-request.bin",
    ] {
        let Ok(Datagram::Token(t)) = decode(rel) else {
            panic!("{rel}")
        };
        assert!(!t.is_answerable_request(), "{rel}");
    }
}

#[test]
fn quirk_sixup_p64_reply_without_body() {
    let Message::Info7(i) = message("serverinfo/ddnet-16.4-sixup-p64-info-reply.bin") else {
        panic!()
    };
    assert_eq!(
        i,
        Info7 {
            browse_token: 200,
            body: None
        }
    );
}

#[test]
fn quirk_signed_map_crc_and_vanilla_squeeze() {
    let main = extended_main("serverinfo/ddnet-16.4-xe-p0-reply-main.bin");
    assert_eq!(main.map_crc, 0x8d4c_6486);
    let Message::Info(v) = message("serverinfo/ddnet-16.4-vanilla-p64-reply.bin") else {
        panic!()
    };
    assert_eq!(
        (v.num_players, v.max_players, v.num_clients, v.max_clients),
        (16, 16, 16, 16)
    );
    assert_eq!(v.players.len(), 16);
    assert!(v.name.as_bytes().ends_with(b" [64/64]"));
}

#[test]
fn quirk_inconsistent_counts_flagged() {
    let info = Info {
        num_players: 5,
        num_clients: 3,
        max_clients: 2,
        ..Info::default()
    };
    let s = muster_proto::teeworlds::info::Answer::Vanilla(info).to_server_info(&[Family::Vanilla]);
    assert_eq!(
        s.raw_field("inconsistent_counts"),
        Some(&RawValue::Bool(true))
    );
}
