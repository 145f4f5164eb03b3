//! Tag traffic between processes over shared memory. The test binary starts its peers by
//! running itself with `RUCX_TEST_ROLE` set (the `peer_main` test then plays that role);
//! peers talk to the test over stdin/stdout lines that start with `@@ `. Every byte
//! received is checked; every wait is bounded; peers are killed when a test fails.

mod common;

use common::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use ucp::{Buf, Worker};
use ucs::Status;

/// The sizes that cross every protocol threshold by ±1 byte, up to 64 MiB.
fn threshold_sizes(w: &mut Worker, ep: ucp::Ep) -> Vec<usize> {
    w.ep_connect(ep).unwrap();
    let th = w.ep_thresholds(ep).unwrap().unwrap();
    let mut v = vec![0, 1, 8, 4096, 65_536, 1 << 20, 16 << 20, MAX];
    for b in [
        th.max_short,
        th.max_bcopy,
        th.max_sync_bcopy,
        th.first_frag,
        th.first_frag + th.mid_frag,
        th.rndv,
    ] {
        v.extend([b.saturating_sub(1), b, b + 1]);
    }
    v.retain(|&s| s <= MAX);
    v.sort_unstable();
    v.dedup();
    v
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

/// Sends `count` messages of `size` bytes, tags (id << 32 | seq), after the go line.
fn role_sender(args: &str) {
    let a: Vec<u64> = args.split(',').map(|x| x.parse().unwrap()).collect();
    let (id, count, size) = (a[0], a[1], a[2] as usize);
    let mut w = worker();
    let ep = peer_connect(&mut w);
    assert_eq!(stdin_line(), "go");
    // Nonblocking, so that rendezvous messages can all be announced before any is
    // matched (the receiver may post its receives only after they all arrived).
    let bufs: Vec<Vec<u8>> = (0..count)
        .map(|seq| pattern(size, id << 32 | seq))
        .collect();
    let reqs: Vec<_> = bufs
        .iter()
        .enumerate()
        // SAFETY: `bufs` outlives the requests, which are all waited for below.
        .map(|(seq, b)| unsafe {
            w.tag_send_nb(
                ep,
                Buf::contig(b.as_ptr().cast_mut(), size),
                id << 32 | seq as u64,
                false,
                None,
            )
            .unwrap()
        })
        .collect();
    for r in reqs.into_iter().flatten() {
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
    }
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    println!("@@ sent");
    // Stay until the test has everything (our memory may be read by rendezvous).
    assert_eq!(stdin_line(), "bye");
}

/// Posts one receive of tag 7 only after the go line; reports the size it got.
fn role_late_receiver() {
    let mut w = worker();
    let _ep = peer_connect(&mut w);
    assert_eq!(stdin_line(), "go");
    let mut buf = vec![0u8; 1 << 20];
    let info = w.tag_recv(&mut buf, 7, u64::MAX).unwrap();
    assert_eq!(&buf[..info.length], &pattern(info.length, 7)[..]);
    println!("@@ got {}", info.length);
    assert_eq!(stdin_line(), "bye");
}

/// Sends one message of the size given, announces it, and makes no progress until the go
/// line; then completes the send.
fn role_stalled_sender(args: &str) {
    let size: usize = args.parse().unwrap();
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let data = pattern(size, 77);
    // SAFETY: `data` outlives the request, which is waited for below.
    let r = unsafe {
        w.tag_send_nb(
            ep,
            Buf::contig(data.as_ptr().cast_mut(), size),
            77,
            false,
            None,
        )
    }
    .unwrap();
    println!("@@ sent");
    assert_eq!(stdin_line(), "go");
    if let Some(r) = r {
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
    }
    println!("@@ done");
    assert_eq!(stdin_line(), "bye");
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
        "late-receiver" => role_late_receiver(),
        "stalled-sender" => role_stalled_sender(&args),
        r => panic!("unknown role {r}"),
    }
}

// ----- tests --------------------------------------------------------------------------------

