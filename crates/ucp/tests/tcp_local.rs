//! The protocols over tcp between workers of one process (UCX_TLS=tcp as configuration):
//! tag sizes across fragmenting, RMA and atomics by emulation, AM, stream; and a peer that
//! goes away fails the endpoint with its error handler called.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucp::{AtomicOp, AtomicSize, Buf, Config, Context, Features, RmaPath, ThreadMode, Worker};
use ucs::Status;

fn tcp_ctx() -> Context {
    let cfg = Config {
        transports: vec![uct::Transport::Tcp],
        ..Config::default()
    };
    Context::with_config(
        Features::TAG | Features::RMA | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(seed) as u8)
        .collect()
}

fn pump(a: &mut Worker, b: &mut Worker, mut done: impl FnMut(&mut Worker, &mut Worker) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(a, b) {
        a.progress();
        b.progress();
        assert!(Instant::now() < deadline, "timed out");
    }
}

#[test]
fn tag_rma_over_tcp() {
    let c = tcp_ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let _ = a.address();
    for (i, len) in [0usize, 1, 200, 256, 257, 65_000, 65_536, 200_000, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u64);
        let mut out = vec![0u8; len];
        // SAFETY: buffers outlive the requests (pumped to completion below).
        let rr = unsafe {
            b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), len), i as u64, u64::MAX, None)
                .unwrap()
        };
        // SAFETY: as above.
        let sr = unsafe {
            a.tag_send_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), len),
                i as u64,
                false,
                None,
            )
            .unwrap()
        };
        pump(&mut a, &mut b, |a, b| {
            b.request_test(rr).unwrap().is_some()
                && sr.map_or(true, |r| a.request_test(r).unwrap().is_some())
        });
        assert_eq!(b.request_test(rr).unwrap(), Some(Status::Ok));
        assert!(out == data, "tcp message of {len} bytes differs");
    }
    assert_eq!(a.ep_transport(ep).unwrap(), Some(uct::Transport::Tcp));

    // RMA over tcp is emulated by the target.
    let mem = c.mem_alloc(1 << 20).unwrap();
    let rk = a.rkey_unpack(ep, &mem.rkey_pack()).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Emulated);
    let data = pattern(300_000, 5);
    a.put_nbi(ep, &data, mem.address() as u64 + 10, &rk)
        .unwrap();
    let f = a.ep_flush_nb(ep, None).unwrap();
    pump(&mut a, &mut b, |a, _| {
        f.map_or(true, |r| a.request_test(r).unwrap().is_some())
    });
    // SAFETY: the region is 1 MiB, mapped while `mem` lives.
    let region = unsafe { std::slice::from_raw_parts(mem.address(), 1 << 20) };
    assert!(region[10..10 + data.len()] == data[..]);
    let mut back = vec![0u8; 300_000];
    // SAFETY: `back` outlives the request.
    let g = unsafe {
        a.get_nb(
            ep,
            Buf::contig(back.as_mut_ptr(), back.len()),
            mem.address() as u64 + 10,
            &rk,
            None,
        )
        .unwrap()
    };
    pump(&mut a, &mut b, |a, _| {
        g.map_or(true, |r| a.request_test(r).unwrap().is_some())
    });
    assert!(back == data);
    let mut old = 0u64;
    // SAFETY: `old` outlives the request.
    let r = unsafe {
        a.atomic_fetch_nb(
            ep,
            AtomicOp::Add,
            AtomicSize::B64,
            5,
            0,
            Buf::contig((&mut old as *mut u64).cast(), 8),
            mem.address() as u64 + 600_000,
            &rk,
            None,
        )
        .unwrap()
    };
    pump(&mut a, &mut b, |a, _| {
        r.map_or(true, |r| a.request_test(r).unwrap().is_some())
    });
    assert_eq!(old, 0);
    assert_eq!(
        // SAFETY: an aligned word inside the region.
        unsafe { (mem.address().add(600_000) as *const u64).read_volatile() },
        5
    );
}

