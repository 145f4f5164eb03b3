//! Team splits, forced algorithms, the selection table, and many collectives in flight
//! on one team at once.

mod common;

use coll::select::Forced;
use coll::{select, Alg, Args, Buffer, CollType, DataType, Op, Options};
use common::team::with_team;
use uct::Transport;

fn ints(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// World of 7 split by rank parity with keys that reverse the order; each half runs an
/// allreduce and an allgather; a member with no color gets no team; the world still works.
#[test]
fn split_by_color_and_key() {
    let p = 7;
    let out = with_team(p, Transport::Shm, Options::default(), |rank, cx, world| {
        let color = (rank != 6).then_some((rank % 2) as u32);
        let sub = cx.team_split(world, color, -(rank as i64)).unwrap();
        let Some(sub) = sub else {
            assert_eq!(rank, 6);
            return;
        };
        let members: Vec<usize> = (0..6).filter(|r| r % 2 == rank % 2).rev().collect();
        assert_eq!(cx.size(sub).unwrap(), members.len());
        assert_eq!(members[cx.rank(sub).unwrap()], rank);
        let src = ints(&[rank as i64, 1]);
        let mut dst = vec![0u8; 16];
        cx.run(
            sub,
            Args::new(CollType::Allreduce)
                .src(Buffer::from_slice(&src))
                .dst(Buffer::from_mut(&mut dst))
                .dtype(DataType::Int64)
                .op(Op::Sum)
                .count(2),
        )
        .unwrap();
        let sum: i64 = members.iter().map(|&r| r as i64).sum();
        assert_eq!(dst, ints(&[sum, members.len() as i64]));
        let mine = ints(&[rank as i64]);
        let mut all = vec![0u8; 8 * members.len()];
        cx.run(
            sub,
            Args::new(CollType::Allgather)
                .src(Buffer::from_slice(&mine))
                .dst(Buffer::from_mut(&mut all))
                .dtype(DataType::Int64)
                .count(1),
        )
        .unwrap();
        let want: Vec<i64> = members.iter().map(|&r| r as i64).collect();
        assert_eq!(all, ints(&want));
        cx.team_destroy(sub).unwrap();
    });
    assert_eq!(out.len(), p);
}

/// Several collectives posted before any is waited for complete independently (each has
/// its own sequence number in its tags).
#[test]
fn many_in_flight() {
    let p = 5;
    with_team(p, Transport::Tcp, Options::default(), |rank, cx, team| {
        let reqs: Vec<_> = (0..20)
            .map(|i| {
                let a = Args::new(CollType::Allreduce)
                    .src(Buffer::from_vec(ints(&[rank as i64 * i, i])))
                    .dst(Buffer::from_vec(vec![0; 16]))
                    .dtype(DataType::Int64)
                    .op(Op::Sum)
                    .count(2)
                    .alg([Alg::Ring, Alg::RecursiveDoubling, Alg::Rabenseifner][i as usize % 3]);
                let r = cx.init(team, a).unwrap();
                cx.post(r).unwrap();
                r
            })
            .collect();
        for (i, r) in reqs.into_iter().enumerate().rev() {
            cx.wait(r).unwrap();
            let a = cx.finalize(r).unwrap();
            let i = i as i64;
            let want = ints(&[(0..p as i64).sum::<i64>() * i, i * p as i64]);
            assert_eq!(a.dst.unwrap().into_vec().unwrap(), want);
        }
    });
}

/// `Options::forced` (what `UCX_COLL_<NAME>_ALG` sets) beats the table; a per-call
/// algorithm beats both.
#[test]
fn forced_algorithms() {
    let opts = Options {
        forced: Forced(vec![(CollType::Allreduce, Alg::Ring)]),
        ..Options::default()
    };
    with_team(3, Transport::Shm, opts, |rank, cx, team| {
        let mk = || {
            Args::new(CollType::Allreduce)
                .src(Buffer::from_vec(ints(&[rank as i64])))
                .dst(Buffer::from_vec(vec![0; 8]))
                .dtype(DataType::Int64)
                .count(1)
        };
        let r = cx.init(team, mk()).unwrap();
        assert_eq!(cx.algorithm(r).unwrap(), Alg::Ring);
        // Not posted yet: nothing to test or wait for.
        assert!(cx.test(r).is_err());
        assert!(cx.wait(r).is_err());
        cx.post(r).unwrap();
        // Posted again while running: refused.
        assert!(cx.post(r).is_err() || cx.test(r).unwrap());
        cx.wait(r).unwrap();
        assert_eq!(
            cx.finalize(r).unwrap().dst.unwrap().into_vec().unwrap(),
            ints(&[3])
        );
        let r = cx.init(team, mk().alg(Alg::Rabenseifner)).unwrap();
        assert_eq!(cx.algorithm(r).unwrap(), Alg::Rabenseifner);
        cx.post(r).unwrap();
        cx.wait(r).unwrap();
        cx.finalize(r).unwrap();
        // An algorithm of another collective is refused.
        assert!(cx.init(team, mk().alg(Alg::Bruck)).is_err());
    });
}

#[test]
fn table_and_names() {
    for a in Alg::ALL {
        assert_eq!(Alg::from_name(a.name()), Some(a));
        assert_eq!(Alg::from_name(&a.name().to_uppercase()), Some(a));
    }
    assert_eq!(Alg::from_name("rd"), Some(Alg::RecursiveDoubling));
    assert_eq!(Alg::from_name("nope"), None);
    for c in CollType::ALL {
        for p in 1..=64 {
            for bytes in [0, 8, 4096, 65536, 1 << 20, 16 << 20] {
                for uniform in [true, false] {
                    let a = select(c, p, bytes, uniform);
                    assert!(c.algorithms().contains(&a), "{c:?} {p} {bytes}: {a}");
                    if !uniform && matches!(c, CollType::Alltoall | CollType::Alltoallv) {
                        assert_ne!(a, Alg::Bruck);
                    }
                }
            }
        }
    }
    assert_eq!(
        select(CollType::Allreduce, 8, 8, true),
        Alg::RecursiveDoubling
    );
    assert_eq!(select(CollType::Allreduce, 8, 4 << 20, true), Alg::Ring);
    assert_eq!(select(CollType::Alltoall, 8, 8, true), Alg::Bruck);
    assert_eq!(select(CollType::Alltoall, 8, 1 << 20, true), Alg::Pairwise);
    // The measured crossovers (docs/collectives.md, scripts/bench-coll-algs).
    assert_eq!(select(CollType::Alltoall, 4, 512, true), Alg::Bruck);
    assert_eq!(select(CollType::Alltoall, 4, 513, true), Alg::Direct);
    assert_eq!(select(CollType::Alltoall, 3, 8, true), Alg::Direct);
    assert_eq!(
        select(CollType::Allreduce, 2, 512 << 10, true),
        Alg::RecursiveDoubling
    );
    assert_eq!(select(CollType::Allreduce, 4, 32 << 10, true), Alg::Ring);
    assert_eq!(
        select(CollType::Allreduce, 4, 256 << 10, true),
        Alg::Rabenseifner
    );
    assert_eq!(select(CollType::Bcast, 8, 1 << 20, true), Alg::Knomial);
    assert_eq!(
        select(CollType::Bcast, 9, 1 << 20, true),
        Alg::ScatterAllgather
    );
    assert_eq!(select(CollType::Reduce, 8, 1 << 20, true), Alg::Knomial);
    assert_eq!(select(CollType::Allgather, 4, 64, true), Alg::Ring);
    assert_eq!(
        select(CollType::Allgather, 8, 64, true),
        Alg::RecursiveDoubling
    );
}

/// Bad arguments are errors, not panics: short buffers, roots out of range, ops a type
/// does not have, a read-only destination, counts of the wrong length.
#[test]
fn bad_arguments() {
    with_team(2, Transport::Shm, Options::default(), |_, cx, team| {
        let e = |cx: &mut coll::Context, a: Args<'static>| cx.init(team, a).is_err();
        let base = || {
            Args::new(CollType::Allreduce)
                .dtype(DataType::Int32)
                .count(4)
        };
        assert!(e(
            cx,
            base()
                .src(Buffer::from_vec(vec![0; 15]))
                .dst(Buffer::from_vec(vec![0; 16]))
        ));
        assert!(e(cx, base().src(Buffer::from_vec(vec![0; 16]))));
        assert!(e(
            cx,
            base()
                .src(Buffer::from_vec(vec![0; 16]))
                .dst(Buffer::from_vec(vec![0; 16]))
                .root(2)
        ));
        assert!(e(
            cx,
            base()
                .dtype(DataType::Float32)
                .op(Op::Band)
                .src(Buffer::from_vec(vec![0; 16]))
                .dst(Buffer::from_vec(vec![0; 16]))
        ));
        assert!(e(
            cx,
            Args::new(CollType::Allgatherv)
                .src(Buffer::from_vec(vec![0; 4]))
                .dst(Buffer::from_vec(vec![0; 16]))
                .dst_v(vec![1], vec![0])
        ));
        let ro = [0u8; 16];
        let src = [0u8; 16];
        assert!(cx
            .run(
                team,
                base()
                    .src(Buffer::from_slice(&src))
                    .dst(Buffer::from_slice(&ro))
            )
            .is_err());
    });
}

/// The zero-copy alltoall on one buffer again and again (the key goes once, then the
/// cached one is used), on a new buffer, and back on the first.
#[test]
fn rma_alltoall_buffers_come_back() {
    let p = 4;
    with_team(p, Transport::Shm, Options::default(), |rank, cx, team| {
        let n = 3;
        let src: Vec<i64> = (0..p * n).map(|i| (rank * 100 + i) as i64).collect();
        let want: Vec<i64> = (0..p)
            .flat_map(|q| (0..n).map(move |k| (q * 100 + rank * n + k) as i64))
            .collect();
        let src = ints(&src);
        let mut a = vec![0u8; 8 * p * n];
        let mut b = vec![0u8; 8 * p * n];
        for round in 0..6 {
            let dst = if round == 3 { &mut b } else { &mut a };
            dst.fill(0);
            cx.run(
                team,
                Args::new(CollType::Alltoall)
                    .src(Buffer::from_slice(&src))
                    .dst(Buffer::from_mut(dst))
                    .dtype(DataType::Int64)
                    .count(n)
                    .alg(Alg::Rma),
            )
            .unwrap();
            assert_eq!(*dst, ints(&want), "round {round}");
        }
    });
}

/// A member that finalizes a collective it posted without waiting for it: the others'
/// collective ends too (with an error or, if everything they needed arrived, with
/// success), nothing hangs, and that member's team is broken afterwards.
#[test]
fn abandoned_collective_ends_everywhere() {
    let p = 3;
    let n = 512 << 10;
    let out = with_team(p, Transport::Tcp, Options::default(), |rank, cx, team| {
        let a = Args::new(CollType::Allgather)
            .src(Buffer::from_vec(vec![rank as u8; n]))
            .dst(Buffer::from_vec(vec![0; n * p]))
            .count(n)
            .alg(Alg::Ring);
        let r = cx.init(team, a).unwrap();
        cx.post(r).unwrap();
        if rank == 0 {
            cx.finalize(r).unwrap();
            assert!(cx.team_failed(team).unwrap().is_some());
            assert!(cx.barrier(team).is_err());
            return None;
        }
        let res = cx.wait(r);
        cx.finalize(r).unwrap();
        Some(res)
    });
    // The ring's first receive at rank 1 is from rank 0: it cannot have everything.
    assert!(matches!(out[1], Some(Err(_))), "{out:?}");
}

/// The hybrid alltoall's shape: tcp for the first k peers a rank meets, udp beyond
/// (`UCX_TCP_MAX_EPS=k`), under pairwise and direct, data checked.
#[test]
fn hybrid_tcp_udp_alltoall() {
    let p = 5;
    let cfg = ucp::Config {
        transports: vec![Transport::Tcp, Transport::Udp],
        tcp_max_eps: 2,
        ..ucp::Config::default()
    };
    common::team::with_team_cfg(p, cfg, Options::default(), |rank, cx, team| {
        let n = 700;
        let src: Vec<i64> = (0..p * n).map(|i| (rank * 10_000 + i) as i64).collect();
        let want: Vec<i64> = (0..p)
            .flat_map(|q| (0..n).map(move |k| (q * 10_000 + rank * n + k) as i64))
            .collect();
        let src = ints(&src);
        for alg in [Alg::Pairwise, Alg::Direct] {
            let mut dst = vec![0u8; 8 * p * n];
            cx.run(
                team,
                Args::new(CollType::Alltoall)
                    .src(Buffer::from_slice(&src))
                    .dst(Buffer::from_mut(&mut dst))
                    .dtype(DataType::Int64)
                    .count(n)
                    .alg(alg),
            )
            .unwrap();
            assert_eq!(dst, ints(&want), "{alg}");
        }
        // Which transport each peer got: tcp for rank+1 and rank+2, udp beyond.
        let tls: Vec<_> = (1..p)
            .map(|i| {
                let ep = cx.endpoint(team, (rank + i) % p).unwrap().unwrap();
                cx.worker().ep_transport(ep).unwrap()
            })
            .collect();
        assert_eq!(
            tls,
            [
                Some(Transport::Tcp),
                Some(Transport::Tcp),
                Some(Transport::Udp),
                Some(Transport::Udp)
            ],
            "rank {rank}"
        );
    });
}

/// The census at team creation counts the members that share a member's CPUs: threads
/// of one process all do (whatever their transport), so each counts the whole team, and
/// a team of more members than the host's CPUs makes waits sleep early.
#[test]
fn census_counts_members_on_the_same_cpus() {
    for (p, tl) in [
        (3, Transport::Tcp),
        (2, Transport::Udp),
        (1, Transport::Tcp),
    ] {
        let cores = coll::context::cores();
        with_team(p, tl, Options::default(), |_rank, cx, team| {
            assert_eq!(cx.sharing_cpus(team).unwrap(), p, "{tl:?}");
            if p > cores {
                assert!(cx.is_oversubscribed());
            }
        });
    }
}

/// A member that drops its context with a collective running: the others' collective
/// ends with an error instead of waiting for the timeout.
#[test]
fn context_dropped_mid_collective() {
    let p = 3;
    let out = with_team(p, Transport::Shm, Options::default(), |rank, cx, team| {
        // Everyone has its endpoints before rank 0 goes.
        cx.barrier(team).unwrap();
        let a = Args::new(CollType::Allgather)
            .src(Buffer::from_vec(vec![rank as u8; 1 << 20]))
            .dst(Buffer::from_vec(vec![0; p << 20]))
            .count(1 << 20)
            .alg(Alg::Ring);
        if rank == 0 {
            // Posted and left running: the harness then drops this context.
            let r = cx.init(team, a).unwrap();
            cx.post(r).unwrap();
            return None;
        }
        let r = cx.init(team, a).unwrap();
        cx.post(r).unwrap();
        let res = cx.wait(r);
        cx.finalize(r).unwrap();
        Some(res.is_err())
    });
    assert_eq!(out, [None, Some(true), Some(true)]);
}
