//! `rucx_put_signal_nbx` (`include/rucx/ucp_ext.h`): put with remote signal, a rucx
//! extension of the UCP API. The ordering guarantee is ucp's (`Worker::put_signal_nb`);
//! this module maps the C arguments and the request parameters as the other nbx calls do.

use crate::core::{CbKind, EpH, Op, Outcome, RecvOut, Wk};
use crate::dispatch::run;
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::rma::{contig_len, ep_key, RkeyObj};
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
    guard::status_ptr("rucx_put_signal_nbx", || {
        // SAFETY: the caller's parameters, read by mask.
        let cop = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        let len = contig_len(&cop, count)?;
        let sop = signal_op(op)?;
        // SAFETY: the caller's handles (each key checked to belong to the endpoint's
        // worker).
        let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
        // SAFETY: as above.
        let (_, _, sk) = unsafe { ep_key(ep, signal_rkey)? };
        if len > 0 && buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        let rep = e.ep;
        run(wk, |w, side| {
            let hdr = wk.begin(side, &cop, 0)?;
            // SAFETY: the API's contract: the buffer stays readable, and unchanged, until
            // the operation completes (null with a length was refused above).
            let src = unsafe { Buf::contig(buffer.cast_mut().cast(), len) };
            let out = w
                .put_signal_nb(
                    rep,
                    src,
                    remote_addr,
                    &k.rk,
                    signal_addr,
                    &sk.rk,
                    sop,
                    value,
                    Wk::word(hdr),
                )
                .map(Outcome::of);
            wk.conclude(w, side, &cop, hdr, out, RecvOut::None)
        })?
    })
}
