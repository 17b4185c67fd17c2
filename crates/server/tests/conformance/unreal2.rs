//! Conformance of the unreal2 responder with real client peers.
//!
//! qstat (`-ut2s`, `-ut2004s`), gamedig (`unrealtournament2003`, `unrealtournament2004`) and
//! opengsq (`unreal2`: `get_details`, `get_rules`, `get_players`) query
//! [`Unreal2Responder`] on loopback, given the query port itself. Each must read exactly the
//! configured state; where a peer mangles a value (spec `unreal2.md` §15, `peers.md`), the
//! peer's real output is asserted and the comment says why.

use std::sync::atomic::Ordering;

use muster_proto::respond::{PlayerState, ServerState};
use muster_proto::unreal2::{Style, Unreal2Responder, Unreal2Settings};
use muster_testkit::{Gamedig, Opengsq, Qstat};
use serde_json::{Value, json};

use crate::support::{Served, serve_loopback};

fn player(name: &str, score: i64, ping_ms: u32, team: Option<i32>) -> PlayerState {
    PlayerState {
        name: name.to_owned(),
        score,
        ping_ms,
        team,
        ..PlayerState::default()
    }
}

/// A passworded team game: a Latin-1 server name, a UTF-16-only player name ("Betа", the last
/// letter Cyrillic), a spectator (listed, not counted) and a bot (neither), repeated Mutators.
fn state() -> ServerState {
    ServerState {
        name: "Muster Café".into(),
        map: "DM-Rankin".into(),
        game_type: "xTeamGame".into(),
        version: "3369".into(),
        game: "ut2".into(),
        game_port: 7777,
        password: true,
        max_players: 16,
        players: vec![
            player("Alpha", 12, 40, Some(0)),
            player("Betа", -3, 60, Some(1)),
            PlayerState {
                spectator: true,
                ..player("Watcher", 0, 100, None)
            },
            PlayerState {
                bot: true,
                ..player("Bot", 5, 0, Some(1))
            },
        ],
        rules: vec![
            ("AdminName".into(), "Bob".into()),
            ("Mutator".into(), "MutA".into()),
            ("Mutator".into(), "MutB".into()),
        ],
    }
}

/// A server with nobody on it: the responder sends no players datagram at all.
fn empty_state() -> ServerState {
    ServerState {
        players: Vec::new(),
        password: false,
        ..state()
    }
}

async fn serve(style: Style, state: ServerState) -> Served {
    serve_loopback(
        Unreal2Responder::new(Unreal2Settings::with_style(style)),
        state,
        0,
    )
    .await
}

/// Every datagram the peer sent was a well-formed native request.
fn assert_no_bad_requests(served: &Served) {
    assert!(served.stats.received.load(Ordering::Relaxed) > 0);
    assert_eq!(served.stats.bad.load(Ordering::Relaxed), 0);
}

