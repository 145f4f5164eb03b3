//! The reliability engine (`uct-rel`) under testkit's deterministic simulated network
//! (`testkit::simnet`): for many seeds and for loss from 0 to 30%, duplication,
//! reordering, jitter and their combination, every message is delivered exactly once and
//! in order per sender, byte for byte; also across sequence-number wraparound, with 64
//! peers sending to one, when a peer goes silent (it is declared failed within the
//! configured time and the others carry on), and when a full window stalls the sender
//! (send says WindowFull, then everything recovers). With finite receiver buffers that
//! drop on overflow: a small buffer (the advertised credit keeps the sender within it, a
//! window alone overflows it), a buffer that shrinks mid-run (with and without the engine
//! being told), loss in bursts, and 1, 10, 100, 1000 and 4000 peers starting to send to
//! one receiver at once. After each run every engine must come back to idle: all data
//! acknowledged, no buffer held, no timer armed.
//!
//! A failure names the scenario, the seed and the whole configuration; rerun it with
//! `run_one(&scenario, seed)`. The runs are deterministic: the same seed gives the same
//! run. Each two-node configuration runs 40 seeds with traffic both ways: 10^5 messages
//! in each direction for the loss configurations (0, 1, 10, 30%), 5 * 10^4 for the
//! others; the whole file takes about 30 s of CPU in the test profile (opt-level 1).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use testkit::pattern::mix64;
use testkit::simnet::{NetConfig, NetStats, SimNet};
use uct_rel::{Config, Counters, Engine, Event, PeerId, PeerStatus, SendError};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// Engine settings for a network with ~20-30 us one-way latency.
fn engine_cfg() -> Config {
    Config {
        window: 256,
        ack_delay: 50 * US,
        ack_every: 32,
        initial_rto: MS,
        max_rto: 50 * MS,
        nak_interval: 100 * US,
        peer_timeout: 2 * S,
        ..Config::default()
    }
}

fn net(loss: f64, duplicate: f64, reorder: f64) -> NetConfig {
    NetConfig {
        loss,
        duplicate,
        reorder,
        delay: 20 * US,
        jitter: 10 * US,
        reorder_delay: 150 * US,
        ..NetConfig::perfect(0)
    }
}

#[derive(Clone, Debug)]
struct Scenario {
    name: &'static str,
    net: NetConfig,
    engine: Config,
    nodes: usize,
    /// (sender node, receiver node) pairs, each carrying `messages` messages.
    streams: Vec<(usize, usize)>,
    messages: u64,
    /// A node that goes silent for good at the given time.
    kill: Option<(usize, u64)>,
    /// Messages carry 12 bytes of index and sender, then 0 to `extra - 1` pattern bytes.
    extra: u64,
    /// At this time node 0's receive buffer shrinks to this many bytes; if the flag is
    /// set, its engine is told (its credit follows), else only losses tell the senders.
    shrink: Option<(u64, u64, bool)>,
}

impl Scenario {
    /// Node 1 sends to node 0 and node 0 to node 1 (so acks ride on data both ways).
    fn pair(name: &'static str, net: NetConfig, messages: u64) -> Self {
        Self {
            name,
            net,
            engine: engine_cfg(),
            nodes: 2,
            streams: vec![(1, 0), (0, 1)],
            messages,
            kill: None,
            extra: 48,
            shrink: None,
        }
    }

    /// `senders` nodes (1..=senders) sending `messages` each to node 0, over a network
    /// whose receivers have `rx_buf` bytes of buffer (the engines advertise as much) and
    /// read about 600 MB/s; messages of 12 to 1411 bytes.
    fn fan_in(name: &'static str, senders: usize, messages: u64, rx_buf: u64) -> Self {
        let mut engine = engine_cfg();
        engine.rcv_buf = rx_buf as u32;
        Self {
            name,
            net: buffered(net(0.0, 0.0, 0.0), rx_buf),
            engine,
            nodes: senders + 1,
            streams: (1..=senders).map(|s| (s, 0)).collect(),
            messages,
            kill: None,
            extra: 1400,
            shrink: None,
        }
    }
}

