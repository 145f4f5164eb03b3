//! The C types of the UCP API with UCX 1.13's layout, and the constants of its enums and
//! bit masks.
//!
//! Every struct here is `#[repr(C)]` and has compile-time checks of its size and of the
//! offset of every field, against the numbers of UCX 1.13 on x86-64 Linux (LP64). The C
//! test `c-tests/abi_layout.c` checks the same numbers against Debian's headers and ours.
//!
//! Structs that callers fill (`*_params_t`) are only ever read field by field, and only
//! the fields whose bit is set in `field_mask`: a program built against an older UCX
//! passes a shorter struct, and the bytes after its last field are not ours to read.
//! Structs we fill (`*_attr_t`) are written the same way.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

// ----- scalar types --------------------------------------------------------------------

/// `ucs_status_t`: a packed (one byte) signed enum in UCX.
pub type ucs_status_t = i8;
/// A pointer that may carry a status (see `UCS_PTR_*`).
pub type ucs_status_ptr_t = *mut c_void;
pub type ucp_tag_t = u64;
pub type ucp_datatype_t = u64;
/// C enums of the API are 4 bytes wide.
pub type ucs_thread_mode_t = c_uint;
pub type ucs_memory_type_t = c_uint;
pub type ucp_err_handling_mode_t = c_uint;
pub type ucp_atomic_post_op_t = c_uint;
pub type ucp_atomic_fetch_op_t = c_uint;
pub type ucp_atomic_op_t = c_uint;
pub type ucp_mem_advice_t = c_uint;
pub type ucs_config_print_flags_t = c_uint;

// ----- status codes (values of ucs_status_t) -------------------------------------------

pub const UCS_OK: ucs_status_t = 0;
pub const UCS_INPROGRESS: ucs_status_t = 1;
pub const UCS_ERR_NO_RESOURCE: ucs_status_t = -2;
pub const UCS_ERR_NO_MEMORY: ucs_status_t = -4;
pub const UCS_ERR_INVALID_PARAM: ucs_status_t = -5;
pub const UCS_ERR_UNSUPPORTED: ucs_status_t = -22;
pub const UCS_ERR_LAST: ucs_status_t = -100;

// ----- thread modes, memory types -----------------------------------------------------

pub const UCS_THREAD_MODE_SINGLE: ucs_thread_mode_t = 0;
pub const UCS_THREAD_MODE_SERIALIZED: ucs_thread_mode_t = 1;
pub const UCS_THREAD_MODE_MULTI: ucs_thread_mode_t = 2;

pub const UCS_MEMORY_TYPE_HOST: ucs_memory_type_t = 0;
pub const UCS_MEMORY_TYPE_LAST: ucs_memory_type_t = 5;
pub const UCS_MEMORY_TYPE_UNKNOWN: ucs_memory_type_t = UCS_MEMORY_TYPE_LAST;

// ----- context ------------------------------------------------------------------------

pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_REQUEST_SIZE: u64 = 1 << 1;
pub const UCP_PARAM_FIELD_REQUEST_INIT: u64 = 1 << 2;
pub const UCP_PARAM_FIELD_REQUEST_CLEANUP: u64 = 1 << 3;
pub const UCP_PARAM_FIELD_TAG_SENDER_MASK: u64 = 1 << 4;
pub const UCP_PARAM_FIELD_MT_WORKERS_SHARED: u64 = 1 << 5;
pub const UCP_PARAM_FIELD_ESTIMATED_NUM_EPS: u64 = 1 << 6;
pub const UCP_PARAM_FIELD_ESTIMATED_NUM_PPN: u64 = 1 << 7;
pub const UCP_PARAM_FIELD_NAME: u64 = 1 << 8;

pub const UCP_FEATURE_TAG: u64 = 1 << 0;
pub const UCP_FEATURE_RMA: u64 = 1 << 1;
pub const UCP_FEATURE_AMO32: u64 = 1 << 2;
pub const UCP_FEATURE_AMO64: u64 = 1 << 3;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
pub const UCP_FEATURE_STREAM: u64 = 1 << 5;
pub const UCP_FEATURE_AM: u64 = 1 << 6;

