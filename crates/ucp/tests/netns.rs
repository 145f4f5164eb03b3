//! Several hosts made of network namespaces joined by a bridge (created and removed by
//! the tests; skipped with a message when not root): tag, active-message, stream and RMA
//! traffic between hosts, every byte checked, and never over shared memory. Also: a peer
//! killed in the middle of a transfer fails only its own endpoint, leaks no descriptors,
//! and the survivor keeps working with a third peer.

mod common;

use common::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucp::am::AmSendFlags;
use ucp::{AmAction, AmData, AtomicOp, AtomicSize, Buf, Ep, RmaPath, Worker};
use ucs::Status;

const REGION: usize = 4 << 20;

/// Active messages a handler kept: descriptor, header, reply endpoint.
type Kept = Arc<Mutex<Vec<(ucp::AmDesc, Vec<u8>, Option<Ep>)>>>;

/// Serves every client: echoes tag messages (tag's high half names the client), active
/// messages and stream bytes, and owns a region for RMA. Stops after `n` stop tags.
fn role_server(args: &str) {
    let n: usize = args.parse().unwrap();
    let mut w = worker();
    println!("@@ {}", hex(&w.address()));
    let eps: Vec<Ep> = (0..n)
        .map(|_| w.ep_create(&unhex(&stdin_line())).unwrap())
        .collect();
    let ctx = w.context().clone();
    let mem = ctx.mem_alloc(REGION).unwrap();
    println!("@@ {} {}", mem.address() as u64, hex(&mem.rkey_pack()));
    let ams: Kept = Arc::default();
    let a2 = ams.clone();
    w.am_set_handler(
        7,
        Some(Box::new(move |m| {
            assert!(matches!(m.data, AmData::Eager(_)));
            a2.lock()
                .unwrap()
                .push((m.desc, m.header.to_vec(), m.reply_ep));
            AmAction::Keep
        })),
    );
    let mut buf = vec![0u8; 16 << 20];
    // SAFETY: `buf` outlives every receive posted into it (each waited before the next).
    let mut rr = unsafe {
        w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), 0, 0, None)
            .unwrap()
    };
    let mut stops = 0;
    let mut sbuf = vec![0u8; 1 << 20];
    while stops < n {
        let mut idle = w.progress() == 0;
        if let Some(st) = w.request_test(rr).unwrap() {
            assert_eq!(st, Status::Ok);
            let info = w.request_info(rr).unwrap();
            w.request_free(rr).unwrap();
            let client = (info.sender_tag >> 32) as usize;
            if info.sender_tag & 0xffff_ffff == 0xffff_ffff {
                stops += 1;
            } else {
                w.tag_send(eps[client], &buf[..info.length], info.sender_tag)
                    .unwrap();
            }
            // SAFETY: as above.
            rr = unsafe {
                w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), 0, 0, None)
                    .unwrap()
            };
            idle = false;
        }
        let kept: Vec<_> = ams.lock().unwrap().drain(..).collect();
        for (desc, header, reply) in kept {
            let data = w.am_data(desc).unwrap().to_vec();
            w.am_data_release(desc).unwrap();
            w.am_send(reply.unwrap(), 8, &header, &data, AmSendFlags::default())
                .unwrap();
            idle = false;
        }
        for &ep in &eps {
            // Stream: whatever arrived goes straight back.
            // SAFETY: `sbuf` lives for the whole loop and the receive completes in the call
            // or is aborted right away.
            match unsafe {
                w.stream_recv_nb(ep, Buf::contig(sbuf.as_mut_ptr(), sbuf.len()), false, None)
                    .unwrap()
            } {
                ucp::stream::StreamRecv::Done(k) => {
                    w.stream_send(ep, &sbuf[..k]).unwrap();
                    idle = false;
                }
                ucp::stream::StreamRecv::Pending(r) => {
                    w.request_abort(r).unwrap();
                    w.request_free(r).unwrap();
                }
            }
        }
        if idle {
            w.wait(1).unwrap();
        }
    }
    w.request_abort(rr).unwrap();
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    println!("@@ done");
    assert_eq!(stdin_line(), "bye");
}

