//! What both backends share: a batch of samples folded into the row changes it makes
//! ([`Batch`]), the rules by which such a change merges into a stored row ([`Delta::merge`],
//! which each backend's upsert repeats in SQL), each server's last state and the per-game
//! counts of a closed minute ([`LiveSet`]), and the minutes a close writes ([`to_close`]).
//! The backends only read and write rows.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use indexmap::IndexSet;
use muster_core::poll::PollSample;
use muster_core::registry::{ServerKey, Timestamp};

use super::{CLOSE_GRACE, LIVE_FOR, MINUTE_MS, hour_of, minute_of, whole};

/// What samples add to one minute point or hourly rollup. Merged into a row (or another
/// change) by [`Delta::merge`]: counts and sums add, the fewest and most are kept, the slots
/// are the later change's when it has any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Delta {
    /// Samples.
    pub n: i64,
    /// Samples answered.
    pub ok: i64,
    /// Fewest players answered.
    pub pmin: Option<i64>,
    /// Most players answered.
    pub pmax: Option<i64>,
    /// Players summed over the answered samples.
    pub psum: i64,
    /// Slots, last answered.
    pub slots: Option<i64>,
}

fn either(a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> i64) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}

impl Delta {
    /// One sample's change.
    #[must_use]
    pub(super) fn of(s: &PollSample) -> Self {
        let players = if s.ok {
            s.num_players.map(i64::from)
        } else {
            None
        };
        Self {
            n: 1,
            ok: i64::from(s.ok),
            pmin: players,
            pmax: players,
            psum: players.unwrap_or(0),
            slots: if s.ok {
                s.max_players.map(i64::from)
            } else {
                None
            },
        }
    }

    /// `later` merged into this change.
    pub(super) fn merge(&mut self, later: Self) {
        self.n += later.n;
        self.ok += later.ok;
        self.pmin = either(self.pmin, later.pmin, i64::min);
        self.pmax = either(self.pmax, later.pmax, i64::max);
        self.psum += later.psum;
        self.slots = later.slots.or(self.slots);
    }
}

/// A server's last state in a batch: when, whether it answered, its players.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastSample {
    pub at: Timestamp,
    pub ok: bool,
    pub players: u32,
}

/// A batch of samples folded: one change per (server, minute) and (server, hour), so that a
/// backend writes each row once per batch (and PostgreSQL's multi-row upsert, which may not
/// touch a row twice, can take them).
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// Each server's (address as `GameAddr` displays it, game), sorted, once.
    pub servers: Vec<(String, String)>,
    /// (server index in `servers`, minute number) → change, sorted.
    pub minutes: BTreeMap<(usize, i64), Delta>,
    /// (server index, hour number) → change, sorted.
    pub hours: BTreeMap<(usize, i64), Delta>,
    /// Each server's newest sample, by server index.
    pub last: Vec<LastSample>,
}

impl Batch {
    /// Folds `samples` (in the order they were taken: a later one's slots win).
    #[must_use]
    pub(super) fn fold(samples: &[PollSample]) -> Self {
        let mut keys: HashMap<&ServerKey, usize> = HashMap::new();
        let mut named: Vec<(String, String, &ServerKey)> = Vec::new();
        for s in samples {
            keys.entry(&s.key).or_insert_with(|| {
                named.push((
                    s.key.addr.to_string(),
                    s.key.game.as_str().to_owned(),
                    &s.key,
                ));
                named.len() - 1
            });
        }
        named.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        for (i, (_, _, k)) in named.iter().enumerate() {
            keys.insert(k, i);
        }
        let mut out = Self {
            last: vec![
                LastSample {
                    at: Timestamp(0),
                    ok: false,
                    players: 0,
                };
                named.len()
            ],
            ..Self::default()
        };
        let mut seen = vec![false; named.len()];
        for s in samples {
            let i = keys.get(&s.key).copied().unwrap_or(0);
            let d = Delta::of(s);
            out.minutes
                .entry((i, minute_of(s.at)))
                .and_modify(|m| m.merge(d))
                .or_insert(d);
            out.hours
                .entry((i, hour_of(s.at)))
                .and_modify(|m| m.merge(d))
                .or_insert(d);
            if let (Some(last), Some(seen)) = (out.last.get_mut(i), seen.get_mut(i))
                && (!*seen || last.at <= s.at)
            {
                *seen = true;
                *last = LastSample {
                    at: s.at,
                    ok: s.ok,
                    players: if s.ok { s.num_players.unwrap_or(0) } else { 0 },
                };
            }
        }
        out.servers = named.into_iter().map(|(a, g, _)| (a, g)).collect();
        out
    }
}

