//! The configuration of a lane resolved once, when the worker opens the interface: the
//! size thresholds that choose a protocol, so that a send only compares its length.

/// How a message of a given size is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// One `am_short`: the tag travels as the transport header.
    Short,
    /// One `am_bcopy` with the header packed in front of the data.
    Bcopy,
    /// A first fragment and middle fragments.
    Multi,
    /// Rendezvous: the receiver pulls the data in one copy.
    Rndv,
}

/// The size thresholds of one interface, resolved when the worker opens it (the protocol
/// layer computes them from the transport's attributes and the configuration), so that a
/// send only compares its length against them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Largest message sent by `Short`.
    pub max_short: usize,
    /// Largest message sent by `Bcopy`.
    pub max_bcopy: usize,
    /// Largest synchronous message sent in one `Bcopy`.
    pub max_sync_bcopy: usize,
    /// Payload bytes of a first fragment.
    pub first_frag: usize,
    /// Payload bytes of a middle fragment.
    pub mid_frag: usize,
    /// Messages of at least this size use rendezvous.
    pub rndv: usize,
    /// Fragments of messages of at least this size are gathered with `am_zcopy`.
    pub zcopy: usize,
    /// The lane can read the peer's memory in one copy (rendezvous possible).
    pub rma: bool,
    /// The lane cannot read but can put into the peer's memory: rendezvous where the
    /// receiver asks for the data and the sender puts it (tcp).
    pub put: bool,
}

impl Thresholds {
    /// The protocol for a message of `len` bytes.
    #[inline]
    pub fn select(&self, len: usize, sync: bool) -> Proto {
        if len >= self.rndv {
            Proto::Rndv
        } else if !sync && len <= self.max_short {
            Proto::Short
        } else if len
            <= if sync {
                self.max_sync_bcopy
            } else {
                self.max_bcopy
            }
        {
            Proto::Bcopy
        } else {
            Proto::Multi
        }
    }
}
