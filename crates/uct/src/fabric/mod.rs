//! The fabric transport: an in-memory network for tests (cargo feature `fabric`, off by
//! default), with a virtual clock and fault injection. Test code uses it through
//! `testkit::Fabric`.
//!
//! # Network
//!
//! A [`Fabric`] is one network; every interface opened on its device (`fabric<id>`,
//! listed by `Transport::Fabric.devices()` for the network the calling thread entered with
//! [`Fabric::enter`]) is a node of it, numbered in the order they were opened
//! ([`NodeId`]). Nodes of one network reach each other (`CONNECT_TO_IFACE`); nodes of
//! different networks never do. Nothing is global but the registry of networks, so tests
//! running in parallel threads each have their own network.
//!
//! # Delivery: reliable, ordered, exactly once (like udp)
//!
//! Every interface runs the reliability engine of [`uct_rel`] (sequence numbers,
//! acknowledgements, NAKs, retransmission, duplicate suppression), the one udp uses. The
//! network carries the engine's datagrams and applies [`Faults`] to every one of them,
//! acknowledgements included: **drop** (lost), **duplicate** (delivered twice), **delay**
//! (a random transit time) and **reorder** (held back so that later datagrams overtake
//! it). The engines recover from all of them, so the transport offers the protocol layer
//! what tcp and shm offer: reliable, in-order, exactly-once active messages per pair of
//! interfaces. A loss is therefore never visible to ucp as a loss; it only costs
//! retransmissions in virtual time. Only the death of a node is visible, as errors.
//!
//! # Virtual clock
//!
//! Time is the network's clock, in ns, and only moves when the test says so:
//! [`Fabric::advance`], or automatically by a fixed tick at every progress of every
//! interface ([`Fabric::set_auto_tick`]). Transit delays, retransmission timeouts,
//! keepalive probes and peer timeouts all run on it, so a test that drops datagrams or
//! kills a node must let time pass (a test that only progresses and never moves the clock
//! sees only fault-free runs complete). With the default zero delay, a datagram is
//! delivered at the receiver's next progress.
//!
//! # Steps, lanes and death
//!
//! Every send attempt of any interface (`am_short`, `am_bcopy`, `am_zcopy`, `put_zcopy`,
//! `get_zcopy`, also one that then returns `NoResource` or fails) is one **step** of the
//! network ([`Fabric::steps`]); hooks fire at a chosen step, before that attempt runs:
//!
//! - [`Fabric::kill_at_step`] / [`Fabric::kill`]: the node dies as a process does. From
//!   then on it sends and receives nothing; what was in flight to it is lost. Its own
//!   interface fails every endpoint at once (`EpFailed(ep, ConnectionReset)` events; sends
//!   return `ConnectionReset`) and reports every peer that had only sent to it
//!   (`IfaceEvent::PeerClosed` with its address), so that the dead side's requests
//!   complete with an error too, receives of half-arrived messages included. Its peers notice by silence: their engines retransmit or probe (keepalive), and
//!   after [`FabricConfig::peer_timeout`] of virtual time their endpoints to it fail with
//!   `EndpointTimeout` (events, then errors from every operation), as udp reports a dead
//!   peer; a dead peer that only sent to this interface (no endpoint to it) is reported
//!   as `IfaceEvent::PeerClosed` with its address. A closed interface (dropped, e.g. its worker destroyed) is silent the same way.
//! - [`Fabric::fill_at_step`] / [`Fabric::fill`]: the node's lane is full: its sends
//!   return `NoResource` (and `pending_add` queues) until [`Fabric::release`] or until the
//!   hold time passed on the virtual clock. The engine's window
//!   ([`FabricConfig::window`]) also returns `NoResource` of its own when a peer has that
//!   many unacknowledged messages.
//!
//! # Remote memory
//!
//! The domain registers memory with wire keys (as tcp's: checked by the owner, never a
//! pointer for the peer) and offers no keys for the protocol layer's RMA, which ucp
//! therefore emulates with active messages. For rendezvous the network offers one of two
//! operations ([`RndvMode`]): `put_zcopy`, a message executed against the receiver's
//! registration when delivered (ordered with the active messages around it); or
//! `get_zcopy`, a synchronous one-copy read of the owner's registration (the nodes share
//! the test's address space), refused once the owner is dead.
//!
//! # Determinism
//!
//! Faults come from a generator seeded by the test ([`Fabric::new`]); given the same
//! sequence of calls, a run is the same. Tests print the seed when they fail.

mod iface;
mod net;
mod rng;
pub mod wire;

pub use iface::FabricIface;
pub use net::{current_device, Fabric, FabricConfig, FabricStats, Faults, NodeId, RndvMode};
