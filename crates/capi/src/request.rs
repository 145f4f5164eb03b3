//! C requests: the memory a request pointer names, its life cycle, and the `ucp_request_*`
//! functions.
//!
//! ```text
//!  block (pooled, or memory of the caller for UCP_OP_ATTR_FIELD_REQUEST)
//!  +----------------------------+------------------------------------+
//!  | ReqHdr (HDR_SIZE bytes)    | user area (ucp_params_t.request_size) |
//!  +----------------------------+------------------------------------+
//!                               ^ the request pointer the caller sees
//! ```
//! `ucp_context_query` reports `HDR_SIZE` as the request size, so a caller that brings its
//! own request memory reserves exactly the header in front of its pointer, as with UCX.
//!
//! Pooled blocks belong to a worker; `request_init` runs once on the user area of a block
//! when the block is created, `request_cleanup` when the worker frees its pool.
//!
//! Life cycle, with the flag word of the header (atomic, so that `ucp_request_free` from
//! one thread and completion on another agree):
//! - started: `CALLBACK` if a callback was given; the Rust request behind it is released
//!   at once ("fire and forget") and its completion arrives through the worker's
//!   completion queue;
//! - completed: status and receive information are stored, the callback runs (never while
//!   the Rust worker is borrowed), then `COMPLETED` is set;
//! - `ucp_request_free` clears `CALLBACK` and sets `RELEASED`; whichever of free and
//!   completion comes second returns the block to the pool. `ucp_request_release` is the
//!   same but keeps the callback.

use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::worker::Wk;
use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use ucs::{Result, Status};

/// Bytes of our header in front of every request.
pub(crate) const HDR_SIZE: usize = 128;
/// Alignment of pooled blocks.
const BLOCK_ALIGN: usize = 64;

pub(crate) const MAGIC_LIVE: u32 = 0x5251_4c56;
pub(crate) const MAGIC_FREE: u32 = 0x5251_4652;

pub(crate) const F_CALLBACK: u32 = 1 << 0;
pub(crate) const F_COMPLETED: u32 = 1 << 1;
pub(crate) const F_RELEASED: u32 = 1 << 2;
/// The memory is the caller's (`UCP_OP_ATTR_FIELD_REQUEST`): never pooled.
pub(crate) const F_USER: u32 = 1 << 3;
/// A tag receive: `info` is meaningful.
pub(crate) const F_RECV: u32 = 1 << 4;
/// A 32-bit fetching atomic: copy `staging` to `result` on completion.
pub(crate) const F_AMO32: u32 = 1 << 5;
/// `rust_id` names the Rust request behind this one.
pub(crate) const F_RUST: u32 = 1 << 6;
/// A pooled block handed out by `ucp_request_alloc`: the application uses it as its
/// own request memory (`UCP_OP_ATTR_FIELD_REQUEST`) and gives it back with
/// `ucp_request_free`.
pub(crate) const F_ALLOCATED: u32 = 1 << 7;

/// Which C callback signature the request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CbKind {
    Send = 1,
    SendNbx = 2,
    TagRecv = 3,
    TagRecvNbx = 4,
    StreamRecv = 5,
    /// Also the signature of `ucp_am_recv_data_nbx_callback_t`.
    LengthNbx = 6,
}

/// The header in front of a request.
#[repr(C)]
pub(crate) struct ReqHdr {
    pub magic: AtomicU32,
    pub flags: AtomicU32,
    /// `ucs_status_t` value, widened.
    pub status: AtomicI32,
    pub cb_kind: u8,
    _pad: [u8; 3],
    pub worker: *const Handle<Wk>,
    pub worker_gen: u64,
    pub cb: usize,
    pub user_data: *mut c_void,
    pub info: ucp_tag_recv_info_t,
    /// The Rust request (`Request::to_u64`), when `F_RUST` is set.
    pub rust_id: u64,
    /// Where a 32-bit fetching atomic's result goes.
    pub result: *mut u8,
    /// The 64-bit result of a 32-bit fetching atomic, as the protocol layer writes it.
    pub staging: u64,
    /// Size of the pooled block (0 for the caller's memory).
    pub block_size: usize,
    _reserved: [u64; 4],
}

const _: () = assert!(std::mem::size_of::<ReqHdr>() == HDR_SIZE);
const _: () = assert!(HDR_SIZE % 16 == 0);

impl ReqHdr {
    /// The pointer the caller sees.
    #[inline]
    pub(crate) fn user(hdr: *mut ReqHdr) -> *mut c_void {
        // SAFETY: the user area follows the header inside the same block.
        unsafe { hdr.cast::<u8>().add(HDR_SIZE).cast() }
    }

