//! `muster query --protocol teeworlds` against teeworlds-server 0.7.5 and DDNet-Server 16.4, and
//! against qstat's `-tees` where qstat is right.

use muster_testkit::{DdnetServer, Qstat, TeeworldsServer, free_udp_port};
use serde_json::Value;

use crate::common::muster;

/// The `sv_name` of both lab configurations after its prefix (`TW07 Lab ` / `DDNet Lab `).
const NAME_TAIL: &str = "\u{dc}n\u{ef}c\u{f6}d\u{e9} \u{2605} | a;b \"q\" \u{540d}\u{524d}";

/// `muster query -p teeworlds -f json` of one server: its result object (asserting exit 0).
fn query(addr: &str) -> Value {
    let run = muster(&[
        "query",
        "-p",
        "teeworlds",
        "-f",
        "json",
        "--timeout",
        "500ms",
        "--retries",
        "2",
        addr,
    ]);
    let v = run.json();
    assert_eq!(run.code, Some(0), "{v}\n{}", run.stderr);
    let r = v[0].clone();
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["partial"], false, "{r}");
    assert_eq!(r["address"], addr, "{r}");
    r
}

#[test]
fn teeworlds_075_name_map_and_counts() {
    let Some(tw) = TeeworldsServer::require() else {
        return;
    };
    let server = tw.start(free_udp_port(), &[]);
    let r = query(&server.addr().to_string());
    assert_eq!(r["name"], format!("TW07 Lab {NAME_TAIL}").as_str(), "{r}");
    assert_eq!(r["map"], "dm1", "{r}");
    assert_eq!(r["game_type"], "DM", "{r}");
    assert_eq!(r["num_players"], 0, "{r}");
    assert_eq!(r["max_players"], 8, "sv_player_slots 8: {r}");
    assert_eq!(r["players"].as_array().map(Vec::len), Some(0), "{r}");
    assert_eq!(r["version"], "0.7.5", "{r}");
}

#[test]
fn ddnet_164_name_map_and_counts() {
    let Some(dd) = DdnetServer::require() else {
        return;
    };
    let server = dd.start(free_udp_port(), &[]);
    let r = query(&server.addr().to_string());
    // The extended request gets the name without the ` [0/64]` suffix of the 0.6 reply.
    assert_eq!(r["name"], format!("DDNet Lab {NAME_TAIL}").as_str(), "{r}");
    assert_eq!(r["map"], "Tutorial", "{r}");
    assert_eq!(r["num_players"], 0, "{r}");
    assert_eq!(r["max_players"], 64, "sv_max_clients 64: {r}");
    assert_eq!(r["players"].as_array().map(Vec::len), Some(0), "{r}");
}

/// qstat's `-json` drops every non-ASCII character (peers.md, qstat notes).
fn qstat_mangle(name: &str) -> String {
    name.chars().filter(char::is_ascii).collect()
}

/// qstat shows DDNet's 0.6 name, which ends in ` [<players>/<slots>]`.
fn strip_count_suffix(name: &str) -> &str {
    match name.rfind(" [") {
        Some(i) if name.ends_with(']') => &name[..i],
        _ => name,
    }
}

#[test]
fn ddnet_164_agrees_with_qstat() {
    let Some(dd) = DdnetServer::require() else {
        return;
    };
    let Some(qstat) = Qstat::require() else {
        return;
    };
    let server = dd.start(free_udp_port(), &[]);
    let ours = query(&server.addr().to_string());
    let theirs = qstat.query("tees", server.addr());
    assert!(
        theirs["status"] == "online" || theirs["status"] == "UP",
        "qstat: {theirs}"
    );
    let their_name = theirs["name"].as_str().unwrap_or_default();
    assert_eq!(
        strip_count_suffix(their_name),
        qstat_mangle(ours["name"].as_str().unwrap_or_default()),
        "ours {ours}\nqstat {theirs}"
    );
    assert_eq!(ours["map"], theirs["map"], "ours {ours}\nqstat {theirs}");
    // qstat reads the 0.6 counts, capped at 16 slots: the player count agrees, the slots do not.
    assert_eq!(
        ours["num_players"], theirs["numplayers"],
        "ours {ours}\nqstat {theirs}"
    );
    assert_eq!(
        theirs["maxplayers"], 16,
        "qstat's capped 0.6 slots: {theirs}"
    );
}
