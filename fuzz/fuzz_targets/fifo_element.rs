//! Fuzz target: the shared-memory receive FIFO against producers that write arbitrary
//! element headers.
//!
//! One `FifoRx` (8 elements of 128 bytes, 256-byte bcopy buffers) and one `FifoTx` attached
//! to its segment. The input is a program of operations: claim a slot, publish a held slot
//! (in any order) with a fuzz-chosen active-message id, flags and length after writing some
//! bytes into its inline area or bcopy buffer, poll, arm, and ask `has_space`/`has_data`.
//!
//! The first input byte picks the mode:
//! - well-behaved producer (even): every claimed slot is published exactly once. The target
//!   keeps a model of the queue and checks the receiver exactly: claims succeed while fewer
//!   than 8 slots are outstanding as producers see it (the consumer hands slots back two at
//!   a time, and all of them when it arms), elements come out in claim order once the oldest one is
//!   published, at most `max_poll` per poll, a well-formed element is delivered with the
//!   id, bytes and location it was written with, a malformed one (bad flags, a length
//!   larger than its area, an id of 32 or more) is counted as dropped and never delivered,
//!   and `arm`/`publish` report exactly the wakeups the protocol promises;
//! - rogue producer (odd): slots may also be published again after the receiver consumed
//!   them, as a peer process could do to shared memory. The FIFO may then stall or deliver
//!   stale data, which is allowed; the target only checks that nothing panics and that
//!   every slice handed out lies inside one inline area or one bcopy buffer.

#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;
use uct::shm::fifo::{
    FifoRx, FifoTx, Geometry, Slot, ELEM_HDR, FLAG_BCOPY, FLAG_INLINE, FLAG_SKIP,
};
use uct::AM_ID_MAX;

const GEO: Geometry = Geometry {
    fifo_size: 8,
    elem_size: 128,
    bcopy_size: 256,
};
/// Offset of the element array in the segment (the control block comes first; see the
/// layout in uct::shm::fifo and docs/wire-formats.md).
const ELEMS_OFFSET: usize = 512;
/// Offset of the bcopy buffers: the end of the element array rounded up to 4 KiB.
const BCOPY_OFFSET: usize =
    (ELEMS_OFFSET + GEO.fifo_size as usize * GEO.elem_size as usize).div_ceil(4096) * 4096;
const MAX_OPS: usize = 4096;

/// A slot the producer claimed and has not published yet.
#[derive(Clone, Copy, Debug)]
struct Held {
    slot: Slot,
    /// Claim number (claims are numbered from 0 in this single-producer program).
    index: u64,
    inline: usize,
    bcopy: usize,
    /// The claim found the consumer asleep: its publish must ask for a wakeup.
    wake: bool,
}

/// What the receiver must do with a published element.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    /// Deliver `bytes` with `am_id`, from local address `ptr`.
    Deliver {
        am_id: u8,
        ptr: usize,
        bytes: Vec<u8>,
    },
    /// Count it as dropped.
    Drop,
    /// A slot its producer gave up on: consumed silently.
    Skip,
}

struct Delivered {
    am_id: u8,
    ptr: usize,
    bytes: Vec<u8>,
}

fn pick_flags(u: &mut Unstructured<'_>) -> Result<u8> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 | 1 => FLAG_INLINE,
        2 => FLAG_BCOPY,
        _ => u.arbitrary()?,
    })
}

fn pick_len(u: &mut Unstructured<'_>) -> Result<u32> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=GEO.inline_capacity() as u32)?,
        1 => u.int_in_range(0..=GEO.bcopy_size)?,
        2 => u.int_in_range(0..=GEO.bcopy_size + 64)?,
        _ => u.arbitrary()?,
    })
}

fn pick_am_id(u: &mut Unstructured<'_>) -> Result<u8> {
    if u.ratio(7u8, 8u8)? {
        u.int_in_range(0..=AM_ID_MAX - 1)
    } else {
        u.arbitrary()
    }
}

