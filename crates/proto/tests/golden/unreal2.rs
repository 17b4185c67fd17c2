//! Golden tests for unreal2: every vector of spec §12 in both directions, the real Killing Floor
//! capture (§12.8, `fixtures/unreal2/`), and one test per quirk of §13.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use muster_proto::model::{RawValue, ServerInfo, Text};
use muster_proto::query::{Event, QueryConfig, QueryError, QueryMachine};
use muster_proto::unreal2::packet::{
    Command, InfoReply, InfoTail, PlayerRecord, PlayersReply, Reply, Request, RulePair, RulesReply,
    ServerSnapshot, SmallPingReply, Style, TEAM_BLUE_BIT, TEAM_RED_BIT, VERSION_XMP,
    encode_players, encode_rules,
};
use muster_proto::unreal2::string::{Units, read_compact, write_compact};
use muster_proto::unreal2::{
    SPLIT_THRESHOLD, U2String, Unreal2Config, Unreal2Query, decode_text, server_info,
};
use muster_proto::wire::{DecodeError, Reader};

use crate::util::{fixture, unhex};

const INFO_12_1: &str = "80000000000000000000611e000000000000074d7920537276000a444d2d52616e6b696e000c7844656174684d6174636800020000001000000000000000000000000231000000";
const RULES_12_1: &str = "80000000010a41646d696e4e616d650004426f6200084d757461746f7200054d75744100";
const PLAYERS_12_1: &str = "80000000020300000006416c70686100280000000c00000000000020";
const INFO_12_3: &str = "79000000000000000000611e000000000000074d7920537276000a444d2d52616e6b696e000c7844656174684d61746368000200000010000000000000000000";

fn s(t: &str) -> U2String {
    U2String::from_text(t).expect("short")
}

fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

fn snapshot_12_1(style: Style) -> ServerSnapshot {
    ServerSnapshot {
        info: InfoReply::stock(
            style,
            7777,
            s("My Srv"),
            s("DM-Rankin"),
            s("xDeathMatch"),
            2,
            16,
        ),
        rules: vec![
            RulePair::from_text("AdminName", "Bob").expect("short"),
            RulePair::from_text("Mutator", "MutA").expect("short"),
        ],
        players: vec![PlayerRecord {
            num: 3,
            name: s("Alpha"),
            ping: 40,
            score: 12,
            stats_id: TEAM_RED_BIT,
            xmp: None,
        }],
    }
}

fn answer(snap: &ServerSnapshot, request: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    snap.answer(request, &mut out);
    out
}

fn string_of(bytes: &[u8]) -> U2String {
    U2String::decode(bytes).expect("valid string")
}

// ---- §12.1 ------------------------------------------------------------------------------

#[test]
fn spec_12_1_request() {
    let req = Request::decode(&unhex("80 00 00 00 00")).expect("valid");
    assert_eq!(req, Request::new(Command::Info));
    assert_eq!(enc(|o| req.encode(o)), unhex("80 00 00 00 00"));
}

#[test]
fn spec_12_1_info_both_directions() {
    let bytes = unhex(INFO_12_1);
    assert_eq!(bytes.len(), 71);
    let info = InfoReply::decode(&bytes).expect("valid");
    assert_eq!(info, snapshot_12_1(Style::Ut2004).info);
    assert_eq!(decode_text(&info.name).text, "My Srv");
    assert_eq!(info.current_players, 2);
    assert_eq!(info.max_players, 16);
    assert_eq!(
        info.tail,
        InfoTail::Ut2004 {
            ping: 0,
            flags: 0,
            skill_level: s("1")
        }
    );
    assert_eq!(enc(|o| info.encode(o)), bytes);
}

#[test]
fn spec_12_1_rules_both_directions() {
    let bytes = unhex(RULES_12_1);
    assert_eq!(bytes.len(), 36);
    let rules = RulesReply::decode(&bytes).expect("valid");
    assert_eq!(rules.pairs, snapshot_12_1(Style::Ut2004).rules);
    assert_eq!(enc(|o| rules.encode(o)), bytes);
}

#[test]
fn spec_12_1_players_both_directions() {
    let bytes = unhex(PLAYERS_12_1);
    assert_eq!(bytes.len(), 28);
    let players = PlayersReply::decode(&bytes).expect("valid");
    assert_eq!(players.players(), &snapshot_12_1(Style::Ut2004).players[..]);
    assert_eq!(enc(|o| players.encode(o)), bytes);
}

#[test]
fn spec_12_1_responder_answers_byte_exact() {
    let snap = snapshot_12_1(Style::Ut2004);
    assert_eq!(answer(&snap, &unhex("80000000 00")), vec![unhex(INFO_12_1)]);
    assert_eq!(
        answer(&snap, &unhex("79000000 01")),
        vec![unhex(RULES_12_1)]
    );
    assert_eq!(
        answer(&snap, &unhex("78000000 02")),
        vec![unhex(PLAYERS_12_1)]
    );
    assert_eq!(
        answer(&snap, &unhex("78000000 03")),
        vec![unhex(RULES_12_1), unhex(PLAYERS_12_1)]
    );
}