/// One game's count at the end of one minute, as a closed minute writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GameMinute {
    pub game: Arc<str>,
    pub minute: i64,
    /// Servers live at the minute's end.
    pub listed: i64,
    /// Of those, the ones whose last state answered.
    pub up: i64,
    /// Their players.
    pub players: i64,
}

/// A server's last state, for the game aggregates, in 16 bytes (a map entry of 24 with its
/// id, where a shared name and plain fields took 40).
#[derive(Debug, Clone, Copy)]
struct Live {
    at: Timestamp,
    /// The game's index in [`LiveSet`]'s names.
    game: u32,
    /// The players, with [`UP`] set when the state answered.
    players: u32,
}

/// [`Live::players`]' bit for "answered"; the players are clamped below it.
const UP: u32 = 1 << 31;

const _: () = assert!(size_of::<Live>() == 16);

impl Live {
    const fn ok(self) -> bool {
        self.players & UP != 0
    }

    const fn players(self) -> u32 {
        self.players & !UP
    }
}

/// Each server's last state by server id, counted per game when a minute closes; a server
/// counts while its last state is at most [`LIVE_FOR`] old.
///
/// The states are a vector sorted by id, in exactly the room they take (24 bytes a server,
/// where a hash map's entries and free buckets took ~41 at 10,000 servers). A new state goes
/// to a short buffer first; the buffer is merged into the vector, in one pass, when it has
/// grown to an eighth of it (at least [`MERGE_MIN`]) and before anything reads the states.
#[derive(Debug, Default)]
pub(super) struct LiveSet {
    /// (server id, state), sorted by id, one per id.
    states: Vec<(i64, Live)>,
    /// States noted since the last merge, in the order noted.
    pending: Vec<(i64, Live)>,
    /// Every game name the states hold, once, at the index the states carry: the servers of a
    /// game share its name, where a name per server was an allocation per server (and, made
    /// in a burst of first samples beside the batch's passing ones, pages the allocator could
    /// not give back).
    games: IndexSet<Arc<str>>,
}

/// The buffer of new states is merged at this size at least.
const MERGE_MIN: usize = 1024;

impl LiveSet {
    /// Servers remembered.
    pub(super) fn len(&self) -> usize {
        let known = |id: &i64| self.states.binary_search_by_key(id, |&(i, _)| i).is_ok();
        let mut fresh: Vec<i64> = self
            .pending
            .iter()
            .map(|&(id, _)| id)
            .filter(|id| !known(id))
            .collect();
        fresh.sort_unstable();
        fresh.dedup();
        self.states.len() + fresh.len()
    }

    /// The index of `game`'s name, added if new.
    fn game_index(&mut self, game: &str) -> u32 {
        let i = match self.games.get_index_of(game) {
            Some(i) => i,
            None => self.games.insert_full(Arc::from(game)).0,
        };
        // More names than states could hold is not reachable: one name per record at most.
        u32::try_from(i).unwrap_or(u32::MAX)
    }

    /// Server `id` of `game` was in state `last` (kept unless an older state than the one
    /// known).
    pub(super) fn note(&mut self, id: i64, game: &str, last: LastSample) {
        let game = self.game_index(game);
        let up = if last.ok { UP } else { 0 };
        self.pending.push((
            id,
            Live {
                at: last.at,
                game,
                players: last.players.min(!UP) | up,
            },
        ));
        if self.pending.len() >= MERGE_MIN.max(self.states.len() / 8) {
            self.merge();
        }
    }

    /// Merges the buffer into the states: per id the newest state wins, the later noted of
    /// two equally new ones.
    ///
    /// In place, in exactly the room the merged states take: an append that doubled the
    /// vector and a sort with a scratch copy of every state made each merge hold several
    /// times the set's size for a moment, and the allocator kept those pages.
    fn merge(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // The buffer goes with its room: it is filled again only slowly.
        let mut pending = std::mem::take(&mut self.pending);
        // Stable, so one id's states stay in the order noted (its scratch is the buffer's
        // size, an eighth of the states at most).
        pending.sort_by_key(|&(id, _)| id);
        let old = self.states.len();
        self.states.reserve_exact(pending.len());
        // Room at the end, then both sorted runs merged from the back: for one id, the kept
        // state before the ones noted since.
        self.states.extend_from_slice(&pending);
        let (mut i, mut j, mut k) = (old, pending.len(), self.states.len());
        while let Some(&p) = j.checked_sub(1).and_then(|j| pending.get(j)) {
            k -= 1;
            let s = i.checked_sub(1).and_then(|i| self.states.get(i)).copied();
            let next = match s {
                Some(s) if s.0 > p.0 => {
                    i -= 1;
                    s
                }
                _ => {
                    j -= 1;
                    p
                }
            };
            if let Some(slot) = self.states.get_mut(k) {
                *slot = next;
            }
        }
        self.states.dedup_by(|(id, later), (kept_id, kept)| {
            if id != kept_id {
                return false;
            }
            if kept.at <= later.at {
                *kept = *later;
            }
            true
        });
        self.states.shrink_to_fit();
    }

