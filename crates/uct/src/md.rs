//! Memory domains: allocate or register memory and pack/unpack remote keys for it.
//!
//! One `Md` type serves the self and shm transports; they differ in what a registration
//! of user memory packs into (self: a local key valid only inside this process; shm: a
//! cross-memory-attach key). Memory allocated by an `Md` always lives in a shared segment,
//! so a peer on the same host can map it and use direct load/store and CPU atomics on it.
//!
//! The tcp domain registers memory for the tcp transport's `put_zcopy` only: its keys
//! (kind "wire") name a registration id that the receiving transport looks up in a
//! process-wide table ([`wire_target`]) before it writes a single byte received from a
//! socket, so a peer can only write into memory this process registered for that purpose.
//!
//! Invariants: a local key is only unpacked when its whole range lies inside a live
//! registration of this domain (so a forged key cannot aim a copy at arbitrary memory of
//! this process); unpacking a segment key checks the inode and length of what it maps.

use crate::rkey::{Access, PackedRkey, Rkey, RkeyKind};
use crate::Transport;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use ucs::sys::{pidfd::current_pid, SegmentId, ShmSegment};
use ucs::{Result, Status};

/// Registrations alive in a domain: (base address, registration id) → length. The same
/// memory may be registered more than once; each registration is its own entry.
/// Each entry also holds a liveness token that keys unpacked from it check before every
/// access, so a key used after its memory was deregistered is an error, not a fault.
type Regions = Arc<Mutex<BTreeMap<(u64, u64), (u64, Weak<()>)>>>;

static NEXT_REG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A tcp registration: base address, length, liveness token.
type WireReg = (u64, u64, Weak<()>);

/// Registrations of the tcp domain, by registration id. Process-wide because the
/// transport that receives into them does not own the domain.
static WIRE_REGS: Mutex<BTreeMap<u64, WireReg>> = Mutex::new(BTreeMap::new());

/// The liveness token of tcp registration `reg` when it is alive and contains
/// `[addr, addr+len)`; the receiving tcp transport checks this before writing there.
pub fn wire_target(reg: u64, addr: u64, len: u64) -> Option<Weak<()>> {
    let regs = WIRE_REGS.lock().ok()?;
    let &(base, rlen, ref alive) = regs.get(&reg)?;
    let end = addr.checked_add(len)?;
    (addr >= base && end <= base + rlen && alive.strong_count() > 0).then(|| alive.clone())
}

/// A memory domain.
pub struct Md {
    transport: Transport,
    regions: Regions,
    /// Segments of peers already mapped, so that unpacking many keys to one segment maps
    /// it once.
    attached: Mutex<HashMap<SegmentId, Weak<ShmSegment>>>,
}

/// Memory allocated or registered by an [`Md`]; deregistered when dropped.
pub struct MemHandle {
    reg: u64,
    /// Keys unpacked from this registration hold a weak reference to it: dropping the
    /// handle makes them refuse further access.
    _alive: Arc<()>,
    base: u64,
    len: u64,
    seg: Option<Arc<ShmSegment>>,
    kind: RkeyKind,
    regions: Regions,
}

impl MemHandle {
    /// Local address of the region.
    pub fn address(&self) -> *mut u8 {
        self.base as usize as *mut u8
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for a zero-length registration.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the region lives in a shared segment (a peer can map it).
    pub fn is_shared(&self) -> bool {
        self.seg.is_some()
    }

    /// The packed remote key of this region.
    pub fn pack_rkey(&self) -> Vec<u8> {
        let mut k = PackedRkey {
            kind: self.kind,
            pid: current_pid(),
            base: self.base,
            len: self.len,
            fd: -1,
            ino: 0,
            reg: 0,
        };
        if self.kind == RkeyKind::Wire {
            k.reg = self.reg;
        }
        if let Some(seg) = &self.seg {
            k.kind = RkeyKind::Segment;
            k.fd = seg.id().fd;
            k.ino = seg.id().ino;
        }
        k.encode()
    }
}

impl Drop for MemHandle {
    fn drop(&mut self) {
        if let Ok(mut r) = self.regions.lock() {
            r.remove(&(self.base, self.reg));
        }
        if self.kind == RkeyKind::Wire {
            if let Ok(mut r) = WIRE_REGS.lock() {
                r.remove(&self.reg);
            }
        }
    }
}

impl Md {
    /// Opens the memory domain of `transport`.
    pub fn open(transport: Transport) -> Md {
        Md {
            transport,
            regions: Arc::default(),
            attached: Mutex::default(),
        }
    }

