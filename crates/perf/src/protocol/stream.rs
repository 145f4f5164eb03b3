//! The two sides of the protocol-layer stream tests (ucx_perftest's stream_lat and
//! stream_bw): `stream_send_nb`, and `stream_recv_nb` of exactly one message's bytes
//! (`waitall`).
//!
//! - stream_lat: ping-pong of `size` bytes each way. The latency reported is half a round
//!   trip. One more (untimed) round with both receive buffers poisoned checks every byte
//!   of both messages.
//! - stream_bw: the initiator streams sends, at most `window` requests in flight (a send
//!   that completes in the call does not count); the responder receives message after
//!   message. Each phase (warm-up, timed run) ends with 8 bytes on the stream back from the
//!   responder carrying how many messages it received, which stop the clock. The last
//!   message of the timed run lands in a separate poisoned buffer and is checked byte by
//!   byte.

use super::wait::{done_and_verdict, drain_to, judge, progress_until_done, wait_one, wait_pair};
use super::{Buffers, MsgBuf, UcpPeer};
use crate::channel::{Channel, Msg};
use crate::mem::pattern;
use crate::params::Params;
use crate::registry::TestId;
use crate::stats::{stride_of, Stamps, Timing};
use std::collections::VecDeque;
use std::time::Duration;
use ucp::stream::StreamRecv;
use ucp::{Ep, RecvPosted, Request, Worker};
use ucs::{Result, Status};

/// Sends `buf` on the stream, then receives exactly `rb.len` bytes into `rb`; waits for
/// both and returns the bytes received.
#[inline]
pub(super) fn exchange<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    ep: Ep,
    sb: Option<&MsgBuf>,
    rb: &MsgBuf,
) -> Result<usize> {
    let s = match sb {
        Some(sb) => w.stream_send_nb(ep, sb.ucp(), None)?,
        None => None,
    };
    match w.stream_recv_nb(ep, rb.ucp(), true, None)? {
        StreamRecv::Done(n) => {
            wait_one(w, chan, timeout, "a stream send", s)?;
            Ok(n)
        }
        StreamRecv::Pending(r) => {
            Ok(wait_pair(w, chan, timeout, "stream data", s, RecvPosted::Pending(r))?.length)
        }
    }
}

/// Why a received message is wrong (length or content), or `None`.
pub(super) fn check(what: &str, buf: &MsgBuf, length: usize) -> Option<String> {
    if length != buf.len {
        return Some(format!(
            "{what}: received {length} bytes, expected {}",
            buf.len
        ));
    }
    buf.mismatch().map(|off| {
        format!(
            "{what}: byte {off} of {} is wrong (expected {:#04x})",
            buf.len,
            pattern(off)
        )
    })
}

impl<C: Channel> UcpPeer<C> {
    pub(super) fn stream_initiator(&mut self, p: &Params) -> Result<Timing> {
        match p.test {
            TestId::StreamLat => self.stream_lat_initiator(p),
            _ => self.stream_bw_initiator(p),
        }
    }

    pub(super) fn stream_responder(&mut self, p: &Params) -> Result<()> {
        match p.test {
            TestId::StreamLat => self.stream_lat_responder(p),
            _ => self.stream_bw_responder(p),
        }
    }

    fn stream_lat_initiator(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        self.start(p)?;
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
        // The check round, untimed.
        rb.poison();
        let n = round(w, chan)?;
        let error = check("the last reply", rb, n);
        done_and_verdict(w, chan, t, p.test)?;
        if let Some(e) = error {
            tracing::error!("{}: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    fn stream_lat_responder(&mut self, p: &Params) -> Result<()> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            recv: Some(MsgBuf::poisoned(p.size)?),
            ..Default::default()
        };
        self.chan.send(&Msg::Ready { region: None })?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(rb)) = (&self.bufs.send, &self.bufs.recv) else {
            return Err(Status::NoMemory);
        };
        // Rounds 0..total are the warm-up and timed ones, round `total` the check round.
        let total = p.warmup + p.iterations;
        let mut prev: Option<Request> = None;
        let mut error = None;
        for i in 0..=total {
            if i == total {
                rb.poison();
            }
            let n = exchange(w, chan, t, ep, None, rb)?;
            if i == total {
                error = check("the last ping", rb, n);
            }
            wait_one(w, chan, t, "a pong", prev.take())?;
            prev = w.stream_send_nb(ep, sb.ucp(), None)?;
        }
        wait_one(w, chan, t, "the last pong", prev)?;
        progress_until_done(w, chan, t)?;
        judge(chan, || error)
    }

    fn stream_bw_initiator(&mut self, p: &Params) -> Result<Timing> {
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            ack: Some(MsgBuf::poisoned(8)?),
            ..Default::default()
        };
        self.start(p)?;
        let window = p.window.max(1) as usize;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(ab)) = (&self.bufs.send, &self.bufs.ack) else {
            return Err(Status::NoMemory);
        };
        let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut phase = |w: &mut Worker,
                         chan: &mut C,
                         count: u64,
                         mut mark: Option<&mut Stamps>|
         -> Result<()> {
            for _ in 0..count {
                if inflight.len() >= window {
                    drain_to(w, chan, t, &mut inflight, window - 1)?;
                }
                if let Some(r) = w.stream_send_nb(ep, sb.ucp(), None)? {
                    inflight.push_back(r);
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            drain_to(w, chan, t, &mut inflight, 0)?;
            ab.poison();
            let n = exchange(w, chan, t, ep, None, ab)?;
            let got = ab.read_u64();
            if n != 8 || got != count {
                tracing::error!(
                    "{}: the responder acknowledged {got} messages ({n} bytes), expected {count}",
                    p.test
                );
                return Err(Status::IoError);
            }
            Ok(())
        };
        if p.warmup > 0 {
            phase(w, chan, p.warmup, None)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        phase(w, chan, p.iterations, Some(&mut st))?;
        let timing = st.finish();
        done_and_verdict(w, chan, t, p.test)?;
        Ok(timing)
    }

    fn stream_bw_responder(&mut self, p: &Params) -> Result<()> {
        self.bufs = Buffers {
            recv: Some(MsgBuf::poisoned(p.size)?),
            check: Some(MsgBuf::poisoned(p.size)?),
            ack: Some(MsgBuf::poisoned(8)?),
            ..Default::default()
        };
        self.chan.send(&Msg::Ready { region: None })?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(rb), Some(cb), Some(ab)) = (&self.bufs.recv, &self.bufs.check, &self.bufs.ack)
        else {
            return Err(Status::NoMemory);
        };
        let mut error = None;
        for (count, timed) in [(p.warmup, false), (p.iterations, true)] {
            if count == 0 {
                continue;
            }
            for k in 0..count {
                let last = timed && k + 1 == count;
                let b = if last { cb } else { rb };
                let n = exchange(w, chan, t, ep, None, b)?;
                if last {
                    error = check("the last message", cb, n);
                } else if n != rb.len && error.is_none() {
                    error = Some(format!("a message of {n} bytes, expected {}", rb.len));
                }
            }
            ab.write_u64(count);
            let s = w.stream_send_nb(ep, ab.ucp(), None)?;
            wait_one(w, chan, t, "the acknowledgement", s)?;
        }
        progress_until_done(w, chan, t)?;
        judge(chan, || error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_checks() {
        let b = MsgBuf::pattern(100).unwrap();
        assert_eq!(check("x", &b, 100), None);
        assert!(check("x", &b, 99).unwrap().contains("99 bytes"));
        let p = MsgBuf::poisoned(100).unwrap();
        assert!(check("x", &p, 100).unwrap().contains("byte 0 of 100"));
    }
}
