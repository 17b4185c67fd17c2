//! Game properties and game policy of the Quake III / DarkPlaces master: which games do not
//! name themselves (their servers' heartbeat tag and their clients' protocol numbers say which
//! game they are), which games are sent empty and full servers without asking, and which games
//! the master serves at all.

use serde::{Deserialize, Serialize};

/// The heartbeat tag of every game on the DarkPlaces master protocol: such servers name their
/// game in their `infoResponse`.
pub const DARKPLACES_TAG: &str = "DarkPlaces";

/// What the master knows of one game beyond what its servers and clients send.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GameProperties {
    /// The game name, as its servers' `gamename` and its clients' requests spell it.
    pub name: String,
    /// Protocol numbers a `getservers` without a game name is taken to be this game's by.
    pub protocols: Vec<i32>,
    /// List empty servers to this game's clients even when they do not ask (`empty`).
    pub send_empty: bool,
    /// List full servers to this game's clients even when they do not ask (`full`).
    pub send_full: bool,
    /// The heartbeat tag of this game's live servers: their `infoResponse` may leave the
    /// game name out, and must not name another game.
    pub heartbeat: Option<String>,
    /// The tag a dying server of this game sends: ignored (no `getinfo`).
    pub flatline: Option<String>,
}

impl GameProperties {
    fn builtin(
        name: &str,
        protocols: &[i32],
        send_all: bool,
        heartbeat: &str,
        flatline: Option<&str>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            protocols: protocols.to_vec(),
            send_empty: send_all,
            send_full: send_all,
            heartbeat: Some(heartbeat.to_owned()),
            flatline: flatline.map(str::to_owned),
        }
    }
}

/// The built-in table, as dpmaster ships it: Quake III Arena, Return to Castle Wolfenstein and
/// Wolfenstein: Enemy Territory, whose clients never send a game name (ET's clients also expect
/// the whole list without asking).
#[must_use]
pub fn builtin_games() -> Vec<GameProperties> {
    vec![
        GameProperties::builtin("Quake3Arena", &[66, 67, 68], false, "QuakeArena-1", None),
        GameProperties::builtin(
            "wolfmp",
            &[50, 59, 60],
            false,
            "Wolfenstein-1",
            Some("WolfFlatline-1"),
        ),
        GameProperties::builtin(
            "et",
            &[72, 80, 83, 84],
            true,
            "EnemyTerritory-1",
            Some("ETFlatline-1"),
        ),
    ]
}

/// Which games the master serves: heartbeats, registrations and list requests of the others
/// are dropped without an answer. Names compare case-sensitively, as dpmaster compares them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(tag = "policy", content = "games", rename_all = "lowercase")]
pub enum GamePolicy {
    /// Every game.
    #[default]
    All,
    /// Only these games.
    Accept(Vec<String>),
    /// Every game but these.
    Reject(Vec<String>),
}

impl GamePolicy {
    /// Whether `game` is served.
    #[must_use]
    pub fn accepts(&self, game: &str) -> bool {
        match self {
            Self::All => true,
            Self::Accept(names) => names.iter().any(|n| n == game),
            Self::Reject(names) => !names.iter().any(|n| n == game),
        }
    }
}

/// What a heartbeat tag means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// `DarkPlaces`: the server names its game.
    Named,
    /// A game's live tag: the server's game is this one.
    Game(String),
    /// A dying server: ignored.
    Flatline,
    /// No game uses it.
    Unknown,
}

/// The meaning of heartbeat tag `tag` under `games`.
#[must_use]
pub fn classify(games: &[GameProperties], tag: &str) -> Tag {
    if let Some(g) = games.iter().find(|g| g.heartbeat.as_deref() == Some(tag)) {
        return Tag::Game(g.name.clone());
    }
    if games.iter().any(|g| g.flatline.as_deref() == Some(tag)) {
        return Tag::Flatline;
    }
    if tag == DARKPLACES_TAG {
        return Tag::Named;
    }
    Tag::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_their_games_and_flatlines_are_known() {
        let g = builtin_games();
        assert_eq!(
            classify(&g, "QuakeArena-1"),
            Tag::Game("Quake3Arena".into())
        );
        assert_eq!(classify(&g, "EnemyTerritory-1"), Tag::Game("et".into()));
        assert_eq!(classify(&g, "ETFlatline-1"), Tag::Flatline);
        assert_eq!(classify(&g, "DarkPlaces"), Tag::Named);
        assert_eq!(classify(&g, "Warsow"), Tag::Unknown);
    }

    #[test]
    fn policies_compare_names_exactly() {
        let accept = GamePolicy::Accept(vec!["Xonotic".into()]);
        assert!(accept.accepts("Xonotic") && !accept.accepts("xonotic"));
        let reject = GamePolicy::Reject(vec!["Xonotic".into()]);
        assert!(!reject.accepts("Xonotic") && reject.accepts("Nexuiz"));
        assert!(GamePolicy::All.accepts("anything"));
    }
}
