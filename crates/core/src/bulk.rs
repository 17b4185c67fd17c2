//! Work proportional to the whole registry, off the reactor and behind the faces.
//!
//! Publishing snapshots, persisting, the API's listings and sorts, `servers.json` builds and
//! the history's scans run on this pool's threads, which lower their own scheduling priority
//! by [`BULK_NICE`] when they start. On a machine whose cores are all busy the kernel then runs
//! a thread with a datagram to answer before them, so a registration's round trip does not
//! wait out a time slice behind a sort; on an idle machine nothing changes.
//!
//! [`spawn`] runs its closure inside the caller's runtime context, so the caller's clock
//! (a paused test clock included) and handle are the ones the closure sees.

use std::sync::OnceLock;

use tokio::task::JoinHandle;

/// How much lower than the daemon's other threads the bulk threads run (`nice` steps: each
/// step gives a thread about 1.25× less CPU than the one above when both want it).
pub const BULK_NICE: i32 = 5;

/// Bulk threads at most (they run whole-list passes; more than the cores only queue).
pub const MAX_BULK_THREADS: usize = 64;

fn pool() -> &'static tokio::runtime::Runtime {
    static POOL: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    POOL.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .thread_name("muster-bulk")
            .max_blocking_threads(MAX_BULK_THREADS)
            .on_thread_start(start_bulk_thread)
            .build()
            .unwrap_or_else(|e| panic!("cannot make the bulk thread pool: {e}"))
    })
}

/// Marks the calling thread as a bulk thread (for [`pace`]) and lowers its priority by
/// [`BULK_NICE`]. Failing to lower it is harmless: the work runs at the normal priority.
fn start_bulk_thread() {
    ON_BULK.with(|b| b.set(true));
    let _ = renice_current_thread(BULK_NICE);
}

/// Moves the calling thread's priority by `steps` nice steps (positive: lower; on Linux a
/// thread's nice value is its own); whether it could. Raising it (negative `steps`) needs
/// root or `CAP_SYS_NICE`; elsewhere than Linux nothing changes.
pub fn renice_current_thread(steps: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        rustix::process::getpriority_process(Some(tid))
            .and_then(|now| {
                rustix::process::setpriority_process(Some(tid), now.saturating_add(steps))
            })
            .is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = steps;
        false
    }
}

/// Records a long pass handles between two yields of [`pace`].
pub const PACE_EVERY: usize = 4096;

