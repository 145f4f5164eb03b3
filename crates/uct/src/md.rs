//! Memory domains: allocate or register memory and pack/unpack remote keys for it.
//!
//! One `Md` type serves the self and shm transports. A registration of user memory packs
//! into a "memory" key either way; they differ in how they unpack it (self: by pointer,
//! only inside this process and only within a live registration; shm: by cross-memory
//! attach of the owner). Memory allocated by an `Md` always lives in a shared segment, so
//! a peer on the same host can map it and use direct load/store and CPU atomics on it.
//! The owner's process id comes from the key or, for the compact keys ucp packs, from the
//! endpoint's peer ([`Md::rkey_unpack_from`], [`owner_pid`]).
//!
//! The tcp and udp domains register memory for their transports' `put_zcopy` only: their
//! keys (kind "wire") name a registration id that the receiving transport looks up in a
//! process-wide table ([`wire_target`]) before it writes a single byte received from a
//! socket, so a peer can only write into memory this process registered for that purpose.
//!
//! Invariants: a local key is only unpacked when its whole range lies inside a live
//! registration of this domain (so a forged key cannot aim a copy at arbitrary memory of
//! this process); unpacking a segment key checks that the descriptor it obtains is the
//! memfd named after the key's registration id and is long enough for the key.

use crate::rkey::{Access, KeyBytes, PackedRkey, Rkey, RkeyKind};
use crate::Transport;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use ucs::sys::{pidfd::current_pid, ShmSegment};
use ucs::{Result, Status};

/// A segment named by a key: owner pid, descriptor number in the owner, registration id.
type SegKey = (u32, u32, u64);

/// Registrations alive in a domain: (base address, registration id) → length. The same
/// memory may be registered more than once; each registration is its own entry.
/// Each entry also holds a liveness token that keys unpacked from it check before every
/// access, so a key used after its memory was deregistered is an error, not a fault.
type Regions = Arc<Mutex<BTreeMap<(u64, u64), (u64, Weak<()>)>>>;

