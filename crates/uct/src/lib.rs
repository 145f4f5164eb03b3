//! uct — the transport layer of rucx.
//!
//! A memory domain ([`Md`]) allocates and registers memory and packs/unpacks remote keys;
//! an interface ([`Iface`]) is one transport on one device, with endpoints ([`EpId`]) to
//! peers, active messages, RMA, atomics, flush/fence, pending queues and an event fd for
//! blocking waits. Transports are modules ([`self_tl`], [`shm`]) dispatched statically
//! through an enum. See docs/architecture.md and docs/wire-formats.md.

pub mod am;
pub mod config;
pub mod iface;
pub mod md;
pub mod rkey;
pub mod rma;
pub mod self_tl;
pub mod shm;
mod slab;
pub mod types;
pub mod wire;

pub use config::IfaceConfig;
pub use iface::Iface;
pub use md::{Md, MemHandle};
pub use rkey::Rkey;
pub use types::*;

/// The transports this build has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Loopback inside one process.
    SelfTl,
    /// Shared memory between processes of one host.
    Shm,
}

impl Transport {
    /// Every transport, in the order `rucx-info` lists them.
    pub const ALL: [Transport; 2] = [Transport::SelfTl, Transport::Shm];

    /// The name used in UCX_TLS and `-x`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::SelfTl => "self",
            Transport::Shm => "shm",
        }
    }

    /// Parses a transport name. UCX's names of its shared-memory transports (`posix`,
    /// `sysv`, `mm`, `cma`) select rucx's shm, which covers all of them.
    pub fn from_name(s: &str) -> Option<Transport> {
        match s {
            "self" => Some(Transport::SelfTl),
            "shm" | "posix" | "sysv" | "mm" | "cma" => Some(Transport::Shm),
            _ => None,
        }
    }

    /// The device name (one device per transport on this host).
    pub fn device(self) -> &'static str {
        "memory"
    }
}
