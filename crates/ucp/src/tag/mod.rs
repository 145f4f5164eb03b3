//! Tag matching with MPI semantics: the sans-IO matcher and the tag API with its eager
//! and rendezvous protocols.

pub mod api;
pub mod matcher;
pub(crate) mod rndv_put;
