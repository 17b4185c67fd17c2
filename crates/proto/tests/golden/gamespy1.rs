//! Golden tests for gamespy1: every vector of `docs/protocols/gamespy1.md` (§7.5 reassembly,
//! §8.4 tokenizer, §11 hex examples), the fixtures in `tests/fixtures/gamespy1/`, the stock
//! reply styles byte for byte, and one test per quirk of §12.

use muster_proto::gamespy1::map::to_server_info;
use muster_proto::gamespy1::packet::{Pair, QueryId, ReplyDatagram, Request, RequestKind};
use muster_proto::gamespy1::reassembly::{Outcome, PartialReason, Push, Reassembler};
use muster_proto::gamespy1::reply::{
    PlayerRecord, ReplyContent, ReplyStyle, encode_reply, serious_sam_query_id,
};
use muster_proto::gamespy1::tokenizer::tokenize;
use muster_proto::gamespy1::{MAX_REPLY_DATAGRAMS, decode_text};
use muster_proto::{DecodeError, ServerInfo};

use crate::util::{fixture, unhex};

// ---------------------------------------------------------------------------------------------
// helpers

fn gs(name: &str) -> Vec<u8> {
    fixture(&format!("gamespy1/{name}"))
}

/// Feed `datagrams` in order; return the reassembler and what each push said.
fn reassemble(kind: RequestKind, datagrams: &[&[u8]]) -> (Reassembler, Vec<Push>) {
    let mut r = Reassembler::new(&kind);
    let pushes = datagrams.iter().map(|d| r.push(d)).collect();
    (r, pushes)
}

/// The index (1-based) of the push that completed the reply, if any.
fn completed_after(pushes: &[Push]) -> Option<usize> {
    pushes
        .iter()
        .position(|p| *p == Push::Finished(Outcome::Complete))
        .map(|i| i + 1)
}

fn kv(pairs: &[Pair]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|p| {
            (
                String::from_utf8_lossy(p.key()).into_owned(),
                String::from_utf8_lossy(p.value()).into_owned(),
            )
        })
        .collect()
}