std::thread_local! {
    static ON_BULK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Called once per record (`i`: the record's position) by passes over the whole list that
/// run on bulk threads: a snapshot's merge, its per-face counts, a sort order's patch, an
/// index by address. Every [`PACE_EVERY`] records it yields the CPU. A face thread that wakes
/// on the CPU a bulk thread runs on waits until that thread's time slice ends, up to a
/// scheduler tick (4 ms measured), whatever their priorities: yielding hands the CPU to it
/// after at most one stretch (a few hundred microseconds). With nothing waiting the yield
/// returns at once. Off the bulk threads it does nothing.
pub fn pace(i: usize) {
    if i % PACE_EVERY == PACE_EVERY - 1 && ON_BULK.with(std::cell::Cell::get) {
        std::thread::yield_now();
    }
}

/// Runs `f` on a bulk thread; await the handle for its result. The thread then lets the
/// allocator take back what `f` freed ([`muster_alloc::release_freed`]): the pool's threads
/// are not the runtime's workers, which collect when they park, and a bulk thread that goes
/// idle after a burst (a publish, a write of every new server) otherwise kept its pages.
pub fn spawn<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let caller = tokio::runtime::Handle::try_current().ok();
    pool().spawn_blocking(move || {
        let _context = caller.as_ref().map(tokio::runtime::Handle::enter);
        let out = f();
        muster_alloc::release_freed();
        out
    })
}

/// A job for a [`Lane`].
type Job = Box<dyn FnOnce() + Send>;

/// A bulk thread of its own for one kind of work, its jobs run one after another in the order
/// given: the history's writes. On the shared pool the short-lived blocks of a write (a
/// batch's folded rows, each server's address as text) were cut from the same pages as what
/// the other bulk work keeps for a while (the events of a publish, the snapshot's parts), and
/// a page that still holds one such block stays resident after the burst. On a thread of its
/// own they come from pages of their own, which the collection after each job gives back (in
/// `muster-bench quake3` at 10,000 servers the resident cost per server fell by ~20 B, median
/// of 13 runs; valve's did not move). The thread runs at the bulk threads' lower priority and
/// ends when the lane is dropped (after the jobs already given).
#[derive(Debug)]
pub struct Lane {
    name: String,
    jobs: std::sync::mpsc::Sender<Job>,
}

/// A [`Lane`]'s job did not finish: it panicked, or the lane's thread is gone.
#[derive(Debug, thiserror::Error)]
#[error("a job on the {0} thread did not finish")]
pub struct LaneGone(String);

impl Lane {
    /// Starts the lane's thread, named `name`.
    ///
    /// # Errors
    /// When the system refuses a thread.
    pub fn new(name: &str) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                start_bulk_thread();
                for job in rx {
                    // A job that panics fails alone (its caller hears of it); the lane
                    // goes on with the next.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    muster_alloc::release_freed();
                }
            })?;
        Ok(Self {
            name: name.to_owned(),
            jobs: tx,
        })
    }

    /// Runs `f` on the lane's thread, after the jobs given before it, inside the caller's
    /// runtime context (as [`spawn`] does); await the result.
    pub fn run<F, R>(&self, f: F) -> impl Future<Output = Result<R, LaneGone>> + use<F, R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let caller = tokio::runtime::Handle::try_current().ok();
        let job: Job = Box::new(move || {
            let _context = caller.as_ref().map(tokio::runtime::Handle::enter);
            let _ = tx.send(f());
        });
        let name = self.name.clone();
        // A send fails only when the thread is gone; the dropped job's receiver reports it.
        let _ = self.jobs.send(job);
        async move { rx.await.map_err(|_| LaneGone(name)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lane_runs_its_jobs_in_order_on_one_lowered_thread_with_the_callers_clock() {
        let lane = Lane::new("muster-test-lane").unwrap();
        let mine = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        let start = tokio::time::Instant::now();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waits = Vec::new();
        for i in 0..20 {
            let order = std::sync::Arc::clone(&order);
            waits.push(lane.run(move || {
                order.lock().unwrap().push(i);
                (
                    std::thread::current().name().map(str::to_owned),
                    rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap(),
                    tokio::time::Instant::now() >= start,
                )
            }));
        }
        for w in waits {
            let (name, nice, clock) = w.await.unwrap();
            assert_eq!(name.as_deref(), Some("muster-test-lane"));
            assert_eq!(nice, (mine + BULK_NICE).min(19));
            assert!(clock, "the job sees the caller's paused clock");
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
        let e = lane.run(|| panic!("a job that fails")).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "a job on the muster-test-lane thread did not finish"
        );
        assert_eq!(lane.run(|| 1).await.unwrap(), 1, "the next job runs");
    }

    #[tokio::test]
    async fn only_bulk_threads_pace_their_passes() {
        assert!(!ON_BULK.with(std::cell::Cell::get));
        for i in 0..2 * PACE_EVERY {
            pace(i);
        }
        let on_bulk = spawn(|| {
            for i in 0..2 * PACE_EVERY {
                pace(i);
            }
            ON_BULK.with(std::cell::Cell::get)
        })
        .await
        .unwrap();
        assert!(on_bulk);
    }

    #[tokio::test]
    async fn runs_at_a_lower_priority_in_the_callers_context() {
        let mine = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let (theirs, has_context) = spawn(|| {
            let p = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
            (p, tokio::runtime::Handle::try_current().is_ok())
        })
        .await
        .unwrap();
        assert_eq!(theirs, (mine + BULK_NICE).min(19));
        assert!(
            has_context,
            "the closure runs in the caller's runtime context"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sees_the_callers_paused_clock() {
        let before = tokio::time::Instant::now();
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        let seen = spawn(tokio::time::Instant::now).await.unwrap();
        assert!(seen.duration_since(before) >= std::time::Duration::from_secs(3600));
    }
}
