//! Byte-exact replies of each profile against the spec vectors (gamespy1.md §5, §9, §10, §11;
//! gamespy-master.md §3.1, §4.7).

use super::*;
use crate::respond::PlayerState;

fn player(name: &str, score: i64, ping_ms: u32) -> PlayerState {
    PlayerState {
        name: name.to_owned(),
        score,
        ping_ms,
        ..PlayerState::default()
    }
}

/// The example server of spec §9.2.
fn serious_sam_state(players: Vec<PlayerState>) -> ServerState {
    ServerState {
        name: "Awesome Server".into(),
        map: "Yodeller".into(),
        game_type: "Fragmatch".into(),
        game_port: 25600,
        max_players: 16,
        players,
        ..ServerState::default()
    }
}

/// The UT99 example server of spec §5.2.
fn ut99_state(players: Vec<PlayerState>) -> ServerState {
    ServerState {
        name: "Test UT Server".into(),
        map: "DM-Deck16".into(),
        game_type: "DeathMatchPlus".into(),
        game_port: 7777,
        max_players: 16,
        players,
        rules: vec![
            ("timelimit".into(), "20".into()),
            ("fraglimit".into(), "30".into()),
            ("AdminName".into(), "Bob".into()),
            ("AdminEMail".into(), "bob@example.org".into()),
        ],
        ..ServerState::default()
    }
}

fn ask(r: &mut GameSpyResponder, req: &[u8], state: &ServerState) -> Vec<String> {
    r.answer(req, state)
        .into_iter()
        .map(|d| String::from_utf8(d).unwrap())
        .collect()
}

const SS_STATUS_EMPTY: &str = "\\gamename\\serioussamse\\gamever\\1.10\\location\\Heartland\\hostname\\Awesome Server\\hostport\\25600\\mapname\\Yodeller\\gametype\\Fragmatch\\activemod\\\\numplayers\\0\\maxplayers\\16\\gamemode\\openplaying\\difficulty\\Normal\\friendlyfire\\0\\weaponsstay\\1\\ammosstay\\0\\healthandarmorstays\\0\\allowhealth\\1\\allowarmor\\1\\infinitearmor\\0\\respawninplace\\1\\password\\0\\vipplayers\\1\\final\\\\queryid\\333.1";

#[test]
fn serious_sam_status_no_players_is_the_374_bytes_of_spec_9_2() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let out = ask(&mut r, b"\\status\\", &serious_sam_state(vec![]));
    assert_eq!(out, [SS_STATUS_EMPTY]);
    assert_eq!(out[0].len(), 374);
}

#[test]
fn serious_sam_status_two_players_is_450_bytes() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let state = serious_sam_state(vec![player("Sam", 3, 40), player("Kenny", 1, 70)]);
    let out = ask(&mut r, b"\\status\\", &state);
    let expected = SS_STATUS_EMPTY
        .replace("numplayers\\0", "numplayers\\2")
        .replace(
            "\\final\\",
            "\\player_0\\^oSam^r\\frags_0\\3\\ping_0\\40\\player_1\\^oKenny^r\\frags_1\\1\\ping_1\\70\\final\\",
        );
    assert_eq!(out, [expected]);
    assert_eq!(out[0].len(), 450);
}

#[test]
fn serious_sam_info_basic_players_fixed_ids_spec_9_3() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let s = serious_sam_state(vec![]);
    let info = ask(&mut r, b"\\info\\", &s);
    assert_eq!(
        info,
        [
            "\\hostname\\Awesome Server\\hostport\\25600\\mapname\\Yodeller\\gametype\\Fragmatch\\numplayers\\0\\maxplayers\\16\\gamemode\\openplaying\\final\\\\queryid\\8.1"
        ]
    );
    assert_eq!(info[0].len(), 142);
    let basic = ask(&mut r, b"\\basic\\", &s);
    assert_eq!(
        basic,
        ["\\gamename\\serioussamse\\gamever\\1.10\\location\\EU\\final\\\\queryid\\1.1"]
    );
    assert_eq!(basic[0].len(), 66);
    assert_eq!(ask(&mut r, b"\\players\\", &s), ["\\final\\\\queryid\\6.1"]);
}

#[test]
fn serious_sam_answers_only_the_first_found_request_quirk_search_order() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let s = serious_sam_state(vec![]);
    // `\basic\\info\` gets only the info reply; `\status\xserverquery` the status reply.
    let out = ask(&mut r, b"\\basic\\\\info\\", &s);
    assert!(out[0].ends_with("\\queryid\\8.1"));
    assert_eq!(
        ask(&mut r, b"\\status\\xserverquery", &s),
        [SS_STATUS_EMPTY]
    );
}

