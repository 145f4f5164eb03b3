//! Endpoints: `ucp_ep_create` (from a worker address, a server's socket address, or a
//! connection request of a listener), error handlers, close, flush, query.

use crate::address::address_from_c;
use crate::core::{
    self, ep_get as get, CbKind, ConnReqH, EpH, Event, Op, Outcome, RecvOut, Wk, DT_BYTES,
};
use crate::dispatch::{run, wait_ptr};
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::sockaddr::{sockaddr_from_c, sockaddr_to_c};
use crate::text;
use std::cell::Cell;
use std::ffi::{c_char, c_uint, c_void};
use std::net::SocketAddr;
use std::time::Duration;
use ucp::RecvInfo;
use ucs::{Result, Status};

/// How long an endpoint made from a socket address waits for the server's answer before
/// it fails with `UCS_ERR_TIMED_OUT` (`ucp_ep_create` itself returns at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a new endpoint goes.
enum Target {
    Address(*const c_void),
    Server(SocketAddr),
    Request(*mut Handle<ConnReqH>),
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_create(
    worker: *mut Handle<Wk>,
    params: *const ucp_ep_params_t,
    ep_p: *mut *mut Handle<EpH>,
) -> ucs_status_t {
    guard::status("ucp_ep_create", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if params.is_null() || ep_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read by mask.
        let (target, user_data, name, err) = unsafe {
            let p = &*params;
            let m = p.field_mask;
            let target = if m & UCP_EP_PARAM_FIELD_REMOTE_ADDRESS != 0 {
                Target::Address(p.address)
            } else if m & UCP_EP_PARAM_FIELD_SOCK_ADDR != 0 {
                Target::Server(sockaddr_from_c(p.sockaddr.addr, p.sockaddr.addrlen)?)
            } else if m & UCP_EP_PARAM_FIELD_CONN_REQUEST != 0 {
                Target::Request(p.conn_request.cast())
            } else {
                return Err(Status::InvalidParam);
            };
            (
                target,
                if m & UCP_EP_PARAM_FIELD_USER_DATA != 0 {
                    p.user_data
                } else if m & UCP_EP_PARAM_FIELD_ERR_HANDLER != 0 {
                    p.err_handler.arg
                } else {
                    std::ptr::null_mut()
                },
                if m & UCP_EP_PARAM_FIELD_NAME != 0 {
                    p.name
                } else {
                    std::ptr::null()
                },
                if m & UCP_EP_PARAM_FIELD_ERR_HANDLER != 0 {
                    p.err_handler.cb.map(|cb| cb as usize)
                } else {
                    None
                },
            )
        };
        let mut ename = [0 as c_char; UCP_ENTITY_NAME_MAX];
        text::default_name("ep", &mut ename);
        if !name.is_null() {
            // SAFETY: the caller's NUL-terminated name.
            let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
            let n = s.len().min(UCP_ENTITY_NAME_MAX - 1);
            for (d, &b) in ename.iter_mut().zip(&s[..n]) {
                *d = b as c_char;
            }
            ename[n] = 0;
        }
        let (bytes, request) = match target {
            // SAFETY: an address of ours (magic checked before the length is trusted).
            Target::Address(a) => (Some(unsafe { address_from_c(a)? }), None),
            Target::Request(r) => {
                // SAFETY: the caller's connection request handle.
                let c = unsafe { Handle::get(r)? };
                let lw = c.worker()?;
                // The request leaves its listener's worker; whichever worker accepts it
                // (this one, or another of this or another context) answers the client.
                let id = c.id;
                let taken = lw.with(|w, side| {
                    side.conn_reqs.remove(&id);
                    w.conn_request_take(id)
                })??;
                (None, Some((r, taken)))
            }
            Target::Server(_) => (None, None),
        };
        let q = wk.queue();
        let mut request = request;
        let r_handle = request.as_ref().map(|(r, _)| *r);
        let h = run(wk, |w, side| -> Result<*mut Handle<EpH>> {
            // The socket addresses of client–server endpoints stay with the protocol layer
            // (`Worker::ep_sockaddrs`, for `ucp_ep_query`).
            let ep = match (&target, bytes, request.take()) {
                (_, Some(b), _) => w.ep_create(b)?,
                (_, _, Some((_, taken))) => w.ep_create_accept(taken)?,
                (Target::Server(a), _, _) => w.ep_create_sockaddr(*a, CONNECT_TIMEOUT)?,
                _ => return Err(Status::InvalidParam),
            };
            if err.is_some() {
                w.ep_set_err_handler(ep, Some(Box::new(move |e, s| q.push(Event::EpError(e, s)))))?;
            }
            if let Some(&h) = side.eps.get(&ep) {
                // A reply endpoint to the same peer became the application's endpoint.
                // SAFETY: handles in the table are live endpoint handles of this worker.
                if let Ok(e) = unsafe { Handle::get(h) } {
                    e.implicit.set(false);
                    e.user_data.set(user_data);
                    e.name.set(ename);
                    e.err.set(err);
                    return Ok(h);
                }
            }
            let (me, gen) = wk.me();
            let (h, _) = Handle::alloc(EpH {
                wk: me,
                wgen: gen,
                ep,
                user_data: Cell::new(user_data),
                name: Cell::new(ename),
                implicit: Cell::new(false),
                err: Cell::new(err),
            });
            side.eps.insert(ep, h);
            Ok(h)
        })??;
        if let Some(r) = r_handle {
            // SAFETY: the request is answered (or, if accepting failed, refused by the
            // dropped connection); its handle goes.
            drop(unsafe { Handle::destroy(r) });
        }
        // SAFETY: the caller's output pointer.
        unsafe { *ep_p = h };
        Ok(())
    })
}

