//! The game-server side of Unreal 2: a [`Responder`] answering `0x00`–`0x04` the way a stock
//! UT2004 (or UT2003) server does (spec §2, §3, §5–§8, §14 decision 4).
//!
//! ```text
//! ServerState ──build (once per state change)──▶ ServerSnapshot ──encode──▶ cached datagrams
//! request (exactly 5 bytes, any version) ──▶ the cached datagrams of its command, to its source
//! ```
//!
//! What a request gets:
//!
//! | command | reply |
//! |---|---|
//! | `00` | one info datagram: ServerID 0, IP `""`, Port = game port, QueryPort 0, Ping 0; UT2004 adds Flags and SkillLevel |
//! | `01` | the rules, split at 450 bytes (one header-only datagram when there are none) |
//! | `02` | the players, split at 450 bytes; **nothing** for an empty list |
//! | `03` | the `01` datagrams, then the `02` datagrams |
//! | `04` | `<version> 04 50` |
//! | anything else, or not exactly 5 bytes | nothing, and [`Responder::handle_datagram`] returns `false` |
//!
//! How a [`ServerState`] maps (see [`snapshot`]): strings in the form a stock server picks
//! ([`U2String::from_text`]: single bytes when every character is at most U+00FF, else
//! UTF-16LE); CurrentPlayers counts humans only (no bots, no spectators); the player list has
//! every human including spectators and leaves bots out; team 0/1 become StatsID bits 29/30;
//! the rules start with `ServerVersion` (from [`ServerState::version`]) and `GamePassword` =
//! `True` (only when passworded), then [`ServerState::rules`] in order.
//!
//! This module does **not** open sockets, rate-limit (the driver in `muster-server` does, for
//! every protocol), answer on the UT2004 LAN port 10777 or broadcast to 11777 (a driver could
//! serve the same responder there), or speak GameSpy v1 (the `gamespy1` responder does, on its
//! own port).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{
    Command, FLAG_PASSWORD, InfoReply, InfoTail, PlayerRecord, Request, RulePair, ServerSnapshot,
    Style,
};
use super::string::U2String;
use crate::respond::{Reply, Responder, ServerState};

/// The rule key carrying the game version (UT2004 `GameInfo.GetServerDetails`, spec §6).
pub const RULE_SERVER_VERSION: &str = "ServerVersion";
/// The rule key present (value [`RULE_TRUE`]) only when joining needs a password (spec §6).
pub const RULE_GAME_PASSWORD: &str = "GamePassword";
/// How UT2004 spells a true boolean rule value.
pub const RULE_TRUE: &str = "True";
/// The highest player ping a stock server can send: the engine keeps ping / 4 in a byte (§7).
pub const MAX_PLAYER_PING_MS: u32 = 1020;
/// Player pings are sent in steps of this many milliseconds (§7).
pub const PLAYER_PING_STEP_MS: u32 = 4;
/// The SkillLevel a stock UT2004 server sends unless configured otherwise (§5.1, §12.1).
pub const DEFAULT_SKILL_LEVEL: &str = "1";
/// The refresh interval of a stock server's cached answer (§10). Not the default here.
pub const STOCK_REFRESH: Duration = Duration::from_secs(60);
/// The longest text put in one string, in characters: at most two UTF-16 units each, this
/// stays below [`super::MAX_STRING_UNITS`] including the NUL. Longer text is cut.
const MAX_TEXT_CHARS: usize = (super::MAX_STRING_UNITS - 1) / 2;

/// How an [`Unreal2Responder`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreal2Settings {
    /// Reply layout and version: [`Style::Ut2004`] (`0x80`, Flags and SkillLevel; the default)
    /// or [`Style::Ut2003`] (`0x79`, neither).
    pub style: Style,
    /// The SkillLevel string of UT2004-style info replies (`"0"`, `"1"` or `"2"`; default
    /// `"1"`). Ignored for UT2003.
    pub skill_level: String,
    /// The Flags INT of UT2004-style info replies. Stock servers send 0 (Epic's master filled
    /// it in, §5.1), so that is the default; set [`Self::password_flag`] to add bit 1 for
    /// passworded servers. Ignored for UT2003.
    pub flags: i32,
    /// Also set Flags bit 1 ([`FLAG_PASSWORD`]) when the server needs a password. Off by
    /// default, as on stock servers: the `GamePassword` rule carries the password.
    pub password_flag: bool,
    /// Keep answering from the cached answer for this long after building it, even if the
    /// state changed (stock servers: [`STOCK_REFRESH`], §10). Default zero: every state change
    /// is visible to the next request.
    pub refresh: Duration,
}

