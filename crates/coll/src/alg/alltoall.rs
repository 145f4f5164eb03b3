//! Alltoall(v): pairwise exchange, direct scattered, and Bruck's store-and-forward.
//!
//! In place, the input is the destination buffer: the algorithms first copy it to scratch
//! memory and send from there.

use super::{log2_ceil, Shape};
use crate::schedule::{BufId, Comm, Region, Schedule};
use ucs::{Result, Status};

fn extent(blocks: &[(usize, usize)]) -> usize {
    blocks.iter().map(|&(o, l)| o + l).max().unwrap_or(0)
}

/// The source region of the block for rank `q`, and the scratch bytes needed.
fn source<'s>(s: &'s Shape, sc: &mut Schedule) -> impl Fn(usize) -> Region + 's {
    if s.in_place {
        let n = extent(&s.dst_blocks);
        sc.tmp_len = n;
        sc.copy_before(
            0,
            Region::new(BufId::Dst, 0, n),
            Region::new(BufId::Tmp, 0, n),
        );
    }
    move |q| {
        if s.in_place {
            Region::new(BufId::Tmp, s.dst_blocks[q].0, s.dst_blocks[q].1)
        } else {
            Region::new(BufId::Src, s.src_blocks[q].0, s.src_blocks[q].1)
        }
    }
}

fn dst(s: &Shape, q: usize) -> Region {
    Region::new(BufId::Dst, s.dst_blocks[q].0, s.dst_blocks[q].1)
}

/// Pairwise exchange: in step `i` exchange with `rank XOR i` (power-of-two teams), else
/// send to `rank + i` and receive from `rank - i`; one peer at a time.
pub fn pairwise(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let mut sc = Schedule::new(0);
    let src = source(s, &mut sc);
    if !s.in_place {
        sc.copy_before(0, src(r), dst(s, r));
    }
    for i in 1..p {
        let (to, from) = if p.is_power_of_two() {
            (r ^ i, r ^ i)
        } else {
            ((r + i) % p, (r + p - i) % p)
        };
        sc.recv(i - 1, from, dst(s, from));
        sc.send(i - 1, to, src(to));
    }
    if p == 1 {
        sc.step(0);
    }
    sc
}

/// Direct scattered: all receives and sends posted at once, the i-th send going to
/// `rank + i` so that not everyone starts with the same target.
pub fn direct(s: &Shape) -> Schedule {
    let (p, r) = (s.size, s.rank);
    let mut sc = Schedule::new(0);
    let src = source(s, &mut sc);
    if !s.in_place {
        sc.copy_before(0, src(r), dst(s, r));
    }
    for i in 1..p {
        let from = (r + p - i) % p;
        sc.recv(0, from, dst(s, from));
    }
    for i in 1..p {
        let to = (r + i) % p;
        sc.send(0, to, src(to));
    }
    sc
}

/// Bruck's alltoall (equal blocks only): rotate so that position `i` holds the block for
/// `rank + i`; in step `k` send every position with bit `k` set to `rank + 2^k` (packed
/// into one message) and put what arrives from `rank - 2^k` in the same positions; finally
/// position `i` holds the block from `rank - i`. ceil(log2 p) messages of about p/2 blocks.
pub fn bruck(s: &Shape) -> Result<Schedule> {
    let (p, r) = (s.size, s.rank);
    let bl = s.dst_blocks[0].1;
    let uniform = |b: &[(usize, usize)]| b.iter().enumerate().all(|(i, &x)| x == (i * bl, bl));
    if !uniform(&s.dst_blocks) || (!s.in_place && !uniform(&s.src_blocks)) {
        return Err(Status::Unsupported);
    }
    let steps = log2_ceil(p);
    let sets: Vec<Vec<usize>> = (0..steps)
        .map(|k| (0..p).filter(|i| i & (1 << k) != 0).collect())
        .collect();
    let h = sets.iter().map(Vec::len).max().unwrap_or(0);
    let (a, pk, rv) = (0, p * bl, p * bl + h * bl);
    let mut sc = Schedule::new(p * bl + 2 * h * bl);
    let input = if s.in_place { BufId::Dst } else { BufId::Src };
    for i in 0..p {
        sc.copy_before(
            0,
            Region::new(input, ((r + i) % p) * bl, bl),
            Region::new(BufId::Tmp, a + i * bl, bl),
        );
    }
    for (k, set) in sets.iter().enumerate() {
        let d = 1 << k;
        for (j, &i) in set.iter().enumerate() {
            sc.copy_before(
                k,
                Region::new(BufId::Tmp, a + i * bl, bl),
                Region::new(BufId::Tmp, pk + j * bl, bl),
            );
        }
        let len = set.len() * bl;
        sc.send(k, (r + d) % p, Region::new(BufId::Tmp, pk, len));
        sc.recv(k, (r + p - d) % p, Region::new(BufId::Tmp, rv, len));
        for (j, &i) in set.iter().enumerate() {
            sc.copy_after(
                k,
                Region::new(BufId::Tmp, rv + j * bl, bl),
                Region::new(BufId::Tmp, a + i * bl, bl),
            );
        }
    }
    let last = steps.saturating_sub(1);
    for i in 0..p {
        sc.copy_after(
            last,
            Region::new(BufId::Tmp, a + i * bl, bl),
            Region::new(BufId::Dst, ((r + p - i) % p) * bl, bl),
        );
    }
    Ok(sc)
}

/// Zero-copy direct alltoall over RMA (equal blocks only): in the synchronisation step
/// every rank sends each peer the address and key of its destination buffer (the key
/// only the first time the peer sees that buffer: see `exec::KeyCache`); then it writes
/// its block for each peer straight into the peer's buffer, flushes, and tells the peer
/// it is done; a rank's result is complete once every peer said so.
pub fn rma(s: &Shape) -> Result<Schedule> {
    let (p, r) = (s.size, s.rank);
    let bl = s.dst_blocks[0].1;
    let uniform = |b: &[(usize, usize)]| b.iter().enumerate().all(|(i, &x)| x == (i * bl, bl));
    if !uniform(&s.dst_blocks) || (!s.in_place && !uniform(&s.src_blocks)) {
        return Err(Status::Unsupported);
    }
    let mut sc = Schedule::new(0);
    // In place, the input moves to scratch before the buffer is exposed.
    let src = source(s, &mut sc);
    if !s.in_place {
        sc.copy_before(0, src(r), dst(s, r));
    }
    for i in 1..p {
        let (to, from) = ((r + i) % p, (r + p - i) % p);
        sc.comm(0, Comm::RecvKey { peer: from });
        sc.comm(0, Comm::SendKey { peer: to });
    }
    let empty = Region::new(BufId::Tmp, 0, 0);
    for i in 1..p {
        let to = (r + i) % p;
        sc.comm(
            1,
            Comm::Put {
                peer: to,
                from: src(to),
                remote_off: r * bl,
            },
        );
        sc.recv(2, (r + p - i) % p, empty);
        sc.send(2, to, empty);
    }
    sc.step(0);
    Ok(sc)
}
