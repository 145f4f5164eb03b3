//! A pool of fixed-size objects (requests, descriptors) handed out by index.
//!
//! The fast path must not allocate (DESIGN, rule 7), so objects live in chunks that are
//! allocated only when the free list is empty and are never freed or moved while the pool
//! lives. A [`PoolIdx`] names a slot and the generation of the object in it, which makes a
//! stale index (one whose object was already returned) detectable instead of silently
//! aliasing the slot's next occupant.
//!
//! Invariants:
//! - a live object's address never changes until it is [`Pool::put`] back, so raw pointers
//!   to it taken by other layers stay valid;
//! - capacity grows by whole chunks, and only inside [`Pool::get`] when no slot is free (or
//!   in [`Pool::reserve`]);
//! - each slot's generation increases on every `put`; a slot whose generation is exhausted
//!   is retired rather than reused, so an index is never valid twice.

use std::fmt;

/// Handle of an object in a [`Pool`]: slot number and generation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolIdx {
    slot: u32,
    gen: u32,
}

impl PoolIdx {
    /// An index no pool hands out: its slot number is beyond any pool's capacity, so
    /// every lookup of it fails.
    pub const NONE: PoolIdx = PoolIdx {
        slot: u32::MAX,
        gen: u32::MAX,
    };

    /// The slot number (dense, below the pool's capacity); useful as an array index for
    /// side tables. Two live objects never share a slot.
    #[inline]
    pub fn slot(self) -> u32 {
        self.slot
    }

    /// Packs the index into 64 bits, e.g. to carry it in a wire header or C handle.
    #[inline]
    pub fn to_u64(self) -> u64 {
        (u64::from(self.gen) << 32) | u64::from(self.slot)
    }

    /// The inverse of [`PoolIdx::to_u64`]. Any value is accepted: a value that was never
    /// handed out just fails every lookup.
    #[inline]
    pub fn from_u64(v: u64) -> PoolIdx {
        PoolIdx {
            slot: v as u32,
            gen: (v >> 32) as u32,
        }
    }
}

impl fmt::Debug for PoolIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolIdx({}#{})", self.slot, self.gen)
    }
}

/// End of the free list.
const NIL: u32 = u32::MAX;

enum Entry<T> {
    Live(T),
    /// Free; `next` is the following free slot or [`NIL`].
    Free {
        next: u32,
    },
    /// Generation exhausted; never handed out again.
    Retired,
}

struct Slot<T> {
    gen: u32,
    entry: Entry<T>,
}

/// A growable pool of `T` with stable addresses and generation-checked indices.
pub struct Pool<T> {
    /// Boxed so that growing `chunks` moves only the boxes, never the objects.
    chunks: Vec<Box<[Slot<T>]>>,
    chunk_shift: u32,
    free_head: u32,
    len: usize,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool::new()
    }
}

impl<T> Pool<T> {
    /// Default number of objects per chunk.
    pub const DEFAULT_CHUNK: usize = 64;

    /// An empty pool that grows by [`Pool::DEFAULT_CHUNK`] objects. Allocates nothing yet.
    pub fn new() -> Pool<T> {
        Pool::with_chunk_size(Self::DEFAULT_CHUNK)
    }

    /// An empty pool that grows by `chunk` objects at a time (rounded up to a power of two,
    /// at least 1, so that slot lookups are a shift and a mask).
    pub fn with_chunk_size(chunk: usize) -> Pool<T> {
        let chunk = chunk.clamp(1, 1 << 24).next_power_of_two();
        Pool {
            chunks: Vec::new(),
            chunk_shift: chunk.trailing_zeros(),
            free_head: NIL,
            len: 0,
        }
    }

    /// Objects per chunk.
    #[inline]
    pub fn chunk_size(&self) -> usize {
        1 << self.chunk_shift
    }

