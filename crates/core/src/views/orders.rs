//! Sort orders of a snapshot's records, per column, kept up to date by the publisher.
//!
//! An order is the positions of a snapshot's records in ascending order of one column, ties
//! in list order. A reader that needs a column nobody asked for lately sorts once (and marks
//! the column wanted); from then on the publisher carries the order from one snapshot to the
//! next by [`patch`]: records that did not change keep their relative order, only the changed
//! ones are sorted and inserted by binary search. A publish with `k` changed records of `n`
//! costs `O(n + k log n)` per wanted column, never a full sort; a column nobody asked for in
//! [`WANTED_FOR`] is dropped.
//!
//! Text columns compare case-folded (`char::to_lowercase`, code point by code point) without
//! allocating; the full sort folds each record's text once.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::time::Duration;

use crate::registry::{PollInfo, Record};

/// A column's order is kept while someone asked for it within this time.
pub const WANTED_FOR: Duration = Duration::from_secs(120);

/// Positions in a snapshot's `listed`, in a column's order.
pub type Order = Arc<Vec<u32>>;

/// Column to sort a listing by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SortKey {
    /// First registration (the stable list order).
    #[default]
    Order,
    /// Server name (case-insensitive).
    Name,
    /// Map (case-insensitive).
    Map,
    /// Game name.
    Game,
    /// Game type.
    GameType,
    /// Players on the server.
    Players,
    /// Player slots.
    MaxPlayers,
    /// Address.
    Address,
    /// Face / protocol.
    Protocol,
    /// Last valid heartbeat.
    LastSeen,
}

impl SortKey {
    /// Every column with an index ([`SortKey::Order`] is the list order itself).
    pub const INDEXED: [Self; 9] = [
        Self::Name,
        Self::Map,
        Self::Game,
        Self::GameType,
        Self::Players,
        Self::MaxPlayers,
        Self::Address,
        Self::Protocol,
        Self::LastSeen,
    ];

    const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Parses a column name as the HTTP API spells it.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "order" | "first_verified" | "first_seen" => Self::Order,
            "name" => Self::Name,
            "map" => Self::Map,
            "game" => Self::Game,
            "game_type" | "gametype" => Self::GameType,
            "players" | "num_players" => Self::Players,
            "max_players" => Self::MaxPlayers,
            "address" => Self::Address,
            "protocol" | "face" => Self::Protocol,
            "last_seen" | "last_heartbeat" => Self::LastSeen,
            _ => return None,
        })
    }

    /// The column's name as the HTTP API spells it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Order => "order",
            Self::Name => "name",
            Self::Map => "map",
            Self::Game => "game",
            Self::GameType => "game_type",
            Self::Players => "players",
            Self::MaxPlayers => "max_players",
            Self::Address => "address",
            Self::Protocol => "protocol",
            Self::LastSeen => "last_seen",
        }
    }
}

/// Columns readers asked for since the publisher last looked, shared by the publisher and its
/// snapshots.
#[derive(Debug, Default)]
pub struct Wanted(AtomicU32);

impl Wanted {
    /// Marks `key` wanted.
    pub fn mark(&self, key: SortKey) {
        self.0.fetch_or(key.bit(), AtomicOrdering::Relaxed);
    }

    /// The columns marked since the last call.
    pub fn take(&self) -> Vec<SortKey> {
        let bits = self.0.swap(0, AtomicOrdering::Relaxed);
        SortKey::INDEXED
            .into_iter()
            .filter(|k| bits & k.bit() != 0)
            .collect()
    }
}

/// The case fold of text columns.
fn folded(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().flat_map(char::to_lowercase)
}

fn text(r: &Record, f: fn(&PollInfo) -> &str) -> &str {
    r.info.as_deref().map(f).unwrap_or_default()
}

fn text_field(key: SortKey) -> Option<fn(&PollInfo) -> &str> {
    match key {
        SortKey::Name => Some(|i| i.name()),
        SortKey::Map => Some(|i| i.map()),
        SortKey::GameType => Some(|i| i.game_type()),
        _ => None,
    }
}

