//! Both rendezvous protocols through the in-memory fabric (see `fabric_common`): by get
//! (the receiver reads the sender's registration: `RndvMode::Get`) and by put (the
//! sender puts into the receiver's registration, then RndvFin: `RndvMode::Put`), for tag
//! messages and active messages, under a node death at every step and a full lane at
//! every step.

mod fabric_common;

use fabric_common::*;
use testkit::fabric::RndvMode;

fn ops() -> Vec<Op> {
    vec![
        Op::Tag {
            len: 5000,
            sync: false,
            recv_first: true,
        },
        Op::Tag {
            len: 20_000,
            sync: false,
            recv_first: false,
        },
        Op::Tag {
            len: 3000,
            sync: true,
            recv_first: true,
        },
        Op::Am {
            hdr: 16,
            len: 9000,
            rndv: true,
        },
    ]
}

fn put() -> Opts {
    Opts {
        rndv: RndvMode::Put,
        ..Opts::default()
    }
}

#[test]
fn rndv_get_fault_free() {
    let r = run(
        &Opts::default(),
        &ops(),
        &Plan {
            seed: 11,
            ..Plan::default()
        },
    );
    assert_eq!(r.errors, 0);
    assert_eq!(r.ok, 8); // 3 sends + 3 receives + the AM send and its data receive
}

#[test]
fn rndv_put_fault_free() {
    let r = run(
        &put(),
        &ops(),
        &Plan {
            seed: 12,
            ..Plan::default()
        },
    );
    assert_eq!(r.errors, 0);
    // A lane that cannot read sends the AM in fragments: no data receive request.
    assert_eq!(r.ok, 7);
}

/// B's lane is filled only in `rndv_get_lane_full_at_the_get` (a regression test of a fixed bug).
#[test]
fn rndv_get_every_step() {
    let (runs, errors) = every_step(&Opts::default(), &ops(), false, 1, &[false]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}

/// Regression test (fixed in the new core): the receiver of a rendezvous by get calls `get_zcopy` once (`tag::api::
/// rndv_get`) and fails the receive with `IoError` (and the sender with it) unless it
/// completes in the call: a transport's `NoResource` (a full lane, the uct contract's
/// "retry or queue") is taken for an error. Here B's lane is full at the step of its
/// get, and the receive fails without any fault that should fail it. (New core: the
/// `get_zcopy` calls in `rndv/mod.rs`.)
#[test]
fn rndv_get_lane_full_at_the_get() {
    let r = run(
        &Opts::default(),
        &[Op::Tag {
            len: 5000,
            sync: false,
            recv_first: true,
        }],
        &Plan {
            seed: 3,
            fill: Some((true, 1, 3 * TICK)),
            ..Plan::default()
        },
    );
    assert_eq!(r.ok, 2);
}

#[test]
fn rndv_put_every_step() {
    let (runs, errors) = every_step(&put(), &ops(), false, 1, &[false, true]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}

/// Regression test (fixed in the new core; was a limitation of the rendezvous by put): the receiver registers its buffer
/// with the first *tcp* memory domain of the worker (`tag::rndv_put::start` looks for
/// `Transport::Tcp`), not with the domain of the lane the message came on. Over any other
/// transport with `PUT_ZCOPY` and no `GET_ZCOPY` (here the fabric alone), every
/// rendezvous receive fails with `Unsupported`, and the sender gets `IoError`. (New
/// core: `rndv/put.rs`, the same search.)
#[test]
fn rndv_put_without_tcp() {
    let o = Opts {
        fabric_only: true,
        ..put()
    };
    let r = run(
        &o,
        &[Op::Tag {
            len: 5000,
            sync: false,
            recv_first: true,
        }],
        &Plan {
            seed: 13,
            ..Plan::default()
        },
    );
    assert_eq!(r.ok, 2);
}

/// Regression test (fixed in the new core): `ep_close_nb(force)` on the endpoint to a dead sender does not release a
/// rendezvous receive from it that already matched (its Rtr was sent; by put, here, and
/// the sender died after its first piece). `destroy_ep` does not do what `fail_ep` does
/// for the peer's in-progress receives (`fail_rndv_from`, dropping `State::frags` of
/// that peer), `request_cancel` ignores a matched receive, and once the endpoint is gone
/// the transport's later report of the dead peer finds no endpoint to fail: the receive
/// never completes. (Without the forced close, the peer's death is detected and the
/// receive fails as it should; `rndv_put_every_step` covers that.) (New core:
/// `engine::destroy_ep` does not push to `failed_peers` as `fail_ep` does.)
#[test]
fn forced_close_leaves_a_matched_rndv_receive() {
    run(
        &put(),
        &[
            Op::Tag {
                len: 3519,
                sync: false,
                recv_first: true,
            },
            Op::Stream { len: 2399 },
        ],
        &Plan {
            seed: 5,
            kill: Some((false, 3)),
            gaps: vec![5, 4],
            close_early: true,
            ..Plan::default()
        },
    );
}
