//! A progress thread: serves a worker's peers while the application is outside rucx.
//!
//! rucx progresses only inside calls into it, so a process that computes or sleeps
//! elsewhere stalls the peers that need its CPU: emulated put/get/atomics aimed at it,
//! rendezvous transfers into its posted receives, acknowledgements. The thread sleeps on
//! the worker's interface descriptors (bounded, so timers and missed wakeups cost at most
//! [`IDLE_WAIT_MS`]) and, when they fire, takes a turn of [`Worker::serve`] through a
//! try-lock: if the application is inside the worker, or has progressed it since the
//! thread's last turn ([`Worker::progress_mark`] moved), the thread does nothing (the
//! application is serving its peers itself) and backs off for [`BUSY_WAIT_MS`] without
//! arming the interfaces, so an application that progresses all the time pays one
//! try-lock per back-off and its peers no wakeup syscalls.
//!
//! The thread runs no user code (see `worker::serve`): completions and held active
//! messages wait for the application's next progress. A turn that handled anything
//! signals the worker, so an application asleep in the worker's wait (or polling its
//! event descriptor) wakes up for it: the thread consumed the readiness of the
//! descriptors it would have woken on.
//!
//! Invariants: [`ProgressThread`] owns the thread; dropping it (or [`ProgressThread::stop`])
//! stops and joins it, so the worker the thread reaches outlives it as long as the owner
//! drops the thread first. The driver knows nothing about locks: a [`Serve`] supplies the
//! try-locked turn (one implementation here for [`SharedWorker`], one in the C API).

use crate::shared::SharedWorker;
use crate::worker::Worker;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use ucs::sys::EventFd;
use ucs::{EventSet, Events, Result, Status};

/// Longest sleep with nothing to do: the interfaces' own timers wake the thread sooner
/// when they have deadlines; this only bounds a wakeup that got lost between threads.
pub const IDLE_WAIT_MS: i32 = 100;
/// Back-off when the application is inside the worker or work cannot go on yet.
pub const BUSY_WAIT_MS: u64 = 1;
/// Turns taken back to back while peer work is pending, before backing off.
const SPIN_TURNS: u32 = 16;
/// Token of the stop descriptor in the thread's event set.
const STOP_TOKEN: u64 = u64::MAX;

/// What a turn found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The application is inside the worker, or progressed it since the last turn:
    /// nothing was done.
    Busy,
    /// Work for peers is still waiting (a queue, a fetch in flight): take another turn.
    Pending,
    /// Nothing more for peers; the interfaces are armed, so the thread may sleep.
    /// `handled`: events this turn handled.
    Armed { handled: usize },
}

/// A worker a progress thread can serve.
pub trait Serve: Send + Sync + 'static {
    /// One turn: try-lock the worker and, if that succeeds, run [`serve_turn`] on it with
    /// `mark`.
    fn turn(&self, mark: &mut u32) -> Turn;
}

/// The turn on a locked worker: unless the application progressed since the last turn
/// (`mark`, the thread's copy of [`Worker::progress_mark`]), serve, tell the application
/// if something waits for it, and arm the interfaces if peers need nothing more now.
pub fn serve_turn(w: &mut Worker, mark: &mut u32) -> Turn {
    if w.progress_mark() != *mark {
        *mark = w.progress_mark();
        return Turn::Busy;
    }
    let n = w.serve();
    *mark = w.progress_mark();
    if n > 0 {
        // Whatever arrived may be what the application sleeps for: a completion, but
        // also a message it will probe for or stream bytes it will ask for. A failed
        // signal only delays the application until its next call.
        let _ = w.signal();
    }
    match w.serve_arm() {
        Ok(()) => Turn::Armed { handled: n },
        Err(_) => Turn::Pending,
    }
}

impl Serve for SharedWorker {
    fn turn(&self, mark: &mut u32) -> Turn {
        match self.try_with(|w| serve_turn(w, mark)) {
            Ok(Some(t)) => t,
            Ok(None) | Err(_) => Turn::Busy,
        }
    }
}

/// A running progress thread; dropping it stops and joins it.
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    join: Option<JoinHandle<()>>,
}

impl ProgressThread {
    /// Starts a thread serving `target`, sleeping on `events` (from
    /// [`Worker::serve_events`]).
    pub fn spawn(target: impl Serve, events: EventSet) -> Result<ProgressThread> {
        let wake = Arc::new(EventFd::new()?);
        events.add(&*wake, Events::READABLE, STOP_TOKEN)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (s, w) = (stop.clone(), wake.clone());
        let join = std::thread::Builder::new()
            .name("rucx-progress".into())
            .spawn(move || run(target, events, &s, &w))
            .map_err(|e| {
                tracing::error!("cannot start a progress thread: {e}");
                Status::NoResource
            })?;
        Ok(ProgressThread {
            stop,
            wake,
            join: Some(join),
        })
    }

    /// Starts a progress thread for `w` when its context's configuration asks for one
    /// (`UCX_RUCX_PROGRESS_THREAD`); `None` otherwise.
    pub fn from_config(w: &SharedWorker) -> Result<Option<ProgressThread>> {
        if !w.with(|w| w.context().config().progress_thread)? {
            return Ok(None);
        }
        ProgressThread::start(w).map(Some)
    }

    /// Starts a progress thread for `w`.
    pub fn start(w: &SharedWorker) -> Result<ProgressThread> {
        let events = w.with(|w| w.serve_events())??;
        ProgressThread::spawn(w.clone(), events)
    }

    /// Stops the thread and waits for it to end.
    pub fn stop(&mut self) {
        let Some(join) = self.join.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        if self.wake.signal().is_err() {
            // The thread still sees the flag within its longest sleep.
            tracing::debug!("progress thread: stop signal failed");
        }
        if join.join().is_err() {
            tracing::error!("progress thread panicked");
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(target: impl Serve, mut events: EventSet, stop: &AtomicBool, wake: &EventFd) {
    let mut spins = 0;
    let mut woke = false;
    let mut mark = 0;
    while !stop.load(Ordering::Acquire) {
        let timeout = match target.turn(&mut mark) {
            Turn::Busy => {
                // Sleeping on the descriptors would return at once while the
                // application holds the worker and its messages wait unread.
                std::thread::sleep(Duration::from_millis(BUSY_WAIT_MS));
                continue;
            }
            Turn::Pending if spins < SPIN_TURNS => {
                spins += 1;
                std::thread::yield_now();
                continue;
            }
            Turn::Pending => BUSY_WAIT_MS as i32,
            Turn::Armed { handled } => {
                if woke && handled == 0 {
                    // Woken for nothing (a descriptor of an interface that is not
                    // progressed yet stays readable): do not spin on it.
                    std::thread::sleep(Duration::from_millis(BUSY_WAIT_MS));
                }
                IDLE_WAIT_MS
            }
        };
        spins = 0;
        let waited = events.wait(timeout, |tok, _| {
            if tok == STOP_TOKEN {
                wake.drain();
            }
        });
        woke = matches!(waited, Ok(n) if n > 0);
        if waited.is_err() {
            // Not expected from epoll on our own set; do not spin on it.
            std::thread::sleep(Duration::from_millis(BUSY_WAIT_MS));
        }
    }
}
