//! UCC's executor (`ucc_ee_executor_*`), which UCC's tools link to although `ucc.h` does
//! not declare it, with its host (`UCC_EE_CPU_THREAD`) behaviour: tasks (reductions of
//! several sources, strided reductions, several independent reductions, copies) run
//! when posted, on the calling thread, with coll's reduction loops; a posted task is
//! complete at once. AVG reduces as a sum (callers scale it with alpha); alpha applies to
//! float32 and float64.

use crate::args::{coll_dt, coll_op};
use crate::ffi::*;
use crate::guard;
use coll::DataType;
use std::ffi::c_void;

pub const NUM_BUFS: usize = 9;
pub const MULTI_OP_NUM_BUFS: usize = 7;

pub const TASK_REDUCE: u16 = 1 << 0;
pub const TASK_REDUCE_STRIDED: u16 = 1 << 1;
pub const TASK_REDUCE_MULTI_DST: u16 = 1 << 2;
pub const TASK_COPY: u16 = 1 << 3;
pub const TASK_COPY_MULTI: u16 = 1 << 4;
pub const FLAG_REDUCE_WITH_ALPHA: u16 = 1 << 0;
pub const FLAG_REDUCE_SRCS_EXT: u16 = 1 << 1;
pub const PARAM_FIELD_TYPE: u64 = 1 << 0;

/// `ucc_ee_executor_t`, followed by rucx's state.
#[repr(C)]
pub struct Executor {
    pub ee_type: i32,
    pub ee_context: *mut c_void,
    started: bool,
}