/// `n` with receivers that hold `rx_buf` bytes and read a datagram in 0.5 us plus 1 us
/// per KiB (about 600 MB/s for the messages of `Scenario::fan_in`).
fn buffered(n: NetConfig, rx_buf: u64) -> NetConfig {
    NetConfig {
        rx_buf: Some(rx_buf),
        read_ns: 500,
        read_ns_per_kib: 1000,
        ..n
    }
}

/// Message `idx` of `sender`: index, sender, then 0 to `extra - 1` pattern bytes.
fn fill_message(buf: &mut Vec<u8>, sender: usize, idx: u64, extra: u64) {
    buf.clear();
    buf.extend_from_slice(&idx.to_le_bytes());
    buf.extend_from_slice(&(sender as u32).to_le_bytes());
    let h = mix64(idx ^ ((sender as u64) << 40));
    let len = (h % extra.max(1)) as usize;
    buf.extend((0..len).map(|i| (h >> (i % 8 * 8)) as u8 ^ i as u8));
}

struct Stream {
    src: usize,
    dst: usize,
    sent: u64,
    /// Stopped sending (finished, or the peer failed).
    closed: bool,
}

struct Run {
    sc: Scenario,
    seed: u64,
    net: SimNet,
    streams: Vec<Stream>,
    /// expected[(receiver, sender)]: index of the next message due (absent: 0).
    expected: HashMap<(usize, usize), u64>,
    /// (node, failed peer, time).
    failures: Vec<(usize, usize, u64)>,
    killed_at: Option<u64>,
    buf: Vec<u8>,
}

impl Run {
    fn new(sc: Scenario, seed: u64) -> Self {
        let mut engines = Vec::new();
        for i in 0..sc.nodes {
            let cfg = Config {
                session: mix64(seed ^ i as u64) as u32,
                ..sc.engine.clone()
            };
            let mut e = Engine::new(cfg).expect("valid config");
            for &(a, b) in &sc.streams {
                for (me, other) in [(a, b), (b, a)] {
                    if me == i && e.peer_status(PeerId(other as u32)) == PeerStatus::Unknown {
                        e.add_peer(PeerId(other as u32), 0).unwrap();
                    }
                }
            }
            engines.push(e);
        }
        let streams = sc
            .streams
            .iter()
            .map(|&(src, dst)| Stream {
                src,
                dst,
                sent: 0,
                closed: false,
            })
            .collect();
        Self {
            net: SimNet::new(sc.net.clone(), seed, engines),
            expected: HashMap::new(),
            streams,
            failures: Vec::new(),
            killed_at: None,
            buf: Vec::new(),
            sc,
            seed,
        }
    }

    fn ctx(&self, what: impl std::fmt::Display) -> String {
        format!(
            "scenario {:?} seed {} at t={} ns: {what}\n  config: {:?}",
            self.sc.name,
            self.seed,
            self.net.now(),
            self.sc
        )
    }

    /// Hands every stream's next messages to its engine until the window is full.
    fn offer(&mut self) -> Result<(), String> {
        let now = self.net.now();
        for k in 0..self.streams.len() {
            let (src, dst) = (self.streams[k].src, self.streams[k].dst);
            if self.streams[k].closed || !self.net.is_up(src) {
                continue;
            }
            while self.streams[k].sent < self.sc.messages {
                // Skip building a message the window cannot take (this loop runs every
                // step; the WindowFull path itself is tested below).
                if let PeerStatus::Active { unacked } =
                    self.net.engine_ref(src).peer_status(PeerId(dst as u32))
                {
                    if unacked >= self.sc.engine.window {
                        break;
                    }
                }
                fill_message(&mut self.buf, src, self.streams[k].sent, self.sc.extra);
                match self
                    .net
                    .engine(src)
                    .send(PeerId(dst as u32), &self.buf, now)
                {
                    Ok(()) => self.streams[k].sent += 1,
                    Err(SendError::WindowFull) => break,
                    Err(SendError::Failed)
                        if self.failures.iter().any(|f| (f.0, f.1) == (src, dst)) =>
                    {
                        self.streams[k].closed = true;
                        break;
                    }
                    Err(e) => return Err(self.ctx(format!("send {src}->{dst}: {e}"))),
                }
            }
            if self.streams[k].sent == self.sc.messages {
                self.streams[k].closed = true;
            }
        }
        Ok(())
    }

