//! Which records to poll now: the poller's pure state machine (no I/O, no clock).
//!
//! Every record the poller can query has a due time. A record seen for the first time is due
//! at once when it was never polled (so a new server's name appears quickly), otherwise at a
//! fixed, key-derived offset inside the interval, so that 10 000 records restored at start-up
//! do not all fall due in the same second. After a record is picked it is due again one
//! interval later. A record marked *changed* (GameSpy `\statechanged`, GameAgent `u`) is picked
//! before every other due record, at most once per `min_changed_gap`.
//!
//! Each pick is bounded by a budget (the caller's send-rate budget for one tick), never picks
//! a record whose poll is still running, and never runs two polls to one query address at
//! once (`gamespy-master.md` §14: one outstanding poll per destination).
//!
//! Does not: query anything, read the registry or decide about failures (see
//! [`super::after_poll`]).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::time::Duration;

use muster_core::registry::{ServerKey, Timestamp};

/// A record the poller could query, as the registry showed it this tick. Borrows the key, so
/// a pick over every record under the registry lock clones only the keys it picks or first
/// meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The record.
    pub key: &'a ServerKey,
    /// Where it is queried.
    pub query_addr: SocketAddr,
    /// Whether it has no poll result yet (then it is due at once when first seen).
    pub never_polled: bool,
}

/// A record picked for a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    /// The record.
    pub key: ServerKey,
    /// Where it is queried.
    pub query_addr: SocketAddr,
    /// Picked because it was marked changed (its failure counts more, see
    /// [`super::after_poll`]).
    pub changed: bool,
}

/// The schedule. See the module docs.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: Duration,
    min_changed_gap: Duration,
    /// Due time and the pass that last saw the key (to forget vanished keys without a set).
    due: HashMap<ServerKey, (Timestamp, u64)>,
    pass: u64,
    changed: HashSet<ServerKey>,
    last_changed: HashMap<ServerKey, Timestamp>,
    in_flight: HashMap<ServerKey, SocketAddr>,
    busy: HashSet<SocketAddr>,
}

/// Where inside `interval` a record first falls due: a fixed-key hash of its key, so the
/// offset is the same after a restart of the same build and keys spread evenly.
#[must_use]
pub fn spread_offset(key: &ServerKey, interval: Duration) -> Duration {
    let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Duration::ZERO;
    }
    // `DefaultHasher::new()` has fixed keys: stable from run to run (unlike `RandomState`).
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    Duration::from_millis(h.finish() % ms)
}

impl Schedule {
    /// An empty schedule polling each record once per `interval`, and a changed record at
    /// most once per `min_changed_gap`.
    #[must_use]
    pub fn new(interval: Duration, min_changed_gap: Duration) -> Self {
        Self {
            interval,
            min_changed_gap,
            due: HashMap::new(),
            pass: 0,
            changed: HashSet::new(),
            last_changed: HashMap::new(),
            in_flight: HashMap::new(),
            busy: HashSet::new(),
        }
    }

    /// Marks `key` as changed: it is polled first at the next pick. Returns `false` (and
    /// marks nothing) when it was picked as changed less than `min_changed_gap` ago, so a
    /// server cannot make the master poll it at will.
    pub fn mark_changed(&mut self, key: ServerKey, now: Timestamp) -> bool {
        if self
            .last_changed
            .get(&key)
            .is_some_and(|&t| now < t.plus(self.min_changed_gap))
        {
            return false;
        }
        self.changed.insert(key);
        true
    }

    /// When `key` is due next, if the schedule knows it.
    #[must_use]
    pub fn due_at(&self, key: &ServerKey) -> Option<Timestamp> {
        self.due.get(key).map(|&(t, _)| t)
    }