/// Runs every kind of traffic against the server and reports the transport used.
fn role_client(args: &str) {
    let id: u64 = args.parse().unwrap();
    let mut w = worker();
    println!("@@ {}", hex(&w.address()));
    let ep = w.ep_create(&unhex(&stdin_line())).unwrap();
    let key_line = stdin_line();
    let (base, key) = key_line.split_once(' ').unwrap();
    let base: u64 = base.parse().unwrap();
    // Tag: sizes around the fragment size, up to 16 MiB.
    let mut back = vec![0u8; 16 << 20];
    for (i, len) in [
        0usize,
        1,
        255,
        256,
        257,
        65_535,
        65_536,
        65_537,
        1 << 20,
        16 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let tag = id << 32 | i as u64;
        let data = pattern(len, tag);
        w.tag_send(ep, &data, tag).unwrap();
        let info = w.tag_recv(&mut back, tag, u64::MAX).unwrap();
        assert!(
            info.length == len && back[..len] == data[..],
            "tag echo of {len} bytes"
        );
    }
    println!("@@ transport {:?}", w.ep_transport(ep).unwrap().unwrap());
    // Active messages with a reply endpoint.
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let g2 = got.clone();
    w.am_set_handler(
        8,
        Some(Box::new(move |m| {
            if let AmData::Eager(d) = m.data {
                g2.lock().unwrap().push(d.to_vec());
            }
            AmAction::Done
        })),
    );
    for len in [0usize, 1, 1000, 60_000] {
        let data = pattern(len, 99 + id);
        w.am_send(
            ep,
            7,
            b"h",
            &data,
            AmSendFlags {
                reply: true,
                ..Default::default()
            },
        )
        .unwrap();
        let deadline = Instant::now() + TIMEOUT;
        while got.lock().unwrap().is_empty() {
            if w.progress() == 0 {
                w.wait(1).unwrap();
            }
            assert!(Instant::now() < deadline, "no AM reply");
        }
        assert!(
            got.lock().unwrap().remove(0) == data,
            "AM echo of {len} bytes"
        );
    }
    // Stream: uneven pieces out, exact pieces back.
    let total = 500_000;
    let sdata = pattern(total, 7 + id);
    for chunk in sdata.chunks(33_333) {
        w.stream_send(ep, chunk).unwrap();
    }
    let mut sback = vec![0u8; total];
    let mut off = 0;
    while off < total {
        let n = 77_777.min(total - off);
        assert_eq!(
            w.stream_recv(ep, &mut sback[off..off + n], true).unwrap(),
            n
        );
        off += n;
    }
    assert!(sback == sdata, "stream echo");
    // RMA and atomics, emulated by the server over tcp.
    let rk = w.rkey_unpack(ep, &unhex(key)).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Emulated);
    let slot = base + id * (1 << 20);
    for len in [1usize, 4096, 1 << 20] {
        let data = pattern(len, len as u64 + id);
        w.put(ep, &data, slot, &rk).unwrap();
        let mut b = vec![0u8; len];
        w.get(ep, &mut b, slot, &rk).unwrap();
        assert!(b == data, "RMA of {len} bytes");
    }
    let word = base + (REGION as u64 - 64);
    for _ in 0..100 {
        w.atomic_post(ep, AtomicOp::Add, AtomicSize::B64, 1, word, &rk)
            .unwrap();
    }
    w.flush_ep_blocking(ep).unwrap();
    println!("@@ ok");
    w.tag_send(ep, &[], id << 32 | 0xffff_ffff).unwrap();
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    assert_eq!(stdin_line(), "bye");
}

/// Streams forever to the test (to be killed in the middle).
fn role_streamer() {
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let data = pattern(8 << 20, 1);
    println!("@@ ready");
    loop {
        let _ = w.tag_send(ep, &data, 5);
    }
}

#[test]
fn peer_main() {
    let Ok(role) = std::env::var("RUCX_TEST_ROLE") else {
        return;
    };
    let args = std::env::var("RUCX_TEST_ARGS").unwrap_or_default();
    match role.as_str() {
        "server" => role_server(&args),
        "client" => role_client(&args),
        "streamer" => role_streamer(),
        "echo" => role_echo_small(),
        r => panic!("unknown role {r}"),
    }
}

fn role_echo_small() {
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let info = w.tag_recv(&mut buf, 0, 0).unwrap();
        if info.sender_tag == STOP_TAG {
            break;
        }
        w.tag_send(ep, &buf[..info.length], info.sender_tag)
            .unwrap();
    }
    println!("@@ done");
    assert_eq!(stdin_line(), "bye");
}

