//! Receives posted by word (`Worker::tag_recv_word`): they wait with no request, complete
//! through `drain_completed` with their word, take unexpected messages in the call, are
//! canceled by ticket, and get a request only when a message needs one (fragments,
//! rendezvous). Every byte received is checked.

mod common;

use common::pattern;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use ucp::{Buf, Completed, Context, Features, ThreadMode, WordRecv, Worker};
use ucs::Status;

fn ctx() -> Context {
    Context::new(Features::TAG).unwrap()
}

/// Progresses both workers until `rw` reports `word`; returns its completion. Panics if
/// another word is reported or after 30 s.
fn wait_word(sw: &mut Worker, rw: &mut Worker, word: u64) -> Completed {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = None;
    while got.is_none() {
        assert!(Instant::now() < deadline, "word {word:#x} never reported");
        sw.progress();
        rw.progress();
        rw.drain_completed(|c| {
            assert_eq!(c.word, word, "an unexpected word was reported");
            assert!(got.replace(c).is_none(), "word {word:#x} reported twice");
        });
    }
    got.unwrap()
}

/// Sends `data` with `tag` on `ep` and progresses both workers until the send is done.
fn send(sw: &mut Worker, rw: &mut Worker, ep: ucp::Ep, data: &[u8], tag: u64) {
    // SAFETY: `data` outlives the send: it is waited for below.
    let r = unsafe {
        sw.tag_send_nb(
            ep,
            Buf::contig(data.as_ptr().cast_mut(), data.len()),
            tag,
            false,
            None,
        )
        .unwrap()
    };
    let Some(r) = r else { return };
    let deadline = Instant::now() + Duration::from_secs(30);
    while sw.request_test(r).unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "send of {} bytes timed out",
            data.len()
        );
        sw.progress();
        rw.progress();
    }
    assert_eq!(sw.request_test(r).unwrap(), Some(Status::Ok));
    sw.request_free(r).unwrap();
}

/// Two workers of this process over shared memory.
fn pair(c: &Context) -> (Worker, Worker, ucp::Ep) {
    let mut a = Worker::new(c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(c, ThreadMode::Single).unwrap();
    let ep = b.ep_create(&a.address()).unwrap();
    (a, b, ep)
}

const SIZES: [usize; 9] = [0, 1, 8, 40, 41, 4000, 9000, 100_000, 3 << 20];

/// A receive posted first gets each size class (short, bcopy, fragments, rendezvous)
/// through its word, with its information, and the request pool stays empty while the
/// receive waits.
#[test]
fn posted_word_receives_take_every_protocol() {
    let c = ctx();
    let (mut rw, mut sw, ep) = pair(&c);
    for (i, &len) in SIZES.iter().enumerate() {
        let tag = 0x100 + i as u64;
        let data = pattern(len, tag);
        let mut out = vec![0xa5u8; len];
        let word = 0x7000 + i as u64;
        // SAFETY: `out` outlives the receive: its word is waited for below.
        let posted = unsafe {
            rw.tag_recv_word(Buf::contig(out.as_mut_ptr(), len), tag, u64::MAX, word)
                .unwrap()
        };
        assert!(
            matches!(posted, WordRecv::Waiting(_)),
            "size {len}: {posted:?}"
        );
        send(&mut sw, &mut rw, ep, &data, tag);
        let done = wait_word(&mut sw, &mut rw, word);
        assert_eq!(done.status, Status::Ok, "size {len}");
        assert_eq!(done.info.length, len);
        assert_eq!(done.info.sender_tag, tag);
        assert!(out == data, "data of size {len}");
    }
}

/// A message that arrived first is taken in the call when it is whole; a fragmented or
/// rendezvous one makes the receive `Matched` and completes by word.
#[test]
fn unexpected_messages_complete_in_the_call_or_by_word() {
    let c = ctx();
    let (mut rw, mut sw, ep) = pair(&c);
    for (i, &len) in SIZES.iter().enumerate() {
        let tag = 0x200 + i as u64;
        let data = pattern(len, tag);
        // Deliver it (whole, or its first piece) before the receive exists.
        // SAFETY: `data` lives until the end of this iteration, after the receive.
        let sr = unsafe {
            sw.tag_send_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), len),
                tag,
                false,
                None,
            )
            .unwrap()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while rw.tag_probe(tag, u64::MAX, false).is_none() {
            assert!(Instant::now() < deadline, "size {len} never arrived");
            sw.progress();
            rw.progress();
        }
        let mut out = vec![0u8; len];
        let word = 0x8000 + i as u64;
        // SAFETY: `out` outlives the receive (done in the call, or waited for below).
        let got = unsafe {
            rw.tag_recv_word(Buf::contig(out.as_mut_ptr(), len), tag, u64::MAX, word)
                .unwrap()
        };
        match got {
            WordRecv::Done(s, info) => {
                assert_eq!(s, Status::Ok);
                assert_eq!((info.length, info.sender_tag), (len, tag));
            }
            WordRecv::Matched => {
                let done = wait_word(&mut sw, &mut rw, word);
                assert_eq!(done.status, Status::Ok, "size {len}");
                assert_eq!((done.info.length, done.info.sender_tag), (len, tag));
            }
            WordRecv::Waiting(_) => panic!("size {len}: the message was there"),
        }
        if let Some(r) = sr {
            let deadline = Instant::now() + Duration::from_secs(30);
            while sw.request_test(r).unwrap().is_none() {
                assert!(Instant::now() < deadline, "send of {len} timed out");
                sw.progress();
                rw.progress();
            }
            sw.request_free(r).unwrap();
        }
        assert!(out == data, "data of size {len}");
    }
}

