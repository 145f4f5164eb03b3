//! [`Iface`]: one transport on one device, with static dispatch over the transports, the
//! pending queue shared by all of them, and the RMA/atomic entry points.
//!
//! Invariants: operations on an endpoint that has queued pending requests return
//! `NoResource` (so the order of an endpoint's operations is kept) except from inside that
//! endpoint's own pending callback; the pending queues are only walked by `progress` when
//! some endpoint has one.

use crate::config::IfaceConfig;
#[cfg(feature = "fabric")]
use crate::fabric::FabricIface;
use crate::rkey::Rkey;
use crate::self_tl::SelfIface;
use crate::shm::ShmIface;
use crate::tcp::{IfaceEvent, TcpIface};
use crate::types::*;
use crate::udp::UdpIface;
use crate::{rma, Transport};
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use ucs::{Result, Status};

/// The transport behind an interface. A plain one-byte tag (`repr(u8)`) rather than one
/// packed into a field of a variant: every call on an interface matches on it, and a byte
/// compare is cheaper than decoding a niche.
#[allow(clippy::enum_variant_names)]
#[repr(u8)]
enum Tl {
    SelfTl(SelfIface),
    Shm(ShmIface),
    Tcp(TcpIface),
    Udp(UdpIface),
    #[cfg(feature = "fabric")]
    /// Boxed: the test transport carries its reliability engine inline.
    Fabric(Box<FabricIface>),
}

/// An open interface.
pub struct Iface {
    tl: Tl,
    /// Pending queues by endpoint id.
    pending: Vec<VecDeque<PendingFn>>,
    /// Endpoints that have a non-empty pending queue, in the order they got one.
    pending_eps: VecDeque<EpId>,
    /// The endpoint whose pending callback is running (it may send past its own queue).
    dispatching: Option<EpId>,
}

macro_rules! dispatch {
    ($self:expr, $t:ident => $e:expr) => {
        match &mut $self.tl {
            Tl::SelfTl($t) => $e,
            Tl::Shm($t) => $e,
            Tl::Tcp($t) => $e,
            Tl::Udp($t) => $e,
            #[cfg(feature = "fabric")]
            Tl::Fabric($t) => $e,
        }
    };
}

impl Iface {
    /// Opens an interface of `transport` on its default device with `cfg`.
    pub fn open(transport: Transport, cfg: &IfaceConfig) -> Result<Iface> {
        let dev = transport
            .devices()
            .into_iter()
            .next()
            .ok_or(Status::NoDevice)?;
        Self::open_device(transport, &dev.0, cfg)
    }

    /// Opens an interface of `transport` on `device` (a name from
    /// [`Transport::devices`]).
    pub fn open_device(transport: Transport, device: &str, cfg: &IfaceConfig) -> Result<Iface> {
        let tl = match transport {
            Transport::SelfTl => Tl::SelfTl(SelfIface::open(cfg)?),
            Transport::Shm => Tl::Shm(ShmIface::open(cfg)?),
            Transport::Tcp => {
                let ip = transport
                    .devices()
                    .into_iter()
                    .find(|d| d.0 == device)
                    .and_then(|d| d.1)
                    .ok_or(Status::NoDevice)?;
                Tl::Tcp(TcpIface::open(device, ip, cfg.tcp)?)
            }
            Transport::Udp => {
                let ip = transport
                    .devices()
                    .into_iter()
                    .find(|d| d.0 == device)
                    .and_then(|d| d.1)
                    .ok_or(Status::NoDevice)?;
                Tl::Udp(UdpIface::open(device, ip, cfg.udp)?)
            }
            #[cfg(feature = "fabric")]
            Transport::Fabric => Tl::Fabric(Box::new(FabricIface::open(device)?)),
            #[cfg(not(feature = "fabric"))]
            Transport::Fabric => return Err(Status::Unsupported),
        };
        Ok(Self::wrap(tl))
    }

    fn wrap(tl: Tl) -> Iface {
        Iface {
            tl,
            pending: Vec::new(),
            pending_eps: VecDeque::new(),
            dispatching: None,
        }
    }