pub const UCP_ATTR_FIELD_REQUEST_SIZE: u64 = 1 << 0;
pub const UCP_ATTR_FIELD_THREAD_MODE: u64 = 1 << 1;
pub const UCP_ATTR_FIELD_MEMORY_TYPES: u64 = 1 << 2;
pub const UCP_ATTR_FIELD_NAME: u64 = 1 << 3;

pub const UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL: u64 = 1 << 0;

pub const UCP_ENTITY_NAME_MAX: usize = 32;

pub type ucp_request_init_callback_t = Option<unsafe extern "C" fn(request: *mut c_void)>;
pub type ucp_request_cleanup_callback_t = Option<unsafe extern "C" fn(request: *mut c_void)>;

#[repr(C)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: ucp_request_init_callback_t,
    pub request_cleanup: ucp_request_cleanup_callback_t,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

#[repr(C)]
pub struct ucp_lib_attr_t {
    pub field_mask: u64,
    pub max_thread_level: ucs_thread_mode_t,
}

#[repr(C)]
pub struct ucp_context_attr_t {
    pub field_mask: u64,
    pub request_size: usize,
    pub thread_mode: ucs_thread_mode_t,
    pub memory_types: u64,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
}

// ----- worker -------------------------------------------------------------------------

pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCP_WORKER_PARAM_FIELD_CPU_MASK: u64 = 1 << 1;
pub const UCP_WORKER_PARAM_FIELD_EVENTS: u64 = 1 << 2;
pub const UCP_WORKER_PARAM_FIELD_USER_DATA: u64 = 1 << 3;
pub const UCP_WORKER_PARAM_FIELD_EVENT_FD: u64 = 1 << 4;
pub const UCP_WORKER_PARAM_FIELD_FLAGS: u64 = 1 << 5;
pub const UCP_WORKER_PARAM_FIELD_NAME: u64 = 1 << 6;
pub const UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT: u64 = 1 << 7;
pub const UCP_WORKER_PARAM_FIELD_CLIENT_ID: u64 = 1 << 8;

pub const UCP_WORKER_ATTR_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCP_WORKER_ATTR_FIELD_ADDRESS: u64 = 1 << 1;
pub const UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS: u64 = 1 << 2;
pub const UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER: u64 = 1 << 3;
pub const UCP_WORKER_ATTR_FIELD_NAME: u64 = 1 << 4;
pub const UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING: u64 = 1 << 5;

pub const UCP_WORKER_ADDRESS_ATTR_FIELD_UID: u64 = 1 << 0;

/// `ucs_cpu_set_t`: 1024 bits.
#[repr(C)]
pub struct ucs_cpu_set_t {
    pub ucs_bits: [u64; 16],
}

#[repr(C)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: ucs_thread_mode_t,
    pub cpu_mask: ucs_cpu_set_t,
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

#[repr(C)]
pub struct ucp_worker_attr_t {
    pub field_mask: u64,
    pub thread_mode: ucs_thread_mode_t,
    pub address_flags: u32,
    pub address: *mut c_void,
    pub address_length: usize,
    pub max_am_header: usize,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    pub max_debug_string: usize,
}

#[repr(C)]
pub struct ucp_worker_address_attr_t {
    pub field_mask: u64,
    pub worker_uid: u64,
}

// ----- endpoints ----------------------------------------------------------------------

pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const UCP_EP_PARAM_FIELD_USER_DATA: u64 = 1 << 3;
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
pub const UCP_EP_PARAM_FIELD_FLAGS: u64 = 1 << 5;
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
pub const UCP_EP_PARAM_FIELD_NAME: u64 = 1 << 7;
pub const UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR: u64 = 1 << 8;

pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;
pub const UCP_EP_CLOSE_MODE_FORCE: c_uint = 0;
pub const UCP_EP_CLOSE_MODE_FLUSH: c_uint = 1;

