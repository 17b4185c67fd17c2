use super::*;
use crate::a2s::NO_CHALLENGE;
use proptest::prelude::*;

fn encoded(p: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    p.encode(&mut out);
    out
}

fn dgram(body: &[u8]) -> Vec<u8> {
    let mut d = SIMPLE_HEADER.to_vec();
    d.extend_from_slice(body);
    d
}

#[test]
fn a2s_requests_have_the_documented_bytes() {
    assert_eq!(
        encoded(&Packet::InfoRequest { challenge: None }),
        b"\xff\xff\xff\xffTSource Engine Query\0"
    );
    assert_eq!(
        encoded(&Packet::InfoRequest {
            challenge: Some(0x0403_0201)
        }),
        b"\xff\xff\xff\xffTSource Engine Query\0\x01\x02\x03\x04"
    );
    assert_eq!(
        encoded(&Packet::PlayerRequest {
            challenge: NO_CHALLENGE
        }),
        b"\xff\xff\xff\xffU\xff\xff\xff\xff"
    );
    assert_eq!(
        encoded(&Packet::RulesRequest {
            challenge: 0x0403_0201
        }),
        b"\xff\xff\xff\xffV\x01\x02\x03\x04"
    );
    assert_eq!(
        Packet::decode(b"\xff\xff\xff\xffA\x11\x22\x33\x44"),
        Ok(Packet::Challenge(0x4433_2211))
    );
    // A request with a short challenge, a bad payload or trailing bytes is refused.
    assert!(Packet::decode(b"\xff\xff\xff\xffU\xff\xff").is_err());
    assert!(Packet::decode(b"\xff\xff\xff\xffTSource Engine Quer\0").is_err());
    assert!(Packet::decode(b"\xff\xff\xff\xffTSource Engine Query\0\x01").is_err());
    assert_eq!(
        Packet::decode(b"\xfe\xff\xff\xffA\x00\x00\x00\x00"),
        Err(DecodeError::BadMagic("a2s header"))
    );
    assert_eq!(
        Packet::decode(b"\xff\xff\xff\xffZ"),
        Err(DecodeError::BadMagic("a2s type"))
    );
}

/// A Source INFO body built by hand, field by field, as a server writes it.
fn info_bytes(app_id: u16, ship: bool, edf: Option<(u8, &[u8])>) -> Vec<u8> {
    let mut d = dgram(b"I\x11");
    d.extend_from_slice(b"My Server\0de_dust2\0csgo\0Counter-Strike: Global Offensive\0");
    d.extend_from_slice(&app_id.to_le_bytes());
    d.extend_from_slice(&[5, 24, 2, b'd', b'l', 1, 1]);
    if ship {
        d.extend_from_slice(&[3, 4, 5]);
    }
    d.extend_from_slice(b"1.38.7.9\0");
    if let Some((flag, fields)) = edf {
        d.push(flag);
        d.extend_from_slice(fields);
    }
    d
}

#[test]
fn a2s_info_without_extra_data() {
    let Ok(Packet::Info(i)) = Packet::decode(&info_bytes(730, false, None)) else {
        panic!("no info");
    };
    assert_eq!(i.protocol, 17);
    assert_eq!(i.name, b"My Server");
    assert_eq!(i.map, b"de_dust2");
    assert_eq!(i.folder, b"csgo");
    assert_eq!(i.game, b"Counter-Strike: Global Offensive");
    assert_eq!(i.app_id, 730);
    assert_eq!(
        (i.players, i.max_players, i.bots),
        (5, 24, 2),
        "counts in wire order"
    );
    assert_eq!((i.server_type, i.environment), (b'd', b'l'));
    assert_eq!((i.visibility, i.vac), (1, 1));
    assert_eq!(i.the_ship, None);
    assert_eq!(i.version, b"1.38.7.9");
    assert_eq!(i.edf, None);
    assert_eq!(i.full_app_id(), 730);
}

