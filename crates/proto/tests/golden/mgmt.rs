//! Golden tests for mgmt: the byte-exact frames of spec §8, the framing examples of §2, the
//! seed's conformance cases of §9 and every malformed or edge input of §10, each named after
//! its case and asserting the exact outcome (events of the session: processed, discarded with
//! which error, or closed with which framing error).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_proto::DecodeError;
use muster_proto::mgmt::client::{encode_query, encode_register, encode_unregister, encode_update};
use muster_proto::mgmt::{
    AddressError, ClientConnection, ClientEvent, CloseReason, Command, Discard, Frame,
    FrameDecoder, GamePort, GameServer, GameplayMode, ListedGameServer, MaxPlayers, Message,
    MessageError, PlayerCount, ServerAddress, ServerListAnswer, ServerSession, SessionConfig,
    SessionEvent, Stats, check,
};

use crate::util::{fixture, unhex};

use SessionEvent::{Closed, Discarded, Query, Register, Unregister, UpdateStats};

// ---------------------------------------------------------------------------------------------
// helpers

/// A management server in miniature: one session per connection and the registry the
/// session's events drive, as `muster-master` will do it.
struct Master {
    t0: Instant,
    sessions: Vec<ServerSession>,
    entries: BTreeMap<usize, ListedGameServer>,
    /// What each connection was sent.
    sent: Vec<Vec<u8>>,
}

impl Master {
    fn new() -> Self {
        Self {
            t0: Instant::now(),
            sessions: Vec::new(),
            entries: BTreeMap::new(),
            sent: Vec::new(),
        }
    }

    fn connect(&mut self) -> usize {
        self.sessions
            .push(ServerSession::new(self.t0, SessionConfig::default()));
        self.sent.push(Vec::new());
        self.sessions.len() - 1
    }

    fn send_at(&mut self, c: usize, at: Duration, bytes: &[u8]) -> Vec<SessionEvent> {
        self.sessions[c].handle_input(self.t0 + at, bytes);
        self.drain(c)
    }

    fn send(&mut self, c: usize, bytes: &[u8]) -> Vec<SessionEvent> {
        self.send_at(c, Duration::ZERO, bytes)
    }

    fn eof(&mut self, c: usize) -> Vec<SessionEvent> {
        self.sessions[c].handle_eof(self.t0);
        self.drain(c)
    }

    fn drain(&mut self, c: usize) -> Vec<SessionEvent> {
        let mut events = Vec::new();
        while let Some(ev) = self.sessions[c].poll_event() {
            match &ev {
                Register(s) => {
                    self.entries.insert(
                        c,
                        ListedGameServer {
                            server: s.clone(),
                            stats: Stats::default(),
                        },
                    );
                }
                UpdateStats(st) => self.entries.get_mut(&c).expect("registered").stats = *st,
                Unregister => {
                    self.entries.remove(&c).expect("registered");
                }
                Query => {
                    let answer = ServerListAnswer::new(self.list()).unwrap();
                    Message::QueryGameServersAnswer(answer).encode(&mut self.sent[c]);
                }
                Closed(_) => {
                    self.entries.remove(&c);
                }
                Discarded(_) => {}
            }
            events.push(ev);
        }
        events
    }

    fn list(&self) -> Vec<ListedGameServer> {
        self.entries.values().cloned().collect()
    }

    /// The answers connection `c` received, read by Muster's client.
    fn answers(&self, c: usize) -> Vec<ServerListAnswer> {
        let mut client = ClientConnection::new();
        client.handle_input(&self.sent[c]);
        let mut out = Vec::new();
        while let Some(ev) = client.poll_event() {
            match ev {
                ClientEvent::Answer(a) => out.push(a),
                other => panic!("unexpected {other:?}"),
            }
        }
        out
    }
}

/// `<len+1><json>\n`.
fn frame(json: &[u8]) -> Vec<u8> {
    let mut out = format!("{}", json.len() + 1).into_bytes();
    out.extend_from_slice(json);
    out.push(b'\n');
    out
}

