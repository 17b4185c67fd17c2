//! Golden tests for gameagent: every test vector of `docs/protocols/gameagent.md` §6 (fixtures in
//! `tests/fixtures/gameagent/`, see its README), decoded, snapshotted and re-encoded byte for
//! byte; then one test per quirk of spec §7.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use muster_proto::gameagent::packet::{
    Challenge, CountReply, Heartbeat, HeartbeatFields, ListReply, MasterPacket, PlayerRecord,
    PlayerRecords, PlayersDatagram, PlayersReply, ServerRequest, StatusFields, StatusReply,
    encode_list,
};
use muster_proto::gameagent::query::{MasterListQuery, ServerQuery, game_address, query_address};
use muster_proto::gameagent::{NAME_MARK_CONTROL, NAME_MARK_LINE_BREAK, decode_text};
use muster_proto::{DecodeError, Event, QueryConfig, QueryMachine, ServerInfo};

use crate::util::{fixture, unhex};

fn fx(name: &str) -> Vec<u8> {
    fixture(&format!("gameagent/{name}"))
}

fn master_round_trip(bytes: &[u8]) -> MasterPacket {
    let m = MasterPacket::decode(bytes).expect("decodes");
    let mut out = Vec::new();
    m.encode(&mut out);
    assert_eq!(out, bytes, "re-encodes byte for byte");
    m
}

fn status_round_trip(bytes: &[u8]) -> StatusReply {
    let s = StatusReply::decode(bytes).expect("decodes");
    let mut out = Vec::new();
    s.encode(&mut out);
    assert_eq!(out, bytes, "re-encodes byte for byte");
    s
}

fn players_round_trip(bytes: &[u8]) -> PlayersDatagram {
    let p = PlayersDatagram::decode(bytes).expect("decodes");
    let mut out = Vec::new();
    p.encode(&mut out);
    assert_eq!(out, bytes, "re-encodes byte for byte");
    p
}

fn v4(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn stock_heartbeat(challenge: i32) -> Heartbeat {
    Heartbeat::stock(&HeartbeatFields {
        challenge,
        players: 1,
        max_players: 8,
        level: b"Yodeller".to_vec(),
        gametype: b"Cooperative".to_vec(),
        version: b"1.10".to_vec(),
        product: b"serioussamse".to_vec(),
    })
}

// --- §6 test vectors ------------------------------------------------------------------------

#[test]
fn g1_g2_list_request() {
    assert_eq!(
        master_round_trip(&fx("spec-list-request.bin")),
        MasterPacket::ListRequest
    );
    assert_eq!(
        MasterPacket::decode(&fx("reference-master-list-request-junk.bin")),
        Ok(MasterPacket::ListRequest)
    );
    let mut out = Vec::new();
    MasterPacket::ListRequest.encode(&mut out);
    assert_eq!(out, unhex("65"));
}

#[test]
fn g3_empty_list() {
    let bytes = fx("reference-master-list-empty.bin");
    let MasterPacket::ListReply(l) = master_round_trip(&bytes) else {
        panic!("list reply")
    };
    assert!(l.servers().is_empty());
    assert_eq!(encode_list(&[]), vec![bytes]);
}

#[test]
fn g4_reference_master_two_servers() {
    let bytes = fx("reference-master-list-two-servers.bin");
    assert_eq!(bytes, unhex("73 7f 00 00 01 00 64 7f 00 00 01 0a 64"));
    let l = ListReply::decode(&bytes).unwrap();
    insta::assert_debug_snapshot!(l);
    let servers = [v4("127.0.0.1:25600"), v4("127.0.0.1:25610")];
    assert_eq!(l.servers(), servers);
    assert_eq!(encode_list(&servers), vec![bytes]);
}

#[test]
fn g5_two_servers_computed() {
    let bytes = fx("computed-list-two-servers.bin");
    let servers = [v4("1.2.3.4:25600"), v4("192.168.0.10:25610")];
    assert_eq!(ListReply::decode(&bytes).unwrap().servers(), servers);
    assert_eq!(encode_list(&servers), vec![bytes]);
    // The query ports are the listed game ports + 1.
    let q = query_address(SocketAddr::V4(servers[1]));
    assert_eq!(q, Some(addr("192.168.0.10:25611")));
}

#[test]
fn g6_170_records_and_stock_splitting() {
    let bytes = fx("computed-list-170.bin");
    assert_eq!(bytes.len(), 1021);
    let l = ListReply::decode(&bytes).unwrap();
    assert_eq!(l.servers().len(), 170);
    assert!(l.partial_record().is_empty());
    assert_eq!(encode_list(l.servers()), vec![bytes]);
    // §2.3 measured sizes: 171 servers -> 1021 + 7, 200 -> 1021 + 181.
    let many: Vec<_> = (0..200u16)
        .map(|i| SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 25600 + i))
        .collect();
    let sizes = |n: usize| {
        encode_list(&many[..n])
            .iter()
            .map(Vec::len)
            .collect::<Vec<_>>()
    };
    assert_eq!(sizes(171), [1021, 7]);
    assert_eq!(sizes(200), [1021, 181]);
    assert_eq!(sizes(2), [13]);
}

