//! Pure mapping between the management protocol's game servers and registry records.
//!
//! A management registration becomes a record keyed `bomberman/<address>:<port>` with the
//! connection id as instance; its name and lobby state live in the record's [`PollInfo`]
//! (name, players, `game_type` "Standard A" / "Standard A+B", and the rules `isLobbyOpen` and
//! `gameplayMode`, which [`listed`] reads back). No I/O, no clock.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use muster_proto::limit::SourceKey;
use muster_proto::mgmt::{
    AddressKind, GamePort, GameServer, GameplayMode, ListedGameServer, MaxPlayers, PlayerCount,
    ServerAddress, ServerListAnswer, Stats,
};

use muster_core::registry::{
    Face, GameAddr, MAX_POLL_TEXT, PollFields, PollInfo, Record, Registration, Rules, ServerKey,
};

/// The game name management registrations are filed under.
pub(crate) const GAME: &str = "bomberman";
const RULE_LOBBY: &str = "isLobbyOpen";
const RULE_MODE: &str = "gameplayMode";

/// The longest `serverName` kept, in characters (Unicode scalar values, so up to 1,024 bytes
/// of UTF-8): the registry's limit on names. Real names are a few dozen characters.
pub(crate) const MAX_NAME_CHARS: usize = MAX_POLL_TEXT;

/// Whether the registry can keep `server`'s name exactly: at most [`MAX_NAME_CHARS`]
/// characters, and no NUL (the registry's texts cannot hold one).
pub(crate) fn name_fits(server: &GameServer) -> bool {
    let name = server.name();
    !name.contains('\0') && name.chars().count() <= MAX_NAME_CHARS
}

/// The record address of `server`: an IP socket address when the text is the canonical
/// spelling of the IP (so it prints back identically), otherwise the text kept verbatim.
pub(crate) fn game_addr(server: &GameServer) -> GameAddr {
    let text = server.address().as_str();
    let port = server.port().get();
    let ip: Option<IpAddr> = match server.address().kind() {
        AddressKind::Ipv4(ip) => Some(ip.into()),
        AddressKind::Ipv6(ip) => Some(ip.into()),
        AddressKind::Hostname => None,
    };
    match ip {
        Some(ip) if ip.to_string() == text => GameAddr::Ip(SocketAddr::new(ip, port)),
        _ => GameAddr::Host {
            host: text.into(),
            port,
        },
    }
}

/// The registry key of `server` registered on connection `conn`.
pub(crate) fn key(server: &GameServer, conn: u64) -> ServerKey {
    ServerKey::new(GAME, game_addr(server)).with_instance(conn)
}

/// The registration of `server` on connection `conn`, from the peer address `peer`.
pub(crate) fn registration(server: &GameServer, conn: u64, peer: IpAddr) -> Registration {
    Registration {
        key: key(server, conn),
        face: Face::Mgmt,
        game_port: Some(server.port().get()),
        query_addr: None,
        query_protocol: None,
        source: SourceKey::of(peer),
    }
}

/// The record info for `server` in state `stats`.
pub(crate) fn info(server: &GameServer, stats: &Stats) -> PollInfo {
    let mode = match stats.mode {
        GameplayMode::StandardA => "Standard A",
        GameplayMode::StandardAB => "Standard A+B",
    };
    PollInfo::from(PollFields {
        name: server.name().into(),
        game_type: mode.into(),
        num_players: stats.current.get(),
        max_players: u32::from(stats.max.get()),
        rules: Rules::new([
            (RULE_LOBBY, stats.lobby_open.to_string()),
            (RULE_MODE, stats.mode.code().to_string()),
        ]),
        game_port: Some(server.port().get()),
        ..PollFields::default()
    })
}

fn rule<'a>(info: &'a PollInfo, key: &str) -> Option<&'a str> {
    info.rules().iter().find(|&(k, _)| k == key).map(|(_, v)| v)
}

