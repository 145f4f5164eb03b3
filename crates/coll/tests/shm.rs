//! The shared-memory path (`Alg::Shm`): teams of threads (one host) run every collective
//! the segment implements × every datatype and operation × in place or not × team sizes
//! 1–8 × sizes 0, 1, 13 elements (uneven), several slots (pipelined chunks) and 4 MiB,
//! blocking, nonblocking and persistent, every byte checked against the reference; the
//! table picks the segment for a local team; many segment collectives in flight at once.

mod common;

use coll::{Alg, Args, Buffer, CollType, DataType, Op, Options};
use common::team::with_team;
use common::*;
use uct::Transport;

fn shm_colls() -> impl Iterator<Item = CollType> {
    CollType::ALL.into_iter().filter(|c| c.accepts(Alg::Shm))
}

/// Every datatype × operation at 13 elements; two pairs at 0, 1 and 70001 elements (the
/// last crosses slot boundaries: pipelined rounds, and per-peer chunks of alltoall).
/// A case on the segment path.
fn shm_case(
    coll: CollType,
    dt_op: (DataType, Op),
    p: usize,
    n: usize,
    ip: bool,
    seed: u64,
) -> Case {
    Case::seeded(coll, Alg::Shm, dt_op, p, n, ip, seed)
}

fn cases(p: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut seed = 1000 * p as u64;
    let mut push = |coll, dt, op, count, in_place| {
        seed += 1;
        out.push(shm_case(coll, (dt, op), p, count, in_place, seed));
    };
    for coll in shm_colls() {
        for in_place in [false, true] {
            if in_place && !has_in_place(coll) {
                continue;
            }
            for dt in DataType::ALL {
                for op in ops_for(coll, dt) {
                    push(coll, dt, op, 13, in_place);
                }
            }
            let pairs = if coll.reduces() {
                [(DataType::Int32, Op::Sum), (DataType::Float64, Op::Avg)]
            } else {
                [(DataType::Int8, Op::Sum), (DataType::Float64, Op::Sum)]
            };
            for count in [0, 1, 70001] {
                for (dt, op) in pairs {
                    push(coll, dt, op, count, in_place);
                }
            }
        }
    }
    out
}

fn run_cases(p: usize, list: &[Case]) -> Vec<String> {
    run_cases_with(p, list, Options::default())
}

/// The segment moves data as for a crowded host (more members than CPUs: slots) or not
/// (single copy) by the team's size against the host's CPUs; these sizes take the other
/// way than a 2-CPU host would pick, so that both forms run at 2 and at 3 members.
fn crowding_for(p: usize) -> Options {
    Options {
        oversubscribed: match p {
            2 => Some(true),
            3 => Some(false),
            _ => None,
        },
        ..Options::default()
    }
}

fn run_cases_with(p: usize, list: &[Case], opts: Options) -> Vec<String> {
    let out = with_team(p, Transport::Shm, opts, |rank, cx, team| {
        let mut bad = Vec::new();
        for (i, c) in list.iter().enumerate() {
            if let Some(e) = run_one(cx, team, rank, i, c) {
                bad.push(e);
            }
        }
        bad
    });
    out.into_iter().flatten().collect()
}