#[test]
fn g7_join_and_g13_state_changed() {
    assert_eq!(master_round_trip(&fx("spec-join.bin")), MasterPacket::Join);
    assert_eq!(
        master_round_trip(&fx("spec-state-changed.bin")),
        MasterPacket::StateChanged
    );
}

#[test]
fn g8_g9_challenges() {
    assert_eq!(
        master_round_trip(&fx("computed-challenge-305419896.bin")),
        MasterPacket::Challenge(Challenge(305_419_896))
    );
    let m = master_round_trip(&fx("reference-master-challenge.bin"));
    insta::assert_debug_snapshot!(m);
    assert_eq!(m, MasterPacket::Challenge(Challenge(1_866_850_012)));
}

#[test]
fn g10_challenge_ff_echoed_as_minus_one() {
    let c = Challenge::decode(&fx("computed-challenge-minus-1.bin")).unwrap();
    assert_eq!(c, Challenge(-1));
    let mut out = Vec::new();
    stock_heartbeat(c.0).encode(&mut out);
    assert!(out.starts_with(b"0;challenge;-1;players;"));
}

#[test]
fn g11_heartbeat_answer() {
    let bytes = fx("computed-heartbeat-answer.bin");
    assert_eq!(bytes.len(), 114);
    let MasterPacket::Heartbeat(h) = master_round_trip(&bytes) else {
        panic!("heartbeat")
    };
    insta::assert_debug_snapshot!(h);
    assert_eq!(h.challenge(), Some(305_419_896));
    assert_eq!(h, stock_heartbeat(305_419_896));
    assert!(Challenge(305_419_896).matches_echo(h.challenge().unwrap()));
}

#[test]
fn g12_periodic_heartbeat() {
    let bytes = fx("computed-heartbeat-periodic.bin");
    let h = Heartbeat::decode(&bytes).unwrap();
    assert_eq!(h.challenge(), Some(0));
    let mut out = Vec::new();
    stock_heartbeat(0).encode(&mut out);
    assert_eq!(out, bytes);
}

#[test]
fn g14_requests() {
    for (b, r) in [
        (2u8, ServerRequest::Status),
        (3, ServerRequest::Players),
        (4, ServerRequest::Count),
    ] {
        assert_eq!(ServerRequest::decode(&[b]), Ok(r));
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(out, [b]);
    }
}

