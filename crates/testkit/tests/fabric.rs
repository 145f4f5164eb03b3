//! The fabric's fault model at the transport level (`testkit::Fabric`, uct's `fabric`
//! module): losses, duplicates, delays and reordering are recovered into in-order,
//! exactly-once delivery; a run is a function of its seed; a killed node fails its own
//! endpoints at once (and reports the peers that only sent to it) and its peers' after
//! the timeout of virtual time, including a peer that only sent to it; a filled lane says NoResource until released, at the step asked.

use std::sync::{Arc, Mutex};
use testkit::fabric::{Fabric, FabricConfig, FabricStats, Faults, NodeId};
use ucs::Status;
use uct::{EpId, Iface, IfaceConfig, IfaceEvent, Outcome, PendingResult, Transport};

type Inbox = Arc<Mutex<Vec<Vec<u8>>>>;

/// Two interfaces of a new network, an endpoint from the first to the second, and the
/// second's inbox (handler of AM id 3).
fn pair(seed: u64, cfg: FabricConfig) -> (Fabric, Iface, Iface, EpId, Inbox) {
    let fab = Fabric::with_config(seed, cfg);
    fab.enter();
    let icfg = IfaceConfig::default();
    let mut a = Iface::open(Transport::Fabric, &icfg).unwrap();
    let mut b = Iface::open(Transport::Fabric, &icfg).unwrap();
    assert_eq!(a.device(), fab.device());
    let ep = a.ep_create(&b.address()).unwrap();
    let inbox = Inbox::default();
    let i = inbox.clone();
    b.set_am_handler(
        3,
        Box::new(move |d: &[u8]| i.lock().unwrap().push(d.to_vec())),
    )
    .unwrap();
    (fab, a, b, ep, inbox)
}

/// Sends `n` numbered messages from a to b under `faults`, progressing both and moving
/// the clock; returns what b got and the network's statistics.
fn transfer(seed: u64, faults: Faults, n: u32) -> (Vec<Vec<u8>>, FabricStats) {
    let (fab, mut a, mut b, ep, inbox) = pair(seed, FabricConfig::default());
    fab.set_faults(faults);
    let mut next = 0u32;
    for _ in 0..200_000 {
        if next < n {
            match a.am_bcopy(ep, 3, |buf| {
                buf[..4].copy_from_slice(&next.to_le_bytes());
                buf[4..100].fill(next as u8);
                100
            }) {
                Ok(Outcome::Done(100)) => next += 1,
                Ok(Outcome::NoResource) => {}
                other => panic!("seed {seed:#x}: send {next}: {other:?}"),
            }
        }
        a.progress();
        b.progress();
        fab.advance(100_000);
        if next == n && inbox.lock().unwrap().len() == n as usize && a.ep_is_flushed(ep) == Ok(true)
        {
            break;
        }
    }
    let got = inbox.lock().unwrap().clone();
    (got, fab.stats())
}

#[test]
fn faults_are_recovered_in_order_exactly_once() {
    for seed in 1..6u64 {
        let faults = Faults {
            drop: 0.2,
            dup: 0.2,
            delay: (0, 2_000_000),
            reorder: 0.3,
            reorder_ns: 3_000_000,
        };
        let (got, st) = transfer(seed, faults, 300);
        assert_eq!(got.len(), 300, "seed {seed:#x}: {st:?}");
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m[..4], (i as u32).to_le_bytes(), "seed {seed:#x}: order");
            assert!(m[4..].iter().all(|&x| x == i as u8), "seed {seed:#x}: data");
        }
        assert!(
            st.dropped > 0 && st.duplicated > 0 && st.reordered > 0,
            "{st:?}"
        );
    }
}

