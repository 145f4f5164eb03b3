//! The arguments of a collective and their translation into a [`Shape`] (the plan).
//!
//! Counts are in elements, displacements in elements from the start of the buffer, as in
//! MPI. `count` means:
//! - bcast, reduce, allreduce: elements of the vector;
//! - allgather, alltoall, gather, scatter, reduce_scatter: elements per rank's block;
//! - gatherv (non-root ranks) and scatterv (non-root ranks): elements this rank sends or
//!   receives.
//!
//! Buffers by collective (`in_place` as MPI_IN_PLACE):
//! - barrier: none; bcast: `dst` at every rank (the root's holds the data);
//! - reduce: `src` (not at the root in place, where `dst` is the input), `dst` at the root;
//! - allreduce, allgather(v), alltoall(v), reduce_scatter(v): `src` (not in place) and
//!   `dst`; in place the input is in `dst` (allgather: this rank's block of it;
//!   reduce_scatter: the whole vector, and the result goes to its start);
//! - gather(v): `src`, and `dst` at the root (in place: the root's block is in `dst`);
//! - scatter(v): `src` at the root, `dst` (in place: the root has no `dst`).

use crate::alg::{self, Shape};
use crate::dtype::{self, DataType, Op};
use crate::exec::Buffer;
use crate::schedule::{even_blocks, packed_blocks, Schedule};
use crate::select::{select, Alg, CollType};
use ucs::{Result, Status};

/// A collective's arguments. Build with [`Args::new`] and the setters.
#[derive(Debug)]
pub struct Args<'a> {
    pub coll: CollType,
    pub src: Option<Buffer<'a>>,
    pub dst: Option<Buffer<'a>>,
    pub dt: DataType,
    pub op: Op,
    pub root: usize,
    pub count: usize,
    /// scatterv (root) and alltoallv: elements sent to each rank.
    pub src_counts: Vec<usize>,
    pub src_displs: Vec<usize>,
    /// gatherv (root), allgatherv, alltoallv: elements received from each rank;
    /// reduce_scatterv: elements of each rank's result block.
    pub dst_counts: Vec<usize>,
    pub dst_displs: Vec<usize>,
    pub in_place: bool,
    /// Forces an algorithm for this call.
    pub alg: Option<Alg>,
}

impl<'a> Args<'a> {
    /// Arguments of `coll` with no buffers, `Uint8`, `Sum`, root 0, count 0.
    pub fn new(coll: CollType) -> Args<'a> {
        Args {
            coll,
            src: None,
            dst: None,
            dt: DataType::Uint8,
            op: Op::Sum,
            root: 0,
            count: 0,
            src_counts: Vec::new(),
            src_displs: Vec::new(),
            dst_counts: Vec::new(),
            dst_displs: Vec::new(),
            in_place: false,
            alg: None,
        }
    }

    pub fn src(mut self, b: Buffer<'a>) -> Self {
        self.src = Some(b);
        self
    }

    pub fn dst(mut self, b: Buffer<'a>) -> Self {
        self.dst = Some(b);
        self
    }

    pub fn dtype(mut self, dt: DataType) -> Self {
        self.dt = dt;
        self
    }

    pub fn op(mut self, op: Op) -> Self {
        self.op = op;
        self
    }

    pub fn root(mut self, root: usize) -> Self {
        self.root = root;
        self
    }

    pub fn count(mut self, n: usize) -> Self {
        self.count = n;
        self
    }

    /// Send counts and displacements (elements).
    pub fn src_v(mut self, counts: Vec<usize>, displs: Vec<usize>) -> Self {
        self.src_counts = counts;
        self.src_displs = displs;
        self
    }

    /// Receive counts and displacements (elements).
    pub fn dst_v(mut self, counts: Vec<usize>, displs: Vec<usize>) -> Self {
        self.dst_counts = counts;
        self.dst_displs = displs;
        self
    }

    pub fn in_place(mut self, yes: bool) -> Self {
        self.in_place = yes;
        self
    }

    pub fn alg(mut self, a: Alg) -> Self {
        self.alg = Some(a);
        self
    }
}

/// A collective planned at one rank: the algorithm chosen and this rank's schedule.
#[derive(Clone, Debug)]
pub struct Plan {
    pub alg: Alg,
    pub shape: Shape,
    pub schedule: Schedule,
}

fn blocks_v(
    counts: &[usize],
    displs: &[usize],
    p: usize,
    es: usize,
) -> Result<Vec<(usize, usize)>> {
    if counts.len() != p || displs.len() != p {
        tracing::error!("coll: {p} counts and displacements expected");
        return Err(Status::InvalidParam);
    }
    Ok(counts
        .iter()
        .zip(displs)
        .map(|(&c, &d)| (d * es, c * es))
        .collect())
}

fn extent(b: &[(usize, usize)]) -> usize {
    b.iter().map(|&(o, l)| o + l).max().unwrap_or(0)
}

