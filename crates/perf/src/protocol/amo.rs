//! The two sides of the protocol-layer atomic tests (ucx_perftest's ucp_add, ucp_fadd,
//! ucp_swap and ucp_cswap, and the transport layer's add_lat ping-pong), on one word of
//! the test's size (4 or 8 bytes) in memory the responder maps.
//!
//! - add_lat: ping-pong through atomics: both sides map a word (the initiator's travels in
//!   `Start`); each round the initiator posts an add of 1 to the responder's word, the
//!   responder polls its word until it counts the round and posts an add of 1 to the
//!   initiator's, which polls likewise. The latency reported is half a round trip.
//! - fadd_lat / swap_lat / cswap_lat: one fetching atomic after the other, each complete
//!   before the next: operation `i` adds 1, swaps in `i + 1`, or swaps in `i + 1` if the
//!   word is `i` (which it always is), so every fetched value must be `i`.
//! - add_mr: a stream of posted adds of 1, flushed at the end (and every `window` posts
//!   when ucp emulates them: a post on the direct path completes in the call).
//! - fadd_mr: a stream of fetch-and-adds of 1, at most `window` in flight (one that
//!   completes in the call, as on the direct path, does not count), each with its own
//!   result slot; fetched values are checked as they complete.
//!
//! Checks: every fetched value, and the final value of each word, which must be the number
//! of operations (warm-up included). The responder only progresses its worker (which
//! executes the atomics ucp emulates by active messages) until the initiator is done.

use super::wait::{
    done_and_verdict, drain_tagged, flush, judge, progress_until_done, spin, wait_one,
};
use super::{Buffers, MsgBuf, UcpPeer};
use crate::channel::{Channel, Msg, RegionInfo};
use crate::params::Params;
use crate::registry::TestId;
use crate::stats::{stride_of, Stamps, Timing};
use std::collections::VecDeque;
use ucp::{AtomicOp, AtomicSize, Request, RmaPath, Worker};
use ucs::{Result, Status};

/// The operand size of a test (validated: 4 or 8 bytes).
pub(super) fn atomic_size(size: usize) -> AtomicSize {
    if size == 4 {
        AtomicSize::B32
    } else {
        AtomicSize::B64
    }
}

/// Operation, value and compare operand of fetching operation number `i`; the value it
/// must fetch is always `i`.
#[inline]
fn fetch_op(test: TestId, i: u64) -> (AtomicOp, u64, u64) {
    match test {
        TestId::SwapLat => (AtomicOp::Swap, i + 1, 0),
        TestId::CswapLat => (AtomicOp::Cswap, i + 1, i),
        _ => (AtomicOp::Add, 1, 0),
    }
}

/// Why a word does not hold `want`, or `None`.
pub(super) fn check_word(what: &str, got: u64, want: u64) -> Option<String> {
    (got != want).then(|| format!("{what} is {got}, expected {want}"))
}

/// The first wrong fetched value: operation number and what it fetched.
#[derive(Default)]
pub(super) struct Fetched {
    bad: Option<(u64, u64)>,
}

impl Fetched {
    #[inline]
    fn check(&mut self, i: u64, got: u64) {
        if got != i && self.bad.is_none() {
            self.bad = Some((i, got));
        }
    }

    pub(super) fn verdict(&self) -> Option<String> {
        self.bad
            .map(|(i, got)| format!("operation {i} fetched {got}, expected {i}"))
    }
}

