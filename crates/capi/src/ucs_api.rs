//! The few `ucs_*` functions (and data) programs and Open MPI use from libucs.

use crate::ffi::ucs_status_t;
use std::ffi::{c_char, c_void, CStr};

/// `ucs_status_string`: a static message for every status value.
#[no_mangle]
pub extern "C" fn ucs_status_string(status: ucs_status_t) -> *const c_char {
    let s: &'static CStr = match ucs::Status::from_code(i32::from(status)) {
        Some(st) => message(st),
        None if (-59..=-40).contains(&status) => c"Link failure",
        None if (-89..=-60).contains(&status) => c"Endpoint failure",
        None => c"Unknown error",
    };
    s.as_ptr()
}

/// The message of `s` as a C string (the same text as `Status::message`).
fn message(s: ucs::Status) -> &'static CStr {
    use ucs::Status as S;
    match s {
        S::Ok => c"Success",
        S::InProgress => c"Operation in progress",
        S::NoMessage => c"No pending message",
        S::NoResource => c"No resources are available to initiate the operation",
        S::IoError => c"Input/output error",
        S::NoMemory => c"Out of memory",
        S::InvalidParam => c"Invalid parameter",
        S::Unreachable => c"Destination is unreachable",
        S::InvalidAddr => c"Address not valid",
        S::NotImplemented => c"Function not implemented",
        S::MessageTruncated => c"Message truncated",
        S::NoProgress => c"No progress",
        S::BufferTooSmall => c"Provided buffer is too small",
        S::NoElem => c"No such element",
        S::SomeConnectsFailed => c"Failed to connect some of the requested endpoints",
        S::NoDevice => c"No such device",
        S::Busy => c"Device is busy",
        S::Canceled => c"Request canceled",
        S::ShmemSegment => c"Shared memory error",
        S::AlreadyExists => c"Element already exists",
        S::OutOfRange => c"Index out of range",
        S::TimedOut => c"Operation timed out",
        S::ExceedsLimit => c"User-defined limit was reached",
        S::Unsupported => c"Unsupported operation",
        S::Rejected => c"Operation rejected by remote peer",
        S::NotConnected => c"Endpoint is not connected",
        S::ConnectionReset => c"Connection reset by remote peer",
        S::FirstLinkFailure => c"First link failure",
        S::LastLinkFailure => c"Last link failure",
        S::FirstEndpointFailure => c"First endpoint failure",
        S::EndpointTimeout => c"Endpoint timeout",
        S::LastEndpointFailure => c"Last endpoint failure",
        S::Last => c"Last error code",
    }
}

/// `ucs_sockaddr_str`: "address:port" of an IPv4 or IPv6 socket address into `str`.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_str(
    sock_addr: *const libc::sockaddr,
    str_: *mut c_char,
    max_size: usize,
) -> *const c_char {
    crate::guard::value("ucs_sockaddr_str", str_.cast_const(), || {
        if str_.is_null() || max_size == 0 {
            return Ok(str_.cast_const());
        }
        let text = if sock_addr.is_null() {
            "<null>".to_string()
        } else {
            // SAFETY: the caller's socket address; the family says which struct it is.
            unsafe {
                match i32::from((*sock_addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*sock_addr.cast::<libc::sockaddr_in>();
                        let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                        format!("{}:{}", ip, u16::from_be(a.sin_port))
                    }
                    libc::AF_INET6 => {
                        let a = &*sock_addr.cast::<libc::sockaddr_in6>();
                        let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                        format!("{}:{}", ip, u16::from_be(a.sin6_port))
                    }
                    _ => "<invalid address family>".to_string(),
                }
            }
        };
        let b = text.as_bytes();
        let n = b.len().min(max_size - 1);
        // SAFETY: the caller's buffer of `max_size` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), str_.cast::<u8>(), n);
            *str_.add(n) = 0;
        }
        Ok(str_.cast_const())
    })
}

/// Memory tracking is not kept by rucx: these record nothing.
#[no_mangle]
pub extern "C" fn ucs_memtrack_allocated(_ptr: *mut c_void, _size: usize, _name: *const c_char) {}

#[no_mangle]
pub extern "C" fn ucs_memtrack_releasing(_ptr: *mut c_void) {}

/// A table of C strings exported as data, as libucs does.
#[repr(transparent)]
pub struct CStrTable<const N: usize>([*const c_char; N]);

// SAFETY: the pointers name static, immutable strings.
unsafe impl<const N: usize> Sync for CStrTable<N> {}

#[no_mangle]
pub static ucs_thread_mode_names: CStrTable<4> = CStrTable([
    c"single".as_ptr(),
    c"serialized".as_ptr(),
    c"multi".as_ptr(),
    std::ptr::null(),
]);

#[no_mangle]
pub static ucs_memory_type_names: CStrTable<7> = CStrTable([
    c"host".as_ptr(),
    c"cuda".as_ptr(),
    c"cuda-managed".as_ptr(),
    c"rocm".as_ptr(),
    c"rocm-managed".as_ptr(),
    c"unknown".as_ptr(),
    // UCX 1.13's table ends with a NULL: 7 entries, 56 bytes. Programs that read it (io_demo)
    // hold a copy of that size, made at load time; a shorter table makes the loader warn.
    std::ptr::null(),
]);

#[no_mangle]
pub static ucs_memory_type_descs: CStrTable<6> = CStrTable([
    c"System memory".as_ptr(),
    c"NVIDIA GPU memory".as_ptr(),
    c"NVIDIA GPU managed/unified memory".as_ptr(),
    c"AMD/ROCm GPU memory".as_ptr(),
    c"AMD/ROCm GPU managed memory".as_ptr(),
    c"unknown".as_ptr(),
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_rust_ones() {
        for s in ucs::status::ALL {
            // SAFETY: a static C string of ours.
            let c = unsafe { CStr::from_ptr(ucs_status_string(s.code())) };
            assert_eq!(c.to_str().unwrap(), s.message());
        }
    }
}
