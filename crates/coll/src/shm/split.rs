//! The split allreduce and reduce of the segment path: for a large vector, each member
//! reduces only its own part, so that the members share the reduction work and do it at
//! the same time (a reduce-scatter followed by an allgather, or a gather to the root,
//! both through the slots). The segment path uses it for reduce; allreduce takes the
//! single-copy form ([`SplitCma`], at the end) from the same size.
//!
//! The vector goes in chunks of one slot; chunk `c` takes two rounds of the segment:
//!
//! - round A (`2c`): each member writes the parts of the chunk that the others reduce
//!   into its slot; once everyone's flag reached the round, each member combines its own
//!   part of every member's input, in member order, into its destination;
//! - round B (`2c + 1`): each member writes its reduced part into its slot (the slot of
//!   round B, so that the ordinary slot rule holds), and copies the others' reduced parts
//!   out of their slots into its destination.
//!
//! A reduce has a destination at the root only: there, round A reduces the root's part
//! into the destination as above; elsewhere, it reduces the member's part straight into
//! its slot of round B (free: every member's flag reached round A, so all finished
//! reading the round before it, that slot's last use), and round B only has the root
//! copy the parts out.
//!
//! Part `j` of a chunk of `e` elements is elements `j·e/n .. (j+1)·e/n`: parts follow
//! element boundaries and every member computes the same ones. Each part is reduced at
//! one member and copied by the others, so all members end with the same bits.
//!
//! In place, a member's input is its destination, which round A overwrites: it writes its
//! whole chunk to its slot and reduces its own part from there.

use super::run::copy;
use super::seg::Seg;
use crate::dtype::{self, DataType, Op};
use ucs::Result;

/// Byte range of part `j` of `n` in `len` bytes of `es`-byte elements: elements
/// `j·e/n .. (j+1)·e/n`.
fn part_of(j: usize, n: usize, len: usize, es: usize) -> (usize, usize) {
    let e = len / es;
    (j * e / n * es, (j + 1) * e / n * es)
}

/// One member's view of a split allreduce.
pub(crate) struct Split<'a> {
    pub seg: &'a Seg,
    pub me: usize,
    pub dt: DataType,
    pub op: Op,
    /// Divide the result by this (Op::Avg), else 0.
    pub avg: usize,
    /// This member's input (its destination when in place).
    pub input: *const u8,
    pub dst: *mut u8,
    pub in_place: bool,
    /// The root of a reduce; `None` for an allreduce.
    pub root: Option<usize>,
    /// Bytes of the whole vector.
    pub total: usize,
    /// Bytes of a chunk (a multiple of the element size).
    pub chunk: usize,
}

