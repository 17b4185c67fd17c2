//! The DDNet infos the registry holds, kept out of the heap.
//!
//! A DDNet server registers its info object (about 1 KB of JSON, up to [`MAX_DDNET_INFO`]),
//! and the master only ever copies it out whole: into `servers.json`, into a store row, to
//! another instance. So the registry keeps each info it owns in an [`InfoFile`], an
//! append-only file whose pages sit in the page cache (an unnamed file in the data
//! directory, as [`crate::memfile`] makes them), and the record holds a
//! [`DdnetInfo`]: the file and a slot number, 16 bytes. The info's bytes are then counted in
//! no resident set, and under memory pressure the kernel can write them back and evict them.
//!
//! - **Slots.** A slot is an offset, a length and a count of the [`DdnetInfo`]s holding it,
//!   in the file's table (one entry of 16 bytes per info, not a shared allocation each).
//!   Cloning an info counts one more holder under the file's lock; when the last one is
//!   dropped (the last record and snapshot that held it let go), the slot is freed and its
//!   bytes are dead.
//! - **Compaction.** When the dead bytes are more than the live ones (and more than
//!   [`COMPACT_MIN_DEAD`]), a thread copies the live infos into a new file and moves the
//!   slots there. It holds the file's lock for at most [`COMPACT_STEP`] bytes of copying at a
//!   time, and once at the end to move the slots and copy what was added meanwhile, so no
//!   reader or registration waits for a whole copy. A slot that changed meanwhile keeps its
//!   place: the registry never rewrites a slot, it frees it and takes a new one at the end.
//! - **Locks.** The file's mutex is a leaf: nothing else is locked while it is held. It is
//!   taken under the registry's write lock (keeping a new info), by whoever clones or drops
//!   an info, and by whoever asks its length; readers take it only to look a slot up and read
//!   at the offset after letting go (the bytes below the file's end never change, and a
//!   replaced file stays open while a reader holds it).
//! - **Fallbacks.** No unnamed file in the directory: an anonymous memory file; none of
//!   those either, or a write that fails (a full disk): the info stays in the heap
//!   ([`DdnetInfo`] holds it itself), and the cause is logged once.
//!
//! [`MAX_DDNET_INFO`]: super::MAX_DDNET_INFO

use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::memfile;

/// Dead bytes below which the file is never compacted (however few are live).
pub const COMPACT_MIN_DEAD: u64 = 4 << 20;

/// Bytes a compaction copies per hold of the file's lock.
pub const COMPACT_STEP: u64 = 256 << 10;

/// One DDNet info object: in an [`InfoFile`] (the registry's), or in memory (as made from a
/// POST, a store row or another instance, before the registry takes it; or when the file
/// could not take it). Clones share it; equal when the bytes are.
#[derive(Clone)]
pub struct DdnetInfo(Repr);

#[derive(Clone)]
enum Repr {
    /// Boxed, so that an info is 16 bytes (a `Bytes` is 32): the heap form is the rare one,
    /// and every DDNet record holds an info.
    Heap(Box<Bytes>),
    Kept(Kept),
}

const _: () = assert!(size_of::<DdnetInfo>() == 16);

/// One holder of a slot of an [`InfoFile`]: a clone is one more holder, a drop one fewer.
struct Kept {
    file: Arc<InfoFile>,
    slot: u32,
    /// Always [`Held::Yes`]: its other byte values are free for the enum's tag, so that
    /// [`Repr`] stays 16 bytes.
    _held: Held,
}

#[derive(Clone, Copy)]
#[repr(u8)]
enum Held {
    Yes = 1,
}

impl Kept {
    fn new(file: Arc<InfoFile>, slot: u32) -> Self {
        Self {
            file,
            slot,
            _held: Held::Yes,
        }
    }

    fn len(&self) -> u32 {
        self.file.slot(self.slot).map_or(0, |s| s.len)
    }
}

impl Clone for Kept {
    fn clone(&self) -> Self {
        self.file.retain(self.slot);
        Self::new(Arc::clone(&self.file), self.slot)
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.file.release(self.slot);
    }
}

