//! Golden tests for gamespy_master: every hex vector of spec §11 in both directions, the
//! client transcripts of §5.3, and `Debug` snapshots of each decoded fixture.

use muster_proto::gamespy_master::{
    Challenge, ClientAuth, ClientMessage, Enctype, Greeting, Heartbeat, Key, ListForm, ListMode,
    ListReply, ListRequest, QueryReply, RequestAction, RequestParser, Secure, SyncReply, Token,
    ValidateAnswer, ValidateCheck, check_validate, validate_string,
};

use crate::util::{fixture, unhex};

const DIR: &str = "gamespy_master";

fn fx(name: &str) -> Vec<u8> {
    fixture(&format!("{DIR}/{name}"))
}

fn encoded(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

#[test]
fn m1_serioussam_heartbeat() {
    let hex = "5c 68 65 61 72 74 62 65 61 74 5c 32 35 36 30 31 5c 67 61 6d 65 6e 61 6d 65 5c 73 65 72 69 6f 75 73 73 61 6d 73 65";
    let bytes = fx("serioussam-1.10-heartbeat.bin");
    assert_eq!(bytes, unhex(hex));
    let h = Heartbeat::decode(&bytes).unwrap();
    assert_eq!(encoded(|o| h.encode(o)), bytes);
    insta::assert_debug_snapshot!("m1_serioussam_heartbeat", h);
}

#[test]
fn m2_serioussam_heartbeat_statechanged() {
    let bytes = fx("serioussam-1.10-heartbeat-statechanged.bin");
    assert_eq!(bytes.len(), 51);
    let h = Heartbeat::decode(&bytes).unwrap();
    assert!(h.state_changed());
    assert_eq!(encoded(|o| h.encode(o)), bytes);
    insta::assert_debug_snapshot!("m2_serioussam_heartbeat_statechanged", h);
}

#[test]
fn ut99_heartbeats() {
    for name in ["ut99-heartbeat.bin", "ut99-v469-heartbeat-to-epic.bin"] {
        let bytes = fx(name);
        let h = Heartbeat::decode(&bytes).unwrap();
        assert_eq!(h.query_port, 7778);
        assert!(h.gamename.is("ut"));
        assert_eq!(encoded(|o| h.encode(o)), bytes, "{name}");
    }
    let h = Heartbeat::decode(&fx("ut99-v469-heartbeat-to-epic.bin")).unwrap();
    insta::assert_debug_snapshot!("ut99_v469_heartbeat", h);
}

#[test]
fn m3_master_secure_challenge() {
    let bytes = fx("master-secure-challenge.bin");
    assert_eq!(bytes, unhex("5c 73 65 63 75 72 65 5c 41 42 43 44 45 46"));
    let s = Secure::decode(&bytes).unwrap();
    assert_eq!(encoded(|o| s.encode(o)), bytes);
    insta::assert_debug_snapshot!("m3_master_secure_challenge", s);
}

#[test]
fn m4_ut99_validate_answer() {
    let bytes = fx("ut99-validate-answer.bin");
    assert_eq!(bytes.len(), 37);
    let a = ValidateAnswer::decode(&bytes).unwrap();
    assert_eq!(encoded(|o| a.encode(o)), bytes);
    let c = Challenge::new(b"ABCDEF").unwrap();
    assert_eq!(
        check_validate(b"ut", &c, Enctype::Zero, a.validate.as_bytes()),
        ValidateCheck::Match
    );
    insta::assert_debug_snapshot!("m4_ut99_validate_answer", a);
}

#[test]
fn quirk_validate_answer_with_trailer_either_order() {
    let c = Challenge::new(b"ABCDEF").unwrap();
    for name in [
        "ut99-validate-answer.bin",
        "333networks-uplink-validate-answer.bin",
    ] {
        let bytes = fx(name);
        let a = ValidateAnswer::decode(&bytes).unwrap();
        assert_eq!(encoded(|o| a.encode(o)), bytes);
        let game: &[u8] = if name.starts_with("ut99") {
            b"ut"
        } else {
            b"333networks"
        };
        assert_eq!(
            check_validate(game, &c, Enctype::Zero, a.validate.as_bytes()),
            ValidateCheck::Match,
            "{name}"
        );
    }
}

#[test]
fn m5_greeting() {
    let bytes = fx("master-greeting.bin");
    assert_eq!(
        bytes,
        unhex("5c 62 61 73 69 63 5c 5c 73 65 63 75 72 65 5c 41 42 43 44 45 46")
    );
    let g = Greeting::decode(&bytes).unwrap();
    assert_eq!(encoded(|o| g.encode(o)), bytes);
    insta::assert_debug_snapshot!("m5_greeting", g);
}

#[test]
fn quirk_greeting_with_final() {
    let g = Greeting::decode(&fx("333networks-perl-greeting-final.bin")).unwrap();
    // Muster writes the form without `\final\` (decision 1).
    assert_eq!(encoded(|o| g.encode(o)), fx("master-greeting.bin"));
}

#[test]
fn m6_serioussam_list_request() {
    let bytes = fx("serioussam-1.10-list-request.bin");
    assert_eq!(bytes.len(), 120);
    let req = RequestParser::new().feed(&bytes).unwrap().unwrap();
    let c = Challenge::new(b"ABCDEF").unwrap();
    assert_eq!(
        validate_string(&c, b"AKbna4", Enctype::Zero).as_deref(),
        Some("zbGgINC8")
    );
    assert_eq!(
        check_validate(
            req.auth.gamename().unwrap().as_bytes(),
            &c,
            req.auth.enctype().unwrap(),
            req.auth.validate().unwrap().as_bytes()
        ),
        ValidateCheck::Match
    );
    // Both messages re-encode to the exact bytes.
    let RequestAction::List(list) = &req.action else {
        panic!("not a list request")
    };
    let again = [encoded(|o| req.auth.encode(o)), encoded(|o| list.encode(o))].concat();
    assert_eq!(again, bytes);
    let built = [
        encoded(|o| {
            ClientAuth::serious_sam(
                Key::new("serioussamse").unwrap(),
                Token::new("zbGgINC8").unwrap(),
            )
            .encode(o)
        }),
        encoded(|o| {
            ListRequest {
                queryid: Some(Token::new("1.1").unwrap()),
                mode: ListMode::Cmp,
                gamename: Some(Key::new("serioussamse").unwrap()),
                extra: vec![(Key::new("gamever").unwrap(), Token::new("1.05").unwrap())],
            }
            .encode(o)
        }),
    ]
    .concat();
    assert_eq!(built, bytes);
    insta::assert_debug_snapshot!("m6_serioussam_list_request", req);
}

#[test]
fn m7_qstat_request() {
    let bytes = fx("qstat-2.17-gsm-request.bin");
    let req = RequestParser::new().feed(&bytes).unwrap().unwrap();
    assert_eq!(req.list_gamename(), Some(&b"serioussamse"[..]));
    let c = Challenge::new(b"ABCDEF").unwrap();
    assert_eq!(
        check_validate(b"gamespy2", &c, Enctype::Zero, b"12345678"),
        ValidateCheck::Mismatch {
            expected: "/+SZGk4P".to_owned()
        }
    );
    let RequestAction::List(list) = &req.action else {
        panic!("not a list request")
    };
    assert_eq!(list.mode.reply_form(), ListForm::Text);
    let again = [encoded(|o| req.auth.encode(o)), encoded(|o| list.encode(o))].concat();
    assert_eq!(again, bytes);
    insta::assert_debug_snapshot!("m7_qstat_request", req);
}

#[test]
fn ubrowser_request() {
    let bytes = fx("ubrowser-ut99-request.bin");
    let req = RequestParser::new().feed(&bytes).unwrap().unwrap();
    let auth = ClientAuth::ubrowser(
        Key::new("ut").unwrap(),
        Token::new("0").unwrap(),
        Token::new("5OOIQ5Ha").unwrap(),
    );
    assert_eq!(req.auth, auth);
    let list = ListRequest::new(ListMode::Text, Key::new("ut").unwrap());
    assert_eq!(req.action, RequestAction::List(list.clone()));
    let again = [encoded(|o| auth.encode(o)), encoded(|o| list.encode(o))].concat();
    assert_eq!(again, bytes);
}

#[test]
fn m8_text_list() {
    let bytes = fx("master-text-list.bin");
    let r = ListReply::decode(&bytes, ListForm::Text).unwrap();
    assert_eq!(encoded(|o| r.encode(o)), bytes);
    insta::assert_debug_snapshot!("m8_text_list", r.to_server_list());
}

#[test]
fn m9_cmp_list() {
    let bytes = fx("master-cmp-list.bin");
    assert_eq!(
        bytes,
        unhex("01 02 03 04 64 01 05 06 07 08 1e 62 5c 66 69 6e 61 6c 5c")
    );
    let r = ListReply::decode(&bytes, ListForm::Cmp).unwrap();
    assert_eq!(encoded(|o| r.encode(o)), bytes);
    insta::assert_debug_snapshot!("m9_cmp_list", r);
}

#[test]
fn m10_quirk_cmp_record_spells_final() {
    let bytes = fx("master-cmp-list-record-spells-final.bin");
    let r = ListReply::decode(&bytes, ListForm::Cmp).unwrap();
    assert_eq!(
        r.servers,
        vec![
            "92.102.105.110:24940".parse().unwrap(),
            "92.1.2.3:7778".parse().unwrap()
        ]
    );
    assert_eq!(encoded(|o| r.encode(o)), bytes);
}

#[test]
fn quirk_sync_request_forms() {
    for name in [
        "333networks-qt5-sync-request.bin",
        "333networks-perl-sync-request.bin",
    ] {
        let bytes = fx(name);
        let mut p = RequestParser::new();
        let req = p.feed(&bytes).unwrap().unwrap_or_else(|| panic!("{name}"));
        let RequestAction::Sync(s) = &req.action else {
            panic!("not a sync")
        };
        let again = [encoded(|o| req.auth.encode(o)), encoded(|o| s.encode(o))].concat();
        assert_eq!(again, bytes, "{name}");
    }
    let req = RequestParser::new()
        .feed(&fx("333networks-qt5-sync-request.bin"))
        .unwrap()
        .unwrap();
    insta::assert_debug_snapshot!("qt5_sync_request", req);
}

#[test]
fn sync_reply() {
    let bytes = fx("333networks-sync-reply.bin");
    let r = SyncReply::decode(&bytes).unwrap();
    assert_eq!(encoded(|o| r.encode(o)), bytes);
    insta::assert_debug_snapshot!("sync_reply", r);
}

#[test]
fn own_query_face_basic_reply() {
    let bytes = fx("333networks-qt5-own-basic-reply.bin");
    let r = QueryReply::decode(&bytes).unwrap();
    assert_eq!(encoded(|o| r.encode(o)), bytes);
    insta::assert_debug_snapshot!("own_basic_reply", r);
}

#[test]
fn every_client_fixture_classifies() {
    // Each `\final\`-terminated message of each client fixture decodes on its own.
    for name in [
        "serioussam-1.10-list-request.bin",
        "qstat-2.17-gsm-request.bin",
        "ubrowser-ut99-request.bin",
    ] {
        let bytes = fx(name);
        let mut rest = &bytes[..];
        let mut kinds = Vec::new();
        while let Some(pos) = rest.windows(7).position(|w| w == b"\\final\\") {
            let (msg, tail) = rest.split_at(pos + 7);
            kinds.push(match ClientMessage::decode(msg).unwrap() {
                ClientMessage::Auth(_) => "auth",
                ClientMessage::List(_) => "list",
                ClientMessage::Sync(_) => "sync",
                ClientMessage::Other(_) => "other",
            });
            rest = tail;
        }
        assert_eq!(kinds, ["auth", "list"], "{name}");
    }
}

#[test]
fn quirk_client_sends_before_greeting() {
    // qstat writes its whole request right after connecting; the parser has no notion of the
    // greeting having been read, so the bytes are taken whenever they come.
    let mut p = RequestParser::new();
    let bytes = fx("qstat-2.17-gsm-request.bin");
    let (a, b) = bytes.split_at(10);
    assert_eq!(p.feed(a), Ok(None));
    assert!(p.feed(b).unwrap().is_some());
}

#[test]
fn quirk_unknown_list_modes_answered_with_text() {
    for (req, form) in [
        (&b"\\list\\cmp\\gamename\\ut\\final\\"[..], ListForm::Cmp),
        (b"\\list\\\\gamename\\ut\\final\\", ListForm::Text),
        (b"\\list\\info2\\gamename\\ut\\final\\", ListForm::Text),
        (
            b"\\list\\groups\\gamename\\ut\\where\\x\\final\\",
            ListForm::Text,
        ),
    ] {
        let l = ListRequest::decode(req).unwrap();
        assert_eq!(l.mode.reply_form(), form);
        assert_eq!(encoded(|o| l.encode(o)), req);
    }
}

#[test]
fn quirk_heartbeat_port_zero() {
    let h = Heartbeat::decode(b"\\heartbeat\\0\\gamename\\ut").unwrap();
    // Kept as 0: the master substitutes the game's default port, not the codec.
    assert_eq!(h.query_port, 0);
}

#[test]
fn quirk_statechanged_without_value() {
    let h = Heartbeat::decode(&fx("serioussam-1.10-heartbeat-statechanged.bin")).unwrap();
    assert!(h.state_changed());
    // With a value (not seen in the wild) it still counts.
    let h =
        Heartbeat::decode(b"\\heartbeat\\25601\\gamename\\serioussamse\\statechanged\\1").unwrap();
    assert!(h.state_changed());
    let h = Heartbeat::decode(&fx("ut99-v469-heartbeat-to-epic.bin")).unwrap();
    assert!(!h.state_changed());
}

#[test]
fn quirk_gamename_case() {
    let h = Heartbeat::decode(b"\\heartbeat\\7778\\gamename\\UT").unwrap();
    assert!(h.gamename.is("ut"));
    assert_eq!(h.gamename.as_bytes(), b"UT", "raw bytes kept");
    assert_eq!(
        muster_proto::gamespy_master::game_keys(b"SeriousSamSE"),
        ["AKbna4"]
    );
    // The three Serious Sam names share a key (aliasing itself is the master's game table).
    for g in ["serioussam", "serioussamse", "serioussamsed"] {
        assert_eq!(
            muster_proto::gamespy_master::game_keys(g.as_bytes()),
            ["AKbna4"]
        );
    }
}

#[test]
fn quirk_empty_and_non_backslash_datagrams() {
    use muster_proto::DecodeError;
    for d in [&b""[..], b"\x00", b"heartbeat\\7778", b"\xff\xff\xff\xff"] {
        assert_eq!(
            Heartbeat::decode(d),
            Err(DecodeError::BadMagic("heartbeat"))
        );
        assert!(muster_proto::gamespy_master::MasterQuery::decode(d).is_err());
    }
}

#[test]
fn quirk_sync_reply_empty_games_and_trailing_spaces() {
    let qt5 = b"\\ut\\1.2.3.4:7778 \\unreal\\\\ut2\\5.6.7.8:7778  9.9.9.9:7787 \\final\\";
    let r = SyncReply::decode(qt5).unwrap();
    assert_eq!(r.games.len(), 3);
    assert!(r.games[1].1.is_empty());
    assert_eq!(r.games[2].1.len(), 2);
    // Written back in the Qt5 shape: one space after each address.
    assert_eq!(
        encoded(|o| r.encode(o)),
        b"\\ut\\1.2.3.4:7778 \\unreal\\\\ut2\\5.6.7.8:7778 9.9.9.9:7787 \\final\\"
    );
}

#[test]
fn quirk_enctype2_auth() {
    let msg = b"\\gamename\\ut\\enctype\\2\\validate\\vtbGJfPq\\final\\";
    let a = ClientAuth::decode(msg).unwrap();
    assert_eq!(a.enctype(), Ok(Enctype::Two));
    let c = Challenge::new(b"ABCDEF").unwrap();
    assert_eq!(
        check_validate(b"ut", &c, Enctype::Two, a.validate().unwrap().as_bytes()),
        ValidateCheck::Match
    );
}

#[test]
fn uplink_validate_answer_is_an_own_face_reply() {
    // A 333networks master answers `\secure\` on its beacon port in the §9 reply shape, so
    // the same bytes decode both as a validate answer and as a one-section query reply.
    let bytes = fx("333networks-uplink-validate-answer.bin");
    let r = QueryReply::decode(&bytes).unwrap();
    assert_eq!(r.query_id, 1);
    assert_eq!(
        r.sections,
        vec![vec![(
            Key::new("validate").unwrap(),
            Token::new("TcGdY/3Q").unwrap()
        )]]
    );
    assert_eq!(encoded(|o| r.encode(o)), bytes);
}
