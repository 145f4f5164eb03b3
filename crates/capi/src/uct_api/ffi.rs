//! The C types of the UCT API with UCX 1.13's layout (x86-64 LP64), and the constants
//! rucx's UCT skin uses.
//!
//! Several UCT calls are `static inline` in UCX's `uct.h`: the program's own code reads
//! `ep->iface->ops.<op>` and calls it, and `uct_worker_progress` walks
//! `worker->progress_q.fast_elems` until a null callback. So the leading part of our
//! interface, endpoint and worker objects must have exactly UCX's layout. Every struct
//! here has compile-time size/offset checks (below); `c-tests/uct_layout.c` prints the same
//! numbers from Debian's headers and `tests/uct_abi.rs` compares them.

#![allow(non_camel_case_types)]

use crate::ffi::{ucs_cpu_set_t, ucs_status_ptr_t, ucs_status_t};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

pub type uct_rkey_t = usize;
pub type uct_mem_h = *mut c_void;
pub type uct_ep_h = *mut UctEpC;
pub type uct_iface_h = *mut UctIfaceC;

/// `ucs_callback_t`.
pub type ucs_callback_t = Option<unsafe extern "C" fn(arg: *mut c_void) -> c_uint>;
/// `uct_am_callback_t`.
pub type uct_am_callback_t = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        data: *mut c_void,
        len: usize,
        flags: c_uint,
    ) -> ucs_status_t,
>;
/// `uct_pack_callback_t`.
pub type uct_pack_callback_t =
    Option<unsafe extern "C" fn(dest: *mut c_void, arg: *mut c_void) -> usize>;
/// `uct_unpack_callback_t`.
pub type uct_unpack_callback_t =
    Option<unsafe extern "C" fn(arg: *mut c_void, data: *const c_void, len: usize)>;
/// `uct_completion_callback_t`.
pub type uct_completion_callback_t = Option<unsafe extern "C" fn(comp: *mut uct_completion_t)>;
/// `uct_pending_callback_t`.
pub type uct_pending_callback_t =
    Option<unsafe extern "C" fn(req: *mut uct_pending_req_t) -> ucs_status_t>;
/// `uct_pending_purge_callback_t`.
pub type uct_pending_purge_callback_t =
    Option<unsafe extern "C" fn(req: *mut uct_pending_req_t, arg: *mut c_void)>;

// ----- constants -----------------------------------------------------------------------

pub const UCT_COMPONENT_NAME_MAX: usize = 16;
pub const UCT_TL_NAME_MAX: usize = 10;
pub const UCT_MD_NAME_MAX: usize = 16;
pub const UCT_DEVICE_NAME_MAX: usize = 32;
pub const UCT_PENDING_REQ_PRIV_LEN: usize = 40;
pub const UCS_CALLBACKQ_FAST_COUNT: usize = 7;
pub const UCS_CALLBACKQ_FLAG_FAST: c_uint = 1 << 0;

pub const UCT_COMPONENT_ATTR_FIELD_NAME: u64 = 1 << 0;
pub const UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT: u64 = 1 << 1;
pub const UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES: u64 = 1 << 2;
pub const UCT_COMPONENT_ATTR_FIELD_FLAGS: u64 = 1 << 3;

pub const UCT_IFACE_FLAG_AM_SHORT: u64 = 1 << 0;
pub const UCT_IFACE_FLAG_AM_BCOPY: u64 = 1 << 1;
pub const UCT_IFACE_FLAG_AM_ZCOPY: u64 = 1 << 2;
pub const UCT_IFACE_FLAG_PENDING: u64 = 1 << 3;
pub const UCT_IFACE_FLAG_PUT_SHORT: u64 = 1 << 4;
pub const UCT_IFACE_FLAG_PUT_BCOPY: u64 = 1 << 5;
pub const UCT_IFACE_FLAG_PUT_ZCOPY: u64 = 1 << 6;
pub const UCT_IFACE_FLAG_GET_BCOPY: u64 = 1 << 9;
pub const UCT_IFACE_FLAG_GET_ZCOPY: u64 = 1 << 10;
pub const UCT_IFACE_FLAG_ATOMIC_CPU: u64 = 1 << 30;
pub const UCT_IFACE_FLAG_CONNECT_TO_IFACE: u64 = 1 << 40;
pub const UCT_IFACE_FLAG_CB_SYNC: u64 = 1 << 44;
pub const UCT_IFACE_FLAG_EVENT_RECV: u64 = 1 << 1;
pub const UCT_IFACE_FLAG_EVENT_FD: u64 = 1 << 3;

