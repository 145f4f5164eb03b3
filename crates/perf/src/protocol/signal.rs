//! put_signal_lat: the latency of a put with remote signal, as the target sees it.
//!
//! Ping-pong through memory, like put_lat, but the round's end is a signal word, not a byte
//! of the data: both sides map a region of the message size rounded up to 8 bytes plus one
//! 64-bit signal word after it (the initiator's travels in `Start`, the responder's in
//! `Ready`). Each round the initiator puts its buffer into the responder's region with a
//! signal that adds 1 to the responder's word, then waits (acquire loads, progressing)
//! until its own word reaches the round's count; the responder waits for its word and
//! answers the same way. One iteration is a round trip; the latency reported is half of
//! it. In loopback the two regions are one, and each round's signal is the only one.
//!
//! Checks: after the test each side checks that its region holds the data pattern and that
//! its word counts every round exactly once.

use super::wait::{done_and_verdict, drain_to, flush, judge, progress_until_done, spin};
use super::{Buffers, MsgBuf, UcpPeer};
use crate::channel::{Channel, Msg, RegionInfo};
use crate::mem::{pattern, pattern_mismatch};
use crate::params::Params;
use crate::stats::{Stamps, Timing};
use std::collections::VecDeque;
use ucp::{Ep, RemoteKey, Request, SignalOp, Worker};
use ucs::{Result, Status};

/// Requests of earlier rounds still in flight (emulated paths) before a round waits for
/// them: the data never changes, so only the number of requests needs a bound.
const MAX_INFLIGHT: usize = 16;

/// Where the signal word is in a region for messages of `size` bytes.
fn signal_offset(size: usize) -> usize {
    size.div_ceil(8) * 8
}

/// A region for messages of `size` bytes and its signal word.
fn region_len(size: usize) -> usize {
    signal_offset(size) + 8
}

/// The signal word of a region made by [`region_len`], read as a target does.
fn signal_word(region: &MsgBuf, size: usize) -> u64 {
    let off = signal_offset(size);
    // Inside the region (region_len) and aligned (the offset is a multiple of 8), so
    // the load never fails; a failure would read as a count no round reaches.
    region.load_word_at(off).unwrap_or(u64::MAX)
}

/// Why a region after the test is wrong: the data pattern in its first `size` bytes, and
/// `rounds` in its signal word.
fn check_signal_region(region: &MsgBuf, size: usize, rounds: u64) -> Option<String> {
    let data = region.snapshot();
    if let Some(off) = pattern_mismatch(&data[..size], false) {
        return Some(format!(
            "byte {off} of {size} is {:#04x}, expected {:#04x}",
            data[off],
            pattern(off)
        ));
    }
    let got = signal_word(region, size);
    (got != rounds).then(|| format!("the signal word is {got}, expected {rounds}"))
}

/// One put of `buf` to `addr` with a signal that adds 1 to the peer's word.
#[inline]
fn put_signal(
    w: &mut Worker,
    ep: Ep,
    buf: &MsgBuf,
    addr: u64,
    rk: &RemoteKey,
) -> Result<Option<Request>> {
    let sig = addr + signal_offset(buf.len) as u64;
    w.put_signal_nb(ep, buf.ucp(), addr, rk, sig, rk, SignalOp::Add, 1, None)
}

impl<C: Channel> UcpPeer<C> {
    /// The buffers of either side: the data to send, and this side's region.
    fn signal_buffers(&mut self, p: &Params) -> Result<()> {
        let ctx = self.worker.context().clone();
        self.bufs = Buffers {
            send: Some(MsgBuf::pattern(p.size)?),
            mine: Some(MsgBuf::mapped(&ctx, region_len(p.size))?),
            ..Default::default()
        };
        Ok(())
    }

    pub(super) fn signal_initiator(&mut self, p: &Params) -> Result<Timing> {
        self.signal_buffers(p)?;
        let mine = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        let peer = self.start_with(p, mine)?;
        self.path = Some(self.attach_peer(peer.as_ref(), p.test, false)?);
        let timing = self.signal_rounds(p)?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        flush(w, chan, t, ep)?;
        done_and_verdict(w, chan, t, p.test)?;
        self.signal_check(p)?;
        Ok(timing)
    }

