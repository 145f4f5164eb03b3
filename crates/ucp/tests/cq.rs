//! Completion queues: every kind of operation reports into a `Cq` exactly once, with its
//! kind, status, length, tag and endpoint, over self (a worker to itself), shm and tcp
//! (two workers of this process); thousands of preposted receives polled from one queue;
//! a queue polled by a thread that does not own the worker; cancel and endpoint failure.
//! Every byte received is checked; every wait is bounded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ucp::am::AmSendFlags;
use ucp::{
    AtomicOp, AtomicSize, Buf, Callback, Config, Context, Cq, CqEntry, CqOp, Features, ThreadMode,
    Worker,
};
use ucs::Status;

const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Net {
    /// One worker talking to itself.
    Loopback,
    Shm,
    Tcp,
}

fn ctx(net: Net) -> Context {
    let mut cfg = Config::default();
    match net {
        Net::Loopback => {}
        Net::Shm => cfg.transports = vec![uct::Transport::Shm],
        Net::Tcp => cfg.transports = vec![uct::Transport::Tcp],
    }
    Context::with_config(
        Features::TAG | Features::AM | Features::STREAM | Features::RMA | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(seed * 7) as u8)
        .collect()
}

/// The workers of a test: one (loopback) or two; the sender is the first, the receiver
/// the last.
struct Pair {
    w: Vec<Worker>,
    /// The sender's endpoint to the receiver.
    ep: ucp::Ep,
    /// The receiver's endpoint to the sender.
    back: ucp::Ep,
}

impl Pair {
    fn new(net: Net) -> Pair {
        let c = ctx(net);
        let mut w = vec![Worker::new(&c, ThreadMode::Single).unwrap()];
        if !matches!(net, Net::Loopback) {
            w.push(Worker::new(&c, ThreadMode::Single).unwrap());
        }
        let raddr = w.last_mut().unwrap().address();
        let saddr = w[0].address();
        let ep = w[0].ep_create(&raddr).unwrap();
        w[0].ep_connect(ep).unwrap();
        let n = w.len();
        // A worker talking to itself has one endpoint for both directions.
        let back = if n == 1 {
            ep
        } else {
            w[n - 1].ep_create(&saddr).unwrap()
        };
        Pair { w, ep, back }
    }

    fn s(&mut self) -> &mut Worker {
        &mut self.w[0]
    }

    fn r(&mut self) -> &mut Worker {
        self.w.last_mut().unwrap()
    }

    fn progress(&mut self) {
        for w in &mut self.w {
            w.progress();
        }
    }

    /// Progresses until `cq` gave `n` entries; returns them by user context.
    fn collect(&mut self, cq: &Cq, n: usize) -> HashMap<u64, CqEntry> {
        let mut got = HashMap::new();
        let mut out: Vec<CqEntry> = (0..64).map(|_| CqEntry::default()).collect();
        let deadline = Instant::now() + TIMEOUT;
        while got.len() < n {
            self.progress();
            let k = cq.poll(&mut out);
            for e in out[..k].iter_mut() {
                let e = std::mem::take(e);
                let user = e.user;
                assert!(got.insert(user, e).is_none(), "two entries for {user:#x}");
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} entries came",
                got.len()
            );
        }
        // Nothing more comes for these operations.
        for _ in 0..100 {
            self.progress();
        }
        assert_eq!(cq.poll(&mut out), 0, "an entry beyond those expected");
        got
    }
}

fn check(e: &CqEntry, op: CqOp, status: Status, length: usize, tag: u64) {
    assert_eq!(
        (e.op, e.status, e.length, e.tag),
        (op, status, length, tag),
        "entry {:#x}",
        e.user
    );
}

