//! Conformance of the gamespy1 responder with real client peers: qstat (`-sms`, `-gps`,
//! `-uns`), gamedig (`serioussam`, `sstse`, `unrealtournament`) and opengsq (`ssc`,
//! `gamespy1`) read exactly the configured state.
//!
//! Known peer manglings asserted as such (measured with this suite; `docs/protocols/peers.md`
//! §3.4, §7; `gamespy1.md` §14):
//! * qstat `-json` (`-sms`, `-gps`) drops non-ASCII characters (`Café` → `Caf`), and
//!   `-uns` clears their high bit instead (`é` 0xE9 → `i`, `ô` 0xF4 → `t`);
//! * qstat lists GameSpy players in reverse order;
//! * opengsq drops non-ASCII characters;
//! * gamedig turns `gamever` `1.10` into the number 1.1;
//! * nobody strips Serious Sam's `^o…^r` name wrapping.

use std::net::SocketAddr;

use muster_proto::gamespy1::respond::{GameSpyResponder, Profile};
use muster_proto::respond::{PlayerState, ServerState};
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

/// A UT99-style server with Latin-1 text in the name, a player name and a rule.
fn unreal_state() -> ServerState {
    ServerState {
        name: "Muster Café Server".into(),
        map: "DM-Deck16".into(),
        game_type: "DeathMatchPlus".into(),
        game_port: 7777,
        max_players: 16,
        players: vec![
            player("Jérôme", 12, 35, Some(1)),
            player("Alpha", -3, 60, Some(0)),
        ],
        rules: vec![
            ("timelimit".into(), "20".into()),
            ("AdminName".into(), "Zoë".into()),
        ],
        ..ServerState::default()
    }
}

/// The Serious Sam example server of `gamespy1.md` §9.2, with one Latin-1 player name.
fn serious_sam_state() -> ServerState {
    ServerState {
        name: "Awesome Server".into(),
        map: "Yodeller".into(),
        game_type: "Fragmatch".into(),
        game_port: 25600,
        max_players: 16,
        players: vec![player("Sam", 3, 40, None), player("Jérôme", 1, 70, None)],
        ..ServerState::default()
    }
}

async fn serve(profile: Profile, state: ServerState) -> Served {
    serve_loopback(GameSpyResponder::with_profile(profile), state, 0).await
}

/// Run a blocking peer while the responder keeps serving on the runtime.
async fn peer<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("peer thread")
}

async fn qstat(kind: &'static str, addr: SocketAddr) -> Option<Value> {
    let q = Qstat::require()?;
    Some(peer(move || q.query(kind, addr)).await)
}

async fn gamedig(game: &'static str, addr: SocketAddr) -> Option<Value> {
    let g = Gamedig::require()?;
    Some(peer(move || g.query(game, addr)).await)
}

async fn opengsq(protocol: &'static str, addr: SocketAddr) -> Option<Value> {
    let o = Opengsq::require()?;
    let out = peer(move || o.query(protocol, "get_status", addr)).await;
    Some(out.unwrap_or_else(|run| panic!("opengsq {protocol} failed\n{run}")))
}

