//! Allgather(v) (ring, recursive doubling, Bruck), gather(v) and scatter(v).
//!
//! Blocks are given per rank by byte ranges of the destination (`dst_blocks`), so the
//! v-variants come for free. Recursive doubling and Bruck exchange contiguous runs of
//! blocks: they assemble them in scratch memory in their own order and copy the result
//! out at the end (the ring moves blocks in place).

use super::{log2_ceil, pow2_floor, Shape};
use crate::schedule::{BufId, Region, Schedule};

/// This rank's own contribution: `Src`, or in place its block of `Dst`.
fn own(s: &Shape) -> Region {
    let (off, len) = s.dst_blocks[s.rank];
    if s.in_place {
        Region::new(BufId::Dst, off, len)
    } else {
        Region::new(BufId::Src, 0, len)
    }
}

fn dst(s: &Shape, i: usize) -> Region {
    Region::new(BufId::Dst, s.dst_blocks[i].0, s.dst_blocks[i].1)
}

/// Ring allgather: in step `i` pass block `rank - i` to the right.
pub fn allgather_ring(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let mut sc = Schedule::new(0);
    sc.copy_before(0, own(s), dst(s, r));
    for i in 0..p.saturating_sub(1) {
        sc.send(i, (r + 1) % p, dst(s, (r + p - i) % p));
        sc.recv(i, (r + p - 1) % p, dst(s, (r + 2 * p - i - 1) % p));
    }
    sc
}

/// Scratch layout in a given order of ranks: offsets of each rank's block.
fn layout(s: &Shape, order: &[usize]) -> (Vec<usize>, usize) {
    let mut off = vec![0; s.size];
    let mut at = 0;
    for &q in order {
        off[q] = at;
        at += s.dst_blocks[q].1;
    }
    (off, at)
}

/// Copies every block from its scratch place to `Dst` after `step`.
fn unpack(sc: &mut Schedule, s: &Shape, off: &[usize], step: usize) {
    for (q, &o) in off.iter().enumerate() {
        sc.copy_after(
            step,
            Region::new(BufId::Tmp, o, s.dst_blocks[q].1),
            dst(s, q),
        );
    }
}

/// Recursive-doubling allgather. With `p2 = 2^floor(log2 p)`, rank `j + p2` first hands
/// its block to rank `j`; the `p2` ranks double their runs of blocks; rank `j` returns the
/// whole result to rank `j + p2` at the end.
pub fn allgather_rd(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let p2 = pow2_floor(p);
    let rem = p - p2;
    let log = p2.trailing_zeros() as usize;
    // Super-rank j's run: block j, then block j + p2 when that exists.
    let order: Vec<usize> = (0..p2)
        .flat_map(|j| std::iter::once(j).chain((j < rem).then_some(j + p2)))
        .collect();
    let (off, total) = layout(s, &order);
    let mut sc = Schedule::new(total);
    let tmp = |q: usize| Region::new(BufId::Tmp, off[q], s.dst_blocks[q].1);
    let last = log + 1;
    if r >= p2 {
        sc.send(0, r - p2, own(s));
        sc.recv(last, r - p2, Region::new(BufId::Tmp, 0, total));
        unpack(&mut sc, s, &off, last);
        return sc;
    }
    sc.copy_before(0, own(s), tmp(r));
    if r < rem {
        sc.recv(0, r + p2, tmp(r + p2));
    }
    // The run of super-ranks lo..lo+m in scratch.
    let run = |lo: usize, m: usize| {
        let first = off[lo];
        let end = if lo + m >= p2 { total } else { off[lo + m] };
        Region::new(BufId::Tmp, first, end - first)
    };
    for t in 1..=log {
        let m = 1usize << (t - 1);
        let peer = r ^ m;
        sc.send(t, peer, run(r & !(m - 1), m));
        sc.recv(t, peer, run(peer & !(m - 1), m));
    }
    unpack(&mut sc, s, &off, log);
    if r < rem {
        sc.send(last, r + p2, Region::new(BufId::Tmp, 0, total));
    }
    sc
}

/// Bruck's allgather: scratch holds blocks in the order rank, rank + 1, ...; in step `k`
/// send the first `min(2^k, p - 2^k)` of them to `rank - 2^k` and append as many from
/// `rank + 2^k`; works for any team size in ceil(log2 p) steps.
pub fn allgather_bruck(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let order: Vec<usize> = (0..p).map(|i| (r + i) % p).collect();
    let (off, total) = layout(s, &order);
    let mut sc = Schedule::new(total);
    // Rotated positions lo..hi as a scratch region.
    let run = |lo: usize, hi: usize| {
        let first = if lo < p { off[order[lo]] } else { total };
        let end = if hi < p { off[order[hi]] } else { total };
        Region::new(BufId::Tmp, first, end - first)
    };
    sc.copy_before(0, own(s), run(0, 1));
    let steps = log2_ceil(p);
    for k in 0..steps {
        let d = 1usize << k;
        let cnt = d.min(p - d);
        sc.send(k, (r + p - d) % p, run(0, cnt));
        sc.recv(k, (r + d) % p, run(d, d + cnt));
    }
    unpack(&mut sc, s, &off, steps.saturating_sub(1));
    sc
}

/// Linear gather: every rank sends its block to the root, which posts all receives at
/// once.
pub fn gather_linear(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let mut sc = Schedule::new(0);
    if r == s.root {
        sc.copy_before(0, own(s), dst(s, r));
        for q in (0..p).filter(|&q| q != r) {
            sc.recv(0, q, dst(s, q));
        }
    } else {
        sc.send(0, s.root, Region::new(BufId::Src, 0, s.dst_blocks[r].1));
    }
    sc
}

/// Linear scatter: the root sends every rank its block of `Src` (blocks in
/// `src_blocks`); in place the root's own block stays in `Src`.
pub fn scatter_linear(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let mut sc = Schedule::new(0);
    let src = |q: usize| Region::new(BufId::Src, s.src_blocks[q].0, s.src_blocks[q].1);
    let mine = Region::new(BufId::Dst, 0, s.src_blocks[r].1);
    if r == s.root {
        if !s.in_place {
            sc.copy_before(0, src(r), mine);
        }
        for q in (0..p).filter(|&q| q != r) {
            sc.send(0, q, src(q));
        }
    } else {
        sc.recv(0, s.root, mine);
    }
    sc
}
