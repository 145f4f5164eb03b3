//! rucx benchmark library: the tests of rucx-perftest, their results, and the table and
//! JSON output.
//!
//! - [`registry`]: the tests by name ([`TESTS`]), their kind and data layouts;
//! - [`params`]: what one run does ([`Params`]);
//! - [`transport`]: the transport-layer (uct) tests between two processes ([`UctPeer`]), or
//!   in one process on an interface connected to itself ([`UctPeer::loopback`]);
//! - [`protocol`]: the protocol-layer (ucp) tests between two processes ([`UcpPeer`]), or
//!   in one process on an endpoint to its own worker ([`UcpPeer::loopback`]);
//! - [`session`]: a run of tests of either layer over one channel ([`Initiator`],
//!   [`respond`]);
//! - [`channel`]: the out-of-band messages between the two sides ([`LineChannel`]);
//! - [`net`]: that channel over TCP, between hosts (server/client mode);
//! - [`handshake`]: the channel steps every test shares;
//! - [`stats`]: per-iteration timestamps and the numbers computed from them ([`PerfResult`]);
//! - [`clock`]: the cheap clock of the timed loops (TSC, or `Instant`);
//! - [`report`]: ucx_perftest's table and the JSON line;
//! - [`mem`]: memory regions the peer reads or writes, and the data pattern;
//! - [`affinity`]: CPU pinning;
//! - [`collective`]: the collective benchmarks over a team of N processes (coll);
//! - `pmix` (feature `pmix`): the PMIx client that forms such a team under mpirun.
//!
//! The process model (who starts the peer, how the channel's descriptors are made) is the
//! tool's business; this crate only needs a [`channel::Channel`].

#![deny(unsafe_code)]

pub mod affinity;
pub mod channel;
// rdtsc is an unsafe intrinsic.
#[allow(unsafe_code)]
pub mod clock;
pub mod collective;
pub mod handshake;
// Aligned heap buffers, and regions registered with Md::mem_reg (unsafe) that the peer
// writes: raw views of memory other processes change.
#[allow(unsafe_code)]
pub mod mem;
pub mod net;
pub mod params;
// FFI to libpmix (behind the pmix feature).
#[cfg(feature = "pmix")]
#[allow(unsafe_code)]
pub mod pmix;
// Unsafe only in its message buffers (protocol::msgbuf), which it allows itself.
pub mod protocol;
pub mod registry;
pub mod report;
pub mod session;
pub mod stats;
// Hands the threads' own vectors to the shared worker's nonblocking calls as raw buffers
// (Buf::contig), which each thread keeps valid until its operations complete.
#[allow(unsafe_code)]
pub mod threads;
pub mod transport;

pub use channel::{Channel, LineChannel, Msg};
pub use params::Params;
pub use protocol::{NoPeer, UcpPeer};
pub use registry::{lookup, Api, Kind, Layout, LookupError, TestId, TestInfo, TESTS};
pub use session::{respond, Initiator};
pub use stats::PerfResult;
pub use transport::UctPeer;
