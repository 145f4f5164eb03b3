//! The worker core: the C worker handle around a `ucp::Worker`, the rule that C code never
//! runs while the Rust worker is borrowed, the request headers and their pool, the handles
//! that belong to a worker (endpoints, listeners, connection requests), and the way one
//! operation is started and concluded. Every API family builds on this module; it imports
//! none of them.
//!
//! # The borrow rule
//! Every call into the Rust worker goes through [`Wk::with`]: it takes the worker's lock
//! (thread mode multi only; single and serialized take none), marks the worker busy (a call
//! that re-enters from code running inside the worker, such as a generic datatype callback,
//! gets `UCS_ERR_INVALID_PARAM` instead of aliasing it), runs the Rust call, and then moves
//! the completions the worker reported onto the worker's ready list. The C callbacks run
//! later, from `dispatch`, with the worker released.
//!
//! # Thread mode multi
//! A worker of thread mode multi has a mutex that the hot calls never wait for. Tag sends
//! and receives, `ucp_worker_progress`, taking the ready list and giving a request back
//! take it with a try-lock. A send or receive that finds the worker held is posted as a
//! value (`ucp::shared::Op`, see [`crate::posted`]), with its request header made and
//! given out at once, on a lock-free FIFO; whoever holds the worker runs the FIFO before
//! its own call, and after releasing the worker looks at it again, so nothing posted is
//! left behind (each side fences before looking at the other's part).
//! `ucp_worker_progress` that finds the worker held returns 0. A request block given back
//! while the worker is held goes to a lock-free spare list. Other calls (endpoints,
//! memory, active messages, RMA, flush) still wait for the mutex: they are not on the
//! per-message path.
//!
//! # Requests
//! ```text
//!  block (pooled, or memory of the caller for UCP_OP_ATTR_FIELD_REQUEST)
//!  +----------------------------+---------------------------------------+
//!  | ReqHdr (HDR_SIZE bytes)    | user area (ucp_params_t.request_size) |
//!  +----------------------------+---------------------------------------+
//!                               ^ the request pointer the caller sees
//! ```
//! `ucp_context_query` reports `HDR_SIZE` as the request size, so a caller that brings its
//! own request memory reserves exactly the header in front of its pointer, as with UCX.
//!
//! # One completion path
//! An operation takes its header first and starts the Rust operation with
//! `ucp::Callback::Word(header address)`. The Rust request is released at once ("fire and
//! forget"); the worker reports its completion through `Worker::drain_completed` with that
//! word, which [`Wk::with`] turns into the header's outcome and a place on the ready list
//! (linked through the header itself). No table maps Rust requests to C requests. While a
//! request is outstanding its header is on the worker's in-flight list (also linked
//! through the header), so that destroying the worker can mark it canceled.
//!
//! Life cycle, with the flag word of the header. For a worker with a lock (thread mode
//! multi, or a progress thread) every change of it is an atomic read-modify-write, so that
//! `ucp_request_free` from one thread and completion on another agree; the header says so
//! with `F_SHARED`. Otherwise the thread mode promises one thread at a time, and a change
//! is a plain load and store (a locked instruction per change cost more than the change):
//! - started: `CALLBACK` if a callback was given;
//! - completed: status and receive information are stored, the callback runs (never while
//!   the Rust worker is borrowed), then `COMPLETED` is set;
//! - `ucp_request_free` clears `CALLBACK` and sets `RELEASED`; whichever of free and
//!   completion comes second returns the block to the pool. `ucp_request_release` is the
//!   same but keeps the callback.

use crate::am_small::SmallAm;
use crate::ffi::*;
use crate::guard;
use crate::handle::{handle_kind, Handle};
use crate::posted::PostedOp;
use crate::text;
use crossbeam_queue::SegQueue;
use std::alloc::Layout;
use std::cell::{Cell, UnsafeCell};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use ucp::matcher::KeyHash;
use ucp::{Callback, Completed, ConnReqId, ListenerId, RecvInfo, Request, Worker};
use ucs::{BufPool, Result, Status};

// ----- request headers -----------------------------------------------------------------

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
/// On the worker's in-flight list.
const F_LISTED: u32 = 1 << 8;
/// A tag receive posted by word that waits in the matcher with no Rust request:
/// `ticket` cancels it.
pub(crate) const F_TICKET: u32 = 1 << 9;
/// A request of a worker with a lock (thread mode multi, or a progress thread): two
/// threads may change its flags at once (one completing it, one freeing it), so every
/// change is an atomic read-modify-write. Without it the worker's calls, including
/// `ucp_request_free`, come from one thread at a time (the thread mode's contract), and a
/// change is a plain load and store ([`ReqHdr::flags_or`]): a locked instruction per
/// change costs more than the rest of the change on the message path.
const F_SHARED: u32 = 1 << 10;

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
    /// The result of a 32-bit fetching atomic, as the protocol layer writes it (its
    /// first 4 bytes).
    pub staging: u64,
    /// Size of the pooled block (0 for the caller's memory).
    pub block_size: usize,
    /// The next header on the in-flight list or on the ready list (never both).
    next: *mut ReqHdr,
    /// The previous header on the in-flight list.
    prev: *mut ReqHdr,
    /// The matcher's ticket of a waiting receive (`ucp::RecvTicket::to_raw`), when
    /// `F_TICKET` is set.
    pub ticket: [u64; 2],
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
    #[inline]
    fn for_user_memory(req: *mut c_void) -> Result<*mut ReqHdr> {
        let a = req as usize;
        if a < HDR_SIZE || a % 8 != 0 {
            return Err(Status::InvalidParam);
        }
        Ok((a - HDR_SIZE) as *mut ReqHdr)
    }

    /// Stores the outcome (before the callback runs).
    ///
    /// # Safety
    /// `hdr` must be a live request of ours.
    #[inline]
    pub(crate) unsafe fn set_outcome(hdr: *mut ReqHdr, status: Status, info: RecvInfo) {
        // SAFETY: a live header; the completion path is the only writer of these fields.
        unsafe {
            let h = &mut *hdr;
            h.info = ucp_tag_recv_info_t {
                sender_tag: info.sender_tag,
                length: info.length,
            };
            if h.flags.load(Ordering::Relaxed) & F_AMO32 != 0 && !h.result.is_null() {
                // The protocol layer wrote the 4 bytes, in native order, at its start.
                let v = h.staging.to_ne_bytes();
                std::ptr::copy_nonoverlapping(v.as_ptr(), h.result, 4);
            }
            h.status.store(i32::from(status.code()), Ordering::Release);
        }
    }

    /// Sets `bits` in the flags and returns the flags before: atomically for a request of
    /// a worker with a lock (`F_SHARED`), else as a load and a store (see `F_SHARED`).
    #[inline(always)]
    pub(crate) fn flags_or(&self, bits: u32) -> u32 {
        let old = self.flags.load(Ordering::Acquire);
        if old & F_SHARED != 0 {
            return self.flags.fetch_or(bits, Ordering::AcqRel);
        }
        self.flags.store(old | bits, Ordering::Release);
        old
    }

    /// Clears `bits` in the flags and returns the flags before, as [`ReqHdr::flags_or`].
    #[inline(always)]
    pub(crate) fn flags_clear(&self, bits: u32) -> u32 {
        let old = self.flags.load(Ordering::Acquire);
        if old & F_SHARED != 0 {
            return self.flags.fetch_and(!bits, Ordering::AcqRel);
        }
        self.flags.store(old & !bits, Ordering::Release);
        old
    }

    /// Status of a request: `INPROGRESS` until its callback ran.
    ///
    /// # Safety
    /// `hdr` must be a live request of ours.
    #[inline]
    pub(crate) unsafe fn check(hdr: *mut ReqHdr) -> ucs_status_t {
        // SAFETY: by the contract.
        let h = unsafe { &*hdr };
        if h.flags.load(Ordering::Acquire) & F_COMPLETED != 0 {
            h.status.load(Ordering::Acquire) as ucs_status_t
        } else {
            UCS_INPROGRESS
        }
    }
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

    #[cold]
    fn grow(&mut self) -> Result<*mut ReqHdr> {
        self.spec().block()
    }

    /// What a new block of this pool is.
    fn spec(&self) -> BlockSpec {
        BlockSpec {
            user_size: self.user_size,
            init: self.init,
        }
    }
}

/// The size and initialisation of a worker's request blocks, kept apart from the pool so
/// that a thread outside the worker can make a block.
#[derive(Clone, Copy)]
struct BlockSpec {
    user_size: usize,
    init: ucp_request_init_callback_t,
}

