//! Remote memory access and atomics over a resolved [`Rkey`], shared by the self and shm
//! transports: a direct copy or CPU atomic when the key is local or mapped, a cross-memory
//! attach copy when it is a CMA key. Every access is range-checked against the key first.
//!
//! This is uct's memory-access module: with the shm FIFO it is the only place in uct that
//! turns addresses into memory (`unsafe`), for the other modules to use through checked,
//! safe functions (including tcp's receive of put data into a registration).

use crate::rkey::{Access, Rkey};
use crate::types::{AtomicOp, AtomicSize};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Weak;
use ucs::sys::cma;
use ucs::{Result, Status};

/// Writes the concatenation of `iov` at remote address `addr`.
pub fn put(rkey: &Rkey, addr: u64, iov: &[&[u8]]) -> Result<()> {
    let total: usize = iov.iter().map(|b| b.len()).sum();
    rkey.check(addr, total)?;
    let mut off = addr;
    for b in iov {
        match &rkey.access {
            Access::Cma => cma::write(rkey.pid, off, b)?,
            Access::Wire { .. } => return Err(Status::Unsupported),
            _ => {
                let p = rkey.ptr(off, b.len())?;
                // SAFETY: ptr() checked the range lies in the key's memory, which is
                // mapped (local registration or attached segment) while the key lives;
                // `b` is a separate local buffer, so the ranges do not overlap unless the
                // caller passes its own target, which copy (memmove) tolerates.
                unsafe { std::ptr::copy(b.as_ptr(), p, b.len()) };
            }
        }
        off += b.len() as u64;
    }
    Ok(())
}

/// [`put`] of one contiguous piece, the common case: one range check, and an 8-byte piece
/// (a word, a small message) stored without a call to `memmove`.
#[inline]
pub fn put_one(rkey: &Rkey, addr: u64, data: &[u8]) -> Result<()> {
    match &rkey.access {
        Access::Cma => {
            rkey.check(addr, data.len())?;
            cma::write(rkey.pid, addr, data)
        }
        Access::Wire { .. } => Err(Status::Unsupported),
        _ => {
            let p = rkey.ptr(addr, data.len())?;
            // SAFETY: as in put(): ptr() checked the range lies in the key's memory,
            // mapped while the key lives; an 8-byte piece is one unaligned word.
            unsafe {
                if data.len() == 8 {
                    p.cast::<u64>()
                        .write_unaligned(data.as_ptr().cast::<u64>().read_unaligned());
                } else {
                    std::ptr::copy(data.as_ptr(), p, data.len());
                }
            }
            Ok(())
        }
    }
}

/// Reads from remote address `addr` into the concatenation of `iov`.
pub fn get(rkey: &Rkey, addr: u64, iov: &mut [&mut [u8]]) -> Result<()> {
    let total: usize = iov.iter().map(|b| b.len()).sum();
    rkey.check(addr, total)?;
    let mut off = addr;
    for b in iov.iter_mut() {
        match &rkey.access {
            Access::Cma => cma::read(rkey.pid, off, b)?,
            Access::Wire { .. } => return Err(Status::Unsupported),
            _ => {
                let p = rkey.ptr(off, b.len())?;
                // SAFETY: as in put(); the destination is the caller's exclusive slice.
                unsafe { std::ptr::copy(p, b.as_mut_ptr(), b.len()) };
            }
        }
        off += b.len() as u64;
    }
    Ok(())
}

/// Calls `f` with the `len` bytes at `addr` of a key with direct access (local or mapped),
/// to write them in place.
pub fn with_direct_mut<R>(
    rkey: &Rkey,
    addr: u64,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> Result<R> {
    let p = rkey.ptr(addr, len)?;
    // SAFETY: ptr() checked that `len` bytes at p lie in the key's memory, mapped (a live
    // local registration or an attached segment) while the key lives, which outlives `f`.
    Ok(f(unsafe { std::slice::from_raw_parts_mut(p, len) }))
}

/// Calls `f` with the `len` bytes at `addr` of a key with direct access, to read them.
pub fn with_direct<R>(rkey: &Rkey, addr: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let p = rkey.ptr(addr, len)?;
    // SAFETY: as in with_direct_mut.
    Ok(f(unsafe { std::slice::from_raw_parts(p, len) }))
}

/// The `len` bytes at `addr`, inside a tcp registration of this process whose liveness
/// token is `alive` ([`crate::md::wire_target`] checked the range when the put arrived),
/// for the receive path to read put data into; `None` (and `alive` cleared) once the
/// registration was dropped.
pub(crate) fn registered_mut(
    alive: &mut Option<Weak<()>>,
    addr: u64,
    len: usize,
) -> Option<&mut [u8]> {
    if alive.as_ref().is_some_and(|w| w.strong_count() > 0) {
        // SAFETY: the range lies inside a registration of this process that is still
        // alive (checked just now, on the thread that would deregister it); mem_reg's
        // caller promised the memory stays allocated and writable, and is not borrowed,
        // across progress while it is registered. The slice lives no longer than the
        // unique borrow of `alive`, i.e. within this progress call.
        Some(unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, len) })
    } else {
        *alive = None;
        None
    }
}