/// Asserts that `[ptr, ptr+len)` is inside one inline area or one bcopy buffer.
fn assert_in_bounds(base: usize, seg_len: usize, ptr: usize, len: usize) {
    let off = ptr
        .checked_sub(base)
        .unwrap_or_else(|| panic!("slice at {ptr:#x} is below the segment at {base:#x}"));
    let end = off.checked_add(len).expect("slice end overflows");
    assert!(end <= seg_len, "slice {off}+{len} leaves the segment");
    let elems_end = ELEMS_OFFSET + GEO.fifo_size as usize * GEO.elem_size as usize;
    let bcopy_end = BCOPY_OFFSET + GEO.fifo_size as usize * GEO.bcopy_size as usize;
    if (ELEMS_OFFSET..elems_end).contains(&off) {
        let in_elem = (off - ELEMS_OFFSET) % GEO.elem_size as usize;
        assert_eq!(
            in_elem, ELEM_HDR,
            "inline slice does not start after the header"
        );
        assert!(
            in_elem + len <= GEO.elem_size as usize,
            "inline slice of {len} bytes runs past its element"
        );
    } else if (BCOPY_OFFSET..bcopy_end).contains(&off) {
        let in_buf = (off - BCOPY_OFFSET) % GEO.bcopy_size as usize;
        assert_eq!(in_buf, 0, "bcopy slice does not start at its buffer");
        assert!(
            len <= GEO.bcopy_size as usize,
            "bcopy slice of {len} bytes runs past its buffer"
        );
    } else {
        panic!("slice at offset {off} is neither in an element nor in a bcopy buffer");
    }
}

struct Harness {
    rx: FifoRx,
    tx: FifoTx,
    base: usize,
    seg_len: usize,
    max_poll: usize,
    rogue: bool,
    /// Claimed, not yet published.
    held: Vec<Held>,
    /// Recently claimed slots (rogue mode republishes them).
    history: VecDeque<Held>,
    /// Model of the queue: one entry per claim not yet consumed, `None` until published.
    queue: VecDeque<Option<Expect>>,
    claimed: u64,
    consumed: u64,
    /// The head producers see: the consumer publishes it once it is a quarter of the FIFO
    /// ahead, and when it arms.
    published: u64,
    dropped: u64,
    /// Model of the consumer's sleep bit in `tail`: set by arm, cleared by the next claim.
    armed: bool,
}

impl Harness {
    fn claim(&mut self) {
        let outstanding = self.claimed - self.published;
        let got = self.tx.claim();
        if !self.rogue {
            assert_eq!(
                got.is_some(),
                outstanding < u64::from(GEO.fifo_size),
                "claim with {outstanding} outstanding as producers see it"
            );
        }
        let Some(slot) = got else { return };
        let inline = self.tx.inline_area(slot);
        assert_eq!(inline.len(), GEO.inline_capacity());
        let inline = inline.as_ptr() as usize;
        let bcopy = self.tx.bcopy_area(slot);
        assert_eq!(bcopy.len(), GEO.bcopy_size as usize);
        let bcopy = bcopy.as_ptr() as usize;
        let h = Held {
            slot,
            index: self.claimed,
            inline,
            bcopy,
            wake: std::mem::take(&mut self.armed),
        };
        self.claimed += 1;
        self.held.push(h);
        self.queue.push_back(None);
        self.history.push_back(h);
        if self.history.len() > 2 * GEO.fifo_size as usize {
            self.history.pop_front();
        }
    }

    /// Writes a payload (maybe) and publishes `h` with fuzz-chosen header fields.
    fn publish(&mut self, u: &mut Unstructured<'_>, h: Held) -> Result<()> {
        let am_id = pick_am_id(u)?;
        let flags = pick_flags(u)?;
        let len = pick_len(u)?;
        let fill: u8 = u.arbitrary()?;
        let write = u.ratio(3u8, 4u8)?;
        let area = match flags {
            FLAG_INLINE => Some(self.tx.inline_area(h.slot)),
            FLAG_BCOPY => Some(self.tx.bcopy_area(h.slot)),
            _ => None,
        };
        let mut written = None;
        if let Some(area) = area {
            if write {
                let n = (len as usize).min(area.len());
                for (i, b) in area[..n].iter_mut().enumerate() {
                    *b = fill.wrapping_add(i as u8).wrapping_add(h.index as u8);
                }
                written = Some(area[..n].to_vec());
            }
        }
        let wake = self.tx.publish(h.slot, am_id, flags, len as usize);
        if self.rogue {
            return Ok(());
        }
        assert_eq!(wake, h.wake, "publish reported the wrong wakeup");
        let len = len as usize;
        let well_formed = am_id < AM_ID_MAX
            && match flags {
                FLAG_INLINE => len <= GEO.inline_capacity(),
                FLAG_BCOPY => len <= GEO.bcopy_size as usize,
                _ => false,
            };
        let expect = if well_formed {
            let ptr = if flags == FLAG_INLINE {
                h.inline
            } else {
                h.bcopy
            };
            // Without a fresh write the receiver sees whatever the area held before.
            let bytes = written.unwrap_or_else(|| {
                let area = if flags == FLAG_INLINE {
                    self.tx.inline_area(h.slot)
                } else {
                    self.tx.bcopy_area(h.slot)
                };
                area[..len].to_vec()
            });
            Expect::Deliver { am_id, ptr, bytes }
        } else if flags == FLAG_SKIP {
            Expect::Skip
        } else {
            Expect::Drop
        };
        let pos = (h.index - self.consumed) as usize;
        let entry = &mut self.queue[pos];
        assert!(entry.is_none(), "slot {} published twice", h.index);
        *entry = Some(expect);
        Ok(())
    }

