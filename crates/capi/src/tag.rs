//! Tag matching: send (plain and synchronous), receive, probe, and receive of a probed
//! message; the `_nb`, `_nbr` and `_nbx` forms.
//!
//! Immediate completion follows UCX: an `_nbx` send or receive that completes inside the
//! call returns `UCS_OK` (receive information through `recv_info`) unless
//! `UCP_OP_ATTR_FLAG_NO_IMM_CMPL` is set; the older receive functions always return a
//! request and call the callback at once when the message was already there. A request
//! of the caller's (`UCP_OP_ATTR_FIELD_REQUEST`) is marked completed either way.

use crate::core::{self, ep_get, CbKind, EpH, Op, Outcome, RecvOut, Wk, F_RECV};
use crate::dispatch::{dispatch_requests, leave_plain, run, run_try};
use crate::dt::{self, Dir};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::plain_send;
use crate::posted::{self, PostedOp};
use std::ffi::{c_int, c_void};
use ucp::RecvPosted;
use ucs::{Result, Status};

#[inline(always)]
unsafe fn send(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    sync: bool,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { ep_get(ep)? };
    // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
    // completes (the UCP API's contract for the application, which dt::buf passes on).
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Send)? };
    if postable(wk, &op, &buf) {
        let p = PostedOp::TagSend {
            ep: e.ep,
            buf,
            tag,
            sync,
        };
        // SAFETY: forwarded contract.
        return unsafe { start_or_post(wk, p, op, 0, RecvOut::None) };
    }
    let rep = e.ep;
    run_try(
        wk,
        #[inline(always)]
        |w, side| {
            wk.start(
                w,
                side,
                &op,
                0,
                RecvOut::None,
                #[inline(always)]
                |w, cb| w.tag_send_nb(rep, buf, tag, sync, cb).map(Outcome::of),
            )
        },
    )
}

/// True when an operation may be posted for the thread that holds the worker (thread
/// mode multi). A completion queue, a forced immediate completion and a generic datatype
/// need the worker in the call: they wait for it.
#[inline(always)]
fn postable(wk: &Wk, op: &Op, buf: &ucp::Buf) -> bool {
    wk.delegates() && op.cq.is_null() && !op.force_imm() && posted::movable(buf)
}

