//! Memory mapping, remote keys, put/get and atomics.
//!
//! Packed remote keys handed to C are ucp's packed keys as they are (5 to 16 bytes for
//! realistic regions): `ucp_ep_rkey_unpack` gets no length, and the key's own bytes give
//! it (`ucp::mem::PackedKey::encoded_len`). The buffer `ucp_rkey_pack` returns sits 8
//! bytes into an allocation that starts with `magic u32 | key length u32`, so that
//! `ucp_rkey_buffer_release` recognises (and frees) only buffers it made.

use crate::context::Ctx;
use crate::core::{ep_get, CbKind, EpH, Op, Outcome, RecvOut, Wk, DT_BYTES, F_AMO32};
use crate::dispatch::{run, wait_ptr};
use crate::ffi::*;
use crate::guard;
use crate::handle::{handle_kind, Handle};
use std::ffi::c_void;
use ucp::{AtomicOp, AtomicSize, Buf, RecvInfo};
use ucs::{Result, Status};

/// A memory handle's value.
pub(crate) struct MemObj {
    ctx: *const Handle<Ctx>,
    memh: Option<ucp::MemH>,
    /// A mapping rucx made at a fixed address (`UCP_MEM_MAP_FIXED`), unmapped with the
    /// handle.
    fixed: Option<(usize, usize)>,
    addr: usize,
    len: usize,
}

handle_kind!(MemObj, 0x7275_6378_6d65_6d31);

// SAFETY: the Rust memory handle is plain data plus a shared context.
unsafe impl Send for MemObj {}

impl Drop for MemObj {
    fn drop(&mut self) {
        self.memh = None;
        if let Some((a, l)) = self.fixed.take() {
            // SAFETY: a mapping this handle made and nobody else owns.
            unsafe { libc::munmap(a as *mut c_void, l) };
        }
    }
}

/// A remote key handle's value.
pub(crate) struct RkeyObj {
    wk: *const Handle<Wk>,
    wgen: u64,
    pub(crate) rk: ucp::RemoteKey,
}

handle_kind!(RkeyObj, 0x7275_6378_726b_6579);

// SAFETY: plain data.
unsafe impl Send for RkeyObj {}

