//! The operations table (`uct_iface_ops_t`) that UCX's inline calls dispatch through, and
//! `uct_iface_open`, which installs it in every interface. The operations themselves are
//! in `ops`, the exported interface and endpoint functions in `iface`.

use super::cstr;
use super::ffi::*;
use super::iface::*;
use super::md::{self, Flavor, MdObj};
use super::obj::*;
use super::ops::*;
use super::ops::{iface_event_arm, iface_event_fd_get};
use super::worker::worker_obj;
use crate::ffi::{ucs_status_ptr_t, ucs_status_t};
use crate::guard;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use ucs::Status;

#[no_mangle]
pub unsafe extern "C" fn uct_iface_open(
    md: *mut c_void,
    worker: *mut c_void,
    params: *const uct_iface_params_head_t,
    config: *const c_void,
    iface_p: *mut uct_iface_h,
) -> ucs_status_t {
    guard::status("uct_iface_open", || {
        // SAFETY: per the API.
        let m: &MdObj = unsafe { md::md_obj(md) }?;
        // SAFETY: per the API.
        unsafe { worker_obj(worker) }?;
        if params.is_null() || iface_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params; field_mask and open_mode come first, the device
        // names are read only in device mode.
        let p = unsafe { &*params };
        if p.field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE == 0
            || p.open_mode & UCT_IFACE_OPEN_MODE_DEVICE == 0
        {
            return Err(Status::Unsupported);
        }
        // SAFETY: C strings per the API.
        let (tl, dev) = unsafe { (cstr(p.tl_name), cstr(p.dev_name)) };
        let (tl, dev) = (
            tl.ok_or(Status::InvalidParam)?,
            dev.ok_or(Status::InvalidParam)?,
        );
        if tl != m.comp.name || !m.comp.devices().iter().any(|d| d == dev) {
            return Err(Status::NoDevice);
        }
        // SAFETY: a configuration of rucx or null.
        let cfg = unsafe { md::iface_config(config) }?;
        let transport = m.comp.flavor.transport();
        let rust_dev = if m.comp.flavor == Flavor::Tcp {
            dev
        } else {
            transport.device()
        };
        let tl = uct::Iface::open_device(transport, rust_dev, &cfg)?;
        let empty = AmSlot {
            cb: None,
            arg: std::ptr::null_mut(),
        };
        let obj = Box::new(IfaceObj {
            c: UctIfaceC { ops: OPS },
            magic: IFACE_MAGIC,
            flavor: m.comp.flavor,
            md,
            worker,
            progress_id: Cell::new(None),
            progress_flags: Cell::new(0),
            am: std::array::from_fn(|_| Cell::new(empty)),
            dispatching: Cell::new(std::ptr::null()),
            inner: RefCell::new(Inner {
                tl,
                stage: Vec::new(),
                msgs: Vec::new(),
                pending: VecDeque::new(),
                waiters: Vec::new(),
                bounce: Vec::new(),
            }),
        });
        // SAFETY: checked non-null.
        unsafe { *iface_p = Box::into_raw(obj) as uct_iface_h };
        Ok(())
    })
}

unsafe extern "C" fn ep_create_op(
    params: *const uct_ep_params_head_t,
    ep_p: *mut uct_ep_h,
) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_create(params, ep_p) }
}

unsafe extern "C" fn ep_destroy_op(ep: uct_ep_h) {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_destroy(ep) }
}

unsafe extern "C" fn ep_get_address_op(ep: uct_ep_h, addr: *mut u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_get_address(ep, addr) }
}

unsafe extern "C" fn ep_connect_to_ep_op(ep: uct_ep_h, d: *const u8, a: *const u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_ep_connect_to_ep(ep, d, a) }
}

unsafe extern "C" fn iface_close_op(iface: uct_iface_h) {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_close(iface) }
}

unsafe extern "C" fn iface_query_op(
    iface: uct_iface_h,
    attr: *mut uct_iface_attr_t,
) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_query(iface, attr) }
}

unsafe extern "C" fn iface_get_device_address_op(iface: uct_iface_h, a: *mut u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_get_device_address(iface, a) }
}

unsafe extern "C" fn iface_get_address_op(iface: uct_iface_h, a: *mut u8) -> ucs_status_t {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_get_address(iface, a) }
}

unsafe extern "C" fn iface_is_reachable_op(
    iface: uct_iface_h,
    d: *const u8,
    a: *const u8,
) -> c_int {
    // SAFETY: the same function as the export.
    unsafe { uct_iface_is_reachable(iface, d, a) }
}

