//! Several query machines for one server, side by side: `auto` protocol detection and the
//! Unreal 2 native + GameSpy v1 merge.
//!
//! A [`Probe`] owns sub-queries (each a boxed [`QueryMachine`] aimed at one query address),
//! forwards every datagram to all of them (each ignores sources it did not send to), and ends
//! when all have ended or a short grace period after the first answer has passed (the ports
//! that do not answer would otherwise hold the result until their last retry). Then it picks
//! the first answer in the order the sub-queries were given, or merges a UE2 native answer
//! with a GameSpy v1 answer ([`merge_unreal2`] says which source wins for each field). The address that answered is recorded in
//! the result's raw field `query_address`.
//!
//! Pure, like every machine: no sockets, no clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::model::{Protocol, RawValue, ServerInfo, Text};
use crate::query::{Event, QueryError, QueryEvent, QueryMachine, Transmit};

/// A boxed machine producing a server's info.
pub type BoxedQuery = Box<dyn QueryMachine<Output = Box<ServerInfo>> + Send>;

/// How long a probe waits for the other sub-queries once one has answered.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(300);

/// The raw field naming the query address that answered.
pub const QUERY_ADDRESS_FIELD: &str = "query_address";

struct Sub {
    query_address: SocketAddr,
    machine: BoxedQuery,
    result: Option<QueryEvent>,
}

/// What to do when more than one sub-query answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Take the first answer in the order the sub-queries were added.
    First,
    /// Merge a UE2 native answer with a GameSpy v1 answer (`unreal2.md` §14); otherwise as
    /// [`Policy::First`].
    MergeUnreal2,
}

