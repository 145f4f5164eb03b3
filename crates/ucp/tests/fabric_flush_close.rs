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

/// `UCX_TLS=fabric` selects the fabric (in a build that has it: ucp's tests do), and a
/// tag message goes through it; `all` does not include it.
#[test]
fn ucx_tls_selects_the_fabric() {
    use ucp::{Buf, Context, Features, ThreadMode, Worker};
    use uct::Transport;
    assert_eq!(
        ucp::config::parse_tls("fabric").unwrap(),
        vec![Transport::Fabric]
    );
    assert_eq!(
        ucp::config::parse_tls("self,fabric").unwrap(),
        vec![Transport::SelfTl, Transport::Fabric]
    );
    assert!(!ucp::config::parse_tls("all")
        .unwrap()
        .contains(&Transport::Fabric));
    let fab = testkit::Fabric::new(77);
    // The only test of this binary that reads the environment.
    std::env::set_var("UCX_TLS", "fabric");
    let ctx = Context::new(Features::TAG).expect("context");
    std::env::remove_var("UCX_TLS");
    let r = ctx.resources();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].transport, Transport::Fabric);
    assert_eq!(r[0].device, fab.device());
    let mut a = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let mut out = [0u8; 5];
    // SAFETY: `out` outlives the request, which completes (or is checked) below.
    let rr = unsafe {
        b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), 5), 9, u64::MAX, None)
            .unwrap()
    };
    a.tag_send(ep, b"hello", 9).unwrap();
    for _ in 0..1000 {
        if b.request_test(rr).unwrap().is_some() {
            break;
        }
        a.progress();
        b.progress();
        fab.advance(TICK);
    }
    assert_eq!(b.request_test(rr).unwrap(), Some(ucs::Status::Ok));
    b.request_free(rr).unwrap();
    assert_eq!(&out, b"hello");
    assert_eq!(a.ep_transport(ep).unwrap(), Some(Transport::Fabric));
}