#[test]
fn a2s_info_every_extra_data_field() {
    let mut fields = Vec::new();
    fields.extend_from_slice(&27015u16.to_le_bytes());
    fields.extend_from_slice(&0x0110_0001_0203_0405u64.to_le_bytes());
    fields.extend_from_slice(&27020u16.to_le_bytes());
    fields.extend_from_slice(b"SourceTV\0");
    fields.extend_from_slice(b"empty,secure\0");
    fields.extend_from_slice(&0x0000_0000_0001_02DAu64.to_le_bytes());
    let Ok(Packet::Info(i)) = Packet::decode(&info_bytes(730, false, Some((0xF1, &fields)))) else {
        panic!("no info");
    };
    assert_eq!(i.edf, Some(0xF1));
    assert_eq!(i.port, Some(27015));
    assert_eq!(i.steam_id, Some(0x0110_0001_0203_0405));
    assert_eq!(i.source_tv, Some((27020, b"SourceTV".to_vec())));
    assert_eq!(i.keywords.as_deref(), Some(&b"empty,secure"[..]));
    assert_eq!(i.game_id, Some(0x102DA));
    // The game id's low 24 bits carry app ids that do not fit the 16-bit field.
    assert_eq!(i.full_app_id(), 0x102DA);
    // Re-encoding gives the same bytes.
    assert_eq!(
        encoded(&Packet::Info(i)),
        info_bytes(730, false, Some((0xF1, &fields)))
    );

    // Only the keyword flag: the other fields stay absent.
    let Ok(Packet::Info(i)) = Packet::decode(&info_bytes(440, false, Some((0x20, b"tf,x\0"))))
    else {
        panic!("no info");
    };
    assert_eq!((i.port, i.steam_id, i.game_id), (None, None, None));
    assert_eq!(i.keywords.as_deref(), Some(&b"tf,x"[..]));
    // A flag whose field is missing is an error, not a guess.
    assert_eq!(
        Packet::decode(&info_bytes(440, false, Some((0x80, b"\x01")))),
        Err(DecodeError::Truncated("INFO EDF port"))
    );
}

#[test]
fn a2s_info_of_the_ship_has_three_more_bytes() {
    let Ok(Packet::Info(i)) = Packet::decode(&info_bytes(2400, true, None)) else {
        panic!("no info");
    };
    assert_eq!(
        i.the_ship,
        Some(TheShip {
            mode: 3,
            witnesses: 4,
            duration: 5
        })
    );
    assert_eq!(i.version, b"1.38.7.9");
    // The same bytes under another app id would misread the version.
    assert!(matches!(Packet::decode(&info_bytes(2401, true, None)),
        Ok(Packet::Info(i)) if i.version != b"1.38.7.9"));
}

fn goldsrc_bytes(with_mod: bool) -> Vec<u8> {
    let mut d = dgram(b"m127.0.0.1:27015\0HL Server\0crossfire\0valve\0Half-Life\0");
    d.extend_from_slice(&[3, 16, 47, b'D', b'L', 0]);
    if with_mod {
        d.push(1);
        d.extend_from_slice(b"http://mod.example\0http://dl.example\0\0");
        d.extend_from_slice(&7u32.to_le_bytes());
        d.extend_from_slice(&123_456u32.to_le_bytes());
        d.extend_from_slice(&[1, 1]);
    } else {
        d.push(0);
    }
    d.extend_from_slice(&[1, 2]);
    d
}

#[test]
fn a2s_goldsrc_info_with_and_without_mod() {
    let Ok(Packet::GoldSrcInfo(i)) = Packet::decode(&goldsrc_bytes(false)) else {
        panic!("no info");
    };
    assert_eq!(i.address, b"127.0.0.1:27015");
    assert_eq!(i.name, b"HL Server");
    assert_eq!(i.map, b"crossfire");
    assert_eq!((i.players, i.max_players, i.protocol), (3, 16, 47));
    assert_eq!(
        (i.server_type, i.environment, i.visibility),
        (b'D', b'L', 0)
    );
    assert_eq!(i.mod_info, None);
    assert_eq!((i.vac, i.bots), (1, 2));
    let Ok(Packet::GoldSrcInfo(i)) = Packet::decode(&goldsrc_bytes(true)) else {
        panic!("no info");
    };
    let m = i.mod_info.clone().unwrap();
    assert_eq!(m.link, b"http://mod.example");
    assert_eq!(m.download, b"http://dl.example");
    assert_eq!((m.version, m.size, m.kind, m.dll), (7, 123_456, 1, 1));
    assert_eq!((i.vac, i.bots), (1, 2));
    assert_eq!(encoded(&Packet::GoldSrcInfo(i)), goldsrc_bytes(true));
}

fn player_bytes(declared: u8, n: usize) -> Vec<u8> {
    let mut d = dgram(&[b'D', declared]);
    for k in 0..n {
        d.push(0);
        d.extend_from_slice(format!("player{k}\0").as_bytes());
        d.extend_from_slice(&i32::try_from(k).unwrap().to_le_bytes());
        d.extend_from_slice(&1.5f32.to_le_bytes());
    }
    d
}

