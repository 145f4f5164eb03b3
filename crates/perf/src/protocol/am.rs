//! The two sides of the protocol-layer active-message tests (ucx_perftest's ucp_am_lat
//! and ucp_am_bw): `am_send_nb` with an empty header, and handlers that run inside
//! progress.
//!
//! A handler only records what arrived (counters in an [`AmRx`] shared with the main
//! loop, as a handler cannot call the worker). Eager data is checked in the handler
//! (length always, every byte of the message checked); a rendezvous message is kept and
//! its descriptor queued, and the main loop pulls its data with `am_recv_data_nb` into the
//! receive buffer (poisoned first when it is the message checked).
//!
//! - am_lat: ping-pong: the initiator sends, the responder's main loop waits for the
//!   message and replies, the initiator waits for the reply. The latency reported is half
//!   a round trip. The message checked is the last one each way.
//! - am_bw: the initiator streams sends, at most `window` requests in flight (a send that
//!   completes in the call does not count); each phase (warm-up, timed run) ends with an
//!   acknowledgement message from the responder carrying how many messages it has
//!   received, which stops the clock. The message checked is the last one.

use super::wait::{done, done_and_verdict, drain_to, judge, progress_until_done, wait_one};
use super::{Buffers, MsgBuf, UcpPeer};
use crate::channel::{Channel, Msg};
use crate::mem::pattern_vec;
use crate::params::Params;
use crate::registry::TestId;
use crate::stats::{stride_of, Stamps, Timing};
use crate::transport::wait::{check_stall, SPINS};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ucp::am::AmSendFlags;
use ucp::{AmAction, AmData, AmDesc, AmMsg, Ep, Request, Worker};
use ucs::{Result, Status};

/// Active-message ids of the tests.
pub(super) const AM_PING: u16 = 1;
const AM_PONG: u16 = 2;
const AM_ACK: u16 = 3;

/// What a handler saw. Handlers run inside progress on the thread that reads these, so
/// relaxed atomics suffice; they are atomics (and the queue a mutex) because a handler
/// must be `Send`. Counters on the message path go up by a load and a store
/// ([`bump`]), not a locked read-modify-write: one thread writes them.
#[derive(Default)]
pub(super) struct AmRx {
    /// Messages that arrived (the handler ran).
    arrived: AtomicU64,
    /// Messages complete: eager ones when they arrive, rendezvous ones when pulled.
    complete: AtomicU64,
    /// Messages with the wrong length, or a checked message with wrong content.
    bad: AtomicU64,
    /// The first 8 bytes of the last eager message (acknowledgements carry a count).
    value: AtomicU64,
    /// Rendezvous messages kept for the main loop: descriptor and arrival number.
    rndv: Mutex<VecDeque<(AmDesc, u64)>>,
}

/// Adds one to a counter that only the calling thread writes (see [`AmRx`]).
#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

impl AmRx {
    #[inline]
    pub(super) fn complete(&self) -> u64 {
        self.complete.load(Relaxed)
    }

    pub(super) fn verdict(&self, expected: u64) -> Option<String> {
        let (n, bad) = (self.complete(), self.bad.load(Relaxed));
        if bad > 0 {
            Some(format!(
                "{bad} of {n} messages had the wrong length or content"
            ))
        } else if n != expected {
            Some(format!("received {n} messages, expected {expected}"))
        } else {
            None
        }
    }

    /// Pulls the data of every queued rendezvous message into `rb` (each complete before
    /// the next; poisoned first and checked when it is message `check_at`).
    pub(super) fn pull<C: Channel>(
        &self,
        w: &mut Worker,
        chan: &mut C,
        timeout: Duration,
        rb: &MsgBuf,
        check_at: u64,
    ) -> Result<()> {
        loop {
            let next = self.rndv.lock().map_err(|_| Status::IoError)?.pop_front();
            let Some((desc, n)) = next else {
                return Ok(());
            };
            if n == check_at {
                rb.poison();
            }
            let r = w.am_recv_data_nb(desc, rb.ucp(), None)?;
            let info = wait_one(w, chan, timeout, "rendezvous data", Some(r))?;
            if info.length != rb.len || (n == check_at && rb.mismatch().is_some()) {
                self.bad.fetch_add(1, Relaxed);
            }
            bump(&self.complete);
        }
    }

