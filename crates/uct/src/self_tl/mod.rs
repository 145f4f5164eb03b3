//! The self transport: loopback to the same interface. A send copies the message into a
//! bounded in-process queue and progress delivers it, exactly as a remote transport would
//! (no handler runs inside a send, so handlers may send again without re-entering the
//! interface). Message buffers are recycled, so steady-state sends do not allocate.
//!
//! ```text
//! iface address, 16 bytes: version u8 = 1 | reserved u8,u16 = 0 | pid u32 | iface id u64
//! ```

use crate::am::AmTable;
use crate::config::IfaceConfig;
use crate::slab::Slab;
use crate::types::*;
use crate::wire::{Reader, Writer};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use ucs::sys::pidfd::current_pid;
use ucs::{Result, Status};

const VERSION: u8 = 1;
pub const IFACE_ADDR_LEN: usize = 16;
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Messages queued at most before sends return `NoResource`.
const QUEUE_MAX: usize = 1024;

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
    queue: VecDeque<(u8, Vec<u8>, usize)>,
    free: Vec<Vec<u8>>,
    seg: usize,
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
            queue: VecDeque::new(),
            free: Vec::new(),
            seg,
            attr,
        })
    }

    /// True when no message waits for progress.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
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

    /// Takes a recycled buffer of `seg` bytes for the next message, or `None` when the
    /// queue is full.
    /// Buffers always keep their full length (the queue records how much of each is a
    /// message), so a recycled one is not zero-filled again for every message.
    fn buffer(&mut self) -> Option<Vec<u8>> {
        if self.queue.len() >= QUEUE_MAX {
            return None;
        }
        Some(self.free.pop().unwrap_or_else(|| vec![0; self.seg]))
    }

    fn enqueue(&mut self, id: u8, b: Vec<u8>, len: usize) {
        self.queue.push_back((id, b, len));
    }

    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        self.check_ep(ep)?;
        if id >= AM_ID_MAX || payload.len() > self.attr.max_am_short {
            return Err(Status::InvalidParam);
        }
        let Some(mut b) = self.buffer() else {
            return Ok(Outcome::NoResource);
        };
        b[..8].copy_from_slice(&hdr.to_ne_bytes());
        b[8..8 + payload.len()].copy_from_slice(payload);
        self.enqueue(id, b, 8 + payload.len());
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
        let Some(mut b) = self.buffer() else {
            return Ok(Outcome::NoResource);
        };
        let n = pack(&mut b);
        if n > b.len() {
            self.free.push(b);
            return Err(Status::InvalidParam);
        }
        self.enqueue(id, b, n);
        Ok(Outcome::Done(n))
    }

    /// True when messages wait for progress.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// True when a send would be accepted now.
    pub fn has_space(&self) -> bool {
        self.queue.len() < QUEUE_MAX
    }

    /// Delivers queued messages to `f`; returns how many.
    pub fn poll(&mut self, f: &mut impl FnMut(u8, &[u8])) -> usize {
        // Only what was queued before this call: a handler that sends again adds to the
        // queue for the next progress, so a ping-pong through self cannot loop forever.
        let n = self.queue.len();
        for _ in 0..n {
            let Some((id, b, len)) = self.queue.pop_front() else {
                break;
            };
            f(id, &b[..len]);
            self.free.push(b);
        }
        n
    }

    /// Delivers queued messages to the registered handlers.
    pub fn progress(&mut self) -> usize {
        let n = self.queue.len();
        for _ in 0..n {
            let Some((id, b, len)) = self.queue.pop_front() else {
                break;
            };
            self.handlers.dispatch(id, &b[..len]);
            self.free.push(b);
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