#[test]
fn g15_status() {
    let bytes = fx("computed-status.bin");
    assert_eq!(bytes.len(), 121);
    let s = status_round_trip(&bytes);
    insta::assert_debug_snapshot!(s);
    let stock = StatusReply::stock(&StatusFields {
        players: 8,
        max_players: 16,
        level: b"Yodeller".to_vec(),
        gametype: b"Fragmatch".to_vec(),
        version: b"1.10".to_vec(),
        gamename: b"serioussamse".to_vec(),
        sessionname: b"Awesome Server".to_vec(),
    });
    assert_eq!(s, stock);
}

#[test]
fn g16_players_one() {
    let bytes = fx("computed-players-one.bin");
    let p = players_round_trip(&bytes);
    insta::assert_debug_snapshot!(p);
    let reply = PlayersReply {
        count: 1,
        records: vec![PlayerRecord::stock(0, b"Sam", 3, 42)],
    };
    assert_eq!(reply.encode_datagrams(), vec![bytes]);
}

#[test]
fn g17_players_header_two_one_record_invalid_name() {
    let bytes = fx("computed-players-header2-invalid-name.bin");
    let p = players_round_trip(&bytes);
    insta::assert_debug_snapshot!(p);
    // A non-ASCII name on an x86 server: the `12` mark.
    let reply = PlayersReply {
        count: 2,
        records: vec![PlayerRecord::stock(1, b"J\xe9r\xf4me", 0, 999)],
    };
    assert_eq!(reply.encode_datagrams(), vec![bytes]);
}

#[test]
fn g18_count_reply() {
    let bytes = fx("computed-count-8.bin");
    let c = CountReply::decode(&bytes).unwrap();
    assert_eq!(c, CountReply(8));
    let mut out = Vec::new();
    c.encode(&mut out);
    assert_eq!(out, bytes);
}

#[test]
fn g19_players_sixteen_long_names_split_like_stock() {
    let part1 = fx("computed-players-16x200-part1.bin");
    let part2 = fx("computed-players-16x200-part2.bin");
    assert_eq!((part1.len(), part2.len()), (1884, 1891));
    assert!(part2.starts_with(b"player_8\x02"));
    let d1 = players_round_trip(&part1);
    let d2 = players_round_trip(&part2);
    insta::assert_debug_snapshot!("g19_part2", d2);
    assert_eq!((d1.count, d1.trailer), (Some(16), false));
    assert_eq!((d2.count, d2.trailer), (None, true));
    let mut records = Vec::new();
    for d in [d1, d2] {
        let PlayerRecords::Stock(r) = d.records else {
            panic!("stock records")
        };
        records.extend(r);
    }
    let names: Vec<Vec<u8>> = (0..16u8)
        .map(|i| {
            let unit = format!("Player{i:02}-");
            unit.repeat(23).into_bytes().into_iter().take(200).collect()
        })
        .collect();
    let expect: Vec<_> = (0..16u32)
        .map(|i| PlayerRecord::stock(i, &names[i as usize], (i % 10) as i32, 40 + i as i32))
        .collect();
    assert_eq!(records, expect);
    let reply = PlayersReply {
        count: 16,
        records: expect,
    };
    assert_eq!(reply.encode_datagrams(), vec![part1, part2]);
}

/// What the whole exchange of G15 + G16 means in the neutral model.
#[test]
fn g15_g16_merged_server_info() {
    let t0 = Instant::now();
    let mut q = ServerQuery::new(addr("127.0.0.1:25600"), QueryConfig::default());
    let mut buf = Vec::new();
    while q.poll_transmit(t0, &mut buf).is_some() {
        buf.clear();
    }
    let from = addr("127.0.0.1:25601");
    q.handle_datagram(
        t0 + Duration::from_millis(12),
        from,
        &fx("computed-status.bin"),
    );
    q.handle_datagram(
        t0 + Duration::from_millis(13),
        from,
        &fx("computed-players-one.bin"),
    );
    let Some(Event::Done(info)) = q.poll_event() else {
        panic!("done")
    };
    let info: ServerInfo = *info;
    insta::assert_debug_snapshot!(info);
}

