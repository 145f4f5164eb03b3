//! The small plain handles the core's modules share (an endpoint, a kept active message),
//! in a module of their own so that the completion queue, which carries both, needs
//! neither the endpoint table nor the requests.

/// An endpoint handle: the endpoint's slot and the slot's generation, so that a handle
/// kept after its endpoint was closed is refused (`InvalidParam`) rather than reaching
/// whichever peer takes the slot next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ep(pub(crate) u32, pub(crate) u32);

/// Names a received active message's data for `am_data`, `am_data_release` and
/// `am_recv_data_nb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AmDesc(pub u64);
