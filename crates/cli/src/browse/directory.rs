//! The built-in directory of public masters: for each game Muster knows, the masters a
//! player's browser asks for its servers, and how to ask them (`docs/browse.md` lists them).
//!
//! [`plan`] turns the chosen games and the `--master` flags into the list of asks the engine
//! makes; it is pure, so what `--game` and `--master` mean is tested without a network.

use crate::list::MasterKind;

/// One public master of a game, and what to ask it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Public {
    /// The master protocol.
    pub kind: MasterKind,
    /// Where: host:port, or the list's URL.
    pub source: &'static str,
    /// The game name the master files the game under (GameSpy gamename, dpmaster game name,
    /// Valve game folder); `None` where the master lists one game only or the ask names none.
    pub ask: Option<&'static str>,
    /// dpmaster: the protocol number of the game's clients.
    pub protocol_version: Option<i32>,
}

/// One game of the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Game {
    /// The game key, as in `muster_proto::games` and the results' `game`.
    pub key: &'static str,
    /// The name people know the game by.
    pub name: &'static str,
    /// Its public masters.
    pub masters: &'static [Public],
}

const fn public(kind: MasterKind, source: &'static str, ask: Option<&'static str>) -> Public {
    Public {
        kind,
        source,
        ask,
        protocol_version: None,
    }
}

const fn dpmaster(ask: Option<&'static str>, protocol: i32) -> Public {
    Public {
        kind: MasterKind::Quake3,
        source: "dpmaster.deathmask.net:27950",
        ask,
        protocol_version: Some(protocol),
    }
}

/// 333networks' GameSpy master, which lists the Unreal games and Serious Sam.
const NET333: &str = "master.333networks.com:28900";
/// Valve's master for Source-era games (its legacy master query, paged).
const STEAM: &str = "hl2master.steampowered.com:27011";
/// The two masters the Xash3D FWGS engine asks by default (Half-Life and its mods on Xash3D).
const XASH: &str = "ms.xash.su:27010";
const XASH2: &str = "ms2.xash.su:27010";

/// Every game with a public master.
pub(crate) const DIRECTORY: &[Game] = &[
    Game {
        key: "ddnet",
        name: "DDNet",
        masters: &[
            public(
                MasterKind::Ddnet,
                "https://master1.ddnet.org/ddnet/15/servers.json",
                None,
            ),
            public(
                MasterKind::Ddnet,
                "https://master2.ddnet.org/ddnet/15/servers.json",
                None,
            ),
            public(
                MasterKind::Ddnet,
                "https://master3.ddnet.org/ddnet/15/servers.json",
                None,
            ),
            public(
                MasterKind::Ddnet,
                "https://master4.ddnet.org/ddnet/15/servers.json",
                None,
            ),
        ],
    },
    Game {
        key: "teeworlds",
        name: "Teeworlds",
        masters: &[
            public(MasterKind::Teeworlds, "master1.teeworlds.com:8300", None),
            public(MasterKind::Teeworlds, "master2.teeworlds.com:8300", None),
            public(MasterKind::Teeworlds, "master3.teeworlds.com:8300", None),
            public(MasterKind::Teeworlds, "master4.teeworlds.com:8300", None),
        ],
    },
    Game {
        key: "unreal",
        name: "Unreal",
        masters: &[public(MasterKind::Gamespy, NET333, Some("unreal"))],
    },
    Game {
        key: "ut",
        name: "Unreal Tournament",
        masters: &[public(MasterKind::Gamespy, NET333, Some("ut"))],
    },
    Game {
        key: "ut2004",
        name: "Unreal Tournament 2004",
        masters: &[public(MasterKind::Gamespy, NET333, Some("ut2004"))],
    },
    Game {
        key: "serioussam",
        name: "Serious Sam: The First Encounter",
        masters: &[public(MasterKind::Gamespy, NET333, Some("serioussam"))],
    },
    Game {
        key: "serioussamse",
        name: "Serious Sam: The Second Encounter",
        masters: &[public(MasterKind::Gamespy, NET333, Some("serioussamse"))],
    },
    Game {
        key: "quake3arena",
        name: "Quake III Arena",
        masters: &[dpmaster(None, 68)],
    },
    Game {
        key: "baseoa",
        name: "OpenArena",
        masters: &[dpmaster(None, 71)],
    },
    Game {
        key: "xonotic",
        name: "Xonotic",
        masters: &[dpmaster(Some("Xonotic"), 3)],
    },
    Game {
        key: "q3urt43",
        name: "Urban Terror 4.3",
        masters: &[dpmaster(Some("q3urt43"), 68)],
    },
    Game {
        key: "tf",
        name: "Team Fortress 2",
        masters: &[public(MasterKind::Valve, STEAM, Some("tf"))],
    },
    Game {
        key: "cstrike",
        name: "Counter-Strike",
        masters: &[
            public(MasterKind::Valve, STEAM, Some("cstrike")),
            public(MasterKind::Valve, XASH, Some("cstrike")),
            public(MasterKind::Valve, XASH2, Some("cstrike")),
        ],
    },
    Game {
        key: "valve",
        name: "Half-Life",
        masters: &[
            public(MasterKind::Valve, XASH, Some("valve")),
            public(MasterKind::Valve, XASH2, Some("valve")),
        ],
    },
];

