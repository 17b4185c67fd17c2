//! The registry's table of records, keyed by the key each record carries: one pointer per
//! record in the table, no second copy of the key (a `HashMap<ServerKey, Arc<Record>>` keeps
//! 72 bytes of key and the game name's heap string twice per record).

use std::hash::BuildHasher as _;
use std::sync::Arc;

use hashbrown::HashTable;

use super::{Record, ServerKey};

/// Records by [`ServerKey`]. Hashing is SipHash with a per-table random key (keys come from
/// the wire).
#[derive(Debug, Clone, Default)]
pub(super) struct RecordTable {
    table: HashTable<Arc<Record>>,
    hasher: std::collections::hash_map::RandomState,
}

impl RecordTable {
    fn hash(&self, key: &ServerKey) -> u64 {
        self.hasher.hash_one(key)
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
                e.insert(rec);
                None
            }
        }
    }

    pub(super) fn remove(&mut self, key: &ServerKey) -> Option<Arc<Record>> {
        let h = self.hash(key);
        match self.table.find_entry(h, |r| r.key == *key) {
            Ok(e) => Some(e.remove().0),
            Err(_) => None,
        }
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
}
