//! Active messages: handlers, sends, and the data a handler keeps or receives later.
//!
//! C handlers never run inside the Rust worker's progress. The Rust handler rucx installs
//! for every id keeps the message (`AmAction::Keep`) and queues it; after progress
//! returns, [`dispatch`] calls the C handler with:
//! - a small eager message (data and user header within `am_small::AM_INLINE` bytes):
//!   its data in the event, without `UCP_AM_RECV_ATTR_FLAG_DATA`, so the handler copies
//!   what it needs (as UCX delivers data that sits in a transport's inline slot);
//! - a larger eager message: its data in place, `UCP_AM_RECV_ATTR_FLAG_DATA` set. If the
//!   handler returns `UCS_INPROGRESS` the data stays valid until `ucp_am_data_release`
//!   (or `ucp_am_recv_data_nbx`) with that data pointer; any other return value releases
//!   it when the handler returns;
//! - a rendezvous message: `data` is a descriptor, `length` the message length,
//!   `UCP_AM_RECV_ATTR_FLAG_RNDV` set. The handler (or later code, if it returned
//!   `UCS_INPROGRESS`) receives it with `ucp_am_recv_data_nbx`; if the handler returns
//!   anything else without receiving it, the message is dropped and the sender's request
//!   completes;
//! - `UCP_AM_RECV_ATTR_FIELD_REPLY_EP` and an endpoint when the sender asked for replies.
//!
//! Handlers of the older `ucp_worker_set_am_handler` get `UCP_CB_PARAM_FLAG_DATA` for
//! eager data that is not small (keepable the same way); a rendezvous message is received
//! into a temporary buffer first and handed over without that flag.

use crate::am_small::SmallAm;
use crate::core::{
    self, ep_get, AmBytes, AmEvent, AmHandlerC, CbKind, EpH, Event, Op, Outcome, QueuePtr, RecvOut,
    Wk,
};
use crate::dispatch::run;
use crate::dt::{self, Dir};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::plain_send;
use std::ffi::{c_uint, c_void};
use ucp::am::{AmHandler, AmSendFlags};
use ucp::{AmAction, AmData, AmMsg};
use ucs::{Result, Status};

/// The Rust handler behind every C handler: it copies an eager message (data, then
/// header) inline into its event when it is small ([`crate::am_small`]), else into a
/// spare buffer, and lets the protocol layer drop it; a rendezvous message is kept there
/// under its descriptor. The C handler runs from the dispatch, after progress.
fn rust_handler(q: QueuePtr) -> AmHandler {
    Box::new(move |m: &AmMsg<'_>| {
        let (bytes, rndv, action) = match m.data {
            AmData::Eager(d) => match SmallAm::new(d, m.header) {
                Some(s) => (AmBytes::Small(s), None, AmAction::Done),
                None => {
                    // The data first: a handler that keeps it leaves the buffer cut to
                    // the data, in place (the pointer it was given stays valid).
                    let mut b = q.buffer(d.len() + m.header.len());
                    b.extend_from_slice(d);
                    b.extend_from_slice(m.header);
                    (AmBytes::Buf(b), None, AmAction::Done)
                }
            },
            AmData::Rndv { length } => {
                let mut b = q.buffer(m.header.len());
                b.extend_from_slice(m.header);
                (AmBytes::Buf(b), Some((m.desc, length)), AmAction::Keep)
            }
        };
        q.push(Event::Am(AmEvent {
            id: m.id,
            bytes,
            header_len: m.header.len(),
            reply_ep: m.reply_ep,
            rndv,
        }));
        action
    })
}

