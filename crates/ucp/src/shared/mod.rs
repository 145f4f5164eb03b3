//! A worker shared by threads (thread mode multi) in which no thread waits for another.
//!
//! The worker itself is single-threaded state behind one mutex, but the mutex is only
//! ever *tried* by the operations of this module: a thread that finds the worker free
//! runs its operation in the call; a thread that finds it held posts the operation to a
//! lock-free FIFO and returns at once with a [`Ticket`]. Whoever holds the worker runs
//! the posted operations, in order, before its own work and again after releasing it
//! (see `leave`), so every posted operation runs without its poster waiting. Completions
//! are written into lock-free slots (`slots.rs`) that the poster reads without the lock.
//!
//! Locking map:
//! - `worker` (mutex): the worker's whole state (interfaces, endpoints, requests, tag
//!   matching, protocol state). Taken with `try_lock` by posting, progress and waiting;
//!   its holder calls into the transports. Taken blocking only by [`SharedWorker::with`]
//!   (slow paths: endpoint creation, handlers, keys, close) and by timeout handling. A
//!   try first reads a flag the holder keeps (`gate.rs`), not the mutex itself.
//! - `posted` (lock-free FIFO): operations waiting for the holder. Any thread pushes,
//!   only the holder pops.
//! - `slots` (lock-free): outcomes. The holder writes, the poster reads; no lock.
//!
//! Order: the operations of one thread run in the order it posted them. A thread posts
//! to the FIFO only while another holds the worker, and a holder runs the FIFO before
//! its own operation, so a later operation of a thread never overtakes an earlier one.
//! No posted operation is stranded: a poster retries the lock after pushing, and a holder
//! looks at the FIFO again after releasing (both after a SeqCst fence), so at least one
//! of them sees the other.

mod gate;
mod ops;
mod slots;

use crate::core::cq::CqTarget;
use crate::core::ep::Ep;
use crate::core::request::{AmSendFlags, Buf, Callback, SignalOp};
use crate::rma::RemoteKey;
use crate::worker::Worker;
use crossbeam_queue::SegQueue;
use gate::{Gate, Held};
use ops::Issue;
pub use ops::Op;
use slots::Slots;
pub use slots::{Outcome, Ticket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ucs::sys::EventFd;
use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize};

/// Outstanding operations a shared worker can track unless told otherwise.
pub const DEFAULT_SLOTS: usize = 8192;

/// What a posting call left: the operation completed in the call, or is pending.
#[derive(Debug)]
#[must_use]
pub enum Issued {
    Done(Outcome),
    Pending(Ticket),
}

/// Where a posted operation reports its completion.
enum Report {
    /// The slot named by this word.
    Slot(u64),
    /// A completion queue.
    Queue(CqTarget),
}

/// A worker usable from several threads at once.
#[derive(Clone)]
pub struct SharedWorker {
    inner: Arc<Inner>,
}

struct Inner {
    worker: Gate,
    posted: SegQueue<(Op, Report)>,
    slots: Slots,
    /// The worker's event descriptor, duplicated so that a thread can sleep on it without
    /// holding the worker.
    events: OwnedFd,
    /// The worker's waker, to end such a sleep when a completion is published.
    waker: EventFd,
    /// Threads sleeping on `events`.
    napping: AtomicU32,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Nobody can wait for these any more; their buffers are not touched.
        while self.posted.pop().is_some() {}
    }
}

impl SharedWorker {
    /// A shared worker that tracks up to [`DEFAULT_SLOTS`] pending operations. Fails when
    /// the worker's descriptors cannot be duplicated (the process is out of them).
    pub fn new(w: Worker) -> Result<SharedWorker> {
        SharedWorker::with_slots(w, DEFAULT_SLOTS)
    }

    /// A shared worker that can track `slots` pending operations at once (posting more
    /// fails with `NoResource`).
    pub fn with_slots(w: Worker, slots: usize) -> Result<SharedWorker> {
        let events = w.event_fd().try_clone_to_owned().map_err(Status::from)?;
        let waker = w.waker()?;
        Ok(SharedWorker {
            inner: Arc::new(Inner {
                worker: Gate::new(w),
                posted: SegQueue::new(),
                slots: Slots::new(slots),
                events,
                waker,
                napping: AtomicU32::new(0),
            }),
        })
    }

    // ----- holding the worker ----------------------------------------------------------