/// The frame of a §10 table row, checking the table's prefix against the content.
fn row(command: &str, content: &str, prefix: usize) -> Vec<u8> {
    let json = format!(r#"{{"command":"{command}","content":{content}}}"#);
    assert_eq!(
        json.len() + 1,
        prefix,
        "prefix of the spec table for {content}"
    );
    frame(json.as_bytes())
}

fn addr(s: &str) -> ServerAddress {
    ServerAddress::parse(s).unwrap()
}

fn server(name: &str, address: &str, port: u16) -> GameServer {
    GameServer::new(name, addr(address), GamePort::new(port).unwrap()).unwrap()
}

fn stats(current: u32, max: u8, open: bool, mode: u8) -> Stats {
    Stats {
        current: PlayerCount::new(current).unwrap(),
        max: MaxPlayers::new(max).unwrap(),
        lobby_open: open,
        mode: GameplayMode::from_code(mode).unwrap(),
    }
}

fn feuerland() -> GameServer {
    server("Feuerland", "192.168.0.10", 20000)
}

fn invalid(e: MessageError) -> Vec<SessionEvent> {
    vec![Discarded(Discard::Invalid(e))]
}

fn closed(e: DecodeError) -> Vec<SessionEvent> {
    vec![Closed(CloseReason::Framing(e))]
}

const QUERY_FRAME: &[u8] = b"33{\"command\":\"msQueryGameServers\"}\n";

fn decode_frame_file(name: &str) -> Message {
    let bytes = fixture(&format!("mgmt/{name}.frame"));
    let f = Frame::decode(&bytes).unwrap();
    Message::from_frame(&f).unwrap()
}

// ---------------------------------------------------------------------------------------------
// §2: framing examples

#[test]
fn framing_example_hallo_welt() {
    let wire = unhex("31 37 7b 22 48 61 6c 6c 6f 22 3a 22 57 65 6c 74 22 7d 0a");
    let f = Frame::decode(&wire).unwrap();
    assert_eq!(f.json(), br#"{"Hallo":"Welt"}"#);
    let mut out = Vec::new();
    f.encode(&mut out);
    assert_eq!(out, wire);
    // A valid frame, but not a message.
    assert_eq!(
        Message::from_frame(&f),
        Err(MessageError::Missing("command"))
    );
}

#[test]
fn framing_example_universitaet_counts_bytes() {
    let wire = unhex(
        "33 31 7b 22 75 6e 69 76 65 72 73 69 74 c3 a4 74
         22 3a 22 54 55 20 43 68 65 6d 6e 69 74 7a 22 7d 0a",
    );
    let f = Frame::decode(&wire).unwrap();
    assert_eq!(f.json(), "{\"universität\":\"TU Chemnitz\"}".as_bytes());
    let mut out = Vec::new();
    Frame::new(f.json().to_vec()).unwrap().encode(&mut out);
    assert_eq!(out, wire);
}

// ---------------------------------------------------------------------------------------------
// §8: Muster's byte-exact frames, in both directions

fn assert_round_trip(name: &str, want: &Message) {
    let bytes = fixture(&format!("mgmt/{name}.frame"));
    assert_eq!(&decode_frame_file(name), want);
    let mut out = Vec::new();
    want.encode(&mut out);
    assert_eq!(out, bytes, "{name}");
}

#[test]
fn exact_register_example_1_feuerland() {
    let want = Message::RegisterGameServer(feuerland());
    assert_round_trip("muster-register-1-feuerland", &want);
    let mut out = Vec::new();
    encode_register(&feuerland(), &mut out);
    assert_eq!(
        out,
        unhex(
            "31 32 32 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 52 65 67 69 73 74 65 72 47 61 6d
             65 53 65 72 76 65 72 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 7b 22 73 65 72 76 65 72 4e
             61 6d 65 22 3a 22 46 65 75 65 72 6c 61 6e 64 22 2c 22 73 65 72 76 65 72 41 64 64 72
             65 73 73 22 3a 22 31 39 32 2e 31 36 38 2e 30 2e 31 30 22 2c 22 73 65 72 76 65 72 50
             6f 72 74 22 3a 32 30 30 30 30 7d 7d 0a"
        )
    );
}

#[test]
fn exact_register_example_2_boesewicht() {
    let s = server("Server von Bösewicht", "fd40:9dc7:b528::1", 30000);
    assert_round_trip(
        "muster-register-2-boesewicht",
        &Message::RegisterGameServer(s.clone()),
    );
    let mut out = Vec::new();
    encode_register(&s, &mut out);
    assert_eq!(
        out,
        unhex(
            "31 33 39 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 52 65 67 69 73 74 65 72 47 61 6d
             65 53 65 72 76 65 72 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 7b 22 73 65 72 76 65 72 4e
             61 6d 65 22 3a 22 53 65 72 76 65 72 20 76 6f 6e 20 42 c3 b6 73 65 77 69 63 68 74 22
             2c 22 73 65 72 76 65 72 41 64 64 72 65 73 73 22 3a 22 66 64 34 30 3a 39 64 63 37 3a
             62 35 32 38 3a 3a 31 22 2c 22 73 65 72 76 65 72 50 6f 72 74 22 3a 33 30 30 30 30 7d
             7d 0a"
        )
    );
}

#[test]
fn exact_register_example_3_hongzhajiren() {
    let s = server("轰炸机人", "bombergame.example.org", 40000);
    assert_round_trip(
        "muster-register-3-hongzhajiren",
        &Message::RegisterGameServer(s.clone()),
    );
    let mut out = Vec::new();
    encode_register(&s, &mut out);
    assert_eq!(
        out,
        unhex(
            "31 33 35 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 52 65 67 69 73 74 65 72 47 61 6d
             65 53 65 72 76 65 72 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 7b 22 73 65 72 76 65 72 4e
             61 6d 65 22 3a 22 e8 bd b0 e7 82 b8 e6 9c ba e4 ba ba 22 2c 22 73 65 72 76 65 72 41
             64 64 72 65 73 73 22 3a 22 62 6f 6d 62 65 72 67 61 6d 65 2e 65 78 61 6d 70 6c 65 2e
             6f 72 67 22 2c 22 73 65 72 76 65 72 50 6f 72 74 22 3a 34 30 30 30 30 7d 7d 0a"
        )
    );
}

#[test]
fn exact_update() {
    let st = stats(2, 4, true, 2);
    assert_round_trip("muster-update", &Message::UpdateGameServerStats(st));
    let mut out = Vec::new();
    encode_update(&st, &mut out);
    assert_eq!(
        out,
        unhex(
            "31 31 38 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 55 70 64 61 74 65 47 61 6d 65 53
             65 72 76 65 72 53 74 61 74 73 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 7b 22 70 6c 61 79
             65 72 73 22 3a 7b 22 63 75 72 72 65 6e 74 22 3a 32 2c 22 6d 61 78 22 3a 34 7d 2c 22
             69 73 4c 6f 62 62 79 4f 70 65 6e 22 3a 74 72 75 65 2c 22 67 61 6d 65 70 6c 61 79 4d
             6f 64 65 22 3a 32 7d 7d 0a"
        )
    );
}

#[test]
fn exact_unregister() {
    assert_round_trip("muster-unregister", &Message::UnregisterGameServer);
    let mut out = Vec::new();
    encode_unregister(&mut out);
    assert_eq!(
        out,
        unhex(
            "33 37 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 55 6e 72 65 67 69 73 74 65 72 47 61
             6d 65 53 65 72 76 65 72 22 7d 0a"
        )
    );
}

#[test]
fn exact_query() {
    assert_round_trip("muster-query", &Message::QueryGameServers);
    let mut out = Vec::new();
    encode_query(&mut out);
    assert_eq!(
        out,
        unhex(
            "33 33 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 51 75 65 72 79 47 61 6d 65 53 65 72 76 65 72 73 22 7d 0a"
        )
    );
}

#[test]
fn exact_answer_empty() {
    let want = Message::QueryGameServersAnswer(ServerListAnswer::default());
    assert_round_trip("muster-answer-empty", &want);
    let mut out = Vec::new();
    want.encode(&mut out);
    assert_eq!(
        out,
        unhex(
            "35 39 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 52 51 75 65 72 79 47 61 6d 65 53 65
             72 76 65 72 73 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 7b 22 73 65 72 76 65 72 73 22 3a
             5b 5d 7d 7d 0a"
        )
    );
}

fn three_servers(c1: u32, c2: u32, c3: u32) -> Vec<ListedGameServer> {
    vec![
        ListedGameServer {
            server: server("轰炸机人", "bombergame.example.org", 40000),
            stats: stats(c1, 4, false, 2),
        },
        ListedGameServer {
            server: server("Server von Bösewicht", "fd40:9dc7:b528::1", 30000),
            stats: stats(c2, 3, false, 1),
        },
        ListedGameServer {
            server: feuerland(),
            stats: stats(c3, 4, true, 1),
        },
    ]
}

#[test]
fn exact_answer_one() {
    let want = Message::QueryGameServersAnswer(
        ServerListAnswer::new(vec![ListedGameServer {
            server: feuerland(),
            stats: stats(1, 4, true, 1),
        }])
        .unwrap(),
    );
    assert_round_trip("muster-answer-one", &want);
    let mut out = Vec::new();
    want.encode(&mut out);
    assert_eq!(
        out,
        unhex(
            "31 38 35 7b 22 63 6f 6d 6d 61 6e 64 22 3a 22 6d 73 52 51 75 65 72 79 47 61 6d 65 53
             65 72 76 65 72 73 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 7b 22 73 65 72 76 65 72 73 22
             3a 5b 7b 22 6e 61 6d 65 22 3a 22 46 65 75 65 72 6c 61 6e 64 22 2c 22 61 64 64 72 65
             73 73 22 3a 22 31 39 32 2e 31 36 38 2e 30 2e 31 30 22 2c 22 70 6f 72 74 22 3a 32 30
             30 30 30 2c 22 70 6c 61 79 65 72 73 22 3a 7b 22 63 75 72 72 65 6e 74 22 3a 31 2c 22
             6d 61 78 22 3a 34 7d 2c 22 69 73 4c 6f 62 62 79 4f 70 65 6e 22 3a 74 72 75 65 2c 22
             67 61 6d 65 70 6c 61 79 4d 6f 64 65 22 3a 31 7d 5d 7d 7d 0a"
        )
    );
}

#[test]
fn exact_answer_three() {
    let want =
        Message::QueryGameServersAnswer(ServerListAnswer::new(three_servers(22, 3, 1)).unwrap());
    assert_round_trip("muster-answer-three", &want);
    let mut out = Vec::new();
    want.encode(&mut out);
    assert_eq!(out.len(), 475);
    assert_eq!(&out[..4], b"472{");
}

#[test]
fn exact_answer_one_in_seed_spelling_reads_the_same() {
    // §8: `"current":"1"` has length 187 and must read like the integer form.
    let json = br#"{"command":"msRQueryGameServers","content":{"servers":[{"name":"Feuerland","address":"192.168.0.10","port":20000,"players":{"current":"1","max":4},"isLobbyOpen":true,"gameplayMode":1}]}}"#;
    let wire = frame(json);
    assert_eq!(&wire[..3], b"187");
    assert_eq!(wire.len(), 190);
    let got = Message::from_frame(&Frame::decode(&wire).unwrap()).unwrap();
    assert_eq!(got, decode_frame_file("muster-answer-one"));
}

// ---------------------------------------------------------------------------------------------
// §9: the seed's examples as printed (multi-line JSON), the conformance cases

fn seed(name: &str) -> Vec<u8> {
    fixture(&format!("mgmt/seed-{name}.frame"))
}

#[test]
fn seed_frames_have_the_lengths_of_the_conformance_table() {
    for (name, prefix) in [
        ("register-1-feuerland", "170"),
        ("register-2-boesewicht", "187"),
        ("register-3-hongzhajiren", "183"),
        ("update", "171"),
        ("unregister", "44"),
        ("query", "40"),
        ("answer-1-empty", "87"),
        ("answer-2-feuerland", "283"),
        ("answer-3-three-servers", "692"),
    ] {
        let bytes = seed(name);
        assert!(bytes.starts_with(prefix.as_bytes()), "{name}");
        assert_eq!(check(&bytes), Ok(bytes.len()), "{name}");
    }
}

#[test]
fn seed_register_example_1_registered() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(
        m.send(c, &seed("register-1-feuerland")),
        vec![Register(feuerland())]
    );
}

#[test]
fn seed_register_example_2_registered() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(
        m.send(c, &seed("register-2-boesewicht")),
        vec![Register(server(
            "Server von Bösewicht",
            "fd40:9dc7:b528::1",
            30000
        ))]
    );
}

