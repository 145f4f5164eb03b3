//! The tcp transport beyond the conformance suite (which covers its contract on the
//! default device): IPv6 loopback; two interfaces that connect to each other at the same
//! time and stream large active messages both ways from two threads without a hang; a
//! receiver that stops progressing (the sender sees `NoResource`, queues with
//! `pending_add`, and recovers with every byte intact, in order); malformed peers (raw
//! sockets writing a bad handshake or bad frame headers) are dropped and counted while the
//! other connections go on; a peer that closes or goes away shows up in `take_events` as
//! `PeerClosed` or `EpFailed`, and a refused connection as `EpFailed(_, Unreachable)`;
//! `put_zcopy` lands in registered memory and puts the receiver must refuse write nothing.
//!
//! Every wait is bounded by [`WAIT`]; the tests take [`testkit::heavy_test`] because they
//! poll (the streaming test with two threads).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::pattern;
use ucs::Status;
use uct::tcp::wire;
use uct::{EpId, Iface, IfaceConfig, IfaceEvent, Outcome, PendingResult, Transport};

const WAIT: Duration = Duration::from_secs(30);
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Offset of the interface address in a handshake.
const HANDSHAKE_ADDR: usize = wire::HANDSHAKE_FIXED;

/// Received messages: (am id, bytes).
type Inbox = Arc<Mutex<Vec<(u8, Vec<u8>)>>>;

fn inbox_len(inbox: &Inbox) -> usize {
    inbox.lock().unwrap_or_else(|p| p.into_inner()).len()
}

