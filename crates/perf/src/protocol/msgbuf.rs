//! [`MsgBuf`]: the message buffers of the protocol-layer tests, and the one module of
//! `perf::protocol` that touches their memory or hands it to ucp.
//!
//! A buffer's memory is read and written by ucp requests (and, for a mapped buffer, by
//! the peer) while this side holds no Rust reference into it, so every access here goes
//! through the raw pointer taken at creation.
//!
//! Invariant of `perf::protocol`, which makes [`MsgBuf::ucp`] a safe function: **a
//! `MsgBuf` outlives every request given its memory**. The buffers of a test live in the
//! peer's `Buffers` until the next test replaces them, and every runner waits for (or,
//! on error, leaves behind with the worker, which is dropped first: `UcpPeer` declares
//! its worker before its buffers, and a peer whose test failed is `broken` and runs no
//! more tests) all the requests it started; a runner does not write a buffer a request is
//! reading, or read one a request is writing, before that request completed.

use super::POISON;
use crate::channel::{Hex, RegionInfo};
use crate::mem::{pattern_mismatch, AlignedBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use ucp::{Context, MemH};
use ucs::{Result, Status};

/// The memory behind a [`MsgBuf`].
enum Backing {
    /// Page-aligned heap memory of this process.
    Heap { _buf: AlignedBuf },
    /// A region mapped with `mem_map` (the peer reaches it with its remote key); unmapped
    /// when dropped.
    Mapped(MemH),
}

/// A message buffer handed to ucp by address: page-aligned (as ucx_perftest's), with its
/// address taken once at creation, so that this side holds no Rust reference into it while
/// a request, or the peer, may read or write it.
pub(super) struct MsgBuf {
    mem: Backing,
    ptr: *mut u8,
    pub(super) len: usize,
}

impl MsgBuf {
    /// `len` bytes of the data pattern.
    pub(super) fn pattern(len: usize) -> Result<MsgBuf> {
        Ok(MsgBuf::from(AlignedBuf::from_slice(
            &crate::mem::pattern_vec(len),
        )?))
    }

    /// `len` bytes of [`POISON`].
    pub(super) fn poisoned(len: usize) -> Result<MsgBuf> {
        let b = MsgBuf::from(AlignedBuf::zeroed(len)?);
        b.poison();
        Ok(b)
    }

    /// `len` zero bytes mapped for remote access (allocated by ucp: a shared segment that
    /// peers on this host can map).
    pub(super) fn mapped(ctx: &Context, len: usize) -> Result<MsgBuf> {
        let mem = ctx.mem_alloc(len).inspect_err(|e| {
            tracing::error!("cannot map {len} bytes for remote access: {e}");
        })?;
        let ptr = mem.address();
        if ptr.is_null() || mem.len() < len {
            return Err(Status::NoMemory);
        }
        let b = MsgBuf {
            mem: Backing::Mapped(mem),
            ptr,
            len,
        };
        b.fill(0);
        Ok(b)
    }

    pub(super) fn from(mut mem: AlignedBuf) -> MsgBuf {
        let (ptr, len) = (mem.as_mut_ptr(), mem.len());
        MsgBuf {
            mem: Backing::Heap { _buf: mem },
            ptr,
            len,
        }
    }

    /// The buffer as ucp takes it.
    #[inline]
    pub(super) fn ucp(&self) -> ucp::Buf {
        // SAFETY: ptr..ptr+len is this buffer's memory, which outlives the request and is
        // left alone while the request runs (the module invariant).
        unsafe { ucp::Buf::contig(self.ptr, self.len) }
    }

    /// The 8-byte slot `i` of the buffer as ucp takes it (atomic results).
    #[inline]
    pub(super) fn ucp_slot(&self, i: usize) -> Result<ucp::Buf> {
        let off = self.slot_off(i)?;
        // SAFETY: the slot lies inside the buffer (slot_off); as in ucp().
        Ok(unsafe { ucp::Buf::contig(self.ptr.add(off), 8) })
    }

    /// The offset of 8-byte slot `i`, if it lies inside the buffer.
    fn slot_off(&self, i: usize) -> Result<usize> {
        let off = i.checked_mul(8).ok_or(Status::InvalidParam)?;
        if off + 8 > self.len {
            return Err(Status::InvalidParam);
        }
        Ok(off)
    }

    /// The value at the start of the 8-byte slot `i`: `size` (4 or 8) bytes in native
    /// byte order, as a fetching atomic of that size writes it (read once the request
    /// that wrote it completed).
    pub(super) fn read_slot(&self, i: usize, size: usize) -> Result<u64> {
        let off = self.slot_off(i)?;
        let mut b = [0u8; 8];
        // SAFETY: the slot lies inside the buffer; no request writes it now (the caller
        // reads a completed operation's result, module invariant).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), b.as_mut_ptr(), 8) };
        Ok(match size {
            4 => u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            8 => u64::from_ne_bytes(b),
            _ => return Err(Status::InvalidParam),
        })
    }

    /// Stores `v` in native byte order in the 8-byte slot `i` (while nothing else
    /// accesses it).
    #[cfg(test)]
    pub(super) fn write_slot(&self, i: usize, v: u64) -> Result<()> {
        let off = self.slot_off(i)?;
        // SAFETY: as in read_slot.
        unsafe { std::ptr::copy_nonoverlapping(v.to_ne_bytes().as_ptr(), self.ptr.add(off), 8) };
        Ok(())
    }

    /// The 64-bit word at byte `off` (8-byte aligned), read atomically with acquire: the
    /// peer may change it at any moment (a signal word).
    pub(super) fn load_word_at(&self, off: usize) -> Result<u64> {
        if off % 8 != 0 || off + 8 > self.len {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the word lies inside the buffer and is 8-byte aligned (the buffer is
        // page-aligned, off a multiple of 8); while the peer may change it this process
        // accesses it only atomically (ucp's signal is an atomic too).
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast()) }.load(Ordering::Acquire))
    }

    /// What the peer needs to reach a mapped buffer; `None` for heap memory.
    pub(super) fn region(&self) -> Option<RegionInfo> {
        match &self.mem {
            Backing::Mapped(m) => Some(RegionInfo {
                address: self.ptr as u64,
                rkey: Hex(m.rkey_pack()),
            }),
            Backing::Heap { .. } => None,
        }
    }

    /// Fills the buffer with `byte`. Call only while no request uses the buffer and the
    /// peer does not write it, or the fill is overwritten by whatever they write next.
    pub(super) fn fill(&self, byte: u8) {
        // SAFETY: ptr is valid for len bytes (owned by mem). ucp writes a buffer only
        // inside calls on this thread's worker, so nothing else of this process accesses
        // it during this; the peer does not write it now (the caller's condition).
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }

    /// Fills the buffer with [`POISON`] (see [`MsgBuf::fill`]).
    pub(super) fn poison(&self) {
        self.fill(POISON);
    }

    /// Fills the buffer with the data pattern (see [`MsgBuf::fill`]).
    pub(super) fn fill_pattern(&self) {
        let src = crate::mem::pattern_vec(self.len);
        // SAFETY: as in fill(); src is a separate buffer of the same length.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr, self.len) };
    }

    /// A copy of the contents (while nothing writes the buffer).
    pub(super) fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: as in fill(); v is a separate buffer of the same length.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, v.as_mut_ptr(), self.len) };
        v
    }

    /// The first byte that differs from the data pattern.
    pub(super) fn mismatch(&self) -> Option<usize> {
        pattern_mismatch(&self.snapshot(), false)
    }

    /// The 8 bytes at the start, as a little-endian number (acknowledgements).
    pub(super) fn read_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        let n = self.len.min(8);
        // SAFETY: as in fill(); n <= len.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, b.as_mut_ptr(), n) };
        u64::from_le_bytes(b)
    }

    /// Stores `v` little-endian at the start (acknowledgements).
    pub(super) fn write_u64(&self, v: u64) {
        let b = v.to_le_bytes();
        let n = self.len.min(8);
        // SAFETY: as in fill(); n <= len.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr, n) };
    }

    /// The last byte, which a put ping-pong changes every round. Atomic (acquire), since
    /// the peer may be writing it through a mapping at this moment.
    #[inline]
    pub(super) fn last(&self) -> u8 {
        // SAFETY: len >= 1 (sizes are validated), the byte lies inside the allocation,
        // and every access of this process to it while the peer may write is atomic.
        let b = unsafe { AtomicU8::from_ptr(self.ptr.add(self.len.max(1) - 1)) };
        b.load(Ordering::Acquire)
    }

    /// Sets the last byte (only while no request reads the buffer).
    #[inline]
    pub(super) fn set_last(&self, v: u8) {
        // SAFETY: as in last(); this side's sends read the buffer only inside worker
        // calls on this thread.
        let b = unsafe { AtomicU8::from_ptr(self.ptr.add(self.len.max(1) - 1)) };
        b.store(v, Ordering::Relaxed);
    }

    /// The atomic word at the start (`size` 4 or 8 bytes), read atomically: the peer's
    /// atomics may change it at any moment.
    #[inline]
    pub(super) fn word(&self, size: usize) -> u64 {
        debug_assert!(self.len >= size && self.ptr as usize % 8 == 0);
        if size == 4 {
            // SAFETY: the buffer is page-aligned and at least 4 bytes long; the peer
            // accesses the word only atomically (CPU atomics through its mapping, or
            // this worker's emulation, which uses the same CPU atomics).
            u64::from(unsafe { AtomicU32::from_ptr(self.ptr.cast()) }.load(Ordering::Acquire))
        } else {
            // SAFETY: as above, with 8 bytes.
            unsafe { AtomicU64::from_ptr(self.ptr.cast()) }.load(Ordering::Acquire)
        }
    }
}
