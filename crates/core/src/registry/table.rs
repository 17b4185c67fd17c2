//! The registry's table of records, keyed by the key each record carries: one pointer per
//! record in the table, no second copy of the key (a `HashMap<ServerKey, Arc<Record>>` keeps
//! 72 bytes of key and the game name's heap string twice per record).

use std::hash::BuildHasher as _;
use std::sync::Arc;

use hashbrown::HashTable;

use super::{DdnetSecret, Record, ServerKey, Timestamp};

/// Records by [`ServerKey`], and by the address in the key. Hashing is SipHash with a
/// per-table random key (keys come from the wire), of which 32 bits are kept ([`Hash32`]):
/// a slot is 16 bytes, an index entry 8, where 64-bit hashes took 24 and 16 (~20 bytes per
/// record at the tables' load factors). Two keys whose 32 bits agree (a few in a million
/// records) cost a comparison of keys more, as any two in one bucket group do.
///
/// The address index holds, per record, the hash of its address and the hash of its key
/// (8 bytes): the records at an address are found through the key hashes without a second
/// pointer to keep in step when a record is replaced by its changed copy. The secret index
/// does the same for the records a DDNet secret registered (8 bytes each, where a map from
/// the secret to a list of keys took ~150 bytes per DDNet server).
///
/// Every table is split in [`PARTS`] and keeps the hashes it is keyed by, so that a table
/// that doubles (under the registry's lock, in the insert that filled it) moves a sixteenth
/// of the entries without rehashing a key or reading a record: one part of the records at
/// 229,376 records took 3–4 ms when it hashed every key again, the whole address index
/// 8.4 ms.
#[derive(Debug, Clone, Default)]
pub(super) struct RecordTable {
    /// The records, in [`PARTS`] tables by their key hash ([`part_of`]).
    parts: [HashTable<Slot>; PARTS],
    /// (hash of `key.addr`, hash of `key`) per record.
    by_addr: PairIndex,
    /// (hash of the DDNet secret, hash of `key`) per record linked with
    /// [`RecordTable::link_secret`].
    by_secret: PairIndex,
    hasher: std::collections::hash_map::RandomState,
}

/// 32 bits of a key's (or an address's, a secret's) SipHash, as the tables keep it; the
/// tables themselves are keyed by [`spread`] of it.
type Hash32 = u32;

