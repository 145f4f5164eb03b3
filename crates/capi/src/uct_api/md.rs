//! Components, memory domains, configurations, memory and remote keys.
//!
//! The components are static objects (a `uct_component_h` is a pointer to one of them).
//! All memory domains opened from one component share one Rust [`Md`], so a remote key
//! unpacked through the component (`uct_rkey_unpack` gets no domain) sees every
//! registration of the process, as the self transport's local keys need.
//!
//! A packed key in UCT's fixed-size buffer (`rkey_packed_size` bytes) is one length byte
//! followed by the `uct` crate's packed key; rucx never depends on that key's layout.

use super::ffi::*;
use super::{cstr, put_cstr};
use crate::ffi::ucs_status_t;
use crate::guard;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::{Arc, OnceLock};
use ucs::{Result, Status};
use uct::{IfaceConfig, Md, MemHandle, Transport};

/// How a UCX component maps onto rucx.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `self`: rucx's self transport.
    SelfTl,
    /// `posix` and `sysv`: rucx's shm transport.
    Shm,
    /// `cma`: rucx's shm interface, put/get zcopy over cross-memory attach only.
    Cma,
    /// `tcp`: rucx's tcp transport.
    Tcp,
}

impl Flavor {
    pub(crate) fn transport(self) -> Transport {
        match self {
            Flavor::SelfTl => Transport::SelfTl,
            Flavor::Shm | Flavor::Cma => Transport::Shm,
            Flavor::Tcp => Transport::Tcp,
        }
    }

    /// True when the domain allocates memory in segments a peer maps.
    fn allocates(self) -> bool {
        matches!(self, Flavor::SelfTl | Flavor::Shm)
    }
}

/// A UCT component: one memory domain and one transport of the same name.
pub(crate) struct Component {
    pub(crate) name: &'static str,
    pub(crate) flavor: Flavor,
    md: OnceLock<Arc<Md>>,
}

impl Component {
    const fn new(name: &'static str, flavor: Flavor) -> Component {
        Component {
            name,
            flavor,
            md: OnceLock::new(),
        }
    }

    fn md(&self) -> &Arc<Md> {
        self.md
            .get_or_init(|| Arc::new(Md::open(self.flavor.transport())))
    }

    /// The devices of the component's transport, with UCX's names.
    pub(crate) fn devices(&self) -> Vec<String> {
        match self.flavor {
            Flavor::SelfTl => vec!["memory0".to_string()],
            Flavor::Shm | Flavor::Cma => vec!["memory".to_string()],
            Flavor::Tcp => Transport::Tcp.devices().into_iter().map(|d| d.0).collect(),
        }
    }

    fn dev_type(&self) -> c_uint {
        match self.flavor {
            Flavor::SelfTl => UCT_DEVICE_TYPE_SELF,
            Flavor::Shm | Flavor::Cma => UCT_DEVICE_TYPE_SHM,
            Flavor::Tcp => UCT_DEVICE_TYPE_NET,
        }
    }
}

static COMPONENTS: [Component; 5] = [
    Component::new("self", Flavor::SelfTl),
    Component::new("tcp", Flavor::Tcp),
    Component::new("sysv", Flavor::Shm),
    Component::new("posix", Flavor::Shm),
    Component::new("cma", Flavor::Cma),
];

/// The component behind a `uct_component_h`.
fn component(p: *const c_void) -> Result<&'static Component> {
    COMPONENTS
        .iter()
        .find(|c| std::ptr::eq(*c as *const Component as *const c_void, p))
        .ok_or(Status::InvalidParam)
}

/// Bytes of a packed key in UCT's buffers.
pub(crate) const RKEY_PACKED_SIZE: usize = 1 + uct::rkey::MAX_PACKED_LEN;

const MD_MAGIC: u64 = 0x7275_6378_6d64_0001;
const MEM_MAGIC: u64 = 0x7275_6378_6d65_0002;
const RKEY_MAGIC: u64 = 0x7275_6378_726b_0003;
const CONFIG_MAGIC: u64 = 0x7275_6378_6366_0004;

/// A `uct_md_h`.
pub(crate) struct MdObj {
    magic: u64,
    pub(crate) comp: &'static Component,
    md: Arc<Md>,
}

