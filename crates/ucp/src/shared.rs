//! A worker shared by threads (thread mode multi): one lock around the worker.
//!
//! This is the coarse lock the UCP core allows; progress takes it with `try_lock` so a
//! thread that finds another one progressing returns at once instead of queueing.

use crate::worker::Worker;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use ucs::{Result, Status};

/// A worker usable from several threads at once.
#[derive(Clone)]
pub struct SharedWorker {
    inner: Arc<Mutex<Worker>>,
}

impl SharedWorker {
    pub fn new(w: Worker) -> SharedWorker {
        SharedWorker {
            inner: Arc::new(Mutex::new(w)),
        }
    }

    /// Runs `f` with the worker locked.
    pub fn with<T>(&self, f: impl FnOnce(&mut Worker) -> T) -> Result<T> {
        let mut g = self.lock()?;
        Ok(f(&mut g))
    }

    fn lock(&self) -> Result<MutexGuard<'_, Worker>> {
        // A panic while holding the lock leaves the worker as consistent as any other
        // early return would, so a poisoned lock is still usable.
        Ok(self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Progresses unless another thread is doing it right now (then returns 0).
    pub fn progress(&self) -> Result<usize> {
        match self.inner.try_lock() {
            Ok(mut g) => Ok(g.progress()),
            Err(TryLockError::WouldBlock) => Ok(0),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner().progress()),
        }
    }

    /// Wakes a thread sleeping in the worker's wait.
    pub fn signal(&self) -> Result<()> {
        self.lock()?.signal().map_err(|_| Status::IoError)
    }

    /// Runs `f` with the worker locked unless another thread is inside it (then `None`):
    /// the try-lock of [`SharedWorker::progress`] for other work, e.g. a progress
    /// thread's turn.
    pub fn try_with<T>(&self, f: impl FnOnce(&mut Worker) -> T) -> Result<Option<T>> {
        match self.inner.try_lock() {
            Ok(mut g) => Ok(Some(f(&mut g))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Poisoned(p)) => Ok(Some(f(&mut p.into_inner()))),
        }
    }
}
