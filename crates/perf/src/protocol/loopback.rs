//! Loopback: every protocol-layer test in one process, on one worker whose endpoint leads
//! back to itself (rucx-perftest `-l`, the counterpart of ucx_perftest's `-l`). ucp
//! reaches its own worker through the `self` transport when `UCX_TLS` allows it (else
//! through whatever else reaches it, such as shared memory to this same process).
//!
//! There is no peer: the process is both sides, one operation after the other.
//!
//! - tag_lat, tag_sync_lat, stream_lat, am_lat: one iteration is a send followed by the
//!   receive that takes it (tag and stream: the receive posted right after the send; AM:
//!   the handler), both complete before the next iteration. ucx_perftest's loopback does
//!   the same, so the two count the same work per iteration.
//! - tag_bw, tag_mr, stream_bw, am_bw: a send and its receive per iteration, at most
//!   `window` of each outstanding.
//! - put_lat: put this round's number into this process's own region and wait until it
//!   shows there. put_bw, get_lat, get_bw: the initiator's loops of the two-process tests,
//!   aimed at this process's own region.
//! - put_signal_lat: put with a signal into this process's own region and wait until its
//!   word counts the round.
//! - atomics: the initiator's loops of the two-process tests on this process's own word
//!   (add_lat: post an add and wait until the word counts it).
//!
//! Checks, as in the two-process tests: the last message of a message test lands in a
//! poisoned buffer and is checked byte by byte (AM: every message's length, the last one's
//! bytes); a put test checks the region afterwards, a get test ends with one more get into
//! a poisoned buffer, and an atomic test checks every fetched value and the final word.
//! Waits are bounded by the timeout as everywhere else.

use super::am::{self, AmRx, AM_PING};
use super::amo::{check_word, Fetched};
use super::cqwin::{post_cq, CqWindow, CHECKED};
use super::rma::{check_region, seq};
use super::stream::{self, exchange};
use super::wait::{done, drain_to, flush, wait_one, wait_pair};
use super::{check_message, open_worker, Buffers, MsgBuf, UcpPeer, MASK, TAG};
use crate::channel::{Channel, Msg};
use crate::params::Params;
use crate::registry::TestId;
use crate::stats::{stride_of, Stamps, Timing};
use crate::transport::wait::{check_stall, SPINS};
use std::collections::VecDeque;
use std::time::Duration;
use ucp::stream::StreamRecv;
use ucp::{Config, RecvPosted, Request, Worker};
use ucs::{Result, Status};

/// The channel of a loopback run: nobody is on the other end. Messages sent are dropped,
/// and none ever arrives (a wait on it times out), so the waits of the tests, which look
/// at the channel only when they stall, run unchanged and stay bounded by their timeout.
#[derive(Debug, Default)]
pub struct NoPeer;

impl Channel for NoPeer {
    fn send(&mut self, _msg: &Msg) -> Result<()> {
        Ok(())
    }

    fn recv(&mut self, timeout: Duration) -> Result<Msg> {
        std::thread::sleep(timeout);
        Err(Status::TimedOut)
    }

    fn try_recv(&mut self) -> Result<Option<Msg>> {
        Ok(None)
    }
}

impl UcpPeer<NoPeer> {
    /// A worker with an endpoint to itself, for loopback runs of every protocol-layer
    /// test; `timeout` bounds every wait of a test. The configuration comes from the
    /// environment (`UCX_*`).
    pub fn loopback(timeout: Duration) -> Result<UcpPeer<NoPeer>> {
        Self::loopback_with(timeout, None)
    }

    /// [`UcpPeer::loopback`] with an explicit ucp configuration (`None`: the
    /// environment's).
    pub fn loopback_with(timeout: Duration, config: Option<&Config>) -> Result<UcpPeer<NoPeer>> {
        let mut worker = open_worker(config)?;
        let address = worker.address();
        let mut peer = Self::attach(worker, &address, NoPeer, timeout)?;
        peer.loopback = true;
        Ok(peer)
    }
}

