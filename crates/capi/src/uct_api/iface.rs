//! Interfaces, endpoints and the operations table that UCX's inline calls dispatch through.
//!
//! Re-entrancy: an active-message handler, a pending callback or a completion callback may
//! call any UCT function, including operations on the interface that is being progressed.
//! So no borrow of the Rust interface is held while C code runs, except for the pack and
//! unpack callbacks of bcopy operations (which UCX documents as data copies only; an
//! operation called from inside one returns `UCS_ERR_NO_RESOURCE`). Progress copies the
//! messages the transport delivered into a staging buffer owned by the interface (grown
//! once, reused), releases the interface, then calls the handlers.

use super::cstr;
use super::ffi::*;
use super::md::{self, Flavor, MdObj};
use super::worker::{worker_obj, WorkerObj};
use crate::ffi::{ucs_status_ptr_t, ucs_status_t};
use crate::guard;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize, Caps, EpId, Outcome};

const IFACE_MAGIC: u64 = 0x7275_6378_6966_0006;
const EP_MAGIC: u64 = 0x7275_6378_6570_0007;

/// Most iov entries a zero-copy operation takes (they are gathered on the stack).
const MAX_IOV: usize = 8;
/// Most iov entries tcp's put_zcopy takes.
const TCP_PUT_MAX_IOV: usize = 4;

const OK: ucs_status_t = 0;
const INPROGRESS: ucs_status_t = 1;

/// One active-message handler slot.
#[derive(Clone, Copy)]
struct AmSlot {
    cb: uct_am_callback_t,
    arg: *mut c_void,
}

/// A message staged by progress: (id, offset in words, length in bytes).
type Staged = (u8, usize, usize);

struct Inner {
    tl: uct::Iface,
    /// Messages of the current progress call, 8-byte aligned each.
    stage: Vec<u64>,
    msgs: Vec<Staged>,
    /// Pending requests in order: (endpoint, request).
    pending: VecDeque<(*const EpObj, *mut uct_pending_req_t)>,
    /// Flushes that returned `UCS_INPROGRESS` with a completion: (endpoint or the whole
    /// interface, completion).
    waiters: Vec<(Option<EpId>, *mut uct_completion_t)>,
    /// put_bcopy's packing buffer (max_put_bcopy bytes once used).
    bounce: Vec<u8>,
}

/// A `uct_iface_h`. Starts with UCX's `uct_iface_t` (the operations table).
#[repr(C)]
pub(crate) struct IfaceObj {
    c: UctIfaceC,
    magic: u64,
    flavor: Flavor,
    md: *mut c_void,
    worker: *mut c_void,
    /// The progress callback id in the worker, when progress is enabled.
    progress_id: Cell<Option<c_int>>,
    progress_flags: Cell<c_uint>,
    am: [Cell<AmSlot>; uct::AM_ID_MAX as usize],
    /// The endpoint whose pending request is running (it may send past its queue).
    dispatching: Cell<*const EpObj>,
    inner: RefCell<Inner>,
}

const _: () = assert!(std::mem::offset_of!(IfaceObj, c) == 0);

/// A `uct_ep_h`. Starts with UCX's `uct_ep_t` (the interface pointer).
#[repr(C)]
pub(crate) struct EpObj {
    c: UctEpC,
    magic: u64,
    id: EpId,
    /// Requests of this endpoint in its interface's pending queue.
    pending: Cell<u32>,
}

const _: () = assert!(std::mem::offset_of!(EpObj, c) == 0);

impl EpObj {
    /// True when operations must queue behind this endpoint's pending requests.
    #[inline]
    fn blocked(&self, ifc: &IfaceObj) -> bool {
        self.pending.get() != 0 && !std::ptr::eq(ifc.dispatching.get(), self)
    }
}

/// The interface behind a `uct_iface_h`.
///
/// # Safety
/// `p` is null or an interface of rucx (checked by its magic).
#[inline]
unsafe fn iface_obj<'a>(p: uct_iface_h) -> Result<&'a IfaceObj> {
    let i = p as *const IfaceObj;
    // SAFETY: per the caller; checked by the magic.
    if i.is_null() || unsafe { (*i).magic } != IFACE_MAGIC {
        return Err(Status::InvalidParam);
    }
    // SAFETY: checked above.
    Ok(unsafe { &*i })
}

/// The endpoint behind a `uct_ep_h` and its interface.
///
/// # Safety
/// `p` is null or an endpoint of rucx (checked by its magic).
#[inline]
unsafe fn ep_obj<'a>(p: uct_ep_h) -> Result<(&'a IfaceObj, &'a EpObj)> {
    let e = p as *const EpObj;
    // SAFETY: per the caller; checked by the magic.
    if e.is_null() || unsafe { (*e).magic } != EP_MAGIC {
        return Err(Status::InvalidParam);
    }
    // SAFETY: checked above; its interface outlives it (UCX's rule: endpoints are
    // destroyed before their interface).
    let e = unsafe { &*e };
    // SAFETY: as above.
    let i = unsafe { iface_obj(e.c.iface) }?;
    Ok((i, e))
}

