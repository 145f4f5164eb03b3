//! The transport conformance suite: checks, in one process, that a transport keeps the
//! contract of [`uct::Iface`] and [`uct::Md`]. Every check is a function taking the
//! [`Transport`]; [`crate::conformance_suite!`] turns them all into `#[test]`s, so adding a
//! transport to the suite is one line:
//!
//! ```no_run
//! use uct::Transport;
//! testkit::conformance_suite!(shm, Transport::Shm);
//! ```
//!
//! What is checked: active messages of every flavour arrive with every byte intact and in
//! order; put and get of every flavour move exactly the bytes asked for (nothing around
//! them changes) to allocated and registered memory; each atomic operation at each width
//! has exactly the arithmetic of a CPU atomic; flush and fence complete; the pending
//! contract holds; the same memory can be registered twice; and bad input (a destroyed
//! endpoint, an active-message id of 32 or more, an oversize payload, a packer that
//! overflows or panics, an address outside the key, a misaligned atomic, a corrupted key
//! or address) gives an error, not a panic, a write, a delivery or a stuck endpoint.
//!
//! The checks panic (assert) on a violation, which is what a `#[test]` wants.
//!
//! Capabilities. Every check that needs one reads the interface's `attr().caps` (and
//! [`Md::supports_rkeys`] for memory): where a capability is absent it asserts instead that
//! the operation is refused with `Status::Unsupported` and writes nothing — tried with a
//! key that works on another transport (see [`TargetKind::StandIn`]) when the domain can
//! register nothing itself. A check never passes without asserting something.
//!
//! Connection-based transports (tcp) differ in documented ways that the checks assert
//! rather than skip: connecting is asynchronous (the first sends are buffered, `ep_flush`
//! says `NoResource` until they reached the kernel); `NoResource` comes only once the
//! kernel's socket buffers and the endpoint's send buffer are full (the suite configures a
//! small one, [`suite_config`]); destroying an endpoint drops what it had not handed to
//! the kernel; the event descriptor is a level-triggered epoll set that a new connection
//! makes readable as well, with nothing to arm.
//!
//! The fabric (in-memory, see [`crate::fabric`]) runs on the default network of the
//! thread (no faults, a clock that does not move): reliable delivery in progress order
//! needs no time to pass.
//!
//! Topology. When the transport can reach a second interface of this process, the fixture
//! opens a sender and a receiver interface; when it can only reach itself (self), the
//! sender sends to its own address. Either way the receiving interface is progressed by
//! the fixture while the sender waits for resources.

use crate::pattern;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucs::Status;
use uct::rkey::{PackedRkey, RkeyKind};
use uct::{
    AtomicOp, AtomicSize, Caps, EpId, Iface, IfaceConfig, Md, MemHandle, Outcome, PendingResult,
    Rkey, Transport, AM_ID_MAX,
};

/// Bound on every in-process wait of the suite.
const WAIT: Duration = Duration::from_secs(20);

/// The configuration of the suite's fixtures: the defaults, with a tcp send buffer of
/// two segments (instead of 1 MiB), so that the checks reach tcp's `NoResource` path
/// without first filling a megabyte.
pub fn suite_config() -> IfaceConfig {
    let mut cfg = IfaceConfig::default();
    cfg.tcp.tx_buf = 2 * cfg.tcp.seg_size;
    cfg.tcp.put_seg = cfg.tcp.seg_size;
    cfg
}

/// True for transports whose endpoints are connections (tcp): see the module docs.
pub fn connection_based(t: Transport) -> bool {
    t == Transport::Tcp
}

/// Operations that reach remote memory, each needing its capability.
const RMA_CAPS: Caps = Caps::PUT_SHORT
    .union(Caps::PUT_BCOPY)
    .union(Caps::PUT_ZCOPY)
    .union(Caps::GET_BCOPY)
    .union(Caps::GET_ZCOPY)
    .union(Caps::ATOMIC32)
    .union(Caps::ATOMIC64)
    .union(Caps::RKEY_PTR);

/// Asserts that an operation on a valid endpoint is refused as it must be: with any error
/// when the interface has `cap` (the input is bad), with `Unsupported` when it does not.
fn assert_refused<T: std::fmt::Debug>(caps: Caps, cap: Caps, r: ucs::Result<T>, what: &str) {
    if caps.contains(cap) {
        assert!(r.is_err(), "{what}: must be an error, got {r:?}");
    } else {
        assert_eq!(
            r.err(),
            Some(Status::Unsupported),
            "{what}: without {cap:?} the operation must be Unsupported"
        );
    }
}

/// Messages delivered to the receiving interface: (am id, bytes).
pub type Inbox = Arc<Mutex<VecDeque<(u8, Vec<u8>)>>>;

/// A sender interface with an endpoint to a receiving interface that records everything
/// delivered to it, plus a memory domain.
pub struct Fixture {
    pub transport: Transport,
    /// The sending interface (also the receiver when `rx` is `None`).
    pub tx: Iface,
    /// The receiving interface when it is a separate one.
    pub rx: Option<Iface>,
    /// The endpoint from `tx` to the receiver.
    pub ep: EpId,
    pub md: Md,
    pub inbox: Inbox,
}

impl Fixture {
    /// A fixture with the suite's configuration ([`suite_config`]).
    pub fn new(t: Transport) -> Fixture {
        Fixture::with_config(t, &suite_config())
    }

    /// A fixture whose interfaces use `cfg`.
    pub fn with_config(t: Transport, cfg: &IfaceConfig) -> Fixture {
        let mut tx = Iface::open(t, cfg).expect("opening the sending interface");
        let mut other = Iface::open(t, cfg).expect("opening a second interface");
        if connection_based(t) && tx.address() < other.address() {
            // The sender is the interface with the larger address: its endpoint first
            // waits for the peer to connect (tcp's tie-break), the harder of the two
            // paths, and so the one every check runs on. (Kernel port order would
            // otherwise pick a path at random.)
            std::mem::swap(&mut tx, &mut other);
        }
        let (rx, ep) = if tx.is_reachable(&other.device_address(), &other.address()) {
            let ep = tx
                .ep_create(&other.address())
                .expect("ep_create to the receiver");
            (Some(other), ep)
        } else {
            let own = tx.address();
            let ep = tx.ep_create(&own).expect("ep_create to the own address");
            (None, ep)
        };
        let mut f = Fixture {
            transport: t,
            tx,
            rx,
            ep,
            md: Md::open(t),
            inbox: Inbox::default(),
        };
        for id in 0..AM_ID_MAX {
            let inbox = f.inbox.clone();
            f.rx()
                .set_am_handler(
                    id,
                    Box::new(move |data: &[u8]| {
                        inbox
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push_back((id, data.to_vec()));
                    }),
                )
                .expect("set_am_handler");
        }
        f
    }

    /// The receiving interface.
    pub fn rx(&mut self) -> &mut Iface {
        self.rx.as_mut().unwrap_or(&mut self.tx)
    }

    /// Progresses the receiving interface (and the sender, for its pending queue).
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        if let Some(rx) = self.rx.as_mut() {
            n += rx.progress();
        }
        n + self.tx.progress()
    }

    /// Runs `op` on (sender, endpoint) until it is not `NoResource`, progressing the
    /// receiver in between. `InProgress` is completed with a flush. Returns the value of
    /// `Done`, `None` after `InProgress`.
    pub fn send<T>(
        &mut self,
        what: &str,
        mut op: impl FnMut(&mut Iface, EpId) -> ucs::Result<Outcome<T>>,
    ) -> Option<T> {
        let start = Instant::now();
        loop {
            match op(&mut self.tx, self.ep) {
                Ok(Outcome::Done(v)) => return Some(v),
                Ok(Outcome::InProgress) => {
                    self.flush_ep();
                    return None;
                }
                Ok(Outcome::NoResource) => {
                    self.progress();
                }
                Err(e) => panic!("{:?}: {what} failed: {e}", self.transport),
            }
            assert!(
                start.elapsed() < WAIT,
                "{:?}: {what} stayed NoResource",
                self.transport
            );
        }
    }

    /// Progresses both sides until `done()` holds (bounded by the suite's wait).
    pub fn settle(&mut self, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            if self.progress() == 0 {
                std::thread::yield_now();
            }
            assert!(
                start.elapsed() < WAIT,
                "{:?}: the receiver never got what was sent",
                self.transport
            );
        }
    }

    /// Flushes the endpoint until the flush completes.
    pub fn flush_ep(&mut self) {
        let start = Instant::now();
        loop {
            match self.tx.ep_flush(self.ep, 0) {
                Ok(Outcome::Done(())) => return,
                Ok(_) => {
                    self.progress();
                }
                Err(e) => panic!("{:?}: ep_flush failed: {e}", self.transport),
            }
            assert!(start.elapsed() < WAIT, "ep_flush never completed");
        }
    }

    /// Progresses until exactly `n` messages have arrived (and no more come), and takes
    /// them.
    pub fn expect_messages(&mut self, n: usize) -> Vec<(u8, Vec<u8>)> {
        let start = Instant::now();
        while self.inbox_len() < n {
            if self.progress() == 0 {
                std::thread::yield_now();
            }
            assert!(
                start.elapsed() < WAIT,
                "{:?}: {} of {n} messages arrived",
                self.transport,
                self.inbox_len()
            );
        }
        // Anything still queued would be an extra (duplicated or spurious) message.
        while self.progress() > 0 {}
        let got: Vec<_> = self
            .inbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        assert_eq!(
            got.len(),
            n,
            "{:?}: more messages arrived than were sent",
            self.transport
        );
        got
    }

    /// Asserts that nothing arrived: progresses until nothing is left, then sends a
    /// sentinel on the fixture's endpoint and checks that it is the only message (so that
    /// a message still on its way, over tcp, is caught too).
    pub fn expect_no_message(&mut self, after: &str) {
        while self.progress() > 0 {}
        let got = self.inbox_len();
        assert_eq!(
            got, 0,
            "{:?}: {got} message(s) delivered after {after}",
            self.transport
        );
        const SENTINEL: u64 = 0x5e57_1e1e_5e57_1e1e;
        self.send("the sentinel am_short", |i, ep| {
            i.am_short(ep, 0, SENTINEL, b"sentinel")
        });
        let got = self.expect_messages(1);
        assert_eq!(
            (got[0].0, &got[0].1[..8], &got[0].1[8..]),
            (0, &SENTINEL.to_ne_bytes()[..], &b"sentinel"[..]),
            "{:?}: a message delivered after {after} arrived before the sentinel",
            self.transport
        );
    }

    /// For a connection-based transport: sends one message and receives it, so that the
    /// connection is accepted and its handshake read (a no-op for the others).
    pub fn connect(&mut self) {
        if connection_based(self.transport) {
            self.send("am_short (connecting)", |i, ep| {
                i.am_short(ep, 0, 0, b"hello")
            });
            assert_eq!(self.expect_messages(1)[0].1[8..], *b"hello");
        }
    }

    /// A target for RMA checks: `kind` of this fixture's domain, or a stand-in when the
    /// domain cannot register memory.
    pub fn target(&self, kind: TargetKind, len: usize) -> Target {
        if self.md.supports_rkeys() {
            Target::new(&self.md, kind, len)
        } else if self.md.registers() {
            // Keys for the transport's own puts only: registered memory.
            Target::new(&self.md, TargetKind::Reg, len)
        } else {
            Target::new(&self.md, TargetKind::StandIn, len)
        }
    }

    /// The targets RMA checks run on: every kind when the domain registers memory, else
    /// the stand-in only.
    pub fn targets(&self, len: usize) -> Vec<Target> {
        if self.md.supports_rkeys() {
            TargetKind::ALL
                .iter()
                .map(|&k| Target::new(&self.md, k, len))
                .collect()
        } else {
            vec![Target::new(&self.md, TargetKind::StandIn, len)]
        }
    }

    fn inbox_len(&self) -> usize {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Memory that RMA targets: an allocation of the domain or registered user memory, with
/// the remote key already unpacked.
pub struct Target {
    /// Local address of the key's first byte.
    ptr: *mut u8,
    len: usize,
    /// Bytes of local memory before and after the key's range that the test owns too
    /// (registered targets sit inside a larger buffer so that a write past the key shows).
    margin: usize,
    pub rkey: Rkey,
    pub kind: TargetKind,
    _handle: MemHandle,
    /// The buffer of a registered target (kept alive; accessed through `ptr` only). Made
    /// of u64 so that registered memory is 8-byte aligned like allocated memory.
    _buf: Option<Box<[u64]>>,
}

/// Where a [`Target`]'s memory comes from and who unpacks its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// `mem_alloc`, key unpacked by the allocating domain.
    Alloc,
    /// `mem_alloc`, key unpacked by another domain (a peer's view: a mapping).
    AllocOtherMd,
    /// `mem_reg` of user memory, key unpacked by the registering domain.
    Reg,
    /// For a domain that registers nothing (`!supports_rkeys()`): user memory registered
    /// with the self transport's domain, a key that works in this process. The
    /// transport's operations must refuse it (`Unsupported`) and leave the memory alone.
    StandIn,
}