#[test]
fn peer_gone_fails_the_endpoint() {
    let c = tcp_ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let _ = a.address();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e2 = errors.clone();
    a.ep_set_err_handler(ep, Some(Box::new(move |_, s| e2.lock().unwrap().push(s))))
        .unwrap();
    let mut out = [0u8; 4];
    // SAFETY: `out` outlives the request.
    let rr = unsafe {
        b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), 4), 1, u64::MAX, None)
            .unwrap()
    };
    a.tag_send(ep, b"ping", 1).unwrap();
    pump(&mut a, &mut b, |_, b| b.request_test(rr).unwrap().is_some());
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        a.progress();
        if !errors.lock().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        assert!(Instant::now() < deadline, "the endpoint never failed");
    }
    assert_eq!(errors.lock().unwrap()[0], Status::ConnectionReset);
    assert!(matches!(a.ep_status(ep).unwrap(), ucp::EpStatus::Failed(_)));
    assert!(a.tag_send(ep, b"x", 1).is_err());
}

/// Header and data of each active message a handler saw.
type Received = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

/// Active messages larger than one tcp message travel in fragments and reach the handler
/// whole; a forced rendezvous falls back to fragments on a lane that cannot read memory.
#[test]
fn large_active_messages_over_tcp() {
    use ucp::am::AmSendFlags;
    use ucp::{AmAction, AmData};
    let c = tcp_ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let got: Received = Arc::default();
    let g2 = got.clone();
    b.am_set_handler(
        3,
        Some(Box::new(move |m| {
            if let AmData::Eager(d) = m.data {
                g2.lock().unwrap().push((m.header.to_vec(), d.to_vec()));
            }
            AmAction::Done
        })),
    );
    for (i, len) in [0usize, 100, 65_000, 65_536, 200_000, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, 40 + i as u64);
        let flags = AmSendFlags {
            rndv: i % 2 == 1,
            ..Default::default()
        };
        // SAFETY: `data` outlives the request (pumped to completion below).
        let r = unsafe {
            a.am_send_nb(
                ep,
                3,
                b"hdr",
                Buf::contig(data.as_ptr().cast_mut(), len),
                flags,
                None,
            )
            .unwrap()
        };
        pump(&mut a, &mut b, |a, _| {
            r.map_or(true, |r| a.request_test(r).unwrap().is_some())
                && !got.lock().unwrap().is_empty()
        });
        let (h, d) = got.lock().unwrap().remove(0);
        assert_eq!(h, b"hdr");
        assert!(d == data, "active message of {len} bytes over tcp");
    }
}

/// UCX_TCP_MAX_EPS: endpoints beyond the tcp budget go over udp, and both kinds carry
/// checked traffic.
#[test]
fn tcp_budget_sends_the_rest_over_udp() {
    let cfg = Config {
        transports: vec![uct::Transport::Tcp, uct::Transport::Udp],
        tcp_max_eps: 1,
        ..Config::default()
    };
    let c = Context::with_config(Features::TAG, cfg, uct::IfaceConfig::default()).unwrap();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut peers: Vec<Worker> = (0..3)
        .map(|_| Worker::new(&c, ThreadMode::Single).unwrap())
        .collect();
    let eps: Vec<_> = peers
        .iter_mut()
        .map(|p| a.ep_create(&p.address()).unwrap())
        .collect();
    let _ = a.address();
    let mut used = Vec::new();
    for (i, (ep, p)) in eps.iter().zip(peers.iter_mut()).enumerate() {
        let data = pattern(100_000, i as u64);
        let mut out = vec![0u8; data.len()];
        // SAFETY: buffers outlive the requests (pumped to completion below).
        let rr = unsafe {
            p.tag_recv_nb(Buf::contig(out.as_mut_ptr(), out.len()), 7, u64::MAX, None)
                .unwrap()
        };
        // SAFETY: as above.
        let sr = unsafe {
            a.tag_send_nb(
                *ep,
                Buf::contig(data.as_ptr().cast_mut(), data.len()),
                7,
                false,
                None,
            )
            .unwrap()
        };
        pump(&mut a, p, |a, p| {
            p.request_test(rr).unwrap().is_some()
                && sr.map_or(true, |r| a.request_test(r).unwrap().is_some())
        });
        assert_eq!(p.request_test(rr).unwrap(), Some(Status::Ok));
        assert!(out == data);
        used.push(a.ep_transport(*ep).unwrap().unwrap());
    }
    assert_eq!(
        used,
        [
            uct::Transport::Tcp,
            uct::Transport::Udp,
            uct::Transport::Udp
        ]
    );
}
