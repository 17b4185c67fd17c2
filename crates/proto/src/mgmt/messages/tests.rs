//! Byte tests and property tests for the messages.

use super::*;
use proptest::prelude::*;

fn addr(s: &str) -> ServerAddress {
    ServerAddress::parse(s).unwrap()
}

fn feuerland() -> GameServer {
    GameServer::new(
        "Feuerland",
        addr("192.168.0.10"),
        GamePort::new(20000).unwrap(),
    )
    .unwrap()
}

fn stats(current: u32, max: u8, open: bool, mode: u8) -> Stats {
    Stats {
        current: PlayerCount::new(current).unwrap(),
        max: MaxPlayers::new(max).unwrap(),
        lobby_open: open,
        mode: GameplayMode::from_code(mode).unwrap(),
    }
}

fn encoded(m: &Message) -> Vec<u8> {
    // Pre-filled so a skipped or misplaced byte shows.
    let mut out = vec![0xa5];
    m.encode(&mut out);
    assert_eq!(out.first(), Some(&0xa5));
    out.split_off(1)
}

fn frame_json(frame: &[u8]) -> &[u8] {
    Frame::decode(frame).map(|_| ()).unwrap();
    let start = frame.iter().position(|b| !b.is_ascii_digit()).unwrap();
    &frame[start..frame.len() - 1]
}

const REGISTER: &[u8] = b"122{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\":\"Feuerland\",\"serverAddress\":\"192.168.0.10\",\"serverPort\":20000}}\n";
const UPDATE: &[u8] = b"118{\"command\":\"msUpdateGameServerStats\",\"content\":{\"players\":{\"current\":2,\"max\":4},\"isLobbyOpen\":true,\"gameplayMode\":2}}\n";
const UNREGISTER: &[u8] = b"37{\"command\":\"msUnregisterGameServer\"}\n";
const QUERY: &[u8] = b"33{\"command\":\"msQueryGameServers\"}\n";
const ANSWER_EMPTY: &[u8] =
    b"59{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[]}}\n";
const ANSWER_ONE: &[u8] = b"185{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[{\"name\":\"Feuerland\",\"address\":\"192.168.0.10\",\"port\":20000,\"players\":{\"current\":1,\"max\":4},\"isLobbyOpen\":true,\"gameplayMode\":1}]}}\n";

#[test]
fn decode_register_game_server() {
    assert_eq!(
        Message::decode(frame_json(REGISTER)),
        Ok(Message::RegisterGameServer(feuerland()))
    );
}

#[test]
fn encode_register_game_server() {
    assert_eq!(encoded(&Message::RegisterGameServer(feuerland())), REGISTER);
}

#[test]
fn decode_register_game_server_rejects_empty_name() {
    let json = br#"{"command":"msRegisterGameServer","content":{"serverName":"","serverAddress":"192.168.0.10","serverPort":20000}}"#;
    assert_eq!(
        Message::decode(json),
        Err(MessageError::Empty("serverName"))
    );
}

#[test]
fn decode_register_game_server_rejects_bad_port() {
    let json = br#"{"command":"msRegisterGameServer","content":{"serverName":"a","serverAddress":"192.168.0.10","serverPort":51963}}"#;
    assert_eq!(
        Message::decode(json),
        Err(MessageError::OutOfRange("serverPort"))
    );
}

#[test]
fn decode_update_game_server_stats() {
    assert_eq!(
        Message::decode(frame_json(UPDATE)),
        Ok(Message::UpdateGameServerStats(stats(2, 4, true, 2)))
    );
}

#[test]
fn encode_update_game_server_stats() {
    assert_eq!(
        encoded(&Message::UpdateGameServerStats(stats(2, 4, true, 2))),
        UPDATE
    );
}

#[test]
fn decode_update_game_server_stats_rejects_max_five() {
    let json = br#"{"command":"msUpdateGameServerStats","content":{"players":{"current":2,"max":5},"isLobbyOpen":true,"gameplayMode":2}}"#;
    assert_eq!(
        Message::decode(json),
        Err(MessageError::OutOfRange("players.max"))
    );
}

#[test]
fn decode_unregister_game_server() {
    assert_eq!(
        Message::decode(frame_json(UNREGISTER)),
        Ok(Message::UnregisterGameServer)
    );
}

#[test]
fn encode_unregister_game_server() {
    assert_eq!(encoded(&Message::UnregisterGameServer), UNREGISTER);
}

#[test]
fn decode_unregister_game_server_rejects_content() {
    let json = br#"{"command":"msUnregisterGameServer","content":{"serverName":"x"}}"#;
    assert_eq!(
        Message::decode(json),
        Err(MessageError::UnexpectedContent("msUnregisterGameServer"))
    );
}