    /// Progresses until `target` messages are complete, pulling rendezvous data.
    pub(super) fn wait_for<C: Channel>(
        &self,
        w: &mut Worker,
        chan: &mut C,
        timeout: Duration,
        target: u64,
        rb: &MsgBuf,
        check_at: u64,
    ) -> Result<()> {
        let mut n: u32 = 0;
        let mut since = None;
        loop {
            if self.complete() >= target {
                return Ok(());
            }
            if self.arrived.load(Relaxed) > self.complete() {
                self.pull(w, chan, timeout, rb, check_at)?;
                continue;
            }
            if w.progress() > 0 {
                (n, since) = (0, None);
            }
            n = n.wrapping_add(1);
            if n % SPINS == 0 {
                check_stall(chan, &mut since, timeout, "active messages")?;
            }
        }
    }
}

/// Installs a handler for `id` that counts messages, checks their length against `len`
/// (if given) and every byte of message number `check_at` (1-based) against the pattern.
pub(super) fn install(w: &mut Worker, id: u16, len: Option<usize>, check_at: u64) -> Arc<AmRx> {
    let rx = Arc::new(AmRx::default());
    let seen = rx.clone();
    let expect = len.map(pattern_vec);
    w.am_set_handler(
        id,
        Some(Box::new(move |m: &AmMsg<'_>| {
            let n = seen.arrived.load(Relaxed) + 1;
            seen.arrived.store(n, Relaxed);
            match m.data {
                AmData::Eager(d) => {
                    if let Some(e) = &expect {
                        if d.len() != e.len() || (n == check_at && d != &e[..]) {
                            seen.bad.fetch_add(1, Relaxed);
                        }
                    }
                    if let Some(v) = d.get(..8) {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(v);
                        seen.value.store(u64::from_le_bytes(b), Relaxed);
                    }
                    bump(&seen.complete);
                    AmAction::Done
                }
                AmData::Rndv { length } => {
                    if len.is_some_and(|l| l != length) {
                        seen.bad.fetch_add(1, Relaxed);
                    }
                    match seen.rndv.lock() {
                        Ok(mut q) => q.push_back((m.desc, n)),
                        // Never: the main loop does not panic while holding the lock.
                        Err(_) => {
                            seen.bad.fetch_add(1, Relaxed);
                        }
                    }
                    AmAction::Keep
                }
            }
        })),
    );
    rx
}

/// One send of the test message.
#[inline]
pub(super) fn send(w: &mut Worker, ep: Ep, id: u16, buf: &MsgBuf) -> Result<Option<Request>> {
    w.am_send_nb(ep, id, &[], buf.ucp(), AmSendFlags::default(), None)
}

impl<C: Channel> UcpPeer<C> {
    pub(super) fn am_initiator(&mut self, p: &Params) -> Result<Timing> {
        let r = match p.test {
            TestId::UcpAmLat => self.am_lat_initiator(p),
            _ => self.am_bw_initiator(p),
        };
        self.worker.am_set_handler(AM_PONG, None);
        self.worker.am_set_handler(AM_ACK, None);
        r
    }

    pub(super) fn am_responder(&mut self, p: &Params) -> Result<()> {
        let r = match p.test {
            TestId::UcpAmLat => self.am_lat_responder(p),
            _ => self.am_bw_responder(p),
        };
        self.worker.am_set_handler(AM_PING, None);
        r
    }