fn set_handler(wk: &Wk, id: u16, h: Option<AmHandlerC>) -> Result<()> {
    let q = wk.queue();
    run(wk, |w, side| {
        let t = &mut side.am_handlers;
        let i = usize::from(id);
        match h {
            Some(h) => {
                if t.len() <= i {
                    t.resize(i + 1, None);
                }
                t[i] = Some(h);
                w.am_set_handler(id, Some(rust_handler(q)));
            }
            None => {
                if let Some(slot) = t.get_mut(i) {
                    *slot = None;
                }
                w.am_set_handler(id, None);
            }
        }
        Ok(())
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_recv_handler(
    worker: *mut Handle<Wk>,
    param: *const ucp_am_handler_param_t,
) -> ucs_status_t {
    guard::status("ucp_worker_set_am_recv_handler", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if param.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read by mask.
        let (mask, id, cb, arg) = unsafe {
            let p = &*param;
            let m = p.field_mask;
            (
                m,
                p.id,
                if m & UCP_AM_HANDLER_PARAM_FIELD_CB != 0 {
                    p.cb
                } else {
                    None
                },
                if m & UCP_AM_HANDLER_PARAM_FIELD_ARG != 0 {
                    p.arg
                } else {
                    std::ptr::null_mut()
                },
            )
        };
        if mask & UCP_AM_HANDLER_PARAM_FIELD_ID == 0 {
            return Err(Status::InvalidParam);
        }
        let id = u16::try_from(id).map_err(|_| Status::InvalidParam)?;
        let h = cb.map(|f| AmHandlerC::Recv {
            cb: f as usize,
            arg,
        });
        set_handler(wk, id, h)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_handler(
    worker: *mut Handle<Wk>,
    id: u16,
    cb: ucp_am_callback_t,
    arg: *mut c_void,
    _flags: u32,
) -> ucs_status_t {
    guard::status("ucp_worker_set_am_handler", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        let h = cb.map(|f| AmHandlerC::Old {
            cb: f as usize,
            arg,
        });
        set_handler(wk, id, h)
    })
}

unsafe fn send(
    ep: *mut Handle<EpH>,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    flags: u32,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { ep_get(ep)? };
    let id = u16::try_from(id).map_err(|_| Status::InvalidParam)?;
    if header_length > 0 && header.is_null() {
        return Err(Status::InvalidParam);
    }
    let hdr: &[u8] = if header_length == 0 {
        &[]
    } else {
        // SAFETY: the caller's header, readable for this call (it is copied).
        unsafe { std::slice::from_raw_parts(header.cast(), header_length) }
    };
    // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
    // completes (the UCP API's contract for the application, which dt::buf passes on).
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Send)? };
    let f = AmSendFlags {
        reply: flags & UCP_AM_SEND_FLAG_REPLY != 0,
        eager: flags & UCP_AM_SEND_FLAG_EAGER != 0,
        rndv: flags & UCP_AM_SEND_FLAG_RNDV != 0,
    };
    let rep = e.ep;
    run(wk, |w, side| {
        wk.start(w, side, &op, 0, RecvOut::None, |w, cb| {
            w.am_send_nb(rep, id, hdr, buf, f, cb).map(Outcome::of)
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nbx(
    ep: *mut Handle<EpH>,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_am_send_nbx", || {
        // SAFETY: forwarded contract.
        if let Some(p) = unsafe { send_plain(ep, id, header, header_length, buffer, count, param) }
        {
            return Ok(p);
        }
        // SAFETY: forwarded contract.
        unsafe { send_nbx_general(ep, id, header, header_length, buffer, count, param) }
    })
}

/// `ucp_am_send_nbx` when [`send_plain`] does not apply.
///
/// # Safety
/// As `ucp_am_send_nbx`'s.
#[inline(never)]
unsafe fn send_nbx_general(
    ep: *mut Handle<EpH>,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
    let flags = op.flags;
    // SAFETY: forwarded contract.
    unsafe { send(ep, id, header, header_length, buffer, count, flags, op) }
}

/// The hot path of `ucp_am_send_nbx` ([`plain_send::send`]): no send flags, a valid id
/// and header.
///
/// # Safety
/// As `ucp_am_send_nbx`'s.
#[inline(always)]
unsafe fn send_plain(
    ep: *mut Handle<EpH>,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> Option<ucs_status_ptr_t> {
    let id = u16::try_from(id).ok()?;
    let hdr: &[u8] = if header_length == 0 {
        &[]
    } else if header.is_null() {
        return None;
    } else {
        // SAFETY: the caller's header, readable for this call (the protocol layer copies
        // what it keeps).
        unsafe { std::slice::from_raw_parts(header.cast(), header_length) }
    };
    // SAFETY: forwarded contract.
    unsafe {
        plain_send::send(
            ep,
            buffer,
            count,
            param,
            "ucp_am_send_nbx",
            // The protocol layer has no bytes-only step for active messages.
            |_, _, _| Ok(false),
            #[inline(always)]
            move |w, rep, buf, _| w.am_send_nb(rep, id, hdr, buf, AmSendFlags::default(), None),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nb(
    ep: *mut Handle<EpH>,
    id: u16,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: Option<SendCb>,
    flags: c_uint,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_am_send_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), datatype, false);
        // SAFETY: forwarded contract.
        unsafe {
            send(
                ep,
                c_uint::from(id),
                std::ptr::null(),
                0,
                buffer,
                count,
                flags,
                op,
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_am_recv_data_nbx(
    worker: *mut Handle<Wk>,
    data_desc: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_am_recv_data_nbx", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::LengthNbx)? };
        // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
        // completes (the UCP API's contract for the application, which dt::buf passes on).
        let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Recv)? };
        run(wk, |w, side| {
            let key = data_desc as usize;
            let desc = match side.am_kept.remove(&key) {
                Some(d) => d,
                // Eager data, from inside its handler: a copy of it is received (the
                // handler's buffer stays until it returns).
                None => {
                    let c = side.take_current_am(key).ok_or(Status::InvalidParam)?;
                    let data = c.bytes[..c.bytes.len() - c.header_len].to_vec();
                    w.am_keep(data)
                }
            };
            wk.start(w, side, &op, 0, RecvOut::Length, |w, cb| {
                w.am_recv_data_nb(desc, buf, cb).map(Outcome::Req)
            })
        })?
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_am_data_release(worker: *mut Handle<Wk>, data: *mut c_void) {
    guard::void("ucp_am_data_release", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        run(wk, |w, side| {
            let key = data as usize;
            match side.am_kept.remove(&key) {
                Some(desc) => w.am_data_release(desc),
                // Eager data, from inside its handler: not kept after it returns.
                None => side
                    .take_current_am(key)
                    .map(|_| ())
                    .ok_or(Status::InvalidParam),
            }
        })?
    })
}