/// Plans `args` at `rank` of a team of `size`: checks the arguments and buffer lengths,
/// picks the algorithm (`args.alg`, else `forced`, else the table) and builds the
/// schedule. Pure: the same call at every rank gives matching schedules.
pub fn plan(
    args: &Args<'_>,
    rank: usize,
    size: usize,
    forced: Option<Alg>,
    radix: usize,
) -> Result<Plan> {
    use CollType as C;
    let es = args.dt.size();
    let (p, c) = (size, args.count);
    if rank >= p || args.root >= p {
        return Err(Status::InvalidParam);
    }
    if args.coll.reduces() {
        dtype::check(args.dt, args.op)?;
    }
    let root = rank == args.root;
    let uni = |n: usize| -> Vec<(usize, usize)> { (0..p).map(|i| (i * n * es, n * es)).collect() };
    let zero = vec![(0, 0); p];
    // Per collective: src blocks, dst blocks, bytes needed in src and dst, selection size.
    let (src_blocks, dst_blocks, need_src, need_dst, sel) = match args.coll {
        C::Barrier => (zero.clone(), zero.clone(), None, None, 0),
        C::Bcast => (zero.clone(), zero.clone(), None, Some(c * es), c * es),
        C::Reduce => {
            let s = (!(root && args.in_place)).then_some(c * es);
            (
                zero.clone(),
                zero.clone(),
                s,
                root.then_some(c * es),
                c * es,
            )
        }
        C::Allreduce => (
            zero.clone(),
            zero.clone(),
            (!args.in_place).then_some(c * es),
            Some(c * es),
            c * es,
        ),
        C::Allgather | C::Allgatherv => {
            let d = if args.coll == C::Allgather {
                uni(c)
            } else {
                blocks_v(&args.dst_counts, &args.dst_displs, p, es)?
            };
            let s = (!args.in_place).then_some(d[rank].1);
            let e = extent(&d);
            (zero.clone(), d, s, Some(e), e)
        }
        C::Alltoall | C::Alltoallv => {
            let (s, d) = if args.coll == C::Alltoall {
                (uni(c), uni(c))
            } else {
                let d = blocks_v(&args.dst_counts, &args.dst_displs, p, es)?;
                let s = if args.in_place {
                    d.clone()
                } else {
                    blocks_v(&args.src_counts, &args.src_displs, p, es)?
                };
                (s, d)
            };
            let need_s = (!args.in_place).then_some(extent(&s));
            let avg = extent(&d) / p.max(1);
            let e = extent(&d);
            (s, d, need_s, Some(e), avg)
        }
        C::ReduceScatter | C::ReduceScatterv => {
            let counts = if args.coll == C::ReduceScatter {
                vec![c; p]
            } else if args.dst_counts.len() == p {
                args.dst_counts.clone()
            } else {
                return Err(Status::InvalidParam);
            };
            let s = packed_blocks(&counts, es);
            let total = extent(&s);
            let (ns, nd) = if args.in_place {
                (None, total)
            } else {
                (Some(total), s[rank].1)
            };
            (s, zero.clone(), ns, Some(nd), total)
        }
        C::Gather | C::Gatherv => {
            let d = if !root {
                let mut d = zero.clone();
                let n = match args.dst_counts.get(rank) {
                    Some(&n) if args.coll == C::Gatherv => n,
                    _ => c,
                };
                d[rank] = (0, n * es);
                d
            } else if args.coll == C::Gather {
                uni(c)
            } else {
                blocks_v(&args.dst_counts, &args.dst_displs, p, es)?
            };
            let s = (!(root && args.in_place)).then_some(d[rank].1);
            let e = extent(&d);
            (zero.clone(), d, s, root.then_some(e), e)
        }
        C::Scatter | C::Scatterv => {
            let s = if !root {
                let mut s = zero.clone();
                let n = match args.src_counts.get(rank) {
                    Some(&n) if args.coll == C::Scatterv => n,
                    _ => c,
                };
                s[rank] = (0, n * es);
                s
            } else if args.coll == C::Scatter {
                uni(c)
            } else {
                blocks_v(&args.src_counts, &args.src_displs, p, es)?
            };
            let nd = (!(root && args.in_place)).then_some(s[rank].1);
            let e = extent(&s);
            (s, zero.clone(), root.then_some(e), nd, e)
        }
    };
    let have = |b: &Option<Buffer<'_>>| b.as_ref().map_or(0, Buffer::len);
    if need_src.is_some_and(|n| have(&args.src) < n)
        || need_dst.is_some_and(|n| have(&args.dst) < n)
    {
        tracing::error!(
            "coll: {:?} needs src {need_src:?} and dst {need_dst:?} bytes, has {} and {}",
            args.coll,
            have(&args.src),
            have(&args.dst)
        );
        return Err(Status::InvalidParam);
    }
    let uniform = args.coll != C::Alltoallv;
    let alg = args
        .alg
        .or(forced)
        .unwrap_or_else(|| select(args.coll, p, sel, uniform));
    if !args.coll.accepts(alg) {
        return Err(Status::InvalidParam);
    }
    let shape = Shape {
        rank,
        size: p,
        root: args.root,
        esize: es,
        in_place: args.in_place,
        count: c,
        src_blocks,
        dst_blocks,
        radix: radix.max(2),
    };
    let mut schedule = alg::build(args.coll, alg, &shape)?;
    if args.op == Op::Avg && args.coll.reduces() && !matches!(alg, Alg::Shm | Alg::Hier) {
        // The sum becomes a mean where the result lands.
        let out = match args.coll {
            C::Allreduce => Some(c * es),
            C::Reduce => root.then_some(c * es),
            _ => Some(shape.src_blocks[rank].1),
        };
        if let Some(len) = out.filter(|&l| l > 0) {
            let last = schedule.steps.len().saturating_sub(1);
            schedule
                .step(last)
                .after
                .push(crate::schedule::Local::Scale {
                    into: crate::schedule::Region::new(crate::schedule::BufId::Dst, 0, len),
                    by: p,
                });
        }
    }
    schedule.validate(rank, have(&args.src), have(&args.dst))?;
    Ok(Plan {
        alg,
        shape,
        schedule,
    })
}

/// Even split helper re-exported for callers that lay out v-variants.
pub fn split_even(n: usize, p: usize) -> Vec<usize> {
    even_blocks(n, p, 1).into_iter().map(|b| b.1).collect()
}
