//! The layout of a team's shared segment and the only raw access to it.
//!
//! ```text
//!  Header   magic, members, slot bytes, abort word, sleepers      (one padded line)
//!  Ctrl[n]  one padded line per member: its round flag             (written by its owner)
//!  Cells    per member a ring of `ring_len(n)` inline cells, one 64-byte line each: a
//!           sequence word and INLINE bytes                          (written by its owner)
//!  Mid      up to 16 members: per member a ring of `mid_ring_len(n)` cells, each a
//!           line with its sequence word, then MID bytes             (written by its owner)
//!  Data     per member two slots of `slot` bytes (round k uses slot k % 2)
//! ```
//!
//! A round whose data fits [`INLINE`] bytes per member uses cell `k % ring` of the
//! member's ring instead of a data slot, and publishes it by storing `k` into the cell's
//! sequence word: a reader that sees it has the data in the same cache line, one transfer
//! between cores. The ring lets a writer run up to `ring - 1` rounds ahead of its
//! readers (a bcast root leaves each message in its ring and goes on). Rounds of at most
//! [`MID`] bytes per member use the ring of mid cells the same way (teams of up to
//! [`MID_MEMBERS`]).
//!
//! Invariants:
//! - a member writes only its own control line, its own cells and its own slots (and the
//!   shared abort and sleeper words, atomically);
//! - the flag of member j holds the last round j entered, stored with release after j
//!   wrote that round's data (and its cell's sequence word) and finished reading every
//!   earlier round; a reader loads it (or the cell's sequence word) with acquire before
//!   touching j's slot or cell, so the data is visible;
//! - flags and sequence words are 32-bit and compared with wrap-around; sleepers wait on
//!   the header's bell (a futex word), which writers bump and wake only while someone
//!   sleeps; a flag store is not fenced, and a member about to sleep polls briefly first
//!   (`sleep_on`), so that a store still in the writer's store buffer is not slept
//!   through.
//!
//! The flag protocol itself (which rounds wait for whom) is in [`super::run`]; this module
//! only gives sound accessors under the rule that the protocol keeps writers and readers
//! of one slot or cell apart in time.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use ucs::sys::shm::ShmSegment;
use ucs::{Result, Status};

/// "rucxcoll" in ASCII: marks an initialised segment.
const MAGIC: u64 = 0x7275_6378_636f_6c6c;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    members: AtomicU32,
    slot: AtomicU32,
    /// Set (to 1) by a member whose collective failed: the others fail theirs.
    abort: AtomicU32,
    /// Members sleeping on a futex: writers ring the bell only when this is not zero.
    sleepers: AtomicU32,
    /// The futex word sleepers wait on: bumped by every flag store made while someone
    /// sleeps, so a sleeper wakes on any member's progress, not only the one it watched.
    bell: AtomicU32,
    /// 1 when the members outnumber the host's CPUs (decided by the creator, so that
    /// every member picks the same modes; see `run::geometry`).
    crowded: AtomicU32,
}

/// Bytes of one inline cell.
pub const INLINE: usize = 56;

/// Inline cells per member for a segment of `n` members: a writer may run this many
/// rounds, less one, ahead of its readers on the inline path. 256 up to 8 members, then
/// fewer (at least 16), so that the rings of all members stay within 256 KiB; a power of
/// two, so that the cells follow each other across the wrap of the 32-bit round ids.
pub fn ring_len(n: usize) -> usize {
    let r = (2048 / n.max(1)).clamp(16, 256);
    1 << (usize::BITS - 1 - r.leading_zeros())
}

/// Bytes of data of one mid cell.
pub const MID: usize = 8 << 10;

/// Mid cells per member for a segment of `n` members: 64 up to 4 members, then fewer
/// (at least 16), so that the rings of all members hold about 2 MiB of data; a power of
/// two, as [`ring_len`]. (A long ring lets a bcast root run far ahead: crowded, its
/// readers then take many rounds in one time slice. 4 members on 2 CPUs, 4 KiB: about
/// 1.1 µs per bcast with 64 cells, 1.4–2.2 with 16.)
pub fn mid_ring_len(n: usize) -> usize {
    let r = ((2 << 20) / MID / n.max(1)).clamp(16, 64);
    1 << (usize::BITS - 1 - r.leading_zeros())
}

/// Members of a segment at most for the ring of mid cells (they take
/// `mid_ring_len(n) * (MID + 64)` bytes per member).
pub const MID_MEMBERS: usize = 16;