    /// Loopback: the endpoint's peer is this worker, and its region this side's.
    pub(super) fn lb_put_signal(&mut self, p: &Params) -> Result<Timing> {
        self.signal_buffers(p)?;
        let region = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        self.path = Some(self.attach_peer(region.as_ref(), p.test, false)?);
        let timing = self.signal_rounds(p)?;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        flush(w, chan, t, ep)?;
        self.signal_check(p)?;
        Ok(timing)
    }

    fn signal_check(&self, p: &Params) -> Result<()> {
        let Some(mine) = &self.bufs.mine else {
            return Err(Status::NoMemory);
        };
        if let Some(e) = check_signal_region(mine, p.size, p.warmup + p.iterations) {
            tracing::error!("{}: this side's region: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(())
    }

    /// The rounds: put with signal into the peer's region, then wait until this side's
    /// word counts the round. Returns with every request complete.
    fn signal_rounds(&mut self, p: &Params) -> Result<Timing> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(sb), Some(mine), Some((addr, rk))) =
            (&self.bufs.send, &self.bufs.mine, &self.bufs.peer)
        else {
            return Err(Status::NoMemory);
        };
        let size = p.size;
        let mut inflight: VecDeque<Request> = VecDeque::new();
        let mut round = |w: &mut Worker, chan: &mut C, i: u64| -> Result<()> {
            if inflight.len() >= MAX_INFLIGHT {
                drain_to(w, chan, t, &mut inflight, MAX_INFLIGHT / 2)?;
            }
            if let Some(r) = put_signal(w, ep, sb, *addr, rk)? {
                inflight.push_back(r);
            }
            spin(w, chan, t, "the peer's signal", || {
                signal_word(mine, size) == i + 1
            })
        };
        for i in 0..p.warmup {
            round(w, chan, i)?;
        }
        let mut st = Stamps::new(p.iterations, 1);
        st.start();
        for i in p.warmup..p.warmup + p.iterations {
            round(w, chan, i)?;
            st.mark();
        }
        let timing = st.finish();
        drain_to(w, chan, t, &mut inflight, 0)?;
        Ok(timing)
    }

    pub(super) fn signal_responder(&mut self, p: &Params, peer: Option<&RegionInfo>) -> Result<()> {
        self.signal_buffers(p)?;
        let region = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        self.attach_peer(peer, p.test, false)?;
        self.chan.send(&Msg::Ready { region })?;
        {
            let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
            let (Some(sb), Some(mine), Some((addr, rk))) =
                (&self.bufs.send, &self.bufs.mine, &self.bufs.peer)
            else {
                return Err(Status::NoMemory);
            };
            let mut inflight: VecDeque<Request> = VecDeque::new();
            for i in 0..p.warmup + p.iterations {
                spin(w, chan, t, "the initiator's signal", || {
                    signal_word(mine, p.size) == i + 1
                })?;
                if inflight.len() >= MAX_INFLIGHT {
                    drain_to(w, chan, t, &mut inflight, MAX_INFLIGHT / 2)?;
                }
                if let Some(r) = put_signal(w, ep, sb, *addr, rk)? {
                    inflight.push_back(r);
                }
            }
            drain_to(w, chan, t, &mut inflight, 0)?;
            flush(w, chan, t, ep)?;
            progress_until_done(w, chan, t)?;
        }
        let rounds = p.warmup + p.iterations;
        judge(&mut self.chan, || {
            self.bufs
                .mine
                .as_ref()
                .and_then(|m| check_signal_region(m, p.size, rounds))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_word_follows_the_data_aligned() {
        for (size, off) in [(1, 8), (8, 8), (9, 16), (4096, 4096), (4097, 4104)] {
            assert_eq!(signal_offset(size), off);
            assert_eq!(region_len(size), off + 8);
        }
    }

    #[test]
    fn region_checks() {
        let b = MsgBuf::pattern(region_len(13)).unwrap();
        // The pattern continues over the word: not the count 3.
        assert!(check_signal_region(&b, 13, 3)
            .unwrap()
            .contains("signal word"));
        let off = signal_offset(13);
        b.write_slot(off / 8, 3).unwrap();
        assert_eq!(check_signal_region(&b, 13, 3), None);
        b.fill(0);
        assert!(check_signal_region(&b, 13, 0).unwrap().contains("byte 0"));
    }
}