impl TargetKind {
    pub const ALL: [TargetKind; 3] = [TargetKind::Alloc, TargetKind::AllocOtherMd, TargetKind::Reg];
}

const MARGIN: usize = 4096;

impl Target {
    /// Allocates or registers `len` bytes of `kind` and unpacks the key.
    pub fn new(md: &Md, kind: TargetKind, len: usize) -> Target {
        let t = md.transport();
        match kind {
            TargetKind::Alloc | TargetKind::AllocOtherMd => {
                let h = md.mem_alloc(len).expect("mem_alloc");
                assert!(h.is_shared(), "{t:?}: mem_alloc memory must be shareable");
                assert_eq!(h.len(), len);
                let packed = h.pack_rkey();
                let rkey = if kind == TargetKind::Alloc {
                    md.rkey_unpack(&packed)
                } else {
                    Md::open(t).rkey_unpack(&packed)
                }
                .expect("rkey_unpack of an allocation");
                Target {
                    ptr: h.address(),
                    len,
                    margin: 0,
                    rkey,
                    kind,
                    _handle: h,
                    _buf: None,
                }
            }
            TargetKind::Reg | TargetKind::StandIn => {
                let mut buf = vec![0u64; (len + 2 * MARGIN).div_ceil(8)].into_boxed_slice();
                // SAFETY: MARGIN + len <= 8 * buf.len(), so the pointer stays inside `buf`.
                let ptr = unsafe { buf.as_mut_ptr().cast::<u8>().add(MARGIN) };
                let stand_in;
                let md = if kind == TargetKind::StandIn {
                    assert!(
                        !md.supports_rkeys(),
                        "{t:?}: a stand-in target is for domains without keys"
                    );
                    if !md.registers() {
                        assert_eq!(
                            // SAFETY: `ptr..ptr+len` lies in `buf` (above); refused anyway.
                            unsafe { md.mem_reg(ptr, len) }.err(),
                            Some(Status::Unsupported),
                            "{t:?}: mem_reg of a domain without keys"
                        );
                    }
                    stand_in = Md::open(Transport::SelfTl);
                    &stand_in
                } else {
                    md
                };
                // SAFETY: `ptr..ptr+len` lies in `buf`, which the Target keeps beside the
                // handle and outlives it; the test reads it between progress calls only.
                let h = unsafe { md.mem_reg(ptr, len) }.expect("mem_reg");
                let rkey = md
                    .rkey_unpack(&h.pack_rkey())
                    .expect("rkey_unpack of a registration");
                Target {
                    ptr,
                    len,
                    margin: MARGIN,
                    rkey,
                    kind,
                    _handle: h,
                    _buf: Some(buf),
                }
            }
        }
    }

    /// The remote address of byte `off` of the target.
    pub fn addr(&self, off: usize) -> u64 {
        self.rkey.range().0 + off as u64
    }

    /// Length of the key's range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty target.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The target's bytes including the margins around registered memory.
    fn whole(&self) -> &[u8] {
        // SAFETY: ptr - margin .. ptr + len + margin is the registered buffer (margin > 0)
        // or the allocation (margin == 0), both owned by self and alive; transports write
        // it only while an operation runs, never concurrently with this read.
        unsafe { std::slice::from_raw_parts(self.ptr.sub(self.margin), self.len + 2 * self.margin) }
    }

    fn whole_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in whole(); &mut self makes this the only view.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.sub(self.margin), self.len + 2 * self.margin)
        }
    }

    /// Fills everything (margins included) with `seed`'s pattern.
    pub fn fill(&mut self, seed: u64) {
        pattern::fill_mem(self.whole_mut(), seed, 0);
    }

    /// The key's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.whole()[self.margin..self.margin + self.len]
    }

    /// Asserts that `[off, off+len)` of the key's range holds `inner`'s pattern (at the
    /// same offsets as in a region filled with `fill_mem(.., inner, 0)`), and every other
    /// byte, margins included, still holds `outer`'s.
    pub fn assert_pattern(&self, what: &str, outer: u64, off: usize, len: usize, inner: u64) {
        let w = self.whole();
        let (a, b) = (self.margin + off, self.margin + off + len);
        if let Some(i) = pattern::check_mem(&w[..a], outer, 0) {
            panic!(
                "{what}: byte {} before the written range changed",
                i as isize - self.margin as isize
            );
        }
        if let Some(i) = pattern::check_mem(&w[a..b], inner, a as u64) {
            panic!("{what}: byte {} of {len} written wrong", i);
        }
        if let Some(i) = pattern::check_mem(&w[b..], outer, b as u64) {
            panic!("{what}: byte {} after the written range changed", i);
        }
    }

    /// True when key bytes `[off, off+len)` hold pattern `inner`.
    pub fn has_pattern(&self, off: usize, len: usize, inner: u64) -> bool {
        let a = self.margin + off;
        pattern::check_mem(&self.whole()[a..a + len], inner, a as u64).is_none()
    }

    /// Pattern offset of key byte `off` (the margin shifts it).
    fn pos(&self, off: usize) -> u64 {
        (self.margin + off) as u64
    }

    fn word(&self, off: usize, size: AtomicSize) -> u64 {
        let b = &self.bytes()[off..off + size.bytes()];
        match size {
            AtomicSize::B32 => u64::from(u32::from_ne_bytes(b.try_into().expect("4 bytes"))),
            AtomicSize::B64 => u64::from_ne_bytes(b.try_into().expect("8 bytes")),
        }
    }

    fn set_word(&mut self, off: usize, size: AtomicSize, v: u64) {
        let m = self.margin;
        let b = &mut self.whole_mut()[m + off..m + off + size.bytes()];
        match size {
            AtomicSize::B32 => b.copy_from_slice(&(v as u32).to_ne_bytes()),
            AtomicSize::B64 => b.copy_from_slice(&v.to_ne_bytes()),
        }
    }
}

/// `sizes` without duplicates, limited to `..=max`, in order.
fn sizes_upto(max: usize, sizes: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = sizes.iter().copied().filter(|&s| s <= max).collect();
    v.push(max);
    v.sort_unstable();
    v.dedup();
    v
}

/// Interesting sizes up to `max`: small ones, powers of two and their neighbours, `max`.
fn limit_sizes(max: usize) -> Vec<usize> {
    let mut s: Vec<usize> = (0..=17).collect();
    let mut p = 32;
    while p <= max {
        s.extend([p - 1, p, p + 1]);
        p *= 2;
    }
    s.extend([max.saturating_sub(1), max]);
    sizes_upto(max, &s)
}

// ---------------------------------------------------------------------------------------
// Attributes and endpoints

