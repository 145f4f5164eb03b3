//! The udp transport beyond the conformance suite, over loopback: active messages of
//! every flavour and size up to one datagram, every byte checked (IPv4 and IPv6); a
//! stream of messages far larger than the window (sends return `NoResource` while the
//! receiver does not progress, the sender queues with `pending_add`, and everything
//! arrives in order once it does); a peer that disappears (its interface dropped) is
//! reported failed within the configured timeout, also to a sender that sleeps in
//! `wait`, and with keepalive to an idle one; malformed datagrams from raw sockets
//! (garbage, oversize, bad frames, acknowledgements out of nowhere, a flood of new
//! addresses beyond the implicit-peer bound) are counted in `dropped()` and dropped while
//! good traffic goes on; connect-to-iface: endpoints cost no socket and share a peer.
//!
//! Every wait is bounded by [`WAIT`]; the polling tests take [`testkit::heavy_test`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::pattern;
use ucs::Status;
use uct::udp::{wire, UdpConfig};
use uct::{EpId, Iface, IfaceConfig, IfaceEvent, Outcome, PendingResult};
use uct_rel::packet::{Body, Packet};

const WAIT: Duration = Duration::from_secs(30);
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Received messages: (am id, bytes).
type Inbox = Arc<Mutex<Vec<(u8, Vec<u8>)>>>;

fn take(inbox: &Inbox) -> Vec<(u8, Vec<u8>)> {
    std::mem::take(&mut *inbox.lock().unwrap_or_else(|p| p.into_inner()))
}