#[test]
fn spec_12_1_server_info_snapshot() {
    let snap = snapshot_12_1(Style::Ut2004);
    let info = server_info(Some(&snap.info), Some(&snap.rules), &snap.players);
    // CurrentPlayers 2, one listed player: nothing invented (§12.1, §9).
    assert_eq!(info.num_players, 2);
    assert_eq!(info.players.len(), 1);
    insta::assert_debug_snapshot!("unreal2_spec_12_1_server_info", info);
}

// ---- §12.2 ------------------------------------------------------------------------------

#[test]
fn spec_12_2_strings_both_directions() {
    let n69 = format!("46 01 {} 00", "4e ".repeat(69));
    let cases: Vec<(&str, String, &str, &str)> = vec![
        // (hex, text, plain, description)
        ("00", String::new(), "", "empty"),
        ("05 43 61 66 e9 00", "Café".into(), "Café", "single byte"),
        (
            "85 42 00 65 00 74 00 30 04 00 00",
            "Betа".into(),
            "Betа",
            "utf-16",
        ),
        (&n69, "N".repeat(69), "", "69 chars"),
        (
            "10 1b ff 01 01 52 65 64 1b 01 01 ff 42 6c 75 65 00",
            "\u{1b}\u{ff}\u{1}\u{1}Red\u{1b}\u{1}\u{1}\u{ff}Blue".into(),
            "RedBlue",
            "colour codes",
        ),
        (
            "89 1b 00 ff 00 01 00 01 00 42 00 65 00 74 00 30 04 00 00",
            "\u{1b}\u{ff}\u{1}\u{1}Betа".into(),
            "Betа",
            "colour code in utf-16",
        ),
    ];
    for (hex, text, plain, what) in cases {
        let bytes = unhex(hex);
        let st = string_of(&bytes);
        let t = decode_text(&st);
        assert_eq!(t.text, text, "{what}");
        if !plain.is_empty() || text.is_empty() {
            assert_eq!(t.plain, plain, "{what}");
        }
        assert_eq!(enc(|o| st.encode(o)), bytes, "{what}");
        // Built from the decoded text, the stock choice of form gives the same bytes.
        assert_eq!(enc(|o| s(&text).encode(o)), bytes, "{what}");
    }
}

// ---- §12.3 ------------------------------------------------------------------------------

#[test]
fn spec_12_3_ut2003_info_both_directions() {
    let bytes = unhex(INFO_12_3);
    assert_eq!(bytes.len(), 64);
    let info = InfoReply::decode(&bytes).expect("valid");
    assert_eq!(info.version, 0x79);
    assert_eq!(
        info.tail,
        InfoTail::Ut2003 {
            ping: 0,
            arrays: true
        }
    );
    assert_eq!(info, snapshot_12_1(Style::Ut2003).info);
    assert_eq!(enc(|o| info.encode(o)), bytes);
    assert_eq!(
        answer(&snapshot_12_1(Style::Ut2003), &unhex("80000000 00")),
        vec![bytes]
    );
}

// ---- §12.4 ------------------------------------------------------------------------------

#[test]
fn spec_12_4_rules_split_across_two_datagrams() {
    let pairs: Vec<RulePair> = (0..40)
        .map(|i| RulePair::from_text("Mutator", &format!("Mut{i:02}")).expect("short"))
        .collect();
    let mut dgs = Vec::new();
    encode_rules(0x80, &pairs, &mut dgs);
    let lens: Vec<usize> = dgs.iter().map(Vec::len).collect();
    assert_eq!(lens, vec![453, 197]);
    let second = dgs.get(1).expect("two datagrams");
    assert!(second.starts_with(&unhex(
        "80 00 00 00 01 08 4d 75 74 61 74 6f 72 00 06 4d 75 74 32 38 00"
    )));
    let first = RulesReply::decode(dgs.first().expect("two")).expect("valid");
    let second = RulesReply::decode(second).expect("valid");
    assert_eq!(first.pairs.len(), 28);
    assert_eq!(second.pairs.len(), 12);
    assert_eq!([first.pairs, second.pairs].concat(), pairs);
}

// ---- §12.5 ------------------------------------------------------------------------------

#[test]
fn spec_12_5_small_ping_both_directions() {
    let req = unhex("80 00 00 00 04");
    assert_eq!(Request::decode(&req), Ok(Request::new(Command::SmallPing)));
    let reply = unhex("80 00 00 00 04 50");
    assert_eq!(
        SmallPingReply::decode(&reply),
        Ok(SmallPingReply { version: 0x80 })
    );
    assert_eq!(enc(|o| SmallPingReply { version: 0x80 }.encode(o)), reply);
    assert_eq!(answer(&snapshot_12_1(Style::Ut2004), &req), vec![reply]);
}

