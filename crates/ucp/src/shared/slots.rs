//! Completion slots: where the thread that completes an operation of a shared worker
//! leaves its outcome for the thread that posted it, without a lock.
//!
//! A slot is taken from a lock-free free list when an operation must report later, named
//! by a [`Ticket`] (index and generation), and filled by whichever thread holds the worker
//! when the operation completes. The poster reads it with [`Slots::take`].
//!
//! Layout, for threads that post and poll at once: each slot has a cache line of its
//! own, so a thread polling its slot never shares a line with a slot another thread's
//! completion is being written into; and the free list is a stack, so the next operation
//! gets the slot the last one gave back, still in cache (a queue would walk the whole
//! table, a cold line per operation).
//!
//! Invariants:
//! - A slot's state word holds its generation above the flag bits; every reuse bumps the
//!   generation, so a stale ticket or word never reads or completes a newer operation.
//! - The outcome fields are written before the DONE flag is published (release) and read
//!   after it is seen (acquire).
//! - A slot is back on the free list only when both sides are done with it: the
//!   completion happened and the poster took it, or the poster abandoned it and the
//!   completion happened afterwards.
//! - The free stack's head carries a count bumped by every change, so a pop that read a
//!   head and its successor, and lost the processor while that slot was popped and pushed
//!   back, fails its compare-and-swap instead of installing a stale successor.

use crate::core::request::{RecvInfo, Request};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use ucs::Status;

const PENDING: u64 = 1;
const DONE: u64 = 2;
const ABANDONED: u64 = 4;
const GEN_ONE: u64 = 8;
/// The end of the free stack.
const NIL: u32 = u32::MAX;

/// The handle of an operation posted to a shared worker that had not completed when the
/// call returned. Consume it with [`crate::SharedWorker::test`]/`wait`, or give it up
/// with [`crate::SharedWorker::forget`].
#[must_use = "a ticket holds a completion slot until it is taken or forgotten"]
#[derive(Debug, PartialEq, Eq)]
pub struct Ticket {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl Ticket {
    /// The word the worker reports the completion with.
    pub(crate) fn word(&self) -> u64 {
        ((self.gen as u64) << 32) | self.idx as u64
    }
}

/// The outcome of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub status: Status,
    pub info: RecvInfo,
}

impl Outcome {
    pub(crate) fn ok() -> Outcome {
        Outcome {
            status: Status::Ok,
            info: RecvInfo::default(),
        }
    }
}

/// One cache line: see the module docs.
#[derive(Default)]
#[repr(align(64))]
struct Slot {
    state: AtomicU64,
    status: AtomicI32,
    tag: AtomicU64,
    length: AtomicUsize,
    /// The worker's request for this operation (for cancel), 0 when there is none.
    request: AtomicU64,
    /// The next free slot while this one is on the free stack.
    next: AtomicU32,
}

/// A fixed table of completion slots.
pub(crate) struct Slots {
    slots: Box<[Slot]>,
    /// The free stack: the top slot's index in the low half (`NIL` when empty), a count
    /// of changes in the high half.
    free: AtomicU64,
}

fn gen_of(state: u64) -> u32 {
    (state / GEN_ONE) as u32
}

impl Slots {
    pub(crate) fn new(n: usize) -> Slots {
        let n = n.clamp(1, NIL as usize);
        // Chained in index order: slot 0 on top.
        let slots: Box<[Slot]> = (0..n)
            .map(|i| Slot {
                next: AtomicU32::new(if i + 1 < n { i as u32 + 1 } else { NIL }),
                ..Slot::default()
            })
            .collect();
        Slots {
            slots,
            free: AtomicU64::new(0),
        }
    }

