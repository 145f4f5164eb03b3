//! Thread mode multi: several threads use one worker at once through `SharedWorker`, and
//! none waits for another.
//!
//! - Three threads send on worker A, each on an endpoint of its own, while three threads
//!   receive on worker B with a wildcard on the sequence bits: every message is checked,
//!   and each sender's messages arrive in the order it sent them (operations posted while
//!   another thread held the worker keep their order). Over shm, tcp and udp.
//! - A thread blocked in a send to a peer that does not read does not stop another
//!   thread from sending to another peer, nor the worker from progressing.
//! - Threads put with remote signal through one shared worker while target threads poll
//!   their signal words: the data is never older than the signal (shm and tcp).
//! - Threads post sends and preposted receives with completion queues instead of tickets
//!   while other threads poll the queues: one entry per operation (shm and tcp).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use ucp::shared::{Issued, Outcome};
use ucp::{Buf, Config, Context, Features, SharedWorker, ThreadMode, Worker};
use ucs::Status;
use uct::Transport;

const THREADS: u64 = 3;
const COUNT: u64 = 1500;
const TIMEOUT: Duration = Duration::from_secs(120);

fn ctx(t: Transport) -> Context {
    let cfg = Config {
        transports: vec![t],
        ..Config::default()
    };
    Context::with_config(Features::TAG, cfg, uct::IfaceConfig::default()).unwrap()
}

fn payload(tag: u64) -> Vec<u8> {
    let len = (tag % 300) as usize * 37 % 12_000;
    (0..len).map(|i| (i as u64 ^ tag) as u8).collect()
}

fn finish(w: &SharedWorker, i: Issued) -> Outcome {
    match i {
        Issued::Done(o) => o,
        Issued::Pending(t) => match w.wait(t, TIMEOUT) {
            Ok(o) => o,
            Err(e) => panic!("wait failed {e:?} in {:?}", std::thread::current().name()),
        },
    }
}

fn senders_and_receivers(t: Transport) {
    let ctx = ctx(t);
    let mut a = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let mut b = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let b_addr = b.address();
    let eps: Vec<_> = (0..THREADS)
        .map(|_| a.ep_create(&b_addr).unwrap())
        .collect();
    let (a, b) = (SharedWorker::new(a).unwrap(), SharedWorker::new(b).unwrap());
    let senders = &AtomicUsize::new(THREADS as usize);
    std::thread::scope(|s| {
        for (t, &ep) in eps.iter().enumerate() {
            let a = a.clone();
            std::thread::Builder::new()
                .name(format!("send{t}"))
                .spawn_scoped(s, move || {
                    for seq in 0..COUNT {
                        let tag = (t as u64) << 32 | seq;
                        let data = payload(tag);
                        // SAFETY: `data` lives until the send completes (finished below).
                        let i = unsafe {
                            a.tag_send_nb(
                                ep,
                                Buf::contig(data.as_ptr().cast_mut(), data.len()),
                                tag,
                                false,
                            )
                        }
                        .unwrap();
                        assert_eq!(finish(&a, i).status, Status::Ok);
                    }
                    // A send completes when its data left; the flush waits until it
                    // arrived (over tcp and udp the worker progresses until then).
                    let f = a.flush_nb(Some(ep)).unwrap();
                    assert_eq!(finish(&a, f).status, Status::Ok);
                    senders.fetch_sub(1, Ordering::SeqCst);
                })
                .unwrap();
        }
        for t in 0..THREADS {
            let b = b.clone();
            std::thread::Builder::new()
                .name(format!("recv{t}"))
                .spawn_scoped(s, move || {
                    let mut buf = vec![0u8; 16_384];
                    for seq in 0..COUNT {
                        buf.fill(0xee);
                        // SAFETY: `buf` lives until the receive completes (finished below).
                        let i = unsafe {
                            b.tag_recv_nb(
                                Buf::contig(buf.as_mut_ptr(), buf.len()),
                                t << 32,
                                !0u32 as u64 ^ u64::MAX,
                            )
                        }
                        .unwrap();
                        let o = finish(&b, i);
                        assert_eq!(o.status, Status::Ok);
                        // The first message of this sender not received yet: order is kept.
                        assert_eq!(o.info.sender_tag, t << 32 | seq, "sender {t} out of order");
                        let want = payload(o.info.sender_tag);
                        assert_eq!(o.info.length, want.len());
                        assert!(
                            buf[..want.len()] == want[..],
                            "thread {t} message {seq} differs"
                        );
                    }
                    // The senders' flushes need this side's acknowledgements.
                    let deadline = Instant::now() + TIMEOUT;
                    while senders.load(Ordering::SeqCst) != 0 {
                        b.progress().unwrap();
                        assert!(Instant::now() < deadline, "the senders did not finish");
                        std::thread::yield_now();
                    }
                })
                .unwrap();
        }
    });
}

