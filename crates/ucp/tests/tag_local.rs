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

/// UCX_RNDV_THRESH / UCX_ZCOPY_THRESH (here given as configuration) move the protocol
/// boundaries, and data still arrives intact on each side of them.
#[test]
fn thresholds_follow_configuration() {
    let cfg = ucp::Config {
        rndv_thresh: ucp::config::Thresh::Bytes(3000),
        zcopy_thresh: ucp::config::Thresh::Bytes(100),
        ..ucp::Config::default()
    };
    let c = Context::with_config(Features::TAG, cfg, uct::IfaceConfig::default()).unwrap();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    a.ep_connect(ep).unwrap();
    let th = a.ep_thresholds(ep).unwrap().unwrap();
    assert_eq!(th.rndv, 3000);
    assert_eq!(th.zcopy, 100);
    assert_eq!(th.select(2999, false), ucp::proto::select::Proto::Bcopy);
    assert_eq!(th.select(3000, false), ucp::proto::select::Proto::Rndv);
    for (i, len) in [1usize, 99, 100, 2999, 3000, 3001, 50_000]
        .into_iter()
        .enumerate()
    {
        exchange(&mut a, &mut b, ep, len, i as u64, false);
    }
}

/// I/O-vector buffers on both sides, with segment boundaries that do not line up.
#[test]
fn iov_datatypes() {
    let c = ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    for total in [0usize, 10, 5000, 40_000, 300_000] {
        let data = pattern(total, 9);
        // Sender: three segments split at 1/3 and 1/2.
        let mut src = data.clone();
        let (s1, s2) = (total / 3, total / 2);
        let send_iov: Box<[(*mut u8, usize)]> = Box::new([
            (src.as_mut_ptr(), s1),
            // SAFETY: s1 <= s2 <= total, inside `src`.
            (unsafe { src.as_mut_ptr().add(s1) }, s2 - s1),
            // SAFETY: as above.
            (unsafe { src.as_mut_ptr().add(s2) }, total - s2),
        ]);
        // Receiver: two segments of different shape.
        let mut dst1 = vec![0u8; total / 4];
        let mut dst2 = vec![0u8; total - total / 4];
        let recv_iov: Box<[(*mut u8, usize)]> = Box::new([
            (dst1.as_mut_ptr(), dst1.len()),
            (dst2.as_mut_ptr(), dst2.len()),
        ]);
        // SAFETY: all buffers outlive the requests, which are waited for below.
        let rr = b
            .tag_recv_nb(unsafe { Buf::iov(recv_iov) }, 3, u64::MAX, None)
            .unwrap();
        // SAFETY: as above.
        let sr = a
            .tag_send_nb(ep, unsafe { Buf::iov(send_iov) }, 3, false, None)
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while b.request_test(rr).unwrap().is_none()
            || sr.is_some_and(|r| a.request_test(r).unwrap().is_none())
        {
            a.progress();
            b.progress();
            assert!(std::time::Instant::now() < deadline);
        }
        assert_eq!(b.request_test(rr).unwrap(), Some(Status::Ok));
        let mut got = dst1.clone();
        got.extend_from_slice(&dst2);
        assert!(got == data, "iov message of {total} bytes differs");
    }
}

/// A worker sleeping in `wait` is woken by an arriving message, and by `signal` from
/// another thread.
#[test]
fn blocking_wait_wakes_on_message_and_signal() {
    let c = ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let waker = b.waker().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        // SAFETY: `buf` outlives the request (completed before the loop ends).
        let r = unsafe {
            b.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), 16), 1, u64::MAX, None)
                .unwrap()
        };
        tx.send("posted").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while b.request_test(r).unwrap().is_none() {
            if b.progress() == 0 {
                b.wait(60_000).unwrap();
            }
            assert!(std::time::Instant::now() < deadline);
        }
        assert_eq!(&buf[..4], b"wake");
        tx.send("received").unwrap();
        // Nothing will arrive now: only the signal can end this wait early.
        b.wait(60_000).unwrap();
        tx.send("signaled").unwrap();
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)).unwrap(), "posted");
    a.tag_send(ep, b"wake", 1).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(60)).unwrap(),
        "received"
    );
    // The thread may not be asleep yet; a signal before the wait still ends it.
    waker.signal().unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(60)).unwrap(),
        "signaled"
    );
    t.join().unwrap();
}

