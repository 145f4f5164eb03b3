//! Datatypes: `ucp_datatype_t` values and the buffers they describe.
//!
//! A datatype is a 64-bit word whose low three bits are its class: contiguous (element
//! size in the upper bits), I/O vector (the buffer is an array of `ucp_dt_iov_t`), or
//! generic (the upper bits are a pointer to the descriptor `ucp_dt_create_generic` made;
//! the application packs and unpacks). Strided datatypes do not exist in UCX 1.13's API.

use crate::ffi::*;
use crate::guard;
use crate::handle::{handle_kind, Handle};
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::sync::Mutex;
use ucp::{Buf, GenericDt};
use ucs::{Result, Status};

/// A generic datatype's descriptor.
pub(crate) struct GenDt {
    ops: ucp_generic_dt_ops_t,
    context: *mut c_void,
}

handle_kind!(GenDt, 0x7275_6378_6474_6731);

// SAFETY: a table of C function pointers and the application's context pointer, which the
// application shares with whatever thread runs its callbacks.
unsafe impl Send for GenDt {}

/// One pack or unpack in progress: the state `start_pack`/`start_unpack` returned.
struct CGeneric {
    ops: ucp_generic_dt_ops_t,
    state: *mut c_void,
    size: usize,
}

// SAFETY: the state belongs to this operation only; the application's callbacks may run
// on the thread that progresses the worker, as with UCX.
unsafe impl Send for CGeneric {}

impl GenericDt for CGeneric {
    fn packed_size(&self) -> usize {
        self.size
    }

    fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize {
        let Some(pack) = self.ops.pack else { return 0 };
        // SAFETY: the application's pack callback with its state and a writable buffer.
        let n = unsafe { pack(self.state, off, dst.as_mut_ptr().cast(), dst.len()) };
        n.min(dst.len())
    }

    fn unpack(&mut self, off: usize, src: &[u8]) -> Result<()> {
        let Some(unpack) = self.ops.unpack else {
            return Err(Status::InvalidParam);
        };
        // SAFETY: the application's unpack callback with its state and readable data.
        let s = unsafe { unpack(self.state, off, src.as_ptr().cast(), src.len()) };
        guard::result_from_c(s)
    }
}

impl Drop for CGeneric {
    fn drop(&mut self) {
        if let Some(finish) = self.ops.finish {
            // SAFETY: the state of this operation, finished exactly once.
            unsafe { finish(self.state) };
        }
    }
}

/// Live generic datatypes. A datatype is a plain integer the application could have made
/// up, so a generic one is looked up here before its pointer is followed (operations with
/// generic datatypes pack through callbacks and are not on the fast path).
static LIVE: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn live(a: usize) -> bool {
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).contains(&a)
}

/// The descriptor of a generic datatype value.
fn generic(dt: u64) -> Result<*mut Handle<GenDt>> {
    let a = (dt & !UCP_DATATYPE_CLASS_MASK) as usize;
    if !live(a) {
        return Err(Status::InvalidParam);
    }
    Ok(a as *mut Handle<GenDt>)
}

/// The direction a buffer is used in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Send,
    Recv,
}

/// The buffer `(buffer, count, datatype)` describes.
///
/// # Safety
/// The memory must be as the datatype describes and, as the UCP API requires of the
/// application, stay valid until the operation that takes the buffer completes (readable
/// and unchanged for a send; writable, and not otherwise accessed, for a receive): this
/// is [`Buf::contig`]'s and [`Buf::iov`]'s contract, passed on to the C caller.
#[inline(always)]
pub(crate) unsafe fn buf(buffer: *const c_void, count: usize, dt: u64, dir: Dir) -> Result<Buf> {
    if dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG {
        let elem = (dt >> UCP_DATATYPE_SHIFT) as usize;
        let len = count.checked_mul(elem).ok_or(Status::InvalidParam)?;
        if len > 0 && buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the C caller's contract of the operation (this function's), checked
        // for a null buffer with a length above.
        return Ok(unsafe { Buf::contig(buffer.cast_mut().cast(), len) });
    }
    // SAFETY: forwarded contract.
    unsafe { buf_other(buffer, count, dt, dir) }
}

/// [`buf`] for the datatypes other than contiguous ones.
///
/// # Safety
/// As for [`buf`].
#[inline(never)]
unsafe fn buf_other(buffer: *const c_void, count: usize, dt: u64, dir: Dir) -> Result<Buf> {
    match dt & UCP_DATATYPE_CLASS_MASK {
        UCP_DATATYPE_IOV => {
            if count == 0 {
                return Ok(Buf::empty());
            }
            if buffer.is_null() {
                return Err(Status::InvalidParam);
            }
            let iov = buffer.cast::<ucp_dt_iov_t>();
            let segs: Box<[(*mut u8, usize)]> = (0..count)
                .map(|i| {
                    // SAFETY: the caller's array of `count` iov entries.
                    let e = unsafe { iov.add(i).read_unaligned() };
                    (e.buffer.cast::<u8>(), e.length)
                })
                .collect();
            // SAFETY: the C caller's contract of the operation: every segment stays valid
            // until it completes.
            Ok(unsafe { Buf::iov(segs) })
        }
        UCP_DATATYPE_GENERIC => {
            // SAFETY: a live generic datatype is a handle of ours (checked by `generic`).
            let g = unsafe { Handle::get(generic(dt)?)? };
            let state = match (dir, g.ops.start_pack, g.ops.start_unpack) {
                // SAFETY: the application's start callback with its context and buffer.
                (Dir::Send, Some(f), _) => unsafe { f(g.context, buffer, count) },
                // SAFETY: as above.
                (Dir::Recv, _, Some(f)) => unsafe { f(g.context, buffer.cast_mut(), count) },
                _ => return Err(Status::InvalidParam),
            };
            let size = match g.ops.packed_size {
                // SAFETY: the application's callback with the state it just made.
                Some(f) => unsafe { f(state) },
                None => 0,
            };
            Ok(Buf::generic(CGeneric {
                ops: g.ops,
                state,
                size,
            }))
        }
        _ => Err(Status::Unsupported),
    }
}

/// The contiguous element size of a datatype (`None` for other classes).
pub(crate) fn contig_size(dt: u64) -> Option<usize> {
    (dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG)
        .then_some((dt >> UCP_DATATYPE_SHIFT) as usize)
}

#[no_mangle]
pub unsafe extern "C" fn ucp_dt_create_generic(
    ops: *const ucp_generic_dt_ops_t,
    context: *mut c_void,
    datatype_p: *mut ucp_datatype_t,
) -> ucs_status_t {
    guard::status("ucp_dt_create_generic", || {
        if ops.is_null() || datatype_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's ops table.
        let ops = unsafe { ops.read_unaligned() };
        let (h, _) = Handle::alloc(GenDt { ops, context });
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(h as usize);
        let a = h as usize as u64;
        debug_assert_eq!(a & UCP_DATATYPE_CLASS_MASK, 0);
        // SAFETY: the caller's output pointer.
        unsafe { *datatype_p = a | UCP_DATATYPE_GENERIC };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_dt_destroy(datatype: ucp_datatype_t) {
    guard::void("ucp_dt_destroy", || {
        if datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_GENERIC {
            return Ok(());
        }
        let p = generic(datatype)?;
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(p as usize));
        // SAFETY: a live generic datatype handle of ours (checked by `generic`).
        unsafe { Handle::destroy(p) }.map(drop)
    })
}
