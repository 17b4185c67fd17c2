//! The pure parts of the GameSpy face: pending `\secure\` challenges and the
//! `\status\` checks (Serious Sam verification, game-port fetches, `\statechanged` re-checks).
//!
//! No sockets, no clock: every method takes `now`, so the tests below run on explicit
//! timestamps. The face (`super`) moves bytes and mirrors outcomes into the registry.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use muster_proto::ServerInfo;
use muster_proto::gamespy_master::{Challenge, ValidateCheck, check_validate};
use muster_proto::gamespy_master::{Enctype, ValidateAnswer};
use muster_proto::gamespy1::query::{StatusConfig, StatusQuery};
use muster_proto::query::{Event, QueryError, QueryMachine, Transmit};

pub use muster_proto::gamespy_master::games::{GAMES, Game, Method, game, matches_group};

/// Limits of [`Challenges`] (`gamespy-master.md` §14, made robust against forged floods).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeLimits {
    /// A challenge is answerable this long.
    pub lifetime: Duration,
    /// Pending challenges per source IP address.
    pub per_ip: usize,
    /// Pending challenges per IPv4 /24 or IPv6 /64.
    pub per_prefix: usize,
    /// Pending challenges in total; a new one evicts the oldest when full, so a flood from
    /// many forged sources shortens how long a challenge waits instead of refusing new ones.
    pub total: usize,
    /// A source address is challenged at most once per this long.
    pub min_interval: Duration,
}

impl Default for ChallengeLimits {
    fn default() -> Self {
        Self {
            lifetime: Duration::from_secs(30),
            per_ip: 256,
            per_prefix: 1024,
            total: 16_384,
            min_interval: Duration::from_secs(10),
        }
    }
}

/// A challenge waiting for its `\validate\`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// What was sent.
    pub challenge: Challenge,
    /// The heartbeat's game.
    pub game: &'static Game,
    /// The heartbeat (registry) address: source IP, heartbeat port.
    pub server: SocketAddr,
    /// Whether the server was already listed (a periodic re-verification).
    pub reverify: bool,
    /// When it was sent.
    pub sent: Instant,
}

/// Why no challenge was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This source address was challenged less than [`ChallengeLimits::min_interval`] ago.
    Throttled,
    /// [`ChallengeLimits::per_ip`] challenges are pending for this IP.
    IpCap,
    /// [`ChallengeLimits::per_prefix`] challenges are pending for this /24 or /64.
    PrefixCap,
}

impl Refused {
    /// The metrics drop reason.
    #[must_use]
    pub const fn drop(self) -> muster_core::drops::DropReason {
        match self {
            Self::Throttled => muster_core::drops::DropReason::RateLimited,
            Self::IpCap | Self::PrefixCap => muster_core::drops::DropReason::SourceCap,
        }
    }
}

/// What a `\validate\` answer proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No live challenge for this source address.
    Unexpected,
    /// It matches one of the game's keys.
    Match(Pending),
    /// It does not; `expected` is what the preferred key gives (for the log).
    Mismatch(Pending, String),
}

/// The /24 of an IPv4 address or the /64 of an IPv6 one.
fn prefix(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => u64::from(u32::from(v4) >> 8),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u64::from(u32::from(v4) >> 8),
            None => (u128::from(v6) >> 64) as u64 | (1 << 63),
        },
    }
}

/// A map bounded in total, per IP and per prefix, whose oldest entry makes room for a new one
/// when it is full. The order is a queue with lazy deletion: entries taken out early stay in
/// the queue until they reach its front (or the queue is compacted).
#[derive(Debug)]
struct Bounded<V> {
    entries: HashMap<SocketAddr, (V, u64)>,
    order: VecDeque<(SocketAddr, u64)>,
    per_ip: HashMap<IpAddr, usize>,
    per_prefix: HashMap<u64, usize>,
    next: u64,
}

impl<V> Default for Bounded<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            per_ip: HashMap::new(),
            per_prefix: HashMap::new(),
            next: 0,
        }
    }
}

fn dec<K: std::hash::Hash + Eq>(m: &mut HashMap<K, usize>, k: K) {
    if let Some(n) = m.get_mut(&k) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            m.remove(&k);
        }
    }
}

impl<V> Bounded<V> {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn get(&self, k: &SocketAddr) -> Option<&V> {
        self.entries.get(k).map(|(v, _)| v)
    }