// ---- §12.6 ------------------------------------------------------------------------------

fn target() -> SocketAddr {
    "192.0.2.1:7778".parse().expect("addr")
}

fn run_query(
    q: &mut Unreal2Query,
    snap: &ServerSnapshot,
    t0: Instant,
    reply_after: Duration,
) -> Vec<Vec<u8>> {
    let mut requests = Vec::new();
    let mut buf = Vec::new();
    while q.poll_transmit(t0, &mut buf).is_some() {
        requests.push(std::mem::take(&mut buf));
    }
    for req in &requests {
        for d in answer(snap, req) {
            q.handle_datagram(t0 + reply_after, target(), &d);
        }
    }
    requests
}

#[test]
fn spec_12_6_empty_server_completes_without_players_timeout() {
    let mut snap = snapshot_12_1(Style::Ut2004);
    snap.info.current_players = 0;
    snap.players.clear();
    assert!(answer(&snap, &unhex("80000000 02")).is_empty());
    assert_eq!(
        answer(&snap, &unhex("80000000 03")),
        vec![unhex(RULES_12_1)]
    );

    let t0 = Instant::now();
    let mut q = Unreal2Query::new(target(), Unreal2Config::default());
    run_query(&mut q, &snap, t0, Duration::from_millis(20));
    // Only the 300 ms rules idle gap is left, not the 2 s players timeout.
    assert_eq!(q.poll_timeout(), Some(t0 + Duration::from_millis(320)));
    q.handle_timeout(t0 + Duration::from_millis(320));
    let Some(Event::Done(info)) = q.poll_event() else {
        panic!("expected a result");
    };
    assert_eq!(info.num_players, 0);
    assert!(info.players.is_empty());
    assert_eq!(info.partial, None);
    assert_eq!(info.ping, Some(Duration::from_millis(20)));
}

// ---- §12.7 ------------------------------------------------------------------------------

#[test]
fn spec_12_7_malformed_requests_are_errors_and_get_no_reply() {
    let snap = snapshot_12_1(Style::Ut2004);
    let cases = [
        ("80 00 00", DecodeError::Truncated("request version")),
        ("80 00 00 00", DecodeError::Truncated("request command")),
        (
            "80 00 00 00 00 00",
            DecodeError::TrailingBytes(1, "request"),
        ),
        (
            "5c 73 74 61 74 75 73 5c",
            DecodeError::TrailingBytes(3, "request"),
        ),
        ("80 00 00 00 05", DecodeError::Invalid("request command")),
    ];
    for (hex, err) in cases {
        let bytes = unhex(hex);
        assert_eq!(Request::decode(&bytes), Err(err), "{hex}");
        assert!(answer(&snap, &bytes).is_empty(), "{hex}");
    }
}

// ---- §12.8: the Killing Floor capture ------------------------------------------------------

const KF_INFO_SPEC: &str = "80 00 00 00 00 00 00 00 00 00 7f 1e 00 00 00 00 00 00
36 1b fe 40 40 57 57 57 2e 43 55 5a 55 53 2e 4f 52 47 20 1b 6f 6f 6f 2d 20
1b 40 fe fe 42 4f 53 53 20 52 41 47 45 20 1b 6f 6f 6f 2d 20 1b 88 88 88
56 31 30 36 35 00
0f 4b 46 2d 4e 6f 2d 4d 65 72 63 79 5f 54 41 00 0b 53 52 47 61 6d 65 54 79 70 65 00
02 00 00 00 18 00 00 00 01 00 00 00 0a 00 00 00 00 00 00 00 20 00 00 00 02 30 00 00 00";

fn kf_rules() -> Vec<RulesReply> {
    ["kf-rules-1.bin", "kf-rules-2.bin", "kf-rules-3.bin"]
        .iter()
        .map(|f| RulesReply::decode(&fixture(&format!("unreal2/{f}"))).expect("valid"))
        .collect()
}

#[test]
fn killing_floor_info_capture() {
    let bytes = fixture("unreal2/kf-info.bin");
    assert_eq!(bytes, unhex(KF_INFO_SPEC), "fixture matches spec §12.8");
    assert_eq!(bytes.len(), 130);
    let info = InfoReply::decode(&bytes).expect("valid");
    assert_eq!(
        info.tail,
        InfoTail::KillingFloor {
            wave_current: 1,
            wave_total: 10,
            ping: 0,
            flags: 0x20,
            skill_level: s("0")
        }
    );
    assert_eq!(info.port, 7807);
    let name = decode_text(&info.name);
    assert_eq!(name.plain, "WWW.CUZUS.ORG - BOSS RAGE - V1065");
    assert!(name.raw.starts_with(b"\x1b\xfe\x40\x40WWW"));
    assert_eq!(enc(|o| info.encode(o)), bytes);
    insta::assert_debug_snapshot!("unreal2_kf_info", info);
}

