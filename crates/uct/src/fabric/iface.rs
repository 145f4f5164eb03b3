//! [`FabricIface`]: one node of a fabric network, with a reliability engine of
//! [`uct_rel`] per interface (as udp has), driven by the network's virtual clock.

use super::net::{self, FabricConfig, Net, NodeState, RndvMode};
use super::wire::{self, FabricAddr, Frame};
use crate::am::AmTable;
use crate::rkey::{Access, Rkey};
use crate::slab::Slab;
use crate::tcp::IfaceEvent;
use crate::types::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use ucs::{Result, Status};
use uct_rel::{Engine, Event, PeerId, PeerStatus, SendError};

struct FEp {
    peer: u32,
    failed: Option<Status>,
}

pub struct FabricIface {
    net: Arc<Mutex<Net>>,
    net_id: u64,
    node: u32,
    cfg: FabricConfig,
    device: String,
    engine: Engine,
    /// Node of each engine peer (index = peer id).
    peers: Vec<u32>,
    by_node: HashMap<u32, u32>,
    eps: Slab<FEp>,
    handlers: AmTable,
    events: Vec<IfaceEvent>,
    /// This node was killed, and its endpoints were failed.
    dead: bool,
    attr: IfaceAttr,
    scratch: Vec<u8>,
    dropped: u64,
}

impl FabricIface {
    /// Opens a new node on the network of `device`.
    pub fn open(device: &str) -> Result<FabricIface> {
        let net = net::find(device)?;
        let (node, net_id, cfg) = {
            let mut n = net::lock(&net);
            n.nodes.push(net::Node {
                state: NodeState::Open,
                filled: None,
                inbox: Default::default(),
            });
            ((n.nodes.len() - 1) as u32, n.id, n.cfg.clone())
        };
        let max = cfg.seg_size;
        if !(64..=65000).contains(&max) {
            return Err(Status::InvalidParam);
        }
        let engine = Engine::new(uct_rel::Config {
            session: node,
            window: cfg.window,
            max_payload: max,
            ack_delay: 0,
            ack_every: 1,
            initial_rto: cfg.rto,
            max_rto: cfg.rto * 8,
            nak_interval: cfg.rto / 2,
            peer_timeout: cfg.peer_timeout,
            keepalive: Some(cfg.keepalive),
            tx_pool_packets: cfg.window * 64,
            rx_pool_packets: cfg.window * 64,
            max_peers: 1 << 16,
            ..uct_rel::Config::default()
        })
        .map_err(|_| Status::InvalidParam)?;
        let am = max - wire::AM_HDR;
        let (put, get) = match cfg.rndv {
            RndvMode::Put => ((max - wire::PUT_HDR) * (cfg.window as usize / 4).max(1), 0),
            RndvMode::Get => (0, usize::MAX),
        };
        let mut caps = Caps::AM_SHORT | Caps::AM_BCOPY | Caps::AM_ZCOPY | Caps::CONNECT_TO_IFACE;
        caps |= match cfg.rndv {
            RndvMode::Put => Caps::PUT_ZCOPY,
            RndvMode::Get => Caps::GET_ZCOPY,
        };
        let attr = IfaceAttr {
            caps,
            max_am_short: am - 8,
            max_am_bcopy: am,
            max_am_zcopy: am,
            max_am_hdr: am,
            max_put_short: 0,
            max_put_bcopy: 0,
            max_put_zcopy: put,
            max_get_bcopy: 0,
            max_get_zcopy: get,
            iface_addr_len: wire::ADDR_LEN,
            device_addr_len: crate::shm::address::DEVICE_ADDR_LEN,
            // Cheaper than every real transport, so that a context that has fabric
            // besides others picks it.
            cost: CostModel {
                overhead: 1e-9,
                latency: 1e-9,
                bandwidth: 100e9,
            },
            rma_cost: CostModel {
                overhead: 1e-9,
                latency: 1e-9,
                bandwidth: 400e9,
            },
        };
        Ok(FabricIface {
            device: device.to_string(),
            net,
            net_id,
            node,
            cfg,
            engine,
            peers: Vec::new(),
            by_node: HashMap::new(),
            eps: Slab::default(),
            handlers: AmTable::default(),
            events: Vec::new(),
            dead: false,
            attr,
            scratch: Vec::new(),
            dropped: 0,
        })
    }

