//! The protocol-layer (`ucp`) tests between two processes, each with one ucp worker and
//! one endpoint to the other:
//!
//! - tag: tag_lat, tag_sync_lat, tag_bw, tag_mr (`runs.rs`);
//! - remote memory access: put_lat, put_bw, get_lat, get_bw (`rma.rs`);
//! - put with remote signal: put_signal_lat (`signal.rs`);
//! - atomics: add_lat, fadd_lat, swap_lat, cswap_lat, add_mr, fadd_mr (`amo.rs`);
//! - active messages: am_lat, am_bw (`am.rs`);
//! - streams: stream_lat, stream_bw (`stream.rs`).
//!
//! [`UcpPeer::connect`] (or [`UcpPeer::accept`] on a responder that already read the
//! initiator's hello) creates a context with the tag, RMA, atomic, AM and stream features
//! and a worker, trades worker addresses over the [`Channel`], creates the endpoint to the
//! peer and connects it at once, so that a peer no transport reaches is reported before
//! any test ("unreachable"). ucp picks the transport (shared memory between two processes
//! of one host; `UCX_TLS` restricts the choice); results name the one it picked. RMA and
//! atomic tests also report how ucp reaches the peer's memory (`rma_path`: direct, cma or
//! am; `UCX_RMA_PATH` forces one).
//!
//! Then, as with the transport tests, the initiator calls [`UcpPeer::run`] once per test
//! and the responder sits in [`UcpPeer::serve`]; each test is `Start` → `Ready` → the test
//! → `Done` → `Verdict`, with the memory regions of one-sided tests in `Start` (the
//! initiator's, when the responder writes to it) and `Ready` (the responder's).

mod am;
mod amo;
mod cqwin;
mod loopback;
// The one module of the protocol tests that touches buffer memory.
#[allow(unsafe_code)]
mod msgbuf;
mod rma;
mod runs;
mod signal;
mod stream;
mod wait;

pub use loopback::NoPeer;

use msgbuf::MsgBuf;

use crate::channel::{Channel, Msg, RegionInfo};
use crate::handshake::{self, Hello, UCP};
use crate::params::Params;
use crate::registry::{Api, Layout, TestId};
use crate::stats::{PerfResult, Subject, Timing};
use std::time::Duration;
use ucp::{Config, Context, Ep, Features, RemoteKey, RmaPath, ThreadMode, Worker};
use ucs::{Result, Status};

/// The tag of test messages (ucx_perftest's).
const TAG: u64 = 0x1337_a880;
/// The tag of the acknowledgements that end a bandwidth phase.
const ACK_TAG: u64 = 0x1337_a881;
/// Tags match exactly.
const MASK: u64 = u64::MAX;
/// What a receive buffer holds before the message checked lands in it: never a byte of
/// [`crate::mem::pattern`] (whose values are below 251).
const POISON: u8 = 0xff;

/// The groups of protocol-layer tests, each with its runners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    TagLat,
    TagBw,
    Rma,
    Amo,
    Am,
    Stream,
    Signal,
}

fn group(t: TestId) -> Option<Group> {
    Some(match t {
        TestId::TagLat | TestId::TagSyncLat => Group::TagLat,
        TestId::TagBw | TestId::TagMr => Group::TagBw,
        TestId::UcpPutLat | TestId::UcpPutBw | TestId::UcpGetLat | TestId::UcpGetBw => Group::Rma,
        TestId::AddLat
        | TestId::FaddLat
        | TestId::SwapLat
        | TestId::CswapLat
        | TestId::AddMr
        | TestId::FaddMr => Group::Amo,
        TestId::UcpAmLat | TestId::UcpAmBw => Group::Am,
        TestId::StreamLat | TestId::StreamBw => Group::Stream,
        TestId::PutSignalLat => Group::Signal,
        TestId::AmLat
        | TestId::AmBw
        | TestId::PutLat
        | TestId::PutBw
        | TestId::GetLat
        | TestId::GetBw => return None,
    })
}

