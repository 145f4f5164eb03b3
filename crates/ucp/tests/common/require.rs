//! `RUCX_REQUIRE`: a test that cannot run here skips with a message, or fails when the
//! variable names the missing feature (CI sets it). testkit holds (and tests) it.

pub use testkit::require::*;
