//! Active messages (eager and rendezvous, 0 B to 64 MiB, reply endpoints, data kept by a
//! handler and released later) and streams (ordered bytes; "whatever is there" and
//! "exactly N") between processes, every byte checked.

mod common;

use common::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use ucp::am::AmSendFlags;
use ucp::{AmAction, AmData, AmDesc, Ep, Worker};

/// What a handler saw: kept descriptor, header, whether eager, length, reply endpoint.
type Seen = Arc<Mutex<Vec<(AmDesc, Vec<u8>, bool, usize, Option<Ep>)>>>;

fn collector(w: &mut Worker, id: u16) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    w.am_set_handler(
        id,
        Some(Box::new(move |m| {
            let (eager, len) = match m.data {
                AmData::Eager(d) => (true, d.len()),
                AmData::Rndv { length } => (false, length),
            };
            s.lock()
                .unwrap()
                .push((m.desc, m.header.to_vec(), eager, len, m.reply_ep));
            AmAction::Keep
        })),
    );
    seen
}

/// Waits for the next message the collector kept and takes its data out of the worker.
fn next_msg(w: &mut Worker, seen: &Seen) -> (Vec<u8>, Vec<u8>, bool, Option<Ep>) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let m = {
            let mut v = seen.lock().unwrap();
            (!v.is_empty()).then(|| v.remove(0))
        };
        if let Some((desc, header, eager, len, reply)) = m {
            let mut data = vec![0u8; len];
            if eager {
                data.copy_from_slice(w.am_data(desc).expect("kept data"));
                w.am_data_release(desc).unwrap();
                assert!(w.am_data(desc).is_none(), "released data is gone");
            } else {
                assert_eq!(w.am_recv_data(desc, &mut data).unwrap(), len);
            }
            return (header, data, eager, reply);
        }
        if w.progress() == 0 {
            w.wait(1).unwrap();
        }
        assert!(Instant::now() < deadline, "no active message arrived");
    }
}

fn role_am_echo() {
    let mut w = worker();
    let _ep = peer_connect(&mut w);
    let seen = collector(&mut w, 5);
    loop {
        let (header, data, _, reply) = next_msg(&mut w, &seen);
        let reply = reply.expect("the test asks for a reply endpoint");
        if header == b"stop" {
            break;
        }
        w.am_send(reply, 6, &header, &data, AmSendFlags::default())
            .unwrap();
    }
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    println!("@@ done");
    assert_eq!(stdin_line(), "bye");
}

fn role_stream_echo(args: &str) {
    let total: usize = args.parse().unwrap();
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let mut echoed = 0;
    let mut buf = vec![0u8; 100_000];
    while echoed < total {
        // Whatever is there, then straight back.
        let n = w.stream_recv(ep, &mut buf, false).unwrap();
        assert!(n > 0);
        w.stream_send(ep, &buf[..n]).unwrap();
        echoed += n;
    }
    assert_eq!(echoed, total, "the stream carried more than was sent");
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
        "am-echo" => role_am_echo(),
        "stream-echo" => role_stream_echo(&args),
        r => panic!("unknown role {r}"),
    }
}