/// Why a message that should fill `len` bytes has `n`, or `None`.
fn check_len(n: usize, len: usize) -> Option<String> {
    (n != len).then(|| format!("a message of {n} bytes, expected {len}"))
}

impl<C: Channel> UcpPeer<C> {
    /// Runs test `p` (resolved) whole in this process.
    pub(super) fn loopback_run(&mut self, p: &Params) -> Result<Timing> {
        match p.test {
            TestId::TagLat | TestId::TagSyncLat => self.lb_tag_lat(p),
            TestId::TagBw | TestId::TagMr => self.lb_tag_bw(p),
            TestId::StreamLat => self.lb_stream_lat(p),
            TestId::StreamBw => self.lb_stream_bw(p),
            TestId::UcpAmLat | TestId::UcpAmBw => {
                let r = self.lb_am(p);
                self.worker.am_set_handler(AM_PING, None);
                r
            }
            TestId::UcpPutLat | TestId::UcpPutBw | TestId::UcpGetLat | TestId::UcpGetBw => {
                self.lb_rma(p)
            }
            t if t.is_atomic() => self.lb_amo(p),
            TestId::PutSignalLat => self.lb_put_signal(p),
            _ => Err(Status::InvalidParam),
        }
    }

    /// Maps this side's region for a one-sided test (`len` bytes, zeroed) and makes it
    /// the target of the test's operations.
    fn lb_region(&mut self, len: usize, amo: bool, test: TestId) -> Result<()> {
        let ctx = self.worker.context().clone();
        self.bufs.mine = Some(MsgBuf::mapped(&ctx, len)?);
        let region = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        self.path = Some(self.attach_peer(region.as_ref(), test, amo)?);
        Ok(())
    }

    // ---- tag ---------------------------------------------------------------------------

    fn lb_tag_lat(&mut self, p: &Params) -> Result<Timing> {
        let sync = p.test == TestId::TagSyncLat;
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let round = |w: &mut Worker, chan: &mut C| {
            let (s, r) = (
                w.tag_send_nb(ep, sb.ucp(), TAG, sync, None)?,
                w.tag_recv_nbx(rb.ucp(), TAG, MASK, None)?,
            );
            match (s, r) {
                // Both done in their calls: nothing to wait for.
                (None, RecvPosted::Done(Status::Ok, info)) => Ok(info),
                (s, r) => wait_pair(w, chan, t, "the message", s, r),
            }
        };
        for _ in 0..p.warmup {
            round(w, chan)?;
        }
        let mut st = Stamps::new(p.iterations, 1);
        st.start();
        for _ in 0..p.iterations {
            round(w, chan)?;
            st.mark();
        }
        let timing = st.finish();
        rb.poison();
        let info = round(w, chan)?;
        fail_on(p.test, check_message("the last message", rb, info))?;
        Ok(timing)
    }