impl BlockSpec {
    /// A new block (`request_init` runs on its user area).
    #[cold]
    fn block(self) -> Result<*mut ReqHdr> {
        let layout = Layout::from_size_align(HDR_SIZE + self.user_size, BLOCK_ALIGN)
            .map_err(|_| Status::InvalidParam)?;
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
}

impl ReqPool {
    /// Returns a block.
    ///
    /// # Safety
    /// `p` must be a pooled block of this pool, no longer in use.
    #[inline]
    unsafe fn put(&mut self, p: *mut ReqHdr) {
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

/// Frees a block whose pool is gone.
///
/// # Safety
/// `hdr` must be a pooled block no one uses any more.
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

/// A list of headers linked through their `next` field (first in, first out).
struct Chain {
    head: *mut ReqHdr,
    tail: *mut ReqHdr,
}

impl Chain {
    const fn new() -> Chain {
        Chain {
            head: std::ptr::null_mut(),
            tail: std::ptr::null_mut(),
        }
    }

    /// # Safety
    /// `h` must be a live header on no list.
    #[inline]
    unsafe fn push(&mut self, h: *mut ReqHdr) {
        // SAFETY: live headers of this worker.
        unsafe {
            (*h).next = std::ptr::null_mut();
            if self.tail.is_null() {
                self.head = h;
            } else {
                (*self.tail).next = h;
            }
        }
        self.tail = h;
    }

    fn take(&mut self) -> *mut ReqHdr {
        let h = self.head;
        *self = Chain::new();
        h
    }
}

/// The in-flight list: headers of requests started and not completed, doubly linked.
struct InFlight {
    head: *mut ReqHdr,
}

impl InFlight {
    /// # Safety
    /// `h` must be a live header on no list.
    #[inline]
    unsafe fn link(&mut self, h: *mut ReqHdr) {
        // SAFETY: forwarded contract.
        unsafe {
            self.link_unflagged(h);
            (*h).flags_or(F_LISTED);
        }
    }

    /// [`InFlight::link`] for a header whose flags the caller is about to write, with
    /// `F_LISTED` among them.
    ///
    /// # Safety
    /// As for [`InFlight::link`].
    #[inline(always)]
    unsafe fn link_unflagged(&mut self, h: *mut ReqHdr) {
        // SAFETY: live headers of this worker.
        unsafe {
            (*h).prev = std::ptr::null_mut();
            (*h).next = self.head;
            if !self.head.is_null() {
                (*self.head).prev = h;
            }
        }
        self.head = h;
    }

    /// # Safety
    /// `h` must be a live header (on this list if `F_LISTED` is set).
    #[inline]
    unsafe fn unlink(&mut self, h: *mut ReqHdr) {
        // SAFETY: live headers of this worker's list.
        unsafe {
            if (*h).flags_clear(F_LISTED) & F_LISTED == 0 {
                return;
            }
            let (p, n) = ((*h).prev, (*h).next);
            if p.is_null() {
                self.head = n;
            } else {
                (*p).next = n;
            }
            if !n.is_null() {
                (*n).prev = p;
            }
        }
    }
}

// ----- events ----------------------------------------------------------------------------

/// An active message waiting for its C handler.
pub(crate) struct AmEvent {
    pub id: u16,
    /// Where its bytes wait.
    pub bytes: AmBytes,
    pub header_len: usize,
    pub reply_ep: Option<ucp::Ep>,
    /// A rendezvous message: its descriptor (the protocol layer keeps it) and length.
    pub rndv: Option<(ucp::AmDesc, usize)>,
}

/// The bytes of an active message waiting for its C handler: for an eager message its
/// data, then the user header; for a rendezvous message the user header alone.
pub(crate) enum AmBytes {
    /// A small eager message, inline (see [`crate::am_small`]).
    Small(SmallAm),
    /// A buffer of the queue's spare list ([`QueuePtr::buffer`]), so that a steady stream
    /// of messages allocates nothing.
    Buf(Vec<u8>),
}

/// Something the application hears about through a C handler, queued by a Rust handler
/// during progress and delivered by the dispatch.
pub(crate) enum Event {
    Am(AmEvent),
    /// A connection request on a listener.
    Conn(ListenerId, ConnReqId, SocketAddr),
    /// An endpoint failed.
    EpError(ucp::Ep, Status),
}

/// Events queued by the Rust handlers during progress.
pub(crate) struct EvQueue {
    /// Touched only with the worker held (from inside its progress, or by dispatch).
    events: UnsafeCell<VecDeque<Event>>,
    /// Buffers of delivered active messages, for the next ones; the same rule.
    bufs: UnsafeCell<BufPool>,
    /// Set when `events` may be non-empty.
    pub hint: AtomicBool,
}

/// The message buffers' pool: a burst of small messages queued before their handlers run
/// (`ucx_perftest -t ucp_am_bw` queues its whole window of a thousand or more, and the
/// handlers run one per progress call) comes back whole: buffers up to 8 KiB, at most
/// 4096 of them and 256 KiB per worker in all.
fn am_bufs() -> BufPool {
    BufPool::new(8 << 10, 4096, 256 << 10)
}

impl EvQueue {
    /// Gives a delivered message's buffer back for the next message.
    ///
    /// # Safety
    /// The worker that owns the queue must be held.
    pub(crate) unsafe fn recycle(&self, v: Vec<u8>) {
        // SAFETY: by the contract, nobody else touches the pool now.
        unsafe { &mut *self.bufs.get() }.give(v);
    }

    /// Takes the next event.
    ///
    /// # Safety
    /// The worker that owns the queue must be held.
    pub(crate) unsafe fn pop(&self) -> Option<Event> {
        // SAFETY: by the contract, nobody else touches the queue now.
        let e = unsafe { &mut *self.events.get() }.pop_front();
        if e.is_none() {
            self.hint.store(false, Ordering::Release);
        }
        e
    }
}

/// A pointer to a worker's event queue that Rust handlers (which must be `Send`) carry.
#[derive(Clone, Copy)]
pub(crate) struct QueuePtr(*const EvQueue);

// SAFETY: the queue lives in the worker handle, which outlives the Rust worker owning the
// handlers that hold this pointer; it is only used with the worker held.
unsafe impl Send for QueuePtr {}

impl QueuePtr {
    /// An empty buffer with room for `len` bytes of a message (from a Rust handler, i.e.
    /// with the worker held).
    pub(crate) fn buffer(&self, len: usize) -> Vec<u8> {
        // SAFETY: see the type; nobody else touches the pool now.
        unsafe { &mut *(*self.0).bufs.get() }.take(len)
    }

    /// Queues an event (from a Rust handler, i.e. with the worker held).
    pub(crate) fn push(&self, e: Event) {
        // SAFETY: see the type; handlers run inside the worker's progress, so nobody else
        // touches the queue.
        unsafe {
            (*(*self.0).events.get()).push_back(e);
            (*self.0).hint.store(true, Ordering::Release);
        }
    }
}

/// What becomes of an active message's data after its C handler.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum AmKeep {
    /// Eager data in the message's buffer: kept (handed to the protocol layer,
    /// `Worker::am_keep`) if the handler returns `UCS_INPROGRESS`, else the buffer goes
    /// back to the spare list.
    Eager,
    /// A rendezvous descriptor, registered under the handler's data pointer already:
    /// released unless the handler returns `UCS_INPROGRESS`.
    Rndv,
    /// Nothing to keep (data received for an older-style handler).
    No,
}

/// The buffer of an active message whose C handler runs now: its data (eager messages),
/// then its user header.
pub(crate) struct CurrentAm {
    /// The data pointer the handler was given.
    pub key: usize,
    pub bytes: Vec<u8>,
    pub header_len: usize,
    /// True when `bytes` holds the data of an eager message.
    pub eager: bool,
    /// Set when the handler received or released the data from inside: the buffer is
    /// not kept afterwards, whatever the handler returns.
    pub taken: bool,
}

/// A registered C active-message handler.
#[derive(Clone, Copy)]
pub(crate) enum AmHandlerC {
    /// `ucp_worker_set_am_recv_handler`.
    Recv { cb: usize, arg: *mut c_void },
    /// `ucp_worker_set_am_handler` (the older interface).
    Old { cb: usize, arg: *mut c_void },
}

/// Largest user header `ucp_worker_query` reports (it travels in one transport message).
pub(crate) const MAX_AM_HEADER: usize = 1024;

// ----- handles that belong to a worker ---------------------------------------------------

/// An endpoint handle's value.
pub(crate) struct EpH {
    pub wk: *const Handle<Wk>,
    pub wgen: u64,
    pub ep: ucp::Ep,
    pub user_data: Cell<*mut c_void>,
    pub name: Cell<[c_char; UCP_ENTITY_NAME_MAX]>,
    /// Made by rucx for a reply endpoint rather than by `ucp_ep_create`.
    pub implicit: Cell<bool>,
    /// The application's error handler. It is called with `user_data` as its argument:
    /// the handler's own `arg` is only the starting value of `user_data` (UCX's rule:
    /// `ucp_ep_params_t::user_data` overrides `err_handler.arg`).
    pub err: Cell<Option<usize>>,
}

handle_kind!(EpH, 0x7275_6378_6570_6831);

// SAFETY: plain data; the worker it names synchronises its own use.
unsafe impl Send for EpH {}

/// [`ep_get`] with the worker's value slot instead of the worker, for
/// [`Wk::plain_entry_in`].
///
/// # Safety
/// As for [`ep_get`].
#[inline(always)]
pub(crate) unsafe fn ep_slot<'a>(p: *mut Handle<EpH>) -> Result<(&'a EpH, &'a Option<Wk>)> {
    // SAFETY: forwarded contract.
    let e = unsafe { Handle::get(p)? };
    // SAFETY: an endpoint handle is live exactly while it is in its worker's endpoint
    // table (`Side::eps`: inserted when made, removed only where it is destroyed), and
    // destroying a worker destroys every handle in that table; so the worker of a live
    // endpoint handle is live, and checking the endpoint's handle checked both (its
    // value slot is read, not tested, so the plain calls test it with the lock).
    let wk = unsafe { Handle::slot_live(e.wk, e.wgen) };
    Ok((e, wk))
}

/// The endpoint behind a handle, with its worker.
///
/// # Safety
/// `p` must be a handle of ours or null.
#[inline(always)]
pub(crate) unsafe fn ep_get<'a>(p: *mut Handle<EpH>) -> Result<(&'a EpH, &'a Wk)> {
    // SAFETY: forwarded contract.
    let (e, wk) = unsafe { ep_slot(p)? };
    Ok((e, wk.as_ref().ok_or(Status::InvalidParam)?))
}

/// What the application registered to hear about connection requests.
#[derive(Clone, Copy)]
pub(crate) enum OnConn {
    /// `ucp_listener_conn_callback_t`: the application accepts or rejects.
    Request { cb: usize, arg: *mut c_void },
    /// `ucp_listener_accept_callback_t`: rucx accepts and gives the endpoint.
    Accept { cb: usize, arg: *mut c_void },
}

/// A listener of a worker, in the worker's table.
pub(crate) struct ListenerInfo {
    pub handle: *mut Handle<ListenerH>,
    pub on_conn: OnConn,
}

/// A listener handle's value.
pub(crate) struct ListenerH {
    pub wk: *const Handle<Wk>,
    pub wgen: u64,
    pub id: ListenerId,
}

handle_kind!(ListenerH, 0x7275_6378_6c73_6e31);

// SAFETY: plain data; the worker it names synchronises its own use.
unsafe impl Send for ListenerH {}

/// A connection request handle's value.
pub(crate) struct ConnReqH {
    pub wk: *const Handle<Wk>,
    pub wgen: u64,
    pub id: ConnReqId,
    pub client: SocketAddr,
}

handle_kind!(ConnReqH, 0x7275_6378_636f_6e72);

// SAFETY: plain data.
unsafe impl Send for ConnReqH {}

impl ConnReqH {
    pub(crate) fn worker(&self) -> Result<&Wk> {
        // SAFETY: handles are never freed; the generation catches a destroyed worker.
        unsafe { Handle::get_gen(self.wk, self.wgen) }
    }
}

// ----- the worker --------------------------------------------------------------------------

/// The worker's C-side state, guarded together with the Rust worker.
pub(crate) struct Side {
    pool: ReqPool,
    /// Completed requests whose callbacks are due, in completion order.
    ready: Chain,
    /// Requests started and not completed.
    inflight: InFlight,
    /// Requests without a callback of their own (endpoint close), checked after calls.
    polled: Vec<*mut ReqHdr>,
    /// Endpoint handles by Rust endpoint (explicit ones, and reply endpoints).
    pub eps: HashMap<ucp::Ep, *mut Handle<EpH>>,
    /// The C handler of each active-message id, indexed by id (the table grows to the
    /// largest id registered).
    pub am_handlers: Vec<Option<AmHandlerC>>,
    /// Active-message data kept for the application, by the pointer it was given.
    pub am_kept: HashMap<usize, ucp::AmDesc, KeyHash>,
    /// The buffers of the active messages whose C handlers run now (one per thread that
    /// dispatches), by the data pointer each handler was given.
    pub am_current: Vec<CurrentAm>,
    next_token: usize,
    /// Stream data handed out by `ucp_stream_recv_data_nb`, by pointer.
    pub stream_kept: HashMap<usize, Vec<u8>, KeyHash>,
    /// Messages taken by `ucp_tag_probe_nb` with remove, by handle.
    pub msgs: HashMap<usize, ucp::Message, KeyHash>,
    /// Listeners of this worker.
    pub listeners: HashMap<ListenerId, ListenerInfo>,
    /// Connection requests given to the application and not answered yet.
    pub conn_reqs: HashMap<ConnReqId, *mut Handle<ConnReqH>>,
}

