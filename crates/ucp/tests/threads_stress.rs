//! Thread mode multi under load: two workers, each a `SharedWorker` used by four threads at
//! once, four endpoints from each to the other, every operation kind at the same time, over
//! shm, tcp and udp. Each thread, per iteration:
//!
//! - tag: three messages of three classes, received by the peer's threads with wildcards:
//!   per source (wildcard on the sequence bits; order per sender is checked), any source
//!   (wildcard on source, sub-tag and sequence) and one of four sub-tags (wildcard on
//!   source and sequence);
//! - an active message (handler installed with `with`, run by whichever thread progresses);
//! - on two threads, stream bytes (one thread sends, a thread of the peer receives);
//! - put, flush, get back, fetch-add on a word all peer threads add to, swap, compare-swap
//!   that succeeds then one that fails, and an atomic add without result, on memory the
//!   peer exposes, on an endpoint that rotates over the four.
//!
//! Tickets are consumed by waiting, by polling (`test`), and, for a receive nothing
//! matches, after `cancel`. Every received byte is checked, every message is marked seen once (a second arrival
//! fails), and at the end the test checks that nothing else arrived (no unexpected tag
//! message, no stream bytes, exactly the expected active messages) and that the exposed
//! memory holds what the last operations left. Every posted operation is consumed exactly
//! once through its `Issued` value; the test counts outcomes against operations issued.
//!
//! Iterations are grouped in windows whose number is in the tags; receives of window `w`
//! only match messages of window `w`, so a thread can never wait for a message that a
//! thread further ahead took, and the thread furthest behind can always go on (no cycle).
//! Receives are posted one window ahead (see `run_thread`).
//!
//! `RUCX_STRESS_ITERS` sets the iterations per thread (a multiple of the window, default
//! 1024: a few seconds per transport in a debug build) for longer soak runs.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucp::shared::{Issued, Outcome};
use ucp::{
    AmAction, AmData, AmSendFlags, AtomicOp, AtomicSize, Buf, Config, Context, Ep, Features, MemH,
    RemoteKey, SharedWorker, ThreadMode, Worker,
};
use ucs::Status;
use uct::Transport;

const THREADS: usize = 4;
/// Iterations per window; a multiple of the four sub-tags.
const WINDOW: usize = 8;
const TIMEOUT: Duration = Duration::from_secs(60);
const AM_ID: u16 = 7;

/// Exposed memory: a put slot per peer thread, then the atomic words.
const SLOT: usize = 8192;
const COUNTER: usize = THREADS * SLOT;
const fn swap_word(t: usize) -> usize {
    COUNTER + 8 + t * 24
}
const fn cswap_word(t: usize) -> usize {
    swap_word(t) + 8
}
const fn post_word(t: usize) -> usize {
    swap_word(t) + 16
}
const REGION: usize = post_word(THREADS) + 8;

fn iters() -> usize {
    let n = std::env::var("RUCX_STRESS_ITERS")
        .ok()
        .map(|v| v.parse().expect("RUCX_STRESS_ITERS is a number"))
        .unwrap_or(1024);
    assert!(
        n > 0 && n % WINDOW == 0,
        "iterations: a multiple of {WINDOW}"
    );
    n
}

// ----- tags ---------------------------------------------------------------------------------

const CLASS_SHIFT: u32 = 60;
const WIN_SHIFT: u32 = 44;
const SUB_SHIFT: u32 = 40;
const SRC_SHIFT: u32 = 32;
const CLASS_MASK: u64 = 0xf << CLASS_SHIFT;
const WIN_MASK: u64 = 0xffff << WIN_SHIFT;
const SUB_MASK: u64 = 0xf << SUB_SHIFT;
const SRC_MASK: u64 = 0xff << SRC_SHIFT;

fn tag(class: u64, side: usize, t: usize, i: usize, sub: usize) -> u64 {
    class << CLASS_SHIFT
        | ((i / WINDOW) as u64) << WIN_SHIFT
        | (sub as u64) << SUB_SHIFT
        | ((side << 7 | t) as u64) << SRC_SHIFT
        | i as u64
}

