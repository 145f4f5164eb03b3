//! The shared-memory transport: each interface owns a receive FIFO in a shared segment;
//! endpoints map the peer's segment and enqueue into it (see [`fifo`]). RMA and atomics go
//! through the keys of [`crate::md`] (direct mapping or CMA).

pub mod address;
// The shared-memory FIFO (DESIGN.md): its ring lives in a segment other processes write.
#[allow(unsafe_code)]
pub mod fifo;

use crate::am::AmTable;
use crate::config::IfaceConfig;
use crate::slab::Slab;
use crate::types::*;
use address::ShmIfaceAddr;
use fifo::{FifoRx, FifoTx, FLAG_BCOPY, FLAG_SKIP};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Arc, Weak};
use ucs::sys::{pidfd, EventFd, SegmentId, ShmSegment};
use ucs::{Result, Status};

/// Bytes of the AM header that `am_short` prepends.
const SHORT_HDR: usize = 8;

/// An endpoint: a mapping of the peer's FIFO, its wakeup descriptor, and a process
/// descriptor that tells when the peer died (none for an endpoint to this process's own
/// interface, whose peer cannot die alone).
pub struct ShmEp {
    tx: FifoTx,
    wake: EventFd,
    peer: Option<std::os::fd::OwnedFd>,
    failed: Option<Status>,
}

/// A shm interface.
pub struct ShmIface {
    rx: FifoRx,
    event: EventFd,
    handlers: AmTable,
    eps: Slab<ShmEp>,
    attached: HashMap<SegmentId, Weak<ShmSegment>>,
    /// Process descriptors of the peers, readable once a peer exits.
    peers: ucs::EventSet,
    out_events: Vec<crate::tcp::IfaceEvent>,
    attr: IfaceAttr,
}

