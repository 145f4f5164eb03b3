//! The self transport: loopback to the same interface. A send copies the message into a
//! bounded in-process queue and progress delivers it, exactly as a remote transport would
//! (no handler runs inside a send, so handlers may send again without re-entering the
//! interface).
//!
//! The queue is one byte buffer holding the waiting messages back to back, each behind an
//! 8-byte record header. Delivery borrows the interface, so nothing can be queued while
//! it runs; it takes every message and leaves the buffer empty, and the next send writes
//! at its start again. The buffer only grows (to the largest burst queued between two
//! progress calls), so steady-state sends neither allocate nor move more than the
//! message itself.
//!
//! ```text
//! iface address, 16 bytes: version u8 = 1 | reserved u8,u16 = 0 | pid u32 | iface id u64
//! queue record:            id u8 | reserved u8,u16 = 0 | len u32 | len bytes, padded to 8
//! ```

use crate::am::AmTable;
use crate::config::IfaceConfig;
use crate::slab::Slab;
use crate::types::*;
use crate::wire::{Reader, Writer};
use std::sync::atomic::{AtomicU64, Ordering};
use ucs::sys::pidfd::current_pid;
use ucs::{Result, Status};

const VERSION: u8 = 1;
pub const IFACE_ADDR_LEN: usize = 16;
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Messages queued at most before sends return `NoResource`.
const QUEUE_MAX: usize = 1024;
/// Bytes of a queue record's header.
const REC_HDR: usize = 8;

/// A decoded self address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfAddr {
    pub pid: u32,
    pub id: u64,
}

impl SelfAddr {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(IFACE_ADDR_LEN);
        w.u8(VERSION).u8(0).u16(0).u32(self.pid).u64(self.id);
        w.buf
    }

    pub fn decode(b: &[u8]) -> Result<SelfAddr> {
        let bad = Status::InvalidAddr;
        let mut r = Reader::new(b);
        if r.u8().ok_or(bad)? != VERSION || r.u8().ok_or(bad)? != 0 || r.u16().ok_or(bad)? != 0 {
            return Err(bad);
        }
        let pid = r.u32().ok_or(bad)?;
        let id = r.u64().ok_or(bad)?;
        if !r.is_empty() {
            return Err(bad);
        }
        Ok(SelfAddr { pid, id })
    }
}

pub struct SelfIface {
    id: u64,
    handlers: AmTable,
    eps: Slab<()>,
    /// The waiting messages as records (see the module doc), from offset 0 to `tail`.
    queue: Vec<u8>,
    tail: usize,
    /// Messages in `queue`.
    queued: usize,
    attr: IfaceAttr,
}

impl SelfIface {
    pub fn open(cfg: &IfaceConfig) -> Result<SelfIface> {
        cfg.validate()?;
        let seg = cfg.self_seg_size;
        let attr = IfaceAttr {
            caps: Caps::AM_SHORT
                | Caps::AM_BCOPY
                | Caps::AM_ZCOPY
                | Caps::PUT_SHORT
                | Caps::PUT_BCOPY
                | Caps::PUT_ZCOPY
                | Caps::GET_BCOPY
                | Caps::GET_ZCOPY
                | Caps::ATOMIC32
                | Caps::ATOMIC64
                | Caps::CONNECT_TO_IFACE
                | Caps::RKEY_PTR,
            max_am_short: seg - 8,
            max_am_bcopy: seg,
            max_am_zcopy: seg,
            max_am_hdr: seg,
            max_put_short: seg,
            max_put_bcopy: seg,
            max_put_zcopy: usize::MAX,
            max_get_bcopy: seg,
            max_get_zcopy: usize::MAX,
            iface_addr_len: IFACE_ADDR_LEN,
            device_addr_len: crate::shm::address::DEVICE_ADDR_LEN,
            cost: CostModel {
                overhead: 5e-9,
                latency: 0.0,
                bandwidth: 20e9,
            },
            rma_cost: CostModel {
                overhead: 5e-9,
                latency: 0.0,
                bandwidth: 20e9,
            },
        };
        Ok(SelfIface {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            handlers: AmTable::default(),
            eps: Slab::default(),
            queue: Vec::new(),
            tail: 0,
            queued: 0,
            attr,
        })
    }