impl Default for Unreal2Settings {
    fn default() -> Self {
        Self {
            style: Style::Ut2004,
            skill_level: DEFAULT_SKILL_LEVEL.to_owned(),
            flags: 0,
            password_flag: false,
            refresh: Duration::ZERO,
        }
    }
}

impl Unreal2Settings {
    /// The defaults with another [`Style`].
    #[must_use]
    pub fn with_style(style: Style) -> Self {
        Self {
            style,
            ..Self::default()
        }
    }

    /// The defaults for a farm's `style` name: `None` or `"ut2004"` is [`Style::Ut2004`],
    /// `"ut2003"` is [`Style::Ut2003`]; any other name is `None`.
    #[must_use]
    pub fn for_style_name(name: Option<&str>) -> Option<Self> {
        match name {
            None | Some(STYLE_UT2004) => Some(Self::with_style(Style::Ut2004)),
            Some(STYLE_UT2003) => Some(Self::with_style(Style::Ut2003)),
            Some(_) => None,
        }
    }
}

/// The style name of [`Style::Ut2004`] in farm files and flags.
pub const STYLE_UT2004: &str = "ut2004";
/// The style name of [`Style::Ut2003`] in farm files and flags.
pub const STYLE_UT2003: &str = "ut2003";

/// The encoded answer to each command, built from one state.
#[derive(Debug, Clone)]
struct Cache {
    /// The state the datagrams were built from (compared on each request).
    state: ServerState,
    built_at: Instant,
    info: Vec<Vec<u8>>,
    rules: Vec<Vec<u8>>,
    players: Vec<Vec<u8>>,
    small_ping: Vec<Vec<u8>>,
}

impl Cache {
    fn build(settings: &Unreal2Settings, state: &ServerState, now: Instant) -> Self {
        let snap = snapshot(settings, state);
        let encoded = |command: Command| {
            let mut request = Vec::with_capacity(super::packet::HEADER_LEN);
            Request::new(command).encode(&mut request);
            let mut out = Vec::new();
            snap.answer(&request, &mut out);
            out
        };
        Self {
            state: state.clone(),
            built_at: now,
            info: encoded(Command::Info),
            rules: encoded(Command::Rules),
            players: encoded(Command::Players),
            small_ping: encoded(Command::SmallPing),
        }
    }
}

/// A stock Unreal 2 query responder (module docs). Create one per served socket.
#[derive(Debug, Clone, Default)]
pub struct Unreal2Responder {
    settings: Unreal2Settings,
    cache: Option<Cache>,
}

impl Unreal2Responder {
    /// A responder answering as `settings` say.
    #[must_use]
    pub const fn new(settings: Unreal2Settings) -> Self {
        Self {
            settings,
            cache: None,
        }
    }

    /// The settings it answers with.
    #[must_use]
    pub const fn settings(&self) -> &Unreal2Settings {
        &self.settings
    }

    /// The cached answer, rebuilt when `state` differs from the one it was built from and the
    /// refresh interval has passed.
    fn cache(&mut self, now: Instant, state: &ServerState) -> &Cache {
        let fresh = self.cache.as_ref().is_some_and(|c| {
            // The clock check first: it is cheaper than comparing whole states.
            now.saturating_duration_since(c.built_at) < self.settings.refresh || c.state == *state
        });
        if !fresh {
            return self.cache.insert(Cache::build(&self.settings, state, now));
        }
        self.cache
            .get_or_insert_with(|| Cache::build(&self.settings, state, now))
    }
}

impl Responder for Unreal2Responder {
    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        state: &ServerState,
        out: &mut Vec<Reply>,
    ) -> bool {
        // Exactly 5 bytes, any version, commands 00-04 (§2, §12.7).
        let Ok(request) = Request::decode(datagram) else {
            return false;
        };
        let cache = self.cache(now, state);
        let parts: [&[Vec<u8>]; 2] = match request.command {
            Command::Info => [&cache.info, &[]],
            Command::Rules => [&cache.rules, &[]],
            Command::Players => [&cache.players, &[]],
            Command::RulesAndPlayers => [&cache.rules, &cache.players],
            Command::SmallPing => [&cache.small_ping, &[]],
            Command::Unknown(_) => return false,
        };
        out.extend(parts.iter().flat_map(|p| p.iter()).map(|bytes| Reply {
            to: from,
            bytes: bytes.clone(),
        }));
        true
    }
}