#[test]
fn killing_floor_players_capture() {
    let bytes = fixture("unreal2/kf-players.bin");
    assert_eq!(bytes.len(), 52);
    let players = PlayersReply::decode(&bytes).expect("valid");
    let summary: Vec<(String, i32, i32, Option<i32>)> = players
        .players()
        .iter()
        .map(|p| (decode_text(&p.name).text, p.ping, p.score, p.team()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("_Mary911".to_owned(), 100, 2297, Some(0)),
            ("_27".to_owned(), 100, 2093, Some(0)),
        ]
    );
    assert_eq!(enc(|o| players.encode(o)), bytes);
    insta::assert_debug_snapshot!("unreal2_kf_players", players);
}

#[test]
fn killing_floor_rules_capture() {
    let rules = kf_rules();
    for (r, f) in rules
        .iter()
        .zip(["kf-rules-1.bin", "kf-rules-2.bin", "kf-rules-3.bin"])
    {
        assert!(r.trailing.is_empty(), "{f}");
        assert_eq!(
            enc(|o| r.encode(o)),
            fixture(&format!("unreal2/{f}")),
            "{f}"
        );
    }
    let all: Vec<RulePair> = rules.into_iter().flat_map(|r| r.pairs).collect();
    let mutators = all
        .iter()
        .filter(|p| decode_text(&p.key).text == "Mutator")
        .count();
    assert_eq!(mutators, 23);
    assert!(all.contains(&RulePair::from_text("Mutator", "KillingFloorMut").expect("short")));
    assert!(all.contains(&RulePair::from_text("ServerVersion", "1065").expect("short")));
    // The empty value of AdminName survives (§13.11).
    assert!(all.contains(&RulePair::from_text("AdminName", "").expect("short")));
}

#[test]
fn killing_floor_capture_maps_to_server_info() {
    let info = InfoReply::decode(&fixture("unreal2/kf-info.bin")).expect("valid");
    let rules: Vec<RulePair> = kf_rules().into_iter().flat_map(|r| r.pairs).collect();
    let players = PlayersReply::decode(&fixture("unreal2/kf-players.bin")).expect("valid");
    let si: ServerInfo = server_info(Some(&info), Some(&rules), players.players());
    assert_eq!(si.name.plain, "WWW.CUZUS.ORG - BOSS RAGE - V1065");
    assert_eq!(si.game_type.text, "SRGameType");
    assert_eq!(si.version.text, "1065");
    assert_eq!(si.password, Some(false));
    assert_eq!(si.raw_field("wave_total"), Some(&RawValue::Int(10)));
    assert_eq!(
        si.raw_field("layout"),
        Some(&RawValue::Text(Text::from_utf8_str("killing_floor")))
    );
    // The rules are long: snapshot them as text pairs, the rest of the mapping in full.
    let rules: Vec<(&str, &str)> = si
        .rules
        .iter()
        .map(|r| (r.key.text.as_str(), r.value.text.as_str()))
        .collect();
    insta::assert_debug_snapshot!("unreal2_kf_rules", rules);
    let mut si = si;
    si.rules.clear();
    insta::assert_debug_snapshot!("unreal2_kf_server_info", si);
}

// ---- named quirks ----------------------------------------------------------------------------

#[test]
fn quirk_string_64_to_127_bytes() {
    for n in [63usize, 64, 69, 126] {
        let text = "x".repeat(n);
        let bytes = enc(|o| s(&text).encode(o));
        let len = n + 1;
        let prefix = if len < 64 {
            vec![len as u8]
        } else {
            vec![0x40 | (len & 0x3f) as u8, (len >> 6) as u8]
        };
        assert!(bytes.starts_with(&prefix), "{n}");
        assert_eq!(bytes.len(), prefix.len() + len);
        assert_eq!(decode_text(&string_of(&bytes)).text, text);
    }
    // The 69-character name of §4.3: N = 70 is `46 01`.
    assert!(enc(|o| s(&"N".repeat(69)).encode(o)).starts_with(&[0x46, 0x01]));
}

#[test]
fn quirk_string_128_plus_bytes() {
    for (n, prefix) in [
        (127usize, vec![0x40, 0x02]),
        (199, vec![0x48, 0x03]),
        (8190, vec![0x7f, 0x7f]),
        (8191, vec![0x40, 0x80, 0x01]),
    ] {
        let text = "y".repeat(n);
        let bytes = enc(|o| s(&text).encode(o));
        assert!(bytes.starts_with(&prefix), "{n}");
        assert_eq!(decode_text(&string_of(&bytes)).text, text, "{n}");
    }
    // Inside a player record, a 150-byte name keeps the following INTs aligned.
    let long = PlayerRecord {
        num: 1,
        name: s(&"L".repeat(150)),
        ping: 52,
        score: -3,
        stats_id: TEAM_BLUE_BIT,
        xmp: None,
    };
    let reply = PlayersReply::new(0x80, vec![long.clone()]).expect("valid");
    let back = PlayersReply::decode(&enc(|o| reply.encode(o))).expect("valid");
    assert_eq!(back.players(), &[long]);
}

