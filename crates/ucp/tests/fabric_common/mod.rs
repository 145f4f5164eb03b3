//! The harness of the fabric protocol tests (quinn's `Pair` as the model): two workers,
//! A and B, each with its own context, in this thread, connected over one seeded
//! `testkit::Fabric` network whose clock moves a fixed tick per round. A workload is a
//! list of operations ([`Op`]) that A starts towards B (tag, AM, stream, emulated
//! put/get/atomics, flush, close); [`run`] issues them interleaved with progress rounds
//! as a schedule says, under the faults a [`Plan`] sets, then checks:
//!
//! - every request completes exactly once (a callback seen twice or never is a failure);
//! - a request that completed `Ok` has its data intact (receive buffers, AM data kept
//!   by the handler, get buffers, atomic results, put targets);
//! - without a node death everything completes `Ok`;
//! - nothing hangs: every phase is bounded in rounds, and a hang names the seed;
//! - nothing leaks: after every request was freed, none of their handles is still known
//!   to its worker (ucp has no count of live requests; see the report).
//!
//! After a death, receives that can no longer be matched are canceled (as an application
//! does once its peer is known dead); they must then complete with `Canceled`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use testkit::fabric::{Fabric, FabricConfig, Faults, NodeId, RndvMode};
use ucp::am::AmSendFlags;
use ucp::config::Thresh;
use ucp::{
    AmAction, AmData, AmDesc, AtomicOp, AtomicSize, Buf, Callback, Config, Context, Ep, EpStatus,
    Features, MemH, RemoteKey, Request, SignalOp, ThreadMode, Worker,
};
use ucs::Status;
use uct::{IfaceConfig, Transport};

/// Virtual time per round.
pub const TICK: u64 = 250_000;
/// Rounds a run may take before it counts as a hang (about 1.5 s of virtual time per
/// phase: many peer timeouts).
pub const MAX_ROUNDS: u32 = 6000;
/// Bytes of B's region: a get area, a put area, then atomic words.
const GET_AREA: usize = 0;
const PUT_AREA: usize = 64 << 10;
const AMO_AREA: usize = 128 << 10;
const REGION: usize = AMO_AREA + 8 * 64;
/// The AM id the workloads use.
pub const AM_ID: u16 = 7;

/// One operation A starts towards B.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A tag message of `len` bytes; B's receive is posted before the send when
    /// `recv_first`, else after it (unexpected path).
    Tag {
        len: usize,
        sync: bool,
        recv_first: bool,
    },
    /// An active message with a header of `hdr` bytes and `len` bytes of data, kept by
    /// B's handler; `rndv` forces rendezvous.
    Am { hdr: usize, len: usize, rndv: bool },
    /// `len` bytes on A's stream to B; B receives exactly `len`.
    Stream { len: usize },
    /// Emulated put of `len` bytes at `off` of B's put area.
    Put { off: usize, len: usize },
    /// Emulated get of `len` bytes at `off` of B's get area.
    Get { off: usize, len: usize },
    /// Emulated put with remote signal: `len` bytes at `off` of B's put area, then add
    /// `value` to (or, with `set`, store it in) word `word` (each word used by one op only).
    PutSignal {
        off: usize,
        len: usize,
        word: usize,
        set: bool,
        value: u64,
    },
    /// Fetching atomic on word `word` (each word used by one op only).
    Amo {
        word: usize,
        op: AtomicOp,
        bits64: bool,
        value: u64,
    },
    /// A tag message of `len` bytes the other way, from B to A (B's endpoint wires up
    /// too, possibly while A's does); A's receive is posted first.
    TagBack { len: usize },
    /// Flush of A's endpoint.
    Flush,
    /// A worker-wide flush of B.
    FlushB,
}

/// The faults of one run.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub seed: u64,
    pub faults: Faults,
    /// Kill A (false) or B (true) at this step.
    pub kill: Option<(bool, u64)>,
    /// Fill A's (false) or B's (true) lane at this step for this long (virtual ns).
    pub fill: Option<(bool, u64, u64)>,
    /// Progress rounds after issuing op i (missing: 0).
    pub gaps: Vec<u32>,
    /// Close both endpoints at the end (A's with flush, B's too).
    pub close: bool,
    /// After a death, give up on B's receives at once (cancel, forced close) instead of
    /// first waiting for the death to be detected.
    pub close_early: bool,
}