    /// One network step, checking every event.
    fn step(&mut self) -> Result<bool, String> {
        if let Some((at, bytes, tell)) = self.sc.shrink {
            if self.net.now() >= at && self.net.rx_queued(0) != u64::MAX {
                self.net.set_rx_buf(0, bytes);
                if tell {
                    self.net.engine(0).set_rcv_buf(bytes as u32);
                }
                self.sc.shrink = None;
            }
        }
        if let Some((node, at)) = self.sc.kill {
            if self.killed_at.is_none() && self.net.now() >= at {
                self.net.set_up(node, false);
                self.killed_at = Some(self.net.now());
            }
        }
        let Run {
            sc,
            net,
            expected,
            failures,
            killed_at,
            ..
        } = self;
        let mut err = None;
        let progressed = net.step(&mut |node, ev| {
            if err.is_some() {
                return;
            }
            match ev {
                Event::Deliver { peer, payload } => {
                    err = check_message(expected, sc.messages, sc.extra, node, peer, payload).err();
                }
                Event::PeerFailed(peer) => {
                    let p = peer.0 as usize;
                    if sc.kill.map(|k| k.0) != Some(p) || killed_at.is_none() {
                        err = Some(format!("node {node}: unexpected failure of {peer}"));
                    }
                    failures.push((node, p, u64::MAX));
                }
            }
        });
        if let Some(e) = err {
            return Err(self.ctx(e));
        }
        // The callback ran at the step's new time, which it could not read.
        let now = self.net.now();
        for f in self.failures.iter_mut().filter(|f| f.2 == u64::MAX) {
            f.2 = now;
        }
        Ok(progressed)
    }

    /// Messages node `dst` received from node `src` so far.
    fn got(&self, dst: usize, src: usize) -> u64 {
        self.expected.get(&(dst, src)).copied().unwrap_or(0)
    }

    fn killed(&self) -> Option<usize> {
        self.sc.kill.map(|k| k.0)
    }

    /// Every required stream delivered in full, and, with a killed node, everyone who
    /// talked to it has declared it failed.
    fn complete(&self) -> bool {
        let killed = self.killed();
        let delivered = self.streams.iter().all(|s| {
            Some(s.src) == killed
                || Some(s.dst) == killed
                || self.got(s.dst, s.src) == self.sc.messages
        });
        let failed = match killed {
            None => true,
            Some(k) => self.streams.iter().all(|s| {
                let other = if s.src == k { s.dst } else { s.src };
                (s.src != k && s.dst != k) || self.failures.iter().any(|f| f.0 == other && f.1 == k)
            }),
        };
        delivered && failed
    }

    fn run(&mut self, time_limit: u64) -> Result<(), String> {
        loop {
            self.offer()?;
            if self.complete() {
                return Ok(());
            }
            if !self.step()? {
                return Err(self.ctx(format!("stalled: {}", self.progress())));
            }
            if self.net.now() > time_limit {
                return Err(self.ctx(format!("virtual time limit: {}", self.progress())));
            }
        }
    }