    /// Number of live objects.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no object is live.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots allocated (live, free and retired).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.chunks.len() << self.chunk_shift
    }

    /// Makes sure `additional` more objects can be taken without allocating, so that setup
    /// code can move all allocation out of the fast path.
    pub fn reserve(&mut self, additional: usize) {
        let mut free = self.free_count();
        while free < additional {
            self.grow();
            free += self.chunk_size();
        }
    }

    /// Stores `value` in a free slot and returns its index. Allocates one chunk only when
    /// no slot is free.
    ///
    /// # Panics
    /// When the pool would exceed `u32::MAX - 1` slots.
    #[inline(always)]
    pub fn get(&mut self, value: T) -> PoolIdx {
        if self.free_head == NIL {
            self.grow();
        }
        let slot_no = self.free_head;
        let slot = self
            .slot_mut(slot_no)
            .expect("free list points into the pool");
        let Entry::Free { next } = slot.entry else {
            unreachable!("free list holds only free slots");
        };
        slot.entry = Entry::Live(value);
        let gen = slot.gen;
        self.free_head = next;
        self.len += 1;
        PoolIdx { slot: slot_no, gen }
    }

    /// Takes the object at `idx` out of the pool. `None` when `idx` is stale or was never
    /// handed out by this pool.
    pub fn put(&mut self, idx: PoolIdx) -> Option<T> {
        let free_head = self.free_head;
        let slot = self.slot_mut(idx.slot)?;
        if slot.gen != idx.gen || !matches!(slot.entry, Entry::Live(_)) {
            return None;
        }
        let reusable = slot.gen != u32::MAX;
        let old = if reusable {
            slot.gen += 1;
            std::mem::replace(&mut slot.entry, Entry::Free { next: free_head })
        } else {
            std::mem::replace(&mut slot.entry, Entry::Retired)
        };
        if reusable {
            self.free_head = idx.slot;
        }
        self.len -= 1;
        match old {
            Entry::Live(v) => Some(v),
            _ => unreachable!("checked live above"),
        }
    }

    /// Drops the object at `idx` where it lies (no move out, unlike [`Pool::put`]).
    /// Returns false when `idx` is stale or was never handed out by this pool.
    #[inline]
    pub fn remove(&mut self, idx: PoolIdx) -> bool {
        let free_head = self.free_head;
        let Some(slot) = self.slot_mut(idx.slot) else {
            return false;
        };
        if slot.gen != idx.gen || !matches!(slot.entry, Entry::Live(_)) {
            return false;
        }
        if vacate(slot, free_head) {
            self.free_head = idx.slot;
        }
        self.len -= 1;
        true
    }

    /// Shows the object at `idx` to `f` and, when `f` returns true, drops it where it lies
    /// (as [`Pool::remove`]): one lookup for a look and a removal. `None` when `idx` is
    /// stale or was never handed out by this pool; else whether the object was removed
    /// (when not, it stays live with whatever `f` changed).
    #[inline]
    pub fn remove_if(&mut self, idx: PoolIdx, f: impl FnOnce(&mut T) -> bool) -> Option<bool> {
        self.remove_with(idx, |v| if f(v) { Removal::Drop } else { Removal::Keep })
    }

    /// As [`Pool::remove_if`], but `f` also says how the object goes:
    /// [`Removal::Forget`] vacates its slot without running its destructor, for an object
    /// that `f` found to own nothing (then nothing is lost, and the drop's branches and
    /// call are saved on a hot path). Forgetting an object that does own something leaks
    /// it, which is safe but wasteful: `f` must only say so when it checked.
    #[inline(always)]
    pub fn remove_with(&mut self, idx: PoolIdx, f: impl FnOnce(&mut T) -> Removal) -> Option<bool> {
        let free_head = self.free_head;
        let slot = self.slot_mut(idx.slot)?;
        if slot.gen != idx.gen {
            return None;
        }
        let Entry::Live(v) = &mut slot.entry else {
            return None;
        };
        let reusable = match f(v) {
            Removal::Keep => return Some(false),
            Removal::Drop => vacate(slot, free_head),
            Removal::Forget => vacate_forget(slot, free_head),
        };
        if reusable {
            self.free_head = idx.slot;
        }
        self.len -= 1;
        Some(true)
    }

    /// The object at `idx`, if `idx` is live.
    #[inline]
    pub fn get_ref(&self, idx: PoolIdx) -> Option<&T> {
        match self.slot(idx.slot)? {
            Slot {
                gen,
                entry: Entry::Live(v),
            } if *gen == idx.gen => Some(v),
            _ => None,
        }
    }

    /// The object at `idx` for modification, if `idx` is live.
    #[inline]
    pub fn get_mut(&mut self, idx: PoolIdx) -> Option<&mut T> {
        match self.slot_mut(idx.slot)? {
            Slot {
                gen,
                entry: Entry::Live(v),
            } if *gen == idx.gen => Some(v),
            _ => None,
        }
    }

    /// Every live object, mutably, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.chunks
            .iter_mut()
            .flat_map(|c| c.iter_mut())
            .filter_map(|s| match &mut s.entry {
                Entry::Live(v) => Some(v),
                _ => None,
            })
    }

    /// True when `idx` names a live object.
    #[inline]
    pub fn contains(&self, idx: PoolIdx) -> bool {
        self.get_ref(idx).is_some()
    }

    /// Every live object with its index, in slot order (e.g. to cancel all outstanding
    /// requests when a worker is destroyed).
    pub fn iter(&self) -> impl Iterator<Item = (PoolIdx, &T)> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .enumerate()
            .filter_map(|(i, s)| match &s.entry {
                Entry::Live(v) => Some((
                    PoolIdx {
                        slot: i as u32,
                        gen: s.gen,
                    },
                    v,
                )),
                _ => None,
            })
    }

    #[inline]
    fn slot(&self, slot: u32) -> Option<&Slot<T>> {
        let chunk = self.chunks.get((slot >> self.chunk_shift) as usize)?;
        chunk.get(slot as usize & (self.chunk_size() - 1))
    }

    #[inline]
    fn slot_mut(&mut self, slot: u32) -> Option<&mut Slot<T>> {
        let mask = self.chunk_size() - 1;
        let chunk = self.chunks.get_mut((slot >> self.chunk_shift) as usize)?;
        chunk.get_mut(slot as usize & mask)
    }

    fn free_count(&self) -> usize {
        let mut n = 0;
        let mut at = self.free_head;
        while at != NIL {
            n += 1;
            at = match self.slot(at).map(|s| &s.entry) {
                Some(Entry::Free { next }) => *next,
                _ => unreachable!("free list holds only free slots"),
            };
        }
        n
    }

    /// Appends one chunk and threads its slots onto the free list, lowest slot first.
    #[cold]
    fn grow(&mut self) {
        let base = self.capacity();
        let chunk = self.chunk_size();
        // NIL must stay unusable as a slot number.
        assert!(
            base + chunk <= NIL as usize,
            "pool exceeds {} slots",
            NIL as usize
        );
        let old_head = self.free_head;
        let slots: Box<[Slot<T>]> = (0..chunk)
            .map(|i| Slot {
                // Generations start at 1, so that no index is ever 0 as a number
                // (`to_u64`): protocol headers use 0 for "no request".
                gen: 1,
                entry: Entry::Free {
                    next: if i + 1 < chunk {
                        (base + i + 1) as u32
                    } else {
                        old_head
                    },
                },
            })
            .collect();
        self.chunks.push(slots);
        self.free_head = base as u32;
    }
}

