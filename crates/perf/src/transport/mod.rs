//! The transport-layer (`uct`) tests: am_lat, am_bw, put_lat, put_bw, get_lat, get_bw,
//! between two processes, each with one interface and one endpoint to the other; or in
//! one process on an interface whose endpoint leads to itself (`loopback.rs`).
//!
//! [`UctPeer::connect`] opens the interface and trades addresses over the [`Channel`].
//! Then the initiator calls [`UctPeer::run`] once per test and the responder sits in
//! [`UctPeer::serve`]. For every test the initiator sends `Start` (the parameters with the
//! layout resolved, and its memory region if the responder writes to it), the responder
//! answers `Ready` (with its region if the test uses it), both run their part of the test,
//! the initiator sends `Done` and the responder checks what it received and answers with a
//! `Verdict`. The initiator checks its side too; wrong data fails the run.

mod loopback;
mod ops;
mod runs;
pub(crate) mod wait;

use crate::channel::{Channel, Msg, RegionInfo};
use crate::handshake::{self, Hello};
use crate::mem::Region;
use crate::params::Params;
use crate::registry::{Layout, TestId};
use crate::stats::{PerfResult, Subject};
use std::time::Duration;
use ucs::{Result, Status};
use uct::{Caps, EpId, Iface, IfaceAttr, IfaceConfig, Md, Transport};

/// Active-message ids of the tests.
const AM_PING: u8 = 1;
const AM_PONG: u8 = 2;
const AM_CREDIT: u8 = 3;

/// Which group of transport operations a test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Am,
    Put,
    Get,
    /// Not a transport test.
    None,
}

fn family(t: TestId) -> Family {
    match t {
        TestId::AmLat | TestId::AmBw => Family::Am,
        TestId::PutLat | TestId::PutBw => Family::Put,
        TestId::GetLat | TestId::GetBw => Family::Get,
        // The protocol-layer tests.
        _ => Family::None,
    }
}

/// The capability and the message sizes (inclusive) of `layout` in `family`, or `None`
/// when the family has no such operation.
fn limits(attr: &IfaceAttr, f: Family, layout: Layout) -> Option<(Caps, usize, usize)> {
    Some(match (f, layout) {
        (Family::Am, Layout::Short) => {
            (Caps::AM_SHORT, ops::AM_HDR, attr.max_am_short + ops::AM_HDR)
        }
        (Family::Am, Layout::Bcopy) => (Caps::AM_BCOPY, 1, attr.max_am_bcopy),
        (Family::Am, Layout::Zcopy) => (Caps::AM_ZCOPY, 1, attr.max_am_zcopy),
        (Family::Put, Layout::Short) => (Caps::PUT_SHORT, 1, attr.max_put_short),
        (Family::Put, Layout::Bcopy) => (Caps::PUT_BCOPY, 1, attr.max_put_bcopy),
        (Family::Put, Layout::Zcopy) => (Caps::PUT_ZCOPY, 1, attr.max_put_zcopy),
        (Family::Get, Layout::Short) => return None,
        (Family::Get, Layout::Bcopy) => (Caps::GET_BCOPY, 1, attr.max_get_bcopy),
        (Family::Get, Layout::Zcopy) => (Caps::GET_ZCOPY, 1, attr.max_get_zcopy),
        (_, Layout::Contig) | (Family::None, _) => return None,
    })
}

/// Why `size` cannot use `layout`, or `None` if it can.
fn unfit(attr: &IfaceAttr, t: TestId, layout: Layout, size: usize) -> Option<String> {
    let Some((cap, min, max)) = limits(attr, family(t), layout) else {
        return Some(format!("{t} has no {layout} operation"));
    };
    if !attr.caps.contains(cap) {
        return Some(format!("the transport has no {layout} operation for {t}"));
    }
    if size < min || size > max {
        return Some(format!(
            "{t} with {layout} layout takes {min}..={max} bytes, not {size}"
        ));
    }
    None
}

/// The layout of `p` (or the first of the test's layouts that fits its size).
fn resolve(attr: &IfaceAttr, p: &Params) -> Result<Layout> {
    let info = p.test.info();
    if let Some(l) = p.layout {
        if let Some(why) = unfit(attr, p.test, l, p.size) {
            tracing::error!("{why}");
            return Err(Status::InvalidParam);
        }
        return Ok(l);
    }
    info.layouts
        .iter()
        .copied()
        .find(|&l| unfit(attr, p.test, l, p.size).is_none())
        .ok_or_else(|| {
            tracing::error!("{}: no data layout takes {} bytes", info.name, p.size);
            Status::InvalidParam
        })
}