/// The 64-bit hash the tables place a [`Hash32`] by: the 32 bits multiplied by an odd
/// constant, so that the high bits (the tables' control byte, [`part_of`]) depend on all of
/// them and the low bits (the bucket) stay as random as they were.
fn spread(h: Hash32) -> u64 {
    u64::from(h).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// `t` in whole seconds as a slot keeps a deadline (rounded down: a record may be looked at
/// up to a second before its deadline, never after; [`Timestamp::NEVER`] and anything past
/// 2106 as `u32::MAX`, never due).
fn deadline_secs(t: Timestamp) -> u32 {
    u32::try_from(t.as_secs()).unwrap_or(u32::MAX)
}

/// A record and its deadline: when the registry must look at it next (its expiry, or its
/// oldest DDNet stream or learned source going stale; [`Timestamp::NEVER`]: never), in whole
/// seconds ([`deadline_secs`]). Kept here,
/// not in the record, so that finding the records due for pruning reads the table's own
/// memory in order instead of every record (a cache miss each: at 300,000 records that scan
/// held the registry lock for ~10 ms), and a new deadline never copies a record a snapshot
/// shares.
#[derive(Debug, Clone)]
struct Slot {
    /// The hash of `rec.key`.
    hash: Hash32,
    deadline: u32,
    rec: Arc<Record>,
}

const _: () = assert!(size_of::<Slot>() == 16);

/// How many tables the records are split into. A pass over the records due for pruning
/// looks at one part at a time, so that it holds the registry's lock for a sixteenth of the
/// whole scan at a time (a whole scan of 300,000 slots takes ~1.3 ms: long enough to stall a
/// face that waits for the lock).
pub(super) const PARTS: usize = 16;

/// The part a key hash belongs to: four bits the tables use for neither the bucket index
/// (the low bits, below 2^32 buckets) nor the control byte (the top seven bits).
fn part_of(h: u64) -> usize {
    (h >> 32) as usize % PARTS
}

/// The part of `parts` for hash `h`.
fn part<T>(parts: &[T; PARTS], h: u64) -> &T {
    let [first, rest @ ..] = parts;
    // `part_of` is below `PARTS`: the first part never stands in for a missing one.
    match part_of(h).checked_sub(1) {
        Some(i) => rest.get(i).unwrap_or(first),
        None => first,
    }
}

/// The part of `parts` for hash `h`, to change.
fn part_mut<T>(parts: &mut [T; PARTS], h: u64) -> &mut T {
    let [first, rest @ ..] = parts;
    match part_of(h).checked_sub(1) {
        Some(i) => rest.get_mut(i).unwrap_or(first),
        None => first,
    }
}

/// An index of (hash of a field, hash of a record's key) pairs, in [`PARTS`] by the field's
/// hash. A pair may be held more than once (two records whose hashes both collide).
#[derive(Debug, Clone, Default)]
struct PairIndex {
    parts: [HashTable<(Hash32, Hash32)>; PARTS],
}

impl PairIndex {
    fn insert(&mut self, a: Hash32, k: Hash32) {
        let h = spread(a);
        part_mut(&mut self.parts, h).insert_unique(h, (a, k), |&(a, _)| spread(a));
    }

    fn contains(&self, a: Hash32, k: Hash32) -> bool {
        let h = spread(a);
        part(&self.parts, h).find(h, |&e| e == (a, k)).is_some()
    }

    /// Removes one entry (a, k); entries with the same pair are alike, so removing any one
    /// of them keeps the count.
    fn remove(&mut self, a: Hash32, k: Hash32) {
        let h = spread(a);
        if let Ok(e) = part_mut(&mut self.parts, h).find_entry(h, |&e| e == (a, k)) {
            e.remove();
        }
    }

    /// The key hashes held under `a`. `iter_hash` also yields entries whose hash only shares
    /// its top bits with `a`: an entry counts under its own hash only, or a record whose key
    /// hash shares those bits with another record's under `a` is found twice.
    fn keys_under(&self, a: Hash32) -> Vec<Hash32> {
        let h = spread(a);
        part(&self.parts, h)
            .iter_hash(h)
            .filter(|&&(e, _)| e == a)
            .map(|&(_, k)| k)
            .collect()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.parts.iter().map(HashTable::len).sum()
    }
}

/// The low 32 bits of a SipHash.
#[allow(clippy::cast_possible_truncation)] // Truncating is the point.
fn low32(h: u64) -> Hash32 {
    h as u32
}

impl RecordTable {
    fn hash(&self, key: &ServerKey) -> Hash32 {
        low32(self.hasher.hash_one(key))
    }

    fn part(&self, h: Hash32) -> &HashTable<Slot> {
        part(&self.parts, spread(h))
    }

    fn part_mut(&mut self, h: Hash32) -> &mut HashTable<Slot> {
        part_mut(&mut self.parts, spread(h))
    }

    fn addr_hash(&self, addr: &super::GameAddr) -> Hash32 {
        low32(self.hasher.hash_one(addr))
    }

    fn secret_hash(&self, secret: &DdnetSecret) -> Hash32 {
        low32(self.hasher.hash_one(secret))
    }

    /// The records with these key hashes that `keep` accepts, each once.
    fn by_key_hashes<'a, F: Fn(&Record) -> bool>(
        &'a self,
        mut hashes: Vec<Hash32>,
        keep: F,
    ) -> impl Iterator<Item = &'a Arc<Record>> + use<'a, F> {
        // Two records whose key hashes collide are one entry each in an index, and both are
        // found by each: look each key hash up once.
        hashes.sort_unstable();
        hashes.dedup();
        hashes
            .into_iter()
            .flat_map(move |k| {
                self.part(k)
                    .iter_hash(spread(k))
                    .filter(move |s| s.hash == k)
            })
            .map(|s| &s.rec)
            .filter(move |r| keep(r))
    }

    /// Links the record under `key` with the DDNet `secret` (once; linking again is a no-op).
    pub(super) fn link_secret(&mut self, secret: &DdnetSecret, key: &ServerKey) {
        let s = self.secret_hash(secret);
        let h = self.hash(key);
        if !self.by_secret.contains(s, h) {
            self.by_secret.insert(s, h);
        }
    }

    /// Undoes [`RecordTable::link_secret`].
    pub(super) fn unlink_secret(&mut self, secret: &DdnetSecret, key: &ServerKey) {
        let s = self.secret_hash(secret);
        let h = self.hash(key);
        self.by_secret.remove(s, h);
    }

    /// The records linked with the DDNet `secret` whose DDNet data still names it. A link
    /// is only a pair of hashes: the secret in the record decides, so a hash shared with
    /// another secret or key finds nothing wrong.
    pub(super) fn with_secret<'a, 's>(
        &'a self,
        secret: &'s DdnetSecret,
    ) -> impl Iterator<Item = &'a Arc<Record>> + use<'a, 's> {
        let keys = self.by_secret.keys_under(self.secret_hash(secret));
        self.by_key_hashes(keys, move |r| {
            r.ddnet().is_some_and(|d| d.secret == *secret)
        })
    }

    /// The records whose key has the address `addr` (any game, any instance).
    pub(super) fn at_addr<'a>(
        &'a self,
        addr: &'a super::GameAddr,
    ) -> impl Iterator<Item = &'a Arc<Record>> + 'a {
        let keys = self.by_addr.keys_under(self.addr_hash(addr));
        self.by_key_hashes(keys, move |r| r.key.addr == *addr)
    }

    pub(super) fn get(&self, key: &ServerKey) -> Option<&Arc<Record>> {
        let h = self.hash(key);
        self.part(h)
            .find(spread(h), |s| s.rec.key == *key)
            .map(|s| &s.rec)
    }

    /// The record under `key`, to change (its deadline through [`RecordTable::set_deadline_of`]).
    pub(super) fn get_mut(&mut self, key: &ServerKey) -> Option<&mut Arc<Record>> {
        let h = self.hash(key);
        self.part_mut(h)
            .find_mut(spread(h), |s| s.rec.key == *key)
            .map(|s| &mut s.rec)
    }

    /// Sets the deadline of the record under `key`.
    #[cfg(test)]
    pub(super) fn set_deadline(&mut self, key: &ServerKey, deadline: Timestamp) {
        let h = self.hash(key);
        if let Some(s) = self.part_mut(h).find_mut(spread(h), |s| s.rec.key == *key) {
            s.deadline = deadline_secs(deadline);
        }
    }

    /// Sets the deadline of the record under `key` to what `deadline` says of it, and gives
    /// the record: one lookup.
    pub(super) fn set_deadline_of(
        &mut self,
        key: &ServerKey,
        deadline: impl FnOnce(&Record) -> Timestamp,
    ) -> Option<&Arc<Record>> {
        let h = self.hash(key);
        let s = self
            .part_mut(h)
            .find_mut(spread(h), |s| s.rec.key == *key)?;
        s.deadline = deadline_secs(deadline(&s.rec));
        Some(&s.rec)
    }

    /// The deadline of the record under `key`.
    #[cfg(test)]
    pub(super) fn deadline(&self, key: &ServerKey) -> Option<Timestamp> {
        let h = self.hash(key);
        self.part(h)
            .find(spread(h), |s| s.rec.key == *key)
            .map(|s| match s.deadline {
                u32::MAX => Timestamp::NEVER,
                d => Timestamp::from_secs(u64::from(d)),
            })
    }

    /// The records of part `part` (below [`PARTS`]; none past it) whose deadline is at or
    /// before `now`.
    pub(super) fn due_in(&self, part: usize, now: Timestamp) -> impl Iterator<Item = &Arc<Record>> {
        self.parts
            .get(part)
            .into_iter()
            .flat_map(HashTable::iter)
            .filter(move |s| s.deadline != u32::MAX && s.deadline <= deadline_secs(now))
            .map(|s| &s.rec)
    }

    /// Inserts `rec` under its own key with its `deadline`; returns the record it replaced.
    pub(super) fn insert(&mut self, rec: Arc<Record>, deadline: Timestamp) -> Option<Arc<Record>> {
        let h = self.hash(&rec.key);
        let hasher = &self.hasher;
        let slot = Slot {
            hash: h,
            deadline: deadline_secs(deadline),
            rec,
        };
        match part_mut(&mut self.parts, spread(h)).entry(
            spread(h),
            |s| s.rec.key == slot.rec.key,
            |s| spread(s.hash),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                Some(std::mem::replace(e.get_mut(), slot).rec)
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                let a = low32(hasher.hash_one(&slot.rec.key.addr));
                e.insert(slot);
                self.by_addr.insert(a, h);
                None
            }
        }
    }

    pub(super) fn remove(&mut self, key: &ServerKey) -> Option<Arc<Record>> {
        let h = self.hash(key);
        let removed = match self
            .part_mut(h)
            .find_entry(spread(h), |s| s.rec.key == *key)
        {
            Ok(e) => e.remove().0.rec,
            Err(_) => return None,
        };
        let a = self.addr_hash(&key.addr);
        self.by_addr.remove(a, h);
        Some(removed)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<Record>> {
        self.parts.iter().flat_map(HashTable::iter).map(|s| &s.rec)
    }

    pub(super) fn len(&self) -> usize {
        self.parts.iter().map(HashTable::len).sum()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parts.iter().all(HashTable::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Face, GameAddr, Registration, Timestamp};
    use muster_proto::limit::SourceKey;

    fn rec(port: u16) -> Arc<Record> {
        let a: std::net::SocketAddr = format!("192.0.2.1:{port}").parse().unwrap();
        Arc::new(Record::new(
            u64::from(port),
            Registration {
                key: ServerKey::new("ut", GameAddr::Ip(a)),
                face: Face::GameSpy,
                game_port: None,
                query_addr: Some(a),
                query_protocol: None,
                source: SourceKey::of(a.ip()),
            },
            Timestamp::from_secs(1),
        ))
    }

    #[test]
    fn behaves_as_a_map_by_the_records_key() {
        let mut t = RecordTable::default();
        assert!(t.insert(rec(1), Timestamp::NEVER).is_none());
        assert!(t.insert(rec(2), Timestamp::NEVER).is_none());
        let again = rec(1);
        let k = again.key.clone();
        assert_eq!(t.insert(again, Timestamp::NEVER).map(|r| r.id), Some(1));
        assert_eq!(t.len(), 2);
        assert!(t.get(&k).is_some());
        Arc::make_mut(t.get_mut(&k).unwrap()).set_poll_failures(3);
        assert_eq!(t.get(&k).unwrap().poll_failures(), 3);
        assert_eq!(t.remove(&k).map(|r| r.poll_failures()), Some(3));
        assert!(t.get(&k).is_none());
        assert_eq!(t.values().count(), 1);
        assert!(!t.is_empty());
    }

    #[test]
    fn finds_due_records_by_the_deadline_copy_kept_in_step() {
        let mut t = RecordTable::default();
        t.insert(rec(1), Timestamp::from_secs(10));
        t.insert(rec(2), Timestamp::NEVER);
        let due = |t: &RecordTable, s| -> Vec<u64> {
            let mut v: Vec<u64> = (0..PARTS)
                .flat_map(|p| t.due_in(p, Timestamp::from_secs(s)))
                .map(|r| r.id)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(due(&t, 9), Vec::<u64>::new());
        assert_eq!(due(&t, 10), [1], "a record without a deadline is never due");
        let k = rec(1).key.clone();
        t.set_deadline(&k, Timestamp::from_secs(20));
        assert_eq!(t.deadline(&k), Some(Timestamp::from_secs(20)));
        assert_eq!(due(&t, 10), Vec::<u64>::new());
        assert_eq!(due(&t, 20), [1]);
    }

    #[test]
    fn a_deadline_kept_in_seconds_is_due_early_within_its_second_never_late() {
        let mut t = RecordTable::default();
        t.insert(rec(1), Timestamp(10_500));
        t.insert(rec(2), Timestamp::NEVER);
        t.insert(rec(3), Timestamp(u64::from(u32::MAX) * 1000 + 5_000));
        let due = |t: &RecordTable, ms| -> Vec<u64> {
            let mut v: Vec<u64> = (0..PARTS)
                .flat_map(|p| t.due_in(p, Timestamp(ms)))
                .map(|r| r.id)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(due(&t, 9_999), Vec::<u64>::new());
        assert_eq!(due(&t, 10_000), [1], "looked at within its second");
        assert_eq!(due(&t, 10_500), [1]);
        assert_eq!(due(&t, u64::MAX - 1), [1], "never and past 2106: never due");
        assert_eq!(t.deadline(&rec(2).key), Some(Timestamp::NEVER));
        assert_eq!(size_of::<Slot>(), 16);
    }

    fn with_ddnet(port: u16, secret: &str) -> Arc<Record> {
        let mut r = (*rec(port)).clone();
        r.set_ddnet(Some(Arc::new(crate::registry::DdnetData {
            secret: DdnetSecret::from(secret),
            serial: 0,
            info: crate::registry::DdnetInfo::from(&b"{}"[..]),
            streams: Box::default(),
        })));
        Arc::new(r)
    }

    #[test]
    fn finds_the_records_linked_with_a_secret_that_still_name_it() {
        let mut t = RecordTable::default();
        let ids = |t: &RecordTable, s: &str| -> Vec<u64> {
            let mut v: Vec<u64> = t.with_secret(&DdnetSecret::from(s)).map(|r| r.id).collect();
            v.sort_unstable();
            v
        };
        for (port, secret) in [(1, "a"), (2, "a"), (3, "b")] {
            let r = with_ddnet(port, secret);
            t.link_secret(&DdnetSecret::from(secret), &r.key);
            t.link_secret(&DdnetSecret::from(secret), &r.key);
            t.insert(r, Timestamp::NEVER);
        }
        t.insert(rec(4), Timestamp::NEVER);
        assert_eq!(ids(&t, "a"), [1, 2], "each once, linked twice or not");
        assert_eq!(ids(&t, "b"), [3]);
        assert_eq!(ids(&t, "c"), Vec::<u64>::new());
        // Unlinked: gone from the secret, still in the table.
        let k1 = rec(1).key.clone();
        t.unlink_secret(&DdnetSecret::from("a"), &k1);
        assert_eq!(ids(&t, "a"), [2]);
        assert!(t.get(&k1).is_some());
        // A link whose record now names another secret finds nothing under the old one.
        let k2 = rec(2).key.clone();
        t.insert(with_ddnet(2, "b"), Timestamp::NEVER);
        assert_eq!(ids(&t, "a"), Vec::<u64>::new());
        assert_eq!(ids(&t, "b"), [3], "not linked with b yet");
        t.link_secret(&DdnetSecret::from("b"), &k2);
        assert_eq!(ids(&t, "b"), [2, 3]);
        // A removed record is not found; unlinking what is not linked is a no-op.
        t.remove(&k2);
        t.unlink_secret(&DdnetSecret::from("zzz"), &k2);
        assert_eq!(ids(&t, "b"), [3]);
    }

    #[test]
    fn finds_each_record_at_an_address_once_whatever_its_hash_shares() {
        // 300 games at one address: some of their key hashes share the top bits the table
        // groups by (1 in 128 per pair), which once made a record come back twice.
        let mut t = RecordTable::default();
        let addr = rec(7).key.addr.clone();
        for i in 0..300 {
            let mut r = (*rec(7)).clone();
            r.id = i;
            r.key = ServerKey::new(&format!("g{i}"), addr.clone());
            t.insert(Arc::new(r), Timestamp::NEVER);
        }
        t.insert(rec(8), Timestamp::NEVER);
        let mut ids: Vec<u64> = t.at_addr(&addr).map(|r| r.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..300).collect::<Vec<u64>>());
    }

    #[test]
    fn finds_every_record_at_an_address_and_forgets_removed_ones() {
        let mut t = RecordTable::default();
        let one = rec(7);
        let addr = one.key.addr.clone();
        let mut other_game = (*rec(7)).clone();
        other_game.key = ServerKey::new("unreal", addr.clone());
        t.insert(one, Timestamp::NEVER);
        t.insert(Arc::new(other_game), Timestamp::NEVER);
        t.insert(rec(8), Timestamp::NEVER);
        // A replaced record (its changed copy) stays found once.
        t.insert(rec(7), Timestamp::NEVER);
        let mut games: Vec<&str> = t.at_addr(&addr).map(|r| r.key.game.as_str()).collect();
        games.sort_unstable();
        assert_eq!(games, ["unreal", "ut"]);
        assert!(t.remove(&ServerKey::new("ut", addr.clone())).is_some());
        let games: Vec<&str> = t.at_addr(&addr).map(|r| r.key.game.as_str()).collect();
        assert_eq!(games, ["unreal"]);
        assert!(t.remove(&ServerKey::new("unreal", addr.clone())).is_some());
        assert_eq!(t.at_addr(&addr).count(), 0);
        assert_eq!(t.by_addr.len(), 1, "only the record at port 8 is left");
    }

    /// Tables that doubled many times (each part by the hashes it keeps) still find every
    /// record by key, by address and by secret.
    #[test]
    fn grown_tables_find_everything() {
        let mut t = RecordTable::default();
        for port in 1..=6_000u16 {
            let r = with_ddnet(port, &format!("s{}", port % 7));
            t.insert(Arc::clone(&r), Timestamp::from_secs(u64::from(port)));
            t.link_secret(
                &DdnetSecret::from(format!("s{}", port % 7).as_str()),
                &r.key,
            );
        }
        assert_eq!(t.len(), 6_000);
        assert_eq!(t.by_addr.len(), 6_000);
        for port in (1..=6_000u16).step_by(97) {
            let r = rec(port);
            assert_eq!(t.get(&r.key).map(|r| r.id), Some(u64::from(port)));
            assert_eq!(
                t.at_addr(&r.key.addr).map(|r| r.id).collect::<Vec<_>>(),
                [u64::from(port)]
            );
        }
        assert_eq!(t.with_secret(&DdnetSecret::from("s3")).count(), 857);
        let due: usize = (0..PARTS)
            .map(|p| t.due_in(p, Timestamp::from_secs(100)).count())
            .sum();
        assert_eq!(due, 100);
    }
}
