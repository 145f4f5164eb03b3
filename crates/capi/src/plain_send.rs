//! The plain hot path of the `_nbx` sends (tag, active message, stream): parameters that
//! name at most a callback, its user data, a contiguous datatype and the flags in
//! [`core::SEND_HINTS`] ([`core::plain_buf`]), a live endpoint, a worker without a lock
//! ([`crate::core::Wk::plain_entry`]). The send starts with no request; most complete in
//! the call and return NULL, as UCX's do (no callback), or with `NO_IMM_CMPL` a request
//! already completed whose callback runs before the call returns. One that does not
//! complete reads the rest of its parameters and gets its request from
//! [`core::settle_plain_send`], as the general path would make it. docs/c-abi.md, "The
//! plain hot path".

use crate::core::{self, ep_slot, EpH};
use crate::dispatch::leave_plain;
use crate::ffi::*;
use crate::handle::Handle;
use std::ffi::c_void;
use ucp::{Buf, Request, Worker};
use ucs::Result;

/// Starts a plain send: `now(worker, endpoint, bytes)` sends the message whole in the call
/// if it can (true; false: nothing sent), and `start(worker, endpoint, buffer, declined)`
/// is the protocol layer's send, started with no callback, for the rest (`declined`: `now`
/// was asked and said false). `None` (nothing started): the parameters are not plain, the
/// handle is not live, or the worker has a lock or is busy; the caller's general path
/// applies and reports whatever made this one decline. `name` is the C function's, for
/// the error log.
///
/// # Safety
/// `ep`, `buffer`, `count` and `param` as the C function's contract says: `param` null or
/// readable, the buffer valid until the operation completes.
#[inline(always)]
pub(crate) unsafe fn send(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
    name: &'static str,
    now: impl FnOnce(&mut Worker, ucp::Ep, &[u8]) -> Result<bool>,
    start: impl FnOnce(&mut Worker, ucp::Ep, Buf, bool) -> Result<Option<Request>>,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let len = unsafe { core::plain_span(param, buffer, count, core::SEND_HINTS)? };
    let buffer = buffer.cast::<u8>();
    // SAFETY: `plain_span` read the mask of this readable struct.
    if unsafe { (*param).op_attr_mask } & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0 {
        // SAFETY: forwarded contract.
        unsafe { go::<true>(ep, buffer, len, param, name, |_, _, _| Ok(false), start) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { go::<false>(ep, buffer, len, param, name, now, start) }
    }
}

/// [`send`] once the buffer's `len` bytes at `buffer` are known (not null unless empty, at
/// most `isize::MAX`: [`core::plain_span`]); `NO_IMM` tells whether a send that completes in the call still returns its request (a
/// constant, so that the common case tests nothing after the send: reading the flag there
/// cost 7 instructions per message).
///
/// # Safety
/// As for [`send`].
#[inline(always)]
unsafe fn go<const NO_IMM: bool>(
    ep: *mut Handle<EpH>,
    buffer: *const u8,
    len: usize,
    param: *const ucp_request_param_t,
    name: &'static str,
    now: impl FnOnce(&mut Worker, ucp::Ep, &[u8]) -> Result<bool>,
    start: impl FnOnce(&mut Worker, ucp::Ep, Buf, bool) -> Result<Option<Request>>,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle (the C contract: null or a handle of ours;
    // `ep_slot` refuses a null, stale or foreign one).
    let (e, slot) = unsafe { ep_slot(ep).ok()? };
    let rep = e.ep;
    let (wk, mut entry) = core::Wk::plain_entry_in(slot)?;
    let (w, side) = entry.parts();
    // The usual case, a message sent whole in the call, takes the bytes alone: no `Buf`
    // is made, and its drop and the result's match are off this path (they cost 17
    // instructions per 8-byte tag send).
    if !NO_IMM {
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the caller's contiguous buffer of `len` bytes (not null, at most
            // `isize::MAX`), readable for this call (the C function's contract).
            unsafe { std::slice::from_raw_parts(buffer, len) }
        };
        match now(w, rep, data) {
            Ok(true) => {
                leave_plain(entry, wk);
                return Some(std::ptr::null_mut());
            }
            Ok(false) => {}
            Err(s) => {
                let r = core::settle_plain_send(wk, w, side, param, Err(s), name);
                leave_plain(entry, wk);
                return Some(r);
            }
        }
    }
    // SAFETY: the caller's contiguous buffer of `len` bytes, not null unless empty, valid
    // until the operation completes (forwarded contract).
    let buf = unsafe { Buf::contig(buffer.cast_mut(), len) };
    let r = match start(w, rep, buf, !NO_IMM) {
        Ok(None) if !NO_IMM => std::ptr::null_mut(),
        out => core::settle_plain_send(wk, w, side, param, out, name),
    };
    leave_plain(entry, wk);
    Some(r)
}
