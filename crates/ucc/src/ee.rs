//! Execution engines and events (`ucc_ee_*`, `ucc_collective_triggered_post`) with host
//! semantics: an engine of type `UCC_EE_CPU_THREAD` on a team. A triggered post starts
//! the collective at once (on the host, the compute the trigger stands for finished
//! when the caller got there) and the engine reports `UCC_EVENT_COLLECTIVE_POST`, then
//! `UCC_EVENT_COLLECTIVE_COMPLETE` when the collective completes. `ucc_ee_get_event`
//! takes the next reported event (`UCC_ERR_NOT_FOUND` when none), `ucc_ee_ack_event`
//! releases it, `ucc_ee_wait` progresses the context until one is there.
//! `ucc_ee_set_event` hands the engine an event of the application's; nothing on the
//! host waits for one, so it is recorded and dropped with the engine.

use crate::ffi::*;
use crate::handle::{self, Kind};
use crate::{guard, tri, Ctx, Req, TeamC};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::Mutex;

pub(crate) struct Ee {
    ctx: *mut Ctx,
    team: *mut TeamC,
    /// Events the engine reports, oldest first.
    pub out: Mutex<VecDeque<Ev>>,
    /// Events the application set.
    set: Mutex<Vec<Ev>>,
}

impl Ee {
    /// Queues a reported event.
    pub fn report(&self, ev_type: i32, req: *mut c_void) {
        let mut q = self.out.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(Ev {
            ev_type,
            ev_context: std::ptr::null_mut(),
            ev_context_size: 0,
            req,
        });
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_create(
    team: *mut c_void,
    params: *const EeParams,
    ee: *mut *mut c_void,
) -> Status {
    guard(|| {
        let t: &TeamC = tri!(handle::get(team, Kind::Team));
        tri!(crate::ready_team(t).map_err(|s| if s == UCC_INPROGRESS {
            UCC_ERR_INVALID_PARAM
        } else {
            s
        }));
        if params.is_null() || ee.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_ee_params_t.
        let p = unsafe { &*params };
        match p.ee_type {
            EE_CPU_THREAD => {}
            0..EE_LAST => return UCC_ERR_NOT_SUPPORTED,
            _ => return UCC_ERR_INVALID_PARAM,
        }
        let e = Ee {
            ctx: t.ctx,
            team: team.cast(),
            out: Mutex::new(VecDeque::new()),
            set: Mutex::new(Vec::new()),
        };
        let h = handle::register(Box::new(e), Kind::Ee);
        // SAFETY: non-null handle slot.
        unsafe { ee.write(h.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_destroy(ee: *mut c_void) -> Status {
    guard(|| {
        // SAFETY: registry-checked Ee from Box::into_raw.
        match unsafe { handle::take::<Ee, _>(ee, Kind::Ee) } {
            Some(_) => UCC_OK,
            None => UCC_ERR_INVALID_PARAM,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_get_event(ee: *mut c_void, ev: *mut *mut Ev) -> Status {
    guard(|| {
        let e: &Ee = tri!(handle::get(ee, Kind::Ee));
        if ev.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        let next = e.out.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        match next {
            Some(x) => {
                let p = handle::register(Box::new(x), Kind::Event);
                // SAFETY: non-null out pointer.
                unsafe { ev.write(p) };
                UCC_OK
            }
            None => UCC_ERR_NOT_FOUND,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_ack_event(ee: *mut c_void, ev: *mut Ev) -> Status {
    guard(|| {
        let _: &Ee = tri!(handle::get(ee, Kind::Ee));
        // SAFETY: registry-checked event from Box::into_raw (made by get_event).
        match unsafe { handle::take::<Ev, _>(ev, Kind::Event) } {
            Some(_) => UCC_OK,
            None => UCC_ERR_INVALID_PARAM,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_set_event(ee: *mut c_void, ev: *mut Ev) -> Status {
    guard(|| {
        let e: &Ee = tri!(handle::get(ee, Kind::Ee));
        if ev.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_ev_t of the application's.
        let x = unsafe { *ev };
        e.set.lock().unwrap_or_else(|p| p.into_inner()).push(x);
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_wait(ee: *mut c_void, ev: *mut Ev) -> Status {
    guard(|| {
        let e: &Ee = tri!(handle::get(ee, Kind::Ee));
        let c: &Ctx = tri!(handle::get(e.ctx, Kind::Ctx));
        if ev.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        loop {
            if let Some(x) = e.out.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
                // SAFETY: non-null ucc_ev_t to fill.
                unsafe { ev.write(x) };
                return UCC_OK;
            }
            let cbs = crate::progress_locked(&mut c.lock());
            crate::run_callbacks(cbs);
            std::thread::yield_now();
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_collective_triggered_post(ee: *mut c_void, ev: *mut Ev) -> Status {
    guard(|| {
        let e: &Ee = tri!(handle::get(ee, Kind::Ee));
        if ev.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_ev_t of the application's.
        let x = unsafe { *ev };
        if x.ev_type != EVENT_COMPUTE_COMPLETE {
            return UCC_ERR_NOT_SUPPORTED;
        }
        let r: &mut Req = tri!(handle::get_mut(x.req, Kind::Req));
        if r.team != e.team {
            // An engine serves the collectives of its own team.
            return UCC_ERR_INVALID_PARAM;
        }
        r.ee = ee.cast();
        e.report(EVENT_COLLECTIVE_POST, x.req);
        // SAFETY: a live request handle (checked above).
        unsafe { crate::ucc_collective_post(x.req) }
    })
}