// --- §7 quirks ------------------------------------------------------------------------------

/// §7.1: the header count may exceed the records; it is kept, never used for completeness.
#[test]
fn quirk_header_count_larger_than_records() {
    let p = PlayersDatagram::decode(&fx("computed-players-header2-invalid-name.bin")).unwrap();
    assert_eq!(p.count, Some(2));
    let PlayerRecords::Stock(r) = &p.records else {
        panic!("stock")
    };
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].slot(), 1);
    // A huge claimed count allocates nothing.
    let p = PlayersDatagram::decode(b"\x01players\x024000000000\x03\x04").unwrap();
    assert_eq!(p.count, Some(4_000_000_000));
}

/// §7.2: slots with gaps, up to 15.
#[test]
fn quirk_gaps_in_player_slots() {
    let reply = PlayersReply {
        count: 3,
        records: vec![
            PlayerRecord::stock(1, b"a", 0, 0),
            PlayerRecord::stock(15, b"b", 0, 0),
        ],
    };
    let dg = reply.encode_datagrams();
    let p = players_round_trip(&dg[0]);
    let PlayerRecords::Stock(r) = p.records else {
        panic!("stock")
    };
    assert_eq!(
        r.iter().map(PlayerRecord::slot).collect::<Vec<_>>(),
        [1, 15]
    );
}

/// §7.3: empty datagrams are errors, never panics.
#[test]
fn quirk_empty_datagrams() {
    assert_eq!(
        MasterPacket::decode(b""),
        Err(DecodeError::Truncated("master packet"))
    );
    assert_eq!(
        ServerRequest::decode(b""),
        Err(DecodeError::Truncated("server request"))
    );
    assert_eq!(
        StatusReply::decode(b""),
        Err(DecodeError::Truncated("status reply"))
    );
    assert_eq!(
        PlayersDatagram::decode(b""),
        Err(DecodeError::Truncated("players reply"))
    );
}

/// §7.4: act on byte 0 only.
#[test]
fn quirk_trailing_bytes_after_one_byte_request() {
    assert_eq!(MasterPacket::decode(b"eXYZ"), Ok(MasterPacket::ListRequest));
    assert_eq!(MasterPacket::decode(b"q\0\0"), Ok(MasterPacket::Join));
    assert_eq!(MasterPacket::decode(b"u!"), Ok(MasterPacket::StateChanged));
    assert_eq!(
        ServerRequest::decode(b"\x02junk"),
        Ok(ServerRequest::Status)
    );
    assert_eq!(
        ServerRequest::decode(b"\x03\x03"),
        Ok(ServerRequest::Players)
    );
    assert_eq!(
        ServerRequest::decode(b"\x01\x01\0\0\0extra"),
        Ok(ServerRequest::Heartbeat(Challenge(1)))
    );
}

/// §7.5: replies from other addresses, duplicates and late replies change nothing.
#[test]
fn quirk_unsolicited_replies() {
    let t0 = Instant::now();
    let mut m = MasterListQuery::new(addr("10.0.0.9:9005"), QueryConfig::default());
    let mut buf = Vec::new();
    while m.poll_transmit(t0, &mut buf).is_some() {
        buf.clear();
    }
    let list = fx("reference-master-list-two-servers.bin");
    m.handle_datagram(t0, addr("10.0.0.66:9005"), &list);
    m.handle_datagram(t0, addr("10.0.0.9:9006"), &list);
    assert_eq!(
        m.poll_timeout(),
        Some(t0 + QueryConfig::default().attempt_timeout)
    );
    m.handle_datagram(t0, addr("10.0.0.9:9005"), &list);
    m.handle_datagram(t0, addr("10.0.0.9:9005"), &list);
    m.handle_timeout(t0 + Duration::from_secs(2));
    let Some(Event::Done(l)) = m.poll_event() else {
        panic!("done")
    };
    assert_eq!(l.servers.len(), 2);
    m.handle_datagram(t0 + Duration::from_secs(3), addr("10.0.0.9:9005"), &list);
    assert_eq!(m.poll_event(), None);
}