/// The answer entry of a management record; `None` for a record this face did not write
/// (or one whose stored fields no longer validate).
pub(crate) fn listed(rec: &Record) -> Option<ListedGameServer> {
    if rec.face != Face::Mgmt {
        return None;
    }
    let info = rec.info.as_ref()?;
    let (text, port) = match &rec.key.addr {
        GameAddr::Ip(sa) => (sa.ip().to_string(), sa.port()),
        GameAddr::Host { host, port } => (host.to_string(), *port),
    };
    let address = ServerAddress::parse(&text).ok()?;
    let port = GamePort::new(port).ok()?;
    let server = GameServer::new(info.name(), address, port).ok()?;
    let lobby_open = match rule(info, RULE_LOBBY)? {
        "true" => true,
        "false" => false,
        _ => return None,
    };
    let mode = GameplayMode::from_code(rule(info, RULE_MODE)?.parse().ok()?)?;
    let stats = Stats {
        current: PlayerCount::new(info.num_players).ok()?,
        max: MaxPlayers::new(u8::try_from(info.max_players).ok()?).ok()?,
        lobby_open,
        mode,
    };
    Some(ListedGameServer { server, stats })
}

/// The `msRQueryGameServers` content for `entries` (each with the source that registered it,
/// in list order), for the `turn`-th answer of the face: as many as fit one frame (§12),
/// open lobbies first. Within open and within closed lobbies the sources take turns, one
/// entry each per round: when the frame is full, no source has more than one entry more than
/// any other source that had more to give, so many registrations from a few sources cannot
/// push another source's server out. The turns start at a source that moves on by one with
/// every answer, and each source's own entries start one further along, so what is left out
/// of a full answer changes from answer to answer. Returns the answer and how many were left
/// out.
pub(crate) fn answer(
    entries: Vec<(SourceKey, ListedGameServer)>,
    turn: u64,
) -> (ServerListAnswer, usize) {
    let (open, closed): (Vec<_>, Vec<_>) =
        entries.into_iter().partition(|(_, e)| e.stats.lobby_open);
    let mut ordered = Vec::new();
    for group in [open, closed] {
        take_turns(group, turn, &mut ordered);
    }
    ServerListAnswer::fitting(ordered)
}

