//! Spare byte buffers by size class, for bytes that must outlive the packet that brought
//! them: an unexpected eager message waiting for its receive, stream bytes waiting for a
//! reader, an active message queued for its C handler. Steady traffic takes its buffers
//! back from here instead of allocating and freeing one per message (DESIGN, rule 7).
//!
//! Classes are the powers of two from [`MIN_CLASS`] up to the pool's largest class. A
//! request for `len` bytes gets an empty buffer of the smallest class that holds it, or an
//! exact allocation beyond the largest class (never kept).
//!
//! Invariants:
//! - every spare buffer is empty, and its capacity is the power of two of its class, so a
//!   returned buffer is filed by its capacity alone (one that fits no class is freed);
//! - at most `per_class` buffers wait in each class, and their capacities add up to at
//!   most `max_bytes`: the pool holds on to a burst's memory only within those bounds.

use crate::sys::copy;

/// The smallest class: a request for fewer bytes still gets this much.
pub const MIN_CLASS: usize = 64;

/// Spare buffers by size class; see the module documentation.
#[derive(Debug)]
pub struct BufPool {
    /// `spare[k]` holds empty buffers of capacity `MIN_CLASS << k`.
    spare: Vec<Vec<Vec<u8>>>,
    per_class: usize,
    max_bytes: usize,
    /// Capacity of all spare buffers together.
    bytes: usize,
}

impl BufPool {
    /// A pool whose largest class holds `largest` bytes (rounded up to a power of two, and
    /// at least [`MIN_CLASS`]), keeping at most `per_class` buffers a class and
    /// `max_bytes` of capacity in all.
    pub fn new(largest: usize, per_class: usize, max_bytes: usize) -> BufPool {
        let classes = class_of(largest.max(MIN_CLASS).next_power_of_two()) + 1;
        BufPool {
            spare: (0..classes).map(|_| Vec::new()).collect(),
            per_class,
            max_bytes,
            bytes: 0,
        }
    }

    /// The largest class's capacity.
    #[inline]
    pub fn largest(&self) -> usize {
        MIN_CLASS << (self.spare.len() - 1)
    }

    /// An empty buffer with room for `len` bytes: a spare one of the smallest class that
    /// holds them when there is one, else a new one of that class's capacity (or of
    /// exactly `len` bytes, beyond the largest class).
    #[inline]
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if len > self.largest() {
            return Vec::with_capacity(len);
        }
        let cap = len.max(MIN_CLASS).next_power_of_two();
        match self.spare[class_of(cap)].pop() {
            Some(v) => {
                self.bytes -= cap;
                v
            }
            None => Vec::with_capacity(cap),
        }
    }

    /// A buffer holding a copy of `data` ([`BufPool::take`], then the copy).
    #[inline]
    pub fn keep(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.take(data.len());
        copy::extend(&mut v, data);
        v
    }

    /// Gives a buffer back for a later [`BufPool::take`]. Kept, emptied, when its
    /// capacity is one of the classes and both bounds allow it; freed otherwise.
    #[inline]
    pub fn give(&mut self, mut v: Vec<u8>) {
        let cap = v.capacity();
        if !cap.is_power_of_two() || cap < MIN_CLASS || cap > self.largest() {
            return;
        }
        let k = class_of(cap);
        if self.spare[k].len() >= self.per_class || self.bytes + cap > self.max_bytes {
            return;
        }
        v.clear();
        self.bytes += cap;
        self.spare[k].push(v);
    }

    /// The number of spare buffers.
    pub fn spare_count(&self) -> usize {
        self.spare.iter().map(Vec::len).sum()
    }

    /// The capacity of all spare buffers together.
    pub fn spare_bytes(&self) -> usize {
        self.bytes
    }
}

/// The class index of a power-of-two capacity of at least [`MIN_CLASS`].
#[inline]
fn class_of(cap: usize) -> usize {
    (cap.trailing_zeros() - MIN_CLASS.trailing_zeros()) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn classes_and_reuse() {
        let mut p = BufPool::new(4096, 4, 1 << 20);
        assert_eq!(p.largest(), 4096);
        let a = p.keep(&[7u8; 10]);
        assert_eq!((a.as_slice(), a.capacity()), (&[7u8; 10][..], 64));
        let b = p.take(65);
        assert_eq!((b.len(), b.capacity()), (0, 128));
        let ptr = a.as_ptr();
        p.give(a);
        assert_eq!((p.spare_count(), p.spare_bytes()), (1, 64));
        let c = p.keep(&[1, 2, 3]);
        assert_eq!(c.as_ptr(), ptr, "the spare buffer is taken back");
        assert_eq!(c, [1, 2, 3]);
        assert_eq!((p.spare_count(), p.spare_bytes()), (0, 0));
        // Beyond the largest class: exact, and not kept.
        let big = p.keep(&vec![9u8; 5000]);
        assert!(big.capacity() >= 5000 && big.iter().all(|&x| x == 9));
        p.give(big);
        assert_eq!(p.spare_count(), 0);
        // A capacity that is not a class is freed.
        p.give(Vec::with_capacity(100));
        p.give(Vec::with_capacity(32));
        assert_eq!(p.spare_count(), 0);
        p.give(b);
        assert_eq!(p.spare_bytes(), 128);
    }

    #[test]
    fn bounds_hold() {
        let mut p = BufPool::new(1024, 2, 1024 + 256);
        let bufs: Vec<Vec<u8>> = (0..4).map(|_| p.take(1000)).collect();
        for v in bufs {
            p.give(v);
        }
        assert_eq!(
            (p.spare_count(), p.spare_bytes()),
            (1, 1024),
            "max_bytes bounds it"
        );
        for _ in 0..3 {
            let v = p.take(200);
            p.give(v);
        }
        let small: Vec<Vec<u8>> = (0..3).map(|_| p.take(200)).collect();
        for v in small {
            p.give(v);
        }
        assert_eq!(
            p.spare_count(),
            2,
            "one 256-byte buffer fits beside the 1024"
        );
        assert_eq!(p.spare_bytes(), 1280);
    }

    proptest! {
        /// Any sequence of takes and gives keeps the bounds, gives out buffers that hold
        /// what was asked, and every kept copy holds exactly its data.
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
                    prop_assert!(v.capacity() >= len.max(MIN_CLASS));
                    prop_assert!(v.iter().all(|&x| x == fill));
                    held.push((v, fill));
                }
                prop_assert!(p.spare_bytes() <= 6000);
                prop_assert!(p.spare.iter().all(|c| c.len() <= 3));
                let sum: usize = p
                    .spare
                    .iter()
                    .flat_map(|c| c.iter().map(|v| v.capacity()))
                    .sum();
                prop_assert_eq!(sum, p.spare_bytes());
                prop_assert!(p.spare.iter().flatten().all(Vec::is_empty));
            }
        }
    }
}