#[test]
fn quirk_utf16_string() {
    // Cyrillic, CJK and the euro sign all force the UTF-16 form (§4.5).
    for text in [
        "Betа",
        "日本語",
        "5€",
        "Ωmega with a long tail to pass sixty-four code units ..........",
    ] {
        let st = s(text);
        assert!(st.is_wide(), "{text}");
        let bytes = enc(|o| st.encode(o));
        let mut r = Reader::new(&bytes);
        let n = read_compact(&mut r).expect("length");
        assert_eq!(n, -(text.encode_utf16().count() as i64 + 1), "{text}");
        assert_eq!(bytes.get(bytes.len() - 2..), Some(&[0u8, 0][..]));
        assert_eq!(decode_text(&string_of(&bytes)).text, text);
    }
    // An unpaired surrogate decodes as U+FFFD and is flagged lossy.
    let t = decode_text(&string_of(&unhex("83 41 00 00 d8 00 00")));
    assert_eq!(t.text, "A\u{fffd}");
    assert!(t.lossy);
}

#[test]
fn quirk_any_version_value() {
    for version in [0x00u32, 0x77, 0x78, 0x79, 0x7f, 0x80, 0xdead_beef] {
        let mut bytes = unhex(INFO_12_1);
        bytes.splice(0..4, version.to_le_bytes());
        let info = InfoReply::decode(&bytes).expect("any version");
        assert_eq!(info.version, version);
        let mut req = version.to_le_bytes().to_vec();
        req.push(0);
        assert_eq!(Request::decode(&req).map(|r| r.command), Ok(Command::Info));
    }
    // 0x7e selects the XMP player layout.
    let xmp = unhex(
        "7e00000002 01000000 07000000 025800 08000000 feffffff 00000040 01 057465616d00 023100",
    );
    let p = PlayersReply::decode(&xmp).expect("xmp");
    assert_eq!(p.version(), VERSION_XMP);
    let rec = p.players().first().expect("one");
    assert_eq!(rec.xmp.as_ref().map(|x| x.player_id), Some(7));
    let si = server_info(None, None, p.players());
    let player = si.players.first().expect("one");
    assert_eq!(player.team, Some(1));
    assert!(player.raw.iter().any(|(k, _)| k == "team"));
}

#[test]
fn quirk_two_byte_and_longer_string_lengths() {
    let cases: [(&[u8], i64); 4] = [
        (&[0x46, 0x01], 70),
        (&[0x40, 0x02], 128),
        (&[0x40, 0x80, 0x01], 8192),
        (&[0x7f, 0xff, 0xff, 0xff, 0x0f], 2_147_483_647),
    ];
    for (bytes, value) in cases {
        assert_eq!(read_compact(&mut Reader::new(bytes)), Ok(value));
        let mut out = Vec::new();
        write_compact(&mut out, i32::try_from(value).expect("fits"));
        assert_eq!(out, bytes);
    }
    // A string claiming 2^31 bytes is refused before anything is allocated.
    assert_eq!(
        U2String::decode(&[0x40, 0x80, 0x80, 0x80, 0x10]),
        Err(DecodeError::TooLarge("string length"))
    );
}

#[test]
fn quirk_negative_length_is_utf16() {
    let st = string_of(&unhex("85 42 00 65 00 74 00 30 04 00 00"));
    assert_eq!(st.units(), &Units::Wide(vec![0x42, 0x65, 0x74, 0x430]));
    assert_eq!(decode_text(&st).raw, unhex("42 00 65 00 74 00 30 04"));
}

#[test]
fn quirk_empty_string_forms() {
    assert!(string_of(&[0x00]).is_empty());
    let one = string_of(&[0x01, 0x00]);
    assert!(one.is_empty());
    assert_eq!(enc(|o| one.encode(o)), [0x01, 0x00], "kept byte-exact");
    // No trailing NUL: kept as is.
    assert_eq!(decode_text(&string_of(b"\x03abc")).text, "abc");
    // Exactly one NUL is dropped; an embedded NUL is cut only in the plain view.
    let t = decode_text(&string_of(b"\x05ab\0c\0"));
    assert_eq!(t.text, "ab\0c");
    assert_eq!(t.plain, "ab");
    assert_eq!(decode_text(&string_of(b"\x03a\0\0")).text, "a\0");
}

