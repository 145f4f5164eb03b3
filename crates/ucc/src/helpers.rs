//! Symbols UCC's own tools (ucc_perftest and friends) link to although `ucc.h` does not
//! declare them: memory helpers (`ucc_mc_*`) with host-memory behaviour, memory-unit
//! parsing, and two data objects programs read at load time.

use crate::ffi::*;
use crate::guard;
use std::ffi::{c_char, c_int, c_void, CStr};

/// `ucc_mc_buffer_header_t`: memory type, whether it came from a pool, the data.
#[repr(C)]
pub struct McBufferHeader {
    pub mt: i32,
    pub from_pool: c_int,
    pub addr: *mut c_void,
}

const HEADER: usize = 64;
const _: () = assert!(std::mem::size_of::<McBufferHeader>() <= HEADER);

/// Memory-type names, indexed by `ucc_memory_type_t` (the unused tail is NULL).
#[repr(transparent)]
pub struct Names(pub [*const c_char; 8]);

// SAFETY: the pointers are to immutable static strings.
unsafe impl Sync for Names {}

#[no_mangle]
pub static ucc_memory_type_names: Names = Names([
    c"host".as_ptr(),
    c"cuda".as_ptr(),
    c"cuda-managed".as_ptr(),
    c"rocm".as_ptr(),
    c"rocm-managed".as_ptr(),
    c"unknown".as_ptr(),
    std::ptr::null(),
    std::ptr::null(),
]);

/// Bytes per element of the predefined datatypes, indexed by id.
#[no_mangle]
pub static ucc_dt_predefined_sizes: [usize; DT_PREDEFINED_LAST] = crate::args::DT_SIZES;

fn host_only(m: i32) -> Status {
    match m {
        MEMORY_TYPE_HOST => UCC_OK,
        1..=4 => UCC_ERR_NOT_SUPPORTED,
        _ => UCC_ERR_INVALID_PARAM,
    }
}

#[no_mangle]
pub extern "C" fn ucc_mc_available(mem_type: i32) -> Status {
    host_only(mem_type)
}

#[no_mangle]
pub unsafe extern "C" fn ucc_mc_alloc(
    h_ptr: *mut *mut McBufferHeader,
    len: usize,
    mem_type: i32,
) -> Status {
    guard(|| {
        let s = host_only(mem_type);
        if s != UCC_OK {
            return s;
        }
        if h_ptr.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        let Some(total) = len.checked_add(HEADER) else {
            return UCC_ERR_NO_MEMORY;
        };
        // SAFETY: plain allocation; checked for NULL below.
        let p = unsafe { libc::malloc(total) }.cast::<u8>();
        if p.is_null() {
            return UCC_ERR_NO_MEMORY;
        }
        let h = p.cast::<McBufferHeader>();
        // SAFETY: `p` holds HEADER + len bytes, malloc-aligned; the header fits in HEADER.
        unsafe {
            h.write(McBufferHeader {
                mt: MEMORY_TYPE_HOST,
                from_pool: 0,
                addr: p.add(HEADER).cast(),
            });
            h_ptr.write(h);
        }
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_mc_free(h: *mut McBufferHeader) -> Status {
    guard(|| {
        if h.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: a header ucc_mc_alloc returned (the caller's contract).
        let mt = unsafe { (*h).mt };
        let s = host_only(mt);
        if s != UCC_OK {
            return s;
        }
        // SAFETY: the block ucc_mc_alloc allocated with malloc, freed once.
        unsafe { libc::free(h.cast()) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_mc_memset(
    ptr: *mut c_void,
    value: c_int,
    size: usize,
    mem_type: i32,
) -> Status {
    guard(|| {
        let s = host_only(mem_type);
        if s != UCC_OK {
            return s;
        }
        if size == 0 {
            return UCC_OK;
        }
        if ptr.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: the caller's host buffer of `size` bytes.
        unsafe { libc::memset(ptr, value, size) };
        UCC_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ucc_mc_memcpy(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    dst_mem: i32,
    src_mem: i32,
) -> Status {
    guard(|| {
        for m in [dst_mem, src_mem] {
            let s = host_only(m);
            if s != UCC_OK {
                return s;
            }
        }
        if len == 0 {
            return UCC_OK;
        }
        if dst.is_null() || src.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: the caller's host buffers of `len` bytes (memmove allows overlap).
        unsafe { libc::memmove(dst, src, len) };
        UCC_OK
    })
}

/// Parses a memory size as UCX does: a number with an optional unit (b, k, m, g, t,
/// with an optional trailing "b"), or "inf" (SIZE_MAX) / "auto" (SIZE_MAX - 1).
pub fn memunits(s: &str) -> Option<usize> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("inf") {
        return Some(usize::MAX);
    }
    if t.eq_ignore_ascii_case("auto") {
        return Some(usize::MAX - 1);
    }
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let n: usize = t[..digits].parse().ok()?;
    let mut unit = t[digits..].to_ascii_lowercase();
    if unit.len() == 2 && unit.ends_with('b') {
        unit.pop();
    }
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    n.checked_mul(1usize << shift)
}

#[no_mangle]
pub unsafe extern "C" fn ucc_str_to_memunits(buf: *const c_char, dest: *mut c_void) -> Status {
    guard(|| {
        if buf.is_null() || dest.is_null() {
            return UCC_ERR_INVALID_PARAM;
        }
        // SAFETY: a C string, per the contract.
        let s = unsafe { CStr::from_ptr(buf) }.to_string_lossy();
        match memunits(&s) {
            Some(v) => {
                // SAFETY: `dest` points to a size_t.
                unsafe { dest.cast::<usize>().write_unaligned(v) };
                UCC_OK
            }
            None => UCC_ERR_INVALID_PARAM,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::memunits;

    #[test]
    fn memunits_parse() {
        assert_eq!(memunits("4096"), Some(4096));
        assert_eq!(memunits("8k"), Some(8192));
        assert_eq!(memunits("1MB"), Some(1 << 20));
        assert_eq!(memunits("2g"), Some(2 << 30));
        assert_eq!(memunits("inf"), Some(usize::MAX));
        assert_eq!(memunits("auto"), Some(usize::MAX - 1));
        assert_eq!(memunits("k"), None);
        assert_eq!(memunits("12q"), None);
    }
}
