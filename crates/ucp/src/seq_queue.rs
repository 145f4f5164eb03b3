//! [`SeqQueue`]: the first-in first-out queue of one tag's bucket in the matcher, entries
//! `(sequence number, payload)` in increasing sequence, with the first entry held inline.
//!
//! A tag in steady traffic (a ping-pong, a message-rate loop) has at most one receive or
//! one message waiting at a time. Holding that entry in the bucket itself makes a post
//! and its match a store and a load, where a ring buffer pays for its index arithmetic
//! and wrap-around on both. Deeper queues go on in a `VecDeque` behind the inline entry.
//!
//! Invariants: `rest` is empty whenever `head` is `None`; sequence numbers increase from
//! `head` through `rest` (the callers push in sequence order), so an entry is found by
//! binary search.

use std::collections::VecDeque;

pub(crate) struct SeqQueue<T> {
    head: Option<(u64, T)>,
    rest: VecDeque<(u64, T)>,
}

impl<T> Default for SeqQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SeqQueue<T> {
    pub(crate) fn new() -> Self {
        Self {
            head: None,
            rest: VecDeque::new(),
        }
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// Appends `x` with sequence number `seq`, which must exceed every one queued.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, seq: u64, x: T) {
        debug_assert!(
            self.back_seq().map_or(true, |b| b < seq),
            "sequence numbers increase"
        );
        if self.head.is_none() {
            self.head = Some((seq, x));
        } else {
            self.rest.push_back((seq, x));
        }
    }

    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<(u64, T)> {
        let first = self.head.take()?;
        if !self.rest.is_empty() {
            self.head = self.rest.pop_front();
        }
        Some(first)
    }

    /// Removes the first entry without moving or dropping its payload, for a payload
    /// the caller saw to own nothing (forgetting one that does leaks it). Nothing happens
    /// when the queue is empty.
    #[inline(always)]
    pub(crate) fn forget_front(&mut self) {
        let next = if self.rest.is_empty() {
            None
        } else {
            self.rest.pop_front()
        };
        std::mem::forget(std::mem::replace(&mut self.head, next));
    }

    #[inline(always)]
    pub(crate) fn front(&self) -> Option<&(u64, T)> {
        self.head.as_ref()
    }

    #[inline(always)]
    pub(crate) fn front_mut(&mut self) -> Option<&mut (u64, T)> {
        self.head.as_mut()
    }

    fn back_seq(&self) -> Option<u64> {
        self.rest.back().or(self.head.as_ref()).map(|e| e.0)
    }

    /// Every entry, first to last.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(u64, T)> + '_ {
        self.head.iter().chain(self.rest.iter())
    }

    /// Where `seq` is in `rest`.
    fn position_in_rest(&self, seq: u64) -> Option<usize> {
        match self.rest.back() {
            Some(&(last, _)) if last == seq => Some(self.rest.len() - 1),
            _ => self.rest.binary_search_by_key(&seq, |&(s, _)| s).ok(),
        }
    }

    /// The payload queued with `seq`.
    pub(crate) fn get(&self, seq: u64) -> Option<&T> {
        match &self.head {
            Some((s, x)) if *s == seq => Some(x),
            Some(_) => Some(&self.rest[self.position_in_rest(seq)?].1),
            None => None,
        }
    }

    /// The payload queued with `seq`, for modification.
    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        match &self.head {
            Some((s, _)) if *s == seq => self.head.as_mut().map(|e| &mut e.1),
            Some(_) => {
                let i = self.position_in_rest(seq)?;
                Some(&mut self.rest[i].1)
            }
            None => None,
        }
    }

    /// Takes the entry with `seq` out of the queue, wherever it is.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<T> {
        match &self.head {
            Some((s, _)) if *s == seq => self.pop_front().map(|e| e.1),
            Some(_) => {
                let i = self.position_in_rest(seq)?;
                self.rest.remove(i).map(|e| e.1)
            }
            None => None,
        }
    }

    /// Empties the queue, giving its entries first to last. The spare room stays.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (u64, T)> + '_ {
        self.head.take().into_iter().chain(self.rest.drain(..))
    }

    /// Entries the queue holds without allocating.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        1 + self.rest.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Push,
        Pop,
        Forget,
        Remove(usize),
        Get(usize),
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Push),
            3 => Just(Op::Pop),
            1 => Just(Op::Forget),
            2 => (0usize..8).prop_map(Op::Remove),
            2 => (0usize..8).prop_map(Op::Get),
            1 => Just(Op::Drain),
        ]
    }

    proptest! {
        /// The queue behaves as a `VecDeque` of `(seq, payload)` searched linearly.
        #[test]
        fn matches_a_plain_deque(ops in prop::collection::vec(op(), 0..200), gaps in prop::collection::vec(1u64..4, 200)) {
            let mut q = SeqQueue::new();
            let mut model: VecDeque<(u64, u64)> = VecDeque::new();
            let mut seq = 0u64;
            for (k, o) in ops.into_iter().enumerate() {
                match o {
                    Op::Push => {
                        seq += gaps[k];
                        q.push_back(seq, seq * 10);
                        model.push_back((seq, seq * 10));
                    }
                    Op::Pop => prop_assert_eq!(q.pop_front(), model.pop_front()),
                    Op::Forget => {
                        q.forget_front();
                        model.pop_front();
                    }
                    Op::Remove(i) => {
                        // An existing entry (by position) or one that is not there.
                        let s = model.get(i).map_or(seq + 1, |e| e.0);
                        let want = model.iter().position(|e| e.0 == s).and_then(|p| model.remove(p)).map(|e| e.1);
                        prop_assert_eq!(q.remove(s), want);
                    }
                    Op::Get(i) => {
                        let s = model.get(i).map_or(seq + 1, |e| e.0);
                        let want = model.iter().find(|e| e.0 == s).map(|e| e.1);
                        prop_assert_eq!(q.get(s).copied(), want);
                        if let Some(x) = q.get_mut(s) {
                            *x += 1;
                            if let Some(e) = model.iter_mut().find(|e| e.0 == s) {
                                e.1 += 1;
                            }
                        }
                    }
                    Op::Drain => {
                        let got: Vec<_> = q.drain().collect();
                        let want: Vec<_> = model.drain(..).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
                prop_assert_eq!(q.front().copied(), model.front().copied());
                let all: Vec<_> = q.iter().copied().collect();
                let want: Vec<_> = model.iter().copied().collect();
                prop_assert_eq!(all, want);
                // The inline entry is used before the deque.
                prop_assert!(q.head.is_some() || q.rest.is_empty());
            }
        }
    }

    #[test]
    fn front_mut_changes_the_first_payload() {
        let mut q = SeqQueue::new();
        q.push_back(1, 'a');
        q.push_back(2, 'b');
        if let Some(e) = q.front_mut() {
            e.1 = 'z';
        }
        assert_eq!(q.pop_front(), Some((1, 'z')));
        assert_eq!(q.pop_front(), Some((2, 'b')));
        assert_eq!(q.pop_front(), None);
    }
}