    /// Polls running.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Picks at most `budget` records to poll at `now` from `candidates` (every pollable
    /// record, in any order): changed ones first, then the longest overdue; ties by key.
    /// Records no longer among the candidates are forgotten. Picked records are in flight
    /// until [`Schedule::finished`] and due again one interval after `now`.
    pub fn pick<'a>(
        &mut self,
        candidates: impl IntoIterator<Item = Candidate<'a>>,
        now: Timestamp,
        budget: usize,
    ) -> Vec<Pick> {
        self.pass = self.pass.wrapping_add(1);
        let pass = self.pass;
        let mut ready: Vec<(bool, Timestamp, Candidate<'a>)> = Vec::new();
        // One hash lookup per record in the common case (known, not due): this runs under
        // the registry lock over every record.
        for c in candidates {
            let due = match self.due.get_mut(c.key) {
                Some(e) => {
                    e.1 = pass;
                    e.0
                }
                None => {
                    let t = if c.never_polled {
                        now
                    } else {
                        now.plus(spread_offset(c.key, self.interval))
                    };
                    self.due.insert(c.key.clone(), (t, pass));
                    t
                }
            };
            let changed = !self.changed.is_empty() && self.changed.contains(c.key);
            if (changed || due <= now)
                && !self.in_flight.contains_key(c.key)
                && !self.busy.contains(&c.query_addr)
            {
                ready.push((changed, due, c));
            }
        }
        self.due.retain(|_, e| e.1 == pass);
        let due = &self.due;
        self.changed.retain(|k| due.contains_key(k));
        self.last_changed
            .retain(|k, t| due.contains_key(k) && now < t.plus(self.min_changed_gap));
        ready.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then_with(|| a.2.key.cmp(b.2.key))
        });
        let mut picks = Vec::new();
        for (changed, _, c) in ready {
            if picks.len() >= budget {
                break;
            }
            // Two records may share a query address; only one poll per address at a time.
            if !self.busy.insert(c.query_addr) {
                continue;
            }
            self.in_flight.insert(c.key.clone(), c.query_addr);
            self.due
                .insert(c.key.clone(), (now.plus(self.interval), pass));
            if changed {
                self.changed.remove(c.key);
                self.last_changed.insert(c.key.clone(), now);
            }
            picks.push(Pick {
                key: c.key.clone(),
                query_addr: c.query_addr,
                changed,
            });
        }
        picks
    }

    /// `key` is due at `at` instead (another instance holds its poll lease until then).
    /// Unknown keys are ignored.
    pub fn defer(&mut self, key: &ServerKey, at: Timestamp) {
        if let Some(e) = self.due.get_mut(key) {
            e.0 = at;
        }
    }

    /// The poll of `key` ended (whatever its result).
    pub fn finished(&mut self, key: &ServerKey) {
        if let Some(addr) = self.in_flight.remove(key) {
            self.busy.remove(&addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::GameAddr;

    const T0: Timestamp = Timestamp::from_secs(1_700_000_000);
    const INTERVAL: Duration = Duration::from_secs(300);
    const GAP: Duration = Duration::from_secs(10);

    fn key(n: u16) -> ServerKey {
        ServerKey::new("ut2", GameAddr::Ip(addr(n)))
    }

    fn addr(n: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], 7000 + n))
    }

    /// An owned candidate; [`cs`] lends them out.
    #[derive(Clone)]
    struct Row(ServerKey, SocketAddr, bool);

    fn cand(n: u16, never_polled: bool) -> Row {
        Row(key(n), addr(n), never_polled)
    }

    fn cs(rows: &[Row]) -> Vec<Candidate<'_>> {
        rows.iter()
            .map(|r| Candidate {
                key: &r.0,
                query_addr: r.1,
                never_polled: r.2,
            })
            .collect()
    }

    fn keys(p: &[Pick]) -> Vec<ServerKey> {
        p.iter().map(|p| p.key.clone()).collect()
    }

    fn at(secs: u64) -> Timestamp {
        T0.plus(Duration::from_secs(secs))
    }

    #[test]
    fn never_polled_records_are_due_at_once_within_budget() {
        let mut s = Schedule::new(INTERVAL, GAP);
        let c: Vec<_> = (0..5).map(|n| cand(n, true)).collect();
        let p = s.pick(cs(&c), T0, 3);
        assert_eq!(keys(&p), vec![key(0), key(1), key(2)]);
        assert_eq!(s.in_flight(), 3);
        let p = s.pick(cs(&c), T0, 3);
        assert_eq!(
            keys(&p),
            vec![key(3), key(4)],
            "in-flight ones are not picked again"
        );
        for n in 0..5 {
            s.finished(&key(n));
        }
        assert!(
            s.pick(cs(&c), at(299), 10).is_empty(),
            "next poll one interval later"
        );
        assert_eq!(s.pick(cs(&c), at(300), 10).len(), 5);
    }

    #[test]
    fn polled_records_are_spread_over_the_interval() {
        let mut s = Schedule::new(INTERVAL, GAP);
        let c: Vec<_> = (0..1000).map(|n| cand(n, false)).collect();
        assert!(
            s.pick(cs(&c), T0, usize::MAX).len() < 20,
            "no burst at start"
        );
        // Per 30 s slice of the interval, roughly a tenth of the records fall due.
        let mut total = 0;
        for slice in 1..=10 {
            let n = s.pick(cs(&c), at(slice * 30), usize::MAX).len();
            assert!((40..=160).contains(&n), "slice {slice}: {n}");
            total += n;
        }
        for n in 0..1000 {
            assert!(s.due_at(&key(n)).unwrap() <= at(300 + 300));
        }
        assert!(total >= 980, "{total}");
    }

    #[test]
    fn spread_offset_is_stable_and_inside_the_interval() {
        for n in 0..100 {
            let d = spread_offset(&key(n), INTERVAL);
            assert!(d < INTERVAL);
            assert_eq!(d, spread_offset(&key(n), INTERVAL));
        }
        assert_eq!(spread_offset(&key(1), Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn changed_records_go_first_and_at_most_once_per_gap() {
        let mut s = Schedule::new(INTERVAL, GAP);
        let c: Vec<_> = (0..3).map(|n| cand(n, true)).collect();
        let _ = s.pick(cs(&c), T0, 10);
        for n in 0..3 {
            s.finished(&key(n));
        }
        // At 300 s all three are due; record 2 also changed: it comes first.
        assert!(s.mark_changed(key(2), at(300)));
        let p = s.pick(cs(&c), at(300), 1);
        assert_eq!(keys(&p), vec![key(2)]);
        assert!(p[0].changed);
        s.finished(&key(2));
        // A change 5 s later is refused (gap 10 s), one 10 s later is accepted even though
        // the record is not due.
        assert!(!s.mark_changed(key(2), at(305)));
        assert!(s.mark_changed(key(2), at(310)));
        let p = s.pick(cs(&c), at(310), 10);
        assert_eq!(keys(&p), vec![key(2), key(0), key(1)]);
        assert_eq!(
            p.iter().map(|p| p.changed).collect::<Vec<_>>(),
            [true, false, false]
        );
    }

    #[test]
    fn one_poll_per_query_address() {
        let mut s = Schedule::new(INTERVAL, GAP);
        let a = cand(1, true);
        let mut b = cand(2, true);
        b.1 = a.1;
        let p = s.pick(cs(&[a.clone(), b.clone()]), T0, 10);
        assert_eq!(keys(&p), vec![key(1)]);
        assert!(s.pick(cs(&[a.clone(), b.clone()]), T0, 10).is_empty());
        s.finished(&key(1));
        assert_eq!(keys(&s.pick(cs(&[a, b]), T0, 10)), vec![key(2)]);
    }

    #[test]
    fn vanished_records_are_forgotten() {
        let mut s = Schedule::new(INTERVAL, GAP);
        let _ = s.pick(cs(&[cand(1, true), cand(2, true)]), T0, 10);
        s.finished(&key(1));
        s.finished(&key(2));
        let _ = s.pick(cs(&[cand(1, false)]), at(1), 10);
        assert!(s.due_at(&key(2)).is_none());
        // Seen again later: a fresh due time, spread (it was polled before).
        let _ = s.pick(cs(&[cand(2, false)]), at(2), 10);
        assert_eq!(
            s.due_at(&key(2)),
            Some(at(2).plus(spread_offset(&key(2), INTERVAL)))
        );
    }

    #[test]
    fn finished_unknown_key_is_harmless() {
        let mut s = Schedule::new(INTERVAL, GAP);
        s.finished(&key(9));
        assert_eq!(s.in_flight(), 0);
        s.defer(&key(9), at(5));
        assert_eq!(
            s.due_at(&key(9)),
            None,
            "deferring an unknown key adds nothing"
        );
    }

    #[test]
    fn a_record_leased_elsewhere_is_due_when_the_lease_ends() {
        let mut s = Schedule::new(INTERVAL, GAP);
        let c = vec![cand(1, true)];
        assert_eq!(s.pick(cs(&c), T0, 1).len(), 1);
        s.finished(&key(1));
        // Another instance holds the lease for 330 s (one interval plus its margin).
        s.defer(&key(1), at(330));
        assert!(
            s.pick(cs(&c), at(300), 1).is_empty(),
            "not at the usual time"
        );
        assert_eq!(s.pick(cs(&c), at(330), 1).len(), 1, "when the lease ends");
    }
}