/// Tag sends and receives of every protocol (short, bcopy, fragmented, rendezvous) report
/// into one queue, sends and receives alike, with their lengths, tags and endpoint.
fn tag_ops(net: Net) {
    let mut p = Pair::new(net);
    let cq = Cq::new(16).unwrap();
    let sizes = [0usize, 8, 1000, 20_000, 300_000];
    let data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u64))
        .collect();
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xA5; n]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        let cb = Callback::cq(&cq, 100 + i as u64);
        // SAFETY: `bufs` outlives the receives (their entries are collected below).
        unsafe {
            p.r()
                .tag_recv_nb(
                    Buf::contig(b.as_mut_ptr(), b.len()),
                    7 + i as u64,
                    u64::MAX,
                    Some(cb),
                )
                .unwrap()
        };
    }
    let ep = p.ep;
    for (i, d) in data.iter().enumerate() {
        let cb = Callback::cq(&cq, 200 + i as u64);
        // SAFETY: `data` outlives the sends (their entries are collected below).
        unsafe {
            p.s()
                .tag_send_nb(
                    ep,
                    Buf::contig(d.as_ptr().cast_mut(), d.len()),
                    7 + i as u64,
                    i == 2,
                    Some(cb),
                )
                .unwrap()
        };
    }
    let got = p.collect(&cq, 2 * sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let tag = 7 + i as u64;
        check(&got[&(100 + i as u64)], CqOp::TagRecv, Status::Ok, n, tag);
        check(&got[&(200 + i as u64)], CqOp::TagSend, Status::Ok, n, tag);
        assert_eq!(got[&(200 + i as u64)].ep, Some(ep));
        assert!(bufs[i] == data[i], "data of message {i} ({n} bytes)");
    }
}

