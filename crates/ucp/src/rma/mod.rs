//! Remote memory access and atomics: remote keys resolved once per endpoint, and the
//! three access paths — direct load/store through a mapping, cross-memory attach, and
//! emulation by messages that the target executes in its progress.
//!
//! Path choice (at unpack, never per operation): the endpoint's lane decides which
//! transport key applies; a mapped key gives `Direct` (and CPU atomics), a CMA key gives
//! `Cma` for put/get and emulated atomics, and no usable key gives `Emulated` for both.
//! `UCX_RMA_PATH` forces a path for testing and tuning. Atomics on one word stay correct
//! when paths mix: the emulating target uses the same CPU atomics a mapping peer does.
//!
//! Emulated operations are requests in the endpoint's queue, so they keep their order;
//! each counts as outstanding on the endpoint until the target's reply, which is what
//! flush waits for.
//!
//! Put with remote signal keeps one invariant on every path: the signal word changes only
//! after the data is in the target's memory. Direct and CMA puts are complete when their
//! call returns, so the signal follows them (a CPU atomic through a mapping, or a
//! `PutSignal` message with no data); an emulated put sends its data in order on the lane
//! and its last piece is a `PutSignal`, whose handler writes the bytes and then applies the
//! signal with release ordering.

use crate::config::RmaPath;
use crate::core::ep::{Ep, Lane};
use crate::core::request::*;
use crate::core::{connect, lane_owner, Core, Post, Tl};
use crate::proto::rma::*;
use crate::proto::AmId;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize};

/// A remote key unpacked for one endpoint.
#[derive(Clone, Debug)]
pub struct RemoteKey {
    ep: Ep,
    key_id: u64,
    base: u64,
    len: u64,
    rma: RmaPath,
    amo: RmaPath,
    uct: Option<uct::Rkey>,
}

impl RemoteKey {
    /// How put and get reach the memory.
    pub fn rma_path(&self) -> RmaPath {
        self.rma
    }

    /// How atomics reach the memory.
    pub fn amo_path(&self) -> RmaPath {
        self.amo
    }

    /// A local pointer to remote address `addr` when the memory is mapped into this
    /// process (`UCS_ERR_UNSUPPORTED` otherwise, as `ucp_rkey_ptr`).
    pub fn ptr(&self, addr: u64) -> Result<*mut u8> {
        match (&self.uct, self.rma) {
            (Some(k), RmaPath::Direct) => k.ptr(addr, 0),
            _ => Err(Status::Unsupported),
        }
    }

    /// The transport key when put and get complete in the call (direct or CMA).
    #[inline]
    fn in_call(&self) -> Option<&uct::Rkey> {
        self.uct.as_ref().filter(|_| self.rma != RmaPath::Emulated)
    }

    /// The transport key when atomics are CPU atomics through a mapping.
    #[inline]
    fn cpu_atomics(&self) -> Option<&uct::Rkey> {
        self.uct.as_ref().filter(|_| self.amo == RmaPath::Direct)
    }

    /// Checks the key was unpacked on `ep`. Enough on the in-call paths: their transport
    /// key was decoded from the same packed key, so it has this key's range, and the
    /// transport checks every access against it before touching memory.
    #[inline(always)]
    fn check_ep(&self, ep: Ep) -> Result<()> {
        if ep != self.ep {
            return Err(Status::InvalidParam);
        }
        Ok(())
    }

    #[inline]
    fn check(&self, ep: Ep, addr: u64, len: usize) -> Result<()> {
        self.check_ep(ep)?;
        let end = addr.checked_add(len as u64).ok_or(Status::InvalidParam)?;
        if addr < self.base || end > self.base + self.len {
            return Err(Status::InvalidParam);
        }
        Ok(())
    }
}