    /// The device name of the network interface that has `ip`, else the address itself.
    fn device_of(ip: std::net::IpAddr) -> String {
        ucs::sys::net::interfaces()
            .into_iter()
            .find(|i| i.addr == ip)
            .map_or_else(|| ip.to_string(), |i| i.name)
    }

    /// Opens a tcp interface listening on `ip`, which need not be the address
    /// [`Transport::devices`] picked for its device (e.g. `::1` on `lo`). The device is
    /// the network interface that has `ip`, else the address itself.
    pub fn open_tcp(ip: std::net::IpAddr, cfg: &IfaceConfig) -> Result<Iface> {
        Ok(Self::wrap(Tl::Tcp(TcpIface::open(
            &Self::device_of(ip),
            ip,
            cfg.tcp,
        )?)))
    }

    /// Opens a udp interface bound to `ip` (like [`Iface::open_tcp`]).
    pub fn open_udp(ip: std::net::IpAddr, cfg: &IfaceConfig) -> Result<Iface> {
        Ok(Self::wrap(Tl::Udp(UdpIface::open(
            &Self::device_of(ip),
            ip,
            cfg.udp,
        )?)))
    }

    /// A diagnostic dump of the interface's state for error reports: the udp transport's
    /// counters and reliability state; the other transports name themselves only.
    pub fn describe(&self) -> String {
        match &self.tl {
            Tl::Udp(t) => t.describe(),
            _ => format!(
                "{:?} {}: {} endpoints",
                self.transport(),
                self.device(),
                self.ep_count()
            ),
        }
    }

    /// The udp interface inside, for its statistics (`None` for other transports).
    pub fn as_udp(&self) -> Option<&UdpIface> {
        match &self.tl {
            Tl::Udp(t) => Some(t),
            _ => None,
        }
    }

    pub fn transport(&self) -> Transport {
        match self.tl {
            Tl::SelfTl(_) => Transport::SelfTl,
            Tl::Shm(_) => Transport::Shm,
            Tl::Tcp(_) => Transport::Tcp,
            Tl::Udp(_) => Transport::Udp,
            #[cfg(feature = "fabric")]
            Tl::Fabric(_) => Transport::Fabric,
        }
    }