#[test]
fn serious_sam_ignores_rules_echo_secure_teams() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let s = serious_sam_state(vec![]);
    for req in [
        &b"\\rules\\"[..],
        b"\\echo\\hello",
        b"\\secure\\ABCDEF",
        b"\\teams\\",
    ] {
        let mut out = Vec::new();
        let ok = r.handle_datagram(
            Instant::now(),
            "127.0.0.1:1".parse().unwrap(),
            req,
            &s,
            &mut out,
        );
        assert!(out.is_empty(), "{req:?}");
        assert!(!ok, "{req:?} is not a request Serious Sam knows");
    }
}

#[test]
fn serious_sam_flags_come_from_rules() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let mut s = serious_sam_state(vec![]);
    s.rules = vec![
        ("FriendlyFire".into(), "true".into()),
        ("weaponsstay".into(), "0".into()),
    ];
    let out = ask(&mut r, b"\\status\\", &s);
    assert!(out[0].contains("\\friendlyfire\\1\\weaponsstay\\0\\ammosstay\\0\\"));
}

#[test]
fn serious_sam_first_encounter_gamename_and_location_configurable() {
    let mut config = GameSpyConfig::new(Profile::SeriousSam);
    config.gamename = "serioussam".into();
    config.location = "127.0.0.1".into();
    let mut r = GameSpyResponder::new(config);
    let out = ask(&mut r, b"\\status\\", &serious_sam_state(vec![]));
    assert!(out[0].starts_with("\\gamename\\serioussam\\gamever\\1.10\\location\\127.0.0.1\\"));
}

#[test]
fn serious_sam_long_names_cut_so_sixteen_players_fit_one_datagram() {
    let mut r = GameSpyResponder::with_profile(Profile::SeriousSam);
    let mut s = serious_sam_state(
        (0..16)
            .map(|i| player(&format!("{i:02}{}", "x".repeat(200)), 99_999, 999))
            .collect(),
    );
    s.name = "N".repeat(300);
    let out = r.answer(b"\\status\\", &s);
    assert_eq!(out.len(), 1);
    assert!(out[0].len() < STYLE_C_LIMIT_FOR_TEST);
    let text = String::from_utf8(out[0].clone()).unwrap();
    assert!(text.contains(&format!("\\hostname\\{}\\", "N".repeat(64))));
    assert!(text.contains(&format!("\\player_15\\^o15{}^r\\", "x".repeat(30))));
}

const STYLE_C_LIMIT_FOR_TEST: usize = super::super::STYLE_C_PACKET_LIMIT;

/// Spec §5.2 (Q6), with `Kee\/n` sent as `Kee/n`: Muster removes `\` from values (spec §13
/// decision 1), as UT v469 does.
#[test]
fn ut99_status_is_the_style_b_example_of_spec_5_2() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    let mut p0 = player("Kee\\/n", 5, 40);
    p0.team = None;
    let state = ut99_state(vec![p0, player("Alpha", 2, 60)]);
    for _ in 0..40 {
        let _ = r.answer(b"x", &state);
    }
    let out = ask(&mut r, b"\\status\\", &state);
    assert_eq!(
        out,
        [
            "\\gamename\\ut\\gamever\\451\\minnetver\\432\\location\\0\\hostname\\Test UT Server\\hostport\\7777\\maptitle\\DM-Deck16\\mapname\\DM-Deck16\\gametype\\DeathMatchPlus\\numplayers\\2\\maxplayers\\16\\gamemode\\openplaying\\gamever\\451\\minnetver\\432\\timelimit\\20\\fraglimit\\30\\AdminName\\Bob\\AdminEMail\\bob@example.org\\player_0\\Kee/n\\frags_0\\5\\ping_0\\40\\team_0\\255\\player_1\\Alpha\\frags_1\\2\\ping_1\\60\\team_1\\255\\queryid\\41.1\\final\\"
        ]
    );
}

#[test]
fn ut99_players_on_empty_server_is_lone_queryid_final() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    assert_eq!(
        ask(&mut r, b"\\players\\", &ut99_state(vec![])),
        ["\\queryid\\1.1\\final\\"]
    );
}

#[test]
fn ut99_many_players_split_at_1000_bytes() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    let players = (0..32)
        .map(|i| player(&format!("Player{i:02}-{}", "y".repeat(30)), i, 50))
        .collect();
    let out = r.answer(b"\\status\\", &ut99_state(players));
    assert!(out.len() >= 2);
    for (i, d) in out.iter().enumerate() {
        let y = i + 1;
        let text = String::from_utf8(d.clone()).unwrap();
        if y == out.len() {
            assert!(text.ends_with(&format!("\\queryid\\1.{y}\\final\\")));
        } else {
            assert!(text.ends_with(&format!("\\queryid\\1.{y}")));
            assert!(d.len() <= 1000 + "\\queryid\\1.1".len());
        }
    }
}

