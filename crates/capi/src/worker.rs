//! Workers: the C handle around a `ucp::Worker`, the rule that C code never runs while
//! the Rust worker is borrowed, and the `ucp_worker_*` functions.
//!
//! Every call into the Rust worker goes through [`Wk::with`]: it takes the worker's lock
//! (thread mode multi only; single and serialized take none), marks the worker busy (a
//! call that re-enters from code running inside the worker, such as a generic datatype
//! callback, gets `UCS_ERR_INVALID_PARAM` instead of aliasing it), runs the Rust call, and
//! then moves the completions the Rust callbacks queued into a per-thread "ready" queue.
//! [`Wk::dispatch`] runs after the worker is released and calls the C callbacks and the
//! active-message handlers, so a C callback may call any `ucp_*` function.
//!
//! Rust requests are started with a callback that captures nothing (no allocation per
//! operation) and pushes `(request, status, info)` onto a per-thread queue; the worker's
//! side table maps the request's pool slot to the C header waiting for it.

use crate::context::Ctx;
use crate::ffi::*;
use crate::guard;
use crate::handle::{handle_kind, Handle};
use crate::request::{self, CbKind, ReqHdr, ReqPool, Start, F_COMPLETED, F_RECV, F_RUST};
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use ucp::{RecvInfo, Request, Worker};
use ucs::{Result, Status};

thread_local! {
    /// Completions queued by Rust callbacks during the current worker call.
    static RAW: RefCell<Vec<(Request, Status, RecvInfo)>> = RefCell::new(Vec::with_capacity(64));
    /// Completed C requests whose callbacks are due, in completion order.
    static READY: RefCell<VecDeque<*mut ReqHdr>> = RefCell::new(VecDeque::with_capacity(64));
    /// Set while this thread runs active-message handlers (they are not nested).
    static IN_AM: Cell<bool> = const { Cell::new(false) };
}

struct ResetAm;

impl Drop for ResetAm {
    fn drop(&mut self) {
        IN_AM.with(|f| f.set(false));
    }
}

/// The callback given to every Rust operation: captures nothing, so boxing it does not
/// allocate.
#[inline]
pub(crate) fn rust_cb() -> ucp::Callback {
    ucp::Callback::new(|r: Request, s: Status, i: RecvInfo| {
        RAW.with(|q| q.borrow_mut().push((r, s, i)));
    })
}

/// An active message waiting for its C handler.
pub(crate) struct AmEvent {
    pub id: u16,
    pub header: Vec<u8>,
    pub desc: ucp::AmDesc,
    pub reply_ep: Option<ucp::Ep>,
    /// `Some(length)` for a rendezvous message.
    pub rndv: Option<usize>,
}

/// Something the application hears about through a C handler, queued by a Rust handler
/// during progress and delivered by [`Wk::dispatch`].
pub(crate) enum Event {
    Am(AmEvent),
    /// A connection request on a listener.
    Conn(ucp::ListenerId, ucp::ConnReqId, std::net::SocketAddr),
    /// An endpoint failed.
    EpError(ucp::Ep, Status),
}

/// Events queued by the Rust handlers during progress.
pub(crate) struct EvQueue {
    /// Touched only with the worker held (from inside its progress, or by dispatch).
    pub events: UnsafeCell<VecDeque<Event>>,
    /// Set when `events` may be non-empty.
    pub hint: AtomicBool,
}

impl EvQueue {
    /// Queues an event.
    ///
    /// # Safety
    /// The worker that owns the queue must be held (this runs inside its progress).
    pub(crate) unsafe fn push(&self, e: Event) {
        // SAFETY: by the contract, nobody else touches the queue now.
        unsafe { &mut *self.events.get() }.push_back(e);
        self.hint.store(true, Ordering::Release);
    }
}

/// A pointer to a worker's event queue that Rust handlers (which must be `Send`) carry.
#[derive(Clone, Copy)]
pub(crate) struct QueuePtr(pub *const EvQueue);

// SAFETY: the queue lives in the worker handle, which outlives the Rust worker owning the
// handlers that hold this pointer; it is only used with the worker held.
unsafe impl Send for QueuePtr {}

impl QueuePtr {
    /// Queues an event (from a Rust handler, i.e. with the worker held).
    pub(crate) fn push(&self, e: Event) {
        // SAFETY: see the type; handlers run inside the worker's progress.
        unsafe { (*self.0).push(e) }
    }
}

/// A registered C active-message handler.
#[derive(Clone, Copy)]
pub(crate) enum AmHandlerC {
    /// `ucp_worker_set_am_recv_handler`.
    Recv { cb: usize, arg: *mut c_void },
    /// `ucp_worker_set_am_handler` (the older interface).
    Old { cb: usize, arg: *mut c_void },
}