    /// The device this interface is on.
    pub fn device(&self) -> &str {
        match &self.tl {
            Tl::Tcp(t) => t.device(),
            Tl::Udp(t) => t.device(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.device(),
            _ => "memory",
        }
    }

    pub fn attr(&self) -> &IfaceAttr {
        match &self.tl {
            Tl::SelfTl(t) => t.attr(),
            Tl::Shm(t) => t.attr(),
            Tl::Tcp(t) => t.attr(),
            Tl::Udp(t) => t.attr(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.attr(),
        }
    }

    /// The interface address peers connect to.
    pub fn address(&self) -> Vec<u8> {
        match &self.tl {
            Tl::SelfTl(t) => t.address(),
            Tl::Shm(t) => t.address(),
            Tl::Tcp(t) => t.address(),
            Tl::Udp(t) => t.address(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.address(),
        }
    }

    /// The device address: identifies the host.
    pub fn device_address(&self) -> Vec<u8> {
        crate::shm::address::encode_device_addr(ucs::sys::host::host_id())
    }

    /// True when an endpoint to (`device_addr`, `iface_addr`) can be created.
    pub fn is_reachable(&self, device_addr: &[u8], iface_addr: &[u8]) -> bool {
        let host = crate::shm::address::decode_device_addr(device_addr);
        let same_host = host.as_ref().is_ok_and(|h| *h == ucs::sys::host::host_id());
        match &self.tl {
            Tl::SelfTl(t) => same_host && t.is_reachable(iface_addr),
            Tl::Shm(_) => {
                same_host && crate::shm::address::ShmIfaceAddr::decode(iface_addr).is_ok()
            }
            Tl::Tcp(t) => host.is_ok() && t.is_reachable(same_host, iface_addr),
            Tl::Udp(t) => host.is_ok() && t.is_reachable(same_host, iface_addr),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => host.is_ok() && t.is_reachable(iface_addr),
        }
    }

    /// Installs the handler for active-message id `id` (< 32).
    pub fn set_am_handler(&mut self, id: u8, h: AmHandler) -> Result<()> {
        dispatch!(self, t => t.handlers().set(id, h))
    }

    /// Removes the handler of `id`.
    pub fn clear_am_handler(&mut self, id: u8) -> Result<()> {
        dispatch!(self, t => t.handlers().clear(id))
    }

    /// Creates an endpoint to the interface at `iface_addr`.
    pub fn ep_create(&mut self, iface_addr: &[u8]) -> Result<EpId> {
        let ep = dispatch!(self, t => t.ep_create(iface_addr))?;
        // Indexed by slot: ids of reused slots carry a generation in their high bits.
        let i = ep.slot();
        if self.pending.len() <= i {
            self.pending.resize_with(i + 1, VecDeque::new);
        }
        Ok(ep)
    }

    /// Destroys an endpoint; its pending requests are dropped without being called.
    pub fn ep_destroy(&mut self, ep: EpId) -> Result<()> {
        dispatch!(self, t => t.ep_destroy(ep))?;
        self.pending_purge(ep);
        Ok(())
    }

    /// Number of live endpoints.
    pub fn ep_count(&self) -> usize {
        match &self.tl {
            Tl::SelfTl(t) => t.ep_count(),
            Tl::Shm(t) => t.ep_count(),
            Tl::Tcp(t) => t.ep_count(),
            Tl::Udp(t) => t.ep_count(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.ep_count(),
        }
    }

    /// Checks `ep` exists and the transport can access remote memory.
    fn check_ep(&mut self, ep: EpId) -> Result<()> {
        match &mut self.tl {
            Tl::SelfTl(t) => t.check_ep(ep),
            Tl::Shm(t) => t.ep_has_space(ep).map(|_| ()),
            Tl::Tcp(t) => t.check_ep(ep).and(Err(Status::Unsupported)),
            Tl::Udp(t) => t.check_ep(ep).and(Err(Status::Unsupported)),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.check_ep(ep).and(Err(Status::Unsupported)),
        }
    }

    /// True when everything `ep` was given has left this process (tcp: handed to the
    /// kernel; udp: acknowledged by the peer). Self and shm deliver in the call, so they
    /// are always flushed.
    pub fn ep_is_flushed(&self, ep: EpId) -> Result<bool> {
        match &self.tl {
            Tl::Tcp(t) => t.ep_is_flushed(ep),
            Tl::Udp(t) => t.ep_is_flushed(ep),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.ep_is_flushed(ep),
            _ => Ok(true),
        }
    }

    /// A mark of what `ep` was given so far, for [`Iface::ep_flushed_to`]: `Some` where
    /// a flush is an acknowledgement that later sends can keep from ever coming (udp),
    /// `None` elsewhere.
    pub fn ep_flush_mark(&self, ep: EpId) -> Result<Option<u64>> {
        match &self.tl {
            Tl::Udp(t) => t.ep_flush_mark(ep).map(Some),
            _ => self.ep_is_flushed(ep).map(|_| None),
        }
    }

    /// True when what `ep` was given before `mark` ([`Iface::ep_flush_mark`]) has left
    /// this process as [`Iface::ep_is_flushed`] says, whatever it was given since; with
    /// `None`, the same as `ep_is_flushed`.
    pub fn ep_flushed_to(&self, ep: EpId, mark: Option<u64>) -> Result<bool> {
        match (&self.tl, mark) {
            (Tl::Udp(t), Some(m)) => t.ep_flushed_to(ep, m),
            _ => self.ep_is_flushed(ep),
        }
    }

    /// Connection events (failed endpoints, closed peers) since the last call; empty for
    /// transports without connections.
    pub fn take_events(&mut self) -> Vec<IfaceEvent> {
        match &mut self.tl {
            Tl::Tcp(t) if t.has_events() => t.take_events(),
            Tl::Shm(t) if t.has_events() => t.take_events(),
            Tl::Udp(t) if t.has_events() => t.take_events(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) if t.has_events() => t.take_events(),
            _ => Vec::new(),
        }
    }

    /// True for a connection-based interface with no connection at all: progress may poll
    /// it rarely (a new connection waits a little; nothing else can).
    #[inline]
    pub fn is_idle(&self) -> bool {
        match &self.tl {
            Tl::Tcp(t) => t.is_idle(),
            Tl::Udp(t) => t.is_idle(),
            _ => false,
        }
    }

    /// True for the self transport when it holds no message: a message to this very
    /// interface may then be handed to the receiver directly without overtaking one
    /// (the protocol layer's loopback shortcut, as UCX's self transport delivers inside
    /// the send). False for every other transport.
    #[inline]
    pub fn loopback_idle(&self) -> bool {
        match &self.tl {
            Tl::SelfTl(t) => t.is_empty(),
            _ => false,
        }
    }

    /// True when a call to [`Iface::progress_with`] may do something: sends wait for
    /// resources, an event waits, or input may have arrived. Answered without a system
    /// call: shm looks at the next FIFO element, self at its queue; the socket
    /// transports always answer true (reading the socket is their only check). Lets the
    /// protocol layer's polling loop skip an interface in a few instructions.
    #[inline(always)]
    pub fn needs_poll(&self) -> bool {
        !self.pending_eps.is_empty()
            || match &self.tl {
                Tl::Shm(t) => t.has_input() || t.has_events(),
                Tl::SelfTl(t) => !t.is_empty(),
                _ => true,
            }
    }

    /// Tells a transport that finds dead peers only through traffic (udp) whether an
    /// answer is awaited on `ep`, so that it probes a silent peer meanwhile. The other
    /// transports find dead peers without it (tcp connections, shm process descriptors,
    /// self never dies): for them this does nothing.
    pub fn set_awaiting(&mut self, ep: EpId, on: bool) -> Result<()> {
        match &mut self.tl {
            Tl::Udp(t) => t.set_awaiting(ep, on),
            _ => Ok(()),
        }
    }

    /// True when [`Iface::take_events`] has something.
    #[inline]
    pub fn has_events(&self) -> bool {
        match &self.tl {
            Tl::Tcp(t) => t.has_events(),
            Tl::Shm(t) => t.has_events(),
            Tl::Udp(t) => t.has_events(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.has_events(),
            Tl::SelfTl(_) => false,
        }
    }

    /// Looks for peers that died without a connection to tell (shm: peer processes that
    /// exited); their endpoints fail and show up in [`Iface::take_events`]. Costs a
    /// system call, so the protocol layer calls it now and then.
    pub fn check_peers(&mut self) {
        if let Tl::Shm(t) = &mut self.tl {
            t.check_peers();
        }
    }

    /// True when `ep` must queue behind its pending requests.
    #[inline]
    fn blocked(&self, ep: EpId) -> bool {
        !self.pending_eps.is_empty()
            && self.dispatching != Some(ep)
            && self.pending.get(ep.slot()).is_some_and(|q| !q.is_empty())
    }

    /// Sends a short active message: `hdr` then `payload` (at most `max_am_short`).
    #[inline]
    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        if self.blocked(ep) {
            return Ok(Outcome::NoResource);
        }
        dispatch!(self, t => t.am_short(ep, id, hdr, payload))
    }

    /// Sends an active message whose payload `pack` writes into the transport's buffer
    /// (at most `max_am_bcopy` bytes); returns the packed length.
    #[inline]
    pub fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Outcome<usize>> {
        if self.blocked(ep) {
            return Ok(Outcome::NoResource);
        }
        dispatch!(self, t => t.am_bcopy(ep, id, pack))
    }

    /// Sends `header` followed by the buffers of `iov` without an intermediate copy. On
    /// self and shm it completes before returning; a transport that returns `InProgress`
    /// reports completion with `comp`.
    pub fn am_zcopy(
        &mut self,
        ep: EpId,
        id: u8,
        header: &[u8],
        iov: &[&[u8]],
        _comp: Comp,
    ) -> Result<Outcome> {
        if self.blocked(ep) {
            return Ok(Outcome::NoResource);
        }
        dispatch!(self, t => t.am_zcopy(ep, id, header, iov))
    }

    /// Stores `data` at `addr` of the key's memory (at most `max_put_short` bytes).
    #[inline]
    pub fn put_short(&mut self, ep: EpId, data: &[u8], addr: u64, rkey: &Rkey) -> Result<Outcome> {
        self.check_ep(ep)?;
        if data.len() > self.attr().max_put_short {
            return Err(Status::InvalidParam);
        }
        rma::put(rkey, addr, &[data]).map(Outcome::Done)
    }

    /// Stores what `pack` produces (at most `max_put_bcopy` bytes) at `addr`.
    pub fn put_bcopy(
        &mut self,
        ep: EpId,
        pack: impl FnOnce(&mut [u8]) -> usize,
        addr: u64,
        rkey: &Rkey,
    ) -> Result<Outcome<usize>> {
        self.check_ep(ep)?;
        // The packer gets what fits both the transport's limit and the key's range, on
        // every access path alike.
        let (base, len) = rkey.range();
        let room = (base + len)
            .saturating_sub(addr)
            .min(self.attr().max_put_bcopy as u64) as usize;
        if rkey.is_direct() {
            // Pack straight into the target.
            let n = rma::with_direct_mut(rkey, addr, room, pack)?;
            return if n <= room {
                Ok(Outcome::Done(n))
            } else {
                Err(Status::InvalidParam)
            };
        }
        let mut buf = vec![0u8; room];
        let n = pack(&mut buf);
        if n > room {
            return Err(Status::InvalidParam);
        }
        rma::put(rkey, addr, &[&buf[..n]]).map(|_| Outcome::Done(n))
    }

    /// Writes the concatenation of `iov` at `addr`: in one copy (CMA or mapping) on self
    /// and shm; over tcp by sending it, and the peer reads it straight into its memory
    /// (the key must be a wire key of the peer's tcp domain); over udp by datagrams
    /// copied into the send pool (see [`Iface::put_zcopy_lent`] for udp without the
    /// copy).
    pub fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[&[u8]],
        addr: u64,
        rkey: &Rkey,
        _comp: Comp,
    ) -> Result<Outcome> {
        if let Tl::Tcp(t) = &mut self.tl {
            return t.put_zcopy(ep, iov, addr, rkey);
        }
        if let Tl::Udp(t) = &mut self.tl {
            return t.put_zcopy(ep, iov, addr, rkey);
        }
        #[cfg(feature = "fabric")]
        if let Tl::Fabric(t) = &mut self.tl {
            return t.put_zcopy(ep, iov, addr, rkey);
        }
        self.check_ep(ep)?;
        rma::put(rkey, addr, iov).map(Outcome::Done)
    }

    /// [`Iface::put_zcopy`], except that udp sends the data from `iov` without copying it
    /// ([`crate::udp::UdpIface::put_zcopy_lent`]) and returns `InProgress`.
    ///
    /// # Safety
    ///
    /// After an `InProgress`, the buffers of `iov` must stay allocated and unchanged until
    /// [`Iface::ep_is_flushed`] (or [`Iface::ep_flushed_to`] with a mark taken after the
    /// put) says the endpoint is flushed, the endpoint failed, or it was destroyed.
    #[allow(unsafe_code)] // the lent buffers' lifetime is the caller's promise
    pub unsafe fn put_zcopy_lent(
        &mut self,
        ep: EpId,
        iov: &[&[u8]],
        addr: u64,
        rkey: &Rkey,
        comp: Comp,
    ) -> Result<Outcome> {
        if let Tl::Udp(t) = &mut self.tl {
            // SAFETY: the caller's promise is the one udp's lent put asks for.
            return unsafe { t.put_zcopy_lent(ep, iov, addr, rkey) };
        }
        self.put_zcopy(ep, iov, addr, rkey, comp)
    }

    /// Reads `len` bytes at `addr` and hands them to `unpack`.
    pub fn get_bcopy(
        &mut self,
        ep: EpId,
        len: usize,
        addr: u64,
        rkey: &Rkey,
        unpack: impl FnOnce(&[u8]),
        _comp: Comp,
    ) -> Result<Outcome> {
        self.check_ep(ep)?;
        if len > self.attr().max_get_bcopy {
            return Err(Status::InvalidParam);
        }
        if rkey.is_direct() {
            rma::with_direct(rkey, addr, len, unpack)?;
            return Ok(Outcome::Done(()));
        }
        let mut buf = vec![0u8; len];
        rma::get(rkey, addr, &mut [&mut buf])?;
        unpack(&buf);
        Ok(Outcome::Done(()))
    }

    /// Reads into the concatenation of `iov` from `addr` in one copy.
    pub fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &mut [&mut [u8]],
        addr: u64,
        rkey: &Rkey,
        _comp: Comp,
    ) -> Result<Outcome> {
        #[cfg(feature = "fabric")]
        if let Tl::Fabric(t) = &mut self.tl {
            return t.get_zcopy(ep, iov, addr, rkey);
        }
        self.check_ep(ep)?;
        rma::get(rkey, addr, iov).map(Outcome::Done)
    }

    /// An atomic without a result (add, and, or, xor).
    pub fn atomic_post(
        &mut self,
        ep: EpId,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        addr: u64,
        rkey: &Rkey,
    ) -> Result<Outcome> {
        if matches!(op, AtomicOp::Swap | AtomicOp::Cswap) {
            return Err(Status::InvalidParam);
        }
        self.check_ep(ep)?;
        rma::atomic(rkey, op, size, addr, value, 0).map(|_| Outcome::Done(()))
    }

    /// An atomic that returns the previous value (`compare` is used by cswap only).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_fetch(
        &mut self,
        ep: EpId,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        addr: u64,
        rkey: &Rkey,
        _comp: Comp,
    ) -> Result<Outcome<u64>> {
        self.check_ep(ep)?;
        rma::atomic(rkey, op, size, addr, value, compare).map(Outcome::Done)
    }

    /// Completes all operations of `ep` issued so far, remotely. On self and shm
    /// everything is complete when issued, so this only orders memory; over tcp it says
    /// `NoResource` until the endpoint's send buffer was handed to the kernel.
    pub fn ep_flush(&mut self, ep: EpId, _comp: Comp) -> Result<Outcome> {
        match &self.tl {
            #[cfg(feature = "fabric")]
            Tl::Fabric(_) => {
                if !self.ep_is_flushed(ep)? {
                    return Ok(Outcome::NoResource);
                }
            }
            Tl::Tcp(_) | Tl::Udp(_) => {
                if !self.ep_is_flushed(ep)? {
                    return Ok(Outcome::NoResource);
                }
            }
            _ => self.check_ep(ep)?,
        }
        if self.blocked(ep) {
            return Ok(Outcome::NoResource);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(Outcome::Done(()))
    }

    /// Flushes every endpoint of the interface.
    pub fn flush(&mut self, _comp: Comp) -> Result<Outcome> {
        let unflushed = match &self.tl {
            Tl::Tcp(t) => !t.is_flushed(),
            Tl::Udp(t) => !t.is_flushed(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => !t.is_flushed(),
            _ => false,
        };
        if !self.pending_eps.is_empty() || unflushed {
            return Ok(Outcome::NoResource);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(Outcome::Done(()))
    }

    /// Orders operations issued before the fence before those issued after it.
    pub fn fence(&mut self) -> Result<()> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Queues `f` to run from progress when `ep` has resources again. Returns `Busy` when
    /// it has them now (retry the operation instead).
    pub fn pending_add(&mut self, ep: EpId, f: PendingFn) -> Result<()> {
        let has_space = match &mut self.tl {
            Tl::SelfTl(t) => t.check_ep(ep).map(|_| t.has_space())?,
            Tl::Shm(t) => t.ep_has_space(ep)?,
            Tl::Tcp(t) => t.ep_has_space(ep)?,
            Tl::Udp(t) => t.ep_has_space(ep)?,
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.ep_has_space(ep)?,
        };
        let q = self
            .pending
            .get_mut(ep.slot())
            .ok_or(Status::InvalidParam)?;
        if has_space && q.is_empty() {
            return Err(Status::Busy);
        }
        if q.is_empty() {
            self.pending_eps.push_back(ep);
        }
        q.push_back(f);
        Ok(())
    }

    /// Drops the pending requests of `ep`; returns how many there were.
    pub fn pending_purge(&mut self, ep: EpId) -> usize {
        let n = self.pending.get_mut(ep.slot()).map_or(0, |q| {
            let n = q.len();
            q.clear();
            n
        });
        self.pending_eps.retain(|e| *e != ep);
        n
    }

    /// Delivers arrived messages to their handlers and runs pending requests that can
    /// proceed. Returns the number of events handled.
    #[inline]
    pub fn progress(&mut self) -> usize {
        let n = dispatch!(self, t => t.progress());
        if self.pending_eps.is_empty() {
            n
        } else {
            n + self.dispatch_pending()
        }
    }

    /// Like [`Iface::progress`], but arrived messages go to `f(am_id, data)` instead of the
    /// handler table: the protocol layer uses this to reach its own state without boxed
    /// handlers.
    #[inline(always)]
    pub fn progress_with(&mut self, mut f: impl FnMut(u8, &[u8])) -> usize {
        let n = dispatch!(self, t => t.poll(&mut f));
        if self.pending_eps.is_empty() {
            n
        } else {
            n + self.dispatch_pending()
        }
    }

    /// [`Iface::progress_with`], also telling whether the interface has events for
    /// [`Iface::take_events`] (as [`Iface::has_events`] would, after the poll), with
    /// one dispatch on the transport for both.
    #[inline(always)]
    pub fn progress_with_events(&mut self, mut f: impl FnMut(u8, &[u8])) -> (usize, bool) {
        let (n, events) = match &mut self.tl {
            Tl::SelfTl(t) => (t.poll(&mut f), false),
            Tl::Shm(t) => (t.poll(f), t.has_events()),
            Tl::Tcp(t) => (t.poll(&mut f), t.has_events()),
            Tl::Udp(t) => (t.poll(&mut f), t.has_events()),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => (t.poll(&mut f), t.has_events()),
        };
        if self.pending_eps.is_empty() {
            (n, events)
        } else {
            let m = self.dispatch_pending();
            (n + m, self.has_events())
        }
    }

    #[cold]
    fn dispatch_pending(&mut self) -> usize {
        let mut done = 0;
        for _ in 0..self.pending_eps.len() {
            let Some(ep) = self.pending_eps.pop_front() else {
                break;
            };
            self.dispatching = Some(ep);
            loop {
                let Some(mut f) = self
                    .pending
                    .get_mut(ep.slot())
                    .and_then(VecDeque::pop_front)
                else {
                    break;
                };
                match f(self, ep) {
                    PendingResult::Done => done += 1,
                    PendingResult::Again => {
                        if let Some(q) = self.pending.get_mut(ep.slot()) {
                            q.push_front(f);
                        }
                        break;
                    }
                }
            }
            self.dispatching = None;
            if self.pending.get(ep.slot()).is_some_and(|q| !q.is_empty()) {
                self.pending_eps.push_back(ep);
            }
        }
        done
    }

    /// A descriptor that becomes readable when a message arrives after [`Iface::arm`]
    /// (None for transports that never receive asynchronously, like self).
    pub fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.tl {
            Tl::SelfTl(_) => None,
            Tl::Shm(t) => Some(t.event_fd()),
            Tl::Tcp(t) => Some(t.event_fd()),
            Tl::Udp(t) => Some(t.event_fd()),
            #[cfg(feature = "fabric")]
            Tl::Fabric(_) => None,
        }
    }

    /// A descriptor that becomes readable when a peer of this interface's endpoints died
    /// (shm, whose peers are processes of this host), so that a sleeping worker wakes to
    /// run [`Iface::check_peers`]. Other transports report dead peers on `event_fd`.
    pub fn peers_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.tl {
            Tl::Shm(t) => Some(t.peers_fd()),
            _ => None,
        }
    }

    /// Prepares for sleeping on the event fd. `Busy` means events are waiting: progress
    /// instead of sleeping.
    pub fn arm(&mut self) -> Result<()> {
        match &mut self.tl {
            Tl::SelfTl(t) if t.has_queued() => Err(Status::Busy),
            Tl::SelfTl(_) => Ok(()),
            Tl::Shm(t) => t.arm(),
            Tl::Tcp(t) => t.arm(),
            Tl::Udp(t) => t.arm(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.arm(),
        }
    }

    /// Arms and sleeps on the event fd for up to `timeout_ms` (-1: forever) unless events
    /// are waiting. Returns true when woken by an event (or events were waiting). For udp
    /// the descriptor also holds a timer that `arm` sets to the reliability engine's next
    /// deadline, so a sleeper wakes to retransmit, acknowledge or declare a peer failed
    /// (see [`crate::udp`]); call `progress` after waking either way.
    pub fn wait(&mut self, timeout_ms: i32) -> Result<bool> {
        if self.arm().is_err() {
            return Ok(true);
        }
        let Some(fd) = self.event_fd() else {
            return Ok(false);
        };
        ucs::sys::poll::readable(fd, timeout_ms)
    }

    /// Messages the transport dropped as malformed.
    pub fn dropped(&self) -> u64 {
        match &self.tl {
            Tl::SelfTl(_) => 0,
            Tl::Shm(t) => t.dropped(),
            Tl::Tcp(t) => t.dropped(),
            Tl::Udp(t) => t.dropped(),
            #[cfg(feature = "fabric")]
            Tl::Fabric(t) => t.dropped(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shm interface connected to itself (the loopback mode of the benchmarks) carries
    /// short and bcopy messages through its own FIFO, more of them than the FIFO holds,
    /// every byte checked; the endpoint has no peer watch, and goes cleanly.
    #[test]
    fn shm_reaches_its_own_interface() {
        use std::sync::{Arc, Mutex};
        let cfg = IfaceConfig::default();
        let mut iface = Iface::open(Transport::Shm, &cfg).unwrap();
        let addr = iface.address();
        let ep = iface.ep_create(&addr).unwrap();
        let got = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
        let sink = Arc::clone(&got);
        iface
            .set_am_handler(5, Box::new(move |d| sink.lock().unwrap().push(d.to_vec())))
            .unwrap();
        let max_short = iface.attr().max_am_short;
        let mut want = Vec::new();
        for i in 0..1000u32 {
            let len = (i as usize * 7) % (max_short + 1);
            let payload: Vec<u8> = (0..len).map(|k| (k as u32 ^ i) as u8).collect();
            let hdr = u64::from(i) << 8 | 0xa5;
            loop {
                let out = if i % 2 == 0 {
                    iface.am_short(ep, 5, hdr, &payload).unwrap().is_done()
                } else {
                    let bytes: Vec<u8> =
                        hdr.to_ne_bytes().iter().chain(&payload).copied().collect();
                    iface
                        .am_bcopy(ep, 5, |b| {
                            b[..bytes.len()].copy_from_slice(&bytes);
                            bytes.len()
                        })
                        .unwrap()
                        .is_done()
                };
                if out {
                    break;
                }
                iface.progress();
            }
            let mut w = hdr.to_ne_bytes().to_vec();
            w.extend_from_slice(&payload);
            want.push(w);
        }
        for _ in 0..10_000 {
            if got.lock().unwrap().len() == want.len() {
                break;
            }
            iface.progress();
        }
        assert_eq!(*got.lock().unwrap(), want);
        assert_eq!(iface.dropped(), 0);
        iface.check_peers();
        assert!(iface.take_events().is_empty(), "no peer failure reported");
        iface.ep_destroy(ep).unwrap();

        // The same address with its wakeup descriptor number changed to one that is not an
        // eventfd (a file of this process, which a wakeup would write into): refused.
        let path = std::env::temp_dir().join(format!("rucx-shm-addr-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let mut forged = crate::shm::address::ShmIfaceAddr::decode(&addr).unwrap();
        forged.event_fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        assert_eq!(iface.ep_create(&forged.encode()), Err(Status::InvalidAddr));
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    /// Endpoint ids of reused slots carry a generation in their high bits; the pending
    /// table is indexed by slot, so it stays as small as the number of endpoints.
    #[test]
    fn pending_table_follows_slots_not_ids() {
        let cfg = IfaceConfig::default();
        let mut iface = Iface::open(Transport::SelfTl, &cfg).unwrap();
        let addr = iface.address();
        for _ in 0..3 {
            let ep = iface.ep_create(&addr).unwrap();
            iface.ep_destroy(ep).unwrap();
        }
        let ep = iface.ep_create(&addr).unwrap();
        assert_ne!(
            ep.0 as usize,
            ep.slot(),
            "the slot was reused under a new id"
        );
        assert!(
            iface.pending.len() <= 1,
            "pending table of {}",
            iface.pending.len()
        );
        // The table still serves the endpoint: with room, pending_add says retry now.
        assert_eq!(
            iface.pending_add(ep, Box::new(|_, _| PendingResult::Done)),
            Err(Status::Busy)
        );
    }
}