#[test]
fn quirk_length_beyond_datagram_keeps_earlier_records() {
    let mut bytes = unhex(RULES_12_1);
    bytes.extend_from_slice(&[0x20, b'c', b'u', b't']);
    let rules = RulesReply::decode(&bytes).expect("partial");
    assert_eq!(rules.pairs.len(), 2);
    assert_eq!(rules.trailing, vec![0x20, b'c', b'u', b't']);
    let mut bytes = unhex(PLAYERS_12_1);
    bytes.extend_from_slice(&unhex("04000000 50 41"));
    let players = PlayersReply::decode(&bytes).expect("partial");
    assert_eq!(players.players().len(), 1);
    assert_eq!(players.trailing(), unhex("04000000 50 41"));

    // The query flags the result as partial.
    let t0 = Instant::now();
    let mut q = Unreal2Query::new(target(), Unreal2Config::default());
    let mut buf = Vec::new();
    while q.poll_transmit(t0, &mut buf).is_some() {
        buf.clear();
    }
    q.handle_datagram(t0, target(), &unhex(INFO_12_1));
    q.handle_datagram(t0, target(), &unhex(RULES_12_1));
    q.handle_datagram(t0, target(), &bytes);
    q.handle_timeout(t0 + Duration::from_millis(300));
    let Some(Event::Done(info)) = q.poll_event() else {
        panic!("expected a result");
    };
    assert_eq!(info.players.len(), 1);
    assert_eq!(
        info.partial.map(|p| p.reason),
        Some("a reply datagram was cut short".to_owned())
    );
}

#[test]
fn quirk_colour_codes_in_names_maps_and_rules() {
    let mut snap = snapshot_12_1(Style::Ut2004);
    snap.info.map = U2String::narrow(b"\x1b\x80\x90\xa0DM-Colour".to_vec()).expect("short");
    snap.rules = vec![RulePair {
        key: s("AdminName"),
        value: U2String::wide(
            [0x1b, 0xff, 0x01, 0x01]
                .into_iter()
                .chain("Бoб".encode_utf16())
                .collect(),
        )
        .expect("short"),
    }];
    let si = server_info(Some(&snap.info), Some(&snap.rules), &[]);
    assert_eq!(si.map.plain, "DM-Colour");
    assert_eq!(si.map.raw, b"\x1b\x80\x90\xa0DM-Colour");
    // Windows-1252 text view keeps the code (0x80 is the euro sign there).
    assert_eq!(si.map.text, "\u{1b}€\u{90}\u{a0}DM-Colour");
    let rule = si.rules.first().expect("one");
    assert_eq!(rule.value.plain, "Бoб");
    assert!(rule.value.text.starts_with('\u{1b}'));
}

#[test]
fn quirk_three_info_layouts_empty_skill_level_and_trailing_bytes() {
    // UT2004 with an empty SkillLevel: 11 bytes after MaxPlayers.
    let mut info = snapshot_12_1(Style::Ut2004).info;
    info.tail = InfoTail::Ut2004 {
        ping: 0,
        flags: 0,
        skill_level: U2String::empty(),
    };
    let bytes = enc(|o| info.encode(o));
    assert_eq!(InfoReply::decode(&bytes), Ok(info.clone()));
    // UT2003 with the ping alone.
    let mut alone = unhex(INFO_12_3);
    alone.truncate(alone.len() - 2);
    assert_eq!(
        InfoReply::decode(&alone).map(|i| i.tail),
        Ok(InfoTail::Ut2003 {
            ping: 0,
            arrays: false
        })
    );
    // Unknown trailing bytes: the UT2004 fields are read, the rest is kept.
    let mut extra = unhex(INFO_12_1);
    extra.extend_from_slice(&[0xde, 0xad]);
    let decoded = InfoReply::decode(&extra).expect("tolerated");
    assert_eq!(
        decoded.tail,
        InfoTail::Other {
            ping: Some(0),
            flags: Some(0),
            skill_level: Some(s("1")),
            trailing: vec![0, 0, 0xde, 0xad]
        }
    );
    assert_eq!(enc(|o| decoded.encode(o)), extra);
    // Nothing after MaxPlayers at all.
    let mut bare = unhex(INFO_12_3);
    bare.truncate(bare.len() - 6);
    let bare = InfoReply::decode(&bare).expect("tolerated");
    assert_eq!(bare.tail.layout_name(), "unknown");
    assert_eq!(bare.current_players, 2);
}

#[test]
fn quirk_ip_field_not_empty() {
    let mut info = snapshot_12_1(Style::Ut2004).info;
    info.ip = s("10.0.0.5");
    let back = InfoReply::decode(&enc(|o| info.encode(o))).expect("valid");
    assert_eq!(back, info);
    let si = server_info(Some(&back), None, &[]);
    assert_eq!(
        si.raw_field("ip"),
        Some(&RawValue::Text(Text::from_utf8_str("10.0.0.5")))
    );
}

#[test]
fn quirk_query_port_zero_and_port_reported() {
    let info = InfoReply::decode(&unhex(INFO_12_1)).expect("valid");
    let si = server_info(Some(&info), None, &[]);
    assert_eq!(si.raw_field("query_port"), Some(&RawValue::Int(0)));
    assert_eq!(si.raw_field("port"), Some(&RawValue::Int(7777)));
}

