//! Farm descriptions: which emulated servers to run, from a TOML file or from flags.
//!
//! ```toml
//! seed = 7                      # makes generated names, players and impairments reproducible
//! bind = "127.0.0.1"            # address every server listens on (default 127.0.0.1)
//!
//! [[server]]                    # one explicit server
//! protocol = "gamespy1"         # gameagent | gamespy1 | unreal2 | teeworlds | quake3 | a2s
//! port = 7777                   # game port; the query port follows the protocol's convention
//! name = "Jérôme's UT2003"
//! map = "DM-Antalus"
//! game_type = "xDeathMatch"
//! max_players = 16
//! players = [{ name = "Kee\\n", score = 5, ping = 40, team = 0 }]
//! rules = { timelimit = "20" }
//! style = "ut2003"              # protocol-specific reply style (see below)
//! masters = ["gamespy:127.0.0.1:27900"]
//! gamespy_offset = 10           # GameSpy v1 at game port + 10 (see below)
//!
//! [[generate]]                  # many servers at once
//! protocol = "teeworlds"
//! count = 1000
//! ports = "20000-29999"         # game ports handed out in order (the query offset is skipped)
//! players = "0-16"              # players per server: a number or a range
//! max_players = 16
//! charset = "latin1"            # ascii | latin1 | utf8: characters used in generated names
//! loss = 0.1                    # impairments, see below
//! reorder = 0.5
//! delay = "5ms"
//! ```
//!
//! Styles: gamespy1 `ut2003` (its format is the default), `ut2003demo`, `ut99`, `unreal`,
//! `serioussam`; unreal2 `ut2004` (default), `ut2003`; gameagent `seed` (default), `x86`,
//! `arm`; teeworlds has one; quake3 `ioquake3` (default), `darkplaces`; a2s `source` (default),
//! `goldsrc`, `ship`, and `require_challenge = true` makes INFO need the challenge round too
//! (`compress = true`: split replies bzip2-compressed, Source layout). Impairments (`loss`,
//! `reorder`, `delay`) apply to requests and replies of that server, for testing clients.
//!
//! `gamespy_offset = N` puts GameSpy v1 at game port + N, as UT2003 and UT2004 servers do
//! (their default is + 10; `unreal2.md` §11): a `gamespy1` server then answers there instead
//! of at + 1 (a `gamespy1` server whose style is `ut2003` or `ut2003demo` is at + 10 unless
//! `gamespy_offset` says otherwise; without a style it is at + 1); an `unreal2` server answers GameSpy there **besides** its native query at + 1
//! (so N cannot be 1), from the same state, and heartbeats to `gamespy:` masters from there.
//! Generated servers with an offset are spaced N + 1 ports apart.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use muster_proto::gamespy1::respond::Profile;
use muster_proto::respond::{PlayerState, ServerState};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use crate::udp::Impairment;

/// The protocols a farm can emulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FarmProtocol {
    /// Serious Sam GameAgent (query port = game port + 1).
    Gameagent,
    /// GameSpy v1 (query port = game port + 1; + 10 for the UT2003 styles).
    Gamespy1,
    /// Unreal Engine 2 native (query port = game port + 1).
    Unreal2,
    /// Teeworlds / DDNet / 0.7 on the game port itself.
    Teeworlds,
    /// Quake III / DarkPlaces `getinfo` / `getstatus` on the game port itself.
    Quake3,
    /// Valve A2S (INFO, PLAYER, RULES) on the game port itself.
    A2s,
}