impl Side {
    /// A unique token usable as an opaque non-null pointer (never a heap address: the low
    /// four bits are set, and heap blocks are 16-byte aligned).
    /// Takes the buffer of the message whose handler was given `key` off the list of
    /// handlers running now.
    pub(crate) fn remove_current_am(&mut self, key: usize) -> Option<CurrentAm> {
        // Usually the only one.
        let i = self.am_current.iter().position(|c| c.key == key)?;
        Some(self.am_current.swap_remove(i))
    }

    /// The eager message whose handler runs now with `key` and has not had its data
    /// received or released yet: marked so (`taken`), for a receive or release from
    /// inside the handler. Its buffer stays where it is until the handler returns (the
    /// handler may still read the header).
    pub(crate) fn take_current_am(&mut self, key: usize) -> Option<&CurrentAm> {
        let c = self
            .am_current
            .iter_mut()
            .find(|c| c.key == key && c.eager && !c.taken)?;
        c.taken = true;
        Some(c)
    }

    pub(crate) fn token(&mut self) -> usize {
        self.next_token += 1;
        (self.next_token << 4) | 0xf
    }

    /// A completion the worker reported: store it, take the request off the in-flight
    /// list and queue its callback.
    #[inline]
    fn completed(&mut self, c: Completed) {
        let hdr = c.word as *mut ReqHdr;
        // SAFETY: words are headers of this worker's outstanding requests (set by
        // `Wk::begin` and kept live until their completion is dispatched).
        unsafe {
            self.inflight.unlink(hdr);
            ReqHdr::set_outcome(hdr, c.status, c.info);
            self.ready.push(hdr);
        }
    }

    /// Gives up a header started for an operation that did not go ahead.
    ///
    /// # Safety
    /// `hdr` must be a header started by `Wk::begin` and given to no one.
    #[inline]
    unsafe fn abandon(&mut self, hdr: *mut ReqHdr, s: Status) {
        // SAFETY: by the contract.
        unsafe {
            if (*hdr).flags.load(Ordering::Relaxed) & F_USER == 0 {
                self.pool.put(hdr);
            } else {
                // The caller's memory (or a block of ucp_request_alloc) reads as done.
                ReqHdr::set_outcome(hdr, s, RecvInfo::default());
                (*hdr).flags_or(F_COMPLETED);
            }
        }
    }
}

struct Inner {
    w: Worker,
    side: Side,
}

/// What a worker is made of (see [`Wk::new`]).
pub(crate) struct WkParts {
    pub w: Worker,
    pub pool: ReqPool,
    pub waker: ucs::sys::EventFd,
    pub efd: RawFd,
    pub external_efd: bool,
    pub features: u64,
    pub thread_mode: ucs_thread_mode_t,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    /// A progress thread will serve the worker (it then has a lock in every thread mode).
    pub progress_thread: bool,
}

/// A worker handle's value.
pub(crate) struct Wk {
    lock: Option<Mutex<()>>,
    /// Thread mode multi: hot calls that find the worker held post their operation.
    delegate: bool,
    /// Operations posted while the worker was held (thread mode multi).
    posted: SegQueue<Posted>,
    /// Request blocks given back while the worker was held, and taken by threads that
    /// post (thread mode multi); moved to the pool when the worker goes.
    spare: SegQueue<BlockPtr>,
    blocks: BlockSpec,
    busy: Cell<bool>,
    inner: UnsafeCell<Inner>,
    /// Set when the ready list may be non-empty (a hint read without the worker).
    has_ready: AtomicBool,
    pub evq: EvQueue,
    pub waker: ucs::sys::EventFd,
    pub efd: RawFd,
    /// The worker's descriptor was added to the application's epoll set
    /// (`UCP_WORKER_PARAM_FIELD_EVENT_FD`): `ucp_worker_get_efd` is unsupported then.
    pub external_efd: bool,
    /// The context's `ucp_feature` bits.
    pub features: u64,
    pub thread_mode: ucs_thread_mode_t,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    /// This worker's own handle and generation (set right after the handle is made).
    me: Cell<(*const Handle<Wk>, u64)>,
    /// The progress thread (`UCX_RUCX_PROGRESS_THREAD`): started after the handle is
    /// made, stopped before it dies.
    pthread: Mutex<Option<ucp::ProgressThread>>,
}

handle_kind!(Wk, 0x7275_6378_776b_7231);

// SAFETY: everything mutable in a worker is reached through `with`, which in thread mode
// multi holds the worker's mutex and otherwise relies on the application calling from
// one thread at a time (single/serialized, as the API requires). The raw pointers are
// handles and blocks of ours.
unsafe impl Sync for Wk {}
// SAFETY: as above; a worker may be destroyed on another thread than it was created.
unsafe impl Send for Wk {}

/// A request block on a lock-free list.
struct BlockPtr(*mut ReqHdr);

// SAFETY: a block of the worker's pool that nobody uses while it is on the list.
unsafe impl Send for BlockPtr {}

/// An operation posted for the thread that holds the worker, with its request header
/// (given out already).
struct Posted {
    hdr: BlockPtr,
    op: PostedOp,
}

/// The worker inside a hot call ([`Wk::plain_entry`]). Dropping it clears the busy flag
/// (also when a panic unwinds through the call); [`PlainEntry::leave`] first collects the
/// completions, as [`Wk::with`] does after its closure.
pub(crate) struct PlainEntry<'a> {
    wk: &'a Wk,
    inner: &'a mut Inner,
}

impl PlainEntry<'_> {
    /// The Rust worker and the C side's state, for the call.
    #[inline(always)]
    pub(crate) fn parts(&mut self) -> (&mut Worker, &mut Side) {
        (&mut self.inner.w, &mut self.inner.side)
    }

    /// Ends the call: completions move to the ready list, and the worker is free again.
    #[inline(always)]
    pub(crate) fn leave(self) {
        self.wk.collect(&mut self.inner.w, &mut self.inner.side);
    }
}

impl Drop for PlainEntry<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.wk.busy.set(false);
    }
}

struct Unbusy<'a>(&'a Cell<bool>);

impl Drop for Unbusy<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// A worker as its progress thread reaches it.
struct Served(&'static Wk);

impl ucp::progress_thread::Serve for Served {
    fn turn(&self, mark: &mut u32) -> ucp::progress_thread::Turn {
        self.0.serve_turn(mark)
    }
}

/// The worker behind a handle.
///
/// # Safety
/// `p` must be a handle of ours or null.
#[inline(always)]
pub(crate) unsafe fn get<'a>(p: *mut Handle<Wk>) -> Result<&'a Wk> {
    // SAFETY: forwarded contract.
    unsafe { Handle::get(p) }
}

/// The value slot of worker handle `p` (`Handle::slot`), for [`Wk::plain_entry_in`].
///
/// # Safety
/// As for [`get`].
#[inline(always)]
pub(crate) unsafe fn slot<'a>(p: *mut Handle<Wk>) -> Result<&'a Option<Wk>> {
    // SAFETY: forwarded contract.
    unsafe { Handle::slot(p) }
}

/// What a Rust call that starts an operation returned.
pub(crate) enum Outcome {
    /// Completed inside the call; no request, no completion to come.
    Done(Status, RecvInfo),
    /// In progress; completes through the worker's completions, by the header's word.
    Req(Request),
    /// In progress; the request has no callback and is checked after worker calls.
    Polled(Request),
}

impl Outcome {
    /// The outcome of a call that returns a request when one is needed.
    #[inline]
    pub(crate) fn of(r: Option<Request>) -> Outcome {
        match r {
            None => Outcome::Done(Status::Ok, RecvInfo::default()),
            Some(r) => Outcome::Req(r),
        }
    }
}

/// What receive information the caller wants back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvOut {
    None,
    /// `ucp_tag_recv_info_t` through `recv_info.tag_info`.
    Tag,
    /// A length through `recv_info.length`.
    Length,
}

/// The C options of one operation (from `ucp_request_param_t`, or from the arguments of
/// the older `_nb` functions).
pub(crate) struct Op {
    pub mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb_kind: CbKind,
    pub cb: usize,
    pub user_data: *mut c_void,
    pub datatype: u64,
    pub reply_buffer: *mut c_void,
    pub recv_info: *mut c_void,
    /// The completion queue the operation reports into (`RUCX_OP_ATTR_FIELD_CQ`), null
    /// for none. It points into the queue's handle, which the caller keeps alive while
    /// it starts operations on it.
    pub cq: *const ucp::Cq,
}

/// The buffer of a plain `_nbx` operation: `param` names at most a callback, its user data
/// and a contiguous datatype (what Open MPI's and `ucx_perftest`'s hot paths pass), plus
/// any of the flags in `allowed` (the caller's path honours them), and `buffer` holds
/// `count` elements of it (not null unless empty). `None` for anything else (a request of
/// the caller's, other flags, receive information, a completion queue, another datatype,
/// a bad buffer): the general path reads those, and reports errors. The buffer is always
/// a view of the caller's memory that owns nothing (so a caller may forget it).
///
/// # Safety
/// `param` must be null or a readable `ucp_request_param_t` (as long as its mask says);
/// the buffer must stay valid until the operation completes (the UCP API's contract).
#[inline(always)]
pub(crate) unsafe fn plain_buf(
    param: *const ucp_request_param_t,
    buffer: *const c_void,
    count: usize,
    allowed: u32,
) -> Option<ucp::Buf> {
    // SAFETY: forwarded contract.
    let len = unsafe { plain_span(param, buffer, count, allowed)? };
    // SAFETY: the caller's contiguous buffer of `len` bytes, not null unless empty.
    Some(unsafe { ucp::Buf::contig(buffer.cast_mut().cast(), len) })
}

/// The byte length of a plain operation's buffer (see [`plain_buf`], which makes the
/// buffer of it): `None` when the parameters are not plain, the buffer is null and not
/// empty, or the length reaches past `isize::MAX` (no buffer in memory does: such a
/// count is the general path's).
///
/// # Safety
/// As [`plain_buf`]'s for `param`.
#[inline(always)]
pub(crate) unsafe fn plain_span(
    param: *const ucp_request_param_t,
    buffer: *const c_void,
    count: usize,
    allowed: u32,
) -> Option<usize> {
    // SAFETY: forwarded contract.
    let len = unsafe { plain_len(param, count, allowed)? };
    if (len > 0 && buffer.is_null()) || len > isize::MAX as usize {
        return None;
    }
    Some(len)
}

