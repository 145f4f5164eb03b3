//! Rendezvous over tcp between processes: the receiver registers its buffer and asks for
//! the data, the sender puts it, and the receiving transport reads it from the socket
//! straight into the buffer. Both sides run with tcp only (UCX_TLS=tcp for the peer, the
//! same configuration for this process). Checked: every size around the rendezvous
//! threshold and the put size, up to 64 MiB, plain and synchronous; receives into I/O
//! vectors, generic datatypes, short and empty buffers (truncation); rendezvous messages
//! that arrive before and after their receive is posted; and a sender killed before it
//! could send its data fails the receive instead of leaving it waiting.
//!
//! Every byte received is checked; every wait is bounded; peers are killed when a test
//! fails. Peers block in the worker's wait when idle.

mod common;

use common::*;
use std::cell::RefCell;
use std::time::Instant;
use ucp::{Buf, Config, Context, Features, ThreadMode, Worker};
use ucs::Status;

const TCP: &[(&str, &str)] = &[("UCX_TLS", "tcp")];

fn tcp_worker() -> Worker {
    let cfg = Config {
        transports: vec![uct::Transport::Tcp],
        ..Config::default()
    };
    let ctx = Context::with_config(Features::TAG, cfg, uct::IfaceConfig::default()).unwrap();
    Worker::new(&ctx, ThreadMode::Single).unwrap()
}

/// Receives any message and sends it back with its tag until the stop tag.
fn role_echo() {
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let mut buf = vec![0u8; MAX];
    loop {
        let info = w.tag_recv(&mut buf, 0, 0).unwrap();
        if info.sender_tag == STOP_TAG {
            break;
        }
        w.tag_send(ep, &buf[..info.length], info.sender_tag)
            .unwrap();
    }
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    println!("@@ done");
}

/// Sends `count` messages of `size` bytes (tags 1 << 32 | seq) after the go line, waits
/// for them, says "sent" and exits after "bye".
fn role_sender(args: &str) {
    let a: Vec<usize> = args.split(',').map(|x| x.parse().unwrap()).collect();
    let (count, size) = (a[0], a[1]);
    let mut w = worker();
    let ep = peer_connect(&mut w);
    assert_eq!(stdin_line(), "go");
    let bufs: Vec<Vec<u8>> = (0..count)
        .map(|seq| pattern(size, 1 << 32 | seq as u64))
        .collect();
    let reqs: Vec<_> = bufs
        .iter()
        .enumerate()
        // SAFETY: `bufs` outlives the requests, which are all waited for below.
        .map(|(seq, b)| unsafe {
            w.tag_send_nb(
                ep,
                Buf::contig(b.as_ptr().cast_mut(), size),
                1 << 32 | seq as u64,
                false,
                None,
            )
            .unwrap()
        })
        .collect();
    for r in reqs.into_iter().flatten() {
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
    }
    println!("@@ sent");
    assert_eq!(stdin_line(), "bye");
}

/// Announces one rendezvous message, progresses until told to stop, then stops for good
/// (until killed).
fn role_announce_and_hang(args: &str) {
    let size: usize = args.parse().unwrap();
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let data = pattern(size, 3);
    // SAFETY: `data` lives until the process is killed.
    let r = unsafe {
        w.tag_send_nb(
            ep,
            Buf::contig(data.as_ptr().cast_mut(), size),
            3,
            false,
            None,
        )
        .unwrap()
    };
    assert!(r.is_some(), "a rendezvous send cannot complete at once");
    // Progress (connecting, sending the Rts) until the test saw the Rts, then stop for
    // good: the receiver's Rtr is never answered.
    let lines = stdin_lines();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        w.progress();
        if let Ok(l) = lines.try_recv() {
            assert_eq!(l, "stop");
            break;
        }
        assert!(Instant::now() < deadline, "never told to stop");
    }
    println!("@@ stopped");
    let _ = lines.recv();
}

#[test]
fn peer_main() {
    let Ok(role) = std::env::var("RUCX_TEST_ROLE") else {
        return;
    };
    let args = std::env::var("RUCX_TEST_ARGS").unwrap_or_default();
    match role.as_str() {
        "echo" => role_echo(),
        "sender" => role_sender(&args),
        "announce" => role_announce_and_hang(&args),
        r => panic!("unknown role {r}"),
    }
}

