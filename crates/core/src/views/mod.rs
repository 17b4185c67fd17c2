//! Views: immutable snapshots of the listed records, read by every list and the HTTP API
//! without any lock the registry's writers take.
//!
//! ```text
//!  Registry ──view log (Change)──> Publisher (last listed + pending changes, in list order)
//!                                      │ build, at most every min_gap
//!                                      v
//!                          Arc<Snapshot> ──ArcSwap──> faces' lists, API, metrics, poller
//! ```
//!
//! A [`Snapshot`] holds every listed record in the stable list order (first registration,
//! then id) and a cache of what faces derive from them (encoded GameAgent datagrams, GameSpy
//! lists per game, `servers.json`, the API's sort orders…), each computed once, on first use,
//! by the reader that needs it ([`Snapshot::cached`]). A snapshot built after changes that
//! touched only times no list shows (heartbeats, proofs) keeps the previous snapshot's cache:
//! membership and order are the same, so cached orders stay valid.
//!
//! Every list and the API read the same snapshot, so they never disagree with each other;
//! a change shows in all of them at once, within one publish interval.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

pub mod list;
pub mod orders;

use crate::events::{Delta, EventKind};
use crate::registry::{Change, Face, GameAddr, Record, Timestamp};

/// A record's place in the list order ([`Record::order_key`]).
type OrderKey = (Timestamp, u64);
use orders::{Order, SortKey, Wanted};

/// Entries a snapshot's cache keeps at most; a reader asking for more computes without
/// caching (keys can come from requests, so the cache must not grow with them).
pub const MAX_CACHE_ENTRIES: usize = 256;

/// What a cached value is: a face's name for it and a parameter (a game name, a query).
pub type CacheKey = (&'static str, Box<str>);

type Slot = Arc<OnceLock<Arc<dyn Any + Send + Sync>>>;

/// Values derived from a snapshot's records, shared by snapshots with the same membership.
#[derive(Default)]
struct Derived {
    slots: Mutex<HashMap<CacheKey, Slot>>,
}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("Derived").field("entries", &n).finish()
    }
}

/// One immutable view of the listed records. See the module docs.
#[derive(Debug)]
pub struct Snapshot {
    version: u64,
    content_version: u64,
    built_at: Timestamp,
    listed: Arc<Vec<Arc<Record>>>,
    per_face: [usize; Face::ALL.len()],
    derived: Arc<Derived>,
    ddnet_lifetime: Duration,
    last_event_id: u64,
    /// Sort orders the publisher keeps (see [`orders`]).
    orders: HashMap<SortKey, Order>,
    wanted: Arc<Wanted>,
}

impl Snapshot {
    /// An empty snapshot (before the first build).
    #[must_use]
    pub fn empty() -> Self {
        Self {
            version: 0,
            content_version: 0,
            built_at: Timestamp::default(),
            listed: Arc::default(),
            per_face: [0; Face::ALL.len()],
            derived: Arc::default(),
            ddnet_lifetime: Duration::from_secs(30),
            last_event_id: 0,
            orders: HashMap::new(),
            wanted: Arc::default(),
        }
    }

    /// The last live event this snapshot shows (see [`crate::events`]).
    #[must_use]
    pub fn last_event_id(&self) -> u64 {
        self.last_event_id
    }

    /// This snapshot, marked as showing events up to `id`.
    #[must_use]
    pub fn with_last_event_id(mut self, id: u64) -> Self {
        self.last_event_id = id;
        self
    }

    /// The registry version it was built from.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The version of the last change to membership, order or listed fields: snapshots with
    /// the same content version share their derived values (heartbeat-only changes keep it),
    /// so anything built from one of them is current for all of them.
    #[must_use]
    pub fn content_version(&self) -> u64 {
        self.content_version
    }

    /// When it was built.
    #[must_use]
    pub fn built_at(&self) -> Timestamp {
        self.built_at
    }

    /// Every listed record, in the stable list order.
    #[must_use]
    pub fn listed(&self) -> &[Arc<Record>] {
        &self.listed
    }

    /// Listed records of `face`.
    #[must_use]
    pub fn count(&self, face: Face) -> usize {
        self.per_face.get(face.index()).copied().unwrap_or(0)
    }

    /// Listed records per face (all faces, zeros included).
    #[must_use]
    pub fn per_face(&self) -> BTreeMap<Face, usize> {
        Face::ALL.into_iter().map(|f| (f, self.count(f))).collect()
    }

