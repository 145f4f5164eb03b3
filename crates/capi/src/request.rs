//! The `ucp_request_*` functions: status, test, free, release, cancel, query, and
//! `ucp_request_alloc`. Requests themselves (headers, pool, life cycle) live in
//! [`crate::core`].

use crate::core::{self, ReqHdr, Wk, F_COMPLETED, F_RUST, F_TICKET};
use crate::dispatch::run;
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use ucs::{Result, Status};

#[no_mangle]
pub unsafe extern "C" fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t {
    guard::value("ucp_request_check_status", UCS_ERR_INVALID_PARAM, || {
        // SAFETY: the caller passes a request of ours (or garbage the check refuses).
        let hdr = unsafe { ReqHdr::from_user(request)? };
        // SAFETY: validated by `from_user`.
        Ok(unsafe { ReqHdr::check(hdr) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_is_completed(request: *mut c_void) -> std::ffi::c_int {
    // SAFETY: forwarded contract.
    let s = unsafe { ucp_request_check_status(request) };
    std::ffi::c_int::from(s != UCS_INPROGRESS)
}

unsafe fn test_info(request: *mut c_void, info: *mut ucp_tag_recv_info_t) -> Result<ucs_status_t> {
    // SAFETY: forwarded contract.
    let hdr = unsafe { ReqHdr::from_user(request)? };
    // SAFETY: validated by `from_user`.
    let s = unsafe { ReqHdr::check(hdr) };
    if s != UCS_INPROGRESS && !info.is_null() {
        // SAFETY: a live header; `info` is the caller's writable struct.
        unsafe { info.write_unaligned((*hdr).info) };
    }
    Ok(s)
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    guard::value("ucp_request_test", UCS_ERR_INVALID_PARAM, || unsafe {
        test_info(request, info)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    guard::value(
        "ucp_tag_recv_request_test",
        UCS_ERR_INVALID_PARAM,
        || unsafe { test_info(request, info) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_request_test(
    request: *mut c_void,
    length_p: *mut usize,
) -> ucs_status_t {
    guard::value(
        "ucp_stream_recv_request_test",
        UCS_ERR_INVALID_PARAM,
        || {
            // SAFETY: forwarded contract.
            let hdr = unsafe { ReqHdr::from_user(request)? };
            // SAFETY: validated by `from_user`.
            let s = unsafe { ReqHdr::check(hdr) };
            if s != UCS_INPROGRESS && !length_p.is_null() {
                // SAFETY: live header; the caller's writable length.
                unsafe { length_p.write_unaligned((*hdr).info.length) };
            }
            Ok(s)
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_free(request: *mut c_void) {
    // SAFETY: forwarded contract.
    guard::void("ucp_request_free", || unsafe {
        core::release(request, true)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_release(request: *mut c_void) {
    // SAFETY: forwarded contract.
    guard::void("ucp_request_release", || unsafe {
        core::release(request, false)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_cancel(worker: *mut Handle<Wk>, request: *mut c_void) {
    guard::void("ucp_request_cancel", || {
        // SAFETY: the caller passes its worker handle.
        let wk = unsafe { Handle::get(worker)? };
        // SAFETY: forwarded contract.
        let hdr = unsafe { ReqHdr::from_user(request)? };
        // SAFETY: validated.
        let h = unsafe { &*hdr };
        let f = h.flags.load(Ordering::Acquire);
        if f & F_COMPLETED == 0 && f & F_TICKET != 0 {
            let t = ucp::RecvTicket::from_raw(h.ticket);
            return run(wk, |w, _| {
                // A receive that matched meanwhile has no ticket any more: nothing to do.
                let _ = w.tag_recv_word_cancel(t);
            });
        }
        if f & F_COMPLETED != 0 || f & F_RUST == 0 {
            return Ok(());
        }
        let id = h.rust_id;
        run(wk, |w, _| {
            let r = ucp::Request::from_u64(id);
            // A stale id (the request completed meanwhile) is refused by the pool check.
            let _ = w.request_cancel(r);
            w.progress();
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_request_query(
    request: *mut c_void,
    attr: *mut ucp_request_attr_t,
) -> ucs_status_t {
    guard::status("ucp_request_query", || {
        // SAFETY: forwarded contract.
        let hdr = unsafe { ReqHdr::from_user(request)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct; fields are accessed by the mask.
        unsafe {
            let mask = (*attr).field_mask;
            if mask & UCP_REQUEST_ATTR_FIELD_STATUS != 0 {
                (*attr).status = ReqHdr::check(hdr);
            }
            if mask & UCP_REQUEST_ATTR_FIELD_MEM_TYPE != 0 {
                (*attr).mem_type = UCS_MEMORY_TYPE_HOST;
            }
            if mask & UCP_REQUEST_ATTR_FIELD_INFO_STRING != 0 {
                let s = b"rucx request";
                let size = if mask & UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE != 0 {
                    (*attr).debug_string_size
                } else {
                    0
                };
                let out = (*attr).debug_string;
                if !out.is_null() && size > 0 {
                    let n = s.len().min(size - 1);
                    std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
                    *out.add(n) = 0;
                }
            }
        }
        Ok(())
    })
}

/// An empty request of the worker's pool, for the application to pass as its request
/// memory (`UCP_OP_ATTR_FIELD_REQUEST`) to operations, and to give back with
/// `ucp_request_free`. It reads as completed (`UCS_OK`) until an operation uses it.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_alloc(worker: *mut Handle<Wk>) -> *mut c_void {
    guard::value("ucp_request_alloc", std::ptr::null_mut(), || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        let hdr = wk.alloc_request()?;
        Ok(ReqHdr::user(hdr))
    })
}
