//! One collective over a team segment, as a state machine of rounds.
//!
//! Every member takes part in every round of every collective of the segment, in the
//! same order (the round ids are reserved at post time, and all members compute the same
//! number of rounds from the arguments). Round `k` at a member:
//!
//! 1. if it writes this round: wait until every member has entered round `k-1` (so it
//!    finished reading round `k-2`, the last use of slot `k % 2`, whatever collective
//!    that was);
//! 2. write its data of the round into its slot `k % 2`;
//! 3. store its flag = `k` (release);
//! 4. wait until every member it reads from has flag ≥ `k` (acquire);
//! 5. read (copy out, or reduce into the destination), and count the round as done.
//!
//! Two slots per member let a writer run one round ahead of its readers: large messages
//! go through in chunks of one slot, pipelined. Reductions read the members' slots in
//! member order, so every member of an allreduce computes the same bits.
//!
//! **Inline rounds** (at most [`INLINE`] bytes per member) use cell `k % ring` of the
//! member's ring instead of slot `k % 2`, under the same rule at a distance of `ring`:
//! step 1 waits until every member entered round `k - ring + 1` (it finished reading
//! round `k - ring`, the cell's last use), and step 4 waits for the cell's sequence word
//! to hold `k`. Every member publishes its cell in every inline round (with data or
//! not), so a bcast root may run up to `ring - 1` rounds ahead of the other members.
//!
//! What a member has seen of the others' rounds is kept ([`ShmTeam::known`]): a wait that
//! it already satisfies reads nothing shared, so a root running ahead does not pull its
//! readers' flag lines to its core every round.
//!
//! **Single copy.** Pure data movement (bcast, allgather(v), alltoall not in place,
//! gather, scatter) of at least [`CMA_MIN`] bytes per block takes two rounds instead: in
//! the first, each member that has data writes only its process id and the address of its
//! data into its slot, and the readers copy straight out of that process's memory with
//! `process_vm_readv` (cross-memory attach: one copy instead of two, no chunking); the
//! second round, flags only, tells the writers that every reader is done with their
//! buffers. The kernel checks every remote range: a wrong one is an error, not a fault.
//! A bcast root that does not outnumber the host's CPUs with its team also pushes the
//! tail of the vector into the others' destinations (`process_vm_writev`), which they
//! published in the first round, while they pull the head ([`bcast_split`]); its flag in
//! the second round says its pushes are done.
//!
//! [`Run::advance`] never blocks: it returns `Ok(false)` at the first unmet wait, and
//! [`Run::waiting`] says whose flag it waits for (the caller sleeps on it, or fails the
//! collective when that member is gone).

use super::seg::{write_ahead, Ring, INLINE, MID};
use super::split::{Split, SplitCma};
use super::{widen, ShmTeam};
use crate::alg::Shape;
use crate::dtype::{self, DataType, Op};
use crate::select::CollType;
use std::sync::Arc;
use ucs::{Result, Status};

/// Whom a member waits for before reading, or before overwriting its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Nobody,
    All,
    One(usize),
}

/// A collective running (or ready to run) over a team segment.
pub(crate) struct Run {
    team: Arc<ShmTeam>,
    coll: CollType,
    shape: Arc<Shape>,
    dt: DataType,
    op: Op,
    /// Divide the result by this (Op::Avg), else 0.
    avg: usize,
    src: *const u8,
    dst: *mut u8,
    /// Bytes moved per round (per destination for alltoall and scatter).
    chunk: usize,
    mode: Mode,
    base: u64,
    rounds: u32,
    r: u32,
    wrote: bool,
    /// The member whose flag the run waits for, and the value it saw.
    waiting: Option<(usize, u32)>,
    /// Scratch memory of the single-copy split allreduce, kept between posts.
    scratch: Vec<u8>,
}

// SAFETY: the raw pointers are the request's buffers, which move with the request (see
// `exec`'s rules); the segment is shared memory behind an Arc.
unsafe impl Send for Run {}

/// Blocks of at least this many bytes move by cross-memory attach (one copy).
pub const CMA_MIN: usize = 32 << 10;

/// Reduce vectors of at least this many bytes take the split form (see
/// [`super::split`]).
pub const SPLIT_MIN: usize = 16 << 10;

/// Allreduce vectors of at least this many bytes take the single-copy split form (see
/// [`SplitCma`]); reduce takes the split through the slots ([`Split`]) from [`SPLIT_MIN`].
pub const SPLIT_CMA_MIN: usize = 16 << 10;