/// Unpacks a remote key for use on `ep` (connected) and resolves its access path. The
/// owner's process (for CMA and segment keys) is the peer of the endpoint's lane.
pub(crate) fn unpack(tls: &mut [Tl], core: &mut Core, ep: Ep, packed: &[u8]) -> Result<RemoteKey> {
    let k = crate::mem::PackedKey::decode(packed)?;
    let lane = connect(tls, core, ep.0)?;
    let pk = match k {
        crate::mem::PackedKey::Region(pk) => pk,
        // No region named: every access is emulated and checked by the target.
        crate::mem::PackedKey::Any => {
            return Ok(RemoteKey {
                ep,
                key_id: 0,
                base: 0,
                len: u64::MAX,
                rma: RmaPath::Emulated,
                amo: RmaPath::Emulated,
                uct: None,
            })
        }
    };
    let tl = &tls[lane.tl];
    let mode = core.cfg.rma_path;
    let uct = if mode != RmaPath::Emulated && tl.md.supports_rkeys() {
        let owner = lane_owner(tls, core, ep.0, lane);
        match tl.md.rkey_unpack_from(packed, owner) {
            Ok(rk) => Some(rk),
            // A key that decodes but names memory we cannot reach (a peer gone, a
            // mapping refused) falls back to emulation; a malformed one is an error.
            Err(Status::InvalidParam) => return Err(Status::InvalidParam),
            Err(s) => {
                tracing::debug!("remote key not reachable directly ({s}); emulating");
                None
            }
        }
    } else {
        None
    };
    let (rma, amo, uct) = match (uct, mode) {
        (None, _) => (RmaPath::Emulated, RmaPath::Emulated, None),
        (Some(rk), RmaPath::Cma) => (RmaPath::Cma, RmaPath::Emulated, Some(rk.to_cma())),
        (Some(rk), _) if rk.is_direct() => (RmaPath::Direct, RmaPath::Direct, Some(rk)),
        (Some(rk), RmaPath::Direct) => {
            tracing::debug!("UCX_RMA_PATH=direct but the key is not mappable: {rk:?}");
            return Err(Status::Unsupported);
        }
        (Some(rk), _) => (RmaPath::Cma, RmaPath::Emulated, Some(rk)),
    };
    Ok(RemoteKey {
        ep,
        key_id: pk.id,
        base: pk.base,
        len: pk.len,
        rma,
        amo,
        uct,
    })
}

/// A new emulated operation, counted as outstanding on its endpoint until the target
/// answers; the caller queues it (`Queued::Rma`).
pub(crate) fn new_req(
    core: &mut Core,
    st: RmaState,
    cb: Option<Callback>,
    released: bool,
) -> Result<Post> {
    let ep = st.ep;
    core.ep(ep)?;
    let r = core.new_req(ReqKind::Rma(Box::new(st)), cb);
    if let Some(q) = core.reqs.get_mut(r.0) {
        q.released = released;
    }
    core.ep_mut(ep)?.outstanding += 1;
    Ok(Post::Queue(r))
}

/// The state of an emulated operation on `rk`'s memory.
pub(crate) fn state(
    ep: Ep,
    op: RmaOp,
    rk: &RemoteKey,
    addr: u64,
    local: Buf,
    len: usize,
) -> RmaState {
    RmaState {
        ep: ep.0,
        op,
        key_id: rk.key_id,
        addr,
        local,
        owned: None,
        len,
        value: 0,
        compare: 0,
        sent: 0,
        progress: 0,
        error: None,
    }
}

/// Writes the bytes of `src` to `addr` in the key's memory.
pub(crate) fn put_nb(
    core: &mut Core,
    ep: Ep,
    src: Buf,
    addr: u64,
    rk: &RemoteKey,
    cb: Option<Callback>,
) -> Result<Post> {
    let len = src.len();
    rk.check(ep, addr, len)?;
    if let Some(k) = rk.in_call() {
        put_direct(k, addr, &src)?;
        return Ok(Post::Done(cb));
    }
    let st = state(ep, RmaOp::Put, rk, addr, src, len);
    new_req(core, st, cb, false)
}

/// [`put_nb`] when it completes in the call with nothing to report: a contiguous buffer
/// through a key reached in the call (mapped or CMA). `None` when the put needs the
/// general path. The checks are `put_nb`'s, before any byte moves.
#[inline]
pub(crate) fn put_in_call(ep: Ep, src: &Buf, addr: u64, rk: &RemoteKey) -> Option<Result<()>> {
    put_bytes_in_call(ep, src.as_bytes()?, addr, rk)
}

