//! Teams of threads over shm, tcp and udp run every collective with every algorithm at
//! team sizes 1–8, in place and not, blocking (borrowed slices), nonblocking and
//! persistent (posted twice), and check every byte against the reference.

mod common;

use coll::{Alg, CollType, DataType, Op, Options};
use common::team::with_team;
use common::*;
use uct::Transport;

fn cases(p: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut seed = 1u64;
    for coll in CollType::ALL {
        let combos: &[(DataType, Op)] = if coll.reduces() {
            &[
                (DataType::Int32, Op::Sum),
                (DataType::Float64, Op::Max),
                (DataType::Uint8, Op::Bxor),
                (DataType::DoubleInt, Op::Minloc),
                (DataType::Float16, Op::Sum),
            ]
        } else {
            &[(DataType::Int8, Op::Sum), (DataType::Float64, Op::Sum)]
        };
        for &alg in coll.algorithms() {
            for count in [0, 1, 13] {
                for (k, &(dt, op)) in combos.iter().enumerate() {
                    for in_place in [false, true] {
                        if in_place && !has_in_place(coll) {
                            continue;
                        }
                        // Every combination at one size, the first two elsewhere.
                        if count != 13 && k > 1 {
                            continue;
                        }
                        seed += 1;
                        out.push(Case::seeded(coll, alg, (dt, op), p, count, in_place, seed));
                    }
                }
            }
        }
    }
    out
}

fn all_collectives(tl: Transport) {
    all_collectives_at(tl, &[1, 2, 3, 4, 5, 6, 7, 8]);
}

fn all_collectives_at(tl: Transport, sizes: &[usize]) {
    let mut failures = Vec::new();
    let mut total = 0;
    let only: Option<usize> = std::env::var("COLL_TEST_P")
        .ok()
        .and_then(|v| v.parse().ok());
    for p in sizes
        .iter()
        .copied()
        .filter(|p| only.map_or(true, |o| o == *p))
    {
        let t0 = std::time::Instant::now();
        let list = cases(p);
        total += list.len() * p;
        let mut opts = Options::default();
        if let Ok(v) = std::env::var("COLL_TEST_OVERSUB") {
            opts.oversubscribed = Some(v == "1");
        }
        let out = with_team(p, tl, opts, |rank, cx, team| {
            let mut bad = Vec::new();
            for (i, c) in list.iter().enumerate() {
                if let Some(e) = run_one(cx, team, rank, i, c) {
                    bad.push(e);
                }
            }
            bad
        });
        failures.extend(out.into_iter().flatten());
        eprintln!(
            "{tl:?} p={p}: {} collectives in {:?}",
            list.len(),
            t0.elapsed()
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {total} failed:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

#[test]
fn every_collective_over_shm() {
    all_collectives(Transport::Shm);
}

#[test]
fn every_collective_over_tcp() {
    all_collectives(Transport::Tcp);
}

/// udp (reliability in software).
#[test]
fn every_collective_over_udp() {
    all_collectives(Transport::Udp);
}

/// 4 MiB vectors (sizes not dividing by the team) through rendezvous.
fn large(tl: Transport) {
    let big = (4 << 20) / 4 - 3;
    let list = [
        (CollType::Allreduce, Alg::Ring, big),
        (CollType::Allreduce, Alg::Rabenseifner, big),
        (CollType::Bcast, Alg::ScatterAllgather, big),
        (CollType::Reduce, Alg::ReduceScatterGather, big),
        (CollType::Alltoall, Alg::Pairwise, big / 3),
        (CollType::Allgather, Alg::Ring, big / 3),
        (CollType::Alltoall, Alg::Rma, big / 3),
    ];
    let p = 3;
    let out = with_team(p, tl, Options::default(), |rank, cx, team| {
        let mut bad = Vec::new();
        for (i, &(coll, alg, count)) in list.iter().enumerate() {
            let c = Case {
                coll,
                alg,
                dt: DataType::Float32,
                op: Op::Sum,
                p,
                root: i % p,
                count,
                in_place: i % 2 == 1,
                seed: 99 + i as u64,
            };
            if let Some(e) = run_one(cx, team, rank, 1, &c) {
                bad.push(e);
            }
        }
        bad
    });
    let f: Vec<String> = out.into_iter().flatten().collect();
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn four_mib_over_shm() {
    large(Transport::Shm);
}

#[test]
fn four_mib_over_tcp() {
    large(Transport::Tcp);
}

/// A measurement, not a test (`--ignored`): barriers of 8 ranks on this machine's cores,
/// waiting as if oversubscribed or not.
#[test]
#[ignore]
fn barrier_speed() {
    for o in [false, true] {
        let opts = Options {
            oversubscribed: Some(o),
            ..Options::default()
        };
        let t0 = std::time::Instant::now();
        with_team(8, Transport::Shm, opts, |_, cx, team| {
            for _ in 0..200 {
                cx.barrier(team).unwrap();
            }
        });
        eprintln!("oversubscribed {o}: {:?} per barrier", t0.elapsed() / 200);
    }
}