    pub fn attr(&self) -> &IfaceAttr {
        &self.attr
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn address(&self) -> Vec<u8> {
        FabricAddr {
            net: self.net_id,
            node: self.node,
        }
        .encode()
    }

    /// Nodes of the same network are reachable (open or not: a dead one is found dead by
    /// its endpoints, as a dead process is).
    pub fn is_reachable(&self, iface_addr: &[u8]) -> bool {
        FabricAddr::decode(iface_addr).is_ok_and(|a| {
            a.net == self.net_id && (a.node as usize) < net::lock(&self.net).nodes.len()
        })
    }

    pub fn handlers(&mut self) -> &mut AmTable {
        &mut self.handlers
    }

    /// The engine peer of `node`, added when new (or when its earlier incarnation failed).
    fn peer_of(&mut self, node: u32, now: u64) -> u32 {
        if let Some(&p) = self.by_node.get(&node) {
            if self.engine.peer_status(PeerId(p)) != PeerStatus::Failed {
                return p;
            }
            self.engine.remove_peer(PeerId(p));
            let _ = self.engine.add_peer(PeerId(p), now);
            return p;
        }
        let p = self.peers.len() as u32;
        self.peers.push(node);
        self.by_node.insert(node, p);
        let _ = self.engine.add_peer(PeerId(p), now);
        p
    }

    pub fn ep_create(&mut self, iface_addr: &[u8]) -> Result<EpId> {
        let a = FabricAddr::decode(iface_addr)?;
        if !self.is_reachable(iface_addr) {
            return Err(Status::Unreachable);
        }
        let now = net::lock(&self.net).now;
        let peer = self.peer_of(a.node, now);
        let failed = self.dead.then_some(Status::ConnectionReset);
        self.eps.insert(FEp { peer, failed })
    }

    pub fn ep_destroy(&mut self, ep: EpId) -> Result<()> {
        self.eps.remove(ep).map(|_| ())
    }

    pub fn ep_count(&self) -> usize {
        self.eps.len()
    }

    /// Checks `ep` exists (for operations the transport does not support).
    pub fn check_ep(&self, ep: EpId) -> Result<()> {
        self.eps.get(ep).map(|_| ())
    }

    fn peer_has_space(&self, peer: u32) -> bool {
        matches!(self.engine.peer_status(PeerId(peer)),
            PeerStatus::Active { unacked } if unacked < self.cfg.window)
            && self.engine.pool_in_use().0 < self.engine.config().tx_pool_packets
    }

    /// True when `ep` can take a message now; a failed endpoint "has space" (its
    /// operations fail at once).
    pub fn ep_has_space(&mut self, ep: EpId) -> Result<bool> {
        let e = self.eps.get(ep)?;
        if e.failed.is_some() || self.dead {
            return Ok(true);
        }
        let peer = e.peer;
        let full = net::lock(&self.net).is_full(self.node);
        Ok(!full && self.peer_has_space(peer))
    }

    pub fn ep_is_flushed(&self, ep: EpId) -> Result<bool> {
        let e = self.eps.get(ep)?;
        if let Some(s) = e.failed {
            return Err(s);
        }
        match self.engine.peer_status(PeerId(e.peer)) {
            PeerStatus::Active { unacked } => Ok(unacked == 0),
            PeerStatus::Failed => Err(Status::EndpointTimeout),
            PeerStatus::Unknown => Err(Status::InvalidParam),
        }
    }

    pub fn is_flushed(&self) -> bool {
        (0..self.peers.len() as u32).all(|p| {
            !matches!(self.engine.peer_status(PeerId(p)),
                PeerStatus::Active { unacked } if unacked > 0)
        })
    }

    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    pub fn take_events(&mut self) -> Vec<IfaceEvent> {
        std::mem::take(&mut self.events)
    }

    /// Fails every endpoint once this node was killed, and reports every peer that only
    /// sent to it (no endpoint) by its address: the dead node loses those peers as much
    /// as the others, and what it half received from them must be released too (a
    /// survivor reports such a peer the same way when it falls silent).
    fn die(&mut self) {
        if self.dead {
            return;
        }
        self.dead = true;
        let mut has_ep = vec![false; self.peers.len()];
        for (id, e) in self.eps.iter_mut() {
            has_ep[e.peer as usize] = true;
            if e.failed.is_none() {
                e.failed = Some(Status::ConnectionReset);
                self.events
                    .push(IfaceEvent::EpFailed(id, Status::ConnectionReset));
            }
        }
        for (&node, _) in self.peers.iter().zip(has_ep).filter(|(_, e)| !e) {
            let addr = FabricAddr {
                net: self.net_id,
                node,
            };
            self.events.push(IfaceEvent::PeerClosed(addr.encode()));
        }
    }

    /// The common start of every send: one step of the network (hooks may fire), then
    /// the checks. `Ok(None)`: the lane is full (filled, or with `window`, the peer's
    /// window).
    fn begin(&mut self, ep: EpId, window: bool) -> Result<Option<(u32, u64)>> {
        let e = self.eps.get(ep)?;
        let peer = e.peer;
        let failed = e.failed;
        let (state, full, now) = {
            let mut n = net::lock(&self.net);
            n.step();
            let full = n.is_full(self.node);
            if full {
                n.stats.refused_full += 1;
            }
            (n.state(self.node), full, n.now)
        };
        if state != NodeState::Open {
            self.die();
            return Err(Status::ConnectionReset);
        }
        if let Some(s) = failed {
            return Err(s);
        }
        if full || (window && !self.peer_has_space(peer)) {
            return Ok(None);
        }
        Ok(Some((peer, now)))
    }

    /// Sends the frame in `scratch` to `peer`.
    fn push(&mut self, peer: u32, now: u64) -> Result<Outcome> {
        let r = self.engine.send(PeerId(peer), &self.scratch, now);
        match r {
            Ok(()) => {
                self.transmit(now);
                Ok(Outcome::Done(()))
            }
            Err(SendError::WindowFull) => Ok(Outcome::NoResource),
            Err(SendError::Failed) => Err(Status::EndpointTimeout),
            Err(SendError::TooLarge | SendError::UnknownPeer) => Err(Status::InvalidParam),
        }
    }

    /// Hands the engine's datagrams to the network.
    fn transmit(&mut self, now: u64) {
        let mut n = net::lock(&self.net);
        if n.state(self.node) != NodeState::Open {
            while self.engine.poll_transmit(now).is_some() {}
            return;
        }
        while let Some(t) = self.engine.poll_transmit(now) {
            let to = self.peers[t.peer.0 as usize];
            n.transmit(self.node, to, t.bytes);
        }
    }

    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        if id >= AM_ID_MAX || payload.len() > self.attr.max_am_short {
            self.check_ep(ep)?;
            return Err(Status::InvalidParam);
        }
        let Some((peer, now)) = self.begin(ep, true)? else {
            return Ok(Outcome::NoResource);
        };
        self.scratch.clear();
        wire::put_am_hdr(&mut self.scratch, id);
        self.scratch.extend_from_slice(&hdr.to_ne_bytes());
        self.scratch.extend_from_slice(payload);
        self.push(peer, now)
    }