pub const UCT_ATOMIC_OP_ADD: c_uint = 0;
pub const UCT_ATOMIC_OP_AND: c_uint = 1;
pub const UCT_ATOMIC_OP_OR: c_uint = 2;
pub const UCT_ATOMIC_OP_XOR: c_uint = 3;
pub const UCT_ATOMIC_OP_SWAP: c_uint = 4;
pub const UCT_ATOMIC_OP_CSWAP: c_uint = 5;

pub const UCT_DEVICE_TYPE_NET: c_uint = 0;
pub const UCT_DEVICE_TYPE_SHM: c_uint = 1;
pub const UCT_DEVICE_TYPE_SELF: c_uint = 3;
/// `UCS_SYS_DEVICE_ID_UNKNOWN`.
pub const UCS_SYS_DEVICE_ID_UNKNOWN: u8 = u8::MAX;

pub const UCT_IFACE_OPEN_MODE_DEVICE: u64 = 1 << 0;
pub const UCT_IFACE_PARAM_FIELD_OPEN_MODE: u64 = 1 << 1;

pub const UCT_EP_PARAM_FIELD_IFACE: u64 = 1 << 0;
pub const UCT_EP_PARAM_FIELD_DEV_ADDR: u64 = 1 << 2;
pub const UCT_EP_PARAM_FIELD_IFACE_ADDR: u64 = 1 << 3;

pub const UCT_MD_FLAG_ALLOC: u64 = 1 << 0;
pub const UCT_MD_FLAG_REG: u64 = 1 << 1;
pub const UCT_MD_FLAG_NEED_RKEY: u64 = 1 << 3;
pub const UCT_MD_FLAG_RKEY_PTR: u64 = 1 << 6;

pub const UCT_ALLOC_METHOD_MD: c_uint = 1;
pub const UCT_ALLOC_METHOD_MMAP: c_uint = 3;
/// `UCS_MEMORY_TYPE_HOST`.
pub const UCS_MEMORY_TYPE_HOST: c_uint = 0;

pub const UCT_PROGRESS_SEND: c_uint = 1 << 0;
pub const UCT_PROGRESS_RECV: c_uint = 1 << 1;

pub const UCT_EVENT_SEND_COMP: c_uint = 1 << 0;
pub const UCT_EVENT_RECV: c_uint = 1 << 1;

// ----- structs ---------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucs_callbackq_elem_t {
    pub cb: ucs_callback_t,
    pub arg: *mut c_void,
    pub flags: c_uint,
    pub id: c_int,
}

#[repr(C)]
pub struct ucs_callbackq_t {
    /// The inline dispatcher calls these in order until an element whose `cb` is null;
    /// the last one is always that terminator.
    pub fast_elems: [ucs_callbackq_elem_t; UCS_CALLBACKQ_FAST_COUNT + 1],
    pub priv_: [u8; 72],
}

#[repr(C)]
pub struct uct_completion_t {
    pub func: uct_completion_callback_t,
    pub count: c_int,
    pub status: ucs_status_t,
}

#[repr(C)]
pub struct uct_pending_req_t {
    pub func: uct_pending_callback_t,
    pub priv_: [u8; UCT_PENDING_REQ_PRIV_LEN],
}

#[repr(C)]
pub struct uct_iov_t {
    pub buffer: *mut c_void,
    pub length: usize,
    pub memh: uct_mem_h,
    pub stride: usize,
    pub count: c_uint,
}

#[repr(C)]
pub struct uct_md_resource_desc_t {
    pub md_name: [c_char; UCT_MD_NAME_MAX],
}

#[repr(C)]
pub struct uct_component_attr_t {
    pub field_mask: u64,
    pub name: [c_char; UCT_COMPONENT_NAME_MAX],
    pub md_resource_count: c_uint,
    pub md_resources: *mut uct_md_resource_desc_t,
    pub flags: u64,
}

#[repr(C)]
pub struct uct_tl_resource_desc_t {
    pub tl_name: [c_char; UCT_TL_NAME_MAX],
    pub dev_name: [c_char; UCT_DEVICE_NAME_MAX],
    pub dev_type: c_uint,
    pub sys_device: u8,
}