/// How `UCX_RMA_PATH` names a path (and the JSON's `rma_path`).
fn path_name(p: RmaPath) -> &'static str {
    match p {
        RmaPath::Auto => "auto",
        RmaPath::Direct => "direct",
        RmaPath::Cma => "cma",
        RmaPath::Emulated => "am",
    }
}

/// Why a received message is wrong (length or content), or `None`.
fn check_message(what: &str, buf: &MsgBuf, info: ucp::RecvInfo) -> Option<String> {
    if info.length != buf.len {
        return Some(format!(
            "{what}: received {} bytes, expected {}",
            info.length, buf.len
        ));
    }
    buf.mismatch().map(|off| {
        format!(
            "{what}: byte {off} of {} is wrong (expected {:#04x})",
            buf.len,
            crate::mem::pattern(off)
        )
    })
}

/// The buffers of one test.
#[derive(Default)]
struct Buffers {
    send: Option<MsgBuf>,
    recv: Option<MsgBuf>,
    /// The last message of a bandwidth test lands here (poisoned before).
    check: Option<MsgBuf>,
    /// Acknowledgement of a bandwidth phase.
    ack: Option<MsgBuf>,
    /// Memory of this side that the peer reads or writes (RMA and atomic tests).
    mine: Option<MsgBuf>,
    /// The peer's memory, as this side reaches it.
    peer: Option<(u64, RemoteKey)>,
}

/// One side of the protocol-layer tests.
pub struct UcpPeer<C: Channel> {
    worker: Worker,
    ep: Ep,
    chan: C,
    timeout: Duration,
    /// The transport ucp chose for the endpoint.
    transport: String,
    /// A test failed: requests may still be posted on the buffers, so no more tests.
    broken: bool,
    /// The endpoint leads to this side's own worker ([`UcpPeer::loopback`]): tests run
    /// whole in this process, with no peer behind the channel.
    loopback: bool,
    /// How the current test reaches the peer's memory (RMA and atomic tests).
    path: Option<RmaPath>,
    /// Buffers of the current (or last) test. Declared after the worker, so dropped after
    /// it: after a failed test ucp may still hold requests on them.
    bufs: Buffers,
}

/// A worker for the tests (every feature the tests use, single thread).
/// The configuration comes from the environment (`UCX_*`), or is `config`.
fn open_worker(config: Option<&Config>) -> Result<Worker> {
    let features = Features::TAG
        | Features::RMA
        | Features::AMO32
        | Features::AMO64
        | Features::AM
        | Features::STREAM;
    let ctx = match config {
        None => Context::new(features),
        Some(c) => uct::IfaceConfig::from_env()
            .and_then(|ic| Context::with_config(features, c.clone(), ic)),
    }
    .inspect_err(|e| {
        tracing::error!("cannot create a ucp context: {e}");
    })?;
    Worker::new(&ctx, ThreadMode::Single).inspect_err(|e| {
        tracing::error!("cannot create a ucp worker: {e}");
    })
}

impl<C: Channel> UcpPeer<C> {
    /// Initiator: creates a worker, sends its address, reads the peer's and connects to
    /// it. `timeout` bounds every later wait for the peer.
    pub fn connect(chan: C, timeout: Duration) -> Result<UcpPeer<C>> {
        Self::connect_with(chan, timeout, None)
    }

    /// [`UcpPeer::connect`] with an explicit ucp configuration instead of the
    /// environment's (`None`: the environment's).
    pub fn connect_with(
        mut chan: C,
        timeout: Duration,
        config: Option<&Config>,
    ) -> Result<UcpPeer<C>> {
        let mut worker = open_worker(config)?;
        handshake::send_hello(&mut chan, UCP, worker.address())?;
        let hello = handshake::recv_hello(&mut chan, timeout)?;
        handshake::check_hello(&hello, UCP)?;
        Self::attach(worker, &hello.address, chan, timeout)
    }

    /// Responder: answers the initiator's `hello` (already received) with this side's
    /// worker address and connects to the initiator's worker.
    pub fn accept(hello: &Hello, chan: C, timeout: Duration) -> Result<UcpPeer<C>> {
        Self::accept_with(hello, chan, timeout, None)
    }

