//! The memory-event functions of libucm that Open MPI calls.
//!
//! UCX uses memory events to keep its registration cache coherent. rucx keeps no
//! registration cache (memory is registered when mapped and unregistered when unmapped,
//! explicitly), so nothing in rucx needs to learn about unmapped memory:
//! - `ucm_set_external_event` / `ucm_unset_external_event` record which events the
//!   application promises to deliver (reported back by nothing, kept for symmetry);
//! - `ucm_vm_munmap` / `ucm_vm_mmap` (the delivery of such an event) do nothing;
//! - `ucm_test_events` / `ucm_test_external_events` return `UCS_OK`: every event a
//!   consumer inside rucx could need is handled (there is none), so callers that check
//!   before relying on memory hooks see no problem to warn about;
//! - `ucm_set_event_handler` returns `UCS_ERR_UNSUPPORTED` (rucx installs no hooks and
//!   cannot call an application back on memory events).

use crate::ffi::{ucs_status_t, UCS_ERR_UNSUPPORTED, UCS_OK};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

static EXTERNAL: AtomicI32 = AtomicI32::new(0);

#[no_mangle]
pub extern "C" fn ucm_set_external_event(events: c_int) {
    EXTERNAL.fetch_or(events, Ordering::Relaxed);
}

#[no_mangle]
pub extern "C" fn ucm_unset_external_event(events: c_int) {
    EXTERNAL.fetch_and(!events, Ordering::Relaxed);
}

#[no_mangle]
pub extern "C" fn ucm_test_events(_events: c_int) -> ucs_status_t {
    UCS_OK
}

#[no_mangle]
pub extern "C" fn ucm_test_external_events(_events: c_int) -> ucs_status_t {
    UCS_OK
}

#[no_mangle]
pub extern "C" fn ucm_vm_munmap(_addr: *mut c_void, _length: usize) {}

#[no_mangle]
pub extern "C" fn ucm_vm_mmap(_addr: *mut c_void, _length: usize) {}

#[no_mangle]
pub extern "C" fn ucm_set_event_handler(
    _events: c_int,
    _priority: c_int,
    _cb: *mut c_void,
    _arg: *mut c_void,
) -> ucs_status_t {
    UCS_ERR_UNSUPPORTED
}

#[no_mangle]
pub extern "C" fn ucm_unset_event_handler(_events: c_int, _cb: *mut c_void, _arg: *mut c_void) {}