/// Active-message sends, arrivals (eager with the data in the entry, rendezvous pulled
/// with a receive that reports into the queue too), stream sends and receives.
fn am_stream_ops(net: Net) {
    let mut p = Pair::new(net);
    let cq = Cq::new(4).unwrap();
    p.r().am_set_handler_cq(9, &cq, 0x900);
    let ep = p.ep;
    let sizes = [0usize, 100, 6000, 2 << 20];
    let data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, 50 + i as u64))
        .collect();
    for (i, d) in data.iter().enumerate() {
        let hdr = [i as u8; 5];
        let cb = Callback::cq(&cq, 300 + i as u64);
        // SAFETY: `data` outlives the sends (their entries are collected below).
        unsafe {
            p.s()
                .am_send_nb(
                    ep,
                    9,
                    &hdr,
                    Buf::contig(d.as_ptr().cast_mut(), d.len()),
                    AmSendFlags::default(),
                    Some(cb),
                )
                .unwrap()
        };
    }
    // Arrivals all carry the handler's context and come in sending order (one sender).
    // A rendezvous arrival is pulled as soon as it comes: its send completes only then.
    let mut arrivals = 0;
    let mut rbufs: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut others = HashMap::new();
    let mut out: Vec<CqEntry> = (0..8).map(|_| CqEntry::default()).collect();
    let deadline = Instant::now() + TIMEOUT;
    while arrivals < sizes.len() || others.len() < sizes.len() + rbufs.len() {
        p.progress();
        let k = cq.poll(&mut out);
        for e in out[..k].iter_mut() {
            let e = std::mem::take(e);
            if e.op != CqOp::AmArrival {
                assert!(others.insert(e.user, e).is_none());
                continue;
            }
            let i = arrivals;
            arrivals += 1;
            assert_eq!(e.user, 0x900);
            check(&e, CqOp::AmArrival, Status::Ok, sizes[i], 0);
            let am = e.am.as_ref().expect("an arrival carries its payload");
            assert_eq!((am.id(), am.header()), (9, &[i as u8; 5][..]));
            match am.rndv() {
                None => assert!(am.data() == data[i], "eager data of message {i}"),
                Some((desc, len)) => {
                    assert_eq!(len, sizes[i]);
                    assert!(am.data().is_empty());
                    let mut b = vec![0u8; len];
                    let cb = Callback::cq(&cq, 400 + i as u64);
                    // SAFETY: `b` is kept in `rbufs` (its heap block does not move)
                    // until its entry was collected.
                    unsafe {
                        p.r()
                            .am_recv_data_nb(desc, Buf::contig(b.as_mut_ptr(), len), Some(cb))
                            .unwrap()
                    };
                    rbufs.push((i, b));
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "active messages did not all complete"
        );
    }
    assert!(
        !rbufs.is_empty() || matches!(net, Net::Tcp),
        "a rendezvous message"
    );
    for (i, &n) in sizes.iter().enumerate() {
        check(&others[&(300 + i as u64)], CqOp::AmSend, Status::Ok, n, 0);
        assert_eq!(others[&(300 + i as u64)].ep, Some(ep));
    }
    for (i, b) in &rbufs {
        check(
            &others[&(400 + *i as u64)],
            CqOp::AmRecvData,
            Status::Ok,
            sizes[*i],
            0,
        );
        assert!(*b == data[*i], "rendezvous data of message {i}");
    }

    // Streams: the receiver asks for exactly the bytes sent, in two receives.
    let msg = pattern(70_000, 3);
    let cb = Callback::cq(&cq, 500);
    // SAFETY: `msg` outlives the send (its entry is collected below).
    unsafe {
        p.s()
            .stream_send_nb(
                ep,
                Buf::contig(msg.as_ptr().cast_mut(), msg.len()),
                Some(cb),
            )
            .unwrap()
    };
    let mut first = vec![0u8; 1000];
    let mut rest = vec![0u8; msg.len() - 1000];
    let back = p.back;
    for (u, b) in [(501u64, &mut first), (502, &mut rest)] {
        let cb = Callback::cq(&cq, u);
        // SAFETY: both buffers outlive the receives (entries collected below).
        unsafe {
            p.r()
                .stream_recv_nb(back, Buf::contig(b.as_mut_ptr(), b.len()), true, Some(cb))
                .unwrap()
        };
    }
    let got = p.collect(&cq, 3);
    check(&got[&500], CqOp::StreamSend, Status::Ok, msg.len(), 0);
    check(&got[&501], CqOp::StreamRecv, Status::Ok, 1000, 0);
    check(
        &got[&502],
        CqOp::StreamRecv,
        Status::Ok,
        msg.len() - 1000,
        0,
    );
    assert!(
        first[..] == msg[..1000] && rest[..] == msg[1000..],
        "stream bytes"
    );
}

/// Put, get, fetching atomic, endpoint flush and worker flush report into the queue,
/// whether they complete in the call (direct paths) or later (emulated on tcp).
fn rma_ops(net: Net) {
    let mut p = Pair::new(net);
    let cq = Cq::new(8).unwrap();
    let region = 4096;
    let ctx = p.r().context().clone();
    // SAFETY: allocated by the library, unmapped when `mem` drops (after the workers'
    // accesses, all collected below).
    let mem = unsafe { ctx.mem_map(None, region) }.unwrap();
    let base = mem.address() as u64;
    let ep = p.ep;
    let rk = p.s().rkey_unpack(ep, &mem.rkey_pack()).unwrap();
    let src = pattern(3000, 9);
    let cb = Callback::cq(&cq, 1);
    // SAFETY: `src` outlives the put (entry collected below).
    unsafe {
        p.s()
            .put_nb(
                ep,
                Buf::contig(src.as_ptr().cast_mut(), src.len()),
                base,
                &rk,
                Some(cb),
            )
            .unwrap()
    };
    let cb = Callback::cq(&cq, 2);
    p.s().ep_flush_nb(ep, Some(cb)).unwrap();
    let got = p.collect(&cq, 2);
    check(&got[&1], CqOp::Put, Status::Ok, src.len(), 0);
    check(&got[&2], CqOp::Flush, Status::Ok, 0, 0);
    assert_eq!((got[&1].ep, got[&2].ep), (Some(ep), Some(ep)));
    // SAFETY: the put completed remotely (flushed); the region is ours.
    let written = unsafe { std::slice::from_raw_parts(mem.address(), src.len()) };
    assert!(written == &src[..], "put data");

    let mut dst = vec![0u8; 3000];
    let cb = Callback::cq(&cq, 3);
    // SAFETY: `dst` outlives the get (entry collected below).
    unsafe {
        p.s()
            .get_nb(
                ep,
                Buf::contig(dst.as_mut_ptr(), dst.len()),
                base,
                &rk,
                Some(cb),
            )
            .unwrap()
    };
    let mut old = 0u64;
    let cb = Callback::cq(&cq, 4);
    // SAFETY: `old` outlives the atomic (entry collected below); the word is aligned.
    unsafe {
        p.s()
            .atomic_fetch_nb(
                ep,
                AtomicOp::Add,
                AtomicSize::B64,
                5,
                0,
                Buf::contig((&mut old as *mut u64).cast(), 8),
                base + 3072,
                &rk,
                Some(cb),
            )
            .unwrap()
    };
    let cb = Callback::cq(&cq, 5);
    p.s().flush_nb(Some(cb)).unwrap();
    let got = p.collect(&cq, 3);
    check(&got[&3], CqOp::Get, Status::Ok, 3000, 0);
    check(&got[&4], CqOp::Atomic, Status::Ok, 8, 0);
    check(&got[&5], CqOp::Flush, Status::Ok, 0, 0);
    assert_eq!(got[&5].ep, None);
    assert!(dst == src, "get data");
    // SAFETY: an aligned word inside the region, no access in flight.
    let after = unsafe { (mem.address().add(3072) as *const u64).read_volatile() };
    assert_eq!(after, old.wrapping_add(5));
}

#[test]
fn tag_ops_loopback() {
    tag_ops(Net::Loopback);
}

#[test]
fn tag_ops_shm() {
    tag_ops(Net::Shm);
}

#[test]
fn tag_ops_tcp() {
    tag_ops(Net::Tcp);
}

#[test]
fn am_stream_ops_loopback() {
    am_stream_ops(Net::Loopback);
}

#[test]
fn am_stream_ops_shm() {
    am_stream_ops(Net::Shm);
}

#[test]
fn am_stream_ops_tcp() {
    am_stream_ops(Net::Tcp);
}

#[test]
fn rma_ops_loopback() {
    rma_ops(Net::Loopback);
}

#[test]
fn rma_ops_shm() {
    rma_ops(Net::Shm);
}

#[test]
fn rma_ops_tcp() {
    rma_ops(Net::Tcp);
}

/// Thousands of receives preposted with one queue (smaller than their number, so the
/// overflow list is used), matched by as many sends: one entry each, every byte checked.
fn preposted(net: Net) {
    const N: usize = 4000;
    const LEN: usize = 24;
    let mut p = Pair::new(net);
    let cq = Cq::new(256).unwrap();
    let mut rbuf = vec![0u8; N * LEN];
    for i in 0..N {
        let cb = Callback::cq(&cq, i as u64);
        // SAFETY: `rbuf` outlives every receive (entries collected below); the slots
        // do not overlap.
        unsafe {
            p.r()
                .tag_recv_nb(
                    Buf::contig(rbuf.as_mut_ptr().add(i * LEN), LEN),
                    i as u64,
                    u64::MAX,
                    Some(cb),
                )
                .unwrap()
        };
    }
    let data: Vec<u8> = pattern(N * LEN, 77);
    let ep = p.ep;
    // Sends report into a queue of their own; send them in reverse tag order, so that
    // matching is by tag, not by posting order.
    let scq = Cq::new(N).unwrap();
    for i in (0..N).rev() {
        let cb = Callback::cq(&scq, i as u64);
        // SAFETY: `data` outlives every send (entries collected below).
        unsafe {
            p.s()
                .tag_send_nb(
                    ep,
                    Buf::contig(data.as_ptr().add(i * LEN).cast_mut(), LEN),
                    i as u64,
                    false,
                    Some(cb),
                )
                .unwrap()
        };
        if i % 64 == 0 {
            p.progress();
        }
    }
    let got = p.collect(&cq, N);
    for i in 0..N {
        check(&got[&(i as u64)], CqOp::TagRecv, Status::Ok, LEN, i as u64);
    }
    assert!(rbuf == data, "received bytes");
    let sent = p.collect(&scq, N);
    assert!(sent
        .values()
        .all(|e| e.op == CqOp::TagSend && e.status == Status::Ok));
}

#[test]
fn thousands_of_preposted_receives_loopback() {
    preposted(Net::Loopback);
}

#[test]
fn thousands_of_preposted_receives_shm() {
    preposted(Net::Shm);
}

#[test]
fn thousands_of_preposted_receives_tcp() {
    preposted(Net::Tcp);
}

/// The thread that owns the workers only posts and progresses; another thread polls the
/// queue and checks every message's bytes as its entry comes.
#[test]
fn polled_by_a_thread_that_does_not_own_the_worker() {
    const N: usize = 3000;
    const LEN: usize = 16;
    let cq = Cq::new(128).unwrap();
    let data: Arc<Vec<u8>> = Arc::new(pattern(N * LEN, 5));
    // The receive buffer is shared with the polling thread as an address: it reads a
    // slot only after the slot's entry came (the queue orders the write before).
    // It stays alive (and is not touched through the vector) until the poller is joined.
    let mut rbuf = vec![0u8; N * LEN];
    let base = rbuf.as_mut_ptr() as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (cq, data, stop) = (cq.clone(), data.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = vec![false; N];
            let mut count = 0;
            let mut out: Vec<CqEntry> = (0..32).map(|_| CqEntry::default()).collect();
            let deadline = Instant::now() + TIMEOUT;
            while count < N && Instant::now() < deadline {
                let k = cq.poll(&mut out);
                for e in &out[..k] {
                    let i = e.user as usize;
                    assert_eq!((e.op, e.status, e.length), (CqOp::TagRecv, Status::Ok, LEN));
                    assert!(!seen[i], "entry {i} twice");
                    seen[i] = true;
                    // SAFETY: the slot lies inside `rbuf`, which outlives this thread; the
                    // worker thread wrote it before it pushed the entry and writes it no
                    // more (the queue's release/acquire orders the bytes before the entry).
                    let got =
                        unsafe { std::slice::from_raw_parts((base + i * LEN) as *const u8, LEN) };
                    assert!(
                        got[..] == data[i * LEN..(i + 1) * LEN],
                        "bytes of message {i}"
                    );
                }
                count += k;
                if k == 0 {
                    // Not a second busy poller: the worker thread does the spinning.
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            stop.store(true, Ordering::Release);
            count
        })
    };
    let mut p = Pair::new(Net::Shm);
    for i in 0..N {
        let cb = Callback::cq(&cq, i as u64);
        // SAFETY: `rbuf` outlives every receive (the poller sees all entries before the
        // workers go); slots do not overlap.
        unsafe {
            p.r()
                .tag_recv_nb(
                    Buf::contig((base + i * LEN) as *mut u8, LEN),
                    i as u64,
                    u64::MAX,
                    Some(cb),
                )
                .unwrap()
        };
    }
    let ep = p.ep;
    let scq = Cq::new(N).unwrap();
    for i in 0..N {
        let cb = Callback::cq(&scq, i as u64);
        // SAFETY: `data` outlives the sends (the poller holds it, and their entries are
        // collected below).
        unsafe {
            p.s()
                .tag_send_nb(
                    ep,
                    Buf::contig(data.as_ptr().add(i * LEN).cast_mut(), LEN),
                    i as u64,
                    false,
                    Some(cb),
                )
                .unwrap()
        };
        if i % 32 == 0 {
            p.progress();
        }
    }
    let deadline = Instant::now() + TIMEOUT;
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        p.progress();
    }
    assert_eq!(poller.join().unwrap(), N);
    assert_eq!(p.collect(&scq, N).len(), N);
    drop(rbuf);
}