/// What a stock server of `settings.style` knows about `state` (see the module docs for the
/// mapping). [`ServerSnapshot::answer`] turns it into datagrams.
#[must_use]
pub fn snapshot(settings: &Unreal2Settings, state: &ServerState) -> ServerSnapshot {
    let humans = state.active_players().count();
    let mut info = InfoReply::stock(
        settings.style,
        i32::from(state.game_port),
        text(&state.name),
        text(&state.map),
        text(&state.game_type),
        i32::try_from(humans).unwrap_or(i32::MAX),
        i32::try_from(state.max_players).unwrap_or(i32::MAX),
    );
    if let InfoTail::Ut2004 {
        flags, skill_level, ..
    } = &mut info.tail
    {
        *flags = settings.flags;
        if settings.password_flag && state.password {
            *flags |= FLAG_PASSWORD;
        }
        *skill_level = text(&settings.skill_level);
    }
    ServerSnapshot {
        info,
        rules: rules(state),
        players: players(state),
    }
}

/// `ServerVersion`, `GamePassword` (only when passworded), then the state's own rules. A
/// `ServerVersion` in the state's rules replaces the generated one; a `GamePassword` there is
/// dropped, because [`ServerState::password`] decides it.
fn rules(state: &ServerState) -> Vec<RulePair> {
    let has_key = |key: &str| state.rules.iter().any(|(k, _)| k.eq_ignore_ascii_case(key));
    let mut out = Vec::with_capacity(state.rules.len() + 2);
    if !state.version.is_empty() && !has_key(RULE_SERVER_VERSION) {
        out.push(pair(RULE_SERVER_VERSION, &state.version));
    }
    if state.password {
        out.push(pair(RULE_GAME_PASSWORD, RULE_TRUE));
    }
    out.extend(
        state
            .rules
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case(RULE_GAME_PASSWORD))
            .map(|(k, v)| pair(k, v)),
    );
    out
}

/// Every player but bots, spectators included (§7). PlayerNum is the 1-based position in
/// [`ServerState::players`] (bots included, so numbers stay put when a bot leaves; never 0,
/// which gamedig would read as a team-score line).
fn players(state: &ServerState) -> Vec<PlayerRecord> {
    state
        .players
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.bot)
        .map(|(i, p)| PlayerRecord {
            num: i32::try_from(i.saturating_add(1)).unwrap_or(i32::MAX),
            name: text(&p.name),
            ping: i32::try_from(wire_ping(p.ping_ms)).unwrap_or(0),
            score: i32::try_from(p.score.clamp(i64::from(i32::MIN), i64::from(i32::MAX)))
                .unwrap_or(0),
            stats_id: PlayerRecord::stats_id_for_team(p.team),
            xmp: None,
        })
        .collect()
}

/// The ping a stock server sends for `ms`: 4 × (ms / 4), at most 1020 (§7).
#[must_use]
pub const fn wire_ping(ms: u32) -> u32 {
    let capped = if ms > MAX_PLAYER_PING_MS {
        MAX_PLAYER_PING_MS
    } else {
        ms
    };
    capped / PLAYER_PING_STEP_MS * PLAYER_PING_STEP_MS
}

fn pair(key: &str, value: &str) -> RulePair {
    RulePair {
        key: text(key),
        value: text(value),
    }
}

