//! The two sides of the tag tests.
//!
//! - tag_lat / tag_sync_lat: ping-pong of tagged messages (synchronous sends for
//!   tag_sync_lat). Each side posts the receive for the next message right after its own
//!   send and before it progresses the worker again: ucp matches arriving messages only
//!   inside progress, so every message finds its receive posted (the expected path), and
//!   posting costs nothing on the round trip. One iteration is a round trip; the latency
//!   reported is half of it. After the timed rounds, one more round with both receive
//!   buffers poisoned checks every byte of both messages.
//! - tag_bw / tag_mr: the initiator streams nonblocking sends, at most `window` of them in
//!   flight (a send that completes in the call does not count). The responder receives as
//!   ucx_perftest's does: one receive at a time, taken in the call when its message is
//!   already there; with `--prepost` (`Params::prepost`) it keeps `window` receives posted
//!   ahead instead (MPI's message-rate pattern). A phase (the warm-up, then the timed
//!   run) ends with an acknowledgement from the responder carrying how many messages it
//!   received, which stops the initiator's clock. The responder receives the last message
//!   of the timed run into a separate poisoned buffer and checks every byte. tag_mr is
//!   tag_bw with message-rate columns in mind (8 bytes by default).
//!
//! With `--cq` or `--callbacks` (`Params::cq`, `Params::callbacks`), tag_bw / tag_mr start
//! every send and receive with a completion queue or a counting closure instead of
//! polling requests (`cqwin`); the window is then a count.
//!
//! Every request is waited for and freed; a failure leaves the peer broken (no more
//! tests), its buffers kept until the worker is gone.

use super::cqwin::{post_cq, CqWindow, CHECKED};
use super::wait::{done, drain_to, judge, progress_until_done, wait_one, wait_pair};
use super::{check_message, MsgBuf, UcpPeer, ACK_TAG, MASK, TAG};
use crate::channel::{Channel, Msg};
use crate::handshake;
use crate::params::Params;
use crate::registry::TestId;
use crate::stats::{stride_of, Stamps, Timing};
use crate::transport::wait::{check_stall, SPINS};
use std::collections::VecDeque;
use ucp::{Ep, RecvInfo, RecvPosted, Request, Worker};
use ucs::{Result, Status};

/// One send of the test message.
#[inline]
fn send(w: &mut Worker, ep: Ep, buf: &MsgBuf, tag: u64, sync: bool) -> Result<Option<Request>> {
    w.tag_send_nb(ep, buf.ucp(), tag, sync, None)
}

/// One receive of the test message.
#[inline]
fn recv(w: &mut Worker, buf: &MsgBuf, tag: u64) -> Result<RecvPosted> {
    w.tag_recv_nbx(buf.ucp(), tag, MASK, None)
}

impl<C: Channel> UcpPeer<C> {
    // ---- latency -----------------------------------------------------------------------