    /// True when no message waits for progress.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    pub fn attr(&self) -> &IfaceAttr {
        &self.attr
    }

    pub fn address(&self) -> Vec<u8> {
        SelfAddr {
            pid: current_pid(),
            id: self.id,
        }
        .encode()
    }

    /// Only this very interface is reachable.
    pub fn is_reachable(&self, iface_addr: &[u8]) -> bool {
        SelfAddr::decode(iface_addr).is_ok_and(|a| a.pid == current_pid() && a.id == self.id)
    }

    pub fn handlers(&mut self) -> &mut AmTable {
        &mut self.handlers
    }

    pub fn ep_create(&mut self, iface_addr: &[u8]) -> Result<EpId> {
        SelfAddr::decode(iface_addr)?;
        if !self.is_reachable(iface_addr) {
            return Err(Status::Unreachable);
        }
        self.eps.insert(())
    }

    pub fn ep_destroy(&mut self, ep: EpId) -> Result<()> {
        self.eps.remove(ep)
    }

    pub fn ep_count(&self) -> usize {
        self.eps.len()
    }

    pub fn check_ep(&self, ep: EpId) -> Result<()> {
        self.eps.get(ep).map(|_| ())
    }

    /// Room for a message of up to `max` bytes at the end of the queue: the offset of its
    /// data, or `None` when the queue is full. The record is only kept by [`Self::commit`].
    #[inline]
    fn reserve(&mut self, max: usize) -> Option<usize> {
        if self.queued >= QUEUE_MAX {
            return None;
        }
        let need = self.tail + REC_HDR + max;
        if self.queue.len() < need {
            self.grow(need);
        }
        Some(self.tail + REC_HDR)
    }

    /// Grows the queue's buffer to at least `need` bytes (a burst larger than any before).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, need: usize) {
        let len = need.max(2 * self.queue.len()).max(4096);
        self.queue.resize(len, 0);
    }

    /// Keeps the message of `len` bytes written after the record header at `tail`.
    #[inline]
    fn commit(&mut self, id: u8, len: usize) {
        let h = u64::from(id) | (len as u64) << 32;
        self.queue[self.tail..self.tail + REC_HDR].copy_from_slice(&h.to_le_bytes());
        self.tail += REC_HDR + len.next_multiple_of(8);
        self.queued += 1;
    }

    /// Every queued message, in sending order, to `f`; then the queue is empty.
    #[inline]
    fn drain(queue: &[u8], tail: usize, mut f: impl FnMut(u8, &[u8])) {
        let mut at = 0;
        while at < tail {
            let mut h = [0u8; REC_HDR];
            h.copy_from_slice(&queue[at..at + REC_HDR]);
            let h = u64::from_le_bytes(h);
            let len = (h >> 32) as usize;
            f(h as u8, &queue[at + REC_HDR..at + REC_HDR + len]);
            at += REC_HDR + len.next_multiple_of(8);
        }
    }

    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        self.check_ep(ep)?;
        if id >= AM_ID_MAX || payload.len() > self.attr.max_am_short {
            return Err(Status::InvalidParam);
        }
        let len = 8 + payload.len();
        let Some(at) = self.reserve(len) else {
            return Ok(Outcome::NoResource);
        };
        let b = &mut self.queue[at..at + len];
        b[..8].copy_from_slice(&hdr.to_ne_bytes());
        b[8..].copy_from_slice(payload);
        self.commit(id, len);
        Ok(Outcome::Done(()))
    }

    pub fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Outcome<usize>> {
        self.check_ep(ep)?;
        if id >= AM_ID_MAX {
            return Err(Status::InvalidParam);
        }
        let max = self.attr.max_am_bcopy;
        let Some(at) = self.reserve(max) else {
            return Ok(Outcome::NoResource);
        };
        let n = pack(&mut self.queue[at..at + max]);
        if n > max {
            return Err(Status::InvalidParam);
        }
        self.commit(id, n);
        Ok(Outcome::Done(n))
    }

    /// True when messages wait for progress.
    pub fn has_queued(&self) -> bool {
        self.queued > 0
    }

    /// True when a send would be accepted now.
    pub fn has_space(&self) -> bool {
        self.queued < QUEUE_MAX
    }

    /// Delivers queued messages to `f`; returns how many.
    pub fn poll(&mut self, f: &mut impl FnMut(u8, &[u8])) -> usize {
        // `f` cannot reach this interface while it is borrowed here, so a send made in
        // answer to a message is queued after this call, for the next progress: a
        // ping-pong through self cannot loop forever.
        let n = std::mem::take(&mut self.queued);
        if n > 0 {
            Self::drain(&self.queue, std::mem::take(&mut self.tail), f);
        }
        n
    }

    /// Delivers queued messages to the registered handlers.
    pub fn progress(&mut self) -> usize {
        let n = std::mem::take(&mut self.queued);
        if n > 0 {
            let handlers = &mut self.handlers;
            Self::drain(&self.queue, std::mem::take(&mut self.tail), |id, data| {
                handlers.dispatch(id, data)
            });
        }
        n
    }

    pub fn am_zcopy(&mut self, ep: EpId, id: u8, header: &[u8], iov: &[&[u8]]) -> Result<Outcome> {
        let total = header.len() + iov.iter().map(|b| b.len()).sum::<usize>();
        if total > self.attr.max_am_zcopy {
            return Err(Status::InvalidParam);
        }
        self.am_bcopy(ep, id, |buf| {
            let mut off = 0;
            for b in std::iter::once(header).chain(iov.iter().copied()) {
                ucs::sys::copy::copy(&mut buf[off..], b);
                off += b.len();
            }
            off
        })
        .map(|o| match o {
            Outcome::Done(_) => Outcome::Done(()),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn iface() -> (SelfIface, EpId) {
        let mut i = SelfIface::open(&IfaceConfig::default()).unwrap();
        let a = i.address();
        let ep = i.ep_create(&a).unwrap();
        (i, ep)
    }

    fn pattern(n: usize, k: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + k * 13) as u8).collect()
    }

    /// A burst of short and bcopy messages of every size class (odd lengths, more bytes
    /// than the queue first holds) comes out in sending order with every byte intact,
    /// and the queue is reused after it was drained.
    #[test]
    fn queue_keeps_order_and_bytes_across_growth() {
        let (mut i, ep) = iface();
        for round in 0..3 {
            let mut sent = Vec::new();
            for k in 0..200 {
                let n = (k * 37 + round) % 700;
                let p = pattern(n, k);
                if k % 2 == 0 {
                    let hdr = (k as u64) << 8 | round as u64;
                    assert!(i.am_short(ep, 3, hdr, &p).unwrap().is_done());
                    let mut m = hdr.to_ne_bytes().to_vec();
                    m.extend_from_slice(&p);
                    sent.push((3u8, m));
                } else {
                    let out = i.am_bcopy(ep, 5, |b| {
                        b[..n].copy_from_slice(&p);
                        n
                    });
                    assert_eq!(out.unwrap(), Outcome::Done(n));
                    sent.push((5u8, p));
                }
            }
            assert!(i.has_queued());
            let mut got = Vec::new();
            assert_eq!(i.poll(&mut |id, d| got.push((id, d.to_vec()))), 200);
            assert!(got == sent, "round {round}: messages differ");
            assert!(i.is_empty());
            assert_eq!(i.poll(&mut |_, _| panic!("nothing is queued")), 0);
        }
    }

    /// A full queue refuses with NoResource; a bcopy that claims more than its buffer is
    /// an error that queues nothing.
    #[test]
    fn full_queue_and_bad_bcopy() {
        let (mut i, ep) = iface();
        let max = i.attr().max_am_bcopy;
        assert_eq!(
            i.am_bcopy(ep, 1, |_| max + 1).unwrap_err(),
            Status::InvalidParam
        );
        assert!(i.is_empty());
        for k in 0..QUEUE_MAX {
            assert!(i.am_short(ep, 1, k as u64, &[]).unwrap().is_done());
        }
        assert!(!i.has_space());
        assert_eq!(i.am_short(ep, 1, 0, &[1]).unwrap(), Outcome::NoResource);
        assert_eq!(i.am_bcopy(ep, 1, |_| 0).unwrap(), Outcome::NoResource);
        let mut next = 0u64;
        assert_eq!(
            i.poll(&mut |_, d| {
                assert_eq!(d, next.to_ne_bytes());
                next += 1;
            }),
            QUEUE_MAX
        );
        assert!(i.has_space());
    }

    proptest! {
        #[test]
        fn address_round_trip(pid: u32, id: u64) {
            let a = SelfAddr { pid, id };
            prop_assert_eq!(SelfAddr::decode(&a.encode()).unwrap(), a);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = SelfAddr::decode(&b);
        }
    }
}
