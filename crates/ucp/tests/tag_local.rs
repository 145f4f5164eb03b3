//! Tag traffic between workers of one process: over self (a worker to itself) and over
//! shm (two workers), every size class of the protocols, every byte checked.

use std::time::Duration;
use ucp::{Buf, Context, Features, ThreadMode, Worker};
use ucs::Status;

fn ctx() -> Context {
    Context::new(Features::TAG).unwrap()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// Receives on `rw` while progressing `sw` too (both live in this thread).
fn exchange(sw: &mut Worker, rw: &mut Worker, ep: ucp::Ep, len: usize, tag: u64, sync: bool) {
    let data = pattern(len, tag);
    let mut out = vec![0u8; len];
    // SAFETY: `out` and `data` outlive both requests: we wait for completion below.
    let rr = unsafe {
        rw.tag_recv_nb(Buf::contig(out.as_mut_ptr(), len), tag, u64::MAX, None)
            .unwrap()
    };
    // SAFETY: as above.
    let sr = unsafe {
        sw.tag_send_nb(
            ep,
            Buf::contig(data.as_ptr().cast_mut(), len),
            tag,
            sync,
            None,
        )
        .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        sw.progress();
        rw.progress();
        let s_done = sr.map_or(true, |r| sw.request_test(r).unwrap().is_some());
        let r_done = rw.request_test(rr).unwrap().is_some();
        if s_done && r_done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timeout at size {len}"
        );
    }
    if let Some(r) = sr {
        assert_eq!(sw.request_test(r).unwrap(), Some(Status::Ok));
        sw.request_free(r).unwrap();
    }
    assert_eq!(rw.request_test(rr).unwrap(), Some(Status::Ok), "size {len}");
    let info = rw.request_info(rr).unwrap();
    assert_eq!(info.length, len);
    assert_eq!(info.sender_tag, tag);
    rw.request_free(rr).unwrap();
    assert!(out == data, "data mismatch at size {len}");
}

fn sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 7, 8, 64, 96, 100, 104, 105, 200, 4096];
    for b in [
        8192usize,
        8184,
        8152,
        10_000,
        16_384,
        65_536,
        1 << 20,
        (1 << 20) + 3,
        4 << 20,
    ] {
        v.extend([b - 1, b, b + 1]);
    }
    v
}

#[test]
fn two_workers_over_shm_all_sizes() {
    let c = ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let baddr = b.address();
    let ep = a.ep_create(&baddr).unwrap();
    for (i, len) in sizes().into_iter().enumerate() {
        exchange(&mut a, &mut b, ep, len, 100 + i as u64, false);
        exchange(&mut a, &mut b, ep, len, 5000 + i as u64, true);
    }
    assert_eq!(a.ep_transport(ep).unwrap(), Some(uct::Transport::Shm));
    assert_eq!(a.dropped() + b.dropped(), 0);
}

#[test]
fn worker_to_itself_over_self() {
    let c = ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = a.address();
    let ep = a.ep_create(&addr).unwrap();
    for (i, len) in sizes().into_iter().enumerate() {
        let data = pattern(len, i as u64);
        let mut out = vec![0u8; len];
        // SAFETY: buffers outlive the requests (waited below).
        let rr = unsafe {
            a.tag_recv_nb(Buf::contig(out.as_mut_ptr(), len), i as u64, u64::MAX, None)
                .unwrap()
        };
        a.tag_send(ep, &data, i as u64).unwrap();
        assert_eq!(
            a.wait_request(rr, Duration::from_secs(30)).unwrap(),
            Status::Ok
        );
        assert!(out == data, "size {len}");
    }
    assert_eq!(a.ep_transport(ep).unwrap(), Some(uct::Transport::SelfTl));
}