    /// The transport this domain belongs to.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// True when the domain's keys serve remote memory access by the protocol layer
    /// (put, get, atomics). tcp's and udp's do not: remote memory over them is reached by
    /// the protocol layer's emulation; tcp's `mem_reg` only makes keys for the tcp
    /// transport's `put_zcopy` (rendezvous data received straight into its destination).
    pub fn supports_rkeys(&self) -> bool {
        !matches!(self.transport, Transport::Tcp | Transport::Udp)
    }

    /// True when `mem_reg` works: every domain but udp's (tcp's keys only serve its
    /// `put_zcopy`; see [`Md::supports_rkeys`]).
    pub fn registers(&self) -> bool {
        self.transport != Transport::Udp
    }

    /// Allocates `len` bytes (zeroed) in a shared segment.
    pub fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        if !self.supports_rkeys() {
            return Err(Status::Unsupported);
        }
        let seg = Arc::new(ShmSegment::create("rucx-mem", len.max(1))?);
        let base = seg.as_ptr() as u64;
        let alive = Arc::new(());
        let reg = self.insert(base, len as u64, &alive)?;
        // Keys to our own segment resolve to this mapping, which they then keep alive. A key
        // names the segment with the region's length (the segment is page-rounded).
        if let Ok(mut cache) = self.attached.lock() {
            let id = SegmentId {
                len: len as u64,
                ..*seg.id()
            };
            cache.insert(id, Arc::downgrade(&seg));
        }
        Ok(MemHandle {
            reg,
            _alive: alive,
            base,
            len: len as u64,
            seg: Some(seg),
            kind: RkeyKind::Segment,
            regions: self.regions.clone(),
        })
    }

    /// Registers existing memory `[addr, addr+len)` of this process. The memory stays the
    /// caller's; it must stay mapped while the handle and any key packed from it live.
    pub fn mem_reg(&self, addr: *mut u8, len: usize) -> Result<MemHandle> {
        let base = addr as u64;
        if addr.is_null() || base.checked_add(len as u64).is_none() {
            return Err(Status::InvalidParam);
        }
        let alive = Arc::new(());
        let reg = self.insert(base, len as u64, &alive)?;
        let kind = match self.transport {
            Transport::SelfTl => RkeyKind::Local,
            Transport::Shm => RkeyKind::Cma,
            Transport::Tcp => RkeyKind::Wire,
            Transport::Udp => return Err(Status::Unsupported),
        };
        if kind == RkeyKind::Wire {
            WIRE_REGS
                .lock()
                .map_err(|_| Status::IoError)?
                .insert(reg, (base, len as u64, Arc::downgrade(&alive)));
        }
        Ok(MemHandle {
            reg,
            _alive: alive,
            base,
            len: len as u64,
            seg: None,
            kind,
            regions: self.regions.clone(),
        })
    }

    fn insert(&self, base: u64, len: u64, alive: &Arc<()>) -> Result<u64> {
        let mut r = self.regions.lock().map_err(|_| Status::IoError)?;
        let reg = NEXT_REG.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        r.insert((base, reg), (len, Arc::downgrade(alive)));
        Ok(reg)
    }

    /// The liveness token of a live registration of this domain that contains
    /// `[addr, addr+len)`.
    fn registration(&self, addr: u64, len: u64) -> Option<Weak<()>> {
        let r = self.regions.lock().ok()?;
        let end = addr.checked_add(len)?;
        r.range(..=(addr, u64::MAX))
            .find(|(&(b, _), (l, w))| b + l >= end && w.strong_count() > 0)
            .map(|(_, (_, w))| w.clone())
    }

