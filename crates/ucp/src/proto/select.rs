//! Protocol selection: the size thresholds of an endpoint's lane, computed once when the
//! endpoint connects, so that a send only compares its length against them.

use super::header::{EAGER_FIRST_LEN, EAGER_MIDDLE_LEN, EAGER_ONLY_LEN, EAGER_SYNC_LEN};
use crate::config::{Config, Thresh};
use uct::IfaceAttr;

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

/// Thresholds of one lane.
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
    /// Computes the thresholds of a lane from its transport attributes and the
    /// configuration. `rma` tells whether the lane can move data in one copy (rendezvous
    /// possible).
    pub fn new(attr: &IfaceAttr, cfg: &Config, rma: bool) -> Thresholds {
        let max_short = attr.max_am_short;
        let max_bcopy = attr.max_am_bcopy.saturating_sub(EAGER_ONLY_LEN);
        let put = !rma && attr.caps.contains(uct::Caps::PUT_ZCOPY);
        let rndv = match cfg.rndv_thresh {
            Thresh::Bytes(n) => n,
            Thresh::Auto if !rma && !put => usize::MAX,
            Thresh::Auto => auto_rndv(attr),
        };
        let zcopy = match cfg.zcopy_thresh {
            Thresh::Bytes(n) => n,
            Thresh::Auto => 16 << 10,
        };
        Thresholds {
            max_short,
            max_bcopy,
            max_sync_bcopy: attr.max_am_bcopy.saturating_sub(EAGER_SYNC_LEN),
            first_frag: attr.max_am_bcopy.saturating_sub(EAGER_FIRST_LEN),
            mid_frag: attr.max_am_bcopy.saturating_sub(EAGER_MIDDLE_LEN),
            rndv: if rma || put { rndv.max(1) } else { usize::MAX },
            zcopy,
            rma,
            put,
        }
    }

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

/// The size where a rendezvous (round trip plus one copy at the RMA bandwidth) becomes
/// cheaper than eager fragments (copied in and out of the transport's buffers).
fn auto_rndv(attr: &IfaceAttr) -> usize {
    let eager_per_byte = 2.0 / attr.cost.bandwidth;
    let rndv_per_byte = 1.0 / attr.rma_cost.bandwidth;
    let rndv_fixed = 2.0 * attr.cost.latency + attr.rma_cost.overhead + attr.rma_cost.latency;
    if eager_per_byte <= rndv_per_byte {
        return usize::MAX;
    }
    let n = rndv_fixed / (eager_per_byte - rndv_per_byte);
    (n as usize).clamp(attr.max_am_bcopy, 1 << 20)
}
