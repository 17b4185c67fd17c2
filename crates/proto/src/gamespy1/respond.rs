//! [`GameSpyResponder`]: a game server's GameSpy v1 query port, answering as the stock server
//! of the emulated game does (spec §9, §10, §13).
//!
//! ```text
//! \status\  \basic\  \info\  \rules\  \players\  combined (\basic\\info\)  \secure\ABCDEF
//!   -> the profile's key sets of §3.2/§9.2, packed by the profile's style (reply.rs)
//! \echo\X   -> nothing, in every style (spec §13: spoofed echo loops)
//! ```
//!
//! A [`Profile`] fixes the style, the stock key set, the `gamename`, `gamever`, location and
//! the game key used for `\validate\`. [`ServerState`] strings are Unicode and are sent as
//! Windows-1252 (`?` for what it cannot carry); `\` and control bytes are removed from every
//! value (the one intended difference from stock output, spec §13 decision 1), except in the
//! player names of [`Profile::Ut2003Demo`], which keep `\` as the real demo server of seed 002
//! sent them.
//!
//! A rule named `maptitle` (any case) is sent as the Unreal profiles' `maptitle` instead of
//! the map name, and not repeated among the rules: UT2003 sends the level's title there
//! (`Citadel`) next to its file name (`CTF-Citadel`).
//!
//! Not here: rate limiting (the driver's, [`crate::limit`]), heartbeats
//! ([`crate::gamespy_master::register`]), sockets and clocks.

use std::net::SocketAddr;
use std::time::Instant;

use super::packet::Pair;
use super::reply::{PlayerRecord, QueryIdCounter, ReplyContent, ReplyStyle, Section};
use crate::gamespy_master::{Challenge, Enctype, validate_string};
use crate::respond::{PlayerState, Reply, Responder, ServerState};
use crate::text::encode_windows1252;

/// Serious Sam profiles cut the session name to this many bytes so a full `\status\` reply
/// fits the one datagram the stock client reads (spec §10 recommendation).
pub const SERIOUS_SAM_MAX_HOSTNAME: usize = 64;

/// Serious Sam profiles cut player names to this many bytes (spec §10 recommendation).
pub const SERIOUS_SAM_MAX_PLAYER_NAME: usize = 32;

/// The game whose stock GameSpy v1 responder is emulated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Unreal Tournament 2003 (`ut2`, style B); the default.
    #[default]
    Ut2003,
    /// The Unreal Tournament 2003 demo (`ut2d`, gamever 1077) as seed 002's real reply shows
    /// it: style B, but player names keep their `\`, pings have a leading space, and no
    /// `password` rule is sent.
    Ut2003Demo,
    /// Unreal Tournament (UT99 v451, `ut`, style B).
    Ut99,
    /// Unreal 227 (`unreal`, style A).
    Unreal227,
    /// Serious Sam: The Second Encounter 1.10 in legacy mode (`serioussamse`, style C). For
    /// The First Encounter set [`GameSpyConfig::gamename`] to `serioussam`.
    SeriousSam,
}

impl Profile {
    /// Every profile, the default first.
    pub const ALL: [Self; 5] = [
        Self::Ut2003,
        Self::Ut2003Demo,
        Self::Ut99,
        Self::Unreal227,
        Self::SeriousSam,
    ];

