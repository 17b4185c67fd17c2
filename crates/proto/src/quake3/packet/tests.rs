use super::*;
use crate::quake3::info::tests::info_string;
use proptest::prelude::*;

fn dgram(body: &[u8]) -> Vec<u8> {
    let mut d = HEADER.to_vec();
    d.extend_from_slice(body);
    d
}

fn word(s: &str) -> Word {
    Word::new(s.as_bytes()).unwrap()
}

fn encoded(p: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    p.encode(&mut out);
    out
}

/// Decode, compare, and check the encoder writes the same bytes back.
fn both_ways(bytes: &[u8], packet: &Packet) {
    assert_eq!(Packet::decode(bytes).as_ref(), Ok(packet));
    assert_eq!(encoded(packet), bytes);
}

#[test]
fn quake3_queries_with_and_without_challenge() {
    both_ways(&dgram(b"getinfo"), &Packet::GetInfo { challenge: None });
    both_ways(
        &dgram(b"getinfo A1b?~!x#9"),
        &Packet::GetInfo {
            challenge: Some(word("A1b?~!x#9")),
        },
    );
    both_ways(&dgram(b"getstatus"), &Packet::GetStatus { challenge: None });
    both_ways(
        &dgram(b"getstatus xxx"),
        &Packet::GetStatus {
            challenge: Some(word("xxx")),
        },
    );
    // A trailing line feed is tolerated.
    assert_eq!(
        Packet::decode(&dgram(b"getstatus xxx\n")),
        Ok(Packet::GetStatus {
            challenge: Some(word("xxx"))
        })
    );
    // qstat's form: the command, then a line feed.
    assert_eq!(
        Packet::decode(&dgram(b"getinfo\n")),
        Ok(Packet::GetInfo { challenge: None })
    );
    assert_eq!(
        Packet::decode(&dgram(b"getstatus\n")),
        Ok(Packet::GetStatus { challenge: None })
    );
    // gamedig's and opengsq's form: a C string with its NUL.
    assert_eq!(
        Packet::decode(&dgram(b"getstatus\0")),
        Ok(Packet::GetStatus { challenge: None })
    );
    assert_eq!(
        Packet::decode(&dgram(b"getinfo opengsq\0junk")),
        Ok(Packet::GetInfo {
            challenge: Some(word("opengsq"))
        })
    );
    assert_eq!(
        Packet::decode(&dgram(b"getinfo\nxyz")),
        Err(DecodeError::Invalid("query challenge separator"))
    );
    assert_eq!(
        Packet::decode(&dgram(b"getinfo a b")),
        Err(DecodeError::Invalid("word byte"))
    );
    assert_eq!(
        Packet::decode(b"\xff\xff\xffgetinfo"),
        Err(DecodeError::BadMagic("quake3 header"))
    );
    assert_eq!(
        Packet::decode(&dgram(b"GETINFO")),
        Err(DecodeError::BadMagic("quake3 command"))
    );
    assert_eq!(
        Packet::decode(b"\xff\xff"),
        Err(DecodeError::Truncated("quake3 header"))
    );
}