#[test]
fn echo_every_threshold_size() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn("echo", "");
    let mut w = worker();
    let ep = connect(&mut w, &mut p);
    let sizes = threshold_sizes(&mut w, ep);
    let mut back = vec![0u8; MAX];
    for (i, &len) in sizes.iter().enumerate() {
        let tag = 1000 + i as u64;
        let data = pattern(len, tag);
        w.tag_send(ep, &data, tag).unwrap();
        let info = w.tag_recv(&mut back, tag, u64::MAX).unwrap();
        assert_eq!(info.length, len);
        assert!(back[..len] == data[..], "echo of {len} bytes differs");
        // Synchronous sends across the same sizes.
        w.tag_send_sync(ep, &data, tag).unwrap();
        let info = w.tag_recv(&mut back, tag, u64::MAX).unwrap();
        assert!(
            info.length == len && back[..len] == data[..],
            "sync echo of {len} bytes differs"
        );
    }
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    assert_eq!(p.line(), "done");
    p.finish();
    assert_eq!(w.dropped(), 0);
}

/// The sub-slice of `v` that starts `off` bytes past its first page boundary.
fn at_page_offset(v: &mut [u8], off: usize, len: usize) -> &mut [u8] {
    let page = 4096;
    let start = (page - v.as_ptr() as usize % page) % page + off;
    &mut v[start..start + len]
}

/// Payloads whose page offset puts the copies into and out of the transport's buffers at
/// a distance of a few bytes modulo a page (where `memcpy`'s string instruction is slow
/// and `ucs::sys::copy` takes its vector loop), and at plain distances, across every
/// protocol: every byte of each echo is checked.
#[test]
fn echo_from_and_into_every_page_offset() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn("echo", "");
    let mut w = worker();
    let ep = connect(&mut w, &mut p);
    w.ep_connect(ep).unwrap();
    let th = w.ep_thresholds(ep).unwrap().unwrap();
    let mut sizes = vec![1024, 2113, 4096, 4104, 8192, 16_384, 65_536, 300_000];
    sizes.extend([th.max_bcopy, th.first_frag + th.mid_frag + 1, th.rndv - 1]);
    let most = *sizes.iter().max().unwrap();
    let mut out = vec![0u8; most + 8192];
    let mut back = vec![0u8; most + 8192];
    let mut tag = 5000;
    for &len in &sizes {
        for (so, ro) in [(0, 0), (0, 16), (8, 0), (56, 48), (4088, 4090), (1, 9)] {
            tag += 1;
            let data = pattern(len, tag);
            at_page_offset(&mut out, so, len).copy_from_slice(&data);
            w.tag_send(ep, at_page_offset(&mut out, so, len), tag)
                .unwrap();
            let dst = at_page_offset(&mut back, ro, len);
            dst.fill(0);
            let info = w.tag_recv(dst, tag, u64::MAX).unwrap();
            assert_eq!(info.length, len);
            assert!(
                dst[..] == data[..],
                "echo of {len} bytes sent from page offset {so} into offset {ro} differs"
            );
        }
    }
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    assert_eq!(p.line(), "done");
    p.finish();
    assert_eq!(w.dropped(), 0);
}

/// Three senders into wildcard receives; each sender's messages arrive in its order.
#[test]
fn many_senders_into_wildcard_receives() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut w = worker();
    let count = 300u64;
    let size = 3000usize;
    let mut peers: Vec<Peer> = (1..=3)
        .map(|id| Peer::spawn("sender", &format!("{id},{count},{size}")))
        .collect();
    for p in peers.iter_mut() {
        connect(&mut w, p);
    }
    for p in peers.iter_mut() {
        p.send("go");
    }
    let mut next = [0u64; 4];
    let mut buf = vec![0u8; size];
    for _ in 0..3 * count {
        let info = w.tag_recv(&mut buf, 0, 0).unwrap();
        let (id, seq) = (
            (info.sender_tag >> 32) as usize,
            info.sender_tag & 0xffff_ffff,
        );
        assert_eq!(seq, next[id], "sender {id} out of order");
        next[id] += 1;
        assert!(buf == pattern(size, info.sender_tag));
    }
    for mut p in peers {
        assert_eq!(p.line(), "sent");
        p.send("bye");
        p.finish();
    }
}

