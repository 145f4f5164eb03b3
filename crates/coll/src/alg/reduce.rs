//! Reductions: reduce (k-nomial tree; ring reduce_scatter + gather), allreduce
//! (recursive doubling, Rabenseifner, ring) and reduce_scatter (ring).
//!
//! Teams whose size is not a power of two fold first (recursive doubling and
//! Rabenseifner): of the first `2 * rem` ranks, each even one hands its vector to the odd
//! one above it and waits; the remaining power-of-two set runs the algorithm; the result
//! goes back to the waiting ranks in a last step.

use super::tree::{knomial_children, knomial_parent};
use super::{pow2_floor, Shape};
use crate::schedule::{even_blocks, BufId, Region, Schedule};

/// Where this rank's input vector is: `Dst` in place, else `Src`.
fn input(s: &Shape, len: usize) -> Region {
    Region::new(if s.in_place { BufId::Dst } else { BufId::Src }, 0, len)
}

/// The region of blocks `lo..hi` of `blocks` in `buf`, shifted by `base`.
fn span(blocks: &[(usize, usize)], lo: usize, hi: usize, buf: BufId, base: usize) -> Region {
    if hi <= lo {
        return Region::new(buf, base, 0);
    }
    let off = blocks[lo].0;
    let end = blocks[hi - 1].0 + blocks[hi - 1].1;
    Region::new(buf, base + off, end - off)
}

/// k-nomial reduce to the root: each rank adds its children's partial results (received
/// level by level into k - 1 slots) to its own, then sends the sum to its parent.
pub fn reduce_knomial(s: &Shape) -> Schedule {
    let (p, k, b) = (s.size, s.radix.max(2), s.bytes());
    let v = s.virt(s.rank);
    let root = v == 0;
    let mut sc = Schedule::new(k * b);
    let acc = if root {
        Region::new(BufId::Dst, 0, b)
    } else {
        Region::new(BufId::Tmp, 0, b)
    };
    let inp = if root {
        input(s, b)
    } else {
        Region::new(BufId::Src, 0, b)
    };
    sc.copy_before(0, inp, acc);
    for (j, child) in knomial_children(v, p, k) {
        let c = (child - v) / k.pow(j as u32);
        let slot = Region::new(BufId::Tmp, c * b, b);
        sc.recv(j, s.real(child), slot);
        sc.reduce_after(j, slot, acc);
    }
    if !root {
        let (j, parent) = knomial_parent(v, k);
        sc.send(j, s.real(parent), acc);
    }
    sc
}

/// Reduce for large vectors: a ring reduce_scatter leaves block `v` summed at virtual
/// rank `v`, then every rank sends its block to the root.
pub fn reduce_rs_gather(s: &Shape) -> Schedule {
    let (p, b) = (s.size, s.bytes());
    let v = s.virt(s.rank);
    let blocks = even_blocks(s.count, p, s.esize);
    let mut sc = Schedule::new(2 * b);
    let (abuf, abase) = if v == 0 {
        (BufId::Dst, 0)
    } else {
        (BufId::Tmp, 0)
    };
    let inp = if v == 0 {
        input(s, b)
    } else {
        Region::new(BufId::Src, 0, b)
    };
    sc.copy_before(0, inp, Region::new(abuf, abase, b));
    ring_reduce_scatter(&mut sc, 0, p, v, &blocks, (abuf, abase), b, |u| s.real(u));
    let g = p - 1;
    if p > 1 {
        if v == 0 {
            for u in 1..p {
                sc.recv(g, s.real(u), span(&blocks, u, u + 1, BufId::Dst, 0));
            }
        } else {
            sc.send(g, s.root, span(&blocks, v, v + 1, abuf, abase));
        }
    }
    sc
}

/// Steps `first .. first + p - 1` of a ring reduce_scatter over `blocks` of the
/// accumulator `acc` (buffer, base); received blocks land in `Tmp` at `scratch + offset`.
/// Afterwards block `v` of the accumulator holds the full reduction at position `v`.
#[allow(clippy::too_many_arguments)]
fn ring_reduce_scatter(
    sc: &mut Schedule,
    first: usize,
    p: usize,
    v: usize,
    blocks: &[(usize, usize)],
    acc: (BufId, usize),
    scratch: usize,
    real: impl Fn(usize) -> usize,
) {
    for i in 0..p.saturating_sub(1) {
        let out = (v + 2 * p - i - 1) % p;
        let inn = (v + 2 * p - i - 2) % p;
        let st = first + i;
        sc.send(
            st,
            real((v + 1) % p),
            span(blocks, out, out + 1, acc.0, acc.1),
        );
        let tmp = span(blocks, inn, inn + 1, BufId::Tmp, scratch);
        sc.recv(st, real((v + p - 1) % p), tmp);
        sc.reduce_after(st, tmp, span(blocks, inn, inn + 1, acc.0, acc.1));
    }
}

/// The fold of a non-power-of-two team: (p2, rem).
fn fold(p: usize) -> (usize, usize) {
    let p2 = pow2_floor(p);
    (p2, p - p2)
}

/// New rank of `r` in the folded set (`None`: waits for the result).
fn new_rank(r: usize, rem: usize) -> Option<usize> {
    if r < 2 * rem {
        (r % 2 == 1).then_some(r / 2)
    } else {
        Some(r - rem)
    }
}