// ----- unsupported operations: UCS_ERR_UNSUPPORTED (docs/c-abi.md lists them) ------------

const UNSUPPORTED: ucs_status_t = Status::Unsupported.code();

unsafe extern "C" fn no_get_short(
    _: uct_ep_h,
    _: *mut c_void,
    _: c_uint,
    _: u64,
    _: uct_rkey_t,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_eager_short(
    _: uct_ep_h,
    _: u64,
    _: *const c_void,
    _: usize,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_eager_bcopy(
    _: uct_ep_h,
    _: u64,
    _: u64,
    _: uct_pack_callback_t,
    _: *mut c_void,
    _: c_uint,
) -> isize {
    isize::from(UNSUPPORTED)
}
unsafe extern "C" fn no_tag_eager_zcopy(
    _: uct_ep_h,
    _: u64,
    _: u64,
    _: *const uct_iov_t,
    _: usize,
    _: c_uint,
    _: *mut uct_completion_t,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_rndv_zcopy(
    _: uct_ep_h,
    _: u64,
    _: *const c_void,
    _: c_uint,
    _: *const uct_iov_t,
    _: usize,
    _: c_uint,
    _: *mut uct_completion_t,
) -> ucs_status_ptr_t {
    guard::status_to_ptr(Status::Unsupported)
}
unsafe extern "C" fn no_tag_rndv_cancel(_: uct_ep_h, _: *mut c_void) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_rndv_request(
    _: uct_ep_h,
    _: u64,
    _: *const c_void,
    _: c_uint,
    _: c_uint,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_recv_zcopy(
    _: uct_iface_h,
    _: u64,
    _: u64,
    _: *const uct_iov_t,
    _: usize,
    _: *mut c_void,
) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_tag_recv_cancel(_: uct_iface_h, _: *mut c_void, _: c_int) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_ep_check(_: uct_ep_h, _: c_uint, _: *mut uct_completion_t) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_ep_connect(_: uct_ep_h, _: *const c_void) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_ep_disconnect(_: uct_ep_h, _: c_uint) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_cm_conn_notify(_: uct_ep_h) -> ucs_status_t {
    UNSUPPORTED
}
unsafe extern "C" fn no_accept(_: uct_iface_h, _: *mut c_void) -> ucs_status_t {
    UNSUPPORTED
}

/// The operations table of every rucx interface (the transport is chosen inside).
pub(super) static OPS: uct_iface_ops_t = uct_iface_ops_t {
    ep_put_short,
    ep_put_bcopy,
    ep_put_zcopy,
    ep_get_short: no_get_short,
    ep_get_bcopy,
    ep_get_zcopy,
    ep_am_short,
    ep_am_short_iov,
    ep_am_bcopy,
    ep_am_zcopy,
    ep_atomic_cswap64,
    ep_atomic_cswap32,
    ep_atomic32_post,
    ep_atomic64_post,
    ep_atomic32_fetch,
    ep_atomic64_fetch,
    ep_tag_eager_short: no_tag_eager_short,
    ep_tag_eager_bcopy: no_tag_eager_bcopy,
    ep_tag_eager_zcopy: no_tag_eager_zcopy,
    ep_tag_rndv_zcopy: no_tag_rndv_zcopy,
    ep_tag_rndv_cancel: no_tag_rndv_cancel,
    ep_tag_rndv_request: no_tag_rndv_request,
    iface_tag_recv_zcopy: no_tag_recv_zcopy,
    iface_tag_recv_cancel: no_tag_recv_cancel,
    ep_pending_add,
    ep_pending_purge,
    ep_flush,
    ep_fence,
    ep_check: no_ep_check,
    ep_create: ep_create_op,
    ep_connect: no_ep_connect,
    ep_disconnect: no_ep_disconnect,
    cm_ep_conn_notify: no_cm_conn_notify,
    ep_destroy: ep_destroy_op,
    ep_get_address: ep_get_address_op,
    ep_connect_to_ep: ep_connect_to_ep_op,
    iface_accept: no_accept,
    iface_reject: no_accept,
    iface_flush,
    iface_fence,
    iface_progress_enable,
    iface_progress_disable,
    iface_progress,
    iface_event_fd_get,
    iface_event_arm,
    iface_close: iface_close_op,
    iface_query: iface_query_op,
    iface_get_device_address: iface_get_device_address_op,
    iface_get_address: iface_get_address_op,
    iface_is_reachable: iface_is_reachable_op,
};