fn take(inbox: &Inbox) -> Vec<(u8, Vec<u8>)> {
    std::mem::take(&mut *inbox.lock().unwrap_or_else(|p| p.into_inner()))
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

fn open(ip: IpAddr) -> Iface {
    Iface::open_tcp(ip, &IfaceConfig::default()).expect("open a tcp interface")
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

/// Sends an am_short from `tx` on `ep`, progressing both until it is accepted.
fn short(tx: &mut Iface, rx: &mut Iface, ep: EpId, id: u8, hdr: u64, payload: &[u8]) {
    let start = Instant::now();
    loop {
        match tx.am_short(ep, id, hdr, payload).expect("am_short") {
            Outcome::NoResource => {
                tx.progress();
                rx.progress();
            }
            _ => return,
        }
        assert!(start.elapsed() < WAIT, "am_short stayed NoResource");
    }
}

/// Progresses `ifaces` until `from` has reported an event matching `want`; returns all
/// events it reported.
fn wait_event(
    from: &mut Iface,
    others: &mut [&mut Iface],
    what: &str,
    want: impl Fn(&IfaceEvent) -> bool,
) -> Vec<IfaceEvent> {
    let start = Instant::now();
    let mut all = Vec::new();
    loop {
        from.progress();
        for o in others.iter_mut() {
            o.progress();
        }
        let ev = from.take_events();
        let hit = ev.iter().any(&want);
        all.extend(ev);
        if hit {
            return all;
        }
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {what}; events so far: {all:?}"
        );
        std::thread::yield_now();
    }
}

// ---------------------------------------------------------------------------------------

/// Interfaces on `::1` (opened with `Iface::open_tcp`, since `Transport::devices` picks
/// IPv4 for `lo`): the address says IPv6, reachability follows the address family, and
/// active messages of every flavour and size arrive intact.
#[test]
fn ipv6_loopback() {
    let _serial = testkit::heavy_test();
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    if std::net::TcpListener::bind((v6, 0)).is_err() {
        testkit::require::skip("ipv6", "no IPv6 loopback (::1) on this host");
        return;
    }
    let mut a = open(v6);
    let mut b = open(v6);
    assert_eq!(a.transport(), Transport::Tcp);
    assert_eq!(a.device(), "lo", "the device of ::1");
    let b_addr = wire::decode_addr(&b.address()).expect("own address decodes");
    assert_eq!(b_addr.ip(), v6);
    assert_eq!(b.address().len(), b.attr().iface_addr_len);

    let v4 = open(LOCALHOST);
    let dev = a.device_address();
    assert!(a.is_reachable(&dev, &b.address()), "::1 from ::1");
    assert!(!a.is_reachable(&dev, &v4.address()), "127.0.0.1 from ::1");
    assert!(!v4.is_reachable(&dev, &b.address()), "::1 from 127.0.0.1");

    let inbox = record(&mut b);
    let ep = a.ep_create(&b.address()).expect("ep_create over IPv6");
    let attr = a.attr().clone();
    let mut sent = 0;
    for (k, &len) in [0, 1, 100, attr.max_am_short].iter().enumerate() {
        let p = pattern::am_vec(len, k as u64, 6, 0);
        short(&mut a, &mut b, ep, 1, k as u64, &p);
        sent += 1;
    }
    for (k, &len) in [0usize, 1, 4096, attr.max_am_bcopy].iter().enumerate() {
        let p = pattern::am_vec(len, k as u64, 6, 1);
        let start = Instant::now();
        while !a
            .am_bcopy(ep, 2, |b| {
                b[..len].copy_from_slice(&p);
                len
            })
            .expect("am_bcopy")
            .is_done()
        {
            a.progress();
            b.progress();
            assert!(start.elapsed() < WAIT);
        }
        sent += 1;
    }
    let big = pattern::am_vec(attr.max_am_zcopy, 9, 6, 2);
    let (h, rest) = big.split_at(attr.max_am_hdr);
    let (x, y) = rest.split_at(rest.len() / 3);
    let start = Instant::now();
    while !a
        .am_zcopy(ep, 3, h, &[x, &[], y], 0)
        .expect("am_zcopy")
        .is_done()
    {
        a.progress();
        b.progress();
        assert!(start.elapsed() < WAIT);
    }
    sent += 1;
    progress_until(&mut [&mut a, &mut b], "the IPv6 messages", || {
        inbox_len(&inbox) >= sent
    });
    let got = take(&inbox);
    assert_eq!(got.len(), sent);
    for (k, (id, d)) in got[..4].iter().enumerate() {
        assert_eq!(*id, 1);
        assert_eq!(d[..8], (k as u64).to_ne_bytes());
        assert_eq!(
            pattern::check_am(&d[8..], k as u64, 6, 0),
            None,
            "short {k}"
        );
    }
    for (k, (id, d)) in got[4..8].iter().enumerate() {
        assert_eq!(*id, 2);
        assert_eq!(pattern::check_am(d, k as u64, 6, 1), None, "bcopy {k}");
    }
    assert_eq!(got[8].0, 3);
    assert_eq!(got[8].1, big, "zcopy over IPv6");
    assert!(b.take_events().is_empty());
}

// ---------------------------------------------------------------------------------------

/// Size of message `m` of the streaming test: small and large ones mixed, up to `max`.
fn stream_len(m: u64, max: usize) -> usize {
    [0, 17, 200, 4096, max - 8, 30_000, max / 2][(m % 7) as usize].min(max - 8)
}

/// One side of the streaming test: sends `n` messages to `ep` (bcopy, zcopy and short by
/// turns; 8 bytes of sequence number, then a pattern) while receiving and checking the
/// peer's `n`, until both are complete and the endpoint is flushed.
fn stream_side(me: &mut Iface, ep: EpId, sender: u32, peer: u32, n: u64) -> Result<(), String> {
    let attr = me.attr().clone();
    let start = Instant::now();
    let (mut next_send, mut next_recv) = (0u64, 0u64);
    let mut error: Option<String> = None;
    let mut payload = Vec::new();
    loop {
        // Send until NoResource.
        while next_send < n {
            let m = next_send;
            let len = stream_len(m, attr.max_am_bcopy);
            payload.clear();
            payload.extend_from_slice(&m.to_ne_bytes());
            payload.extend_from_slice(&pattern::am_vec(len, m, sender, 0));
            let r = match m % 3 {
                0 => me
                    .am_bcopy(ep, 1, |b| {
                        b[..payload.len()].copy_from_slice(&payload);
                        payload.len()
                    })
                    .map(|o| o.is_done()),
                2 if len <= attr.max_am_short => {
                    me.am_short(ep, 3, m, &payload[8..]).map(|o| o.is_done())
                }
                _ => {
                    let (h, rest) = payload.split_at(8);
                    let (x, y) = rest.split_at(rest.len() / 2);
                    me.am_zcopy(ep, 2, h, &[x, y], m).map(|o| o.is_done())
                }
            };
            match r {
                Ok(true) => next_send += 1,
                Ok(false) => break,
                Err(e) => return Err(format!("side {sender}: send {m} failed: {e}")),
            }
        }
        me.progress_with(|id, d| {
            if error.is_some() {
                return;
            }
            let m = next_recv;
            let ok = d.len() >= 8
                && d[..8] == m.to_ne_bytes()
                && (1..=3).contains(&id)
                && d.len() - 8 == stream_len(m, attr.max_am_bcopy)
                && pattern::check_am(&d[8..], m, peer, 0).is_none();
            if !ok {
                error = Some(format!(
                    "side {sender}: message {m} from {peer} wrong (id {id}, {} B)",
                    d.len()
                ));
            }
            next_recv += 1;
        });
        if let Some(e) = error.take() {
            return Err(e);
        }
        if let Some(ev) = me.take_events().first() {
            return Err(format!("side {sender}: unexpected event {ev:?}"));
        }
        if next_send == n && next_recv >= n {
            if next_recv > n {
                return Err(format!("side {sender}: {next_recv} of {n} messages"));
            }
            match me.ep_flush(ep, 0) {
                Ok(Outcome::Done(())) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(format!("side {sender}: ep_flush: {e}")),
            }
        }
        if start.elapsed() > WAIT {
            return Err(format!(
                "side {sender}: hung with {next_send} of {n} sent, {next_recv} received"
            ));
        }
    }
}

/// Two interfaces create endpoints to each other before either progresses (so both
/// connections are set up at the same time), then each, in its own thread, streams
/// large and small messages to the other while receiving. Each side sends on the
/// connection it opened: no connection race and no deadlock between two full directions.
#[test]
fn simultaneous_connect_and_bidirectional_streaming() {
    let _serial = testkit::heavy_test();
    let mut a = open(LOCALHOST);
    let mut b = open(LOCALHOST);
    let a_to_b = a.ep_create(&b.address()).expect("ep a->b");
    let b_to_a = b.ep_create(&a.address()).expect("ep b->a");
    const N: u64 = 1500;
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| stream_side(&mut a, a_to_b, 1, 2, N));
        let tb = s.spawn(|| stream_side(&mut b, b_to_a, 2, 1, N));
        (ta.join(), tb.join())
    });
    ra.expect("side a panicked").unwrap();
    rb.expect("side b panicked").unwrap();
    assert_eq!((a.dropped(), b.dropped()), (0, 0));
}