#[test]
fn concurrent_senders_and_receivers_shm() {
    senders_and_receivers(Transport::Shm);
}

#[test]
fn concurrent_senders_and_receivers_tcp() {
    senders_and_receivers(Transport::Tcp);
}

#[test]
fn concurrent_senders_and_receivers_udp() {
    senders_and_receivers(Transport::Udp);
}

/// Thread X sends 1 MiB (rendezvous) to a peer that does not progress and waits for it;
/// meanwhile thread Y sends and completes 500 messages to another peer, and only then does
/// the first peer read.
#[test]
fn a_blocked_sender_does_not_stop_others() {
    let ctx = ctx(Transport::Shm);
    let mut a = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let mut silent = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let mut reader = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let ep_silent = a.ep_create(&silent.address()).unwrap();
    let ep_reader = a.ep_create(&reader.address()).unwrap();
    let a = SharedWorker::new(a).unwrap();
    const BIG: usize = 1 << 20;
    const SMALL: u64 = 500;
    let big: Vec<u8> = (0..BIG).map(|i| (i * 7 + 3) as u8).collect();
    let blocked = AtomicBool::new(true);
    std::thread::scope(|s| {
        let x = {
            let (a, big, blocked) = (a.clone(), &big, &blocked);
            s.spawn(move || {
                // SAFETY: `big` outlives the scope; the send is waited for below.
                let i = unsafe {
                    a.tag_send_nb(
                        ep_silent,
                        Buf::contig(big.as_ptr().cast_mut(), BIG),
                        1,
                        false,
                    )
                }
                .unwrap();
                let o = finish(&a, i);
                blocked.store(false, Ordering::SeqCst);
                o
            })
        };
        let r = s.spawn(move || {
            let mut buf = vec![0u8; 4096];
            for seq in 0..SMALL {
                let n = reader.tag_recv(&mut buf, seq, u64::MAX).unwrap().length;
                assert_eq!(n, 1000 + seq as usize);
                assert!(buf[..n]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i as u64 ^ seq) as u8));
            }
            reader
        });
        let y = {
            let a = a.clone();
            s.spawn(move || {
                for seq in 0..SMALL {
                    let data: Vec<u8> = (0..1000 + seq as usize)
                        .map(|i| (i as u64 ^ seq) as u8)
                        .collect();
                    // SAFETY: `data` lives until the send completes (finished below).
                    let i = unsafe {
                        a.tag_send_nb(
                            ep_reader,
                            Buf::contig(data.as_ptr().cast_mut(), data.len()),
                            seq,
                            false,
                        )
                    }
                    .unwrap();
                    assert_eq!(finish(&a, i).status, Status::Ok);
                }
            })
        };
        y.join().unwrap();
        let _reader = r.join().unwrap();
        assert!(
            blocked.load(Ordering::SeqCst),
            "the big send completed although its peer never read"
        );
        // Now the silent peer reads, and the blocked thread goes on.
        let mut got = vec![0u8; BIG];
        let deadline = Instant::now() + TIMEOUT;
        // SAFETY: `got` lives until the receive completes (waited below).
        let req =
            unsafe { silent.tag_recv_nb(Buf::contig(got.as_mut_ptr(), BIG), 1, u64::MAX, None) }
                .unwrap();
        while silent.request_test(req).unwrap().is_none() {
            silent.progress();
            a.progress().unwrap();
            assert!(
                Instant::now() < deadline,
                "the big receive did not complete"
            );
        }
        assert_eq!(silent.request_test(req).unwrap(), Some(Status::Ok));
        silent.request_free(req).unwrap();
        assert!(got == big, "1 MiB differs");
        while !x.is_finished() {
            silent.progress();
            assert!(Instant::now() < deadline, "the big send did not complete");
            std::thread::yield_now();
        }
        assert_eq!(x.join().unwrap().status, Status::Ok);
    });
}

