//! Interface and endpoint objects (UCX's layout first), progress, and the exported interface and
//! endpoint functions; the operations table UCX's inline calls dispatch through is in `ops`.
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
use super::ops::{iface_event_arm, iface_event_fd_get, purge, stop_progress, OPS};
use super::worker::worker_obj;
use crate::ffi::ucs_status_t;
use crate::guard;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use ucs::{Result, Status};
use uct::{Caps, EpId, Outcome};

pub(super) const IFACE_MAGIC: u64 = 0x7275_6378_6966_0006;
pub(super) const EP_MAGIC: u64 = 0x7275_6378_6570_0007;

/// Most iov entries a zero-copy operation takes (they are gathered on the stack).
pub(super) const MAX_IOV: usize = 8;
/// Most iov entries tcp's put_zcopy takes.
pub(super) const TCP_PUT_MAX_IOV: usize = 4;

pub(super) const OK: ucs_status_t = 0;
pub(super) const INPROGRESS: ucs_status_t = 1;

/// One active-message handler slot.
#[derive(Clone, Copy)]
pub(super) struct AmSlot {
    pub(super) cb: uct_am_callback_t,
    pub(super) arg: *mut c_void,
}

/// A message staged by progress: (id, offset in words, length in bytes).
pub(super) type Staged = (u8, usize, usize);

pub(super) struct Inner {
    pub(super) tl: uct::Iface,
    /// Messages of the current progress call, 8-byte aligned each.
    pub(super) stage: Vec<u64>,
    pub(super) msgs: Vec<Staged>,
    /// Pending requests in order: (endpoint, request).
    pub(super) pending: VecDeque<(*const EpObj, *mut uct_pending_req_t)>,
    /// Flushes that returned `UCS_INPROGRESS` with a completion: (endpoint or the whole
    /// interface, completion).
    pub(super) waiters: Vec<(Option<EpId>, *mut uct_completion_t)>,
    /// put_bcopy's packing buffer (max_put_bcopy bytes once used).
    pub(super) bounce: Vec<u8>,
}

/// A `uct_iface_h`. Starts with UCX's `uct_iface_t` (the operations table).
#[repr(C)]
pub(super) struct IfaceObj {
    pub(super) c: UctIfaceC,
    pub(super) magic: u64,
    pub(super) flavor: Flavor,
    pub(super) md: *mut c_void,
    pub(super) worker: *mut c_void,
    /// The progress callback id in the worker, when progress is enabled.
    pub(super) progress_id: Cell<Option<c_int>>,
    pub(super) progress_flags: Cell<c_uint>,
    pub(super) am: [Cell<AmSlot>; uct::AM_ID_MAX as usize],
    /// The endpoint whose pending request is running (it may send past its queue).
    pub(super) dispatching: Cell<*const EpObj>,
    pub(super) inner: RefCell<Inner>,
}

const _: () = assert!(std::mem::offset_of!(IfaceObj, c) == 0);

/// A `uct_ep_h`. Starts with UCX's `uct_ep_t` (the interface pointer).
#[repr(C)]
pub(super) struct EpObj {
    pub(super) c: UctEpC,
    pub(super) magic: u64,
    pub(super) id: EpId,
    /// Requests of this endpoint in its interface's pending queue.
    pub(super) pending: Cell<u32>,
}

const _: () = assert!(std::mem::offset_of!(EpObj, c) == 0);

impl EpObj {
    /// True when operations must queue behind this endpoint's pending requests.
    #[inline]
    pub(super) fn blocked(&self, ifc: &IfaceObj) -> bool {
        self.pending.get() != 0 && !std::ptr::eq(ifc.dispatching.get(), self)
    }
}

/// The interface behind a `uct_iface_h`.
///
/// # Safety
/// `p` is null or an interface of rucx (checked by its magic).
#[inline]
pub(super) unsafe fn iface_obj<'a>(p: uct_iface_h) -> Result<&'a IfaceObj> {
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
pub(super) unsafe fn ep_obj<'a>(p: uct_ep_h) -> Result<(&'a IfaceObj, &'a EpObj)> {
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
pub(super) fn with_tl<T>(
    ifc: &IfaceObj,
    f: impl FnOnce(&mut uct::Iface) -> Result<T>,
) -> Result<T> {
    let mut g = ifc.inner.try_borrow_mut().map_err(|_| Status::NoResource)?;
    f(&mut g.tl)
}

/// The C status of an operation outcome.
#[inline]
pub(super) fn outcome<T>(r: Result<Outcome<T>>) -> Result<ucs_status_t> {
    match r? {
        Outcome::Done(_) => Ok(OK),
        Outcome::InProgress => Ok(INPROGRESS),
        Outcome::NoResource => Ok(Status::NoResource.code()),
    }
}

/// For operations returning `ucs_status_t`: a panic becomes `UCS_ERR_IO_ERROR`.
#[inline]
pub(super) fn st(name: &str, f: impl FnOnce() -> Result<ucs_status_t>) -> ucs_status_t {
    match guard::value(name, Err(Status::IoError), || Ok(f())) {
        Ok(s) => s,
        Err(e) => e.code(),
    }
}

/// For operations returning `ssize_t`: a length, or a negative status.
#[inline]
pub(super) fn sz(name: &str, f: impl FnOnce() -> Result<isize>) -> isize {
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
pub(super) unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8]> {
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
pub(super) unsafe fn iov_slices<'a>(
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
pub(super) unsafe fn iov_slices_mut<'a>(
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
pub(super) unsafe fn complete(comp: *mut uct_completion_t, status: Status) {
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
pub(super) fn progress(ifc: &IfaceObj) -> c_uint {
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
pub(super) fn dispatch_pending(ifc: &IfaceObj) -> c_uint {
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
pub(super) unsafe extern "C" fn worker_cb(arg: *mut c_void) -> c_uint {
    // SAFETY: registered with the interface as its argument, removed before it is freed.
    unsafe { super::ops::iface_progress(arg as uct_iface_h) }
}

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
pub(super) fn cap_flags(flavor: Flavor, caps: Caps) -> u64 {
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
pub(super) fn copy_out(dst: *mut u8, src: &[u8]) -> Result<()> {
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