fn owned(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<Pair> {
    list.iter()
        .map(|(k, v)| Pair::new(*k, v).unwrap())
        .collect()
}

fn tokens(input: &[u8]) -> Vec<(String, String)> {
    tokenize(input)
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

/// Reassemble a `\status\` reply from fixtures in the given order and map it.
fn status_info(names: &[&str]) -> ServerInfo {
    let data: Vec<Vec<u8>> = names.iter().map(|n| gs(n)).collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let (r, pushes) = reassemble(RequestKind::Status, &refs);
    assert_eq!(completed_after(&pushes), Some(names.len()), "{names:?}");
    to_server_info(&r.pairs())
}

/// name, score, ping, team, raw fields.
type PlayerSummary = (String, Option<i64>, Option<u32>, Option<i32>, Vec<String>);

/// A readable view of a [`ServerInfo`] for snapshots: `Text` prints as `text | plain | raw hex`
/// (its derived `Debug` lists raw bytes one per line), per-player raw fields as `k=v`.
#[derive(Debug)]
#[allow(dead_code)]
struct Summary {
    name: String,
    map: String,
    game_type: String,
    version: String,
    password: Option<bool>,
    num_players: u32,
    max_players: u32,
    players: Vec<PlayerSummary>,
    rules: Vec<String>,
    raw_keys: Vec<String>,
    partial: Option<String>,
}

fn show(t: &muster_proto::Text) -> String {
    if t.text == t.plain {
        format!("{:?} [{}]", t.text, muster_proto::wire::to_hex(&t.raw))
    } else {
        format!(
            "{:?} plain {:?} [{}]",
            t.text,
            t.plain,
            muster_proto::wire::to_hex(&t.raw)
        )
    }
}

fn raw_text(v: &muster_proto::RawValue) -> String {
    match v {
        muster_proto::RawValue::Text(t) => t.text.clone(),
        other => format!("{other:?}"),
    }
}

fn summary(info: &ServerInfo) -> Summary {
    Summary {
        name: show(&info.name),
        map: show(&info.map),
        game_type: show(&info.game_type),
        version: show(&info.version),
        password: info.password,
        num_players: info.num_players,
        max_players: info.max_players,
        players: info
            .players
            .iter()
            .map(|p| {
                (
                    show(&p.name),
                    p.score,
                    p.ping_ms,
                    p.team,
                    p.raw
                        .iter()
                        .map(|(k, v)| format!("{k}={}", raw_text(v)))
                        .collect(),
                )
            })
            .collect(),
        rules: info
            .rules
            .iter()
            .map(|r| format!("{}={}", r.key.text, show(&r.value)))
            .collect(),
        raw_keys: info.raw.iter().map(|(k, _)| k.clone()).collect(),
        partial: info.partial.as_ref().map(|p| p.reason.clone()),
    }
}

// ---------------------------------------------------------------------------------------------
// §8.4 tokenizer vectors

#[test]
fn tokenizer_t1_keen() {
    assert_eq!(
        tokens(b"\\player_0\\Kee\\/n\\frags_0\\5\\ping_0\\40\\final\\\\queryid\\333.1"),
        owned(&[
            ("player_0", "Kee\\/n"),
            ("frags_0", "5"),
            ("ping_0", "40"),
            ("final", ""),
            ("queryid", "333.1")
        ])
    );
}

#[test]
fn tokenizer_t2_key() {
    assert_eq!(
        tokens(b"\\player_0\\Ke\\y\\frags_0\\3\\ping_0\\70\\final\\\\queryid\\333.1"),
        owned(&[
            ("player_0", "Ke\\y"),
            ("frags_0", "3"),
            ("ping_0", "70"),
            ("final", ""),
            ("queryid", "333.1")
        ])
    );
}

#[test]
fn tokenizer_t3_double_backslash() {
    assert_eq!(
        tokens(b"\\player_0\\a\\\\b\\frags_0\\0\\ping_0\\12\\final\\\\queryid\\333.1"),
        owned(&[
            ("player_0", "a\\\\b"),
            ("frags_0", "0"),
            ("ping_0", "12"),
            ("final", ""),
            ("queryid", "333.1")
        ])
    );
}

#[test]
fn tokenizer_t4_empty_name() {
    assert_eq!(
        tokens(b"\\player_0\\\\frags_0\\0\\ping_0\\12"),
        owned(&[("player_0", ""), ("frags_0", "0"), ("ping_0", "12")])
    );
}

#[test]
fn tokenizer_t5_trailing_backslash_lost() {
    assert_eq!(
        tokens(b"\\player_0\\Kee\\\\frags_0\\1\\ping_0\\5"),
        owned(&[("player_0", "Kee"), ("frags_0", "1"), ("ping_0", "5")])
    );
}

#[test]
fn tokenizer_t6_known_key_in_name_limitation() {
    assert_eq!(
        tokens(b"\\player_0\\A\\frags_0\\frags_0\\3"),
        owned(&[("player_0", "A"), ("frags_0", "frags_0\\3")])
    );
}

#[test]
fn tokenizer_t7_non_letter_after_backslash() {
    assert_eq!(
        tokens(b"\\hostname\\My\\1st Server\\mapname\\DM-Deck16"),
        owned(&[("hostname", "My\\1st Server"), ("mapname", "DM-Deck16")])
    );
}

#[test]
fn tokenizer_t8_letter_after_backslash_limitation() {
    assert_eq!(
        tokens(b"\\hostname\\Bob\\s Server\\mapname\\DM-Deck16"),
        owned(&[
            ("hostname", "Bob"),
            ("s Server", "mapname"),
            ("DM-Deck16", "")
        ])
    );
}

#[test]
fn tokenizer_t9_basic_secure() {
    assert_eq!(
        tokens(b"\\basic\\\\secure\\ABCDEF"),
        owned(&[("basic", ""), ("secure", "ABCDEF")])
    );
}

#[test]
fn tokenizer_t10_final_last() {
    assert_eq!(
        tokens(b"\\hostname\\X\\queryid\\41.1\\final\\"),
        owned(&[("hostname", "X"), ("queryid", "41.1"), ("final", "")])
    );
}

#[test]
fn tokenizer_t11_odd_trailing_key() {
    assert_eq!(
        tokens(b"\\heartbeat\\25601\\gamename\\serioussamse\\statechanged"),
        owned(&[
            ("heartbeat", "25601"),
            ("gamename", "serioussamse"),
            ("statechanged", "")
        ])
    );
}

#[test]
fn tokenizer_t12_empty_value() {
    assert_eq!(
        tokens(b"\\activemod\\\\numplayers\\0"),
        owned(&[("activemod", ""), ("numplayers", "0")])
    );
}

#[test]
fn tokenizer_t13_final_then_queryid() {
    assert_eq!(
        tokens(b"\\final\\\\queryid\\12.0"),
        owned(&[("final", ""), ("queryid", "12.0")])
    );
}

// ---------------------------------------------------------------------------------------------
// §7.5 reassembly vectors

const R1_A: &[u8] = b"\\gamename\\ut\\gamever\\451\\hostname\\A\\queryid\\41.1";
const R1_B: &[u8] = b"\\player_0\\Bob\\frags_0\\3\\queryid\\41.2\\final\\";
const R5_HEAD: &[u8] = b"\\gamename\\serioussamse\\hostname\\S\\numplayers\\2\\player_0\\^oSam^r\\frags_0\\3\\ping_0\\40";
const R5_TAIL: &[u8] = b"\\player_1\\^oKenny^r\\frags_1\\1\\ping_1\\70\\final\\\\queryid\\333.1";

fn r1_pairs() -> Vec<(String, String)> {
    owned(&[
        ("gamename", "ut"),
        ("gamever", "451"),
        ("hostname", "A"),
        ("player_0", "Bob"),
        ("frags_0", "3"),
    ])
}

#[test]
fn reassembly_r1_in_order() {
    let (r, p) = reassemble(RequestKind::Status, &[R1_A, R1_B]);
    assert_eq!(p, [Push::Accepted, Push::Finished(Outcome::Complete)]);
    assert_eq!(kv(&r.pairs()), r1_pairs());
}

#[test]
fn reassembly_r2_reverse() {
    let (r, p) = reassemble(RequestKind::Status, &[R1_B, R1_A]);
    assert_eq!(completed_after(&p), Some(2));
    assert_eq!(kv(&r.pairs()), r1_pairs());
}

#[test]
fn reassembly_r3_style_a_out_of_order() {
    let d: Vec<Vec<u8>> = (1..=4)
        .map(|n| gs(&format!("unreal-227-status-{n}.bin")))
        .collect();
    let (r, p) = reassemble(RequestKind::Status, &[&d[3], &d[0], &d[2], &d[1]]);
    assert_eq!(completed_after(&p), Some(4));
    let (in_order, _) = reassemble(RequestKind::Status, &[&d[0], &d[1], &d[2], &d[3]]);
    assert_eq!(r.pairs(), in_order.pairs());
    let keys = kv(&r.pairs());
    assert_eq!(keys.first().unwrap().0, "gamename");
    assert_eq!(keys.last().unwrap().0, "mesh_0");
}

#[test]
fn reassembly_r4_style_a_empty_players() {
    let (r, p) = reassemble(RequestKind::Players, &[b"\\final\\\\queryid\\12.0"]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    assert!(r.pairs().is_empty());
}

#[test]
fn reassembly_r5_style_c_head_then_tail() {
    let (r, p) = reassemble(RequestKind::Status, &[R5_HEAD, R5_TAIL]);
    assert_eq!(completed_after(&p), Some(2));
    assert_eq!(kv(&r.pairs()).first().unwrap().0, "gamename");
}

#[test]
fn reassembly_r6_style_c_tail_first_waits_for_head() {
    let (r, p) = reassemble(RequestKind::Status, &[R5_TAIL, R5_HEAD]);
    assert_eq!(p, [Push::Accepted, Push::Finished(Outcome::Complete)]);
    // Untagged parts come first, so the head leads again.
    assert_eq!(kv(&r.pairs()).first().unwrap().0, "gamename");
}

const R16_MIDDLE: &[u8] = b"\\player_1\\^oMax^r\\frags_1\\2\\ping_1\\55";
const R16_TAIL: &[u8] = b"\\player_2\\^oKenny^r\\frags_2\\1\\ping_2\\70\\final\\\\queryid\\333.1";

#[test]
fn reassembly_r16_style_c_three_parts_tail_before_middle_completes_early() {
    // Nothing in a style C reply counts its untagged continuations: once the head and the
    // tagged last datagram are in, the reply is complete, and a continuation that the
    // network delayed past both comes too late (docs/protocols/gamespy1.md §7.3).
    let (r, p) = reassemble(RequestKind::Status, &[R5_HEAD, R16_TAIL, R16_MIDDLE]);
    assert_eq!(
        p,
        [
            Push::Accepted,
            Push::Finished(Outcome::Complete),
            Push::AlreadyFinished
        ]
    );
    let keys: Vec<String> = kv(&r.pairs()).into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&"player_2".to_owned()));
    assert!(!keys.contains(&"player_1".to_owned()));
}

#[test]
fn reassembly_r17_style_c_three_parts_head_last_gets_everything() {
    // The tail and a continuation came first: the reply waits for the head, and everything
    // that arrived is merged, untagged parts in arrival order, then the tail.
    let (r, p) = reassemble(RequestKind::Status, &[R16_TAIL, R16_MIDDLE, R5_HEAD]);
    assert_eq!(completed_after(&p), Some(3));
    let keys: Vec<String> = kv(&r.pairs()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys.first().map(String::as_str), Some("player_1"));
    for k in ["gamename", "player_0", "player_1", "player_2"] {
        assert!(keys.contains(&k.to_owned()), "{k} missing");
    }
}

#[test]
fn reassembly_r7_style_c_tail_only_is_partial() {
    let (mut r, p) = reassemble(RequestKind::Status, &[R5_TAIL]);
    assert_eq!(p, [Push::Accepted]);
    assert_eq!(
        r.finish(PartialReason::Deadline),
        Outcome::Partial(PartialReason::Deadline)
    );
    assert_eq!(
        kv(&r.pairs()),
        owned(&[
            ("player_1", "^oKenny^r"),
            ("frags_1", "1"),
            ("ping_1", "70")
        ])
    );
}

#[test]
fn reassembly_r8_duplicate_ignored() {
    let (r, p) = reassemble(RequestKind::Status, &[R1_A, R1_A, R1_B]);
    assert_eq!(
        p,
        [
            Push::Accepted,
            Push::Ignored,
            Push::Finished(Outcome::Complete)
        ]
    );
    assert_eq!(kv(&r.pairs()), r1_pairs());
}

#[test]
fn reassembly_r9_other_query_id_ignored() {
    let (r, p) = reassemble(
        RequestKind::Status,
        &[R1_A, b"\\hostname\\old\\queryid\\40.1\\final\\", R1_B],
    );
    assert_eq!(p[1], Push::Ignored);
    assert_eq!(completed_after(&p), Some(3));
    assert_eq!(kv(&r.pairs()), r1_pairs());
}

#[test]
fn reassembly_r10_zero_datagrams_1400_hit_byte_cap() {
    let zeros = vec![0u8; 1400];
    let mut r = Reassembler::new(&RequestKind::Status);
    let mut stopped_at = None;
    for n in 1..=100 {
        if let Push::Finished(outcome) = r.push(&zeros) {
            assert_eq!(outcome, Outcome::Partial(PartialReason::ByteCap));
            stopped_at = Some(n);
            break;
        }
    }
    assert_eq!(stopped_at, Some(47));
    assert_eq!(r.datagrams(), 46);
    assert_eq!(r.malformed(), 46);
    assert_eq!(r.push(&zeros), Push::AlreadyFinished);
}

#[test]
fn reassembly_r11_zero_datagrams_512_hit_datagram_cap() {
    let zeros = vec![0u8; 512];
    let mut r = Reassembler::new(&RequestKind::Status);
    let mut stopped_at = None;
    for n in 1..=100 {
        if let Push::Finished(outcome) = r.push(&zeros) {
            assert_eq!(outcome, Outcome::Partial(PartialReason::DatagramCap));
            stopped_at = Some(n);
            break;
        }
    }
    assert_eq!(stopped_at, Some(MAX_REPLY_DATAGRAMS));
    assert_eq!(r.malformed(), 64);
}

#[test]
fn reassembly_r12_333networks_three_ids_in_one_datagram() {
    let d = gs("333networks-qt5-status.bin");
    let (r, p) = reassemble(RequestKind::Status, &[&d]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    assert_eq!(
        kv(&r.pairs()),
        owned(&[
            ("gamename", "333networks"),
            ("gamever", "Qt-0.28"),
            ("location", "0"),
            ("hostname", "M"),
            ("mutators", "x")
        ])
    );
}

#[test]
fn reassembly_r13_lone_queryid_datagram() {
    let (r, p) = reassemble(
        RequestKind::Rules,
        &[b"\\queryid\\5.1", b"\\bigrule\\v\\queryid\\5.2\\final\\"],
    );
    assert_eq!(p, [Push::Accepted, Push::Finished(Outcome::Complete)]);
    assert_eq!(kv(&r.pairs()), owned(&[("bigrule", "v")]));
}

#[test]
fn reassembly_r14_no_queryid_at_all() {
    let (r, p) = reassemble(RequestKind::Status, &[b"\\hostname\\X\\final\\"]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    assert_eq!(kv(&r.pairs()), owned(&[("hostname", "X")]));
}

#[test]
fn reassembly_r15_empty_datagram_then_r1() {
    let (r, p) = reassemble(RequestKind::Status, &[b"", R1_A, R1_B]);
    assert_eq!(
        p[0],
        Push::Malformed(DecodeError::Truncated("gamespy1 reply"))
    );
    assert_eq!(completed_after(&p), Some(3));
    assert_eq!(r.malformed(), 1);
}

// ---------------------------------------------------------------------------------------------
// §11 hex examples

#[test]
fn hex_q1_status_request() {
    let mut out = Vec::new();
    Request::status().encode(&mut out);
    assert_eq!(out, unhex("5c 73 74 61 74 75 73 5c"));
    assert_eq!(Request::decode(&out), Ok(Request::status()));
}

#[test]
fn hex_q2_xserverquery_request() {
    let bytes = b"\\status\\xserverquery";
    assert_eq!(bytes.len(), 20);
    let r = Request::decode(bytes).unwrap();
    assert_eq!(r.items()[0].kind(), &RequestKind::Status);
    assert_eq!(r.items()[0].value(), Some(&b"xserverquery"[..]));
    let mut out = Vec::new();
    r.encode(&mut out);
    assert_eq!(out, bytes);
}

/// The example Serious Sam server of §9.2 as a responder would describe it.
fn serious_sam_content(players: Vec<PlayerRecord>) -> ReplyContent {
    let n = players.len().to_string();
    let head = pairs(&[
        ("gamename", "serioussamse"),
        ("gamever", "1.10"),
        ("location", "Heartland"),
        ("hostname", "Awesome Server"),
        ("hostport", "25600"),
        ("mapname", "Yodeller"),
        ("gametype", "Fragmatch"),
        ("activemod", ""),
        ("numplayers", &n),
        ("maxplayers", "16"),
        ("gamemode", "openplaying"),
        ("difficulty", "Normal"),
        ("friendlyfire", "0"),
        ("weaponsstay", "1"),
        ("ammosstay", "0"),
        ("healthandarmorstays", "0"),
        ("allowhealth", "1"),
        ("allowarmor", "1"),
        ("infinitearmor", "0"),
        ("respawninplace", "1"),
        ("password", "0"),
        ("vipplayers", "1"),
    ]);
    ReplyContent {
        basic: pairs(&[
            ("gamename", "serioussamse"),
            ("gamever", "1.10"),
            ("location", "EU"),
        ]),
        info: pairs(&[
            ("hostname", "Awesome Server"),
            ("hostport", "25600"),
            ("mapname", "Yodeller"),
            ("gametype", "Fragmatch"),
            ("numplayers", "0"),
            ("maxplayers", "16"),
            ("gamemode", "openplaying"),
        ]),
        rules: Vec::new(),
        status_head: Some(head),
        players,
    }
}

fn serious_sam_reply(content: &ReplyContent, kind: RequestKind) -> Vec<Vec<u8>> {
    let x = serious_sam_query_id(&kind).unwrap();
    let sections = content.sections(&kind, ReplyStyle::SeriousSam).unwrap();
    encode_reply(ReplyStyle::SeriousSam, x, &sections)
}

fn player(name: &str, frags: i64, ping: u32) -> PlayerRecord {
    PlayerRecord {
        name: name.as_bytes().to_vec(),
        frags,
        ping,
        ..PlayerRecord::default()
    }
}

#[test]
fn hex_q3_serious_sam_status_no_players_byte_exact() {
    let content = serious_sam_content(vec![]);
    let out = serious_sam_reply(&content, RequestKind::Status);
    let want = gs("serioussam-1.10-status-noplayers.bin");
    assert_eq!(want.len(), 374);
    assert_eq!(out, [want]);
}

#[test]
fn serious_sam_status_two_players_byte_exact() {
    let content = serious_sam_content(vec![player("Sam", 3, 40), player("Kenny", 1, 70)]);
    let out = serious_sam_reply(&content, RequestKind::Status);
    let want = gs("serioussam-1.10-status-two-players.bin");
    assert_eq!(want.len(), 450);
    assert_eq!(out, [want]);
}

#[test]
fn hex_q4_serious_sam_info_basic_players_byte_exact() {
    let content = serious_sam_content(vec![]);
    assert_eq!(
        serious_sam_reply(&content, RequestKind::Info),
        [gs("serioussam-1.10-info.bin")]
    );
    assert_eq!(
        serious_sam_reply(&content, RequestKind::Basic),
        [gs("serioussam-1.10-basic.bin")]
    );
    assert_eq!(
        serious_sam_reply(&content, RequestKind::Players),
        [gs("serioussam-1.10-players-empty.bin")]
    );
    assert_eq!(
        content.sections(&RequestKind::Rules, ReplyStyle::SeriousSam),
        None
    );
}

fn q5_players() -> Vec<PlayerRecord> {
    (0u8..16)
        .map(|i| {
            let name = vec![b'A' + i; 149];
            PlayerRecord {
                name,
                frags: i64::from(i),
                ping: 40 + u32::from(i),
                ..PlayerRecord::default()
            }
        })
        .collect()
}

#[test]
fn hex_q5_serious_sam_split_status_byte_exact_and_reassembled() {
    let content = serious_sam_content(q5_players());
    let out = serious_sam_reply(&content, RequestKind::Status);
    let d1 = gs("serioussam-1.10-status-two-datagrams-1.bin");
    let d2 = gs("serioussam-1.10-status-two-datagrams-2.bin");
    assert_eq!(out, [d1.clone(), d2.clone()]);
    assert!(!d1.windows(7).any(|w| w == b"queryid"));
    assert!(d2.starts_with(b"\\player_"));
    assert!(d2.ends_with(b"\\final\\\\queryid\\333.1"));
    let (r, p) = reassemble(RequestKind::Status, &[&d1, &d2]);
    assert_eq!(completed_after(&p), Some(2));
    let info = to_server_info(&r.pairs());
    assert_eq!(info.players.len(), 16);
    assert_eq!(info.players[15].ping_ms, Some(55));
    assert_eq!(info.players[0].name.plain, "A".repeat(149));
}

#[test]
fn hex_q6_ut99_style_b_byte_exact() {
    let want = gs("ut99-451-status-keen.bin");
    let content = ReplyContent {
        basic: pairs(&[
            ("gamename", "ut"),
            ("gamever", "451"),
            ("minnetver", "432"),
            ("location", "0"),
        ]),
        info: pairs(&[
            ("hostname", "Test UT Server"),
            ("hostport", "7777"),
            ("maptitle", "Deck16"),
            ("mapname", "DM-Deck16"),
            ("gametype", "DeathMatchPlus"),
            ("numplayers", "2"),
            ("maxplayers", "16"),
            ("gamemode", "openplaying"),
            ("gamever", "451"),
            ("minnetver", "432"),
        ]),
        rules: pairs(&[
            ("timelimit", "20"),
            ("fraglimit", "30"),
            ("AdminName", "Bob"),
            ("AdminEMail", "bob@example.org"),
        ]),
        status_head: None,
        players: vec![
            PlayerRecord {
                team: Some(b"255".to_vec()),
                ..player("Kee/n", 5, 40)
            },
            PlayerRecord {
                team: Some(b"255".to_vec()),
                ..player("Alpha", 2, 60)
            },
        ],
    };
    let sections = content
        .sections(&RequestKind::Status, ReplyStyle::Packed)
        .unwrap();
    let out = encode_reply(ReplyStyle::Packed, 41, &sections);
    // Muster removes `\` from values (spec §13.1), so `Kee\/n` goes out as `Kee/n`, as a
    // v469 server sends it; everything else equals the v451 example byte for byte.
    let want_clean: Vec<u8> = String::from_utf8(want.clone())
        .unwrap()
        .replace("Kee\\/n", "Kee/n")
        .into_bytes();
    assert_eq!(out, [want_clean]);

    // And the v451 original decodes with the name intact.
    let info = status_info(&["ut99-451-status-keen.bin"]);
    assert_eq!(info.players[0].name.text, "Kee\\/n");
    assert_eq!(info.players[0].team, None);
}

#[test]
fn hex_q7_unreal227_style_a_byte_exact() {
    let want: Vec<Vec<u8>> = (1..=4)
        .map(|n| gs(&format!("unreal-227-status-{n}.bin")))
        .collect();
    let content = ReplyContent {
        basic: pairs(&[
            ("gamename", "unreal"),
            ("gamever", "227k"),
            ("gamesubver", "11"),
            ("mingamever", "224"),
            ("location", "0"),
        ]),
        info: pairs(&[
            ("hostname", "My Server"),
            ("shortname", "My"),
            ("hostport", "7777"),
            ("mapname", "DmDeck16"),
            ("gametype", "DeathMatch"),
            ("numplayers", "1"),
            ("maxplayers", "16"),
            ("gamemode", "openplaying"),
            ("gamever", "227k"),
            ("minnetver", "224"),
        ]),
        rules: pairs(&[
            ("timelimit", "0"),
            ("fraglimit", "30"),
            ("Mutator", "Relics"),
            ("Mutator", "InstaGib"),
            ("AdminName", "Ann"),
            ("AdminEMail", "ann@example.org"),
            ("mapfilename", "DmDeck16"),
            ("OS", "Linux"),
        ]),
        status_head: None,
        players: vec![PlayerRecord {
            team: Some(b"255".to_vec()),
            extra: vec![
                ("skin".into(), b"Soldier".to_vec()),
                ("mesh".into(), b"Male Soldier".to_vec()),
            ],
            ..player("Bob", 3, 50)
        }],
    };
    let sections = content
        .sections(&RequestKind::Status, ReplyStyle::Unreal227)
        .unwrap();
    assert_eq!(encode_reply(ReplyStyle::Unreal227, 12, &sections), want);
}

#[test]
fn hex_q8_333networks_master_reply() {
    let d = gs("333networks-qt5-status.bin");
    let dg = ReplyDatagram::decode(&d).unwrap();
    assert_eq!(
        dg.query_ids().unwrap(),
        [
            QueryId { x: 7, y: 1 },
            QueryId { x: 7, y: 2 },
            QueryId { x: 7, y: 3 }
        ]
    );
    let mut out = Vec::new();
    dg.encode(&mut out);
    assert_eq!(out, d);
}

// ---------------------------------------------------------------------------------------------
// fixtures: decode, snapshot, re-encode

const ALL_FIXTURES: [&str; 17] = [
    "333networks-qt5-status.bin",
    "serioussam-1.10-basic.bin",
    "serioussam-1.10-info.bin",
    "serioussam-1.10-players-empty.bin",
    "serioussam-1.10-status-noplayers.bin",
    "serioussam-1.10-status-two-datagrams-1.bin",
    "serioussam-1.10-status-two-datagrams-2.bin",
    "serioussam-1.10-status-two-players.bin",
    "unreal-227-status-1.bin",
    "unreal-227-status-2.bin",
    "unreal-227-status-3.bin",
    "unreal-227-status-4.bin",
    "ut2003-1080-status-noplayers.bin",
    "ut2003demo-1077-status-1.bin",
    "ut2003demo-1077-status-2.bin",
    "ut2004-3369-status-latin1.bin",
    "ut99-451-status-keen.bin",
];

#[test]
fn every_fixture_decodes_and_reencodes_byte_for_byte() {
    for name in ALL_FIXTURES {
        let bytes = gs(name);
        let dg = ReplyDatagram::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = Vec::new();
        dg.encode(&mut out);
        assert_eq!(out, bytes, "{name}");
        assert_eq!(ReplyDatagram::decode(&out), Ok(dg), "{name}");
    }
}

#[test]
fn snapshot_ut2003demo_status() {
    let info = status_info(&[
        "ut2003demo-1077-status-2.bin",
        "ut2003demo-1077-status-1.bin",
    ]);
    insta::assert_debug_snapshot!(summary(&info));
}

#[test]
fn snapshot_ut2003_status_no_players() {
    insta::assert_debug_snapshot!(summary(&status_info(&["ut2003-1080-status-noplayers.bin"])));
}

#[test]
fn snapshot_serioussam_status_two_players() {
    insta::assert_debug_snapshot!(summary(&status_info(&[
        "serioussam-1.10-status-two-players.bin"
    ])));
}

#[test]
fn snapshot_unreal227_status() {
    insta::assert_debug_snapshot!(summary(&status_info(&[
        "unreal-227-status-1.bin",
        "unreal-227-status-2.bin",
        "unreal-227-status-3.bin",
        "unreal-227-status-4.bin",
    ])));
}

#[test]
fn snapshot_ut2004_latin1_status() {
    insta::assert_debug_snapshot!(summary(&status_info(&["ut2004-3369-status-latin1.bin"])));
}

#[test]
fn snapshot_ut99_keen_datagram() {
    let dg = ReplyDatagram::decode(&gs("ut99-451-status-keen.bin")).unwrap();
    insta::assert_debug_snapshot!(kv(&dg.pairs));
}

// ---------------------------------------------------------------------------------------------
// quirks (§12 and the assignment's named ones)

#[test]
fn quirk_reverse_order_reassembly() {
    let forward = status_info(&[
        "ut2003demo-1077-status-1.bin",
        "ut2003demo-1077-status-2.bin",
    ]);
    let reverse = status_info(&[
        "ut2003demo-1077-status-2.bin",
        "ut2003demo-1077-status-1.bin",
    ]);
    assert_eq!(forward, reverse);
    assert_eq!(forward.players.len(), 11);
    assert_eq!(forward.num_players, 11);
}

#[test]
fn quirk_windows1252_latin1_names() {
    let info = status_info(&["ut2004-3369-status-latin1.bin"]);
    assert_eq!(info.players[0].name.text, "Jürgen");
    assert_eq!(info.players[1].name.text, "€uro®");
    assert_eq!(info.players[1].name.raw, b"\x80uro\xae");
    assert!(!info.players[1].name.lossy);
    // The colour code stays in `text`, is gone from `plain`; a0 is a no-break space.
    assert_eq!(info.name.text, "\u{1b}\u{ff}\u{1}\u{1}Café \u{a0}Server");
    assert_eq!(info.name.plain, "Café \u{a0}Server");
}

#[test]
fn quirk_backslash_in_name_keen() {
    let info = status_info(&[
        "ut2003demo-1077-status-1.bin",
        "ut2003demo-1077-status-2.bin",
    ]);
    let keen = &info.players[4];
    assert_eq!(keen.name.text, "Kee\\/n");
    assert_eq!(keen.score, Some(38));
    assert_eq!(keen.ping_ms, Some(117));
    assert_eq!(info.players[5].name.text, "Rekklih");
}

#[test]
fn quirk_all_zeros_server() {
    for size in [1, 512, 1400] {
        let zeros = vec![0u8; size];
        let mut r = Reassembler::new(&RequestKind::Status);
        let finished = (0..200).find_map(|_| match r.push(&zeros) {
            Push::Finished(o) => Some(o),
            Push::Malformed(_) => None,
            other => panic!("{other:?}"),
        });
        assert!(matches!(finished, Some(Outcome::Partial(_))), "{size}");
        assert!(r.pairs().is_empty());
        assert_eq!(r.accepted(), 0);
    }
}

#[test]
fn quirk_01_final_before_or_after_queryid() {
    for d in [
        &b"\\a\\1\\final\\\\queryid\\1.1"[..],
        b"\\a\\1\\queryid\\1.1\\final\\",
        b"\\a\\1\\queryid\\1.1\\final\\yes",
    ] {
        let (_, p) = reassemble(RequestKind::Status, &[d]);
        assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    }
}

#[test]
fn quirk_02_untagged_continuation_and_tail_first() {
    let d1 = gs("serioussam-1.10-status-two-datagrams-1.bin");
    let d2 = gs("serioussam-1.10-status-two-datagrams-2.bin");
    let (r, p) = reassemble(RequestKind::Status, &[&d2, &d1]);
    assert_eq!(p, [Push::Accepted, Push::Finished(Outcome::Complete)]);
    let info = to_server_info(&r.pairs());
    assert_eq!(info.name.text, "Awesome Server");
    assert_eq!(info.players.len(), 16);
}

#[test]
fn quirk_03_y_zero_missing_y_several_ids() {
    let (_, p) = reassemble(RequestKind::Players, &[b"\\final\\\\queryid\\12.0"]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    let (_, p) = reassemble(
        RequestKind::Status,
        &[b"\\hostname\\x\\final\\\\queryid\\12"],
    );
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    let d = gs("333networks-qt5-status.bin");
    let (_, p) = reassemble(RequestKind::Status, &[&d]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
}

#[test]
fn quirk_04_stale_query_id_dropped() {
    let (r, p) = reassemble(
        RequestKind::Status,
        &[
            b"\\hostname\\new\\queryid\\1.1",
            b"\\hostname\\stale\\queryid\\100.2\\final\\",
            b"\\numplayers\\0\\queryid\\1.2\\final\\",
        ],
    );
    assert_eq!(p[1], Push::Ignored);
    assert_eq!(completed_after(&p), Some(3));
    assert_eq!(to_server_info(&r.pairs()).name.text, "new");
}

#[test]
fn quirk_05_lone_queryid_and_large_datagrams() {
    let mut big = b"\\bigrule\\".to_vec();
    big.extend(std::iter::repeat_n(b'v', 3000));
    big.extend_from_slice(b"\\queryid\\5.2\\final\\");
    let (r, p) = reassemble(RequestKind::Rules, &[&big, b"\\queryid\\5.1"]);
    assert_eq!(completed_after(&p), Some(2));
    assert_eq!(r.pairs()[0].value().len(), 3000);
}

#[test]
fn quirk_06_final_never_comes() {
    let (mut r, p) = reassemble(RequestKind::Status, &[R1_A]);
    assert_eq!(p, [Push::Accepted]);
    assert_eq!(
        r.finish(PartialReason::Idle),
        Outcome::Partial(PartialReason::Idle)
    );
}

#[test]
fn quirk_07_backslashes_in_values() {
    let info = status_info(&["ut99-451-status-keen.bin"]);
    assert_eq!(info.players[0].name.text, "Kee\\/n");
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\hostname\\My\\1st Server\\player_0\\^oKe\\y^r\\frags_0\\1\\final\\"],
    );
    let info = to_server_info(&r.pairs());
    assert_eq!(info.name.text, "My\\1st Server");
    assert_eq!(info.players[0].name.text, "^oKe\\y^r");
    assert_eq!(info.players[0].name.plain, "Ke\\y");
}

#[test]
fn quirk_08_zero_empty_non_backslash_and_trailing_nuls() {
    assert_eq!(
        ReplyDatagram::decode(&[0; 16]),
        Err(DecodeError::Truncated("gamespy1 reply"))
    );
    assert_eq!(
        ReplyDatagram::decode(b"hostname\\x"),
        Err(DecodeError::BadMagic("gamespy1 reply"))
    );
    let (r, p) = reassemble(RequestKind::Status, &[b"\\hostname\\X\\final\\\0\0\0"]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    assert_eq!(kv(&r.pairs()), owned(&[("hostname", "X")]));
}

#[test]
fn quirk_09_colour_codes_and_serious_sam_decorations() {
    let t = decode_text(b"^o^c00ff00Sam^r");
    assert_eq!(
        (t.text.as_str(), t.plain.as_str()),
        ("^o^c00ff00Sam^r", "Sam")
    );
    let t = decode_text(b"\x1b\xff\x01\x01Red");
    assert_eq!(t.plain, "Red");
}

#[test]
fn quirk_10_leading_spaces_and_junk_numbers() {
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\numplayers\\ 3x\\player_0\\A\\frags_0\\ -2\\ping_0\\ 50\\final\\"],
    );
    let info = to_server_info(&r.pairs());
    assert_eq!(info.num_players, 3);
    assert_eq!(info.players[0].score, Some(-2));
    assert_eq!(info.players[0].ping_ms, Some(50));
}

#[test]
fn quirk_11_team_numeric_none_or_name() {
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\player_0\\A\\team_0\\1\\player_1\\B\\team_1\\255\\player_2\\C\\team_2\\Red\\final\\"],
    );
    let info = to_server_info(&r.pairs());
    let teams: Vec<_> = info.players.iter().map(|p| p.team).collect();
    assert_eq!(teams, [Some(1), None, None]);
    assert!(info.players[2].raw.iter().any(|(k, _)| k == "team"));
}

#[test]
fn quirk_12_duplicate_keys() {
    let info = status_info(&[
        "unreal-227-status-1.bin",
        "unreal-227-status-2.bin",
        "unreal-227-status-3.bin",
        "unreal-227-status-4.bin",
    ]);
    assert_eq!(info.version.text, "227k");
    let mutators: Vec<_> = info
        .rules
        .iter()
        .filter(|r| r.key.text == "Mutator")
        .map(|r| r.value.text.as_str())
        .collect();
    assert_eq!(mutators, ["Relics", "InstaGib"]);
    let gamevers = info.raw.iter().filter(|(k, _)| k == "gamever").count();
    assert_eq!(gamevers, 2);
}

#[test]
fn quirk_13_mixed_key_case() {
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\HostName\\A\\MAXPLAYERS\\8\\Player_0\\x\\FRAGS_0\\2\\final\\"],
    );
    let info = to_server_info(&r.pairs());
    assert_eq!(info.name.text, "A");
    assert_eq!(info.max_players, 8);
    assert_eq!(info.players[0].score, Some(2));
}

#[test]
fn quirk_14_misspelled_serious_sam_keys_kept_as_rules() {
    let info = status_info(&["serioussam-1.10-status-noplayers.bin"]);
    let keys: Vec<_> = info.rules.iter().map(|r| r.key.text.as_str()).collect();
    assert!(keys.contains(&"ammosstay"));
    assert!(keys.contains(&"infinitearmor"));
}

#[test]
fn quirk_15_serious_sam_location_and_hostport_are_rules() {
    let info = status_info(&["serioussam-1.10-status-noplayers.bin"]);
    let rule = |k: &str| {
        info.rules
            .iter()
            .find(|r| r.key.text == k)
            .map(|r| r.value.text.clone())
    };
    assert_eq!(rule("location").as_deref(), Some("Heartland"));
    assert_eq!(rule("hostport").as_deref(), Some("25600"));
}

#[test]
fn quirk_16_header_counts_disagree_with_records() {
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\numplayers\\5\\player_0\\A\\player_3\\B\\final\\"],
    );
    let info = to_server_info(&r.pairs());
    assert_eq!(info.num_players, 5);
    assert_eq!(info.players.len(), 2);
}

#[test]
fn quirk_17_echo_answers_tokenize() {
    assert_eq!(
        tokens(b"\\echo_replay\\X\\final\\\\queryid\\3.1"),
        owned(&[("echo_replay", "X"), ("final", ""), ("queryid", "3.1")])
    );
    assert_eq!(tokens(b"\\ignoring\\X"), owned(&[("ignoring", "X")]));
}

#[test]
fn quirk_18_port_walking_is_the_callers_business() {
    // The query takes the address it is given; nothing derives game port + 10.
    use muster_proto::QueryMachine;
    use muster_proto::gamespy1::query::{StatusConfig, StatusQuery};
    let target: std::net::SocketAddr = "192.0.2.1:7789".parse().unwrap();
    let mut q = StatusQuery::new(target, StatusConfig::default());
    let mut buf = Vec::new();
    let t = q
        .poll_transmit(std::time::Instant::now(), &mut buf)
        .unwrap();
    assert_eq!(t.destination, target);
}

#[test]
fn ut2003_demo_splits_below_the_style_b_limit() {
    // The real UT2003 demo reply splits after player 8 at 769 bytes, well below the 1000-byte
    // rule of §5.2 that later builds follow: a real peer disagrees with the spec here, so the
    // decoder never relies on the split point.
    let d1 = gs("ut2003demo-1077-status-1.bin");
    assert_eq!(d1.len(), 769);
    assert!(d1.ends_with(b"\\queryid\\29.1"));
}

/// The players of seed 002's real UT2003 demo reply: name, frags, ping, team.
const SEED_002_PLAYERS: [(&str, i64, u32, i32); 11] = [
    ("Player", 1, 63, 0),
    ("Perdition", 0, 221, 1),
    ("Porter", 10, 143, 1),
    ("JoeDozer", 20, 289, 0),
    ("Kee\\/n", 38, 117, 0),
    ("Rekklih", 42, 166, 1),
    ("Hanover_Fist", 4, 196, 0),
    ("HELLAS-4774CK", 101, 107, 1),
    ("Psycho", 49, 105, 1),
    ("Levodopa", 45, 36, 0),
    ("Psy[Duck]", 49, 73, 0),
];

/// Seed 002's server as a [`muster_proto::respond::ServerState`].
fn seed_002_state() -> muster_proto::respond::ServerState {
    use muster_proto::respond::{PlayerState, ServerState};
    ServerState {
        name: "The Drunk Snipers UT2003 CTF Instagib (DEMO) #2".into(),
        map: "CTF-Citadel".into(),
        game_type: "xCTFGame".into(),
        game_port: 7777,
        max_players: 16,
        players: SEED_002_PLAYERS
            .iter()
            .map(|&(name, score, ping_ms, team)| PlayerState {
                name: name.into(),
                score,
                ping_ms,
                team: Some(team),
                ..PlayerState::default()
            })
            .collect(),
        rules: [
            ("maptitle", "Citadel"),
            ("AdminName", "Sirius"),
            ("AdminEMail", "sirius@drunksnipers.com"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
        ..ServerState::default()
    }
}

/// Seed 002's two datagrams as one text, their `\queryid\29.Y` and `\final\` taken off.
fn seed_002_text() -> Vec<u8> {
    let d1 = gs("ut2003demo-1077-status-1.bin");
    let d2 = gs("ut2003demo-1077-status-2.bin");
    let d1 = d1
        .strip_suffix(b"\\queryid\\29.1")
        .expect("29.1 ends datagram 1");
    let d2 = d2
        .strip_suffix(b"\\queryid\\29.2\\final\\")
        .expect("29.2 ends datagram 2");
    [d1, d2].concat()
}

/// Seed 002's real UT2003 demo reply, sent by the responder's `ut2003demo` profile: the same
/// bytes, `Kee\/n` with its backslash and the pings with their leading space. The one
/// difference is where the text is cut: the responder packs by the 1000-byte rule of spec
/// §5.2 (one datagram here), the demo cut after 756 bytes by a rule no source states
/// (`ut2003_demo_splits_below_the_style_b_limit`).
#[test]
fn seed_002_ut2003demo_profile_sends_the_seed_reply() {
    use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
    let mut r = GameSpyResponder::with_profile(Profile::Ut2003Demo);
    let out = r.answer(b"\\status\\", &seed_002_state());
    let mut want = seed_002_text();
    want.extend_from_slice(b"\\queryid\\1.1\\final\\");
    assert_eq!(out, [want.clone()], "{}", String::from_utf8_lossy(&out[0]));
    // Muster's own query reads it back, the backslash name included.
    let mut reassembler = Reassembler::new(&RequestKind::Status);
    assert_eq!(reassembler.push(&want), Push::Finished(Outcome::Complete));
    let info = to_server_info(&reassembler.pairs());
    assert_eq!(info.players[4].name.text, "Kee\\/n");
    // The stock `ut2003` profile (a patched retail server) strips the backslash instead.
    let mut stock = GameSpyResponder::with_profile(Profile::Ut2003);
    let out = stock.answer(b"\\status\\", &seed_002_state());
    assert!(
        out[0]
            .windows(b"\\player_4\\Kee/n\\".len())
            .any(|w| w == b"\\player_4\\Kee/n\\")
    );
}

// ---------------------------------------------------------------------------------------------
// seed 002 and the audit of its statements

/// A single complete datagram (`\final\` and `queryid` N.1) is complete whatever key comes
/// first: completion depends on `queryid` and `final`, never on key order (spec §7.2 step 6).
#[test]
fn single_complete_datagram_starting_with_player_keys_is_complete() {
    let d = b"\\player_0\\Bob\\frags_0\\3\\ping_0\\40\\hostname\\A\\numplayers\\1\\queryid\\7.1\\final\\";
    for kind in [RequestKind::Status, RequestKind::Info, RequestKind::Players] {
        let (r, p) = reassemble(kind.clone(), &[d]);
        assert_eq!(p, [Push::Finished(Outcome::Complete)], "{kind:?}");
        let info = to_server_info(&r.pairs());
        assert_eq!(info.name.text, "A");
        assert_eq!(info.players.len(), 1);
    }
    // The same with `final` before `queryid` (style A and C order).
    let d = b"\\player_0\\Bob\\frags_0\\3\\hostname\\A\\final\\\\queryid\\7.1";
    let (_, p) = reassemble(RequestKind::Status, &[d]);
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
}

/// A style C tail that holds nothing but player keys still waits for its untagged head (R6):
/// the rule above does not turn R6 into an early, head-less answer.
#[test]
fn player_only_tail_still_waits_for_the_head() {
    let (_, p) = reassemble(RequestKind::Status, &[R5_TAIL]);
    assert_eq!(p, [Push::Accepted]);
}

/// Seed 002: "I won't rely on the 'numplayers'-property to be there all the time." Without
/// it, the player count is the number of players decoded, and `raw` says where it came from.
#[test]
fn missing_numplayers_counts_the_decoded_players() {
    let (r, p) = reassemble(
        RequestKind::Status,
        &[b"\\hostname\\A\\maxplayers\\8\\player_0\\Bob\\frags_0\\3\\player_1\\Eve\\frags_1\\1\\queryid\\3.1\\final\\"],
    );
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    let info = to_server_info(&r.pairs());
    assert_eq!(info.num_players, 2);
    assert_eq!(info.players.len(), 2);
    assert_eq!(
        info.raw_field("num_players_source"),
        Some(&muster_proto::RawValue::Text(
            muster_proto::Text::from_utf8_str("player list")
        ))
    );
    // When the server sends it, its value stands (it may differ from the list, §12 item 16),
    // and `raw` says so.
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\numplayers\\5\\player_0\\A\\final\\"],
    );
    let info = to_server_info(&r.pairs());
    assert_eq!(info.num_players, 5);
    assert_eq!(
        info.raw_field("num_players_source"),
        Some(&muster_proto::RawValue::Text(
            muster_proto::Text::from_utf8_str("numplayers")
        ))
    );
    // No numplayers and no players: zero, from the (empty) list.
    let (r, _) = reassemble(RequestKind::Status, &[b"\\hostname\\A\\final\\"]);
    assert_eq!(to_server_info(&r.pairs()).num_players, 0);
}

/// Seed 002: the UT2003 demo (gamename `ut2d`) sent a broken team value, so its teams are
/// reported empty; the value stays in the player's raw fields. Other games keep their teams.
#[test]
fn ut2003_demo_team_is_reported_empty() {
    let info = status_info(&[
        "ut2003demo-1077-status-1.bin",
        "ut2003demo-1077-status-2.bin",
    ]);
    assert_eq!(info.players.len(), 11);
    assert!(info.players.iter().all(|p| p.team.is_none()));
    assert!(
        info.players
            .iter()
            .all(|p| p.raw.iter().any(|(k, _)| k == "team"))
    );
    let (r, _) = reassemble(
        RequestKind::Status,
        &[b"\\gamename\\ut2\\player_0\\A\\team_0\\1\\final\\"],
    );
    assert_eq!(to_server_info(&r.pairs()).players[0].team, Some(1));
}

/// Seed 002's backslash hack runs in a loop "to handle even cooler players using more than
/// one backslash in their name": so does the tokenizer (spec §8.2 rules a and b).
#[test]
fn seed_002_names_with_several_backslashes() {
    let (r, p) = reassemble(
        RequestKind::Status,
        &[b"\\hostname\\A\\player_0\\a\\/b\\/c\\frags_0\\1\\player_1\\X\\Y\\Z\\frags_1\\2\\queryid\\9.1\\final\\"],
    );
    assert_eq!(p, [Push::Finished(Outcome::Complete)]);
    let info = to_server_info(&r.pairs());
    let names: Vec<&str> = info.players.iter().map(|p| p.name.text.as_str()).collect();
    assert_eq!(names, ["a\\/b\\/c", "X\\Y\\Z"]);
    assert_eq!(info.players[1].score, Some(2));
}
