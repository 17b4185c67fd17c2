//! `muster query -p a2s` end to end on loopback, against a server played by the test: it asks
//! for a challenge on every request (as servers have since December 2020), answers INFO with
//! the extra-data fields, and PLAYER and RULES once the challenge comes back.

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use muster_proto::a2s::packet::{EDF_GAME_ID, EDF_PORT, Info, Packet, PlayerEntry, Players, Rules};

const CHALLENGE: u32 = 0x1357_9BDF;

/// Serves one A2S server on 127.0.0.1 until the returned flag is set.
fn serve() -> (SocketAddr, Arc<AtomicBool>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let addr = sock.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&stop);
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !done.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let reply = match Packet::decode(&buf[..n]) {
                Ok(Packet::InfoRequest {
                    challenge: Some(CHALLENGE),
                }) => Packet::Info(Box::new(info())),
                // Anything else (no challenge, -1, a stale one) is asked for the challenge.
                Ok(Packet::PlayerRequest {
                    challenge: CHALLENGE,
                }) => Packet::Players(players()),
                Ok(Packet::RulesRequest {
                    challenge: CHALLENGE,
                }) => Packet::Rules(rules()),
                Ok(
                    Packet::InfoRequest { .. }
                    | Packet::PlayerRequest { .. }
                    | Packet::RulesRequest { .. },
                ) => Packet::Challenge(CHALLENGE),
                _ => continue,
            };
            let mut out = Vec::new();
            reply.encode(&mut out);
            let _ = sock.send_to(&out, from);
        }
    });
    (addr, stop)
}

fn info() -> Info {
    Info {
        protocol: 17,
        name: b"Dust Only 24/7".to_vec(),
        map: b"de_dust2".to_vec(),
        folder: b"cstrike".to_vec(),
        game: b"Counter-Strike: Source".to_vec(),
        app_id: 240,
        players: 2,
        max_players: 24,
        bots: 1,
        server_type: b'd',
        environment: b'l',
        visibility: 0,
        vac: 1,
        version: b"1.0.0.71".to_vec(),
        edf: Some(EDF_PORT | EDF_GAME_ID),
        port: Some(27015),
        game_id: Some(240),
        ..Info::default()
    }
}

fn players() -> Players {
    let p = |name: &str, score, duration| PlayerEntry {
        name: name.as_bytes().to_vec(),
        score,
        duration,
        ..PlayerEntry::default()
    };
    Players {
        declared: 2,
        players: vec![p("Gordon", 12, 600.5), p("BOT Barney", 3, 60.0)],
        truncated: false,
    }
}

fn rules() -> Rules {
    Rules {
        declared: 2,
        rules: vec![
            (b"mp_timelimit".to_vec(), b"30".to_vec()),
            (b"sv_gravity".to_vec(), b"800".to_vec()),
        ],
        truncated: false,
    }
}

#[test]
fn a2s_query_goes_through_the_challenges_and_reads_info_players_and_rules() {
    let (addr, stop) = serve();
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["query", "-p", "a2s", &addr.to_string(), "-f", "json"])
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v[0];
    assert_eq!(s["status"], "ok", "{s}");
    assert_eq!(s["protocol"], "a2s");
    assert_eq!(s["name"], "Dust Only 24/7");
    assert_eq!(s["map"], "de_dust2");
    assert_eq!(s["num_players"], 2, "{s}");
    assert_eq!(s["max_players"], 24);
    assert_eq!(s["game"], "cstrike", "{s}");
    let names: Vec<_> = s["players"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Gordon", "BOT Barney"]);
    assert_eq!(s["players"][0]["score"], 12);
    assert_eq!(s["rules"]["mp_timelimit"], "30", "{s}");
    assert_eq!(s["raw"]["app_id"], 240, "{s}");
}
