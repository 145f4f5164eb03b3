//! rucx's `libucc.so.1`: UCC's C API (API 1.3, UCC 1.3 ABI) over `crates/coll`.
//!
//! Glue only, as capi is for ucp: every exported function runs inside a panic boundary
//! ([`guard`]), checks its handles against the registry of live ones ([`handle`]) and
//! reads parameter structs only as far as their `mask` says. The mapping:
//!
//! ```text
//!  ucc_lib_h ─ Lib            ucc_context_h ─ Ctx { coll::Context (one ucp worker) }
//!  ucc_team_h ─ TeamC { Creating(coll::TeamCreate) | Ready(coll::Team) }
//!  ucc_coll_req_h ─ Req { status (first field, read by the inline ucc_collective_test),
//!                         coll::CollReq }
//! ```
//!
//! The safety contract of each `unsafe extern "C"` function is UCC's (valid pointers of
//! the documented types; buffers valid until the collective is finalized), hence no
//! per-function `# Safety` sections. docs/ucc.md lists what is supported.

#![allow(clippy::missing_safety_doc)]
#![allow(non_upper_case_globals)]

mod args;
mod ee;
mod executor;
mod ffi;
mod handle;
mod helpers;
mod oob;

use coll::Oob;
use ffi::*;
use handle::Kind;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Runs `f`, turning a panic into `UCC_ERR_NO_MESSAGE`.
pub(crate) fn guard(f: impl FnOnce() -> Status) -> Status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(s) => s,
        Err(_) => {
            tracing::error!("ucc: internal error (panic) caught at the C boundary");
            UCC_ERR_NO_MESSAGE
        }
    }
}

/// A rucx status as a UCC status.
pub(crate) fn status(s: ucs::Status) -> Status {
    use ucs::Status as S;
    match s {
        S::Ok => UCC_OK,
        S::InProgress => UCC_INPROGRESS,
        S::InvalidParam | S::InvalidAddr | S::Busy | S::OutOfRange => UCC_ERR_INVALID_PARAM,
        S::NoMemory => UCC_ERR_NO_MEMORY,
        S::NoResource | S::ExceedsLimit => UCC_ERR_NO_RESOURCE,
        S::NotImplemented => UCC_ERR_NOT_IMPLEMENTED,
        S::Unsupported => UCC_ERR_NOT_SUPPORTED,
        S::TimedOut | S::EndpointTimeout => UCC_ERR_TIMED_OUT,
        S::NoElem | S::NoDevice => UCC_ERR_NOT_FOUND,
        _ => UCC_ERR_NO_MESSAGE,
    }
}

#[macro_export]
#[doc(hidden)]
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(s) => return s,
        }
    };
}

// ----- status strings ----------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn ucc_status_string(s: Status) -> *const c_char {
    let msg: &'static CStr = match s {
        UCC_OK => c"Success",
        UCC_INPROGRESS => c"Operation in progress",
        UCC_OPERATION_INITIALIZED => c"Operation initialized",
        UCC_ERR_NOT_SUPPORTED => c"Operation is not supported",
        UCC_ERR_NOT_IMPLEMENTED => c"Not implemented",
        UCC_ERR_INVALID_PARAM => c"Invalid parameter",
        UCC_ERR_NO_MEMORY => c"Out of memory",
        UCC_ERR_NO_RESOURCE => c"Resources are not available",
        UCC_ERR_NO_MESSAGE => c"Unhandled error",
        UCC_ERR_NOT_FOUND => c"Not found",
        UCC_ERR_TIMED_OUT => c"Timeout expired",
        _ => c"Unknown error",
    };
    msg.as_ptr()
}

// ----- library -----------------------------------------------------------------------------

struct LibConfig {
    _prefix: String,
}

struct Lib {
    thread_mode: i32,
}