    /// The header of a request pointer the caller gave back.
    ///
    /// # Safety
    /// `req` must be null, an error pointer, or point `HDR_SIZE` bytes past readable
    /// memory (a request of ours).
    #[inline]
    pub(crate) unsafe fn from_user(req: *mut c_void) -> Result<*mut ReqHdr> {
        let a = req as usize;
        // Null, the error range of status pointers, and misaligned values are refused.
        if a < HDR_SIZE || a >= (UCS_ERR_LAST as isize as usize) || a % 8 != 0 {
            return Err(Status::InvalidParam);
        }
        let hdr = (a - HDR_SIZE) as *mut ReqHdr;
        // SAFETY: by the contract, the header of a request of ours precedes `req`.
        let magic = unsafe { &(*hdr).magic }.load(Ordering::Acquire);
        if magic != MAGIC_LIVE {
            return Err(Status::InvalidParam);
        }
        Ok(hdr)
    }

    /// The header for the caller's own request memory at `req`.
    pub(crate) fn for_user_memory(req: *mut c_void) -> Result<*mut ReqHdr> {
        let a = req as usize;
        if a < HDR_SIZE || a % 8 != 0 {
            return Err(Status::InvalidParam);
        }
        Ok((a - HDR_SIZE) as *mut ReqHdr)
    }

    /// Fills the header for a new operation.
    ///
    /// # Safety
    /// `hdr` must be a block of ours or the caller's request memory, not in use.
    pub(crate) unsafe fn start(hdr: *mut ReqHdr, s: &Start) {
        // SAFETY: by the contract the header memory is ours to write; the atomics are
        // written through their own API, the rest with plain field stores.
        unsafe {
            let h = &mut *hdr;
            // A block of `ucp_request_alloc` keeps its pool identity when the application
            // starts an operation on it (other request memory is the caller's).
            let allocated = s.user_memory
                && h.magic.load(Ordering::Acquire) == MAGIC_LIVE
                && h.flags.load(Ordering::Acquire) & F_ALLOCATED != 0
                && h.block_size >= HDR_SIZE;
            if s.user_memory && !allocated {
                h.block_size = 0;
            }
            h.cb_kind = s.cb_kind as u8;
            h.worker = s.worker;
            h.worker_gen = s.worker_gen;
            h.cb = s.cb;
            h.user_data = s.user_data;
            h.info = ucp_tag_recv_info_t::default();
            h.rust_id = 0;
            h.result = std::ptr::null_mut();
            h.staging = 0;
            h.status.store(i32::from(UCS_INPROGRESS), Ordering::Relaxed);
            let mut f = s.flags;
            if s.user_memory {
                f |= F_USER;
            }
            if allocated {
                f |= F_ALLOCATED;
            }
            if s.cb != 0 {
                f |= F_CALLBACK;
            }
            h.flags.store(f, Ordering::Relaxed);
            h.magic.store(MAGIC_LIVE, Ordering::Release);
        }
    }

    /// Stores the outcome (before the callback runs).
    ///
    /// # Safety
    /// `hdr` must be a live request of ours.
    pub(crate) unsafe fn set_outcome(
        hdr: *mut ReqHdr,
        status: Status,
        sender_tag: u64,
        len: usize,
    ) {
        // SAFETY: a live header; the completion path is the only writer of these fields.
        unsafe {
            let h = &mut *hdr;
            h.info = ucp_tag_recv_info_t {
                sender_tag,
                length: len,
            };
            if h.flags.load(Ordering::Relaxed) & F_AMO32 != 0 && !h.result.is_null() {
                let v = (h.staging as u32).to_ne_bytes();
                std::ptr::copy_nonoverlapping(v.as_ptr(), h.result, 4);
            }
            h.status.store(i32::from(status.code()), Ordering::Release);
        }
    }
}

/// What a new request starts with.
pub(crate) struct Start {
    pub worker: *const Handle<Wk>,
    pub worker_gen: u64,
    pub cb_kind: CbKind,
    pub cb: usize,
    pub user_data: *mut c_void,
    pub flags: u32,
    pub user_memory: bool,
}

/// A worker's pool of request blocks.
pub(crate) struct ReqPool {
    free: Vec<*mut ReqHdr>,
    user_size: usize,
    init: ucp_request_init_callback_t,
    cleanup: ucp_request_cleanup_callback_t,
}