impl FarmProtocol {
    /// Parse a command-line name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "gameagent" => Some(Self::Gameagent),
            "gamespy1" => Some(Self::Gamespy1),
            "unreal2" => Some(Self::Unreal2),
            "teeworlds" => Some(Self::Teeworlds),
            "quake3" => Some(Self::Quake3),
            "a2s" => Some(Self::A2s),
            _ => None,
        }
    }

    /// The command-line name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Gameagent => "gameagent",
            Self::Gamespy1 => "gamespy1",
            Self::Unreal2 => "unreal2",
            Self::Teeworlds => "teeworlds",
            Self::Quake3 => "quake3",
            Self::A2s => "a2s",
        }
    }

    /// Ports a server of this protocol occupies besides its game port (to keep generated
    /// servers from colliding).
    #[must_use]
    pub fn ports_used(self) -> u16 {
        match self {
            Self::Teeworlds | Self::Quake3 | Self::A2s => 1,
            Self::Gameagent | Self::Gamespy1 | Self::Unreal2 => 2,
        }
    }
}

/// Characters used in generated names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Charset {
    /// Plain ASCII.
    Ascii,
    /// ASCII plus Latin-1 letters (é, ß, ø, …), which every single-byte protocol can carry.
    #[default]
    Latin1,
    /// Latin-1 plus characters outside it (Cyrillic, CJK, emoji), for UTF-8 and UTF-16 paths.
    Utf8,
}

/// Why a farm description was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FarmError {
    /// The TOML did not parse or did not match the schema.
    #[error("bad farm description")]
    Toml(#[from] toml::de::Error),
    /// A range like `20000-29999` was malformed or empty.
    #[error("bad range {0:?} (expected N or LOW-HIGH)")]
    Range(String),
    /// A duration like `5ms` was malformed.
    #[error("bad duration {0:?} (examples: 5ms, 1s)")]
    Duration(String),
    /// The port range cannot hold `count` servers.
    #[error("port range {range:?} holds only {fits} {protocol} servers, {count} asked")]
    PortsExhausted {
        /// The range as written.
        range: String,
        /// The protocol.
        protocol: &'static str,
        /// How many fit.
        fits: usize,
        /// How many were asked for.
        count: usize,
    },
    /// A probability outside 0..=1.
    #[error("{0} must be between 0 and 1")]
    Probability(&'static str),
    /// A master given as something other than `<protocol>:<host:port>`.
    #[error("bad master {0:?} (expected <protocol>:<host:port>)")]
    Master(String),
    /// `gamespy_offset` on a protocol without GameSpy, or an offset that cannot be used.
    #[error("gamespy_offset {offset} is not possible for {protocol} servers ({why})")]
    GamespyOffset {
        /// The protocol.
        protocol: &'static str,
        /// The offset asked for.
        offset: u16,
        /// Why not.
        why: &'static str,
    },
}

/// A player as written in a farm file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlayerSpec {
    /// Name.
    pub name: String,
    /// Score.
    #[serde(default)]
    pub score: i64,
    /// Ping in milliseconds.
    #[serde(default)]
    pub ping: u32,
    /// Team.
    pub team: Option<i32>,
    /// Clan (Teeworlds).
    #[serde(default)]
    pub clan: String,
    /// Country (Teeworlds).
    #[serde(default = "no_country")]
    pub country: i32,
    /// Spectator.
    #[serde(default)]
    pub spectator: bool,
    /// Bot.
    #[serde(default)]
    pub bot: bool,
}

fn no_country() -> i32 {
    -1
}

/// One explicit server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Protocol.
    pub protocol: FarmProtocol,
    /// Game port.
    pub port: u16,
    /// Name.
    #[serde(default = "default_name")]
    pub name: String,
    /// Map.
    #[serde(default)]
    pub map: String,
    /// Game type.
    #[serde(default)]
    pub game_type: String,
    /// Version (default: the protocol's typical one).
    pub version: Option<String>,
    /// Game name (`ut2`, `serioussamse`, …; default by protocol and style).
    pub game: Option<String>,
    /// Password needed.
    #[serde(default)]
    pub password: bool,
    /// Slots.
    #[serde(default = "default_max_players")]
    pub max_players: u32,
    /// Players.
    #[serde(default)]
    pub players: Vec<PlayerSpec>,
    /// Extra rules.
    #[serde(default)]
    pub rules: BTreeMap<String, String>,
    /// Reply style.
    pub style: Option<String>,
    /// Masters to register with, as `<protocol>:<host:port>`.
    #[serde(default)]
    pub masters: Vec<String>,
    /// Probability a request is ignored.
    #[serde(default)]
    pub loss: f64,
    /// Probability a multi-datagram reply is reversed.
    #[serde(default)]
    pub reorder: f64,
    /// Reply delay.
    pub delay: Option<String>,
    /// GameSpy v1 at game port + this (gamespy1: instead of + 1; unreal2: besides native).
    pub gamespy_offset: Option<u16>,
    /// a2s: INFO too needs the challenge round (PLAYER and RULES always do).
    #[serde(default)]
    pub require_challenge: bool,
    /// a2s (Source layout): send split replies bzip2-compressed.
    #[serde(default)]
    pub compress: bool,
}