impl<C: Channel> UcpPeer<C> {
    pub(super) fn amo_initiator(&mut self, p: &Params) -> Result<Timing> {
        let ctx = self.worker.context().clone();
        let window = p.window.max(1) as usize;
        self.bufs = Buffers {
            // add_lat: the responder adds to this side's word.
            mine: if p.test == TestId::AddLat {
                Some(MsgBuf::mapped(&ctx, p.size)?)
            } else {
                None
            },
            // Result slots of fetching operations (8 bytes each, whatever the size).
            recv: Some(MsgBuf::poisoned(8 * window)?),
            ..Default::default()
        };
        let mine = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        let peer = self.start_with(p, mine)?;
        self.path = Some(self.attach_peer(peer.as_ref(), p.test, true)?);
        let mut fetched = Fetched::default();
        let timing = match p.test {
            TestId::AddLat => self.add_lat_initiator(p)?,
            TestId::AddMr => self.add_mr_initiator(p)?,
            _ => self.fetch_initiator(p, &mut fetched)?,
        };
        let (w, chan, t) = (&mut self.worker, &mut self.chan, self.timeout);
        flush(w, chan, t, self.ep)?;
        done_and_verdict(w, chan, t, p.test)?;
        let total = p.warmup + p.iterations;
        let error = match &self.bufs.mine {
            Some(m) => check_word("this side's word", m.word(p.size), total),
            None => fetched.verdict(),
        };
        if let Some(e) = error {
            tracing::error!("{}: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    pub(super) fn add_lat_initiator(&mut self, p: &Params) -> Result<Timing> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(mine), Some((addr, rk))) = (&self.bufs.mine, &self.bufs.peer) else {
            return Err(Status::NoMemory);
        };
        let size = atomic_size(p.size);
        let round = |w: &mut Worker, chan: &mut C, i: u64| -> Result<()> {
            w.atomic_post(ep, AtomicOp::Add, size, 1, *addr, rk)?;
            spin(w, chan, t, "the peer's add", || mine.word(p.size) > i)
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
        Ok(st.finish())
    }

    pub(super) fn add_mr_initiator(&mut self, p: &Params) -> Result<Timing> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let Some((addr, rk)) = &self.bufs.peer else {
            return Err(Status::NoMemory);
        };
        let size = atomic_size(p.size);
        // Decided at setup: on the direct path a post is a CPU atomic, complete in the
        // call, so only the end of a phase flushes (as ucx_perftest waits only for
        // requests). Emulated posts are requests inside ucp, flushed every `window`.
        let window = match self.path {
            Some(RmaPath::Direct) => u64::MAX,
            _ => u64::from(p.window.max(1)),
        };
        let posts = |w: &mut Worker, chan: &mut C, count: u64, mut mark: Option<&mut Stamps>| {
            let mut unflushed = 0u64;
            for _ in 0..count {
                w.atomic_post(ep, AtomicOp::Add, size, 1, *addr, rk)?;
                unflushed += 1;
                if unflushed == window {
                    flush(w, chan, t, ep)?;
                    unflushed = 0;
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            flush(w, chan, t, ep)
        };
        posts(w, chan, p.warmup, None)?;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        posts(w, chan, p.iterations, Some(&mut st))?;
        Ok(st.finish())
    }

    /// fadd_lat, swap_lat, cswap_lat (one at a time) and fadd_mr (`window` in flight).
    pub(super) fn fetch_initiator(&mut self, p: &Params, fetched: &mut Fetched) -> Result<Timing> {
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let (Some(slots), Some((addr, rk))) = (&self.bufs.recv, &self.bufs.peer) else {
            return Err(Status::NoMemory);
        };
        let size = atomic_size(p.size);
        let window = if p.test == TestId::FaddMr {
            p.window.max(1) as u64
        } else {
            1
        };
        // Operation i writes its result into slot i % window; slots holds 8 * window
        // bytes, so the slot calls never fail (a failed read reads as a wrong value).
        let slot = |i: u64| (i % window) as usize;
        let read = |i: u64| -> u64 { slots.read_slot(slot(i), p.size).unwrap_or(u64::MAX) };
        let mut inflight: VecDeque<(Request, u64)> = VecDeque::with_capacity(window as usize);
        let mut run = |w: &mut Worker,
                       chan: &mut C,
                       from: u64,
                       to: u64,
                       mut mark: Option<&mut Stamps>|
         -> Result<()> {
            for i in from..to {
                if inflight.len() as u64 >= window {
                    drain_tagged(w, chan, t, &mut inflight, window as usize - 1, |k| {
                        fetched.check(k, read(k));
                    })?;
                }
                let (op, value, compare) = fetch_op(p.test, i);
                let r = w.atomic_fetch_nb(
                    ep,
                    op,
                    size,
                    value,
                    compare,
                    slots.ucp_slot(slot(i))?,
                    *addr,
                    rk,
                    None,
                )?;
                match r {
                    None => fetched.check(i, read(i)),
                    Some(r) if window == 1 => {
                        wait_one(w, chan, t, "an atomic", Some(r))?;
                        fetched.check(i, read(i));
                    }
                    Some(r) => inflight.push_back((r, i)),
                }
                if let Some(st) = mark.as_deref_mut() {
                    st.mark();
                }
            }
            drain_tagged(w, chan, t, &mut inflight, 0, |k| fetched.check(k, read(k)))
        };
        run(w, chan, 0, p.warmup, None)?;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        run(w, chan, p.warmup, p.warmup + p.iterations, Some(&mut st))?;
        Ok(st.finish())
    }

    pub(super) fn amo_responder(&mut self, p: &Params, peer: Option<&RegionInfo>) -> Result<()> {
        let ctx = self.worker.context().clone();
        self.bufs = Buffers {
            mine: Some(MsgBuf::mapped(&ctx, p.size)?),
            ..Default::default()
        };
        if p.test == TestId::AddLat {
            self.attach_peer(peer, p.test, true)?;
        }
        let region = self.bufs.mine.as_ref().and_then(MsgBuf::region);
        self.chan.send(&Msg::Ready { region })?;
        let total = p.warmup + p.iterations;
        let (w, ep, chan, t) = (&mut self.worker, self.ep, &mut self.chan, self.timeout);
        let Some(mine) = &self.bufs.mine else {
            return Err(Status::NoMemory);
        };
        if p.test == TestId::AddLat {
            let Some((addr, rk)) = &self.bufs.peer else {
                return Err(Status::NoMemory);
            };
            let size = atomic_size(p.size);
            for i in 0..total {
                spin(w, chan, t, "the initiator's add", || mine.word(p.size) > i)?;
                w.atomic_post(ep, AtomicOp::Add, size, 1, *addr, rk)?;
            }
            flush(w, chan, t, ep)?;
        }
        progress_until_done(w, chan, t)?;
        judge(chan, || check_word("the word", mine.word(p.size), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetching_operations_fetch_their_index() {
        // Simulate the word: every operation applied in order fetches its index.
        for test in [
            TestId::FaddLat,
            TestId::SwapLat,
            TestId::CswapLat,
            TestId::FaddMr,
        ] {
            let mut word = 0u64;
            let mut f = Fetched::default();
            for i in 0..100 {
                let (op, value, compare) = fetch_op(test, i);
                let old = word;
                word = match op {
                    AtomicOp::Add => word + value,
                    AtomicOp::Swap => value,
                    AtomicOp::Cswap if word == compare => value,
                    _ => word,
                };
                f.check(i, old);
            }
            assert_eq!(word, 100, "{test}");
            assert_eq!(f.verdict(), None);
        }
        let mut f = Fetched::default();
        f.check(3, 4);
        f.check(5, 9);
        assert_eq!(f.verdict().unwrap(), "operation 3 fetched 4, expected 3");
        assert!(check_word("w", 5, 6).unwrap().contains("expected 6"));
        assert_eq!(atomic_size(4), AtomicSize::B32);
        assert_eq!(atomic_size(8), AtomicSize::B64);
    }
}