// ---------------------------------------------------------------------------------------

/// A receiver that does not progress: the sender's 64 KiB messages fill the kernel's
/// socket buffers and then the endpoint's send buffer, and it gets `NoResource` — also
/// after waiting, since nothing drains. It queues the rest with `pending_add`; once the
/// receiver progresses again, the callback sends it, and every message arrives once,
/// intact and in order.
#[test]
fn slow_reader_backpressure_and_recovery() {
    let _serial = testkit::heavy_test();
    let mut cfg = IfaceConfig::default();
    cfg.tcp.tx_buf = 256 << 10;
    let mut a = Iface::open_tcp(LOCALHOST, &cfg).unwrap();
    let mut b = Iface::open_tcp(LOCALHOST, &cfg).unwrap();
    let inbox = record(&mut b);
    let ep = a.ep_create(&b.address()).unwrap();
    let seg = a.attr().max_am_bcopy;
    let msg = |m: u64| pattern::am_vec(seg, m, 3, 0);

    // Fill, progressing only the sender, until NoResource holds (20 tries, 2 ms apart).
    let start = Instant::now();
    let (mut sent, mut quiet) = (0u64, 0);
    while quiet < 20 {
        a.progress();
        let p = msg(sent);
        match a
            .am_bcopy(ep, 5, |b| {
                b[..seg].copy_from_slice(&p);
                seg
            })
            .unwrap()
        {
            Outcome::NoResource => {
                quiet += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => {
                sent += 1;
                quiet = 0;
            }
        }
        assert!(
            start.elapsed() < WAIT && sent < 10_000,
            "the sender never ran out of resources ({sent} x {seg} B)"
        );
    }
    assert!(sent > 0);
    assert_eq!(
        a.ep_flush(ep, 0).unwrap(),
        Outcome::NoResource,
        "flush while the send buffer holds data"
    );
    // The receiver stays away for a while; nothing changes for the sender.
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        a.progress();
    }
    assert_eq!(
        a.am_bcopy(ep, 5, |_| 0).unwrap(),
        Outcome::NoResource,
        "still no resource while the receiver does not read"
    );
    assert_eq!(inbox_len(&inbox), 0);

    // Queue the rest.
    let total = sent + 40;
    let next = Arc::new(Mutex::new(sent));
    let n2 = next.clone();
    a.pending_add(
        ep,
        Box::new(move |i: &mut Iface, ep| {
            let mut n = n2.lock().unwrap_or_else(|p| p.into_inner());
            while *n < total {
                let p = pattern::am_vec(seg, *n, 3, 0);
                match i.am_bcopy(ep, 5, |b| {
                    b[..seg].copy_from_slice(&p);
                    seg
                }) {
                    Ok(Outcome::NoResource) => return PendingResult::Again,
                    Ok(_) => *n += 1,
                    Err(e) => panic!("am_bcopy from the pending callback: {e}"),
                }
            }
            PendingResult::Done
        }),
    )
    .expect("pending_add after NoResource");
    for _ in 0..10 {
        a.progress();
    }
    assert_eq!(
        *next.lock().unwrap(),
        sent,
        "sent while the receiver does not read"
    );

    // The receiver comes back.
    progress_until(&mut [&mut b, &mut a], "all messages", || {
        inbox_len(&inbox) >= total as usize
    });
    let start = Instant::now();
    while !a.ep_flush(ep, 0).unwrap().is_done() {
        a.progress();
        b.progress();
        assert!(start.elapsed() < WAIT, "flush after recovery");
    }
    for _ in 0..10 {
        b.progress();
    }
    let got = take(&inbox);
    assert_eq!(got.len() as u64, total, "messages after recovery");
    for (m, (id, d)) in got.iter().enumerate() {
        assert_eq!(*id, 5);
        assert_eq!(d.len(), seg, "message {m} length");
        assert_eq!(
            pattern::check_am(d, m as u64, 3, 0),
            None,
            "message {m} of {total}"
        );
    }
    assert!(a.take_events().is_empty() && b.take_events().is_empty());
}

