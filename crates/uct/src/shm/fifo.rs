//! The shared-memory receive FIFO: a multi-producer, single-consumer ring of fixed-size
//! elements in the receiver's segment, with one bcopy buffer per element.
//!
//! ```text
//! segment layout (offsets in bytes)
//!   0    Ctl.hdr     magic, version, geometry        written once by the owner
//!   128  Ctl.prod    tail: next slot to claim        producers (CAS), consumer (arm bit)
//!   256  Ctl.cons    head: next slot to consume      consumer (store), producers (load)
//!   384  reserved    (zero)
//!   512  elements    fifo_size × elem_size           element t % fifo_size
//!   ...  bcopy area  fifo_size × bcopy_size          buffer t % fifo_size (page aligned)
//!
//! element: seq u64 | len u32 | am_id u8 | flags u8 | reserved u16 | inline data
//! ```
//!
//! Protocol. A producer claims slot `t` by advancing `tail` with a compare-and-swap while
//! `t - head < fifo_size`; the slot and its bcopy buffer are then its own. It writes the
//! payload and the element fields and publishes by storing `seq = t`. The consumer owns
//! `head`: it waits for `seq == head` in the element at `head`, hands the data to the
//! handler, and advances `head`. Producers see the head the consumer last stored in
//! `Ctl.head`, which it does once it is a quarter of the FIFO ahead and before it sleeps;
//! that frees the slots up to it for claims up to `head + fifo_size`. Counters are 64-bit
//! and never wrap in practice.
//!
//! Sleeping. The top bit of `tail` says "the consumer sleeps". The consumer sets it with an
//! atomic or and looks at the value it replaced: if some slot was claimed since its head
//! it does not sleep (data is on its way). Otherwise every later claim — a compare-and-swap
//! on the same word — sees the bit, clears it, and that producer signals the consumer's
//! eventfd after publishing. Both sides only touch `tail` with read-modify-writes, so the
//! word's single modification order decides who sees whom: no lost wakeup, no fence on
//! the publish path, and no system call while the consumer is awake.
//!
//! Trust. Everything in the segment can be written by any process that mapped it. The
//! consumer keeps its own copy of `head` and reads only `seq`, `len`, `am_id` and `flags` of
//! the element at it, checking them before use; a bad element is counted and skipped. The
//! geometry a producer uses comes from the header and is validated against the segment's
//! length on attach, and every slot index is masked, so nothing a peer writes makes either
//! side access memory outside the segment. A producer that dies between claim and
//! publish would stall the FIFO; right after its claim it writes its process id into the
//! slot's length word, and the consumer, finding the head slot stuck, skips it once that
//! process is gone ([`FifoRx::recover_stall`]).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use ucs::sys::ShmSegment;
use ucs::{Result, Status};

const MAGIC: u64 = u64::from_le_bytes(*b"RUCXFIFO");
const LAYOUT_VERSION: u32 = 2;
/// The "consumer sleeps" bit of `tail`.
const ARMED: u64 = 1 << 63;
/// Set in an element's length word between claim and publish: the rest is the claiming
/// producer's process id.
const OWNER_MARK: u32 = 1 << 31;

/// How many slots ahead of its claim a producer asks for the element's line (a hint).
const PREFETCH_AHEAD: u64 = 4;

/// Asks the CPU for the cache line at `p` in a writable state, so that the store into an
/// element the consumer last read does not wait for that line then. Only a hint: it reads
/// and writes nothing, and no address makes it fault.
#[inline(always)]
fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHW only hints the cache; it cannot fault or change memory, and it
    // executes as a no-operation on processors without it.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Size of an element's header; inline data follows it.
pub const ELEM_HDR: usize = 16;

/// The element's payload is inline.
pub const FLAG_INLINE: u8 = 1;
/// The element's payload is in the slot's bcopy buffer.
pub const FLAG_BCOPY: u8 = 2;
/// The slot carries no message: its producer gave up after claiming it (a packer that
/// failed or panicked). The consumer skips it without counting it as malformed.
pub const FLAG_SKIP: u8 = 3;

