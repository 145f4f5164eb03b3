//! What becomes of C request blocks when their worker is destroyed: a request the
//! application released before it completed is reclaimed with the worker (its
//! `request_cleanup` runs, as on every block of the pool), and one it still holds stays
//! readable (canceled) until `ucp_request_free`. Called through the exported C functions,
//! declared as `ucp.h` declares them.

use rucx_capi::ffi::*;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

extern "C" {
    fn ucp_init_version(
        major: c_uint,
        minor: c_uint,
        params: *const ucp_params_t,
        config: *const c_void,
        context_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_cleanup(context: *mut c_void);
    fn ucp_worker_create(
        context: *mut c_void,
        params: *const ucp_worker_params_t,
        worker_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_worker_destroy(worker: *mut c_void);
    fn ucp_tag_recv_nbx(
        worker: *mut c_void,
        buffer: *mut c_void,
        count: usize,
        tag: u64,
        mask: u64,
        param: *const ucp_request_param_t,
    ) -> *mut c_void;
    fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t;
    fn ucp_request_free(request: *mut c_void);
}

/// Blocks `request_cleanup` was called on.
static CLEANED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn cleanup(_request: *mut c_void) {
    CLEANED.fetch_add(1, Ordering::SeqCst);
}

/// A context with TAG, 16 bytes of application request area and the counting cleanup,
/// and a worker of it.
fn context_and_worker() -> (*mut c_void, *mut c_void) {
    // SAFETY: plain C structs for which all zeroes is valid; the fields set are the
    // ones the masks name.
    let mut p: ucp_params_t = unsafe { std::mem::zeroed() };
    p.field_mask =
        UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE | UCP_PARAM_FIELD_REQUEST_CLEANUP;
    p.features = UCP_FEATURE_TAG;
    p.request_size = 16;
    p.request_cleanup = Some(cleanup);
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid parameters and an out pointer.
    let st = unsafe { ucp_init_version(1, 13, &p, std::ptr::null(), &mut ctx) };
    assert_eq!(st, UCS_OK);
    // SAFETY: as above.
    let wp: ucp_worker_params_t = unsafe { std::mem::zeroed() };
    let mut w = std::ptr::null_mut();
    // SAFETY: a live context, valid parameters and an out pointer.
    assert_eq!(unsafe { ucp_worker_create(ctx, &wp, &mut w) }, UCS_OK);
    (ctx, w)
}

/// A receive nobody will match: a request pointer.
fn pending_recv(w: *mut c_void, buf: &mut [u8; 8], tag: u64) -> *mut c_void {
    // SAFETY: zeroes are a valid parameter struct (no field selected).
    let param: ucp_request_param_t = unsafe { std::mem::zeroed() };
    // SAFETY: a live worker, a buffer of 8 bytes that outlives the request.
    let r = unsafe { ucp_tag_recv_nbx(w, buf.as_mut_ptr().cast(), 8, tag, u64::MAX, &param) };
    assert!(
        !r.is_null() && (r as usize) < (usize::MAX - 1000),
        "a request: {r:?}"
    );
    // SAFETY: a live request of ours.
    assert_eq!(unsafe { ucp_request_check_status(r) }, UCS_INPROGRESS);
    r
}

/// Regression test (found by the capi_sequence fuzz target under LeakSanitizer): a request
/// released with `ucp_request_free` before it completed was marked complete when its
/// worker was destroyed but returned to no pool, so its block was never freed.
#[test]
fn released_and_held_requests_when_the_worker_is_destroyed() {
    std::env::set_var("UCX_TLS", "self");
    let (ctx, w) = context_and_worker();
    let (mut b1, mut b2) = ([0u8; 8], [0u8; 8]);
    let released = pending_recv(w, &mut b1, 1);
    let held = pending_recv(w, &mut b2, 2);
    // SAFETY: a live request, released once and not used again.
    unsafe { ucp_request_free(released) };
    assert_eq!(CLEANED.load(Ordering::SeqCst), 0);
    // SAFETY: a live worker, not used again.
    unsafe { ucp_worker_destroy(w) };
    // The released block went back to the pool and was freed with it.
    assert_eq!(CLEANED.load(Ordering::SeqCst), 1);
    // The held one reads as canceled, and freeing it is still allowed.
    // SAFETY: a request the application still holds (rucx keeps it past its worker).
    let st = unsafe { ucp_request_check_status(held) };
    assert_eq!(st, ucs::Status::Canceled as ucs_status_t);
    // SAFETY: as above; freed once.
    unsafe { ucp_request_free(held) };
    // SAFETY: a live context whose worker is gone.
    unsafe { ucp_cleanup(ctx) };
    assert_eq!(b1, [0; 8]);
    assert_eq!(b2, [0; 8]);
}