/// What [`Pool::remove_with`] does with the object it showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// It stays live (with whatever the closure changed).
    Keep,
    /// It is removed and dropped where it lies.
    Drop,
    /// It is removed without running its destructor: it owns nothing.
    Forget,
}

/// Drops a live slot's value where it lies and moves the slot to the next generation,
/// linked in front of `free_head`: true when it can be handed out again (the caller makes
/// it the free list's head), false when its generations are used up (retired).
#[inline(always)]
fn vacate<T>(slot: &mut Slot<T>, free_head: u32) -> bool {
    let reusable = slot.gen != u32::MAX;
    if reusable {
        slot.gen += 1;
        slot.entry = Entry::Free { next: free_head };
    } else {
        slot.entry = Entry::Retired;
    }
    reusable
}

/// [`vacate`] without running the value's destructor: the value is swapped for a
/// retired mark (which owns nothing) and forgotten, then the slot is vacated as usual.
#[inline(always)]
fn vacate_forget<T>(slot: &mut Slot<T>, free_head: u32) -> bool {
    std::mem::forget(std::mem::replace(&mut slot.entry, Entry::Retired));
    vacate(slot, free_head)
}

#[cfg(test)]
mod remove_tests {
    use super::*;

    #[test]
    fn remove_drops_in_place_and_checks_generations() {
        let mut p = Pool::new();
        let a = p.get(String::from("a"));
        assert!(p.remove(a));
        assert!(!p.remove(a), "stale index");
        assert!(p.get_ref(a).is_none());
        let b = p.get(String::from("b"));
        assert_eq!(b.slot(), a.slot());
        assert_eq!(p.get_ref(b).map(String::as_str), Some("b"));
        assert_eq!(p.len(), 1);
    }

