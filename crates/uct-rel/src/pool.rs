//! A bounded pool of fixed-size packet buffers shared by all peers of an engine.
//!
//! The engine keeps one pool for packets it sent and may have to send again, and one for
//! messages it received but has not handed out yet (out-of-order ones, and in-order ones
//! not yet polled). Sharing the storage between peers is what keeps per-peer state fixed
//! and small: an idle peer owns no buffer at all, a busy one owns at most its window.
//!
//! Invariants: a slot index is either on the free list or owned by exactly one list of
//! the engine (a peer's send queue, a peer's out-of-order queue, the event queue, or the
//! "lent" slot of the last delivered message). Slots are linked into those lists through
//! [`SlotMeta::next`], so no list allocates. Storage grows lazily, one slot at a time, up to
//! the capacity, and is never returned: after warm-up no packet allocates.

/// "No slot": the end of a list.
pub(crate) const NIL: u32 = u32::MAX;

/// Bookkeeping of one slot; its bytes live in the pool's arena.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotMeta {
    /// Next slot of whatever list owns this one.
    pub next: u32,
    /// Sequence number of the packet in the slot.
    pub seq: u32,
    /// Bytes used.
    pub len: u16,
    /// Engine-defined flags (retransmit pending, ...).
    pub flags: u8,
    /// When the packet was last put on the wire (send pool only).
    pub sent_at: u64,
    /// Send pool only: the part of the packet's payload that lives outside the pool
    /// (see `ExtPayload` in the engine): its owner's token and length; 0 bytes when the
    /// whole packet is in the slot.
    pub ext_token: u64,
    pub ext_len: u32,
}

const EMPTY: SlotMeta = SlotMeta {
    next: NIL,
    seq: 0,
    len: 0,
    flags: 0,
    sent_at: 0,
    ext_token: 0,
    ext_len: 0,
};

pub(crate) struct Pool {
    slot_size: usize,
    capacity: u32,
    arena: Vec<u8>,
    meta: Vec<SlotMeta>,
    free: u32,
    in_use: u32,
}

impl Pool {
    pub fn new(slot_size: usize, capacity: u32) -> Self {
        debug_assert!(capacity < NIL);
        Self {
            slot_size,
            capacity,
            arena: Vec::new(),
            meta: Vec::new(),
            free: NIL,
            in_use: 0,
        }
    }

    /// A slot with fresh metadata, or `None` when all `capacity` slots are in use.
    pub fn alloc(&mut self) -> Option<u32> {
        let idx = if self.free != NIL {
            let idx = self.free;
            self.free = self.meta[idx as usize].next;
            idx
        } else if (self.meta.len() as u32) < self.capacity {
            self.arena.resize(self.arena.len() + self.slot_size, 0);
            self.meta.push(EMPTY);
            self.meta.len() as u32 - 1
        } else {
            return None;
        };
        self.meta[idx as usize] = EMPTY;
        self.in_use += 1;
        Some(idx)
    }

    pub fn free(&mut self, idx: u32) {
        debug_assert!(self.in_use > 0);
        self.meta[idx as usize].next = self.free;
        self.free = idx;
        self.in_use -= 1;
    }

    pub fn meta(&self, idx: u32) -> &SlotMeta {
        &self.meta[idx as usize]
    }

    pub fn meta_mut(&mut self, idx: u32) -> &mut SlotMeta {
        &mut self.meta[idx as usize]
    }

    /// The whole slot (its used part is `..meta.len`).
    pub fn buf(&self, idx: u32) -> &[u8] {
        let start = idx as usize * self.slot_size;
        &self.arena[start..start + self.slot_size]
    }

    pub fn buf_mut(&mut self, idx: u32) -> &mut [u8] {
        let start = idx as usize * self.slot_size;
        &mut self.arena[start..start + self.slot_size]
    }

    /// The used bytes of a slot.
    pub fn data(&self, idx: u32) -> &[u8] {
        &self.buf(idx)[..usize::from(self.meta(idx).len)]
    }

    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Bytes of buffer storage allocated so far.
    pub fn allocated_bytes(&self) -> usize {
        self.arena.capacity() + self.meta.capacity() * std::mem::size_of::<SlotMeta>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_recycled() {
        let mut p = Pool::new(8, 3);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        let c = p.alloc().unwrap();
        assert!(p.alloc().is_none());
        p.buf_mut(b).copy_from_slice(b"12345678");
        p.meta_mut(b).len = 4;
        assert_eq!(p.data(b), b"1234");
        p.free(b);
        assert_eq!(p.in_use(), 2);
        assert_eq!(p.alloc(), Some(b));
        assert_eq!(p.meta(b).len, 0);
        assert_ne!(a, c);
    }
}
