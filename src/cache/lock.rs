//! The cache's lock and the three ways in: admissions read with [`admission_read`], the
//! controller's passes over the whole cache with [`pass`], the watches write with [`write`]
//! (docs/performance.md, "Admissions beside the controller's passes").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::readiness::Ready;
use super::state::State;

/// The cache as the watches (writers), the webhook and the controller loops share it. The webhook
/// reads it with [`admission_read`], which does not queue behind a writer waiting for a controller
/// pass over the whole cache to end (at 100,000 objects, up to a few hundred ms), the passes with
/// [`pass`], the watches write with [`write`] (docs/performance.md, "Admissions beside the
/// controller's passes").
pub struct Lock {
    state: parking_lot::RwLock<State>,
    /// The state's readiness, read without the lock: a context built while a writer waits for
    /// a pass (the webhook's, per request in tests) must not queue behind it.
    ready: Ready,
    /// Passes over the whole cache holding it now ([`pass`]).
    passes: AtomicUsize,
    /// A writer has waited past [`STARVED_AFTER`] while no pass held the cache: only admissions'
    /// reads, which do not queue behind it, kept it out.
    writer_starved: AtomicBool,
}

impl Lock {
    pub fn new(state: State) -> Lock {
        let ready = state.readiness().ready();
        Lock { state: parking_lot::RwLock::new(state), ready, passes: AtomicUsize::new(0), writer_starved: AtomicBool::new(false) }
    }

    /// Whether the watches have delivered their first lists ([`super::Readiness`]), without the lock.
    pub fn ready(&self) -> Ready {
        self.ready.clone()
    }
}

impl Default for Lock {
    fn default() -> Lock {
        Lock::new(State::default())
    }
}

/// The lock itself, for what none of the functions below covers (tests, start-up).
impl std::ops::Deref for Lock {
    type Target = parking_lot::RwLock<State>;
    fn deref(&self) -> &Self::Target {
        &self.state
    }
}

/// Runs `f`, which may hold the cache's lock long or wait for it, without holding up the
/// runtime's other tasks: on a multi-threaded runtime the worker first hands its other tasks to
/// another thread (`block_in_place`). The chart gives a replica one CPU, so tokio one worker
/// thread: a controller pass run on it, or a watch event waiting on it for a pass to end, held up
/// every admission of the replica for that long. Elsewhere (tests on a current-thread runtime,
/// no runtime at all) `f` just runs.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The cache to read, for the watches and the controller loops: at once when the lock is free,
/// else waited for off the runtime ([`blocking`]). (The webhook reads with [`admission_read`].)
pub fn read(lock: &Lock) -> parking_lot::RwLockReadGuard<'_, State> {
    lock.try_read().unwrap_or_else(|| blocking(|| lock.read()))
}

/// How long a writer lets admissions' reads go ahead of it before they queue behind it.
const STARVED_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// A controller pass over the whole cache: `f` runs off the runtime ([`blocking`]) on the
/// cache, counted as a pass while it holds it. A writer waits for a pass to end without making
/// admissions wait too ([`write`]).
pub fn pass<T>(lock: &Lock, f: impl FnOnce(&State) -> T) -> T {
    struct Holding<'a>(&'a AtomicUsize);
    impl Drop for Holding<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    blocking(|| {
        let state = lock.read();
        lock.passes.fetch_add(1, Ordering::SeqCst);
        let _holding = Holding(&lock.passes);
        f(&state)
    })
}

/// The cache to change: at once when the lock is free, else waited for off the runtime
/// ([`blocking`]). A watch event arriving during a controller pass waits for its end while
/// admissions go on ([`admission_read`]); one kept out for [`STARVED_AFTER`] by admissions'
/// reads alone (several threads whose reads overlap without a gap, under a flood) makes new
/// admissions queue behind it, so the cache keeps up with the cluster.
pub fn write(lock: &Lock) -> parking_lot::RwLockWriteGuard<'_, State> {
    lock.try_write().unwrap_or_else(|| {
        blocking(|| {
            let mut waited = false;
            loop {
                lock.writer_starved.store(waited && lock.passes.load(Ordering::SeqCst) == 0, Ordering::SeqCst);
                if let Some(guard) = lock.try_write_for(STARVED_AFTER) {
                    lock.writer_starved.store(false, Ordering::SeqCst);
                    return guard;
                }
                waited = true;
            }
        })
    })
}

/// The cache to read, for an admission: it does not queue behind a writer waiting for a pass to
/// end (`read_recursive`: at 100,000 objects a pass holds the cache for up to a few hundred ms),
/// except when a writer is kept out by admissions alone ([`write`]).
pub fn admission_read(lock: &Lock) -> parking_lot::RwLockReadGuard<'_, State> {
    if lock.writer_starved.load(Ordering::SeqCst) {
        return lock.try_read().unwrap_or_else(|| blocking(|| lock.read()));
    }
    lock.read_recursive()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer kept out by a pass leaves admissions' reads going ahead of it; one kept out by
    /// admissions' reads alone makes new admissions queue behind it, and lowers the flag once in.
    #[test]
    fn a_writer_asks_admissions_to_queue_only_when_no_pass_keeps_it_out() {
        use std::time::Duration;
        let lock = std::sync::Arc::new(Lock::default());
        for by_pass in [true, false] {
            let (held_tx, held_rx) = std::sync::mpsc::channel();
            let reader = {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let hold = || {
                        held_tx.send(()).unwrap();
                        std::thread::sleep(Duration::from_millis(300));
                    };
                    if by_pass {
                        pass(&lock, |_| hold());
                    } else {
                        let _admission = admission_read(&lock);
                        hold();
                    }
                })
            };
            held_rx.recv().unwrap();
            let writer = {
                let lock = lock.clone();
                std::thread::spawn(move || drop(write(&lock)))
            };
            // A few of the writer's 20 ms turns.
            std::thread::sleep(Duration::from_millis(150));
            let asked = lock.writer_starved.load(Ordering::SeqCst);
            assert_eq!(
                asked,
                !by_pass,
                "kept out by {}: admissions asked to queue: {asked}",
                if by_pass { "a pass" } else { "an admission" }
            );
            reader.join().unwrap();
            writer.join().unwrap();
            assert!(!lock.writer_starved.load(Ordering::SeqCst), "lowered once the writer is in");
            assert_eq!(lock.passes.load(Ordering::SeqCst), 0, "a pass is counted while it holds the cache only");
        }
    }

    /// The lock's readiness is the state's, and reading it takes no lock: the writer holding the
    /// cache here would deadlock a read of the state on this thread.
    #[test]
    fn readiness_is_read_without_the_lock_and_follows_the_writer() {
        use crate::cache::{Watched, Writer};
        let lock = Lock::default();
        let ready = lock.ready();
        let mut state = write(&lock);
        let watches = Watched::all(state.kinds(), state.source_kinds());
        for what in &watches {
            assert!(!lock.ready().is_ready(), "before {} listed", what.name());
            state.relisted(*what, &Default::default());
        }
        assert!(lock.ready().is_ready() && ready.is_ready());
        drop(state);
        assert!(read(&lock).readiness().is_ready());
    }
}
