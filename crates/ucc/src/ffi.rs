//! UCC 1.3's C structs and constants, as `#[repr(C)]` mirrors of the header in
//! `include/ucc/api/ucc.h` (x86_64/aarch64 LP64 layouts, checked at compile time).

use std::ffi::c_void;

pub type Status = i32;
pub const UCC_OK: Status = 0;
pub const UCC_INPROGRESS: Status = 1;
pub const UCC_OPERATION_INITIALIZED: Status = 2;
pub const UCC_ERR_NOT_SUPPORTED: Status = -1;
pub const UCC_ERR_NOT_IMPLEMENTED: Status = -2;
pub const UCC_ERR_INVALID_PARAM: Status = -3;
pub const UCC_ERR_NO_MEMORY: Status = -4;
pub const UCC_ERR_NO_RESOURCE: Status = -5;
pub const UCC_ERR_NO_MESSAGE: Status = -6;
pub const UCC_ERR_NOT_FOUND: Status = -7;
pub const UCC_ERR_TIMED_OUT: Status = -8;

pub const fn bit(i: u32) -> u64 {
    1u64 << i
}

// Collective types.
pub const COLL_ALLGATHER: u32 = 1 << 0;
pub const COLL_ALLGATHERV: u32 = 1 << 1;
pub const COLL_ALLREDUCE: u32 = 1 << 2;
pub const COLL_ALLTOALL: u32 = 1 << 3;
pub const COLL_ALLTOALLV: u32 = 1 << 4;
pub const COLL_BARRIER: u32 = 1 << 5;
pub const COLL_BCAST: u32 = 1 << 6;
pub const COLL_FANIN: u32 = 1 << 7;
pub const COLL_FANOUT: u32 = 1 << 8;
pub const COLL_GATHER: u32 = 1 << 9;
pub const COLL_GATHERV: u32 = 1 << 10;
pub const COLL_REDUCE: u32 = 1 << 11;
pub const COLL_REDUCE_SCATTER: u32 = 1 << 12;
pub const COLL_REDUCE_SCATTERV: u32 = 1 << 13;
pub const COLL_SCATTER: u32 = 1 << 14;
pub const COLL_SCATTERV: u32 = 1 << 15;
/// Every collective type rucx implements (all but fan-in and fan-out).
pub const COLLS_SUPPORTED: u64 = 0xffff & !((COLL_FANIN | COLL_FANOUT) as u64);

// Memory types.
pub const MEMORY_TYPE_HOST: i32 = 0;
pub const MEMORY_TYPE_UNKNOWN: i32 = 5;

// Datatypes: predefined ids are shifted by 3; bit 0 marks a generic datatype.
pub const DATATYPE_SHIFT: u32 = 3;
pub const DATATYPE_GENERIC: u64 = 1;
pub const DT_PREDEFINED_LAST: usize = 18;

// Reduction operations.
pub const OP_SUM: i32 = 0;
pub const OP_PROD: i32 = 1;
pub const OP_MAX: i32 = 2;
pub const OP_MIN: i32 = 3;
pub const OP_LAND: i32 = 4;
pub const OP_LOR: i32 = 5;
pub const OP_LXOR: i32 = 6;
pub const OP_BAND: i32 = 7;
pub const OP_BOR: i32 = 8;
pub const OP_BXOR: i32 = 9;
pub const OP_MAXLOC: i32 = 10;
pub const OP_MINLOC: i32 = 11;
pub const OP_AVG: i32 = 12;

// Thread modes and sync types.
pub const THREAD_MULTIPLE: i32 = 2;
pub const NO_SYNC_COLLECTIVES: i32 = 0;

// Library params/attr fields.
pub const LIB_PARAM_FIELD_THREAD_MODE: u64 = bit(0);
pub const LIB_PARAM_FIELD_SYNC_TYPE: u64 = bit(3);
pub const LIB_ATTR_FIELD_THREAD_MODE: u64 = bit(0);
pub const LIB_ATTR_FIELD_COLL_TYPES: u64 = bit(1);
pub const LIB_ATTR_FIELD_REDUCTION_TYPES: u64 = bit(2);
pub const LIB_ATTR_FIELD_SYNC_TYPE: u64 = bit(3);