/// Closes an endpoint; the handle is gone when this returns.
unsafe fn close(ep: *mut Handle<EpH>, force: bool, op: Op) -> Result<ucs_status_ptr_t> {
    op.no_cq()?;
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { get(ep)? };
    let rep = e.ep;
    // The handle leaves the worker's endpoint table and is destroyed together, whatever
    // the close reports (`ep_get` relies on it); a worker that could not be entered
    // leaves both alone.
    let p = run(wk, |w, side| {
        side.eps.remove(&rep);
        let hdr = wk.begin(side, &op, 0)?;
        let out = w.ep_close_nb(rep, force).map(|r| match r {
            None => Outcome::Done(Status::Ok, RecvInfo::default()),
            Some(r) => Outcome::Polled(r),
        });
        wk.conclude(w, side, &op, hdr, out, RecvOut::None)
    })?;
    // SAFETY: the application gave the endpoint up with this call.
    drop(unsafe { Handle::destroy(ep) });
    p
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nb(ep: *mut Handle<EpH>, mode: c_uint) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_ep_close_nb", || {
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { close(ep, mode == UCP_EP_CLOSE_MODE_FORCE, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nbx(
    ep: *mut Handle<EpH>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_ep_close_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        let force = op.flags & UCP_EP_CLOSE_FLAG_FORCE != 0;
        // SAFETY: forwarded contract.
        unsafe { close(ep, force, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_disconnect_nb(ep: *mut Handle<EpH>) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_disconnect_nb", || {
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { close(ep, false, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_destroy(ep: *mut Handle<EpH>) {
    guard::void("ucp_ep_destroy", || {
        // SAFETY: the caller's endpoint handle.
        let (_, wk) = unsafe { get(ep)? };
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        let p = unsafe { close(ep, false, op)? };
        wait_ptr(wk, p)
    })
}

unsafe fn flush(ep: *mut Handle<EpH>, op: Op) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's endpoint handle.
    let (e, wk) = unsafe { get(ep)? };
    let rep = e.ep;
    run(wk, |w, side| {
        wk.start(w, side, &op, 0, RecvOut::None, |w, cb| {
            w.ep_flush_nb(rep, cb).map(Outcome::of)
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nb(
    ep: *mut Handle<EpH>,
    _flags: c_uint,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_ep_flush_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { flush(ep, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nbx(
    ep: *mut Handle<EpH>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_ep_flush_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        // SAFETY: forwarded contract.
        unsafe { flush(ep, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush(ep: *mut Handle<EpH>) -> ucs_status_t {
    guard::status("ucp_ep_flush", || {
        // SAFETY: the caller's endpoint handle.
        let (_, wk) = unsafe { get(ep)? };
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        let p = unsafe { flush(ep, op)? };
        wait_ptr(wk, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_query(
    ep: *mut Handle<EpH>,
    attr: *mut ucp_ep_attr_t,
) -> ucs_status_t {
    guard::status("ucp_ep_query", || {
        // SAFETY: the caller's endpoint handle.
        let (e, wk) = unsafe { get(ep)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct, written by mask.
        let mask = unsafe { (*attr).field_mask };
        if mask & (UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR | UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR) != 0 {
            // Only endpoints made through a listener or to a socket address have them.
            let rep = e.ep;
            let (local, remote) = wk.with(|w, _| w.ep_sockaddrs(rep))??;
            if mask & UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR != 0 {
                let l = local.ok_or(Status::NotConnected)?;
                // SAFETY: as above.
                sockaddr_to_c(l, unsafe { &mut (*attr).local_sockaddr });
            }
            if mask & UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR != 0 {
                // SAFETY: as above.
                sockaddr_to_c(remote, unsafe { &mut (*attr).remote_sockaddr });
            }
        }
        if mask & UCP_EP_ATTR_FIELD_NAME != 0 {
            // SAFETY: as above.
            unsafe { (*attr).name = e.name.get() };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_print_info(ep: *mut Handle<EpH>, stream: *mut libc::FILE) {
    guard::void("ucp_ep_print_info", || {
        // SAFETY: the caller's endpoint handle.
        let (e, wk) = unsafe { get(ep)? };
        let rep = e.ep;
        let tl = wk.with(|w, _| w.ep_transport(rep))??;
        let info = format!(
            "#\n# UCP endpoint '{}' (rucx)\n#   transport: {}\n#\n",
            text::name_str(&e.name.get()),
            tl.map_or("not connected yet", |t| t.name())
        );
        text::print_to(stream, &info);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_evaluate_perf(
    ep: *mut Handle<EpH>,
    _param: *const ucp_ep_evaluate_perf_param_t,
    _attr: *mut ucp_ep_evaluate_perf_attr_t,
) -> ucs_status_t {
    guard::status("ucp_ep_evaluate_perf", || {
        // SAFETY: the caller's endpoint handle.
        unsafe { get(ep)? };
        Err(Status::Unsupported)
    })
}

/// `ucp_ep_modify_nb`: what UCX 1.13 lets an application change on a live endpoint, its
/// user data and its error handler. A new peer address or error-handling mode is
/// `UCS_ERR_NOT_IMPLEMENTED`, as in UCX. Completes in the call (returns NULL).
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_modify_nb(
    ep: *mut Handle<EpH>,
    params: *const ucp_ep_params_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_ep_modify_nb", || {
        // SAFETY: the caller's endpoint handle.
        let (e, wk) = unsafe { get(ep)? };
        if params.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read by mask.
        let p = unsafe { &*params };
        let m = p.field_mask;
        if m & (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
            | UCP_EP_PARAM_FIELD_SOCK_ADDR
            | UCP_EP_PARAM_FIELD_CONN_REQUEST
            | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE)
            != 0
        {
            return Err(Status::NotImplemented);
        }
        if m & UCP_EP_PARAM_FIELD_ERR_HANDLER != 0 {
            let cb = p.err_handler.cb.map(|cb| cb as usize);
            let rep = e.ep;
            let q = wk.queue();
            wk.with(|w, _| {
                w.ep_set_err_handler(
                    rep,
                    cb.map(|_| -> ucp::worker::ErrHandler {
                        Box::new(move |x, s| q.push(Event::EpError(x, s)))
                    }),
                )
            })??;
            e.err.set(cb);
            e.user_data.set(p.err_handler.arg);
        }
        if m & UCP_EP_PARAM_FIELD_USER_DATA != 0 {
            e.user_data.set(p.user_data);
        }
        Ok(std::ptr::null_mut())
    })
}