/// Starts a tag operation in thread mode multi: in the worker if it is free, else
/// posted for the thread that holds it, returning its request at once.
///
/// # Safety
/// The buffer must stay valid until the operation completes.
#[inline(never)]
unsafe fn start_or_post(
    wk: &Wk,
    p: PostedOp,
    op: Op,
    flags: u32,
    recv: RecvOut,
) -> Result<ucs_status_ptr_t> {
    let mut slot = Some(p);
    let r = wk.try_with_try(|w, side| {
        let p = slot.take().ok_or(Status::InvalidParam)?;
        let hdr = wk.begin(side, &op, flags)?;
        let out = p.start(w, op.callback(hdr)).map(Outcome::of);
        wk.conclude(w, side, &op, hdr, out, recv)
    });
    let r = match r {
        Some(r) => r,
        None => {
            let p = slot.take().ok_or(Status::InvalidParam)?;
            let hdr = wk.begin_posted(&op, flags)?;
            wk.post(p, hdr);
            Ok(core::ReqHdr::user(hdr))
        }
    };
    if wk.has_ready() {
        dispatch_requests(wk);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nb(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_send_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), datatype, false);
        // SAFETY: forwarded contract.
        unsafe { send(ep, buffer, count, tag, false, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nb(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_send_sync_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), datatype, false);
        // SAFETY: forwarded contract.
        unsafe { send(ep, buffer, count, tag, true, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbr(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    req: *mut c_void,
) -> ucs_status_t {
    guard::value("ucp_tag_send_nbr", UCS_ERR_INVALID_PARAM, || {
        if req.is_null() {
            return Err(Status::InvalidParam);
        }
        let mut op = Op::nb(CbKind::Send, 0, datatype, false);
        op.mask |= UCP_OP_ATTR_FIELD_REQUEST;
        op.request = req;
        // SAFETY: forwarded contract.
        let p = unsafe { send(ep, buffer, count, tag, false, op)? };
        Ok(ptr_to_status(p))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbx(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_send_nbx", move || {
        // SAFETY: forwarded contract.
        if let Some(p) = unsafe { send_plain(ep, buffer, count, tag, param) } {
            return Ok(p);
        }
        // SAFETY: forwarded contract.
        unsafe { send_nbx_general(ep, buffer, count, tag, param) }
    })
}

/// `ucp_tag_send_nbx` when [`send_plain`] does not apply.
///
/// # Safety
/// As `ucp_tag_send_nbx`'s.
#[inline(never)]
unsafe fn send_nbx_general(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
    // SAFETY: forwarded contract.
    unsafe { send(ep, buffer, count, tag, false, op) }
}

/// The hot path of `ucp_tag_send_nbx` ([`plain_send::send`]).
///
/// # Safety
/// As `ucp_tag_send_nbx`'s.
#[inline(always)]
unsafe fn send_plain(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    unsafe {
        plain_send::send(
            ep,
            buffer,
            count,
            param,
            "ucp_tag_send_nbx",
            #[inline(always)]
            move |w, rep, data| w.tag_send_now(rep, data, tag),
            #[inline(always)]
            move |w, rep, buf, declined| {
                if declined {
                    w.tag_send_declined(rep, buf, tag)
                } else {
                    w.tag_send_nb(rep, buf, tag, false, None)
                }
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nbx(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_send_sync_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        // SAFETY: forwarded contract.
        unsafe { send(ep, buffer, count, tag, true, op) }
    })
}

/// `UCS_PTR_STATUS` of a pointer we returned.
pub(crate) fn ptr_to_status(p: ucs_status_ptr_t) -> ucs_status_t {
    let a = p as usize;
    if a == 0 {
        UCS_OK
    } else if a >= (UCS_ERR_LAST as isize as usize) {
        a as isize as ucs_status_t
    } else {
        UCS_INPROGRESS
    }
}

#[inline(always)]
unsafe fn recv(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's worker handle.
    let wk = unsafe { core::get(worker)? };
    // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
    // completes (the UCP API's contract for the application, which dt::buf passes on).
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Recv)? };
    if postable(wk, &op, &buf) {
        let p = PostedOp::TagRecv {
            buf,
            tag,
            mask: tag_mask,
        };
        // SAFETY: forwarded contract.
        return unsafe { start_or_post(wk, p, op, F_RECV, RecvOut::Tag) };
    }
    if Wk::by_word(&op) {
        // A receive with a callback or in the caller's request memory usually waits for
        // its message (MPI posts them first): it waits in the matcher with no Rust
        // request. (`dt::buf` makes no owned buffers, the one kind `tag_recv_word`
        // refuses.)
        return run_try(
            wk,
            #[inline(always)]
            |w, side| {
                wk.start_word_recv(
                    w,
                    side,
                    &op,
                    #[inline(always)]
                    |w, word| w.tag_recv_word(buf, tag, tag_mask, word),
                )
            },
        );
    }
    run_try(
        wk,
        #[inline(always)]
        |w, side| {
            wk.start(
                w,
                side,
                &op,
                F_RECV,
                RecvOut::Tag,
                #[inline(always)]
                |w, cb| {
                    if op.no_imm() {
                        w.tag_recv_nb(buf, tag, tag_mask, cb).map(Outcome::Req)
                    } else {
                        // A message that is already here is received in the call, with no
                        // request: the call returns NULL (or the error), as UCX's does.
                        w.tag_recv_nbx(buf, tag, tag_mask, cb).map(|p| match p {
                            RecvPosted::Done(s, info) => Outcome::Done(s, info),
                            RecvPosted::Pending(r) => Outcome::Req(r),
                        })
                    }
                },
            )
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nb(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    cb: Option<TagRecvCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_recv_nb", || {
        let op = Op::nb(
            CbKind::TagRecv,
            cb.map_or(0, |f| f as usize),
            datatype,
            true,
        );
        // SAFETY: forwarded contract.
        unsafe { recv(worker, buffer, count, tag, tag_mask, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbr(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    req: *mut c_void,
) -> ucs_status_t {
    guard::value("ucp_tag_recv_nbr", UCS_ERR_INVALID_PARAM, || {
        if req.is_null() {
            return Err(Status::InvalidParam);
        }
        let mut op = Op::nb(CbKind::TagRecv, 0, datatype, true);
        op.mask |= UCP_OP_ATTR_FIELD_REQUEST;
        op.request = req;
        // SAFETY: forwarded contract.
        let p = unsafe { recv(worker, buffer, count, tag, tag_mask, op)? };
        let s = ptr_to_status(p);
        Ok(if s == UCS_INPROGRESS { UCS_OK } else { s })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbx(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_recv_nbx", move || {
        // SAFETY: forwarded contract.
        if let Some(p) = unsafe { recv_plain(worker, buffer, count, tag, tag_mask, param) } {
            return Ok(p);
        }
        // SAFETY: forwarded contract.
        unsafe { recv_nbx_general(worker, buffer, count, tag, tag_mask, param) }
    })
}

/// `ucp_tag_recv_nbx` when [`recv_plain`] does not apply.
///
/// # Safety
/// As `ucp_tag_recv_nbx`'s.
#[inline(never)]
unsafe fn recv_nbx_general(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let op = unsafe { Op::nbx(param, CbKind::TagRecvNbx)? };
    // SAFETY: forwarded contract.
    unsafe { recv(worker, buffer, count, tag, tag_mask, op) }
}

/// The hot path of `ucp_tag_recv_nbx`: plain parameters ([`core::plain_buf`], and the
/// caller's request memory), a worker without a lock. A whole message that is already
/// here is received in the call and NULL returned (or the truncation's status), as UCX
/// does. A receive that must wait, with or without a callback, waits in the matcher by
/// word, with its C request (in the caller's memory when given: Open MPI's blocking
/// receive) and no Rust request (the general path's `start_word_recv`). `None` (nothing
/// started): the general path applies.
///
/// # Safety
/// As `ucp_tag_recv_nbx`'s.
#[inline(always)]
unsafe fn recv_plain(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let buf = unsafe { core::plain_buf(param, buffer, count, UCP_OP_ATTR_FIELD_REQUEST)? };
    // SAFETY: the caller's worker handle (the C contract: null or a handle of ours;
    // `slot` refuses a null, stale or foreign one).
    let slot = unsafe { core::slot(worker).ok()? };
    // SAFETY: `plain_buf` read the mask of this readable struct.
    let mask = unsafe { (*param).op_attr_mask };
    if mask & UCP_OP_ATTR_FIELD_REQUEST != 0 {
        // The caller's request memory (Open MPI's blocking receive): it waits in the
        // matcher by word, as a receive with a callback does, in that memory.
        // SAFETY: `plain_buf` read the mask of this readable struct; its mask bit is set.
        let request = unsafe { (*param).request };
        // SAFETY: as above.
        let (cb, user_data) = unsafe { callback_parts(param, mask) };
        if request.is_null() {
            // The field named but empty: the general path decides.
            return None;
        }
        let (wk, mut entry) = core::Wk::plain_entry_in(slot)?;
        let (w, side) = entry.parts();
        let r = wk.start_word_recv_user(
            w,
            side,
            request,
            cb,
            user_data,
            #[inline(always)]
            move |w, word| w.tag_recv_word(buf, tag, tag_mask, word),
        );
        leave_plain(entry, wk);
        return Some(guard::to_ptr("ucp_tag_recv_nbx", r));
    }
    if mask & UCP_OP_ATTR_FIELD_CALLBACK != 0 {
        // A receive with a callback usually waits for its message (MPI posts them
        // first): it waits in the matcher by word, with no Rust request, as in the
        // general path.
        // SAFETY: `plain_buf` read the mask of this readable struct.
        let (cb, user_data) = unsafe { callback_parts(param, mask) };
        let (wk, mut entry) = core::Wk::plain_entry_in(slot)?;
        let (w, side) = entry.parts();
        let r = wk.start_word_recv_plain(
            w,
            side,
            cb,
            user_data,
            #[inline(always)]
            move |w, word| w.tag_recv_word(buf, tag, tag_mask, word),
        );
        leave_plain(entry, wk);
        return Some(guard::to_ptr("ucp_tag_recv_nbx", r));
    }
    let (wk, mut entry) = core::Wk::plain_entry_in(slot)?;
    let (w, side) = entry.parts();
    let r = match w.tag_recv_small_now(&buf, tag, tag_mask) {
        // A whole small message already here: received in the call, as UCX does. The
        // buffer is a view that owns nothing (`plain_buf`): forgotten, its drop check is
        // off this path.
        Some((s, _)) => {
            std::mem::forget(buf);
            if s == Status::Ok {
                std::ptr::null_mut()
            } else {
                guard::status_to_ptr(s)
            }
        }
        // Otherwise the receive waits in the matcher by word, as one with a callback does
        // (a larger message already here is still received in the call): a C request
        // and no Rust request, so its completion is reported once, into the C request.
        None => guard::to_ptr(
            "ucp_tag_recv_nbx",
            wk.start_word_recv_plain(
                w,
                side,
                0,
                std::ptr::null_mut(),
                #[inline(always)]
                move |w, word| w.tag_recv_word(buf, tag, tag_mask, word),
            ),
        ),
    };
    leave_plain(entry, wk);
    Some(r)
}

/// The callback (0 when none) and its user data (null when none) of `param`, whose
/// mask is `mask`.
///
/// # Safety
/// `param` must be a readable `ucp_request_param_t` with that mask.
#[inline(always)]
unsafe fn callback_parts(param: *const ucp_request_param_t, mask: u32) -> (usize, *mut c_void) {
    // SAFETY: the fields are read as their mask bits say (the contract).
    unsafe {
        let cb = if mask & UCP_OP_ATTR_FIELD_CALLBACK != 0 {
            (*param).cb
        } else {
            0
        };
        let ud = if mask & UCP_OP_ATTR_FIELD_USER_DATA != 0 {
            (*param).user_data
        } else {
            std::ptr::null_mut()
        };
        (cb, ud)
    }
}

/// Handles of probed messages: a token (see `Side::token`) mapped to the Rust message.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_probe_nb(
    worker: *mut Handle<Wk>,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    remove: c_int,
    info: *mut ucp_tag_recv_info_t,
) -> *mut c_void {
    guard::value("ucp_tag_probe_nb", std::ptr::null_mut(), || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        let found = run(wk, |w, side| {
            let (i, msg) = w.tag_probe(tag, tag_mask, remove != 0)?;
            let token = side.token();
            if let Some(m) = msg {
                side.msgs.insert(token, m);
            }
            Some((i, token))
        })?;
        let Some((i, token)) = found else {
            return Ok(std::ptr::null_mut());
        };
        if !info.is_null() {
            // SAFETY: the caller's output struct.
            unsafe {
                info.write_unaligned(ucp_tag_recv_info_t {
                    sender_tag: i.sender_tag,
                    length: i.length,
                })
            };
        }
        Ok(token as *mut c_void)
    })
}

unsafe fn msg_recv(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    message: *mut c_void,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's worker handle.
    let wk = unsafe { core::get(worker)? };
    // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
    // completes (the UCP API's contract for the application, which dt::buf passes on).
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Recv)? };
    run(wk, |w, side| {
        let m = side
            .msgs
            .remove(&(message as usize))
            .ok_or(Status::InvalidParam)?;
        wk.start(w, side, &op, F_RECV, RecvOut::Tag, |w, cb| {
            w.tag_msg_recv_nb(m, buf, cb).map(Outcome::Req)
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nb(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    message: *mut c_void,
    cb: Option<TagRecvCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_msg_recv_nb", || {
        let op = Op::nb(
            CbKind::TagRecv,
            cb.map_or(0, |f| f as usize),
            datatype,
            true,
        );
        // SAFETY: forwarded contract.
        unsafe { msg_recv(worker, buffer, count, message, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nbx(
    worker: *mut Handle<Wk>,
    buffer: *mut c_void,
    count: usize,
    message: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_tag_msg_recv_nbx", || {
        // SAFETY: forwarded contract.
        let mut op = unsafe { Op::nbx(param, CbKind::TagRecvNbx)? };
        // Documented to return a request (or an error), never an immediate completion.
        op.mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        // SAFETY: forwarded contract.
        unsafe { msg_recv(worker, buffer, count, message, op) }
    })
}