    pub(super) fn lat_initiator(&mut self, p: &Params) -> Result<Timing> {
        let sync = p.test == TestId::TagSyncLat;
        self.bufs = super::Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        self.start(p)?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        let round = |w: &mut Worker, chan: &mut C| -> Result<RecvInfo> {
            let (s, r) = (send(w, ep, sb, TAG, sync)?, recv(w, rb, TAG)?);
            wait_pair(w, chan, t, "the reply", s, r)
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
        // The check round, untimed: the reply must fill the poisoned buffer exactly.
        rb.poison();
        let info = round(w, chan)?;
        let error = check_message("the last reply", rb, info);
        handshake::done_and_verdict(chan, t, p.test)?;
        if let Some(e) = error {
            tracing::error!("{}: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    pub(super) fn lat_responder(&mut self, p: &Params) -> Result<()> {
        let sync = p.test == TestId::TagSyncLat;
        self.bufs = super::Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        // Rounds 0..total are the warm-up and timed ones, round `total` the check round.
        let total = p.warmup + p.iterations;
        let mut r = recv(w, rb, TAG)?;
        chan.send(&Msg::Ready { region: None })?;
        let mut prev: Option<Request> = None;
        let mut error = None;
        for i in 0..=total {
            let info = wait_pair(w, chan, t, "a ping", prev.take(), r)?;
            if i == total {
                error = check_message("the last ping", rb, info);
            }
            prev = send(w, ep, sb, TAG, sync)?;
            if i < total {
                if i + 1 == total {
                    rb.poison();
                }
                r = recv(w, rb, TAG)?;
            }
        }
        wait_one(w, chan, t, "the last pong", prev)?;
        progress_until_done(w, chan, t)?;
        judge(chan, || error)
    }

    // ---- bandwidth and message rate ----------------------------------------------------

    pub(super) fn bw_initiator(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = super::Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            ack: Some(MsgBuf::poisoned(8)?),
            ..Default::default()
        };
        let window = p.window.max(1) as usize;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(ab)) = (&self.bufs.send, &self.bufs.ack) else {
            return Err(Status::NoMemory);
        };
        let mut ack = recv(w, ab, ACK_TAG)?;
        // The responder posts its first receives before it answers.
        chan.send(&Msg::Start {
            params: p.clone(),
            region: None,
        })?;
        handshake::expect_ready(chan, t)?;
        let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut cqw = if p.cq || p.callbacks {
            Some(CqWindow::new(w, window, p.callbacks)?)
        } else {
            None
        };
        let mut stream = |w: &mut Worker,
                          chan: &mut C,
                          count: u64,
                          mut mark: Option<&mut Stamps>|
         -> Result<()> {
            for _ in 0..count {
                if let Some(q) = cqw.as_mut() {
                    if q.inflight >= window {
                        q.drain_to(w, chan, t, window - 1, "a send")?;
                    }
                    post_cq(w, Some(ep), sb, q, 0)?;
                } else {
                    if inflight.len() >= window {
                        drain_to(w, chan, t, &mut inflight, window - 1)?;
                    }
                    if let Some(r) = send(w, ep, sb, TAG, false)? {
                        inflight.push_back(r);
                    }
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            match cqw.as_mut() {
                Some(q) => q.drain_to(w, chan, t, 0, "a send"),
                None => drain_to(w, chan, t, &mut inflight, 0),
            }
        };
        let mut end_phase = |w: &mut Worker, chan: &mut C, count: u64, again: bool| -> Result<()> {
            let info = wait_pair(w, chan, t, "the acknowledgement", None, ack)?;
            let got = ab.read_u64();
            if info.length != 8 || got != count {
                tracing::error!(
                    "{}: the responder acknowledged {got} messages ({} bytes), expected {count}",
                    p.test,
                    info.length
                );
                return Err(Status::IoError);
            }
            if again {
                ab.poison();
                ack = recv(w, ab, ACK_TAG)?;
            }
            Ok(())
        };
        if p.warmup > 0 {
            stream(w, chan, p.warmup, None)?;
            end_phase(w, chan, p.warmup, true)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        stream(w, chan, p.iterations, Some(&mut st))?;
        end_phase(w, chan, p.iterations, false)?;
        let timing = st.finish();
        handshake::done_and_verdict(chan, t, p.test)?;
        Ok(timing)
    }

    pub(super) fn bw_responder(&mut self, p: &Params) -> Result<()> {
        self.bufs = super::Buffers {
            recv: Some(MsgBuf::poisoned(p.size)?),
            check: Some(MsgBuf::poisoned(p.size)?),
            ack: Some(MsgBuf::poisoned(8)?),
            ..Default::default()
        };
        let window = p.window.max(1) as usize;
        // Receives posted ahead: `window` with `prepost`, else one (ucx_perftest's way).
        let ahead = if p.prepost { window } else { 1 };
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(rb), Some(cb), Some(ab)) = (&self.bufs.recv, &self.bufs.check, &self.bufs.ack)
        else {
            return Err(Status::NoMemory);
        };
        let mut posted: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut cqw = if p.cq || p.callbacks {
            Some(CqWindow::new(w, window, p.callbacks)?)
        } else {
            None
        };
        let mut error = None;
        let phases = [(p.warmup, false), (p.iterations, true)];
        let mut ready_sent = false;
        for (count, timed) in phases.into_iter().filter(|&(n, _)| n > 0) {
            let (mut next, mut got) = (0u64, 0u64);
            let mut n: u32 = 0;
            let mut since = None;
            loop {
                if let Some(q) = cqw.as_mut() {
                    while q.inflight < window && next < count {
                        let check = timed && next + 1 == count;
                        let b = if check { cb } else { rb };
                        post_cq(w, None, b, q, if check { CHECKED } else { 0 })?;
                        next += 1;
                    }
                    if !ready_sent {
                        chan.send(&Msg::Ready { region: None })?;
                        ready_sent = true;
                    }
                    got += q.poll("a message")? as u64;
                    if got == count {
                        if timed {
                            let info = q.checked.take().ok_or(Status::IoError)?;
                            error = check_message("the last message", cb, info);
                        }
                        break;
                    }
                    if w.progress() > 0 {
                        (n, since) = (0, None);
                    }
                    n = n.wrapping_add(1);
                    if n % SPINS == 0 {
                        check_stall(chan, &mut since, t, "messages")?;
                    }
                    continue;
                }
                while posted.len() < ahead && next < count {
                    // The last message of the timed run lands in the check buffer.
                    let last = timed && next + 1 == count;
                    let b = if last { cb } else { rb };
                    next += 1;
                    if p.prepost {
                        posted.push_back(w.tag_recv_nb(b.ucp(), TAG, MASK, None)?);
                        continue;
                    }
                    match w.tag_recv_nbx(b.ucp(), TAG, MASK, None)? {
                        RecvPosted::Pending(r) => posted.push_back(r),
                        RecvPosted::Done(Status::Ok, info) => {
                            if last {
                                error = check_message("the last message", cb, info);
                            }
                            got += 1;
                        }
                        RecvPosted::Done(s, _) => {
                            tracing::error!("{}: a receive completed with {s}", p.test);
                            return Err(s);
                        }
                    }
                }
                if !ready_sent {
                    chan.send(&Msg::Ready { region: None })?;
                    ready_sent = true;
                }
                while let Some(&r) = posted.front() {
                    if !done(w, r, "a message")? {
                        break;
                    }
                    if timed && got + 1 == count {
                        error = check_message("the last message", cb, w.request_info(r)?);
                    }
                    w.request_free(r)?;
                    posted.pop_front();
                    got += 1;
                }
                if got == count {
                    break;
                }
                if w.progress() > 0 {
                    (n, since) = (0, None);
                }
                n = n.wrapping_add(1);
                if n % SPINS == 0 {
                    check_stall(chan, &mut since, t, "messages")?;
                }
            }
            ab.write_u64(count);
            let s = send(w, ep, ab, ACK_TAG, false)?;
            wait_one(w, chan, t, "the acknowledgement", s)?;
        }
        if !ready_sent {
            chan.send(&Msg::Ready { region: None })?;
        }
        progress_until_done(w, chan, t)?;
        judge(chan, || error)
    }
}
