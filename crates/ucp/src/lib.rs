//! ucp — the protocol layer of rucx: context, worker, endpoints with lazy wireup, the
//! worker address, tag matching with MPI semantics, and the eager and rendezvous
//! protocols over the transports of `uct`.
//!
//! The Rust API is in [`Worker`]. Every nonblocking call is safe. The ones that take a
//! [`Buf`] (`tag_send_nb`, `put_nb`, ...) use memory the `Buf` names: owned memory
//! (`Buf::from(Vec<u8>)`), an application datatype ([`Buf::generic`]), or the caller's
//! memory through the `unsafe` constructors [`Buf::contig`] and [`Buf::iov`], whose
//! contract is that the memory stays valid until the request completes (or is aborted and
//! its completion seen). The owned-buffer calls (`tag_send_owned`, `request_take_owned`,
//! ...) move a `Vec<u8>` in and give it back. Every call also has a safe blocking
//! counterpart. The C ABI (crate capi) is a thin layer over this.
//!
//! `unsafe` code is denied in the crate but for two modules that access raw memory:
//! `core::buf` (the memory of a request's buffer) and [`mem`] (regions mapped for peers,
//! under a lease); the blocking conveniences that lend a borrowed slice to a request they
//! wait for carry an item-level allow each.
//!
//! Module map, bottom to top (no module imports one above it, and none imports a module
//! that imports it back; `crates/ucs/tests/module_cycles.rs` checks it):
//! - `address`, `config`, `context`, `mem`, `matcher`: the worker address, configuration,
//!   the context with its resources and memory regions, the tag matching structure;
//! - `core`: requests and their pool, buffers, the endpoint table with each endpoint's
//!   lane, the transports, connecting, completion, completion queues; knows no protocol;
//! - `proto`: the one `AmId` table, the wire codecs, protocol selection;
//! - `rndv`: the rendezvous data movers shared by tag and am;
//! - `tag`, `am`, `stream`, `rma`: one module per protocol (API, send step, receive
//!   handlers, state); none imports another;
//! - `engine`: send queues, receive dispatch, deferred work, endpoint events;
//! - `cm`: the client–server connection state;
//! - `worker`: lifecycle, progress, flush, close, wakeup, and the public API of each
//!   protocol; `shared`: the worker for several threads.

#![deny(unsafe_code)]

pub mod address;
pub mod am;
pub mod cm;
pub mod config;
pub mod context;
pub(crate) mod core;
pub(crate) mod engine;
pub mod matcher;
mod seq_queue;
// Maps memory for peers and reads and writes the mapped regions (DESIGN.md's memory
// access): one of the two modules with unsafe code.
#[allow(unsafe_code)]
pub mod mem;
pub mod progress_thread;
pub mod proto;
pub mod rma;
pub(crate) mod rndv;
pub mod shared;
pub mod stream;
pub mod tag;
pub mod worker;

pub use am::{AmAction, AmData, AmDesc, AmMsg, AmSendFlags};
pub use cm::{ConnReqId, ListenerId};
pub use config::Config;
pub use config::RmaPath;
pub use context::{Context, Features, Resource};
pub use core::cq::{AmPayload, Cq, CqId, CqOp, Entry as CqEntry};
pub use core::ep::{Ep, EpStatus, Proto, Thresholds};
pub use core::request::{Buf, Callback, Completed, GenericDt, RecvInfo, Request, SignalOp};
pub use mem::MemH;
pub use progress_thread::ProgressThread;
pub use rma::RemoteKey;
pub use shared::SharedWorker;
pub use stream::StreamRecv;
pub use tag::{Message, RecvPosted, RecvTicket, WordRecv};
pub use uct::cm::ConnRequest;
pub use uct::{AtomicOp, AtomicSize};
pub use worker::{Sent, Taken, ThreadMode, Worker};

/// Request types (kept for paths used before the module split).
pub mod request {
    pub use crate::core::request::{Buf, Callback, Completed, GenericDt, RecvInfo, Request};
}