static NEXT_REG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A new registration id: unique in this process and never reused (ids start at 1, so 0
/// is never one). Registrations of every domain take theirs from here; the protocol layer
/// takes one for regions that no domain registers.
pub fn new_reg_id() -> u64 {
    NEXT_REG.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The memfd name of the segment allocated as registration `id`; a peer that attaches the
/// segment by descriptor number checks it, so a reused number never maps another file.
fn segment_name(id: u64) -> String {
    format!("rucx-mem-{id}")
}

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
    attached: Mutex<HashMap<SegKey, Weak<ShmSegment>>>,
}

/// Memory allocated or registered by an [`Md`]; deregistered when dropped.
pub struct MemHandle {
    reg: u64,
    /// Keys unpacked from this registration hold a weak reference to it: dropping the
    /// handle makes them refuse further access. `None` for shared memory's registered
    /// memory: its keys are resolved by peers (and read through CMA), never in this process.
    _alive: Option<Arc<()>>,
    base: u64,
    len: u64,
    seg: Option<Arc<ShmSegment>>,
    kind: RkeyKind,
    /// The domain's table this registration is an entry of; `None` when it is in none
    /// (see `_alive`).
    regions: Option<Regions>,
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

    /// The registration id (unique in this process, never reused).
    pub fn reg_id(&self) -> u64 {
        self.reg
    }

    /// The fields of this region's key; `with_pid` names this process in it.
    pub fn packed_rkey(&self, with_pid: bool) -> PackedRkey {
        PackedRkey {
            kind: self.kind,
            pid: (with_pid && self.kind != RkeyKind::Wire).then(current_pid),
            base: self.base,
            len: self.len,
            id: self.reg,
            fd: self
                .seg
                .as_ref()
                .map_or(0, |s| u32::try_from(s.id().fd).unwrap_or(0)),
        }
    }

    /// The packed remote key of this region, naming this process: any peer on the host
    /// can unpack it with [`Md::rkey_unpack`].
    pub fn pack_rkey(&self) -> Vec<u8> {
        self.packed_rkey(true).encode()
    }

    /// The packed remote key without this process's id, for peers that unpack it for an
    /// endpoint to this process ([`Md::rkey_unpack_from`]); at most 16 bytes for
    /// registered memory below 4 TiB and allocations below 32 GiB (see `uct::rkey`).
    pub fn pack_rkey_compact(&self) -> KeyBytes {
        self.packed_rkey(false).encode_inline()
    }
}

impl Drop for MemHandle {
    fn drop(&mut self) {
        if let Some(Ok(mut r)) = self.regions.as_ref().map(|r| r.lock()) {
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
        !matches!(
            self.transport,
            Transport::Tcp | Transport::Udp | Transport::Fabric
        )
    }

    /// True when `mem_reg` works: in every domain (tcp's and udp's keys only serve their
    /// transport's `put_zcopy`; see [`Md::supports_rkeys`]).
    pub fn registers(&self) -> bool {
        true
    }

    /// Allocates `len` bytes (zeroed) in a shared segment.
    pub fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        if !self.supports_rkeys() {
            return Err(Status::Unsupported);
        }
        let reg = new_reg_id();
        let seg = Arc::new(ShmSegment::create(&segment_name(reg), len.max(1))?);
        let base = seg.as_ptr() as u64;
        let alive = Arc::new(());
        self.insert_as(reg, base, len as u64, &alive)?;
        // Keys to our own segment resolve to this mapping, which they then keep alive.
        if let Ok(mut cache) = self.attached.lock() {
            let fd = u32::try_from(seg.id().fd).map_err(|_| Status::ShmemSegment)?;
            cache.insert((current_pid(), fd, reg), Arc::downgrade(&seg));
        }
        Ok(MemHandle {
            reg,
            _alive: Some(alive),
            base,
            len: len as u64,
            seg: Some(seg),
            kind: RkeyKind::Segment,
            regions: Some(self.regions.clone()),
        })
    }

    /// Registers existing memory `[addr, addr+len)` of this process. The memory stays the
    /// caller's. Keys packed from the handle let peers (and, for tcp, the receiving
    /// transport on their behalf) read and write that range until the handle is dropped.
    ///
    /// A null `addr` or a range that wraps is refused (`InvalidParam`); nothing else about
    /// the range can be checked here.
    ///
    /// # Safety
    /// Until the returned handle is dropped:
    /// - `[addr, addr+len)` must stay allocated (mapped) and valid for reads and writes;
    /// - the range may be written at any progress of an interface of this process (remote
    ///   puts, atomics, tcp's put frames) or read (remote gets), so the caller must not
    ///   keep references to it that promise it does not change or that no one else reads
    ///   (`&[u8]`, `&mut [u8]`) across such progress; it reads and writes it only through
    ///   raw pointers or between progress calls.
    #[allow(unsafe_code)] // registration hands memory to peers: uct's memory access
    pub unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> Result<MemHandle> {
        let base = addr as u64;
        if addr.is_null() || base.checked_add(len as u64).is_none() {
            return Err(Status::InvalidParam);
        }
        let kind = match self.transport {
            Transport::SelfTl | Transport::Shm => RkeyKind::Memory,
            Transport::Tcp | Transport::Udp | Transport::Fabric => RkeyKind::Wire,
        };
        if self.transport == Transport::Shm {
            // Only the peers resolve shared memory's keys to this memory (by CMA, which
            // checks nothing here): no table entry, no liveness token. This is the
            // registration every rendezvous over shared memory makes.
            return Ok(MemHandle {
                reg: new_reg_id(),
                _alive: None,
                base,
                len: len as u64,
                seg: None,
                kind,
                regions: None,
            });
        }
        let alive = Arc::new(());
        let reg = self.insert(base, len as u64, &alive)?;
        if kind == RkeyKind::Wire {
            WIRE_REGS
                .lock()
                .map_err(|_| Status::IoError)?
                .insert(reg, (base, len as u64, Arc::downgrade(&alive)));
        }
        Ok(MemHandle {
            reg,
            _alive: Some(alive),
            base,
            len: len as u64,
            seg: None,
            kind,
            regions: Some(self.regions.clone()),
        })
    }

    fn insert(&self, base: u64, len: u64, alive: &Arc<()>) -> Result<u64> {
        let reg = new_reg_id();
        self.insert_as(reg, base, len, alive)?;
        Ok(reg)
    }

    fn insert_as(&self, reg: u64, base: u64, len: u64, alive: &Arc<()>) -> Result<()> {
        let mut r = self.regions.lock().map_err(|_| Status::IoError)?;
        r.insert((base, reg), (len, Arc::downgrade(alive)));
        Ok(())
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
    /// The owner's process id comes from the key; a key without one is refused unless
    /// this is the self domain (whose keys are always this process's own).
    pub fn rkey_unpack(&self, packed: &[u8]) -> Result<Rkey> {
        self.rkey_unpack_from(packed, None)
    }

    /// Unpacks a key of the process `owner` (the peer of the endpoint the key is for: see
    /// [`owner_pid`]). A key that names another process than `owner` is refused.
    pub fn rkey_unpack_from(&self, packed: &[u8], owner: Option<u32>) -> Result<Rkey> {
        let k = PackedRkey::decode(packed)?;
        let me = current_pid();
        let bad = Status::InvalidParam;
        // A wire key is for the tcp domain and the tcp domain has no other kind.
        let wire_domain = matches!(
            self.transport,
            Transport::Tcp | Transport::Udp | Transport::Fabric
        );
        if (k.kind == RkeyKind::Wire) != wire_domain {
            return Err(bad);
        }
        let pid = match (k.pid, owner) {
            (Some(a), Some(b)) if a != b => return Err(bad),
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) if wire_domain || self.transport == Transport::SelfTl => me,
            (None, None) => return Err(bad),
        };
        let access = match (self.transport, k.kind) {
            (_, RkeyKind::Wire) => Access::Wire { reg: k.id },
            (Transport::SelfTl, kind) => {
                if pid != me {
                    return Err(bad);
                }
                match self.registration(k.base, k.len) {
                    Some(token) => Access::Local(token),
                    // Another domain's allocation of this process: map its segment.
                    None if kind == RkeyKind::Segment => Access::Mapped(self.attach(pid, &k)?),
                    None => return Err(bad),
                }
            }
            (_, RkeyKind::Segment) => Access::Mapped(self.attach(pid, &k)?),
            (_, RkeyKind::Memory) => Access::Cma,
        };
        Ok(Rkey {
            base: k.base,
            len: k.len,
            pid,
            access,
        })
    }

    fn attach(&self, pid: u32, k: &PackedRkey) -> Result<Arc<ShmSegment>> {
        let id = (pid, k.fd, k.id);
        let mut cache = self.attached.lock().map_err(|_| Status::IoError)?;
        if let Some(seg) = cache.get(&id).and_then(Weak::upgrade) {
            if (seg.len() as u64) < k.len {
                return Err(Status::InvalidParam);
            }
            return Ok(seg);
        }
        cache.retain(|_, w| w.strong_count() > 0);
        let fd = i32::try_from(k.fd).map_err(|_| Status::InvalidParam)?;
        let len = usize::try_from(k.len.max(1)).map_err(|_| Status::InvalidParam)?;
        let seg = Arc::new(ShmSegment::attach_named(pid, fd, &segment_name(k.id), len)?);
        cache.insert(id, Arc::downgrade(&seg));
        Ok(seg)
    }
}

/// The process that owns the interface at `iface_addr` of `transport`, for
/// [`Md::rkey_unpack_from`]: the shm and self addresses name it; other transports reach
/// no process memory directly (`None`).
pub fn owner_pid(transport: Transport, iface_addr: &[u8]) -> Option<u32> {
    match transport {
        Transport::Shm => crate::shm::address::ShmIfaceAddr::decode(iface_addr)
            .ok()
            .map(|a| a.seg.pid),
        Transport::SelfTl => Some(current_pid()),
        Transport::Tcp | Transport::Udp | Transport::Fabric => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_keys_only_for_live_registrations() {
        let md = Md::open(Transport::SelfTl);
        let mut buf = vec![0u8; 64];
        #[allow(unsafe_code)] // testing the unsafe mem_reg
        // SAFETY: `buf` outlives `h` and is only read through the key while `h` lives.
        let h = unsafe { md.mem_reg(buf.as_mut_ptr(), 64) }.unwrap();
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
        // ... also without the pid (as ucp packs it).
        k.pid = None;
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
        let at = h.address() as u64 + 10;
        crate::rma::put(&rk, at, &[&[77]]).unwrap();
        // Read back through the allocating domain's own key (its mapping).
        let mine = md.rkey_unpack(&h.pack_rkey()).unwrap();
        let mut b = [0u8; 1];
        crate::rma::get(&mine, at, &mut [&mut b]).unwrap();
        assert_eq!(b, [77]);
    }

    #[test]
    fn put_one_writes_words_and_pieces_and_refuses_out_of_range() {
        let md = Md::open(Transport::Shm);
        let h = md.mem_alloc(64).unwrap();
        let other = Md::open(Transport::Shm);
        let rk = other.rkey_unpack(&h.pack_rkey()).unwrap();
        let mine = md.rkey_unpack(&h.pack_rkey()).unwrap();
        let base = h.address() as u64;
        let word: Vec<u8> = (1..=8).collect();
        let piece: Vec<u8> = (100..113).collect();
        crate::rma::put_one(&rk, base + 3, &word).unwrap();
        crate::rma::put_one(&rk, base + 20, &piece).unwrap();
        crate::rma::put_one(&rk, base + 40, &[]).unwrap();
        let mut b = [0u8; 64];
        crate::rma::get(&mine, base, &mut [&mut b]).unwrap();
        assert_eq!(&b[3..11], &word[..]);
        assert_eq!(&b[20..33], &piece[..]);
        assert!(b[..3]
            .iter()
            .chain(&b[11..20])
            .chain(&b[33..])
            .all(|&x| x == 0));
        // One byte past the end, or before the start: refused, nothing written.
        assert_eq!(
            crate::rma::put_one(&rk, base + 57, &word).err(),
            Some(Status::InvalidParam)
        );
        assert_eq!(
            crate::rma::put_one(&rk, base - 1, &word).err(),
            Some(Status::InvalidParam)
        );
        crate::rma::get(&mine, base, &mut [&mut b]).unwrap();
        assert!(b[33..].iter().all(|&x| x == 0));
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
        #[allow(unsafe_code)] // testing the unsafe mem_reg
        // SAFETY: `buf` outlives `h` and is only read through the key while `h` lives.
        let h = unsafe { md.mem_reg(buf.as_mut_ptr(), 64) }.unwrap();
        let rk = md.rkey_unpack(&h.pack_rkey()).unwrap();
        assert!(!rk.is_direct());
        assert_eq!(
            rk.ptr(buf.as_ptr() as u64, 1).err(),
            Some(Status::Unsupported)
        );
    }
}