/// Messages that arrive before their receive is posted (unexpected: eager, fragmented and
/// rendezvous), then receives posted before the messages arrive.
#[test]
fn receives_posted_after_and_before_arrival() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (label, size) in [
        ("eager", 100usize),
        ("bcopy", 5000),
        ("fragments", 9000),
        ("rndv", 300_000),
    ] {
        let count = 20u64;
        let mut p = Peer::spawn("sender", &format!("1,{count},{size}"));
        let mut w = worker();
        connect(&mut w, &mut p);
        // After: let everything arrive (the sender flushes, which for rendezvous needs our
        // progress, so progress while waiting).
        p.send("go");
        let deadline = Instant::now() + TIMEOUT;
        while w
            .tag_probe(1 << 32 | (count - 1), u64::MAX, false)
            .is_none()
        {
            w.progress();
            assert!(
                Instant::now() < deadline,
                "{label}: messages did not arrive"
            );
        }
        let mut buf = vec![0u8; size];
        for seq in 0..count {
            let tag = 1 << 32 | seq;
            let info = w.tag_recv(&mut buf, tag, u64::MAX).unwrap();
            assert_eq!(info.length, size);
            assert!(buf == pattern(size, tag), "{label}: message {seq} differs");
        }
        assert_eq!(p.line(), "sent");
        p.send("bye");
        p.finish();

        // Before: post all receives, then let the peer send.
        let mut p = Peer::spawn("sender", &format!("1,{count},{size}"));
        let mut w = worker();
        connect(&mut w, &mut p);
        let mut bufs: Vec<Vec<u8>> = (0..count).map(|_| vec![0u8; size]).collect();
        let reqs: Vec<_> = bufs
            .iter_mut()
            .enumerate()
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
                "{label}: posted receive {seq} differs"
            );
        }
        assert_eq!(p.line(), "sent");
        p.send("bye");
        p.finish();
    }
}

/// A synchronous send completes only once the receiver matched it.
#[test]
fn sync_send_waits_for_the_match() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for size in [8usize, 5000, 20_000, 300_000] {
        let mut p = Peer::spawn("late-receiver", "");
        let mut w = worker();
        let ep = connect(&mut w, &mut p);
        let data = pattern(size, 7);
        // SAFETY: `data` outlives the request (waited for below).
        let r = unsafe {
            w.tag_send_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), size),
                7,
                true,
                None,
            )
            .unwrap()
            .unwrap()
        };
        // The receiver has not posted its receive: no amount of progress completes us.
        for _ in 0..20_000 {
            w.progress();
        }
        assert_eq!(
            w.request_test(r).unwrap(),
            None,
            "sync send of {size} completed before the match"
        );
        p.send("go");
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
        assert_eq!(p.line(), format!("got {size}"));
        p.send("bye");
        p.finish();
    }
}

/// A message larger than the receive buffer completes the receive with
/// MESSAGE_TRUNCATED, for every protocol, and the stream goes on.
#[test]
fn truncation_is_reported() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn("echo", "");
    let mut w = worker();
    let ep = connect(&mut w, &mut p);
    for (i, size) in [50usize, 5000, 9000, 300_000].into_iter().enumerate() {
        let tag = 10 + i as u64;
        let data = pattern(size, tag);
        w.tag_send(ep, &data, tag).unwrap();
        let mut small = vec![0u8; 16];
        assert_eq!(
            w.tag_recv(&mut small, tag, u64::MAX),
            Err(Status::MessageTruncated),
            "size {size}"
        );
        assert_eq!(small[..], data[..16], "the part that fits is delivered");
        // The next message is still received whole.
        w.tag_send(ep, &data[..10], tag).unwrap();
        let info = w.tag_recv(&mut small, tag, u64::MAX).unwrap();
        assert_eq!(info.length, 10);
    }
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    assert_eq!(p.line(), "done");
    p.finish();
}