fn qstat_players(v: &Value) -> Vec<(String, i64, i64)> {
    v["players"]
        .as_array()
        .expect("players")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["score"].as_i64().unwrap(),
                p["ping"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_sms_reads_serious_sam_status() {
    let served = serve(Profile::SeriousSam, serious_sam_state()).await;
    let Some(v) = qstat("sms", served.addr).await else {
        return;
    };
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["name"], "Awesome Server");
    assert_eq!(v["map"], "Yodeller");
    assert_eq!(v["gametype"], "Fragmatch");
    assert_eq!(v["numplayers"], 2);
    assert_eq!(v["maxplayers"], 16);
    // Reverse order, `^o…^r` kept, non-ASCII dropped by qstat's JSON output.
    assert_eq!(
        qstat_players(&v),
        [("^oJrme^r".into(), 1, 70), ("^oSam^r".into(), 3, 40)]
    );
    assert_eq!(
        v["players"][0].get("team"),
        None,
        "Serious Sam sends no team"
    );
    let rules = &v["rules"];
    assert_eq!(rules["gamename"], "serioussamse");
    assert_eq!(rules["gamever"], "1.10");
    assert_eq!(rules["location"], "Heartland");
    assert_eq!(rules["hostport"], "25600");
    assert_eq!(rules["difficulty"], "Normal");
    assert_eq!(rules["ammosstay"], "0");
}

/// `gamespy1.md` §11 Q5: a split Serious Sam reply (the continuation carries no `queryid`)
/// is merged in order by qstat.
#[tokio::test(flavor = "multi_thread")]
async fn qstat_sms_merges_a_split_serious_sam_reply() {
    let mut state = serious_sam_state();
    state.players = (0..40)
        .map(|i| player(&format!("Gunner number {i:02} of forty"), i, 30, None))
        .collect();
    let served = serve(Profile::SeriousSam, state).await;
    let Some(v) = qstat("sms", served.addr).await else {
        return;
    };
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["numplayers"], 40);
    let mut players = qstat_players(&v);
    players.reverse();
    let want: Vec<(String, i64, i64)> = (0..40)
        .map(|i| (format!("^oGunner number {i:02} of forty^r"), i, 30))
        .collect();
    assert_eq!(players, want);
    assert!(
        crate::counted::settled(&served.stats.sent, 2).await >= 2,
        "the reply must have been split"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn qstat_gps_reads_ut2003() {
    let served = serve(Profile::Ut2003, unreal_state()).await;
    let Some(v) = qstat("gps", served.addr).await else {
        return;
    };
    assert_eq!(v["status"], "online", "{v}");
    // Non-ASCII dropped by qstat's JSON output.
    assert_eq!(v["name"], "Muster Caf Server");
    assert_eq!(v["map"], "DM-Deck16");
    assert_eq!(v["gametype"], "DeathMatchPlus");
    assert_eq!(v["numplayers"], 2);
    assert_eq!(v["maxplayers"], 16);
    assert_eq!(
        qstat_players(&v),
        [("Alpha".into(), -3, 60), ("Jrme".into(), 12, 35)]
    );
    assert_eq!(v["players"][0]["team"], 0);
    assert_eq!(v["players"][1]["team"], 1);
    let rules = &v["rules"];
    assert_eq!(rules["gamename"], "ut2");
    assert_eq!(rules["gamever"], "2225");
    assert_eq!(rules["timelimit"], "20");
    assert_eq!(rules["AdminName"], "Zo");
    assert_eq!(rules["password"], "False");
}

/// A name with a backslash: Muster removes the `\` (`gamespy1.md` §13 decision 1), so qstat
/// reads `Kee/n`.
#[tokio::test(flavor = "multi_thread")]
async fn qstat_gps_reads_ut99_backslash_name_without_the_backslash() {
    let mut state = unreal_state();
    state.players = vec![player("Kee\\/n", 5, 40, None), player("Alpha", 2, 60, None)];
    let served = serve(Profile::Ut99, state).await;
    let Some(v) = qstat("gps", served.addr).await else {
        return;
    };
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(
        qstat_players(&v),
        [("Alpha".into(), 2, 60), ("Kee/n".into(), 5, 40)]
    );
    assert_eq!(v["rules"]["gamename"], "ut");
    assert_eq!(v["rules"]["gamever"], "451");
}

/// `-uns` keeps 7 bits of each non-ASCII byte instead of dropping it: `Jérôme` reads
/// `Jirtme`, `Café` reads `Cafi` — but for host names its JSON drops them like `-gps`.
#[tokio::test(flavor = "multi_thread")]
async fn qstat_uns_reads_ut99_and_unreal227() {
    for (profile, gamename, gamever) in [
        (Profile::Ut99, "ut", "451"),
        (Profile::Unreal227, "unreal", "227k"),
    ] {
        let served = serve(profile, unreal_state()).await;
        let Some(v) = qstat("uns", served.addr).await else {
            return;
        };
        assert_eq!(v["status"], "online", "{profile:?}: {v}");
        assert_eq!(v["name"], "Muster Caf Server");
        assert_eq!(v["map"], "DM-Deck16");
        assert_eq!(v["numplayers"], 2);
        assert_eq!(v["maxplayers"], 16);
        assert_eq!(
            qstat_players(&v),
            [("Alpha".into(), -3, 60), ("Jirtme".into(), 12, 35)],
            "{profile:?}"
        );
        assert_eq!(v["rules"]["gamename"], gamename);
        assert_eq!(v["rules"]["gamever"], gamever);
        assert_eq!(v["rules"]["timelimit"], "20");
    }
}

fn gamedig_players(v: &Value) -> Vec<Value> {
    v["players"]
        .as_array()
        .expect("players")
        .iter()
        .map(|p| json!([p["name"], p["raw"]["frags"], p["raw"]["ping"]]))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn gamedig_serioussam_and_sstse_read_serious_sam_status() {
    let served = serve(Profile::SeriousSam, serious_sam_state()).await;
    for game in ["serioussam", "sstse"] {
        let Some(v) = gamedig(game, served.addr).await else {
            return;
        };
        assert_eq!(v["name"], "Awesome Server", "{game}: {v}");
        assert_eq!(v["map"], "Yodeller");
        assert_eq!(v["numplayers"], 2);
        assert_eq!(v["maxplayers"], 16);
        assert_eq!(v["password"], false);
        // gamedig reads Windows-1252 correctly and keeps `^o…^r`.
        assert_eq!(
            gamedig_players(&v),
            [json!(["^oSam^r", 3, 40]), json!(["^oJérôme^r", 1, 70])]
        );
        // gamedig turns `1.10` into the number 1.1.
        assert_eq!(v["version"], "1.1");
        assert_eq!(v["raw"]["gamename"], "serioussamse");
        assert_eq!(v["raw"]["gametype"], "Fragmatch");
        assert_eq!(v["connect"], "127.0.0.1:25600", "built from hostport");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn gamedig_unrealtournament_reads_ut99() {
    let served = serve(Profile::Ut99, unreal_state()).await;
    let Some(v) = gamedig("unrealtournament", served.addr).await else {
        return;
    };
    assert_eq!(v["name"], "Muster Café Server", "{v}");
    assert_eq!(v["map"], "DM-Deck16");
    assert_eq!(v["numplayers"], 2);
    assert_eq!(
        gamedig_players(&v),
        [json!(["Jérôme", 12, 35]), json!(["Alpha", -3, 60])]
    );
    assert_eq!(v["players"][0]["raw"]["team"], 1);
    assert_eq!(v["raw"]["adminname"], "Zoë");
    assert_eq!(v["version"], "451");
}

fn opengsq_players(v: &Value) -> Vec<Value> {
    v["players"]
        .as_array()
        .expect("players")
        .iter()
        .map(|p| json!([p["player"], p["frags"], p["ping"]]))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_ssc_reads_serious_sam_status() {
    let served = serve(Profile::SeriousSam, serious_sam_state()).await;
    let Some(v) = opengsq("ssc", served.addr).await else {
        return;
    };
    let info = &v["info"];
    assert_eq!(info["hostname"], "Awesome Server", "{v}");
    assert_eq!(info["mapname"], "Yodeller");
    assert_eq!(info["gametype"], "Fragmatch");
    assert_eq!(info["numplayers"], "2");
    assert_eq!(info["maxplayers"], "16");
    assert_eq!(info["gamename"], "serioussamse");
    assert_eq!(info["gamever"], "1.10");
    // opengsq drops non-ASCII characters.
    assert_eq!(
        opengsq_players(&v),
        [
            json!(["^oSam^r", "3", "40"]),
            json!(["^oJrme^r", "1", "70"])
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn opengsq_gamespy1_reads_ut99() {
    let served = serve(Profile::Ut99, unreal_state()).await;
    let Some(v) = opengsq("gamespy1", served.addr).await else {
        return;
    };
    let info = &v["info"];
    // opengsq drops non-ASCII characters.
    assert_eq!(info["hostname"], "Muster Caf Server", "{v}");
    assert_eq!(info["mapname"], "DM-Deck16");
    assert_eq!(info["numplayers"], "2");
    assert_eq!(info["maxplayers"], "16");
    assert_eq!(info["gamename"], "ut");
    assert_eq!(info["adminname"], "Zo");
    assert_eq!(
        opengsq_players(&v),
        [json!(["Jrme", "12", "35"]), json!(["Alpha", "-3", "60"])]
    );
    assert_eq!(v["players"][0]["team"], "1");
}