/// A put that needs no worker: when the key is reached in the call (mapped or CMA) the
/// bytes are written here, complete on return. `None` when the key needs messages (the
/// caller takes [`crate::Worker::put_nb`]). As [`put_signal_in_call`], it touches no
/// worker state, so a caller holding the endpoint (the C API's handle) may call it
/// without the worker or its lock; `ep` is only compared with the key's endpoint.
#[inline]
pub fn put_bytes_in_call(ep: Ep, data: &[u8], addr: u64, rk: &RemoteKey) -> Option<Result<()>> {
    let k = rk.in_call()?;
    Some(
        rk.check_ep(ep)
            .and_then(|()| uct::rma::put_one(k, addr, data)),
    )
}

/// A direct or CMA put of `src`, complete on return.
#[inline]
fn put_direct(k: &uct::Rkey, addr: u64, src: &Buf) -> Result<()> {
    match src.as_bytes() {
        Some(data) => uct::rma::put_one(k, addr, data),
        None => put_packed(k, addr, src),
    }
}

/// [`put_direct`] of a buffer that is not contiguous: through a packed copy.
#[cold]
#[inline(never)]
fn put_packed(k: &uct::Rkey, addr: u64, src: &Buf) -> Result<()> {
    let mut v = vec![0u8; src.len()];
    src.read_at(0, &mut v);
    uct::rma::put(k, addr, &[&v])
}

/// A direct or CMA get into `dst`, complete on return.
#[inline]
fn get_direct(k: &uct::Rkey, addr: u64, dst: &mut Buf) -> Result<()> {
    match dst.as_bytes_mut() {
        Some(b) => uct::rma::get(k, addr, &mut [b]),
        None => get_scattered(k, addr, dst),
    }
}

/// [`get_direct`] into an I/O vector or an application datatype.
#[cold]
#[inline(never)]
fn get_scattered(k: &uct::Rkey, addr: u64, dst: &mut Buf) -> Result<()> {
    if dst.is_generic() {
        let mut v = vec![0u8; dst.len()];
        uct::rma::get(k, addr, &mut [&mut v[..]])?;
        dst.write_at(0, &v);
        return Ok(());
    }
    uct::rma::get(k, addr, &mut dst.slices_mut())
}

/// Writes `data` to `addr`; locally complete on return (the data was taken), remotely
/// complete after a flush.
pub(crate) fn put_nbi(
    core: &mut Core,
    ep: Ep,
    data: &[u8],
    addr: u64,
    rk: &RemoteKey,
) -> Result<Post> {
    rk.check(ep, addr, data.len())?;
    if let Some(k) = rk.in_call() {
        uct::rma::put_one(k, addr, data)?;
        return Ok(Post::Done(None));
    }
    let mut st = state(ep, RmaOp::Put, rk, addr, Buf::empty(), data.len());
    st.owned = Some(data.to_vec());
    new_req(core, st, None, true)
}

/// The signal of a put with remote signal: the 64-bit word and what to do to it.
pub(crate) struct Signal<'a> {
    pub addr: u64,
    pub rk: &'a RemoteKey,
    pub op: SignalOp,
    pub value: u64,
}

/// The data of a put with signal.
pub(crate) enum Src<'a> {
    /// Borrowed for the call: emulated data is copied now (the put is locally complete
    /// on return).
    Copy(&'a [u8]),
    /// The request's buffer: its bytes are read as they are sent.
    Buf(Buf),
}

/// A put with remote signal that needs no worker: when the data key is reached in the
/// call (mapped or CMA) and the signal key maps its memory, the bytes are written and the
/// signal applied here, complete on return. `None` when either key needs messages (the
/// caller takes [`crate::Worker::put_signal_nb`]). Touches no worker state, so a caller
/// holding the endpoint (the C API's handle) may call it without the worker or its lock.
/// The arguments are checked as `put_signal_nb` checks them, before anything is written;
/// `ep` is only compared with the keys' endpoint: that it is still open is the caller's
/// to know (a closed one's mapping stays valid while the keys live).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn put_signal_in_call(
    ep: Ep,
    data: &[u8],
    addr: u64,
    rk: &RemoteKey,
    signal_addr: u64,
    signal_rk: &RemoteKey,
    op: SignalOp,
    value: u64,
) -> Option<Result<()>> {
    let (k, sk) = (rk.in_call()?, signal_rk.cpu_atomics()?);
    Some(put_signal_now(
        ep,
        data,
        addr,
        rk,
        k,
        signal_addr,
        signal_rk,
        sk,
        op,
        value,
    ))
}