    fn try_enter(&self) -> Option<Held<'_>> {
        self.inner.worker.try_enter()
    }

    fn enter(&self) -> Held<'_> {
        self.inner.worker.enter()
    }

    /// Runs the posted operations in order; returns how many.
    fn run_posted(&self, w: &mut Worker) -> usize {
        let mut n = 0;
        while let Some((op, report)) = self.inner.posted.pop() {
            n += 1;
            let slots = &self.inner.slots;
            match report {
                Report::Slot(word) => match op.issue(w, None) {
                    Err(status) => slots.complete(
                        word,
                        Outcome {
                            status,
                            info: Default::default(),
                        },
                    ),
                    Ok(Issue::Done(o)) => slots.complete(word, o),
                    Ok(Issue::Pending(r)) => match w.request_adopt(r, word) {
                        Some((status, info)) => slots.complete(word, Outcome { status, info }),
                        None => slots.set_request(word, r),
                    },
                },
                Report::Queue(t) => {
                    let kind = op.cq_op();
                    // The queue gets the entry when the operation completes; one that
                    // could not start reports its error there, as its poster was told
                    // that it was posted.
                    if let Err(status) = op.issue(w, Some(Callback::Cq(t.clone()))) {
                        w.report_now(Callback::Cq(t), kind, status);
                    }
                }
            }
        }
        n
    }

    /// Hands the worker's completions to their slots; true if there were any.
    fn publish(&self, w: &mut Worker) -> bool {
        if !w.has_completed() {
            return false;
        }
        let slots = &self.inner.slots;
        w.drain_completed(|c| {
            slots.complete(
                c.word,
                Outcome {
                    status: c.status,
                    info: c.info,
                },
            )
        });
        true
    }

    /// Releases the worker, then runs what was posted meanwhile if the worker is free.
    fn leave(&self, mut g: Held<'_>) {
        let mut done = self.publish(&mut g);
        drop(g);
        loop {
            fence(Ordering::SeqCst);
            if self.inner.posted.is_empty() {
                break;
            }
            let Some(mut g) = self.try_enter() else { break };
            self.run_posted(&mut g);
            done |= self.publish(&mut g);
            drop(g);
        }
        if done && self.inner.napping.load(Ordering::SeqCst) != 0 {
            let _ = self.inner.waker.signal();
        }
    }

    /// Runs `f` with the worker held, waiting for it if another thread has it (for the
    /// slow paths: endpoints, handlers, keys, close). Operations posted before run first.
    /// Completions of requests started inside `f` with [`crate::Callback::Word`] are
    /// taken by this type: use closures or [`crate::Worker::request_take`] there. Do not
    /// sleep in `f` (such as in [`Worker::wait`]): operations other threads post meanwhile
    /// wait for `f` to return; sleep with [`SharedWorker::wait`] instead.
    pub fn with<T>(&self, f: impl FnOnce(&mut Worker) -> T) -> Result<T> {
        let mut g = self.enter();
        self.run_posted(&mut g);
        let r = f(&mut g);
        self.leave(g);
        Ok(r)
    }

    /// Runs `f` with the worker unless another thread is inside it (then `None` at once):
    /// the try of [`SharedWorker::progress`] for other work, such as a progress thread's
    /// turn. Operations posted before run first.
    pub fn try_with<T>(&self, f: impl FnOnce(&mut Worker) -> T) -> Result<Option<T>> {
        let Some(mut g) = self.try_enter() else {
            return Ok(None);
        };
        self.run_posted(&mut g);
        let r = f(&mut g);
        self.leave(g);
        Ok(Some(r))
    }

    /// Progresses unless another thread is in the worker (then returns 0 at once).
    pub fn progress(&self) -> Result<usize> {
        Ok(self.turn().unwrap_or(0))
    }

    /// One progress turn if the worker is free: `None` when another thread holds it.
    fn turn(&self) -> Option<usize> {
        let mut g = self.try_enter()?;
        let n = self.run_posted(&mut g) + g.progress();
        self.leave(g);
        Some(n)
    }

    /// Wakes a thread sleeping in the worker's wait (no lock taken).
    pub fn signal(&self) -> Result<()> {
        self.inner.waker.signal().map_err(|_| Status::IoError)
    }

    // ----- tickets ---------------------------------------------------------------------

    /// The outcome of `t` if it completed; else the ticket back. Never blocks.
    pub fn test(&self, t: Ticket) -> std::result::Result<Outcome, Ticket> {
        self.inner.slots.take(&t).ok_or(t)
    }

    /// Progresses (when no other thread does) until `t` completes or `timeout` passes.
    /// On timeout the operation is aborted as [`Worker::request_abort`] does (a queued
    /// send is dropped, a receive leaves matching) and `TimedOut` is returned.
    pub fn wait(&self, t: Ticket, timeout: Duration) -> Result<Outcome> {
        let deadline = Instant::now() + timeout;
        let mut idle = 0u32;
        loop {
            if let Some(o) = self.inner.slots.take(&t) {
                return Ok(o);
            }
            match self.turn() {
                Some(0) => {
                    // A peer's answer usually comes within microseconds: sleep only
                    // after a thousand empty turns (as the worker's own wait does).
                    idle += 1;
                    if idle >= 1024 {
                        idle = 0;
                        if Instant::now() > deadline {
                            return self.give_up(t);
                        }
                        self.nap(1);
                    }
                }
                Some(_) => idle = 0,
                None => {
                    // Another thread is in the worker and will publish our completion.
                    idle += 1;
                    if idle >= 1024 {
                        idle = 0;
                        if Instant::now() > deadline {
                            return self.give_up(t);
                        }
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    #[cold]
    fn give_up(&self, t: Ticket) -> Result<Outcome> {
        let r = self.with(|w| {
            if let Some(r) = self.inner.slots.request(&t) {
                let _ = w.abort_for_good(r);
            }
        });
        if let Some(o) = self.inner.slots.take(&t) {
            // Completed meanwhile (or by the abort): report what happened.
            return if o.status == Status::Canceled {
                Err(Status::TimedOut)
            } else {
                Ok(o)
            };
        }
        self.inner.slots.abandon(t);
        r.and(Err(Status::TimedOut))
    }

    /// Sleeps on the worker's events for at most `ms`, without holding the worker.
    fn nap(&self, ms: i32) {
        let armed = match self.try_enter() {
            Some(mut g) => {
                let armed = g.arm().is_ok();
                drop(g);
                armed
            }
            None => false,
        };
        if !armed {
            std::thread::yield_now();
            return;
        }
        self.inner.napping.fetch_add(1, Ordering::SeqCst);
        let _ = ucs::sys::poll::readable(self.inner.events.as_fd(), ms);
        self.inner.napping.fetch_sub(1, Ordering::SeqCst);
        self.inner.waker.drain();
    }

    /// Gives up waiting for `t`: the operation goes on and its slot is reused after it
    /// completes. Its buffers stay in use until then.
    pub fn forget(&self, t: Ticket) {
        self.inner.slots.abandon(t);
    }

    /// Cancels a pending receive (as [`Worker::request_cancel`]); it completes with
    /// `Canceled` unless it matched first.
    pub fn cancel(&self, t: &Ticket) -> Result<()> {
        self.with(|w| match self.inner.slots.request(t) {
            Some(r) => w.request_cancel(r),
            None => Ok(()),
        })?
    }

    // ----- posting ---------------------------------------------------------------------

    /// Runs `op` now if the worker is free, else posts it for the thread that holds it.
    fn post(&self, op: Op) -> Result<Issued> {
        let slots = &self.inner.slots;
        let t = slots.alloc()?;
        if let Some(mut g) = self.try_enter() {
            self.run_posted(&mut g);
            let r = match op.issue(&mut g, None) {
                Err(e) => {
                    slots.abandon_unused(t);
                    Err(e)
                }
                Ok(Issue::Done(o)) => {
                    slots.abandon_unused(t);
                    Ok(Issued::Done(o))
                }
                Ok(Issue::Pending(r)) => match g.request_adopt(r, t.word()) {
                    Some((status, info)) => {
                        slots.abandon_unused(t);
                        Ok(Issued::Done(Outcome { status, info }))
                    }
                    None => {
                        slots.set_request(t.word(), r);
                        Ok(Issued::Pending(t))
                    }
                },
            };
            self.leave(g);
            return r;
        }
        self.inner.posted.push((op, Report::Slot(t.word())));
        fence(Ordering::SeqCst);
        if let Some(mut g) = self.try_enter() {
            self.run_posted(&mut g);
            self.leave(g);
        }
        Ok(Issued::Pending(t))
    }

    /// Runs `op` (now if the worker is free, else posted to the thread that holds it);
    /// its outcome comes back as [`Issued`].
    pub fn post_op(&self, op: Op) -> Result<Issued> {
        self.post(op)
    }

    /// Runs `op` with its completion reported into the completion queue of `cq` (a
    /// [`Callback::cq`] or [`Callback::cq_attached`]) instead of a ticket: exactly one
    /// entry, whether it completes in the call, later, or (when it was posted for another
    /// thread) fails to start. An error returned here means no entry will come.
    pub fn post_cq(&self, op: Op, cq: Callback) -> Result<()> {
        let Callback::Cq(t) = cq else {
            return Err(Status::InvalidParam);
        };
        if let Some(mut g) = self.try_enter() {
            self.run_posted(&mut g);
            let r = op.issue(&mut g, Some(Callback::Cq(t))).map(drop);
            self.leave(g);
            return r;
        }
        self.inner.posted.push((op, Report::Queue(t)));
        fence(Ordering::SeqCst);
        if let Some(mut g) = self.try_enter() {
            self.run_posted(&mut g);
            self.leave(g);
        }
        Ok(())
    }

    /// Sends `buf` with `tag` on `ep` (synchronously with `sync`). For a [`Buf::contig`],
    /// "until the request completes" means until the ticket reports it, whichever thread
    /// ran the operation.
    pub fn tag_send_nb(&self, ep: Ep, buf: Buf, tag: u64, sync: bool) -> Result<Issued> {
        self.post(Op::TagSend { ep, buf, tag, sync })
    }

    /// Posts a receive for a message whose tag matches `tag` under `mask`.
    pub fn tag_recv_nb(&self, buf: Buf, tag: u64, mask: u64) -> Result<Issued> {
        self.post(Op::TagRecv { buf, tag, mask })
    }

    /// Sends an active message (`header` is copied).
    pub fn am_send_nb(
        &self,
        ep: Ep,
        id: u16,
        header: &[u8],
        buf: Buf,
        flags: AmSendFlags,
    ) -> Result<Issued> {
        self.post(Op::AmSend {
            ep,
            id,
            header: header.to_vec(),
            buf,
            flags,
        })
    }

    /// Sends stream bytes on `ep`.
    pub fn stream_send_nb(&self, ep: Ep, buf: Buf) -> Result<Issued> {
        self.post(Op::StreamSend { ep, buf })
    }

    /// Receives stream bytes from `ep` (all of `buf` with `waitall`).
    pub fn stream_recv_nb(&self, ep: Ep, buf: Buf, waitall: bool) -> Result<Issued> {
        self.post(Op::StreamRecv { ep, buf, waitall })
    }

    /// Writes the bytes of `src` to `addr` in the key's memory.
    pub fn put_nb(&self, ep: Ep, src: Buf, addr: u64, rk: &RemoteKey) -> Result<Issued> {
        self.post(Op::Put {
            ep,
            src,
            addr,
            rk: rk.clone(),
        })
    }

    /// Reads `dst.len()` bytes at `addr` into `dst`.
    pub fn get_nb(&self, ep: Ep, dst: Buf, addr: u64, rk: &RemoteKey) -> Result<Issued> {
        self.post(Op::Get {
            ep,
            dst,
            addr,
            rk: rk.clone(),
        })
    }

    /// An atomic without result; remotely complete after a flush.
    pub fn atomic_post(
        &self,
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        addr: u64,
        rk: &RemoteKey,
    ) -> Result<Issued> {
        self.post(Op::AtomicPost {
            ep,
            op,
            size,
            value,
            addr,
            rk: rk.clone(),
        })
    }

    /// An atomic that writes the previous value into `result` (see
    /// [`Worker::atomic_fetch_nb`]).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_fetch_nb(
        &self,
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        result: Buf,
        addr: u64,
        rk: &RemoteKey,
    ) -> Result<Issued> {
        self.post(Op::AtomicFetch {
            ep,
            op,
            size,
            value,
            compare,
            result,
            addr,
            rk: rk.clone(),
        })
    }

    /// Writes the bytes of `src` to `addr`, then applies `op` with `value` to the
    /// 64-bit word at `signal_addr` once the data is visible there (see
    /// [`Worker::put_signal_nb`]).
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_nb(
        &self,
        ep: Ep,
        src: Buf,
        addr: u64,
        rk: &RemoteKey,
        signal_addr: u64,
        signal_rk: &RemoteKey,
        op: SignalOp,
        value: u64,
    ) -> Result<Issued> {
        self.post(Op::PutSignal {
            ep,
            src,
            addr,
            rk: rk.clone(),
            signal_addr,
            signal_rk: signal_rk.clone(),
            op,
            value,
        })
    }

    /// Flushes `ep` (or, with `None`, every endpoint): completes when what was issued
    /// before, by any thread, completed at the peers.
    pub fn flush_nb(&self, ep: Option<Ep>) -> Result<Issued> {
        self.post(Op::Flush { ep })
    }
}
