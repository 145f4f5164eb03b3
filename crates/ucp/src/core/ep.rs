//! The endpoint table's entries: an endpoint's handle, state, lane and queue.
//!
//! Invariants: an endpoint has a lane exactly when it is `Connected` (or failed after
//! connecting); its queue holds operations in issue order and is drained only through the
//! lane; `outstanding` counts operations that wait for the peer (flush waits for zero).

use crate::address::WorkerAddress;
pub use crate::core::lane::{Proto, Thresholds};
use crate::core::request::Request;
use std::collections::VecDeque;
use ucs::Status;
use uct::EpId;

pub use crate::core::ids::Ep;

/// State of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpStatus {
    Created,
    /// Made from a server's socket address: waiting for the server's worker address.
    /// Operations queue until it arrives.
    Connecting,
    Connected,
    Failed(Status),
}

/// The transport path of a connected endpoint: small, so that operations copy it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lane {
    /// Index of the worker's interface (its thresholds are `Tl::th`).
    pub tl: usize,
    pub ep: EpId,
    /// Index of the peer's interface entry this lane connects to.
    pub entry: usize,
}

/// A queued operation of an endpoint, sent in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queued {
    /// The message that tells the peer who we are.
    Wireup,
    Send(Request),
    Rma(Request),
}

/// Called when an endpoint fails: the peer died, reset or closed its connection.
pub type ErrHandler = Box<dyn FnMut(Ep, Status) + Send>;

pub(crate) struct EpState {
    pub remote: WorkerAddress,
    pub lane: Option<Lane>,
    pub status: EpStatus,
    pub queue: VecDeque<Queued>,
    /// Operations waiting for the peer's acknowledgement.
    pub outstanding: usize,
    /// Created by the worker on a peer's wireup, not by the application (yet).
    pub implicit: bool,
    /// Called once when the endpoint fails (error handling mode "peer").
    pub err_handler: Option<ErrHandler>,
    /// Rendezvous receives from this peer that will not split (`rndv::split`): set when
    /// the peer's part came late in several splits in a row, counted down by each
    /// rendezvous.
    pub split_skip: u16,
    /// Splits in a row whose peer's part came late.
    pub split_late: u8,
    /// Whether this process and the peer may run on two CPUs at once (else no split
    /// ever), found at the first rendezvous that could split.
    pub split_two_cpus: Option<bool>,
}

impl EpState {
    pub(crate) fn new(remote: WorkerAddress) -> EpState {
        EpState {
            remote,
            lane: None,
            status: EpStatus::Created,
            queue: VecDeque::new(),
            outstanding: 0,
            implicit: false,
            err_handler: None,
            split_skip: 0,
            split_late: 0,
            split_two_cpus: None,
        }
    }
}