    /// [`UcpPeer::accept`] with an explicit ucp configuration (`None`: the environment's).
    pub fn accept_with(
        hello: &Hello,
        mut chan: C,
        timeout: Duration,
        config: Option<&Config>,
    ) -> Result<UcpPeer<C>> {
        handshake::check_hello(hello, UCP)?;
        let mut worker = open_worker(config)?;
        handshake::send_hello(&mut chan, UCP, worker.address())?;
        Self::attach(worker, &hello.address, chan, timeout)
    }

    fn attach(
        mut worker: Worker,
        address: &[u8],
        mut chan: C,
        timeout: Duration,
    ) -> Result<UcpPeer<C>> {
        let ep = worker.ep_create(address).inspect_err(|e| {
            tracing::error!("the peer's worker address is not usable: {e}");
        })?;
        if let Err(e) = worker.ep_connect(ep) {
            let why = if e == Status::Unreachable {
                let mine: Vec<&str> = worker
                    .context()
                    .resources()
                    .iter()
                    .map(|r| r.transport.name())
                    .collect();
                format!(
                    "no transport reaches the peer's worker: unreachable (this side has {}; \
                     shared memory only reaches processes of the same host, and UCX_TLS may \
                     exclude the transports the two sides share)",
                    mine.join(", ")
                )
            } else {
                format!("cannot connect to the peer's worker: {e}")
            };
            tracing::error!("{why}");
            // Best effort: the peer is likely failing the same way.
            let _ = chan.send(&Msg::Failed { error: why });
            return Err(e);
        }
        let transport = worker
            .ep_transport(ep)?
            .map_or_else(|| "?".to_string(), |t| t.name().to_string());
        tracing::debug!("ucp connected the peer over {transport}");
        Ok(UcpPeer {
            worker,
            ep,
            chan,
            timeout,
            transport,
            broken: false,
            loopback: false,
            path: None,
            bufs: Buffers::default(),
        })
    }

    /// The transport ucp chose.
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// The parameters as both sides run them: contig layout, the test's default window.
    fn resolve(p: &Params) -> Result<Params> {
        p.validate()?;
        let info = p.test.info();
        if info.api != Api::Ucp {
            tracing::error!("{} is not a protocol-layer test", info.name);
            return Err(Status::InvalidParam);
        }
        let mut p = p.clone();
        p.layout = Some(Layout::Contig);
        if p.window == 0 {
            p.window = info.window.max(1);
        }
        Ok(p)
    }

    /// Initiator: runs one test with the peer, which must be in [`UcpPeer::serve`]. After
    /// an error the peer is told and stops serving, and this side runs no more tests.
    pub fn run(&mut self, p: &Params) -> Result<PerfResult> {
        if self.broken {
            tracing::error!("an earlier test failed; the two sides are out of step");
            return Err(Status::InvalidParam);
        }
        let p = Self::resolve(p)?;
        self.path = None;
        let timing = if self.loopback {
            self.loopback_run(&p)
        } else {
            self.two_sided_run(&p)
        };
        let timing = match timing {
            Ok(t) => t,
            Err(e) => {
                self.broken = true;
                tracing::error!(
                    "initiator state after the failure: {}",
                    self.worker.describe()
                );
                // Best effort: the peer may be the reason of the failure.
                let _ = self.chan.send(&Msg::Failed {
                    error: format!("initiator failed in {}: {e}", p.test),
                });
                return Err(e);
            }
        };
        let subject = Subject {
            test: p.test,
            transport: self.transport.clone(),
            layout: Layout::Contig,
            size: p.size,
            warmup: p.warmup,
            window: p.window,
        };
        let mut r = PerfResult::compute(subject, p.test.info().kind, &timing)?;
        r.rma_path = self.path.map(path_name);
        Ok(r)
    }