/// The put/get capabilities of `uct_iface_attr_t`.
#[repr(C)]
#[derive(Default)]
pub struct uct_rma_cap_t {
    pub max_short: usize,
    pub max_bcopy: usize,
    pub min_zcopy: usize,
    pub max_zcopy: usize,
    pub opt_zcopy_align: usize,
    pub align_mtu: usize,
    pub max_iov: usize,
}

/// The active-message capabilities of `uct_iface_attr_t`.
#[repr(C)]
#[derive(Default)]
pub struct uct_am_cap_t {
    pub max_short: usize,
    pub max_bcopy: usize,
    pub min_zcopy: usize,
    pub max_zcopy: usize,
    pub opt_zcopy_align: usize,
    pub align_mtu: usize,
    pub max_hdr: usize,
    pub max_iov: usize,
}

#[repr(C)]
#[derive(Default)]
pub struct uct_atomic_cap_t {
    pub op_flags: u64,
    pub fop_flags: u64,
}

#[repr(C)]
pub struct uct_iface_cap_t {
    pub put: uct_rma_cap_t,
    pub get: uct_rma_cap_t,
    pub am: uct_am_cap_t,
    /// Tag-matching offload capabilities (rucx has none: all zero).
    pub tag: [usize; 11],
    pub atomic32: uct_atomic_cap_t,
    pub atomic64: uct_atomic_cap_t,
    pub flags: u64,
    pub event_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ucs_linear_func_t {
    pub c: f64,
    pub m: f64,
}

#[repr(C)]
pub struct uct_ppn_bandwidth_t {
    pub dedicated: f64,
    pub shared: f64,
}

#[repr(C)]
pub struct uct_iface_attr_t {
    pub cap: uct_iface_cap_t,
    pub device_addr_len: usize,
    pub iface_addr_len: usize,
    pub ep_addr_len: usize,
    pub max_conn_priv: usize,
    pub listen_sockaddr: libc::sockaddr_storage,
    pub overhead: f64,
    pub bandwidth: uct_ppn_bandwidth_t,
    pub latency: ucs_linear_func_t,
    pub priority: u8,
    pub max_num_eps: usize,
    pub dev_num_paths: c_uint,
}

/// `uct_iface_params_t`, up to the fields rucx reads (it reads `field_mask`, `open_mode`
/// and `mode.device` only; the struct is never created or copied by rucx).
#[repr(C)]
pub struct uct_iface_params_head_t {
    pub field_mask: u64,
    pub cpu_mask: ucs_cpu_set_t,
    pub open_mode: u64,
    pub tl_name: *const c_char,
    pub dev_name: *const c_char,
}

/// `uct_ep_params_t`, up to the fields rucx reads.
#[repr(C)]
pub struct uct_ep_params_head_t {
    pub field_mask: u64,
    pub iface: uct_iface_h,
    pub user_data: *mut c_void,
    pub dev_addr: *const u8,
    pub iface_addr: *const u8,
}

#[repr(C)]
pub struct uct_md_cap_t {
    pub max_alloc: u64,
    pub max_reg: usize,
    pub flags: u64,
    pub reg_mem_types: u64,
    pub detect_mem_types: u64,
    pub alloc_mem_types: u64,
    pub access_mem_types: u64,
}

#[repr(C)]
pub struct uct_md_attr_t {
    pub cap: uct_md_cap_t,
    pub reg_cost: ucs_linear_func_t,
    pub component_name: [c_char; UCT_COMPONENT_NAME_MAX],
    pub rkey_packed_size: usize,
    pub local_cpus: ucs_cpu_set_t,
}

#[repr(C)]
pub struct uct_allocated_memory_t {
    pub address: *mut c_void,
    pub length: usize,
    pub method: c_uint,
    pub mem_type: c_uint,
    pub md: *mut c_void,
    pub memh: uct_mem_h,
}

#[repr(C)]
pub struct uct_rkey_bundle_t {
    pub rkey: uct_rkey_t,
    pub handle: *mut c_void,
    pub type_: *mut c_void,
}

// ----- the operations table ----------------------------------------------------------

type Rkey = uct_rkey_t;
type Comp = *mut uct_completion_t;
type St = ucs_status_t;

/// `uct_iface_ops_t`: one function pointer per operation, in UCX 1.13's order. Slots are
/// never null (unsupported operations point at functions that return
/// `UCS_ERR_UNSUPPORTED`), so they are plain function pointers.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct uct_iface_ops_t {
    pub ep_put_short: unsafe extern "C" fn(uct_ep_h, *const c_void, c_uint, u64, Rkey) -> St,
    pub ep_put_bcopy:
        unsafe extern "C" fn(uct_ep_h, uct_pack_callback_t, *mut c_void, u64, Rkey) -> isize,
    pub ep_put_zcopy:
        unsafe extern "C" fn(uct_ep_h, *const uct_iov_t, usize, u64, Rkey, Comp) -> St,
    pub ep_get_short: unsafe extern "C" fn(uct_ep_h, *mut c_void, c_uint, u64, Rkey) -> St,
    pub ep_get_bcopy: unsafe extern "C" fn(
        uct_ep_h,
        uct_unpack_callback_t,
        *mut c_void,
        usize,
        u64,
        Rkey,
        Comp,
    ) -> St,
    pub ep_get_zcopy:
        unsafe extern "C" fn(uct_ep_h, *const uct_iov_t, usize, u64, Rkey, Comp) -> St,
    pub ep_am_short: unsafe extern "C" fn(uct_ep_h, u8, u64, *const c_void, c_uint) -> St,
    pub ep_am_short_iov: unsafe extern "C" fn(uct_ep_h, u8, *const uct_iov_t, usize) -> St,
    pub ep_am_bcopy:
        unsafe extern "C" fn(uct_ep_h, u8, uct_pack_callback_t, *mut c_void, c_uint) -> isize,
    pub ep_am_zcopy: unsafe extern "C" fn(
        uct_ep_h,
        u8,
        *const c_void,
        c_uint,
        *const uct_iov_t,
        usize,
        c_uint,
        Comp,
    ) -> St,
    pub ep_atomic_cswap64:
        unsafe extern "C" fn(uct_ep_h, u64, u64, u64, Rkey, *mut u64, Comp) -> St,
    pub ep_atomic_cswap32:
        unsafe extern "C" fn(uct_ep_h, u32, u32, u64, Rkey, *mut u32, Comp) -> St,
    pub ep_atomic32_post: unsafe extern "C" fn(uct_ep_h, c_uint, u32, u64, Rkey) -> St,
    pub ep_atomic64_post: unsafe extern "C" fn(uct_ep_h, c_uint, u64, u64, Rkey) -> St,
    pub ep_atomic32_fetch:
        unsafe extern "C" fn(uct_ep_h, c_uint, u32, *mut u32, u64, Rkey, Comp) -> St,
    pub ep_atomic64_fetch:
        unsafe extern "C" fn(uct_ep_h, c_uint, u64, *mut u64, u64, Rkey, Comp) -> St,
    pub ep_tag_eager_short: unsafe extern "C" fn(uct_ep_h, u64, *const c_void, usize) -> St,
    pub ep_tag_eager_bcopy:
        unsafe extern "C" fn(uct_ep_h, u64, u64, uct_pack_callback_t, *mut c_void, c_uint) -> isize,
    pub ep_tag_eager_zcopy:
        unsafe extern "C" fn(uct_ep_h, u64, u64, *const uct_iov_t, usize, c_uint, Comp) -> St,
    pub ep_tag_rndv_zcopy: unsafe extern "C" fn(
        uct_ep_h,
        u64,
        *const c_void,
        c_uint,
        *const uct_iov_t,
        usize,
        c_uint,
        Comp,
    ) -> ucs_status_ptr_t,
    pub ep_tag_rndv_cancel: unsafe extern "C" fn(uct_ep_h, *mut c_void) -> St,
    pub ep_tag_rndv_request:
        unsafe extern "C" fn(uct_ep_h, u64, *const c_void, c_uint, c_uint) -> St,
    pub iface_tag_recv_zcopy:
        unsafe extern "C" fn(uct_iface_h, u64, u64, *const uct_iov_t, usize, *mut c_void) -> St,
    pub iface_tag_recv_cancel: unsafe extern "C" fn(uct_iface_h, *mut c_void, c_int) -> St,
    pub ep_pending_add: unsafe extern "C" fn(uct_ep_h, *mut uct_pending_req_t, c_uint) -> St,
    pub ep_pending_purge: unsafe extern "C" fn(uct_ep_h, uct_pending_purge_callback_t, *mut c_void),
    pub ep_flush: unsafe extern "C" fn(uct_ep_h, c_uint, Comp) -> St,
    pub ep_fence: unsafe extern "C" fn(uct_ep_h, c_uint) -> St,
    pub ep_check: unsafe extern "C" fn(uct_ep_h, c_uint, Comp) -> St,
    pub ep_create: unsafe extern "C" fn(*const uct_ep_params_head_t, *mut uct_ep_h) -> St,
    pub ep_connect: unsafe extern "C" fn(uct_ep_h, *const c_void) -> St,
    pub ep_disconnect: unsafe extern "C" fn(uct_ep_h, c_uint) -> St,
    pub cm_ep_conn_notify: unsafe extern "C" fn(uct_ep_h) -> St,
    pub ep_destroy: unsafe extern "C" fn(uct_ep_h),
    pub ep_get_address: unsafe extern "C" fn(uct_ep_h, *mut u8) -> St,
    pub ep_connect_to_ep: unsafe extern "C" fn(uct_ep_h, *const u8, *const u8) -> St,
    pub iface_accept: unsafe extern "C" fn(uct_iface_h, *mut c_void) -> St,
    pub iface_reject: unsafe extern "C" fn(uct_iface_h, *mut c_void) -> St,
    pub iface_flush: unsafe extern "C" fn(uct_iface_h, c_uint, Comp) -> St,
    pub iface_fence: unsafe extern "C" fn(uct_iface_h, c_uint) -> St,
    pub iface_progress_enable: unsafe extern "C" fn(uct_iface_h, c_uint),
    pub iface_progress_disable: unsafe extern "C" fn(uct_iface_h, c_uint),
    pub iface_progress: unsafe extern "C" fn(uct_iface_h) -> c_uint,
    pub iface_event_fd_get: unsafe extern "C" fn(uct_iface_h, *mut c_int) -> St,
    pub iface_event_arm: unsafe extern "C" fn(uct_iface_h, c_uint) -> St,
    pub iface_close: unsafe extern "C" fn(uct_iface_h),
    pub iface_query: unsafe extern "C" fn(uct_iface_h, *mut uct_iface_attr_t) -> St,
    pub iface_get_device_address: unsafe extern "C" fn(uct_iface_h, *mut u8) -> St,
    pub iface_get_address: unsafe extern "C" fn(uct_iface_h, *mut u8) -> St,
    pub iface_is_reachable: unsafe extern "C" fn(uct_iface_h, *const u8, *const u8) -> c_int,
}