#[test]
fn seed_register_example_3_registered() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(
        m.send(c, &seed("register-3-hongzhajiren")),
        vec![Register(server(
            "轰炸机人",
            "bombergame.example.org",
            40000
        ))]
    );
}

#[test]
fn seed_update_after_registration_replaces_state() {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, &seed("register-1-feuerland"));
    assert_eq!(
        m.send(c, &seed("update")),
        vec![UpdateStats(stats(2, 4, true, 2))]
    );
    assert_eq!(m.list()[0].stats, stats(2, 4, true, 2));
}

#[test]
fn seed_update_without_registration_discarded() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(
        m.send(c, &seed("update")),
        vec![Discarded(Discard::NotRegistered)]
    );
    assert!(m.list().is_empty());
}

#[test]
fn seed_unregister_removes_registration() {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, &seed("register-1-feuerland"));
    assert_eq!(m.send(c, &seed("unregister")), vec![Unregister]);
    assert!(m.list().is_empty());
}

#[test]
fn seed_query_answered() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(m.send(c, &seed("query")), vec![Query]);
    assert_eq!(m.sent[c], fixture("mgmt/muster-answer-empty.frame"));
}

#[test]
fn seed_answer_example_1_empty() {
    let Message::QueryGameServersAnswer(a) = decode_frame_file("seed-answer-1-empty") else {
        panic!()
    };
    assert_eq!((a.servers().len(), a.skipped()), (0, 0));
}