/// [`put_signal_in_call`] once both keys are known to be reached in the call. The
/// transport keys carry the same range as the keys they belong to (both are decoded from
/// one packed key), so their checks are the range checks: each key's range is checked
/// once, the signal word's first, and every check comes before the first byte is written.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn put_signal_now(
    ep: Ep,
    data: &[u8],
    addr: u64,
    rk: &RemoteKey,
    k: &uct::Rkey,
    signal_addr: u64,
    signal_rk: &RemoteKey,
    sk: &uct::Rkey,
    op: SignalOp,
    value: u64,
) -> Result<()> {
    signal_rk.check_ep(ep)?;
    if data.is_empty() {
        // No byte to write, but the address is still checked, as on every other path.
        rk.check(ep, addr, 0)?;
    } else {
        rk.check_ep(ep)?;
    }
    let op = match op {
        SignalOp::Add => AtomicOp::Add,
        SignalOp::Set => AtomicOp::Swap,
    };
    uct::rma::put_then_atomic64(k, addr, data, sk, signal_addr, op, value)?;
    Ok(())
}

/// The checks of a put with signal, all before any byte moves: both ranges in their
/// keys (unpacked on `ep`), the signal word aligned.
#[inline]
fn check_put_signal(ep: Ep, addr: u64, len: usize, rk: &RemoteKey, sig: &Signal<'_>) -> Result<()> {
    rk.check(ep, addr, len)?;
    sig.rk.check(ep, sig.addr, 8)?;
    check_aligned(sig.addr, AtomicSize::B64)
}

/// The signal as a CPU atomic through a mapping. SeqCst, which includes the release that
/// publishes the data written before it.
#[inline]
fn apply_signal(sk: &uct::Rkey, sig: &Signal<'_>) -> Result<()> {
    let op = match sig.op {
        SignalOp::Add => AtomicOp::Add,
        SignalOp::Set => AtomicOp::Swap,
    };
    uct::rma::atomic(sk, op, AtomicSize::B64, sig.addr, sig.value, 0).map(drop)
}

/// Writes `src` to `addr`, then applies the signal; see the module doc for the order.
pub(crate) fn put_signal(
    core: &mut Core,
    ep: Ep,
    src: Src<'_>,
    addr: u64,
    rk: &RemoteKey,
    sig: &Signal<'_>,
    cb: Option<Callback>,
) -> Result<Post> {
    let len = match &src {
        Src::Copy(d) => d.len(),
        Src::Buf(b) => b.len(),
    };
    let owned = matches!(src, Src::Copy(_));
    check_put_signal(ep, addr, len, rk, sig)?;
    let mut sent_data = false;
    if let Some(k) = rk.in_call() {
        // Direct and CMA complete the copy in this call: the data is in place before the
        // signal below is applied or sent.
        match &src {
            Src::Copy(d) if !d.is_empty() => uct::rma::put_one(k, addr, d)?,
            Src::Buf(b) if !b.is_empty() => put_direct(k, addr, b)?,
            _ => {}
        }
        if let Some(sk) = sig.rk.cpu_atomics() {
            apply_signal(sk, sig)?;
            return Ok(Post::Done(cb));
        }
        sent_data = true;
    }
    let op = RmaOp::PutSignal {
        op: sig.op,
        key: sig.rk.key_id,
        addr: sig.addr,
    };
    let len = if sent_data { 0 } else { len };
    let (local, copy) = match src {
        _ if sent_data => (Buf::empty(), None),
        Src::Copy(d) => (Buf::empty(), Some(d.to_vec())),
        Src::Buf(b) => (b, None),
    };
    let mut st = state(ep, op, rk, addr, local, len);
    st.value = sig.value;
    st.owned = copy;
    new_req(core, st, cb, owned)
}

