//! The two sides of every transport test.
//!
//! - am_lat: ping-pong of active messages; the handlers only count arrivals and the main
//!   loops reply, so a handler never sends from inside progress.
//! - am_bw: the initiator sends as fast as the transport takes messages (retrying after
//!   progress on `NoResource`), optionally bounded by a credit window; the responder
//!   counts and acknowledges the last message, which stops the initiator's clock.
//! - put_lat: ping-pong through memory: each side puts into the other's region and polls
//!   the last byte of its own for the sequence number of the round.
//! - put_bw / get_bw: a stream of puts or gets, flushed at the end (and every `window`
//!   operations if set); get_lat: one get after the other, each complete before the next.
//!
//! Every message and region carries [`pattern`] data, checked once per test: the last
//! message of an AM test by the receiving handler, regions and get buffers at the end.

use super::ops::{
    AmBcopy, AmShort, AmZcopy, GetBcopy, GetZcopy, Op, Put, PutBcopy, PutShort, PutZcopy,
};
use super::wait::{flush, idle, issue, spin};
use super::{family, Family, UctPeer, AM_CREDIT, AM_PING, AM_PONG};
use crate::channel::{Channel, Msg, RegionInfo};
use crate::mem::{pattern, pattern_mismatch, pattern_vec, AlignedBuf, Region};
use crate::params::Params;
use crate::registry::{Layout, TestId};
use crate::stats::{stride_of, Stamps, Timing};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use ucs::{Result, Status};

/// What an AM handler saw. Handlers run inside `progress` on the same thread as the loop
/// that reads these, so relaxed atomics suffice; they are atomics because a handler must
/// be `Send`.
#[derive(Default)]
pub(super) struct AmRx {
    count: AtomicU64,
    /// Messages with the wrong length, or a checked message with wrong content.
    bad: AtomicU64,
    /// Largest 8-byte value received (credit messages carry the receiver's count).
    max_value: AtomicU64,
}

