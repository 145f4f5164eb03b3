//! Packed remote keys and their unpacked, resolved form.
//!
//! ```text
//! packed rkey, little endian (24 bytes; 40 for kind 2; 32 for kind 4)
//!  0       1      2          4      8               16              24      28        32          40
//!  +-------+------+----------+------+---------------+---------------+-------+---------+-----------+
//!  |version| kind | reserved | pid  | base address  |    length     |  fd   | reserved|  inode    |
//!  |  = 1  |  u8  |  u16 = 0 | u32  | u64 (owner VA)|     u64       |  i32  | u32 = 0 |   u64     |
//!  +-------+------+----------+------+---------------+---------------+-------+---------+-----------+
//!  kind 1 = local: memory of this very process, reached by pointer (self transport)
//!  kind 2 = segment: a shared-memory segment the peer maps (direct load/store, CPU atomics)
//!  kind 3 = cma: any memory of the owner process, reached by process_vm_readv/writev
//!  kind 4 = wire: memory the owner's tcp transport writes received data into; bytes 24..32
//!           hold the registration id (u64) the owner checks every write against
//! ```
//! Unpacking resolves the access path once ("resolve once" in DESIGN.md); an operation then
//! only checks that its range lies inside the key and copies.

use crate::wire::{Reader, Writer};
use std::sync::Arc;
use ucs::sys::{SegmentId, ShmSegment};
use ucs::{Result, Status};

pub const VERSION: u8 = 1;

/// The largest packed key [`PackedRkey::encode`] makes, in bytes (for APIs that reserve a
/// fixed-size buffer per key, like UCT's `rkey_packed_size`).
pub const MAX_PACKED_LEN: usize = 40;

/// How the memory behind a key is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RkeyKind {
    Local = 1,
    Segment = 2,
    Cma = 3,
    Wire = 4,
}

/// The decoded fields of a packed key (before resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedRkey {
    pub kind: RkeyKind,
    pub pid: u32,
    pub base: u64,
    pub len: u64,
    /// Present for `RkeyKind::Segment` only.
    pub fd: i32,
    pub ino: u64,
    /// Present for `RkeyKind::Wire` only: the owner's registration id.
    pub reg: u64,
}

impl PackedRkey {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(40);
        w.u8(VERSION)
            .u8(self.kind as u8)
            .u16(0)
            .u32(self.pid)
            .u64(self.base)
            .u64(self.len);
        if self.kind == RkeyKind::Segment {
            w.i32(self.fd).u32(0).u64(self.ino);
        }
        if self.kind == RkeyKind::Wire {
            w.u64(self.reg);
        }
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<PackedRkey> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(buf);
        if r.u8().ok_or(bad)? != VERSION {
            return Err(bad);
        }
        let kind = match r.u8().ok_or(bad)? {
            1 => RkeyKind::Local,
            2 => RkeyKind::Segment,
            3 => RkeyKind::Cma,
            4 => RkeyKind::Wire,
            _ => return Err(bad),
        };
        if r.u16().ok_or(bad)? != 0 {
            return Err(bad);
        }
        let pid = r.u32().ok_or(bad)?;
        let base = r.u64().ok_or(bad)?;
        let len = r.u64().ok_or(bad)?;
        let (mut fd, mut ino) = (-1, 0);
        if kind == RkeyKind::Segment {
            fd = r.i32().ok_or(bad)?;
            if r.u32().ok_or(bad)? != 0 {
                return Err(bad);
            }
            ino = r.u64().ok_or(bad)?;
            if fd < 0 {
                return Err(bad);
            }
        }
        let mut reg = 0;
        if kind == RkeyKind::Wire {
            reg = r.u64().ok_or(bad)?;
        }
        if !r.is_empty() || pid == 0 || base.checked_add(len).is_none() {
            return Err(bad);
        }
        Ok(PackedRkey {
            kind,
            pid,
            base,
            len,
            fd,
            ino,
            reg,
        })
    }

    /// The segment this key names (kind 2).
    pub fn segment_id(&self) -> SegmentId {
        SegmentId {
            pid: self.pid,
            fd: self.fd,
            ino: self.ino,
            len: self.len,
        }
    }
}

/// The resolved access path of an unpacked key.
#[derive(Clone)]
pub(crate) enum Access {
    /// `remote address == local address`: this process's own registered memory, checked
    /// against the domain's registrations when unpacked. The token is the registration's
    /// liveness: once it is gone, every access is refused (the memory may be gone too).
    Local(std::sync::Weak<()>),
    /// Mapped segment: local address = map base + (remote address - key base).
    Mapped(Arc<ShmSegment>),
    /// Copy through process_vm_readv/writev of `pid`.
    Cma,
    /// Reached only by a transport that sends the data to the owner, who writes it into
    /// registration `reg` (tcp's `put_zcopy`); no local access.
    Wire { reg: u64 },
}

