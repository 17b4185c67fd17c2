//! The sans-IO Unreal 2 query (spec §9, §14): `0x00`, `0x01` and `0x02` sent back to back,
//! replies merged by type, idle-gap completion, per-part retries, partial results.
//!
//! ```text
//! t0       send 00, 01, 02            (each part has its own attempt timer)
//! 00 reply -> info, ping = t - send;  CurrentPlayers 0 -> players not needed
//! 01/02    -> merge (exact duplicates dropped); part done idle_gap after its last datagram
//! timer    -> a part with no datagram at all is re-sent (never one that got something: that
//!             would double its pairs, §9); after the last retry it is given up
//! all parts done / given up -> Done(ServerInfo) (partial if something is missing),
//!                              or Failed when nothing usable came
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::packet::{
    Command, FLAG_PASSWORD, InfoReply, InfoTail, PlayerRecord, Reply, Request, RulePair,
    VERSION_UT2004,
};
use super::{MAX_DATAGRAMS_PER_PART, decode_text};
use crate::model::{Partial, Player, Protocol, RawValue, Rule, ServerInfo, Text};
use crate::query::{
    Event, QueryConfig, QueryError, QueryEvent, QueryMachine, RetryAction, RetrySchedule, Transmit,
};
use crate::wire::DecodeError;

/// How the query is timed (defaults from spec §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreal2Config {
    /// Per-part attempt timeout and retries (default 2 s, 1 retry: the UT2004 client's own
    /// per-ping timeout). Only parts that got no datagram at all are re-sent.
    pub query: QueryConfig,
    /// Rules or players are complete this long after their last datagram (default 300 ms).
    pub idle_gap: Duration,
    /// The version field of the requests (default `0x80`; servers accept any value).
    pub request_version: u32,
}