/// Reads `dst.len()` bytes at `addr` into `dst`; with `released`, nobody waits for the
/// request (get_nbi: the data is there after a flush).
pub(crate) fn get_nb(
    core: &mut Core,
    ep: Ep,
    mut dst: Buf,
    addr: u64,
    rk: &RemoteKey,
    cb: Option<Callback>,
    released: bool,
) -> Result<Post> {
    let len = dst.len();
    rk.check(ep, addr, len)?;
    if let Some(k) = rk.in_call() {
        get_direct(k, addr, &mut dst)?;
        return Ok(Post::Done(cb));
    }
    let st = state(ep, RmaOp::Get, rk, addr, dst, len);
    new_req(core, st, cb, released)
}

/// An atomic without result; remotely complete after a flush.
pub(crate) fn atomic_post(
    core: &mut Core,
    ep: Ep,
    op: AtomicOp,
    size: AtomicSize,
    value: u64,
    addr: u64,
    rk: &RemoteKey,
) -> Result<Post> {
    if matches!(op, AtomicOp::Swap | AtomicOp::Cswap) {
        return Err(Status::InvalidParam);
    }
    rk.check(ep, addr, size.bytes())?;
    if let Some(k) = rk.cpu_atomics() {
        uct::rma::atomic(k, op, size, addr, value, 0)?;
        return Ok(Post::Done(None));
    }
    check_aligned(addr, size)?;
    let mut st = state(
        ep,
        RmaOp::Amo {
            op,
            size,
            fetch: false,
        },
        rk,
        addr,
        Buf::empty(),
        size.bytes(),
    );
    st.value = value;
    new_req(core, st, None, true)
}

/// An atomic that writes the previous value into `result` (`compare` is for cswap).
#[allow(clippy::too_many_arguments)]
pub(crate) fn atomic_fetch_nb(
    core: &mut Core,
    ep: Ep,
    op: AtomicOp,
    size: AtomicSize,
    value: u64,
    compare: u64,
    result: Buf,
    addr: u64,
    rk: &RemoteKey,
    cb: Option<Callback>,
) -> Result<Post> {
    if let Some(done) = atomic_fetch_in_call(ep, op, size, value, compare, &result, addr, rk) {
        return done.map(|()| Post::Done(cb));
    }
    rk.check(ep, addr, size.bytes())?;
    if result.len() < size.bytes() {
        return Err(Status::InvalidParam);
    }
    check_aligned(addr, size)?;
    let mut st = state(
        ep,
        RmaOp::Amo {
            op,
            size,
            fetch: true,
        },
        rk,
        addr,
        result,
        size.bytes(),
    );
    st.value = value;
    st.compare = compare;
    new_req(core, st, cb, false)
}

/// [`atomic_fetch_nb`] when the key maps the memory: the CPU atomic runs here and the
/// previous value is in `result` on return. `None` when the atomic needs messages. The
/// checks come first, so a refused call changes nothing.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn atomic_fetch_in_call(
    ep: Ep,
    op: AtomicOp,
    size: AtomicSize,
    value: u64,
    compare: u64,
    result: &Buf,
    addr: u64,
    rk: &RemoteKey,
) -> Option<Result<()>> {
    let k = rk.cpu_atomics()?;
    let run = || {
        // The range and the alignment are the transport's checks (see `check_ep`).
        rk.check_ep(ep)?;
        if result.len() < size.bytes() {
            return Err(Status::InvalidParam);
        }
        let old = uct::rma::atomic(k, op, size, addr, value, compare)?;
        write_old(result, size, old);
        Ok(())
    };
    Some(run())
}

fn check_aligned(addr: u64, size: AtomicSize) -> Result<()> {
    if addr % size.bytes() as u64 == 0 {
        Ok(())
    } else {
        Err(Status::InvalidParam)
    }
}

/// Writes an atomic's previous value into its result buffer: `size` bytes, in native
/// byte order.
fn write_old(result: &Buf, size: AtomicSize, old: u64) {
    match size {
        AtomicSize::B32 => result.write_at(0, &(old as u32).to_ne_bytes()),
        AtomicSize::B64 => result.write_at(0, &old.to_ne_bytes()),
    };
}