#[test]
fn a_run_is_a_function_of_its_seed() {
    let faults = Faults {
        drop: 0.1,
        dup: 0.1,
        delay: (0, 1_000_000),
        reorder: 0.2,
        reorder_ns: 1_000_000,
    };
    let (g1, s1) = transfer(42, faults, 100);
    let (g2, s2) = transfer(42, faults, 100);
    assert_eq!((g1, s1), (g2, s2));
    let (_, s3) = transfer(43, faults, 100);
    assert_ne!(s1, s3, "another seed, another run");
}

/// Progresses `ifaces` and moves the clock until `done`, at most `rounds` times.
fn settle(fab: &Fabric, ifaces: &mut [&mut Iface], rounds: u32, mut done: impl FnMut() -> bool) {
    for _ in 0..rounds {
        if done() {
            return;
        }
        for i in ifaces.iter_mut() {
            i.progress();
        }
        fab.advance(250_000);
    }
    assert!(done(), "not within {rounds} rounds");
}

/// Progresses `i` and moves the clock until it has connection events (bounded).
fn events_of(fab: &Fabric, i: &mut Iface) -> Vec<IfaceEvent> {
    for _ in 0..2000 {
        i.progress();
        let ev = i.take_events();
        if !ev.is_empty() {
            return ev;
        }
        fab.advance(250_000);
    }
    panic!("no event within 2000 rounds");
}

#[test]
fn a_killed_node_fails_both_sides() {
    let (fab, mut a, mut b, ep, inbox) = pair(7, FabricConfig::default());
    let eb = b.ep_create(&a.address()).unwrap();
    assert_eq!(a.am_short(ep, 3, 1, b"x"), Ok(Outcome::Done(())));
    settle(&fab, &mut [&mut a, &mut b], 10, || {
        inbox.lock().unwrap().len() == 1
    });
    let nb = fab.last_node().unwrap();
    assert!(fab.is_alive(nb));
    fab.kill(nb);
    assert!(!fab.is_alive(nb));
    // The dead side: its endpoints fail at once.
    assert_eq!(b.am_short(eb, 3, 1, b"y"), Err(Status::ConnectionReset));
    assert_eq!(
        b.take_events(),
        vec![IfaceEvent::EpFailed(eb, Status::ConnectionReset)]
    );
    // The live side: what it sends is never acknowledged, and after the peer timeout
    // of virtual time its endpoint fails.
    assert_eq!(a.am_short(ep, 3, 2, b"z"), Ok(Outcome::Done(())));
    let t0 = fab.now();
    let events = events_of(&fab, &mut a);
    assert_eq!(
        events,
        vec![IfaceEvent::EpFailed(ep, Status::EndpointTimeout)]
    );
    assert!(fab.now() - t0 >= FabricConfig::default().peer_timeout);
    assert_eq!(a.am_short(ep, 3, 3, b"w"), Err(Status::EndpointTimeout));
    assert_eq!(a.ep_is_flushed(ep), Err(Status::EndpointTimeout));
    assert_eq!(
        inbox.lock().unwrap().len(),
        1,
        "nothing reaches a dead node"
    );
}

#[test]
fn a_dead_sender_is_reported_by_address() {
    // b only receives from a (no endpoint to it): a's death shows as PeerClosed(a).
    let (fab, mut a, mut b, ep, inbox) = pair(8, FabricConfig::default());
    assert_eq!(a.am_short(ep, 3, 1, b"x"), Ok(Outcome::Done(())));
    settle(&fab, &mut [&mut a, &mut b], 10, || {
        inbox.lock().unwrap().len() == 1
    });
    fab.kill(NodeId(0));
    let events = events_of(&fab, &mut b);
    assert_eq!(events, vec![IfaceEvent::PeerClosed(a.address())]);
}