/// Transport and protocol options of the pair.
#[derive(Clone, Debug)]
pub struct Opts {
    pub rndv: RndvMode,
    /// Messages of at least this size go by rendezvous.
    pub rndv_thresh: usize,
    pub seg_size: usize,
    pub window: u32,
    /// For rendezvous by put, leave the tcp resource out (see [`context`]).
    pub fabric_only: bool,
    /// Fragments of messages of at least this size go by `am_zcopy` (else `am_bcopy`).
    pub zcopy_thresh: usize,
    /// Silence after which a peer is dead (virtual ns); long where datagrams are lost
    /// on purpose, so that a live peer is never taken for dead.
    pub peer_timeout: u64,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            rndv: RndvMode::Get,
            rndv_thresh: 3000,
            seg_size: 512,
            window: 8,
            fabric_only: false,
            zcopy_thresh: 1 << 30,
            peer_timeout: FabricConfig::default().peer_timeout,
        }
    }
}

/// What one tracked request is for.
#[derive(Clone, Debug)]
enum Kind {
    SendA,
    SendB,
    RecvA {
        buf: usize,
        want: usize,
    },
    RecvB {
        buf: usize,
        want: usize,
    },
    AmRecvB {
        buf: usize,
        want: usize,
    },
    StreamRecvB {
        buf: usize,
        want: usize,
    },
    GetA {
        buf: usize,
        off: usize,
    },
    AmoA {
        word: usize,
        res: usize,
        bits64: bool,
        value: u64,
        op: AtomicOp,
    },
    PutA {
        src: usize,
        off: usize,
    },
    PutSignalA {
        src: usize,
        off: usize,
        word: usize,
        set: bool,
        value: u64,
    },
    FlushA,
    FlushB,
    CloseA,
    CloseB,
}

type Log = Arc<Mutex<Vec<(u64, Status)>>>;
type Kept = Arc<Mutex<Vec<(AmDesc, Vec<u8>, Option<usize>)>>>;

/// The two workers and their network. Field order matters: the workers go before the
/// buffers they may still point into.
pub struct Pair {
    pub a: Worker,
    pub b: Worker,
    pub fab: Fabric,
    pub na: NodeId,
    pub nb: NodeId,
    pub ab: Ep,
    pub ba: Ep,
    pub seed: u64,
    mem_b: MemH,
    /// A's key to B's region, unpacked at the first RMA operation (unpacking connects
    /// the endpoint: wireup happens in the workload, under its faults).
    rkey: Option<RemoteKey>,
    packed: Vec<u8>,
    /// Bytes B's region starts with (get area and atomic words).
    initial: Vec<u8>,
    log: Log,
    kept: Kept,
    next: u64,
    /// Tracked requests: id -> (worker is A, handle if any, kind).
    reqs: HashMap<u64, (bool, Option<Request>, Kind)>,
    /// Buffers that requests point into (never moved while a request lives: boxed).
    bufs: Vec<Box<[u8]>>,
    /// Atomic results; boxed because requests point into them while the Vec grows.
    #[allow(clippy::vec_box)]
    words: Vec<Box<u64>>,
    /// Expected data by buffer index.
    expect: HashMap<usize, Vec<u8>>,
    /// AM messages B's handler kept that were taken, by op id (eager data checked).
    am_seen: HashMap<u64, u32>,
    /// AM sent by op id: (header B must see, data length).
    ams_wanted: HashMap<u64, (Vec<u8>, usize)>,
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn context(o: &Opts) -> Context {
    let mut transports = vec![Transport::Fabric];
    if o.rndv == RndvMode::Put && !o.fabric_only {
        // ucp's rendezvous by put registers the receive buffer with a tcp domain only
        // (see fabric_rndv.rs, the ignored test): a tcp resource has to be there,
        // although the fabric carries everything.
        transports.push(Transport::Tcp);
    }
    let cfg = Config {
        transports,
        rndv_thresh: Thresh::Bytes(o.rndv_thresh),
        zcopy_thresh: Thresh::Bytes(o.zcopy_thresh),
        rma_path: ucp::RmaPath::Emulated,
        ..Config::default()
    };
    Context::with_config(
        Features::TAG
            | Features::RMA
            | Features::AMO32
            | Features::AMO64
            | Features::STREAM
            | Features::AM,
        cfg,
        IfaceConfig::default(),
    )
    .expect("context over the fabric")
}

impl Pair {
    /// Two connected workers on a new network seeded `seed`.
    pub fn new(seed: u64, o: &Opts) -> Pair {
        let fab = Fabric::with_config(
            seed,
            FabricConfig {
                seg_size: o.seg_size,
                window: o.window,
                rndv: o.rndv,
                peer_timeout: o.peer_timeout,
                ..FabricConfig::default()
            },
        );
        fab.enter();
        let ca = context(o);
        let cb = context(o);
        let mut a = Worker::new(&ca, ThreadMode::Single).expect("worker A");
        let na = fab.last_node().expect("A's node");
        let mut b = Worker::new(&cb, ThreadMode::Single).expect("worker B");
        let nb = fab.last_node().expect("B's node");
        assert_ne!(na, nb);
        let (addr_a, addr_b) = (a.address(), b.address());
        let ab = a.ep_create(&addr_b).expect("A's endpoint");
        let ba = b.ep_create(&addr_a).expect("B's endpoint");
        let mem_b = cb.mem_alloc(REGION).expect("B's region");
        let initial = pattern(REGION, seed ^ 0xb);
        // SAFETY: the region is REGION bytes of B's, nobody accesses it yet.
        unsafe { std::ptr::copy_nonoverlapping(initial.as_ptr(), mem_b.address(), REGION) };
        let packed = mem_b.rkey_pack();
        let kept: Kept = Arc::default();
        let k = kept.clone();
        b.am_set_handler(
            AM_ID,
            Some(Box::new(move |m| {
                let len = match m.data {
                    AmData::Eager(d) => {
                        k.lock().unwrap().push((m.desc, m.header.to_vec(), None));
                        let _ = d;
                        return AmAction::Keep;
                    }
                    AmData::Rndv { length } => length,
                };
                k.lock()
                    .unwrap()
                    .push((m.desc, m.header.to_vec(), Some(len)));
                AmAction::Keep
            })),
        );
        Pair {
            a,
            b,
            fab,
            na,
            nb,
            ab,
            ba,
            seed,
            mem_b,
            rkey: None,
            packed,
            initial,
            log: Log::default(),
            kept,
            next: 1,
            reqs: HashMap::new(),
            bufs: Vec::new(),
            words: Vec::new(),
            expect: HashMap::new(),
            am_seen: HashMap::new(),
            ams_wanted: HashMap::new(),
        }
    }

