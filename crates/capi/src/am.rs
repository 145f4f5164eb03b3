//! Active messages: handlers, sends, and the data a handler keeps or receives later.
//!
//! C handlers never run inside the Rust worker's progress. The Rust handler rucx installs
//! for every id keeps the message (`AmAction::Keep`) and queues it; after progress
//! returns, [`dispatch`] calls the C handler with:
//! - an eager message: its data in place, `UCP_AM_RECV_ATTR_FLAG_DATA` set. If the
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
//! eager data (keepable the same way); a rendezvous message is received into a temporary
//! buffer first and handed over without that flag.

use crate::dt::{self, Dir};
use crate::ep::{self, EpH};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::request::CbKind;
use crate::worker::{
    self, rust_cb, AmEvent, AmHandlerC, Event, Op, Outcome, QueuePtr, RecvOut, Side, Wk,
};
use std::ffi::{c_uint, c_void};
use ucp::am::{AmHandler, AmSendFlags};
use ucp::Worker;
use ucp::{AmAction, AmData, AmMsg, RecvInfo};
use ucs::{Result, Status};

/// Largest user header `ucp_worker_query` reports (it travels in one transport message).
pub(crate) const MAX_AM_HEADER: usize = 1024;

fn rust_handler(q: QueuePtr) -> AmHandler {
    Box::new(move |m: &AmMsg<'_>| {
        q.push(Event::Am(AmEvent {
            id: m.id,
            header: m.header.to_vec(),
            desc: m.desc,
            reply_ep: m.reply_ep,
            rndv: match m.data {
                AmData::Rndv { length } => Some(length),
                AmData::Eager(_) => None,
            },
        }));
        AmAction::Keep
    })
}

fn set_handler(wk: &Wk, id: u16, h: Option<AmHandlerC>) -> Result<()> {
    let q = QueuePtr(&wk.evq);
    wk.run(|w, side| {
        match h {
            Some(h) => {
                side.am_handlers.insert(id, h);
                w.am_set_handler(id, Some(rust_handler(q)));
            }
            None => {
                side.am_handlers.remove(&id);
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
        let wk = unsafe { worker::get(worker)? };
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
        let wk = unsafe { worker::get(worker)? };
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
    let (e, wk) = unsafe { ep::get(ep)? };
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
    // SAFETY: the caller's buffer as its datatype describes it.
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Send)? };
    let f = AmSendFlags {
        reply: flags & UCP_AM_SEND_FLAG_REPLY != 0,
        eager: flags & UCP_AM_SEND_FLAG_EAGER != 0,
        rndv: flags & UCP_AM_SEND_FLAG_RNDV != 0,
    };
    let rep = e.ep;
    wk.run(|w, side| {
        // SAFETY: the API's contract: the buffer stays readable until completion.
        let out = match unsafe { w.am_send_nb(rep, id, hdr, buf, f, Some(rust_cb()))? } {
            None => Outcome::Done(Status::Ok, RecvInfo::default()),
            Some(r) => Outcome::Req(r),
        };
        wk.conclude(w, side, &op, out, RecvOut::None, None)
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
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        let flags = op.flags;
        // SAFETY: forwarded contract.
        unsafe { send(ep, id, header, header_length, buffer, count, flags, op) }
    })
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
        let wk = unsafe { worker::get(worker)? };
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::LengthNbx)? };
        // SAFETY: the caller's buffer as its datatype describes it.
        let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Recv)? };
        wk.run(|w, side| {
            let desc = side
                .am_kept
                .remove(&(data_desc as usize))
                .ok_or(Status::InvalidParam)?;
            // SAFETY: the API's contract: the buffer stays writable until completion.
            let r = unsafe { w.am_recv_data_nb(desc, buf, Some(rust_cb()))? };
            wk.conclude(w, side, &op, Outcome::Req(r), RecvOut::Length, None)
        })?
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_am_data_release(worker: *mut Handle<Wk>, data: *mut c_void) {
    guard::void("ucp_am_data_release", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { worker::get(worker)? };
        wk.run(|w, side| {
            let desc = side
                .am_kept
                .remove(&(data as usize))
                .ok_or(Status::InvalidParam)?;
            w.am_data_release(desc)
        })?
    })
}