    /// The `--style` name of this profile.
    #[must_use]
    pub const fn style_name(self) -> &'static str {
        match self {
            Self::Ut2003 => "ut2003",
            Self::Ut2003Demo => "ut2003demo",
            Self::Ut99 => "ut99",
            Self::Unreal227 => "unreal",
            Self::SeriousSam => "serioussam",
        }
    }

    /// The profile a `--style` name selects; `None` (no style given) is the default.
    #[must_use]
    pub fn from_style_name(style: Option<&str>) -> Option<Self> {
        match style {
            None => Some(Self::default()),
            Some(s) => Self::ALL.into_iter().find(|p| p.style_name() == s),
        }
    }

    /// The stock GameSpy v1 query port's offset from the game port: + 10 for UT2003 (seed
    /// 002, spec §1; the server walks on to the next free port when it is taken), + 1 for
    /// the others.
    #[must_use]
    pub const fn query_port_offset(self) -> u16 {
        match self {
            Self::Ut2003 | Self::Ut2003Demo => 10,
            Self::Ut99 | Self::Unreal227 | Self::SeriousSam => 1,
        }
    }

    /// How this game packs its replies.
    #[must_use]
    pub const fn style(self) -> ReplyStyle {
        match self {
            Self::Ut2003 | Self::Ut99 => ReplyStyle::Packed,
            Self::Ut2003Demo => ReplyStyle::Ut2003Demo,
            Self::Unreal227 => ReplyStyle::Unreal227,
            Self::SeriousSam => ReplyStyle::SeriousSam,
        }
    }

    /// The stock `gamename` (also the heartbeat's).
    #[must_use]
    pub const fn gamename(self) -> &'static str {
        match self {
            Self::Ut2003 => "ut2",
            Self::Ut2003Demo => "ut2d",
            Self::Ut99 => "ut",
            Self::Unreal227 => "unreal",
            Self::SeriousSam => "serioussamse",
        }
    }

    /// The stock `gamever`.
    #[must_use]
    pub const fn gamever(self) -> &'static str {
        match self {
            Self::Ut2003 => "2225",
            Self::Ut2003Demo => "1077",
            Self::Ut99 => "451",
            Self::Unreal227 => "227k",
            Self::SeriousSam => "1.10",
        }
    }

    /// The stock minimum version (`minnetver`; Unreal 227's `mingamever`); unused by Serious
    /// Sam.
    #[must_use]
    pub const fn min_version(self) -> &'static str {
        match self {
            Self::Ut2003 => "2206",
            Self::Ut2003Demo => "1000",
            Self::Ut99 => "432",
            Self::Unreal227 => "224",
            Self::SeriousSam => "",
        }
    }

    /// The stock `location` of `\status\` (Serious Sam: of `\status\` only; its `\basic\`
    /// always says `EU`).
    #[must_use]
    pub const fn location(self) -> &'static str {
        match self {
            Self::SeriousSam => "Heartland",
            _ => "0",
        }
    }

    /// The game's key from the table of `gamespy-master.md` §4.6.
    #[must_use]
    pub const fn game_key(self) -> &'static str {
        match self {
            Self::Ut2003 => "Lw7x0R",
            Self::Ut2003Demo => "y5e8Q3",
            Self::Ut99 => "Z5Nfb0",
            Self::Unreal227 => "DAncRK",
            Self::SeriousSam => "AKbna4",
        }
    }

    /// Seconds between the stock heartbeats of this game (`gamespy-master.md` §2.2).
    #[must_use]
    pub const fn heartbeat_interval_secs(self) -> u64 {
        match self {
            Self::SeriousSam => 150,
            _ => 60,
        }
    }
}

/// Everything a [`GameSpyResponder`] needs besides the [`ServerState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GameSpyConfig {
    /// The emulated game.
    pub profile: Profile,
    /// `gamename`; [`ServerState::game`] overrides it when non-empty.
    pub gamename: String,
    /// `gamever`; [`ServerState::version`] overrides it when non-empty.
    pub gamever: String,
    /// `minnetver` (Unreal 227: `mingamever`).
    pub min_version: String,
    /// `location` (Serious Sam: of `\status\`; stock `Heartland`).
    pub location: String,
    /// The key `\secure\` challenges are hashed with (enctype 0).
    pub game_key: String,
}

impl GameSpyConfig {
    /// The stock settings of `profile`.
    #[must_use]
    pub fn new(profile: Profile) -> Self {
        Self {
            profile,
            gamename: profile.gamename().to_owned(),
            gamever: profile.gamever().to_owned(),
            min_version: profile.min_version().to_owned(),
            location: profile.location().to_owned(),
            game_key: profile.game_key().to_owned(),
        }
    }
}

impl Default for GameSpyConfig {
    fn default() -> Self {
        Self::new(Profile::default())
    }
}

/// A GameSpy v1 responder for one query socket; implements [`Responder`].
///
/// Keeps the per-socket `queryid` counter of the Unreal styles (advanced once per request
/// datagram, from anyone, wrapping at 100; spec §4).
#[derive(Debug, Clone)]
pub struct GameSpyResponder {
    config: GameSpyConfig,
    counter: QueryIdCounter,
}

impl GameSpyResponder {
    /// A responder with `config`.
    #[must_use]
    pub fn new(config: GameSpyConfig) -> Self {
        Self {
            config,
            counter: QueryIdCounter::new(),
        }
    }