/// Sub-queries for one server, run together.
pub struct Probe {
    subs: Vec<Sub>,
    policy: Policy,
    grace: Duration,
    first_answer: Option<Instant>,
    next_transmit: usize,
    event: Option<QueryEvent>,
    finished: bool,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field(
                "subs",
                &self
                    .subs
                    .iter()
                    .map(|s| s.query_address)
                    .collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl Probe {
    /// An empty probe; add sub-queries with [`Probe::with`].
    #[must_use]
    pub fn new(policy: Policy) -> Self {
        Self {
            subs: Vec::new(),
            policy,
            grace: DEFAULT_GRACE,
            first_answer: None,
            next_transmit: 0,
            event: None,
            finished: false,
        }
    }

    /// Add a sub-query aimed at `query_address`. Earlier sub-queries win ties.
    #[must_use]
    pub fn with(mut self, query_address: SocketAddr, machine: BoxedQuery) -> Self {
        self.subs.push(Sub {
            query_address,
            machine,
            result: None,
        });
        self
    }

    /// Wait this long after the first answer for the others.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    fn collect(&mut self, now: Instant) {
        for sub in &mut self.subs {
            if sub.result.is_none() {
                if let Some(ev) = sub.machine.poll_event() {
                    if matches!(ev, Event::Done(_)) && self.first_answer.is_none() {
                        self.first_answer = Some(now);
                    }
                    sub.result = Some(ev);
                }
            }
        }
        let all_done = self.subs.iter().all(|s| s.result.is_some());
        let grace_over = self.first_answer.is_some_and(|t| now >= t + self.grace);
        if !self.finished && (all_done || grace_over) {
            self.finish();
        }
    }

    fn finish(&mut self) {
        self.finished = true;
        let mut answers: Vec<(SocketAddr, &ServerInfo)> = Vec::new();
        let mut last_error = None;
        for sub in &self.subs {
            match &sub.result {
                Some(Event::Done(info)) => answers.push((sub.query_address, info)),
                // A decode error says more than a timeout: keep it over later timeouts.
                Some(Event::Failed(e))
                    if !matches!(e, QueryError::Timeout) || last_error.is_none() =>
                {
                    last_error = Some(e.clone());
                }
                Some(Event::Failed(_)) | None => {}
            }
        }
        let merged = if self.policy == Policy::MergeUnreal2 {
            let native = answers
                .iter()
                .find(|(_, i)| i.protocol == Protocol::Unreal2);
            let gamespy = answers
                .iter()
                .find(|(_, i)| i.protocol == Protocol::GameSpy1);
            match (native, gamespy) {
                (Some((na, n)), Some((ga, g))) => Some(merge_unreal2(n, *na, g, *ga)),
                _ => None,
            }
        } else {
            None
        };
        let chosen = merged.or_else(|| {
            answers.first().map(|(addr, info)| {
                let mut info = (*info).clone();
                set_query_address(&mut info, *addr);
                info
            })
        });
        self.event = Some(match chosen {
            Some(info) => Event::Done(Box::new(info)),
            None => Event::Failed(last_error.unwrap_or(QueryError::Timeout)),
        });
    }
}

fn set_query_address(info: &mut ServerInfo, addr: SocketAddr) {
    info.raw.retain(|(k, _)| k != QUERY_ADDRESS_FIELD);
    info.raw.push((
        QUERY_ADDRESS_FIELD.to_owned(),
        RawValue::Text(Text::from_utf8_str(&addr.to_string())),
    ));
}

/// The raw field naming the GameSpy query address of a merged UE2 answer.
pub const GAMESPY_QUERY_ADDRESS_FIELD: &str = "gamespy_query_address";

/// The raw field listing (comma-separated plain names) the native player records a merged UE2
/// answer left out because the live GameSpy list does not have them.
pub const NATIVE_ONLY_PLAYERS_FIELD: &str = "native_only_players";

/// The prefix of GameSpy's raw fields in a merged UE2 answer (`gamespy.hostname`, …).
pub const GAMESPY_RAW_PREFIX: &str = "gamespy.";

/// Merge a UE2 native answer with a GameSpy v1 answer of the same server (`unreal2.md` §10,
/// §11, §14). The native reply is built from a cache up to 60 s old, GameSpy's per request;
/// the native reply has the structure GameSpy lacks (UTF-16 names, colour codes, team bits,
/// mutators, game class). Which source wins, field by field:
///
/// | field | winner |
/// |---|---|
/// | `name`, `game_type`, `version` | native when it has one (exact string, class name, `ServerVersion`), else GameSpy |
/// | `map`, `max_players` | GameSpy when it has one (live), else native |
/// | `password` | GameSpy when it says, else native |
/// | `num_players` | GameSpy (live) |
/// | `players` | GameSpy's list decides who is on the server, in its order, with its scores and pings (live); a GameSpy player whose plain name matches a native record takes that record's name (UTF-16, colour codes), and its team when GameSpy has none |
/// | native-only records | dropped when GameSpy's reply is complete (a player who left, or a spectator: the native list cannot tell them apart), their names kept in raw [`NATIVE_ONLY_PLAYERS_FIELD`]; kept when GameSpy's reply is partial |
/// | `rules` | native's, then GameSpy's keys the native rules lack |
/// | `ping` | native's (the `0x00` exchange), else GameSpy's |
/// | `partial` | GameSpy's, else native's |
/// | `raw` | native's, then GameSpy's under [`GAMESPY_RAW_PREFIX`] |
///
/// The result does not depend on which reply arrived first.
#[must_use]
pub fn merge_unreal2(
    native: &ServerInfo,
    native_addr: SocketAddr,
    gamespy: &ServerInfo,
    gamespy_addr: SocketAddr,
) -> ServerInfo {
    let mut out = native.clone();
    if out.name.is_empty() {
        out.name = gamespy.name.clone();
    }
    if !gamespy.map.is_empty() {
        out.map = gamespy.map.clone();
    }
    if out.game_type.is_empty() {
        out.game_type = gamespy.game_type.clone();
    }
    if out.version.is_empty() {
        out.version = gamespy.version.clone();
    }
    if gamespy.password.is_some() {
        out.password = gamespy.password;
    }
    out.num_players = gamespy.num_players;
    if gamespy.max_players > 0 {
        out.max_players = gamespy.max_players;
    }
    out.ping = native.ping.or(gamespy.ping);
    let mut used = vec![false; native.players.len()];
    let mut players = Vec::with_capacity(gamespy.players.len());
    for g in &gamespy.players {
        let mut p = g.clone();
        let found =
            native.players.iter().enumerate().find(|(i, n)| {
                !used.get(*i).copied().unwrap_or(true) && n.name.plain == g.name.plain
            });
        if let Some((i, n)) = found {
            if let Some(u) = used.get_mut(i) {
                *u = true;
            }
            p.name = n.name.clone();
            p.team = g.team.or(n.team);
            p.raw.extend(n.raw.iter().cloned());
        }
        players.push(p);
    }
    let leftover = native
        .players
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(p, _)| p);
    if gamespy.partial.is_some() {
        players.extend(leftover.cloned());
    } else {
        let names: Vec<&str> = leftover.map(|p| p.name.plain.as_str()).collect();
        if !names.is_empty() {
            out.raw.push((
                NATIVE_ONLY_PLAYERS_FIELD.to_owned(),
                RawValue::Text(Text::from_utf8_str(&names.join(","))),
            ));
        }
    }
    out.players = players;
    for rule in &gamespy.rules {
        if !out
            .rules
            .iter()
            .any(|r| r.key.text.eq_ignore_ascii_case(&rule.key.text))
        {
            out.rules.push(rule.clone());
        }
    }
    if gamespy.partial.is_some() {
        out.partial.clone_from(&gamespy.partial);
    }
    out.raw.extend(
        gamespy
            .raw
            .iter()
            .filter(|(k, _)| k != QUERY_ADDRESS_FIELD)
            .map(|(k, v)| (format!("{GAMESPY_RAW_PREFIX}{k}"), v.clone())),
    );
    set_query_address(&mut out, native_addr);
    out.raw.push((
        GAMESPY_QUERY_ADDRESS_FIELD.to_owned(),
        RawValue::Text(Text::from_utf8_str(&gamespy_addr.to_string())),
    ));
    out
}