/// `s` in the form a stock server picks; text too long for one string is cut to
/// [`MAX_TEXT_CHARS`] characters.
fn text(s: &str) -> U2String {
    U2String::from_text(s).unwrap_or_else(|_| {
        let cut: String = s.chars().take(MAX_TEXT_CHARS).collect();
        U2String::from_text(&cut).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::respond::PlayerState;
    use crate::unreal2::packet::{RulesReply, VERSION_UT2003, VERSION_UT2004};
    use std::net::{Ipv4Addr, SocketAddr};

    fn hex(s: &str) -> Vec<u8> {
        let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        hex::decode(clean).expect("hex")
    }

    fn client() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 40_000))
    }

    fn human(name: &str, score: i64, ping_ms: u32, team: Option<i32>) -> PlayerState {
        PlayerState {
            name: name.to_owned(),
            score,
            ping_ms,
            team,
            ..PlayerState::default()
        }
    }

    fn bot(name: &str) -> PlayerState {
        PlayerState {
            bot: true,
            ..human(name, 0, 0, None)
        }
    }

    fn spectator(name: &str) -> PlayerState {
        PlayerState {
            spectator: true,
            ..human(name, 0, 48, None)
        }
    }

    /// The §12.1 server: "My Srv" on DM-Rankin, xDeathMatch, game port 7777, 16 slots.
    fn spec_state(players: Vec<PlayerState>, rules: &[(&str, &str)]) -> ServerState {
        ServerState {
            name: "My Srv".into(),
            map: "DM-Rankin".into(),
            game_type: "xDeathMatch".into(),
            game_port: 7777,
            max_players: 16,
            players,
            rules: rules
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..ServerState::default()
        }
    }

    /// Ask `responder` with `request`: whether it accepted it, and the datagrams.
    fn ask(
        responder: &mut Unreal2Responder,
        now: Instant,
        state: &ServerState,
        request: &[u8],
    ) -> (bool, Vec<Vec<u8>>) {
        let mut out = Vec::new();
        let ok = responder.handle_datagram(now, client(), request, state, &mut out);
        assert!(
            out.iter().all(|r| r.to == client()),
            "replies go to the source"
        );
        (ok, out.into_iter().map(|r| r.bytes).collect())
    }

    fn ask_one(style: Style, state: &ServerState, request: &[u8]) -> Vec<Vec<u8>> {
        let mut r = Unreal2Responder::new(Unreal2Settings::with_style(style));
        let (ok, out) = ask(&mut r, Instant::now(), state, request);
        assert!(ok);
        out
    }

    const INFO_12_1: &str = "80000000000000000000611e000000000000074d7920537276000a444d2d52616e6b696e000c7844656174684d6174636800020000001000000000000000000000000231000000";
    const RULES_12_1: &str =
        "80000000010a41646d696e4e616d650004426f6200084d757461746f7200054d75744100";
    const PLAYERS_12_1: &str = "80000000020300000006416c70686100280000000c00000000000020";
    const INFO_12_3: &str = "79000000000000000000611e000000000000074d7920537276000a444d2d52616e6b696e000c7844656174684d61746368000200000010000000000000000000";

    #[test]
    fn info_ut2004_is_the_spec_12_1_vector() {
        let state = spec_state(
            vec![
                human("Alpha", 12, 40, Some(0)),
                human("Beta", 3, 60, Some(1)),
            ],
            &[],
        );
        assert_eq!(
            ask_one(Style::Ut2004, &state, &hex("80 00 00 00 00")),
            vec![hex(INFO_12_1)]
        );
    }

    #[test]
    fn info_ut2003_is_the_spec_12_3_vector() {
        let state = spec_state(vec![human("A", 0, 0, None), human("B", 0, 0, None)], &[]);
        assert_eq!(
            ask_one(Style::Ut2003, &state, &hex("80 00 00 00 00")),
            vec![hex(INFO_12_3)]
        );
    }

    #[test]
    fn rules_are_the_spec_12_1_vector() {
        let state = spec_state(vec![], &[("AdminName", "Bob"), ("Mutator", "MutA")]);
        assert_eq!(
            ask_one(Style::Ut2004, &state, &hex("80 00 00 00 01")),
            vec![hex(RULES_12_1)]
        );
    }

    #[test]
    fn players_are_the_spec_12_1_vector_with_bots_left_out() {
        // Two bots first, so Alpha is the third player: PlayerNum 3 as in the vector.
        let state = spec_state(
            vec![bot("B1"), bot("B2"), human("Alpha", 12, 40, Some(0))],
            &[],
        );
        assert_eq!(
            ask_one(Style::Ut2004, &state, &hex("80 00 00 00 02")),
            vec![hex(PLAYERS_12_1)]
        );
    }

    #[test]
    fn small_ping_is_the_spec_12_5_vector_in_both_styles() {
        let state = ServerState::default();
        assert_eq!(
            ask_one(Style::Ut2004, &state, &hex("80 00 00 00 04")),
            vec![hex("80 00 00 00 04 50")]
        );
        assert_eq!(
            ask_one(Style::Ut2003, &state, &hex("80 00 00 00 04")),
            vec![hex("79 00 00 00 04 50")]
        );
    }

    #[test]
    fn any_request_version_is_answered_with_the_style_version() {
        let state = spec_state(vec![human("Alpha", 12, 40, Some(0))], &[]);
        for version in ["78 00 00 00", "79 00 00 00", "80 00 00 00", "ff ff ff ff"] {
            let got = ask_one(Style::Ut2004, &state, &hex(&format!("{version} 02")));
            assert_eq!(got.len(), 1);
            assert_eq!(got[0][..5], hex("80 00 00 00 02")[..], "request {version}");
        }
    }

    #[test]
    fn malformed_requests_of_spec_12_7_get_no_reply() {
        let state = spec_state(vec![human("Alpha", 12, 40, Some(0))], &[("a", "b")]);
        let mut r = Unreal2Responder::default();
        for bad in [
            "80 00 00",
            "80 00 00 00",
            "80 00 00 00 00 00",
            "5c 73 74 61 74 75 73 5c",
            "80 00 00 00 05",
            "",
            "80 00 00 00 03 00",
            "80 00 00 00 10",
        ] {
            let (ok, out) = ask(&mut r, Instant::now(), &state, &hex(bad));
            assert!(!ok, "{bad} accepted");
            assert!(out.is_empty(), "{bad} answered");
        }
    }

    #[test]
    fn empty_player_list_sends_no_players_datagram_for_02_and_03() {
        let state = spec_state(
            vec![bot("B1")],
            &[("AdminName", "Bob"), ("Mutator", "MutA")],
        );
        let mut r = Unreal2Responder::default();
        let (ok, out) = ask(&mut r, Instant::now(), &state, &hex("80 00 00 00 02"));
        assert!(ok, "a valid request is accepted even when nothing is sent");
        assert!(out.is_empty());
        let (ok, out) = ask(&mut r, Instant::now(), &state, &hex("80 00 00 00 03"));
        assert!(ok);
        assert_eq!(out, vec![hex(RULES_12_1)]);
    }

    #[test]
    fn empty_rules_still_get_one_header_only_datagram() {
        let state = spec_state(vec![], &[]);
        assert_eq!(
            ask_one(Style::Ut2004, &state, &hex("80 00 00 00 01")),
            vec![hex("80 00 00 00 01")]
        );
    }

    #[test]
    fn rules_and_players_03_sends_rules_then_players() {
        let state = spec_state(
            vec![bot("B1"), bot("B2"), human("Alpha", 12, 40, Some(0))],
            &[("AdminName", "Bob"), ("Mutator", "MutA")],
        );
        assert_eq!(
            ask_one(Style::Ut2004, &state, &hex("80 00 00 00 03")),
            vec![hex(RULES_12_1), hex(PLAYERS_12_1)]
        );
    }

    #[test]
    fn rules_split_at_450_bytes_as_spec_12_4() {
        let names: Vec<String> = (0..40).map(|i| format!("Mut{i:02}")).collect();
        let rules: Vec<(&str, &str)> = names.iter().map(|n| ("Mutator", n.as_str())).collect();
        let state = spec_state(vec![], &rules);
        let out = ask_one(Style::Ut2004, &state, &hex("80 00 00 00 01"));
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![453, 197]);
        assert!(out[1].starts_with(&hex(
            "80 00 00 00 01 08 4d 75 74 61 74 6f 72 00 06 4d 75 74 32 38 00"
        )));
        let first = RulesReply::decode(&out[0]).expect("decodes");
        assert_eq!(first.pairs.len(), 28);
    }

    #[test]
    fn players_split_at_450_bytes_and_every_datagram_has_the_header() {
        let players = (0..32)
            .map(|i| human(&format!("Player number {i:02}"), i, 4 * i as u32, None))
            .collect();
        let state = spec_state(players, &[]);
        let out = ask_one(Style::Ut2004, &state, &hex("80 00 00 00 02"));
        assert!(out.len() > 1, "32 players need more than one datagram");
        for d in &out {
            assert_eq!(d[..5], hex("80 00 00 00 02")[..]);
        }
        // Each record is 4 + 17 + 12 = 33 bytes: a datagram closes once it is over 450.
        assert!(out.iter().all(|d| d.len() <= 450 + 33));
        let n: usize = out
            .iter()
            .map(|d| {
                super::super::packet::PlayersReply::decode(d)
                    .expect("decodes")
                    .players()
                    .len()
            })
            .sum();
        assert_eq!(n, 32);
    }

    #[test]
    fn current_players_counts_humans_and_spectators_are_listed() {
        let state = spec_state(
            vec![
                human("Alpha", 12, 40, Some(0)),
                spectator("Watcher"),
                bot("Bot"),
                human("Beta", -3, 60, Some(1)),
            ],
            &[],
        );
        let snap = snapshot(&Unreal2Settings::default(), &state);
        assert_eq!(snap.info.current_players, 2);
        let listed: Vec<(i32, U2String)> = snap
            .players
            .iter()
            .map(|p| (p.num, p.name.clone()))
            .collect();
        assert_eq!(
            listed,
            vec![(1, text("Alpha")), (2, text("Watcher")), (4, text("Beta"))]
        );
    }

    #[test]
    fn team_bits_in_stats_id() {
        let state = spec_state(
            vec![
                human("Red", 0, 0, Some(0)),
                human("Blue", 0, 0, Some(1)),
                human("None", 0, 0, None),
                human("Odd", 0, 0, Some(7)),
            ],
            &[],
        );
        let ids: Vec<u32> = players(&state).iter().map(|p| p.stats_id).collect();
        assert_eq!(ids, vec![0x2000_0000, 0x4000_0000, 0, 0]);
    }

    #[test]
    fn player_ping_quirk_4ms_steps_capped_at_1020() {
        for (ms, wire) in [(0, 0), (3, 0), (4, 4), (41, 40), (1020, 1020), (5000, 1020)] {
            assert_eq!(wire_ping(ms), wire, "{ms} ms");
        }
    }

    #[test]
    fn score_is_clamped_to_i32() {
        let state = spec_state(
            vec![
                human("Hi", i64::MAX, 0, None),
                human("Lo", i64::MIN, 0, None),
            ],
            &[],
        );
        let scores: Vec<i32> = players(&state).iter().map(|p| p.score).collect();
        assert_eq!(scores, vec![i32::MAX, i32::MIN]);
    }

    #[test]
    fn game_password_rule_only_when_passworded() {
        let mut state = spec_state(vec![], &[("AdminName", "Bob"), ("GamePassword", "False")]);
        let keys = |s: &ServerState| -> Vec<(U2String, U2String)> {
            rules(s).into_iter().map(|p| (p.key, p.value)).collect()
        };
        assert_eq!(keys(&state), vec![(text("AdminName"), text("Bob"))]);
        state.password = true;
        assert_eq!(
            keys(&state),
            vec![
                (text("GamePassword"), text("True")),
                (text("AdminName"), text("Bob"))
            ]
        );
        // Stock servers leave Flags 0; the password bit is opt-in.
        let flags = |settings: &Unreal2Settings| snapshot(settings, &state).info.tail.flags();
        assert_eq!(flags(&Unreal2Settings::default()), Some(0));
        let with_bit = Unreal2Settings {
            password_flag: true,
            flags: 0x20,
            ..Unreal2Settings::default()
        };
        assert_eq!(flags(&with_bit), Some(0x21));
        assert_eq!(
            flags(&Unreal2Settings::with_style(Style::Ut2003)),
            None,
            "UT2003 has no Flags"
        );
    }

    #[test]
    fn server_version_rule_comes_from_version_unless_given() {
        let mut state = spec_state(vec![], &[("Mutator", "MutA")]);
        state.version = "3369".into();
        let got: Vec<RulePair> = rules(&state);
        assert_eq!(
            got,
            vec![pair("ServerVersion", "3369"), pair("Mutator", "MutA")]
        );
        state.rules.push(("serverversion".into(), "3186".into()));
        assert_eq!(
            rules(&state),
            vec![pair("Mutator", "MutA"), pair("serverversion", "3186")]
        );
    }

    #[test]
    fn style_names() {
        let style = |n| Unreal2Settings::for_style_name(n).map(|s| s.style);
        assert_eq!(style(None), Some(Style::Ut2004));
        assert_eq!(style(Some("ut2004")), Some(Style::Ut2004));
        assert_eq!(style(Some("ut2003")), Some(Style::Ut2003));
        assert_eq!(style(Some("ut99")), None);
    }

    #[test]
    fn skill_level_is_configurable() {
        let state = spec_state(vec![], &[]);
        let settings = Unreal2Settings {
            skill_level: "2".into(),
            ..Unreal2Settings::default()
        };
        let snap = snapshot(&settings, &state);
        assert_eq!(snap.info.tail.skill_level(), Some(&text("2")));
        assert_eq!(snap.info.version, VERSION_UT2004);
        assert_eq!(
            snapshot(&Unreal2Settings::with_style(Style::Ut2003), &state)
                .info
                .version,
            VERSION_UT2003
        );
    }

    #[test]
    fn strings_single_byte_when_latin1_utf16_otherwise_as_spec_12_2() {
        let mut state = spec_state(vec![human("Betа", 0, 0, None)], &[]);
        state.name = "Café".into();
        let info = ask_one(Style::Ut2004, &state, &hex("80 00 00 00 00"));
        let name_at = 5 + 4 + 1 + 4 + 4;
        assert_eq!(info[0][name_at..name_at + 6], hex("05 43 61 66 e9 00")[..]);
        let players = ask_one(Style::Ut2004, &state, &hex("80 00 00 00 02"));
        assert_eq!(
            players[0][9..20],
            hex("85 42 00 65 00 74 00 30 04 00 00")[..]
        );
    }

    #[test]
    fn long_name_quirk_two_byte_length() {
        let mut state = spec_state(vec![], &[]);
        state.name = "N".repeat(69);
        let info = ask_one(Style::Ut2004, &state, &hex("80 00 00 00 00"));
        let name_at = 5 + 4 + 1 + 4 + 4;
        assert_eq!(info[0][name_at..name_at + 2], hex("46 01")[..]);
        assert_eq!(info[0][name_at + 2 + 69], 0);
        assert_eq!(
            InfoReply::decode(&info[0]).expect("decodes").name,
            text(&state.name)
        );
    }

    #[test]
    fn oversized_text_is_cut_not_dropped() {
        let s = text(&"я".repeat(70_000));
        let crate::unreal2::string::Units::Wide(units) = s.units() else {
            panic!("Cyrillic is UTF-16");
        };
        assert_eq!(units.len(), MAX_TEXT_CHARS);
    }

    #[test]
    fn answer_follows_state_changes() {
        let mut r = Unreal2Responder::default();
        let t0 = Instant::now();
        let mut state = spec_state(vec![], &[]);
        let (_, a) = ask(&mut r, t0, &state, &hex("80 00 00 00 00"));
        state.map = "DM-Antalus".into();
        let (_, b) = ask(&mut r, t0, &state, &hex("80 00 00 00 00"));
        assert_ne!(a, b);
        assert_eq!(
            InfoReply::decode(&b[0]).expect("decodes").map,
            text("DM-Antalus")
        );
    }

    #[test]
    fn stock_refresh_quirk_answers_stale_state_until_the_interval_passed() {
        let settings = Unreal2Settings {
            refresh: STOCK_REFRESH,
            ..Unreal2Settings::default()
        };
        let mut r = Unreal2Responder::new(settings);
        let t0 = Instant::now();
        let mut state = spec_state(vec![], &[]);
        let (_, first) = ask(&mut r, t0, &state, &hex("80 00 00 00 00"));
        state.map = "DM-Antalus".into();
        let (_, stale) = ask(
            &mut r,
            t0 + Duration::from_secs(59),
            &state,
            &hex("80 00 00 00 00"),
        );
        assert_eq!(stale, first);
        let (_, fresh) = ask(&mut r, t0 + STOCK_REFRESH, &state, &hex("80 00 00 00 00"));
        assert_eq!(
            InfoReply::decode(&fresh[0]).expect("decodes").map,
            text("DM-Antalus")
        );
    }

    proptest::proptest! {
        #[test]
        fn any_datagram_never_panics_and_only_5_byte_known_commands_are_accepted(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16)
        ) {
            let state = spec_state(vec![human("Alpha", 1, 4, Some(1)), bot("B")], &[("k", "v")]);
            let mut r = Unreal2Responder::default();
            let (ok, out) = ask(&mut r, Instant::now(), &state, &bytes);
            let valid = bytes.len() == 5 && bytes[4] <= 4;
            proptest::prop_assert_eq!(ok, valid);
            if !valid {
                proptest::prop_assert!(out.is_empty());
            }
        }
    }
}