/// §7.6: a heartbeat answered from another (ephemeral) port still decodes; the echo matching
/// is the master's decision (`Challenge::matches_echo`), and the ephemeral port − 1 is not a
/// game port anyone can query.
#[test]
fn quirk_heartbeat_from_random_source_port() {
    let h = Heartbeat::decode(&fx("computed-heartbeat-answer.bin")).unwrap();
    let echo = h.challenge().unwrap();
    assert!(Challenge(305_419_896).matches_echo(echo));
    assert!(!Challenge(1_866_850_012).matches_echo(echo));
    assert_eq!(
        game_address(addr("1.2.3.4:40001")),
        Some(addr("1.2.3.4:40000"))
    );
    assert_eq!(game_address(addr("1.2.3.4:0")), None);
}

/// §7.7: no framing; partial trailing record; one-byte empty list; duplicates across datagrams.
#[test]
fn quirk_list_datagrams_without_framing() {
    let mut bytes = fx("reference-master-list-two-servers.bin");
    bytes.extend_from_slice(&[1, 2, 3]);
    let l = ListReply::decode(&bytes).unwrap();
    assert_eq!(l.servers().len(), 2);
    assert_eq!(l.partial_record(), [1, 2, 3]);
    let mut out = Vec::new();
    l.encode(&mut out);
    assert_eq!(out, bytes);
    assert!(ListReply::decode(b"s").unwrap().servers().is_empty());
}

/// §7.8: address in network order, port little-endian.
#[test]
fn quirk_port_little_endian_address_network_order() {
    let l = ListReply::decode(&unhex("73 c0 a8 00 0a 0a 64")).unwrap();
    assert_eq!(l.servers(), [v4("192.168.0.10:25610")]);
}

/// §7.9: challenges as signed decimals, in either byte order.
#[test]
fn quirk_challenge_signed_decimal() {
    let h = Heartbeat::decode(b"0;challenge;-2147483648;players;0").unwrap();
    assert_eq!(h.challenge(), Some(i32::MIN));
    assert_eq!(
        Heartbeat::decode(b"0;challenge;2147483648")
            .unwrap()
            .challenge(),
        None
    );
    assert!(Challenge(-1).matches_echo(-1));
    assert!(Challenge(0x0100_0000).matches_echo(1));
}

/// §7.10: `challenge;0` heartbeats and `u` before verification decode normally.
#[test]
fn quirk_heartbeat_challenge_zero_and_early_u() {
    let h = Heartbeat::decode(&fx("computed-heartbeat-periodic.bin")).unwrap();
    assert_eq!(h.challenge(), Some(0));
    assert_eq!(h.get("product"), Some(&b"serioussamse"[..]));
    assert_eq!(MasterPacket::decode(b"u"), Ok(MasterPacket::StateChanged));
}

/// §7.11: `;` in values shifts pairs; everything after `sessionname;` is the name; localized
/// game type; `serioussam` from SE dedicated servers; optional trailing NUL.
#[test]
fn quirk_status_values() {
    let s = StatusReply::decode(
        b"0;players;2;level;A;B;gametype;Kooperation;gamename;serioussam;sessionname;x;y\0",
    )
    .unwrap();
    // The last shifted key has no value: it reads back as an empty value (re-encoded with its
    // `;`), so this one compares values, not bytes.
    let mut out = Vec::new();
    s.encode(&mut out);
    assert_eq!(StatusReply::decode(&out).as_ref(), Ok(&s));
    assert_eq!(s.get("serioussam"), Some(&b""[..]));
    assert_eq!(s.get("level"), Some(&b"A"[..]));
    assert_eq!(
        s.get("B"),
        Some(&b"gametype"[..]),
        "the stray ; shifted the pairs"
    );
    assert_eq!(s.get("Kooperation"), Some(&b"gamename"[..]));
    assert_eq!(s.sessionname(), Some(&b"x;y"[..]));
    assert_eq!(s.players(), 2);
    assert_eq!(s.max_players(), 0, "missing key reads as 0 like atoi");
    let s = status_round_trip(b"0;gametype;Kooperation;gamename;serioussam;sessionname;S");
    assert_eq!(s.get("gamename"), Some(&b"serioussam"[..]));
    assert_eq!(decode_text(s.get("gametype").unwrap()).text, "Kooperation");
}