#[test]
fn seed_answer_example_2_string_count() {
    let Message::QueryGameServersAnswer(a) = decode_frame_file("seed-answer-2-feuerland") else {
        panic!()
    };
    assert_eq!(
        a.servers(),
        &[ListedGameServer {
            server: feuerland(),
            stats: stats(1, 4, true, 1)
        }]
    );
}

#[test]
fn seed_answer_example_3_three_servers() {
    let Message::QueryGameServersAnswer(a) = decode_frame_file("seed-answer-3-three-servers")
    else {
        panic!()
    };
    let currents: Vec<u32> = a.servers().iter().map(|s| s.stats.current.get()).collect();
    assert_eq!(currents, [22, 3, 1]);
    assert_eq!(a.servers(), three_servers(22, 3, 1));
    assert_eq!(a.skipped(), 0);
    // Re-encoded in Muster's form it is the §8 frame.
    let mut out = Vec::new();
    Message::QueryGameServersAnswer(a).encode(&mut out);
    assert_eq!(out, fixture("mgmt/muster-answer-three.frame"));
}

#[test]
fn seed_round_trip_three_registrations_and_an_update() {
    let mut m = Master::new();
    let (a, b, c) = (m.connect(), m.connect(), m.connect());
    m.send(a, &seed("register-1-feuerland"));
    m.send(b, &seed("register-2-boesewicht"));
    m.send(c, &seed("register-3-hongzhajiren"));
    m.send(a, &seed("update"));
    let q = m.connect();
    assert_eq!(m.send(q, &seed("query")), vec![Query]);
    let answers = m.answers(q);
    let mut got = answers[0].servers().to_vec();
    let mut want = three_servers(0, 0, 2);
    want[0].stats = Stats::default();
    want[1].stats = Stats::default();
    want[2].stats = stats(2, 4, true, 2);
    let key = |s: &ListedGameServer| s.server.name().to_owned();
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);
}

#[test]
fn snapshot_seed_fixtures() {
    for name in [
        "seed-register-1-feuerland",
        "seed-register-2-boesewicht",
        "seed-register-3-hongzhajiren",
        "seed-update",
        "seed-unregister",
        "seed-query",
        "seed-answer-1-empty",
        "seed-answer-2-feuerland",
        "seed-answer-3-three-servers",
    ] {
        insta::assert_debug_snapshot!(name, decode_frame_file(name));
    }
}

// ---------------------------------------------------------------------------------------------
// §10.1: framing

fn fresh(bytes: &[u8]) -> Vec<SessionEvent> {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, bytes)
}

#[test]
fn f1_no_length_prefix_closes() {
    assert_eq!(
        fresh(b"{\"command\":\"msQueryGameServers\"}\n"),
        closed(DecodeError::BadNumber("length prefix"))
    );
}

#[test]
fn f2_space_before_digits_closes() {
    assert_eq!(
        fresh(b" 33{\"command\":\"msQueryGameServers\"}\n"),
        closed(DecodeError::BadNumber("length prefix"))
    );
}

#[test]
fn f3_sign_closes() {
    assert_eq!(
        fresh(b"+33{\"command\":\"msQueryGameServers\"}\n"),
        closed(DecodeError::BadNumber("length prefix"))
    );
}

#[test]
fn f4_leading_zero_closes() {
    assert_eq!(
        fresh(b"033{\"command\":\"msQueryGameServers\"}\n"),
        closed(DecodeError::BadNumber("length prefix"))
    );
}

#[test]
fn f5_length_zero_closes() {
    assert_eq!(
        fresh(b"0\n"),
        closed(DecodeError::BadNumber("length prefix"))
    );
}

#[test]
fn f6_above_limit_closes_once_prefix_complete() {
    assert_eq!(
        fresh(b"65538"),
        closed(DecodeError::TooLarge("frame length"))
    );
    assert_eq!(check(b"65538{"), Err(DecodeError::TooLarge("frame length")));
}

#[test]
fn f7_sixth_digit_closes_without_waiting() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(m.send(c, b"10000"), vec![]);
    assert_eq!(
        m.send(c, b"0"),
        closed(DecodeError::TooLarge("frame length"))
    );
}

#[test]
fn f8_length_one_too_small_closes() {
    assert_eq!(
        fresh(b"32{\"command\":\"msQueryGameServers\"}\n"),
        closed(DecodeError::Invalid("frame terminator"))
    );
}

#[test]
fn f9_length_one_too_large_closes() {
    let mut m = Master::new();
    let c = m.connect();
    // With nothing after the newline the server keeps waiting.
    assert_eq!(
        m.send(c, b"34{\"command\":\"msQueryGameServers\"}\n"),
        vec![]
    );
    assert_eq!(
        m.send(c, b"3"),
        closed(DecodeError::Invalid("frame terminator"))
    );
}

#[test]
fn f10_cr_not_counted_closes() {
    assert_eq!(
        fresh(b"33{\"command\":\"msQueryGameServers\"}\r\n"),
        closed(DecodeError::Invalid("frame terminator"))
    );
}

#[test]
fn a1_cr_counted_is_json_whitespace() {
    assert_eq!(
        fresh(b"34{\"command\":\"msQueryGameServers\"}\r\n"),
        vec![Query]
    );
}

#[test]
fn a2_two_frames_in_one_segment_in_order() {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, &fixture("mgmt/muster-register-1-feuerland.frame"));
    assert_eq!(
        m.send(
            c,
            b"33{\"command\":\"msQueryGameServers\"}\n37{\"command\":\"msUnregisterGameServer\"}\n"
        ),
        vec![Query, Unregister]
    );
    // The query was answered before the unregistration.
    assert_eq!(m.answers(c)[0].servers().len(), 1);
}

#[test]
fn a3_one_byte_per_segment() {
    let mut m = Master::new();
    let c = m.connect();
    let wire = seed("register-2-boesewicht");
    let (last, head) = wire.split_last().unwrap();
    for b in head {
        assert_eq!(m.send(c, std::slice::from_ref(b)), vec![]);
    }
    assert_eq!(
        m.send(c, std::slice::from_ref(last)),
        vec![Register(server(
            "Server von Bösewicht",
            "fd40:9dc7:b528::1",
            30000
        ))]
    );
}