/// The directory's game of `key` (ASCII case-insensitive).
pub(crate) fn game(key: &str) -> Option<&'static Game> {
    DIRECTORY.iter().find(|g| g.key.eq_ignore_ascii_case(key))
}

/// What `--list-games` prints: one game a line, key, name and its masters.
pub(crate) fn list_games() -> String {
    let mut out = String::new();
    for g in DIRECTORY {
        let masters: Vec<String> = g
            .masters
            .iter()
            .map(|m| format!("{}:{}", m.kind.name(), m.source))
            .collect();
        out.push_str(&format!(
            "{:<14} {:<36} {}\n",
            g.key,
            g.name,
            masters.join(" ")
        ));
    }
    out
}

/// One list the engine asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The master protocol.
    pub kind: MasterKind,
    /// host:port, URL or file.
    pub source: String,
    /// The game name to ask for (GameSpy, dpmaster, Valve).
    pub ask: Option<String>,
    /// dpmaster's protocol number.
    pub protocol_version: i32,
    /// The game key the list's servers belong to, where the ask tells.
    pub game: Option<&'static str>,
}

impl Ask {
    /// A short name for the status line.
    pub(crate) fn label(&self) -> String {
        match &self.ask {
            Some(a) => format!("{}:{} ({a})", self.kind.name(), self.source),
            None => format!("{}:{}", self.kind.name(), self.source),
        }
    }
}

/// Why a choice of games and masters cannot be browsed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    /// A `--game` the directory does not know.
    #[error("unknown game {0:?} (muster browse --list-games prints the names)")]
    UnknownGame(String),
    /// A GameSpy `--master` with no game to ask for.
    #[error(
        "--master gamespy:{0}: a GameSpy master is asked for one game: add --game (a game whose \
         directory master is a GameSpy one, e.g. ut)"
    )]
    GamespyWithoutGame(String),
}

