//! The operations table: the functions UCX's inline calls reach through
//! `ep->iface->ops` (and `iface->ops`), each a thin, panic-guarded call into the Rust
//! interface. Unsupported operations return `UCS_ERR_UNSUPPORTED`.

use super::ffi::*;
use super::md;
use super::md::Flavor;
use super::obj::*;
use super::worker::{worker_obj, WorkerObj};
use crate::ffi::ucs_status_t;
use crate::guard;
use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize, Outcome};

pub(super) unsafe extern "C" fn iface_progress(iface: uct_iface_h) -> c_uint {
    guard::value("uct_iface_progress", 0, || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        Ok(progress(ifc))
    })
}

pub(super) unsafe extern "C" fn ep_put_short(
    ep: uct_ep_h,
    buffer: *const c_void,
    length: c_uint,
    addr: u64,
    rkey: uct_rkey_t,
) -> ucs_status_t {
    st("uct_ep_put_short", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        // SAFETY: per the API.
        let (data, k) = unsafe { (bytes(buffer, length as usize)?, md::rkey_obj(rkey)?) };
        outcome(with_tl(ifc, |tl| tl.put_short(e.id, data, addr, k)))
    })
}

pub(super) unsafe extern "C" fn ep_put_bcopy(
    ep: uct_ep_h,
    pack: uct_pack_callback_t,
    arg: *mut c_void,
    addr: u64,
    rkey: uct_rkey_t,
) -> isize {
    sz("uct_ep_put_bcopy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        let pack = pack.ok_or(Status::InvalidParam)?;
        if e.blocked(ifc) {
            return Ok(isize::from(Status::NoResource.code()));
        }
        // SAFETY: per the API.
        let k = unsafe { md::rkey_obj(rkey) }?;
        let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::NoResource)?;
        let Inner { tl, bounce, .. } = &mut *g;
        // The packer's size is known only after it ran, so it packs into a bounce buffer of
        // max_bcopy bytes (never straight into the target's memory, which it could
        // overrun near the end of the key's region).
        let max = tl.attr().max_put_bcopy;
        if bounce.len() < max {
            bounce.resize(max, 0);
        }
        // SAFETY: the packer writes at most max_bcopy bytes (UCT's contract), which the
        // bounce buffer has.
        let n = unsafe { pack(bounce.as_mut_ptr() as *mut c_void, arg) };
        if n > max {
            return Err(Status::InvalidParam);
        }
        let r = tl.put_zcopy(e.id, &[&bounce[..n]], addr, k, 0)?;
        Ok(match r {
            Outcome::Done(()) => n as isize,
            Outcome::InProgress | Outcome::NoResource => isize::from(Status::NoResource.code()),
        })
    })
}

pub(super) unsafe extern "C" fn ep_put_zcopy(
    ep: uct_ep_h,
    iov: *const uct_iov_t,
    iovcnt: usize,
    addr: u64,
    rkey: uct_rkey_t,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_put_zcopy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        let max = if ifc.flavor == Flavor::Tcp {
            TCP_PUT_MAX_IOV
        } else {
            MAX_IOV
        };
        // SAFETY: per the API.
        let (k, (parts, n)) = unsafe { (md::rkey_obj(rkey)?, iov_slices(iov, iovcnt, max)?) };
        outcome(with_tl(ifc, |tl| {
            tl.put_zcopy(e.id, &parts[..n], addr, k, 0)
        }))
    })
}

pub(super) unsafe extern "C" fn ep_get_bcopy(
    ep: uct_ep_h,
    unpack: uct_unpack_callback_t,
    arg: *mut c_void,
    length: usize,
    addr: u64,
    rkey: uct_rkey_t,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_get_bcopy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        let unpack = unpack.ok_or(Status::InvalidParam)?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        // SAFETY: per the API.
        let k = unsafe { md::rkey_obj(rkey) }?;
        outcome(with_tl(ifc, |tl| {
            tl.get_bcopy(
                e.id,
                length,
                addr,
                k,
                // SAFETY: the program's unpacker with its argument, given the data read.
                |d| unsafe { unpack(arg, d.as_ptr() as *const c_void, d.len()) },
                0,
            )
        }))
    })
}

