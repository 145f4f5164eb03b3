//! Multithreaded protocol-layer tests: ucx_perftest's `-T threads -M mode`, and the
//! pattern of task runtimes (LCI): T application threads per process, each with one
//! endpoint and its own tag, ping-ponging (`tag_lat`) or streaming windows of messages
//! (`tag_mr`/`tag_bw`) with its counterpart in the peer process, all through one
//! [`SharedWorker`]; optionally with ucp's [`ProgressThread`] in each process. Every
//! application thread waits the same way with or without it: it tests its ticket and, if
//! the operation is not done, takes a try-locked turn of progress itself (returning at
//! once when another thread is in the worker). The progress thread stays asleep while
//! the application keeps entering the worker, so what the option measures is the cost of
//! having one beside an application that waits actively (as an MPI library's progress
//! thread sits beside ranks that wait in MPI calls).
//!
//! Both processes run the same code with the same options (the responder gets them on
//! its command line); the channel carries the worker addresses, a start signal and the
//! responder's verdict. Every received message is checked byte by byte (its pattern names
//! the thread and the iteration), outside no timing: the check is part of the measured
//! loop, as it is cheap at the small sizes these tests are for.

use crate::channel::{Channel, Msg};
use crate::handshake;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use ucp::shared::{Issued, Outcome, Ticket};
use ucp::{Buf, Config, Context, Ep, Features, ProgressThread, SharedWorker, ThreadMode, Worker};
use ucs::{Result, Status};

/// The hello's transport for these tests.
const MT: &str = "ucp-mt";
const TAG_BASE: u64 = 0x1337_b000;
const ACK_BIT: u64 = 1 << 40;

/// Which test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtTest {
    /// Ping-pong per thread.
    Lat,
    /// Windows of sends per thread, each answered by one acknowledgement.
    Rate,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct MtOptions {
    pub test: MtTest,
    pub threads: usize,
    pub mode: ThreadMode,
    pub progress_thread: bool,
    pub size: usize,
    pub iterations: u64,
    pub warmup: u64,
    pub window: u32,
}

/// What the initiator measured.
#[derive(Clone, Debug)]
pub struct MtResult {
    pub transport: String,
    /// One-way latency (half a round trip) averaged over threads, in µs (`Lat`), or the
    /// time per message of one thread (`Rate`).
    pub latency_us: f64,
    /// Messages per second, all threads together (both directions of a ping-pong count).
    pub rate: f64,
    /// Messages per second of each thread.
    pub per_thread: Vec<f64>,
}

/// The byte `i` of message `iter` of thread `t`.
fn byte(t: usize, iter: u64, i: usize) -> u8 {
    (i as u64 ^ iter.wrapping_mul(31) ^ (t as u64) << 5) as u8
}

fn fill(buf: &mut [u8], t: usize, iter: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte(t, iter, i);
    }
}

fn check(buf: &[u8], t: usize, iter: u64, o: Outcome) -> Result<()> {
    if o.status != Status::Ok || o.info.length != buf.len() {
        tracing::error!(
            "thread {t} message {iter}: status {:?}, {} bytes of {}",
            o.status,
            o.info.length,
            buf.len()
        );
        return Err(Status::IoError);
    }
    if let Some(i) = (0..buf.len()).find(|&i| buf[i] != byte(t, iter, i)) {
        tracing::error!("thread {t} message {iter}: byte {i} differs");
        return Err(Status::IoError);
    }
    Ok(())
}

/// How a thread waits for its tickets: busy-polling (test, then a try of progress),
/// yielding now and then.
struct Waiter<'a> {
    w: &'a SharedWorker,
    deadline: Instant,
}

