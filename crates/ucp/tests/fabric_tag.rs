//! Tag messages through the in-memory fabric (`testkit::Fabric`, see `fabric_common`):
//! eager short, bcopy and multi-fragment messages, and rendezvous by get, each under a
//! node death at every step, a full lane at every step, and random interleavings with
//! loss, duplication and reordering.

mod fabric_common;

use fabric_common::*;
use testkit::fabric::Faults;

fn eager_ops() -> Vec<Op> {
    vec![
        Op::Tag {
            len: 0,
            sync: false,
            recv_first: true,
        },
        Op::Tag {
            len: 100,
            sync: false,
            recv_first: false,
        },
        Op::Tag {
            len: 400,
            sync: true,
            recv_first: true,
        },
        Op::Tag {
            len: 2000,
            sync: false,
            recv_first: false,
        },
        Op::Tag {
            len: 2500,
            sync: false,
            recv_first: true,
        },
        Op::Tag {
            len: 1500,
            sync: false,
            recv_first: true,
        },
    ]
}

#[test]
fn eager_fragments_fault_free() {
    let r = run(
        &Opts::default(),
        &eager_ops(),
        &Plan {
            seed: 7,
            ..Plan::default()
        },
    );
    assert_eq!(r.ok, 2 * eager_ops().len());
}

#[test]
fn eager_fragments_every_step() {
    let (runs, errors) = every_step(&Opts::default(), &eager_ops(), false, 1, &[false, true]);
    eprintln!("{runs} runs, {errors} requests failed by a death");
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}

/// Regression test (fixed in the new core): a synchronous send of several fragments is acknowledged by the receiver when
/// its first fragment matches (`State::first` queues `SyncAck`), but the sender marks the
/// request as waiting for that acknowledgement (`remote_pending`) only after its last
/// fragment went out. An acknowledgement that arrives in between is dropped as "for
/// unknown send request" and the send never completes, although the receive did. A
/// send window of 2 messages makes the sender wait for acknowledgements mid-message, so
/// the early SyncAck always wins. (New core: acks queued in `tag/recv.rs` at the match,
/// `remote_pending` set in `tag/send.rs` after the loop; `Core::remote_done` drops it.)
#[test]
fn sync_multi_fragment_ack_before_last_fragment() {
    let o = Opts {
        window: 2,
        ..Opts::default()
    };
    let r = run(
        &o,
        &[Op::Tag {
            len: 2500,
            sync: true,
            recv_first: true,
        }],
        &Plan {
            seed: 3,
            ..Plan::default()
        },
    );
    assert_eq!(r.ok, 2);
}

/// Regression test (fixed in the new core): a receive matched by the first fragment of a message whose sender then dies
/// never completes, and nothing the application can do releases it. The receiver never
/// sent anything, so its endpoint to the sender has no lane; the transport reports the
/// silent peer by address (`IfaceEvent::PeerClosed`), but ucp matches that only against
/// endpoints with a lane, so no endpoint fails and the fragments in reassembly
/// (`State::frags`) are never failed. `request_cancel` ignores a receive that already
/// matched, and `ep_close_nb(force)` (`destroy_ep`) does not drop the reassembly of
/// that peer either. A is killed after sending 2 of the 5 fragments. (New core: the
/// `PeerClosed` match in `worker/mod.rs`, `engine::cancel`, `engine::destroy_ep`, which
/// does not reach `tag::peer_failed`.)
#[test]
fn receive_of_a_partial_message_from_a_dead_sender() {
    run(
        &Opts::default(),
        &[Op::Tag {
            len: 2500,
            sync: false,
            recv_first: true,
        }],
        &Plan {
            seed: 5,
            kill: Some((false, 3)),
            ..Plan::default()
        },
    );
}

/// Regression test: the same with the receiver killed instead, after 2 of the 5
/// fragments arrived. B never sent to A, so its endpoint to A has no transport endpoint
/// for the death to fail; the fabric failed only the dead node's transport endpoints and
/// said nothing of the peers that had only sent to it, so the matched receive waited for
/// fragments that could no longer come, and neither cancel nor the test's window
/// released it. The dead interface now reports those peers by address
/// (`IfaceEvent::PeerClosed`, as a survivor does when such a peer falls silent), and
/// ucp fails its endpoint to them and the message in reassembly.
#[test]
fn receive_of_a_partial_message_by_a_dead_receiver() {
    // The case fabric_interleave.rs found (shrunk): B progresses between A's fragments
    // (they are delayed in transit), and dies at step 15 in the middle of the second
    // message.
    let o = Opts {
        zcopy_thresh: 1024,
        peer_timeout: 40_000_000,
        ..Opts::default()
    };
    let tag = |len, sync| Op::Tag {
        len,
        sync,
        recv_first: false,
    };
    let r = run(
        &o,
        &[tag(1929, false), tag(2415, false), tag(1929, true)],
        &Plan {
            seed: 7682357846188483269,
            faults: Faults {
                delay: (0, 364183),
                ..Faults::default()
            },
            kill: Some((true, 15)),
            ..Plan::default()
        },
    );
    assert!(r.died);
}

/// The same with fragments gathered by `am_zcopy` instead of packed by `am_bcopy`.
#[test]
fn eager_zcopy_fragments_every_step() {
    let o = Opts {
        zcopy_thresh: 1024,
        ..Opts::default()
    };
    let (runs, errors) = every_step(&o, &eager_ops(), false, 1, &[false, true]);
    assert!(runs > 4);
    assert!(errors > 0, "no death ever failed a request");
}