/// The interface describes itself consistently: address lengths, limits, reachability.
pub fn attributes(t: Transport) {
    let f = Fixture::new(t);
    let a = f.tx.attr().clone();
    assert_eq!(f.tx.transport(), t);
    assert_eq!(
        f.tx.address().len(),
        a.iface_addr_len,
        "{t:?}: iface address length"
    );
    assert_eq!(
        f.tx.device_address().len(),
        a.device_addr_len,
        "{t:?}: device address length"
    );
    for cap in [Caps::AM_SHORT, Caps::AM_BCOPY, Caps::AM_ZCOPY] {
        assert!(a.caps.contains(cap), "{t:?}: lacks {cap:?}");
    }
    assert!(
        a.max_am_bcopy >= a.max_am_short,
        "{t:?}: bcopy limit below short limit"
    );
    assert!(
        f.tx.is_reachable(&f.tx.device_address(), &f.tx.address()),
        "{t:?}: an interface must reach itself"
    );
    assert!(
        !f.tx.is_reachable(&[], &f.tx.address()),
        "{t:?}: empty device address reachable"
    );
    assert!(
        !f.tx.is_reachable(&f.tx.device_address(), &[]),
        "{t:?}: empty iface address reachable"
    );
    assert!(a.cost.bandwidth > 0.0 && a.cost.time(1 << 20) > a.cost.time(1));

    // Capabilities agree with the limits, the event descriptor and the memory domain.
    for (cap, limit) in [
        (Caps::PUT_SHORT, a.max_put_short),
        (Caps::PUT_BCOPY, a.max_put_bcopy),
        (Caps::PUT_ZCOPY, a.max_put_zcopy),
        (Caps::GET_BCOPY, a.max_get_bcopy),
        (Caps::GET_ZCOPY, a.max_get_zcopy),
    ] {
        assert_eq!(
            a.caps.contains(cap),
            limit > 0,
            "{t:?}: {cap:?} with a limit of {limit}"
        );
    }
    assert!(a.max_am_hdr <= a.max_am_zcopy, "{t:?}: zcopy header limit");
    assert_eq!(
        a.caps.contains(Caps::EVENT_RECV),
        f.tx.event_fd().is_some(),
        "{t:?}: EVENT_RECV and the event descriptor disagree"
    );
    assert_eq!(
        a.caps.intersects(RMA_CAPS),
        f.md.registers(),
        "{t:?}: RMA capabilities {:?} but registers() is {}",
        a.caps & RMA_CAPS,
        f.md.registers()
    );
    // Keys for the protocol layer's RMA need more than a put.
    assert_eq!(
        a.caps.intersects(RMA_CAPS.difference(Caps::PUT_ZCOPY)),
        f.md.supports_rkeys(),
        "{t:?}: RMA capabilities {:?} but supports_rkeys() is {}",
        a.caps & RMA_CAPS,
        f.md.supports_rkeys()
    );
    if !f.md.supports_rkeys() {
        assert_eq!(
            f.md.mem_alloc(4096).err(),
            Some(Status::Unsupported),
            "{t:?}: mem_alloc of a domain without keys"
        );
    }
}

/// Endpoint ids: counted, reusable after destruction, and a destroyed or unknown id is
/// an error everywhere.
pub fn endpoints(t: Transport) {
    let mut f = Fixture::new(t);
    let addr = f.rx.as_ref().map_or_else(|| f.tx.address(), Iface::address);
    let n0 = f.tx.ep_count();
    let e1 = f.tx.ep_create(&addr).expect("second ep");
    assert_ne!(e1, f.ep);
    assert_eq!(f.tx.ep_count(), n0 + 1);
    f.tx.ep_destroy(e1).expect("ep_destroy");
    assert_eq!(f.tx.ep_count(), n0);
    assert_eq!(
        f.tx.ep_destroy(e1),
        Err(Status::InvalidParam),
        "{t:?}: double destroy"
    );
    assert!(f.tx.ep_destroy(EpId(u32::MAX)).is_err());
    let e2 = f.tx.ep_create(&addr).expect("third ep");
    // The new endpoint works (whatever id it got).
    assert_eq!(
        f.send("am_short on a new ep", |i, _| i.am_short(e2, 1, 7, b"x")),
        Some(())
    );
    let got = f.expect_messages(1);
    assert_eq!(got[0].1[8..], *b"x");
}

/// An interface can create an endpoint to its own address and deliver to itself.
pub fn loopback_to_own_address(t: Transport) {
    let mut i = Iface::open(t, &IfaceConfig::default()).expect("open");
    let inbox = Inbox::default();
    let sink = inbox.clone();
    i.set_am_handler(
        3,
        Box::new(move |d: &[u8]| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back((3, d.to_vec()))
        }),
    )
    .expect("handler");
    let own = i.address();
    let ep = i.ep_create(&own).expect("ep_create to the own address");
    let payload = pattern::am_vec(20, 1, 0, 0);
    let start = Instant::now();
    let mut sent = 0;
    while sent < 2 {
        let r = if sent == 0 {
            i.am_short(ep, 3, 99, &payload)
        } else {
            i.am_bcopy(ep, 3, |b| {
                b[..20].copy_from_slice(&payload);
                20
            })
            .map(|o| match o {
                Outcome::Done(_) => Outcome::Done(()),
                Outcome::InProgress => Outcome::InProgress,
                Outcome::NoResource => Outcome::NoResource,
            })
        };
        match r.expect("loopback send") {
            Outcome::NoResource => {}
            _ => sent += 1,
        }
        i.progress();
        assert!(start.elapsed() < WAIT);
    }
    while inbox.lock().unwrap_or_else(|p| p.into_inner()).len() < 2 {
        i.progress();
        assert!(
            start.elapsed() < WAIT,
            "{t:?}: loopback messages did not arrive"
        );
    }
    let got: Vec<_> = inbox
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .collect();
    assert_eq!(got[0].1[..8], 99u64.to_ne_bytes());
    assert_eq!(got[0].1[8..], payload[..]);
    assert_eq!(got[1].1, payload);
}

// ---------------------------------------------------------------------------------------
// Active messages

/// `am_short`: every size up to the limit arrives with the header (native byte order)
/// and every payload byte, on the right id, in order.
pub fn am_short(t: Transport) {
    let mut f = Fixture::new(t);
    let max = f.tx.attr().max_am_short;
    let sizes = limit_sizes(max);
    for (m, &len) in sizes.iter().enumerate() {
        let m = m as u64;
        let payload = pattern::am_vec(len, m, 0, 0);
        let hdr = pattern::am_header(m, 0);
        let id = (m % u64::from(AM_ID_MAX)) as u8;
        f.send("am_short", |i, ep| i.am_short(ep, id, hdr, &payload));
    }
    let got = f.expect_messages(sizes.len());
    for (m, ((id, data), &len)) in got.iter().zip(&sizes).enumerate() {
        let m = m as u64;
        assert_eq!(
            u64::from(*id),
            m % u64::from(AM_ID_MAX),
            "{t:?}: message {m} id"
        );
        assert_eq!(data.len(), 8 + len, "{t:?}: message {m} length");
        assert_eq!(
            data[..8],
            pattern::am_header(m, 0).to_ne_bytes(),
            "{t:?}: header of {m}"
        );
        assert_eq!(
            pattern::check_am(&data[8..], m, 0, 0),
            None,
            "{t:?}: payload of {m} ({len} B)"
        );
    }
}

/// `am_bcopy`: the packer gets a buffer of at least `max_am_bcopy` bytes; what it packs
/// arrives intact for every size up to the limit, and the returned length is the packed
/// length.
pub fn am_bcopy(t: Transport) {
    let mut f = Fixture::new(t);
    let max = f.tx.attr().max_am_bcopy;
    let sizes = limit_sizes(max);
    for (m, &len) in sizes.iter().enumerate() {
        let m = m as u64;
        let id = (m * 7 % u64::from(AM_ID_MAX)) as u8;
        let n = f.send("am_bcopy", |i, ep| {
            i.am_bcopy(ep, id, |buf| {
                assert!(
                    buf.len() >= max,
                    "packer got {} bytes, limit is {max}",
                    buf.len()
                );
                pattern::fill_am(&mut buf[..len], m, 0, 1);
                len
            })
        });
        if let Some(n) = n {
            assert_eq!(n, len, "{t:?}: am_bcopy returned a different length");
        }
    }
    let got = f.expect_messages(sizes.len());
    for (m, ((id, data), &len)) in got.iter().zip(&sizes).enumerate() {
        let m = m as u64;
        assert_eq!(u64::from(*id), m * 7 % u64::from(AM_ID_MAX));
        assert_eq!(data.len(), len, "{t:?}: message {m} length");
        assert_eq!(
            pattern::check_am(data, m, 0, 1),
            None,
            "{t:?}: message {m} ({len} B)"
        );
    }
}

/// `am_zcopy`: header and iov arrive concatenated, for header lengths up to
/// `max_am_hdr`, 0 to 4 iov entries (empty ones included) and totals up to the limit.
pub fn am_zcopy(t: Transport) {
    let mut f = Fixture::new(t);
    let (max, max_hdr) = (f.tx.attr().max_am_zcopy, f.tx.attr().max_am_hdr);
    let mut plan = Vec::new();
    for total in sizes_upto(max, &[0, 1, 2, 63, 64, 65, 1000, 4095, 4096, 4097, max - 1]) {
        for hdr in sizes_upto(max_hdr.min(total), &[0, 1, 8, 16]) {
            for pieces in 0..=4usize {
                if pieces == 0 && hdr != total {
                    continue;
                }
                plan.push((total, hdr, pieces));
            }
        }
    }
    for (m, &(total, hdr, pieces)) in plan.iter().enumerate() {
        let m = m as u64;
        let data = pattern::am_vec(total, m, 0, 2);
        let (h, rest) = data.split_at(hdr);
        // Cut the rest into `pieces` parts; the second one is empty when there are 3+.
        let mut iov: Vec<&[u8]> = Vec::new();
        let mut r = rest;
        for p in 0..pieces {
            let take = if p + 1 == pieces {
                r.len()
            } else if p == 1 {
                0
            } else {
                r.len() / (pieces - p)
            };
            let (a, b) = r.split_at(take);
            iov.push(a);
            r = b;
        }
        let id = (m % 31) as u8;
        f.send("am_zcopy", |i, ep| i.am_zcopy(ep, id, h, &iov, m));
    }
    let got = f.expect_messages(plan.len());
    for (m, ((id, data), &(total, hdr, pieces))) in got.iter().zip(&plan).enumerate() {
        let m = m as u64;
        assert_eq!(u64::from(*id), m % 31);
        assert_eq!(
            data.len(),
            total,
            "{t:?}: zcopy {m} (hdr {hdr}, {pieces} pieces) length"
        );
        assert_eq!(
            pattern::check_am(data, m, 0, 2),
            None,
            "{t:?}: zcopy {m} (hdr {hdr}, {pieces} pieces)"
        );
    }
}