// ---------------------------------------------------------------------------------------

/// A raw connection to `to` that writes `bytes`.
fn raw(to: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&to, WAIT).expect("raw connect");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(bytes).expect("raw write");
    s
}

/// True when the other side closed `s` (end of stream or reset).
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        Ok(_) => false,
    }
}

/// Raw sockets that send a bad handshake or, after a good one, a bad frame header are
/// dropped — the interface closes them and counts each in `dropped()` — while a normal
/// endpoint's messages keep arriving; a raw peer that speaks the protocol is delivered.
#[test]
fn malformed_peers_are_dropped_and_counted() {
    let _serial = testkit::heavy_test();
    let mut a = open(LOCALHOST);
    let mut b = open(LOCALHOST);
    let inbox = record(&mut b);
    let ep = a.ep_create(&b.address()).unwrap();
    let to = wire::decode_addr(&b.address()).unwrap();
    let seg = b.attr().max_am_bcopy;
    let hs = wire::encode_handshake(&wire::encode_addr(&SocketAddr::new(LOCALHOST, 9)));
    let with_hs = |tail: &[u8]| [&hs[..], tail].concat();

    short(&mut a, &mut b, ep, 1, 0, b"before");
    progress_until(&mut [&mut a, &mut b], "the first message", || {
        inbox_len(&inbox) == 1
    });

    // A raw peer that does it right, to show the raw encoding is what the transport
    // expects.
    let mut good = [&hs[..], &wire::frame_header(7, 6)[..], &b"raw ok"[..]].concat();
    good.extend_from_slice(&wire::frame_header(7, 0));
    let _ok = raw(to, &good);
    progress_until(&mut [&mut a, &mut b], "the raw peer's messages", || {
        inbox_len(&inbox) == 3
    });

    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("two bytes of garbage", b"\x00\xff".to_vec()),
        ("a wrong handshake version", {
            let mut h = hs.clone();
            h[4] = 9;
            h
        }),
        (
            "a handshake with a bad address",
            wire::encode_handshake(&[1, 9, 0, 1, 127, 0, 0, 1]),
        ),
        ("a handshake address longer than 64 bytes", {
            let mut h = hs[..8].to_vec();
            h[6..8].copy_from_slice(&1000u16.to_le_bytes());
            h.extend_from_slice(&[0; 100]);
            h
        }),
        (
            "a frame length of 4 GiB",
            with_hs(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]),
        ),
        (
            "a frame one byte over the segment size",
            with_hs(&wire::frame_header(1, seg + 1)),
        ),
        (
            "a non-zero reserved byte",
            with_hs(&[1, 0, 1, 0, 4, 0, 0, 0, b'a', b'b', b'c', b'd']),
        ),
        ("am id 32", with_hs(&wire::frame_header(32, 0))),
        ("am id 255 after a good frame", {
            let mut v = with_hs(&wire::frame_header(7, 0));
            v.extend_from_slice(&wire::frame_header(255, 3));
            v
        }),
    ];
    for (k, (name, bytes)) in cases.iter().enumerate() {
        let dropped = b.dropped();
        let mut s = raw(to, bytes);
        let start = Instant::now();
        while b.dropped() == dropped {
            a.progress();
            b.progress();
            assert!(start.elapsed() < WAIT, "{name}: never dropped");
        }
        assert_eq!(b.dropped(), dropped + 1, "{name}: counted once");
        assert!(closed_by_peer(&mut s), "{name}: connection not closed");
        // The normal endpoint goes on.
        short(&mut a, &mut b, ep, 1, k as u64 + 1, name.as_bytes());
    }
    let n = 3 + cases.len() + 1; // + the good frame before id 255
    progress_until(
        &mut [&mut a, &mut b],
        "messages during the bad peers",
        || inbox_len(&inbox) >= n,
    );
    assert_eq!(b.dropped(), cases.len() as u64);
    let got = take(&inbox);
    assert_eq!(got.len(), n, "{got:?}");
    assert_eq!(got[0].1[8..], *b"before");
    assert_eq!((got[1].0, &got[1].1[..]), (7, &b"raw ok"[..]));
    assert_eq!((got[2].0, got[2].1.len()), (7, 0));
    let from_a: Vec<_> = got.iter().filter(|(id, _)| *id == 1).skip(1).collect();
    assert_eq!(from_a.len(), cases.len());
    for (k, (_, d)) in from_a.iter().enumerate() {
        assert_eq!(d[..8], (k as u64 + 1).to_ne_bytes());
        assert_eq!(d[8..], *cases[k].0.as_bytes());
    }
    // The bad peers that had sent a good handshake appear as closed peers, never as a
    // failure of our own endpoint.
    for e in b.take_events().into_iter().chain(a.take_events()) {
        assert!(matches!(e, IfaceEvent::PeerClosed(_)), "event {e:?}");
    }

    // A peer that closes inside a frame is a close, not malformed input: nothing is
    // delivered and nothing counted.
    let dropped = b.dropped();
    let cut = with_hs(&[&wire::frame_header(1, 100)[..], &[0u8; 10][..]].concat());
    drop(raw(to, &cut));
    let port9 = hs[HANDSHAKE_ADDR..].to_vec();
    wait_event(&mut b, &mut [&mut a], "the close of a cut frame", |e| {
        *e == IfaceEvent::PeerClosed(port9.clone())
    });
    assert_eq!(
        b.dropped(),
        dropped,
        "a close inside a frame is not malformed"
    );
    assert_eq!(inbox_len(&inbox), 0, "nothing of a cut frame is delivered");
}