fn inbox_len(inbox: &Inbox) -> usize {
    inbox.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// Installs a handler on every id that records into a new inbox.
fn record(i: &mut Iface) -> Inbox {
    let inbox = Inbox::default();
    for id in 0..uct::AM_ID_MAX {
        let sink = inbox.clone();
        i.set_am_handler(
            id,
            Box::new(move |d: &[u8]| {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((id, d.to_vec()))
            }),
        )
        .unwrap();
    }
    inbox
}

fn cfg_with(f: impl FnOnce(&mut UdpConfig)) -> IfaceConfig {
    let mut c = IfaceConfig::default();
    f(&mut c.udp);
    c
}

fn open(ip: IpAddr, cfg: &IfaceConfig) -> Iface {
    Iface::open_udp(ip, cfg).expect("open a udp interface")
}

/// Progresses `ifaces` until `done()` holds; panics with `what` after [`WAIT`].
fn progress_until(ifaces: &mut [&mut Iface], what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        let mut n = 0;
        for i in ifaces.iter_mut() {
            n += i.progress();
        }
        if n == 0 {
            std::thread::yield_now();
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
    }
}

/// Retries `send` (progressing both sides) until it is accepted.
fn send_retry(
    tx: &mut Iface,
    rx: &mut Iface,
    ep: EpId,
    mut send: impl FnMut(&mut Iface, EpId) -> ucs::Result<Outcome<usize>>,
) {
    let start = Instant::now();
    loop {
        match send(tx, ep).expect("send") {
            Outcome::NoResource => {
                tx.progress();
                rx.progress();
                assert!(start.elapsed() < WAIT, "send never accepted");
            }
            _ => return,
        }
    }
}

fn flush(tx: &mut Iface, rx: &mut Iface, ep: EpId) {
    let start = Instant::now();
    while tx.ep_flush(ep, 0).expect("ep_flush") != Outcome::Done(()) {
        tx.progress();
        rx.progress();
        assert!(start.elapsed() < WAIT, "flush never completed");
    }
}

/// Every AM flavour at every interesting size, both directions, every byte checked.
fn every_flavour(ip: IpAddr) {
    let _g = testkit::heavy_test();
    let cfg = IfaceConfig::default();
    let mut a = open(ip, &cfg);
    let mut b = open(ip, &cfg);
    let inbox = record(&mut b);
    let back_inbox = record(&mut a);
    let attr = a.attr().clone();
    // Loopback: 65000-byte datagrams by default (1472 / 1452 on network devices).
    let seg = uct::udp::LOOPBACK_SEG_SIZE;
    assert_eq!(
        attr.max_am_bcopy,
        seg - uct_rel::packet::HEADER_LEN - 2,
        "one datagram of the default size"
    );
    assert_eq!(attr.max_am_short, attr.max_am_bcopy - 8);
    assert!(!attr.caps.contains(uct::Caps::PUT_SHORT) && !attr.caps.contains(uct::Caps::GET_ZCOPY));
    let ep = a.ep_create(&b.address()).unwrap();
    let mut sizes: Vec<usize> = (0..=64).collect();
    sizes.extend([100, 255, 256, 257, 511, 512, 1000, 1023, 1024, 1400]);
    sizes.extend((attr.max_am_bcopy - 9)..=attr.max_am_bcopy);
    let mut want = Vec::new();
    let mut m = 0u64;
    for &len in &sizes {
        if len <= attr.max_am_short {
            let data = pattern::am_vec(len, m, 1, 0);
            let hdr = pattern::am_header(m, 1);
            send_retry(&mut a, &mut b, ep, |i, ep| {
                i.am_short(ep, 1, hdr, &data).map(|o| match o {
                    Outcome::Done(()) => Outcome::Done(0),
                    Outcome::InProgress => Outcome::InProgress,
                    Outcome::NoResource => Outcome::NoResource,
                })
            });
            let mut w = hdr.to_ne_bytes().to_vec();
            w.extend_from_slice(&data);
            want.push((1u8, w));
            m += 1;
        }
        let data = pattern::am_vec(len, m, 1, 1);
        send_retry(&mut a, &mut b, ep, |i, ep| {
            i.am_bcopy(ep, 2, |buf| {
                buf[..len].copy_from_slice(&data);
                len
            })
        });
        want.push((2, data.clone()));
        m += 1;
        // zcopy: a header and the payload split in three pieces.
        let hl = len.min(attr.max_am_hdr).min(7);
        let (h, rest) = data.split_at(hl);
        let (p1, rest) = rest.split_at(rest.len() / 3);
        let (p2, p3) = rest.split_at(rest.len() / 2);
        send_retry(&mut a, &mut b, ep, |i, ep| {
            i.am_zcopy(ep, 3, h, &[p1, p2, p3], 0).map(|o| match o {
                Outcome::Done(()) => Outcome::Done(0),
                Outcome::InProgress => Outcome::InProgress,
                Outcome::NoResource => Outcome::NoResource,
            })
        });
        want.push((3, data));
    }
    // Too large is an error, not a truncation.
    assert_eq!(
        a.am_bcopy(ep, 2, |_| attr.max_am_bcopy + 1).err(),
        Some(Status::InvalidParam)
    );
    assert_eq!(
        a.am_short(ep, 1, 0, &vec![0; attr.max_am_short + 1]).err(),
        Some(Status::InvalidParam)
    );
    let n = want.len();
    progress_until(&mut [&mut a, &mut b], "every message", || {
        inbox_len(&inbox) >= n
    });
    let got = take(&inbox);
    assert_eq!(got.len(), n);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.0, w.0, "am id of message {k}");
        assert!(g.1 == w.1, "bytes of message {k} ({} bytes)", w.1.len());
    }
    flush(&mut a, &mut b, ep);
    // And back, over an endpoint that finds b's implicit peer for a.
    let back = b.ep_create(&a.address()).unwrap();
    let data = pattern::am_vec(attr.max_am_bcopy, 7, 2, 1);
    send_retry(&mut b, &mut a, back, |i, ep| {
        i.am_bcopy(ep, 9, |buf| {
            buf[..data.len()].copy_from_slice(&data);
            data.len()
        })
    });
    progress_until(&mut [&mut a, &mut b], "the reply", || {
        inbox_len(&back_inbox) == 1
    });
    assert!(take(&back_inbox)[0] == (9, data));
    assert_eq!(a.dropped() + b.dropped(), 0);
    let s = b.as_udp().unwrap().stats();
    assert_eq!(
        s.implicit_peers, 1,
        "a's first datagram made b's peer for a"
    );
    assert_eq!(
        b.as_udp().unwrap().peer_count(),
        1,
        "the endpoint back reused it"
    );
}