    fn progress(&self) -> String {
        self.streams
            .iter()
            .map(|s| {
                format!(
                    "{}->{} sent {} delivered {}",
                    s.src,
                    s.dst,
                    s.sent,
                    self.got(s.dst, s.src)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Lets the engines finish (last acknowledgements) and checks they are idle: nothing
    /// unacknowledged, no buffer held, no timer armed, no extra message delivered.
    fn quiesce(&mut self) -> Result<(), String> {
        // With keepalive the engines never go fully idle (they probe forever): give them
        // a while, then check everything but the timers.
        let keepalive = self.sc.engine.keepalive.is_some();
        let limit = self.net.now() + if keepalive { S } else { 10 * S };
        while self.net.next_event_time().is_some_and(|t| t <= limit) {
            if !self.step()? {
                break;
            }
        }
        if !keepalive && self.net.next_event_time().is_some() {
            return Err(self.ctx("engines did not become idle"));
        }
        for i in 0..self.sc.nodes {
            if Some(i) == self.killed() {
                continue;
            }
            let e = self.net.engine_ref(i);
            for s in self.streams.iter().filter(|s| s.src == i) {
                let st = e.peer_status(PeerId(s.dst as u32));
                if Some(s.dst) != self.killed() && st != (PeerStatus::Active { unacked: 0 }) {
                    return Err(self.ctx(format!("node {i} -> {}: {st:?} at the end", s.dst)));
                }
            }
            if e.pool_in_use() != (0, 0) || (!keepalive && e.armed_timers() != 0) {
                return Err(self.ctx(format!(
                    "node {i} not idle: pools {:?}, timers {}",
                    e.pool_in_use(),
                    e.armed_timers()
                )));
            }
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for i in 0..self.sc.nodes {
            add(&mut c, self.net.engine_ref(i).counters());
        }
        c
    }
}

fn add(c: &mut Counters, x: &Counters) {
    c.tx_data += x.tx_data;
    c.tx_retransmits += x.tx_retransmits;
    c.tx_acks += x.tx_acks;
    c.tx_naks += x.tx_naks;
    c.tx_probes += x.tx_probes;
    c.timeouts += x.timeouts;
    c.tail_probes += x.tail_probes;
    c.rx_delivered += x.rx_delivered;
    c.rx_duplicates += x.rx_duplicates;
    c.rx_out_of_order += x.rx_out_of_order;
    c.rx_out_of_window += x.rx_out_of_window;
    c.rx_malformed += x.rx_malformed;
    c.rx_invalid += x.rx_invalid;
    c.rx_unknown_peer += x.rx_unknown_peer;
    c.rx_stale_session += x.rx_stale_session;
    c.rx_no_buffer += x.rx_no_buffer;
    c.rx_naks += x.rx_naks;
    c.window_full += x.window_full;
    c.tx_pool_exhausted += x.tx_pool_exhausted;
    c.peers_failed += x.peers_failed;
    c.cwnd_reductions += x.cwnd_reductions;
    c.window_limited += x.window_limited;
    c.pace_waits += x.pace_waits;
}

fn check_message(
    expected: &mut HashMap<(usize, usize), u64>,
    messages: u64,
    extra: u64,
    node: usize,
    peer: PeerId,
    payload: &[u8],
) -> Result<(), String> {
    let from = peer.0 as usize;
    let next = expected.entry((node, from)).or_insert(0);
    if payload.len() < 12 {
        return Err(format!(
            "node {node}: {}-byte message from {peer}",
            payload.len()
        ));
    }
    let idx = u64::from_le_bytes(payload[..8].try_into().unwrap());
    let sender = u32::from_le_bytes(payload[8..12].try_into().unwrap()) as usize;
    if sender != from {
        return Err(format!(
            "node {node}: message of node {sender} delivered as {peer}'s"
        ));
    }
    if idx != *next {
        return Err(format!(
            "node {node}: from {peer} got message {idx}, expected {} ({})",
            *next,
            if idx < *next { "duplicate" } else { "gap" }
        ));
    }
    if idx >= messages {
        return Err(format!("node {node}: extra message {idx} from {peer}"));
    }
    let mut want = Vec::new();
    fill_message(&mut want, sender, idx, extra);
    if payload != want.as_slice() {
        return Err(format!("node {node}: message {idx} from {peer} corrupted"));
    }
    *next += 1;
    Ok(())
}

struct Totals {
    runs: u64,
    messages: u64,
    net: NetStats,
    c: Counters,
    virtual_ns: u64,
}

/// Runs one scenario for one seed; any failure (including a panic inside the engine)
/// becomes a message naming the seed and configuration.
fn run_one(sc: &Scenario, seed: u64, time_limit: u64) -> Result<Run, String> {
    let sc2 = sc.clone();
    let r = catch_unwind(AssertUnwindSafe(move || -> Result<Run, String> {
        let mut run = Run::new(sc2, seed);
        run.run(time_limit)?;
        run.quiesce()?;
        Ok(run)
    }));
    match r {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!(
                "scenario {:?} seed {seed}: panicked: {what}\n  config: {sc:?}",
                sc.name
            ))
        }
    }
}

/// 40 seeds of `sc`, each with `sc.messages` messages per stream.
fn many_seeds(sc: Scenario) -> Totals {
    let t0 = Instant::now();
    let mut tot = Totals {
        runs: 0,
        messages: 0,
        net: NetStats::default(),
        c: Counters::default(),
        virtual_ns: 0,
    };
    // Each scenario gets its own seeds, derived from its name.
    let base = sc.name.bytes().fold(0, |h, b| mix64(h ^ u64::from(b)));
    for i in 0..40u64 {
        let s = &sc;
        let seed = mix64(base ^ i);
        // A failure inside names this seed; rerun it alone with run_one(&scenario, seed).
        let run = run_one(s, seed, 1000 * S).unwrap_or_else(|e| panic!("{e}"));
        let n = run.net.stats();
        tot.runs += 1;
        tot.messages += s.messages * s.streams.len() as u64;
        tot.net.sent += n.sent;
        tot.net.lost += n.lost;
        tot.net.duplicated += n.duplicated;
        tot.net.reordered += n.reordered;
        let c = run.counters();
        add(&mut tot.c, &c);
        tot.virtual_ns += run.net.now();
        assert_eq!(c.rx_delivered, s.messages * s.streams.len() as u64);
        let bad = c.rx_malformed + c.rx_invalid + c.rx_stale_session + c.rx_unknown_peer;
        assert_eq!(bad, 0, "{}", run.ctx(format!("bad packets: {c:?}")));
    }
    println!(
        "{}: {} runs, {} messages, {:.2?} wall, {:.3} s virtual; net sent {} lost {} dup {} \
         reordered {}; retransmits {} naks {} timeouts {} dups dropped {} buffered ooo {}",
        sc.name,
        tot.runs,
        tot.messages,
        t0.elapsed(),
        tot.virtual_ns as f64 / S as f64,
        tot.net.sent,
        tot.net.lost,
        tot.net.duplicated,
        tot.net.reordered,
        tot.c.tx_retransmits,
        tot.c.tx_naks,
        tot.c.timeouts,
        tot.c.rx_duplicates,
        tot.c.rx_out_of_order,
    );
    tot
}

/// Messages per direction per seed for the loss configurations (2 * 10^5 per seed).
const MESSAGES: u64 = 100_000;
/// Messages per direction per seed for the others (10^5 per seed), to keep the file's
/// run time well under a minute on two cores.
const HALF: u64 = 50_000;

#[test]
fn lossless() {
    // No jitter either: the path keeps order, so there is nothing to recover or buffer.
    let mut n = net(0.0, 0.0, 0.0);
    n.jitter = 0;
    let t = many_seeds(Scenario::pair("lossless", n, MESSAGES));
    assert_eq!(t.net.sent, t.c.tx_data + t.c.tx_acks);
    assert_eq!(t.c.tx_retransmits + t.c.tx_naks + t.c.rx_out_of_order, 0);
}

#[test]
fn loss_1_percent() {
    let t = many_seeds(Scenario::pair("loss 1%", net(0.01, 0.0, 0.0), MESSAGES));
    assert!(t.net.lost > 0 && t.c.tx_retransmits > 0);
}

#[test]
fn loss_10_percent() {
    let t = many_seeds(Scenario::pair("loss 10%", net(0.10, 0.0, 0.0), MESSAGES));
    assert!(t.c.tx_naks > 0 && t.c.rx_out_of_order > 0);
}

#[test]
fn loss_30_percent() {
    let t = many_seeds(Scenario::pair("loss 30%", net(0.30, 0.0, 0.0), MESSAGES));
    assert!(t.c.timeouts > 0);
}

#[test]
fn duplication_5_percent() {
    let t = many_seeds(Scenario::pair("duplication 5%", net(0.0, 0.05, 0.0), HALF));
    assert!(t.net.duplicated > 0 && t.c.rx_duplicates >= t.net.duplicated / 2);
}

#[test]
fn reordering() {
    let t = many_seeds(Scenario::pair("reordering 10%", net(0.0, 0.0, 0.10), HALF));
    assert!(t.net.reordered > 0 && t.c.rx_out_of_order > 0);
}

#[test]
fn combined_faults() {
    let t = many_seeds(Scenario::pair(
        "loss 10% + dup 5% + reorder 10%",
        net(0.10, 0.05, 0.10),
        HALF,
    ));
    assert!(t.net.lost > 0 && t.net.duplicated > 0 && t.net.reordered > 0);
}

#[test]
fn sequence_wraparound() {
    // Start 1000 short of the wrap, so every run crosses it under loss and reordering.
    let mut sc = Scenario::pair("wraparound", net(0.05, 0.02, 0.05), HALF);
    sc.engine.initial_seq = u32::MAX - 1000;
    many_seeds(sc);
}

#[test]
fn sequence_wraparound_small_window() {
    // A small window crosses the wrap with many window-full stalls in between.
    let mut sc = Scenario::pair("wraparound, window 16", net(0.10, 0.0, 0.05), 20_000);
    sc.engine.initial_seq = u32::MAX - 5;
    sc.engine.window = 16;
    sc.engine.ack_every = 4;
    many_seeds(sc);
}

#[test]
fn many_peers_to_one() {
    let sc = Scenario {
        name: "64 peers to one",
        net: net(0.05, 0.02, 0.05),
        engine: engine_cfg(),
        nodes: 65,
        streams: (1..65).map(|s| (s, 0)).collect(),
        messages: 2_000,
        kill: None,
        extra: 48,
        shrink: None,
    };
    for seed in 0..4 {
        let run = run_one(&sc, seed, 1000 * S).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.counters().rx_delivered, 64 * 2_000);
        println!(
            "64 peers seed {seed}: {:.3} s virtual, net {:?}, counters {:?}, receiver {:?}",
            run.net.now() as f64 / S as f64,
            run.net.stats(),
            run.counters(),
            run.net.engine_ref(0).counters()
        );
    }
}

#[test]
fn silent_peer_is_declared_failed_and_others_continue() {
    let mut engine = engine_cfg();
    engine.peer_timeout = 200 * MS;
    engine.keepalive = Some(20 * MS);
    let mut streams: Vec<(usize, usize)> = (1..9).map(|s| (s, 0)).collect();
    streams.extend((1..9).map(|s| (0, s)));
    let sc = Scenario {
        name: "node 3 goes silent",
        net: net(0.05, 0.01, 0.05),
        engine,
        nodes: 9,
        streams,
        messages: 20_000,
        kill: Some((3, 5 * MS)),
        extra: 48,
        shrink: None,
    };
    for seed in 0..8 {
        let run = run_one(&sc, seed, 100 * S).unwrap_or_else(|e| panic!("{e}"));
        let killed_at = run.killed_at.expect("killed");
        assert_eq!(run.failures.len(), 1, "{}", run.ctx("one failure"));
        let (node, peer, at) = run.failures[0];
        assert_eq!((node, peer), (0, 3), "{}", run.ctx("who failed"));
        // Silence is measured from the last packet heard: packets node 3 sent before the
        // kill still arrive for up to ~200 us. Node 0 always had data in flight to node
        // 3, so the keepalive is not involved.
        let window = killed_at + 200 * MS - 2 * MS..=killed_at + 200 * MS + MS;
        assert!(
            window.contains(&at),
            "{}",
            run.ctx(format!("failed at {at}, killed at {killed_at}"))
        );
        let mut run = run;
        assert_eq!(
            run.net.engine(0).send(PeerId(3), b"x", 0),
            Err(SendError::Failed)
        );
        // Node 3's messages were delivered in order up to the silence, never after.
        assert!(run.got(0, 3) > 0 && run.got(0, 3) < 20_000);
    }
}

#[test]
fn window_full_returns_no_resource_then_recovers() {
    let sc = Scenario {
        name: "window full",
        net: net(0.02, 0.0, 0.0),
        engine: engine_cfg(),
        nodes: 2,
        streams: vec![(1, 0)],
        messages: 20_000,
        kill: None,
        extra: 48,
        shrink: None,
    };
    for seed in 0..4 {
        let mut run = Run::new(sc.clone(), seed);
        // The receiver is down: the sender fills its window (256 messages, or one send
        // window of bytes waiting behind those in flight, whichever comes first), then is
        // refused.
        run.net.set_up(0, false);
        run.offer().unwrap();
        // The first window goes on the wire, making room for the next in the queue.
        assert!(run.step().unwrap());
        run.offer().unwrap();
        let taken = run.streams[0].sent;
        assert!(taken > 0 && taken <= 256, "{taken}");
        assert_eq!(
            run.net.engine(1).send(PeerId(0), b"more", 0),
            Err(SendError::WindowFull)
        );
        // It stays refused while the receiver is away (retransmitting with backoff).
        while run.net.now() < 500 * MS {
            assert!(run.step().unwrap());
            run.offer().unwrap();
            assert_eq!(run.streams[0].sent, taken);
        }
        assert!(run.net.engine_ref(1).counters().timeouts >= 5);
        // The receiver comes back before the peer timeout: everything recovers.
        run.net.set_up(0, true);
        run.run(100 * S).unwrap_or_else(|e| panic!("{e}"));
        run.quiesce().unwrap_or_else(|e| panic!("{e}"));
        assert!(run.net.engine_ref(1).counters().window_full > 0);
        assert_eq!(run.got(0, 1), 20_000);
    }
}

#[test]
fn same_seed_same_run() {
    let sc = Scenario::pair("determinism", net(0.1, 0.05, 0.1), 5_000);
    let a = run_one(&sc, 42, 1000 * S).unwrap();
    let b = run_one(&sc, 42, 1000 * S).unwrap();
    let c = run_one(&sc, 43, 1000 * S).unwrap();
    assert_eq!(a.net.now(), b.net.now());
    assert_eq!(a.net.stats(), b.net.stats());
    assert_eq!(a.counters(), b.counters());
    assert_ne!(a.net.stats(), c.net.stats());
}

/// Runs `sc` for `seeds` seeds (every message checked by `run_one`), returning the
/// network's and the engines' totals.
fn seeds(sc: &Scenario, seeds: u64) -> (NetStats, Counters, u64) {
    let base = sc.name.bytes().fold(0, |h, b| mix64(h ^ u64::from(b)));
    let mut net = NetStats::default();
    let mut c = Counters::default();
    let mut virt = 0;
    for i in 0..seeds {
        let seed = mix64(base ^ i);
        let run = run_one(sc, seed, 1000 * S).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            run.counters().rx_delivered,
            sc.messages * sc.streams.len() as u64,
            "{}",
            run.ctx("delivered")
        );
        let n = run.net.stats();
        net.sent += n.sent;
        net.lost += n.lost;
        net.burst_lost += n.burst_lost;
        net.overflow += n.overflow;
        net.max_queued = net.max_queued.max(n.max_queued);
        add(&mut c, &run.counters());
        virt += run.net.now();
    }
    println!(
        "{}: {seeds} seeds, {:.3} s virtual; sent {} lost {} (burst {}) overflow {} max queued {}; \
         retransmits {} naks {} timeouts {} cwnd cuts {} window-limited {} pace waits {}",
        sc.name,
        virt as f64 / S as f64,
        net.sent,
        net.lost,
        net.burst_lost,
        net.overflow,
        net.max_queued,
        c.tx_retransmits,
        c.tx_naks,
        c.timeouts,
        c.cwnd_reductions,
        c.window_limited,
        c.pace_waits
    );
    (net, c, virt)
}

/// A receiver whose 16 KiB buffer holds a tenth of the window: the credit keeps the
/// sender within it, where the window alone (an engine advertising far more than the
/// buffer holds) overflows it again and again. Both deliver every byte.
#[test]
fn small_receiver_buffer() {
    let sc = Scenario::fan_in("16 KiB receiver buffer", 1, 20_000, 16 << 10);
    let (with, _, _) = seeds(&sc, 10);
    let mut blind = sc.clone();
    blind.name = "16 KiB receiver buffer, credit not advertised";
    blind.engine.rcv_buf = u32::MAX;
    let (without, c, _) = seeds(&blind, 10);
    assert!(without.overflow > 0 && c.cwnd_reductions > 0);
    assert!(
        with.overflow * 10 <= without.overflow,
        "flow control: {} overflows, window alone: {}",
        with.overflow,
        without.overflow
    );
    assert!(with.max_queued <= 16 << 10);
}

/// A receiver whose 16 KiB buffer its engine does not advertise, so that only losses
/// slow the sender down, and whose path delays every datagram by 20 us: the window's
/// bursts overflow the buffer. Once a loss event of that kind has cut the window, the
/// paced sender spreads its window over the round trip, so a larger window fits the
/// buffer: it needs fewer window cuts and less time for the same messages than a sender
/// that releases each window in one burst. Every byte arrives either way.
#[test]
fn pacing_spreads_the_bursts_that_overflow() {
    let mut sc = Scenario::fan_in("16 KiB buffer not advertised, paced", 1, 20_000, 16 << 10);
    sc.engine.rcv_buf = u32::MAX;
    sc.net.delay = 20 * US;
    let (paced, cp, paced_ns) = seeds(&sc, 10);
    let mut bursts = sc.clone();
    bursts.name = "16 KiB buffer not advertised, not paced";
    bursts.engine.pacing = false;
    let (unpaced, cu, unpaced_ns) = seeds(&bursts, 10);
    assert!(cp.pace_waits > 0, "pacing never held a packet back");
    assert_eq!(cu.pace_waits, 0);
    assert!(paced.overflow > 0 && unpaced.overflow > 0 && cu.cwnd_reductions > 0);
    assert!(
        cp.cwnd_reductions < cu.cwnd_reductions,
        "window cuts: paced {}, bursts {}",
        cp.cwnd_reductions,
        cu.cwnd_reductions
    );
    assert!(
        paced_ns < unpaced_ns,
        "virtual time: paced {paced_ns} ns, bursts {unpaced_ns} ns"
    );
}

/// The receiver's buffer drops from 256 KiB to 8 KiB mid-run: when its engine is told,
/// the next credit shrinks the senders' windows; when it is not, losses do (loss-driven
/// backoff). Every byte arrives either way.
#[test]
fn sudden_buffer_shrink() {
    for tell in [true, false] {
        let mut sc = Scenario::fan_in(
            if tell {
                "buffer shrink 256 KiB -> 8 KiB, credit follows"
            } else {
                "buffer shrink 256 KiB -> 8 KiB, losses only"
            },
            4,
            10_000,
            256 << 10,
        );
        sc.shrink = Some((2 * MS, 8 << 10, tell));
        let (net, c, _) = seeds(&sc, 8);
        if !tell {
            assert!(net.overflow > 0 && c.cwnd_reductions > 0);
        }
    }
}

/// Losses in bursts (a channel that, once bad, loses everything for about 10 datagrams),
/// on top of a finite receiver buffer, both ways.
#[test]
fn loss_bursts() {
    let mut sc = Scenario::pair(
        "burst loss",
        buffered(net(0.0, 0.0, 0.02), 64 << 10),
        20_000,
    );
    sc.net.burst_enter = 0.003;
    sc.net.burst_exit = 0.1;
    sc.extra = 1400;
    sc.engine.rcv_buf = 64 << 10;
    // The channel's bad state ends per datagram, not per second: when only backed-off
    // retransmissions flow, a burst can silence both directions for seconds. This test
    // is about delivery, not failure detection.
    sc.engine.peer_timeout = 60 * S;
    let (net, c, _) = seeds(&sc, 10);
    assert!(net.burst_lost > 100 && c.tx_retransmits > 0);
}

/// 1, 10, 100, 1000 and 4000 peers start sending to one receiver with a 256 KiB buffer
/// at the same moment: every message of every peer arrives, checked byte for byte.
#[test]
fn one_to_4000_peers_to_one_receiver() {
    for (senders, messages) in [(1, 4000), (10, 400), (100, 40), (1000, 8), (4000, 4)] {
        let t0 = Instant::now();
        let sc = Scenario::fan_in("fan-in", senders, messages, 256 << 10);
        let run = run_one(&sc, senders as u64, 1000 * S).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.counters().rx_delivered, senders as u64 * messages);
        println!(
            "{senders} peers x {messages} messages to one: {:.3} s virtual, {:.2?} wall, net {:?}, receiver {:?}",
            run.net.now() as f64 / S as f64,
            t0.elapsed(),
            run.net.stats(),
            run.net.engine_ref(0).counters()
        );
    }
}