    fn am_lat_initiator(&mut self, p: &Params) -> Result<Timing> {
        let total = p.warmup + p.iterations;
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let rx = install(&mut self.worker, AM_PONG, Some(p.size), total);
        self.start(p)?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let mut inflight: VecDeque<Request> = VecDeque::new();
        let mut round = |w: &mut Worker, chan: &mut C, i: u64| -> Result<()> {
            if let Some(r) = send(w, ep, AM_PING, sb)? {
                inflight.push_back(r);
            }
            rx.wait_for(w, chan, t, i + 1, rb, total)?;
            // Free the sends that completed (rendezvous: once the peer pulled the data).
            while let Some(&r) = inflight.front() {
                if !done(w, r, "a send")? {
                    break;
                }
                w.request_free(r)?;
                inflight.pop_front();
            }
            Ok(())
        };
        for i in 0..p.warmup {
            round(w, chan, i)?;
        }
        let mut st = Stamps::new(p.iterations, 1);
        st.start();
        for i in p.warmup..total {
            round(w, chan, i)?;
            st.mark();
        }
        let timing = st.finish();
        drain_to(w, chan, t, &mut inflight, 0)?;
        done_and_verdict(w, chan, t, p.test)?;
        if let Some(e) = rx.verdict(total) {
            tracing::error!("{}: replies: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    fn am_lat_responder(&mut self, p: &Params) -> Result<()> {
        let total = p.warmup + p.iterations;
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let rx = install(&mut self.worker, AM_PING, Some(p.size), total);
        self.chan.send(&Msg::Ready { region: None })?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let mut inflight: VecDeque<Request> = VecDeque::new();
        for i in 0..total {
            rx.wait_for(w, chan, t, i + 1, rb, total)?;
            if !inflight.is_empty() {
                drain_to(w, chan, t, &mut inflight, 0)?;
            }
            if let Some(r) = send(w, ep, AM_PONG, sb)? {
                inflight.push_back(r);
            }
        }
        drain_to(w, chan, t, &mut inflight, 0)?;
        progress_until_done(w, chan, t)?;
        judge(chan, || rx.verdict(total))
    }

    fn am_bw_initiator(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            // Acknowledgements are eager; this buffer is never used for them.
            recv: Some(MsgBuf::poisoned(8)?),
            ..Default::default()
        };
        let acks = install(&mut self.worker, AM_ACK, Some(8), 0);
        self.start(p)?;
        let window = p.window.max(1) as usize;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(ab)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut phases = 0u64;
        let mut phase = |w: &mut Worker,
                         chan: &mut C,
                         count: u64,
                         expect: u64,
                         mut mark: Option<&mut Stamps>|
         -> Result<()> {
            for _ in 0..count {
                if inflight.len() >= window {
                    drain_to(w, chan, t, &mut inflight, window - 1)?;
                }
                if let Some(r) = send(w, ep, AM_PING, sb)? {
                    inflight.push_back(r);
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            drain_to(w, chan, t, &mut inflight, 0)?;
            phases += 1;
            acks.wait_for(w, chan, t, phases, ab, 0)?;
            let got = acks.value.load(Relaxed);
            if got != expect {
                tracing::error!(
                    "{}: the responder acknowledged {got} messages, expected {expect}",
                    p.test
                );
                return Err(Status::IoError);
            }
            Ok(())
        };
        if p.warmup > 0 {
            phase(w, chan, p.warmup, p.warmup, None)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        phase(
            w,
            chan,
            p.iterations,
            p.warmup + p.iterations,
            Some(&mut st),
        )?;
        let timing = st.finish();
        done_and_verdict(w, chan, t, p.test)?;
        if let Some(e) = acks.verdict(phases) {
            tracing::error!("{}: acknowledgements: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    fn am_bw_responder(&mut self, p: &Params) -> Result<()> {
        let total = p.warmup + p.iterations;
        self.bufs = Buffers {
            recv: Some(MsgBuf::poisoned(p.size)?),
            ack: Some(MsgBuf::poisoned(8)?),
            ..Default::default()
        };
        let rx = install(&mut self.worker, AM_PING, Some(p.size), total);
        self.chan.send(&Msg::Ready { region: None })?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(rb), Some(ab)) = (&self.bufs.recv, &self.bufs.ack) else {
            return Err(Status::NoMemory);
        };
        for target in [p.warmup, total] {
            if target == 0 {
                continue;
            }
            rx.wait_for(w, chan, t, target, rb, total)?;
            ab.write_u64(rx.complete());
            let s = w.am_send_nb(
                ep,
                AM_ACK,
                &[],
                ab.ucp(),
                AmSendFlags {
                    eager: true,
                    ..Default::default()
                },
                None,
            )?;
            wait_one(w, chan, t, "the acknowledgement", s)?;
        }
        progress_until_done(w, chan, t)?;
        judge(chan, || rx.verdict(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let rx = AmRx::default();
        rx.complete.store(5, Relaxed);
        assert_eq!(rx.verdict(5), None);
        assert!(rx.verdict(6).unwrap().contains("expected 6"));
        rx.bad.store(1, Relaxed);
        assert!(rx.verdict(5).unwrap().contains("wrong length"));
    }
}