#[test]
fn every_flavour_ipv4() {
    every_flavour(LOCALHOST);
}

#[test]
fn every_flavour_ipv6() {
    if UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).is_err() {
        testkit::require::skip("ipv6", "no IPv6 loopback (::1) on this host");
        return;
    }
    every_flavour(IpAddr::V6(Ipv6Addr::LOCALHOST));
}

/// A configurable datagram size: bigger active messages; and peers must agree on it.
#[test]
fn seg_size_is_configurable() {
    let _g = testkit::heavy_test();
    let cfg = cfg_with(|u| u.seg_size = Some(9000));
    let mut a = open(LOCALHOST, &cfg);
    let mut b = open(LOCALHOST, &cfg);
    let small = open(LOCALHOST, &IfaceConfig::default());
    assert_eq!(
        a.attr().max_am_bcopy,
        9000 - uct_rel::packet::HEADER_LEN - 2
    );
    let inbox = record(&mut b);
    let ep = a.ep_create(&b.address()).unwrap();
    let data = pattern::am_vec(9000 - uct_rel::packet::HEADER_LEN - 2, 3, 1, 1);
    send_retry(&mut a, &mut b, ep, |i, ep| {
        i.am_bcopy(ep, 5, |buf| {
            buf[..data.len()].copy_from_slice(&data);
            data.len()
        })
    });
    progress_until(&mut [&mut a, &mut b], "a 9000-byte datagram", || {
        inbox_len(&inbox) == 1
    });
    assert!(take(&inbox)[0].1 == data);
    let dev = ucs::sys::host::host_id();
    let dev = uct::shm::address::encode_device_addr(dev);
    assert!(
        !a.is_reachable(&dev, &small.address()),
        "other datagram size"
    );
    assert!(a.is_reachable(&dev, &b.address()));
    assert_eq!(
        a.ep_create(&small.address()).err(),
        Some(Status::Unreachable)
    );
}

/// 100 000 messages through a window of 16: `NoResource` while the receiver sleeps,
/// `pending_add` queues, and everything arrives in order once it progresses.
#[test]
fn window_full_then_recovery() {
    let _g = testkit::heavy_test();
    let cfg = cfg_with(|u| u.window = 16);
    let mut a = open(LOCALHOST, &cfg);
    let mut b = open(LOCALHOST, &cfg);
    let inbox = record(&mut b);
    let ep = a.ep_create(&b.address()).unwrap();
    // Fill the window while b does not progress.
    let mut sent = 0u64;
    while a.am_short(ep, 4, sent, &sent.to_le_bytes()).unwrap() == Outcome::Done(()) {
        sent += 1;
        assert!(
            sent <= 16,
            "more than a window accepted without acknowledgements"
        );
    }
    assert_eq!(sent, 16, "the whole window is usable");
    for _ in 0..100 {
        a.progress();
    }
    assert_eq!(
        a.am_short(ep, 4, sent, &[]).unwrap(),
        Outcome::NoResource,
        "still full: the receiver has not acknowledged"
    );
    assert!(!a.ep_is_flushed(ep).unwrap());
    // Queue the rest of the stream behind a pending callback.
    let total = 100_000u64;
    let next = Arc::new(Mutex::new(sent));
    let n2 = next.clone();
    a.pending_add(
        ep,
        Box::new(move |i: &mut Iface, ep| {
            let mut n = n2.lock().unwrap_or_else(|p| p.into_inner());
            while *n < total {
                match i.am_short(ep, 4, *n, &n.to_le_bytes()) {
                    Ok(Outcome::Done(())) | Ok(Outcome::InProgress) => *n += 1,
                    Ok(Outcome::NoResource) => return PendingResult::Again,
                    Err(e) => panic!("am_short from a pending callback: {e}"),
                }
            }
            PendingResult::Done
        }),
    )
    .expect("pending_add after NoResource");
    assert_eq!(
        a.am_short(ep, 4, 0, &[]).unwrap(),
        Outcome::NoResource,
        "queued behind"
    );
    let mut seen = 0u64;
    let start = Instant::now();
    while seen < total {
        a.progress();
        b.progress();
        for (id, d) in take(&inbox) {
            assert_eq!(id, 4);
            assert_eq!(d[..8], seen.to_ne_bytes(), "order");
            assert_eq!(d[8..], seen.to_le_bytes(), "payload");
            seen += 1;
        }
        assert!(start.elapsed() < WAIT, "stuck at {seen} of {total}");
    }
    flush(&mut a, &mut b, ep);
    let c = a.as_udp().unwrap().engine_counters().clone();
    assert!(c.window_full > 0, "the window filled: {c:?}");
    assert_eq!(a.dropped() + b.dropped(), 0);
    eprintln!(
        "window 16, {total} messages: {:?} elapsed; sender: window_full {}, retransmits {}",
        start.elapsed(),
        c.window_full,
        c.tx_retransmits
    );
}