/// §7.12: GameSpy-style records inside the `01`…`04` frame (Classics Patch on retail builds).
#[test]
fn quirk_gamespy_style_player_records() {
    let bytes = b"\x01players\x021\x03\\player_0\\Sam\\frags_0\\3\\ping_0\\42\x04";
    let p = players_round_trip(bytes);
    assert_eq!(p.count, Some(1));
    assert!(p.trailer);
    assert_eq!(
        p.records,
        PlayerRecords::GameSpy(b"\\player_0\\Sam\\frags_0\\3\\ping_0\\42".to_vec())
    );
}

/// §7.13 and §8.2.4: the one-byte marks `11` / `12`, decorations, high bytes (unsigned-char
/// builds), empty names.
#[test]
fn quirk_invalid_name_marks_0x11_0x12() {
    assert_eq!(PlayerRecord::stock(0, b"a\r\nb", 0, 0).name(), [0x11]);
    assert_eq!(PlayerRecord::stock(0, b"a\x01", 0, 0).name(), [0x12]);
    assert_eq!(
        PlayerRecord::stock(0, b"\xe9\n", 0, 0).name(),
        [0x12],
        "x86: high byte first"
    );
    let t = decode_text(&[0x11]);
    assert_eq!((t.raw.as_slice(), t.plain.as_str()), (&[0x11u8][..], ""));
    assert_eq!(decode_text(&[0x12]).plain, "");
    assert_eq!(
        muster_proto::gameagent::name_mark_reason(&[0x11]),
        Some(NAME_MARK_LINE_BREAK)
    );
    assert_eq!(
        muster_proto::gameagent::name_mark_reason(&[0x12]),
        Some(NAME_MARK_CONTROL)
    );
    // An unsigned-char (ARM) build lets high bytes through: decoded as Windows-1252.
    let p = players_round_trip(
        b"player_0\x02^oJ\xe9r\xf4me^r\x03frags_0\x020\x03ping_0\x020\x03player_1\x02\x03frags_1\x020\x03ping_1\x020\x03",
    );
    let PlayerRecords::Stock(r) = p.records else {
        panic!("stock")
    };
    assert_eq!(decode_text(r[0].name()).plain, "Jérôme");
    assert_eq!(r[1].name(), b"", "empty name");
    assert_eq!(decode_text(b"^o^c00ff00Sam^r").plain, "Sam");
}

/// §7.14: 2049-byte datagrams, continuations without header, zero records.
#[test]
fn quirk_player_datagrams_up_to_2049_bytes() {
    // One record that fills the first datagram to exactly 2048 bytes, plus the trailer.
    let header_len = "\x01players\x021\x03".len();
    let overhead = "player_0\x02^o^r\x03frags_0\x020\x03ping_0\x020\x03".len();
    let name = vec![b'n'; 2048 - header_len - overhead];
    let reply = PlayersReply {
        count: 1,
        records: vec![PlayerRecord::stock(0, &name, 0, 0)],
    };
    let dgs = reply.encode_datagrams();
    assert_eq!(dgs.iter().map(Vec::len).collect::<Vec<_>>(), [2049]);
    players_round_trip(&dgs[0]);
    // Zero records (ptitSeb First Encounter, or everyone in a high slot).
    let p = players_round_trip(b"\x01players\x023\x03\x04");
    assert_eq!(p.records, PlayerRecords::Stock(vec![]));
    // A continuation datagram without header or trailer.
    let p = players_round_trip(b"player_9\x02^ox^r\x03frags_9\x021\x03ping_9\x022\x03");
    assert_eq!((p.count, p.trailer), (None, false));
}