impl ReqPool {
    pub(crate) fn new(
        user_size: usize,
        init: ucp_request_init_callback_t,
        cleanup: ucp_request_cleanup_callback_t,
    ) -> ReqPool {
        ReqPool {
            free: Vec::with_capacity(64),
            user_size,
            init,
            cleanup,
        }
    }

    fn layout(&self) -> Result<Layout> {
        Layout::from_size_align(HDR_SIZE + self.user_size, BLOCK_ALIGN)
            .map_err(|_| Status::InvalidParam)
    }

    /// A block: reused, or new (then `request_init` runs on its user area).
    #[inline]
    pub(crate) fn get(&mut self) -> Result<*mut ReqHdr> {
        if let Some(p) = self.free.pop() {
            return Ok(p);
        }
        self.grow()
    }

    #[cold]
    fn grow(&mut self) -> Result<*mut ReqHdr> {
        let layout = self.layout()?;
        // SAFETY: the layout has a non-zero size (at least the header).
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<ReqHdr>();
        if p.is_null() {
            return Err(Status::NoMemory);
        }
        // SAFETY: fresh, zeroed memory of the block's size; the header fields are plain
        // data for which zero is valid.
        unsafe {
            (*p).magic.store(MAGIC_FREE, Ordering::Relaxed);
            (*p).block_size = layout.size();
        }
        if let Some(init) = self.init {
            // SAFETY: the application's request_init on the user area of a new block, as
            // the API promises it (once per block).
            unsafe { init(ReqHdr::user(p)) };
        }
        Ok(p)
    }

    /// Returns a block.
    ///
    /// # Safety
    /// `p` must be a pooled block of this pool, no longer in use.
    pub(crate) unsafe fn put(&mut self, p: *mut ReqHdr) {
        // SAFETY: a block of ours.
        unsafe { (*p).magic.store(MAGIC_FREE, Ordering::Release) };
        self.free.push(p);
    }
}

impl Drop for ReqPool {
    fn drop(&mut self) {
        let Ok(layout) = self.layout() else { return };
        for p in self.free.drain(..) {
            if let Some(cleanup) = self.cleanup {
                // SAFETY: the application's request_cleanup on a block being freed.
                unsafe { cleanup(ReqHdr::user(p)) };
            }
            // SAFETY: allocated by `grow` with this layout, and no longer in use.
            unsafe { std::alloc::dealloc(p.cast(), layout) };
        }
    }
}

// SAFETY: the pool holds raw pointers to blocks it owns; the worker that owns the pool
// serialises access to it.
unsafe impl Send for ReqPool {}

// ----- completion ----------------------------------------------------------------------

/// Runs the callback of a completed request, then marks it completed and returns a
/// released block to its pool. Called with no worker borrowed.
///
/// # Safety
/// `hdr` must be a live request whose outcome was stored.
pub(crate) unsafe fn finish(hdr: *mut ReqHdr) {
    // SAFETY: a live header.
    let h = unsafe { &*hdr };
    let flags = h.flags.load(Ordering::Acquire);
    if flags & F_CALLBACK != 0 && h.cb != 0 {
        let req = ReqHdr::user(hdr);
        let status = h.status.load(Ordering::Acquire) as ucs_status_t;
        // SAFETY: `cb` is the non-null function the caller registered, with the
        // signature its kind names (set by the operation that started the request).
        unsafe {
            match h.cb_kind {
                k if k == CbKind::Send as u8 => {
                    std::mem::transmute::<usize, SendCb>(h.cb)(req, status)
                }
                k if k == CbKind::SendNbx as u8 => {
                    std::mem::transmute::<usize, SendNbxCb>(h.cb)(req, status, h.user_data)
                }
                k if k == CbKind::TagRecv as u8 => {
                    let mut info = h.info;
                    std::mem::transmute::<usize, TagRecvCb>(h.cb)(req, status, &mut info)
                }
                k if k == CbKind::TagRecvNbx as u8 => {
                    let info = h.info;
                    std::mem::transmute::<usize, TagRecvNbxCb>(h.cb)(
                        req,
                        status,
                        &info,
                        h.user_data,
                    )
                }
                k if k == CbKind::StreamRecv as u8 => {
                    std::mem::transmute::<usize, StreamRecvCb>(h.cb)(req, status, h.info.length)
                }
                k if k == CbKind::LengthNbx as u8 => std::mem::transmute::<usize, StreamRecvNbxCb>(
                    h.cb,
                )(
                    req, status, h.info.length, h.user_data
                ),
                _ => {}
            }
        }
    }
    let old = h.flags.fetch_or(F_COMPLETED, Ordering::AcqRel);
    if old & F_RELEASED != 0 && old & F_USER == 0 {
        // SAFETY: released by the caller and now complete: the block is ours again.
        unsafe { recycle(hdr) };
    }
}