    /// Records listed in total.
    #[must_use]
    pub fn len(&self) -> usize {
        self.listed.len()
    }

    /// Whether nothing is listed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    /// How long a DDNet stream stays in `servers.json` after its last POST.
    #[must_use]
    pub fn ddnet_lifetime(&self) -> Duration {
        self.ddnet_lifetime
    }

    /// The order of the listed records by `key` (ties in list order): the one the publisher
    /// keeps, or, for a column nobody asked for lately, sorted now (once per snapshot) and
    /// kept by the publisher from the next snapshot on.
    #[must_use]
    pub fn order(&self, key: SortKey) -> Order {
        if let Some(o) = self.orders.get(&key) {
            return Arc::clone(o);
        }
        if key != SortKey::Order {
            self.wanted.mark(key);
        }
        self.cached(("sort", key.name().into()), |s| {
            orders::full(s.listed(), key)
        })
    }

    /// The value cached under `key`, computed by `build` from this snapshot on first use.
    /// Concurrent readers of one key wait for one computation; other keys are not blocked.
    /// `build` must depend only on membership, order and listed fields of the records (a
    /// snapshot after heartbeat-only changes shares the cache).
    pub fn cached<T, F>(&self, key: CacheKey, build: F) -> Arc<T>
    where
        T: Send + Sync + 'static,
        F: FnOnce(&Self) -> T,
    {
        let slot = {
            let mut slots = self
                .derived
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match slots.get(&key) {
                Some(s) => Some(Arc::clone(s)),
                None if slots.len() < MAX_CACHE_ENTRIES => {
                    let s = Slot::default();
                    slots.insert(key, Arc::clone(&s));
                    Some(s)
                }
                None => None,
            }
        };
        let mut build = Some(build);
        let mut make = || build.take().map(|b| Arc::new(b(self)));
        let Some(slot) = slot else {
            return make().unwrap_or_else(|| unreachable_build());
        };
        let mut made: Option<Arc<T>> = None;
        let any = slot.get_or_init(|| {
            let v = make().unwrap_or_else(|| unreachable_build());
            made = Some(Arc::clone(&v));
            v as Arc<dyn Any + Send + Sync>
        });
        if let Some(v) = made {
            return v;
        }
        // The key names the type: a key is only ever filled by one call site, so this
        // downcast succeeds; if it did not, the value is computed without the cache.
        match Arc::clone(any).downcast::<T>() {
            Ok(v) => v,
            Err(_) => make().unwrap_or_else(|| unreachable_build()),
        }
    }