/// The worker's C-side state, guarded together with the Rust worker.
pub(crate) struct Side {
    pub pool: ReqPool,
    /// Headers waiting for Rust requests, by the request's pool slot.
    pub reqs: Vec<(u64, *mut ReqHdr)>,
    /// Requests without a callback of their own (endpoint close), checked after calls.
    pub polled: Vec<(Request, *mut ReqHdr)>,
    /// Endpoint handles by Rust endpoint (explicit ones, and reply endpoints).
    pub eps: HashMap<ucp::Ep, *mut Handle<crate::ep::EpH>>,
    pub am_handlers: HashMap<u16, AmHandlerC>,
    /// Active-message data kept for the application, by the pointer it was given.
    pub am_kept: HashMap<usize, ucp::AmDesc>,
    pub next_token: usize,
    /// Stream data handed out by `ucp_stream_recv_data_nb`, by pointer.
    pub stream_kept: HashMap<usize, Vec<u8>>,
    /// Messages taken by `ucp_tag_probe_nb` with remove, by handle.
    pub msgs: HashMap<usize, ucp::Message>,
    /// Listeners of this worker.
    pub listeners: HashMap<ucp::ListenerId, crate::listener::ListenerInfo>,
    /// Connection requests given to the application and not answered yet.
    pub conn_reqs: HashMap<ucp::ConnReqId, *mut Handle<crate::listener::ConnReqH>>,
}

impl Side {
    /// A unique token usable as an opaque non-null pointer (never a heap address: the low
    /// four bits are set, and heap blocks are 16-byte aligned).
    pub(crate) fn token(&mut self) -> usize {
        self.next_token += 1;
        (self.next_token << 4) | 0xf
    }

    #[inline]
    fn register(&mut self, r: Request, hdr: *mut ReqHdr) {
        let id = r.to_u64();
        let slot = id as u32 as usize;
        if slot >= self.reqs.len() {
            self.reqs
                .resize(slot + 1 + self.reqs.len() / 2, (0, std::ptr::null_mut()));
        }
        self.reqs[slot] = (id, hdr);
    }
}

struct Inner {
    w: Worker,
    side: Side,
}

/// A worker handle's value.
pub(crate) struct Wk {
    lock: Option<Mutex<()>>,
    busy: Cell<bool>,
    inner: UnsafeCell<Inner>,
    pub evq: EvQueue,
    waker: ucs::sys::EventFd,
    efd: RawFd,
    /// The worker's descriptor was added to the application's epoll set
    /// (`UCP_WORKER_PARAM_FIELD_EVENT_FD`): `ucp_worker_get_efd` is unsupported then.
    external_efd: bool,
    /// The context's `ucp_feature` bits.
    features: u64,
    pub thread_mode: ucs_thread_mode_t,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    /// This worker's own handle and generation (set right after the handle is made).
    me: Cell<(*const Handle<Wk>, u64)>,
}

handle_kind!(Wk, 0x7275_6378_776b_7231);

// SAFETY: everything mutable in a worker is reached through `with`, which in thread mode
// multi holds the worker's mutex and otherwise relies on the application calling from
// one thread at a time (single/serialized, as the API requires). The raw pointers are
// handles and blocks of ours.
unsafe impl Sync for Wk {}
// SAFETY: as above; a worker may be destroyed on another thread than it was created.
unsafe impl Send for Wk {}

struct Unbusy<'a>(&'a Cell<bool>);

impl Drop for Unbusy<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Outcome of a Rust call that starts an operation.
pub(crate) enum Outcome {
    /// Completed inside the call.
    Done(Status, RecvInfo),
    /// In progress; the request completes through the callback queue.
    Req(Request),
    /// In progress; the request has no callback and is checked after worker calls.
    Polled(Request),
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
}

/// `ucp_dt_make_contig(1)`, the default datatype.
pub(crate) const DT_BYTES: u64 = 1 << UCP_DATATYPE_SHIFT;