#[repr(C, align(128))]
struct Hdr {
    magic: u64,
    version: u32,
    fifo_size: u32,
    elem_size: u32,
    bcopy_size: u32,
    elems_offset: u64,
    bcopy_offset: u64,
}

#[repr(C, align(128))]
struct Line64 {
    v: AtomicU64,
}

#[repr(C, align(128))]
struct Line32 {
    v: AtomicU32,
}

#[repr(C)]
struct Ctl {
    hdr: Hdr,
    tail: Line64,
    head: Line64,
    reserved: Line32,
}

#[repr(C)]
struct ElemHdr {
    seq: AtomicU64,
    len: AtomicU32,
    am_id: AtomicU8,
    flags: AtomicU8,
    reserved: [u8; 2],
}

impl ElemHdr {
    /// Publishes claimed slot `t`: the fields, then `seq` with release ordering, after
    /// which the consumer may read the element and its payload.
    #[inline(always)]
    fn publish(&self, t: u64, am_id: u8, flags: u8, len: usize) {
        self.len.store(len as u32, Ordering::Relaxed);
        self.am_id.store(am_id, Ordering::Relaxed);
        self.flags.store(flags, Ordering::Relaxed);
        self.seq.store(t, Ordering::Release);
    }
}

const CTL_SIZE: usize = 512;
const _: () = {
    assert!(std::mem::size_of::<Ctl>() == CTL_SIZE);
    assert!(std::mem::offset_of!(Ctl, tail) == 128);
    assert!(std::mem::offset_of!(Ctl, head) == 256);
    assert!(std::mem::offset_of!(Ctl, reserved) == 384);
    assert!(std::mem::size_of::<ElemHdr>() == ELEM_HDR);
    assert!(std::mem::offset_of!(ElemHdr, len) == 8);
    assert!(std::mem::offset_of!(ElemHdr, am_id) == 12);
    assert!(std::mem::offset_of!(ElemHdr, flags) == 13);
};

/// The shape of a FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Number of elements; a power of two.
    pub fifo_size: u32,
    /// Bytes per element, header included; a multiple of 64, at least 64.
    pub elem_size: u32,
    /// Bytes per bcopy buffer; a multiple of 64, at least 64.
    pub bcopy_size: u32,
}

impl Geometry {
    /// Checks the constraints above.
    pub fn validate(&self) -> Result<()> {
        let ok = self.fifo_size.is_power_of_two()
            && self.fifo_size >= 2
            && self.fifo_size <= 1 << 16
            && self.elem_size >= 64
            && self.elem_size % 64 == 0
            && self.elem_size <= 1 << 16
            && self.bcopy_size >= 64
            && self.bcopy_size % 64 == 0
            && self.bcopy_size <= 1 << 24;
        if ok {
            Ok(())
        } else {
            Err(Status::InvalidParam)
        }
    }

    fn elems_offset(&self) -> usize {
        CTL_SIZE
    }

    fn bcopy_offset(&self) -> usize {
        let end = CTL_SIZE + self.fifo_size as usize * self.elem_size as usize;
        end.div_ceil(4096) * 4096
    }

    /// Total segment bytes needed.
    pub fn segment_len(&self) -> usize {
        self.bcopy_offset() + self.fifo_size as usize * self.bcopy_size as usize
    }

    /// Largest inline payload of one element.
    pub fn inline_capacity(&self) -> usize {
        self.elem_size as usize - ELEM_HDR
    }
}

/// Shared access to the FIFO in a mapped segment, with the geometry proven to fit.
struct Ring {
    seg: Arc<ShmSegment>,
    /// The segment's start, where `Ctl` is: kept so that a claim or a head update does
    /// not go through the `Arc` to the mapping for it.
    ctl: *const Ctl,
    geo: Geometry,
    mask: u64,
    elems: *mut u8,
    bcopy: *mut u8,
}