#[test]
fn quake3_master_getinfo_carries_a_generated_challenge() {
    let challenge = crate::quake3::generate_challenge([7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert!(crate::quake3::is_master_challenge(challenge.as_bytes()));
    let p = Packet::GetInfo {
        challenge: Some(challenge.clone()),
    };
    let bytes = encoded(&p);
    assert_eq!(
        bytes,
        dgram(&[&b"getinfo "[..], challenge.as_bytes()].concat())
    );
    assert_eq!(Packet::decode(&bytes), Ok(p));
    // The server echoes it as the `challenge` key.
    let reply = dgram(&[&b"infoResponse\n\\challenge\\"[..], challenge.as_bytes()].concat());
    let Ok(Packet::InfoResponse { info }) = Packet::decode(&reply) else {
        panic!("not an infoResponse");
    };
    assert_eq!(info.get(b"challenge"), Some(challenge.as_bytes()));
}

#[test]
fn quake3_info_response() {
    let bytes = dgram(
        b"infoResponse\n\\challenge\\xyz\\protocol\\68\\hostname\\^1noname\\clients\\2\\sv_maxclients\\8",
    );
    let mut info = InfoString::new();
    for (k, v) in [
        ("challenge", "xyz"),
        ("protocol", "68"),
        ("hostname", "^1noname"),
        ("clients", "2"),
        ("sv_maxclients", "8"),
    ] {
        info.push(k, v).unwrap();
    }
    both_ways(&bytes, &Packet::InfoResponse { info: info.clone() });
    let mut with_lf = bytes.clone();
    with_lf.push(b'\n');
    assert_eq!(Packet::decode(&with_lf), Ok(Packet::InfoResponse { info }));
    assert_eq!(
        Packet::decode(&dgram(b"infoResponse \\a\\b")),
        Err(DecodeError::Invalid("infoResponse line feed"))
    );
}

#[test]
fn quake3_status_response_with_players() {
    let bytes = dgram(
        b"statusResponse\n\\sv_hostname\\Test\\g_gametype\\4\n12 48 \"^1Pl\xe9yer\"\n-3 0 \"bot\\/\"\n7 999 \"x\" 2\n",
    );
    let mut info = InfoString::new();
    info.push("sv_hostname", "Test").unwrap();
    info.push("g_gametype", "4").unwrap();
    let players = vec![
        PlayerLine::new(12, 48, &b"^1Pl\xe9yer"[..]).unwrap(),
        PlayerLine::new(-3, 0, &b"bot\\/"[..]).unwrap(),
        PlayerLine::with_extra(7, 999, "x", " 2").unwrap(),
    ];
    let p = Packet::StatusResponse {
        info,
        players: players.clone(),
    };
    both_ways(&bytes, &p);
    assert_eq!(players[2].extra(), b" 2");
    assert_eq!(
        crate::quake3::decode_text(players[0].name()).plain,
        "Pléyer"
    );
    // No players, no final line feed.
    assert_eq!(
        Packet::decode(&dgram(b"statusResponse\n\\a\\1")),
        Packet::decode(&dgram(b"statusResponse\n\\a\\1\n"))
    );
    for (body, err) in [
        (
            &b"statusResponse\n\\a\\1\n1 2 \"open\n"[..],
            DecodeError::Unterminated("player name"),
        ),
        (
            b"statusResponse\n\\a\\1\n1 2 \"n\"",
            DecodeError::Unterminated("player line"),
        ),
        (
            b"statusResponse\n\\a\\1\nx 2 \"n\"\n",
            DecodeError::BadNumber("player score"),
        ),
        (
            b"statusResponse\n\\a\\1\n1 2 n\n",
            DecodeError::Invalid("player name quote"),
        ),
        (
            b"statusResponse\n\\a\\1\n1  2 \"n\"\n",
            DecodeError::BadNumber("player ping"),
        ),
        (
            b"statusResponse\n\\a\\1\n1 99999999999 \"n\"\n",
            DecodeError::BadNumber("player ping"),
        ),
    ] {
        assert_eq!(
            Packet::decode(&dgram(body)),
            Err(err),
            "{}",
            body.escape_ascii()
        );
    }
    let mut many = dgram(b"statusResponse\n\\a\\1\n");
    for _ in 0..=MAX_PLAYERS {
        many.extend_from_slice(b"0 0 \"p\"\n");
    }
    assert_eq!(
        Packet::decode(&many),
        Err(DecodeError::TooLarge("statusResponse players"))
    );
}

#[test]
fn quake3_heartbeat() {
    both_ways(
        &dgram(b"heartbeat DarkPlaces\n"),
        &Packet::Heartbeat {
            tag: word("DarkPlaces"),
        },
    );
    assert_eq!(
        Packet::decode(&dgram(b"heartbeat QuakeArena-1")),
        Ok(Packet::Heartbeat {
            tag: word("QuakeArena-1")
        })
    );
    assert_eq!(
        Packet::decode(&dgram(b"heartbeat \n")),
        Err(DecodeError::Invalid("empty word"))
    );
    assert_eq!(
        Packet::decode(&dgram(b"heartbeat")),
        Err(DecodeError::Invalid("heartbeat separator"))
    );
}

#[test]
fn quake3_getservers_requests() {
    use FilterOption::*;
    both_ways(
        &dgram(b"getservers 68 empty full"),
        &Packet::GetServers {
            game: None,
            protocol: 68,
            options: vec![Empty, Full],
        },
    );
    both_ways(
        &dgram(b"getservers Xonotic 3 empty gametype=dm ffa tourney team ctf foo"),
        &Packet::GetServers {
            game: Some(word("Xonotic")),
            protocol: 3,
            options: vec![
                Empty,
                Gametype(word("dm")),
                Ffa,
                Tourney,
                Team,
                Ctf,
                Other(b"foo".to_vec()),
            ],
        },
    );
    let ext = Packet::GetServersExt {
        game: word("Quake3Arena"),
        protocol: 68,
        options: vec![Ipv4, Ipv6, Full],
    };
    both_ways(&dgram(b"getserversExt Quake3Arena 68 ipv4 ipv6 full"), &ext);
    // Extra spaces and a trailing line feed are tolerated.
    assert_eq!(
        Packet::decode(&dgram(b"getserversExt  Quake3Arena 68 ipv4  ipv6 full\n")),
        Ok(ext)
    );
    let shortcuts: Vec<_> = [Ffa, Tourney, Team, Ctf, Gametype(word("7")), Empty]
        .iter()
        .map(|o| o.gametype().map(<[u8]>::to_vec))
        .collect();
    assert_eq!(
        shortcuts,
        [
            Some(b"0".to_vec()),
            Some(b"1".to_vec()),
            Some(b"3".to_vec()),
            Some(b"4".to_vec()),
            Some(b"7".to_vec()),
            None
        ]
    );
    // An empty gametype= is not a filter: kept as an unknown option.
    assert_eq!(
        Packet::decode(&dgram(b"getservers 68 gametype=")),
        Ok(Packet::GetServers {
            game: None,
            protocol: 68,
            options: vec![Other(b"gametype=".to_vec())],
        })
    );
    for (body, err) in [
        (
            &b"getserversExt 68"[..],
            DecodeError::Truncated("getservers protocol"),
        ),
        (b"getservers", DecodeError::Invalid("getservers separator")),
        (b"getservers ", DecodeError::Truncated("getservers")),
        (
            b"getservers Xonotic x",
            DecodeError::BadNumber("getservers protocol"),
        ),
        (
            b"getservers 99999999999",
            DecodeError::BadNumber("getservers protocol"),
        ),
    ] {
        assert_eq!(
            Packet::decode(&dgram(body)),
            Err(err),
            "{}",
            body.escape_ascii()
        );
    }
    let mut many = dgram(b"getservers 68");
    for _ in 0..=MAX_OPTIONS {
        many.extend_from_slice(b" full");
    }
    assert_eq!(
        Packet::decode(&many),
        Err(DecodeError::TooLarge("getservers options"))
    );
}

fn v4(a: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::from((a, port))
}

#[test]
fn quake3_list_entries_are_read_by_length() {
    // 92.47.92.47:23644 is 5c 2f 5c 2f : 5c 5c, every byte a separator value.
    let tricky = v4([0x5C, 0x2F, 0x5C, 0x2F], 0x5C5C);
    let v6: SocketAddr = "[2001:db8::5c2f]:12079".parse().unwrap();
    let mut body = b"getserversExtResponse\\\x5c\x2f\x5c\x2f\x5c\x5c/".to_vec();
    body.extend_from_slice(&[
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x5c, 0x2f,
    ]);
    body.extend_from_slice(&[0x2f, 0x2f]);
    body.extend_from_slice(b"\\\x7f\x00\x00\x01\x6d\x2e\\EOT\0\0\0");
    let list = ServerList {
        ext: true,
        servers: vec![tricky, v6, v4([127, 0, 0, 1], 27950)],
        eot: true,
    };
    both_ways(&dgram(&body), &Packet::ServerList(list));
    // The same IPv4 entry in a plain response.
    both_ways(
        &dgram(b"getserversResponse\\\x5c\x2f\x5c\x2f\x5c\x5c"),
        &Packet::ServerList(ServerList {
            ext: false,
            servers: vec![tricky],
            eot: false,
        }),
    );
}

#[test]
fn quake3_empty_list_is_a_lone_eot() {
    let lone = dgram(b"getserversResponse\\EOT\0\0\0");
    assert_eq!(
        ServerList::encode_datagrams(false, std::iter::empty::<SocketAddr>()),
        vec![lone.clone()]
    );
    assert_eq!(
        Packet::decode(&lone),
        Ok(Packet::ServerList(ServerList {
            ext: false,
            servers: vec![],
            eot: true
        }))
    );
    // A plain list cannot carry IPv6: an all-IPv6 list is empty there.
    let v6: SocketAddr = "[::1]:27960".parse().unwrap();
    assert_eq!(ServerList::encode_datagrams(false, [v6]), vec![lone]);
}

#[test]
fn quake3_malformed_lists_are_rejected() {
    for (body, err) in [
        (
            &b"getserversResponse\\EOT\0\0\0\\\x7f\0\0\x01\x6d\x38"[..],
            DecodeError::Invalid("EOT before the end of the list datagram"),
        ),
        (
            b"getserversResponse\\\x7f\0\0\x01\x6d",
            DecodeError::Truncated("server list entry"),
        ),
        (
            b"getserversExtResponse/\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x6d",
            DecodeError::Truncated("server list entry"),
        ),
        (
            b"getserversResponse\\EOT\0\0",
            DecodeError::Truncated("server list entry"),
        ),
        (
            b"getserversResponse!\x7f\0\0\x01\x6d\x38",
            DecodeError::Invalid("server list separator"),
        ),
        // `/` entries only exist in the extended response.
        (
            b"getserversResponse/\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01\x6d\x38",
            DecodeError::Invalid("server list separator"),
        ),
    ] {
        assert_eq!(
            Packet::decode(&dgram(body)),
            Err(err),
            "{}",
            body.escape_ascii()
        );
    }
}

fn decode_lists(datagrams: &[Vec<u8>]) -> (Vec<SocketAddr>, Vec<bool>) {
    let mut servers = Vec::new();
    let mut eots = Vec::new();
    for d in datagrams {
        assert!(
            d.len() <= LIST_DATAGRAM_LIMIT,
            "datagram of {} bytes",
            d.len()
        );
        let Ok(Packet::ServerList(list)) = Packet::decode(d) else {
            panic!("not a list: {}", d.escape_ascii());
        };
        servers.extend(list.servers);
        eots.push(list.eot);
    }
    (servers, eots)
}

#[test]
fn quake3_long_list_splits_into_datagrams() {
    let servers: Vec<SocketAddr> = (0u16..600)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            if i % 3 == 0 {
                SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, u16::from(hi), u16::from(lo)], i))
            } else {
                v4([10, 0, hi, lo], 27960 + i)
            }
        })
        .collect();
    let datagrams = ServerList::encode_datagrams(true, &servers);
    // 200 IPv6 x 19 + 400 IPv4 x 7 + 7 (EOT) = 6,607 bytes of entries, 1,400 - 25 per datagram.
    assert_eq!(datagrams.len(), 5);
    let (decoded, eots) = decode_lists(&datagrams);
    assert_eq!(decoded, servers);
    assert_eq!(eots, [false, false, false, false, true]);
    // The plain response keeps only the IPv4 entries.
    let plain = ServerList::encode_datagrams(false, &servers);
    let (decoded, eots) = decode_lists(&plain);
    let ipv4: Vec<_> = servers
        .iter()
        .copied()
        .filter(SocketAddr::is_ipv4)
        .collect();
    assert_eq!(decoded, ipv4);
    assert_eq!(eots.last(), Some(&true));
    assert!(eots.iter().rev().skip(1).all(|e| !e));
}