#[test]
fn a_dead_receiver_reports_its_senders_by_address() {
    // b only receives from a (no endpoint to it) and is killed: it loses a as well, and
    // says so by address at its next progress (what it half received from a is void).
    let (fab, mut a, mut b, ep, inbox) = pair(10, FabricConfig::default());
    assert_eq!(a.am_short(ep, 3, 1, b"x"), Ok(Outcome::Done(())));
    settle(&fab, &mut [&mut a, &mut b], 10, || {
        inbox.lock().unwrap().len() == 1
    });
    assert_eq!(b.take_events(), vec![]);
    fab.kill(NodeId(1));
    b.progress();
    assert_eq!(b.take_events(), vec![IfaceEvent::PeerClosed(a.address())]);
    // Once: a later progress reports nothing more.
    b.progress();
    assert_eq!(b.take_events(), vec![]);
}

#[test]
fn a_filled_lane_says_no_resource_until_released() {
    let (fab, mut a, mut b, ep, inbox) = pair(9, FabricConfig::default());
    let na = NodeId(0);
    fab.fill(na);
    assert_eq!(a.am_short(ep, 3, 1, b"x"), Ok(Outcome::NoResource));
    let sent = Arc::new(Mutex::new(0));
    let s = sent.clone();
    a.pending_add(
        ep,
        Box::new(move |i: &mut Iface, ep| match i.am_short(ep, 3, 1, b"p") {
            Ok(Outcome::Done(())) => {
                *s.lock().unwrap() += 1;
                PendingResult::Done
            }
            _ => PendingResult::Again,
        }),
    )
    .expect("pending_add on a full lane");
    for _ in 0..10 {
        a.progress();
        b.progress();
        fab.advance(1_000_000);
    }
    assert_eq!(*sent.lock().unwrap(), 0);
    assert!(fab.stats().refused_full > 0);
    fab.release(na);
    settle(&fab, &mut [&mut a, &mut b], 10, || {
        inbox.lock().unwrap().len() == 1
    });
    assert_eq!(*sent.lock().unwrap(), 1);
}

#[test]
fn hooks_fire_at_their_step() {
    let (fab, mut a, mut b, ep, inbox) = pair(10, FabricConfig::default());
    let base = fab.steps();
    fab.fill_at_step(NodeId(0), base + 3, 2_000_000);
    fab.kill_at_step(NodeId(1), base + 6);
    let mut outcomes = Vec::new();
    for i in 0..6u64 {
        outcomes.push(a.am_short(ep, 3, i, b""));
    }
    assert_eq!(fab.steps(), base + 6);
    assert_eq!(
        outcomes,
        vec![
            Ok(Outcome::Done(())),
            Ok(Outcome::Done(())),
            Ok(Outcome::NoResource),
            Ok(Outcome::NoResource),
            Ok(Outcome::NoResource),
            Ok(Outcome::NoResource),
        ]
    );
    assert!(!fab.is_alive(NodeId(1)), "killed at step 6");
    // The fill ends with the hold time.
    fab.advance(2_000_000);
    assert_eq!(a.am_short(ep, 3, 9, b""), Ok(Outcome::Done(())));
    a.progress();
    b.progress();
    // b died before it progressed: the two messages sent before were lost with it.
    assert!(
        inbox.lock().unwrap().is_empty(),
        "a dead node receives nothing"
    );
}

#[test]
fn the_automatic_tick_moves_the_clock_at_every_progress() {
    let (fab, mut a, mut b, ep, inbox) = pair(11, FabricConfig::default());
    fab.set_faults(Faults {
        delay: (1_000_000, 1_000_000),
        ..Faults::default()
    });
    assert_eq!(a.am_short(ep, 3, 1, b"x"), Ok(Outcome::Done(())));
    // Without the tick, progress alone never lets the 1 ms transit pass.
    for _ in 0..100 {
        a.progress();
        b.progress();
    }
    assert!(inbox.lock().unwrap().is_empty());
    assert_eq!(fab.now(), 0);
    fab.set_auto_tick(100_000);
    for _ in 0..20 {
        a.progress();
        b.progress();
    }
    assert_eq!(inbox.lock().unwrap().len(), 1);
    assert_eq!(fab.now(), 40 * 100_000);
}