impl ShmIface {
    pub fn open(cfg: &IfaceConfig) -> Result<ShmIface> {
        cfg.validate()?;
        let rx = FifoRx::create(cfg.fifo, cfg.max_poll)?;
        let event = EventFd::new()?;
        let geo = cfg.fifo;
        let inline = geo.inline_capacity();
        let bcopy = geo.bcopy_size as usize;
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
                | Caps::EVENT_RECV
                | Caps::RKEY_PTR,
            max_am_short: inline - SHORT_HDR,
            max_am_bcopy: bcopy,
            max_am_zcopy: bcopy,
            max_am_hdr: inline,
            max_put_short: 256,
            max_put_bcopy: bcopy,
            max_put_zcopy: usize::MAX,
            max_get_bcopy: bcopy,
            max_get_zcopy: usize::MAX,
            iface_addr_len: address::IFACE_ADDR_LEN,
            device_addr_len: address::DEVICE_ADDR_LEN,
            cost: CostModel {
                overhead: 10e-9,
                latency: 80e-9,
                bandwidth: 12e9,
            },
            rma_cost: CostModel {
                overhead: 300e-9,
                latency: 500e-9,
                bandwidth: 14e9,
            },
        };
        Ok(ShmIface {
            rx,
            event,
            handlers: AmTable::default(),
            eps: Slab::default(),
            attached: HashMap::new(),
            peers: ucs::EventSet::new()?,
            out_events: Vec::new(),
            attr,
        })
    }

    pub fn attr(&self) -> &IfaceAttr {
        &self.attr
    }

    pub fn address(&self) -> Vec<u8> {
        ShmIfaceAddr {
            seg: *self.rx.segment().id(),
            event_fd: self.event.as_raw_fd(),
        }
        .encode()
    }

    pub fn handlers(&mut self) -> &mut AmTable {
        &mut self.handlers
    }

    /// Malformed messages dropped by the receive FIFO.
    pub fn dropped(&self) -> u64 {
        self.rx.dropped()
    }

    pub fn ep_create(&mut self, iface_addr: &[u8]) -> Result<EpId> {
        let a = ShmIfaceAddr::decode(iface_addr)?;
        let seg = match self.attached.get(&a.seg).and_then(Weak::upgrade) {
            Some(s) => s,
            None => {
                let s = Arc::new(ShmSegment::attach(&a.seg)?);
                self.attached.retain(|_, w| w.strong_count() > 0);
                self.attached.insert(a.seg, Arc::downgrade(&s));
                s
            }
        };
        let tx = FifoTx::attach(seg)?;
        let wake = EventFd::from_peer(pidfd::fd_of_process(a.seg.pid, a.event_fd)?)?;
        let peer = if a.seg.pid == pidfd::current_pid() {
            None
        } else {
            Some(pidfd::open(a.seg.pid)?)
        };
        let ep = self.eps.insert(ShmEp {
            tx,
            wake,
            peer,
            failed: None,
        })?;
        if let Ok(ShmEp { peer: Some(p), .. }) = self.eps.get(ep) {
            if let Err(e) = self.peers.add(p, ucs::Events::READABLE, u64::from(ep.0)) {
                let _ = self.eps.remove(ep);
                return Err(e);
            }
        }
        Ok(ep)
    }

    pub fn ep_destroy(&mut self, ep: EpId) -> Result<()> {
        let e = self.eps.remove(ep)?;
        if let Some(p) = &e.peer {
            let _ = self.peers.remove(p);
        }
        Ok(())
    }

    /// Looks for peers that exited; their endpoints fail (reported by `take_events`).
    /// One `epoll_wait` for all peers: callers do this now and then, not per message.
    pub fn check_peers(&mut self) {
        // A producer that died inside a send must not block the FIFO for everyone else.
        let alive = |pid: u32| {
            let Some(p) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            else {
                return false;
            };
            !matches!(
                rustix::process::test_kill_process(p),
                Err(rustix::io::Errno::SRCH)
            )
        };
        if self.rx.recover_stall(ucs::now_ns(), 5_000_000_000, alive) {
            tracing::info!("shm: recovered the receive FIFO from a producer that died");
        }
        let mut dead = Vec::new();
        let _ = self.peers.wait(0, |tok, _| dead.push(EpId(tok as u32)));
        for ep in dead {
            if let Ok(e) = self.eps.get_mut(ep) {
                if let Some(p) = &e.peer {
                    let _ = self.peers.remove(p);
                }
                if e.failed.is_none() {
                    e.failed = Some(Status::ConnectionReset);
                    self.out_events.push(crate::tcp::IfaceEvent::EpFailed(
                        ep,
                        Status::ConnectionReset,
                    ));
                    tracing::debug!("shm: the peer of endpoint {} exited", ep.0);
                }
            }
        }
    }

    /// Connection events since the last call.
    pub fn take_events(&mut self) -> Vec<crate::tcp::IfaceEvent> {
        std::mem::take(&mut self.out_events)
    }

    pub fn has_events(&self) -> bool {
        !self.out_events.is_empty()
    }

    pub fn ep_count(&self) -> usize {
        self.eps.len()
    }

    #[inline(always)]
    fn finish(e: &ShmEp, wake: bool) {
        if wake {
            Self::wake(e);
        }
    }

    /// Wakes a consumer that sleeps: rare (it slept), and kept out of the send path so
    /// that the system call and its logging do not take registers there.
    #[cold]
    #[inline(never)]
    fn wake(e: &ShmEp) {
        if let Err(s) = e.wake.signal() {
            tracing::debug!("shm: waking the peer failed: {s}");
        }
    }

    #[inline]
    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        if payload.len() > self.attr.max_am_short || id >= AM_ID_MAX {
            return Err(Status::InvalidParam);
        }
        let e = self.eps.get_mut(ep)?;
        if let Some(st) = e.failed {
            return Err(st);
        }
        let Some(w) = e.tx.push_short(id, hdr, payload)? else {
            return Ok(Outcome::NoResource);
        };
        Self::finish(e, w);
        Ok(Outcome::Done(()))
    }

    #[inline]
    pub fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Outcome<usize>> {
        if id >= AM_ID_MAX {
            return Err(Status::InvalidParam);
        }
        let e = self.eps.get_mut(ep)?;
        if let Some(st) = e.failed {
            return Err(st);
        }
        let Some(s) = e.tx.claim() else {
            return Ok(Outcome::NoResource);
        };
        let area = e.tx.bcopy_area(s);
        let cap = area.len();
        // The slot is claimed: whatever the packer does, it must be published, or the
        // receiver would wait for it forever. A packer that panics or claims more than the
        // buffer holds publishes an empty slot the receiver skips.
        let packed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pack(area)));
        match packed {
            Ok(n) if n <= cap => {
                let w = e.tx.publish(s, id, FLAG_BCOPY, n);
                Self::finish(e, w);
                Ok(Outcome::Done(n))
            }
            Ok(_) => {
                let _ = e.tx.publish(s, id, FLAG_SKIP, 0);
                Err(Status::InvalidParam)
            }
            Err(panic) => {
                let _ = e.tx.publish(s, id, FLAG_SKIP, 0);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Gathers `header` and `iov` straight into the peer's buffer: no intermediate copy,
    /// and the user buffers are free again when this returns `Done`.
    pub fn am_zcopy(&mut self, ep: EpId, id: u8, header: &[u8], iov: &[&[u8]]) -> Result<Outcome> {
        let total = header.len() + iov.iter().map(|b| b.len()).sum::<usize>();
        if id >= AM_ID_MAX || total > self.attr.max_am_zcopy || header.len() > self.attr.max_am_hdr
        {
            return Err(Status::InvalidParam);
        }
        let r = self.am_bcopy(ep, id, |buf| {
            let mut off = 0;
            for b in std::iter::once(header).chain(iov.iter().copied()) {
                ucs::sys::copy::copy(&mut buf[off..], b);
                off += b.len();
            }
            off
        })?;
        Ok(match r {
            Outcome::Done(_) => Outcome::Done(()),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        })
    }

    /// True when `ep` could send now (its peer's FIFO has room).
    pub fn ep_has_space(&mut self, ep: EpId) -> Result<bool> {
        Ok(self.eps.get_mut(ep)?.tx.has_space())
    }

    /// True when the receive FIFO's next element is published.
    #[inline(always)]
    pub fn has_input(&self) -> bool {
        self.rx.has_data()
    }

    /// Consumes arrived messages, handing each to `f` instead of the handler table.
    #[inline(always)]
    pub fn poll(&mut self, f: impl FnMut(u8, &[u8])) -> usize {
        self.rx.poll(f)
    }

    #[inline]
    pub fn progress(&mut self) -> usize {
        let handlers = &mut self.handlers;
        self.rx.poll(|id, data| handlers.dispatch(id, data))
    }

    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    /// Readable when a peer of one of the endpoints exited (then call `check_peers`).
    pub fn peers_fd(&self) -> BorrowedFd<'_> {
        self.peers.as_fd()
    }

    pub fn arm(&mut self) -> Result<()> {
        self.event.drain();
        if self.rx.arm() {
            Ok(())
        } else {
            Err(Status::Busy)
        }
    }
}