    /// Server `id` of `game` has the minute point (`minute`, `answered` samples answered,
    /// `psum` players over them): its state at that minute is up when it answered in it, with
    /// the mean players (a server is polled every few minutes: a point is normally one sample).
    pub(super) fn note_point(
        &mut self,
        id: i64,
        game: &str,
        minute: i64,
        answered: i64,
        psum: i64,
    ) {
        let players = if answered > 0 {
            u32::try_from((psum.max(0) + answered / 2) / answered).unwrap_or(u32::MAX)
        } else {
            0
        };
        let at = Timestamp(u64::try_from(minute.max(0)).unwrap_or(0) * MINUTE_MS);
        self.note(
            id,
            game,
            LastSample {
                at,
                ok: answered > 0,
                players,
            },
        );
    }

    /// Each game's count at the end of minute `m`, sorted by game: the servers whose last
    /// state is at most [`LIVE_FOR`] before that end (or after it, when minutes are caught
    /// up late).
    pub(super) fn count(&mut self, m: i64) -> Vec<GameMinute> {
        self.merge();
        let live_ms = u64::try_from(LIVE_FOR.as_millis()).unwrap_or(u64::MAX);
        let end = u64::try_from(m + 1).unwrap_or(0) * MINUTE_MS;
        let mut games: BTreeMap<&Arc<str>, (i64, i64, i64)> = BTreeMap::new();
        for (_, l) in &self.states {
            if end.saturating_sub(l.at.0) > live_ms {
                continue;
            }
            let Some(name) = self.games.get_index(l.game as usize) else {
                continue;
            };
            let g = games.entry(name).or_default();
            g.0 += 1;
            if l.ok() {
                g.1 += 1;
                g.2 += i64::from(l.players());
            }
        }
        games
            .into_iter()
            .map(|(game, (listed, up, players))| GameMinute {
                game: Arc::clone(game),
                minute: m,
                listed,
                up,
                players,
            })
            .collect()
    }

    /// Forgets servers whose last state is more than [`LIVE_FOR`] before `now`.
    pub(super) fn forget_before(&mut self, now: Timestamp) {
        self.merge();
        let live_ms = u64::try_from(LIVE_FOR.as_millis()).unwrap_or(u64::MAX);
        self.states
            .retain(|(_, l)| now.0.saturating_sub(l.at.0) <= live_ms);
        if self.states.capacity() > self.states.len() + self.states.len() / 8 {
            self.states.shrink_to_fit();
        }
        // A name no server holds any more goes with its last server; the others are
        // numbered again in their order.
        let mut used = vec![false; self.games.len()];
        for (_, l) in &self.states {
            if let Some(u) = used.get_mut(l.game as usize) {
                *u = true;
            }
        }
        if used.iter().all(|&u| u) {
            return;
        }
        let mut renumber = vec![u32::MAX; used.len()];
        let mut kept = 0u32;
        for (u, to) in used.iter().zip(&mut renumber) {
            if *u {
                *to = kept;
                kept += 1;
            }
        }
        // `retain` visits the names in their order, once each.
        let mut flags = used.iter();
        self.games
            .retain(|_| flags.next().copied().unwrap_or(false));
        for (_, l) in &mut self.states {
            l.game = renumber.get(l.game as usize).copied().unwrap_or(u32::MAX);
        }
    }
}

/// A minute point as the game counts read it: (server id, game, minute, answered, players).
pub(super) type PointRow = (i64, String, i64, i64, i64);

/// The game counts of the minutes `minutes` from the minute points `points` (sorted by
/// minute, from [`LIVE_FOR`] before the first): each minute counts every point up to it.
pub(super) fn replay(points: &[PointRow], minutes: Range<i64>) -> Vec<GameMinute> {
    let mut live = LiveSet::default();
    let mut next = points.iter().peekable();
    let mut out = Vec::new();
    for m in minutes {
        while let Some((id, game, minute, answered, psum)) = next.next_if(|p| p.2 <= m) {
            live.note_point(*id, game, *minute, *answered, *psum);
        }
        out.extend(live.count(m));
    }
    out
}

