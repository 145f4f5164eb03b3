//! The shared network: nodes (one per open interface), the virtual clock, the datagrams in
//! flight, the faults applied to them and the hooks that fire at a chosen step. One
//! [`Fabric`] handle per network; interfaces hold the same shared state.

use super::rng::Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use ucs::{Result, Status};

/// A node of the network: the interface opened `n`-th on it (0, 1, 2, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// Which rendezvous the interfaces of a network offer the protocol layer (see the
/// module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RndvMode {
    /// `PUT_ZCOPY`: the sender sends the data, which is written into the receiver's
    /// registration when it is delivered (like tcp).
    Put,
    /// `GET_ZCOPY`: the receiver reads the sender's registration in one synchronous copy
    /// (like cross-memory attach).
    Get,
}

/// Parameters of a network, fixed when it is created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricConfig {
    /// Largest message, frame header included: `max_am_bcopy` is 2 bytes less.
    pub seg_size: usize,
    /// Unacknowledged messages per peer before sends return `NoResource`.
    pub window: u32,
    /// Initial retransmission timeout (virtual ns).
    pub rto: u64,
    /// Silence after which a peer we wait for (or probe) is declared dead (virtual ns).
    pub peer_timeout: u64,
    /// Probe a silent peer after this long even with nothing in flight (virtual ns), so
    /// that an idle peer's death is noticed as well.
    pub keepalive: u64,
    pub rndv: RndvMode,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            seg_size: 1024,
            window: 32,
            rto: 1_000_000,
            peer_timeout: 40_000_000,
            keepalive: 10_000_000,
            rndv: RndvMode::Put,
        }
    }
}

/// Faults applied to every datagram put on the network (data, acknowledgements and
/// probes alike). The reliability engine of every interface recovers from them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Probability that a datagram is lost.
    pub drop: f64,
    /// Probability that a datagram is delivered twice.
    pub dup: f64,
    /// Every datagram takes `delay.0 ..= delay.1` ns (virtual) to arrive.
    pub delay: (u64, u64),
    /// Probability that a datagram is held back up to `reorder_ns` more, so that later
    /// ones overtake it.
    pub reorder: f64,
    pub reorder_ns: u64,
}

/// What the network did, cumulatively.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    pub sent: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub delivered: u64,
    /// Datagrams to a dead or closed node, discarded.
    pub lost_to_dead: u64,
    /// Send attempts refused because the sender's lane was filled.
    pub refused_full: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeState {
    Open,
    /// Killed: the node's process "died".
    Dead,
    /// Its interface was closed (the process exited normally, or the worker was destroyed).
    Closed,
}

pub(crate) struct Node {
    pub state: NodeState,
    /// The lane is full: `Some(None)` until released, `Some(Some(t))` until the clock
    /// reaches `t`.
    pub filled: Option<Option<u64>>,
    pub inbox: VecDeque<(u32, Vec<u8>)>,
}

enum Hook {
    Kill(NodeId),
    Fill(NodeId, Option<u64>),
}

pub(crate) struct Net {
    pub id: u64,
    pub seed: u64,
    pub cfg: FabricConfig,
    rng: Rng,
    pub now: u64,
    auto_tick: u64,
    pub step: u64,
    faults: Faults,
    pub nodes: Vec<Node>,
    /// Datagrams in flight by (arrival time, sequence): (from, to, bytes).
    flight: BTreeMap<(u64, u64), (u32, u32, Vec<u8>)>,
    seq: u64,
    hooks: BTreeMap<u64, Vec<Hook>>,
    pub stats: FabricStats,
}

impl Net {
    /// Counts one operation step of any node and fires the hooks set for it.
    pub fn step(&mut self) {
        self.step += 1;
        if let Some(hooks) = self.hooks.remove(&self.step) {
            for h in hooks {
                match h {
                    Hook::Kill(n) => self.kill(n),
                    Hook::Fill(n, hold) => {
                        if let Some(node) = self.nodes.get_mut(n.0 as usize) {
                            node.filled = Some(hold.map(|d| self.now + d));
                        }
                    }
                }
            }
        }
    }