// Context params/attr fields.
pub const CONTEXT_PARAM_FIELD_TYPE: u64 = bit(0);
pub const CONTEXT_PARAM_FIELD_SYNC_TYPE: u64 = bit(1);
pub const CONTEXT_PARAM_FIELD_OOB: u64 = bit(2);
pub const CONTEXT_PARAM_FIELD_MEM_PARAMS: u64 = bit(4);
pub const CONTEXT_ATTR_FIELD_TYPE: u64 = bit(0);
pub const CONTEXT_ATTR_FIELD_SYNC_TYPE: u64 = bit(1);
pub const CONTEXT_ATTR_FIELD_CTX_ADDR: u64 = bit(2);
pub const CONTEXT_ATTR_FIELD_CTX_ADDR_LEN: u64 = bit(3);
pub const CONTEXT_ATTR_FIELD_WORK_BUFFER_SIZE: u64 = bit(4);
pub const CONTEXT_EXCLUSIVE: i32 = 0;

// Team params/attr fields.
pub const TEAM_PARAM_FIELD_ORDERING: u64 = bit(0);
pub const TEAM_PARAM_FIELD_EP: u64 = bit(2);
pub const TEAM_PARAM_FIELD_EP_LIST: u64 = bit(3);
pub const TEAM_PARAM_FIELD_TEAM_SIZE: u64 = bit(5);
pub const TEAM_PARAM_FIELD_SYNC_TYPE: u64 = bit(6);
pub const TEAM_PARAM_FIELD_OOB: u64 = bit(7);
pub const TEAM_PARAM_FIELD_P2P_CONN: u64 = bit(8);
pub const TEAM_PARAM_FIELD_MEM_PARAMS: u64 = bit(9);
pub const TEAM_PARAM_FIELD_EP_MAP: u64 = bit(10);
pub const TEAM_ATTR_FIELD_POST_ORDERING: u64 = bit(0);
pub const TEAM_ATTR_FIELD_EP: u64 = bit(2);
pub const TEAM_ATTR_FIELD_EP_RANGE: u64 = bit(3);
pub const TEAM_ATTR_FIELD_SYNC_TYPE: u64 = bit(4);
pub const TEAM_ATTR_FIELD_SIZE: u64 = bit(6);
pub const TEAM_ATTR_SUPPORTED: u64 = TEAM_ATTR_FIELD_POST_ORDERING
    | TEAM_ATTR_FIELD_EP
    | TEAM_ATTR_FIELD_EP_RANGE
    | TEAM_ATTR_FIELD_SYNC_TYPE
    | TEAM_ATTR_FIELD_SIZE;
pub const COLLECTIVE_POST_ORDERED: i32 = 0;
pub const EP_RANGE_CONTIG: i32 = 0;
pub const EP_MAP_FULL: i32 = 1;
pub const EP_MAP_STRIDED: i32 = 2;
pub const EP_MAP_ARRAY: i32 = 3;
pub const EP_MAP_CB: i32 = 4;

// Collective args.
pub const COLL_ARGS_FLAG_IN_PLACE: u64 = bit(0);
pub const COLL_ARGS_FLAG_PERSISTENT: u64 = bit(1);
pub const COLL_ARGS_FLAG_COUNT_64BIT: u64 = bit(2);
pub const COLL_ARGS_FLAG_DISPLACEMENTS_64BIT: u64 = bit(3);
pub const COLL_ARGS_FLAG_TIMEOUT: u64 = bit(6);
pub const COLL_ARGS_FIELD_FLAGS: u64 = bit(0);
pub const COLL_ARGS_FIELD_CB: u64 = bit(2);
pub const COLL_ARGS_FIELD_ACTIVE_SET: u64 = bit(4);