/// Returns a pooled block to its worker's pool (or frees it if the worker is gone).
///
/// # Safety
/// `hdr` must be a pooled block no one uses any more.
pub(crate) unsafe fn recycle(hdr: *mut ReqHdr) {
    // SAFETY: a block of ours.
    let (w, gen, size) = unsafe { ((*hdr).worker, (*hdr).worker_gen, (*hdr).block_size) };
    // SAFETY: the worker pointer was a live handle when the request started; cells are
    // never freed, and the generation check catches a destroyed or reused worker.
    match unsafe { Handle::<Wk>::get_gen(w, gen) } {
        Ok(wk) => {
            if wk
                // SAFETY: the block is a pooled block of this worker, unused now.
                .with_pool(|pool| unsafe { pool.put(hdr) })
                .is_ok()
            {
                return;
            }
            // The worker is busy on this thread (a free from inside a generic datatype
            // callback): let the block go.
            // SAFETY: a block of ours that nobody uses.
            unsafe { free_block(hdr, size) };
        }
        // SAFETY: as above.
        Err(_) => unsafe { free_block(hdr, size) },
    }
}

/// Frees a block whose pool is gone.
unsafe fn free_block(hdr: *mut ReqHdr, size: usize) {
    // SAFETY: a block of ours.
    unsafe { (*hdr).magic.store(MAGIC_FREE, Ordering::Release) };
    if let Ok(l) = Layout::from_size_align(size, BLOCK_ALIGN) {
        if size >= HDR_SIZE {
            // SAFETY: pooled blocks are allocated with exactly this layout.
            unsafe { std::alloc::dealloc(hdr.cast(), l) };
        }
    }
}

// ----- exports -------------------------------------------------------------------------