/// How a run moves its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Through the data slots, one chunk per round.
    Slot,
    /// Through the members' rings of inline cells: one round, at most [`INLINE`] bytes
    /// per member.
    Inline,
    /// Through the members' rings of mid cells: one round, at most [`MID`] bytes per
    /// member (segments of up to `MID_MEMBERS`).
    Mid,
    /// Single copy by cross-memory attach (two rounds: descriptors, then done).
    Cma,
    /// Allreduce or reduce in two rounds per chunk, each member reducing its part
    /// ([`Split`]).
    Split,
    /// Allreduce in two rounds, each member reducing its part straight from the others'
    /// inputs into their destinations by cross-memory attach ([`SplitCma`]).
    SplitCma,
}

/// Rounds, chunk bytes and mode of a collective on a segment with `slot`-byte slots
/// (`mid`: whether it has rings of mid cells; `crowded`: the segment's members outnumber
/// the host's CPUs, [`super::seg::Seg::crowded`]).
fn geometry(
    coll: CollType,
    s: &Shape,
    slot: usize,
    mid: bool,
    crowded: bool,
) -> (u32, usize, Mode) {
    use CollType as C;
    let es = s.esize.max(1);
    let whole = (slot / es * es).max(es);
    let per_peer = (slot / s.size.max(1)).max(1);
    let (len, chunk) = match coll {
        C::Barrier => (0, whole),
        C::Bcast | C::Reduce | C::Allreduce => (s.count * es, whole),
        C::Allgather | C::Allgatherv | C::Gather | C::Gatherv => {
            (s.dst_blocks.iter().map(|b| b.1).max().unwrap_or(0), slot)
        }
        C::Alltoall | C::Alltoallv | C::Scatter | C::Scatterv => (
            s.src_blocks
                .iter()
                .chain(&s.dst_blocks)
                .map(|b| b.1)
                .max()
                .unwrap_or(0),
            per_peer,
        ),
        C::ReduceScatter | C::ReduceScatterv => (
            s.src_blocks.iter().map(|b| b.0 + b.1).max().unwrap_or(0),
            whole,
        ),
    };
    // What one member writes into its slot in a single round.
    let per_member = match coll {
        C::Alltoall | C::Alltoallv | C::Scatter | C::Scatterv => len.saturating_mul(s.size),
        _ => len,
    };
    let per_peer = matches!(coll, C::Alltoall | C::Alltoallv | C::Scatter | C::Scatterv);
    let one_round = |mode| (1, if per_peer { len.max(1) } else { chunk }, mode);
    if per_member <= INLINE {
        return one_round(Mode::Inline);
    }
    if mid && per_member <= MID {
        return one_round(Mode::Mid);
    }
    let cma = len >= CMA_MIN
        && match coll {
            // Crowded, the members take turns on the CPUs and what counts is the copying
            // they do in all: through the slots one copy in and one out per reader, by
            // cross-memory attach one pull per reader, each about as dear as two or three
            // copies (page pinning, the system call). Alltoall through the slots takes
            // many more rounds (a slot is cut into one piece per member), each a wait.
            C::Bcast | C::Allgather | C::Allgatherv | C::Gather | C::Scatter => !crowded,
            // In place, a member's blocks are overwritten while the others read them.
            C::Alltoall => !s.in_place,
            _ => false,
        };
    if cma {
        return (2, len, Mode::Cma);
    }
    if coll == C::Allreduce && s.size > 1 && len >= SPLIT_CMA_MIN {
        return (2, len, Mode::SplitCma);
    }
    if matches!(coll, C::Allreduce | C::Reduce) && s.size > 1 && len >= SPLIT_MIN {
        return (Split::rounds(len, chunk), chunk, Mode::Split);
    }
    (len.div_ceil(chunk).max(1) as u32, chunk, Mode::Slot)
}

/// The part `x..y` of the chunk `o..o+l` that a block `(bo, bl)` covers (`x == y` when
/// none; then `x` is where the chunk is split, so `o..x` and `y..o+l` is the rest).
fn own_range((bo, bl): (usize, usize), o: usize, l: usize) -> (usize, usize) {
    let end = o + l;
    let x = bo.clamp(o, end);
    let y = (bo + bl).clamp(x, end);
    (x, y)
}

/// A member's descriptor in a single-copy round: its process id and data address, and
/// a third word (a bcast root's push offset, else 0).
fn put_desc(slot: *mut u8, pid: u32, addr: *const u8) {
    put_desc_with(slot, pid, addr, 0);
}

fn put_desc_with(slot: *mut u8, pid: u32, addr: *const u8, extra: u64) {
    let mut d = [0u8; 24];
    d[..8].copy_from_slice(&u64::from(pid).to_le_bytes());
    d[8..16].copy_from_slice(&(addr as u64).to_le_bytes());
    d[16..].copy_from_slice(&extra.to_le_bytes());
    // SAFETY: slots are at least a page long; this member owns its slot this round.
    unsafe { copy(d.as_ptr(), slot, 24) };
}