    fn node(&self, b: bool) -> NodeId {
        if b {
            self.nb
        } else {
            self.na
        }
    }

    fn cb(&self, id: u64) -> Callback {
        let log = self.log.clone();
        Callback::new(move |_, s, _| log.lock().unwrap().push((id, s)))
    }

    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn buf(&mut self, len: usize) -> (usize, *mut u8) {
        let mut b = vec![0u8; len].into_boxed_slice();
        let p = b.as_mut_ptr();
        self.bufs.push(b);
        (self.bufs.len() - 1, p)
    }

    /// Records the outcome of a nonblocking call: a request to track, done in the call,
    /// or refused (an error is a completion).
    fn track(&mut self, id: u64, on_a: bool, r: ucs::Result<Option<Request>>, k: Kind) {
        match r {
            Ok(Some(req)) => {
                self.reqs.insert(id, (on_a, Some(req), k));
            }
            Ok(None) => {
                self.log.lock().unwrap().push((id, Status::Ok));
                self.reqs.insert(id, (on_a, None, k));
            }
            Err(s) => {
                assert_ne!(s, Status::Ok);
                self.log.lock().unwrap().push((id, s));
                self.reqs.insert(id, (on_a, None, k));
            }
        }
    }

    /// One round: both workers progress, the clock moves a tick, B takes what its AM
    /// handler kept.
    pub fn round(&mut self) {
        self.a.progress();
        self.b.progress();
        self.fab.advance(TICK);
        let kept: Vec<_> = std::mem::take(&mut *self.kept.lock().unwrap());
        for (desc, header, rndv) in kept {
            let op = u64::from_le_bytes(header[..8].try_into().unwrap());
            *self.am_seen.entry(op).or_default() += 1;
            let (want_hdr, len) = self.ams_wanted[&op].clone();
            assert_eq!(header, want_hdr, "seed {:#x}: AM header", self.seed);
            match rndv {
                None => {
                    let d = self.b.am_data(desc).expect("kept AM data").to_vec();
                    assert_eq!(d, pattern(len, op + 1), "seed {:#x}: AM data", self.seed);
                    self.b.am_data_release(desc).unwrap();
                    assert!(self.b.am_data(desc).is_none());
                }
                Some(n) => {
                    assert_eq!(n, len, "seed {:#x}: AM rndv length", self.seed);
                    let id = self.id();
                    let (bi, p) = self.buf(len);
                    self.expect.insert(bi, pattern(len, op + 1));
                    let cb = self.cb(id);
                    // SAFETY: the buffer is boxed in self.bufs and outlives the request.
                    let r = unsafe { self.b.am_recv_data_nb(desc, Buf::contig(p, len), Some(cb)) };
                    self.track(id, false, r.map(Some), Kind::AmRecvB { buf: bi, want: len });
                }
            }
        }
    }