/// Runs `f` on the Rust interface; `NoResource` when it is busy (called from inside a pack
/// or unpack callback of the same interface).
#[inline]
fn with_tl<T>(ifc: &IfaceObj, f: impl FnOnce(&mut uct::Iface) -> Result<T>) -> Result<T> {
    let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::NoResource)?;
    f(&mut g.tl)
}

/// The C status of an operation outcome.
#[inline]
fn outcome<T>(r: Result<Outcome<T>>) -> Result<ucs_status_t> {
    match r? {
        Outcome::Done(_) => Ok(OK),
        Outcome::InProgress => Ok(INPROGRESS),
        Outcome::NoResource => Ok(Status::NoResource.code()),
    }
}

/// For operations returning `ucs_status_t`: a panic becomes `UCS_ERR_IO_ERROR`.
#[inline]
fn st(name: &str, f: impl FnOnce() -> Result<ucs_status_t>) -> ucs_status_t {
    match guard::value(name, Err(Status::IoError), || Ok(f())) {
        Ok(s) => s,
        Err(e) => e.code(),
    }
}

/// For operations returning `ssize_t`: a length, or a negative status.
#[inline]
fn sz(name: &str, f: impl FnOnce() -> Result<isize>) -> isize {
    match guard::value(name, Err(Status::IoError), || Ok(f())) {
        Ok(n) => n,
        Err(e) => isize::from(e.code()),
    }
}

/// The bytes of `len` at `p` (empty when `len` is 0).
///
/// # Safety
/// `p` points at `len` readable bytes when `len > 0`.
#[inline]
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: per the caller.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// The buffers of an iov array, gathered on the stack.
///
/// # Safety
/// `iov` points at `cnt` entries whose buffers are valid for their lengths.
unsafe fn iov_slices<'a>(
    iov: *const uct_iov_t,
    cnt: usize,
    max: usize,
) -> Result<([&'a [u8]; MAX_IOV], usize)> {
    let mut out: [&[u8]; MAX_IOV] = [&[]; MAX_IOV];
    if cnt > max.min(MAX_IOV) || (cnt > 0 && iov.is_null()) {
        return Err(Status::InvalidParam);
    }
    for (i, o) in out.iter_mut().enumerate().take(cnt) {
        // SAFETY: i < cnt entries per the caller.
        let v = unsafe { &*iov.add(i) };
        let count = v.count.max(1) as usize;
        // Repeated elements are supported only when they are contiguous.
        if count > 1 && v.stride != v.length {
            return Err(Status::Unsupported);
        }
        let len = v.length.checked_mul(count).ok_or(Status::InvalidParam)?;
        // SAFETY: per the caller, `count` elements of `length` bytes, contiguous.
        *o = unsafe { bytes(v.buffer, len) }?;
    }
    Ok((out, cnt))
}

/// Mutable form of [`iov_slices`], for get_zcopy.
///
/// # Safety
/// As [`iov_slices`], with writable buffers that do not overlap.
unsafe fn iov_slices_mut<'a>(
    iov: *const uct_iov_t,
    cnt: usize,
) -> Result<([&'a mut [u8]; MAX_IOV], usize)> {
    let mut out: [&mut [u8]; MAX_IOV] = Default::default();
    if cnt > MAX_IOV || (cnt > 0 && iov.is_null()) {
        return Err(Status::InvalidParam);
    }
    for (i, o) in out.iter_mut().enumerate().take(cnt) {
        // SAFETY: i < cnt entries per the caller.
        let v = unsafe { &*iov.add(i) };
        let count = v.count.max(1) as usize;
        if count > 1 && v.stride != v.length {
            return Err(Status::Unsupported);
        }
        let len = v.length.checked_mul(count).ok_or(Status::InvalidParam)?;
        if len > 0 {
            if v.buffer.is_null() {
                return Err(Status::InvalidParam);
            }
            // SAFETY: per the caller, writable and not overlapping another entry.
            *o = unsafe { std::slice::from_raw_parts_mut(v.buffer as *mut u8, len) };
        }
    }
    Ok((out, cnt))
}

/// Decrements a completion and calls it when it reaches zero.
///
/// # Safety
/// `comp` is a live completion of the caller.
unsafe fn complete(comp: *mut uct_completion_t, status: Status) {
    if comp.is_null() {
        return;
    }
    // SAFETY: per the caller.
    unsafe {
        if status != Status::Ok && (*comp).status == OK {
            (*comp).status = status.code();
        }
        (*comp).count -= 1;
        if (*comp).count == 0 {
            if let Some(f) = (*comp).func {
                f(comp);
            }
        }
    }
}

// ----- progress ---------------------------------------------------------------------------

/// Progresses the interface: transport, then handlers, completions and pending requests.
fn progress(ifc: &IfaceObj) -> c_uint {
    let Ok(mut g) = ifc.inner.try_borrow_mut() else {
        return 0;
    };
    let mut stage = std::mem::take(&mut g.stage);
    let mut msgs = std::mem::take(&mut g.msgs);
    stage.clear();
    msgs.clear();
    let mut n = g.tl.progress_with(|id, data| {
        let off = stage.len();
        let words = data.len().div_ceil(8);
        stage.resize(off + words, 0);
        // SAFETY: the stage has `words * 8 >= data.len()` bytes from word `off`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                stage.as_mut_ptr().add(off) as *mut u8,
                data.len(),
            )
        };
        msgs.push((id, off, data.len()));
    }) as c_uint;
    if g.tl.has_events() {
        for e in g.tl.take_events() {
            tracing::debug!("uct interface event: {e:?}");
        }
    }
    let done = if g.waiters.is_empty() {
        Vec::new()
    } else {
        let Inner {
            tl,
            waiters,
            pending,
            ..
        } = &mut *g;
        let mut done = Vec::new();
        waiters.retain(|&(ep, comp)| {
            let flushed = match ep {
                Some(ep) => tl.ep_is_flushed(ep).unwrap_or(true),
                None => pending.is_empty() && tl.flush(0).is_ok_and(|o| o.is_done()),
            };
            if flushed {
                done.push(comp);
            }
            !flushed
        });
        done
    };
    let has_pending = !g.pending.is_empty();
    drop(g);

    for &(id, off, len) in &msgs {
        let Some(slot) = ifc.am.get(usize::from(id)) else {
            continue;
        };
        let AmSlot { cb, arg } = slot.get();
        if let Some(cb) = cb {
            // SAFETY: the handler the program installed for `id`, with its argument; the data
            // is `len` bytes of the stage, valid during the call (no descriptor is kept:
            // UCT_CB_PARAM_FLAG_DESC is never set).
            unsafe { cb(arg, stage.as_mut_ptr().add(off) as *mut c_void, len, 0) };
        }
    }
    for comp in done {
        // SAFETY: a completion the program passed to a flush, still owned by us.
        unsafe { complete(comp, Status::Ok) };
        n += 1;
    }
    if has_pending {
        n += dispatch_pending(ifc);
    }
    if let Ok(mut g) = ifc.inner.try_borrow_mut() {
        g.stage = stage;
        g.msgs = msgs;
    }
    n
}