/// Waits for `EpFailed` on `i` (calling `step` between polls); returns it and when.
fn wait_failed(i: &mut Iface, mut step: impl FnMut(&mut Iface)) -> (Vec<IfaceEvent>, Instant) {
    let start = Instant::now();
    loop {
        step(i);
        let ev = i.take_events();
        if !ev.is_empty() {
            return (ev, Instant::now());
        }
        assert!(start.elapsed() < WAIT, "the peer was never declared failed");
    }
}

/// A peer whose interface is dropped while we have data in flight to it fails our
/// endpoints to it, within the configured timeout (plus one retransmission period), and
/// only those; later sends fail; another peer is unaffected.
#[test]
fn vanished_peer_fails_within_timeout() {
    let _g = testkit::heavy_test();
    let timeout = Duration::from_millis(300);
    let cfg = cfg_with(|u| {
        u.timeout = timeout;
        u.rto = Duration::from_millis(2);
        u.rto_max = Duration::from_millis(50);
    });
    let mut a = open(LOCALHOST, &cfg);
    let mut b = open(LOCALHOST, &cfg);
    let mut c = open(LOCALHOST, &cfg);
    let c_inbox = record(&mut c);
    let ep_b = a.ep_create(&b.address()).unwrap();
    let ep_b2 = a.ep_create(&b.address()).unwrap();
    let ep_c = a.ep_create(&c.address()).unwrap();
    // Both peers are alive at first.
    assert!(a.am_short(ep_b, 1, 1, b"x").unwrap().is_done());
    flush(&mut a, &mut b, ep_b);
    drop(b);
    let dropped_at = Instant::now();
    assert!(a.am_short(ep_b, 1, 2, b"lost").unwrap().is_done());
    let (ev, at) = wait_failed(&mut a, |a| {
        a.progress();
        c.progress();
    });
    let took = at - dropped_at;
    let mut ev = ev;
    ev.sort_by_key(|e| match e {
        IfaceEvent::EpFailed(ep, _) => ep.0,
        IfaceEvent::PeerClosed(_) => u32::MAX,
    });
    assert_eq!(
        ev,
        vec![
            IfaceEvent::EpFailed(ep_b, Status::EndpointTimeout),
            IfaceEvent::EpFailed(ep_b2, Status::EndpointTimeout)
        ],
        "both endpoints to the vanished peer, nothing else"
    );
    assert!(
        took >= timeout - Duration::from_millis(5) && took < timeout + Duration::from_millis(200),
        "declared failed after {took:?} (timeout {timeout:?})"
    );
    assert_eq!(
        a.am_short(ep_b, 1, 3, b"y").err(),
        Some(Status::EndpointTimeout)
    );
    assert_eq!(a.ep_flush(ep_b, 0).err(), Some(Status::EndpointTimeout));
    // The other peer still works, and the interface flush ignores the failed one.
    assert!(a.am_short(ep_c, 2, 4, b"alive").unwrap().is_done());
    progress_until(&mut [&mut a, &mut c], "the live peer's message", || {
        inbox_len(&c_inbox) == 1
    });
    let start = Instant::now();
    while a.flush(0).unwrap() != Outcome::Done(()) {
        a.progress();
        c.progress();
        assert!(start.elapsed() < WAIT);
    }
    a.ep_destroy(ep_b).unwrap();
    a.ep_destroy(ep_b2).unwrap();
    eprintln!("vanished peer declared failed after {took:?} (timeout {timeout:?})");
}

