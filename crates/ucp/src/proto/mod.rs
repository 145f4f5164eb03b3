//! Protocol messages and the per-endpoint choice of protocol by message size.

pub mod header;
pub mod rma;
pub mod select;