/// `struct uct_iface`: the operations table is all of it; rucx's interface object
/// ([`super::iface::Iface`]) starts with one.
#[repr(C)]
pub struct UctIfaceC {
    pub ops: uct_iface_ops_t,
}

/// `struct uct_ep`: the interface pointer is all of it; rucx's endpoint object starts with
/// one.
#[repr(C)]
pub struct UctEpC {
    pub iface: uct_iface_h,
}

// ----- layout checks (UCX 1.13, x86-64 LP64) ------------------------------------------

macro_rules! layout {
    ($t:ty, $size:expr; $($f:ident @ $off:expr),* $(,)?) => {
        const _: () = {
            assert!(size_of::<$t>() == $size);
            $( assert!(offset_of!($t, $f) == $off); )*
        };
    };
}

layout!(ucs_callbackq_elem_t, 24; cb @ 0, arg @ 8, flags @ 16, id @ 20);
layout!(ucs_callbackq_t, 264; fast_elems @ 0, priv_ @ 192);
layout!(uct_iface_ops_t, 400; ep_put_short @ 0, ep_get_zcopy @ 40, ep_am_short @ 48,
    ep_am_zcopy @ 72, ep_atomic_cswap64 @ 80, ep_atomic64_fetch @ 120, ep_tag_eager_short @ 128,
    iface_tag_recv_cancel @ 184, ep_pending_add @ 192, ep_flush @ 208, ep_check @ 224,
    ep_create @ 232, ep_destroy @ 264, ep_connect_to_ep @ 280, iface_reject @ 296,
    iface_flush @ 304, iface_progress @ 336, iface_event_arm @ 352, iface_close @ 360,
    iface_query @ 368, iface_is_reachable @ 392);