#[test]
fn active_messages_eager_and_rendezvous_echo() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn("am-echo", "");
    let mut w = worker();
    let ep = connect(&mut w, &mut p);
    let seen = collector(&mut w, 6);
    let header = b"hdr-1234".to_vec();
    let mut eager_seen = false;
    let mut rndv_seen = false;
    for (i, len) in [
        0usize,
        1,
        100,
        8000,
        8167,
        8168,
        8169,
        65_536,
        1 << 20,
        (1 << 20) + 1,
        64 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, i as u64);
        w.am_send(
            ep,
            5,
            &header,
            &data,
            AmSendFlags {
                reply: true,
                ..Default::default()
            },
        )
        .unwrap();
        let (h, back, eager, _) = next_msg(&mut w, &seen);
        assert_eq!(h, header);
        assert!(
            back == data,
            "active message of {len} bytes came back different"
        );
        eager_seen |= eager;
        rndv_seen |= !eager;
    }
    assert!(eager_seen && rndv_seen, "both protocols were used");
    // Forced protocols.
    let data = pattern(50, 9);
    w.am_send(
        ep,
        5,
        b"r",
        &data,
        AmSendFlags {
            reply: true,
            rndv: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(next_msg(&mut w, &seen).1, data);
    assert_eq!(
        w.am_send(
            ep,
            5,
            b"e",
            &pattern(20_000, 1),
            AmSendFlags {
                eager: true,
                ..Default::default()
            }
        ),
        Err(ucs::Status::InvalidParam),
        "a message too large for one eager transport message"
    );
    w.am_send(
        ep,
        5,
        b"stop",
        &[],
        AmSendFlags {
            reply: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(p.line(), "done");
    p.send("bye");
    p.finish();
}

#[test]
fn stream_bytes_arrive_in_order() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let total = 3_000_000usize;
    let mut p = Peer::spawn("stream-echo", &total.to_string());
    let mut w = worker();
    let ep = connect(&mut w, &mut p);
    let data = pattern(total, 77);
    // Send in uneven pieces without waiting, receive exactly-N pieces of other sizes.
    let pieces = [1usize, 7, 4096, 9000, 100_000, 65_537, 3];
    let mut reqs = Vec::new();
    let mut off = 0;
    let mut k = 0;
    while off < total {
        let n = pieces[k % pieces.len()].min(total - off);
        // SAFETY: `data` outlives the requests, all waited for below.
        reqs.push(unsafe {
            w.stream_send_nb(
                ep,
                ucp::Buf::contig(data.as_ptr().add(off).cast_mut(), n),
                None,
            )
            .unwrap()
        });
        off += n;
        k += 1;
    }
    let mut back = vec![0u8; total];
    let mut got = 0;
    let sizes = [5usize, 70_000, 1, 12_345];
    k = 0;
    while got < total {
        let n = sizes[k % sizes.len()].min(total - got);
        assert_eq!(w.stream_recv(ep, &mut back[got..got + n], true).unwrap(), n);
        got += n;
        k += 1;
    }
    for r in reqs.into_iter().flatten() {
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), ucs::Status::Ok);
    }
    assert!(back == data, "stream bytes differ");
    assert_eq!(p.line(), "done");
    assert_eq!(
        w.stream_recv_data(ep).unwrap(),
        None,
        "nothing more on the stream"
    );
    p.send("bye");
    p.finish();
}

/// Stream receives on a worker's endpoint to itself: bytes already received are taken in
/// the call (`Done`) when the first piece satisfies the receive, and otherwise through a
/// request that spans pieces; every byte in order.
#[test]
fn stream_receive_in_the_call_and_across_pieces() {
    use std::time::Duration;
    use ucp::stream::StreamRecv;
    use ucp::{Buf, Context, Features, ThreadMode};
    use ucs::Status;
    let c = Context::new(Features::STREAM).unwrap();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = w.address();
    let ep = w.ep_create(&addr).unwrap();
    let sent: Vec<u8> = (0..64u8).collect();
    // Two pieces of 16 bytes, then one of 32.
    w.stream_send(ep, &sent[..16]).unwrap();
    w.stream_send(ep, &sent[16..32]).unwrap();
    w.stream_send(ep, &sent[32..]).unwrap();
    for _ in 0..10 {
        w.progress();
    }
    let mut got = Vec::new();
    // 8 of the first piece's 16: in the call.
    let mut b = [0u8; 8];
    // SAFETY: `b` outlives the receive, which completes in the call (asserted).
    let r = unsafe { w.stream_recv_nb(ep, Buf::contig(b.as_mut_ptr(), 8), true, None) }.unwrap();
    assert!(matches!(r, StreamRecv::Done(8)), "{r:?}");
    got.extend_from_slice(&b);
    // 20 with waitall: the rest of the first piece is 8, so it spans pieces (a request).
    let mut b = [0u8; 20];
    // SAFETY: as above; waited for below.
    let r = unsafe { w.stream_recv_nb(ep, Buf::contig(b.as_mut_ptr(), 20), true, None) }.unwrap();
    match r {
        StreamRecv::Done(n) => assert_eq!(n, 20),
        StreamRecv::Pending(q) => {
            assert_eq!(w.wait_done(q, Duration::from_secs(30)).unwrap(), Status::Ok);
            assert_eq!(w.request_info(q).unwrap().length, 20);
            w.request_free(q).unwrap();
        }
    }
    got.extend_from_slice(&b);
    // Without waitall, 100 bytes of room: 4 left of the second piece plus the 32 of the
    // third (both here): everything there is, 36 bytes.
    let mut b = [0u8; 100];
    // SAFETY: as above.
    let r = unsafe { w.stream_recv_nb(ep, Buf::contig(b.as_mut_ptr(), 100), false, None) }.unwrap();
    let n = match r {
        StreamRecv::Done(n) => n,
        StreamRecv::Pending(q) => {
            assert_eq!(w.wait_done(q, Duration::from_secs(30)).unwrap(), Status::Ok);
            let n = w.request_info(q).unwrap().length;
            w.request_free(q).unwrap();
            n
        }
    };
    assert_eq!(n, 36);
    got.extend_from_slice(&b[..n]);
    assert_eq!(got, sent);
}