impl DdnetInfo {
    /// The info's length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Heap(b) => b.len(),
            Repr::Kept(k) => k.len() as usize,
        }
    }

    /// Whether it is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an [`InfoFile`] holds the bytes (not this value itself).
    #[must_use]
    pub fn is_kept(&self) -> bool {
        matches!(self.0, Repr::Kept(_))
    }

    /// The bytes: shared when in memory, else read from the file (a copy). An error is the
    /// file's read error, which the caller reports.
    pub fn bytes(&self) -> io::Result<Bytes> {
        match &self.0 {
            Repr::Heap(b) => Ok(Bytes::clone(b)),
            Repr::Kept(k) => k.file.read(k.slot).map(Bytes::from),
        }
    }

    /// Whether both are the same stored info (one slot, or one buffer), without reading.
    #[must_use]
    pub fn same_as(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // A slot is freed only when its last holder lets go: two holders of one slot of
            // one file hold one info.
            (Repr::Kept(a), Repr::Kept(b)) => Arc::ptr_eq(&a.file, &b.file) && a.slot == b.slot,
            (Repr::Heap(a), Repr::Heap(b)) => a.as_ptr() == b.as_ptr() && a.len() == b.len(),
            _ => false,
        }
    }
}

impl From<Bytes> for DdnetInfo {
    fn from(b: Bytes) -> Self {
        Self(Repr::Heap(Box::new(b)))
    }
}

impl From<&'static [u8]> for DdnetInfo {
    fn from(b: &'static [u8]) -> Self {
        Self(Repr::Heap(Box::new(Bytes::from_static(b))))
    }
}

impl PartialEq for DdnetInfo {
    /// The same slot, or the same bytes (an unreadable info equals only its own slot).
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
            || (self.len() == other.len()
                && matches!((self.bytes(), other.bytes()), (Ok(a), Ok(b)) if a == b))
    }
}

impl Eq for DdnetInfo {}

impl std::fmt::Debug for DdnetInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Heap(b) => f.debug_tuple("DdnetInfo").field(b).finish(),
            Repr::Kept(k) => write!(f, "DdnetInfo(slot {}, {} bytes)", k.slot, k.len()),
        }
    }
}

/// Where the infos' bytes are.
enum Place {
    File(Arc<std::fs::File>),
    Memory(Vec<u8>),
}

impl Place {
    /// An unnamed file in `dir`, else a memory file, else memory.
    fn new(dir: Option<&Path>) -> Self {
        let file = dir
            .map(memfile::unnamed)
            .and_then(|f| {
                f.inspect_err(|e| {
                    tracing::debug!(error = %e, "no unnamed file for the DDNet infos");
                })
                .ok()
            })
            .map_or_else(|| memfile::memfd("ddnet-infos"), Ok);
        match file {
            Ok(fd) => Self::File(Arc::new(std::fs::File::from(fd))),
            Err(e) => {
                tracing::debug!(error = %e, "no memory file; the DDNet infos stay in memory");
                Self::Memory(Vec::new())
            }
        }
    }

    fn write_at(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
        match self {
            Self::File(f) => f.write_all_at(bytes, at),
            Self::Memory(v) => {
                let at = usize::try_from(at).map_err(io::Error::other)?;
                v.truncate(at);
                v.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match self {
            Self::File(f) => f.read_exact_at(buf, at),
            Self::Memory(v) => {
                let from = usize::try_from(at).map_err(io::Error::other)?;
                let part = from
                    .checked_add(buf.len())
                    .and_then(|to| v.get(from..to))
                    .ok_or(io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(part);
                Ok(())
            }
        }
    }
}

/// A slot's place and its holders; `FREE`: no info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    off: u64,
    len: u32,
    /// The [`DdnetInfo`]s holding it.
    holders: u32,
}

const _: () = assert!(size_of::<Slot>() == 16);

impl Slot {
    const FREE: Self = Self {
        off: u64::MAX,
        len: 0,
        holders: 0,
    };

    const fn is_free(self) -> bool {
        self.off == u64::MAX
    }
}

struct Inner {
    place: Place,
    /// Where the next info goes.
    end: u64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Bytes of the infos in use.
    live: u64,
    /// Whether a write error was logged (once per file).
    warned: bool,
}

/// The file the registry keeps its DDNet infos in. See the module docs.
pub struct InfoFile {
    dir: Option<PathBuf>,
    inner: Mutex<Inner>,
    compacting: AtomicBool,
    /// Compactions finished.
    compactions: AtomicU64,
    /// Whether compaction starts on its own thread when due (off in tests that drive it).
    auto_compact: bool,
}

impl std::fmt::Debug for InfoFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct("InfoFile")
            .field("dir", &self.dir)
            .field("live", &s.live)
            .field("end", &s.end)
            .finish_non_exhaustive()
    }
}