impl Default for Unreal2Config {
    fn default() -> Self {
        Self {
            query: QueryConfig {
                attempt_timeout: Duration::from_secs(2),
                retries: 1,
            },
            idle_gap: Duration::from_millis(300),
            request_version: VERSION_UT2004,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartState {
    /// Sent (or about to be), nothing received yet.
    Waiting,
    /// At least one datagram received; done after the idle gap.
    Receiving,
    /// Complete.
    Done,
    /// No datagram after the last attempt.
    GaveUp,
    /// Not expected (players of a server that reports 0 players).
    NotNeeded,
}

#[derive(Debug, Clone)]
struct Part {
    command: Command,
    schedule: RetrySchedule,
    pending: bool,
    state: PartState,
    last_at: Option<Instant>,
    seen: Vec<Vec<u8>>,
}

impl Part {
    fn new(command: Command, config: QueryConfig) -> Self {
        Self {
            command,
            schedule: RetrySchedule::new(config),
            pending: true,
            state: PartState::Waiting,
            last_at: None,
            seen: Vec::new(),
        }
    }

    const fn settled(&self) -> bool {
        matches!(
            self.state,
            PartState::Done | PartState::GaveUp | PartState::NotNeeded
        )
    }

    fn received(&self) -> bool {
        !self.seen.is_empty()
    }

    /// Record a datagram of this part; false for an exact duplicate or one over the limit.
    fn accept(&mut self, now: Instant, datagram: &[u8], overflow: &mut bool) -> bool {
        if self.seen.iter().any(|d| d == datagram) {
            return false;
        }
        if self.seen.len() >= MAX_DATAGRAMS_PER_PART {
            *overflow = true;
            return false;
        }
        self.seen.push(datagram.to_vec());
        self.schedule.stop();
        self.pending = false;
        self.state = PartState::Receiving;
        self.last_at = Some(now);
        true
    }
}

const INFO: usize = 0;
const RULES: usize = 1;
const PLAYERS: usize = 2;

/// A sans-IO query of one Unreal 2 server (spec §14): implements [`QueryMachine`] with
/// `Output = Box<ServerInfo>` (`Protocol::Unreal2`), ready to be merged with a GameSpy v1
/// result by the query engine.
///
/// Build it with [`Unreal2Query::new`], then follow the loop in [`crate::query`]. Datagrams
/// from other addresses, shorter than 5 bytes, of other types (small ping, Pariah) and exact
/// duplicates are ignored. Before the first [`QueryMachine::poll_transmit`] there is no
/// timeout ([`QueryMachine::poll_timeout`] is `None`).
#[derive(Debug, Clone)]
pub struct Unreal2Query {
    target: SocketAddr,
    config: Unreal2Config,
    parts: [Part; 3],
    info: Option<InfoReply>,
    rules: Vec<RulePair>,
    players: Vec<PlayerRecord>,
    ping: Option<Duration>,
    cut: bool,
    overflow: bool,
    aborted: bool,
    last_error: Option<DecodeError>,
    event: Option<QueryEvent>,
    finished: bool,
}

impl Unreal2Query {
    /// A query of the native port `target` (game port + 1). Nothing is sent until
    /// [`QueryMachine::poll_transmit`] is called.
    #[must_use]
    pub fn new(target: SocketAddr, config: Unreal2Config) -> Self {
        Self {
            target,
            config,
            parts: [
                Part::new(Command::Info, config.query),
                Part::new(Command::Rules, config.query),
                Part::new(Command::Players, config.query),
            ],
            info: None,
            rules: Vec::new(),
            players: Vec::new(),
            ping: None,
            cut: false,
            overflow: false,
            aborted: false,
            last_error: None,
            event: None,
            finished: false,
        }
    }

    /// The address being queried.
    #[must_use]
    pub const fn target(&self) -> SocketAddr {
        self.target
    }

    fn part(&self, i: usize) -> Option<&Part> {
        self.parts.get(i)
    }

    fn on_reply(&mut self, now: Instant, datagram: &[u8], reply: Reply) {
        let mut overflow = false;
        match reply {
            Reply::Info(info) => {
                let Some(part) = self.parts.get_mut(INFO) else {
                    return;
                };
                if part.received() {
                    return;
                }
                part.accept(now, datagram, &mut overflow);
                part.state = PartState::Done;
                self.ping = part
                    .schedule
                    .last_sent()
                    .map(|t| now.saturating_duration_since(t));
                if info.current_players <= 0 {
                    if let Some(p) = self.parts.get_mut(PLAYERS) {
                        if !p.received() {
                            p.schedule.stop();
                            p.pending = false;
                            p.state = PartState::NotNeeded;
                        }
                    }
                }
                self.info = Some(*info);
            }
            Reply::Rules(rules) => {
                if let Some(part) = self.parts.get_mut(RULES) {
                    if part.accept(now, datagram, &mut overflow) {
                        self.cut |= !rules.trailing.is_empty();
                        self.rules.extend(rules.pairs);
                    }
                }
            }
            Reply::Players(players) => {
                if let Some(part) = self.parts.get_mut(PLAYERS) {
                    if part.accept(now, datagram, &mut overflow) {
                        self.cut |= !players.trailing().is_empty();
                        self.players.extend(players.into_players());
                    }
                }
            }
            Reply::SmallPing(_) | Reply::Unknown { .. } => {}
        }
        self.overflow |= overflow;
    }

    fn settle_idle(&mut self, now: Instant) {
        let gap = self.config.idle_gap;
        for part in &mut self.parts {
            if part.state == PartState::Receiving
                && part
                    .last_at
                    .and_then(|t| t.checked_add(gap))
                    .is_none_or(|end| now >= end)
            {
                part.state = PartState::Done;
            }
        }
    }

    fn maybe_finish(&mut self) {
        if !self.finished && self.parts.iter().all(Part::settled) {
            self.finish();
        }
    }

    fn finish(&mut self) {
        self.finished = true;
        let anything = self.parts.iter().any(Part::received);
        if !anything {
            self.event = Some(Event::Failed(match self.last_error.clone() {
                Some(e) => QueryError::Decode(e),
                None => QueryError::Timeout,
            }));
            return;
        }
        let rules_known = self.part(RULES).is_some_and(Part::received);
        let mut info = server_info(
            self.info.as_ref(),
            rules_known.then_some(&self.rules[..]),
            &self.players,
        );
        info.ping = self.ping;
        let mut reasons = Vec::new();
        if self.info.is_none() {
            reasons.push("no server info reply");
        }
        if !rules_known {
            reasons.push("no rules reply");
        }
        if self
            .part(PLAYERS)
            .is_some_and(|p| !p.received() && p.state != PartState::NotNeeded)
        {
            reasons.push("no players reply");
        }
        if self.cut {
            reasons.push("a reply datagram was cut short");
        }
        if self.overflow {
            reasons.push("too many reply datagrams");
        }
        if self.aborted {
            reasons.push("aborted before every part was complete");
        }
        if !reasons.is_empty() {
            info.partial = Some(Partial {
                reason: reasons.join("; "),
            });
        }
        self.event = Some(Event::Done(Box::new(info)));
    }
}

impl QueryMachine for Unreal2Query {
    type Output = Box<ServerInfo>;

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.finished || from != self.target {
            return;
        }
        match Reply::decode(datagram) {
            Ok(reply) => self.on_reply(now, datagram, reply),
            Err(e) => self.last_error = Some(e),
        }
        self.settle_idle(now);
        self.maybe_finish();
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.settle_idle(now);
        for part in &mut self.parts {
            if part.state == PartState::Waiting && !part.pending {
                match part.schedule.on_timeout(now) {
                    RetryAction::Resend => part.pending = true,
                    RetryAction::GiveUp => part.state = PartState::GaveUp,
                    RetryAction::Wait => {}
                }
            }
        }
        self.maybe_finish();
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.finished {
            return None;
        }
        let version = self.config.request_version;
        let part = self.parts.iter_mut().find(|p| p.pending)?;
        part.pending = false;
        part.schedule.on_send(now);
        Request {
            version,
            command: part.command,
        }
        .encode(buf);
        Some(Transmit {
            destination: self.target,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        let gap = self.config.idle_gap;
        self.parts
            .iter()
            .filter_map(|p| match p.state {
                PartState::Waiting => p.schedule.deadline(),
                PartState::Receiving => p.last_at.and_then(|t| t.checked_add(gap)),
                _ => None,
            })
            .min()
    }

    fn poll_event(&mut self) -> Option<QueryEvent> {
        self.event.take()
    }

    fn set_attempt_timeout(&mut self, timeout: Duration) {
        self.config.query.attempt_timeout = timeout;
        for part in &mut self.parts {
            part.schedule.set_attempt_timeout(timeout);
        }
    }

    fn abort(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.settle_idle(now);
        for part in &mut self.parts {
            if !part.settled() {
                self.aborted = true;
                part.pending = false;
                part.state = if part.received() {
                    PartState::Done
                } else {
                    PartState::GaveUp
                };
            }
        }
        self.finish();
    }
}

/// Map Unreal 2 replies to the protocol-neutral [`ServerInfo`] (`Protocol::Unreal2`).
///
/// - `info`: the `0x00` reply, if one came; name, map, game type (the game class),
///   player counts and the `raw` fields `version`, `server_id`, `ip`, `port`, `query_port`,
///   `layout`, `info_ping`, `flags`, `skill_level`, `wave_current`, `wave_total`,
///   `info_trailing` come from it.
/// - `rules`: every pair in order, or `None` when no rules reply came. `version` is the
///   `ServerVersion` rule. `password` is the `GamePassword` rule (`True`/`False`, any case),
///   else `Some(true)` if Flags has bit 1, else `Some(false)` when rules came (stock servers
///   send the rule only when a password is set), else `None`.
/// - `players`: name, score, ping, team from StatsID bits 29/30; `raw` keeps `player_num`,
///   `stats_id` and, for XMP, `player_id` and the extra pairs under their own keys.
///
/// `ping` and `partial` are left for the caller (the query machine fills them).
#[must_use]
pub fn server_info(
    info: Option<&InfoReply>,
    rules: Option<&[RulePair]>,
    players: &[PlayerRecord],
) -> ServerInfo {
    let mut out = ServerInfo::new(Protocol::Unreal2);
    let mut flags = None;
    if let Some(i) = info {
        out.name = decode_text(&i.name);
        out.map = decode_text(&i.map);
        out.game_type = decode_text(&i.game_type);
        out.num_players = u32::try_from(i.current_players).unwrap_or(0);
        out.max_players = u32::try_from(i.max_players).unwrap_or(0);
        let raw = &mut out.raw;
        raw.push(("version".into(), RawValue::Int(i64::from(i.version))));
        raw.push(("server_id".into(), RawValue::Int(i64::from(i.server_id))));
        raw.push(("ip".into(), RawValue::Text(decode_text(&i.ip))));
        raw.push(("port".into(), RawValue::Int(i64::from(i.port))));
        raw.push(("query_port".into(), RawValue::Int(i64::from(i.query_port))));
        raw.push((
            "layout".into(),
            RawValue::Text(Text::from_utf8_str(i.tail.layout_name())),
        ));
        if let InfoTail::KillingFloor {
            wave_current,
            wave_total,
            ..
        } = &i.tail
        {
            raw.push((
                "wave_current".into(),
                RawValue::Int(i64::from(*wave_current)),
            ));
            raw.push(("wave_total".into(), RawValue::Int(i64::from(*wave_total))));
        }
        if let Some(p) = i.tail.ping() {
            raw.push(("info_ping".into(), RawValue::Int(i64::from(p))));
        }
        flags = i.tail.flags();
        if let Some(f) = flags {
            raw.push(("flags".into(), RawValue::Int(i64::from(f))));
        }
        if let Some(s) = i.tail.skill_level() {
            raw.push(("skill_level".into(), RawValue::Text(decode_text(s))));
        }
        if let InfoTail::Other { trailing, .. } = &i.tail {
            if !trailing.is_empty() {
                raw.push(("info_trailing".into(), RawValue::Bytes(trailing.clone())));
            }
        }
    }
    let mut password_rule = None;
    if let Some(rules) = rules {
        for pair in rules {
            let key = decode_text(&pair.key);
            let value = decode_text(&pair.value);
            if key.plain.eq_ignore_ascii_case("GamePassword") {
                if value.plain.eq_ignore_ascii_case("true") {
                    password_rule = Some(true);
                } else if value.plain.eq_ignore_ascii_case("false") {
                    password_rule = Some(false);
                }
            }
            if key.plain.eq_ignore_ascii_case("ServerVersion") {
                out.version = value.clone();
            }
            out.rules.push(Rule { key, value });
        }
    }
    out.password = password_rule.or_else(|| {
        if flags.is_some_and(|f| f & FLAG_PASSWORD != 0) {
            Some(true)
        } else {
            rules.map(|_| false)
        }
    });
    out.players = players.iter().map(player).collect();
    out
}

fn player(p: &PlayerRecord) -> Player {
    let mut raw = vec![
        ("player_num".to_owned(), RawValue::Int(i64::from(p.num))),
        ("stats_id".to_owned(), RawValue::Int(i64::from(p.stats_id))),
    ];
    if let Some(x) = &p.xmp {
        raw.push((
            "player_id".to_owned(),
            RawValue::Int(i64::from(x.player_id)),
        ));
        for pair in &x.pairs {
            raw.push((
                decode_text(&pair.key).plain,
                RawValue::Text(decode_text(&pair.value)),
            ));
        }
    }
    Player {
        name: decode_text(&p.name),
        score: Some(i64::from(p.score)),
        ping_ms: u32::try_from(p.ping).ok(),
        team: p.team(),
        spectator: None,
        clan: None,
        country: None,
        raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unreal2::packet::{ServerSnapshot, Style, encode_rules};
    use crate::unreal2::string::U2String;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn target() -> SocketAddr {
        "127.0.0.1:7778".parse().expect("addr")
    }

    fn s(t: &str) -> U2String {
        U2String::from_text(t).expect("short")
    }

    fn snapshot(current: i32, players: usize) -> ServerSnapshot {
        let info = InfoReply::stock(
            Style::Ut2004,
            7777,
            s("My Srv"),
            s("DM-Rankin"),
            s("xDeathMatch"),
            current,
            16,
        );
        ServerSnapshot {
            info,
            rules: vec![
                RulePair::from_text("AdminName", "Bob").expect("short"),
                RulePair::from_text("Mutator", "MutA").expect("short"),
            ],
            players: (0..players)
                .map(|n| PlayerRecord {
                    num: i32::try_from(n).unwrap_or(0),
                    name: s(&format!("Player{n:02}-with-a-long-name-to-fill-datagrams")),
                    ping: 40,
                    score: 1,
                    stats_id: 0x2000_0000,
                    xmp: None,
                })
                .collect(),
        }
    }

    fn answer(snap: &ServerSnapshot, cmd: u8) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        snap.answer(&[0x80, 0, 0, 0, cmd], &mut out);
        out
    }

    fn drain(q: &mut Unreal2Query, now: Instant) -> Vec<Vec<u8>> {
        let mut sent = Vec::new();
        loop {
            let mut buf = Vec::new();
            match q.poll_transmit(now, &mut buf) {
                Some(t) => {
                    assert_eq!(t.destination, target());
                    sent.push(buf);
                }
                None => return sent,
            }
        }
    }

    fn done(q: &mut Unreal2Query) -> Box<ServerInfo> {
        match q.poll_event() {
            Some(Event::Done(info)) => info,
            other => panic!("expected Done, got {other:?}"),
        }
    }

    #[test]
    fn sends_info_rules_players_back_to_back() {
        let t0 = Instant::now();
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        assert_eq!(q.poll_timeout(), None);
        let sent = drain(&mut q, t0);
        assert_eq!(
            sent,
            vec![
                vec![0x80, 0, 0, 0, 0],
                vec![0x80, 0, 0, 0, 1],
                vec![0x80, 0, 0, 0, 2]
            ]
        );
        assert_eq!(q.poll_timeout(), Some(t0 + Duration::from_secs(2)));
        assert!(q.poll_event().is_none());
    }

    #[test]
    fn full_exchange_completes_after_idle_gap_with_ping() {
        let t0 = Instant::now();
        let snap = snapshot(2, 1);
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        for d in answer(&snap, 0) {
            q.handle_datagram(t0 + MS(30), target(), &d);
        }
        for d in answer(&snap, 1).into_iter().chain(answer(&snap, 2)) {
            q.handle_datagram(t0 + MS(31), target(), &d);
        }
        assert_eq!(q.poll_timeout(), Some(t0 + MS(331)));
        q.handle_timeout(t0 + MS(330));
        assert!(q.poll_event().is_none());
        q.handle_timeout(t0 + MS(331));
        let info = done(&mut q);
        assert_eq!(info.ping, Some(MS(30)));
        assert_eq!(info.name.text, "My Srv");
        assert_eq!(info.num_players, 2);
        assert_eq!(info.players.len(), 1);
        assert_eq!(info.rules.len(), 2);
        assert_eq!(info.password, Some(false));
        assert_eq!(info.partial, None);
        assert_eq!(q.poll_timeout(), None);
        assert!(q.poll_event().is_none());
    }

    #[test]
    fn empty_server_completes_without_players_reply() {
        let t0 = Instant::now();
        let snap = snapshot(0, 0);
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        assert!(answer(&snap, 2).is_empty());
        for d in answer(&snap, 0).into_iter().chain(answer(&snap, 1)) {
            q.handle_datagram(t0 + MS(10), target(), &d);
        }
        // Only the rules idle gap is left to wait for, not a players timeout.
        assert_eq!(q.poll_timeout(), Some(t0 + MS(310)));
        q.handle_timeout(t0 + MS(310));
        let info = done(&mut q);
        assert!(info.players.is_empty());
        assert_eq!(info.partial, None);
    }

    #[test]
    fn spectator_players_of_empty_server_are_merged() {
        let t0 = Instant::now();
        let snap = snapshot(0, 1);
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        for d in [answer(&snap, 0), answer(&snap, 1), answer(&snap, 2)].concat() {
            q.handle_datagram(t0 + MS(10), target(), &d);
        }
        q.handle_timeout(t0 + MS(310));
        assert_eq!(done(&mut q).players.len(), 1);
    }

    #[test]
    fn split_players_merge_in_any_order_and_duplicates_are_dropped() {
        let t0 = Instant::now();
        let snap = snapshot(30, 30);
        let players = answer(&snap, 2);
        assert!(players.len() >= 3, "{}", players.len());
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        q.handle_datagram(t0 + MS(5), target(), &answer(&snap, 0)[0]);
        for (i, d) in players.iter().rev().enumerate() {
            q.handle_datagram(t0 + MS(6 + i as u64), target(), d);
            q.handle_datagram(t0 + MS(6 + i as u64), target(), d);
        }
        q.handle_datagram(t0 + MS(20), target(), &answer(&snap, 1)[0]);
        q.handle_timeout(t0 + MS(320));
        let info = done(&mut q);
        assert_eq!(info.players.len(), 30);
        assert_eq!(info.partial, None);
    }

    #[test]
    fn retries_only_the_parts_that_got_nothing() {
        let t0 = Instant::now();
        let snap = snapshot(2, 1);
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        // Info and players arrive; rules are lost.
        q.handle_datagram(t0 + MS(10), target(), &answer(&snap, 0)[0]);
        q.handle_datagram(t0 + MS(10), target(), &answer(&snap, 2)[0]);
        q.handle_timeout(t0 + MS(310));
        assert!(q.poll_event().is_none());
        assert_eq!(q.poll_timeout(), Some(t0 + MS(2000)));
        q.handle_timeout(t0 + MS(2000));
        assert_eq!(drain(&mut q, t0 + MS(2000)), vec![vec![0x80, 0, 0, 0, 1]]);
        q.handle_datagram(t0 + MS(2010), target(), &answer(&snap, 1)[0]);
        q.handle_timeout(t0 + MS(2310));
        let info = done(&mut q);
        assert_eq!(info.rules.len(), 2);
        assert_eq!(info.partial, None);
        // The ping is from the first 0x00 exchange.
        assert_eq!(info.ping, Some(MS(10)));
    }

    #[test]
    fn retries_zero_sends_once_then_fails() {
        let t0 = Instant::now();
        let config = Unreal2Config {
            query: QueryConfig {
                attempt_timeout: MS(500),
                retries: 0,
            },
            ..Unreal2Config::default()
        };
        let mut q = Unreal2Query::new(target(), config);
        assert_eq!(drain(&mut q, t0).len(), 3);
        q.handle_timeout(t0 + MS(500));
        assert!(drain(&mut q, t0 + MS(500)).is_empty());
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn no_reply_retries_once_then_times_out() {
        let t0 = Instant::now();
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        q.handle_timeout(t0 + MS(1999));
        assert!(drain(&mut q, t0 + MS(1999)).is_empty());
        q.handle_timeout(t0 + MS(2000));
        assert_eq!(drain(&mut q, t0 + MS(2000)).len(), 3);
        q.handle_timeout(t0 + MS(4000));
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    #[test]
    fn garbage_and_foreign_datagrams_are_ignored() {
        let t0 = Instant::now();
        let cfg = Unreal2Config {
            query: QueryConfig {
                attempt_timeout: MS(100),
                retries: 0,
            },
            ..Unreal2Config::default()
        };
        let mut q = Unreal2Query::new(target(), cfg);
        drain(&mut q, t0);
        let snap = snapshot(2, 1);
        let other: SocketAddr = "127.0.0.1:9999".parse().expect("addr");
        q.handle_datagram(t0, other, &answer(&snap, 0)[0]);
        q.handle_datagram(t0, target(), &[0x80, 0]);
        q.handle_datagram(t0, target(), b"\\status\\");
        q.handle_datagram(t0, target(), &[0x77, 0, 0, 0, 0x10, 1]);
        q.handle_datagram(t0, target(), &[0x80, 0, 0, 0, 4, 0x50]);
        q.handle_timeout(t0 + MS(100));
        assert_eq!(
            q.poll_event(),
            Some(Event::Failed(QueryError::Decode(DecodeError::Truncated(
                "reply header"
            ))))
        );
    }

    #[test]
    fn abort_returns_partial_result() {
        let t0 = Instant::now();
        let snap = snapshot(2, 1);
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        q.handle_datagram(t0 + MS(10), target(), &answer(&snap, 0)[0]);
        q.abort(t0 + MS(50));
        let info = done(&mut q);
        assert_eq!(info.name.text, "My Srv");
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some(
                "no rules reply; no players reply; aborted before every part was complete"
                    .to_owned()
            )
        );
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn abort_with_nothing_is_timeout() {
        let t0 = Instant::now();
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        q.abort(t0 + MS(1));
        assert_eq!(q.poll_event(), Some(Event::Failed(QueryError::Timeout)));
    }

    #[test]
    fn deadline_without_info_gives_partial_rules_and_players() {
        let t0 = Instant::now();
        let snap = snapshot(2, 1);
        let cfg = Unreal2Config {
            query: QueryConfig {
                attempt_timeout: MS(1000),
                retries: 0,
            },
            ..Unreal2Config::default()
        };
        let mut q = Unreal2Query::new(target(), cfg);
        drain(&mut q, t0);
        q.handle_datagram(t0 + MS(10), target(), &answer(&snap, 1)[0]);
        q.handle_datagram(t0 + MS(10), target(), &answer(&snap, 2)[0]);
        q.handle_timeout(t0 + MS(310));
        assert!(q.poll_event().is_none());
        q.handle_timeout(t0 + MS(1000));
        let info = done(&mut q);
        assert_eq!(info.rules.len(), 2);
        assert_eq!(info.players.len(), 1);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some("no server info reply".to_owned())
        );
    }

    #[test]
    fn cut_rules_datagram_marks_partial() {
        let t0 = Instant::now();
        let snap = snapshot(0, 0);
        let mut q = Unreal2Query::new(target(), Unreal2Config::default());
        drain(&mut q, t0);
        q.handle_datagram(t0, target(), &answer(&snap, 0)[0]);
        let mut rules = answer(&snap, 1).remove(0);
        rules.truncate(rules.len() - 2);
        q.handle_datagram(t0, target(), &rules);
        q.handle_timeout(t0 + MS(300));
        let info = done(&mut q);
        assert_eq!(info.rules.len(), 1);
        assert_eq!(
            info.partial.map(|p| p.reason),
            Some("a reply datagram was cut short".to_owned())
        );
    }

    #[test]
    fn configurable_idle_gap_and_many_rules_datagrams() {
        let t0 = Instant::now();
        let cfg = Unreal2Config {
            idle_gap: MS(50),
            ..Unreal2Config::default()
        };
        let pairs: Vec<RulePair> = (0..40)
            .map(|i| RulePair::from_text("Mutator", &format!("Mut{i:02}")).expect("short"))
            .collect();
        let mut dgs = Vec::new();
        encode_rules(0x80, &pairs, &mut dgs);
        assert_eq!(dgs.len(), 2);
        let snap = snapshot(0, 0);
        let mut q = Unreal2Query::new(target(), cfg);
        drain(&mut q, t0);
        q.handle_datagram(t0, target(), &answer(&snap, 0)[0]);
        q.handle_datagram(t0, target(), &dgs[1]);
        q.handle_datagram(t0 + MS(40), target(), &dgs[0]);
        q.handle_timeout(t0 + MS(89));
        assert!(q.poll_event().is_none());
        q.handle_timeout(t0 + MS(90));
        assert_eq!(done(&mut q).rules.len(), 40);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_datagrams_and_timeouts_never_panic_and_end_once(
            steps in proptest::collection::vec(
                (proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0u64..3000, proptest::prelude::any::<bool>()),
                0..20,
            )
        ) {
            let t0 = Instant::now();
            let mut q = Unreal2Query::new(target(), Unreal2Config::default());
            let mut events = 0;
            let mut now = t0;
            for (bytes, dt, is_timeout) in steps {
                now += MS(dt);
                drain(&mut q, now);
                if is_timeout {
                    q.handle_timeout(now);
                } else {
                    // Half of the time, put a valid header in front so the payload decoders run.
                    let datagram = match bytes.first() {
                        Some(&b) if b % 2 == 0 => [&[0x80, 0, 0, 0, b % 3][..], &bytes].concat(),
                        _ => bytes,
                    };
                    q.handle_datagram(now, target(), &datagram);
                }
                events += usize::from(q.poll_event().is_some());
            }
            q.abort(now);
            events += usize::from(q.poll_event().is_some());
            proptest::prop_assert_eq!(events, 1);
            proptest::prop_assert_eq!(q.poll_timeout(), None);
        }
    }

    #[test]
    fn server_info_maps_fields_password_and_teams() {
        let mut snap = snapshot(2, 2);
        if let InfoTail::Ut2004 { flags, .. } = &mut snap.info.tail {
            *flags = FLAG_PASSWORD;
        }
        if let Some(p) = snap.players.get_mut(1) {
            p.stats_id = 0x4000_0000;
            p.ping = -1;
        }
        let info = server_info(Some(&snap.info), None, &snap.players);
        assert_eq!(info.protocol, Protocol::Unreal2);
        assert_eq!(info.game_type.text, "xDeathMatch");
        assert_eq!(info.password, Some(true));
        assert_eq!(info.raw_field("port"), Some(&RawValue::Int(7777)));
        assert_eq!(
            info.raw_field("layout"),
            Some(&RawValue::Text(Text::from_utf8_str("ut2004")))
        );
        let teams: Vec<_> = info.players.iter().map(|p| p.team).collect();
        assert_eq!(teams, vec![Some(0), Some(1)]);
        assert_eq!(info.players.get(1).and_then(|p| p.ping_ms), None);

        let rules = vec![RulePair::from_text("GamePassword", "True").expect("short")];
        let info = server_info(None, Some(&rules), &[]);
        assert_eq!(info.password, Some(true));
        assert_eq!(server_info(None, None, &[]).password, None);
    }
}
