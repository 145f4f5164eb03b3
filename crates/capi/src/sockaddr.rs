//! Socket addresses between C (`struct sockaddr`) and Rust.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use ucs::{Result, Status};

/// A socket address from C (`AF_INET` or `AF_INET6`).
///
/// # Safety
/// `sa` must point to `len` readable bytes (or be null).
pub(crate) unsafe fn sockaddr_from_c(sa: *const libc::sockaddr, len: u32) -> Result<SocketAddr> {
    if sa.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: the caller's address; the family says which struct it is, and the length
    // is checked before the struct is read.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
                let a = sa.cast::<libc::sockaddr_in>().read_unaligned();
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
                let a = sa.cast::<libc::sockaddr_in6>().read_unaligned();
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            libc::AF_INET | libc::AF_INET6 => Err(Status::InvalidParam),
            _ => Err(Status::Unsupported),
        }
    }
}

/// Writes a socket address into a C `sockaddr_storage`.
pub(crate) fn sockaddr_to_c(a: SocketAddr, out: &mut libc::sockaddr_storage) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    *out = unsafe { std::mem::zeroed() };
    let p = (out as *mut libc::sockaddr_storage).cast::<u8>();
    match a {
        SocketAddr::V4(v) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage.
            unsafe { p.cast::<libc::sockaddr_in>().write_unaligned(s) };
        }
        SocketAddr::V6(v) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage.
            unsafe { p.cast::<libc::sockaddr_in6>().write_unaligned(s) };
        }
    }
}