    /// A's key to B's region; an error (a dead peer) fails the operation that needs it.
    fn rkey(&mut self) -> ucs::Result<RemoteKey> {
        if self.rkey.is_none() {
            let packed = self.packed.clone();
            self.rkey = Some(self.a.rkey_unpack(self.ab, &packed)?);
        }
        Ok(self.rkey.clone().expect("just unpacked"))
    }

    /// Starts one operation.
    pub fn issue(&mut self, op: &Op) {
        let id = self.id();
        let (ab, ba) = (self.ab, self.ba);
        match *op {
            Op::Tag {
                len,
                sync,
                recv_first,
            } => {
                let data = pattern(len, id);
                let (si, sp) = self.buf(len);
                self.bufs[si].copy_from_slice(&data);
                let (ri, rp) = self.buf(len);
                self.expect.insert(ri, data);
                let rid = self.id();
                let post_recv = |p: &mut Pair| {
                    let cb = p.cb(rid);
                    // SAFETY: boxed buffer kept until the end of the run.
                    let r = unsafe {
                        p.b.tag_recv_nb(Buf::contig(rp, len), id, u64::MAX, Some(cb))
                    };
                    p.track(rid, false, r.map(Some), Kind::RecvB { buf: ri, want: len });
                };
                if recv_first {
                    post_recv(self);
                }
                let cb = self.cb(id);
                // SAFETY: as above.
                let r = unsafe {
                    self.a
                        .tag_send_nb(ab, Buf::contig(sp, len), id, sync, Some(cb))
                };
                self.track(id, true, r, Kind::SendA);
                if !recv_first {
                    post_recv(self);
                }
            }
            Op::Am { hdr, len, rndv } => {
                // The header is the op id, then a pattern.
                let mut full = pattern(hdr.max(8), id);
                full[..8].copy_from_slice(&id.to_le_bytes());
                self.ams_wanted.insert(id, (full.clone(), len));
                let (si, sp) = self.buf(len);
                self.bufs[si].copy_from_slice(&pattern(len, id + 1));
                let cb = self.cb(id);
                let flags = AmSendFlags {
                    rndv,
                    ..AmSendFlags::default()
                };
                // SAFETY: as above.
                let r = unsafe {
                    self.a
                        .am_send_nb(ab, AM_ID, &full, Buf::contig(sp, len), flags, Some(cb))
                };
                self.track(id, true, r, Kind::SendA);
            }
            Op::Stream { len } => {
                let data = pattern(len, id);
                let (si, sp) = self.buf(len);
                self.bufs[si].copy_from_slice(&data);
                let cb = self.cb(id);
                // SAFETY: as above.
                let r = unsafe { self.a.stream_send_nb(ab, Buf::contig(sp, len), Some(cb)) };
                self.track(id, true, r, Kind::SendA);
                let (ri, rp) = self.buf(len);
                self.expect.insert(ri, data);
                let rid = self.id();
                let cb = self.cb(rid);
                // SAFETY: as above.
                let r = unsafe {
                    self.b
                        .stream_recv_nb(ba, Buf::contig(rp, len), true, Some(cb))
                };
                let r = r.map(|s| match s {
                    ucp::stream::StreamRecv::Done(_) => None,
                    ucp::stream::StreamRecv::Pending(r) => Some(r),
                });
                self.track(rid, false, r, Kind::StreamRecvB { buf: ri, want: len });
            }
            Op::Put { off, len } => {
                let data = pattern(len, id);
                let (si, sp) = self.buf(len);
                self.bufs[si].copy_from_slice(&data);
                self.expect.insert(si, data);
                let addr = self.mem_b.address() as u64 + (PUT_AREA + off) as u64;
                let cb = self.cb(id);
                let r = self.rkey().and_then(|rk| {
                    // SAFETY: as above.
                    unsafe { self.a.put_nb(ab, Buf::contig(sp, len), addr, &rk, Some(cb)) }
                });
                self.track(id, true, r, Kind::PutA { src: si, off });
            }
            Op::PutSignal {
                off,
                len,
                word,
                set,
                value,
            } => {
                let data = pattern(len, id);
                let (si, sp) = self.buf(len);
                self.bufs[si].copy_from_slice(&data);
                self.expect.insert(si, data);
                let base = self.mem_b.address() as u64;
                let addr = base + (PUT_AREA + off) as u64;
                let sig = base + (AMO_AREA + 8 * word) as u64;
                let op = if set { SignalOp::Set } else { SignalOp::Add };
                let cb = self.cb(id);
                let r = self.rkey().and_then(|rk| {
                    // SAFETY: as above.
                    unsafe {
                        self.a.put_signal_nb(
                            ab,
                            Buf::contig(sp, len),
                            addr,
                            &rk,
                            sig,
                            &rk,
                            op,
                            value,
                            Some(cb),
                        )
                    }
                });
                let k = Kind::PutSignalA {
                    src: si,
                    off,
                    word,
                    set,
                    value,
                };
                self.track(id, true, r, k);
            }
            Op::Get { off, len } => {
                let (bi, p) = self.buf(len);
                self.expect.insert(
                    bi,
                    self.initial[GET_AREA + off..GET_AREA + off + len].to_vec(),
                );
                let addr = self.mem_b.address() as u64 + (GET_AREA + off) as u64;
                let cb = self.cb(id);
                let r = self.rkey().and_then(|rk| {
                    // SAFETY: as above.
                    unsafe { self.a.get_nb(ab, Buf::contig(p, len), addr, &rk, Some(cb)) }
                });
                self.track(id, true, r, Kind::GetA { buf: bi, off });
            }
            Op::Amo {
                word,
                op,
                bits64,
                value,
            } => {
                self.words.push(Box::new(0));
                let res = self.words.len() - 1;
                let p: *mut u64 = &mut *self.words[res];
                let addr = self.mem_b.address() as u64 + (AMO_AREA + 8 * word) as u64;
                let size = if bits64 {
                    AtomicSize::B64
                } else {
                    AtomicSize::B32
                };
                let cb = self.cb(id);
                let r = self.rkey().and_then(|rk| {
                    // SAFETY: the word is boxed and kept until the end of the run.
                    unsafe {
                        self.a.atomic_fetch_nb(
                            ab,
                            op,
                            size,
                            value,
                            value ^ 1,
                            Buf::contig(p.cast(), 8),
                            addr,
                            &rk,
                            Some(cb),
                        )
                    }
                });
                self.track(
                    id,
                    true,
                    r,
                    Kind::AmoA {
                        word,
                        res,
                        bits64,
                        value,
                        op,
                    },
                );
            }
            Op::TagBack { len } => {
                let data = pattern(len, id);
                let (si, sp) = self.buf(len);
                self.bufs[si].copy_from_slice(&data);
                let (ri, rp) = self.buf(len);
                self.expect.insert(ri, data);
                let rid = self.id();
                let cb = self.cb(rid);
                // SAFETY: boxed buffer kept until the end of the run.
                let r = unsafe {
                    self.a
                        .tag_recv_nb(Buf::contig(rp, len), id, u64::MAX, Some(cb))
                };
                self.track(rid, true, r.map(Some), Kind::RecvA { buf: ri, want: len });
                let cb = self.cb(id);
                // SAFETY: as above.
                let r = unsafe {
                    self.b
                        .tag_send_nb(ba, Buf::contig(sp, len), id, false, Some(cb))
                };
                self.track(id, false, r, Kind::SendB);
            }
            Op::Flush => {
                let cb = self.cb(id);
                let r = self.a.ep_flush_nb(ab, Some(cb));
                self.track(id, true, r, Kind::FlushA);
            }
            Op::FlushB => {
                let cb = self.cb(id);
                let r = self.b.flush_nb(Some(cb));
                self.track(id, false, r, Kind::FlushB);
            }
        }
    }