// SAFETY: the raw pointers point into `seg`, which is kept alive by the Arc and is itself
// Send + Sync; all shared fields are accessed through atomics.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    fn new(seg: Arc<ShmSegment>, geo: Geometry) -> Result<Ring> {
        geo.validate()?;
        if seg.len() < geo.segment_len() {
            return Err(Status::InvalidAddr);
        }
        let base = seg.as_ptr();
        // SAFETY: segment_len() <= seg.len(), so both offsets are inside the mapping.
        let (elems, bcopy) =
            unsafe { (base.add(geo.elems_offset()), base.add(geo.bcopy_offset())) };
        Ok(Ring {
            ctl: base as *const Ctl,
            seg,
            geo,
            mask: u64::from(geo.fifo_size) - 1,
            elems,
            bcopy,
        })
    }

    #[inline]
    fn ctl(&self) -> &Ctl {
        // SAFETY: `ctl` is the start of `seg`, which `self` keeps mapped; the segment
        // starts with CTL_SIZE bytes laid out as Ctl (page-aligned mapping, so 128-byte
        // alignment holds); the shared fields are atomics.
        unsafe { &*self.ctl }
    }

    #[inline]
    fn elem(&self, t: u64) -> *mut u8 {
        // SAFETY: (t & mask) < fifo_size, and the element array has fifo_size elements.
        unsafe {
            self.elems
                .add((t & self.mask) as usize * self.geo.elem_size as usize)
        }
    }

    #[inline]
    fn elem_hdr(&self, t: u64) -> &ElemHdr {
        // SAFETY: elem() is inside the segment and 64-byte aligned; ElemHdr has atomics
        // (plus two reserved bytes nobody reads).
        unsafe { &*(self.elem(t) as *const ElemHdr) }
    }

    #[inline]
    fn bcopy_buf(&self, t: u64) -> *mut u8 {
        // SAFETY: (t & mask) < fifo_size buffers of bcopy_size bytes each.
        unsafe {
            self.bcopy
                .add((t & self.mask) as usize * self.geo.bcopy_size as usize)
        }
    }
}

/// The receiving side: owns the segment.
pub struct FifoRx {
    ring: Ring,
    head: u64,
    /// The element at `head` (`ring.elem(head)`), kept so that polling an empty FIFO
    /// costs one load and one compare.
    head_elem: *mut u8,
    /// The head as producers last saw it (`Ctl.head`): published once `head` is
    /// `release` ahead, so that a producer waiting for room, which reads the line over
    /// and over, does not take it away from the consumer for every element.
    published: u64,
    release: u64,
    max_poll: usize,
    dropped: u64,
    /// The claimed but unpublished slot at `head` and when it was first seen stuck.
    stall: Option<(u64, u64)>,
}

// SAFETY: `head_elem` points into the ring's segment, which the ring keeps alive; the
// consumer's own fields are only touched through `&mut self`, and the shared ones are
// atomics (as for `Ring`).
unsafe impl Send for FifoRx {}
// SAFETY: as above; `&self` methods only read the cached pointer and atomics.
unsafe impl Sync for FifoRx {}

impl FifoRx {
    /// Creates a segment with an empty FIFO of shape `geo`.
    pub fn create(geo: Geometry, max_poll: usize) -> Result<FifoRx> {
        geo.validate()?;
        let seg = Arc::new(ShmSegment::create("rucx-fifo", geo.segment_len())?);
        let ring = Ring::new(seg, geo)?;
        for t in 0..u64::from(geo.fifo_size) {
            // Initial seq must not equal any slot's first claim number.
            ring.elem_hdr(t).seq.store(u64::MAX, Ordering::Relaxed);
        }
        let base = ring.seg.as_ptr() as *mut Hdr;
        // SAFETY: nobody else knows the segment yet, so this plain write of the header
        // cannot race; it is published to peers by the Release fence below and by sending
        // the address through a channel that synchronises.
        unsafe {
            base.write(Hdr {
                magic: MAGIC,
                version: LAYOUT_VERSION,
                fifo_size: geo.fifo_size,
                elem_size: geo.elem_size,
                bcopy_size: geo.bcopy_size,
                elems_offset: geo.elems_offset() as u64,
                bcopy_offset: geo.bcopy_offset() as u64,
            })
        };
        fence(Ordering::Release);
        let head_elem = ring.elem(0);
        Ok(FifoRx {
            ring,
            head: 0,
            head_elem,
            published: 0,
            release: release_step(geo.fifo_size),
            max_poll: max_poll.max(1),
            dropped: 0,
            stall: None,
        })
    }