/// Receives into `dst` through the nonblocking call (the blocking one never splits its
/// rendezvous) and waits for it.
fn recv_nb(w: &mut Worker, dst: &mut [u8], tag: u64) -> Result<ucp::RecvInfo, Status> {
    // SAFETY: `dst` is borrowed for this whole call, and the request completes before it
    // returns (a wait that fails panics, and the test with it).
    let buf = unsafe { Buf::contig(dst.as_mut_ptr(), dst.len()) };
    let r = w.tag_recv_nb(buf, tag, u64::MAX, None).unwrap();
    let s = w.wait_done(r, TIMEOUT).unwrap();
    let info = w.request_info(r).unwrap();
    w.request_free(r).unwrap();
    match s {
        Status::Ok => Ok(info),
        s => Err(s),
    }
}

/// The split rendezvous (shared memory, `UCX_RUCX_RNDV_SPLIT`, 32 KiB by default): the
/// peer writes the first part of each receive buffer while this side reads the rest.
/// Sizes at the split threshold and at the page boundaries of the sender's part, from and
/// into odd page offsets, whole and truncated: every byte of each receive buffer is
/// checked, including the bytes past a truncated message, which nobody may write.
#[test]
fn split_rendezvous_moves_every_byte_once() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn("echo", "");
    let mut w = worker();
    let ep = connect(&mut w, &mut p);
    w.ep_connect(ep).unwrap();
    let th = w.ep_thresholds(ep).unwrap().unwrap();
    let split = ucp::config::RNDV_SPLIT_AUTO;
    let mut sizes = vec![
        split - 1,
        split,
        split + 1,
        2 * split + 4095,
        2 * split + 8192,
        (1 << 20) + 3,
        (4 << 20) + 4097,
    ];
    sizes.retain(|&s| s >= th.rndv);
    assert!(
        sizes.len() >= 5,
        "rendezvous threshold {} above the split sizes",
        th.rndv
    );
    let most = *sizes.iter().max().unwrap();
    let mut out = vec![0u8; most + 8192];
    let mut back = vec![0u8; most + 8192];
    let mut tag = 9000;
    for &len in &sizes {
        for (so, ro) in [(0, 0), (8, 4090), (4000, 1)] {
            tag += 1;
            let data = pattern(len, tag);
            at_page_offset(&mut out, so, len).copy_from_slice(&data);
            w.tag_send(ep, at_page_offset(&mut out, so, len), tag)
                .unwrap();
            let dst = at_page_offset(&mut back, ro, len);
            dst.fill(0xa5);
            let info = recv_nb(&mut w, dst, tag).unwrap();
            assert_eq!(info.length, len);
            assert!(
                dst[..] == data[..],
                "split echo of {len} bytes (page offsets {so}/{ro}) differs"
            );
        }
        // Truncated into a buffer that still splits: what fits arrives, nothing beyond.
        tag += 1;
        let data = pattern(len, tag);
        w.tag_send(ep, &data, tag).unwrap();
        let fit = (len - len / 3).max(split);
        let mut dst = vec![0x5au8; fit + 4096];
        let r = recv_nb(&mut w, &mut dst[..fit], tag);
        if fit < len {
            assert_eq!(r, Err(Status::MessageTruncated), "{len} bytes into {fit}");
        } else {
            assert_eq!(r.map(|i| i.length), Ok(len));
        }
        let got = fit.min(len);
        assert!(
            dst[..got] == data[..got],
            "{len} bytes into {fit}: the part that fits"
        );
        assert!(
            dst[fit..].iter().all(|&b| b == 0x5a),
            "{len} bytes into {fit}: past the end"
        );
    }
    // Receives of a size from the threshold up split (three echoes and the truncated one
    // per size), unless the environment turned splitting off; the first always does, the
    // later ones unless the peer's part came late in three splits in a row (a slow host:
    // see `rndv::split::judge`), so the count is bounded, not exact.
    let most_splits = sizes.iter().filter(|&&s| s >= split).count() as u64 * 4;
    let on = ucp::Config::from_env().unwrap().rndv_split == split;
    let splits = w.rndv_splits();
    if on {
        assert!((1..=most_splits).contains(&splits), "{splits} splits");
    } else {
        assert_eq!(splits, 0);
    }
    // A blocking receive never splits: it aborts what it gives up on.
    tag += 1;
    let data = pattern(2 * split, tag);
    w.tag_send(ep, &data, tag).unwrap();
    let mut dst = vec![0u8; data.len()];
    assert_eq!(
        w.tag_recv(&mut dst, tag, u64::MAX).unwrap().length,
        data.len()
    );
    assert!(dst == data);
    assert_eq!(w.rndv_splits(), splits);
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    assert_eq!(p.line(), "done");
    p.finish();
    assert_eq!(w.dropped(), 0);
}