    fn worker(&mut self, on_a: bool) -> &mut Worker {
        if on_a {
            &mut self.a
        } else {
            &mut self.b
        }
    }

    /// Completions seen per tracked id.
    fn counts(&self) -> HashMap<u64, usize> {
        let mut c = HashMap::new();
        for (id, _) in self.log.lock().unwrap().iter() {
            *c.entry(*id).or_default() += 1;
        }
        c
    }

    fn pending(&self) -> Vec<(u64, Kind)> {
        let c = self.counts();
        let mut v: Vec<_> = self
            .reqs
            .iter()
            .filter(|(id, _)| !c.contains_key(id))
            .map(|(id, (_, _, k))| (*id, k.clone()))
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }

    fn ams_pending(&self) -> bool {
        self.ams_wanted
            .keys()
            .any(|id| !self.am_seen.contains_key(id))
    }

    pub fn someone_died(&self) -> bool {
        !self.fab.is_alive(self.na) || !self.fab.is_alive(self.nb)
    }

    fn eps_failed(&self) -> bool {
        matches!(self.a.ep_status(self.ab), Ok(EpStatus::Failed(_)) | Err(_))
            && matches!(self.b.ep_status(self.ba), Ok(EpStatus::Failed(_)) | Err(_))
    }

    /// Rounds until `done`, at most `max`; false when it did not happen.
    pub fn rounds_until(&mut self, max: u32, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        for _ in 0..max {
            if done(self) {
                return true;
            }
            self.round();
        }
        done(self)
    }