pub(super) unsafe extern "C" fn ep_get_zcopy(
    ep: uct_ep_h,
    iov: *const uct_iov_t,
    iovcnt: usize,
    addr: u64,
    rkey: uct_rkey_t,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_get_zcopy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        // SAFETY: per the API.
        let (k, (mut parts, n)) = unsafe { (md::rkey_obj(rkey)?, iov_slices_mut(iov, iovcnt)?) };
        outcome(with_tl(ifc, |tl| {
            tl.get_zcopy(e.id, &mut parts[..n], addr, k, 0)
        }))
    })
}

pub(super) unsafe extern "C" fn ep_am_short(
    ep: uct_ep_h,
    id: u8,
    header: u64,
    payload: *const c_void,
    length: c_uint,
) -> ucs_status_t {
    st("uct_ep_am_short", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        // SAFETY: per the API.
        let data = unsafe { bytes(payload, length as usize) }?;
        outcome(with_tl(ifc, |tl| tl.am_short(e.id, id, header, data)))
    })
}

pub(super) unsafe extern "C" fn ep_am_short_iov(
    ep: uct_ep_h,
    id: u8,
    iov: *const uct_iov_t,
    iovcnt: usize,
) -> ucs_status_t {
    st("uct_ep_am_short_iov", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        // SAFETY: per the API.
        let (parts, n) = unsafe { iov_slices(iov, iovcnt, MAX_IOV) }?;
        let total: usize = parts[..n].iter().map(|p| p.len()).sum();
        outcome(with_tl(ifc, |tl| {
            if total > tl.attr().max_am_short + 8 {
                return Err(Status::InvalidParam);
            }
            // The concatenation is the message (the receiver sees exactly these bytes).
            tl.am_bcopy(e.id, id, |b| gather(b, &parts[..n]))
        }))
    })
}

/// Copies `parts` one after the other into `b`; returns the bytes written (what fits).
pub(super) fn gather(b: &mut [u8], parts: &[&[u8]]) -> usize {
    let mut off = 0;
    for p in parts {
        let n = p.len().min(b.len() - off);
        b[off..off + n].copy_from_slice(&p[..n]);
        off += n;
    }
    off
}

pub(super) unsafe extern "C" fn ep_am_bcopy(
    ep: uct_ep_h,
    id: u8,
    pack: uct_pack_callback_t,
    arg: *mut c_void,
    _flags: c_uint,
) -> isize {
    sz("uct_ep_am_bcopy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        let pack = pack.ok_or(Status::InvalidParam)?;
        if e.blocked(ifc) {
            return Ok(isize::from(Status::NoResource.code()));
        }
        let r = with_tl(ifc, |tl| {
            // SAFETY: the packer writes at most max_bcopy bytes, which the buffer has.
            tl.am_bcopy(e.id, id, |b| unsafe {
                pack(b.as_mut_ptr() as *mut c_void, arg)
            })
        })?;
        Ok(match r {
            Outcome::Done(n) => n as isize,
            Outcome::InProgress | Outcome::NoResource => isize::from(Status::NoResource.code()),
        })
    })
}

pub(super) unsafe extern "C" fn ep_am_zcopy(
    ep: uct_ep_h,
    id: u8,
    header: *const c_void,
    header_length: c_uint,
    iov: *const uct_iov_t,
    iovcnt: usize,
    _flags: c_uint,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_am_zcopy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        // SAFETY: per the API.
        let (hdr, (parts, n)) = unsafe {
            (
                bytes(header, header_length as usize)?,
                iov_slices(iov, iovcnt, MAX_IOV)?,
            )
        };
        outcome(with_tl(ifc, |tl| {
            tl.am_zcopy(e.id, id, hdr, &parts[..n], 0)
        }))
    })
}

