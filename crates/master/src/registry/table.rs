//! The registry's table of records, keyed by the key each record carries: one pointer per
//! record in the table, no second copy of the key (a `HashMap<ServerKey, Arc<Record>>` keeps
//! 72 bytes of key and the game name's heap string twice per record).

use std::hash::BuildHasher as _;
use std::sync::Arc;

use hashbrown::HashTable;

use super::{Record, ServerKey};

/// Records by [`ServerKey`], and by the address in the key. Hashing is SipHash with a
/// per-table random key (keys come from the wire).
///
/// The address index holds, per record, the hash of its address and the hash of its key
/// (16 bytes): the records at an address are found through the key hashes without a second
/// pointer to keep in step when a record is replaced by its changed copy.
#[derive(Debug, Clone, Default)]
pub(super) struct RecordTable {
    table: HashTable<Arc<Record>>,
    /// (hash of `key.addr`, hash of `key`) per record.
    by_addr: HashTable<(u64, u64)>,
    hasher: std::collections::hash_map::RandomState,
}

impl RecordTable {
    fn hash(&self, key: &ServerKey) -> u64 {
        self.hasher.hash_one(key)
    }

    fn addr_hash(&self, addr: &super::GameAddr) -> u64 {
        self.hasher.hash_one(addr)
    }

    /// The records whose key has the address `addr` (any game, any instance).
    pub(super) fn at_addr<'a>(
        &'a self,
        addr: &'a super::GameAddr,
    ) -> impl Iterator<Item = &'a Arc<Record>> + 'a {
        let mut keys: Vec<u64> = self
            .by_addr
            .iter_hash(self.addr_hash(addr))
            .map(|&(_, k)| k)
            .collect();
        // Two records at one address whose key hashes collide are one entry each here, and
        // both are found by each: look each key hash up once.
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .flat_map(move |k| self.table.iter_hash(k))
            .filter(move |r| r.key.addr == *addr)
    }

    pub(super) fn get(&self, key: &ServerKey) -> Option<&Arc<Record>> {
        self.table.find(self.hash(key), |r| r.key == *key)
    }

    pub(super) fn get_mut(&mut self, key: &ServerKey) -> Option<&mut Arc<Record>> {
        let h = self.hash(key);
        self.table.find_mut(h, |r| r.key == *key)
    }

    /// Inserts `rec` under its own key; returns the record it replaced.
    pub(super) fn insert(&mut self, rec: Arc<Record>) -> Option<Arc<Record>> {
        let h = self.hash(&rec.key);
        let hasher = &self.hasher;
        match self
            .table
            .entry(h, |r| r.key == rec.key, |r| hasher.hash_one(&r.key))
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                Some(std::mem::replace(e.get_mut(), rec))
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                let a = hasher.hash_one(&rec.key.addr);
                e.insert(rec);
                self.by_addr.insert_unique(a, (a, h), |&(a, _)| a);
                None
            }
        }
    }

    pub(super) fn remove(&mut self, key: &ServerKey) -> Option<Arc<Record>> {
        let h = self.hash(key);
        let removed = match self.table.find_entry(h, |r| r.key == *key) {
            Ok(e) => e.remove().0,
            Err(_) => return None,
        };
        let a = self.addr_hash(&key.addr);
        // Entries with the same pair are alike: removing any one of them keeps the count.
        if let Ok(e) = self.by_addr.find_entry(a, |&(ea, eh)| ea == a && eh == h) {
            e.remove();
        }
        Some(removed)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<Record>> {
        self.table.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
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
        assert!(t.insert(rec(1)).is_none());
        assert!(t.insert(rec(2)).is_none());
        let again = rec(1);
        let k = again.key.clone();
        assert_eq!(t.insert(again).map(|r| r.id), Some(1));
        assert_eq!(t.len(), 2);
        assert!(t.get(&k).is_some());
        Arc::make_mut(t.get_mut(&k).unwrap()).poll_failures = 3;
        assert_eq!(t.get(&k).unwrap().poll_failures, 3);
        assert_eq!(t.remove(&k).map(|r| r.poll_failures), Some(3));
        assert!(t.get(&k).is_none());
        assert_eq!(t.values().count(), 1);
        assert!(!t.is_empty());
    }

    #[test]
    fn finds_every_record_at_an_address_and_forgets_removed_ones() {
        let mut t = RecordTable::default();
        let one = rec(7);
        let addr = one.key.addr.clone();
        let mut other_game = (*rec(7)).clone();
        other_game.key = ServerKey::new("unreal", addr.clone());
        t.insert(one);
        t.insert(Arc::new(other_game));
        t.insert(rec(8));
        // A replaced record (its changed copy) stays found once.
        t.insert(rec(7));
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
}