    fn read_b(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        // SAFETY: off + len <= REGION, B's region, mapped while mem_b lives; nothing
        // writes it concurrently (one thread).
        unsafe {
            std::ptr::copy_nonoverlapping(self.mem_b.address().add(off), v.as_mut_ptr(), len)
        };
        v
    }
}

/// What a run saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub ok: usize,
    pub errors: usize,
    /// Steps the workload took (after the setup's).
    pub steps: u64,
    pub died: bool,
    /// Send attempts the fabric refused because a lane was filled.
    pub refused_full: u64,
}

/// Prints what failed with its seed when a run panics.
struct Guard(String);

impl Drop for Guard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "FAILED fabric run (reproduce with this seed and plan): {}",
                self.0
            );
        }
    }
}

/// Word `word` of B's atomic area: its initial value and its value now.
fn signal_word(p: &Pair, word: usize) -> (u64, u64) {
    let at = AMO_AREA + 8 * word;
    let init = u64::from_le_bytes(p.initial[at..at + 8].try_into().unwrap());
    let now = u64::from_le_bytes(p.read_b(at, 8).try_into().unwrap());
    (init, now)
}

fn amo_apply(op: AtomicOp, old: u64, value: u64, compare: u64) -> u64 {
    match op {
        AtomicOp::Add => old.wrapping_add(value),
        AtomicOp::And => old & value,
        AtomicOp::Or => old | value,
        AtomicOp::Xor => old ^ value,
        AtomicOp::Swap => value,
        AtomicOp::Cswap => {
            if old == compare {
                value
            } else {
                old
            }
        }
    }
}

/// Runs `ops` from A to B under `plan` and checks the outcome (see the module docs).
pub fn run(o: &Opts, ops: &[Op], plan: &Plan) -> Report {
    let _g = Guard(format!(
        "seed {:#x}, opts {o:?}, plan {plan:?}, ops {ops:?}",
        plan.seed
    ));
    let mut p = Pair::new(plan.seed, o);
    p.fab.set_faults(plan.faults);
    let base = p.fab.steps();
    if let Some((b, k)) = plan.kill {
        p.fab.kill_at_step(p.node(b), base + k);
    }
    if let Some((b, k, hold)) = plan.fill {
        p.fab.fill_at_step(p.node(b), base + k, hold);
    }
    for (i, op) in ops.iter().enumerate() {
        p.issue(op);
        for _ in 0..plan.gaps.get(i).copied().unwrap_or(0) {
            p.round();
        }
    }
    // Phase 1: everything completes, or a node died and both sides know it.
    let ok = p.rounds_until(MAX_ROUNDS, |p| {
        (p.pending().is_empty() && !p.ams_pending())
            || (p.someone_died()
                && p.pending().iter().all(|(_, k)| {
                    matches!(
                        k,
                        Kind::RecvA { .. } | Kind::RecvB { .. } | Kind::StreamRecvB { .. }
                    )
                }))
    });
    assert!(
        ok,
        "seed {:#x}: hang: pending {:?}, AMs pending {}, died {}, ep A {:?}, ep B {:?}",
        p.seed,
        p.pending(),
        p.ams_pending(),
        p.someone_died(),
        p.a.ep_status(p.ab),
        p.b.ep_status(p.ba)
    );
    let died = p.someone_died();
    if died {
        // Let in-flight completions land and the death be detected (by both sides when
        // both can: a side that never sent to the dead one cannot), then give up the
        // receives nobody can complete.
        if !plan.close_early {
            let detect = 2 * (o.peer_timeout + FabricConfig::default().keepalive) / TICK;
            p.rounds_until(detect as u32, |p| p.eps_failed());
            for _ in 0..40 {
                p.round();
            }
        }
        // A receive posted for a dead sender is canceled; a stream receive on an endpoint
        // that never learns of the death (it never sent) is given up by closing the
        // endpoint with force, as an application does.
        let mut closed = false;
        for (id, k) in p.pending() {
            match k {
                Kind::RecvB { .. } | Kind::RecvA { .. } => {
                    let (on_a, r, _) = p.reqs[&id].clone();
                    let r = r.expect("a pending receive has a request");
                    p.worker(on_a).request_cancel(r).expect("request_cancel");
                }
                Kind::StreamRecvB { .. } if !closed => {
                    closed = true;
                    let ba = p.ba;
                    let r = p.b.ep_close_nb(ba, true).expect("forced close");
                    assert!(r.is_none(), "a forced close completes in the call");
                }
                _ => {}
            }
        }
        let ok = p.rounds_until(MAX_ROUNDS, |p| p.pending().is_empty());
        assert!(
            ok,
            "seed {:#x}: after a death, requests never completed: {:?}",
            p.seed,
            p.pending()
        );
    }
    if plan.close {
        for on_a in [true, false] {
            let id = p.id();
            let ep = if on_a { p.ab } else { p.ba };
            let r = p.worker(on_a).ep_close_nb(ep, false);
            p.track(id, on_a, r, if on_a { Kind::CloseA } else { Kind::CloseB });
        }
        // A close request has no callback: poll them.
        let ok = p.rounds_until(MAX_ROUNDS, |p| {
            let mut done = true;
            let ids: Vec<u64> = p
                .reqs
                .iter()
                .filter(|(_, (_, _, k))| matches!(k, Kind::CloseA | Kind::CloseB))
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                let (on_a, r, _) = p.reqs[&id].clone();
                let logged = p.counts().contains_key(&id);
                if let (Some(r), false) = (r, logged) {
                    match p.worker(on_a).request_test(r) {
                        Ok(Some(s)) => p.log.lock().unwrap().push((id, s)),
                        Ok(None) => done = false,
                        Err(e) => panic!("seed {:#x}: close request lost: {e}", p.seed),
                    }
                }
            }
            done
        });
        assert!(ok, "seed {:#x}: close never completed", p.seed);
    }
    check(&mut p, died)
}