    /// Counts its drops, to tell a dropped object from a forgotten one.
    struct Counted(std::rc::Rc<std::cell::Cell<u32>>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn remove_with_keeps_drops_or_forgets_as_told() {
        let drops = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut p = Pool::new();
        let a = p.get(Counted(drops.clone()));
        assert_eq!(p.remove_with(a, |_| Removal::Keep), Some(false));
        assert!(p.contains(a));
        assert_eq!((p.len(), drops.get()), (1, 0));
        // Dropped: the destructor runs once, the index goes stale.
        assert_eq!(p.remove_with(a, |_| Removal::Drop), Some(true));
        assert_eq!((p.len(), drops.get()), (0, 1));
        assert!(!p.contains(a));
        assert_eq!(p.remove_with(a, |_| Removal::Drop), None, "stale index");
        // Forgotten: no destructor, but the slot is free, of the next generation, and
        // handed out again.
        let b = p.get(Counted(drops.clone()));
        assert_eq!(b.slot(), a.slot());
        assert_eq!(p.remove_with(b, |_| Removal::Forget), Some(true));
        assert_eq!((p.len(), drops.get()), (0, 1));
        assert!(!p.contains(b));
        assert_eq!(p.remove_with(b, |_| Removal::Forget), None, "stale index");
        let c = p.get(Counted(drops.clone()));
        assert_eq!(c.slot(), a.slot());
        assert!(p.contains(c) && !p.contains(b) && !p.contains(a));
        drop(p);
        assert_eq!(drops.get(), 2, "the live object is dropped with the pool");
    }

    #[test]
    fn remove_if_keeps_what_it_declines_and_drops_what_it_takes() {
        let mut p = Pool::new();
        let a = p.get(String::from("a"));
        // Declined: the object stays, with the change made while it was looked at.
        assert_eq!(
            p.remove_if(a, |s| {
                s.push('!');
                false
            }),
            Some(false)
        );
        assert_eq!(p.get_ref(a).map(String::as_str), Some("a!"));
        assert_eq!(p.len(), 1);
        // Taken: dropped in place, the index stale from then on, the slot reused.
        assert_eq!(p.remove_if(a, |s| s == "a!"), Some(true));
        assert_eq!(p.len(), 0);
        assert!(p.get_ref(a).is_none());
        assert_eq!(p.remove_if(a, |_| true), None, "stale index");
        let b = p.get(String::from("b"));
        assert_eq!(b.slot(), a.slot());
        assert_eq!(
            p.remove_if(a, |_| true),
            None,
            "an older generation of a live slot"
        );
        assert_eq!(p.get_ref(b).map(String::as_str), Some("b"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn basic_get_put() {
        let mut p = Pool::with_chunk_size(4);
        assert_eq!(p.capacity(), 0);
        let a = p.get("a");
        let b = p.get("b");
        assert_eq!(p.capacity(), 4);
        assert_eq!(p.len(), 2);
        assert_eq!(p.get_ref(a), Some(&"a"));
        *p.get_mut(b).unwrap() = "B";
        assert_eq!(p.put(b), Some("B"));
        assert_eq!(p.put(b), None, "double put is detected");
        assert_eq!(p.get_ref(b), None);
        let c = p.get("c");
        assert_eq!(c.slot(), b.slot(), "freed slot is reused first");
        assert_ne!(c, b);
        assert_eq!(
            p.get_ref(b),
            None,
            "stale index does not see the new occupant"
        );
        assert_eq!(PoolIdx::from_u64(c.to_u64()), c);
        assert_eq!(p.get_ref(PoolIdx::from_u64(u64::MAX)), None);
        let live: Vec<_> = p.iter().map(|(i, v)| (i, *v)).collect();
        assert_eq!(live, [(a, "a"), (c, "c")]);
    }

    #[test]
    fn reserve_then_no_growth() {
        let mut p = Pool::with_chunk_size(3);
        assert_eq!(p.chunk_size(), 4);
        p.reserve(10);
        let cap = p.capacity();
        assert!(cap >= 10);
        let ids: Vec<_> = (0..10).map(|i| p.get(i)).collect();
        assert_eq!(p.capacity(), cap);
        for id in ids {
            p.put(id);
        }
        p.reserve(cap);
        assert_eq!(p.capacity(), cap);
    }

    #[test]
    fn addresses_are_stable_across_growth() {
        let mut p = Pool::with_chunk_size(2);
        let first = p.get([7u64; 4]);
        let addr = p.get_ref(first).unwrap() as *const [u64; 4] as usize;
        for i in 0..1000 {
            p.get([i; 4]);
        }
        assert_eq!(p.get_ref(first).unwrap() as *const [u64; 4] as usize, addr);
    }

    #[test]
    fn exhausted_generation_retires_slot() {
        let mut p = Pool::with_chunk_size(1);
        let a = p.get(1);
        p.chunks[0][0].gen = u32::MAX;
        let a = PoolIdx { gen: u32::MAX, ..a };
        assert_eq!(p.put(a), Some(1));
        let b = p.get(2);
        assert_ne!(b.slot(), a.slot());
        assert_eq!(p.capacity(), 2);
        assert_eq!(p.put(a), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Get(u32),
        /// Put the n-th index ever handed out (modulo), live or stale.
        Put(usize),
        Lookup(usize),
        Modify(usize, u32),
        LookupRaw(u64),
        /// Remove the n-th index ever handed out if its value is even, else add one to it.
        RemoveIf(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u32>().prop_map(Op::Get),
            2 => any::<usize>().prop_map(Op::Put),
            2 => any::<usize>().prop_map(Op::Lookup),
            1 => (any::<usize>(), any::<u32>()).prop_map(|(i, v)| Op::Modify(i, v)),
            1 => any::<u64>().prop_map(Op::LookupRaw),
            2 => any::<usize>().prop_map(Op::RemoveIf),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(chunk in 1usize..9, ops in proptest::collection::vec(op(), 0..300)) {
            let mut pool = Pool::with_chunk_size(chunk);
            let mut model: HashMap<PoolIdx, u32> = HashMap::new();
            let mut issued: Vec<PoolIdx> = Vec::new();
            for op in ops {
                match op {
                    Op::Get(v) => {
                        let (len, cap) = (pool.len(), pool.capacity());
                        let idx = pool.get(v);
                        if len < cap {
                            prop_assert_eq!(pool.capacity(), cap, "grew with free slots");
                        }
                        prop_assert!(model.insert(idx, v).is_none(), "index handed out twice");
                        prop_assert!(!issued.contains(&idx));
                        issued.push(idx);
                    }
                    Op::Put(i) if !issued.is_empty() => {
                        let idx = issued[i % issued.len()];
                        prop_assert_eq!(pool.put(idx), model.remove(&idx));
                    }
                    Op::Lookup(i) if !issued.is_empty() => {
                        let idx = issued[i % issued.len()];
                        prop_assert_eq!(pool.get_ref(idx), model.get(&idx));
                    }
                    Op::Modify(i, v) if !issued.is_empty() => {
                        let idx = issued[i % issued.len()];
                        if let Some(x) = pool.get_mut(idx) {
                            *x = v;
                        }
                        if let Some(x) = model.get_mut(&idx) {
                            *x = v;
                        }
                    }
                    Op::RemoveIf(i) if !issued.is_empty() => {
                        let idx = issued[i % issued.len()];
                        let got = pool.remove_if(idx, |x| {
                            if *x % 2 == 0 {
                                true
                            } else {
                                *x = x.wrapping_add(1);
                                false
                            }
                        });
                        let want = match model.get_mut(&idx) {
                            None => None,
                            Some(x) if *x % 2 == 0 => Some(true),
                            Some(x) => {
                                *x = x.wrapping_add(1);
                                Some(false)
                            }
                        };
                        if want == Some(true) {
                            model.remove(&idx);
                        }
                        prop_assert_eq!(got, want);
                    }
                    Op::LookupRaw(raw) => {
                        let idx = PoolIdx::from_u64(raw);
                        prop_assert_eq!(pool.get_ref(idx), model.get(&idx));
                    }
                    _ => {}
                }
                prop_assert_eq!(pool.len(), model.len());
                prop_assert!(pool.capacity() >= pool.len());
                prop_assert_eq!(pool.capacity() % pool.chunk_size(), 0);
            }
            let mut live: Vec<(PoolIdx, u32)> = pool.iter().map(|(i, v)| (i, *v)).collect();
            let mut want: Vec<(PoolIdx, u32)> = model.into_iter().collect();
            live.sort_by_key(|(i, _)| i.to_u64());
            want.sort_by_key(|(i, _)| i.to_u64());
            prop_assert_eq!(live, want);
        }
    }
}