#[test]
fn a2s_players_are_counted_from_the_bytes_not_the_count_byte() {
    // 300 players: the count byte wrapped to 44 (300 mod 256).
    let d = player_bytes(44, 300);
    let Ok(Packet::Players(p)) = Packet::decode(&d) else {
        panic!("no players");
    };
    assert_eq!(p.declared, 44);
    assert_eq!(p.players.len(), 300);
    assert_eq!(p.players[299].name, b"player299");
    assert_eq!(p.players[299].score, 299);
    assert!((p.players[0].duration - 1.5).abs() < f32::EPSILON);
    assert!(!p.truncated);
    // A count byte larger than what follows is not trusted either.
    let Ok(Packet::Players(p)) = Packet::decode(&player_bytes(200, 2)) else {
        panic!("no players");
    };
    assert_eq!(p.players.len(), 2);
    // A reply cut inside an entry keeps the whole entries and says so.
    let mut d = player_bytes(3, 3);
    d.truncate(d.len() - 2);
    let Ok(Packet::Players(p)) = Packet::decode(&d) else {
        panic!("no players");
    };
    assert_eq!(p.players.len(), 2);
    assert!(p.truncated);
}

#[test]
fn a2s_players_of_the_ship_carry_deaths_and_money() {
    let mut d = player_bytes(2, 2);
    for (deaths, money) in [(1i32, 500i32), (7, -20)] {
        d.extend_from_slice(&deaths.to_le_bytes());
        d.extend_from_slice(&money.to_le_bytes());
    }
    let Ok(Packet::Players(p)) = Packet::decode_for_app(&d, Some(THE_SHIP_APP_ID)) else {
        panic!("no players");
    };
    assert_eq!(p.players.len(), 2);
    assert_eq!(
        p.players[1].ship,
        Some(ShipPlayer {
            deaths: 7,
            money: -20
        })
    );
    assert_eq!(encoded(&Packet::Players(p)), d);
    // Without the app id the trailing bytes are not deaths and money.
    let Ok(Packet::Players(p)) = Packet::decode(&d) else {
        panic!("no players");
    };
    assert!(p.players.iter().all(|e| e.ship.is_none()));
}

#[test]
fn a2s_rules_are_read_to_the_end_whatever_the_count() {
    let mut d = dgram(b"E\x01\x00");
    d.extend_from_slice(b"mp_timelimit\x0030\x00sv_gravity\x00800\x00");
    let Ok(Packet::Rules(r)) = Packet::decode(&d) else {
        panic!("no rules");
    };
    assert_eq!(r.declared, 1);
    assert_eq!(
        r.rules,
        vec![
            (b"mp_timelimit".to_vec(), b"30".to_vec()),
            (b"sv_gravity".to_vec(), b"800".to_vec())
        ]
    );
    assert!(!r.truncated);
    // Cut in the middle of a value: the pair is dropped and the reply flagged.
    d.truncate(d.len() - 2);
    let Ok(Packet::Rules(r)) = Packet::decode(&d) else {
        panic!("no rules");
    };
    assert_eq!(r.rules.len(), 1);
    assert!(r.truncated);
}

#[test]
fn a2s_a_60_kb_single_datagram_decodes() {
    let mut d = dgram(b"E\xff\xff");
    let mut n = 0usize;
    while d.len() < 60_000 {
        d.extend_from_slice(format!("key{n:05}\0value{n:05}\0").as_bytes());
        n += 1;
    }
    assert!(d.len() >= 60_000 && d.len() <= MAX_DATAGRAM);
    let Ok(Packet::Rules(r)) = Packet::decode(&d) else {
        panic!("no rules");
    };
    assert_eq!(r.rules.len(), n);
    assert_eq!(r.rules[n - 1].0, format!("key{:05}", n - 1).as_bytes());
}

#[test]
fn a2s_player_and_rule_limits_are_enforced() {
    // More entries than MAX_PLAYERS in one reassembled reply is refused, not stored.
    let d = player_bytes(0, MAX_PLAYERS + 1);
    assert_eq!(
        Packet::decode(&d),
        Err(DecodeError::TooLarge("PLAYER entries"))
    );
    let mut d = dgram(b"E\x00\x00");
    for _ in 0..=MAX_RULES {
        d.extend_from_slice(b"\0\0");
    }
    assert_eq!(
        Packet::decode(&d),
        Err(DecodeError::TooLarge("RULES pairs"))
    );
}

fn bytes_no_nul(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(1u8..=255, 0..max)
}