/// The transport named `name`, if rucx-perftest can run between two processes over it.
fn open_transport(name: &str) -> Result<Transport> {
    let tl = Transport::from_name(name).ok_or_else(|| {
        tracing::error!("unknown transport '{name}'");
        Status::NoDevice
    })?;
    if tl == Transport::SelfTl {
        tracing::error!(
            "transport 'self' only reaches its own process; rucx-perftest runs \
             between two processes (use shm)"
        );
        return Err(Status::Unsupported);
    }
    Ok(tl)
}

/// One side of the transport tests: an interface, its endpoint to the peer, a memory
/// domain and the channel to the peer.
pub struct UctPeer<C: Channel> {
    iface: Iface,
    md: Md,
    ep: EpId,
    chan: C,
    timeout: Duration,
    transport: String,
    /// The endpoint leads to this interface itself ([`UctPeer::loopback`]): tests run
    /// whole in this process.
    loopback: bool,
}

impl<C: Channel> UctPeer<C> {
    /// Opens `transport` and connects to the peer at the other end of `chan`: sends this
    /// side's hello, then reads the peer's. Either side may call this (the other calling
    /// it too, or [`UctPeer::accept`]); `timeout` bounds every later wait for the peer.
    pub fn connect(transport: &str, mut chan: C, timeout: Duration) -> Result<UctPeer<C>> {
        let tl = open_transport(transport)?;
        let cfg = IfaceConfig::from_env()?;
        let iface = Iface::open(tl, &cfg)?;
        handshake::send_hello(&mut chan, tl.name(), iface.address())?;
        let hello = handshake::recv_hello(&mut chan, timeout)?;
        handshake::check_hello(&hello, tl.name())?;
        Self::attach(tl, iface, &hello.address, chan, timeout)
    }

    /// Responder: answers the initiator's `hello` (already received) with this side's,
    /// over the transport the hello names.
    pub fn accept(hello: &Hello, mut chan: C, timeout: Duration) -> Result<UctPeer<C>> {
        let tl = open_transport(&hello.transport)?;
        handshake::check_hello(hello, tl.name())?;
        let cfg = IfaceConfig::from_env()?;
        let iface = Iface::open(tl, &cfg)?;
        handshake::send_hello(&mut chan, tl.name(), iface.address())?;
        Self::attach(tl, iface, &hello.address, chan, timeout)
    }

    fn attach(
        tl: Transport,
        mut iface: Iface,
        address: &[u8],
        chan: C,
        timeout: Duration,
    ) -> Result<UctPeer<C>> {
        let ep = iface.ep_create(address).inspect_err(|e| {
            tracing::error!("cannot connect to the peer's interface: {e}");
        })?;
        Ok(UctPeer {
            iface,
            md: Md::open(tl),
            ep,
            chan,
            timeout,
            transport: tl.name().into(),
            loopback: false,
        })
    }

    /// The interface's attributes.
    pub fn attr(&self) -> &IfaceAttr {
        self.iface.attr()
    }

    /// Initiator: runs one test with the peer, which must be in [`UctPeer::serve`]. After
    /// an error the peer is told and stops serving: the two sides are out of step.
    pub fn run(&mut self, p: &Params) -> Result<PerfResult> {
        p.validate()?;
        let layout = resolve(self.iface.attr(), p)?;
        let mut p = p.clone();
        p.layout = Some(layout);
        p.transport = self.transport.clone();
        let timing = match family(p.test) {
            _ if self.loopback => self.loopback_run(&p, layout),
            Family::Am => self.am_initiator(&p, layout),
            Family::Put | Family::Get => self.rma_initiator(&p, layout),
            Family::None => Err(Status::Unsupported),
        };
        let timing = match timing {
            Ok(t) => t,
            Err(e) => {
                // Best effort: the peer may be the reason of the failure.
                let _ = self.chan.send(&Msg::Failed {
                    error: format!("initiator failed in {}: {e}", p.test),
                });
                return Err(e);
            }
        };
        let subject = Subject {
            test: p.test,
            transport: p.transport.clone(),
            layout,
            size: p.size,
            warmup: p.warmup,
            window: p.window,
        };
        PerfResult::compute(subject, p.test.info().kind, &timing)
    }

    /// Initiator: tells the responder there are no more tests of this transport; returns
    /// the channel (for tests of another transport or layer).
    pub fn finish(mut self) -> Result<C> {
        self.chan.send(&Msg::Quit)?;
        Ok(self.chan)
    }

