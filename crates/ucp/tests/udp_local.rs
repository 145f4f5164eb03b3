//! udp between two workers of one process: a peer on this host is reached through the
//! loopback interface (its 65000-byte datagrams), not through a network device's
//! (1472-byte datagrams on a 1500-byte MTU), even when the worker has both; every byte
//! of a multi-fragment message is checked.

use std::time::{Duration, Instant};
use ucp::{Buf, Context, Features, ThreadMode, Worker};
use ucs::Status;
use uct::{IfaceConfig, Transport};

fn udp_worker() -> Worker {
    let ctx = Context::with_config(
        Features::TAG,
        ucp::Config {
            transports: vec![Transport::Udp],
            ..ucp::Config::from_env().unwrap()
        },
        IfaceConfig::from_env().unwrap(),
    )
    .unwrap();
    Worker::new(&ctx, ThreadMode::Single).unwrap()
}

#[test]
fn same_host_peer_goes_through_the_loopback_interface() {
    let mut a = udp_worker();
    let mut b = udp_worker();
    let b_addr = b.address();
    let ep = a.ep_create(&b_addr).unwrap();
    let len = 300_000;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut out = vec![0u8; len];
    // SAFETY: `out` and `data` outlive both requests, which complete (or the test fails)
    // before they are dropped.
    let rr = unsafe {
        b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), len), 9, u64::MAX, None)
            .unwrap()
    };
    // SAFETY: as above.
    let sr = unsafe {
        a.tag_send_nb(
            ep,
            Buf::contig(data.as_ptr().cast_mut(), len),
            9,
            false,
            None,
        )
        .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        a.progress();
        b.progress();
        let s_done = sr.map_or(true, |r| a.request_test(r).unwrap().is_some());
        if s_done && b.request_test(rr).unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the message did not arrive");
    }
    if let Some(r) = sr {
        assert_eq!(a.request_test(r).unwrap(), Some(Status::Ok));
        a.request_free(r).unwrap();
    }
    assert_eq!(b.request_test(rr).unwrap(), Some(Status::Ok));
    assert_eq!(b.request_info(rr).unwrap().length, len);
    b.request_free(rr).unwrap();
    assert!(out == data, "the bytes differ");
    assert_eq!(a.ep_transport(ep).unwrap(), Some(Transport::Udp));
    let th = a.ep_thresholds(ep).unwrap().unwrap();
    // A network device's datagrams carry at most 1472 bytes; the loopback's ~65000.
    assert!(th.mid_frag > 60_000, "fragments of {} bytes", th.mid_frag);
    // The message went by rendezvous: the sender put it from its buffer.
    assert!(
        th.put && th.rndv <= len,
        "rendezvous from {} bytes",
        th.rndv
    );
}