fn hosts_case(n_hosts: usize) {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(h) = Hosts::new(n_hosts) else { return };
    let clients = n_hosts - 1;
    let mut server = Peer::spawn_in(Some(&h.names[0]), "server", &clients.to_string(), &[]);
    let saddr = server.line();
    let mut cs: Vec<Peer> = (0..clients)
        .map(|i| Peer::spawn_in(Some(&h.names[i + 1]), "client", &i.to_string(), &[]))
        .collect();
    for c in cs.iter_mut() {
        let caddr = c.line();
        server.send(&caddr);
    }
    let key = server.line();
    for c in cs.iter_mut() {
        c.send(&saddr);
        c.send(&key);
    }
    for c in cs.iter_mut() {
        assert_eq!(
            c.line(),
            "transport Tcp",
            "hosts talk over tcp, never shared memory"
        );
        assert_eq!(c.line(), "ok");
    }
    assert_eq!(server.line(), "done");
    for mut c in cs {
        c.send("bye");
        c.finish();
    }
    server.send("bye");
    server.finish();
    drop(h);
}

#[test]
fn two_hosts() {
    hosts_case(2);
}

#[test]
fn three_hosts() {
    hosts_case(3);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Over tcp on one host: a peer killed while it streams to us fails its endpoint only.
#[test]
fn killed_peer_fails_only_its_endpoint() {
    killed_peer_case("tcp", uct::Transport::Tcp);
}

/// The same over shared memory: the peer's death is seen through its process descriptor.
#[test]
fn killed_shm_peer_fails_only_its_endpoint() {
    killed_peer_case("shm", uct::Transport::Shm);
}

fn killed_peer_case(tls: &str, transport: uct::Transport) {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let tcp = [("UCX_TLS", tls)];
    let cfg = ucp::Config {
        transports: vec![transport],
        ..ucp::Config::from_env().unwrap()
    };
    let ctx = ucp::Context::with_config(
        ucp::Features::TAG,
        cfg,
        uct::IfaceConfig::from_env().unwrap(),
    )
    .unwrap();
    let mut w = Worker::new(&ctx, ucp::ThreadMode::Single).unwrap();
    let _ = w.address();
    let before = open_fds();
    let mut victim = Peer::spawn_env("streamer", "", &tcp);
    let vep = connect(&mut w, &mut victim);
    let failed = Arc::new(Mutex::new(Vec::new()));
    let f2 = failed.clone();
    w.ep_set_err_handler(vep, Some(Box::new(move |_, s| f2.lock().unwrap().push(s))))
        .unwrap();
    let mut third = Peer::spawn_env("echo", "", &tcp);
    let tep = connect(&mut w, &mut third);
    assert_eq!(victim.line(), "ready");
    w.ep_connect(vep).unwrap();
    assert_eq!(w.ep_transport(vep).unwrap(), Some(transport));
    // Receive part of the stream, start sending a large message to the victim, kill it.
    let mut buf = vec![0u8; 8 << 20];
    w.tag_recv(&mut buf, 5, u64::MAX).unwrap();
    let big = pattern(32 << 20, 3);
    // SAFETY: `big` outlives the request (completed with an error below).
    let sr = unsafe {
        w.tag_send_nb(
            vep,
            Buf::contig(big.as_ptr().cast_mut(), big.len()),
            9,
            false,
            None,
        )
        .unwrap()
    };
    victim.kill();
    let deadline = Instant::now() + TIMEOUT;
    while failed.lock().unwrap().is_empty() {
        if w.progress() == 0 {
            w.wait(1).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the victim's endpoint never failed"
        );
    }
    assert_eq!(
        failed.lock().unwrap().len(),
        1,
        "one error, for the victim's endpoint"
    );
    if let Some(r) = sr {
        let s = w.wait_request(r, TIMEOUT).unwrap();
        assert!(
            s.is_err(),
            "the send to the dead peer completes with an error, got {s}"
        );
    }
    assert!(w.tag_send(vep, b"x", 1).is_err());
    // The third peer still works.
    for i in 0..50u64 {
        let data = pattern(100_000, i);
        w.tag_send(tep, &data, 1000 + i).unwrap();
        let info = w.tag_recv(&mut buf, 1000 + i, u64::MAX).unwrap();
        assert!(buf[..info.length] == data[..]);
    }
    w.tag_send(tep, &[], STOP_TAG).unwrap();
    assert_eq!(third.line(), "done");
    third.send("bye");
    third.finish();
    // The test's own pipes to the victim go too.
    drop(victim);
    // Close both endpoints; the connections from the peers closed on their exits.
    for ep in [vep, tep] {
        if let Some(r) = w.ep_close_nb(ep, true).unwrap() {
            w.wait_request(r, TIMEOUT).unwrap();
        }
    }
    let deadline = Instant::now() + TIMEOUT;
    while open_fds() != before {
        w.progress();
        assert!(
            Instant::now() < deadline,
            "descriptors leaked: {} before, {} after",
            before,
            open_fds()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