impl Waiter<'_> {
    fn finish(&self, i: Issued) -> Result<Outcome> {
        let t = match i {
            Issued::Done(o) => return Ok(o),
            Issued::Pending(t) => t,
        };
        self.spin(t)
    }

    fn spin(&self, mut t: Ticket) -> Result<Outcome> {
        let mut n = 0u32;
        loop {
            match self.w.test(t) {
                Ok(o) => return Ok(o),
                Err(back) => t = back,
            }
            // Each thread progresses (a try: 0 at once when another thread is in the
            // worker); busy-polling, as ucx_perftest does. A progress thread, if any,
            // sees the worker progressed and stays asleep.
            if self.w.progress().unwrap_or(0) > 0 {
                continue;
            }
            n += 1;
            if n % 64 == 0 {
                // Two cores run more threads than that here: let the others run.
                std::thread::yield_now();
                if n % 4096 == 0 && Instant::now() > self.deadline {
                    self.w.forget(t);
                    return Err(Status::TimedOut);
                }
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// A buffer for the operations of one thread's run, leaked on purpose: an operation that
/// an early error leaves behind (a failed send after a posted receive, a ticket given up
/// at the deadline) may still write or read it, so it must outlive every request, and a
/// run happens once per process.
fn run_buffer(len: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; len].into_boxed_slice())
}

/// The state both sides share.
struct Side {
    w: SharedWorker,
    eps: Vec<Ep>,
    transport: String,
}

fn side<C: Channel>(chan: &mut C, o: &MtOptions, timeout: Duration) -> Result<Side> {
    let ctx = Context::with_config(
        Features::TAG,
        Config::from_env()?,
        uct::IfaceConfig::from_env()?,
    )?;
    let mut w = Worker::new(&ctx, o.mode)?;
    handshake::send_hello(chan, MT, w.address())?;
    let h = handshake::recv_hello(chan, timeout)?;
    handshake::check_hello(&h, MT)?;
    let mut eps = Vec::with_capacity(o.threads);
    for _ in 0..o.threads {
        let ep = w.ep_create(&h.address)?;
        w.ep_connect(ep)?;
        eps.push(ep);
    }
    let transport = w
        .ep_transport(eps[0])?
        .map_or_else(|| "?".into(), |t| t.name().to_string());
    Ok(Side {
        w: SharedWorker::new(w)?,
        eps,
        transport,
    })
}

/// Runs `body` on `o.threads` threads (beside a progress thread if asked) and returns
/// what each thread returned.
fn run_threads<T: Send>(
    s: &Side,
    o: &MtOptions,
    body: impl Fn(usize, &Waiter<'_>) -> Result<T> + Sync,
    timeout: Duration,
) -> Result<Vec<T>> {
    let start = Barrier::new(o.threads);
    let deadline = Instant::now() + timeout;
    // Stopped and joined when dropped, after the application threads are done.
    let _progress = match o.progress_thread {
        true => Some(ProgressThread::start(&s.w)?),
        false => None,
    };
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..o.threads)
            .map(|t| {
                let (body, start) = (&body, &start);
                sc.spawn(move || {
                    let waiter = Waiter { w: &s.w, deadline };
                    start.wait();
                    body(t, &waiter)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(Status::IoError)))
            .collect()
    })
}

fn tag(t: usize) -> u64 {
    TAG_BASE + t as u64
}

/// The initiator's side: runs the test and returns the figures.
pub fn initiator<C: Channel>(chan: &mut C, o: &MtOptions, timeout: Duration) -> Result<MtResult> {
    let s = side(chan, o, timeout)?;
    // The responder has posted its first receives when it says Ready.
    match handshake::expect_reply(chan, timeout, "ready")? {
        Msg::Ready { .. } => {}
        m => {
            tracing::error!("expected ready, got {m:?}");
            return Err(Status::InvalidParam);
        }
    }
    let total = o.warmup + o.iterations;
    let times = run_threads(
        &s,
        o,
        |t, wt| {
            let sbuf = run_buffer(o.size);
            let rbuf = run_buffer(o.size);
            let ep = s.eps[t];
            let mut t0 = Instant::now();
            match o.test {
                MtTest::Lat => {
                    for it in 0..total {
                        if it == o.warmup {
                            t0 = Instant::now();
                        }
                        fill(sbuf, t, it);
                        // SAFETY: both buffers are leaked (`run_buffer`), and each
                        // operation is finished before the next iteration touches them.
                        let buf = unsafe { Buf::contig(rbuf.as_mut_ptr(), o.size) };
                        let r = s.w.tag_recv_nb(buf, tag(t), u64::MAX)?;
                        // SAFETY: as above.
                        let buf = unsafe { Buf::contig(sbuf.as_mut_ptr(), o.size) };
                        let x = s.w.tag_send_nb(ep, buf, tag(t), false)?;
                        wt.finish(x)?;
                        let got = wt.finish(r)?;
                        check(rbuf, t, it, got)?;
                    }
                }
                MtTest::Rate => {
                    let window = o.window.max(1) as u64;
                    let ack = run_buffer(8);
                    let mut pending = Vec::with_capacity(window as usize);
                    let bufs: Vec<&'static mut [u8]> = (0..window)
                        .map(|k| {
                            let b = run_buffer(o.size);
                            b.iter_mut()
                                .enumerate()
                                .for_each(|(i, x)| *x = byte(t, k, i));
                            b
                        })
                        .collect();
                    let mut it = 0;
                    while it < total {
                        if it >= o.warmup && it < o.warmup + window {
                            t0 = Instant::now();
                        }
                        // SAFETY: `ack` is leaked (`run_buffer`); read after the receive
                        // completes (below).
                        let buf = unsafe { Buf::contig(ack.as_mut_ptr(), 8) };
                        let a = s.w.tag_recv_nb(buf, tag(t) | ACK_BIT, u64::MAX)?;
                        for k in 0..window {
                            let b = &bufs[k as usize];
                            // SAFETY: `bufs` are leaked (`run_buffer`) and only read.
                            let buf = unsafe { Buf::contig(b.as_ptr().cast_mut(), o.size) };
                            let x = s.w.tag_send_nb(ep, buf, tag(t), false)?;
                            pending.push(x);
                        }
                        for x in pending.drain(..) {
                            wt.finish(x)?;
                        }
                        let got = wt.finish(a)?;
                        if got.status != Status::Ok || ack != (it / window).to_le_bytes() {
                            tracing::error!("thread {t}: bad acknowledgement");
                            return Err(Status::IoError);
                        }
                        it += window;
                    }
                }
            }
            Ok(t0.elapsed())
        },
        timeout,
    )?;
    chan.send(&Msg::Done)?;
    match handshake::expect_reply(chan, timeout, "verdict")? {
        Msg::Verdict { error: None } => {}
        Msg::Verdict { error: Some(e) } => {
            tracing::error!("the responder found: {e}");
            return Err(Status::IoError);
        }
        m => {
            tracing::error!("expected a verdict, got {m:?}");
            return Err(Status::InvalidParam);
        }
    }
    let per_msg = match o.test {
        MtTest::Lat => 2.0,
        MtTest::Rate => 1.0,
    };
    let measured = match o.test {
        MtTest::Lat => o.iterations,
        MtTest::Rate => (o.iterations / o.window.max(1) as u64) * o.window.max(1) as u64,
    }
    .max(1) as f64;
    let per_thread: Vec<f64> = times
        .iter()
        .map(|d| per_msg * measured / d.as_secs_f64())
        .collect();
    let mean_s = times.iter().map(|d| d.as_secs_f64()).sum::<f64>() / times.len() as f64;
    Ok(MtResult {
        transport: s.transport.clone(),
        latency_us: mean_s * 1e6 / (per_msg * measured),
        rate: per_thread.iter().sum(),
        per_thread,
    })
}

/// The responder's side: answers every message and checks what it received.
pub fn responder<C: Channel>(chan: &mut C, o: &MtOptions, timeout: Duration) -> Result<()> {
    let s = side(chan, o, timeout)?;
    let total = o.warmup + o.iterations;
    chan.send(&Msg::Ready { region: None })?;
    let result = run_threads(
        &s,
        o,
        |t, wt| {
            let sbuf = run_buffer(o.size);
            let rbuf = run_buffer(o.size);
            let ep = s.eps[t];
            match o.test {
                MtTest::Lat => {
                    for it in 0..total {
                        // SAFETY: `rbuf` is leaked (`run_buffer`); read after the receive
                        // completes (below).
                        let buf = unsafe { Buf::contig(rbuf.as_mut_ptr(), o.size) };
                        let r = s.w.tag_recv_nb(buf, tag(t), u64::MAX)?;
                        let got = wt.finish(r)?;
                        check(rbuf, t, it, got)?;
                        fill(sbuf, t, it);
                        // SAFETY: `sbuf` is leaked; written again only after the send
                        // completes (below).
                        let buf = unsafe { Buf::contig(sbuf.as_mut_ptr(), o.size) };
                        let x = s.w.tag_send_nb(ep, buf, tag(t), false)?;
                        wt.finish(x)?;
                    }
                }
                MtTest::Rate => {
                    let window = o.window.max(1) as u64;
                    let mut bufs: Vec<&'static mut [u8]> =
                        (0..window).map(|_| run_buffer(o.size)).collect();
                    let ack = run_buffer(8);
                    let mut pending = Vec::with_capacity(window as usize);
                    let mut it = 0;
                    while it < total {
                        for b in bufs.iter_mut() {
                            // SAFETY: `bufs` are leaked (`run_buffer`); read after every
                            // receive completes (below).
                            let buf = unsafe { Buf::contig(b.as_mut_ptr(), o.size) };
                            pending.push(s.w.tag_recv_nb(buf, tag(t), u64::MAX)?);
                        }
                        for (k, r) in pending.drain(..).enumerate() {
                            let got = wt.finish(r)?;
                            check(bufs[k], t, k as u64, got)?;
                        }
                        ack.copy_from_slice(&(it / window).to_le_bytes());
                        // SAFETY: `ack` is leaked; written again only after the send
                        // completes (below).
                        let buf = unsafe { Buf::contig(ack.as_ptr().cast_mut(), 8) };
                        let x = s.w.tag_send_nb(ep, buf, tag(t) | ACK_BIT, false)?;
                        wt.finish(x)?;
                        it += window;
                    }
                }
            }
            Ok(())
        },
        timeout,
    );
    match chan.recv(timeout)? {
        Msg::Done => {}
        m => {
            tracing::error!("expected done, got {m:?}");
            return Err(Status::InvalidParam);
        }
    }
    // Let the last sends of this side reach the initiator before the worker goes.
    let flush = s.w.flush_nb(None).and_then(|i| match i {
        Issued::Done(o) => Ok(o),
        Issued::Pending(t) => s.w.wait(t, timeout),
    });
    let error = match (&result, flush) {
        (Err(e), _) => Some(format!("responder: {e}")),
        (Ok(_), Err(e)) => Some(format!("responder flush: {e}")),
        _ => None,
    };
    chan.send(&Msg::Verdict { error })
}