/// The third word of a member's descriptor (see [`put_desc_with`]).
fn get_desc_extra(slot: *const u8) -> u64 {
    let mut d = [0u8; 8];
    // SAFETY: the slot is at least a page long, and its owner's flag reached this round.
    unsafe { copy(slot.add(16), d.as_mut_ptr(), 8) };
    u64::from_le_bytes(d)
}

/// Where a bcast root of a single-copy round splits its vector of `len` bytes among
/// `members`: every other member pulls `0..split` from the root, and the root pushes
/// `split..len` into each of them (so that the root copies about as much as each of the
/// others, and the copies run side by side). No split (`len`) unless `pushes`
/// ([`ShmTeam::root_pushes`]: the members do not outnumber the host's CPUs, else the
/// copies would take turns on the same CPUs and the push only add system calls).
fn bcast_split(len: usize, members: usize, pushes: bool) -> usize {
    if !pushes {
        return len;
    }
    // A page-aligned split; the root's share is one member's worth.
    let share = len / members;
    (len - share) & !4095
}

/// Reads the descriptor of a member from its slot.
fn get_desc(slot: *const u8) -> (u32, u64) {
    let mut d = [0u8; 16];
    // SAFETY: the slot is at least a page long, and its owner's flag reached this round.
    unsafe { copy(slot, d.as_mut_ptr(), 16) };
    let mut a = [0u8; 8];
    a.copy_from_slice(&d[..8]);
    let pid = u64::from_le_bytes(a) as u32;
    a.copy_from_slice(&d[8..]);
    (pid, u64::from_le_bytes(a))
}

/// The members other than `me` of `n`, from `me + 1` round: the members of a single-copy
/// round then pull from different processes at each step, instead of all from the first
/// (whose page tables and page counts they would all take at once). On 2 CPUs the
/// difference was within the noise of 4 and 8 ranks; it is for hosts with more.
fn others_from(me: usize, n: usize) -> impl Iterator<Item = usize> {
    (1..n).map(move |d| (me + d) % n)
}

/// Copies `len` bytes at `addr` of process `pid` into `to`.
fn pull(pid: u32, addr: u64, to: *mut u8, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: `to..to+len` lies in the request's destination (checked by the plan), not
    // accessed otherwise during this call.
    let dst = unsafe { std::slice::from_raw_parts_mut(to, len) };
    ucs::sys::cma::read(pid, addr, dst)
}

/// Whether the segment path implements `coll` (the v-variants whose counts are known at
/// every member; gatherv, scatterv and alltoallv are not, as their round counts would
/// need an exchange first).
pub fn supports(coll: CollType) -> bool {
    !matches!(
        coll,
        CollType::Alltoallv | CollType::Gatherv | CollType::Scatterv
    )
}

/// `len` bytes from `from` to `to` (nothing when `len` is 0).
///
/// # Safety
/// Both ranges valid and not overlapping.
#[inline]
pub(super) unsafe fn copy(from: *const u8, to: *mut u8, len: usize) {
    if len > 0 {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(from, to, len) }
    }
}

/// A collective for the segment path, before its buffers are known.
#[derive(Clone)]
pub(crate) struct Job {
    pub team: Arc<ShmTeam>,
    pub coll: CollType,
    /// The collective in segment terms (rank and root are member indices).
    pub shape: Arc<Shape>,
    /// Divisor of Op::Avg (the size of the whole team).
    pub avg_over: usize,
}

/// What a [`Run`] needs to be built.
pub(crate) struct RunSpec {
    pub job: Job,
    pub dt: DataType,
    pub op: Op,
    pub src: *const u8,
    pub dst: *mut u8,
}

impl Run {
    /// A run of `spec`; [`Run::start`] reserves its rounds.
    pub(crate) fn new(spec: RunSpec) -> Run {
        let j = spec.job;
        let seg = &j.team.seg;
        let (rounds, chunk, mode) = geometry(
            j.coll,
            &j.shape,
            seg.slot(),
            seg.ring(Ring::Mid) > 0,
            seg.crowded(),
        );
        let avg = if spec.op == Op::Avg && j.coll.reduces() {
            j.avg_over
        } else {
            0
        };
        Run {
            team: j.team,
            coll: j.coll,
            shape: j.shape,
            dt: spec.dt,
            op: spec.op,
            avg,
            src: spec.src,
            dst: spec.dst,
            chunk,
            mode,
            base: 0,
            rounds,
            r: 0,
            wrote: false,
            waiting: None,
            scratch: Vec::new(),
        }
    }