/// A message longer than the buffer fills the buffer, leaves the bytes after it alone,
/// and reports `MessageTruncated` with the sent length.
#[test]
fn word_receive_truncates() {
    let c = ctx();
    let (mut rw, mut sw, ep) = pair(&c);
    let data = pattern(300, 3);
    let mut out = vec![0x5au8; 128];
    // SAFETY: `out` outlives the receive.
    let posted = unsafe {
        rw.tag_recv_word(Buf::contig(out.as_mut_ptr(), 100), 9, u64::MAX, 1)
            .unwrap()
    };
    assert!(matches!(posted, WordRecv::Waiting(_)));
    send(&mut sw, &mut rw, ep, &data, 9);
    let done = wait_word(&mut sw, &mut rw, 1);
    assert_eq!(done.status, Status::MessageTruncated);
    assert_eq!(done.info.length, 300);
    assert_eq!(&out[..100], &data[..100]);
    assert!(
        out[100..].iter().all(|&b| b == 0x5a),
        "bytes past the buffer"
    );
}

/// A waiting receive is canceled by its ticket once: its word reports `Canceled`, a later
/// message goes to the next receive, and a ticket whose receive matched names nothing.
#[test]
fn tickets_cancel_waiting_receives_only() {
    let c = ctx();
    let (mut rw, mut sw, ep) = pair(&c);
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    // SAFETY: both buffers outlive their receives (canceled, or waited for below).
    let (ta, tb) = unsafe {
        (
            rw.tag_recv_word(Buf::contig(a.as_mut_ptr(), 8), 5, u64::MAX, 11)
                .unwrap(),
            rw.tag_recv_word(Buf::contig(b.as_mut_ptr(), 8), 5, u64::MAX, 12)
                .unwrap(),
        )
    };
    let (WordRecv::Waiting(ta), WordRecv::Waiting(tb)) = (ta, tb) else {
        panic!("both receives should wait");
    };
    assert!(rw.tag_recv_word_cancel(ta));
    assert!(!rw.tag_recv_word_cancel(ta), "canceled twice");
    let mut seen = Vec::new();
    rw.drain_completed(|c| seen.push((c.word, c.status)));
    assert_eq!(seen, vec![(11, Status::Canceled)]);
    let data = pattern(8, 1);
    send(&mut sw, &mut rw, ep, &data, 5);
    let done = wait_word(&mut sw, &mut rw, 12);
    assert_eq!(done.status, Status::Ok);
    assert_eq!(b.as_slice(), data.as_slice());
    assert_eq!(a, [0u8; 8], "the canceled receive's buffer was written");
    assert!(
        !rw.tag_recv_word_cancel(tb),
        "a matched receive was canceled"
    );
    // A ticket that never existed names nothing either.
    assert!(!rw.tag_recv_word_cancel(ucp::RecvTicket::from_raw([u64::MAX, 5])));
}

