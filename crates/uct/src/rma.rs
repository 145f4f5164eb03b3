//! Remote memory access and atomics over a resolved [`Rkey`], shared by the self and shm
//! transports: a direct copy or CPU atomic when the key is local or mapped, a cross-memory
//! attach copy when it is a CMA key. Every access is range-checked against the key first.

use crate::rkey::{Access, Rkey};
use crate::types::{AtomicOp, AtomicSize};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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

/// Performs an atomic operation and returns the previous value. Only keys with direct
/// access support atomics here; a CMA key gives `Unsupported` (the protocol layer emulates
/// them). A misaligned address is `InvalidParam`.
pub fn atomic(
    rkey: &Rkey,
    op: AtomicOp,
    size: AtomicSize,
    addr: u64,
    value: u64,
    compare: u64,
) -> Result<u64> {
    if !rkey.is_direct() {
        return Err(Status::Unsupported);
    }
    if addr % size.bytes() as u64 != 0 {
        return Err(Status::InvalidParam);
    }
    let p = rkey.ptr(addr, size.bytes())?;
    match size {
        AtomicSize::B64 => {
            // SAFETY: p is 8-byte aligned (checked), inside mapped memory of the key, and
            // only ever accessed atomically by rucx peers.
            let a = unsafe { AtomicU64::from_ptr(p.cast()) };
            Ok(match op {
                AtomicOp::Add => a.fetch_add(value, Ordering::SeqCst),
                AtomicOp::And => a.fetch_and(value, Ordering::SeqCst),
                AtomicOp::Or => a.fetch_or(value, Ordering::SeqCst),
                AtomicOp::Xor => a.fetch_xor(value, Ordering::SeqCst),
                AtomicOp::Swap => a.swap(value, Ordering::SeqCst),
                AtomicOp::Cswap => {
                    match a.compare_exchange(compare, value, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(v) | Err(v) => v,
                    }
                }
            })
        }
        AtomicSize::B32 => {
            let (v, c) = (value as u32, compare as u32);
            // SAFETY: as above with 4-byte alignment.
            let a = unsafe { AtomicU32::from_ptr(p.cast()) };
            Ok(u64::from(match op {
                AtomicOp::Add => a.fetch_add(v, Ordering::SeqCst),
                AtomicOp::And => a.fetch_and(v, Ordering::SeqCst),
                AtomicOp::Or => a.fetch_or(v, Ordering::SeqCst),
                AtomicOp::Xor => a.fetch_xor(v, Ordering::SeqCst),
                AtomicOp::Swap => a.swap(v, Ordering::SeqCst),
                AtomicOp::Cswap => {
                    match a.compare_exchange(c, v, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(v) | Err(v) => v,
                    }
                }
            }))
        }
    }
}