/// Cells per member of `ring` for a segment of `n` members (0: none).
fn ring_cells(ring: Ring, n: usize) -> usize {
    match ring {
        Ring::Inline => ring_len(n),
        Ring::Mid if n <= MID_MEMBERS => mid_ring_len(n),
        Ring::Mid => 0,
    }
}

/// Bytes of one cell of `ring`: its sequence word's line, and its data (inline: in the
/// same line).
fn cell_stride(ring: Ring) -> usize {
    match ring {
        Ring::Inline => std::mem::size_of::<Cell>(),
        Ring::Mid => 64 + MID,
    }
}

/// Offset of a cell's data from the cell.
fn cell_data(ring: Ring) -> usize {
    match ring {
        Ring::Inline => std::mem::offset_of!(Cell, data),
        Ring::Mid => 64,
    }
}

/// The rings of cells of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ring {
    /// One line per cell, [`INLINE`] bytes of data.
    Inline = 0,
    /// A line and [`MID`] bytes per cell.
    Mid = 1,
}

/// How far ahead a writer takes its next cells' lines (see `Seg::prefetch_own_cell`).
pub(crate) fn write_ahead(ring: usize) -> u32 {
    (ring / 4).min(8) as u32
}

#[repr(C)]
struct Ctrl {
    flag: AtomicU32,
}

/// One inline cell: the round it holds, then its data (plain bytes, written and read
/// under the same rule as the data slots).
#[repr(C, align(64))]
struct Cell {
    seq: AtomicU32,
    _pad: u32,
    data: [u8; INLINE],
}

const _: () = assert!(std::mem::size_of::<Cell>() == 64);
const _: () = assert!(std::mem::offset_of!(Cell, data) == 8);
const _: () = assert!(std::mem::align_of::<CachePadded<Ctrl>>() >= 64);

/// Bytes of one slot for a segment of `n` members: 256 KiB up to 16 members, then less,
/// so that the segment stays near 8 MiB. (Large slots: fewer rounds, so fewer waits for
/// a peer that the scheduler took off its core.)
pub fn slot_bytes(n: usize) -> usize {
    let per = (4 << 20) / n.max(1);
    (per / 4096 * 4096).clamp(4096, 256 << 10)
}

/// How long a member about to sleep polls the flag it waits for (see `Seg::sleep_on`).
const STORE_GRACE: Duration = Duration::from_micros(2);

/// A mapped team segment with its geometry.
pub(crate) struct Seg {
    map: ShmSegment,
    n: usize,
    slot: usize,
    ctrl_off: usize,
    /// Offsets of the rings (by [`Ring`]).
    ring_off: [usize; 2],
    /// Cells per member of each ring (0: none).
    ring_len: [usize; 2],
    data_off: usize,
}

// SAFETY: the mapping is plain shared memory; all shared fields are atomics, and slot
// memory is accessed only under the flag protocol described above.
unsafe impl Send for Seg {}
// SAFETY: as above.
unsafe impl Sync for Seg {}

impl Seg {
    /// The segment of `n` members as laid out over `map`.
    fn geometry(map: ShmSegment, n: usize) -> Seg {
        let line = std::mem::size_of::<CachePadded<Ctrl>>();
        let ctrl_off = std::mem::size_of::<CachePadded<Header>>();
        let mut at = ctrl_off + n * line;
        let mut ring_off = [0; 2];
        let mut ring_len = [0; 2];
        for r in [Ring::Inline, Ring::Mid] {
            at = at.next_multiple_of(4096);
            ring_off[r as usize] = at;
            ring_len[r as usize] = ring_cells(r, n);
            at += n * ring_cells(r, n) * cell_stride(r);
        }
        Seg {
            map,
            n,
            slot: slot_bytes(n),
            ctrl_off,
            ring_off,
            ring_len,
            data_off: at.next_multiple_of(4096),
        }
    }

    /// Bytes of the segment of `n` members.
    fn length(n: usize) -> usize {
        let mut at = std::mem::size_of::<CachePadded<Header>>()
            + n * std::mem::size_of::<CachePadded<Ctrl>>();
        for r in [Ring::Inline, Ring::Mid] {
            at = at.next_multiple_of(4096) + n * ring_cells(r, n) * cell_stride(r);
        }
        at.next_multiple_of(4096) + n * 2 * slot_bytes(n)
    }

