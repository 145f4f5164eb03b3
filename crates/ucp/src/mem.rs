//! Memory mapping for remote access: `mem_map` allocates or registers a region with every
//! memory domain of the context, and packs a remote key that names the region (a key id
//! the target checks emulated accesses against) and carries each transport's own key.
//!
//! ```text
//! packed remote key, little endian
//!  0        1        2        3          4        12       20       28
//!  +--------+--------+--------+----------+--------+--------+--------+--------------------+
//!  |version | flags  |   n    | reserved | key id |  base  | length | n × transport key  |
//!  |  = 1   | = 0    |   u8   |  u8 = 0  |  u64   |  u64   |  u64   |                    |
//!  +--------+--------+--------+----------+--------+--------+--------+--------------------+
//!  transport key: transport id u8 | key length u16 | key bytes (uct's packed rkey)
//! ```

use crate::address::tl_id;
use crate::context::Context;
use ucs::{Result, Status};
use uct::wire::{Reader, Writer};
use uct::Transport;

pub const VERSION: u8 = 1;

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

    /// Packs the remote key peers use to reach the region.
    pub fn rkey_pack(&self) -> Vec<u8> {
        PackedKey {
            key_id: self.key_id,
            base: self.base,
            len: self.len,
            keys: self
                .handles
                .iter()
                .map(|(t, h)| (tl_id(*t), h.pack_rkey()))
                .collect(),
        }
        .encode()
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
    /// Maps `len` bytes for remote access: allocated by rucx when `address` is `None`
    /// (in a shared segment, so peers on the host can map it), else the caller's memory
    /// at `address`, which must stay valid while the handle lives.
    pub fn mem_map(&self, address: Option<*mut u8>, len: usize) -> Result<MemH> {
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
            handles.push((r.transport, self.md(i).mem_reg(base, len.max(1))?));
        }
        let key_id = ucs::sys::host::random_u64() | 1;
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

    /// True when `[addr, addr+len)` lies in the region mapped under `key_id`.
    pub(crate) fn region_check(&self, key_id: u64, addr: u64, len: u64) -> bool {
        let Ok(r) = self.regions().lock() else {
            return false;
        };
        r.get(&key_id)
            .is_some_and(|&(b, l)| addr >= b && addr.checked_add(len).is_some_and(|e| e <= b + l))
    }
}

/// A decoded packed key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedKey {
    pub key_id: u64,
    pub base: u64,
    pub len: u64,
    pub keys: Vec<(u8, Vec<u8>)>,
}

impl PackedKey {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64);
        w.u8(VERSION).u8(0).u8(self.keys.len() as u8).u8(0);
        w.u64(self.key_id).u64(self.base).u64(self.len);
        for (t, k) in &self.keys {
            w.u8(*t).u16(k.len() as u16);
            w.buf.extend_from_slice(k);
        }
        w.buf
    }

    pub fn decode(b: &[u8]) -> Result<PackedKey> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(b);
        if r.u8().ok_or(bad)? != VERSION || r.u8().ok_or(bad)? != 0 {
            return Err(bad);
        }
        let n = r.u8().ok_or(bad)?;
        if r.u8().ok_or(bad)? != 0 || n > 16 {
            return Err(bad);
        }
        let key_id = r.u64().ok_or(bad)?;
        let base = r.u64().ok_or(bad)?;
        let len = r.u64().ok_or(bad)?;
        if base.checked_add(len).is_none() {
            return Err(bad);
        }
        let mut keys = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let t = r.u8().ok_or(bad)?;
            let l = r.u16().ok_or(bad)? as usize;
            keys.push((t, r.bytes(l).ok_or(bad)?.to_vec()));
        }
        if !r.is_empty() {
            return Err(bad);
        }
        Ok(PackedKey {
            key_id,
            base,
            len,
            keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(key_id: u64, base in 0u64..1 << 62, len in 0u64..1 << 40,
                      keys in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..48)), 0..4)) {
            let k = PackedKey { key_id, base, len, keys };
            prop_assert_eq!(PackedKey::decode(&k.encode()).unwrap(), k);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = PackedKey::decode(&b);
        }
    }
}
