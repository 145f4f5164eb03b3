//! Emulated put, get, atomics (every operation, 32 and 64 bits) and put with remote signal
//! (add and set; a failed one must never have signalled without its data) through the
//! in-memory fabric (see `fabric_common`): the target executes them in its progress. Under a node
//! death at every step and a full lane at every step.

mod fabric_common;

use fabric_common::*;
use ucp::AtomicOp;

fn ops() -> Vec<Op> {
    let mut v = vec![
        Op::Put { off: 0, len: 8 },
        Op::Put {
            off: 100,
            len: 3000,
        },
        Op::Get { off: 0, len: 16 },
        Op::Get {
            off: 5000,
            len: 2500,
        },
        Op::PutSignal {
            off: 8000,
            len: 20_000,
            word: 20,
            set: false,
            value: 3,
        },
        Op::PutSignal {
            off: 40_000,
            len: 16,
            word: 21,
            set: true,
            value: 0x5eed_0000_0000_0001,
        },
    ];
    let amos = [
        AtomicOp::Add,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Swap,
        AtomicOp::Cswap,
    ];
    for (i, op) in amos.into_iter().enumerate() {
        v.push(Op::Amo {
            word: 2 * i,
            op,
            bits64: true,
            value: 0x1234_5678_9abc_def1,
        });
        v.push(Op::Amo {
            word: 2 * i + 1,
            op,
            bits64: false,
            value: 0x8765_4321,
        });
    }
    v.push(Op::Flush);
    v
}

#[test]
fn rma_fault_free() {
    let r = run(
        &Opts::default(),
        &ops(),
        &Plan {
            seed: 31,
            ..Plan::default()
        },
    );
    assert_eq!(r.errors, 0);
    assert_eq!(r.ok, ops().len());
}

#[test]
fn rma_every_step() {
    let (runs, errors) = every_step(&Opts::default(), &ops(), false, 1, &[false, true]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}
