//! The event dispatch: the C callbacks of completed requests and the C handlers of
//! events (active messages, connection requests, endpoint failures). Everything here runs
//! with the Rust worker released, so a callback or handler may call any `ucp_*` function.
//!
//! [`run`] is how an API family calls into the worker: [`Wk::with`], then the callbacks of
//! the requests that completed. The handlers of events run only in `ucp_worker_progress`
//! and the blocking calls ([`dispatch`]), as with UCX: a program that checks a flag its
//! handler sets, then progresses and sleeps when progress found nothing, must not have the
//! handler run unseen inside another call.

use crate::am_small::SmallAm;
use crate::core::{
    self, ep_handle_for, mark_completed, next_ready, AmBytes, AmEvent, AmHandlerC, AmKeep, CbKind,
    ConnReqH, CurrentAm, EpH, Event, OnConn, PlainEntry, ReqHdr, Side, Wk,
};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use std::cell::Cell;
use std::ffi::{c_uint, c_void};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use ucp::{ConnReqId, ListenerId, Worker};
use ucs::{Result, Status};

thread_local! {
    /// Set while this thread runs active-message handlers (they are not nested).
    static IN_AM: Cell<bool> = const { Cell::new(false) };
}

struct ResetAm;

impl Drop for ResetAm {
    fn drop(&mut self) {
        IN_AM.with(|f| f.set(false));
    }
}

/// [`Wk::with`], then the callbacks of the requests that completed.
#[inline(always)]
pub(crate) fn run<R>(wk: &Wk, f: impl FnOnce(&mut Worker, &mut Side) -> R) -> Result<R> {
    let r = wk.with(f);
    if wk.has_ready() {
        dispatch_requests(wk);
    }
    r
}

/// [`run`] for a call that returns a `Result` itself.
#[inline(always)]
pub(crate) fn run_try<T>(
    wk: &Wk,
    f: impl FnOnce(&mut Worker, &mut Side) -> Result<T>,
) -> Result<T> {
    let r = wk.with_try(f);
    if wk.has_ready() {
        dispatch_requests(wk);
    }
    r
}

/// Ends a plain hot call ([`Wk::plain_entry`]): completions collected, the worker left,
/// then the callbacks of requests that became ready, as [`run`] does after its closure.
#[inline(always)]
pub(crate) fn leave_plain(entry: PlainEntry<'_>, wk: &Wk) {
    entry.leave();
    if wk.has_ready() {
        dispatch_requests(wk);
    }
}

/// True when queued events wait for their handlers and this thread may run them.
#[inline(always)]
pub(crate) fn events_due(wk: &Wk) -> bool {
    wk.evq.hint.load(Ordering::Acquire) && !IN_AM.with(Cell::get)
}

/// Calls the C callbacks of completed requests and the C handlers of events. Never called
/// with the worker borrowed. Returns how many callbacks and handlers ran
/// (`ucp_worker_progress` counts them as progress, so that a caller that sleeps when it
/// returns 0 does not miss them).
#[inline(always)]
pub(crate) fn dispatch(wk: &Wk) -> usize {
    let mut n = dispatch_requests(wk);
    if events_due(wk) {
        IN_AM.with(|f| f.set(true));
        let _reset = ResetAm;
        n += dispatch_events(wk);
    }
    n
}

/// [`dispatch`] out of line, for callers whose fast path has nothing to dispatch.
#[inline(never)]
pub(crate) fn dispatch_after(wk: &Wk) -> usize {
    dispatch(wk)
}

/// Calls the C callbacks of completed requests, in completion order.
#[inline(always)]
pub(crate) fn dispatch_requests(wk: &Wk) -> usize {
    let mut n = 0;
    while wk.has_ready() {
        let Ok(h) = wk.take_ready() else { break };
        n += run_chain(h);
    }
    n
}

/// Calls the C callbacks of a ready list taken from a worker (the worker released).
#[inline(always)]
pub(crate) fn run_chain(mut h: *mut ReqHdr) -> usize {
    let mut n = 0;
    while !h.is_null() {
        // SAFETY: headers of a ready list are live requests whose outcome was stored; the
        // next one is read before the callback may recycle this one.
        unsafe {
            let next = next_ready(h);
            finish(h);
            h = next;
        }
        n += 1;
    }
    n
}