#[test]
fn quake3_full_datagram_moves_eot_to_its_own() {
    // Exactly enough IPv4 entries to fill a datagram to the byte leaves no room for EOT.
    let header = HEADER.len() + GETSERVERS_RESPONSE.len();
    let fit = (LIST_DATAGRAM_LIMIT - header) / IPV4_ENTRY_LEN;
    let count = u16::try_from(fit).unwrap();
    let servers: Vec<_> = (0..count).map(|i| v4([10, 1, 2, 3], i + 1)).collect();
    let datagrams = ServerList::encode_datagrams(false, &servers);
    let (decoded, eots) = decode_lists(&datagrams);
    assert_eq!(decoded, servers);
    if header + fit * IPV4_ENTRY_LEN + IPV4_ENTRY_LEN > LIST_DATAGRAM_LIMIT {
        assert_eq!(eots, [false, true]);
    } else {
        assert_eq!(eots, [true]);
    }
}

#[test]
fn quake3_oversized_datagram_is_refused() {
    let mut d = dgram(b"getserversResponse");
    d.resize(MAX_DATAGRAM + 1, b'\\');
    assert_eq!(
        Packet::decode(&d),
        Err(DecodeError::TooLarge("quake3 datagram"))
    );
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::from((Ipv6Addr::from(ip), port))),
    ]
}

