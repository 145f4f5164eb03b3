//! Worker addresses as C sees them: they carry their own length (the API passes them
//! without one): `magic u32 | length u32 | encoded address`.

use std::ffi::c_void;
use ucs::{Result, Status};

const ADDR_MAGIC: u32 = 0x5243_5841;
pub(crate) const ADDR_HDR: usize = 8;

pub(crate) fn address_to_c(bytes: &[u8]) -> Result<(*mut c_void, usize)> {
    let total = ADDR_HDR + bytes.len();
    // SAFETY: malloc of a positive size; released by ucp_worker_release_address (free).
    let p = unsafe { libc::malloc(total) }.cast::<u8>();
    if p.is_null() {
        return Err(Status::NoMemory);
    }
    // SAFETY: `p` has `total` writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(ADDR_MAGIC.to_le_bytes().as_ptr(), p, 4);
        std::ptr::copy_nonoverlapping((bytes.len() as u32).to_le_bytes().as_ptr(), p.add(4), 4);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(ADDR_HDR), bytes.len());
    }
    Ok((p.cast(), total))
}

/// The encoded address inside a C address.
///
/// # Safety
/// `p` must point to an address of ours (the magic is checked before the length is used).
pub(crate) unsafe fn address_from_c<'a>(p: *const c_void) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(Status::InvalidParam);
    }
    let p = p.cast::<u8>();
    let mut h = [0u8; ADDR_HDR];
    // SAFETY: by the contract at least the header is readable.
    unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), ADDR_HDR) };
    if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) != ADDR_MAGIC {
        return Err(Status::InvalidAddr);
    }
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > 1 << 20 {
        return Err(Status::InvalidAddr);
    }
    // SAFETY: an address of ours has `len` bytes after its header.
    Ok(unsafe { std::slice::from_raw_parts(p.add(ADDR_HDR), len) })
}