#[test]
fn quirk_no_count_no_end_marker_any_order() {
    let pairs: Vec<RulePair> = (0..60)
        .map(|i| RulePair::from_text(&format!("Key{i}"), "v").expect("short"))
        .collect();
    let mut dgs = Vec::new();
    encode_rules(0x80, &pairs, &mut dgs);
    assert!(dgs.len() >= 2);
    let t0 = Instant::now();
    let mut q = Unreal2Query::new(target(), Unreal2Config::default());
    let mut buf = Vec::new();
    while q.poll_transmit(t0, &mut buf).is_some() {
        buf.clear();
    }
    let mut info = snapshot_12_1(Style::Ut2004).info;
    info.current_players = 0;
    q.handle_datagram(t0, target(), &enc(|o| info.encode(o)));
    for (i, d) in dgs.iter().rev().enumerate() {
        q.handle_datagram(t0 + Duration::from_millis(i as u64), target(), d);
    }
    q.handle_timeout(t0 + Duration::from_millis(400));
    let Some(Event::Done(si)) = q.poll_event() else {
        panic!("expected a result");
    };
    assert_eq!(si.rules.len(), 60);
}

#[test]
fn quirk_repeated_and_empty_keys() {
    let pairs = vec![
        RulePair::from_text("Mutator", "A").expect("short"),
        RulePair::from_text("", "").expect("short"),
        RulePair::from_text("Mutator", "B").expect("short"),
        RulePair::from_text("mutator", "C").expect("short"),
    ];
    let bytes = enc(|o| {
        RulesReply {
            version: 0x79,
            pairs: pairs.clone(),
            trailing: Vec::new(),
        }
        .encode(o)
    });
    let back = RulesReply::decode(&bytes).expect("valid");
    assert_eq!(back.pairs, pairs);
    let si = server_info(None, Some(&back.pairs), &[]);
    let keys: Vec<&str> = si.rules.iter().map(|r| r.key.text.as_str()).collect();
    assert_eq!(keys, vec!["Mutator", "", "Mutator", "mutator"]);
}

#[test]
fn quirk_no_players_datagram_for_empty_server() {
    let mut out = Vec::new();
    encode_players(0x80, &[], &mut out);
    assert!(out.is_empty());
    let mut snap = snapshot_12_1(Style::Ut2004);
    snap.players.clear();
    assert!(answer(&snap, &unhex("80000000 02")).is_empty());
    assert_eq!(answer(&snap, &unhex("80000000 03")).len(), 1);
}

#[test]
fn quirk_more_or_fewer_players_than_current() {
    let snap = snapshot_12_1(Style::Ut2004);
    let mut many = snap.players.clone();
    many.extend(snap.players.iter().cloned());
    many.extend(snap.players.iter().cloned());
    let si = server_info(Some(&snap.info), None, &many);
    assert_eq!((si.num_players, si.players.len()), (2, 3));
    let si = server_info(Some(&snap.info), None, &[]);
    assert_eq!((si.num_players, si.players.len()), (2, 0));
}

#[test]
fn quirk_ping_4ms_steps_and_zero() {
    let mut snap = snapshot_12_1(Style::Ut2004);
    let mut zero = snap.players.first().cloned().expect("one");
    zero.ping = 0;
    let mut max = zero.clone();
    max.ping = 1020;
    snap.players = vec![zero, max];
    let si = server_info(Some(&snap.info), None, &snap.players);
    let pings: Vec<Option<u32>> = si.players.iter().map(|p| p.ping_ms).collect();
    assert_eq!(pings, vec![Some(0), Some(1020)]);
    // A ping-0 record is an ordinary player, not a bot.
    assert_eq!(si.players.first().and_then(|p| p.spectator), None);
}

#[test]
fn quirk_player_num_zero_is_ordinary() {
    let bytes = unhex("8000000002 00000000 0454656100 00000000 05000000 00000000");
    let p = PlayersReply::decode(&bytes).expect("valid");
    let si = server_info(None, None, p.players());
    let player = si.players.first().expect("listed");
    assert_eq!(player.name.text, "Tea");
    assert_eq!(
        player.raw.first(),
        Some(&("player_num".to_owned(), RawValue::Int(0)))
    );
}

#[test]
fn quirk_stats_id_team_bits_only() {
    let cases = [
        (0u32, None),
        (TEAM_RED_BIT, Some(0)),
        (TEAM_BLUE_BIT, Some(1)),
        (TEAM_RED_BIT | 0x0000_1234, Some(0)),
        (TEAM_BLUE_BIT | 0x8000_0001, Some(1)),
        (0x1fff_ffff, None),
    ];
    for (stats_id, team) in cases {
        let rec = PlayerRecord {
            stats_id,
            ..PlayerRecord::default()
        };
        assert_eq!(rec.team(), team, "{stats_id:#x}");
    }
    assert_eq!(PlayerRecord::stats_id_for_team(Some(1)), TEAM_BLUE_BIT);
}