fn player_line() -> impl Strategy<Value = PlayerLine> {
    let name = proptest::collection::vec(
        any::<u8>().prop_filter("name byte", |b| !matches!(b, b'"' | b'\n' | 0)),
        0..20,
    );
    let extra = proptest::collection::vec(
        any::<u8>().prop_filter("extra byte", |b| !matches!(b, b'\n' | 0)),
        0..4,
    );
    (any::<i32>(), any::<i32>(), name, extra)
        .prop_map(|(s, p, n, e)| PlayerLine::with_extra(s, p, n, e).unwrap())
}

proptest! {
    #[test]
    fn quake3_status_reply_round_trips(info in info_string(),
                                       players in proptest::collection::vec(player_line(), 0..10)) {
        let p = Packet::StatusResponse { info, players };
        prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
    }

    #[test]
    fn quake3_list_reply_round_trips(ext in any::<bool>(),
                                     servers in proptest::collection::vec(socket_addr(), 0..500)) {
        let datagrams = ServerList::encode_datagrams(ext, &servers);
        let expected: Vec<_> = servers.iter().copied().filter(|a| ext || a.is_ipv4()).collect();
        let (decoded, eots) = decode_lists(&datagrams);
        prop_assert_eq!(decoded, expected);
        prop_assert_eq!(eots.iter().filter(|e| **e).count(), 1);
        prop_assert_eq!(eots.last(), Some(&true));
    }

    #[test]
    fn quake3_decode_never_panics(command in prop_oneof![
            Just(&b"getinfo"[..]), Just(&b"getstatus"[..]), Just(&b"infoResponse"[..]),
            Just(&b"statusResponse"[..]), Just(&b"heartbeat"[..]), Just(&b"getservers"[..]),
            Just(&b"getserversExt"[..]), Just(&b"getserversResponse"[..]),
            Just(&b"getserversExtResponse"[..])],
        tail in proptest::collection::vec(any::<u8>(), 0..120)) {
        let mut d = dgram(command);
        d.extend_from_slice(&tail);
        if let Ok(p) = Packet::decode(&d) {
            prop_assert_eq!(Packet::decode(&encoded(&p)), Ok(p));
        }
    }
}
