//! A sans-IO timer queue, and the monotonic clock that callers feed it with.
//!
//! The queue never reads a clock: every call that depends on time takes `now` in
//! nanoseconds, so engines built on it (retransmission, keepalive, wireup timeouts) run
//! under virtual time in tests and under [`now_ns`] in production.
//!
//! Invariants:
//! - timers expire in deadline order; timers with equal deadlines expire in the order they
//!   were added;
//! - a [`TimerId`] is valid from `add` until its timer expires or is cancelled, and never
//!   again afterwards (ids are generation-checked pool indices);
//! - cancellation is lazy (the heap entry stays until it reaches the top), but the top of
//!   the heap is always a live timer, and the heap is compacted when dead entries outnumber
//!   live ones, so memory stays proportional to the live timers.

use crate::pool::{Pool, PoolIdx};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Nanoseconds on the `CLOCK_MONOTONIC` clock: comparable between all processes of one
/// host, never going backwards, unaffected by changes of the wall clock.
pub fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // The monotonic clock is non-negative by definition.
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Handle of a pending timer in a [`TimerQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId(PoolIdx);

impl TimerId {
    /// Packs the id into 64 bits (e.g. to keep it in a C structure).
    pub fn to_u64(self) -> u64 {
        self.0.to_u64()
    }

    /// The inverse of [`TimerId::to_u64`]; a value never handed out names no timer.
    pub fn from_u64(v: u64) -> TimerId {
        TimerId(PoolIdx::from_u64(v))
    }
}

struct Pending<T> {
    deadline: u64,
    seq: u64,
    value: T,
}

/// Heap key: deadline, then insertion sequence, then the timer's slot.
type Key = Reverse<(u64, u64, u64)>;

/// Timers carrying a `T`, ordered by deadline (nanoseconds of any clock the caller chooses).
pub struct TimerQueue<T> {
    timers: Pool<Pending<T>>,
    heap: BinaryHeap<Key>,
    next_seq: u64,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        TimerQueue::new()
    }
}

impl<T> TimerQueue<T> {
    /// An empty queue.
    pub fn new() -> TimerQueue<T> {
        TimerQueue {
            timers: Pool::new(),
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.timers.len()
    }

    /// True when no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// Schedules `value` to expire at `deadline` (a deadline in the past expires at the
    /// next [`TimerQueue::expire`]).
    pub fn add(&mut self, deadline: u64, value: T) -> TimerId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let idx = self.timers.get(Pending {
            deadline,
            seq,
            value,
        });
        self.heap.push(Reverse((deadline, seq, idx.to_u64())));
        TimerId(idx)
    }

    /// Removes a pending timer and returns its value; `None` if it already expired or was
    /// cancelled.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let p = self.timers.put(id.0)?;
        self.drop_dead_top();
        if self.heap.len() > 2 * self.timers.len() + 64 {
            self.compact();
        }
        Some(p.value)
    }

    /// The deadline of a pending timer.
    pub fn deadline(&self, id: TimerId) -> Option<u64> {
        self.timers.get_ref(id.0).map(|p| p.deadline)
    }

    /// The earliest deadline, if any timer is pending: how long a caller may sleep.
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((deadline, _, _))| *deadline)
    }

    /// Removes and returns the earliest timer if its deadline is at or before `now`. Unlike
    /// [`TimerQueue::expire`] this lets the caller re-arm timers between expirations.
    pub fn pop_expired(&mut self, now: u64) -> Option<(TimerId, T)> {
        let &Reverse((deadline, _, raw)) = self.heap.peek()?;
        if deadline > now {
            return None;
        }
        self.heap.pop();
        let idx = PoolIdx::from_u64(raw);
        let p = self
            .timers
            .put(idx)
            .expect("the top of the heap is always a live timer");
        self.drop_dead_top();
        Some((TimerId(idx), p.value))
    }

    /// Calls `f` for every timer whose deadline is at or before `now`, earliest first (ties
    /// in the order they were added), removing them. Returns how many expired.
    pub fn expire(&mut self, now: u64, mut f: impl FnMut(TimerId, T)) -> usize {
        let mut n = 0;
        while let Some((id, value)) = self.pop_expired(now) {
            f(id, value);
            n += 1;
        }
        n
    }

    /// Pops cancelled entries until the top is live, keeping `next_deadline` exact.
    fn drop_dead_top(&mut self) {
        while let Some(&Reverse((_, seq, raw))) = self.heap.peek() {
            if self.is_live(seq, raw) {
                break;
            }
            self.heap.pop();
        }
    }

    fn is_live(&self, seq: u64, raw: u64) -> bool {
        self.timers
            .get_ref(PoolIdx::from_u64(raw))
            .is_some_and(|p| p.seq == seq)
    }

    #[cold]
    fn compact(&mut self) {
        let heap = std::mem::take(&mut self.heap);
        self.heap = heap
            .into_iter()
            .filter(|Reverse((_, seq, raw))| self.is_live(*seq, *raw))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clock_is_monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn order_ties_and_cancel() {
        let mut q = TimerQueue::new();
        assert_eq!(q.next_deadline(), None);
        let late = q.add(30, "late");
        let first = q.add(10, "first");
        let _second = q.add(10, "second");
        let early = q.add(5, "cancelled");
        assert_eq!(q.next_deadline(), Some(5));
        assert_eq!(q.cancel(early), Some("cancelled"));
        assert_eq!(q.cancel(early), None);
        assert_eq!(q.next_deadline(), Some(10));
        assert_eq!(q.deadline(late), Some(30));

        let mut got = Vec::new();
        assert_eq!(q.expire(9, |_, v| got.push(v)), 0);
        assert_eq!(q.expire(10, |_, v| got.push(v)), 2);
        assert_eq!(got, ["first", "second"]);
        assert_eq!(q.cancel(first), None, "expired timers cannot be cancelled");
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_expired(100), Some((late, "late")));
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn cancel_heavy_use_stays_small() {
        let mut q = TimerQueue::new();
        let keep = q.add(u64::MAX, ());
        for i in 0..10_000 {
            let id = q.add(1_000 + i, ());
            q.cancel(id);
        }
        assert!(q.heap.len() < 200, "heap holds {} entries", q.heap.len());
        assert_eq!(q.next_deadline(), Some(u64::MAX));
        assert_eq!(q.cancel(keep), Some(()));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u64),
        Cancel(usize),
        Expire(u64),
    }

    proptest! {
        #[test]
        fn behaves_like_a_sorted_vec(ops in proptest::collection::vec(
            prop_oneof![
                3 => (0u64..100).prop_map(Op::Add),
                2 => any::<usize>().prop_map(Op::Cancel),
                1 => (0u64..120).prop_map(Op::Expire),
            ],
            0..200,
        )) {
            let mut q = TimerQueue::new();
            // Model: pending (deadline, value, id) in insertion order.
            let mut model: Vec<(u64, u32, TimerId)> = Vec::new();
            let mut issued: Vec<TimerId> = Vec::new();
            let mut next_value = 0u32;
            for op in ops {
                match op {
                    Op::Add(d) => {
                        let id = q.add(d, next_value);
                        prop_assert!(!issued.contains(&id));
                        issued.push(id);
                        model.push((d, next_value, id));
                        next_value += 1;
                    }
                    Op::Cancel(i) if !issued.is_empty() => {
                        let id = issued[i % issued.len()];
                        let want = model.iter().position(|e| e.2 == id).map(|p| model.remove(p).1);
                        prop_assert_eq!(q.cancel(id), want);
                    }
                    Op::Expire(now) => {
                        let mut got = Vec::new();
                        q.expire(now, |id, v| got.push((v, id)));
                        // A stable sort by deadline keeps insertion order among ties.
                        let mut due: Vec<_> = model.iter().copied().filter(|e| e.0 <= now).collect();
                        due.sort_by_key(|e| e.0);
                        model.retain(|e| e.0 > now);
                        let want: Vec<_> = due.into_iter().map(|e| (e.1, e.2)).collect();
                        prop_assert_eq!(got, want);
                    }
                    _ => {}
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.next_deadline(), model.iter().map(|e| e.0).min());
            }
        }
    }
}