    /// A responder with the stock settings of `profile`.
    #[must_use]
    pub fn with_profile(profile: Profile) -> Self {
        Self::new(GameSpyConfig::new(profile))
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &GameSpyConfig {
        &self.config
    }

    /// Every datagram answering `datagram`, in send order (empty: no reply), as the stock
    /// server of the profile sends them about `state`.
    pub fn answer(&mut self, datagram: &[u8], state: &ServerState) -> Vec<Vec<u8>> {
        let style = self.config.profile.style();
        let content = self.content(state);
        let key = self.config.game_key.as_bytes();
        content.answer_with(datagram, style, &mut self.counter, |challenge| {
            validate_section(challenge, key)
        })
    }

    /// The reply content for `state`: the profile's key sets (spec §3.2, §9.2, §10).
    #[must_use]
    pub fn content(&self, state: &ServerState) -> ReplyContent {
        let c = &self.config;
        let gamename = non_empty_or(&state.game, &c.gamename);
        let gamever = non_empty_or(&state.version, &c.gamever);
        let listed: Vec<&PlayerState> = state.players.iter().filter(|p| !p.spectator).collect();
        let num = listed.len().to_string();
        let max = state.max_players.to_string();
        let port = state.game_port.to_string();
        let name = encode_windows1252(&state.name);
        let map = encode_windows1252(&state.map);
        let game_type = encode_windows1252(&state.game_type);
        let mut content = ReplyContent::default();
        match c.profile {
            Profile::SeriousSam => {
                let hostname = truncated(name, SERIOUS_SAM_MAX_HOSTNAME);
                content.basic = pairs([
                    ("gamename", gamename.as_bytes()),
                    ("gamever", gamever.as_bytes()),
                    ("location", SERIOUS_SAM_BASIC_LOCATION),
                ]);
                let info = [
                    ("hostname", &hostname[..]),
                    ("hostport", port.as_bytes()),
                    ("mapname", &map),
                    ("gametype", &game_type),
                    ("numplayers", num.as_bytes()),
                    ("maxplayers", max.as_bytes()),
                    ("gamemode", GAMEMODE_OPEN),
                ];
                content.info = pairs(info);
                let mut head = pairs([
                    ("gamename", gamename.as_bytes()),
                    ("gamever", gamever.as_bytes()),
                    ("location", c.location.as_bytes()),
                ]);
                head.extend(pairs(info.into_iter().take(4)));
                head.extend(pairs([
                    ("activemod", &b""[..]),
                    ("numplayers", num.as_bytes()),
                    ("maxplayers", max.as_bytes()),
                    ("gamemode", GAMEMODE_OPEN),
                    ("difficulty", b"Normal"),
                ]));
                for (key, default) in SERIOUS_SAM_FLAGS {
                    let value = rule(state, key)
                        .map_or_else(|| default.as_bytes().to_vec(), |v| flag_value(v).to_vec());
                    head.extend(Pair::new(key, value).ok());
                }
                head.extend(pairs([("password", &b"0"[..]), ("vipplayers", b"1")]));
                content.status_head = Some(head);
            }
            profile => {
                let min_key = if profile == Profile::Unreal227 {
                    "mingamever"
                } else {
                    "minnetver"
                };
                let min = c.min_version.as_bytes();
                content.basic = if profile == Profile::Unreal227 {
                    pairs([
                        ("gamename", gamename.as_bytes()),
                        ("gamever", gamever.as_bytes()),
                        ("gamesubver", UNREAL227_GAMESUBVER),
                        (min_key, min),
                        ("location", c.location.as_bytes()),
                    ])
                } else {
                    pairs([
                        ("gamename", gamename.as_bytes()),
                        ("gamever", gamever.as_bytes()),
                        (min_key, min),
                        ("location", c.location.as_bytes()),
                    ])
                };
                let title = rule(state, MAPTITLE).map_or_else(|| map.clone(), encode_windows1252);
                content.info = pairs([
                    ("hostname", &name[..]),
                    ("hostport", port.as_bytes()),
                    ("maptitle", &title),
                    ("mapname", &map),
                    ("gametype", &game_type),
                    ("numplayers", num.as_bytes()),
                    ("maxplayers", max.as_bytes()),
                    ("gamemode", GAMEMODE_OPEN),
                    ("gamever", gamever.as_bytes()),
                    (min_key, min),
                ]);
                content.rules = state
                    .rules
                    .iter()
                    .filter(|(k, _)| !k.eq_ignore_ascii_case(MAPTITLE))
                    .filter_map(|(k, v)| {
                        Pair::new(encode_windows1252(k), encode_windows1252(v)).ok()
                    })
                    .collect();
                // UT2003 always states its password; UT99, 227 and the UT2003 demo (seed 002's
                // demo reply has no `password`) only when one is set.
                if profile == Profile::Ut2003 || state.password {
                    let value: &[u8] = if state.password { b"True" } else { b"False" };
                    content.rules.extend(Pair::new("password", value).ok());
                }
            }
        }
        content.players = listed.into_iter().map(|p| self.player_record(p)).collect();
        content
    }

    fn player_record(&self, p: &PlayerState) -> PlayerRecord {
        let mut name = encode_windows1252(&p.name);
        let team = if self.config.profile == Profile::SeriousSam {
            name = truncated(name, SERIOUS_SAM_MAX_PLAYER_NAME);
            None
        } else {
            Some(
                p.team
                    .map_or_else(|| NO_TEAM.to_vec(), |t| t.to_string().into_bytes()),
            )
        };
        PlayerRecord {
            name,
            frags: p.score,
            ping: p.ping_ms,
            team,
            extra: Vec::new(),
        }
    }
}

impl Responder for GameSpyResponder {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        // Answer first: Unreal-family servers advance `queryid` for every datagram received.
        let replies = self.answer(datagram, state);
        out.extend(replies.into_iter().map(|bytes| Reply { to: from, bytes }));
        is_request(datagram, self.config.profile)
    }
}

