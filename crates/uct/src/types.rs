//! The vocabulary of the transport API: capabilities, attributes and the cost model,
//! operation outcomes, atomic operations, endpoint ids and pending requests.

use bitflags::bitflags;

bitflags! {
    /// What an interface can do. Protocol selection reads these.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Caps: u32 {
        const AM_SHORT = 1 << 0;
        const AM_BCOPY = 1 << 1;
        const AM_ZCOPY = 1 << 2;
        const PUT_SHORT = 1 << 3;
        const PUT_BCOPY = 1 << 4;
        const PUT_ZCOPY = 1 << 5;
        const GET_BCOPY = 1 << 6;
        const GET_ZCOPY = 1 << 7;
        const ATOMIC32 = 1 << 8;
        const ATOMIC64 = 1 << 9;
        /// Endpoints connect to a remote interface address (no handshake needed).
        const CONNECT_TO_IFACE = 1 << 10;
        /// Endpoints connect to a remote endpoint address.
        const CONNECT_TO_EP = 1 << 11;
        /// The interface has a file descriptor that becomes readable on arrival.
        const EVENT_RECV = 1 << 12;
        /// Remote memory can be reached by a direct load/store mapping (`rkey_ptr`).
        const RKEY_PTR = 1 << 13;
    }
}

/// The transport's measured (or estimated) costs, in seconds and bytes per second.
/// Protocol selection compares `overhead + latency + size / bandwidth` between lanes and
/// protocols.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// CPU time the sender spends per operation.
    pub overhead: f64,
    /// One-way latency of a small message.
    pub latency: f64,
    /// Bandwidth of large transfers, bytes per second.
    pub bandwidth: f64,
}

impl CostModel {
    /// Estimated time to move `size` bytes.
    pub fn time(&self, size: usize) -> f64 {
        self.overhead + self.latency + size as f64 / self.bandwidth
    }
}

/// Attributes of an open interface.
#[derive(Clone, Debug)]
pub struct IfaceAttr {
    pub caps: Caps,
    /// Largest `am_short` payload (header excluded).
    pub max_am_short: usize,
    /// Largest `am_bcopy` packed size.
    pub max_am_bcopy: usize,
    /// Largest `am_zcopy` header + payload.
    pub max_am_zcopy: usize,
    /// Largest header of `am_zcopy`.
    pub max_am_hdr: usize,
    pub max_put_short: usize,
    pub max_put_bcopy: usize,
    pub max_put_zcopy: usize,
    pub max_get_bcopy: usize,
    pub max_get_zcopy: usize,
    /// Size of this interface's address.
    pub iface_addr_len: usize,
    /// Size of this interface's device address.
    pub device_addr_len: usize,
    pub cost: CostModel,
    /// Cost of one-copy remote memory access (CMA or mapping), used for rendezvous.
    pub rma_cost: CostModel,
}

/// Result of an operation that did not fail: it either completed, will complete later
/// (reported through the completion token it was given), or could not start for lack of
/// resources (retry, or queue it with `pending_add`).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<T = ()> {
    Done(T),
    InProgress,
    NoResource,
}

impl<T> Outcome<T> {
    /// True for `Done`.
    pub fn is_done(&self) -> bool {
        matches!(self, Outcome::Done(_))
    }
}

/// A token naming an operation that returned `InProgress`; its completion is reported
/// with this token by the interface's completion callback.
pub type Comp = u64;

/// An endpoint of an interface. An id names one endpoint for good: after `ep_destroy` its
/// slot may hold a new endpoint, under a new id (the slot's generation is part of the id),
/// and using the destroyed id is an error (`InvalidParam`), never a crash or another
/// endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpId(pub u32);

impl EpId {
    /// The slot of the endpoint in its interface (the id without its generation): small
    /// and dense, for tables indexed by endpoint.
    #[inline]
    pub fn slot(self) -> usize {
        (self.0 & crate::slab::INDEX_MASK) as usize
    }
}

/// The 32 active-message ids of UCT.
pub const AM_ID_MAX: u8 = 32;

/// Atomic operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    Add,
    And,
    Or,
    Xor,
    /// Fetching only.
    Swap,
    /// Fetching only: `compare` is the expected value.
    Cswap,
}

/// Operand width of an atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicSize {
    B32,
    B64,
}

impl AtomicSize {
    /// Width in bytes.
    pub fn bytes(self) -> usize {
        match self {
            AtomicSize::B32 => 4,
            AtomicSize::B64 => 8,
        }
    }
}

/// What a pending callback reports: it sent its operation, or it still has no resource
/// and stays at the head of its endpoint's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingResult {
    Done,
    Again,
}

/// A queued operation. It is called from progress with the interface and its endpoint.
pub type PendingFn = Box<dyn FnMut(&mut crate::Iface, EpId) -> PendingResult + Send>;

/// An active-message handler: gets the message bytes (for `am_short`, the 8-byte header
/// in native byte order followed by the payload).
pub type AmHandler = Box<dyn FnMut(&[u8]) + Send>;
