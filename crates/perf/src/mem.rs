//! Memory that the peer reads or writes during a test, and the data pattern that checks it.
//!
//! A [`Region`] is either a shared segment from `Md::mem_alloc` (the peer maps it and
//! copies with loads and stores) or page-aligned heap memory registered with `Md::mem_reg`
//! (the peer reaches it by cross-memory attach, like UCX's cma transport). The peer may
//! write it at any time, so this process never holds a Rust reference into it: it reads
//! and writes through the raw pointer, with an atomic load for the byte that a ping-pong
//! test polls.

use crate::channel::{Hex, RegionInfo};
use std::alloc::Layout as AllocLayout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use ucs::{Result, Status};
use uct::{Md, MemHandle};

/// The byte at offset `i` of every message: period 251 (prime), so data landing at a wrong
/// offset or from a wrong source does not match by accident.
#[inline]
pub fn pattern(i: usize) -> u8 {
    ((i * 7 + 3) % 251) as u8
}

/// `len` bytes of [`pattern`].
pub fn pattern_vec(len: usize) -> Vec<u8> {
    (0..len).map(pattern).collect()
}

/// Offset of the first byte of `data` that differs from [`pattern`] (`skip_last`: the
/// last byte is not compared), or `None`.
pub fn pattern_mismatch(data: &[u8], skip_last: bool) -> Option<usize> {
    let n = if skip_last {
        data.len().saturating_sub(1)
    } else {
        data.len()
    };
    data[..n]
        .iter()
        .enumerate()
        .position(|(i, &b)| b != pattern(i))
}

/// Page-aligned zeroed heap memory, freed on drop.
struct HeapBuf {
    ptr: NonNull<u8>,
    layout: AllocLayout,
}

impl HeapBuf {
    fn new(len: usize) -> Result<HeapBuf> {
        let layout = AllocLayout::from_size_align(len.max(1), ucs::sys::host::page_size())
            .map_err(|_| Status::InvalidParam)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(Status::NoMemory)?;
        Ok(HeapBuf { ptr, layout })
    }
}

impl Drop for HeapBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this very layout and freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A page-aligned buffer of this process (the data of an operation), used as a slice.
/// Page alignment as in ucx_perftest: a one-copy transfer (CMA) of a misaligned buffer
/// touches one more page per page and is measurably slower for large messages.
pub struct AlignedBuf {
    heap: HeapBuf,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A copy of `data` in page-aligned memory.
    pub fn from_slice(data: &[u8]) -> Result<AlignedBuf> {
        let heap = HeapBuf::new(data.len())?;
        let mut b = AlignedBuf {
            heap,
            len: data.len(),
        };
        b.copy_from_slice(data);
        Ok(b)
    }

    /// `len` zero bytes in page-aligned memory.
    pub fn zeroed(len: usize) -> Result<AlignedBuf> {
        Ok(AlignedBuf {
            heap: HeapBuf::new(len)?,
            len,
        })
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the allocation holds at least len initialized (zeroed) bytes and is only
        // reached through this owner, so shared access follows the borrow of self.
        unsafe { std::slice::from_raw_parts(self.heap.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; the unique borrow of self makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.heap.ptr.as_ptr(), self.len) }
    }
}

/// Memory exposed to the peer with a remote key.
pub struct Region {
    // Field order matters: the registration is dropped before the memory it names.
    handle: MemHandle,
    _heap: Option<HeapBuf>,
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    /// `len` bytes in a shared segment (the peer maps it).
    pub fn alloc(md: &Md, len: usize) -> Result<Region> {
        let handle = md.mem_alloc(len)?;
        let ptr = NonNull::new(handle.address()).ok_or(Status::NoMemory)?;
        Ok(Region {
            handle,
            _heap: None,
            ptr,
            len,
        })
    }

    /// `len` bytes of heap registered with `md` (the peer copies by CMA).
    pub fn register(md: &Md, len: usize) -> Result<Region> {
        let heap = HeapBuf::new(len)?;
        let ptr = heap.ptr;
        // SAFETY: `heap` owns the memory and is kept in the Region beside the handle,
        // which is dropped first; the region is accessed through `ptr` only.
        let handle = unsafe { md.mem_reg(ptr.as_ptr(), len) }?;
        Ok(Region {
            handle,
            _heap: Some(heap),
            ptr,
            len,
        })
    }

    /// What the peer needs to reach the region.
    pub fn info(&self) -> RegionInfo {
        RegionInfo {
            address: self.ptr.as_ptr() as u64,
            rkey: Hex(self.handle.pack_rkey()),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills the region with [`pattern`]. Only while the peer does not access it.
    pub fn fill_pattern(&self) {
        let src = pattern_vec(self.len);
        // SAFETY: ptr is valid for len bytes (allocated above) and src is a separate buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr(), self.len) };
    }

    /// A copy of the contents. Only while the peer does not write it.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: ptr is valid for len bytes; v is a separate buffer of the same length.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), v.as_mut_ptr(), self.len) };
        v
    }

    /// The last byte, which the peer's put changes; acquire so that a caller that sees a
    /// new value also sees what the same process wrote before it.
    #[inline]
    pub fn last(&self) -> u8 {
        // SAFETY: len >= 1 for every region a test polls (sizes are >= 1), the byte lies
        // inside the allocation, and every access to it from this process is atomic.
        let b = unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().add(self.len.max(1) - 1)) };
        b.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_detects_shifts() {
        let p = pattern_vec(1000);
        assert_eq!(pattern_mismatch(&p, false), None);
        let mut shifted = p.clone();
        shifted.rotate_left(1);
        assert_eq!(pattern_mismatch(&shifted, false), Some(0));
        let mut last = p.clone();
        last[999] ^= 1;
        assert_eq!(pattern_mismatch(&last, false), Some(999));
        assert_eq!(pattern_mismatch(&last, true), None);
    }

    #[test]
    fn aligned_buffers() {
        let b = AlignedBuf::from_slice(&pattern_vec(10_000)).unwrap();
        assert_eq!(b.as_ptr() as usize % ucs::sys::host::page_size(), 0);
        assert_eq!(pattern_mismatch(&b, false), None);
        let mut z = AlignedBuf::zeroed(3).unwrap();
        assert_eq!(&z[..], &[0, 0, 0]);
        z[2] = 7;
        assert_eq!(z.last(), Some(&7));
    }

    #[test]
    fn regions_round_trip() {
        for transport in [uct::Transport::Shm] {
            let md = Md::open(transport);
            for r in [
                Region::alloc(&md, 5000).unwrap(),
                Region::register(&md, 5000).unwrap(),
            ] {
                assert_eq!(r.last(), 0);
                r.fill_pattern();
                assert_eq!(pattern_mismatch(&r.snapshot(), false), None);
                assert_eq!(r.last(), pattern(4999));
                let rk = md.rkey_unpack(&r.info().rkey.0).unwrap();
                assert_eq!(rk.range(), (r.info().address, 5000));
            }
        }
    }
}
