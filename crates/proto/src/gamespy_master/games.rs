//! The games a GameSpy master accepts heartbeats of, and how each is verified: with the
//! game's key (`\secure\` → `\validate\`), or, for the Serious Sam games, which have no
//! key a master can check, by asking the server for its `\status\` and matching its game name.

/// How a game's heartbeats are verified (`gamespy-master.md` §13 decisions 3 and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `\secure\` → `\validate\` with the game's key.
    Secure,
    /// `\status\` to the heartbeat address; the reply's `gamename` must be in the same group.
    Status,
}

/// One entry of the game table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Game {
    /// The gamename, lower case.
    pub name: &'static str,
    /// How its heartbeats are verified.
    pub method: Method,
    /// Alias group: names in one group match each other in a `\status\` reply.
    pub group: &'static str,
    /// Port used for a heartbeat that announces port 0 (§2.3), if any.
    pub default_port: Option<u16>,
}

const fn secure(name: &'static str, default_port: Option<u16>) -> Game {
    Game {
        name,
        method: Method::Secure,
        group: name,
        default_port,
    }
}

const fn sam(name: &'static str) -> Game {
    Game {
        name,
        method: Method::Status,
        group: "serioussam",
        default_port: None,
    }
}

/// The games the face accepts: every game of the key table (§4.6) except `gamespy2`, which
/// only authenticates list clients. Keys come from [`super::GAME_KEYS`].
pub const GAMES: &[Game] = &[
    secure("unreal", Some(7778)),
    secure("ut", Some(7778)),
    secure("ut2", None),
    secure("ut2d", None),
    secure("ut2004", None),
    secure("ut2004d", None),
    sam("serioussam"),
    sam("serioussamse"),
    sam("serioussamsed"),
    secure("333networks", Some(27900)),
];

/// The table entry of `name` (ASCII case-insensitive), if the game is accepted and has a key.
#[must_use]
pub fn game(name: &[u8]) -> Option<&'static Game> {
    GAMES
        .iter()
        .find(|g| g.name.as_bytes().eq_ignore_ascii_case(name))
        .filter(|g| !super::game_keys(g.name.as_bytes()).is_empty())
}

/// Whether a `\status\` reply naming `replied` verifies a heartbeat of `game`.
#[must_use]
pub fn matches_group(game: &Game, replied: &str) -> bool {
    self::game(replied.trim().as_bytes()).is_some_and(|g| g.group == game.group)
}
