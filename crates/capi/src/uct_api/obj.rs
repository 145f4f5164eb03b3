//! Interface and endpoint objects (UCX's layout first), the helpers every operation uses,
//! and progress. The exported interface and endpoint functions are in `iface`, the
//! operations table UCX's inline calls dispatch through in `ops`.
//!
//! Re-entrancy: an active-message handler, a pending callback or a completion callback may
//! call any UCT function, including operations on the interface that is being progressed.
//! So no borrow of the Rust interface is held while C code runs, except for the pack and
//! unpack callbacks of bcopy operations (which UCX documents as data copies only; an
//! operation called from inside one returns `UCS_ERR_NO_RESOURCE`). Progress copies the
//! messages the transport delivered into a staging buffer owned by the interface (grown
//! once, reused), releases the interface, then calls the handlers.

use super::ffi::*;
use super::md::Flavor;
use crate::ffi::ucs_status_t;
use crate::guard;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use ucs::{Result, Status};
use uct::{EpId, Outcome};

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