    /// The segment (its id goes into the interface address).
    pub fn segment(&self) -> &Arc<ShmSegment> {
        &self.ring.seg
    }

    /// The FIFO's shape.
    pub fn geometry(&self) -> Geometry {
        self.ring.geo
    }

    /// Number of malformed elements skipped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// True when the next element is published.
    #[inline]
    pub fn has_data(&self) -> bool {
        self.head_hdr().seq.load(Ordering::Acquire) == self.head
    }

    /// The header of the element at `head`.
    #[inline]
    fn head_hdr(&self) -> &ElemHdr {
        // SAFETY: `head_elem` is `ring.elem(head)` (kept so by `advance`): inside the
        // segment, 64-byte aligned, an element header of atomics.
        unsafe { &*(self.head_elem as *const ElemHdr) }
    }

    /// Moves `head` to `t`, and the cached element address with it.
    #[inline]
    fn advance(&mut self, t: u64) {
        self.head = t;
        self.head_elem = self.ring.elem(t);
    }

    /// Consumes up to the poll limit of published elements, calling `f(am_id, data)` for
    /// each well-formed one. Returns how many elements were consumed.
    #[inline(always)]
    pub fn poll(&mut self, mut f: impl FnMut(u8, &[u8])) -> usize {
        let mut n = 0;
        while n < self.max_poll {
            let t = self.head;
            let e = self.head_elem;
            let h = self.head_hdr();
            if h.seq.load(Ordering::Acquire) != t {
                break;
            }
            let len = h.len.load(Ordering::Relaxed) as usize;
            let am_id = h.am_id.load(Ordering::Relaxed);
            let flags = h.flags.load(Ordering::Relaxed);
            let data = match flags {
                FLAG_INLINE if len <= self.ring.geo.inline_capacity() => {
                    // SAFETY: len fits the element's inline area, inside the segment
                    // (`e` is the element at `t`).
                    Some(unsafe { e.add(ELEM_HDR) })
                }
                FLAG_BCOPY if len <= self.ring.geo.bcopy_size as usize => {
                    Some(self.ring.bcopy_buf(t))
                }
                _ => None,
            };
            match data {
                _ if flags == FLAG_SKIP => {}
                Some(p) if am_id < crate::AM_ID_MAX => {
                    // SAFETY: p..p+len lies in this slot, which stays ours until head moves
                    // past it. A misbehaving peer could still change the bytes, which only
                    // changes the data the handler sees.
                    let bytes = unsafe { std::slice::from_raw_parts(p, len) };
                    f(am_id, bytes);
                }
                _ => {
                    self.dropped += 1;
                    tracing::debug!(
                        "shm: dropped malformed element (id {am_id} flags {flags} len {len})"
                    );
                }
            }
            self.advance(t + 1);
            n += 1;
        }
        if self.head - self.published >= self.release {
            self.publish_head();
        }
        n
    }

    /// Tells producers how far the consumer got.
    #[inline]
    fn publish_head(&mut self) {
        self.published = self.head;
        self.ring.ctl().head.v.store(self.head, Ordering::Release);
    }

    /// Frees the FIFO from a producer that died between claiming a slot and publishing
    /// it: if the slot at the head is claimed and unpublished, and its claimer (recorded
    /// in the slot right after the claim) is gone — or no claimer was recorded within
    /// `grace_ns` — the slot is skipped and counted as dropped. Returns true when it
    /// skipped one. Call it now and then (it is not free), with the current time.
    pub fn recover_stall(
        &mut self,
        now_ns: u64,
        grace_ns: u64,
        alive: impl Fn(u32) -> bool,
    ) -> bool {
        let t = self.head;
        let h = self.ring.elem_hdr(t);
        let tail = self.ring.ctl().tail.v.load(Ordering::Acquire) & !ARMED;
        if h.seq.load(Ordering::Acquire) == t || tail <= t {
            self.stall = None;
            return false;
        }
        let since = match self.stall {
            Some((slot, since)) if slot == t => since,
            _ => {
                self.stall = Some((t, now_ns));
                now_ns
            }
        };
        let owner = h.len.load(Ordering::Acquire);
        let gone = if owner & OWNER_MARK != 0 {
            !alive(owner & !OWNER_MARK)
        } else {
            now_ns.saturating_sub(since) > grace_ns
        };
        // Check once more that nobody published meanwhile before taking the slot over.
        if !gone || h.seq.load(Ordering::Acquire) == t {
            return false;
        }
        tracing::warn!("shm: skipping a slot its producer (owner word {owner:#x}) never published");
        self.advance(t + 1);
        self.dropped += 1;
        self.stall = None;
        self.publish_head();
        true
    }

