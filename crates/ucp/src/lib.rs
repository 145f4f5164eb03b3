//! ucp — the protocol layer of rucx: context, worker, endpoints with lazy wireup, the
//! worker address, tag matching with MPI semantics, and the eager and rendezvous
//! protocols over the transports of `uct`.
//!
//! The Rust API is in [`Worker`]; nonblocking calls that borrow user memory beyond the
//! call are `unsafe` with their contract spelled out, and every one has a safe blocking
//! counterpart. The C ABI (crate capi) is a thin layer over this.

pub mod address;
pub mod am;
pub mod config;
pub mod context;
pub mod listener;
pub mod mem;
pub mod proto;
pub mod request;
pub mod rma;
pub mod shared;
pub mod stream;
pub mod tag;
pub mod worker;

pub use am::{AmAction, AmData, AmDesc, AmMsg};
pub use config::Config;
pub use config::RmaPath;
pub use context::{Context, Features, Resource};
pub use listener::{ConnReqId, ListenerId};
pub use mem::MemH;
pub use request::{Buf, Callback, Completed, GenericDt, RecvInfo, Request};
pub use rma::RemoteKey;
pub use shared::SharedWorker;
pub use uct::cm::ConnRequest;
pub use uct::{AtomicOp, AtomicSize};
pub use worker::{Ep, EpStatus, Message, ThreadMode, Worker};