/// An unpacked remote key: everything an RMA or atomic operation needs.
#[derive(Clone)]
pub struct Rkey {
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) pid: u32,
    pub(crate) access: Access,
}

impl std::fmt::Debug for Rkey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.access {
            Access::Local(_) => "local",
            Access::Mapped(_) => "mapped",
            Access::Cma => "cma",
            Access::Wire { .. } => "wire",
        };
        write!(
            f,
            "Rkey({kind} pid {} {:#x}+{})",
            self.pid, self.base, self.len
        )
    }
}

impl Rkey {
    /// Checks `[addr, addr+len)` lies inside the key.
    #[inline]
    pub(crate) fn check(&self, addr: u64, len: usize) -> Result<()> {
        let end = addr.checked_add(len as u64).ok_or(Status::InvalidParam)?;
        if addr < self.base || end > self.base + self.len {
            return Err(Status::InvalidParam);
        }
        Ok(())
    }

    /// A local pointer to remote address `addr` when the memory is directly reachable
    /// (local or mapped), after checking `len` bytes fit in the key.
    #[inline]
    pub fn ptr(&self, addr: u64, len: usize) -> Result<*mut u8> {
        self.check(addr, len)?;
        match &self.access {
            Access::Local(alive) => {
                if alive.strong_count() == 0 {
                    return Err(Status::InvalidParam);
                }
                Ok(addr as usize as *mut u8)
            }
            Access::Mapped(seg) => {
                // SAFETY: check() proved addr - base + len <= key len <= segment len
                // (the segment was attached with at least the key's length).
                Ok(unsafe { seg.as_ptr().add((addr - self.base) as usize) })
            }
            Access::Cma | Access::Wire { .. } => Err(Status::Unsupported),
        }
    }

    /// True when `ptr` works (direct load/store and CPU atomics).
    pub fn is_direct(&self) -> bool {
        matches!(self.access, Access::Local(_) | Access::Mapped(_))
    }

    /// The owner's registration id of a wire key (see [`RkeyKind::Wire`]).
    pub fn wire_reg(&self) -> Option<u64> {
        match self.access {
            Access::Wire { reg } => Some(reg),
            _ => None,
        }
    }

    /// The same memory reached by cross-memory attach instead (the key's addresses are
    /// the owner's own, so a mapped or local key also works through CMA).
    pub fn to_cma(&self) -> Rkey {
        Rkey {
            base: self.base,
            len: self.len,
            pid: self.pid,
            access: Access::Cma,
        }
    }

    /// The owner's base address and length of the key's region.
    pub fn range(&self) -> (u64, u64) {
        (self.base, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = RkeyKind> {
        prop_oneof![
            Just(RkeyKind::Local),
            Just(RkeyKind::Segment),
            Just(RkeyKind::Cma),
            Just(RkeyKind::Wire)
        ]
    }

    proptest! {
        #[test]
        fn round_trip(kind in kind(), pid in 1u32.., base in 0u64..1 << 60, len in 0u64..1 << 40,
                      fd in 0i32.., ino: u64, reg: u64) {
            let (fd, ino) = if kind == RkeyKind::Segment { (fd, ino) } else { (-1, 0) };
            let reg = if kind == RkeyKind::Wire { reg } else { 0 };
            let k = PackedRkey { kind, pid, base, len, fd, ino, reg };
            prop_assert!(k.encode().len() <= MAX_PACKED_LEN);
            prop_assert_eq!(PackedRkey::decode(&k.encode()).unwrap(), k);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = PackedRkey::decode(&bytes);
        }
    }

    #[test]
    fn corrupted_keys_are_rejected() {
        let k = PackedRkey {
            kind: RkeyKind::Segment,
            pid: 7,
            base: 4096,
            len: 100,
            fd: 3,
            ino: 11,
            reg: 0,
        };
        let good = k.encode();
        for i in [0usize, 1, 2] {
            let mut b = good.clone();
            b[i] = 0xff;
            assert_eq!(
                PackedRkey::decode(&b),
                Err(Status::InvalidParam),
                "byte {i}"
            );
        }
        assert!(PackedRkey::decode(&good[..good.len() - 1]).is_err());
        let mut wrap = k;
        wrap.base = u64::MAX - 10;
        assert!(PackedRkey::decode(&wrap.encode()).is_err());
    }
}