    /// Announces that the consumer is about to sleep. Returns false when an element is
    /// already there (do not sleep; poll instead). A sleeping consumer leaves producers
    /// all the room it freed.
    pub fn arm(&mut self) -> bool {
        if self.published != self.head {
            self.publish_head();
        }
        let prev = self.ring.ctl().tail.v.fetch_or(ARMED, Ordering::SeqCst);
        prev & !ARMED == self.head
    }
}

/// How many elements the consumer takes before it publishes its head: a quarter of the
/// FIFO, so producers lose at most that much room to the delay (and never all of it: a
/// consumer that caught up leaves them at least three quarters).
fn release_step(fifo_size: u32) -> u64 {
    (u64::from(fifo_size) / 4).max(1)
}

/// The sending side: a mapping of a peer's FIFO.
pub struct FifoTx {
    ring: Ring,
    cached_head: u64,
    pid: u32,
}

/// A claimed slot: write the payload, then [`FifoTx::publish`] it. Remembers whether the
/// claim found the consumer asleep (then the publisher must wake it).
#[derive(Clone, Copy, Debug)]
pub struct Slot(u64, bool);

impl FifoTx {
    /// Attaches to a FIFO in `seg`, validating its header against the segment.
    pub fn attach(seg: Arc<ShmSegment>) -> Result<FifoTx> {
        if seg.len() < CTL_SIZE {
            return Err(Status::InvalidAddr);
        }
        let hdr_ptr = seg.as_ptr() as *const Hdr;
        // SAFETY: the segment is at least CTL_SIZE bytes; the header is plain integers
        // written once before the address was published; we copy it out and validate.
        let hdr = unsafe { hdr_ptr.read() };
        fence(Ordering::Acquire);
        let geo = Geometry {
            fifo_size: hdr.fifo_size,
            elem_size: hdr.elem_size,
            bcopy_size: hdr.bcopy_size,
        };
        if hdr.magic != MAGIC
            || hdr.version != LAYOUT_VERSION
            || geo.validate().is_err()
            || hdr.elems_offset != geo.elems_offset() as u64
            || hdr.bcopy_offset != geo.bcopy_offset() as u64
        {
            tracing::debug!("shm: peer FIFO header invalid");
            return Err(Status::InvalidAddr);
        }
        let ring = Ring::new(seg, geo)?;
        Ok(FifoTx {
            ring,
            cached_head: 0,
            pid: ucs::sys::pidfd::current_pid() & !OWNER_MARK,
        })
    }

    /// The FIFO's shape.
    pub fn geometry(&self) -> Geometry {
        self.ring.geo
    }

    /// True when a claim would succeed now.
    pub fn has_space(&mut self) -> bool {
        let ctl = self.ring.ctl();
        let t = ctl.tail.v.load(Ordering::Relaxed) & !ARMED;
        self.cached_head = ctl.head.v.load(Ordering::Acquire);
        t.wrapping_sub(self.cached_head) < u64::from(self.ring.geo.fifo_size)
    }

    /// Claims the next slot, or `None` when the FIFO is full.
    #[inline]
    pub fn claim(&mut self) -> Option<Slot> {
        self.claim_elem().map(|(t, armed, _)| Slot(t, armed))
    }

