//! One game key: `muster query` and `muster scan` results carry the key a master files the
//! server under (`ddnet`, `serioussamse`, `ut`, …) and its display name, and
//! `--filter game=` matches that key, not the game type (`gametype=` does that).

use crate::common::{Proc, muster_json as json, spawn};

/// `muster emulate --config <farm>`, once it says it listens on all `servers` sockets.
fn emulate(farm: &std::path::Path, servers: usize) -> Proc {
    let (p, lines) = spawn(&["emulate", "--config", farm.to_str().unwrap()]);
    let lines: Vec<String> = lines.take(servers).map(Result::unwrap).collect();
    assert!(
        lines.len() == servers && lines.iter().all(|l| l.starts_with("listening ")),
        "{lines:?}"
    );
    p
}

/// A free game port whose next port is free too (the query port of GameAgent and GameSpy).
fn port_pair() -> String {
    let pair = muster_testkit::net::udp_consecutive(2);
    pair[0].local_addr().unwrap().port().to_string()
}

/// A `[[server]]` of a farm file, playing CTF.
fn server(protocol: &str, port: &str, name: &str, extra: &str) -> String {
    format!(
        "[[server]]\nprotocol = \"{protocol}\"\nport = {port}\nname = \"{name}\"\n\
         game_type = \"CTF\"\n{extra}\n"
    )
}

#[test]
fn results_carry_the_game_key_and_game_filters_by_it() {
    let (tw, ga, gs) = (port_pair(), port_pair(), port_pair());
    let dir = std::env::temp_dir().join(format!("muster-game-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let farm = dir.join("farm.toml");
    let text = format!(
        "seed = 1\nbind = \"127.0.0.1\"\n{}{}{}",
        server("teeworlds", &tw, "Tee", ""),
        server("gameagent", &ga, "Sam", ""),
        server("gamespy1", &gs, "UT", "style = \"ut99\""),
    );
    std::fs::write(&farm, text).unwrap();
    let _servers = emulate(&farm, 3);

    let fast = ["--timeout", "1s", "--retries", "3"];
    let one = |protocol: &str, port: &str| {
        let addr = format!("127.0.0.1:{port}");
        let v = json(&[&["query", "-p", protocol, &addr][..], &fast].concat());
        assert_eq!(v[0]["status"], "ok", "{v}");
        v[0].clone()
    };
    let tee = one("teeworlds", &tw);
    assert_eq!(tee["game"], "ddnet", "{tee}");
    assert_eq!(tee["game_name"], "DDNet");
    let sam = one("gameagent", &ga);
    assert_eq!(sam["game"], "serioussamse", "{sam}");
    assert_eq!(sam["game_name"], "Serious Sam: The Second Encounter");
    let ut = one("gamespy1", &gs);
    assert_eq!(ut["game"], "ut", "{ut}");
    assert_eq!(ut["game_name"], "Unreal Tournament");

    // The same three in one scan, filtered by game key.
    let list = dir.join("servers.txt");
    let lines =
        format!("teeworlds 127.0.0.1:{tw}\ngameagent 127.0.0.1:{ga}\ngamespy1 127.0.0.1:{gs}\n");
    std::fs::write(&list, lines).unwrap();
    let list = list.to_str().unwrap();
    let scan = |filter: &str| {
        let v = json(&[&["scan", "--servers", list, "--filter", filter][..], &fast].concat());
        let mut names: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap_or("").to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(scan("game=ddnet"), ["Tee"]);
    assert_eq!(scan("game=SeriousSamSE"), ["Sam"]);
    assert_eq!(scan("game=ut"), ["UT"]);
    // The game type is not the game: all three play CTF.
    assert_eq!(ut["game_type"], "CTF", "{ut}");
    assert!(scan("game=ctf").is_empty());
    assert_eq!(scan("gametype=ctf"), ["Sam", "Tee", "UT"]);
    let _ = std::fs::remove_dir_all(&dir);
}