/// Decodes a received tag into (sending thread, iteration), checking its side.
fn source(tag: u64, want_side: usize) -> (usize, usize) {
    let src = ((tag & SRC_MASK) >> SRC_SHIFT) as usize;
    assert_eq!(src >> 7, want_side, "a message from the wrong side");
    (src & 0x7f, (tag & 0xffff_ffff) as usize)
}

fn mix(key: u64) -> u64 {
    let x = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

/// The bytes of the message named `key`: mostly small, some above the shm eager limit.
fn payload(key: u64, max: usize) -> Vec<u8> {
    let h = mix(key);
    let len = if h % 23 == 0 {
        max
    } else {
        (h >> 8) as usize % (max.min(2000) + 1)
    };
    (0..len)
        .map(|i| (i as u64 ^ h ^ (i >> 8) as u64) as u8)
        .collect()
}

const TAG_MAX: usize = 20_000;
/// Active messages stay within one eager transport message on every transport.
const AM_MAX: usize = 1000;

// ----- one side -----------------------------------------------------------------------------

/// What one side receives and checks.
struct Seen {
    /// Per class (per source, any source, sub-tag) and per (sender thread, iteration).
    tag: [Vec<AtomicBool>; 3],
    am: Vec<AtomicBool>,
    am_count: AtomicUsize,
    /// Active messages that broke a rule (checked in the handler, reported at the end).
    am_bad: Mutex<Vec<String>>,
}

impl Seen {
    fn new(iters: usize) -> Seen {
        let v = || {
            (0..THREADS * iters)
                .map(|_| AtomicBool::new(false))
                .collect()
        };
        Seen {
            tag: [v(), v(), v()],
            am: v(),
            am_count: AtomicUsize::new(0),
            am_bad: Mutex::new(Vec::new()),
        }
    }
}

struct Side {
    id: usize,
    w: SharedWorker,
    eps: Vec<Ep>,
    /// The peer's memory, one key per endpoint.
    rkeys: Vec<RemoteKey>,
    peer_base: u64,
    /// This side's exposed memory.
    mem: MemH,
    seen: Arc<Seen>,
}

fn ctx(t: Transport) -> Context {
    let cfg = Config {
        transports: vec![t],
        ..Config::default()
    };
    Context::with_config(
        Features::TAG
            | Features::AM
            | Features::STREAM
            | Features::RMA
            | Features::AMO32
            | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

thread_local! {
    /// The iteration a thread is in, for failure messages.
    static WHERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[track_caller]
fn finish(w: &SharedWorker, i: Issued, ops: &mut Ops) -> Outcome {
    ops.issued += 1;
    let o = match i {
        Issued::Done(o) => o,
        Issued::Pending(t) => match w.wait(t, TIMEOUT) {
            Ok(o) => o,
            Err(e) => panic!(
                "wait: {e:?} in {:?} at iteration {}",
                std::thread::current().name(),
                WHERE.get()
            ),
        },
    };
    ops.outcomes += 1;
    o
}

#[track_caller]
fn ok(w: &SharedWorker, i: Issued, ops: &mut Ops) -> Outcome {
    let o = finish(w, i, ops);
    assert_eq!(o.status, Status::Ok, "{:?}", std::thread::current().name());
    o
}

/// Finishes `i` by testing its ticket (and progressing) until it completes.
#[track_caller]
fn poll(w: &SharedWorker, i: Issued, ops: &mut Ops) -> Outcome {
    ops.issued += 1;
    let mut t = match i {
        Issued::Done(o) => {
            ops.outcomes += 1;
            return o;
        }
        Issued::Pending(t) => t,
    };
    let deadline = Instant::now() + TIMEOUT;
    let o = loop {
        match w.test(t) {
            Ok(o) => break o,
            Err(back) => t = back,
        }
        // Progress, then let the thread that holds the worker (if another does) run.
        w.progress().unwrap();
        std::thread::yield_now();
        assert!(Instant::now() < deadline, "a polled ticket never completed");
    };
    ops.outcomes += 1;
    assert_eq!(o.status, Status::Ok, "{:?}", std::thread::current().name());
    o
}

/// A receive that nothing matches (class 4 is never sent), canceled: it completes once,
/// as canceled, and its buffer stays untouched.
fn cancel_receive(s: &Side, win: usize, ops: &mut Ops) {
    let mut buf = vec![0x3cu8; 64];
    let tag = 4u64 << CLASS_SHIFT | (win as u64) << WIN_SHIFT;
    // SAFETY: `buf` lives until the receive is finished here.
    let i = unsafe {
        s.w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), tag, CLASS_MASK)
    }
    .unwrap();
    let Issued::Pending(t) = i else {
        panic!("a receive nothing matches completed at once")
    };
    s.w.cancel(&t).unwrap();
    let o = finish(&s.w, Issued::Pending(t), ops);
    assert_eq!(o.status, Status::Canceled, "the canceled receive");
    assert!(buf.iter().all(|&b| b == 0x3c), "a canceled receive wrote");
}

/// Operations a thread issued and outcomes it consumed.
#[derive(Default)]
struct Ops {
    issued: usize,
    outcomes: usize,
}

fn am_handler(seen: Arc<Seen>, peer: usize, iters: usize) -> ucp::am::AmHandler {
    Box::new(move |m| {
        let bad = |s: String| seen.am_bad.lock().unwrap().push(s);
        if m.header.len() != 8 {
            bad(format!("header of {} bytes", m.header.len()));
            return AmAction::Done;
        }
        let key = u64::from_le_bytes(m.header.try_into().unwrap());
        let (t, i) = ((key >> 32) as usize & 0x7f, key as u32 as usize);
        if (key >> 39) as usize & 1 != peer || t >= THREADS || i >= iters {
            bad(format!("header {key:#x}"));
            return AmAction::Done;
        }
        match m.data {
            AmData::Eager(d) if d == &payload(key, AM_MAX)[..] => {}
            AmData::Eager(_) => bad(format!("data of {key:#x} differs")),
            AmData::Rndv { .. } => bad(format!("{key:#x} came by rendezvous")),
        }
        if seen.am[t * iters + i].swap(true, Ordering::SeqCst) {
            bad(format!("{key:#x} arrived twice"));
        }
        seen.am_count.fetch_add(1, Ordering::SeqCst);
        AmAction::Done
    })
}

fn stream_chunk(i: usize) -> usize {
    1 + i * 37 % 700
}

fn stream_byte(side: usize, off: usize) -> u8 {
    (off * 7 + (off >> 9) + side * 101) as u8
}

fn code(side: usize, t: usize, i: usize) -> u64 {
    (side as u64) << 48 | (t as u64) << 32 | (i as u64 + 1)
}

fn put_len(side: usize, t: usize, i: usize) -> usize {
    1 + mix(code(side, t, i)) as usize % 4096
}

fn put_bytes(side: usize, t: usize, i: usize) -> Vec<u8> {
    let h = mix(code(side, t, i) ^ 0x5555);
    (0..put_len(side, t, i))
        .map(|k| (k as u64 ^ h) as u8)
        .collect()
}

/// Posts the receives of window `win` of thread `t`: classes per source, any source and
/// sub-tag, `WINDOW` of each. Returns (class, buffer, ticket-or-outcome).
fn post_receives(s: &Side, t: usize, win: usize) -> Vec<(usize, Vec<u8>, Issued)> {
    let peer = 1 - s.id;
    let w = (win as u64) << WIN_SHIFT;
    let mut v = Vec::with_capacity(3 * WINDOW);
    for k in 0..WINDOW {
        let specs = [
            (
                1u64 << CLASS_SHIFT | w | ((peer << 7 | t) as u64) << SRC_SHIFT,
                CLASS_MASK | WIN_MASK | SRC_MASK,
            ),
            (2u64 << CLASS_SHIFT | w, CLASS_MASK | WIN_MASK),
            (
                3u64 << CLASS_SHIFT | w | (t as u64) << SUB_SHIFT,
                CLASS_MASK | WIN_MASK | SUB_MASK,
            ),
        ];
        for (c, &(tag, mask)) in specs.iter().enumerate() {
            let mut buf = vec![0xeeu8; TAG_MAX + (k % 2) * 64];
            // SAFETY: the buffer's heap block stays put when the Vec moves into `v`, and
            // lives until the receive is finished in `check_receives`.
            let i = unsafe {
                s.w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), tag, mask)
            }
            .unwrap();
            v.push((c, buf, i));
        }
    }
    v
}

