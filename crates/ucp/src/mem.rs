//! Memory mapping for remote access: `mem_map` allocates or registers a region with every
//! memory domain of the context, and packs a remote key that names the region.
//!
//! The packed key is one transport key of `uct::rkey` (kind 1 "memory" for registered
//! memory, kind 2 "segment" for memory rucx allocated), without the owner's process id:
//! `Worker::rkey_unpack` takes that from the endpoint the key is unpacked for. Its
//! registration id doubles as the region's key id, which the target checks every emulated
//! access against. One more form exists, the empty key (a single zero byte, which is also
//! how UCX's packed key of memory registered with no transport begins): it names no
//! region, so accesses through it are emulated and the target checks them against all of
//! its mapped regions.
//!
//! This module and `core::buf` are the two of ucp that read and write raw memory: here,
//! the regions mapped for peers, always under the registry's lock (the lease), so that a
//! region cannot be unmapped between the check of an access and the access.
//!
//! ```text
//! packed remote key
//!   0x00                              the empty key (1 byte)
//!   0x21 | base | length | id         registered memory (uct kind 1, varints; 0x25 when
//!                                     the base is the 6-byte form)
//!   0x22 | base/4096 | length | id | fd   an allocated segment (uct kind 2, varints)
//! ```

use crate::context::Context;
use std::sync::atomic::{AtomicU32, AtomicU64};
use ucs::{Result, Status};
use uct::rkey::{PackedRkey, RkeyKind};
use uct::Transport;
use uct::{AtomicOp, AtomicSize};

/// A mapped region. Unmapped (and its key id forgotten, so emulated accesses with it are
/// refused) when dropped.
pub struct MemH {
    ctx: Context,
    key_id: u64,
    base: u64,
    len: u64,
    /// The transport-level registration per resource of the context.
    handles: Vec<(Transport, uct::MemHandle)>,
    allocated: bool,
}

impl std::fmt::Debug for MemH {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemH({:#x}+{} key {:#x})",
            self.base, self.len, self.key_id
        )
    }
}

impl MemH {
    /// Start of the region in this process.
    pub fn address(&self) -> *mut u8 {
        self.base as usize as *mut u8
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when rucx allocated the memory (it lives in a shared segment peers can map).
    pub fn is_allocated(&self) -> bool {
        self.allocated
    }

    /// The region's key id.
    pub fn key_id(&self) -> u64 {
        self.key_id
    }

    /// Packs the remote key peers use to reach the region (at most 16 bytes for
    /// registered memory below 4 TiB and allocations below 32 GiB).
    pub fn rkey_pack(&self) -> Vec<u8> {
        PackedKey::Region(self.packed()).encode()
    }

    /// The key's fields: those of the registration whose id is the key id (a segment
    /// when rucx allocated the memory), or a plain memory key when no domain registers.
    fn packed(&self) -> PackedRkey {
        match self.handles.iter().find(|(_, h)| h.reg_id() == self.key_id) {
            Some((_, h)) => h.packed_rkey(false),
            None => PackedRkey {
                kind: RkeyKind::Memory,
                pid: None,
                base: self.base,
                len: self.len,
                id: self.key_id,
                fd: 0,
            },
        }
    }
}

impl Drop for MemH {
    fn drop(&mut self) {
        if let Ok(mut r) = self.ctx.regions().lock() {
            r.remove(&self.key_id);
        }
    }
}

impl Context {
    /// Allocates `len` bytes mapped for remote access (in a shared segment, so peers on
    /// the host can map it). The memory lives as long as the handle.
    pub fn mem_alloc(&self, len: usize) -> Result<MemH> {
        // SAFETY: no caller memory is involved: rucx allocates the region.
        unsafe { self.mem_map(None, len) }
    }

