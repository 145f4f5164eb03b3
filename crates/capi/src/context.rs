//! Configuration objects, contexts, versions, and the library identity.

use crate::core::HDR_SIZE;
use crate::ffi::*;
use crate::guard;
use crate::handle::{handle_kind, Handle};
use crate::text;
use std::ffi::{c_char, c_uint, c_void, CStr};
use ucp::config::{RmaPath, Thresh};
use ucs::{Result, Status};

/// The UCX release whose ABI rucx implements.
pub(crate) const UCX_MAJOR: c_uint = 1;
pub(crate) const UCX_MINOR: c_uint = 13;
pub(crate) const UCX_RELEASE: c_uint = 1;

/// `ucp_get_version_string`: UCX's version, then rucx's.
static VERSION_STRING: &CStr = {
    const S: &str = concat!("1.13.1 (rucx ", env!("CARGO_PKG_VERSION"), ")\0");
    match CStr::from_bytes_with_nul(S.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("version string"),
    }
};

/// Names `ucp_config_modify` applies to the context it creates (others are read from the
/// environment only).
const SETTABLE: [&str; 4] = ["TLS", "RNDV_THRESH", "ZCOPY_THRESH", "RMA_PATH"];

/// A `ucp_config_t`: the environment prefix and the values set with `ucp_config_modify`.
pub(crate) struct Cfg {
    prefix: String,
    set: std::sync::Mutex<Vec<(String, String)>>,
}

handle_kind!(Cfg, 0x7275_6378_6366_6731);

impl Cfg {
    /// The value in effect for `name`: set explicitly, else `UCX_<prefix>_<name>`, else
    /// `UCX_<name>`.
    fn value(&self, name: &str) -> Option<String> {
        let set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, v)) = set.iter().rev().find(|(k, _)| k == name) {
            return Some(v.clone());
        }
        if !self.prefix.is_empty() {
            if let Ok(v) = std::env::var(format!("UCX_{}_{}", self.prefix, name)) {
                return Some(v);
            }
        }
        None
    }
}

fn parse_thresh(v: &str) -> Result<Thresh> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(Thresh::Auto);
    }
    let n = ucs::config::parse_size(v).ok_or(Status::InvalidParam)?;
    Ok(Thresh::Bytes(usize::try_from(n).unwrap_or(usize::MAX)))
}

fn parse_rma_path(v: &str) -> Result<RmaPath> {
    match v.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(RmaPath::Auto),
        "direct" => Ok(RmaPath::Direct),
        "cma" => Ok(RmaPath::Cma),
        "am" | "emulated" => Ok(RmaPath::Emulated),
        _ => Err(Status::InvalidParam),
    }
}

fn apply(c: &mut ucp::Config, name: &str, v: &str) -> Result<()> {
    match name {
        "TLS" => c.transports = ucp::config::parse_tls(v)?,
        "RNDV_THRESH" => c.rndv_thresh = parse_thresh(v)?,
        "ZCOPY_THRESH" => c.zcopy_thresh = parse_thresh(v)?,
        "RMA_PATH" => c.rma_path = parse_rma_path(v)?,
        _ => return Err(Status::NoElem),
    }
    Ok(())
}

/// The configuration a context is made with.
fn build(cfg: Option<&Cfg>) -> Result<(ucp::Config, uct::IfaceConfig)> {
    let mut c = ucp::Config::from_env()?;
    let ic = uct::IfaceConfig::from_env()?;
    if let Some(cfg) = cfg {
        for name in SETTABLE {
            if let Some(v) = cfg.value(name) {
                apply(&mut c, name, &v).inspect_err(|_| {
                    tracing::error!("invalid value '{v}' for UCX_{name}");
                })?;
            }
        }
    }
    Ok((c, ic))
}

/// A context handle's value.
pub(crate) struct Ctx {
    pub ctx: ucp::Context,
    pub features: u64,
    /// Bytes the application reserves in every request (`request_size`).
    pub req_size: usize,
    pub req_init: ucp_request_init_callback_t,
    pub req_cleanup: ucp_request_cleanup_callback_t,
    pub mt_shared: bool,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
}

handle_kind!(Ctx, 0x7275_6378_6374_7831);

