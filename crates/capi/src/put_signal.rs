//! `rucx_put_signal_nbx` (`include/rucx/ucp_ext.h`): put with remote signal, a rucx
//! extension of the UCP API. The ordering guarantee is ucp's (`Worker::put_signal_nb`);
//! this module maps the C arguments and the request parameters as the other nbx calls do.
//!
//! When both keys map the target's memory (shared memory) and the caller asked for
//! nothing a request would carry, the call goes to `ucp::rma::put_signal_in_call`, which
//! needs neither the worker nor a request header ([`in_call`]): the signal's latency is
//! this call's length plus a cache line's trip, so the call is kept short. Every other
//! case enters the worker ([`via_worker`]).

use crate::core::{CbKind, EpH, Op, Outcome, RecvOut, Wk, DT_BYTES};
use crate::dispatch::run;
use crate::dt::contig_size;
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::rma::{contig_len, ep_key, key_of, RkeyObj};
use std::ffi::{c_uint, c_void};
use ucp::{Buf, SignalOp};
use ucs::{Result, Status};

/// `rucx_signal_op_t` (a C enum).
#[allow(non_camel_case_types)]
pub type rucx_signal_op_t = c_uint;
pub const RUCX_SIGNAL_OP_ADD: rucx_signal_op_t = 0;
pub const RUCX_SIGNAL_OP_SET: rucx_signal_op_t = 1;

fn signal_op(op: rucx_signal_op_t) -> Result<SignalOp> {
    match op {
        RUCX_SIGNAL_OP_ADD => Ok(SignalOp::Add),
        RUCX_SIGNAL_OP_SET => Ok(SignalOp::Set),
        _ => Err(Status::InvalidParam),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rucx_put_signal_nbx(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    signal_addr: u64,
    signal_rkey: *mut Handle<RkeyObj>,
    op: rucx_signal_op_t,
    value: u64,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    let a = Args {
        ep,
        buffer,
        count,
        remote_addr,
        rkey,
        signal_addr,
        signal_rkey,
        op,
        value,
        param,
    };
    guard::status_ptr("rucx_put_signal_nbx", || {
        // SAFETY: the caller's arguments, as the C API defines them.
        match unsafe { in_call(&a)? } {
            Some(done) => Ok(done),
            // SAFETY: as above.
            None => unsafe { via_worker(a) },
        }
    })
}

/// The arguments of `rucx_put_signal_nbx`.
struct Args {
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    signal_addr: u64,
    signal_rkey: *mut Handle<RkeyObj>,
    op: rucx_signal_op_t,
    value: u64,
    param: *const ucp_request_param_t,
}

/// The `op_attr_mask` bits that need a request header or a queue: with any of them the
/// call goes through the worker even when the protocol completes it inside the call.
const NEEDS_HEADER: u32 =
    UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_NO_IMM_CMPL | crate::cqh::RUCX_OP_ATTR_FIELD_CQ;

/// The call without the worker: when the caller asked for nothing a request would carry
/// (no request memory, no completion queue, no forced callback; a callback that only runs
/// for a request is never called for a call that returns `UCS_OK`) and both keys map the
/// target's memory. `Ok(None)`: the call needs the worker.
///
/// # Safety
/// The arguments of `rucx_put_signal_nbx`, as the C API defines them.
#[inline(always)]
unsafe fn in_call(a: &Args) -> Result<Option<ucs_status_ptr_t>> {
    if a.param.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the caller's parameter struct; the mask is always present and the datatype
    // is read only when the mask names it.
    let (mask, dt) = unsafe {
        let p = &*a.param;
        let dt = if p.op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE != 0 {
            p.datatype
        } else {
            DT_BYTES
        };
        (p.op_attr_mask, dt)
    };
    let Some(elem) = contig_size(dt).filter(|_| mask & NEEDS_HEADER == 0) else {
        return Ok(None);
    };
    let len = a.count.checked_mul(elem).ok_or(Status::InvalidParam)?;
    let sop = signal_op(a.op)?;
    // The worker is not looked at: nothing here touches it, and a destroyed worker
    // destroyed its endpoint handles with it, so a live endpoint is enough.
    // SAFETY: the caller's endpoint handle.
    let e = unsafe { Handle::get(a.ep)? };
    // SAFETY: the caller's key handle, checked to belong to the endpoint's worker.
    let k = unsafe { key_of(e, a.rkey)? };
    // Data and signal word in one registered region (one key) is the usual case.
    let sk = if a.signal_rkey == a.rkey {
        k
    } else {
        // SAFETY: as above.
        unsafe { key_of(e, a.signal_rkey)? }
    };
    let data: &[u8] = match (len, a.buffer.is_null()) {
        (0, _) => &[],
        (_, true) => return Err(Status::InvalidParam),
        // No memory holds more than isize::MAX bytes (nor may a slice claim to).
        (l, false) if l > isize::MAX as usize => return Err(Status::InvalidParam),
        // SAFETY: the caller's buffer of `len` bytes, readable during the call, which is
        // all this path reads it for.
        (_, false) => unsafe { std::slice::from_raw_parts(a.buffer.cast(), len) },
    };
    // A live endpoint handle is an endpoint the application has not closed, as
    // `put_signal_in_call` asks of its caller.
    let done = ucp::rma::put_signal_in_call(
        e.ep,
        data,
        a.remote_addr,
        &k.rk,
        a.signal_addr,
        &sk.rk,
        sop,
        a.value,
    );
    match done {
        Some(r) => r.map(|()| Some(std::ptr::null_mut())),
        None => Ok(None),
    }
}

/// The call through the worker, with a request header as every nbx call has. Takes the
/// arguments by value so that the caller writes them to memory only on this path.
///
/// # Safety
/// As for [`in_call`].
#[inline(never)]
unsafe fn via_worker(a: Args) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's parameters, read by mask.
    let cop = unsafe { Op::nbx(a.param, CbKind::SendNbx)? };
    let len = contig_len(&cop, a.count)?;
    let sop = signal_op(a.op)?;
    // SAFETY: the caller's handles (each key checked to belong to the endpoint's
    // worker).
    let (e, wk, k) = unsafe { ep_key(a.ep, a.rkey)? };
    // SAFETY: as above.
    let sk = unsafe { key_of(e, a.signal_rkey)? };
    if len > 0 && a.buffer.is_null() {
        return Err(Status::InvalidParam);
    }
    let rep = e.ep;
    run(wk, |w, side| {
        let hdr = wk.begin(side, &cop, 0)?;
        // SAFETY: the API's contract: the buffer stays readable, and unchanged, until
        // the operation completes (null with a length was refused above).
        let src = unsafe { Buf::contig(a.buffer.cast_mut().cast(), len) };
        let out = w
            .put_signal_nb(
                rep,
                src,
                a.remote_addr,
                &k.rk,
                a.signal_addr,
                &sk.rk,
                sop,
                a.value,
                Wk::word(hdr),
            )
            .map(Outcome::of);
        wk.conclude(w, side, &cop, hdr, out, RecvOut::None)
    })?
}