/// Several 1 MiB rendezvous sends at once (the puts of later ones queue behind earlier
/// ones' in the sender's window), half of them posted before the receives: every byte
/// of every message arrives, and each send completes only after its data was
/// acknowledged (the sender's buffers are overwritten right after completion).
#[test]
fn concurrent_rendezvous_puts_deliver_every_byte() {
    let mut a = udp_worker();
    let mut b = udp_worker();
    let ep = a.ep_create(&b.address()).unwrap();
    const N: usize = 6;
    let len = 1 << 20;
    let mut data: Vec<Vec<u8>> = (0..N)
        .map(|m| {
            (0..len)
                .map(|i| (i * 13 + i / 509 + m * 31) as u8)
                .collect()
        })
        .collect();
    let want = data.clone();
    let mut out = vec![vec![0u8; len]; N];
    let mut rr = Vec::new();
    for (m, o) in out.iter_mut().enumerate().take(N / 2) {
        // SAFETY: `out` outlives the requests, which complete before it is dropped.
        rr.push(unsafe {
            b.tag_recv_nb(Buf::contig(o.as_mut_ptr(), len), m as u64, u64::MAX, None)
                .unwrap()
        });
    }
    let mut sr = Vec::new();
    for (m, d) in data.iter_mut().enumerate() {
        // SAFETY: `data` outlives the requests, which complete before it is dropped.
        sr.push(unsafe {
            a.tag_send_nb(ep, Buf::contig(d.as_mut_ptr(), len), m as u64, false, None)
                .unwrap()
        });
    }
    for (m, o) in out.iter_mut().enumerate().skip(N / 2) {
        a.progress();
        b.progress();
        // SAFETY: as above.
        rr.push(unsafe {
            b.tag_recv_nb(Buf::contig(o.as_mut_ptr(), len), m as u64, u64::MAX, None)
                .unwrap()
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = [false; N];
    loop {
        a.progress();
        b.progress();
        for (m, r) in sr.iter().enumerate() {
            let done = r.map_or(true, |r| a.request_test(r).unwrap().is_some());
            if done && !sent[m] {
                sent[m] = true;
                // The sender may reuse its buffer now: the receiver must not see this.
                data[m].fill(0xa5);
            }
        }
        let received = rr.iter().all(|&r| b.request_test(r).unwrap().is_some());
        if received && sent.iter().all(|&s| s) {
            break;
        }
        assert!(Instant::now() < deadline, "the messages did not arrive");
    }
    for r in sr.into_iter().flatten() {
        assert_eq!(a.request_test(r).unwrap(), Some(Status::Ok));
        a.request_free(r).unwrap();
    }
    for (m, r) in rr.into_iter().enumerate() {
        assert_eq!(b.request_test(r).unwrap(), Some(Status::Ok));
        assert_eq!(b.request_info(r).unwrap().length, len);
        b.request_free(r).unwrap();
        assert!(out[m] == want[m], "message {m}: the bytes differ");
    }
}

/// A get to a udp peer that dies after it acknowledged the request: nothing of ours is
/// then in flight, so only the probes of an awaited peer can find the death. The get
/// must end with an error soon after `UCX_UDP_TIMEOUT`, not wait forever, and the
/// destination must hold only bytes the peer sent (its pattern) or the zeros it started
/// with.
#[test]
fn get_from_a_peer_that_dies_after_acknowledging_fails() {
    let udp_worker_with = |features| {
        let mut ifc = IfaceConfig::from_env().unwrap();
        ifc.udp.timeout = Duration::from_millis(300);
        let ctx = Context::with_config(
            features,
            ucp::Config {
                transports: vec![Transport::Udp],
                ..ucp::Config::from_env().unwrap()
            },
            ifc,
        )
        .unwrap();
        (ctx.clone(), Worker::new(&ctx, ThreadMode::Single).unwrap())
    };
    let (_ca, mut a) = udp_worker_with(Features::RMA);
    let (cb, mut b) = udp_worker_with(Features::RMA);
    let len = 64 << 20;
    let pattern: Vec<u8> = (0..len).map(|i| (i * 13 + i / 4099) as u8).collect();
    let mut region = pattern.clone();
    // SAFETY: `region` outlives the mapping, which `mem` drops before the end.
    let mem = unsafe { cb.mem_map(Some(region.as_mut_ptr()), len) }.unwrap();
    let base = region.as_ptr() as u64;
    let ep = a.ep_create(&b.address()).unwrap();
    let rk = a.rkey_unpack(ep, &mem.rkey_pack()).unwrap();
    let mut dst = vec![0u8; len];
    // SAFETY: `dst` outlives the request, which completes (or the test fails) first.
    let r = unsafe { a.get_nb(ep, Buf::contig(dst.as_mut_ptr(), len), base, &rk, None) }
        .unwrap()
        .expect("a 64 MiB get over udp cannot complete in the call");
    // The target takes the request and answers part of it, then dies (its socket
    // closes with the worker); the origin acknowledged everything it got.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        a.progress();
        if b.progress() > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the request never reached the target"
        );
    }
    for _ in 0..3 {
        a.progress();
    }
    assert_eq!(
        a.request_test(r).unwrap(),
        None,
        "the answer is not all there yet"
    );
    drop(mem);
    drop(b);
    let died = Instant::now();
    let status = loop {
        a.progress();
        if let Some(s) = a.request_test(r).unwrap() {
            break s;
        }
        assert!(
            died.elapsed() < Duration::from_secs(8),
            "the get still waits for a dead peer"
        );
        std::thread::sleep(Duration::from_micros(200));
    };
    assert_ne!(status, Status::Ok);
    a.request_free(r).unwrap();
    assert!(
        dst.iter().zip(&pattern).all(|(&d, &p)| d == p || d == 0),
        "bytes that the peer never sent"
    );
}
