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

/// Destroying a worker is a death its peers see (its interface closes: silence, then
/// their endpoints fail), and its own requests complete, each exactly once: receives
/// that never matched with `Canceled`. Every worker-destroy point of a small exchange.
#[test]
fn destroying_a_worker_at_every_round() {
    use std::sync::{Arc, Mutex};
    use testkit::fabric::{Fabric, FabricConfig};
    use ucp::{Buf, Callback, Config, Context, Features, ThreadMode, Worker};
    use ucs::Status;
    use uct::{IfaceConfig, Transport};

    for destroy_at in 0..12u32 {
        let fab = Fabric::with_config(destroy_at.into(), FabricConfig::default());
        fab.enter();
        let cfg = Config {
            transports: vec![Transport::Fabric],
            ..Config::default()
        };
        let ctx = |c: &Config| {
            Context::with_config(Features::TAG, c.clone(), IfaceConfig::default()).unwrap()
        };
        let (ca, cb) = (ctx(&cfg), ctx(&cfg));
        let mut a = Worker::new(&ca, ThreadMode::Single).unwrap();
        let mut b = Some(Worker::new(&cb, ThreadMode::Single).unwrap());
        let ab = a.ep_create(&b.as_mut().unwrap().address()).unwrap();
        let log: Arc<Mutex<Vec<(u64, Status)>>> = Arc::default();
        let cbk = |id: u64| {
            let l = log.clone();
            Callback::new(move |_, s, _| l.lock().unwrap().push((id, s)))
        };
        // B: 4 receives (the last one is never sent to). A: 3 sends of 1500 bytes
        // (fragments).
        let mut rbufs = vec![vec![0u8; 1500]; 4];
        let data = vec![7u8; 1500];
        let mut b_reqs = Vec::new();
        for (i, rb) in rbufs.iter_mut().enumerate() {
            // SAFETY: the buffers outlive worker B (dropped below, before them).
            let r = unsafe {
                b.as_mut()
                    .unwrap()
                    .tag_recv_nb(
                        Buf::contig(rb.as_mut_ptr(), 1500),
                        i as u64,
                        u64::MAX,
                        Some(cbk(i as u64)),
                    )
                    .unwrap()
            };
            b_reqs.push(r);
        }
        let mut a_reqs = Vec::new();
        for i in 0..3u64 {
            // SAFETY: `data` outlives worker A's requests (checked complete below).
            let r = unsafe {
                a.tag_send_nb(
                    ab,
                    Buf::contig(data.as_ptr().cast_mut(), 1500),
                    i,
                    false,
                    Some(cbk(100 + i)),
                )
                .unwrap()
            };
            if r.is_none() {
                log.lock().unwrap().push((100 + i, Status::Ok));
            }
            a_reqs.push(r);
        }
        for round in 0..5000u32 {
            if round == destroy_at {
                drop(b.take());
            }
            a.progress();
            if let Some(b) = b.as_mut() {
                b.progress();
            }
            fab.advance(250_000);
            if b.is_none() && (100..103).all(|id| log.lock().unwrap().iter().any(|e| e.0 == id)) {
                break;
            }
        }
        assert!(b.is_none(), "destroy_at {destroy_at}");
        let log = log.lock().unwrap().clone();
        for id in (0..4).chain(100..103) {
            let n = log.iter().filter(|e| e.0 == id).count();
            assert_eq!(
                n, 1,
                "destroy_at {destroy_at}: request {id} completed {n} times: {log:?}"
            );
        }
        let recv3 = log.iter().find(|e| e.0 == 3).unwrap().1;
        assert_eq!(
            recv3,
            Status::Canceled,
            "destroy_at {destroy_at}: an unmatched receive"
        );
        for (i, rb) in rbufs.iter().enumerate().take(3) {
            if log.iter().any(|e| e.0 == i as u64 && e.1 == Status::Ok) {
                assert!(rb.iter().all(|&x| x == 7), "destroy_at {destroy_at}: data");
            }
        }
        for r in a_reqs.into_iter().flatten() {
            a.request_free(r).unwrap();
            assert_eq!(a.request_test(r), Err(Status::InvalidParam));
        }
    }
}