/// Compares two records by `key` alone (ties are [`Ordering::Equal`]).
#[must_use]
pub fn compare_by(key: SortKey, a: &Record, b: &Record) -> Ordering {
    if let Some(f) = text_field(key) {
        return folded(text(a, f)).cmp(folded(text(b, f)));
    }
    match key {
        SortKey::Order | SortKey::Name | SortKey::Map | SortKey::GameType => Ordering::Equal,
        SortKey::Game => a.key.game.cmp(&b.key.game),
        SortKey::Players => a.players().cmp(&b.players()),
        SortKey::MaxPlayers => a.max_players().cmp(&b.max_players()),
        SortKey::Address => a.key.addr.cmp(&b.key.addr),
        SortKey::Protocol => a.face.name().cmp(b.face.name()),
        SortKey::LastSeen => a.last_heartbeat.cmp(&b.last_heartbeat),
    }
}

fn pos(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// The order of `listed` by `key`, sorted from scratch (ties in list order).
#[must_use]
pub fn full(listed: &[Arc<Record>], key: SortKey) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..listed.len()).map(pos).collect();
    if key == SortKey::Order {
        return idx;
    }
    if let Some(f) = text_field(key) {
        // Every record's folded text in one buffer, each key its range: two allocations for
        // the sort, not one per record (a sort of 100,000 records would otherwise make and
        // free 100,000 strings on a bulk thread).
        let mut folded_texts = String::new();
        let mut ends: Vec<usize> = Vec::with_capacity(listed.len());
        for (i, r) in listed.iter().enumerate() {
            crate::bulk::pace(i);
            folded_texts.extend(folded(text(r, f)));
            ends.push(folded_texts.len());
        }
        let key_of = |i: u32| {
            let i = i as usize;
            let start = i.checked_sub(1).and_then(|j| ends.get(j)).copied();
            let end = ends.get(i).copied();
            folded_texts.get(start.unwrap_or(0)..end.unwrap_or(0))
        };
        idx.sort_by(|a, b| key_of(*a).cmp(&key_of(*b)));
    } else {
        idx.sort_by(
            |a, b| match (listed.get(*a as usize), listed.get(*b as usize)) {
                (Some(x), Some(y)) => compare_by(key, x, y),
                _ => Ordering::Equal,
            },
        );
    }
    idx
}

/// The order of `new` by `key`, from `old_order` (the order of `old` by `key`): records of
/// `old` still in `new` and not in `touched` (ids of records changed since `old`) keep their
/// relative order; the others are sorted and inserted. Both lists are in list order
/// ([`Record::order_key`]).
#[must_use]
pub fn patch(
    old: &[Arc<Record>],
    old_order: &[u32],
    new: &[Arc<Record>],
    touched: &HashSet<u64>,
    key: SortKey,
) -> Vec<u32> {
    if key == SortKey::Order {
        return full(new, key);
    }
    // Where each kept record of `old` is in `new`; both are sorted by order key.
    let mut moved = vec![u32::MAX; old.len()];
    let mut fresh: Vec<u32> = Vec::new();
    let mut i = 0;
    for (j, r) in new.iter().enumerate() {
        crate::bulk::pace(j);
        let k = r.order_key();
        while old.get(i).is_some_and(|o| o.order_key() < k) {
            i += 1;
        }
        let same = old.get(i).is_some_and(|o| o.order_key() == k);
        if same && !touched.contains(&r.id) {
            if let Some(m) = moved.get_mut(i) {
                *m = pos(j);
            }
        } else {
            fresh.push(pos(j));
        }
        if same {
            i += 1;
        }
    }
    let kept: Vec<u32> = old_order
        .iter()
        .filter_map(|&p| moved.get(p as usize).copied().filter(|&m| m != u32::MAX))
        .collect();
    let rec = |p: u32| new.get(p as usize);
    let cmp = |a: u32, b: u32| match (rec(a), rec(b)) {
        (Some(x), Some(y)) => compare_by(key, x, y).then(a.cmp(&b)),
        _ => a.cmp(&b),
    };
    fresh.sort_by(|a, b| cmp(*a, *b));
    let mut out = Vec::with_capacity(kept.len() + fresh.len());
    let mut start = 0;
    for f in fresh {
        let rest = kept.get(start..).unwrap_or_default();
        let n = rest.partition_point(|&k| cmp(k, f) == Ordering::Less);
        out.extend_from_slice(rest.get(..n).unwrap_or_default());
        out.push(f);
        start += n;
    }
    out.extend_from_slice(kept.get(start..).unwrap_or_default());
    out
}