layout!(UctIfaceC, 400; ops @ 0);
layout!(UctEpC, 8; iface @ 0);
layout!(uct_component_attr_t, 48; field_mask @ 0, name @ 8, md_resource_count @ 24,
    md_resources @ 32, flags @ 40);
layout!(uct_md_resource_desc_t, 16; md_name @ 0);
layout!(uct_tl_resource_desc_t, 52; tl_name @ 0, dev_name @ 10, dev_type @ 44, sys_device @ 48);
layout!(uct_iface_cap_t, 312; put @ 0, get @ 56, am @ 112, tag @ 176, atomic32 @ 264,
    atomic64 @ 280, flags @ 296, event_flags @ 304);
layout!(uct_iface_attr_t, 536; cap @ 0, device_addr_len @ 312, iface_addr_len @ 320,
    ep_addr_len @ 328, max_conn_priv @ 336, listen_sockaddr @ 344, overhead @ 472,
    bandwidth @ 480, latency @ 496, priority @ 512, max_num_eps @ 520, dev_num_paths @ 528);
layout!(uct_iface_params_head_t, 160; field_mask @ 0, cpu_mask @ 8, open_mode @ 136,
    tl_name @ 144, dev_name @ 152);
layout!(uct_ep_params_head_t, 40; field_mask @ 0, iface @ 8, user_data @ 16, dev_addr @ 24,
    iface_addr @ 32);
