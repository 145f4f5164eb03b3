//! The progress thread serves peers while the application sleeps outside rucx.
//!
//! A target worker (thread mode multi, in a thread of its own) posts a 1 MiB receive,
//! prepares memory, and then sleeps in `std::thread::sleep` for `SLEEP`. Meanwhile an
//! initiator worker issues a put (completed by a flush), a get, a fetch-and-add (over
//! tcp and udp these are emulated: the target's CPU executes them) and a 1 MiB tag
//! send that goes by rendezvous. With the target's progress thread on, every operation
//! completes during the sleep (before `DURING`, well inside it); with it off, none
//! completes before the sleep ends. Every byte moved is checked.

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ucp::config::Thresh;
use ucp::{
    AtomicOp, AtomicSize, Buf, Config, Context, Features, ProgressThread, RmaPath, SharedWorker,
    ThreadMode, Worker,
};
use ucs::Status;
use uct::Transport;

const SLEEP: Duration = Duration::from_secs(2);
/// With the thread on, everything must be done this long after the sleep started.
const DURING: Duration = Duration::from_millis(1500);
const MSG: usize = 1 << 20;
const REGION: usize = 1 << 20;
const PUT_AT: usize = 0;
const GET_AT: usize = 256 << 10;
const RMA_LEN: usize = 64 << 10;
const AMO_AT: usize = 768 << 10;
const AMO_INIT: u64 = 1000;
const AMO_ADD: u64 = 7;
const TAG: u64 = 42;
const DEADLINE: Duration = Duration::from_secs(60);

/// The timing assertions need the CPU: one scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(167).wrapping_add(seed * 13) as u8)
        .collect()
}

