//! The exported interface and endpoint functions (open, close, query, endpoints, flush,
//! fence, active-message handlers) and the progress callback the worker holds; the
//! objects are in `obj`, the operations table in `ops`.

use super::ffi::*;
use super::md::{self, Flavor};
use super::obj::*;
use super::ops::{iface_event_arm, iface_event_fd_get, purge, stop_progress};
use crate::ffi::ucs_status_t;
use crate::guard;
use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};
use ucs::{Result, Status};
use uct::Caps;

// ----- exports ----------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn uct_iface_close(iface: uct_iface_h) {
    guard::void("uct_iface_close", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let _ = stop_progress(ifc);
        let waiters = ifc
            .inner
            .try_borrow_mut()
            .map(|mut g| std::mem::take(&mut g.waiters))
            .unwrap_or_default();
        for (_, comp) in waiters {
            // SAFETY: a completion the program gave a flush of this interface.
            unsafe { complete(comp, Status::Canceled) };
        }
        // SAFETY: made by Box::into_raw in uct_iface_open; the magic is cleared.
        unsafe {
            let b = iface as *mut IfaceObj;
            (*b).magic = 0;
            drop(Box::from_raw(b));
        }
        Ok(())
    })
}

/// UCT capability flags of an interface.
pub(super) fn cap_flags(flavor: Flavor, caps: Caps) -> u64 {
    let pairs = [
        (Caps::AM_SHORT, UCT_IFACE_FLAG_AM_SHORT),
        (Caps::AM_BCOPY, UCT_IFACE_FLAG_AM_BCOPY),
        (Caps::AM_ZCOPY, UCT_IFACE_FLAG_AM_ZCOPY),
        (Caps::PUT_SHORT, UCT_IFACE_FLAG_PUT_SHORT),
        (Caps::PUT_BCOPY, UCT_IFACE_FLAG_PUT_BCOPY),
        (Caps::PUT_ZCOPY, UCT_IFACE_FLAG_PUT_ZCOPY),
        (Caps::GET_BCOPY, UCT_IFACE_FLAG_GET_BCOPY),
        (Caps::GET_ZCOPY, UCT_IFACE_FLAG_GET_ZCOPY),
        (Caps::CONNECT_TO_IFACE, UCT_IFACE_FLAG_CONNECT_TO_IFACE),
    ];
    let mut f = UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC;
    for (c, u) in pairs {
        if caps.contains(c) {
            f |= u;
        }
    }
    if caps.intersects(Caps::ATOMIC32 | Caps::ATOMIC64) {
        f |= UCT_IFACE_FLAG_ATOMIC_CPU;
    }
    if flavor == Flavor::Cma {
        // UCX's cma: one-copy put and get only.
        f &= UCT_IFACE_FLAG_PUT_ZCOPY
            | UCT_IFACE_FLAG_GET_ZCOPY
            | UCT_IFACE_FLAG_CONNECT_TO_IFACE
            | UCT_IFACE_FLAG_PENDING;
    }
    f
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_query(
    iface: uct_iface_h,
    attr: *mut uct_iface_attr_t,
) -> ucs_status_t {
    guard::status("uct_iface_query", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        let g = ifc.inner.try_borrow().map_err(|_| Status::Busy)?;
        let r = g.tl.attr();
        // SAFETY: uct_iface_attr_t has no field mask in UCX 1.13: the caller passes the
        // whole struct; all-zero is a valid value of every field.
        let a = unsafe {
            std::ptr::write_bytes(attr, 0, 1);
            &mut *attr
        };
        let flags = cap_flags(ifc.flavor, r.caps);
        let has = |f: u64| flags & f != 0;
        let tcp = ifc.flavor == Flavor::Tcp;
        a.cap.flags = flags;
        if has(UCT_IFACE_FLAG_PUT_SHORT) {
            a.cap.put.max_short = r.max_put_short;
        }
        if has(UCT_IFACE_FLAG_PUT_BCOPY) {
            a.cap.put.max_bcopy = r.max_put_bcopy;
        }
        if has(UCT_IFACE_FLAG_PUT_ZCOPY) {
            a.cap.put.max_zcopy = r.max_put_zcopy;
            a.cap.put.max_iov = if tcp { TCP_PUT_MAX_IOV } else { MAX_IOV };
        }
        a.cap.put.opt_zcopy_align = 1;
        a.cap.put.align_mtu = 1;
        if has(UCT_IFACE_FLAG_GET_BCOPY) {
            a.cap.get.max_bcopy = r.max_get_bcopy;
        }
        if has(UCT_IFACE_FLAG_GET_ZCOPY) {
            a.cap.get.max_zcopy = r.max_get_zcopy;
            a.cap.get.max_iov = MAX_IOV;
        }
        a.cap.get.opt_zcopy_align = 1;
        a.cap.get.align_mtu = 1;
        if has(UCT_IFACE_FLAG_AM_SHORT) {
            // UCT counts the 8-byte header in max_short.
            a.cap.am.max_short = r.max_am_short + 8;
        }
        if has(UCT_IFACE_FLAG_AM_BCOPY) {
            a.cap.am.max_bcopy = r.max_am_bcopy;
        }
        if has(UCT_IFACE_FLAG_AM_ZCOPY) {
            a.cap.am.max_zcopy = r.max_am_zcopy;
            a.cap.am.max_hdr = r.max_am_hdr;
            a.cap.am.max_iov = MAX_IOV;
        }
        a.cap.am.opt_zcopy_align = 1;
        a.cap.am.align_mtu = 1;
        if has(UCT_IFACE_FLAG_ATOMIC_CPU) {
            let ops = (1 << UCT_ATOMIC_OP_ADD)
                | (1 << UCT_ATOMIC_OP_AND)
                | (1 << UCT_ATOMIC_OP_OR)
                | (1 << UCT_ATOMIC_OP_XOR);
            let fops = ops | (1 << UCT_ATOMIC_OP_SWAP) | (1 << UCT_ATOMIC_OP_CSWAP);
            if r.caps.contains(Caps::ATOMIC32) {
                a.cap.atomic32.op_flags = ops;
                a.cap.atomic32.fop_flags = fops;
            }
            if r.caps.contains(Caps::ATOMIC64) {
                a.cap.atomic64.op_flags = ops;
                a.cap.atomic64.fop_flags = fops;
            }
        }
        if r.caps.contains(Caps::EVENT_RECV) && g.tl.event_fd().is_some() {
            a.cap.event_flags = UCT_IFACE_FLAG_EVENT_RECV | UCT_IFACE_FLAG_EVENT_FD;
        }
        a.device_addr_len = r.device_addr_len;
        a.iface_addr_len = r.iface_addr_len;
        a.ep_addr_len = 0;
        a.overhead = r.cost.overhead;
        a.bandwidth = uct_ppn_bandwidth_t {
            dedicated: r.cost.bandwidth,
            shared: 0.0,
        };
        a.latency = ucs_linear_func_t {
            c: r.cost.latency,
            m: 0.0,
        };
        a.priority = 0;
        a.max_num_eps = usize::MAX;
        a.dev_num_paths = 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_get_device_address(
    iface: uct_iface_h,
    addr: *mut u8,
) -> ucs_status_t {
    guard::status("uct_iface_get_device_address", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let a = ifc
            .inner
            .try_borrow()
            .map_err(|_| Status::Busy)?
            .tl
            .device_address();
        copy_out(addr, &a)
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_get_address(iface: uct_iface_h, addr: *mut u8) -> ucs_status_t {
    guard::status("uct_iface_get_address", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let a = ifc
            .inner
            .try_borrow()
            .map_err(|_| Status::Busy)?
            .tl
            .address();
        copy_out(addr, &a)
    })
}

/// Writes an address into the caller's buffer (of the length `uct_iface_query` gave).
pub(super) fn copy_out(dst: *mut u8, src: &[u8]) -> Result<()> {
    if dst.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the caller's buffer holds the address length the interface reports, which is
    // the length of `src`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_is_reachable(
    iface: uct_iface_h,
    dev_addr: *const u8,
    iface_addr: *const u8,
) -> c_int {
    guard::value("uct_iface_is_reachable", 0, || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if dev_addr.is_null() || iface_addr.is_null() {
            return Ok(0);
        }
        let g = ifc.inner.try_borrow().map_err(|_| Status::Busy)?;
        let r = g.tl.attr();
        // SAFETY: addresses of the same transport, whose lengths the interface reports.
        let (d, a) = unsafe {
            (
                std::slice::from_raw_parts(dev_addr, r.device_addr_len),
                std::slice::from_raw_parts(iface_addr, r.iface_addr_len),
            )
        };
        Ok(c_int::from(g.tl.is_reachable(d, a)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_set_am_handler(
    iface: uct_iface_h,
    id: u8,
    cb: uct_am_callback_t,
    arg: *mut c_void,
    _flags: u32,
) -> ucs_status_t {
    guard::status("uct_iface_set_am_handler", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        let slot = ifc.am.get(usize::from(id)).ok_or(Status::InvalidParam)?;
        slot.set(AmSlot { cb, arg });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_event_fd_get(
    iface: uct_iface_h,
    fd_p: *mut c_int,
) -> ucs_status_t {
    // SAFETY: the operation itself.
    unsafe { iface_event_fd_get(iface, fd_p) }
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_event_arm(iface: uct_iface_h, events: c_uint) -> ucs_status_t {
    // SAFETY: the operation itself.
    unsafe { iface_event_arm(iface, events) }
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_mem_alloc(
    iface: uct_iface_h,
    length: usize,
    _flags: c_uint,
    _name: *const std::ffi::c_char,
    mem: *mut uct_allocated_memory_t,
) -> ucs_status_t {
    guard::status("uct_iface_mem_alloc", || {
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(iface) }?;
        if mem.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the domain the interface was opened with (alive while it is).
        let m = unsafe { md::md_obj(ifc.md) }?;
        let (memh, address, method) = md::alloc(m, length)?;
        // SAFETY: checked non-null.
        unsafe {
            *mem = uct_allocated_memory_t {
                address,
                length,
                method,
                mem_type: UCS_MEMORY_TYPE_HOST,
                md: ifc.md,
                memh,
            };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_iface_mem_free(mem: *const uct_allocated_memory_t) {
    guard::void("uct_iface_mem_free", || {
        if mem.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: a descriptor filled by uct_iface_mem_alloc.
        unsafe { md::free_mem((*mem).memh) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_create(
    params: *const uct_ep_params_head_t,
    ep_p: *mut uct_ep_h,
) -> ucs_status_t {
    guard::status("uct_ep_create", || {
        if params.is_null() || ep_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read up to iface_addr as field_mask allows.
        let p = unsafe { &*params };
        if p.field_mask & UCT_EP_PARAM_FIELD_IFACE == 0 {
            return Err(Status::InvalidParam);
        }
        // SAFETY: per the API.
        let ifc = unsafe { iface_obj(p.iface) }?;
        let want = UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
        if p.field_mask & want != want || p.iface_addr.is_null() || p.dev_addr.is_null() {
            // Connect-to-endpoint is not offered (ep_addr_len is 0).
            return Err(Status::Unsupported);
        }
        let id = with_tl(ifc, |tl| {
            let r = tl.attr();
            // SAFETY: addresses of this transport, of the lengths it reports.
            let (d, a) = unsafe {
                (
                    std::slice::from_raw_parts(p.dev_addr, r.device_addr_len),
                    std::slice::from_raw_parts(p.iface_addr, r.iface_addr_len),
                )
            };
            if !tl.is_reachable(d, a) {
                return Err(Status::Unreachable);
            }
            tl.ep_create(a)
        })?;
        let e = Box::new(EpObj {
            c: UctEpC { iface: p.iface },
            magic: EP_MAGIC,
            id,
            pending: Cell::new(0),
        });
        // SAFETY: checked non-null.
        unsafe { *ep_p = Box::into_raw(e) as uct_ep_h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_destroy(ep: uct_ep_h) {
    guard::void("uct_ep_destroy", || {
        // SAFETY: per the API.
        let (ifc, e) = unsafe { ep_obj(ep) }?;
        let _ = purge(ifc, e);
        let waiters = ifc
            .inner
            .try_borrow_mut()
            .map(|mut g| {
                let mut mine = Vec::new();
                g.waiters.retain(|&(w, comp)| {
                    let m = w == Some(e.id);
                    if m {
                        mine.push(comp);
                    }
                    !m
                });
                let _ = g.tl.ep_destroy(e.id);
                mine
            })
            .unwrap_or_default();
        for comp in waiters {
            // SAFETY: a completion the program gave a flush of this endpoint.
            unsafe { complete(comp, Status::Canceled) };
        }
        // SAFETY: made by Box::into_raw in uct_ep_create; the magic is cleared.
        unsafe {
            let b = ep as *mut EpObj;
            (*b).magic = 0;
            drop(Box::from_raw(b));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_get_address(ep: uct_ep_h, _addr: *mut u8) -> ucs_status_t {
    guard::status("uct_ep_get_address", || {
        // SAFETY: per the API.
        unsafe { ep_obj(ep) }?;
        // Endpoints connect to interfaces; there is no endpoint address.
        Err(Status::Unsupported)
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_ep_connect_to_ep(
    ep: uct_ep_h,
    _dev: *const u8,
    _ep_addr: *const u8,
) -> ucs_status_t {
    guard::status("uct_ep_connect_to_ep", || {
        // SAFETY: per the API.
        unsafe { ep_obj(ep) }?;
        Err(Status::Unsupported)
    })
}
