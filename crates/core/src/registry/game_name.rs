//! [`GameName`]: a key's game name, one shared copy per distinct name.
//!
//! Every record of a game carries the same name, and a registry holds thousands of records of
//! a handful of games. A name kept inline (24 bytes) put a record one allocator size class
//! higher than it needs; here a key holds one pointer (8 bytes) to a name kept once in a
//! process-wide [`TextSet`]. Names come from the wire, so the set forgets the ones no key
//! holds any more: when it has doubled since it last looked, it drops every name only it
//! still holds. A poll info's map, game type and rules are shared through a set of the same
//! kind.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::thread::LocalKey;

/// A game name as a [`super::ServerKey`] holds it: compared, hashed and ordered as its text;
/// cloning it copies a pointer.
#[derive(Clone)]
pub struct GameName(Arc<Box<str>>);

const _: () = assert!(size_of::<GameName>() == 8);

/// One entry of the set, found by its text.
struct Entry(Arc<Box<str>>);

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        **self.0 == **other.0
    }
}

impl Eq for Entry {}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self.0).hash(state);
    }
}

/// The texts in use, and the size at which the set next drops the unused ones.
struct Names {
    set: HashSet<Entry>,
    sweep_at: usize,
}

/// The set stays at least this large before it looks for unused texts.
const SWEEP_MIN: usize = 64;

/// A process-wide set of shared texts that come from the wire: one copy per distinct text,
/// and when the set has doubled since it last looked, it drops every text only it still
/// holds, so texts from forged packets do not pile up. Each thread remembers the text it
/// shared last (in the thread-local the set is made with): a face registering servers of one
/// game or kind finds it there without taking the set's lock.
pub(super) struct TextSet {
    names: LazyLock<Mutex<Names>>,
    last: &'static LocalKey<LastShared>,
}

/// The text a thread shared last from one [`TextSet`].
pub(super) type LastShared = RefCell<Option<Arc<Box<str>>>>;

impl TextSet {
    /// An empty set (made on first use), remembering each thread's last text in `last`.
    pub(super) const fn new(last: &'static LocalKey<LastShared>) -> Self {
        Self {
            names: LazyLock::new(|| {
                Mutex::new(Names {
                    set: HashSet::new(),
                    sweep_at: SWEEP_MIN,
                })
            }),
            last,
        }
    }

    /// The shared copy of `text`.
    pub(super) fn share(&self, text: &str) -> Arc<Box<str>> {
        let cached = self.last.with(|l| {
            l.borrow()
                .as_ref()
                .filter(|t| t.as_ref().as_ref() == text)
                .cloned()
        });
        if let Some(t) = cached {
            return t;
        }
        let shared = self.share_locked(text);
        self.last
            .with(|l| *l.borrow_mut() = Some(Arc::clone(&shared)));
        shared
    }

    /// [`TextSet::share`] under the set's lock.
    fn share_locked(&self, text: &str) -> Arc<Box<str>> {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = names.set.get(text) {
            return Arc::clone(&e.0);
        }
        if names.set.len() >= names.sweep_at {
            // Only the set holds such a text; a holder being made elsewhere holds its own
            // reference, and nobody can take a new one without the lock.
            names.set.retain(|e| Arc::strong_count(&e.0) > 1);
            names.sweep_at = (names.set.len() * 2).max(SWEEP_MIN);
        }
        let shared = Arc::new(Box::<str>::from(text));
        names.set.insert(Entry(Arc::clone(&shared)));
        shared
    }

    /// How many texts it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set
            .len()
    }
}

std::thread_local! {
    static LAST_NAME: LastShared = const { RefCell::new(None) };
}

/// The game names in use.
static NAMES: TextSet = TextSet::new(&LAST_NAME);

impl GameName {
    /// The shared copy of `name` (as given: [`super::ServerKey::new`] lower-cases first).
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self(NAMES.share(name))
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
fn names_held() -> usize {
    NAMES.len()
}

impl Default for GameName {
    fn default() -> Self {
        Self::new("")
    }
}

impl Deref for GameName {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for GameName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for GameName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for GameName {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<&String> for GameName {
    fn from(name: &String) -> Self {
        Self::new(name)
    }
}

impl From<String> for GameName {
    fn from(name: String) -> Self {
        Self::new(&name)
    }
}

impl PartialEq for GameName {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

impl Eq for GameName {}

impl PartialEq<str> for GameName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for GameName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for GameName {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<GameName> for &str {
    fn eq(&self, other: &GameName) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<GameName> for String {
    fn eq(&self, other: &GameName) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<GameName> for str {
    fn eq(&self, other: &GameName) -> bool {
        self == other.as_str()
    }
}

impl Hash for GameName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for GameName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GameName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Display for GameName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for GameName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_name_and_text_semantics() {
        let a = GameName::new("quake3-shared-test");
        let b = GameName::new(&String::from("quake3-shared-test"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, b);
        assert_eq!(a, "quake3-shared-test");
        assert_eq!(
            format!("{a} {a:?}"),
            "quake3-shared-test \"quake3-shared-test\""
        );
        let c = GameName::new("quake3-shared-tesu");
        assert!(a < c);
        assert_ne!(a, c);
        let hash = |x: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            x(&mut h);
            h.finish()
        };
        assert_eq!(
            hash(&|h| a.hash(h)),
            hash(&|h| "quake3-shared-test".hash(h))
        );
    }

    #[test]
    fn names_no_key_holds_are_forgotten() {
        // Many names made and dropped (as forged heartbeats would): the set does not keep
        // them all, while a name still held survives every sweep.
        let kept = GameName::new("kept-while-held");
        for i in 0..10_000 {
            drop(GameName::new(&format!("forged-{i}")));
        }
        // Other tests of this binary may hold a few names at once; far below 10,000.
        assert!(names_held() < 2_000, "{} names held", names_held());
        assert_eq!(GameName::new("kept-while-held"), kept);
        assert!(Arc::ptr_eq(&GameName::new("kept-while-held").0, &kept.0));
    }
}