fn ctx(t: Transport) -> Context {
    let cfg = Config {
        transports: vec![t],
        rndv_thresh: Thresh::Bytes(64 << 10),
        ..Config::default()
    };
    Context::with_config(
        Features::TAG | Features::RMA | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

/// What the target hands the initiator.
struct Target {
    address: Vec<u8>,
    rkey: Vec<u8>,
    base: u64,
}

/// Runs the scenario; returns how long after the start of the target's sleep each
/// operation the initiator issued completed (put+flush, get, fetch-add, tag send).
fn scenario(t: Transport, thread: bool, rma: bool) -> Vec<(&'static str, Duration)> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (info_tx, info_rx) = mpsc::channel::<Target>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (start_tx, start_rx) = mpsc::channel::<Instant>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (fin_tx, fin_rx) = mpsc::channel::<()>();
    let target = std::thread::spawn(move || {
        let c = ctx(t);
        let mut w = Worker::new(&c, ThreadMode::Multi).unwrap();
        let address = w.address();
        let mem = c.mem_alloc(REGION).unwrap();
        // SAFETY: the region is REGION bytes, mapped while `mem` lives; nobody else
        // touches it before the target hands its key out.
        let region = unsafe { std::slice::from_raw_parts_mut(mem.address(), REGION) };
        region[GET_AT..GET_AT + RMA_LEN].copy_from_slice(&pattern(RMA_LEN, 2));
        region[AMO_AT..AMO_AT + 8].copy_from_slice(&AMO_INIT.to_ne_bytes());
        let mut inbox = vec![0u8; MSG];
        // SAFETY: `inbox` outlives the request: it is waited for below.
        let rr = unsafe {
            w.tag_recv_nb(Buf::contig(inbox.as_mut_ptr(), MSG), TAG, u64::MAX, None)
                .unwrap()
        };
        let sw = SharedWorker::new(w).unwrap();
        let pt = thread.then(|| ProgressThread::start(&sw).unwrap());
        info_tx
            .send(Target {
                address,
                rkey: mem.rkey_pack(),
                base: mem.address() as u64,
            })
            .unwrap();
        go_rx.recv_timeout(DEADLINE).unwrap();
        // The initiator has its endpoint and waits; from now on only the thread serves.
        let start = Instant::now();
        start_tx.send(start).unwrap();
        std::thread::sleep(SLEEP);
        let deadline = Instant::now() + DEADLINE;
        let mut initiator_done = false;
        loop {
            let recv_done = sw
                .with(|w| {
                    w.progress();
                    w.request_test(rr).unwrap()
                })
                .unwrap();
            initiator_done |= done_rx.try_recv().is_ok();
            if initiator_done && recv_done.is_some() {
                assert_eq!(recv_done, Some(Status::Ok), "the 1 MiB receive");
                break;
            }
            assert!(Instant::now() < deadline, "target: timed out");
            sw.with(|w| w.wait(5)).unwrap().unwrap();
        }
        sw.with(|w| w.request_free(rr)).unwrap().unwrap();
        // The initiator goes only now: a peer closing its connection with unread bytes
        // resets it, which could cut what is still in flight to us.
        fin_tx.send(()).unwrap();
        drop(pt);
        assert!(inbox == pattern(MSG, 3), "the tag message differs");
        // SAFETY: as above; the initiator is done with the region.
        let region = unsafe { std::slice::from_raw_parts(mem.address(), REGION) };
        if rma {
            assert!(region[PUT_AT..PUT_AT + RMA_LEN] == pattern(RMA_LEN, 1)[..]);
            let word = u64::from_ne_bytes(region[AMO_AT..AMO_AT + 8].try_into().unwrap());
            assert_eq!(word, AMO_INIT + AMO_ADD);
        }
    });
    let times = initiator(t, rma, &info_rx, &go_tx, &start_rx, (&done_tx, &fin_rx));
    target.join().unwrap();
    times
}

fn initiator(
    t: Transport,
    rma: bool,
    info: &mpsc::Receiver<Target>,
    go: &mpsc::Sender<()>,
    start: &mpsc::Receiver<Instant>,
    (done, fin): (&mpsc::Sender<()>, &mpsc::Receiver<()>),
) -> Vec<(&'static str, Duration)> {
    let c = ctx(t);
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let tg = info.recv_timeout(DEADLINE).unwrap();
    let ep = w.ep_create(&tg.address).unwrap();
    let _ = w.address();
    w.ep_connect(ep).unwrap();
    let rk = w.rkey_unpack(ep, &tg.rkey).unwrap();
    if rma && t != Transport::Shm {
        assert_eq!(rk.rma_path(), RmaPath::Emulated, "{t:?}");
    }
    go.send(()).unwrap();
    // The target took its start instant and is about to sleep.
    let start = start.recv_timeout(DEADLINE).unwrap();
    let put_data = pattern(RMA_LEN, 1);
    let mut got = vec![0u8; RMA_LEN];
    let mut old = 0u64;
    let msg = pattern(MSG, 3);
    let mut pending = Vec::new();
    if rma {
        w.put_nbi(ep, &put_data, tg.base + PUT_AT as u64, &rk)
            .unwrap();
        pending.push(("put+flush", w.ep_flush_nb(ep, None).unwrap()));
        // SAFETY: `got` outlives the request (waited for below).
        let g = unsafe {
            w.get_nb(
                ep,
                Buf::contig(got.as_mut_ptr(), RMA_LEN),
                tg.base + GET_AT as u64,
                &rk,
                None,
            )
            .unwrap()
        };
        pending.push(("get", g));
        // SAFETY: `old` outlives the request (waited for below).
        let a = unsafe {
            w.atomic_fetch_nb(
                ep,
                AtomicOp::Add,
                AtomicSize::B64,
                AMO_ADD,
                0,
                Buf::contig((&mut old as *mut u64).cast(), 8),
                tg.base + AMO_AT as u64,
                &rk,
                None,
            )
            .unwrap()
        };
        pending.push(("fetch-add", a));
    }
    // SAFETY: `msg` outlives the request (waited for below).
    let s = unsafe {
        w.tag_send_nb(
            ep,
            Buf::contig(msg.as_ptr().cast_mut(), MSG),
            TAG,
            false,
            None,
        )
        .unwrap()
    };
    pending.push(("tag 1 MiB", s));
    let deadline = Instant::now() + DEADLINE;
    let mut times = Vec::new();
    while !pending.is_empty() {
        let n = w.progress();
        pending.retain(|&(what, r)| match r {
            None => {
                times.push((what, start.elapsed()));
                false
            }
            Some(r) => match w.request_test(r).unwrap() {
                None => true,
                Some(s) => {
                    assert_eq!(s, Status::Ok, "{what}");
                    w.request_free(r).unwrap();
                    times.push((what, start.elapsed()));
                    false
                }
            },
        });
        assert!(Instant::now() < deadline, "initiator: timed out");
        if n == 0 {
            w.wait(5).unwrap();
        }
    }
    if rma {
        assert!(got == pattern(RMA_LEN, 2), "get read other bytes");
        assert_eq!(old, AMO_INIT);
    }
    done.send(()).unwrap();
    // Serve the target until it has everything (see the target's side).
    let deadline = Instant::now() + DEADLINE;
    while fin.try_recv().is_err() {
        if w.progress() == 0 {
            w.wait(5).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "initiator: the target never finished"
        );
    }
    times
}

fn during(t: Transport, rma: bool) {
    for (what, after) in scenario(t, true, rma) {
        eprintln!("{t:?}, thread on: {what} done {after:?} into the sleep");
        assert!(
            after < DURING,
            "{t:?}: {what} completed {after:?} after the target fell asleep (thread on)"
        );
    }
}

fn after(t: Transport, rma: bool) {
    for (what, after) in scenario(t, false, rma) {
        eprintln!("{t:?}, thread off: {what} done {after:?} into the sleep");
        assert!(
            after >= SLEEP,
            "{t:?}: {what} completed {after:?} after the target fell asleep, before it woke (thread off)"
        );
    }
}

#[test]
fn tcp_thread_serves_during_sleep() {
    during(Transport::Tcp, true);
}

#[test]
fn tcp_without_thread_waits_for_target() {
    after(Transport::Tcp, true);
}

#[test]
fn udp_thread_serves_during_sleep() {
    during(Transport::Udp, true);
}

#[test]
fn udp_without_thread_waits_for_target() {
    after(Transport::Udp, true);
}

#[test]
fn shm_rendezvous_during_sleep() {
    during(Transport::Shm, false);
}

#[test]
fn shm_rendezvous_without_thread_waits_for_target() {
    after(Transport::Shm, false);
}

/// What the target's handler saw: the thread it ran on, header, data.
type Seen = std::sync::Arc<Mutex<Vec<(std::thread::ThreadId, Vec<u8>, Vec<u8>)>>>;

const AM_ID: u16 = 7;

fn am_size(i: usize) -> usize {
    [0, 1, 100, 5000, 200_000][i % 5] + i
}

/// The progress thread receives while the target sleeps but runs none of its callbacks:
/// the tag receive is complete (its bytes are in) when the target wakes, yet its
/// completion callback has not run, and no active-message handler has; the target's
/// next progress runs them all on the target's own thread, the active messages in the
/// order they were sent (eager and fragmented ones), every byte checked.
#[test]
fn callbacks_wait_for_the_application() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const AMS: usize = 20;
    let (info_tx, info_rx) = mpsc::channel::<Vec<u8>>();
    let (sent_tx, sent_rx) = mpsc::channel::<()>();
    let (fin_tx, fin_rx) = mpsc::channel::<()>();
    let target = std::thread::spawn(move || {
        let me = std::thread::current().id();
        let c = ctx(Transport::Tcp);
        let mut w = Worker::new(&c, ThreadMode::Multi).unwrap();
        let seen: Seen = Default::default();
        let s2 = seen.clone();
        w.am_set_handler(
            AM_ID,
            Some(Box::new(move |m: &ucp::AmMsg<'_>| {
                let data = match m.data {
                    ucp::AmData::Eager(d) => d.to_vec(),
                    ucp::AmData::Rndv { length } => panic!("rendezvous AM of {length} bytes"),
                };
                s2.lock()
                    .unwrap()
                    .push((std::thread::current().id(), m.header.to_vec(), data));
                ucp::AmAction::Done
            })),
        );
        let called = std::sync::Arc::new(Mutex::new(None));
        let c2 = called.clone();
        let mut inbox = vec![0u8; 64];
        let cb = ucp::Callback::Fn(Box::new(move |_, s, _| {
            *c2.lock().unwrap() = Some((std::thread::current().id(), s));
        }));
        // SAFETY: `inbox` outlives the request (completed before it goes).
        let rr = unsafe {
            w.tag_recv_nb(Buf::contig(inbox.as_mut_ptr(), 64), TAG, u64::MAX, Some(cb))
                .unwrap()
        };
        info_tx.send(w.address()).unwrap();
        let sw = SharedWorker::new(w).unwrap();
        let pt = ProgressThread::start(&sw).unwrap();
        // Everything is sent once this returns; the thread has all the time of the sleep.
        sent_rx.recv_timeout(DEADLINE).unwrap();
        std::thread::sleep(SLEEP);
        // Not a single call into the worker so far, except this look at the request.
        let status = sw.with(|w| w.request_test(rr).unwrap()).unwrap();
        assert_eq!(status, Some(Status::Ok), "the thread did not receive");
        assert!(
            called.lock().unwrap().is_none(),
            "callback ran before progress"
        );
        assert!(
            seen.lock().unwrap().is_empty(),
            "AM handler ran before progress"
        );
        let deadline = Instant::now() + DEADLINE;
        while seen.lock().unwrap().len() < AMS || called.lock().unwrap().is_none() {
            sw.with(|w| w.progress()).unwrap();
            assert!(Instant::now() < deadline, "target: timed out");
        }
        fin_tx.send(()).unwrap();
        drop(pt);
        assert_eq!(*called.lock().unwrap(), Some((me, Status::Ok)));
        assert!(inbox == pattern(64, 9));
        let seen = seen.lock().unwrap();
        for (i, (thread, header, data)) in seen.iter().enumerate() {
            assert_eq!(*thread, me, "AM {i} handled on another thread");
            assert_eq!(header[..], (i as u32).to_le_bytes(), "AM order");
            assert!(*data == pattern(am_size(i), 100 + i as u64), "AM {i} data");
        }
        assert_eq!(seen.len(), AMS);
    });
    let c = ctx(Transport::Tcp);
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = w
        .ep_create(&info_rx.recv_timeout(DEADLINE).unwrap())
        .unwrap();
    let _ = w.address();
    let payloads: Vec<Vec<u8>> = (0..AMS)
        .map(|i| pattern(am_size(i), 100 + i as u64))
        .collect();
    let mut reqs = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        // SAFETY: `payloads` outlive the requests (completed below).
        let r = unsafe {
            w.am_send_nb(
                ep,
                AM_ID,
                &(i as u32).to_le_bytes(),
                Buf::contig(p.as_ptr().cast_mut(), p.len()),
                ucp::AmSendFlags::default(),
                None,
            )
            .unwrap()
        };
        reqs.extend(r);
    }
    let small = pattern(64, 9);
    w.tag_send(ep, &small, TAG).unwrap();
    let deadline = Instant::now() + DEADLINE;
    while let Some(r) = reqs.pop() {
        while w.request_test(r).unwrap().is_none() {
            if w.progress() == 0 {
                w.wait(5).unwrap();
            }
            assert!(Instant::now() < deadline, "initiator: timed out");
        }
        assert_eq!(w.request_test(r).unwrap(), Some(Status::Ok));
        w.request_free(r).unwrap();
    }
    let f = w.flush_nb(None).unwrap();
    while f.is_some_and(|f| w.request_test(f).unwrap().is_none()) {
        if w.progress() == 0 {
            w.wait(5).unwrap();
        }
        assert!(Instant::now() < deadline, "initiator: flush timed out");
    }
    sent_tx.send(()).unwrap();
    while fin_rx.try_recv().is_err() {
        if w.progress() == 0 {
            w.wait(5).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "initiator: the target never finished"
        );
    }
    target.join().unwrap();
}

/// `ProgressThread::from_config` follows the context's configuration (the
/// `UCX_RUCX_PROGRESS_THREAD` variable, when the configuration comes from the
/// environment).
#[test]
fn from_config_follows_the_configuration() {
    for on in [false, true] {
        let cfg = Config {
            transports: vec![Transport::Tcp],
            progress_thread: on,
            ..Config::default()
        };
        let c = Context::with_config(Features::TAG, cfg, uct::IfaceConfig::default()).unwrap();
        let sw = SharedWorker::new(Worker::new(&c, ThreadMode::Multi).unwrap()).unwrap();
        let pt = ProgressThread::from_config(&sw).unwrap();
        assert_eq!(pt.is_some(), on);
    }
}
