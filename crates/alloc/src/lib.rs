//! The allocator Muster's binaries run on, and the upkeep that hands its freed memory back.
//!
//! Both binaries (`muster`, `muster-bench`) use mimalloc as their global allocator
//! ([`Allocator`]). mimalloc gives memory freed in whole pages back to the system after its
//! purge delay, but it checks for due purges only when some thread next frees a page or
//! collects. The daemons call [`return_freed_promptly`] first, which makes that delay zero.
//! A daemon that goes quiet after a burst (a restart where every server registers again, a
//! `servers.json` build, a sort of the whole list) would still keep what it freed resident
//! until its next burst, and freed pages owned by a thread that went idle are not even looked
//! at. [`Upkeep`] calls [`release_freed`] every [`UPKEEP_INTERVAL`], and [`on_thread_park`]
//! has each runtime thread collect its own pages when it goes idle, so what was freed is back
//! with the system within about a second, busy or not.
//!
//! [`Counting`] is the same allocator counting the bytes held, for the benches that split a
//! process's resident set into live data and what the allocator keeps around it.
//!
//! `release_freed` and [`Counting`]'s pass-through are the workspace's only `unsafe` code:
//! a call into mimalloc's C API that takes no pointer, and calls handed on unchanged.
//! Everything else in the workspace forbids `unsafe`.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The global allocator of Muster's binaries:
/// `#[global_allocator] static ALLOCATOR: muster_alloc::Allocator = muster_alloc::Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// [`Allocator`] counting the bytes requested and not freed, once [`Counting::start`] was
/// called (before that, and when never started, it only checks a flag). The count is of what
/// the program asked for, not of mimalloc's size classes; blocks allocated before the start
/// and freed after it lower it by their size, so readings are compared with each other.
pub struct Counting(Allocator);

impl std::fmt::Debug for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counting")
            .field("live", &Self::live())
            .finish()
    }
}

/// Whether [`Counting`] counts.
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Counters the threads spread over, a thread keeping to one: every allocation adds to a
/// counter, and one shared by every thread made the busy threads of a daemon (a face, the
/// publisher, the store) wait for its cache line on each allocation.
const SHARDS: usize = 32;

/// One counter on a cache line of its own (two lines: adjacent lines are fetched together).
#[repr(align(128))]
struct Shard(std::sync::atomic::AtomicI64);

/// Bytes requested and not freed while counting, in parts; the sum is the count (a block
/// freed by another thread than the one that asked for it lowers another part).
static LIVE: [Shard; SHARDS] = [const { Shard(std::sync::atomic::AtomicI64::new(0)) }; SHARDS];
/// The part the next thread to count takes.
static NEXT_SHARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// This thread's part of [`LIVE`] (`usize::MAX` until its first count). Constant and
    /// without a destructor, so reading it never allocates.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's counter.
fn shard() -> &'static std::sync::atomic::AtomicI64 {
    let i = SHARD
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SHARD.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS);
            }
            s.get()
        })
        .unwrap_or(0);
    let [first, ..] = &LIVE;
    &LIVE.get(i).unwrap_or(first).0
}

impl Counting {
    /// The allocator, not counting yet.
    #[must_use]
    pub const fn new() -> Self {
        Self(Allocator)
    }

