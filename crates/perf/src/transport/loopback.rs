//! Loopback for the transport-layer tests (rucx-perftest `-l -x self`): one interface
//! whose endpoint leads back to itself, every test whole in this process, with the
//! operations of the two-process tests.
//!
//! - am_lat: send a message and progress until this interface's handler has counted it.
//! - am_bw: send message after message (retrying after progress when the transport has no
//!   resources), then progress until the handler has counted every one.
//! - put_lat: put this round's number (the last byte) into this process's own region and
//!   poll until it shows there; put_bw, get_lat, get_bw: the initiator's loops of the
//!   two-process tests on this process's own region.
//!
//! Checks as in the two-process tests: every message's length and the last one's bytes,
//! the region after a put test (the round's number last for put_lat), the bytes of the
//! last get and the region a get read.

use super::ops::{
    AmBcopy, AmShort, AmZcopy, GetBcopy, GetZcopy, Op, Put, PutBcopy, PutShort, PutZcopy,
};
use super::runs::{check_region, seq};
use super::wait::{flush, issue, spin};
use super::{family, Family, UctPeer, AM_PING};
use crate::channel::Channel;
use crate::mem::{pattern_mismatch, pattern_vec, AlignedBuf};
use crate::params::Params;
use crate::protocol::NoPeer;
use crate::registry::{Layout, TestId};
use crate::stats::{stride_of, Stamps, Timing};
use std::time::Duration;
use ucs::{Result, Status};
use uct::{Iface, IfaceConfig, Md, Transport};