    /// [`FifoTx::claim`], also returning the claimed element's address.
    #[inline(always)]
    fn claim_elem(&mut self) -> Option<(u64, bool, *mut u8)> {
        let ctl = self.ring.ctl();
        let size = u64::from(self.ring.geo.fifo_size);
        let mut cur = ctl.tail.v.load(Ordering::Relaxed);
        loop {
            let t = cur & !ARMED;
            if t.wrapping_sub(self.cached_head) >= size {
                self.cached_head = ctl.head.v.load(Ordering::Acquire);
                if t.wrapping_sub(self.cached_head) >= size {
                    return None;
                }
            }
            // Claiming also clears the consumer's sleep bit: this producer wakes it.
            match ctl
                .tail
                .v
                .compare_exchange_weak(cur, t + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(prev) => {
                    prefetch_for_write(self.ring.elem(t + PREFETCH_AHEAD));
                    let e = self.ring.elem(t);
                    // SAFETY: `elem` is inside the segment and 64-byte aligned; its header
                    // is atomics.
                    let h = unsafe { &*(e as *const ElemHdr) };
                    // Who holds the slot, for a consumer that finds it never published.
                    h.len.store(OWNER_MARK | self.pid, Ordering::Release);
                    return Some((t, prev & ARMED != 0, e));
                }
                Err(c) => cur = c,
            }
        }
    }

    /// Claims a slot and publishes in it, inline, the 8 bytes of `hdr` followed by
    /// `payload`, with the element's address computed once: the whole of a short active
    /// message. `Ok(None)`: the FIFO is full. `Ok(Some(true))`: the consumer was asleep
    /// and must be woken. `InvalidParam` when the message exceeds the inline capacity.
    #[inline]
    pub fn push_short(&mut self, am_id: u8, hdr: u64, payload: &[u8]) -> Result<Option<bool>> {
        let len = 8 + payload.len();
        if len > self.ring.geo.inline_capacity() {
            return Err(Status::InvalidParam);
        }
        let Some((t, armed, e)) = self.claim_elem() else {
            return Ok(None);
        };
        // SAFETY: the slot is ours until published; its inline area starts ELEM_HDR bytes
        // into the element and holds `inline_capacity` >= `len` bytes (checked above).
        let area = unsafe { std::slice::from_raw_parts_mut(e.add(ELEM_HDR), len) };
        area[..8].copy_from_slice(&hdr.to_ne_bytes());
        copy_short(&mut area[8..], payload);
        // SAFETY: as in `claim_elem`.
        unsafe { &*(e as *const ElemHdr) }.publish(t, am_id, FLAG_INLINE, len);
        Ok(Some(armed))
    }

    /// The slot's inline area (`inline_capacity` bytes).
    #[inline]
    pub fn inline_area(&mut self, s: Slot) -> &mut [u8] {
        // SAFETY: the slot was claimed by us and is exclusively ours until published; the
        // area is inline_capacity bytes inside the element.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ring.elem(s.0).add(ELEM_HDR),
                self.ring.geo.inline_capacity(),
            )
        }
    }

    /// The slot's bcopy buffer (`bcopy_size` bytes).
    #[inline]
    pub fn bcopy_area(&mut self, s: Slot) -> &mut [u8] {
        // SAFETY: as for inline_area; the buffer is bcopy_size bytes inside the segment.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ring.bcopy_buf(s.0),
                self.ring.geo.bcopy_size as usize,
            )
        }
    }

    /// Publishes a claimed slot. Returns true when the consumer was asleep and must be
    /// woken through its eventfd.
    #[inline]
    pub fn publish(&self, s: Slot, am_id: u8, flags: u8, len: usize) -> bool {
        self.ring.elem_hdr(s.0).publish(s.0, am_id, flags, len);
        s.1
    }
}

