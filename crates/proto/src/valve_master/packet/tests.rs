use super::*;
use proptest::prelude::*;

fn v4(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn list_request_bytes_and_round_trip() {
    let req = ListRequest::first(b"\\gamedir\\valve");
    let bytes = req.encode();
    assert_eq!(bytes, b"1\xff0.0.0.0:0\0\\gamedir\\valve\0");
    assert_eq!(ListRequest::decode(&bytes).unwrap(), req);
    let next = ListRequest {
        region: Region::EUROPE,
        last: v4("192.0.2.7:27015"),
        filter: Vec::new(),
    };
    assert_eq!(ListRequest::decode(&next.encode()).unwrap(), next);
}

#[test]
fn list_request_without_the_closing_nul_is_read_and_trailing_bytes_are_not() {
    let r = ListRequest::decode(b"1\xff0.0.0.0:0\0\\map\\crossfire").unwrap();
    assert_eq!(r.filter, b"\\map\\crossfire");
    assert_eq!(r.region, Region::WORLD);
    assert!(ListRequest::decode(b"1\xff0.0.0.0:0\0\\map\\a\0junk").is_err());
    assert!(ListRequest::decode(b"1\xffnot an address\0").is_err());
    assert!(ListRequest::decode(b"2\xff0.0.0.0:0\0").is_err());
    assert!(
        ListRequest::decode(b"1\xff0.0.0.0:0").is_err(),
        "unterminated last address"
    );
    let long = [b"1\xff0.0.0.0:0\0".as_slice(), &[b'x'; MAX_FILTER_LEN + 1]].concat();
    assert!(matches!(
        ListRequest::decode(&long),
        Err(DecodeError::TooLarge(_))
    ));
}

#[test]
fn list_reply_pages_end_with_the_zero_address() {
    let servers = vec![v4("192.0.2.1:27015"), v4("198.51.100.9:27016")];
    let page = ListReply {
        key: None,
        servers: servers.clone(),
        complete: true,
    };
    let bytes = page.encode();
    assert_eq!(bytes.len(), 6 + 3 * IPV4_ENTRY_LEN);
    assert_eq!(&bytes[..6], b"\xff\xff\xff\xfff\n");
    assert_eq!(&bytes[6..12], &[192, 0, 2, 1, 0x69, 0x87]);
    assert_eq!(ListReply::decode(&bytes, false, false).unwrap(), page);
    let partial = ListReply {
        complete: false,
        ..page
    };
    let d = ListReply::decode(&partial.encode(), false, false).unwrap();
    assert!(!d.complete);
    assert_eq!(d.servers, servers);
}

#[test]
fn an_entry_may_hold_any_byte_and_a_key_is_read_only_when_asked_for() {
    // 127.1.2.3 port 0x??08 looks like a key mark; without a request key it is an entry.
    let tricky = vec![v4("127.1.2.3:2056")];
    let page = ListReply {
        key: None,
        servers: tricky.clone(),
        complete: false,
    };
    assert_eq!(
        ListReply::decode(&page.encode(), false, false)
            .unwrap()
            .servers,
        tricky
    );
    let keyed = ListReply {
        key: Some(0xDEAD_BEEF),
        servers: tricky,
        complete: true,
    };
    assert_eq!(
        ListReply::decode(&keyed.encode(), false, true).unwrap(),
        keyed
    );
}

#[test]
fn ipv6_pages_and_bad_pages() {
    let page = ListReply {
        key: None,
        servers: vec!["[2001:db8::1]:27015".parse().unwrap()],
        complete: true,
    };
    let bytes = page.encode();
    assert_eq!(bytes.len(), 6 + 2 * IPV6_ENTRY_LEN);
    assert_eq!(ListReply::decode(&bytes, true, false).unwrap(), page);
    assert!(ListReply::decode(b"\xff\xff\xff\xfff\n\x01\x02\x03", false, false).is_err());
    assert!(ListReply::decode(b"\xff\xff\xff\xffg\n", false, false).is_err());
    let mut after_end = ListReply {
        key: None,
        servers: vec![v4("192.0.2.1:1")],
        complete: true,
    }
    .encode();
    after_end.extend_from_slice(&[192, 0, 2, 2, 0, 1]);
    assert!(
        ListReply::decode(&after_end, false, false).is_err(),
        "an EOT in the middle"
    );
}

#[test]
fn challenge_exchange() {
    assert_eq!(
        ServerPacket::decode(b"q").unwrap(),
        ServerPacket::Challenge(ChallengeRequest {
            server_challenge: None
        })
    );
    let with = ServerPacket::Challenge(ChallengeRequest {
        server_challenge: Some(0x0102_0304),
    });
    assert_eq!(with.encode(), b"q\xff\x04\x03\x02\x01");
    assert_eq!(ServerPacket::decode(&with.encode()).unwrap(), with);
    assert!(ServerPacket::decode(b"q\xff\x01\x02").is_err());
    let reply = ChallengeReply {
        challenge: 7,
        server_challenge: Some(0x0102_0304),
    };
    assert_eq!(
        reply.encode(),
        b"\xff\xff\xff\xffs\n\x07\0\0\0\x04\x03\x02\x01"
    );
    assert_eq!(ChallengeReply::decode(&reply.encode()).unwrap(), reply);
    assert!(ChallengeReply::decode(b"\xff\xff\xff\xffs\n\x07\0\0").is_err());
}

#[test]
fn heartbeats_with_and_without_the_closing_newline() {
    let hb = heartbeat_of(1234, "valve", "crossfire", 3, 16);
    let bytes = ServerPacket::Heartbeat(hb.clone()).encode();
    assert!(bytes.starts_with(b"0\n\\protocol\\48\\challenge\\1234\\"));
    assert!(bytes.ends_with(b"\n"));
    let ServerPacket::Heartbeat(d) = ServerPacket::decode(&bytes).unwrap() else {
        panic!("a heartbeat");
    };
    assert_eq!(d, hb);
    assert_eq!(d.challenge(), Some(1234));
    assert_eq!(d.players(), Some(3));
    assert_eq!(d.max_players(), Some(16));
    assert_eq!(d.gamedir(), Some(&b"valve"[..]));
    assert_eq!(d.server_type(), Some(b'd'));
    assert!(!d.password());
    let bare = ServerPacket::decode(b"0\n\\challenge\\5\\gamedir\\cstrike\\password\\1").unwrap();
    let ServerPacket::Heartbeat(b) = bare else {
        panic!("a heartbeat");
    };
    assert_eq!(b.challenge(), Some(5));
    assert!(b.password());
    assert!(
        ServerPacket::decode(b"0\n\\challenge").is_err(),
        "a key without a value"
    );
    assert!(ServerPacket::decode(b"0\nchallenge\\5").is_err());
    assert!(ServerPacket::decode(b"0\n\\a\\b\0\\c\\d").is_err());
    assert!(ServerPacket::decode(b"0\n\\a\\b\n\\c\\d").is_err());
    assert_eq!(ServerPacket::decode(b"b\n").unwrap(), ServerPacket::Remove);
    let big = [b"0\n".as_slice(), &b"\\k\\v".repeat(MAX_INFO_PAIRS + 1)].concat();
    assert!(matches!(
        ServerPacket::decode(&big),
        Err(DecodeError::TooLarge(_))
    ));
}

proptest! {
    #[test]
    fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = ListRequest::decode(&data);
        let _ = ListReply::decode(&data, false, true);
        let _ = ListReply::decode(&data, true, false);
        let _ = ChallengeReply::decode(&data);
        let _ = ServerPacket::decode(&data);
    }

    #[test]
    fn list_pages_round_trip(
        ips in proptest::collection::vec((any::<[u8; 4]>(), 1u16..), 0..200),
        key in proptest::option::of(any::<u32>()),
        complete in any::<bool>(),
    ) {
        let servers: Vec<SocketAddr> = ips
            .into_iter()
            .filter(|(ip, _)| *ip != [0; 4])
            .map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port))
            .collect();
        let page = ListReply { key, servers, complete };
        prop_assert_eq!(ListReply::decode(&page.encode(), false, key.is_some()).unwrap(), page);
    }

    #[test]
    fn heartbeats_round_trip(pairs in proptest::collection::vec(("[a-z]{1,8}", "[ -\\[\\]-~]{0,12}"), 0..20)) {
        let hb = Heartbeat::new(pairs.into_iter().map(|(k, v)| (k.into_bytes(), v.into_bytes())).collect());
        let bytes = ServerPacket::Heartbeat(hb.clone()).encode();
        prop_assert_eq!(ServerPacket::decode(&bytes).unwrap(), ServerPacket::Heartbeat(hb));
    }
}