/// Sends what an emulated operation still has to send. `Ok(true)`: all sent.
pub(crate) fn send_step(tls: &mut [Tl], core: &mut Core, lane: Lane, r: Request) -> Result<bool> {
    let uuid = core.uuid;
    let sreq = r.to_u64();
    let Some(Req {
        kind: ReqKind::Rma(s),
        status: None,
        ..
    }) = core.reqs.get_mut(r.0)
    else {
        return Ok(true);
    };
    let max_bcopy = tls[lane.tl].th.max_bcopy;
    let iface = &mut tls[lane.tl].iface;
    match s.op {
        RmaOp::Put | RmaOp::PutSignal { .. } => {
            let signal = match s.op {
                RmaOp::PutSignal { op, key, addr } => Some((op, key, addr)),
                _ => None,
            };
            let hdr = if signal.is_some() {
                PUT_SIGNAL_HDR
            } else {
                PUT_HDR
            };
            let chunk_max = max_bcopy.saturating_sub(hdr - 8).max(1);
            loop {
                let off = s.sent;
                let n = chunk_max.min(s.len - off);
                // Only the last piece signals: the pieces before it run first at the
                // target (one lane, in order).
                let signal_now = signal.filter(|_| off + n >= s.len);
                let (owned, local) = (&s.owned, &s.local);
                let (key, value) = (s.key_id, s.value);
                let addr = s.addr + off as u64;
                let id = if signal_now.is_some() {
                    AmId::PutSignal
                } else {
                    AmId::Put
                };
                let out = iface.am_bcopy(lane.ep, id.id(), |b| {
                    let h = match signal_now {
                        Some((op, signal_key, signal_addr)) => PutSignal {
                            uuid,
                            sreq,
                            key,
                            addr,
                            signal_key,
                            signal_addr,
                            op,
                            value,
                        }
                        .encode_into(b),
                        None => encode(&[uuid, sreq, key, addr], b),
                    };
                    let dst = &mut b[h..h + n];
                    match owned {
                        Some(v) => dst.copy_from_slice(&v[off..off + n]),
                        None => {
                            local.read_at(off, dst);
                        }
                    }
                    h + n
                })?;
                if !out.is_done() {
                    return Ok(false);
                }
                s.sent += n;
                s.progress += 1;
                if s.sent >= s.len {
                    return Ok(true);
                }
            }
        }
        RmaOp::Get => {
            let f = [uuid, sreq, s.key_id, s.addr, s.len as u64];
            let out = iface.am_bcopy(lane.ep, AmId::GetReq.id(), |b| encode(&f, b))?;
            Ok(out.is_done())
        }
        RmaOp::Amo { op, size, fetch } => {
            let f = [
                uuid,
                sreq,
                s.key_id,
                s.addr,
                s.value,
                s.compare,
                op_word(op, size, fetch),
            ];
            let out = iface.am_bcopy(lane.ep, AmId::AmoReq.id(), |b| encode(&f, b))?;
            Ok(out.is_done())
        }
    }
}

/// Target-side work queued by a request that needs an interface.
pub(crate) enum RmaReply {
    Ack {
        uuid: u64,
        sreq: u64,
        status: Status,
    },
    Amo {
        uuid: u64,
        sreq: u64,
        status: Status,
        old: u64,
    },
    /// A get: its data is read from the region `key` when each piece is sent, under the
    /// region's lease, so memory unmapped meanwhile is never read.
    Get {
        uuid: u64,
        sreq: u64,
        key: u64,
        addr: u64,
        len: u64,
        offset: u64,
        status: Status,
    },
}