#[test]
fn close_flushes_then_removes_the_endpoint() {
    let c = ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let big = pattern(200_000, 1);
    // SAFETY: `big` outlives the send (the close below waits for it).
    let sr = unsafe {
        a.tag_send_nb(
            ep,
            Buf::contig(big.as_ptr().cast_mut(), big.len()),
            1,
            false,
            None,
        )
        .unwrap()
    };
    let close = a
        .ep_close_nb(ep, false)
        .unwrap()
        .expect("a rendezvous is in flight");
    let mut out = vec![0u8; big.len()];
    // SAFETY: `out` outlives the receive (waited for below).
    let rr = unsafe {
        b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), out.len()), 1, u64::MAX, None)
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while a.request_test(close).unwrap().is_none() {
        a.progress();
        b.progress();
        assert!(std::time::Instant::now() < deadline);
    }
    assert_eq!(
        b.wait_request(rr, Duration::from_secs(30)).unwrap(),
        Status::Ok
    );
    assert!(out == big);
    if let Some(r) = sr {
        assert_eq!(a.request_test(r).unwrap(), Some(Status::Ok));
    }
    assert_eq!(a.ep_status(ep), Err(Status::InvalidParam));
    assert_eq!(a.tag_send(ep, b"x", 1), Err(Status::InvalidParam));
}

