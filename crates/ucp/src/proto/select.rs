//! Protocol selection: the size thresholds of an interface's lanes, computed once when the
//! worker opens it, and the choice of protocol of each kind of send.

use super::am::{EAGER_HDR, FIRST_HDR};
use super::header::{EAGER_FIRST_LEN, EAGER_MIDDLE_LEN, EAGER_ONLY_LEN, EAGER_SYNC_LEN};
use crate::config::{Config, Thresh};
pub use crate::core::ep::{Proto, Thresholds};
use crate::core::request::{AmSendFlags, Buf};
use ucs::{Result, Status};
use uct::IfaceAttr;

/// The thresholds of lanes on an interface with attributes `attr` under `cfg`. `rma`
/// tells whether the interface moves data in one copy (rendezvous by get possible).
pub fn thresholds(attr: &IfaceAttr, cfg: &Config, rma: bool) -> Thresholds {
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

/// The protocol of a tag send of `buf` on a lane with thresholds `th`.
#[inline]
pub fn tag_proto(th: &Thresholds, buf: &Buf, sync: bool) -> Proto {
    let proto = th.select(buf.len(), sync);
    if proto == Proto::Rndv && (buf.contig_ptr().is_none() || buf.is_empty()) {
        Proto::Multi
    } else {
        proto
    }
}

/// The protocol of an active message with a `hdr_len`-byte header and `data` on a lane
/// with thresholds `th`; `InvalidParam` when it cannot go as asked.
#[inline(always)]
pub fn am_proto(th: &Thresholds, hdr_len: usize, data: &Buf, flags: AmSendFlags) -> Result<Proto> {
    let len = data.len();
    let fits = EAGER_HDR + hdr_len + len <= th.max_bcopy + 8;
    if flags.eager && !fits {
        return Err(Status::InvalidParam);
    }
    let want_rndv = flags.rndv || (!flags.eager && (!fits || (len >= th.rndv && len > 0)));
    // Rendezvous needs a lane that reads remote memory and a contiguous buffer (looked at
    // only when wanted); other large messages go in fragments.
    if want_rndv && th.rma && data.contig_ptr().is_some() {
        return Ok(Proto::Rndv);
    }
    if fits {
        return Ok(Proto::Bcopy);
    }
    if FIRST_HDR + hdr_len > th.max_bcopy {
        return Err(Status::InvalidParam);
    }
    Ok(Proto::Multi)
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