#[no_mangle]
pub unsafe extern "C" fn ucp_mem_map(
    context: *mut Handle<Ctx>,
    params: *const ucp_mem_map_params_t,
    memh_p: *mut *mut Handle<MemObj>,
) -> ucs_status_t {
    guard::status("ucp_mem_map", || {
        // SAFETY: the caller's context handle.
        let ctx = unsafe { Handle::get(context)? };
        if params.is_null() || memh_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's params, read by mask.
        let (mask, address, length, flags, mem_type) = unsafe {
            let p = &*params;
            let m = p.field_mask;
            (
                m,
                if m & UCP_MEM_MAP_PARAM_FIELD_ADDRESS != 0 {
                    p.address
                } else {
                    std::ptr::null_mut()
                },
                p.length,
                if m & UCP_MEM_MAP_PARAM_FIELD_FLAGS != 0 {
                    p.flags
                } else {
                    0
                },
                if m & UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE != 0 {
                    p.memory_type
                } else {
                    UCS_MEMORY_TYPE_UNKNOWN
                },
            )
        };
        if mask & UCP_MEM_MAP_PARAM_FIELD_LENGTH == 0 {
            return Err(Status::InvalidParam);
        }
        if mem_type != UCS_MEMORY_TYPE_HOST && mem_type != UCS_MEMORY_TYPE_UNKNOWN {
            return Err(Status::Unsupported);
        }
        let allocate = address.is_null() || flags & UCP_MEM_MAP_ALLOCATE != 0;
        let mut fixed = None;
        let memh = if allocate && !address.is_null() && flags & UCP_MEM_MAP_FIXED != 0 {
            // Memory at a fixed address: rucx's shared segments cannot be placed, so map
            // private shared memory there and register it (peers reach it by cross-memory
            // attach; atomics are executed by this process).
            if length == 0 {
                return Err(Status::InvalidParam);
            }
            // SAFETY: a new anonymous mapping at an address the caller chose; the
            // no-replace flag refuses to clobber an existing mapping.
            let p = unsafe {
                libc::mmap(
                    address,
                    length,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED || p != address {
                if p != libc::MAP_FAILED {
                    // SAFETY: the mapping just made (at another address).
                    unsafe { libc::munmap(p, length) };
                }
                return Err(Status::NoMemory);
            }
            fixed = Some((p as usize, length));
            // SAFETY: the mapping just made; it is unmapped only after the handle goes.
            match unsafe { ctx.ctx.mem_map(Some(p.cast()), length) } {
                Ok(m) => m,
                Err(e) => {
                    // SAFETY: as above.
                    unsafe { libc::munmap(p, length) };
                    return Err(e);
                }
            }
        } else if allocate {
            ctx.ctx.mem_alloc(length.max(1))?
        } else {
            // SAFETY: ucp_mem_map's contract: the application's memory stays valid until
            // ucp_mem_unmap.
            unsafe { ctx.ctx.mem_map(Some(address.cast()), length) }?
        };
        let addr = memh.address() as usize;
        let (h, _) = Handle::alloc(MemObj {
            ctx: context,
            memh: Some(memh),
            fixed,
            addr,
            len: length,
        });
        // SAFETY: the caller's output pointer.
        unsafe { *memh_p = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_mem_unmap(
    context: *mut Handle<Ctx>,
    memh: *mut Handle<MemObj>,
) -> ucs_status_t {
    guard::status("ucp_mem_unmap", || {
        // SAFETY: the caller's handles.
        unsafe { Handle::get(context)? };
        // SAFETY: as above.
        let m = unsafe { Handle::get(memh)? };
        if !std::ptr::eq(m.ctx, context) {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the application gives the handle up.
        drop(unsafe { Handle::destroy(memh)? });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_mem_query(
    memh: *const Handle<MemObj>,
    attr: *mut ucp_mem_attr_t,
) -> ucs_status_t {
    guard::status("ucp_mem_query", || {
        // SAFETY: the caller's handle.
        let m = unsafe { Handle::get(memh)? };
        if attr.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the caller's attribute struct, written by mask.
        unsafe {
            let f = (*attr).field_mask;
            if f & UCP_MEM_ATTR_FIELD_ADDRESS != 0 {
                (*attr).address = m.addr as *mut c_void;
            }
            if f & UCP_MEM_ATTR_FIELD_LENGTH != 0 {
                (*attr).length = m.len;
            }
            if f & UCP_MEM_ATTR_FIELD_MEM_TYPE != 0 {
                (*attr).mem_type = UCS_MEMORY_TYPE_HOST;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_mem_advise(
    context: *mut Handle<Ctx>,
    memh: *mut Handle<MemObj>,
    params: *mut ucp_mem_advise_params_t,
) -> ucs_status_t {
    guard::status("ucp_mem_advise", || {
        // SAFETY: the caller's handles.
        unsafe { Handle::get(context)? };
        // SAFETY: as above.
        unsafe { Handle::get(memh)? };
        if params.is_null() {
            return Err(Status::InvalidParam);
        }
        // Mapped memory is always resident-on-touch host memory: advice changes nothing.
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_pack(
    context: *mut Handle<Ctx>,
    memh: *mut Handle<MemObj>,
    rkey_buffer_p: *mut *mut c_void,
    size_p: *mut usize,
) -> ucs_status_t {
    guard::status("ucp_rkey_pack", || {
        // SAFETY: the caller's handles.
        unsafe { Handle::get(context)? };
        // SAFETY: as above.
        let m = unsafe { Handle::get(memh)? };
        if rkey_buffer_p.is_null() || size_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let packed = m.memh.as_ref().ok_or(Status::InvalidParam)?.rkey_pack();
        // SAFETY: malloc of a positive size; released by ucp_rkey_buffer_release.
        let p = unsafe { libc::malloc(KEY_BUF_HDR + packed.len()) }.cast::<u8>();
        if p.is_null() {
            return Err(Status::NoMemory);
        }
        let mut hdr = [0u8; KEY_BUF_HDR];
        hdr[..4].copy_from_slice(&KEY_BUF_MAGIC.to_le_bytes());
        hdr[4..].copy_from_slice(&(packed.len() as u32).to_le_bytes());
        // SAFETY: `p` has KEY_BUF_HDR + packed.len() writable bytes; the caller's output
        // pointers.
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), p, KEY_BUF_HDR);
            std::ptr::copy_nonoverlapping(packed.as_ptr(), p.add(KEY_BUF_HDR), packed.len());
            *rkey_buffer_p = p.add(KEY_BUF_HDR).cast();
            *size_p = packed.len();
        }
        Ok(())
    })
}

/// The packed key a C key buffer starts with; its length comes from its own bytes, and
/// no byte past its end is read.
unsafe fn rkey_bytes<'a>(p: *const c_void) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(Status::InvalidParam);
    }
    let p = p.cast::<u8>();
    // SAFETY: the caller's key buffer holds a whole key; encoded_len reads its bytes in
    // order and stops at the key's end (or at the first byte that makes it invalid).
    let len = ucp::mem::PackedKey::encoded_len(|i| unsafe { p.add(i).read() })?;
    // SAFETY: as above: the `len` bytes just read.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The header in front of a key buffer of `ucp_rkey_pack`.
const KEY_BUF_MAGIC: u32 = 0x3279_6b72;
const KEY_BUF_HDR: usize = 8;

#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_buffer_release(rkey_buffer: *mut c_void) {
    guard::void("ucp_rkey_buffer_release", || {
        if rkey_buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        let p = rkey_buffer.cast::<u8>().wrapping_sub(KEY_BUF_HDR);
        let mut hdr = [0u8; KEY_BUF_HDR];
        // SAFETY: a buffer of ours has its header in the 8 bytes in front of it (anything
        // else is a misuse this check turns into an error instead of a bad free).
        unsafe { std::ptr::copy_nonoverlapping(p, hdr.as_mut_ptr(), KEY_BUF_HDR) };
        let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
        if hdr[..4] != KEY_BUF_MAGIC.to_le_bytes() || len > ucp::mem::MAX_PACKED_LEN {
            return Err(Status::InvalidParam);
        }
        // SAFETY: our allocation: forget the magic (a second release is refused), free.
        unsafe {
            p.write_bytes(0, 4);
            libc::free(p.cast());
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_ep_rkey_unpack(
    ep: *mut Handle<EpH>,
    rkey_buffer: *const c_void,
    rkey_p: *mut *mut Handle<RkeyObj>,
) -> ucs_status_t {
    guard::status("ucp_ep_rkey_unpack", || {
        // SAFETY: the caller's endpoint handle.
        let (e, wk) = unsafe { ep_get(ep)? };
        if rkey_p.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: a key buffer of ours (checked).
        let bytes = unsafe { rkey_bytes(rkey_buffer)? };
        let rep = e.ep;
        let rk = run(wk, |w, _| w.rkey_unpack(rep, bytes))??;
        let (h, _) = Handle::alloc(RkeyObj {
            wk: e.wk,
            wgen: e.wgen,
            rk,
        });
        // SAFETY: the caller's output pointer.
        unsafe { *rkey_p = h };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_ptr(
    rkey: *mut Handle<RkeyObj>,
    raddr: u64,
    addr_p: *mut *mut c_void,
) -> ucs_status_t {
    guard::status("ucp_rkey_ptr", || {
        // SAFETY: the caller's key handle.
        let k = unsafe { Handle::get(rkey)? };
        if addr_p.is_null() {
            return Err(Status::InvalidParam);
        }
        let p = k.rk.ptr(raddr)?;
        // SAFETY: the caller's output pointer.
        unsafe { *addr_p = p.cast() };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_destroy(rkey: *mut Handle<RkeyObj>) {
    // SAFETY: the caller's key handle, given up.
    guard::void("ucp_rkey_destroy", || unsafe {
        Handle::destroy(rkey).map(drop)
    })
}

/// The endpoint, its worker and the key, checked to belong together.
pub(crate) unsafe fn ep_key<'a>(
    ep: *mut Handle<EpH>,
    rkey: *mut Handle<RkeyObj>,
) -> Result<(&'a EpH, &'a Wk, &'a RkeyObj)> {
    // SAFETY: the caller's handles.
    let (e, wk) = unsafe { ep_get(ep)? };
    // SAFETY: as above.
    let k = unsafe { key_of(e, rkey)? };
    Ok((e, wk, k))
}

/// The remote key `rkey`, checked to belong to the worker of endpoint `e`.
///
/// # Safety
/// `rkey` as for [`Handle::get`].
#[inline(always)]
pub(crate) unsafe fn key_of<'a>(e: &EpH, rkey: *mut Handle<RkeyObj>) -> Result<&'a RkeyObj> {
    // SAFETY: forwarded contract.
    let k = unsafe { Handle::get(rkey)? };
    if k.wk != e.wk || k.wgen != e.wgen {
        return Err(Status::InvalidParam);
    }
    Ok(k)
}

pub(crate) fn contig_len(op: &Op, count: usize) -> Result<usize> {
    let elem = crate::dt::contig_size(op.datatype).ok_or(Status::Unsupported)?;
    count.checked_mul(elem).ok_or(Status::InvalidParam)
}

#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbi(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
) -> ucs_status_t {
    guard::status("ucp_put_nbi", || {
        // SAFETY: the caller's handles.
        let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
        if length > 0 && buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        let data: &[u8] = if length == 0 {
            &[]
        } else {
            // SAFETY: the caller's source buffer, readable for this call.
            unsafe { std::slice::from_raw_parts(buffer.cast(), length) }
        };
        let rep = e.ep;
        run(wk, |w, _| w.put_nbi(rep, data, remote_addr, &k.rk))?
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbi(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
) -> ucs_status_t {
    guard::status("ucp_get_nbi", || {
        // SAFETY: the caller's handles.
        let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
        if length > 0 && buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        let rep = e.ep;
        // SAFETY: the API's contract: the buffer (checked not null above) stays writable,
        // and untouched by the application, until a flush completes.
        let dst = unsafe { Buf::contig(buffer.cast(), length) };
        run(wk, |w, _| w.get_nbi(rep, dst, remote_addr, &k.rk))?
    })
}

unsafe fn put_common(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    len: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's handles.
    let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
    if len > 0 && buffer.is_null() {
        return Err(Status::InvalidParam);
    }
    let rep = e.ep;
    if Wk::lazy(&op) && len <= isize::MAX as usize {
        // Nothing a request would carry was asked for: a key that maps the memory (or
        // reaches it by CMA) completes the put here, without the worker or its lock.
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the caller's buffer of `len` bytes (not null, checked above),
            // readable during the call, which is all this path reads it for.
            unsafe { std::slice::from_raw_parts(buffer.cast(), len) }
        };
        if let Some(done) = ucp::rma::put_bytes_in_call(rep, data, remote_addr, &k.rk) {
            return done.map(|()| std::ptr::null_mut());
        }
    }
    run(wk, |w, side| {
        // SAFETY: the API's contract: the buffer stays readable, and unchanged, until
        // completion (null with a length was refused above).
        let src = unsafe { Buf::contig(buffer.cast_mut().cast(), len) };
        wk.start(w, side, &op, 0, RecvOut::None, |w, cb| {
            w.put_nb(rep, src, remote_addr, &k.rk, cb).map(Outcome::of)
        })
    })?
}

unsafe fn get_common(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    len: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    op: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's handles.
    let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
    if len > 0 && buffer.is_null() {
        return Err(Status::InvalidParam);
    }
    let rep = e.ep;
    run(wk, |w, side| {
        // SAFETY: the API's contract: the buffer stays writable, and untouched by the
        // application, until completion (null with a length was refused above).
        let dst = unsafe { Buf::contig(buffer.cast(), len) };
        wk.start(w, side, &op, 0, RecvOut::None, |w, cb| {
            w.get_nb(rep, dst, remote_addr, &k.rk, cb).map(Outcome::of)
        })
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_put_nb(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_put_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { put_common(ep, buffer, length, remote_addr, rkey, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_get_nb(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_get_nb", || {
        let op = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), DT_BYTES, false);
        // SAFETY: forwarded contract.
        unsafe { get_common(ep, buffer, length, remote_addr, rkey, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbx(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_put_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        let len = contig_len(&op, count)?;
        // SAFETY: forwarded contract.
        unsafe { put_common(ep, buffer, len, remote_addr, rkey, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbx(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_get_nbx", || {
        // SAFETY: forwarded contract.
        let op = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        let len = contig_len(&op, count)?;
        // SAFETY: forwarded contract.
        unsafe { get_common(ep, buffer, len, remote_addr, rkey, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_put(
    ep: *mut Handle<EpH>,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
) -> ucs_status_t {
    guard::status("ucp_put", || {
        // SAFETY: the caller's handles.
        let (_, wk, _) = unsafe { ep_key(ep, rkey)? };
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        let p = unsafe { put_common(ep, buffer, length, remote_addr, rkey, op)? };
        wait_ptr(wk, p)?;
        // SAFETY: the caller's endpoint handle.
        let s = unsafe { crate::ep::ucp_ep_flush(ep) };
        guard::result_from_c(s)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucp_get(
    ep: *mut Handle<EpH>,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
) -> ucs_status_t {
    guard::status("ucp_get", || {
        // SAFETY: the caller's handles.
        let (_, wk, _) = unsafe { ep_key(ep, rkey)? };
        let op = Op::nb(CbKind::Send, 0, DT_BYTES, false);
        // SAFETY: forwarded contract.
        let p = unsafe { get_common(ep, buffer, length, remote_addr, rkey, op)? };
        wait_ptr(wk, p)
    })
}

// ----- atomics -------------------------------------------------------------------------

fn size_of_op(bytes: usize) -> Result<AtomicSize> {
    match bytes {
        4 => Ok(AtomicSize::B32),
        8 => Ok(AtomicSize::B64),
        // Other widths are not implemented; the caller can fall back (e.g. to a lock).
        _ => Err(Status::Unsupported),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_post(
    ep: *mut Handle<EpH>,
    opcode: ucp_atomic_post_op_t,
    value: u64,
    op_size: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
) -> ucs_status_t {
    guard::status("ucp_atomic_post", || {
        // SAFETY: the caller's handles.
        let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
        let op = match opcode {
            UCP_ATOMIC_POST_OP_ADD => AtomicOp::Add,
            UCP_ATOMIC_POST_OP_AND => AtomicOp::And,
            UCP_ATOMIC_POST_OP_OR => AtomicOp::Or,
            UCP_ATOMIC_POST_OP_XOR => AtomicOp::Xor,
            _ => return Err(Status::InvalidParam),
        };
        let size = size_of_op(op_size)?;
        let rep = e.ep;
        run(wk, |w, _| {
            w.atomic_post(rep, op, size, value, remote_addr, &k.rk)
        })?
    })
}

/// A fetching atomic. `result` receives the old value (`size` bytes); for cswap it holds
/// the value to swap in on input.
#[allow(clippy::too_many_arguments)]
unsafe fn fetch(
    ep: *mut Handle<EpH>,
    op: AtomicOp,
    size: AtomicSize,
    value: u64,
    compare: u64,
    result: *mut c_void,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    cop: Op,
) -> Result<ucs_status_ptr_t> {
    // SAFETY: the caller's handles.
    let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
    if result.is_null() {
        return Err(Status::InvalidParam);
    }
    let rep = e.ep;
    run(wk, |w, side| {
        if size == AtomicSize::B64 {
            // SAFETY: the API's contract: the 8 bytes at `result` (checked not null above)
            // stay writable, and untouched by the application, until completion.
            let res = unsafe { Buf::contig(result.cast(), 8) };
            // A fetch that completes in the call (the usual case over shared memory) takes
            // no request header ([`Wk::start`]).
            return wk.start(w, side, &cop, 0, RecvOut::None, |w, cb| {
                w.atomic_fetch_nb(rep, op, size, value, compare, res, remote_addr, &k.rk, cb)
                    .map(Outcome::of)
            });
        }
        // 32 bits: stage the result in the request header and copy it to the caller's 4
        // bytes on completion (which a completion queue would not do).
        cop.no_cq()?;
        let hdr = wk.begin(side, &cop, F_AMO32)?;
        // SAFETY: a header just started for this call.
        let staging = unsafe {
            (*hdr).result = result.cast();
            std::ptr::addr_of_mut!((*hdr).staging)
        };
        // SAFETY: the staging word lives as long as the request (its header), and only
        // the completion reads it.
        let res = unsafe { Buf::contig(staging.cast(), 8) };
        let out = w
            .atomic_fetch_nb(
                rep,
                op,
                size,
                value,
                compare,
                res,
                remote_addr,
                &k.rk,
                Wk::word(hdr),
            )
            .map(Outcome::of);
        wk.conclude(w, side, &cop, hdr, out, RecvOut::None)
    })?
}

#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_fetch_nb(
    ep: *mut Handle<EpH>,
    opcode: ucp_atomic_fetch_op_t,
    value: u64,
    result: *mut c_void,
    op_size: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    cb: Option<SendCb>,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_atomic_fetch_nb", || {
        let size = size_of_op(op_size)?;
        if result.is_null() {
            return Err(Status::InvalidParam);
        }
        let cop = Op::nb(CbKind::Send, cb.map_or(0, |f| f as usize), DT_BYTES, false);
        let (op, v, cmp) = match opcode {
            UCP_ATOMIC_FETCH_OP_FADD => (AtomicOp::Add, value, 0),
            UCP_ATOMIC_FETCH_OP_SWAP => (AtomicOp::Swap, value, 0),
            UCP_ATOMIC_FETCH_OP_FAND => (AtomicOp::And, value, 0),
            UCP_ATOMIC_FETCH_OP_FOR => (AtomicOp::Or, value, 0),
            UCP_ATOMIC_FETCH_OP_FXOR => (AtomicOp::Xor, value, 0),
            UCP_ATOMIC_FETCH_OP_CSWAP => {
                // `value` is the condition; `*result` holds the value to swap in.
                // SAFETY: the caller's result buffer of `op_size` bytes.
                let swap = unsafe { read_word(result, size) };
                (AtomicOp::Cswap, swap, value)
            }
            _ => return Err(Status::InvalidParam),
        };
        // SAFETY: forwarded contract.
        unsafe { fetch(ep, op, size, v, cmp, result, remote_addr, rkey, cop) }
    })
}

unsafe fn read_word(p: *const c_void, size: AtomicSize) -> u64 {
    // SAFETY: the caller's buffer of the operand's width.
    unsafe {
        match size {
            AtomicSize::B32 => u64::from(p.cast::<u32>().read_unaligned()),
            AtomicSize::B64 => p.cast::<u64>().read_unaligned(),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_op_nbx(
    ep: *mut Handle<EpH>,
    opcode: ucp_atomic_op_t,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard::status_ptr("ucp_atomic_op_nbx", || {
        // SAFETY: forwarded contract.
        let cop = unsafe { Op::nbx(param, CbKind::SendNbx)? };
        if count != 1 || buffer.is_null() {
            return Err(Status::InvalidParam);
        }
        if cop.mask & UCP_OP_ATTR_FIELD_DATATYPE == 0 {
            return Err(Status::InvalidParam);
        }
        let size = size_of_op(crate::dt::contig_size(cop.datatype).ok_or(Status::Unsupported)?)?;
        // SAFETY: the caller's operand of the datatype's width.
        let x = unsafe { read_word(buffer, size) };
        let reply = cop.reply_buffer;
        let op = match opcode {
            UCP_ATOMIC_OP_ADD => AtomicOp::Add,
            UCP_ATOMIC_OP_AND => AtomicOp::And,
            UCP_ATOMIC_OP_OR => AtomicOp::Or,
            UCP_ATOMIC_OP_XOR => AtomicOp::Xor,
            UCP_ATOMIC_OP_SWAP => AtomicOp::Swap,
            UCP_ATOMIC_OP_CSWAP => AtomicOp::Cswap,
            _ => return Err(Status::InvalidParam),
        };
        if reply.is_null() {
            if matches!(op, AtomicOp::Swap | AtomicOp::Cswap) {
                return Err(Status::InvalidParam);
            }
            // SAFETY: the caller's handles.
            let (e, wk, k) = unsafe { ep_key(ep, rkey)? };
            let rep = e.ep;
            cop.no_cq()?;
            return run(wk, |w, side| {
                // A post completes in the call: no request header unless the caller asked
                // for a request ([`Wk::start`]).
                wk.start(w, side, &cop, 0, RecvOut::None, |w, _| {
                    w.atomic_post(rep, op, size, x, remote_addr, &k.rk)
                        .map(|()| Outcome::Done(Status::Ok, RecvInfo::default()))
                })
            })?;
        }
        let (v, cmp) = if op == AtomicOp::Cswap {
            // Compare with the operand; swap in what the reply buffer holds.
            // SAFETY: the caller's reply buffer of the operand's width.
            (unsafe { read_word(reply, size) }, x)
        } else {
            (x, 0)
        };
        // SAFETY: forwarded contract.
        unsafe { fetch(ep, op, size, v, cmp, reply, remote_addr, rkey, cop) }
    })
}

/// The older blocking atomics of `ucp_compat.h`.
unsafe fn blocking_fetch(
    ep: *mut Handle<EpH>,
    op: AtomicOp,
    size: AtomicSize,
    value: u64,
    compare: u64,
    result: *mut c_void,
    remote_addr: u64,
    rkey: *mut Handle<RkeyObj>,
) -> Result<()> {
    // SAFETY: the caller's handles.
    let (_, wk, _) = unsafe { ep_key(ep, rkey)? };
    let cop = Op::nb(CbKind::Send, 0, DT_BYTES, false);
    // SAFETY: forwarded contract.
    let p = unsafe { fetch(ep, op, size, value, compare, result, remote_addr, rkey, cop)? };
    wait_ptr(wk, p)
}

macro_rules! compat_post {
    ($name:ident, $t:ty, $size:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: *mut Handle<EpH>,
            add: $t,
            remote_addr: u64,
            rkey: *mut Handle<RkeyObj>,
        ) -> ucs_status_t {
            // SAFETY: forwarded contract.
            unsafe {
                ucp_atomic_post(
                    ep,
                    UCP_ATOMIC_POST_OP_ADD,
                    add as u64,
                    $size,
                    remote_addr,
                    rkey,
                )
            }
        }
    };
}

compat_post!(ucp_atomic_add32, u32, 4);
compat_post!(ucp_atomic_add64, u64, 8);

macro_rules! compat_fetch {
    ($name:ident, $t:ty, $op:expr, $size:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: *mut Handle<EpH>,
            value: $t,
            remote_addr: u64,
            rkey: *mut Handle<RkeyObj>,
            result: *mut $t,
        ) -> ucs_status_t {
            guard::status(stringify!($name), || {
                // SAFETY: forwarded contract.
                unsafe {
                    blocking_fetch(
                        ep,
                        $op,
                        $size,
                        value as u64,
                        0,
                        result.cast(),
                        remote_addr,
                        rkey,
                    )
                }
            })
        }
    };
}

compat_fetch!(ucp_atomic_fadd32, u32, AtomicOp::Add, AtomicSize::B32);
compat_fetch!(ucp_atomic_fadd64, u64, AtomicOp::Add, AtomicSize::B64);
compat_fetch!(ucp_atomic_swap32, u32, AtomicOp::Swap, AtomicSize::B32);
compat_fetch!(ucp_atomic_swap64, u64, AtomicOp::Swap, AtomicSize::B64);

macro_rules! compat_cswap {
    ($name:ident, $t:ty, $size:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: *mut Handle<EpH>,
            compare: $t,
            swap: $t,
            remote_addr: u64,
            rkey: *mut Handle<RkeyObj>,
            result: *mut $t,
        ) -> ucs_status_t {
            guard::status(stringify!($name), || {
                // SAFETY: forwarded contract.
                unsafe {
                    blocking_fetch(
                        ep,
                        AtomicOp::Cswap,
                        $size,
                        swap as u64,
                        compare as u64,
                        result.cast(),
                        remote_addr,
                        rkey,
                    )
                }
            })
        }
    };
}

compat_cswap!(ucp_atomic_cswap32, u32, AtomicSize::B32);
compat_cswap!(ucp_atomic_cswap64, u64, AtomicSize::B64);
