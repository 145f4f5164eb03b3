//! Spare byte buffers, for bytes that must outlive the packet that brought them: an
//! unexpected eager message waiting for its receive, stream bytes waiting for a reader,
//! an active message queued for its C handler. Steady traffic takes its buffers back from
//! here instead of allocating and freeing one per message (DESIGN, rule 7).
//!
//! A spare buffer serves a message of any length: [`BufPool::take`] hands out the most
//! recently returned one and makes room in it, so a buffer grows in place when a longer
//! message comes and then keeps that capacity. There are no size classes on purpose: a
//! class lookup on every message cost more than the occasional growth (measured in the
//! stream and active-message paths, docs/performance.md, session 15).
//!
//! Invariants:
//! - every spare buffer is empty and has a capacity of at least 1 and at most `max_cap`;
//! - at most `max_count` buffers wait, and their capacities add up to at most `max_bytes`
//!   (`bytes` is that sum): the pool holds on to a burst's memory only within those
//!   bounds. A returned buffer beyond them is freed.

use crate::sys::copy;

/// Spare buffers; see the module documentation.
#[derive(Debug)]
pub struct BufPool {
    spare: Vec<Vec<u8>>,
    /// Capacity of all spare buffers together.
    bytes: usize,
    max_cap: usize,
    max_count: usize,
    max_bytes: usize,
}

impl BufPool {
    /// A pool that keeps buffers of at most `max_cap` bytes of capacity, at most
    /// `max_count` of them and `max_bytes` of capacity in all.
    pub fn new(max_cap: usize, max_count: usize, max_bytes: usize) -> BufPool {
        BufPool {
            spare: Vec::new(),
            bytes: 0,
            max_cap,
            max_count,
            max_bytes,
        }
    }

    /// An empty buffer with room for `len` bytes: the most recently returned spare one
    /// (grown if it is smaller), or a new one; a new one of exactly `len` bytes when that
    /// is more than the pool keeps (a spare one would only grow out of the pool).
    #[inline(always)]
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if len > self.max_cap {
            return Vec::with_capacity(len);
        }
        match self.spare.pop() {
            Some(mut v) => {
                self.bytes -= v.capacity();
                v.reserve(len);
                v
            }
            None => Vec::with_capacity(len),
        }
    }

    /// A buffer holding a copy of `data` ([`BufPool::take`], then the copy).
    #[inline(always)]
    pub fn keep(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.take(data.len());
        copy::extend(&mut v, data);
        v
    }

    /// Gives a buffer back for a later [`BufPool::take`]: kept, emptied, when the bounds
    /// allow it; freed otherwise.
    #[inline]
    pub fn give(&mut self, mut v: Vec<u8>) {
        let cap = v.capacity();
        if cap == 0
            || cap > self.max_cap
            || self.spare.len() >= self.max_count
            || self.bytes + cap > self.max_bytes
        {
            return;
        }
        v.clear();
        self.bytes += cap;
        self.spare.push(v);
    }

    /// The number of spare buffers.
    pub fn spare_count(&self) -> usize {
        self.spare.len()
    }

    /// The capacity of all spare buffers together.
    pub fn spare_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reuse_and_growth() {
        let mut p = BufPool::new(4096, 4, 1 << 20);
        let a = p.keep(&[7u8; 10]);
        assert_eq!(a, [7u8; 10]);
        let ptr = a.as_ptr();
        let cap = a.capacity();
        p.give(a);
        assert_eq!((p.spare_count(), p.spare_bytes()), (1, cap));
        let b = p.keep(&[1, 2, 3]);
        assert_eq!(b.as_ptr(), ptr, "the spare buffer is taken back");
        assert_eq!(b, [1, 2, 3]);
        assert_eq!((p.spare_count(), p.spare_bytes()), (0, 0));
        p.give(b);
        // A longer message grows the spare buffer in place of a new one.
        let c = p.keep(&[5u8; 1000]);
        assert_eq!(c, [5u8; 1000]);
        assert!(c.capacity() >= 1000);
        p.give(c);
        assert_eq!(p.spare_count(), 1);
        // Beyond the largest capacity kept, or empty: freed; and a longer message gets a
        // buffer of its own, leaving the spare one.
        let big = p.keep(&[9u8; 5000]);
        assert_eq!(p.spare_count(), 1);
        p.give(big);
        p.give(Vec::with_capacity(5000));
        p.give(Vec::new());
        assert_eq!(p.spare_count(), 1);
    }

    #[test]
    fn bounds_hold() {
        let mut p = BufPool::new(1024, 3, 1500);
        let bufs: Vec<Vec<u8>> = (0..5).map(|_| p.take(1000)).collect();
        for v in bufs {
            p.give(v);
        }
        assert_eq!(p.spare_count(), 1, "max_bytes bounds it");
        let small: Vec<Vec<u8>> = (0..5).map(|_| Vec::with_capacity(100)).collect();
        for v in small {
            p.give(v);
        }
        assert_eq!(p.spare_count(), 3, "max_count bounds it");
        assert!(p.spare_bytes() <= 1500);
    }

    proptest! {
        /// Any sequence of keeps and gives keeps the bounds, and every kept copy holds
        /// exactly its data.
        #[test]
        fn any_sequence(ops in proptest::collection::vec((0usize..3000, any::<bool>()), 1..200)) {
            let mut p = BufPool::new(2048, 3, 6000);
            let mut held: Vec<(Vec<u8>, u8)> = Vec::new();
            for (i, (len, give)) in ops.into_iter().enumerate() {
                if give && !held.is_empty() {
                    let (v, fill) = held.swap_remove(len % held.len());
                    prop_assert!(v.iter().all(|&x| x == fill));
                    p.give(v);
                } else {
                    let fill = i as u8;
                    let v = p.keep(&vec![fill; len]);
                    prop_assert_eq!(v.len(), len);
                    prop_assert!(v.iter().all(|&x| x == fill));
                    held.push((v, fill));
                }
                prop_assert!(p.spare.len() <= 3);
                let sum: usize = p.spare.iter().map(Vec::capacity).sum();
                prop_assert_eq!(sum, p.spare_bytes());
                prop_assert!(sum <= 6000);
                prop_assert!(p
                    .spare
                    .iter()
                    .all(|v| v.is_empty() && v.capacity() > 0 && v.capacity() <= 2048));
            }
        }
    }
}