    fn lb_tag_bw(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            check: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let window = p.window.max(1) as usize;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb), Some(cb)) = (&self.bufs.send, &self.bufs.recv, &self.bufs.check)
        else {
            return Err(Status::NoMemory);
        };
        let mut sends: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut recvs: VecDeque<Request> = VecDeque::with_capacity(window);
        // With --cq or --callbacks: sends and receives are counted together (a window of each).
        let mut cqw = if p.cq || p.callbacks {
            Some(CqWindow::new(w, 2 * window, p.callbacks)?)
        } else {
            None
        };
        let mut phase = |w: &mut Worker,
                         chan: &mut C,
                         count: u64,
                         mut mark: Option<&mut Stamps>|
         -> Result<Option<String>> {
            let timed = mark.is_some();
            if let Some(q) = cqw.as_mut() {
                for k in 0..count {
                    if q.inflight >= 2 * window {
                        q.drain_to(w, chan, t, 2 * window - 2, "an operation")?;
                    }
                    let check = timed && k + 1 == count;
                    let b = if check { cb } else { rb };
                    post_cq(w, Some(ep), sb, q, 0)?;
                    post_cq(w, None, b, q, if check { CHECKED } else { 0 })?;
                    if let Some(st) = mark.as_deref_mut() {
                        st.mark();
                    }
                }
                q.drain_to(w, chan, t, 0, "an operation")?;
                return match (timed, q.checked.take()) {
                    (false, _) => Ok(None),
                    (true, Some(info)) => Ok(check_message("the last message", cb, info)),
                    (true, None) => Err(Status::IoError),
                };
            }
            let mut last = None;
            for k in 0..count {
                if sends.len() >= window {
                    drain_to(w, chan, t, &mut sends, window - 1)?;
                }
                if recvs.len() >= window {
                    drain_to(w, chan, t, &mut recvs, window - 1)?;
                }
                // The last message of the timed run lands in the check buffer.
                let check = timed && k + 1 == count;
                let b = if check { cb } else { rb };
                let (s, r) = (
                    w.tag_send_nb(ep, sb.ucp(), TAG, false, None)?,
                    w.tag_recv_nbx(b.ucp(), TAG, MASK, None)?,
                );
                if let Some(s) = s {
                    sends.push_back(s);
                }
                match r {
                    _ if check => last = Some(r),
                    RecvPosted::Pending(r) => recvs.push_back(r),
                    RecvPosted::Done(Status::Ok, _) => {}
                    RecvPosted::Done(s, _) => {
                        tracing::error!("a message: the receive completed with {s}");
                        return Err(s);
                    }
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            drain_to(w, chan, t, &mut sends, 0)?;
            drain_to(w, chan, t, &mut recvs, 0)?;
            match last {
                Some(r) => {
                    let info = wait_pair(w, chan, t, "the last message", None, r)?;
                    Ok(check_message("the last message", cb, info))
                }
                None => Ok(None),
            }
        };
        if p.warmup > 0 {
            phase(w, chan, p.warmup, None)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        let error = phase(w, chan, p.iterations, Some(&mut st))?;
        let timing = st.finish();
        fail_on(p.test, error)?;
        Ok(timing)
    }

    // ---- stream ------------------------------------------------------------------------

    fn lb_stream_lat(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let round = |w: &mut Worker, chan: &mut C| -> Result<usize> {
            exchange(w, chan, t, ep, Some(sb), rb)
        };
        for _ in 0..p.warmup {
            round(w, chan)?;
        }
        let mut st = Stamps::new(p.iterations, 1);
        st.start();
        for _ in 0..p.iterations {
            round(w, chan)?;
            st.mark();
        }
        let timing = st.finish();
        rb.poison();
        let n = round(w, chan)?;
        fail_on(p.test, stream::check("the last message", rb, n))?;
        Ok(timing)
    }

    fn lb_stream_bw(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            check: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let window = p.window.max(1) as usize;
        let len = p.size;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb), Some(cb)) = (&self.bufs.send, &self.bufs.recv, &self.bufs.check)
        else {
            return Err(Status::NoMemory);
        };
        let mut sends: VecDeque<Request> = VecDeque::with_capacity(window);
        // Receives not complete in the call, with whether they are the one checked.
        let mut recvs: VecDeque<(Request, bool)> = VecDeque::with_capacity(window);
        let mut phase = |w: &mut Worker,
                         chan: &mut C,
                         count: u64,
                         mut mark: Option<&mut Stamps>|
         -> Result<Option<String>> {
            let timed = mark.is_some();
            let mut error = None;
            let mut note = |e: Option<String>| {
                if error.is_none() {
                    error = e;
                }
            };
            let settle = |w: &mut Worker,
                          chan: &mut C,
                          recvs: &mut VecDeque<(Request, bool)>,
                          limit: usize|
             -> Result<Option<String>> {
                let mut found = None;
                while recvs.len() > limit {
                    let Some((r, checked)) = recvs.pop_front() else {
                        break;
                    };
                    let n = wait_one(w, chan, t, "stream data", Some(r))?.length;
                    let e = if checked {
                        stream::check("the last message", cb, n)
                    } else {
                        check_len(n, len)
                    };
                    found = found.or(e);
                }
                Ok(found)
            };
            for k in 0..count {
                if sends.len() >= window {
                    drain_to(w, chan, t, &mut sends, window - 1)?;
                }
                if recvs.len() >= window {
                    note(settle(w, chan, &mut recvs, window - 1)?);
                }
                let checked = timed && k + 1 == count;
                let b = if checked { cb } else { rb };
                let (s, r) = (
                    w.stream_send_nb(ep, sb.ucp(), None)?,
                    w.stream_recv_nb(ep, b.ucp(), true, None)?,
                );
                if let Some(s) = s {
                    sends.push_back(s);
                }
                match r {
                    StreamRecv::Done(n) if checked => {
                        note(stream::check("the last message", cb, n));
                    }
                    StreamRecv::Done(n) => note(check_len(n, len)),
                    StreamRecv::Pending(r) => recvs.push_back((r, checked)),
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            drain_to(w, chan, t, &mut sends, 0)?;
            note(settle(w, chan, &mut recvs, 0)?);
            Ok(error)
        };
        if p.warmup > 0 {
            fail_on(p.test, phase(w, chan, p.warmup, None)?)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        let error = phase(w, chan, p.iterations, Some(&mut st))?;
        let timing = st.finish();
        fail_on(p.test, error)?;
        Ok(timing)
    }

    // ---- active messages ---------------------------------------------------------------

    fn lb_am(&mut self, p: &Params) -> Result<Timing> {
        let total = p.warmup + p.iterations;
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            // Rendezvous data is pulled here (the message checked: poisoned first).
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let rx = am::install(&mut self.worker, AM_PING, Some(p.size), total);
        let window = if p.test == TestId::UcpAmLat {
            1
        } else {
            p.window.max(1) as usize
        };
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let mut sends: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut sent = 0u64;
        let mut phase = |w: &mut Worker,
                         chan: &mut C,
                         count: u64,
                         mut mark: Option<&mut Stamps>|
         -> Result<()> {
            for _ in 0..count {
                if let Some(r) = am::send(w, ep, AM_PING, sb)? {
                    sends.push_back(r);
                }
                sent += 1;
                if window == 1 {
                    // Latency: the handler has run (and rendezvous data been pulled)
                    // before the next send.
                    rx.wait_for(w, chan, t, sent, rb, total)?;
                }
                // Nothing to drain with no send outstanding (always so in latency runs,
                // whose sends complete in the call): no call.
                if !sends.is_empty() {
                    am_drain(w, chan, t, &rx, rb, total, &mut sends, window - 1)?;
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            am_drain(w, chan, t, &rx, rb, total, &mut sends, 0)?;
            rx.wait_for(w, chan, t, sent, rb, total)
        };
        if p.warmup > 0 {
            phase(w, chan, p.warmup, None)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        phase(w, chan, p.iterations, Some(&mut st))?;
        let timing = st.finish();
        fail_on(p.test, rx.verdict(total))?;
        Ok(timing)
    }

    // ---- remote memory access ----------------------------------------------------------

    fn lb_rma(&mut self, p: &Params) -> Result<Timing> {
        let put = matches!(p.test, TestId::UcpPutLat | TestId::UcpPutBw);
        self.bufs = Buffers {
            send: put.then(|| MsgBuf::pattern(p.size)).transpose()?,
            recv: (!put).then(|| MsgBuf::poisoned(p.size)).transpose()?,
            ..Default::default()
        };
        self.lb_region(p.size, false, p.test)?;
        let Some(mine) = &self.bufs.mine else {
            return Err(Status::NoMemory);
        };
        match p.test {
            // Gets read the pattern; put_bw must overwrite every poisoned byte; put_lat's
            // round numbers start from a zeroed last byte.
            TestId::UcpGetLat | TestId::UcpGetBw => mine.fill_pattern(),
            TestId::UcpPutBw => mine.poison(),
            _ => {}
        }
        let timing = match p.test {
            TestId::UcpPutLat => self.put_lat_rounds(p)?,
            TestId::UcpPutBw => self.rma_stream(p, true)?,
            _ => self.rma_stream(p, false)?,
        };
        let error = match p.test {
            TestId::UcpGetLat | TestId::UcpGetBw => self.last_get()?,
            _ => {
                flush(&mut self.worker, &mut self.chan, self.timeout, self.ep)?;
                let last = (p.test == TestId::UcpPutLat).then(|| seq(p.warmup + p.iterations - 1));
                self.bufs.mine.as_ref().and_then(|m| check_region(m, last))
            }
        };
        fail_on(p.test, error)?;
        Ok(timing)
    }

    // ---- atomics -----------------------------------------------------------------------

    fn lb_amo(&mut self, p: &Params) -> Result<Timing> {
        let window = p.window.max(1) as usize;
        self.bufs = Buffers {
            // Result slots of fetching operations (8 bytes each, whatever the size).
            recv: Some(MsgBuf::poisoned(8 * window)?),
            ..Default::default()
        };
        self.lb_region(p.size, true, p.test)?;
        let mut fetched = Fetched::default();
        let timing = match p.test {
            TestId::AddLat => self.add_lat_initiator(p)?,
            TestId::AddMr => self.add_mr_initiator(p)?,
            _ => self.fetch_initiator(p, &mut fetched)?,
        };
        flush(&mut self.worker, &mut self.chan, self.timeout, self.ep)?;
        let Some(mine) = &self.bufs.mine else {
            return Err(Status::NoMemory);
        };
        let total = p.warmup + p.iterations;
        let error = fetched
            .verdict()
            .or_else(|| check_word("the word", mine.word(p.size), total));
        fail_on(p.test, error)?;
        Ok(timing)
    }
}

/// Frees the completed AM sends at the front of `sends`, pulling the data of rendezvous
/// messages that arrived meanwhile (a rendezvous send completes only once its data is
/// pulled, which in loopback this same thread does), until at most `limit` are left.
#[allow(clippy::too_many_arguments)]
fn am_drain<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    rx: &AmRx,
    rb: &MsgBuf,
    check_at: u64,
    sends: &mut VecDeque<Request>,
    limit: usize,
) -> Result<()> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        while let Some(&r) = sends.front() {
            if !done(w, r, "a send")? {
                break;
            }
            w.request_free(r)?;
            sends.pop_front();
        }
        if sends.len() <= limit {
            return Ok(());
        }
        rx.pull(w, chan, timeout, rb, check_at)?;
        if w.progress() > 0 {
            (n, since) = (0, None);
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, "AM sends")?;
        }
    }
}

/// An error of test `test` when a check found something wrong.
fn fail_on(test: TestId, error: Option<String>) -> Result<()> {
    match error {
        None => Ok(()),
        Some(e) => {
            tracing::error!("{test}: {e}");
            Err(Status::IoError)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Api, Layout};

    /// Every protocol-layer test in loopback, eager and rendezvous sizes, windows of one
    /// and more, 4- and 8-byte atomics, each checked by the test itself.
    #[test]
    fn every_test_in_loopback() {
        let mut lb = UcpPeer::loopback(Duration::from_secs(60)).unwrap();
        assert_eq!(lb.transport(), "self");
        let cases = [
            (TestId::TagLat, 8, 0),
            (TestId::TagLat, 300_000, 0),
            (TestId::TagSyncLat, 8, 0),
            (TestId::TagSyncLat, 20_000, 0),
            (TestId::TagBw, 64 << 10, 0),
            (TestId::TagBw, 100, 1),
            (TestId::TagMr, 8, 0),
            (TestId::StreamLat, 8, 0),
            (TestId::StreamLat, 70_000, 0),
            (TestId::StreamBw, 64 << 10, 0),
            (TestId::StreamBw, 3, 1),
            (TestId::UcpAmLat, 8, 0),
            (TestId::UcpAmLat, 300_000, 0),
            (TestId::UcpAmBw, 8, 0),
            (TestId::UcpAmBw, 1 << 20, 2),
            (TestId::UcpPutLat, 8, 0),
            (TestId::UcpPutLat, 5000, 0),
            (TestId::UcpPutBw, 64 << 10, 0),
            (TestId::UcpGetLat, 8, 0),
            (TestId::UcpGetBw, 100_000, 3),
            (TestId::AddLat, 8, 0),
            (TestId::AddLat, 4, 0),
            (TestId::FaddLat, 8, 0),
            (TestId::SwapLat, 4, 0),
            (TestId::CswapLat, 8, 0),
            (TestId::AddMr, 8, 7),
            (TestId::FaddMr, 8, 0),
            (TestId::FaddMr, 4, 5),
            (TestId::PutSignalLat, 8, 0),
            (TestId::PutSignalLat, 100_000, 0),
        ];
        for (test, size, window) in cases {
            let p = Params {
                size,
                window,
                iterations: 50,
                warmup: 5,
                ..Params::new(test)
            };
            let r = lb
                .run(&p)
                .unwrap_or_else(|e| panic!("{test} {size} window {window}: {e}"));
            assert_eq!((r.test, r.size, r.iterations), (test, size, 50));
            assert_eq!((r.api, r.layout), (Api::Ucp, Layout::Contig));
            assert_eq!(r.transport, "self");
            assert!(r.latency_avg_us > 0.0 && r.msg_rate > 0.0, "{test}");
            let one_sided = test.is_atomic()
                || matches!(
                    test,
                    TestId::UcpPutLat
                        | TestId::UcpPutBw
                        | TestId::UcpGetLat
                        | TestId::UcpGetBw
                        | TestId::PutSignalLat
                );
            assert_eq!(r.rma_path.is_some(), one_sided, "{test}");
        }
        // A transport-layer test is refused, and the worker stays usable.
        assert!(lb.run(&Params::new(TestId::AmLat)).is_err());
        lb.finish().unwrap();
    }

    /// The one-sided tests in loopback with ucp emulating the accesses by active messages
    /// (which this same worker executes in its progress).
    #[test]
    fn one_sided_tests_in_loopback_over_emulation() {
        let cfg = Config {
            rma_path: ucp::RmaPath::Emulated,
            ..Config::from_env().unwrap()
        };
        let mut lb = UcpPeer::loopback_with(Duration::from_secs(60), Some(&cfg)).unwrap();
        for (test, size, window) in [
            (TestId::UcpPutLat, 100, 0),
            (TestId::UcpPutBw, 20_000, 4),
            (TestId::UcpGetLat, 8, 0),
            (TestId::UcpGetBw, 70_000, 3),
            (TestId::AddLat, 8, 0),
            (TestId::FaddLat, 4, 0),
            (TestId::CswapLat, 8, 0),
            (TestId::AddMr, 8, 16),
            (TestId::FaddMr, 8, 4),
            (TestId::PutSignalLat, 5000, 0),
        ] {
            let p = Params {
                size,
                window,
                iterations: 40,
                warmup: 3,
                ..Params::new(test)
            };
            let r = lb
                .run(&p)
                .unwrap_or_else(|e| panic!("{test} {size} window {window}: {e}"));
            assert_eq!(r.rma_path, Some("am"), "{test}");
        }
        lb.finish().unwrap();
    }

    #[test]
    fn no_peer_channel_is_silent() {
        let mut c = NoPeer;
        assert_eq!(c.send(&Msg::Done), Ok(()));
        assert_eq!(c.try_recv(), Ok(None));
        assert_eq!(c.recv(Duration::from_millis(1)), Err(Status::TimedOut));
        assert_eq!(check_len(3, 3), None);
        assert!(check_len(2, 3).unwrap().contains("2 bytes"));
    }
}