    pub fn kill(&mut self, n: NodeId) {
        if let Some(node) = self.nodes.get_mut(n.0 as usize) {
            if node.state == NodeState::Open {
                node.state = NodeState::Dead;
            }
            node.inbox.clear();
        }
    }

    pub fn state(&self, n: u32) -> NodeState {
        self.nodes
            .get(n as usize)
            .map_or(NodeState::Closed, |node| node.state)
    }

    /// True when `n`'s lane is filled now.
    pub fn is_full(&mut self, n: u32) -> bool {
        let now = self.now;
        let Some(node) = self.nodes.get_mut(n as usize) else {
            return false;
        };
        match node.filled {
            Some(Some(until)) if now >= until => {
                node.filled = None;
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The clock of a polling interface: advanced by the automatic tick, if any, and the
    /// datagrams due by then moved into their receivers' inboxes.
    pub fn tick(&mut self) -> u64 {
        self.now += self.auto_tick;
        self.deliver_due();
        self.now
    }

    fn deliver_due(&mut self) {
        while let Some(entry) = self.flight.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (from, to, bytes) = entry.remove();
            match self.nodes.get_mut(to as usize) {
                Some(node) if node.state == NodeState::Open => {
                    node.inbox.push_back((from, bytes));
                    self.stats.delivered += 1;
                }
                _ => self.stats.lost_to_dead += 1,
            }
        }
    }

    /// Puts a datagram from `from` to `to` on the network, applying the faults.
    pub fn transmit(&mut self, from: u32, to: u32, bytes: &[u8]) {
        self.stats.sent += 1;
        if self.rng.chance(self.faults.drop) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.faults.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (lo, hi) = self.faults.delay;
            let mut at = self.now + lo + self.rng.upto(hi.saturating_sub(lo));
            if self.rng.chance(self.faults.reorder) {
                self.stats.reordered += 1;
                at += 1 + self.rng.upto(self.faults.reorder_ns);
            }
            self.seq += 1;
            self.flight
                .insert((at, self.seq), (from, to, bytes.to_vec()));
        }
    }
}

/// The networks of this process, by id, so that an interface can be opened by device
/// name.
static NETS: Mutex<Vec<(u64, Weak<Mutex<Net>>)>> = Mutex::new(Vec::new());
static DEFAULT: OnceLock<Fabric> = OnceLock::new();

thread_local! {
    static CURRENT: RefCell<Option<Weak<Mutex<Net>>>> = const { RefCell::new(None) };
}

pub(crate) fn lock(net: &Mutex<Net>) -> MutexGuard<'_, Net> {
    net.lock().unwrap_or_else(|p| p.into_inner())
}

/// The device name of network `id`.
fn device_name(id: u64) -> String {
    format!("fabric{id}")
}

/// The network a device name refers to.
pub(crate) fn find(device: &str) -> Result<Arc<Mutex<Net>>> {
    let id: u64 = device
        .strip_prefix("fabric")
        .and_then(|s| s.parse().ok())
        .ok_or(Status::NoDevice)?;
    let nets = NETS.lock().unwrap_or_else(|p| p.into_inner());
    nets.iter()
        .find(|(i, _)| *i == id)
        .and_then(|(_, w)| w.upgrade())
        .ok_or(Status::NoDevice)
}

/// The device of the network this thread entered ([`Fabric::enter`]); the default
/// network (seed 0, no faults) when none.
pub fn current_device() -> String {
    let cur = CURRENT.with(|c| c.borrow().as_ref().and_then(Weak::upgrade));
    match cur {
        Some(net) => device_name(lock(&net).id),
        None => DEFAULT
            .get_or_init(|| Fabric::with_config(0, FabricConfig::default()))
            .device(),
    }
}

/// A handle to an in-memory network: create one per test, [`Fabric::enter`] it on the
/// thread that opens interfaces (a ucp context and its workers), then drive its clock
/// and its faults. Cheap to clone.
#[derive(Clone)]
pub struct Fabric {
    net: Arc<Mutex<Net>>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = lock(&self.net);
        write!(f, "Fabric({} seed {:#x} t={}ns)", n.id, n.seed, n.now)
    }
}

impl Fabric {
    /// A new network with the default configuration, entered on this thread.
    pub fn new(seed: u64) -> Fabric {
        let f = Fabric::with_config(seed, FabricConfig::default());
        f.enter();
        f
    }

