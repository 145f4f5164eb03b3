//! A deterministic simulated datagram network for the reliability engine ([`uct_rel`]).
//!
//! [`SimNet`] carries datagrams between N engines under a virtual clock, losing,
//! duplicating, delaying and reordering them as its [`NetConfig`] says, with every random
//! choice drawn from one seeded [`SplitMix64`]. The same seed, configuration and sequence
//! of calls give the same run, bit for bit, so a failing seed is a reproducible test case:
//! tests print it in their assertion messages.
//!
//! Addressing: node `i`'s engine knows node `j` as `PeerId(j)`, and a datagram node `i`
//! transmits to `PeerId(j)` arrives at node `j` as coming from `PeerId(i)`. The tests add
//! the peers they need to each engine.
//!
//! Receivers: by default a datagram is handed to its engine the moment it arrives. With
//! [`NetConfig::rx_buf`] set, each node has a socket receive buffer of that many bytes
//! (changeable per node at any time with [`SimNet::set_rx_buf`], to model a sudden shrink)
//! that its owner drains at a finite speed ([`NetConfig::read_ns`] per datagram plus
//! [`NetConfig::read_ns_per_kib`] per KiB): a datagram that arrives when it does not fit is
//! dropped and counted in [`NetStats::overflow`], as a kernel does. Losses can come in
//! bursts ([`NetConfig::burst_enter`], [`NetConfig::burst_exit`]: a two-state channel
//! that, once in its bad state, loses every datagram until it leaves it).
//!
//! Time moves only in [`SimNet::step`]: to the earliest of the next datagram arrival, the
//! next read of a queued datagram and the next engine timer. A node that is [down](SimNet::set_up) is silent: it receives nothing
//! (datagrams arriving for it are lost), sends nothing and runs no timers, which is what
//! a crashed or partitioned peer looks like to the others.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use uct_rel::{Engine, Event, PeerId};

/// SplitMix64: a small, fast, statistically decent 64-bit generator; a whole run's
/// randomness comes from one of these, so one `u64` seed names the run.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose output is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n` is 0). The modulo bias is below 2^-40 for the small
    /// ranges a simulation uses.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `p` (clamped to 0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // 53 random bits give a uniform float in [0, 1).
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// How the network treats each datagram. Probabilities are per datagram and independent.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConfig {
    /// Probability that a datagram is lost (the tests use 0 to 0.3).
    pub loss: f64,
    /// Probability that a datagram that was not lost arrives twice (each copy with its
    /// own delay).
    pub duplicate: f64,
    /// Probability that a copy is held back by an extra `reorder_delay`, so that later
    /// datagrams overtake it.
    pub reorder: f64,
    /// One-way latency in nanoseconds.
    pub delay: u64,
    /// Extra latency drawn uniformly from `0..=jitter` per copy (also reorders when it
    /// exceeds the spacing of datagrams).
    pub jitter: u64,
    /// Extra latency of a reordered copy.
    pub reorder_delay: u64,
    /// Receive buffer of every node, in bytes of datagrams; `None`: unbounded and read at
    /// once (no queueing at the receiver).
    pub rx_buf: Option<u64>,
    /// Time a receiver takes to read one datagram (with `rx_buf`).
    pub read_ns: u64,
    /// Further time per KiB of the datagram (with `rx_buf`).
    pub read_ns_per_kib: u64,
    /// Probability per datagram that the channel enters its bad state (burst loss).
    pub burst_enter: f64,
    /// Probability per datagram that the channel leaves its bad state.
    pub burst_exit: f64,
}

impl NetConfig {
    /// No loss, duplication or reordering; `delay` latency.
    pub fn perfect(delay: u64) -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            delay,
            jitter: 0,
            reorder_delay: 0,
            rx_buf: None,
            read_ns: 0,
            read_ns_per_kib: 0,
            burst_enter: 0.0,
            burst_exit: 1.0,
        }
    }
}

/// What the network did, for reports and for checking that faults were injected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Datagrams lost on the wire.
    pub lost: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Copies held back to be overtaken.
    pub reordered: u64,
    /// Copies handed to an engine.
    pub delivered: u64,
    /// Copies dropped because the destination was down or does not exist.
    pub undeliverable: u64,
    /// Copies dropped because the receiver's buffer was full.
    pub overflow: u64,
    /// Datagrams lost in a loss burst (included in `lost`).
    pub burst_lost: u64,
    /// Largest number of bytes ever queued in a receiver's buffer.
    pub max_queued: u64,
}

