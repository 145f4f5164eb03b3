//! Streams: ordered bytes per endpoint.

use crate::core::{self, ep_get, CbKind, EpH, Op, Outcome, RecvOut, Wk};
use crate::dispatch::run;
use crate::dt::{self, Dir};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::plain_send;
use std::ffi::{c_uint, c_void};
use ucp::stream::StreamRecv;
use ucp::RecvInfo;
use ucs::{Result, Status};

unsafe fn send(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { ep_get(ep)? };
    // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
    // completes (the UCP API's contract for the application, which dt::buf passes on).
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Send)? };
    let rep = e.ep;
    run(wk, |w, side| {
        wk.start(w, side, &op, 0, RecvOut::None, |w, cb| {
            w.stream_send_nb(rep, buf, cb).map(Outcome::of)
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nb(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: Option<SendCb>,
    _flags: c_uint,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_stream_send_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), datatype, false);
        // SAFETY: forwarded contract.
        unsafe { send(ep, buffer, count, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nbx(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_stream_send_nbx", || {
        // SAFETY: forwarded contract.
        let plain = unsafe {
            plain_send::send(
                ep,
                buffer,
                count,
                param,
                "ucp_stream_send_nbx",
                // The protocol layer has no bytes-only step for streams.
                |_, _, _| Ok(false),
                #[inline(always)]
                |w, rep, buf, _| w.stream_send_nb(rep, buf, None),
            )
        };
        if let Some(p) = plain {
            return Ok(p);
        }
        // SAFETY: forwarded contract.
        unsafe { send_nbx_general(ep, buffer, count, param) }
    })
}

/// `ucp_stream_send_nbx` when the plain hot path ([`plain_send::send`]) does not apply.
///
/// # Safety
/// As `ucp_stream_send_nbx`'s.
#[inline(never)]
unsafe fn send_nbx_general(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
    // SAFETY: forwarded contract.
    unsafe { send(ep, buffer, count, op) }
}

unsafe fn recv(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    waitall: bool,
    mut op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { ep_get(ep)? };
    // SAFETY: the caller's buffer as its datatype describes it, valid until the operation
    // completes (the UCP API's contract for the application, which dt::buf passes on).
    let buf = unsafe { dt::buf(buffer, count, op.datatype, Dir::Recv)? };
    let rep = e.ep;
    // The length of an immediate completion goes to `length`, not to `recv_info`.
    op.recv_info = length.cast();
    run(wk, |w, side| {
        wk.start(w, side, &op, 0, RecvOut::Length, |w, cb| {
            w.stream_recv_nb(rep, buf, waitall, cb).map(|r| match r {
                StreamRecv::Done(n) => Outcome::Done(
                    Status::Ok,
                    RecvInfo {
                        sender_tag: 0,
                        length: n,
                    },
                ),
                StreamRecv::Pending(r) => Outcome::Req(r),
            })
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nb(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: Option<StreamRecvCb>,
    length: *mut usize,
    flags: c_uint,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_stream_recv_nb", || {
        let op = Op::nb(
            CbKind::StreamRecv,
            cb.map_or(0, |f| f as usize),
            datatype,
            false,
        );
        let waitall = flags & UCP_STREAM_RECV_FLAG_WAITALL != 0;
        // SAFETY: forwarded contract.
        unsafe { recv(ep, buffer, count, length, waitall, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nbx(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_stream_recv_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::LengthNbx)? };
        let waitall = op.flags & UCP_STREAM_RECV_FLAG_WAITALL != 0;
        // SAFETY: forwarded contract.
        unsafe { recv(ep, buffer, count, length, waitall, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_data_nb(
    ep: *mut Handle<EpH>,
    length: *mut usize,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_stream_recv_data_nb", || {
        // SAFETY: the caller's endpoint handle.
        let (e, wk) = unsafe { ep_get(ep)? };
        if length.is_null() {
            return Err(Status::InvalidParam);
        }
        let rep = e.ep;
        run(wk, |w, side| {
            let Some(v) = w.stream_recv_data(rep)? else {
                return Ok(std::ptr::null_mut());
            };
            if v.is_empty() {
                return Ok(std::ptr::null_mut());
            }
            let p = v.as_ptr().cast_mut().cast::<c_void>();
            // SAFETY: the caller's output pointer.
            unsafe { *length = v.len() };
            side.stream_kept.insert(p as usize, v);
            Ok(p)
        })?
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_data_release(ep: *mut Handle<EpH>, data: *mut c_void) {
    guard::void("ucp_stream_data_release", || {
        // SAFETY: the caller's endpoint handle.
        let (_, wk) = unsafe { ep_get(ep)? };
        wk.with(|_, side| side.stream_kept.remove(&(data as usize)))?
            .map(drop)
            .ok_or(Status::InvalidParam)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_worker_poll(
    worker: *mut Handle<Wk>,
    poll_eps: *mut ucp_stream_poll_ep_t,
    max_eps: usize,
    _flags: c_uint,
) -> isize {
    guard::value(
        "ucp_stream_worker_poll",
        UCS_ERR_INVALID_PARAM as isize,
        || {
            // SAFETY: the caller's worker handle.
            let wk = unsafe { core::get(worker)? };
            if poll_eps.is_null() && max_eps > 0 {
                return Err(Status::InvalidParam);
            }
            let ready = run(wk, |w, side| {
                w.stream_ready(max_eps)
                    .into_iter()
                    .filter_map(|ep| side.eps.get(&ep).copied())
                    .collect::<Vec<_>>()
            })?;
            for (i, h) in ready.iter().enumerate() {
                // SAFETY: handles in the worker's table are live endpoint handles.
                let user_data = unsafe { Handle::get(*h) }
                    .map(|e| e.user_data.get())
                    .unwrap_or(std::ptr::null_mut());
                // SAFETY: the caller's array has room for `max_eps` entries, and
                // `ready` has at most that many.
                unsafe {
                    poll_eps.add(i).write(ucp_stream_poll_ep_t {
                        ep: h.cast(),
                        user_data,
                        flags: 0,
                        reserved: [0; 16],
                    })
                };
            }
            Ok(ready.len() as isize)
        },
    )
}
