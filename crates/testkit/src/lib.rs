//! rucx's dev-only test kit.
//!
//! - [`peer`]: spawning peer processes (normally the `rucx-testpeer` binary of this crate)
//!   and talking to them in lines over stdin/stdout, with a timeout on every wait and
//!   SIGKILL-and-reap on drop, so that multi-process tests clean up also when they fail.
//! - [`conformance`]: the single-process transport conformance suite, instantiated per
//!   transport by [`conformance_suite!`].
//! - [`pattern`]: deterministic data patterns that a receiver checks byte by byte without
//!   being told what was sent.
//! - [`procfs`]: /proc and /dev/shm inspection (segment modes, whether a segment is still
//!   held by anyone, whether a process sleeps in poll).
//! - [`proto`]: what the peer binary and the tests agree on (size plans, stream ids).
//! - [`hex`]: the encoding of binary values in the line protocol.
//! - [`fabric`] ([`Fabric`]): the in-memory transport with a virtual clock and fault hooks
//!   (uct's `fabric` module, which this crate enables), for protocol tests.
//! - [`require`]: skipping a test the machine cannot run, or failing it when
//!   `RUCX_REQUIRE` says the machine must (CI).
//!
//! The tests live in `tests/`, each file with a `//!` saying what it proves:
//! `conformance.rs` (the suite per transport), `am_multiproc.rs` (2 and 4 processes,
//! every AM flavour and size), `fifo_stress.rs` (10^6 messages from 3 producers),
//! `rma_multiproc.rs` (put/get 1 B to 16 MiB, CMA and mapped), `atomics_multiproc.rs`
//! (two processes on one word), `wakeup.rs`, `pending.rs`, `segments.rs` (mode 0600, gone
//! after exit and SIGKILL), `robustness.rs` (misuse must not crash), `tcp.rs` (IPv6,
//! simultaneous connects with two-way streaming, a stalled reader, malformed peers,
//! connection events) and `harness.rs` (the harness itself). The peer roles they use are documented in `src/bin/rucx-testpeer.rs`.
//!
//! Multi-process tests take [`heavy_test`] so that the polling peers of one test binary
//! do not compete with another test's; peers that merely wait block in `iface.wait`.

#![deny(unsafe_code)]

// The suite tests Md::mem_reg, an unsafe fn, and checks the memory around registrations
// (red zones) through raw pointers: the one module of testkit with unsafe code.
#[allow(unsafe_code)]
pub mod conformance;
pub mod fabric;
pub mod hex;
pub mod pattern;
pub mod peer;
pub mod procfs;
pub mod proto;
pub mod require;
pub mod simnet;

pub use fabric::Fabric;
pub use peer::{Peer, PeerError, PeerOptions};

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Default bound for one step of a multi-process test (a line, an exit). Generous: the
/// tests assert data, never timing, and this only keeps a hung peer from hanging the run.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(120);

static HEAVY: Mutex<()> = Mutex::new(());

/// Serialises the tests of one test binary that keep CPUs busy (polling peers), so that
/// at most one such test runs at a time on a small machine. A test that panicked while
/// holding it does not poison it for the others.
pub fn heavy_test() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}