fn check_receives(
    s: &Side,
    t: usize,
    win: usize,
    rx: Vec<(usize, Vec<u8>, Issued)>,
    iters: usize,
    ops: &mut Ops,
) {
    let peer = 1 - s.id;
    let mut next_seq = win * WINDOW;
    for (k, (c, buf, i)) in rx.into_iter().enumerate() {
        // Some receives are consumed by polling their ticket instead of waiting.
        let o = if k % 4 != 1 {
            ok(&s.w, i, ops)
        } else {
            poll(&s.w, i, ops)
        };
        let tag = o.info.sender_tag;
        let (src, seq) = source(tag, peer);
        assert_eq!((tag >> CLASS_SHIFT) as usize, c + 1, "class of {tag:#x}");
        assert_eq!(
            (tag & WIN_MASK) >> WIN_SHIFT,
            win as u64,
            "window of {tag:#x}"
        );
        match c {
            0 => {
                assert_eq!(src, t, "per-source receive got {tag:#x}");
                assert_eq!(seq, next_seq, "sender {src} out of order");
                next_seq += 1;
            }
            2 => assert_eq!((tag & SUB_MASK) >> SUB_SHIFT, t as u64, "sub of {tag:#x}"),
            _ => {}
        }
        let want = payload(tag, TAG_MAX);
        assert_eq!(o.info.length, want.len(), "length of {tag:#x}");
        assert!(buf[..want.len()] == want[..], "bytes of {tag:#x} differ");
        assert!(
            !s.seen.tag[c][src * iters + seq].swap(true, Ordering::SeqCst),
            "{tag:#x} received twice"
        );
    }
}