#[test]
fn decode_query_game_servers() {
    assert_eq!(
        Message::decode(frame_json(QUERY)),
        Ok(Message::QueryGameServers)
    );
}

#[test]
fn encode_query_game_servers() {
    assert_eq!(encoded(&Message::QueryGameServers), QUERY);
}

#[test]
fn decode_query_game_servers_rejects_unknown_case() {
    assert_eq!(
        Message::decode(br#"{"command":"msquerygameservers"}"#),
        Err(MessageError::UnknownCommand)
    );
}

#[test]
fn decode_query_answer() {
    let m = Message::decode(frame_json(ANSWER_ONE)).unwrap();
    let Message::QueryGameServersAnswer(a) = m else {
        panic!("not an answer: {m:?}");
    };
    assert_eq!(
        a.servers(),
        &[ListedGameServer {
            server: feuerland(),
            stats: stats(1, 4, true, 1),
        }]
    );
    assert_eq!(a.skipped(), 0);
}

#[test]
fn encode_query_answer() {
    let empty = Message::QueryGameServersAnswer(ServerListAnswer::new(vec![]).unwrap());
    assert_eq!(encoded(&empty), ANSWER_EMPTY);
    let one = ServerListAnswer::new(vec![ListedGameServer {
        server: feuerland(),
        stats: stats(1, 4, true, 1),
    }])
    .unwrap();
    assert_eq!(encoded(&Message::QueryGameServersAnswer(one)), ANSWER_ONE);
    assert_eq!(frame_json(ANSWER_EMPTY).len(), EMPTY_ANSWER_JSON_LEN);
}

#[test]
fn decode_query_answer_rejects_missing_servers() {
    assert_eq!(
        Message::decode(br#"{"command":"msRQueryGameServers","content":{}}"#),
        Err(MessageError::Missing("servers"))
    );
    assert_eq!(
        Message::decode(br#"{"command":"msRQueryGameServers","content":{"servers":{}}}"#),
        Err(MessageError::WrongType("servers"))
    );
}

#[test]
fn decode_query_answer_skips_and_counts_bad_entries() {
    let json = br#"{"command":"msRQueryGameServers","content":{"servers":[
        {"name":"","address":"1.2.3.4","port":1,"players":{"current":0,"max":4},"isLobbyOpen":true,"gameplayMode":1},
        7,
        {"name":"ok","address":"1.2.3.4","port":1,"players":{"current":0,"max":4},"isLobbyOpen":true,"gameplayMode":1}
    ]}}"#;
    let Ok(Message::QueryGameServersAnswer(a)) = Message::decode(json) else {
        panic!("not decoded");
    };
    assert_eq!(a.servers().len(), 1);
    assert_eq!(a.skipped(), 2);
}