/// A `uct_mem_h`: a registration or an allocation of a domain.
struct MemObj {
    magic: u64,
    handle: Option<MemHandle>,
    /// Memory rucx mapped for `uct_iface_mem_alloc` and unmaps on free: (address, length).
    mapped: Option<(usize, usize)>,
}

impl Drop for MemObj {
    fn drop(&mut self) {
        // Deregister before unmapping.
        self.handle = None;
        if let Some((addr, len)) = self.mapped.take() {
            // SAFETY: rucx mapped exactly this range in `alloc` and nothing else owns it.
            unsafe { libc::munmap(addr as *mut c_void, len) };
        }
    }
}

/// An unpacked remote key (`uct_rkey_t` is its address).
pub(crate) struct RkeyObj {
    magic: u64,
    pub(crate) rkey: uct::Rkey,
}

/// A configuration from `uct_md_config_read` or `uct_md_iface_config_read`.
struct ConfigObj {
    magic: u64,
    iface: Option<IfaceConfig>,
}

/// The domain behind a `uct_md_h`.
///
/// # Safety
/// `p` is null or a pointer rucx returned from `uct_md_open` (checked by its magic).
pub(crate) unsafe fn md_obj<'a>(p: *mut c_void) -> Result<&'a MdObj> {
    let m = p as *const MdObj;
    // SAFETY: non-null handles of this kind point at a live MdObj (the caller's contract);
    // the magic catches other kinds and closed domains that were not reused.
    if m.is_null() || unsafe { (*m).magic } != MD_MAGIC {
        return Err(Status::InvalidParam);
    }
    // SAFETY: checked above.
    Ok(unsafe { &*m })
}

/// The remote key behind a `uct_rkey_t`.
///
/// # Safety
/// `k` is 0, `UCT_INVALID_RKEY`, or a key from `uct_rkey_unpack` not yet released.
#[inline]
pub(crate) unsafe fn rkey_obj<'a>(k: uct_rkey_t) -> Result<&'a uct::Rkey> {
    let r = k as *const RkeyObj;
    if r.is_null() || k == usize::MAX || k % std::mem::align_of::<RkeyObj>() != 0 {
        return Err(Status::InvalidParam);
    }
    // SAFETY: a live RkeyObj per the caller's contract; the magic catches stale keys.
    if unsafe { (*r).magic } != RKEY_MAGIC {
        return Err(Status::InvalidParam);
    }
    // SAFETY: checked above.
    Ok(unsafe { &(*r).rkey })
}

/// The registration behind a `uct_mem_h`.
unsafe fn mem_obj<'a>(p: uct_mem_h) -> Result<&'a MemObj> {
    let m = p as *const MemObj;
    // SAFETY: a live MemObj per the caller's contract; checked by its magic.
    if m.is_null() || unsafe { (*m).magic } != MEM_MAGIC {
        return Err(Status::InvalidParam);
    }
    // SAFETY: checked above.
    Ok(unsafe { &*m })
}

