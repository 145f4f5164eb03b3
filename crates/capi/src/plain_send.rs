//! The plain hot path of the `_nbx` sends (tag, active message, stream): parameters that
//! name at most a callback, its user data, a contiguous datatype and the flags in
//! [`core::SEND_HINTS`] ([`core::plain_buf`]), a live endpoint, a worker without a lock
//! ([`crate::core::Wk::plain_entry`]). The send starts with no request; most complete in
//! the call and return NULL, as UCX's do (no callback), or with `NO_IMM_CMPL` a request
//! already completed whose callback runs before the call returns. One that does not
//! complete reads the rest of its parameters and gets its request from
//! [`core::settle_plain_send`], as the general path would make it. docs/c-abi.md, "The
//! plain hot path".

use crate::core::{self, ep_get, EpH};
use crate::dispatch::leave_plain;
use crate::ffi::*;
use crate::handle::Handle;
use std::ffi::c_void;
use ucp::{Buf, Request, Worker};
use ucs::Result;

/// Starts a plain send: `start(worker, endpoint, buffer)` is the protocol layer's send,
/// started with no callback. `None` (nothing started): the parameters are not plain, the
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
    start: impl FnOnce(&mut Worker, ucp::Ep, Buf) -> Result<Option<Request>>,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: forwarded contract.
    let buf = unsafe { core::plain_buf(param, buffer, count, core::SEND_HINTS)? };
    // SAFETY: `plain_buf` read the mask of this readable struct.
    if unsafe { (*param).op_attr_mask } & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0 {
        // SAFETY: forwarded contract.
        unsafe { go::<true>(ep, buf, param, name, start) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { go::<false>(ep, buf, param, name, start) }
    }
}

/// [`send`] once the buffer is known; `NO_IMM` tells whether a send that completes in the
/// call still returns its request (a constant, so that the common case tests nothing
/// after the send: reading the flag there cost 7 instructions per message).
///
/// # Safety
/// As for [`send`].
#[inline(always)]
unsafe fn go<const NO_IMM: bool>(
    ep: *mut Handle<EpH>,
    buf: Buf,
    param: *const ucp_request_param_t,
    name: &'static str,
    start: impl FnOnce(&mut Worker, ucp::Ep, Buf) -> Result<Option<Request>>,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { ep_get(ep).ok()? };
    let rep = e.ep;
    let mut entry = wk.plain_entry()?;
    let (w, side) = entry.parts();
    let r = match start(w, rep, buf) {
        Ok(None) if !NO_IMM => std::ptr::null_mut(),
        out => core::settle_plain_send(wk, w, side, param, out, name),
    };
    leave_plain(entry, wk);
    Some(r)
}