    /// A new network (not entered).
    pub fn with_config(seed: u64, cfg: FabricConfig) -> Fabric {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let net = Arc::new(Mutex::new(Net {
            id,
            seed,
            cfg,
            rng: Rng::new(seed),
            now: 0,
            auto_tick: 0,
            step: 0,
            faults: Faults::default(),
            nodes: Vec::new(),
            flight: BTreeMap::new(),
            seq: 0,
            hooks: BTreeMap::new(),
            stats: FabricStats::default(),
        }));
        let mut nets = NETS.lock().unwrap_or_else(|p| p.into_inner());
        nets.retain(|(_, w)| w.strong_count() > 0);
        nets.push((id, Arc::downgrade(&net)));
        Fabric { net }
    }

    /// Makes this the network whose device `Transport::Fabric.devices()` lists on this
    /// thread.
    pub fn enter(&self) {
        CURRENT.with(|c| *c.borrow_mut() = Some(Arc::downgrade(&self.net)));
    }

    fn net(&self) -> MutexGuard<'_, Net> {
        lock(&self.net)
    }

    /// The device name interfaces of this network are opened on.
    pub fn device(&self) -> String {
        device_name(self.net().id)
    }

    pub fn seed(&self) -> u64 {
        self.net().seed
    }

    pub fn config(&self) -> FabricConfig {
        self.net().cfg.clone()
    }

    /// The virtual clock, in ns.
    pub fn now(&self) -> u64 {
        self.net().now
    }

    /// Advances the virtual clock by `ns`.
    pub fn advance(&self, ns: u64) {
        let mut n = self.net();
        n.now += ns;
        n.deliver_due();
    }

    /// Advances the clock by `ns` at every progress of every interface (0: only
    /// [`Fabric::advance`] moves it), so that code which only progresses still lets
    /// time pass.
    pub fn set_auto_tick(&self, ns: u64) {
        self.net().auto_tick = ns;
    }

    pub fn set_faults(&self, f: Faults) {
        self.net().faults = f;
    }

    /// Operations so far: every send attempt (`am_*`, `put_zcopy`, `get_zcopy`) of any
    /// interface of the network is one step.
    pub fn steps(&self) -> u64 {
        self.net().step
    }

    /// Nodes opened so far (open, dead or closed).
    pub fn node_count(&self) -> u32 {
        self.net().nodes.len() as u32
    }

    /// The node opened last, if any.
    pub fn last_node(&self) -> Option<NodeId> {
        self.node_count().checked_sub(1).map(NodeId)
    }

    /// True while `n` is open (neither killed nor closed).
    pub fn is_alive(&self, n: NodeId) -> bool {
        self.net().state(n.0) == NodeState::Open
    }

    /// Kills `n` now: see the module docs.
    pub fn kill(&self, n: NodeId) {
        self.net().kill(n);
    }

    /// Kills `n` when the network reaches step `step` (the `step`-th send attempt,
    /// counting from 1), before that attempt runs.
    pub fn kill_at_step(&self, n: NodeId, step: u64) {
        self.net()
            .hooks
            .entry(step)
            .or_default()
            .push(Hook::Kill(n));
    }

    /// Fills `n`'s lane: its sends return `NoResource` until [`Fabric::release`].
    pub fn fill(&self, n: NodeId) {
        if let Some(node) = self.net().nodes.get_mut(n.0 as usize) {
            node.filled = Some(None);
        }
    }

    /// Releases a lane filled by [`Fabric::fill`] or [`Fabric::fill_at_step`].
    pub fn release(&self, n: NodeId) {
        if let Some(node) = self.net().nodes.get_mut(n.0 as usize) {
            node.filled = None;
        }
    }

    /// Fills `n`'s lane at step `step` for `hold_ns` of virtual time (then it releases
    /// itself as the clock moves on).
    pub fn fill_at_step(&self, n: NodeId, step: u64, hold_ns: u64) {
        self.net()
            .hooks
            .entry(step)
            .or_default()
            .push(Hook::Fill(n, Some(hold_ns)));
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.net().flight.len()
    }

    pub fn stats(&self) -> FabricStats {
        self.net().stats
    }
}