/// The sends of iteration `i` of thread `t`: three tag messages, one active message.
fn send_iteration(s: &Side, t: usize, i: usize, ops: &mut Ops) {
    let tags = [
        (tag(1, s.id, t, i, 0), s.eps[t]),
        (tag(2, s.id, t, i, i % 3), s.eps[(t + i) % THREADS]),
        (
            tag(3, s.id, t, i, (t + i) % THREADS),
            s.eps[(t + i + 1) % THREADS],
        ),
    ];
    let bufs: Vec<Vec<u8>> = tags.iter().map(|&(g, _)| payload(g, TAG_MAX)).collect();
    let mut pending = Vec::new();
    for (k, &(g, ep)) in tags.iter().enumerate() {
        let b = &bufs[k];
        // SAFETY: `bufs` lives until every send is finished below.
        let r = unsafe {
            s.w.tag_send_nb(
                ep,
                Buf::contig(b.as_ptr().cast_mut(), b.len()),
                g,
                i % 5 == 0,
            )
        };
        pending.push(r.unwrap());
    }
    let key = (tag(0, s.id, t, i, 0) & !CLASS_MASK & !WIN_MASK) | i as u64;
    let header = key.to_le_bytes();
    let am = payload(key, AM_MAX);
    // SAFETY: `header` and `am` live until the send is finished below.
    let r = unsafe {
        s.w.am_send_nb(
            s.eps[(t + 2 * i) % THREADS],
            AM_ID,
            &header,
            Buf::contig(am.as_ptr().cast_mut(), am.len()),
            AmSendFlags::default(),
        )
    };
    pending.push(r.unwrap());
    for p in pending {
        ok(&s.w, p, ops);
    }
}