    /// Creates and initialises the segment of `n` members (mode 0600, a memfd: it has no
    /// name to unlink and goes with the last mapping); `crowded`: the members outnumber
    /// the host's CPUs.
    pub(crate) fn create(n: usize, crowded: bool) -> Result<Seg> {
        let map = ShmSegment::create("rucx-coll", Self::length(n))?;
        let s = Self::geometry(map, n);
        let slot = s.slot;
        let h = s.header();
        h.members.store(n as u32, Ordering::Relaxed);
        h.slot.store(slot as u32, Ordering::Relaxed);
        h.crowded.store(u32::from(crowded), Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(s)
    }

    /// Maps the segment a member created and checks that it is a team segment of `n`
    /// members with this build's geometry.
    pub(crate) fn attach(id: &ucs::sys::shm::SegmentId, n: usize) -> Result<Seg> {
        if (id.len as usize) < Self::length(n) {
            return Err(Status::InvalidAddr);
        }
        let map = ShmSegment::attach(id)?;
        let s = Self::geometry(map, n);
        let slot = s.slot;
        let h = s.header();
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.members.load(Ordering::Relaxed) as usize != n
            || h.slot.load(Ordering::Relaxed) as usize != slot
        {
            tracing::error!("coll: the team segment does not have the expected geometry");
            return Err(Status::InvalidAddr);
        }
        Ok(s)
    }

    /// What the other members need to attach.
    pub(crate) fn id(&self) -> &ucs::sys::shm::SegmentId {
        self.map.id()
    }

    /// Members of the segment.
    pub(crate) fn members(&self) -> usize {
        self.n
    }

    /// Bytes per slot.
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// Whether the members outnumber the host's CPUs, as the creator saw it (every
    /// member reads the same answer).
    pub(crate) fn crowded(&self) -> bool {
        self.header().crowded.load(Ordering::Relaxed) != 0
    }

    /// Cells per member of `ring` (0: the segment has none).
    pub(crate) fn ring(&self, ring: Ring) -> usize {
        self.ring_len[ring as usize]
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned and longer than the header; the header is
        // made of atomics, valid for any bit pattern, shared with other processes.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    /// The address of member `j`'s control line.
    #[inline]
    fn line(&self, j: usize) -> *mut Ctrl {
        debug_assert!(j < self.n);
        let line = std::mem::size_of::<CachePadded<Ctrl>>();
        self.map
            .as_ptr()
            .wrapping_add(self.ctrl_off + j * line)
            .cast::<Ctrl>()
    }

    fn ctrl(&self, j: usize) -> &AtomicU32 {
        // SAFETY: line j lies inside the mapping (geometry), is aligned to the padded
        // line (the mapping is page-aligned, lines are multiples of their alignment), and
        // its flag is an atomic, valid for any bit pattern.
        unsafe { &*std::ptr::addr_of!((*self.line(j)).flag) }
    }

    /// The address of cell `k % len` of member `j` in `ring`.
    #[inline]
    fn cell(&self, ring: Ring, j: usize, k: u32) -> *mut u8 {
        let len = self.ring_len[ring as usize];
        debug_assert!(j < self.n && len > 0);
        let i = j * len + (k as usize & (len - 1));
        self.map
            .as_ptr()
            .wrapping_add(self.ring_off[ring as usize] + i * cell_stride(ring))
    }

    fn seq(&self, ring: Ring, j: usize, k: u32) -> &AtomicU32 {
        // SAFETY: the cell lies inside the mapping (geometry) and starts on a 64-byte
        // boundary (page-aligned mapping and ring offset, strides multiples of 64); its
        // first word is the sequence word, an atomic, valid for any bit pattern.
        unsafe { &*self.cell(ring, j, k).cast::<AtomicU32>() }
    }

    /// Address of the data of cell `k % len` of member `j` in `ring` ([`INLINE`] or
    /// [`MID`] bytes).
    #[inline]
    pub(crate) fn cell_ptr(&self, ring: Ring, j: usize, k: u32) -> *mut u8 {
        self.cell(ring, j, k).wrapping_add(cell_data(ring))
    }

    /// The round held by cell `k % len` of member `j` in `ring` (acquire: its data is
    /// visible).
    #[inline]
    pub(crate) fn cell_round(&self, ring: Ring, j: usize, k: u32) -> u32 {
        self.seq(ring, j, k).load(Ordering::Acquire)
    }

    /// Publishes the data of round `k` in member `j`'s cell `k % len` of `ring` (release;
    /// no wake-up: the flag store that follows rings the bell).
    #[inline]
    pub(crate) fn set_cell_round(&self, ring: Ring, j: usize, k: u32) {
        self.seq(ring, j, k).store(k, Ordering::Release);
    }

    /// Asks for the first line of this member's cell `k % len` of `ring` in the owned
    /// state, to be written soon (its readers finished with it long ago: taking it early
    /// keeps the write from waiting for the line).
    #[inline]
    pub(crate) fn prefetch_own_cell(&self, ring: Ring, j: usize, k: u32) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `prefetchw` has no architectural effect and never faults (older CPUs
        // without it execute it as a no-op); the address lies inside the mapping anyway.
        unsafe {
            std::arch::asm!(
                "prefetchw byte ptr [{0}]",
                in(reg) self.cell(ring, j, k),
                options(nostack, preserves_flags, readonly)
            )
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (ring, j, k);
    }

    /// The round flag of member `j` (acquire: j's data of that round is visible).
    #[inline]
    pub(crate) fn flag(&self, j: usize) -> u32 {
        self.ctrl(j).load(Ordering::Acquire)
    }

    /// Publishes round `k` for member `j` and wakes sleepers.
    #[inline]
    pub(crate) fn set_flag(&self, j: usize, k: u32) {
        let f = self.ctrl(j);
        // No fence after the store (a SeqCst store would stall this member until the
        // line is its own, a cross-core transfer per round on the 8-byte path). So the
        // sleeper count read below may miss a sleeper that registered while the store
        // still sat in this core's store buffer: `sleep_on` covers that window.
        f.store(k, Ordering::Release);
        let h = self.header();
        if h.sleepers.load(Ordering::Relaxed) != 0 {
            h.bell.fetch_add(1, Ordering::SeqCst);
            let _ = rustix::thread::futex::wake(
                &h.bell,
                rustix::thread::futex::Flags::empty(),
                u32::MAX,
            );
        }
    }

    /// Sleeps until member `j`'s flag leaves `seen`, at most `timeout`.
    pub(crate) fn sleep_on(&self, j: usize, seen: u32, timeout: Duration) {
        let h = self.header();
        h.sleepers.fetch_add(1, Ordering::SeqCst);
        // Read before the flag: a store after this bumps the bell, and the wait returns.
        let bell = h.bell.load(Ordering::SeqCst);
        let f = self.ctrl(j);
        // A writer that read the sleeper count before this member's increment had stored
        // its flag before that read, unfenced: the store leaves its store buffer within
        // about one cache-line transfer (an interrupt drains it too), so it shows up
        // within this grace poll, and a sleep never waits for a flag already stored.
        let t0 = std::time::Instant::now();
        while f.load(Ordering::Acquire) == seen && t0.elapsed() < STORE_GRACE {
            std::hint::spin_loop();
        }
        if f.load(Ordering::SeqCst) == seen && h.abort.load(Ordering::Relaxed) == 0 {
            let ts = rustix::thread::futex::Timespec {
                tv_sec: timeout.as_secs() as _,
                tv_nsec: timeout.subsec_nanos() as _,
            };
            // Interrupted, timed out or woken: the caller looks again either way.
            let _ = rustix::thread::futex::wait(
                &h.bell,
                rustix::thread::futex::Flags::empty(),
                bell,
                Some(ts),
            );
        }
        h.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Marks the team's segment aborted (a member's collective failed).
    pub(crate) fn set_abort(&self) {
        let h = self.header();
        h.abort.store(1, Ordering::SeqCst);
        h.bell.fetch_add(1, Ordering::SeqCst);
        let _ =
            rustix::thread::futex::wake(&h.bell, rustix::thread::futex::Flags::empty(), u32::MAX);
    }

    /// Whether a member aborted.
    #[inline]
    pub(crate) fn aborted(&self) -> bool {
        self.header().abort.load(Ordering::Acquire) != 0
    }

    /// Address of slot `k % 2` of member `j`.
    #[inline]
    pub(crate) fn slot_ptr(&self, j: usize, k: u32) -> *mut u8 {
        debug_assert!(j < self.n);
        let i = j * 2 + (k & 1) as usize;
        self.map
            .as_ptr()
            .wrapping_add(self.data_off + i * self.slot)
    }
}
