//! Listeners and connection requests: client–server connection establishment over the
//! protocol layer's sockaddr connection manager.
//!
//! A listener's C handler never runs inside the worker's progress: the Rust handler queues
//! the request, and after progress returns the application's connection handler gets a
//! `ucp_conn_request_h` (to accept with `ucp_ep_create(UCP_EP_PARAM_FIELD_CONN_REQUEST)`
//! or refuse with `ucp_listener_reject`), or, with the older accept handler, rucx accepts
//! and hands over the new endpoint.

use crate::ep::{self, EpH};
use crate::ffi::*;
use crate::guard;
use crate::handle::{handle_kind, Handle};
use crate::worker::{self, Event, QueuePtr, Side, Wk};
use std::ffi::c_void;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use ucp::{ConnReqId, ListenerId, Worker};
use ucs::{Result, Status};

/// What the application registered to hear about connection requests.
#[derive(Clone, Copy)]
pub(crate) enum OnConn {
    /// `ucp_listener_conn_callback_t`: the application accepts or rejects.
    Request { cb: usize, arg: *mut c_void },
    /// `ucp_listener_accept_callback_t`: rucx accepts and gives the endpoint.
    Accept { cb: usize, arg: *mut c_void },
}

/// A listener of a worker, in the worker's table.
pub(crate) struct ListenerInfo {
    pub handle: *mut Handle<ListenerH>,
    on_conn: OnConn,
}

/// A listener handle's value.
pub(crate) struct ListenerH {
    wk: *const Handle<Wk>,
    wgen: u64,
    id: ListenerId,
}

handle_kind!(ListenerH, 0x7275_6378_6c73_6e31);

// SAFETY: plain data; the worker it names synchronises its own use.
unsafe impl Send for ListenerH {}

/// A connection request handle's value.
pub(crate) struct ConnReqH {
    wk: *const Handle<Wk>,
    wgen: u64,
    pub(crate) id: ConnReqId,
    pub(crate) client: SocketAddr,
}

handle_kind!(ConnReqH, 0x7275_6378_636f_6e72);

// SAFETY: plain data.
unsafe impl Send for ConnReqH {}

impl ConnReqH {
    pub(crate) fn worker(&self) -> Result<&Wk> {
        // SAFETY: handles are never freed; the generation catches a destroyed worker.
        unsafe { Handle::get_gen(self.wk, self.wgen) }
    }
}

/// A socket address from C (`AF_INET` or `AF_INET6`).
///
/// # Safety
/// `sa` must point to `len` readable bytes (or be null).
pub(crate) unsafe fn sockaddr_from_c(sa: *const libc::sockaddr, len: u32) -> Result<SocketAddr> {
    if sa.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the caller's address; the family says which struct it is, and the length
    // is checked before the struct is read.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
                let a = sa.cast::<libc::sockaddr_in>().read_unaligned();
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
                let a = sa.cast::<libc::sockaddr_in6>().read_unaligned();
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            libc::AF_INET | libc::AF_INET6 => Err(Status::InvalidParam),
            _ => Err(Status::Unsupported),
        }
    }
}

/// Writes a socket address into a C `sockaddr_storage`.
pub(crate) fn sockaddr_to_c(a: SocketAddr, out: &mut libc::sockaddr_storage) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    *out = unsafe { std::mem::zeroed() };
    let p = (out as *mut libc::sockaddr_storage).cast::<u8>();
    match a {
        SocketAddr::V4(v) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage.
            unsafe { p.cast::<libc::sockaddr_in>().write_unaligned(s) };
        }
        SocketAddr::V6(v) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage.
            unsafe { p.cast::<libc::sockaddr_in6>().write_unaligned(s) };
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_listener_create(
    worker: *mut Handle<Wk>,
    params: *const ucp_listener_params_t,
    listener_p: *mut *mut Handle<ListenerH>,
) -> ucs_status_t {
    guard::status("ucp_listener_create", || {
        // SAFETY: the caller's worker handle.
        let wk = unsafe { worker::get(worker)? };
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
        let q = QueuePtr(&wk.evq);
        let (me, gen) = wk.me();
        let h = wk.run(|w, side| -> Result<*mut Handle<ListenerH>> {
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
        wk.run(|w, side| {
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
        wk.run(|w, side| {
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

/// A connection request ready for the application's handler.
pub(crate) struct Ready {
    on_conn: OnConn,
    req: ConnReqId,
    client: SocketAddr,
}

/// Readies a queued connection request (with the worker held).
pub(crate) fn prepare(
    _wk: &Wk,
    w: &mut Worker,
    side: &mut Side,
    l: ListenerId,
    req: ConnReqId,
    client: SocketAddr,
) -> Option<Ready> {
    match side.listeners.get(&l) {
        Some(info) => Some(Ready {
            on_conn: info.on_conn,
            req,
            client,
        }),
        None => {
            let _ = w.listener_reject(req);
            None
        }
    }
}

/// Calls the application's handler for a connection request (the worker released).
pub(crate) fn deliver(wk: &Wk, r: Ready) {
    let (me, gen) = wk.me();
    match r.on_conn {
        OnConn::Request { cb, arg } => {
            let (h, _) = Handle::alloc(ConnReqH {
                wk: me,
                wgen: gen,
                id: r.req,
                client: r.client,
            });
            if wk.with(|_, side| side.conn_reqs.insert(r.req, h)).is_err() {
                return;
            }
            // SAFETY: the application's connection handler, registered with this
            // signature, called with no worker held.
            unsafe {
                let f = std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *mut c_void)>(
                    cb,
                );
                f(h.cast(), arg);
            }
        }
        OnConn::Accept { cb, arg } => {
            let Ok(Ok(h)) = wk.with(|w, side| -> Result<*mut Handle<EpH>> {
                let e = w.ep_create_from_request(r.req)?;
                let h = ep::handle_for(wk, side, e);
                // SAFETY: the handle just made or found for this worker's endpoint.
                if let Ok(eh) = unsafe { Handle::get(h) } {
                    eh.implicit.set(false);
                }
                Ok(h)
            }) else {
                return;
            };
            // SAFETY: the application's accept handler, registered with this signature,
            // called with no worker held.
            unsafe {
                let f = std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *mut c_void)>(
                    cb,
                );
                f(h.cast(), arg);
            }
        }
    }
}