/// A receive in a split rendezvous cannot be aborted while its sender may still write
/// into it (`Busy`, and the receive goes on); it completes whole once the sender runs.
#[test]
fn a_split_receive_is_not_aborted_under_its_sender() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let size = 1 << 20;
    let mut p = Peer::spawn("stalled-sender", &size.to_string());
    let mut w = worker();
    let _ep = connect(&mut w, &mut p);
    assert_eq!(p.line(), "sent");
    let mut dst = vec![0u8; size];
    // SAFETY: `dst` outlives the request, which completes below before it is dropped.
    let buf = unsafe { Buf::contig(dst.as_mut_ptr(), size) };
    let r = w.tag_recv_nb(buf, 77, u64::MAX, None).unwrap();
    // The announcement arrives and the split starts; the sender does not answer yet.
    let t0 = Instant::now();
    while w.rndv_splits() == 0 && t0.elapsed() < TIMEOUT {
        w.progress();
    }
    if ucp::Config::from_env().unwrap().rndv_split > size {
        // Splitting turned off by the environment: nothing to check here.
        p.send("go");
        w.wait_done(r, TIMEOUT).unwrap();
        w.request_free(r).unwrap();
        assert_eq!(p.line(), "done");
        p.send("bye");
        p.finish();
        return;
    }
    assert_eq!(w.rndv_splits(), 1);
    for _ in 0..1000 {
        w.progress();
    }
    assert_eq!(
        w.request_test(r).unwrap(),
        None,
        "complete before the sender's part"
    );
    assert_eq!(w.request_abort(r), Err(Status::Busy));
    assert_eq!(
        w.request_test(r).unwrap(),
        None,
        "the refused abort left it running"
    );
    p.send("go");
    assert_eq!(w.wait_done(r, TIMEOUT).unwrap(), Status::Ok);
    assert_eq!(w.request_info(r).unwrap().length, size);
    w.request_free(r).unwrap();
    assert!(dst == pattern(size, 77), "the split receive's bytes");
    assert_eq!(p.line(), "done");
    p.send("bye");
    p.finish();
}

#[test]
fn cancel_posted_receive() {
    let mut w = worker();
    let mut buf = vec![0u8; 64];
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    // SAFETY: the buffer outlives the request (canceled and completed below).
    let r = unsafe {
        w.tag_recv_nb(
            Buf::contig(buf.as_mut_ptr(), 64),
            5,
            u64::MAX,
            Some(ucp::Callback::new(move |_, st, _| {
                *s2.lock().unwrap() = Some(st)
            })),
        )
        .unwrap()
    };
    w.request_cancel(r).unwrap();
    w.progress();
    assert_eq!(w.request_test(r).unwrap(), Some(Status::Canceled));
    assert_eq!(*seen.lock().unwrap(), Some(Status::Canceled));
    w.request_free(r).unwrap();
    // A canceled receive no longer matches: a message with its tag stays unexpected.
    let addr = w.address();
    let ep = w.ep_create(&addr).unwrap();
    w.tag_send(ep, b"late", 5).unwrap();
    w.progress();
    assert!(w.tag_probe(5, u64::MAX, false).is_some());
    drop(buf);
}

#[test]
fn destroying_a_worker_cancels_unmatched_receives() {
    let mut w = worker();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut bufs = vec![vec![0u8; 32]; 5];
    for (i, b) in bufs.iter_mut().enumerate() {
        let s = seen.clone();
        // SAFETY: the buffers outlive the worker, whose drop completes the requests.
        unsafe {
            w.tag_recv_nb(
                Buf::contig(b.as_mut_ptr(), 32),
                i as u64,
                u64::MAX,
                Some(ucp::Callback::new(move |_, st, _| {
                    s.lock().unwrap().push(st)
                })),
            )
            .unwrap();
        }
    }
    drop(w);
    assert_eq!(*seen.lock().unwrap(), vec![Status::Canceled; 5]);
}