/// The minutes a close at `now` writes when minutes up to `closed` are written: those ended
/// [`CLOSE_GRACE`] before `now`; after a stop longer than [`LIVE_FOR`] no server is live in
/// the minutes between, so only the last `LIVE_FOR` of them (they are skipped, not written
/// empty). The first close writes the minute before now's.
pub(super) fn to_close(closed: Option<i64>, now: Timestamp) -> Range<i64> {
    let upto = minute_of(Timestamp(
        now.0
            .saturating_sub(u64::try_from(CLOSE_GRACE.as_millis()).unwrap_or(u64::MAX)),
    ));
    let from = closed
        .map_or(upto - 1, |c| c + 1)
        .max(upto - whole(LIVE_FOR, MINUTE_MS) - 1);
    from..upto.max(from)
}

/// The first minute whose points a close of `minutes` reads (a point older than it is not
/// live at the first minute's end).
pub(super) fn points_from(minutes: &Range<i64>) -> i64 {
    minutes.start - whole(LIVE_FOR, MINUTE_MS) - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_core::registry::GameAddr;

    fn s(addr: &str, at: u64, ok: bool, n: u32, slots: u32) -> PollSample {
        PollSample {
            key: ServerKey::new("g", GameAddr::parse(addr).unwrap()),
            at: Timestamp(at),
            ok,
            num_players: ok.then_some(n),
            max_players: ok.then_some(slots),
            ping: None,
        }
    }

    #[test]
    fn a_batch_folds_to_one_change_per_row_merged_as_a_row_is() {
        let samples = [
            s("127.0.0.2:1", 1_000, true, 4, 8),
            s("127.0.0.1:1", 2_000, true, 2, 8),
            s("127.0.0.2:1", 3_000, false, 0, 0),
            s("127.0.0.2:1", 4_000, true, 9, 10),
            s("127.0.0.2:1", 61_000, true, 1, 10),
        ];
        let b = Batch::fold(&samples);
        assert_eq!(
            b.servers,
            [
                ("127.0.0.1:1".to_owned(), "g".to_owned()),
                ("127.0.0.2:1".to_owned(), "g".to_owned())
            ]
        );
        assert_eq!(b.minutes.len(), 3);
        let m = b.minutes[&(1, 0)];
        assert_eq!(
            m,
            Delta {
                n: 3,
                ok: 2,
                pmin: Some(4),
                pmax: Some(9),
                psum: 13,
                slots: Some(10)
            }
        );
        assert_eq!(b.hours[&(1, 0)].n, 4);
        assert_eq!(b.last[1].at, Timestamp(61_000));
        assert_eq!((b.last[0].ok, b.last[0].players), (true, 2));
        // Merging the folded changes equals merging the samples one by one.
        let mut one = Delta::of(&samples[0]);
        for x in &samples[2..4] {
            one.merge(Delta::of(x));
        }
        assert_eq!(one, m);
    }

    #[test]
    fn replayed_points_count_what_the_live_set_counts() {
        let points: Vec<PointRow> = vec![
            (1, "g".into(), 10, 1, 3),
            (2, "g".into(), 10, 0, 0),
            (3, "h".into(), 11, 2, 5),
            (1, "g".into(), 12, 1, 6),
        ];
        let got = replay(&points, 10..13);
        let at = |m| got.iter().filter(|g| g.minute == m).collect::<Vec<_>>();
        assert_eq!(at(10).len(), 1);
        assert_eq!(
            (at(10)[0].listed, at(10)[0].up, at(10)[0].players),
            (2, 1, 3)
        );
        // Minute 11: game h's server answered twice for 5 players: a mean of 3 (2.5 rounded).
        assert_eq!(at(11)[1].players, 3);
        assert_eq!((at(12)[0].listed, at(12)[0].players), (2, 6));
        // Minute 10 + LIVE_FOR: server 2 (last seen at minute 10) is no longer counted.
        let later = replay(&points, 22..24);
        let g: Vec<_> = later
            .iter()
            .filter(|g| &*g.game == "g")
            .map(|g| (g.minute, g.listed))
            .collect();
        assert_eq!(g, [(22, 1), (23, 1)]);
    }

    #[test]
    fn the_servers_of_a_game_share_its_name_until_the_last_is_forgotten() {
        let mut live = LiveSet::default();
        let at = |ms| LastSample {
            at: Timestamp(ms),
            ok: true,
            players: 1,
        };
        for id in 0..100 {
            live.note(id, "g", at(1_000));
        }
        live.note(100, "h", at(1_000));
        live.note(101, "h", at(10 * MINUTE_MS));
        live.merge();
        let states = live.states.clone();
        let g = |id| {
            states
                .binary_search_by_key(&id, |&(i, _)| i)
                .map(|i| states[i].1.game)
                .unwrap()
        };
        assert_eq!(g(0), g(99), "one name for game g");
        assert_eq!(g(100), g(101), "one name for game h");
        assert_ne!(g(0), g(100));
        assert_eq!(live.games.len(), 2);
        let counted = |live: &mut LiveSet, m| -> Vec<(String, i64)> {
            live.count(m)
                .into_iter()
                .map(|c| (c.game.to_string(), c.listed))
                .collect()
        };
        assert_eq!(
            counted(&mut live, 0),
            [("g".to_owned(), 100), ("h".to_owned(), 2)]
        );
        // Every server of g and the first of h are forgotten: g's name goes, h's stays.
        live.forget_before(Timestamp(10 * MINUTE_MS + LIVE_FOR.as_millis() as u64 / 2));
        assert_eq!(live.len(), 1);
        let names: Vec<&str> = live.games.iter().map(|g| &**g).collect();
        assert_eq!(names, ["h"]);
        // A server of a forgotten game brings its name back; both are counted by name.
        live.note(7, "g", at(11 * MINUTE_MS));
        assert_eq!(live.games.len(), 2);
        assert_eq!(
            counted(&mut live, 11),
            [("g".to_owned(), 1), ("h".to_owned(), 1)]
        );
    }

    #[test]
    fn states_noted_in_any_order_keep_the_newest_per_server() {
        let mut live = LiveSet::default();
        let at = |ms, players| LastSample {
            at: Timestamp(ms),
            ok: true,
            players,
        };
        // More than one merge's worth, ids descending and each noted twice: an older state
        // after a newer one is ignored, an equally new one noted later wins.
        let n = 3 * MERGE_MIN as i64;
        for id in (0..n).rev() {
            live.note(id, "g", at(2_000, 5));
            live.note(id, "g", at(1_000, 9));
        }
        live.note(0, "g", at(2_000, 7));
        assert_eq!(live.len(), n as usize, "counted before the last merge too");
        let c = live.count(0);
        assert_eq!((c[0].listed, c[0].players), (n, 5 * (n - 1) + 7));
        assert_eq!(live.len(), n as usize);
        assert!(
            live.states.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, one per id"
        );
        assert!(live.states.capacity() <= live.states.len() + live.states.len() / 8);
    }

    proptest::proptest! {
        #[test]
        fn merged_states_are_the_newest_per_server_the_later_noted_on_a_tie(
            notes in proptest::collection::vec((0i64..3_000, 0u64..4, 0u32..100), 0..6_000),
        ) {
            let mut live = LiveSet::default();
            let mut want: BTreeMap<i64, (u64, u32)> = BTreeMap::new();
            for &(id, at, players) in &notes {
                live.note(id, "g", LastSample { at: Timestamp(at), ok: true, players });
                let e = want.entry(id).or_insert((at, players));
                if e.0 <= at {
                    *e = (at, players);
                }
            }
            live.merge();
            let got: Vec<(i64, (u64, u32))> = live
                .states
                .iter()
                .map(|&(id, l)| (id, (l.at.0, l.players())))
                .collect();
            let want: Vec<(i64, (u64, u32))> = want.into_iter().collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_close_writes_the_ended_minutes_at_most_live_for_of_them() {
        let t = |m: u64, s: u64| Timestamp(m * MINUTE_MS + s * 1000);
        assert_eq!(to_close(None, t(100, 5)), 99..100);
        assert_eq!(to_close(None, t(100, 4)), 98..99);
        assert_eq!(to_close(Some(99), t(100, 5)), 100..100);
        assert_eq!(to_close(Some(99), t(103, 5)), 100..103);
        let long = to_close(Some(10), t(1000, 5));
        assert_eq!(long.end, 1000);
        assert_eq!(long.start, 1000 - whole(LIVE_FOR, MINUTE_MS) - 1);
        assert_eq!(
            points_from(&long),
            long.start - whole(LIVE_FOR, MINUTE_MS) - 1
        );
    }
}
