//! A producer lane of a completion queue: a bounded ring with exactly one producer at a
//! time (the worker the lane is lent to) and any number of consumers.
//!
//! Why a lane per worker: a worker reports its completions from whichever thread holds
//! it, one at a time, so its pushes need no read-modify-write at all: the producer checks
//! that the slot at its tail was given back, writes the record and publishes it with a
//! release store of the slot's stamp. Consumers claim a run of published slots with one
//! compare-and-swap of the head, copy the records out and give the slots back one store
//! each.
//!
//! Invariants:
//! - Slot `p & mask` holds position `p`'s record exactly when its stamp is `p + 1`; it is
//!   free for position `p` when its stamp is `p` (stamps start at the slot's index and
//!   grow by the capacity per lap, so a stamp names one position).
//! - `head` only grows; a consumer owns the slots of the run it moved `head` over, and
//!   nobody else reads or writes them until it stores their stamps.
//! - Only the holder of the lane's [`Producer`] writes: `owned` is set while one exists.
//! - A record that finds its slot taken goes to the lane's overflow list, and so does
//!   every later record until the list is empty again, so one consumer sees the lane's
//!   records in the order they were pushed (ring first, then overflow).

use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

struct Slot<T> {
    stamp: AtomicUsize,
    rec: UnsafeCell<MaybeUninit<T>>,
}

/// The shared part of a lane (one per producer a queue ever had at the same time).
pub(crate) struct Lane<T> {
    /// The next position to take.
    head: CachePadded<AtomicUsize>,
    /// The producer's next position, published for [`Lane::len`] only.
    tail: CachePadded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    mask: usize,
    overflow: SegQueue<T>,
    /// A [`Producer`] of this lane exists.
    owned: AtomicBool,
}

// SAFETY: a record is written only by the one producer (the `owned` flag hands the lane
// to one `Producer`, which is not `Clone`) into a slot whose stamp says it is free, and
// read only by the consumer whose compare-and-swap of `head` claimed that position; the
// stamp's release store and acquire load order the record's bytes between them. `T` must
// be `Send` for records to move across threads.
unsafe impl<T: Send> Sync for Lane<T> {}
// SAFETY: as above; the lane owns its records.
unsafe impl<T: Send> Send for Lane<T> {}

impl<T> Lane<T> {
    /// A lane with room for `capacity` records (rounded up to a power of two).
    pub(crate) fn new(capacity: usize) -> Lane<T> {
        let cap = capacity.max(1).next_power_of_two();
        Lane {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots: (0..cap)
                .map(|i| Slot {
                    stamp: AtomicUsize::new(i),
                    rec: UnsafeCell::new(MaybeUninit::uninit()),
                })
                .collect(),
            mask: cap - 1,
            overflow: SegQueue::new(),
            owned: AtomicBool::new(false),
        }
    }

    /// Records waiting (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let t = self.tail.load(Ordering::Acquire);
        let h = self.head.load(Ordering::Acquire);
        t.saturating_sub(h) + self.overflow.len()
    }

    /// The lane for a new producer, if no producer holds it.
    pub(crate) fn claim(self: &Arc<Self>) -> Option<Producer<T>> {
        self.owned
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Some(Producer {
            tail: self.tail.load(Ordering::Relaxed),
            spilling: !self.overflow.is_empty(),
            lane: self.clone(),
        })
    }

    /// Takes up to `out.len()` records, oldest first, handing each to `put`; returns how
    /// many. Never blocks: a run another consumer claimed first is simply not seen.
    #[inline]
    pub(crate) fn pop_into(&self, max: usize, mut put: impl FnMut(T)) -> usize {
        if max == 0 {
            return 0;
        }
        let (h, k) = loop {
            let h = self.head.load(Ordering::Relaxed);
            let mut k = 0;
            while k < max
                && self.slots[h.wrapping_add(k) & self.mask]
                    .stamp
                    .load(Ordering::Acquire)
                    == h.wrapping_add(k + 1)
            {
                k += 1;
            }
            if k == 0 {
                break (h, 0);
            }
            if self
                .head
                .compare_exchange_weak(h, h.wrapping_add(k), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                break (h, k);
            }
        };
        let cap = self.mask + 1;
        for i in 0..k {
            let p = h.wrapping_add(i);
            let s = &self.slots[p & self.mask];
            // SAFETY: the compare-and-swap above made this consumer the only owner of
            // position `p`, whose stamp (acquired above) said the producer wrote it.
            let rec = unsafe { (*s.rec.get()).assume_init_read() };
            s.stamp.store(p.wrapping_add(cap), Ordering::Release);
            put(rec);
        }
        // The run stopped short of `max` only where the ring had nothing more: what
        // waits in the overflow list is newer than all of it.
        let mut n = k;
        while n < max {
            match self.overflow.pop() {
                Some(rec) => put(rec),
                None => break,
            }
            n += 1;
        }
        n
    }
}