    /// Unpacks a key packed by a peer (or by this process) and resolves its access path.
    pub fn rkey_unpack(&self, packed: &[u8]) -> Result<Rkey> {
        let k = PackedRkey::decode(packed)?;
        let me = current_pid();
        // A wire key is for the tcp domain and the tcp domain has no other kind.
        if (k.kind == RkeyKind::Wire) != (self.transport == Transport::Tcp) {
            return Err(Status::InvalidParam);
        }
        let access = match k.kind {
            RkeyKind::Local => {
                if k.pid != me {
                    return Err(Status::InvalidParam);
                }
                let token = self
                    .registration(k.base, k.len)
                    .ok_or(Status::InvalidParam)?;
                Access::Local(token)
            }
            RkeyKind::Segment => Access::Mapped(self.attach(&k.segment_id())?),
            RkeyKind::Cma => Access::Cma,
            RkeyKind::Wire => Access::Wire { reg: k.reg },
        };
        Ok(Rkey {
            base: k.base,
            len: k.len,
            pid: k.pid,
            access,
        })
    }

    fn attach(&self, id: &SegmentId) -> Result<Arc<ShmSegment>> {
        let mut cache = self.attached.lock().map_err(|_| Status::IoError)?;
        if let Some(seg) = cache.get(id).and_then(Weak::upgrade) {
            return Ok(seg);
        }
        cache.retain(|_, w| w.strong_count() > 0);
        let seg = Arc::new(ShmSegment::attach(id)?);
        cache.insert(*id, Arc::downgrade(&seg));
        Ok(seg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_keys_only_for_live_registrations() {
        let md = Md::open(Transport::SelfTl);
        let mut buf = vec![0u8; 64];
        let h = md.mem_reg(buf.as_mut_ptr(), 64).unwrap();
        let packed = h.pack_rkey();
        let rk = md.rkey_unpack(&packed).unwrap();
        assert!(rk.ptr(buf.as_ptr() as u64, 64).is_ok());
        assert_eq!(
            rk.ptr(buf.as_ptr() as u64 + 1, 64).err(),
            Some(Status::InvalidParam)
        );
        // A forged key that extends past the registration is refused.
        let mut k = PackedRkey::decode(&packed).unwrap();
        k.len = 65;
        assert_eq!(
            md.rkey_unpack(&k.encode()).err(),
            Some(Status::InvalidParam)
        );
        drop(h);
        assert_eq!(md.rkey_unpack(&packed).err(), Some(Status::InvalidParam));
    }

    #[test]
    fn allocated_memory_is_a_mappable_segment() {
        let md = Md::open(Transport::Shm);
        let h = md.mem_alloc(1000).unwrap();
        assert!(h.is_shared());
        let other = Md::open(Transport::Shm);
        let rk = other.rkey_unpack(&h.pack_rkey()).unwrap();
        assert!(rk.is_direct());
        let p = rk.ptr(h.address() as u64 + 10, 4).unwrap();
        // SAFETY: p points 10 bytes into a 1000-byte mapping (checked by ptr()).
        unsafe { p.write(77) };
        // SAFETY: the handle's region is 1000 bytes of mapped memory.
        assert_eq!(unsafe { h.address().add(10).read() }, 77);
    }

    #[test]
    fn keys_to_own_allocation_use_its_mapping() {
        let md = Md::open(Transport::Shm);
        // Not a page multiple: the key's length differs from the segment's.
        let h = md.mem_alloc(1000).unwrap();
        let rk = md.rkey_unpack(&h.pack_rkey()).unwrap();
        assert_eq!(rk.ptr(h.address() as u64, 8).unwrap(), h.address());
    }

    #[test]
    fn registered_memory_on_shm_is_cma() {
        let md = Md::open(Transport::Shm);
        let mut buf = vec![0u8; 64];
        let h = md.mem_reg(buf.as_mut_ptr(), 64).unwrap();
        let rk = md.rkey_unpack(&h.pack_rkey()).unwrap();
        assert!(!rk.is_direct());
        assert_eq!(
            rk.ptr(buf.as_ptr() as u64, 1).err(),
            Some(Status::Unsupported)
        );
    }
}