fn padded(pad: usize) -> Vec<u8> {
    let json = format!(
        r#"{{"command":"msQueryGameServers","pad":"{}"}}"#,
        "x".repeat(pad)
    );
    frame(json.as_bytes())
}

#[test]
fn a4_largest_frame_answered() {
    let wire = padded(65495);
    assert_eq!(wire.len(), 65542);
    assert!(wire.starts_with(b"65537{"));
    assert_eq!(fresh(&wire), vec![Query]);
    // The decoder never held more than this one frame.
    let mut dec = FrameDecoder::new();
    let mut input = &wire[..];
    assert!(dec.feed(&mut input).unwrap().is_some());
}

#[test]
fn a5_one_byte_above_largest_closes() {
    let wire = padded(65496);
    assert!(wire.starts_with(b"65538{"));
    assert_eq!(fresh(&wire), closed(DecodeError::TooLarge("frame length")));
}

#[test]
fn a6_peer_closes_mid_frame_nothing_registered() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(
        m.send(
            c,
            b"122{\"command\":\"msRegisterGameServer\",\"content\":{\"serverName\""
        ),
        vec![]
    );
    assert_eq!(m.eof(c), vec![Closed(CloseReason::PeerClosed)]);
    assert!(m.list().is_empty());
}

#[test]
fn a7_seed_example_as_printed_ok() {
    let wire = seed("register-1-feuerland");
    assert!(wire.windows(5).any(|w| w == b"\n    "));
    assert_eq!(fresh(&wire), vec![Register(feuerland())]);
}

// ---------------------------------------------------------------------------------------------
// §10.2: message level

#[test]
fn m1_empty_json_discarded() {
    assert_eq!(fresh(b"1\n"), invalid(MessageError::Syntax("json text")));
}

#[test]
fn m2_invalid_utf8_discarded() {
    assert_eq!(
        fresh(b"41{\"command\":\"msQueryGameServers\",\"x\":\"\xff\"}\n"),
        invalid(MessageError::Utf8("json text"))
    );
}

#[test]
fn m3_invalid_json_discarded() {
    assert_eq!(
        fresh(b"32{\"command\":\"msQueryGameServers\"\n"),
        invalid(MessageError::Syntax("json text"))
    );
}

#[test]
fn m4_byte_order_mark_discarded() {
    assert_eq!(
        fresh(b"36\xef\xbb\xbf{\"command\":\"msQueryGameServers\"}\n"),
        invalid(MessageError::Syntax("json text"))
    );
}

#[test]
fn m5_root_not_object_discarded() {
    assert_eq!(
        fresh(b"23[\"msQueryGameServers\"]\n"),
        invalid(MessageError::NotAnObject("root"))
    );
}

#[test]
fn m6_no_command_discarded() {
    assert_eq!(
        fresh(b"15{\"content\":{}}\n"),
        invalid(MessageError::Missing("command"))
    );
}

#[test]
fn m7_command_not_string_discarded() {
    assert_eq!(
        fresh(b"15{\"command\":42}\n"),
        invalid(MessageError::WrongType("command"))
    );
}

#[test]
fn m8_unknown_command_discarded() {
    assert_eq!(
        fresh(b"22{\"command\":\"msHello\"}\n"),
        invalid(MessageError::UnknownCommand)
    );
}

#[test]
fn m9_command_case_matters() {
    assert_eq!(
        fresh(b"33{\"command\":\"msquerygameservers\"}\n"),
        invalid(MessageError::UnknownCommand)
    );
}

#[test]
fn m10_answer_sent_to_server_discarded() {
    assert_eq!(
        fresh(b"59{\"command\":\"msRQueryGameServers\",\"content\":{\"servers\":[]}}\n"),
        vec![Discarded(Discard::NotACommand(
            Command::QueryGameServersAnswer
        ))]
    );
}

#[test]
fn m11_duplicate_key_discarded() {
    assert_eq!(
        fresh(b"68{\"command\":\"msQueryGameServers\",\"command\":\"msUnregisterGameServer\"}\n"),
        invalid(MessageError::DuplicateKey("json object"))
    );
}

#[test]
fn m12_data_after_value_discarded() {
    assert_eq!(
        fresh(b"35{\"command\":\"msQueryGameServers\"} x\n"),
        invalid(MessageError::Syntax("json text"))
    );
}

#[test]
fn m13_content_object_on_command_without_data_discarded() {
    assert_eq!(
        fresh(b"56{\"command\":\"msQueryGameServers\",\"content\":{\"filter\":1}}\n"),
        invalid(MessageError::UnexpectedContent("msQueryGameServers"))
    );
}

#[test]
fn m14_content_array_on_command_without_data_discarded() {
    assert_eq!(
        fresh(b"46{\"command\":\"msQueryGameServers\",\"content\":[]}\n"),
        invalid(MessageError::UnexpectedContent("msQueryGameServers"))
    );
}

#[test]
fn ok1_empty_content_answered() {
    assert_eq!(
        fresh(b"46{\"command\":\"msQueryGameServers\",\"content\":{}}\n"),
        vec![Query]
    );
}

#[test]
fn ok2_null_content_answered() {
    assert_eq!(
        fresh(b"48{\"command\":\"msQueryGameServers\",\"content\":null}\n"),
        vec![Query]
    );
}

#[test]
fn ok3_unknown_root_key_ignored() {
    assert_eq!(
        fresh(b"45{\"command\":\"msQueryGameServers\",\"version\":2}\n"),
        vec![Query]
    );
}

#[test]
fn discarded_message_keeps_connection_open() {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, b"1\n");
    assert_eq!(m.send(c, QUERY_FRAME), vec![Query]);
}

// ---------------------------------------------------------------------------------------------
// §10.3: msRegisterGameServer

const REG: &str = "msRegisterGameServer";

fn register(content: &str, prefix: usize) -> Vec<SessionEvent> {
    fresh(&row(REG, content, prefix))
}