    /// Takes the next rounds of the segment (at post, in post order).
    pub(crate) fn start(&mut self) {
        self.base = self.team.reserve(self.rounds);
        self.r = 0;
        self.wrote = false;
        self.waiting = None;
    }

    /// Rounds completed so far (grows as the run makes progress).
    pub(crate) fn progress_mark(&self) -> usize {
        self.r as usize * 2 + usize::from(self.wrote)
    }

    /// The member (segment index) whose flag the run waits for, if it is blocked, and
    /// the flag value it saw (to sleep until it changes).
    pub(crate) fn waiting(&self) -> Option<(usize, u32)> {
        self.waiting
    }

    /// The segment this run uses.
    pub(crate) fn team(&self) -> &Arc<ShmTeam> {
        &self.team
    }

    fn me(&self) -> usize {
        self.shape.rank
    }

    /// The ring of cells this run's rounds use, if any.
    #[inline]
    fn ring(&self) -> Option<Ring> {
        match self.mode {
            Mode::Inline => Some(Ring::Inline),
            Mode::Mid => Some(Ring::Mid),
            _ => None,
        }
    }

    /// Slot `k % 2` (or in a ring, cell `k % len`) of member `j` for this run's mode.
    #[inline]
    fn slot(&self, j: usize, k: u32) -> *mut u8 {
        match self.ring() {
            Some(ring) => self.team.seg.cell_ptr(ring, j, k),
            None => self.team.seg.slot_ptr(j, k),
        }
    }