/// Sends a reply (or as much of a get reply as fits); `Ok(Some(r))`: the rest, later.
pub(crate) fn send_reply(
    tls: &mut [Tl],
    core: &mut Core,
    reply: RmaReply,
) -> Result<Option<RmaReply>> {
    let uuid = match reply {
        RmaReply::Ack { uuid, .. } | RmaReply::Amo { uuid, .. } | RmaReply::Get { uuid, .. } => {
            uuid
        }
    };
    let ep = core.ep_of(uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, core, ep)?;
    let max_bcopy = tls[lane.tl].th.max_bcopy;
    let iface = &mut tls[lane.tl].iface;
    match reply {
        RmaReply::Ack { sreq, status, .. } => {
            let f = [sreq, status_field(status)];
            let out = iface.am_bcopy(lane.ep, AmId::Ack.id(), |b| encode(&f, b))?;
            Ok((!out.is_done()).then_some(reply))
        }
        RmaReply::Amo {
            sreq, status, old, ..
        } => {
            let f = [sreq, status_field(status), old];
            let out = iface.am_bcopy(lane.ep, AmId::AmoRep.id(), |b| encode(&f, b))?;
            Ok((!out.is_done()).then_some(reply))
        }
        RmaReply::Get {
            uuid,
            sreq,
            key,
            addr,
            len,
            mut offset,
            mut status,
        } => {
            let chunk_max = max_bcopy.saturating_sub(GET_REP_HDR - 8).max(1) as u64;
            let ctx = core.ctx.clone();
            loop {
                let n = if status == Status::Ok {
                    chunk_max.min(len - offset)
                } else {
                    0
                };
                let src = addr + offset;
                let mut sent_status = status;
                let out = iface.am_bcopy(lane.ep, AmId::GetRep.id(), |b| {
                    let h = GET_REP_HDR;
                    let copied = ctx.region_read(key, src, &mut b[h..h + n as usize]);
                    if !copied {
                        // Unmapped since the request arrived: an error, and no data.
                        sent_status = Status::InvalidAddr;
                    }
                    encode(&[sreq, offset, status_field(sent_status)], b);
                    h + if copied { n as usize } else { 0 }
                })?;
                if !out.is_done() {
                    return Ok(Some(RmaReply::Get {
                        uuid,
                        sreq,
                        key,
                        addr,
                        len,
                        offset,
                        status,
                    }));
                }
                status = sent_status;
                offset += n;
                if offset >= len || status != Status::Ok {
                    return Ok(None);
                }
            }
        }
    }
}

/// Replies to emulated accesses, waiting for room on their lane (the target's side).
#[derive(Default)]
pub(crate) struct RmaTarget {
    pub replies: VecDeque<RmaReply>,
}

/// Sends queued replies in order; returns how many finished.
pub(crate) fn run_replies(tls: &mut [Tl], core: &mut Core, st: &mut RmaTarget) -> usize {
    let mut n = 0;
    for _ in 0..st.replies.len() {
        let Some(r) = st.replies.pop_front() else {
            break;
        };
        match send_reply(tls, core, r) {
            Ok(None) => n += 1,
            Ok(Some(rest)) => {
                st.replies.push_front(rest);
                break;
            }
            Err(s) => tracing::debug!("reply to an emulated access failed: {s}"),
        }
    }
    n
}