    /// The initiator's side of a test with a peer in [`UcpPeer::serve`].
    fn two_sided_run(&mut self, p: &Params) -> Result<Timing> {
        match group(p.test) {
            Some(Group::TagLat) => self.lat_initiator(p),
            Some(Group::TagBw) => self.bw_initiator(p),
            Some(Group::Rma) => self.rma_initiator(p),
            Some(Group::Amo) => self.amo_initiator(p),
            Some(Group::Am) => self.am_initiator(p),
            Some(Group::Stream) => self.stream_initiator(p),
            Some(Group::Signal) => self.signal_initiator(p),
            None => Err(Status::InvalidParam),
        }
    }

    /// Initiator: tells the responder there are no more protocol-layer tests; returns the
    /// channel.
    pub fn finish(mut self) -> Result<C> {
        self.chan.send(&Msg::Quit)?;
        Ok(self.into_channel())
    }

    /// The channel (after [`UcpPeer::serve`] returned). The worker goes away here.
    pub fn into_channel(self) -> C {
        let UcpPeer {
            worker, chan, bufs, ..
        } = self;
        // The worker first: it may hold requests on the buffers of a failed test.
        drop(worker);
        drop(bufs);
        chan
    }

    /// Responder: serves tests until the initiator quits. A test that cannot be set up is
    /// reported and serving goes on; a failure in the middle of a test ends serving.
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
                    let p = match Self::resolve(&params) {
                        Ok(p) if !self.broken => p,
                        r => {
                            let e = r.err().unwrap_or(Status::InvalidParam);
                            self.chan.send(&Msg::Failed {
                                error: format!("responder cannot run {}: {e}", params.test),
                            })?;
                            continue;
                        }
                    };
                    let r = match group(p.test) {
                        Some(Group::TagLat) => self.lat_responder(&p),
                        Some(Group::TagBw) => self.bw_responder(&p),
                        Some(Group::Rma) => self.rma_responder(&p, region.as_ref()),
                        Some(Group::Amo) => self.amo_responder(&p, region.as_ref()),
                        Some(Group::Am) => self.am_responder(&p),
                        Some(Group::Stream) => self.stream_responder(&p),
                        Some(Group::Signal) => self.signal_responder(&p, region.as_ref()),
                        None => Err(Status::InvalidParam),
                    };
                    if let Err(e) = r {
                        self.broken = true;
                        tracing::error!(
                            "responder state after the failure: {}",
                            self.worker.describe()
                        );
                        // Best effort: the initiator may be gone already.
                        let _ = self.chan.send(&Msg::Failed {
                            error: format!("responder failed in {}: {e}", p.test),
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

    /// Initiator: sends `Start` and waits for `Ready`.
    fn start(&mut self, p: &Params) -> Result<()> {
        self.start_with(p, None).map(|_| ())
    }

    /// Initiator: sends `Start` with this side's region (if the responder writes to it)
    /// and waits for `Ready`; returns the responder's region.
    fn start_with(&mut self, p: &Params, mine: Option<RegionInfo>) -> Result<Option<RegionInfo>> {
        self.chan.send(&Msg::Start {
            params: p.clone(),
            region: mine,
        })?;
        handshake::expect_ready(&mut self.chan, self.timeout)
    }

    /// Unpacks the peer's region for this endpoint, keeps it for the test, and returns
    /// the path ucp resolved for put/get (`amo`: for atomics).
    fn attach_peer(
        &mut self,
        region: Option<&RegionInfo>,
        test: TestId,
        amo: bool,
    ) -> Result<RmaPath> {
        let Some(region) = region else {
            tracing::error!("{test}: the peer sent no memory region");
            return Err(Status::InvalidParam);
        };
        let rk = self
            .worker
            .rkey_unpack(self.ep, &region.rkey.0)
            .inspect_err(|e| tracing::error!("{test}: cannot unpack the peer's key: {e}"))?;
        let path = if amo { rk.amo_path() } else { rk.rma_path() };
        self.bufs.peer = Some((region.address, rk));
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::LineChannel;

    fn pair() -> (LineChannel, LineChannel) {
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        (LineChannel::new(r1, w2), LineChannel::new(r2, w1))
    }

    /// Every protocol-layer test, initiator and responder in two threads of this process,
    /// sizes on both sides of the eager/rendezvous switch.
    #[test]
    fn every_test_between_two_threads() {
        let (a, b) = pair();
        let timeout = Duration::from_secs(60);
        let responder = std::thread::spawn(move || {
            let mut chan = b;
            let hello = handshake::recv_hello(&mut chan, timeout)?;
            let mut peer = UcpPeer::accept(&hello, chan, timeout)?;
            peer.serve()
        });
        let mut init = UcpPeer::connect(a, timeout).unwrap();
        assert_eq!(init.transport(), "shm");
        let cases = [
            (TestId::TagLat, 8, 0),
            (TestId::TagLat, 5000, 0),
            (TestId::TagLat, 300_000, 0),
            (TestId::TagSyncLat, 8, 0),
            (TestId::TagSyncLat, 20_000, 0),
            (TestId::TagBw, 64 << 10, 0),
            (TestId::TagBw, 1 << 20, 4),
            (TestId::TagBw, 100, 1),
            (TestId::TagMr, 8, 0),
        ];
        // tag_bw / tag_mr once with each receive pattern (ucx_perftest's, and receives
        // posted ahead).
        let prepost = cases
            .iter()
            .filter(|c| matches!(c.0, TestId::TagBw | TestId::TagMr))
            .map(|&c| (c, true));
        for ((test, size, window), prepost) in cases.iter().map(|&c| (c, false)).chain(prepost) {
            let p = Params {
                size,
                window,
                iterations: 100,
                warmup: 10,
                prepost,
                ..Params::new(test)
            };
            let r = init
                .run(&p)
                .unwrap_or_else(|e| panic!("{test} {size}: {e}"));
            assert_eq!((r.test, r.size, r.iterations), (test, size, 100));
            assert_eq!((r.api, r.layout), (Api::Ucp, Layout::Contig));
            assert_eq!(r.transport, "shm");
            let want_window = if window == 0 {
                test.info().window
            } else {
                window
            };
            assert_eq!(r.window, want_window);
            assert!(r.latency_avg_us > 0.0 && r.msg_rate > 0.0);
        }
        // A transport-layer test is refused here without disturbing the peer.
        assert!(init.run(&Params::new(TestId::AmLat)).is_err());
        let p = Params {
            iterations: 10,
            warmup: 0,
            ..Params::new(TestId::TagLat)
        };
        init.run(&p).unwrap();
        init.finish().unwrap();
        assert_eq!(responder.join().unwrap(), Ok(()));
    }

    /// Runs `cases` (test, size, window) between an initiator and a responder in two
    /// threads of this process, both with `config` (`None`: the environment's); checks
    /// the results and returns the access paths reported.
    fn run_cases(
        cases: &[(TestId, usize, u32)],
        config: Option<Config>,
    ) -> Vec<Option<&'static str>> {
        let (a, b) = pair();
        let timeout = Duration::from_secs(60);
        let cfg = config.clone();
        let responder = std::thread::spawn(move || {
            let mut chan = b;
            let hello = handshake::recv_hello(&mut chan, timeout)?;
            let mut peer = UcpPeer::accept_with(&hello, chan, timeout, cfg.as_ref())?;
            peer.serve()
        });
        let mut init = UcpPeer::connect_with(a, timeout, config.as_ref()).unwrap();
        let mut paths = Vec::new();
        for &(test, size, window) in cases {
            let p = Params {
                size,
                window,
                iterations: 60,
                warmup: 7,
                ..Params::new(test)
            };
            let r = init
                .run(&p)
                .unwrap_or_else(|e| panic!("{test} {size} window {window}: {e}"));
            assert_eq!((r.test, r.size, r.iterations), (test, size, 60));
            assert_eq!((r.api, r.layout), (Api::Ucp, Layout::Contig));
            assert_eq!(r.transport, "shm");
            assert!(r.latency_avg_us > 0.0 && r.msg_rate > 0.0);
            let one_sided = matches!(group(test), Some(Group::Rma | Group::Amo | Group::Signal));
            assert_eq!(r.rma_path.is_some(), one_sided, "{test}");
            paths.push(r.rma_path);
        }
        init.finish().unwrap();
        assert_eq!(responder.join().unwrap(), Ok(()));
        paths
    }

    /// Every RMA, atomic, AM and stream test on the default (direct) path: eager and
    /// rendezvous sizes, windows of one and more, 4- and 8-byte atomics.
    #[test]
    fn one_sided_am_and_stream_tests_between_two_threads() {
        let cases = [
            (TestId::UcpPutLat, 8, 0),
            (TestId::UcpPutLat, 5000, 0),
            (TestId::UcpPutBw, 64 << 10, 0),
            (TestId::UcpPutBw, 100, 1),
            (TestId::UcpGetLat, 8, 0),
            (TestId::UcpGetBw, 100_000, 3),
            (TestId::UcpAmLat, 8, 0),
            (TestId::UcpAmLat, 300_000, 0),
            (TestId::UcpAmBw, 8, 0),
            (TestId::UcpAmBw, 1 << 20, 2),
            (TestId::StreamLat, 8, 0),
            (TestId::StreamLat, 70_000, 0),
            (TestId::StreamBw, 64 << 10, 0),
            (TestId::StreamBw, 3, 1),
            (TestId::AddLat, 8, 0),
            (TestId::AddLat, 4, 0),
            (TestId::FaddLat, 8, 0),
            (TestId::SwapLat, 4, 0),
            (TestId::CswapLat, 8, 0),
            (TestId::AddMr, 8, 7),
            (TestId::FaddMr, 8, 0),
            (TestId::FaddMr, 4, 5),
            (TestId::PutSignalLat, 8, 0),
            (TestId::PutSignalLat, 300_000, 0),
        ];
        let paths = run_cases(&cases, None);
        for ((test, ..), path) in cases.iter().zip(paths) {
            if let Some(path) = path {
                assert_eq!(path, "direct", "{test}");
            }
        }
    }

    /// The one-sided tests through the other access paths, forced by configuration:
    /// emulation by active messages (windows of requests in flight), and CMA (put/get;
    /// atomics are then emulated).
    #[test]
    fn one_sided_tests_over_forced_paths() {
        let cases = [
            (TestId::UcpPutLat, 100, 0),
            (TestId::UcpPutBw, 20_000, 4),
            (TestId::UcpGetLat, 8, 0),
            (TestId::UcpGetBw, 70_000, 3),
            (TestId::AddLat, 8, 0),
            (TestId::FaddLat, 4, 0),
            (TestId::SwapLat, 8, 0),
            (TestId::CswapLat, 8, 0),
            (TestId::AddMr, 8, 16),
            (TestId::FaddMr, 8, 4),
            (TestId::PutSignalLat, 8, 0),
            (TestId::PutSignalLat, 70_000, 0),
        ];
        for (path, rma, amo) in [(RmaPath::Emulated, "am", "am"), (RmaPath::Cma, "cma", "am")] {
            let cfg = Config {
                rma_path: path,
                ..Config::from_env().unwrap()
            };
            let got = run_cases(&cases, Some(cfg));
            for ((test, ..), p) in cases.iter().zip(got) {
                let want = if test.is_atomic() { amo } else { rma };
                assert_eq!(p, Some(want), "{test} with {path:?}");
            }
        }
    }

    /// A hand-driven tag_bw initiator whose last message has one wrong byte: the
    /// responder's check must say so.
    #[test]
    fn responder_reports_wrong_data() {
        let (a, b) = pair();
        let timeout = Duration::from_secs(60);
        let responder = std::thread::spawn(move || crate::session::respond(b, timeout));
        let mut chan = a;
        let mut w = open_worker(None).unwrap();
        handshake::send_hello(&mut chan, UCP, w.address()).unwrap();
        let hello = handshake::recv_hello(&mut chan, timeout).unwrap();
        let ep = w.ep_create(&hello.address).unwrap();
        let p = Params {
            size: 3000,
            iterations: 3,
            warmup: 0,
            ..Params::new(TestId::TagBw)
        };
        chan.send(&Msg::Start {
            params: p,
            region: None,
        })
        .unwrap();
        assert!(matches!(chan.recv(timeout).unwrap(), Msg::Ready { .. }));
        let good = crate::mem::pattern_vec(3000);
        let mut bad = good.clone();
        bad[2345] ^= 0x10;
        for data in [&good, &good, &bad] {
            w.tag_send(ep, data, TAG).unwrap();
        }
        let mut ack = [0u8; 8];
        w.tag_recv(&mut ack, ACK_TAG, MASK).unwrap();
        assert_eq!(u64::from_le_bytes(ack), 3);
        chan.send(&Msg::Done).unwrap();
        match chan.recv(timeout).unwrap() {
            Msg::Verdict { error: Some(e) } => assert!(e.contains("byte 2345"), "{e}"),
            m => panic!("expected a failing verdict, got {m:?}"),
        }
        chan.send(&Msg::Quit).unwrap();
        drop(chan);
        assert_eq!(responder.join().unwrap(), Ok(()));
    }

    /// Hand-driven one-sided initiators that write wrong data: a put_bw whose put has
    /// one wrong byte, and an add_mr one add short. The responder's checks must say so.
    #[test]
    fn responder_reports_wrong_memory() {
        let (a, b) = pair();
        let timeout = Duration::from_secs(60);
        let responder = std::thread::spawn(move || crate::session::respond(b, timeout));
        let mut chan = a;
        let mut w = open_worker(None).unwrap();
        handshake::send_hello(&mut chan, UCP, w.address()).unwrap();
        let hello = handshake::recv_hello(&mut chan, timeout).unwrap();
        let ep = w.ep_create(&hello.address).unwrap();
        let start = |w: &mut Worker, chan: &mut LineChannel, p: Params| {
            chan.send(&Msg::Start {
                params: p,
                region: None,
            })
            .unwrap();
            match chan.recv(timeout).unwrap() {
                Msg::Ready { region: Some(r) } => {
                    let rk = w.rkey_unpack(ep, &r.rkey.0).unwrap();
                    (r.address, rk)
                }
                m => panic!("expected ready with a region, got {m:?}"),
            }
        };
        let verdict = |chan: &mut LineChannel| {
            chan.send(&Msg::Done).unwrap();
            match chan.recv(timeout).unwrap() {
                Msg::Verdict { error: Some(e) } => e,
                m => panic!("expected a failing verdict, got {m:?}"),
            }
        };
        let put = Params {
            size: 3000,
            iterations: 1,
            warmup: 0,
            ..Params::new(TestId::UcpPutBw)
        };
        let (addr, rk) = start(&mut w, &mut chan, put);
        let mut bad = crate::mem::pattern_vec(3000);
        bad[1234] ^= 0x10;
        w.put(ep, &bad, addr, &rk).unwrap();
        assert!(verdict(&mut chan).contains("byte 1234"));
        let add = Params {
            iterations: 10,
            warmup: 0,
            ..Params::new(TestId::AddMr)
        };
        let (addr, rk) = start(&mut w, &mut chan, add);
        for _ in 0..9 {
            w.atomic_post(ep, ucp::AtomicOp::Add, ucp::AtomicSize::B64, 1, addr, &rk)
                .unwrap();
        }
        w.flush_ep_blocking(ep).unwrap();
        let e = verdict(&mut chan);
        assert!(e.contains("is 9, expected 10"), "{e}");
        chan.send(&Msg::Quit).unwrap();
        drop(chan);
        assert_eq!(responder.join().unwrap(), Ok(()));
    }

    #[test]
    fn message_checks() {
        let b = MsgBuf::pattern(100).unwrap();
        let info = |length| ucp::RecvInfo {
            sender_tag: TAG,
            length,
        };
        assert_eq!(check_message("x", &b, info(100)), None);
        assert!(check_message("x", &b, info(99))
            .unwrap()
            .contains("99 bytes"));
        let p = MsgBuf::poisoned(100).unwrap();
        assert!(check_message("x", &p, info(100))
            .unwrap()
            .contains("byte 0 of 100"));
        p.write_u64(0x0102_0304);
        assert_eq!(p.read_u64(), 0x0102_0304);
    }
}
