//! Barrier (dissemination) and broadcast (k-nomial tree; scatter + ring allgather).

use super::{log2_ceil, Shape};
use crate::schedule::{even_blocks, BufId, Region, Schedule};

/// Levels of a k-nomial tree over `p` ranks: the smallest `l` with `k^l >= p`.
pub fn knomial_levels(p: usize, k: usize) -> usize {
    let (mut l, mut span) = (0, 1usize);
    while span < p {
        span = span.saturating_mul(k);
        l += 1;
    }
    l
}

/// The level at which virtual rank `v > 0` receives (its lowest nonzero base-`k` digit)
/// and its parent.
pub fn knomial_parent(v: usize, k: usize) -> (usize, usize) {
    let (mut j, mut span) = (0, 1usize);
    while (v / span) % k == 0 {
        span *= k;
        j += 1;
    }
    (j, v - ((v / span) % k) * span)
}

/// Children of virtual rank `v` by level, highest level first: `(level, child)`.
pub fn knomial_children(v: usize, p: usize, k: usize) -> Vec<(usize, usize)> {
    let levels = knomial_levels(p, k);
    let top = if v == 0 {
        levels
    } else {
        knomial_parent(v, k).0
    };
    let mut out = Vec::new();
    for j in (0..top).rev() {
        let span = k.pow(j as u32);
        for c in 1..k {
            let child = v + c * span;
            if child < p {
                out.push((j, child));
            }
        }
    }
    out
}

/// Dissemination barrier: in step `k` send an empty message to `rank + 2^k` and receive
/// one from `rank - 2^k`; after ceil(log2 p) steps everyone heard from everyone.
pub fn barrier_dissemination(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let mut sc = Schedule::new(0);
    let empty = Region::new(BufId::Tmp, 0, 0);
    for k in 0..log2_ceil(p) {
        let d = 1 << k;
        sc.recv(k, (r + p - d % p) % p, empty);
        sc.send(k, (r + d) % p, empty);
    }
    sc
}

/// k-nomial broadcast of the whole vector (in `Dst` at every rank).
pub fn bcast_knomial(s: &Shape) -> Schedule {
    let (p, k) = (s.size, s.radix.max(2));
    let levels = knomial_levels(p, k);
    let v = s.virt(s.rank);
    let all = Region::new(BufId::Dst, 0, s.bytes());
    let mut sc = Schedule::new(0);
    if v > 0 {
        let (j, parent) = knomial_parent(v, k);
        sc.recv(levels - 1 - j, s.real(parent), all);
    }
    for (j, child) in knomial_children(v, p, k) {
        sc.send(levels - 1 - j, s.real(child), all);
    }
    sc
}

/// Broadcast for large vectors: a binomial scatter of `p` blocks from the root, then a
/// ring allgather of the blocks (bandwidth about twice the vector, not log p times).
pub fn bcast_scatter_allgather(s: &Shape) -> Schedule {
    let p = s.size;
    let blocks = even_blocks(s.count, p, s.esize);
    let v = s.virt(s.rank);
    let range = |lo: usize, hi: usize| {
        let hi = hi.min(p);
        let off = blocks[lo].0;
        let end = if hi > lo {
            blocks[hi - 1].0 + blocks[hi - 1].1
        } else {
            off
        };
        Region::new(BufId::Dst, off, end - off)
    };
    let mut sc = Schedule::new(0);
    let top = log2_ceil(p);
    // Scatter: in step t the mask is 2^(top-1-t).
    for t in 0..top {
        let m = 1 << (top - 1 - t);
        if v % (2 * m) == 0 && v + m < p {
            sc.send(t, s.real(v + m), range(v + m, v + 2 * m));
        } else if v % (2 * m) == m {
            sc.recv(t, s.real(v - m), range(v, v + m));
        }
    }
    // Ring allgather: step i sends block v - i to v + 1.
    for i in 0..p.saturating_sub(1) {
        let st = top + i;
        let out = (v + p - i) % p;
        let inn = (v + 2 * p - i - 1) % p;
        sc.send(st, s.real((v + 1) % p), range(out, out + 1));
        sc.recv(st, s.real((v + p - 1) % p), range(inn, inn + 1));
    }
    sc
}