impl Op {
    /// Reads the fields of `param` its mask names.
    ///
    /// # Safety
    /// `param` must be null or a readable `ucp_request_param_t` (as long as its mask says).
    #[inline]
    pub(crate) unsafe fn nbx(param: *const ucp_request_param_t, kind: CbKind) -> Result<Op> {
        if param.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's parameter struct; every field is read only if its bit is
        // set (the mask itself is always present).
        unsafe {
            let p = &*param;
            let mask = p.op_attr_mask;
            Ok(Op {
                mask,
                flags: if mask & UCP_OP_ATTR_FIELD_FLAGS != 0 {
                    p.flags
                } else {
                    0
                },
                request: if mask & UCP_OP_ATTR_FIELD_REQUEST != 0 {
                    p.request
                } else {
                    std::ptr::null_mut()
                },
                cb_kind: kind,
                cb: if mask & UCP_OP_ATTR_FIELD_CALLBACK != 0 {
                    p.cb
                } else {
                    0
                },
                user_data: if mask & UCP_OP_ATTR_FIELD_USER_DATA != 0 {
                    p.user_data
                } else {
                    std::ptr::null_mut()
                },
                datatype: if mask & UCP_OP_ATTR_FIELD_DATATYPE != 0 {
                    p.datatype
                } else {
                    DT_BYTES
                },
                reply_buffer: if mask & UCP_OP_ATTR_FIELD_REPLY_BUFFER != 0 {
                    p.reply_buffer
                } else {
                    std::ptr::null_mut()
                },
                recv_info: if mask & UCP_OP_ATTR_FIELD_RECV_INFO != 0 {
                    p.recv_info
                } else {
                    std::ptr::null_mut()
                },
            })
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
    fn force_imm(&self) -> bool {
        self.mask & UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL != 0
    }
}

impl Wk {
    /// This worker's handle and generation.
    pub(crate) fn me(&self) -> (*const Handle<Wk>, u64) {
        self.me.get()
    }

    /// Runs `f` with the Rust worker and the side state, then collects completions.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Worker, &mut Side) -> R) -> Result<R> {
        let _lock = self
            .lock
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()));
        if self.busy.replace(true) {
            return Err(Status::InvalidParam);
        }
        let _busy = Unbusy(&self.busy);
        // SAFETY: the busy flag (under the mutex in thread mode multi) makes this the only
        // reference to the worker's inner state until `_busy` drops.
        let inner = unsafe { &mut *self.inner.get() };
        let r = f(&mut inner.w, &mut inner.side);
        collect(&mut inner.w, &mut inner.side);
        Ok(r)
    }

    /// [`Wk::with`], then the callbacks of the requests that completed. The handlers of
    /// events (active messages, connection requests, endpoint failures) run only in
    /// `ucp_worker_progress` and the blocking calls, as with UCX: a program that checks
    /// a flag its handler sets, then progresses and sleeps when progress found nothing,
    /// must not have the handler run unseen inside another call.
    #[inline]
    pub(crate) fn run<R>(&self, f: impl FnOnce(&mut Worker, &mut Side) -> R) -> Result<R> {
        let r = self.with(f);
        self.dispatch_requests();
        r
    }

    /// Progress for `ucp_worker_progress`: in thread mode multi, a thread that finds
    /// another one inside the worker returns at once.
    fn progress(&self) -> Result<usize> {
        if let Some(m) = &self.lock {
            let _lock = match m.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::WouldBlock) => return Ok(0),
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            };
            if self.busy.replace(true) {
                return Err(Status::InvalidParam);
            }
            let _busy = Unbusy(&self.busy);
            // SAFETY: as in `with`.
            let inner = unsafe { &mut *self.inner.get() };
            let n = inner.w.progress();
            collect(&mut inner.w, &mut inner.side);
            return Ok(n);
        }
        self.with(|w, _| w.progress())
    }

    /// Runs `f` on the request pool.
    pub(crate) fn with_pool(&self, f: impl FnOnce(&mut ReqPool)) -> Result<()> {
        self.with(|_, side| f(&mut side.pool))
    }

    /// Calls the C callbacks of completed requests and the C active-message handlers.
    /// Never called with the worker borrowed. Returns how many callbacks and handlers ran
    /// (`ucp_worker_progress` counts them as progress, so that a caller that sleeps when it
    /// returns 0 does not miss them).
    #[inline]
    pub(crate) fn dispatch(&self) -> usize {
        let mut n = self.dispatch_requests();
        if self.evq.hint.load(Ordering::Acquire) && !IN_AM.with(Cell::get) {
            IN_AM.with(|f| f.set(true));
            let _reset = ResetAm;
            n += self.dispatch_events();
        }
        n
    }

    /// Runs the C handlers of queued events (active messages, connection requests,
    /// endpoint failures), one at a time, with the worker released while each runs.
    fn dispatch_events(&self) -> usize {
        let mut n = 0;
        enum Ready {
            Am(crate::am::Ready),
            Conn(crate::listener::Ready),
            EpError(crate::ep::ErrReady),
        }
        loop {
            let next = self.with(|w, side| {
                // SAFETY: the queue is guarded by the worker, which `with` holds.
                let events = unsafe { &mut *self.evq.events.get() };
                loop {
                    let Some(ev) = events.pop_front() else {
                        self.evq.hint.store(false, Ordering::Release);
                        return None;
                    };
                    let r = match ev {
                        Event::Am(a) => crate::am::prepare(self, w, side, a).map(Ready::Am),
                        Event::Conn(l, r, c) => {
                            crate::listener::prepare(self, w, side, l, r, c).map(Ready::Conn)
                        }
                        Event::EpError(e, s) => {
                            crate::ep::prepare_error(side, e, s).map(Ready::EpError)
                        }
                    };
                    if r.is_some() {
                        return r;
                    }
                }
            });
            let Ok(Some(r)) = next else { break };
            n += 1;
            let am = matches!(r, Ready::Am(_));
            match r {
                Ready::Am(r) => crate::am::deliver(self, r),
                Ready::Conn(r) => crate::listener::deliver(self, r),
                Ready::EpError(r) => crate::ep::deliver_error(r),
            }
            n += self.dispatch_requests();
            if am {
                // One active message per call: a program that waits for "the next
                // message" with a flag its handler sets, as UCX's examples do, sees
                // each message before the next handler runs.
                break;
            }
        }
        n
    }

    /// Calls the C callbacks of completed requests.
    #[inline]
    pub(crate) fn dispatch_requests(&self) -> usize {
        let mut n = 0;
        loop {
            let next = READY.with(|q| q.borrow_mut().pop_front());
            match next {
                // SAFETY: headers in the ready queue are live requests whose outcome was
                // stored by `collect`.
                Some(h) => unsafe { request::finish(h) },
                None => return n,
            }
            n += 1;
        }
    }

    /// Turns the outcome of a Rust call into what the C function returns. Runs inside
    /// [`Wk::with`]. `pre` is a header made before the call (32-bit fetching atomics).
    pub(crate) fn conclude(
        &self,
        w: &mut Worker,
        side: &mut Side,
        op: &Op,
        out: Outcome,
        recv: RecvOut,
        pre: Option<*mut ReqHdr>,
    ) -> Result<ucs_status_ptr_t> {
        let (r, polled) = match out {
            Outcome::Done(s, info) => return self.immediate(side, op, s, info, recv, pre),
            Outcome::Req(r) => (r, false),
            Outcome::Polled(r) => (r, true),
        };
        if !op.no_imm() {
            if let Ok(Some(s)) = w.request_test(r) {
                let info = w.request_info(r).unwrap_or_default();
                let _ = w.request_free(r);
                if op.datatype & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_GENERIC {
                    // The protocol layer lets the buffer go (and so calls the datatype's
                    // `finish`) when the request's callback has run; make that happen
                    // before the caller hears the operation is complete.
                    w.progress();
                }
                return self.immediate(side, op, s, info, recv, pre);
            }
            if op.force_imm() {
                let _ = w.request_abort(r);
                let _ = w.request_free(r);
                if let (Some(p), false) = (pre, op.user_req()) {
                    // SAFETY: the pooled header made for this call, unused now.
                    unsafe { side.pool.put(p) };
                }
                return Err(Status::NoResource);
            }
        }
        let hdr = self.header(side, op, recv, pre)?;
        // SAFETY: a header just started for this operation.
        unsafe {
            (*hdr).rust_id = r.to_u64();
            (*hdr).flags.fetch_or(F_RUST, Ordering::Relaxed);
        }
        if polled {
            side.polled.push((r, hdr));
        } else {
            side.register(r, hdr);
            let _ = w.request_free(r);
        }
        Ok(ReqHdr::user(hdr))
    }

    /// A header for a new request: `pre`, the caller's memory, or a pooled block.
    fn header(
        &self,
        side: &mut Side,
        op: &Op,
        recv: RecvOut,
        pre: Option<*mut ReqHdr>,
    ) -> Result<*mut ReqHdr> {
        if let Some(p) = pre {
            return Ok(p);
        }
        let hdr = if op.user_req() {
            ReqHdr::for_user_memory(op.request)?
        } else {
            side.pool.get()?
        };
        let (me, gen) = self.me();
        // SAFETY: a block of ours or the caller's request memory, not in use.
        unsafe {
            ReqHdr::start(
                hdr,
                &Start {
                    worker: me,
                    worker_gen: gen,
                    cb_kind: op.cb_kind,
                    cb: op.cb,
                    user_data: op.user_data,
                    flags: if recv == RecvOut::Tag { F_RECV } else { 0 },
                    user_memory: op.user_req(),
                },
            )
        };
        Ok(hdr)
    }

    /// A header started now for a call that needs one before the Rust call.
    pub(crate) fn pre_header(
        &self,
        side: &mut Side,
        op: &Op,
        extra_flags: u32,
    ) -> Result<*mut ReqHdr> {
        let hdr = self.header(side, op, RecvOut::None, None)?;
        // SAFETY: just started; no one else sees it yet.
        unsafe { (*hdr).flags.fetch_or(extra_flags, Ordering::Relaxed) };
        Ok(hdr)
    }

    fn immediate(
        &self,
        side: &mut Side,
        op: &Op,
        s: Status,
        info: RecvInfo,
        recv: RecvOut,
        pre: Option<*mut ReqHdr>,
    ) -> Result<ucs_status_ptr_t> {
        if op.no_imm() || op.user_req() {
            let hdr = self.header(side, op, recv, pre)?;
            // SAFETY: a started header of this call.
            unsafe { ReqHdr::set_outcome(hdr, s, info.sender_tag, info.length) };
            if op.no_imm() {
                // The callback runs from dispatch, before the call returns.
                READY.with(|q| q.borrow_mut().push_back(hdr));
                return Ok(ReqHdr::user(hdr));
            }
            // SAFETY: as above.
            unsafe { (*hdr).flags.fetch_or(F_COMPLETED, Ordering::Release) };
        } else if let Some(p) = pre {
            // SAFETY: the pooled header made for this call: store (copies a 32-bit
            // atomic's result), then return it.
            unsafe {
                ReqHdr::set_outcome(p, s, info.sender_tag, info.length);
                side.pool.put(p);
            }
        }
        // SAFETY: the caller's receive-information pointer, given with its mask bit.
        unsafe { write_recv_info(op, recv, info) };
        Ok(match s {
            Status::Ok => std::ptr::null_mut(),
            e => guard::status_to_ptr(e),
        })
    }
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

