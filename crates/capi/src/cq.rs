//! Completion queues (rucx extension, `rucx/ucp_ext.h`): `rucx_cq_create`,
//! `rucx_cq_destroy`, `rucx_cq_poll`. An operation names a queue through
//! `rucx_request_param_t` (read by the worker core, see `cqh`); its completion is then an
//! entry of the queue instead of a request and a callback.

use crate::core::{self, Wk};
use crate::cqh::*;
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use ucs::Status;

#[no_mangle]
pub unsafe extern "C" fn rucx_cq_create(
    worker: *mut Handle<Wk>,
    params: *const rucx_cq_params_t,
    cq_p: *mut *mut Handle<CqH>,
) -> ucs_status_t {
    guard::status("rucx_cq_create", || {
        // SAFETY: the caller's worker handle (checked).
        unsafe { core::get(worker)? };
        if cq_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let mut capacity = DEFAULT_CAPACITY;
        if !params.is_null() {
            // SAFETY: the caller's parameters, read as far as the mask says.
            let p = unsafe { &*params };
            if p.field_mask & RUCX_CQ_PARAM_FIELD_CAPACITY != 0 {
                capacity = p.capacity;
            }
        }
        let cq = ucp::Cq::new(capacity)?;
        let (h, _) = Handle::alloc(CqH { cq });
        // SAFETY: checked non-null; the caller's output.
        unsafe { cq_p.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rucx_cq_destroy(cq: *mut Handle<CqH>) {
    guard::void("rucx_cq_destroy", || {
        // SAFETY: the caller's handle (checked by `destroy`).
        unsafe { Handle::destroy(cq)? };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rucx_cq_poll(
    cq: *mut Handle<CqH>,
    entries: *mut rucx_cq_entry_t,
    max: usize,
) -> isize {
    guard::value("rucx_cq_poll", Status::InvalidParam.code() as isize, || {
        // SAFETY: the caller's handle (checked).
        let q = &unsafe { Handle::get(cq)? }.cq;
        if entries.is_null() && max > 0 {
            return Err(Status::InvalidParam);
        }
        let mut one = [ucp::CqEntry::default()];
        let mut n = 0;
        while n < max && q.poll(&mut one) == 1 {
            let e = &one[0];
            let c = rucx_cq_entry_t {
                user_data: e.user as usize as *mut std::ffi::c_void,
                op: e.op as u32,
                status: e.status.code(),
                length: e.length,
                tag: e.tag,
            };
            // SAFETY: the caller's array of `max` entries; n < max.
            unsafe { entries.add(n).write(c) };
            n += 1;
        }
        Ok(n as isize)
    })
}