/// The byte length of a plain operation's `count` elements of its contiguous datatype
/// (see [`plain_buf`]); bytes when no datatype is given, without a multiplication.
///
/// # Safety
/// As [`plain_buf`]'s for `param`.
#[inline(always)]
unsafe fn plain_len(
    param: *const ucp_request_param_t,
    count: usize,
    allowed: u32,
) -> Option<usize> {
    if param.is_null() {
        return None;
    }
    // SAFETY: the caller's parameter struct; the mask is always present.
    let mask = unsafe { (*param).op_attr_mask };
    const PLAIN: u32 =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    if mask & !(PLAIN | allowed) != 0 {
        return None;
    }
    if mask & UCP_OP_ATTR_FIELD_DATATYPE == 0 {
        return Some(count);
    }
    // SAFETY: its mask bit is set.
    let dt = unsafe { (*param).datatype };
    if dt & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_CONTIG {
        return None;
    }
    count.checked_mul((dt >> UCP_DATATYPE_SHIFT) as usize)
}

/// The flags and fields a plain send takes beyond a callback, its user data and a
/// contiguous datatype: `NO_IMM_CMPL` (a send that completes in the call still returns
/// its request, whose callback has run: [`Wk::settle`]), two hints that change nothing
/// here (`ucx_perftest`'s bandwidth tests pass all three), and the caller's request
/// memory (Open MPI's sends pass it with `FAST_CMPL`), which only a send that does not
/// complete in the call uses ([`settle_plain_send`] reads it).
pub(crate) const SEND_HINTS: u32 = UCP_OP_ATTR_FLAG_NO_IMM_CMPL
    | UCP_OP_ATTR_FLAG_FAST_CMPL
    | UCP_OP_ATTR_FLAG_MULTI_SEND
    | UCP_OP_ATTR_FIELD_REQUEST;

/// A plain send (tag or active message) that did not complete in the call, failed, or
/// asked for its request (`NO_IMM_CMPL`): its request, made as the general path makes it,
/// or its error as a status pointer (reported under `name`).
#[inline(never)]
pub(crate) fn settle_plain_send(
    wk: &Wk,
    w: &mut Worker,
    side: &mut Side,
    param: *const ucp_request_param_t,
    out: Result<Option<Request>>,
    name: &'static str,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's parameter struct, read by `plain_buf` already.
    let r = unsafe { Op::nbx(param, CbKind::SendNbx) }
        .and_then(|op| wk.settle(w, side, &op, 0, out.map(Outcome::of), RecvOut::None));
    guard::to_ptr(name, r)
}

/// `ucp_dt_make_contig(1)`, the default datatype.
pub(crate) const DT_BYTES: u64 = 1 << UCP_DATATYPE_SHIFT;

impl Op {
    /// Reads the fields of `param` its mask names.
    ///
    /// # Safety
    /// `param` must be null or a readable `ucp_request_param_t` (as long as its mask says).
    #[inline(always)]
    pub(crate) unsafe fn nbx(param: *const ucp_request_param_t, kind: CbKind) -> Result<Op> {
        if param.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's parameter struct; the mask is always present.
        let mask = unsafe { (*param).op_attr_mask };
        let mut op = Op {
            mask,
            flags: 0,
            request: std::ptr::null_mut(),
            cb_kind: kind,
            cb: 0,
            user_data: std::ptr::null_mut(),
            datatype: DT_BYTES,
            reply_buffer: std::ptr::null_mut(),
            recv_info: std::ptr::null_mut(),
            cq: std::ptr::null(),
        };
        // The common case, no field at all, skips every per-field test.
        if mask & OP_FIELDS != 0 {
            // SAFETY: every field is read only if its bit is set.
            unsafe { op.read_fields(&*param) };
            if mask & crate::cqh::RUCX_OP_ATTR_FIELD_CQ != 0 {
                // A queue replaces the request and its callback: naming both is an error.
                if mask & (UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FIELD_CALLBACK) != 0 {
                    return Err(Status::InvalidParam);
                }
                // SAFETY: the bit promises a `rucx_request_param_t`.
                op.cq = unsafe { crate::cqh::cq_of(param)? };
            }
        }
        Ok(op)
    }

    #[inline]
    fn read_fields(&mut self, p: &ucp_request_param_t) {
        let mask = self.mask;
        if mask & UCP_OP_ATTR_FIELD_FLAGS != 0 {
            self.flags = p.flags;
        }
        if mask & UCP_OP_ATTR_FIELD_REQUEST != 0 {
            self.request = p.request;
        }
        if mask & UCP_OP_ATTR_FIELD_CALLBACK != 0 {
            self.cb = p.cb;
        }
        if mask & UCP_OP_ATTR_FIELD_USER_DATA != 0 {
            self.user_data = p.user_data;
        }
        if mask & UCP_OP_ATTR_FIELD_DATATYPE != 0 {
            self.datatype = p.datatype;
        }
        if mask & UCP_OP_ATTR_FIELD_REPLY_BUFFER != 0 {
            self.reply_buffer = p.reply_buffer;
        }
        if mask & UCP_OP_ATTR_FIELD_RECV_INFO != 0 {
            self.recv_info = p.recv_info;
        }
    }

    /// The options of an older `_nb` call: a callback, a datatype, and whether an
    /// immediate completion still returns a request (receives do).
    pub(crate) fn nb(kind: CbKind, cb: usize, datatype: u64, no_imm: bool) -> Op {
        Op {
            mask: if no_imm {
                UCP_OP_ATTR_FLAG_NO_IMM_CMPL
            } else {
                0
            },
            flags: 0,
            request: std::ptr::null_mut(),
            cb_kind: kind,
            cb,
            user_data: std::ptr::null_mut(),
            datatype,
            reply_buffer: std::ptr::null_mut(),
            recv_info: std::ptr::null_mut(),
            cq: std::ptr::null(),
        }
    }

    /// How the Rust operation started with header `hdr` reports its completion: into the
    /// operation's queue, or by word to the C request.
    #[inline(always)]
    pub(crate) fn callback(&self, hdr: *mut ReqHdr) -> Option<Callback> {
        if self.cq.is_null() {
            return Wk::word(hdr);
        }
        // SAFETY: non-null: read from a live handle by `nbx` in this very call.
        let cq = unsafe { &*self.cq };
        Some(Callback::cq(cq, self.user_data as u64))
    }

    /// Refuses a completion queue for an operation that cannot report into one.
    pub(crate) fn no_cq(&self) -> Result<()> {
        if self.cq.is_null() {
            Ok(())
        } else {
            Err(Status::Unsupported)
        }
    }

    #[inline]
    pub(crate) fn no_imm(&self) -> bool {
        self.mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0
    }

    #[inline]
    pub(crate) fn user_req(&self) -> bool {
        !self.request.is_null()
    }

    #[inline]
    pub(crate) fn force_imm(&self) -> bool {
        self.mask & UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL != 0
    }
}

/// The mask bits of `ucp_request_param_t` fields [`Op::nbx`] reads.
const OP_FIELDS: u32 = UCP_OP_ATTR_FIELD_FLAGS
    | UCP_OP_ATTR_FIELD_REQUEST
    | UCP_OP_ATTR_FIELD_CALLBACK
    | UCP_OP_ATTR_FIELD_USER_DATA
    | UCP_OP_ATTR_FIELD_DATATYPE
    | UCP_OP_ATTR_FIELD_REPLY_BUFFER
    | UCP_OP_ATTR_FIELD_RECV_INFO
    | crate::cqh::RUCX_OP_ATTR_FIELD_CQ;

impl Wk {
    /// A worker of these parts (its handle is made by [`Wk::publish`]).
    pub(crate) fn new(p: WkParts) -> Wk {
        Wk {
            // The progress thread enters the worker on the application's behalf, so the
            // worker needs its lock even in thread modes single and serialized.
            lock: (p.thread_mode == UCS_THREAD_MODE_MULTI || p.progress_thread)
                .then(|| Mutex::new(())),
            delegate: p.thread_mode == UCS_THREAD_MODE_MULTI,
            posted: SegQueue::new(),
            spare: SegQueue::new(),
            blocks: p.pool.spec(),
            busy: Cell::new(false),
            inner: UnsafeCell::new(Inner {
                w: p.w,
                side: Side {
                    pool: p.pool,
                    ready: Chain::new(),
                    inflight: InFlight {
                        head: std::ptr::null_mut(),
                    },
                    polled: Vec::new(),
                    eps: HashMap::new(),
                    am_handlers: Vec::new(),
                    am_kept: HashMap::default(),
                    am_current: Vec::new(),
                    next_token: 0,
                    stream_kept: HashMap::default(),
                    msgs: HashMap::default(),
                    listeners: HashMap::new(),
                    conn_reqs: HashMap::new(),
                },
            }),
            has_ready: AtomicBool::new(false),
            evq: EvQueue {
                events: UnsafeCell::new(VecDeque::new()),
                bufs: UnsafeCell::new(am_bufs()),
                hint: AtomicBool::new(false),
            },
            waker: p.waker,
            efd: p.efd,
            external_efd: p.external_efd,
            features: p.features,
            thread_mode: p.thread_mode,
            name: p.name,
            me: Cell::new((std::ptr::null(), 0)),
            pthread: Mutex::new(None),
        }
    }

    /// Makes the handle of a new worker.
    pub(crate) fn publish(self) -> Result<(*mut Handle<Wk>, &'static Wk)> {
        let (h, gen) = Handle::alloc(self);
        // SAFETY: just made.
        let wk = unsafe { Handle::get(h)? };
        wk.me.set((h, gen));
        Ok((h, wk))
    }

    /// Starts the worker's progress thread.
    pub(crate) fn start_progress_thread(&'static self) -> Result<()> {
        let events = self.with_try(|w, _| w.serve_events())?;
        let t = ucp::ProgressThread::spawn(Served(self), events)?;
        *self.pthread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        Ok(())
    }

    /// Stops and joins the progress thread, if any (before the worker is destroyed).
    pub(crate) fn stop_progress_thread(&self) {
        let t = self
            .pthread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(t);
    }

    /// A progress thread's turn: only if nobody is inside the worker (see
    /// `ucp::progress_thread`). The thread runs no user code, so nothing is collected
    /// for the C callbacks here: the application's next call does that.
    fn serve_turn(&self, mark: &mut u32) -> ucp::progress_thread::Turn {
        use ucp::progress_thread::Turn;
        // Without a lock the thread could not know the application is outside.
        if self.lock.is_none() {
            return Turn::Busy;
        }
        let Some(g) = self.lock_try() else {
            return Turn::Busy;
        };
        if self.busy.replace(true) {
            return Turn::Busy;
        }
        let turn = {
            let _busy = Unbusy(&self.busy);
            // SAFETY: as in `with`.
            let inner = unsafe { &mut *self.inner.get() };
            if self.delegate {
                // Posted operations run no application code: the thread may start them.
                self.run_posted(&mut inner.w, &mut inner.side);
            }
            ucp::progress_thread::serve_turn(&mut inner.w, mark)
        };
        self.unlock(g);
        turn
    }

    /// A pointer to the event queue, for Rust handlers.
    pub(crate) fn queue(&self) -> QueuePtr {
        QueuePtr(&self.evq)
    }