    fn get_mut(&mut self, k: &SocketAddr) -> Option<&mut V> {
        self.entries.get_mut(k).map(|(v, _)| v)
    }

    fn counts(&self, k: SocketAddr) -> (usize, usize) {
        (
            self.per_ip.get(&k.ip()).copied().unwrap_or(0),
            self.per_prefix.get(&prefix(k.ip())).copied().unwrap_or(0),
        )
    }

    /// Inserts or replaces `k`; returns how many old entries were evicted to make room.
    fn insert(&mut self, k: SocketAddr, v: V, total: usize) -> usize {
        let mut evicted = 0;
        if self.entries.contains_key(&k) {
            self.remove(&k);
        } else {
            while self.entries.len() >= total.max(1) {
                let Some((old, seq)) = self.order.pop_front() else {
                    break;
                };
                if self.entries.get(&old).is_some_and(|(_, s)| *s == seq) {
                    self.remove(&old);
                    evicted += 1;
                }
            }
        }
        let seq = self.next;
        self.next += 1;
        *self.per_ip.entry(k.ip()).or_insert(0) += 1;
        *self.per_prefix.entry(prefix(k.ip())).or_insert(0) += 1;
        self.entries.insert(k, (v, seq));
        self.order.push_back((k, seq));
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(a, s)| entries.get(a).is_some_and(|(_, x)| x == s));
        }
        evicted
    }

    fn remove(&mut self, k: &SocketAddr) -> Option<V> {
        let (v, _) = self.entries.remove(k)?;
        dec(&mut self.per_ip, k.ip());
        dec(&mut self.per_prefix, prefix(k.ip()));
        Some(v)
    }

    fn keys_where(&self, f: impl Fn(&V) -> bool) -> Vec<SocketAddr> {
        self.entries
            .iter()
            .filter(|(_, (v, _))| f(v))
            .map(|(k, _)| *k)
            .collect()
    }
}

/// Pending `\secure\` challenges, keyed by the address they were sent to (the heartbeat's
/// source), bounded per IP, per prefix and in total (the oldest makes room).
#[derive(Debug, Default)]
pub struct Challenges {
    limits: ChallengeLimits,
    pending: Bounded<Pending>,
}

impl Challenges {
    /// An empty set with `limits`.
    #[must_use]
    pub fn new(limits: ChallengeLimits) -> Self {
        Self {
            limits,
            pending: Bounded::default(),
        }
    }

    /// Challenges pending.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none is pending.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pending.len() == 0
    }

    /// Records a challenge to `to` for the heartbeat of `game` at `server` (replacing an older
    /// one to the same address), or says why none may be sent now. Returns the challenge and
    /// how many older challenges were evicted to make room.
    pub fn offer(
        &mut self,
        now: Instant,
        to: SocketAddr,
        p: (&'static Game, SocketAddr, bool),
        challenge: Challenge,
    ) -> Result<(Challenge, usize), Refused> {
        let (game, server, reverify) = p;
        if let Some(old) = self.pending.get(&to) {
            if now.saturating_duration_since(old.sent) < self.limits.min_interval {
                return Err(Refused::Throttled);
            }
        } else {
            let (ip, prefix) = self.pending.counts(to);
            if ip >= self.limits.per_ip {
                return Err(Refused::IpCap);
            }
            if prefix >= self.limits.per_prefix {
                return Err(Refused::PrefixCap);
            }
        }
        let pending = Pending {
            challenge,
            game,
            server,
            reverify,
            sent: now,
        };
        let evicted = self.pending.insert(to, pending, self.limits.total);
        Ok((challenge, evicted))
    }

    /// Checks an answer from `from` against the challenge sent there (enctype 0, every key of
    /// the game). The challenge is used up either way.
    pub fn answer(&mut self, now: Instant, from: SocketAddr, answer: &ValidateAnswer) -> Answer {
        let Some(p) = self.pending.remove(&from) else {
            return Answer::Unexpected;
        };
        if now.saturating_duration_since(p.sent) > self.limits.lifetime {
            return Answer::Unexpected;
        }
        match check_validate(
            p.game.name.as_bytes(),
            &p.challenge,
            Enctype::Zero,
            answer.validate.as_bytes(),
        ) {
            ValidateCheck::Match => Answer::Match(p),
            ValidateCheck::Mismatch { expected } => Answer::Mismatch(p, expected),
            ValidateCheck::UnknownGame | ValidateCheck::UnsupportedEnctype => {
                Answer::Mismatch(p, String::new())
            }
        }
    }

    /// Drops challenges older than their lifetime; returns them (re-verifications that got no
    /// answer count as failures).
    pub fn expire(&mut self, now: Instant) -> Vec<Pending> {
        let life = self.limits.lifetime;
        let dead = self
            .pending
            .keys_where(|p| now.saturating_duration_since(p.sent) > life);
        dead.into_iter()
            .filter_map(|a| self.pending.remove(&a))
            .collect()
    }
}