fn default_name() -> String {
    "Muster emulated server".to_owned()
}

fn default_max_players() -> u32 {
    16
}

/// Many generated servers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateSpec {
    /// Protocol.
    pub protocol: FarmProtocol,
    /// How many.
    pub count: usize,
    /// Game ports, `LOW-HIGH`.
    pub ports: String,
    /// Players per server, `N` or `LOW-HIGH`.
    #[serde(default = "default_players")]
    pub players: String,
    /// Slots.
    #[serde(default = "default_max_players")]
    pub max_players: u32,
    /// Characters in generated names.
    #[serde(default)]
    pub charset: Charset,
    /// Reply style.
    pub style: Option<String>,
    /// Masters to register with.
    #[serde(default)]
    pub masters: Vec<String>,
    /// Probability a request is ignored.
    #[serde(default)]
    pub loss: f64,
    /// Probability a multi-datagram reply is reversed.
    #[serde(default)]
    pub reorder: f64,
    /// Reply delay.
    pub delay: Option<String>,
    /// GameSpy v1 at game port + this (see [`ServerSpec::gamespy_offset`]).
    pub gamespy_offset: Option<u16>,
    /// a2s: INFO too needs the challenge round.
    #[serde(default)]
    pub require_challenge: bool,
    /// a2s (Source layout): send split replies bzip2-compressed.
    #[serde(default)]
    pub compress: bool,
}

fn default_players() -> String {
    "0-8".to_owned()
}

/// A whole farm file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FarmSpec {
    /// Seed of every random choice.
    #[serde(default)]
    pub seed: u64,
    /// Listen address.
    #[serde(default = "default_bind")]
    pub bind: IpAddr,
    /// Explicit servers.
    #[serde(default)]
    pub server: Vec<ServerSpec>,
    /// Generated servers.
    #[serde(default)]
    pub generate: Vec<GenerateSpec>,
}

fn default_bind() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

/// A master to register with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterTarget {
    /// The master protocol (`gameagent`, `gamespy`, `teeworlds07`, `ddnet`, `mgmt`).
    pub protocol: String,
    /// `host:port` or URL.
    pub address: String,
}

/// One server ready to run.
#[derive(Debug, Clone)]
pub struct FarmServer {
    /// Protocol.
    pub protocol: FarmProtocol,
    /// Listen address.
    pub bind: IpAddr,
    /// What it reports (including its game port).
    pub state: ServerState,
    /// Reply style, if not the protocol's default.
    pub style: Option<String>,
    /// Masters to register with.
    pub masters: Vec<MasterTarget>,
    /// Deliberate faults.
    pub impairment: Impairment,
    /// GameSpy v1 at game port + this (checked: only gamespy1 and unreal2, never 0, and not 1
    /// for unreal2, whose native query holds + 1).
    pub gamespy_offset: Option<u16>,
    /// a2s: INFO too needs the challenge round.
    pub require_challenge: bool,
    /// a2s (Source layout): split replies bzip2-compressed.
    pub compress: bool,
}