/// Moves completions from the per-thread queue (and finished polled requests) to their
/// C headers and onto the ready queue.
#[inline]
fn collect(w: &mut Worker, side: &mut Side) {
    RAW.with(|raw| {
        let mut raw = raw.borrow_mut();
        if raw.is_empty() {
            return;
        }
        for (r, s, info) in raw.drain(..) {
            let id = r.to_u64();
            if let Some(e) = side.reqs.get_mut(id as u32 as usize) {
                if e.0 == id && !e.1.is_null() {
                    let hdr = e.1;
                    *e = (0, std::ptr::null_mut());
                    complete(hdr, s, info);
                }
            }
        }
    });
    if !side.polled.is_empty() {
        let mut i = 0;
        while i < side.polled.len() {
            let (r, hdr) = side.polled[i];
            match w.request_test(r) {
                Ok(None) => i += 1,
                res => {
                    let s = res.ok().flatten().unwrap_or(Status::Canceled);
                    let _ = w.request_free(r);
                    side.polled.swap_remove(i);
                    complete(hdr, s, RecvInfo::default());
                }
            }
        }
    }
}

#[inline]
fn complete(hdr: *mut ReqHdr, s: Status, info: RecvInfo) {
    // SAFETY: registered headers are live requests of ours.
    unsafe { ReqHdr::set_outcome(hdr, s, info.sender_tag, info.length) };
    READY.with(|q| q.borrow_mut().push_back(hdr));
}