/// All 32 ids reach their own handler; a message to an id without a handler is dropped
/// without disturbing later ones; interleaved flavours keep their sending order.
pub fn am_ids_and_order(t: Transport) {
    let mut f = Fixture::new(t);
    for id in 0..AM_ID_MAX {
        f.send("am_short", |i, ep| i.am_short(ep, id, u64::from(id), &[id]));
    }
    let got = f.expect_messages(usize::from(AM_ID_MAX));
    for (k, (id, data)) in got.iter().enumerate() {
        assert_eq!(usize::from(*id), k);
        assert_eq!(data[..8], u64::from(*id).to_ne_bytes());
        assert_eq!(data[8..], [*id]);
    }

    f.rx().clear_am_handler(5).expect("clear_am_handler");
    f.send("am_short", |i, ep| i.am_short(ep, 5, 0, b"nobody"));
    f.send("am_short", |i, ep| i.am_short(ep, 6, 0, b"somebody"));
    let got = f.expect_messages(1);
    assert_eq!((got[0].0, &got[0].1[8..]), (6, &b"somebody"[..]));

    // Ordering across flavours on one endpoint.
    let n = 3000u64;
    for m in 0..n {
        let bytes = m.to_le_bytes();
        match m % 3 {
            0 => f.send("am_short", |i, ep| i.am_short(ep, 1, m, &bytes)),
            1 => f
                .send("am_bcopy", |i, ep| {
                    i.am_bcopy(ep, 1, |b| {
                        b[..8].copy_from_slice(&m.to_ne_bytes());
                        b[8..16].copy_from_slice(&bytes);
                        16
                    })
                })
                .map(|_| ()),
            _ => f.send("am_zcopy", |i, ep| {
                i.am_zcopy(ep, 1, &m.to_ne_bytes(), &[&bytes[..]], m)
            }),
        };
    }
    let got = f.expect_messages(n as usize);
    for (m, (_, d)) in got.iter().enumerate() {
        let seq = u64::from_ne_bytes(d[..8].try_into().expect("8 bytes"));
        assert_eq!(seq, m as u64, "{t:?}: message order");
        assert_eq!(d[8..], (m as u64).to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------
// RMA

const RMA_SIZES: [usize; 11] = [
    1,
    7,
    64,
    255,
    256,
    257,
    4095,
    4096,
    8192,
    65537,
    (1 << 20) + 3,
];

/// put_short, put_bcopy and put_zcopy write exactly the requested bytes, and get_bcopy
/// and get_zcopy read them, on allocated memory (own and other domain) and registered
/// memory, for sizes from 1 byte to 1 MiB + 3 at an odd offset. Each operation runs where
/// the interface has its capability; without it, it must be `Unsupported` (see
/// [`rma_without_caps`]).
pub fn put_get(t: Transport) {
    let mut f = Fixture::new(t);
    let attr = f.tx.attr().clone();
    let caps = attr.caps;
    rma_without_caps(&mut f);
    if !f.md.registers() {
        return;
    }
    // A domain whose keys only serve put_zcopy (tcp) cannot allocate.
    let kinds: &[TargetKind] = if f.md.supports_rkeys() {
        &TargetKind::ALL
    } else {
        &[TargetKind::Reg]
    };
    for &kind in kinds {
        for &size in &RMA_SIZES {
            // An odd offset with room on both sides inside the key.
            let off = 61;
            let mut tg = Target::new(&f.md, kind, off + size + 67);
            let what = |op: &str| format!("{t:?} {kind:?} {op} of {size} B");
            let pos = tg.pos(off);
            let src = pattern::mem_vec(size, 2, pos);
            let addr = tg.addr(off);

            if caps.contains(Caps::PUT_SHORT) && size <= attr.max_put_short {
                tg.fill(1);
                f.send("put_short", |i, ep| i.put_short(ep, &src, addr, &tg.rkey));
                f.flush_ep();
                tg.assert_pattern(&what("put_short"), 1, off, size, 2);
            }

            tg.fill(1);
            let chunk = attr.max_put_bcopy;
            for c in (0..size).step_by(chunk.max(1)) {
                if !caps.contains(Caps::PUT_BCOPY) {
                    break;
                }
                let part = &src[c..size.min(c + chunk)];
                let n = f.send("put_bcopy", |i, ep| {
                    i.put_bcopy(
                        ep,
                        |b| {
                            b[..part.len()].copy_from_slice(part);
                            part.len()
                        },
                        addr + c as u64,
                        &tg.rkey,
                    )
                });
                if let Some(n) = n {
                    assert_eq!(n, part.len(), "{}", what("put_bcopy length"));
                }
            }
            f.flush_ep();
            if caps.contains(Caps::PUT_BCOPY) {
                tg.assert_pattern(&what("put_bcopy"), 1, off, size, 2);
            }

            if caps.contains(Caps::PUT_ZCOPY) && size <= attr.max_put_zcopy {
                tg.fill(1);
                let (a, rest) = src.split_at(size / 3);
                let (b, c) = rest.split_at(rest.len() / 2);
                let sent = f.send("put_zcopy", |i, ep| {
                    i.put_zcopy(ep, &[a, &[], b, c], addr, &tg.rkey, 1)
                });
                f.flush_ep();
                if sent.is_some() && connection_based(t) {
                    // Done means sent: the target has the data once it read the frame.
                    f.settle(|| tg.has_pattern(off, size, 2));
                }
                tg.assert_pattern(&what("put_zcopy"), 1, off, size, 2);
            }

            tg.fill(3);
            let mut got = Vec::with_capacity(size);
            let chunk = attr.max_get_bcopy;
            for c in (0..size).step_by(chunk.max(1)) {
                if !caps.contains(Caps::GET_BCOPY) {
                    break;
                }
                let len = chunk.min(size - c);
                let mut part = Vec::new();
                f.send("get_bcopy", |i, ep| {
                    i.get_bcopy(ep, len, addr + c as u64, &tg.rkey, |d| part = d.to_vec(), 2)
                });
                f.flush_ep();
                assert_eq!(part.len(), len, "{}", what("get_bcopy length"));
                got.extend_from_slice(&part);
            }
            if caps.contains(Caps::GET_BCOPY) {
                assert_eq!(
                    pattern::check_mem(&got, 3, pos),
                    None,
                    "{}",
                    what("get_bcopy")
                );
            }
            tg.assert_pattern(&what("get_bcopy (target unchanged)"), 3, 0, 0, 3);

            if caps.contains(Caps::GET_ZCOPY) && size <= attr.max_get_zcopy {
                tg.fill(4);
                let mut dst = vec![0u8; size];
                {
                    let (a, rest) = dst.split_at_mut(size / 2);
                    let (b, c) = rest.split_at_mut(1.min(rest.len()));
                    let mut iov: Vec<&mut [u8]> = vec![a, b, c];
                    f.send("get_zcopy", |i, ep| {
                        i.get_zcopy(ep, &mut iov, addr, &tg.rkey, 3)
                    });
                }
                f.flush_ep();
                assert_eq!(
                    pattern::check_mem(&dst, 4, pos),
                    None,
                    "{}",
                    what("get_zcopy")
                );
            }
        }
    }
}

/// Every RMA and atomic operation whose capability the interface lacks is refused with
/// `Unsupported` on a valid endpoint — with a key that works elsewhere (a stand-in when
/// the domain registers nothing), at a valid, aligned address — and writes, reads and
/// unpacks nothing. An interface with every capability asserts nothing here (the other
/// checks cover the operations).
pub fn rma_without_caps(f: &mut Fixture) {
    let t = f.transport;
    let caps = f.tx.attr().caps;
    if caps.contains(RMA_CAPS) {
        return;
    }
    let ep = f.ep;
    let mut tg = f.target(TargetKind::Alloc, 4096);
    tg.fill(8);
    let addr = tg.addr(64);
    let what = |op: &str| format!("{t:?} {:?}: {op}", tg.kind);
    let data = [0xabu8; 64];
    let i = &mut f.tx;
    if !caps.contains(Caps::PUT_SHORT) {
        for len in [1, 8, 64] {
            assert_eq!(
                i.put_short(ep, &data[..len], addr, &tg.rkey).err(),
                Some(Status::Unsupported),
                "{}",
                what(&format!("put_short of {len} B"))
            );
        }
    }
    if !caps.contains(Caps::PUT_BCOPY) {
        let r = i.put_bcopy(ep, |_| panic!("a refused put_bcopy packed"), addr, &tg.rkey);
        assert_eq!(r.err(), Some(Status::Unsupported), "{}", what("put_bcopy"));
    }
    if !caps.contains(Caps::PUT_ZCOPY) {
        let r = i.put_zcopy(ep, &[&data[..], &data[..7]], addr, &tg.rkey, 0);
        assert_eq!(r.err(), Some(Status::Unsupported), "{}", what("put_zcopy"));
    }
    if !caps.contains(Caps::GET_BCOPY) {
        let r = i.get_bcopy(ep, 16, addr, &tg.rkey, |_| panic!("unpacked"), 0);
        assert_eq!(r.err(), Some(Status::Unsupported), "{}", what("get_bcopy"));
    }
    if !caps.contains(Caps::GET_ZCOPY) {
        let mut d = [0u8; 16];
        let r = i.get_zcopy(ep, &mut [&mut d[..]], addr, &tg.rkey, 0);
        assert_eq!(r.err(), Some(Status::Unsupported), "{}", what("get_zcopy"));
        assert_eq!(d, [0; 16], "{}", what("get_zcopy wrote its buffer"));
    }
    for (size, cap) in [
        (AtomicSize::B32, Caps::ATOMIC32),
        (AtomicSize::B64, Caps::ATOMIC64),
    ] {
        if caps.contains(cap) {
            continue;
        }
        for op in ATOMIC_OPS {
            if !matches!(op, AtomicOp::Swap | AtomicOp::Cswap) {
                let r = i.atomic_post(ep, op, size, 1, addr, &tg.rkey);
                assert_eq!(
                    r.err(),
                    Some(Status::Unsupported),
                    "{}",
                    what(&format!("atomic_post {size:?} {op:?}"))
                );
            }
            let r = i.atomic_fetch(ep, op, size, 1, 0, addr, &tg.rkey, 0);
            assert_eq!(
                r.err(),
                Some(Status::Unsupported),
                "{}",
                what(&format!("atomic_fetch {size:?} {op:?}"))
            );
        }
    }
    tg.assert_pattern(&what("memory after refused operations"), 8, 0, 0, 8);
    // The endpoint is not disturbed by the refusals.
    f.expect_no_message("refused RMA operations");
}

/// The same memory can be registered more than once (UCX allows it, and MPI programs do
/// it, e.g. two windows over one buffer); each registration's key works until its own
/// handle is dropped.
/// A domain that registers nothing refuses every registration alike (`Unsupported`).
pub fn register_same_memory_twice(t: Transport) {
    let mut f = Fixture::new(t);
    let mut buf = vec![0u64; 512].into_boxed_slice();
    let p = buf.as_mut_ptr().cast::<u8>();
    if !f.md.registers() {
        for n in ["first", "second"] {
            assert_eq!(
                // SAFETY: `p` names the 4096 bytes of `buf`; refused anyway.
                unsafe { f.md.mem_reg(p, 4096) }.err(),
                Some(Status::Unsupported),
                "{t:?}: {n} mem_reg of a domain without keys"
            );
        }
        assert_eq!(
            f.md.mem_alloc(4096).err(),
            Some(Status::Unsupported),
            "{t:?}: mem_alloc of a domain without keys"
        );
        return;
    }
    // SAFETY: `p` names the 4096 bytes of `buf`, which outlives the handle.
    let h1 = unsafe { f.md.mem_reg(p, 4096) }.expect("first mem_reg");
    // SAFETY: as for h1.
    let h2 = unsafe { f.md.mem_reg(p, 4096) }
        .unwrap_or_else(|e| panic!("{t:?}: registering the same buffer again failed: {e}"));
    let k2 = h2.pack_rkey();
    drop(h1);
    let rkey =
        f.md.rkey_unpack(&k2)
            .expect("the second registration's key after the first was dropped");
    let addr = p as u64;
    if f.tx.attr().caps.contains(Caps::PUT_SHORT) {
        f.send("put_short", |i, ep| {
            i.put_short(ep, b"twice", addr + 8, &rkey)
        });
        f.flush_ep();
        // SAFETY: `buf` is 4096 bytes and alive; the put above has completed.
        let got = unsafe { std::slice::from_raw_parts(p.add(8), 5) };
        assert_eq!(got, b"twice");
    } else {
        assert_eq!(rkey.range(), (addr, 4096), "{t:?}: the second key's range");
    }
    drop(h2);
}

// ---------------------------------------------------------------------------------------
// Atomics

/// What an atomic leaves in memory (truncated to the width).
pub fn atomic_result(op: AtomicOp, size: AtomicSize, old: u64, value: u64, compare: u64) -> u64 {
    let mask = match size {
        AtomicSize::B32 => u64::from(u32::MAX),
        AtomicSize::B64 => u64::MAX,
    };
    let (old, value, compare) = (old & mask, value & mask, compare & mask);
    let new = match op {
        AtomicOp::Add => old.wrapping_add(value),
        AtomicOp::And => old & value,
        AtomicOp::Or => old | value,
        AtomicOp::Xor => old ^ value,
        AtomicOp::Swap => value,
        AtomicOp::Cswap if old == compare => value,
        AtomicOp::Cswap => old,
    };
    new & mask
}

/// Every atomic operation.
pub const ATOMIC_OPS: [AtomicOp; 6] = [
    AtomicOp::Add,
    AtomicOp::And,
    AtomicOp::Or,
    AtomicOp::Xor,
    AtomicOp::Swap,
    AtomicOp::Cswap,
];

/// Each atomic operation at each width, posted and fetched, matches [`atomic_result`],
/// returns the old value (zero-extended for 32 bits), ignores operand bits above the
/// width and touches no other byte; on a key without direct access (CMA) every atomic is
/// an error and changes nothing; without ATOMIC32/ATOMIC64 every atomic of that width is
/// `Unsupported` and changes nothing.
pub fn atomics(t: Transport) {
    let mut f = Fixture::new(t);
    let caps = f.tx.attr().caps;
    let cases: [(u64, u64, u64); 6] = [
        (5, 7, 0),
        (u64::MAX - 1, 3, 0),
        (
            0xf0f0_f0f0_f0f0_f0f0,
            0xff00_ff00_ff00_ff00,
            0xf0f0_f0f0_f0f0_f0f0,
        ),
        (
            0x1234_5678_9abc_def0,
            0xdead_beef_0bad_f00d,
            0x1234_5678_9abc_def0,
        ),
        (
            0x8000_0000_ffff_ffff,
            0x0000_0001_8000_0001,
            0x0000_0000_ffff_ffff,
        ),
        (0, u64::MAX, 1),
    ];
    for mut tg in f.targets(256) {
        let kind = tg.kind;
        let direct = tg.rkey.is_direct();
        for size in [AtomicSize::B32, AtomicSize::B64] {
            let has = caps.contains(match size {
                AtomicSize::B32 => Caps::ATOMIC32,
                AtomicSize::B64 => Caps::ATOMIC64,
            });
            // A 32-bit word that is not 8-byte aligned, a 64-bit word that is.
            let off = match size {
                AtomicSize::B32 => 68,
                AtomicSize::B64 => 128,
            };
            let addr = tg.addr(off);
            for op in ATOMIC_OPS {
                for (k, &(init, value, compare)) in cases.iter().enumerate() {
                    for fetch in [false, true] {
                        let what = format!(
                            "{t:?} {kind:?} {size:?} {op:?} case {k} ({})",
                            if fetch { "fetch" } else { "post" }
                        );
                        tg.fill(9);
                        tg.set_word(off, size, init);
                        let old = tg.word(off, size);
                        let r = if fetch {
                            f.tx.atomic_fetch(f.ep, op, size, value, compare, addr, &tg.rkey, 0)
                        } else {
                            f.tx.atomic_post(f.ep, op, size, value, addr, &tg.rkey)
                                .map(|o| match o {
                                    Outcome::Done(()) => Outcome::Done(old),
                                    Outcome::InProgress => Outcome::InProgress,
                                    Outcome::NoResource => Outcome::NoResource,
                                })
                        };
                        let post_only = !fetch && matches!(op, AtomicOp::Swap | AtomicOp::Cswap);
                        if !has && !post_only {
                            assert_eq!(
                                r.err(),
                                Some(Status::Unsupported),
                                "{what}: without the capability"
                            );
                            assert_eq!(tg.word(off, size), old, "{what}: refused op wrote");
                        } else if post_only || !direct || !has {
                            assert!(r.is_err(), "{what}: must be an error, got {r:?}");
                            assert_eq!(tg.word(off, size), old, "{what}: failed op wrote");
                        } else {
                            let got = match r {
                                Ok(Outcome::Done(v)) => v,
                                Ok(Outcome::InProgress) => {
                                    f.flush_ep();
                                    old
                                }
                                other => panic!("{what}: {other:?}"),
                            };
                            assert_eq!(got, old, "{what}: fetched value");
                            let new = atomic_result(op, size, old, value, compare);
                            assert_eq!(tg.word(off, size), new, "{what}: memory");
                        }
                        // Every byte except the word keeps the fill pattern.
                        let b = tg.bytes();
                        let n = size.bytes();
                        let p0 = tg.pos(0);
                        assert_eq!(
                            pattern::check_mem(&b[..off], 9, p0),
                            None,
                            "{what}: bytes before"
                        );
                        assert_eq!(
                            pattern::check_mem(&b[off + n..], 9, p0 + (off + n) as u64),
                            None,
                            "{what}: bytes after"
                        );
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Flush, fence, pending

/// ep_flush and iface flush complete, fence orders two overlapping puts (without
/// PUT_ZCOPY: both are `Unsupported` and write nothing) and two active messages, and
/// flushing a destroyed endpoint is an error.
pub fn flush_fence(t: Transport) {
    let mut f = Fixture::new(t);
    let mut tg = f.target(TargetKind::Alloc, 4096);
    tg.fill(0);
    let a = pattern::mem_vec(4096, 1, tg.pos(0));
    let b = pattern::mem_vec(100, 2, tg.pos(50));
    let (addr_a, addr_b) = (tg.addr(0), tg.addr(50));
    if f.tx.attr().caps.contains(Caps::PUT_ZCOPY) {
        f.send("put_zcopy", |i, ep| {
            i.put_zcopy(ep, &[&a], addr_a, &tg.rkey, 0)
        });
        f.tx.fence().expect("fence");
        f.send("put_zcopy", |i, ep| {
            i.put_zcopy(ep, &[&b], addr_b, &tg.rkey, 0)
        });
    } else {
        let ep = f.ep;
        assert_eq!(
            f.tx.put_zcopy(ep, &[&a], addr_a, &tg.rkey, 0).err(),
            Some(Status::Unsupported),
            "{t:?}: put_zcopy without PUT_ZCOPY"
        );
        f.tx.fence().expect("fence");
        assert_eq!(
            f.tx.put_zcopy(ep, &[&b], addr_b, &tg.rkey, 0).err(),
            Some(Status::Unsupported),
            "{t:?}: put_zcopy without PUT_ZCOPY after a fence"
        );
    }
    f.flush_ep();
    let start = Instant::now();
    while !f.tx.flush(0).expect("iface flush").is_done() {
        f.progress();
        assert!(start.elapsed() < WAIT, "iface flush never completed");
    }
    if connection_based(t) && f.tx.attr().caps.contains(Caps::PUT_ZCOPY) {
        // Flushed means sent; the puts land in order once the peer read them.
        f.settle(|| tg.has_pattern(50, 100, 2) && tg.has_pattern(150, 4096 - 150, 1));
    }
    let bytes = tg.bytes();
    if f.tx.attr().caps.contains(Caps::PUT_ZCOPY) {
        assert_eq!(
            pattern::check_mem(&bytes[..50], 1, tg.pos(0)),
            None,
            "{t:?}: first put"
        );
        assert_eq!(
            pattern::check_mem(&bytes[50..150], 2, tg.pos(50)),
            None,
            "{t:?}: fenced put"
        );
        assert_eq!(
            pattern::check_mem(&bytes[150..], 1, tg.pos(150)),
            None,
            "{t:?}: first put tail"
        );
    } else {
        tg.assert_pattern(&format!("{t:?}: memory after refused puts"), 0, 0, 0, 0);
    }

    // Active messages sent before a flush have arrived once it completes and the
    // receiver progresses.
    f.send("am_short", |i, ep| i.am_short(ep, 2, 1, b"before flush"));
    f.flush_ep();
    assert_eq!(f.expect_messages(1)[0].1[8..], *b"before flush");

    // A fence between two active messages (of different flavours) keeps their order, and
    // the interface flush covers them.
    f.send("am_bcopy", |i, ep| {
        i.am_bcopy(ep, 3, |b| {
            b[..6].copy_from_slice(b"before");
            6
        })
    });
    f.tx.fence().expect("fence");
    f.send("am_short", |i, ep| i.am_short(ep, 3, 2, b"after"));
    let start = Instant::now();
    while !f.tx.flush(0).expect("iface flush").is_done() {
        f.progress();
        assert!(start.elapsed() < WAIT, "iface flush never completed");
    }
    let got = f.expect_messages(2);
    assert_eq!(got[0].1, b"before", "{t:?}: message before the fence");
    assert_eq!(got[1].1[8..], *b"after", "{t:?}: message after the fence");

    let ep = f.ep;
    f.tx.ep_destroy(ep).expect("ep_destroy");
    assert!(
        f.tx.ep_flush(ep, 0).is_err(),
        "{t:?}: flush of a destroyed ep"
    );
    // A destroyed endpoint does not hold the interface flush.
    let start = Instant::now();
    while !f.tx.flush(0).expect("iface flush").is_done() {
        f.progress();
        assert!(start.elapsed() < WAIT, "iface flush never completed");
    }
}

/// The pending contract: `pending_add` says `Busy` while the endpoint has resources; once
/// an operation got `NoResource` a queued callback is accepted, the endpoint keeps its
/// order (direct sends and flush say `NoResource` while it is queued), the callback runs
/// from progress, can send once the receiver drained, and every message arrives once, in
/// order. Destroying an endpoint drops its queued callbacks without calling them (and,
/// over tcp, what it had not handed to the kernel: the receiver gets an intact prefix of
/// the messages, loses at most one send buffer of them, and sees the peer close).
pub fn pending(t: Transport) {
    let mut cfg = suite_config();
    cfg.fifo.fifo_size = 4;
    let mut f = Fixture::with_config(t, &cfg);
    let ep = f.ep;
    assert_eq!(
        f.tx.pending_add(ep, Box::new(|_: &mut Iface, _| PendingResult::Done))
            .err(),
        Some(Status::Busy),
        "{t:?}: pending_add with resources available"
    );
    // Fill the path without progressing the receiver.
    let mut sent = 0u64;
    loop {
        match f
            .tx
            .am_short(ep, 4, sent, &sent.to_le_bytes())
            .expect("am_short")
        {
            Outcome::Done(()) => sent += 1,
            Outcome::NoResource => break,
            Outcome::InProgress => sent += 1,
        }
        if sent == 100_000 {
            // Never runs out of resources (self): nothing can be queued.
            assert_eq!(
                f.tx.pending_add(ep, Box::new(|_: &mut Iface, _| PendingResult::Done))
                    .err(),
                Some(Status::Busy)
            );
            let got = f.expect_messages(sent as usize);
            for (k, (_, d)) in got.iter().enumerate() {
                assert_eq!(d[..8], (k as u64).to_ne_bytes());
            }
            return;
        }
    }
    if f.rx.is_some() {
        sent = saturate(&mut f, sent, |i, ep, n| {
            i.am_short(ep, 4, n, &n.to_le_bytes())
        });
    }
    let total = sent + 50;
    let next = Arc::new(Mutex::new(sent));
    let calls = Arc::new(Mutex::new(0u32));
    let (n2, c2) = (next.clone(), calls.clone());
    f.tx.pending_add(
        ep,
        Box::new(move |i: &mut Iface, ep| {
            *c2.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            let mut n = n2.lock().unwrap_or_else(|p| p.into_inner());
            while *n < total {
                match i.am_short(ep, 4, *n, &n.to_le_bytes()) {
                    Ok(Outcome::Done(())) | Ok(Outcome::InProgress) => *n += 1,
                    Ok(Outcome::NoResource) => return PendingResult::Again,
                    Err(e) => panic!("am_short from a pending callback: {e}"),
                }
            }
            PendingResult::Done
        }),
    )
    .expect("pending_add after NoResource");
    assert_eq!(
        f.tx.am_short(ep, 4, 999, &[]).expect("am_short"),
        Outcome::NoResource,
        "{t:?}: a send must queue behind the endpoint's pending callbacks"
    );
    assert_eq!(
        f.tx.ep_flush(ep, 0).expect("ep_flush"),
        Outcome::NoResource,
        "{t:?}: flush with pending"
    );
    if f.rx.is_some() {
        // Progressing only the sender (when it is not also the receiver): the callback
        // may run but cannot send.
        for _ in 0..10 {
            f.tx.progress();
        }
        assert_eq!(
            *next.lock().unwrap_or_else(|p| p.into_inner()),
            sent,
            "{t:?}: sent into a full path"
        );
    }
    let got = f.expect_messages(total as usize);
    for (k, (id, d)) in got.iter().enumerate() {
        assert_eq!(*id, 4);
        assert_eq!(
            d[..8],
            (k as u64).to_ne_bytes(),
            "{t:?}: order of message {k}"
        );
        assert_eq!(d[8..], (k as u64).to_le_bytes());
    }
    assert!(*calls.lock().unwrap_or_else(|p| p.into_inner()) >= 1);
    f.flush_ep();

    // Purge on destroy: fill again, queue a callback, destroy the endpoint.
    let mut k = 0;
    while f.tx.am_short(ep, 4, k, &[]).expect("am_short").is_done() {
        k += 1;
        assert!(k < FILL_MAX, "{t:?}: never ran out of resources");
    }
    let flushed = f.tx.ep_is_flushed(ep).expect("ep_is_flushed");
    let ran = Arc::new(Mutex::new(false));
    let r2 = ran.clone();
    f.tx.pending_add(
        ep,
        Box::new(move |_: &mut Iface, _| {
            *r2.lock().unwrap_or_else(|p| p.into_inner()) = true;
            PendingResult::Done
        }),
    )
    .expect("pending_add");
    f.tx.ep_destroy(ep).expect("ep_destroy");
    if flushed {
        let got = f.expect_messages(k as usize);
        for (j, (_, d)) in got.iter().enumerate() {
            assert_eq!(
                d[..],
                (j as u64).to_ne_bytes(),
                "{t:?}: message {j} after destroy"
            );
        }
    } else {
        // The endpoint had not handed everything on (tcp: to the kernel): that part may
        // be gone; what arrives is an intact prefix, in order.
        let start = Instant::now();
        if connection_based(t) {
            // All that will arrive has arrived when the connection's close is seen.
            let peer = f.tx.address();
            loop {
                f.progress();
                let ev = f.rx().take_events();
                if ev.contains(&uct::IfaceEvent::PeerClosed(peer.clone())) {
                    break;
                }
                assert!(ev.is_empty(), "{t:?}: unexpected events {ev:?}");
                assert!(
                    start.elapsed() < WAIT,
                    "{t:?}: the receiver never saw the destroyed endpoint's connection close"
                );
            }
        } else {
            // No close to wait for: progress until nothing arrived for 200 ms.
            let mut last = (Instant::now(), f.inbox_len());
            while last.0.elapsed() < Duration::from_millis(200) {
                f.progress();
                if f.inbox_len() != last.1 {
                    last = (Instant::now(), f.inbox_len());
                }
                assert!(start.elapsed() < WAIT, "{t:?}: messages after destroy");
            }
        }
        let got: Vec<_> = f
            .inbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        assert!(
            got.len() as u64 <= k,
            "{t:?}: {} of {k} messages arrived after destroy",
            got.len()
        );
        if t == Transport::Tcp {
            let frame = 16; // frame header + am_short header, no payload
            let lost = k - got.len() as u64;
            assert!(
                lost <= (cfg.tcp.tx_buf / frame) as u64 + 1,
                "{t:?}: {lost} of {k} messages lost by destroy (at most a send buffer may be)"
            );
        }
        for (j, (id, d)) in got.iter().enumerate() {
            assert_eq!(*id, 4);
            assert_eq!(
                d[..],
                (j as u64).to_ne_bytes(),
                "{t:?}: message {j} after destroy"
            );
        }
    }
    for _ in 0..10 {
        f.progress();
    }
    assert!(
        !*ran.lock().unwrap_or_else(|p| p.into_inner()),
        "{t:?}: callback of a destroyed ep ran"
    );
}

/// Bound on the messages a fill loop sends before it must see `NoResource`: over tcp the
/// kernel's socket buffers (megabytes) take 16-byte messages by the hundred thousand.
const FILL_MAX: u64 = 4_000_000;

/// Goes on sending with `send(iface, ep, n)` while only the sender progresses, until
/// `NoResource` held for a while (20 tries, 1 ms apart): over tcp, progressing the sender
/// hands its send buffer to the kernel, which takes more until the receiver's socket
/// buffer is full as well. Returns the new count of messages sent.
fn saturate(
    f: &mut Fixture,
    mut sent: u64,
    mut send: impl FnMut(&mut Iface, EpId, u64) -> ucs::Result<Outcome>,
) -> u64 {
    let t = f.transport;
    let start = Instant::now();
    let mut quiet = 0;
    while quiet < 20 {
        f.tx.progress();
        match send(&mut f.tx, f.ep, sent).expect("send while saturating") {
            Outcome::NoResource => {
                quiet += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            _ => {
                sent += 1;
                quiet = 0;
            }
        }
        assert!(
            start.elapsed() < WAIT && sent < FILL_MAX,
            "{t:?}: a stopped receiver never stopped the sender ({sent} messages)"
        );
    }
    sent
}

/// With EVENT_RECV, arming and waiting work: nothing to wait for times out (false), a
/// message makes the descriptor readable, and arming with a message queued says Busy.
/// Without it, waiting is harmless.
///
/// A connection-based transport's descriptor is a level-triggered epoll set: a connection
/// waiting to be accepted makes it readable too (checked first, then the connection is
/// set up), and arming has nothing to do — with a message queued it says Ok, and the
/// descriptor stays readable until the message was received, so a sleeper cannot miss it.
pub fn wakeup(t: Transport) {
    let mut f = Fixture::new(t);
    let event = f.rx().attr().caps.contains(Caps::EVENT_RECV);
    if !event {
        assert!(f.rx().event_fd().is_none() || f.rx().arm().is_ok());
        let _ = f.rx().wait(0).expect("wait");
        return;
    }
    assert!(
        f.rx().event_fd().is_some(),
        "{t:?}: EVENT_RECV without an event fd"
    );
    let level = connection_based(t);
    if level {
        // The fixture's endpoint connects (at once, or — tcp, from the interface with the
        // larger address — after waiting a moment for the peer to connect first, which
        // takes the sender's progress): the connection waiting to be accepted wakes the
        // receiver.
        let start = Instant::now();
        loop {
            f.tx.progress();
            if f.rx().wait(10).expect("wait") {
                break;
            }
            assert!(
                start.elapsed() < WAIT,
                "{t:?}: not woken by a new connection"
            );
        }
        f.connect();
    }
    assert!(
        !f.rx().wait(0).expect("wait"),
        "{t:?}: woke with nothing sent"
    );
    f.send("am_short", |i, ep| i.am_short(ep, 1, 5, b"wake"));
    assert!(
        f.rx().wait(10_000).expect("wait"),
        "{t:?}: not woken by a message"
    );
    if level {
        assert_eq!(f.rx().arm(), Ok(()), "{t:?}: arm of a level-triggered set");
        assert!(
            f.rx().wait(0).expect("wait"),
            "{t:?}: armed with a message queued, the descriptor must stay readable"
        );
    } else {
        assert_eq!(
            f.rx().arm().err(),
            Some(Status::Busy),
            "{t:?}: arm with a message queued"
        );
    }
    assert_eq!(f.expect_messages(1)[0].1[8..], *b"wake");
    assert!(f.rx().arm().is_ok(), "{t:?}: arm after draining");
    if level {
        assert!(
            !f.rx().wait(0).expect("wait"),
            "{t:?}: still readable after draining"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Invalid input

/// A destroyed (or never created) endpoint id is an error for every operation, and
/// nothing is delivered or written.
pub fn bad_endpoint(t: Transport) {
    let mut f = Fixture::new(t);
    let mut tg = f.target(TargetKind::Alloc, 64);
    tg.fill(7);
    let addr = f.rx.as_ref().map_or_else(|| f.tx.address(), Iface::address);
    let dead = f.tx.ep_create(&addr).expect("ep_create");
    f.tx.ep_destroy(dead).expect("ep_destroy");
    let a = tg.addr(0);
    for ep in [dead, EpId(u32::MAX), EpId(1000)] {
        let i = &mut f.tx;
        let what = |op: &str| format!("{t:?}: {op} on bad {ep:?}");
        assert!(i.am_short(ep, 1, 0, b"x").is_err(), "{}", what("am_short"));
        assert!(i.am_bcopy(ep, 1, |_| 0).is_err(), "{}", what("am_bcopy"));
        assert!(
            i.am_zcopy(ep, 1, b"h", &[&b"x"[..]], 0).is_err(),
            "{}",
            what("am_zcopy")
        );
        assert!(
            i.put_short(ep, b"abc", a, &tg.rkey).is_err(),
            "{}",
            what("put_short")
        );
        assert!(
            i.put_bcopy(
                ep,
                |b| {
                    b[0] = 1;
                    1
                },
                a,
                &tg.rkey
            )
            .is_err(),
            "{}",
            what("put_bcopy")
        );
        assert!(
            i.put_zcopy(ep, &[&b"abc"[..]], a, &tg.rkey, 0).is_err(),
            "{}",
            what("put_zcopy")
        );
        assert!(
            i.get_bcopy(ep, 4, a, &tg.rkey, |_| panic!("unpacked"), 0)
                .is_err(),
            "{}",
            what("get_bcopy")
        );
        let mut d = [0u8; 4];
        assert!(
            i.get_zcopy(ep, &mut [&mut d[..]], a, &tg.rkey, 0).is_err(),
            "{}",
            what("get_zcopy")
        );
        assert!(
            i.atomic_post(ep, AtomicOp::Add, AtomicSize::B64, 1, a, &tg.rkey)
                .is_err(),
            "{}",
            what("atomic_post")
        );
        assert!(
            i.atomic_fetch(ep, AtomicOp::Swap, AtomicSize::B32, 1, 0, a, &tg.rkey, 0)
                .is_err(),
            "{}",
            what("atomic_fetch")
        );
        assert!(i.ep_flush(ep, 0).is_err(), "{}", what("ep_flush"));
        assert!(
            i.pending_add(ep, Box::new(|_: &mut Iface, _| PendingResult::Done))
                .is_err(),
            "{}",
            what("pending_add")
        );
        assert!(i.ep_destroy(ep).is_err(), "{}", what("ep_destroy"));
    }
    tg.assert_pattern(&format!("{t:?}: memory after bad-ep ops"), 7, 0, 0, 7);
    f.expect_no_message("operations on a bad endpoint");
}

/// A packer that panics (a bug in the caller's code, caught further up) does not wedge
/// the endpoint: later messages on it are still delivered, and nothing half-packed is.
pub fn panicking_packer(t: Transport) {
    let mut f = Fixture::new(t);
    let ep = f.ep;
    f.send("am_short", |i, ep| i.am_short(ep, 1, 1, b"first"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = f.tx.am_bcopy(ep, 1, |b| {
            b[..4].copy_from_slice(b"half");
            panic!("packer bug (expected by the test)")
        });
    }));
    assert!(r.is_err(), "the packer's panic must reach the caller");
    f.send("am_short", |i, ep| i.am_short(ep, 1, 3, b"after"));
    // am_bcopy itself still works, with a buffer of the full size.
    let max = f.tx.attr().max_am_bcopy;
    f.send("am_bcopy after a panicking packer", |i, ep| {
        i.am_bcopy(ep, 1, |b| {
            assert!(
                b.len() >= max,
                "packer got {} bytes, limit is {max}",
                b.len()
            );
            b[..8].copy_from_slice(&0u64.to_ne_bytes());
            b[8..13].copy_from_slice(b"bcopy");
            13
        })
    });
    let start = Instant::now();
    while f.inbox_len() < 3 {
        if f.progress() == 0 {
            std::thread::yield_now();
        }
        if start.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let got: Vec<_> = f
        .inbox
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .map(|(_, d)| d[8..].to_vec())
        .collect();
    assert_eq!(
        got,
        vec![b"first".to_vec(), b"after".to_vec(), b"bcopy".to_vec()],
        "{t:?}: messages around a send whose packer panicked"
    );
}

/// Active-message ids of 32 and above are refused by every send and by the handler
/// table.
pub fn bad_am_id(t: Transport) {
    let mut f = Fixture::new(t);
    let ep = f.ep;
    for id in [AM_ID_MAX, AM_ID_MAX + 1, 200, u8::MAX] {
        let i = &mut f.tx;
        assert_eq!(
            i.am_short(ep, id, 0, b"x").err(),
            Some(Status::InvalidParam),
            "{t:?}: am_short id {id}"
        );
        assert_eq!(
            i.am_bcopy(ep, id, |_| 1).err(),
            Some(Status::InvalidParam),
            "{t:?}: am_bcopy id {id}"
        );
        assert_eq!(
            i.am_zcopy(ep, id, b"", &[&b"x"[..]], 0).err(),
            Some(Status::InvalidParam),
            "{t:?}: am_zcopy id {id}"
        );
        assert!(
            i.set_am_handler(id, Box::new(|_: &[u8]| {})).is_err(),
            "{t:?}: handler id {id}"
        );
        assert!(
            i.clear_am_handler(id).is_err(),
            "{t:?}: clear handler id {id}"
        );
    }
    f.expect_no_message("sends with bad ids");
    // The endpoint still works.
    f.send("am_short", |i, ep| i.am_short(ep, 31, 1, b"ok"));
    assert_eq!(f.expect_messages(1)[0].0, 31);
}

/// Payloads over the limits are refused and deliver or write nothing.
pub fn oversize(t: Transport) {
    let mut f = Fixture::new(t);
    let a = f.tx.attr().clone();
    let ep = f.ep;
    let big = vec![0x5au8; a.max_am_short.max(a.max_am_zcopy).max(a.max_put_short) + 2];
    assert_eq!(
        f.tx.am_short(ep, 1, 0, &big[..a.max_am_short + 1]).err(),
        Some(Status::InvalidParam),
        "{t:?}: am_short of max_am_short + 1"
    );
    assert_eq!(
        f.tx.am_zcopy(ep, 1, &[], &[&big[..a.max_am_zcopy + 1]], 0)
            .err(),
        Some(Status::InvalidParam),
        "{t:?}: am_zcopy of max_am_zcopy + 1"
    );
    if a.max_am_hdr < a.max_am_zcopy {
        assert_eq!(
            f.tx.am_zcopy(ep, 1, &big[..a.max_am_hdr + 1], &[], 0).err(),
            Some(Status::InvalidParam),
            "{t:?}: am_zcopy header of max_am_hdr + 1"
        );
    }
    f.expect_no_message("oversize am_short/am_zcopy");
    let r = f.tx.am_bcopy(ep, 1, |b| b.len() + 1);
    assert_eq!(
        r.err(),
        Some(Status::InvalidParam),
        "{t:?}: am_bcopy packing more than its buffer"
    );
    f.expect_no_message("an am_bcopy whose packer overflowed");

    let mut tg = f.target(
        TargetKind::Alloc,
        3 * a.max_put_bcopy.max(a.max_put_short + 1),
    );
    tg.fill(3);
    let addr = tg.addr(0);
    let r =
        f.tx.put_short(ep, &big[..a.max_put_short + 1], addr, &tg.rkey);
    if a.caps.contains(Caps::PUT_SHORT) {
        assert_eq!(
            r.err(),
            Some(Status::InvalidParam),
            "{t:?}: put_short of max_put_short + 1"
        );
    } else {
        assert_refused(a.caps, Caps::PUT_SHORT, r, &format!("{t:?}: put_short"));
    }
    let r = f.tx.put_bcopy(ep, |b| b.len() + 1, addr, &tg.rkey);
    assert_refused(
        a.caps,
        Caps::PUT_BCOPY,
        r,
        &format!("{t:?}: put_bcopy packing more than its buffer"),
    );
    let r = f.tx.get_bcopy(
        ep,
        a.max_get_bcopy + 1,
        addr,
        &tg.rkey,
        |_| panic!("unpacked"),
        0,
    );
    assert_refused(
        a.caps,
        Caps::GET_BCOPY,
        r,
        &format!("{t:?}: get_bcopy of max_get_bcopy + 1"),
    );
    tg.assert_pattern(&format!("{t:?}: memory after oversize puts"), 3, 0, 0, 3);
}

/// Accesses outside a key's range (before it, past its end, wrapping around the address
/// space) are errors and change no byte, also in the memory around a registration
/// (`Unsupported` for operations without their capability).
pub fn out_of_range(t: Transport) {
    let mut f = Fixture::new(t);
    let ep = f.ep;
    let caps = f.tx.attr().caps;
    for mut tg in f.targets(1000) {
        let kind = tg.kind;
        tg.fill(5);
        let base = tg.addr(0);
        let end = tg.addr(1000);
        let cases: [(u64, usize); 6] = [
            (end, 1),
            (end - 1, 2),
            (end - 4, 8),
            (base - 1, 1),
            (base - 8, 16),
            (u64::MAX - 3, 8),
        ];
        for (addr, len) in cases {
            let what = |op: &str| {
                format!("{t:?} {kind:?}: {op} of {len} B at {addr:#x} (key {base:#x}+1000)")
            };
            let data = vec![0xeeu8; len];
            let i = &mut f.tx;
            let r = i.put_short(ep, &data, addr, &tg.rkey);
            assert_refused(caps, Caps::PUT_SHORT, r, &what("put_short"));
            // A packer writes its data when the buffer it gets can hold it, and otherwise
            // claims the length it needed (which the transport must refuse).
            let r = i.put_bcopy(
                ep,
                |b| {
                    if let Some(dst) = b.get_mut(..len) {
                        dst.fill(0xee);
                    }
                    len
                },
                addr,
                &tg.rkey,
            );
            assert_refused(caps, Caps::PUT_BCOPY, r, &what("put_bcopy"));
            let r = i.put_zcopy(ep, &[&data], addr, &tg.rkey, 0);
            assert_refused(caps, Caps::PUT_ZCOPY, r, &what("put_zcopy"));
            let r = i.get_bcopy(ep, len, addr, &tg.rkey, |_| panic!("unpacked"), 0);
            assert_refused(caps, Caps::GET_BCOPY, r, &what("get_bcopy"));
            let mut d = vec![0u8; len];
            let r = i.get_zcopy(ep, &mut [&mut d[..]], addr, &tg.rkey, 0);
            assert_refused(caps, Caps::GET_ZCOPY, r, &what("get_zcopy"));
            if addr % 8 == 0 {
                for op in [AtomicOp::Add, AtomicOp::Xor] {
                    let r = i.atomic_post(ep, op, AtomicSize::B64, 1, addr, &tg.rkey);
                    assert_refused(caps, Caps::ATOMIC64, r, &what("atomic_post"));
                    let r = i.atomic_fetch(ep, op, AtomicSize::B64, 1, 0, addr, &tg.rkey, 0);
                    assert_refused(caps, Caps::ATOMIC64, r, &what("atomic_fetch"));
                }
            }
            tg.assert_pattern(&what("memory after"), 5, 0, 0, 5);
        }
        // A zero-length access at the very end is inside the key (no panic, whatever the
        // result; without PUT_ZCOPY still Unsupported).
        let r = f.tx.put_zcopy(ep, &[], end, &tg.rkey, 0);
        if !caps.contains(Caps::PUT_ZCOPY) {
            assert_eq!(r.err(), Some(Status::Unsupported), "{t:?}: empty put_zcopy");
        }
    }
}

/// Misaligned atomics are errors and change nothing (`Unsupported` without the width's
/// capability).
pub fn misaligned_atomic(t: Transport) {
    let mut f = Fixture::new(t);
    let ep = f.ep;
    let caps = f.tx.attr().caps;
    for mut tg in f.targets(64) {
        let kind = tg.kind;
        tg.fill(6);
        for size in [AtomicSize::B32, AtomicSize::B64] {
            let cap = match size {
                AtomicSize::B32 => Caps::ATOMIC32,
                AtomicSize::B64 => Caps::ATOMIC64,
            };
            for skew in 1..size.bytes() {
                let addr = tg.addr(16 + skew);
                for op in ATOMIC_OPS {
                    let what = format!("{t:?} {kind:?} {size:?} {op:?} at +{skew}");
                    if !matches!(op, AtomicOp::Swap | AtomicOp::Cswap) {
                        let r = f.tx.atomic_post(ep, op, size, !0, addr, &tg.rkey);
                        assert_refused(caps, cap, r, &format!("{what} post"));
                    }
                    let r = f.tx.atomic_fetch(ep, op, size, !0, 0, addr, &tg.rkey, 0);
                    assert_refused(caps, cap, r, &format!("{what} fetch"));
                }
            }
        }
        tg.assert_pattern(
            &format!("{t:?} {kind:?}: memory after misaligned atomics"),
            6,
            0,
            0,
            6,
        );
    }
}

/// Corrupted packed keys are refused, forged ones do not reach memory that was never
/// registered, and no byte string makes unpacking panic.
///
/// A domain without keys (`!supports_rkeys()`) packs none: it refuses to allocate and
/// register, and the keys it must refuse when corrupted come from the shm domain.
pub fn corrupted_rkey(t: Transport) {
    let f = Fixture::new(t);
    let other = Md::open(t);
    let mut buf = vec![0u8; 4096];
    let maker = if f.md.supports_rkeys() {
        None
    } else {
        assert_eq!(
            f.md.mem_alloc(4096).err(),
            Some(Status::Unsupported),
            "{t:?}: mem_alloc of a domain without keys"
        );
        if !f.md.registers() {
            assert_eq!(
                // SAFETY: 4096 bytes of `buf`; refused anyway.
                unsafe { f.md.mem_reg(buf.as_mut_ptr(), 4096) }.err(),
                Some(Status::Unsupported),
                "{t:?}: mem_reg of a domain without keys"
            );
        }
        Some(Md::open(Transport::Shm))
    };
    let src = maker.as_ref().unwrap_or(&f.md);
    let alloc = src.mem_alloc(4096).expect("mem_alloc");
    // SAFETY: 4096 bytes of `buf`, which outlives the handle.
    let reg = unsafe { src.mem_reg(buf.as_mut_ptr(), 4096) }.expect("mem_reg");
    for (name, h) in [("alloc", &alloc), ("reg", &reg)] {
        let good = h.pack_rkey();
        for md in [&f.md, &other] {
            let _ = md.rkey_unpack(&good);
        }
        let bad = |b: &[u8], why: &str| {
            assert!(f.md.rkey_unpack(b).is_err(), "{t:?} {name}: {why} unpacked");
            assert!(
                other.rkey_unpack(b).is_err(),
                "{t:?} {name}: {why} unpacked by another md"
            );
        };
        bad(&[], "an empty key");
        for n in 1..good.len() {
            bad(&good[..n], &format!("a key truncated to {n} bytes"));
        }
        let mut long = good.clone();
        long.push(0);
        bad(&long, "a key with a trailing byte");
        for (h, why) in [
            (good[0] ^ 0xf0, "a wrong version"),
            (good[0] & 0xf8, "kind 0"),
            (good[0] | 0x07, "kind 7"),
        ] {
            let mut k = good.clone();
            k[0] = h;
            bad(&k, why);
        }
        let key = PackedRkey::decode(&good).expect("a key this domain packed decodes");
        // A length that wraps the address space.
        let mut k = key;
        k.len = u64::MAX - k.base + 1;
        let mut w = uct::wire::Writer::default();
        w.u8(good[0]);
        if let Some(p) = k.pid {
            w.varint(u64::from(p));
        }
        w.varint(if k.kind == RkeyKind::Segment {
            k.base / 4096
        } else {
            k.base
        })
        .varint(k.len)
        .varint(k.id);
        if k.kind == RkeyKind::Segment {
            w.varint(u64::from(k.fd));
        }
        bad(&w.buf, "a wrapping length");
        if key.kind == RkeyKind::Segment {
            // Segment keys: the descriptor's name (the registration id) and the length
            // are checked on attach.
            for (k, why) in [
                (
                    PackedRkey {
                        id: key.id + 1,
                        ..key
                    },
                    "another registration id",
                ),
                (PackedRkey { fd: 100_000, ..key }, "a wrong descriptor"),
                (
                    PackedRkey {
                        len: 1 << 30,
                        ..key
                    },
                    "a key longer than its segment",
                ),
            ] {
                assert!(
                    other.rkey_unpack(&k.encode()).is_err(),
                    "{t:?} {name}: {why} unpacked"
                );
            }
        }
        // Every single-byte change and random bytes: no panic, whatever the result.
        for at in 0..good.len() {
            for x in [1u8, 0x80, 0xff] {
                let mut k = good.clone();
                k[at] ^= x;
                let _ = f.md.rkey_unpack(&k);
                let _ = other.rkey_unpack(&k);
            }
        }
        for s in 0..500u64 {
            let len = (pattern::mix64(s) % 48) as usize;
            let k = pattern::mem_vec(len, s, 0);
            let _ = f.md.rkey_unpack(&k);
        }
    }
    // A forged local key (self transport's registrations) must not cover unregistered
    // memory: a key one byte longer than the registration is refused.
    let good = reg.pack_rkey();
    if f.md.transport() == Transport::SelfTl {
        let mut k = PackedRkey::decode(&good).expect("a registration's key");
        k.len += 1;
        assert!(
            f.md.rkey_unpack(&k.encode()).is_err(),
            "{t:?}: an over-long local key unpacked"
        );
        drop(reg);
        assert!(
            f.md.rkey_unpack(&good).is_err(),
            "{t:?}: a local key outlived its registration"
        );
    }
}

/// Interface addresses that are empty, truncated, garbage or name something else are
/// refused by `ep_create` without a panic.
pub fn bad_iface_address(t: Transport) {
    let mut i = Iface::open(t, &IfaceConfig::default()).expect("open");
    let good = i.address();
    let n0 = i.ep_count();
    assert!(i.ep_create(&[]).is_err(), "{t:?}: empty address");
    for n in 1..good.len() {
        assert!(
            i.ep_create(&good[..n]).is_err(),
            "{t:?}: address truncated to {n}"
        );
    }
    let mut long = good.clone();
    long.push(0);
    assert!(
        i.ep_create(&long).is_err(),
        "{t:?}: address with a trailing byte"
    );
    let mut k = good.clone();
    k[0] ^= 0xff;
    assert!(
        i.ep_create(&k).is_err(),
        "{t:?}: address with a wrong version"
    );
    for at in 0..good.len() {
        for x in [1u8, 0x80, 0xff] {
            let mut k = good.clone();
            k[at] ^= x;
            // Some flips still name a reachable interface; only no panic is required, and
            // endpoints that were created must be destroyable.
            if let Ok(ep) = i.ep_create(&k) {
                i.ep_destroy(ep).expect("destroying an endpoint");
            }
        }
    }
    assert_eq!(i.ep_count(), n0);
    // An address of another transport.
    for other in Transport::ALL {
        if other != t {
            let o = Iface::open(other, &IfaceConfig::default()).expect("open");
            let _ = i.ep_create(&o.address());
        }
    }
}

/// Instantiates the conformance suite for a transport: one `#[test]` per check, in a
/// module named `$name`.
///
/// ```no_run
/// testkit::conformance_suite!(shm, uct::Transport::Shm);
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $transport:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::__conformance_tests!(
                $transport;
                attributes,
                endpoints,
                loopback_to_own_address,
                am_short,
                am_bcopy,
                am_zcopy,
                am_ids_and_order,
                put_get,
                register_same_memory_twice,
                atomics,
                flush_fence,
                pending,
                wakeup,
                bad_endpoint,
                bad_am_id,
                oversize,
                panicking_packer,
                out_of_range,
                misaligned_atomic,
                corrupted_rkey,
                bad_iface_address,
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($transport:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::conformance::$check($transport);
            }
        )*
    };
}