fn old_rank(nr: usize, rem: usize) -> usize {
    if nr < rem {
        2 * nr + 1
    } else {
        nr + rem
    }
}

/// Fold step 0 and unfold step `last` around an algorithm on `Dst`; returns the new rank.
fn folded(sc: &mut Schedule, s: &Shape, rem: usize, last: usize) -> Option<usize> {
    let (r, b) = (s.rank, s.bytes());
    let all = Region::new(BufId::Dst, 0, b);
    let tmp = Region::new(BufId::Tmp, 0, b);
    if r < 2 * rem {
        if r % 2 == 0 {
            sc.send(0, r + 1, all);
            sc.recv(last, r + 1, all);
        } else {
            sc.recv(0, r - 1, tmp);
            sc.reduce_after(0, tmp, all);
            sc.send(last, r - 1, all);
        }
    }
    new_rank(r, rem)
}

/// Recursive-doubling allreduce: log2(p) exchanges of the whole vector.
pub fn allreduce_rd(s: &Shape) -> Schedule {
    let b = s.bytes();
    let (p2, rem) = fold(s.size);
    let log = p2.trailing_zeros() as usize;
    let mut sc = Schedule::new(b);
    let all = Region::new(BufId::Dst, 0, b);
    let tmp = Region::new(BufId::Tmp, 0, b);
    sc.copy_before(0, input(s, b), all);
    if let Some(nr) = folded(&mut sc, s, rem, log + 1) {
        for t in 1..=log {
            let peer = old_rank(nr ^ (1 << (t - 1)), rem);
            sc.send(t, peer, all);
            sc.recv(t, peer, tmp);
            sc.reduce_after(t, tmp, all);
        }
    }
    sc
}

/// Rabenseifner's allreduce: recursive-halving reduce_scatter, then recursive-doubling
/// allgather (each moves about the vector once).
pub fn allreduce_rabenseifner(s: &Shape) -> Schedule {
    let b = s.bytes();
    let (p2, rem) = fold(s.size);
    let log = p2.trailing_zeros() as usize;
    let blocks = even_blocks(s.count, p2, s.esize);
    let mut sc = Schedule::new(b);
    sc.copy_before(0, input(s, b), Region::new(BufId::Dst, 0, b));
    let Some(nr) = folded(&mut sc, s, rem, 2 * log + 1) else {
        return sc;
    };
    let (mut lo, mut hi) = (0, p2);
    for t in 1..=log {
        let m = p2 >> t;
        let peer = old_rank(nr ^ m, rem);
        let mid = lo + m;
        let (keep, give) = if nr & m == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        sc.send(t, peer, span(&blocks, give.0, give.1, BufId::Dst, 0));
        let tmp = span(&blocks, keep.0, keep.1, BufId::Tmp, 0);
        sc.recv(t, peer, tmp);
        sc.reduce_after(t, tmp, span(&blocks, keep.0, keep.1, BufId::Dst, 0));
        (lo, hi) = keep;
    }
    for t in log + 1..=2 * log {
        let m = 1usize << (t - log - 1);
        let pn = nr ^ m;
        let peer = old_rank(pn, rem);
        let mine = nr & !(m - 1);
        let theirs = pn & !(m - 1);
        sc.send(t, peer, span(&blocks, mine, mine + m, BufId::Dst, 0));
        sc.recv(t, peer, span(&blocks, theirs, theirs + m, BufId::Dst, 0));
    }
    sc
}

/// Ring allreduce: a ring reduce_scatter then a ring allgather of `p` blocks.
pub fn allreduce_ring(s: &Shape) -> Schedule {
    let (p, r, b) = (s.size, s.rank, s.bytes());
    let blocks = even_blocks(s.count, p, s.esize);
    let mut sc = Schedule::new(b);
    sc.copy_before(0, input(s, b), Region::new(BufId::Dst, 0, b));
    ring_reduce_scatter(&mut sc, 0, p, r, &blocks, (BufId::Dst, 0), 0, |u| u);
    for i in 0..p.saturating_sub(1) {
        let st = p - 1 + i;
        let out = (r + p - i) % p;
        let inn = (r + 2 * p - i - 1) % p;
        sc.send(st, (r + 1) % p, span(&blocks, out, out + 1, BufId::Dst, 0));
        sc.recv(
            st,
            (r + p - 1) % p,
            span(&blocks, inn, inn + 1, BufId::Dst, 0),
        );
    }
    sc
}

/// Ring reduce_scatter over blocks of `src_blocks` (the full input vector, packed): rank
/// `r` ends with block `r` reduced, at the start of `Dst`. In place, the input is `Dst`.
pub fn reduce_scatter_ring(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let total = s.src_blocks.last().map_or(0, |&(o, l)| o + l);
    let mut sc = Schedule::new(2 * total);
    sc.copy_before(0, input(s, total), Region::new(BufId::Tmp, 0, total));
    ring_reduce_scatter(
        &mut sc,
        0,
        p,
        r,
        &s.src_blocks,
        (BufId::Tmp, 0),
        total,
        |u| u,
    );
    let (off, len) = s.src_blocks[r];
    let last = p.saturating_sub(2);
    sc.copy_after(
        last,
        Region::new(BufId::Tmp, off, len),
        Region::new(BufId::Dst, 0, len),
    );
    sc
}