/// Word receives and request receives on one tag, and a wildcard word receive, match in
/// posting order.
#[test]
fn word_and_request_receives_keep_posting_order() {
    let c = ctx();
    let (mut rw, mut sw, ep) = pair(&c);
    let mut bufs = [[0u8; 16]; 4];
    let (b0, rest) = bufs.split_at_mut(1);
    let (b1, rest) = rest.split_at_mut(1);
    let (b2, b3) = rest.split_at_mut(1);
    // SAFETY: the buffers outlive the receives: all four are waited for below.
    let (r0, w1, r2, w3) = unsafe {
        (
            rw.tag_recv_nb(Buf::contig(b0[0].as_mut_ptr(), 16), 7, u64::MAX, None)
                .unwrap(),
            rw.tag_recv_word(Buf::contig(b1[0].as_mut_ptr(), 16), 7, u64::MAX, 21)
                .unwrap(),
            rw.tag_recv_nb(Buf::contig(b2[0].as_mut_ptr(), 16), 7, u64::MAX, None)
                .unwrap(),
            // Any tag with the low byte 7.
            rw.tag_recv_word(Buf::contig(b3[0].as_mut_ptr(), 16), 7, 0xff, 23)
                .unwrap(),
        )
    };
    assert!(matches!(w1, WordRecv::Waiting(_)));
    assert!(matches!(w3, WordRecv::Waiting(_)));
    let msgs: Vec<Vec<u8>> = (0..4).map(|i| pattern(16, 40 + i)).collect();
    for (i, m) in msgs.iter().enumerate() {
        // The last one carries another tag that only the wildcard receive matches.
        let tag = if i == 3 { 0x307 } else { 7 };
        send(&mut sw, &mut rw, ep, m, tag);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut words = HashMap::new();
    while words.len() < 2
        || rw.request_test(r0).unwrap().is_none()
        || rw.request_test(r2).unwrap().is_none()
    {
        assert!(Instant::now() < deadline, "timeout");
        sw.progress();
        rw.progress();
        rw.drain_completed(|c| {
            assert!(words.insert(c.word, c).is_none());
        });
    }
    assert_eq!(rw.request_test(r0).unwrap(), Some(Status::Ok));
    assert_eq!(rw.request_test(r2).unwrap(), Some(Status::Ok));
    rw.request_free(r0).unwrap();
    rw.request_free(r2).unwrap();
    assert_eq!(words[&23].info.sender_tag, 0x307);
    assert_eq!(bufs[0].as_slice(), msgs[0].as_slice());
    assert_eq!(bufs[1].as_slice(), msgs[1].as_slice());
    assert_eq!(bufs[2].as_slice(), msgs[2].as_slice());
    assert_eq!(bufs[3].as_slice(), msgs[3].as_slice());
}

/// An owned buffer is refused (it goes back through a request); a worker dropped with
/// word receives still waiting drops them with it.
#[test]
fn owned_buffers_are_refused_and_waiting_receives_drop_with_the_worker() {
    let c = ctx();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    assert_eq!(
        w.tag_recv_word(Buf::from(vec![0u8; 8]), 1, u64::MAX, 1),
        Err(Status::InvalidParam)
    );
    let mut out = vec![0u8; 64];
    for i in 0..10 {
        // SAFETY: `out` outlives the worker, which is dropped below.
        let r = unsafe {
            w.tag_recv_word(Buf::contig(out.as_mut_ptr(), 64), i, u64::MAX, i)
                .unwrap()
        };
        assert!(matches!(r, WordRecv::Waiting(_)));
    }
    drop(w);
    assert!(out.iter().all(|&b| b == 0));
}