/// What an [`InfoFile`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfoStats {
    /// Infos in it.
    pub infos: usize,
    /// Their bytes.
    pub live: u64,
    /// The file's length (live and dead bytes).
    pub end: u64,
    /// Whether the bytes are in a file (not in memory).
    pub in_file: bool,
    /// Compactions finished since the file was made.
    pub compactions: u64,
}

impl InfoFile {
    /// A new, empty file in `dir` (see the module docs for the fallbacks).
    #[must_use]
    pub fn new(dir: Option<&Path>) -> Arc<Self> {
        Self::with(dir, true)
    }

    fn with(dir: Option<&Path>, auto_compact: bool) -> Arc<Self> {
        Arc::new(Self {
            dir: dir.map(Path::to_path_buf),
            inner: Mutex::new(Inner {
                place: Place::new(dir),
                end: 0,
                slots: Vec::new(),
                free: Vec::new(),
                live: 0,
                warned: false,
            }),
            compacting: AtomicBool::new(false),
            compactions: AtomicU64::new(0),
            auto_compact,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What it holds.
    #[must_use]
    pub fn stats(&self) -> InfoStats {
        let g = self.lock();
        InfoStats {
            infos: g.slots.len() - g.free.len(),
            live: g.live,
            end: g.end,
            in_file: matches!(g.place, Place::File(_)),
            compactions: self.compactions.load(Ordering::Relaxed),
        }
    }

    /// `info` kept in this file: the same info when it is in it already, else its bytes
    /// written at the end. When the write fails the info stays where it is (logged once).
    pub fn keep(self: &Arc<Self>, info: &DdnetInfo) -> DdnetInfo {
        if let Repr::Kept(k) = &info.0
            && Arc::ptr_eq(&k.file, self)
        {
            return info.clone();
        }
        let (Ok(bytes), Ok(len)) = (info.bytes(), u32::try_from(info.len())) else {
            return info.clone();
        };
        let (kept, due) = {
            let mut g = self.lock();
            let at = g.end;
            if let Err(e) = g.place.write_at(&bytes, at) {
                if !std::mem::replace(&mut g.warned, true) {
                    tracing::warn!(
                        dir = ?self.dir,
                        error = %e,
                        "cannot write to the DDNet info file; infos stay in memory"
                    );
                }
                return DdnetInfo(Repr::Heap(Box::new(bytes)));
            }
            g.end += u64::from(len);
            g.live += u64::from(len);
            let slot = Slot {
                off: at,
                len,
                holders: 1,
            };
            let n = match g.free.pop() {
                Some(n) => {
                    if let Some(s) = g.slots.get_mut(n as usize) {
                        *s = slot;
                    }
                    n
                }
                None => {
                    let n = u32::try_from(g.slots.len()).unwrap_or(u32::MAX);
                    g.slots.push(slot);
                    n
                }
            };
            let kept = DdnetInfo(Repr::Kept(Kept::new(Arc::clone(self), n)));
            (kept, compaction_due(&g))
        };
        if due && self.auto_compact && !self.compacting.swap(true, Ordering::AcqRel) {
            let me = Arc::clone(self);
            let started = std::thread::Builder::new()
                .name("muster-infos".into())
                .spawn(move || {
                    me.compact_now();
                    me.compacting.store(false, Ordering::Release);
                });
            if started.is_err() {
                self.compacting.store(false, Ordering::Release);
            }
        }
        kept
    }

    /// Slot `slot` while it holds an info.
    fn slot(&self, slot: u32) -> Option<Slot> {
        self.lock()
            .slots
            .get(slot as usize)
            .copied()
            .filter(|s| !s.is_free())
    }

    /// One more holder of `slot`.
    fn retain(&self, slot: u32) {
        if let Some(s) = self.lock().slots.get_mut(slot as usize)
            && !s.is_free()
        {
            s.holders = s.holders.saturating_add(1);
        }
    }

    /// One holder fewer of `slot`; the last one frees it.
    fn release(&self, slot: u32) {
        let mut g = self.lock();
        let Some(s) = g.slots.get_mut(slot as usize).filter(|s| !s.is_free()) else {
            return;
        };
        s.holders = s.holders.saturating_sub(1);
        if s.holders > 0 {
            return;
        }
        let len = s.len;
        *s = Slot::FREE;
        g.free.push(slot);
        g.live = g.live.saturating_sub(u64::from(len));
    }

    fn read(&self, slot: u32) -> io::Result<Vec<u8>> {
        let g = self.lock();
        let s = g
            .slots
            .get(slot as usize)
            .copied()
            .filter(|s| !s.is_free())
            .ok_or_else(|| io::Error::other("DDNet info slot is not in use"))?;
        let mut buf = vec![0; s.len as usize];
        match &g.place {
            Place::File(f) => {
                // Read after letting go: the bytes at `s.off` never change, and the file
                // stays open while this holds it.
                let f = Arc::clone(f);
                drop(g);
                f.read_exact_at(&mut buf, s.off)?;
            }
            Place::Memory(_) => g.place.read_at(&mut buf, s.off)?,
        }
        Ok(buf)
    }

    /// Copies the live infos into a new file and moves their slots there (see the module
    /// docs). Runs on the thread that calls it, one at a time: [`InfoFile::keep`] starts it
    /// behind the `compacting` flag (tests call it directly). A failure leaves everything as
    /// it was.
    fn compact_now(&self) {
        match self.compact() {
            Ok(()) => {
                self.compactions.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(dir = ?self.dir, error = %e, "compacting the DDNet info file failed");
            }
        }
    }

    fn compact(&self) -> io::Result<()> {
        let mut new = Place::new(self.dir.as_deref());
        let mut new_end = 0u64;
        // (slot, its old offset, its new one)
        let mut moved: Vec<(u32, u64, u64)> = Vec::new();
        let (start_end, slots) = {
            let g = self.lock();
            (g.end, g.slots.len())
        };
        let mut buf = Vec::new();
        let mut next = 0usize;
        while next < slots {
            let g = self.lock();
            let mut copied = 0u64;
            while next < slots && copied < COMPACT_STEP {
                if let Some(s) = g.slots.get(next).copied()
                    && !s.is_free()
                    && s.off < start_end
                {
                    buf.resize(s.len as usize, 0);
                    g.place.read_at(&mut buf, s.off)?;
                    new.write_at(&buf, new_end)?;
                    moved.push((u32::try_from(next).unwrap_or(u32::MAX), s.off, new_end));
                    new_end += u64::from(s.len);
                    copied += u64::from(s.len);
                }
                next += 1;
            }
        }
        let mut g = self.lock();
        let mut live = 0u64;
        for (n, old, at) in moved {
            if let Some(s) = g.slots.get_mut(n as usize)
                && !s.is_free()
                && s.off == old
            {
                s.off = at;
                live += u64::from(s.len);
            }
        }
        // Added while copying: appended at or after `start_end`, so not moved above.
        let mut tail = Vec::new();
        for (n, s) in g.slots.iter().enumerate() {
            if !s.is_free() && s.off >= start_end {
                tail.push((n, *s));
            }
        }
        for (n, s) in tail {
            buf.resize(s.len as usize, 0);
            g.place.read_at(&mut buf, s.off)?;
            new.write_at(&buf, new_end)?;
            if let Some(slot) = g.slots.get_mut(n) {
                slot.off = new_end;
            }
            new_end += u64::from(s.len);
            live += u64::from(s.len);
        }
        g.place = new;
        g.end = new_end;
        g.live = live;
        Ok(())
    }
}

/// Whether the dead bytes call for a compaction.
fn compaction_due(g: &Inner) -> bool {
    let dead = g.end - g.live;
    dead > COMPACT_MIN_DEAD && dead > g.live
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(i: u32, len: usize) -> DdnetInfo {
        let mut v = format!("{{\"n\":{i},\"pad\":\"").into_bytes();
        v.resize(len.saturating_sub(2), b'x');
        v.extend_from_slice(b"\"}");
        DdnetInfo::from(Bytes::from(v))
    }

    #[test]
    fn an_info_kept_reads_back_and_frees_its_slot_when_dropped() {
        let dir = crate::testdir::TempDir::new("infos");
        std::fs::create_dir_all(&dir.0).unwrap();
        let f = InfoFile::with(Some(&dir.0), false);
        let a = info(1, 1000);
        let kept = f.keep(&a);
        assert!(kept.is_kept());
        assert_eq!(kept, a);
        assert_eq!(kept.bytes().unwrap(), a.bytes().unwrap());
        // Keeping it again is the same slot.
        let again = f.keep(&kept);
        assert_eq!(f.stats().infos, 1);
        drop(kept);
        assert_eq!(f.stats().infos, 1, "a clone still holds it");
        drop(again);
        let s = f.stats();
        assert_eq!((s.infos, s.live, s.end), (0, 0, 1000));
        assert!(s.in_file);
        // The slot is used again; the bytes go at the end.
        let b = f.keep(&info(2, 10));
        assert_eq!(f.stats().end, 1010);
        assert_eq!(b, info(2, 10));
        // Nothing in the directory: the file is unnamed.
        assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
    }

    #[test]
    fn without_a_directory_the_infos_go_to_a_memory_file() {
        let f = InfoFile::with(None, false);
        let k = f.keep(&info(1, 50));
        assert!(k.is_kept());
        assert!(f.stats().in_file, "memfd_create works on Linux");
        assert_eq!(k, info(1, 50));
    }

    #[test]
    fn compaction_keeps_every_live_info_and_drops_the_dead_bytes() {
        for place in [true, false] {
            let f = InfoFile::with(None, false);
            if !place {
                f.lock().place = Place::Memory(Vec::new());
            }
            let mut kept: Vec<(u32, DdnetInfo)> = (0..3000)
                .map(|i| (i, f.keep(&info(i, 900 + (i as usize % 200)))))
                .collect();
            // Two in three go.
            kept.retain(|(i, _)| i % 3 == 0);
            let before = f.stats();
            assert!(before.end > before.live * 2);
            f.compact_now();
            let after = f.stats();
            assert_eq!(after.compactions, 1);
            assert_eq!(after.live, before.live);
            assert_eq!(after.end, after.live, "nothing dead is left");
            assert_eq!(after.infos, 1000);
            for (i, k) in &kept {
                assert_eq!(*k, info(*i, 900 + (*i as usize % 200)), "info {i}");
            }
            // Keeping goes on after the moved ones.
            let n = f.keep(&info(9, 77));
            assert_eq!(n, info(9, 77));
            assert_eq!(f.stats().end, after.end + 77);
        }
    }

    #[test]
    fn compaction_is_due_when_dead_bytes_pass_the_live_ones_and_the_floor() {
        let f = InfoFile::with(None, false);
        let keep: Vec<DdnetInfo> = (0..2000).map(|i| f.keep(&info(i, 1000))).collect();
        assert!(!compaction_due(&f.lock()));
        // 4 MB dead with 2 MB live: due.
        let churn: Vec<DdnetInfo> = (0..4500).map(|i| f.keep(&info(i, 1000))).collect();
        drop(churn);
        assert!(compaction_due(&f.lock()));
        drop(keep);
    }

    #[test]
    fn a_due_compaction_runs_on_its_own_thread() {
        let f = InfoFile::new(None);
        let live: Vec<DdnetInfo> = (0..100).map(|i| f.keep(&info(i, 1000))).collect();
        for i in 0..6000 {
            drop(f.keep(&info(i, 1000)));
        }
        // 6 MB of dead bytes against 100 kB live: at least one compaction started; wait for
        // the thread to end.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while f.compacting.load(Ordering::Acquire) || f.stats().compactions == 0 {
            assert!(std::time::Instant::now() < deadline, "{:?}", f.stats());
            std::thread::yield_now();
        }
        assert!(f.stats().end < 6_000_000, "{:?}", f.stats());
        for (i, k) in (0..).zip(&live) {
            assert_eq!(*k, info(i, 1000));
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Keep(u16),
        Clone(usize),
        Drop(usize),
        Compact,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (1u16..3000).prop_map(Op::Keep),
            2 => any::<usize>().prop_map(Op::Clone),
            3 => any::<usize>().prop_map(Op::Drop),
            1 => Just(Op::Compact),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any sequence of keeping, cloning, dropping and compacting, in a file and in memory:
        /// every info held reads back as kept, an info's slot lives while any clone holds it,
        /// the counts add up, and a compaction leaves no dead byte.
        #[test]
        fn keep_drop_and_compact_agree_with_a_model(
            ops in proptest::collection::vec(op(), 1..200),
            in_memory: bool,
        ) {
            let f = InfoFile::with(None, false);
            if in_memory {
                f.lock().place = Place::Memory(Vec::new());
            }
            // (which keep it came from, its bytes, the info)
            let mut held: Vec<(u32, Bytes, DdnetInfo)> = Vec::new();
            for (n, op) in (0u32..).zip(ops) {
                match op {
                    Op::Keep(len) => {
                        let want = info(n, usize::from(len)).bytes().unwrap();
                        held.push((n, want.clone(), f.keep(&DdnetInfo::from(want))));
                    }
                    Op::Clone(i) if !held.is_empty() => {
                        let (id, bytes, kept) = &held[i % held.len()];
                        let copy = (*id, bytes.clone(), kept.clone());
                        proptest::prop_assert!(copy.2.same_as(kept));
                        held.push(copy);
                    }
                    Op::Drop(i) if !held.is_empty() => {
                        held.swap_remove(i % held.len());
                    }
                    Op::Clone(_) | Op::Drop(_) => {}
                    Op::Compact => {
                        f.compact_now();
                        let s = f.stats();
                        proptest::prop_assert_eq!(s.end, s.live);
                    }
                }
                let s = f.stats();
                let distinct: std::collections::BTreeMap<u32, u64> =
                    held.iter().map(|(id, b, _)| (*id, b.len() as u64)).collect();
                proptest::prop_assert_eq!(s.infos, distinct.len());
                proptest::prop_assert_eq!(s.live, distinct.values().sum::<u64>());
                proptest::prop_assert!(s.end >= s.live);
            }
            for (_, want, kept) in &held {
                proptest::prop_assert!(kept.is_kept());
                proptest::prop_assert_eq!(&kept.bytes().unwrap(), want);
            }
        }
    }

    /// Infos kept and dropped from other threads while compactions run: every live info
    /// reads back as it was kept.
    #[test]
    fn compaction_beside_keeping_and_dropping() {
        let f = InfoFile::with(None, false);
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..3u32)
            .map(|t| {
                let f = Arc::clone(&f);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut held: Vec<(u32, DdnetInfo)> = Vec::new();
                    let mut i = t * 1_000_000;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        held.push((i, f.keep(&info(i, 300 + (i as usize % 500)))));
                        if held.len() > 400 {
                            held.swap_remove((i as usize * 7) % held.len());
                        }
                        for (j, k) in held.iter().rev().take(3) {
                            assert_eq!(*k, info(*j, 300 + (*j as usize % 500)));
                        }
                    }
                    held
                })
            })
            .collect();
        for _ in 0..20 {
            f.compact_now();
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            for (j, k) in w.join().unwrap() {
                assert_eq!(k, info(j, 300 + (j as usize % 500)));
            }
        }
        f.compact_now();
        let s = f.stats();
        assert_eq!(s.end, s.live);
    }
}
