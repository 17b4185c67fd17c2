use super::*;
use proptest::prelude::*;

fn s(x: &str) -> TwStr {
    TwStr::try_from(x).unwrap()
}

/// Encode `m` after a 0xa5 sentinel and return what was appended.
fn enc(m: &Message) -> Vec<u8> {
    let mut out = vec![0xa5];
    m.encode(&mut out);
    assert_eq!(out.first(), Some(&0xa5));
    out.split_off(1)
}

fn hexb(h: &str) -> Vec<u8> {
    hex::decode(h.replace(' ', "")).unwrap()
}

const GIE3: &str = "ffffffff67696533";

#[test]
fn decode_get_info() {
    let m = Message::decode(&hexb(&format!("{GIE3} 5a")), false).unwrap();
    assert_eq!(m, Message::GetInfo(GetInfo { token: 0x5a }));
}

#[test]
fn encode_get_info() {
    assert_eq!(
        enc(&Message::GetInfo(GetInfo { token: 0x56 })),
        hexb(&format!("{GIE3} 56"))
    );
    assert_eq!(
        enc(&Message::GetInfo64(GetInfo { token: 0x77 })),
        hexb("ffffffff66737464 77")
    );
}

#[test]
fn decode_get_info_rejects_missing_token() {
    assert_eq!(
        Message::decode(&hexb(GIE3), false),
        Err(DecodeError::Truncated("request token"))
    );
}

#[test]
fn decode_get_info_rejects_unknown_magic() {
    assert_eq!(
        Message::decode(&hexb("ffffffff7a7a7a7a01"), false),
        Err(DecodeError::BadMagic("teeworlds magic"))
    );
    assert_eq!(
        Message::decode(&hexb("ffffffff67696533"[..12].as_ref()), false),
        Err(DecodeError::Truncated("magic"))
    );
}

#[test]
fn decode_get_info7() {
    let m = Message::decode(&hexb(&format!("{GIE3} 8803")), true).unwrap();
    assert_eq!(m, Message::GetInfo7(GetInfo7 { browse_token: 200 }));
}

#[test]
fn encode_get_info7() {
    assert_eq!(
        enc(&Message::GetInfo7(GetInfo7 {
            browse_token: 123_456_789
        })),
        hexb(&format!("{GIE3} 95b4de75"))
    );
}

#[test]
fn decode_get_info7_rejects_missing_browse_token() {
    assert_eq!(
        Message::decode(&hexb(GIE3), true),
        Err(DecodeError::Truncated("browse token"))
    );
}

fn sample_info() -> Info {
    Info {
        token: 90,
        version: s("0.6.4"),
        name: s("srv"),
        map: s("dm1"),
        game_type: s("DM"),
        flags: 1,
        num_players: 1,
        max_players: 8,
        num_clients: 1,
        max_clients: 16,
        players: vec![PlayerRecord {
            name: s("a"),
            clan: s(""),
            country: -1,
            score: -9999,
            is_player: 1,
            reserved: TwStr::empty(),
        }],
        truncated: false,
    }
}

const INFO_BYTES: &str = "ffffffff696e6633 393000 302e362e3400 73727600 646d3100 444d00 3100 3100 3800 3100 313600 6100 00 2d3100 2d3939393900 3100";

#[test]
fn decode_info() {
    assert_eq!(Info::decode(&hexb(INFO_BYTES)), Ok(sample_info()));
}

#[test]
fn encode_info() {
    assert_eq!(enc(&Message::Info(sample_info())), hexb(INFO_BYTES));
}

#[test]
fn decode_info_rejects_bad_number() {
    let bytes = hexb("ffffffff696e6633 7800");
    assert_eq!(Info::decode(&bytes), Err(DecodeError::BadNumber("token")));
}

#[test]
fn decode_info_rejects_truncated_server_fields() {
    let bytes = hexb("ffffffff696e6633 393000 302e36");
    assert_eq!(
        Info::decode(&bytes),
        Err(DecodeError::Unterminated("version"))
    );
}

#[test]
fn quirk_truncated_player_record_is_dropped_and_flagged() {
    let mut bytes = hexb(INFO_BYTES);
    bytes.extend_from_slice(b"bob\0cl\0");
    let info = Info::decode(&bytes).unwrap();
    assert_eq!(info.players.len(), 1);
    assert!(info.truncated);
}

