//! Several query machines for one server, side by side: `auto` protocol detection and the
//! Unreal 2 native + GameSpy v1 merge.
//!
//! A [`Probe`] owns sub-queries (each a boxed [`QueryMachine`] aimed at one query address),
//! forwards every datagram to all of them (each ignores sources it did not send to), and ends
//! when all have ended or a short grace period after the first answer has passed (the ports
//! that do not answer would otherwise hold the result until their last retry). Then it picks
//! the first answer in the order the sub-queries were given, or merges a UE2 native answer
//! with a GameSpy v1 answer as `unreal2.md` §14 says. The address that answered is recorded in
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

/// Structure from the native reply, live values from GameSpy (`unreal2.md` §14).
fn merge_unreal2(
    native: &ServerInfo,
    native_addr: SocketAddr,
    gamespy: &ServerInfo,
    gamespy_addr: SocketAddr,
) -> ServerInfo {
    let mut out = native.clone();
    set_query_address(&mut out, native_addr);
    out.raw.push((
        "gamespy_query_address".to_owned(),
        RawValue::Text(Text::from_utf8_str(&gamespy_addr.to_string())),
    ));
    // GameSpy's count is live; the native info may be up to 60 s old.
    out.num_players = gamespy.num_players;
    if gamespy.password.is_some() {
        out.password = gamespy.password;
    }
    let mut matched = vec![false; gamespy.players.len()];
    for p in &mut out.players {
        let found = gamespy.players.iter().enumerate().find(|(i, g)| {
            !matched.get(*i).copied().unwrap_or(true) && g.name.plain == p.name.plain
        });
        if let Some((i, g)) = found {
            if let Some(m) = matched.get_mut(i) {
                *m = true;
            }
            p.score = g.score.or(p.score);
            p.ping_ms = g.ping_ms.or(p.ping_ms);
        }
    }
    for (g, used) in gamespy.players.iter().zip(&matched) {
        if !used {
            out.players.push(g.clone());
        }
    }
    for rule in &gamespy.rules {
        if !out
            .rules
            .iter()
            .any(|r| r.key.text.eq_ignore_ascii_case(&rule.key.text))
        {
            out.rules.push(rule.clone());
        }
    }
    if out.version.is_empty() {
        out.version = gamespy.version.clone();
    }
    if out.partial.is_none() {
        out.partial.clone_from(&gamespy.partial);
    }
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
    use crate::model::Player;

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

    #[test]
    fn unreal2_merge_takes_structure_from_native_and_live_values_from_gamespy() {
        let t0 = Instant::now();
        let mut native = info(Protocol::Unreal2, "Native «name»");
        native.num_players = 1;
        native.players.push(Player {
            name: Text::from_utf8_str("Alpha"),
            score: Some(1),
            ping_ms: Some(40),
            team: Some(1),
            ..Player::default()
        });
        let mut gs = info(Protocol::GameSpy1, "GameSpy name");
        gs.num_players = 2;
        gs.password = Some(true);
        gs.players.push(Player {
            name: Text::from_utf8_str("Alpha"),
            score: Some(7),
            ping_ms: Some(44),
            ..Player::default()
        });
        gs.players.push(Player {
            name: Text::from_utf8_str("Bravo"),
            score: Some(3),
            ..Player::default()
        });
        let mut p = Probe::new(Policy::MergeUnreal2)
            .with(
                "127.0.0.1:7778".parse().unwrap(),
                Scripted::boxed("127.0.0.1:7778", Some(native)),
            )
            .with(
                "127.0.0.1:7787".parse().unwrap(),
                Scripted::boxed("127.0.0.1:7787", Some(gs)),
            );
        drain(&mut p, t0);
        p.handle_datagram(t0, "127.0.0.1:7787".parse().unwrap(), b"x");
        p.handle_datagram(t0, "127.0.0.1:7778".parse().unwrap(), b"x");
        let Some(Event::Done(m)) = p.poll_event() else {
            panic!("no result")
        };
        assert_eq!(m.protocol, Protocol::Unreal2);
        assert_eq!(m.name.text, "Native «name»");
        assert_eq!(m.num_players, 2);
        assert_eq!(m.password, Some(true));
        assert_eq!(m.players.len(), 2);
        assert_eq!(m.players[0].score, Some(7));
        assert_eq!(m.players[0].team, Some(1));
        assert_eq!(m.players[1].name.text, "Bravo");
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