    /// Pops the free stack.
    fn pop(&self) -> Option<u32> {
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == NIL {
                return None;
            }
            // Stale when another thread popped `top` meanwhile; the count in the head then
            // makes the exchange below fail.
            let next = self.slots[top as usize].next.load(Ordering::Relaxed);
            let new = (head >> 32).wrapping_add(1) << 32 | next as u64;
            match self
                .free
                .compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return Some(top),
                Err(h) => head = h,
            }
        }
    }

    /// Pushes `idx` on the free stack.
    fn push(&self, idx: u32) {
        let s = &self.slots[idx as usize];
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            s.next.store(head as u32, Ordering::Relaxed);
            let new = (head >> 32).wrapping_add(1) << 32 | idx as u64;
            match self
                .free
                .compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// A slot for a new operation; `NoResource` when every slot is in use.
    pub(crate) fn alloc(&self) -> ucs::Result<Ticket> {
        let idx = self.pop().ok_or(Status::NoResource)?;
        let s = &self.slots[idx as usize];
        let gen = gen_of(s.state.load(Ordering::Relaxed));
        s.request.store(0, Ordering::Relaxed);
        s.state
            .store((gen as u64 * GEN_ONE) | PENDING, Ordering::Release);
        Ok(Ticket { idx, gen })
    }

    fn slot(&self, idx: u64) -> Option<&Slot> {
        self.slots.get((idx & u32::MAX as u64) as usize)
    }

    /// Records the worker's request behind a ticket's operation.
    pub(crate) fn set_request(&self, word: u64, r: Request) {
        if let Some(s) = self.slot(word) {
            if gen_of(s.state.load(Ordering::Acquire)) == (word >> 32) as u32 {
                s.request.store(r.to_u64(), Ordering::Relaxed);
            }
        }
    }

    /// The worker's request behind `t`, while it is in progress.
    pub(crate) fn request(&self, t: &Ticket) -> Option<Request> {
        let s = self.slot(t.idx as u64)?;
        let st = s.state.load(Ordering::Acquire);
        let r = s.request.load(Ordering::Relaxed);
        (gen_of(st) == t.gen && st & DONE == 0 && r != 0).then(|| Request::from_u64(r))
    }

    /// Publishes the outcome of the operation reported with `word`. A word of no pending
    /// slot (stale, or not ours) is ignored.
    pub(crate) fn complete(&self, word: u64, o: Outcome) {
        let Some(s) = self.slot(word) else { return };
        let gen = (word >> 32) as u32;
        let st = s.state.load(Ordering::Acquire);
        if gen_of(st) != gen || st & (PENDING | DONE) != PENDING {
            return;
        }
        s.status.store(o.status as i32, Ordering::Relaxed);
        s.tag.store(o.info.sender_tag, Ordering::Relaxed);
        s.length.store(o.info.length, Ordering::Relaxed);
        let prev = s.state.fetch_or(DONE, Ordering::AcqRel);
        if prev & ABANDONED != 0 {
            self.recycle(word as u32, gen);
        }
    }

    /// The outcome of `t` when it completed (the slot is then free again).
    pub(crate) fn take(&self, t: &Ticket) -> Option<Outcome> {
        let s = self.slot(t.idx as u64)?;
        let st = s.state.load(Ordering::Acquire);
        if gen_of(st) != t.gen || st & DONE == 0 {
            return None;
        }
        let o = Outcome {
            status: Status::from_code(s.status.load(Ordering::Relaxed)).unwrap_or(Status::IoError),
            info: RecvInfo {
                sender_tag: s.tag.load(Ordering::Relaxed),
                length: s.length.load(Ordering::Relaxed),
            },
        };
        self.recycle(t.idx, t.gen);
        Some(o)
    }

    /// Returns the slot of a ticket whose word was never handed out.
    pub(crate) fn abandon_unused(&self, t: Ticket) {
        self.recycle(t.idx, t.gen);
    }

    /// Gives up `t`: its slot returns to the free list when the operation completes.
    pub(crate) fn abandon(&self, t: Ticket) {
        let Some(s) = self.slot(t.idx as u64) else {
            return;
        };
        let prev = s.state.fetch_or(ABANDONED, Ordering::AcqRel);
        if gen_of(prev) == t.gen && prev & DONE != 0 {
            self.recycle(t.idx, t.gen);
        }
    }

    fn recycle(&self, idx: u32, gen: u32) {
        let s = &self.slots[idx as usize];
        s.state
            .store((gen.wrapping_add(1) as u64) * GEN_ONE, Ordering::Release);
        self.push(idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_then_take_and_stale_tickets() {
        let s = Slots::new(2);
        let t = s.alloc().unwrap();
        assert_eq!(s.take(&t), None);
        let info = RecvInfo {
            sender_tag: 7,
            length: 9,
        };
        s.complete(
            t.word(),
            Outcome {
                status: Status::Ok,
                info,
            },
        );
        let o = s.take(&t).unwrap();
        assert_eq!((o.status, o.info), (Status::Ok, info));
        // Taken once only; a second take and a late completion of the old word see a
        // newer generation.
        assert_eq!(s.take(&t), None);
        s.complete(t.word(), Outcome::ok());
        let u = s.alloc().unwrap();
        let v = s.alloc().unwrap();
        assert!(s.alloc().is_err(), "two slots only");
        s.complete(t.word(), Outcome::ok());
        assert_eq!(s.take(&u), None);
        assert_eq!(s.take(&v), None);
        s.abandon(u);
        s.abandon(v);
    }

    #[test]
    fn abandoned_slots_come_back_after_completion() {
        let s = Slots::new(1);
        let t = s.alloc().unwrap();
        let w = t.word();
        s.abandon(t);
        assert!(s.alloc().is_err(), "still in flight");
        s.complete(w, Outcome::ok());
        let t = s.alloc().unwrap();
        // Abandoned after completion: free at once.
        s.complete(t.word(), Outcome::ok());
        s.abandon(t);
        let t = s.alloc().unwrap();
        s.abandon(t);
    }

    #[test]
    fn the_slot_given_back_last_is_reused_first() {
        let s = Slots::new(8);
        let a = s.alloc().unwrap();
        let b = s.alloc().unwrap();
        let (ai, bi) = (a.idx, b.idx);
        assert_ne!(ai, bi);
        s.abandon_unused(a);
        s.abandon_unused(b);
        let c = s.alloc().unwrap();
        let d = s.alloc().unwrap();
        assert_eq!((c.idx, d.idx), (bi, ai));
        // A new generation: the old tickets' words name nothing now.
        assert_ne!(c.word(), Ticket { idx: bi, gen: 0 }.word());
        s.abandon_unused(c);
        s.abandon_unused(d);
    }

    /// Threads allocate and give back slots at once: no slot is ever held by two of
    /// them, and all of them are free again at the end.
    #[test]
    fn threads_never_share_a_slot() {
        use std::sync::atomic::AtomicBool;
        const N: usize = 16;
        let s = Slots::new(N);
        let held: Vec<AtomicBool> = (0..N).map(|_| AtomicBool::new(false)).collect();
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    let mut mine = Vec::new();
                    for i in 0..50_000usize {
                        if i % 3 != 2 {
                            if let Ok(t) = s.alloc() {
                                let was = held[t.idx as usize].swap(true, Ordering::AcqRel);
                                assert!(!was, "slot {} handed out twice", t.idx);
                                mine.push(t);
                            }
                        } else if let Some(t) = mine.pop() {
                            held[t.idx as usize].store(false, Ordering::Release);
                            s.abandon_unused(t);
                        }
                    }
                    for t in mine {
                        held[t.idx as usize].store(false, Ordering::Release);
                        s.abandon_unused(t);
                    }
                });
            }
        });
        let all: Vec<Ticket> = (0..N).map(|_| s.alloc().unwrap()).collect();
        let mut idx: Vec<u32> = all.iter().map(|t| t.idx).collect();
        idx.sort_unstable();
        assert_eq!(idx, (0..N as u32).collect::<Vec<_>>());
        assert!(s.alloc().is_err());
        for t in all {
            s.abandon_unused(t);
        }
    }

    #[test]
    fn threads_complete_what_others_posted() {
        let s = std::sync::Arc::new(Slots::new(64));
        let (tx, rx) = std::sync::mpsc::channel::<u64>();
        let c = {
            let s = s.clone();
            std::thread::spawn(move || {
                for w in rx {
                    let info = RecvInfo {
                        sender_tag: w,
                        length: (w & 0xffff) as usize,
                    };
                    s.complete(
                        w,
                        Outcome {
                            status: Status::Ok,
                            info,
                        },
                    );
                }
            })
        };
        for _ in 0..10_000 {
            let t = s.alloc().unwrap();
            tx.send(t.word()).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let o = loop {
                if let Some(o) = s.take(&t) {
                    break o;
                }
                assert!(std::time::Instant::now() < deadline);
                std::thread::yield_now();
            };
            assert_eq!(o.info.sender_tag, t.word());
            assert_eq!(o.info.length, (t.word() & 0xffff) as usize);
        }
        drop(tx);
        c.join().unwrap();
    }
}