    /// Listed records registered under `addr` or whose game address is `addr` (any game, any
    /// instance), in list order.
    #[must_use]
    pub fn find_by_addr(&self, addr: &GameAddr) -> Vec<&Arc<Record>> {
        let index = self.cached(("by_addr", "".into()), |s| {
            let mut m: HashMap<GameAddr, Vec<u32>> = HashMap::new();
            for (i, r) in s.listed.iter().enumerate() {
                crate::bulk::pace(i);
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                m.entry(r.key.addr.clone()).or_default().push(i);
                if let Some(g) = r.game_addr().filter(|g| *g != r.key.addr) {
                    m.entry(g).or_default().push(i);
                }
            }
            m
        });
        index
            .get(addr)
            .map(|v| {
                v.iter()
                    .filter_map(|&i| self.listed.get(i as usize))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Only reached if a cache key were filled with two types and `build` already ran, which
/// the call sites rule out (each key has one call site).
#[cold]
fn unreachable_build<T>() -> Arc<T> {
    unreachable!("a snapshot cache value was built twice")
}

/// Builds snapshots from the view log: keeps the changes since the last build by list place
/// and merges them into the last build's listed records on demand (no second index of every
/// listed record: the last snapshot's vector is the mirror). Owned by one place (the handle),
/// fed only by the registry's [`Change`]s.
#[derive(Debug)]
pub struct Publisher {
    /// Since the last build, per list place: the record as it is now (`None`: not listed).
    pending: BTreeMap<OrderKey, Option<Arc<Record>>>,
    /// The version at which `derived` was made.
    content_version: u64,
    structural: bool,
    dirty: bool,
    derived: Arc<Derived>,
    ddnet_lifetime: Duration,
    version: u64,
    /// Ids of records changed since the last build.
    touched: HashSet<u64>,
    /// The listed records of the last build, in list order (what `orders` index).
    last_listed: Arc<Vec<Arc<Record>>>,
    /// Sort orders kept, and when each column was last asked for.
    orders: HashMap<SortKey, Order>,
    wanted_at: HashMap<SortKey, std::time::Instant>,
    wanted: Arc<Wanted>,
    /// When the last build was made.
    built: Option<std::time::Instant>,
}

/// Changes that only move times (a refresh, a heartbeat) wait at most this long for a build;
/// anything else is built at once. At 100k DDNet servers refreshing every 15 s, a build per
/// change batch would merge the whole list 20 times a second to move a few hundred times.
pub const TIMES_INTERVAL: Duration = Duration::from_secs(1);

impl Publisher {
    /// A publisher of an empty list.
    #[must_use]
    pub fn new(ddnet_lifetime: Duration) -> Self {
        Self {
            pending: BTreeMap::new(),
            content_version: 0,
            structural: true,
            dirty: true,
            derived: Arc::default(),
            ddnet_lifetime,
            version: 0,
            touched: HashSet::new(),
            last_listed: Arc::default(),
            orders: HashMap::new(),
            wanted_at: HashMap::new(),
            wanted: Arc::default(),
            built: None,
        }
    }

    /// Applies the view log (in order) up to registry version `version`. Returns what changed
    /// for the API's eyes, one [`Delta`] per record whatever happened to it in between: added
    /// (listed now, not before), removed (listed before, not now) or changed (listed before and
    /// after, and a change touched what lists show).
    pub fn apply(&mut self, changes: Vec<Change>, version: u64) -> Vec<Delta> {
        self.version = version;
        // Per record: whether it was listed before this batch (and as what), whether a
        // structural change touched it, in first-change order.
        let mut seen: HashMap<u64, usize> = HashMap::new();
        let mut touched: Vec<(OrderKey, Option<Arc<Record>>, bool)> = Vec::new();
        for c in changes {
            self.dirty = true;
            self.structural |= c.structural;
            self.touched.insert(c.id);
            // A record's place in the list never changes (first registration, id).
            let before = self.listed_at(&c.order);
            match seen.get(&c.id) {
                Some(&i) => {
                    if let Some(t) = touched.get_mut(i) {
                        t.2 |= c.structural;
                    }
                }
                None => {
                    seen.insert(c.id, touched.len());
                    touched.push((c.order, before, c.structural));
                }
            }
            let now = c.record.filter(|r| r.is_listed());
            self.pending.insert(c.order, now);
        }
        touched
            .into_iter()
            .filter_map(|(order, before, structural)| {
                let now = self.listed_at(&order);
                match (before, now) {
                    (None, Some(now)) => Some(Delta {
                        kind: EventKind::Added,
                        record: now,
                    }),
                    (Some(before), None) => Some(Delta {
                        kind: EventKind::Removed,
                        record: before,
                    }),
                    (Some(_), Some(now)) if structural => Some(Delta {
                        kind: EventKind::Changed,
                        record: now,
                    }),
                    _ => None,
                }
            })
            .collect()
    }

    /// The record listed at `order` now: the pending change there, else the last build's.
    fn listed_at(&self, order: &OrderKey) -> Option<Arc<Record>> {
        if let Some(now) = self.pending.get(order) {
            return now.clone();
        }
        let i = self
            .last_listed
            .binary_search_by(|r| r.order_key().cmp(order))
            .ok()?;
        self.last_listed.get(i).cloned()
    }

    /// The last build's listed records with the pending changes merged in, in list order:
    /// `O(n + k)` for `k` changes (they come sorted).
    fn merged(&mut self) -> Vec<Arc<Record>> {
        let pending = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(self.last_listed.len() + pending.len());
        let mut changes = pending.into_iter().peekable();
        for (i, r) in self.last_listed.iter().enumerate() {
            crate::bulk::pace(i);
            let key = r.order_key();
            while let Some((_, now)) = changes.next_if(|(k, _)| *k < key) {
                out.extend(now);
            }
            match changes.next_if(|(k, _)| *k == key) {
                Some((_, now)) => out.extend(now),
                None => out.push(Arc::clone(r)),
            }
        }
        out.extend(changes.filter_map(|(_, now)| now));
        out
    }

    /// Whether anything changed since the last build.
    #[must_use]
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// How long the changes applied since the last build may still wait for one at `now`
    /// (zero: build now). Only changes that moved nothing but times wait, until
    /// [`TIMES_INTERVAL`] after the last build; a change that adds, removes or alters what a
    /// list shows never waits (nor do the events it makes, which are emitted with a build).
    #[must_use]
    pub fn wait_before_build(&self, now: std::time::Instant) -> Duration {
        match self.built {
            Some(at) if !self.structural => {
                TIMES_INTERVAL.saturating_sub(now.saturating_duration_since(at))
            }
            _ => Duration::ZERO,
        }
    }

    /// A snapshot of the listed records as they are now.
    pub fn build(&mut self, now: Timestamp) -> Snapshot {
        self.build_at(now, std::time::Instant::now())
    }

    /// [`Publisher::build`] at monotonic time `at` (the clock [`Publisher::wait_before_build`]
    /// reads).
    fn build_at(&mut self, now: Timestamp, at: std::time::Instant) -> Snapshot {
        self.built = Some(at);
        let structural = self.structural;
        if structural {
            self.derived = Arc::default();
            self.content_version = self.version;
        }
        self.structural = false;
        self.dirty = false;
        let listed: Arc<Vec<Arc<Record>>> = Arc::new(self.merged());
        let mut per_face = [0; Face::ALL.len()];
        for (i, r) in listed.iter().enumerate() {
            crate::bulk::pace(i);
            if let Some(n) = per_face.get_mut(r.face.index()) {
                *n += 1;
            }
        }
        self.update_orders(&listed, structural);
        Snapshot {
            version: self.version,
            content_version: self.content_version,
            built_at: now,
            listed,
            per_face,
            derived: Arc::clone(&self.derived),
            ddnet_lifetime: self.ddnet_lifetime,
            last_event_id: 0,
            orders: self.orders.clone(),
            wanted: Arc::clone(&self.wanted),
        }
    }

    /// Carries the wanted sort orders over to `listed` (see [`orders`]).
    fn update_orders(&mut self, listed: &Arc<Vec<Arc<Record>>>, structural: bool) {
        let t = std::time::Instant::now();
        for k in self.wanted.take() {
            self.wanted_at.insert(k, t);
        }
        self.wanted_at
            .retain(|_, at| t.saturating_duration_since(*at) < orders::WANTED_FOR);
        let wanted_at = &self.wanted_at;
        self.orders.retain(|k, _| wanted_at.contains_key(k));
        let touched = std::mem::take(&mut self.touched);
        for (key, order) in &mut self.orders {
            // Without a structural change only times changed: only the last-seen order moves.
            if !touched.is_empty() && (structural || *key == SortKey::LastSeen) {
                *order = Arc::new(orders::patch(
                    &self.last_listed,
                    order,
                    listed,
                    &touched,
                    *key,
                ));
            }
        }
        for key in self.wanted_at.keys() {
            if !self.orders.contains_key(key) {
                self.orders
                    .insert(*key, Arc::new(orders::full(listed, *key)));
            }
        }
        self.last_listed = Arc::clone(listed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Registration, Registry, RegistryConfig, ServerKey};
    use muster_proto::limit::SourceKey;
    use std::net::SocketAddr;

    const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

    fn reg(port: u16) -> Registration {
        let addr: SocketAddr = format!("192.0.2.1:{port}").parse().unwrap();
        Registration {
            key: ServerKey::new("ut2", GameAddr::Ip(addr)),
            face: Face::GameSpy,
            game_port: None,
            query_addr: Some(addr),
            query_protocol: Some(muster_proto::Protocol::GameSpy1),
            source: SourceKey::of(addr.ip()),
        }
    }

    fn publish(r: &mut Registry, p: &mut Publisher) -> Snapshot {
        let v = r.version();
        p.apply(r.take_changes(), v);
        p.build(T0)
    }

    fn ports(s: &Snapshot) -> Vec<u16> {
        s.listed().iter().map(|r| r.key.addr.port()).collect()
    }

    #[test]
    fn snapshots_follow_the_registry_in_list_order() {
        let mut r = Registry::new(RegistryConfig::default());
        let mut p = Publisher::new(Duration::from_secs(30));
        r.register(reg(3), T0.plus(Duration::from_secs(2)));
        r.register(reg(1), T0);
        r.register(reg(2), T0.plus(Duration::from_secs(1)));
        let s = publish(&mut r, &mut p);
        assert_eq!(ports(&s), [1, 2, 3]);
        assert_eq!(s.count(Face::GameSpy), 3);
        r.delist(&reg(2).key);
        let s = publish(&mut r, &mut p);
        assert_eq!(ports(&s), [1, 3], "a de-listed record leaves every list");
        r.verify(&reg(2).key, T0.plus(Duration::from_secs(9)));
        r.remove(&reg(1).key);
        let s = publish(&mut r, &mut p);
        assert_eq!(ports(&s), [2, 3], "re-verified keeps its place");
    }

    #[test]
    fn heartbeat_only_changes_keep_the_cache() {
        let mut r = Registry::new(RegistryConfig::default());
        let mut p = Publisher::new(Duration::from_secs(30));
        r.register(reg(1), T0);
        let s1 = publish(&mut r, &mut p);
        let a = s1.cached(("t", "".into()), |s| s.len());
        r.heartbeat(&reg(1).key, T0.plus(Duration::from_secs(5)));
        let s2 = publish(&mut r, &mut p);
        let b = s2.cached(("t", "".into()), |_| 99usize);
        assert!(Arc::ptr_eq(&a, &b), "same membership, same cache");
        assert!(s2.version() > s1.version());
        assert_eq!(
            s2.content_version(),
            s1.content_version(),
            "what was built from the first is current for the second"
        );
        assert_eq!(
            s2.listed()[0].last_heartbeat,
            T0.plus(Duration::from_secs(5))
        );
        r.register(reg(2), T0);
        let s3 = publish(&mut r, &mut p);
        assert_eq!(*s3.cached(("t", "".into()), |s| s.len()), 2);
        assert_eq!(
            s3.content_version(),
            s3.version(),
            "a new member: new content"
        );
    }

    #[test]
    fn changes_of_times_only_wait_for_a_build_and_others_do_not() {
        let mut r = Registry::new(RegistryConfig::default());
        let mut p = Publisher::new(Duration::from_secs(30));
        let t0 = std::time::Instant::now();
        let later = |ms: u64| t0 + Duration::from_millis(ms);
        r.register(reg(1), T0);
        r.register(reg(2), T0);
        let v = r.version();
        p.apply(r.take_changes(), v);
        assert_eq!(
            p.wait_before_build(t0),
            Duration::ZERO,
            "never built: build now"
        );
        p.build_at(T0, t0);
        r.heartbeat(&reg(1).key, T0.plus(Duration::from_secs(5)));
        let v = r.version();
        assert!(p.apply(r.take_changes(), v).is_empty());
        assert!(p.is_dirty());
        assert_eq!(p.wait_before_build(later(300)), Duration::from_millis(700));
        assert_eq!(p.wait_before_build(later(1_000)), Duration::ZERO);
        // A built snapshot after the wait shows the new time.
        let s = p.build_at(T0, later(1_000));
        let first = s.listed().iter().find(|x| x.key == reg(1).key).unwrap();
        assert_eq!(first.last_heartbeat, T0.plus(Duration::from_secs(5)));
        // A de-listing is built at once, with the times pending beside it.
        r.heartbeat(&reg(2).key, T0.plus(Duration::from_secs(6)));
        r.delist(&reg(1).key);
        let v = r.version();
        p.apply(r.take_changes(), v);
        assert_eq!(p.wait_before_build(later(1_001)), Duration::ZERO);
        let s = p.build_at(T0, later(1_001));
        assert_eq!(ports(&s), [2]);
        assert_eq!(
            s.listed()[0].last_heartbeat,
            T0.plus(Duration::from_secs(6))
        );
    }

    #[test]
    fn cache_is_bounded() {
        let s = Snapshot::empty();
        for i in 0..MAX_CACHE_ENTRIES + 10 {
            let v = s.cached(("t", i.to_string().into()), |_| i);
            assert_eq!(*v, i);
        }
        assert_eq!(
            s.derived.slots.lock().unwrap().len(),
            MAX_CACHE_ENTRIES,
            "keys past the cap are computed, not kept"
        );
    }

    #[test]
    fn find_by_addr_matches_key_and_game_address() {
        let mut r = Registry::new(RegistryConfig::default());
        let mut p = Publisher::new(Duration::from_secs(30));
        r.register(reg(7778), T0);
        let k = reg(7778).key;
        let info = crate::registry::PollInfo::from(crate::registry::PollFields {
            game_port: Some(7777),
            ..crate::registry::PollFields::default()
        });
        r.update_poll(&k, Some(info), T0);
        let s = publish(&mut r, &mut p);
        let by_key = GameAddr::parse("192.0.2.1:7778").unwrap();
        let by_game = GameAddr::parse("192.0.2.1:7777").unwrap();
        assert_eq!(s.find_by_addr(&by_key).len(), 1);
        assert_eq!(s.find_by_addr(&by_game).len(), 1);
        assert!(
            s.find_by_addr(&GameAddr::parse("192.0.2.1:1").unwrap())
                .is_empty()
        );
    }
}
