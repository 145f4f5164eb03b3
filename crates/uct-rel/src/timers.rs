//! An indexed binary min-heap of per-peer deadlines: at most one entry per peer, which is
//! moved (not duplicated) when the peer's deadline changes, so the heap never holds stale
//! entries and [`TimerHeap::peek`] is the exact next deadline.
//!
//! Only peers with something pending (unacknowledged data, an acknowledgement owed, a
//! probe, or a keepalive) have an entry; an idle peer costs its 4-byte position slot and
//! nothing else, and is never visited by the timer code.

use crate::pool::NIL;

pub(crate) struct TimerHeap {
    /// (deadline, peer index), a min-heap on deadline.
    heap: Vec<(u64, u32)>,
    /// Position in `heap` of each peer's entry, or NIL.
    pos: Vec<u32>,
}

impl TimerHeap {
    pub fn new() -> Self {
        Self {
            heap: Vec::new(),
            pos: Vec::new(),
        }
    }

    /// Makes room for peer indices below `n`.
    pub fn grow(&mut self, n: usize) {
        if self.pos.len() < n {
            self.pos.resize(n, NIL);
        }
    }

    pub fn peek(&self) -> Option<(u64, u32)> {
        self.heap.first().copied()
    }

    /// Peers with an armed timer.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// The peer's current deadline.
    pub fn get(&self, peer: u32) -> Option<u64> {
        match self.pos.get(peer as usize) {
            Some(&p) if p != NIL => Some(self.heap[p as usize].0),
            _ => None,
        }
    }

    /// Sets (`Some`) or clears (`None`) the deadline of `peer`.
    pub fn set(&mut self, peer: u32, deadline: Option<u64>) {
        let cur = self.pos[peer as usize];
        match (cur, deadline) {
            (NIL, None) => {}
            (NIL, Some(d)) => {
                self.heap.push((d, peer));
                let i = self.heap.len() - 1;
                self.pos[peer as usize] = i as u32;
                self.sift_up(i);
            }
            (p, None) => {
                let p = p as usize;
                let last = self.heap.len() - 1;
                self.swap(p, last);
                self.heap.pop();
                self.pos[peer as usize] = NIL;
                if p < self.heap.len() {
                    self.sift_down(p);
                    self.sift_up(p);
                }
            }
            (p, Some(d)) => {
                let p = p as usize;
                let old = self.heap[p].0;
                if d < old {
                    self.heap[p].0 = d;
                    self.sift_up(p);
                } else if d > old {
                    self.heap[p].0 = d;
                    self.sift_down(p);
                }
            }
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i].0 >= self.heap[parent].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let l = 2 * i + 1;
            if l >= self.heap.len() {
                break;
            }
            let r = l + 1;
            let c = if r < self.heap.len() && self.heap[r].0 < self.heap[l].0 {
                r
            } else {
                l
            };
            if self.heap[c].0 >= self.heap[i].0 {
                break;
            }
            self.swap(i, c);
            i = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_a_model(
            ops in proptest::collection::vec((0u32..16, proptest::option::of(0u64..50)), 0..200)
        ) {
            let mut h = TimerHeap::new();
            h.grow(16);
            let mut model = [None::<u64>; 16];
            for (peer, d) in ops {
                h.set(peer, d);
                model[peer as usize] = d;
                let min = model
                    .iter()
                    .enumerate()
                    .filter_map(|(i, d)| d.map(|d| (d, i as u32)))
                    .min_by_key(|x| x.0);
                prop_assert_eq!(h.peek().map(|x| x.0), min.map(|x| x.0));
                prop_assert_eq!(h.len(), model.iter().filter(|d| d.is_some()).count());
                for (i, d) in model.iter().enumerate() {
                    prop_assert_eq!(h.get(i as u32), *d);
                }
            }
        }
    }
}