    /// Starts counting (for the whole process).
    pub fn start() {
        COUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes requested and not freed since [`Counting::start`].
    #[must_use]
    pub fn live() -> i64 {
        LIVE.iter()
            .map(|s| s.0.load(std::sync::atomic::Ordering::Relaxed))
            .fold(0, i64::wrapping_add)
    }

    fn add(size: usize, sign: i64) {
        if COUNTING.load(std::sync::atomic::Ordering::Relaxed) {
            let n = i64::try_from(size).unwrap_or(i64::MAX);
            shard().fetch_add(sign.saturating_mul(n), std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Default for Counting {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every call goes to mimalloc unchanged, with the caller's pointer and layout; the
// counting touches only two atomics, never the memory.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::add(layout.size(), 1);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        Self::add(layout.size(), -1);
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::add(layout.size(), 1);
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        Self::add(new, 1);
        Self::add(layout.size(), -1);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { self.0.realloc(ptr, layout, new) }
    }
}

/// mimalloc's number (`mi_option_t` in its v3 header) for the purge delay, which
/// `libmimalloc-sys` does not name. The test `the_purge_delay_is_the_option_the_header_numbers`
/// reads its default through it.
const OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The environment variable with which a user sets the purge delay by hand; when it is set,
/// [`return_freed_promptly`] leaves the delay as the user said.
const PURGE_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// For a daemon, before its threads start: freed pages go back to the system as soon as they
/// are free (mimalloc's purge delay 0), not after its default delay of a second that only a
/// later free or collection notices. After a burst of registrations the pages that held the
/// burst's transient blocks (datagrams, decoded infos, old snapshots) were otherwise still
/// resident when the daemon went quiet: `muster-bench valve` at 10,000 servers read
/// 1,240–1,473 B per server without this and 1,109–1,165 B with it, at the same CPU per
/// registration and per list. Does nothing when the user set the delay through
/// `MIMALLOC_PURGE_DELAY`.
pub fn return_freed_promptly() {
    if std::env::var_os(PURGE_ENV).is_some() {
        return;
    }
    // SAFETY: `mi_option_set` takes two integers and no pointer. mimalloc reads the option
    // at every purge decision, so setting it while it runs is supported; the caller runs
    // this before starting threads, so no other thread reads it meanwhile.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(OPTION_PURGE_DELAY, 0);
    }
}

/// How often [`Upkeep`] lets the allocator hand freed memory back: memory freed in a burst
/// leaves within one of these after it (two when the purge delay is left at its default).
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Lets mimalloc collect the calling thread's freed pages and give back, on every thread's
/// behalf, the freed memory it holds (`mi_collect(true)`). The forced collection also frees
/// the pages a thread retires when their last block goes (kept for a while in case the size
/// is asked for again) and the empty pages of large blocks (an outgrown table, a list's
/// buffer): a collection that was not forced left them with their thread. In
/// `muster-bench quake3` at 10,000 servers, mimalloc's areas held 2.5 MB more than their
/// blocks used after the burst when not forced, 1.2 MB forced; memory per server went from
/// 775–918 B to 624–686 B. It took ~90 µs a call there (57 calls on the bulk threads: 5.3 ms).
/// Harmless when mimalloc is not the global allocator (it then has nothing of its own to
/// collect).
pub fn release_freed() {
    // SAFETY: `mi_collect` takes a plain `bool` and no pointer, touches only mimalloc's own
    // state, and mimalloc documents it as callable from any thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// For a Tokio runtime's `on_thread_park`: a thread about to idle lets the allocator collect
/// its own freed pages first ([`release_freed`]), at most once per [`UPKEEP_INTERVAL`] per
/// thread. [`Upkeep`] runs on one thread at a time; pages another thread owns, whose blocks
/// were freed elsewhere (a datagram read on one worker and dropped on another), go back only
/// when their owner collects, and a worker that goes quiet after a burst would not.
pub fn on_thread_park() {
    LAST_RELEASE.with(|last| once_a_period(last, Instant::now(), release_freed));
}

thread_local! {
    /// When this thread last called [`release_freed`] through the park hook or the upkeep.
    static LAST_RELEASE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// [`release_freed`] for the upkeep's tick, noted for this thread: the park that follows the
/// tick on the same worker then does not collect a second time.
fn release_freed_on_tick() {
    LAST_RELEASE.with(|last| last.set(Some(Instant::now())));
    release_freed();
}

/// Calls `f` when `last` is unset or at least [`UPKEEP_INTERVAL`] before `now`, and then
/// sets it to `now`.
fn once_a_period(last: &Cell<Option<Instant>>, now: Instant, f: impl FnOnce()) {
    let due = last
        .get()
        .is_none_or(|t| now.saturating_duration_since(t) >= UPKEEP_INTERVAL);
    if due {
        last.set(Some(now));
        f();
    }
}

/// The allocator's upkeep, running on the runtime it was started on: [`release_freed`] every
/// [`UPKEEP_INTERVAL`] until this is dropped.
#[derive(Debug)]
#[must_use = "the upkeep stops when this is dropped"]
pub struct Upkeep(tokio::task::JoinHandle<()>);

impl Upkeep {
    /// Starts the upkeep on the current Tokio runtime (panics outside one, like
    /// `tokio::spawn`). Keep the value for as long as the daemon runs.
    pub fn start() -> Self {
        Self(tokio::spawn(every(UPKEEP_INTERVAL, release_freed_on_tick)))
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Calls `f` every `period`, the first call one period from now; a late tick is not made up
/// for.
async fn every(period: Duration, mut f: impl FnMut()) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        f();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_live_count_is_the_sum_over_threads_whoever_frees() {
        // The test binary's allocator is not `Counting`: only these calls count.
        Counting::start();
        let before = Counting::live();
        Counting::add(1000, 1);
        let threads: Vec<_> = (0..SHARDS + 3)
            .map(|_| {
                std::thread::spawn(|| {
                    Counting::add(30, -1);
                    Counting::add(10, 1);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = i64::try_from(SHARDS + 3).unwrap();
        assert_eq!(Counting::live() - before, 1000 - 20 * n);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_once_a_period_until_aborted() {
        let calls = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let calls = Arc::clone(&calls);
            every(Duration::from_secs(1), move || {
                calls.fetch_add(1, Ordering::Relaxed);
            })
        });
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(calls.load(Ordering::Relaxed), 3, "at 1, 2 and 3 s");
        task.abort();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(calls.load(Ordering::Relaxed), 3, "none after the stop");
    }

    #[tokio::test(start_paused = true)]
    async fn the_upkeep_stops_when_dropped() {
        let upkeep = Upkeep::start();
        let handle = upkeep.0.abort_handle();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!handle.is_finished(), "runs while held");
        drop(upkeep);
        tokio::task::yield_now().await;
        assert!(handle.is_finished(), "stopped on drop");
    }

    #[test]
    fn parking_collects_at_most_once_a_period() {
        let last = Cell::new(None);
        let t0 = Instant::now();
        let mut calls = 0;
        for (after_ms, want) in [(0, 1), (10, 1), (999, 1), (1000, 2), (1500, 2), (2000, 3)] {
            let now = t0 + Duration::from_millis(after_ms);
            once_a_period(&last, now, || calls += 1);
            assert_eq!(calls, want, "at {after_ms} ms");
        }
        // The hook itself, on a thread of its own: runs and returns.
        std::thread::spawn(on_thread_park).join().unwrap();
    }

    #[test]
    fn a_tick_counts_as_this_threads_collection() {
        std::thread::spawn(|| {
            release_freed_on_tick();
            let mut calls = 0;
            LAST_RELEASE.with(|last| once_a_period(last, Instant::now(), || calls += 1));
            assert_eq!(
                calls, 0,
                "the park right after the tick does not collect again"
            );
        })
        .join()
        .unwrap();
    }

    /// mimalloc's value of option `o`.
    fn option(o: libmimalloc_sys::mi_option_t) -> std::os::raw::c_long {
        // SAFETY: reads one of mimalloc's options; takes an integer, no pointer.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_get(o)
        }
    }

    #[test]
    fn the_purge_delay_is_the_option_the_header_numbers() {
        // The only test that sets an option: it reads the default first (a renumbered header
        // would show another option's value), unless the environment set it for this run.
        if std::env::var_os(PURGE_ENV).is_some() {
            return;
        }
        assert_eq!(
            option(OPTION_PURGE_DELAY),
            1000,
            "the default purge delay, ms"
        );
        return_freed_promptly();
        assert_eq!(option(OPTION_PURGE_DELAY), 0);
        // The allocator keeps working with them.
        let blocks: Vec<Vec<u8>> = (0..1000).map(|i| vec![7u8; 32 + i]).collect();
        drop(blocks);
        release_freed();
        assert_eq!(
            vec![3u8; 4096].iter().map(|&b| u32::from(b)).sum::<u32>(),
            3 * 4096
        );
    }

    #[test]
    fn release_freed_runs_after_frees_on_another_thread() {
        // Blocks allocated here and freed on another thread: the call collects them and
        // returns; the allocator keeps working afterwards.
        let blocks: Vec<Vec<u8>> = (0..10_000).map(|i| vec![0u8; 64 + i % 512]).collect();
        std::thread::spawn(move || drop(blocks)).join().unwrap();
        release_freed();
        let again: Vec<u8> = vec![1; 1 << 20];
        assert_eq!(
            again.iter().map(|&b| usize::from(b)).sum::<usize>(),
            1 << 20
        );
    }
}
