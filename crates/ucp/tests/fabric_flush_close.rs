//! Wireup, flush and close through the in-memory fabric (see `fabric_common`): the first
//! operation of a fresh pair connects its endpoint (wireup under the faults), flushes of
//! an endpoint and of a worker, and closing both endpoints with a flush, under a node
//! death at every step and a full lane at every step.

mod fabric_common;

use fabric_common::*;

fn ops() -> Vec<Op> {
    vec![
        Op::Tag {
            len: 64,
            sync: false,
            recv_first: true,
        },
        Op::Flush,
        Op::Stream { len: 900 },
        Op::Put { off: 0, len: 600 },
        Op::Flush,
        Op::FlushB,
    ]
}

#[test]
fn wireup_flush_close_fault_free() {
    let r = run(
        &Opts::default(),
        &ops(),
        &Plan {
            seed: 41,
            close: true,
            ..Plan::default()
        },
    );
    assert_eq!(r.errors, 0);
    // 7 operations' requests (a tag send and receive, a stream send and receive) and
    // 2 closes.
    assert_eq!(r.ok, 10);
}

#[test]
fn wireup_flush_close_every_step() {
    let (runs, errors) = every_step(&Opts::default(), &ops(), true, 1, &[false, true]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}

/// Wireup alone: the very first message of each direction, at every step.
#[test]
fn wireup_every_step() {
    let ops = [Op::Tag {
        len: 8,
        sync: true,
        recv_first: false,
    }];
    let (runs, _) = every_step(&Opts::default(), &ops, false, 1, &[false, true]);
    assert!(runs >= 4);
}