unsafe fn opt_str(p: *const c_char) -> Option<String> {
    // SAFETY: the caller passes NULL or a NUL-terminated string (UCC's contract).
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

#[no_mangle]
pub unsafe extern "C" fn ucc_lib_config_read(
    env_prefix: *const c_char,
    _filename: *const c_char,
    config: *mut *mut c_void,
) -> Status {
    guard(|| {
        if config.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: NULL or a C string, per UCC's contract.
        let prefix = unsafe { opt_str(env_prefix) }.unwrap_or_default();
        let p = handle::register(Box::new(LibConfig { _prefix: prefix }), Kind::LibConfig);
        // SAFETY: `config` is non-null and points to a handle slot.
        unsafe { config.write(p.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_lib_config_release(config: *mut c_void) {
    let _ = guard(|| {
        // SAFETY: the registry said `config` is a live LibConfig made by Box::into_raw.
        if let Some(b) = unsafe { handle::take::<LibConfig, _>(config, Kind::LibConfig) } {
            drop(b);
        }
        UCC_OK
    });
}

/// rucx's library has no options of its own (its settings are the `UCX_*` variables):
/// every name is `UCC_ERR_NOT_FOUND`.
#[no_mangle]
pub unsafe extern "C" fn ucc_lib_config_modify(
    config: *mut c_void,
    name: *const c_char,
    value: *const c_char,
) -> Status {
    guard(|| {
        let _: &LibConfig = tri!(handle::get(config, Kind::LibConfig));
        if name.is_null() || value.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: a C string, per the contract.
        let n = unsafe { opt_str(name) }.unwrap_or_default();
        tracing::warn!("ucc: library option {n} is not known to rucx");
        UCC_ERR_NOT_FOUND
    })
}

const PRINT_CONFIG: u32 = 1 << 0;
const PRINT_HEADER: u32 = 1 << 1;

/// Writes `text` to a C stream.
unsafe fn put(stream: *mut c_void, text: &str) {
    if let Ok(c) = std::ffi::CString::new(text) {
        // SAFETY: `stream` is the caller's non-null FILE *.
        unsafe { libc::fputs(c.as_ptr(), stream.cast()) };
    }
}

unsafe fn print_config(
    stream: *mut c_void,
    title: *const c_char,
    flags: u32,
    what: &str,
    vars: &[(String, String)],
) {
    if stream.is_null() {
        return;
    }
    // SAFETY: NULL or a C string, per the contract.
    let title = unsafe { opt_str(title) }.unwrap_or_default();
    let mut out = String::new();
    if flags & PRINT_HEADER != 0 {
        out.push_str(&format!("#\n# {title}\n# rucx {what}\n#\n"));
    }
    if flags & PRINT_CONFIG != 0 {
        for (n, v) in vars {
            out.push_str(&format!("UCC_{n}={v}\n"));
        }
    }
    // SAFETY: non-null stream.
    unsafe { put(stream, &out) };
}

#[no_mangle]
pub unsafe extern "C" fn ucc_lib_config_print(
    config: *const c_void,
    stream: *mut c_void,
    title: *const c_char,
    flags: u32,
) {
    let _ = guard(|| {
        if handle::is(config, Kind::LibConfig) {
            // SAFETY: the caller's stream and title.
            unsafe {
                print_config(
                    stream,
                    title,
                    flags,
                    "UCC library configuration (no options)",
                    &[],
                )
            };
        }
        UCC_OK
    });
}

#[no_mangle]
pub unsafe extern "C" fn ucc_init_version(
    api_major: u32,
    _api_minor: u32,
    params: *const LibParams,
    config: *const c_void,
    lib_p: *mut *mut c_void,
) -> Status {
    guard(|| {
        if lib_p.is_null() || params.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        if api_major != 1 {
            tracing::error!("ucc: API major version {api_major} requested, rucx has 1");
            return UCC_ERR_NOT_SUPPORTED;
        }
        if !config.is_null() && !handle::is(config, Kind::LibConfig) {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null, a ucc_lib_params_t per the contract.
        let p = unsafe { &*params };
        let thread_mode = if p.mask & LIB_PARAM_FIELD_THREAD_MODE != 0 {
            if !(0..=THREAD_MULTIPLE).contains(&p.thread_mode) {
                return UCC_ERR_INVALID_PARAM;
            }
            p.thread_mode
        } else {
            0
        };
        if p.mask & LIB_PARAM_FIELD_SYNC_TYPE != 0 && p.sync_type != NO_SYNC_COLLECTIVES {
            return UCC_ERR_NOT_SUPPORTED;
        }
        let l = handle::register(Box::new(Lib { thread_mode }), Kind::Lib);
        // SAFETY: non-null handle slot.
        unsafe { lib_p.write(l.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_finalize(lib: *mut c_void) -> Status {
    guard(|| {
        // SAFETY: registry-checked Lib from Box::into_raw.
        match unsafe { handle::take::<Lib, _>(lib, Kind::Lib) } {
            Some(_) => UCC_OK,
            None => UCC_ERR_INVALID_PARAM,
        }
    })
}

/// The reduction operations `reduction_types` reports (bit per `ucc_reduction_op_t`).
fn ops_supported() -> u64 {
    [
        OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_LAND, OP_LOR, OP_LXOR, OP_BAND, OP_BOR, OP_BXOR, OP_AVG,
    ]
    .iter()
    .fold(0, |m, &o| m | (1u64 << o))
}

#[no_mangle]
pub unsafe extern "C" fn ucc_lib_get_attr(lib: *mut c_void, attr: *mut LibAttr) -> Status {
    guard(|| {
        let l: &Lib = tri!(handle::get(lib, Kind::Lib));
        if attr.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_lib_attr_t.
        let a = unsafe { &mut *attr };
        if a.mask & LIB_ATTR_FIELD_THREAD_MODE != 0 {
            a.thread_mode = l.thread_mode;
        }
        if a.mask & LIB_ATTR_FIELD_COLL_TYPES != 0 {
            a.coll_types = COLLS_SUPPORTED;
        }
        if a.mask & LIB_ATTR_FIELD_REDUCTION_TYPES != 0 {
            a.reduction_types = ops_supported();
        }
        if a.mask & LIB_ATTR_FIELD_SYNC_TYPE != 0 {
            a.sync_type = NO_SYNC_COLLECTIVES;
        }
        UCC_OK
    })
}

// ----- context configuration ------------------------------------------------------------

/// Context settings: UCC's core options rucx accepts (hints it records).
#[derive(Default)]
struct CtxConfig {
    vars: Vec<(String, String)>,
}

/// Core context options accepted by `ucc_context_config_modify` (component NULL): sizing
/// hints runtimes pass (Open MPI does); rucx needs neither, so they are only recorded.
const CTX_OPTIONS: &[&str] = &["ESTIMATED_NUM_EPS", "ESTIMATED_NUM_PPN"];

#[no_mangle]
pub unsafe extern "C" fn ucc_context_config_read(
    lib: *mut c_void,
    _filename: *const c_char,
    config: *mut *mut c_void,
) -> Status {
    guard(|| {
        let _: &Lib = tri!(handle::get(lib, Kind::Lib));
        if config.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        let p = handle::register(Box::<CtxConfig>::default(), Kind::CtxConfig);
        // SAFETY: non-null handle slot.
        unsafe { config.write(p.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_config_release(config: *mut c_void) {
    let _ = guard(|| {
        // SAFETY: registry-checked CtxConfig from Box::into_raw.
        drop(unsafe { handle::take::<CtxConfig, _>(config, Kind::CtxConfig) });
        UCC_OK
    });
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_config_print(
    config: *const c_void,
    stream: *mut c_void,
    title: *const c_char,
    flags: u32,
) {
    let _ = guard(|| {
        let c: &CtxConfig = tri!(handle::get(config.cast_mut(), Kind::CtxConfig));
        // SAFETY: the caller's stream and title.
        unsafe { print_config(stream, title, flags, "UCC context configuration", &c.vars) };
        UCC_OK
    });
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_config_modify(
    config: *mut c_void,
    component: *const c_char,
    name: *const c_char,
    value: *const c_char,
) -> Status {
    guard(|| {
        let c: &mut CtxConfig = tri!(handle::get_mut(config, Kind::CtxConfig));
        // SAFETY: NULL or C strings, per the contract.
        let (comp, name, value) = unsafe { (opt_str(component), opt_str(name), opt_str(value)) };
        let (Some(name), Some(value)) = (name, value) else {
            return UCC_ERR_INVALID_PARAM;
        };
        if comp.is_some() || !CTX_OPTIONS.contains(&name.as_str()) {
            tracing::warn!("ucc: context option {comp:?}/{name} is not known to rucx");
            return UCC_ERR_NOT_FOUND;
        }
        if value.trim().parse::<u64>().is_err() {
            return UCC_ERR_INVALID_PARAM;
        }
        c.vars.retain(|(n, _)| *n != name);
        c.vars.push((name, value));
        UCC_OK
    })
}

// ----- context -----------------------------------------------------------------------------

pub(crate) struct CtxInner {
    pub cx: coll::Context,
    /// Posted requests whose status is still UCC_INPROGRESS.
    pub active: Vec<*mut Req>,
}

pub(crate) struct Ctx {
    pub inner: Mutex<CtxInner>,
    pub addr: Vec<u8>,
    /// With a context OOB: this process's endpoint and every endpoint's worker address.
    pub oob_addrs: Option<(usize, Vec<Vec<u8>>)>,
    pub teams: AtomicUsize,
    /// `ucc_context_type_t` as asked (exclusive unless said otherwise).
    ctx_type: i32,
    // Dropped after the coll context (fields drop in order): the worker's ucp context.
    _ucp: ucp::Context,
}

impl Ctx {
    fn lock(&self) -> std::sync::MutexGuard<'_, CtxInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_create(
    lib: *mut c_void,
    params: *const ContextParams,
    config: *const c_void,
    context: *mut *mut c_void,
) -> Status {
    guard(|| {
        let _: &Lib = tri!(handle::get(lib, Kind::Lib));
        if params.is_null() || context.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        if !config.is_null() && !handle::is(config, Kind::CtxConfig) {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_context_params_t.
        let p = unsafe { &*params };
        if p.mask & CONTEXT_PARAM_FIELD_SYNC_TYPE != 0 && p.sync_type != NO_SYNC_COLLECTIVES {
            return UCC_ERR_NOT_SUPPORTED;
        }
        // Exclusive or shared: a context's calls are serialised by its lock either way.
        if p.mask & CONTEXT_PARAM_FIELD_TYPE != 0 && !(0..=1).contains(&p.ctx_type) {
            return UCC_ERR_INVALID_PARAM;
        }
        if p.mask & CONTEXT_PARAM_FIELD_MEM_PARAMS != 0 && p.mem_params.n_segments > 0 {
            // Memory attached for one-sided collectives: rucx has none of those.
            return UCC_ERR_NOT_SUPPORTED;
        }
        let ucp_cx =
            tri!(ucp::Context::new(ucp::Features::TAG | ucp::Features::RMA).map_err(status));
        let w = tri!(ucp::Worker::new(&ucp_cx, ucp::ThreadMode::Single).map_err(status));
        let cx = tri!(coll::Context::new(w).map_err(status));
        let addr = cx.address().to_vec();
        let oob_addrs = if p.mask & CONTEXT_PARAM_FIELD_OOB != 0 {
            let mut o = tri!(oob::COob::new(&p.oob));
            let all = tri!(oob::exchange(&mut o, &addr, cx.options().timeout));
            Some((o.rank(), all))
        } else {
            None
        };
        let ctx = Ctx {
            inner: Mutex::new(CtxInner {
                cx,
                active: Vec::new(),
            }),
            addr,
            oob_addrs,
            teams: AtomicUsize::new(0),
            ctx_type: if p.mask & CONTEXT_PARAM_FIELD_TYPE != 0 {
                p.ctx_type
            } else {
                CONTEXT_EXCLUSIVE
            },
            _ucp: ucp_cx,
        };
        let c = handle::register(Box::new(ctx), Kind::Ctx);
        // SAFETY: non-null handle slot.
        unsafe { context.write(c.cast()) };
        UCC_OK
    })
}

/// Drives the context and settles the requests that finished; returns their callbacks
/// (run by the caller once the lock is released).
pub(crate) fn progress_locked(inner: &mut CtxInner) -> Vec<(CollCallback, Status)> {
    let CtxInner { cx, active } = inner;
    cx.progress();
    let mut cbs = Vec::new();
    active.retain(|&rp| {
        // SAFETY: requests in `active` are live (finalize removes them first) and only
        // touched under this lock.
        let r = unsafe { &mut *rp };
        let s = match cx.test(r.req) {
            Ok(true) => {
                if let Some(f) = r.fixup {
                    // SAFETY: the request is not finalized, so its destination is valid.
                    unsafe { f.apply() };
                }
                UCC_OK
            }
            Ok(false) => match r.deadline {
                Some(d) if r.started.elapsed() > d => UCC_ERR_TIMED_OUT,
                _ => return true,
            },
            Err(e) => status(e),
        };
        r.status = s;
        if let Ok(e) = handle::get::<ee::Ee, _>(r.ee, Kind::Ee) {
            e.report(EVENT_COLLECTIVE_COMPLETE, rp.cast());
        }
        if let Some(cb) = r.cb {
            cbs.push((cb, s));
        }
        false
    });
    cbs
}

pub(crate) fn run_callbacks(cbs: Vec<(CollCallback, Status)>) {
    for (cb, s) in cbs {
        if let Some(f) = cb.cb {
            // SAFETY: the callback and its data were given by the application for this
            // collective's completion.
            unsafe { f(cb.data, s) };
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_progress(context: *mut c_void) -> Status {
    guard(|| {
        let c: &Ctx = tri!(handle::get(context, Kind::Ctx));
        let cbs = progress_locked(&mut c.lock());
        run_callbacks(cbs);
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_destroy(context: *mut c_void) -> Status {
    guard(|| {
        let c: &Ctx = tri!(handle::get(context, Kind::Ctx));
        let teams = c.teams.load(Ordering::Acquire);
        if teams > 0 {
            tracing::error!("ucc: context destroyed with {teams} teams alive");
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: registry-checked Ctx from Box::into_raw.
        drop(unsafe { handle::take::<Ctx, _>(context, Kind::Ctx) });
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_context_get_attr(
    context: *mut c_void,
    attr: *mut ContextAttr,
) -> Status {
    guard(|| {
        let c: &Ctx = tri!(handle::get(context, Kind::Ctx));
        if attr.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_context_attr_t.
        let a = unsafe { &mut *attr };
        if a.mask & CONTEXT_ATTR_FIELD_TYPE != 0 {
            a.ctx_type = c.ctx_type;
        }
        if a.mask & CONTEXT_ATTR_FIELD_SYNC_TYPE != 0 {
            a.sync_type = NO_SYNC_COLLECTIVES;
        }
        if a.mask & CONTEXT_ATTR_FIELD_CTX_ADDR != 0 {
            a.ctx_addr = c.addr.as_ptr().cast_mut().cast();
        }
        if a.mask & CONTEXT_ATTR_FIELD_CTX_ADDR_LEN != 0 {
            a.ctx_addr_len = c.addr.len();
        }
        if a.mask & CONTEXT_ATTR_FIELD_WORK_BUFFER_SIZE != 0 {
            a.global_work_buffer_size = 0;
        }
        UCC_OK
    })
}

// ----- teams -------------------------------------------------------------------------------

enum TeamState {
    Creating(coll::TeamCreate),
    Ready(coll::Team),
    Failed(Status),
}

pub(crate) struct TeamC {
    pub(crate) ctx: *mut Ctx,
    state: TeamState,
}

/// Team members from the context's endpoints through an `ucc_ep_map_t`.
unsafe fn ep_map(m: &EpMap, ctx_size: usize) -> Result<Vec<usize>, Status> {
    let n = m.ep_num as usize;
    if n == 0 || n > ctx_size {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    let v: Vec<u64> = match m.map_type {
        EP_MAP_FULL => (0..n as u64).collect(),
        EP_MAP_STRIDED => (0..n as i64)
            .map(|i| (m.a as i64).wrapping_add(i * m.b as i64) as u64)
            .collect(),
        EP_MAP_ARRAY => {
            let p = m.a as *const u8;
            if p.is_null() {
                return Err(UCC_ERR_INVALID_PARAM);
            }
            match m.b {
                // SAFETY: the map holds ep_num elements of elem_size bytes.
                4 => (0..n)
                    .map(|i| unsafe { p.cast::<u32>().add(i).read_unaligned() } as u64)
                    .collect(),
                // SAFETY: as above.
                8 => (0..n)
                    .map(|i| unsafe { p.cast::<u64>().add(i).read_unaligned() })
                    .collect(),
                _ => return Err(UCC_ERR_INVALID_PARAM),
            }
        }
        EP_MAP_CB => {
            if m.a == 0 {
                return Err(UCC_ERR_INVALID_PARAM);
            }
            // SAFETY: a non-null `uint64_t (*)(uint64_t, void *)` given by the application.
            let f: unsafe extern "C" fn(u64, *mut c_void) -> u64 =
                unsafe { std::mem::transmute(m.a as usize) };
            // SAFETY: the application's mapping callback with its context.
            (0..n as u64)
                .map(|i| unsafe { f(i, m.b as *mut c_void) })
                .collect()
        }
        _ => return Err(UCC_ERR_INVALID_PARAM),
    };
    if v.iter().any(|&e| e as usize >= ctx_size) {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    Ok(v.into_iter().map(|e| e as usize).collect())
}

#[no_mangle]
pub unsafe extern "C" fn ucc_team_create_post(
    contexts: *mut *mut c_void,
    num_contexts: u32,
    params: *const TeamParams,
    new_team: *mut *mut c_void,
) -> Status {
    guard(|| {
        if contexts.is_null() || params.is_null() || new_team.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        if num_contexts != 1 {
            return UCC_ERR_NOT_SUPPORTED;
        }
        // SAFETY: one context handle, per num_contexts.
        let cp = unsafe { *contexts };
        let c: &Ctx = tri!(handle::get(cp, Kind::Ctx));
        // SAFETY: non-null ucc_team_params_t.
        let p = unsafe { &*params };
        if p.mask & TEAM_PARAM_FIELD_ORDERING != 0 && p.ordering != COLLECTIVE_POST_ORDERED {
            return UCC_ERR_NOT_SUPPORTED;
        }
        if p.mask & TEAM_PARAM_FIELD_SYNC_TYPE != 0 && p.sync_type != NO_SYNC_COLLECTIVES {
            return UCC_ERR_NOT_SUPPORTED;
        }
        if p.mask & (TEAM_PARAM_FIELD_EP_LIST | TEAM_PARAM_FIELD_P2P_CONN) != 0
            || (p.mask & TEAM_PARAM_FIELD_MEM_PARAMS != 0 && p.mem_params.n_segments > 0)
        {
            return UCC_ERR_NOT_SUPPORTED;
        }
        let state = if p.mask & TEAM_PARAM_FIELD_OOB != 0 {
            let o = tri!(oob::COob::new(&p.oob));
            if p.mask & TEAM_PARAM_FIELD_TEAM_SIZE != 0 && p.team_size != o.size() as u64 {
                return UCC_ERR_INVALID_PARAM;
            }
            if p.mask & TEAM_PARAM_FIELD_EP != 0 && p.ep != o.rank() as u64 {
                return UCC_ERR_INVALID_PARAM;
            }
            let tc = tri!(c.lock().cx.team_create_post(Box::new(o)).map_err(status));
            TeamState::Creating(tc)
        } else {
            // From the context's endpoints (its OOB exchanged the addresses).
            let Some((me, addrs)) = c.oob_addrs.as_ref() else {
                tracing::error!("ucc: a team needs an OOB, or a context created with one");
                return UCC_ERR_INVALID_PARAM;
            };
            let members = if p.mask & TEAM_PARAM_FIELD_EP_MAP != 0 {
                // SAFETY: the map's pointers are the application's, valid for this call.
                tri!(unsafe { ep_map(&p.ep_map, addrs.len()) })
            } else {
                (0..addrs.len()).collect()
            };
            if p.mask & TEAM_PARAM_FIELD_TEAM_SIZE != 0 && p.team_size != members.len() as u64 {
                return UCC_ERR_INVALID_PARAM;
            }
            let Some(rank) = members.iter().position(|m| m == me) else {
                return UCC_ERR_INVALID_PARAM;
            };
            if p.mask & TEAM_PARAM_FIELD_EP != 0 && p.ep != rank as u64 {
                return UCC_ERR_INVALID_PARAM;
            }
            let list = members.iter().map(|&m| addrs[m].clone()).collect();
            let t = tri!(c.lock().cx.team_create(list, rank).map_err(status));
            TeamState::Ready(t)
        };
        c.teams.fetch_add(1, Ordering::AcqRel);
        let t = handle::register(
            Box::new(TeamC {
                ctx: cp.cast(),
                state,
            }),
            Kind::Team,
        );
        // SAFETY: non-null handle slot.
        unsafe { new_team.write(t.cast()) };
        UCC_OK
    })
}

/// A team of the members of `parent` that pass `included` = 1, ranked in parent order.
/// Every member of the parent calls it; the exchange runs over the parent team at once
/// (so the new team is ready when this returns; `ucc_team_create_test` says `UCC_OK`).
/// Members that pass 0 get no team (`*new_team` is NULL).
#[no_mangle]
pub unsafe extern "C" fn ucc_team_create_from_parent(
    _my_ep: u64,
    included: u32,
    parent: *mut c_void,
    new_team: *mut *mut c_void,
) -> Status {
    guard(|| {
        let t: &TeamC = tri!(handle::get(parent, Kind::Team));
        let c: &Ctx = tri!(handle::get(t.ctx, Kind::Ctx));
        let pt = tri!(ready_team(t).map_err(|s| if s == UCC_INPROGRESS {
            UCC_ERR_INVALID_PARAM
        } else {
            s
        }));
        if new_team.is_null() || included > 1 {
            return UCC_ERR_INVALID_PARAM;
        }
        let res = c.lock().cx.team_split(pt, (included == 1).then_some(0), 0);
        let state = match res {
            Ok(Some(tm)) => TeamState::Ready(tm),
            Ok(None) => {
                // SAFETY: non-null handle slot.
                unsafe { new_team.write(std::ptr::null_mut()) };
                return UCC_OK;
            }
            Err(e) => return status(e),
        };
        c.teams.fetch_add(1, Ordering::AcqRel);
        let h = handle::register(Box::new(TeamC { ctx: t.ctx, state }), Kind::Team);
        // SAFETY: non-null handle slot.
        unsafe { new_team.write(h.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_team_create_test(team: *mut c_void) -> Status {
    guard(|| {
        let t: &mut TeamC = tri!(handle::get_mut(team, Kind::Team));
        let c: &Ctx = tri!(handle::get(t.ctx, Kind::Ctx));
        let res = match &mut t.state {
            TeamState::Ready(_) => return UCC_OK,
            TeamState::Failed(s) => return *s,
            TeamState::Creating(tc) => c.lock().cx.team_create_test(tc),
        };
        match res {
            Ok(Some(tm)) => {
                t.state = TeamState::Ready(tm);
                UCC_OK
            }
            Ok(None) => UCC_INPROGRESS,
            Err(e) => {
                t.state = TeamState::Failed(status(e));
                status(e)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_team_destroy(team: *mut c_void) -> Status {
    guard(|| {
        let t: &TeamC = tri!(handle::get(team, Kind::Team));
        let c: &Ctx = tri!(handle::get(t.ctx, Kind::Ctx));
        if let TeamState::Ready(tm) = t.state {
            tri!(c.lock().cx.team_destroy(tm).map_err(status));
        }
        c.teams.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: registry-checked TeamC from Box::into_raw.
        drop(unsafe { handle::take::<TeamC, _>(team, Kind::Team) });
        UCC_OK
    })
}

pub(crate) fn ready_team(t: &TeamC) -> Result<coll::Team, Status> {
    match t.state {
        TeamState::Ready(tm) => Ok(tm),
        TeamState::Creating(_) => Err(UCC_INPROGRESS),
        TeamState::Failed(s) => Err(s),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucc_team_get_attr(team: *mut c_void, attr: *mut TeamAttr) -> Status {
    guard(|| {
        let t: &TeamC = tri!(handle::get(team, Kind::Team));
        let c: &Ctx = tri!(handle::get(t.ctx, Kind::Ctx));
        let tm = tri!(ready_team(t));
        if attr.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_team_attr_t.
        let a = unsafe { &mut *attr };
        if a.mask & !TEAM_ATTR_SUPPORTED != 0 {
            return UCC_ERR_NOT_SUPPORTED;
        }
        let g = c.lock();
        let (rank, size) = (
            tri!(g.cx.rank(tm).map_err(status)),
            tri!(g.cx.size(tm).map_err(status)),
        );
        if a.mask & TEAM_ATTR_FIELD_POST_ORDERING != 0 {
            a.ordering = COLLECTIVE_POST_ORDERED;
        }
        if a.mask & TEAM_ATTR_FIELD_EP != 0 {
            a.ep = rank as u64;
        }
        if a.mask & TEAM_ATTR_FIELD_EP_RANGE != 0 {
            a.ep_range = EP_RANGE_CONTIG;
        }
        if a.mask & TEAM_ATTR_FIELD_SYNC_TYPE != 0 {
            a.sync_type = NO_SYNC_COLLECTIVES;
        }
        if a.mask & TEAM_ATTR_FIELD_SIZE != 0 {
            a.size = size as u32;
        }
        UCC_OK
    })
}

// ----- collectives -------------------------------------------------------------------------

/// A collective request. `status` comes first: the header's inline `ucc_collective_test`
/// reads it through `struct ucc_coll_req`.
#[repr(C)]
pub(crate) struct Req {
    status: Status,
    ctx: *mut Ctx,
    /// The team (an engine checks its requests are its team's).
    pub(crate) team: *mut TeamC,
    /// The engine of a triggered post, told when the collective completes.
    pub(crate) ee: *mut ee::Ee,
    req: coll::CollReq,
    persistent: bool,
    posted: bool,
    cb: Option<CollCallback>,
    deadline: Option<Duration>,
    started: Instant,
    /// Applied on success (UCC's in-place reduce_scatter layout).
    fixup: Option<args::Fixup>,
}

#[no_mangle]
pub unsafe extern "C" fn ucc_collective_init(
    args: *mut CollArgs,
    request: *mut *mut c_void,
    team: *mut c_void,
) -> Status {
    guard(|| {
        let t: &TeamC = tri!(handle::get(team, Kind::Team));
        let c: &Ctx = tri!(handle::get(t.ctx, Kind::Ctx));
        let tm = tri!(ready_team(t).map_err(|s| if s == UCC_INPROGRESS {
            UCC_ERR_INVALID_PARAM
        } else {
            s
        }));
        if args.is_null() || request.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_coll_args_t.
        let a = unsafe { &*args };
        let flags = if a.mask & COLL_ARGS_FIELD_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        if a.mask & COLL_ARGS_FIELD_ACTIVE_SET != 0 {
            return UCC_ERR_NOT_SUPPORTED;
        }
        let mut g = c.lock();
        let (rank, size) = (
            tri!(g.cx.rank(tm).map_err(status)),
            tri!(g.cx.size(tm).map_err(status)),
        );
        // SAFETY: the buffers and arrays `a` points to are the application's, valid until
        // the request is finalized (UCC's contract).
        let (cargs, fixup) = tri!(unsafe { args::translate(a, flags, rank, size) });
        let r = tri!(g.cx.init(tm, cargs).map_err(status));
        drop(g);
        let deadline = (flags & COLL_ARGS_FLAG_TIMEOUT != 0 && a.timeout > 0.0)
            .then(|| Duration::from_secs_f64(a.timeout));
        let req = Req {
            status: UCC_OPERATION_INITIALIZED,
            ctx: t.ctx,
            team: team.cast(),
            ee: std::ptr::null_mut(),
            req: r,
            persistent: flags & COLL_ARGS_FLAG_PERSISTENT != 0,
            posted: false,
            cb: (a.mask & COLL_ARGS_FIELD_CB != 0 && a.cb.cb.is_some()).then_some(a.cb),
            deadline,
            started: Instant::now(),
            fixup,
        };
        let rp = handle::register(Box::new(req), Kind::Req);
        // SAFETY: non-null handle slot.
        unsafe { request.write(rp.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_collective_post(request: *mut c_void) -> Status {
    guard(|| {
        let r: &mut Req = tri!(handle::get_mut(request, Kind::Req));
        let c: &Ctx = tri!(handle::get(r.ctx, Kind::Ctx));
        if r.status == UCC_INPROGRESS || (r.posted && !r.persistent) {
            tracing::error!("ucc: a request is posted again while running or not persistent");
            return UCC_ERR_INVALID_PARAM;
        }
        let mut g = c.lock();
        tri!(g.cx.post(r.req).map_err(status));
        r.posted = true;
        r.status = UCC_INPROGRESS;
        r.started = Instant::now();
        // From here on the request is reached through `active` only.
        g.active.push(request.cast::<Req>());
        let cbs = progress_locked(&mut g);
        drop(g);
        run_callbacks(cbs);
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_collective_init_and_post(
    args: *mut CollArgs,
    request: *mut *mut c_void,
    team: *mut c_void,
) -> Status {
    guard(|| {
        // SAFETY: the caller's arguments, passed on unchanged.
        let s = unsafe { ucc_collective_init(args, request, team) };
        if s != UCC_OK {
            return s;
        }
        // SAFETY: init wrote a live request handle.
        unsafe { ucc_collective_post(*request) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_collective_finalize(request: *mut c_void) -> Status {
    guard(|| {
        let r: &Req = tri!(handle::get(request, Kind::Req));
        let c: &Ctx = tri!(handle::get(r.ctx, Kind::Ctx));
        let mut g = c.lock();
        let rp = request.cast::<Req>();
        g.active.retain(|&p| p != rp);
        let res = g.cx.finalize(r.req);
        drop(g);
        // SAFETY: registry-checked Req from Box::into_raw; no longer in `active`.
        drop(unsafe { handle::take::<Req, _>(request, Kind::Req) });
        match res {
            Ok(_) => UCC_OK,
            Err(e) => status(e),
        }
    })
}
