//! The algorithms: schedule builders, one module per family.
//!
//! Each builder is a pure function of a [`Shape`] (who I am, the team size, the byte
//! layout of the blocks) that returns this rank's [`Schedule`]. Peers are team ranks.
//! Algorithms that work on a rotated rank space ("virtual rank" `v = (rank - root) mod
//! size`) convert back with [`Shape::real`].

pub mod alltoall;
pub mod gather;
pub mod reduce;
pub mod tree;

use crate::schedule::Schedule;
use crate::select::{Alg, CollType};
use ucs::{Result, Status};

/// The shape of one collective at one rank, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub rank: usize,
    pub size: usize,
    pub root: usize,
    /// Bytes per element (blocks are split on element boundaries).
    pub esize: usize,
    pub in_place: bool,
    /// Elements of the vector of bcast, reduce and allreduce.
    pub count: usize,
    /// Per rank: where its block is in the source buffer (scatter(v) at the root,
    /// alltoall(v), the full input vector of reduce_scatter).
    pub src_blocks: Vec<(usize, usize)>,
    /// Per rank: where its block is in the destination buffer (allgather(v), gather(v) at
    /// the root, alltoall(v)).
    pub dst_blocks: Vec<(usize, usize)>,
    /// Radix of the k-nomial trees (at least 2).
    pub radix: usize,
}

impl Shape {
    /// Bytes of the vector of bcast, reduce and allreduce.
    pub fn bytes(&self) -> usize {
        self.count * self.esize
    }

    /// Virtual rank of `r`: the root is 0.
    pub fn virt(&self, r: usize) -> usize {
        (r + self.size - self.root) % self.size
    }

    /// Real rank of virtual rank `v`.
    pub fn real(&self, v: usize) -> usize {
        (v + self.root) % self.size
    }
}

/// Largest power of two not above `p` (p ≥ 1).
pub fn pow2_floor(p: usize) -> usize {
    1 << (usize::BITS - 1 - p.leading_zeros())
}

/// Number of steps of a binary doubling over `p` (ceil(log2 p)).
pub fn log2_ceil(p: usize) -> usize {
    p.next_power_of_two().trailing_zeros() as usize
}

/// Builds the schedule of `alg` for `coll` at the rank described by `s`.
pub fn build(coll: CollType, alg: Alg, s: &Shape) -> Result<Schedule> {
    if s.size == 0 || s.rank >= s.size || s.root >= s.size || s.esize == 0 {
        return Err(Status::InvalidParam);
    }
    use Alg as A;
    use CollType as C;
    match (coll, alg) {
        (C::Barrier, A::Dissemination) => Ok(tree::barrier_dissemination(s)),
        (C::Bcast, A::Knomial) => Ok(tree::bcast_knomial(s)),
        (C::Bcast, A::ScatterAllgather) => Ok(tree::bcast_scatter_allgather(s)),
        (C::Reduce, A::Knomial) => Ok(reduce::reduce_knomial(s)),
        (C::Reduce, A::ReduceScatterGather) => Ok(reduce::reduce_rs_gather(s)),
        (C::Allreduce, A::RecursiveDoubling) => Ok(reduce::allreduce_rd(s)),
        (C::Allreduce, A::Rabenseifner) => Ok(reduce::allreduce_rabenseifner(s)),
        (C::Allreduce, A::Ring) => Ok(reduce::allreduce_ring(s)),
        (C::ReduceScatter | C::ReduceScatterv, A::Ring) => Ok(reduce::reduce_scatter_ring(s)),
        (C::Allgather | C::Allgatherv, A::Ring) => Ok(gather::allgather_ring(s)),
        (C::Allgather | C::Allgatherv, A::RecursiveDoubling) => Ok(gather::allgather_rd(s)),
        (C::Allgather | C::Allgatherv, A::Bruck) => Ok(gather::allgather_bruck(s)),
        (C::Gather | C::Gatherv, A::Linear) => Ok(gather::gather_linear(s)),
        (C::Scatter | C::Scatterv, A::Linear) => Ok(gather::scatter_linear(s)),
        (C::Alltoall, A::Bruck) => alltoall::bruck(s),
        (C::Alltoall, A::Rma) => alltoall::rma(s),
        (C::Alltoall | C::Alltoallv, A::Pairwise) => Ok(alltoall::pairwise(s)),
        (C::Alltoall | C::Alltoallv, A::Direct) => Ok(alltoall::direct(s)),
        // The segment path runs rounds over the team's segment (`shm::run`), not a
        // schedule of messages.
        (c, A::Shm) if crate::shm::run::supports(c) => Ok(Schedule::new(0)),
        (c, A::Hier) if crate::shm::hier::supports(c) => Ok(Schedule::new(0)),
        _ => Err(Status::Unsupported),
    }
}
