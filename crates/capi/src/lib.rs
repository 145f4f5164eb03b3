//! rucx C ABI: the UCP API of UCX 1.13 as `libucp.so.0` (with `libucs.so.0`,
//! `libuct.so.0` and `libucm.so.0` resolving to the same library), over the Rust crates.
//!
//! This crate is glue: it checks handles and parameters, translates between UCX's
//! structs and the Rust API, and runs C callbacks at safe points. No protocol logic lives
//! here. The map of what is supported is in `docs/c-abi.md`.
//!
//! Every exported function:
//! - runs its body inside a panic boundary ([`guard`]): a panic becomes an error status;
//! - checks its handles ([`handle`]): null, destroyed, or another kind of handle gives
//!   `UCS_ERR_INVALID_PARAM`;
//! - reads parameter structs only as far as their `field_mask` says ([`ffi`]).
//!
//! The safety contract of each `unsafe extern "C"` function is the one UCX documents for
//! it (valid pointers of the documented types, buffers valid until completion), hence no
//! per-function `# Safety` sections.

#![allow(clippy::missing_safety_doc)]
#![allow(clippy::too_many_arguments)]
#![allow(non_upper_case_globals)]

pub mod ffi;
mod guard;
mod handle;

// Helpers that know no worker.
mod address;
mod am_small;
mod cqh;
mod sockaddr;
mod text;

// The worker core: worker handle, borrow rule, request headers and pool.
mod core;
// The event dispatch: C callbacks of requests and C handlers of events.
mod dispatch;
mod plain_send;
mod posted;

// One module per API family, each with its exported functions.
mod am;
mod context;
mod cq;
mod dt;
mod ep;
mod listener;
mod put_signal;
mod request;
mod rma;
mod stream;
mod tag;
mod worker;

// The ucs/uct/ucm names the same library provides.
mod ucm_api;
mod ucs_api;
mod ucs_util;
pub mod uct_api;

/// Bytes of the request header rucx keeps in front of every request (the
/// `request_size` `ucp_context_query` reports).
pub const REQUEST_HEADER_SIZE: usize = core::HDR_SIZE;