    /// The channel, after [`UctPeer::serve`] returned.
    pub fn into_channel(self) -> C {
        self.chan
    }

    /// The transport's name.
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// Responder: serves tests until the initiator quits. A test that cannot be set up is
    /// reported to the initiator and serving goes on; a failure in the middle of a test
    /// ends serving (the two sides are out of step).
    pub fn serve(&mut self) -> Result<()> {
        loop {
            let msg = self.chan.recv(self.timeout).inspect_err(|&e| {
                if e != Status::ConnectionReset {
                    tracing::error!("waiting for the next test: {e}");
                }
            })?;
            match msg {
                Msg::Quit => return Ok(()),
                Msg::Start { params, region } => {
                    let setup = params
                        .validate()
                        .and_then(|()| params.layout.ok_or(Status::InvalidParam))
                        .and_then(|l| resolve(self.iface.attr(), &params).map(|_| l));
                    let layout = match setup {
                        Ok(l) => l,
                        Err(e) => {
                            self.chan.send(&Msg::Failed {
                                error: format!("responder cannot run {}: {e}", params.test),
                            })?;
                            continue;
                        }
                    };
                    let r = match family(params.test) {
                        Family::Am => self.am_responder(&params, layout),
                        Family::Put | Family::Get => {
                            self.rma_responder(&params, layout, region.as_ref())
                        }
                        Family::None => Err(Status::Unsupported),
                    };
                    if let Err(e) = r {
                        // Best effort: the initiator may be gone already.
                        let _ = self.chan.send(&Msg::Failed {
                            error: format!("responder failed in {}: {e}", params.test),
                        });
                        return Err(e);
                    }
                }
                m => {
                    tracing::error!("unexpected message while waiting for a test: {m:?}");
                    return Err(Status::InvalidParam);
                }
            }
        }
    }

    /// Initiator: waits for `Ready`, returning the responder's region.
    fn expect_ready(&mut self) -> Result<Option<RegionInfo>> {
        handshake::expect_ready(&mut self.chan, self.timeout)
    }

    /// Initiator: ends the test on the responder and gets its verdict.
    fn done_and_verdict(&mut self, test: TestId) -> Result<()> {
        handshake::done_and_verdict(&mut self.chan, self.timeout, test)
    }

    /// Responder: waits for `Done`, then reports `check`'s finding.
    /// The interface is progressed meanwhile (see [`wait::progress_until_done`]).
    fn await_done_and_judge(&mut self, check: impl FnOnce() -> Option<String>) -> Result<()> {
        wait::progress_until_done(&mut self.iface, &mut self.chan, self.timeout)?;
        handshake::judge(&mut self.chan, check)
    }

