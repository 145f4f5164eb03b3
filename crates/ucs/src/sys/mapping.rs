//! A shared memory mapping that is unmapped when dropped.

use crate::{Result, Status};
use std::os::fd::AsFd;
use std::ptr::NonNull;

/// `len` bytes of a file mapped read-write and shared, page aligned.
///
/// Invariant: `ptr..ptr+len` is mapped for the whole life of the value.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is plain memory; the memory itself is shared with other processes and
// is only ever accessed through atomics or through the raw pointers the callers manage.
unsafe impl Send for Mapping {}
// SAFETY: see above; `&Mapping` only hands out the base pointer and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, shared and read-write.
    pub fn map_shared(fd: impl AsFd, len: usize) -> Result<Mapping> {
        if len == 0 {
            return Err(Status::InvalidParam);
        }
        // SAFETY: we ask for a fresh mapping (no fixed address), so no existing memory is
        // replaced; the result is checked before use.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| {
            tracing::debug!("mmap of {len} bytes failed: {e}");
            Status::from(e)
        })?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(Status::NoMemory)?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte of the mapping.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an empty mapping cannot be made.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nobody else unmaps.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            tracing::warn!("munmap failed: {e}");
        }
    }
}
