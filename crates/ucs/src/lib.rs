//! ucs — the service layer of rucx: status codes, configuration, logging, object and
//! buffer pools, timers, event sets, and (in [`sys`]) the operating-system calls behind
//! safe wrappers.
//!
//! Nothing here knows about transports or protocols; every other crate builds on it.
//! `unsafe` lives in [`sys`] only.

#![deny(unsafe_code)]

pub mod bufpool;
pub mod config;
pub mod event;
pub mod log;
pub mod pool;
pub mod stats;
pub mod status;
// The operating-system calls (DESIGN.md): the one unsafe module of ucs.
#[allow(unsafe_code)]
pub mod sys;
pub mod timer;

pub use bufpool::BufPool;
pub use event::{EventSet, Events};
pub use pool::{Pool, PoolIdx, Removal};
pub use stats::{Counter, CounterSet};
pub use status::{Result, Status};
pub use timer::{now_ns, TimerId, TimerQueue};
