//! uct — the transport layer of rucx.
//!
//! A memory domain ([`Md`]) allocates and registers memory and packs/unpacks remote keys;
//! an interface ([`Iface`]) is one transport on one device, with endpoints ([`EpId`]) to
//! peers, active messages, RMA, atomics, flush/fence, pending queues and an event fd for
//! blocking waits. Transports are modules ([`self_tl`], [`shm`], [`tcp`], [`udp`]) dispatched statically
//! through an enum. See docs/architecture.md and docs/wire-formats.md.

#![deny(unsafe_code)]

pub mod am;
pub mod cm;
pub mod config;
#[cfg(feature = "fabric")]
pub mod fabric;
pub mod iface;
pub mod md;
pub mod rkey;
// uct's memory access (DESIGN.md): addresses made into memory, behind checked functions.
#[allow(unsafe_code)]
pub mod rma;
pub mod self_tl;
pub mod shm;
mod slab;
pub mod tcp;
pub mod types;
pub mod udp;
pub mod wire;

pub use config::IfaceConfig;
pub use iface::Iface;
pub use md::{Md, MemHandle};
pub use rkey::Rkey;
pub use tcp::IfaceEvent;
pub use types::*;

/// The transports this build has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Loopback inside one process.
    SelfTl,
    /// Shared memory between processes of one host.
    Shm,
    /// TCP sockets, between hosts (one interface per network device).
    Tcp,
    /// UDP datagrams made reliable in software, between hosts (one socket per network
    /// device for all peers).
    Udp,
    /// The in-memory test network of the `fabric` module. Only a build with the
    /// cargo feature `fabric` has it: otherwise it has no device and does not open. Not
    /// in [`Transport::ALL`]: only a test names it.
    Fabric,
}

impl Transport {
    /// Every transport, in the order `rucx-info` lists them.
    pub const ALL: [Transport; 4] = [
        Transport::SelfTl,
        Transport::Shm,
        Transport::Tcp,
        Transport::Udp,
    ];

    /// The name used in UCX_TLS and `-x`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::SelfTl => "self",
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Fabric => "fabric",
        }
    }

    /// Parses a transport name. UCX's names of its shared-memory transports (`posix`,
    /// `sysv`, `mm`, `cma`) select rucx's shm, which covers all of them.
    pub fn from_name(s: &str) -> Option<Transport> {
        match s {
            "self" => Some(Transport::SelfTl),
            "shm" | "posix" | "sysv" | "mm" | "cma" => Some(Transport::Shm),
            "tcp" => Some(Transport::Tcp),
            "udp" => Some(Transport::Udp),
            "fabric" if cfg!(feature = "fabric") => Some(Transport::Fabric),
            _ => None,
        }
    }

    /// The default device name: `memory` for self and shm; for tcp and udp the first
    /// device [`Transport::devices`] lists.
    pub fn device(self) -> &'static str {
        match self {
            Transport::Tcp | Transport::Udp => "default",
            Transport::Fabric => "fabric",
            _ => "memory",
        }
    }

    /// The devices of this transport on this host: for tcp and udp the network interfaces
    /// that are up, filtered by `UCX_NET_DEVICES` (names, or `all`/`any`), loopback last.
    pub fn devices(self) -> Vec<(String, Option<std::net::IpAddr>)> {
        match self {
            Transport::SelfTl | Transport::Shm => vec![("memory".to_string(), None)],
            #[cfg(feature = "fabric")]
            Transport::Fabric => vec![(fabric::current_device(), None)],
            #[cfg(not(feature = "fabric"))]
            Transport::Fabric => Vec::new(),
            Transport::Tcp | Transport::Udp => {
                let want = ucs::config::list(&ucs::config::NET_DEVICES);
                let all = want.is_empty() || want.iter().any(|w| w == "all" || w == "any");
                let mut out: Vec<(String, Option<std::net::IpAddr>, bool)> = Vec::new();
                for i in ucs::sys::net::interfaces() {
                    if !i.up || !(all || want.iter().any(|w| w == &i.name)) {
                        continue;
                    }
                    // One address per device: IPv4 first.
                    if let Some(e) = out.iter_mut().find(|e| e.0 == i.name) {
                        if e.1.is_some_and(|a| a.is_ipv6()) && i.addr.is_ipv4() {
                            e.1 = Some(i.addr);
                        }
                        continue;
                    }
                    out.push((i.name.clone(), Some(i.addr), i.loopback));
                }
                out.sort_by_key(|e| e.2);
                out.into_iter().map(|(n, a, _)| (n, a)).collect()
            }
        }
    }
}