/// Allocates `len` bytes that peers of `md` can reach: a shared segment where the domain
/// allocates, else anonymous memory registered with the domain. Returns the handle, the
/// address and the allocation method.
pub(crate) fn alloc(md: &MdObj, len: usize) -> Result<(uct_mem_h, *mut c_void, c_uint)> {
    if len == 0 {
        return Err(Status::InvalidParam);
    }
    let (handle, mapped, method) = if md.comp.flavor.allocates() {
        (md.md.mem_alloc(len)?, None, UCT_ALLOC_METHOD_MD)
    } else {
        // SAFETY: an anonymous private mapping of len bytes; no existing memory involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Status::NoMemory);
        }
        // SAFETY: the mapping made just above, unmapped only after the handle is dropped
        // (MemObj's Drop); the application reaches it through raw pointers only.
        match unsafe { md.md.mem_reg(p as *mut u8, len) } {
            Ok(h) => (h, Some((p as usize, len)), UCT_ALLOC_METHOD_MMAP),
            Err(e) => {
                // SAFETY: the mapping made just above.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        }
    };
    let addr = handle.address() as *mut c_void;
    let obj = Box::new(MemObj {
        magic: MEM_MAGIC,
        handle: Some(handle),
        mapped,
    });
    Ok((Box::into_raw(obj) as uct_mem_h, addr, method))
}

/// Frees what [`alloc`] or `uct_md_mem_reg` returned.
///
/// # Safety
/// `p` is a live memory handle of rucx.
pub(crate) unsafe fn free_mem(p: uct_mem_h) -> Result<()> {
    // SAFETY: per the caller.
    unsafe { mem_obj(p) }?;
    // SAFETY: the handle was made by Box::into_raw in `alloc`/`uct_md_mem_reg`; the magic
    // is cleared so a second free is refused while the memory is not reused.
    let mut b = unsafe { Box::from_raw(p as *mut MemObj) };
    b.magic = 0;
    drop(b);
    Ok(())
}

// ----- exports --------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn uct_query_components(
    components_p: *mut *mut *const c_void,
    num_components_p: *mut c_uint,
) -> ucs_status_t {
    guard::status("uct_query_components", || {
        if components_p.is_null() || num_components_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let n = COMPONENTS.len();
        // SAFETY: allocating an array of n pointers; released by uct_release_component_list
        // with free().
        let arr =
            unsafe { libc::calloc(n, std::mem::size_of::<*const c_void>()) } as *mut *const c_void;
        if arr.is_null() {
            return Err(Status::NoMemory);
        }
        for (i, c) in COMPONENTS.iter().enumerate() {
            // SAFETY: i < n, inside the array just allocated.
            unsafe { *arr.add(i) = c as *const Component as *const c_void };
        }
        // SAFETY: both out-pointers checked non-null.
        unsafe {
            *components_p = arr;
            *num_components_p = n as c_uint;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_release_component_list(components: *mut *const c_void) {
    guard::void("uct_release_component_list", || {
        // SAFETY: the array came from calloc in uct_query_components (or is null).
        unsafe { libc::free(components as *mut c_void) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_component_query(
    component_h: *const c_void,
    attr: *mut uct_component_attr_t,
) -> ucs_status_t {
    guard::status("uct_component_query", || {
        let c = component(component_h)?;
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: attr is a caller's uct_component_attr_t (non-null); fields are written
        // only where field_mask asks.
        let a = unsafe { &mut *attr };
        if a.field_mask & UCT_COMPONENT_ATTR_FIELD_NAME != 0 {
            put_cstr(&mut a.name, c.name);
        }
        if a.field_mask & UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT != 0 {
            a.md_resource_count = 1;
        }
        if a.field_mask & UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES != 0 {
            if a.md_resources.is_null() {
                return Err(Status::InvalidParam);
            }
            // SAFETY: the caller provides md_resource_count (1) entries.
            put_cstr(unsafe { &mut (*a.md_resources).md_name }, c.name);
        }
        if a.field_mask & UCT_COMPONENT_ATTR_FIELD_FLAGS != 0 {
            a.flags = 0;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_config_read(
    component_h: *const c_void,
    _env_prefix: *const c_char,
    _filename: *const c_char,
    config_p: *mut *mut c_void,
) -> ucs_status_t {
    guard::status("uct_md_config_read", || {
        component(component_h)?;
        if config_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let c = Box::new(ConfigObj {
            magic: CONFIG_MAGIC,
            iface: None,
        });
        // SAFETY: checked non-null.
        unsafe { *config_p = Box::into_raw(c) as *mut c_void };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_config_release(config: *mut c_void) {
    guard::void("uct_config_release", || {
        let c = config as *mut ConfigObj;
        // SAFETY: a configuration of rucx (checked by its magic) made by Box::into_raw.
        if c.is_null() || unsafe { (*c).magic } != CONFIG_MAGIC {
            return Err(Status::InvalidParam);
        }
        // SAFETY: as above; the magic is cleared against a double release.
        unsafe {
            (*c).magic = 0;
            drop(Box::from_raw(c));
        }
        Ok(())
    })
}

/// The interface configuration of a config handle (defaults from the environment when
/// none was given).
///
/// # Safety
/// `config` is null or a configuration of rucx.
pub(crate) unsafe fn iface_config(config: *const c_void) -> Result<IfaceConfig> {
    let c = config as *const ConfigObj;
    // SAFETY: per the caller, checked by the magic.
    if !c.is_null() && unsafe { (*c).magic } == CONFIG_MAGIC {
        // SAFETY: checked above.
        if let Some(cfg) = unsafe { (*c).iface } {
            return Ok(cfg);
        }
    }
    IfaceConfig::from_env()
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_open(
    component_h: *const c_void,
    md_name: *const c_char,
    _config: *const c_void,
    md_p: *mut *mut c_void,
) -> ucs_status_t {
    guard::status("uct_md_open", || {
        let c = component(component_h)?;
        // SAFETY: a C string per the API.
        let name = unsafe { cstr(md_name) }.ok_or(Status::InvalidParam)?;
        if name != c.name {
            return Err(Status::NoDevice);
        }
        if md_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let m = Box::new(MdObj {
            magic: MD_MAGIC,
            comp: c,
            md: c.md().clone(),
        });
        // SAFETY: checked non-null.
        unsafe { *md_p = Box::into_raw(m) as *mut c_void };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_close(md: *mut c_void) {
    guard::void("uct_md_close", || {
        // SAFETY: per the API; checked by the magic.
        unsafe { md_obj(md) }?;
        // SAFETY: made by Box::into_raw in uct_md_open; the magic is cleared.
        unsafe {
            let b = md as *mut MdObj;
            (*b).magic = 0;
            drop(Box::from_raw(b));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_query_tl_resources(
    md: *mut c_void,
    resources_p: *mut *mut uct_tl_resource_desc_t,
    num_resources_p: *mut c_uint,
) -> ucs_status_t {
    guard::status("uct_md_query_tl_resources", || {
        // SAFETY: per the API.
        let m = unsafe { md_obj(md) }?;
        if resources_p.is_null() || num_resources_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let devs = m.comp.devices();
        // SAFETY: an array of devs.len() (at least one, for a valid pointer) descriptors,
        // zeroed; released with free() by uct_release_tl_resource_list.
        let arr = unsafe {
            libc::calloc(
                devs.len().max(1),
                std::mem::size_of::<uct_tl_resource_desc_t>(),
            )
        } as *mut uct_tl_resource_desc_t;
        if arr.is_null() {
            return Err(Status::NoMemory);
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: i < devs.len(), inside the zeroed array.
            let r = unsafe { &mut *arr.add(i) };
            put_cstr(&mut r.tl_name, m.comp.name);
            put_cstr(&mut r.dev_name, d);
            r.dev_type = m.comp.dev_type();
            r.sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
        }
        // SAFETY: out-pointers checked non-null.
        unsafe {
            *resources_p = arr;
            *num_resources_p = devs.len() as c_uint;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_release_tl_resource_list(resources: *mut uct_tl_resource_desc_t) {
    guard::void("uct_release_tl_resource_list", || {
        // SAFETY: allocated with calloc by uct_md_query_tl_resources (or null).
        unsafe { libc::free(resources as *mut c_void) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_query(md: *mut c_void, attr: *mut uct_md_attr_t) -> ucs_status_t {
    guard::status("uct_md_query", || {
        // SAFETY: per the API.
        let m = unsafe { md_obj(md) }?;
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: uct_md_attr_t has no field mask in UCX 1.13: the caller passes the whole
        // struct, which we fill (all-zero is a valid value of every field).
        let a = unsafe {
            std::ptr::write_bytes(attr, 0, 1);
            &mut *attr
        };
        let flavor = m.comp.flavor;
        let mut flags = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
        if flavor.allocates() {
            flags |= UCT_MD_FLAG_ALLOC;
            a.cap.max_alloc = u64::MAX;
            a.cap.alloc_mem_types = 1 << UCS_MEMORY_TYPE_HOST;
        }
        if flavor == Flavor::Shm {
            flags |= UCT_MD_FLAG_RKEY_PTR;
        }
        a.cap.flags = flags;
        a.cap.max_reg = usize::MAX;
        a.cap.reg_mem_types = 1 << UCS_MEMORY_TYPE_HOST;
        a.cap.access_mem_types = 1 << UCS_MEMORY_TYPE_HOST;
        a.reg_cost = ucs_linear_func_t { c: 1e-7, m: 0.0 };
        put_cstr(&mut a.component_name, m.comp.name);
        a.rkey_packed_size = RKEY_PACKED_SIZE;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_mem_reg(
    md: *mut c_void,
    address: *mut c_void,
    length: usize,
    _flags: c_uint,
    memh_p: *mut uct_mem_h,
) -> ucs_status_t {
    guard::status("uct_md_mem_reg", || {
        // SAFETY: per the API.
        let m = unsafe { md_obj(md) }?;
        if memh_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller of uct_md_mem_reg keeps the memory valid until
        // uct_md_mem_dereg (the UCT API's contract), which drops the handle.
        let h = unsafe { m.md.mem_reg(address as *mut u8, length) }?;
        let obj = Box::new(MemObj {
            magic: MEM_MAGIC,
            handle: Some(h),
            mapped: None,
        });
        // SAFETY: checked non-null.
        unsafe { *memh_p = Box::into_raw(obj) as uct_mem_h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_mem_dereg(md: *mut c_void, memh: uct_mem_h) -> ucs_status_t {
    guard::status("uct_md_mem_dereg", || {
        // SAFETY: per the API.
        unsafe { md_obj(md) }?;
        // SAFETY: per the API; checked by its magic.
        unsafe { free_mem(memh) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_mkey_pack(
    md: *mut c_void,
    memh: uct_mem_h,
    rkey_buffer: *mut c_void,
) -> ucs_status_t {
    guard::status("uct_md_mkey_pack", || {
        // SAFETY: per the API.
        unsafe { md_obj(md) }?;
        // SAFETY: per the API.
        let mem = unsafe { mem_obj(memh) }?;
        let h = mem.handle.as_ref().ok_or(Status::InvalidParam)?;
        if rkey_buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        let packed = h.pack_rkey();
        if packed.len() > uct::rkey::MAX_PACKED_LEN {
            return Err(Status::BufferTooSmall);
        }
        // SAFETY: the caller's buffer holds rkey_packed_size = 1 + MAX_PACKED_LEN bytes.
        unsafe {
            let b = rkey_buffer as *mut u8;
            *b = packed.len() as u8;
            std::ptr::copy_nonoverlapping(packed.as_ptr(), b.add(1), packed.len());
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_rkey_unpack(
    component_h: *const c_void,
    rkey_buffer: *const c_void,
    rkey_ob: *mut uct_rkey_bundle_t,
) -> ucs_status_t {
    guard::status("uct_rkey_unpack", || {
        let c = component(component_h)?;
        if rkey_buffer.is_null() || rkey_ob.is_null() {
            return Err(Status::InvalidParam);
        }
        let b = rkey_buffer as *const u8;
        // SAFETY: the buffer holds rkey_packed_size bytes: a length byte, then the key.
        let len = usize::from(unsafe { *b });
        if len > uct::rkey::MAX_PACKED_LEN {
            return Err(Status::InvalidParam);
        }
        // SAFETY: len <= MAX_PACKED_LEN bytes follow the length byte in the buffer.
        let packed = unsafe { std::slice::from_raw_parts(b.add(1), len) };
        let rkey = c.md().rkey_unpack(packed)?;
        let obj = Box::into_raw(Box::new(RkeyObj {
            magic: RKEY_MAGIC,
            rkey,
        }));
        // SAFETY: checked non-null.
        unsafe {
            (*rkey_ob).rkey = obj as uct_rkey_t;
            (*rkey_ob).handle = std::ptr::null_mut();
            (*rkey_ob).type_ = c as *const Component as *mut c_void;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_rkey_release(
    component_h: *const c_void,
    rkey_ob: *const uct_rkey_bundle_t,
) -> ucs_status_t {
    guard::status("uct_rkey_release", || {
        component(component_h)?;
        if rkey_ob.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: a bundle filled by uct_rkey_unpack.
        let k = unsafe { (*rkey_ob).rkey };
        // SAFETY: checked by rkey_obj (magic); made by Box::into_raw in uct_rkey_unpack.
        unsafe {
            rkey_obj(k)?;
            let r = k as *mut RkeyObj;
            (*r).magic = 0;
            drop(Box::from_raw(r));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn uct_md_iface_config_read(
    md: *mut c_void,
    tl_name: *const c_char,
    _env_prefix: *const c_char,
    _filename: *const c_char,
    config_p: *mut *mut c_void,
) -> ucs_status_t {
    guard::status("uct_md_iface_config_read", || {
        // SAFETY: per the API.
        let m = unsafe { md_obj(md) }?;
        // SAFETY: a C string or null.
        if let Some(tl) = unsafe { cstr(tl_name) } {
            if tl != m.comp.name {
                return Err(Status::NoElem);
            }
        }
        if config_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let c = Box::new(ConfigObj {
            magic: CONFIG_MAGIC,
            iface: Some(IfaceConfig::from_env()?),
        });
        // SAFETY: checked non-null.
        unsafe { *config_p = Box::into_raw(c) as *mut c_void };
        Ok(())
    })
}