pub type AllgatherFn = unsafe extern "C" fn(
    src: *mut c_void,
    recv: *mut c_void,
    size: usize,
    info: *mut c_void,
    req: *mut *mut c_void,
) -> Status;
pub type ReqFn = unsafe extern "C" fn(req: *mut c_void) -> Status;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct OobColl {
    pub allgather: Option<AllgatherFn>,
    pub req_test: Option<ReqFn>,
    pub req_free: Option<ReqFn>,
    pub coll_info: *mut c_void,
    pub n_oob_eps: u32,
    pub oob_ep: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemMapParams {
    pub segments: *mut c_void,
    pub n_segments: u64,
}

#[repr(C)]
pub struct LibParams {
    pub mask: u64,
    pub thread_mode: i32,
    pub coll_types: u64,
    pub reduction_types: u64,
    pub sync_type: i32,
}

pub type LibAttr = LibParams;

#[repr(C)]
pub struct ContextParams {
    pub mask: u64,
    pub ctx_type: i32,
    pub sync_type: i32,
    pub oob: OobColl,
    pub ctx_id: u64,
    pub mem_params: MemMapParams,
}

#[repr(C)]
pub struct ContextAttr {
    pub mask: u64,
    pub ctx_type: i32,
    pub sync_type: i32,
    pub ctx_addr: *mut c_void,
    pub ctx_addr_len: usize,
    pub global_work_buffer_size: u64,
}

#[repr(C)]
pub struct P2pConn {
    pub fns: [*mut c_void; 5],
}

/// `ucc_ep_map_t`: the union holds (start, stride), (map, elem_size) or (cb, cb_ctx).
#[repr(C)]
pub struct EpMap {
    pub map_type: i32,
    pub ep_num: u64,
    pub a: u64,
    pub b: u64,
}

#[repr(C)]
pub struct TeamParams {
    pub mask: u64,
    pub flags: u64,
    pub ordering: i32,
    pub outstanding_colls: u64,
    pub ep: u64,
    pub ep_list: *mut u64,
    pub ep_range: i32,
    pub team_size: u64,
    pub sync_type: i32,
    pub oob: OobColl,
    pub p2p_conn: P2pConn,
    pub mem_params: MemMapParams,
    pub ep_map: EpMap,
    pub id: u64,
}

#[repr(C)]
pub struct TeamAttr {
    pub mask: u64,
    pub ordering: i32,
    pub outstanding_colls: u64,
    pub ep: u64,
    pub ep_range: i32,
    pub sync_type: i32,
    pub mem_params: MemMapParams,
    pub size: u32,
    pub eps: *mut u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BufInfo {
    pub buffer: *mut c_void,
    pub count: u64,
    pub datatype: u64,
    pub mem_type: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BufInfoV {
    pub buffer: *mut c_void,
    pub counts: *mut c_void,
    pub displacements: *mut c_void,
    pub datatype: u64,
    pub mem_type: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union Buf {
    pub info: BufInfo,
    pub info_v: BufInfoV,
}

pub type CollCb = unsafe extern "C" fn(data: *mut c_void, status: Status);

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollCallback {
    pub cb: Option<CollCb>,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct ActiveSet {
    pub start: u64,
    pub stride: i64,
    pub size: u64,
}

#[repr(C)]
pub struct CollArgs {
    pub mask: u64,
    pub coll_type: u32,
    pub src: Buf,
    pub dst: Buf,
    pub op: i32,
    pub flags: u64,
    pub root: u64,
    pub error_type: i32,
    pub tag: u16,
    pub global_work_buffer: *mut c_void,
    pub cb: CollCallback,
    pub timeout: f64,
    pub active_set: ActiveSet,
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<OobColl>() == 40);
    assert!(size_of::<LibParams>() == 40);
    assert!(size_of::<ContextParams>() == 80);
    assert!(size_of::<ContextAttr>() == 40);
    assert!(size_of::<EpMap>() == 32);
    assert!(offset_of!(TeamParams, oob) == 72);
    assert!(offset_of!(TeamParams, ep_map) == 168);
    assert!(size_of::<TeamParams>() == 208);
    assert!(size_of::<TeamAttr>() == 72);
    assert!(size_of::<Buf>() == 40);
    assert!(offset_of!(CollArgs, src) == 16);
    assert!(offset_of!(CollArgs, dst) == 56);
    assert!(offset_of!(CollArgs, op) == 96);
    assert!(offset_of!(CollArgs, tag) == 124);
    assert!(offset_of!(CollArgs, cb) == 136);
    assert!(size_of::<CollArgs>() == 184);
};

// Events and execution engines.
pub const EVENT_COLLECTIVE_POST: i32 = 1 << 0;
pub const EVENT_COLLECTIVE_COMPLETE: i32 = 1 << 1;
pub const EVENT_COMPUTE_COMPLETE: i32 = 1 << 2;
pub const EE_CPU_THREAD: i32 = 1;
pub const EE_LAST: i32 = 3;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Ev {
    pub ev_type: i32,
    pub ev_context: *mut c_void,
    pub ev_context_size: usize,
    pub req: *mut c_void,
}

#[repr(C)]
pub struct EeParams {
    pub ee_type: i32,
    pub ee_context: *mut c_void,
    pub ee_context_size: usize,
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<Ev>() == 32);
    assert!(std::mem::size_of::<EeParams>() == 24);
};
