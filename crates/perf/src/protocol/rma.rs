//! The two sides of the protocol-layer remote memory access tests (ucx_perftest's
//! ucp_put_lat, ucp_put_bw and ucp_get).
//!
//! - put_lat: ping-pong through memory. Both sides map a region of the message size; the
//!   initiator's travels in `Start`, the responder's in `Ready`. Each round the initiator
//!   puts its buffer, whose last byte is the round's sequence number, into the responder's
//!   region; the responder polls the last byte of its region until that number shows, and
//!   puts the same into the initiator's, which polls likewise. One iteration is a round
//!   trip; the latency reported is half of it.
//! - put_bw: a stream of puts into the responder's region, at most `window` requests in
//!   flight (a put that completes in the call, as on the direct and CMA paths, does not
//!   count), then a flush, which stops the clock.
//! - get_lat: one get after the other from the responder's region, each complete before
//!   the next.
//! - get_bw: a stream of gets, at most `window` in flight, then a flush.
//!
//! The responder of put_bw and the gets does nothing but progress its worker (which
//! executes the operations ucp emulates by active messages) until the initiator is done.
//!
//! Checks: the regions hold the data pattern; after the test the responder checks every
//! byte of its region (put: what the puts wrote, with the sequence number last for
//! put_lat; get: unchanged), the initiator of put_lat its own region, and a get test ends
//! with one more (untimed) get into the poisoned destination, checked byte by byte.

use super::wait::{done_and_verdict, drain_to, flush, judge, progress_until_done, spin, wait_one};
use super::{Buffers, MsgBuf, UcpPeer};
use crate::channel::{Channel, Msg, RegionInfo};
use crate::mem::{pattern, pattern_mismatch};
use crate::params::Params;
use crate::registry::TestId;
use crate::stats::{stride_of, Stamps, Timing};
use std::collections::VecDeque;
use ucp::{Ep, RemoteKey, Request, Worker};
use ucs::{Result, Status};

