//! `uct_worker_h`: the progress callback array that UCX's inline `uct_worker_progress`
//! walks.
//!
//! The program's inline code calls `fast_elems[0].cb(arg)`, `fast_elems[1].cb(arg)`, ...
//! until an element whose `cb` is null. rucx keeps the registered callbacks (interfaces
//! with progress enabled, and `uct_worker_progress_register_safe` callbacks) in a list and
//! rewrites the array after every change: up to 7 callbacks sit in the array directly; with
//! more, the 7th slot calls a dispatcher that runs the rest of the list. The 8th element
//! is always the terminator.

use super::ffi::*;
use crate::guard;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::ffi::{c_int, c_uint, c_void};
use ucs::{Result, Status};

const WORKER_MAGIC: u64 = 0x7275_6378_776b_0005;
/// `UCS_CALLBACKQ_ID_NULL`.
const ID_NULL: c_int = -1;

type Callback = unsafe extern "C" fn(*mut c_void) -> c_uint;

/// A `uct_worker_h`. Starts with UCX's `uct_worker_t` (a `ucs_callbackq_t`).
#[repr(C)]
pub(crate) struct WorkerObj {
    /// Read by the program's inline `uct_worker_progress`; written only by `rebuild`.
    q: UnsafeCell<ucs_callbackq_t>,
    magic: u64,
    cbs: RefCell<Vec<(Callback, *mut c_void, c_int)>>,
    next_id: Cell<c_int>,
}

const _: () = assert!(std::mem::offset_of!(WorkerObj, q) == 0);

impl WorkerObj {
    /// Adds a callback; returns its id.
    pub(crate) fn add(&self, cb: Callback, arg: *mut c_void) -> Result<c_int> {
        let id = self.next_id.get();
        self.next_id
            .set(id.checked_add(1).ok_or(Status::ExceedsLimit)?);
        self.cbs
            .try_borrow_mut()
            .map_err(|_| Status::Busy)?
            .push((cb, arg, id));
        self.rebuild();
        Ok(id)
    }

    /// Removes the callback `id` (unknown ids are ignored).
    pub(crate) fn remove(&self, id: c_int) {
        if let Ok(mut v) = self.cbs.try_borrow_mut() {
            v.retain(|e| e.2 != id);
        }
        self.rebuild();
    }

    /// Rewrites the array the inline dispatcher reads from the list.
    fn rebuild(&self) {
        let Ok(v) = self.cbs.try_borrow() else {
            return;
        };
        let null = ucs_callbackq_elem_t {
            cb: None,
            arg: std::ptr::null_mut(),
            flags: 0,
            id: ID_NULL,
        };
        let mut elems = [null; UCS_CALLBACKQ_FAST_COUNT + 1];
        let direct = if v.len() > UCS_CALLBACKQ_FAST_COUNT {
            UCS_CALLBACKQ_FAST_COUNT - 1
        } else {
            v.len()
        };
        for (e, &(cb, arg, id)) in elems.iter_mut().zip(v.iter().take(direct)) {
            *e = ucs_callbackq_elem_t {
                cb: Some(cb),
                arg,
                flags: UCS_CALLBACKQ_FLAG_FAST,
                id,
            };
        }
        if direct < v.len() {
            elems[direct] = ucs_callbackq_elem_t {
                cb: Some(dispatch_rest),
                arg: self as *const WorkerObj as *mut c_void,
                flags: 0,
                id: ID_NULL,
            };
        }
        // SAFETY: the array lives in this worker; no Rust reference to it exists (it is only
        // read by the program's inline code, on this thread, between our calls).
        unsafe { (*self.q.get()).fast_elems = elems };
    }
}

/// Runs the callbacks past the ones the array holds directly.
unsafe extern "C" fn dispatch_rest(arg: *mut c_void) -> c_uint {
    guard::value("uct_worker_progress", 0, || {
        // SAFETY: the array holds this function only with its own worker as the argument.
        let w = unsafe { &*(arg as *const WorkerObj) };
        let mut n: c_uint = 0;
        let mut i = UCS_CALLBACKQ_FAST_COUNT - 1;
        loop {
            // Copy the entry out: a callback may register or remove callbacks.
            let e = w.cbs.try_borrow().ok().and_then(|v| v.get(i).copied());
            let Some((cb, a, _)) = e else { break };
            // SAFETY: a callback registered with its argument, per the API.
            n = n.wrapping_add(unsafe { cb(a) });
            i += 1;
        }
        Ok(n)
    })
}

/// The worker behind a `uct_worker_h`.
///
/// # Safety
/// `p` is null or a worker of rucx (checked by its magic).
pub(crate) unsafe fn worker_obj<'a>(p: *mut c_void) -> Result<&'a WorkerObj> {
    let w = p as *const WorkerObj;
    // SAFETY: per the caller; checked by the magic.
    if w.is_null() || unsafe { (*w).magic } != WORKER_MAGIC {
        return Err(Status::InvalidParam);
    }
    // SAFETY: checked above.
    Ok(unsafe { &*w })
}

#[no_mangle]
pub unsafe extern "C" fn uct_worker_create(
    _async: *mut c_void,
    _thread_mode: c_uint,
    worker_p: *mut *mut c_void,
) -> ucs_status_t {
    guard::status("uct_worker_create", || {
        if worker_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let null = ucs_callbackq_elem_t {
            cb: None,
            arg: std::ptr::null_mut(),
            flags: 0,
            id: ID_NULL,
        };
        let w = Box::new(WorkerObj {
            q: UnsafeCell::new(ucs_callbackq_t {
                fast_elems: [null; UCS_CALLBACKQ_FAST_COUNT + 1],
                priv_: [0; 72],
            }),
            magic: WORKER_MAGIC,
            cbs: RefCell::new(Vec::new()),
            next_id: Cell::new(0),
        });
        // SAFETY: checked non-null.
        unsafe { *worker_p = Box::into_raw(w) as *mut c_void };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_worker_destroy(worker: *mut c_void) {
    guard::void("uct_worker_destroy", || {
        // SAFETY: per the API.
        unsafe { worker_obj(worker) }?;
        // SAFETY: made by Box::into_raw in uct_worker_create; the magic is cleared.
        unsafe {
            let w = worker as *mut WorkerObj;
            (*w).magic = 0;
            drop(Box::from_raw(w));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_worker_progress_register_safe(
    worker: *mut c_void,
    func: ucs_callback_t,
    arg: *mut c_void,
    _flags: c_uint,
    id_p: *mut c_int,
) {
    guard::void("uct_worker_progress_register_safe", || {
        // SAFETY: per the API.
        let w = unsafe { worker_obj(worker) }?;
        let f = func.ok_or(Status::InvalidParam)?;
        if id_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: checked non-null; `*id_p` is ID_NULL when not yet registered.
        unsafe {
            if *id_p == ID_NULL {
                *id_p = w.add(f, arg)?;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_worker_progress_unregister_safe(
    worker: *mut c_void,
    id_p: *mut c_int,
) {
    guard::void("uct_worker_progress_unregister_safe", || {
        // SAFETY: per the API.
        let w = unsafe { worker_obj(worker) }?;
        if id_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: checked non-null.
        unsafe {
            if *id_p != ID_NULL {
                w.remove(*id_p);
                *id_p = ID_NULL;
            }
        }
        Ok(())
    })
}

use crate::ffi::ucs_status_t;