/// A canceled receive gives one entry, `Canceled`, and nothing more.
#[test]
fn cancel_reports_one_canceled_entry() {
    let mut p = Pair::new(Net::Shm);
    let cq = Cq::new(4).unwrap();
    let mut b = [0u8; 8];
    let cb = Callback::cq(&cq, 42);
    // SAFETY: `b` outlives the receive (canceled and collected below).
    let r = unsafe {
        p.r()
            .tag_recv_nb(Buf::contig(b.as_mut_ptr(), 8), 1, u64::MAX, Some(cb))
            .unwrap()
    };
    p.r().request_cancel(r).unwrap();
    let got = p.collect(&cq, 1);
    check(&got[&42], CqOp::TagRecv, Status::Canceled, 0, 0);
    // The request was freed with its entry: its handle is stale, a second cancel is
    // refused and reports nothing.
    assert!(p.r().request_cancel(r).is_err());
    let mut out = [CqEntry::default()];
    p.progress();
    assert_eq!(cq.poll(&mut out), 0);
    assert_eq!(b, [0u8; 8]);
}

/// A peer that goes away fails the endpoint: a synchronous send waiting for it and a send
/// queued behind it each give one entry with the endpoint's error.
#[test]
fn endpoint_failure_reports_one_entry_each() {
    let mut p = Pair::new(Net::Tcp);
    let cq = Cq::new(4).unwrap();
    let ep = p.ep;
    // Wire up both ways first.
    let mut ok = [0u8; 2];
    // SAFETY: `ok` outlives the receive (waited for below).
    let rr = unsafe {
        p.r()
            .tag_recv_nb(Buf::contig(ok.as_mut_ptr(), 2), 1, u64::MAX, None)
            .unwrap()
    };
    p.s().tag_send(ep, b"hi", 1).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while p.r().request_test(rr).unwrap().is_none() {
        p.progress();
        assert!(Instant::now() < deadline);
    }
    assert_eq!(&ok, b"hi");
    let big = pattern(1 << 20, 1);
    let small = pattern(10, 2);
    for (u, d, sync) in [(1u64, &small, true), (2, &big, false)] {
        let cb = Callback::cq(&cq, u);
        // SAFETY: both buffers outlive the sends (their entries are collected below).
        unsafe {
            p.s()
                .tag_send_nb(
                    ep,
                    Buf::contig(d.as_ptr().cast_mut(), d.len()),
                    99,
                    sync,
                    Some(cb),
                )
                .unwrap()
        };
    }
    drop(p.w.pop());
    let mut s = p.w.pop().unwrap();
    let mut got = HashMap::new();
    let mut out: Vec<CqEntry> = (0..4).map(|_| CqEntry::default()).collect();
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < 2 {
        if s.progress() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let k = cq.poll(&mut out);
        for e in out[..k].iter_mut() {
            let e = std::mem::take(e);
            assert!(got.insert(e.user, e).is_none(), "two entries");
        }
        assert!(Instant::now() < deadline, "the endpoint never failed");
    }
    for _ in 0..100 {
        s.progress();
    }
    assert_eq!(cq.poll(&mut out), 0);
    let st = got[&1].status;
    assert!(st.is_err(), "a failure status, got {st:?}");
    check(&got[&1], CqOp::TagSend, st, small.len(), 99);
    check(&got[&2], CqOp::TagSend, got[&2].status, big.len(), 99);
    assert!(got[&2].status.is_err());
    assert_eq!(got[&1].ep, Some(ep));
}