/// Calls the pending requests in order while they make progress.
fn dispatch_pending(ifc: &IfaceObj) -> c_uint {
    let mut n = 0;
    let rounds = ifc.inner.try_borrow().map_or(0, |g| g.pending.len());
    for _ in 0..rounds {
        let Some((ep, req)) = ifc
            .inner
            .try_borrow_mut()
            .ok()
            .and_then(|mut g| g.pending.pop_front())
        else {
            break;
        };
        // SAFETY: an endpoint with requests in the queue is alive (ep_destroy purges them).
        let e = unsafe { &*ep };
        ifc.dispatching.set(ep);
        // SAFETY: the program's request, owned by the queue until its callback returns OK.
        let s = unsafe { (*req).func.map_or(OK, |f| f(req)) };
        ifc.dispatching.set(std::ptr::null());
        if s == OK {
            e.pending.set(e.pending.get().saturating_sub(1));
            n += 1;
            continue;
        }
        // Still pending: back at the head; INPROGRESS lets the others run.
        if let Ok(mut g) = ifc.inner.try_borrow_mut() {
            g.pending.push_front((ep, req));
        }
        if s != INPROGRESS {
            break;
        }
    }
    n
}

/// The progress callback the worker's array holds.
unsafe extern "C" fn worker_cb(arg: *mut c_void) -> c_uint {
    // SAFETY: registered with the interface as its argument, removed before it is freed.
    unsafe { iface_progress(arg as uct_iface_h) }
}

// ----- operations -------------------------------------------------------------------------

unsafe extern "C" fn iface_progress(iface: uct_iface_h) -> c_uint {
    guard::value("uct_iface_progress", 0, || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        Ok(progress(ifc))
    })
}