    /// This worker's handle and generation.
    #[inline]
    pub(crate) fn me(&self) -> (*const Handle<Wk>, u64) {
        self.me.get()
    }

    /// Runs `f` with the Rust worker and the side state, then collects completions.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Worker, &mut Side) -> R) -> Result<R> {
        let g = self.lock_wait();
        if self.busy.replace(true) {
            return Err(Status::InvalidParam);
        }
        let r = {
            let _busy = Unbusy(&self.busy);
            // SAFETY: the busy flag (under the mutex in thread mode multi) makes this the
            // only reference to the worker's inner state until `_busy` drops.
            let inner = unsafe { &mut *self.inner.get() };
            if self.delegate {
                self.run_posted(&mut inner.w, &mut inner.side);
            }
            let r = f(&mut inner.w, &mut inner.side);
            self.collect(&mut inner.w, &mut inner.side);
            r
        };
        self.unlock(g);
        Ok(r)
    }

    /// [`Wk::plain_entry`] on a handle's value slot ([`slot`], [`ep_slot`]): `None` also
    /// when the value is gone, the way the general path's lookup then fails.
    #[inline(always)]
    pub(crate) fn plain_entry_in(slot: &Option<Wk>) -> Option<(&Wk, PlainEntry<'_>)> {
        // One test where the layout allows: a worker without a lock is a present one.
        match slot {
            Some(wk) if wk.lock.is_none() => Some((wk, wk.plain_entry()?)),
            _ => None,
        }
    }

    /// The hot calls' way into a worker without a lock (thread modes single and
    /// serialized, no progress thread) that no call of this thread is inside. `None` when
    /// the worker has a lock or is busy (a call from inside a callback): the general
    /// path, which handles both, takes over. A value rather than a closure, so that the
    /// hot call is straight-line code (a closure's captures ended up in memory, built
    /// before the call whichever way it went). The call ends with [`PlainEntry::leave`]
    /// (`dispatch::leave_plain`).
    #[inline(always)]
    pub(crate) fn plain_entry(&self) -> Option<PlainEntry<'_>> {
        if self.lock.is_some() || self.busy.get() {
            return None;
        }
        self.busy.set(true);
        // SAFETY: as in `with`: the busy flag makes this the only reference to the
        // worker's inner state until the entry is dropped (which clears it), and a worker
        // without a lock is used by one thread at a time (the contract of its thread
        // mode).
        let inner = unsafe { &mut *self.inner.get() };
        Some(PlainEntry { wk: self, inner })
    }

    /// [`Wk::with`] for a call that returns a `Result` itself (the busy worker's error
    /// and the call's travel in one `Result`).
    #[inline(always)]
    pub(crate) fn with_try<T>(
        &self,
        f: impl FnOnce(&mut Worker, &mut Side) -> Result<T>,
    ) -> Result<T> {
        let g = self.lock_wait();
        if self.busy.replace(true) {
            return Err(Status::InvalidParam);
        }
        let _busy = Unbusy(&self.busy);
        // SAFETY: as in `with`.
        let inner = unsafe { &mut *self.inner.get() };
        if self.delegate {
            self.run_posted(&mut inner.w, &mut inner.side);
        }
        let r = f(&mut inner.w, &mut inner.side);
        self.collect(&mut inner.w, &mut inner.side);
        drop(_busy);
        self.unlock(g);
        r
    }

    /// True for thread mode multi: calls that find the worker held may post their
    /// operation ([`Wk::try_with_try`], [`Wk::post`]).
    #[inline(always)]
    pub(crate) fn delegates(&self) -> bool {
        self.delegate
    }

    /// [`Wk::with_try`] that does not wait: `None` when another thread holds the worker.
    #[inline(always)]
    pub(crate) fn try_with_try<T>(
        &self,
        f: impl FnOnce(&mut Worker, &mut Side) -> Result<T>,
    ) -> Option<Result<T>> {
        let g = self.lock_try()?;
        if self.busy.replace(true) {
            return Some(Err(Status::InvalidParam));
        }
        let r = {
            let _busy = Unbusy(&self.busy);
            // SAFETY: as in `with`.
            let inner = unsafe { &mut *self.inner.get() };
            if self.delegate {
                self.run_posted(&mut inner.w, &mut inner.side);
            }
            let r = f(&mut inner.w, &mut inner.side);
            self.collect(&mut inner.w, &mut inner.side);
            r
        };
        self.unlock(g);
        Some(r)
    }

    /// Leaves `op` (its request `hdr` made by [`Wk::begin_posted`]) for the thread that
    /// holds the worker, or runs it if the worker was released meanwhile.
    pub(crate) fn post(&self, op: PostedOp, hdr: *mut ReqHdr) {
        self.posted.push(Posted {
            hdr: BlockPtr(hdr),
            op,
        });
        self.after_release();
    }

    /// The worker's lock, if it has one, waited for.
    #[inline(always)]
    fn lock_wait(&self) -> Option<MutexGuard<'_, ()>> {
        self.lock
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The worker's lock, if it has one, without waiting: `None` when another thread
    /// holds it.
    #[inline(always)]
    fn lock_try(&self) -> Option<Option<MutexGuard<'_, ()>>> {
        match &self.lock {
            None => Some(None),
            Some(m) => match m.try_lock() {
                Ok(g) => Some(Some(g)),
                Err(std::sync::TryLockError::WouldBlock) => None,
                Err(std::sync::TryLockError::Poisoned(p)) => Some(Some(p.into_inner())),
            },
        }
    }

    /// Releases the lock taken by [`Wk::lock_wait`] or [`Wk::lock_try`] (the busy flag
    /// already cleared), then looks for operations posted meanwhile. A call that leaves
    /// early (an error, a panic) releases its guard by dropping it and skips the look:
    /// the next call runs what was posted.
    #[inline(always)]
    fn unlock(&self, g: Option<MutexGuard<'_, ()>>) {
        if let Some(g) = g {
            drop(g);
            if self.delegate {
                self.after_release();
            }
        }
    }

    /// Starts the operations posted while the worker was held, in posting order. Runs
    /// with the worker held.
    #[inline(always)]
    fn run_posted(&self, w: &mut Worker, side: &mut Side) {
        if !self.posted.is_empty() {
            self.run_posted_slow(w, side);
        }
    }

    #[inline(never)]
    fn run_posted_slow(&self, w: &mut Worker, side: &mut Side) {
        while let Some(Posted { hdr, op }) = self.posted.pop() {
            let hdr = hdr.0;
            match op.start(w, Wk::word(hdr)) {
                Ok(Some(r)) => self.outstanding(w, side, hdr, r),
                done => {
                    let s = done.err().unwrap_or(Status::Ok);
                    // SAFETY: the header given out with the posted operation, on no
                    // list; its callback runs from the dispatch.
                    unsafe {
                        ReqHdr::set_outcome(hdr, s, RecvInfo::default());
                        side.ready.push(hdr);
                    }
                    self.has_ready.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// After the worker was released: runs what was posted meanwhile, unless another
    /// thread holds the worker again (it runs it then).
    #[cold]
    fn after_release(&self) {
        loop {
            // Pairs with the fence of a posting thread: either it sees the worker free,
            // or this thread sees its operation.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.posted.is_empty() {
                return;
            }
            let Some(m) = &self.lock else { return };
            let g = match m.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::WouldBlock) => return,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            };
            if self.busy.replace(true) {
                return;
            }
            {
                let _busy = Unbusy(&self.busy);
                // SAFETY: as in `with`.
                let inner = unsafe { &mut *self.inner.get() };
                self.run_posted(&mut inner.w, &mut inner.side);
                self.collect(&mut inner.w, &mut inner.side);
            }
            drop(g);
        }
    }

    /// A request header for an operation posted by a thread that does not hold the
    /// worker: the caller's memory, a spare block or a new one; filled and given out.
    pub(crate) fn begin_posted(&self, op: &Op, flags: u32) -> Result<*mut ReqHdr> {
        if op.user_req() {
            return self.begin_user(op, flags);
        }
        let hdr = match self.spare.pop() {
            Some(b) => b.0,
            None => self.blocks.block()?,
        };
        // SAFETY: a block of this worker that nobody uses, given out now.
        unsafe {
            (*hdr)
                .flags
                .store(flags | self.shared_bit(), Ordering::Relaxed);
            (*hdr).result = std::ptr::null_mut();
            self.fill(hdr, op);
        }
        Ok(hdr)
    }

    /// Runs `f` on the side state only (the request pool, the ready list): the lock and
    /// the busy flag as in [`Wk::with`], without collecting completions. In thread mode
    /// multi it does not wait: `Busy` while another thread holds the worker.
    #[inline(always)]
    fn with_side<R>(&self, f: impl FnOnce(&mut Side) -> R) -> Result<R> {
        let g = if self.delegate {
            self.lock_try().ok_or(Status::Busy)?
        } else {
            self.lock_wait()
        };
        if self.busy.replace(true) {
            return Err(Status::InvalidParam);
        }
        let r = {
            let _busy = Unbusy(&self.busy);
            // SAFETY: as in `with`.
            let inner = unsafe { &mut *self.inner.get() };
            f(&mut inner.side)
        };
        self.unlock(g);
        Ok(r)
    }

    /// Progress for `ucp_worker_progress` on a worker without a lock (thread modes single
    /// and serialized) when no handler or callback is due before it: the worker's
    /// progress, then its completions taken as a ready list in the same turn inside the
    /// worker (as [`Wk::progress`] does), for the caller to run once the worker is left.
    /// `None` sends the call the general way ([`Wk::progress`]). Kept apart so that a loop
    /// polling an idle worker costs a few loads and the worker's own check.
    #[inline(always)]
    pub(crate) fn progress_plain(&self) -> Option<Result<(usize, *mut ReqHdr)>> {
        if self.lock.is_some() || self.has_ready() || self.evq.hint.load(Ordering::Acquire) {
            return None;
        }
        if self.busy.replace(true) {
            return Some(Err(Status::InvalidParam));
        }
        let _busy = Unbusy(&self.busy);
        // SAFETY: as in `with`.
        let inner = unsafe { &mut *self.inner.get() };
        let n = inner.w.progress();
        self.collect(&mut inner.w, &mut inner.side);
        let ready = if self.has_ready() {
            self.has_ready.store(false, Ordering::Relaxed);
            inner.side.ready.take()
        } else {
            std::ptr::null_mut()
        };
        Some(Ok((n, ready)))
    }

    /// Progress for `ucp_worker_progress`: in thread mode multi, a thread that finds
    /// another one inside the worker returns at once. Also takes the ready list (see
    /// [`Wk::take_ready`]) in the same turn inside the worker.
    #[inline(always)]
    pub(crate) fn progress(&self) -> Result<(usize, *mut ReqHdr)> {
        let Some(g) = self.lock_try() else {
            // Another thread is inside the worker and does this thread's work too (its
            // posted operations, the completions): give it the CPU, which matters when
            // threads outnumber cores. Only on this contended path; never in the
            // single-threaded modes, which have no lock or never find it held.
            std::thread::yield_now();
            return Ok((0, std::ptr::null_mut()));
        };
        if self.busy.replace(true) {
            return Err(Status::InvalidParam);
        }
        let r = {
            let _busy = Unbusy(&self.busy);
            // SAFETY: as in `with`.
            let inner = unsafe { &mut *self.inner.get() };
            if self.delegate {
                self.run_posted(&mut inner.w, &mut inner.side);
            }
            let n = inner.w.progress();
            self.collect(&mut inner.w, &mut inner.side);
            let ready = if self.has_ready() {
                self.has_ready.store(false, Ordering::Relaxed);
                inner.side.ready.take()
            } else {
                std::ptr::null_mut()
            };
            (n, ready)
        };
        self.unlock(g);
        Ok(r)
    }

    /// Moves the worker's completions (and finished polled requests) onto the ready list.
    #[inline(always)]
    fn collect(&self, w: &mut Worker, side: &mut Side) {
        if w.has_completed() {
            w.drain_completed(|c| side.completed(c));
            self.has_ready.store(true, Ordering::Relaxed);
        }
        if !side.polled.is_empty() {
            self.poll_closes(w, side);
        }
    }

    #[cold]
    fn poll_closes(&self, w: &mut Worker, side: &mut Side) {
        let mut i = 0;
        while i < side.polled.len() {
            let hdr = side.polled[i];
            // SAFETY: polled headers are live requests of this worker.
            let r = Request::from_u64(unsafe { (*hdr).rust_id });
            match w.request_test(r) {
                Ok(None) => i += 1,
                res => {
                    let s = res.ok().flatten().unwrap_or(Status::Canceled);
                    let _ = w.request_free(r);
                    side.polled.swap_remove(i);
                    // SAFETY: as above.
                    unsafe {
                        ReqHdr::set_outcome(hdr, s, RecvInfo::default());
                        side.ready.push(hdr);
                    }
                    self.has_ready.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// True when completed requests wait for their callbacks.
    #[inline(always)]
    pub(crate) fn has_ready(&self) -> bool {
        self.has_ready.load(Ordering::Relaxed)
    }

    /// Takes the ready list (headers linked by [`next_ready`]); `Err` while the worker is
    /// borrowed on this thread.
    #[inline(always)]
    pub(crate) fn take_ready(&self) -> Result<*mut ReqHdr> {
        self.with_side(|side| {
            self.has_ready.store(false, Ordering::Relaxed);
            side.ready.take()
        })
    }

    /// An empty request of the pool for `ucp_request_alloc`: it reads as completed
    /// (`UCS_OK`) until an operation uses it as its request memory.
    pub(crate) fn alloc_request(&self) -> Result<*mut ReqHdr> {
        let op = Op::nb(CbKind::SendNbx, 0, DT_BYTES, false);
        let hdr = self.with(|_, side| self.begin(side, &op, F_ALLOCATED | F_COMPLETED))??;
        // SAFETY: the block just started, not given out yet.
        unsafe {
            self.fill(hdr, &op);
            (*hdr).status.store(i32::from(UCS_OK), Ordering::Release);
        }
        Ok(hdr)
    }

    /// The header for a new operation: the caller's memory or a pooled block, started
    /// with the operation's callback. Its address is the word the Rust operation reports
    /// its completion with ([`Wk::word`]).
    #[inline(always)]
    pub(crate) fn begin(&self, side: &mut Side, op: &Op, flags: u32) -> Result<*mut ReqHdr> {
        if op.user_req() {
            return self.begin_user(op, flags);
        }
        self.begin_pooled(side, flags)
    }

    /// [`Wk::begin`] for an operation without the caller's request memory.
    #[inline(always)]
    fn begin_pooled(&self, side: &mut Side, flags: u32) -> Result<*mut ReqHdr> {
        let hdr = match side.pool.free.pop() {
            Some(p) => p,
            None => self.fresh_block(side)?,
        };
        // SAFETY: a block of the pool, not in use. Only what an immediate completion reads
        // is set now; the rest when the header is given out ([`Wk::fill`]).
        unsafe {
            (*hdr)
                .flags
                .store(flags | self.shared_bit(), Ordering::Relaxed);
            (*hdr).result = std::ptr::null_mut();
        }
        Ok(hdr)
    }

    /// `F_SHARED` for the requests of a worker with a lock, else nothing.
    #[inline(always)]
    fn shared_bit(&self) -> u32 {
        if self.lock.is_some() {
            F_SHARED
        } else {
            0
        }
    }

    /// A block when the pool has none: one given back while the worker was held, or a
    /// new one.
    #[cold]
    fn fresh_block(&self, side: &mut Side) -> Result<*mut ReqHdr> {
        match self.spare.pop() {
            Some(b) => Ok(b.0),
            None => side.pool.grow(),
        }
    }

    /// [`Wk::begin`] for the caller's request memory: filled at once.
    #[inline(never)]
    fn begin_user(&self, op: &Op, flags: u32) -> Result<*mut ReqHdr> {
        let hdr = self.user_header(op.request, flags)?;
        // SAFETY: started just now for this call, given to no one yet.
        unsafe { self.fill(hdr, op) };
        Ok(hdr)
    }

    /// The header in the caller's request memory at `request`, started with `flags`:
    /// only what an immediate completion reads is set ([`Wk::fill_parts`] does the
    /// rest), as [`Wk::begin_pooled`] does for a block of the pool.
    #[inline(always)]
    fn user_header(&self, request: *mut c_void, flags: u32) -> Result<*mut ReqHdr> {
        let hdr = ReqHdr::for_user_memory(request)?;
        // SAFETY: the caller's request memory, not in use; the atomics are written
        // through their own API, the rest with plain stores.
        unsafe {
            let h = &mut *hdr;
            // A block of `ucp_request_alloc` keeps its pool identity when the application
            // starts an operation on it (other memory is the caller's).
            let allocated = h.magic.load(Ordering::Acquire) == MAGIC_LIVE
                && h.flags.load(Ordering::Acquire) & F_ALLOCATED != 0
                && h.block_size >= HDR_SIZE;
            if !allocated {
                h.block_size = 0;
            }
            let f = flags | F_USER | self.shared_bit() | if allocated { F_ALLOCATED } else { 0 };
            h.flags.store(f, Ordering::Relaxed);
            h.result = std::ptr::null_mut();
        }
        Ok(hdr)
    }

    /// Completes the header of `op` for giving it out: callback, worker, status, magic.
    ///
    /// # Safety
    /// `hdr` must be a header started by [`Wk::begin`] for `op`, not given out yet.
    #[inline(always)]
    unsafe fn fill(&self, hdr: *mut ReqHdr, op: &Op) {
        // SAFETY: forwarded contract.
        unsafe { self.fill_parts(hdr, op.cb_kind, op.cb, op.user_data, 0) }
    }

    /// [`Wk::fill`] from the callback's parts, setting `extra` flags as well.
    ///
    /// # Safety
    /// As for [`Wk::fill`].
    #[inline(always)]
    unsafe fn fill_parts(
        &self,
        hdr: *mut ReqHdr,
        kind: CbKind,
        cb: usize,
        user_data: *mut c_void,
        extra: u32,
    ) {
        let (me, gen) = self.me();
        // SAFETY: by the contract.
        unsafe {
            let h = &mut *hdr;
            let mut f = h.flags.load(Ordering::Relaxed) | extra;
            if cb != 0 {
                f |= F_CALLBACK;
            }
            h.cb_kind = kind as u8;
            h.worker = me;
            h.worker_gen = gen;
            h.cb = cb;
            h.user_data = user_data;
            h.status.store(i32::from(UCS_INPROGRESS), Ordering::Relaxed);
            h.flags.store(f, Ordering::Relaxed);
            h.magic.store(MAGIC_LIVE, Ordering::Release);
        }
    }

    /// The completion word of a header made by [`Wk::begin`].
    #[inline(always)]
    pub(crate) fn word(hdr: *mut ReqHdr) -> Option<Callback> {
        Some(Callback::Word(hdr as u64))
    }

    /// Turns the outcome of a Rust call started with `hdr` (from [`Wk::begin`]) into what
    /// the C function returns. Runs inside [`Wk::with`].
    #[inline(always)]
    pub(crate) fn conclude(
        &self,
        w: &mut Worker,
        side: &mut Side,
        op: &Op,
        hdr: *mut ReqHdr,
        out: Result<Outcome>,
        recv: RecvOut,
    ) -> Result<ucs_status_ptr_t> {
        if !op.cq.is_null() {
            // The queue gets the completion (also of one inside the call); the header
            // was not given out.
            // SAFETY: the header started for this call (pooled: `nbx` refuses a queue
            // together with the caller's request memory).
            unsafe { side.abandon(hdr, Status::Ok) };
            return out.map(|_| std::ptr::null_mut());
        }
        let r = match out {
            Ok(Outcome::Done(s, info)) => return self.immediate(side, op, hdr, s, info, recv),
            Ok(Outcome::Req(r)) => r,
            Ok(Outcome::Polled(r)) => {
                // SAFETY: the header started for this call.
                unsafe {
                    self.fill_pooled(hdr, op);
                    (*hdr).rust_id = r.to_u64();
                    (*hdr).flags_or(F_RUST);
                }
                side.polled.push(hdr);
                return Ok(ReqHdr::user(hdr));
            }
            Err(s) => {
                // SAFETY: the header started for this call; the call made no request.
                unsafe { side.abandon(hdr, s) };
                return Err(s);
            }
        };
        if !op.no_imm() {
            // Completed inside the call: its completion is among the worker's (the
            // protocol layer reports a request that completes in the starting call before
            // the call returns). A completion not reported yet makes the request an
            // ordinary outstanding one, except with FORCE_IMM_CMPL, which looks harder.
            let own = if w.has_completed() {
                self.take_own(w, side, hdr, false)
            } else {
                None
            };
            let own = match own {
                None if op.force_imm() && matches!(w.request_test(r), Ok(Some(_))) => {
                    self.take_own(w, side, hdr, true)
                }
                o => o,
            };
            if let Some((s, info)) = own {
                let _ = w.request_free(r);
                if op.datatype & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_GENERIC {
                    // The protocol layer lets the buffer go (and so calls the
                    // datatype's `finish`) when the request goes; make that happen
                    // before the caller hears the operation is complete.
                    w.progress();
                    self.collect(w, side);
                }
                return self.immediate(side, op, hdr, s, info, recv);
            }
            if op.force_imm() {
                let _ = w.abort_for_good(r);
                if self.take_own(w, side, hdr, true).is_some() {
                    let _ = w.request_free(r);
                    // SAFETY: the header of this call; its request is gone.
                    unsafe { side.abandon(hdr, Status::NoResource) };
                    return Err(Status::NoResource);
                }
                // Not reported yet (cannot happen with an aborted request): keep it as a
                // request the caller never sees, released and without callback.
                // SAFETY: the header of this call.
                unsafe {
                    self.fill_pooled(hdr, op);
                    (*hdr).flags_or(F_RELEASED);
                    (*hdr).flags_clear(F_CALLBACK);
                }
                self.outstanding(w, side, hdr, r);
                return Err(Status::NoResource);
            }
        }
        // SAFETY: the header started for this call, given out now.
        unsafe { self.fill_pooled(hdr, op) };
        self.outstanding(w, side, hdr, r);
        Ok(ReqHdr::user(hdr))
    }

    /// Starts one operation inside [`Wk::with`]: `f` runs the Rust call with the callback
    /// to give it. An operation that is [`Wk::lazy`] starts with none and takes a header
    /// only if it is still in progress when `f` returns ([`Wk::settle`]); any other
    /// takes its header first ([`Wk::begin`], [`Wk::conclude`]).
    #[inline(always)]
    pub(crate) fn start(
        &self,
        w: &mut Worker,
        side: &mut Side,
        op: &Op,
        flags: u32,
        recv: RecvOut,
        f: impl FnOnce(&mut Worker, Option<Callback>) -> Result<Outcome>,
    ) -> Result<ucs_status_ptr_t> {
        if Wk::lazy(op) {
            let out = f(w, None);
            return self.settle(w, side, op, flags, out, recv);
        }
        let hdr = self.begin(side, op, flags)?;
        let out = f(w, op.callback(hdr));
        self.conclude(w, side, op, hdr, out, recv)
    }

    /// True when `op` may start without a header ([`Wk::settle`]): it reports by word to a
    /// pooled request, and an immediate completion returns no request. Operations with
    /// a queue, the caller's request memory, `NO_IMM_CMPL`/`FORCE_IMM_CMPL`, or a generic
    /// datatype (whose `finish` must run before the call returns) take [`Wk::begin`].
    #[inline(always)]
    pub(crate) fn lazy(op: &Op) -> bool {
        op.cq.is_null()
            && op.request.is_null()
            && op.mask & (UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL) == 0
            && op.datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_GENERIC
    }

    /// True when a tag receive of `op` waits in the matcher by word
    /// ([`Wk::start_word_recv`], no Rust request): it has a callback or the caller's
    /// request memory (Open MPI's blocking receive), no queue, no
    /// `NO_IMM_CMPL`/`FORCE_IMM_CMPL`, and no generic datatype. Its header is taken
    /// before the receive is posted; one that completes in the call returns NULL (or
    /// its error) and, in the caller's memory, reads as completed.
    #[inline(always)]
    pub(crate) fn by_word(op: &Op) -> bool {
        op.cq.is_null()
            && (op.cb != 0 || !op.request.is_null())
            && op.mask & (UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL) == 0
            && op.datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_GENERIC
    }

    /// Turns the outcome of a Rust call started with no callback (for an `op` that is
    /// [`Wk::lazy`], or differs from one only by `NO_IMM_CMPL`) into what the C function
    /// returns. Most small operations complete in the call, and then no request header is
    /// taken from the pool at all (with `NO_IMM_CMPL`, one is, already completed); one
    /// still in progress gets its header now and is handed to the word-completion path
    /// (`Worker::request_adopt`). Runs inside [`Wk::with`].
    #[inline(always)]
    pub(crate) fn settle(
        &self,
        w: &mut Worker,
        side: &mut Side,
        op: &Op,
        flags: u32,
        out: Result<Outcome>,
        recv: RecvOut,
    ) -> Result<ucs_status_ptr_t> {
        match out {
            Ok(Outcome::Done(s, info)) if op.no_imm() => {
                // Completed in the call, but the caller asked for a request all the same:
                // it gets one whose callback runs before the call returns.
                let hdr = self.begin(side, op, flags)?;
                self.immediate(side, op, hdr, s, info, recv)
            }
            Ok(Outcome::Done(s, info)) => {
                // SAFETY: the caller's receive-information pointer, given with its mask bit.
                unsafe { write_recv_info(op, recv, info) };
                Ok(match s {
                    Status::Ok => std::ptr::null_mut(),
                    e => guard::status_to_ptr(e),
                })
            }
            Ok(Outcome::Req(r)) => self.settle_pending(w, side, op, flags, r, recv),
            Ok(Outcome::Polled(r)) => {
                let hdr = self.begin(side, op, flags)?;
                self.conclude(w, side, op, hdr, Ok(Outcome::Polled(r)), recv)
            }
            Err(s) => Err(s),
        }
    }

    /// [`Wk::settle`] for an operation still in progress: its header, and the request
    /// reported by the header's word from now on.
    #[inline(never)]
    fn settle_pending(
        &self,
        w: &mut Worker,
        side: &mut Side,
        op: &Op,
        flags: u32,
        r: Request,
        recv: RecvOut,
    ) -> Result<ucs_status_ptr_t> {
        let hdr = match self.begin(side, op, flags) {
            Ok(h) => h,
            Err(e) => {
                // No memory for the C request: stop the operation rather than let it run
                // with nobody to tell.
                let _ = w.abort_for_good(r);
                let _ = w.request_free(r);
                return Err(e);
            }
        };
        match w.request_adopt(r, hdr as u64) {
            // Completed in the call after all (a synchronous send to this very worker).
            Some((s, info)) => self.immediate(side, op, hdr, s, info, recv),
            None => {
                // SAFETY: the header started for this call, given out now.
                unsafe { self.fill_pooled(hdr, op) };
                Self::track(side, hdr, r);
                Ok(ReqHdr::user(hdr))
            }
        }
    }

    /// [`Wk::fill`] for a pooled header (the caller's memory is filled by `begin`).
    ///
    /// # Safety
    /// As for [`Wk::fill`].
    #[inline(always)]
    unsafe fn fill_pooled(&self, hdr: *mut ReqHdr, op: &Op) {
        if !op.user_req() {
            // SAFETY: forwarded contract.
            unsafe { self.fill(hdr, op) };
        }
    }

    /// Keeps `hdr` as an outstanding request for `r`, which is released now.
    #[inline(always)]
    fn outstanding(&self, w: &mut Worker, side: &mut Side, hdr: *mut ReqHdr, r: Request) {
        Self::track(side, hdr, r);
        let _ = w.request_free(r);
    }

    /// Starts a tag receive reported by word ([`ucp::Worker::tag_recv_word`]) inside
    /// [`Wk::with`]: its header is taken first, and its word is the header's address.
    /// A receive that waits needs no Rust request (the matcher keeps the buffer and the
    /// word, and its ticket goes into the header for `ucp_request_cancel`); one that
    /// takes a whole message in the call gives a pooled header back (the caller's memory
    /// reads as completed) and returns no request.
    /// For operations that are [`Wk::by_word`] (the caller's memory or a pooled block).
    #[inline(always)]
    pub(crate) fn start_word_recv(
        &self,
        w: &mut Worker,
        side: &mut Side,
        op: &Op,
        f: impl FnOnce(&mut Worker, u64) -> Result<ucp::WordRecv>,
    ) -> Result<ucs_status_ptr_t> {
        let hdr = self.begin(side, op, F_RECV)?;
        let ticket = match f(w, hdr as u64) {
            Ok(ucp::WordRecv::Done(s, info)) => {
                return self.immediate(side, op, hdr, s, info, RecvOut::Tag)
            }
            Ok(ucp::WordRecv::Waiting(t)) => Some(t),
            Ok(ucp::WordRecv::Matched) => None,
            Err(s) => {
                // SAFETY: the header started for this call; the call made no receive.
                unsafe { side.abandon(hdr, s) };
                return Err(s);
            }
        };
        // SAFETY: the header started for this call, on no list, given out now.
        unsafe {
            self.fill_pooled(hdr, op);
            if let Some(t) = ticket {
                (*hdr).ticket = t.to_raw();
                (*hdr).flags_or(F_TICKET);
            }
            side.inflight.link(hdr);
        }
        Ok(ReqHdr::user(hdr))
    }

    /// [`Wk::start_word_recv`] for a plain receive with a callback (`ucp_tag_recv_nbx`'s
    /// hot path: no request memory of the caller's, no receive information, no flags), with
    /// the callback's parts instead of a decoded [`Op`].
    #[inline(always)]
    pub(crate) fn start_word_recv_plain(
        &self,
        w: &mut Worker,
        side: &mut Side,
        cb: usize,
        user_data: *mut c_void,
        f: impl FnOnce(&mut Worker, u64) -> Result<ucp::WordRecv>,
    ) -> Result<ucs_status_ptr_t> {
        let hdr = self.begin_pooled(side, F_RECV)?;
        let ticket = match f(w, hdr as u64) {
            Ok(ucp::WordRecv::Done(s, _)) => {
                // Received in the call: no request, no callback (nothing asked for the
                // receive information).
                // SAFETY: a pooled block of this call, unused now.
                unsafe { side.pool.put(hdr) };
                return Ok(match s {
                    Status::Ok => std::ptr::null_mut(),
                    e => guard::status_to_ptr(e),
                });
            }
            Ok(ucp::WordRecv::Waiting(t)) => Some(t),
            Ok(ucp::WordRecv::Matched) => None,
            Err(s) => {
                // SAFETY: a pooled block of this call, unused: the call made no receive.
                unsafe { side.pool.put(hdr) };
                return Err(s);
            }
        };
        // SAFETY: the header started for this call, on no list, given out now; its
        // flags, `F_LISTED` included, are written once, by `fill_parts`.
        unsafe {
            let mut extra = F_LISTED;
            if let Some(t) = ticket {
                (*hdr).ticket = t.to_raw();
                extra |= F_TICKET;
            }
            side.inflight.link_unflagged(hdr);
            self.fill_parts(hdr, CbKind::TagRecvNbx, cb, user_data, extra);
        }
        Ok(ReqHdr::user(hdr))
    }

    /// [`Wk::start_word_recv_plain`] for a receive in the caller's request memory at
    /// `request` (Open MPI's blocking receive: no callback, `ucp_request_test` until it
    /// is done). One that takes its whole message in the call returns NULL (or the
    /// error), as UCX's does, and its memory reads as completed.
    #[inline(always)]
    pub(crate) fn start_word_recv_user(
        &self,
        w: &mut Worker,
        side: &mut Side,
        request: *mut c_void,
        cb: usize,
        user_data: *mut c_void,
        f: impl FnOnce(&mut Worker, u64) -> Result<ucp::WordRecv>,
    ) -> Result<ucs_status_ptr_t> {
        let hdr = self.user_header(request, F_RECV)?;
        let (ticket, extra) = match f(w, hdr as u64) {
            Ok(ucp::WordRecv::Done(s, info)) => {
                // SAFETY: the header started for this call, on no list: filled, with
                // its outcome, and marked completed (no callback: nothing asked for a
                // request).
                unsafe {
                    self.fill_parts(hdr, CbKind::TagRecvNbx, cb, user_data, F_COMPLETED);
                    ReqHdr::set_outcome(hdr, s, info);
                }
                return Ok(match s {
                    Status::Ok => std::ptr::null_mut(),
                    e => guard::status_to_ptr(e),
                });
            }
            Ok(ucp::WordRecv::Waiting(t)) => (Some(t), F_LISTED | F_TICKET),
            Ok(ucp::WordRecv::Matched) => (None, F_LISTED),
            Err(s) => {
                // SAFETY: the header started for this call; the call made no receive.
                unsafe {
                    self.fill_parts(hdr, CbKind::TagRecvNbx, 0, user_data, 0);
                    side.abandon(hdr, s);
                }
                return Err(s);
            }
        };
        // SAFETY: the header started for this call, on no list, given out now; its
        // flags, `F_LISTED` included, are written once, by `fill_parts`.
        unsafe {
            if let Some(t) = ticket {
                (*hdr).ticket = t.to_raw();
            }
            side.inflight.link_unflagged(hdr);
            self.fill_parts(hdr, CbKind::TagRecvNbx, cb, user_data, extra);
        }
        Ok(ReqHdr::user(hdr))
    }

    /// Puts `hdr` on the in-flight list as the C request of `r` (whose release is the
    /// caller's business: `Worker::request_adopt` has released it already).
    #[inline(always)]
    fn track(side: &mut Side, hdr: *mut ReqHdr, r: Request) {
        // SAFETY: the header started for this call, on no list.
        unsafe {
            (*hdr).rust_id = r.to_u64();
            (*hdr).flags_or(F_RUST);
            side.inflight.link(hdr);
        }
    }

    /// Takes the completion of `hdr`'s own request out of the worker's completions (the
    /// others go to the ready list); with `wait`, progresses once if it was not reported
    /// yet.
    #[inline(never)]
    fn take_own(
        &self,
        w: &mut Worker,
        side: &mut Side,
        hdr: *mut ReqHdr,
        wait: bool,
    ) -> Option<(Status, RecvInfo)> {
        for round in 0..(1 + usize::from(wait)) {
            if round == 1 {
                w.progress();
            }
            let mut own = None;
            let mut others = false;
            w.drain_completed(|c| {
                if c.word == hdr as u64 {
                    own = Some((c.status, c.info));
                } else {
                    others = true;
                    side.completed(c);
                }
            });
            if others {
                self.has_ready.store(true, Ordering::Relaxed);
            }
            if own.is_some() {
                return own;
            }
        }
        None
    }

    #[inline(always)]
    fn immediate(
        &self,
        side: &mut Side,
        op: &Op,
        hdr: *mut ReqHdr,
        s: Status,
        info: RecvInfo,
        recv: RecvOut,
    ) -> Result<ucs_status_ptr_t> {
        if op.no_imm() {
            // The header is given out; the callback runs from dispatch, before the call
            // returns.
            // SAFETY: the header started for this call, on no list.
            unsafe {
                self.fill_pooled(hdr, op);
                ReqHdr::set_outcome(hdr, s, info);
                side.ready.push(hdr);
            }
            self.has_ready.store(true, Ordering::Relaxed);
            return Ok(ReqHdr::user(hdr));
        }
        // SAFETY: the header started for this call, on no list.
        unsafe { ReqHdr::set_outcome(hdr, s, info) };
        if op.user_req() {
            // SAFETY: as above.
            unsafe { (*hdr).flags_or(F_COMPLETED) };
        } else {
            // SAFETY: a pooled block of this call, unused now (its outcome, such as a
            // 32-bit atomic's result, was copied out above).
            unsafe { side.pool.put(hdr) };
        }
        // SAFETY: the caller's receive-information pointer, given with its mask bit.
        unsafe { write_recv_info(op, recv, info) };
        Ok(match s {
            Status::Ok => std::ptr::null_mut(),
            e => guard::status_to_ptr(e),
        })
    }

    /// Tears the worker down: drops the Rust worker (which cancels what is outstanding)
    /// and marks every outstanding C request canceled (no C callback runs now). Returns
    /// the side state, whose handles the caller destroys.
    pub(crate) fn shut_down(self) -> Side {
        let Inner { w, mut side } = self.inner.into_inner();
        drop(w);
        // Nothing is posted once every call returned (see `after_release`); should
        // anything be, its request reads as canceled.
        while let Some(p) = self.posted.pop() {
            // SAFETY: a header given out with a posted operation that never started.
            unsafe {
                ReqHdr::set_outcome(p.hdr.0, Status::Canceled, RecvInfo::default());
                (*p.hdr.0).flags_or(F_COMPLETED);
            }
        }
        while let Some(b) = self.spare.pop() {
            side.pool.free.push(b.0);
        }
        let mut h = side.inflight.head;
        side.inflight.head = std::ptr::null_mut();
        while !h.is_null() {
            // SAFETY: headers on the in-flight list are live requests of this worker.
            unsafe {
                let next = (*h).next;
                (*h).flags_clear(F_LISTED);
                ReqHdr::set_outcome(h, Status::Canceled, RecvInfo::default());
                complete_at_shutdown(&mut side.pool, h);
                h = next;
            }
        }
        for hdr in std::mem::take(&mut side.polled) {
            // SAFETY: a live header waiting for a close that will not finish now.
            unsafe {
                ReqHdr::set_outcome(hdr, Status::Canceled, RecvInfo::default());
                complete_at_shutdown(&mut side.pool, hdr);
            }
        }
        let mut h = side.ready.take();
        while !h.is_null() {
            // SAFETY: headers on the ready list are live requests with their outcome.
            unsafe {
                let next = (*h).next;
                complete_at_shutdown(&mut side.pool, h);
                h = next;
            }
        }
        side
    }
}

/// Marks a request of a worker being destroyed complete. One the application already
/// released (`ucp_request_free` before completion) has no owner left: it goes back to the
/// pool, which frees it (and runs `request_cleanup` on it) with the worker; a request
/// still held stays valid until the application frees it.
///
/// # Safety
/// `h` must be a live request of the pool's worker, on none of its lists any more.
unsafe fn complete_at_shutdown(pool: &mut ReqPool, h: *mut ReqHdr) {
    // SAFETY: by the contract, a live header.
    let old = unsafe { (*h).flags_or(F_COMPLETED) };
    if old & F_RELEASED != 0 && old & F_USER == 0 {
        // SAFETY: released and now complete: nobody refers to the block; a pooled block
        // (not the caller's memory) of this worker's pool.
        unsafe { pool.put(h) };
    }
}

/// The header after `h` on a list taken with [`Wk::take_ready`].
///
/// # Safety
/// `h` must be a header of such a list, before its callback ran.
#[inline]
pub(crate) unsafe fn next_ready(h: *mut ReqHdr) -> *mut ReqHdr {
    // SAFETY: by the contract.
    unsafe { (*h).next }
}

/// Writes receive information for an immediate completion.
unsafe fn write_recv_info(op: &Op, recv: RecvOut, info: RecvInfo) {
    if op.recv_info.is_null() {
        return;
    }
    // SAFETY: the caller set UCP_OP_ATTR_FIELD_RECV_INFO and a pointer of the type the
    // operation defines.
    unsafe {
        match recv {
            RecvOut::Tag => {
                op.recv_info
                    .cast::<ucp_tag_recv_info_t>()
                    .write_unaligned(ucp_tag_recv_info_t {
                        sender_tag: info.sender_tag,
                        length: info.length,
                    })
            }
            RecvOut::Length => op.recv_info.cast::<usize>().write_unaligned(info.length),
            RecvOut::None => {}
        }
    }
}

// ----- the end of a request ------------------------------------------------------------------

/// Marks a request completed after its callback ran, and returns a released block to its
/// pool. Called with no worker borrowed.
///
/// # Safety
/// `hdr` must be a live request whose outcome was stored.
#[inline(always)]
pub(crate) unsafe fn mark_completed(hdr: *mut ReqHdr) {
    // SAFETY: a live header.
    let old = unsafe { &*hdr }.flags_or(F_COMPLETED);
    if old & F_RELEASED != 0 && old & F_USER == 0 {
        // SAFETY: released by the caller and now complete: the block is ours again.
        unsafe { recycle(hdr) };
    }
}

/// `ucp_request_free` (`drop_callback`) and `ucp_request_release`.
///
/// # Safety
/// `request` must be a request pointer of ours (or garbage that the checks refuse).
#[inline(always)]
pub(crate) unsafe fn release(request: *mut c_void, drop_callback: bool) -> Result<()> {
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
        old = h.flags_clear(F_USER) & !F_USER;
    }
    if old & F_SHARED == 0 {
        // One thread at a time (see `F_SHARED`): a plain update.
        if old & F_RELEASED != 0 {
            return Err(Status::InvalidParam);
        }
        let mut new = old | F_RELEASED;
        if drop_callback {
            new &= !F_CALLBACK;
        }
        h.flags.store(new, Ordering::Release);
        if old & F_COMPLETED != 0 {
            // SAFETY: completed and now released: nobody refers to the block any more.
            unsafe { recycle(hdr) };
        }
        return Ok(());
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

/// Returns a pooled block to its worker's pool (or frees it if the worker is gone).
///
/// # Safety
/// `hdr` must be a pooled block no one uses any more.
#[inline(always)]
unsafe fn recycle(hdr: *mut ReqHdr) {
    // SAFETY: a block of ours.
    let (w, gen, size) = unsafe { ((*hdr).worker, (*hdr).worker_gen, (*hdr).block_size) };
    // SAFETY: the worker pointer was a live handle when the request started; cells are
    // never freed, and the generation check catches a destroyed or reused worker.
    if let Ok(wk) = unsafe { Handle::<Wk>::get_gen(w, gen) } {
        // SAFETY: the block is a pooled block of this worker, unused now.
        match wk.with_side(|side| unsafe { side.pool.put(hdr) }) {
            Ok(()) => return,
            // Held by another thread (thread mode multi): the spare list takes it.
            Err(Status::Busy) => {
                // SAFETY: a block of ours, unused from now on.
                unsafe { (*hdr).magic.store(MAGIC_FREE, Ordering::Release) };
                wk.spare.push(BlockPtr(hdr));
                return;
            }
            // The worker is busy on this thread (a free from inside a generic datatype
            // callback): let the block go.
            Err(_) => {}
        }
    }
    // SAFETY: a block of ours that nobody uses.
    unsafe { free_block(hdr, size) };
}

/// The handle of a Rust endpoint of `wk` (made on first use, for reply endpoints).
pub(crate) fn ep_handle_for(wk: &Wk, side: &mut Side, ep: ucp::Ep) -> *mut Handle<EpH> {
    if let Some(&h) = side.eps.get(&ep) {
        return h;
    }
    let (me, gen) = wk.me();
    let mut name = [0 as c_char; UCP_ENTITY_NAME_MAX];
    text::default_name("reply-ep", &mut name);
    let (h, _) = Handle::alloc(EpH {
        wk: me,
        wgen: gen,
        ep,
        user_data: Cell::new(std::ptr::null_mut()),
        name: Cell::new(name),
        implicit: Cell::new(true),
        err: Cell::new(None),
    });
    side.eps.insert(ep, h);
    h
}