/// The asks for `games` (`--game`, keys) and `masters` (`--master`, parsed):
///
/// - no `--game` and no `--master`: every game of the directory, with its public masters;
/// - `--game` only: those games, with their public masters;
/// - `--master` only: exactly those masters (a GameSpy one asked for every directory game
///   listed by a GameSpy master);
/// - both: the chosen games' public masters, where a `--master` of the same protocol replaces
///   the public ones of that protocol (asked for the same game); a `--master` of a protocol
///   none of the chosen games uses is added as given.
pub(crate) fn plan(
    games: &[String],
    masters: &[(MasterKind, String)],
) -> Result<Vec<Ask>, PlanError> {
    let chosen: Vec<&'static Game> = if games.is_empty() {
        if masters.is_empty() {
            DIRECTORY.iter().collect()
        } else {
            Vec::new()
        }
    } else {
        games
            .iter()
            .map(|k| game(k).ok_or_else(|| PlanError::UnknownGame(k.clone())))
            .collect::<Result<_, _>>()?
    };
    let mut asks: Vec<Ask> = Vec::new();
    let mut push = |a: Ask| {
        if !asks.contains(&a) {
            asks.push(a);
        }
    };
    let mut used_kinds = Vec::new();
    for g in &chosen {
        for m in g.masters {
            let given: Vec<&String> = masters
                .iter()
                .filter(|(k, _)| *k == m.kind)
                .map(|(_, s)| s)
                .collect();
            let sources: Vec<String> = if given.is_empty() {
                vec![m.source.to_owned()]
            } else {
                given.into_iter().cloned().collect()
            };
            used_kinds.push(m.kind);
            for source in sources {
                push(Ask {
                    kind: m.kind,
                    source,
                    ask: m.ask.map(str::to_owned),
                    protocol_version: m
                        .protocol_version
                        .unwrap_or(muster_proto::quake3::query::DEFAULT_PROTOCOL),
                    game: Some(g.key),
                });
            }
        }
    }
    for (kind, source) in masters {
        if used_kinds.contains(kind) {
            continue;
        }
        if *kind == MasterKind::Gamespy {
            let gamespy_games: Vec<(&'static str, &'static str)> = DIRECTORY
                .iter()
                .flat_map(|g| g.masters.iter().map(move |m| (g, m)))
                .filter(|(_, m)| m.kind == MasterKind::Gamespy)
                .filter_map(|(g, m)| Some((g.key, m.ask?)))
                .collect();
            if !games.is_empty() || gamespy_games.is_empty() {
                return Err(PlanError::GamespyWithoutGame(source.clone()));
            }
            for (key, ask) in gamespy_games {
                push(Ask {
                    kind: *kind,
                    source: source.clone(),
                    ask: Some(ask.to_owned()),
                    protocol_version: muster_proto::quake3::query::DEFAULT_PROTOCOL,
                    game: Some(key),
                });
            }
            continue;
        }
        push(Ask {
            kind: *kind,
            source: source.clone(),
            ask: None,
            protocol_version: muster_proto::quake3::query::DEFAULT_PROTOCOL,
            game: None,
        });
    }
    Ok(asks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_game_key_is_unique_lower_case_and_has_a_master() {
        let mut keys: Vec<&str> = DIRECTORY.iter().map(|g| g.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), DIRECTORY.len());
        for g in DIRECTORY {
            assert_eq!(g.key, g.key.to_ascii_lowercase());
            assert!(!g.masters.is_empty(), "{}", g.key);
            // A game the protocol crate names is named the same here.
            if let Some(name) = muster_proto::games::display_name(g.key) {
                assert_eq!(name, g.name, "{}", g.key);
            }
            for m in g.masters {
                if m.kind == MasterKind::Gamespy {
                    assert!(m.ask.is_some(), "{}: GameSpy asks need a game", g.key);
                }
            }
        }
    }

    #[test]
    fn the_public_masters_parse_as_master_flags() {
        for g in DIRECTORY {
            for m in g.masters {
                let spec = format!("{}:{}", m.kind.name(), m.source);
                let (kind, source) = crate::scan::parse_master(&spec).unwrap();
                assert_eq!((kind, source.as_str()), (m.kind, m.source));
            }
        }
    }

    #[test]
    fn nothing_given_browses_every_game() {
        let asks = plan(&[], &[]).unwrap();
        for g in DIRECTORY {
            assert!(asks.iter().any(|a| a.game == Some(g.key)), "{}", g.key);
        }
        // dpmaster is asked once per game it lists, with that game's protocol number.
        let xonotic = asks.iter().find(|a| a.game == Some("xonotic")).unwrap();
        assert_eq!(
            (xonotic.ask.as_deref(), xonotic.protocol_version),
            (Some("Xonotic"), 3)
        );
    }

    #[test]
    fn games_choose_their_public_masters_only() {
        let asks = plan(&["UT".into()], &[]).unwrap();
        assert_eq!(
            asks,
            vec![Ask {
                kind: MasterKind::Gamespy,
                source: NET333.into(),
                ask: Some("ut".into()),
                protocol_version: 68,
                game: Some("ut"),
            }]
        );
        assert_eq!(
            plan(&["nope".into()], &[]),
            Err(PlanError::UnknownGame("nope".into()))
        );
    }

    #[test]
    fn a_master_of_the_same_protocol_replaces_and_another_adds() {
        let masters = vec![
            (MasterKind::Gamespy, "127.0.0.1:28900".to_owned()),
            (MasterKind::Teeworlds, "127.0.0.1:8300".to_owned()),
        ];
        let asks = plan(&["ut".into()], &masters).unwrap();
        assert_eq!(asks.len(), 2);
        assert_eq!(asks[0].source, "127.0.0.1:28900");
        assert_eq!(asks[0].ask.as_deref(), Some("ut"));
        assert_eq!((asks[1].kind, asks[1].game), (MasterKind::Teeworlds, None));
    }

    #[test]
    fn masters_alone_are_browsed_alone() {
        let masters = vec![(
            MasterKind::Ddnet,
            "http://127.0.0.1:1/servers.json".to_owned(),
        )];
        let asks = plan(&[], &masters).unwrap();
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].source, "http://127.0.0.1:1/servers.json");
        // A GameSpy master alone is asked for every GameSpy game of the directory.
        let asks = plan(&[], &[(MasterKind::Gamespy, "127.0.0.1:2".to_owned())]).unwrap();
        assert!(asks.iter().any(|a| a.ask.as_deref() == Some("ut")));
        assert!(
            asks.iter()
                .any(|a| a.ask.as_deref() == Some("serioussamse"))
        );
        assert!(asks.iter().all(|a| a.source == "127.0.0.1:2"));
        // With games chosen that have no GameSpy master, it has nothing to ask for.
        assert!(matches!(
            plan(
                &["ddnet".into()],
                &[(MasterKind::Gamespy, "x:1".to_owned())]
            ),
            Err(PlanError::GamespyWithoutGame(_))
        ));
    }

    #[test]
    fn list_games_names_every_key() {
        let text = list_games();
        assert_eq!(text.lines().count(), DIRECTORY.len());
        assert!(text.contains("ddnet:https://master1.ddnet.org/ddnet/15/servers.json"));
    }
}
