//! Collective types, algorithm names, the selection table and the `UCX_COLL_*` variables.
//!
//! The table (its reasoning is in docs/collectives.md) picks an algorithm by collective,
//! team size and message size; `UCX_COLL_<NAME>_ALG=<alg>` forces one for a collective,
//! and [`crate::Args::alg`] forces one for a single call.

use ucs::config::Var;
use ucs::{Result, Status};

/// A collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollType {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    /// MPI_Reduce_scatter_block: `count` elements per rank.
    ReduceScatter,
    /// MPI_Reduce_scatter: `counts[i]` elements for rank `i`.
    ReduceScatterv,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
}

impl CollType {
    pub const ALL: [CollType; 14] = [
        CollType::Barrier,
        CollType::Bcast,
        CollType::Reduce,
        CollType::Allreduce,
        CollType::Allgather,
        CollType::Allgatherv,
        CollType::Alltoall,
        CollType::Alltoallv,
        CollType::ReduceScatter,
        CollType::ReduceScatterv,
        CollType::Gather,
        CollType::Gatherv,
        CollType::Scatter,
        CollType::Scatterv,
    ];

    /// The name used in `UCX_COLL_<NAME>_ALG`.
    pub const fn env_name(self) -> &'static str {
        match self {
            CollType::Barrier => "BARRIER",
            CollType::Bcast => "BCAST",
            CollType::Reduce => "REDUCE",
            CollType::Allreduce => "ALLREDUCE",
            CollType::Allgather => "ALLGATHER",
            CollType::Allgatherv => "ALLGATHERV",
            CollType::Alltoall => "ALLTOALL",
            CollType::Alltoallv => "ALLTOALLV",
            CollType::ReduceScatter => "REDUCE_SCATTER",
            CollType::ReduceScatterv => "REDUCE_SCATTERV",
            CollType::Gather => "GATHER",
            CollType::Gatherv => "GATHERV",
            CollType::Scatter => "SCATTER",
            CollType::Scatterv => "SCATTERV",
        }
    }

    /// True for the collectives that reduce.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            CollType::Reduce
                | CollType::Allreduce
                | CollType::ReduceScatter
                | CollType::ReduceScatterv
        )
    }

    /// Whether `alg` implements this collective: one of [`CollType::algorithms`] (the
    /// network schedules), or the shared-memory path ([`Alg::Shm`]) where it exists.
    pub fn accepts(self, alg: Alg) -> bool {
        if alg == Alg::Shm {
            crate::shm::run::supports(self)
        } else if alg == Alg::Hier {
            crate::shm::hier::supports(self)
        } else {
            self.algorithms().contains(&alg)
        }
    }

    /// The network algorithms (schedules) that implement this collective; the
    /// shared-memory path is [`Alg::Shm`] (see [`CollType::accepts`]).
    pub fn algorithms(self) -> &'static [Alg] {
        use Alg::*;
        match self {
            CollType::Barrier => &[Dissemination],
            CollType::Bcast => &[Knomial, ScatterAllgather],
            CollType::Reduce => &[Knomial, ReduceScatterGather],
            CollType::Allreduce => &[RecursiveDoubling, Rabenseifner, Ring],
            CollType::Allgather | CollType::Allgatherv => &[RecursiveDoubling, Bruck, Ring],
            CollType::Alltoall => &[Bruck, Direct, Pairwise, Rma],
            CollType::Alltoallv => &[Direct, Pairwise],
            CollType::ReduceScatter | CollType::ReduceScatterv => &[Ring],
            CollType::Gather | CollType::Gatherv | CollType::Scatter | CollType::Scatterv => {
                &[Linear]
            }
        }
    }
}

/// An algorithm, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alg {
    Dissemination,
    Knomial,
    ScatterAllgather,
    ReduceScatterGather,
    RecursiveDoubling,
    Rabenseifner,
    Ring,
    Bruck,
    Direct,
    Pairwise,
    Linear,
    /// Zero-copy direct alltoall: puts into the receivers' buffers.
    Rma,
    /// Shared memory: one segment per team, flags and slots (all members on one host).
    Shm,
    /// Hierarchical: the segment inside each host, the network among host leaders.
    Hier,
}

