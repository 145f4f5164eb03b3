//! The completion-queue handle (`rucx_cq_h`), the C layout of its entries and parameters,
//! and the extended operation parameters (`rucx_request_param_t`) that name a queue. Knows
//! no worker: the worker core reads an operation's queue from here, and the exported
//! functions are in `cq`.
//!
//! The op attribute bit is `RUCX_OP_ATTR_FIELD_CQ` = bit 31 of `op_attr_mask`: UCX 1.13
//! uses bits 0–8 (fields) and 16–19 (flags), so it cannot collide with one of its bits.

use crate::ffi::{ucp_request_param_t, ucp_tag_t, ucs_status_t};
use crate::handle::{handle_kind, Handle};
use std::ffi::c_void;
use ucs::{Result, Status};

/// `op_attr_mask` bit: the parameter struct is a `rucx_request_param_t` whose `cq` names
/// the queue the operation reports into.
pub const RUCX_OP_ATTR_FIELD_CQ: u32 = 1 << 31;

/// `rucx_cq_params_t.field_mask` bit: `capacity` is set.
pub const RUCX_CQ_PARAM_FIELD_CAPACITY: u64 = 1;

/// Ring capacity of a queue created without `capacity`.
pub const DEFAULT_CAPACITY: usize = 1024;

/// A queue handle's value.
pub struct CqH {
    pub cq: ucp::Cq,
}

handle_kind!(CqH, 0x7275_6378_6371_6831);

/// `rucx_cq_params_t`.
#[repr(C)]
pub struct rucx_cq_params_t {
    pub field_mask: u64,
    pub capacity: usize,
}

/// `rucx_cq_entry_t`: one completion as C sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rucx_cq_entry_t {
    /// The operation's `user_data` (`UCP_OP_ATTR_FIELD_USER_DATA`; NULL without it).
    pub user_data: *mut c_void,
    /// `rucx_cq_op_t` (the values of `ucp::CqOp`).
    pub op: u32,
    pub status: ucs_status_t,
    pub length: usize,
    pub tag: ucp_tag_t,
}

/// `rucx_request_param_t`: UCX's parameters followed by the queue.
#[repr(C)]
pub struct rucx_request_param_t {
    pub base: ucp_request_param_t,
    pub cq: *mut Handle<CqH>,
}

const _: () = assert!(std::mem::size_of::<rucx_cq_entry_t>() == 32);
const _: () = assert!(std::mem::size_of::<rucx_cq_params_t>() == 16);
const _: () = assert!(
    std::mem::size_of::<rucx_request_param_t>() == std::mem::size_of::<ucp_request_param_t>() + 8
);

/// The queue an operation's parameters name.
///
/// # Safety
/// `param` must point to a readable `rucx_request_param_t` (the caller set
/// `RUCX_OP_ATTR_FIELD_CQ`, which promises it).
pub(crate) unsafe fn cq_of<'a>(param: *const ucp_request_param_t) -> Result<&'a ucp::Cq> {
    // SAFETY: by the contract, the struct continues with the handle.
    let h = unsafe { (*param.cast::<rucx_request_param_t>()).cq };
    if h.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: a handle of ours (checked by tag and generation) or garbage the check
    // refuses.
    Ok(&unsafe { Handle::get(h)? }.cq)
}