/// The worker behind a handle.
///
/// # Safety
/// `p` must be a handle of ours or null.
#[inline]
pub(crate) unsafe fn get<'a>(p: *mut Handle<Wk>) -> Result<&'a Wk> {
    // SAFETY: forwarded contract.
    unsafe { Handle::get(p) }
}

fn copy_name(dst: &mut [c_char; UCP_ENTITY_NAME_MAX], src: *const c_char) {
    if src.is_null() {
        return;
    }
    // SAFETY: the caller's NUL-terminated name.
    let s = unsafe { std::ffi::CStr::from_ptr(src) }.to_bytes();
    let n = s.len().min(UCP_ENTITY_NAME_MAX - 1);
    for (d, &b) in dst.iter_mut().zip(&s[..n]) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

pub(crate) fn default_name(prefix: &str, dst: &mut [c_char; UCP_ENTITY_NAME_MAX]) {
    let s = format!("{}:{}", prefix, std::process::id());
    let b = s.as_bytes();
    let n = b.len().min(UCP_ENTITY_NAME_MAX - 1);
    for (d, &c) in dst.iter_mut().zip(&b[..n]) {
        *d = c as c_char;
    }
    dst[n] = 0;
}

pub(crate) fn name_str(n: &[c_char; UCP_ENTITY_NAME_MAX]) -> String {
    let b: Vec<u8> = n
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

// ----- addresses -------------------------------------------------------------------------

/// Worker addresses handed to C carry their own length (the API passes them without one):
/// `magic u32 | length u32 | encoded address`.
const ADDR_MAGIC: u32 = 0x5243_5841;
const ADDR_HDR: usize = 8;

pub(crate) fn address_to_c(bytes: &[u8]) -> Result<(*mut c_void, usize)> {
    let total = ADDR_HDR + bytes.len();
    // SAFETY: malloc of a positive size; released by ucp_worker_release_address (free).
    let p = unsafe { libc::malloc(total) }.cast::<u8>();
    if p.is_null() {
        return Err(Status::NoMemory);
    }
    // SAFETY: `p` has `total` writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(ADDR_MAGIC.to_le_bytes().as_ptr(), p, 4);
        std::ptr::copy_nonoverlapping((bytes.len() as u32).to_le_bytes().as_ptr(), p.add(4), 4);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(ADDR_HDR), bytes.len());
    }
    Ok((p.cast(), total))
}

