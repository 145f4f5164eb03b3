//! ucs — the service layer of rucx: status codes, configuration, logging, memory pools,
//! timers, event sets, and (in [`sys`]) the operating-system calls behind safe wrappers.
//!
//! Nothing here knows about transports or protocols; every other crate builds on it.

pub mod config;
pub mod status;
pub mod sys;

pub use status::{Result, Status};
