//! Fuzz target: two reliability engines (`uct_rel::Engine`) joined by a network the input
//! controls. The input is a program: send a message, deliver / drop / duplicate / reorder
//! the packet at the head of a direction, corrupt it, inject raw bytes, or let time pass.
//! Nothing may panic (debug assertions are on in `fuzz/smoke`), and while the network only
//! loses, duplicates and reorders (no corrupted or injected bytes: the protocol relies on
//! the UDP checksum against corruption), every message is delivered at most once, in
//! order, with its bytes intact; a peer fails only after the configured silence.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;
use uct_rel::{Config, Engine, Event, PeerId};

const US: u64 = 1_000;
const TIMEOUT: u64 = 50_000 * US;

struct Net {
    e: [Engine; 2],
    /// Packets in flight to node i.
    q: [VecDeque<Vec<u8>>; 2],
    now: u64,
    sent: [u64; 2],
    got: [u64; 2],
    /// Corrupted or injected bytes were seen: contents are no longer checked.
    tainted: bool,
    failed: [bool; 2],
}

fn message(n: u64, len: usize) -> Vec<u8> {
    let mut m = n.to_le_bytes().to_vec();
    m.extend((0..len).map(|i| (n as u8).wrapping_mul(31).wrapping_add(i as u8)));
    m
}

impl Net {
    fn pump(&mut self) {
        for x in 0..2 {
            while let Some(t) = self.e[x].poll_transmit(self.now) {
                assert_eq!(t.peer, PeerId(0));
                if self.q[1 - x].len() < 4096 {
                    self.q[1 - x].push_back(t.bytes.to_vec());
                }
            }
            while let Some(ev) = self.e[x].poll_event() {
                match ev {
                    Event::Deliver { peer, payload } => {
                        assert_eq!(peer, PeerId(0));
                        if !self.tainted {
                            let want = message(self.got[x], payload.len().saturating_sub(8));
                            assert_eq!(payload, &want[..], "message {} to node {x}", self.got[x]);
                            assert!(self.got[x] < self.sent[1 - x], "delivered more than sent");
                        }
                        self.got[x] += 1;
                    }
                    Event::PeerFailed(peer) => {
                        assert_eq!(peer, PeerId(0));
                        self.failed[x] = true;
                    }
                }
            }
        }
    }

    fn deliver(&mut self, x: usize, bytes: &[u8]) {
        self.e[x].on_packet(PeerId(0), bytes, self.now);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut it = data.iter().copied();
    let mut next = || it.next();
    let Some(c) = next() else { return };
    let cfg = Config {
        session: 0,
        window: 1 + u32::from(c % 16),
        max_payload: 64,
        ack_delay: if c & 0x10 != 0 { 0 } else { 200 * US },
        ack_every: 1 + u32::from(c >> 5),
        initial_rto: 2_000 * US,
        max_rto: 20_000 * US,
        nak_interval: 500 * US,
        peer_timeout: TIMEOUT,
        keepalive: (c & 0x80 != 0).then_some(5_000 * US),
        tx_pool_packets: 24,
        rx_pool_packets: 24,
        max_peers: 4,
        ..Config::default()
    };
    let mk = |s: u32| {
        let mut e = Engine::new(Config {
            session: s,
            ..cfg.clone()
        })
        .unwrap();
        e.add_peer(PeerId(0), 0).unwrap();
        e
    };
    let mut n = Net {
        e: [mk(1), mk(2)],
        q: [VecDeque::new(), VecDeque::new()],
        now: 0,
        sent: [0; 2],
        got: [0; 2],
        tainted: false,
        failed: [false; 2],
    };
    while let Some(op) = next() {
        let x = usize::from((op >> 3) & 1);
        match op % 8 {
            0 => {
                let len = usize::from(op >> 4) * 3;
                let m = message(n.sent[x], len);
                if n.e[x].send(PeerId(0), &m, n.now).is_ok() {
                    n.sent[x] += 1;
                }
            }
            1 => {
                if let Some(p) = n.q[x].pop_front() {
                    n.deliver(x, &p);
                }
            }
            2 => {
                n.q[x].pop_front();
            }
            3 => {
                if let Some(p) = n.q[x].front().cloned() {
                    n.q[x].push_back(p);
                }
            }
            4 => {
                if let Some(p) = n.q[x].pop_front() {
                    n.q[x].push_back(p);
                }
            }
            5 => {
                let (Some(at), Some(v)) = (next(), next()) else {
                    break;
                };
                if let Some(mut p) = n.q[x].pop_front() {
                    let i = usize::from(at) % p.len().max(1);
                    if let Some(b) = p.get_mut(i) {
                        *b ^= v | 1;
                    }
                    n.tainted = true;
                    n.deliver(x, &p);
                }
            }
            6 => {
                let Some(t) = next() else { break };
                n.now += u64::from(t) * 100 * US;
                for e in &mut n.e {
                    if e.next_timeout().is_some_and(|d| d <= n.now) {
                        e.on_timeout(n.now);
                    }
                }
            }
            _ => {
                let Some(len) = next() else { break };
                let raw: Vec<u8> = (0..len % 96).filter_map(|_| next()).collect();
                n.tainted = true;
                n.deliver(x, &raw);
            }
        }
        n.pump();
    }
    // Let the network run clean: everything sent is delivered unless a peer failed.
    if n.tainted {
        return;
    }
    for _ in 0..2000 {
        for x in 0..2 {
            while let Some(p) = n.q[x].pop_front() {
                n.deliver(x, &p);
                n.pump();
            }
        }
        if n.got[0] == n.sent[1] && n.got[1] == n.sent[0] {
            break;
        }
        n.now += 1_000 * US;
        for e in &mut n.e {
            if e.next_timeout().is_some_and(|d| d <= n.now) {
                e.on_timeout(n.now);
            }
        }
        n.pump();
        if n.failed.iter().any(|f| *f) {
            return;
        }
    }
    assert!(
        n.failed.iter().any(|f| *f) || (n.got[0] == n.sent[1] && n.got[1] == n.sent[0]),
        "not everything delivered: sent {:?} got {:?}",
        n.sent,
        n.got
    );
});