#[test]
fn decode_rejects_root_and_command_types() {
    assert_eq!(
        Message::decode(br#"["msQueryGameServers"]"#),
        Err(MessageError::NotAnObject("root"))
    );
    assert_eq!(
        Message::decode(br#"{"content":{}}"#),
        Err(MessageError::Missing("command"))
    );
    assert_eq!(
        Message::decode(br#"{"command":42}"#),
        Err(MessageError::WrongType("command"))
    );
}

#[test]
fn address_classification_table() {
    use AddressError::*;
    let cases: &[(&str, Result<AddressKind, AddressError>)] = &[
        (
            "192.168.0.10",
            Ok(AddressKind::Ipv4(Ipv4Addr::new(192, 168, 0, 10))),
        ),
        (
            "fd40:9dc7:b528::1",
            Ok(AddressKind::Ipv6("fd40:9dc7:b528::1".parse().unwrap())),
        ),
        (
            "::ffff:192.168.0.10",
            Ok(AddressKind::Ipv6("::ffff:192.168.0.10".parse().unwrap())),
        ),
        ("bombergame.example.org", Ok(AddressKind::Hostname)),
        ("Bombergame.Example.ORG.", Ok(AddressKind::Hostname)),
        ("1e100.example", Ok(AddressKind::Hostname)),
        ("under_score.example", Ok(AddressKind::Hostname)),
        ("", Err(Empty)),
        ("192.168.0.256", Err(Ipv4)),
        ("1.2.3", Err(Ipv4)),
        ("192.168.000.010", Err(Ipv4)),
        ("12345", Err(Ipv4)),
        ("...", Err(Ipv4)),
        ("fd40::9dc7::1", Err(Ipv6)),
        ("[fd40:9dc7:b528::1]", Err(Ipv6)),
        ("fe80::1%eth0", Err(Ipv6)),
        ("0.0.0.0", Err(Unspecified)),
        ("::", Err(Unspecified)),
        ("224.0.0.1", Err(Multicast)),
        ("ff02::1", Err(Multicast)),
        ("255.255.255.255", Err(Broadcast)),
        ("bomber game", Err(Hostname)),
        ("-a.example", Err(Hostname)),
        ("a-.example", Err(Hostname)),
        ("a..example", Err(Hostname)),
        (".", Err(Ipv4)),
        ("a.example..", Err(Hostname)),
        ("bömber.example", Err(Hostname)),
    ];
    for (input, want) in cases {
        assert_eq!(
            &ServerAddress::parse(input).map(|a| a.kind()),
            want,
            "{input:?}"
        );
    }
    let long_label = "a".repeat(MAX_LABEL_LEN);
    assert!(ServerAddress::parse(&long_label).is_ok());
    assert_eq!(
        ServerAddress::parse(&format!("{long_label}a")).err(),
        Some(Hostname)
    );
    let long_name = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    assert_eq!(long_name.len(), MAX_HOSTNAME_LEN);
    assert!(ServerAddress::parse(&long_name).is_ok());
    assert!(ServerAddress::parse(&format!("{long_name}.")).is_ok());
    assert!(ServerAddress::parse(&format!("{long_name}e")).is_err());
}

#[test]
fn integer_forms() {
    let upd = |current: &str| {
        let json = format!(
            r#"{{"command":"msUpdateGameServerStats","content":{{"players":{{"current":{current},"max":4}},"isLobbyOpen":true,"gameplayMode":1}}}}"#
        );
        Message::decode(json.as_bytes()).map(|m| match m {
            Message::UpdateGameServerStats(s) => s.current.get(),
            _ => unreachable!(),
        })
    };
    assert_eq!(upd("0"), Ok(0));
    assert_eq!(upd("\"22\""), Ok(22));
    assert_eq!(upd("\"0000000022\""), Ok(22));
    assert_eq!(upd("2147483647"), Ok(2_147_483_647));
    assert_eq!(upd("\"2147483647\""), Ok(2_147_483_647));
    assert_eq!(
        upd("2147483648"),
        Err(MessageError::OutOfRange("players.current"))
    );
    assert_eq!(
        upd("\"9999999999\""),
        Err(MessageError::OutOfRange("players.current"))
    );
    assert_eq!(
        upd("\"00000000022\""),
        Err(MessageError::WrongType("players.current"))
    );
    assert_eq!(upd("\"\""), Err(MessageError::WrongType("players.current")));
    assert_eq!(
        upd("\" 2\""),
        Err(MessageError::WrongType("players.current"))
    );
    assert_eq!(
        upd("\"+2\""),
        Err(MessageError::WrongType("players.current"))
    );
    assert_eq!(upd("-1"), Err(MessageError::OutOfRange("players.current")));
    assert_eq!(upd("2.0"), Err(MessageError::WrongType("players.current")));
    assert_eq!(upd("2e0"), Err(MessageError::WrongType("players.current")));
    assert_eq!(upd("null"), Err(MessageError::WrongType("players.current")));
    assert_eq!(
        upd("18446744073709551616"),
        Err(MessageError::WrongType("players.current"))
    );
}

#[test]
fn constructors_reject_what_cannot_be_sent() {
    assert_eq!(
        GamePort::new(0),
        Err(MessageError::OutOfRange("serverPort"))
    );
    assert_eq!(
        GamePort::new(51963),
        Err(MessageError::OutOfRange("serverPort"))
    );
    assert!(GamePort::new(80).unwrap().is_well_known());
    assert!(!GamePort::new(20000).unwrap().is_well_known());
    assert_eq!(
        MaxPlayers::new(1),
        Err(MessageError::OutOfRange("players.max"))
    );
    assert_eq!(
        PlayerCount::new(MAX_PLAYER_COUNT + 1),
        Err(MessageError::OutOfRange("players.current"))
    );
    let port = GamePort::new(1).unwrap();
    assert_eq!(
        GameServer::new("", addr("1.2.3.4"), port),
        Err(MessageError::Empty("serverName"))
    );
    // The largest name that fits one frame, and one byte more.
    let fits = MAX_JSON_LEN
        - br#"{"command":"msRegisterGameServer","content":{"serverName":"","serverAddress":"1.2.3.4","serverPort":1}}"#.len();
    assert!(GameServer::new("n".repeat(fits), addr("1.2.3.4"), port).is_ok());
    assert_eq!(
        GameServer::new("n".repeat(fits + 1), addr("1.2.3.4"), port),
        Err(MessageError::TooLarge("msRegisterGameServer"))
    );
    // A quote is written as two bytes.
    assert!(GameServer::new("\"".repeat(fits / 2 + 1), addr("1.2.3.4"), port).is_err());
}

#[test]
fn answer_fitting_keeps_what_fits() {
    let big = |i: usize| ListedGameServer {
        server: GameServer::new(
            format!("{i:04}{}", "n".repeat(20_000)),
            addr("1.2.3.4"),
            GamePort::new(1).unwrap(),
        )
        .unwrap(),
        stats: Stats::default(),
    };
    let all: Vec<_> = (0..5).map(big).collect();
    assert_eq!(
        ServerListAnswer::new(all.clone()),
        Err(MessageError::TooLarge("msRQueryGameServers"))
    );
    let (answer, dropped) = ServerListAnswer::fitting(all);
    assert_eq!((answer.servers().len(), dropped), (3, 2));
    let m = Message::QueryGameServersAnswer(answer.clone());
    let out = encoded(&m);
    assert!(out.len() <= super::super::MAX_WIRE_FRAME_LEN);
    // `new` agrees that exactly this fits.
    assert_eq!(ServerListAnswer::new(answer.servers().to_vec()), Ok(answer));
    assert_eq!(m.to_frame().json(), frame_json(&out));
}

#[test]
fn name_text_goes_through_the_protocol_text_function() {
    let s = GameServer::new(
        " Feuer\u{7}land ",
        addr("1.2.3.4"),
        GamePort::new(1).unwrap(),
    )
    .unwrap();
    assert_eq!(s.name(), " Feuer\u{7}land ");
    assert_eq!(s.name_text().plain, "Feuerland");
}

#[test]
fn default_stats_are_the_spec_defaults() {
    assert_eq!(Stats::default(), stats(0, 4, true, 1));
}

// ---- property tests ----

fn arb_address() -> impl Strategy<Value = ServerAddress> {
    prop_oneof![
        any::<[u8; 4]>().prop_filter_map("not a valid game address", |o| {
            ServerAddress::parse(&Ipv4Addr::from(o).to_string()).ok()
        }),
        any::<u128>().prop_filter_map("not a valid game address", |n| {
            ServerAddress::parse(&Ipv6Addr::from(n).to_string()).ok()
        }),
        "[a-zA-Z0-9_]([a-zA-Z0-9_-]{0,20}[a-zA-Z0-9_])?(\\.[a-zA-Z][a-zA-Z0-9-]{0,10}[a-zA-Z0-9]){0,3}\\.?"
            .prop_filter_map("not a hostname", |s| ServerAddress::parse(&s).ok()),
    ]
}

fn arb_server() -> impl Strategy<Value = GameServer> {
    (
        any::<String>().prop_filter("empty", |s| !s.is_empty()),
        arb_address(),
        1u16..,
    )
        .prop_filter_map("invalid", |(n, a, p)| {
            GameServer::new(n, a, GamePort::new(p).ok()?).ok()
        })
}

fn arb_stats() -> impl Strategy<Value = Stats> {
    (0..=MAX_PLAYER_COUNT, 2u8..=4, any::<bool>(), 1u8..=2)
        .prop_map(|(c, m, o, g)| stats(c, m, o, g))
}

fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        arb_server().prop_map(Message::RegisterGameServer),
        arb_stats().prop_map(Message::UpdateGameServerStats),
        Just(Message::UnregisterGameServer),
        Just(Message::QueryGameServers),
        proptest::collection::vec(
            (arb_server(), arb_stats())
                .prop_map(|(server, stats)| ListedGameServer { server, stats }),
            0..4
        )
        .prop_map(|v| Message::QueryGameServersAnswer(ServerListAnswer::new(v).unwrap())),
    ]
}

proptest! {
    #[test]
    fn decode_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Message::decode(&data);
    }

    #[test]
    fn decode_arbitrary_json_like_text_never_panics(s in "[{}\\[\\]\",:0-9a-zA-Z. -]{0,80}") {
        let _ = Message::decode(s.as_bytes());
        let wrapped = format!("{{\"command\":\"msUpdateGameServerStats\",\"content\":{s}}}");
        let _ = Message::decode(wrapped.as_bytes());
    }

    #[test]
    fn message_round_trip(m in arb_message()) {
        let out = encoded(&m);
        let frame = Frame::decode(&out).unwrap();
        prop_assert_eq!(Message::from_frame(&frame), Ok(m.clone()));
        prop_assert_eq!(m.to_frame(), frame);
    }
}