#[test]
fn decode_info64() {
    let mut bytes = hexb("ffffffff64747366");
    let mut body = Vec::new();
    sample_info().encode_fields(&mut body);
    bytes.extend_from_slice(&body);
    bytes.push(0x18);
    bytes.extend_from_slice(b"a\0\0-1\0-9999\x001\0");
    let m = Info64::decode(&bytes).unwrap();
    assert_eq!(m.offset, 24);
    assert_eq!(m.info, sample_info());
    let mut out = Vec::new();
    m.encode(&mut out);
    assert_eq!(out, bytes);
}

#[test]
fn encode_info64() {
    let m = Info64 {
        info: Info {
            players: vec![],
            ..sample_info()
        },
        offset: 64,
    };
    let mut out = vec![];
    m.encode(&mut out);
    assert!(out.ends_with(&hexb("313600 8001")));
}

#[test]
fn decode_info64_rejects_negative_offset() {
    let mut bytes = hexb("ffffffff64747366");
    sample_info().encode_fields(&mut bytes);
    bytes.push(0x40);
    assert_eq!(
        Info64::decode(&bytes),
        Err(DecodeError::Invalid("dtsf player offset"))
    );
}

fn sample_extended() -> InfoExtended {
    InfoExtended {
        token: 1_193_046,
        version: s("0.6.4, 16.4"),
        name: s("n"),
        map: s("Tutorial"),
        map_crc: 0x8d4c_6486,
        map_size: 1_082_711,
        game_type: s("DDraceNetwork"),
        flags: 0,
        num_players: 1,
        max_players: 64,
        num_clients: 1,
        max_clients: 64,
        reserved: TwStr::empty(),
        players: vec![PlayerRecord {
            name: s("x"),
            clan: s("y"),
            country: 276,
            score: 5,
            is_player: 0,
            reserved: TwStr::empty(),
        }],
        truncated: false,
    }
}

fn extended_bytes() -> Vec<u8> {
    let mut b = hexb("ffffffff69657874");
    b.extend_from_slice(
        b"1193046\x000.6.4, 16.4\0n\0Tutorial\0-1924373370\x001082711\0DDraceNetwork\0",
    );
    b.extend_from_slice(b"0\x001\x0064\x001\x0064\0\0x\0y\x00276\x005\x000\0\0");
    b
}

#[test]
fn decode_info_extended() {
    assert_eq!(
        InfoExtended::decode(&extended_bytes()),
        Ok(sample_extended())
    );
}

#[test]
fn encode_info_extended() {
    assert_eq!(
        enc(&Message::InfoExtended(sample_extended())),
        extended_bytes()
    );
}

#[test]
fn decode_info_extended_rejects_huge_map_crc() {
    let mut b = hexb("ffffffff69657874");
    b.extend_from_slice(b"1\0v\0n\0m\x0099999999999\0");
    assert_eq!(
        InfoExtended::decode(&b),
        Err(DecodeError::BadNumber("map crc"))
    );
}

#[test]
fn decode_info_more() {
    let mut b = hexb("ffffffff6965782b");
    b.extend_from_slice(b"1193046\x001\0\0x\0y\x00276\x005\x000\0\0");
    let m = InfoMore::decode(&b).unwrap();
    assert_eq!(m.packet_no, 1);
    assert_eq!(m.token, 1_193_046);
    assert_eq!(m.players, sample_extended().players);
    let mut out = vec![];
    m.encode(&mut out);
    assert_eq!(out, b);
}

#[test]
fn encode_info_more() {
    let m = InfoMore {
        token: 5,
        packet_no: 2,
        reserved: TwStr::empty(),
        players: vec![],
        truncated: false,
    };
    assert_eq!(
        enc(&Message::InfoMore(m)),
        hexb("ffffffff6965782b 3500 3200 00")
    );
}

#[test]
fn decode_info_more_rejects_missing_packet_no() {
    let b = hexb("ffffffff6965782b 3500");
    assert_eq!(
        InfoMore::decode(&b),
        Err(DecodeError::Unterminated("packet_no"))
    );
}