/// Status of a request: `INPROGRESS` until its callback ran.
fn check(hdr: *mut ReqHdr) -> ucs_status_t {
    // SAFETY: validated by `from_user`.
    let h = unsafe { &*hdr };
    if h.flags.load(Ordering::Acquire) & F_COMPLETED != 0 {
        h.status.load(Ordering::Acquire) as ucs_status_t
    } else {
        UCS_INPROGRESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t {
    guard::value("ucp_request_check_status", UCS_ERR_INVALID_PARAM, || {
        // SAFETY: the caller passes a request of ours (or garbage the check refuses).
        let hdr = unsafe { ReqHdr::from_user(request)? };
        Ok(check(hdr))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_is_completed(request: *mut c_void) -> std::ffi::c_int {
    // SAFETY: forwarded contract.
    let s = unsafe { ucp_request_check_status(request) };
    std::ffi::c_int::from(s != UCS_INPROGRESS)
}

unsafe fn test_info(request: *mut c_void, info: *mut ucp_tag_recv_info_t) -> Result<ucs_status_t> {
    // SAFETY: forwarded contract.
    let hdr = unsafe { ReqHdr::from_user(request)? };
    let s = check(hdr);
    if s != UCS_INPROGRESS && !info.is_null() {
        // SAFETY: a live header; `info` is the caller's writable struct.
        unsafe { info.write_unaligned((*hdr).info) };
    }
    Ok(s)
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    guard::value("ucp_request_test", UCS_ERR_INVALID_PARAM, || unsafe {
        test_info(request, info)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    guard::value(
        "ucp_tag_recv_request_test",
        UCS_ERR_INVALID_PARAM,
        || unsafe { test_info(request, info) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_request_test(
    request: *mut c_void,
    length_p: *mut usize,
) -> ucs_status_t {
    guard::value(
        "ucp_stream_recv_request_test",
        UCS_ERR_INVALID_PARAM,
        || {
            // SAFETY: forwarded contract.
            let hdr = unsafe { ReqHdr::from_user(request)? };
            let s = check(hdr);
            if s != UCS_INPROGRESS && !length_p.is_null() {
                // SAFETY: live header; the caller's writable length.
                unsafe { length_p.write_unaligned((*hdr).info.length) };
            }
            Ok(s)
        },
    )
}

unsafe fn release(request: *mut c_void, drop_callback: bool) -> Result<()> {
    // SAFETY: forwarded contract.
    let hdr = unsafe { ReqHdr::from_user(request)? };
    // SAFETY: validated.
    let h = unsafe { &*hdr };
    let mut old = h.flags.load(Ordering::Acquire);
    if old & F_USER != 0 && old & F_ALLOCATED == 0 {
        // The caller's own memory: nothing of ours to release.
        return Ok(());
    }
    if old & F_USER != 0 {
        // A block of `ucp_request_alloc`: from now on it completes and is recycled like
        // a block the library handed out.
        loop {
            match h.flags.compare_exchange_weak(
                old,
                old & !F_USER,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(cur) => old = cur,
            }
        }
        old &= !F_USER;
    }
    loop {
        if old & F_RELEASED != 0 {
            return Err(Status::InvalidParam);
        }
        let mut new = old | F_RELEASED;
        if drop_callback {
            new &= !F_CALLBACK;
        }
        match h
            .flags
            .compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => break,
            Err(cur) => old = cur,
        }
    }
    if old & F_COMPLETED != 0 {
        // SAFETY: completed and now released: nobody refers to the block any more.
        unsafe { recycle(hdr) };
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_free(request: *mut c_void) {
    // SAFETY: forwarded contract.
    guard::void("ucp_request_free", || unsafe { release(request, true) })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_release(request: *mut c_void) {
    // SAFETY: forwarded contract.
    guard::void("ucp_request_release", || unsafe { release(request, false) })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_cancel(worker: *mut Handle<Wk>, request: *mut c_void) {
    guard::void("ucp_request_cancel", || {
        // SAFETY: the caller passes its worker handle.
        let wk = unsafe { Handle::get(worker)? };
        // SAFETY: forwarded contract.
        let hdr = unsafe { ReqHdr::from_user(request)? };
        // SAFETY: validated.
        let h = unsafe { &*hdr };
        let f = h.flags.load(Ordering::Acquire);
        if f & F_COMPLETED != 0 || f & F_RUST == 0 {
            return Ok(());
        }
        let id = h.rust_id;
        wk.run(|w, _| {
            let r = ucp::Request::from_u64(id);
            // A stale id (the request completed meanwhile) is refused by the pool check.
            let _ = w.request_cancel(r);
            w.progress();
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_query(
    request: *mut c_void,
    attr: *mut ucp_request_attr_t,
) -> ucs_status_t {
    guard::status("ucp_request_query", || {
        // SAFETY: forwarded contract.
        let hdr = unsafe { ReqHdr::from_user(request)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct; fields are accessed by the mask.
        unsafe {
            let mask = (*attr).field_mask;
            if mask & UCP_REQUEST_ATTR_FIELD_STATUS != 0 {
                (*attr).status = check(hdr);
            }
            if mask & UCP_REQUEST_ATTR_FIELD_MEM_TYPE != 0 {
                (*attr).mem_type = UCS_MEMORY_TYPE_HOST;
            }
            if mask & UCP_REQUEST_ATTR_FIELD_INFO_STRING != 0 {
                let s = b"rucx request";
                let size = if mask & UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE != 0 {
                    (*attr).debug_string_size
                } else {
                    0
                };
                let out = (*attr).debug_string;
                if !out.is_null() && size > 0 {
                    let n = s.len().min(size - 1);
                    std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
                    *out.add(n) = 0;
                }
            }
        }
        Ok(())
    })
}

/// An empty request of the worker's pool, for the application to pass as its request
/// memory (`UCP_OP_ATTR_FIELD_REQUEST`) to operations, and to give back with
/// `ucp_request_free`. It reads as completed (`UCS_OK`) until an operation uses it.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_alloc(worker: *mut Handle<Wk>) -> *mut c_void {
    guard::value("ucp_request_alloc", std::ptr::null_mut(), || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { crate::worker::get(worker)? };
        let mut block = Err(Status::NoMemory);
        wk.with_pool(|pool| block = pool.get())?;
        let hdr = block?;
        let (me, gen) = wk.me();
        // SAFETY: a pooled block, not in use.
        unsafe {
            ReqHdr::start(
                hdr,
                &Start {
                    worker: me,
                    worker_gen: gen,
                    cb_kind: CbKind::SendNbx,
                    cb: 0,
                    user_data: std::ptr::null_mut(),
                    flags: F_ALLOCATED | F_COMPLETED,
                    user_memory: false,
                },
            );
            (*hdr).status.store(i32::from(UCS_OK), Ordering::Release);
        }
        Ok(ReqHdr::user(hdr))
    })
}