/// Performs an atomic operation and returns the previous value. Only keys with direct
/// access support atomics here; a CMA key gives `Unsupported` (the protocol layer emulates
/// them). A misaligned address is `InvalidParam`. Inline: at a call site that names the
/// size (and often the operation) most of the matching folds away, which matters on the
/// put-with-signal path, where this is the last step before the target can see the signal.
#[inline]
pub fn atomic(
    rkey: &Rkey,
    op: AtomicOp,
    size: AtomicSize,
    addr: u64,
    value: u64,
    compare: u64,
) -> Result<u64> {
    let p = word_ptr(rkey, addr, size)?;
    match size {
        AtomicSize::B64 => {
            // SAFETY: p is 8-byte aligned and inside mapped memory of the key (`word_ptr`
            // checked both), and only ever accessed atomically by rucx peers.
            let a = unsafe { AtomicU64::from_ptr(p.cast()) };
            Ok(apply64(a, op, value, compare))
        }
        AtomicSize::B32 => {
            // SAFETY: as above with 4-byte alignment.
            let a = unsafe { AtomicU32::from_ptr(p.cast()) };
            Ok(u64::from(apply32(a, op, value as u32, compare as u32)))
        }
    }
}

/// The local address of the atomic word at `addr`: the key must reach its memory directly
/// (`Unsupported` otherwise), the address be aligned to the word's size and the word lie
/// inside the key (`InvalidParam` otherwise).
#[inline(always)]
fn word_ptr(rkey: &Rkey, addr: u64, size: AtomicSize) -> Result<*mut u8> {
    if !rkey.is_direct() {
        return Err(Status::Unsupported);
    }
    if addr % size.bytes() as u64 != 0 {
        return Err(Status::InvalidParam);
    }
    rkey.ptr(addr, size.bytes())
}

/// Writes `data` to `addr` through `key` (any access reached in the call: local, mapped
/// or CMA), then applies `op` to the 64-bit word at `word_addr` through `word_key`, which
/// must reach its memory directly; returns the word's previous value. The word's range
/// and alignment are checked first and the data's range before its first byte is
/// written, so an error leaves both untouched. The atomic is SeqCst, which orders the
/// data before it: a peer that sees the word changed and then reads the data sees the new
/// bytes (put with remote signal).
#[inline]
pub fn put_then_atomic64(
    key: &Rkey,
    addr: u64,
    data: &[u8],
    word_key: &Rkey,
    word_addr: u64,
    op: AtomicOp,
    value: u64,
) -> Result<u64> {
    let word = word_ptr(word_key, word_addr, AtomicSize::B64)?;
    if !data.is_empty() {
        put_one(key, addr, data)?;
    }
    // SAFETY: `word_ptr` checked that the 8 bytes lie in the key's memory, mapped while
    // the key lives, and are 8-byte aligned; rucx's peers access such words only
    // atomically.
    let a = unsafe { AtomicU64::from_ptr(word.cast()) };
    Ok(apply64(a, op, value, 0))
}

/// `op` on an atomic word (any width): the previous value.
macro_rules! apply_op {
    ($a:expr, $op:expr, $v:expr, $c:expr) => {
        match $op {
            AtomicOp::Add => $a.fetch_add($v, Ordering::SeqCst),
            AtomicOp::And => $a.fetch_and($v, Ordering::SeqCst),
            AtomicOp::Or => $a.fetch_or($v, Ordering::SeqCst),
            AtomicOp::Xor => $a.fetch_xor($v, Ordering::SeqCst),
            AtomicOp::Swap => $a.swap($v, Ordering::SeqCst),
            AtomicOp::Cswap => {
                match $a.compare_exchange($c, $v, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    };
}

/// Applies `op` to a 64-bit word in memory of this process (sequentially consistent);
/// the previous value. Also the emulated atomics' target side (ucp).
#[inline]
pub fn apply64(a: &AtomicU64, op: AtomicOp, value: u64, compare: u64) -> u64 {
    apply_op!(a, op, value, compare)
}

/// [`apply64`] for a 32-bit word.
pub fn apply32(a: &AtomicU32, op: AtomicOp, value: u32, compare: u32) -> u32 {
    apply_op!(a, op, value, compare)
}