fn sample_info7() -> Info7 {
    Info7 {
        browse_token: 200,
        body: Some(Info7Body {
            version: s("0.7.5"),
            name: s("n"),
            hostname: s("h"),
            map: s("dm1"),
            game_type: s("DM"),
            flags: 0,
            skill_level: 1,
            num_players: 0,
            max_players: 8,
            num_clients: 1,
            max_clients: 16,
            players: vec![Player7 {
                name: s("s"),
                clan: s(""),
                country: 276,
                score: 0,
                player_flags: 1,
            }],
            truncated: false,
        }),
    }
}

const INFO7_BYTES: &str = "ffffffff696e6633 8803 302e372e3500 6e00 6800 646d3100 444d00 00 01 00 08 01 10 7300 00 9404 00 01";

#[test]
fn decode_info7() {
    assert_eq!(
        Message::decode(&hexb(INFO7_BYTES), true),
        Ok(Message::Info7(sample_info7()))
    );
}

#[test]
fn encode_info7() {
    assert_eq!(enc(&Message::Info7(sample_info7())), hexb(INFO7_BYTES));
}

#[test]
fn quirk_info7_without_body_is_info_unavailable() {
    let m = Info7::decode(&hexb("ffffffff696e6633 8803")).unwrap();
    assert_eq!(
        m,
        Info7 {
            browse_token: 200,
            body: None
        }
    );
}

#[test]
fn decode_info7_rejects_truncated_body() {
    assert_eq!(
        Info7::decode(&hexb("ffffffff696e6633 8803 302e37")),
        Err(DecodeError::Unterminated("version"))
    );
}

#[test]
fn decode_datagram_routes_by_framing() {
    let mut b = hexb("21 01020304 05060708");
    b.extend_from_slice(&hexb(&format!("{GIE3} 8803")));
    assert_eq!(
        Datagram::decode(&b),
        Ok(Datagram::Connless(
            Header::Sixup {
                token: [1, 2, 3, 4],
                response_token: [5, 6, 7, 8]
            },
            Message::GetInfo7(GetInfo7 { browse_token: 200 })
        ))
    );
    let mut b = hexb("ffffffffffff");
    b.extend_from_slice(&hexb(&format!("{GIE3} 88")));
    assert_eq!(
        Datagram::decode(&b),
        Ok(Datagram::Connless(
            Header::LEGACY,
            Message::GetInfo(GetInfo { token: 0x88 })
        ))
    );
}

// ---- property tests ----

fn tw_str() -> impl Strategy<Value = TwStr> {
    proptest::collection::vec(1u8..=255, 0..20).prop_map(|v| TwStr::new(v).unwrap())
}

fn record(extended: bool) -> impl Strategy<Value = PlayerRecord> {
    (
        tw_str(),
        tw_str(),
        any::<i32>(),
        any::<i32>(),
        any::<i32>(),
        tw_str(),
    )
        .prop_map(
            move |(name, clan, country, score, is_player, reserved)| PlayerRecord {
                name,
                clan,
                country,
                score,
                is_player,
                reserved: if extended { reserved } else { TwStr::empty() },
            },
        )
}

prop_compose! {
    fn info()(token in any::<i32>(), version in tw_str(), name in tw_str(), map in tw_str(),
              game_type in tw_str(), n in proptest::array::uniform5(any::<i32>()),
              players in proptest::collection::vec(record(false), 0..5)) -> Info {
        let [flags, num_players, max_players, num_clients, max_clients] = n;
        Info { token, version, name, map, game_type, flags, num_players, max_players,
               num_clients, max_clients, players, truncated: false }
    }
}

prop_compose! {
    fn extended()(i in info(), map_crc in any::<u32>(), map_size in 0u32..=i32::MAX as u32,
                  reserved in tw_str(),
                  players in proptest::collection::vec(record(true), 0..5)) -> InfoExtended {
        InfoExtended { token: i.token, version: i.version, name: i.name, map: i.map, map_crc,
            map_size, game_type: i.game_type, flags: i.flags, num_players: i.num_players,
            max_players: i.max_players, num_clients: i.num_clients, max_clients: i.max_clients,
            reserved, players, truncated: false }
    }
}

fn player7() -> impl Strategy<Value = Player7> {
    (tw_str(), tw_str(), any::<i32>(), any::<i32>(), any::<i32>()).prop_map(
        |(name, clan, country, score, player_flags)| Player7 {
            name,
            clan,
            country,
            score,
            player_flags,
        },
    )
}