pub(super) fn atomic_op(op: c_uint) -> Result<AtomicOp> {
    Ok(match op {
        UCT_ATOMIC_OP_ADD => AtomicOp::Add,
        UCT_ATOMIC_OP_AND => AtomicOp::And,
        UCT_ATOMIC_OP_OR => AtomicOp::Or,
        UCT_ATOMIC_OP_XOR => AtomicOp::Xor,
        UCT_ATOMIC_OP_SWAP => AtomicOp::Swap,
        UCT_ATOMIC_OP_CSWAP => AtomicOp::Cswap,
        _ => return Err(Status::InvalidParam),
    })
}

/// An atomic without a result.
unsafe fn post(
    ep: uct_ep_h,
    op: c_uint,
    size: AtomicSize,
    v: u64,
    addr: u64,
    rkey: uct_rkey_t,
) -> Result<ucs_status_t> {
    // SAFETY: per the API.
    let (ifc, e) = unsafe { ep_obj(ep) }?;
    if e.blocked(ifc) {
        return Ok(Status::NoResource.code());
    }
    // SAFETY: per the API.
    let k = unsafe { md::rkey_obj(rkey) }?;
    let op = atomic_op(op)?;
    outcome(with_tl(ifc, |tl| {
        tl.atomic_post(e.id, op, size, v, addr, k)
    }))
}

/// An atomic with a result; writes the previous value through `out`.
unsafe fn fetch(
    ep: uct_ep_h,
    op: AtomicOp,
    size: AtomicSize,
    v: u64,
    compare: u64,
    addr: u64,
    rkey: uct_rkey_t,
    out: impl FnOnce(u64) -> Result<()>,
) -> Result<ucs_status_t> {
    // SAFETY: per the API.
    let (ifc, e) = unsafe { ep_obj(ep) }?;
    if e.blocked(ifc) {
        return Ok(Status::NoResource.code());
    }
    // SAFETY: per the API.
    let k = unsafe { md::rkey_obj(rkey) }?;
    match with_tl(ifc, |tl| {
        tl.atomic_fetch(e.id, op, size, v, compare, addr, k, 0)
    })? {
        Outcome::Done(old) => {
            out(old)?;
            Ok(OK)
        }
        Outcome::InProgress => Ok(INPROGRESS),
        Outcome::NoResource => Ok(Status::NoResource.code()),
    }
}

/// Stores `v` at `p` (null: an error).
pub(super) fn store<T>(p: *mut T, v: T) -> Result<()> {
    if p.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the program's result location, non-null.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

pub(super) unsafe extern "C" fn ep_atomic_cswap64(
    ep: uct_ep_h,
    compare: u64,
    swap: u64,
    addr: u64,
    rkey: uct_rkey_t,
    result: *mut u64,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_atomic_cswap64", || {
        // SAFETY: per the API.
        unsafe {
            fetch(
                ep,
                AtomicOp::Cswap,
                AtomicSize::B64,
                swap,
                compare,
                addr,
                rkey,
                |v| store(result, v),
            )
        }
    })
}

pub(super) unsafe extern "C" fn ep_atomic_cswap32(
    ep: uct_ep_h,
    compare: u32,
    swap: u32,
    addr: u64,
    rkey: uct_rkey_t,
    result: *mut u32,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_atomic_cswap32", || {
        // SAFETY: per the API.
        unsafe {
            fetch(
                ep,
                AtomicOp::Cswap,
                AtomicSize::B32,
                swap.into(),
                compare.into(),
                addr,
                rkey,
                |v| store(result, v as u32),
            )
        }
    })
}

pub(super) unsafe extern "C" fn ep_atomic32_post(
    ep: uct_ep_h,
    op: c_uint,
    value: u32,
    addr: u64,
    rkey: uct_rkey_t,
) -> ucs_status_t {
    // SAFETY: per the API.
    st("uct_ep_atomic32_post", || unsafe {
        post(ep, op, AtomicSize::B32, value.into(), addr, rkey)
    })
}