/// Runs the callback of a completed request, then marks it completed.
///
/// # Safety
/// `hdr` must be a live request whose outcome was stored.
unsafe fn finish(hdr: *mut ReqHdr) {
    // SAFETY: a live header.
    let h = unsafe { &*hdr };
    let flags = h.flags.load(Ordering::Acquire);
    if flags & core::F_CALLBACK != 0 && h.cb != 0 {
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
    // SAFETY: as above; the callback has run.
    unsafe { mark_completed(hdr) };
}

/// Runs the C handlers of queued events (active messages, connection requests,
/// endpoint failures), one at a time, with the worker released while each runs.
fn dispatch_events(wk: &Wk) -> usize {
    let mut n = 0;
    // A small message's bytes, moved here once from its event (see `AmAt::Small`).
    let mut small: Option<SmallAm> = None;
    enum Ready {
        Am(AmReady),
        Conn(ConnReady),
        EpError(ErrReady),
    }
    loop {
        let next = wk.with(|w, side| loop {
            // SAFETY: the queue is guarded by the worker, which `with` holds.
            let ev = unsafe { wk.evq.pop() }?;
            let r = match ev {
                Event::Am(a) => am_prepare(wk, w, side, a, &mut small).map(Ready::Am),
                Event::Conn(l, r, c) => conn_prepare(w, side, l, r, c).map(Ready::Conn),
                Event::EpError(e, s) => err_prepare(side, e, s).map(Ready::EpError),
            };
            if r.is_some() {
                return r;
            }
        });
        let Ok(Some(r)) = next else { break };
        n += 1;
        let am = matches!(r, Ready::Am(_));
        match r {
            Ready::Am(r) => am_deliver(wk, r, &mut small),
            Ready::Conn(r) => conn_deliver(wk, r),
            Ready::EpError(r) => err_deliver(r),
        }
        n += dispatch_requests(wk);
        if am {
            // One active message per call: a program that waits for "the next
            // message" with a flag its handler sets, as UCX's examples do, sees
            // each message before the next handler runs.
            break;
        }
    }
    n
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
    // SAFETY: a request we just returned.
    let hdr = unsafe { ReqHdr::from_user(p)? };
    loop {
        // SAFETY: as above; live until freed below.
        let s = unsafe { ReqHdr::check(hdr) };
        if s != UCS_INPROGRESS {
            // SAFETY: as above.
            unsafe { core::release(p, true)? };
            return guard::result_from_c(s);
        }
        let (n, ready) = wk.progress()?;
        if n == 0 {
            std::thread::yield_now();
        }
        run_chain(ready);
        dispatch(wk);
    }
}

// ----- active messages -------------------------------------------------------------------

/// A message ready for its C handler.
struct AmReady {
    h: AmHandlerC,
    header_len: usize,
    /// The data's length (a rendezvous message's whole length).
    len: usize,
    rndv: bool,
    reply: *mut Handle<EpH>,
    at: AmAt,
}

/// Where the bytes of a message ready for its handler are.
enum AmAt {
    /// A small eager message, inline: its bytes wait in the dispatch's own slot (moved
    /// there once, not with every move of the ready message), the handler's pointers
    /// are taken where they lie, and nothing is left to do after it.
    Small,
    /// A buffer that waits in the worker's `Side::am_current` while the handler runs (see
    /// [`Side::take_current_am`]).
    Kept {
        /// The user header (in the buffer), null when empty.
        header: *const c_void,
        data: *mut c_void,
        /// What the handler may keep by returning `UCS_INPROGRESS`.
        keep: AmKeep,
        /// Data received for an older-style handler (owned here while it runs).
        _owned: Option<Vec<u8>>,
    },
}

/// Readies a queued message for its handler (with the worker held); `None` when it has
/// no handler or its data is gone. A small message's bytes go to `small`.
fn am_prepare(
    wk: &Wk,
    w: &mut Worker,
    side: &mut Side,
    ev: AmEvent,
    small: &mut Option<SmallAm>,
) -> Option<AmReady> {
    let Some(&Some(h)) = side.am_handlers.get(usize::from(ev.id)) else {
        tracing::debug!("active message {} without a handler dropped", ev.id);
        if let Some((desc, _)) = ev.rndv {
            let _ = w.am_data_release(desc);
        }
        if let AmBytes::Buf(b) = ev.bytes {
            // SAFETY: the worker is held (inside `with`).
            unsafe { wk.evq.recycle(b) };
        }
        return None;
    };
    let reply = match ev.reply_ep {
        Some(e) => ep_handle_for(wk, side, e),
        None => std::ptr::null_mut(),
    };
    let mut bytes = match ev.bytes {
        AmBytes::Small(s) => {
            let len = s.len() - ev.header_len;
            *small = Some(s);
            return Some(AmReady {
                h,
                header_len: ev.header_len,
                len,
                rndv: false,
                reply,
                at: AmAt::Small,
            });
        }
        AmBytes::Buf(b) => b,
    };
    let old = matches!(h, AmHandlerC::Old { .. });
    let data_len = bytes.len() - ev.header_len;
    let header = if ev.header_len == 0 {
        std::ptr::null()
    } else {
        // SAFETY: the header is the buffer's last `header_len` bytes. (No reference to
        // the buffer is made: the handler may write through `data`, which points into it.)
        unsafe { bytes.as_ptr().add(data_len) }.cast()
    };
    let (data, len, keep, owned) = match (ev.rndv, old) {
        (Some((desc, len)), false) => {
            let t = side.token() as *mut c_void;
            side.am_kept.insert(t as usize, desc);
            (t, len, AmKeep::Rndv, None)
        }
        (Some((desc, len)), true) => {
            let mut v = vec![0u8; len];
            if w.am_recv_data(desc, &mut v).is_err() {
                // SAFETY: the worker is held (inside `with`).
                unsafe { wk.evq.recycle(bytes) };
                return None;
            }
            (v.as_mut_ptr().cast(), len, AmKeep::No, Some(v))
        }
        (None, _) => {
            // Empty data still gets a pointer of its own, for `ucp_am_data_release`.
            let d = if data_len > 0 {
                bytes.as_mut_ptr().cast()
            } else {
                side.token() as *mut c_void
            };
            (d, data_len, AmKeep::Eager, None)
        }
    };
    side.am_current.push(CurrentAm {
        key: data as usize,
        bytes,
        header_len: ev.header_len,
        eager: keep == AmKeep::Eager,
        taken: false,
    });
    Some(AmReady {
        h,
        header_len: ev.header_len,
        len,
        rndv: ev.rndv.is_some(),
        reply,
        at: AmAt::Kept {
            header,
            data,
            keep,
            _owned: owned,
        },
    })
}

/// Calls the C handler of a readied message (the worker released), then keeps or
/// releases its data as the handler's return value says. A small message's bytes are in
/// `small`.
fn am_deliver(wk: &Wk, r: AmReady, small: &mut Option<SmallAm>) {
    // The handler's pointers, and whether it may keep the data (`FLAG_DATA`).
    let (header, data, keep) = match &r.at {
        AmAt::Small => {
            let Some(s) = small.as_mut() else {
                // Cannot happen: `am_prepare` filled the slot for this message.
                return;
            };
            let p = s.as_mut_ptr();
            let header = if r.header_len == 0 {
                std::ptr::null()
            } else {
                // SAFETY: data and header are the first `len + header_len` (<= AM_INLINE)
                // bytes of the inline array, the header after the data.
                unsafe { p.add(r.len) }.cast::<c_void>()
            };
            (header, p.cast::<c_void>(), AmKeep::No)
        }
        AmAt::Kept {
            header, data, keep, ..
        } => (*header, *data, *keep),
    };
    let status = match r.h {
        AmHandlerC::Recv { cb, arg } => {
            let mut attr = if r.rndv {
                UCP_AM_RECV_ATTR_FLAG_RNDV
            } else if keep == AmKeep::Eager {
                UCP_AM_RECV_ATTR_FLAG_DATA
            } else {
                0
            };
            if !r.reply.is_null() {
                attr |= UCP_AM_RECV_ATTR_FIELD_REPLY_EP;
            }
            let param = ucp_am_recv_param_t {
                recv_attr: attr,
                reply_ep: r.reply.cast(),
            };
            // SAFETY: the application's handler, registered with this signature, called
            // with no worker held; the pointers stay valid during the call.
            unsafe {
                let f = std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(
                        *mut c_void,
                        *const c_void,
                        usize,
                        *mut c_void,
                        usize,
                        *const ucp_am_recv_param_t,
                    ) -> ucs_status_t,
                >(cb);
                f(arg, header, r.header_len, data, r.len, &param)
            }
        }
        AmHandlerC::Old { cb, arg } => {
            let flags = if keep != AmKeep::No {
                UCP_CB_PARAM_FLAG_DATA
            } else {
                0
            };
            // SAFETY: as above, for the older handler signature.
            unsafe {
                let f = std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(
                        *mut c_void,
                        *mut c_void,
                        usize,
                        *mut c_void,
                        c_uint,
                    ) -> ucs_status_t,
                >(cb);
                f(arg, data, r.len, r.reply.cast(), flags)
            }
        }
    };
    let keeps = status == UCS_INPROGRESS;
    if matches!(r.at, AmAt::Small) {
        if keeps {
            // The API allows that return only with FLAG_DATA, which the handler was not
            // given: its data ends here as for any other return value.
            tracing::debug!("active message handler kept data it was not given to keep");
        }
        return;
    }
    let key = data as usize;
    let _ = wk.with(|w, side| {
        if let Some(mut c) = side.remove_current_am(key) {
            if keeps && c.eager && !c.taken {
                // The data stays where the handler saw it: the buffer is cut to it in
                // place and kept by the protocol layer under a descriptor.
                let data_len = c.bytes.len() - c.header_len;
                c.bytes.truncate(data_len);
                let desc = w.am_keep(c.bytes);
                side.am_kept.insert(key, desc);
            } else {
                // SAFETY: the worker is held (inside `with`).
                unsafe { wk.evq.recycle(c.bytes) };
            }
        }
        if !keeps && keep == AmKeep::Rndv {
            if let Some(desc) = side.am_kept.remove(&key) {
                let _ = w.am_data_release(desc);
            }
        }
    });
}

// ----- connection requests -------------------------------------------------------------

/// A connection request ready for the application's handler.
struct ConnReady {
    on_conn: OnConn,
    req: ConnReqId,
    client: SocketAddr,
}

/// Readies a queued connection request (with the worker held).
fn conn_prepare(
    w: &mut Worker,
    side: &mut Side,
    l: ListenerId,
    req: ConnReqId,
    client: SocketAddr,
) -> Option<ConnReady> {
    match side.listeners.get(&l) {
        Some(info) => Some(ConnReady {
            on_conn: info.on_conn,
            req,
            client,
        }),
        None => {
            let _ = w.listener_reject(req);
            None
        }
    }
}

/// Calls the application's handler for a connection request (the worker released).
fn conn_deliver(wk: &Wk, r: ConnReady) {
    let (me, gen) = wk.me();
    match r.on_conn {
        OnConn::Request { cb, arg } => {
            let (h, _) = Handle::alloc(ConnReqH {
                wk: me,
                wgen: gen,
                id: r.req,
                client: r.client,
            });
            if wk.with(|_, side| side.conn_reqs.insert(r.req, h)).is_err() {
                return;
            }
            // SAFETY: the application's connection handler, registered with this
            // signature, called with no worker held.
            unsafe {
                let f = std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *mut c_void)>(
                    cb,
                );
                f(h.cast(), arg);
            }
        }
        OnConn::Accept { cb, arg } => {
            let Ok(Ok(h)) = wk.with(|w, side| -> Result<*mut Handle<EpH>> {
                let e = w.ep_create_from_request(r.req)?;
                let h = ep_handle_for(wk, side, e);
                // SAFETY: the handle just made or found for this worker's endpoint.
                if let Ok(eh) = unsafe { Handle::get(h) } {
                    eh.implicit.set(false);
                }
                Ok(h)
            }) else {
                return;
            };
            // SAFETY: the application's accept handler, registered with this signature,
            // called with no worker held.
            unsafe {
                let f = std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *mut c_void)>(
                    cb,
                );
                f(h.cast(), arg);
            }
        }
    }
}

// ----- endpoint failures ---------------------------------------------------------------

/// An endpoint failure, ready for the application's error handler.
struct ErrReady {
    cb: usize,
    arg: *mut c_void,
    ep: *mut Handle<EpH>,
    status: Status,
}

/// Readies an endpoint failure (with the worker held): `None` when the application set
/// no handler (or closed the endpoint meanwhile).
fn err_prepare(side: &mut Side, ep: ucp::Ep, status: Status) -> Option<ErrReady> {
    let h = *side.eps.get(&ep)?;
    // SAFETY: handles in the table are live endpoint handles of this worker.
    let e = unsafe { Handle::get(h) }.ok()?;
    let cb = e.err.get()?;
    Some(ErrReady {
        cb,
        arg: e.user_data.get(),
        ep: h,
        status,
    })
}

/// Calls the application's error handler (the worker released).
fn err_deliver(r: ErrReady) {
    // SAFETY: the application's error handler, registered with this signature, called
    // with no worker held.
    unsafe {
        let f = std::mem::transmute::<
            usize,
            unsafe extern "C" fn(*mut c_void, *mut c_void, ucs_status_t),
        >(r.cb);
        f(r.arg, r.ep.cast(), r.status.code());
    }
}