/// §7.15: `04` starts the count reply and ends the player list; the caller knows which.
#[test]
fn quirk_04_ambiguity() {
    assert_eq!(CountReply::decode(b"\x0412"), Ok(CountReply(12)));
    let trailer_only = PlayersDatagram::decode(b"\x04").unwrap();
    assert_eq!((trailer_only.count, trailer_only.trailer), (None, true));
    assert!(PlayersDatagram::decode(b"\x0412").is_err());
}

/// §7.16: negative frags, pings 0–1023.
#[test]
fn quirk_negative_frags_and_ping_range() {
    let reply = PlayersReply {
        count: 2,
        records: vec![
            PlayerRecord::stock(0, b"a", -5, 0),
            PlayerRecord::stock(1, b"b", 0, 1023),
        ],
    };
    let p = players_round_trip(&reply.encode_datagrams()[0]);
    let PlayerRecords::Stock(r) = p.records else {
        panic!("stock")
    };
    assert_eq!((r[0].frags(), r[1].ping()), (-5, 1023));
}

/// §8.4.2: sanitizing leaves stock values alone and removes `;` and control bytes.
#[test]
fn quirk_responder_sanitizing() {
    let mut out = Vec::new();
    StatusReply::stock(&StatusFields {
        players: 0,
        max_players: 4,
        level: b"Lev;el\n".to_vec(),
        gametype: Vec::new(),
        version: b"1.10".to_vec(),
        gamename: b"serioussam".to_vec(),
        sessionname: b"My;Server\x01".to_vec(),
    })
    .encode(&mut out);
    assert_eq!(
        out,
        b"0;players;0;maxplayers;4;level;Level;gametype;;version;1.10;gamename;serioussam;sessionname;MyServer"
    );
}

/// Found by the fuzz smoke: a status reply that fills the 2048-byte limit and ends with a key
/// without a value decodes (the value is empty) but re-encodes one `;` longer, past the limit.
/// The decoder then rejects the re-encoding as too large instead of misreading it.
#[test]
fn quirk_full_status_reply_with_dangling_key_reencodes_past_the_limit() {
    use muster_proto::DecodeError;
    use muster_proto::gameagent::MAX_DATAGRAM;
    use muster_proto::gameagent::packet::StatusReply;
    // players;1;maxplayers;16;<key> — five fields, the last a key with no value.
    let mut bytes = b"0;players;1;maxplayers;16;".to_vec();
    bytes.resize(MAX_DATAGRAM, b'x');
    let decoded = StatusReply::decode(&bytes).expect("a full datagram decodes");
    let mut out = Vec::new();
    decoded.encode(&mut out);
    assert!(out.len() > MAX_DATAGRAM, "{}", out.len());
    assert_eq!(
        StatusReply::decode(&out),
        Err(DecodeError::TooLarge("status reply"))
    );
}

// ---------------------------------------------------------------------------------------------
// seed 001, its examples byte for byte

