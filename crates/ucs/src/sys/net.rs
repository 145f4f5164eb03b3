//! Network interfaces of this host (name, address, flags), for device selection by name
//! as `UCX_NET_DEVICES` does it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetIf {
    pub name: String,
    pub addr: IpAddr,
    pub loopback: bool,
    pub up: bool,
}

/// Every IPv4 and IPv6 address of every interface (link-local IPv6 addresses are left
/// out: they need a scope to be dialed and are not what users mean by a device).
pub fn interfaces() -> Vec<NetIf> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null; its family tells which sockaddr it is.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the pointee is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the pointee is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let a = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if a.segments()[0] & 0xffc0 == 0xfe80 {
                    continue;
                }
                IpAddr::V6(a)
            }
            _ => continue,
        };
        let flags = ifa.ifa_flags;
        out.push(NetIf {
            name,
            addr,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
            up: flags & libc::IFF_UP as u32 != 0 && flags & libc::IFF_RUNNING as u32 != 0,
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The inode of this process's network namespace (0 if unknown).
pub fn netns_id() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m))
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_is_listed() {
        let ifs = super::interfaces();
        assert!(
            ifs.iter().any(|i| i.loopback && i.addr.is_loopback()),
            "{ifs:?}"
        );
        assert_ne!(super::netns_id(), 0);
    }
}