    fn poll(&mut self) {
        let (base, seg_len) = (self.base, self.seg_len);
        let mut got = Vec::new();
        let n = self.rx.poll(|am_id, bytes| {
            let ptr = bytes.as_ptr() as usize;
            assert_in_bounds(base, seg_len, ptr, bytes.len());
            assert!(am_id < AM_ID_MAX, "delivered am id {am_id}");
            got.push(Delivered {
                am_id,
                ptr,
                bytes: bytes.to_vec(),
            });
        });
        assert!(n <= self.max_poll, "poll consumed {n} > max_poll");
        assert!(got.len() <= n);
        if self.rogue {
            return;
        }
        let ready = self.queue.iter().take_while(|e| e.is_some()).count();
        assert_eq!(n, ready.min(self.max_poll), "poll consumed the wrong count");
        let mut got = got.into_iter();
        for _ in 0..n {
            let Some(Some(expect)) = self.queue.pop_front() else {
                unreachable!("counted as ready above")
            };
            self.consumed += 1;
            match expect {
                Expect::Drop => self.dropped += 1,
                Expect::Skip => {}
                Expect::Deliver { am_id, ptr, bytes } => {
                    let d = got.next().expect("a well-formed element was not delivered");
                    assert_eq!(d.am_id, am_id);
                    assert_eq!(d.ptr, ptr, "delivered from the wrong place");
                    assert_eq!(d.bytes, bytes, "delivered bytes differ");
                }
            }
        }
        assert!(
            got.next().is_none(),
            "more elements delivered than published"
        );
        if self.consumed - self.published >= u64::from(GEO.fifo_size / 4).max(1) {
            self.published = self.consumed;
        }
        assert_eq!(self.rx.dropped(), self.dropped, "dropped count differs");
    }

    fn arm(&mut self) {
        let ok = self.rx.arm();
        if self.rogue {
            return;
        }
        self.armed = true;
        self.published = self.consumed;
        let outstanding = self.claimed - self.consumed;
        assert_eq!(
            ok,
            outstanding == 0,
            "arm must refuse exactly when a slot was claimed since the head"
        );
    }

    fn check_flags(&mut self) {
        let space = self.tx.has_space();
        let data = self.rx.has_data();
        if self.rogue {
            return;
        }
        assert_eq!(
            space,
            self.claimed - self.published < u64::from(GEO.fifo_size)
        );
        assert_eq!(data, matches!(self.queue.front(), Some(Some(_))));
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let rogue = u.arbitrary::<u8>()? & 1 == 1;
    let max_poll = u.int_in_range(1..=GEO.fifo_size as usize + 1)?;
    let rx = FifoRx::create(GEO, max_poll).expect("creating the FIFO");
    assert_eq!(rx.geometry(), GEO);
    let seg = rx.segment().clone();
    assert!(seg.len() >= GEO.segment_len());
    let tx = FifoTx::attach(seg.clone()).expect("attaching to a fresh FIFO");
    let mut h = Harness {
        base: seg.as_ptr() as usize,
        seg_len: seg.len(),
        rx,
        tx,
        max_poll,
        rogue,
        held: Vec::new(),
        history: VecDeque::new(),
        queue: VecDeque::new(),
        claimed: 0,
        consumed: 0,
        published: 0,
        dropped: 0,
        armed: false,
    };
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        match u.int_in_range(0..=5u8)? {
            0 => h.claim(),
            1 if !h.held.is_empty() => {
                let i = u.choose_index(h.held.len())?;
                let held = h.held.swap_remove(i);
                h.publish(u, held)?;
            }
            2 => h.poll(),
            3 => h.arm(),
            4 => h.check_flags(),
            5 if rogue && !h.history.is_empty() => {
                let i = u.choose_index(h.history.len())?;
                let old = h.history[i];
                h.publish(u, old)?;
            }
            _ => {}
        }
    }
    // Publish what is still held (well-behaved mode), then drain: everything comes out.
    while let Some(held) = h.held.pop() {
        h.publish(u, held)?;
    }
    for _ in 0..=GEO.fifo_size {
        h.poll();
    }
    if !rogue {
        assert!(h.queue.is_empty(), "elements left after draining");
        assert!(!h.rx.has_data());
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