#[test]
fn ut99_secure_answers_validate_with_the_ut_key() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    let s = ut99_state(vec![]);
    assert_eq!(
        ask(&mut r, b"\\secure\\ABCDEF", &s),
        ["\\validate\\5OOIQ5Ha\\queryid\\1.1\\final\\"]
    );
    // Combined with basic: one reply, validate in the item's place.
    assert_eq!(
        ask(&mut r, b"\\basic\\\\secure\\QWERTY", &s),
        [
            "\\gamename\\ut\\gamever\\451\\minnetver\\432\\location\\0\\validate\\0KBkX5UX\\queryid\\2.1\\final\\"
        ]
    );
    // A challenge that is not 6 printable characters gets no validate.
    assert!(r.answer(b"\\secure\\ABC", &s).is_empty());
}

#[test]
fn unreal227_secure_uses_style_a_order_and_the_unreal_key() {
    let mut r = GameSpyResponder::with_profile(Profile::Unreal227);
    assert_eq!(
        ask(&mut r, b"\\secure\\ABCDEF", &ServerState::default()),
        ["\\validate\\7qaTlhDT\\final\\\\queryid\\1.1"]
    );
}

#[test]
fn ut2003_secure_uses_the_configured_key() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut2003);
    assert_eq!(
        ask(&mut r, b"\\secure\\ABCDEF", &ServerState::default()),
        ["\\validate\\nDhJM2/V\\queryid\\1.1\\final\\"]
    );
    let mut config = GameSpyConfig::new(Profile::Ut2003);
    config.game_key = "y5rP9m".into();
    let mut r = GameSpyResponder::new(config);
    assert_eq!(
        ask(&mut r, b"\\secure\\ABCDEF", &ServerState::default()),
        ["\\validate\\tI4y+ND6\\queryid\\1.1\\final\\"]
    );
}

/// Spec §5.1 (Q7): basic, info, rules and each player in their own datagram, Y from 1,
/// `\final\` before `\queryid\` in the last, ping with a leading space.
#[test]
fn unreal227_status_one_section_per_datagram() {
    let mut r = GameSpyResponder::with_profile(Profile::Unreal227);
    for _ in 0..11 {
        let _ = r.answer(b"\\echo\\x", &ServerState::default());
    }
    let state = ServerState {
        name: "My Server".into(),
        map: "DmDeck16".into(),
        game_type: "DeathMatch".into(),
        game_port: 7777,
        max_players: 16,
        rules: vec![
            ("timelimit".into(), "0".into()),
            ("fraglimit".into(), "30".into()),
        ],
        players: vec![player("Bob", 3, 50)],
        ..ServerState::default()
    };
    assert_eq!(
        ask(&mut r, b"\\status\\", &state),
        [
            "\\gamename\\unreal\\gamever\\227k\\gamesubver\\11\\mingamever\\224\\location\\0\\queryid\\12.1",
            "\\hostname\\My Server\\hostport\\7777\\maptitle\\DmDeck16\\mapname\\DmDeck16\\gametype\\DeathMatch\\numplayers\\1\\maxplayers\\16\\gamemode\\openplaying\\gamever\\227k\\mingamever\\224\\queryid\\12.2",
            "\\timelimit\\0\\fraglimit\\30\\queryid\\12.3",
            "\\player_0\\Bob\\frags_0\\3\\ping_0\\ 50\\team_0\\255\\final\\\\queryid\\12.4",
        ]
    );
}

#[test]
fn unreal227_players_on_empty_server_is_y_zero() {
    let mut r = GameSpyResponder::with_profile(Profile::Unreal227);
    assert_eq!(
        ask(&mut r, b"\\players\\", &ServerState::default()),
        ["\\final\\\\queryid\\1.0"]
    );
}

#[test]
fn ut2003_states_password_and_team_numbers() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut2003);
    let mut p = player("Red", 1, 20);
    p.team = Some(0);
    let state = ServerState {
        name: "UT2".into(),
        password: true,
        players: vec![p],
        ..ServerState::default()
    };
    assert_eq!(
        ask(&mut r, b"\\rules\\\\players\\", &state),
        [
            "\\password\\True\\player_0\\Red\\frags_0\\1\\ping_0\\20\\team_0\\0\\queryid\\1.1\\final\\"
        ]
    );
}

#[test]
fn style_names_select_profiles_and_ut2003_answers_at_plus_10() {
    assert_eq!(Profile::from_style_name(None), Some(Profile::Ut2003));
    for p in Profile::ALL {
        assert_eq!(Profile::from_style_name(Some(p.style_name())), Some(p));
    }
    assert_eq!(Profile::from_style_name(Some("x86")), None);
    let offsets: Vec<u16> = Profile::ALL.iter().map(|p| p.query_port_offset()).collect();
    assert_eq!(offsets, [10, 10, 1, 1, 1]);
}