fn bad_address(address: &str, prefix: usize, e: AddressError) {
    let content =
        format!(r#"{{"serverName":"Feuerland","serverAddress":"{address}","serverPort":20000}}"#);
    assert_eq!(
        register(&content, prefix),
        invalid(MessageError::Address(e))
    );
}

fn port_case(port: &str, prefix: usize) -> Vec<SessionEvent> {
    register(
        &format!(
            r#"{{"serverName":"Feuerland","serverAddress":"192.168.0.10","serverPort":{port}}}"#
        ),
        prefix,
    )
}

#[test]
fn r1_no_content_discarded() {
    let wire = frame(br#"{"command":"msRegisterGameServer"}"#);
    assert!(wire.starts_with(b"35{"));
    assert_eq!(fresh(&wire), invalid(MessageError::Missing("content")));
}

#[test]
fn r2_null_content_discarded() {
    assert_eq!(
        register("null", 50),
        invalid(MessageError::Missing("content"))
    );
}

#[test]
fn r3_empty_name_discarded() {
    assert_eq!(
        register(
            r#"{"serverName":"","serverAddress":"192.168.0.10","serverPort":20000}"#,
            113
        ),
        invalid(MessageError::Empty("serverName"))
    );
}

#[test]
fn r4_ipv4_octet_256_discarded() {
    bad_address("192.168.0.256", 123, AddressError::Ipv4);
}

#[test]
fn r5_ipv4_three_parts_discarded() {
    bad_address("1.2.3", 115, AddressError::Ipv4);
}

#[test]
fn r6_ipv4_leading_zeros_discarded() {
    bad_address("192.168.000.010", 125, AddressError::Ipv4);
}

#[test]
fn r7_ipv6_two_double_colons_discarded() {
    bad_address("fd40::9dc7::1", 123, AddressError::Ipv6);
}

#[test]
fn r8_ipv6_brackets_discarded() {
    bad_address("[fd40:9dc7:b528::1]", 129, AddressError::Ipv6);
}

#[test]
fn r9_ipv6_zone_index_discarded() {
    bad_address("fe80::1%eth0", 122, AddressError::Ipv6);
}

#[test]
fn r10_unspecified_discarded() {
    bad_address("0.0.0.0", 117, AddressError::Unspecified);
}

#[test]
fn r11_multicast_discarded() {
    bad_address("224.0.0.1", 119, AddressError::Multicast);
}

#[test]
fn r12_digits_only_discarded() {
    bad_address("12345", 115, AddressError::Ipv4);
}

#[test]
fn r13_space_in_hostname_discarded() {
    bad_address("bomber game", 121, AddressError::Hostname);
}

#[test]
fn r14_empty_address_discarded() {
    bad_address("", 110, AddressError::Empty);
}

#[test]
fn r15_port_zero_discarded() {
    assert_eq!(
        port_case("0", 118),
        invalid(MessageError::OutOfRange("serverPort"))
    );
}

#[test]
fn r16_port_51963_discarded() {
    assert_eq!(
        port_case("51963", 122),
        invalid(MessageError::OutOfRange("serverPort"))
    );
}

#[test]
fn r17_port_above_65535_discarded() {
    assert_eq!(
        port_case("65536", 122),
        invalid(MessageError::OutOfRange("serverPort"))
    );
}

#[test]
fn r18_port_negative_discarded() {
    assert_eq!(
        port_case("-1", 119),
        invalid(MessageError::OutOfRange("serverPort"))
    );
}

#[test]
fn r19_port_fraction_discarded() {
    assert_eq!(
        port_case("20000.5", 124),
        invalid(MessageError::WrongType("serverPort"))
    );
}

#[test]
fn r20_port_exponent_string_discarded() {
    assert_eq!(
        port_case("\"2e4\"", 122),
        invalid(MessageError::WrongType("serverPort"))
    );
}

#[test]
fn r21_port_boolean_discarded() {
    assert_eq!(
        port_case("true", 121),
        invalid(MessageError::WrongType("serverPort"))
    );
}

#[test]
fn r22_port_decimal_string_ok_sent_back_as_integer() {
    let mut m = Master::new();
    let c = m.connect();
    let wire = row(
        REG,
        r#"{"serverName":"Feuerland","serverAddress":"192.168.0.10","serverPort":"20000"}"#,
        124,
    );
    assert_eq!(m.send(c, &wire), vec![Register(feuerland())]);
    m.send(c, QUERY_FRAME);
    let mut want = Vec::new();
    Message::QueryGameServersAnswer(
        ServerListAnswer::new(vec![ListedGameServer {
            server: feuerland(),
            stats: Stats::default(),
        }])
        .unwrap(),
    )
    .encode(&mut want);
    assert_eq!(m.sent[c], want);
    assert!(
        m.sent[c]
            .windows(b"\"port\":20000,".len())
            .any(|w| w == b"\"port\":20000,")
    );
}

#[test]
fn r23_well_known_port_ok_with_warning() {
    let events = port_case("80", 119);
    assert_eq!(
        events,
        vec![Register(server("Feuerland", "192.168.0.10", 80))]
    );
    let Register(s) = &events[0] else { panic!() };
    assert!(s.port().is_well_known());
}

#[test]
fn r24_hostname_returned_exactly_as_given() {
    let events = register(
        r#"{"serverName":"Feuerland","serverAddress":"Bombergame.Example.ORG.","serverPort":20000}"#,
        133,
    );
    let [Register(s)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(s.address().as_str(), "Bombergame.Example.ORG.");
}

#[test]
fn r25_ipv4_mapped_ipv6_ok() {
    let events = register(
        r#"{"serverName":"Feuerland","serverAddress":"::ffff:192.168.0.10","serverPort":20000}"#,
        129,
    );
    assert_eq!(
        events,
        vec![Register(server("Feuerland", "::ffff:192.168.0.10", 20000))]
    );
}

#[test]
fn r26_hostname_starting_with_digit_ok() {
    let events = register(
        r#"{"serverName":"Feuerland","serverAddress":"1e100.example","serverPort":20000}"#,
        123,
    );
    assert_eq!(
        events,
        vec![Register(server("Feuerland", "1e100.example", 20000))]
    );
}

// ---------------------------------------------------------------------------------------------
// §10.4: msUpdateGameServerStats

const UPD: &str = "msUpdateGameServerStats";

/// Register "Feuerland", then send the update; returns the update's events and the state after.
fn update(content: &str, prefix: usize) -> (Vec<SessionEvent>, Stats) {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, &fixture("mgmt/muster-register-1-feuerland.frame"));
    let events = m.send(c, &row(UPD, content, prefix));
    (events, m.list()[0].stats)
}

fn update_discarded(content: &str, prefix: usize, e: MessageError) {
    let (events, after) = update(content, prefix);
    assert_eq!(events, invalid(e));
    // A discarded update leaves the previous state untouched.
    assert_eq!(after, Stats::default());
}

#[test]
fn u1_not_registered_discarded() {
    assert_eq!(
        fresh(&row(
            UPD,
            r#"{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
            118
        )),
        vec![Discarded(Discard::NotRegistered)]
    );
}

#[test]
fn u2_max_five_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":5},"isLobbyOpen":true,"gameplayMode":2}"#,
        118,
        MessageError::OutOfRange("players.max"),
    );
}

