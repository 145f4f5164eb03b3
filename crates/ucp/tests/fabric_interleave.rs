//! Random workloads through the in-memory fabric (see `fabric_common`), proptest-driven:
//! any mix of tag messages (eager, fragmented, rendezvous), active messages, streams,
//! emulated put/get/atomics and flushes, issued with random progress between them, over
//! a network that loses, duplicates, delays and reorders datagrams, sometimes with a lane
//! filled for a while, with either rendezvous protocol. Without a death everything must
//! complete Ok with its data; with a node killed at a random step, every request must
//! still complete exactly once and nothing may hang. The failing input (with the
//! network's seed) is printed by proptest and by the harness.

mod fabric_common;

use fabric_common::*;
use proptest::prelude::*;
use testkit::fabric::{Faults, RndvMode};
use ucp::AtomicOp;

/// An operation before it gets its atomic word.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..6000, any::<bool>()).prop_map(|(len, recv_first)| Op::Tag {
            len,
            sync: false,
            recv_first,
        }),
        // Synchronous sends of every size class, fragmented ones included (their early
        // acknowledgement: see sync_multi_fragment_ack_before_last_fragment).
        1 => (0usize..6000, any::<bool>()).prop_map(|(len, recv_first)| Op::Tag {
            len,
            sync: true,
            recv_first,
        }),
        2 => (0usize..40, 0usize..5000, any::<bool>())
            .prop_map(|(hdr, len, rndv)| Op::Am { hdr, len, rndv }),
        2 => (1usize..3000).prop_map(|len| Op::Stream { len }),
        1 => (0usize..4000, 1usize..3000).prop_map(|(off, len)| Op::Put { off, len }),
        1 => (0usize..4000, 1usize..3000).prop_map(|(off, len)| Op::Get { off, len }),
        1 => (0usize..6, any::<bool>(), any::<u64>()).prop_map(|(o, bits64, value)| Op::Amo {
            word: 0,
            op: [
                AtomicOp::Add,
                AtomicOp::And,
                AtomicOp::Or,
                AtomicOp::Xor,
                AtomicOp::Swap,
                AtomicOp::Cswap,
            ][o],
            bits64,
            value,
        }),
        1 => (0usize..6000).prop_map(|len| Op::TagBack { len }),
        1 => Just(Op::Flush),
        1 => Just(Op::FlushB),
    ]
}

/// Puts never overlap (each its own slice of the put area) and every atomic has its own
/// word, so that the expected memory does not depend on the order of completion.
fn workload() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..14).prop_map(|mut v| {
        let mut word = 0;
        for (i, o) in v.iter_mut().enumerate() {
            match o {
                Op::Amo { word: w, .. } => {
                    *w = word;
                    word += 1;
                }
                Op::Put { off, len } => {
                    *off = i * 4096;
                    *len = (*len).min(4096);
                }
                _ => {}
            }
        }
        v
    })
}

fn faults() -> impl Strategy<Value = Faults> {
    (
        0.0..0.1f64,
        0.0..0.1f64,
        0.0..0.3f64,
        0u64..2_000_000,
        0u64..3_000_000,
    )
        .prop_map(|(drop, dup, reorder, delay, reorder_ns)| Faults {
            drop,
            dup,
            delay: (0, delay),
            reorder,
            reorder_ns,
        })
}

fn opts(put: bool) -> Opts {
    Opts {
        rndv: if put { RndvMode::Put } else { RndvMode::Get },
        // Fragments of 1 KiB and more by am_zcopy, smaller ones by am_bcopy.
        zcopy_thresh: 1024,
        peer_timeout: 400_000_000,
        ..Opts::default()
    }
}

/// 160 cases per property unless `PROPTEST_CASES` asks for another number (an explicit
/// `cases` in the config would override the variable, so it is read here).
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(160);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_interleavings_complete_with_their_data(
        seed: u64,
        put: bool,
        ops in workload(),
        gaps in proptest::collection::vec(0u32..6, 14),
        faults in faults(),
        fill in proptest::option::of((any::<bool>(), 1u64..60, 1u64..4_000_000)),
        close: bool,
    ) {
        // Either lane may be full at any step, the receiver of a rendezvous by get's too
        // (its read waits for room: see fabric_rndv.rs).
        let _ = put;
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|o| match o {
                Op::TagBack { len } if fill.is_some() && !put => Op::TagBack { len: len.min(2999) },
                o => o,
            })
            .collect();
        let r = run(&opts(put), &ops, &Plan { seed, faults, fill, gaps, close, ..Plan::default() });
        prop_assert_eq!(r.errors, 0);
        prop_assert!(r.ok >= ops.len(), "every operation has at least one request");
    }

    #[test]
    fn random_interleavings_with_a_death(
        seed: u64,
        put: bool,
        ops in workload(),
        gaps in proptest::collection::vec(0u32..6, 14),
        faults in faults(),
        victim: bool,
        step in 1u64..80,
        close: bool,
    ) {
        let o = Opts { peer_timeout: 40_000_000, ..opts(put) };
        run(&o, &ops, &Plan { seed, faults, kill: Some((victim, step)), gaps, close, ..Plan::default() });
    }
}

/// The same seed and plan give the same run through ucp as well (the failing seed a test
/// prints reproduces it).
#[test]
fn a_ucp_run_is_a_function_of_its_seed() {
    let ops = vec![
        Op::Tag {
            len: 2000,
            sync: false,
            recv_first: false,
        },
        Op::TagBack { len: 700 },
        Op::Am {
            hdr: 8,
            len: 4000,
            rndv: true,
        },
        Op::Get { off: 0, len: 1000 },
        Op::Stream { len: 1500 },
    ];
    let faults = Faults {
        drop: 0.05,
        dup: 0.05,
        delay: (0, 1_000_000),
        reorder: 0.2,
        reorder_ns: 1_000_000,
    };
    for kill in [None, Some((true, 9))] {
        let plan = Plan {
            seed: 99,
            faults,
            kill,
            gaps: vec![1, 0, 2],
            ..Plan::default()
        };
        let o = Opts {
            peer_timeout: 400_000_000,
            ..opts(false)
        };
        assert_eq!(run(&o, &ops, &plan), run(&o, &ops, &plan));
    }
}