/// Sequence number of round `i` of a put ping-pong: never 0 (the regions start zeroed)
/// and different from the previous round's.
#[inline]
pub(super) fn seq(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Checks a region after a test: the data pattern everywhere, except the last byte
/// which must be `last` when given.
pub(super) fn check_region(region: &MsgBuf, last: Option<u8>) -> Option<String> {
    let data = region.snapshot();
    if let Some(off) = pattern_mismatch(&data, last.is_some()) {
        return Some(format!(
            "byte {off} of {} is {:#04x}, expected {:#04x}",
            data.len(),
            data[off],
            pattern(off)
        ));
    }
    match (last, data.last()) {
        (Some(want), Some(&got)) if got != want => Some(format!(
            "last byte is {got:#04x}, expected sequence number {want:#04x}"
        )),
        _ => None,
    }
}

/// One put of the whole of `buf` to `addr`.
#[inline]
pub(super) fn put(
    w: &mut Worker,
    ep: Ep,
    buf: &MsgBuf,
    addr: u64,
    rk: &RemoteKey,
) -> Result<Option<Request>> {
    w.put_nb(ep, buf.ucp(), addr, rk, None)
}

/// One get of `buf.len` bytes at `addr` into `buf`.
#[inline]
pub(super) fn get(
    w: &mut Worker,
    ep: Ep,
    buf: &MsgBuf,
    addr: u64,
    rk: &RemoteKey,
) -> Result<Option<Request>> {
    w.get_nb(ep, buf.ucp(), addr, rk, None)
}

impl<C: Channel> UcpPeer<C> {
    pub(super) fn rma_initiator(&mut self, p: &Params) -> Result<Timing> {
        let ctx = self.worker.context().clone();
        let put = matches!(p.test, TestId::UcpPutLat | TestId::UcpPutBw);
        self.bufs = Buffers {
            // Puts send the pattern; gets land in a poisoned buffer.
            send: if put {
                Some(MsgBuf::pattern(p.size)?)
            } else {
                None
            },
            recv: if put {
                None
            } else {
                Some(MsgBuf::poisoned(p.size)?)
            },
            // put_lat: the responder puts back into this side's memory.
            mine: if p.test == TestId::UcpPutLat {
                Some(MsgBuf::mapped(&ctx, p.size)?)
            } else {
                None
            },
            ..Default::default()
        };
        let mine = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        let peer = self.start_with(p, mine)?;
        self.path = Some(self.attach_peer(peer.as_ref(), p.test, false)?);
        match p.test {
            TestId::UcpPutLat => self.put_lat_initiator(p),
            TestId::UcpPutBw => {
                let timing = self.rma_stream(p, true)?;
                done_and_verdict(&mut self.worker, &mut self.chan, self.timeout, p.test)?;
                Ok(timing)
            }
            TestId::UcpGetLat | TestId::UcpGetBw => {
                let timing = self.rma_stream(p, false)?;
                self.get_check(p)?;
                Ok(timing)
            }
            _ => Err(Status::InvalidParam),
        }
    }

    fn put_lat_initiator(&mut self, p: &Params) -> Result<Timing> {
        let timing = self.put_lat_rounds(p)?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        flush(w, chan, t, ep)?;
        done_and_verdict(w, chan, t, p.test)?;
        let Some(mine) = &self.bufs.mine else {
            return Err(Status::NoMemory);
        };
        // After the verdict: the responder's last put is complete.
        if let Some(e) = check_region(mine, Some(seq(p.warmup + p.iterations - 1))) {
            tracing::error!("{}: this side's region: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    /// The rounds of put_lat: put this round's number (the last byte of the send buffer)
    /// into the peer's region, then wait for it to show in this side's region (put there
    /// by the peer; in loopback the two regions are one). Returns with every put complete.
    pub(super) fn put_lat_rounds(&mut self, p: &Params) -> Result<Timing> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(mine), Some((addr, rk))) =
            (&self.bufs.send, &self.bufs.mine, &self.bufs.peer)
        else {
            return Err(Status::NoMemory);
        };
        let total = p.warmup + p.iterations;
        let mut inflight: VecDeque<Request> = VecDeque::new();
        let mut round = |w: &mut Worker, chan: &mut C, i: u64| -> Result<()> {
            // The previous put must be complete before its buffer changes (on the direct
            // and CMA paths it completed in the call: nothing to wait for).
            if !inflight.is_empty() {
                drain_to(w, chan, t, &mut inflight, 0)?;
            }
            let s = seq(i);
            sb.set_last(s);
            if let Some(r) = put(w, ep, sb, *addr, rk)? {
                inflight.push_back(r);
            }
            spin(w, chan, t, "the peer's put", || mine.last() == s)
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
        Ok(timing)
    }

    /// put_bw, get_bw and get_lat: operations one after the other, at most `window` in
    /// flight (get_lat: each complete before the next), flushed at the end of each phase.
    pub(super) fn rma_stream(&mut self, p: &Params, put_op: bool) -> Result<Timing> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let buf = if put_op {
            &self.bufs.send
        } else {
            &self.bufs.recv
        };
        let (Some(buf), Some((addr, rk))) = (buf, &self.bufs.peer) else {
            return Err(Status::NoMemory);
        };
        // get_lat: each get complete before the next, waited for in its own iteration.
        let latency = p.test == TestId::UcpGetLat;
        let window = if latency { 1 } else { p.window.max(1) as usize };
        let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
        let mut stream = |w: &mut Worker,
                          chan: &mut C,
                          count: u64,
                          mut mark: Option<&mut Stamps>|
         -> Result<()> {
            for _ in 0..count {
                if inflight.len() >= window {
                    drain_to(w, chan, t, &mut inflight, window - 1)?;
                }
                let r = if put_op {
                    put(w, ep, buf, *addr, rk)?
                } else {
                    get(w, ep, buf, *addr, rk)?
                };
                if let Some(r) = r {
                    inflight.push_back(r);
                    if latency {
                        drain_to(w, chan, t, &mut inflight, 0)?;
                    }
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            drain_to(w, chan, t, &mut inflight, 0)?;
            flush(w, chan, t, ep)
        };
        if p.warmup > 0 {
            stream(w, chan, p.warmup, None)?;
        }
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        stream(w, chan, p.iterations, Some(&mut st))?;
        Ok(st.finish())
    }

    /// The end of a get test: one more get into the poisoned destination, checked, then
    /// the responder's verdict on its (unchanged) region.
    fn get_check(&mut self, p: &Params) -> Result<()> {
        let error = self.last_get()?;
        done_and_verdict(&mut self.worker, &mut self.chan, self.timeout, p.test)?;
        if let Some(e) = error {
            tracing::error!("{}: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(())
    }

    /// One more get into the poisoned destination, waited for and flushed; what is wrong
    /// with the bytes it brought (`None`: the data pattern, every byte).
    pub(super) fn last_get(&mut self) -> Result<Option<String>> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(rb), Some((addr, rk))) = (&self.bufs.recv, &self.bufs.peer) else {
            return Err(Status::NoMemory);
        };
        rb.poison();
        let r = get(w, ep, rb, *addr, rk)?;
        wait_one(w, chan, t, "the last get", r)?;
        flush(w, chan, t, ep)?;
        let error = rb.mismatch().map(|off| {
            format!(
                "byte {off} of {} of the last get is wrong (expected {:#04x})",
                rb.len,
                pattern(off)
            )
        });
        Ok(error)
    }

    pub(super) fn rma_responder(&mut self, p: &Params, peer: Option<&RegionInfo>) -> Result<()> {
        let ctx = self.worker.context().clone();
        let put_lat = p.test == TestId::UcpPutLat;
        self.bufs = Buffers {
            send: if put_lat {
                Some(MsgBuf::pattern(p.size)?)
            } else {
                None
            },
            mine: Some(MsgBuf::mapped(&ctx, p.size)?),
            ..Default::default()
        };
        let Some(mine) = &self.bufs.mine else {
            return Err(Status::NoMemory);
        };
        match p.test {
            // Gets read the pattern; puts must overwrite every poisoned byte.
            TestId::UcpGetLat | TestId::UcpGetBw => mine.fill_pattern(),
            TestId::UcpPutBw => mine.poison(),
            _ => {}
        }
        let region = mine.region();
        if put_lat {
            self.attach_peer(peer, p.test, false)?;
        }
        self.chan.send(&Msg::Ready { region })?;
        if put_lat {
            self.put_lat_responder(p)?;
        }
        let (w, chan, t) = (&mut self.worker, &mut self.chan, self.timeout);
        progress_until_done(w, chan, t)?;
        let last = put_lat.then(|| seq(p.warmup + p.iterations - 1));
        judge(chan, || {
            self.bufs.mine.as_ref().and_then(|m| check_region(m, last))
        })
    }

    fn put_lat_responder(&mut self, p: &Params) -> Result<()> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(mine), Some((addr, rk))) =
            (&self.bufs.send, &self.bufs.mine, &self.bufs.peer)
        else {
            return Err(Status::NoMemory);
        };
        let mut inflight: VecDeque<Request> = VecDeque::new();
        for i in 0..p.warmup + p.iterations {
            let s = seq(i);
            spin(w, chan, t, "the initiator's put", || mine.last() == s)?;
            if !inflight.is_empty() {
                drain_to(w, chan, t, &mut inflight, 0)?;
            }
            sb.set_last(s);
            if let Some(r) = put(w, ep, sb, *addr, rk)? {
                inflight.push_back(r);
            }
        }
        drain_to(w, chan, t, &mut inflight, 0)?;
        flush(w, chan, t, ep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_change_every_round_and_skip_zero() {
        for i in 0..2000u64 {
            assert_ne!(seq(i), 0);
            assert_ne!(seq(i), seq(i + 1));
        }
    }

    #[test]
    fn region_checks() {
        let b = MsgBuf::pattern(300).unwrap();
        assert_eq!(check_region(&b, None), None);
        assert!(check_region(&b, Some(7))
            .unwrap()
            .contains("sequence number"));
        b.set_last(7);
        assert_eq!(check_region(&b, Some(7)), None);
        assert!(check_region(&b, None).unwrap().contains("byte 299"));
        let p = MsgBuf::poisoned(10).unwrap();
        assert!(check_region(&p, None).unwrap().contains("byte 0 of 10"));
    }
}