#[test]
fn u3_max_one_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":1},"isLobbyOpen":true,"gameplayMode":2}"#,
        118,
        MessageError::OutOfRange("players.max"),
    );
}

#[test]
fn u4_max_decimal_string_ok() {
    let (events, after) = update(
        r#"{"players":{"current":2,"max":"4"},"isLobbyOpen":true,"gameplayMode":2}"#,
        120,
    );
    assert_eq!(events, vec![UpdateStats(stats(2, 4, true, 2))]);
    assert_eq!(after, stats(2, 4, true, 2));
}

#[test]
fn u5_current_decimal_string_ok() {
    let (events, _) = update(
        r#"{"players":{"current":"1","max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
        120,
    );
    assert_eq!(events, vec![UpdateStats(stats(1, 4, true, 2))]);
}

#[test]
fn u6_current_negative_discarded() {
    update_discarded(
        r#"{"players":{"current":-1,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
        119,
        MessageError::OutOfRange("players.current"),
    );
}

#[test]
fn u7_queue_current_above_max_ok() {
    let (events, _) = update(
        r#"{"players":{"current":22,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
        119,
    );
    assert_eq!(events, vec![UpdateStats(stats(22, 4, true, 2))]);
}

#[test]
fn u8_current_fraction_discarded() {
    update_discarded(
        r#"{"players":{"current":2.0,"max":4},"isLobbyOpen":true,"gameplayMode":2}"#,
        120,
        MessageError::WrongType("players.current"),
    );
}

#[test]
fn u9_lobby_string_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":4},"isLobbyOpen":"true","gameplayMode":2}"#,
        120,
        MessageError::WrongType("isLobbyOpen"),
    );
}

#[test]
fn u10_lobby_number_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":4},"isLobbyOpen":1,"gameplayMode":2}"#,
        115,
        MessageError::WrongType("isLobbyOpen"),
    );
}

#[test]
fn u11_mode_three_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":3}"#,
        118,
        MessageError::OutOfRange("gameplayMode"),
    );
}

#[test]
fn u12_mode_zero_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":4},"isLobbyOpen":true,"gameplayMode":0}"#,
        118,
        MessageError::OutOfRange("gameplayMode"),
    );
}

#[test]
fn u13_field_missing_discarded() {
    update_discarded(
        r#"{"players":{"current":2,"max":4},"isLobbyOpen":true}"#,
        101,
        MessageError::Missing("gameplayMode"),
    );
}

#[test]
fn u14_players_not_object_discarded() {
    update_discarded(
        r#"{"players":[2,4],"isLobbyOpen":true,"gameplayMode":2}"#,
        102,
        MessageError::NotAnObject("players"),
    );
}

// ---------------------------------------------------------------------------------------------
// §10.5: unregister, query and connection life

fn registered() -> (Master, usize) {
    let mut m = Master::new();
    let c = m.connect();
    m.send(c, &fixture("mgmt/muster-register-1-feuerland.frame"));
    (m, c)
}

#[test]
fn n1_unregister_without_registration_does_nothing() {
    let mut m = Master::new();
    let c = m.connect();
    assert_eq!(
        m.send(c, b"37{\"command\":\"msUnregisterGameServer\"}\n"),
        vec![]
    );
    assert!(!m.sessions[c].is_closed());
}

#[test]
fn n2_unregister_empty_content_removes() {
    let (mut m, c) = registered();
    assert_eq!(
        m.send(
            c,
            b"50{\"command\":\"msUnregisterGameServer\",\"content\":{}}\n"
        ),
        vec![Unregister]
    );
    assert!(m.list().is_empty());
}

#[test]
fn n3_unregister_null_content_removes() {
    let (mut m, c) = registered();
    assert_eq!(
        m.send(
            c,
            b"52{\"command\":\"msUnregisterGameServer\",\"content\":null}\n"
        ),
        vec![Unregister]
    );
    assert!(m.list().is_empty());
}

#[test]
fn n4_unregister_with_content_discarded() {
    let (mut m, c) = registered();
    assert_eq!(
        m.send(
            c,
            b"66{\"command\":\"msUnregisterGameServer\",\"content\":{\"serverName\":\"x\"}}\n"
        ),
        invalid(MessageError::UnexpectedContent("msUnregisterGameServer"))
    );
    assert_eq!(m.list().len(), 1);
}

#[test]
fn l1_close_removes_registration() {
    let (mut m, c) = registered();
    assert_eq!(m.eof(c), vec![Closed(CloseReason::PeerClosed)]);
    let q = m.connect();
    m.send(q, QUERY_FRAME);
    assert!(m.answers(q)[0].servers().is_empty());
}

#[test]
fn l2_second_registration_replaces_first() {
    let (mut m, c) = registered();
    m.send(c, &seed("update"));
    let json = br#"{"command":"msRegisterGameServer","content":{"serverName":"Feuerland 2","serverAddress":"192.168.0.10","serverPort":20001}}"#;
    let second = server("Feuerland 2", "192.168.0.10", 20001);
    assert_eq!(m.send(c, &frame(json)), vec![Register(second.clone())]);
    assert_eq!(
        m.list(),
        vec![ListedGameServer {
            server: second.clone(),
            stats: Stats::default()
        }]
    );
    assert_eq!(m.sessions[c].registration(), Some(&second));
}