fn info_strategy() -> impl Strategy<Value = Info> {
    (
        (
            any::<u8>(),
            bytes_no_nul(20),
            bytes_no_nul(20),
            bytes_no_nul(8),
            bytes_no_nul(20),
            prop_oneof![Just(2400u16), any::<u16>()],
            any::<[u8; 7]>(),
            any::<[u8; 3]>(),
        ),
        (
            bytes_no_nul(10),
            proptest::option::of(any::<u8>()),
            any::<u16>(),
            any::<u64>(),
            (any::<u16>(), bytes_no_nul(10)),
            bytes_no_nul(30),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (protocol, name, map, folder, game, app_id, b, ship),
                (version, edf, port, sid, tv, kw, gid),
            )| {
                let bit = |f: u8| edf.is_some_and(|e| e & f != 0);
                Info {
                    protocol,
                    name,
                    map,
                    folder,
                    game,
                    app_id,
                    players: b[0],
                    max_players: b[1],
                    bots: b[2],
                    server_type: b[3],
                    environment: b[4],
                    visibility: b[5],
                    vac: b[6],
                    the_ship: (u32::from(app_id) == THE_SHIP_APP_ID).then_some(TheShip {
                        mode: ship[0],
                        witnesses: ship[1],
                        duration: ship[2],
                    }),
                    version,
                    edf,
                    port: bit(EDF_PORT).then_some(port),
                    steam_id: bit(EDF_STEAM_ID).then_some(sid),
                    source_tv: bit(EDF_SOURCE_TV).then_some(tv),
                    keywords: bit(EDF_KEYWORDS).then_some(kw),
                    game_id: bit(EDF_GAME_ID).then_some(gid),
                }
            },
        )
}

fn player_strategy() -> impl Strategy<Value = PlayerEntry> {
    (any::<u8>(), bytes_no_nul(16), any::<i32>(), -1e6f32..1e6f32).prop_map(
        |(index, name, score, duration)| PlayerEntry {
            index,
            name,
            score,
            duration,
            ship: None,
        },
    )
}

proptest! {
    #[test]
    fn a2s_info_round_trips(info in info_strategy()) {
        let p = Packet::Info(Box::new(info));
        prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
    }

    #[test]
    fn a2s_goldsrc_info_round_trips(address in bytes_no_nul(20), name in bytes_no_nul(20),
                                    b in any::<[u8; 8]>(), link in bytes_no_nul(10),
                                    version in any::<u32>(), with_mod in any::<bool>()) {
        let i = GoldSrcInfo {
            address, name, map: b"m".to_vec(), folder: b"valve".to_vec(), game: Vec::new(),
            players: b[0], max_players: b[1], protocol: b[2], server_type: b[3],
            environment: b[4], visibility: b[5],
            mod_info: with_mod.then(|| ModInfo { link, download: Vec::new(), version,
                size: 1, kind: 0, dll: 1 }),
            vac: b[6], bots: b[7],
        };
        let p = Packet::GoldSrcInfo(Box::new(i));
        prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
    }

    #[test]
    fn a2s_players_and_rules_round_trip(players in proptest::collection::vec(player_strategy(), 0..40),
                                       declared in any::<u8>(),
                                       rules in proptest::collection::vec((bytes_no_nul(12), bytes_no_nul(12)), 0..40),
                                       rc in any::<u16>(), challenge in any::<u32>()) {
        let p = Packet::Players(Players { declared, players, truncated: false });
        prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
        let p = Packet::Rules(Rules { declared: rc, rules, truncated: false });
        prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
        for p in [Packet::Challenge(challenge), Packet::PlayerRequest { challenge },
                  Packet::RulesRequest { challenge }, Packet::InfoRequest { challenge: Some(challenge) },
                  Packet::InfoRequest { challenge: None }] {
            prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
        }
    }

    #[test]
    fn a2s_decode_never_panics(kind in prop_oneof![Just(b'T'), Just(b'U'), Just(b'V'), Just(b'A'),
                                                   Just(b'I'), Just(b'm'), Just(b'D'), Just(b'E'), any::<u8>()],
                               tail in proptest::collection::vec(any::<u8>(), 0..200),
                               ship in any::<bool>()) {
        let mut d = dgram(&[kind]);
        d.extend_from_slice(&tail);
        let app = ship.then_some(THE_SHIP_APP_ID);
        if let Ok(p) = Packet::decode_for_app(&d, app) {
            // Whatever decodes re-encodes to bytes that decode and re-encode identically.
            let once = encoded(&p);
            let again = Packet::decode_for_app(&once, app).map(|q| encoded(&q));
            prop_assert_eq!(again, Ok(once));
        }
    }
}