/// Copies `src` into `dst` (of the same length) without calling `memcpy` for the few bytes
/// of a typical short message: two overlapping word copies cover 8 to 16 bytes, two
/// 4-byte ones 4 to 7, and a byte loop the rest. Longer payloads take `memcpy`.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 16 || dst.len() != n {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn geo(n: u32) -> Geometry {
        Geometry {
            fifo_size: n,
            elem_size: 128,
            bcopy_size: 256,
        }
    }

    fn send(tx: &mut FifoTx, data: &[u8]) -> Option<bool> {
        let s = tx.claim()?;
        let cap = tx.geometry().inline_capacity();
        if data.len() <= cap {
            tx.inline_area(s)[..data.len()].copy_from_slice(data);
            Some(tx.publish(s, 3, FLAG_INLINE, data.len()))
        } else {
            tx.bcopy_area(s)[..data.len()].copy_from_slice(data);
            Some(tx.publish(s, 3, FLAG_BCOPY, data.len()))
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Send(Vec<u8>),
        Poll,
        Arm,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => proptest::collection::vec(any::<u8>(), 0..=256).prop_map(Op::Send),
            1 => Just(Op::Poll),
            1 => Just(Op::Arm),
        ]
    }

    impl FifoRx {
        /// Clears the sleep bit (what the next claim would do).
        fn disarm_for_test(&self) {
            self.ring.ctl().tail.v.fetch_and(!ARMED, Ordering::SeqCst);
        }
    }

    proptest! {
        /// The FIFO behaves as a bounded queue whose consumer hands slots back in steps
        /// of a quarter: sends succeed exactly while the queued elements plus those
        /// consumed but not yet handed back are fewer than fifo_size, and polls return
        /// them in order, intact. Arming hands back everything consumed.
        #[test]
        fn matches_queue_model(ops in proptest::collection::vec(op(), 1..300), poll in 1usize..6) {
            let mut rx = FifoRx::create(geo(8), poll).unwrap();
            let mut tx = FifoTx::attach(rx.segment().clone()).unwrap();
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            // Consumed but not handed back; handed back in steps of 2 (8 / 4).
            let mut held = 0usize;
            for o in ops {
                match o {
                    Op::Send(d) => {
                        let ok = send(&mut tx, &d).is_some();
                        prop_assert_eq!(ok, model.len() + held < 8);
                        if ok { model.push_back(d); }
                    }
                    Op::Poll => {
                        let mut got = Vec::new();
                        rx.poll(|id, b| { assert_eq!(id, 3); got.push(b.to_vec()) });
                        prop_assert_eq!(got.len(), model.len().min(poll));
                        held += got.len();
                        if held >= 2 { held = 0; }
                        for g in got { prop_assert_eq!(Some(g), model.pop_front()); }
                    }
                    Op::Arm => {
                        prop_assert_eq!(rx.arm(), model.is_empty());
                        held = 0;
                        // Disarm as a producer's claim would, so that later sends need
                        // no wakeup bookkeeping here.
                        rx.disarm_for_test();
                    }
                }
            }
        }
    }

    #[test]
    fn arm_and_signal() {
        let mut rx = FifoRx::create(geo(4), 4).unwrap();
        let mut tx = FifoTx::attach(rx.segment().clone()).unwrap();
        // Not armed: no wakeup needed.
        assert_eq!(send(&mut tx, b"a"), Some(false));
        // Data present: arming refuses.
        assert!(!rx.arm());
        assert_eq!(rx.poll(|_, _| {}), 1);
        assert!(rx.arm());
        assert_eq!(send(&mut tx, b"b"), Some(true));
        // The wakeup is consumed by the first producer that saw it.
        assert_eq!(send(&mut tx, b"c"), Some(false));
        // A slot claimed but not yet published also keeps the consumer awake.
        assert_eq!(rx.poll(|_, _| {}), 2);
        let s = tx.claim().unwrap();
        assert!(!rx.arm(), "a claimed slot is data on its way");
        let _ = tx.publish(s, 3, FLAG_INLINE, 0);
    }

    #[test]
    fn copy_short_copies_every_length_exactly() {
        for n in 0..=40usize {
            let src: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            // A window inside a larger buffer: nothing outside it may change.
            let mut buf = vec![0xeeu8; n + 16];
            copy_short(&mut buf[8..8 + n], &src);
            assert_eq!(&buf[8..8 + n], &src[..], "length {n}");
            assert!(buf[..8].iter().all(|&b| b == 0xee), "before, length {n}");
            assert!(buf[8 + n..].iter().all(|&b| b == 0xee), "after, length {n}");
        }
    }

    #[test]
    fn push_short_delivers_header_and_payload_of_every_length() {
        let mut rx = FifoRx::create(geo(4), 4).unwrap();
        let mut tx = FifoTx::attach(rx.segment().clone()).unwrap();
        let cap = tx.geometry().inline_capacity();
        // Several laps of the 4-slot ring, every payload length that fits.
        for n in 0..=cap - 8 {
            let payload: Vec<u8> = (0..n).map(|i| (i * 13 + n) as u8).collect();
            let hdr = 0x0102_0304_0506_0700 | n as u64;
            assert_eq!(
                tx.push_short(5, hdr, &payload),
                Ok(Some(false)),
                "length {n}"
            );
            let mut got = vec![];
            assert_eq!(rx.poll(|id, b| got.push((id, b.to_vec()))), 1);
            let mut want = hdr.to_ne_bytes().to_vec();
            want.extend_from_slice(&payload);
            assert_eq!(got, vec![(5, want)], "length {n}");
        }
        // Too long for the inline area: refused, nothing claimed.
        let long = vec![1u8; cap - 7];
        assert_eq!(tx.push_short(5, 0, &long), Err(Status::InvalidParam));
        assert!(!rx.has_data());
        // A full ring: None, and the consumer's poll frees it.
        for _ in 0..4 {
            assert!(tx.push_short(5, 0, b"x").unwrap().is_some());
        }
        assert_eq!(tx.push_short(5, 0, b"x"), Ok(None));
        assert_eq!(rx.poll(|_, _| {}), 4);
    }

    #[test]
    fn malformed_elements_are_dropped() {
        let mut rx = FifoRx::create(geo(4), 4).unwrap();
        let mut tx = FifoTx::attach(rx.segment().clone()).unwrap();
        let s = tx.claim().unwrap();
        let _ = tx.publish(s, 3, FLAG_INLINE, 10_000);
        let s = tx.claim().unwrap();
        let _ = tx.publish(s, 200, FLAG_INLINE, 1);
        let s = tx.claim().unwrap();
        let _ = tx.publish(s, 1, 77, 1);
        assert!(send(&mut tx, b"ok").is_some());
        let mut got = vec![];
        assert_eq!(rx.poll(|_, b| got.push(b.to_vec())), 4);
        assert_eq!(got, vec![b"ok".to_vec()]);
        assert_eq!(rx.dropped(), 3);
    }

    #[test]
    fn a_dead_producers_slot_is_skipped() {
        let mut rx = FifoRx::create(geo(4), 4).unwrap();
        let mut tx = FifoTx::attach(rx.segment().clone()).unwrap();
        let _stuck = tx.claim().unwrap();
        assert!(send(&mut tx, b"behind").is_some());
        assert_eq!(rx.poll(|_, _| {}), 0, "the stuck slot blocks the FIFO");
        // Its producer is alive: nothing happens, however long.
        assert!(!rx.recover_stall(0, 10, |_| true));
        assert!(!rx.recover_stall(1 << 40, 10, |_| true));
        // Its producer died: the slot is skipped and what follows is delivered.
        assert!(rx.recover_stall(1 << 41, 10, |_| false));
        let mut got = vec![];
        assert_eq!(rx.poll(|_, b| got.push(b.to_vec())), 1);
        assert_eq!(got, vec![b"behind".to_vec()]);
        assert_eq!(rx.dropped(), 1);
        assert!(
            !rx.recover_stall(1 << 42, 10, |_| false),
            "nothing stuck any more"
        );
    }

    #[test]
    fn skipped_slots_are_consumed_silently() {
        let mut rx = FifoRx::create(geo(4), 4).unwrap();
        let mut tx = FifoTx::attach(rx.segment().clone()).unwrap();
        let s = tx.claim().unwrap();
        let _ = tx.publish(s, 3, FLAG_SKIP, 0);
        assert!(send(&mut tx, b"next").is_some());
        let mut got = vec![];
        assert_eq!(rx.poll(|_, b| got.push(b.to_vec())), 2);
        assert_eq!(got, vec![b"next".to_vec()]);
        assert_eq!(rx.dropped(), 0);
    }

    #[test]
    fn attach_rejects_bad_headers() {
        let seg = Arc::new(ShmSegment::create("t", 8192).unwrap());
        assert_eq!(FifoTx::attach(seg).err(), Some(Status::InvalidAddr));
        assert!(geo(3).validate().is_err());
    }
}
