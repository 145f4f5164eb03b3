//! A small slab of endpoints indexed by [`EpId`]. Slots are reused after removal, but an
//! id names one use of its slot: it carries the slot's generation, which removal bumps, so
//! a stale id (its object removed, the slot perhaps holding another one now) or an unknown
//! id finds nothing (an error for the caller, never a panic).
//!
//! Layout of an id: the low [`INDEX_BITS`] bits are the slot, the high bits its
//! generation. A slot whose generation would wrap is retired (never used again), so no
//! stale id can ever match; that costs one empty slot per 4096 uses of a slot. Freed slots
//! are reused oldest first.

use crate::types::EpId;
use std::collections::VecDeque;
use ucs::{Result, Status};

/// Bits of an id that name the slot: at most 2^20 objects live at once.
pub const INDEX_BITS: u32 = 20;
pub(crate) const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// The last generation of a slot; a slot removed in it is retired.
const GEN_MAX: u32 = u32::MAX >> INDEX_BITS;

struct Slot<T> {
    gen: u32,
    item: Option<T>,
}

pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: VecDeque<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: VecDeque::new(),
            len: 0,
        }
    }
}

fn id(index: u32, gen: u32) -> EpId {
    EpId(gen << INDEX_BITS | index)
}

impl<T> Slab<T> {
    /// Stores `v` and returns its id; `NoResource` when 2^20 objects live already.
    pub fn insert(&mut self, v: T) -> Result<EpId> {
        let index = match self.free.pop_front() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).map_err(|_| Status::NoResource)?;
                if i > INDEX_MASK {
                    return Err(Status::NoResource);
                }
                self.slots.push(Slot { gen: 0, item: None });
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.item = Some(v);
        self.len += 1;
        Ok(id(index, slot.gen))
    }

    fn slot(&self, ep: EpId) -> Option<&Slot<T>> {
        self.slots
            .get((ep.0 & INDEX_MASK) as usize)
            .filter(|s| s.gen == ep.0 >> INDEX_BITS)
    }

    fn slot_mut(&mut self, ep: EpId) -> Option<&mut Slot<T>> {
        self.slots
            .get_mut((ep.0 & INDEX_MASK) as usize)
            .filter(|s| s.gen == ep.0 >> INDEX_BITS)
    }

    /// Takes the object out; its id (and every copy of it) then finds nothing.
    pub fn remove(&mut self, ep: EpId) -> Result<T> {
        let slot = self.slot_mut(ep).ok_or(Status::InvalidParam)?;
        let v = slot.item.take().ok_or(Status::InvalidParam)?;
        let reuse = slot.gen < GEN_MAX;
        if reuse {
            slot.gen += 1;
            self.free.push_back(ep.0 & INDEX_MASK);
        }
        self.len -= 1;
        Ok(v)
    }

    #[inline]
    pub fn get_mut(&mut self, ep: EpId) -> Result<&mut T> {
        self.slot_mut(ep)
            .and_then(|s| s.item.as_mut())
            .ok_or(Status::InvalidParam)
    }

    #[inline]
    pub fn get(&self, ep: EpId) -> Result<&T> {
        self.slot(ep)
            .and_then(|s| s.item.as_ref())
            .ok_or(Status::InvalidParam)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The live objects with their ids, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (EpId, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let v = s.item.as_ref()?;
            Some((id(i as u32, s.gen), v))
        })
    }

    /// Like [`Slab::iter`], with mutable access.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (EpId, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let gen = s.gen;
            let v = s.item.as_mut()?;
            Some((id(i as u32, gen), v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_and_stale_ids() {
        let mut s = Slab::default();
        let a = s.insert(1).unwrap();
        let b = s.insert(2).unwrap();
        assert_eq!(s.remove(a), Ok(1));
        assert_eq!(s.remove(a), Err(Status::InvalidParam));
        assert_eq!(s.get(EpId(99)).err(), Some(Status::InvalidParam));
        let c = s.insert(3).unwrap();
        assert_ne!(c, a, "a reused slot gets a new id");
        assert_eq!(
            c.0 & INDEX_MASK,
            a.0 & INDEX_MASK,
            "the freed slot is reused"
        );
        assert_eq!(*s.get(b).unwrap(), 2);
        assert_eq!(s.len(), 2);
    }

    /// An id kept after its object was removed finds nothing, even when its slot holds
    /// another object now: it can neither read, change nor remove the new one.
    #[test]
    fn a_stale_id_finds_nothing_in_a_reused_slot() {
        let mut s = Slab::default();
        let stale = s.insert("first").unwrap();
        s.remove(stale).unwrap();
        let fresh = s.insert("second").unwrap();
        assert_eq!(fresh.0 & INDEX_MASK, stale.0 & INDEX_MASK);
        assert_eq!(s.get(stale).err(), Some(Status::InvalidParam));
        assert_eq!(s.get_mut(stale).err(), Some(Status::InvalidParam));
        assert_eq!(s.remove(stale).err(), Some(Status::InvalidParam));
        assert_eq!(*s.get(fresh).unwrap(), "second");
        assert_eq!(
            s.iter().map(|(i, v)| (i, *v)).collect::<Vec<_>>(),
            [(fresh, "second")]
        );
    }

    /// Every id a slot ever had stays stale for good: the slot is retired before its
    /// generation would wrap around to an old id.
    #[test]
    fn a_slot_is_retired_before_its_generation_wraps() {
        let mut s = Slab::default();
        let first = s.insert(0u32).unwrap();
        let mut ids = vec![first];
        s.remove(first).unwrap();
        for n in 1..=GEN_MAX {
            let x = s.insert(n).unwrap();
            assert_eq!(x.0 & INDEX_MASK, 0, "only one slot is ever free");
            ids.push(x);
            s.remove(x).unwrap();
        }
        // The slot went through every generation and is retired: a new object gets a
        // new slot, and none of the old ids finds it.
        let next = s.insert(u32::MAX).unwrap();
        assert_eq!(next.0 & INDEX_MASK, 1);
        assert!(ids.iter().all(|&i| s.get(i).is_err()));
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "no id was handed out twice");
    }

    #[test]
    fn iteration_sees_live_objects_with_their_ids() {
        let mut s = Slab::default();
        let ids: Vec<EpId> = (0..5).map(|i| s.insert(i).unwrap()).collect();
        s.remove(ids[1]).unwrap();
        s.remove(ids[3]).unwrap();
        for (i, v) in s.iter_mut() {
            *v += 10;
            assert!(ids.contains(&i));
        }
        let seen: Vec<(EpId, i32)> = s.iter().map(|(i, v)| (i, *v)).collect();
        assert_eq!(seen, [(ids[0], 10), (ids[2], 12), (ids[4], 14)]);
        assert_eq!(s.len(), 3);
        assert!(!s.is_empty());
    }
}