/// A connection's end shows up in `take_events`: the receiver of a destroyed endpoint's
/// connection reports `PeerClosed` with the sender's address; the sender to an interface
/// that went away reports `EpFailed`, and that endpoint's operations are errors; an
/// endpoint to a port nobody listens on fails with `Unreachable`; a raw peer that
/// closes after its handshake is `PeerClosed` with the address it announced.
#[test]
fn closed_peers_produce_events() {
    let _serial = testkit::heavy_test();
    let mut a = open(LOCALHOST);
    let mut b = open(LOCALHOST);
    let inbox = record(&mut b);

    // The sender destroys its endpoint.
    let ep = a.ep_create(&b.address()).unwrap();
    short(&mut a, &mut b, ep, 1, 1, b"one");
    progress_until(&mut [&mut a, &mut b], "the first message", || {
        inbox_len(&inbox) == 1
    });
    a.ep_destroy(ep).unwrap();
    let a_addr = a.address();
    let ev = wait_event(&mut b, &mut [&mut a], "PeerClosed at the receiver", |e| {
        *e == IfaceEvent::PeerClosed(a_addr.clone())
    });
    assert_eq!(ev, vec![IfaceEvent::PeerClosed(a.address())]);
    assert!(a.take_events().is_empty(), "destroying is not a failure");

    // The receiving interface goes away.
    let ep = a.ep_create(&b.address()).unwrap();
    short(&mut a, &mut b, ep, 1, 2, b"two");
    progress_until(&mut [&mut a, &mut b], "the second message", || {
        inbox_len(&inbox) == 2
    });
    drop(b);
    let ev = wait_event(
        &mut a,
        &mut [],
        "EpFailed at the sender",
        |e| matches!(e, IfaceEvent::EpFailed(f, _) if *f == ep),
    );
    assert_eq!(ev.len(), 1, "{ev:?}");
    let IfaceEvent::EpFailed(_, status) = ev[0] else {
        unreachable!()
    };
    assert!(status != Status::Ok, "a failure with a status");
    assert_eq!(a.am_short(ep, 1, 3, b"three").err(), Some(status));
    assert!(a.am_bcopy(ep, 1, |_| 0).is_err());
    assert!(a.ep_flush(ep, 0).is_err(), "flush of a failed endpoint");
    a.ep_destroy(ep)
        .expect("a failed endpoint is destroyed normally");
    assert_eq!(take(&inbox).len(), 2);

    // Nobody listens.
    let port = {
        let l = std::net::TcpListener::bind((LOCALHOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let nowhere = wire::encode_addr(&SocketAddr::new(LOCALHOST, port));
    match a.ep_create(&nowhere) {
        Err(e) => assert_eq!(e, Status::Unreachable),
        Ok(ep) => {
            let ev = wait_event(
                &mut a,
                &mut [],
                "EpFailed of a refused connect",
                |e| matches!(e, IfaceEvent::EpFailed(f, _) if *f == ep),
            );
            assert_eq!(ev, vec![IfaceEvent::EpFailed(ep, Status::Unreachable)]);
            assert_eq!(a.ep_flush(ep, 0).err(), Some(Status::Unreachable));
            a.ep_destroy(ep).unwrap();
        }
    }

    // A raw peer that closes after its handshake.
    let mut c = open(LOCALHOST);
    let announced = wire::encode_addr(&SocketAddr::new(LOCALHOST, 4242));
    let s = raw(
        wire::decode_addr(&c.address()).unwrap(),
        &wire::encode_handshake(&announced),
    );
    // Let the handshake be read before closing.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(50) {
        c.progress();
    }
    drop(s);
    let ev = wait_event(&mut c, &mut [], "PeerClosed of a raw peer", |e| {
        *e == IfaceEvent::PeerClosed(announced.clone())
    });
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(c.dropped(), 0);
    assert!(c.is_idle(), "no connection left");
}

/// Sends `put_zcopy` of `data` to `addr` under `rkey`, progressing both sides while the
/// send buffer is full.
fn put(tx: &mut Iface, rx: &mut Iface, ep: EpId, data: &[&[u8]], addr: u64, rkey: &uct::Rkey) {
    let start = Instant::now();
    loop {
        match tx.put_zcopy(ep, data, addr, rkey, 0).expect("put_zcopy") {
            Outcome::NoResource => {
                tx.progress();
                rx.progress();
            }
            _ => return,
        }
        assert!(start.elapsed() < WAIT, "put_zcopy stayed NoResource");
    }
}

/// Puts land straight in registered memory: every size from 1 byte to the largest put,
/// at odd offsets, from an I/O vector, with the bytes around the range untouched. A put
/// the receiver must refuse — a registration id it never made, a range past the end of
/// the registration (a forged key), a registration already dropped — writes nothing, is
/// counted as dropped, and the connection goes on: an active message sent after it
/// arrives, and a good put after it lands.
#[test]
fn puts_land_in_registered_memory_and_bad_ones_are_dropped() {
    let _heavy = testkit::heavy_test();
    let mut tx = open(LOCALHOST);
    let mut rx = open(LOCALHOST);
    let inbox = record(&mut rx);
    let ep = tx.ep_create(&rx.address()).expect("ep_create");
    let md = uct::Md::open(Transport::Tcp);
    let max = tx.attr().max_put_zcopy;
    assert!(tx.attr().caps.contains(uct::Caps::PUT_ZCOPY) && max >= 4096);
    const EDGE: usize = 4096;
    let len = max + 2 * EDGE;
    let mut buf = vec![0u8; len];
    let base = buf.as_mut_ptr();
    // Only the middle is registered: the edges show any write outside the registration.
    // SAFETY: EDGE + max <= len, inside `buf`, which outlives the handle; `buf` is read
    // only between progress calls.
    let h = unsafe { md.mem_reg(base.add(EDGE), max) }.expect("mem_reg of tcp");
    let packed = h.pack_rkey();
    let rkey = md.rkey_unpack(&packed).expect("rkey_unpack of a tcp key");
    let addr = h.address() as u64;
    let check = |buf: &[u8], off: usize, size: usize, seed: u64, what: &str| {
        let r = EDGE + off..EDGE + off + size;
        assert_eq!(pattern::check_mem(&buf[r.clone()], seed, 0), None, "{what}");
        assert!(
            buf[..r.start].iter().all(|&b| b == 0),
            "{what}: bytes before"
        );
        assert!(buf[r.end..].iter().all(|&b| b == 0), "{what}: bytes after");
    };
    for (i, size) in [1usize, 7, 4095, 65_536 + 3, max - 61, max]
        .into_iter()
        .enumerate()
    {
        let off = if size + 61 <= max { 61 } else { 0 };
        let seed = i as u64 + 1;
        let data = pattern::mem_vec(size, seed, 0);
        let (a, rest) = data.split_at(size / 3);
        let (b, c) = rest.split_at(rest.len() / 2);
        buf.fill(0);
        put(&mut tx, &mut rx, ep, &[a, b, c], addr + off as u64, &rkey);
        let p = base as usize;
        progress_until(&mut [&mut tx, &mut rx], "a put to land", || {
            // SAFETY: `buf` is alive and only this thread reads it; the transport writes
            // into it only from progress, which is not running now.
            let now = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
            pattern::check_mem(&now[EDGE + off..EDGE + off + size], seed, 0).is_none()
        });
        check(&buf, off, size, seed, &format!("put of {size} B"));
    }
    assert_eq!(rx.dropped(), 0);

    // Bad puts: the key's own checks pass on the sender (the forged keys claim the
    // range), the receiver refuses them.
    buf.fill(0);
    let data = pattern::mem_vec(4096, 9, 0);
    let mut forged = uct::rkey::PackedRkey::decode(&packed).unwrap();
    forged.id = forged.id.wrapping_add(1000);
    let unknown = md.rkey_unpack(&forged.encode()).unwrap();
    put(&mut tx, &mut rx, ep, &[&data], addr, &unknown);
    let mut longer = uct::rkey::PackedRkey::decode(&packed).unwrap();
    longer.len += 2 * EDGE as u64;
    let past_end = md.rkey_unpack(&longer.encode()).unwrap();
    put(
        &mut tx,
        &mut rx,
        ep,
        &[&data],
        addr + max as u64 - 100,
        &past_end,
    );
    short(&mut tx, &mut rx, ep, 5, 77, b"after");
    progress_until(
        &mut [&mut tx, &mut rx],
        "the message after bad puts",
        || inbox_len(&inbox) == 1,
    );
    assert_eq!(
        take(&inbox),
        vec![(5u8, [&77u64.to_ne_bytes()[..], b"after"].concat())]
    );
    assert_eq!(rx.dropped(), 2, "two refused puts counted");
    assert!(buf.iter().all(|&b| b == 0), "a refused put wrote memory");

    // A registration dropped before its put arrives.
    drop(h);
    put(&mut tx, &mut rx, ep, &[&data], addr, &rkey);
    short(&mut tx, &mut rx, ep, 6, 78, b"");
    progress_until(
        &mut [&mut tx, &mut rx],
        "the message after a stale put",
        || inbox_len(&inbox) == 1,
    );
    assert_eq!(rx.dropped(), 3);
    assert!(
        buf.iter().all(|&b| b == 0),
        "a put into a dropped registration wrote"
    );

    // The connection still carries good puts.
    // SAFETY: as for the first registration.
    let h = unsafe { md.mem_reg(base.add(EDGE), max) }.expect("mem_reg again");
    let rkey = md.rkey_unpack(&h.pack_rkey()).unwrap();
    let data = pattern::mem_vec(max, 11, 0);
    put(&mut tx, &mut rx, ep, &[&data], h.address() as u64, &rkey);
    let p = base as usize;
    progress_until(&mut [&mut tx, &mut rx], "a put after refused ones", || {
        // SAFETY: as above.
        let now = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
        pattern::check_mem(&now[EDGE..EDGE + max], 11, 0).is_none()
    });
    check(&buf, 0, max, 11, "put after refused ones");
    drop(h);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A peer that answers a connector answers on the connector's connection: after A
/// connected to B and B made its endpoint to A, the pair has one connection, messages
/// of every size go both ways on it intact and in order, and when B's endpoint goes, A's
/// endpoint fails (the connection is gone) and A hears that B closed.
#[test]
fn the_answer_travels_on_the_connectors_connection() {
    let _heavy = testkit::heavy_test();
    let mut a = open(LOCALHOST);
    let mut b = open(LOCALHOST);
    let in_a = record(&mut a);
    let in_b = record(&mut b);
    let base = open_fds();
    let ab = a.ep_create(&b.address()).expect("ep to b");
    short(&mut a, &mut b, ab, 1, 10, b"hello");
    progress_until(&mut [&mut a, &mut b], "the connector's message", || {
        inbox_len(&in_b) == 1
    });
    assert_eq!(open_fds(), base + 2, "one connection: two ends");
    let ba = b.ep_create(&a.address()).expect("ep to a");
    assert_eq!(
        open_fds(),
        base + 2,
        "b answers without a connection of its own"
    );
    // Sizes across the segment, both ways, interleaved.
    let sizes = [0usize, 1, 255, 4096, 65_536];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern::mem_vec(len, i as u64, 0);
        for to_a in [true, false] {
            let (tx, rx, ep) = if to_a {
                (&mut b, &mut a, ba)
            } else {
                (&mut a, &mut b, ab)
            };
            let start = Instant::now();
            while !tx
                .am_bcopy(ep, 2, |buf| {
                    buf[..len].copy_from_slice(&data);
                    len
                })
                .expect("am_bcopy")
                .is_done()
            {
                tx.progress();
                rx.progress();
                assert!(start.elapsed() < WAIT, "am_bcopy stayed NoResource");
            }
        }
    }
    progress_until(&mut [&mut a, &mut b], "every message both ways", || {
        inbox_len(&in_a) == sizes.len() && inbox_len(&in_b) == 1 + sizes.len()
    });
    for (inbox, skip) in [(&in_a, 0), (&in_b, 1)] {
        let got = take(inbox);
        for (i, (id, d)) in got[skip..].iter().enumerate() {
            assert_eq!(*id, 2);
            assert_eq!(
                pattern::check_mem(d, i as u64, 0),
                None,
                "message {i} differs"
            );
            assert_eq!(d.len(), sizes[i]);
        }
    }
    assert_eq!(open_fds(), base + 2, "still one connection");
    b.ep_destroy(ba).unwrap();
    let ev = wait_event(
        &mut a,
        &mut [&mut b],
        "a's endpoint fails",
        |e| matches!(e, IfaceEvent::EpFailed(f, _) if *f == ab),
    );
    assert!(
        ev.contains(&IfaceEvent::PeerClosed(b.address())),
        "a hears that b closed: {ev:?}"
    );
    a.ep_destroy(ab).unwrap();
    assert_eq!(open_fds(), base, "no descriptor left");
    assert!(a.is_idle() && b.is_idle());
    assert_eq!(a.dropped() + b.dropped(), 0);
}

/// Endpoints both sides create before either progresses end up on one connection: the
/// interface with the larger address waits for the other's connection and answers on it.
/// When that peer never connects, the waiting endpoint connects itself after
/// `UCX_TCP_PEER_WAIT`, and what it sent meanwhile arrives first, in order.
#[test]
fn endpoints_created_at_once_share_one_connection() {
    let _heavy = testkit::heavy_test();
    let mut a = open(LOCALHOST);
    let mut b = open(LOCALHOST);
    if a.address() > b.address() {
        std::mem::swap(&mut a, &mut b);
    }
    // `a` has the smaller address: it connects; `b` waits.
    let in_a = record(&mut a);
    let in_b = record(&mut b);
    let base = open_fds();
    let ab = a.ep_create(&b.address()).unwrap();
    let ba = b.ep_create(&a.address()).unwrap();
    for i in 0..5u64 {
        short(&mut b, &mut a, ba, 3, i, b"from b");
        short(&mut a, &mut b, ab, 4, i, b"from a");
    }
    progress_until(&mut [&mut a, &mut b], "both directions", || {
        inbox_len(&in_a) == 5 && inbox_len(&in_b) == 5
    });
    for (inbox, id, what) in [(&in_a, 3u8, &b"from b"[..]), (&in_b, 4, &b"from a"[..])] {
        let got = take(inbox);
        for (i, (gid, d)) in got.iter().enumerate() {
            assert_eq!(*gid, id);
            assert_eq!(d[..8], (i as u64).to_ne_bytes(), "message {i} out of order");
            assert_eq!(&d[8..], what);
        }
    }
    assert_eq!(open_fds(), base + 2, "one connection for the pair");
    a.ep_destroy(ab).unwrap();
    b.ep_destroy(ba).unwrap();

    // The waiting side's peer never connects: it connects itself, in order.
    let mut c = open(LOCALHOST);
    let in_c = record(&mut c);
    let (mut late, early) = if b.address() > c.address() {
        (b, c)
    } else {
        (c, b)
    };
    let mut early = early;
    // Whichever of b and c is the early one receives; the other inbox stays empty.
    let ep = late.ep_create(&early.address()).unwrap();
    for i in 0..3u64 {
        short(&mut late, &mut early, ep, 5, i, b"late");
    }
    progress_until(
        &mut [&mut late, &mut early],
        "the late side's messages",
        || inbox_len(&in_b) + inbox_len(&in_c) == 3,
    );
    let got: Vec<_> = take(&in_b).into_iter().chain(take(&in_c)).collect();
    for (i, (id, d)) in got.iter().enumerate() {
        assert_eq!((*id, &d[..8]), (5, &(i as u64).to_ne_bytes()[..]));
    }
    late.ep_destroy(ep).unwrap();
}