/// Checks `offset` for `protocol` (see [`FarmServer::gamespy_offset`]).
fn gamespy_offset(protocol: FarmProtocol, offset: Option<u16>) -> Result<Option<u16>, FarmError> {
    let Some(n) = offset else {
        return Ok(None);
    };
    let why = match protocol {
        _ if n == 0 => Some("the game port itself"),
        FarmProtocol::Gamespy1 => None,
        FarmProtocol::Unreal2 if n == 1 => Some("the native query holds game port + 1"),
        FarmProtocol::Unreal2 => None,
        FarmProtocol::Gameagent
        | FarmProtocol::Teeworlds
        | FarmProtocol::Quake3
        | FarmProtocol::A2s => Some("they answer no GameSpy"),
    };
    match why {
        None => Ok(Some(n)),
        Some(why) => Err(FarmError::GamespyOffset {
            protocol: protocol.name(),
            offset: n,
            why,
        }),
    }
}

/// The GameSpy v1 offset a `gamespy1` server gets without `gamespy_offset`: + 10 for the
/// styles that name UT2003 (`ut2003`, `ut2003demo`), as UT2003 moved GameSpy there (seed
/// 002); `None` (game port + 1) otherwise, also without a style.
fn default_gamespy_offset(protocol: FarmProtocol, style: Option<&str>) -> Option<u16> {
    if protocol != FarmProtocol::Gamespy1 {
        return None;
    }
    let profile = Profile::from_style_name(Some(style?))?;
    let offset = profile.query_port_offset();
    (offset != 1).then_some(offset)
}

fn range(s: &str) -> Result<(u64, u64), FarmError> {
    let bad = || FarmError::Range(s.to_owned());
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        ),
        None => {
            let n = s.trim().parse().map_err(|_| bad())?;
            (n, n)
        }
    };
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

fn duration(s: Option<&str>) -> Result<Duration, FarmError> {
    match s {
        None => Ok(Duration::ZERO),
        Some(s) => humantime::parse_duration(s).map_err(|_| FarmError::Duration(s.to_owned())),
    }
}

fn probability(p: f64, what: &'static str) -> Result<f64, FarmError> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(FarmError::Probability(what))
    }
}

/// Parse `<protocol>:<host:port or URL>`.
pub fn parse_master(s: &str) -> Result<MasterTarget, FarmError> {
    match s.split_once(':') {
        Some((p, a)) if !p.is_empty() && !a.is_empty() => Ok(MasterTarget {
            protocol: p.to_owned(),
            address: a.to_owned(),
        }),
        _ => Err(FarmError::Master(s.to_owned())),
    }
}

fn masters(list: &[String]) -> Result<Vec<MasterTarget>, FarmError> {
    list.iter().map(|m| parse_master(m)).collect()
}

fn default_version(protocol: FarmProtocol, style: Option<&str>) -> &'static str {
    match (protocol, style) {
        (FarmProtocol::Gameagent, _) | (FarmProtocol::Gamespy1, Some("serioussam")) => "1.10",
        (FarmProtocol::Gamespy1, Some("ut99")) => "451",
        (FarmProtocol::Gamespy1, Some("unreal")) => "227",
        (FarmProtocol::Gamespy1, Some("ut2003demo")) => "1077",
        (FarmProtocol::Unreal2, Some("ut2003")) | (FarmProtocol::Gamespy1, _) => "2225",
        (FarmProtocol::Unreal2, _) => "3369",
        (FarmProtocol::Teeworlds, _) => "0.6.4",
        (FarmProtocol::Quake3, Some("darkplaces")) => "0.8.6",
        (FarmProtocol::Quake3, _) => "ioq3 1.36 linux-x86_64",
        (FarmProtocol::A2s, Some("goldsrc")) => "1.1.2.7/Stdio",
        (FarmProtocol::A2s, _) => "1.0.0.71",
    }
}