// SAFETY: the Rust context is shared and synchronised internally; the C callbacks are
// plain function pointers.
unsafe impl Send for Ctx {}

/// Where this library was loaded from (for the log line that identifies rucx).
fn library_path() -> String {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let f: unsafe extern "C" fn() -> *const c_char = ucp_get_version_string;
    // SAFETY: dladdr on an address of this library, with a valid out-struct.
    let ok = unsafe { libc::dladdr(f as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return "(unknown path)".into();
    }
    // SAFETY: dladdr's file name is a NUL-terminated string of the loader.
    unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned()
}

/// Logs, once per process, that rucx (not UCX) serves the UCX API.
pub(crate) fn announce() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        ucs::log::init();
        tracing::info!(
            "rucx {} loaded as the UCX 1.13 C API (UCP) from {}",
            env!("CARGO_PKG_VERSION"),
            library_path()
        );
    });
}

/// Writes `text` to a C stream (nothing for a null stream).
fn features_from_c(f: u64) -> ucp::Features {
    let mut out = ucp::Features::empty();
    let map = [
        (UCP_FEATURE_TAG, ucp::Features::TAG),
        (UCP_FEATURE_RMA, ucp::Features::RMA),
        (UCP_FEATURE_AMO32, ucp::Features::AMO32),
        (UCP_FEATURE_AMO64, ucp::Features::AMO64),
        (UCP_FEATURE_WAKEUP, ucp::Features::WAKEUP),
        (UCP_FEATURE_STREAM, ucp::Features::STREAM),
        (UCP_FEATURE_AM, ucp::Features::AM),
    ];
    for (c, r) in map {
        if f & c != 0 {
            out |= r;
        }
    }
    out
}