#[test]
fn ut2003demo_keeps_backslashes_in_names_only_and_pads_pings() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut2003Demo);
    let mut p = player("Kee\\/n\x07", 38, 117);
    p.team = Some(0);
    let state = ServerState {
        name: "A\\B".into(),
        map: "CTF-Citadel".into(),
        players: vec![p],
        rules: vec![("MapTitle".into(), "Citadel".into())],
        ..ServerState::default()
    };
    let out = ask(&mut r, b"\\status\\", &state);
    assert_eq!(
        out,
        [
            "\\gamename\\ut2d\\gamever\\1077\\minnetver\\1000\\location\\0\\hostname\\AB\\hostport\\0\\maptitle\\Citadel\\mapname\\CTF-Citadel\\gametype\\\\numplayers\\1\\maxplayers\\16\\gamemode\\openplaying\\gamever\\1077\\minnetver\\1000\\player_0\\Kee\\/n\\frags_0\\38\\ping_0\\ 117\\team_0\\0\\queryid\\1.1\\final\\"
        ]
    );
}

#[test]
fn echo_is_never_answered_in_any_profile() {
    for profile in [
        Profile::Ut2003,
        Profile::Ut99,
        Profile::Unreal227,
        Profile::SeriousSam,
    ] {
        let mut r = GameSpyResponder::with_profile(profile);
        assert!(
            r.answer(b"\\echo\\ping", &ServerState::default())
                .is_empty()
        );
    }
}

#[test]
fn requests_over_2048_bytes_are_ignored() {
    for profile in [Profile::Ut99, Profile::SeriousSam] {
        let mut r = GameSpyResponder::with_profile(profile);
        let mut req = b"\\status\\".to_vec();
        req.resize(2049, b'a');
        let mut out = Vec::new();
        let ok = r.handle_datagram(
            Instant::now(),
            "127.0.0.1:1".parse().unwrap(),
            &req,
            &ServerState::default(),
            &mut out,
        );
        assert!(!ok);
        assert!(out.is_empty());
    }
}

#[test]
fn at_most_eight_items_are_answered() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    let req = "\\basic\\".repeat(8) + "\\info\\";
    let out = ask(&mut r, req.as_bytes(), &ServerState::default());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].matches("\\gamename\\").count(), 8);
    assert!(!out[0].contains("hostname"));
}

#[test]
fn names_are_sent_as_windows_1252() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    let state = ServerState {
        name: "Café ☃".into(),
        players: vec![player("Jérôme", 0, 0)],
        ..ServerState::default()
    };
    let out = r.answer(b"\\info\\\\players\\", &state);
    let d = &out[0];
    assert!(d.windows(7).any(|w| w == b"Caf\xe9 ?\\"));
    assert!(d.windows(8).any(|w| w == b"J\xe9r\xf4me\\f"));
}

#[test]
fn queryid_counts_every_datagram_and_wraps_at_100() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut2003);
    let s = ServerState::default();
    let mut out = Vec::new();
    let from = "127.0.0.1:1".parse().unwrap();
    assert!(!r.handle_datagram(Instant::now(), from, b"junk", &s, &mut out));
    for _ in 0..98 {
        let _ = r.answer(b"\\echo\\", &s);
    }
    assert_eq!(
        ask(&mut r, b"\\players\\", &s),
        ["\\queryid\\100.1\\final\\"]
    );
    assert_eq!(ask(&mut r, b"\\players\\", &s), ["\\queryid\\1.1\\final\\"]);
}

#[test]
fn spectators_are_not_listed_or_counted() {
    let mut r = GameSpyResponder::with_profile(Profile::Ut99);
    let mut spec = player("Watcher", 0, 10);
    spec.spectator = true;
    let state = ServerState {
        players: vec![spec, player("P", 1, 2)],
        ..ServerState::default()
    };
    let out = ask(&mut r, b"\\info\\\\players\\", &state);
    assert!(out[0].contains("\\numplayers\\1\\"));
    assert!(out[0].contains("\\player_0\\P\\"));
    assert!(!out[0].contains("Watcher"));
}

#[test]
fn arbitrary_datagrams_never_panic() {
    use proptest::prelude::*;
    proptest!(|(data in proptest::collection::vec(any::<u8>(), 0..2200), which in 0usize..4)| {
        let profile = [Profile::Ut2003, Profile::Ut99, Profile::Unreal227, Profile::SeriousSam][which];
        let mut r = GameSpyResponder::with_profile(profile);
        let mut out = Vec::new();
        let _ = r.handle_datagram(Instant::now(), "127.0.0.1:1".parse().unwrap(), &data, &ServerState::default(), &mut out);
    });
}
