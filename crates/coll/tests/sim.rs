//! Every collective × algorithm × datatype × operation × in place or not × team size 1–8
//! × size, run by the in-memory simulator and checked byte for byte against the
//! reference (tests/common). The simulator checks the schedules too: matching lengths, no
//! deadlock, no message left over, no overlapping transfers.

mod common;

use coll::sim::{self, Rank};
use coll::{plan, CollType, DataType};
use common::*;

fn run_case(c: &Case) -> Result<(), String> {
    run_case_radix(c, 4)
}

fn run_case_radix(c: &Case, radix: usize) -> Result<(), String> {
    let io = make(c);
    let mut ranks = Vec::new();
    for (r, x) in io.iter().enumerate() {
        let a = args(c, x);
        let pl = plan(&a, r, c.p, None, radix).map_err(|e| format!("plan rank {r}: {e:?}"))?;
        ranks.push(Rank {
            schedule: pl.schedule,
            src: x.src.clone().unwrap_or_default(),
            dst: x.dst.clone().unwrap_or_default(),
        });
    }
    sim::run(&mut ranks, c.dt, c.op).map_err(|e| format!("sim: {e:?}"))?;
    for (r, (x, rk)) in io.iter().zip(&ranks).enumerate() {
        if let Some(want) = &x.expect {
            if let Some(d) = diff(&rk.dst, want) {
                return Err(format!("rank {r}: {d}"));
            }
        }
    }
    Ok(())
}

fn matrix(colls: &[CollType], counts: &[usize], dts: &[DataType]) -> usize {
    let mut n = 0;
    let mut failures = Vec::new();
    for &coll in colls {
        for &alg in coll.algorithms() {
            for p in 1..=8 {
                for &count in counts {
                    for &dt in dts {
                        for op in ops_for(coll, dt) {
                            for in_place in [false, true] {
                                if in_place && !has_in_place(coll) {
                                    continue;
                                }
                                let seed = (n as u64).wrapping_mul(0x9e37) ^ 0x5eed;
                                let c = Case {
                                    coll,
                                    alg,
                                    dt,
                                    op,
                                    p,
                                    root: (seed as usize / 7) % p,
                                    count,
                                    in_place,
                                    seed,
                                };
                                n += 1;
                                if let Err(e) = run_case(&c) {
                                    failures.push(format!("{c:?}: {e}"));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} cases failed, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    n
}

#[test]
fn reductions_every_dtype_and_op() {
    let n = matrix(
        &[
            CollType::Allreduce,
            CollType::Reduce,
            CollType::ReduceScatter,
            CollType::ReduceScatterv,
        ],
        &[0, 1, 7, 19],
        &DataType::ALL,
    );
    eprintln!("{n} cases");
}

#[test]
fn data_movement_every_dtype() {
    let n = matrix(
        &[
            CollType::Barrier,
            CollType::Bcast,
            CollType::Allgather,
            CollType::Allgatherv,
            CollType::Alltoall,
            CollType::Alltoallv,
            CollType::Gather,
            CollType::Gatherv,
            CollType::Scatter,
            CollType::Scatterv,
        ],
        &[0, 1, 5, 33],
        &DataType::ALL,
    );
    eprintln!("{n} cases");
}

/// Up to 4 MiB for a few, with sizes that do not divide by the team size.
#[test]
fn large_vectors() {
    use coll::Op;
    let big = (4 << 20) / 4 - 3;
    let mut failures = Vec::new();
    let cases = [
        (CollType::Allreduce, coll::Alg::Ring, 5, big),
        (CollType::Allreduce, coll::Alg::Rabenseifner, 6, big),
        (
            CollType::Allreduce,
            coll::Alg::RecursiveDoubling,
            3,
            big / 4,
        ),
        (CollType::Bcast, coll::Alg::ScatterAllgather, 7, big),
        (CollType::Bcast, coll::Alg::Knomial, 5, big),
        (CollType::Reduce, coll::Alg::ReduceScatterGather, 6, big),
        (CollType::Reduce, coll::Alg::Knomial, 3, big / 4),
        (CollType::ReduceScatter, coll::Alg::Ring, 4, big / 4),
        (CollType::Allgather, coll::Alg::Ring, 4, big / 4),
        (CollType::Allgather, coll::Alg::Bruck, 3, big / 3),
        (CollType::Alltoall, coll::Alg::Pairwise, 8, big / 8),
        (CollType::Alltoall, coll::Alg::Direct, 3, big / 3),
        (CollType::Alltoall, coll::Alg::Rma, 5, big / 5),
    ];
    for (coll, alg, p, count) in cases {
        let c = Case {
            coll,
            alg,
            dt: DataType::Float32,
            op: Op::Sum,
            p,
            root: p - 1,
            count,
            in_place: false,
            seed: 42,
        };
        if let Err(e) = run_case(&c) {
            failures.push(format!("{coll:?} {alg}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Larger teams (up to 33, powers of two and their neighbours) and other tree radices,
/// for every collective and algorithm, with two datatype/op pairs.
#[test]
fn larger_teams_and_radices() {
    use coll::Op;
    let mut failures = Vec::new();
    let mut n = 0;
    for coll in CollType::ALL {
        for &alg in coll.algorithms() {
            for p in [9, 12, 15, 16, 17, 31, 33] {
                for (count, radix) in [(0, 2), (1, 3), (7, 4), (40, 5)] {
                    for (dt, op) in [(DataType::Int32, Op::Sum), (DataType::Float64, Op::Max)] {
                        for in_place in [false, true] {
                            if in_place && !has_in_place(coll) {
                                continue;
                            }
                            n += 1;
                            let c = Case {
                                coll,
                                alg,
                                dt,
                                op,
                                p,
                                root: (n * 7) % p,
                                count,
                                in_place,
                                seed: n as u64,
                            };
                            if let Err(e) = run_case_radix(&c, radix) {
                                failures.push(format!("{c:?} radix {radix}: {e}"));
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} failed:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    eprintln!("{n} cases");
}