unsafe extern "C" fn ep_put_short(
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

unsafe extern "C" fn ep_put_bcopy(
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

unsafe extern "C" fn ep_put_zcopy(
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

unsafe extern "C" fn ep_get_bcopy(
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

unsafe extern "C" fn ep_get_zcopy(
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

unsafe extern "C" fn ep_am_short(
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

unsafe extern "C" fn ep_am_short_iov(
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
fn gather(b: &mut [u8], parts: &[&[u8]]) -> usize {
    let mut off = 0;
    for p in parts {
        let n = p.len().min(b.len() - off);
        b[off..off + n].copy_from_slice(&p[..n]);
        off += n;
    }
    off
}

unsafe extern "C" fn ep_am_bcopy(
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

unsafe extern "C" fn ep_am_zcopy(
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

fn atomic_op(op: c_uint) -> Result<AtomicOp> {
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
fn store<T>(p: *mut T, v: T) -> Result<()> {
    if p.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the program's result location, non-null.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

unsafe extern "C" fn ep_atomic_cswap64(
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

unsafe extern "C" fn ep_atomic_cswap32(
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

unsafe extern "C" fn ep_atomic32_post(
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

unsafe extern "C" fn ep_atomic64_post(
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

unsafe extern "C" fn ep_atomic32_fetch(
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

unsafe extern "C" fn ep_atomic64_fetch(
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

unsafe extern "C" fn ep_pending_add(
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

unsafe extern "C" fn ep_pending_purge(
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
fn purge(ifc: &IfaceObj, e: &EpObj) -> Vec<*mut uct_pending_req_t> {
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

unsafe extern "C" fn ep_flush(
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

unsafe extern "C" fn ep_fence(ep: uct_ep_h, _flags: c_uint) -> ucs_status_t {
    st("uct_ep_fence", || {
        // SAFETY: per the API.
        let (ifc, _) = unsafe { ep_obj(ep) }?;
        with_tl(ifc, |tl| tl.fence())?;
        Ok(OK)
    })
}

unsafe extern "C" fn iface_flush(
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

unsafe extern "C" fn iface_fence(iface: uct_iface_h, _flags: c_uint) -> ucs_status_t {
    st("uct_iface_fence", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        with_tl(ifc, |tl| tl.fence())?;
        Ok(OK)
    })
}

unsafe extern "C" fn iface_progress_enable(iface: uct_iface_h, flags: c_uint) {
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

unsafe extern "C" fn iface_progress_disable(iface: uct_iface_h, flags: c_uint) {
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

fn stop_progress(ifc: &IfaceObj) -> Result<()> {
    if let Some(id) = ifc.progress_id.take() {
        // SAFETY: the worker the interface was opened on (alive while it is).
        let w: &WorkerObj = unsafe { worker_obj(ifc.worker) }?;
        w.remove(id);
    }
    Ok(())
}

unsafe extern "C" fn iface_event_fd_get(iface: uct_iface_h, fd_p: *mut c_int) -> ucs_status_t {
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

unsafe extern "C" fn iface_event_arm(iface: uct_iface_h, events: c_uint) -> ucs_status_t {
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

unsafe extern "C" fn ep_create_op(
    params: *const uct_ep_params_head_t,
    ep_p: *mut uct_ep_h,
) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_create(params, ep_p) }
}

unsafe extern "C" fn ep_destroy_op(ep: uct_ep_h) {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_destroy(ep) }
}

unsafe extern "C" fn ep_get_address_op(ep: uct_ep_h, addr: *mut u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_get_address(ep, addr) }
}

unsafe extern "C" fn ep_connect_to_ep_op(ep: uct_ep_h, d: *const u8, a: *const u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_connect_to_ep(ep, d, a) }
}

unsafe extern "C" fn iface_close_op(iface: uct_iface_h) {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_close(iface) }
}

unsafe extern "C" fn iface_query_op(
    iface: uct_iface_h,
    attr: *mut uct_iface_attr_t,
) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_query(iface, attr) }
}

unsafe extern "C" fn iface_get_device_address_op(iface: uct_iface_h, a: *mut u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_get_device_address(iface, a) }
}

unsafe extern "C" fn iface_get_address_op(iface: uct_iface_h, a: *mut u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_get_address(iface, a) }
}

unsafe extern "C" fn iface_is_reachable_op(
    iface: uct_iface_h,
    d: *const u8,
    a: *const u8,
) -> c_int {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_is_reachable(iface, d, a) }
}

// ----- unsupported operations: UCS_ERR_UNSUPPORTED (docs/c-abi.md lists them) ------------

const UNSUPPORTED: ucs_status_t = Status::Unsupported.code();

unsafe extern "C" fn no_get_short(
    _: uct_ep_h,
    _: *mut c_void,
    _: c_uint,
    _: u64,
    _: uct_rkey_t,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_eager_short(
    _: uct_ep_h,
    _: u64,
    _: *const c_void,
    _: usize,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_eager_bcopy(
    _: uct_ep_h,
    _: u64,
    _: u64,
    _: uct_pack_callback_t,
    _: *mut c_void,
    _: c_uint,
) -> isize {
    isize::from(UNSUPPORTED)
}
unsafe extern "C" fn no_tag_eager_zcopy(
    _: uct_ep_h,
    _: u64,
    _: u64,
    _: *const uct_iov_t,
    _: usize,
    _: c_uint,
    _: *mut uct_completion_t,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_rndv_zcopy(
    _: uct_ep_h,
    _: u64,
    _: *const c_void,
    _: c_uint,
    _: *const uct_iov_t,
    _: usize,
    _: c_uint,
    _: *mut uct_completion_t,
) -> ucs_status_ptr_t {
    guard::status_to_ptr(Status::Unsupported)
}
unsafe extern "C" fn no_tag_rndv_cancel(_: uct_ep_h, _: *mut c_void) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_rndv_request(
    _: uct_ep_h,
    _: u64,
    _: *const c_void,
    _: c_uint,
    _: c_uint,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_recv_zcopy(
    _: uct_iface_h,
    _: u64,
    _: u64,
    _: *const uct_iov_t,
    _: usize,
    _: *mut c_void,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_recv_cancel(_: uct_iface_h, _: *mut c_void, _: c_int) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_ep_check(_: uct_ep_h, _: c_uint, _: *mut uct_completion_t) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_ep_connect(_: uct_ep_h, _: *const c_void) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_ep_disconnect(_: uct_ep_h, _: c_uint) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_cm_conn_notify(_: uct_ep_h) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_accept(_: uct_iface_h, _: *mut c_void) -> ucs_status_t {
    UNSUPPORTED
}

/// The operations table of every rucx interface (the transport is chosen inside).
static OPS: uct_iface_ops_t = uct_iface_ops_t {
    ep_put_short,
    ep_put_bcopy,
    ep_put_zcopy,
    ep_get_short: no_get_short,
    ep_get_bcopy,
    ep_get_zcopy,
    ep_am_short,
    ep_am_short_iov,
    ep_am_bcopy,
    ep_am_zcopy,
    ep_atomic_cswap64,
    ep_atomic_cswap32,
    ep_atomic32_post,
    ep_atomic64_post,
    ep_atomic32_fetch,
    ep_atomic64_fetch,
    ep_tag_eager_short: no_tag_eager_short,
    ep_tag_eager_bcopy: no_tag_eager_bcopy,
    ep_tag_eager_zcopy: no_tag_eager_zcopy,
    ep_tag_rndv_zcopy: no_tag_rndv_zcopy,
    ep_tag_rndv_cancel: no_tag_rndv_cancel,
    ep_tag_rndv_request: no_tag_rndv_request,
    iface_tag_recv_zcopy: no_tag_recv_zcopy,
    iface_tag_recv_cancel: no_tag_recv_cancel,
    ep_pending_add,
    ep_pending_purge,
    ep_flush,
    ep_fence,
    ep_check: no_ep_check,
    ep_create: ep_create_op,
    ep_connect: no_ep_connect,
    ep_disconnect: no_ep_disconnect,
    cm_ep_conn_notify: no_cm_conn_notify,
    ep_destroy: ep_destroy_op,
    ep_get_address: ep_get_address_op,
    ep_connect_to_ep: ep_connect_to_ep_op,
    iface_accept: no_accept,
    iface_reject: no_accept,
    iface_flush,
    iface_fence,
    iface_progress_enable,
    iface_progress_disable,
    iface_progress,
    iface_event_fd_get,
    iface_event_arm,
    iface_close: iface_close_op,
    iface_query: iface_query_op,
    iface_get_device_address: iface_get_device_address_op,
    iface_get_address: iface_get_address_op,
    iface_is_reachable: iface_is_reachable_op,
};

// ----- exports ----------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn uct_iface_open(
    md: *mut c_void,
    worker: *mut c_void,
    params: *const uct_iface_params_head_t,
    config: *const c_void,
    iface_p: *mut uct_iface_h,
) -> ucs_status_t {
    guard::status("uct_iface_open", || {
        // SAFETY: per the API.
        let m: &MdObj = unsafe { md::md_obj(md) }?;
        // SAFETY: per the API.
        unsafe { worker_obj(worker) }?;
        if params.is_null() || iface_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params; field_mask and open_mode come first, the device
        // names are read only in device mode.
        let p = unsafe { &*params };
        if p.field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE == 0
            || p.open_mode & UCT_IFACE_OPEN_MODE_DEVICE == 0
        {
            return Err(Status::Unsupported);
        }
        // SAFETY: C strings per the API.
        let (tl, dev) = unsafe { (cstr(p.tl_name), cstr(p.dev_name)) };
        let (tl, dev) = (
            tl.ok_or(Status::InvalidParam)?,
            dev.ok_or(Status::InvalidParam)?,
        );
        if tl != m.comp.name || !m.comp.devices().iter().any(|d| d == dev) {
            return Err(Status::NoDevice);
        }
        // SAFETY: a configuration of rucx or null.
        let cfg = unsafe { md::iface_config(config) }?;
        let transport = m.comp.flavor.transport();
        let rust_dev = if m.comp.flavor == Flavor::Tcp {
            dev
        } else {
            transport.device()
        };
        let tl = uct::Iface::open_device(transport, rust_dev, &cfg)?;
        let empty = AmSlot {
            cb: None,
            arg: std::ptr::null_mut(),
        };
        let obj = Box::new(IfaceObj {
            c: UctIfaceC { ops: OPS },
            magic: IFACE_MAGIC,
            flavor: m.comp.flavor,
            md,
            worker,
            progress_id: Cell::new(None),
            progress_flags: Cell::new(0),
            am: std::array::from_fn(|_| Cell::new(empty)),
            dispatching: Cell::new(std::ptr::null()),
            inner: RefCell::new(Inner {
                tl,
                stage: Vec::new(),
                msgs: Vec::new(),
                pending: VecDeque::new(),
                waiters: Vec::new(),
                bounce: Vec::new(),
            }),
        });
        // SAFETY: checked non-null.
        unsafe { *iface_p = Box::into_raw(obj) as uct_iface_h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_close(iface: uct_iface_h) {
    guard::void("uct_iface_close", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let _ = stop_progress(ifc);
        let waiters = ifc
            .inner
            .try_borrow_mut()
            .map(|mut g| std::mem::take(&mut g.waiters))
            .unwrap_or_default();
        for (_, comp) in waiters {
            // SAFETY: a completion the program gave a flush of this interface.
            unsafe { complete(comp, Status::Canceled) };
        }
        // SAFETY: made by Box::into_raw in uct_iface_open; the magic is cleared.
        unsafe {
            let b = iface as *mut IfaceObj;
            (*b).magic = 0;
            drop(Box::from_raw(b));
        }
        Ok(())
    })
}

/// UCT capability flags of an interface.
fn cap_flags(flavor: Flavor, caps: Caps) -> u64 {
    let pairs = [
        (Caps::AM_SHORT, UCT_IFACE_FLAG_AM_SHORT),
        (Caps::AM_BCOPY, UCT_IFACE_FLAG_AM_BCOPY),
        (Caps::AM_ZCOPY, UCT_IFACE_FLAG_AM_ZCOPY),
        (Caps::PUT_SHORT, UCT_IFACE_FLAG_PUT_SHORT),
        (Caps::PUT_BCOPY, UCT_IFACE_FLAG_PUT_BCOPY),
        (Caps::PUT_ZCOPY, UCT_IFACE_FLAG_PUT_ZCOPY),
        (Caps::GET_BCOPY, UCT_IFACE_FLAG_GET_BCOPY),
        (Caps::GET_ZCOPY, UCT_IFACE_FLAG_GET_ZCOPY),
        (Caps::CONNECT_TO_IFACE, UCT_IFACE_FLAG_CONNECT_TO_IFACE),
    ];
    let mut f = UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC;
    for (c, u) in pairs {
        if caps.contains(c) {
            f |= u;
        }
    }
    if caps.intersects(Caps::ATOMIC32 | Caps::ATOMIC64) {
        f |= UCT_IFACE_FLAG_ATOMIC_CPU;
    }
    if flavor == Flavor::Cma {
        // UCX's cma: one-copy put and get only.
        f &= UCT_IFACE_FLAG_PUT_ZCOPY
            | UCT_IFACE_FLAG_GET_ZCOPY
            | UCT_IFACE_FLAG_CONNECT_TO_IFACE
            | UCT_IFACE_FLAG_PENDING;
    }
    f
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_query(
    iface: uct_iface_h,
    attr: *mut uct_iface_attr_t,
) -> ucs_status_t {
    guard::status("uct_iface_query", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        let g = ifc.inner.try_borrow().map_err(|_| Status::Busy)?;
        let r = g.tl.attr();
        // SAFETY: uct_iface_attr_t has no field mask in UCX 1.13: the caller passes the
        // whole struct; all-zero is a valid value of every field.
        let a = unsafe {
            std::ptr::write_bytes(attr, 0, 1);
            &mut *attr
        };
        let flags = cap_flags(ifc.flavor, r.caps);
        let has = |f: u64| flags & f != 0;
        let tcp = ifc.flavor == Flavor::Tcp;
        a.cap.flags = flags;
        if has(UCT_IFACE_FLAG_PUT_SHORT) {
            a.cap.put.max_short = r.max_put_short;
        }
        if has(UCT_IFACE_FLAG_PUT_BCOPY) {
            a.cap.put.max_bcopy = r.max_put_bcopy;
        }
        if has(UCT_IFACE_FLAG_PUT_ZCOPY) {
            a.cap.put.max_zcopy = r.max_put_zcopy;
            a.cap.put.max_iov = if tcp { TCP_PUT_MAX_IOV } else { MAX_IOV };
        }
        a.cap.put.opt_zcopy_align = 1;
        a.cap.put.align_mtu = 1;
        if has(UCT_IFACE_FLAG_GET_BCOPY) {
            a.cap.get.max_bcopy = r.max_get_bcopy;
        }
        if has(UCT_IFACE_FLAG_GET_ZCOPY) {
            a.cap.get.max_zcopy = r.max_get_zcopy;
            a.cap.get.max_iov = MAX_IOV;
        }
        a.cap.get.opt_zcopy_align = 1;
        a.cap.get.align_mtu = 1;
        if has(UCT_IFACE_FLAG_AM_SHORT) {
            // UCT counts the 8-byte header in max_short.
            a.cap.am.max_short = r.max_am_short + 8;
        }
        if has(UCT_IFACE_FLAG_AM_BCOPY) {
            a.cap.am.max_bcopy = r.max_am_bcopy;
        }
        if has(UCT_IFACE_FLAG_AM_ZCOPY) {
            a.cap.am.max_zcopy = r.max_am_zcopy;
            a.cap.am.max_hdr = r.max_am_hdr;
            a.cap.am.max_iov = MAX_IOV;
        }
        a.cap.am.opt_zcopy_align = 1;
        a.cap.am.align_mtu = 1;
        if has(UCT_IFACE_FLAG_ATOMIC_CPU) {
            let ops = (1 << UCT_ATOMIC_OP_ADD)
                | (1 << UCT_ATOMIC_OP_AND)
                | (1 << UCT_ATOMIC_OP_OR)
                | (1 << UCT_ATOMIC_OP_XOR);
            let fops = ops | (1 << UCT_ATOMIC_OP_SWAP) | (1 << UCT_ATOMIC_OP_CSWAP);
            if r.caps.contains(Caps::ATOMIC32) {
                a.cap.atomic32.op_flags = ops;
                a.cap.atomic32.fop_flags = fops;
            }
            if r.caps.contains(Caps::ATOMIC64) {
                a.cap.atomic64.op_flags = ops;
                a.cap.atomic64.fop_flags = fops;
            }
        }
        if r.caps.contains(Caps::EVENT_RECV) && g.tl.event_fd().is_some() {
            a.cap.event_flags = UCT_IFACE_FLAG_EVENT_RECV | UCT_IFACE_FLAG_EVENT_FD;
        }
        a.device_addr_len = r.device_addr_len;
        a.iface_addr_len = r.iface_addr_len;
        a.ep_addr_len = 0;
        a.overhead = r.cost.overhead;
        a.bandwidth = uct_ppn_bandwidth_t {
            dedicated: r.cost.bandwidth,
            shared: 0.0,
        };
        a.latency = ucs_linear_func_t {
            c: r.cost.latency,
            m: 0.0,
        };
        a.priority = 0;
        a.max_num_eps = usize::MAX;
        a.dev_num_paths = 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_get_device_address(
    iface: uct_iface_h,
    addr: *mut u8,
) -> ucs_status_t {
    guard::status("uct_iface_get_device_address", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let a = ifc
            .inner
            .try_borrow()
            .map_err(|_| Status::Busy)?
            .tl
            .device_address();
        copy_out(addr, &a)
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_get_address(iface: uct_iface_h, addr: *mut u8) -> ucs_status_t {
    guard::status("uct_iface_get_address", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let a = ifc
            .inner
            .try_borrow()
            .map_err(|_| Status::Busy)?
            .tl
            .address();
        copy_out(addr, &a)
    })
}

/// Writes an address into the caller's buffer (of the length `uct_iface_query` gave).
fn copy_out(dst: *mut u8, src: &[u8]) -> Result<()> {
    if dst.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the caller's buffer holds the address length the interface reports, which is
    // the length of `src`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_is_reachable(
    iface: uct_iface_h,
    dev_addr: *const u8,
    iface_addr: *const u8,
) -> c_int {
    guard::value("uct_iface_is_reachable", 0, || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if dev_addr.is_null() || iface_addr.is_null() {
            return Ok(0);
        }
        let g = ifc.inner.try_borrow().map_err(|_| Status::Busy)?;
        let r = g.tl.attr();
        // SAFETY: addresses of the same transport, whose lengths the interface reports.
        let (d, a) = unsafe {
            (
                std::slice::from_raw_parts(dev_addr, r.device_addr_len),
                std::slice::from_raw_parts(iface_addr, r.iface_addr_len),
            )
        };
        Ok(c_int::from(g.tl.is_reachable(d, a)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_set_am_handler(
    iface: uct_iface_h,
    id: u8,
    cb: uct_am_callback_t,
    arg: *mut c_void,
    _flags: u32,
) -> ucs_status_t {
    guard::status("uct_iface_set_am_handler", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let slot = ifc.am.get(usize::from(id)).ok_or(Status::InvalidParam)?;
        slot.set(AmSlot { cb, arg });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_event_fd_get(
    iface: uct_iface_h,
    fd_p: *mut c_int,
) -> ucs_status_t {
    // SAFETY: the operation itself.
    unsafe { iface_event_fd_get(iface, fd_p) }
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_event_arm(iface: uct_iface_h, events: c_uint) -> ucs_status_t {
    // SAFETY: the operation itself.
    unsafe { iface_event_arm(iface, events) }
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_mem_alloc(
    iface: uct_iface_h,
    length: usize,
    _flags: c_uint,
    _name: *const std::ffi::c_char,
    mem: *mut uct_allocated_memory_t,
) -> ucs_status_t {
    guard::status("uct_iface_mem_alloc", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if mem.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the domain the interface was opened with (alive while it is).
        let m = unsafe { md::md_obj(ifc.md) }?;
        let (memh, address, method) = md::alloc(m, length)?;
        // SAFETY: checked non-null.
        unsafe {
            *mem = uct_allocated_memory_t {
                address,
                length,
                method,
                mem_type: UCS_MEMORY_TYPE_HOST,
                md: ifc.md,
                memh,
            };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_mem_free(mem: *const uct_allocated_memory_t) {
    guard::void("uct_iface_mem_free", || {
        if mem.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: a descriptor filled by uct_iface_mem_alloc.
        unsafe { md::free_mem((*mem).memh) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_create(
    params: *const uct_ep_params_head_t,
    ep_p: *mut uct_ep_h,
) -> ucs_status_t {
    guard::status("uct_ep_create", || {
        if params.is_null() || ep_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read up to iface_addr as field_mask allows.
        let p = unsafe { &*params };
        if p.field_mask & UCT_EP_PARAM_FIELD_IFACE == 0 {
            return Err(Status::InvalidParam);
        }
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(p.iface) }?;
        let want = UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
        if p.field_mask & want != want || p.iface_addr.is_null() || p.dev_addr.is_null() {
            // Connect-to-endpoint is not offered (ep_addr_len is 0).
            return Err(Status::Unsupported);
        }
        let id = with_tl(ifc, |tl| {
            let r = tl.attr();
            // SAFETY: addresses of this transport, of the lengths it reports.
            let (d, a) = unsafe {
                (
                    std::slice::from_raw_parts(p.dev_addr, r.device_addr_len),
                    std::slice::from_raw_parts(p.iface_addr, r.iface_addr_len),
                )
            };
            if !tl.is_reachable(d, a) {
                return Err(Status::Unreachable);
            }
            tl.ep_create(a)
        })?;
        let e = Box::new(EpObj {
            c: UctEpC { iface: p.iface },
            magic: EP_MAGIC,
            id,
            pending: Cell::new(0),
        });
        // SAFETY: checked non-null.
        unsafe { *ep_p = Box::into_raw(e) as uct_ep_h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_destroy(ep: uct_ep_h) {
    guard::void("uct_ep_destroy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        let _ = purge(ifc, e);
        let waiters = ifc
            .inner
            .try_borrow_mut()
            .map(|mut g| {
                let mut mine = Vec::new();
                g.waiters.retain(|&(w, comp)| {
                    let m = w == Some(e.id);
                    if m {
                        mine.push(comp);
                    }
                    !m
                });
                let _ = g.tl.ep_destroy(e.id);
                mine
            })
            .unwrap_or_default();
        for comp in waiters {
            // SAFETY: a completion the program gave a flush of this endpoint.
            unsafe { complete(comp, Status::Canceled) };
        }
        // SAFETY: made by Box::into_raw in uct_ep_create; the magic is cleared.
        unsafe {
            let b = ep as *mut EpObj;
            (*b).magic = 0;
            drop(Box::from_raw(b));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_get_address(ep: uct_ep_h, _addr: *mut u8) -> ucs_status_t {
    guard::status("uct_ep_get_address", || {
        // SAFETY: per the API.
        unsafe { ep_obj(ep) }?;
        // Endpoints connect to interfaces; there is no endpoint address.
        Err(Status::Unsupported)
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_connect_to_ep(
    ep: uct_ep_h,
    _dev: *const u8,
    _ep_addr: *const u8,
) -> ucs_status_t {
    guard::status("uct_ep_connect_to_ep", || {
        // SAFETY: per the API.
        unsafe { ep_obj(ep) }?;
        Err(Status::Unsupported)
    })
}