/// Remote memory operations of iteration `i` of thread `t`, checked as they complete.
fn rma_iteration(s: &Side, t: usize, i: usize, fetched: &mut Vec<u64>, ops: &mut Ops) {
    let e = (t + i) % THREADS;
    let (ep, rk) = (s.eps[e], &s.rkeys[e]);
    let base = s.peer_base;
    let data = put_bytes(s.id, t, i);
    // SAFETY: `data` lives until the put is finished here.
    let src = unsafe { Buf::contig(data.as_ptr().cast_mut(), data.len()) };
    let r = s.w.put_nb(ep, src, base + (t * SLOT) as u64, rk);
    ok(&s.w, r.unwrap(), ops);
    ok(&s.w, s.w.flush_nb(Some(ep)).unwrap(), ops);
    let mut back = vec![0u8; data.len()];
    // SAFETY: `back` lives until the get is finished here.
    let dst = unsafe { Buf::contig(back.as_mut_ptr(), back.len()) };
    let r = s.w.get_nb(ep, dst, base + (t * SLOT) as u64, rk);
    ok(&s.w, r.unwrap(), ops);
    assert!(back == data, "get of thread {t} iteration {i} differs");

    let fetch = |op, value, compare, off: usize, ops: &mut Ops| {
        let mut result = u64::MAX;
        // SAFETY: `result` lives until the atomic is finished here.
        let res = unsafe { Buf::contig((&mut result as *mut u64).cast(), 8) };
        let r = s.w.atomic_fetch_nb(
            ep,
            op,
            AtomicSize::B64,
            value,
            compare,
            res,
            base + off as u64,
            rk,
        );
        ok(&s.w, r.unwrap(), ops);
        result
    };
    fetched.push(fetch(AtomicOp::Add, 1, 0, COUNTER, ops));
    let prev = if i == 0 { 0 } else { code(s.id, t, i - 1) };
    let now = code(s.id, t, i);
    assert_eq!(
        fetch(AtomicOp::Swap, now, 0, swap_word(t), ops),
        prev,
        "swap"
    );
    assert_eq!(
        fetch(AtomicOp::Cswap, now, prev, cswap_word(t), ops),
        prev,
        "cswap"
    );
    assert_eq!(
        fetch(AtomicOp::Cswap, 0, now ^ 0xdead, cswap_word(t), ops),
        now,
        "a failing cswap"
    );
    let r = s.w.atomic_post(
        ep,
        AtomicOp::Add,
        AtomicSize::B64,
        i as u64 + 1,
        base + post_word(t) as u64,
        rk,
    );
    ok(&s.w, r.unwrap(), ops);
}

/// Stream: thread 1 sends chunk `i` on its own endpoint (the stream is per worker pair:
/// the peer reads it on its first endpoint), thread 2 receives window `win` from the peer.
fn stream_window(s: &Side, t: usize, win: usize, sent: &mut usize, got: &mut usize, ops: &mut Ops) {
    let range = win * WINDOW..(win + 1) * WINDOW;
    if t == 1 {
        let chunks: Vec<Vec<u8>> = range
            .map(|i| {
                let n = stream_chunk(i);
                let c = (*sent..*sent + n).map(|o| stream_byte(s.id, o)).collect();
                *sent += n;
                c
            })
            .collect();
        let mut pending = Vec::new();
        for c in &chunks {
            // SAFETY: `chunks` lives until every send is finished below.
            let r = unsafe {
                s.w.stream_send_nb(s.eps[1], Buf::contig(c.as_ptr().cast_mut(), c.len()))
            };
            pending.push(r.unwrap());
        }
        for p in pending {
            ok(&s.w, p, ops);
        }
    } else if t == 2 {
        let total: usize = range.map(stream_chunk).sum();
        let mut buf = vec![0u8; total];
        let mut off = 0;
        let mut k = 0;
        while off < total {
            let n = (1 + k * 131 % 900).min(total - off);
            let waitall = k % 2 == 0;
            // SAFETY: `buf` lives until the receive is finished here.
            let r = unsafe {
                s.w.stream_recv_nb(s.eps[0], Buf::contig(buf.as_mut_ptr().add(off), n), waitall)
            };
            let o = ok(&s.w, r.unwrap(), ops);
            assert!(
                o.info.length > 0 && o.info.length <= n,
                "stream receive of {}",
                o.info.length
            );
            if waitall {
                assert_eq!(o.info.length, n, "waitall");
            }
            off += o.info.length;
            k += 1;
        }
        let peer = 1 - s.id;
        for (k, &b) in buf.iter().enumerate() {
            assert_eq!(b, stream_byte(peer, *got + k), "stream byte {}", *got + k);
        }
        *got += total;
    }
}