impl Split<'_> {
    /// Rounds of a `total`-byte vector in `chunk`-byte chunks.
    pub(crate) fn rounds(total: usize, chunk: usize) -> u32 {
        2 * total.div_ceil(chunk).max(1) as u32
    }

    /// Offset and length of the chunk of round `r`.
    fn chunk_of(&self, r: u32) -> (usize, usize) {
        let off = ((r / 2) as usize * self.chunk).min(self.total);
        (off, (self.total - off).min(self.chunk))
    }

    /// Byte range of part `j` inside a chunk of `len` bytes.
    fn part(&self, j: usize, len: usize) -> (usize, usize) {
        part_of(j, self.seg.members(), len, self.dt.size())
    }

    /// The write of round `r` (segment round `k`) into this member's slot.
    pub(crate) fn write(&self, r: u32, k: u32) {
        let (co, cl) = self.chunk_of(r);
        let slot = self.seg.slot_ptr(self.me, k);
        let (a, b) = self.part(self.me, cl);
        if r % 2 == 1 && self.root.is_some() {
            // A reduce: the root's part is in its destination, the others' in their slots.
            return;
        }
        // SAFETY (each copy): the ranges lie inside the chunk, which lies inside the
        // request's input or destination (checked by the plan) and inside this member's
        // slot `k % 2` (a chunk is at most one slot), which no member reads during this
        // write (the slot rule of `run`); user buffers never overlap the segment.
        if r % 2 == 1 {
            // SAFETY: as above; the part was reduced into the destination in round A.
            unsafe { copy(self.dst.add(co + a), slot.add(a), b - a) };
        } else if self.in_place {
            // SAFETY: as above.
            unsafe { copy(self.input.add(co), slot, cl) };
        } else {
            // SAFETY: as above (the parts before and after this member's own).
            unsafe {
                copy(self.input.add(co), slot, a);
                copy(self.input.add(co + b), slot.add(b), cl - b);
            }
        }
    }

    /// The read of round `r` (segment round `k`), every member's flag at `k` or later.
    pub(crate) fn read(&self, r: u32, k: u32) -> Result<()> {
        let (co, cl) = self.chunk_of(r);
        let n = self.seg.members();
        if r % 2 == 1 {
            if self.root.is_some_and(|root| root != self.me) {
                return Ok(());
            }
            for j in (0..n).filter(|&j| j != self.me) {
                let (a, b) = self.part(j, cl);
                // SAFETY: slot `k % 2` of j holds its reduced part (its flag reached k)
                // and is not written before this member enters the next round; the range
                // lies in the destination.
                unsafe { copy(self.seg.slot_ptr(j, k).add(a), self.dst.add(co + a), b - a) };
            }
            return Ok(());
        }
        let (a, b) = self.part(self.me, cl);
        if a == b {
            return Ok(());
        }
        let to = match self.root {
            Some(root) if root != self.me => self.seg.slot_ptr(self.me, k.wrapping_add(1)),
            _ => self.dst.wrapping_add(co),
        };
        // SAFETY: the range lies in the destination (checked by the plan) or in this
        // member's slot of the next round (free, see the module documentation); no other
        // reference to it lives during this call, and it overlaps none of the inputs read
        // below (in place, this member's input is read from its slot).
        let into = unsafe { std::slice::from_raw_parts_mut(to.add(a), b - a) };
        for j in 0..n {
            let from = if j == self.me && !self.in_place {
                self.input.wrapping_add(co + a)
            } else {
                self.seg.slot_ptr(j, k).wrapping_add(a)
            };
            // SAFETY: either this member's own input range (not the destination), or
            // slot `k % 2` of j, written before j's flag reached k and not rewritten
            // before this member enters the next round.
            let from = unsafe { std::slice::from_raw_parts(from, b - a) };
            if j == 0 {
                into.copy_from_slice(from);
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

/// One member's view of a single-copy split allreduce (two rounds, no chunks):
///
/// - round A: each member writes a descriptor (process id, input and destination
///   addresses) into its slot; once everyone's flag reached the round, it reads its own
///   part of every other member's input straight from that process
///   (`process_vm_readv`), combines the parts in member order into its destination, and
///   writes the result straight into every other member's destination
///   (`process_vm_writev`);
/// - round B: flags only: every member is done with the others' buffers.
///
/// Each member's part of another member's input is read by that member only, before it
/// writes the same range of that member's destination (in place, the same memory); the
/// other members write other ranges. Each part is reduced at one member: all members end
/// with the same bits.
pub(crate) struct SplitCma<'a> {
    pub seg: &'a Seg,
    pub me: usize,
    pub dt: DataType,
    pub op: Op,
    /// Divide the result by this (Op::Avg), else 0.
    pub avg: usize,
    /// This member's input (its destination when in place).
    pub input: *const u8,
    pub dst: *mut u8,
    pub in_place: bool,
    /// Bytes of the whole vector.
    pub total: usize,
    /// This process's id.
    pub pid: u32,
}

/// Bytes of a descriptor: process id, input address, destination address.
const DESC: usize = 24;

impl SplitCma<'_> {
    /// Round A's write: this member's descriptor into its slot `k % 2`.
    pub(crate) fn write(&self, k: u32) {
        let mut d = [0u8; DESC];
        d[..8].copy_from_slice(&u64::from(self.pid).to_le_bytes());
        d[8..16].copy_from_slice(&(self.input as u64).to_le_bytes());
        d[16..].copy_from_slice(&(self.dst as u64).to_le_bytes());
        // SAFETY: slots are at least a page long; this member owns its slot this round
        // (the slot rule of `run`).
        unsafe { copy(d.as_ptr(), self.seg.slot_ptr(self.me, k), DESC) };
    }

    /// Member `j`'s descriptor of round `k` (its flag reached `k`).
    fn desc(&self, j: usize, k: u32) -> (u32, u64, u64) {
        let mut d = [0u8; DESC];
        // SAFETY: j's slot `k % 2` holds its descriptor (its flag reached k) and is not
        // rewritten before this member enters the next round.
        unsafe { copy(self.seg.slot_ptr(j, k), d.as_mut_ptr(), DESC) };
        let word = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&d[i..i + 8]);
            u64::from_le_bytes(a)
        };
        (word(0) as u32, word(8), word(16))
    }

    /// Round A's read: this member's part, reduced and sent to every member. `scratch`
    /// is kept by the caller between collectives.
    pub(crate) fn read(&self, k: u32, scratch: &mut Vec<u8>) -> Result<()> {
        let n = self.seg.members();
        let (a, b) = part_of(self.me, n, self.total, self.dt.size());
        if a == b {
            return Ok(());
        }
        let len = b - a;
        // In place, the destination part is this member's input part, overwritten below
        // before its turn in member order: it goes to the scratch first.
        let stash = self.in_place && self.me != 0;
        scratch.resize(if stash { 2 * len } else { len }, 0);
        let (pulled, own_copy) = scratch.split_at_mut(len);
        // SAFETY: `a..b` lies in the destination (checked by the plan); no other reference
        // to it lives during this call (the other members write other ranges).
        let acc = unsafe { std::slice::from_raw_parts_mut(self.dst.add(a), len) };
        let own: &[u8] = if stash {
            own_copy.copy_from_slice(acc);
            own_copy
        } else {
            // SAFETY: this member's input part, not written during this call (in place it
            // is `acc` itself, and only read here when this member comes first).
            unsafe { std::slice::from_raw_parts(self.input.add(a), len) }
        };
        for j in 0..n {
            if j == self.me {
                if j == 0 {
                    if !self.in_place {
                        acc.copy_from_slice(own);
                    }
                } else {
                    dtype::reduce(self.dt, self.op, acc, own)?;
                }
                continue;
            }
            let (pid, input, _) = self.desc(j, k);
            let at = input + a as u64;
            if j == 0 {
                ucs::sys::cma::read(pid, at, acc)?;
            } else {
                ucs::sys::cma::read(pid, at, pulled)?;
                dtype::reduce(self.dt, self.op, acc, pulled)?;
            }
        }
        if self.avg > 0 {
            dtype::scale(self.dt, acc, self.avg)?;
        }
        for j in (0..n).filter(|&j| j != self.me) {
            let (pid, _, dst) = self.desc(j, k);
            ucs::sys::cma::write(pid, dst + a as u64, acc)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_a_chunk_on_element_boundaries() {
        let seg = Seg::create(3, false).unwrap();
        let s = Split {
            seg: &seg,
            me: 0,
            dt: DataType::Float64,
            op: Op::Sum,
            avg: 0,
            input: std::ptr::null(),
            dst: std::ptr::null_mut(),
            in_place: false,
            root: None,
            total: 10 * 8,
            chunk: 4 * 8,
        };
        assert_eq!(Split::rounds(80, 32), 6);
        assert_eq!(s.chunk_of(0), (0, 32));
        assert_eq!(s.chunk_of(3), (32, 32));
        assert_eq!(s.chunk_of(5), (64, 16));
        // 4 elements over 3 members: 1, 1, 2.
        assert_eq!(
            (s.part(0, 32), s.part(1, 32), s.part(2, 32)),
            ((0, 8), (8, 16), (16, 32))
        );
        // 2 elements: the first member has none.
        assert_eq!(
            (s.part(0, 16), s.part(1, 16), s.part(2, 16)),
            ((0, 0), (0, 8), (8, 16))
        );
    }
}