    /// Maps `len` bytes for remote access: allocated by rucx when `address` is `None`
    /// (as [`Context::mem_alloc`]), else the caller's memory at `address`.
    ///
    /// # Safety
    /// With `Some(address)`: `address..address+len` must be valid for reads and writes
    /// for as long as the returned handle lives, and the caller must expect peers to read
    /// and write it at any time meanwhile (not hold Rust references to it that assume
    /// otherwise).
    pub unsafe fn mem_map(&self, address: Option<*mut u8>, len: usize) -> Result<MemH> {
        if len == 0 && address.is_none() {
            return Err(Status::InvalidParam);
        }
        let mut handles = Vec::new();
        let (base, allocated) = match address {
            None => {
                // Allocate in a shared segment (the shm domain's, or a private one) and
                // register that memory with the other domains.
                let (t, md) = self.alloc_md();
                let h = md.mem_alloc(len)?;
                let base = h.address();
                handles.push((t, h));
                (base, true)
            }
            Some(p) if p.is_null() => return Err(Status::InvalidParam),
            Some(p) => (p, false),
        };
        for (i, r) in self.resources().iter().enumerate() {
            // One key per transport; transports without keys (tcp) are reached by
            // emulation.
            if handles.iter().any(|(t, _)| *t == r.transport) || !self.md(i).supports_rkeys() {
                continue;
            }
            // SAFETY: `base` is our allocation (kept in `handles`) or the caller's memory,
            // which this function's contract says stays valid while the handle lives.
            let h = unsafe { self.md(i).mem_reg(base, len.max(1)) }?;
            handles.push((r.transport, h));
        }
        // The key id is the id of the key's registration: the allocation, else the first
        // registration (every domain's key to user memory is the same "memory" key).
        let key_id = handles
            .first()
            .map_or_else(uct::md::new_reg_id, |(_, h)| h.reg_id());
        self.regions()
            .lock()
            .map_err(|_| Status::IoError)?
            .insert(key_id, (base as u64, len as u64));
        Ok(MemH {
            ctx: self.clone(),
            key_id,
            base: base as u64,
            len: len as u64,
            handles,
            allocated,
        })
    }

    /// Runs `access` on `[addr, addr+len)` if that range lies in the region mapped under
    /// `key_id` (for key id 0, the empty key, in any region mapped now), holding the
    /// region registry's lock meanwhile: the lease. A region is unmapped only after
    /// [`MemH`]'s drop removed it from the registry under the same lock, so the memory
    /// cannot go away between the check and the access, from any thread. Returns `None`
    /// (and does not call `access`) when the range is not mapped.
    fn with_region<T>(
        &self,
        key_id: u64,
        addr: u64,
        len: u64,
        access: impl FnOnce(*mut u8) -> T,
    ) -> Option<T> {
        let r = self.regions().lock().ok()?;
        let end = addr.checked_add(len)?;
        let inside = |&(b, l): &(u64, u64)| addr >= b && end <= b + l;
        let ok = if key_id == 0 {
            r.values().any(inside)
        } else {
            r.get(&key_id).is_some_and(inside)
        };
        // The lock guard lives until the end of this function, after `access`.
        ok.then(|| access(addr as usize as *mut u8))
    }
}

impl Context {
    /// True when `[addr, addr+len)` lies in the region `key_id` (see `with_region`).
    pub(crate) fn region_is_mapped(&self, key_id: u64, addr: u64, len: u64) -> bool {
        self.with_region(key_id, addr, len, |_| ()).is_some()
    }

    /// Copies `dst.len()` bytes at `addr` of the region `key_id` into `dst`; false (and
    /// nothing copied) when that range is not mapped.
    pub(crate) fn region_read(&self, key_id: u64, addr: u64, dst: &mut [u8]) -> bool {
        dst.is_empty()
            || self
                .with_region(key_id, addr, dst.len() as u64, |p| {
                    // SAFETY: with_region holds the lease on a region of this process that
                    // contains p..p+len; `dst` is not in it (a transport's or our buffer).
                    unsafe { ucs::sys::copy::copy_raw(p.cast_const(), dst.as_mut_ptr(), dst.len()) }
                })
                .is_some()
    }

    /// Copies `data` to `addr` of the region `key_id`; false (and nothing written) when
    /// that range is not mapped.
    pub(crate) fn region_write(&self, key_id: u64, addr: u64, data: &[u8]) -> bool {
        data.is_empty()
            || self
                .with_region(key_id, addr, data.len() as u64, |p| {
                    // SAFETY: with_region holds the lease on a region of this process that
                    // contains p..p+len; `data` is not in it.
                    unsafe { ucs::sys::copy::copy_raw(data.as_ptr(), p, data.len()) }
                })
                .is_some()
    }