/// The same with a sender that sleeps in `Iface::wait`: the timer in the event set wakes
/// it for retransmissions and for the failure, with no busy polling.
#[test]
fn sleeping_sender_sees_failure() {
    let _g = testkit::heavy_test();
    let timeout = Duration::from_millis(200);
    let cfg = cfg_with(|u| u.timeout = timeout);
    let mut a = open(LOCALHOST, &cfg);
    let b = open(LOCALHOST, &cfg);
    let ep = a.ep_create(&b.address()).unwrap();
    drop(b);
    assert!(a.am_short(ep, 1, 1, b"x").unwrap().is_done());
    let start = Instant::now();
    let mut wakeups = 0;
    let (ev, at) = wait_failed(&mut a, |a| {
        a.wait(1000).expect("wait");
        wakeups += 1;
        a.progress();
    });
    let took = at - start;
    assert_eq!(ev, vec![IfaceEvent::EpFailed(ep, Status::EndpointTimeout)]);
    assert!(took < timeout + Duration::from_millis(200), "{took:?}");
    // Retransmissions back off (5 ms doubling up to 100 ms): a handful of wake-ups.
    assert!(wakeups < 50, "{wakeups} wake-ups: busy waiting?");
    // Nothing left to do: arming succeeds and a wait times out.
    assert!(a.arm().is_ok());
    assert!(!a.wait(20).unwrap());
    eprintln!("sleeping sender: failed after {took:?} with {wakeups} wake-ups");
}

/// With keepalive, a peer we send nothing to is still found dead.
#[test]
fn keepalive_finds_idle_dead_peer() {
    let _g = testkit::heavy_test();
    let cfg = cfg_with(|u| {
        u.timeout = Duration::from_millis(200);
        u.keepalive = Some(Duration::from_millis(50));
    });
    let mut a = open(LOCALHOST, &cfg);
    let mut b = open(LOCALHOST, &cfg);
    let ep = a.ep_create(&b.address()).unwrap();
    assert!(a.am_short(ep, 1, 1, b"x").unwrap().is_done());
    flush(&mut a, &mut b, ep);
    // While b is alive (and progressed), probes are answered.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(400) {
        a.wait(5).unwrap();
        a.progress();
        b.progress();
    }
    assert!(a.take_events().is_empty(), "a live idle peer must not fail");
    assert!(a.as_udp().unwrap().engine_counters().tx_probes > 0);
    drop(b);
    let start = Instant::now();
    let (ev, _) = wait_failed(&mut a, |a| {
        a.wait(1000).unwrap();
        a.progress();
    });
    assert_eq!(ev, vec![IfaceEvent::EpFailed(ep, Status::EndpointTimeout)]);
    assert!(
        start.elapsed() < Duration::from_millis(600),
        "{:?}",
        start.elapsed()
    );
}

/// A well-formed data packet as a peer would send it, carrying `msg`.
fn data_packet(session: u32, seq: u32, msg: &[u8]) -> Vec<u8> {
    let p = Packet {
        session,
        ack: 0,
        credit: 1 << 20,
        body: Body::Data {
            seq,
            ack_req: false,
            payload: msg,
        },
    };
    let mut b = vec![0; p.encoded_len()];
    p.encode_into(&mut b).unwrap();
    b
}