/// The encoded address inside a C address.
///
/// # Safety
/// `p` must point to an address of ours (the magic is checked before the length is used).
pub(crate) unsafe fn address_from_c<'a>(p: *const c_void) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(Status::InvalidParam);
    }
    let p = p.cast::<u8>();
    let mut h = [0u8; ADDR_HDR];
    // SAFETY: by the contract at least the header is readable.
    unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), ADDR_HDR) };
    if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) != ADDR_MAGIC {
        return Err(Status::InvalidAddr);
    }
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > 1 << 20 {
        return Err(Status::InvalidAddr);
    }
    // SAFETY: an address of ours has `len` bytes after its header.
    Ok(unsafe { std::slice::from_raw_parts(p.add(ADDR_HDR), len) })
}

// ----- exports ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_create(
    context: *mut Handle<Ctx>,
    params: *const ucp_worker_params_t,
    worker_p: *mut *mut Handle<Wk>,
) -> ucs_status_t {
    guard::status("ucp_worker_create", || {
        // SAFETY: the caller's context handle.
        let ctx = unsafe { Handle::get(context)? };
        if params.is_null() || worker_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params; fields are read by their mask bits.
        let (mode, user_data, event_fd, name) = unsafe {
            let p = &*params;
            let m = p.field_mask;
            (
                if m & UCP_WORKER_PARAM_FIELD_THREAD_MODE != 0 {
                    p.thread_mode
                } else {
                    UCS_THREAD_MODE_SINGLE
                },
                if m & UCP_WORKER_PARAM_FIELD_USER_DATA != 0 {
                    p.user_data
                } else {
                    std::ptr::null_mut()
                },
                if m & UCP_WORKER_PARAM_FIELD_EVENT_FD != 0 {
                    Some(p.event_fd)
                } else {
                    None
                },
                if m & UCP_WORKER_PARAM_FIELD_NAME != 0 {
                    p.name
                } else {
                    std::ptr::null()
                },
            )
        };
        let (tm, rmode) = match mode {
            UCS_THREAD_MODE_MULTI => (UCS_THREAD_MODE_MULTI, ucp::ThreadMode::Multi),
            UCS_THREAD_MODE_SERIALIZED => (UCS_THREAD_MODE_SERIALIZED, ucp::ThreadMode::Serialized),
            UCS_THREAD_MODE_SINGLE => (UCS_THREAD_MODE_SINGLE, ucp::ThreadMode::Single),
            _ => return Err(Status::InvalidParam),
        };
        let w = Worker::new(&ctx.ctx, rmode)?;
        let waker = w.waker()?;
        let efd = w.event_fd().as_fd().as_raw_fd();
        let mut wname = [0 as c_char; UCP_ENTITY_NAME_MAX];
        default_name("worker", &mut wname);
        copy_name(&mut wname, name);
        let wk = Wk {
            lock: (tm == UCS_THREAD_MODE_MULTI).then(|| Mutex::new(())),
            busy: Cell::new(false),
            inner: UnsafeCell::new(Inner {
                w,
                side: Side {
                    pool: ReqPool::new(ctx.req_size, ctx.req_init, ctx.req_cleanup),
                    reqs: Vec::with_capacity(256),
                    polled: Vec::new(),
                    eps: HashMap::new(),
                    am_handlers: HashMap::new(),
                    am_kept: HashMap::new(),
                    next_token: 0,
                    stream_kept: HashMap::new(),
                    msgs: HashMap::new(),
                    listeners: HashMap::new(),
                    conn_reqs: HashMap::new(),
                },
            }),
            evq: EvQueue {
                events: UnsafeCell::new(VecDeque::new()),
                hint: AtomicBool::new(false),
            },
            waker,
            efd,
            external_efd: event_fd.is_some(),
            features: ctx.features,
            thread_mode: tm,
            name: wname,
            me: Cell::new((std::ptr::null(), 0)),
        };
        let (h, gen) = Handle::alloc(wk);
        // SAFETY: just made.
        let wk = unsafe { Handle::get(h)? };
        wk.me.set((h, gen));
        if let Some(fd) = event_fd {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: user_data as u64,
            };
            // SAFETY: epoll_ctl on the application's epoll descriptor with our
            // descriptor; failure is reported, not fatal to memory safety.
            let rc = unsafe { libc::epoll_ctl(fd, libc::EPOLL_CTL_ADD, efd, &mut ev) };
            if rc != 0 {
                // SAFETY: the handle we just made, not yet given out.
                drop(unsafe { Handle::destroy(h) });
                return Err(Status::InvalidParam);
            }
        }
        tracing::debug!("rucx: worker {} created", name_str(&wk.name));
        // SAFETY: the caller's output pointer.
        unsafe { *worker_p = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_destroy(worker: *mut Handle<Wk>) {
    guard::void("ucp_worker_destroy", || {
        // SAFETY: the caller's worker handle, which it no longer uses.
        let wk = unsafe { Handle::destroy(worker)? };
        let Wk { inner, .. } = wk;
        let Inner { w, mut side } = inner.into_inner();
        for (_, ep) in side.eps.drain() {
            // SAFETY: endpoint handles of this worker; they die with it.
            drop(unsafe { Handle::destroy(ep) });
        }
        for (_, l) in side.listeners.drain() {
            // SAFETY: listener handles of this worker; they die with it.
            drop(unsafe { Handle::destroy(l.handle) });
        }
        for (_, c) in side.conn_reqs.drain() {
            // SAFETY: connection request handles of this worker; they die with it.
            drop(unsafe { Handle::destroy(c) });
        }
        // Dropping the Rust worker cancels what is outstanding; its callbacks queue
        // completions, which mark the C requests completed (no C callbacks run now).
        drop(w);
        RAW.with(|raw| {
            for (r, s, info) in raw.borrow_mut().drain(..) {
                let id = r.to_u64();
                if let Some(e) = side.reqs.get_mut(id as u32 as usize) {
                    if e.0 == id && !e.1.is_null() {
                        // SAFETY: a registered live header.
                        unsafe {
                            ReqHdr::set_outcome(e.1, s, info.sender_tag, info.length);
                            (*e.1).flags.fetch_or(F_COMPLETED, Ordering::Release);
                        }
                        *e = (0, std::ptr::null_mut());
                    }
                }
            }
        });
        for (_, hdr) in side.polled.drain(..) {
            // SAFETY: a live header waiting for a close that will not finish now.
            unsafe {
                ReqHdr::set_outcome(hdr, Status::Canceled, 0, 0);
                (*hdr).flags.fetch_or(F_COMPLETED, Ordering::Release);
            }
        }
        drop(side);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_progress(worker: *mut Handle<Wk>) -> c_uint {
    guard::value("ucp_worker_progress", 0, || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        // Active messages already taken from the transports are handed out first, one
        // per call (see `dispatch_events`); the transports are polled again once they
        // are all out, which keeps the senders' flow control in force.
        if wk.evq.hint.load(Ordering::Acquire) && !IN_AM.with(Cell::get) {
            wk.dispatch();
            return Ok(1);
        }
        // A callback or handler that ran counts as progress: the application may be
        // waiting for what it does, and must look before it sleeps.
        let n = wk.progress()? + wk.dispatch();
        Ok(n as c_uint)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_query(
    worker: *mut Handle<Wk>,
    attr: *mut ucp_worker_attr_t,
) -> ucs_status_t {
    guard::status("ucp_worker_query", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct; fields written by mask.
        let mask = unsafe { (*attr).field_mask };
        if mask & UCP_WORKER_ATTR_FIELD_ADDRESS != 0 {
            let bytes = wk.with(|w, _| w.address())?;
            let (p, n) = address_to_c(&bytes)?;
            // SAFETY: as above.
            unsafe {
                (*attr).address = p;
                (*attr).address_length = n;
            }
        }
        // SAFETY: as above.
        unsafe {
            if mask & UCP_WORKER_ATTR_FIELD_THREAD_MODE != 0 {
                (*attr).thread_mode = wk.thread_mode;
            }
            if mask & UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS != 0 {
                (*attr).address_flags = 0;
            }
            if mask & UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER != 0 {
                (*attr).max_am_header = crate::am::MAX_AM_HEADER;
            }
            if mask & UCP_WORKER_ATTR_FIELD_NAME != 0 {
                (*attr).name = wk.name;
            }
            if mask & UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING != 0 {
                (*attr).max_debug_string = 64;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_print_info(worker: *mut Handle<Wk>, stream: *mut libc::FILE) {
    guard::void("ucp_worker_print_info", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        let (uuid, n) = wk.with(|w, _| (w.uuid(), w.address().len()))?;
        let mode = match wk.thread_mode {
            UCS_THREAD_MODE_MULTI => "multi",
            UCS_THREAD_MODE_SERIALIZED => "serialized",
            _ => "single",
        };
        let text = format!(
            "#\n# UCP worker '{}' (rucx)\n#\n#   uuid: {uuid:#018x}\n#   address: {} bytes\n#   thread mode: {mode}\n#\n",
            name_str(&wk.name),
            n + ADDR_HDR
        );
        crate::context::print_to(stream, &text);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_address(
    worker: *mut Handle<Wk>,
    address_p: *mut *mut c_void,
    address_length_p: *mut usize,
) -> ucs_status_t {
    guard::status("ucp_worker_get_address", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        if address_p.is_null() || address_length_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let bytes = wk.with(|w, _| w.address())?;
        let (p, n) = address_to_c(&bytes)?;
        // SAFETY: the caller's output pointers.
        unsafe {
            *address_p = p;
            *address_length_p = n;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_release_address(
    _worker: *mut Handle<Wk>,
    address: *mut c_void,
) {
    guard::void("ucp_worker_release_address", || {
        // SAFETY: an address of ours (the magic is checked first).
        unsafe { address_from_c(address)? };
        // SAFETY: allocated with malloc by address_to_c.
        unsafe { libc::free(address) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_address_query(
    address: *mut c_void,
    attr: *mut ucp_worker_address_attr_t,
) -> ucs_status_t {
    guard::status("ucp_worker_address_query", || {
        // SAFETY: an address of ours.
        let bytes = unsafe { address_from_c(address)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        let a = ucp::address::WorkerAddress::decode(bytes)?;
        // SAFETY: the caller's attribute struct.
        unsafe {
            if (*attr).field_mask & UCP_WORKER_ADDRESS_ATTR_FIELD_UID != 0 {
                (*attr).worker_uid = a.uuid;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_efd(
    worker: *mut Handle<Wk>,
    fd: *mut c_int,
) -> ucs_status_t {
    guard::status("ucp_worker_get_efd", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        if fd.is_null() || wk.features & UCP_FEATURE_WAKEUP == 0 {
            return Err(Status::InvalidParam);
        }
        if wk.external_efd {
            // Events are reported on the application's descriptor instead.
            return Err(Status::Unsupported);
        }
        // SAFETY: the caller's output pointer.
        unsafe { *fd = wk.efd };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_arm(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_arm", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        if READY.with(|q| !q.borrow().is_empty()) || wk.evq.hint.load(Ordering::Acquire) {
            return Err(Status::Busy);
        }
        // A pending signal counts as an event: report it (and consume it) as busy.
        if wk.waker.drain() {
            return Err(Status::Busy);
        }
        wk.with(|w, _| w.arm())?
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_wait", || {
        // SAFETY: forwarded.
        let s = unsafe { ucp_worker_arm(worker) };
        if s == Status::Busy.code() {
            return Ok(());
        }
        guard::result_from_c(s)?;
        // SAFETY: the caller's worker handle (checked by arm).
        let wk = unsafe { get(worker)? };
        // Sleep outside the worker lock so other threads can use the worker meanwhile.
        // SAFETY: the worker's descriptor stays open while the worker lives.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(wk.efd) };
        ucs::sys::poll::readable(fd, -1)?;
        wk.waker.drain();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait_mem(_worker: *mut Handle<Wk>, _address: *mut c_void) {
    // A hint that the caller polls memory: nothing to wait for here.
    std::hint::spin_loop();
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_signal(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_signal", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        wk.waker.signal()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_fence(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_fence", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        wk.run(|w, _| w.fence())?
    })
}

unsafe fn worker_flush(worker: *mut Handle<Wk>, op: Op) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's worker handle.
    let wk = unsafe { get(worker)? };
    wk.run(|w, side| {
        let out = match w.flush_nb(Some(rust_cb()))? {
            None => Outcome::Done(Status::Ok, RecvInfo::default()),
            Some(r) => Outcome::Req(r),
        };
        wk.conclude(w, side, &op, out, RecvOut::None, None)
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nb(
    worker: *mut Handle<Wk>,
    _flags: c_uint,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_worker_flush_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { worker_flush(worker, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nbx(
    worker: *mut Handle<Wk>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_worker_flush_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        // SAFETY: forwarded contract.
        unsafe { worker_flush(worker, op) }
    })
}

/// Waits for a request returned by one of our functions, progressing `wk`; frees it.
pub(crate) fn wait_ptr(wk: &Wk, p: ucs_status_ptr_t) -> Result<()> {
    let a = p as usize;
    if a == 0 {
        return Ok(());
    }
    if a >= (UCS_ERR_LAST as isize as usize) {
        return guard::result_from_c(a as isize as ucs_status_t);
    }
    loop {
        // SAFETY: a request we just returned.
        let s = unsafe { crate::request::ucp_request_check_status(p) };
        if s != UCS_INPROGRESS {
            // SAFETY: as above.
            unsafe { crate::request::ucp_request_free(p) };
            return guard::result_from_c(s);
        }
        if wk.progress()? == 0 {
            std::thread::yield_now();
        }
        wk.dispatch();
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_flush", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { get(worker)? };
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        let p = unsafe { worker_flush(worker, op)? };
        wait_ptr(wk, p)
    })
}