impl Alg {
    pub const ALL: [Alg; 14] = [
        Alg::Dissemination,
        Alg::Knomial,
        Alg::ScatterAllgather,
        Alg::ReduceScatterGather,
        Alg::RecursiveDoubling,
        Alg::Rabenseifner,
        Alg::Ring,
        Alg::Bruck,
        Alg::Direct,
        Alg::Pairwise,
        Alg::Linear,
        Alg::Rma,
        Alg::Shm,
        Alg::Hier,
    ];

    /// The name accepted by `UCX_COLL_*_ALG`.
    pub const fn name(self) -> &'static str {
        match self {
            Alg::Dissemination => "dissemination",
            Alg::Knomial => "knomial",
            Alg::ScatterAllgather => "scatter_allgather",
            Alg::ReduceScatterGather => "reduce_scatter_gather",
            Alg::RecursiveDoubling => "recursive_doubling",
            Alg::Rabenseifner => "rabenseifner",
            Alg::Ring => "ring",
            Alg::Bruck => "bruck",
            Alg::Direct => "direct",
            Alg::Pairwise => "pairwise",
            Alg::Linear => "linear",
            Alg::Rma => "rma",
            Alg::Shm => "shm",
            Alg::Hier => "hier",
        }
    }

    /// The algorithm named `s` (case-insensitive; `rd` for recursive doubling).
    pub fn from_name(s: &str) -> Option<Alg> {
        let s = s.trim().to_ascii_lowercase();
        if s == "rd" {
            return Some(Alg::RecursiveDoubling);
        }
        Alg::ALL.into_iter().find(|a| a.name() == s)
    }
}

impl std::fmt::Display for Alg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

macro_rules! alg_var {
    ($name:literal) => {
        Var {
            name: concat!("COLL_", $name, "_ALG"),
            default: "auto",
            doc: concat!(
                "Algorithm of ",
                $name,
                " (auto: the selection table; else a name listed in docs/collectives.md)"
            ),
        }
    };
}

/// The variables of this crate (registered for `rucx-info -c` and the unknown-variable
/// check when a [`crate::Context`] is created).
pub static COLL_VARS: &[Var] = &[
    alg_var!("BARRIER"),
    alg_var!("BCAST"),
    alg_var!("REDUCE"),
    alg_var!("ALLREDUCE"),
    alg_var!("ALLGATHER"),
    alg_var!("ALLGATHERV"),
    alg_var!("ALLTOALL"),
    alg_var!("ALLTOALLV"),
    alg_var!("REDUCE_SCATTER"),
    alg_var!("REDUCE_SCATTERV"),
    alg_var!("GATHER"),
    alg_var!("GATHERV"),
    alg_var!("SCATTER"),
    alg_var!("SCATTERV"),
    Var {
        name: "COLL_OVERSUBSCRIBED",
        default: "auto",
        doc: "Wait by sleeping on the worker's wakeup after a short spin (y), by spinning \
              longer (n), or decide from ranks per host against cores (auto); y also \
              moves a team segment's data as on a crowded host (slots), n as on an \
              uncrowded one (single copy)",
    },
    Var {
        name: "COLL_TIMEOUT",
        default: "120s",
        doc: "A collective that makes no progress for this long fails with TimedOut",
    },
    Var {
        name: "COLL_SHM",
        default: "y",
        doc: "Use a shared segment per team for the members on one host (set up at team \
              creation; n: network algorithms only)",
    },
    Var {
        name: "COLL_HOST_GROUP_SIZE",
        default: "0",
        doc: "Treat every k consecutive members of a host as a host of their own (0: off; \
              to test the hierarchical form on one machine)",
    },
    Var {
        name: "COLL_KNOMIAL_RADIX",
        default: "4",
        doc: "Radix of the k-nomial trees of bcast and reduce",
    },
];