fn run_thread(s: &Side, t: usize, iters: usize) -> (Vec<u64>, Ops) {
    let mut ops = Ops::default();
    let mut fetched = Vec::with_capacity(iters);
    let (mut sent, mut got) = (0, 0);
    let windows = iters / WINDOW;
    let mut ahead = std::collections::VecDeque::new();
    ahead.push_back(post_receives(s, t, 0));
    for win in 0..windows {
        // Receives one window ahead: no thread is more than one window ahead of any peer
        // thread (sub-tag receives need every peer thread's messages of the window), so a
        // peer's rendezvous send always finds its receive posted, and a flush, which
        // waits for every send on its endpoint, never waits for a thread behind.
        if win + 1 < windows {
            ahead.push_back(post_receives(s, t, win + 1));
        }
        let rx = ahead.pop_front().unwrap();
        for i in win * WINDOW..(win + 1) * WINDOW {
            WHERE.set(i);
            send_iteration(s, t, i, &mut ops);
            rma_iteration(s, t, i, &mut fetched, &mut ops);
        }
        stream_window(s, t, win, &mut sent, &mut got, &mut ops);
        cancel_receive(s, win, &mut ops);
        check_receives(s, t, win, rx, iters, &mut ops);
    }
    ok(&s.w, s.w.flush_nb(None).unwrap(), &mut ops);
    (fetched, ops)
}

fn read_u64(m: &MemH, off: usize) -> u64 {
    // SAFETY: `off + 8 <= REGION`, inside the mapping `m`; peers are done writing.
    unsafe { (m.address().add(off) as *const u64).read_volatile() }
}