/// Seed 001's player example: header count 8, one record `player_0` Angelo, 14 frags, ping 80,
/// the `04` trailer ("Wait for the last 0x04 byte"). The index after `player_` is the slot.
#[test]
fn seed_001_player_example() {
    let mut bytes = b"\x01players\x028\x03".to_vec();
    bytes.extend_from_slice(b"player_0\x02Angelo\x03frags_0\x0214\x03ping_0\x0280\x03\x04");
    let p = players_round_trip(&bytes);
    assert_eq!(
        p.count,
        Some(8),
        "the header count, not the number of records"
    );
    assert!(p.trailer);
    let PlayerRecords::Stock(records) = &p.records else {
        panic!("stock records")
    };
    let r = records.first().expect("one record");
    assert_eq!(
        (r.slot(), r.name(), r.frags(), r.ping()),
        (0, &b"Angelo"[..], 14, 80)
    );
    // The same datagram is what our encoder writes for it.
    let reply = PlayersReply {
        count: 8,
        records: vec![PlayerRecord::new(0, b"Angelo".to_vec(), 14, 80).unwrap()],
    };
    assert_eq!(reply.encode_datagrams(), vec![bytes]);
}

/// Seed 001's player example as the responder sends it: the seed's server has 8 players
/// (header `8`), and its record for slot 0 is `Angelo`, 14 frags, ping 80. The default style
/// must write those bytes exactly: the name as typed, not `^oAngelo^r`. The other seven
/// records follow the seed's per-player template, written out here by hand.
#[test]
fn seed_001_responder_sends_the_seed_player_example() {
    use muster_proto::gameagent::respond::GameAgentResponder;
    use muster_proto::respond::{PlayerState, Responder, ServerState};
    let player = |name: &str, score: i64, ping_ms: u32| PlayerState {
        name: name.into(),
        score,
        ping_ms,
        ..PlayerState::default()
    };
    let mut players = vec![player("Angelo", 14, 80)];
    players.extend((1..8u32).map(|i| player(&format!("Bot{i}"), i64::from(i), 20 + i)));
    let state = ServerState {
        name: "Awesome Server".into(),
        map: "Yodeller".into(),
        game_type: "Fragmatch".into(),
        version: "1.10".into(),
        game: "serioussamse".into(),
        max_players: 16,
        players,
        ..ServerState::default()
    };
    let mut want = b"\x01players\x028\x03".to_vec();
    want.extend_from_slice(b"player_0\x02Angelo\x03frags_0\x0214\x03ping_0\x0280\x03");
    for i in 1..8 {
        want.extend_from_slice(
            format!(
                "player_{i}\x02Bot{i}\x03frags_{i}\x02{i}\x03ping_{i}\x02{}\x03",
                20 + i
            )
            .as_bytes(),
        );
    }
    want.push(0x04);
    let from = addr("127.0.0.1:40000");
    let mut r = GameAgentResponder::default();
    let mut out = Vec::new();
    assert!(r.handle_datagram(Instant::now(), from, &[0x03], &state, &mut out));
    let got: Vec<&[u8]> = out.iter().map(|r| r.bytes.as_slice()).collect();
    assert_eq!(got, [want.as_slice()]);
    // And the seed's status example, from the same state.
    out.clear();
    assert!(r.handle_datagram(Instant::now(), from, &[0x02], &state, &mut out));
    assert_eq!(
        out[0].bytes,
        b"0;players;8;maxplayers;16;level;Yodeller;gametype;Fragmatch;version;1.10;gamename;serioussamse;sessionname;Awesome Server"
    );
}

/// Seed 001's master reply example: `s`, the four IP bytes in order (0x7F 0x00 0x00 0x01 is
/// 127.0.0.1), then a short port; the seed does not say its byte order, the servers and the
/// reference master send it little-endian (spec §7, `quirk_port_little_endian_address_network_order`).
#[test]
fn seed_001_master_reply_example() {
    let bytes = [0x73, 0x7f, 0x00, 0x00, 0x01, 0x00, 0x64];
    let MasterPacket::ListReply(list) = master_round_trip(&bytes) else {
        panic!("a list")
    };
    assert_eq!(list.servers(), [v4("127.0.0.1:25600")]);
    // Seed: "use their enumeration port (server port + 1)".
    assert_eq!(
        query_address(addr("127.0.0.1:25600")),
        Some(addr("127.0.0.1:25601"))
    );
}