    pub fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Outcome<usize>> {
        if id >= AM_ID_MAX {
            self.check_ep(ep)?;
            return Err(Status::InvalidParam);
        }
        let Some((peer, now)) = self.begin(ep, true)? else {
            return Ok(Outcome::NoResource);
        };
        let max = self.attr.max_am_bcopy;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        wire::put_am_hdr(&mut buf, id);
        buf.resize(wire::AM_HDR + max, 0);
        let n = pack(&mut buf[wire::AM_HDR..]);
        if n > max {
            self.scratch = buf;
            return Err(Status::InvalidParam);
        }
        buf.truncate(wire::AM_HDR + n);
        self.scratch = buf;
        Ok(match self.push(peer, now)? {
            Outcome::Done(()) => Outcome::Done(n),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        })
    }

    pub fn am_zcopy(&mut self, ep: EpId, id: u8, header: &[u8], iov: &[&[u8]]) -> Result<Outcome> {
        let total = header.len() + iov.iter().map(|b| b.len()).sum::<usize>();
        if id >= AM_ID_MAX || total > self.attr.max_am_zcopy {
            self.check_ep(ep)?;
            return Err(Status::InvalidParam);
        }
        let Some((peer, now)) = self.begin(ep, true)? else {
            return Ok(Outcome::NoResource);
        };
        self.scratch.clear();
        wire::put_am_hdr(&mut self.scratch, id);
        self.scratch.extend_from_slice(header);
        for b in iov {
            self.scratch.extend_from_slice(b);
        }
        self.push(peer, now)
    }