impl AmRx {
    #[inline]
    pub(super) fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    pub(super) fn verdict(&self, expected: u64) -> Option<String> {
        let (n, bad) = (self.count(), self.bad.load(Relaxed));
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
}

/// Sequence number of round `i` of a put ping-pong: never 0 (the regions start zeroed)
/// and different from the previous round's.
#[inline]
pub(super) fn seq(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Checks a region after a test: [`pattern`] everywhere, except the last byte which must
/// be `last` when given.
pub(super) fn check_region(region: &Region, last: Option<u8>) -> Option<String> {
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

impl<C: Channel> UctPeer<C> {
    /// Installs a handler for `id` that counts messages, checks their length against
    /// `expect` and the content of message number `check_at` (1-based).
    pub(super) fn install_rx(
        &mut self,
        id: u8,
        expect: Option<Vec<u8>>,
        check_at: u64,
    ) -> Result<Arc<AmRx>> {
        let rx = Arc::new(AmRx::default());
        let seen = rx.clone();
        self.iface.set_am_handler(
            id,
            Box::new(move |data: &[u8]| {
                let n = seen.count.load(Relaxed) + 1;
                if let Some(e) = &expect {
                    if data.len() != e.len() || (n == check_at && data != &e[..]) {
                        seen.bad.fetch_add(1, Relaxed);
                    }
                }
                if let Some(v) = data.get(..8) {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(v);
                    // The handler is the only writer (it runs inside the interface's
                    // progress, on one thread), so a plain load and store keep the
                    // maximum; a locked read-modify-write would sit on the latency path.
                    let v = u64::from_ne_bytes(b);
                    if v > seen.max_value.load(Relaxed) {
                        seen.max_value.store(v, Relaxed);
                    }
                }
                seen.count.store(n, Relaxed);
            }),
        )?;
        Ok(rx)
    }

    pub(super) fn clear_handlers(&mut self, ids: &[u8]) {
        for &id in ids {
            let _ = self.iface.clear_am_handler(id);
        }
    }

    fn start(&mut self, p: &Params, region: Option<RegionInfo>) -> Result<Option<RegionInfo>> {
        self.chan.send(&Msg::Start {
            params: p.clone(),
            region,
        })?;
        self.expect_ready()
    }

    // ---- active messages -------------------------------------------------------------

    pub(super) fn am_initiator(&mut self, p: &Params, layout: Layout) -> Result<Timing> {
        let (ep, id, data) = (self.ep, AM_PING, pattern_vec(p.size));
        let r = match layout {
            Layout::Short => self.am_initiator_with(p, AmShort { ep, id, data }),
            Layout::Bcopy => self.am_initiator_with(p, AmBcopy { ep, id, data }),
            Layout::Zcopy => self.am_initiator_with(p, AmZcopy { ep, id, data }),
            Layout::Contig => Err(Status::Unsupported),
        };
        self.clear_handlers(&[AM_PONG, AM_CREDIT]);
        r
    }

    fn am_initiator_with<O: Op>(&mut self, p: &Params, op: O) -> Result<Timing> {
        match p.test {
            TestId::AmLat => self.am_lat_initiator(p, op),
            _ => self.am_bw_initiator(p, op),
        }
    }

    pub(super) fn am_responder(&mut self, p: &Params, layout: Layout) -> Result<()> {
        let (ep, id, data) = (self.ep, AM_PONG, pattern_vec(p.size));
        let r = match (p.test, layout) {
            (TestId::AmLat, Layout::Short) => self.am_lat_responder(p, AmShort { ep, id, data }),
            (TestId::AmLat, Layout::Bcopy) => self.am_lat_responder(p, AmBcopy { ep, id, data }),
            (TestId::AmLat, Layout::Zcopy) => self.am_lat_responder(p, AmZcopy { ep, id, data }),
            _ => self.am_bw_responder(p),
        };
        self.clear_handlers(&[AM_PING]);
        r
    }

    fn am_lat_initiator<O: Op>(&mut self, p: &Params, mut op: O) -> Result<Timing> {
        let total = p.warmup + p.iterations;
        let rx = self.install_rx(AM_PONG, Some(pattern_vec(p.size)), total)?;
        self.start(p, None)?;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        let mut round = |i: u64| -> Result<()> {
            issue(&mut op, iface, chan, t)?;
            spin(iface, chan, t, "a pong", || rx.count() > i)
        };
        for i in 0..p.warmup {
            round(i)?;
        }
        st.start();
        for i in p.warmup..total {
            round(i)?;
            st.mark();
        }
        let timing = st.finish();
        self.done_and_verdict(p.test)?;
        if let Some(e) = rx.verdict(total) {
            tracing::error!("am_lat: replies: {e}");
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    fn am_lat_responder<O: Op>(&mut self, p: &Params, mut op: O) -> Result<()> {
        let total = p.warmup + p.iterations;
        let rx = self.install_rx(AM_PING, Some(pattern_vec(p.size)), total)?;
        self.chan.send(&Msg::Ready { region: None })?;
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        for i in 0..total {
            spin(iface, chan, t, "a ping", || rx.count() > i)?;
            issue(&mut op, iface, chan, t)?;
        }
        self.await_done_and_judge(|| rx.verdict(total))
    }

    fn am_bw_initiator<O: Op>(&mut self, p: &Params, mut op: O) -> Result<Timing> {
        let acks = self.install_rx(AM_PONG, None, 0)?;
        let credits = self.install_rx(AM_CREDIT, None, 0)?;
        self.start(p, None)?;
        let window = u64::from(p.window);
        let mut sent = 0u64;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        let mut send = |iface: &mut uct::Iface, chan: &mut C| -> Result<()> {
            if window > 0 {
                spin(iface, chan, t, "credits", || {
                    sent - credits.max_value.load(Relaxed) < window
                })?;
            }
            issue(&mut op, iface, chan, t)?;
            sent += 1;
            Ok(())
        };
        let mut expected_acks = 0;
        if p.warmup > 0 {
            for _ in 0..p.warmup {
                send(iface, chan)?;
            }
            expected_acks += 1;
            idle(iface, chan, t, "the warm-up acknowledgement", || {
                acks.count() >= expected_acks
            })?;
        }
        st.start();
        for _ in 0..p.iterations {
            send(iface, chan)?;
            st.mark();
        }
        expected_acks += 1;
        spin(iface, chan, t, "the final acknowledgement", || {
            acks.count() >= expected_acks
        })?;
        let timing = st.finish();
        self.done_and_verdict(p.test)?;
        Ok(timing)
    }

    fn am_bw_responder(&mut self, p: &Params) -> Result<()> {
        let total = p.warmup + p.iterations;
        let rx = self.install_rx(AM_PING, Some(pattern_vec(p.size)), total)?;
        self.chan.send(&Msg::Ready { region: None })?;
        let ep = self.ep;
        let mut ack = AmShort {
            ep,
            id: AM_PONG,
            data: vec![0; 8],
        };
        let mut credit = AmShort {
            ep,
            id: AM_CREDIT,
            data: vec![0; 8],
        };
        let window = u64::from(p.window);
        // Credits go back every half window, so the sender rarely stalls on them.
        let half = (window / 2).max(1);
        let mut credited = 0u64;
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        let targets = [p.warmup, total];
        for &target in targets.iter().filter(|&&n| n > 0) {
            if window == 0 {
                spin(iface, chan, t, "messages", || rx.count() >= target)?;
            } else {
                loop {
                    let goal = target.min(credited + half);
                    spin(iface, chan, t, "messages", || rx.count() >= goal)?;
                    let n = rx.count();
                    credit.data.copy_from_slice(&n.to_ne_bytes());
                    issue(&mut credit, iface, chan, t)?;
                    credited = n;
                    if n >= target {
                        break;
                    }
                }
            }
            ack.data.copy_from_slice(&rx.count().to_ne_bytes());
            issue(&mut ack, iface, chan, t)?;
        }
        self.await_done_and_judge(|| rx.verdict(total))
    }

    // ---- remote memory access --------------------------------------------------------

    pub(super) fn rma_initiator(&mut self, p: &Params, layout: Layout) -> Result<Timing> {
        // put_lat has the responder put back into this side's memory.
        let mine = match p.test {
            TestId::PutLat => Some(self.region(layout, p.size)?),
            _ => None,
        };
        let Some(remote) = self.start(p, mine.as_ref().map(Region::info))? else {
            tracing::error!("{}: the responder sent no memory region", p.test);
            return Err(Status::InvalidParam);
        };
        let rkey = self.md.rkey_unpack(&remote.rkey.0)?;
        let f = family(p.test);
        let data = match f {
            Family::Get => AlignedBuf::zeroed(p.size)?,
            _ => AlignedBuf::from_slice(&pattern_vec(p.size))?,
        };
        let x = Put {
            ep: self.ep,
            data,
            addr: remote.address,
            rkey,
        };
        let mine = mine.as_ref();
        match (f, layout) {
            (Family::Put, Layout::Short) => self.rma_initiator_with(p, PutShort(x), mine),
            (Family::Put, Layout::Bcopy) => self.rma_initiator_with(p, PutBcopy(x), mine),
            (Family::Put, Layout::Zcopy) => self.rma_initiator_with(p, PutZcopy(x), mine),
            (Family::Get, Layout::Bcopy) => self.rma_initiator_with(p, GetBcopy(x), mine),
            (Family::Get, Layout::Zcopy) => self.rma_initiator_with(p, GetZcopy(x), mine),
            _ => Err(Status::Unsupported),
        }
    }

    fn rma_initiator_with<O: Op>(
        &mut self,
        p: &Params,
        mut op: O,
        mine: Option<&Region>,
    ) -> Result<Timing> {
        let timing = match (p.test, mine) {
            (TestId::PutLat, Some(mine)) => self.put_lat_initiator(p, &mut op, mine)?,
            (TestId::PutLat, None) => return Err(Status::InvalidParam),
            _ => self.rma_stream(p, &mut op)?,
        };
        self.done_and_verdict(p.test)?;
        let error = match (p.test, mine) {
            (TestId::PutLat, Some(mine)) => {
                check_region(mine, Some(seq(p.warmup + p.iterations - 1)))
            }
            (TestId::GetLat | TestId::GetBw, _) => pattern_mismatch(op.buf(), false)
                .map(|off| format!("byte {off} of the data read is wrong")),
            _ => None,
        };
        if let Some(e) = error {
            tracing::error!("{}: {e}", p.test);
            return Err(Status::IoError);
        }
        Ok(timing)
    }

    pub(super) fn put_lat_initiator<O: Op>(
        &mut self,
        p: &Params,
        op: &mut O,
        mine: &Region,
    ) -> Result<Timing> {
        let total = p.warmup + p.iterations;
        let last = p.size - 1;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        let mut round = |i: u64| -> Result<()> {
            let s = seq(i);
            op.buf()[last] = s;
            issue(op, iface, chan, t)?;
            spin(iface, chan, t, "the peer's put", || mine.last() == s)
        };
        for i in 0..p.warmup {
            round(i)?;
        }
        st.start();
        for i in p.warmup..total {
            round(i)?;
            st.mark();
        }
        Ok(st.finish())
    }

    /// put_bw, get_bw and get_lat: operations one after the other.
    pub(super) fn rma_stream<O: Op>(&mut self, p: &Params, op: &mut O) -> Result<Timing> {
        let (iface, chan, t, ep) = (&mut self.iface, &mut self.chan, self.timeout, self.ep);
        // get_lat waits for each get; a get that completed in place needs no flush.
        let latency = p.test == TestId::GetLat;
        let window = u64::from(p.window);
        for _ in 0..p.warmup {
            issue(op, iface, chan, t)?;
        }
        flush(iface, ep, chan, t)?;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        st.start();
        let mut unflushed = 0u64;
        for _ in 0..p.iterations {
            let complete = issue(op, iface, chan, t)?;
            unflushed += 1;
            if (latency && !complete) || unflushed == window {
                flush(iface, ep, chan, t)?;
                unflushed = 0;
            }
            st.mark();
        }
        flush(iface, ep, chan, t)?;
        Ok(st.finish())
    }

    pub(super) fn rma_responder(
        &mut self,
        p: &Params,
        layout: Layout,
        peer: Option<&RegionInfo>,
    ) -> Result<()> {
        let region = self.region(layout, p.size)?;
        match p.test {
            TestId::PutLat => {
                let Some(peer) = peer else {
                    tracing::error!("put_lat: the initiator sent no memory region");
                    return Err(Status::InvalidParam);
                };
                let x = Put {
                    ep: self.ep,
                    data: AlignedBuf::from_slice(&pattern_vec(p.size))?,
                    addr: peer.address,
                    rkey: self.md.rkey_unpack(&peer.rkey.0)?,
                };
                match layout {
                    Layout::Short => self.put_lat_responder(p, PutShort(x), region),
                    Layout::Bcopy => self.put_lat_responder(p, PutBcopy(x), region),
                    Layout::Zcopy => self.put_lat_responder(p, PutZcopy(x), region),
                    Layout::Contig => Err(Status::Unsupported),
                }
            }
            TestId::PutBw => {
                self.chan.send(&Msg::Ready {
                    region: Some(region.info()),
                })?;
                self.await_done_and_judge(|| check_region(&region, None))
            }
            _ => {
                region.fill_pattern();
                self.chan.send(&Msg::Ready {
                    region: Some(region.info()),
                })?;
                // Gets must not change the memory they read.
                self.await_done_and_judge(|| check_region(&region, None))
            }
        }
    }

    fn put_lat_responder<O: Op>(&mut self, p: &Params, mut op: O, region: Region) -> Result<()> {
        let total = p.warmup + p.iterations;
        let last = p.size - 1;
        self.chan.send(&Msg::Ready {
            region: Some(region.info()),
        })?;
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        for i in 0..total {
            let s = seq(i);
            spin(iface, chan, t, "the initiator's put", || region.last() == s)?;
            op.buf()[last] = s;
            issue(&mut op, iface, chan, t)?;
        }
        self.await_done_and_judge(|| check_region(&region, Some(seq(total - 1))))
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
    fn verdicts() {
        let rx = AmRx::default();
        rx.count.store(5, Relaxed);
        assert_eq!(rx.verdict(5), None);
        assert!(rx.verdict(6).unwrap().contains("expected 6"));
        rx.bad.store(1, Relaxed);
        assert!(rx.verdict(5).unwrap().contains("wrong length"));
    }
}