pub const UCP_EP_ATTR_FIELD_NAME: u64 = 1 << 0;
pub const UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR: u64 = 1 << 1;
pub const UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR: u64 = 1 << 2;

pub type ucp_err_handler_cb_t =
    Option<unsafe extern "C" fn(arg: *mut c_void, ep: *mut c_void, status: ucs_status_t)>;

#[repr(C)]
pub struct ucp_err_handler_t {
    pub cb: ucp_err_handler_cb_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucs_sock_addr_t {
    pub addr: *const libc::sockaddr,
    pub addrlen: libc::socklen_t,
}

#[repr(C)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: ucp_err_handling_mode_t,
    pub err_handler: ucp_err_handler_t,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: ucs_sock_addr_t,
    pub conn_request: *mut c_void,
    pub name: *const c_char,
    pub local_sockaddr: ucs_sock_addr_t,
}

#[repr(C)]
pub struct ucp_ep_attr_t {
    pub field_mask: u64,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    pub local_sockaddr: libc::sockaddr_storage,
    pub remote_sockaddr: libc::sockaddr_storage,
}

#[repr(C)]
pub struct ucp_ep_evaluate_perf_param_t {
    pub field_mask: u64,
    pub message_size: usize,
}

#[repr(C)]
pub struct ucp_ep_evaluate_perf_attr_t {
    pub field_mask: u64,
    pub estimated_time: f64,
}

// ----- listener -----------------------------------------------------------------------

pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 0;
pub const UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER: u64 = 1 << 1;
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = 1 << 2;
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = 1 << 0;
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR: u64 = 1 << 0;
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID: u64 = 1 << 1;

pub type ucp_listener_accept_callback_t =
    Option<unsafe extern "C" fn(ep: *mut c_void, arg: *mut c_void)>;
pub type ucp_listener_conn_callback_t =
    Option<unsafe extern "C" fn(conn_request: *mut c_void, arg: *mut c_void)>;

#[repr(C)]
pub struct ucp_listener_accept_handler_t {
    pub cb: ucp_listener_accept_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_conn_handler_t {
    pub cb: ucp_listener_conn_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_params_t {
    pub field_mask: u64,
    pub sockaddr: ucs_sock_addr_t,
    pub accept_handler: ucp_listener_accept_handler_t,
    pub conn_handler: ucp_listener_conn_handler_t,
}

#[repr(C)]
pub struct ucp_listener_attr_t {
    pub field_mask: u64,
    pub sockaddr: libc::sockaddr_storage,
}

#[repr(C)]
pub struct ucp_conn_request_attr_t {
    pub field_mask: u64,
    pub client_address: libc::sockaddr_storage,
    pub client_id: u64,
}

// ----- memory -------------------------------------------------------------------------

pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_MAP_PARAM_FIELD_FLAGS: u64 = 1 << 2;
pub const UCP_MEM_MAP_PARAM_FIELD_PROT: u64 = 1 << 3;
pub const UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE: u64 = 1 << 4;

pub const UCP_MEM_MAP_NONBLOCK: c_uint = 1 << 0;
pub const UCP_MEM_MAP_ALLOCATE: c_uint = 1 << 1;
pub const UCP_MEM_MAP_FIXED: c_uint = 1 << 2;

pub const UCP_MEM_ATTR_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_ATTR_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_ATTR_FIELD_MEM_TYPE: u64 = 1 << 2;

pub const UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_ADVISE_PARAM_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_ADVISE_PARAM_FIELD_ADVICE: u64 = 1 << 2;

#[repr(C)]
pub struct ucp_mem_map_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: ucs_memory_type_t,
}

#[repr(C)]
pub struct ucp_mem_attr_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub mem_type: ucs_memory_type_t,
}

#[repr(C)]
pub struct ucp_mem_advise_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub advice: ucp_mem_advice_t,
}

// ----- datatypes ----------------------------------------------------------------------