/// Four threads put with remote signal through one shared worker, each into a slot of its
/// own in the peer's region; four target threads poll their signal words (acquire) and
/// check the whole slot each round: the data is never older than the signal. The target
/// worker is progressed by a thread of its own (emulated paths need it).
fn put_signal_threads(t: Transport) {
    use std::sync::atomic::AtomicU64;
    use ucp::SignalOp;
    const T: usize = 4;
    const SLOT: usize = 4096;
    const ROUNDS: u64 = 300;
    let cfg = Config {
        transports: vec![t],
        ..Config::default()
    };
    let ctx = Context::with_config(
        Features::TAG | Features::RMA | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap();
    let mut a = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let mut b = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    // Per thread: a data slot, then an 8-byte signal word (kept apart by a cache line).
    let region = ctx.mem_alloc(T * (SLOT + 64)).unwrap();
    let base = region.address() as usize;
    let ep = a.ep_create(&b.address()).unwrap();
    let rk = a.rkey_unpack(ep, &region.rkey_pack()).unwrap();
    let (a, b) = (SharedWorker::new(a).unwrap(), SharedWorker::new(b).unwrap());
    let word = |i: usize| (base + i * (SLOT + 64) + SLOT) as u64;
    let slot = |i: usize| (base + i * (SLOT + 64)) as u64;
    let byte = |i: usize, round: u64, k: usize| (k as u64 ^ (round * 7) ^ (i as u64 * 131)) as u8;
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = Instant::now() + TIMEOUT;
            while done.load(Ordering::SeqCst) < 2 * T {
                b.progress().unwrap();
                assert!(Instant::now() < deadline, "targets did not finish");
                std::thread::yield_now();
            }
        });
        for i in 0..T {
            let (a, rk, done) = (a.clone(), &rk, &done);
            s.spawn(move || {
                let mut data = vec![0u8; SLOT];
                for round in 1..=ROUNDS {
                    let len = 1 + (round as usize * 997 + i * 31) % SLOT;
                    for (k, d) in data[..len].iter_mut().enumerate() {
                        *d = byte(i, round, k);
                    }
                    let op = if round % 2 == 0 {
                        SignalOp::Add
                    } else {
                        SignalOp::Set
                    };
                    let value = if op == SignalOp::Add { 1 } else { round };
                    // SAFETY: `data` lives until the operation completes (finished below).
                    let x = unsafe {
                        a.put_signal_nb(
                            ep,
                            Buf::contig(data.as_ptr().cast_mut(), len),
                            slot(i),
                            rk,
                            word(i),
                            rk,
                            op,
                            value,
                        )
                    }
                    .unwrap();
                    assert_eq!(finish(&a, x).status, Status::Ok);
                    let f = a.flush_nb(Some(ep)).unwrap();
                    assert_eq!(finish(&a, f).status, Status::Ok);
                    // The target answers through the word: wait until it saw this round.
                    let seen = (word(i) + 8) as *const AtomicU64;
                    let deadline = Instant::now() + TIMEOUT;
                    // SAFETY: an aligned word of the region, written only atomically.
                    while unsafe { &*seen }.load(Ordering::Acquire) < round {
                        a.progress().unwrap();
                        assert!(Instant::now() < deadline, "target {i} stuck at {round}");
                        std::thread::yield_now();
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
            s.spawn(move || {
                // SAFETY: aligned words of the region, which rucx changes only atomically.
                let (sig, seen) = unsafe {
                    (
                        &*(word(i) as *const AtomicU64),
                        &*((word(i) + 8) as *const AtomicU64),
                    )
                };
                let mut last = 0;
                for round in 1..=ROUNDS {
                    let want = if round % 2 == 0 { last + 1 } else { round };
                    let deadline = Instant::now() + TIMEOUT;
                    while sig.load(Ordering::Acquire) != want {
                        assert!(Instant::now() < deadline, "thread {i}: no signal {round}");
                        std::thread::yield_now();
                    }
                    last = want;
                    let len = 1 + (round as usize * 997 + i * 31) % SLOT;
                    // SAFETY: the slot is written by this round's put, which completed
                    // before the signal; nothing writes it until `seen` moves on.
                    let got = unsafe { std::slice::from_raw_parts(slot(i) as *const u8, len) };
                    for (k, &g) in got.iter().enumerate() {
                        assert_eq!(g, byte(i, round, k), "thread {i} round {round} byte {k}");
                    }
                    seen.store(round, Ordering::Release);
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    drop(region);
}

#[test]
fn put_signal_from_threads_shm() {
    put_signal_threads(Transport::Shm);
}

#[test]
fn put_signal_from_threads_tcp() {
    put_signal_threads(Transport::Tcp);
}

/// Completion queues under threads: four threads post sends through one shared worker
/// with their completions reported into a Cq, the peer has 4 × 500 receives preposted
/// (by four threads) into another Cq, and a fifth thread on each side only polls its
/// queue. Every operation reports exactly one entry, every byte is checked.
fn cq_threads(t: Transport) {
    use std::sync::Mutex;
    use ucp::shared::Op;
    use ucp::{Callback, Cq, CqEntry, CqOp};
    const T: usize = 4;
    const N: usize = 500;
    const LEN: usize = 600;
    let ctx = ctx(t);
    let mut a = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let mut b = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let (a, b) = (SharedWorker::new(a).unwrap(), SharedWorker::new(b).unwrap());
    let (sq, rq) = (Cq::new(256).unwrap(), Cq::new(256).unwrap());
    let byte = |tag: u64, k: usize| (tag as usize * 7 + k) as u8;
    let bufs: Vec<Mutex<Vec<u8>>> = (0..T * N).map(|_| Mutex::new(vec![0u8; LEN])).collect();
    // Each receive buffer's address, taken once (the receive writes through it).
    let addrs: Vec<usize> = bufs
        .iter()
        .map(|m| m.lock().unwrap().as_mut_ptr() as usize)
        .collect();
    let sent: Vec<Vec<u8>> = (0..T * N)
        .map(|n| (0..LEN).map(|k| byte(n as u64, k)).collect())
        .collect();
    std::thread::scope(|s| {
        let posters: Vec<_> = (0..T)
            .map(|i| {
                let (b, rq, addrs) = (b.clone(), rq.clone(), &addrs);
                s.spawn(move || {
                    for k in 0..N {
                        let n = i * N + k;
                        // SAFETY: the buffer lives until the scope ends; its entry is
                        // awaited below before it is read.
                        let buf = unsafe { Buf::contig(addrs[n] as *mut u8, LEN) };
                        let op = Op::TagRecv {
                            buf,
                            tag: n as u64,
                            mask: u64::MAX,
                        };
                        b.post_cq(op, Callback::cq(&rq, n as u64)).unwrap();
                    }
                })
            })
            .collect();
        for p in posters {
            p.join().unwrap();
        }
        let sent = &sent;
        for i in 0..T {
            let a = a.clone();
            let sq = sq.clone();
            s.spawn(move || {
                for k in 0..N {
                    let n = i * N + k;
                    // SAFETY: `sent` outlives the scope, and is not written.
                    let buf = unsafe { Buf::contig(sent[n].as_ptr().cast_mut(), LEN) };
                    let op = Op::TagSend {
                        ep,
                        buf,
                        tag: n as u64,
                        sync: false,
                    };
                    a.post_cq(op, Callback::cq(&sq, n as u64)).unwrap();
                    a.progress().unwrap();
                }
            });
        }
        // The pollers: each entry once, with its kind, status, length and tag.
        let poll = |w: &SharedWorker, q: &Cq, kind: CqOp, progress_other: &SharedWorker| {
            let mut seen = vec![false; T * N];
            let mut got = 0;
            let mut es: Vec<CqEntry> = (0..64).map(|_| CqEntry::default()).collect();
            let deadline = Instant::now() + TIMEOUT;
            while got < T * N {
                let n = q.poll(&mut es);
                for e in &es[..n] {
                    assert_eq!((e.op, e.status), (kind, Status::Ok), "{e:?}");
                    assert_eq!(e.length, LEN);
                    let u = e.user as usize;
                    assert!(!seen[u], "entry {u} twice");
                    seen[u] = true;
                    if kind == CqOp::TagRecv {
                        assert_eq!(e.tag, u as u64);
                    }
                }
                got += n;
                w.progress().unwrap();
                progress_other.progress().unwrap();
                assert!(Instant::now() < deadline, "{got} of {} entries", T * N);
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        };
        let (a2, b2, sq2, rq2) = (a.clone(), b.clone(), sq.clone(), rq.clone());
        let ps = s.spawn(move || poll(&a2, &sq2, CqOp::TagSend, &b2));
        let pr = s.spawn(move || poll(&b, &rq2, CqOp::TagRecv, &a));
        ps.join().unwrap();
        pr.join().unwrap();
    });
    for (n, m) in bufs.iter().enumerate() {
        let v = m.lock().unwrap();
        assert!(
            v.iter().enumerate().all(|(k, &x)| x == byte(n as u64, k)),
            "message {n}"
        );
    }
    let mut es = [CqEntry::default()];
    assert_eq!(
        sq.poll(&mut es) + rq.poll(&mut es),
        0,
        "no entry beyond one per operation"
    );
}

#[test]
fn completion_queues_from_threads_shm() {
    cq_threads(Transport::Shm);
}

#[test]
fn completion_queues_from_threads_tcp() {
    cq_threads(Transport::Tcp);
}