fn default_game(protocol: FarmProtocol, style: Option<&str>) -> &'static str {
    match (protocol, style) {
        (FarmProtocol::Gameagent, _) | (FarmProtocol::Gamespy1, Some("serioussam")) => {
            "serioussamse"
        }
        (FarmProtocol::Gamespy1, Some("ut99")) => "ut",
        (FarmProtocol::Gamespy1, Some("unreal")) => "unreal",
        (FarmProtocol::Gamespy1, Some("ut2003demo")) => "ut2d",
        (FarmProtocol::Unreal2, Some("ut2003")) | (FarmProtocol::Gamespy1, _) => "ut2",
        (FarmProtocol::Unreal2, _) => "ut2004",
        (FarmProtocol::Teeworlds, _) => "teeworlds",
        (FarmProtocol::Quake3, Some("darkplaces")) => "Xonotic",
        (FarmProtocol::Quake3, _) => "Quake3Arena",
        (FarmProtocol::A2s, Some("goldsrc")) => "valve",
        (FarmProtocol::A2s, Some("ship")) => "ship",
        (FarmProtocol::A2s, _) => "cstrike",
    }
}

const ASCII_PARTS: [&str; 12] = [
    "Frag", "Zone", "Alpha", "Rocket", "Dust", "Storm", "Night", "Pixel", "Tee", "Sam", "Hell",
    "Arena",
];
const LATIN1_PARTS: [&str; 8] = [
    "Jérôme", "Müller", "Façade", "Ærø", "Straße", "Señor", "Öl", "Garçon",
];
const UTF8_PARTS: [&str; 6] = ["Привет", "日本", "Ελλάδα", "🙂Tee", "Łódź", "Čeština"];

fn word(rng: &mut SmallRng, charset: Charset) -> &'static str {
    let pick = |rng: &mut SmallRng, list: &'static [&'static str]| -> &'static str {
        list.get(rng.random_range(0..list.len()))
            .copied()
            .unwrap_or("x")
    };
    match (charset, rng.random_range(0..3u8)) {
        (Charset::Latin1, 0) => pick(rng, &LATIN1_PARTS),
        (Charset::Utf8, 0) => pick(rng, &UTF8_PARTS),
        (Charset::Utf8, 1) => pick(rng, &LATIN1_PARTS),
        _ => pick(rng, &ASCII_PARTS),
    }
}

const MAPS: [(FarmProtocol, &[&str]); 5] = [
    (
        FarmProtocol::Gameagent,
        &["Yodeller", "Hatshepsut", "Sand Canyon", "Little Trouble"],
    ),
    (
        FarmProtocol::Gamespy1,
        &["DM-Antalus", "DM-Asbestos", "CTF-Citadel", "BR-Anubis"],
    ),
    (
        FarmProtocol::Unreal2,
        &["DM-Rankin", "ONS-Torlan", "CTF-FaceClassic", "DM-Deck17"],
    ),
    (FarmProtocol::Teeworlds, &["dm1", "ctf5", "dm6", "Kobra 4"]),
    (
        FarmProtocol::Quake3,
        &["q3dm17", "q3dm6", "q3tourney2", "q3ctf1"],
    ),
];

fn generated_state(
    protocol: FarmProtocol,
    index: usize,
    port: u16,
    players: usize,
    spec: &GenerateSpec,
    rng: &mut SmallRng,
) -> ServerState {
    let name = format!(
        "{} {} #{index}",
        word(rng, spec.charset),
        word(rng, spec.charset)
    );
    let maps = MAPS
        .iter()
        .find(|(p, _)| *p == protocol)
        .map_or(&["map"][..], |(_, m)| *m);
    let map = maps
        .get(index % maps.len())
        .copied()
        .unwrap_or("map")
        .to_owned();
    let mut list = Vec::with_capacity(players);
    for slot in 0..players {
        list.push(PlayerState {
            name: format!("{}{slot}", word(rng, spec.charset)),
            score: rng.random_range(-5..60),
            ping_ms: rng.random_range(5..250),
            team: None,
            clan: String::new(),
            country: -1,
            spectator: false,
            bot: false,
        });
    }
    let style = spec.style.as_deref();
    ServerState {
        name,
        map,
        game_type: match protocol {
            FarmProtocol::Gameagent => "Fragmatch",
            FarmProtocol::Gamespy1 | FarmProtocol::Unreal2 => "xDeathMatch",
            FarmProtocol::Teeworlds => "DM",
            FarmProtocol::Quake3 => "0",
            FarmProtocol::A2s => "",
        }
        .to_owned(),
        version: default_version(protocol, style).to_owned(),
        game: default_game(protocol, style).to_owned(),
        game_port: port,
        password: false,
        max_players: spec
            .max_players
            .max(u32::try_from(players).unwrap_or(u32::MAX)),
        players: list,
        rules: Vec::new(),
    }
}