/// The algorithms forced through the environment, by collective.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forced(pub Vec<(CollType, Alg)>);

impl Forced {
    /// Reads `UCX_COLL_<NAME>_ALG` for every collective. An unknown name, or one that does
    /// not implement that collective, is an error.
    pub fn from_env() -> Result<Forced> {
        let mut out = Vec::new();
        for c in CollType::ALL {
            let var = format!("UCX_COLL_{}_ALG", c.env_name());
            let Ok(v) = std::env::var(&var) else { continue };
            if v.trim().eq_ignore_ascii_case("auto") || v.trim().is_empty() {
                continue;
            }
            match Alg::from_name(&v).filter(|&a| c.accepts(a)) {
                Some(a) => out.push((c, a)),
                None => {
                    tracing::error!("{var}={v}: not an algorithm of {c:?}");
                    return Err(Status::InvalidParam);
                }
            }
        }
        Ok(Forced(out))
    }

    /// The forced algorithm of `c`.
    pub fn get(&self, c: CollType) -> Option<Alg> {
        self.0.iter().find(|x| x.0 == c).map(|x| x.1)
    }
}

/// The topology rule of the table, before [`select`]: `Some(Alg::Shm)` when the whole
/// team shares one segment and the segment path implements `c` (faster than the network
/// algorithms in 20 of 21 measured cases at 2 ranks, 8 B to 1 MiB; docs/collectives.md).
///
/// For a team that spans hosts with at least one host holding several members
/// (`shared_hosts`), the hierarchical form where it exists.
pub fn select_local(c: CollType, whole_team_local: bool, shared_hosts: bool) -> Option<Alg> {
    if whole_team_local && crate::shm::run::supports(c) {
        Some(Alg::Shm)
    } else if !whole_team_local && shared_hosts && crate::shm::hier::supports(c) {
        Some(Alg::Hier)
    } else {
        None
    }
}

/// The selection table: the algorithm for `c` over `p` ranks moving `bytes` (the vector
/// of reductions and bcast, the total of the gathers, one block of alltoall), where
/// `uniform` says all blocks have one size. The crossovers up to 8 ranks were measured
/// (`scripts/bench-coll-algs`, docs/collectives.md); beyond 8 ranks, and where the
/// measurements disagreed, they come from the cost model.
pub fn select(c: CollType, p: usize, bytes: usize, uniform: bool) -> Alg {
    use Alg::*;
    match c {
        CollType::Barrier => Dissemination,
        // Measured up to 8 ranks: the tree won at every size.
        CollType::Bcast if p > 8 && bytes >= 32 << 10 => ScatterAllgather,
        CollType::Bcast => Knomial,
        CollType::Reduce if p > 8 && bytes >= 64 << 10 => ReduceScatterGather,
        CollType::Reduce => Knomial,
        CollType::Allreduce if p == 2 => {
            if bytes < 1 << 20 {
                RecursiveDoubling
            } else {
                Ring
            }
        }
        CollType::Allreduce if bytes < 16 << 10 => RecursiveDoubling,
        CollType::Allreduce if bytes < 128 << 10 => Ring,
        CollType::Allreduce if bytes < 1 << 20 => Rabenseifner,
        CollType::Allreduce => Ring,
        CollType::Allgather | CollType::Allgatherv if p > 4 && bytes < 16 << 10 => {
            if p.is_power_of_two() {
                RecursiveDoubling
            } else {
                Bruck
            }
        }
        CollType::Allgather | CollType::Allgatherv => Ring,
        CollType::Alltoall if uniform && p >= 4 && bytes <= 512 => Bruck,
        CollType::Alltoall | CollType::Alltoallv if bytes < 8 << 10 => Direct,
        CollType::Alltoall | CollType::Alltoallv => Pairwise,
        CollType::ReduceScatter | CollType::ReduceScatterv => Ring,
        CollType::Gather | CollType::Gatherv | CollType::Scatter | CollType::Scatterv => Linear,
    }
}
