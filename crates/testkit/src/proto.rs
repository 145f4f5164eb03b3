//! Pieces of the test protocols that the peer binary and the tests must agree on: the
//! size plan of the multi-process AM test, its stream ids, and the stress-test header.

use uct::IfaceAttr;

/// AM flavours, as they are numbered in stream ids and patterns.
pub const SHORT: u8 = 0;
pub const BCOPY: u8 = 1;
pub const ZCOPY: u8 = 2;
/// All three, in sending order.
pub const KINDS: [u8; 3] = [SHORT, BCOPY, ZCOPY];

/// The sizes the multi-process AM test sends of flavour `kind`, around the interface's
/// limits: 0, 1, each limit, one below and above it (where allowed), and a few between.
pub fn am_size_plan(a: &IfaceAttr, kind: u8) -> Vec<usize> {
    let (mut v, max) = match kind {
        SHORT => (
            vec![0, 1, 2, 7, 8, 9, 63, 64, a.max_am_short - 1, a.max_am_short],
            a.max_am_short,
        ),
        BCOPY => (
            vec![
                0,
                1,
                a.max_am_short,
                a.max_am_short + 1,
                1000,
                4095,
                4096,
                a.max_am_bcopy - 1,
                a.max_am_bcopy,
            ],
            a.max_am_bcopy,
        ),
        _ => (
            vec![
                0,
                1,
                a.max_am_hdr,
                a.max_am_hdr + 1,
                4097,
                a.max_am_zcopy - 1,
                a.max_am_zcopy,
            ],
            a.max_am_zcopy,
        ),
    };
    v.retain(|&s| s <= max);
    v
}

/// The active-message id of stream (`kind`, `sender`): each stream gets its own handler,
/// so a receiver knows the sender of a message without a header (sizes go down to 0).
/// Senders are numbered below 8.
pub fn am_stream_id(kind: u8, sender: u32) -> u8 {
    1 + kind * 8 + sender as u8
}

/// The 8-byte header of stress message `seq` of producer `id`.
pub fn stress_header(id: u32, seq: u64) -> u64 {
    (u64::from(id) << 40) | seq
}

/// Splits a stress header into (producer id, sequence).
pub fn stress_split(hdr: u64) -> (u32, u64) {
    ((hdr >> 40) as u32, hdr & ((1 << 40) - 1))
}

/// Stress message `seq` is a bcopy (else a short).
pub fn stress_is_bcopy(seq: u64) -> bool {
    seq % 8 == 7
}

/// Payload bytes after the header of stress message `seq`.
pub fn stress_payload_len(seq: u64) -> usize {
    if stress_is_bcopy(seq) {
        (seq % 97) as usize
    } else {
        (seq % 17) as usize
    }
}