fn check(p: &mut Pair, died: bool) -> Report {
    let seed = p.seed;
    let counts = p.counts();
    let mut rep = Report {
        died,
        refused_full: p.fab.stats().refused_full,
        steps: p.fab.steps(),
        ..Report::default()
    };
    let statuses: HashMap<u64, Status> = p.log.lock().unwrap().iter().copied().collect();
    let ids: Vec<u64> = p.reqs.keys().copied().collect();
    for id in ids {
        let (on_a, r, k) = p.reqs[&id].clone();
        assert_eq!(
            counts.get(&id).copied().unwrap_or(0),
            1,
            "seed {seed:#x}: request {id} ({k:?}) must complete exactly once"
        );
        let s = statuses[&id];
        if s != Status::Ok {
            assert!(
                died,
                "seed {seed:#x}: {k:?} failed with {s:?} without a death"
            );
            if let Kind::PutSignalA { src, off, word, .. } = k {
                // Failed, but if the signal was applied the data must be there.
                let (init, now) = signal_word(p, word);
                if now != init {
                    let len = p.bufs[src].len();
                    assert!(
                        p.read_b(PUT_AREA + off, len) == p.expect[&src],
                        "seed {seed:#x}: signalled without its data"
                    );
                }
            }
            if matches!(k, Kind::RecvB { .. } | Kind::RecvA { .. }) {
                // A receive ends by its sender's error or by our cancel.
                assert!(
                    matches!(s, Status::Canceled) || s != Status::Ok,
                    "seed {seed:#x}: receive {s:?}"
                );
            }
            rep.errors += 1;
        } else {
            rep.ok += 1;
            match k {
                Kind::RecvB { buf, want }
                | Kind::RecvA { buf, want }
                | Kind::AmRecvB { buf, want }
                | Kind::StreamRecvB { buf, want } => {
                    assert_eq!(p.bufs[buf].len(), want);
                    assert!(
                        p.bufs[buf][..] == p.expect[&buf][..],
                        "seed {seed:#x}: {k:?} completed Ok with wrong data"
                    );
                    if let (Kind::RecvB { .. } | Kind::RecvA { .. }, Some(r)) = (&k, r) {
                        let info = p.worker(on_a).request_info(r).expect("request_info");
                        assert_eq!(info.length, want, "seed {seed:#x}: received length");
                    }
                }
                Kind::GetA { buf, .. } => assert!(
                    p.bufs[buf][..] == p.expect[&buf][..],
                    "seed {seed:#x}: get completed Ok with wrong data"
                ),
                Kind::PutA { src, off } => {
                    let len = p.bufs[src].len();
                    assert!(
                        p.read_b(PUT_AREA + off, len) == p.expect[&src],
                        "seed {seed:#x}: put completed Ok but the target differs"
                    );
                }
                Kind::PutSignalA {
                    src,
                    off,
                    word,
                    set,
                    value,
                } => {
                    let len = p.bufs[src].len();
                    assert!(
                        p.read_b(PUT_AREA + off, len) == p.expect[&src],
                        "seed {seed:#x}: put with signal completed Ok but the target differs"
                    );
                    let (init, now) = signal_word(p, word);
                    let want = if set { value } else { init.wrapping_add(value) };
                    assert_eq!(now, want, "seed {seed:#x}: signal word");
                }
                Kind::AmoA {
                    word,
                    res,
                    bits64,
                    value,
                    op,
                } => {
                    let at = AMO_AREA + 8 * word;
                    let init = u64::from_le_bytes(p.initial[at..at + 8].try_into().unwrap());
                    let now = u64::from_le_bytes(p.read_b(at, 8).try_into().unwrap());
                    let (old, newv) = if bits64 {
                        (init, amo_apply(op, init, value, value ^ 1))
                    } else {
                        let lo = init & 0xffff_ffff;
                        let n = amo_apply(op, lo, value & 0xffff_ffff, (value ^ 1) & 0xffff_ffff)
                            & 0xffff_ffff;
                        (lo, (init & !0xffff_ffff) | n)
                    };
                    assert_eq!(*p.words[res], old, "seed {seed:#x}: atomic {op:?} result");
                    assert_eq!(now, newv, "seed {seed:#x}: atomic {op:?} target");
                }
                _ => {}
            }
        }
        let _ = on_a;
    }
    for (op, n) in &p.am_seen {
        assert_eq!(*n, 1, "seed {seed:#x}: AM of op {op} delivered {n} times");
    }
    if !died {
        assert!(!p.ams_pending(), "seed {seed:#x}: an AM never arrived");
    }
    // Nothing leaks: every request handle is freed, after which its worker no longer
    // knows it.
    let handles: Vec<(bool, Request)> = p
        .reqs
        .values()
        .filter_map(|(on_a, r, _)| r.map(|r| (*on_a, r)))
        .collect();
    for &(on_a, r) in &handles {
        p.worker(on_a).request_free(r).expect("request_free");
    }
    for _ in 0..4 {
        p.round();
    }
    for &(on_a, r) in &handles {
        assert_eq!(
            p.worker(on_a).request_test(r),
            Err(Status::InvalidParam),
            "seed {seed:#x}: request still alive after completion and free"
        );
    }
    rep
}