#[test]
fn every_collective_through_the_segment() {
    let only: Option<usize> = std::env::var("COLL_TEST_P")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut failures = Vec::new();
    for p in (1..=8).filter(|p| only.map_or(true, |o| o == *p)) {
        let t0 = std::time::Instant::now();
        let list = cases(p);
        failures.extend(run_cases_with(p, &list, crowding_for(p)));
        eprintln!(
            "shm p={p}: {} collectives in {:?}",
            list.len(),
            t0.elapsed()
        );
    }
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

/// 4 MiB (64 slots of pipelining), sizes that do not divide by the team.
#[test]
fn four_mib_through_the_segment() {
    let big = (4 << 20) / 4 - 3;
    for p in [2, 3] {
        let list: Vec<Case> = shm_colls()
            .enumerate()
            .map(|(i, coll)| {
                let per_rank = matches!(
                    coll,
                    CollType::Allgather
                        | CollType::Allgatherv
                        | CollType::Alltoall
                        | CollType::Gather
                        | CollType::Scatter
                        | CollType::ReduceScatter
                        | CollType::ReduceScatterv
                );
                Case {
                    coll,
                    alg: Alg::Shm,
                    dt: DataType::Float32,
                    op: Op::Sum,
                    p,
                    root: i % p,
                    count: if per_rank { big / p } else { big },
                    in_place: i % 2 == 1 && has_in_place(coll),
                    seed: 77 + i as u64,
                }
            })
            .collect();
        let f = run_cases(p, &list);
        assert!(f.is_empty(), "{f:?}");
    }
}

/// Sizes at and around the segment path's crossovers, each side of each: the inline
/// and mid cells (bytes a member writes in one round: `INLINE`, `MID`), the split
/// allreduce and reduce
/// (`SPLIT_MIN`, and a last chunk of one element, fewer than the members), and
/// cross-memory attach (`CMA_MIN`); in place and not, teams of 2, 3 and 5.
#[test]
fn crossover_edges_through_the_segment() {
    use coll::shm::run::{CMA_MIN, SPLIT_MIN};
    use coll::shm::{slot_bytes, INLINE, MID};
    for p in [2, 3, 5] {
        let mut list = Vec::new();
        let mut push = |coll, dt, op, count, in_place: bool| {
            let seed = 5000 + list.len() as u64;
            let in_place = in_place && has_in_place(coll);
            list.push(shm_case(coll, (dt, op), p, count, in_place, seed));
        };
        for coll in shm_colls() {
            // Alltoall, scatter and reduce_scatter write one block per member a round.
            let per_member = matches!(
                coll,
                CollType::Alltoall | CollType::Scatter | CollType::ReduceScatter
            );
            let edge = if per_member { INLINE / p } else { INLINE };
            let mid = if per_member { MID / p } else { MID };
            for in_place in [false, true] {
                for count in [edge - 1, edge, edge + 1, mid - 1, mid, mid + 1] {
                    push(coll, DataType::Int8, Op::Sum, count, in_place);
                }
                let edge8 = edge / 8;
                let (dt, op) = if coll.reduces() {
                    (DataType::Float64, Op::Avg)
                } else {
                    (DataType::Float64, Op::Sum)
                };
                for count in [edge8, edge8 + 1] {
                    push(coll, dt, op, count, in_place);
                }
                for count in [CMA_MIN - 1, CMA_MIN] {
                    push(coll, DataType::Int8, Op::Max, count, in_place);
                }
            }
        }
        for in_place in [false, true] {
            for (dt, op) in [
                (DataType::Int32, Op::Sum),
                (DataType::Float64, Op::Avg),
                (DataType::Int8, Op::Min),
                (DataType::Float16, Op::Max),
            ] {
                let es = dt.size();
                let one_chunk = slot_bytes(p) / es;
                for count in [
                    SPLIT_MIN / es - 1,
                    SPLIT_MIN / es,
                    SPLIT_MIN / es + 1,
                    one_chunk,
                    one_chunk + 1,
                ] {
                    push(CollType::Allreduce, dt, op, count, in_place);
                    push(CollType::Reduce, dt, op, count, in_place);
                }
            }
        }
        // At 3 members single copy too (a 2-CPU host would take the slots).
        let opts = if p == 3 {
            crowding_for(p)
        } else {
            Options::default()
        };
        let f = run_cases_with(p, &list, opts);
        assert!(f.is_empty(), "p={p}: {} failed:\n{}", f.len(), f.join("\n"));
    }
}

/// An 8-byte allreduce of `rank + 1` over a team of 3 by the table's choice, whose
/// result is checked (6); returns the algorithm the table picked.
fn allreduce_rank_sum(cx: &mut coll::Context, team: coll::Team, rank: usize) -> Alg {
    let src = (rank as u64 + 1).to_ne_bytes();
    let r = cx
        .init(
            team,
            Args::new(CollType::Allreduce)
                .src(Buffer::from_vec(src.to_vec()))
                .dst(Buffer::from_vec(vec![0; 8]))
                .dtype(DataType::Uint64)
                .count(1),
        )
        .unwrap();
    let alg = cx.algorithm(r).unwrap();
    cx.post(r).unwrap();
    cx.wait(r).unwrap();
    let a = cx.finalize(r).unwrap();
    assert_eq!(a.dst.unwrap().into_vec().unwrap(), 6u64.to_ne_bytes());
    alg
}

/// One member with the segment switched off (`UCX_COLL_SHM=n` there only): the team is
/// still formed, nobody keeps a segment (so all members pick the same algorithms), and
/// the collectives run over the network with every byte right. Before, the others
/// waited out the timeout for that member's answer.
#[test]
fn a_member_without_the_segment_takes_the_team_off_it() {
    use common::team::with_team_each;
    let p = 3;
    let cfg = ucp::Config {
        transports: vec![Transport::Shm],
        ..ucp::Config::default()
    };
    let opts = |rank: usize| Options {
        shm: rank != 1,
        timeout: std::time::Duration::from_secs(20),
        ..Options::default()
    };
    let t0 = std::time::Instant::now();
    with_team_each(p, cfg, opts, |rank, cx, team| {
        let forced = cx.run(team, Args::new(CollType::Barrier).alg(Alg::Shm));
        assert_eq!(forced.err(), Some(ucs::Status::Unsupported));
        // The table's choice, for a local team, is not the segment.
        assert_ne!(allreduce_rank_sum(cx, team, rank), Alg::Shm);
        for (i, (coll, alg)) in [
            (CollType::Allreduce, Alg::RecursiveDoubling),
            (CollType::Bcast, Alg::Knomial),
            (CollType::Allgather, Alg::Ring),
        ]
        .into_iter()
        .enumerate()
        {
            let c = Case::seeded(coll, alg, (DataType::Int32, Op::Sum), p, 40_000, false, 90);
            if let Some(e) = run_one(cx, team, rank, i, &c) {
                panic!("rank {rank}: {e}");
            }
        }
    });
    // The team formed without anyone waiting out the timeout.
    assert!(t0.elapsed() < std::time::Duration::from_secs(15));
}

/// A local team takes the segment by itself; not where it has no form (alltoallv), and
/// not with the segment switched off.
#[test]
fn table_picks_the_segment_for_a_local_team() {
    for shm in [true, false] {
        let opts = Options {
            shm,
            ..Options::default()
        };
        with_team(3, Transport::Tcp, opts, |rank, cx, team| {
            assert_eq!(allreduce_rank_sum(cx, team, rank) == Alg::Shm, shm);
            let v = cx
                .init(
                    team,
                    Args::new(CollType::Alltoallv)
                        .src(Buffer::from_vec(vec![rank as u8; 3]))
                        .dst(Buffer::from_vec(vec![0; 3]))
                        .src_v(vec![1; 3], vec![0, 1, 2])
                        .dst_v(vec![1; 3], vec![0, 1, 2])
                        .count(1),
                )
                .unwrap();
            assert_ne!(cx.algorithm(v).unwrap(), Alg::Shm);
            cx.post(v).unwrap();
            cx.wait(v).unwrap();
            let a = cx.finalize(v).unwrap();
            assert_eq!(a.dst.unwrap().into_vec().unwrap(), vec![0, 1, 2]);
            let forced = cx.run(team, Args::new(CollType::Barrier).alg(Alg::Shm));
            assert_eq!(forced.is_ok(), shm, "{forced:?}");
        });
    }
}

/// 30 segment collectives of mixed kinds posted before any wait, completed in reverse
/// order: each takes its rounds in post order.
#[test]
fn many_in_flight_on_the_segment() {
    let p = 4;
    with_team(p, Transport::Shm, Options::default(), |rank, cx, team| {
        let n = 5000usize;
        let reqs: Vec<_> = (0..30u64)
            .map(|i| {
                let a = if i % 2 == 0 {
                    let v: Vec<u8> = (0..n as u64)
                        .flat_map(|k| (k * i + rank as u64).to_ne_bytes())
                        .collect();
                    Args::new(CollType::Allreduce)
                        .src(Buffer::from_vec(v))
                        .dst(Buffer::from_vec(vec![0; 8 * n]))
                        .dtype(DataType::Uint64)
                        .count(n)
                } else {
                    Args::new(CollType::Bcast)
                        .dst(Buffer::from_vec(vec![(rank as u8) ^ (i as u8); n]))
                        .root(i as usize % p)
                        .count(n)
                };
                let r = cx.init(team, a.alg(Alg::Shm)).unwrap();
                cx.post(r).unwrap();
                r
            })
            .collect();
        for (i, r) in reqs.into_iter().enumerate().rev() {
            cx.wait(r).unwrap();
            let got = cx.finalize(r).unwrap().dst.unwrap().into_vec().unwrap();
            let i = i as u64;
            let want: Vec<u8> = if i % 2 == 0 {
                (0..n as u64)
                    .flat_map(|k| (0..p as u64).map(|q| k * i + q).sum::<u64>().to_ne_bytes())
                    .collect()
            } else {
                vec![((i as usize % p) as u8) ^ (i as u8); n]
            };
            assert_eq!(got, want, "collective {i}");
        }
    });
}

/// The hierarchical form on one machine: members cut into host groups of 2 or 3
/// (`host_group_size`), barrier, bcast and allreduce through each group's segment and
/// the network among the group leaders, every byte checked; the table picks it by
/// itself, and the other collectives keep the network algorithms.
#[test]
fn hierarchical_groups() {
    let mut failures = Vec::new();
    for (p, g) in [(2, 1), (3, 2), (4, 2), (5, 2), (6, 3), (7, 3), (8, 3)] {
        let mut list = Vec::new();
        let mut seed = 5000 * p as u64;
        for coll in [CollType::Barrier, CollType::Bcast, CollType::Allreduce] {
            let pairs: &[(DataType, Op)] = if coll.reduces() {
                &[
                    (DataType::Int32, Op::Sum),
                    (DataType::Float64, Op::Avg),
                    (DataType::DoubleInt, Op::Minloc),
                    (DataType::Uint8, Op::Bxor),
                ]
            } else {
                &[(DataType::Int8, Op::Sum)]
            };
            for count in [0, 1, 13, 70001] {
                for &(dt, op) in pairs {
                    for in_place in [false, true] {
                        if in_place && !has_in_place(coll) {
                            continue;
                        }
                        seed += 1;
                        list.push(Case::seeded(
                            coll,
                            Alg::Hier,
                            (dt, op),
                            p,
                            count,
                            in_place,
                            seed,
                        ));
                    }
                }
            }
        }
        let opts = Options {
            host_group_size: g,
            ..Options::default()
        };
        let out = with_team(p, Transport::Shm, opts, |rank, cx, team| {
            let mut bad = Vec::new();
            for (i, c) in list.iter().enumerate() {
                if let Some(e) = run_one(cx, team, rank, i, c) {
                    bad.push(e);
                }
            }
            let mut pick = |coll| {
                let r = cx
                    .init(
                        team,
                        Args::new(coll)
                            .dst(Buffer::from_vec(vec![0; 8 * p]))
                            .src(Buffer::from_vec(vec![0; 8 * p]))
                            .count(8),
                    )
                    .unwrap();
                let a = cx.algorithm(r).unwrap();
                cx.finalize(r).unwrap();
                a
            };
            let want = if g == 1 { None } else { Some(Alg::Hier) };
            assert_eq!(
                Some(pick(CollType::Allreduce)).filter(|&a| a == Alg::Hier),
                want
            );
            assert_ne!(pick(CollType::Allgather), Alg::Shm);
            bad
        });
        failures.extend(out.into_iter().flatten());
    }
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

/// One 8-byte bcast (inline: the root's ring of cells) of `v` from `root`; returns what
/// this member got.
fn bcast8(cx: &mut coll::Context, team: coll::Team, root: usize, rank: usize, v: u64) -> u64 {
    let mut b = if rank == root { v } else { !v }.to_ne_bytes();
    cx.run(
        team,
        Args::new(CollType::Bcast)
            .dst(Buffer::from_mut(&mut b))
            .root(root)
            .count(8)
            .alg(Alg::Shm),
    )
    .unwrap();
    u64::from_ne_bytes(b)
}

/// A bcast of `len` bytes from `root` of a pattern made from `v`; whether this member
/// got it whole.
fn bcast_n(
    cx: &mut coll::Context,
    team: coll::Team,
    root: usize,
    rank: usize,
    v: u64,
    len: usize,
) -> bool {
    let want: Vec<u8> = (0..len as u64).map(|i| (v * 31 + i * 7) as u8).collect();
    let mut b = if rank == root {
        want.clone()
    } else {
        vec![0xee; len]
    };
    cx.run(
        team,
        Args::new(CollType::Bcast)
            .dst(Buffer::from_mut(&mut b))
            .root(root)
            .count(len)
            .alg(Alg::Shm),
    )
    .unwrap();
    b == want
}

/// The rings of cells: the root of bcasts of 8 bytes (inline cells) and of 4 KiB and
/// `MID` bytes (mid cells) completes a ring's length less one of them while the other
/// members have not started any (it leaves each in its ring and goes on); then the
/// others take them all, in order, every byte checked; the next one waits for them.
#[test]
fn bcast_root_runs_ahead_through_the_ring() {
    use coll::shm::{mid_ring_len, ring_len, MID};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    let p = 3;
    let mid = mid_ring_len(p);
    for (len, ring) in [(8, ring_len(p)), (4096, mid), (MID, mid)] {
        let ahead = AtomicUsize::new(0);
        with_team(p, Transport::Shm, Options::default(), |rank, cx, team| {
            let v = |i: usize| 0x5eed_0000_0000 + i as u64;
            let one = |cx: &mut coll::Context, i: usize| {
                if len == 8 {
                    bcast8(cx, team, 0, rank, v(i)) == v(i)
                } else {
                    bcast_n(cx, team, 0, rank, v(i), len)
                }
            };
            if rank == 0 {
                for i in 0..ring - 1 {
                    assert!(one(cx, i));
                    ahead.store(i + 1, Ordering::Release);
                }
                assert!(one(cx, ring - 1));
            } else {
                // The others start only once the root has filled its ring.
                let t0 = Instant::now();
                while ahead.load(Ordering::Acquire) < ring - 1 {
                    assert!(
                        t0.elapsed() < Duration::from_secs(60),
                        "{len} B: the root did not run ahead: {} of {}",
                        ahead.load(Ordering::Acquire),
                        ring - 1
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                for i in 0..ring {
                    assert!(one(cx, i), "{len} B: bcast {i}");
                }
            }
        });
    }
}

/// Inline and mid rounds across several wraps of the rings, with a slow member: bcasts
/// from rotating roots (which run ahead), allreduces and barriers mixed, a member that
/// sleeps now and then, and bursts of more nonblocking bcasts in flight than a ring has
/// cells; every value checked.
#[test]
fn inline_rounds_wrap_the_ring_with_a_slow_member() {
    use std::time::Duration;
    for p in [2, 3] {
        let ring = coll::shm::ring_len(p);
        with_team(p, Transport::Shm, Options::default(), |rank, cx, team| {
            let slow = rank == p - 1;
            for i in 0..3 * ring + 7 {
                if slow && i % 97 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let root = (i / 50) % p;
                let v = (i as u64) << 8 | root as u64;
                assert_eq!(bcast8(cx, team, root, rank, v), v, "p={p} bcast {i}");
                if i % 3 == 0 {
                    // Mid cells, wrapping their shorter ring many times.
                    let len = 100 + i % 4000;
                    assert!(
                        bcast_n(cx, team, root, rank, v, len),
                        "p={p} bcast {i}, {len} B"
                    );
                }
                if i % 31 == 0 {
                    let mine = (i + rank) as u64;
                    let got = cx
                        .run_owned(
                            team,
                            Args::new(CollType::Allreduce)
                                .src(Buffer::from_vec(mine.to_ne_bytes().to_vec()))
                                .dst(Buffer::from_vec(vec![0; 8]))
                                .dtype(DataType::Uint64)
                                .count(1)
                                .alg(Alg::Shm),
                        )
                        .unwrap()
                        .dst
                        .unwrap()
                        .into_vec()
                        .unwrap();
                    let want: u64 = (0..p).map(|q| (i + q) as u64).sum();
                    assert_eq!(got, want.to_ne_bytes(), "p={p} allreduce {i}");
                }
                if i % 45 == 0 {
                    cx.run(team, Args::new(CollType::Barrier).alg(Alg::Shm))
                        .unwrap();
                }
            }
            // More bcasts in flight than a ring holds, from one root, then from another.
            for root in [0, p - 1] {
                let n = ring + 10;
                if slow {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let reqs: Vec<_> = (0..n)
                    .map(|i| {
                        let v = (i as u64) << 16 | 0xb0 | root as u64;
                        let b = if rank == root { v } else { 0 };
                        let a = Args::new(CollType::Bcast)
                            .dst(Buffer::from_vec(b.to_ne_bytes().to_vec()))
                            .root(root)
                            .count(8)
                            .alg(Alg::Shm);
                        let r = cx.init(team, a).unwrap();
                        cx.post(r).unwrap();
                        (r, v)
                    })
                    .collect();
                for (i, (r, v)) in reqs.into_iter().enumerate() {
                    cx.wait(r).unwrap();
                    let got = cx.finalize(r).unwrap().dst.unwrap().into_vec().unwrap();
                    assert_eq!(got, v.to_ne_bytes(), "p={p} root {root} burst {i}");
                }
            }
        });
    }
}