#[test]
fn l3_registered_without_update_has_defaults() {
    let (mut m, c) = registered();
    m.send(c, QUERY_FRAME);
    let answers = m.answers(c);
    assert_eq!(answers[0].servers()[0].stats, stats(0, 4, true, 1));
    let want = br#""players":{"current":0,"max":4},"isLobbyOpen":true,"gameplayMode":1}"#;
    assert!(m.sent[c].windows(want.len()).any(|w| w == want));
}

#[test]
fn l4_same_address_on_two_connections_two_entries() {
    let (mut m, _) = registered();
    let d = m.connect();
    m.send(d, &fixture("mgmt/muster-register-1-feuerland.frame"));
    assert_eq!(m.list().len(), 2);
}

#[test]
fn l5_other_connection_cannot_unregister() {
    let (mut m, _) = registered();
    let b = m.connect();
    assert_eq!(m.send(b, &fixture("mgmt/muster-unregister.frame")), vec![]);
    assert_eq!(m.list().len(), 1);
}

#[test]
fn l6_idle_unregistered_connection_closed() {
    let mut m = Master::new();
    let c = m.connect();
    let t0 = m.t0;
    assert_eq!(
        m.sessions[c].poll_timeout(),
        Some(t0 + Duration::from_secs(600))
    );
    // A complete message restarts the clock.
    m.send_at(c, Duration::from_secs(100), QUERY_FRAME);
    let deadline = t0 + Duration::from_secs(700);
    assert_eq!(m.sessions[c].poll_timeout(), Some(deadline));
    // Partial frames do not.
    m.send_at(c, Duration::from_secs(650), b"33{");
    assert_eq!(m.sessions[c].poll_timeout(), Some(deadline));
    m.sessions[c].handle_timeout(deadline - Duration::from_millis(1));
    assert_eq!(m.drain(c), vec![]);
    m.sessions[c].handle_timeout(deadline);
    assert_eq!(m.drain(c), vec![Closed(CloseReason::IdleTimeout)]);
    assert_eq!(m.sessions[c].poll_timeout(), None);
}

#[test]
fn l7_registered_connection_never_idles_out() {
    let (mut m, c) = registered();
    assert_eq!(m.sessions[c].poll_timeout(), None);
    m.sessions[c].handle_timeout(m.t0 + Duration::from_secs(86_400));
    assert_eq!(m.drain(c), vec![]);
    assert_eq!(m.list().len(), 1);
    // After unregistering, the idle clock runs again from that message.
    m.send_at(
        c,
        Duration::from_secs(1000),
        &fixture("mgmt/muster-unregister.frame"),
    );
    assert_eq!(
        m.sessions[c].poll_timeout(),
        Some(m.t0 + Duration::from_secs(1600))
    );
}

#[test]
fn l8_per_address_cap_is_the_drivers_job() {
    // The cap on connections per source address (§7.1 (10)) needs all connections, which a
    // session does not see: muster-master enforces it before creating a session. A session
    // starts open, with no event.
    let mut s = ServerSession::new(Instant::now(), SessionConfig::default());
    assert_eq!(s.poll_event(), None);
    assert!(!s.is_closed());
}

// ---------------------------------------------------------------------------------------------
// quirks

#[test]
fn quirk_framing_error_after_good_frames_keeps_earlier_events() {
    let mut m = Master::new();
    let c = m.connect();
    let mut input = QUERY_FRAME.to_vec();
    input.extend_from_slice(b"x");
    input.extend_from_slice(QUERY_FRAME);
    assert_eq!(
        m.send(c, &input),
        vec![
            Query,
            Closed(CloseReason::Framing(DecodeError::BadNumber(
                "length prefix"
            )))
        ]
    );
    // Nothing more is processed after the close.
    assert_eq!(m.send(c, QUERY_FRAME), vec![]);
}

#[test]
fn quirk_close_of_registered_connection_removes_entry() {
    let (mut m, c) = registered();
    assert_eq!(
        m.send(c, b"x"),
        closed(DecodeError::BadNumber("length prefix"))
    );
    assert!(m.list().is_empty());
    assert_eq!(m.sessions[c].registration(), None);
}

#[test]
fn quirk_newlines_inside_json_are_allowed() {
    assert_eq!(
        fresh(b"36{\n\"command\":\n\"msQueryGameServers\"\n}\n"),
        vec![Query]
    );
}

#[test]
fn quirk_client_skips_invalid_entries_and_counts_them() {
    let json = br#"{"command":"msRQueryGameServers","content":{"servers":[{"name":"Feuerland","address":"192.168.0.10","port":20000,"players":{"current":"1","max":4},"isLobbyOpen":true,"gameplayMode":1},{"name":"Bad","address":"192.168.0.256","port":1,"players":{"current":0,"max":4},"isLobbyOpen":true,"gameplayMode":1}],"extra":1}}"#;
    let mut client = ClientConnection::new();
    client.handle_input(&frame(json));
    let Some(ClientEvent::Answer(a)) = client.poll_event() else {
        panic!()
    };
    assert_eq!((a.servers().len(), a.skipped()), (1, 1));
}

#[test]
fn quirk_client_discards_answer_without_servers_array() {
    let mut client = ClientConnection::new();
    client.handle_input(&frame(
        br#"{"command":"msRQueryGameServers","content":{"servers":null}}"#,
    ));
    assert_eq!(
        client.poll_event(),
        Some(ClientEvent::Discarded(MessageError::WrongType("servers")))
    );
    client.handle_input(b"x");
    assert_eq!(
        client.poll_event(),
        Some(ClientEvent::Closed(DecodeError::BadNumber("length prefix")))
    );
}

/// Seed 004: "Der Verwaltungsserver hört stets auf folgendem Port: 51963."
#[test]
fn seed_port_is_51963() {
    assert_eq!(muster_proto::mgmt::PORT, 51963);
}
