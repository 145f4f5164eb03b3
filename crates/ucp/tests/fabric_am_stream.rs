//! Active messages whose data the handler keeps (eager, fragmented and rendezvous) and
//! streams through the in-memory fabric (see `fabric_common`), under a node death at
//! every step and a full lane at every step.

mod fabric_common;

use fabric_common::*;

fn am_ops() -> Vec<Op> {
    vec![
        Op::Am {
            hdr: 8,
            len: 0,
            rndv: false,
        },
        Op::Am {
            hdr: 24,
            len: 300,
            rndv: false,
        },
        Op::Am {
            hdr: 8,
            len: 1800,
            rndv: false,
        },
        Op::Am {
            hdr: 40,
            len: 6000,
            rndv: true,
        },
    ]
}

fn stream_ops() -> Vec<Op> {
    vec![
        Op::Stream { len: 10 },
        Op::Stream { len: 700 },
        Op::Stream { len: 2600 },
        Op::Stream { len: 1 },
    ]
}

#[test]
fn am_kept_data_fault_free() {
    let r = run(
        &Opts::default(),
        &am_ops(),
        &Plan {
            seed: 21,
            ..Plan::default()
        },
    );
    assert_eq!(r.errors, 0);
    // 4 sends and 2 rendezvous data receives: a message that does not fit one
    // fragment goes by rendezvous on a lane that can read.
    assert_eq!(r.ok, 6);
}

#[test]
fn am_every_step() {
    let (runs, errors) = every_step(&Opts::default(), &am_ops(), false, 1, &[false]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}

#[test]
fn stream_fault_free() {
    let r = run(
        &Opts::default(),
        &stream_ops(),
        &Plan {
            seed: 22,
            ..Plan::default()
        },
    );
    assert_eq!(r.errors, 0);
    assert_eq!(r.ok, 8);
}

#[test]
fn stream_every_step() {
    let (runs, errors) = every_step(&Opts::default(), &stream_ops(), false, 1, &[false, true]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}