impl FarmSpec {
    /// Parse a farm file.
    pub fn from_toml(text: &str) -> Result<Self, FarmError> {
        Ok(toml::from_str(text)?)
    }

    /// Expand the description into servers.
    pub fn expand(&self) -> Result<Vec<FarmServer>, FarmError> {
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let mut out = Vec::new();
        for s in &self.server {
            let style = s.style.as_deref();
            out.push(FarmServer {
                protocol: s.protocol,
                bind: self.bind,
                state: ServerState {
                    name: s.name.clone(),
                    map: s.map.clone(),
                    game_type: s.game_type.clone(),
                    version: s
                        .version
                        .clone()
                        .unwrap_or_else(|| default_version(s.protocol, style).to_owned()),
                    game: s
                        .game
                        .clone()
                        .unwrap_or_else(|| default_game(s.protocol, style).to_owned()),
                    game_port: s.port,
                    password: s.password,
                    max_players: s.max_players,
                    players: s
                        .players
                        .iter()
                        .map(|p| PlayerState {
                            name: p.name.clone(),
                            score: p.score,
                            ping_ms: p.ping,
                            team: p.team,
                            clan: p.clan.clone(),
                            country: p.country,
                            spectator: p.spectator,
                            bot: p.bot,
                        })
                        .collect(),
                    rules: s
                        .rules
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                },
                style: s.style.clone(),
                masters: masters(&s.masters)?,
                impairment: Impairment {
                    loss: probability(s.loss, "loss")?,
                    reorder: probability(s.reorder, "reorder")?,
                    delay: duration(s.delay.as_deref())?,
                    seed: rng.random(),
                },
                gamespy_offset: gamespy_offset(
                    s.protocol,
                    s.gamespy_offset
                        .or_else(|| default_gamespy_offset(s.protocol, style)),
                )?,
                require_challenge: s.require_challenge,
                compress: s.compress,
            });
        }
        for g in &self.generate {
            let (lo, hi) = range(&g.ports)?;
            let (pmin, pmax) = range(&g.players)?;
            let offset = gamespy_offset(
                g.protocol,
                g.gamespy_offset
                    .or_else(|| default_gamespy_offset(g.protocol, g.style.as_deref())),
            )?;
            // Spaced so that no two servers' sockets (game + 1, game + offset) meet.
            let step = offset.map_or(u64::from(g.protocol.ports_used()), |n| u64::from(n) + 1);
            let fits = usize::try_from((hi - lo) / step + 1).unwrap_or(usize::MAX);
            if hi > u64::from(u16::MAX) || lo == 0 || fits < g.count {
                return Err(FarmError::PortsExhausted {
                    range: g.ports.clone(),
                    protocol: g.protocol.name(),
                    fits: if hi > u64::from(u16::MAX) || lo == 0 {
                        0
                    } else {
                        fits
                    },
                    count: g.count,
                });
            }
            let masters = masters(&g.masters)?;
            let impairment = Impairment {
                loss: probability(g.loss, "loss")?,
                reorder: probability(g.reorder, "reorder")?,
                delay: duration(g.delay.as_deref())?,
                seed: 0,
            };
            for i in 0..g.count {
                let port = u16::try_from(lo + step * i as u64).unwrap_or(u16::MAX);
                let players = usize::try_from(rng.random_range(pmin..=pmax)).unwrap_or(0);
                let state = generated_state(g.protocol, i, port, players, g, &mut rng);
                out.push(FarmServer {
                    protocol: g.protocol,
                    bind: self.bind,
                    state,
                    style: g.style.clone(),
                    masters: masters.clone(),
                    impairment: Impairment {
                        seed: rng.random(),
                        ..impairment
                    },
                    gamespy_offset: offset,
                    require_challenge: g.require_challenge,
                    compress: g.compress,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
seed = 7
[[server]]
protocol = "gamespy1"
port = 7777
name = "Jérôme's UT2003"
map = "DM-Antalus"
players = [{ name = "Kee\\n", score = 5, ping = 40, team = 0 }]
rules = { timelimit = "20" }
style = "ut2003"
masters = ["gamespy:127.0.0.1:27900"]

[[generate]]
protocol = "teeworlds"
count = 100
ports = "20000-20099"
players = "0-16"
charset = "utf8"
loss = 0.1
"#;

    #[test]
    fn ut2003_styles_put_gamespy_at_plus_10_unless_told_otherwise() {
        let offset = |extra: &str| {
            let farm = FarmSpec::from_toml(&format!(
                "[[server]]\nprotocol = \"gamespy1\"\nport = 7777\n{extra}"
            ))
            .unwrap();
            farm.expand().unwrap()[0].gamespy_offset
        };
        assert_eq!(offset("style = \"ut2003\"\n"), Some(10));
        assert_eq!(offset("style = \"ut2003demo\"\n"), Some(10));
        assert_eq!(
            offset("style = \"ut2003\"\ngamespy_offset = 12\n"),
            Some(12)
        );
        for plain in ["", "style = \"ut99\"\n", "style = \"serioussam\"\n"] {
            assert_eq!(offset(plain), None, "{plain}");
        }
        // Generated UT2003 servers are spaced for their + 10 socket.
        let farm = FarmSpec::from_toml(
            "[[generate]]\nprotocol = \"gamespy1\"\nstyle = \"ut2003\"\ncount = 3\nports = \"8000-8100\"\n",
        )
        .unwrap();
        let ports: Vec<u16> = farm
            .expand()
            .unwrap()
            .iter()
            .map(|s| s.state.game_port)
            .collect();
        assert_eq!(ports, [8000, 8011, 8022]);
    }

    #[test]
    fn example_expands() {
        let farm = FarmSpec::from_toml(EXAMPLE).unwrap();
        let servers = farm.expand().unwrap();
        assert_eq!(servers.len(), 101);
        let first = &servers[0];
        assert_eq!(first.state.name, "Jérôme's UT2003");
        assert_eq!(first.state.players[0].name, "Kee\\n");
        assert_eq!(first.state.game, "ut2");
        assert_eq!(first.masters[0].protocol, "gamespy");
        assert_eq!(first.masters[0].address, "127.0.0.1:27900");
        let ports: Vec<u16> = servers[1..].iter().map(|s| s.state.game_port).collect();
        assert_eq!(ports.first(), Some(&20000));
        assert_eq!(ports.last(), Some(&20099));
        assert!(servers[1..].iter().all(|s| s.state.players.len() <= 16));
        assert!(servers[1..].iter().all(|s| s.impairment.loss == 0.1));
        // The same seed gives the same farm.
        let again = FarmSpec::from_toml(EXAMPLE).unwrap().expand().unwrap();
        assert_eq!(servers[50].state, again[50].state);
    }

    #[test]
    fn query_port_offsets_are_skipped() {
        let farm = FarmSpec::from_toml(
            "[[generate]]\nprotocol = \"unreal2\"\ncount = 3\nports = \"7000-7005\"\n",
        )
        .unwrap();
        let ports: Vec<u16> = farm
            .expand()
            .unwrap()
            .iter()
            .map(|s| s.state.game_port)
            .collect();
        assert_eq!(ports, vec![7000, 7002, 7004]);
    }

    #[test]
    fn quake3_farms_use_every_port_and_name_their_game_by_style() {
        let farm = FarmSpec::from_toml(
            "[[generate]]\nprotocol = \"quake3\"\ncount = 1000\nports = \"30000-30999\"\n\
             masters = [\"quake3:127.0.0.1:27950\"]\n\
             [[generate]]\nprotocol = \"quake3\"\nstyle = \"darkplaces\"\ncount = 2\n\
             ports = \"26000-26001\"\n",
        )
        .unwrap();
        let servers = farm.expand().unwrap();
        assert_eq!(servers.len(), 1002);
        assert_eq!(servers[999].state.game_port, 30999);
        assert_eq!(servers[0].state.game, "Quake3Arena");
        assert_eq!(servers[0].state.game_type, "0");
        assert!(servers[0].state.map.starts_with("q3"));
        assert_eq!(servers[1000].state.game, "Xonotic");
        // Each one is a responder on its game port, with a registrar for its master.
        let ep = crate::endpoints::endpoint(&servers[5]).unwrap();
        assert_eq!(ep.port, 30005);
        assert_eq!(ep.registrars.len(), 1);
        let mut bad = servers[0].clone();
        bad.style = Some("quakelive".into());
        assert!(crate::endpoints::endpoint(&bad).is_err());
        bad.style = None;
        bad.masters = vec![parse_master("gamespy:127.0.0.1:27900").unwrap()];
        assert!(crate::endpoints::endpoint(&bad).is_err());
    }

    #[test]
    fn rejects_too_small_port_range_and_bad_values() {
        let farm = FarmSpec::from_toml(
            "[[generate]]\nprotocol = \"unreal2\"\ncount = 4\nports = \"7000-7005\"\n",
        )
        .unwrap();
        assert!(matches!(
            farm.expand(),
            Err(FarmError::PortsExhausted { fits: 3, .. })
        ));
        let farm =
            FarmSpec::from_toml("[[server]]\nprotocol = \"teeworlds\"\nport = 1\nloss = 2.0\n")
                .unwrap();
        assert!(matches!(farm.expand(), Err(FarmError::Probability("loss"))));
        assert!(FarmSpec::from_toml("[[server]]\nprotocol = \"quake\"\nport = 1\n").is_err());
        assert!(
            FarmSpec::from_toml("[[server]]\nprotocol = \"teeworlds\"\nport = 1\nbogus = 1\n")
                .is_err()
        );
    }

    #[test]
    fn gamespy_offsets_are_checked_and_space_generated_servers() {
        let farm = FarmSpec::from_toml(
            "[[server]]\nprotocol = \"unreal2\"\nport = 7777\ngamespy_offset = 10\n\
             [[generate]]\nprotocol = \"unreal2\"\ncount = 3\nports = \"8000-8100\"\ngamespy_offset = 10\n",
        )
        .unwrap();
        let servers = farm.expand().unwrap();
        assert_eq!(servers[0].gamespy_offset, Some(10));
        let ports: Vec<u16> = servers[1..].iter().map(|s| s.state.game_port).collect();
        assert_eq!(ports, [8000, 8011, 8022]);
        for (protocol, offset) in [
            ("unreal2", 1),
            ("gamespy1", 0),
            ("teeworlds", 10),
            ("gameagent", 10),
        ] {
            let farm = FarmSpec::from_toml(&format!(
                "[[server]]\nprotocol = \"{protocol}\"\nport = 7777\ngamespy_offset = {offset}\n"
            ))
            .unwrap();
            assert!(
                matches!(farm.expand(), Err(FarmError::GamespyOffset { .. })),
                "{protocol} {offset}"
            );
        }
    }

    #[test]
    fn latin1_charset_stays_in_latin1() {
        let farm = FarmSpec::from_toml(
            "seed = 3\n[[generate]]\nprotocol = \"gamespy1\"\ncount = 50\nports = \"30000-30200\"\ncharset = \"latin1\"\nplayers = \"4\"\n",
        )
        .unwrap();
        let servers = farm.expand().unwrap();
        for s in &servers {
            assert!(
                s.state.name.chars().all(|c| (c as u32) < 0x100),
                "{}",
                s.state.name
            );
            assert_eq!(s.state.players.len(), 4);
        }
        assert!(servers.iter().any(|s| !s.state.name.is_ascii()));
    }
}