pub(super) unsafe extern "C" fn ep_atomic64_post(
    ep: uct_ep_h,
    op: c_uint,
    value: u64,
    addr: u64,
    rkey: uct_rkey_t,
) -> ucs_status_t {
    // SAFETY: per the API.
    st("uct_ep_atomic64_post", || unsafe {
        post(ep, op, AtomicSize::B64, value, addr, rkey)
    })
}

pub(super) unsafe extern "C" fn ep_atomic32_fetch(
    ep: uct_ep_h,
    op: c_uint,
    value: u32,
    result: *mut u32,
    addr: u64,
    rkey: uct_rkey_t,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_atomic32_fetch", || {
        let op = atomic_op(op)?;
        if op == AtomicOp::Cswap {
            return Err(Status::InvalidParam);
        }
        // SAFETY: per the API.
        unsafe {
            fetch(ep, op, AtomicSize::B32, value.into(), 0, addr, rkey, |v| {
                store(result, v as u32)
            })
        }
    })
}

pub(super) unsafe extern "C" fn ep_atomic64_fetch(
    ep: uct_ep_h,
    op: c_uint,
    value: u64,
    result: *mut u64,
    addr: u64,
    rkey: uct_rkey_t,
    _comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_atomic64_fetch", || {
        let op = atomic_op(op)?;
        if op == AtomicOp::Cswap {
            return Err(Status::InvalidParam);
        }
        // SAFETY: per the API.
        unsafe {
            fetch(ep, op, AtomicSize::B64, value, 0, addr, rkey, |v| {
                store(result, v)
            })
        }
    })
}

pub(super) unsafe extern "C" fn ep_pending_add(
    ep: uct_ep_h,
    req: *mut uct_pending_req_t,
    _flags: c_uint,
) -> ucs_status_t {
    st("uct_ep_pending_add", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if req.is_null() {
            return Err(Status::InvalidParam);
        }
        let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::NoResource)?;
        if e.pending.get() == 0 {
            // Ask the transport whether the endpoint has resources now: its pending queue
            // answers Busy then; otherwise take the probe back out at once.
            match g
                .tl
                .pending_add(e.id, Box::new(|_, _| uct::PendingResult::Done))
            {
                Err(Status::Busy) => return Ok(Status::Busy.code()),
                Err(s) => return Err(s),
                Ok(()) => {
                    g.tl.pending_purge(e.id);
                }
            }
        }
        g.pending.push_back((e as *const EpObj, req));
        e.pending.set(e.pending.get() + 1);
        Ok(OK)
    })
}

pub(super) unsafe extern "C" fn ep_pending_purge(
    ep: uct_ep_h,
    cb: uct_pending_purge_callback_t,
    arg: *mut c_void,
) {
    guard::void("uct_ep_pending_purge", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        let mine = purge(ifc, e);
        if let Some(cb) = cb {
            for req in mine {
                // SAFETY: the program's callback with a request it queued.
                unsafe { cb(req, arg) };
            }
        }
        Ok(())
    })
}

/// Takes `e`'s requests out of the pending queue.
pub(super) fn purge(ifc: &IfaceObj, e: &EpObj) -> Vec<*mut uct_pending_req_t> {
    let mut mine = Vec::new();
    if e.pending.get() == 0 {
        return mine;
    }
    if let Ok(mut g) = ifc.inner.try_borrow_mut() {
        g.pending.retain(|&(ep, req)| {
            if std::ptr::eq(ep, e) {
                mine.push(req);
                false
            } else {
                true
            }
        });
    }
    e.pending.set(0);
    mine
}

pub(super) unsafe extern "C" fn ep_flush(
    ep: uct_ep_h,
    _flags: c_uint,
    comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_ep_flush", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        if e.blocked(ifc) {
            return Ok(Status::NoResource.code());
        }
        let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::NoResource)?;
        match g.tl.ep_flush(e.id, 0)? {
            Outcome::Done(()) => Ok(OK),
            Outcome::InProgress | Outcome::NoResource => {
                if !comp.is_null() {
                    g.waiters.push((Some(e.id), comp));
                }
                Ok(INPROGRESS)
            }
        }
    })
}