/// Appends `entries` to `out` with the sources taking turns (see [`answer`]).
fn take_turns(
    entries: Vec<(SourceKey, ListedGameServer)>,
    turn: u64,
    out: &mut Vec<ListedGameServer>,
) {
    let mut slot: HashMap<SourceKey, usize> = HashMap::new();
    let mut queues: Vec<Vec<ListedGameServer>> = Vec::new();
    for (source, e) in entries {
        let i = *slot.entry(source).or_insert_with(|| {
            queues.push(Vec::new());
            queues.len() - 1
        });
        if let Some(q) = queues.get_mut(i) {
            q.push(e);
        }
    }
    if queues.is_empty() {
        return;
    }
    let step = |len: usize| usize::try_from(turn % len as u64).unwrap_or(0);
    let first = step(queues.len());
    queues.rotate_left(first);
    let mut queues: Vec<std::vec::IntoIter<ListedGameServer>> = queues
        .into_iter()
        .map(|mut q| {
            let at = step(q.len());
            q.rotate_left(at);
            q.into_iter()
        })
        .collect();
    loop {
        let before = out.len();
        out.extend(queues.iter_mut().filter_map(Iterator::next));
        if out.len() == before {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::Timestamp;

    fn server(name: &str, addr: &str, port: u16) -> GameServer {
        GameServer::new(
            name,
            ServerAddress::parse(addr).unwrap(),
            GamePort::new(port).unwrap(),
        )
        .unwrap()
    }

    fn record(s: &GameServer, stats: &Stats) -> Record {
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let mut r = Record::new(0, registration(s, 7, peer), Timestamp(1));
        r.info = Some(std::sync::Arc::new(info(s, stats)));
        r
    }

    #[test]
    fn addresses_keep_their_spelling() {
        let check = |text: &str, ip: bool| {
            let s = server("x", text, 20000);
            let a = game_addr(&s);
            assert_eq!(matches!(a, GameAddr::Ip(_)), ip, "{text}");
            let back = listed(&record(&s, &Stats::default())).unwrap();
            assert_eq!(back.server.address().as_str(), text);
        };
        check("192.168.0.10", true);
        check("fd40:9dc7:b528::1", true);
        check("::ffff:192.168.0.10", true);
        check("FD40:9DC7:B528::1", false);
        check("fd40:9dc7:b528:0:0:0:0:1", false);
        check("Bombergame.Example.ORG.", false);
        check("1e100.example", false);
    }

    #[test]
    fn record_round_trips_the_entry() {
        let s = server("Server von Bösewicht", "fd40:9dc7:b528::1", 30000);
        let stats = Stats {
            current: PlayerCount::new(22).unwrap(),
            max: MaxPlayers::new(3).unwrap(),
            lobby_open: false,
            mode: GameplayMode::StandardAB,
        };
        let r = record(&s, &stats);
        assert_eq!(r.key.instance, 7);
        assert_eq!(r.key.game, GAME);
        assert_eq!(listed(&r), Some(ListedGameServer { server: s, stats }));
    }

    #[test]
    fn foreign_or_broken_records_are_skipped() {
        let s = server("Feuerland", "192.168.0.10", 20000);
        let mut r = record(&s, &Stats::default());
        r.face = Face::GameSpy;
        assert_eq!(listed(&r), None);
        let mut r = record(&s, &Stats::default());
        r.info = None;
        assert_eq!(listed(&r), None);
        let mut r = record(&s, &Stats::default());
        if let Some(i) = r.info.as_mut() {
            std::sync::Arc::make_mut(i).max_players = 9;
        }
        assert_eq!(listed(&r), None);
    }

    fn source(n: u8) -> SourceKey {
        SourceKey::of(IpAddr::from([192, 0, 2, n]))
    }

    fn entry(name: &str, port: u16, lobby_open: bool) -> ListedGameServer {
        ListedGameServer {
            server: server(name, "192.168.0.1", port),
            stats: Stats {
                lobby_open,
                ..Stats::default()
            },
        }
    }

    #[test]
    fn open_lobbies_come_first() {
        let closed = entry("a", 1, false);
        let open = entry("b", 2, true);
        let (a, dropped) = answer(
            vec![(source(1), closed.clone()), (source(1), open.clone())],
            0,
        );
        assert_eq!(dropped, 0);
        assert_eq!(a.servers(), &[open, closed]);
    }

    #[test]
    fn sources_take_turns_and_the_start_rotates() {
        // Source 1 registered three servers before source 2 registered one.
        let e = |n: u16| entry(&format!("s{n}"), n, true);
        let entries = || {
            vec![
                (source(1), e(1)),
                (source(1), e(2)),
                (source(1), e(3)),
                (source(2), e(4)),
            ]
        };
        let names = |turn: u64| -> Vec<String> {
            answer(entries(), turn)
                .0
                .servers()
                .iter()
                .map(|s| s.server.name().to_owned())
                .collect()
        };
        assert_eq!(names(0), ["s1", "s4", "s2", "s3"]);
        assert_eq!(names(1), ["s4", "s2", "s3", "s1"]);
        assert_eq!(names(2), ["s3", "s4", "s1", "s2"]);
    }

    #[test]
    fn a_full_answer_keeps_every_source_in_it() {
        // Twelve sources with sixteen long-named servers each fill far more than a frame;
        // the server of a thirteenth source, registered last, is still in every answer.
        let long = "x".repeat(MAX_NAME_CHARS);
        let mut entries = Vec::new();
        for src in 1..=12u8 {
            for i in 0..16u16 {
                entries.push((
                    source(src),
                    entry(&long, u16::from(src) * 100 + i + 1, true),
                ));
            }
        }
        entries.push((source(13), entry("honest", 9999, true)));
        for turn in 0..40 {
            let (a, left_out) = answer(entries.clone(), turn);
            assert!(left_out > 0, "the answer is full");
            let names: Vec<&str> = a.servers().iter().map(|s| s.server.name()).collect();
            assert!(names.contains(&"honest"), "turn {turn}");
            let per_source = |src: u16| {
                a.servers()
                    .iter()
                    .filter(|s| s.server.port().get() / 100 == src)
                    .count()
            };
            let counts: Vec<usize> = (1..=12).map(per_source).collect();
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(max - min <= 1, "turn {turn}: {counts:?}");
        }
    }

    #[test]
    fn long_names_do_not_fit_the_registry() {
        assert!(name_fits(&server(&"ä".repeat(MAX_POLL_TEXT), "1.2.3.4", 1)));
        assert!(!name_fits(&server("Feuer\0land", "1.2.3.4", 1)));
        assert!(!name_fits(&server(
            &"x".repeat(MAX_POLL_TEXT + 1),
            "1.2.3.4",
            1
        )));
    }
}