// ----- exports ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ucp_get_version(
    major_version: *mut c_uint,
    minor_version: *mut c_uint,
    release_number: *mut c_uint,
) {
    guard::void("ucp_get_version", || {
        // SAFETY: the caller's output pointers (null ones are skipped).
        unsafe {
            if !major_version.is_null() {
                *major_version = UCX_MAJOR;
            }
            if !minor_version.is_null() {
                *minor_version = UCX_MINOR;
            }
            if !release_number.is_null() {
                *release_number = UCX_RELEASE;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ucp_get_version_string() -> *const c_char {
    VERSION_STRING.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn ucp_lib_query(attr: *mut ucp_lib_attr_t) -> ucs_status_t {
    guard::status("ucp_lib_query", || {
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct.
        unsafe {
            if (*attr).field_mask & UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL != 0 {
                (*attr).max_thread_level = UCS_THREAD_MODE_MULTI;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_config_read(
    env_prefix: *const c_char,
    filename: *const c_char,
    config_p: *mut *mut Handle<Cfg>,
) -> ucs_status_t {
    guard::status("ucp_config_read", || {
        announce();
        if config_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let prefix = if env_prefix.is_null() {
            String::new()
        } else {
            // SAFETY: the caller's NUL-terminated prefix.
            unsafe { CStr::from_ptr(env_prefix) }
                .to_string_lossy()
                .trim_end_matches('_')
                .to_string()
        };
        if !filename.is_null() {
            tracing::debug!("ucp_config_read: configuration files are not read by rucx");
        }
        let (h, _) = Handle::alloc(Cfg {
            prefix,
            set: std::sync::Mutex::new(Vec::new()),
        });
        // SAFETY: the caller's output pointer.
        unsafe { *config_p = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_config_release(config: *mut Handle<Cfg>) {
    // SAFETY: the caller's configuration handle.
    guard::void("ucp_config_release", || unsafe {
        Handle::destroy(config).map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_config_modify(
    config: *mut Handle<Cfg>,
    name: *const c_char,
    value: *const c_char,
) -> ucs_status_t {
    guard::status("ucp_config_modify", || {
        // SAFETY: the caller's configuration handle.
        let cfg = unsafe { Handle::get(config)? };
        if name.is_null() || value.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's NUL-terminated strings.
        let (n, v) = unsafe {
            (
                CStr::from_ptr(name).to_string_lossy().into_owned(),
                CStr::from_ptr(value).to_string_lossy().into_owned(),
            )
        };
        let n = n.trim_start_matches("UCX_").to_ascii_uppercase();
        if SETTABLE.contains(&n.as_str()) {
            // Check the value now, as UCX does.
            apply(&mut ucp::Config::default(), &n, &v)?;
            cfg.set
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((n, v));
            return Ok(());
        }
        if ucs::config::registered().iter().any(|var| var.name == n) {
            tracing::warn!(
                "ucp_config_modify: UCX_{n} can only be set in the environment with rucx"
            );
            return Err(Status::Unsupported);
        }
        Err(Status::NoElem)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_config_print(
    config: *const Handle<Cfg>,
    stream: *mut libc::FILE,
    title: *const c_char,
    print_flags: ucs_config_print_flags_t,
) {
    guard::void("ucp_config_print", || {
        // SAFETY: the caller's configuration handle (null: the environment only).
        let cfg = if config.is_null() {
            None
        } else {
            // SAFETY: the caller's configuration handle.
            Some(unsafe { Handle::get(config)? })
        };
        let mut out = String::new();
        if print_flags & (1 << 1) != 0 {
            let t = if title.is_null() {
                "UCP configuration".into()
            } else {
                // SAFETY: the caller's NUL-terminated title.
                unsafe { CStr::from_ptr(title) }
                    .to_string_lossy()
                    .into_owned()
            };
            out.push_str(&format!("#\n# {t} (rucx)\n#\n"));
        }
        for var in ucs::config::registered() {
            let v = cfg
                .and_then(|c| c.value(var.name))
                .unwrap_or_else(|| ucs::config::raw(&var));
            if print_flags & (1 << 2) != 0 {
                out.push_str(&format!("#\n# {}\n#\n", var.doc));
            }
            out.push_str(&format!("UCX_{}={}\n", var.name, v));
        }
        text::print_to(stream, &out);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_init_version(
    api_major_version: c_uint,
    api_minor_version: c_uint,
    params: *const ucp_params_t,
    config: *const Handle<Cfg>,
    context_p: *mut *mut Handle<Ctx>,
) -> ucs_status_t {
    guard::status("ucp_init_version", || {
        announce();
        if api_major_version != UCX_MAJOR || api_minor_version > UCX_MINOR {
            tracing::warn!(
                "UCP API version {api_major_version}.{api_minor_version} requested; rucx implements {UCX_MAJOR}.{UCX_MINOR}"
            );
        }
        if params.is_null() || context_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params; fields are read by their mask bits.
        let (features, req_size, req_init, req_cleanup, mt_shared, name) = unsafe {
            let p = &*params;
            let m = p.field_mask;
            (
                if m & UCP_PARAM_FIELD_FEATURES != 0 {
                    p.features
                } else {
                    0
                },
                if m & UCP_PARAM_FIELD_REQUEST_SIZE != 0 {
                    p.request_size
                } else {
                    0
                },
                if m & UCP_PARAM_FIELD_REQUEST_INIT != 0 {
                    p.request_init
                } else {
                    None
                },
                if m & UCP_PARAM_FIELD_REQUEST_CLEANUP != 0 {
                    p.request_cleanup
                } else {
                    None
                },
                m & UCP_PARAM_FIELD_MT_WORKERS_SHARED != 0 && p.mt_workers_shared != 0,
                if m & UCP_PARAM_FIELD_NAME != 0 {
                    p.name
                } else {
                    std::ptr::null()
                },
            )
        };
        if features == 0 {
            tracing::error!("ucp_init: no features requested");
            return Err(Status::InvalidParam);
        }
        if req_size > 1 << 20 {
            return Err(Status::InvalidParam);
        }
        let cfg = if config.is_null() {
            None
        } else {
            // SAFETY: the caller's configuration handle.
            Some(unsafe { Handle::get(config)? })
        };
        let (c, ic) = build(cfg)?;
        let ctx = ucp::Context::with_config(features_from_c(features), c, ic)?;
        let mut cname = [0 as c_char; UCP_ENTITY_NAME_MAX];
        text::default_name("context", &mut cname);
        if !name.is_null() {
            // SAFETY: the caller's NUL-terminated name.
            let s = unsafe { CStr::from_ptr(name) }.to_bytes();
            let n = s.len().min(UCP_ENTITY_NAME_MAX - 1);
            for (d, &b) in cname.iter_mut().zip(&s[..n]) {
                *d = b as c_char;
            }
            cname[n] = 0;
        }
        tracing::debug!(
            "rucx: context with features {features:#x}, {} transports",
            ctx.resources().len()
        );
        let (h, _) = Handle::alloc(Ctx {
            ctx,
            features,
            req_size,
            req_init,
            req_cleanup,
            mt_shared,
            name: cname,
        });
        // SAFETY: the caller's output pointer.
        unsafe { *context_p = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_cleanup(context: *mut Handle<Ctx>) {
    // SAFETY: the caller's context handle, no longer used.
    guard::void("ucp_cleanup", || unsafe {
        Handle::destroy(context).map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_context_query(
    context: *mut Handle<Ctx>,
    attr: *mut ucp_context_attr_t,
) -> ucs_status_t {
    guard::status("ucp_context_query", || {
        // SAFETY: the caller's context handle.
        let ctx = unsafe { Handle::get(context)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct; fields written by mask.
        unsafe {
            let m = (*attr).field_mask;
            if m & UCP_ATTR_FIELD_REQUEST_SIZE != 0 {
                (*attr).request_size = HDR_SIZE;
            }
            if m & UCP_ATTR_FIELD_THREAD_MODE != 0 {
                (*attr).thread_mode = if ctx.mt_shared {
                    UCS_THREAD_MODE_MULTI
                } else {
                    UCS_THREAD_MODE_SINGLE
                };
            }
            if m & UCP_ATTR_FIELD_MEMORY_TYPES != 0 {
                (*attr).memory_types = 1 << UCS_MEMORY_TYPE_HOST;
            }
            if m & UCP_ATTR_FIELD_NAME != 0 {
                (*attr).name = ctx.name;
            }
        }
        Ok(())
    })
}

/// The resource lines of `ucp_context_print_info`, in the form Open MPI's support check
/// reads (`# resource N : md N dev N flags -- transport/device`).
pub(crate) fn context_info(ctx: &Ctx) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "#\n# UCP context {} (rucx {}, UCX {}.{}.{} API)\n#   features {:#x}\n#\n",
        text::name_str(&ctx.name),
        env!("CARGO_PKG_VERSION"),
        UCX_MAJOR,
        UCX_MINOR,
        UCX_RELEASE,
        ctx.features
    ));
    for (i, r) in ctx.ctx.resources().iter().enumerate() {
        s.push_str(&format!(
            "#     md {i}  :  component {}\n",
            r.transport.name()
        ));
    }
    s.push_str("#\n");
    for (i, r) in ctx.ctx.resources().iter().enumerate() {
        s.push_str(&format!(
            "#   resource {i}  :  md {i}  dev {i}  flags -- {}/{}\n",
            r.transport.name(),
            r.device
        ));
    }
    s.push_str("#\n");
    s
}

#[no_mangle]
pub unsafe extern "C" fn ucp_context_print_info(
    context: *const Handle<Ctx>,
    stream: *mut libc::FILE,
) {
    guard::void("ucp_context_print_info", || {
        // SAFETY: the caller's context handle.
        let ctx = unsafe { Handle::get(context)? };
        text::print_to(stream, &context_info(ctx));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_mem_print_info(
    mem_size: *const c_char,
    context: *mut Handle<Ctx>,
    stream: *mut libc::FILE,
) {
    guard::void("ucp_mem_print_info", || {
        // SAFETY: the caller's context handle.
        unsafe { Handle::get(context)? };
        let size = if mem_size.is_null() {
            String::new()
        } else {
            // SAFETY: the caller's NUL-terminated string.
            unsafe { CStr::from_ptr(mem_size) }
                .to_string_lossy()
                .into_owned()
        };
        text::print_to(
            stream,
            &format!(
                "#\n# rucx memory mapping of {size}: allocated in a shared segment (direct access by peers on the host) or registered (cross-memory attach)\n#\n"
            ),
        );
        Ok(())
    })
}
