//! The in-memory fabric for tests: a uct transport whose interfaces are nodes of a
//! network living in this process, with a virtual clock and fault hooks (drop, duplicate,
//! delay, reorder, a full lane, a node killed at a chosen step). The transport is uct's
//! `fabric` module; its module docs give the fault model. This is the handle tests use.
//!
//! ```
//! use testkit::fabric::{Fabric, Faults};
//! use uct::{Iface, IfaceConfig, Transport};
//!
//! let fab = Fabric::new(42); // seeded, and entered on this thread
//! fab.set_faults(Faults { drop: 0.1, ..Faults::default() });
//! let a = Iface::open(Transport::Fabric, &IfaceConfig::default()).unwrap();
//! let b = Iface::open(Transport::Fabric, &IfaceConfig::default()).unwrap();
//! assert!(a.is_reachable(&b.device_address(), &b.address()));
//! assert_eq!(fab.node_count(), 2);
//! ```

pub use uct::fabric::{Fabric, FabricConfig, FabricStats, Faults, NodeId, RndvMode};