/// A message ready for its C handler.
pub(crate) struct Ready {
    h: AmHandlerC,
    header: Vec<u8>,
    data: *mut c_void,
    len: usize,
    rndv: bool,
    /// Data received for an older-style handler (owned here while it runs).
    _owned: Option<Vec<u8>>,
    reply: *mut Handle<EpH>,
    /// True when `data` is registered in the worker's kept-data table.
    kept: bool,
}

/// Readies a queued message for its handler (with the worker held); `None` when it has
/// no handler or its data is gone.
pub(crate) fn prepare(wk: &Wk, w: &mut Worker, side: &mut Side, ev: AmEvent) -> Option<Ready> {
    let Some(&h) = side.am_handlers.get(&ev.id) else {
        tracing::debug!("active message {} without a handler dropped", ev.id);
        let _ = w.am_data_release(ev.desc);
        return None;
    };
    let reply = match ev.reply_ep {
        Some(e) => ep::handle_for(wk, side, e),
        None => std::ptr::null_mut(),
    };
    let old = matches!(h, AmHandlerC::Old { .. });
    Some(match (ev.rndv, old) {
        (Some(len), false) => {
            let t = side.token() as *mut c_void;
            side.am_kept.insert(t as usize, ev.desc);
            Ready {
                h,
                header: ev.header,
                data: t,
                len,
                rndv: true,
                _owned: None,
                reply,
                kept: true,
            }
        }
        (Some(len), true) => {
            let mut v = vec![0u8; len];
            w.am_recv_data(ev.desc, &mut v).ok()?;
            Ready {
                h,
                header: ev.header,
                data: v.as_mut_ptr().cast(),
                len,
                rndv: true,
                _owned: Some(v),
                reply,
                kept: false,
            }
        }
        (None, _) => {
            let (p, len) = match w.am_data(ev.desc)? {
                d if !d.is_empty() => (d.as_ptr().cast_mut().cast(), d.len()),
                _ => (side.token() as *mut c_void, 0),
            };
            side.am_kept.insert(p as usize, ev.desc);
            Ready {
                h,
                header: ev.header,
                data: p,
                len,
                rndv: false,
                _owned: None,
                reply,
                kept: true,
            }
        }
    })
}

/// Calls the C handler of a readied message (the worker released), then releases the
/// data unless the handler kept it.
pub(crate) fn deliver(wk: &Wk, r: Ready) {
    let status = match r.h {
        AmHandlerC::Recv { cb, arg } => {
            let mut attr = if r.rndv {
                UCP_AM_RECV_ATTR_FLAG_RNDV
            } else {
                UCP_AM_RECV_ATTR_FLAG_DATA
            };
            if !r.reply.is_null() {
                attr |= UCP_AM_RECV_ATTR_FIELD_REPLY_EP;
            }
            let param = ucp_am_recv_param_t {
                recv_attr: attr,
                reply_ep: r.reply.cast(),
            };
            let hp = if r.header.is_empty() {
                std::ptr::null()
            } else {
                r.header.as_ptr().cast()
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
                f(arg, hp, r.header.len(), r.data, r.len, &param)
            }
        }
        AmHandlerC::Old { cb, arg } => {
            let flags = if r.kept { UCP_CB_PARAM_FLAG_DATA } else { 0 };
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
                f(arg, r.data, r.len, r.reply.cast(), flags)
            }
        }
    };
    if r.kept && status != UCS_INPROGRESS {
        let _ = wk.with(|w, side| {
            if let Some(desc) = side.am_kept.remove(&(r.data as usize)) {
                let _ = w.am_data_release(desc);
            }
        });
    }
}