/// Why a `\status\` query was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Verify a heartbeat of a [`Method::Status`] game.
    Verify(&'static Game),
    /// Learn the game port (`hostport`) and info of a server just verified by `\secure\`.
    Info(&'static Game),
    /// A re-check of a listed server; with `true` (a `\statechanged` heartbeat, §14) no
    /// answer de-lists it at once, otherwise it counts as one failed re-verification.
    Recheck(&'static Game, bool),
}

/// A finished `\status\` check.
#[derive(Debug)]
pub struct Finished {
    /// The heartbeat address it went to.
    pub server: SocketAddr,
    /// Why it was sent.
    pub purpose: Purpose,
    /// The reply, or why there is none.
    pub result: Result<Box<ServerInfo>, QueryError>,
}

/// `\status\` queries in flight, one per destination address, bounded in number, per IP and
/// per prefix; when full, the oldest check makes room for a new one.
#[derive(Debug)]
pub struct StatusChecks {
    config: StatusConfig,
    max: usize,
    per_ip: usize,
    checks: Bounded<(StatusQuery, Purpose)>,
}

impl StatusChecks {
    /// No checks yet; at most `max` at once, and at most `per_ip` to one IP address (or /24).
    #[must_use]
    pub fn new(config: StatusConfig, max: usize, per_ip: usize) -> Self {
        Self {
            config,
            max,
            per_ip,
            checks: Bounded::default(),
        }
    }

    /// Checks in flight.
    #[must_use]
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether none is in flight.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.checks.len() == 0
    }

    /// Whether a check to `server` is in flight (its datagrams belong to it).
    #[must_use]
    pub fn expects(&self, from: SocketAddr) -> bool {
        self.checks.get(&from).is_some()
    }

    /// Starts a check of `server`; `None` when one is already running there or the address's
    /// share is taken, else how many older checks were evicted to make room.
    pub fn start(&mut self, server: SocketAddr, purpose: Purpose) -> Option<usize> {
        if self.checks.get(&server).is_some() {
            return None;
        }
        let (ip, prefix) = self.checks.counts(server);
        if ip >= self.per_ip || prefix >= self.per_ip.saturating_mul(4) {
            return None;
        }
        let q = StatusQuery::new(server, self.config);
        Some(self.checks.insert(server, (q, purpose), self.max))
    }

    /// Feeds a datagram from `from` to its check; the check is finished when this returns it.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
    ) -> Option<Finished> {
        let (q, _) = self.checks.get_mut(&from)?;
        q.handle_datagram(now, from, datagram);
        self.finish_one(from)
    }

    fn finish_one(&mut self, server: SocketAddr) -> Option<Finished> {
        let (q, _) = self.checks.get_mut(&server)?;
        let event = q.poll_event()?;
        let (_, purpose) = self.checks.remove(&server)?;
        let result = match event {
            Event::Done(info) => Ok(info),
            Event::Failed(e) => Err(e),
        };
        Some(Finished {
            server,
            purpose,
            result,
        })
    }

    /// Runs every due timer; returns the checks that finished.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Finished> {
        let due = self
            .checks
            .keys_where(|(q, _)| q.poll_timeout().is_some_and(|t| t <= now));
        let mut out = Vec::new();
        for a in due {
            if let Some((q, _)) = self.checks.get_mut(&a) {
                q.handle_timeout(now);
            }
            out.extend(self.finish_one(a));
        }
        out
    }

    /// The next datagram to send (the request bytes are appended to `buf`).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.checks
            .entries
            .values_mut()
            .find_map(|((q, _), _)| q.poll_transmit(now, buf))
    }

    /// The earliest timer of any check.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.checks
            .entries
            .values()
            .filter_map(|((q, _), _)| q.poll_timeout())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_proto::gamespy_master::{Token, Trailer, validate_string};

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ch(s: &[u8]) -> Challenge {
        Challenge::new(s).unwrap()
    }

    fn answer(v: &str) -> ValidateAnswer {
        ValidateAnswer {
            validate: Token::new(v.as_bytes().to_vec()).unwrap(),
            trailer: Trailer::Final,
        }
    }

    #[test]
    fn game_table_and_groups() {
        let ut = game(b"UT").unwrap();
        assert_eq!((ut.name, ut.method), ("ut", Method::Secure));
        let se = game(b"serioussamse").unwrap();
        assert_eq!(se.method, Method::Status);
        assert!(matches_group(se, "serioussam"));
        assert!(matches_group(se, "SeriousSamSE"));
        assert!(!matches_group(se, "ut"));
        assert!(!matches_group(ut, "unreal"));
        assert!(game(b"gamespy2").is_none(), "list clients only");
        assert!(game(b"quake3").is_none());
    }

    #[test]
    fn challenge_answered_within_lifetime() {
        let t0 = Instant::now();
        let mut c = Challenges::new(ChallengeLimits::default());
        let src = addr("192.0.2.1:7779");
        let server = addr("192.0.2.1:7778");
        let ut = game(b"ut").unwrap();
        c.offer(t0, src, (ut, server, false), ch(b"ABCDEF"))
            .unwrap();
        // The spec's M4 answer (UT99, key Z5Nfb0).
        let a = c.answer(t0 + Duration::from_secs(29), src, &answer("5OOIQ5Ha"));
        assert!(matches!(a, Answer::Match(p) if p.server == server));
        assert!(c.is_empty());
        assert_eq!(
            c.answer(t0, src, &answer("5OOIQ5Ha")),
            Answer::Unexpected,
            "used up"
        );
    }

    #[test]
    fn wrong_late_or_foreign_answers() {
        let t0 = Instant::now();
        let mut c = Challenges::new(ChallengeLimits::default());
        let src = addr("192.0.2.1:7779");
        let ut = game(b"ut").unwrap();
        c.offer(t0, src, (ut, src, false), ch(b"ABCDEF")).unwrap();
        assert_eq!(
            c.answer(t0, addr("192.0.2.2:7779"), &answer("5OOIQ5Ha")),
            Answer::Unexpected
        );
        let a = c.answer(t0, src, &answer("zbGgINC8"));
        assert!(matches!(a, Answer::Mismatch(_, e) if e == "5OOIQ5Ha"));
        let t1 = t0 + Duration::from_secs(60);
        c.offer(t1, src, (ut, src, false), ch(b"ABCDEF")).unwrap();
        let late = t1 + Duration::from_secs(31);
        assert_eq!(c.answer(late, src, &answer("5OOIQ5Ha")), Answer::Unexpected);
    }

    #[test]
    fn ut2004_accepts_both_keys() {
        let t0 = Instant::now();
        let mut c = Challenges::new(ChallengeLimits::default());
        let g = game(b"ut2004").unwrap();
        for key in ["y5rP9m", "Lw7x0R"] {
            let src = addr("192.0.2.1:7788");
            c.offer(t0, src, (g, src, false), ch(b"QWERTY")).unwrap();
            let v = validate_string(&ch(b"QWERTY"), key.as_bytes(), Enctype::Zero).unwrap();
            assert!(matches!(c.answer(t0, src, &answer(&v)), Answer::Match(_)));
        }
    }

    #[test]
    fn caps_throttle_evict_and_expire() {
        let t0 = Instant::now();
        let limits = ChallengeLimits {
            per_ip: 2,
            per_prefix: 3,
            total: 4,
            ..ChallengeLimits::default()
        };
        let mut c = Challenges::new(limits);
        let ut = game(b"ut").unwrap();
        let a1 = addr("192.0.2.1:1");
        let p = |a| (ut, a, false);
        c.offer(t0, a1, p(a1), ch(b"AAAAAA")).unwrap();
        assert_eq!(
            c.offer(t0 + Duration::from_secs(9), a1, p(a1), ch(b"BBBBBB")),
            Err(Refused::Throttled)
        );
        // Replacing after the interval does not count twice.
        c.offer(t0 + Duration::from_secs(10), a1, p(a1), ch(b"BBBBBB"))
            .unwrap();
        c.offer(t0, addr("192.0.2.1:2"), p(a1), ch(b"CCCCCC"))
            .unwrap();
        assert_eq!(
            c.offer(t0, addr("192.0.2.1:3"), p(a1), ch(b"DDDDDD")),
            Err(Refused::IpCap)
        );
        c.offer(t0, addr("192.0.2.2:1"), p(a1), ch(b"EEEEEE"))
            .unwrap();
        assert_eq!(
            c.offer(t0, addr("192.0.2.3:1"), p(a1), ch(b"FFFFFF")),
            Err(Refused::PrefixCap)
        );
        c.offer(t0, addr("198.51.100.1:1"), p(a1), ch(b"GGGGGG"))
            .unwrap();
        // Full: the oldest entry (a1, as replaced second) makes room.
        let (_, evicted) = c
            .offer(t0, addr("203.0.113.1:1"), p(a1), ch(b"HHHHHH"))
            .unwrap();
        assert_eq!(evicted, 1);
        assert_eq!(c.len(), 4);
        assert_eq!(
            c.answer(t0, a1, &answer("x")),
            Answer::Unexpected,
            "evicted"
        );
        assert!(c.expire(t0 + Duration::from_secs(30)).is_empty());
        assert_eq!(c.expire(t0 + Duration::from_secs(31)).len(), 4);
        assert_eq!(c.len(), 0);
        assert!(c.pending.per_ip.is_empty());
        assert!(c.pending.per_prefix.is_empty());
    }

    #[test]
    fn a_flood_of_forged_sources_leaves_room_for_a_real_one() {
        let t0 = Instant::now();
        let mut c = Challenges::new(ChallengeLimits::default());
        let ut = game(b"ut").unwrap();
        for i in 0..100_000u32 {
            let a = SocketAddr::new(IpAddr::from((0x7f00_0000 | i).to_be_bytes()), 7779);
            let _ = c.offer(t0, a, (ut, a, false), ch(b"AAAAAA"));
        }
        assert!(c.len() <= ChallengeLimits::default().total);
        let src = addr("192.0.2.1:7779");
        c.offer(t0, src, (ut, src, false), ch(b"ABCDEF")).unwrap();
        let a = c.answer(t0 + Duration::from_millis(50), src, &answer("5OOIQ5Ha"));
        assert!(matches!(a, Answer::Match(_)));
    }

    #[test]
    fn status_check_done_and_timeout() {
        let t0 = Instant::now();
        let config = StatusConfig {
            retry: muster_proto::query::QueryConfig {
                attempt_timeout: Duration::from_millis(2500),
                retries: 1,
            },
            ..StatusConfig::default()
        };
        let mut s = StatusChecks::new(config, 1, 4);
        let sam = game(b"serioussamse").unwrap();
        let a = addr("192.0.2.1:25601");
        assert_eq!(s.start(a, Purpose::Verify(sam)), Some(0));
        assert_eq!(s.start(a, Purpose::Verify(sam)), None, "one per address");
        assert_eq!(
            s.start(addr("192.0.2.9:1"), Purpose::Verify(sam)),
            Some(1),
            "the oldest makes room"
        );
        assert_eq!(s.start(a, Purpose::Verify(sam)), Some(1));
        let mut buf = Vec::new();
        let t = s.poll_transmit(t0, &mut buf).unwrap();
        assert_eq!((t.destination, &buf[..]), (a, &b"\\status\\"[..]));
        assert!(s.expects(a));
        let reply = b"\\gamename\\serioussam\\hostport\\25600\\queryid\\1.1\\final\\";
        let f = s
            .handle_datagram(t0 + Duration::from_millis(5), a, reply)
            .unwrap();
        let info = f.result.unwrap();
        let gn = info
            .rules
            .iter()
            .find(|r| r.key.plain == "gamename")
            .unwrap();
        assert!(matches_group(sam, &gn.value.plain));
        assert!(s.is_empty());

        assert_eq!(s.start(a, Purpose::Recheck(sam, true)), Some(0));
        buf.clear();
        s.poll_transmit(t0, &mut buf).unwrap();
        assert!(
            s.handle_timeout(t0 + Duration::from_millis(2500))
                .is_empty()
        );
        buf.clear();
        assert!(s.poll_transmit(t0, &mut buf).is_some(), "second try");
        let done = s.handle_timeout(t0 + Duration::from_secs(5));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].result, Err(QueryError::Timeout));
    }
}