fn tcp_rndv_thresholds(w: &mut Worker, ep: ucp::Ep) -> ucp::proto::select::Thresholds {
    w.ep_connect(ep).unwrap();
    assert_eq!(w.ep_transport(ep).unwrap(), Some(uct::Transport::Tcp));
    let th = w.ep_thresholds(ep).unwrap().unwrap();
    assert!(
        th.put && !th.rma,
        "a tcp lane does rendezvous by put: {th:?}"
    );
    assert!(th.rndv < MAX, "no rendezvous over tcp: {th:?}");
    th
}

#[test]
fn echo_across_rendezvous_sizes() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn_env("echo", "", TCP);
    let mut w = tcp_worker();
    let ep = connect(&mut w, &mut p);
    let th = tcp_rndv_thresholds(&mut w, ep);
    let put = uct::tcp::TcpConfig::default().put_seg;
    let mut sizes = vec![1usize, 4096, 1 << 20, (16 << 20) + 5, MAX];
    for b in [th.rndv, put, 2 * put, th.rndv + put] {
        sizes.extend([b - 1, b, b + 1]);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut back = vec![0u8; MAX];
    for (i, &len) in sizes.iter().enumerate() {
        let tag = 100 + i as u64;
        let data = pattern(len, tag);
        w.tag_send(ep, &data, tag).unwrap();
        let info = w.tag_recv(&mut back, tag, u64::MAX).unwrap();
        assert_eq!(info.length, len);
        assert!(back[..len] == data[..], "echo of {len} bytes differs");
        back[..len].fill(0);
        if len <= 1 << 20 {
            w.tag_send_sync(ep, &data, tag).unwrap();
            let info = w.tag_recv(&mut back, tag, u64::MAX).unwrap();
            assert!(
                info.length == len && back[..len] == data[..],
                "sync echo of {len} bytes differs"
            );
        }
    }
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    assert_eq!(p.line(), "done");
    p.finish();
    assert_eq!(w.dropped(), 0);
}

/// A generic datatype that scatters the packed stream to every other byte of `buf`.
struct Spread {
    buf: Vec<u8>,
}

impl ucp::GenericDt for Spread {
    fn packed_size(&self) -> usize {
        self.buf.len() / 2
    }
    fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.buf[2 * (off + i)];
        }
        dst.len()
    }
    fn unpack(&mut self, off: usize, src: &[u8]) -> ucs::Result<()> {
        for (i, &s) in src.iter().enumerate() {
            self.buf[2 * (off + i)] = s;
        }
        Ok(())
    }
}

#[test]
fn rendezvous_into_iov_generic_and_short_buffers() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn_env("echo", "", TCP);
    let mut w = tcp_worker();
    let ep = connect(&mut w, &mut p);
    let th = tcp_rndv_thresholds(&mut w, ep);
    let len = 3 * th.rndv + 777;
    let data = pattern(len, 5);

    // Into an I/O vector of three uneven pieces.
    w.tag_send(ep, &data, 1).unwrap();
    let mut parts = [vec![0u8; 1000], vec![0u8; len - 1500], vec![0u8; 500]];
    let iov: Box<[(*mut u8, usize)]> = parts
        .iter_mut()
        .map(|v| (v.as_mut_ptr(), v.len()))
        .collect();
    // SAFETY: `parts` outlives the request, waited for below.
    let r = w
        .tag_recv_nb(unsafe { Buf::iov(iov) }, 1, u64::MAX, None)
        .unwrap();
    assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
    assert!(parts.concat() == data, "rendezvous into an iov differs");

    // Into a generic datatype.
    w.tag_send(ep, &data, 2).unwrap();
    let dt = Box::new(RefCell::new(Spread {
        buf: vec![0u8; 2 * len],
    }));
    let cell: *const RefCell<Spread> = &*dt;
    // A generic buffer names no memory; the datatype is owned by the request.
    let r = w
        .tag_recv_nb(Buf::generic_boxed(dt), 2, u64::MAX, None)
        .unwrap();
    // Peek at the unpacked bytes before the request (and the datatype) is freed.
    let deadline = Instant::now() + TIMEOUT;
    while w.request_test(r).unwrap().is_none() {
        w.progress();
        assert!(Instant::now() < deadline, "generic receive timed out");
    }
    assert_eq!(w.request_test(r).unwrap(), Some(Status::Ok));
    // SAFETY: the request (which owns the datatype) is not freed yet.
    let got: Vec<u8> = unsafe { (*cell).borrow().buf.iter().step_by(2).copied().collect() };
    assert!(got == data, "rendezvous into a generic datatype differs");
    w.request_free(r).unwrap();

    // Into buffers too short: the part that fits, and MESSAGE_TRUNCATED.
    for keep in [th.rndv / 2, 0] {
        w.tag_send(ep, &data, 3).unwrap();
        let mut small = vec![0u8; keep];
        assert_eq!(
            w.tag_recv(&mut small, 3, u64::MAX),
            Err(Status::MessageTruncated),
            "into {keep} bytes"
        );
        assert!(small[..] == data[..keep], "the part that fits differs");
    }
    // The stream goes on.
    w.tag_send(ep, &data, 4).unwrap();
    let mut back = vec![0u8; len];
    assert_eq!(w.tag_recv(&mut back, 4, u64::MAX).unwrap().length, len);
    assert!(back == data);
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    assert_eq!(p.line(), "done");
    p.finish();
    assert_eq!(w.dropped(), 0);
}

