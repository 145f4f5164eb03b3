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
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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

    fn check(&self, ep: Ep, addr: u64, len: usize) -> Result<()> {
        if ep != self.ep {
            return Err(Status::InvalidParam);
        }
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

/// Writes `len` bytes from `src` to `addr` in the key's memory.
///
/// # Safety
/// `src` must stay readable and unchanged until the request completes.
pub(crate) unsafe fn put_nb(
    core: &mut Core,
    ep: Ep,
    src: *const u8,
    len: usize,
    addr: u64,
    rk: &RemoteKey,
    cb: Option<Callback>,
) -> Result<Post> {
    rk.check(ep, addr, len)?;
    if let Some(k) = rk.uct.as_ref().filter(|_| rk.rma != RmaPath::Emulated) {
        // SAFETY: the caller promised src..src+len is readable.
        let data = unsafe { slice(src, len) };
        uct::rma::put_one(k, addr, data)?;
        return Ok(Post::Done(cb));
    }
    let st = state(
        ep,
        RmaOp::Put,
        rk,
        addr,
        Buf::contig(src.cast_mut(), len),
        len,
    );
    new_req(core, st, cb, false)
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
    if let Some(k) = rk.uct.as_ref().filter(|_| rk.rma != RmaPath::Emulated) {
        uct::rma::put_one(k, addr, data)?;
        return Ok(Post::Done(None));
    }
    let mut st = state(
        ep,
        RmaOp::Put,
        rk,
        addr,
        Buf::contig(std::ptr::null_mut(), 0),
        data.len(),
    );
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

/// Writes `data` to `addr`, then applies the signal; see the module doc for the order.
/// With `owned`, emulated data is copied now (the put is locally complete on return);
/// otherwise the caller's bytes are read as they are sent.
///
/// # Safety
/// Without `owned`, `data` must stay readable and unchanged until the request completes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn put_signal(
    core: &mut Core,
    ep: Ep,
    data: &[u8],
    addr: u64,
    rk: &RemoteKey,
    sig: &Signal<'_>,
    cb: Option<Callback>,
    owned: bool,
) -> Result<Post> {
    rk.check(ep, addr, data.len())?;
    sig.rk.check(ep, sig.addr, 8)?;
    check_aligned(sig.addr, AtomicSize::B64)?;
    let mut sent_data = false;
    if let Some(k) = rk.uct.as_ref().filter(|_| rk.rma != RmaPath::Emulated) {
        // Direct and CMA complete the copy in this call: the data is in place before the
        // signal below is applied or sent.
        if !data.is_empty() {
            uct::rma::put_one(k, addr, data)?;
        }
        if let (RmaPath::Direct, Some(sk)) = (sig.rk.amo, sig.rk.uct.as_ref()) {
            let op = match sig.op {
                SignalOp::Add => AtomicOp::Add,
                SignalOp::Set => AtomicOp::Swap,
            };
            // SeqCst, which includes the release that publishes the data.
            uct::rma::atomic(sk, op, AtomicSize::B64, sig.addr, sig.value, 0)?;
            return Ok(Post::Done(cb));
        }
        sent_data = true;
    }
    let op = RmaOp::PutSignal {
        op: sig.op,
        key: sig.rk.key_id,
        addr: sig.addr,
    };
    let len = if sent_data { 0 } else { data.len() };
    let local = if owned || sent_data {
        Buf::contig(std::ptr::null_mut(), 0)
    } else {
        Buf::contig(data.as_ptr().cast_mut(), len)
    };
    let mut st = state(ep, op, rk, addr, local, len);
    st.value = sig.value;
    if owned && !sent_data {
        st.owned = Some(data.to_vec());
    }
    new_req(core, st, cb, owned)
}

/// Reads `len` bytes at `addr` into `dst`; with `released`, nobody waits for the request
/// (get_nbi: the data is there after a flush).
///
/// # Safety
/// `dst` must stay writable, and not otherwise accessed, until the request completes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn get_nb(
    core: &mut Core,
    ep: Ep,
    dst: *mut u8,
    len: usize,
    addr: u64,
    rk: &RemoteKey,
    cb: Option<Callback>,
    released: bool,
) -> Result<Post> {
    rk.check(ep, addr, len)?;
    if let Some(k) = rk.uct.as_ref().filter(|_| rk.rma != RmaPath::Emulated) {
        // SAFETY: the caller promised dst..dst+len is writable and ours.
        let buf = unsafe { slice_mut(dst, len) };
        uct::rma::get(k, addr, &mut [buf])?;
        return Ok(Post::Done(cb));
    }
    let st = state(ep, RmaOp::Get, rk, addr, Buf::contig(dst, len), len);
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
    if let (RmaPath::Direct, Some(k)) = (rk.amo, rk.uct.as_ref()) {
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
        Buf::contig(std::ptr::null_mut(), 0),
        size.bytes(),
    );
    st.value = value;
    new_req(core, st, None, true)
}