impl UctPeer<NoPeer> {
    /// An interface of `transport` (`self`, or another that reaches its own process)
    /// with an endpoint to itself; `timeout` bounds every wait of a test.
    pub fn loopback(transport: &str, timeout: Duration) -> Result<UctPeer<NoPeer>> {
        let tl = Transport::from_name(transport).ok_or_else(|| {
            tracing::error!("unknown transport '{transport}'");
            Status::NoDevice
        })?;
        let cfg = IfaceConfig::from_env()?;
        let mut iface = Iface::open(tl, &cfg)?;
        let address = iface.address().to_vec();
        let ep = iface.ep_create(&address).inspect_err(|e| {
            tracing::error!("cannot connect {} to itself: {e}", tl.name());
        })?;
        Ok(UctPeer {
            iface,
            md: Md::open(tl),
            ep,
            chan: NoPeer,
            timeout,
            transport: tl.name().into(),
            loopback: true,
        })
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

impl<C: Channel> UctPeer<C> {
    /// Runs test `p` (its layout resolved to `layout`) whole in this process.
    pub(super) fn loopback_run(&mut self, p: &Params, layout: Layout) -> Result<Timing> {
        match family(p.test) {
            Family::Am => {
                let (ep, id, data) = (self.ep, AM_PING, pattern_vec(p.size));
                let r = match layout {
                    Layout::Short => self.lb_am(p, AmShort { ep, id, data }),
                    Layout::Bcopy => self.lb_am(p, AmBcopy { ep, id, data }),
                    Layout::Zcopy => self.lb_am(p, AmZcopy { ep, id, data }),
                    Layout::Contig => Err(Status::Unsupported),
                };
                self.clear_handlers(&[AM_PING]);
                r
            }
            Family::Put | Family::Get => self.lb_rma(p, layout),
            Family::None => Err(Status::Unsupported),
        }
    }

    fn lb_am<O: Op>(&mut self, p: &Params, mut op: O) -> Result<Timing> {
        let total = p.warmup + p.iterations;
        let rx = self.install_rx(AM_PING, Some(pattern_vec(p.size)), total)?;
        let latency = p.test == TestId::AmLat;
        let mut st = Stamps::new(p.iterations, stride_of(p.test.info().kind));
        let (iface, chan, t) = (&mut self.iface, &mut self.chan, self.timeout);
        let mut sent = 0u64;
        let mut one = |iface: &mut Iface, chan: &mut C| -> Result<()> {
            issue(&mut op, iface, chan, t)?;
            sent += 1;
            if latency {
                spin(iface, chan, t, "the message", || rx.count() >= sent)?;
            }
            Ok(())
        };
        for _ in 0..p.warmup {
            one(iface, chan)?;
        }
        st.start();
        for _ in 0..p.iterations {
            one(iface, chan)?;
            st.mark();
        }
        spin(iface, chan, t, "the messages", || rx.count() >= total)?;
        let timing = st.finish();
        fail_on(p.test, rx.verdict(total))?;
        Ok(timing)
    }

    fn lb_rma(&mut self, p: &Params, layout: Layout) -> Result<Timing> {
        let region = self.region(layout, p.size)?;
        let get = family(p.test) == Family::Get;
        if get {
            region.fill_pattern();
        }
        let info = region.info();
        let x = Put {
            ep: self.ep,
            data: if get {
                AlignedBuf::zeroed(p.size)?
            } else {
                AlignedBuf::from_slice(&pattern_vec(p.size))?
            },
            addr: info.address,
            rkey: self.md.rkey_unpack(&info.rkey.0)?,
        };
        let (timing, mut got) = match (p.test, layout) {
            (TestId::PutLat, Layout::Short) => {
                (self.put_lat_initiator(p, &mut PutShort(x), &region)?, None)
            }
            (TestId::PutLat, Layout::Bcopy) => {
                (self.put_lat_initiator(p, &mut PutBcopy(x), &region)?, None)
            }
            (TestId::PutLat, Layout::Zcopy) => {
                (self.put_lat_initiator(p, &mut PutZcopy(x), &region)?, None)
            }
            (_, Layout::Short) => (self.rma_stream(p, &mut PutShort(x))?, None),
            (_, Layout::Bcopy) if !get => (self.rma_stream(p, &mut PutBcopy(x))?, None),
            (_, Layout::Zcopy) if !get => (self.rma_stream(p, &mut PutZcopy(x))?, None),
            (_, Layout::Bcopy) => {
                let mut op = GetBcopy(x);
                (self.rma_stream(p, &mut op)?, Some(op.buf().to_vec()))
            }
            (_, Layout::Zcopy) => {
                let mut op = GetZcopy(x);
                (self.rma_stream(p, &mut op)?, Some(op.buf().to_vec()))
            }
            (_, Layout::Contig) => return Err(Status::Unsupported),
        };
        flush(&mut self.iface, self.ep, &mut self.chan, self.timeout)?;
        let last = (p.test == TestId::PutLat).then(|| seq(p.warmup + p.iterations - 1));
        let error = got
            .take()
            .and_then(|d| {
                pattern_mismatch(&d, false)
                    .map(|off| format!("byte {off} of the data read is wrong"))
            })
            .or_else(|| check_region(&region, last));
        fail_on(p.test, error)?;
        Ok(timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every transport-layer test in loopback over the self transport, every layout the
    /// size allows, each checked by the test itself.
    #[test]
    fn every_transport_test_in_loopback() {
        let mut lb = UctPeer::loopback("self", Duration::from_secs(60)).unwrap();
        assert_eq!(lb.transport(), "self");
        let cases = [
            (TestId::AmLat, 8, Layout::Short),
            (TestId::AmLat, 1000, Layout::Bcopy),
            (TestId::AmLat, 3000, Layout::Zcopy),
            (TestId::AmBw, 8, Layout::Short),
            (TestId::AmBw, 4096, Layout::Bcopy),
            (TestId::PutLat, 8, Layout::Short),
            (TestId::PutLat, 5000, Layout::Bcopy),
            (TestId::PutLat, 70_000, Layout::Zcopy),
            (TestId::PutBw, 64, Layout::Short),
            (TestId::PutBw, 65536, Layout::Zcopy),
            (TestId::GetLat, 8, Layout::Bcopy),
            (TestId::GetBw, 100_000, Layout::Zcopy),
        ];
        for (test, size, layout) in cases {
            let p = Params {
                size,
                layout: Some(layout),
                transport: "self".into(),
                iterations: 50,
                warmup: 5,
                ..Params::new(test)
            };
            let r = lb
                .run(&p)
                .unwrap_or_else(|e| panic!("{test} {size} {layout}: {e}"));
            assert_eq!((r.test, r.size, r.iterations), (test, size, 50));
            assert_eq!((r.layout, r.transport.as_str()), (layout, "self"));
            assert!(r.latency_avg_us > 0.0 && r.msg_rate > 0.0, "{test}");
        }
    }
}