#[repr(C)]
pub struct ExecutorParams {
    pub mask: u64,
    pub ee_type: i32,
    pub task_types: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskReduce {
    pub dst: *mut c_void,
    /// `srcs[NUM_BUFS]`, or `srcs_ext` (a `void **`) in the first slot.
    pub srcs: [*mut c_void; NUM_BUFS],
    pub count: usize,
    pub alpha: f64,
    pub dt: u64,
    pub op: i32,
    pub n_srcs: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskReduceStrided {
    pub dst: *mut c_void,
    pub src1: *mut c_void,
    pub src2: *mut c_void,
    pub stride: usize,
    pub count: usize,
    pub alpha: f64,
    pub dt: u64,
    pub op: i32,
    pub n_src2: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskReduceMultiDst {
    pub dst: [*mut c_void; MULTI_OP_NUM_BUFS],
    pub src1: [*mut c_void; MULTI_OP_NUM_BUFS],
    pub src2: [*mut c_void; MULTI_OP_NUM_BUFS],
    pub counts: [usize; MULTI_OP_NUM_BUFS],
    pub dt: u64,
    pub op: i32,
    pub n_bufs: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskCopy {
    pub src: *const c_void,
    pub dst: *mut c_void,
    pub len: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskCopyMulti {
    pub src: [*mut c_void; MULTI_OP_NUM_BUFS],
    pub dst: [*mut c_void; MULTI_OP_NUM_BUFS],
    pub counts: [usize; MULTI_OP_NUM_BUFS],
    pub num_vectors: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union TaskUnion {
    pub reduce: TaskReduce,
    pub reduce_strided: TaskReduceStrided,
    pub reduce_multi_dst: TaskReduceMultiDst,
    pub copy: TaskCopy,
    pub copy_multi: TaskCopyMulti,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskArgs {
    pub task_type: u16,
    pub flags: u16,
    pub u: TaskUnion,
}

/// `ucc_ee_executor_task_t`.
#[repr(C)]
pub struct Task {
    pub eee: *mut Executor,
    pub args: TaskArgs,
    pub status: Status,
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<TaskReduce>() == 112);
    assert!(size_of::<TaskReduceMultiDst>() == 240);
    assert!(offset_of!(TaskArgs, u) == 8);
    assert!(size_of::<TaskArgs>() == 248);
    assert!(size_of::<Task>() == 264);
    assert!(size_of::<ExecutorParams>() == 24);
};

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_init(
    params: *const ExecutorParams,
    executor: *mut *mut Executor,
) -> Status {
    guard(|| {
        if params.is_null() || executor.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_ee_executor_params_t.
        let p = unsafe { &*params };
        if p.mask & PARAM_FIELD_TYPE == 0 {
            return UCC_ERR_INVALID_PARAM;
        }
        match p.ee_type {
            EE_CPU_THREAD => {}
            0..EE_LAST => return UCC_ERR_NOT_SUPPORTED,
            _ => return UCC_ERR_INVALID_PARAM,
        }
        let e = crate::handle::register(
            Box::new(Executor {
                ee_type: EE_CPU_THREAD,
                ee_context: std::ptr::null_mut(),
                started: false,
            }),
            crate::handle::Kind::Executor,
        );
        // SAFETY: non-null out pointer.
        unsafe { executor.write(e) };
        UCC_OK
    })
}

fn exec_mut<'a>(e: *mut Executor) -> Result<&'a mut Executor, Status> {
    crate::handle::get_mut(e, crate::handle::Kind::Executor)
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_status(executor: *const Executor) -> Status {
    guard(|| match exec_mut(executor.cast_mut()) {
        Ok(e) if e.started => UCC_OK,
        Ok(_) => UCC_OPERATION_INITIALIZED,
        Err(s) => s,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_start(
    executor: *mut Executor,
    ee_context: *mut c_void,
) -> Status {
    guard(|| match exec_mut(executor) {
        Ok(e) => {
            e.ee_context = ee_context;
            e.started = true;
            UCC_OK
        }
        Err(s) => s,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_stop(executor: *mut Executor) -> Status {
    guard(|| match exec_mut(executor) {
        Ok(e) => {
            e.started = false;
            UCC_OK
        }
        Err(s) => s,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_finalize(executor: *mut Executor) -> Status {
    guard(|| {
        // SAFETY: registry-checked Executor from Box::into_raw.
        match unsafe { crate::handle::take::<Executor, _>(executor, crate::handle::Kind::Executor) }
        {
            Some(_) => UCC_OK,
            None => UCC_ERR_INVALID_PARAM,
        }
    })
}

/// `dst = srcs[0] op srcs[1] op ...` over `count` elements, then `* alpha` if asked.
///
/// # Safety
/// Every pointer names `count` elements of `dt`; `dst` may coincide with a source.
unsafe fn reduce_into(
    dst: *mut c_void,
    srcs: &[*const c_void],
    count: usize,
    dt: u64,
    op: i32,
    alpha: Option<f64>,
) -> Status {
    let (dt, op) = match (coll_dt(dt), coll_op(op)) {
        // AVG is a sum here: the caller scales it with alpha (as UCC's own collectives
        // do, passing 1/team size).
        (Ok(d), Ok(coll::Op::Avg)) => (d, coll::Op::Sum),
        (Ok(d), Ok(o)) => (d, o),
        (Err(s), _) | (_, Err(s)) => return s,
    };
    if !coll::dtype::supported(dt, op) {
        return UCC_ERR_NOT_SUPPORTED;
    }
    let len = count * dt.size();
    if len == 0 {
        return UCC_OK;
    }
    if dst.is_null() || srcs.is_empty() || srcs.iter().any(|s| s.is_null()) {
        return UCC_ERR_INVALID_PARAM;
    }
    // Sources are copied out first, so that `dst` may alias any of them.
    // SAFETY: each source holds `len` bytes (the caller's contract).
    let copies: Vec<Vec<u8>> = srcs
        .iter()
        .map(|&s| unsafe { std::slice::from_raw_parts(s.cast::<u8>(), len) }.to_vec())
        .collect();
    let mut acc = copies[0].clone();
    for c in &copies[1..] {
        if let Err(e) = coll::dtype::reduce(dt, op, &mut acc, c) {
            return crate::status(e);
        }
    }
    if let Some(a) = alpha {
        match dt {
            DataType::Float32 => acc.chunks_exact_mut(4).for_each(|c| {
                let v = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]) * a as f32;
                c.copy_from_slice(&v.to_ne_bytes());
            }),
            DataType::Float64 => acc.chunks_exact_mut(8).for_each(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                c.copy_from_slice(&(f64::from_ne_bytes(b) * a).to_ne_bytes());
            }),
            _ => return UCC_ERR_NOT_SUPPORTED,
        }
    }
    // SAFETY: `dst` holds `len` bytes; `acc` is our own buffer.
    unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), dst.cast::<u8>(), len) };
    UCC_OK
}

unsafe fn run(a: &TaskArgs) -> Status {
    let alpha = |x: f64| (a.flags & FLAG_REDUCE_WITH_ALPHA != 0).then_some(x);
    match a.task_type {
        TASK_REDUCE => {
            // SAFETY: the member `task_type` names.
            let r = unsafe { a.u.reduce };
            let n = r.n_srcs as usize;
            let srcs: Vec<*const c_void> = if a.flags & FLAG_REDUCE_SRCS_EXT != 0 {
                let ext = r.srcs[0].cast::<*const c_void>();
                if ext.is_null() {
                    return UCC_ERR_INVALID_PARAM;
                }
                // SAFETY: `srcs_ext` holds `n_srcs` pointers.
                (0..n).map(|i| unsafe { *ext.add(i) }).collect()
            } else {
                if n > NUM_BUFS {
                    return UCC_ERR_INVALID_PARAM;
                }
                r.srcs[..n].iter().map(|&p| p.cast_const()).collect()
            };
            // SAFETY: the caller's buffers of `count` elements.
            unsafe { reduce_into(r.dst, &srcs, r.count, r.dt, r.op, alpha(r.alpha)) }
        }
        TASK_REDUCE_STRIDED => {
            // SAFETY: the member `task_type` names.
            let r = unsafe { a.u.reduce_strided };
            let mut srcs = vec![r.src1.cast_const()];
            for i in 0..r.n_src2 as usize {
                srcs.push(
                    r.src2
                        .cast::<u8>()
                        .wrapping_add(i * r.stride)
                        .cast_const()
                        .cast(),
                );
            }
            // SAFETY: as above; SRC[i] = src2 + i * stride.
            unsafe { reduce_into(r.dst, &srcs, r.count, r.dt, r.op, alpha(r.alpha)) }
        }
        TASK_REDUCE_MULTI_DST => {
            // SAFETY: the member `task_type` names.
            let r = unsafe { a.u.reduce_multi_dst };
            let n = r.n_bufs as usize;
            if n > MULTI_OP_NUM_BUFS {
                return UCC_ERR_INVALID_PARAM;
            }
            for j in 0..n {
                let srcs = [r.src1[j].cast_const(), r.src2[j].cast_const()];
                // SAFETY: the caller's buffers of `counts[j]` elements.
                let s = unsafe { reduce_into(r.dst[j], &srcs, r.counts[j], r.dt, r.op, None) };
                if s != UCC_OK {
                    return s;
                }
            }
            UCC_OK
        }
        TASK_COPY => {
            // SAFETY: the member `task_type` names.
            let c = unsafe { a.u.copy };
            if c.len == 0 {
                return UCC_OK;
            }
            if c.src.is_null() || c.dst.is_null() {
                return UCC_ERR_INVALID_PARAM;
            }
            // SAFETY: the caller's buffers of `len` bytes (overlap allowed).
            unsafe { std::ptr::copy(c.src.cast::<u8>(), c.dst.cast::<u8>(), c.len) };
            UCC_OK
        }
        TASK_COPY_MULTI => {
            // SAFETY: the member `task_type` names.
            let c = unsafe { a.u.copy_multi };
            if c.num_vectors > MULTI_OP_NUM_BUFS {
                return UCC_ERR_INVALID_PARAM;
            }
            for j in 0..c.num_vectors {
                if c.counts[j] == 0 {
                    continue;
                }
                if c.src[j].is_null() || c.dst[j].is_null() {
                    return UCC_ERR_INVALID_PARAM;
                }
                // SAFETY: the caller's buffers of `counts[j]` bytes.
                unsafe {
                    std::ptr::copy(c.src[j].cast::<u8>(), c.dst[j].cast::<u8>(), c.counts[j])
                };
            }
            UCC_OK
        }
        _ => UCC_ERR_NOT_SUPPORTED,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_task_post(
    executor: *mut Executor,
    args: *const TaskArgs,
    task: *mut *mut Task,
) -> Status {
    guard(|| {
        let e = match exec_mut(executor) {
            Ok(e) => e,
            Err(s) => return s,
        };
        if args.is_null() || task.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        if !e.started {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: non-null ucc_ee_executor_task_args_t.
        let a = unsafe { *args };
        // SAFETY: the buffers the arguments name are the caller's.
        let s = unsafe { run(&a) };
        if s < 0 {
            return s;
        }
        let t = crate::handle::register(
            Box::new(Task {
                eee: executor,
                args: a,
                status: s,
            }),
            crate::handle::Kind::ExecTask,
        );
        // SAFETY: non-null out pointer.
        unsafe { task.write(t) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_task_test(task: *const Task) -> Status {
    guard(
        || match crate::handle::get::<Task, _>(task.cast_mut(), crate::handle::Kind::ExecTask) {
            Ok(t) => t.status,
            Err(s) => s,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ucc_ee_executor_task_finalize(task: *mut Task) -> Status {
    guard(|| {
        // SAFETY: registry-checked task from Box::into_raw.
        match unsafe { crate::handle::take::<Task, _>(task, crate::handle::Kind::ExecTask) } {
            Some(_) => UCC_OK,
            None => UCC_ERR_INVALID_PARAM,
        }
    })
}