/// An atomic that returns the previous value into `*result` (`compare` is for cswap).
///
/// # Safety
/// `result` must stay writable until the request completes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn atomic_fetch_nb(
    core: &mut Core,
    ep: Ep,
    op: AtomicOp,
    size: AtomicSize,
    value: u64,
    compare: u64,
    result: *mut u64,
    addr: u64,
    rk: &RemoteKey,
    cb: Option<Callback>,
) -> Result<Post> {
    rk.check(ep, addr, size.bytes())?;
    if result.is_null() {
        return Err(Status::InvalidParam);
    }
    if let (RmaPath::Direct, Some(k)) = (rk.amo, rk.uct.as_ref()) {
        let old = uct::rma::atomic(k, op, size, addr, value, compare)?;
        // SAFETY: the caller promised `result` is writable.
        unsafe { result.write_unaligned(old) };
        return Ok(Post::Done(cb));
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
        Buf::contig(result.cast(), 8),
        size.bytes(),
    );
    st.value = value;
    st.compare = compare;
    new_req(core, st, cb, false)
}

fn check_aligned(addr: u64, size: AtomicSize) -> Result<()> {
    if addr % size.bytes() as u64 == 0 {
        Ok(())
    } else {
        Err(Status::InvalidParam)
    }
}

/// # Safety
/// `p..p+len` readable (or `len == 0`).
pub(crate) unsafe fn slice<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: per the function's contract.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

/// # Safety
/// `p..p+len` writable and unaliased (or `len == 0`).
unsafe fn slice_mut<'a>(p: *mut u8, len: usize) -> &'a mut [u8] {
    if len == 0 {
        &mut []
    } else {
        // SAFETY: per the function's contract.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }
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
                            // SAFETY: the initiator promised the source stays readable.
                            unsafe { local.read_at(off, dst) };
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
                    let copied = n == 0
                        || ctx
                            .with_region(key, src, n, |p| {
                                // SAFETY: with_region holds the lease on a region of this
                                // process that contains p..p+n; the destination is the
                                // transport's buffer, at least GET_REP_HDR + n bytes.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        p.cast_const(),
                                        b[h..].as_mut_ptr(),
                                        n as usize,
                                    )
                                }
                            })
                            .is_some();
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
                let status = if ctx.with_region(key, addr, len, |_| ()).is_some() {
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
                let done = if addr % size.bytes() as u64 == 0 {
                    ctx.with_region(key, addr, size.bytes() as u64, |p| {
                        // SAFETY: with_region holds the lease on a region of this process
                        // that contains the word; it is aligned (checked above).
                        unsafe { local_atomic(op, size, p as u64, value, compare) }
                    })
                } else {
                    None
                };
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
                            // SAFETY: the initiator promised the destination is writable.
                            unsafe { s.local.write_at(off, data) };
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
                        if let (RmaOp::Amo { fetch: true, .. }, Status::Ok) = (s.op, status) {
                            // SAFETY: the initiator promised the result slot is writable.
                            unsafe { s.local.write_at(0, &old.to_ne_bytes()) };
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
    let wrote = ctx.with_region(key, addr, data.len() as u64, |p| {
        // SAFETY: with_region holds the lease on a region of this process that contains
        // p..p+len.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
    });
    if wrote.is_some() {
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
    if h.signal_addr % 8 != 0 {
        return Status::InvalidAddr;
    }
    let done = ctx.with_region(h.signal_key, h.signal_addr, 8, |p| {
        // SAFETY: with_region holds the lease on a region of this process that contains
        // the word; it is 8-byte aligned (checked above), and rucx only ever accesses
        // signal words atomically.
        let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
        match h.op {
            SignalOp::Add => {
                a.fetch_add(h.value, Ordering::Release);
            }
            SignalOp::Set => a.store(h.value, Ordering::Release),
        }
    });
    match done {
        Some(()) => Status::Ok,
        None => Status::InvalidAddr,
    }
}

/// A CPU atomic on this process's memory; returns the previous value.
///
/// # Safety
/// `addr` must be aligned for `size` and lie in memory mapped by this process.
unsafe fn local_atomic(op: AtomicOp, size: AtomicSize, addr: u64, value: u64, compare: u64) -> u64 {
    match size {
        AtomicSize::B64 => {
            // SAFETY: per the function's contract.
            let a = unsafe { AtomicU64::from_ptr(addr as usize as *mut u64) };
            match op {
                AtomicOp::Add => a.fetch_add(value, Ordering::SeqCst),
                AtomicOp::And => a.fetch_and(value, Ordering::SeqCst),
                AtomicOp::Or => a.fetch_or(value, Ordering::SeqCst),
                AtomicOp::Xor => a.fetch_xor(value, Ordering::SeqCst),
                AtomicOp::Swap => a.swap(value, Ordering::SeqCst),
                AtomicOp::Cswap => a
                    .compare_exchange(compare, value, Ordering::SeqCst, Ordering::SeqCst)
                    .unwrap_or_else(|v| v),
            }
        }
        AtomicSize::B32 => {
            let (v, c) = (value as u32, compare as u32);
            // SAFETY: per the function's contract.
            let a = unsafe { AtomicU32::from_ptr(addr as usize as *mut u32) };
            u64::from(match op {
                AtomicOp::Add => a.fetch_add(v, Ordering::SeqCst),
                AtomicOp::And => a.fetch_and(v, Ordering::SeqCst),
                AtomicOp::Or => a.fetch_or(v, Ordering::SeqCst),
                AtomicOp::Xor => a.fetch_xor(v, Ordering::SeqCst),
                AtomicOp::Swap => a.swap(v, Ordering::SeqCst),
                AtomicOp::Cswap => a
                    .compare_exchange(c, v, Ordering::SeqCst, Ordering::SeqCst)
                    .unwrap_or_else(|v| v),
            })
        }
    }
}