    /// Runs `f` on the 64-bit word at `addr` of the region `key_id`, if it is mapped and
    /// 8-byte aligned.
    pub(crate) fn region_word64<T>(
        &self,
        key_id: u64,
        addr: u64,
        f: impl FnOnce(&AtomicU64) -> T,
    ) -> Option<T> {
        if addr % 8 != 0 {
            return None;
        }
        self.with_region(key_id, addr, 8, |p| {
            // SAFETY: with_region holds the lease on a region of this process that
            // contains the word, which is aligned (checked above); rucx accesses such
            // words only atomically, and the reference does not leave `f`.
            f(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
        })
    }

    /// A CPU atomic on the word at `addr` of the region `key_id`; the previous value, or
    /// `None` when the word is not mapped or not aligned for `size`.
    pub(crate) fn region_atomic(
        &self,
        key_id: u64,
        addr: u64,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
    ) -> Option<u64> {
        match size {
            AtomicSize::B64 => {
                self.region_word64(key_id, addr, |a| uct::rma::apply64(a, op, value, compare))
            }
            AtomicSize::B32 => {
                if addr % 4 != 0 {
                    return None;
                }
                self.with_region(key_id, addr, 4, |p| {
                    // SAFETY: as in region_word64, for an aligned 32-bit word.
                    let a = unsafe { AtomicU32::from_ptr(p.cast::<u32>()) };
                    u64::from(uct::rma::apply32(a, op, value as u32, compare as u32))
                })
            }
        }
    }
}

/// A decoded packed key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackedKey {
    /// The empty key: no region; accesses are emulated and checked by the target against
    /// all of its mapped regions.
    Any,
    /// A region: a uct key of kind memory or segment, usually without a pid.
    Region(PackedRkey),
}

/// The longest packed key.
pub const MAX_PACKED_LEN: usize = uct::rkey::MAX_PACKED_LEN;

impl PackedKey {
    /// The one byte of the empty key.
    pub const EMPTY: u8 = 0;

    pub fn encode(&self) -> Vec<u8> {
        match self {
            PackedKey::Any => vec![Self::EMPTY],
            PackedKey::Region(k) => k.encode(),
        }
    }

    pub fn decode(b: &[u8]) -> Result<PackedKey> {
        if b == [Self::EMPTY] {
            return Ok(PackedKey::Any);
        }
        let k = PackedRkey::decode(b)?;
        if k.kind == RkeyKind::Wire {
            return Err(Status::InvalidParam);
        }
        Ok(PackedKey::Region(k))
    }

    /// The length of the key whose bytes are `byte(0)`, `byte(1)`, ..., found from the
    /// bytes alone and reading none past the key's end (see
    /// [`PackedRkey::encoded_len`]).
    pub fn encoded_len(mut byte: impl FnMut(usize) -> u8) -> Result<usize> {
        if byte(0) == Self::EMPTY {
            return Ok(1);
        }
        PackedRkey::encoded_len(byte)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = PackedKey> {
        let region = (
            any::<bool>(),
            proptest::option::of(1u32..=i32::MAX as u32),
            0u64..1 << 57,
            0u64..1 << 50,
            any::<u64>(),
            0u32..=i32::MAX as u32,
        )
            .prop_map(|(seg, pid, base, len, id, fd)| {
                PackedKey::Region(PackedRkey {
                    kind: if seg {
                        RkeyKind::Segment
                    } else {
                        RkeyKind::Memory
                    },
                    pid,
                    base: if seg { base & !4095 } else { base },
                    len,
                    id,
                    fd: if seg { fd } else { 0 },
                })
            });
        prop_oneof![Just(PackedKey::Any), region]
    }

    proptest! {
        #[test]
        fn round_trip(k in key()) {
            let b = k.encode();
            prop_assert_eq!(PackedKey::decode(&b).unwrap(), k);
            prop_assert_eq!(PackedKey::encoded_len(|i| b.get(i).copied().unwrap_or(0x80)), Ok(b.len()));
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(k) = PackedKey::decode(&b) {
                prop_assert_eq!(k.encode(), b.clone());
            }
            let _ = PackedKey::encoded_len(|i| b.get(i).copied().unwrap_or(0));
        }
    }

    #[test]
    fn empty_and_wire_keys() {
        assert_eq!(PackedKey::decode(&[0]), Ok(PackedKey::Any));
        assert!(PackedKey::decode(&[0, 0]).is_err());
        assert!(PackedKey::decode(&[]).is_err());
        let wire = PackedRkey {
            kind: RkeyKind::Wire,
            pid: None,
            base: 64,
            len: 8,
            id: 1,
            fd: 0,
        };
        assert_eq!(PackedKey::decode(&wire.encode()), Err(Status::InvalidParam));
    }
}