    /// The region a put/get test exposes: a shared segment for short and bcopy (the peer
    /// copies with loads and stores), registered heap memory for zcopy (the peer copies by
    /// cross-memory attach, as UCX's cma transport).
    fn region(&self, layout: Layout, size: usize) -> Result<Region> {
        match layout {
            Layout::Short | Layout::Bcopy => Region::alloc(&self.md, size),
            Layout::Zcopy => Region::register(&self.md, size),
            Layout::Contig => Err(Status::Unsupported),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::LineChannel;

    fn attr() -> IfaceAttr {
        Iface::open(Transport::Shm, &IfaceConfig::default())
            .unwrap()
            .attr()
            .clone()
    }

    #[test]
    fn auto_layout_follows_size() {
        let a = attr();
        let mut p = Params::new(TestId::AmLat);
        assert_eq!(resolve(&a, &p), Ok(Layout::Short));
        p.size = a.max_am_short + 9;
        assert_eq!(resolve(&a, &p), Ok(Layout::Bcopy));
        p.size = a.max_am_bcopy + 1;
        assert_eq!(resolve(&a, &p), Err(Status::InvalidParam));
        p.size = 4;
        assert_eq!(resolve(&a, &p), Ok(Layout::Bcopy));
        let mut g = Params::new(TestId::GetBw);
        g.size = 1 << 20;
        assert_eq!(resolve(&a, &g), Ok(Layout::Zcopy));
        g.layout = Some(Layout::Short);
        assert_eq!(resolve(&a, &g), Err(Status::InvalidParam));
        let mut put = Params::new(TestId::PutBw);
        put.size = 1 << 20;
        put.layout = Some(Layout::Bcopy);
        assert_eq!(resolve(&a, &put), Err(Status::InvalidParam));
    }

    /// Every test and layout, initiator and responder in two threads of this process.
    #[test]
    fn every_test_between_two_threads() {
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        let timeout = Duration::from_secs(30);
        let responder = std::thread::spawn(move || {
            let mut peer = UctPeer::connect("posix", LineChannel::new(r2, w1), timeout)?;
            peer.serve()
        });
        let mut init = UctPeer::connect("shm", LineChannel::new(r1, w2), timeout).unwrap();
        let cases = [
            (TestId::AmLat, 8, Some(Layout::Short), 0),
            (TestId::AmLat, 300, Some(Layout::Bcopy), 0),
            (TestId::AmLat, 5, Some(Layout::Zcopy), 0),
            (TestId::AmBw, 64, None, 0),
            (TestId::AmBw, 4096, Some(Layout::Bcopy), 16),
            (TestId::PutLat, 1, Some(Layout::Short), 0),
            (TestId::PutLat, 1000, Some(Layout::Bcopy), 0),
            (TestId::PutLat, 70_000, Some(Layout::Zcopy), 0),
            (TestId::PutBw, 256, Some(Layout::Short), 0),
            (TestId::PutBw, 8192, Some(Layout::Bcopy), 3),
            (TestId::PutBw, 100_000, Some(Layout::Zcopy), 0),
            (TestId::GetLat, 64, Some(Layout::Bcopy), 0),
            (TestId::GetLat, 64, Some(Layout::Zcopy), 0),
            (TestId::GetBw, 5000, None, 7),
            (TestId::GetBw, 1 << 20, Some(Layout::Zcopy), 0),
        ];
        for (test, size, layout, window) in cases {
            let p = Params {
                size,
                layout,
                window,
                iterations: 150,
                warmup: 10,
                ..Params::new(test)
            };
            let r = init
                .run(&p)
                .unwrap_or_else(|e| panic!("{test} {size} {layout:?}: {e}"));
            assert_eq!((r.test, r.size, r.iterations), (test, size, 150));
            let stride = crate::stats::stride_of(test.info().kind);
            assert_eq!(r.samples_ns.len() as u64, 150u64.div_ceil(stride));
            if let Some(l) = layout {
                assert_eq!(r.layout, l);
            }
            assert!(r.latency_avg_us > 0.0 && r.msg_rate > 0.0);
        }
        init.finish().unwrap();
        assert_eq!(responder.join().unwrap(), Ok(()));
    }

    /// A hand-driven initiator that writes wrong data: the responder's check must say so.
    #[test]
    fn responder_reports_wrong_data() {
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        let timeout = Duration::from_secs(30);
        let responder = std::thread::spawn(move || {
            let mut peer = UctPeer::connect("shm", LineChannel::new(r2, w1), timeout)?;
            peer.serve()
        });
        let mut chan = LineChannel::new(r1, w2);
        let mut iface = Iface::open(Transport::Shm, &IfaceConfig::default()).unwrap();
        chan.send(&Msg::Hello {
            protocol: crate::channel::PROTOCOL,
            transport: "shm".into(),
            address: crate::channel::Hex(iface.address()),
        })
        .unwrap();
        let Msg::Hello { address, .. } = chan.recv(timeout).unwrap() else {
            panic!("no hello");
        };
        let ep = iface.ep_create(&address.0).unwrap();
        let p = Params {
            size: 4096,
            layout: Some(Layout::Zcopy),
            ..Params::new(TestId::PutBw)
        };
        chan.send(&Msg::Start {
            params: p,
            region: None,
        })
        .unwrap();
        let Msg::Ready {
            region: Some(region),
        } = chan.recv(timeout).unwrap()
        else {
            panic!("no region");
        };
        let md = Md::open(Transport::Shm);
        let rkey = md.rkey_unpack(&region.rkey.0).unwrap();
        let mut data = crate::mem::pattern_vec(4096);
        data[1234] ^= 0x40;
        let put = iface.put_zcopy(ep, &[&data], region.address, &rkey, 0);
        assert_eq!(put, Ok(uct::Outcome::Done(())));
        chan.send(&Msg::Done).unwrap();
        match chan.recv(timeout).unwrap() {
            Msg::Verdict { error: Some(e) } => assert!(e.contains("byte 1234"), "{e}"),
            m => panic!("expected a failing verdict, got {m:?}"),
        }
        chan.send(&Msg::Quit).unwrap();
        assert_eq!(responder.join().unwrap(), Ok(()));
    }
}