impl<T> Drop for Lane<T> {
    fn drop(&mut self) {
        // No producer and no consumer is left: the records not taken are the run of
        // published positions from the head on (consumers take runs from the head, so
        // there is no gap).
        let mut p = *self.head.get_mut();
        for _ in 0..=self.mask {
            let s = &mut self.slots[p & self.mask];
            if *s.stamp.get_mut() != p.wrapping_add(1) {
                break;
            }
            // SAFETY: the stamp says position `p`'s record was written and, being at or
            // after the head, never taken.
            unsafe { s.rec.get_mut().assume_init_drop() };
            p = p.wrapping_add(1);
        }
    }
}

/// The right to push into a lane; releasing it (drop) lets another worker claim the lane.
pub(crate) struct Producer<T> {
    lane: Arc<Lane<T>>,
    /// The next position to write (the producer's own copy of the lane's tail).
    tail: usize,
    /// Records go to the overflow list (set when the ring was full, cleared once the
    /// list was found empty): nothing may overtake what waits there.
    spilling: bool,
}

impl<T> Producer<T> {
    /// Adds a record; never waits.
    #[inline]
    pub(crate) fn push(&mut self, rec: T) {
        let lane = &*self.lane;
        if self.spilling {
            if !lane.overflow.is_empty() {
                lane.overflow.push(rec);
                return;
            }
            self.spilling = false;
        }
        let t = self.tail;
        let s = &lane.slots[t & lane.mask];
        if s.stamp.load(Ordering::Acquire) != t {
            self.spilling = true;
            lane.overflow.push(rec);
            return;
        }
        // SAFETY: this is the lane's only producer, and the stamp (acquired above) says
        // the consumer that last held this slot has copied its record out.
        unsafe { (*s.rec.get()).write(rec) };
        s.stamp.store(t.wrapping_add(1), Ordering::Release);
        self.tail = t.wrapping_add(1);
        lane.tail.store(self.tail, Ordering::Release);
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        self.lane.owned.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(l: &Lane<u64>, max: usize) -> Vec<u64> {
        let mut v = Vec::new();
        l.pop_into(max, |x| v.push(x));
        v
    }

    #[test]
    fn keeps_order_through_the_overflow_list() {
        let l = Arc::new(Lane::<u64>::new(4));
        let mut p = l.claim().unwrap();
        assert!(l.claim().is_none(), "one producer at a time");
        for i in 0..10 {
            p.push(i);
        }
        assert_eq!(l.len(), 10);
        assert_eq!(take(&l, 3), vec![0, 1, 2]);
        // Still spilling: this goes behind the overflow list.
        p.push(10);
        assert_eq!(take(&l, 100), (3..11).collect::<Vec<_>>());
        // Back on the ring once the list was drained.
        p.push(11);
        assert_eq!(l.overflow.len(), 0);
        assert_eq!(take(&l, 100), vec![11]);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn a_released_lane_is_claimed_again_where_it_stood() {
        let l = Arc::new(Lane::<u64>::new(2));
        let mut p = l.claim().unwrap();
        p.push(1);
        drop(p);
        let mut q = l.claim().unwrap();
        q.push(2);
        q.push(3);
        assert_eq!(take(&l, 10), vec![1, 2, 3]);
    }

    #[test]
    fn unread_records_are_dropped_with_the_lane() {
        let counter = Arc::new(());
        {
            let l = Arc::new(Lane::<Arc<()>>::new(4));
            let mut p = l.claim().unwrap();
            for _ in 0..6 {
                p.push(counter.clone());
            }
            let mut got = Vec::new();
            l.pop_into(1, |x| got.push(x));
            drop(got);
            assert_eq!(Arc::strong_count(&counter), 6);
        }
        assert_eq!(Arc::strong_count(&counter), 1);
    }

    #[test]
    fn one_producer_many_consumers_see_each_record_once() {
        let l = Arc::new(Lane::<u64>::new(64));
        let total = 100_000u64;
        let taken = Arc::new(AtomicUsize::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (l, taken) = (l.clone(), taken.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    while taken.load(Ordering::Relaxed) < total as usize
                        && std::time::Instant::now() < deadline
                    {
                        let n = l.pop_into(16, |x| got.push(x));
                        taken.fetch_add(n, Ordering::Relaxed);
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                    got
                })
            })
            .collect();
        let mut p = l.claim().unwrap();
        for i in 0..total {
            p.push(i);
        }
        let mut all = Vec::new();
        for c in consumers {
            all.extend(c.join().unwrap());
        }
        all.sort_unstable();
        assert_eq!(all, (0..total).collect::<Vec<_>>());
    }
}