#[test]
fn quirk_negative_scores() {
    let bytes = unhex("8000000002 01000000 0258 00 04000000 f6ffffff 00000000");
    let p = PlayersReply::decode(&bytes).expect("valid");
    assert_eq!(p.players().first().map(|r| r.score), Some(-10));
    assert_eq!(
        server_info(None, None, p.players())
            .players
            .first()
            .and_then(|p| p.score),
        Some(-10)
    );
}

#[test]
fn quirk_short_and_foreign_datagrams_ignored() {
    assert_eq!(
        Reply::decode(&[0x80, 0, 0, 0]),
        Err(DecodeError::Truncated("reply header"))
    );
    assert!(matches!(
        Reply::decode(&[0x77, 0, 0, 0, 0x11, 0]),
        Ok(Reply::Unknown { kind: 0x11, .. })
    ));
    let t0 = Instant::now();
    let cfg = Unreal2Config {
        query: QueryConfig {
            attempt_timeout: Duration::from_millis(500),
            retries: 0,
        },
        ..Unreal2Config::default()
    };
    let mut q = Unreal2Query::new(target(), cfg);
    let mut buf = Vec::new();
    while q.poll_transmit(t0, &mut buf).is_some() {
        buf.clear();
    }
    q.handle_datagram(t0, target(), &[0x80, 0, 0]);
    q.handle_datagram(t0, target(), &[0x77, 0, 0, 0, 0x10]);
    q.handle_datagram(t0, target(), &[0x80, 0, 0, 0, 0x04, 0x50]);
    q.handle_datagram(
        t0,
        "192.0.2.2:7778".parse().expect("addr"),
        &unhex(INFO_12_1),
    );
    q.handle_timeout(t0 + Duration::from_millis(500));
    assert!(matches!(
        q.poll_event(),
        Some(Event::Failed(QueryError::Decode(_)))
    ));
}

#[test]
fn quirk_large_datagram_over_450() {
    // One long UTF-16 name pushes a datagram far past 450 bytes; no record is split.
    let big = PlayerRecord {
        num: 1,
        name: s(&"Ж".repeat(400)),
        ..PlayerRecord::default()
    };
    let small = PlayerRecord {
        num: 2,
        name: s("b"),
        ..PlayerRecord::default()
    };
    let mut dgs = Vec::new();
    encode_players(0x80, &[small.clone(), big.clone(), small.clone()], &mut dgs);
    let lens: Vec<usize> = dgs.iter().map(Vec::len).collect();
    assert_eq!(lens.len(), 2);
    assert!(lens.first().is_some_and(|&l| l > 800), "{lens:?}");
    let back: Vec<PlayerRecord> = dgs
        .iter()
        .flat_map(|d| PlayersReply::decode(d).expect("valid").into_players())
        .collect();
    assert_eq!(back, vec![small.clone(), big, small]);
    assert_eq!(SPLIT_THRESHOLD, 450);
}

#[test]
fn quirk_stale_data_is_reported_as_sent() {
    // The native reply comes from a cache up to 60 s old (§10): the machine reports exactly
    // what was sent and measures ping on the 0x00 exchange only; freshness is the merge's job.
    let mut snap = snapshot_12_1(Style::Ut2004);
    snap.players.clear(); // the cache still says 2 players but lists none
    let t0 = Instant::now();
    let mut q = Unreal2Query::new(target(), Unreal2Config::default());
    run_query(&mut q, &snap, t0, Duration::from_millis(8));
    q.handle_timeout(t0 + Duration::from_millis(308));
    q.handle_timeout(t0 + Duration::from_secs(2));
    let mut buf = Vec::new();
    while q
        .poll_transmit(t0 + Duration::from_secs(2), &mut buf)
        .is_some()
    {
        buf.clear();
    }
    q.handle_timeout(t0 + Duration::from_secs(4));
    let Some(Event::Done(si)) = q.poll_event() else {
        panic!("expected a result");
    };
    assert_eq!(si.num_players, 2);
    assert!(si.players.is_empty());
    assert_eq!(si.ping, Some(Duration::from_millis(8)));
    assert_eq!(
        si.partial.map(|p| p.reason),
        Some("no players reply".to_owned())
    );
}

/// Seed 002's server-properties query, `{0x78, 0x00, 0x00, 0x00, 0x01}` (the UT2003 demo's
/// header, command 1): decoded as a rules request and answered with the rules.
#[test]
fn seed_002_properties_request_bytes() {
    let request = [0x78, 0x00, 0x00, 0x00, 0x01];
    assert_eq!(
        Request::decode(&request).map(|r| r.command),
        Ok(Command::Rules)
    );
    let snap = snapshot_12_1(Style::Ut2004);
    assert_eq!(answer(&snap, &request), vec![unhex(RULES_12_1)]);
}