pub const UCP_DATATYPE_CONTIG: u64 = 0;
pub const UCP_DATATYPE_STRIDED: u64 = 1;
pub const UCP_DATATYPE_IOV: u64 = 2;
pub const UCP_DATATYPE_GENERIC: u64 = 7;
pub const UCP_DATATYPE_SHIFT: u32 = 3;
pub const UCP_DATATYPE_CLASS_MASK: u64 = (1 << UCP_DATATYPE_SHIFT) - 1;

#[repr(C)]
pub struct ucp_dt_iov_t {
    pub buffer: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucp_generic_dt_ops_t {
    pub start_pack: Option<
        unsafe extern "C" fn(
            context: *mut c_void,
            buffer: *const c_void,
            count: usize,
        ) -> *mut c_void,
    >,
    pub start_unpack: Option<
        unsafe extern "C" fn(
            context: *mut c_void,
            buffer: *mut c_void,
            count: usize,
        ) -> *mut c_void,
    >,
    pub packed_size: Option<unsafe extern "C" fn(state: *mut c_void) -> usize>,
    pub pack: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            offset: usize,
            dest: *mut c_void,
            max: usize,
        ) -> usize,
    >,
    pub unpack: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            offset: usize,
            src: *const c_void,
            length: usize,
        ) -> ucs_status_t,
    >,
    pub finish: Option<unsafe extern "C" fn(state: *mut c_void)>,
}

// ----- operations ---------------------------------------------------------------------

pub const UCP_OP_ATTR_FIELD_REQUEST: u32 = 1 << 0;
pub const UCP_OP_ATTR_FIELD_CALLBACK: u32 = 1 << 1;
pub const UCP_OP_ATTR_FIELD_USER_DATA: u32 = 1 << 2;
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
pub const UCP_OP_ATTR_FIELD_REPLY_BUFFER: u32 = 1 << 5;
pub const UCP_OP_ATTR_FIELD_MEMORY_TYPE: u32 = 1 << 6;
pub const UCP_OP_ATTR_FIELD_RECV_INFO: u32 = 1 << 7;
pub const UCP_OP_ATTR_FIELD_MEMH: u32 = 1 << 8;
pub const UCP_OP_ATTR_FLAG_NO_IMM_CMPL: u32 = 1 << 16;
pub const UCP_OP_ATTR_FLAG_FAST_CMPL: u32 = 1 << 17;
pub const UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: u32 = 1 << 18;
pub const UCP_OP_ATTR_FLAG_MULTI_SEND: u32 = 1 << 19;

pub const UCP_STREAM_RECV_FLAG_WAITALL: u32 = 1 << 0;

pub const UCP_AM_SEND_FLAG_REPLY: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_EAGER: u32 = 1 << 1;
pub const UCP_AM_SEND_FLAG_RNDV: u32 = 1 << 2;

pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1 << 0;
pub const UCP_AM_FLAG_PERSISTENT_DATA: u32 = 1 << 1;
pub const UCP_CB_PARAM_FLAG_DATA: c_uint = 1 << 0;

pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = 1 << 0;
pub const UCP_AM_RECV_ATTR_FLAG_DATA: u64 = 1 << 16;
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = 1 << 17;

pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = 1 << 1;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;

pub const UCP_REQUEST_ATTR_FIELD_INFO_STRING: u64 = 1 << 0;
pub const UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE: u64 = 1 << 1;
pub const UCP_REQUEST_ATTR_FIELD_STATUS: u64 = 1 << 2;
pub const UCP_REQUEST_ATTR_FIELD_MEM_TYPE: u64 = 1 << 3;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ucp_tag_recv_info_t {
    pub sender_tag: ucp_tag_t,
    pub length: usize,
}

/// `ucp_request_param_t`. The callback and the receive-information pointer are unions
/// in C; here they are plain words whose meaning the operation decides.
#[repr(C)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: usize,
    pub datatype: ucp_datatype_t,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: ucs_memory_type_t,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

#[repr(C)]
pub struct ucp_request_attr_t {
    pub field_mask: u64,
    pub debug_string: *mut c_char,
    pub debug_string_size: usize,
    pub status: ucs_status_t,
    pub mem_type: ucs_memory_type_t,
}