fn stress(tr: Transport) {
    let iters = iters();
    let started = Instant::now();
    let ctx = ctx(tr);
    let mut wa = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let mut wb = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let (addr_a, addr_b) = (wa.address(), wb.address());
    let eps_a: Vec<Ep> = (0..THREADS)
        .map(|_| wa.ep_create(&addr_b).unwrap())
        .collect();
    let eps_b: Vec<Ep> = (0..THREADS)
        .map(|_| wb.ep_create(&addr_a).unwrap())
        .collect();
    // SAFETY: rucx allocates the memory; it lives as long as the handle.
    let (mem_a, mem_b) = unsafe {
        (
            ctx.mem_map(None, REGION).unwrap(),
            ctx.mem_map(None, REGION).unwrap(),
        )
    };
    for m in [&mem_a, &mem_b] {
        // SAFETY: the mapping is REGION bytes and nobody else uses it yet.
        unsafe { std::ptr::write_bytes(m.address(), 0, REGION) };
    }
    let (sa, sb) = (
        SharedWorker::new(wa).unwrap(),
        SharedWorker::new(wb).unwrap(),
    );
    let (seen_a, seen_b) = (Arc::new(Seen::new(iters)), Arc::new(Seen::new(iters)));
    sa.with(|w| w.am_set_handler(AM_ID, Some(am_handler(seen_a.clone(), 1, iters))))
        .unwrap();
    sb.with(|w| w.am_set_handler(AM_ID, Some(am_handler(seen_b.clone(), 0, iters))))
        .unwrap();
    // Keys are unpacked on each endpoint; over tcp and udp that may need the peer's
    // wireup answer, so the peer progresses meanwhile from another thread.
    let unpack = |me: &SharedWorker, other: &SharedWorker, eps: &[Ep], packed: Vec<u8>| {
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    other.progress().unwrap();
                    std::thread::yield_now();
                }
            });
            let keys = me
                .with(|w| {
                    eps.iter()
                        .map(|&e| w.rkey_unpack(e, &packed).unwrap())
                        .collect::<Vec<_>>()
                })
                .unwrap();
            stop.store(true, Ordering::SeqCst);
            keys
        })
    };
    let rkeys_a = unpack(&sa, &sb, &eps_a, mem_b.rkey_pack());
    let rkeys_b = unpack(&sb, &sa, &eps_b, mem_a.rkey_pack());
    let sides = [
        Side {
            id: 0,
            w: sa,
            eps: eps_a,
            rkeys: rkeys_a,
            peer_base: mem_b.address() as u64,
            mem: mem_a,
            seen: seen_a,
        },
        Side {
            id: 1,
            w: sb,
            eps: eps_b,
            rkeys: rkeys_b,
            peer_base: 0,
            mem: mem_b,
            seen: seen_b,
        },
    ];
    let sides = {
        let [mut a, mut b] = sides;
        b.peer_base = a.mem.address() as u64;
        a.peer_base = b.mem.address() as u64;
        [a, b]
    };
    let running = AtomicUsize::new(2 * THREADS);
    let issued = AtomicU64::new(0);
    let fetched: Mutex<[Vec<u64>; 2]> = Mutex::new([Vec::new(), Vec::new()]);
    std::thread::scope(|sc| {
        for s in &sides {
            for t in 0..THREADS {
                let (running, issued, fetched) = (&running, &issued, &fetched);
                std::thread::Builder::new()
                    .name(format!("{tr:?}-{}{t}", ["a", "b"][s.id]))
                    .spawn_scoped(sc, move || {
                        let (f, ops) = run_thread(s, t, iters);
                        assert_eq!(ops.issued, ops.outcomes, "an operation without outcome");
                        issued.fetch_add(ops.issued as u64, Ordering::SeqCst);
                        fetched.lock().unwrap()[s.id].extend(f);
                        running.fetch_sub(1, Ordering::SeqCst);
                        // The peer's flushes and emulated accesses need this side.
                        let deadline = Instant::now() + TIMEOUT;
                        while running.load(Ordering::SeqCst) != 0 {
                            s.w.progress().unwrap();
                            assert!(
                                Instant::now() < deadline,
                                "the other threads did not finish"
                            );
                            std::thread::yield_now();
                        }
                    })
                    .unwrap();
            }
        }
    });

    // A flush completes once the peer's transport has the messages; its handlers may not
    // have run yet. Progress until every active message is in, then a while longer, so
    // that an extra one would show.
    let deadline = Instant::now() + TIMEOUT;
    while sides
        .iter()
        .any(|s| s.seen.am_count.load(Ordering::SeqCst) < THREADS * iters)
    {
        for s in &sides {
            s.w.progress().unwrap();
        }
        assert!(Instant::now() < deadline, "active messages missing");
    }
    for _ in 0..1000 {
        for s in &sides {
            s.w.progress().unwrap();
        }
    }

    // Everything arrived exactly once, nothing more.
    let mut fetched = fetched.into_inner().unwrap();
    for s in &sides {
        let peer = 1 - s.id;
        for (c, v) in s.seen.tag.iter().enumerate() {
            assert!(
                v.iter().all(|b| b.load(Ordering::SeqCst)),
                "side {} class {c}: a message never arrived",
                s.id
            );
        }
        let bad = s.seen.am_bad.lock().unwrap();
        assert!(bad.is_empty(), "side {}: active messages: {bad:?}", s.id);
        assert_eq!(
            s.seen.am_count.load(Ordering::SeqCst),
            THREADS * iters,
            "active messages"
        );
        assert!(s.seen.am.iter().all(|b| b.load(Ordering::SeqCst)));
        s.w.with(|w| {
            assert_eq!(
                w.tag_probe(0, 0, false),
                None,
                "an extra tag message at side {}",
                s.id
            );
            assert_eq!(
                w.stream_recv_data(s.eps[0]).unwrap(),
                None,
                "extra stream bytes"
            );
        })
        .unwrap();
        // The peer's threads left this side's memory so.
        let m = &s.mem;
        assert_eq!(
            read_u64(m, COUNTER),
            (THREADS * iters) as u64,
            "fetch-add total"
        );
        for t in 0..THREADS {
            let last = code(peer, t, iters - 1);
            assert_eq!(read_u64(m, swap_word(t)), last, "swap word {t}");
            assert_eq!(read_u64(m, cswap_word(t)), last, "cswap word {t}");
            let sum = (iters * (iters + 1) / 2) as u64;
            assert_eq!(read_u64(m, post_word(t)), sum, "atomic adds of thread {t}");
            let want = put_bytes(peer, t, iters - 1);
            // SAFETY: the slot is inside the mapping; the peers are done.
            let got = unsafe { std::slice::from_raw_parts(m.address().add(t * SLOT), want.len()) };
            assert!(
                got == &want[..],
                "the last put of thread {t} is not in memory"
            );
        }
        // Every fetch-add saw a different value: 0..n, each once.
        let f = &mut fetched[peer];
        f.sort_unstable();
        assert!(
            f.iter().copied().eq(0..(THREADS * iters) as u64),
            "fetch-add results"
        );
    }
    eprintln!(
        "{tr:?}: {} operations on 8 threads in {:.1?}",
        issued.load(Ordering::SeqCst),
        started.elapsed()
    );
}

#[test]
fn stress_shm() {
    stress(Transport::Shm);
}

#[test]
fn stress_tcp() {
    stress(Transport::Tcp);
}

#[test]
fn stress_udp() {
    stress(Transport::Udp);
}