/// Raw sockets throw garbage at an interface while a real peer streams to it: every bad
/// datagram is counted and dropped, and the stream arrives intact and in order.
#[test]
fn malformed_datagrams_are_counted_and_dropped() {
    let _g = testkit::heavy_test();
    let cfg = cfg_with(|u| u.max_implicit_peers = 8);
    let mut a = open(LOCALHOST, &cfg);
    let mut b = open(LOCALHOST, &cfg);
    let inbox = record(&mut b);
    let ep = a.ep_create(&b.address()).unwrap();
    let target: SocketAddr = wire::decode_addr(&b.address()).unwrap().0;
    let junk = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let seg = b.as_udp().unwrap().seg_size();
    let mut rng = 0x1234_5678u64;
    let mut expected_dropped = 0u64;
    let total = 3000u64;
    let mut sent = 0u64;
    let mut seen = 0u64;
    let start = Instant::now();
    while seen < total {
        if sent < total {
            let data = pattern::am_vec((sent % 1400) as usize, sent, 1, 1);
            if a.am_bcopy(ep, 6, |buf| {
                buf[..data.len()].copy_from_slice(&data);
                data.len()
            })
            .unwrap()
            .is_done()
            {
                sent += 1;
            }
        }
        if sent % 10 == 0 && expected_dropped < 400 {
            // Random bytes (a valid header is vanishingly unlikely), and an oversize datagram.
            rng = pattern::mix64(rng);
            let len = (rng % 200) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| pattern::mix64(rng ^ i as u64) as u8)
                .collect();
            junk.send_to(&bytes, target).unwrap();
            junk.send_to(&vec![1u8; seg + 1], target).unwrap();
            // A well-formed acknowledgement out of nowhere.
            let ack = Packet {
                session: 1,
                ack: 5,
                credit: 1 << 20,
                body: Body::Ack { ack_req: true },
            };
            let mut b = [0u8; uct_rel::packet::HEADER_LEN];
            ack.encode_into(&mut b).unwrap();
            junk.send_to(&b, target).unwrap();
            expected_dropped += 3;
        }
        a.progress();
        b.progress();
        for (id, d) in take(&inbox) {
            assert_eq!(id, 6);
            assert_eq!(pattern::check_am(&d, seen, 1, 1), None, "message {seen}");
            assert_eq!(d.len(), (seen % 1400) as usize);
            seen += 1;
        }
        assert!(start.elapsed() < WAIT, "stuck at {seen}");
    }
    let start = Instant::now();
    while b.dropped() < expected_dropped {
        a.progress();
        b.progress();
        assert!(start.elapsed() < WAIT, "junk not all read");
    }
    let s = b.as_udp().unwrap().stats().clone();
    assert_eq!(b.dropped(), expected_dropped, "{s:?}");
    assert_eq!(s.rx_oversize, expected_dropped / 3);
    assert_eq!(s.rx_junk + s.rx_stray, 2 * expected_dropped / 3);
    assert_eq!(s.implicit_peers, 1, "junk made no peer");

    // A data packet with a frame the transport rejects (am id 40, a reserved byte, no
    // header at all): it makes an implicit peer, is acknowledged like any message, and
    // is dropped at delivery.
    let before = b.dropped();
    for (seq, frame) in [&[40u8, 0][..], &[1, 1, 7], &[]].into_iter().enumerate() {
        junk.send_to(&data_packet(77, seq as u32, frame), target)
            .unwrap();
    }
    // The same peer now sends garbage: the engine counts it malformed.
    junk.send_to(b"\x01\x00\x00\x05hello", target).unwrap();
    // And a good message from it is delivered.
    let mut good = wire::frame_header(3).to_vec();
    good.extend_from_slice(b"ok");
    junk.send_to(&data_packet(77, 3, &good), target).unwrap();
    progress_until(&mut [&mut b], "the raw peer's good message", || {
        inbox_len(&inbox) == 1
    });
    assert_eq!(take(&inbox), vec![(3, b"ok".to_vec())]);
    assert_eq!(
        b.dropped() - before,
        4,
        "three bad frames and one malformed packet"
    );
    assert_eq!(b.as_udp().unwrap().engine_counters().rx_malformed, 1);
    // Its acknowledgement comes back to the raw socket (after the ack delay).
    junk.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let n = loop {
        b.progress();
        if let Ok((n, _)) = junk.recv_from(&mut buf) {
            break n;
        }
        assert!(start.elapsed() < WAIT, "no acknowledgement");
    };
    let ack = Packet::decode(&buf[..n]).expect("a well-formed packet");
    assert_eq!(ack.ack, 4, "all four messages acknowledged");

    // New addresses beyond the implicit-peer bound are refused and counted.
    let peers_before = b.as_udp().unwrap().peer_count();
    let socks: Vec<UdpSocket> = (0..12)
        .map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
        .collect();
    for s in &socks {
        s.send_to(&data_packet(5, 0, &good), target).unwrap();
    }
    let limit = 8;
    let start = Instant::now();
    loop {
        b.progress();
        let s = b.as_udp().unwrap().stats();
        if s.rx_peers_refused + s.implicit_peers >= 12 + 2 {
            break;
        }
        assert!(start.elapsed() < WAIT, "flood not all read");
    }
    let s = b.as_udp().unwrap().stats();
    // a's and the raw peer are referenced by no endpoint of b: they count too.
    assert_eq!(b.as_udp().unwrap().peer_count(), limit, "peers capped");
    assert_eq!(s.rx_peers_refused as usize, 12 - (limit - peers_before));
    // The stream from a still works.
    let data = pattern::am_vec(1000, 1, 1, 1);
    send_retry(&mut a, &mut b, ep, |i, ep| {
        i.am_bcopy(ep, 6, |buf| {
            buf[..1000].copy_from_slice(&data);
            1000
        })
    });
    let mut got = Vec::new();
    let start = Instant::now();
    while !got.iter().any(|(id, _): &(u8, Vec<u8>)| *id == 6) {
        a.progress();
        b.progress();
        got.extend(take(&inbox));
        assert!(start.elapsed() < WAIT, "the stream stopped");
    }
    // The flood's accepted peers delivered their message too, the refused ones not.
    let ok = got.iter().filter(|(id, d)| *id == 3 && d == b"ok").count();
    assert_eq!(ok, limit - peers_before);
    assert!(got.iter().any(|(id, d)| *id == 6 && *d == data));
    assert_eq!(a.dropped(), 0);
}

/// Connect-to-iface: a thousand endpoints to a hundred interfaces take no socket or
/// descriptor; endpoints to the same address share one peer.
#[test]
fn endpoints_cost_no_descriptor() {
    let _g = testkit::heavy_test();
    let cfg = IfaceConfig::default();
    let mut a = open(LOCALHOST, &cfg);
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let seg = a.as_udp().unwrap().seg_size() as u16;
    let targets: Vec<Vec<u8>> = (0..100)
        .map(|i| wire::encode_addr(&SocketAddr::from(([127, 0, 0, 1], 20000 + i)), seg))
        .collect();
    let before = fds();
    let eps: Vec<EpId> = (0..1000)
        .map(|k| a.ep_create(&targets[k % 100]).unwrap())
        .collect();
    assert_eq!(fds(), before, "no descriptor per endpoint");
    assert_eq!(a.ep_count(), 1000);
    assert_eq!(a.as_udp().unwrap().peer_count(), 100);
    for ep in eps {
        a.ep_destroy(ep).unwrap();
    }
    assert_eq!(a.ep_count(), 0);
    // Nothing was sent: nothing to flush, nothing armed.
    assert_eq!(a.flush(0).unwrap(), Outcome::Done(()));
    assert!(a.arm().is_ok());
}