    /// This run as a split allreduce.
    fn split(&self) -> Split<'_> {
        Split {
            seg: &self.team.seg,
            me: self.me(),
            dt: self.dt,
            op: self.op,
            avg: self.avg,
            input: self.input(),
            dst: self.dst,
            in_place: self.own_in_dst(),
            root: (self.coll == CollType::Reduce).then_some(self.root()),
            total: self.shape.bytes(),
            chunk: self.chunk,
        }
    }

    /// This run as a single-copy split allreduce.
    fn split_cma(&self) -> SplitCma<'_> {
        SplitCma {
            seg: &self.team.seg,
            me: self.me(),
            dt: self.dt,
            op: self.op,
            avg: self.avg,
            input: self.input(),
            dst: self.dst,
            in_place: self.own_in_dst(),
            total: self.shape.bytes(),
            pid: self.team.pid,
        }
    }

    fn root(&self) -> usize {
        self.shape.root
    }

    /// Whom this member waits for before writing its slot: everybody, if it writes at
    /// all. (The previous user of the slot, two rounds back, may have been another
    /// collective with other readers: any member may still be reading it.) Inline,
    /// everybody, always: every member publishes its cell, whose last use was `ring`
    /// rounds back.
    fn before_write(&self) -> Who {
        use CollType as C;
        let root = self.me() == self.root();
        if self.ring().is_some() {
            return Who::All;
        }
        if matches!(self.mode, Mode::Cma | Mode::SplitCma) && self.r == 1 {
            return Who::Nobody;
        }
        if self.mode == Mode::Cma && self.coll == C::Bcast {
            // Round A: the others publish their destinations too (the root may push).
            return Who::All;
        }
        if self.mode == Mode::Split {
            // Round B of a reduce writes nothing (its data went in during round A).
            return if self.r % 2 == 1 && self.coll == CollType::Reduce {
                Who::Nobody
            } else {
                Who::All
            };
        }
        match self.coll {
            C::Barrier => Who::Nobody,
            C::Bcast | C::Scatter | C::Scatterv if !root => Who::Nobody,
            C::Reduce | C::Gather | C::Gatherv if root => Who::Nobody,
            _ => Who::All,
        }
    }

    /// Whose slots this member reads.
    fn sources(&self) -> Who {
        use CollType as C;
        let root = self.me() == self.root();
        if matches!(self.mode, Mode::Cma | Mode::SplitCma) {
            // Round A: everybody's descriptor; single copy, round B: everybody is done
            // with the others' buffers.
            if self.mode == Mode::SplitCma || self.r == 1 {
                return Who::All;
            }
            // A bcast root reads the others' destinations (to push its share).
            if self.coll == C::Bcast && root {
                return Who::All;
            }
        }
        if self.mode == Mode::Split {
            // Round B of a reduce: the root alone reads.
            return if self.r % 2 == 1 && self.coll == CollType::Reduce && !root {
                Who::Nobody
            } else {
                Who::All
            };
        }
        match self.coll {
            C::Bcast | C::Scatter | C::Scatterv if root => Who::Nobody,
            C::Bcast | C::Scatter | C::Scatterv => Who::One(self.root()),
            C::Reduce | C::Gather | C::Gatherv if !root => Who::Nobody,
            _ => Who::All,
        }
    }

    /// The first member in `who` not known to have entered round `need`, with its flag.
    fn behind(&self, who: Who, need: u64) -> Option<(usize, u32)> {
        self.first_late(who, need, |_| false)
    }

    /// In a ring: the first member in `who` whose cell does not hold round `k` yet, with
    /// its flag.
    fn unpublished(&self, ring: Ring, who: Who, k: u64) -> Option<(usize, u32)> {
        let seg = &self.team.seg;
        // The cell holds round k or an earlier use (k - ring, ...): never a later one,
        // which needs this member in round k + 1.
        self.first_late(who, k, |j| seg.cell_round(ring, j, k as u32) == k as u32)
    }

    /// The first member in `who` (other than this one) not known to have reached round
    /// `need`, with its flag. `reached(j)` may show that `j` did without its flag; the
    /// flag is stored after the cells, so a flag seen at `need` shows them too.
    fn first_late(
        &self,
        who: Who,
        need: u64,
        reached: impl Fn(usize) -> bool,
    ) -> Option<(usize, u32)> {
        let t = &*self.team;
        let me = self.me();
        let late = |j: usize| {
            if j == me || t.known(j) >= need {
                return None;
            }
            if reached(j) {
                t.learn(j, need);
                return None;
            }
            let f = t.seg.flag(j);
            let w = widen(f, need);
            if w >= need {
                t.learn(j, w);
                return None;
            }
            Some((j, f))
        };
        match who {
            Who::Nobody => None,
            Who::One(j) => late(j),
            Who::All => (0..t.seg.members()).find_map(late),
        }
    }

    /// Runs rounds until one must wait; `Ok(true)` when the collective completed here.
    pub(crate) fn advance(&mut self) -> Result<bool> {
        let ring = self.ring();
        while self.r < self.rounds {
            if self.team.seg.aborted() {
                return Err(Status::ConnectionReset);
            }
            let k = self.base.wrapping_add(u64::from(self.r));
            if !self.wrote {
                // Rounds of earlier collectives of the segment come first.
                if self.team.done() != k.wrapping_sub(1) {
                    self.waiting = None;
                    return Ok(false);
                }
                // The last use of this slot (cell) was 2 (the ring's length) rounds back.
                let back = match ring {
                    Some(ring) => self.team.seg.ring(ring) as u64 - 1,
                    None => 1,
                };
                if let Some(w) = self.behind(self.before_write(), k.saturating_sub(back)) {
                    self.waiting = Some(w);
                    return Ok(false);
                }
                self.write(k as u32)?;
                if let Some(ring) = ring {
                    let seg = &self.team.seg;
                    seg.set_cell_round(ring, self.me(), k as u32);
                    let ahead = write_ahead(seg.ring(ring));
                    seg.prefetch_own_cell(ring, self.me(), (k as u32).wrapping_add(ahead));
                }
                self.team.seg.set_flag(self.me(), k as u32);
                self.wrote = true;
                self.own_block();
            }
            let late = match ring {
                Some(ring) => self.unpublished(ring, self.sources(), k),
                None => self.behind(self.sources(), k),
            };
            if let Some(w) = late {
                self.waiting = Some(w);
                return Ok(false);
            }
            self.read(k as u32)?;
            self.team.set_done(k);
            self.r += 1;
            self.wrote = false;
        }
        self.waiting = None;
        Ok(true)
    }

    /// The byte range of chunk `r` of a `len`-byte block: (offset, length).
    fn piece(&self, len: usize) -> (usize, usize) {
        let off = (self.r as usize * self.chunk).min(len);
        (off, (len - off).min(self.chunk))
    }

    /// Whether this member's input is in its destination: in place, which for reduce and
    /// gather concerns the root only (and never scatter, whose input is the root's source).
    fn own_in_dst(&self) -> bool {
        use CollType as C;
        match self.coll {
            // In place, the root of a scatter keeps its block where it is, in the source.
            C::Scatter | C::Scatterv => false,
            C::Reduce | C::Gather | C::Gatherv => self.shape.in_place && self.me() == self.root(),
            _ => self.shape.in_place,
        }
    }

    /// The input: the source, or in place the destination.
    fn input(&self) -> *const u8 {
        if self.own_in_dst() {
            self.dst
        } else {
            self.src
        }
    }

    fn write(&mut self, k: u32) -> Result<()> {
        use CollType as C;
        let s = &*self.shape;
        let me = self.me();
        let root = me == self.root();
        match self.mode {
            Mode::Cma => return self.write_desc(self.team.seg.slot_ptr(me, k)),
            Mode::Split => {
                self.split().write(self.r, k);
                return Ok(());
            }
            Mode::SplitCma => {
                if self.r == 0 {
                    self.split_cma().write(k);
                }
                return Ok(());
            }
            Mode::Slot | Mode::Inline | Mode::Mid => {}
        }
        let slot = self.slot(me, k);
        // SAFETY (every block below): the regions lie inside the request's buffers (the
        // plan checked their lengths against these blocks) or inside this member's own
        // slot `k % 2`, which no member reads now (step 1 of the module documentation),
        // and a user buffer never overlaps the segment.
        match self.coll {
            C::Barrier => {}
            C::Bcast => {
                if root {
                    let (o, l) = self.piece(s.bytes());
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(self.dst.add(o), slot, l) };
                }
            }
            C::Allreduce | C::Reduce => {
                if !(self.coll == C::Reduce && root) {
                    let (o, l) = self.piece(s.bytes());
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(self.input().add(o), slot, l) };
                }
            }
            C::ReduceScatter | C::ReduceScatterv => {
                let total = s.src_blocks.iter().map(|b| b.0 + b.1).max().unwrap_or(0);
                let (o, l) = self.piece(total);
                if self.own_in_dst() {
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(self.input().add(o), slot, l) };
                } else {
                    // The others read only their own blocks from this slot: this member's
                    // block stays in its source, where `read` takes it from.
                    let (x, y) = own_range(s.src_blocks[me], o, l);
                    // SAFETY: as stated at the top of this function's match; the two
                    // parts lie in the chunk `o..o+l` and at the same offsets in the slot.
                    unsafe {
                        copy(self.input().add(o), slot, x - o);
                        copy(self.input().add(y), slot.add(y - o), o + l - y);
                    }
                }
            }
            C::Allgather | C::Allgatherv | C::Gather | C::Gatherv => {
                let (bo, bl) = s.dst_blocks[me];
                let (o, l) = self.piece(bl);
                let from = if self.own_in_dst() {
                    self.dst.cast_const().wrapping_add(bo)
                } else {
                    self.src
                };
                let gather_root = matches!(self.coll, C::Gather | C::Gatherv) && root;
                if !gather_root {
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(from.add(o), slot, l) };
                }
                // This member's own block goes to its destination after the flag
                // (`own_block`), while the others read.
            }
            C::Alltoall | C::Alltoallv | C::Scatter | C::Scatterv => {
                let scatter = matches!(self.coll, C::Scatter | C::Scatterv);
                if scatter && !root {
                    return Ok(());
                }
                for j in (0..s.size).filter(|&j| j != me) {
                    let (bo, bl) = s.src_blocks[j];
                    let (o, l) = self.piece(bl);
                    let from = self.input().wrapping_add(bo);
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(from.add(o), slot.add(j * self.chunk), l) };
                }
            }
        }
        Ok(())
    }

    /// This member's own block of an allgather(v), gather(v) (root), alltoall or scatter
    /// (root), source to destination, for the piece of this round: done after the
    /// round's flag is stored, so that the others start reading one copy earlier (slots
    /// and cells; single copy does it in `write_desc`).
    fn own_block(&self) {
        use CollType as C;
        if !matches!(self.mode, Mode::Slot | Mode::Inline | Mode::Mid) {
            return;
        }
        let s = &*self.shape;
        let me = self.me();
        let root = me == self.root();
        match self.coll {
            C::Allgather | C::Allgatherv | C::Gather | C::Gatherv => {
                let keeps_own = matches!(self.coll, C::Allgather | C::Allgatherv) || root;
                if !self.own_in_dst() && keeps_own {
                    let (bo, bl) = s.dst_blocks[me];
                    let (o, l) = self.piece(bl);
                    // SAFETY: this member's block of its source and of its destination
                    // (lengths checked by the plan); distinct buffers, and no other member
                    // touches either.
                    unsafe { copy(self.src.add(o), self.dst.add(bo + o), l) };
                }
            }
            C::Alltoall | C::Alltoallv | C::Scatter | C::Scatterv => {
                let scatter = matches!(self.coll, C::Scatter | C::Scatterv);
                if (scatter && !root) || s.in_place {
                    return;
                }
                let (bo, bl) = s.src_blocks[me];
                let (o, l) = self.piece(bl);
                let to = if scatter { 0 } else { s.dst_blocks[me].0 };
                // SAFETY: as above: this member's own block, source to destination.
                unsafe {
                    copy(
                        self.input().wrapping_add(bo).add(o),
                        self.dst.add(to + o),
                        l,
                    )
                };
            }
            _ => {}
        }
    }

    fn read(&mut self, k: u32) -> Result<()> {
        use CollType as C;
        let s = &*self.shape;
        let me = self.me();
        let root = me == self.root();
        match self.mode {
            Mode::Cma => return self.read_cma(k),
            Mode::Split => return self.split().read(self.r, k),
            Mode::SplitCma => {
                if self.r == 1 {
                    return Ok(());
                }
                let mut scratch = std::mem::take(&mut self.scratch);
                let res = self.split_cma().read(k, &mut scratch);
                self.scratch = scratch;
                return res;
            }
            Mode::Slot | Mode::Inline | Mode::Mid => {}
        }
        // SAFETY (every block below): source slots `k % 2` of members whose flag reached
        // `k` hold this round's data and are not written until this member enters round
        // `k+1`; destination regions lie inside the request's destination buffer.
        match self.coll {
            C::Barrier => {}
            C::Bcast => {
                if !root {
                    let (o, l) = self.piece(s.bytes());
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(self.slot(self.root(), k), self.dst.add(o), l) };
                }
            }
            C::Allreduce => {
                let (o, l) = self.piece(s.bytes());
                self.reduce_into(k, o, 0, l, None, None)?;
            }
            C::Reduce => {
                if root {
                    let (o, l) = self.piece(s.bytes());
                    if !self.own_in_dst() {
                        // SAFETY: as stated at the top of this function's match.
                        unsafe { copy(self.src.add(o), self.dst.add(o), l) };
                    }
                    self.reduce_into(k, o, 0, l, Some(me), None)?;
                }
            }
            C::ReduceScatter | C::ReduceScatterv => {
                let total = s.src_blocks.iter().map(|b| b.0 + b.1).max().unwrap_or(0);
                let (o, l) = self.piece(total);
                let (bo, _) = s.src_blocks[me];
                let (x, y) = own_range(s.src_blocks[me], o, l);
                if x < y {
                    // Not in place, this member's part comes from its source (see `write`).
                    let mine = (!self.own_in_dst()).then(|| self.src.wrapping_add(x));
                    self.reduce_into(k, x - bo, x - o, y - x, None, mine)?;
                }
            }
            C::Allgather | C::Allgatherv | C::Gather | C::Gatherv => {
                if matches!(self.coll, C::Gather | C::Gatherv) && !root {
                    return Ok(());
                }
                for j in (0..s.size).filter(|&j| j != me) {
                    let (bo, bl) = s.dst_blocks[j];
                    let (o, l) = self.piece(bl);
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(self.slot(j, k), self.dst.add(bo + o), l) };
                }
            }
            C::Alltoall | C::Alltoallv => {
                for j in (0..s.size).filter(|&j| j != me) {
                    let (bo, bl) = s.dst_blocks[j];
                    let (o, l) = self.piece(bl);
                    let from = self.slot(j, k).wrapping_add(me * self.chunk);
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(from, self.dst.add(bo + o), l) };
                }
            }
            C::Scatter | C::Scatterv => {
                if !root {
                    let (_, bl) = s.src_blocks[me];
                    let (o, l) = self.piece(bl);
                    let from = self.slot(self.root(), k).wrapping_add(me * self.chunk);
                    // SAFETY: as stated at the top of this function's match.
                    unsafe { copy(from, self.dst.add(o), l) };
                }
            }
        }
        Ok(())
    }

    /// Single copy, first round: this member's descriptor (and its own block copied
    /// locally); second round: nothing (flags only).
    fn write_desc(&self, slot: *mut u8) -> Result<()> {
        use CollType as C;
        if self.r == 1 {
            return Ok(());
        }
        let s = &self.shape;
        let me = self.me();
        let root = me == self.root();
        let pid = self.team.pid;
        match self.coll {
            C::Bcast if root => {
                let split = bcast_split(s.bytes(), s.size, self.team.root_pushes);
                put_desc_with(slot, pid, self.dst, split as u64);
            }
            C::Bcast => put_desc(slot, pid, self.dst),
            C::Scatter if root => {
                put_desc(slot, pid, self.src);
                let (bo, bl) = s.src_blocks[me];
                if !s.in_place {
                    // SAFETY: the root's block of its source and its destination, both
                    // checked by the plan, distinct buffers.
                    unsafe { copy(self.src.add(bo), self.dst, bl) };
                }
            }
            C::Allgather | C::Allgatherv | C::Gather => {
                let (bo, bl) = s.dst_blocks[me];
                let mine = if self.own_in_dst() {
                    self.dst.cast_const().wrapping_add(bo)
                } else {
                    self.src
                };
                if !(self.coll == C::Gather && root) {
                    put_desc(slot, pid, mine);
                }
                if !self.own_in_dst() && (self.coll != C::Gather || root) {
                    // SAFETY: this member's block of its source and destination.
                    unsafe { copy(self.src, self.dst.add(bo), bl) };
                }
            }
            C::Alltoall => {
                put_desc(slot, pid, self.src);
                let (so, sl) = s.src_blocks[me];
                // SAFETY: this member's own block, source to destination (not in place).
                unsafe { copy(self.src.add(so), self.dst.add(s.dst_blocks[me].0), sl) };
            }
            _ => {}
        }
        Ok(())
    }

    /// Single copy, first round: this member's data straight from the writers' memory.
    fn read_cma(&self, k: u32) -> Result<()> {
        use CollType as C;
        if self.r == 1 {
            return Ok(());
        }
        let s = &self.shape;
        let seg = &self.team.seg;
        let me = self.me();
        let root = me == self.root();
        let desc = |j: usize| get_desc(seg.slot_ptr(j, k));
        match self.coll {
            C::Bcast if !root => {
                let (pid, a) = desc(self.root());
                // The root pushes the rest (clamped: the segment is shared memory).
                let split = get_desc_extra(seg.slot_ptr(self.root(), k)).min(s.bytes() as u64);
                pull(pid, a, self.dst, split as usize)?;
            }
            C::Bcast => {
                let len = s.bytes();
                // What this root published in round A.
                let split = get_desc_extra(seg.slot_ptr(me, k)).min(len as u64) as usize;
                if split < len {
                    let n = len - split;
                    // SAFETY: `split..len` lies in the root's bcast buffer (checked by the
                    // plan), which nothing writes during the collective.
                    let tail = unsafe { std::slice::from_raw_parts(self.dst.add(split), n) };
                    for j in (0..s.size).filter(|&j| j != me) {
                        let (pid, a) = desc(j);
                        ucs::sys::cma::write(pid, a + split as u64, tail)?;
                    }
                }
            }
            C::Scatter if !root => {
                let (pid, a) = desc(self.root());
                let b = s.src_blocks[me].1;
                pull(pid, a + (me * b) as u64, self.dst, b)?;
            }
            C::Allgather | C::Allgatherv => {
                for j in others_from(me, s.size) {
                    let (pid, a) = desc(j);
                    let (bo, bl) = s.dst_blocks[j];
                    pull(pid, a, self.dst.wrapping_add(bo), bl)?;
                }
            }
            C::Gather if root => {
                for j in (0..s.size).filter(|&j| j != me) {
                    let (pid, a) = desc(j);
                    let (bo, bl) = s.dst_blocks[j];
                    pull(pid, a, self.dst.wrapping_add(bo), bl)?;
                }
            }
            C::Alltoall => {
                let (mo, ml) = s.src_blocks[me];
                for j in others_from(me, s.size) {
                    let (pid, a) = desc(j);
                    pull(
                        pid,
                        a + mo as u64,
                        self.dst.wrapping_add(s.dst_blocks[j].0),
                        ml,
                    )?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Reduces `len` bytes at offset `at` of every member's slot `k % 2` into the
    /// destination at `out`. With `own = Some(me)` the destination already holds this
    /// member's part and its slot is skipped; else the first slot is copied first, and
    /// the members' parts are combined in member order. With `mine`, this member's part
    /// is read there (`len` bytes of its source) instead of from its slot, in its place in
    /// the member order (the same bits).
    fn reduce_into(
        &self,
        k: u32,
        out: usize,
        at: usize,
        len: usize,
        own: Option<usize>,
        mine: Option<*const u8>,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let seg = &self.team.seg;
        // SAFETY: `out..out+len` lies in the destination (checked by the plan); no other
        // reference to it lives during this call.
        let into = unsafe { std::slice::from_raw_parts_mut(self.dst.add(out), len) };
        let mut first = own.is_none();
        for j in 0..seg.members() {
            if Some(j) == own {
                continue;
            }
            let from = match mine {
                // SAFETY: `mine..mine+len` lies in this member's source (checked by the
                // plan), a buffer distinct from the destination (not in place).
                Some(p) if j == self.me() => unsafe { std::slice::from_raw_parts(p, len) },
                // SAFETY: slot `k % 2` of j holds this round's data (its flag reached k)
                // and is not written until this member enters the next round.
                _ => unsafe { std::slice::from_raw_parts(self.slot(j, k).add(at), len) },
            };
            if first {
                into.copy_from_slice(from);
                first = false;
            } else {
                dtype::reduce(self.dt, self.op, into, from)?;
            }
        }
        if self.avg > 0 {
            dtype::scale(self.dt, into, self.avg)?;
        }
        Ok(())
    }
}