impl RmaTarget {
    /// Handles the emulated-access messages (both roles). The core's context validates
    /// target regions.
    pub(crate) fn on_rma(&mut self, core: &mut Core, id: AmId, d: &[u8]) -> Result<()> {
        let ctx = core.ctx.clone();
        match id {
            AmId::Put => {
                let ([uuid, sreq, key, addr], data) = decode::<4>(d)?;
                let status = write_region(&ctx, key, addr, data);
                self.replies.push_back(RmaReply::Ack { uuid, sreq, status });
            }
            AmId::PutSignal => {
                let (h, data) = PutSignal::decode(d)?;
                let mut status = write_region(&ctx, h.key, h.addr, data);
                if status == Status::Ok {
                    status = signal_region(&ctx, &h);
                }
                self.replies.push_back(RmaReply::Ack {
                    uuid: h.uuid,
                    sreq: h.sreq,
                    status,
                });
            }
            AmId::GetReq => {
                let ([uuid, sreq, key, addr, len], _) = decode::<5>(d)?;
                let status = if ctx.region_is_mapped(key, addr, len) {
                    Status::Ok
                } else {
                    Status::InvalidAddr
                };
                self.replies.push_back(RmaReply::Get {
                    uuid,
                    sreq,
                    key,
                    addr,
                    len,
                    offset: 0,
                    status,
                });
            }
            AmId::AmoReq => {
                let ([uuid, sreq, key, addr, value, compare, w], _) = decode::<7>(d)?;
                let (op, size, _) = parse_op_word(w)?;
                let done = ctx.region_atomic(key, addr, op, size, value, compare);
                let (status, old) = match done {
                    Some(old) => (Status::Ok, old),
                    None => (Status::InvalidAddr, 0),
                };
                self.replies.push_back(RmaReply::Amo {
                    uuid,
                    sreq,
                    status,
                    old,
                });
            }
            AmId::Ack => {
                let ([sreq, status], _) = decode::<2>(d)?;
                let status = field_status(status)?;
                let r = Request::from_u64(sreq);
                let done = match core.reqs.get_mut(r.0) {
                    Some(Req {
                        kind: ReqKind::Rma(s),
                        status: None,
                        ..
                    }) if matches!(s.op, RmaOp::Put | RmaOp::PutSignal { .. })
                        && s.progress > 0 =>
                    {
                        s.progress -= 1;
                        if status != Status::Ok {
                            s.error = Some(status);
                        }
                        (s.progress == 0 && s.sent >= s.len).then(|| s.error.unwrap_or(Status::Ok))
                    }
                    _ => return Err(Status::InvalidParam),
                };
                if let Some(s) = done {
                    core.complete(r, s);
                }
            }
            AmId::GetRep => {
                let ([sreq, offset, status], data) = decode::<3>(d)?;
                let status = field_status(status)?;
                let r = Request::from_u64(sreq);
                let done = match core.reqs.get_mut(r.0) {
                    Some(Req {
                        kind: ReqKind::Rma(s),
                        status: None,
                        ..
                    }) if s.op == RmaOp::Get => {
                        let off = usize::try_from(offset).map_err(|_| Status::InvalidParam)?;
                        if status != Status::Ok {
                            Some(status)
                        } else if off != s.progress || off + data.len() > s.len {
                            return Err(Status::InvalidParam);
                        } else {
                            s.local.write_at(off, data);
                            s.progress += data.len();
                            (s.progress == s.len).then_some(Status::Ok)
                        }
                    }
                    _ => return Err(Status::InvalidParam),
                };
                if let Some(s) = done {
                    core.complete(r, s);
                }
            }
            AmId::AmoRep => {
                let ([sreq, status, old], _) = decode::<3>(d)?;
                let status = field_status(status)?;
                let r = Request::from_u64(sreq);
                match core.reqs.get_mut(r.0) {
                    Some(Req {
                        kind: ReqKind::Rma(s),
                        status: None,
                        ..
                    }) if matches!(s.op, RmaOp::Amo { .. }) => {
                        if let (
                            RmaOp::Amo {
                                fetch: true, size, ..
                            },
                            Status::Ok,
                        ) = (s.op, status)
                        {
                            write_old(&s.local, size, old);
                        }
                    }
                    _ => return Err(Status::InvalidParam),
                }
                core.complete(r, status);
            }
            _ => return Err(Status::InvalidParam),
        }
        Ok(())
    }
}

/// Writes emulated put data into the region `key` of this process (nothing to write is
/// always fine).
fn write_region(ctx: &crate::context::Context, key: u64, addr: u64, data: &[u8]) -> Status {
    if data.is_empty() {
        return Status::Ok;
    }
    if ctx.region_write(key, addr, data) {
        Status::Ok
    } else {
        tracing::debug!(
            "refused emulated put of {} bytes at {addr:#x} (key {key:#x})",
            data.len()
        );
        Status::InvalidAddr
    }
}

/// Applies a PutSignal's signal, after its data was written: the release publishes that
/// data (and every earlier piece's) to whoever reads the word with acquire.
fn signal_region(ctx: &crate::context::Context, h: &PutSignal) -> Status {
    let done = ctx.region_word64(h.signal_key, h.signal_addr, |a| match h.op {
        SignalOp::Add => {
            a.fetch_add(h.value, Ordering::Release);
        }
        SignalOp::Set => a.store(h.value, Ordering::Release),
    });
    match done {
        Some(()) => Status::Ok,
        None => Status::InvalidAddr,
    }
}