pub(super) unsafe extern "C" fn ep_fence(ep: uct_ep_h, _flags: c_uint) -> ucs_status_t {
    st("uct_ep_fence", || {
        // SAFETY: per the API.
        let (ifc, _) = unsafe { ep_obj(ep) }?;
        with_tl(ifc, |tl| tl.fence())?;
        Ok(OK)
    })
}

pub(super) unsafe extern "C" fn iface_flush(
    iface: uct_iface_h,
    _flags: c_uint,
    comp: *mut uct_completion_t,
) -> ucs_status_t {
    st("uct_iface_flush", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::NoResource)?;
        let busy = !g.pending.is_empty();
        match g.tl.flush(0)? {
            Outcome::Done(()) if !busy => Ok(OK),
            _ => {
                if !comp.is_null() {
                    g.waiters.push((None, comp));
                }
                Ok(INPROGRESS)
            }
        }
    })
}

pub(super) unsafe extern "C" fn iface_fence(iface: uct_iface_h, _flags: c_uint) -> ucs_status_t {
    st("uct_iface_fence", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        with_tl(ifc, |tl| tl.fence())?;
        Ok(OK)
    })
}

pub(super) unsafe extern "C" fn iface_progress_enable(iface: uct_iface_h, flags: c_uint) {
    guard::void("uct_iface_progress_enable", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let f = flags & (UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
        ifc.progress_flags.set(ifc.progress_flags.get() | f);
        if ifc.progress_flags.get() != 0 && ifc.progress_id.get().is_none() {
            // SAFETY: the worker the interface was opened on (alive while it is).
            let w = unsafe { worker_obj(ifc.worker) }?;
            let id = w.add(worker_cb, ifc as *const IfaceObj as *mut c_void)?;
            ifc.progress_id.set(Some(id));
        }
        Ok(())
    })
}

pub(super) unsafe extern "C" fn iface_progress_disable(iface: uct_iface_h, flags: c_uint) {
    guard::void("uct_iface_progress_disable", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        ifc.progress_flags.set(ifc.progress_flags.get() & !flags);
        if ifc.progress_flags.get() == 0 {
            stop_progress(ifc)?;
        }
        Ok(())
    })
}

pub(super) fn stop_progress(ifc: &IfaceObj) -> Result<()> {
    if let Some(id) = ifc.progress_id.take() {
        // SAFETY: the worker the interface was opened on (alive while it is).
        let w: &WorkerObj = unsafe { worker_obj(ifc.worker) }?;
        w.remove(id);
    }
    Ok(())
}

pub(super) unsafe extern "C" fn iface_event_fd_get(
    iface: uct_iface_h,
    fd_p: *mut c_int,
) -> ucs_status_t {
    st("uct_iface_event_fd_get", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if fd_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let g = ifc.inner.try_borrow().map_err(|_| Status::Busy)?;
        let fd = g.tl.event_fd().ok_or(Status::Unsupported)?.as_raw_fd();
        // SAFETY: checked non-null.
        unsafe { *fd_p = fd };
        Ok(OK)
    })
}

pub(super) unsafe extern "C" fn iface_event_arm(
    iface: uct_iface_h,
    events: c_uint,
) -> ucs_status_t {
    st("uct_iface_event_arm", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if events & !(UCT_EVENT_SEND_COMP | UCT_EVENT_RECV) != 0 {
            return Err(Status::Unsupported);
        }
        // Messages already staged or pending requests count as events.
        let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::Busy)?;
        if !g.pending.is_empty() || !g.waiters.is_empty() {
            return Ok(Status::Busy.code());
        }
        match g.tl.arm() {
            Ok(()) => Ok(OK),
            Err(Status::Busy) => Ok(Status::Busy.code()),
            Err(e) => Err(e),
        }
    })
}

/// The progress callback the worker's array holds.
pub(super) unsafe extern "C" fn worker_cb(arg: *mut c_void) -> c_uint {
    // SAFETY: registered with the interface as its argument, removed before it is freed.
    unsafe { iface_progress(arg as uct_iface_h) }
}