/// A queue attached to a worker is named by index: its operations report as with a shared
/// queue, every byte checked; another worker refuses the index.
#[test]
fn attached_queue_reports_and_another_worker_refuses_it() {
    let mut p = Pair::new(Net::Shm);
    let cq = Cq::new(8).unwrap();
    let rid = p.r().cq_attach(&cq);
    assert_eq!(
        p.r().cq_attach(&cq),
        rid,
        "attaching again gives the same id"
    );
    let sid = p.s().cq_attach(&cq);
    let data = pattern(300, 4);
    let mut out = vec![0u8; 300];
    let cb = Callback::cq_attached(rid, 1);
    // SAFETY: `out` outlives the receive (its entry is collected below).
    unsafe {
        p.r()
            .tag_recv_nb(Buf::contig(out.as_mut_ptr(), 300), 5, u64::MAX, Some(cb))
            .unwrap()
    };
    let ep = p.ep;
    let bad = Callback::cq_attached(rid, 3);
    // SAFETY: refused before it touches `data`.
    let refused = unsafe {
        p.s().tag_send_nb(
            ep,
            Buf::contig(data.as_ptr().cast_mut(), 300),
            5,
            false,
            Some(bad),
        )
    };
    assert_eq!(refused.unwrap_err(), Status::InvalidParam);
    let cb = Callback::cq_attached(sid, 2);
    // SAFETY: `data` outlives the send (its entry is collected below).
    unsafe {
        p.s()
            .tag_send_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), 300),
                5,
                false,
                Some(cb),
            )
            .unwrap()
    };
    let got = p.collect(&cq, 2);
    check(&got[&1], CqOp::TagRecv, Status::Ok, 300, 5);
    check(&got[&2], CqOp::TagSend, Status::Ok, 300, 5);
    assert!(out == data, "received bytes");
}