/// A strided layout packed by the application: every other byte of a buffer.
struct Strided {
    mem: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl ucp::GenericDt for Strided {
    fn packed_size(&self) -> usize {
        self.mem.lock().unwrap().len() / 2
    }
    fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize {
        let m = self.mem.lock().unwrap();
        for (i, d) in dst.iter_mut().enumerate() {
            *d = m[2 * (off + i)];
        }
        dst.len()
    }
    fn unpack(&mut self, off: usize, src: &[u8]) -> ucs::Result<()> {
        let mut m = self.mem.lock().unwrap();
        for (i, s) in src.iter().enumerate() {
            m[2 * (off + i)] = *s;
        }
        Ok(())
    }
}

#[test]
fn generic_datatypes_across_protocols() {
    let c = ctx();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    for packed in [0usize, 5, 3000, 20_000, 300_000] {
        let src = std::sync::Arc::new(std::sync::Mutex::new(pattern(2 * packed, 4)));
        let dst = std::sync::Arc::new(std::sync::Mutex::new(vec![0u8; 2 * packed]));
        let sbuf = Buf::generic(Strided { mem: src.clone() });
        let rbuf = Buf::generic(Strided { mem: dst.clone() });
        // Generic buffers own their memory (shared Arc): nothing to outlive, no unsafe.
        let rr = b.tag_recv_nb(rbuf, 8, u64::MAX, None).unwrap();
        let sr = a.tag_send_nb(ep, sbuf, 8, false, None).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while b.request_test(rr).unwrap().is_none()
            || sr.is_some_and(|r| a.request_test(r).unwrap().is_none())
        {
            a.progress();
            b.progress();
            assert!(std::time::Instant::now() < deadline);
        }
        assert_eq!(b.request_test(rr).unwrap(), Some(Status::Ok));
        assert_eq!(b.request_info(rr).unwrap().length, packed);
        {
            let (s, d) = (src.lock().unwrap(), dst.lock().unwrap());
            for i in 0..packed {
                assert_eq!(d[2 * i], s[2 * i], "packed byte {i} of {packed}");
                assert_eq!(d[2 * i + 1], 0, "gap byte {i} of {packed} untouched");
            }
        }
        // A request whose buffer is a datatype owns it: taking or freeing the completed
        // request drops the datatype (the C ABI's datatypes call the application's
        // `finish` there), it is not forgotten with the request.
        assert_eq!(
            b.request_take(rr).unwrap().map(|(s, _)| s),
            Some(Status::Ok)
        );
        if let Some(r) = sr {
            a.request_free(r).unwrap();
        }
        assert_eq!(
            std::sync::Arc::strong_count(&dst),
            1,
            "receive datatype dropped"
        );
        assert_eq!(
            std::sync::Arc::strong_count(&src),
            1,
            "send datatype dropped"
        );
    }
}

/// Requests started with `Callback::Word` report through `drain_completed`, once each,
/// with their word, status and receive information, and need no closure.
#[test]
fn word_completions_are_drained_once() {
    let c = ctx();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = w.address();
    let ep = w.ep_create(&addr).unwrap();
    let n = 20usize;
    let mut outs: Vec<Vec<u8>> = (0..n).map(|i| vec![0u8; 64 + i]).collect();
    let ins: Vec<Vec<u8>> = (0..n).map(|i| pattern(64 + i, i as u64)).collect();
    let mut words = std::collections::HashMap::new();
    for (i, out) in outs.iter_mut().enumerate() {
        // SAFETY: `outs` outlives the receives: every one is drained below.
        let r = unsafe {
            w.tag_recv_nb(
                Buf::contig(out.as_mut_ptr(), out.len()),
                100 + i as u64,
                u64::MAX,
                Some(ucp::Callback::Word(1000 + i as u64)),
            )
            .unwrap()
        };
        w.request_free(r).unwrap();
        words.insert(1000 + i as u64, i);
    }
    for (i, d) in ins.iter().enumerate().rev() {
        // SAFETY: `ins` outlives the sends (waited for below through their words).
        let r = unsafe {
            w.tag_send_nb(
                ep,
                Buf::contig(d.as_ptr().cast_mut(), d.len()),
                100 + i as u64,
                false,
                Some(ucp::Callback::Word(5000 + i as u64)),
            )
            .unwrap()
        };
        if let Some(r) = r {
            w.request_free(r).unwrap();
            words.insert(5000 + i as u64, i);
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = std::collections::HashSet::new();
    while seen.len() < words.len() {
        assert!(std::time::Instant::now() < deadline, "timeout");
        w.progress();
        w.drain_completed(|c| {
            assert_eq!(c.status, Status::Ok);
            assert!(seen.insert(c.word), "word {} reported twice", c.word);
            let i = words[&c.word];
            if c.word < 5000 {
                assert_eq!(c.info.sender_tag, 100 + i as u64);
                assert_eq!(c.info.length, 64 + i);
            }
        });
    }
    assert!(!w.has_completed());
    for (o, i) in outs.iter().zip(&ins) {
        assert_eq!(o, i);
    }
}

/// Messages to the worker itself keep their order when a small one (handed over in the
/// call) follows a large one still queued in fragments, and when they arrive before their
/// receives (unexpected, from pooled buffers) or after.
#[test]
fn loopback_order_and_unexpected_pool() {
    let c = ctx();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = w.address();
    let ep = w.ep_create(&addr).unwrap();
    let big = pattern(100_000, 7);
    let small = pattern(8, 9);
    for round in 0..50u64 {
        let (mut a, mut b) = (vec![0u8; big.len()], vec![0u8; big.len()]);
        // SAFETY: the buffers outlive the requests, waited for below.
        let (s1, s2) = unsafe {
            (
                w.tag_send_nb(
                    ep,
                    Buf::contig(big.as_ptr().cast_mut(), big.len()),
                    5,
                    false,
                    None,
                )
                .unwrap(),
                w.tag_send_nb(
                    ep,
                    Buf::contig(small.as_ptr().cast_mut(), 8),
                    5,
                    false,
                    None,
                )
                .unwrap(),
            )
        };
        if round % 2 == 0 {
            // Let both arrive first: they wait as unexpected messages.
            for _ in 0..100 {
                w.progress();
            }
        }
        // SAFETY: as above.
        let (r1, r2) = unsafe {
            (
                w.tag_recv_nb(Buf::contig(a.as_mut_ptr(), a.len()), 5, u64::MAX, None)
                    .unwrap(),
                w.tag_recv_nb(Buf::contig(b.as_mut_ptr(), b.len()), 5, u64::MAX, None)
                    .unwrap(),
            )
        };
        for r in [s1, s2].into_iter().flatten() {
            assert_eq!(
                w.wait_request(r, Duration::from_secs(30)).unwrap(),
                Status::Ok
            );
        }
        for r in [r1, r2] {
            assert_eq!(w.wait_done(r, Duration::from_secs(30)).unwrap(), Status::Ok);
        }
        assert_eq!(w.request_info(r1).unwrap().length, big.len());
        assert_eq!(w.request_info(r2).unwrap().length, 8);
        w.request_free(r1).unwrap();
        w.request_free(r2).unwrap();
        assert_eq!(&a[..], &big[..], "round {round}");
        assert_eq!(&b[..8], &small[..], "round {round}");
    }
}

/// A handle kept after its endpoint was closed is refused, also once another endpoint
/// took the same slot: it never reaches the new peer.
#[test]
fn stale_endpoint_handle_is_refused() {
    let c = ctx();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let old = w.ep_create(&a.address()).unwrap();
    w.tag_send(old, b"to a", 1).unwrap();
    let mut got = [0u8; 4];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // SAFETY: `got` outlives the receive, waited for below.
    let r = unsafe {
        a.tag_recv_nb(Buf::contig(got.as_mut_ptr(), 4), 1, u64::MAX, None)
            .unwrap()
    };
    while a.request_test(r).unwrap().is_none() {
        w.progress();
        a.progress();
        assert!(std::time::Instant::now() < deadline);
    }
    a.request_free(r).unwrap();
    assert_eq!(&got, b"to a");
    assert_eq!(w.ep_close_nb(old, true).unwrap(), None);
    let new = w.ep_create(&b.address()).unwrap();
    assert_ne!(old, new);
    assert_eq!(w.tag_send(old, b"lost", 2), Err(Status::InvalidParam));
    assert_eq!(w.ep_status(old), Err(Status::InvalidParam));
    assert!(w.ep_flush_nb(old, None).is_err());
    w.tag_send(new, b"to b", 2).unwrap();
    // b gets exactly the message sent on the new handle.
    let mut got = [0u8; 4];
    let info = loop {
        w.progress();
        if let Some((info, Some(m))) = b.tag_probe(2, u64::MAX, true) {
            // SAFETY: `got` outlives the receive, waited for right here.
            let r = unsafe {
                b.tag_msg_recv_nb(m, Buf::contig(got.as_mut_ptr(), 4), None)
                    .unwrap()
            };
            b.wait_request(r, Duration::from_secs(30)).unwrap();
            break info;
        }
        b.progress();
        assert!(std::time::Instant::now() < deadline);
    };
    assert_eq!(info.length, 4);
    assert_eq!(&got, b"to b");
    assert!(b.tag_probe(2, u64::MAX, false).is_none());
}

/// `tag_recv_nbx` receives a whole message that is already here in the call, with no
/// request: the data, the length, the sender's tag, truncation, and a completion queue's
/// entry; a receive that must wait, or a large (rendezvous) message, gets a request.
#[test]
fn receive_completed_in_the_call() {
    use ucp::{Callback, Cq, CqOp, RecvPosted};
    let c = ctx();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = w.address();
    let ep = w.ep_create(&addr).unwrap();
    let cq = Cq::new(8).unwrap();
    for (round, len) in [0usize, 1, 8, 100, 3000].into_iter().enumerate() {
        let tag = 40 + round as u64;
        let data = pattern(len, tag);
        w.tag_send(ep, &data, tag).unwrap();
        // Arrived (self delivers in the send call, or at the latest in progress).
        for _ in 0..10 {
            w.progress();
        }
        let mut out = vec![0xA5u8; len + 4];
        // SAFETY: `out` outlives the receive, which completes in the call (asserted).
        let got = unsafe {
            w.tag_recv_nbx(
                Buf::contig(out.as_mut_ptr(), out.len()),
                tag,
                u64::MAX,
                None,
            )
            .unwrap()
        };
        let RecvPosted::Done(status, info) = got else {
            panic!("size {len}: a message that is here must complete in the call: {got:?}");
        };
        assert_eq!(status, Status::Ok, "size {len}");
        assert_eq!((info.length, info.sender_tag), (len, tag), "size {len}");
        assert_eq!(&out[..len], &data[..], "size {len}");
        assert!(
            out[len..].iter().all(|&b| b == 0xA5),
            "size {len}: wrote past the message"
        );
    }

    // Truncated: the status says so and only the buffer's length is written.
    let data = pattern(64, 3);
    w.tag_send(ep, &data, 60).unwrap();
    let mut small = [0u8; 16];
    // SAFETY: as above.
    let got = unsafe {
        w.tag_recv_nbx(Buf::contig(small.as_mut_ptr(), 16), 60, u64::MAX, None)
            .unwrap()
    };
    assert!(matches!(got, RecvPosted::Done(Status::MessageTruncated, i) if i.length == 64));
    assert_eq!(&small[..], &data[..16]);

    // A completion queue named instead of a callback gets its entry.
    let data = pattern(8, 4);
    w.tag_send(ep, &data, 61).unwrap();
    let mut out = [0u8; 8];
    // SAFETY: as above.
    let got = unsafe {
        w.tag_recv_nbx(
            Buf::contig(out.as_mut_ptr(), 8),
            61,
            u64::MAX,
            Some(Callback::cq(&cq, 77)),
        )
        .unwrap()
    };
    assert!(matches!(got, RecvPosted::Done(Status::Ok, _)));
    assert_eq!(out, data[..]);
    let mut entries: Vec<ucp::CqEntry> = (0..4).map(|_| Default::default()).collect();
    assert_eq!(cq.poll(&mut entries), 1);
    let e = &entries[0];
    assert_eq!(
        (e.user, e.op, e.status, e.length, e.tag),
        (77, CqOp::TagRecv, Status::Ok, 8, 61)
    );

    // Nothing here yet: a request, completed by the later send.
    let mut out = vec![0u8; 8];
    // SAFETY: `out` outlives the request, waited for below.
    let got = unsafe {
        w.tag_recv_nbx(Buf::contig(out.as_mut_ptr(), 8), 62, u64::MAX, None)
            .unwrap()
    };
    let RecvPosted::Pending(r) = got else {
        panic!("nothing was sent yet: {got:?}");
    };
    let data = pattern(8, 5);
    w.tag_send(ep, &data, 62).unwrap();
    assert_eq!(w.wait_done(r, Duration::from_secs(30)).unwrap(), Status::Ok);
    w.request_free(r).unwrap();
    assert_eq!(out, data);
}

/// A receive for an exact tag takes a small message where it lies only when that message
/// is the oldest with its tag; a larger one that came first is taken first, and wildcard
/// receives still see arrival order across tags. A closure callback of a receive that
/// completes in the call is dropped uncalled.
#[test]
fn in_call_receives_keep_arrival_order() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use ucp::{Callback, RecvPosted};
    let c = ctx();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = w.address();
    let ep = w.ep_create(&addr).unwrap();
    // (tag, length, seed) in sending order: a 100-byte message (kept in a buffer) ahead
    // of small ones (kept inline) with the same tag, and another tag between them.
    let sent = [
        (7u64, 100usize, 1u64),
        (7, 8, 2),
        (8, 8, 3),
        (7, 8, 4),
        (7, 40, 5),
    ];
    for &(tag, len, seed) in &sent {
        w.tag_send(ep, &pattern(len, seed), tag).unwrap();
    }
    for _ in 0..10 {
        w.progress();
    }
    let calls = Arc::new(AtomicUsize::new(0));
    // (tag, mask) of each receive, and the message (index into `sent`) it must take.
    let order = [
        (7u64, u64::MAX, 0usize),
        (0, 0, 1),
        (7, u64::MAX, 3),
        (8, u64::MAX, 2),
        (7, u64::MAX, 4),
    ];
    for (i, &(tag, mask, want)) in order.iter().enumerate() {
        let (wtag, len, seed) = sent[want];
        let mut out = vec![0x5Au8; 128];
        let n = calls.clone();
        let cb: Callback = Callback::Fn(Box::new(move |_, _, _| {
            n.fetch_add(1, Ordering::Relaxed);
        }));
        // SAFETY: `out` outlives the receive, which completes in the call (asserted).
        let got = unsafe {
            w.tag_recv_nbx(
                Buf::contig(out.as_mut_ptr(), out.len()),
                tag,
                mask,
                Some(cb),
            )
            .unwrap()
        };
        let RecvPosted::Done(status, info) = got else {
            panic!("receive {i}: the message is here, it must complete in the call: {got:?}");
        };
        assert_eq!(status, Status::Ok, "receive {i}");
        assert_eq!((info.sender_tag, info.length), (wtag, len), "receive {i}");
        assert_eq!(&out[..len], &pattern(len, seed)[..], "receive {i}");
        assert!(
            out[len..].iter().all(|&b| b == 0x5A),
            "receive {i}: wrote too far"
        );
    }
    assert!(
        w.tag_probe(0, 0, false).is_none(),
        "a message was left over"
    );
    for _ in 0..10 {
        w.progress();
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "a callback of an in-call receive ran"
    );
}

/// Messages of several eager fragments (rendezvous off) that arrive before their
/// receive: kept whole as unexpected messages, then received, taken by a probe and
/// received through its handle, and received while later messages of the same tag are
/// still unexpected; every byte checked, in sending order.
#[test]
fn fragmented_unexpected_messages() {
    let cfg = ucp::Config {
        rndv_thresh: ucp::config::Thresh::Bytes(1 << 30),
        ..ucp::Config::default()
    };
    let c = Context::with_config(Features::TAG, cfg, uct::IfaceConfig::default()).unwrap();
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let sizes = [8193usize, 3 * 8192 + 5, 100_000, 65_536];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, 40 + i as u64))
        .collect();
    let mut sends = Vec::new();
    for m in &msgs {
        // SAFETY: `msgs` outlives the sends, waited for below.
        let r = unsafe {
            a.tag_send_nb(
                ep,
                Buf::contig(m.as_ptr().cast_mut(), m.len()),
                77,
                false,
                None,
            )
            .unwrap()
        };
        sends.extend(r);
    }
    // All of them arrive, and wait whole as unexpected messages.
    loop {
        a.progress();
        b.progress();
        let done = sends.iter().all(|&r| a.request_test(r).unwrap().is_some());
        if done && b.tag_probe(77, u64::MAX, false).is_some() {
            for _ in 0..1000 {
                a.progress();
                b.progress();
            }
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sends never completed"
        );
    }
    for r in sends {
        assert_eq!(a.request_test(r).unwrap(), Some(Status::Ok));
        a.request_free(r).unwrap();
    }
    for (i, m) in msgs.iter().enumerate() {
        let mut out = vec![0u8; m.len() + 16];
        let (r, info) = if i == 2 {
            // By probe with remove, then its handle.
            let (info, msg) = b.tag_probe(77, u64::MAX, true).unwrap();
            // SAFETY: `out` outlives the receive, waited for right here.
            let r = unsafe {
                b.tag_msg_recv_nb(msg.unwrap(), Buf::contig(out.as_mut_ptr(), out.len()), None)
                    .unwrap()
            };
            (r, Some(info))
        } else {
            // SAFETY: as above.
            let r = unsafe {
                b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), out.len()), 77, u64::MAX, None)
                    .unwrap()
            };
            (r, None)
        };
        assert_eq!(b.wait_done(r, Duration::from_secs(30)).unwrap(), Status::Ok);
        let got = b.request_info(r).unwrap();
        b.request_free(r).unwrap();
        assert_eq!(got.length, m.len(), "message {i}");
        if let Some(info) = info {
            assert_eq!(info.length, m.len(), "probe of message {i}");
        }
        assert_eq!(&out[..m.len()], &m[..], "message {i}");
        assert!(
            out[m.len()..].iter().all(|&x| x == 0),
            "message {i} overran"
        );
    }
    assert_eq!(a.dropped() + b.dropped(), 0);
}