#[test]
fn rendezvous_before_and_after_the_receive() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let count = 12usize;
    let size = 700_001usize;
    // After: every Rts arrives first (unexpected), then the receives are posted.
    let mut p = Peer::spawn_env("sender", &format!("{count},{size}"), TCP);
    let mut w = tcp_worker();
    connect(&mut w, &mut p);
    p.send("go");
    let last = 1 << 32 | (count as u64 - 1);
    let deadline = Instant::now() + TIMEOUT;
    while w.tag_probe(last, u64::MAX, false).is_none() {
        w.progress();
        assert!(Instant::now() < deadline, "announcements did not arrive");
    }
    let mut buf = vec![0u8; size];
    for seq in 0..count as u64 {
        let tag = 1 << 32 | seq;
        assert_eq!(w.tag_recv(&mut buf, tag, u64::MAX).unwrap().length, size);
        assert!(
            buf == pattern(size, tag),
            "unexpected message {seq} differs"
        );
    }
    assert_eq!(p.line(), "sent");
    p.send("bye");
    p.finish();

    // Before: the receives wait, in reverse tag order, for messages sent in order.
    let mut p = Peer::spawn_env("sender", &format!("{count},{size}"), TCP);
    let mut w = tcp_worker();
    connect(&mut w, &mut p);
    let mut bufs: Vec<Vec<u8>> = (0..count).map(|_| vec![0u8; size]).collect();
    let reqs: Vec<_> = bufs
        .iter_mut()
        .enumerate()
        .rev()
        // SAFETY: the buffers outlive the requests, which are waited for below.
        .map(|(seq, b)| unsafe {
            w.tag_recv_nb(
                Buf::contig(b.as_mut_ptr(), size),
                1 << 32 | seq as u64,
                u64::MAX,
                None,
            )
            .unwrap()
        })
        .collect();
    p.send("go");
    for r in reqs {
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
    }
    for (seq, b) in bufs.iter().enumerate() {
        assert!(
            *b == pattern(size, 1 << 32 | seq as u64),
            "posted receive {seq} differs"
        );
    }
    assert_eq!(p.line(), "sent");
    p.send("bye");
    p.finish();
    assert_eq!(w.dropped(), 0);
}

/// The sender dies after announcing its message: the receive that matched it completes
/// with an error instead of waiting for data that never comes, and its buffer is not
/// written.
#[test]
fn receive_from_a_killed_sender_fails() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let size = 5 << 20;
    let mut p = Peer::spawn_env("announce", &size.to_string(), TCP);
    let mut w = tcp_worker();
    connect(&mut w, &mut p);
    let deadline = Instant::now() + TIMEOUT;
    while w.tag_probe(3, u64::MAX, false).is_none() {
        w.progress();
        assert!(Instant::now() < deadline, "the announcement did not arrive");
    }
    p.send("stop");
    assert_eq!(p.line(), "stopped");
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` outlives the request, waited for below.
    let r = unsafe {
        w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), size), 3, u64::MAX, None)
            .unwrap()
    };
    // The Rtr goes out; the sender never answers.
    for _ in 0..1000 {
        w.progress();
    }
    assert_eq!(w.request_test(r).unwrap(), None, "completed without data");
    p.kill();
    let st = w.wait_request(r, TIMEOUT).unwrap();
    assert!(
        st != Status::Ok && st != Status::MessageTruncated,
        "receive from a dead sender completed with {st:?}"
    );
    assert!(buf.iter().all(|&b| b == 0), "a failed receive was written");
}
