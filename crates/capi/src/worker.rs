//! Workers: the `ucp_worker_*` functions (create, destroy, progress, query, addresses,
//! wakeup, fence and flush). The worker itself lives in [`crate::core`].

use crate::address::{address_from_c, address_to_c, ADDR_HDR};
use crate::context::Ctx;
use crate::core::{self, CbKind, Op, Outcome, RecvOut, ReqPool, Wk, WkParts, DT_BYTES};
use crate::dispatch::{self, run};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::text;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use ucs::{Result, Status};

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_create(
    context: *mut Handle<Ctx>,
    params: *const ucp_worker_params_t,
    worker_p: *mut *mut Handle<Wk>,
) -> ucs_status_t {
    guard::status("ucp_worker_create", || {
        // SAFETY: the caller's context handle.
        let ctx = unsafe { Handle::get(context)? };
        if params.is_null() || worker_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params; fields are read by their mask bits.
        let (mode, user_data, event_fd, name) = unsafe {
            let p = &*params;
            let m = p.field_mask;
            (
                if m & UCP_WORKER_PARAM_FIELD_THREAD_MODE != 0 {
                    p.thread_mode
                } else {
                    UCS_THREAD_MODE_SINGLE
                },
                if m & UCP_WORKER_PARAM_FIELD_USER_DATA != 0 {
                    p.user_data
                } else {
                    std::ptr::null_mut()
                },
                if m & UCP_WORKER_PARAM_FIELD_EVENT_FD != 0 {
                    Some(p.event_fd)
                } else {
                    None
                },
                if m & UCP_WORKER_PARAM_FIELD_NAME != 0 {
                    p.name
                } else {
                    std::ptr::null()
                },
            )
        };
        let (tm, rmode) = match mode {
            UCS_THREAD_MODE_MULTI => (UCS_THREAD_MODE_MULTI, ucp::ThreadMode::Multi),
            UCS_THREAD_MODE_SERIALIZED => (UCS_THREAD_MODE_SERIALIZED, ucp::ThreadMode::Serialized),
            UCS_THREAD_MODE_SINGLE => (UCS_THREAD_MODE_SINGLE, ucp::ThreadMode::Single),
            _ => return Err(Status::InvalidParam),
        };
        let w = ucp::Worker::new(&ctx.ctx, rmode)?;
        let waker = w.waker()?;
        let efd = w.event_fd().as_fd().as_raw_fd();
        let mut wname = [0 as c_char; UCP_ENTITY_NAME_MAX];
        text::default_name("worker", &mut wname);
        text::copy_name(&mut wname, name);
        let (h, wk) = Wk::new(WkParts {
            w,
            pool: ReqPool::new(ctx.req_size, ctx.req_init, ctx.req_cleanup),
            waker,
            efd,
            external_efd: event_fd.is_some(),
            features: ctx.features,
            thread_mode: tm,
            name: wname,
            progress_thread: ctx.ctx.config().progress_thread,
        })
        .publish()?;
        if let Some(fd) = event_fd {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: user_data as u64,
            };
            // SAFETY: epoll_ctl on the application's epoll descriptor with our
            // descriptor; failure is reported, not fatal to memory safety.
            let rc = unsafe { libc::epoll_ctl(fd, libc::EPOLL_CTL_ADD, efd, &mut ev) };
            if rc != 0 {
                // SAFETY: the handle we just made, not yet given out.
                drop(unsafe { Handle::destroy(h) });
                return Err(Status::InvalidParam);
            }
        }
        if ctx.ctx.config().progress_thread {
            if let Err(e) = wk.start_progress_thread() {
                // SAFETY: the handle we just made, not yet given out.
                drop(unsafe { Handle::destroy(h) });
                return Err(e);
            }
        }
        tracing::debug!("rucx: worker {} created", text::name_str(&wk.name));
        // SAFETY: the caller's output pointer.
        unsafe { *worker_p = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_destroy(worker: *mut Handle<Wk>) {
    guard::void("ucp_worker_destroy", || {
        // The progress thread reaches the worker through its handle: it ends first.
        // SAFETY: the caller's worker handle.
        unsafe { core::get(worker)? }.stop_progress_thread();
        // SAFETY: the caller's worker handle, which it no longer uses.
        let wk = unsafe { Handle::destroy(worker)? };
        // Dropping the Rust worker cancels what is outstanding; the C requests still
        // outstanding read as canceled (no C callbacks run now).
        let mut side = wk.shut_down();
        for (_, ep) in side.eps.drain() {
            // SAFETY: endpoint handles of this worker; they die with it.
            drop(unsafe { Handle::destroy(ep) });
        }
        for (_, l) in side.listeners.drain() {
            // SAFETY: listener handles of this worker; they die with it.
            drop(unsafe { Handle::destroy(l.handle) });
        }
        for (_, c) in side.conn_reqs.drain() {
            // SAFETY: connection request handles of this worker; they die with it.
            drop(unsafe { Handle::destroy(c) });
        }
        drop(side);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_progress(worker: *mut Handle<Wk>) -> c_uint {
    guard::value("ucp_worker_progress", 0, || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if let Some(r) = wk.progress_plain() {
            let (mut n, ready) = r?;
            // The callbacks of what completed in this turn, with the worker left (no
            // second look at the worker for its ready list).
            if !ready.is_null() {
                n += dispatch::run_chain(ready);
            }
            // What the callbacks completed or queued in turn. Not `events_due`: its
            // thread-local read is hoisted out of the branch.
            if !wk.has_ready() && !wk.evq.hint.load(Ordering::Acquire) {
                return Ok(n as c_uint);
            }
            return Ok((n + dispatch::dispatch_after(wk)) as c_uint);
        }
        progress_general(wk)
    })
}

/// `ucp_worker_progress` for what [`Wk::progress_plain`] leaves: thread mode multi, and
/// handlers or callbacks due before the transports are polled.
#[inline(never)]
fn progress_general(wk: &Wk) -> Result<c_uint> {
    // Active messages already taken from the transports are handed out first, one per
    // call (see `dispatch_events`); the transports are polled again once they are all
    // out, which keeps the senders' flow control in force.
    if dispatch::events_due(wk) {
        dispatch::dispatch(wk);
        return Ok(1);
    }
    // A callback or handler that ran counts as progress: the application may be waiting
    // for what it does, and must look before it sleeps.
    let (n, ready) = wk.progress()?;
    let n = n + dispatch::run_chain(ready) + dispatch::dispatch(wk);
    Ok(n as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_query(
    worker: *mut Handle<Wk>,
    attr: *mut ucp_worker_attr_t,
) -> ucs_status_t {
    guard::status("ucp_worker_query", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct; fields written by mask.
        let mask = unsafe { (*attr).field_mask };
        if mask & UCP_WORKER_ATTR_FIELD_ADDRESS != 0 {
            let bytes = wk.with(|w, _| w.address())?;
            let (p, n) = address_to_c(&bytes)?;
            // SAFETY: as above.
            unsafe {
                (*attr).address = p;
                (*attr).address_length = n;
            }
        }
        // SAFETY: as above.
        unsafe {
            if mask & UCP_WORKER_ATTR_FIELD_THREAD_MODE != 0 {
                (*attr).thread_mode = wk.thread_mode;
            }
            if mask & UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS != 0 {
                (*attr).address_flags = 0;
            }
            if mask & UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER != 0 {
                (*attr).max_am_header = core::MAX_AM_HEADER;
            }
            if mask & UCP_WORKER_ATTR_FIELD_NAME != 0 {
                (*attr).name = wk.name;
            }
            if mask & UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING != 0 {
                (*attr).max_debug_string = 64;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_print_info(worker: *mut Handle<Wk>, stream: *mut libc::FILE) {
    guard::void("ucp_worker_print_info", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        let (uuid, n) = wk.with(|w, _| (w.uuid(), w.address().len()))?;
        let mode = match wk.thread_mode {
            UCS_THREAD_MODE_MULTI => "multi",
            UCS_THREAD_MODE_SERIALIZED => "serialized",
            _ => "single",
        };
        let info = format!(
            "#\n# UCP worker '{}' (rucx)\n#\n#   uuid: {uuid:#018x}\n#   address: {} bytes\n#   thread mode: {mode}\n#\n",
            text::name_str(&wk.name),
            n + ADDR_HDR
        );
        text::print_to(stream, &info);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_address(
    worker: *mut Handle<Wk>,
    address_p: *mut *mut c_void,
    address_length_p: *mut usize,
) -> ucs_status_t {
    guard::status("ucp_worker_get_address", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if address_p.is_null() || address_length_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let bytes = wk.with(|w, _| w.address())?;
        let (p, n) = address_to_c(&bytes)?;
        // SAFETY: the caller's output pointers.
        unsafe {
            *address_p = p;
            *address_length_p = n;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_release_address(
    _worker: *mut Handle<Wk>,
    address: *mut c_void,
) {
    guard::void("ucp_worker_release_address", || {
        // SAFETY: an address of ours (the magic is checked first).
        unsafe { address_from_c(address)? };
        // SAFETY: allocated with malloc by address_to_c.
        unsafe { libc::free(address) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_address_query(
    address: *mut c_void,
    attr: *mut ucp_worker_address_attr_t,
) -> ucs_status_t {
    guard::status("ucp_worker_address_query", || {
        // SAFETY: an address of ours.
        let bytes = unsafe { address_from_c(address)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        let a = ucp::address::WorkerAddress::decode(bytes)?;
        // SAFETY: the caller's attribute struct.
        unsafe {
            if (*attr).field_mask & UCP_WORKER_ADDRESS_ATTR_FIELD_UID != 0 {
                (*attr).worker_uid = a.uuid;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_efd(
    worker: *mut Handle<Wk>,
    fd: *mut c_int,
) -> ucs_status_t {
    guard::status("ucp_worker_get_efd", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if fd.is_null() || wk.features & UCP_FEATURE_WAKEUP == 0 {
            return Err(Status::InvalidParam);
        }
        if wk.external_efd {
            // Events are reported on the application's descriptor instead.
            return Err(Status::Unsupported);
        }
        // SAFETY: the caller's output pointer.
        unsafe { *fd = wk.efd };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_arm(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_arm", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        // Collect what the worker completed; anything due is an event not handled yet.
        wk.with(|_, _| ())?;
        if wk.has_ready() || wk.evq.hint.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Status::Busy);
        }
        // A pending signal counts as an event: report it (and consume it) as busy.
        if wk.waker.drain() {
            return Err(Status::Busy);
        }
        wk.with(|w, _| w.arm())?
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_wait", || {
        // SAFETY: forwarded.
        let s = unsafe { ucp_worker_arm(worker) };
        if s == Status::Busy.code() {
            return Ok(());
        }
        guard::result_from_c(s)?;
        // SAFETY: the caller's worker handle (checked by arm).
        let wk = unsafe { core::get(worker)? };
        // Sleep outside the worker lock so other threads can use the worker meanwhile.
        // SAFETY: the worker's descriptor stays open while the worker lives.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(wk.efd) };
        ucs::sys::poll::readable(fd, -1)?;
        wk.waker.drain();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait_mem(_worker: *mut Handle<Wk>, _address: *mut c_void) {
    // A hint that the caller polls memory: nothing to wait for here.
    std::hint::spin_loop();
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_signal(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_signal", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        wk.waker.signal()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_fence(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_fence", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        run(wk, |w, _| w.fence())?
    })
}

unsafe fn worker_flush(worker: *mut Handle<Wk>, op: Op) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's worker handle.
    let wk = unsafe { core::get(worker)? };
    run(wk, |w, side| {
        wk.start(w, side, &op, 0, RecvOut::None, |w, cb| {
            w.flush_nb(cb).map(Outcome::of)
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nb(
    worker: *mut Handle<Wk>,
    _flags: c_uint,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_worker_flush_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { worker_flush(worker, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nbx(
    worker: *mut Handle<Wk>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_worker_flush_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        // SAFETY: forwarded contract.
        unsafe { worker_flush(worker, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush(worker: *mut Handle<Wk>) -> ucs_status_t {
    guard::status("ucp_worker_flush", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        let p = unsafe { worker_flush(worker, op)? };
        dispatch::wait_ptr(wk, p)
    })
}