/// Whether `datagram` is a request this profile's server would look at (bad input otherwise,
/// which the driver counts).
fn is_request(datagram: &[u8], profile: Profile) -> bool {
    use super::packet::Request;
    if datagram.len() > super::MAX_REQUEST_LEN {
        return false;
    }
    if profile == Profile::SeriousSam {
        Request::serious_sam_kind(datagram).is_some()
    } else {
        Request::decode(datagram).is_ok()
    }
}

/// The `\validate\V` section answering challenge `challenge` with `key`, or `None` when the
/// challenge is not 6 printable characters (no stock server answers those sensibly).
fn validate_section(challenge: &[u8], key: &[u8]) -> Option<Section> {
    let challenge = Challenge::new(challenge).ok()?;
    let v = validate_string(&challenge, key, Enctype::Zero)?;
    Some(vec![Pair::new("validate", v).ok()?])
}

/// Build pairs from constant keys; values are cleaned by [`Pair::new`].
fn pairs<'a>(list: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<Pair> {
    list.into_iter()
        .filter_map(|(k, v)| Pair::new(k, v).ok())
        .collect()
}

fn non_empty_or<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() { default } else { value }
}

fn truncated(mut bytes: Vec<u8>, max: usize) -> Vec<u8> {
    bytes.truncate(max);
    bytes
}

/// The value of rule `key` (ASCII case-insensitive), if configured.
fn rule<'a>(state: &'a ServerState, key: &str) -> Option<&'a str> {
    state
        .rules
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// A configured flag as Serious Sam writes it: `1` for `1`/`true`/`yes`/`on`, else `0`.
fn flag_value(value: &str) -> &'static [u8] {
    let v = value.trim();
    if ["1", "true", "yes", "on"]
        .iter()
        .any(|t| v.eq_ignore_ascii_case(t))
    {
        b"1"
    } else {
        b"0"
    }
}

/// The 0/1 flags of a Serious Sam `\status\` (keys 13–20 of spec §9.2, stock spellings) with
/// the values sent when no rule of that name is configured.
const SERIOUS_SAM_FLAGS: [(&str, &str); 8] = [
    ("friendlyfire", "0"),
    ("weaponsstay", "1"),
    ("ammosstay", "0"),
    ("healthandarmorstays", "0"),
    ("allowhealth", "1"),
    ("allowarmor", "1"),
    ("infinitearmor", "0"),
    ("respawninplace", "1"),
];

/// Serious Sam's `\basic\` always says `location` `EU` (spec §9.3).
const SERIOUS_SAM_BASIC_LOCATION: &[u8] = b"EU";

/// The rule that sets the Unreal profiles' `maptitle` (see the module docs).
const MAPTITLE: &str = "maptitle";

/// The constant `gamemode` of every stock server (spec §3.2).
const GAMEMODE_OPEN: &[u8] = b"openplaying";

/// Unreal 227's `gamesubver` (spec §5.1 example).
const UNREAL227_GAMESUBVER: &[u8] = b"11";

/// `team_N` of a player outside team games on Unreal-family servers (spec §12 quirk 11).
const NO_TEAM: &[u8] = b"255";

#[cfg(test)]
mod tests;
