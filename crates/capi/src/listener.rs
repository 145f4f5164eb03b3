//! Listeners and connection requests: client–server connection establishment over the
//! protocol layer's sockaddr connection manager.
//!
//! A listener's C handler never runs inside the worker's progress: the Rust handler queues
//! the request, and after progress returns the application's connection handler gets a
//! `ucp_conn_request_h` (to accept with `ucp_ep_create(UCP_EP_PARAM_FIELD_CONN_REQUEST)`
//! or refuse with `ucp_listener_reject`), or, with the older accept handler, rucx accepts
//! and hands over the new endpoint.

use crate::core::{self, ConnReqH, Event, ListenerH, ListenerInfo, OnConn, Wk};
use crate::dispatch::run;
use crate::ffi::*;
use crate::guard;
use crate::handle::Handle;
use crate::sockaddr::{sockaddr_from_c, sockaddr_to_c};
use ucp::ListenerId;
use ucs::{Result, Status};

#[no_mangle]
pub unsafe extern "C" fn ucp_listener_create(
    worker: *mut Handle<Wk>,
    params: *const ucp_listener_params_t,
    listener_p: *mut *mut Handle<ListenerH>,
) -> ucs_status_t {
    guard::status("ucp_listener_create", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { core::get(worker)? };
        if params.is_null() || listener_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read by mask.
        let (addr, on_conn) = unsafe {
            let p = &*params;
            let m = p.field_mask;
            if m & UCP_LISTENER_PARAM_FIELD_SOCK_ADDR == 0 {
                return Err(Status::InvalidParam);
            }
            let addr = sockaddr_from_c(p.sockaddr.addr, p.sockaddr.addrlen)?;
            let on_conn = if m & UCP_LISTENER_PARAM_FIELD_CONN_HANDLER != 0 {
                match p.conn_handler.cb {
                    Some(cb) => OnConn::Request {
                        cb: cb as usize,
                        arg: p.conn_handler.arg,
                    },
                    None => return Err(Status::InvalidParam),
                }
            } else if m & UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER != 0 {
                match p.accept_handler.cb {
                    Some(cb) => OnConn::Accept {
                        cb: cb as usize,
                        arg: p.accept_handler.arg,
                    },
                    None => return Err(Status::InvalidParam),
                }
            } else {
                return Err(Status::InvalidParam);
            };
            (addr, on_conn)
        };
        let q = wk.queue();
        let (me, gen) = wk.me();
        let h = run(wk, |w, side| -> Result<*mut Handle<ListenerH>> {
            // The id is only known once the listener exists; the handler learns it from
            // the worker's table by the request (see `prepare`).
            let slot = std::sync::Arc::new(std::sync::OnceLock::<ListenerId>::new());
            let s2 = slot.clone();
            let id = w.listener_create(
                addr,
                Box::new(move |req, client| {
                    if let Some(&l) = s2.get() {
                        q.push(Event::Conn(l, req, client));
                    }
                }),
            )?;
            let _ = slot.set(id);
            let (h, _) = Handle::alloc(ListenerH {
                wk: me,
                wgen: gen,
                id,
            });
            side.listeners
                .insert(id, ListenerInfo { handle: h, on_conn });
            Ok(h)
        })??;
        // SAFETY: the caller's output pointer.
        unsafe { *listener_p = h };
        Ok(())
    })
}

/// The listener behind a handle, with its worker.
unsafe fn get<'a>(p: *mut Handle<ListenerH>) -> Result<(&'a ListenerH, &'a Wk)> {
    // SAFETY: forwarded contract.
    let l = unsafe { Handle::get(p)? };
    // SAFETY: handles are never freed; the generation catches a destroyed worker.
    let wk = unsafe { Handle::get_gen(l.wk, l.wgen)? };
    Ok((l, wk))
}

#[no_mangle]
pub unsafe extern "C" fn ucp_listener_destroy(listener: *mut Handle<ListenerH>) {
    guard::void("ucp_listener_destroy", || {
        // SAFETY: the caller's listener handle.
        let (l, wk) = unsafe { get(listener)? };
        let id = l.id;
        run(wk, |w, side| {
            side.listeners.remove(&id);
            w.listener_destroy(id)
        })??;
        // SAFETY: the application gives the handle up.
        unsafe { Handle::destroy(listener) }.map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_listener_query(
    listener: *mut Handle<ListenerH>,
    attr: *mut ucp_listener_attr_t,
) -> ucs_status_t {
    guard::status("ucp_listener_query", || {
        // SAFETY: the caller's listener handle.
        let (l, wk) = unsafe { get(listener)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        let id = l.id;
        let a = wk.with(|w, _| w.listener_addr(id))??;
        // SAFETY: the caller's attribute struct, written by mask.
        unsafe {
            if (*attr).field_mask & UCP_LISTENER_ATTR_FIELD_SOCKADDR != 0 {
                sockaddr_to_c(a, &mut (*attr).sockaddr);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_listener_reject(
    listener: *mut Handle<ListenerH>,
    conn_request: *mut Handle<ConnReqH>,
) -> ucs_status_t {
    guard::status("ucp_listener_reject", || {
        // SAFETY: the caller's handles.
        let (_, wk) = unsafe { get(listener)? };
        // SAFETY: as above.
        let c = unsafe { Handle::get(conn_request)? };
        let id = c.id;
        run(wk, |w, side| {
            side.conn_reqs.remove(&id);
            w.listener_reject(id)
        })??;
        // SAFETY: the request is answered; its handle goes.
        unsafe { Handle::destroy(conn_request) }.map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_conn_request_query(
    conn_request: *mut Handle<ConnReqH>,
    attr: *mut ucp_conn_request_attr_t,
) -> ucs_status_t {
    guard::status("ucp_conn_request_query", || {
        // SAFETY: the caller's connection request handle.
        let c = unsafe { Handle::get(conn_request)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct, written by mask.
        unsafe {
            let m = (*attr).field_mask;
            if m & UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID != 0 {
                // Clients do not send an id with rucx's connection manager.
                return Err(Status::Unsupported);
            }
            if m & UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR != 0 {
                sockaddr_to_c(c.client, &mut (*attr).client_address);
            }
        }
        Ok(())
    })
}
