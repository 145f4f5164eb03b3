//! The lock around a shared worker's state, tried without disturbing its holder.
//!
//! Threads waiting for their operations try the worker again and again. A failed
//! compare-and-swap on the mutex still takes the mutex's cache line away from the holder,
//! which must fetch it back to unlock; with two or more waiters that line never rests. So
//! a try first reads `held`, a flag on a line of its own that the holder sets after
//! locking and clears before unlocking, and only tries the mutex when the flag is clear.
//!
//! Invariants: `held` is a hint, never the lock. It is true while a [`Held`] lives and is
//! cleared when that drops (also while unwinding from a panic in a user callback), before
//! the mutex is unlocked. A try that reads a stale `true` returns `None` as if the worker
//! were held, so callers that must not strand posted work look again after a SeqCst fence
//! that follows the holder's release (as `SharedWorker::leave` and `post` do): the
//! holder's clear comes before its fence, so of two threads fencing, the later one sees
//! the other's write.

use crate::worker::Worker;
use crossbeam_utils::CachePadded;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// A worker behind a mutex, with the look-before-try flag.
pub(super) struct Gate {
    held: CachePadded<AtomicBool>,
    worker: Mutex<Worker>,
}

/// The worker, held; dropping it releases the worker.
pub(super) struct Held<'a> {
    g: MutexGuard<'a, Worker>,
    held: &'a AtomicBool,
}

impl Gate {
    pub(super) fn new(w: Worker) -> Gate {
        Gate {
            held: CachePadded::new(AtomicBool::new(false)),
            worker: Mutex::new(w),
        }
    }

    /// The worker, unless another thread holds it (or just did).
    #[inline]
    pub(super) fn try_enter(&self) -> Option<Held<'_>> {
        if self.held.load(Ordering::Relaxed) {
            return None;
        }
        let g = match self.worker.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => return None,
            // A panic while holding the worker leaves it as consistent as any other early
            // return would, so a poisoned lock is still usable.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        Some(self.hold(g))
    }

    /// The worker, waiting for it if another thread holds it.
    pub(super) fn enter(&self) -> Held<'_> {
        let g = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        self.hold(g)
    }

    #[inline]
    fn hold<'a>(&'a self, g: MutexGuard<'a, Worker>) -> Held<'a> {
        self.held.store(true, Ordering::Relaxed);
        Held {
            g,
            held: &self.held,
        }
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        // Before the guard (a field) unlocks the mutex.
        self.held.store(false, Ordering::Relaxed);
    }
}

impl Deref for Held<'_> {
    type Target = Worker;
    fn deref(&self) -> &Worker {
        &self.g
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Worker {
        &mut self.g
    }
}
