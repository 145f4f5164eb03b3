//! The protocol-layer (`ucp`) tests: tag_lat, tag_sync_lat, tag_bw and tag_mr, between
//! two processes, each with one ucp worker and one endpoint to the other.
//!
//! [`UcpPeer::connect`] (or [`UcpPeer::accept`] on a responder that already read the
//! initiator's hello) creates a context with the tag feature and a worker, trades worker
//! addresses over the [`Channel`], creates the endpoint to the peer and connects it at once,
//! so that a peer no transport reaches is reported before any test ("unreachable"). ucp
//! picks the transport (shared memory between two processes of one host; `UCX_TLS`
//! restricts the choice); results name the one it picked.
//!
//! Then, as with the transport tests, the initiator calls [`UcpPeer::run`] once per test
//! and the responder sits in [`UcpPeer::serve`]; each test is `Start` → `Ready` → the test
//! → `Done` → `Verdict`. The runners are in `runs.rs`.

mod runs;

use crate::channel::{Channel, Msg};
use crate::handshake::{self, Hello, UCP};
use crate::mem::{pattern_mismatch, AlignedBuf};
use crate::params::Params;
use crate::registry::{Api, Layout, TestId};
use crate::stats::{PerfResult, Subject};
use std::time::Duration;
use ucp::{Context, Ep, Features, ThreadMode, Worker};
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

/// A message buffer handed to ucp by address: page-aligned (as ucx_perftest's), with its
/// address taken once at creation, so that this side holds no Rust reference into it while
/// a request may read or write it.
struct MsgBuf {
    _mem: AlignedBuf,
    ptr: *mut u8,
    len: usize,
}

impl MsgBuf {
    /// `len` bytes of the data pattern.
    fn pattern(len: usize) -> Result<MsgBuf> {
        Ok(MsgBuf::from(AlignedBuf::from_slice(
            &crate::mem::pattern_vec(len),
        )?))
    }

    /// `len` bytes of [`POISON`].
    fn poisoned(len: usize) -> Result<MsgBuf> {
        let b = MsgBuf::from(AlignedBuf::zeroed(len)?);
        b.poison();
        Ok(b)
    }

    fn from(mut mem: AlignedBuf) -> MsgBuf {
        let (ptr, len) = (mem.as_mut_ptr(), mem.len());
        MsgBuf {
            _mem: mem,
            ptr,
            len,
        }
    }

    /// The buffer as ucp takes it.
    #[inline]
    fn ucp(&self) -> ucp::Buf {
        ucp::Buf::contig(self.ptr, self.len)
    }

    /// Fills the buffer with [`POISON`]. Call only while no request uses the buffer, or
    /// the poison is overwritten by whatever the request writes next.
    fn poison(&self) {
        // SAFETY: ptr is valid for len bytes (owned by _mem). ucp writes a buffer only
        // inside calls on this thread's worker, so nothing else accesses it during this.
        unsafe { std::ptr::write_bytes(self.ptr, POISON, self.len) };
    }

    /// The first byte that differs from the data pattern.
    fn mismatch(&self) -> Option<usize> {
        // SAFETY: as in poison(): valid memory, and no access by ucp while this shared
        // slice lives (only this thread drives the worker, and it is here).
        let data = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        pattern_mismatch(data, false)
    }

    /// The 8 bytes at the start, as a little-endian number (acknowledgements).
    fn read_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        let n = self.len.min(8);
        // SAFETY: as in mismatch(); n <= len.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, b.as_mut_ptr(), n) };
        u64::from_le_bytes(b)
    }

    /// Stores `v` little-endian at the start (acknowledgements).
    fn write_u64(&self, v: u64) {
        let b = v.to_le_bytes();
        let n = self.len.min(8);
        // SAFETY: as in poison(); n <= len.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr, n) };
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
    /// Buffers of the current (or last) test. Declared after the worker, so dropped after
    /// it: after a failed test ucp may still hold requests on them.
    bufs: Buffers,
}

/// A worker for the tests (tag feature, single thread).
fn open_worker() -> Result<Worker> {
    let ctx = Context::new(Features::TAG).inspect_err(|e| {
        tracing::error!("cannot create a ucp context: {e}");
    })?;
    Worker::new(&ctx, ThreadMode::Single).inspect_err(|e| {
        tracing::error!("cannot create a ucp worker: {e}");
    })
}

impl<C: Channel> UcpPeer<C> {
    /// Initiator: creates a worker, sends its address, reads the peer's and connects to
    /// it. `timeout` bounds every later wait for the peer.
    pub fn connect(mut chan: C, timeout: Duration) -> Result<UcpPeer<C>> {
        let mut worker = open_worker()?;
        handshake::send_hello(&mut chan, UCP, worker.address())?;
        let hello = handshake::recv_hello(&mut chan, timeout)?;
        handshake::check_hello(&hello, UCP)?;
        Self::attach(worker, &hello.address, chan, timeout)
    }

    /// Responder: answers the initiator's `hello` (already received) with this side's
    /// worker address and connects to the initiator's worker.
    pub fn accept(hello: &Hello, mut chan: C, timeout: Duration) -> Result<UcpPeer<C>> {
        handshake::check_hello(hello, UCP)?;
        let mut worker = open_worker()?;
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
        let timing = match p.test {
            TestId::TagLat | TestId::TagSyncLat => self.lat_initiator(&p),
            _ => self.bw_initiator(&p),
        };
        let timing = match timing {
            Ok(t) => t,
            Err(e) => {
                self.broken = true;
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
        PerfResult::compute(subject, p.test.info().kind, &timing)
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
                Msg::Start { params, .. } => {
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
                    let r = match p.test {
                        TestId::TagLat | TestId::TagSyncLat => self.lat_responder(&p),
                        _ => self.bw_responder(&p),
                    };
                    if let Err(e) = r {
                        self.broken = true;
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
        self.chan.send(&Msg::Start {
            params: p.clone(),
            region: None,
        })?;
        handshake::expect_ready(&mut self.chan, self.timeout).map(|_| ())
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
        for (test, size, window) in cases {
            let p = Params {
                size,
                window,
                iterations: 100,
                warmup: 10,
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

    /// A hand-driven tag_bw initiator whose last message has one wrong byte: the
    /// responder's check must say so.
    #[test]
    fn responder_reports_wrong_data() {
        let (a, b) = pair();
        let timeout = Duration::from_secs(60);
        let responder = std::thread::spawn(move || crate::session::respond(b, timeout));
        let mut chan = a;
        let mut w = open_worker().unwrap();
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