prop_compose! {
    fn info7()(browse_token in any::<i32>(), has_body in any::<bool>(), i in info(),
               hostname in tw_str(), skill_level in any::<i32>(),
               players in proptest::collection::vec(player7(), 0..5)) -> Info7 {
        let body = has_body.then_some(Info7Body { version: i.version, name: i.name, hostname,
            map: i.map, game_type: i.game_type, flags: i.flags, skill_level,
            num_players: i.num_players, max_players: i.max_players, num_clients: i.num_clients,
            max_clients: i.max_clients, players, truncated: false });
        Info7 { browse_token, body }
    }
}

fn header() -> impl Strategy<Value = Header> {
    prop_oneof![
        Just(Header::LEGACY),
        any::<u16>().prop_map(Header::extended),
        (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(token, response_token)| Header::Sixup {
            token,
            response_token
        }),
    ]
}

fn datagram() -> impl Strategy<Value = Datagram> {
    prop_oneof![
        (header(), any::<u8>()).prop_map(|(h, token)| {
            if h.is_sixup() {
                Datagram::Connless(h, Message::GetInfo64(GetInfo { token }))
            } else {
                Datagram::Connless(h, Message::GetInfo(GetInfo { token }))
            }
        }),
        (any::<[u8; 4]>(), any::<[u8; 4]>(), any::<i32>()).prop_map(
            |(token, response_token, b)| {
                Datagram::Connless(
                    Header::Sixup {
                        token,
                        response_token,
                    },
                    Message::GetInfo7(GetInfo7 { browse_token: b }),
                )
            }
        ),
        info().prop_map(|i| Datagram::Connless(Header::LEGACY, Message::Info(i))),
        (info(), any::<u16>()).prop_map(|(mut info, offset)| {
            info.players
                .iter_mut()
                .for_each(|p| p.reserved = TwStr::empty());
            Datagram::Connless(Header::LEGACY, Message::Info64(Info64 { info, offset }))
        }),
        extended().prop_map(|i| Datagram::Connless(Header::LEGACY, Message::InfoExtended(i))),
        (
            any::<i32>(),
            any::<i32>(),
            tw_str(),
            proptest::collection::vec(record(true), 0..5)
        )
            .prop_map(|(token, packet_no, reserved, players)| Datagram::Connless(
                Header::LEGACY,
                Message::InfoMore(InfoMore {
                    token,
                    packet_no,
                    reserved,
                    players,
                    truncated: false
                })
            )),
        (any::<[u8; 4]>(), any::<[u8; 4]>(), info7()).prop_map(|(token, response_token, i)| {
            Datagram::Connless(
                Header::Sixup {
                    token,
                    response_token,
                },
                Message::Info7(i),
            )
        }),
        (any::<[u8; 4]>(), any::<[u8; 4]>(), 0u16..600).prop_map(|(token, own_token, padding)| {
            Datagram::Token(TokenMessage {
                token,
                own_token,
                padding,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Datagram::decode(&bytes);
    }

    #[test]
    fn decode_after_valid_prefix_never_panics(d in datagram(), cut in 0usize..400, junk in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut out = Vec::new();
        d.encode(&mut out);
        out.truncate(cut);
        out.extend_from_slice(&junk);
        let _ = Datagram::decode(&out);
    }

    #[test]
    fn datagram_round_trip(d in datagram()) {
        let mut out = Vec::new();
        d.encode(&mut out);
        prop_assert_eq!(Datagram::decode(&out), Ok(d));
    }

    #[test]
    fn header_and_token_encoded_len_match(d in datagram()) {
        let mut out = Vec::new();
        match &d {
            Datagram::Token(t) => {
                t.encode(&mut out);
                prop_assert_eq!(out.len(), t.encoded_len());
            }
            Datagram::Connless(h, _) => {
                h.encode(&mut out);
                prop_assert_eq!(out.len(), h.encoded_len());
            }
        }
    }

    #[test]
    fn record_encoded_len_matches(r in record(true)) {
        let mut out = Vec::new();
        write_record06(&r, &mut out, true);
        prop_assert_eq!(out.len(), r.encoded_len(true));
    }
}
