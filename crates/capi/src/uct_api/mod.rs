//! The UCT C API of UCX 1.13 over rucx's transport crate (`uct`), so that programs written
//! for UCX's transport layer (Debian's `ucx_perftest` UCT tests, `uct_hello_world`) run on
//! rucx's transports. See docs/c-abi.md, "The UCT API".
//!
//! UCX makes most data-path calls `static inline`: the program calls
//! `ep->iface->ops.ep_am_short(...)` itself, and `uct_worker_progress` walks the worker's
//! callback array. So the objects behind `uct_iface_h`, `uct_ep_h` and `uct_worker_h` start
//! with UCX's exact layout ([`ffi`]), followed by rucx's own state.
//!
//! Modules: [`ffi`] (layouts and constants), `md` (components, memory domains, memory
//! and remote keys), `obj` (interface and endpoint objects, progress), `ops` (the
//! operations), `iface` (the other exported interface and endpoint functions), `table`
//! (the operations table and `uct_iface_open`, which installs it), `worker` (the progress
//! callback array). Each imports only modules listed before it.
//!
//! Names: UCX's components `self`, `posix`, `sysv`, `cma` and `tcp` are listed, each with
//! one memory domain of the same name and one transport of that name: `self` is rucx's
//! self transport (device `memory0`), `posix` and `sysv` are rucx's shm transport (device
//! `memory`), `cma` is rucx's shm interface offering only put/get zcopy over
//! cross-memory attach (device `memory`), `tcp` is rucx's tcp (one device per network
//! interface, e.g. `lo`). rucx's udp has no UCX counterpart and is not listed.

pub mod ffi;
mod iface;
mod md;
mod obj;
mod ops;
mod table;
mod worker;

/// Copies `s` into the fixed-size C string `dst`, truncated and always terminated.
fn put_cstr(dst: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as std::ffi::c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// The string at `p` (null or invalid UTF-8: `None`).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn cstr<'a>(p: *const std::ffi::c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().ok()
}
