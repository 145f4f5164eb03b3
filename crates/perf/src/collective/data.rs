//! The data of the collective benchmarks and the results they must produce, computed
//! element by element with scalar arithmetic (no use of coll's reduction loops), so a
//! benchmark run also checks that every byte of every rank's result is right.
//!
//! Byte collectives (bcast, allgather, alltoall, gather, scatter) move `Uint8` data;
//! reductions (allreduce, reduce, reduce_scatter) sum `Int32` vectors, which is exact
//! (wrapping) whatever the order of the additions.

use coll::{CollType, DataType};

/// Byte `i` of rank `r`'s contribution.
pub fn byte(r: usize, i: usize) -> u8 {
    (r.wrapping_mul(131) ^ i.wrapping_mul(7).wrapping_add(3)) as u8
}

/// Element `i` of rank `r`'s vector (reductions).
pub fn int(r: usize, i: usize) -> i32 {
    (r as i32)
        .wrapping_mul(7919)
        .wrapping_add((i as i32).wrapping_mul(31))
        .wrapping_add(1)
}

/// `int(·, i)` summed over `p` ranks.
pub fn int_sum(p: usize, i: usize) -> i32 {
    (0..p).fold(0i32, |s, r| s.wrapping_add(int(r, i)))
}

fn ints(v: impl Iterator<Item = i32>) -> Vec<u8> {
    v.flat_map(i32::to_ne_bytes).collect()
}

/// The shape of one benchmark: the collective's arguments at one rank and what its
/// destination holds afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub dt: DataType,
    /// `Args::count` (elements; see coll's `args` module for its meaning by collective).
    pub count: usize,
    pub src: Option<Vec<u8>>,
    /// The destination as posted (each byte the complement of its result's).
    pub dst: Option<Vec<u8>>,
    /// What the destination must hold afterwards (`None`: no destination at this rank).
    pub expect: Option<Vec<u8>>,
}

/// The case of `coll` at `rank` of `p` for a message of `size` bytes: the vector for
/// bcast, reduce and allreduce; one rank's block for allgather, gather, scatter and
/// reduce_scatter (whose vector is `p × size`, as MPI_Reduce_scatter_block's count);
/// one block per peer for alltoall. Root 0. Reductions need a multiple of 4 bytes;
/// `None` when the size does not fit.
pub fn case(coll: CollType, rank: usize, p: usize, size: usize) -> Option<Case> {
    // Placeholder destinations, replaced below by the complement of the result.
    let junk = |n: usize| Some(vec![0u8; n]);
    let bytes = |r: usize, range: std::ops::Range<usize>| -> Vec<u8> {
        range.map(|i| byte(r, i)).collect()
    };
    let root = rank == 0;
    let c = match coll {
        CollType::Barrier => Case {
            dt: DataType::Uint8,
            count: 0,
            src: None,
            dst: None,
            expect: None,
        },
        CollType::Bcast => Case {
            dt: DataType::Uint8,
            count: size,
            src: None,
            dst: if root {
                Some(bytes(0, 0..size))
            } else {
                junk(size)
            },
            expect: Some(bytes(0, 0..size)),
        },
        CollType::Allgather => Case {
            dt: DataType::Uint8,
            count: size,
            src: Some(bytes(rank, 0..size)),
            dst: junk(p * size),
            expect: Some((0..p).flat_map(|q| bytes(q, 0..size)).collect()),
        },
        CollType::Alltoall => Case {
            dt: DataType::Uint8,
            count: size,
            src: Some(bytes(rank, 0..p * size)),
            dst: junk(p * size),
            expect: Some(
                (0..p)
                    .flat_map(|q| bytes(q, rank * size..(rank + 1) * size))
                    .collect(),
            ),
        },
        CollType::Gather => Case {
            dt: DataType::Uint8,
            count: size,
            src: Some(bytes(rank, 0..size)),
            dst: if root { junk(p * size) } else { None },
            expect: root.then(|| (0..p).flat_map(|q| bytes(q, 0..size)).collect()),
        },
        CollType::Scatter => Case {
            dt: DataType::Uint8,
            count: size,
            src: root.then(|| bytes(0, 0..p * size)),
            dst: junk(size),
            expect: Some(bytes(0, rank * size..(rank + 1) * size)),
        },
        CollType::Allreduce | CollType::Reduce => {
            if size % 4 != 0 {
                return None;
            }
            let n = size / 4;
            let has_dst = coll == CollType::Allreduce || root;
            Case {
                dt: DataType::Int32,
                count: n,
                src: Some(ints((0..n).map(|i| int(rank, i)))),
                dst: if has_dst { junk(size) } else { None },
                expect: has_dst.then(|| ints((0..n).map(|i| int_sum(p, i)))),
            }
        }
        CollType::ReduceScatter => {
            if size % 4 != 0 {
                return None;
            }
            let n = size / 4;
            Case {
                dt: DataType::Int32,
                count: n,
                src: Some(ints((0..n * p).map(|i| int(rank, i)))),
                dst: junk(size),
                expect: Some(ints((rank * n..(rank + 1) * n).map(|i| int_sum(p, i)))),
            }
        }
        _ => return None,
    };
    let mut c = c;
    let keeps_data = coll == CollType::Bcast && root;
    if let (Some(d), Some(e), false) = (&mut c.dst, &c.expect, keeps_data) {
        // Every byte differs from its result, so a byte left unwritten is noticed.
        *d = e.iter().map(|b| !b).collect();
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_results_follow_the_definitions() {
        // alltoall: rank 1 of 3 receives from q the block q sent to 1.
        let c = case(CollType::Alltoall, 1, 3, 2).unwrap();
        let e = c.expect.unwrap();
        assert_eq!(
            e,
            vec![
                byte(0, 2),
                byte(0, 3),
                byte(1, 2),
                byte(1, 3),
                byte(2, 2),
                byte(2, 3)
            ]
        );
        // reduce_scatter: rank 2 of 3 keeps elements 2n..3n of the sum.
        let c = case(CollType::ReduceScatter, 2, 3, 8).unwrap();
        assert_eq!(c.count, 2);
        let want: Vec<u8> = [int_sum(3, 4), int_sum(3, 5)]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        assert_eq!(c.expect.unwrap(), want);
        assert_eq!(int_sum(2, 0), int(0, 0) + int(1, 0));
        // Sizes that do not fit the element or the team.
        assert!(case(CollType::Allreduce, 0, 2, 6).is_none());
        assert!(case(CollType::ReduceScatter, 0, 3, 10).is_none());
        // Only the root of reduce and gather has a destination.
        assert!(case(CollType::Reduce, 1, 2, 8).unwrap().dst.is_none());
        assert!(case(CollType::Gather, 0, 2, 8).unwrap().expect.is_some());
        // The junk of a destination never equals its result.
        let c = case(CollType::Bcast, 1, 2, 64).unwrap();
        assert_ne!(c.dst, c.expect);
    }
}
