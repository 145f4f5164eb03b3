//! The owned-buffer API: nonblocking sends and receives in safe Rust. The buffer moves
//! into the request and comes back, with the received bytes, when the request is taken.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};
use ucp::{AmAction, AmData, AmSendFlags, Context, Features, Sent, ThreadMode, Worker};
use ucs::Status;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(seed) as u8)
        .collect()
}

fn pair() -> (Worker, Worker, ucp::Ep) {
    let c = Context::new(Features::TAG | Features::AM | Features::STREAM).unwrap();
    let a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut a = a;
    let ep = a.ep_create(&b.address()).unwrap();
    (a, b, ep)
}

/// Progresses both workers until `r` on `w` (the first) can be taken.
fn take(w: &mut Worker, other: &mut Worker, r: ucp::Request) -> ucp::Taken {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = w.request_take_owned(r).unwrap() {
            return t;
        }
        w.progress();
        other.progress();
        assert!(Instant::now() < deadline, "request never completed");
    }
}

#[test]
fn tag_messages_of_every_protocol_come_back_with_their_buffers() {
    let (mut a, mut b, ep) = pair();
    for (i, len) in [0usize, 1, 8, 300, 4096, 70_000, 3 << 20]
        .into_iter()
        .enumerate()
    {
        let tag = 100 + i as u64;
        let data = pattern(len, tag);
        let r = b.tag_recv_owned(vec![0u8; len], tag, u64::MAX).unwrap();
        let sent = a.tag_send_owned(ep, data.clone(), tag, i % 2 == 1).unwrap();
        let back = match sent {
            Sent::Done(v) => v,
            Sent::Pending(s) => {
                let t = take(&mut a, &mut b, s);
                assert_eq!(t.status, Status::Ok);
                t.buf
            }
        };
        assert_eq!(back, data, "the send's buffer came back unchanged");
        let t = take(&mut b, &mut a, r);
        assert_eq!(t.status, Status::Ok, "size {len}");
        assert_eq!(t.info.length, len);
        assert_eq!(t.info.sender_tag, tag);
        assert_eq!(t.buf, data, "size {len}");
        // The request is gone once taken.
        assert_eq!(b.request_take_owned(r).unwrap_err(), Status::InvalidParam);
    }
}

#[test]
fn unexpected_and_truncated_receives() {
    let (mut a, mut b, ep) = pair();
    let data = pattern(1000, 3);
    let sent = a.tag_send_owned(ep, data.clone(), 7, false).unwrap();
    for _ in 0..100 {
        a.progress();
        b.progress();
    }
    if let Sent::Pending(s) = sent {
        assert_eq!(take(&mut a, &mut b, s).status, Status::Ok);
    }
    // Arrived before its receive, and bigger than it.
    let r = b.tag_recv_owned(vec![0u8; 600], 7, u64::MAX).unwrap();
    let t = take(&mut b, &mut a, r);
    assert_eq!(t.status, Status::MessageTruncated);
    assert_eq!(t.info.length, 1000);
    assert_eq!(t.buf, data[..600]);
}

#[test]
fn stream_and_active_messages() {
    let (mut a, mut b, ep) = pair();
    let data = pattern(50_000, 11);
    let mut left = data.len();
    let mut got = Vec::new();
    if let Sent::Pending(s) = a.stream_send_owned(ep, data.clone()).unwrap() {
        assert_eq!(take(&mut a, &mut b, s).status, Status::Ok);
    }
    let back = b.ep_create(&a.address()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // The stream of b's endpoint to a carries what a sent.
    while left > 0 {
        a.progress();
        let chunk = match b.stream_recv_owned(back, vec![0u8; left.min(7000)], false) {
            Ok(Err(v)) => v,
            Ok(Ok(r)) => {
                let t = take(&mut b, &mut a, r);
                assert_eq!(t.status, Status::Ok);
                let mut v = t.buf;
                v.truncate(t.info.length);
                v
            }
            Err(e) => panic!("stream receive failed: {e}"),
        };
        left -= chunk.len();
        got.extend_from_slice(&chunk);
        assert!(Instant::now() < deadline);
    }
    assert_eq!(got, data);

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    b.am_set_handler(
        5,
        Some(Box::new(move |m| {
            if let AmData::Eager(d) = m.data {
                s2.lock().unwrap().push((m.header.to_vec(), d.to_vec()));
            }
            AmAction::Done
        })),
    );
    let payload = pattern(2000, 5);
    match a
        .am_send_owned(ep, 5, b"hdr", payload.clone(), AmSendFlags::default())
        .unwrap()
    {
        Sent::Done(v) => assert_eq!(v, payload),
        Sent::Pending(r) => assert_eq!(take(&mut a, &mut b, r).buf, payload),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().is_empty() {
        a.progress();
        b.progress();
        assert!(Instant::now() < deadline);
    }
    assert_eq!(seen.lock().unwrap()[0], (b"hdr".to_vec(), payload));
}