layout!(uct_md_cap_t, 56; max_alloc @ 0, max_reg @ 8, flags @ 16, reg_mem_types @ 24,
    detect_mem_types @ 32, alloc_mem_types @ 40, access_mem_types @ 48);
layout!(uct_md_attr_t, 224; cap @ 0, reg_cost @ 56, component_name @ 72,
    rkey_packed_size @ 88, local_cpus @ 96);
layout!(uct_allocated_memory_t, 40; address @ 0, length @ 8, method @ 16, mem_type @ 20,
    md @ 24, memh @ 32);
layout!(uct_rkey_bundle_t, 24; rkey @ 0, handle @ 8, type_ @ 16);
layout!(uct_completion_t, 16; func @ 0, count @ 8, status @ 12);
layout!(uct_pending_req_t, 48; func @ 0, priv_ @ 8);
layout!(uct_iov_t, 40; buffer @ 0, length @ 8, memh @ 16, stride @ 24, count @ 32);

/// The layout facts the C program `c-tests/uct_layout.c` prints, as "sizeof T n" and
/// "offsetof T.f n" lines with UCX's names, from the Rust mirrors (the test compares).
pub fn layout_lines() -> Vec<String> {
    let mut v = Vec::new();
    let mut s = |t: &str, n: usize| v.push(format!("sizeof {t} {n}"));
    s("ucs_callbackq_elem_t", size_of::<ucs_callbackq_elem_t>());
    s("ucs_callbackq_t", size_of::<ucs_callbackq_t>());
    s("uct_worker_t", size_of::<ucs_callbackq_t>());
    s("uct_iface_ops_t", size_of::<uct_iface_ops_t>());
    s("uct_iface_t", size_of::<UctIfaceC>());
    s("uct_ep_t", size_of::<UctEpC>());
    s("uct_component_attr_t", size_of::<uct_component_attr_t>());
    s(
        "uct_md_resource_desc_t",
        size_of::<uct_md_resource_desc_t>(),
    );
    s(
        "uct_tl_resource_desc_t",
        size_of::<uct_tl_resource_desc_t>(),
    );
    s("uct_iface_attr_t", size_of::<uct_iface_attr_t>());
    s("uct_md_attr_t", size_of::<uct_md_attr_t>());
    s(
        "uct_allocated_memory_t",
        size_of::<uct_allocated_memory_t>(),
    );
    s("uct_rkey_bundle_t", size_of::<uct_rkey_bundle_t>());
    s("uct_completion_t", size_of::<uct_completion_t>());
    s("uct_pending_req_t", size_of::<uct_pending_req_t>());
    s("uct_iov_t", size_of::<uct_iov_t>());
    macro_rules! o {
        ($c:literal, $t:ty, $($f:ident).+) => {
            v.push(format!("offsetof {}.{} {}", $c, stringify!($($f).+), offset_of!($t, $($f).+)))
        };
    }
    o!("ucs_callbackq_elem_t", ucs_callbackq_elem_t, cb);
    o!("ucs_callbackq_elem_t", ucs_callbackq_elem_t, arg);
    o!("ucs_callbackq_elem_t", ucs_callbackq_elem_t, flags);
    o!("ucs_callbackq_elem_t", ucs_callbackq_elem_t, id);
    o!("ucs_callbackq_t", ucs_callbackq_t, fast_elems);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_put_short);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_get_zcopy);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_am_short);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_am_zcopy);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_atomic_cswap64);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_atomic64_fetch);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_tag_eager_short);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_tag_recv_cancel);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_pending_add);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_flush);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_check);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_create);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_destroy);
    o!("uct_iface_ops_t", uct_iface_ops_t, ep_connect_to_ep);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_reject);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_flush);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_progress);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_event_arm);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_close);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_query);
    o!("uct_iface_ops_t", uct_iface_ops_t, iface_is_reachable);
    o!("uct_component_attr_t", uct_component_attr_t, name);
    o!(
        "uct_component_attr_t",
        uct_component_attr_t,
        md_resource_count
    );
    o!("uct_component_attr_t", uct_component_attr_t, md_resources);
    o!("uct_component_attr_t", uct_component_attr_t, flags);
    o!("uct_tl_resource_desc_t", uct_tl_resource_desc_t, dev_name);
    o!("uct_tl_resource_desc_t", uct_tl_resource_desc_t, dev_type);
    o!("uct_tl_resource_desc_t", uct_tl_resource_desc_t, sys_device);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.put);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.get);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.am);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.tag);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.atomic32);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.atomic64);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.flags);
    o!("uct_iface_attr_t", uct_iface_attr_t, cap.event_flags);
    o!("uct_iface_attr_t", uct_iface_attr_t, device_addr_len);
    o!("uct_iface_attr_t", uct_iface_attr_t, iface_addr_len);
    o!("uct_iface_attr_t", uct_iface_attr_t, ep_addr_len);
    o!("uct_iface_attr_t", uct_iface_attr_t, overhead);
    o!("uct_iface_attr_t", uct_iface_attr_t, bandwidth);
    o!("uct_iface_attr_t", uct_iface_attr_t, latency);
    o!("uct_iface_attr_t", uct_iface_attr_t, priority);
    o!("uct_iface_attr_t", uct_iface_attr_t, max_num_eps);
    o!("uct_iface_attr_t", uct_iface_attr_t, dev_num_paths);
    o!("uct_iface_params_t", uct_iface_params_head_t, open_mode);
    v.push(format!(
        "offsetof uct_iface_params_t.mode.device.tl_name {}",
        offset_of!(uct_iface_params_head_t, tl_name)
    ));
    v.push(format!(
        "offsetof uct_iface_params_t.mode.device.dev_name {}",
        offset_of!(uct_iface_params_head_t, dev_name)
    ));
    o!("uct_ep_params_t", uct_ep_params_head_t, iface);
    o!("uct_ep_params_t", uct_ep_params_head_t, dev_addr);
    o!("uct_ep_params_t", uct_ep_params_head_t, iface_addr);
    o!("uct_md_attr_t", uct_md_attr_t, cap.max_alloc);
    o!("uct_md_attr_t", uct_md_attr_t, cap.max_reg);
    o!("uct_md_attr_t", uct_md_attr_t, cap.flags);
    o!("uct_md_attr_t", uct_md_attr_t, cap.access_mem_types);
    o!("uct_md_attr_t", uct_md_attr_t, reg_cost);
    o!("uct_md_attr_t", uct_md_attr_t, component_name);
    o!("uct_md_attr_t", uct_md_attr_t, rkey_packed_size);
    o!("uct_md_attr_t", uct_md_attr_t, local_cpus);
    o!("uct_allocated_memory_t", uct_allocated_memory_t, method);
    o!("uct_allocated_memory_t", uct_allocated_memory_t, mem_type);
    o!("uct_allocated_memory_t", uct_allocated_memory_t, md);
    o!("uct_allocated_memory_t", uct_allocated_memory_t, memh);
    o!("uct_rkey_bundle_t", uct_rkey_bundle_t, handle);
    o!("uct_completion_t", uct_completion_t, count);
    o!("uct_completion_t", uct_completion_t, status);
    o!("uct_pending_req_t", uct_pending_req_t, priv_);
    o!("uct_iov_t", uct_iov_t, memh);
    o!("uct_iov_t", uct_iov_t, stride);
    o!("uct_iov_t", uct_iov_t, count);
    // UCX's field names where ours differ (a Rust keyword or a leading underscore).
    v.iter_mut().for_each(|l| {
        *l = l.replace("priv_", "priv");
    });
    v
}