pub type ucp_am_recv_callback_t = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        header: *const c_void,
        header_length: usize,
        data: *mut c_void,
        length: usize,
        param: *const ucp_am_recv_param_t,
    ) -> ucs_status_t,
>;

pub type ucp_am_callback_t = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        data: *mut c_void,
        length: usize,
        reply_ep: *mut c_void,
        flags: c_uint,
    ) -> ucs_status_t,
>;

#[repr(C)]
pub struct ucp_am_handler_param_t {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: ucp_am_recv_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_am_recv_param_t {
    pub recv_attr: u64,
    pub reply_ep: *mut c_void,
}

#[repr(C)]
pub struct ucp_stream_poll_ep_t {
    pub ep: *mut c_void,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub reserved: [u8; 16],
}

// Callback signatures, by the kind of operation that completes.
pub type SendCb = unsafe extern "C" fn(request: *mut c_void, status: ucs_status_t);
pub type SendNbxCb =
    unsafe extern "C" fn(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void);
pub type TagRecvCb = unsafe extern "C" fn(
    request: *mut c_void,
    status: ucs_status_t,
    info: *mut ucp_tag_recv_info_t,
);
pub type TagRecvNbxCb = unsafe extern "C" fn(
    request: *mut c_void,
    status: ucs_status_t,
    info: *const ucp_tag_recv_info_t,
    user_data: *mut c_void,
);
pub type StreamRecvCb =
    unsafe extern "C" fn(request: *mut c_void, status: ucs_status_t, length: usize);
pub type StreamRecvNbxCb = unsafe extern "C" fn(
    request: *mut c_void,
    status: ucs_status_t,
    length: usize,
    user_data: *mut c_void,
);

// ----- atomics ------------------------------------------------------------------------

pub const UCP_ATOMIC_POST_OP_ADD: c_uint = 0;
pub const UCP_ATOMIC_POST_OP_AND: c_uint = 1;
pub const UCP_ATOMIC_POST_OP_OR: c_uint = 2;
pub const UCP_ATOMIC_POST_OP_XOR: c_uint = 3;

pub const UCP_ATOMIC_FETCH_OP_FADD: c_uint = 0;
pub const UCP_ATOMIC_FETCH_OP_SWAP: c_uint = 1;
pub const UCP_ATOMIC_FETCH_OP_CSWAP: c_uint = 2;
pub const UCP_ATOMIC_FETCH_OP_FAND: c_uint = 3;
pub const UCP_ATOMIC_FETCH_OP_FOR: c_uint = 4;
pub const UCP_ATOMIC_FETCH_OP_FXOR: c_uint = 5;

pub const UCP_ATOMIC_OP_ADD: c_uint = 0;
pub const UCP_ATOMIC_OP_SWAP: c_uint = 1;
pub const UCP_ATOMIC_OP_CSWAP: c_uint = 2;
pub const UCP_ATOMIC_OP_AND: c_uint = 3;
pub const UCP_ATOMIC_OP_OR: c_uint = 4;
pub const UCP_ATOMIC_OP_XOR: c_uint = 5;

// ----- ucm ----------------------------------------------------------------------------

pub const UCM_EVENT_VM_MAPPED: c_int = 1 << 16;
pub const UCM_EVENT_VM_UNMAPPED: c_int = 1 << 17;

// ----- layout checks (UCX 1.13, x86-64 LP64) ------------------------------------------

macro_rules! layout {
    ($t:ty, $size:expr; $($f:ident @ $off:expr),* $(,)?) => {
        const _: () = {
            assert!(size_of::<$t>() == $size);
            $( assert!(offset_of!($t, $f) == $off); )*
        };
    };
}

layout!(ucs_cpu_set_t, 128; ucs_bits @ 0);
layout!(ucs_sock_addr_t, 16; addr @ 0, addrlen @ 8);
layout!(ucp_params_t, 80; field_mask @ 0, features @ 8, request_size @ 16, request_init @ 24,
    request_cleanup @ 32, tag_sender_mask @ 40, mt_workers_shared @ 48, estimated_num_eps @ 56,
    estimated_num_ppn @ 64, name @ 72);
layout!(ucp_lib_attr_t, 16; field_mask @ 0, max_thread_level @ 8);
layout!(ucp_context_attr_t, 64; field_mask @ 0, request_size @ 8, thread_mode @ 16,
    memory_types @ 24, name @ 32);
layout!(ucp_worker_params_t, 200; field_mask @ 0, thread_mode @ 8, cpu_mask @ 16, events @ 144,
    user_data @ 152, event_fd @ 160, flags @ 168, name @ 176, am_alignment @ 184,
    client_id @ 192);
layout!(ucp_worker_attr_t, 80; field_mask @ 0, thread_mode @ 8, address_flags @ 12, address @ 16,
    address_length @ 24, max_am_header @ 32, name @ 40, max_debug_string @ 72);
layout!(ucp_worker_address_attr_t, 16; field_mask @ 0, worker_uid @ 8);
layout!(ucp_err_handler_t, 16; cb @ 0, arg @ 8);
layout!(ucp_ep_params_t, 104; field_mask @ 0, address @ 8, err_mode @ 16, err_handler @ 24,
    user_data @ 40, flags @ 48, sockaddr @ 56, conn_request @ 72, name @ 80,
    local_sockaddr @ 88);
layout!(ucp_ep_attr_t, 296; field_mask @ 0, name @ 8, local_sockaddr @ 40,
    remote_sockaddr @ 168);
layout!(ucp_ep_evaluate_perf_param_t, 16; field_mask @ 0, message_size @ 8);
layout!(ucp_ep_evaluate_perf_attr_t, 16; field_mask @ 0, estimated_time @ 8);
layout!(ucp_listener_accept_handler_t, 16; cb @ 0, arg @ 8);
layout!(ucp_listener_conn_handler_t, 16; cb @ 0, arg @ 8);
layout!(ucp_listener_params_t, 56; field_mask @ 0, sockaddr @ 8, accept_handler @ 24,
    conn_handler @ 40);
layout!(ucp_listener_attr_t, 136; field_mask @ 0, sockaddr @ 8);
layout!(ucp_conn_request_attr_t, 144; field_mask @ 0, client_address @ 8, client_id @ 136);
layout!(ucp_mem_map_params_t, 40; field_mask @ 0, address @ 8, length @ 16, flags @ 24,
    prot @ 28, memory_type @ 32);
layout!(ucp_mem_attr_t, 32; field_mask @ 0, address @ 8, length @ 16, mem_type @ 24);
layout!(ucp_mem_advise_params_t, 32; field_mask @ 0, address @ 8, length @ 16, advice @ 24);
layout!(ucp_dt_iov_t, 16; buffer @ 0, length @ 8);
layout!(ucp_generic_dt_ops_t, 48; start_pack @ 0, start_unpack @ 8, packed_size @ 16,
    pack @ 24, unpack @ 32, finish @ 40);
layout!(ucp_tag_recv_info_t, 16; sender_tag @ 0, length @ 8);
layout!(ucp_request_param_t, 72; op_attr_mask @ 0, flags @ 4, request @ 8, cb @ 16,
    datatype @ 24, user_data @ 32, reply_buffer @ 40, memory_type @ 48, recv_info @ 56,
    memh @ 64);
layout!(ucp_request_attr_t, 32; field_mask @ 0, debug_string @ 8, debug_string_size @ 16,
    status @ 24, mem_type @ 28);
layout!(ucp_am_handler_param_t, 32; field_mask @ 0, id @ 8, flags @ 12, cb @ 16, arg @ 24);
layout!(ucp_am_recv_param_t, 16; recv_attr @ 0, reply_ep @ 8);
layout!(ucp_stream_poll_ep_t, 40; ep @ 0, user_data @ 8, flags @ 16, reserved @ 20);
