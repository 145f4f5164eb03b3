//! rucx benchmark library: the tests of rucx-perftest, their results, and the table and
//! JSON output.
//!
//! - [`registry`]: the tests by name ([`TESTS`]), their kind and data layouts;
//! - [`params`]: what one run does ([`Params`]);
//! - [`transport`]: the transport-layer (uct) tests between two processes ([`UctPeer`]);
//! - [`channel`]: the out-of-band messages between the two sides ([`LineChannel`]);
//! - [`stats`]: per-iteration timestamps and the numbers computed from them ([`PerfResult`]);
//! - [`report`]: ucx_perftest's table and the JSON line;
//! - [`mem`]: memory regions the peer reads or writes, and the data pattern;
//! - [`affinity`]: CPU pinning.
//!
//! The process model (who starts the peer, how the channel's descriptors are made) is the
//! tool's business; this crate only needs a [`channel::Channel`].

pub mod affinity;
pub mod channel;
pub mod mem;
pub mod params;
pub mod registry;
pub mod report;
pub mod stats;
pub mod transport;

pub use channel::{Channel, LineChannel, Msg};
pub use params::Params;
pub use registry::{lookup, Kind, Layout, LookupError, TestId, TestInfo, TESTS};
pub use stats::PerfResult;
pub use transport::UctPeer;