/// The steps a workload takes without faults (for "at every step" loops).
pub fn steps_of(o: &Opts, ops: &[Op], close: bool) -> u64 {
    let plan = Plan {
        seed: 1,
        close,
        ..Plan::default()
    };
    let before = Pair::new(1, o).fab.steps();
    let r = run(o, ops, &plan);
    assert_eq!(r.errors, 0);
    r.steps - before
}

/// Runs the workload with a kill at every step (of A, then of B) and a lane filled at
/// every step (of the nodes in `fill`: false is A, true is B); returns (runs, requests
/// that failed under death).
pub fn every_step(o: &Opts, ops: &[Op], close: bool, stride: u64, fill: &[bool]) -> (u32, usize) {
    let total = steps_of(o, ops, close);
    let mut runs = 0;
    let mut errors = 0;
    let mut refused = 0;
    let mut k = 1;
    while k <= total + 1 {
        for victim in [false, true] {
            let r = run(
                o,
                ops,
                &Plan {
                    seed: k * 2 + u64::from(victim),
                    kill: Some((victim, k)),
                    close,
                    ..Plan::default()
                },
            );
            errors += r.errors;
            assert_eq!(r.died, k <= total, "the kill at step {k} of {total}");
            runs += 1;
            if !fill.contains(&victim) {
                continue;
            }
            let r = run(
                o,
                ops,
                &Plan {
                    seed: k * 2 + u64::from(victim),
                    fill: Some((victim, k, 3 * TICK)),
                    close,
                    ..Plan::default()
                },
            );
            assert_eq!(r.errors, 0, "a full lane must not fail anything");
            refused += r.refused_full;
            runs += 1;
        }
        k += stride;
    }
    assert!(
        fill.is_empty() || refused > 0,
        "no filled lane ever refused a send"
    );
    (runs, errors)
}