async fn qstat_reads(qstat_type: &'static str, style: Style) {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let served = serve(style, state()).await;
    let addr = served.addr;
    let v = tokio::task::spawn_blocking(move || qstat.query(qstat_type, addr))
        .await
        .expect("qstat thread");
    assert_eq!(v["status"], "online", "{v:#}");
    // qstat drops accented Latin-1 letters from names (peers.md §3.4): "Café" -> "Caf".
    assert_eq!(v["name"], "Muster Caf");
    assert_eq!(v["map"], "DM-Rankin");
    assert_eq!(v["gametype"], "xTeamGame");
    // Humans playing; the spectator is listed but not counted, the bot is neither.
    assert_eq!(v["numplayers"], 2);
    assert_eq!(v["maxplayers"], 16);
    assert_eq!(
        v["rules"],
        json!({
            // qstat adds the info reply's Port and game type as rules.
            "hostport": "7777",
            "gametype": "xTeamGame",
            "ServerVersion": "3369",
            "GamePassword": "True",
            "AdminName": "Bob",
            // qstat joins repeated Mutator values with '|'.
            "Mutator": "MutA|MutB",
        })
    );
    // qstat lists players last-first; a player without team bits gets team -32767 (unset);
    // it keeps only the low byte of each UTF-16 unit, so "Betа" (U+0430) shows as "Bet0"
    // (spec §15).
    assert_eq!(
        v["players"],
        json!([
            {"name": "Watcher", "score": 0, "deaths": -32767, "team": -32767, "ping": 100},
            {"name": "Bet0", "score": -3, "deaths": -32767, "team": "blue", "ping": 60},
            {"name": "Alpha", "score": 12, "deaths": -32767, "team": "red", "ping": 40},
        ])
    );
    assert_no_bad_requests(&served);
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_ut2s_reads_ut2004_style() {
    qstat_reads("ut2s", Style::Ut2004).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_ut2004s_reads_ut2004_style() {
    qstat_reads("ut2004s", Style::Ut2004).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_ut2s_reads_ut2003_style() {
    qstat_reads("ut2s", Style::Ut2003).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_ut2004s_reads_ut2003_style() {
    qstat_reads("ut2004s", Style::Ut2003).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_empty_server_quirk_waits_for_players_then_reports_online() {
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let served = serve(Style::Ut2004, empty_state()).await;
    let addr = served.addr;
    let v = tokio::task::spawn_blocking(move || qstat.query("ut2004s", addr))
        .await
        .expect("qstat thread");
    assert_eq!(v["status"], "online", "{v:#}");
    assert_eq!(v["name"], "Muster Caf");
    assert_eq!(v["numplayers"], 0);
    assert_eq!(v["players"], json!([]));
    // No GamePassword rule on a server without a password.
    assert_eq!(v["rules"].get("GamePassword"), None);
    assert_eq!(v["rules"]["ServerVersion"], "3369");
    assert_no_bad_requests(&served);
}

async fn gamedig_reads(game: &'static str, style: Style) {
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let served = serve(style, state()).await;
    let addr = served.addr;
    let v = tokio::task::spawn_blocking(move || gamedig.query(game, addr))
        .await
        .expect("gamedig thread");
    assert_eq!(v.get("error"), None, "{v:#}");
    assert_eq!(v["name"], "Muster Café");
    assert_eq!(v["map"], "DM-Rankin");
    assert_eq!(v["numplayers"], 2);
    assert_eq!(v["maxplayers"], 16);
    // gamedig's password test is inverted: GamePassword=True reads as false (spec §15).
    assert_eq!(v["password"], false);
    // gamedig builds `connect` from the info reply's Port (the game port).
    assert_eq!(v["connect"], "127.0.0.1:7777");
    // gamedig does not read ServerVersion into `version`.
    assert_eq!(v["version"], "");
    assert_eq!(v["bots"], json!([]));
    assert_eq!(
        v["players"],
        json!([
            {"name": "Alpha", "raw": {"id": 1, "ping": 40, "score": 12, "statsId": 0x2000_0000}},
            {"name": "Betа", "raw": {"id": 2, "ping": 60, "score": -3, "statsId": 0x4000_0000}},
            {"name": "Watcher", "raw": {"id": 3, "ping": 100, "score": 0, "statsId": 0}},
        ])
    );
    let raw = &v["raw"];
    assert_eq!(raw["gametype"], "xTeamGame");
    assert_eq!(raw["serverid"], 0);
    assert_eq!(raw["ip"], "");
    assert_eq!(raw["queryport"], 0);
    assert_eq!(raw["ping"], 0);
    assert_eq!(raw["mutators"], json!(["MutA", "MutB"]));
    assert_eq!(
        raw["rules"],
        json!({"AdminName": "Bob", "GamePassword": "True", "ServerVersion": "3369"})
    );
    assert_eq!(raw["scoreboard"], json!({}));
    match style {
        Style::Ut2004 => {
            assert_eq!(raw["flags"], 0);
            assert_eq!(raw["skill"], "1");
        }
        // The UT2003 layout has neither; gamedig reads them only when 8 bytes remain.
        Style::Ut2003 => {
            assert_eq!(raw.get("flags"), None);
            assert_eq!(raw.get("skill"), None);
        }
    }
    assert_no_bad_requests(&served);
}

#[tokio::test(flavor = "multi_thread")]
async fn gamedig_unrealtournament2004_reads_ut2004_style() {
    gamedig_reads("unrealtournament2004", Style::Ut2004).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gamedig_unrealtournament2003_reads_ut2003_style() {
    gamedig_reads("unrealtournament2003", Style::Ut2003).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gamedig_empty_server_quirk_players_part_optional() {
    let Some(gamedig) = Gamedig::require() else {
        return;
    };
    let served = serve(Style::Ut2004, empty_state()).await;
    let addr = served.addr;
    let v = tokio::task::spawn_blocking(move || gamedig.query("unrealtournament2004", addr))
        .await
        .expect("gamedig thread");
    assert_eq!(v.get("error"), None, "{v:#}");
    assert_eq!(v["name"], "Muster Café");
    assert_eq!(v["numplayers"], 0);
    assert_eq!(v["players"], json!([]));
    assert_eq!(v["raw"]["rules"].get("GamePassword"), None);
    assert_no_bad_requests(&served);
}

/// `opengsq unreal2 --function <function>` against `served`.
async fn opengsq(served: &Served, function: &'static str) -> Result<Value, String> {
    let Some(opengsq) = Opengsq::require() else {
        return Err("skipped".into());
    };
    let addr = served.addr;
    tokio::task::spawn_blocking(move || opengsq.query("unreal2", function, addr))
        .await
        .expect("opengsq thread")
        .map_err(|out| format!("{out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_get_details_reads_ut2004_style() {
    if Opengsq::require().is_none() {
        return;
    }
    let served = serve(Style::Ut2004, state()).await;
    let v = opengsq(&served, "get_details").await.expect("get_details");
    // opengsq decodes strings as UTF-8 ignoring errors: the Latin-1 'é' (e9) vanishes
    // (spec §15).
    assert_eq!(
        v,
        json!({
            "server_id": 0, "server_ip": "", "game_port": 7777, "query_port": 0,
            "server_name": "Muster Caf", "map_name": "DM-Rankin", "game_type": "xTeamGame",
            "num_players": 2, "max_players": 16, "ping": 0, "flags": 0, "skill": "1",
        })
    );
    assert_no_bad_requests(&served);
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_get_details_quirk_fails_on_ut2003_layout() {
    if Opengsq::require().is_none() {
        return;
    }
    let served = serve(Style::Ut2003, state()).await;
    // opengsq always reads Flags and SkillLevel, which the UT2003 layout lacks (spec §12.3).
    let err = opengsq(&served, "get_details")
        .await
        .expect_err("opengsq cannot read the UT2003 info layout");
    assert!(err.contains("unpack requires a buffer of 4 bytes"), "{err}");
    assert_no_bad_requests(&served);
}

async fn opengsq_rules_and_players(style: Style) {
    if Opengsq::require().is_none() {
        return;
    }
    let served = serve(style, state()).await;
    let rules = opengsq(&served, "get_rules").await.expect("get_rules");
    // opengsq collects Mutator values under "Mutators".
    assert_eq!(
        rules,
        json!({
            "Mutators": ["MutA", "MutB"],
            "ServerVersion": "3369",
            "GamePassword": "True",
            "AdminName": "Bob",
        })
    );
    let players = opengsq(&served, "get_players").await.expect("get_players");
    // UTF-16 names come out garbled: "Betа" (U+0430) as "Bet0" (spec §15).
    assert_eq!(
        players,
        json!([
            {"id": 1, "name": "Alpha", "ping": 40, "score": 12, "stats_id": 0x2000_0000},
            {"id": 2, "name": "Bet0", "ping": 60, "score": -3, "stats_id": 0x4000_0000},
            {"id": 3, "name": "Watcher", "ping": 100, "score": 0, "stats_id": 0},
        ])
    );
    assert_no_bad_requests(&served);
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_get_rules_and_players_read_ut2004_style() {
    opengsq_rules_and_players(Style::Ut2004).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_get_rules_and_players_read_ut2003_style() {
    opengsq_rules_and_players(Style::Ut2003).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_empty_server_quirk_get_players_times_out() {
    if Opengsq::require().is_none() {
        return;
    }
    let served = serve(Style::Ut2004, empty_state()).await;
    // No players datagram for an empty list (spec §7): opengsq waits for one and gives up.
    let err = opengsq(&served, "get_players")
        .await
        .expect_err("no players datagram");
    assert!(err.contains("timed out"), "{err}");
    let details = opengsq(&served, "get_details").await.expect("get_details");
    assert_eq!(details["num_players"], 0);
    assert_no_bad_requests(&served);
}

/// The §12.2 colour-coded name `ESC ff 01 01 Red ESC 01 01 ff Blue` (single-byte).
const COLOURED: &str = "\u{1b}\u{ff}\u{1}\u{1}Red\u{1b}\u{1}\u{1}\u{ff}Blue";

#[tokio::test(flavor = "multi_thread")]
async fn colour_codes_quirk_each_peer_strips_its_own_way() {
    let (Some(qstat), Some(gamedig), Some(opengsq)) =
        (Qstat::require(), Gamedig::require(), Opengsq::require())
    else {
        return;
    };
    let mut st = state();
    st.name = COLOURED.into();
    st.players[0].name = COLOURED.into();
    let served = serve(Style::Ut2004, st).await;
    let addr = served.addr;
    let (q, g, details, players) = tokio::task::spawn_blocking(move || {
        (
            qstat.query("ut2004s", addr),
            gamedig.query("unrealtournament2004", addr),
            opengsq.query("unreal2", "get_details", addr),
            opengsq.query("unreal2", "get_players", addr),
        )
    })
    .await
    .expect("peer thread");
    // qstat's name transformation drops the character after each colour code (spec §15).
    assert_eq!(q["name"], "edlue", "{q:#}");
    assert_eq!(q["players"][2]["name"], "edlue");
    // gamedig and opengsq strip the codes.
    assert_eq!(g["name"], "RedBlue", "{g:#}");
    assert_eq!(g["players"][0]["name"], "RedBlue");
    let details = details.expect("get_details");
    assert_eq!(details["server_name"], "RedBlue");
    let players = players.expect("get_players");
    assert_eq!(players[0]["name"], "RedBlue");
    assert_no_bad_requests(&served);
}

#[tokio::test(flavor = "multi_thread")]
async fn long_names_quirk_two_byte_length() {
    let (Some(qstat), Some(gamedig), Some(opengsq)) =
        (Qstat::require(), Gamedig::require(), Opengsq::require())
    else {
        return;
    };
    let server_name = format!("Long{}", "N".repeat(66)); // N = 71: `47 01`
    let player_name = "P".repeat(65); // N = 66: `42 01`
    let mut st = state();
    st.name.clone_from(&server_name);
    st.players[0].name.clone_from(&player_name);
    let served = serve(Style::Ut2004, st).await;
    let addr = served.addr;
    let (q, g, details, players) = tokio::task::spawn_blocking(move || {
        (
            qstat.query("ut2004s", addr),
            gamedig.query("unrealtournament2004", addr),
            opengsq.query("unreal2", "get_details", addr),
            opengsq.query("unreal2", "get_players", addr),
        )
    })
    .await
    .expect("peer thread");
    // qstat decodes the two-byte length of single-byte strings.
    assert_eq!(q["name"], server_name.as_str(), "{q:#}");
    assert_eq!(q["players"][2]["name"], player_name.as_str());
    assert_eq!(q["players"][2]["score"], 12);
    // gamedig reads single-byte strings up to the NUL and drops the stray `01` as a control
    // character, so long names come through (spec §15).
    assert_eq!(g["name"], server_name.as_str(), "{g:#}");
    assert_eq!(g["players"][0]["name"], player_name.as_str());
    assert_eq!(g["players"][0]["raw"]["score"], 12);
    let details = details.expect("get_details");
    // Deviation from spec §15: opengsq reads the *server name* up to the NUL, so a long one
    // is read correctly (the map after it too).
    assert_eq!(details["server_name"], server_name.as_str());
    assert_eq!(details["map_name"], "DM-Rankin");
    // As spec §15 says for player names: opengsq reads one length byte (`42`), so the record
    // is misaligned and get_players crashes.
    let err = players.expect_err("opengsq misreads a two-byte player-name length");
    assert!(
        err.to_string()
            .contains("unpack requires a buffer of 4 bytes"),
        "{err}"
    );
    assert_no_bad_requests(&served);
}