/// A datagram on the wire, ordered by arrival time, then by the order it was sent in
/// (which keeps runs deterministic when arrivals tie).
struct InFlight {
    at: u64,
    order: u64,
    from: u32,
    to: u32,
    bytes: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    // Reversed: BinaryHeap is a max-heap and we want the earliest arrival on top.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

struct Node {
    engine: Engine,
    up: bool,
    /// Datagrams in the receive buffer (with `rx_buf`): sender, bytes.
    rxq: VecDeque<(u32, Vec<u8>)>,
    rxq_bytes: u64,
    /// Receive buffer size, bytes.
    rx_buf: u64,
    /// The receiver is busy reading until then.
    busy_until: u64,
}

/// The simulated network and the engines it connects. See the module docs.
pub struct SimNet {
    now: u64,
    cfg: NetConfig,
    rng: SplitMix64,
    wire: BinaryHeap<InFlight>,
    order: u64,
    nodes: Vec<Node>,
    /// Datagram buffers to reuse, so a long run does not allocate per datagram.
    spare: Vec<Vec<u8>>,
    stats: NetStats,
    /// The burst-loss channel is in its bad state.
    bad: bool,
}

impl std::fmt::Debug for SimNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNet")
            .field("now", &self.now)
            .field("cfg", &self.cfg)
            .field("nodes", &self.nodes.len())
            .field("in_flight", &self.wire.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl SimNet {
    /// A network at time 0 connecting `engines` (node `i` is `engines[i]`), all up.
    pub fn new(cfg: NetConfig, seed: u64, engines: Vec<Engine>) -> Self {
        Self {
            now: 0,
            rng: SplitMix64::new(seed),
            wire: BinaryHeap::new(),
            order: 0,
            nodes: engines
                .into_iter()
                .map(|engine| Node {
                    engine,
                    up: true,
                    rxq: VecDeque::new(),
                    rxq_bytes: 0,
                    rx_buf: cfg.rx_buf.unwrap_or(u64::MAX),
                    busy_until: 0,
                })
                .collect(),
            cfg,
            spare: Vec::new(),
            stats: NetStats::default(),
            bad: false,
        }
    }

    /// The virtual time, in nanoseconds.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s engine.
    pub fn engine(&mut self, i: usize) -> &mut Engine {
        &mut self.nodes[i].engine
    }

    /// Node `i`'s engine, read-only.
    pub fn engine_ref(&self, i: usize) -> &Engine {
        &self.nodes[i].engine
    }

    /// Takes node `i` down (silent) or brings it back up.
    pub fn set_up(&mut self, i: usize, up: bool) {
        self.nodes[i].up = up;
    }

    /// Changes node `i`'s receive buffer (with [`NetConfig::rx_buf`] set). What is queued
    /// beyond the new size stays; new datagrams are dropped until it drains below.
    pub fn set_rx_buf(&mut self, i: usize, bytes: u64) {
        self.nodes[i].rx_buf = bytes;
    }

    /// Bytes queued in node `i`'s receive buffer.
    pub fn rx_queued(&self, i: usize) -> u64 {
        self.nodes[i].rxq_bytes
    }

    /// Whether node `i` is up.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].up
    }

    /// What the network did so far.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Datagrams on the wire.
    pub fn in_flight(&self) -> usize {
        self.wire.len()
    }

    /// Puts every datagram the up nodes want to transmit on the wire.
    pub fn flush(&mut self) {
        let Self {
            now,
            cfg,
            rng,
            wire,
            order,
            nodes,
            spare,
            stats,
            bad,
        } = self;
        for (i, node) in nodes.iter_mut().enumerate() {
            if !node.up {
                continue;
            }
            while let Some(t) = node.engine.poll_transmit(*now) {
                stats.sent += 1;
                if cfg.burst_enter > 0.0 {
                    if *bad {
                        *bad = !rng.chance(cfg.burst_exit);
                    } else {
                        *bad = rng.chance(cfg.burst_enter);
                    }
                    if *bad {
                        stats.lost += 1;
                        stats.burst_lost += 1;
                        continue;
                    }
                }
                if rng.chance(cfg.loss) {
                    stats.lost += 1;
                    continue;
                }
                let copies = if rng.chance(cfg.duplicate) {
                    stats.duplicated += 1;
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let mut at = *now + cfg.delay + rng.below(cfg.jitter + 1);
                    if rng.chance(cfg.reorder) {
                        stats.reordered += 1;
                        at += cfg.reorder_delay;
                    }
                    let mut bytes = spare.pop().unwrap_or_default();
                    bytes.clear();
                    bytes.extend_from_slice(t.bytes);
                    *order += 1;
                    wire.push(InFlight {
                        at,
                        order: *order,
                        from: i as u32,
                        to: t.peer.0,
                        bytes,
                    });
                }
            }
        }
    }

    /// When the next thing happens (an arrival or an up node's timer), if anything will.
    pub fn next_event_time(&self) -> Option<u64> {
        let timers = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .filter_map(|n| n.engine.next_timeout());
        let now = self.now;
        let reads = self
            .nodes
            .iter()
            .filter(|n| n.up && !n.rxq.is_empty())
            .map(|n| n.busy_until.max(now));
        self.wire
            .peek()
            .map(|p| p.at)
            .into_iter()
            .chain(timers)
            .chain(reads)
            .min()
    }

    /// Advances to the next moment something happens and processes it: flushes pending
    /// transmissions, moves the clock, hands every datagram due to its engine, runs due
    /// timers, passes every engine event to `on_event(node, event)`, and flushes again.
    /// Returns `false`, without moving the clock, when nothing is left to happen (no
    /// datagram in flight and no timer armed on an up node).
    pub fn step(&mut self, on_event: &mut dyn FnMut(usize, Event<'_>)) -> bool {
        self.flush();
        let Some(next) = self.next_event_time() else {
            return false;
        };
        self.now = self.now.max(next);
        let now = self.now;
        while self.wire.peek().is_some_and(|p| p.at <= now) {
            let Some(p) = self.wire.pop() else { break };
            match self.nodes.get_mut(p.to as usize) {
                Some(node) if node.up && self.cfg.rx_buf.is_some() => {
                    let len = p.bytes.len() as u64;
                    if node.rxq_bytes + len > node.rx_buf {
                        self.stats.overflow += 1;
                        self.spare.push(p.bytes);
                    } else {
                        node.rxq_bytes += len;
                        self.stats.max_queued = self.stats.max_queued.max(node.rxq_bytes);
                        node.rxq.push_back((p.from, p.bytes));
                    }
                    continue;
                }
                Some(node) if node.up => {
                    self.stats.delivered += 1;
                    node.engine.on_packet(PeerId(p.from), &p.bytes, now);
                }
                _ => self.stats.undeliverable += 1,
            }
            self.spare.push(p.bytes);
        }
        // Receivers read what their buffers hold, one datagram per read time.
        let (read_ns, per_kib) = (self.cfg.read_ns, self.cfg.read_ns_per_kib);
        for node in self.nodes.iter_mut().filter(|n| n.up) {
            while node.busy_until <= now {
                let Some((from, bytes)) = node.rxq.pop_front() else {
                    break;
                };
                let len = bytes.len() as u64;
                node.rxq_bytes -= len;
                node.busy_until = now + read_ns + len * per_kib / 1024;
                self.stats.delivered += 1;
                node.engine.on_packet(PeerId(from), &bytes, now);
                self.spare.push(bytes);
                if node.busy_until > now {
                    break;
                }
            }
        }
        for node in self.nodes.iter_mut().filter(|n| n.up) {
            if node.engine.next_timeout().is_some_and(|t| t <= now) {
                node.engine.on_timeout(now);
            }
        }
        self.drain_events(on_event);
        self.flush();
        true
    }

    /// Passes every queued event of every up node to `on_event`.
    pub fn drain_events(&mut self, on_event: &mut dyn FnMut(usize, Event<'_>)) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if !node.up {
                continue;
            }
            while let Some(ev) = node.engine.poll_event() {
                on_event(i, ev);
            }
        }
    }

    /// Steps until the clock would pass `until` or nothing is left to happen; returns
    /// whether something is still pending.
    pub fn run_until(&mut self, until: u64, on_event: &mut dyn FnMut(usize, Event<'_>)) -> bool {
        loop {
            self.flush();
            match self.next_event_time() {
                None => return false,
                Some(t) if t > until => {
                    self.now = self.now.max(until);
                    return true;
                }
                Some(_) => {
                    self.step(on_event);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_seeded_and_spread() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(1);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let mut r = SplitMix64::new(1);
        assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
        assert_ne!(a[0], SplitMix64::new(2).next_u64());
        let mut r = SplitMix64::new(7);
        let hits = (0..100_000).filter(|_| r.chance(0.3)).count();
        assert!((29_000..31_000).contains(&hits), "{hits}");
        assert!(!r.chance(0.0));
        assert!((0..1000).all(|_| r.below(10) < 10));
    }
}