impl QueryMachine for Probe {
    type Output = Box<ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.finished {
            return;
        }
        for sub in self.subs.iter_mut().filter(|s| s.result.is_none()) {
            sub.machine.handle_datagram(now, from, datagram);
        }
        self.collect(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        for sub in self.subs.iter_mut().filter(|s| s.result.is_none()) {
            if sub.machine.poll_timeout().is_some_and(|t| t <= now) {
                sub.machine.handle_timeout(now);
            }
        }
        self.collect(now);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.finished {
            return None;
        }
        let n = self.subs.len();
        for step in 0..n {
            let i = (self.next_transmit + step) % n;
            if let Some(sub) = self.subs.get_mut(i) {
                if sub.result.is_some() {
                    continue;
                }
                if let Some(t) = sub.machine.poll_transmit(now, buf) {
                    self.next_transmit = i;
                    return Some(t);
                }
            }
        }
        // Every sub-query has sent what it wanted; collect events that sending may have ended.
        self.collect(now);
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        let subs = self
            .subs
            .iter()
            .filter(|s| s.result.is_none())
            .filter_map(|s| s.machine.poll_timeout());
        let grace = self.first_answer.map(|t| t + self.grace);
        subs.chain(grace).min()
    }

    fn poll_event(&mut self) -> Option<QueryEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        for sub in &mut self.subs {
            sub.machine.set_attempt_timeout(timeout);
        }
    }

    fn abort(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        for sub in self.subs.iter_mut().filter(|s| s.result.is_none()) {
            sub.machine.abort(now);
        }
        self.collect(now);
        if !self.finished {
            self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Player, Rule};

    /// Answers with `info` to the first datagram from `target`, or never.
    struct Scripted {
        target: SocketAddr,
        info: Option<ServerInfo>,
        sent: bool,
        deadline: Option<Instant>,
        event: Option<QueryEvent>,
    }

    impl Scripted {
        fn boxed(target: &str, info: Option<ServerInfo>) -> BoxedQuery {
            Box::new(Self {
                target: target.parse().unwrap(),
                info,
                sent: false,
                deadline: None,
                event: None,
            })
        }
    }

    impl QueryMachine for Scripted {
        type Output = Box<ServerInfo>;
        fn handle_datagram(&mut self, _now: Instant, from: SocketAddr, _d: &[u8]) {
            if from == self.target && self.event.is_none() {
                if let Some(info) = self.info.take() {
                    self.event = Some(Event::Done(Box::new(info)));
                    self.deadline = None;
                }
            }
        }
        fn handle_timeout(&mut self, now: Instant) {
            if self.deadline.is_some_and(|d| now >= d) {
                self.deadline = None;
                self.event = Some(Event::Failed(QueryError::Timeout));
            }
        }
        fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
            if self.sent {
                return None;
            }
            self.sent = true;
            self.deadline = Some(now + Duration::from_secs(2));
            buf.push(1);
            Some(Transmit {
                destination: self.target,
            })
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.deadline
        }
        fn poll_event(&mut self) -> Option<QueryEvent> {
            self.event.take()
        }
        fn abort(&mut self, _now: Instant) {
            if self.event.is_none() {
                self.event = Some(Event::Failed(QueryError::Timeout));
            }
            self.deadline = None;
        }
    }

    fn info(protocol: Protocol, name: &str) -> ServerInfo {
        let mut i = ServerInfo::new(protocol);
        i.name = Text::from_utf8_str(name);
        i
    }

    fn drain(p: &mut Probe, now: Instant) -> Vec<SocketAddr> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(t) = p.poll_transmit(now, &mut buf) {
            out.push(t.destination);
            buf.clear();
        }
        out
    }

    #[test]
    fn first_answer_wins_after_grace_and_names_its_address() {
        let t0 = Instant::now();
        let mut p = Probe::new(Policy::First)
            .with(
                "127.0.0.1:1".parse().unwrap(),
                Scripted::boxed("127.0.0.1:1", None),
            )
            .with(
                "127.0.0.1:2".parse().unwrap(),
                Scripted::boxed("127.0.0.1:2", Some(info(Protocol::Teeworlds, "tw"))),
            );
        assert_eq!(drain(&mut p, t0).len(), 2);
        p.handle_datagram(
            t0 + Duration::from_millis(5),
            "127.0.0.1:2".parse().unwrap(),
            b"x",
        );
        assert!(p.poll_event().is_none(), "waits for the grace period");
        let at = p.poll_timeout().unwrap();
        assert_eq!(at, t0 + Duration::from_millis(5) + DEFAULT_GRACE);
        p.handle_timeout(at);
        let Some(Event::Done(info)) = p.poll_event() else {
            panic!("no result")
        };
        assert_eq!(info.name.text, "tw");
        assert_eq!(
            info.raw_field(QUERY_ADDRESS_FIELD),
            Some(&RawValue::Text(Text::from_utf8_str("127.0.0.1:2")))
        );
        assert!(p.poll_timeout().is_none());
    }

    #[test]
    fn nothing_answers_is_a_timeout() {
        let t0 = Instant::now();
        let mut p = Probe::new(Policy::First).with(
            "127.0.0.1:1".parse().unwrap(),
            Scripted::boxed("127.0.0.1:1", None),
        );
        drain(&mut p, t0);
        p.handle_timeout(t0 + Duration::from_secs(2));
        assert_eq!(p.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    fn player(name: &str, score: i64, ping: u32, team: Option<i32>) -> Player {
        Player {
            name: Text::from_utf8_str(name),
            score: Some(score),
            ping_ms: Some(ping),
            team,
            ..Player::default()
        }
    }

    /// A native answer from the 60-second cache: Alpha and Gone (who has left since), old
    /// scores, the old map.
    fn stale_native() -> ServerInfo {
        let mut native = info(Protocol::Unreal2, "Native «name»");
        native.map = Text::from_utf8_str("DM-Old");
        native.game_type = Text::from_utf8_str("xDeathMatch");
        native.num_players = 2;
        native.max_players = 16;
        native.players.push(player("Alpha", 1, 40, Some(1)));
        native.players.push(player("Gone", 9, 80, Some(0)));
        native.rules.push(Rule {
            key: Text::from_utf8_str("Mutator"),
            value: Text::from_utf8_str("MutInstaGib"),
        });
        native
    }

    /// The live GameSpy answer: Alpha with a new score, Bravo who just joined, a new map.
    fn live_gamespy() -> ServerInfo {
        let mut gs = info(Protocol::GameSpy1, "GameSpy name");
        gs.map = Text::from_utf8_str("DM-New");
        gs.game_type = Text::from_utf8_str("xDeathMatch");
        gs.num_players = 2;
        gs.max_players = 16;
        gs.password = Some(true);
        gs.players.push(player("Alpha", 7, 44, None));
        gs.players.push(player("Bravo", 3, 60, Some(1)));
        gs.rules.push(Rule {
            key: Text::from_utf8_str("AdminName"),
            value: Text::from_utf8_str("Bob"),
        });
        gs.raw.push((
            "hostname".to_owned(),
            RawValue::Text(Text::from_utf8_str("GameSpy name")),
        ));
        gs
    }

    /// Runs a merge probe over `native` and `gamespy`, the replies arriving in `order`.
    fn merged(native: ServerInfo, gamespy: ServerInfo, gamespy_first: bool) -> ServerInfo {
        let t0 = Instant::now();
        let mut p = Probe::new(Policy::MergeUnreal2)
            .with(
                "127.0.0.1:7778".parse().unwrap(),
                Scripted::boxed("127.0.0.1:7778", Some(native)),
            )
            .with(
                "127.0.0.1:7787".parse().unwrap(),
                Scripted::boxed("127.0.0.1:7787", Some(gamespy)),
            );
        drain(&mut p, t0);
        let (first, second) = if gamespy_first {
            ("127.0.0.1:7787", "127.0.0.1:7778")
        } else {
            ("127.0.0.1:7778", "127.0.0.1:7787")
        };
        p.handle_datagram(t0, first.parse().unwrap(), b"x");
        p.handle_datagram(
            t0 + Duration::from_millis(50),
            second.parse().unwrap(),
            b"x",
        );
        let Some(Event::Done(m)) = p.poll_event() else {
            panic!("no result")
        };
        *m
    }

    #[test]
    fn unreal2_merge_takes_structure_from_native_and_live_values_from_gamespy() {
        for gamespy_first in [false, true] {
            let m = merged(stale_native(), live_gamespy(), gamespy_first);
            assert_eq!(m.protocol, Protocol::Unreal2);
            assert_eq!(m.name.text, "Native «name»");
            assert_eq!(m.map.text, "DM-New", "the live map wins");
            assert_eq!(m.game_type.text, "xDeathMatch");
            assert_eq!(m.num_players, 2);
            assert_eq!(m.password, Some(true));
            let names: Vec<&str> = m.players.iter().map(|p| p.name.text.as_str()).collect();
            assert_eq!(
                names,
                ["Alpha", "Bravo"],
                "Gone left: only the stale list has him"
            );
            assert_eq!(m.players[0].score, Some(7));
            assert_eq!(m.players[0].ping_ms, Some(44));
            assert_eq!(m.players[0].team, Some(1), "GameSpy has no team: native's");
            assert_eq!(
                m.raw_field(NATIVE_ONLY_PLAYERS_FIELD),
                Some(&RawValue::Text(Text::from_utf8_str("Gone")))
            );
            let rules: Vec<&str> = m.rules.iter().map(|r| r.key.text.as_str()).collect();
            assert_eq!(rules, ["Mutator", "AdminName"]);
            assert_eq!(
                m.raw_field("gamespy.hostname"),
                Some(&RawValue::Text(Text::from_utf8_str("GameSpy name")))
            );
            assert_eq!(
                m.raw_field(QUERY_ADDRESS_FIELD),
                Some(&RawValue::Text(Text::from_utf8_str("127.0.0.1:7778")))
            );
            assert_eq!(
                m.raw_field(GAMESPY_QUERY_ADDRESS_FIELD),
                Some(&RawValue::Text(Text::from_utf8_str("127.0.0.1:7787")))
            );
        }
        assert_eq!(
            merged(stale_native(), live_gamespy(), false),
            merged(stale_native(), live_gamespy(), true),
            "the arrival order changes nothing"
        );
    }

    #[test]
    fn unreal2_merge_with_a_larger_live_list_keeps_every_live_player_once() {
        let mut gs = live_gamespy();
        for i in 0..6 {
            gs.players.push(player(&format!("New{i}"), i, 50, None));
        }
        gs.num_players = 8;
        for gamespy_first in [false, true] {
            let m = merged(stale_native(), gs.clone(), gamespy_first);
            assert_eq!(m.num_players, 8);
            assert_eq!(m.players.len(), 8);
            assert!(!m.players.iter().any(|p| p.name.text == "Gone"));
        }
    }

    #[test]
    fn unreal2_merge_keeps_native_only_records_when_gamespy_is_partial() {
        let mut gs = live_gamespy();
        gs.partial = Some(crate::model::Partial {
            reason: "server went quiet before the final datagram".to_owned(),
        });
        for gamespy_first in [false, true] {
            let m = merged(stale_native(), gs.clone(), gamespy_first);
            let names: Vec<&str> = m.players.iter().map(|p| p.name.text.as_str()).collect();
            assert_eq!(names, ["Alpha", "Bravo", "Gone"]);
            assert_eq!(m.partial, gs.partial);
            assert!(m.raw_field(NATIVE_ONLY_PLAYERS_FIELD).is_none());
        }
    }

    #[test]
    fn unreal2_merge_takes_native_names_with_colour_codes_and_an_empty_live_list() {
        let mut native = stale_native();
        native.players[0].name = Text {
            raw: b"\x1b\xff\x01\x01Alpha".to_vec(),
            text: "\u{1b}\u{ff}\u{1}\u{1}Alpha".to_owned(),
            plain: "Alpha".to_owned(),
            lossy: false,
        };
        let m = merged(native.clone(), live_gamespy(), true);
        assert_eq!(m.players[0].name, native.players[0].name);
        // Everybody left: the live answer has nobody, so nobody is listed.
        let mut empty = live_gamespy();
        empty.players.clear();
        empty.num_players = 0;
        let m = merged(native, empty, false);
        assert!(m.players.is_empty());
        assert_eq!(m.num_players, 0);
    }

    #[test]
    fn abort_finishes_with_what_came() {
        let t0 = Instant::now();
        let mut p = Probe::new(Policy::First)
            .with(
                "127.0.0.1:1".parse().unwrap(),
                Scripted::boxed("127.0.0.1:1", None),
            )
            .with(
                "127.0.0.1:2".parse().unwrap(),
                Scripted::boxed("127.0.0.1:2", Some(info(Protocol::GameAgent, "ga"))),
            );
        drain(&mut p, t0);
        p.handle_datagram(t0, "127.0.0.1:2".parse().unwrap(), b"x");
        p.abort(t0);
        assert!(matches!(p.poll_event(), Some(Event::Done(i)) if i.name.text == "ga"));
        assert!(p.poll_event().is_none());
    }
}