    /// Sends `iov` to be written at `addr` of the peer's registration named by `rkey`
    /// (a wire key) when it is delivered (rendezvous by put). Data longer than one
    /// message goes as consecutive pieces, all or none: `NoResource` unless the peer's
    /// window has room for every piece.
    pub fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[&[u8]],
        addr: u64,
        rkey: &Rkey,
    ) -> Result<Outcome> {
        self.check_ep(ep)?;
        if self.cfg.rndv != RndvMode::Put {
            return Err(Status::Unsupported);
        }
        let data: Vec<u8> = iov.concat();
        let reg = rkey.wire_reg().ok_or(Status::InvalidParam)?;
        if data.len() > self.attr.max_put_zcopy {
            return Err(Status::InvalidParam);
        }
        rkey.check(addr, data.len())?;
        let Some((peer, now)) = self.begin(ep, true)? else {
            return Ok(Outcome::NoResource);
        };
        let piece = self.cfg.seg_size - wire::PUT_HDR;
        let pieces = data.len().div_ceil(piece).max(1) as u32;
        let room = match self.engine.peer_status(PeerId(peer)) {
            PeerStatus::Active { unacked } => self.cfg.window.saturating_sub(unacked),
            _ => 0,
        };
        let pool = self.engine.config().tx_pool_packets - self.engine.pool_in_use().0;
        if room < pieces || pool < pieces {
            return Ok(Outcome::NoResource);
        }
        let mut off = 0;
        loop {
            let n = piece.min(data.len() - off);
            self.scratch.clear();
            wire::put_put_hdr(&mut self.scratch, reg, addr + off as u64);
            self.scratch.extend_from_slice(&data[off..off + n]);
            match self.push(peer, now)? {
                Outcome::Done(()) => {}
                // Room was checked for every piece.
                _ => return Err(Status::IoError),
            }
            off += n;
            if off >= data.len() {
                return Ok(Outcome::Done(()));
            }
        }
    }

    /// Reads the peer's registration named by the wire key `rkey` at `addr` into `iov`,
    /// in one synchronous copy (the peers of a fabric share this process's memory).
    pub fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &mut [&mut [u8]],
        addr: u64,
        rkey: &Rkey,
    ) -> Result<Outcome> {
        self.check_ep(ep)?;
        if self.cfg.rndv != RndvMode::Get {
            return Err(Status::Unsupported);
        }
        let reg = rkey.wire_reg().ok_or(Status::InvalidParam)?;
        let total: usize = iov.iter().map(|b| b.len()).sum();
        rkey.check(addr, total)?;
        let Some((peer, _)) = self.begin(ep, false)? else {
            return Ok(Outcome::NoResource);
        };
        let owner = self.peers[peer as usize];
        if net::lock(&self.net).state(owner) != NodeState::Open {
            return Err(Status::EndpointTimeout);
        }
        let local = local_key(reg, addr, total).ok_or(Status::InvalidParam)?;
        crate::rma::get(&local, addr, iov).map(Outcome::Done)
    }

    /// Delivers arrived messages to `f`, runs the engine's timers and sends what it wants
    /// sent. Returns the number of events handled.
    pub fn poll(&mut self, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let (arrived, state, now) = {
            let mut n = net::lock(&self.net);
            let now = n.tick();
            let state = n.state(self.node);
            let inbox = n
                .nodes
                .get_mut(self.node as usize)
                .map(|x| std::mem::take(&mut x.inbox))
                .unwrap_or_default();
            (inbox, state, now)
        };
        if state != NodeState::Open {
            let had = self.dead;
            self.die();
            return usize::from(!had);
        }
        let mut count = 0;
        for (from, bytes) in arrived {
            let peer = self.peer_of(from, now);
            self.engine.on_packet(PeerId(peer), &bytes, now);
        }
        if self.engine.next_timeout().is_some_and(|t| t <= now) {
            self.engine.on_timeout(now);
        }
        self.transmit(now);
        let FabricIface {
            engine,
            eps,
            events,
            dropped,
            net_id,
            peers,
            ..
        } = self;
        while let Some(ev) = engine.poll_event() {
            count += 1;
            match ev {
                Event::Deliver { payload, .. } => match wire::decode(payload) {
                    Some(Frame::Am { id, data }) => f(id, data),
                    Some(Frame::Put { reg, addr, data }) => {
                        let ok = local_key(reg, addr, data.len())
                            .is_some_and(|k| crate::rma::put(&k, addr, &[data]).is_ok());
                        if !ok {
                            *dropped += 1;
                        }
                    }
                    None => *dropped += 1,
                },
                Event::PeerFailed(p) => {
                    let mut any = false;
                    for (id, e) in eps.iter_mut() {
                        if e.peer == p.0 {
                            any = true;
                            if e.failed.is_none() {
                                e.failed = Some(Status::EndpointTimeout);
                                events.push(IfaceEvent::EpFailed(id, Status::EndpointTimeout));
                            }
                        }
                    }
                    if !any {
                        // A peer that only sent to us: reported by its address, as tcp
                        // reports a peer that closed a connection we did not open.
                        let addr = FabricAddr {
                            net: *net_id,
                            node: peers[p.0 as usize],
                        };
                        events.push(IfaceEvent::PeerClosed(addr.encode()));
                    }
                }
            }
        }
        // Acknowledgements of what was just delivered.
        self.transmit(now);
        count
    }

    /// Delivers arrived messages to the registered handlers.
    pub fn progress(&mut self) -> usize {
        let mut h = std::mem::take(&mut self.handlers);
        let n = self.poll(&mut |id, d| h.dispatch(id, d));
        self.handlers = h;
        n
    }

    /// `Busy` when messages wait to be delivered (progress instead of sleeping).
    pub fn arm(&mut self) -> Result<()> {
        let n = net::lock(&self.net);
        let waiting = n
            .nodes
            .get(self.node as usize)
            .is_some_and(|x| !x.inbox.is_empty());
        if waiting || self.has_events() {
            Err(Status::Busy)
        } else {
            Ok(())
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Drop for FabricIface {
    /// The node closes: what is in flight to it is lost, and its peers find it silent.
    fn drop(&mut self) {
        let mut n = net::lock(&self.net);
        if let Some(node) = n.nodes.get_mut(self.node as usize) {
            if node.state == NodeState::Open {
                node.state = NodeState::Closed;
            }
            node.inbox.clear();
        }
    }
}

/// A key to registration `reg` of this process, when it is alive and holds
/// `[addr, addr+len)`: the peers of a fabric are in this process.
fn local_key(reg: u64, addr: u64, len: usize) -> Option<Rkey> {
    let alive = crate::md::wire_target(reg, addr, len as u64)?;
    Some(Rkey {
        base: addr,
        len: len as u64,
        pid: ucs::sys::pidfd::current_pid(),
        access: Access::Local(alive),
    })
}
